//! `krust migration status` and `rollback-plan` derived from images built by replaying records
//! (as the tool replays the quorum's log) and ZooKeeper trees as Kafka 3.9 leaves them.

use krust_metadata::records::{
    BeginTransactionRecord, ConfigRecord, EndTransactionRecord, FeatureLevelRecord, MetadataRecord,
    NoOpRecord, RegisterBrokerRecord, RegisterControllerRecord, ZkMigrationStateRecord,
};
use krust_metadata::{MetadataImage, MetadataProvenance};
use krust_migration::tools::rollback::{Stage, rollback_plan};
use krust_migration::tools::status::{CopyCounter, Phase, QuorumView, derive_status};
use krust_migration::tools::zk_view::ClusterZnodes;
use krust_zk::model::cluster::MigrationZNode;
use krust_zk::ops::Stat;
use krust_zk::tree::ZkTree;
use uuid::Uuid;

const ZK: &str = "127.0.0.1:2181/kafka";

fn put(tree: &mut ZkTree, path: &str, data: &str) {
    tree.insert_read(path, data.as_bytes().to_vec(), Stat::default());
}

fn broker_json(id: i32) -> String {
    format!(
        r#"{{"features":{{}},"listener_security_protocol_map":{{"PLAINTEXT":"PLAINTEXT"}},"endpoints":["PLAINTEXT://localhost:{}"],"jmx_port":-1,"port":{},"host":"localhost","version":5,"timestamp":"1"}}"#,
        9090 + id,
        9090 + id
    )
}

/// ZooKeeper brokers `registered` up; topic `foo` on brokers 1, 2 and 3.
fn zk(
    registered: &[i32],
    migration: Option<MigrationZNode>,
    kraft_controller: bool,
) -> ClusterZnodes {
    let mut t = ZkTree::new();
    put(
        &mut t,
        "/cluster/id",
        r#"{"version":"1","id":"MkU3OEVBNTcwNTJENDM2Qg"}"#,
    );
    for id in registered {
        put(&mut t, &format!("/brokers/ids/{id}"), &broker_json(*id));
    }
    put(
        &mut t,
        "/brokers/topics/foo",
        r#"{"partitions":{"0":[1,2],"1":[2,3]},"topic_id":"7DYWEHTfSrm7Gzv9BSMfSg","adding_replicas":{},"removing_replicas":{},"version":3}"#,
    );
    if kraft_controller {
        put(
            &mut t,
            "/controller",
            r#"{"version":2,"brokerid":3000,"timestamp":"1","kraftControllerEpoch":5}"#,
        );
    } else {
        put(
            &mut t,
            "/controller",
            r#"{"version":1,"brokerid":1,"timestamp":"1"}"#,
        );
    }
    if let Some(m) = migration {
        put(
            &mut t,
            "/migration",
            &String::from_utf8(m.encode()).expect("utf-8"),
        );
    }
    let parsed = ClusterZnodes::parse(&t);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    parsed
}

fn copied_at(offset: i64) -> MigrationZNode {
    MigrationZNode {
        kraft_controller_id: 3000,
        kraft_controller_epoch: 5,
        kraft_metadata_offset: offset,
        kraft_metadata_epoch: 5,
    }
}

fn broker(id: i32, zk_mode: bool, fenced: bool) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: zk_mode,
        incarnation_id: Uuid::from_u64_pair(1, id as u64),
        broker_epoch: 10,
        end_points: Vec::new(),
        features: Vec::new(),
        rack: None,
        fenced,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

fn controller(id: i32, ready: bool) -> MetadataRecord {
    MetadataRecord::RegisterController(RegisterControllerRecord {
        controller_id: id,
        incarnation_id: Uuid::from_u64_pair(2, id as u64),
        zk_migration_ready: ready,
        end_points: Vec::new(),
        features: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

fn state(code: i8) -> MetadataRecord {
    MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
        zk_migration_state: code,
        ..ZkMigrationStateRecord::default()
    })
}

fn image(mut records: Vec<MetadataRecord>) -> MetadataImage {
    records.insert(
        0,
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: "metadata.version".to_owned(),
            feature_level: 21,
            unknown_tagged_fields: Vec::new(),
        }),
    );
    MetadataImage::from_records(&records, MetadataProvenance::new(99, 5, 0)).expect("replays")
}

fn quorum(image: MetadataImage) -> QuorumView {
    QuorumView {
        image,
        leader_id: 3000,
        leader_epoch: 5,
        high_watermark: 100,
        copied_records: None,
        snapshot: None,
        voter_ids: vec![3000],
    }
}

#[test]
fn pre_migration_says_which_brokers_it_waits_for() {
    let img = image(vec![
        state(2),
        controller(3000, true),
        broker(1, true, false),
    ]);
    let report = derive_status(&quorum(img.clone()), Some(&zk(&[1, 2], None, false)));
    assert_eq!(report.phase, Phase::PreMigration);
    let text = report.to_string();
    assert!(text.contains("Phase: PRE_MIGRATION"), "{text}");
    assert!(
        text.contains("waiting for ZooKeeper brokers 2 (in /brokers/ids)"),
        "{text}"
    );
    assert!(
        text.contains(
            "waiting for brokers 3 that hold replicas (topic assignments) but are not up"
        ),
        "{text}"
    );
    assert!(text.contains("Broker 2: NOT registered with the quorum; in ZooKeeper /brokers/ids and topic assignments"), "{text}");
    assert!(text.contains("ZkWriteBehindLag: n/a"), "{text}");
    assert!(
        text.contains("ZkController: ZooKeeper-mode broker 1"),
        "{text}"
    );
    // A controller without the flag is named too, and a voter without registration.
    let img = image(vec![state(2), controller(3000, false)]);
    let mut view = quorum(img);
    view.voter_ids.push(3001);
    let text = derive_status(&view, Some(&zk(&[1], None, false))).to_string();
    assert!(
        text.contains("No registration found for controller 3001"),
        "{text}"
    );
    assert!(
        text.contains("Controller 3000 has not enabled zookeeper.metadata.migration.enable"),
        "{text}"
    );
    assert!(text.contains("No brokers are known to KRaft"), "{text}");
    // Rollback: brokers already in migration mode.
    let plan = rollback_plan(
        ZK,
        &zk(&[1, 2], None, false),
        Some(&image(vec![state(2), broker(1, true, false)])),
    );
    assert_eq!(plan.stage, Stage::BrokersInMigrationMode);
}

#[test]
fn migration_hybrid_reports_the_lag_and_the_json() {
    let img = image(vec![
        state(1),
        controller(3000, true),
        broker(1, true, false),
        broker(2, false, true),
        broker(3, true, false),
    ]);
    let report = derive_status(&quorum(img), Some(&zk(&[1, 3], Some(copied_at(90)), true)));
    assert_eq!(report.phase, Phase::MigrationHybrid);
    assert_eq!(
        report.zk_write_behind_lag,
        Some(9),
        "committed 99 − mirrored 90"
    );
    let text = report.to_string();
    assert!(
        text.contains("ZkController: KRaft controller 3000 (epoch 5)"),
        "{text}"
    );
    assert!(
        text.contains(
            "Broker 2: registered as a KRaft broker, fenced; in ZooKeeper topic assignments"
        ),
        "{text}"
    );
    assert!(
        text.contains("next: roll brokers 1,3 into KRaft mode"),
        "{text}"
    );
    let json = report.to_json();
    assert_eq!(json["phase"], "MIGRATION_HYBRID");
    assert_eq!(json["zkWriteBehindLag"], 9);
    assert_eq!(json["brokers"][1]["kraft"]["zkMode"], false);
    assert_eq!(json["zkController"]["epoch"], 5);
}

/// Without `--zookeeper` the quorum's side is reported and the ZooKeeper side says it was not
/// read, instead of "absent" or "none".
#[test]
fn status_without_zookeeper_says_what_it_did_not_read() {
    let img = image(vec![
        state(1),
        controller(3000, true),
        broker(1, true, false),
    ]);
    let report = derive_status(&quorum(img), None);
    assert_eq!(report.phase, Phase::MigrationHybrid);
    assert_eq!(report.zk_write_behind_lag, None);
    let text = report.to_string();
    for line in [
        "ZkMigrationZnode: not read (no --zookeeper)",
        "ZkWriteBehindLag: unknown (no --zookeeper)",
        "ZkController: not read (no --zookeeper)",
        "Broker 1: registered as a ZooKeeper-mode broker, unfenced\n",
        "Note: ZooKeeper was not read (no --zookeeper)",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    assert!(!text.contains("/migration says no copy"), "{text}");
    assert_eq!(report.to_json()["zookeeperRead"], false);
}

/// A ZooKeeper-mode broker up in the hybrid phase without the migration settings (in
/// `/brokers/ids`, never registered with the quorum) gets no metadata from the KRaft
/// controller: the status names it and says how to fix it.
#[test]
fn migration_hybrid_names_a_zookeeper_broker_that_is_not_in_migration_mode() {
    let img = image(vec![
        state(1),
        controller(3000, true),
        broker(1, true, false),
        broker(2, true, false),
        broker(3, true, false),
    ]);
    let text = derive_status(
        &quorum(img),
        Some(&zk(&[1, 3, 4], Some(copied_at(90)), true)),
    )
    .to_string();
    assert!(
        text.contains("ZooKeeper brokers 4 are in /brokers/ids but not registered with the quorum"),
        "{text}"
    );
    assert!(
        text.contains("next: roll brokers 1,2,3 into KRaft mode"),
        "{text}"
    );
}

#[test]
fn all_kraft_then_post_migration() {
    let img = image(vec![
        state(1),
        broker(1, false, false),
        broker(2, false, false),
        broker(3, false, false),
    ]);
    let z = zk(&[], Some(copied_at(99)), true);
    let report = derive_status(&quorum(img.clone()), Some(&z));
    assert_eq!(report.phase, Phase::MigrationAllKraft);
    assert_eq!(report.zk_write_behind_lag, Some(0));
    let plan = rollback_plan(ZK, &z, Some(&img));
    assert_eq!(plan.stage, Stage::BrokersMigratedToKraft);
    let text = plan.to_string();
    assert!(
        text.contains("keep zookeeper.metadata.migration.enable=true"),
        "{text}"
    );
    assert!(
        text.contains(&format!("bin/zookeeper-shell.sh {ZK} rmr /controller")),
        "{text}"
    );
    assert!(
        text.contains("the brokers now in KRaft mode (1,2,3)"),
        "{text}"
    );

    let done = image(vec![state(1), state(3), broker(1, false, false)]);
    assert_eq!(
        derive_status(&quorum(done.clone()), Some(&z)).phase,
        Phase::PostMigration
    );
    let plan = rollback_plan(ZK, &z, Some(&done));
    assert!(!plan.can_revert);
    assert!(plan.to_string().contains("cannot revert: finalized"));
    assert!(plan.steps.is_empty());
}

#[test]
fn rollback_from_zookeeper_alone() {
    let plan = rollback_plan(ZK, &zk(&[1, 2, 3], None, false), None);
    assert_eq!(plan.stage, Stage::Preparing);
    let plan = rollback_plan(ZK, &zk(&[1, 2, 3], Some(copied_at(50)), true), None);
    assert_eq!(plan.stage, Stage::BrokersInMigrationMode);
    let text = plan.to_string();
    assert!(
        text.contains(&format!("bin/zookeeper-shell.sh {ZK} get /migration")),
        "{text}"
    );
    assert!(
        text.contains(&format!("bin/zookeeper-shell.sh {ZK} rmr /migration")),
        "{text}"
    );
    assert!(
        text.contains("On each broker (1,2,3): remove zookeeper.metadata.migration.enable"),
        "{text}"
    );
    assert!(text.contains("give --bootstrap-controller"), "{text}");
    // Broker 3 gone from /brokers/ids while it holds replicas: likely a KRaft broker now.
    let plan = rollback_plan(ZK, &zk(&[1, 2], Some(copied_at(50)), true), None);
    assert_eq!(plan.stage, Stage::BrokersMigratedToKraft);
}

#[test]
fn the_copy_counter_counts_the_migration_transaction() {
    let mut counter = CopyCounter::default();
    let begin = MetadataRecord::BeginTransaction(BeginTransactionRecord::default());
    let end = MetadataRecord::EndTransaction(EndTransactionRecord::default());
    let noop = MetadataRecord::NoOp(NoOpRecord::default());
    let config = MetadataRecord::Config(ConfigRecord {
        resource_type: 2,
        resource_name: "foo".to_owned(),
        name: "retention.ms".to_owned(),
        value: Some("1".to_owned()),
        unknown_tagged_fields: Vec::new(),
    });
    // The bootstrap transaction (PRE_MIGRATION inside) does not count, nor a registration
    // committed while the copy's transaction is open.
    for r in [
        &begin,
        &noop,
        &state(2),
        &end,
        &config,
        &begin,
        &config,
        &broker(7, true, true),
        &config,
        &noop,
        &config,
        &state(1),
        &end,
        &config,
    ] {
        counter.observe(r);
    }
    assert_eq!(counter.copied(), Some(3));
}
