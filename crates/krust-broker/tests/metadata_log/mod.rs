//! The committed metadata of the in-test controllers (`groups_runtime_broker`,
//! `replication_cluster`): the image, every committed record, and the brokers each commit is
//! published to, as the controller's log and the brokers' metadata loaders would; and the
//! pieces of their in-process brokers (config, loopback listener, registration record).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_response::{
    PartitionData as AlterPartitionResult, TopicData as AlterTopicResult,
};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};
use krust_broker::server::{Broker, BrokerConfig, Endpoint};
use krust_metadata::image::{
    LeaderAndEpoch, LoaderManifest, MetadataDelta, MetadataImage, MetadataProvenance, Publication,
};
use krust_metadata::records::{
    FeatureLevelRecord, MetadataRecord, PartitionChangeRecord, RegisterBrokerRecord,
    RegistrationEndpoint,
};
use krust_net::{Client, ClientConfig, Server, ServerConfig};
use uuid::Uuid;

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
            publish(&broker, &publication);
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
        publish(broker, &Publication { delta, image });
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

/// The `metadata.version` FeatureLevelRecord a controller commits first.
pub fn metadata_version_record(feature_level: i16) -> MetadataRecord {
    MetadataRecord::FeatureLevel(FeatureLevelRecord {
        name: "metadata.version".into(),
        feature_level,
        unknown_tagged_fields: Vec::new(),
    })
}

/// Broker `node_id` of `cluster_id` over `log_dir`, advertising PLAINTEXT on loopback.
pub fn broker_config(
    node_id: i32,
    cluster_id: &str,
    log_dir: PathBuf,
    properties: BTreeMap<String, String>,
) -> BrokerConfig {
    BrokerConfig {
        node_id,
        cluster_id: cluster_id.into(),
        log_dirs: vec![log_dir],
        static_config: std::sync::Arc::new(
            krust_config::KafkaConfig::parse(&properties).expect("valid test config"),
        ),
        advertised_listeners: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 0,
            security_protocol: 0,
        }],
        inter_broker_listener_name: "PLAINTEXT".into(),
        inter_broker_security: Default::default(),
        rack: None,
    }
}

/// Serves `broker`'s client handler on an ephemeral loopback port.
pub async fn serve(broker: &Arc<Broker>) -> (Server, u16) {
    let server = Server::bind(
        "127.0.0.1:0",
        Arc::new(broker.client_handler()),
        ServerConfig::default(),
    )
    .await
    .expect("bind");
    let port = server.local_addr().port();
    (server, port)
}

/// The RegisterBrokerRecord of broker `broker_id` listening on loopback `port`.
pub fn register_broker_record(
    broker_id: i32,
    port: u16,
    broker_epoch: i64,
    incarnation_id: Uuid,
) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id,
        is_migrating_zk_broker: false,
        incarnation_id,
        broker_epoch,
        end_points: vec![RegistrationEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
            security_protocol: 0,
            unknown_tagged_fields: Vec::new(),
        }],
        features: Vec::new(),
        rack: None,
        fenced: false,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

/// A client of the broker on loopback `port`.
pub fn loopback_client(port: u16, request_timeout: Duration) -> Client {
    Client::new(
        format!("127.0.0.1:{port}"),
        ClientConfig {
            request_timeout,
            ..ClientConfig::default()
        },
    )
}

/// Hands `publication` to the broker's metadata publishers, in order, as the node's metadata
/// loader does with a log delta.
pub fn publish(broker: &Arc<Broker>, publication: &Publication) {
    let manifest = LoaderManifest::LogDelta {
        provenance: publication.image.provenance,
        leader_and_epoch: LeaderAndEpoch::default(),
        num_batches: 1,
        num_bytes: 0,
        elapsed: std::time::Duration::ZERO,
    };
    for mut publisher in broker.metadata_publishers() {
        publisher.on_metadata_update(&publication.delta, &publication.image, &manifest);
    }
}
