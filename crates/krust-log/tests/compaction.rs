//! Log compaction (`cleanup.policy=compact`): the cleaner keeps the latest record per key,
//! removes tombstones after `delete.retention.ms`, never reorders or reassigns offsets, makes
//! progress with a tiny dedupe buffer, and survives a crash at every step of its segment swap.
//! Each test writes keyed records through the leader path into small segments, rolls so the
//! data is cleanable, cleans, and reads the whole log back. The main property runs with
//! uncompressed batches and with each codec: compressed batches are compacted record by record
//! and a rebuilt batch keeps its codec (Kafka's `MemoryRecords.filterTo`).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use krust_log::cleaner::{CrashPoint, ThrottleClock};
use krust_log::{
    Cleaner, CleanerConfig, CleanerError, CleanupPolicy, Compression, Log, LogConfig,
    RecordBatchBuilder,
};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;
const DELETE_RETENTION_MS: i64 = 10_000;

fn compacted_config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        segment_index_bytes: 1024,
        index_interval_bytes: 64,
        cleanup_policy: CleanupPolicy::Compact,
        delete_retention_ms: DELETE_RETENTION_MS,
        ..LogConfig::default()
    }
}

/// One write: key index and value (`None` = tombstone).
type Write = (u8, Option<u8>);

fn key(k: u8) -> Bytes {
    Bytes::from(format!("key-{k}"))
}

fn value(k: u8, v: u8, offset: i64) -> Bytes {
    Bytes::from(format!("value-{k}-{v}-{offset}"))
}

/// Appends writes in uncompressed batches of `per_batch`; returns the offset of every write.
fn append(log: &mut Log, writes: &[Write], per_batch: usize, ts: i64) -> Vec<i64> {
    append_compressed(log, writes, per_batch, ts, Compression::None)
}

/// [`append`] with batches compressed by `codec`.
fn append_compressed(
    log: &mut Log,
    writes: &[Write],
    per_batch: usize,
    ts: i64,
    codec: Compression,
) -> Vec<i64> {
    let mut offsets = Vec::new();
    for chunk in writes.chunks(per_batch.max(1)) {
        let mut b = RecordBatchBuilder::new(0).compression(codec);
        let base = log.log_end_offset();
        for (i, (k, v)) in chunk.iter().enumerate() {
            let offset = base + i as i64;
            b.append_kv(ts, Some(key(*k)), v.map(|v| value(*k, v, offset)));
            offsets.push(offset);
        }
        let batch = b.build_compressed(None).expect("compress");
        log.append_as_leader(vec![batch], 0, ts).expect("append");
    }
    offsets
}

/// Every batch of the log is in `codec` (a batch emptied by the cleaner has no payload).
fn check_codec(log: &Log, codec: Compression) {
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20).expect("read");
        for batch in &read.batches {
            if batch.record_count() > 0 {
                assert_eq!(
                    batch.compression(),
                    codec,
                    "batch at {}",
                    batch.base_offset()
                );
            }
            next = batch.next_offset();
        }
    }
}

/// Every record of the log: (offset, key, value), checking batch and record offset order.
fn read_all(log: &Log) -> Vec<(i64, Option<Bytes>, Option<Bytes>)> {
    let mut out: Vec<(i64, Option<Bytes>, Option<Bytes>)> = Vec::new();
    let mut next = log.log_start_offset();
    let mut last_batch_end = -1;
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20).expect("read");
        assert!(!read.batches.is_empty(), "no batch at {next}");
        for batch in &read.batches {
            assert!(
                batch.base_offset() > last_batch_end,
                "batches out of order at {}",
                batch.base_offset()
            );
            last_batch_end = batch.last_offset();
            for r in batch.records().expect("records") {
                let offset = batch.base_offset() + i64::from(r.offset_delta);
                assert!(offset <= batch.last_offset(), "record beyond its batch");
                if let Some(prev) = out.last() {
                    assert!(offset > prev.0, "offset {offset} after {}", prev.0);
                }
                out.push((offset, r.key, r.value));
            }
            next = batch.next_offset();
        }
    }
    out
}

/// Cleans until the checkpoint reaches the first uncleanable offset; returns the checkpoint
/// after each pass.
fn clean_fully(
    cleaner: &mut Cleaner,
    log: &mut Log,
    checkpoint: &mut Option<i64>,
    now: i64,
) -> Vec<i64> {
    let mut passes = Vec::new();
    for _ in 0..1000 {
        let to_clean = log.log_to_clean(*checkpoint, log.log_end_offset(), now);
        if to_clean.first_dirty_offset >= to_clean.first_uncleanable_offset {
            return passes;
        }
        let outcome = cleaner
            .clean(log, &to_clean, now, &HashMap::new())
            .expect("clean");
        assert!(
            outcome.next_dirty_offset > to_clean.first_dirty_offset,
            "no progress"
        );
        *checkpoint = Some(outcome.next_dirty_offset);
        passes.push(outcome.next_dirty_offset);
    }
    panic!("cleaning did not finish");
}

/// Latest write per key among `writes` at `offsets`: key → (offset, value).
fn latest(writes: &[Write], offsets: &[i64]) -> BTreeMap<u8, (i64, Option<u8>)> {
    writes
        .iter()
        .zip(offsets)
        .map(|((k, v), o)| (*k, (*o, *v)))
        .collect()
}

/// After a full clean (everything below the active segment cleaned, tombstones kept or not):
/// every surviving record is the latest of its key, and every key's latest write is present
/// (a tombstone only if `tombstones_kept`).
fn check_compacted(log: &Log, writes: &[Write], offsets: &[i64], tombstones_kept: bool) {
    let records = read_all(log);
    let latest = latest(writes, offsets);
    let by_offset: BTreeMap<i64, (Option<Bytes>, Option<Bytes>)> = records
        .iter()
        .map(|(o, k, v)| (*o, (k.clone(), v.clone())))
        .collect();
    for (k, (offset, v)) in &latest {
        let found = by_offset.get(offset);
        match (v, found) {
            (Some(v), Some((fk, fv))) => {
                assert_eq!(fk.as_ref(), Some(&key(*k)));
                assert_eq!(fv.as_ref(), Some(&value(*k, *v, *offset)));
            }
            (None, Some((fk, None))) if tombstones_kept => assert_eq!(fk.as_ref(), Some(&key(*k))),
            (None, None) if !tombstones_kept => {}
            other => panic!("key {k}: latest write at {offset} is {v:?}, log has {other:?}"),
        }
    }
    let active_base = log.segments().last().expect("active").base_offset();
    for (offset, k, _) in &records {
        if *offset >= active_base {
            continue;
        }
        let k = k.as_ref().expect("compacted records have keys");
        let idx: u8 = std::str::from_utf8(&k[4..])
            .expect("utf8")
            .parse()
            .expect("key index");
        assert_eq!(
            latest[&idx].0, *offset,
            "record at {offset} is not the latest of key {idx}"
        );
    }
}

fn writes_strategy() -> impl Strategy<Value = Vec<Write>> {
    proptest::collection::vec(
        (0u8..12, proptest::option::weighted(0.8, any::<u8>())),
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random keyed writes with tombstones over many segments, cleaned with a small dedupe
    /// buffer (after an optional crashed pass and reopen): the latest value of every key
    /// survives, nothing else below the active segment does, offsets stay ordered; tombstones
    /// survive until the delete horizon, then go.
    #[test]
    fn cleaning_keeps_exactly_the_latest_record_per_key(
        writes in writes_strategy(),
        per_batch in 1usize..4,
        entries in 3u64..40,
        codec in prop_oneof![
            Just(Compression::None),
            Just(Compression::Gzip),
            Just(Compression::Snappy),
            Just(Compression::Lz4),
            Just(Compression::Zstd),
        ],
        crash in proptest::option::of(prop_oneof![
            Just(CrashPoint::AfterCleanedWritten),
            Just(CrashPoint::AfterSwapRenamed),
            Just(CrashPoint::AfterOldSegmentsDeleted),
        ]),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
        let offsets = append_compressed(&mut log, &writes, per_batch, T0, codec);
        log.roll(log.log_end_offset(), T0).expect("roll");
        let mut cleaner = Cleaner::new(CleanerConfig {
            dedupe_buffer_size: 24 * entries,
            io_buffer_load_factor: 1.0,
            io_buffer_size: 256,
            ..CleanerConfig::default()
        });
        if let Some(point) = crash {
            // A pass dies part-way; reopening keeps a subset of the records, with the latest
            // write of every key among them.
            log.flush().expect("flush");
            let before = snapshot(&log);
            let recovery_point = log.recovery_point();
            cleaner.crash_at(Some(point));
            let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
            let crashed = cleaner.clean(&mut log, &to_clean, T0, &HashMap::new());
            prop_assert!(matches!(crashed, Err(CleanerError::InjectedCrash(_))), "{:?}", crashed);
            cleaner.crash_at(None);
            drop(log);
            log = Log::open(&dir.path().join("t-0"), compacted_config(), recovery_point).expect("reopen");
            let after = snapshot(&log);
            for (offset, record) in &after {
                prop_assert_eq!(before.get(offset), Some(record));
            }
            for (offset, _) in latest(&writes, &offsets).values() {
                prop_assert!(after.contains_key(offset), "latest write at {} lost", offset);
            }
        }
        let mut checkpoint = None;
        let passes = clean_fully(&mut cleaner, &mut log, &mut checkpoint, T0);
        prop_assert!(passes.windows(2).all(|w| w[0] < w[1]), "checkpoint advances: {passes:?}");
        prop_assert_eq!(checkpoint, Some(log.log_end_offset()));
        check_compacted(&log, &writes, &offsets, true);
        check_codec(&log, codec);

        // Past the delete horizon, the next pass (after new dirty data) drops the tombstones.
        let later = T0 + DELETE_RETENTION_MS + 1;
        let extra = [(200u8, Some(1u8))];
        let extra_offsets = append(&mut log, &extra, 1, later);
        log.roll(log.log_end_offset(), later).expect("roll");
        clean_fully(&mut cleaner, &mut log, &mut checkpoint, later);
        let all_writes: Vec<Write> = writes.iter().chain(&extra).copied().collect();
        let all_offsets: Vec<i64> = offsets.iter().chain(&extra_offsets).copied().collect();
        check_compacted(&log, &all_writes, &all_offsets, false);

        // Reopening reads the same compacted history.
        let before = read_all(&log);
        let recovery_point = log.close().expect("close");
        let log = Log::open(&dir.path().join("t-0"), compacted_config(), recovery_point).expect("reopen");
        prop_assert_eq!(read_all(&log), before);
    }
}

fn many_writes() -> Vec<Write> {
    (0..200u32)
        .map(|i| {
            (
                (i % 17) as u8,
                if i % 23 == 0 {
                    None
                } else {
                    Some((i % 200) as u8)
                },
            )
        })
        .collect()
}

#[test]
fn tiny_dedupe_buffer_makes_progress_over_several_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    let writes = many_writes();
    let offsets = append(&mut log, &writes, 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig {
        dedupe_buffer_size: 24 * 4,
        io_buffer_load_factor: 1.0,
        ..CleanerConfig::default()
    });
    let mut checkpoint = None;
    let passes = clean_fully(&mut cleaner, &mut log, &mut checkpoint, T0);
    assert!(
        passes.len() > 3,
        "a 4-entry map needs several passes over 17 keys: {passes:?}"
    );
    assert!(passes.windows(2).all(|w| w[0] < w[1]));
    check_compacted(&log, &writes, &offsets, true);
}

#[test]
fn a_dedupe_buffer_without_room_for_one_entry_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    append(&mut log, &many_writes(), 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig {
        dedupe_buffer_size: 10,
        ..CleanerConfig::default()
    });
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    assert!(matches!(
        cleaner.clean(&mut log, &to_clean, T0, &HashMap::new()),
        Err(CleanerError::DedupeBufferTooSmall {
            dedupe_buffer_size: 10
        })
    ));
}

#[test]
fn dirty_ratio_and_max_compaction_lag_decide_when_to_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = compacted_config();
    let mut log = Log::open(&dir.path().join("t-0"), config.clone(), 0).expect("open");
    append(&mut log, &many_writes(), 2, T0);
    let active_base = log.segments().last().expect("active").base_offset();
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    assert_eq!(to_clean.first_dirty_offset, 0);
    assert_eq!(
        to_clean.first_uncleanable_offset, active_base,
        "the active segment is uncleanable"
    );
    assert_eq!(to_clean.clean_bytes, 0);
    assert!((to_clean.cleanable_ratio - 1.0).abs() < f64::EPSILON);
    assert!(to_clean.needs_cleaning(0.5));

    // The high watermark (last stable offset) bounds the range, rounded down to a segment.
    let lso = log.segments().nth(2).expect("third segment").base_offset() + 1;
    let bounded = log.log_to_clean(None, lso, T0);
    assert_eq!(bounded.first_uncleanable_offset, lso - 1);

    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let outcome = cleaner
        .clean(&mut log, &to_clean, T0, &HashMap::new())
        .expect("clean");
    assert_eq!(outcome.next_dirty_offset, active_base);
    let after = log.log_to_clean(Some(outcome.next_dirty_offset), log.log_end_offset(), T0);
    assert_eq!(after.cleanable_bytes, 0);
    assert!(!after.needs_cleaning(0.5));

    // A checkpoint beyond the log end is reset to the log start and flagged.
    let reset = log.log_to_clean(Some(log.log_end_offset() + 5), log.log_end_offset(), T0);
    assert!(reset.force_update_checkpoint);
    assert_eq!(reset.first_dirty_offset, log.log_start_offset());

    // min.compaction.lag.ms keeps recent segments out; max.compaction.lag.ms forces a clean.
    drop(log);
    config.min_compaction_lag_ms = 60_000;
    let log = Log::open(&dir.path().join("t-0"), config.clone(), 0).expect("reopen");
    let lagged = log.log_to_clean(Some(0), log.log_end_offset(), T0 + 1000);
    assert_eq!(
        lagged.first_uncleanable_offset, 0,
        "every segment is younger than the lag"
    );
    config.min_compaction_lag_ms = 0;
    config.max_compaction_lag_ms = 1000;
    drop(log);
    let log = Log::open(&dir.path().join("t-0"), config, 0).expect("reopen");
    let late = log.log_to_clean(Some(0), log.log_end_offset(), T0 + 5000);
    assert!(late.max_compaction_delay_ms > 0);
    assert!(
        late.needs_cleaning(1.0),
        "overdue dirty data is cleaned whatever the ratio"
    );
}

/// State of the log as (offset → (key, value)) for comparing before/after a crash.
fn snapshot(log: &Log) -> BTreeMap<i64, (Option<Bytes>, Option<Bytes>)> {
    read_all(log)
        .into_iter()
        .map(|(o, k, v)| (o, (k, v)))
        .collect()
}

#[test]
fn a_crash_at_any_step_of_the_swap_loses_nothing() {
    for point in [
        CrashPoint::AfterCleanedWritten,
        CrashPoint::AfterSwapRenamed,
        CrashPoint::AfterOldSegmentsDeleted,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t-0");
        let mut log = Log::open(&path, compacted_config(), 0).expect("open");
        let writes = many_writes();
        let offsets = append(&mut log, &writes, 2, T0);
        log.roll(log.log_end_offset(), T0).expect("roll");
        log.flush().expect("flush");
        let before = snapshot(&log);
        let recovery_point = log.recovery_point();
        let mut cleaner = Cleaner::new(CleanerConfig::default());
        cleaner.crash_at(Some(point));
        let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
        let result = cleaner.clean(&mut log, &to_clean, T0, &HashMap::new());
        assert!(
            matches!(result, Err(CleanerError::InjectedCrash(p)) if p == point),
            "{point:?}: {result:?}"
        );
        drop(log);
        let names: Vec<String> = std::fs::read_dir(&path)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        let expected_suffix = if point == CrashPoint::AfterCleanedWritten {
            ".log.cleaned"
        } else {
            ".log.swap"
        };
        assert!(
            names.iter().any(|n| n.ends_with(expected_suffix)),
            "{point:?}: {names:?}"
        );

        let mut log = Log::open(&path, compacted_config(), recovery_point).expect("reopen");
        let after = snapshot(&log);
        let leftovers: Vec<&String> = names
            .iter()
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
            .collect();
        let names_now: Vec<String> = std::fs::read_dir(&path)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names_now
                .iter()
                .any(|n| n.ends_with(".cleaned") || n.ends_with(".swap")),
            "{point:?}: {leftovers:?} left"
        );
        // Every record after recovery existed before (no invented or duplicated offsets) …
        for (offset, record) in &after {
            assert_eq!(
                before.get(offset),
                Some(record),
                "{point:?}: record at {offset}"
            );
        }
        // … and every key's latest write is still there.
        for (_, (offset, _)) in latest(&writes, &offsets) {
            assert!(
                after.contains_key(&offset),
                "{point:?}: latest write at {offset} lost"
            );
        }
        if point == CrashPoint::AfterCleanedWritten {
            assert_eq!(after, before, "the old segments are still the log");
        }
        // A new pass from scratch finishes the job.
        let mut checkpoint = None;
        let mut cleaner = Cleaner::new(CleanerConfig::default());
        clean_fully(&mut cleaner, &mut log, &mut checkpoint, T0);
        check_compacted(&log, &writes, &offsets, true);
    }
}

#[test]
fn compact_keeps_old_segments_and_compact_delete_also_applies_retention() {
    for (policy, expect_deleted) in [
        (CleanupPolicy::Compact, false),
        (CleanupPolicy::CompactDelete, true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            retention_ms: 1000,
            cleanup_policy: policy,
            ..compacted_config()
        };
        let mut log = Log::open(&dir.path().join("t-0"), config, 0).expect("open");
        append(&mut log, &many_writes(), 2, T0);
        log.roll(log.log_end_offset(), T0).expect("roll");
        let mut cleaner = Cleaner::new(CleanerConfig::default());
        let mut checkpoint = None;
        clean_fully(&mut cleaner, &mut log, &mut checkpoint, T0);
        let segments = log.segment_count();
        // Emptied segments have no timestamp: retention uses their files' mtime (wall clock).
        let wall_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        let outcome = log.apply_retention(wall_now + 10_000).expect("retention");
        assert_eq!(outcome.time_breached > 0, expect_deleted, "{policy:?}");
        assert_eq!(log.segment_count() < segments, expect_deleted, "{policy:?}");
    }
}

#[test]
fn the_delete_policy_is_not_cleaned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::Delete,
        ..compacted_config()
    };
    let mut log = Log::open(&dir.path().join("t-0"), config, 0).expect("open");
    append(&mut log, &many_writes(), 2, T0);
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    assert!(matches!(
        cleaner.clean(&mut log, &to_clean, T0, &HashMap::new()),
        Err(CleanerError::NotCompacted { .. })
    ));
}

#[test]
fn records_without_keys_are_dropped_and_batches_keep_their_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    // Batch 0..=2: k1=a, no key, k2=b; batch 3..=4: k1=c, k2=d (last of producer 9).
    let mut b = RecordBatchBuilder::new(0).producer(9, 0, 0);
    b.append_kv(T0, Some(Bytes::from("k1")), Some(Bytes::from("a")));
    b.append_kv(T0, None, Some(Bytes::from("x")));
    b.append_kv(T0, Some(Bytes::from("k2")), Some(Bytes::from("b")));
    log.append_as_leader(vec![b.build()], 0, T0)
        .expect("append");
    let mut b = RecordBatchBuilder::new(0).producer(9, 0, 3);
    b.append_kv(T0, Some(Bytes::from("k1")), Some(Bytes::from("c")));
    b.append_kv(T0, Some(Bytes::from("k1")), Some(Bytes::from("d")));
    log.append_as_leader(vec![b.build()], 0, T0)
        .expect("append");
    let mut b = RecordBatchBuilder::new(0).producer(9, 0, 5);
    b.append_kv(T0, Some(Bytes::from("k2")), Some(Bytes::from("e")));
    log.append_as_leader(vec![b.build()], 0, T0)
        .expect("append");
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    // Producer 9's last batch ends at 5; the first batch is emptied and goes entirely.
    let producers = HashMap::from([(9, 5)]);
    cleaner
        .clean(&mut log, &to_clean, T0, &producers)
        .expect("clean");
    let read = log.read(0, 1 << 20).expect("read");
    let shape: Vec<(i64, i64, i32)> = read
        .batches
        .iter()
        .map(|b| (b.base_offset(), b.last_offset(), b.record_count()))
        .collect();
    assert_eq!(
        shape,
        vec![(3, 4, 1), (5, 5, 1)],
        "the rewritten batch keeps its last offset"
    );
    let records = read_all(&log);
    let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![4, 5]);
}

#[test]
fn an_active_producers_emptied_last_batch_keeps_its_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    let mut b = RecordBatchBuilder::new(0).producer(9, 2, 0);
    b.append_kv(T0, Some(Bytes::from("k")), Some(Bytes::from("old")));
    b.append_kv(T0, Some(Bytes::from("k")), Some(Bytes::from("old2")));
    log.append_as_leader(vec![b.build()], 0, T0)
        .expect("append");
    let mut b = RecordBatchBuilder::new(0);
    b.append_kv(T0 + 1, Some(Bytes::from("k")), Some(Bytes::from("new")));
    log.append_as_leader(vec![b.build()], 0, T0)
        .expect("append");
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    cleaner
        .clean(&mut log, &to_clean, T0, &HashMap::from([(9, 1)]))
        .expect("clean");
    let read = log.read(0, 1 << 20).expect("read");
    let first = &read.batches[0];
    assert_eq!(
        (
            first.base_offset(),
            first.last_offset(),
            first.record_count()
        ),
        (0, 1, 0)
    );
    assert_eq!(
        (
            first.producer_id(),
            first.producer_epoch(),
            first.base_sequence()
        ),
        (9, 2, 0)
    );
    assert_eq!(read.batches[1].base_offset(), 2);
}

#[test]
fn tombstone_batches_carry_the_delete_horizon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    append(&mut log, &[(1, Some(1)), (1, None), (2, Some(2))], 3, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let now = T0 + 5;
    let to_clean = log.log_to_clean(None, log.log_end_offset(), now);
    cleaner
        .clean(&mut log, &to_clean, now, &HashMap::new())
        .expect("clean");
    let read = log.read(0, 1 << 20).expect("read");
    let batch = &read.batches[0];
    assert!(batch.has_delete_horizon());
    assert_eq!(batch.base_timestamp(), now + DELETE_RETENTION_MS);
    assert_eq!((batch.base_offset(), batch.last_offset()), (0, 2));
    let records = batch.records().expect("records");
    assert_eq!(records.len(), 2);
    // Record timestamps are unchanged: deltas are relative to the horizon now.
    for r in &records {
        assert_eq!(batch.base_timestamp() + r.timestamp_delta, T0);
    }
    assert_eq!(batch.max_timestamp(), T0);
}

/// Virtual time for the throttle.
#[derive(Debug, Default)]
struct VirtualClock {
    now: i64,
}
impl ThrottleClock for VirtualClock {
    fn now_ms(&mut self) -> i64 {
        // Every I/O call takes 5 ms of virtual time.
        self.now += 5;
        self.now
    }
    fn sleep_ms(&mut self, ms: u64) {
        self.now += i64::try_from(ms).expect("sleep fits");
    }
}

#[test]
fn the_io_throttle_holds_the_cleaner_to_its_rate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    append(&mut log, &many_writes(), 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let rate = 10_000.0;
    let mut cleaner = Cleaner::with_clock(
        CleanerConfig {
            io_max_bytes_per_second: rate,
            io_buffer_size: 512,
            ..CleanerConfig::default()
        },
        VirtualClock::default(),
    );
    let bytes = log.size_in_bytes();
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    let outcome = cleaner
        .clean(&mut log, &to_clean, T0, &HashMap::new())
        .expect("clean");
    assert!(outcome.throttled_ms > 0, "{outcome:?}");
    // Reads alone are twice the log (map + rewrite): at 10 kB/s that takes ≥ 2·bytes/10 ms,
    // minus the last unchecked interval.
    let elapsed = cleaner.throttler().clock().now;
    let min_ms = i64::try_from(2 * bytes * 1000).expect("fits") / 10_000 - 400;
    assert!(
        elapsed >= min_ms,
        "elapsed {elapsed} ms < {min_ms} ms for {bytes} bytes"
    );
}

#[test]
fn a_compacted_log_rolls_within_max_compaction_lag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 1 << 20,
        max_compaction_lag_ms: 1000,
        ..compacted_config()
    };
    assert_eq!(config.max_segment_ms(), 1000);
    let mut log = Log::open(&dir.path().join("t-0"), config, 0).expect("open");
    append(&mut log, &[(1, Some(1))], 1, T0);
    append(&mut log, &[(1, Some(2))], 1, T0 + 500);
    assert_eq!(log.segment_count(), 1);
    append(&mut log, &[(1, Some(3))], 1, T0 + 1001);
    assert_eq!(
        log.segment_count(),
        2,
        "rolled once the first batch was older than the lag"
    );
}

#[test]
fn compaction_configs_are_validated() {
    let bad = LogConfig {
        min_compaction_lag_ms: 10,
        max_compaction_lag_ms: 5,
        ..compacted_config()
    };
    assert!(bad.validate().is_err());
    let bad = LogConfig {
        min_cleanable_dirty_ratio: 1.5,
        ..compacted_config()
    };
    assert!(bad.validate().is_err());
    let bad = LogConfig {
        min_cleanable_dirty_ratio: f64::NAN,
        ..compacted_config()
    };
    assert!(bad.validate().is_err());
    assert_eq!(
        CleanupPolicy::parse("compact, delete"),
        Some(CleanupPolicy::CompactDelete)
    );
    assert_eq!(
        CleanupPolicy::parse("delete,compact"),
        Some(CleanupPolicy::CompactDelete)
    );
    assert_eq!(
        CleanupPolicy::parse("compact"),
        Some(CleanupPolicy::Compact)
    );
    assert_eq!(CleanupPolicy::parse("delete"), Some(CleanupPolicy::Delete));
    assert_eq!(CleanupPolicy::parse(""), None);
    assert_eq!(CleanupPolicy::parse("compact,shred"), None);
    assert!(compacted_config().validate().is_ok());
}

/// Names of the files in `dir` ending in `suffix`.
fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

#[test]
fn appends_and_rolls_while_a_pass_runs_unlocked_are_kept() {
    // The broker runs `prepare` without the partition lock: produce goes on meanwhile. The
    // swap must keep everything appended since, and clean what the snapshot covered.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, compacted_config(), 0).expect("open");
    let writes = many_writes();
    let offsets = append(&mut log, &writes, 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    let snapshot = log.cleaning_snapshot(&to_clean).expect("snapshot");
    let prepared = cleaner.prepare(&snapshot, T0, &HashMap::new());
    // Meanwhile: more writes of the same keys, rolling several times.
    let later: Vec<Write> = (0..60u32).map(|i| ((i % 17) as u8, Some(7))).collect();
    let later_offsets = append(&mut log, &later, 2, T0);
    assert!(!files_ending(&path, ".log.cleaned").is_empty());
    let outcome = cleaner.commit(&mut log, prepared).expect("commit");
    assert!(!outcome.aborted);
    assert!(outcome.groups > 0);
    assert!(files_ending(&path, ".cleaned").is_empty());
    let records = snapshot_records(&log);
    for offset in &later_offsets {
        assert!(records.contains_key(offset), "later write at {offset} lost");
    }
    // The snapshot's part was cleaned: per key only its latest record below the pass's end.
    let cleaned_part: Vec<&i64> = records
        .keys()
        .filter(|o| **o < outcome.next_dirty_offset)
        .collect();
    assert_eq!(
        cleaned_part.len(),
        latest(&writes, &offsets).len(),
        "{cleaned_part:?}"
    );
    // And a reopen sees the same log (the swap was made durable and indexes follow).
    let before = snapshot_records(&log);
    let rp = log.close().expect("close");
    let log = Log::open(&path, compacted_config(), rp).expect("reopen");
    assert_eq!(snapshot_records(&log), before);
}

fn snapshot_records(log: &Log) -> BTreeMap<i64, (Option<Bytes>, Option<Bytes>)> {
    snapshot(log)
}

#[test]
fn a_pass_prepared_before_a_truncation_is_discarded() {
    // A follower truncated below the pass's end while it ran: the offset map may point at
    // records that are gone, so applying it could drop the only copy of a key. Nothing is
    // swapped, the `.cleaned` files go, and the checkpoint stays.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, compacted_config(), 0).expect("open");
    let writes = many_writes();
    append(&mut log, &writes, 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    let snapshot = log.cleaning_snapshot(&to_clean).expect("snapshot");
    let prepared = cleaner.prepare(&snapshot, T0, &HashMap::new());
    // The newest half goes, and other records take its offsets.
    log.truncate_to(100).expect("truncate");
    let other: Vec<Write> = (0..40u32).map(|i| ((i % 5) as u8, Some(9))).collect();
    append(&mut log, &other, 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let before = snapshot_records(&log);
    let outcome = cleaner.commit(&mut log, prepared).expect("commit");
    assert!(outcome.aborted);
    assert_eq!(outcome.next_dirty_offset, to_clean.first_dirty_offset);
    assert_eq!(outcome.groups, 0);
    assert_eq!(snapshot_records(&log), before, "nothing swapped");
    assert!(files_ending(&path, ".cleaned").is_empty());
}

#[test]
fn a_pass_whose_first_segments_were_deleted_meanwhile_skips_their_group() {
    // DeleteRecords (or retention) removed the oldest segments while the pass ran: their
    // group is skipped, later groups are swapped, and the first dirty offset does not move
    // (the next pass maps the range again).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, compacted_config(), 0).expect("open");
    let writes = many_writes();
    append(&mut log, &writes, 2, T0);
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let to_clean = log.log_to_clean(None, log.log_end_offset(), T0);
    let snapshot = log.cleaning_snapshot(&to_clean).expect("snapshot");
    let prepared = cleaner.prepare(&snapshot, T0, &HashMap::new());
    let second_base = log.segments().nth(1).expect("two segments").base_offset();
    log.set_high_watermark(log.log_end_offset());
    log.delete_records(second_base).expect("delete records");
    let before = snapshot_records(&log);
    let outcome = cleaner.commit(&mut log, prepared).expect("commit");
    assert!(!outcome.aborted);
    assert_eq!(outcome.next_dirty_offset, to_clean.first_dirty_offset);
    assert!(files_ending(&path, ".cleaned").is_empty());
    let after = snapshot_records(&log);
    assert!(after.len() < before.len(), "later groups were cleaned");
    for (offset, record) in &after {
        assert_eq!(before.get(offset), Some(record), "record at {offset}");
    }
    assert_eq!(log.log_start_offset(), second_base);
}

/// Every batch of the log: (base offset, control, transactional, delete horizon set, keys).
fn batches(log: &Log) -> Vec<(i64, bool, bool, bool, Vec<String>)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20).expect("read");
        if read.batches.is_empty() {
            break;
        }
        for b in &read.batches {
            let keys = if b.is_control() {
                Vec::new()
            } else {
                b.records()
                    .expect("records")
                    .iter()
                    .filter_map(|r| r.key.as_ref())
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect()
            };
            out.push((
                b.base_offset(),
                b.is_control(),
                b.is_transactional(),
                b.has_delete_horizon(),
                keys,
            ));
            next = b.next_offset();
        }
    }
    out
}

/// Kafka's transactional cleaning (`CleanedTransactionMetadata`): aborted data goes at once,
/// committed transactional data is compacted like any other, a marker stays while its
/// transaction still had data in the pass, then gets a delete horizon, and goes once past it.
#[test]
fn aborted_data_goes_and_markers_of_emptied_transactions_go_after_their_horizon() {
    use krust_log::txn_index::AbortedTxn;
    use krust_log::txn_marker::EndTxnMarker;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(&dir.path().join("t-0"), compacted_config(), 0).expect("open");
    let txn_write = |log: &mut Log, pid: i64, k: u8, commit: bool| {
        let first = log.log_end_offset();
        let mut b = RecordBatchBuilder::new(0)
            .producer(pid, 0, 0)
            .transactional(true);
        b.append_kv(T0, Some(key(k)), Some(value(k, 1, first)));
        log.append_as_leader(vec![b.build()], 0, T0)
            .expect("txn data");
        let marker = EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        };
        let at = log
            .append_as_leader(vec![marker.batch(pid, 0, T0)], 0, T0)
            .expect("marker")
            .first_offset;
        if !commit {
            log.append_aborted_txn(AbortedTxn {
                producer_id: pid,
                first_offset: first,
                last_offset: at,
                last_stable_offset: at + 1,
            })
            .expect("index");
        }
    };
    txn_write(&mut log, 1, 1, true); // offsets 0, 1: key-1 committed (overwritten below)
    txn_write(&mut log, 2, 2, false); // 2, 3: key-2 aborted
    txn_write(&mut log, 3, 4, true); // 4, 5: key-4 committed, the latest for its key
    append(&mut log, &[(1, Some(3)), (3, Some(4))], 2, T0); // 6, 7
    log.roll(log.log_end_offset(), T0).expect("roll");
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let mut pass = |log: &mut Log, now: i64| {
        let to_clean = log.log_to_clean(None, log.log_end_offset(), now);
        cleaner
            .clean(log, &to_clean, now, &HashMap::new())
            .expect("clean");
        batches(log)
    };
    let k = |s: &str| vec![s.to_string()];
    // Pass 1: the aborted and the overwritten transactional data go; both markers stay (this
    // pass read data of their transactions), the ABORT marker still indexed.
    assert_eq!(
        pass(&mut log, T0 + 1),
        vec![
            (1, true, true, false, vec![]),
            (3, true, true, false, vec![]),
            (4, false, true, false, k("key-4")),
            (5, true, true, false, vec![]),
            (6, false, false, false, vec!["key-1".into(), "key-3".into()]),
        ]
    );
    assert_eq!(
        log.all_aborted_txns().len(),
        1,
        "the ABORT marker stays indexed"
    );
    // Pass 2: the markers of the emptied transactions get a delete horizon; the one of the
    // transaction with data left does not.
    assert_eq!(
        pass(&mut log, T0 + 2),
        vec![
            (1, true, true, true, vec![]),
            (3, true, true, true, vec![]),
            (4, false, true, false, k("key-4")),
            (5, true, true, false, vec![]),
            (6, false, false, false, vec!["key-1".into(), "key-3".into()]),
        ]
    );
    assert!(
        log.all_aborted_txns().is_empty(),
        "no aborted data left to index"
    );
    // Pass 3, past the horizon: those markers go.
    assert_eq!(
        pass(&mut log, T0 + 3 + DELETE_RETENTION_MS),
        vec![
            (4, false, true, false, k("key-4")),
            (5, true, true, false, vec![]),
            (6, false, false, false, vec!["key-1".into(), "key-3".into()]),
        ]
    );
}

#[test]
fn aborted_transaction_entries_stay_with_their_markers_and_survive_a_restart() {
    use krust_log::txn_index::AbortedTxn;
    use krust_log::txn_marker::EndTxnMarker;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, compacted_config(), 0).expect("open");
    let mut expected = Vec::new();
    // Aborted transactions spread over several segments, between keyed writes.
    for round in 0..4i64 {
        append(&mut log, &many_writes()[..20], 2, T0);
        let first = log.log_end_offset();
        let mut b = RecordBatchBuilder::new(0)
            .producer(round, 0, 0)
            .transactional(true);
        b.append_kv(T0, Some(key(1)), Some(value(1, 1, first)));
        log.append_as_leader(vec![b.build()], 0, T0).expect("txn");
        let marker = EndTxnMarker {
            commit: false,
            coordinator_epoch: 0,
        };
        let info = log
            .append_as_leader(vec![marker.batch(round, 0, T0)], 0, T0)
            .expect("marker");
        let txn = AbortedTxn {
            producer_id: round,
            first_offset: first,
            last_offset: info.first_offset,
            last_stable_offset: info.first_offset + 1,
        };
        log.append_aborted_txn(txn).expect("index");
        expected.push(txn);
    }
    log.roll(log.log_end_offset(), T0).expect("roll");
    assert!(log.segment_count() > 3);
    assert_eq!(log.all_aborted_txns(), expected);
    let mut cleaner = Cleaner::new(CleanerConfig::default());
    let mut checkpoint = None;
    clean_fully(&mut cleaner, &mut log, &mut checkpoint, T0);
    assert_eq!(log.all_aborted_txns(), expected, "after cleaning");
    let recovery_point = log.close().expect("close");
    let log = Log::open(&path, compacted_config(), recovery_point).expect("reopen");
    assert!(!log.txn_indexes_need_rebuild());
    assert_eq!(
        log.all_aborted_txns(),
        expected,
        "read back from the .txnindex files"
    );
}
