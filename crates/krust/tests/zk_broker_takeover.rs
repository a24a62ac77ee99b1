//! KIP-866's last broker step, broker side: a Kafka 3.9 ZooKeeper-mode broker (`broker.id=4`,
//! a real ZooKeeper) is stopped and a krust broker (`process.roles=broker`, `node.id=4`) starts
//! on its log dir as it is, and serves every record at its offset to Kafka's console consumer.
//!
//! 1. ZooKeeper + Kafka 3.9 ZK broker 4; topic `legacy` (1 partition, `segment.bytes=1024` so
//!    it rolls and writes producer snapshots); 300 records from two idempotent console
//!    producers; a clean stop (SIGTERM).
//! 2. krust-log (and the broker's producer-state loader) read what the ZK broker left:
//!    `meta.properties` v0, `recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
//!    `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`, `leader-epoch-checkpoint`,
//!    `partition.metadata`, the segments with their indexes and the `<offset>.snapshot` files.
//! 3. One krust controller formatted with the ZooKeeper cluster's id. The migration that would
//!    copy `legacy` (and its topic id) from ZooKeeper into the metadata log is wired elsewhere,
//!    so this test does without it, the simplest honest way: the partition directory and the
//!    four checkpoint files are set aside, krust broker 4 starts on the ZK broker's log dir
//!    (whose v0 `meta.properties` it accepts and gives a `directory.id`, staying v0),
//!    `kafka-topics` creates `legacy` on broker 4 through it, the broker stops, and the ZK
//!    broker's partition directory and checkpoints are put back with the new topic id written
//!    into `partition.metadata` (the one thing a migration keeps and this setup cannot).
//! 4. krust broker 4 starts again on that log dir: the console consumer reads the 300 records
//!    at offsets 0..300, and an idempotent producer appends 20 more after them.
//!
//! A second test does the same with old message formats: a ZK broker at
//! `inter.broker.protocol.version=2.8` writes magic 0 and magic 1 segments (plain and
//! gzip/snappy/lz4 wrappers, checked with Kafka's `DumpLogSegments`), and the krust broker
//! serves them as stored to the console consumer.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

mod support;

use std::path::Path;
use std::time::Duration;

use krust_broker::producer_state::ProducerStateManager;
use krust_log::checkpoint::{PartitionMetadata, TopicPartition, read_offset_checkpoint};
use krust_log::cleaner::read_cleaner_checkpoint;
use krust_log::{EpochEntry, Log, LogConfig, LogOpenOptions};
use krust_metadata::{MetaProperties, MetaPropertiesVersion};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ZooKeeperServer, class, free_ports};
use support::{
    Node, broker_properties, consume_offsets, controller_properties, start_server_within,
    tool_until, write_node,
};

const WAIT: Duration = Duration::from_secs(120);
const BROKER_ID: i32 = 4;
const TOPIC: &str = "legacy";
/// Records written by the ZooKeeper-mode broker, then by the krust broker.
const ZK_RECORDS: usize = 300;
const KRUST_RECORDS: usize = 20;
const CHECKPOINTS: [&str; 4] = [
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
];

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)")
}

fn values(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("record-{i:04}")).collect()
}

fn read_meta(dir: &Path) -> MetaProperties {
    let text = std::fs::read_to_string(dir.join("meta.properties")).expect("meta.properties");
    MetaProperties::parse(&text).expect("krust parses Kafka's meta.properties")
}

/// Runs a ZooKeeper-mode broker, writes `legacy`, stops it cleanly; returns it (its log dir
/// lives as long as it does) and the cluster id ZooKeeper chose.
fn zk_broker_with_records(dist: &KafkaDist, zk: &ZooKeeperServer) -> (KafkaNode, String) {
    let mut node = KafkaNode::builder(dist)
        .role(KafkaRole::ZkBroker)
        .node_id(BROKER_ID)
        .zookeeper(zk.connect_string())
        .start_timeout(WAIT)
        .start()
        .expect("ZooKeeper-mode broker starts");
    node.create_topic(TOPIC, 1, &[("segment.bytes", "1024")])
        .expect("create topic")
        .ok()
        .expect("kafka-topics --create");
    let idempotent = [
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("batch.size", "256"),
    ];
    for chunk in [0..ZK_RECORDS / 2, ZK_RECORDS / 2..ZK_RECORDS] {
        let input = values(chunk).join("\n") + "\n";
        node.console_produce(TOPIC, &input, &[], &idempotent)
            .expect("console producer")
            .ok()
            .expect("console producer succeeds");
    }
    let cluster_id = node.cluster_id().to_owned();
    node.terminate(WAIT).expect("clean stop (SIGTERM)");
    (node, cluster_id)
}

/// Step 2: every file the ZooKeeper-mode broker left, read by krust.
fn check_zk_broker_files(log_dir: &Path, cluster_id: &str) {
    let meta = read_meta(log_dir);
    assert_eq!(meta.version, MetaPropertiesVersion::V0, "{meta}");
    assert_eq!(meta.node_id, Some(BROKER_ID));
    assert_eq!(meta.cluster_id.as_deref(), Some(cluster_id));
    let tp = TopicPartition::new(TOPIC, 0);
    let end = ZK_RECORDS as i64;
    let read = |name: &str| {
        read_offset_checkpoint(&log_dir.join(name))
            .unwrap_or_else(|e| panic!("krust-log reads Kafka's {name}: {e}"))
    };
    assert_eq!(
        read("recovery-point-offset-checkpoint").get(&tp),
        Some(&end),
        "a clean stop flushed everything"
    );
    assert_eq!(
        read("replication-offset-checkpoint").get(&tp),
        Some(&end),
        "the high watermark"
    );
    // Kafka lists a log start offset only when it is above the first segment's base.
    assert_eq!(read("log-start-offset-checkpoint").get(&tp), None);
    for name in CHECKPOINTS {
        assert!(log_dir.join(name).is_file(), "{name} written by Kafka");
    }
    // `legacy` is not compacted: Kafka's cleaner checkpoint exists but has no entry for it.
    let cleaner = read_cleaner_checkpoint(log_dir).expect("cleaner-offset-checkpoint");
    assert_eq!(cleaner.get(&tp), None, "{cleaner:?}");

    let dir = log_dir.join(format!("{TOPIC}-0"));
    let topic_id = PartitionMetadata::read(&dir)
        .expect("krust-log reads Kafka's partition.metadata")
        .expect("partition.metadata exists")
        .topic_id_base64();
    let snapshots: Vec<String> = std::fs::read_dir(&dir)
        .expect("partition dir")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    assert!(!snapshots.is_empty(), "Kafka wrote producer snapshots");
    let (log, report) = Log::open_with(&dir, LogConfig::default(), LogOpenOptions::new(end))
        .expect("krust-log opens the ZK broker's partition");
    assert_eq!(report.truncated_bytes(), 0);
    assert_eq!(log.log_end_offset(), end);
    assert!(log.segment_count() > 2, "segment.bytes=1024 rolled the log");
    assert_eq!(
        log.leader_epoch_cache().entries(),
        &[EpochEntry {
            epoch: 0,
            start_offset: 0
        }],
        "Kafka's leader-epoch-checkpoint"
    );
    let mut offset = 0;
    let mut seen = Vec::new();
    while offset < end {
        let read = log.read(offset, 64 * 1024).expect("read");
        assert!(!read.batches.is_empty(), "no batch at {offset}");
        for batch in read.batches {
            assert!(batch.is_crc_valid());
            assert_eq!(batch.base_offset(), offset);
            assert!(batch.producer_id() >= 0, "idempotent batches");
            for record in batch.records().expect("uncompressed records") {
                let value = record.value.expect("a value");
                seen.push(String::from_utf8(value.to_vec()).expect("UTF-8"));
            }
            offset = batch.next_offset();
        }
    }
    assert_eq!(seen, values(0..ZK_RECORDS));
    // The producer state the broker rebuilds from Kafka's newest snapshot and the tail.
    let state =
        ProducerStateManager::load(&log, i64::MAX / 2, 0).expect("Kafka's producer snapshots load");
    let producers: Vec<_> = state.snapshot_entries();
    assert_eq!(
        producers.len(),
        2,
        "two idempotent producers: {producers:?}"
    );
    let last_offsets: i64 = producers.iter().map(|p| p.last_offset).max().unwrap_or(-1);
    assert_eq!(last_offsets, end - 1);
    log.close().expect("close");
    assert_eq!(topic_id.len(), 22, "Kafka's base64 topic id");
}

/// The krust side of a takeover (step 3 and 4 of the module docs) of `log_dir`, left by
/// ZooKeeper-mode broker 4 of `cluster_id`, for `topics` (partition 0 each): returns the
/// running controller and broker, the broker's bootstrap address and the `directory.id` it
/// gave the v0 log dir.
struct Takeover {
    _root: tempfile::TempDir,
    _controller: Node,
    broker: krust_testkit::KrustProcess,
    bootstrap: String,
}

fn take_over(dist: &KafkaDist, log_dir: &Path, cluster_id: &str, topics: &[&str]) -> Takeover {
    let root = tempfile::tempdir().expect("tempdir");
    let ports = free_ports(2).expect("ports");
    let voters = format!("1@127.0.0.1:{}", ports[0]);
    let mut controller: Node = write_node(
        root.path(),
        1,
        &controller_properties(root.path(), 1, ports[0], &voters, ""),
        cluster_id,
    );
    controller.start();
    let aside = root.path().join("aside");
    std::fs::create_dir_all(&aside).expect("aside");
    for topic in topics {
        let partition = log_dir.join(format!("{topic}-0"));
        std::fs::rename(&partition, aside.join(format!("{topic}-0"))).expect("set partition aside");
    }
    for name in CHECKPOINTS {
        std::fs::copy(log_dir.join(name), aside.join(name)).expect("copy checkpoint aside");
    }
    let broker_dir = root.path().join(format!("node{BROKER_ID}"));
    std::fs::create_dir_all(&broker_dir).expect("broker dir");
    let bootstrap = format!("127.0.0.1:{}", ports[1]);
    std::fs::write(
        broker_dir.join("server.properties"),
        broker_properties(
            BROKER_ID,
            ports[1],
            &voters,
            &format!(
                "log.dirs={}\noffsets.topic.replication.factor=1\n",
                log_dir.display()
            ),
        ),
    )
    .expect("broker properties");
    // No `krust storage format`: the broker takes the ZK broker's v0 meta.properties.
    let mut broker = start_server_within(&broker_dir, BROKER_ID, WAIT);
    let meta = read_meta(log_dir);
    assert_eq!(
        meta.version,
        MetaPropertiesVersion::V0,
        "Kafka keeps v0: {meta}"
    );
    assert_eq!(meta.node_id, Some(BROKER_ID));
    assert_eq!(meta.cluster_id.as_deref(), Some(cluster_id));
    let directory_id = meta.directory_id.expect("a directory.id was added");

    let mut topic_ids = Vec::new();
    for topic in topics {
        let zk_topic_id = PartitionMetadata::read(&aside.join(format!("{topic}-0")))
            .expect("partition.metadata")
            .expect("exists")
            .topic_id_base64();
        tool_until(
            dist,
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--create",
                "--topic",
                topic,
                "--replica-assignment",
                "4",
            ],
            WAIT,
            |_| true,
        )
        .unwrap_or_else(|e| panic!("kafka-topics --create: {e}\n{}", broker.log_tail(40)));
        let describe = tool_until(
            dist,
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--describe",
                "--topic",
                topic,
            ],
            WAIT,
            |out| out.contains("Leader: 4"),
        )
        .unwrap_or_else(|e| panic!("kafka-topics --describe: {e}\n{}", broker.log_tail(40)));
        let topic_id = describe
            .split("TopicId:")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no TopicId in {describe}"))
            .to_owned();
        assert_ne!(topic_id, zk_topic_id, "a fresh id: no migration copied it");
        topic_ids.push(topic_id);
    }
    let status = broker.terminate(WAIT).expect("SIGTERM");
    assert!(status.success(), "controlled shutdown: {status}");

    // Put the ZK broker's partitions and checkpoints back; only the topic ids are krust's.
    for (topic, topic_id) in topics.iter().zip(&topic_ids) {
        let partition = log_dir.join(format!("{topic}-0"));
        std::fs::remove_dir_all(&partition).expect("remove krust's empty partition");
        std::fs::rename(aside.join(format!("{topic}-0")), &partition).expect("put partition back");
        std::fs::write(
            partition.join("partition.metadata"),
            format!("version: 0\ntopic_id: {topic_id}\n"),
        )
        .expect("partition.metadata");
    }
    for name in CHECKPOINTS {
        std::fs::copy(aside.join(name), log_dir.join(name)).expect("restore checkpoint");
    }

    // The takeover.
    let mark = broker.log_mark();
    broker.restart().expect("restart the krust broker");
    broker
        .wait_for_line_since(mark, support::STARTED_LINE, WAIT)
        .unwrap_or_else(|e| panic!("krust broker restart: {e}\n{}", broker.log_tail(60)));
    assert_eq!(
        read_meta(log_dir).directory_id,
        Some(directory_id),
        "the directory id stays"
    );
    Takeover {
        _root: root,
        _controller: controller,
        broker,
        bootstrap,
    }
}

/// One Kafka-and-ZooKeeper process test at a time: the machine has two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_krust_broker_takes_over_a_zookeeper_brokers_log_dir_and_serves_every_record() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dist = dist();
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let (zk_broker, cluster_id) = zk_broker_with_records(&dist, &zk);
    let log_dir = zk_broker.log_dir();
    check_zk_broker_files(&log_dir, &cluster_id);
    let Takeover {
        broker, bootstrap, ..
    } = &mut take_over(&dist, &log_dir, &cluster_id, &[TOPIC]);
    let records = consume_offsets(&dist, bootstrap, TOPIC, ZK_RECORDS);
    let got: Vec<(i64, String)> = records
        .into_iter()
        .map(|r| (r.offset, r.value.expect("value")))
        .collect();
    let want: Vec<(i64, String)> = values(0..ZK_RECORDS)
        .into_iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v))
        .collect();
    assert_eq!(got, want, "every ZK-written record at its offset");

    let input = values(ZK_RECORDS..ZK_RECORDS + KRUST_RECORDS).join("\n") + "\n";
    dist.console_produce(
        bootstrap,
        TOPIC,
        &input,
        &[],
        &[("enable.idempotence", "true"), ("acks", "all")],
    )
    .expect("console producer")
    .ok()
    .unwrap_or_else(|e| panic!("produce to krust: {e}\n{}", broker.log_tail(40)));
    let all = consume_offsets(&dist, bootstrap, TOPIC, ZK_RECORDS + KRUST_RECORDS);
    let got: Vec<(i64, String)> = all
        .into_iter()
        .map(|r| (r.offset, r.value.expect("value")))
        .collect();
    let want: Vec<(i64, String)> = values(0..ZK_RECORDS + KRUST_RECORDS)
        .into_iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v))
        .collect();
    assert_eq!(got, want, "krust appends after the ZK broker's records");
    drop(zk_broker);
}

/// Codecs of the old-format producers, in order; 30 records each (`<codec>-<i>`).
const LEGACY_CODECS: [&str; 4] = ["none", "gzip", "snappy", "lz4"];

/// Old message formats: the ZooKeeper-mode broker runs `inter.broker.protocol.version=2.8`,
/// under which Kafka 3.9 still honours a topic's `message.format.version`, and converts what
/// producers send to magic 0 (`0.9.0`) or magic 1 (`0.10.2`) as it appends: 30 plain messages
/// then 30 each in gzip, snappy and lz4 wrappers per topic; then it is SIGKILLed. Kafka's
/// `DumpLogSegments` confirms the magic; after the takeover (whose log recovery re-checks the
/// legacy entries) the krust broker serves all 120 of each topic, at their offsets, to Kafka's
/// console consumer (a Fetch v15+ answered with the entries as stored, as Kafka 3.9 does).
#[test]
fn a_krust_broker_serves_a_zookeeper_brokers_magic0_and_magic1_segments() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dist = dist();
    let zk = ZooKeeperServer::start(&dist).expect("zookeeper starts");
    let mut node = KafkaNode::builder(&dist)
        .role(KafkaRole::ZkBroker)
        .node_id(BROKER_ID)
        .zookeeper(zk.connect_string())
        .prop("inter.broker.protocol.version", "2.8")
        .start_timeout(WAIT)
        .start()
        .expect("ZooKeeper-mode broker starts");
    let topics = [
        ("old-v0", "0.9.0", "magic: 0"),
        ("old-v1", "0.10.2", "magic: 1"),
    ];
    for (topic, format, _) in topics {
        node.create_topic(
            topic,
            1,
            &[
                ("message.format.version", format),
                ("segment.bytes", "1024"),
            ],
        )
        .expect("create")
        .ok()
        .expect("kafka-topics --create");
        for codec in LEGACY_CODECS {
            let input: String = (0..30).map(|i| format!("{codec}-{i}\n")).collect();
            // Idempotence needs magic 2: these producers are the plain kind old formats had.
            let props = [
                ("compression.type", codec),
                ("batch.size", "256"),
                ("enable.idempotence", "false"),
                ("acks", "1"),
            ];
            node.console_produce(topic, &input, &[], &props)
                .expect("console producer")
                .ok()
                .expect("console producer succeeds");
        }
    }
    let cluster_id = node.cluster_id().to_owned();
    // A crash, not a clean stop: the krust broker's log recovery re-checks the legacy
    // segments past Kafka's last recovery-point checkpoint (CRC-32, sizes, offsets).
    node.kill().expect("SIGKILL");
    let log_dir = node.log_dir();
    let recovery_points = read_offset_checkpoint(&log_dir.join("recovery-point-offset-checkpoint"))
        .expect("recovery-point-offset-checkpoint");
    // Kafka checkpoints the recovery point at each roll: the active segment is past it.
    let end = (30 * LEGACY_CODECS.len()) as i64;
    for (topic, _, _) in topics {
        let tp = TopicPartition::new(topic, 0);
        assert!(
            recovery_points.get(&tp).copied().unwrap_or(0) < end,
            "{topic}: {recovery_points:?}"
        );
    }
    for (topic, _, magic) in topics {
        let dir = log_dir.join(format!("{topic}-0"));
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("partition dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .map(|p| p.display().to_string())
            .collect();
        files.sort();
        let dump = dist
            .run_tool(
                class::DUMP_LOG_SEGMENTS,
                &["--deep-iteration", "--files", &files.join(",")],
                WAIT,
            )
            .expect("DumpLogSegments")
            .ok()
            .expect("DumpLogSegments succeeds");
        let entries: Vec<&str> = dump
            .stdout
            .lines()
            .filter(|l| l.starts_with("offset:"))
            .collect();
        assert!(
            entries.len() > 30 && entries.iter().all(|l| l.contains(magic)),
            "{topic}: {}",
            dump.stdout
        );
        for codec in &LEGACY_CODECS[1..] {
            assert!(
                entries
                    .iter()
                    .any(|l| l.contains(&format!("compresscodec: {codec}"))),
                "{topic}: no {codec} wrapper"
            );
        }
        assert!(!dump.stdout.contains("isvalid: false"), "{}", dump.stdout);
    }

    let names: Vec<&str> = topics.iter().map(|(t, _, _)| *t).collect();
    let Takeover {
        broker, bootstrap, ..
    } = &mut take_over(&dist, &log_dir, &cluster_id, &names);
    for topic in names {
        let total = 30 * LEGACY_CODECS.len();
        let records = consume_offsets(&dist, bootstrap, topic, total);
        let got: Vec<(i64, String)> = records
            .into_iter()
            .map(|r| (r.offset, r.value.expect("value")))
            .collect();
        let want: Vec<(i64, String)> = (0..total)
            .map(|i| {
                let value = format!("{}-{}", LEGACY_CODECS[i / 30], i % 30);
                (i as i64, value)
            })
            .collect();
        assert_eq!(got, want, "{topic}\n{}", broker.log_tail(40));
    }
    drop(node);
}
