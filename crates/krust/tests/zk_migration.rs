//! The KIP-866 ZooKeeper → KRaft migration with krust controllers and real Apache Kafka 3.9
//! ZooKeeper-mode brokers over a real ZooKeeper (the one shipped in Kafka 3.9's jars).
//!
//! Kafka's own run of the same steps is `crates/krust-testkit/tests/zk_migration.rs`.

#[path = "support/mod.rs"]
mod cluster;
#[path = "support/migration.rs"]
mod migration;
#[path = "quorum_support/mod.rs"]
mod support;

use std::time::Duration;

use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::MetadataRecord;
use krust_metadata::{MetadataImage, MetadataProvenance};
use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, KrustProcess, ZooKeeperServer, check_acked_records,
};
use migration::{
    MIGRATION_COMPLETED, REGISTERED, WAIT, metadata_records, roll_into_migration_mode,
    wait_for_znode, zk_broker, zk_get,
};
use support::{FAST_TIMEOUTS, Quorum, wait_for_quorum};

/// One krust controller (node 1) of cluster `cluster_id` with `extra` settings (the migration
/// ones among them), started.
fn migrating_controller(extra: &[(&str, &str)], cluster_id: &str) -> Quorum {
    let mut quorum = Quorum::in_cluster(1, extra, cluster_id);
    let node = quorum.node(1);
    node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
    quorum
}

/// A Kafka 3.9 KRaft broker taking over the stopped ZooKeeper broker `zk_broker`: same id, port
/// and dirs (not formatted: it keeps the ZooKeeper broker's `meta.properties`), started.
fn kraft_broker_on(dist: &KafkaDist, zk_broker: &KafkaNode, quorum: &Quorum) -> KafkaNode {
    let mut kraft = KafkaNode::builder(dist)
        .role(KafkaRole::Broker)
        .node_id(zk_broker.node_id())
        .cluster_id(zk_broker.cluster_id().to_owned())
        .quorum_voters(quorum.voters.clone())
        .dir(zk_broker.dir().to_path_buf())
        .broker_port(zk_broker.broker_port().expect("a broker port"))
        .start_timeout(WAIT)
        .build_unformatted()
        .expect("KRaft broker configured on the ZooKeeper broker's dirs");
    kraft
        .start()
        .unwrap_or_else(|e| panic!("KRaft broker starts: {e}\n{}", quorum.log_tails()));
    kraft
}

/// Waits for controller 1's completion line of the copy; the line.
fn wait_for_copy(quorum: &mut Quorum) -> String {
    let tails = quorum.log_tails();
    quorum
        .node(1)
        .process
        .as_mut()
        .expect("started")
        .wait_for_line(MIGRATION_COMPLETED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{tails}"))
}

/// `GET /metrics` on 127.0.0.1:`port`.
fn scrape_metrics(port: u16) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ =
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// The value of an unlabelled sample.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scrapes until `accept` holds (or [`WAIT`] passes).
fn scrape_until(port: u16, accept: impl Fn(&str) -> bool) -> Option<String> {
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        let metrics = scrape_metrics(port);
        if accept(&metrics) {
            return Some(metrics);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// The whole migration, phases 1–5: a krust controller provisioned with
/// `zookeeper.metadata.migration.enable=true` sits in PRE_MIGRATION; a Kafka 3.9
/// ZooKeeper-mode broker rolled into migration mode registers with it as a migrating
/// ZooKeeper broker; the controller claims `/controller`, copies ZooKeeper's metadata into
/// its log in a transaction (Kafka's completion line), and dual-writes: a topic created
/// through the broker lands in ZooKeeper and is served by the broker, which the KRaft
/// controller now drives with LeaderAndIsr/UpdateMetadata; the broker is rolled into a Kafka
/// 3.9 KRaft broker on the same log dirs and serves the same records; the controller is
/// restarted without the flag (POST_MIGRATION) and ZooKeeper is not written again.
#[test]
fn a_zookeeper_cluster_migrates_onto_krust_controllers() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 101);
    broker
        .create_topic("made-in-zk", 2, &[("retention.ms", "123456789")])
        .expect("create a topic in ZooKeeper mode");
    broker
        .console_produce("made-in-zk", "zk-1\nzk-2\nzk-3\n", &[], &[("acks", "all")])
        .expect("produce in ZooKeeper mode");

    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    let metrics_port = krust_testkit::free_ports(1).expect("a port")[0].to_string();
    extra.push(("metrics.port", &metrics_port));
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = migrating_controller(&extra, broker.cluster_id());
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));

    roll_into_migration_mode(&mut broker, &quorum);
    broker
        .wait_for_log(REGISTERED, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", quorum.log_tails()));
    // Every broker registered: the controller claims ZooKeeper and copies its metadata.
    println!("{}", wait_for_copy(&mut quorum));
    // Kafka's migration metrics on the controller: MIGRATION, one ZooKeeper broker.
    let port: u16 = metrics_port.parse().expect("port");
    let metrics = scrape_until(port, |m| {
        gauge(m, "kafka_controller_kafkacontroller_zkmigrationstate") == Some(1.0)
            && gauge(m, "kafka_controller_kafkacontroller_migratingzkbrokercount") == Some(1.0)
            // DUAL_WRITE: the reconciliation after the copy is done.
            && gauge(m, "kafka_controller_kafkacontroller_migrationdriverstate") == Some(8.0)
    })
    .unwrap_or_else(|| panic!("migration metrics\n{}", scrape_metrics(port)));
    assert!(
        gauge(
            &metrics,
            "kafka_controller_kafkacontroller_zkwritesnapshottimems_count"
        )
        .is_some_and(|n| n >= 1.0),
        "the reconciliation recorded:\n{metrics}"
    );

    // Hybrid phase: the KRaft controller owns /controller and drives the ZooKeeper broker.
    let owner = zk_get(&zk, "/controller");
    assert!(
        owner.contains("\"kraftControllerEpoch\"") && owner.contains("\"brokerid\":1"),
        "/controller claimed by the KRaft controller: {owner}"
    );
    // A topic created through the ZooKeeper broker (forwarded to the KRaft controller) is
    // dual-written to ZooKeeper, and the broker leads it (LeaderAndIsr from krust).
    broker
        .create_topic("made-in-hybrid", 1, &[("retention.ms", "86400000")])
        .unwrap_or_else(|e| {
            panic!(
                "create a topic in the hybrid phase: {e}\n{}",
                quorum.log_tails()
            )
        });
    let znode = wait_for_znode(&zk, "/brokers/topics/made-in-hybrid");
    assert!(znode.contains("\"partitions\":{\"0\":[101]}"), "{znode}");
    let config = wait_for_znode(&zk, "/config/topics/made-in-hybrid");
    assert!(config.contains("\"retention.ms\":\"86400000\""), "{config}");
    broker
        .console_produce("made-in-hybrid", "h-1\nh-2\n", &[], &[("acks", "all")])
        .unwrap_or_else(|e| panic!("produce in the hybrid phase: {e}\n{}", quorum.log_tails()));
    let consumed = broker
        .console_consume("made-in-hybrid", 2, &[], WAIT)
        .expect("consume in the hybrid phase");
    assert_eq!(
        consumed.stdout.lines().collect::<Vec<_>>(),
        vec!["h-1", "h-2"]
    );
    let consumed = broker
        .console_consume("made-in-zk", 3, &[], WAIT)
        .expect("consume the records written before the migration");
    let mut lines: Vec<&str> = consumed.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["zk-1", "zk-2", "zk-3"]);

    // A ZooKeeper broker restarting mid-hybrid registers again (a new broker epoch) and gets a
    // full resync from the KRaft controller: it serves what it had and what is created next.
    broker
        .restart()
        .unwrap_or_else(|e| panic!("broker restarts mid-hybrid: {e}\n{}", quorum.log_tails()));
    broker
        .create_topic("after-restart", 1, &[])
        .unwrap_or_else(|e| panic!("create after the restart: {e}\n{}", quorum.log_tails()));
    broker
        .console_produce("after-restart", "r-1\n", &[], &[("acks", "all")])
        .expect("produce after the restart");
    let consumed = broker
        .console_consume("after-restart", 1, &[], WAIT)
        .expect("consume after the restart");
    assert_eq!(consumed.stdout.lines().collect::<Vec<_>>(), vec!["r-1"]);
    let consumed = broker
        .console_consume("made-in-hybrid", 2, &[], WAIT)
        .expect("consume what was there before the restart");
    assert_eq!(
        consumed.stdout.lines().collect::<Vec<_>>(),
        vec!["h-1", "h-2"]
    );

    // Phase 4: the broker is rolled into a KRaft broker on the same log dirs (the ZooKeeper
    // broker's controlled shutdown goes through the KRaft controller).
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    let mut kraft_broker = kraft_broker_on(&dist, &broker, &quorum);
    let consumed = kraft_broker
        .console_consume("made-in-hybrid", 2, &[], WAIT)
        .expect("consume through the KRaft broker");
    assert_eq!(
        consumed.stdout.lines().collect::<Vec<_>>(),
        vec!["h-1", "h-2"]
    );
    // Still dual-writing: a topic created now lands in ZooKeeper too.
    kraft_broker
        .create_topic("made-after-roll", 1, &[])
        .expect("create a topic after the roll");
    wait_for_znode(&zk, "/brokers/topics/made-after-roll");

    // Phase 5: finalize — the controller restarts without the migration flag and writes
    // POST_MIGRATION; ZooKeeper is not written again.
    let props = quorum.node(1).properties();
    let text = std::fs::read_to_string(&props).expect("controller properties");
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with("zookeeper."))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&props, text).expect("rewrite controller properties");
    let node = quorum.node(1);
    let process = node.process.as_mut().expect("started");
    process
        .terminate(Duration::from_secs(30))
        .expect("controller stops");
    let mark = process.log_mark();
    process.restart().expect("controller restarts");
    process
        .wait_for_line_since(mark, support::STARTED_LINE, WAIT)
        .expect("controller restarted");
    let migration_before = zk_get(&zk, "/migration");
    kraft_broker
        .create_topic("made-after-finalize", 1, &[])
        .unwrap_or_else(|e| {
            panic!(
                "create a topic after finalizing: {e}\n{}",
                quorum.log_tails()
            )
        });
    kraft_broker
        .console_produce("made-after-finalize", "f-1\n", &[], &[("acks", "all")])
        .expect("produce after finalizing");
    assert!(
        !zk_get(&zk, "/brokers/topics/made-after-finalize").contains('{'),
        "ZooKeeper written after finalization"
    );
    assert_eq!(
        zk_get(&zk, "/migration"),
        migration_before,
        "/migration untouched"
    );

    kraft_broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("KRaft broker stops: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
    let records = metadata_records(&quorum, 1);
    assert!(
        records.iter().any(|r| matches!(
            r,
            MetadataRecord::RegisterBroker(b) if b.broker_id == 101 && b.is_migrating_zk_broker
        )),
        "the ZooKeeper broker registered as migrating: {records:#?}"
    );
    assert!(
        records.iter().any(|r| matches!(
            r,
            MetadataRecord::RegisterController(c) if c.controller_id == 1 && c.zk_migration_ready
        )),
        "the controller registered as ready for the migration"
    );
    let image = MetadataImage::from_records(records.iter(), MetadataProvenance::new(0, 0, 0))
        .expect("the log replays");
    assert_eq!(
        image.features.zk_migration_state,
        ZkMigrationState::PostMigration
    );
    assert!(image.topics.topic_by_name("made-after-finalize").is_some());
    let topic = image
        .topics
        .topic_by_name("made-in-zk")
        .expect("the topic made in ZooKeeper was copied");
    assert_eq!(topic.partitions.len(), 2);
    assert!(image.topics.topic_by_name("made-in-hybrid").is_some());
}

/// The output of every controller so far.
fn controller_logs(quorum: &Quorum) -> String {
    quorum
        .nodes
        .iter()
        .filter_map(|n| n.process.as_ref().map(KrustProcess::output))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Under load, with faults: two Kafka 3.9 ZooKeeper brokers and three krust controllers; an
/// idempotent `acks=all` producer writes to an RF-2 topic the whole time. The brokers are rolled
/// into migration mode, the metadata is copied, the active controller is SIGKILLed in the hybrid
/// phase (another one claims ZooKeeper, reconciles and keeps dual-writing), then one broker is
/// rolled into a krust broker on the ZooKeeper broker's log dir and the other into a Kafka 3.9
/// KRaft broker. Every acknowledged record is on both replicas, once, at its offset.
#[test]
fn a_zookeeper_cluster_migrates_under_load_while_the_active_controller_is_killed() {
    const TOPIC: &str = "acked";
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut brokers: Vec<KafkaNode> = [101, 102]
        .into_iter()
        .map(|id| {
            KafkaNode::builder(&dist)
                .role(KafkaRole::ZkBroker)
                .node_id(id)
                .zookeeper(zk.connect_string())
                .start_timeout(WAIT)
                .start()
                .expect("ZooKeeper-mode broker starts")
        })
        .collect();
    let bootstrap = brokers
        .iter()
        .map(KafkaNode::bootstrap_servers)
        .collect::<Vec<_>>()
        .join(",");
    dist.create_topic(&bootstrap, TOPIC, 1, 2, &[("min.insync.replicas", "1")])
        .expect("an RF-2 topic in ZooKeeper mode");
    let mut producer = dist
        .start_acked_producer(
            &bootstrap,
            &[TOPIC],
            20,
            1_000_000,
            Duration::ZERO,
            &[("delivery.timeout.ms", "300000")],
            WAIT,
        )
        .expect("acked producer starts");
    producer
        .wait_acked(20, WAIT)
        .expect("records acknowledged in ZooKeeper mode");

    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let cluster_id = brokers[0].cluster_id().to_owned();
    let mut quorum = Quorum::in_cluster(3, &extra, &cluster_id);
    for id in 1..=3 {
        let node = quorum.node(id);
        node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
    }
    wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));

    for broker in &mut brokers {
        broker
            .enable_migration(&quorum.voters)
            .expect("broker config");
        broker.restart().expect("broker restarts in migration mode");
        let acked = producer.report().acked.len();
        producer
            .wait_acked(acked + 20, WAIT)
            .unwrap_or_else(|e| panic!("producing after a roll: {e}\n{}", quorum.log_tails()));
    }
    let deadline = std::time::Instant::now() + WAIT;
    while !controller_logs(&quorum).contains(MIGRATION_COMPLETED) {
        assert!(
            std::time::Instant::now() < deadline,
            "no copy\n{}",
            quorum.log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // SIGKILL the active controller in the hybrid phase.
    let before = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0).expect("leader");
    quorum.kill(before.leader_id);
    let survivors: Vec<i32> = (1..=3).filter(|id| *id != before.leader_id).collect();
    let after = wait_for_quorum(&quorum.bootstrap_without(&[before.leader_id]), WAIT, |q| {
        q.leader_id > 0 && q.leader_id != before.leader_id
    })
    .unwrap_or_else(|| panic!("no new leader\n{}", quorum.log_tails()));
    assert!(survivors.contains(&after.leader_id));
    // The new active controller claims ZooKeeper and keeps dual-writing.
    brokers[0]
        .create_topic("after-failover", 1, &[])
        .unwrap_or_else(|e| panic!("create after the failover: {e}\n{}", quorum.log_tails()));
    wait_for_znode(&zk, "/brokers/topics/after-failover");
    let owner = zk_get(&zk, "/controller");
    assert!(
        owner.contains(&format!("\"brokerid\":{}", after.leader_id)),
        "/controller claimed by the new leader {}: {owner}",
        after.leader_id
    );
    let acked = producer.report().acked.len();
    producer
        .wait_acked(acked + 20, WAIT)
        .unwrap_or_else(|e| panic!("producing after the failover: {e}\n{}", quorum.log_tails()));

    // Roll the brokers into KRaft brokers on the same dirs: 101 becomes a krust broker (taking
    // the ZooKeeper broker's log dir as it is), 102 a Kafka 3.9 KRaft broker.
    let broker_dir = quorum.root.path().join("krust-broker-101");
    std::fs::create_dir_all(&broker_dir).expect("krust broker dir");
    let port = brokers[0].broker_port().expect("a broker port");
    std::fs::write(
        broker_dir.join("server.properties"),
        cluster::broker_properties(
            101,
            port,
            &quorum.voters,
            &format!(
                "log.dirs={}\noffsets.topic.replication.factor=1\n",
                brokers[0].log_dir().display()
            ),
        ),
    )
    .expect("krust broker properties");
    brokers[0]
        .terminate(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    // No `krust storage format`: the krust broker takes the ZooKeeper broker's meta.properties.
    let mut krust_broker = cluster::start_server_within(&broker_dir, 101, WAIT);
    let acked = producer.report().acked.len();
    producer.wait_acked(acked + 20, WAIT).unwrap_or_else(|e| {
        panic!(
            "producing after the krust roll: {e}\n{}\n{}",
            quorum.log_tails(),
            krust_broker.log_tail(40)
        )
    });
    brokers[1]
        .terminate(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    let mut kraft = kraft_broker_on(&dist, &brokers[1], &quorum);
    let acked = producer.report().acked.len();
    producer
        .wait_acked(acked + 20, WAIT)
        .unwrap_or_else(|e| panic!("producing after a roll: {e}\n{}", quorum.log_tails()));

    let report = producer.stop(WAIT).expect("producer stops");
    assert!(
        report.failed.is_empty(),
        "sends failed: {:?}",
        report.failed
    );
    kraft
        .terminate(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("KRaft broker stops: {e}\n{}", quorum.log_tails()));
    krust_broker
        .terminate(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("krust broker stops: {e}\n{}", krust_broker.log_tail(40)));
    quorum.stop_all();
    let dirs = [
        brokers[0].log_dir().join(format!("{TOPIC}-0")),
        kraft.partition_dir(TOPIC, 0),
    ];
    let dir_refs: Vec<&std::path::Path> = dirs.iter().map(std::path::PathBuf::as_path).collect();
    let logs = dist
        .read_replica_logs(&dir_refs, WAIT)
        .expect("DumpLogSegments on both replicas");
    let acked = report.acked_in(TOPIC);
    assert!(acked.len() >= 100, "only {} acknowledged", acked.len());
    for log in &logs {
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        let problems = check_acked_records(&acked, &log.records);
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            log.dir.display(),
            problems.join("\n")
        );
    }
}

/// Rollback from the hybrid phase (Kafka's documented procedure for "brokers in migration
/// mode", facts §6.14): after the copy and a topic created and a config changed in dual-write,
/// the controllers are deprovisioned, `/controller` and `/migration` removed, the broker taken
/// out of migration mode and restarted. It becomes the ZooKeeper controller again and serves
/// every record and every metadata change made during the migration.
#[test]
fn a_migration_rolled_back_from_the_hybrid_phase_leaves_a_working_zookeeper_cluster() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 101);
    broker
        .create_topic("before", 1, &[])
        .expect("create a topic in ZooKeeper mode");
    broker
        .console_produce("before", "b-1\nb-2\n", &[], &[("acks", "all")])
        .expect("produce in ZooKeeper mode");

    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = migrating_controller(&extra, broker.cluster_id());
    roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy(&mut quorum);
    broker
        .create_topic("during", 1, &[("retention.ms", "7200000")])
        .unwrap_or_else(|e| panic!("create in the hybrid phase: {e}\n{}", quorum.log_tails()));
    wait_for_znode(&zk, "/brokers/topics/during");
    broker
        .console_produce("during", "d-1\nd-2\n", &[], &[("acks", "all")])
        .expect("produce in the hybrid phase");

    // The rollback: deprovision the quorum, rmr /controller, keep /migration's content for
    // debugging and rmr it, take the broker out of migration mode, roll it.
    quorum.stop_all();
    let migration = zk_get(&zk, "/migration");
    assert!(migration.contains("kraft_metadata_offset"), "{migration}");
    for path in ["/controller", "/migration"] {
        zk.shell(&["deleteall", path])
            .unwrap_or_else(|e| panic!("zookeeper-shell deleteall {path}: {e}"));
    }
    broker.disable_migration().expect("broker config");
    broker.restart().expect("broker restarts in ZooKeeper mode");

    // A ZooKeeper controller again, with everything the migration did.
    let owner = wait_for_znode(&zk, "/controller");
    assert!(
        owner.contains("\"brokerid\":101") && !owner.contains("kraftControllerEpoch\":1"),
        "the ZooKeeper broker is the controller again: {owner}"
    );
    let config = zk_get(&zk, "/config/topics/during");
    assert!(config.contains("\"retention.ms\":\"7200000\""), "{config}");
    for (topic, want) in [("before", ["b-1", "b-2"]), ("during", ["d-1", "d-2"])] {
        let consumed = broker
            .console_consume(topic, 2, &[], WAIT)
            .unwrap_or_else(|e| panic!("consume {topic} after the rollback: {e}"));
        assert_eq!(consumed.stdout.lines().collect::<Vec<_>>(), want);
    }
    broker
        .create_topic("after", 1, &[])
        .expect("the ZooKeeper controller creates topics again");
    broker
        .console_produce("after", "a-1\n", &[], &[("acks", "all")])
        .expect("produce after the rollback");
    broker
        .terminate(Duration::from_secs(60))
        .expect("broker stops");
}

/// ZooKeeper down in the hybrid phase: the metadata log goes on (a config is changed), the
/// write-behind lag grows until the controller refuses admin writes (bounded with
/// `zookeeper.metadata.migration.write.behind.max.records`), and once ZooKeeper is back the
/// dual-write drains: the waiting change goes through and lands in ZooKeeper.
#[test]
fn dual_writes_block_while_zookeeper_is_down_and_drain_when_it_is_back() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let mut zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 101);
    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    let metrics_port = krust_testkit::free_ports(1).expect("a port")[0].to_string();
    extra.push(("metrics.port", &metrics_port));
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    extra.push((
        "zookeeper.metadata.migration.write.behind.max.records",
        "40",
    ));
    let mut quorum = migrating_controller(&extra, broker.cluster_id());
    roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy(&mut quorum);
    let port: u16 = metrics_port.parse().expect("port");
    let lag = |m: &str| gauge(m, "kafka_controller_kafkacontroller_zkwritebehindlag");

    // Admin writes go to the controller directly: a ZooKeeper-mode broker does not serve them
    // while its own ZooKeeper is down.
    broker
        .create_topic("cfg", 1, &[])
        .expect("create a topic in the hybrid phase");
    wait_for_znode(&zk, "/brokers/topics/cfg");
    let controller = quorum.nodes[0].address();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = krust_net::Client::new(
        controller,
        krust_net::ClientConfig {
            client_id: "zk-migration-test".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..krust_net::ClientConfig::default()
        },
    );
    // CreateTopics straight to the controller (a ZooKeeper-mode broker does not serve admin
    // requests while its own ZooKeeper is down): (error code, message) of the topic.
    let create = |name: &str| -> (i16, Option<String>) {
        use kafka_protocol::messages::create_topics_request::CreatableTopic;
        use kafka_protocol::messages::{CreateTopicsRequest, ResponseKind, TopicName};
        use kafka_protocol::protocol::StrBytes;
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ])
            .with_timeout_ms(30_000);
        match runtime.block_on(client.send(request, 7)) {
            Ok(ResponseKind::CreateTopics(r)) => (
                r.topics[0].error_code,
                r.topics[0].error_message.as_ref().map(ToString::to_string),
            ),
            other => panic!("CreateTopics: {other:?}"),
        }
    };

    zk.kill().expect("ZooKeeper killed");
    assert_eq!(
        create("during-outage"),
        (0, None),
        "the log goes on without ZooKeeper"
    );
    // Each topic is records ZooKeeper does not get; past the bound, admin writes are refused.
    let mut refused = None;
    for i in 0..200 {
        match create(&format!("outage-{i}")) {
            (0, _) => {}
            (7, message) => {
                refused = message;
                break;
            }
            other => panic!("unexpected answer: {other:?}"),
        }
    }
    let message = refused.unwrap_or_else(|| panic!("never refused\n{}", scrape_metrics(port)));
    assert!(
        message.contains("metadata records behind the metadata log (the limit is 40)"),
        "{message}"
    );
    assert!(
        lag(&scrape_metrics(port)).is_some_and(|l| l > 40.0),
        "the lag metric shows it"
    );
    assert_eq!(create("blocked").0, 7, "still refused");
    zk.restart().expect("ZooKeeper back");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match create("blocked") {
            (0, _) => break,
            (7, _) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            other => panic!("the create never went through: {other:?}"),
        }
    }
    wait_for_znode(&zk, "/brokers/topics/during-outage");
    wait_for_znode(&zk, "/brokers/topics/blocked");
    scrape_until(port, |m| lag(m).is_some_and(|l| l < 40.0))
        .unwrap_or_else(|| panic!("the lag drains\n{}", scrape_metrics(port)));
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
}

/// A controller formatted with another cluster's id refuses to migrate the ZooKeeper cluster
/// (a krust check; Kafka 3.9 compares nothing): the process stops with a message naming
/// `/cluster/id` and both ids, and nothing is written to ZooKeeper.
#[test]
fn a_controller_of_another_cluster_refuses_to_migrate() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    for command in [
        vec!["create", "/cluster", ""],
        vec![
            "create",
            "/cluster/id",
            r#"{"version":"1","id":"Xwq2gBlhRxGOo0MAQ8yRWQ"}"#,
        ],
    ] {
        zk.shell(&command)
            .and_then(krust_testkit::ToolOutput::ok)
            .expect("zookeeper-shell create");
    }
    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = Quorum::in_cluster(1, &extra, "J8qXRwI-Qyi2G0guFTiuYw");
    let node = quorum.node(1);
    let mut process = cluster::spawn_server(&node.dir, 1);
    let line = process
        .wait_for_line("refusing to migrate it", WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", process.log_tail(40)));
    assert!(
        line.contains("has cluster id Xwq2gBlhRxGOo0MAQ8yRWQ (/cluster/id)")
            && line.contains("formatted with cluster id J8qXRwI-Qyi2G0guFTiuYw"),
        "{line}"
    );
    let status = process.wait_exit(WAIT).expect("the controller stops");
    assert!(!status.success(), "a fatal error exits non-zero");
    for path in ["/migration", "/controller"] {
        assert!(
            !zk_get(&zk, path).contains('{'),
            "{path} written: {}",
            zk_get(&zk, path)
        );
    }
    drop(quorum);
}

/// Rollback after the brokers were migrated to KRaft (Kafka's documented procedure for
/// "brokers migrated to KRaft", facts §6.14): the broker is rolled back to ZooKeeper mode with
/// the migration still enabled, the quorum deprovisioned, `/controller` and `/migration`
/// removed, the migration settings dropped and the broker restarted again. It serves every
/// record, including those written while it was a KRaft broker, and the topic created then.
/// On the way the brokers ask krust's controller to assign their replicas' log directories
/// (AssignReplicasToDirs, KIP-858).
#[test]
fn a_migration_rolled_back_after_the_brokers_went_kraft_leaves_a_working_zookeeper_cluster() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut broker = zk_broker(&dist, &zk, 101);
    broker
        .create_topic("before", 1, &[])
        .expect("create a topic in ZooKeeper mode");
    broker
        .console_produce("before", "b-1\n", &[], &[("acks", "all")])
        .expect("produce in ZooKeeper mode");
    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    let connect = zk.connect_string();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    let mut quorum = migrating_controller(&extra, broker.cluster_id());
    roll_into_migration_mode(&mut broker, &quorum);
    wait_for_copy(&mut quorum);

    // The broker becomes a Kafka KRaft broker on the same dirs; records and a topic are made.
    broker
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("broker stops: {e}\n{}", quorum.log_tails()));
    let mut kraft = kraft_broker_on(&dist, &broker, &quorum);
    kraft
        .console_produce("before", "k-1\n", &[], &[("acks", "all")])
        .expect("produce through the KRaft broker");
    kraft
        .create_topic("during", 1, &[])
        .expect("create a topic through the KRaft broker");
    wait_for_znode(&zk, "/brokers/topics/during");
    kraft
        .console_produce("during", "d-1\n", &[], &[("acks", "all")])
        .expect("produce to the new topic");
    kraft
        .terminate(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("KRaft broker stops: {e}\n{}", quorum.log_tails()));

    // Back to ZooKeeper mode with the migration still enabled, then the quorum goes, then the
    // second roll without the migration settings. The KRaft broker wrote its own
    // `server.properties` into the shared dir: the ZooKeeper broker's comes back first.
    broker
        .enable_migration(&quorum.voters)
        .expect("the ZooKeeper broker's config, in migration mode");
    broker
        .start()
        .unwrap_or_else(|e| panic!("ZooKeeper broker back: {e}\n{}", quorum.log_tails()));
    quorum.stop_all();
    for path in ["/controller", "/migration"] {
        zk.shell(&["deleteall", path])
            .unwrap_or_else(|e| panic!("zookeeper-shell deleteall {path}: {e}"));
    }
    broker.disable_migration().expect("broker config");
    broker.restart().expect("broker restarts in ZooKeeper mode");
    let owner = wait_for_znode(&zk, "/controller");
    assert!(owner.contains("\"brokerid\":101"), "{owner}");
    let consumed = broker
        .console_consume("before", 2, &[], WAIT)
        .expect("consume after the rollback");
    assert_eq!(
        consumed.stdout.lines().collect::<Vec<_>>(),
        vec!["b-1", "k-1"]
    );
    let consumed = broker
        .console_consume("during", 1, &[], WAIT)
        .expect("consume the topic made by the KRaft broker");
    assert_eq!(consumed.stdout.lines().collect::<Vec<_>>(), vec!["d-1"]);
    broker
        .create_topic("after", 1, &[])
        .expect("the ZooKeeper controller creates topics again");
    broker
        .terminate(Duration::from_secs(60))
        .expect("broker stops");
}
