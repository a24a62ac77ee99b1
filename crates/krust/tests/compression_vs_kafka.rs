//! Compression as Kafka 3.9 does it (issue 14, item 5), with real processes:
//!
//! * Refusals side by side: the same Produce bytes — compressed batches whose payload holds
//!   fewer or more records than their header declares, a keyless record inside a compressed
//!   batch on a compacted topic, a payload that does not decompress — go to a Kafka 3.9 node and
//!   to `krust dev`; krust must answer each with Kafka's error code, record errors and error
//!   message, and accept what Kafka accepts.
//! * `compression.type=zstd`: confluent-kafka producers with no compression, gzip, snappy and
//!   lz4 write to a zstd topic on Kafka and on krust; Kafka's `DumpLogSegments` shows every
//!   batch on both as `compresscodec: zstd`, with every record.
//! * Compaction: confluent-kafka producers with gzip, snappy, lz4 and zstd write the same keys
//!   over and over to a compacted krust topic; once the cleaner ran, `DumpLogSegments` on
//!   krust's segment files finds exactly one record per key, the latest, in batches that kept
//!   their producer's codec.
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1 is used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    FetchRequest, MetadataRequest, ProduceRequest, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_log::{Compression, RecordBatchBuilder};
use krust_net::{ClientConfig, Connection};
use krust_testkit::{DumpLog, KafkaDist, KafkaNode, KrustProcess, PythonClients, free_port};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the cleaner may take to compact the topic.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(120);

/// One broker pair at a time: the machine has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Produces `count` records keyed `<key_prefix>key-<i % keys>` with values `<prefix>-<i>` with
/// confluent-kafka and `compression.codec` (argv: bootstrap topic codec count keys prefix
/// key_prefix).
const PRODUCE_SCRIPT: &str = r#"
import sys
from confluent_kafka import Producer
bootstrap, topic, codec, count, keys, prefix, key_prefix = sys.argv[1:8]
producer = Producer({
    "bootstrap.servers": bootstrap,
    "compression.codec": codec,
    "linger.ms": 20,
    "batch.num.messages": 25,
    "acks": "all",
})
errors = []
def delivered(err, msg):
    if err is not None:
        errors.append(str(err))
for i in range(int(count)):
    producer.produce(topic, key=f"{key_prefix}key-{i % int(keys)}", value=f"{prefix}-{i}", on_delivery=delivered)
    producer.poll(0)
left = producer.flush(60)
if left or errors:
    print(f"{left} undelivered, errors: {errors[:3]}", file=sys.stderr)
    sys.exit(1)
print(f"produced {count} with {codec}")
"#;

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)")
}

fn start_dev(data_dir: &Path, port: u16, overrides: &[&str]) -> KrustProcess {
    let mut args: Vec<String> = vec![
        "dev".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--port".into(),
        port.to_string(),
    ];
    for o in overrides {
        args.push("--override".into());
        args.push((*o).to_owned());
    }
    let mut process = KrustProcess::builder(KRUST)
        .name("krust-dev")
        .args(args.iter().map(String::as_str))
        .env("RUST_LOG", "info,krust_net=warn")
        .start()
        .expect("start krust dev");
    if let Err(e) = process.wait_for_line("krust dev ready", READY_TIMEOUT) {
        panic!("krust dev never got ready: {e}\n{}", process.log_tail(40));
    }
    process
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn wait_for_leader(conn: &Connection, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name(topic))),
            ]))
            .with_allow_auto_topic_creation(false);
        if let ResponseKind::Metadata(r) = conn.send(request, 12).await.expect("metadata") {
            let ready = r.topics.first().is_some_and(|t| {
                t.error_code == 0 && t.partitions.first().is_some_and(|p| p.leader_id.0 >= 0)
            });
            if ready {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{topic} never got a leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a broker answered to one produced partition.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    error_code: i16,
    /// `(batch_index, batch_index_error_message)` of each record error.
    record_errors: Vec<(i32, Option<String>)>,
    error_message: Option<String>,
}

/// Produce v9 (acks=1) of `records` to partition 0 of `topic`.
async fn produce(conn: &Connection, topic: &str, records: Bytes) -> Answer {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    match conn.send(request, 9).await.expect("produce answered") {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            Answer {
                error_code: p.error_code,
                record_errors: p
                    .record_errors
                    .iter()
                    .map(|e| {
                        (
                            e.batch_index,
                            e.batch_index_error_message.as_ref().map(|m| m.to_string()),
                        )
                    })
                    .collect(),
                error_message: p.error_message.as_ref().map(|m| m.to_string()),
            }
        }
        other => panic!("{other:?}"),
    }
}

/// A batch of `keys` (None = keyless), compressed with `codec`.
fn compressed(codec: Compression, keys: &[Option<&str>]) -> krust_log::RecordBatch {
    let mut b = RecordBatchBuilder::new(0).compression(codec);
    for (i, key) in keys.iter().enumerate() {
        b.append_kv(
            1_700_000_000_000 + i as i64,
            key.map(|k| Bytes::from(k.to_owned())),
            Some(Bytes::from(format!("value-{i}"))),
        );
    }
    b.build_compressed(None).expect("compress")
}

/// The payload of `batch` under a header that declares `declared` records.
fn declaring(batch: &krust_log::RecordBatch, declared: i32) -> Bytes {
    RecordBatchBuilder::new(0)
        .compression(batch.compression())
        .base_timestamp(batch.base_timestamp())
        .opaque_payload(batch.payload(), declared)
        .last_offset_delta(declared - 1)
        .max_timestamp(batch.max_timestamp())
        .build()
        .into_bytes()
}

/// The side-by-side cases: (what, topic, bytes).
fn refusal_cases() -> Vec<(&'static str, &'static str, Bytes)> {
    let three = |codec| compressed(codec, &[Some("a"), Some("b"), Some("c")]);
    let garbage = RecordBatchBuilder::new(0)
        .compression(Compression::Zstd)
        .opaque_payload(Bytes::from_static(b"this is not a zstd frame at all"), 1)
        .build()
        .into_bytes();
    vec![
        (
            "lz4 batch declaring 4 records, holding 3",
            "plain",
            declaring(&three(Compression::Lz4), 4),
        ),
        (
            "gzip batch declaring 2 records, holding 3",
            "plain",
            declaring(&three(Compression::Gzip), 2),
        ),
        (
            "snappy batch declaring 4 records, holding 3",
            "plain",
            declaring(&three(Compression::Snappy), 4),
        ),
        (
            "zstd batch declaring 2 records, holding 3",
            "plain",
            declaring(&three(Compression::Zstd), 2),
        ),
        (
            "gzip batch with a keyless record on a compacted topic",
            "compacted",
            compressed(Compression::Gzip, &[Some("a"), None, Some("c")]).into_bytes(),
        ),
        (
            "lz4 batch with two keyless records on a compacted topic",
            "compacted",
            compressed(Compression::Lz4, &[None, Some("b"), None]).into_bytes(),
        ),
        ("zstd payload that does not decompress", "plain", garbage),
        (
            "snappy batch with keys on a compacted topic (accepted)",
            "compacted",
            three(Compression::Snappy).into_bytes(),
        ),
        (
            "keyless zstd batch on a plain topic (accepted)",
            "plain",
            compressed(Compression::Zstd, &[None, None]).into_bytes(),
        ),
    ]
}

async fn answers(bootstrap: &str) -> Vec<Answer> {
    let conn = Connection::connect(bootstrap, ClientConfig::default())
        .await
        .expect("connect");
    for topic in ["plain", "compacted"] {
        wait_for_leader(&conn, topic).await;
    }
    let mut out = Vec::new();
    for (_, topic, bytes) in refusal_cases() {
        out.push(produce(&conn, topic, bytes).await);
    }
    out
}

fn create_topics(dist: &KafkaDist, bootstrap: &str) {
    dist.create_topic(bootstrap, "plain", 1, 1, &[])
        .expect("create plain");
    dist.create_topic(
        bootstrap,
        "compacted",
        1,
        1,
        &[("cleanup.policy", "compact")],
    )
    .expect("create compacted");
}

#[test]
fn compressed_batches_kafka_refuses_get_kafkas_answer_from_krust() {
    let _serial = serial();
    let dist = dist();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let expected = {
        let node = KafkaNode::builder(&dist).start().expect("Kafka starts");
        create_topics(&dist, &node.bootstrap_servers());
        let bootstrap = node.bootstrap_servers();
        runtime
            .block_on(async { tokio::time::timeout(TOOL_TIMEOUT, answers(&bootstrap)).await })
            .expect("Kafka answers in time")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().expect("free port");
    let dev = start_dev(&dir.path().join("data"), port, &[]);
    let bootstrap = format!("127.0.0.1:{port}");
    create_topics(&dist, &bootstrap);
    let actual = runtime
        .block_on(async { tokio::time::timeout(TOOL_TIMEOUT, answers(&bootstrap)).await })
        .expect("krust answers in time");
    let cases = refusal_cases();
    let mut mismatches = Vec::new();
    for (i, (what, _, _)) in cases.iter().enumerate() {
        eprintln!("{what}: Kafka {:?}", expected[i]);
        if actual[i] != expected[i] {
            mismatches.push(format!(
                "{what}:\n  Kafka {:?}\n  krust {:?}",
                expected[i], actual[i]
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "krust answered differently from Kafka 3.9:\n{}\nkrust log:\n{}",
        mismatches.join("\n"),
        dev.log_tail(30)
    );
    // The refusals are refusals (not everything accepted on both sides).
    assert!(expected.iter().filter(|a| a.error_code != 0).count() >= 7);
}

fn python() -> Option<PythonClients> {
    PythonClients::locate().expect("python venv")
}

/// `args`: record count, key count, value prefix, key prefix.
fn produce_with(
    python: &PythonClients,
    bootstrap: &str,
    topic: &str,
    codec: &str,
    args: [&str; 4],
) {
    let [count, keys, prefix, key_prefix] = args;
    let out = python
        .run_script(
            PRODUCE_SCRIPT,
            &[bootstrap, topic, codec, count, keys, prefix, key_prefix],
            PRODUCE_TIMEOUT,
        )
        .expect("producer runs");
    assert!(
        out.success(),
        "confluent-kafka producer ({codec}) failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// The `.log` files of `<topic>-0` under `log_dir`, in offset order.
fn segment_files(log_dir: &Path, topic: &str) -> Vec<PathBuf> {
    let dir = log_dir.join(format!("{topic}-0"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

fn dump(dist: &KafkaDist, files: &[PathBuf]) -> DumpLog {
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let dump = dist
        .dump_log_segments(
            &refs,
            &["--deep-iteration", "--print-data-log"],
            TOOL_TIMEOUT,
        )
        .expect("DumpLogSegments runs");
    assert!(
        dump.problems.is_empty(),
        "DumpLogSegments: {:?}",
        dump.problems
    );
    dump
}

const PRODUCER_CODECS: [&str; 4] = ["none", "gzip", "snappy", "lz4"];

/// Writes 50 records with each producer codec to a `compression.type=zstd` topic and returns
/// Kafka's dump of its segments.
fn zstd_topic_dump(
    dist: &KafkaDist,
    python: &PythonClients,
    bootstrap: &str,
    log_dir: &Path,
) -> DumpLog {
    dist.create_topic(
        bootstrap,
        "zstd-topic",
        1,
        1,
        &[("compression.type", "zstd")],
    )
    .expect("create zstd-topic");
    for codec in PRODUCER_CODECS {
        produce_with(
            python,
            bootstrap,
            "zstd-topic",
            codec,
            ["50", "50", codec, ""],
        );
    }
    dump(dist, &segment_files(log_dir, "zstd-topic"))
}

fn check_all_zstd(who: &str, dump: &DumpLog) {
    let batches: Vec<_> = dump.batches().collect();
    assert!(!batches.is_empty(), "{who}: no batches");
    for batch in &batches {
        assert_eq!(
            batch.compression, "zstd",
            "{who}: batch at {} stored as {}",
            batch.base_offset, batch.compression
        );
        assert!(
            batch.is_valid,
            "{who}: batch at {} invalid",
            batch.base_offset
        );
    }
    let mut values: Vec<String> = batches
        .iter()
        .flat_map(|b| b.records.iter().filter_map(|r| r.payload.clone()))
        .collect();
    values.sort();
    let mut expected: Vec<String> = PRODUCER_CODECS
        .iter()
        .flat_map(|c| (0..50).map(move |i| format!("{c}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(values, expected, "{who}: every record, once");
}

#[test]
fn a_zstd_topic_stores_zstd_whatever_the_producer_sent_as_on_kafka() {
    let Some(python) = python() else {
        return;
    };
    let _serial = serial();
    let dist = dist();
    {
        let node = KafkaNode::builder(&dist).start().expect("Kafka starts");
        let dump = zstd_topic_dump(&dist, &python, &node.bootstrap_servers(), &node.log_dir());
        check_all_zstd("Kafka", &dump);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = free_port().expect("free port");
    let _dev = start_dev(&data, port, &[]);
    let dump = zstd_topic_dump(
        &dist,
        &python,
        &format!("127.0.0.1:{port}"),
        &data.join("logs"),
    );
    check_all_zstd("krust", &dump);
}

/// Records krust serves from `topic`-0: key → values in offset order.
async fn fetch_all(conn: &Connection, topic: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut offset = 0;
    loop {
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(8 << 20),
                    ]),
            ]);
        let records = match conn.send(request, 12).await.expect("fetch") {
            ResponseKind::Fetch(r) => {
                let p = &r.responses[0].partitions[0];
                assert_eq!(p.error_code, 0, "fetch at {offset}");
                p.records.clone().unwrap_or_default()
            }
            other => panic!("{other:?}"),
        };
        let batches = krust_log::batch::parse_all(records, krust_log::batch::MAX_BATCH_BYTES)
            .expect("fetched batches parse");
        if batches.is_empty() {
            return out;
        }
        for batch in batches {
            for r in batch.records().expect("records decode") {
                let key = String::from_utf8_lossy(&r.key.unwrap_or_default()).into_owned();
                let value = String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned();
                out.entry(key).or_default().push(value);
            }
            offset = batch.next_offset();
        }
    }
}

#[test]
fn a_compacted_topic_fed_by_compressing_producers_keeps_one_record_per_key() {
    let Some(python) = python() else {
        return;
    };
    let _serial = serial();
    let dist = dist();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = free_port().expect("free port");
    let dev = start_dev(&data, port, &["log.cleaner.backoff.ms=200"]);
    let bootstrap = format!("127.0.0.1:{port}");
    let topic = "compacted-codecs";
    dist.create_topic(
        &bootstrap,
        topic,
        1,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "4096"),
            ("segment.ms", "1000"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .expect("create topic");
    const KEYS: usize = 20;
    let codecs = ["gzip", "snappy", "lz4", "zstd"];
    for codec in codecs {
        produce_with(&python, &bootstrap, topic, codec, ["200", "20", codec, ""]);
    }
    // Past `segment.ms`, the next append rolls the segment holding the last writes, so every
    // compressed record becomes cleanable.
    std::thread::sleep(Duration::from_millis(1_500));
    produce_with(
        &python,
        &bootstrap,
        topic,
        "none",
        ["1", "1", "sentinel", "sentinel-"],
    );

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let served = runtime.block_on(async {
        let conn = Connection::connect(&bootstrap, ClientConfig::default())
            .await
            .expect("connect");
        let deadline = Instant::now() + CLEAN_TIMEOUT;
        loop {
            let served = fetch_all(&conn, topic).await;
            if served.values().all(|v| v.len() == 1) {
                return served;
            }
            assert!(
                Instant::now() < deadline,
                "not compacted after {CLEAN_TIMEOUT:?}: {} records for {} keys\n{}",
                served.values().map(Vec::len).sum::<usize>(),
                served.len(),
                dev.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    // The latest write of key i is the zstd producer's record 180 + i; the sentinel has a key
    // of its own (it stays in the active segment, which is never cleaned).
    let mut expected: BTreeMap<String, Vec<String>> = (0..KEYS)
        .map(|i| (format!("key-{i}"), vec![format!("zstd-{}", 180 + i)]))
        .collect();
    expected.insert("sentinel-key-0".into(), vec!["sentinel-0".into()]);
    assert_eq!(
        served, expected,
        "krust serves one record per key, the latest"
    );

    // Kafka's DumpLogSegments reads krust's segment files: one record per key, and rebuilt
    // batches keep their producer's codec.
    let dump = dump(&dist, &segment_files(&data.join("logs"), topic));
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut codecs_seen = std::collections::BTreeSet::new();
    for batch in dump.batches() {
        assert!(batch.is_valid, "batch at {} invalid", batch.base_offset);
        if !batch.records.is_empty() {
            codecs_seen.insert(batch.compression.clone());
        }
        for r in &batch.records {
            per_key
                .entry(r.key.clone().unwrap_or_default())
                .or_default()
                .push(r.payload.clone().unwrap_or_default());
        }
    }
    assert_eq!(per_key, expected, "DumpLogSegments: one record per key");
    assert!(
        codecs_seen.contains("zstd"),
        "the surviving zstd records are still zstd: {codecs_seen:?}"
    );
}
