//! One log segment: `<base>.log` (consecutive v2 batches) with its `.index` and `.timeindex`.
//!
//! A segment trusts its own bytes only after checking them: recovery (`Segment::recover`)
//! re-reads a range of the file, checks every batch (framing, magic, CRC-32C, increasing
//! offsets within the segment's 32-bit relative range), rebuilds the index entries for it and
//! truncates the file at the first bad batch. Reads re-check the CRC of every batch they return.
//!
//! Legacy message sets (magic 0 and 1, see [`crate::legacy`]) written by a ZooKeeper-mode
//! Kafka are recognised by every scan: recovery checks their size and CRC-32 (Kafka's
//! `LogSegment.recover` with `ensureValid`), indexes them by their offset (their last offset)
//! and cuts a torn tail; offset lookups find them. A read serves them as stored (size and
//! CRC-32 checked), never mixed with v2 batches in one read, and with no parsed
//! [`RecordBatch`]; timestamp lookups answer from their timestamps (magic 1); a single v2
//! batch read (`read_batch_at`) fails on one with [`BatchError::UnsupportedMagic`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use tracing::warn;

use crate::batch::{
    BatchError, LOG_OVERHEAD, MAX_BATCH_BYTES, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD, RecordBatch,
    peek_batch_size,
};
use crate::config::LogConfig;
use crate::error::LogError;
use crate::fs::offset_file_path;
use crate::fs::{
    CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX,
};
use crate::legacy::{LegacyEntry, MAGIC_V1, legacy_magic, peek_entry_size};
use crate::offset_index::OffsetIndex;
use crate::time_index::{TimeIndex, TimestampOffset};

/// Bytes read per I/O call when scanning a segment during recovery.
const SCAN_CHUNK_BYTES: usize = 1024 * 1024;

/// Source of [`Segment::id`]s: unique per segment object in this process.
static NEXT_SEGMENT_ID: AtomicU64 = AtomicU64::new(1);

fn next_segment_id() -> u64 {
    NEXT_SEGMENT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What made recovery stop before the end of a segment's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailDefect {
    /// The bytes at the position are not a valid batch.
    Batch(BatchError),
    /// The batch's base offset is not above the previous batch's last offset (or below the
    /// segment's base offset).
    OffsetNotIncreasing {
        /// The batch's base offset.
        base_offset: i64,
        /// Smallest acceptable base offset.
        expected_min: i64,
    },
    /// The batch's last offset is below its base offset, or does not fit the segment's
    /// 32-bit relative offsets.
    OffsetOutsideSegment {
        /// The batch's base offset.
        base_offset: i64,
        /// The batch's last offset.
        last_offset: i64,
    },
}

/// Result of recovering a segment (see [`crate::recovery`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryOutcome {
    /// Valid batches found.
    pub batches: usize,
    /// Bytes cut from the end of the file.
    pub truncated_bytes: u64,
    /// Where and why the scan stopped early, if it did.
    pub stop: Option<(u64, TailDefect)>,
}

/// What the trusted part of a segment before a rescan holds.
#[derive(Debug, Clone, Copy)]
struct PrefixState {
    max_timestamp: TimestampOffset,
    first_batch_timestamp: Option<i64>,
    last_offset: i64,
}

/// The fixed-size fields of a batch header that locating reads need (no CRC check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) size: u64,
    pub(crate) max_timestamp: i64,
}

fn parse_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if let Some(magic) = legacy_magic(buf) {
        return parse_legacy_header(buf, magic);
    }
    let size = peek_batch_size(buf, MAX_BATCH_BYTES)?;
    if buf.len() < RECORD_BATCH_OVERHEAD {
        return Err(BatchError::Truncated {
            need: RECORD_BATCH_OVERHEAD,
            have: buf.len(),
        });
    }
    let i64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&buf[at..at + 8]);
        i64::from_be_bytes(a)
    };
    let base_offset = i64_at(0);
    let last_offset_delta = i32::from_be_bytes([buf[23], buf[24], buf[25], buf[26]]);
    Ok(BatchHeader {
        base_offset,
        last_offset: base_offset.saturating_add(i64::from(last_offset_delta)),
        size: size as u64,
        max_timestamp: i64_at(35),
    })
}

/// A legacy entry's header: its offset is its last offset, and is taken as its base offset too
/// (a wrapper's first inner offset is not known without decompressing it; lookups go by last
/// offset). Its max timestamp is its timestamp (magic 1) or `NO_TIMESTAMP` (magic 0).
fn parse_legacy_header(buf: &[u8], magic: i8) -> Result<BatchHeader, BatchError> {
    let size = peek_entry_size(buf, MAX_BATCH_BYTES)?;
    let need = if magic == MAGIC_V1 { 26 } else { 17 };
    if buf.len() < need {
        return Err(BatchError::Truncated {
            need,
            have: buf.len(),
        });
    }
    let i64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&buf[at..at + 8]);
        i64::from_be_bytes(a)
    };
    let offset = i64_at(0);
    Ok(BatchHeader {
        base_offset: offset,
        last_offset: offset,
        size: size as u64,
        max_timestamp: if magic == MAGIC_V1 {
            i64_at(18)
        } else {
            NO_TIMESTAMP
        },
    })
}

/// Size of the batch or legacy entry at the front of `buf` (needs 17 bytes to tell them apart).
fn peek_size(buf: &[u8]) -> Result<usize, BatchError> {
    if legacy_magic(buf).is_some() {
        peek_entry_size(buf, MAX_BATCH_BYTES)
    } else {
        peek_batch_size(buf, MAX_BATCH_BYTES)
    }
}

/// A v2 batch; a legacy entry is [`BatchError::UnsupportedMagic`], whatever its size says.
fn parse_stored_batch(buf: Bytes) -> Result<(RecordBatch, Bytes), BatchError> {
    if let Some(magic) = legacy_magic(&buf) {
        return Err(BatchError::UnsupportedMagic { magic });
    }
    RecordBatch::parse(buf, MAX_BATCH_BYTES)
}

/// One checked unit of a segment: a v2 batch or a legacy entry.
#[derive(Debug, Clone)]
pub(crate) enum StoredEntry {
    /// A v2 batch (CRC-32C checked).
    Batch(RecordBatch),
    /// A magic 0/1 entry (CRC-32 checked).
    Legacy(LegacyEntry),
}

impl StoredEntry {
    pub(crate) fn size_in_bytes(&self) -> usize {
        match self {
            StoredEntry::Batch(b) => b.size_in_bytes(),
            StoredEntry::Legacy(e) => e.size_in_bytes(),
        }
    }
}

/// What recovery needs of one checked batch or legacy entry.
struct Scanned {
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    size: usize,
}

/// Parses and checks (CRC-32C, or CRC-32 for a legacy entry) the batch at the front of `buf`.
fn parse_scanned(buf: Bytes) -> Result<(Scanned, Bytes), BatchError> {
    if legacy_magic(&buf).is_some() {
        let (entry, rest) = LegacyEntry::parse(buf, MAX_BATCH_BYTES)?;
        let scanned = Scanned {
            base_offset: entry.offset(),
            last_offset: entry.offset(),
            max_timestamp: entry.timestamp(),
            size: entry.size_in_bytes(),
        };
        return Ok((scanned, rest));
    }
    let (batch, rest) = RecordBatch::parse(buf, MAX_BATCH_BYTES)?;
    let scanned = Scanned {
        base_offset: batch.base_offset(),
        last_offset: batch.last_offset(),
        max_timestamp: batch.max_timestamp(),
        size: batch.size_in_bytes(),
    };
    Ok((scanned, rest))
}

/// Whether an offset index entry for `offset` may point at the batch `header`: the batch
/// starts at or before the offset. krust (and Kafka's recovery) index a batch by its own last
/// offset; Kafka's append path indexes a multi-batch append (a follower's fetch) by the append's
/// last offset at its first batch's position. Both satisfy this, and it is exactly what a
/// lookup needs: no batch before the position can hold an offset at or after the entry's.
fn entry_matches(header: &BatchHeader, offset: i64) -> bool {
    header.base_offset <= offset
}

/// Reads up to `len` bytes at `pos`; shorter only at end of file.
fn read_at(file: &File, path: &Path, pos: u64, len: usize) -> Result<Bytes, LogError> {
    let mut buf = BytesMut::zeroed(len);
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], pos + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LogError::io(path, e)),
        }
    }
    buf.truncate(filled);
    Ok(buf.freeze())
}

/// A read-only handle on a sealed segment's data that lives without the [`crate::Log`]: the
/// cleaner reads through it outside the partition lock. The file of a sealed segment is only
/// ever changed by a truncation into it or deleted whole; the reader revalidates against the
/// log (the log's truncation count, [`SegmentView::id`]) before it acts on what it read.
#[derive(Debug, Clone)]
pub struct SegmentView {
    id: u64,
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    size: u64,
    offset_index_entries: usize,
    time_index_entries: usize,
}

impl SegmentView {
    /// The segment object it was taken from ([`Segment::id`]).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// First offset the segment may hold.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Bytes of batches when the view was taken.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The `.log` file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Entries in the offset and time indexes when the view was taken.
    pub(crate) fn index_entries(&self) -> (usize, usize) {
        (self.offset_index_entries, self.time_index_entries)
    }

    /// Up to `len` bytes of the file at `pos` (shorter at the end), unchecked.
    pub(crate) fn read_bytes(&self, pos: u64, len: usize) -> Result<Bytes, LogError> {
        read_at(&self.file, &self.log_path, pos, len)
    }
}

/// Source of spare file names (unique per process; several jobs may make spares at once).
static NEXT_SPARE_ID: AtomicU64 = AtomicU64::new(1);

/// The files of the next segment, created (and the indexes pre-allocated) ahead of a roll by a
/// roll's background flush ([`crate::log::FlushJob`]), so that the roll on the produce path
/// renames three files instead of creating them: creating a file costs about a millisecond on
/// a busy ext4 (it waits for the journal the background fsyncs keep committing), a rename a
/// tenth of that.
///
/// The names end in `.deleted` (`spare-<n>.log.deleted`, …): a spare left by a crash or an
/// unclean stop is removed at the next open, by krust's recovery and by Kafka's `LogLoader`.
#[derive(Debug)]
pub struct SpareSegment {
    log_path: PathBuf,
    file: File,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// `segment.index.bytes` the indexes were pre-allocated with.
    index_bytes: u32,
}

impl SpareSegment {
    /// Creates the spare files in `dir` (blocking; called off the log's lock).
    pub(crate) fn create(dir: &Path, index_bytes: u32) -> Result<SpareSegment, LogError> {
        let n = NEXT_SPARE_ID.fetch_add(1, Ordering::Relaxed);
        let name = |suffix: &str| dir.join(format!("spare-{n}{suffix}{DELETED_FILE_SUFFIX}"));
        let log_path = name(LOG_FILE_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(|e| LogError::io(&log_path, e))?;
        Ok(SpareSegment {
            offset_index: OffsetIndex::create(&name(INDEX_FILE_SUFFIX), 0, index_bytes)?,
            time_index: TimeIndex::create(&name(TIME_INDEX_FILE_SUFFIX), 0, index_bytes)?,
            log_path,
            file,
            index_bytes,
        })
    }

    /// Removes the spare's files (best effort: the next open removes them anyway).
    pub(crate) fn delete(self) {
        let SpareSegment {
            log_path,
            file,
            offset_index,
            time_index,
            ..
        } = self;
        drop(file);
        let _ = remove_if_exists(&log_path);
        let _ = offset_index.delete();
        let _ = time_index.delete();
    }
}

/// A file to fsync off the caller's thread, with its path for errors.
pub(crate) type SyncHandle = (PathBuf, Arc<File>);

/// A segment of the log.
#[derive(Debug)]
pub struct Segment {
    /// Unique per segment object (a cleaned or recreated segment at the same base offset gets
    /// a new one): lets work done outside the log lock check that it saw this very segment.
    id: u64,
    base_offset: i64,
    log_path: PathBuf,
    /// Shared with a roll's background flush ([`crate::log::FlushJob`]) and the cleaner's
    /// [`SegmentView`]s.
    file: Arc<File>,
    /// Bytes of valid batches (the file is never longer once the segment is open).
    size: u64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: u64,
    bytes_since_last_index_entry: u64,
    /// Largest batch `maxTimestamp` so far and the last offset of its batch.
    max_timestamp: TimestampOffset,
    /// Offset after the last batch (the base offset when empty). For an inactive segment
    /// opened without a scan it is the next segment's base offset.
    next_offset: i64,
    /// `maxTimestamp` of the first batch (Kafka's `rollingBasedTimestamp`), for `segment.ms`.
    rolling_based_timestamp: Option<i64>,
    /// When the segment was created or opened (for `segment.ms` when it has no timestamps).
    created_ms: i64,
    /// Bytes written since the last fsync.
    unflushed: bool,
    /// Sealed by a roll, its trimmed index files not fsynced yet (the roll's background flush
    /// or [`Segment::flush`] does it).
    indexes_unsynced: bool,
}

impl Segment {
    /// Creates an empty segment at `base_offset` (files are created or emptied).
    pub(crate) fn create(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let log_path = offset_file_path(dir, base_offset, LOG_FILE_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(|e| LogError::io(&log_path, e))?;
        let offset_index = OffsetIndex::create(
            &offset_file_path(dir, base_offset, INDEX_FILE_SUFFIX),
            base_offset,
            config.segment_index_bytes,
        )?;
        let time_index = TimeIndex::create(
            &offset_file_path(dir, base_offset, TIME_INDEX_FILE_SUFFIX),
            base_offset,
            config.segment_index_bytes,
        )?;
        Ok(Segment {
            id: next_segment_id(),
            base_offset,
            log_path,
            file: Arc::new(file),
            size: 0,
            offset_index,
            time_index,
            index_interval_bytes: u64::from(config.index_interval_bytes),
            bytes_since_last_index_entry: 0,
            max_timestamp: TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: base_offset,
            },
            next_offset: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            unflushed: true,
            indexes_unsynced: false,
        })
    }

    /// [`Segment::create`] from a [`SpareSegment`] made ahead of the roll: its files are renamed
    /// to the segment's names (a file already there is replaced, as `create` truncates it).
    /// Falls back to `create` when the spare's indexes were sized for another
    /// `segment.index.bytes`.
    pub(crate) fn create_from_spare(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now_ms: i64,
        spare: SpareSegment,
    ) -> Result<Segment, LogError> {
        if spare.index_bytes != config.segment_index_bytes {
            spare.delete();
            return Segment::create(dir, base_offset, config, now_ms);
        }
        let SpareSegment {
            log_path: spare_path,
            file,
            offset_index,
            time_index,
            ..
        } = spare;
        let log_path = offset_file_path(dir, base_offset, LOG_FILE_SUFFIX);
        std::fs::rename(&spare_path, &log_path).map_err(|e| LogError::io(&log_path, e))?;
        let offset_index = offset_index.adopt(
            base_offset,
            &offset_file_path(dir, base_offset, INDEX_FILE_SUFFIX),
        )?;
        let time_index = time_index.adopt(
            base_offset,
            &offset_file_path(dir, base_offset, TIME_INDEX_FILE_SUFFIX),
        )?;
        Ok(Segment {
            id: next_segment_id(),
            base_offset,
            log_path,
            file: Arc::new(file),
            size: 0,
            offset_index,
            time_index,
            index_interval_bytes: u64::from(config.index_interval_bytes),
            bytes_since_last_index_entry: 0,
            max_timestamp: TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: base_offset,
            },
            next_offset: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            unflushed: true,
            indexes_unsynced: false,
        })
    }

    /// Opens an existing segment. Its indexes are loaded and sanity-checked; if one is
    /// missing or inconsistent the whole segment is recovered (rescanned, indexes rebuilt,
    /// bad tail cut), which the returned outcome reports. `next_offset_bound` is the next
    /// segment's base offset for an inactive segment (`None` for the last one).
    ///
    /// Without recovery the segment's bytes are taken as they are (they lie below the
    /// recovery point, so they were fsynced); reads still check every CRC.
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now_ms: i64,
        next_offset_bound: Option<i64>,
    ) -> Result<(Segment, Option<RecoveryOutcome>), LogError> {
        let log_path = offset_file_path(dir, base_offset, LOG_FILE_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(|e| LogError::io(&log_path, e))?;
        let size = file
            .metadata()
            .map_err(|e| LogError::io(&log_path, e))?
            .len();
        let index_path = offset_file_path(dir, base_offset, INDEX_FILE_SUFFIX);
        let time_index_path = offset_file_path(dir, base_offset, TIME_INDEX_FILE_SUFFIX);
        let last_offset_bound = next_offset_bound.map_or(i64::MAX, |n| n - 1);
        let offset_index =
            OffsetIndex::open(&index_path, base_offset, config.segment_index_bytes, size)?;
        let time_index = TimeIndex::open(
            &time_index_path,
            base_offset,
            config.segment_index_bytes,
            last_offset_bound,
        )?;
        let mut needs_recovery = None;
        let offset_index = match offset_index {
            Ok(i) => i,
            Err(defect) => {
                needs_recovery = Some(format!("offset index: {defect:?}"));
                OffsetIndex::create(&index_path, base_offset, config.segment_index_bytes)?
            }
        };
        let time_index = match time_index {
            Ok(i) => i,
            Err(defect) => {
                needs_recovery = Some(format!("time index: {defect:?}"));
                TimeIndex::create(&time_index_path, base_offset, config.segment_index_bytes)?
            }
        };
        let mut segment = Segment {
            id: next_segment_id(),
            base_offset,
            log_path,
            file: Arc::new(file),
            size,
            max_timestamp: time_index.last_entry(),
            offset_index,
            time_index,
            index_interval_bytes: u64::from(config.index_interval_bytes),
            bytes_since_last_index_entry: 0,
            next_offset: next_offset_bound.unwrap_or(base_offset),
            rolling_based_timestamp: None,
            created_ms: now_ms,
            unflushed: false,
            indexes_unsynced: false,
        };
        if needs_recovery.is_none() {
            // Kafka's sanity check, made precise: the last entry must point at a batch
            // boundary at or before its offset.
            let last = segment.offset_index.last_entry();
            if last.position > 0 {
                match segment.read_header(u64::from(last.position))? {
                    Ok(Some(h)) if entry_matches(&h, last.offset) => {}
                    _ => needs_recovery = Some("last offset index entry".to_string()),
                }
            }
        }
        if needs_recovery.is_none() && !segment.time_index.is_empty() {
            // The last time index entry is the segment's max timestamp (retention and
            // timestamp lookups rely on it): it must name a batch with that timestamp (by its
            // last offset as krust writes it, or any offset inside it).
            let last = segment.time_index.last_entry();
            let matches = matches!(segment.translate_offset(last.offset),
                Ok(Some((_, h))) if h.base_offset <= last.offset && h.max_timestamp == last.timestamp);
            if !matches {
                needs_recovery = Some("last time index entry".to_string());
            }
        }
        if let Some(reason) = needs_recovery {
            warn!(segment = %segment.log_path.display(), reason, "index unusable; rebuilding from the log");
            let outcome = segment.recover(None)?;
            return Ok((segment, Some(outcome)));
        }
        segment.rolling_based_timestamp = match segment.read_header(0)? {
            Ok(Some(h)) => Some(h.max_timestamp),
            _ => None,
        };
        Ok((segment, None))
    }

    /// First offset this segment may hold.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Bytes of batches in the segment.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The `.log` file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The offset index.
    #[must_use]
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }

    /// The time index.
    #[must_use]
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    /// Largest batch timestamp and the last offset of its batch (`NO_TIMESTAMP` if none).
    #[must_use]
    pub fn max_timestamp(&self) -> TimestampOffset {
        self.max_timestamp
    }

    /// `maxTimestamp` of the first batch (Kafka's `getFirstBatchTimestamp`), for
    /// `max.compaction.lag.ms`.
    pub(crate) fn first_batch_timestamp(&self) -> Option<i64> {
        self.rolling_based_timestamp
    }

    /// Opens a segment whose data file was just written by the cleaner (and fsynced) under
    /// its temporary name `<base>.log.cleaned`: index files `<base>.index.cleaned` and
    /// `<base>.timeindex.cleaned` are created afresh and rebuilt by a full scan (which also
    /// re-checks every batch), then trimmed and fsynced, all before the cleaner takes the
    /// partition lock for the swap. [`Segment::take_final_names`] renames them afterwards.
    /// `next_offset_bound` is the next segment's base.
    ///
    /// # Errors
    /// [`LogError::Io`]; [`LogError::CorruptSegment`] if the scan finds a bad batch (the file
    /// is left as it is).
    pub(crate) fn open_cleaned(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now_ms: i64,
        next_offset_bound: Option<i64>,
    ) -> Result<Segment, LogError> {
        let cleaned = |suffix: &str| {
            offset_file_path(dir, base_offset, &format!("{suffix}{CLEANED_FILE_SUFFIX}"))
        };
        let log_path = cleaned(LOG_FILE_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(|e| LogError::io(&log_path, e))?;
        let size = file
            .metadata()
            .map_err(|e| LogError::io(&log_path, e))?
            .len();
        let offset_index = OffsetIndex::create(
            &cleaned(INDEX_FILE_SUFFIX),
            base_offset,
            config.segment_index_bytes,
        )?;
        let time_index = TimeIndex::create(
            &cleaned(TIME_INDEX_FILE_SUFFIX),
            base_offset,
            config.segment_index_bytes,
        )?;
        let mut segment = Segment {
            id: next_segment_id(),
            base_offset,
            log_path,
            file: Arc::new(file),
            size,
            offset_index,
            time_index,
            index_interval_bytes: u64::from(config.index_interval_bytes),
            bytes_since_last_index_entry: 0,
            max_timestamp: TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: base_offset,
            },
            next_offset: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            unflushed: false,
            indexes_unsynced: false,
        };
        // Check before scanning: a bad batch must be reported, not cut by the scan.
        let mut pos = 0;
        while let Some(batch) = segment.read_batch_at(pos)? {
            pos += batch.size_in_bytes() as u64;
        }
        let outcome = segment.recover(None)?;
        if let Some((position, TailDefect::Batch(source))) = outcome.stop {
            return Err(segment.corrupt(position, source));
        }
        segment.seal()?;
        if let Some(next) = next_offset_bound {
            segment.next_offset = next;
        }
        Ok(segment)
    }

    /// A segment opened by [`Segment::open_cleaned`] becomes the log's: its data file has
    /// been renamed to `<base>.log` by the cleaner; the index files follow it from their
    /// `.cleaned` names. The caller fsyncs the directory.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub(crate) fn take_final_names(&mut self, dir: &Path) -> Result<(), LogError> {
        self.log_path = offset_file_path(dir, self.base_offset, LOG_FILE_SUFFIX);
        self.offset_index
            .rename_to(&offset_file_path(dir, self.base_offset, INDEX_FILE_SUFFIX))?;
        self.time_index.rename_to(&offset_file_path(
            dir,
            self.base_offset,
            TIME_INDEX_FILE_SUFFIX,
        ))
    }

    /// Unique id of this segment object (see the field).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A read-only handle on this (sealed) segment for work outside the log lock.
    pub(crate) fn view(&self) -> SegmentView {
        SegmentView {
            id: self.id,
            base_offset: self.base_offset,
            log_path: self.log_path.clone(),
            file: Arc::clone(&self.file),
            size: self.size,
            offset_index_entries: self.offset_index.len(),
            time_index_entries: self.time_index.len(),
        }
    }

    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub(crate) fn set_next_offset_bound(&mut self, next: i64) {
        self.next_offset = next;
    }

    /// Whether some of this segment is not known to be on disk: data written since the last
    /// fsync, or index files trimmed by a roll and not fsynced yet.
    pub(crate) fn needs_sync(&self) -> bool {
        self.unflushed || self.indexes_unsynced
    }

    /// Handles on the files a background flush must fsync for this segment to be durable
    /// (see [`crate::log::FlushJob`]): the data file, and the index files a roll trimmed.
    pub(crate) fn sync_handles(&self) -> Vec<SyncHandle> {
        let mut handles = vec![(self.log_path.clone(), Arc::clone(&self.file))];
        if self.indexes_unsynced {
            handles.push(self.offset_index.sync_handle());
            handles.push(self.time_index.sync_handle());
        }
        handles
    }

    /// A background flush fsynced [`Segment::sync_handles`] of this sealed segment (nothing was
    /// written to it since: only the active segment is written).
    pub(crate) fn mark_synced(&mut self) {
        self.unflushed = false;
        self.indexes_unsynced = false;
    }

    /// Reads the header of the batch at `pos`: `Ok(None)` at the end of the segment,
    /// `Ok(Err(_))` if the bytes there are not a batch header.
    pub(crate) fn read_header(
        &self,
        pos: u64,
    ) -> Result<Result<Option<BatchHeader>, BatchError>, LogError> {
        if pos >= self.size {
            return Ok(Ok(None));
        }
        let buf = read_at(&self.file, &self.log_path, pos, RECORD_BATCH_OVERHEAD)?;
        Ok(match parse_header(&buf) {
            Ok(h) if h.size > self.size - pos => Err(BatchError::Truncated {
                need: h.size as usize,
                have: (self.size - pos) as usize,
            }),
            other => other.map(Some),
        })
    }

    fn corrupt(&self, position: u64, source: BatchError) -> LogError {
        LogError::CorruptSegment {
            path: self.log_path.clone(),
            position,
            source,
        }
    }

    /// Position and header of the first batch whose last offset is ≥ `target`, starting from
    /// `start` (a batch boundary). `None` if no such batch.
    fn scan_headers_from(
        &self,
        target: i64,
        mut pos: u64,
    ) -> Result<Option<(u64, BatchHeader)>, LogError> {
        loop {
            match self.read_header(pos)? {
                Ok(None) => return Ok(None),
                Ok(Some(h)) if h.last_offset >= target => return Ok(Some((pos, h))),
                Ok(Some(h)) => pos += h.size,
                Err(e) => return Err(self.corrupt(pos, e)),
            }
        }
    }

    /// Position and header of the first batch whose last offset is ≥ `target` (Kafka's
    /// `translateOffset`). Uses the offset index; if the entry it finds does not match the
    /// bytes, warns and scans from the start of the segment instead.
    pub(crate) fn translate_offset(
        &self,
        target: i64,
    ) -> Result<Option<(u64, BatchHeader)>, LogError> {
        let entry = self.offset_index.lookup(target);
        if entry.position > 0 {
            match self.read_header(u64::from(entry.position))? {
                Ok(Some(h)) if entry_matches(&h, entry.offset) => {}
                _ => {
                    warn!(segment = %self.log_path.display(), entry_offset = entry.offset,
                        position = entry.position, "offset index entry does not match the log; scanning");
                    return self.scan_headers_from(target, 0);
                }
            }
        }
        self.scan_headers_from(target, u64::from(entry.position))
    }

    /// Whole batches starting with the one holding `from_offset`, up to `max_bytes` (at least
    /// one batch, however large), only batches with last offset < `max_offset_exclusive`.
    /// Every returned batch has passed its CRC check.
    pub(crate) fn read(
        &self,
        from_offset: i64,
        max_bytes: usize,
        max_offset_exclusive: i64,
    ) -> Result<Option<(Bytes, Vec<RecordBatch>)>, LogError> {
        let Some((pos, first)) = self.translate_offset(from_offset)? else {
            return Ok(None);
        };
        if first.last_offset >= max_offset_exclusive {
            return Ok(Some((Bytes::new(), Vec::new())));
        }
        let available = (self.size - pos) as usize;
        let len = max_bytes.max(first.size as usize).min(available);
        let buf = read_at(&self.file, &self.log_path, pos, len)?;
        let mut rest = buf.clone();
        let mut batches = Vec::new();
        let mut used = 0usize;
        if legacy_magic(&rest).is_some() {
            return self.read_legacy(pos, rest, max_offset_exclusive).map(Some);
        }
        while !rest.is_empty() {
            if legacy_magic(&rest).is_some() {
                // Legacy entries after v2 batches: the next read serves them.
                break;
            }
            match parse_stored_batch(rest.clone()) {
                Ok((batch, tail)) => {
                    if batch.last_offset() >= max_offset_exclusive {
                        break;
                    }
                    used += batch.size_in_bytes();
                    batches.push(batch);
                    rest = tail;
                }
                // The read cut the next batch short: it belongs to the next fetch.
                Err(BatchError::Truncated { .. }) if !batches.is_empty() => break,
                Err(e) if batches.is_empty() => return Err(self.corrupt(pos, e)),
                Err(e) => {
                    // Serve the good batches; the next read starting here reports the error.
                    warn!(segment = %self.log_path.display(), position = pos + used as u64,
                        error = %e, "corrupt batch found by a read");
                    break;
                }
            }
        }
        Ok(Some((buf.slice(..used), batches)))
    }

    /// The legacy entries at the front of `buf` (read at `pos`), each checked (size, CRC-32),
    /// up to the first v2 batch or entry with offset ≥ `max_offset_exclusive`: their bytes as
    /// stored, and no v2 batch. Kafka 3.9 serves them as stored to every Fetch version that
    /// accepts their magic (it only ever converts down, for Fetch v0–v3).
    fn read_legacy(
        &self,
        pos: u64,
        buf: Bytes,
        max_offset_exclusive: i64,
    ) -> Result<(Bytes, Vec<RecordBatch>), LogError> {
        let mut rest = buf.clone();
        let mut used = 0usize;
        while legacy_magic(&rest).is_some() {
            match LegacyEntry::parse(rest.clone(), MAX_BATCH_BYTES) {
                Ok((entry, tail)) => {
                    if entry.offset() >= max_offset_exclusive {
                        break;
                    }
                    used += entry.size_in_bytes();
                    rest = tail;
                }
                Err(BatchError::Truncated { .. }) if used > 0 => break,
                Err(e) if used == 0 => return Err(self.corrupt(pos, e)),
                Err(e) => {
                    warn!(segment = %self.log_path.display(), position = pos + used as u64,
                        error = %e, "corrupt legacy entry found by a read");
                    break;
                }
            }
        }
        Ok((buf.slice(..used), Vec::new()))
    }

    /// The base offset of the batch or legacy entry at `pos` if it is whole and its CRC
    /// matches; `None` otherwise.
    fn checked_base_offset_at(&self, pos: u64) -> Result<Option<i64>, LogError> {
        let Ok(Some(header)) = self.read_header(pos)? else {
            return Ok(None);
        };
        let buf = read_at(&self.file, &self.log_path, pos, header.size as usize)?;
        Ok(parse_scanned(buf).ok().map(|(entry, _)| entry.base_offset))
    }

    /// Reads and checks the whole batch or legacy entry at `pos`; `None` at the end of the
    /// segment.
    pub(crate) fn read_entry_at(&self, pos: u64) -> Result<Option<StoredEntry>, LogError> {
        let header = match self.read_header(pos)? {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(source) => return Err(self.corrupt(pos, source)),
        };
        let buf = read_at(&self.file, &self.log_path, pos, header.size as usize)?;
        if legacy_magic(&buf).is_some() {
            return LegacyEntry::parse(buf, MAX_BATCH_BYTES)
                .map(|(entry, _)| Some(StoredEntry::Legacy(entry)))
                .map_err(|source| self.corrupt(pos, source));
        }
        RecordBatch::parse(buf, MAX_BATCH_BYTES)
            .map(|(batch, _)| Some(StoredEntry::Batch(batch)))
            .map_err(|source| self.corrupt(pos, source))
    }

    /// Reads and CRC-checks the whole batch at `pos`; `None` at the end of the segment.
    pub(crate) fn read_batch_at(&self, pos: u64) -> Result<Option<RecordBatch>, LogError> {
        let header = match self.read_header(pos)? {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(source) => return Err(self.corrupt(pos, source)),
        };
        let buf = read_at(&self.file, &self.log_path, pos, header.size as usize)?;
        parse_stored_batch(buf)
            .map(|(batch, _)| Some(batch))
            .map_err(|source| self.corrupt(pos, source))
    }

    /// Appends a batch whose offsets the log has checked. The data goes to the OS page cache;
    /// it is durable only after [`Segment::flush`].
    pub(crate) fn append(&mut self, batch: &RecordBatch) -> Result<(), LogError> {
        let position = self.size;
        if let Err(e) = self.file.write_all_at(batch.as_bytes(), position) {
            // Best effort: do not leave part of the batch behind (recovery would cut it too).
            let _ = self.file.set_len(position);
            return Err(LogError::io(&self.log_path, e));
        }
        self.unflushed = true;
        self.index_batch(
            position,
            batch.last_offset(),
            batch.max_timestamp(),
            batch.size_in_bytes() as u64,
        );
        self.next_offset = batch.next_offset();
        Ok(())
    }

    /// Index bookkeeping for the batch at `position` (append and recovery use the same rule:
    /// an entry when more than `index.interval.bytes` were written since the last one).
    fn index_batch(&mut self, position: u64, last_offset: i64, max_timestamp: i64, size: u64) {
        if self.rolling_based_timestamp.is_none() && position == 0 {
            self.rolling_based_timestamp = Some(max_timestamp);
        }
        if max_timestamp > self.max_timestamp.timestamp {
            self.max_timestamp = TimestampOffset {
                timestamp: max_timestamp,
                offset: last_offset,
            };
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes
            && !self.offset_index.is_full()
        {
            // Positions fit u32: segment.bytes is a u32 and recovery stops at an overflow.
            self.offset_index.append(last_offset, position as u32);
            self.time_index.maybe_append(
                self.max_timestamp.timestamp,
                self.max_timestamp.offset,
                false,
            );
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size;
        self.size = position + size;
    }

    /// Re-reads the segment from the batch holding `from_offset` (from its offset index
    /// entry; `None` = all of it), checks every batch, rebuilds index entries for the range,
    /// and truncates the file at the first bad batch (fsynced, logged with `warn!`).
    pub(crate) fn recover(
        &mut self,
        from_offset: Option<i64>,
    ) -> Result<RecoveryOutcome, LogError> {
        let file_len = self
            .file
            .metadata()
            .map_err(|e| LogError::io(&self.log_path, e))?
            .len();
        let mut entry = from_offset.map(|o| self.offset_index.lookup(o));
        if let Some(e) = entry.filter(|e| e.position > 0) {
            // Start from the entry only if it is inside the file and points at a valid batch
            // at or before its offset; a wrong entry must not make us cut good data.
            let trusted = u64::from(e.position) < file_len && {
                self.size = file_len;
                matches!(self.checked_base_offset_at(u64::from(e.position)),
                    Ok(Some(base)) if base <= e.offset)
            };
            if !trusted {
                warn!(segment = %self.log_path.display(), entry_offset = e.offset,
                    position = e.position, "offset index entry does not match the log; full scan");
                entry = None;
            }
        }
        // The part before the entry is trusted, but its max timestamp, first timestamp and
        // last offset are taken from its batch headers, not from the time index (which may
        // have lost entries that were never fsynced).
        let mut prefix = None;
        if let Some(e) = entry.filter(|e| e.position > 0) {
            prefix = self.scan_prefix(u64::from(e.position))?;
            if prefix.is_none() {
                warn!(segment = %self.log_path.display(), "batch headers before the index entry do not chain; full scan");
            }
        }
        let start = match (entry, prefix) {
            (Some(e), Some(p)) => {
                self.offset_index.truncate_to_position(e.position)?;
                self.time_index.truncate_to_offset(p.last_offset + 1)?;
                u64::from(e.position)
            }
            _ => {
                self.offset_index.clear()?;
                self.time_index.clear()?;
                0
            }
        };
        let outcome = self.rescan(start, file_len, prefix)?;
        if start > 0 && outcome.batches == 0 {
            // Nothing valid after the index entry: the entries before it do not say where the
            // previous batch ends, so scan the whole segment.
            let full = self.recover(None)?;
            return Ok(RecoveryOutcome {
                batches: full.batches,
                truncated_bytes: outcome.truncated_bytes + full.truncated_bytes,
                stop: outcome.stop.or(full.stop),
            });
        }
        Ok(outcome)
    }

    /// Reads the batch headers of `[0, end)` (no CRC check: this part is trusted). `None` if
    /// they do not chain exactly up to `end`.
    fn scan_prefix(&mut self, end: u64) -> Result<Option<PrefixState>, LogError> {
        self.size = end; // bounds read_header
        let mut state = PrefixState {
            max_timestamp: TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.base_offset,
            },
            first_batch_timestamp: None,
            last_offset: self.base_offset - 1,
        };
        let mut pos = 0;
        while pos < end {
            let Ok(Some(h)) = self.read_header(pos)? else {
                return Ok(None);
            };
            let in_order = h.base_offset > state.last_offset || pos == 0;
            let in_segment = h.base_offset >= self.base_offset
                && h.last_offset >= h.base_offset
                && h.last_offset - self.base_offset <= i64::from(i32::MAX);
            if !in_order || !in_segment {
                return Ok(None);
            }
            state.first_batch_timestamp.get_or_insert(h.max_timestamp);
            if h.max_timestamp > state.max_timestamp.timestamp {
                state.max_timestamp = TimestampOffset {
                    timestamp: h.max_timestamp,
                    offset: h.last_offset,
                };
            }
            state.last_offset = h.last_offset;
            pos += h.size;
        }
        Ok(Some(state))
    }

    /// Scans `[start, end)` (start is a batch boundary whose index entries were removed;
    /// `prefix` describes `[0, start)` when start > 0).
    fn rescan(
        &mut self,
        start: u64,
        end: u64,
        prefix: Option<PrefixState>,
    ) -> Result<RecoveryOutcome, LogError> {
        let previous = self.offset_index.last_entry();
        self.bytes_since_last_index_entry = start - u64::from(previous.position);
        let (max_timestamp, rolling, mut expected_min) = match prefix.filter(|_| start > 0) {
            Some(p) => (p.max_timestamp, p.first_batch_timestamp, p.last_offset + 1),
            None => (
                TimestampOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: self.base_offset,
                },
                None,
                self.base_offset,
            ),
        };
        self.max_timestamp = max_timestamp;
        self.rolling_based_timestamp = rolling;
        self.next_offset = expected_min;
        self.size = start;
        let mut pos = start;
        let mut buf = Bytes::new();
        let mut batches = 0;
        let mut stop = None;
        while pos < end {
            let remaining = end - pos;
            // 17 bytes tell a batch from a legacy entry (magic at byte 16).
            if buf.len() <= LOG_OVERHEAD + 4 {
                buf = read_at(
                    &self.file,
                    &self.log_path,
                    pos,
                    SCAN_CHUNK_BYTES.min(remaining as usize),
                )?;
            }
            let need = match peek_size(&buf) {
                Ok(n) => n,
                Err(e) => {
                    stop = Some((pos, TailDefect::Batch(e)));
                    break;
                }
            };
            if need as u64 > remaining {
                stop = Some((
                    pos,
                    TailDefect::Batch(BatchError::Truncated {
                        need,
                        have: remaining as usize,
                    }),
                ));
                break;
            }
            if buf.len() < need {
                buf = read_at(
                    &self.file,
                    &self.log_path,
                    pos,
                    need.max(SCAN_CHUNK_BYTES.min(remaining as usize)),
                )?;
            }
            let (batch, rest) = match parse_scanned(buf.clone()) {
                Ok(parsed) => parsed,
                Err(e) => {
                    stop = Some((pos, TailDefect::Batch(e)));
                    break;
                }
            };
            let (base, last) = (batch.base_offset, batch.last_offset);
            if base < expected_min {
                stop = Some((
                    pos,
                    TailDefect::OffsetNotIncreasing {
                        base_offset: base,
                        expected_min,
                    },
                ));
                break;
            }
            if last < base
                || last - self.base_offset > i64::from(i32::MAX)
                || pos + batch.size as u64 > u64::from(u32::MAX)
            {
                stop = Some((
                    pos,
                    TailDefect::OffsetOutsideSegment {
                        base_offset: base,
                        last_offset: last,
                    },
                ));
                break;
            }
            self.index_batch(pos, last, batch.max_timestamp, batch.size as u64);
            self.next_offset = last + 1;
            expected_min = last + 1;
            pos += batch.size as u64;
            batches += 1;
            buf = rest;
        }
        let truncated_bytes = end - pos;
        if let Some((position, defect)) = &stop {
            warn!(segment = %self.log_path.display(), position, truncated_bytes, defect = ?defect,
                "truncating invalid bytes at the end of the segment");
            self.truncate_file(*position)?;
        }
        Ok(RecoveryOutcome {
            batches,
            truncated_bytes,
            stop,
        })
    }

    fn truncate_file(&mut self, position: u64) -> Result<(), LogError> {
        self.file
            .set_len(position)
            .map_err(|e| LogError::io(&self.log_path, e))?;
        // The cut must be durable: otherwise a crash could bring back bytes that were
        // already judged bad, or (after truncate_to) bytes a new leader overwrote.
        self.file
            .sync_all()
            .map_err(|e| LogError::io(&self.log_path, e))?;
        self.size = position;
        Ok(())
    }

    /// Removes every batch whose last offset is ≥ `offset` (the batch holding `offset` goes
    /// whole). Returns the bytes removed.
    pub(crate) fn truncate_to(&mut self, offset: i64) -> Result<u64, LogError> {
        // The segment becomes (or stays) the active one: its indexes must be in memory.
        self.offset_index.ensure_resident()?;
        self.time_index.ensure_resident()?;
        let mut removed = 0;
        if let Some((position, _)) = self.translate_offset(offset)? {
            removed = self.size - position;
            self.truncate_file(position)?;
            self.offset_index.truncate_to_position(position as u32)?;
            self.time_index.truncate_to_offset(offset)?;
        }
        // Re-derive the in-memory state (index bookkeeping, max timestamp, next offset) from
        // the last index entry on; this segment may have been sealed with a next-offset bound
        // taken from the segment after it. Bad bytes found on the way are cut (and logged).
        let outcome = self.recover(Some(i64::MAX))?;
        if self.size == 0 {
            self.rolling_based_timestamp = None;
        }
        Ok(removed + outcome.truncated_bytes)
    }

    /// Time `segment.ms` compares with: between the first batch's timestamp and the newest
    /// one being appended, or since creation if there are no timestamps (Kafka's
    /// `timeWaitedForRoll`).
    pub(crate) fn time_waited_for_roll(&self, now_ms: i64, newest_timestamp: i64) -> i64 {
        match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => newest_timestamp.saturating_sub(ts),
            _ => now_ms.saturating_sub(self.created_ms),
        }
    }

    /// Whether an index is full (the segment must roll before the next append).
    pub(crate) fn indexes_full(&self) -> bool {
        self.offset_index.is_full() || self.time_index.is_full()
    }

    /// fsyncs the data and writes pending index entries to the index files without fsyncing
    /// them: one fsync per flush matters for Raft, which flushes before every acknowledgement.
    /// Index entries of the active segment need no durability: on open, recovery re-reads the
    /// segment from the recovery point's index entry only after checking that entry against the
    /// data (else it re-reads the whole segment) and rebuilds the entries after it. Sealed
    /// segments' indexes are fsynced by [`Segment::seal`].
    ///
    /// A segment sealed by a roll whose background flush has not run yet also gets its trimmed
    /// index files fsynced here: the caller is about to move the recovery point past it, and
    /// recovery trusts the indexes of segments below the recovery point.
    pub(crate) fn flush(&mut self) -> Result<(), LogError> {
        if self.unflushed {
            self.file
                .sync_data()
                .map_err(|e| LogError::io(&self.log_path, e))?;
            self.unflushed = false;
        }
        self.offset_index.write_out()?;
        self.time_index.write_out()?;
        if self.indexes_unsynced {
            self.offset_index.sync()?;
            self.time_index.sync()?;
            self.indexes_unsynced = false;
        }
        Ok(())
    }

    /// The segment stops being active (roll) or the log closes: write the final time index
    /// entry, trim both indexes to their entries and fsync everything (Kafka's
    /// `onBecomeInactiveSegment` + `close`).
    pub(crate) fn seal(&mut self) -> Result<(), LogError> {
        self.time_index.maybe_append(
            self.max_timestamp.timestamp,
            self.max_timestamp.offset,
            true,
        );
        if self.unflushed {
            self.file
                .sync_data()
                .map_err(|e| LogError::io(&self.log_path, e))?;
            self.unflushed = false;
        }
        self.offset_index.trim_and_flush()?;
        self.time_index.trim_and_flush()?;
        self.indexes_unsynced = false;
        self.evict_indexes();
        Ok(())
    }

    /// The segment stops being active on a roll: as [`Segment::seal`], but nothing is fsynced
    /// (Kafka's `onBecomeInactiveSegment`; its `flush` runs on the scheduler). The data and
    /// trimmed indexes are fsynced by the roll's background flush ([`crate::log::FlushJob`]) or
    /// the next [`crate::Log::flush`]; the recovery point stays below this segment until then,
    /// so a crash before it only means recovery re-reads the segment.
    pub(crate) fn seal_deferred(&mut self) -> Result<(), LogError> {
        self.time_index.maybe_append(
            self.max_timestamp.timestamp,
            self.max_timestamp.offset,
            true,
        );
        self.offset_index.trim()?;
        self.time_index.trim()?;
        self.indexes_unsynced = true;
        self.evict_indexes();
        Ok(())
    }

    /// Drops the in-memory index entries of a sealed segment (lookups then binary-search the
    /// files), so memory does not grow with the number of segments.
    pub(crate) fn evict_indexes(&mut self) {
        self.offset_index.evict();
        self.time_index.evict();
    }

    /// Deletes the segment's files: `.log` first, so a crash half-way leaves orphan index
    /// files (removed on open), never a log without its index state.
    pub(crate) fn delete(self) -> Result<(), LogError> {
        let Segment {
            log_path,
            file,
            offset_index,
            time_index,
            ..
        } = self;
        drop(file);
        remove_if_exists(&log_path)?;
        offset_index.delete()?;
        time_index.delete()?;
        let txn = log_path.with_extension(&TXN_INDEX_FILE_SUFFIX[1..]);
        remove_if_exists(&txn)
    }
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<(), LogError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io(path, e)),
    }
}
