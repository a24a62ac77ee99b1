//! No acknowledged record lost under crashes (issue 5, acceptance "No loss under crashes"):
//! 3 krust controllers + 3 krust brokers, each a `krust server` process; a topic with RF=3 and
//! `min.insync.replicas=2`; Kafka 3.9's own Java producer, idempotent with `acks=all`, writes
//! numbered records and reports each one acknowledged (testkit's `AckedProducer`). Meanwhile the
//! test SIGKILLs the partition's leader, waits for another leader and more acknowledgements,
//! restarts the killed broker and waits for it to be back in the ISR — five rounds, and a sixth
//! that kills the new leader too, right after it took over. Then every
//! acknowledged record must be present exactly once, at its acknowledged offset and in order,
//! as Kafka's console consumer reads the partition and in every replica's own log files
//! (Kafka's `DumpLogSegments` after a clean stop), and the three replicas' logs must be equal.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use krust_testkit::{AckedRecord, KafkaDist, check_acked_records, free_ports, random_kafka_uuid};
use support::{
    Node, broker_properties, consume_offsets, end_offset, kill, terminate_cleanly, voters,
    write_controllers, write_node,
};

mod support;

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Leader changes, ISR changes and acknowledgements after a crash: the controller fences the
/// killed broker after `broker.session.timeout.ms`, then elects a leader from the ISR.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC: &str = "noloss";
const ROUNDS: usize = 5;
/// Acknowledgements awaited before each kill and after each leader change, so every round
/// crashes a leader that is taking writes and proves the new one takes them.
const PROGRESS: usize = 50;

#[test]
fn every_acknowledged_record_survives_five_leader_crashes_on_every_replica() {
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(6).expect("ports");
    let voters = voters(&ports);
    // A short broker session so a SIGKILLed leader is fenced (and replaced) quickly.
    let mut controllers = write_controllers(
        root.path(),
        &ports,
        &cluster_id,
        "broker.session.timeout.ms=3000\n",
    );
    let mut brokers: Vec<Node> = (4..=6)
        .zip(&ports[3..])
        .map(|(id, port)| {
            let dir = root.path().join(format!("node{id}"));
            // Small segments, so the crashes land in logs of several segments.
            let text = broker_properties(
                id,
                *port,
                &voters,
                &format!(
                    "log.dirs={}\nmetadata.log.dir={}\nlog.segment.bytes=65536\n\
                 broker.heartbeat.interval.ms=500\nreplica.lag.time.max.ms=10000\n\
                 offsets.topic.replication.factor=3\n",
                    dir.join("logs").display(),
                    dir.join("metadata").display(),
                ),
            );
            write_node(root.path(), id, &text, &cluster_id)
        })
        .collect();
    for node in controllers.iter_mut().chain(brokers.iter_mut()) {
        node.start();
    }
    let bootstrap = ports[3..]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");

    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    dist.create_topic(&bootstrap, TOPIC, 1, 3, &[("min.insync.replicas", "2")])
        .unwrap_or_else(|e| panic!("kafka-topics --create: {e}"));
    let mut producer = dist
        .start_acked_producer(
            &bootstrap,
            &[TOPIC],
            5,
            u64::MAX,
            Duration::from_millis(300),
            &[("linger.ms", "5")],
            TOOL_TIMEOUT,
        )
        .expect("start the acked producer");

    for round in 1..=ROUNDS {
        let state = producer
            .wait_partition(producer.mark(), TOPIC, 0, CLUSTER_TIMEOUT, |s| {
                s.fully_in_sync()
            })
            .unwrap_or_else(|e| panic!("round {round}: all 3 replicas in sync: {e}"));
        let acked = producer.report().acked.len();
        let acked = producer
            .wait_acked(acked + PROGRESS, CLUSTER_TIMEOUT)
            .unwrap_or_else(|e| panic!("round {round}: acknowledgements before the kill: {e}"))
            .acked
            .len();
        let leader = state.leader.expect("a leader");
        let node = brokers
            .iter_mut()
            .find(|b| b.id == leader)
            .unwrap_or_else(|| panic!("leader {leader} is not a broker"));
        eprintln!("round {round}: SIGKILL leader {leader} after {acked} acknowledgements");
        let mark = producer.mark();
        node.process().kill().expect("SIGKILL the leader");
        let state = producer
            .wait_partition(mark, TOPIC, 0, CLUSTER_TIMEOUT, |s| {
                s.leader.is_some_and(|l| l != leader)
            })
            .unwrap_or_else(|e| panic!("round {round}: a new leader after {leader} died: {e}"));
        let acked = producer.report().acked.len();
        producer
            .wait_acked(acked + PROGRESS, CLUSTER_TIMEOUT)
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: acknowledgements from the new leader {:?}: {e}",
                    state.leader
                )
            });
        node.start();
    }

    // A last round with two leaders killed in a row: the new leader dies before anything else
    // happens, so the ISR shrinks to the one replica left and, below min.insync.replicas, the
    // producer gets NOT_ENOUGH_REPLICAS (and retries) until the others are back. Both restarted
    // brokers then rejoin behind a leader whose log may end elsewhere (truncation by leader
    // epoch, KIP-101).
    let first = producer
        .wait_partition(producer.mark(), TOPIC, 0, CLUSTER_TIMEOUT, |s| {
            s.fully_in_sync()
        })
        .unwrap_or_else(|e| panic!("double crash: all 3 replicas in sync: {e}"))
        .leader
        .expect("a leader");
    let acked = producer.report().acked.len();
    producer
        .wait_acked(acked + PROGRESS, CLUSTER_TIMEOUT)
        .unwrap_or_else(|e| panic!("double crash: acknowledgements before the kills: {e}"));
    let mark = producer.mark();
    kill(&mut brokers, first);
    let second = producer
        .wait_partition(mark, TOPIC, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != first)
        })
        .unwrap_or_else(|e| panic!("double crash: a new leader after {first} died: {e}"))
        .leader
        .expect("a leader");
    let mark = producer.mark();
    kill(&mut brokers, second);
    let last = producer
        .wait_partition(mark, TOPIC, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != first && l != second)
        })
        .unwrap_or_else(|e| {
            panic!("double crash: the last replica leads after {second} died: {e}")
        });
    eprintln!("double crash: SIGKILL {first}, then {second}; {last:?} is left");
    for id in [first, second] {
        brokers
            .iter_mut()
            .find(|b| b.id == id)
            .expect("a broker")
            .start();
    }
    producer
        .wait_partition(producer.mark(), TOPIC, 0, CLUSTER_TIMEOUT, |s| {
            s.fully_in_sync()
        })
        .unwrap_or_else(|e| panic!("all 3 replicas in sync after the double crash: {e}"));
    let acked = producer.report().acked.len();
    producer
        .wait_acked(acked + PROGRESS, CLUSTER_TIMEOUT)
        .unwrap_or_else(|e| panic!("acknowledgements after the double crash: {e}"));
    let report = producer
        .stop(Duration::from_secs(180))
        .expect("the producer flushes and closes");
    let acked: Vec<&AckedRecord> = report.acked_in(TOPIC);
    eprintln!(
        "{} records acknowledged, {} failed",
        acked.len(),
        report.failed.len()
    );
    assert!(
        acked.len() >= ROUNDS * 2 * PROGRESS,
        "too few acknowledgements: {}",
        acked.len()
    );
    // The ISR is full again once the producer is done, so every replica has every record.
    producer
        .wait_partition(producer.mark(), TOPIC, 0, CLUSTER_TIMEOUT, |s| {
            s.fully_in_sync()
        })
        .unwrap_or_else(|e| panic!("all 3 replicas in sync after the producer closed: {e}"));

    // What a consumer reads: the whole partition up to its end offset.
    let end = end_offset(&dist, &bootstrap, TOPIC);
    let consumed = consume_offsets(
        &dist,
        &bootstrap,
        TOPIC,
        usize::try_from(end).expect("end offset"),
    );
    let problems = check_acked_records(&acked, &consumed);
    assert!(
        problems.is_empty(),
        "the consumer's view of {TOPIC}-0 (end offset {end}):\n{}",
        problems.join("\n")
    );

    // Each replica's own files, after a clean stop (brokers first, then the controllers).
    terminate_cleanly(brokers.iter_mut().chain(controllers.iter_mut()));
    let dirs: Vec<PathBuf> = brokers.iter().map(|b| b.partition_dir(TOPIC)).collect();
    let dir_refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let logs = dist
        .read_replica_logs(&dir_refs, TOOL_TIMEOUT)
        .expect("DumpLogSegments on every replica");
    for (node, log) in brokers.iter().zip(&logs) {
        assert!(
            log.problems.is_empty(),
            "broker {}'s log:\n{}",
            node.id,
            log.problems.join("\n")
        );
        let problems = check_acked_records(&acked, &log.records);
        assert!(
            problems.is_empty(),
            "broker {}'s replica of {TOPIC}-0 ({} records):\n{}",
            node.id,
            log.records.len(),
            problems.join("\n")
        );
        assert_eq!(
            log.records.len(),
            consumed.len(),
            "broker {}'s replica holds what the consumer read",
            node.id
        );
        assert!(
            log.records == consumed,
            "broker {}'s replica differs from what the consumer read",
            node.id
        );
    }
}
