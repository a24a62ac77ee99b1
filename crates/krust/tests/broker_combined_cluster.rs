//! Three combined krust nodes (`process.roles=broker,controller`): each node's Raft replica is a
//! voter whose committed events feed both its quorum controller and its broker. The brokers
//! register with whichever node leads and are unfenced; an RF=3 topic created through one node
//! takes records from Kafka's console producer (acks=all) and serves them from another. SIGTERM
//! on the node that is the active controller shuts its broker down in a controlled way first
//! (approved by itself), then hands leadership over; the records stay readable through the
//! other two; the node restarts, registers with the new leader and serves the topic again.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use krust::metadata_quorum::{Bootstrap, describe};
use krust_testkit::{KafkaDist, KrustProcess, free_ports, random_kafka_uuid};
use support::{START_TIMEOUT, STARTED_LINE, consume_sorted, spawn_server};

mod support;

#[test]
fn three_combined_nodes_serve_an_rf3_topic_through_a_controller_handover() {
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    // Per node: a controller port and a broker port.
    let ports = free_ports(6).expect("ports");
    let voters = (1..=3)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id - 1]))
        .collect::<Vec<_>>()
        .join(",");
    let mut dirs = Vec::new();
    for id in 1..=3usize {
        let dir = root.path().join(format!("node{id}"));
        std::fs::create_dir_all(&dir).expect("node dir");
        let (controller, broker) = (ports[id - 1], ports[id + 2]);
        let text = format!(
            "process.roles=broker,controller\nnode.id={id}\n\
             controller.quorum.voters={voters}\ncontroller.listener.names=CONTROLLER\n\
             listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{broker}\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\noffsets.topic.replication.factor=3\n\
             controller.quorum.election.timeout.ms=500\ncontroller.quorum.fetch.timeout.ms=1000\n",
            dir.join("data").display()
        );
        let props = dir.join("server.properties");
        std::fs::write(&props, text).expect("write properties");
        support::format(&props, &cluster_id);
        dirs.push(dir);
    }
    // Start them together: a node's broker is unfenced only once a quorum has formed.
    let mut processes: Vec<KrustProcess> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| spawn_server(dir, i + 1))
        .collect();
    for (i, p) in processes.iter_mut().enumerate() {
        p.wait_for_line(STARTED_LINE, START_TIMEOUT)
            .unwrap_or_else(|e| panic!("node {} start: {e}\n{}", i + 1, p.log_tail(40)));
    }
    let bootstrap = |id: usize| format!("127.0.0.1:{}", ports[id + 2]);

    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let topic = "rf3";
    dist.create_topic(&bootstrap(1), topic, 3, 3, &[])
        .unwrap_or_else(|e| panic!("kafka-topics --create: {e}\n{}", processes[0].log_tail(40)));
    let input: String = (0..12).map(|i| format!("r{i}\n")).collect();
    let mut expected: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
    expected.sort();
    dist.console_produce(&bootstrap(1), topic, &input, &[], &[])
        .unwrap_or_else(|e| panic!("kafka-console-producer: {e}\n{}", processes[0].log_tail(40)));
    assert_eq!(consume_sorted(&dist, &bootstrap(2), topic, 12), expected);

    // SIGTERM the active controller's node.
    let controllers = Bootstrap::Controller(
        ports[..3]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    let (_, quorum) = describe(&controllers, Duration::from_secs(30)).expect("describe quorum");
    let leader = usize::try_from(quorum.leader_id).expect("a leader");
    assert!((1..=3).contains(&leader), "leader {leader}");
    let node = &mut processes[leader - 1];
    let status = node.terminate(Duration::from_secs(60)).expect("terminate");
    assert!(status.success(), "node {leader} exit status {status}");
    assert!(
        node.output()
            .contains("the controller agreed to the controlled shutdown"),
        "node {leader} shut its broker down in a controlled way:\n{}",
        node.log_tail(40)
    );
    let other = if leader == 1 { 2 } else { 1 };
    assert_eq!(
        consume_sorted(&dist, &bootstrap(other), topic, 12),
        expected,
        "readable through the other nodes"
    );

    // Restart it: it rejoins the quorum, registers with the new leader and serves again.
    let node = &mut processes[leader - 1];
    let mark = node.log_mark();
    node.restart().expect("restart");
    node.wait_for_line_since(mark, STARTED_LINE, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("node {leader} restart: {e}\n{}", node.log_tail(40)));
    assert_eq!(
        consume_sorted(&dist, &bootstrap(leader), topic, 12),
        expected,
        "the restarted node serves the topic"
    );
    for (i, p) in processes.iter_mut().enumerate() {
        let status = p.terminate(Duration::from_secs(60)).expect("terminate");
        assert!(status.success(), "node {} exit status {status}", i + 1);
    }
}
