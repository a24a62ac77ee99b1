//! The KIP-866 ZooKeeper → KRaft migration with krust controllers and real Apache Kafka 3.9
//! ZooKeeper-mode brokers over a real ZooKeeper (the one shipped in Kafka 3.9's jars).
//!
//! Kafka's own run of the same steps is `crates/krust-testkit/tests/zk_migration.rs`.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::time::Duration;

use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ZooKeeperServer};
use support::{FAST_TIMEOUTS, Quorum, read_metadata_log, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(120);
/// What the migration driver logs once the metadata is copied into the log (Kafka's line).
const MIGRATION_COMPLETED: &str = "Completed migration of metadata from ZooKeeper to KRaft";
/// What Kafka 3.9's `BrokerLifecycleManager` logs once its registration is accepted.
const REGISTERED: &str = "Successfully registered broker";

/// The metadata records of a stopped controller's log, decoded.
fn metadata_records(quorum: &Quorum, id: i32) -> Vec<MetadataRecord> {
    let node = quorum.nodes.iter().find(|n| n.id == id).expect("node");
    read_metadata_log(&node.data_dir())
        .into_iter()
        .filter(|r| !r.control)
        .filter_map(|r| r.value)
        .map(|v| {
            ApiMessageAndVersion::decode(&v)
                .expect("a metadata record")
                .record
        })
        .collect()
}

/// Phase 1 and 2 of the migration: a krust controller quorum provisioned with
/// `zookeeper.metadata.migration.enable=true` sits in PRE_MIGRATION, and Kafka 3.9
/// ZooKeeper-mode brokers rolled into migration mode register with it as migrating ZooKeeper
/// brokers (before, krust refused them with BROKER_ID_NOT_REGISTERED).
#[test]
fn zookeeper_brokers_in_migration_mode_register_with_krust_controllers() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = KafkaNode::builder(&dist)
        .role(KafkaRole::ZkBroker)
        .node_id(101)
        .zookeeper(zk.connect_string())
        .start_timeout(WAIT)
        .start()
        .expect("ZooKeeper-mode broker starts");
    broker
        .create_topic("made-in-zk", 2, &[("retention.ms", "123456789")])
        .expect("create a topic in ZooKeeper mode");

    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = Quorum::in_cluster(1, &extra, broker.cluster_id());
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));

    broker
        .enable_migration(&quorum.voters)
        .expect("broker config");
    broker.restart().expect("broker restarts in migration mode");
    broker
        .wait_for_log(REGISTERED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", quorum.log_tails()));
    // Every broker registered: the controller claims ZooKeeper and copies its metadata.
    let copied = quorum
        .node(1)
        .process
        .as_mut()
        .expect("started")
        .wait_for_line(MIGRATION_COMPLETED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", quorum.log_tails()));
    println!("{copied}");

    quorum.stop_all();
    broker
        .terminate(Duration::from_secs(60))
        .expect("broker stops");
    let records = metadata_records(&quorum, 1);
    assert!(
        records.iter().any(|r| matches!(
            r,
            MetadataRecord::RegisterBroker(b) if b.broker_id == 101 && b.is_migrating_zk_broker
        )),
        "the ZooKeeper broker registered as migrating: {records:#?}"
    );
    assert!(
        records.iter().any(|r| matches!(
            r,
            MetadataRecord::RegisterController(c) if c.controller_id == 1 && c.zk_migration_ready
        )),
        "the controller registered as ready for the migration"
    );
    let image = MetadataImage::from_records(records.iter(), MetadataProvenance::new(0, 0, 0))
        .expect("the log replays");
    assert_eq!(
        image.features.zk_migration_state,
        ZkMigrationState::Migration
    );
    let topic = image
        .topics
        .topic_by_name("made-in-zk")
        .expect("the topic made in ZooKeeper was copied");
    assert_eq!(topic.partitions.len(), 2);
}
