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
use krust_testkit::{KafkaDist, KafkaNode, ZooKeeperServer};
use migration::{
    MIGRATION_COMPLETED, WAIT, krust, metadata_records, text, verify_until_equal, wait_for_znode,
    zk_broker, zk_get,
};
use support::{FAST_TIMEOUTS, Quorum, wait_for_quorum};

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
/// ZooKeeper holds 100 topics and 3,000 client quotas, 3,200 records, and the controllers run
/// with `zookeeper.metadata.migration.min.batch.size=1`, so the copy is a `BeginTransaction`,
/// some 3,000 small batches (one per group of records the reader yields), each committed by
/// the quorum before the next is appended, and the completion. The active controller is killed as soon as it logs that its
/// first data batch committed (Kafka's "Finished waiting for the metadata layer to commit …").
///
/// Why the timing is reliable: that line is logged after the quorum committed the
/// `BeginTransaction` and the first batch, so both are on a majority and survive the leader
/// (the abort is certain, not likely); and after it some 3,000 more appends each wait for a
/// quorum commit (a migration batch is written without the append linger, so a commit is one
/// replication round trip: a window of seconds; with the default 200-record batches it was 16
/// round trips, which the copy could finish before the kill once the linger went, and with
/// 10-record batches it still did once in three runs), where the kill follows the line within
/// the 1 ms poll of the log. The test checks
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
    let mut quorum = migrating_quorum(
        &zk,
        broker.cluster_id(),
        &[("zookeeper.metadata.migration.min.batch.size", "1")],
    );

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

/// Sends `signal` (`STOP`, `CONT`) to controller `id`'s process.
fn signal(quorum: &mut Quorum, id: i32, signal: &str) {
    let pid = quorum
        .node(id)
        .process
        .as_ref()
        .and_then(krust_testkit::KrustProcess::pid)
        .expect("a running controller");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Waits until ZooKeeper's `/controller` names KRaft controller `id`; the znode.
fn wait_for_zk_controller(zk: &ZooKeeperServer, quorum: &Quorum, id: i32) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let owner = zk_get(zk, "/controller");
        if owner.contains(&format!("\"brokerid\":{id},")) && owner.contains("kraftControllerEpoch")
        {
            return owner;
        }
        assert!(
            Instant::now() < deadline,
            "/controller never claimed by {id}: {owner}\n{}",
            quorum.log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits for the copy's completion line in any controller's log.
fn wait_for_copy_anywhere(quorum: &Quorum) {
    let deadline = Instant::now() + WAIT;
    while !controller_logs(quorum, &[1, 2, 3]).contains(MIGRATION_COMPLETED) {
        assert!(Instant::now() < deadline, "no copy\n{}", quorum.log_tails());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// KAFKA-16667: leadership moves away from controller A and back to A, with dual-writes in
/// between, and A must not keep the `/migration` version it knew from its first term. Each
/// dual-write bumps `/migration`'s znode version (facts §6.7), so A's remembered version is
/// stale when it leads again; Kafka 3.9 re-reads `/migration` on every KRaft leader event
/// (`KRaftLeaderEvent` → `getOrCreateMigrationRecoveryState`). A driver that did not would
/// have every fenced write fail with BADVERSION, forever: the topic created after A returns
/// would never reach ZooKeeper.
///
/// How leadership moves, deterministically: A (the leader) is frozen (SIGSTOP) until another
/// controller X leads and dual-writes; A resumes as a follower and catches up; then the third
/// controller Y is frozen while X and A commit a dual-write, so Y's log is behind A's; X is
/// killed and Y resumed at once. Raft's vote rule (a voter refuses a candidate whose log is
/// behind its own) leaves A as the only controller that can win: Y cannot get A's vote.
#[test]
fn leadership_back_on_a_former_leader_does_not_write_with_a_stale_migration_version() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 101);
    let mut quorum = migrating_quorum(&zk, broker.cluster_id(), &[]);
    // A frozen controller keeps its connections open: the broker's requests to it (heartbeats,
    // forwarded CreateTopics) fail over only once they time out, after
    // `controller.socket.timeout.ms` (30 s by default, as long as the admin client waits).
    broker
        .set_prop("controller.socket.timeout.ms", 5_000)
        .expect("broker config");
    migration::roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy_anywhere(&quorum);
    let first = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0).expect("leader");
    let a = first.leader_id;
    wait_for_zk_controller(&zk, &quorum, a);
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "first-term");
    let migration_in_first_term = zk_get(&zk, "/migration");

    // A frozen: X leads, claims ZooKeeper and dual-writes.
    signal(&mut quorum, a, "STOP");
    let second = wait_for_quorum(&quorum.bootstrap_without(&[a]), WAIT, |q| {
        q.leader_id > 0 && q.leader_id != a
    })
    .unwrap_or_else(|| panic!("no leader without {a}\n{}", quorum.log_tails()));
    let x = second.leader_id;
    let y = (1..=3)
        .find(|id| *id != a && *id != x)
        .expect("a third controller");
    wait_for_zk_controller(&zk, &quorum, x);
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "while-a-is-frozen");
    assert_ne!(zk_get(&zk, "/migration"), migration_in_first_term);

    // A back, as a follower that caught up with X.
    signal(&mut quorum, a, "CONT");
    wait_for_quorum(&quorum.bootstrap_without(&[a]), WAIT, |q| {
        q.leader_id == x
            && q.voters
                .iter()
                .any(|v| v.replica_id.0 == a && v.log_end_offset >= q.high_watermark)
    })
    .unwrap_or_else(|| panic!("{a} never caught up with {x}\n{}", quorum.log_tails()));

    // Y frozen while X and A commit; then X killed and Y resumed: only A can win.
    signal(&mut quorum, y, "STOP");
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "while-y-is-frozen");
    quorum.kill(x);
    signal(&mut quorum, y, "CONT");
    let third = wait_for_quorum(&quorum.bootstrap_without(&[x]), WAIT, |q| {
        q.leader_id > 0 && q.leader_epoch > second.leader_epoch
    })
    .unwrap_or_else(|| panic!("no leader after {x} died\n{}", quorum.log_tails()));
    assert_eq!(third.leader_id, a, "only {a} has the whole log");
    wait_for_zk_controller(&zk, &quorum, a);

    // A dual-writes with the version it read again: the topic lands, ZooKeeper equals the image.
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "a-leads-again");
    let out = verify_until_equal(&zk, &controllers(&quorum, &[a, y]));
    assert!(out.success() && out.stdout.is_empty(), "{}", text(&out));
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
}

/// A TCP proxy in front of ZooKeeper that can cut its clients off: every connection through it
/// is closed and new ones are closed on accept while it is cut, so the clients' sessions expire
/// on the server (which keeps running) exactly as behind a network partition.
struct CuttableProxy {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl CuttableProxy {
    /// Listens on a free loopback port, forwarding to 127.0.0.1:`target`. Its accept thread
    /// lives as long as the test process (a blocked `accept` cannot be interrupted portably).
    fn start(target: u16) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let pipes = [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ];
                {
                    let mut open = open2.lock().expect("lock");
                    open.push(client);
                    open.push(server);
                }
                for pipe in pipes {
                    if let (Ok(mut from), Ok(mut to)) = pipe {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(std::net::Shutdown::Both);
                        });
                    }
                }
            }
        });
        Self { port, cut, open }
    }

    fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Closes every connection and refuses new ones until [`Self::heal`].
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.open.lock().expect("lock").drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The ids of the ZooKeeper sessions a krust process logged as established, in order.
fn krust_zk_sessions(log: &str) -> Vec<i64> {
    log.lines()
        .filter(|l| l.contains("ZooKeeper session established"))
        .filter_map(|l| {
            let rest = &l[l.find("session=")? + "session=".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// ZooKeeper session expiry in dual-write (Kafka: `retryMigrationRequestsUntilConnected`
/// retries through a new session; `/controller` is persistent, so the claim survives the
/// session, facts §6.6–§6.7). The controller reaches ZooKeeper through a proxy that is cut
/// until ZooKeeper itself logs the expiry of the controller's session (a 4 s
/// `zookeeper.session.timeout.ms`, ZooKeeper's minimum at its 2 s tick); meanwhile a topic is
/// created (the log goes on). Healed, the controller opens a new session, `/controller` is
/// still its own claim, the waiting change and a new one land in ZooKeeper, and verify finds
/// ZooKeeper equal to the quorum.
#[test]
fn dual_write_resumes_after_the_zookeeper_session_expired() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let proxy = CuttableProxy::start(zk.port());
    let mut broker = zk_broker(&dist, &zk, 101);
    let mut settings: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = proxy.connect_string();
    settings.push(("zookeeper.metadata.migration.enable", "true"));
    settings.push(("zookeeper.connect", &connect));
    settings.push(("zookeeper.session.timeout.ms", "4000"));
    let mut quorum = Quorum::in_cluster(1, &settings, broker.cluster_id());
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    migration::roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy_anywhere(&quorum);
    let owner = wait_for_zk_controller(&zk, &quorum, 1);
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "before-expiry");
    let log = quorum.node(1).process.as_ref().expect("started").output();
    let session = *krust_zk_sessions(&log).last().expect("a session");

    // Cut until ZooKeeper expires the session (it logs "Expiring session 0x…, timeout of …").
    proxy.cut();
    let expiring = format!("Expiring session 0x{session:x}");
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(zk.log_path())
        .unwrap_or_default()
        .contains(&expiring)
    {
        assert!(
            Instant::now() < deadline,
            "ZooKeeper never expired session 0x{session:x}\n{}",
            krust_testkit::log_tail(zk.log_path(), 30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    broker
        .create_topic("during-expiry", 1, &[])
        .unwrap_or_else(|e| panic!("create while cut off: {e}\n{}", quorum.log_tails()));
    assert!(
        !zk_get(&zk, "/brokers/topics/during-expiry").contains('{'),
        "written to ZooKeeper through a cut proxy"
    );
    proxy.heal();

    wait_for_znode(&zk, "/brokers/topics/during-expiry");
    let log = quorum.node(1).process.as_ref().expect("started").output();
    assert!(
        log.contains("new ZooKeeper session replaces the ended one"),
        "a new session\n{}",
        quorum.log_tails()
    );
    assert!(
        krust_zk_sessions(&log).last() != Some(&session),
        "a new session id"
    );
    assert_eq!(
        zk_get(&zk, "/controller"),
        owner,
        "the claim survived the session; the driver's lines:\n{}",
        log.lines()
            .filter(|l| ["driver", "ZooKeeper", "claim", "register", "epoch"]
                .iter()
                .any(|k| l.contains(k)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "after-expiry");
    let out = verify_until_equal(&zk, &controllers(&quorum, &[1]));
    assert!(out.success() && out.stdout.is_empty(), "{}", text(&out));
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
}

/// A ZooKeeper broker whose `broker.id` is a controller's `node.id` (brokers and controllers
/// share one id space, KIP-866; facts §6.1 — Kafka 3.9 has no check for it).
///
/// Kafka 3.9 (the oracle, run first): the broker registers, the controller copies ("Saw 1
/// brokers in the migrated metadata [7]") and claims `/controller` with `brokerid` 7 — which
/// is the broker's own id, so the broker's ZooKeeper-mode `KafkaController` takes itself for
/// the active controller, handles CreateTopics locally instead of forwarding it, and fails it:
/// "Cannot set entity configs for topics … directly when there is a KRaft controller". The
/// hybrid phase is broken for admin writes.
///
/// krust does better: `krust migration preflight` fails the "node ids" check naming the id,
/// the running controller's driver stays in WAIT_FOR_BROKERS with an error naming the ids and
/// never touches ZooKeeper (`/controller` stays the ZooKeeper broker's, nothing is copied),
/// and `krust migration status` says why.
#[test]
fn a_zookeeper_broker_with_a_controller_node_id_is_refused_before_zookeeper_is_touched() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");

    // Kafka 3.9 with broker.id 7 = controller node.id 7.
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 7);
    broker.create_topic("made-in-zk", 1, &[]).expect("topic");
    let mut controller = KafkaNode::builder(&dist)
        .role(krust_testkit::KafkaRole::Controller)
        .node_id(7)
        .cluster_id(broker.cluster_id().to_owned())
        .zookeeper(zk.connect_string())
        .migration()
        .start_timeout(WAIT)
        .start()
        .expect("Kafka's migrating controller starts");
    broker
        .enable_migration(controller.quorum_voters())
        .expect("broker config");
    broker
        .restart()
        .expect("the broker restarts in migration mode");
    let line = controller
        .wait_for_log(MIGRATION_COMPLETED, WAIT)
        .expect("Kafka copies despite the collision");
    assert!(
        line.contains("Saw 1 brokers in the migrated metadata [7]"),
        "{line}"
    );
    let owner = zk_get(&zk, "/controller");
    assert!(
        owner.contains("\"brokerid\":7,") && owner.contains("kraftControllerEpoch"),
        "{owner}"
    );
    let created = broker.create_topic("after", 1, &[]);
    let Err(e) = created else {
        panic!("Kafka 3.9 served a CreateTopics it fails with the ids colliding");
    };
    assert!(
        e.to_string()
            .contains("directly when there is a KRaft controller"),
        "{e}"
    );
    broker.kill().expect("broker killed");
    controller.kill().expect("controller killed");
    drop(zk);

    // krust with broker.id 1 = controller node.id 1.
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut broker = zk_broker(&dist, &zk, 1);
    broker.create_topic("made-in-zk", 1, &[]).expect("topic");
    let mut settings: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    settings.push(("zookeeper.metadata.migration.enable", "true"));
    settings.push(("zookeeper.connect", &connect));
    let mut quorum = Quorum::in_cluster(1, &settings, broker.cluster_id());
    let controller_props = quorum.node(1).properties().display().to_string();
    let base = std::fs::read_to_string(broker.properties_path()).expect("broker properties");
    let broker_file = quorum
        .root
        .path()
        .join("broker-in-migration-mode.properties");
    std::fs::write(
        &broker_file,
        format!(
            "{base}\ncontroller.quorum.voters={}\ncontroller.listener.names=CONTROLLER\n\
             zookeeper.metadata.migration.enable=true\n",
            quorum.voters
        ),
    )
    .expect("write");
    let out = krust(&[
        "migration",
        "preflight",
        "--zookeeper",
        &connect,
        "--config",
        &controller_props,
        "--broker-config",
        &broker_file.display().to_string(),
    ]);
    println!("{}", out.stdout);
    assert!(!out.success(), "{}", text(&out));
    assert!(
        out.stdout.lines().any(|l| l.starts_with("FAIL node ids")
            && l.contains("[1] are both controller and broker ids")),
        "{}",
        text(&out)
    );

    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    migration::roll_into_migration_mode(&mut broker, &quorum);
    let process = quorum.node(1).process.as_mut().expect("started");
    let line = process
        .wait_for_line("have the node ids of KRaft controllers", WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", process.log_tail(40)));
    assert!(line.contains("ZooKeeper brokers {1}"), "{line}");
    let status = krust(&[
        "migration",
        "status",
        "--bootstrap-controller",
        &controllers(&quorum, &[1]),
        "--zookeeper",
        &connect,
    ]);
    println!("{}", status.stdout);
    assert!(
        status
            .stdout
            .contains("ZooKeeper brokers 1 have the node ids of KRaft controllers"),
        "{}",
        text(&status)
    );
    let owner = zk_get(&zk, "/controller");
    assert!(
        owner.contains("\"brokerid\":1,") && !owner.contains("kraftControllerEpoch\":1"),
        "/controller is still the ZooKeeper broker's: {owner}"
    );
    let output = quorum.node(1).process.as_ref().expect("started").output();
    assert!(!output.contains(MIGRATION_COMPLETED), "copied anyway");
    assert!(
        !output.contains("Claimed ZK controller leadership"),
        "claimed anyway"
    );
    // A ZooKeeper-mode broker in migration mode stops through the KRaft controller, which it
    // cannot reach as a broker here: it is killed.
    broker.kill().expect("broker killed");
    quorum.stop_all();
}

/// A ZooKeeper-mode broker started without the migration settings in the hybrid phase (facts
/// §6.4, §6.11): Kafka 3.9's driver no longer waits for brokers once the copy is done and only
/// drives brokers registered with the quorum, and `/controller` is the KRaft controller's
/// persistent claim, so the newcomer cannot become the ZooKeeper controller either: it gets no
/// metadata at all. Dual-write goes on for the others; `krust migration status` names the
/// broker and how to fix it (before the copy, the same broker is what the migration waits for:
/// `migration_cli.rs`).
#[test]
fn a_zookeeper_broker_without_the_migration_settings_in_the_hybrid_phase_is_named_by_status() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut broker = zk_broker(&dist, &zk, 101);
    let mut settings: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    settings.push(("zookeeper.metadata.migration.enable", "true"));
    settings.push(("zookeeper.connect", &connect));
    let mut quorum = Quorum::in_cluster(1, &settings, broker.cluster_id());
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    migration::roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy_anywhere(&quorum);
    let owner = wait_for_zk_controller(&zk, &quorum, 1);

    let mut late = zk_broker(&dist, &zk, 102);
    wait_for_znode(&zk, "/brokers/ids/102");
    assert_eq!(zk_get(&zk, "/controller"), owner, "the claim stays");
    create_and_see_in_zookeeper(&broker, &zk, &quorum, "while-102-is-up");
    let status = krust(&[
        "migration",
        "status",
        "--bootstrap-controller",
        &controllers(&quorum, &[1]),
        "--zookeeper",
        &connect,
    ]);
    println!("{}", status.stdout);
    assert!(status.success(), "{}", text(&status));
    for expected in [
        "Phase: MIGRATION (hybrid",
        "Broker 102: NOT registered with the quorum",
        "ZooKeeper brokers 102 are in /brokers/ids but not registered with the quorum",
    ] {
        assert!(
            status.stdout.contains(expected),
            "{expected}\n{}",
            text(&status)
        );
    }
    late.kill().expect("late broker killed");
    broker.kill().expect("broker killed");
    quorum.stop_all();
}
