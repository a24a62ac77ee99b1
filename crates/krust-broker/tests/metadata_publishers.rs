//! The broker's metadata publishers, each driven only through a `MetadataLoader` (Kafka's
//! loader → publisher seam): committed metadata batches go into a loader with the publisher
//! under test registered at construction, and the test checks what that publisher did to the
//! broker — and that nothing happened before the loader caught up with the high watermark.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::server::metadata_publishers::{
    DynamicConfigPublisher, GroupCoordinatorPublisher, ReplicaManagerPublisher,
};
use krust_broker::server::{Broker, BrokerBuilder, BrokerConfig};
use krust_log::batch::{RecordBatch, RecordBatchBuilder};
use krust_metadata::image::topics::TopicPartition;
use krust_metadata::image::{MetadataLoader, MetadataPublisher};
use krust_metadata::records::{
    ConfigRecord, FeatureLevelRecord, MetadataRecord, PartitionRecord, RegisterBrokerRecord,
    RemoveTopicRecord, TopicRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use uuid::Uuid;

const NODE: i32 = 1;
const ORDERS: Uuid = Uuid::from_u128(0x0e0e);
const OFFSETS: Uuid = Uuid::from_u128(0x0f0f);

/// No controller: the publishers under test never need one.
struct NoController;

impl ControllerChannel for NoController {
    fn send(
        &self,
        _request: kafka_protocol::messages::RequestKind,
        _api_version: Option<i16>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<kafka_protocol::messages::ResponseKind, ControllerChannelError>> {
        Box::pin(async { Err(ControllerChannelError::Closed) })
    }
}

fn builder(dir: &std::path::Path) -> BrokerBuilder {
    let config = BrokerConfig {
        node_id: NODE,
        cluster_id: "publishers-test".to_owned(),
        log_dirs: vec![dir.to_path_buf()],
        static_config: std::sync::Arc::new(
            krust_config::KafkaConfig::parse(&BTreeMap::from([(
                "metadata.log.dir".to_owned(),
                dir.join("meta").display().to_string(),
            )]))
            .expect("valid test config"),
        ),
        advertised_listeners: Vec::new(),
        inter_broker_listener_name: "PLAINTEXT".to_owned(),
        inter_broker_security: Default::default(),
        rack: None,
    };
    Broker::builder(config, Arc::new(NoController))
}

/// A committed batch of `records` at `base_offset`, as the Raft layer hands it up.
fn batch(base_offset: i64, records: Vec<(MetadataRecord, i16)>) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(base_offset).partition_leader_epoch(1);
    for (record, version) in records {
        let value = ApiMessageAndVersion::new(record, version)
            .encode()
            .expect("encodes");
        builder.append_kv(0, None, Some(value));
    }
    builder.build()
}

/// metadata.version, this broker's registration, and `topic` (id `id`) with one partition
/// led by this broker.
fn cluster_with_topic(topic: &str, id: Uuid) -> RecordBatch {
    let mv = MetadataVersion::LATEST_PRODUCTION;
    batch(
        0,
        vec![
            (
                MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
                    "metadata.version",
                    mv.feature_level(),
                )),
                0,
            ),
            (
                MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                    broker_id: NODE,
                    is_migrating_zk_broker: false,
                    incarnation_id: Uuid::from_u128(7),
                    broker_epoch: 10,
                    end_points: Vec::new(),
                    features: Vec::new(),
                    rack: None,
                    fenced: false,
                    in_controlled_shutdown: false,
                    log_dirs: Vec::new(),
                    unknown_tagged_fields: Vec::new(),
                }),
                mv.register_broker_record_version(),
            ),
            (
                MetadataRecord::Topic(TopicRecord {
                    name: topic.to_owned(),
                    topic_id: id,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::Partition(PartitionRecord {
                    partition_id: 0,
                    topic_id: id,
                    replicas: vec![NODE],
                    isr: vec![NODE],
                    removing_replicas: Vec::new(),
                    adding_replicas: Vec::new(),
                    leader: NODE,
                    leader_recovery_state: 0,
                    leader_epoch: 3,
                    partition_epoch: 0,
                    directories: Vec::new(),
                    eligible_leader_replicas: None,
                    last_known_elr: None,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            ),
        ],
    )
}

fn tp(topic: &str) -> TopicPartition {
    TopicPartition {
        topic: topic.to_owned(),
        partition: 0,
    }
}

/// The replica manager publisher opens and leads this broker's partitions, and makes the image
/// visible, only once the loader has caught up with the high watermark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_manager_publisher_leads_the_partitions_the_loader_publishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = builder(dir.path()).open().expect("broker opens");
    let publishers: Vec<Box<dyn MetadataPublisher>> =
        vec![Box::new(ReplicaManagerPublisher::new(broker.clone()))];
    let mut loader = MetadataLoader::new(publishers);
    let now = Instant::now();
    loader.handle_commit(now, &[cluster_with_topic("orders", ORDERS)], 10);
    assert!(
        broker.replica_manager().all_hosted().is_empty(),
        "still catching up"
    );
    assert!(broker.replica_manager().image().is_empty());
    let caught_up = loader.handle_commit(now, &[], 4);
    assert!(caught_up.caught_up);
    let partition = broker
        .replica_manager()
        .partition(&tp("orders"))
        .expect("hosted once caught up");
    {
        let p = partition.lock().expect("lock");
        assert!(p.is_leader());
        assert_eq!(p.leader_epoch(), 3);
    }
    assert!(dir.path().join("orders-0").is_dir(), "its log is open");
    assert!(
        broker
            .replica_manager()
            .image()
            .topics
            .topic_by_name("orders")
            .is_some(),
        "the image is visible to Metadata requests"
    );
    broker.shutdown().await;
}

/// The dynamic config publisher applies a topic config change to the hosted partition; a
/// loader without it leaves the partition's config alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_config_publisher_applies_topic_config_changes() {
    for with_config_publisher in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = builder(dir.path()).open().expect("broker opens");
        let mut publishers: Vec<Box<dyn MetadataPublisher>> = Vec::new();
        if with_config_publisher {
            publishers.push(Box::new(DynamicConfigPublisher::new(broker.clone())));
        }
        publishers.push(Box::new(ReplicaManagerPublisher::new(broker.clone())));
        let mut loader = MetadataLoader::new(publishers);
        let now = Instant::now();
        loader.handle_commit(now, &[cluster_with_topic("orders", ORDERS)], 4);
        let min_isr = || {
            let partition = broker
                .replica_manager()
                .partition(&tp("orders"))
                .expect("hosted");
            let p = partition.lock().expect("lock");
            p.config().min_insync_replicas
        };
        assert_eq!(min_isr(), 1, "the default");
        let change = batch(
            4,
            vec![(
                MetadataRecord::Config(ConfigRecord {
                    resource_type: 2,
                    resource_name: "orders".to_owned(),
                    name: "min.insync.replicas".to_owned(),
                    value: Some("2".to_owned()),
                    ..Default::default()
                }),
                0,
            )],
        );
        loader.handle_commit(now, &[change], 5);
        let expected = if with_config_publisher { 2 } else { 1 };
        assert_eq!(
            min_isr(),
            expected,
            "with the config publisher registered: {with_config_publisher}"
        );
        broker.shutdown().await;
    }
}

/// The group coordinator publisher loads the shard of a `__consumer_offsets` partition the
/// replica manager publisher made this broker lead, and unloads it when the topic is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_coordinator_publisher_follows_consumer_offsets_leadership() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = builder(dir.path())
        .with_groups()
        .open()
        .expect("broker opens");
    let groups = broker.groups().expect("built with groups").clone();
    let publishers: Vec<Box<dyn MetadataPublisher>> = vec![
        Box::new(ReplicaManagerPublisher::new(broker.clone())),
        Box::new(GroupCoordinatorPublisher::new(broker.clone())),
    ];
    let mut loader = MetadataLoader::new(publishers);
    let now = Instant::now();
    loader.handle_commit(now, &[cluster_with_topic("__consumer_offsets", OFFSETS)], 4);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while groups.active_partitions() != vec![0] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "shard 0 never loaded: {:?}",
            groups.active_partitions()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delete = batch(
        4,
        vec![(
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: OFFSETS,
                ..Default::default()
            }),
            0,
        )],
    );
    loader.handle_commit(now, &[delete], 5);
    assert!(
        groups.active_partitions().is_empty(),
        "the shard is unloaded with the topic"
    );
    broker.shutdown().await;
}
