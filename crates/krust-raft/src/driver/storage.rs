//! The driver's disk: the `__cluster_metadata-0` [`Log`], the `quorum-state` file and the
//! KIP-630 snapshot files of one replica. Every write that the protocol relies on is fsynced
//! here before the call returns (see each method).

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_log::{Log, LogConfig, LogError, PartitionMetadata};

use crate::core::{METADATA_TOPIC_ID, RecoveredLog, SnapshotRead};
use crate::quorum_state::{MAX_QUORUM_STATE_BYTES, QuorumStateData, QuorumStateError};
use crate::snapshot::{SnapshotFileKind, SnapshotFileName, SnapshotId};
use crate::types::{LogOffset, OffsetAndEpoch};

/// Name of the election file inside the partition directory.
pub const QUORUM_STATE_FILE: &str = "quorum-state";

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
    /// A batch read back at start-up does not have the shape the core needs.
    #[error("metadata log in {dir}: batch at offset {offset} does not follow its predecessor")]
    Shape {
        /// The partition directory.
        dir: PathBuf,
        /// The batch's base offset.
        offset: i64,
    },
}

/// One replica's metadata partition directory.
#[derive(Debug)]
pub struct MetadataStore {
    dir: PathBuf,
    log: Log,
    /// The download in progress, if any: snapshot id and its `.checkpoint.part` path.
    partial: Option<(OffsetAndEpoch, PathBuf)>,
}

impl MetadataStore {
    /// Opens (or creates) the partition directory `dir`, recovering the log from offset 0
    /// (Kafka's metadata log also rescans everything: the log is small), and deletes
    /// `.checkpoint.part` files left by a crash mid-download.
    ///
    /// # Errors
    /// [`StorageError::Log`] / [`StorageError::Io`].
    pub fn open(dir: &Path, config: LogConfig) -> Result<Self, StorageError> {
        let log = Log::open(dir, config, 0).map_err(|source| StorageError::Log {
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
        for (name, kind) in list_snapshot_files(dir)? {
            if kind.kind == SnapshotFileKind::Partial || kind.kind == SnapshotFileKind::Deleted {
                let path = dir.join(&name);
                tracing::info!(path = %path.display(), "removing leftover snapshot file");
                std::fs::remove_file(&path).map_err(|source| StorageError::Io { path, source })?;
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            log,
            partial: None,
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
        let mut snapshots: Vec<SnapshotId> = list_snapshot_files(&self.dir)?
            .into_iter()
            .filter(|(_, f)| f.kind == SnapshotFileKind::Frozen)
            .map(|(_, f)| f.id)
            .collect();
        snapshots.sort();
        let to_pair = |s: &SnapshotId| OffsetAndEpoch::new(s.end_offset, s.epoch);
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
            latest_snapshot: snapshots.last().map(to_pair),
            earliest_snapshot: snapshots.first().map(to_pair),
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
        }
        self.log
            .truncate_fully_and_start_at(id.offset.0)
            .map_err(|source| StorageError::Log {
                dir: self.dir.clone(),
                source,
            })
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
        self.log
            .close()
            .map(|_| ())
            .map_err(|source| StorageError::Log { dir, source })
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
