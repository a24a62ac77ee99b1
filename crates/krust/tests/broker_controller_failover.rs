//! A krust broker follows the active controller through a failover (Kafka's
//! `NodeToControllerChannelManager`): 3 krust controllers and 1 krust broker; the active
//! controller is SIGKILLed; the broker's heartbeats and forwarded admin requests go to the newly
//! elected controller (retried on disconnect / NOT_CONTROLLER until it is known), so
//! `kafka-topics --create` through the broker succeeds, the broker stays unfenced (it can lead
//! the new topic and a producer writes to it) and the consumer reads everything back.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use krust::metadata_quorum::{Bootstrap, describe};
use krust_testkit::{KafkaDist, KrustProcess, free_ports, random_kafka_uuid, run_binary};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");
const START_TIMEOUT: Duration = Duration::from_secs(60);
const CONSUME_TIMEOUT: Duration = Duration::from_secs(30);
const STARTED_LINE: &str = "Kafka Server started";

fn start_node(root: &Path, id: i32, text: &str, cluster_id: &str) -> KrustProcess {
    let dir: PathBuf = root.join(format!("node{id}"));
    std::fs::create_dir_all(&dir).expect("node dir");
    let props = dir.join("server.properties");
    std::fs::write(&props, text).expect("write properties");
    run_binary(
        KRUST,
        &[
            "storage",
            "format",
            "-t",
            cluster_id,
            "-c",
            &props.display().to_string(),
        ],
        None,
        Duration::from_secs(30),
    )
    .expect("run krust storage format")
    .ok()
    .expect("krust storage format");
    let mut p = KrustProcess::builder(KRUST)
        .args(["server".as_ref(), props.as_os_str()])
        .env("RUST_LOG", "info,krust_net=warn")
        .dir(dir)
        .name(format!("krust-{id}"))
        .start()
        .expect("start krust server");
    p.wait_for_line(STARTED_LINE, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("node {id} start: {e}\n{}", p.log_tail(40)));
    p
}

#[test]
fn the_broker_follows_a_controller_failover() {
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(4).expect("ports");
    let voters = (1..=3)
        .zip(&ports)
        .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut controllers: Vec<KrustProcess> = (1..=3)
        .zip(&ports)
        .map(|(id, port)| {
            let data = root.path().join(format!("node{id}")).join("data");
            let text = format!(
                "process.roles=controller\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
                 listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters={voters}\n\
                 log.dirs={}\ncontroller.quorum.election.timeout.ms=500\n\
                 controller.quorum.fetch.timeout.ms=1000\n",
                data.display()
            );
            start_node(root.path(), id, &text, &cluster_id)
        })
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
