//! KIP-630 across implementations: a Kafka 3.9 controller leads a two-voter quorum with a krust
//! controller and takes metadata snapshots (`metadata.log.max.snapshot.interval.ms` = 1 s). The
//! krust node is stopped and its log emptied (its `quorum-state` kept); on restart it fetches from
//! offset 0, Kafka answers with its latest snapshot id, and krust downloads the snapshot with
//! FetchSnapshot, installs it (byte-identical `.checkpoint` file, log start = snapshot end) and
//! catches up with Fetch from there.

#[path = "quorum_support/mod.rs"]
mod support;

use std::time::Duration;

use krust::metadata_quorum::Bootstrap;
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, KrustProcess, free_ports};
use support::{KRUST, Node, STARTED_LINE, format, server_properties, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(90);
const KAFKA_ID: i32 = 2;

fn snapshots(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| n.ends_with(".checkpoint") && !n.starts_with("00000000000000000000-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn an_emptied_krust_voter_catches_up_from_a_kafka_snapshot() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = krust_testkit::random_kafka_uuid();
    let ports = free_ports(2).expect("ports");
    let voters = format!("1@127.0.0.1:{},{KAFKA_ID}@127.0.0.1:{}", ports[0], ports[1]);
    let dir = root.path().join("node1");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut krust = Node {
        id: 1,
        port: ports[0],
        dir,
        process: None,
    };
    std::fs::write(
        krust.properties(),
        server_properties(1, ports[0], &voters, &krust.data_dir(), &[]),
    )
    .expect("properties");
    format(&krust.properties(), &cluster_id);
    let mut kafka = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Controller)
        .cluster_id(cluster_id.clone())
        .controller_port(ports[1])
        .quorum_voters(voters.clone())
        .prop("metadata.log.max.snapshot.interval.ms", 1000)
        .build()
        .expect("Kafka controller");
    kafka.spawn().expect("spawn Kafka");
    let mut process = KrustProcess::builder(KRUST)
        .args(["server".as_ref(), krust.properties().as_os_str()])
        .env("RUST_LOG", "info,krust_net=warn")
        .dir(krust.dir.clone())
        .name("krust-1")
        .start()
        .expect("start krust");
    process
        .wait_for_line(STARTED_LINE, WAIT)
        .expect("krust started");
    kafka.wait_ready(WAIT).expect("Kafka started");
    let bootstrap = Bootstrap::Controller(format!("127.0.0.1:{}", ports[0]));

    // Kafka must lead (only its QuorumController writes records to snapshot). If krust won,
    // hand leadership over: a graceful stop names Kafka the preferred successor, and with two
    // voters Kafka is elected as soon as krust is back to vote.
    for _ in 0..5 {
        let q = wait_for_quorum(&bootstrap, WAIT, |q| q.leader_id > 0)
            .unwrap_or_else(|| panic!("no leader\n{}", process.log_tail(30)));
        if q.leader_id == KAFKA_ID {
            break;
        }
        process
            .terminate(Duration::from_secs(30))
            .expect("stop krust");
        let mark = process.log_mark();
        process.restart().expect("restart krust");
        process
            .wait_for_line_since(mark, STARTED_LINE, WAIT)
            .expect("krust restarted");
    }

    // Wait until Kafka has written a snapshot of committed metadata.
    let kafka_partition = kafka.log_dir().join("__cluster_metadata-0");
    let deadline = std::time::Instant::now() + WAIT;
    while snapshots(&kafka_partition).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "Kafka wrote no snapshot\n{}",
            process.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Empty krust's log (keep its election record) and restart it.
    process
        .terminate(Duration::from_secs(30))
        .expect("stop krust");
    let partition = krust.data_dir().join("__cluster_metadata-0");
    for entry in std::fs::read_dir(&partition).expect("list") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n != "quorum-state") {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    let mark = process.log_mark();
    process.restart().expect("restart krust");
    process
        .wait_for_line_since(mark, STARTED_LINE, WAIT)
        .expect("krust restarted");
    process
        .wait_for_line_since(mark, "installing a snapshot from the leader", WAIT)
        .unwrap_or_else(|e| panic!("krust did not install Kafka's snapshot: {e}"));
    // Caught up: krust's log end equals the leader's (Kafka appends a NoOp every 500 ms, so
    // poll until a moment where both agree).
    let q = wait_for_quorum(&bootstrap, WAIT, |q| {
        let end = |id: i32| {
            q.voters
                .iter()
                .find(|v| v.replica_id.0 == id)
                .map(|v| v.log_end_offset)
        };
        q.leader_id == KAFKA_ID && end(1).is_some() && end(1) == end(KAFKA_ID)
    })
    .unwrap_or_else(|| panic!("krust did not catch up\n{}", process.log_tail(40)));
    println!("caught up: high watermark {}", q.high_watermark);

    // The installed snapshot is byte-identical to Kafka's file of the same name.
    let installed = snapshots(&partition);
    assert!(
        !installed.is_empty(),
        "no snapshot file in {}",
        partition.display()
    );
    let name = installed.last().expect("one").clone();
    let ours = std::fs::read(partition.join(&name)).expect("read ours");
    let theirs = std::fs::read(kafka_partition.join(&name)).expect("Kafka has the same snapshot");
    assert_eq!(ours, theirs, "{name} differs from Kafka's");
    println!(
        "installed {name} ({} bytes), identical to Kafka's",
        ours.len()
    );
    kafka
        .terminate(Duration::from_secs(60))
        .expect("stop Kafka");
    process
        .terminate(Duration::from_secs(30))
        .expect("stop krust");
    krust.process = None;
}
