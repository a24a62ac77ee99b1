//! Tests of the harness itself against a real Apache Kafka 3.9: Kafka's tools run, a combined
//! KRaft node starts, serves a topic, stops cleanly, restarts and dies on SIGKILL.

use std::time::Duration;

use krust_testkit::{HarnessError, KafkaDist, KafkaNode, KafkaRole, class};

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
    let meta =
        std::fs::read_to_string(node.log_dir().join("meta.properties")).expect("meta.properties");
    assert!(
        meta.contains(&format!("cluster.id={}", node.cluster_id())),
        "{meta}"
    );
    assert!(meta.contains("node.id=1"), "{meta}");

    node.create_topic("harness", 1, &[]).expect("create topic");
    node.console_produce("harness", "a\nb\n", &[], &[])
        .expect("produce");
    assert!(
        node.partition_dir("harness", 0)
            .join("00000000000000000000.log")
            .is_file()
    );

    node.terminate(Duration::from_secs(60))
        .expect("clean shutdown");
    assert!(!node.is_running().expect("state"));
    node.start().expect("restart");
    let port = node.broker_port().expect("broker port");
    node.kill().expect("kill");
    assert!(!node.is_running().expect("state"));
    assert!(
        !krust_testkit::port_accepts(port),
        "a killed node must not listen"
    );
}
