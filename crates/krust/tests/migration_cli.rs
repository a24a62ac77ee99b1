//! `krust migration preflight | status | verify | rollback-plan` against a real ZooKeeper (the
//! one shipped in Kafka 3.9's jars), a real Apache Kafka 3.9 ZooKeeper-mode broker and a krust
//! controller quorum migrating it.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ToolOutput, ZooKeeperServer, run_binary};
use support::{FAST_TIMEOUTS, KRUST, Quorum, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(120);
const MIGRATION_COMPLETED: &str = "Completed migration of metadata from ZooKeeper to KRaft";
const REGISTERED: &str = "Successfully registered broker";

fn krust(args: &[&str]) -> ToolOutput {
    run_binary(KRUST, args, None, Duration::from_secs(90)).expect("run krust")
}

fn text(out: &ToolOutput) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status, out.stdout, out.stderr
    )
}

/// Runs `args` until `done` holds for its output (dual-write and registrations are
/// asynchronous), at most `WAIT`.
fn krust_until(args: &[&str], done: impl Fn(&ToolOutput) -> bool) -> ToolOutput {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = krust(args);
        if done(&out) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Overwrites a znode, as an operator's `zookeeper-shell.sh set` would.
fn set_znode(connect: &str, znode: &str, data: &[u8]) {
    use krust_zk::backend::ZkBackend as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = krust_zk::client::ZkClient::connect(
            krust_zk::client::ZkClientConfig::new(connect)
                .with_connection_timeout(Duration::from_secs(10)),
        )
        .await
        .expect("ZooKeeper session");
        client
            .apply(&krust_zk::ops::ZkOp::SetData {
                path: znode.to_owned(),
                data: data.to_vec(),
                version: krust_zk::ops::ANY_VERSION,
            })
            .await
            .expect("set the znode");
    });
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn migration_tools_against_a_zookeeper_cluster_and_krust_controllers() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut broker = KafkaNode::builder(&dist)
        .role(KafkaRole::ZkBroker)
        .node_id(101)
        .zookeeper(connect.clone())
        .start_timeout(WAIT)
        .start()
        .expect("ZooKeeper-mode broker starts");
    broker
        .create_topic("made-in-zk", 2, &[("retention.ms", "123456789")])
        .expect("create a topic in ZooKeeper mode");

    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = Quorum::in_cluster(1, &extra, broker.cluster_id());
    let controller_props = path(&quorum.node(1).properties());

    // Preflight: the broker's file as it runs, given the quorum but not the migration flag.
    let base = std::fs::read_to_string(broker.properties_path()).expect("broker properties");
    let without = quorum.root.path().join("broker-without-flag.properties");
    let with = quorum.root.path().join("broker-with-flag.properties");
    let quorum_lines = format!(
        "\ncontroller.quorum.voters={}\ncontroller.listener.names=CONTROLLER\n",
        quorum.voters
    );
    std::fs::write(&without, format!("{base}{quorum_lines}")).expect("write");
    std::fs::write(
        &with,
        format!("{base}{quorum_lines}zookeeper.metadata.migration.enable=true\n"),
    )
    .expect("write");
    let preflight = |broker_file: &Path| {
        krust(&[
            "migration",
            "preflight",
            "--zookeeper",
            &connect,
            "--config",
            &controller_props,
            "--broker-config",
            &path(broker_file),
        ])
    };
    let out = preflight(&without);
    assert!(!out.success(), "{}", text(&out));
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("FAIL broker 101 zookeeper.metadata.migration.enable: false in"))
        .unwrap_or_else(|| panic!("no failure line for the flag\n{}", text(&out)));
    assert!(
        line.contains("fix: set zookeeper.metadata.migration.enable=true in"),
        "{line}"
    );
    let out = preflight(&with);
    println!("{}", out.stdout);
    assert!(out.success(), "{}", text(&out));
    assert!(
        out.stdout.contains("The migration can start."),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout
            .contains("OK zookeeper /controller: ZooKeeper controller broker 101"),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout.contains(&format!(
            "OK controller cluster id: {} in",
            broker.cluster_id()
        )),
        "{}",
        text(&out)
    );
    // Bad input: a clear error, no panic.
    let out = krust(&[
        "migration",
        "preflight",
        "--zookeeper",
        &connect,
        "--config",
        "/nonexistent/controller.properties",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        out.stderr.contains("/nonexistent/controller.properties"),
        "{}",
        text(&out)
    );
    assert!(!out.stderr.contains("panicked"), "{}", text(&out));

    // The quorum in PRE_MIGRATION waits for the broker.
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    let bootstrap = quorum.node(1).address();
    let status = [
        "migration",
        "status",
        "--bootstrap-controller",
        &bootstrap,
        "--zookeeper",
        &connect,
    ];
    let out = krust_until(&status, |o| {
        o.stdout.contains("waiting for ZooKeeper brokers 101")
    });
    println!("{}", out.stdout);
    assert!(out.success(), "{}", text(&out));
    assert!(
        out.stdout.contains("Phase: PRE_MIGRATION"),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout.contains("Broker 101: NOT registered with the quorum; in ZooKeeper /brokers/ids and topic assignments"),
        "{}",
        text(&out)
    );
    let verify = [
        "migration",
        "verify",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        &bootstrap,
    ];
    let out = krust(&verify);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stderr.contains("PRE_MIGRATION"), "{}", text(&out));

    // The broker enters migration mode; the controller copies ZooKeeper and dual-writes.
    broker
        .enable_migration(&quorum.voters)
        .expect("broker config");
    broker.restart().expect("broker restarts in migration mode");
    broker
        .wait_for_log(REGISTERED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", quorum.log_tails()));
    quorum
        .node(1)
        .process
        .as_mut()
        .expect("started")
        .wait_for_line(MIGRATION_COMPLETED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", quorum.log_tails()));

    let out = krust_until(&status, |o| o.stdout.contains("Phase: MIGRATION (hybrid"));
    println!("{}", out.stdout);
    assert!(
        out.stdout.contains("Phase: MIGRATION (hybrid"),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout
            .contains("Broker 101: registered as a ZooKeeper-mode broker"),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout
            .contains("ZkController: KRaft controller 1 (epoch"),
        "{}",
        text(&out)
    );
    assert!(out.stdout.contains("RecordsCopied: "), "{}", text(&out));
    assert!(
        !out.stdout.contains("RecordsCopied: unknown"),
        "{}",
        text(&out)
    );
    let mut json_args = status.to_vec();
    json_args.push("--json");
    let out = krust(&json_args);
    println!("{}", out.stdout);
    assert!(out.success(), "{}", text(&out));
    assert!(
        out.stdout.contains(r#""phase":"MIGRATION_HYBRID""#),
        "{}",
        text(&out)
    );

    // ZooKeeper and the quorum agree (once dual-write caught up).
    let out = krust_until(&verify, ToolOutput::success);
    assert!(out.success(), "{}", text(&out));
    assert_eq!(out.stdout, "", "{}", text(&out));

    // Drift behind the quorum's back (a hand edit of ZooKeeper) is found.
    set_znode(
        &connect,
        "/config/topics/made-in-zk",
        br#"{"version":1,"config":{"retention.ms":"1"}}"#,
    );
    let out = krust(&verify);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        out.stdout,
        "config topic made-in-zk retention.ms: zookeeper=\"1\" kraft=\"123456789\"\n",
        "{}",
        text(&out)
    );

    let out = krust(&[
        "migration",
        "rollback-plan",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        &bootstrap,
    ]);
    println!("{}", out.stdout);
    assert!(out.success(), "{}", text(&out));
    assert!(
        out.stdout
            .contains("Last completed step: Enter Migration Mode on the brokers"),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout
            .contains(&format!("bin/zookeeper-shell.sh {connect} rmr /controller")),
        "{}",
        text(&out)
    );
    assert!(
        out.stdout.contains("On each broker (101)"),
        "{}",
        text(&out)
    );

    // A ZooKeeper-mode broker in migration mode stops through the KRaft controller's controlled
    // shutdown; the tools are what this test is about, so it is simply killed.
    broker.kill().expect("broker killed");
    quorum.stop_all();
}

/// A quorum created in KRaft mode, whose leader has taken a snapshot: the tools read its image
/// through FetchSnapshot, say there is no migration, and `verify` refuses.
#[test]
fn a_kraft_quorum_with_snapshots_is_no_migration() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    extra.push(("metadata.log.max.record.bytes.between.snapshots", "1"));
    let mut quorum = Quorum::new(1, &extra);
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    let log_dir = quorum.node(1).data_dir().join("__cluster_metadata-0");
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_dir(&log_dir)
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".checkpoint"))
        })
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "no snapshot in {}\n{}",
            log_dir.display(),
            quorum.log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let bootstrap = quorum.node(1).address();
    // The controller registers itself some time after it wins the election, and the first
    // snapshot can precede that registration: wait until the image lists it.
    let status = || {
        krust(&[
            "migration",
            "status",
            "--bootstrap-controller",
            &bootstrap,
            "--zookeeper",
            &connect,
        ])
    };
    let deadline = Instant::now() + WAIT;
    let mut out = status();
    while out.success() && out.stdout.contains("Controllers: (none registered yet)") {
        assert!(
            Instant::now() < deadline,
            "the controller never registered: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
        out = status();
    }
    println!("{}", out.stdout);
    assert!(out.success(), "{}", text(&out));
    assert!(out.stdout.contains("Phase: NONE"), "{}", text(&out));
    assert!(
        out.stdout.contains("(read from snapshot "),
        "the image came through FetchSnapshot: {}",
        text(&out)
    );
    assert!(
        out.stdout.contains("MetadataVersion: 3.9-IV0"),
        "{}",
        text(&out)
    );
    assert!(out.stdout.contains("Controllers: 1"), "{}", text(&out));
    let out = krust(&[
        "migration",
        "verify",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        &bootstrap,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        out.stderr.contains("created in KRaft mode"),
        "{}",
        text(&out)
    );
    let out = krust(&[
        "migration",
        "rollback-plan",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        &bootstrap,
    ]);
    assert!(out.success(), "{}", text(&out));
    assert!(out.stdout.contains("cannot revert"), "{}", text(&out));
    quorum.stop_all();
}
