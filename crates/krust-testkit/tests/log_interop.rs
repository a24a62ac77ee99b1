//! Log interop between krust-log and Apache Kafka 3.9, in both directions.
//!
//! * krust → Kafka: a partition written by krust-log's [`Log`] (several segments, one record /
//!   many records, null and non-null keys, values and header values, a transaction with its
//!   COMMIT marker, an empty compacted-away batch, batches compressed by krust-log with gzip,
//!   snappy, lz4 and zstd, leader epochs 0 → 3):
//!   - Kafka's `DumpLogSegments --deep-iteration --print-data-log` must report every batch valid
//!     with the offsets, counts, CRCs, sizes and positions we wrote, every record with its
//!     offset, timestamp, key, payload and header keys, and no index problem;
//!     `--index-sanity-check` must pass for every `.index` and `.timeindex`;
//!   - a real Kafka 3.9 broker must recover that partition (unclean start: every batch is
//!     re-validated) and serve every record to Kafka's console consumer.
//! * Kafka → krust: a real Kafka 3.9 node writes partitions (several segments, keys, headers,
//!   null keys/values, and batches compressed by Kafka's producer with gzip, snappy, lz4 and
//!   zstd, every record of which krust-log decompresses and reads back);
//!   after a clean stop (SIGTERM) and after a crash (SIGKILL)
//!   krust-log opens them, reads every record back, and reads Kafka's indexes, leader epoch
//!   checkpoint, `partition.metadata` and `recovery-point-offset-checkpoint`. A copy of the
//!   crashed partition with a torn last batch is cut back to the last whole batch by krust-log's
//!   recovery, and Kafka restarts on the directory krust-log recovered and serves every record.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use krust_log::checkpoint::read_offset_checkpoint;
use krust_log::{
    Compression, EpochEntry, Header, Log, LogConfig, LogOpenOptions, PartitionMetadata, Record,
    RecordBatch, RecordBatchBuilder, RecoveryReport, TimestampType, TopicPartition,
};
use krust_testkit::{DumpLog, DumpedRecord, KafkaDist, KafkaNode, class};

/// The codecs besides gzip (which has a topic of its own with more checks).
const OTHER_CODECS: [&str; 3] = ["snappy", "lz4", "zstd"];
/// Bytes asked for per `Log::read` when reading a whole partition back.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// A fixed base timestamp so the dump can be compared exactly.
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)")
}

/// A record as the test means it: absolute offset and timestamp, optional key/value, headers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expected {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Expected {
    fn record(&self, base_offset: i64, base_timestamp: i64) -> Record {
        Record {
            offset_delta: i32::try_from(self.offset - base_offset).expect("offset delta fits i32"),
            timestamp_delta: self.timestamp - base_timestamp,
            key: self.key.clone().map(Bytes::from),
            value: self.value.clone().map(Bytes::from),
            headers: self
                .headers
                .iter()
                .map(|(key, value)| Header {
                    key: key.clone(),
                    value: value.clone().map(Bytes::from),
                })
                .collect(),
        }
    }
}

fn text(bytes: &Option<Vec<u8>>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8(b.clone()).expect("test data is UTF-8"))
}

/// What a test batch holds and how it is flagged.
struct BatchSpec {
    base_offset: i64,
    leader_epoch: i32,
    records: Vec<Expected>,
    compression: Compression,
    /// `(producer id, producer epoch, base sequence, transactional)`.
    producer: Option<(i64, i16, i32, bool)>,
    /// A COMMIT marker with this coordinator epoch (the batch is a control batch).
    commit_marker: Option<i32>,
    /// An empty batch covering this many offsets, as log compaction leaves behind.
    empty_covering: Option<i32>,
}

impl BatchSpec {
    fn data(base_offset: i64, leader_epoch: i32, records: Vec<Expected>) -> Self {
        BatchSpec {
            base_offset,
            leader_epoch,
            records,
            compression: Compression::None,
            producer: None,
            commit_marker: None,
            empty_covering: None,
        }
    }

    fn build(&self) -> RecordBatch {
        let base_timestamp = self.records.first().map_or(BASE_TIMESTAMP, |r| r.timestamp);
        let mut builder = RecordBatchBuilder::new(self.base_offset)
            .partition_leader_epoch(self.leader_epoch)
            .base_timestamp(base_timestamp)
            .timestamp_type(TimestampType::CreateTime);
        if let Some((id, epoch, sequence, transactional)) = self.producer {
            builder = builder
                .producer(id, epoch, sequence)
                .transactional(transactional);
        }
        if let Some(coordinator_epoch) = self.commit_marker {
            // Control record: key = version 0 + type 1 (COMMIT); value = version 0 +
            // coordinator epoch (Kafka's EndTransactionMarker).
            let key = [0u8, 0, 0, 1];
            let mut value = vec![0u8, 0];
            value.extend_from_slice(&coordinator_epoch.to_be_bytes());
            let mut builder = builder.control(true);
            builder.append(Record {
                offset_delta: 0,
                timestamp_delta: 0,
                key: Some(Bytes::copy_from_slice(&key)),
                value: Some(Bytes::from(value)),
                headers: Vec::new(),
            });
            return builder.build();
        }
        if let Some(covered) = self.empty_covering {
            return builder
                .opaque_payload(Bytes::new(), 0)
                .last_offset_delta(covered - 1)
                .max_timestamp(base_timestamp)
                .build();
        }
        for record in &self.records {
            builder.append(record.record(self.base_offset, base_timestamp));
        }
        builder
            .compression(self.compression)
            .build_compressed(None)
            .expect("krust-log compresses")
    }
}

/// The batches of the krust → Kafka test: one record; many records with every mix of null and
/// non-null keys, values and header values; a transaction with its COMMIT marker; an empty
/// (compacted-away) batch; gzip batches; leader epochs 0 → 3.
fn krust_batches() -> Vec<BatchSpec> {
    let mut next = OffsetCounter(0);
    let mut batches = Vec::new();
    batches.push(BatchSpec::data(
        0,
        0,
        vec![next.record(Some("k0"), Some("only record"), vec![])],
    ));
    let many: Vec<Expected> = (1..=30)
        .map(|i| {
            let key = format!("key-{i}");
            let value = format!("value-{i}-{}", "x".repeat(i * 7));
            let headers = match i % 3 {
                0 => vec![],
                1 => vec![("trace", Some("abc"))],
                _ => vec![("h1", Some("v1")), ("nullable", None)],
            };
            next.record(
                (i % 4 != 0).then_some(key.as_str()),
                (i % 5 != 0).then_some(value.as_str()),
                headers,
            )
        })
        .collect();
    batches.push(BatchSpec::data(1, 0, many));
    // A transaction: three records from producer 4000, then its COMMIT marker.
    let txn_base = next.0;
    let txn: Vec<Expected> = (0..3)
        .map(|i| next.record(Some(&format!("txn-{i}")), Some("in a transaction"), vec![]))
        .collect();
    batches.push(BatchSpec {
        producer: Some((4000, 0, 0, true)),
        ..BatchSpec::data(txn_base, 1, txn)
    });
    batches.push(BatchSpec {
        producer: Some((4000, 0, -1, true)),
        commit_marker: Some(7),
        ..BatchSpec::data(next.skip(1), 1, vec![])
    });
    // An empty batch covering two offsets (its records were compacted away).
    batches.push(BatchSpec {
        empty_covering: Some(2),
        ..BatchSpec::data(next.skip(2), 2, vec![])
    });
    for (chunk, codec) in [
        Compression::Gzip,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let base = next.0;
        let name = codec_name(codec);
        let records: Vec<Expected> = (0..10)
            .map(|i| {
                let value = format!("{name} {chunk}/{i} {}", "compressible ".repeat(10));
                next.record(
                    Some(&format!("{name}-{chunk}-{i}")),
                    Some(&value),
                    vec![("codec", Some(name))],
                )
            })
            .collect();
        batches.push(BatchSpec {
            compression: codec,
            ..BatchSpec::data(base, 3, records)
        });
    }
    let last_base = next.0;
    batches.push(BatchSpec::data(
        last_base,
        3,
        vec![next.record(None, None, vec![])],
    ));
    batches
}

/// `DumpLogSegments`' name of a codec (`compresscodec: …`).
fn codec_name(codec: Compression) -> &'static str {
    match codec {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// Hands out consecutive offsets to test records.
struct OffsetCounter(i64);

impl OffsetCounter {
    /// Skips `n` offsets (for markers and compacted batches); returns the first skipped.
    fn skip(&mut self, n: i64) -> i64 {
        let first = self.0;
        self.0 += n;
        first
    }

    fn record(
        &mut self,
        key: Option<&str>,
        value: Option<&str>,
        headers: Vec<(&str, Option<&str>)>,
    ) -> Expected {
        let offset = self.skip(1);
        Expected {
            offset,
            timestamp: BASE_TIMESTAMP + offset * 3,
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.map(|v| v.as_bytes().to_vec())))
                .collect(),
        }
    }
}

/// The krust-log configuration of the krust → Kafka tests: 1 KiB segments and an index entry
/// every 128 bytes, so a few dozen batches make several segments with several index entries.
fn small_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

/// Writes [`krust_batches`] into a fresh partition directory with krust-log — data batches on
/// the leader path (offsets and epoch assigned by the log), the COMMIT marker and the empty
/// batch on the follower path (as replicated) — and closes the log cleanly. Returns the specs
/// and the batches as written.
fn write_with_krust_log(dir: &Path) -> (Vec<BatchSpec>, Vec<RecordBatch>) {
    let specs = krust_batches();
    let mut log = Log::open(dir, small_log_config(), 0).expect("open a new log");
    let mut written = Vec::new();
    for spec in &specs {
        let batch = spec.build();
        let info = if spec.commit_marker.is_some() || spec.empty_covering.is_some() {
            log.append_as_follower(vec![batch], BASE_TIMESTAMP)
                .expect("follower append")
        } else {
            log.append_as_leader(vec![batch], spec.leader_epoch, BASE_TIMESTAMP)
                .expect("leader append")
        };
        assert_eq!(info.batches.len(), 1);
        assert_eq!(
            info.first_offset, spec.base_offset,
            "the log assigned the offsets we expect"
        );
        written.extend(info.batches);
    }
    assert!(
        log.segment_count() >= 3,
        "the data must span several segments, got {}",
        log.segment_count()
    );
    log.close().expect("clean close");
    (specs, written)
}

/// The segment and index files of a partition directory, by base offset then suffix.
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("partition dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "log" || e == "index" || e == "timeindex")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn kafka_dump_log_reads_every_batch_and_index_written_by_krust_log() {
    let dist = dist();
    let dir = tempfile::tempdir().expect("tempdir");
    let partition = dir.path().join("krust-interop-0");
    let (specs, batches) = write_with_krust_log(&partition);
    let files = segment_files(&partition);
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();

    let dump = dist
        .dump_log_segments(
            &paths,
            &["--deep-iteration", "--print-data-log"],
            Duration::from_secs(120),
        )
        .expect("DumpLogSegments runs");
    check_dump_matches(&dump, &specs, &batches);

    // Kafka checks every index entry against the log (offset → batch whose last offset it is;
    // timestamp → batch max timestamp, increasing). The only complaint allowed: the offsets
    // skipped by the empty (compacted) batch.
    let empty = specs
        .iter()
        .find(|s| s.empty_covering.is_some())
        .expect("an empty batch");
    let before = empty.base_offset - 1;
    let after = empty.base_offset + i64::from(empty.empty_covering.unwrap_or(0));
    let expected_problem = format!("  {before} is followed by {after}");
    assert!(
        dump.problems
            .iter()
            .all(|p| p.starts_with("Non-consecutive offsets in ") || *p == expected_problem),
        "unexpected problems reported by Kafka: {:#?}",
        dump.problems
    );
    let index_entries: usize = dump.files.iter().map(|f| f.index_entries.len()).sum();
    let time_index_entries: usize = dump.files.iter().map(|f| f.time_index_entries.len()).sum();
    assert!(index_entries > 0, "krust-log wrote no offset index entries");
    assert!(
        time_index_entries > 0,
        "krust-log wrote no time index entries"
    );

    // The check Kafka runs on every index when it loads a log.
    let indexes: Vec<&Path> = paths
        .iter()
        .copied()
        .filter(|p| p.extension().is_some_and(|e| e != "log"))
        .collect();
    let sanity = dist
        .dump_log_segments(
            &indexes,
            &["--index-sanity-check"],
            Duration::from_secs(120),
        )
        .expect("index sanity check runs");
    for file in &sanity.files {
        assert!(
            file.passed_sanity_check || file.empty,
            "{}: Kafka's sanity check failed: {:?} {:?}",
            file.path,
            file.other_lines,
            sanity.problems
        );
    }
    assert_eq!(sanity.files.len(), indexes.len());
}

/// Kafka as the reader of last resort: a topic is created in Kafka, its (empty) partition files
/// are replaced by krust-log's, the clean-shutdown marker is removed so Kafka's log loader
/// re-validates every batch and rebuilds producer state, and Kafka's console consumer must then
/// get every data record we wrote.
#[test]
fn kafka_recovers_and_serves_a_partition_written_by_krust_log() {
    let dist = dist();
    let mut node = KafkaNode::builder(&dist).start().expect("kafka starts");
    node.create_topic("from-krust", 1, &[])
        .expect("create topic");
    node.terminate(Duration::from_secs(60))
        .expect("clean shutdown");

    let krust_dir = tempfile::tempdir().expect("tempdir");
    let (specs, _) = write_with_krust_log(&krust_dir.path().join("from-krust-0"));
    let partition = node.partition_dir("from-krust", 0);
    for entry in std::fs::read_dir(&partition)
        .expect("kafka partition")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Keep partition.metadata (the topic id Kafka knows); replace data and epochs.
        if name != "partition.metadata" {
            std::fs::remove_file(entry.path()).expect("remove Kafka's file");
        }
    }
    for entry in std::fs::read_dir(krust_dir.path().join("from-krust-0"))
        .expect("krust partition")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "partition.metadata" {
            std::fs::copy(entry.path(), partition.join(&name)).expect("copy krust's file");
        }
    }
    let marker = node.log_dir().join(".kafka_cleanshutdown");
    if marker.exists() {
        std::fs::remove_file(&marker).expect("remove the clean shutdown marker");
    }
    node.start().expect("kafka starts on krust's partition");

    let expected: Vec<&Expected> = specs
        .iter()
        .filter(|s| s.commit_marker.is_none())
        .flat_map(|s| s.records.iter())
        .collect();
    let consumed = node
        .console_consume(
            "from-krust",
            expected.len(),
            &[("print.key", "true"), ("print.offset", "true")],
            Duration::from_secs(30),
        )
        .expect("Kafka serves every record krust wrote");
    let lines: Vec<String> = consumed.stdout.lines().map(str::to_owned).collect();
    let wanted: Vec<String> = expected
        .iter()
        .map(|r| {
            format!(
                "Offset:{}\t{}\t{}",
                r.offset,
                text(&r.key).unwrap_or_else(|| "null".to_owned()),
                text(&r.value).unwrap_or_else(|| "null".to_owned())
            )
        })
        .collect();
    assert_eq!(lines, wanted, "records as Kafka served them");
    let kafka_log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
    assert!(
        !kafka_log.contains("CorruptRecordException")
            && !kafka_log.contains("Found invalid messages"),
        "Kafka found bad batches in krust's log"
    );
}

/// Asserts that Kafka's dump shows exactly the batches and records we wrote.
fn check_dump_matches(dump: &DumpLog, specs: &[BatchSpec], batches: &[RecordBatch]) {
    let dumped: Vec<_> = dump.batches().collect();
    assert_eq!(
        dumped.len(),
        batches.len(),
        "Kafka saw a different number of batches"
    );
    for file in &dump.files {
        assert_eq!(
            file.invalid_trailing_bytes, None,
            "{}: Kafka found trailing junk",
            file.path
        );
        assert!(
            file.other_lines.is_empty(),
            "{}: unexpected lines {:?}",
            file.path,
            file.other_lines
        );
        let base: i64 = Path::new(&file.path)
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .expect("segment name is an offset");
        if !file.path.ends_with(".log") {
            continue;
        }
        assert_eq!(file.log_start_offset, Some(base));
        let mut position = 0;
        for batch in &file.batches {
            assert_eq!(
                batch.position, position,
                "{}: batch positions are cumulative",
                file.path
            );
            position += batch.size;
        }
    }
    for ((spec, batch), seen) in specs.iter().zip(batches).zip(dumped) {
        let what = format!("batch at offset {}", spec.base_offset);
        assert!(seen.is_valid, "{what}: Kafka says the CRC is invalid");
        assert_eq!(seen.crc, u64::from(batch.crc()), "{what}: crc");
        assert_eq!(seen.base_offset, batch.base_offset(), "{what}: baseOffset");
        assert_eq!(seen.last_offset, batch.last_offset(), "{what}: lastOffset");
        assert_eq!(
            seen.count,
            Some(i64::from(batch.record_count())),
            "{what}: count"
        );
        assert_eq!(seen.size, batch.size_in_bytes() as u64, "{what}: size");
        assert_eq!(seen.magic, 2, "{what}: magic");
        assert_eq!(
            seen.partition_leader_epoch,
            i64::from(spec.leader_epoch),
            "{what}: leader epoch"
        );
        assert_eq!(
            seen.is_control,
            spec.commit_marker.is_some(),
            "{what}: isControl"
        );
        assert_eq!(
            seen.is_transactional,
            spec.producer.is_some_and(|p| p.3),
            "{what}: isTransactional"
        );
        assert_eq!(seen.producer_id, batch.producer_id(), "{what}: producerId");
        assert_eq!(
            seen.producer_epoch,
            i64::from(batch.producer_epoch()),
            "{what}: producerEpoch"
        );
        assert_eq!(
            seen.base_sequence,
            i64::from(batch.base_sequence()),
            "{what}: baseSequence"
        );
        assert_eq!(seen.timestamp_type, "CreateTime", "{what}: timestamp type");
        assert_eq!(
            seen.max_timestamp,
            batch.max_timestamp(),
            "{what}: maxTimestamp"
        );
        assert_eq!(
            seen.compression,
            codec_name(spec.compression),
            "{what}: codec"
        );
        if let Some(coordinator_epoch) = spec.commit_marker {
            assert_eq!(seen.records.len(), 1, "{what}: one marker record");
            assert_eq!(
                seen.records[0].control.as_deref(),
                Some(
                    format!("endTxnMarker: COMMIT coordinatorEpoch: {coordinator_epoch}").as_str()
                ),
                "{what}: marker"
            );
            continue;
        }
        let expected: Vec<DumpedRecord> = spec
            .records
            .iter()
            .map(|r| DumpedRecord {
                offset: r.offset,
                timestamp_type: "CreateTime".to_owned(),
                timestamp: r.timestamp,
                key_size: r.key.as_ref().map_or(-1, |k| k.len() as i64),
                value_size: r.value.as_ref().map_or(-1, |v| v.len() as i64),
                sequence: spec.producer.map_or(-1, |(_, _, base_sequence, _)| {
                    i64::from(base_sequence) + (r.offset - spec.base_offset)
                }),
                header_keys: r.headers.iter().map(|(k, _)| k.clone()).collect(),
                control: None,
                key: text(&r.key),
                payload: text(&r.value),
            })
            .collect();
        assert_eq!(
            seen.records, expected,
            "{what}: records as Kafka decoded them"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Kafka → krust
// ---------------------------------------------------------------------------------------------

/// One line for Kafka's console producer with `parse.headers=true`, `parse.key=true`,
/// `null.marker=NULL`: `<headers>\t<key>\t<value>`.
fn console_line(record: &Expected) -> String {
    let headers = if record.headers.is_empty() {
        "NULL".to_owned()
    } else {
        record
            .headers
            .iter()
            .map(|(k, v)| format!("{k}:{}", text(v).unwrap_or_else(|| "NULL".to_owned())))
            .collect::<Vec<_>>()
            .join(",")
    };
    let key = text(&record.key).unwrap_or_else(|| "NULL".to_owned());
    let value = text(&record.value).unwrap_or_else(|| "NULL".to_owned());
    format!("{headers}\t{key}\t{value}")
}

/// `count` records for `topic` (offsets from 0) with every mix of null keys, values and
/// header values. Timestamps are set by the producer and not compared.
fn produced_records(topic: &str, count: i64) -> Vec<Expected> {
    (0..count)
        .map(|i| Expected {
            offset: i,
            timestamp: 0,
            key: (i % 7 != 3).then(|| format!("{topic}-key-{i}").into_bytes()),
            value: (i % 11 != 5).then(|| {
                format!("{topic} value {i} {}", "p".repeat((i % 13) as usize * 9)).into_bytes()
            }),
            headers: match i % 4 {
                0 => vec![],
                1 => vec![("h".to_owned(), Some(b"1".to_vec()))],
                2 => vec![
                    ("a".to_owned(), Some(format!("{i}").into_bytes())),
                    ("b".to_owned(), None),
                ],
                _ => vec![("only-null".to_owned(), None)],
            },
        })
        .collect()
}

fn produce(
    node: &KafkaNode,
    topic: &str,
    records: &[Expected],
    producer_properties: &[(&str, &str)],
) {
    let input: String = records.iter().map(|r| console_line(r) + "\n").collect();
    let mut props = vec![("batch.size", "600"), ("linger.ms", "50")];
    props.extend_from_slice(producer_properties);
    node.console_produce(
        topic,
        &input,
        &[
            ("parse.key", "true"),
            ("parse.headers", "true"),
            ("null.marker", "NULL"),
        ],
        &props,
    )
    .expect("console producer");
}

/// A record as krust-log read it back.
#[derive(Debug)]
struct ReadBack {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Opens a Kafka partition directory with krust-log (recovery point as given, e.g. from Kafka's
/// `recovery-point-offset-checkpoint`) and reads every batch from the log start to the log end
/// offset. Compressed batches are gunzipped here (krust-log stores them as opaque payloads) and
/// their records decoded by krust-log.
fn read_partition(
    dir: &Path,
    recovery_point: i64,
) -> (Log, RecoveryReport, Vec<ReadBack>, Vec<RecordBatch>) {
    let (log, report) = Log::open_with(
        dir,
        LogConfig::default(),
        LogOpenOptions::new(recovery_point),
    )
    .expect("krust-log opens Kafka's partition");
    let mut records = Vec::new();
    let mut batches = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, READ_CHUNK_BYTES).expect("read");
        assert!(!read.batches.is_empty(), "no batch at offset {offset}");
        for batch in read.batches {
            assert!(
                batch.is_crc_valid(),
                "batch {} has a bad CRC",
                batch.base_offset()
            );
            assert_eq!(batch.base_offset(), offset, "offsets are contiguous");
            offset = batch.next_offset();
            let decoded = batch.records().expect("decode records");
            for record in decoded {
                records.push(ReadBack {
                    offset: batch.base_offset() + i64::from(record.offset_delta),
                    timestamp: batch.base_timestamp() + record.timestamp_delta,
                    key: record.key.map(|k| k.to_vec()),
                    value: record.value.map(|v| v.to_vec()),
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value.map(|v| v.to_vec())))
                        .collect(),
                });
            }
            batches.push(batch);
        }
    }
    (log, report, records, batches)
}

/// What Kafka's `recovery-point-offset-checkpoint` says for `topic`-0 (read by krust-log).
fn kafka_recovery_point(node: &KafkaNode, topic: &str) -> i64 {
    let checkpoint =
        read_offset_checkpoint(&node.log_dir().join("recovery-point-offset-checkpoint"))
            .expect("krust-log reads Kafka's recovery-point-offset-checkpoint");
    checkpoint
        .get(&TopicPartition::new(topic, 0))
        .copied()
        .unwrap_or(0)
}

/// The topic id Kafka reports for `topic` (`kafka-topics.sh --describe`).
fn kafka_topic_id(node: &KafkaNode, topic: &str) -> String {
    let out = node
        .dist()
        .run_tool(
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &node.bootstrap_servers(),
                "--describe",
                "--topic",
                topic,
            ],
            Duration::from_secs(60),
        )
        .expect("describe runs")
        .ok()
        .expect("describe succeeds");
    out.stdout
        .split_whitespace()
        .skip_while(|t| *t != "TopicId:")
        .nth(1)
        .expect("TopicId in the describe output")
        .to_owned()
}

/// Checks that krust-log took Kafka's index files as they are: every segment below the recovery
/// point was loaded without being recovered, and every offset-index entry points at the batch
/// whose last offset it names.
fn check_kafka_indexes_accepted(
    topic: &str,
    log: &Log,
    report: &RecoveryReport,
    recovery_point: i64,
) {
    let rebuilt: Vec<i64> = report
        .recovered_segments
        .iter()
        .map(|(base, _)| *base)
        .collect();
    let last_base = log.segments().last().map_or(0, |s| s.base_offset());
    assert!(
        rebuilt
            .iter()
            .all(|base| *base == last_base || *base >= recovery_point),
        "{topic}: krust-log re-checked segments below the recovery point {recovery_point}: {rebuilt:?}"
    );
    assert_eq!(
        report.truncated_bytes(),
        0,
        "{topic}: nothing to cut after a clean stop"
    );
    let mut entries = 0;
    for segment in log.segments() {
        for entry in segment.offset_index().entries() {
            entries += 1;
            let read = log.read(entry.offset, 1).expect("read at an index entry");
            let batch = read.batches.first().expect("a batch");
            assert_eq!(
                batch.last_offset(),
                entry.offset,
                "{topic}: index entry names a batch's last offset"
            );
        }
        let times = segment.time_index().entries();
        assert!(
            times.windows(2).all(|w| w[0].timestamp < w[1].timestamp),
            "{topic}: time index timestamps increase"
        );
    }
    assert!(
        entries > 0,
        "{topic}: Kafka wrote index entries (index.interval.bytes=128)"
    );
}

fn check_read_back(topic: &str, read: &[ReadBack], expected: &[Expected], window: (i64, i64)) {
    assert_eq!(read.len(), expected.len(), "{topic}: record count");
    for (got, want) in read.iter().zip(expected) {
        assert_eq!(got.offset, want.offset, "{topic}: offset");
        assert_eq!(got.key, want.key, "{topic}: key at offset {}", want.offset);
        assert_eq!(
            got.value, want.value,
            "{topic}: value at offset {}",
            want.offset
        );
        assert_eq!(
            got.headers, want.headers,
            "{topic}: headers at offset {}",
            want.offset
        );
        assert!(
            (window.0..=window.1).contains(&got.timestamp),
            "{topic}: timestamp {} at offset {} outside the produce window {window:?}",
            got.timestamp,
            want.offset
        );
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One Kafka node for both phases (a JVM start is the expensive part):
/// 1. clean stop: topics `plain` (uncompressed) and `gzipped` with 1 KiB segments, SIGTERM,
///    then krust-log opens both partitions with Kafka's recovery point, takes Kafka's indexes
///    as they are, reads every record, the leader epoch cache and `partition.metadata`;
/// 2. crash: restart, produce to `crashed`, SIGKILL, then krust-log recovers it (the segment is
///    left as the page cache had it, the index files are still pre-allocated) and reads every
///    acknowledged record.
#[test]
fn krust_log_reads_partitions_written_by_kafka_after_clean_stop_and_crash() {
    let dist = dist();
    let mut node = KafkaNode::builder(&dist).start().expect("kafka starts");
    let small_segments = [("segment.bytes", "1024"), ("index.interval.bytes", "128")];

    let start = now_ms();
    node.create_topic("plain", 1, &small_segments)
        .expect("create plain");
    node.create_topic("gzipped", 1, &small_segments)
        .expect("create gzipped");
    let topic_id = kafka_topic_id(&node, "plain");
    let plain = produced_records("plain", 120);
    let gzipped = produced_records("gzipped", 80);
    produce(&node, "plain", &plain, &[]);
    produce(&node, "gzipped", &gzipped, &[("compression.type", "gzip")]);
    let mut other_codecs = Vec::new();
    for codec in OTHER_CODECS {
        node.create_topic(codec, 1, &small_segments)
            .expect("create codec topic");
        let records = produced_records(codec, 40);
        produce(&node, codec, &records, &[("compression.type", codec)]);
        other_codecs.push(records);
    }
    node.terminate(Duration::from_secs(60))
        .expect("clean shutdown");
    let window = (start, now_ms());

    let recovery_point = kafka_recovery_point(&node, "plain");
    assert_eq!(
        recovery_point, 120,
        "Kafka flushed everything on a clean stop"
    );
    let high_watermarks =
        read_offset_checkpoint(&node.log_dir().join("replication-offset-checkpoint"))
            .expect("krust-log reads Kafka's replication-offset-checkpoint");
    assert_eq!(
        high_watermarks.get(&TopicPartition::new("plain", 0)),
        Some(&120),
        "high watermark of plain-0: {high_watermarks:?}"
    );
    read_offset_checkpoint(&node.log_dir().join("log-start-offset-checkpoint"))
        .expect("krust-log reads Kafka's log-start-offset-checkpoint");
    let (log, report, read, batches) =
        read_partition(&node.partition_dir("plain", 0), recovery_point);
    check_read_back("plain", &read, &plain, window);
    assert!(batches.len() > 1, "plain: expected several batches");
    assert!(batches.iter().all(|b| b.compression() == Compression::None));
    assert!(
        log.segment_count() > 2,
        "plain: expected the log to roll, got {} segments",
        log.segment_count()
    );
    check_kafka_indexes_accepted("plain", &log, &report, recovery_point);
    assert_eq!(
        log.leader_epoch_cache().entries(),
        &[EpochEntry {
            epoch: 0,
            start_offset: 0
        }],
        "Kafka's leader-epoch-checkpoint"
    );
    let metadata = PartitionMetadata::read(&node.partition_dir("plain", 0))
        .expect("krust-log reads Kafka's partition.metadata")
        .expect("partition.metadata exists");
    assert_eq!(metadata.topic_id_base64(), topic_id);
    // A timestamp lookup through Kafka's time index finds the first record at or after it.
    let middle = &read[read.len() / 2];
    let found = log
        .offset_for_timestamp(middle.timestamp)
        .expect("timestamp lookup")
        .expect("a record at or after it");
    let first_at_or_after = read
        .iter()
        .find(|r| r.timestamp >= middle.timestamp)
        .expect("exists");
    assert_eq!(
        (found.offset, found.timestamp),
        (first_at_or_after.offset, first_at_or_after.timestamp)
    );
    drop(log);

    let recovery_point = kafka_recovery_point(&node, "gzipped");
    let (log, report, read, batches) =
        read_partition(&node.partition_dir("gzipped", 0), recovery_point);
    check_read_back("gzipped", &read, &gzipped, window);
    assert!(batches.iter().all(|b| b.compression() == Compression::Gzip));
    // The idempotent producer (default in 3.9) numbers its batches.
    assert!(
        batches
            .iter()
            .all(|b| b.producer_id() >= 0 && b.base_sequence() >= 0)
    );
    assert_eq!(report.truncated_bytes(), 0);
    drop(log);

    for (codec, expected) in OTHER_CODECS.into_iter().zip(&other_codecs) {
        let (log, report, read, batches) = read_partition(
            &node.partition_dir(codec, 0),
            kafka_recovery_point(&node, codec),
        );
        assert_eq!(report.truncated_bytes(), 0, "{codec}");
        assert_eq!(log.log_end_offset(), 40, "{codec}");
        assert!(
            batches.iter().all(|b| codec_name(b.compression()) == codec),
            "{codec}: codec attribute"
        );
        check_read_back(codec, &read, expected, window);
    }

    node.start().expect("kafka restarts");
    let start = now_ms();
    node.create_topic("crashed", 1, &small_segments)
        .expect("create crashed");
    let crashed = produced_records("crashed", 60);
    produce(&node, "crashed", &crashed, &[]);
    node.kill().expect("SIGKILL");
    let window = (start, now_ms());
    // Acknowledged (acks=all) records were written to the segment before the ack, and a process
    // crash does not lose the page cache: all of them must be there. The recovery point Kafka
    // checkpointed (if any) is stale, so krust-log re-checks the tail.
    let recovery_point = kafka_recovery_point(&node, "crashed");
    // A copy to tear below; the original stays as the crash left it.
    let torn_dir = tempfile::tempdir().expect("tempdir");
    let torn = torn_dir.path().join("crashed-0");
    std::fs::create_dir_all(&torn).expect("torn dir");
    for entry in std::fs::read_dir(node.partition_dir("crashed", 0))
        .expect("partition")
        .flatten()
    {
        std::fs::copy(entry.path(), torn.join(entry.file_name())).expect("copy");
    }
    let (log, _, read, batches) = read_partition(&node.partition_dir("crashed", 0), recovery_point);
    check_read_back("crashed", &read, &crashed, window);
    assert_eq!(log.log_end_offset(), 60);
    drop(log);

    // A torn write (what a power cut could leave): the last batch cut in half, then junk.
    // krust-log must cut the tail back to the last whole batch and keep everything before it.
    let last = batches.last().expect("batches");
    let active = segment_files(&torn)
        .into_iter()
        .rfind(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("active segment");
    let mut bytes = std::fs::read(&active).expect("read active segment");
    let cut = bytes.len() - last.size_in_bytes() / 2;
    bytes.truncate(cut);
    bytes.extend_from_slice(&[0xAB; 37]);
    std::fs::write(&active, bytes).expect("tear the tail");
    let (log, report, read, _) = read_partition(&torn, 0);
    assert_eq!(
        log.log_end_offset(),
        last.base_offset(),
        "the torn batch is gone"
    );
    assert!(
        report.truncated_bytes() > 0,
        "recovery cut the tail: {report:?}"
    );
    let kept = usize::try_from(last.base_offset()).expect("small offset");
    check_read_back("torn", &read, &crashed[..kept], window);
    drop(log);

    // Kafka restarts on the directory krust-log recovered (and re-indexed) after the crash and
    // still serves every record.
    node.start().expect("kafka restarts after the crash");
    let consumed = node
        .console_consume(
            "crashed",
            crashed.len(),
            &[("print.offset", "true")],
            Duration::from_secs(30),
        )
        .expect("Kafka serves every record after krust-log's recovery");
    assert_eq!(consumed.stdout.lines().count(), crashed.len());
}
