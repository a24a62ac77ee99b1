//! Log compaction (`cleanup.policy=compact` / `compact,delete`): Kafka 3.9's log cleaner
//! (`LogCleaner.scala`, `LogCleanerManager.scala`, `MemoryRecords.filterTo`) as a library. The
//! caller (the broker) schedules it: it keeps the `cleaner-offset-checkpoint` of each log dir,
//! asks [`Log::log_to_clean`] which logs need cleaning, runs [`Cleaner::clean`] on the dirtiest
//! and stores the returned next dirty offset.
//!
//! # What is kept
//!
//! A cleaning pass builds an [`OffsetMap`] (key digest → latest offset) over the dirty range
//! `[first dirty, first uncleanable)`, then rewrites every segment from the log start up to the
//! map's latest offset, keeping per key only the record at the latest offset:
//! - records above the map's latest offset are kept (the map did not see them);
//! - a record without a key is dropped, as Kafka drops it (the broker rejects such appends to a
//!   compacted topic, so only logs compacted after the fact hold them);
//! - a tombstone (null value) that is the latest for its key is kept, and its batch gets a delete
//!   horizon — `baseTimestamp` = cleaning time + `delete.retention.ms` with attribute bit 6, as
//!   Kafka 2.8+ writes it; a later pass past the horizon removes it;
//! - a batch whose records are all removed disappears, except an empty header is kept for an
//!   active idempotent producer's last batch (the caller passes those last offsets, from its
//!   producer state), so its sequence numbers survive;
//! - offsets are never changed: a rewritten batch keeps its base and last offset (Kafka keeps the
//!   last offset so the producer's last sequence stays valid).
//!
//! Transactions (Kafka's `CleanedTransactionMetadata`; everything cleaned lies below the last
//! stable offset, so every transaction there has ended):
//! - the batches of an aborted transaction (from the `.txnindex` entries) are removed and never
//!   enter the offset map; committed transactional batches are compacted like any other (their
//!   rebuilt batches stay transactional);
//! - an ABORT marker stays while the pass removed data of its transaction (its `.txnindex`
//!   entry moves to the cleaned segment), a COMMIT marker while the pass kept data of its
//!   transaction; a marker whose transaction has no data left gets a delete horizon (like a
//!   tombstone's batch) and a later pass past the horizon removes it; an empty control batch is
//!   removed;
//! - an active producer's last batch, if all its records go, stays as an empty header.
//!
//! A compressed batch is inflated like any other, and a rebuilt one is compressed again with
//! the batch's codec at its default level, as Kafka's `MemoryRecords.filterTo` does.
//!
//! # Crash safety
//!
//! Each group of segments is written to `<base>.log.cleaned` (fsynced), renamed to
//! `<base>.log.swap` (directory fsynced), the old segments are deleted, and the swap file is
//! renamed to `<base>.log`. [`Log::open`] deletes `.cleaned` files and completes a swap: it
//! deletes the segments the swap file covers and renames it (see [`crate::recovery`]). A crash at
//! any point therefore leaves either the old segments or the cleaned one, never both and never
//! neither.
//!
//! # Locking
//!
//! A broker shares the log with produce and fetch, which take the partition lock. A pass holds
//! that lock only twice, briefly (Kafka 3.9's `Cleaner` likewise works on the segments it
//! was given and locks the log only in `replaceSegments`):
//! 1. [`Log::cleaning_snapshot`] (under the lock): the range to clean and read-only
//!    [`SegmentView`]s of the sealed segments below the first uncleanable offset.
//! 2. [`Cleaner::prepare`] (no lock): the offset map is built and the cleaned segments are
//!    written to `.cleaned` files, fsynced, with indexes built. It only reads sealed segments,
//!    whose files change only by a truncation into them or by deletion (an open handle still
//!    reads a deleted file), and it only creates `.cleaned` files, which nothing else uses.
//! 3. [`Cleaner::commit`] (under the lock): revalidates and swaps. The pass is valid if the
//!    log was not truncated meanwhile ([`Log::truncation_count`]): appends and rolls only add
//!    offsets above the first uncleanable offset, so every key the map saw still has the
//!    record the map points at, and no record the pass keeps or drops moved. A group whose
//!    segments were deleted meanwhile (retention, DeleteRecords — both from the log start)
//!    is skipped: the groups after it are still cleaned correctly, since deleting older
//!    segments never removes the latest record of a key that a later group needs.
//!
//! # Layout
//! - [`offset_map`]: the bounded [`OffsetMap`].
//! - [`throttle`]: `log.cleaner.io.max.bytes.per.second` with an injected clock.
//! - `mod.rs`: [`CleanerConfig`], the cleanable range and dirty ratio ([`LogToClean`]), the
//!   cleaning pass ([`Cleaner`]: snapshot → prepare → commit) and `cleaner-offset-checkpoint`.

pub mod offset_map;
pub mod throttle;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use tracing::{debug, info};

use crate::batch::{
    BatchError, LOG_OVERHEAD, MAX_BATCH_BYTES, Record, RecordBatch, RecordBatchBuilder,
    TimestampType, peek_batch_size,
};
use crate::checkpoint::{
    CheckpointError, TopicPartition, read_offset_checkpoint, write_offset_checkpoint,
};
use crate::error::LogError;
use crate::fs::{
    CLEANED_FILE_SUFFIX, LOG_FILE_SUFFIX, SWAP_FILE_SUFFIX, fsync_dir, offset_file_path,
};
use crate::log::Log;
use crate::retention::largest_timestamp_ms;
use crate::segment::{Segment, SegmentView};

pub use offset_map::OffsetMap;
pub use throttle::{SystemThrottleClock, ThrottleClock, Throttler};

/// File name of the per-log-dir cleaner checkpoint (Kafka's `LogCleanerManager.offsetCheckpointFile`):
/// `<topic> <partition> <first dirty offset>` lines in the offset checkpoint format.
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Kafka's default `log.cleaner.dedupe.buffer.size`: 128 MiB (shared by all cleaner threads).
pub const DEFAULT_DEDUPE_BUFFER_SIZE: u64 = 128 * 1024 * 1024;
/// Kafka's default `log.cleaner.io.buffer.size`: 512 KiB (half for reads, half for writes).
pub const DEFAULT_IO_BUFFER_SIZE: usize = 512 * 1024;
/// Kafka's default `log.cleaner.io.buffer.load.factor`.
pub const DEFAULT_IO_BUFFER_LOAD_FACTOR: f64 = 0.9;

/// Broker-level cleaner settings (Kafka 3.9 `CleanerConfig`). `log.cleaner.threads` and
/// `log.cleaner.backoff.ms` belong to the caller, which runs one [`Cleaner`] per thread.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size` divided by `log.cleaner.threads`: memory for one
    /// cleaner's offset map.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.io.buffer.load.factor`: how full the offset map may get.
    pub io_buffer_load_factor: f64,
    /// `log.cleaner.io.buffer.size` (per thread): read and write buffer sizes (half each); a
    /// larger batch grows the read buffer up to `max.message.bytes`.
    pub io_buffer_size: usize,
    /// `log.cleaner.io.max.bytes.per.second`: read + write rate limit (`f64::MAX` = none).
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_size: DEFAULT_DEDUPE_BUFFER_SIZE,
            io_buffer_load_factor: DEFAULT_IO_BUFFER_LOAD_FACTOR,
            io_buffer_size: DEFAULT_IO_BUFFER_SIZE,
            io_max_bytes_per_second: f64::MAX,
        }
    }
}

/// Why a cleaning pass failed.
#[derive(Debug, thiserror::Error)]
pub enum CleanerError {
    /// The log failed (I/O, corrupt segment). After an I/O error part-way through a swap the
    /// in-memory log may no longer match the directory: drop it and reopen with [`Log::open`],
    /// which completes or discards the swap.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The offset map holds no entry (`log.cleaner.dedupe.buffer.size` below 24 bytes / load
    /// factor): no progress is possible. Kafka requires at least 1 MiB per thread.
    #[error("dedupe buffer of {dedupe_buffer_size} bytes holds no offset map entry")]
    DedupeBufferTooSmall {
        /// The configured size.
        dedupe_buffer_size: u64,
    },
    /// The log is not compacted (`cleanup.policy` lacks `compact`).
    #[error("{dir}: cleanup.policy is {policy}, not compact")]
    NotCompacted {
        /// Partition directory.
        dir: PathBuf,
        /// The policy.
        policy: &'static str,
    },
    /// A fault injected by a test ([`Cleaner::crash_at`]): the pass stopped as a crash would.
    #[error("injected crash at {0:?}")]
    InjectedCrash(CrashPoint),
}

/// Where a test makes a cleaning pass stop as if the process died (files left as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the `.cleaned` file of the first group is written and fsynced.
    AfterCleanedWritten,
    /// After it was renamed to `.swap` (old segments still present).
    AfterSwapRenamed,
    /// After the old segments were deleted (only the `.swap` file holds the data).
    AfterOldSegmentsDeleted,
}

/// Which part of a log a pass may clean (Kafka's `OffsetsToClean` / `LogToClean`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogToClean {
    /// Where the dirty part starts: the checkpoint, or the log start if it is missing, below
    /// the log start or beyond the log end.
    pub first_dirty_offset: i64,
    /// Base offset of the first segment the pass must not touch: the segment holding the
    /// smallest of the active segment's base, the last stable offset, and the first segment
    /// newer than `min.compaction.lag.ms`.
    pub first_uncleanable_offset: i64,
    /// Bytes of the segments below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of the segments in `[first dirty, first uncleanable)`.
    pub cleanable_bytes: u64,
    /// `cleanable / (clean + cleanable)`.
    pub cleanable_ratio: f64,
    /// How long past `max.compaction.lag.ms` the oldest dirty segment is (0 = not overdue).
    pub max_compaction_delay_ms: i64,
    /// The checkpoint was unusable and the caller should overwrite it.
    pub force_update_checkpoint: bool,
}

impl LogToClean {
    /// Whether the log should be cleaned now (Kafka's `grabFilthiestCompactedLog` filter):
    /// something is cleanable and either the dirty ratio is above `min.cleanable.dirty.ratio`
    /// or `max.compaction.lag.ms` has passed for the dirty data.
    #[must_use]
    pub fn needs_cleaning(&self, min_cleanable_dirty_ratio: f64) -> bool {
        let total = self.clean_bytes + self.cleanable_bytes;
        total > 0
            && ((self.max_compaction_delay_ms > 0 && self.cleanable_bytes > 0)
                || self.cleanable_ratio > min_cleanable_dirty_ratio)
    }
}

/// What a cleaning pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    /// The new first dirty offset: store it in `cleaner-offset-checkpoint`.
    pub next_dirty_offset: i64,
    /// Distinct keys in the offset map.
    pub keys_mapped: usize,
    /// The map filled up before the end of the dirty range (only a prefix was cleaned).
    pub map_full: bool,
    /// Segment groups rewritten.
    pub groups: usize,
    /// Bytes of the rewritten segments before the pass.
    pub bytes_before: u64,
    /// Bytes of the segments that replaced them.
    pub bytes_after: u64,
    /// Records read while rewriting.
    pub records_read: u64,
    /// Records kept.
    pub records_kept: u64,
    /// Time the throttle slept.
    pub throttled_ms: u64,
    /// The log was truncated while the pass ran: nothing was swapped (see
    /// [`Cleaner::commit`]).
    pub aborted: bool,
}

/// Reads a log dir's `cleaner-offset-checkpoint` (missing = empty).
///
/// # Errors
/// [`CheckpointError`].
pub fn read_cleaner_checkpoint(
    log_dir: &Path,
) -> Result<BTreeMap<TopicPartition, i64>, CheckpointError> {
    read_offset_checkpoint(&log_dir.join(CLEANER_OFFSET_CHECKPOINT_FILE))
}

/// Replaces a log dir's `cleaner-offset-checkpoint` (tmp → fsync → rename → fsync dir).
///
/// # Errors
/// [`CheckpointError::Io`].
pub fn write_cleaner_checkpoint(
    log_dir: &Path,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<(), CheckpointError> {
    write_offset_checkpoint(&log_dir.join(CLEANER_OFFSET_CHECKPOINT_FILE), offsets)
}

impl Log {
    /// What a cleaning pass of `to_clean` reads (see [`CleaningSnapshot`]): cheap, in-memory
    /// plus one index lookup; take it under the lock that guards the log. A stale `to_clean`
    /// (the log rolled, was truncated or had records deleted since) never makes the pass touch
    /// the active segment or offsets below the log start.
    ///
    /// # Errors
    /// [`LogError::Io`] reading the index; [`LogError::CorruptSegment`].
    pub fn cleaning_snapshot(&self, to_clean: &LogToClean) -> Result<CleaningSnapshot, LogError> {
        let active_base = self
            .segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(self.log_start_offset);
        let start = to_clean.first_dirty_offset.max(self.log_start_offset);
        let upper = to_clean.first_uncleanable_offset.min(active_base);
        let segments: Vec<SegmentView> = self
            .segments
            .range(..upper)
            .map(|(_, s)| s.view())
            .collect();
        let start_position = match self.segments.range(..=start).next_back() {
            Some((&base, segment)) if base < upper => Some((
                base,
                segment
                    .translate_offset(start)?
                    .map_or(segment.size(), |(pos, _)| pos),
            )),
            _ => None,
        };
        let mut aborted: Vec<crate::txn_index::AbortedTxn> = self
            .all_aborted_txns()
            .into_iter()
            .filter(|t| t.first_offset < upper)
            .collect();
        aborted.sort_by_key(|t| (t.first_offset, t.last_offset));
        Ok(CleaningSnapshot {
            dir: self.dir.clone(),
            config: self.config.clone(),
            truncations: self.truncations,
            start,
            upper,
            segments,
            start_position,
            aborted,
        })
    }

    /// The cleanable part of this log and its dirty ratio (Kafka 3.9
    /// `LogCleanerManager.cleanableOffsets` + `LogToClean`). `checkpoint` is the log's entry in
    /// `cleaner-offset-checkpoint`; `last_stable_offset` is the high watermark (or the first
    /// offset of an open transaction, if lower) — nothing at or above it is cleaned.
    #[must_use]
    pub fn log_to_clean(
        &self,
        checkpoint: Option<i64>,
        last_stable_offset: i64,
        now_ms: i64,
    ) -> LogToClean {
        let start = self.log_start_offset;
        let wanted = checkpoint.unwrap_or(start);
        let (first_dirty_offset, force_update_checkpoint) =
            if wanted < start || wanted > self.log_end_offset {
                (start, true)
            } else {
                (wanted, false)
            };
        let segments: Vec<&Segment> = self.segments.values().collect();
        let active_base = segments.last().map_or(start, |s| s.base_offset());
        let mut uncleanable = last_stable_offset.min(active_base);
        let min_lag = self.config.min_compaction_lag_ms.max(0);
        if min_lag > 0
            && let Some(s) = non_active_from(&segments, first_dirty_offset)
                .into_iter()
                .find(|s| largest_timestamp_ms(s) > now_ms.saturating_sub(min_lag))
        {
            uncleanable = uncleanable.min(s.base_offset());
        }
        let uncleanable = uncleanable.max(first_dirty_offset);
        // Rounded down to the base of the segment holding it (the active one at most).
        let first_uncleanable_offset = non_active_from(&segments, uncleanable)
            .first()
            .copied()
            .map_or(active_base, Segment::base_offset);
        let clean_bytes = bytes_overlapping(&segments, i64::MIN, first_dirty_offset);
        let cleanable_bytes = bytes_overlapping(
            &segments,
            first_dirty_offset.min(first_uncleanable_offset),
            first_uncleanable_offset,
        );
        let total = clean_bytes + cleanable_bytes;
        #[allow(clippy::cast_precision_loss)]
        let cleanable_ratio = if total == 0 {
            0.0
        } else {
            cleanable_bytes as f64 / total as f64
        };
        // `max.compaction.lag.ms`: how overdue the oldest dirty non-active segment is, by the
        // timestamp of its first batch.
        let earliest_dirty = non_active_from(&segments, first_dirty_offset)
            .into_iter()
            .filter_map(Segment::first_batch_timestamp)
            .filter(|&t| t > 0)
            .min();
        let clean_until = now_ms.saturating_sub(self.config.max_compaction_lag_ms.max(0));
        let max_compaction_delay_ms = match earliest_dirty {
            Some(t) if t < clean_until => clean_until - t,
            _ => 0,
        };
        LogToClean {
            first_dirty_offset,
            first_uncleanable_offset,
            clean_bytes,
            cleanable_bytes,
            cleanable_ratio,
            max_compaction_delay_ms,
            force_update_checkpoint,
        }
    }
}

/// Non-active segments from the one holding `offset` on (Kafka's `nonActiveLogSegmentsFrom`).
fn non_active_from<'a>(segments: &[&'a Segment], offset: i64) -> Vec<&'a Segment> {
    let n = segments.len().saturating_sub(1);
    (0..n)
        .filter(|&i| segments[i + 1].base_offset() > offset)
        .map(|i| segments[i])
        .collect()
}

/// Bytes of the segments overlapping `[from, to)` (Kafka's `logSegments(from, to)`).
fn bytes_overlapping(segments: &[&Segment], from: i64, to: i64) -> u64 {
    (0..segments.len())
        .filter(|&i| {
            let end = segments.get(i + 1).map_or(i64::MAX, |n| n.base_offset());
            end > from && segments[i].base_offset() < to
        })
        .map(|i| segments[i].size())
        .sum()
}

/// One cleaner (Kafka runs `log.cleaner.threads` of them, each with its own buffers).
#[derive(Debug)]
pub struct Cleaner<C: ThrottleClock = SystemThrottleClock> {
    config: CleanerConfig,
    map: OffsetMap,
    throttler: Throttler<C>,
    crash_at: Option<CrashPoint>,
}

impl Cleaner<SystemThrottleClock> {
    /// A cleaner on the real clock.
    #[must_use]
    pub fn new(config: CleanerConfig) -> Self {
        Cleaner::with_clock(config, SystemThrottleClock::default())
    }
}

/// What a cleaning pass reads, taken from the log under its lock by
/// [`Log::cleaning_snapshot`]: the pass's range and read-only handles on the sealed segments
/// below the first uncleanable offset. Building the offset map and writing the cleaned
/// segments ([`Cleaner::prepare`]) then needs no lock; see "Locking" in the module docs.
#[derive(Debug, Clone)]
pub struct CleaningSnapshot {
    dir: PathBuf,
    config: crate::config::LogConfig,
    truncations: u64,
    /// First dirty offset (at or above the log start).
    start: i64,
    /// First uncleanable offset (at most the active segment's base).
    upper: i64,
    /// Every segment with a base below `upper`, oldest first (all sealed).
    segments: Vec<SegmentView>,
    /// Position of the batch holding `start` in the segment holding it (from its index).
    start_position: Option<(i64, u64)>,
    /// The aborted transactions (`.txnindex` entries) with data below `upper`.
    aborted: Vec<crate::txn_index::AbortedTxn>,
}

impl CleaningSnapshot {
    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The batches of `[from_pos, end)` of a segment, read `chunk` bytes at a time (a larger batch
/// gets a larger read). Every batch is CRC-checked.
struct SegmentBatches<'a> {
    segment: &'a SegmentView,
    pos: u64,
    chunk: usize,
    buf: Bytes,
}

impl SegmentBatches<'_> {
    fn next_batch(&mut self) -> Result<Option<(RecordBatch, u64)>, LogError> {
        let size = self.segment.size();
        if self.pos >= size {
            return Ok(None);
        }
        let remaining = usize::try_from(size - self.pos).unwrap_or(usize::MAX);
        if self.buf.len() < LOG_OVERHEAD {
            self.buf = self
                .segment
                .read_bytes(self.pos, self.chunk.min(remaining))?;
        }
        let corrupt = |source: BatchError, pos: u64| LogError::CorruptSegment {
            path: self.segment.log_path().to_path_buf(),
            position: pos,
            source,
        };
        let need = peek_batch_size(&self.buf, MAX_BATCH_BYTES).map_err(|e| corrupt(e, self.pos))?;
        if self.buf.len() < need {
            self.buf = self
                .segment
                .read_bytes(self.pos, need.max(self.chunk).min(remaining))?;
        }
        let (batch, rest) = RecordBatch::parse(self.buf.clone(), MAX_BATCH_BYTES)
            .map_err(|e| corrupt(e, self.pos))?;
        let at = self.pos;
        self.pos += batch.size_in_bytes() as u64;
        self.buf = rest;
        Ok(Some((batch, at)))
    }
}

/// One group of old segments rewritten into one cleaned segment, waiting for its swap.
#[derive(Debug)]
struct PreparedGroup {
    /// `(base offset, segment id)` of the old segments, as the snapshot saw them.
    old: Vec<(i64, u64)>,
    /// The cleaned segment, still under its `.cleaned` names, data and indexes fsynced.
    cleaned: Segment,
    /// The aborted transactions whose ABORT marker the cleaned segment kept while removing
    /// their data: its `.txnindex`.
    aborted: Vec<crate::txn_index::AbortedTxn>,
}

/// The result of [`Cleaner::prepare`]: cleaned segments written next to the log, not yet part
/// of it. Hand it to [`Cleaner::commit`] under the log's lock (or drop it with
/// [`Cleaner::discard`]; a `.cleaned` file left behind is removed by [`Log::open`]).
#[derive(Debug)]
#[must_use = "commit or discard the prepared pass, or its .cleaned files stay until the next open"]
pub struct PreparedCleaning {
    dir: PathBuf,
    truncations: u64,
    start: i64,
    result: Result<PreparedGroups, CleanerError>,
}

#[derive(Debug)]
struct PreparedGroups {
    groups: Vec<PreparedGroup>,
    outcome: CleanOutcome,
}

impl PreparedCleaning {
    /// Removes the `.cleaned` files of the prepared groups (best effort: [`Log::open`] removes
    /// any leftover).
    fn remove_files(self) {
        if let Ok(prepared) = self.result {
            for group in prepared.groups {
                if let Err(e) = group.cleaned.delete() {
                    debug!(error = %e, "removing a discarded .cleaned segment failed");
                }
            }
        }
    }
}

impl<C: ThrottleClock> Cleaner<C> {
    /// A cleaner whose I/O throttle uses `clock` (tests pass virtual time).
    pub fn with_clock(config: CleanerConfig, clock: C) -> Self {
        let map = OffsetMap::new(config.dedupe_buffer_size, config.io_buffer_load_factor);
        let throttler = Throttler::new(config.io_max_bytes_per_second, clock);
        Cleaner {
            config,
            map,
            throttler,
            crash_at: None,
        }
    }

    /// Test hook: make the next pass stop at `point` as a crash would, leaving its files.
    pub fn crash_at(&mut self, point: Option<CrashPoint>) {
        self.crash_at = point;
    }

    /// The throttle (tests read its virtual clock and sleep total).
    pub fn throttler(&self) -> &Throttler<C> {
        &self.throttler
    }

    fn read_chunk(&self) -> usize {
        (self.config.io_buffer_size / 2).max(LOG_OVERHEAD)
    }

    /// One cleaning pass over `log` (Kafka's `Cleaner.doClean`) with the log held throughout:
    /// [`Log::cleaning_snapshot`], [`Cleaner::prepare`] and [`Cleaner::commit`] in a row. A
    /// caller sharing the log with writers runs the three steps itself and holds its lock
    /// only for the first and the last (see "Locking" in the module docs).
    ///
    /// # Errors
    /// As [`Cleaner::prepare`] and [`Cleaner::commit`].
    pub fn clean(
        &mut self,
        log: &mut Log,
        to_clean: &LogToClean,
        now_ms: i64,
        active_producer_last_offsets: &HashMap<i64, i64>,
    ) -> Result<CleanOutcome, CleanerError> {
        let snapshot = log.cleaning_snapshot(to_clean)?;
        let prepared = self.prepare(&snapshot, now_ms, active_producer_last_offsets);
        self.commit(log, prepared)
    }

    /// The expensive part of a pass, without the log: maps the dirty range
    /// `[first dirty, first uncleanable)` of `snapshot` (as much as the offset map holds),
    /// then rewrites every segment from the log start up to the map's latest offset into
    /// `<base>.log.cleaned` files (fsynced, with their indexes built and fsynced). Nothing the
    /// log serves is touched. `now_ms` is the wall-clock time for delete horizons;
    /// `active_producer_last_offsets` maps each active idempotent producer id to the last offset
    /// of its last batch (its emptied last batch keeps its header).
    ///
    /// Errors (I/O, corrupt data, [`CleanerError::NotCompacted`],
    /// [`CleanerError::DedupeBufferTooSmall`]) are carried in the result and reported by
    /// [`Cleaner::commit`], which can tell them apart from reads cut short by a truncation.
    pub fn prepare(
        &mut self,
        snapshot: &CleaningSnapshot,
        now_ms: i64,
        active_producer_last_offsets: &HashMap<i64, i64>,
    ) -> PreparedCleaning {
        let mut written = Vec::new();
        let result = self
            .prepare_groups(snapshot, now_ms, active_producer_last_offsets, &mut written)
            .map(|outcome| PreparedGroups {
                groups: std::mem::take(&mut written),
                outcome,
            });
        if result.is_err() && !matches!(result, Err(CleanerError::InjectedCrash(_))) {
            // Groups written before the failure are of no use: the pass is reported failed.
            for group in written {
                if let Err(e) = group.cleaned.delete() {
                    debug!(error = %e, "removing a .cleaned segment of a failed pass failed");
                }
            }
        }
        PreparedCleaning {
            dir: snapshot.dir.clone(),
            truncations: snapshot.truncations,
            start: snapshot.start,
            result,
        }
    }

    fn prepare_groups(
        &mut self,
        snapshot: &CleaningSnapshot,
        now_ms: i64,
        active_producers: &HashMap<i64, i64>,
        written: &mut Vec<PreparedGroup>,
    ) -> Result<CleanOutcome, CleanerError> {
        if !snapshot.config.cleanup_policy.compacts() {
            return Err(CleanerError::NotCompacted {
                dir: snapshot.dir.clone(),
                policy: snapshot.config.cleanup_policy.as_str(),
            });
        }
        if self.map.max_entries() == 0 {
            return Err(CleanerError::DedupeBufferTooSmall {
                dedupe_buffer_size: self.config.dedupe_buffer_size,
            });
        }
        let (start, upper) = (snapshot.start, snapshot.upper);
        let slept_before = self.throttler.slept_ms();
        let map_full = self.build_offset_map(snapshot)?;
        let mut outcome = CleanOutcome {
            keys_mapped: self.map.len(),
            map_full,
            ..CleanOutcome::default()
        };
        let end_offset = self.map.latest_offset() + 1;
        if end_offset <= start {
            outcome.next_dirty_offset = start;
            return Ok(outcome);
        }
        info!(dir = %snapshot.dir.display(), first_dirty = start, end_offset, keys = self.map.len(),
            map_full, "cleaning log");
        let groups = group_segments(snapshot, end_offset, upper);
        outcome.groups = groups.len();
        for group in groups {
            let (cleaned, aborted) =
                self.clean_group(snapshot, &group, now_ms, active_producers, &mut outcome)?;
            written.push(PreparedGroup {
                old: group.iter().map(|v| (v.base_offset(), v.id())).collect(),
                cleaned,
                aborted,
            });
            self.maybe_crash(CrashPoint::AfterCleanedWritten)?;
        }
        outcome.next_dirty_offset = end_offset;
        outcome.throttled_ms = self.throttler.slept_ms() - slept_before;
        Ok(outcome)
    }

    /// Drops a prepared pass without touching the log (the partition went away meanwhile),
    /// removing its `.cleaned` files.
    pub fn discard(&mut self, prepared: PreparedCleaning) {
        prepared.remove_files();
    }

    /// The swap, under the log's lock (Kafka's `replaceSegments`): first revalidates that the
    /// log did not change in a way that invalidates the pass, then replaces each group of old
    /// segments by its cleaned segment (`.cleaned` → `.swap` → old segments deleted → final
    /// name, the directory fsynced after each step).
    ///
    /// - If the log was truncated since the snapshot (a follower's divergence, an emptied
    ///   log), nothing is swapped: the offset map may name offsets whose records are gone, and
    ///   a swap could drop the only remaining copy of a key. The pass is discarded (also when
    ///   [`Cleaner::prepare`] failed: its reads may have been cut short by the truncation) and
    ///   the returned outcome has `aborted` set and the old first dirty offset.
    /// - A group whose old segments are not all still there, as the same segment objects
    ///   (retention or DeleteRecords deleted some), is skipped; the first dirty offset then
    ///   stays where it was, so the next pass maps the range again.
    ///
    /// # Errors
    /// [`CleanerError::Log`] for I/O or corrupt data (see its doc: after an I/O error in a
    /// swap, reopen the log); the errors of [`Cleaner::prepare`].
    pub fn commit(
        &mut self,
        log: &mut Log,
        prepared: PreparedCleaning,
    ) -> Result<CleanOutcome, CleanerError> {
        if log.truncations != prepared.truncations || log.dir != prepared.dir {
            info!(dir = %log.dir.display(), "log truncated during the cleaning pass: discarding it");
            let start = prepared.start;
            prepared.remove_files();
            return Ok(CleanOutcome {
                next_dirty_offset: start,
                aborted: true,
                ..CleanOutcome::default()
            });
        }
        let PreparedGroups {
            groups,
            mut outcome,
        } = prepared.result?;
        let mut skipped = false;
        let mut groups = groups.into_iter();
        while let Some(group) = groups.next() {
            let intact = group
                .old
                .iter()
                .all(|(base, id)| log.segments.get(base).is_some_and(|s| s.id() == *id));
            if !intact {
                info!(dir = %log.dir.display(), base_offset = group.cleaned.base_offset(),
                    "segments deleted during the cleaning pass: skipping their group");
                skipped = true;
                outcome.groups -= 1;
                group.cleaned.delete()?;
                continue;
            }
            if let Err(e) = self.swap_group(log, group) {
                if !matches!(e, CleanerError::InjectedCrash(_)) {
                    for rest in groups {
                        // Best effort; Log::open removes leftovers too.
                        let _ = rest.cleaned.delete();
                    }
                }
                return Err(e);
            }
        }
        if skipped {
            outcome.next_dirty_offset = prepared.start;
        }
        Ok(outcome)
    }

    /// Kafka's `buildOffsetMap`: returns whether the map filled up.
    fn build_offset_map(&mut self, snapshot: &CleaningSnapshot) -> Result<bool, LogError> {
        let (start, end) = (snapshot.start, snapshot.upper);
        self.map.clear();
        let mut txns = CleanedTxns::new(&snapshot.aborted, start, end);
        let segments = &snapshot.segments;
        for (i, segment) in segments.iter().enumerate() {
            let next_base = segments.get(i + 1).map_or(end, SegmentView::base_offset);
            if next_base <= start || segment.base_offset() >= end {
                continue;
            }
            let pos = match snapshot.start_position {
                Some((base, pos)) if base == segment.base_offset() => pos,
                _ => 0,
            };
            let mut batches = SegmentBatches {
                segment,
                pos,
                chunk: self.read_chunk(),
                buf: Bytes::new(),
            };
            while let Some((batch, _)) = batches.next_batch()? {
                self.throttler.maybe_throttle(batch.size_in_bytes() as u64);
                if batch.base_offset() >= end {
                    break;
                }
                // Markers and aborted data never enter the map.
                let skip_keys = if batch.is_control() {
                    txns.on_control_batch(&batch);
                    true
                } else {
                    txns.on_batch(&batch)
                };
                if !skip_keys {
                    let records = batch.records().map_err(|source| LogError::CorruptSegment {
                        path: segment.log_path().to_path_buf(),
                        position: batches.pos - batch.size_in_bytes() as u64,
                        source,
                    })?;
                    for record in records {
                        let offset = batch.base_offset() + i64::from(record.offset_delta);
                        if let Some(key) = &record.key
                            && offset >= start
                        {
                            if self.map.is_full() {
                                debug!(
                                    segment = segment.base_offset(),
                                    offset, "offset map is full"
                                );
                                return Ok(true);
                            }
                            self.map.put(key, offset);
                        }
                    }
                }
                if batch.last_offset() >= start {
                    self.map.update_latest_offset(batch.last_offset());
                }
            }
            // Offsets missing at the end of the segment (compacted away) are covered too.
            self.map.update_latest_offset(next_base.min(end) - 1);
        }
        Ok(false)
    }

    /// Writes one group's cleaned segment as `<base>.log.cleaned` (fsynced) and opens it with
    /// freshly built, fsynced `.cleaned` indexes.
    fn clean_group(
        &mut self,
        snapshot: &CleaningSnapshot,
        group: &[&SegmentView],
        now_ms: i64,
        active_producers: &HashMap<i64, i64>,
        outcome: &mut CleanOutcome,
    ) -> Result<(Segment, Vec<crate::txn_index::AbortedTxn>), CleanerError> {
        let Some(base) = group.first().map(|v| v.base_offset()) else {
            return Err(CleanerError::Log(LogError::NoActiveSegment {
                dir: snapshot.dir.clone(),
            }));
        };
        let dir = &snapshot.dir;
        let cleaned_path = suffixed(dir, base, CLEANED_FILE_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&cleaned_path)
            .map_err(|e| LogError::io(&cleaned_path, e))?;
        let mut writer = CleanedWriter {
            file,
            path: cleaned_path.clone(),
            pos: 0,
            buf: BytesMut::new(),
            flush_at: (self.config.io_buffer_size / 2).max(1),
        };
        let last_base = group.last().map_or(base, |v| v.base_offset());
        let group_end = snapshot
            .segments
            .iter()
            .map(SegmentView::base_offset)
            .find(|&b| b > last_base)
            .unwrap_or(snapshot.upper);
        let mut filter = RecordFilter {
            map: &self.map,
            now_ms,
            delete_retention_ms: snapshot.config.delete_retention_ms,
            active_producers,
            txns: CleanedTxns::new(&snapshot.aborted, base, group_end),
        };
        for segment in group {
            outcome.bytes_before += segment.size();
            let mut batches = SegmentBatches {
                segment,
                pos: 0,
                chunk: self.read_chunk(),
                buf: Bytes::new(),
            };
            while let Some((batch, at)) = batches.next_batch()? {
                self.throttler.maybe_throttle(batch.size_in_bytes() as u64);
                let filtered =
                    filter
                        .apply(&batch, outcome)
                        .map_err(|source| LogError::CorruptSegment {
                            path: segment.log_path().to_path_buf(),
                            position: at,
                            source,
                        })?;
                if let Some(kept) = filtered
                    && let Some(written) = writer.push(&kept)?
                {
                    self.throttler.maybe_throttle(written);
                }
            }
        }
        if let Some(written) = writer.finish()? {
            self.throttler.maybe_throttle(written);
        }
        outcome.bytes_after += writer.pos;
        // Kafka gives the cleaned segment the last old segment's modification time, so that
        // time-based decisions on segments without timestamps (retention, compaction lag) do not
        // restart with every cleaning.
        let last_modified = group.last().and_then(|s| {
            std::fs::metadata(s.log_path())
                .and_then(|m| m.modified())
                .ok()
        });
        if let Some(modified) = last_modified {
            writer
                .file
                .set_modified(modified)
                .map_err(|e| LogError::io(&cleaned_path, e))?;
        }
        // The cleaned data must be durable before the rename makes it the log's data: a swap
        // file is trusted whole by recovery.
        writer
            .file
            .sync_all()
            .map_err(|e| LogError::io(&cleaned_path, e))?;
        drop(writer);
        // Its indexes are built (and fsynced, by sealing) here, outside the log's lock.
        let segment = Segment::open_cleaned(dir, base, &snapshot.config, now_ms, Some(group_end))?;
        Ok((segment, filter.txns.cleaned_index))
    }

    /// Replaces one group's old segments by its cleaned segment (under the log's lock).
    fn swap_group(&mut self, log: &mut Log, group: PreparedGroup) -> Result<(), CleanerError> {
        let dir = log.dir.clone();
        let PreparedGroup {
            old,
            mut cleaned,
            aborted,
        } = group;
        let base = cleaned.base_offset();
        let cleaned_path = suffixed(&dir, base, CLEANED_FILE_SUFFIX);
        let swap_path = suffixed(&dir, base, SWAP_FILE_SUFFIX);
        std::fs::rename(&cleaned_path, &swap_path).map_err(|e| LogError::io(&swap_path, e))?;
        // The swap file must exist on disk before any old segment is deleted.
        fsync_dir(&dir).map_err(|e| LogError::io(&dir, e))?;
        self.maybe_crash(CrashPoint::AfterSwapRenamed)?;
        let last_old = old.last().map_or(base, |(b, _)| *b);
        let next_base = log.segments.range(last_old + 1..).next().map(|(b, _)| *b);
        // The old segments' `.txnindex` files go with them; the cleaned segment indexes the
        // aborted transactions whose markers it kept.
        // (`Segment::delete` removes their files.)
        for (b, _) in &old {
            log.txn_indexes.remove(b);
        }
        for (segment_base, _) in &old {
            if let Some(segment) = log.segments.remove(segment_base) {
                segment.delete()?;
            }
        }
        // The deletions must be durable before the swap file takes the first one's name.
        fsync_dir(&dir).map_err(|e| LogError::io(&dir, e))?;
        self.maybe_crash(CrashPoint::AfterOldSegmentsDeleted)?;
        let final_path = offset_file_path(&dir, base, LOG_FILE_SUFFIX);
        std::fs::rename(&swap_path, &final_path).map_err(|e| LogError::io(&final_path, e))?;
        // The index files (fsynced when prepared) follow only now: next to the old segment's
        // data they would have described the wrong file.
        cleaned.take_final_names(&dir)?;
        if !aborted.is_empty() {
            // Written whole and fsynced; a crash before this leaves a completed swap, and
            // recovery then has the index rebuilt from the log.
            let index = crate::txn_index::TransactionIndex::write_new(&dir, base, aborted)?;
            log.txn_indexes.insert(base, index);
        }
        // The segment is the log's again under its own name; a crash must not revert that.
        fsync_dir(&dir).map_err(|e| LogError::io(&dir, e))?;
        if let Some(next) = next_base {
            cleaned.set_next_offset_bound(next);
        }
        log.segments.insert(base, cleaned);
        Ok(())
    }

    fn maybe_crash(&self, point: CrashPoint) -> Result<(), CleanerError> {
        if self.crash_at == Some(point) {
            return Err(CleanerError::InjectedCrash(point));
        }
        Ok(())
    }
}

/// `<dir>/<20-digit base>.log<suffix>` (Kafka: `00000000000000000000.log.cleaned`).
fn suffixed(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    offset_file_path(dir, base, &format!("{LOG_FILE_SUFFIX}{suffix}"))
}

/// Kafka's `groupSegmentsBySize`: consecutive segments below `end_offset` whose total size fits
/// `segment.bytes`, whose index entries fit `segment.index.bytes`, and whose offsets fit one
/// segment's 32-bit relative offsets.
fn group_segments(
    snapshot: &CleaningSnapshot,
    end_offset: i64,
    first_uncleanable: i64,
) -> Vec<Vec<&SegmentView>> {
    let segments: Vec<&SegmentView> = snapshot
        .segments
        .iter()
        .filter(|s| s.base_offset() < end_offset)
        .collect();
    let max_size = u64::from(snapshot.config.segment_bytes);
    let max_index = u64::from(snapshot.config.segment_index_bytes);
    let index_bytes = |s: &SegmentView| {
        let (offsets, times) = s.index_entries();
        (
            offsets as u64 * crate::offset_index::OFFSET_INDEX_ENTRY_SIZE as u64,
            times as u64 * crate::time_index::TIME_INDEX_ENTRY_SIZE as u64,
        )
    };
    // Last offset a segment may hold: before the next segment, or before the uncleanable part
    // (the snapshot holds every segment below it).
    let last_offset_of = |s: &SegmentView| {
        let next = snapshot
            .segments
            .iter()
            .map(SegmentView::base_offset)
            .find(|&b| b > s.base_offset())
            .unwrap_or(first_uncleanable);
        next.min(first_uncleanable.max(s.base_offset() + 1)) - 1
    };
    let mut groups = Vec::new();
    let mut i = 0;
    while i < segments.len() {
        let first = segments[i];
        let mut group = vec![first];
        let mut size = first.size();
        let (mut offset_index, mut time_index) = index_bytes(first);
        i += 1;
        while let Some(&next) = segments.get(i) {
            let (o, t) = index_bytes(next);
            let fits = size + next.size() <= max_size
                && offset_index + o <= max_index
                && time_index + t <= max_index
                && (next.size() == 0
                    || last_offset_of(next) - first.base_offset() <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            group.push(next);
            size += next.size();
            offset_index += o;
            time_index += t;
            i += 1;
        }
        groups.push(group);
    }
    groups
}

/// Buffered writes of the cleaned segment (`log.cleaner.io.buffer.size / 2`).
struct CleanedWriter {
    file: File,
    path: PathBuf,
    pos: u64,
    buf: BytesMut,
    flush_at: usize,
}

impl CleanedWriter {
    /// Buffers `batch`; returns the bytes written to the file if the buffer was flushed.
    fn push(&mut self, batch: &RecordBatch) -> Result<Option<u64>, LogError> {
        self.buf.extend_from_slice(batch.as_bytes());
        if self.buf.len() >= self.flush_at {
            return self.finish();
        }
        Ok(None)
    }

    fn finish(&mut self) -> Result<Option<u64>, LogError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        self.file
            .write_all_at(&self.buf, self.pos)
            .map_err(|e| LogError::io(&self.path, e))?;
        let written = self.buf.len() as u64;
        self.pos += written;
        self.buf.clear();
        Ok(Some(written))
    }
}

/// Kafka's `LogCleaner` record filter over one batch (`MemoryRecords.filterTo`).
struct RecordFilter<'a> {
    map: &'a OffsetMap,
    now_ms: i64,
    delete_retention_ms: i64,
    active_producers: &'a HashMap<i64, i64>,
    txns: CleanedTxns,
}

/// Kafka's `CleanedTransactionMetadata`: the transactions met while reading the batches of a
/// range in offset order, to tell aborted data and removable markers.
struct CleanedTxns {
    /// Aborted transactions not reached yet, latest first (popped by first offset).
    pending: Vec<crate::txn_index::AbortedTxn>,
    /// Producer → its aborted transaction being read, and whether a batch of it was seen.
    ongoing_aborted: HashMap<i64, (crate::txn_index::AbortedTxn, bool)>,
    /// Producers with a committed transaction whose data was seen.
    ongoing_committed: std::collections::HashSet<i64>,
    /// Aborted transactions whose marker is kept with data removed: the cleaned `.txnindex`.
    cleaned_index: Vec<crate::txn_index::AbortedTxn>,
}

impl CleanedTxns {
    /// Over the aborted transactions overlapping `[from, to)`, the range about to be read
    /// (Kafka's `collectAbortedTransactions` for it).
    fn new(aborted: &[crate::txn_index::AbortedTxn], from: i64, to: i64) -> Self {
        let mut pending: Vec<_> = aborted
            .iter()
            .filter(|t| t.last_offset >= from && t.first_offset < to)
            .copied()
            .collect();
        pending.sort_by_key(|t| std::cmp::Reverse((t.first_offset, t.last_offset)));
        CleanedTxns {
            pending,
            ongoing_aborted: HashMap::new(),
            ongoing_committed: std::collections::HashSet::new(),
            cleaned_index: Vec::new(),
        }
    }

    fn consume_aborted_up_to(&mut self, offset: i64) {
        while self
            .pending
            .last()
            .is_some_and(|t| t.first_offset <= offset)
        {
            if let Some(txn) = self.pending.pop() {
                self.ongoing_aborted
                    .entry(txn.producer_id)
                    .or_insert((txn, false));
            }
        }
    }

    /// A data batch: `true` if it belongs to an aborted transaction (to be removed).
    fn on_batch(&mut self, batch: &RecordBatch) -> bool {
        self.consume_aborted_up_to(batch.last_offset());
        if !batch.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&batch.producer_id()) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(batch.producer_id());
                false
            }
        }
    }

    /// A control batch: `true` if the marker's transaction has no data left in what was read
    /// (the marker may go once its delete horizon passed).
    fn on_control_batch(&mut self, batch: &RecordBatch) -> bool {
        self.consume_aborted_up_to(batch.last_offset());
        let Ok(records) = batch.records() else {
            return false;
        };
        let Some(record) = records.first() else {
            // An empty control batch was cleaned before: safe to remove.
            return true;
        };
        let producer_id = batch.producer_id();
        match record.key.as_ref().and_then(|k| k.get(2..4)) {
            // ABORT: kept while this pass removed data of the transaction.
            Some([0, 0]) => match self.ongoing_aborted.remove(&producer_id) {
                Some((txn, true)) => {
                    self.cleaned_index.push(txn);
                    false
                }
                _ => true,
            },
            // COMMIT: removable if no data of the transaction was read.
            Some([0, 1]) => !self.ongoing_committed.remove(&producer_id),
            _ => false,
        }
    }
}

impl RecordFilter<'_> {
    /// The batch to write in place of `batch` (itself, a rebuilt one, an empty header), or
    /// `None` to drop it.
    fn apply(
        &mut self,
        batch: &RecordBatch,
        outcome: &mut CleanOutcome,
    ) -> Result<Option<RecordBatch>, BatchError> {
        let count = u64::try_from(batch.record_count()).unwrap_or(0);
        if batch.is_control() {
            outcome.records_read += count;
            let removable = self.txns.on_control_batch(batch);
            let horizon = batch.has_delete_horizon().then(|| batch.base_timestamp());
            if removable && horizon.is_some_and(|h| h <= self.now_ms) {
                return Ok(None);
            }
            outcome.records_kept += count;
            if removable && horizon.is_none() {
                // Kafka's `containsMarkerForEmptyTxn`: the marker gets a delete horizon.
                return self.rebuild(batch, batch.records()?, true).map(Some);
            }
            return Ok(Some(batch.clone()));
        }
        if self.txns.on_batch(batch) {
            outcome.records_read += count;
            // Aborted data goes; an active producer's last batch stays as an empty header.
            return Ok(self.empty_header_if_last(batch));
        }
        let records = batch.records()?;
        let total = records.len();
        let horizon = batch.has_delete_horizon().then(|| batch.base_timestamp());
        let mut contains_tombstones = false;
        let retained: Vec<Record> = records
            .into_iter()
            .filter(|record| {
                let offset = batch.base_offset() + i64::from(record.offset_delta);
                let keep = self.retain(record, offset, horizon);
                contains_tombstones |= keep && record.value.is_none();
                keep
            })
            .collect();
        outcome.records_read += total as u64;
        outcome.records_kept += retained.len() as u64;
        let needs_horizon = contains_tombstones && horizon.is_none();
        if retained.len() == total && !needs_horizon {
            return Ok(Some(batch.clone()));
        }
        if retained.is_empty() {
            return Ok(self.empty_header_if_last(batch));
        }
        self.rebuild(batch, retained, needs_horizon).map(Some)
    }

    /// Kafka's `writeEmptyHeader` for an active producer's last batch whose records all go
    /// (offsets, producer and timestamp survive); `None` (the batch goes) otherwise.
    fn empty_header_if_last(&self, batch: &RecordBatch) -> Option<RecordBatch> {
        let last_of_producer = batch.producer_id() >= 0
            && self.active_producers.get(&batch.producer_id()) == Some(&batch.last_offset());
        if !last_of_producer {
            return None;
        }
        Some(
            RecordBatchBuilder::new(batch.base_offset())
                .partition_leader_epoch(batch.partition_leader_epoch())
                .timestamp_type(batch.timestamp_type())
                .producer(
                    batch.producer_id(),
                    batch.producer_epoch(),
                    batch.base_sequence(),
                )
                .transactional(batch.is_transactional())
                .base_timestamp(batch.max_timestamp())
                .max_timestamp(batch.max_timestamp())
                .last_offset_delta(batch.last_offset_delta())
                .build(),
        )
    }

    /// `batch` rewritten with `retained` (its offsets, producer, flags and codec kept); with
    /// `needs_horizon` its base timestamp becomes now + `delete.retention.ms`, flagged as a
    /// delete horizon.
    fn rebuild(
        &self,
        batch: &RecordBatch,
        retained: Vec<Record>,
        needs_horizon: bool,
    ) -> Result<RecordBatch, BatchError> {
        let horizon = batch.has_delete_horizon().then(|| batch.base_timestamp());
        let base_timestamp = if needs_horizon {
            self.now_ms.saturating_add(self.delete_retention_ms)
        } else {
            batch.base_timestamp()
        };
        let mut builder = RecordBatchBuilder::new(batch.base_offset())
            .partition_leader_epoch(batch.partition_leader_epoch())
            .timestamp_type(batch.timestamp_type())
            .producer(
                batch.producer_id(),
                batch.producer_epoch(),
                batch.base_sequence(),
            )
            .delete_horizon(needs_horizon || horizon.is_some())
            .transactional(batch.is_transactional())
            .control(batch.is_control())
            .compression(batch.compression())
            .base_timestamp(base_timestamp)
            // Kafka keeps the last offset so the producer's last sequence stays valid.
            .last_offset_delta(batch.last_offset_delta());
        let mut max_timestamp = crate::batch::NO_TIMESTAMP;
        for mut record in retained {
            let timestamp = batch
                .base_timestamp()
                .saturating_add(record.timestamp_delta);
            max_timestamp = max_timestamp.max(timestamp);
            record.timestamp_delta = timestamp.saturating_sub(base_timestamp);
            builder.append(record);
        }
        if batch.timestamp_type() == TimestampType::LogAppendTime {
            max_timestamp = batch.max_timestamp();
        }
        builder.max_timestamp(max_timestamp).build_compressed(None)
    }

    /// Kafka's `Cleaner.shouldRetainRecord` for v2 batches.
    fn retain(&self, record: &Record, offset: i64, horizon: Option<i64>) -> bool {
        if offset > self.map.latest_offset() {
            return true;
        }
        let Some(key) = &record.key else {
            return false;
        };
        let latest_for_key = offset >= self.map.get(key);
        let keep_tombstone = horizon.is_none_or(|h| self.now_ms < h);
        latest_for_key && (record.value.is_some() || keep_tombstone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_in_kafkas_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("orders", 3), 42);
        write_cleaner_checkpoint(dir.path(), &offsets).expect("write");
        let text =
            std::fs::read_to_string(dir.path().join(CLEANER_OFFSET_CHECKPOINT_FILE)).expect("read");
        assert_eq!(text, "0\n1\norders 3 42\n");
        assert_eq!(read_cleaner_checkpoint(dir.path()).expect("read"), offsets);
    }
}
