//! The broker's metadata publishers (Kafka's `BrokerMetadataPublisher` and the publishers it
//! drives): each is a [`MetadataPublisher`] the node's metadata loader calls with every new
//! image, in the order [`super::Broker::metadata_publishers`] gives.
//!
//! - [`DynamicConfigPublisher`]: topic and broker config changes reach the hosted partitions
//!   (Kafka's `DynamicConfigPublisher` → `TopicConfigHandler`).
//! - [`ReplicaManagerPublisher`]: this broker's replica changes — logs opened and deleted,
//!   leaders and followers made, replication told which partitions to fetch — then the image
//!   becomes visible to Metadata requests (Kafka's `ReplicaManager.applyDelta` and metadata
//!   cache).
//! - [`GroupCoordinatorPublisher`]: `__consumer_offsets` leadership and deleted topics reach
//!   the group coordinator (Kafka's `BrokerMetadataPublisher.updateCoordinator` and
//!   `onPartitionsDeleted`).
//!
//! Each is a handle over the broker's shared state and does nothing once the broker has shut
//! down.

use std::sync::Arc;

use krust_metadata::image::topics::TopicPartition;
use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};

use super::Broker;
use super::publisher::GROUP_METADATA_TOPIC_NAME;
use super::replica_manager::lock;

/// Topic and broker config changes to the hosted partitions (see the module doc).
#[derive(Debug)]
pub struct DynamicConfigPublisher {
    broker: Arc<Broker>,
}

impl DynamicConfigPublisher {
    /// For `broker`.
    #[must_use]
    pub fn new(broker: Arc<Broker>) -> Self {
        DynamicConfigPublisher { broker }
    }
}

impl MetadataPublisher for DynamicConfigPublisher {
    fn name(&self) -> &str {
        "DynamicConfigPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        let broker = &self.broker;
        broker.while_open(|| {
            broker
                .publisher
                .apply_configs(&broker.replicas, delta, image);
        });
    }
}

/// This broker's replica changes, replication, and the image for Metadata requests (see the
/// module doc).
#[derive(Debug)]
pub struct ReplicaManagerPublisher {
    broker: Arc<Broker>,
}

impl ReplicaManagerPublisher {
    /// For `broker`.
    #[must_use]
    pub fn new(broker: Arc<Broker>) -> Self {
        ReplicaManagerPublisher { broker }
    }
}

impl MetadataPublisher for ReplicaManagerPublisher {
    fn name(&self) -> &str {
        "ReplicaManagerPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        let broker = &self.broker;
        broker.while_open(|| {
            let applied = broker.publisher.apply(&broker.replicas, delta, image);
            if let Some(replication) = &broker.replication {
                if !applied.stop_following.is_empty() {
                    replication.stop_following(&applied.stop_following);
                }
                if !applied.followers.is_empty() {
                    replication.become_follower(applied.followers);
                }
            }
        });
    }
}

/// `__consumer_offsets` leadership and topic deletions to the group coordinator (see the
/// module doc). Registered after [`ReplicaManagerPublisher`]: a shard loads from a partition
/// this broker already leads.
#[derive(Debug)]
pub struct GroupCoordinatorPublisher {
    broker: Arc<Broker>,
}

impl GroupCoordinatorPublisher {
    /// For `broker` (which has a group coordinator; otherwise this publisher does nothing).
    #[must_use]
    pub fn new(broker: Arc<Broker>) -> Self {
        GroupCoordinatorPublisher { broker }
    }
}

impl MetadataPublisher for GroupCoordinatorPublisher {
    fn name(&self) -> &str {
        "GroupCoordinatorPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        let broker = &self.broker;
        let Some(groups) = &broker.groups else {
            return;
        };
        broker.while_open(|| {
            let changes = delta.local_changes(broker.config.node_id);
            let offsets = |tp: &&TopicPartition| tp.topic == GROUP_METADATA_TOPIC_NAME;
            for tp in changes.deletes.iter().filter(offsets) {
                groups.on_resigned(tp.partition, None);
            }
            for (tp, info) in changes.followers.iter().filter(|(tp, _)| offsets(tp)) {
                // Unloads a shard of an older leader epoch only.
                groups.on_resigned(tp.partition, Some(info.partition.leader_epoch));
            }
            for tp in changes.leaders.keys().filter(offsets) {
                // Only a partition the replica manager really made leader (its log opened);
                // a shard already loaded at this epoch is left alone.
                let led = broker.replicas.partition(tp).and_then(|partition| {
                    let p = lock(&partition);
                    p.is_leader().then(|| p.leader_epoch())
                });
                if let Some(leader_epoch) = led {
                    groups.on_elected(tp.partition, leader_epoch);
                }
            }
            groups.on_metadata(image);
        });
    }
}
