//! The KIP-866 ZooKeeper → KRaft migration, done by Apache Kafka 3.9 itself under the harness:
//! the reference run that krust's migration tests compare against, and proof that the harness
//! can stage it (ZooKeeper, a ZooKeeper-mode broker, a migrating KRaft controller, the broker's
//! restart into migration mode).
//!
//! Checked: the controller logs that it completed the migration, and its metadata log (decoded
//! by Kafka's `DumpLogSegments --cluster-metadata-decoder`) holds the topic created in
//! ZooKeeper before the migration and the `ZkMigrationStateRecord`.

use std::time::Duration;

use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ZooKeeperServer};

/// What Kafka 3.9's `KRaftMigrationDriver` logs once the metadata is copied into the log.
const MIGRATION_COMPLETED: &str = "Completed migration of metadata from ZooKeeper to KRaft";

#[test]
fn kafka_migrates_a_zookeeper_cluster_into_a_kraft_controller() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");

    // Phase 0: a ZooKeeper cluster with data.
    let mut broker = KafkaNode::builder(&dist)
        .role(KafkaRole::ZkBroker)
        .node_id(1)
        .zookeeper(zk.connect_string())
        .start()
        .expect("ZooKeeper-mode broker starts");
    broker
        .create_topic("made-in-zk", 2, &[("retention.ms", "123456789")])
        .expect("create a topic in ZooKeeper mode");

    // Phase 1: a KRaft controller in migration mode, formatted with the ZooKeeper cluster's id.
    let mut controller = KafkaNode::builder(&dist)
        .role(KafkaRole::Controller)
        .node_id(3000)
        .cluster_id(broker.cluster_id())
        .zookeeper(zk.connect_string())
        .migration()
        .start()
        .expect("migrating controller starts");

    // Phase 2: the broker is rolled into migration mode; once every broker has registered with
    // the quorum, the controller copies ZooKeeper's metadata into its log.
    broker
        .enable_migration(controller.quorum_voters())
        .expect("broker config");
    broker.restart().expect("broker restarts in migration mode");
    controller
        .wait_for_log(MIGRATION_COMPLETED, Duration::from_secs(120))
        .expect("the controller completes the migration");

    // The migrated metadata, as Kafka decodes it from the controller's log.
    controller
        .terminate(Duration::from_secs(60))
        .expect("controller stops");
    let metadata_dir = controller.log_dir().join("__cluster_metadata-0");
    let mut segments: Vec<_> = std::fs::read_dir(&metadata_dir)
        .expect("metadata log dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let files: Vec<&std::path::Path> = segments.iter().map(|p| p.as_path()).collect();
    let dump = dist
        .dump_log_segments(
            &files,
            &["--cluster-metadata-decoder"],
            Duration::from_secs(60),
        )
        .expect("dump the controller's metadata log");
    let payloads: Vec<&str> = dump
        .batches()
        .flat_map(|b| b.records.iter())
        .filter_map(|r| r.payload.as_deref())
        .collect();
    assert!(
        payloads
            .iter()
            .any(|p| p.contains("\"TOPIC_RECORD\"") && p.contains("\"made-in-zk\"")),
        "the ZooKeeper topic was migrated: {payloads:#?}"
    );
    assert!(
        payloads
            .iter()
            .any(|p| p.contains("\"ZK_MIGRATION_STATE_RECORD\"")),
        "{payloads:#?}"
    );
    assert!(
        payloads
            .iter()
            .any(|p| p.contains("\"CONFIG_RECORD\"") && p.contains("123456789")),
        "the topic config was migrated: {payloads:#?}"
    );
}
