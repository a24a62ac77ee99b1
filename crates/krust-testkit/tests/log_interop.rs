//! Log interop between krust-log and Apache Kafka 3.9, in both directions.
//!
//! * krust → Kafka: segments written from krust-log's batch codec are read by Kafka's own
//!   `DumpLogSegments --deep-iteration --print-data-log`; every batch must be reported valid with
//!   the offsets, counts, CRCs, sizes and positions we wrote, and every record with its offset,
//!   timestamp, key, payload and header keys.
//! * Kafka → krust: a real Kafka 3.9 node writes a partition (several segments, keys, headers,
//!   null keys/values, gzip batches); after a clean stop (SIGTERM) and after a crash (SIGKILL)
//!   krust-log reads every batch back, checks every CRC and gets every record we produced.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use krust_log::{
    BatchReader, Compression, Header, Record, RecordBatch, RecordBatchBuilder, TimestampType,
};
use krust_testkit::{DumpLog, DumpedRecord, KafkaDist, KafkaNode};

/// Upper bound of a batch read from disk in these tests (Kafka's default `message.max.bytes` is
/// ~1 MiB; nothing here comes close).
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
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
        let plain = builder.build();
        if self.compression == Compression::None {
            return plain;
        }
        assert_eq!(
            self.compression,
            Compression::Gzip,
            "the tests compress with gzip only"
        );
        // krust-log does not compress: gzip the encoded records ourselves and hand the blob
        // over as an opaque payload (exactly what a Kafka producer sends).
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut encoder, &plain.payload()).expect("gzip");
        let compressed = encoder.finish().expect("gzip");
        let mut builder = RecordBatchBuilder::new(self.base_offset)
            .partition_leader_epoch(self.leader_epoch)
            .base_timestamp(base_timestamp)
            .timestamp_type(TimestampType::CreateTime)
            .compression(Compression::Gzip)
            .opaque_payload(Bytes::from(compressed), plain.record_count())
            .last_offset_delta(plain.last_offset_delta())
            .max_timestamp(plain.max_timestamp());
        if let Some((id, epoch, sequence, transactional)) = self.producer {
            builder = builder
                .producer(id, epoch, sequence)
                .transactional(transactional);
        }
        builder.build()
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
    for chunk in 0..3 {
        let base = next.0;
        let records: Vec<Expected> = (0..10)
            .map(|i| {
                let value = format!("gzip {chunk}/{i} {}", "compressible ".repeat(10));
                next.record(
                    Some(&format!("gz-{chunk}-{i}")),
                    Some(&value),
                    vec![("codec", Some("gzip"))],
                )
            })
            .collect();
        batches.push(BatchSpec {
            compression: Compression::Gzip,
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

/// Writes `batches` as Kafka segment files in `dir`, rolling to a new segment (named after its
/// first batch's base offset) before a batch that would take a segment past `segment_bytes`.
fn write_segments(dir: &Path, batches: &[RecordBatch], segment_bytes: usize) -> Vec<PathBuf> {
    let mut segments: Vec<(i64, Vec<u8>)> = Vec::new();
    for batch in batches {
        let roll = segments.last().is_none_or(|(_, bytes)| {
            !bytes.is_empty() && bytes.len() + batch.size_in_bytes() > segment_bytes
        });
        if roll {
            segments.push((batch.base_offset(), Vec::new()));
        }
        if let Some((_, bytes)) = segments.last_mut() {
            bytes.extend_from_slice(batch.as_bytes());
        }
    }
    segments
        .into_iter()
        .map(|(base, bytes)| {
            let path = dir.join(format!("{base:020}.log"));
            std::fs::write(&path, bytes).expect("write segment");
            path
        })
        .collect()
}

#[test]
fn kafka_dump_log_reads_every_batch_and_record_written_by_krust_log() {
    let dist = dist();
    let dir = tempfile::tempdir().expect("tempdir");
    let partition = dir.path().join("krust-interop-0");
    std::fs::create_dir_all(&partition).expect("partition dir");
    let specs = krust_batches();
    let batches: Vec<RecordBatch> = specs.iter().map(BatchSpec::build).collect();
    let segments = write_segments(&partition, &batches, 1024);
    assert!(
        segments.len() >= 3,
        "the data must span several segments, got {segments:?}"
    );

    let files: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
    let dump = dist
        .dump_log_segments(
            &files,
            &["--deep-iteration", "--print-data-log"],
            Duration::from_secs(120),
        )
        .expect("DumpLogSegments runs");
    check_dump_matches(&dump, &specs, &batches);

    // The only complaint Kafka may have: the offsets skipped by the empty (compacted) batch.
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
        let codec = match spec.compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            other => panic!("{what}: unexpected codec {other:?}"),
        };
        assert_eq!(seen.compression, codec, "{what}: codec");
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

/// Reads every segment of a Kafka partition directory with krust-log's batch reader: every CRC
/// must check, segments must chain (each starts where the previous ended), and compressed
/// batches are gunzipped here and decoded by krust-log. With `allow_torn_tail`, the last
/// segment may end in an incomplete batch (a crash), which is ignored as Kafka's recovery would.
fn read_partition(dir: &Path, allow_torn_tail: bool) -> (Vec<ReadBack>, Vec<RecordBatch>) {
    let mut segments: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .expect("partition dir")
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let base = name.strip_suffix(".log")?.parse().ok()?;
            Some((base, entry.path()))
        })
        .collect();
    segments.sort();
    assert!(!segments.is_empty(), "{}: no segments", dir.display());
    let mut records = Vec::new();
    let mut batches = Vec::new();
    let mut next_offset: Option<i64> = None;
    let last_index = segments.len() - 1;
    for (index, (base, path)) in segments.iter().enumerate() {
        let bytes = Bytes::from(std::fs::read(path).expect("read segment"));
        let (segment_batches, stop) = BatchReader::new(bytes, MAX_BATCH_BYTES).read_all();
        if let Some(stop) = stop {
            assert!(
                allow_torn_tail && index == last_index,
                "{}: krust-log stopped at position {}: {}",
                path.display(),
                stop.position,
                stop.error
            );
        }
        if let Some(first) = segment_batches.first() {
            assert_eq!(
                first.base_offset(),
                *base,
                "{}: first batch is the segment's base offset",
                path.display()
            );
        }
        for batch in segment_batches {
            assert!(
                batch.is_crc_valid(),
                "batch {} has a bad CRC",
                batch.base_offset()
            );
            if let Some(expected) = next_offset {
                assert_eq!(
                    batch.base_offset(),
                    expected,
                    "{}: offsets are contiguous",
                    path.display()
                );
            }
            next_offset = Some(batch.next_offset());
            let decoded = match batch.compression() {
                Compression::None => batch.records().expect("decode records"),
                Compression::Gzip => {
                    let mut plain = Vec::new();
                    let payload = batch.payload();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&payload[..]),
                        &mut plain,
                    )
                    .expect("gunzip");
                    RecordBatchBuilder::new(batch.base_offset())
                        .opaque_payload(Bytes::from(plain), batch.record_count())
                        .build()
                        .records()
                        .expect("decode gunzipped records")
                }
                other => panic!("unexpected codec {other:?}"),
            };
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
    (records, batches)
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
///    then krust-log reads both partitions;
/// 2. crash: restart, produce to `crashed`, SIGKILL, then krust-log reads it (the segment is
///    left as the page cache had it; the preallocated index is not trimmed).
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
    let plain = produced_records("plain", 120);
    let gzipped = produced_records("gzipped", 80);
    produce(&node, "plain", &plain, &[]);
    produce(&node, "gzipped", &gzipped, &[("compression.type", "gzip")]);
    node.terminate(Duration::from_secs(60))
        .expect("clean shutdown");
    let window = (start, now_ms());

    let (read, batches) = read_partition(&node.partition_dir("plain", 0), false);
    check_read_back("plain", &read, &plain, window);
    assert!(batches.len() > 1, "plain: expected several batches");
    assert!(batches.iter().all(|b| b.compression() == Compression::None));
    let segments = std::fs::read_dir(node.partition_dir("plain", 0))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert!(
        segments > 2,
        "plain: expected the log to roll, got {segments} segments"
    );

    let (read, batches) = read_partition(&node.partition_dir("gzipped", 0), false);
    check_read_back("gzipped", &read, &gzipped, window);
    assert!(batches.iter().all(|b| b.compression() == Compression::Gzip));
    // The idempotent producer (default in 3.9) numbers its batches.
    assert!(
        batches
            .iter()
            .all(|b| b.producer_id() >= 0 && b.base_sequence() >= 0)
    );

    node.start().expect("kafka restarts");
    let start = now_ms();
    node.create_topic("crashed", 1, &small_segments)
        .expect("create crashed");
    let crashed = produced_records("crashed", 60);
    produce(&node, "crashed", &crashed, &[]);
    node.kill().expect("SIGKILL");
    let window = (start, now_ms());
    // Acknowledged (acks=all) records were written to the segment before the ack, and a process
    // crash does not lose the page cache: all of them must be there.
    let (read, _) = read_partition(&node.partition_dir("crashed", 0), true);
    check_read_back("crashed", &read, &crashed, window);
}
