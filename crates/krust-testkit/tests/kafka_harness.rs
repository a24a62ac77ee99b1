//! Tests of the harness itself against a real Apache Kafka 3.9: Kafka's tools run, a combined
//! KRaft node starts, serves a topic, stops cleanly, restarts and dies on SIGKILL.

use std::time::Duration;

use krust_testkit::{HarnessError, KafkaCluster, KafkaDist, KafkaNode, KafkaRole, class};

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)")
}

#[test]
fn storage_tool_random_uuid_prints_a_kafka_uuid() {
    let id = dist().storage_random_uuid().expect("random-uuid");
    assert_eq!(id.len(), 22, "{id:?}");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{id:?}"
    );
}

#[test]
fn a_failing_tool_run_is_reported_with_its_output() {
    let output = dist()
        .run_tool(
            class::STORAGE_TOOL,
            &["no-such-command"],
            Duration::from_secs(60),
        )
        .expect("tool ran");
    assert!(!output.success());
    let err = output.ok().expect_err("non-zero exit");
    assert!(matches!(err, HarnessError::ToolFailed { .. }), "{err}");
}

#[test]
fn combined_node_starts_serves_a_topic_restarts_and_dies_on_sigkill() {
    let dist = dist();
    let mut node = KafkaNode::builder(&dist)
        .node_id(1)
        .role(KafkaRole::Combined)
        .start()
        .expect("kafka starts");
    let meta = node.meta_properties().expect("meta.properties");
    assert_eq!(
        meta.get("cluster.id").map(String::as_str),
        Some(node.cluster_id()),
        "{meta:?}"
    );
    assert_eq!(
        meta.get("node.id").map(String::as_str),
        Some("1"),
        "{meta:?}"
    );
    assert_eq!(
        meta.get("version").map(String::as_str),
        Some("1"),
        "{meta:?}"
    );
    assert_eq!(
        meta.get("directory.id").map(String::len),
        Some(22),
        "{meta:?}"
    );

    node.create_topic("harness", 1, &[]).expect("create topic");
    node.console_produce("harness", "k1\ta\nk2\tb\n", &[("parse.key", "true")], &[])
        .expect("produce");
    assert!(
        node.partition_dir("harness", 0)
            .join("00000000000000000000.log")
            .is_file()
    );
    let consumed = node
        .console_consume(
            "harness",
            2,
            &[("print.key", "true"), ("print.offset", "true")],
            Duration::from_secs(30),
        )
        .expect("consume");
    let lines: Vec<&str> = consumed.stdout.lines().collect();
    assert_eq!(
        lines,
        vec!["Offset:0\tk1\ta", "Offset:1\tk2\tb"],
        "{}",
        consumed.stderr
    );
    let perf = node
        .producer_perf("harness", 500, 100, &[("linger.ms", "5")])
        .expect("perf");
    assert_eq!(perf.records_sent, 500, "{}", perf.output.stdout);
    assert!(perf.records_per_sec > 0.0 && perf.max_latency_ms >= perf.avg_latency_ms);

    node.terminate(Duration::from_secs(60))
        .expect("clean shutdown");
    assert!(!node.is_running().expect("state"));

    // The metadata log and the bootstrap snapshot, decoded by Kafka's own dump tool.
    let metadata_log = node
        .log_dir()
        .join("__cluster_metadata-0/00000000000000000000.log");
    let bootstrap = node.log_dir().join("bootstrap.checkpoint");
    let dump = dist
        .dump_log_segments(
            &[&metadata_log, &bootstrap],
            &["--cluster-metadata-decoder"],
            Duration::from_secs(60),
        )
        .expect("dump the metadata log");
    let payloads: Vec<&str> = dump
        .batches()
        .flat_map(|b| b.records.iter())
        .filter_map(|r| r.payload.as_deref())
        .collect();
    assert!(
        payloads
            .iter()
            .any(|p| p.contains("\"TOPIC_RECORD\"") && p.contains("\"harness\"")),
        "{payloads:#?}"
    );
    assert!(dump.batches().all(|b| b.is_valid));
    assert!(
        dump.file("bootstrap.checkpoint")
            .is_some_and(|f| f.bootstrap_snapshot && !f.batches.is_empty())
    );

    node.start().expect("restart");
    let port = node.broker_port().expect("broker port");
    node.kill().expect("kill");
    assert!(!node.is_running().expect("state"));
    assert!(
        !krust_testkit::port_accepts(port),
        "a killed node must not listen"
    );
}

#[test]
fn a_separate_controller_and_broker_form_a_cluster_that_serves_topics() {
    let dist = dist();
    let mut cluster = KafkaCluster::builder(&dist)
        .controllers(1)
        .brokers(1)
        .start()
        .expect("cluster starts");
    let roles: Vec<KafkaRole> = cluster.nodes().iter().map(KafkaNode::role).collect();
    assert_eq!(roles, vec![KafkaRole::Controller, KafkaRole::Broker]);
    let broker = cluster.node_mut(2).expect("broker is node 2");
    broker
        .create_topic("on-broker", 2, &[])
        .expect("create topic via the broker");
    // The broker creates the partition's folder when it applies the metadata, a moment after
    // the controller acknowledged the creation.
    let partition = broker.partition_dir("on-broker", 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !partition.is_dir() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        partition.is_dir(),
        "{} was not created",
        partition.display()
    );
    let controller_dir = cluster.nodes()[0].log_dir();
    assert!(controller_dir.join("__cluster_metadata-0").is_dir());
    assert!(
        !controller_dir.join("on-broker-0").exists(),
        "a controller holds no partitions"
    );
}

#[test]
fn an_unformatted_node_is_refused_by_storage_info_then_starts_once_formatted() {
    let dist = dist();
    let mut node = KafkaNode::builder(&dist)
        .build_unformatted()
        .expect("properties written");
    let props = node.properties_path().display().to_string();
    let info = dist
        .run_tool(
            class::STORAGE_TOOL,
            &["info", "-c", &props],
            Duration::from_secs(60),
        )
        .expect("info runs");
    assert!(
        !info.success(),
        "an unformatted dir is a problem: {}",
        info.stdout
    );
    // Format it "by hand" (what `krust storage format` would do), then Kafka must start on it.
    dist.run_tool(
        class::STORAGE_TOOL,
        &["format", "-t", node.cluster_id(), "-c", &props],
        Duration::from_secs(60),
    )
    .expect("format runs")
    .ok()
    .expect("format succeeds");
    let info = dist
        .run_tool(
            class::STORAGE_TOOL,
            &["info", "-c", &props],
            Duration::from_secs(60),
        )
        .expect("info runs")
        .ok()
        .expect("info is happy");
    assert!(
        info.stdout
            .contains(&format!("cluster.id={}", node.cluster_id())),
        "{}",
        info.stdout
    );
    node.start().expect("Kafka starts on the formatted storage");
}

#[test]
fn run_binary_captures_stdout_and_stderr_apart_and_feeds_stdin() {
    let out = krust_testkit::run_binary(
        "/bin/sh",
        &["-c", "read line; echo \"got $line\"; echo oops >&2; exit 4"],
        Some(b"hello\n"),
        Duration::from_secs(10),
    )
    .expect("runs");
    assert_eq!(out.stdout, "got hello\n");
    assert_eq!(out.stderr, "oops\n");
    assert_eq!(out.status.code(), Some(4));
    let err = krust_testkit::run_binary(
        "/bin/sh",
        &["-c", "sleep 30"],
        None,
        Duration::from_millis(200),
    )
    .expect_err("times out");
    assert!(matches!(err, HarnessError::ToolTimeout { .. }), "{err}");
}

#[test]
fn a_port_taken_before_start_is_replaced_and_drop_kills_the_node_and_removes_its_dir() {
    let dist = dist();
    let mut node = KafkaNode::builder(&dist).build().expect("formatted");
    let taken = node.broker_port().expect("broker port");
    let squatter =
        std::net::TcpListener::bind(("127.0.0.1", taken)).expect("occupy the broker port");
    node.start().expect("starts on other ports");
    assert_ne!(node.broker_port(), Some(taken));
    assert!(krust_testkit::port_accepts(
        node.broker_port().expect("port")
    ));
    drop(squatter);

    // Dropping the node kills the JVM and removes its folder.
    let pid = node.process().and_then(|p| p.pid()).expect("running");
    let dir = node.dir().to_path_buf();
    drop(node);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "JVM {pid} must be gone after drop"
    );
    assert!(!dir.exists() || std::env::var_os("KRUST_TESTKIT_KEEP").is_some());
}

#[test]
fn a_standalone_dynamic_quorum_node_starts_and_leads_its_quorum() {
    let dist = dist();
    let node = KafkaNode::builder(&dist)
        .standalone()
        .format_arg("--release-version")
        .format_arg("3.9")
        .start()
        .expect("standalone node starts");
    assert_eq!(node.quorum_voters(), "");
    let snapshot = node
        .log_dir()
        .join("__cluster_metadata-0/00000000000000000000-0000000000.checkpoint");
    assert!(
        snapshot.is_file(),
        "--standalone writes the bootstrap snapshot"
    );
    let status = dist
        .run_tool(
            class::METADATA_QUORUM,
            &[
                "--bootstrap-controller",
                &node.bootstrap_controller(),
                "describe",
                "--status",
            ],
            Duration::from_secs(60),
        )
        .expect("describe runs")
        .ok()
        .expect("describe succeeds");
    let leader = status
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("LeaderId:"))
        .map(str::trim);
    assert_eq!(leader, Some("1"), "{}", status.stdout);
}

#[test]
fn a_zookeeper_mode_broker_registers_in_zookeeper_and_serves_topics() {
    let dist = dist();
    let zk = krust_testkit::ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let srvr = zk.four_letter_word("srvr").expect("srvr");
    assert!(srvr.contains("Mode: standalone"), "{srvr:?}");
    let node = KafkaNode::builder(&dist)
        .role(KafkaRole::ZkBroker)
        .node_id(7)
        .zookeeper(zk.connect_string())
        .start()
        .expect("ZooKeeper-mode broker starts");
    let meta = node.meta_properties().expect("meta.properties");
    assert_eq!(
        meta.get("broker.id").map(String::as_str),
        Some("7"),
        "{meta:?}"
    );
    let cluster_id = zk.shell(&["get", "/cluster/id"]).expect("zookeeper shell");
    assert!(
        cluster_id.stdout.contains(node.cluster_id()),
        "ZooKeeper's /cluster/id {} vs meta.properties {}",
        cluster_id.stdout,
        node.cluster_id()
    );
    let broker = zk
        .shell(&["get", "/brokers/ids/7"])
        .expect("zookeeper shell");
    assert!(
        broker
            .stdout
            .contains(&format!("\"port\":{}", node.broker_port().expect("port"))),
        "{}",
        broker.stdout
    );
    node.create_topic("in-zk", 2, &[]).expect("create topic");
    let topic = zk
        .shell(&["get", "/brokers/topics/in-zk"])
        .expect("zookeeper shell");
    assert!(topic.stdout.contains("\"partitions\""), "{}", topic.stdout);
}
