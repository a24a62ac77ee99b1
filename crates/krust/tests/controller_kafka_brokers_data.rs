//! Interop, data path and broker lifecycle: three `krust server` controllers
//! (`broker.session.timeout.ms=3000`, a small snapshot trigger) and three real Kafka 3.9
//! brokers (`broker.heartbeat.interval.ms=500`).
//!
//! Checks, in order: Kafka's `ProducerPerformance` writes 100,000 records into an RF=3 topic and
//! Kafka's console consumer reads all 100,000 back; SIGKILL of a broker → the controller fences
//! it once its session expires and its leaderships and ISR places move (kafka-topics
//! --describe); SIGTERM of a broker → controlled shutdown: the broker exits cleanly after the
//! controller told it to ("The controller has asked us to exit controlled shutdown."), and in
//! the metadata log its leaderships moved after `InControlledShutdown` and before its fence
//! record; Kafka's `MetadataShell --snapshot` reads a snapshot the krust controller wrote
//! (`ls`, `cat` of a partition), printing what `krust metadata-shell` prints.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use krust_metadata::ApiMessageAndVersion;
use krust_metadata::records::MetadataRecord;
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, class, run_binary};
use support::{FAST_TIMEOUTS, KRUST, Quorum, read_metadata_log, wait_for_quorum};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(120);
const BROKER_IDS: [i32; 3] = [101, 102, 103];
const TOPIC: &str = "perf";
const RECORDS: u64 = 100_000;
const SHELL_TIMEOUT: Duration = Duration::from_secs(60);
/// Kafka's broker log line once the controller answers `shouldShutDown`.
const SHUTDOWN_APPROVED: &str = "The controller has asked us to exit controlled shutdown.";

fn start_controller(quorum: &mut Quorum, id: i32) {
    let node = quorum.node(id);
    node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
}

fn logs(quorum: &Quorum, brokers: &[KafkaNode]) -> String {
    cluster::with_kafka_logs(quorum.log_tails(), brokers)
}

/// Runs `kafka-topics --describe --topic perf` until `accept` holds for its stdout.
fn describe_until(
    dist: &KafkaDist,
    bootstrap: &str,
    accept: impl Fn(&str) -> bool,
) -> Result<String, String> {
    cluster::tool_until(
        dist,
        class::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            TOPIC,
        ],
        WAIT,
        accept,
    )
}

/// `(leader, isr)` of each partition line of `kafka-topics --describe`.
fn leaders_and_isrs(describe: &str) -> Vec<(i32, Vec<i32>)> {
    let field = |line: &str, name: &str| -> Option<String> {
        line.split(name)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    };
    describe
        .lines()
        .filter(|l| l.contains(&format!("Topic: {TOPIC}")) && l.contains("Partition:"))
        .filter_map(|l| {
            let leader = field(l, "Leader:")?.parse().ok()?;
            let isr = field(l, "Isr:")?
                .split(',')
                .filter_map(|s| s.parse().ok())
                .collect();
            Some((leader, isr))
        })
        .collect()
}

/// Every partition led by a broker other than `gone`, with `gone` out of every ISR.
fn moved_off(describe: &str, gone: i32, partitions: usize) -> bool {
    let rows = leaders_and_isrs(describe);
    rows.len() == partitions
        && rows
            .iter()
            .all(|(leader, isr)| *leader >= 0 && *leader != gone && !isr.contains(&gone))
}

/// The metadata records of a stopped controller's log, decoded.
fn metadata_records(data: &Path) -> Vec<(i64, MetadataRecord)> {
    read_metadata_log(data)
        .into_iter()
        .filter(|r| !r.control)
        .filter_map(|r| {
            let value = r.value?;
            let record = ApiMessageAndVersion::decode(&value).expect("a metadata record");
            Some((r.offset, record.record))
        })
        .collect()
}

/// What the log says about `broker`: the offset of its first `InControlledShutdown` change (if
/// any) and of its first fence after that, with the partitions it still led just before the
/// fence record.
struct Fencing {
    controlled_shutdown_at: Option<i64>,
    fenced_at: i64,
    leading_at_fence: usize,
    moved_between: usize,
}

fn fencing(records: &[(i64, MetadataRecord)], broker: i32) -> Option<Fencing> {
    let mut leaders: BTreeMap<(Uuid, i32), i32> = BTreeMap::new();
    let mut shutdown = None;
    let mut moved_between = 0;
    let mut unfenced = false;
    for (offset, record) in records {
        match record {
            MetadataRecord::Partition(p) => {
                leaders.insert((p.topic_id, p.partition_id), p.leader);
            }
            MetadataRecord::PartitionChange(c) if c.leader != -2 => {
                let key = (c.topic_id, c.partition_id);
                if shutdown.is_some() && leaders.get(&key) == Some(&broker) {
                    moved_between += 1;
                }
                leaders.insert(key, c.leader);
            }
            MetadataRecord::RemoveTopic(r) => leaders.retain(|(t, _), _| *t != r.topic_id),
            MetadataRecord::RegisterBroker(r) if r.broker_id == broker => {
                unfenced = false;
                shutdown = None;
                moved_between = 0;
            }
            MetadataRecord::BrokerRegistrationChange(c) if c.broker_id == broker => {
                if c.in_controlled_shutdown == 1 && shutdown.is_none() {
                    shutdown = Some(*offset);
                }
                if c.fenced == -1 {
                    unfenced = true;
                }
                // The fence that ends a life in which the broker was unfenced.
                if c.fenced == 1 && unfenced {
                    let leading = leaders.values().filter(|l| **l == broker).count();
                    return Some(Fencing {
                        controlled_shutdown_at: shutdown,
                        fenced_at: *offset,
                        leading_at_fence: leading,
                        moved_between,
                    });
                }
            }
            _ => {}
        }
    }
    None
}

/// The newest frozen snapshot (not the bootstrap one) in a controller's data dir.
fn latest_snapshot(data: &Path) -> Option<PathBuf> {
    let dir = data.join("__cluster_metadata-0");
    let mut names: Vec<SnapshotFileName> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| SnapshotFileName::parse(&e.file_name().to_string_lossy()).ok()?)
        .filter(|n| n.kind == SnapshotFileKind::Frozen && n.id.end_offset > 0)
        .collect();
    names.sort_by_key(|n| n.id);
    let id = names.last()?.id;
    Some(dir.join(id.file_name()))
}

/// Kafka's one-shot `MetadataShell --snapshot <file> <command…>` equals krust's; Kafka's shell
/// can run its command before its loader published the whole file, so a mismatch is retried.
fn shell_matches(dist: &KafkaDist, snapshot: &str, command: &[&str]) -> String {
    let mut args = vec!["metadata-shell", "--snapshot", snapshot];
    args.extend(command);
    let ours = run_binary(KRUST, &args, None, SHELL_TIMEOUT).expect("krust metadata-shell runs");
    assert!(ours.success(), "krust {args:?}: {}", ours.stderr);
    let mut kafka_args = vec!["--snapshot", snapshot];
    kafka_args.extend(command);
    let mut last = String::new();
    for _ in 0..4 {
        match dist.run_tool(class::METADATA_SHELL, &kafka_args, SHELL_TIMEOUT) {
            Ok(kafka) if kafka.success() && kafka.stdout == ours.stdout => return kafka.stdout,
            Ok(kafka) => last = format!("{}{}", kafka.stdout, kafka.stderr),
            Err(e) => last = e.to_string(),
        }
    }
    panic!(
        "Kafka MetadataShell {command:?} differs from krust's:\n--- Kafka ---\n{last}\n--- krust ---\n{}",
        ours.stdout
    );
}

#[test]
fn kafka_brokers_move_data_fail_and_shut_down_on_a_krust_controller_quorum() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 distribution");
    let mut extra = FAST_TIMEOUTS.to_vec();
    extra.extend([
        ("broker.session.timeout.ms", "3000"),
        ("metadata.log.max.record.bytes.between.snapshots", "4000"),
    ]);
    let mut quorum = Quorum::new(3, &extra);
    for id in 1..=3 {
        start_controller(&mut quorum, id);
    }
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));

    let mut brokers: Vec<KafkaNode> = BROKER_IDS
        .iter()
        .map(|&id| {
            KafkaNode::builder(&dist)
                .node_id(id)
                .role(KafkaRole::Broker)
                .cluster_id(quorum.cluster_id.clone())
                .quorum_voters(quorum.voters.clone())
                .prop("broker.heartbeat.interval.ms", 500)
                .start_timeout(WAIT)
                .build()
                .expect("broker built and formatted")
        })
        .collect();
    let failed = cluster::start_kafka_brokers(&mut brokers, WAIT);
    assert!(
        failed.is_empty(),
        "brokers did not start: {failed:?}\n{}",
        logs(&quorum, &brokers)
    );
    let addresses: Vec<(i32, String)> = brokers
        .iter()
        .map(|b| (b.node_id(), b.bootstrap_servers()))
        .collect();
    let bootstrap_of = |skip: &[i32]| {
        addresses
            .iter()
            .filter(|(id, _)| !skip.contains(id))
            .map(|(_, address)| address.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let bootstrap = bootstrap_of(&[]);

    // 100k records through an RF=3 topic with Kafka's own perf producer and console consumer.
    if let Err(e) = dist.create_topic(&bootstrap, TOPIC, 3, 3, &[]) {
        panic!("create topic: {e}\n{}", logs(&quorum, &brokers));
    }
    describe_until(&dist, &bootstrap, |out| {
        let rows = leaders_and_isrs(out);
        rows.len() == 3 && rows.iter().all(|(_, isr)| isr.len() == 3)
    })
    .unwrap_or_else(|last| panic!("never 3 in-sync replicas:\n{last}"));
    let perf = dist
        .producer_perf(&bootstrap, TOPIC, RECORDS, 100, &[("linger.ms", "5")])
        .unwrap_or_else(|e| panic!("ProducerPerformance: {e}\n{}", logs(&quorum, &brokers)));
    println!(
        "ProducerPerformance: {} records, {:.0} records/s, {:.1} ms avg latency",
        perf.records_sent, perf.records_per_sec, perf.avg_latency_ms
    );
    assert_eq!(perf.records_sent, RECORDS, "{}", perf.output.stdout);
    let consumed = dist
        .console_consume(
            &bootstrap,
            TOPIC,
            usize::try_from(RECORDS).expect("fits"),
            &[],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("consume: {e}\n{}", logs(&quorum, &brokers)));
    let lines = consumed.stdout.lines().count();
    assert_eq!(lines, 100_000, "records read back");
    assert!(
        consumed.stdout.lines().all(|l| l.len() == 100),
        "every record is ProducerPerformance's 100-byte payload"
    );

    // SIGKILL broker 103: fenced when its session expires; leadership and ISR places move.
    brokers[2].kill().expect("SIGKILL broker 103");
    let survivors = bootstrap_of(&[103]);
    let after_kill = describe_until(&dist, &survivors, |out| moved_off(out, 103, 3))
        .unwrap_or_else(|last| {
            panic!(
                "leadership never left the killed broker:\n{last}\n{}",
                logs(&quorum, &brokers)
            )
        });
    println!("after SIGKILL of 103:\n{after_kill}");

    // SIGTERM broker 102: controlled shutdown, approved by the controller, clean exit.
    brokers[1]
        .terminate(WAIT)
        .unwrap_or_else(|e| panic!("clean shutdown of 102: {e}\n{}", logs(&quorum, &brokers)));
    let log_102 = std::fs::read_to_string(brokers[1].log_path()).expect("broker 102 log");
    assert!(
        log_102.contains(SHUTDOWN_APPROVED),
        "broker 102 was not released by the controller:\n{}",
        krust_testkit::log_tail(&brokers[1].log_path(), 60)
    );
    let only_101 = bootstrap_of(&[102, 103]);
    let after_term = describe_until(&dist, &only_101, |out| {
        let rows = leaders_and_isrs(out);
        rows.len() == 3 && rows.iter().all(|(leader, _)| *leader == 101)
    })
    .unwrap_or_else(|last| panic!("101 does not lead everything:\n{last}"));
    println!("after SIGTERM of 102:\n{after_term}");

    let _ = brokers[0].kill();
    // Stop the controllers (clean shutdown) and read what they wrote.
    quorum.stop_all();
    let data = quorum.nodes[0].data_dir();
    let records = metadata_records(&data);
    let killed = fencing(&records, 103).expect("broker 103 fenced in the log");
    assert_eq!(
        killed.leading_at_fence, 0,
        "a fenced broker leads nothing once its fence record is written"
    );
    let stopped = fencing(&records, 102).expect("broker 102 fenced in the log");
    let shutdown_at = stopped
        .controlled_shutdown_at
        .expect("broker 102 went through controlled shutdown");
    assert!(shutdown_at < stopped.fenced_at);
    assert_eq!(
        stopped.leading_at_fence, 0,
        "leadership moved before the fence"
    );
    assert!(
        stopped.moved_between > 0,
        "broker 102's leaderships moved during its controlled shutdown (it led some partitions)"
    );

    // Kafka's metadata shell on a snapshot the krust controller wrote.
    let snapshot = latest_snapshot(&data).expect("the controller wrote a snapshot");
    let copy = quorum.root.path().join("krust-written.checkpoint");
    std::fs::copy(&snapshot, &copy).expect("copy the snapshot");
    let copy = copy.display().to_string();
    let listing = shell_matches(&dist, &copy, &["ls", "/image/topics/byName"]);
    assert!(
        listing.lines().any(|l| l.trim() == TOPIC),
        "ls /image/topics/byName:\n{listing}"
    );
    let partition = shell_matches(
        &dist,
        &copy,
        &["cat", &format!("/image/topics/byName/{TOPIC}/0")],
    );
    println!("cat /image/topics/byName/{TOPIC}/0:\n{partition}");
    assert!(
        partition.contains("replicas") && partition.contains("leader"),
        "cat of a partition:\n{partition}"
    );
}
