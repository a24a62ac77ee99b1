//! The driver's disk: the `__cluster_metadata-0` [`Log`], the `quorum-state` file and the
//! KIP-630 snapshot files of one replica. Every write that the protocol relies on is fsynced
//! here before the call returns (see each method).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use kafka_protocol::messages::SnapshotHeaderRecord;
use kafka_protocol::protocol::Decodable as _;
use krust_log::batch::RecordBatch;
use krust_log::{Log, LogConfig, LogError, LogOpenOptions, PartitionMetadata};

use crate::core::{METADATA_TOPIC_ID, RecoveredLog, SnapshotRead};
use crate::quorum_state::{MAX_QUORUM_STATE_BYTES, QuorumStateData, QuorumStateError};
use crate::snapshot::{
    MAX_BATCH_SIZE_BYTES, SnapshotFileKind, SnapshotFileName, SnapshotId, SnapshotWriteError,
    SnapshotWriter, SnapshotWriterOptions,
};
use crate::types::{LogOffset, OffsetAndEpoch};

/// Name of the election file inside the partition directory.
pub const QUORUM_STATE_FILE: &str = "quorum-state";

/// Name of the lock file in the metadata log directory (Kafka's `LogManager.LockFileName`).
pub const LOCK_FILE: &str = ".lock";

/// Largest slice read from the log for one start-up pass (whole batches, at least one).
const RECOVERY_READ_BYTES: usize = 8 * 1024 * 1024;

/// Why the metadata log store failed. Any of these stops the replica: a voter that cannot
/// persist its vote or its log must not keep taking part in the quorum.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The log could not be opened, appended, truncated or flushed.
    #[error("metadata log in {dir}")]
    Log {
        /// The partition directory.
        dir: PathBuf,
        /// The log's error.
        #[source]
        source: LogError,
    },
    /// `quorum-state` could not be read or written.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `quorum-state` holds bytes that are not a valid election record.
    #[error("{path} is not a valid quorum-state file")]
    QuorumState {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: QuorumStateError,
    },
    /// `partition.metadata` could not be read or written.
    #[error("partition.metadata in {dir}")]
    PartitionMetadata {
        /// The partition directory.
        dir: PathBuf,
        /// The checkpoint error.
        #[source]
        source: krust_log::CheckpointError,
    },
    /// `partition.metadata` names another topic: the directory is not a metadata log (or was
    /// copied from elsewhere). Fix or remove the directory.
    #[error("{dir}/partition.metadata names topic id {found}, not the metadata topic")]
    ForeignTopicId {
        /// The partition directory.
        dir: PathBuf,
        /// The id found (Kafka's base64).
        found: String,
    },
    /// Another process (or another driver in this one) holds `.lock` on the metadata log
    /// directory. Stop the other instance, or point `metadata.log.dir` elsewhere.
    #[error(
        "Failed to acquire lock on file .lock in {dir}. A Kafka instance in another process or thread is using this directory."
    )]
    Locked {
        /// The metadata log directory (`metadata.log.dir`).
        dir: PathBuf,
    },
    /// The log starts above 0 but no snapshot ends at or after its start: the records below
    /// the start are gone and nothing replaces them (Kafka: "Inconsistent snapshot state").
    /// Restore the snapshot files, or delete the directory and let the replica fetch again.
    #[error(
        "{dir}: inconsistent snapshot state: there must be a snapshot at an offset at or after the log start offset {log_start_offset}, but the latest snapshot is {latest:?}"
    )]
    MissingStartSnapshot {
        /// The partition directory.
        dir: PathBuf,
        /// The first offset of the log's first segment.
        log_start_offset: i64,
        /// The latest snapshot found, if any.
        latest: Option<OffsetAndEpoch>,
    },
    /// `recovery-point-offset-checkpoint` in the metadata log directory could not be read or
    /// written. Fix or remove the file (the log is then fully rescanned).
    #[error("recovery point checkpoint of the metadata log")]
    RecoveryPoint {
        /// The checkpoint error.
        #[source]
        source: krust_log::CheckpointError,
    },
    /// A snapshot could not be encoded while it was written.
    #[error("writing snapshot {path}")]
    SnapshotWrite {
        /// The `.checkpoint.part` file.
        path: PathBuf,
        /// The writer's error.
        #[source]
        source: SnapshotWriteError,
    },
    /// A frozen snapshot file does not start with a readable `SnapshotHeader` batch.
    #[error("{path}: the first batch is not a snapshot header: {reason}")]
    SnapshotHeader {
        /// The `.checkpoint` file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A batch read back at start-up does not have the shape the core needs.
    #[error("metadata log in {dir}: batch at offset {offset} does not follow its predecessor")]
    Shape {
        /// The partition directory.
        dir: PathBuf,
        /// The batch's base offset.
        offset: i64,
    },
}

/// What the store knows of one frozen snapshot file (for retention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// Size of the `.checkpoint` file.
    pub size_bytes: u64,
    /// `SnapshotHeader.LastContainedLogTimestamp` (what `metadata.max.retention.ms` compares).
    pub last_contained_log_timestamp_ms: i64,
}

/// One replica's metadata partition directory.
#[derive(Debug)]
pub struct MetadataStore {
    dir: PathBuf,
    log: Log,
    /// The download in progress, if any: snapshot id and its `.checkpoint.part` path.
    partial: Option<(OffsetAndEpoch, PathBuf)>,
    /// Frozen snapshots on disk (`<id>.checkpoint`), oldest first. Every one ends at or after
    /// the log start offset; when the log start is above 0, one ends exactly there.
    snapshots: BTreeMap<OffsetAndEpoch, SnapshotMeta>,
    /// `.checkpoint.deleted` files waiting for their second phase (removal).
    deleted: Vec<PathBuf>,
    /// `<metadata.log.dir>/.lock`, locked exclusively for as long as the store is open; the
    /// OS drops the lock when the file is closed (or the process dies).
    _lock: File,
}

impl MetadataStore {
    /// Opens (or creates) the partition directory `dir` (Kafka's `KafkaMetadataLog.apply` and
    /// `recoverSnapshots`):
    ///
    /// 1. locks `<metadata.log.dir>/.lock` (the parent of `dir`) for the store's lifetime;
    /// 2. recovers the log from the recovery point a clean shutdown left in
    ///    `<metadata.log.dir>/recovery-point-offset-checkpoint` (entry `__cluster_metadata 0`),
    ///    or from offset 0 after a crash (Kafka always rescans the metadata log; see
    ///    [`take_recovery_point`] for why the entry is consumed at open);
    /// 3. deletes `.checkpoint.part` (crash mid-write or mid-download) and `.checkpoint.deleted`
    ///    (crash between the two phases of a deletion) files;
    /// 4. if the latest snapshot is ahead of the log (a follower crashed between renaming a
    ///    downloaded snapshot and emptying its log) empties the log and starts it there
    ///    (Kafka's `truncateToLatestSnapshot`);
    /// 5. otherwise, if the first segment starts above 0, moves the log start up to the
    ///    first snapshot ending at or after it, so a snapshot ends exactly at the log start;
    /// 6. deletes snapshots that end below the log start (retention was interrupted).
    ///
    /// # Errors
    /// [`StorageError::Locked`] if another instance holds the directory,
    /// [`StorageError::MissingStartSnapshot`] if the log start is not covered by a snapshot,
    /// [`StorageError::Log`] / [`StorageError::Io`] / [`StorageError::SnapshotHeader`].
    pub fn open(dir: &Path, config: LogConfig) -> Result<Self, StorageError> {
        let lock = lock_log_dir(dir)?;
        let recovery_point = take_recovery_point(dir)?;
        let (mut log, _) = Log::open_with(dir, config, LogOpenOptions::new(recovery_point))
            .map_err(|source| StorageError::Log {
                dir: dir.to_owned(),
                source,
            })?;
        let checkpoint = |source| StorageError::PartitionMetadata {
            dir: dir.to_owned(),
            source,
        };
        // Kafka writes `partition.metadata` with the fixed metadata topic id (facts §4.1).
        let ours = PartitionMetadata {
            topic_id: *METADATA_TOPIC_ID.as_bytes(),
        };
        match PartitionMetadata::read(dir).map_err(checkpoint)? {
            None => ours.write(dir).map_err(checkpoint)?,
            Some(found) if found == ours => {}
            Some(found) => {
                return Err(StorageError::ForeignTopicId {
                    dir: dir.to_owned(),
                    found: found.topic_id_base64(),
                });
            }
        }
        let mut frozen = Vec::new();
        for (name, file) in list_snapshot_files(dir)? {
            if file.kind == SnapshotFileKind::Frozen {
                frozen.push(OffsetAndEpoch::new(file.id.end_offset, file.id.epoch));
                continue;
            }
            let path = dir.join(&name);
            tracing::info!(path = %path.display(), "removing leftover snapshot file");
            std::fs::remove_file(&path).map_err(|source| StorageError::Io { path, source })?;
        }
        frozen.sort();
        let log_err = |source| StorageError::Log {
            dir: dir.to_owned(),
            source,
        };
        if let Some(&latest) = frozen.last() {
            let log_epoch = log.leader_epoch_cache().latest_epoch().unwrap_or(0);
            let ahead = latest.epoch.0 > log_epoch
                || (latest.epoch.0 == log_epoch && latest.offset.0 > log.log_end_offset());
            if ahead {
                tracing::warn!(snapshot = %latest, log_end_offset = log.log_end_offset(),
                    "latest snapshot is ahead of the log; starting the log at it");
                log.truncate_fully_and_start_at(latest.offset.0)
                    .map_err(log_err)?;
            }
        }
        let first = log.log_start_offset();
        if first > 0 {
            let Some(start) = frozen.iter().find(|s| s.offset.0 >= first) else {
                return Err(StorageError::MissingStartSnapshot {
                    dir: dir.to_owned(),
                    log_start_offset: first,
                    latest: frozen.last().copied(),
                });
            };
            if start.offset.0 > first {
                log.delete_records(start.offset.0).map_err(log_err)?;
            }
        }
        let start = log.log_start_offset();
        let mut snapshots = BTreeMap::new();
        let mut removed = false;
        for id in frozen {
            let path = dir.join(snapshot_id(id).file_name());
            if id.offset.0 < start {
                tracing::info!(path = %path.display(), "deleting snapshot below the log start");
                std::fs::remove_file(&path).map_err(|source| StorageError::Io { path, source })?;
                removed = true;
                continue;
            }
            snapshots.insert(id, read_snapshot_meta(&path)?);
        }
        if removed {
            // Keep the directory listing in step with the log start across a crash.
            krust_log::fs::fsync_dir(dir).map_err(|source| StorageError::Io {
                path: dir.to_owned(),
                source,
            })?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            log,
            partial: None,
            snapshots,
            deleted: Vec::new(),
            _lock: lock,
        })
    }

    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log.
    #[must_use]
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Reads `quorum-state`; `None` when the file does not exist (a fresh replica).
    ///
    /// # Errors
    /// [`StorageError::Io`], or [`StorageError::QuorumState`] for bad contents.
    pub fn read_quorum_state(&self) -> Result<Option<QuorumStateData>, StorageError> {
        let path = self.dir.join(QUORUM_STATE_FILE);
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StorageError::Io { path, source }),
        };
        let mut bytes = Vec::new();
        let limit = u64::try_from(MAX_QUORUM_STATE_BYTES).unwrap_or(u64::MAX) + 1;
        std::io::Read::by_ref(&mut file)
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|source| StorageError::Io {
                path: path.clone(),
                source,
            })?;
        QuorumStateData::from_json(&bytes)
            .map(Some)
            .map_err(|source| StorageError::QuorumState { path, source })
    }

    /// Writes `quorum-state` atomically and durably (tmp file, fsync, rename, fsync dir): the
    /// core's `PersistQuorumState` must be on disk before any later action, so a vote is
    /// never granted twice in one epoch across a crash.
    ///
    /// # Errors
    /// [`StorageError::Io`]; the caller must stop the replica.
    pub fn write_quorum_state(&self, state: &QuorumStateData) -> Result<(), StorageError> {
        let path = self.dir.join(QUORUM_STATE_FILE);
        krust_log::fs::write_atomically(&path, state.to_json().as_bytes())
            .map_err(|source| StorageError::Io { path, source })
    }

    /// What the core needs at start-up: snapshots on disk and every batch of the log.
    ///
    /// # Errors
    /// [`StorageError::Log`] if a read fails, [`StorageError::Shape`] if batches do not chain.
    pub fn recover(&self) -> Result<RecoveredLog, StorageError> {
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut next = self.log.log_start_offset();
        let end = self.log.log_end_offset();
        while next < end {
            let read =
                self.log
                    .read(next, RECOVERY_READ_BYTES)
                    .map_err(|source| StorageError::Log {
                        dir: self.dir.clone(),
                        source,
                    })?;
            let Some(last) = read.batches.last() else {
                break;
            };
            let after = last.next_offset();
            if after <= next {
                return Err(StorageError::Shape {
                    dir: self.dir.clone(),
                    offset: last.base_offset(),
                });
            }
            // A read starts at the batch holding `next`; skip anything before it (only the
            // first batch of the first read can start before the log start).
            batches.extend(read.batches.into_iter().filter(|b| b.next_offset() > next));
            next = after;
        }
        Ok(RecoveredLog {
            log_start_offset: LogOffset(self.log.log_start_offset()),
            latest_snapshot: self.latest_snapshot(),
            earliest_snapshot: self.snapshots.keys().next().copied(),
            batches,
        })
    }

    /// Appends batches the core has already stamped (offsets, epoch, CRC). Not fsynced; a
    /// `Flush` follows.
    ///
    /// # Errors
    /// [`StorageError::Log`].
    pub fn append(&mut self, batches: Vec<RecordBatch>, now_ms: i64) -> Result<(), StorageError> {
        self.log
            .append_as_follower(batches, now_ms)
            .map(|_| ())
            .map_err(|source| StorageError::Log {
                dir: self.dir.clone(),
                source,
            })
    }

    /// Removes everything at or after `end_offset`; krust-log fsyncs the cut.
    ///
    /// # Errors
    /// [`StorageError::Log`].
    pub fn truncate(&mut self, end_offset: LogOffset) -> Result<(), StorageError> {
        self.log
            .truncate_to(end_offset.0)
            .map(|_| ())
            .map_err(|source| StorageError::Log {
                dir: self.dir.clone(),
                source,
            })
    }

    /// fsyncs the log: a voter only acknowledges (through its next Fetch offset) data that
    /// survives a crash, and the leader only counts its own flushed log toward the HW.
    ///
    /// # Errors
    /// [`StorageError::Log`]; a failed fsync is fatal, never retried.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.log.flush().map_err(|source| StorageError::Log {
            dir: self.dir.clone(),
            source,
        })
    }

    /// Advances the log start to `log_start_offset` (a snapshot ends there) and deletes the
    /// segments wholly below it; krust-log fsyncs the deletion.
    ///
    /// # Errors
    /// [`StorageError::Log`].
    pub fn delete_prefix(&mut self, log_start_offset: LogOffset) -> Result<(), StorageError> {
        self.log
            .delete_records(log_start_offset.0)
            .map(|_| ())
            .map_err(|source| StorageError::Log {
                dir: self.dir.clone(),
                source,
            })
    }

    /// Records the high watermark on the log (for readers that stop at it).
    pub fn set_high_watermark(&mut self, high_watermark: LogOffset) {
        self.log.set_high_watermark(high_watermark.0);
    }

    /// Reads up to `max_bytes` of snapshot `id` from byte `position` for a FetchSnapshot.
    ///
    /// # Errors
    /// [`StorageError::Io`] when the file exists but cannot be read.
    pub fn read_snapshot(
        &self,
        id: OffsetAndEpoch,
        position: i64,
        max_bytes: usize,
    ) -> Result<SnapshotRead, StorageError> {
        let path = self.dir.join(snapshot_id(id).file_name());
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SnapshotRead::NotFound);
            }
            Err(source) => return Err(StorageError::Io { path, source }),
        };
        let io = |source| StorageError::Io {
            path: path.clone(),
            source,
        };
        let size = file.metadata().map_err(io)?.len();
        let start = u64::try_from(position).unwrap_or(0).min(size);
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut bytes = Vec::new();
        file.take(u64::try_from(max_bytes).unwrap_or(u64::MAX))
            .read_to_end(&mut bytes)
            .map_err(io)?;
        Ok(SnapshotRead::Chunk {
            size: i64::try_from(size).unwrap_or(i64::MAX),
            bytes: Bytes::from(bytes),
        })
    }

    /// Writes a downloaded chunk at `position` of the partial file of `id` (position 0 starts
    /// a new file). Not fsynced until [`MetadataStore::install_snapshot`].
    ///
    /// # Errors
    /// [`StorageError::Io`].
    pub fn write_snapshot_chunk(
        &mut self,
        id: OffsetAndEpoch,
        position: i64,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        if position == 0 || self.partial.as_ref().is_none_or(|(p, _)| *p != id) {
            self.abandon_partial()?;
            let unique = format!("{:016x}", rand::random::<u64>());
            let path = self.dir.join(snapshot_id(id).partial_file_name(&unique));
            self.partial = Some((id, path));
        }
        let Some((_, path)) = &self.partial else {
            return Ok(());
        };
        let io = |source| StorageError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        file.seek(SeekFrom::Start(u64::try_from(position).unwrap_or(0)))
            .map_err(io)?;
        file.write_all(bytes).map_err(io)
    }

    /// Freezes the download of `id` (fsync, rename to `<id>.checkpoint`, fsync dir) and
    /// replaces the log by it: every segment goes, log start = log end = the snapshot's end.
    ///
    /// # Errors
    /// [`StorageError::Io`] / [`StorageError::Log`].
    pub fn install_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), StorageError> {
        if let Some((partial_id, path)) = self.partial.take()
            && partial_id == id
        {
            let io = |source| StorageError::Io {
                path: path.clone(),
                source,
            };
            // The snapshot replaces the log: it must be durable before the log is emptied.
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            let target = self.dir.join(snapshot_id(id).file_name());
            std::fs::rename(&path, &target).map_err(io)?;
            krust_log::fs::fsync_dir(&self.dir).map_err(io)?;
            let meta = read_snapshot_meta(&target)?;
            self.snapshots.insert(id, meta);
        }
        self.log
            .truncate_fully_and_start_at(id.offset.0)
            .map_err(|source| StorageError::Log {
                dir: self.dir.clone(),
                source,
            })?;
        // Every other snapshot is now below the log start or describes another history.
        let others: Vec<OffsetAndEpoch> = self
            .snapshots
            .keys()
            .filter(|s| **s != id)
            .copied()
            .collect();
        self.delete_snapshots(&others)
    }

    /// The latest frozen snapshot, if any.
    #[must_use]
    pub fn latest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.snapshots.keys().next_back().copied()
    }

    /// Frozen snapshots, oldest first, with their size and timestamp.
    #[must_use]
    pub fn snapshots(&self) -> &BTreeMap<OffsetAndEpoch, SnapshotMeta> {
        &self.snapshots
    }

    /// Bytes of all segments plus all frozen snapshots (what `metadata.max.retention.bytes`
    /// limits).
    #[must_use]
    pub fn retained_bytes(&self) -> u64 {
        self.log.size_in_bytes() + self.snapshots.values().map(|m| m.size_bytes).sum::<u64>()
    }

    /// Registers a snapshot file frozen by [`write_snapshot_file`] (Kafka's `onSnapshotFrozen`).
    ///
    /// # Errors
    /// [`StorageError::SnapshotHeader`] / [`StorageError::Io`] if the file cannot be read.
    pub fn add_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), StorageError> {
        let meta = read_snapshot_meta(&self.dir.join(snapshot_id(id).file_name()))?;
        self.snapshots.insert(id, meta);
        Ok(())
    }

    /// First phase of Kafka's two-phase snapshot deletion: renames each snapshot to
    /// `<id>.checkpoint.deleted` (a FetchSnapshot for it then finds nothing and the follower
    /// asks again for the current one) and forgets it. [`MetadataStore::remove_deleted`]
    /// removes the files later; leftovers are removed at start-up.
    ///
    /// # Errors
    /// [`StorageError::Io`].
    pub fn delete_snapshots(&mut self, ids: &[OffsetAndEpoch]) -> Result<(), StorageError> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in ids {
            if self.snapshots.remove(id).is_none() {
                continue;
            }
            let name = snapshot_id(*id);
            let from = self.dir.join(name.file_name());
            let to = self.dir.join(name.deleted_file_name());
            tracing::info!(snapshot = %id, "deleting snapshot");
            match std::fs::rename(&from, &to) {
                Ok(()) => self.deleted.push(to),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StorageError::Io { path: from, source }),
            }
        }
        // The renames must not come back after a crash: a `.checkpoint` below the log start
        // would be deleted at start-up anyway, but one above it must not be resurrected once
        // forgotten (the core no longer names it).
        krust_log::fs::fsync_dir(&self.dir).map_err(|source| StorageError::Io {
            path: self.dir.clone(),
            source,
        })
    }

    /// Second phase: removes the `.checkpoint.deleted` files renamed by earlier deletions.
    /// No fsync: a file that survives a crash is removed again at start-up.
    ///
    /// # Errors
    /// [`StorageError::Io`].
    pub fn remove_deleted(&mut self) -> Result<(), StorageError> {
        for path in std::mem::take(&mut self.deleted) {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StorageError::Io { path, source }),
            }
        }
        Ok(())
    }

    /// Deletes the partial download, if any.
    ///
    /// # Errors
    /// [`StorageError::Io`].
    pub fn abandon_partial(&mut self) -> Result<(), StorageError> {
        if let Some((_, path)) = self.partial.take() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StorageError::Io { path, source }),
            }
        }
        Ok(())
    }

    /// Flushes and seals the log (clean shutdown).
    ///
    /// # Errors
    /// [`StorageError::Log`].
    pub fn close(self) -> Result<(), StorageError> {
        let dir = self.dir;
        let recovery_point = self.log.close().map_err(|source| StorageError::Log {
            dir: dir.clone(),
            source,
        })?;
        // Everything below the recovery point is now fsynced: the next open may trust it.
        update_recovery_point(&dir, Some(recovery_point))
    }
}

fn snapshot_id(id: OffsetAndEpoch) -> SnapshotId {
    SnapshotId {
        end_offset: id.offset.0,
        epoch: id.epoch.0,
    }
}

/// Snapshot-looking files in `dir` (names that do not parse are ignored, as Kafka does).
fn list_snapshot_files(dir: &Path) -> Result<Vec<(String, SnapshotFileName)>, StorageError> {
    let io = |source| StorageError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Ok(Some(parsed)) = SnapshotFileName::parse(&name) {
            out.push((name, parsed));
        }
    }
    Ok(out)
}

/// `(metadata.log.dir)/recovery-point-offset-checkpoint` and this log's entry in it.
fn recovery_point_entry(partition_dir: &Path) -> (PathBuf, krust_log::TopicPartition) {
    let log_dir = partition_dir.parent().unwrap_or(partition_dir);
    let name = partition_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // `<topic>-<partition>`: the partition is after the last dash.
    let (topic, partition) = name
        .rsplit_once('-')
        .and_then(|(t, p)| Some((t, p.parse().ok()?)))
        .unwrap_or((name, 0));
    (
        log_dir.join(krust_log::checkpoint::RECOVERY_POINT_CHECKPOINT_FILE),
        krust_log::TopicPartition::new(topic, partition),
    )
}

/// Reads this log's recovery point and removes the entry from the file (durably) before the
/// log can change. The entry is only ever written by a clean [`MetadataStore::close`], so it
/// is present exactly when nothing was written since that close: after a crash the log is
/// rescanned from 0 (a stale recovery point above a truncated and rewritten, unflushed tail
/// would make recovery trust bytes that may be torn).
fn take_recovery_point(partition_dir: &Path) -> Result<i64, StorageError> {
    let (path, entry) = recovery_point_entry(partition_dir);
    let offsets = krust_log::checkpoint::read_offset_checkpoint(&path)
        .map_err(|source| StorageError::RecoveryPoint { source })?;
    let Some(&recovery_point) = offsets.get(&entry) else {
        return Ok(0);
    };
    update_recovery_point(partition_dir, None)?;
    Ok(recovery_point.max(0))
}

/// Sets (`Some`) or removes (`None`) this log's entry, keeping the other entries of the file
/// (other logs of the same log directory). Written atomically and fsynced.
fn update_recovery_point(partition_dir: &Path, offset: Option<i64>) -> Result<(), StorageError> {
    let (path, entry) = recovery_point_entry(partition_dir);
    let checkpoint = |source| StorageError::RecoveryPoint { source };
    let mut offsets = krust_log::checkpoint::read_offset_checkpoint(&path).map_err(checkpoint)?;
    match offset {
        Some(offset) => {
            offsets.insert(entry, offset);
        }
        None => {
            offsets.remove(&entry);
        }
    }
    krust_log::checkpoint::write_offset_checkpoint(&path, &offsets).map_err(checkpoint)
}

/// Takes the exclusive advisory lock on `<metadata.log.dir>/.lock` (Kafka's `LogManager.lockLogDirs`).
fn lock_log_dir(partition_dir: &Path) -> Result<File, StorageError> {
    let log_dir = partition_dir.parent().unwrap_or(partition_dir).to_owned();
    let io = |source| StorageError::Io {
        path: log_dir.join(LOCK_FILE),
        source,
    };
    std::fs::create_dir_all(&log_dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(log_dir.join(LOCK_FILE))
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::Locked { dir: log_dir }),
        Err(std::fs::TryLockError::Error(source)) => Err(io(source)),
    }
}

/// Size and `LastContainedLogTimestamp` of a frozen snapshot: reads only its first batch.
fn read_snapshot_meta(path: &Path) -> Result<SnapshotMeta, StorageError> {
    let io = |source| StorageError::Io {
        path: path.to_owned(),
        source,
    };
    let bad = |reason: String| StorageError::SnapshotHeader {
        path: path.to_owned(),
        reason,
    };
    let mut file = File::open(path).map_err(io)?;
    let size_bytes = file.metadata().map_err(io)?.len();
    let mut prefix = [0u8; 12];
    file.read_exact(&mut prefix).map_err(io)?;
    let length = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
    let length = usize::try_from(length)
        .ok()
        .filter(|l| *l <= MAX_BATCH_SIZE_BYTES)
        .ok_or_else(|| bad(format!("batch length {length}")))?;
    let mut bytes = prefix.to_vec();
    bytes.resize(12 + length, 0);
    file.read_exact(&mut bytes[12..]).map_err(io)?;
    let (batch, _) = RecordBatch::parse(Bytes::from(bytes), MAX_BATCH_SIZE_BYTES)
        .map_err(|e| bad(e.to_string()))?;
    if !batch.is_control() {
        return Err(bad("not a control batch".to_owned()));
    }
    let records = batch.records().map_err(|e| bad(e.to_string()))?;
    let mut value = records
        .into_iter()
        .next()
        .and_then(|r| r.value)
        .ok_or_else(|| bad("no header record".to_owned()))?;
    let header = SnapshotHeaderRecord::decode(&mut value, 0).map_err(|e| bad(e.to_string()))?;
    Ok(SnapshotMeta {
        size_bytes,
        last_contained_log_timestamp_ms: header.last_contained_log_timestamp,
    })
}

/// Writes snapshot `id` into `dir` as Kafka does (`createNewSnapshot` then `freeze`): the
/// records go to `<id>-<random>.checkpoint.part`, which is fsynced, renamed to
/// `<id>.checkpoint` and the directory fsynced. Runs outside the driver task (it may write
/// many MiB); register the result with [`MetadataStore::add_snapshot`]. On failure the partial
/// file is removed.
///
/// # Errors
/// [`StorageError::SnapshotWrite`] (an empty or oversized record, or the disk), or
/// [`StorageError::Io`].
pub fn write_snapshot_file(
    dir: &Path,
    id: OffsetAndEpoch,
    last_contained_log_timestamp_ms: i64,
    append_timestamp_ms: i64,
    records: impl IntoIterator<Item = Bytes>,
) -> Result<PathBuf, StorageError> {
    let name = snapshot_id(id);
    let unique = format!("{:016x}", rand::random::<u64>());
    let part = dir.join(name.partial_file_name(&unique));
    let result = write_part(
        &part,
        name,
        last_contained_log_timestamp_ms,
        append_timestamp_ms,
        records,
    )
    .and_then(|()| {
        let target = dir.join(name.file_name());
        std::fs::rename(&part, &target).map_err(|source| StorageError::Io {
            path: part.clone(),
            source,
        })?;
        // The frozen name must survive a crash before the core names the snapshot to
        // followers or retention deletes the log below it.
        krust_log::fs::fsync_dir(dir).map_err(|source| StorageError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(target)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

fn write_part(
    part: &Path,
    id: SnapshotId,
    last_contained_log_timestamp_ms: i64,
    append_timestamp_ms: i64,
    records: impl IntoIterator<Item = Bytes>,
) -> Result<(), StorageError> {
    let io = |source| StorageError::Io {
        path: part.to_owned(),
        source,
    };
    let write = |source| StorageError::SnapshotWrite {
        path: part.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(part)
        .map_err(io)?;
    let mut options = SnapshotWriterOptions::new(id);
    options.last_contained_log_timestamp_ms = last_contained_log_timestamp_ms;
    options.append_timestamp_ms = append_timestamp_ms;
    let mut writer = SnapshotWriter::new(std::io::BufWriter::new(file), options).map_err(write)?;
    for record in records {
        writer.append(record).map_err(write)?;
    }
    let sink = writer.freeze().map_err(write)?;
    let file = sink.into_inner().map_err(|e| io(e.into_error()))?;
    // A `.checkpoint` name must never point at a partly written file: the bytes are durable
    // before the rename freezes them.
    file.sync_all().map_err(io)
}
