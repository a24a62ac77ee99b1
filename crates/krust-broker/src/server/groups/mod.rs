//! The group coordinator runtime (Kafka's `GroupCoordinatorService` for the classic
//! protocol): one [`crate::group::GroupCoordinatorShard`] per `__consumer_offsets`
//! partition this broker leads, its records written through the replica manager, loaded on
//! election and unloaded on resignation.
//!
//! CONTRACT (used by [`super::apis`] and [`super::publisher`]):
//! [`GroupCoordinator::apis`] lists the APIs and versions it serves (FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete); [`GroupCoordinator::handle`] answers one.
//! The publisher calls [`GroupCoordinator::on_elected`] / [`GroupCoordinator::on_resigned`]
//! for `__consumer_offsets` partitions and [`GroupCoordinator::on_metadata`] with every image.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind};
use krust_metadata::image::MetadataImage;
use krust_net::{Reply, RequestContext};

use super::BrokerConfig;
use super::controller_channel::ControllerChannel;
use super::replica_manager::ReplicaManager;

/// The group coordinator of one broker.
pub struct GroupCoordinator {
    _replicas: Arc<ReplicaManager>,
}

impl GroupCoordinator {
    /// For this broker; `channel` creates `__consumer_offsets` when a FindCoordinator needs it.
    #[must_use]
    pub fn new(
        _config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        _channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        GroupCoordinator {
            _replicas: replicas,
        }
    }

    /// The APIs served, with version ranges.
    #[must_use]
    pub fn apis() -> Vec<(ApiKey, i16, i16)> {
        todo!("groups")
    }

    /// Answers one group API request.
    pub async fn handle(&self, _ctx: &RequestContext, _request: RequestKind) -> Reply {
        todo!("groups")
    }

    /// This broker became leader of `__consumer_offsets` partition `partition` at `leader_epoch`.
    pub fn on_elected(&self, _partition: i32, _leader_epoch: i32) {
        todo!("groups")
    }

    /// This broker stopped leading `partition` (`leader_epoch` the new one, if known).
    pub fn on_resigned(&self, _partition: i32, _leader_epoch: Option<i32>) {
        todo!("groups")
    }

    /// A new metadata image (topic deletions, partition counts of `__consumer_offsets`).
    pub fn on_metadata(&self, _image: &MetadataImage) {
        todo!("groups")
    }

    /// Stops every shard (broker shutdown).
    pub async fn shutdown(&self) {
        todo!("groups")
    }
}
