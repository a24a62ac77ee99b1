//! [`Log`]: one partition directory of segments — append (leader and follower paths), read,
//! timestamp lookup, truncation, `delete_records`, flush. Opening and crash recovery live in
//! `recovery.rs`, retention in `retention.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tracing::{info, warn};

use crate::batch::{
    BatchError, Compression, NO_TIMESTAMP, RecordBatch, RecordDefect, TimestampType,
};
use crate::config::LogConfig;
use crate::error::LogError;
use crate::fs::fsync_dir;
use crate::leader_epoch::{EpochEndOffset, LeaderEpochCache};
use crate::segment::{Segment, SpareSegment, StoredEntry, SyncHandle};
use crate::txn_index::TransactionIndex;

/// Spare segments ([`SpareSegment`]) a log keeps ready: with rolls coming faster than a
/// background flush makes a spare (small `segment.bytes`, a busy disk: three file creations
/// take a few milliseconds there), a stock keeps the next rolls from creating files themselves.
const MAX_SPARE_SEGMENTS: usize = 4;

/// Largest base offset a segment may have: its 32-bit relative offsets must not overflow i64.
pub const MAX_SEGMENT_BASE_OFFSET: i64 = i64::MAX - i32::MAX as i64 - 1;

/// Offsets a log may be truncated or restarted at.
fn check_new_base(offset: i64) -> Result<(), LogError> {
    if !(0..=MAX_SEGMENT_BASE_OFFSET).contains(&offset) {
        return Err(LogError::OffsetOutOfRange {
            offset,
            log_start_offset: 0,
            log_end_offset: MAX_SEGMENT_BASE_OFFSET,
        });
    }
    Ok(())
}

/// ListOffsets target: the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets target: the log end offset.
pub const LATEST_TIMESTAMP: i64 = -1;
/// ListOffsets target: the record with the largest timestamp (KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;
/// ListOffsets target: the local log start offset (KIP-405; the log start offset here).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record written (`-1` if nothing was appended).
    pub first_offset: i64,
    /// Offset of the last record written (`-1` if nothing was appended).
    pub last_offset: i64,
    /// The append time stamped on the batches (`LogAppendTime` logs), else `None`.
    pub log_append_time_ms: Option<i64>,
    /// The batches as written (offsets, epoch and timestamps rewritten on the leader path).
    pub batches: Vec<RecordBatch>,
}

/// Result of [`Log::read`]: whole batches, contiguous in `bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogReadResult {
    /// The batches' bytes, ready to go into a Fetch response.
    pub bytes: Bytes,
    /// The same batches, parsed and CRC-checked (they share `bytes`' memory). Empty when
    /// the read starts at a legacy (magic 0/1) entry: such a read holds only legacy entries,
    /// checked and served as stored (see [`crate::legacy`]); a read never mixes the two.
    pub batches: Vec<RecordBatch>,
}

/// Answer to a timestamp lookup (ListOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    /// Timestamp of the record found.
    pub timestamp: i64,
    /// Its offset.
    pub offset: i64,
    /// Leader epoch of its batch, `None` if the batch has none (-1).
    pub leader_epoch: Option<i32>,
}

/// The flush a roll leaves behind (Kafka 3.9 `UnifiedLog.roll` schedules
/// `flushUptoOffsetExclusive(newSegment.baseOffset)` on the scheduler): fsync every segment
/// below the new active segment that is not known to be on disk, then the directory, and only
/// then — back under the caller's lock, with [`Log::mark_flushed`] — move the recovery point to
/// the new segment's base offset.
///
/// Take it with [`Log::take_roll_flush`] while holding the log, [`FlushJob::run`] it without
/// the log (on a blocking thread: it fsyncs), and hand the result to [`Log::mark_flushed`].
/// Dropping a job is safe: the recovery point simply stays where it is (a later job or
/// [`Log::flush`] covers the same segments). Each job covers *every* unsynced segment below its
/// offset, so jobs may finish in any order.
///
/// Two more things ride along, both optimisations of the next roll, neither needed for
/// durability: the job creates the files of the next segment ahead of time
/// ([`crate::segment::SpareSegment`]), and writes files the caller wants published once the
/// flush is done ([`FlushJob::also_publish_file`], the broker's producer snapshot).
#[derive(Debug)]
#[must_use = "run the job and pass its result to Log::mark_flushed, or the recovery point stays behind"]
pub struct FlushJob {
    dir: PathBuf,
    dir_identity: Option<(u64, u64)>,
    upto_offset: i64,
    truncations: u64,
    files: Vec<SyncHandle>,
    segment_ids: Vec<u64>,
    /// `segment.index.bytes` for a spare segment to create, if the log has fewer than
    /// [`MAX_SPARE_SEGMENTS`].
    spare_index_bytes: Option<u32>,
    publish: Vec<(PathBuf, Vec<u8>)>,
}

/// Proof that a [`FlushJob`]'s fsyncs returned: the input of [`Log::mark_flushed`].
#[derive(Debug)]
pub struct FlushedUpTo {
    upto_offset: i64,
    truncations: u64,
    segment_ids: Vec<u64>,
    spare: Option<SpareSegment>,
    /// `(written and fsynced temporary file, name to publish it under)`.
    published: Vec<(PathBuf, PathBuf)>,
}

impl FlushedUpTo {
    /// The offset the recovery point may move to.
    #[must_use]
    pub fn upto_offset(&self) -> i64 {
        self.upto_offset
    }
}

impl FlushJob {
    /// The offset the recovery point moves to once the job is done (the base offset of the
    /// segment the roll created).
    #[must_use]
    pub fn upto_offset(&self) -> i64 {
        self.upto_offset
    }

    /// Also write `contents` to `path` — as `<path>.tmp`, fsynced, renamed to `path` by
    /// [`Log::mark_flushed`] only if the log was not truncated since the job was taken (the
    /// contents describe the log as it was). The broker's producer snapshot at a roll: Kafka
    /// writes it under the log lock and flushes it on the scheduler
    /// (`flushProducerStateSnapshot`); here creating the file, too, stays off the produce path.
    pub fn also_publish_file(&mut self, path: PathBuf, contents: Vec<u8>) {
        self.publish.push((path, contents));
    }

    /// Does the fsyncs. Blocking: run it off the async workers and without the log's lock.
    ///
    /// Files are fsynced through handles taken with the job, so a segment deleted meanwhile
    /// (retention, the cleaner's swap) costs an fsync of an unlinked file, nothing more.
    ///
    /// # Errors
    /// [`LogError::Io`]: pass it to [`Log::mark_flushed`], which marks the log failed. A failed
    /// fsync is not retried (the page cache may have dropped the dirty pages).
    pub fn run(mut self) -> Result<FlushedUpTo, LogError> {
        // The next roll may come before the fsyncs below are done: make its files first.
        let spare = self.make_spare();
        match self.sync() {
            Ok(()) => Ok(self.publish(spare)),
            Err(e) => {
                if let Some(spare) = spare {
                    spare.delete();
                }
                Err(e)
            }
        }
    }

    /// Whether the directory is still the log's (not a re-created topic's at the same path).
    fn same_dir(&self) -> bool {
        self.dir_identity.is_some() && dir_identity(&self.dir) == self.dir_identity
    }

    /// Creates the next segment's files ahead (if the log asked for them and the directory is
    /// still the log's), for the caller to hand to [`Log::add_spare_segment`] at once, before
    /// [`FlushJob::run`] does the fsyncs: the next roll may come before those are done. If not
    /// taken, `run` makes them itself and [`Log::mark_flushed`] adds them. A failure costs the
    /// next roll some time, nothing else.
    pub fn make_spare_segment(&mut self) -> Option<SpareSegment> {
        self.make_spare()
    }

    fn make_spare(&mut self) -> Option<SpareSegment> {
        let index_bytes = self.spare_index_bytes.take()?;
        if !self.same_dir() {
            return None;
        }
        match SpareSegment::create(&self.dir, index_bytes) {
            Ok(spare) => Some(spare),
            Err(error) => {
                warn!(dir = %self.dir.display(), %error, "creating the next segment's files ahead failed");
                None
            }
        }
    }

    /// The fsyncs that let the recovery point move.
    fn sync(&self) -> Result<(), LogError> {
        for (path, file) in &self.files {
            // The sealed segment's bytes and its trimmed indexes must be on disk before the
            // recovery point moves past them: recovery trusts everything below it unread.
            file.sync_all().map_err(|e| LogError::io(path, e))?;
        }
        // The rolled segments' directory entries (and the new active segment's) must survive a
        // crash along with their data. A directory gone meanwhile was renamed for deletion
        // (Kafka's `flushDirIfExists`): there is nothing left to recover.
        match fsync_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LogError::io(&self.dir, e)),
        }
    }

    /// Writes the files to publish; optimisations only, so a failure is logged, nothing else.
    fn publish(self, spare: Option<SpareSegment>) -> FlushedUpTo {
        let mut published = Vec::new();
        if self.same_dir() {
            for (path, contents) in &self.publish {
                let mut tmp = path.as_os_str().to_owned();
                tmp.push(crate::fs::TMP_FILE_SUFFIX);
                let tmp = PathBuf::from(tmp);
                match write_synced(&tmp, contents) {
                    Ok(()) => published.push((tmp, path.clone())),
                    Err(error) => {
                        warn!(file = %tmp.display(), %error, "writing a file after a roll failed");
                    }
                }
            }
        }
        let mut done = self.done(spare);
        done.published = published;
        done
    }

    fn done(self, spare: Option<SpareSegment>) -> FlushedUpTo {
        FlushedUpTo {
            upto_offset: self.upto_offset,
            truncations: self.truncations,
            segment_ids: self.segment_ids,
            spare,
            published: Vec::new(),
        }
    }
}

/// Writes `contents` to a new `path` and fsyncs it: the file must be whole on disk before
/// [`Log::mark_flushed`] renames it to its final name, or a crash could leave a torn file
/// under that name.
fn write_synced(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// A partition's log: a directory of segments plus its leader epoch cache.
///
/// Single writer: mutating calls take `&mut self`; reads take `&self`. Wrap it in a lock to
/// share it between threads.
///
/// # Durability
/// Appends reach the OS page cache only. [`Log::flush`] fsyncs every segment with unflushed
/// data (and the directory if segments were created), writes out index entries, then moves the
/// recovery point to the log end offset. The caller decides when (Raft before acknowledging,
/// brokers by `flush.messages`/`flush.ms`). A roll fsyncs nothing: it leaves a [`FlushJob`]
/// for the caller to run in the background ([`Log::take_roll_flush`]), and the recovery point
/// moves past the sealed segment only when that job's fsyncs have returned
/// ([`Log::mark_flushed`]). Truncation, segment deletion and checkpoint files are made durable
/// at once. After a crash everything from the recovery point on is checked again by
/// [`Log::open`].
#[derive(Debug)]
pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    pub(crate) segments: BTreeMap<i64, Segment>,
    pub(crate) log_start_offset: i64,
    pub(crate) log_end_offset: i64,
    pub(crate) recovery_point: i64,
    pub(crate) high_watermark: Option<i64>,
    pub(crate) leader_epoch_cache: LeaderEpochCache,
    /// Segments were created or deleted since the last directory fsync.
    pub(crate) dir_dirty: bool,
    /// Latest `now_ms` a caller passed in (creation time of segments made by truncation and
    /// deletion paths, which take no clock).
    pub(crate) clock_ms: i64,
    /// Truncations from the end so far ([`Log::truncate_to`],
    /// [`Log::truncate_fully_and_start_at`]). Work done outside the log's lock (a roll's
    /// [`FlushJob`], a cleaning pass) is discarded when this moved meanwhile: offsets it covered
    /// may have been rewritten with other data.
    pub(crate) truncations: u64,
    /// The newest segment base a roll created whose flush has not been handed out by
    /// [`Log::take_roll_flush`] (nor done by [`Log::flush`]).
    pub(crate) pending_roll_flush: Option<i64>,
    /// A flush failed: the page cache may have dropped the unwritten pages, so no later fsync
    /// may be trusted. The recovery point is frozen and appends fail (Kafka takes the log dir
    /// offline).
    pub(crate) flush_failed: bool,
    /// Files for the next rolls, made ahead by [`FlushJob`]s (at most
    /// [`MAX_SPARE_SEGMENTS`]).
    pub(crate) spares: Vec<SpareSegment>,
    /// `(device, inode)` of `dir` when the log was opened. A broker deletes a partition by
    /// renaming its directory, and a topic re-created under the same name gets a new directory
    /// at the same path: work finishing after that (a [`FlushJob`]'s spare files and published
    /// files) must not land in the new one.
    pub(crate) dir_identity: Option<(u64, u64)>,
    /// Each segment's aborted-transaction index (`.txnindex`), by segment base; a segment
    /// without an entry has none.
    pub(crate) txn_indexes: BTreeMap<i64, TransactionIndex>,
    /// A `.txnindex` was found corrupt at open and deleted: the owner must rebuild the
    /// indexes from the log ([`Log::txn_indexes_need_rebuild`]).
    pub(crate) txn_indexes_corrupt: bool,
}

/// `(device, inode)` of `dir`, `None` if it cannot be read (then nothing is written by path).
pub(crate) fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

impl Log {
    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Replaces the configuration (a topic config changed, Kafka's `updateConfig`). Size and
    /// time limits apply from the next append, roll or retention pass; existing segments
    /// keep their index files.
    ///
    /// # Errors
    /// [`LogError::Config`] if `config` is invalid; the log keeps its old config.
    pub fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// First offset still in the log.
    #[must_use]
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Offset the next appended record gets.
    #[must_use]
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Offsets below this are durable (fsynced). Persist it in
    /// `recovery-point-offset-checkpoint` and pass it back to [`Log::open`].
    #[must_use]
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// Sets the high watermark retention respects (never deletes data at or above it). Without
    /// one, retention treats the log end offset as the high watermark.
    pub fn set_high_watermark(&mut self, high_watermark: i64) {
        self.high_watermark =
            Some(high_watermark.clamp(self.log_start_offset, self.log_end_offset));
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values()
    }

    /// Number of segments.
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Total bytes of all segments.
    #[must_use]
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    /// The leader epoch cache (`leader-epoch-checkpoint`).
    #[must_use]
    pub fn leader_epoch_cache(&self) -> &LeaderEpochCache {
        &self.leader_epoch_cache
    }

    /// Where `epoch` ends in this log (OffsetForLeaderEpoch).
    #[must_use]
    pub fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        self.leader_epoch_cache
            .end_offset_for(epoch, self.log_end_offset)
    }

    /// Records that `epoch` starts at `start_offset` (normally done by appends).
    ///
    /// # Errors
    /// [`LogError::Checkpoint`] if the checkpoint cannot be written.
    pub fn assign_epoch_start_offset(
        &mut self,
        epoch: i32,
        start_offset: i64,
    ) -> Result<(), LogError> {
        Ok(self.leader_epoch_cache.assign(epoch, start_offset)?)
    }

    fn active_segment(&self) -> Result<&Segment, LogError> {
        self.segments
            .values()
            .next_back()
            .ok_or_else(|| LogError::NoActiveSegment {
                dir: self.dir.clone(),
            })
    }

    fn active_segment_mut(&mut self) -> Result<&mut Segment, LogError> {
        let dir = &self.dir;
        self.segments
            .values_mut()
            .next_back()
            .ok_or_else(|| LogError::NoActiveSegment { dir: dir.clone() })
    }

    fn check_size(&self, index: usize, batch: &RecordBatch) -> Result<(), LogError> {
        if batch.size_in_bytes() > self.config.max_message_bytes as usize {
            return Err(LogError::RecordTooLarge {
                index,
                size: batch.size_in_bytes(),
                max: self.config.max_message_bytes,
            });
        }
        Ok(())
    }

    /// Leader path: assigns offsets from the log end offset, stamps `leader_epoch` and (for
    /// `LogAppendTime` logs) `now_ms`, and appends. Batches are validated first — size,
    /// record count against the offset range, and every record (a compressed payload is
    /// inflated, Kafka's `LogValidator`) — and nothing is written if any fails. A client
    /// batch whose codec is not the log's `compression.type` is rebuilt with that codec (and
    /// so is a compressed batch whose inner offset deltas are not 0, 1, 2, …); the rebuilt
    /// batch is size-checked again. CreateTime batches get `maxTimestamp` set to their
    /// records' largest timestamp, as Kafka's `LogValidator` does.
    ///
    /// # Errors
    /// [`LogError::RecordTooLarge`], [`LogError::InconsistentRecordCount`],
    /// [`LogError::InvalidBatch`] (nothing written); [`LogError::Io`] (the partial append is
    /// truncated away when possible).
    pub fn append_as_leader(
        &mut self,
        batches: Vec<RecordBatch>,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut next_offset = self.log_end_offset;
        let mut prepared = Vec::with_capacity(batches.len());
        let log_append_time = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        for (index, mut batch) in batches.into_iter().enumerate() {
            self.check_size(index, &batch)?;
            let record_count = batch.record_count();
            let offset_span = i64::from(batch.last_offset_delta()) + 1;
            if record_count <= 0 || i64::from(record_count) != offset_span {
                return Err(LogError::InconsistentRecordCount {
                    index,
                    record_count,
                    offset_span,
                });
            }
            let invalid = |source| LogError::InvalidBatch { index, source };
            // Control batches (transaction markers) are written as they come, like Kafka's
            // "do not compress control records unless they are written compressed".
            let target = match self.config.compression.target() {
                Some((codec, level)) if codec != batch.compression() && !batch.is_control() => {
                    Some((codec, level))
                }
                _ => None,
            };
            let validated = match target {
                Some(_) => None,
                None => match batch.validate_records() {
                    Ok(max_ts) => Some(max_ts),
                    Err(BatchError::InvalidRecord {
                        defect: RecordDefect::OffsetDeltaNotSequential(_),
                        ..
                    }) if batch.compression() != Compression::None => None,
                    Err(source) => return Err(invalid(source)),
                },
            };
            let max_record_timestamp = match validated {
                Some(max_ts) => max_ts,
                None => {
                    let (codec, level) = target.unwrap_or((batch.compression(), None));
                    batch = batch.recompressed(codec, level).map_err(invalid)?;
                    self.check_size(index, &batch)?;
                    batch.max_timestamp()
                }
            };
            batch.set_base_offset(next_offset);
            batch.set_partition_leader_epoch(leader_epoch);
            if log_append_time {
                batch.set_log_append_time(now_ms);
            } else {
                batch.set_max_timestamp(TimestampType::CreateTime, max_record_timestamp);
            }
            next_offset = batch.next_offset();
            prepared.push(batch);
        }
        let mut info = self.write_batches(prepared, now_ms)?;
        if log_append_time && !info.batches.is_empty() {
            info.log_append_time_ms = Some(now_ms);
        }
        Ok(info)
    }

    /// [`Log::append_as_leader`] for raw bytes (a produce request's records): every batch is
    /// parsed and checked (length, magic, CRC-32C) first; nothing is written if one fails.
    ///
    /// # Errors
    /// [`LogError::InvalidBatch`] with the Kafka code of the parse failure, then as
    /// [`Log::append_as_leader`].
    pub fn append_records_as_leader(
        &mut self,
        records: Bytes,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let batches = self.parse_records(records)?;
        self.append_as_leader(batches, leader_epoch, now_ms)
    }

    /// [`Log::append_as_follower`] for raw bytes (a fetched partition's records).
    ///
    /// # Errors
    /// [`LogError::InvalidBatch`], then as [`Log::append_as_follower`].
    pub fn append_records_as_follower(
        &mut self,
        records: Bytes,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let batches = self.parse_records(records)?;
        self.append_as_follower(batches, now_ms)
    }

    fn parse_records(&self, records: Bytes) -> Result<Vec<RecordBatch>, LogError> {
        // Framing accepts anything up to the format's limit so an oversized batch is reported
        // as MESSAGE_TOO_LARGE by the size check, as Kafka does.
        crate::batch::parse_all(records, crate::batch::MAX_BATCH_BYTES)
            .map_err(|(index, source)| LogError::InvalidBatch { index, source })
    }

    /// Follower path: appends batches as they are. The first must start at the log end offset
    /// and each next one right after the previous one; batches are size-checked (CRC was
    /// checked when they were parsed). Nothing is written if any check fails.
    ///
    /// # Errors
    /// [`LogError::NonContiguousOffset`], [`LogError::NonMonotonicOffsets`],
    /// [`LogError::RecordTooLarge`] (nothing written); [`LogError::Io`].
    pub fn append_as_follower(
        &mut self,
        batches: Vec<RecordBatch>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut expected = self.log_end_offset;
        for (index, batch) in batches.iter().enumerate() {
            self.check_size(index, batch)?;
            if batch.base_offset() != expected {
                return Err(LogError::NonContiguousOffset {
                    index,
                    expected,
                    base_offset: batch.base_offset(),
                });
            }
            if batch.last_offset() < batch.base_offset() {
                return Err(LogError::NonMonotonicOffsets {
                    index,
                    base_offset: batch.base_offset(),
                    last_offset: batch.last_offset(),
                });
            }
            expected = batch.next_offset();
        }
        self.write_batches(batches, now_ms)
    }

    /// Writes validated batches with contiguous offsets starting at the log end offset.
    fn write_batches(
        &mut self,
        batches: Vec<RecordBatch>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return Ok(AppendInfo {
                first_offset: -1,
                last_offset: -1,
                log_append_time_ms: None,
                batches,
            });
        };
        self.check_not_failed()?;
        let (first_offset, last_offset) = (first.base_offset(), last.last_offset());
        let start_end_offset = self.log_end_offset;
        for batch in &batches {
            if let Err(e) = self.write_one(batch, now_ms) {
                warn!(dir = %self.dir.display(), error = %e, "append failed; removing the partial append");
                if let Err(undo) = self.truncate_to(start_end_offset) {
                    warn!(dir = %self.dir.display(), error = %undo, "could not remove the partial append");
                }
                return Err(e);
            }
        }
        Ok(AppendInfo {
            first_offset,
            last_offset,
            log_append_time_ms: None,
            batches,
        })
    }

    fn write_one(&mut self, batch: &RecordBatch, now_ms: i64) -> Result<(), LogError> {
        self.clock_ms = self.clock_ms.max(now_ms);
        self.maybe_roll(batch, now_ms)?;
        let base = self.active_segment()?.base_offset();
        if batch.last_offset() - base > i64::from(i32::MAX) {
            return Err(LogError::OffsetOverflow {
                offset: batch.last_offset(),
                base_offset: base,
            });
        }
        self.active_segment_mut()?.append(batch)?;
        self.log_end_offset = batch.next_offset();
        let epoch = batch.partition_leader_epoch();
        if epoch >= 0 {
            self.leader_epoch_cache.assign(epoch, batch.base_offset())?;
        }
        Ok(())
    }

    /// Rolls before `batch` if Kafka would (`LogSegment.shouldRoll`): the segment would
    /// exceed `segment.bytes`, is older than `segment.ms - segment.jitter.ms` and not empty,
    /// an index is full, or the batch's offsets do not fit the segment's relative offsets.
    fn maybe_roll(&mut self, batch: &RecordBatch, now_ms: i64) -> Result<(), LogError> {
        let config = &self.config;
        let active = self.active_segment()?;
        let size = active.size();
        let too_big = size + batch.size_in_bytes() as u64 > u64::from(config.segment_bytes);
        let too_old = size > 0
            && active.time_waited_for_roll(now_ms, batch.max_timestamp())
                > config.max_segment_ms() - config.segment_jitter_ms;
        let offsets_overflow = batch.last_offset() - active.base_offset() > i64::from(i32::MAX);
        if (size > 0 && too_big) || too_old || active.indexes_full() || offsets_overflow {
            self.roll(batch.base_offset(), now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at `new_base_offset` (≥ the log end
    /// offset). Nothing is fsynced here (the produce path must not wait for a disk): the
    /// sealed segment's indexes are trimmed, and its data and indexes are fsynced by the
    /// [`FlushJob`] the roll leaves for [`Log::take_roll_flush`], or by the next
    /// [`Log::flush`]. The recovery point stays below the sealed segment until one of them
    /// has returned.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn roll(&mut self, new_base_offset: i64, now_ms: i64) -> Result<(), LogError> {
        let new_base_offset = new_base_offset.max(self.log_end_offset);
        check_new_base(new_base_offset)?;
        let active = self.active_segment_mut()?;
        if active.base_offset() == new_base_offset && active.size() == 0 {
            return Ok(());
        }
        active.seal_deferred()?;
        info!(dir = %self.dir.display(), new_base_offset, "rolling to a new segment");
        let segment = match self.spares.pop() {
            Some(spare) => {
                Segment::create_from_spare(&self.dir, new_base_offset, &self.config, now_ms, spare)?
            }
            None => Segment::create(&self.dir, new_base_offset, &self.config, now_ms)?,
        };
        self.segments.insert(new_base_offset, segment);
        self.dir_dirty = true;
        self.pending_roll_flush = Some(new_base_offset);
        Ok(())
    }

    /// The flush the latest roll(s) left behind, if not handed out yet: fsyncs of every
    /// segment below the newest rolled-to base offset that is not known to be on disk (see
    /// [`FlushJob`]). Call it after an append while still holding the log; run the job
    /// without it.
    pub fn take_roll_flush(&mut self) -> Option<FlushJob> {
        let upto_offset = self.pending_roll_flush.take()?;
        if self.flush_failed {
            return None;
        }
        let mut files = Vec::new();
        let mut segment_ids = Vec::new();
        for segment in self.segments.range(..upto_offset).map(|(_, s)| s) {
            if segment.needs_sync() {
                files.extend(segment.sync_handles());
                segment_ids.push(segment.id());
            }
        }
        Some(FlushJob {
            dir: self.dir.clone(),
            dir_identity: self.dir_identity,
            upto_offset,
            truncations: self.truncations,
            files,
            segment_ids,
            spare_index_bytes: (self.spares.len() < MAX_SPARE_SEGMENTS)
                .then_some(self.config.segment_index_bytes),
            publish: Vec::new(),
        })
    }

    /// A [`FlushJob`] finished (Kafka's `markFlushed`): on success the segments it fsynced
    /// are marked durable and the recovery point moves up to the job's offset, unless the
    /// log was truncated since the job was taken (the offsets it covered may now hold other,
    /// unflushed data; a later flush covers them). On failure the log is marked failed (see
    /// [`Log::flush`]). Returns whether the recovery point moved.
    ///
    /// # Errors
    /// The job's error, or [`LogError::FlushFailed`] if an earlier flush failed.
    pub fn mark_flushed(&mut self, done: Result<FlushedUpTo, LogError>) -> Result<bool, LogError> {
        self.check_not_failed()?;
        let mut flushed = match done {
            Ok(flushed) => flushed,
            Err(e) => {
                self.flush_failed = true;
                return Err(e);
            }
        };
        if let Some(spare) = flushed.spare.take() {
            self.add_spare_segment(spare);
        }
        let same_dir = self.dir_identity.is_some() && dir_identity(&self.dir) == self.dir_identity;
        if flushed.truncations != self.truncations || !same_dir {
            for (tmp, _) in flushed.published.iter().filter(|_| same_dir) {
                let _ = std::fs::remove_file(tmp);
            }
            return Ok(false);
        }
        for (tmp, path) in &flushed.published {
            // No directory fsync: a published file is an optimisation (the next roll's flush
            // makes the name durable); a crash before that leaves the older set of files.
            if let Err(error) = std::fs::rename(tmp, path) {
                warn!(file = %path.display(), %error, "publishing a file after a roll failed");
            }
        }
        for segment in self.segments.values_mut() {
            if flushed.segment_ids.contains(&segment.id()) {
                segment.mark_synced();
            }
        }
        // A roll's offset is never above the log end while no truncation happened; the clamp
        // only documents that the recovery point never passes the data.
        let target = flushed.upto_offset.min(self.log_end_offset);
        if target > self.recovery_point {
            self.recovery_point = target;
            return Ok(true);
        }
        Ok(false)
    }

    /// Adds files made ahead by [`FlushJob::make_spare_segment`] to the log's stock for the
    /// next rolls (dropped if the stock is full).
    pub fn add_spare_segment(&mut self, spare: SpareSegment) {
        if self.spares.len() < MAX_SPARE_SEGMENTS {
            self.spares.push(spare);
        } else {
            spare.delete();
        }
    }

    /// Whether an earlier flush failed (the log refuses appends and flushes).
    #[must_use]
    pub fn flush_failed(&self) -> bool {
        self.flush_failed
    }

    fn check_not_failed(&self) -> Result<(), LogError> {
        if self.flush_failed {
            return Err(LogError::FlushFailed {
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Truncations from the end so far (see [`Log::mark_flushed`]; the cleaner checks it too).
    #[must_use]
    pub fn truncation_count(&self) -> u64 {
        self.truncations
    }

    /// fsyncs all unflushed data (and the directory if segments were created or deleted),
    /// writes pending index entries, then sets the recovery point to the log end offset.
    /// Covers any roll's [`FlushJob`] not run yet.
    ///
    /// # Errors
    /// [`LogError::Io`]. A failed fsync is not retried: the page cache state is unknown, so
    /// the log is marked failed (later flushes and appends return
    /// [`LogError::FlushFailed`]) and the caller must treat the log directory as failed.
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.check_not_failed()?;
        let result = self.flush_all();
        if result.is_err() {
            self.flush_failed = true;
        }
        result
    }

    fn flush_all(&mut self) -> Result<(), LogError> {
        for segment in self.segments.values_mut() {
            if segment.needs_sync() || segment.base_offset() >= self.recovery_point {
                segment.flush()?;
            }
        }
        for index in self.txn_indexes.values_mut() {
            index.flush()?;
        }
        if self.dir_dirty {
            // New segment files must survive a crash along with their data.
            fsync_dir(&self.dir).map_err(|e| LogError::io(&self.dir, e))?;
            self.dir_dirty = false;
        }
        self.pending_roll_flush = None;
        self.recovery_point = self.log_end_offset;
        Ok(())
    }

    /// Flushes, then seals the active segment (final time index entry, indexes trimmed), as
    /// Kafka does on a clean shutdown. Reopen with the returned recovery point.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn close(mut self) -> Result<i64, LogError> {
        for spare in self.spares.drain(..) {
            spare.delete();
        }
        self.flush()?;
        self.active_segment_mut()?.seal()?;
        Ok(self.recovery_point)
    }

    fn check_range(&self, offset: i64) -> Result<(), LogError> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        Ok(())
    }

    /// Whole batches from the one holding `from_offset`, up to `max_bytes` — at least one
    /// batch even if it is larger (as Kafka does) — from a single segment. Empty at the log
    /// end offset. Every batch returned has passed its CRC check.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] below the log start or beyond the log end offset;
    /// [`LogError::CorruptSegment`] if the stored bytes fail validation; [`LogError::Io`].
    pub fn read(&self, from_offset: i64, max_bytes: usize) -> Result<LogReadResult, LogError> {
        self.read_up_to(from_offset, max_bytes, i64::MAX)
    }

    /// [`Log::read`] returning only batches whose last offset is below
    /// `max_offset_exclusive` (e.g. the high watermark for consumers).
    ///
    /// # Errors
    /// As [`Log::read`].
    pub fn read_up_to(
        &self,
        from_offset: i64,
        max_bytes: usize,
        max_offset_exclusive: i64,
    ) -> Result<LogReadResult, LogError> {
        self.check_range(from_offset)?;
        if from_offset == self.log_end_offset {
            return Ok(LogReadResult::default());
        }
        for segment in self
            .segments
            .range(..=from_offset)
            .next_back()
            .into_iter()
            .chain(self.segments.range(from_offset + 1..))
            .map(|(_, s)| s)
        {
            if let Some((bytes, batches)) =
                segment.read(from_offset, max_bytes, max_offset_exclusive)?
            {
                return Ok(LogReadResult { bytes, batches });
            }
        }
        Ok(LogReadResult::default())
    }

    /// ListOffsets for one partition (Kafka 3.9 `UnifiedLog.fetchOffsetByTimestamp`): the
    /// special targets [`EARLIEST_TIMESTAMP`] and [`EARLIEST_LOCAL_TIMESTAMP`] (log start
    /// offset; krust has no tiered storage), [`LATEST_TIMESTAMP`] (log end offset) and
    /// [`MAX_TIMESTAMP`] (the first record carrying the largest timestamp, KIP-734), else
    /// [`Log::offset_for_timestamp`]. Other negative targets (e.g. `LATEST_TIERED`, -5) give
    /// `None`. Special targets answer with `NO_TIMESTAMP` (-1) as the timestamp.
    ///
    /// # Errors
    /// [`LogError::CorruptSegment`], [`LogError::Io`].
    pub fn fetch_offset_by_timestamp(
        &self,
        target_timestamp: i64,
    ) -> Result<Option<TimestampAndOffset>, LogError> {
        match target_timestamp {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
                // The first epoch entry only names the log start's epoch if it starts there.
                let leader_epoch = self
                    .leader_epoch_cache
                    .entries()
                    .first()
                    .filter(|e| e.start_offset <= self.log_start_offset)
                    .map(|e| e.epoch);
                Ok(Some(TimestampAndOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: self.log_start_offset,
                    leader_epoch,
                }))
            }
            LATEST_TIMESTAMP => Ok(Some(TimestampAndOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.log_end_offset,
                leader_epoch: self.leader_epoch_cache.latest_epoch(),
            })),
            MAX_TIMESTAMP => self.max_timestamp_and_offset(),
            t if t < 0 => Ok(None),
            t => self.offset_for_timestamp(t),
        }
    }

    /// The first record carrying the log's largest timestamp (from the segment with the
    /// largest timestamp; the earliest such segment wins ties). For a compressed batch the
    /// answer is the batch's last offset (krust does not decompress).
    fn max_timestamp_and_offset(&self) -> Result<Option<TimestampAndOffset>, LogError> {
        let Some(segment) = self
            .segments
            .values()
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp().timestamp >= s.max_timestamp().timestamp => Some(b),
                _ if s.size() > 0 => Some(s),
                _ => best,
            })
        else {
            return Ok(None);
        };
        let max = segment.max_timestamp();
        let Some((mut pos, _)) = segment.translate_offset(max.offset)? else {
            return Ok(None);
        };
        while let Some(entry) = segment.read_entry_at(pos)? {
            pos += entry.size_in_bytes() as u64;
            let batch = match entry {
                StoredEntry::Batch(batch) => batch,
                // A legacy message, or a wrapper (its offset is its last inner offset, as
                // for a compressed v2 batch).
                StoredEntry::Legacy(legacy) if legacy.timestamp() == max.timestamp => {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: max.timestamp,
                        offset: legacy.offset(),
                        leader_epoch: None,
                    }));
                }
                StoredEntry::Legacy(_) => continue,
            };
            if batch.max_timestamp() != max.timestamp {
                continue;
            }
            let leader_epoch = Some(batch.partition_leader_epoch()).filter(|&e| e >= 0);
            let offset = if batch.compression() != Compression::None {
                batch.last_offset()
            } else if batch.timestamp_type() == TimestampType::LogAppendTime {
                batch.base_offset()
            } else {
                let records = batch.records().map_err(|source| LogError::CorruptSegment {
                    path: segment.log_path().to_path_buf(),
                    position: pos - batch.size_in_bytes() as u64,
                    source,
                })?;
                records
                    .iter()
                    .find(|r| {
                        batch.base_timestamp().saturating_add(r.timestamp_delta) == max.timestamp
                    })
                    .map_or(batch.last_offset(), |r| {
                        batch.base_offset() + i64::from(r.offset_delta)
                    })
            };
            return Ok(Some(TimestampAndOffset {
                timestamp: max.timestamp,
                offset,
                leader_epoch,
            }));
        }
        Ok(None)
    }

    /// The first record with timestamp ≥ `target_timestamp` at or after the log start offset
    /// (ListOffsets by timestamp), `None` if every record is older. For a compressed batch
    /// (krust does not decompress) the answer is the batch's first offset ≥ log start and its
    /// `maxTimestamp`.
    ///
    /// # Errors
    /// [`LogError::CorruptSegment`], [`LogError::Io`].
    pub fn offset_for_timestamp(
        &self,
        target_timestamp: i64,
    ) -> Result<Option<TimestampAndOffset>, LogError> {
        let start = self.log_start_offset;
        let Some(segment) = self
            .segments
            .values()
            .find(|s| s.max_timestamp().timestamp >= target_timestamp)
        else {
            return Ok(None);
        };
        let from = segment
            .time_index()
            .lookup(target_timestamp)
            .offset
            .max(start);
        let Some((mut pos, _)) = segment.translate_offset(from)? else {
            return Ok(None);
        };
        // Scan batch by batch from there: the first batch whose maxTimestamp reaches the
        // target holds the answer. `first_possible` is the lowest offset the next entry can
        // start at (a legacy wrapper's first offset is not stored).
        let mut first_possible = from;
        loop {
            let Some(entry) = segment.read_entry_at(pos)? else {
                return Ok(None);
            };
            pos += entry.size_in_bytes() as u64;
            let batch = match entry {
                StoredEntry::Batch(batch) => batch,
                StoredEntry::Legacy(legacy) => {
                    let first = first_possible;
                    first_possible = legacy.offset() + 1;
                    // Magic 0 has no timestamps (-1): never an answer, as in Kafka.
                    if legacy.timestamp() < target_timestamp || legacy.offset() < start {
                        continue;
                    }
                    // A message answers with its offset; a wrapper (not decompressed) with
                    // the first offset it can hold, as a compressed v2 batch answers with
                    // its base offset.
                    let offset = if legacy.compression() == Compression::None {
                        legacy.offset()
                    } else {
                        first.max(start)
                    };
                    return Ok(Some(TimestampAndOffset {
                        timestamp: legacy.timestamp(),
                        offset,
                        leader_epoch: None,
                    }));
                }
            };
            first_possible = batch.next_offset();
            if batch.max_timestamp() < target_timestamp || batch.last_offset() < start {
                continue;
            }
            let leader_epoch = Some(batch.partition_leader_epoch()).filter(|&e| e >= 0);
            if batch.compression() != Compression::None {
                return Ok(Some(TimestampAndOffset {
                    timestamp: batch.max_timestamp(),
                    offset: batch.base_offset().max(start),
                    leader_epoch,
                }));
            }
            let records = batch.records().map_err(|source| LogError::CorruptSegment {
                path: segment.log_path().to_path_buf(),
                position: pos - batch.size_in_bytes() as u64,
                source,
            })?;
            for record in records {
                let timestamp = match batch.timestamp_type() {
                    TimestampType::LogAppendTime => batch.max_timestamp(),
                    TimestampType::CreateTime => batch
                        .base_timestamp()
                        .saturating_add(record.timestamp_delta),
                };
                let offset = batch.base_offset() + i64::from(record.offset_delta);
                if timestamp >= target_timestamp && offset >= start {
                    return Ok(Some(TimestampAndOffset {
                        timestamp,
                        offset,
                        leader_epoch,
                    }));
                }
            }
        }
    }

    /// Removes everything from `offset` on (follower divergence, Raft truncation): later
    /// segments are deleted, the one holding `offset` is cut (its batch holding `offset`
    /// goes whole) and its indexes trimmed; the leader epoch cache forgets epochs starting at
    /// or after the new end. Below the log start offset, the log is emptied and restarts at
    /// `offset`. At or beyond the log end offset no record goes, but the epoch cache still
    /// forgets epochs starting at the log end (as Kafka's `UnifiedLog.truncateTo`): a broker
    /// that became leader, so cached its epoch at the log end, and lost the leadership before
    /// appending would otherwise keep fetching with that epoch, which the new leader never
    /// had, and be told it diverges forever. The cut is fsynced.
    ///
    /// Returns the new log end offset.
    ///
    /// # Errors
    /// [`LogError::Io`], [`LogError::Checkpoint`].
    pub fn truncate_to(&mut self, offset: i64) -> Result<i64, LogError> {
        check_new_base(offset)?;
        if offset >= self.log_end_offset {
            self.leader_epoch_cache
                .truncate_from_end(self.log_end_offset)?;
            return Ok(self.log_end_offset);
        }
        let first_base = self
            .segments
            .keys()
            .next()
            .copied()
            .unwrap_or(self.log_start_offset);
        if offset < self.log_start_offset || offset <= first_base {
            self.truncate_fully_and_start_at(offset)?;
            return Ok(self.log_end_offset);
        }
        info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset, "truncating log");
        // A job taken before this must not move the recovery point (see `mark_flushed`), and a
        // roll not handed out yet may name a segment this removes.
        self.truncations += 1;
        self.pending_roll_flush = None;
        let later: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        for base in later.into_iter().rev() {
            if let Some(segment) = self.segments.remove(&base) {
                segment.delete()?;
                self.dir_dirty = true;
            }
        }
        let active = self.active_segment_mut()?;
        active.truncate_to(offset)?;
        let new_end = active.next_offset();
        self.txn_indexes.retain(|&base, _| base <= offset);
        for index in self.txn_indexes.values_mut() {
            index.truncate_to(new_end)?;
        }
        self.log_end_offset = new_end;
        self.recovery_point = self.recovery_point.min(new_end);
        if let Some(hw) = self.high_watermark {
            self.high_watermark = Some(hw.min(new_end));
        }
        self.leader_epoch_cache.truncate_from_end(new_end)?;
        if self.dir_dirty {
            fsync_dir(&self.dir).map_err(|e| LogError::io(&self.dir, e))?;
            self.dir_dirty = false;
        }
        Ok(new_end)
    }

    /// Deletes every segment and starts an empty one at `offset` (Kafka's
    /// `truncateFullyAndStartAt`, e.g. when a follower restores from a snapshot).
    ///
    /// # Errors
    /// [`LogError::Io`], [`LogError::Checkpoint`].
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        check_new_base(offset)?;
        info!(dir = %self.dir.display(), offset, "emptying log and restarting it");
        self.truncations += 1;
        self.pending_roll_flush = None;
        let all = std::mem::take(&mut self.segments);
        self.txn_indexes.clear();
        let mut first_error = None;
        for segment in all.into_values() {
            if let Err(e) = segment.delete() {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let segment = Segment::create(&self.dir, offset, &self.config, self.clock_ms)?;
        self.segments.insert(offset, segment);
        fsync_dir(&self.dir).map_err(|e| LogError::io(&self.dir, e))?;
        self.dir_dirty = false;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.recovery_point = offset;
        self.high_watermark = self.high_watermark.map(|_| offset);
        self.leader_epoch_cache.clear()?;
        Ok(())
    }

    /// Advances the log start offset to `offset` (DeleteRecords; KRaft after a snapshot) and
    /// deletes the segments wholly below it. Never moves the start backwards; `offset` may
    /// not exceed the high watermark (or the log end offset without one).
    ///
    /// Returns the new log start offset.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] beyond the high watermark; [`LogError::Io`],
    /// [`LogError::Checkpoint`].
    pub fn delete_records(&mut self, offset: i64) -> Result<i64, LogError> {
        let limit = self.high_watermark.unwrap_or(self.log_end_offset);
        if offset > limit {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: limit,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.leader_epoch_cache.truncate_from_start(offset)?;
        }
        self.delete_log_start_offset_breached_segments()?;
        Ok(self.log_start_offset)
    }

    /// Deletes the `count` oldest segments; if that is all of them, rolls first so the log
    /// keeps an (empty) active segment. Advances the log start offset to the first remaining
    /// segment's base.
    pub(crate) fn delete_oldest_segments(&mut self, count: usize) -> Result<(), LogError> {
        if count == 0 {
            return Ok(());
        }
        if count >= self.segments.len() {
            self.roll(self.log_end_offset, self.clock_ms)?;
        }
        for _ in 0..count {
            if self.segments.len() <= 1 {
                break;
            }
            if let Some((base, segment)) = self.segments.pop_first() {
                info!(dir = %self.dir.display(), base_offset = base, size = segment.size(), "deleting segment");
                segment.delete()?;
                self.dir_dirty = true;
            }
        }
        let first_base = self.active_first_base();
        if first_base > self.log_start_offset {
            self.log_start_offset = first_base;
            self.leader_epoch_cache.truncate_from_start(first_base)?;
        }
        self.recovery_point = self.recovery_point.max(self.log_start_offset);
        // Deleted data must not come back after a crash.
        fsync_dir(&self.dir).map_err(|e| LogError::io(&self.dir, e))?;
        self.dir_dirty = false;
        Ok(())
    }

    fn active_first_base(&self) -> i64 {
        self.segments
            .keys()
            .next()
            .copied()
            .unwrap_or(self.log_start_offset)
    }
}
