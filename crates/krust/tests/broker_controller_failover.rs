//! A krust broker follows the active controller through a failover (Kafka's
//! `NodeToControllerChannelManager`): 3 krust controllers and 1 krust broker; the active
//! controller is SIGKILLed; the broker's heartbeats and forwarded admin requests go to the newly
//! elected controller (retried on disconnect / NOT_CONTROLLER until it is known), so
//! `kafka-topics --create` through the broker succeeds, the broker stays unfenced (it can lead
//! the new topic and a producer writes to it) and the consumer reads everything back.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::path::Path;
use std::time::Duration;

use krust::metadata_quorum::{Bootstrap, describe};
use krust_testkit::{KafkaDist, KrustProcess, free_ports, random_kafka_uuid};
use support::{CONSUME_TIMEOUT, start_server, voters, write_controllers, write_node};

mod support;

/// Writes, formats and starts node `id`.
fn start_node(root: &Path, id: i32, text: &str, cluster_id: &str) -> KrustProcess {
    let node = write_node(root, id, text, cluster_id);
    start_server(&node.dir, id)
}

#[test]
fn the_broker_follows_a_controller_failover() {
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(4).expect("ports");
    let voters = voters(&ports);
    let mut controllers: Vec<KrustProcess> =
        write_controllers(root.path(), &ports, &cluster_id, "")
            .iter()
            .map(|node| start_server(&node.dir, node.id))
            .collect();
    let broker_port = ports[3];
    let broker_dir = root.path().join("node4");
    let text = format!(
        "process.roles=broker\nnode.id=4\ncontroller.listener.names=CONTROLLER\n\
         controller.quorum.voters={voters}\n\
         listeners=PLAINTEXT://127.0.0.1:{broker_port}\n\
         inter.broker.listener.name=PLAINTEXT\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
         log.dirs={}\noffsets.topic.replication.factor=1\n\
         controller.quorum.fetch.timeout.ms=1000\n",
        broker_dir.join("logs").display()
    );
    let mut broker = start_node(root.path(), 4, &text, &cluster_id);
    let bootstrap = format!("127.0.0.1:{broker_port}");
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    dist.create_topic(&bootstrap, "before", 1, 1, &[])
        .unwrap_or_else(|e| panic!("create before the failover: {e}\n{}", broker.log_tail(40)));

    let controllers_bootstrap = Bootstrap::Controller(
        ports[..3]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    let (_, quorum) =
        describe(&controllers_bootstrap, Duration::from_secs(30)).expect("describe quorum");
    let leader = quorum.leader_id;
    assert!((1..=3).contains(&leader), "a controller leads: {leader}");
    let index = usize::try_from(leader - 1).expect("index");
    controllers[index]
        .kill()
        .expect("SIGKILL the active controller");

    // Through the broker: the forwarded CreateTopics reaches the new active controller.
    dist.create_topic(&bootstrap, "after", 2, 1, &[])
        .unwrap_or_else(|e| panic!("create after the failover: {e}\n{}", broker.log_tail(60)));
    let (_, quorum) =
        describe(&controllers_bootstrap, Duration::from_secs(30)).expect("describe the new quorum");
    assert_ne!(quorum.leader_id, leader, "a new controller was elected");

    // The broker is still unfenced: it leads the new topic's partitions and takes writes.
    let input = "a\nb\nc\n";
    dist.console_produce(&bootstrap, "after", input, &[], &[])
        .unwrap_or_else(|e| panic!("produce after the failover: {e}\n{}", broker.log_tail(60)));
    let out = dist
        .console_consume(&bootstrap, "after", 3, &[], CONSUME_TIMEOUT)
        .unwrap_or_else(|e| panic!("consume after the failover: {e}\n{}", broker.log_tail(60)));
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["a", "b", "c"]);

    let status = broker
        .terminate(Duration::from_secs(60))
        .expect("terminate the broker");
    assert!(status.success(), "broker exit status {status}");
    assert!(
        broker
            .output()
            .contains("the controller agreed to the controlled shutdown"),
        "a controlled shutdown with the new controller:\n{}",
        broker.log_tail(40)
    );
    for (i, c) in controllers.iter_mut().enumerate() {
        if i != index {
            let status = c.terminate(Duration::from_secs(60)).expect("terminate");
            assert!(
                status.success(),
                "controller {} exit status {status}",
                i + 1
            );
        }
    }
}
