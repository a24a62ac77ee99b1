//! The committed metadata of the in-test controllers (`groups_runtime_broker`,
//! `replication_cluster`): the image, every committed record, and the brokers each commit is
//! published to, as the controller's log and the brokers' metadata loaders would.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_response::{
    PartitionData as AlterPartitionResult, TopicData as AlterTopicResult,
};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};
use krust_broker::server::Broker;
use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance, Publication};
use krust_metadata::records::{MetadataRecord, PartitionChangeRecord};

/// What the in-test controller has committed, and who hears of it.
#[derive(Default)]
pub struct MetadataLog {
    pub image: MetadataImage,
    /// Every committed record, to replay into a (re)started broker.
    pub log: Vec<MetadataRecord>,
    /// Offset of the last commit (one per `commit`).
    pub offset: i64,
    pub brokers: BTreeMap<i32, Weak<Broker>>,
}

impl MetadataLog {
    /// Commits `records` and publishes the new image to every live broker.
    pub fn commit(&mut self, records: &[MetadataRecord]) {
        let mut delta = MetadataDelta::new(&self.image);
        for record in records {
            delta.replay(record).expect("record fits the image");
        }
        self.log.extend(records.iter().cloned());
        self.offset += 1;
        let image = delta.apply(MetadataProvenance::new(self.offset, 1, 0));
        self.image = image.clone();
        let publication = Publication { delta, image };
        for broker in self.brokers.values().filter_map(Weak::upgrade) {
            broker.publish(&publication);
        }
    }

    /// Publishes everything so far to a (re)started broker, as a snapshot load would, and
    /// publishes later commits to it.
    pub fn attach(&mut self, node_id: i32, broker: &Arc<Broker>) {
        self.brokers.insert(node_id, Arc::downgrade(broker));
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for record in &self.log {
            delta.replay(record).expect("logged record");
        }
        let image = delta.apply(MetadataProvenance::new(self.offset, 1, 0));
        broker.publish(&Publication { delta, image });
    }

    /// AlterPartition as Kafka's controller checks it, then a PartitionChangeRecord;
    /// `refuse_with` answers every partition that exists with that error code instead.
    pub fn alter_partition(
        &mut self,
        request: &AlterPartitionRequest,
        refuse_with: Option<i16>,
    ) -> AlterPartitionResponse {
        let mut response = AlterPartitionResponse::default();
        for topic in &request.topics {
            let mut results = Vec::new();
            for p in &topic.partitions {
                let result =
                    AlterPartitionResult::default().with_partition_index(p.partition_index);
                let Some(current) = self
                    .image
                    .topics
                    .partition(topic.topic_id, p.partition_index)
                    .cloned()
                else {
                    results.push(
                        result.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                    );
                    continue;
                };
                if let Some(code) = refuse_with {
                    results.push(result.with_error_code(code));
                    continue;
                }
                let error = if p.leader_epoch < current.leader_epoch {
                    Some(ResponseError::FencedLeaderEpoch)
                } else if request.broker_id.0 != current.leader {
                    Some(ResponseError::InvalidRequest)
                } else if p.partition_epoch != current.partition_epoch {
                    Some(ResponseError::InvalidUpdateVersion)
                } else {
                    None
                };
                if let Some(error) = error {
                    results.push(result.with_error_code(error.code()));
                    continue;
                }
                let new_isr: Vec<i32> = p
                    .new_isr_with_epochs
                    .iter()
                    .map(|b| b.broker_id.0)
                    .collect();
                self.commit(&[MetadataRecord::PartitionChange(PartitionChangeRecord {
                    partition_id: p.partition_index,
                    topic_id: topic.topic_id,
                    isr: Some(new_isr),
                    ..Default::default()
                })]);
                let now = self
                    .image
                    .topics
                    .partition(topic.topic_id, p.partition_index)
                    .cloned()
                    .expect("still there");
                results.push(
                    result
                        .with_leader_id(BrokerId(now.leader))
                        .with_leader_epoch(now.leader_epoch)
                        .with_isr(now.isr.iter().map(|&b| BrokerId(b)).collect())
                        .with_partition_epoch(now.partition_epoch),
                );
            }
            response.topics.push(
                AlterTopicResult::default()
                    .with_topic_id(topic.topic_id)
                    .with_partitions(results),
            );
        }
        response
    }
}

/// Lets a controller state struct with a `meta: MetadataLog` field be read and written as its
/// `MetadataLog` (`state.image`, `state.offset`, …) next to its own fields.
macro_rules! deref_metadata_log {
    ($state:ty) => {
        impl std::ops::Deref for $state {
            type Target = metadata_log::MetadataLog;
            fn deref(&self) -> &metadata_log::MetadataLog {
                &self.meta
            }
        }

        impl std::ops::DerefMut for $state {
            fn deref_mut(&mut self) -> &mut metadata_log::MetadataLog {
                &mut self.meta
            }
        }
    };
}

pub(crate) use deref_metadata_log;
