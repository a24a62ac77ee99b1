//! Log behaviour end to end on a temp dir: append paths, reads, timestamp lookups, rolls,
//! truncation, delete_records, retention, bad input. Each test says what Kafka 3.9 does.

mod common;

use bytes::Bytes;
use common::{assorted_batches, batch, batch_at, dir_sizes, file_len};
use krust_log::batch::{CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE};
use krust_log::checkpoint::LEADER_EPOCH_CHECKPOINT_FILE;
use krust_log::{
    EpochEndOffset, Log, LogConfig, LogError, LogOpenOptions, RecordBatch, RecordBatchBuilder,
    TimestampType,
};

fn open(dir: &std::path::Path, config: LogConfig) -> Log {
    Log::open_with(
        dir,
        config,
        LogOpenOptions {
            recovery_point: 0,
            log_start_offset: 0,
            now_ms: 0,
        },
    )
    .expect("open")
    .0
}

fn read_all(log: &Log) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20).expect("read");
        assert!(!read.batches.is_empty(), "no progress at offset {offset}");
        offset = read.batches.last().expect("batch").next_offset();
        out.extend(read.batches);
    }
    out
}

#[test]
fn leader_append_round_trips_every_batch_shape_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    let mut written = Vec::new();
    for (i, b) in assorted_batches().into_iter().enumerate() {
        let info = log
            .append_as_leader(vec![b.clone()], 3, 5_000)
            .expect("append");
        assert_eq!(
            info.first_offset,
            written
                .iter()
                .map(|b: &RecordBatch| b.next_offset())
                .last()
                .unwrap_or(0)
        );
        let stored = &info.batches[0];
        assert_eq!(stored.partition_leader_epoch(), 3, "batch {i}");
        assert_eq!(
            stored.payload(),
            b.payload(),
            "payload unchanged, batch {i}"
        );
        assert_eq!(stored.is_control(), b.is_control());
        assert_eq!(stored.compression(), b.compression());
        assert!(stored.is_crc_valid());
        written.push(stored.clone());
    }
    // An empty batch (all records compacted away) is accepted on the follower path.
    let empty = RecordBatchBuilder::new(log.log_end_offset())
        .partition_leader_epoch(3)
        .build();
    assert_eq!(empty.record_count(), 0);
    log.append_as_follower(vec![empty.clone()], 5_000)
        .expect("empty batch");
    written.push(empty);

    assert_eq!(read_all(&log), written);
    for b in &written {
        let records = b.records().expect("records");
        assert_eq!(records.len(), b.record_count() as usize);
    }
    let end = log.log_end_offset();
    let recovery_point = log.close().expect("close");
    assert_eq!(recovery_point, end);

    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_all(&log), written);
}

#[test]
fn read_returns_whole_batches_and_at_least_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    for i in 0..10 {
        log.append_as_leader(vec![batch(5, i * 10, 100)], 0, 0)
            .expect("append");
    }
    let size = read_all(&log)[0].size_in_bytes();
    // An offset inside a batch returns the batch holding it (Kafka returns from the batch
    // start; the consumer skips earlier records).
    let read = log.read(12, 1 << 20).expect("read");
    assert_eq!(read.batches[0].base_offset(), 10);
    assert_eq!(read.batches.len(), 8);
    assert_eq!(read.bytes.len(), 8 * size);
    // max_bytes below one batch still returns one batch.
    let read = log.read(0, 1).expect("read");
    assert_eq!(read.batches.len(), 1);
    // max_bytes between two and three batches returns two.
    let read = log.read(0, 3 * size - 1).expect("read");
    assert_eq!(read.batches.len(), 2);
    // The high watermark bound: only batches wholly below it.
    let read = log.read_up_to(0, 1 << 20, 20).expect("read");
    assert_eq!(read.batches.len(), 4);
    // At the log end: empty. Beyond or below: OFFSET_OUT_OF_RANGE.
    assert!(log.read(50, 100).expect("read at end").batches.is_empty());
    let err = log.read(51, 100).expect_err("beyond end");
    assert_eq!(err.kafka_error_code(), OFFSET_OUT_OF_RANGE);
    log.delete_records(20).expect("delete records");
    let err = log.read(19, 100).expect_err("below start");
    assert_eq!(err.kafka_error_code(), OFFSET_OUT_OF_RANGE);
    assert!(matches!(
        err,
        LogError::OffsetOutOfRange {
            offset: 19,
            log_start_offset: 20,
            log_end_offset: 50
        }
    ));
}

#[test]
fn offset_for_timestamp_finds_first_record_at_or_after_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 2_000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    // Batch i holds 4 records with timestamps 1000 + 10 i + {0, 2, 4, 6}.
    for i in 0..40 {
        let mut b = RecordBatchBuilder::new(0);
        for r in 0..4 {
            b.append_kv(
                1_000 + 10 * i + 2 * r,
                None,
                Some(Bytes::from(vec![1u8; 50])),
            );
        }
        log.append_as_leader(vec![b.build()], 2, 0).expect("append");
    }
    assert!(log.segment_count() > 3, "several segments");
    for target in [0, 1_000, 1_001, 1_004, 1_007, 1_010, 1_203, 1_396, 1_399] {
        // Reference: scan every record.
        let expected = read_all(&log).iter().find_map(|b| {
            b.records().expect("records").iter().find_map(|r| {
                let ts = b.base_timestamp() + r.timestamp_delta;
                (ts >= target).then_some((ts, b.base_offset() + i64::from(r.offset_delta)))
            })
        });
        let found = log.offset_for_timestamp(target).expect("lookup");
        assert_eq!(
            found.map(|f| (f.timestamp, f.offset)),
            expected,
            "target {target}"
        );
        if let Some(f) = found {
            assert_eq!(f.leader_epoch, Some(2));
        }
    }
    assert_eq!(log.offset_for_timestamp(1_397).expect("lookup"), None);
    // After delete_records, answers never go below the log start offset.
    log.delete_records(7).expect("delete");
    let found = log.offset_for_timestamp(0).expect("lookup").expect("some");
    assert_eq!((found.offset, found.timestamp), (7, 1_016));
}

#[test]
fn log_append_time_stamps_batches_and_keeps_crc_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    let info = log
        .append_as_leader(vec![batch(3, 10, 10)], 1, 777)
        .expect("append");
    assert_eq!(info.log_append_time_ms, Some(777));
    let stored = &read_all(&log)[0];
    assert_eq!(stored.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(stored.max_timestamp(), 777);
    assert!(stored.is_crc_valid());
    let found = log
        .offset_for_timestamp(700)
        .expect("lookup")
        .expect("found");
    assert_eq!((found.offset, found.timestamp), (0, 777));
}

#[test]
fn create_time_max_timestamp_is_recomputed_on_the_leader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    let mut b = RecordBatchBuilder::new(0).max_timestamp(5);
    b.append_kv(100, None, None);
    b.append_kv(90, None, None);
    let info = log.append_as_leader(vec![b.build()], 0, 0).expect("append");
    assert_eq!(info.batches[0].max_timestamp(), 100);
}

#[test]
fn bad_input_gets_kafka_codes_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        max_message_bytes: 4_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    log.append_as_leader(vec![batch(2, 0, 10)], 0, 0)
        .expect("append");
    log.flush().expect("flush");
    let before = dir_sizes(dir.path());
    let good = batch(2, 0, 10).into_bytes().to_vec();
    let patched = |at: usize, bytes: &[u8]| {
        let mut v = good.clone();
        v[at..at + bytes.len()].copy_from_slice(bytes);
        v
    };
    let mut bad_crc = good.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let cases: Vec<(&str, Vec<u8>, i16)> = vec![
        ("wrong CRC", bad_crc, CORRUPT_MESSAGE),
        ("magic 1", patched(16, &[1]), INVALID_RECORD),
        ("magic 3", patched(16, &[3]), CORRUPT_MESSAGE),
        (
            "negative length",
            patched(8, &(-5i32).to_be_bytes()),
            CORRUPT_MESSAGE,
        ),
        (
            "length below header",
            patched(8, &10i32.to_be_bytes()),
            CORRUPT_MESSAGE,
        ),
        (
            "length beyond buffer",
            patched(8, &(1i32 << 30).to_be_bytes()),
            CORRUPT_MESSAGE,
        ),
        (
            "truncated",
            good[..good.len() - 5].to_vec(),
            CORRUPT_MESSAGE,
        ),
        (
            "valid batch then garbage",
            [good.clone(), vec![0u8; 20]].concat(),
            CORRUPT_MESSAGE,
        ),
        (
            "oversized batch",
            batch(1, 0, 5_000).into_bytes().to_vec(),
            MESSAGE_TOO_LARGE,
        ),
    ];
    for (why, bytes, code) in cases {
        let err = log
            .append_records_as_leader(Bytes::from(bytes.clone()), 0, 0)
            .expect_err(why);
        assert_eq!(err.kafka_error_code(), code, "{why}: {err}");
        let err = log
            .append_records_as_follower(Bytes::from(bytes), 0)
            .expect_err(why);
        assert_eq!(err.kafka_error_code(), code, "{why} (follower): {err}");
        assert_eq!(dir_sizes(dir.path()), before, "{why}: nothing written");
    }
    // Leader path: record count inconsistent with the offset range → INVALID_RECORD.
    let lying = RecordBatchBuilder::new(0)
        .opaque_payload(batch(2, 0, 10).payload(), 2)
        .last_offset_delta(5)
        .build();
    let err = log
        .append_as_leader(vec![lying], 0, 0)
        .expect_err("inconsistent count");
    assert_eq!(err.kafka_error_code(), INVALID_RECORD);
    // Leader path: malformed records inside a batch with a valid CRC → INVALID_RECORD.
    let garbage = RecordBatchBuilder::new(0)
        .opaque_payload(Bytes::from_static(&[0x7f, 1, 2]), 1)
        .last_offset_delta(0)
        .build();
    let err = log
        .append_as_leader(vec![garbage], 0, 0)
        .expect_err("bad record");
    assert_eq!(err.kafka_error_code(), INVALID_RECORD);
    // All-or-nothing: a good batch followed by a bad one writes neither.
    let err = log
        .append_as_leader(vec![batch(1, 0, 10), batch(1, 0, 5_000)], 0, 0)
        .expect_err("second too large");
    assert!(matches!(err, LogError::RecordTooLarge { index: 1, .. }));
    assert_eq!(dir_sizes(dir.path()), before);
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn follower_path_requires_contiguous_offsets_and_writes_nothing_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    log.append_as_follower(vec![batch_at(0, 1, 3, 0), batch_at(3, 1, 2, 0)], 0)
        .expect("contiguous");
    assert_eq!(log.log_end_offset(), 5);
    log.flush().expect("flush");
    let before = dir_sizes(dir.path());
    let cases = vec![
        ("gap", vec![batch_at(6, 1, 1, 0)], 0),
        ("overlap", vec![batch_at(4, 1, 1, 0)], 0),
        (
            "second batch gap",
            vec![batch_at(5, 1, 1, 0), batch_at(7, 1, 1, 0)],
            1,
        ),
        (
            "second batch repeats",
            vec![batch_at(5, 1, 2, 0), batch_at(5, 1, 2, 0)],
            1,
        ),
    ];
    for (why, batches, index) in cases {
        match log.append_as_follower(batches, 0) {
            Err(LogError::NonContiguousOffset { index: got, .. }) => {
                assert_eq!(got, index, "{why}");
            }
            other => panic!("{why}: expected NonContiguousOffset, got {other:?}"),
        }
        assert_eq!(dir_sizes(dir.path()), before, "{why}: nothing written");
    }
    let backwards = RecordBatchBuilder::new(5).last_offset_delta(-2).build();
    let err = log
        .append_as_follower(vec![backwards], 0)
        .expect_err("non-monotonic");
    assert!(matches!(err, LogError::NonMonotonicOffsets { .. }));
    assert_eq!(err.kafka_error_code(), -1);
    assert_eq!(dir_sizes(dir.path()), before);
}

#[test]
fn rolls_by_size_with_kafka_file_names_and_trimmed_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 10_000,
        index_interval_bytes: 1_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    let mut bases = vec![0];
    for i in 0..60 {
        let b = batch(4, i * 4, 200);
        let before = log.segment_count();
        let info = log.append_as_leader(vec![b], 0, 0).expect("append");
        if log.segment_count() > before {
            bases.push(info.first_offset);
        }
    }
    assert!(bases.len() > 3);
    let listed: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    assert_eq!(listed, bases);
    for segment in log.segments() {
        assert!(segment.size() <= 10_000);
        let name = segment
            .log_path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert_eq!(name, format!("{:020}.log", segment.base_offset()));
    }
    // Sealed segments have indexes trimmed to their entries; the active one is
    // pre-allocated to segment.index.bytes.
    let segments: Vec<_> = log.segments().collect();
    for s in &segments[..segments.len() - 1] {
        assert_eq!(
            file_len(s.offset_index().path()),
            8 * s.offset_index().len() as u64
        );
        assert_eq!(
            file_len(s.time_index().path()),
            12 * s.time_index().len() as u64
        );
        assert!(!s.offset_index().is_empty());
        // Each entry points at a batch whose last offset is the entry's offset.
        for e in s.offset_index().entries() {
            let read = log.read(e.offset, 1).expect("read");
            assert_eq!(read.batches[0].last_offset(), e.offset);
        }
        // The final time index entry holds the segment's max timestamp.
        assert_eq!(s.time_index().last_entry(), s.max_timestamp());
    }
    let active = segments.last().expect("active");
    assert_eq!(file_len(active.offset_index().path()), 10 * 1024 * 1024);
    assert_eq!(
        file_len(active.time_index().path()),
        10 * 1024 * 1024 / 12 * 12
    );
    log.close().expect("close");
    // After close the active one is trimmed too.
    let names = dir_sizes(dir.path());
    let last_index = names
        .iter()
        .rev()
        .find(|(n, _)| n.ends_with(".index"))
        .expect("index");
    assert!(last_index.1 < 1024);
}

#[test]
fn rolls_by_time_using_batch_timestamps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_ms: 100,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    // Kafka compares the newest batch's timestamp with the segment's first batch timestamp
    // and rolls when the difference exceeds segment.ms: 101 - 0 > 100, then 250 - 101 > 100.
    for ts in [0, 50, 100, 101, 150, 201, 250] {
        log.append_as_leader(vec![batch(1, ts, 10)], 0, 0)
            .expect("append");
    }
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    assert_eq!(bases, vec![0, 3, 6]);
    // Without timestamps, wall-clock time since creation counts (now_ms is passed in).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(
        dir.path(),
        LogConfig {
            segment_ms: 100,
            ..LogConfig::default()
        },
    );
    let no_ts = || {
        let mut b = RecordBatchBuilder::new(0).base_timestamp(-1);
        b.append(krust_log::Record::default());
        b.build()
    };
    log.append_as_leader(vec![no_ts()], 0, 10).expect("append");
    log.append_as_leader(vec![no_ts()], 0, 100).expect("append");
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(vec![no_ts()], 0, 101).expect("append");
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn rolls_when_an_index_is_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 48 bytes: 6 offset entries, 4 time entries (one reserved for the roll).
    let config = LogConfig {
        segment_index_bytes: 48,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..20 {
        log.append_as_leader(vec![batch(1, i * 10, 10)], 0, 0)
            .expect("append");
    }
    // Batch 0 is never indexed; batches 1..=3 fill three time entries; batch 4 rolls.
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    assert_eq!(bases, vec![0, 4, 8, 12, 16]);
    for s in log.segments().take(4) {
        assert_eq!(s.offset_index().len(), 3);
        // The roll entry is only written when the max timestamp is newer than the last one.
        assert_eq!(s.time_index().len(), 3);
        assert_eq!(s.time_index().last_entry(), s.max_timestamp());
    }
    log.close().expect("close");
    let log = open(dir.path(), config);
    assert_eq!(log.log_end_offset(), 20);
    assert_eq!(read_all(&log).len(), 20);
}

#[test]
fn truncating_at_the_log_end_still_forgets_an_epoch_cached_there() {
    // A broker that became leader at epoch 1 (cached at its log end) and lost the leadership
    // before appending: the new leader never had epoch 1, so the follower truncates to its log
    // end, which must drop that entry (Kafka's UnifiedLog.truncateTo), or its next fetch names
    // epoch 1 again and diverges again.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    for i in 0..4 {
        log.append_as_leader(vec![batch(3, i * 3, 100)], 0, 0)
            .expect("append");
    }
    log.assign_epoch_start_offset(1, 12).expect("assign");
    assert_eq!(log.leader_epoch_cache().latest_epoch(), Some(1));
    assert_eq!(log.truncate_to(12).expect("truncate"), 12);
    assert_eq!(log.leader_epoch_cache().latest_epoch(), Some(0));
    assert_eq!(read_all(&log).len(), 4, "no batch goes");
    // Beyond the log end too; earlier epochs stay.
    log.assign_epoch_start_offset(2, 12).expect("assign");
    assert_eq!(log.truncate_to(50).expect("truncate"), 12);
    assert_eq!(log.leader_epoch_cache().latest_epoch(), Some(0));
    assert_eq!(
        std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).expect("read"),
        "0\n1\n0 0\n"
    );
}

#[test]
fn truncate_to_removes_later_segments_trims_the_active_one_and_epochs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 3_000,
        index_interval_bytes: 500,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..60 {
        let epoch = (i / 20) as i32; // epochs 0, 1, 2 start at 0, 60, 120
        log.append_as_leader(vec![batch(3, i * 3, 100)], epoch, 0)
            .expect("append");
    }
    log.flush().expect("flush");
    let all = read_all(&log);
    assert_eq!(
        log.end_offset_for_epoch(1),
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 120
        }
    );

    // Truncating to a batch boundary keeps exactly the batches below it.
    let end = log.truncate_to(90).expect("truncate");
    assert_eq!(end, 90);
    assert_eq!(read_all(&log), all[..30].to_vec());
    assert_eq!(log.leader_epoch_cache().latest_epoch(), Some(1));
    assert!(log.recovery_point() <= 90);
    assert!(log.segments().all(|s| s.base_offset() < 90));
    // Truncating inside a batch removes the whole batch holding the offset.
    let end = log.truncate_to(85).expect("truncate");
    assert_eq!(end, 84);
    // Appends continue at the new end.
    let info = log
        .append_as_leader(vec![batch(3, 0, 100)], 5, 0)
        .expect("append");
    assert_eq!(info.first_offset, 84);
    assert_eq!(
        log.end_offset_for_epoch(1),
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 84
        }
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).expect("read"),
        "0\n3\n0 0\n1 60\n5 84\n"
    );
    let expected = read_all(&log);
    log.close().expect("close");
    let log = open(dir.path(), config.clone());
    assert_eq!(read_all(&log), expected);
    assert_eq!(log.log_end_offset(), 87);

    // Below the first segment: start over at the offset.
    let mut log = log;
    log.truncate_to(0).expect("truncate");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    assert_eq!(log.segment_count(), 1);
    assert!(log.leader_epoch_cache().entries().is_empty());
}

#[test]
fn delete_records_advances_start_and_deletes_whole_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 2_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..40 {
        log.append_as_leader(vec![batch(2, i, 100)], 0, 0)
            .expect("append");
    }
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    let cut = bases[2] + 1; // inside the third segment
    assert_eq!(log.delete_records(cut).expect("delete"), cut);
    let remaining: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    assert_eq!(remaining, bases[2..].to_vec());
    assert!(!dir.path().join(format!("{:020}.log", bases[0])).exists());
    assert!(!dir.path().join(format!("{:020}.index", bases[1])).exists());
    // Start never moves backwards; beyond the high watermark is refused.
    assert_eq!(log.delete_records(0).expect("no-op"), cut);
    log.set_high_watermark(50);
    let err = log.delete_records(51).expect_err("beyond HW");
    assert_eq!(err.kafka_error_code(), OFFSET_OUT_OF_RANGE);
    // The caller persists the start offset; reopening with it restores it.
    log.close().expect("close");
    let (log, _) = Log::open_with(
        dir.path(),
        config,
        LogOpenOptions {
            recovery_point: 80,
            log_start_offset: cut,
            now_ms: 0,
        },
    )
    .expect("open");
    assert_eq!(log.log_start_offset(), cut);
    assert_eq!(
        log.read(cut, 1).expect("read").batches[0].last_offset(),
        cut
    );
}

#[test]
fn retention_by_time_deletes_old_segments_up_to_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 1_500,
        retention_ms: 1_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for i in 0..30 {
        log.append_as_leader(vec![batch(1, i * 100, 300)], 0, 0)
            .expect("append");
    }
    let maxes: Vec<(i64, i64)> = log
        .segments()
        .map(|s| (s.base_offset(), s.max_timestamp().timestamp))
        .collect();
    let now = 2_450;
    let outcome = log.apply_retention(now).expect("retention");
    let expected_deleted = maxes.iter().take_while(|(_, ts)| now - ts > 1_000).count();
    assert!(expected_deleted > 0);
    assert_eq!(outcome.time_breached, expected_deleted);
    assert_eq!(log.log_start_offset(), maxes[expected_deleted].0);
    // The high watermark holds retention back.
    log.set_high_watermark(log.log_start_offset());
    assert_eq!(log.apply_retention(1 << 40).expect("retention").total(), 0);
    // With everything expired and committed, Kafka deletes the active segment too, after
    // rolling to an empty one at the log end offset.
    log.set_high_watermark(log.log_end_offset());
    log.apply_retention(1 << 40).expect("retention");
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), 30);
    assert_eq!(log.log_end_offset(), 30);
    log.append_as_leader(vec![batch(1, 0, 10)], 0, 0)
        .expect("append after");
    assert_eq!(read_all(&log)[0].base_offset(), 30);
}

#[test]
fn retention_by_size_keeps_the_log_under_retention_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 1_500,
        retention_bytes: 5_000,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for i in 0..40 {
        log.append_as_leader(vec![batch(1, i, 300)], 0, 0)
            .expect("append");
    }
    let total = log.size_in_bytes();
    let outcome = log.apply_retention(0).expect("retention");
    assert!(outcome.size_breached > 0);
    assert!(log.size_in_bytes() <= total);
    // Kafka deletes while the excess is at least the oldest segment's size: the result is
    // above retention.bytes by less than one segment.
    let oldest = log.segments().next().expect("segment").size();
    assert!(log.size_in_bytes() < 5_000 + oldest);
    assert_eq!(log.apply_retention(0).expect("again").total(), 0);
}

#[test]
fn leader_epoch_checkpoint_follows_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    log.append_as_leader(vec![batch(2, 0, 1)], 1, 0)
        .expect("append");
    log.append_as_leader(vec![batch(2, 0, 1)], 1, 0)
        .expect("append");
    log.append_as_leader(vec![batch(2, 0, 1)], 4, 0)
        .expect("append");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).expect("read"),
        "0\n2\n1 0\n4 4\n"
    );
    assert_eq!(
        log.end_offset_for_epoch(2),
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 4
        }
    );
    assert_eq!(
        log.end_offset_for_epoch(4),
        EpochEndOffset {
            leader_epoch: 4,
            end_offset: 6
        }
    );
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.leader_epoch_cache().latest_epoch(), Some(4));
}

#[test]
fn open_removes_leftovers_and_keeps_foreign_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    log.append_as_leader(vec![batch(2, 0, 10)], 0, 0)
        .expect("append");
    log.close().expect("close");
    let p = |name: &str| dir.path().join(name);
    // Leftovers of interrupted deletions, cleaning and our own atomic writes.
    std::fs::write(p("00000000000000000050.index"), [0u8; 8]).expect("write");
    std::fs::write(p("00000000000000000050.timeindex"), [0u8; 12]).expect("write");
    std::fs::write(p("00000000000000000070.log.deleted"), b"x").expect("write");
    std::fs::write(p("00000000000000000080.log.cleaned"), b"x").expect("write");
    std::fs::write(p("leader-epoch-checkpoint.tmp"), b"x").expect("write");
    // Files that belong to others: Raft's quorum state and snapshots, producer snapshots.
    for foreign in [
        "quorum-state",
        "00000000000000000002-0000000001.checkpoint",
        "00000000000000000002.snapshot",
        "partition.metadata",
    ] {
        std::fs::write(p(foreign), b"keep").expect("write");
    }
    let (log, report) = Log::open_with(
        dir.path(),
        LogConfig::default(),
        LogOpenOptions {
            recovery_point: 2,
            log_start_offset: 0,
            now_ms: 0,
        },
    )
    .expect("open");
    assert_eq!(log.log_end_offset(), 2);
    let mut removed = report.removed_files.clone();
    removed.sort();
    assert_eq!(
        removed,
        vec![
            "00000000000000000050.index",
            "00000000000000000050.timeindex",
            "00000000000000000070.log.deleted",
            "00000000000000000080.log.cleaned",
            "leader-epoch-checkpoint.tmp",
        ]
    );
    for foreign in [
        "quorum-state",
        "00000000000000000002-0000000001.checkpoint",
        "00000000000000000002.snapshot",
        "partition.metadata",
    ] {
        assert!(p(foreign).exists(), "{foreign} must be left alone");
    }
}

#[test]
fn open_creates_missing_dir_and_starts_at_log_start_offset() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("orders-3");
    let (log, _) = Log::open_with(
        &dir,
        LogConfig::default(),
        LogOpenOptions {
            recovery_point: 0,
            log_start_offset: 500,
            now_ms: 0,
        },
    )
    .expect("open");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    assert!(dir.join("00000000000000000500.log").exists());
    // Invalid configuration is a typed error.
    let err = Log::open(
        &dir,
        LogConfig {
            segment_bytes: 10,
            ..LogConfig::default()
        },
        0,
    )
    .expect_err("segment.bytes too small");
    assert!(matches!(err, LogError::Config(_)), "{err:?}");
}

#[test]
fn log_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Log>();
    assert_send_sync::<RecordBatch>();
}

#[test]
fn impossible_offsets_are_refused_without_panicking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    log.append_as_leader(vec![batch(2, 0, 10)], 0, 0)
        .expect("append");
    for offset in [-1, i64::MIN, i64::MAX] {
        let err = log
            .truncate_fully_and_start_at(offset)
            .expect_err("refused");
        assert_eq!(err.kafka_error_code(), OFFSET_OUT_OF_RANGE, "{offset}");
    }
    assert!(log.truncate_to(-5).is_err());
    // A follower batch near i64::MAX cannot be placed in a segment.
    let far = batch_at(i64::MAX - 10, 0, 1, 0);
    assert!(log.append_as_follower(vec![far], 0).is_err());
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(read_all(&log).len(), 1);
}

#[test]
fn kafka_append_path_index_entries_are_accepted() {
    // Kafka's append path indexes a multi-batch append (a follower fetch) with the append's
    // last offset at its first batch's position. Such an index must be trusted and give
    // correct lookups, without a rebuild.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 4_000,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..40 {
        log.append_as_leader(vec![batch(2, i, 100)], 0, 0)
            .expect("append");
    }
    let end = log.close().expect("close");
    // Rewrite the first segment's index as Kafka would after two-batch appends.
    let log_bytes = std::fs::read(dir.path().join("00000000000000000000.log")).expect("read");
    let (batches, _) = krust_log::BatchReader::new(Bytes::from(log_bytes), usize::MAX).read_all();
    let mut positions = Vec::new();
    let mut pos = 0u32;
    for b in &batches {
        positions.push(pos);
        pos += b.size_in_bytes() as u32;
    }
    let mut index = Vec::new();
    for pair in (2..batches.len().saturating_sub(1)).step_by(2) {
        index.extend_from_slice(&(batches[pair + 1].last_offset() as i32).to_be_bytes());
        index.extend_from_slice(&positions[pair].to_be_bytes());
    }
    assert!(index.len() >= 16);
    std::fs::write(dir.path().join("00000000000000000000.index"), &index).expect("write");

    let (log, report) = Log::open_with(
        dir.path(),
        config,
        LogOpenOptions {
            recovery_point: end,
            log_start_offset: 0,
            now_ms: 0,
        },
    )
    .expect("open");
    assert!(
        report.recovered_segments.iter().all(|(base, _)| *base != 0),
        "first segment rebuilt: {report:?}"
    );
    assert_eq!(
        log.segments().next().expect("segment").offset_index().len(),
        index.len() / 8
    );
    for offset in 0..end {
        let read = log.read(offset, 1).expect("read");
        let b = &read.batches[0];
        assert!(
            b.base_offset() <= offset && offset <= b.last_offset(),
            "offset {offset}"
        );
    }
}

#[test]
fn list_offsets_special_targets_follow_kafka() {
    use krust_log::log::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 1_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    // The largest timestamp (900) appears first at offset 13 (record 1 of the batch at 12),
    // again at offset 20; Kafka answers with the first.
    let timestamps: [&[i64]; 8] = [
        &[100, 200],
        &[300, 100],
        &[400, 500],
        &[600, 700],
        &[800, 100],
        &[200, 300],
        &[850, 900],
        &[10, 20],
    ];
    for (i, ts) in timestamps.iter().enumerate() {
        let mut b = RecordBatchBuilder::new(0);
        for &t in *ts {
            b.append_kv(t, None, Some(Bytes::from(vec![0u8; 150])));
        }
        // Offsets 0..8 in epoch 1, then epoch 4.
        let epoch = if i < 4 { 1 } else { 4 };
        log.append_as_leader(vec![b.build()], epoch, 0)
            .expect("append");
    }
    let mut b = RecordBatchBuilder::new(0);
    b.append_kv(900, None, None);
    log.append_as_leader(vec![b.build()], 4, 0).expect("append");
    assert!(log.segment_count() > 2);

    let max = log
        .fetch_offset_by_timestamp(MAX_TIMESTAMP)
        .expect("max")
        .expect("some");
    assert_eq!(
        (max.timestamp, max.offset, max.leader_epoch),
        (900, 13, Some(4))
    );
    let latest = log
        .fetch_offset_by_timestamp(LATEST_TIMESTAMP)
        .expect("latest")
        .expect("some");
    assert_eq!(
        (latest.timestamp, latest.offset, latest.leader_epoch),
        (-1, 17, Some(4))
    );
    let earliest = log
        .fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
        .expect("earliest")
        .expect("some");
    assert_eq!((earliest.offset, earliest.leader_epoch), (0, Some(1)));
    let by_time = log
        .fetch_offset_by_timestamp(450)
        .expect("lookup")
        .expect("some");
    assert_eq!((by_time.timestamp, by_time.offset), (500, 5));
    assert_eq!(log.fetch_offset_by_timestamp(-5).expect("tiered"), None);
    // After delete_records the earliest answer moves; the first epoch entry is moved with it.
    log.delete_records(9).expect("delete");
    let earliest = log
        .fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
        .expect("earliest")
        .expect("some");
    assert_eq!((earliest.offset, earliest.leader_epoch), (9, Some(4)));
}

/// Appends 200-byte batches until the log has rolled `rolls` more times.
fn append_until_rolled(log: &mut Log, rolls: usize) {
    let target = log.segment_count() + rolls;
    let mut ts = log.log_end_offset();
    while log.segment_count() < target {
        log.append_as_leader(vec![batch(2, ts, 200)], 0, 0)
            .expect("append");
        ts += 2;
    }
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 2_000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

#[test]
fn a_roll_moves_the_recovery_point_only_after_its_background_flush() {
    // Kafka 3.9's roll schedules `flushUptoOffsetExclusive(newSegment.baseOffset)`; the
    // recovery point moves when that flush is done, not at the roll.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 1);
    let new_base = log.segments().last().expect("active").base_offset();
    assert_eq!(log.recovery_point(), 0, "a roll itself fsyncs nothing");
    let job = log.take_roll_flush().expect("the roll left a flush");
    assert_eq!(job.upto_offset(), new_base);
    assert!(log.take_roll_flush().is_none(), "handed out once");
    // Appends go on while the job runs elsewhere.
    log.append_as_leader(vec![batch(2, 10_000, 200)], 0, 0)
        .expect("append");
    let done = job.run().expect("fsync");
    assert!(log.mark_flushed(Ok(done)).expect("mark"));
    assert_eq!(
        log.recovery_point(),
        new_base,
        "up to the new segment's base only: the active segment's data was not fsynced"
    );
    // A reopen at that recovery point trusts the sealed segment and re-reads the active one.
    let before = read_all(&log);
    let rp = log.recovery_point();
    drop(log);
    let (log, report) = Log::open_with(
        dir.path(),
        small_segments(),
        LogOpenOptions {
            recovery_point: rp,
            log_start_offset: 0,
            now_ms: 0,
        },
    )
    .expect("reopen");
    assert_eq!(read_all(&log), before);
    assert!(
        report
            .recovered_segments
            .iter()
            .all(|(b, _)| *b >= new_base),
        "{report:?}"
    );
}

#[test]
fn roll_flushes_finishing_out_of_order_never_move_the_recovery_point_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 1);
    let first = log.take_roll_flush().expect("first roll");
    append_until_rolled(&mut log, 1);
    let second = log.take_roll_flush().expect("second roll");
    assert!(second.upto_offset() > first.upto_offset());
    // Each job covers every unsynced segment below its offset, so the later one alone
    // makes everything below it durable.
    let second_upto = second.upto_offset();
    let second_done = second.run().expect("fsync");
    assert!(log.mark_flushed(Ok(second_done)).expect("mark"));
    assert_eq!(log.recovery_point(), second_upto);
    let first_done = first.run().expect("fsync");
    assert!(!log.mark_flushed(Ok(first_done)).expect("mark"));
    assert_eq!(log.recovery_point(), second_upto);
}

#[test]
fn a_roll_flush_taken_before_a_truncation_does_not_move_the_recovery_point() {
    // A follower truncates (diverging epoch) while the job runs, then appends other records
    // at the same offsets: they were never fsynced, so the job must not vouch for them.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 2);
    let job = log.take_roll_flush().expect("roll");
    let upto = job.upto_offset();
    log.truncate_to(3).expect("truncate");
    append_until_rolled(&mut log, 2);
    assert!(log.log_end_offset() > upto);
    let done = job.run().expect("fsync");
    assert!(!log.mark_flushed(Ok(done)).expect("mark"));
    assert!(log.recovery_point() <= 3, "{}", log.recovery_point());
    // The rolls after the truncation left their own job, which does count.
    let job = log.take_roll_flush().expect("later roll");
    let upto = job.upto_offset();
    let done = job.run().expect("fsync");
    assert!(log.mark_flushed(Ok(done)).expect("mark"));
    assert_eq!(log.recovery_point(), upto);
}

#[test]
fn a_full_flush_covers_a_roll_flush_not_taken() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 3);
    log.flush().expect("flush");
    assert_eq!(log.recovery_point(), log.log_end_offset());
    assert!(log.take_roll_flush().is_none());
}

#[test]
fn a_failed_flush_freezes_the_recovery_point_and_refuses_appends() {
    // A failed fsync is never retried (the kernel may have dropped the dirty pages): the log
    // answers KAFKA_STORAGE_ERROR from then on, as Kafka does for an offline log dir.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 1);
    let job = log.take_roll_flush().expect("roll");
    let failure = LogError::Io {
        path: dir.path().to_path_buf(),
        source: std::io::Error::other("injected fsync failure"),
    };
    drop(job);
    assert!(log.mark_flushed(Err(failure)).is_err());
    assert!(log.flush_failed());
    assert_eq!(log.recovery_point(), 0);
    let append = log.append_as_leader(vec![batch(1, 0, 10)], 0, 0);
    assert!(
        matches!(&append, Err(e @ LogError::FlushFailed { .. })
            if e.kafka_error_code() == krust_log::batch::KAFKA_STORAGE_ERROR),
        "{append:?}"
    );
    assert!(matches!(log.flush(), Err(LogError::FlushFailed { .. })));
    assert_eq!(log.recovery_point(), 0);
}

#[test]
fn a_roll_uses_the_files_its_previous_flush_created_ahead() {
    // Creating three files is most of a roll's cost on a busy disk: the roll's background
    // flush creates the next segment's files (`spare-<n>.*.deleted`) and the next roll renames
    // them. Leftover spares are removed at open, as any `*.deleted` file.
    let dir = tempfile::tempdir().expect("tempdir");
    let spares = |dir: &std::path::Path| -> Vec<String> {
        dir_sizes(dir)
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n.starts_with("spare-"))
            .collect()
    };
    let mut log = open(dir.path(), small_segments());
    append_until_rolled(&mut log, 1);
    let job = log.take_roll_flush().expect("roll");
    let done = job.run().expect("fsync");
    assert_eq!(
        spares(dir.path()).len(),
        3,
        "log, index and time index made ahead"
    );
    log.mark_flushed(Ok(done)).expect("mark");
    append_until_rolled(&mut log, 1);
    assert!(spares(dir.path()).is_empty(), "the roll took them");
    let active = log.segments().last().expect("active");
    assert_eq!(
        active
            .log_path()
            .file_name()
            .expect("name")
            .to_string_lossy(),
        format!("{:020}.log", active.base_offset())
    );
    assert_eq!(
        file_len(active.offset_index().path()),
        10 * 1024 * 1024,
        "pre-allocated as a created index"
    );
    // A spare made by the next flush is left behind by a crash and removed at open.
    let job = log.take_roll_flush().expect("roll");
    let done = job.run().expect("fsync");
    log.mark_flushed(Ok(done)).expect("mark");
    assert_eq!(spares(dir.path()).len(), 3);
    let before = read_all(&log);
    drop(log);
    let log = open(dir.path(), small_segments());
    assert!(spares(dir.path()).is_empty());
    assert_eq!(read_all(&log), before);
    // And a clean close removes it too.
    let mut log = log;
    append_until_rolled(&mut log, 1);
    let job = log.take_roll_flush().expect("roll");
    let done = job.run().expect("fsync");
    log.mark_flushed(Ok(done)).expect("mark");
    log.close().expect("close");
    assert!(spares(dir.path()).is_empty());
}

/// `compression.type` on the leader path (Kafka's `LogValidator`): a batch whose codec is not
/// the topic's is rebuilt with the topic's codec and level, its records unchanged;
/// `producer` keeps each batch's codec; `uncompressed` stores none.
#[test]
fn leader_append_recompresses_to_the_topics_compression_type() {
    use krust_log::Compression;
    use krust_log::compression::TopicCompression;
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let sent = |codec: Compression| {
        let mut b = RecordBatchBuilder::new(0)
            .compression(codec)
            .producer(7, 1, 0);
        for i in 0..20 {
            b.append_kv(
                1_000 + i,
                Some(Bytes::from(format!("key-{i}"))),
                Some(Bytes::from(vec![b'x'; 200])),
            );
        }
        b.build_compressed(None).expect("compress")
    };
    for (topic, expect) in [
        (TopicCompression::Producer, None),
        (TopicCompression::Uncompressed, Some(Compression::None)),
        (TopicCompression::Gzip { level: 9 }, Some(Compression::Gzip)),
        (TopicCompression::Snappy, Some(Compression::Snappy)),
        (TopicCompression::Lz4 { level: 12 }, Some(Compression::Lz4)),
        (
            TopicCompression::Zstd { level: 19 },
            Some(Compression::Zstd),
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            compression: topic,
            ..LogConfig::default()
        };
        let mut log = open(dir.path(), config);
        for codec in codecs {
            let batch = sent(codec);
            let info = log
                .append_as_leader(vec![batch.clone()], 2, 5_000)
                .expect("append");
            let stored = &info.batches[0];
            let case = format!("topic {topic:?}, producer {codec:?}");
            assert_eq!(stored.compression(), expect.unwrap_or(codec), "{case}");
            assert_eq!(stored.records(), batch.records(), "{case}");
            assert_eq!(stored.producer_id(), 7, "{case}");
            assert_eq!(stored.base_sequence(), 0, "{case}");
            assert_eq!(stored.max_timestamp(), 1_019, "{case}");
            assert_eq!(stored.partition_leader_epoch(), 2, "{case}");
            assert!(stored.is_crc_valid(), "{case}");
        }
        let written = read_all(&log);
        assert_eq!(written.len(), codecs.len());
    }
}

/// A compressed batch whose payload holds another number of records than its header says
/// is refused with INVALID_RECORD (Kafka: "Incorrect declared batch size"), and nothing is
/// written; a payload that does not inflate gets Kafka's UNKNOWN_SERVER_ERROR.
#[test]
fn leader_append_refuses_compressed_batches_with_a_wrong_inner_count() {
    use krust_log::Compression;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), LogConfig::default());
    let mut b = RecordBatchBuilder::new(0).compression(Compression::Snappy);
    for i in 0..3 {
        b.append_kv(i, Some(Bytes::from(format!("k{i}"))), None);
    }
    let three = b.build_compressed(None).expect("compress");
    for declared in [2, 4] {
        let lying = RecordBatchBuilder::new(0)
            .compression(Compression::Snappy)
            .opaque_payload(three.payload(), declared)
            .last_offset_delta(declared - 1)
            .build();
        let err = log
            .append_as_leader(vec![lying], 0, 0)
            .expect_err("wrong inner count");
        assert_eq!(err.kafka_error_code(), INVALID_RECORD, "{declared}: {err}");
    }
    let garbage = RecordBatchBuilder::new(0)
        .compression(Compression::Zstd)
        .opaque_payload(Bytes::from_static(b"not zstd at all"), 1)
        .build();
    let err = log
        .append_as_leader(vec![garbage], 0, 0)
        .expect_err("garbage");
    assert_eq!(
        err.kafka_error_code(),
        krust_log::batch::UNKNOWN_SERVER_ERROR,
        "{err}"
    );
    assert_eq!(log.log_end_offset(), 0);
}
