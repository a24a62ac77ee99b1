//! The KIP-866 ZooKeeper → KRaft migration under faults, as real processes: krust controllers,
//! a real ZooKeeper and Apache Kafka 3.9 ZooKeeper-mode brokers (the happy paths are in
//! `zk_migration.rs`, the operator tools in `migration_cli.rs`).
//!
//! Each test injects one fault where Kafka 3.9 has a known answer (facts §6.4–§6.8) and then
//! checks the same three things: the metadata log replays to one image with everything in it
//! once, `krust migration verify` finds ZooKeeper and the quorum equal, and a topic created
//! through the ZooKeeper broker afterwards is dual-written to ZooKeeper.

#[path = "support/mod.rs"]
mod cluster;
#[path = "support/migration.rs"]
mod migration;
#[path = "quorum_support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use krust_metadata::records::MetadataRecord;
use krust_metadata::{MetadataImage, MetadataProvenance};
use krust_testkit::{KafkaDist, KafkaNode, ToolOutput, ZooKeeperServer, run_binary};
use migration::{MIGRATION_COMPLETED, WAIT, metadata_records, wait_for_znode, zk_broker, zk_get};
use support::{FAST_TIMEOUTS, KRUST, Quorum, wait_for_quorum};

/// `krust <args>`, bounded.
fn krust(args: &[&str]) -> ToolOutput {
    run_binary(KRUST, args, None, Duration::from_secs(90)).expect("run krust")
}

/// `krust migration verify` against `zk` and the controllers at `bootstrap`, run until it
/// reports no difference (dual-write is asynchronous: a change committed in the log reaches
/// ZooKeeper a little later) or [`WAIT`] passes; the last run.
fn verify_until_equal(zk: &ZooKeeperServer, bootstrap: &str) -> ToolOutput {
    let connect = zk.connect_string();
    let args = [
        "migration",
        "verify",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        bootstrap,
    ];
    let deadline = Instant::now() + WAIT;
    loop {
        let out = krust(&args);
        if (out.success() && out.stdout.is_empty()) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The output of a tool run, for a failure message.
fn text(out: &ToolOutput) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status, out.stdout, out.stderr
    )
}

/// The controllers `ids` of `quorum` as `--bootstrap-controller`.
fn controllers(quorum: &Quorum, ids: &[i32]) -> String {
    quorum
        .nodes
        .iter()
        .filter(|n| ids.contains(&n.id))
        .map(support::Node::address)
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `f` with a ZooKeeper session on `connect`.
fn with_zk<R>(connect: &str, f: impl AsyncFnOnce(&krust_zk::client::ZkClient) -> R) -> R {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = krust_zk::client::ZkClient::connect(
            krust_zk::client::ZkClientConfig::new(connect)
                .with_connection_timeout(Duration::from_secs(10)),
        )
        .await
        .expect("ZooKeeper session");
        f(&client).await
    })
}

/// Seeds an empty ZooKeeper as Kafka's `AdminZkClient` would have (before any broker runs):
/// `topics` topics of one partition on broker `broker` (`/config/topics/<t>`, then
/// `/brokers/topics/<t>` with a topic id; the ZooKeeper controller creates the partition state
/// when it starts) and `quotas` client-id quota entities (`/config/clients/<c>`). Written with
/// krust-zk's codecs, 500 znodes per multi-op: seconds, where as many `kafka-topics` runs would
/// take minutes.
fn seed_zookeeper(connect: &str, topics: &[String], quotas: usize, broker: i32) {
    use krust_zk::backend::ZkBackend as _;
    use krust_zk::model::configs::ConfigEntityZNode;
    use krust_zk::model::paths;
    use krust_zk::model::topics::{ReplicaAssignment, TopicZNode};
    use krust_zk::ops::ZkOp;

    let mut ops: Vec<ZkOp> = ["/brokers", paths::TOPICS, paths::CONFIG]
        .into_iter()
        .chain(["/config/topics", "/config/clients"])
        .map(|p| ZkOp::create(p, Vec::new()))
        .collect();
    for topic in topics {
        ops.push(ZkOp::create(
            paths::config_entity("topics", topic),
            ConfigEntityZNode::default().encode(),
        ));
        let znode = TopicZNode {
            topic_id: Some(uuid::Uuid::new_v4()),
            partitions: BTreeMap::from([(
                0,
                ReplicaAssignment {
                    replicas: vec![broker],
                    ..ReplicaAssignment::default()
                },
            )]),
        };
        ops.push(ZkOp::create(paths::topic(topic), znode.encode()));
    }
    for i in 0..quotas {
        let config = ConfigEntityZNode {
            config: BTreeMap::from([("producer_byte_rate".to_owned(), "1048576".to_owned())]),
        };
        ops.push(ZkOp::create(
            paths::config_entity("clients", &format!("client-{i:05}")),
            config.encode(),
        ));
    }
    with_zk(connect, async |client| {
        for chunk in ops.chunks(500) {
            client.multi(chunk).await.expect("seed ZooKeeper");
        }
    });
}

/// How a metadata transaction ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
}

/// The metadata transactions of a log, in order: each `BeginTransactionRecord`'s name and how
/// the transaction ended.
fn transactions(records: &[MetadataRecord]) -> Vec<(String, Outcome)> {
    let mut out = Vec::new();
    let mut open = None;
    for record in records {
        match record {
            MetadataRecord::BeginTransaction(b) => open = Some(b.name.clone().unwrap_or_default()),
            MetadataRecord::EndTransaction(_) => {
                out.push((
                    open.take().expect("an open transaction"),
                    Outcome::Committed,
                ));
            }
            MetadataRecord::AbortTransaction(_) => {
                out.push((open.take().expect("an open transaction"), Outcome::Aborted));
            }
            _ => {}
        }
    }
    out
}

/// The records of a metadata log that a loader applies: those of aborted transactions dropped
/// (KIP-868; Kafka's `MetadataBatchLoader`), and the transaction markers themselves.
fn committed_records(records: &[MetadataRecord]) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    let mut open: Option<Vec<MetadataRecord>> = None;
    for record in records {
        match record {
            MetadataRecord::BeginTransaction(_) => {
                assert!(open.is_none(), "a transaction began inside another");
                open = Some(Vec::new());
            }
            MetadataRecord::EndTransaction(_) => {
                out.extend(open.take().expect("EndTransaction without a transaction"));
            }
            MetadataRecord::AbortTransaction(_) => {
                open.take().expect("AbortTransaction without a transaction");
            }
            other => match &mut open {
                Some(pending) => pending.push(other.clone()),
                None => out.push(other.clone()),
            },
        }
    }
    assert!(open.is_none(), "the log ends inside a transaction");
    out
}

/// Waits for a line containing `needle` in any of `logs` (each read from the byte offset
/// given), polling every millisecond: the index of that log and the line. Panics after `WAIT`.
fn first_line_in(logs: &[(&Path, u64)], needle: &str) -> (usize, String) {
    let deadline = Instant::now() + WAIT;
    let mut seen: Vec<String> = vec![String::new(); logs.len()];
    let mut offsets: Vec<u64> = logs.iter().map(|(_, o)| *o).collect();
    loop {
        for (i, (path, _)) in logs.iter().enumerate() {
            let mut file = std::fs::File::open(path).expect("open log");
            file.seek(SeekFrom::Start(offsets[i])).expect("seek log");
            let mut more = String::new();
            let read = file.read_to_string(&mut more).unwrap_or(0);
            offsets[i] += read as u64;
            seen[i].push_str(&more);
            if let Some(line) = seen[i].lines().find(|l| l.contains(needle)) {
                return (i, line.to_owned());
            }
        }
        assert!(Instant::now() < deadline, "no line {needle:?} in any log");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The output of every controller so far.
fn controller_logs(quorum: &Quorum, ids: &[i32]) -> String {
    quorum
        .nodes
        .iter()
        .filter(|n| ids.contains(&n.id))
        .filter_map(|n| n.process.as_ref().map(krust_testkit::KrustProcess::output))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Three krust controllers of cluster `cluster_id` with the migration enabled on `zk` and
/// `extra` settings, started, with a leader.
fn migrating_quorum(zk: &ZooKeeperServer, cluster_id: &str, extra: &[(&str, &str)]) -> Quorum {
    let connect = zk.connect_string();
    let mut settings: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    settings.push(("zookeeper.metadata.migration.enable", "true"));
    settings.push(("zookeeper.connect", &connect));
    settings.extend_from_slice(extra);
    let mut quorum = Quorum::in_cluster(3, &settings, cluster_id);
    for id in 1..=3 {
        let node = quorum.node(id);
        node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
    }
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    quorum
}

/// Creates `topic` through `broker` (forwarded to the KRaft controller in the hybrid phase) and
/// waits for it in ZooKeeper: the dual-write works.
fn create_and_see_in_zookeeper(
    broker: &KafkaNode,
    zk: &ZooKeeperServer,
    quorum: &Quorum,
    topic: &str,
) {
    broker
        .create_topic(topic, 1, &[])
        .unwrap_or_else(|e| panic!("create {topic}: {e}\n{}", quorum.log_tails()));
    let znode = wait_for_znode(zk, &format!("/brokers/topics/{topic}"));
    assert!(znode.contains("\"topic_id\""), "{znode}");
}

/// SIGKILL of the active controller in the middle of the initial copy (facts §6.8 step 4):
/// ZooKeeper holds 100 topics and 3,000 client quotas, 3,200 records, so the copy is a
/// `BeginTransaction`, 16 batches of 200 records, each committed by the quorum before the next
/// is appended, and the completion. The active controller is killed as soon as it logs that its
/// first data batch committed (Kafka's "Finished waiting for the metadata layer to commit …").
///
/// Why the timing is reliable: that line is logged after the quorum committed the
/// `BeginTransaction` and the first batch, so both are on a majority and survive the leader
/// (the abort is certain, not likely); and after it 16 more appends each wait for a quorum
/// commit (about 130 ms each on a 2-core machine, per the redo's completion line: a window of
/// about 2 s), where the kill follows the line within the 1 ms poll of the log. The test checks
/// afterwards, rather than assuming, that it hit the window: the killed controller never logged
/// the completion, and the log holds exactly one aborted copy, with the seeded topics in it.
///
/// Expected (Kafka 3.9): the new leader's activation aborts the open transaction
/// (`AbortTransactionRecord`), `/migration` still says no copy was done, so the new leader
/// copies again; the final image holds every topic and quota once, verify finds no
/// difference, and dual-write works.
#[test]
fn killing_the_active_controller_mid_copy_aborts_the_copy_and_the_next_leader_redoes_it() {
    const TOPICS: usize = 100;
    const QUOTAS: usize = 3_000;
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let topics: Vec<String> = (0..TOPICS).map(|i| format!("seeded-{i:03}")).collect();
    seed_zookeeper(&zk.connect_string(), &topics, QUOTAS, 101);
    let mut broker = zk_broker(&dist, &zk, 101);
    let mut quorum = migrating_quorum(&zk, broker.cluster_id(), &[]);

    let logs: Vec<(std::path::PathBuf, u64)> = quorum
        .nodes
        .iter()
        .map(|n| {
            let p = n.process.as_ref().expect("started");
            (p.log_path().to_path_buf(), p.log_mark().0)
        })
        .collect();
    migration::roll_into_migration_mode(&mut broker, &quorum);
    let log_refs: Vec<(&Path, u64)> = logs.iter().map(|(p, o)| (p.as_path(), *o)).collect();
    let (index, line) = first_line_in(
        &log_refs,
        "Finished waiting for the metadata layer to commit ",
    );
    let killed = quorum.nodes[index].id;
    quorum.kill(killed);
    println!("killed controller {killed} after: {line}");

    let survivors: Vec<i32> = (1..=3).filter(|id| *id != killed).collect();
    let killed_log = quorum.node(killed).process.as_ref().expect("ran").output();
    assert!(
        !killed_log.contains(MIGRATION_COMPLETED),
        "the kill came after the copy completed: the test missed its window\n{killed_log}"
    );
    let deadline = Instant::now() + WAIT;
    while !controller_logs(&quorum, &survivors).contains(MIGRATION_COMPLETED) {
        assert!(
            Instant::now() < deadline,
            "no new copy\n{}",
            quorum.log_tails()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = wait_for_quorum(&quorum.bootstrap_without(&[killed]), WAIT, |q| {
        q.leader_id > 0 && q.leader_id != killed
    })
    .unwrap_or_else(|| panic!("no new leader\n{}", quorum.log_tails()));

    // The redo's pace, for the record: how wide the window the kill aimed at was.
    for line in controller_logs(&quorum, &survivors)
        .lines()
        .filter(|l| l.contains("Starting ZK migration") || l.contains(MIGRATION_COMPLETED))
    {
        println!("{line}");
    }

    // Dual-write, and ZooKeeper equals the quorum's image.
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "after-failover");
    let out = verify_until_equal(&zk, &controllers(&quorum, &survivors));
    assert!(out.success() && out.stdout.is_empty(), "{}", text(&out));

    // The log: one copy aborted, one committed, each seeded topic in the image once.
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
    let records = metadata_records(&quorum, after.leader_id);
    assert_eq!(
        transactions(&records),
        vec![
            ("Bootstrap records".to_owned(), Outcome::Committed),
            ("ZK Migration".to_owned(), Outcome::Aborted),
            ("ZK Migration".to_owned(), Outcome::Committed),
        ],
        "the bootstrap, the copy aborted by the new leader, its redo"
    );
    let abort = records
        .iter()
        .position(|r| matches!(r, MetadataRecord::AbortTransaction(_)))
        .expect("abort");
    assert!(
        records[..abort]
            .iter()
            .any(|r| matches!(r, MetadataRecord::Topic(t) if t.name == topics[0])),
        "the aborted copy had appended topics"
    );
    let committed = committed_records(&records);
    let topic_records: Vec<&str> = committed
        .iter()
        .filter_map(|r| match r {
            MetadataRecord::Topic(t) => Some(t.name.as_str()),
            _ => None,
        })
        .collect();
    for topic in &topics {
        assert_eq!(
            topic_records
                .iter()
                .filter(|n| **n == topic.as_str())
                .count(),
            1,
            "{topic} copied once"
        );
    }
    let image = MetadataImage::from_records(committed.iter(), MetadataProvenance::new(0, 0, 0))
        .expect("the committed records replay");
    assert_eq!(image.topics.by_name.len(), TOPICS + 1);
    assert_eq!(image.topics.by_id.len(), TOPICS + 1);
    assert_eq!(
        image.client_quotas.entities.len(),
        QUOTAS,
        "every quota once"
    );
    assert!(!zk_get(&zk, "/migration").is_empty());
}
