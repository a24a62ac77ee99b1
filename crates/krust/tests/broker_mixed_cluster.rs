//! A mixed cluster (issue 5, acceptance "Mixed cluster"): 3 krust controllers, 2 krust brokers
//! and 1 Apache Kafka 3.9 broker (`process.roles=broker`, formatted by Kafka's `StorageTool`
//! with the cluster's id) registered with the krust quorum. Two RF=3 topics with
//! `min.insync.replicas=2` and explicit replica assignments (`kafka-topics
//! --replica-assignment`): `on-kafka` prefers the Kafka broker as leader, `on-krust` a krust
//! broker, so each kind leads a partition the other kind follows. Kafka's own idempotent
//! `acks=all` producer writes numbered records to both while the test SIGKILLs the Kafka broker
//! (the leader of `on-kafka`) and restarts it, then SIGKILLs a krust broker (the leader of
//! `on-krust`) and restarts it, each time waiting for a new leader, more acknowledgements and a
//! full ISR again; then kills two leaders of `on-krust` in a row (the second right after it took
//! over), so restarted brokers of either kind truncate behind a leader of the other kind. A
//! preferred leader election (`kafka-leader-election`, forwarded to the krust
//! controller) gives each topic back to its preferred leader. Then every acknowledged record
//! must be present exactly once, at its offset and in order, as Kafka's console consumer reads
//! it from each topic's leader (one Kafka, one krust) and in each of the three replicas' log
//! files (Kafka's `DumpLogSegments` after a clean stop), and all replicas must be equal.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use krust_testkit::{
    AckedProducer, AckedRecord, KafkaDist, KafkaNode, KafkaRole, check_acked_records, class,
    free_ports, random_kafka_uuid,
};
use support::{
    Node, broker_properties, consume_offsets, end_offset, kill, terminate_cleanly, voters,
    write_controllers, write_node,
};

mod support;

/// A JVM broker on a loaded 2-core machine: recovery after SIGKILL, registration, catch-up.
const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(120);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Leader changes, ISR changes and acknowledgements after a crash.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(90);
/// Kafka's broker.
const KAFKA_ID: i32 = 6;
/// Prefers the Kafka broker as leader.
const ON_KAFKA: &str = "on-kafka";
/// Prefers krust broker 4 as leader.
const ON_KRUST: &str = "on-krust";
/// Acknowledgements awaited before each kill and after each leader change.
const PROGRESS: usize = 50;

fn run_tool(dist: &KafkaDist, class: &str, args: &[&str]) -> String {
    let out = dist
        .run_tool(class, args, TOOL_TIMEOUT)
        .unwrap_or_else(|e| panic!("{class} {args:?}: {e}"));
    assert!(
        out.success(),
        "{class} {args:?}:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Waits until both topics have a leader and all three replicas in their ISR.
fn wait_in_sync(producer: &mut AckedProducer, why: &str) {
    for topic in [ON_KAFKA, ON_KRUST] {
        producer
            .wait_partition(producer.mark(), topic, 0, CLUSTER_TIMEOUT, |s| {
                s.fully_in_sync()
            })
            .unwrap_or_else(|e| panic!("{why}: all 3 replicas of {topic} in sync: {e}"));
    }
}

/// Waits for `PROGRESS` more acknowledgements of `topic`.
fn wait_progress(producer: &mut AckedProducer, topic: &str, why: &str) {
    let start = producer.report().acked_in(topic).len();
    let deadline = std::time::Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let report = producer.report();
        if report.acked_in(topic).len() >= start + PROGRESS {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{why}: no {PROGRESS} more acknowledgements on {topic}; failed: {:?}\n{}",
            report.failed.iter().rev().take(3).collect::<Vec<_>>(),
            producer.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGKILLs broker `id`, the Kafka broker or a krust one.
fn kill_node(kafka: &mut KafkaNode, brokers: &mut [Node], id: i32) {
    if id == KAFKA_ID {
        kafka.kill().expect("SIGKILL the Kafka broker");
    } else {
        kill(brokers, id);
    }
}

#[test]
fn a_kafka_broker_and_krust_brokers_replicate_each_others_leaders_through_crashes() {
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
    // The same on both kinds: a group's coordinator is the leader of `__consumer_offsets`
    // partition hash(group) % `offsets.topic.num.partitions` (as each broker counted them when
    // it started), so brokers that disagree on the count send consumers round in circles.
    let broker_props = "log.segment.bytes=65536\nbroker.heartbeat.interval.ms=500\n\
                        replica.lag.time.max.ms=10000\noffsets.topic.replication.factor=3\n\
                        offsets.topic.num.partitions=1\n";
    let mut brokers: Vec<Node> = (4..=5)
        .zip(&ports[3..])
        .map(|(id, port)| {
            let dir = root.path().join(format!("node{id}"));
            let text = broker_properties(
                id,
                *port,
                &voters,
                &format!(
                    "log.dirs={}\nmetadata.log.dir={}\n{broker_props}",
                    dir.join("logs").display(),
                    dir.join("metadata").display(),
                ),
            );
            write_node(root.path(), id, &text, &cluster_id)
        })
        .collect();
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    // Kafka's broker, formatted by Kafka's StorageTool with the krust cluster's id.
    let mut builder = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Broker)
        .cluster_id(cluster_id.clone())
        .quorum_voters(voters.clone())
        .broker_port(ports[5])
        .dir(root.path().join(format!("node{KAFKA_ID}")))
        .start_timeout(KAFKA_START_TIMEOUT);
    for line in broker_props.lines() {
        let (key, value) = line.split_once('=').expect("key=value");
        builder = builder.prop(key, value);
    }
    let mut kafka = builder
        .build()
        .expect("Kafka broker configured and formatted");

    for node in &mut controllers {
        node.start();
    }
    // The JVM starts while the krust brokers come up.
    kafka.spawn().expect("spawn the Kafka broker");
    for node in &mut brokers {
        node.start();
    }
    kafka
        .wait_ready(KAFKA_START_TIMEOUT)
        .expect("the Kafka broker registers with the krust controllers and starts");
    let address = |id: i32| format!("127.0.0.1:{}", ports[usize::try_from(id).expect("id") - 1]);
    let bootstrap = [4, 5, KAFKA_ID].map(address).join(",");

    for (topic, assignment) in [(ON_KAFKA, "6:4:5"), (ON_KRUST, "4:6:5")] {
        run_tool(
            &dist,
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--create",
                "--topic",
                topic,
                "--replica-assignment",
                assignment,
                "--config",
                "min.insync.replicas=2",
            ],
        );
    }
    let mut producer = dist
        .start_acked_producer(
            &bootstrap,
            &[ON_KAFKA, ON_KRUST],
            5,
            u64::MAX,
            Duration::from_millis(300),
            &[("linger.ms", "5")],
            TOOL_TIMEOUT,
        )
        .expect("start the acked producer");
    wait_in_sync(&mut producer, "after create");
    for (topic, leader) in [(ON_KAFKA, KAFKA_ID), (ON_KRUST, 4)] {
        producer
            .wait_partition(producer.mark(), topic, 0, CLUSTER_TIMEOUT, |s| {
                s.leader == Some(leader) && s.replicas.first() == Some(&leader)
            })
            .unwrap_or_else(|e| panic!("{topic} is led by its preferred leader {leader}: {e}"));
        wait_progress(&mut producer, topic, "before any crash");
    }

    // Round 1: SIGKILL the Kafka broker, the leader of on-kafka and a follower of on-krust.
    let mark = producer.mark();
    kafka.kill().expect("SIGKILL the Kafka broker");
    let state = producer
        .wait_partition(mark, ON_KAFKA, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != KAFKA_ID)
        })
        .unwrap_or_else(|e| panic!("a krust broker takes over {ON_KAFKA}: {e}"));
    eprintln!(
        "Kafka broker killed; {ON_KAFKA} now led by {:?}",
        state.leader
    );
    wait_progress(&mut producer, ON_KAFKA, "after the Kafka broker died");
    wait_progress(&mut producer, ON_KRUST, "after the Kafka broker died");
    kafka
        .start()
        .expect("the Kafka broker restarts after SIGKILL");
    wait_in_sync(&mut producer, "after the Kafka broker restarted");

    // Round 2: SIGKILL krust broker 4, the leader of on-krust (and maybe of on-kafka now).
    let mark = producer.mark();
    brokers[0].process().kill().expect("SIGKILL krust broker 4");
    let state = producer
        .wait_partition(mark, ON_KRUST, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != 4)
        })
        .unwrap_or_else(|e| panic!("another broker takes over {ON_KRUST}: {e}"));
    eprintln!(
        "krust broker 4 killed; {ON_KRUST} now led by {:?}",
        state.leader
    );
    wait_progress(&mut producer, ON_KRUST, "after krust broker 4 died");
    wait_progress(&mut producer, ON_KAFKA, "after krust broker 4 died");
    brokers[0].start();
    wait_in_sync(&mut producer, "after krust broker 4 restarted");

    // Round 3: two leaders of on-krust killed in a row, the second right after it took over:
    // the last replica leads alone (below min.insync.replicas, so the producer retries), and
    // the two restarted brokers, of either kind, rejoin behind a leader of the other kind and
    // truncate to it by leader epoch (KIP-101 across implementations).
    let state = producer
        .wait_partition(producer.mark(), ON_KRUST, 0, CLUSTER_TIMEOUT, |s| {
            s.fully_in_sync()
        })
        .unwrap_or_else(|e| panic!("before the double crash: {ON_KRUST} in sync: {e}"));
    let first = state.leader.expect("a leader");
    wait_progress(&mut producer, ON_KRUST, "before the double crash");
    let mark = producer.mark();
    kill_node(&mut kafka, &mut brokers, first);
    let second = producer
        .wait_partition(mark, ON_KRUST, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != first)
        })
        .unwrap_or_else(|e| panic!("double crash: a new leader after {first} died: {e}"))
        .leader
        .expect("a leader");
    let mark = producer.mark();
    kill_node(&mut kafka, &mut brokers, second);
    let last = producer
        .wait_partition(mark, ON_KRUST, 0, CLUSTER_TIMEOUT, |s| {
            s.leader.is_some_and(|l| l != first && l != second)
        })
        .unwrap_or_else(|e| panic!("double crash: the last replica leads after {second}: {e}"));
    eprintln!("double crash: SIGKILL {first}, then {second}; {last:?} is left");
    for id in [first, second] {
        if id == KAFKA_ID {
            kafka
                .start()
                .expect("the Kafka broker restarts after SIGKILL");
        } else {
            brokers
                .iter_mut()
                .find(|b| b.id == id)
                .expect("a krust broker")
                .start();
        }
    }
    wait_in_sync(&mut producer, "after the double crash");
    wait_progress(&mut producer, ON_KRUST, "after the double crash");
    wait_progress(&mut producer, ON_KAFKA, "after the double crash");

    let report = producer
        .stop(Duration::from_secs(180))
        .expect("the producer flushes and closes");
    eprintln!(
        "{} records acknowledged ({ON_KAFKA}: {}, {ON_KRUST}: {}), {} failed",
        report.acked.len(),
        report.acked_in(ON_KAFKA).len(),
        report.acked_in(ON_KRUST).len(),
        report.failed.len()
    );

    // Each topic back to its preferred leader: the Kafka broker and krust broker 4.
    // The election needs the preferred replica in the ISR; a replica that was out for a moment
    // when the tool ran only makes it try again.
    let mut last_election = String::new();
    let mut back = false;
    for _attempt in 0..3 {
        let election = dist
            .run_tool(
                "org.apache.kafka.tools.LeaderElectionCommand",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--election-type",
                    "preferred",
                    "--all-topic-partitions",
                ],
                TOOL_TIMEOUT,
            )
            .expect("run kafka-leader-election");
        last_election = format!("{}\n{}", election.stdout, election.stderr);
        let mark = producer.mark();
        back = [(ON_KAFKA, KAFKA_ID), (ON_KRUST, 4)]
            .into_iter()
            .all(|(topic, leader)| {
                producer
                    .wait_partition(mark, topic, 0, Duration::from_secs(30), |s| {
                        s.leader == Some(leader) && s.fully_in_sync()
                    })
                    .is_ok()
            });
        if back {
            break;
        }
    }
    assert!(
        back,
        "each topic back on its preferred leader after kafka-leader-election:\n{last_election}"
    );
    let mut consumed = Vec::new();
    for (topic, leader) in [(ON_KAFKA, KAFKA_ID), (ON_KRUST, 4)] {
        // Read through the leader alone: the Kafka broker serves on-kafka, krust on-krust.
        let end = end_offset(&dist, &address(leader), topic);
        let records = consume_offsets(
            &dist,
            &address(leader),
            topic,
            usize::try_from(end).expect("end offset"),
        );
        let acked: Vec<&AckedRecord> = report.acked_in(topic);
        let problems = check_acked_records(&acked, &records);
        assert!(
            problems.is_empty(),
            "{topic}-0 read from its leader {leader} (end offset {end}):\n{}",
            problems.join("\n")
        );
        consumed.push(records);
    }

    // Every replica's own files after a clean stop: brokers first, then the controllers.
    drop(producer);
    kafka
        .terminate(Duration::from_secs(120))
        .expect("the Kafka broker stops cleanly");
    terminate_cleanly(brokers.iter_mut().chain(controllers.iter_mut()));
    let mut dirs: Vec<(i32, &str, PathBuf)> = Vec::new();
    for topic in [ON_KAFKA, ON_KRUST] {
        for node in &brokers {
            dirs.push((node.id, topic, node.partition_dir(topic)));
        }
        dirs.push((KAFKA_ID, topic, kafka.partition_dir(topic, 0)));
    }
    let dir_refs: Vec<&Path> = dirs.iter().map(|(_, _, d)| d.as_path()).collect();
    let logs = dist
        .read_replica_logs(&dir_refs, TOOL_TIMEOUT)
        .expect("DumpLogSegments on every replica");
    for ((id, topic, _), log) in dirs.iter().zip(&logs) {
        assert!(
            log.problems.is_empty(),
            "broker {id}'s {topic}-0:\n{}",
            log.problems.join("\n")
        );
        let acked = report.acked_in(topic);
        let problems = check_acked_records(&acked, &log.records);
        assert!(
            problems.is_empty(),
            "broker {id}'s replica of {topic}-0 ({} records):\n{}",
            log.records.len(),
            problems.join("\n")
        );
        let read = &consumed[usize::from(*topic == ON_KRUST)];
        assert_eq!(
            log.records.len(),
            read.len(),
            "broker {id}'s replica of {topic}-0 holds what the consumer read"
        );
        assert!(
            log.records == *read,
            "broker {id}'s replica of {topic}-0 differs from what the consumer read"
        );
    }
}
