//! Crash recovery as a property, over thousands of seeded cases.
//!
//! Each case writes random batches through the leader path into a log with small segments and
//! indexes (so it rolls by size and by full index), flushing at random points (which moves the
//! recovery point), and runs the flush each roll leaves behind (`FlushJob`) at a random later
//! point or never, in any order (which moves the recovery point to that roll's segment base
//! only, and makes only the segments below it durable), then "crashes" (drops the log
//! without closing it: the active segment's indexes were never trimmed, entries after the last
//! flush never written) and damages the directory in one of these ways:
//!
//! - `Cut`: the last segment is cut at a random byte;
//! - `FlipBit`: one bit of one batch is flipped;
//! - `DeleteIndex` / `DeleteTimeIndex`: a segment's `.index` / `.timeindex` is deleted;
//! - `CorruptIndex`: random bytes of a segment's `.index` or `.timeindex` are overwritten or
//!   appended;
//! - `LoseUnflushed`: the directory goes back to what was last made durable — by the last
//!   `flush()`, and for the segments below a finished roll flush, by that flush (files
//!   created since are gone) — except that the index files of the segment holding the recovery
//!   point and later ones — written but not fsynced by flush — come back as they were then, as
//!   they are now, or zeroed;
//! - `None`: nothing beyond the crash.
//!
//! Damage to data only hits bytes the recovery point does not vouch for (half the cases reopen
//! with recovery point 0, where every byte is fair game) and never the `baseOffset` and
//! `partitionLeaderEpoch` fields, which Kafka's format leaves outside the CRC (a flip there is
//! undetectable by design; `base_offset_flip_that_breaks_order_is_truncated` covers the part
//! that is detectable). After reopening, the log must be exactly the longest valid prefix of
//! what was written, indexes must agree with the data, timestamp lookups must match a scan,
//! appends must continue at the right offset, and a second reopen must change nothing.
//!
//! `KRUST_LOG_SEED=n` reruns one case; `KRUST_LOG_CASES=n` sets how many run (default 3000).

mod common;

use std::path::Path;

use bytes::Bytes;
use common::temp_root;
use krust_log::batch::MAX_BATCH_BYTES;
use krust_log::{BatchReader, Log, LogConfig, LogOpenOptions, RecordBatch, RecordBatchBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    None,
    Cut,
    FlipBit,
    DeleteIndex,
    DeleteTimeIndex,
    CorruptIndex,
    LoseUnflushed,
}

const DAMAGES: [Damage; 7] = [
    Damage::None,
    Damage::Cut,
    Damage::FlipBit,
    Damage::DeleteIndex,
    Damage::DeleteTimeIndex,
    Damage::CorruptIndex,
    Damage::LoseUnflushed,
];

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// A batch as laid out on disk.
#[derive(Debug, Clone)]
struct Placed {
    segment_base: i64,
    position: u64,
    batch: RecordBatch,
}

fn open(
    dir: &Path,
    config: &LogConfig,
    recovery_point: i64,
) -> Result<(Log, krust_log::RecoveryReport), String> {
    Log::open_with(
        dir,
        config.clone(),
        LogOpenOptions {
            recovery_point,
            log_start_offset: 0,
            now_ms: 0,
        },
    )
    .map_err(|e| format!("open failed: {e:?}"))
}

fn read_all(log: &Log) -> Result<Vec<RecordBatch>, String> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log
            .read(offset, 64 * 1024)
            .map_err(|e| format!("read at {offset}: {e:?}"))?;
        check!(
            !read.batches.is_empty(),
            "read at {offset} made no progress"
        );
        offset = read.batches.last().map_or(offset, RecordBatch::next_offset);
        out.extend(read.batches);
    }
    Ok(out)
}

fn layout(log: &Log) -> Vec<Placed> {
    let mut out = Vec::new();
    for segment in log.segments() {
        let bytes = std::fs::read(segment.log_path()).expect("read segment");
        let mut position = 0u64;
        let (batches, stop) = BatchReader::new(Bytes::from(bytes), MAX_BATCH_BYTES).read_all();
        assert!(stop.is_none(), "fresh log has a bad batch: {stop:?}");
        for batch in batches {
            let size = batch.size_in_bytes() as u64;
            out.push(Placed {
                segment_base: segment.base_offset(),
                position,
                batch,
            });
            position += size;
        }
    }
    out
}

/// Every file of the directory, by name.
fn snapshot_dir(dir: &Path) -> Result<std::collections::BTreeMap<String, Vec<u8>>, String> {
    let mut files = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(
            name,
            std::fs::read(entry.path()).map_err(|e| e.to_string())?,
        );
    }
    Ok(files)
}

fn seg_path(dir: &Path, base: i64, suffix: &str) -> std::path::PathBuf {
    dir.join(format!("{base:020}{suffix}"))
}

/// Reference answer for a timestamp lookup, by scanning every record.
fn expected_lookup(batches: &[RecordBatch], target: i64) -> Option<(i64, i64)> {
    batches.iter().find_map(|b| {
        b.records().expect("records").iter().find_map(|r| {
            let ts = b.base_timestamp() + r.timestamp_delta;
            (ts >= target).then_some((ts, b.base_offset() + i64::from(r.offset_delta)))
        })
    })
}

/// Offset and time index entries agree with the segment bytes.
fn check_indexes(log: &Log, check_offset: bool, check_time: bool) -> Result<(), String> {
    for segment in log.segments() {
        let bytes = Bytes::from(std::fs::read(segment.log_path()).map_err(|e| e.to_string())?);
        let (batches, stop) = BatchReader::new(bytes.clone(), MAX_BATCH_BYTES).read_all();
        check!(
            stop.is_none(),
            "segment {} has a bad batch after recovery: {stop:?}",
            segment.base_offset()
        );
        check!(
            batches
                .iter()
                .map(|b| b.size_in_bytes() as u64)
                .sum::<u64>()
                == segment.size(),
            "segment {} size mismatch",
            segment.base_offset()
        );
        let mut positions = std::collections::HashMap::new();
        let mut pos = 0u64;
        for b in &batches {
            positions.insert(pos, b.clone());
            pos += b.size_in_bytes() as u64;
        }
        for e in segment
            .offset_index()
            .entries()
            .into_iter()
            .filter(|_| check_offset)
        {
            let b = positions.get(&u64::from(e.position));
            check!(
                b.is_some_and(|b| b.last_offset() == e.offset),
                "segment {}: offset index entry {e:?} does not point at its batch",
                segment.base_offset()
            );
        }
        if !check_time {
            continue;
        }
        let mut previous = i64::MIN;
        for e in segment.time_index().entries() {
            check!(e.timestamp > previous, "time index not increasing: {e:?}");
            previous = e.timestamp;
            let max_up_to = batches
                .iter()
                .filter(|b| b.last_offset() <= e.offset)
                .map(RecordBatch::max_timestamp)
                .max();
            check!(
                max_up_to == Some(e.timestamp)
                    && batches
                        .iter()
                        .any(|b| b.last_offset() == e.offset && b.max_timestamp() == e.timestamp),
                "segment {}: time index entry {e:?} does not match the data: {:?} / {:?}",
                segment.base_offset(),
                segment.time_index().entries(),
                batches
                    .iter()
                    .map(|b| (b.last_offset(), b.max_timestamp()))
                    .collect::<Vec<_>>()
            );
        }
        let true_max = batches
            .iter()
            .map(RecordBatch::max_timestamp)
            .max()
            .unwrap_or(-1);
        check!(
            segment.max_timestamp().timestamp == true_max,
            "segment {}: max timestamp {:?}, data says {true_max}",
            segment.base_offset(),
            segment.max_timestamp()
        );
    }
    Ok(())
}

fn run_case(seed: u64) -> Result<String, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let damage = DAMAGES[(seed % DAMAGES.len() as u64) as usize];
    let use_recovery_point = rng.gen_bool(0.5);
    let config = LogConfig {
        segment_bytes: rng.gen_range(1_500..8_000),
        index_interval_bytes: rng.gen_range(0..1_200),
        segment_index_bytes: rng.gen_range(48..400),
        ..LogConfig::default()
    };
    let root = temp_root();
    let dir = root.path().join("topic-0");

    // Write.
    let (mut log, _) = open(&dir, &config, 0)?;
    let mut flushed_files = snapshot_dir(&dir)?;
    let mut written: Vec<RecordBatch> = Vec::new();
    let mut epoch = 0;
    let mut ts: i64 = rng.gen_range(0..1_000);
    let mut recovery_point = 0;
    let mut roll_flushes = Vec::new();
    for _ in 0..rng.gen_range(3..40) {
        if rng.gen_bool(0.1) {
            epoch += 1;
        }
        let mut b = RecordBatchBuilder::new(0);
        for _ in 0..rng.gen_range(1..5) {
            ts += rng.gen_range(-20..60);
            let value_len = rng.gen_range(0..300);
            let key = rng
                .gen_bool(0.5)
                .then(|| Bytes::from(vec![7u8; rng.gen_range(0..20)]));
            b.append_kv(ts.max(0), key, Some(Bytes::from(vec![1u8; value_len])));
        }
        let info = log
            .append_as_leader(vec![b.build()], epoch, 0)
            .map_err(|e| format!("append: {e:?}"))?;
        written.extend(info.batches);
        if let Some(job) = log.take_roll_flush() {
            roll_flushes.push(job);
        }
        if !roll_flushes.is_empty() && rng.gen_bool(0.3) {
            let job = roll_flushes.remove(rng.gen_range(0..roll_flushes.len()));
            let upto = job.upto_offset();
            let done = job.run().map_err(|e| format!("roll flush: {e:?}"))?;
            if log
                .mark_flushed(Ok(done))
                .map_err(|e| format!("mark flushed: {e:?}"))?
            {
                recovery_point = log.recovery_point();
                check!(
                    recovery_point == upto,
                    "roll flush moved the recovery point to {recovery_point}, not {upto}"
                );
                // Durable now: the segments below `upto` (data and indexes) and every name
                // in the directory; files of later segments keep what was durable before.
                for (name, bytes) in snapshot_dir(&dir)? {
                    match name.get(..20).and_then(|p| p.parse::<i64>().ok()) {
                        Some(base) if base >= upto => {}
                        _ => {
                            flushed_files.insert(name, bytes);
                        }
                    }
                }
            }
        }
        if rng.gen_bool(0.15) {
            log.flush().map_err(|e| format!("flush: {e:?}"))?;
            recovery_point = log.recovery_point();
            flushed_files = snapshot_dir(&dir)?;
        }
    }
    let placed = layout(&log);
    check!(
        placed.len() == written.len(),
        "layout does not match what was written"
    );
    let segment_bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    drop(log); // crash: no close

    let open_recovery_point = if use_recovery_point {
        recovery_point
    } else {
        0
    };
    // Batches whose bytes the recovery point does not vouch for.
    let first_untrusted = placed
        .iter()
        .position(|p| p.batch.last_offset() >= open_recovery_point)
        .unwrap_or(placed.len());
    let mut expected_len = written.len();
    let mut time_index_trusted = true;
    let mut offset_index_trusted = true;
    let mut data_damaged = false;
    let mut description = format!("{damage:?}, recovery point {open_recovery_point}");

    match damage {
        Damage::None => {}
        Damage::Cut => {
            let last_base = *segment_bases.last().expect("segment");
            let path = seg_path(&dir, last_base, ".log");
            let len = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
            let min = placed
                .iter()
                .enumerate()
                .find(|(i, p)| p.segment_base == last_base && *i >= first_untrusted)
                .map_or(len, |(_, p)| p.position);
            let cut = rng.gen_range(min..=len);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(cut))
                .map_err(|e| e.to_string())?;
            expected_len = placed
                .iter()
                .take_while(|p| {
                    p.segment_base != last_base
                        || p.position + p.batch.size_in_bytes() as u64 <= cut
                })
                .count();
            let kept_end = placed[..expected_len]
                .iter()
                .filter(|p| p.segment_base == last_base)
                .map(|p| p.position + p.batch.size_in_bytes() as u64)
                .max()
                .unwrap_or(0);
            data_damaged = cut > kept_end; // a cut between batches leaves nothing to remove
            description.push_str(&format!(", cut {last_base} at {cut} of {len}"));
        }
        Damage::FlipBit => {
            if first_untrusted < placed.len() {
                let victim = rng.gen_range(first_untrusted..placed.len());
                let p = &placed[victim];
                let size = p.batch.size_in_bytes() as u64;
                // Skip baseOffset (0..8) and partitionLeaderEpoch (12..16): outside the CRC.
                let covered: Vec<u64> = (8..12).chain(16..size).collect();
                let at = p.position + covered[rng.gen_range(0..covered.len())];
                let bit = rng.gen_range(0..8);
                let path = seg_path(&dir, p.segment_base, ".log");
                let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
                bytes[at as usize] ^= 1 << bit;
                std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
                expected_len = victim;
                data_damaged = true;
                description.push_str(&format!(
                    ", flip bit {bit} at {} + {} in segment {}",
                    p.position,
                    at - p.position,
                    p.segment_base
                ));
            }
        }
        Damage::DeleteIndex | Damage::DeleteTimeIndex => {
            let base = segment_bases[rng.gen_range(0..segment_bases.len())];
            let suffix = if damage == Damage::DeleteIndex {
                ".index"
            } else {
                ".timeindex"
            };
            std::fs::remove_file(seg_path(&dir, base, suffix)).map_err(|e| e.to_string())?;
            description.push_str(&format!(", segment {base}"));
        }
        Damage::LoseUnflushed => {
            let current = snapshot_dir(&dir)?;
            for name in current.keys() {
                std::fs::remove_file(dir.join(name)).map_err(|e| e.to_string())?;
            }
            // The segment holding the recovery point and later ones had index entries written
            // without fsync.
            let unsynced_from = segment_bases
                .iter()
                .rev()
                .find(|&&b| b <= recovery_point)
                .copied()
                .unwrap_or(0);
            for (name, bytes) in &flushed_files {
                let base: Option<i64> = name.get(..20).and_then(|p| p.parse().ok());
                let is_index = name.ends_with(".index") || name.ends_with(".timeindex");
                let contents = if is_index && base.is_some_and(|b| b >= unsynced_from) {
                    match rng.gen_range(0..3) {
                        0 => bytes.clone(),
                        1 => current.get(name).cloned().unwrap_or_default(),
                        _ => vec![0; bytes.len()],
                    }
                } else {
                    bytes.clone()
                };
                std::fs::write(dir.join(name), contents).map_err(|e| e.to_string())?;
            }
            // What survived, read as the longest valid prefix by a plain parse.
            let mut survived = Vec::new();
            let mut bases: Vec<i64> = flushed_files
                .keys()
                .filter(|n| n.ends_with(".log"))
                .filter_map(|n| n.get(..20).and_then(|p| p.parse().ok()))
                .collect();
            bases.sort_unstable();
            for base in bases {
                let bytes = flushed_files
                    .get(&format!("{base:020}.log"))
                    .cloned()
                    .unwrap_or_default();
                let (batches, stop) =
                    BatchReader::new(Bytes::from(bytes), MAX_BATCH_BYTES).read_all();
                survived.extend(batches);
                if stop.is_some() {
                    break;
                }
            }
            check!(
                survived.len() <= written.len() && survived[..] == written[..survived.len()],
                "model: the flushed files are not a prefix of what was written"
            );
            check!(
                survived
                    .iter()
                    .filter(|b| b.last_offset() < recovery_point)
                    .count()
                    == written
                        .iter()
                        .filter(|b| b.last_offset() < recovery_point)
                        .count(),
                "model: flushed data is missing from the snapshot"
            );
            expected_len = survived.len();
            description = format!("{damage:?}, recovery point {recovery_point}");
        }
        Damage::CorruptIndex => {
            let base = segment_bases[rng.gen_range(0..segment_bases.len())];
            let time = rng.gen_bool(0.5);
            let path = seg_path(&dir, base, if time { ".timeindex" } else { ".index" });
            let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
            if bytes.is_empty() || rng.gen_bool(0.2) {
                bytes.extend((0..rng.gen_range(1..30)).map(|_| rng.r#gen::<u8>()));
            } else {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..bytes.len());
                    bytes[at] = rng.r#gen();
                }
            }
            std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
            // A structurally plausible index below the recovery point is trusted, as in Kafka.
            // A wrong offset index entry is caught when a lookup uses it (reads fall back to a
            // scan, so reads are still checked); a wrong middle time index entry is not
            // detectable without reading the segment: skip timestamp answers then.
            // Entries below the recovery point are kept (only the part of a segment from the
            // recovery point's index entry on is re-read).
            if base < open_recovery_point {
                if time {
                    time_index_trusted = false;
                } else {
                    offset_index_trusted = false;
                }
            }
            description.push_str(&format!(
                ", {} of segment {base}",
                if time { "timeindex" } else { "index" }
            ));
        }
    }

    // Reopen and compare with the longest valid prefix.
    let open_recovery_point = if damage == Damage::LoseUnflushed {
        recovery_point
    } else {
        open_recovery_point
    };
    let expected = &written[..expected_len];
    let expected_end = expected.last().map_or(0, RecordBatch::next_offset);
    let (mut log, report) = open(&dir, &config, open_recovery_point)?;
    check!(
        log.log_end_offset() == expected_end,
        "{description}: log end offset {} != expected {expected_end}",
        log.log_end_offset()
    );
    check!(
        !data_damaged || report.truncated_bytes() > 0,
        "{description}: damage not reported: {report:?}"
    );
    let got = read_all(&log)?;
    check!(
        got.len() == expected.len(),
        "{description}: {} batches, expected {}",
        got.len(),
        expected.len()
    );
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        check!(g == e, "{description}: batch {i} differs");
    }
    check_indexes(&log, offset_index_trusted, time_index_trusted)
        .map_err(|e| format!("{description}: {e}"))?;
    if time_index_trusted {
        for _ in 0..5 {
            let target = rng.gen_range(-10..ts + 100);
            let found = log
                .offset_for_timestamp(target)
                .map_err(|e| format!("{description}: lookup {target}: {e:?}"))?
                .map(|f| (f.timestamp, f.offset));
            check!(
                found == expected_lookup(expected, target),
                "{description}: offset_for_timestamp({target}) = {found:?}, expected {:?}",
                expected_lookup(expected, target)
            );
        }
    }
    check!(
        log.leader_epoch_cache()
            .entries()
            .iter()
            .all(|e| e.start_offset < expected_end.max(1)),
        "{description}: epoch cache beyond the log end"
    );

    // Appends continue at the right offset, and a clean reopen changes nothing.
    let info = log
        .append_as_leader(vec![common::batch(2, ts, 10)], epoch + 1, 0)
        .map_err(|e| format!("{description}: append after recovery: {e:?}"))?;
    check!(
        info.first_offset == expected_end,
        "{description}: append at {}",
        info.first_offset
    );
    let before = read_all(&log)?;
    let rp = log.close().map_err(|e| format!("close: {e:?}"))?;
    let (log, report) = open(&dir, &config, rp)?;
    check!(
        report.truncated_bytes() == 0,
        "{description}: second reopen truncated: {report:?}"
    );
    check!(
        read_all(&log)? == before,
        "{description}: second reopen changed the log"
    );
    check_indexes(&log, offset_index_trusted, time_index_trusted)
        .map_err(|e| format!("{description}, after clean reopen: {e}"))?;
    Ok(description)
}

#[test]
fn reopened_log_is_the_longest_valid_prefix() {
    let seeds: Vec<u64> = match std::env::var("KRUST_LOG_SEED") {
        Ok(s) => vec![s.parse().expect("KRUST_LOG_SEED must be a number")],
        Err(_) => {
            let cases: u64 = std::env::var("KRUST_LOG_CASES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(3_000);
            (0..cases).collect()
        }
    };
    let mut damaged = 0;
    for &seed in &seeds {
        match std::panic::catch_unwind(|| run_case(seed)) {
            Ok(Ok(description)) => {
                if seeds.len() == 1 {
                    println!("seed {seed}: {description}");
                }
                if description.contains("cut") || description.contains("flip") {
                    damaged += 1;
                }
            }
            Ok(Err(msg)) => panic!(
                "seed {seed}: {msg}\nrerun: KRUST_LOG_SEED={seed} cargo test -p krust-log --test crash_recovery"
            ),
            Err(_) => panic!(
                "seed {seed} panicked\nrerun: KRUST_LOG_SEED={seed} cargo test -p krust-log --test crash_recovery"
            ),
        }
    }
    assert!(
        seeds.len() == 1 || damaged > seeds.len() / 6,
        "too few cases damaged data: {damaged}"
    );
}

#[test]
fn base_offset_flip_that_breaks_order_is_truncated() {
    // baseOffset is outside the CRC; recovery still catches a batch whose offsets go
    // backwards, and keeps the prefix before it.
    let root = temp_root();
    let dir = root.path().join("t-0");
    let config = LogConfig::default();
    let (mut log, _) = open(&dir, &config, 0).expect("open");
    for i in 0..5 {
        log.append_as_leader(vec![common::batch(3, i, 10)], 0, 0)
            .expect("append");
    }
    let placed = layout(&log);
    drop(log);
    let path = seg_path(&dir, 0, ".log");
    let mut bytes = std::fs::read(&path).expect("read");
    let at = placed[3].position as usize;
    bytes[at..at + 8].copy_from_slice(&2i64.to_be_bytes());
    std::fs::write(&path, bytes).expect("write");
    let (log, report) = open(&dir, &config, 0).expect("reopen");
    assert_eq!(log.log_end_offset(), 9);
    assert_eq!(
        report.truncated_bytes(),
        (placed[3].batch.size_in_bytes() * 2) as u64
    );
}

#[test]
fn io_errors_are_not_mistaken_for_bad_bytes() {
    // A segment we cannot read fails open with an I/O error; nothing is truncated.
    use std::os::unix::fs::PermissionsExt;
    let root = temp_root();
    let dir = root.path().join("t-0");
    let (mut log, _) = open(&dir, &LogConfig::default(), 0).expect("open");
    log.append_as_leader(vec![common::batch(3, 0, 10)], 0, 0)
        .expect("append");
    drop(log);
    let path = seg_path(&dir, 0, ".log");
    let len = common::file_len(&path);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let unreadable = std::fs::File::open(&path).is_err(); // root can still read it
    if unreadable {
        let err = open(&dir, &LogConfig::default(), 0).expect_err("open must fail");
        assert!(err.contains("Io"), "{err}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(common::file_len(&path), len);
}
