//! `krust migration preflight`'s checks over a ZooKeeper tree as Kafka 3.9 leaves it and typed
//! controller/broker facts: a ready cluster passes; each documented precondition, broken alone,
//! fails (or warns) with a line naming the fix.

use krust_metadata::MetadataVersion;
use krust_migration::tools::preflight::{
    BrokerFacts, Check, ControllerFacts, Level, can_start, normalize_zk_connect, preflight,
};
use krust_migration::tools::zk_view::ClusterZnodes;
use krust_zk::model::cluster::MigrationZNode;
use krust_zk::ops::Stat;
use krust_zk::tree::ZkTree;

const ZK: &str = "127.0.0.1:2181/kafka";
const CLUSTER_ID: &str = "MkU3OEVBNTcwNTJENDM2Qg";

fn put(tree: &mut ZkTree, path: &str, data: &str) {
    tree.insert_read(path, data.as_bytes().to_vec(), Stat::default());
}

fn broker_json(id: i32) -> String {
    format!(
        r#"{{"features":{{}},"listener_security_protocol_map":{{"PLAINTEXT":"PLAINTEXT"}},"endpoints":["PLAINTEXT://localhost:{}"],"jmx_port":-1,"port":{},"host":"localhost","version":5,"timestamp":"1700000000000"}}"#,
        9090 + id,
        9090 + id
    )
}

/// Two ZooKeeper-mode brokers (1, 2), broker 1 the controller, one topic on both.
fn zk_tree() -> ZkTree {
    let mut t = ZkTree::new();
    put(
        &mut t,
        "/cluster/id",
        &format!(r#"{{"version":"1","id":"{CLUSTER_ID}"}}"#),
    );
    put(&mut t, "/brokers/ids/1", &broker_json(1));
    put(&mut t, "/brokers/ids/2", &broker_json(2));
    put(
        &mut t,
        "/controller",
        r#"{"version":2,"brokerid":1,"timestamp":"1700000000000","kraftControllerEpoch":-1}"#,
    );
    put(&mut t, "/controller_epoch", "3");
    put(
        &mut t,
        "/brokers/topics/foo",
        r#"{"partitions":{"0":[1,2]},"topic_id":"7DYWEHTfSrm7Gzv9BSMfSg","adding_replicas":{},"removing_replicas":{},"version":3}"#,
    );
    put(&mut t, "/admin/delete_topics", "");
    t
}

fn controller() -> ControllerFacts {
    ControllerFacts {
        file: "controller.properties".to_owned(),
        process_roles: vec!["controller".to_owned()],
        node_id: 3000,
        migration_enabled: true,
        zookeeper_connect: Some("127.0.0.1:2181/kafka/".to_owned()),
        listener_names: vec!["CONTROLLER".to_owned()],
        controller_listener_names: vec!["CONTROLLER".to_owned()],
        voter_ids: vec![3000],
        bootstrap_servers: Vec::new(),
        config_errors: Vec::new(),
        metadata_log_dir: Some("/data/controller".to_owned()),
        formatted_cluster_id: Some(CLUSTER_ID.to_owned()),
        bootstrap_metadata_version: Some(MetadataVersion::IBP_3_9_IV0),
        inter_broker_listener: "PLAINTEXT".to_owned(),
    }
}

fn broker(id: i32) -> BrokerFacts {
    BrokerFacts {
        file: format!("server-{id}.properties"),
        process_roles: Vec::new(),
        broker_id: id,
        broker_id_generation_enable: true,
        reserved_broker_max_id: 1000,
        inter_broker_protocol_version: Some("3.9".to_owned()),
        log_dir_count: 1,
        migration_enabled: true,
        zookeeper_connect: Some(ZK.to_owned()),
        voter_ids: vec![3000],
        bootstrap_servers: Vec::new(),
        controller_listener_names: vec!["CONTROLLER".to_owned()],
        security_protocol_map_names: vec!["PLAINTEXT".to_owned(), "CONTROLLER".to_owned()],
        config_errors: Vec::new(),
    }
}

fn run(c: &ControllerFacts, brokers: &[BrokerFacts], tree: &ZkTree) -> Vec<Check> {
    preflight(ZK, c, brokers, &ClusterZnodes::parse(tree))
}

fn failures(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c.level == Level::Fail)
        .map(ToString::to_string)
        .collect()
}

fn line<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {checks:#?}"))
}

#[test]
fn a_ready_cluster_passes() {
    let checks = run(&controller(), &[broker(1), broker(2)], &zk_tree());
    assert!(can_start(&checks), "{:#?}", failures(&checks));
    assert!(
        checks.iter().all(|c| c.level == Level::Ok),
        "{:#?}",
        checks.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    assert_eq!(
        line(&checks, "zookeeper /controller").to_string(),
        "OK zookeeper /controller: ZooKeeper controller broker 1"
    );
}

#[test]
fn a_broker_without_the_migration_flag_fails_with_the_fix() {
    let mut b = broker(2);
    b.migration_enabled = false;
    let checks = run(&controller(), &[broker(1), b], &zk_tree());
    assert!(!can_start(&checks));
    let check = line(&checks, "broker 2 zookeeper.metadata.migration.enable");
    assert_eq!(check.level, Level::Fail);
    let text = check.to_string();
    assert!(
        text.starts_with(
            "FAIL broker 2 zookeeper.metadata.migration.enable: false in server-2.properties"
        ),
        "{text}"
    );
    assert!(
        text.contains("set zookeeper.metadata.migration.enable=true in server-2.properties"),
        "{text}"
    );
}

#[test]
fn combined_mode_and_a_missing_flag_on_the_controller_fail() {
    let mut c = controller();
    c.process_roles = vec!["broker".to_owned(), "controller".to_owned()];
    c.migration_enabled = false;
    let checks = run(&c, &[], &zk_tree());
    assert_eq!(line(&checks, "controller process.roles").level, Level::Fail);
    assert!(
        line(&checks, "controller process.roles")
            .to_string()
            .contains("combined mode is not supported for migration")
    );
    assert_eq!(
        line(&checks, "controller zookeeper.metadata.migration.enable").level,
        Level::Fail
    );
}

#[test]
fn zookeeper_connect_must_name_the_same_ensemble_and_chroot() {
    let mut c = controller();
    c.zookeeper_connect = Some("127.0.0.1:2181".to_owned());
    let checks = run(&c, &[], &zk_tree());
    let check = line(&checks, "controller zookeeper.connect");
    assert_eq!(check.level, Level::Fail, "{check}");
    c.zookeeper_connect = None;
    let checks = run(&c, &[], &zk_tree());
    assert!(
        line(&checks, "controller zookeeper.connect")
            .to_string()
            .contains("must also be set")
    );
    assert_eq!(
        normalize_zk_connect("b:2,a:1/x/"),
        normalize_zk_connect("a:1,b:2/x")
    );
    assert_ne!(normalize_zk_connect("a:1/x"), normalize_zk_connect("a:1"));
}

#[test]
fn the_cluster_id_must_be_zookeepers() {
    let mut c = controller();
    c.formatted_cluster_id = Some("AAAAAAAAAAAAAAAAAAAAAA".to_owned());
    let checks = run(&c, &[], &zk_tree());
    let check = line(&checks, "controller cluster id");
    assert_eq!(check.level, Level::Fail);
    assert!(
        check
            .to_string()
            .contains(&format!("--cluster-id {CLUSTER_ID}"))
    );
    c.formatted_cluster_id = None;
    let checks = run(&c, &[], &zk_tree());
    assert_eq!(line(&checks, "controller cluster id").level, Level::Warn);
    assert!(can_start(&checks));
}

#[test]
fn broker_config_rules_use_kafkas_messages() {
    let mut generated = broker(1);
    generated.broker_id = -1;
    let mut old = broker(2);
    old.inter_broker_protocol_version = Some("3.3".to_owned());
    let mut jbod = broker(4);
    jbod.inter_broker_protocol_version = Some("3.7-IV1".to_owned());
    jbod.log_dir_count = 2;
    let mut no_quorum = broker(5);
    no_quorum.voter_ids.clear();
    no_quorum.controller_listener_names.clear();
    let mut unmapped = broker(6);
    unmapped.security_protocol_map_names = vec!["PLAINTEXT".to_owned()];
    let mut elsewhere = broker(7);
    elsewhere.voter_ids = vec![9000];
    let checks = run(
        &controller(),
        &[generated, old, jbod, no_quorum, unmapped, elsewhere],
        &zk_tree(),
    );
    let fails = failures(&checks);
    let has = |needle: &str| fails.iter().any(|f| f.contains(needle));
    assert!(
        has("broker.id generation is incompatible with ZooKeeper migration"),
        "{fails:#?}"
    );
    assert!(
        has(
            "FAIL broker 2 inter.broker.protocol.version: 3.3 — fix: Cannot enable ZooKeeper migration without setting 'inter.broker.protocol.version' to 3.4 or higher"
        ),
        "{fails:#?}"
    );
    assert!(has("multiple log directories (aka JBOD)"), "{fails:#?}");
    assert!(has("FAIL broker 5 controller.quorum.voters"), "{fails:#?}");
    assert!(
        has("must not be empty when running in ZooKeeper migration mode"),
        "{fails:#?}"
    );
    assert!(
        has(
            "FAIL broker 6 controller.listener.names: CONTROLLER not in listener.security.protocol.map — fix: add CONTROLLER:PLAINTEXT"
        ),
        "{fails:#?}"
    );
    assert!(
        has(
            "FAIL broker 7 quorum: controller.quorum.voters of server-7.properties names {9000}, the controller's names {3000}"
        ),
        "{fails:#?}"
    );
}

#[test]
fn zookeeper_state_that_blocks_a_migration_fails() {
    let mut t = zk_tree();
    put(
        &mut t,
        "/admin/reassign_partitions",
        r#"{"version":1,"partitions":[]}"#,
    );
    put(&mut t, "/admin/delete_topics/gone", "");
    put(&mut t, "/brokers/ids/3000", &broker_json(3000));
    put(&mut t, "/brokers/ids/oops", "{}");
    let checks = run(&controller(), &[broker(1), broker(2)], &t);
    let fails = failures(&checks);
    let has = |needle: &str| fails.iter().any(|f| f.contains(needle));
    assert!(
        has("FAIL zookeeper /admin/reassign_partitions"),
        "{fails:#?}"
    );
    assert!(has("topics pending deletion: gone"), "{fails:#?}");
    assert!(
        has("FAIL node ids: [3000] are both controller and broker ids"),
        "{fails:#?}"
    );
    assert!(has("/brokers/ids/oops: not a broker id"), "{fails:#?}");
    // 3000 > reserved.broker.max.id and not in any file: it looks generated.
    assert_eq!(line(&checks, "zookeeper broker 3000").level, Level::Warn);
}

#[test]
fn a_migration_under_way_or_a_foreign_quorum_is_reported() {
    let mut t = zk_tree();
    put(
        &mut t,
        "/controller",
        r#"{"version":2,"brokerid":3000,"timestamp":"1","kraftControllerEpoch":4}"#,
    );
    put(
        &mut t,
        "/migration",
        &String::from_utf8(
            MigrationZNode {
                kraft_controller_id: 3000,
                kraft_controller_epoch: 4,
                kraft_metadata_offset: 120,
                kraft_metadata_epoch: 4,
            }
            .encode(),
        )
        .expect("utf-8"),
    );
    let checks = run(&controller(), &[broker(1), broker(2)], &t);
    assert_eq!(line(&checks, "zookeeper /controller").level, Level::Warn);
    let migration = line(&checks, "zookeeper /migration");
    assert_eq!(migration.level, Level::Warn);
    assert!(migration.found.contains("KRaft offset 120"), "{migration}");
    let mut other = controller();
    other.node_id = 9000;
    other.voter_ids = vec![9000];
    let checks = run(&other, &[], &t);
    assert_eq!(line(&checks, "zookeeper /controller").level, Level::Fail);
}

#[test]
fn undecodable_znodes_are_failures_not_panics() {
    let mut t = zk_tree();
    put(&mut t, "/cluster/id", "not json");
    put(&mut t, "/migration", r#"{"version":7}"#);
    put(&mut t, "/brokers/topics/bad", "[");
    let checks = run(&controller(), &[], &t);
    assert!(!can_start(&checks));
    assert_eq!(line(&checks, "zookeeper /cluster/id").level, Level::Fail);
    assert!(failures(&checks).iter().any(|f| f.contains("/migration")));
}

#[test]
fn the_controller_must_reach_the_brokers_and_bootstrap_a_migration_capable_version() {
    let mut c = controller();
    c.inter_broker_listener = "INTERNAL".to_owned();
    c.bootstrap_metadata_version = Some(MetadataVersion::IBP_3_5_IV2);
    let checks = run(&c, &[broker(1), broker(2)], &zk_tree());
    let listener = line(&checks, "controller inter-broker listener");
    assert_eq!(listener.level, Level::Fail);
    assert!(
        listener
            .found
            .contains("broker 1 has PLAINTEXT://localhost:9091"),
        "{listener}"
    );
    let mv = line(&checks, "controller metadata.version");
    assert_eq!(mv.level, Level::Fail);
    assert!(mv.to_string().contains("3.6-IV1"), "{mv}");
    // An initial copy already made with 3.5 may go on.
    let mut t = zk_tree();
    put(
        &mut t,
        "/migration",
        &String::from_utf8(
            MigrationZNode {
                kraft_controller_id: 3000,
                kraft_controller_epoch: 1,
                kraft_metadata_offset: 10,
                kraft_metadata_epoch: 1,
            }
            .encode(),
        )
        .expect("utf-8"),
    );
    let checks = run(&c, &[], &t);
    assert_eq!(
        line(&checks, "controller metadata.version").level,
        Level::Ok
    );
}
