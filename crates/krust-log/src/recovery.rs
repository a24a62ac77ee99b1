//! Opening a partition directory ([`Log::open`]) and crash recovery.
//!
//! What is trusted and what is checked again (after Kafka 3.9's `LogLoader`):
//!
//! 1. Leftovers are removed: `*.deleted` (also the spare files of a next segment made ahead of
//!    a roll, `spare-<n>.log.deleted`, …), `*.cleaned`, our own `*.tmp` files, and index files
//!    whose `.log` is gone (a deletion interrupted by a crash).
//! 2. Segments wholly below the recovery point were fsynced: their bytes are taken as they are
//!    and their indexes are loaded after a sanity check (entries increasing, inside the file,
//!    the last entry pointing at a batch with that last offset). A missing or inconsistent
//!    index makes that segment recovered too.
//! 3. From the batch holding the recovery point to the end, every batch is read and checked
//!    (length, magic, CRC-32C, increasing offsets) and the indexes are rebuilt. At the first bad
//!    batch the segment is truncated (fsynced, `warn!`) and all later segments are deleted: the
//!    log is the longest valid prefix.
//! 4. I/O errors are never treated as bad bytes: they fail `open`.
//!
//! A roll fsyncs the sealed segment in the background (see [`crate::log::FlushJob`]), so
//! sealed segments may lie above the recovery point: they are re-read like the active one.
//! As in Kafka, data above the recovery point was never promised to the disk, and a crash may
//! have kept any part of it; a rolled segment whose tail was lost *exactly* at a batch boundary
//! cannot be told from a complete one, so the next segment is kept after it: that replica
//! then lacks those offsets (a gap, as compaction also leaves). Kafka 3.9's background flush
//! on roll has the same window, and with its default `flush.messages` relies on replication
//! for unflushed data; Raft flushes before it acknowledges, so its log has no such window.
//!
//! Before all that, an interrupted log cleaner swap is completed (Kafka's `LogLoader`): a
//! `<base>.log.swap` file was fsynced before it was renamed from `.cleaned`, so it holds the
//! cleaned data of a group of segments starting at `base`. Every segment file whose base offset
//! lies in `[base, swap's next offset)` is an old segment of that group (or the replaced first
//! one) and is deleted; then the swap file is renamed to `<base>.log` (its indexes are rebuilt by
//! step 3, as they are missing). Index `.swap` files are deleted: indexes are always rebuilt.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use crate::checkpoint::{LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE};
use crate::config::LogConfig;
use crate::error::LogError;
use crate::fs::{
    CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX, TMP_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX, fsync_dir,
    parse_offset_file_name,
};
use crate::leader_epoch::LeaderEpochCache;
use crate::log::{Log, MAX_SEGMENT_BASE_OFFSET};
use crate::segment::{RecoveryOutcome, Segment, remove_if_exists};

/// How to open a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOpenOptions {
    /// Offsets below this were fsynced (from `recovery-point-offset-checkpoint`; 0 if
    /// unknown, which checks everything).
    pub recovery_point: i64,
    /// From `log-start-offset-checkpoint` (0 if unknown); raised to the first segment's base.
    pub log_start_offset: i64,
    /// Wall-clock time, used as the creation time of segments (for `segment.ms`).
    pub now_ms: i64,
}

impl LogOpenOptions {
    /// Options with the given recovery point, log start 0 and the system clock.
    #[must_use]
    pub fn new(recovery_point: i64) -> Self {
        LogOpenOptions {
            recovery_point,
            log_start_offset: 0,
            now_ms: system_now_ms(),
        }
    }
}

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What [`Log::open`] found and did, for logging and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments that were re-read (base offsets), with what recovery found.
    pub recovered_segments: Vec<(i64, RecoveryOutcome)>,
    /// Segments deleted because an earlier segment was truncated.
    pub deleted_segments: Vec<i64>,
    /// Leftover files removed.
    pub removed_files: Vec<String>,
    /// An interrupted log cleaner swap was completed (the cleaned segment's `.txnindex` may
    /// be missing: the aborted-transaction indexes are rebuilt).
    pub completed_swaps: bool,
}

impl RecoveryReport {
    /// Bytes cut from segment tails.
    #[must_use]
    pub fn truncated_bytes(&self) -> u64 {
        self.recovered_segments
            .iter()
            .map(|(_, o)| o.truncated_bytes)
            .sum()
    }
}

/// Our own files written with `write_atomically`, whose `.tmp` leftovers we may delete.
const OWN_TMP_FILES: [&str; 2] = [LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE];

impl Log {
    /// Opens (or creates) the partition directory `dir` with the given recovery point, log
    /// start offset 0 and the system clock. See [`Log::open_with`].
    ///
    /// # Errors
    /// As [`Log::open_with`].
    pub fn open(dir: &Path, config: LogConfig, recovery_point: i64) -> Result<Log, LogError> {
        Log::open_with(dir, config, LogOpenOptions::new(recovery_point)).map(|(log, _)| log)
    }

    /// Opens (or creates) the partition directory `dir`, recovering everything from the
    /// recovery point on (see the module docs). Works on directories written by Kafka 3.9.
    ///
    /// # Errors
    /// [`LogError::Config`] for an invalid config, [`LogError::Io`] if the disk fails,
    /// [`LogError::Checkpoint`] if `leader-epoch-checkpoint` is malformed.
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        options: LogOpenOptions,
    ) -> Result<(Log, RecoveryReport), LogError> {
        config.validate()?;
        let mut report = RecoveryReport::default();
        let created = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| LogError::io(dir, e))?;
        if let Some(parent) = dir.parent().filter(|_| created) {
            // The new directory entry must survive a crash.
            fsync_dir(parent).map_err(|e| LogError::io(parent, e))?;
        }
        let bases = scan_dir(dir, &mut report)?;

        let mut segments = BTreeMap::new();
        let mut truncated_at: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            if let Some(at) = truncated_at {
                warn!(dir = %dir.display(), base_offset = base, truncated_segment = at,
                    "deleting segment after a truncated one");
                delete_segment_files(dir, base)?;
                report.deleted_segments.push(base);
                continue;
            }
            let next_base = bases.get(i + 1).copied();
            let is_last = next_base.is_none();
            let (mut segment, outcome) =
                Segment::open(dir, base, &config, options.now_ms, next_base)?;
            let outcome = match outcome {
                Some(o) => Some(o),
                // At or after the recovery point: check it again. The last segment is always
                // re-read from its last index entry at least, to find the log end offset.
                None if is_last || next_base.is_some_and(|n| n > options.recovery_point) => {
                    Some(segment.recover(Some(options.recovery_point.max(base)))?)
                }
                None => None,
            };
            if let Some(outcome) = outcome {
                if outcome.stop.is_some() {
                    truncated_at = Some(base);
                }
                report.recovered_segments.push((base, outcome));
            }
            segments.insert(base, segment);
        }
        // Recovered segments that are no longer active get their rebuilt indexes written,
        // trimmed and fsynced now, like any sealed segment (the active one is flushed by the
        // caller's flush/close).
        let last_base = segments.keys().next_back().copied();
        for (base, _) in &report.recovered_segments {
            if Some(*base) != last_base
                && let Some(segment) = segments.get_mut(base)
            {
                segment.seal()?;
            }
        }
        // Sealed segments keep their indexes on disk only.
        for (base, segment) in segments.iter_mut() {
            if Some(*base) != last_base {
                segment.evict_indexes();
            }
        }
        // Fix up inactive segments' next offsets now that all bases are known.
        let keys: Vec<i64> = segments.keys().copied().collect();
        for pair in keys.windows(2) {
            if let Some(s) = segments.get_mut(&pair[0])
                && s.next_offset() > pair[1]
            {
                s.set_next_offset_bound(pair[1]);
            }
        }
        if !report.deleted_segments.is_empty() || !report.removed_files.is_empty() {
            fsync_dir(dir).map_err(|e| LogError::io(dir, e))?;
        }

        let leader_epoch_cache = LeaderEpochCache::load(dir)?;
        let mut dir_dirty = false;
        if segments.is_empty() {
            let base = options.log_start_offset.clamp(0, MAX_SEGMENT_BASE_OFFSET);
            segments.insert(base, Segment::create(dir, base, &config, options.now_ms)?);
            dir_dirty = true;
        }
        let first_base = segments.keys().next().copied().unwrap_or(0);
        let log_end_offset = segments
            .values()
            .next_back()
            .map_or(first_base, Segment::next_offset);
        let bases: Vec<i64> = segments.keys().copied().collect();
        let (txn_indexes, txn_indexes_corrupt) =
            crate::txn_index::load_all(dir, &bases, log_end_offset)?;
        // A swap completed here may have lost the `.txnindex` the cleaner writes after it.
        let txn_indexes_corrupt = txn_indexes_corrupt || report.completed_swaps;
        let mut log = Log {
            txn_indexes,
            txn_indexes_corrupt,
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset: options.log_start_offset.max(first_base),
            log_end_offset,
            recovery_point: options.recovery_point.min(log_end_offset),
            high_watermark: None,
            leader_epoch_cache,
            dir_dirty,
            clock_ms: options.now_ms,
            truncations: 0,
            pending_roll_flush: None,
            flush_failed: false,
            spares: Vec::new(),
            dir_identity: crate::log::dir_identity(dir),
        };
        if log.log_start_offset > log.log_end_offset {
            // Kafka: the log start offset checkpoint is ahead of the data (e.g. the tail was
            // lost); start empty at the log start offset.
            warn!(dir = %dir.display(), log_start_offset = log.log_start_offset,
                log_end_offset, "log start offset beyond log end; emptying the log");
            let start = log.log_start_offset;
            log.truncate_fully_and_start_at(start)?;
        } else {
            // Epochs cannot start beyond the data we kept.
            log.leader_epoch_cache
                .truncate_from_end(log.log_end_offset)?;
            let start = log.log_start_offset;
            log.leader_epoch_cache.truncate_from_start(start)?;
        }
        info!(dir = %dir.display(), log_start_offset = log.log_start_offset,
            log_end_offset = log.log_end_offset, segments = log.segments.len(),
            truncated_bytes = report.truncated_bytes(), "opened log");
        Ok((log, report))
    }
}

/// Removes leftovers and returns the base offsets of the `.log` files, ascending.
fn scan_dir(dir: &Path, report: &mut RecoveryReport) -> Result<Vec<i64>, LogError> {
    report.completed_swaps = complete_swaps(dir, report)?;
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        let own_tmp = OWN_TMP_FILES
            .iter()
            .any(|own| name.strip_suffix(TMP_FILE_SUFFIX) == Some(*own));
        if name.ends_with(DELETED_FILE_SUFFIX) || name.ends_with(CLEANED_FILE_SUFFIX) || own_tmp {
            remove_if_exists(&path)?;
            report.removed_files.push(name.to_string());
        } else if name.ends_with(SWAP_FILE_SUFFIX) {
            warn!(file = %path.display(), "ignoring a swap file that is not a segment's");
        } else if let Some(base) = parse_offset_file_name(name, LOG_FILE_SUFFIX) {
            if base > MAX_SEGMENT_BASE_OFFSET {
                warn!(file = %path.display(), "ignoring a segment whose base offset is too large to index");
                continue;
            }
            logs.push(base);
        } else if let Some(base) = [
            INDEX_FILE_SUFFIX,
            TIME_INDEX_FILE_SUFFIX,
            TXN_INDEX_FILE_SUFFIX,
        ]
        .iter()
        .find_map(|suffix| parse_offset_file_name(name, suffix))
        {
            indexes.push((base, path, name.to_string()));
        }
    }
    logs.sort_unstable();
    for (base, path, name) in indexes {
        if logs.binary_search(&base).is_err() {
            info!(file = %path.display(), "removing index file without a log file");
            remove_if_exists(&path)?;
            report.removed_files.push(name);
        }
    }
    Ok(logs)
}

/// Suffix of a cleaned segment's data file during a swap (Kafka: `<base>.log.swap`).
fn log_swap_suffix() -> String {
    format!("{LOG_FILE_SUFFIX}{SWAP_FILE_SUFFIX}")
}

/// Completes interrupted cleaner swaps (see the module docs).
fn complete_swaps(dir: &Path, report: &mut RecoveryReport) -> Result<bool, LogError> {
    let swap_suffix = log_swap_suffix();
    let mut swaps = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(base) = parse_offset_file_name(&name, &swap_suffix) {
            swaps.push(base);
        } else if [
            INDEX_FILE_SUFFIX,
            TIME_INDEX_FILE_SUFFIX,
            TXN_INDEX_FILE_SUFFIX,
        ]
        .iter()
        .any(|s| parse_offset_file_name(&name, &format!("{s}{SWAP_FILE_SUFFIX}")).is_some())
        {
            remove_if_exists(&entry.path())?;
            report.removed_files.push(name);
        } else {
            names.push(name);
        }
    }
    if swaps.is_empty() {
        return Ok(false);
    }
    swaps.sort_unstable();
    for base in swaps {
        let swap_path = crate::fs::offset_file_path(dir, base, &swap_suffix);
        let next = swap_next_offset(&swap_path, base)?;
        let covered = base..next.max(base + 1);
        for name in &names {
            let old = [
                LOG_FILE_SUFFIX,
                INDEX_FILE_SUFFIX,
                TIME_INDEX_FILE_SUFFIX,
                TXN_INDEX_FILE_SUFFIX,
            ]
            .iter()
            .find_map(|s| parse_offset_file_name(name, s));
            if old.is_some_and(|o| covered.contains(&o)) {
                info!(
                    file = name.as_str(),
                    "deleting a segment file replaced by a cleaner swap"
                );
                remove_if_exists(&dir.join(name))?;
                report.removed_files.push(name.clone());
            }
        }
        let final_path = crate::fs::offset_file_path(dir, base, LOG_FILE_SUFFIX);
        info!(file = %swap_path.display(), "completing an interrupted log cleaner swap");
        std::fs::rename(&swap_path, &final_path).map_err(|e| LogError::io(&final_path, e))?;
    }
    // The completed swap must not be undone by a later crash.
    fsync_dir(dir).map_err(|e| LogError::io(dir, e))?;
    Ok(true)
}

/// The offset after the last batch of a swap file (`base` if it has none). The file was fsynced
/// whole before it became a swap file, so its batch headers are read without CRC checks; the
/// scan stops at anything that is not a header.
fn swap_next_offset(path: &Path, base: i64) -> Result<i64, LogError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| LogError::io(path, e))?;
    let len = file.metadata().map_err(|e| LogError::io(path, e))?.len();
    let mut next = base;
    let mut pos = 0u64;
    let mut header = [0u8; crate::batch::RECORD_BATCH_OVERHEAD];
    while pos + header.len() as u64 <= len {
        file.read_exact_at(&mut header, pos)
            .map_err(|e| LogError::io(path, e))?;
        let Ok(size) = crate::batch::peek_batch_size(&header, crate::batch::MAX_BATCH_BYTES) else {
            break;
        };
        let mut base_offset = [0u8; 8];
        base_offset.copy_from_slice(&header[..8]);
        let base_offset = i64::from_be_bytes(base_offset);
        // A legacy entry's offset is its last offset.
        let delta = if crate::legacy::legacy_magic(&header).is_some() {
            0
        } else {
            i32::from_be_bytes([header[23], header[24], header[25], header[26]])
        };
        next = next.max(
            base_offset
                .saturating_add(i64::from(delta))
                .saturating_add(1),
        );
        pos += size as u64;
    }
    Ok(next)
}

fn delete_segment_files(dir: &Path, base: i64) -> Result<(), LogError> {
    for suffix in [
        LOG_FILE_SUFFIX,
        INDEX_FILE_SUFFIX,
        TIME_INDEX_FILE_SUFFIX,
        TXN_INDEX_FILE_SUFFIX,
    ] {
        remove_if_exists(&crate::fs::offset_file_path(dir, base, suffix))?;
    }
    Ok(())
}
