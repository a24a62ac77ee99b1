//! Replication (Kafka's `ReplicaFetcherManager`, `AlterPartitionManager` and the ISR parts
//! of `Partition`): one fetcher per source broker batching partitions, truncation by
//! diverging epoch, and ISR shrink/expand proposed to the controller with AlterPartition.
//!
//! CONTRACT (used by [`super::publisher`] and [`super::apis`]):
//! the publisher calls [`ReplicationManager::become_follower`] for partitions this broker now
//! follows (new leader or epoch) and [`ReplicationManager::stop_following`] for partitions it
//! leads or no longer hosts; the fetch handler calls
//! [`ReplicationManager::on_follower_fetch`] after recording a follower's fetch on a leader
//! (ISR expansion check).

use std::sync::Arc;

use krust_metadata::image::topics::TopicPartition;

use super::BrokerConfig;
use super::controller_channel::ControllerChannel;
use super::replica_manager::ReplicaManager;

/// A partition this broker follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// Its topic id (Fetch v13+).
    pub topic_id: uuid::Uuid,
    /// The leader's broker id.
    pub leader_id: i32,
    /// The leader epoch.
    pub leader_epoch: i32,
}

/// Replication of one broker.
pub struct ReplicationManager {
    _replicas: Arc<ReplicaManager>,
}

impl ReplicationManager {
    /// For this broker.
    #[must_use]
    pub fn new(
        _config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        _channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        ReplicationManager {
            _replicas: replicas,
        }
    }

    /// Starts (or re-targets) fetching for these partitions.
    pub fn become_follower(&self, _partitions: Vec<FollowedPartition>) {
        todo!("replication")
    }

    /// Stops fetching for these partitions.
    pub fn stop_following(&self, _partitions: &[TopicPartition]) {
        todo!("replication")
    }

    /// A follower's fetch was recorded on a partition this broker leads.
    pub fn on_follower_fetch(&self, _tp: &TopicPartition, _replica_id: i32) {
        todo!("replication")
    }

    /// Stops every fetcher and the ISR tasks.
    pub async fn shutdown(&self) {
        todo!("replication")
    }
}
