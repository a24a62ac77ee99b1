//! A krust broker with an Apache Kafka 3.9 controller (the oracle for the broker ↔ controller
//! protocol): the krust broker's BrokerRegistration (features, listeners, `directory.id`) is
//! accepted and its heartbeats get it unfenced by Kafka's `QuorumController`; `kafka-topics
//! --create` through the krust broker reaches Kafka's controller inside an Envelope (Kafka
//! decodes krust's serialized principal and the re-encoded request); the records of Kafka's
//! console producer come back through the console consumer; SIGTERM is a controlled shutdown
//! that Kafka's controller agrees to.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, free_ports, random_kafka_uuid};
use support::{describe_topic, spawn_server};

mod support;

const START_TIMEOUT: Duration = Duration::from_secs(90);

#[test]
fn a_krust_broker_registers_with_and_forwards_to_a_kafka_controller() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(2).expect("ports");
    let (controller_port, broker_port) = (ports[0], ports[1]);
    let voters = format!("1@127.0.0.1:{controller_port}");
    let _controller = KafkaNode::builder(&dist)
        .role(KafkaRole::Controller)
        .node_id(1)
        .cluster_id(cluster_id.clone())
        .controller_port(controller_port)
        .quorum_voters(voters.clone())
        .start()
        .expect("Kafka 3.9 controller");

    let root = tempfile::tempdir().expect("tempdir");
    let props = root.path().join("server.properties");
    std::fs::write(
        &props,
        format!(
            "process.roles=broker\nnode.id=2\ncontroller.listener.names=CONTROLLER\n\
             controller.quorum.voters={voters}\n\
             listeners=PLAINTEXT://127.0.0.1:{broker_port}\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\noffsets.topic.replication.factor=1\n",
            root.path().join("logs").display()
        ),
    )
    .expect("write properties");
    support::format(&props, &cluster_id);
    let mut broker = spawn_server(root.path(), "broker-2");
    broker
        .wait_for_line("Kafka Server started", START_TIMEOUT)
        .unwrap_or_else(|e| {
            panic!(
                "the krust broker was never unfenced: {e}\n{}",
                broker.log_tail(40)
            )
        });

    let bootstrap = format!("127.0.0.1:{broker_port}");
    dist.create_topic(&bootstrap, "via-envelope", 2, 1, &[])
        .unwrap_or_else(|e| panic!("kafka-topics --create: {e}\n{}", broker.log_tail(40)));
    let described = describe_topic(&dist, &bootstrap, "via-envelope");
    assert!(
        described.contains("PartitionCount: 2") && described.contains("Leader: 2"),
        "the krust broker leads the new topic:\n{described}"
    );
    dist.console_produce(&bootstrap, "via-envelope", "x\ny\n", &[], &[])
        .unwrap_or_else(|e| panic!("kafka-console-producer: {e}\n{}", broker.log_tail(40)));
    let out = dist
        .console_consume(&bootstrap, "via-envelope", 2, &[], Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("kafka-console-consumer: {e}\n{}", broker.log_tail(40)));
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["x", "y"]);

    let status = broker
        .terminate(Duration::from_secs(60))
        .expect("terminate");
    assert!(
        status.success(),
        "exit status {status}\n{}",
        broker.log_tail(40)
    );
    assert!(
        broker
            .output()
            .contains("the controller agreed to the controlled shutdown"),
        "Kafka's controller agreed to the controlled shutdown:\n{}",
        broker.log_tail(40)
    );
}
