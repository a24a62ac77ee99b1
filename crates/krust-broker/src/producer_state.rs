//! Idempotent producer state of one partition (Kafka 3.9 `ProducerStateManager`,
//! `ProducerStateEntry`, `ProducerAppendInfo`).
//!
//! Per producer id the partition remembers the producer epoch and the metadata of the last
//! [`NUM_BATCHES_TO_RETAIN`] batches (first/last sequence, offsets, max timestamp). A leader
//! checks every client batch against it before the append:
//! - a batch equal (epoch, first and last sequence) to a retained one is a **duplicate**: the
//!   original offsets are returned and nothing is appended;
//! - an older producer epoch → `INVALID_PRODUCER_EPOCH` (Kafka ≥ 2.7 answers produce with it
//!   rather than `PRODUCER_FENCED`, which is the transaction coordinator's answer);
//! - a newer epoch must start at sequence 0, else `OUT_OF_ORDER_SEQUENCE_NUMBER`;
//! - the same epoch must continue at last sequence + 1 (wrapping from `i32::MAX` to 0), else
//!   `OUT_OF_ORDER_SEQUENCE_NUMBER`;
//! - a producer id the partition does not know (never seen, expired or removed with its
//!   records) is accepted at any sequence: Kafka 3.9 no longer answers
//!   `UNKNOWN_PRODUCER_ID` from the produce path (KIP-360), it trusts the producer.
//!
//! State is rebuilt at open from the latest `<offset>.snapshot` file at or below the log end
//! offset plus a replay of the batches after it; replay (and follower appends) update the
//! state without checks (Kafka's `AppendOrigin.REPLICATION`).
//!
//! # Snapshot file (version 1, Kafka's `PID_SNAPSHOT_MAP_SCHEMA`)
//! `version:int16 | crc:uint32 | entries:int32 count + entries`; each entry is
//! `producer_id:int64, epoch:int16, last_sequence:int32, last_offset:int64, offset_delta:int32,
//! timestamp:int64, coordinator_epoch:int32, current_txn_first_offset:int64` (46 bytes). The
//! CRC-32C covers everything after the CRC field. Only the last batch of each producer is
//! stored (so after a restart only that one is recognised as a duplicate, as in Kafka).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};

use krust_log::batch::{NO_PRODUCER_EPOCH, NO_SEQUENCE};
use krust_log::fs::{PRODUCER_SNAPSHOT_FILE_SUFFIX, offset_file_path, parse_offset_file_name};
use krust_log::{Log, LogError, RecordBatch};
use tracing::warn;

/// Batches remembered per producer for duplicate detection (Kafka's `NUM_BATCHES_TO_RETAIN`).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// `producer.id.expiration.ms` default (1 day).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;
/// Version of the snapshot file format.
pub const SNAPSHOT_VERSION: i16 = 1;
const CRC_OFFSET: usize = 2;
const ENTRIES_OFFSET: usize = CRC_OFFSET + 4;
const ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
/// Bytes read per step when replaying the log.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// `baseSequence + delta` with Kafka's wrap at `i32::MAX` (`DefaultRecordBatch.incrementSequence`).
#[must_use]
pub fn increment_sequence(sequence: i32, delta: i32) -> i32 {
    if sequence > i32::MAX - delta {
        delta - (i32::MAX - sequence) - 1
    } else {
        sequence + delta
    }
}

/// `sequence - delta` with the same wrap (`DefaultRecordBatch.decrementSequence`).
#[must_use]
pub fn decrement_sequence(sequence: i32, delta: i32) -> i32 {
    if sequence < delta {
        i32::MAX - (delta - sequence) + 1
    } else {
        sequence - delta
    }
}

/// `next` follows `last` (Kafka's `ProducerAppendInfo.inSequence`).
#[must_use]
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// Metadata of one appended batch of a producer (Kafka's `BatchMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the batch's last record.
    pub last_seq: i32,
    /// Offset of the batch's last record.
    pub last_offset: i64,
    /// `last_offset - first_offset` (= last minus first sequence).
    pub offset_delta: i32,
    /// The batch's max timestamp (or its LogAppendTime).
    pub timestamp: i64,
}

impl BatchMetadata {
    /// Sequence of the batch's first record.
    #[must_use]
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    /// Offset of the batch's first record.
    #[must_use]
    pub fn first_offset(&self) -> i64 {
        self.last_offset - i64::from(self.offset_delta)
    }
}

/// What a partition knows about one producer id (Kafka's `ProducerStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    /// The producer id.
    pub producer_id: i64,
    /// Current producer epoch (`-1` for none).
    pub producer_epoch: i16,
    /// Last batches, oldest first, at most [`NUM_BATCHES_TO_RETAIN`].
    pub batches: VecDeque<BatchMetadata>,
    /// Epoch of the last transaction coordinator that wrote a marker (`-1` for none).
    pub coordinator_epoch: i32,
    /// Max timestamp of the last batch or marker (drives expiry).
    pub last_timestamp: i64,
    /// First offset of the open transaction, if one is open.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerStateEntry {
    fn empty(producer_id: i64) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: None,
        }
    }

    /// Last sequence written, `-1` if none.
    #[must_use]
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    /// Last offset written, `-1` if none.
    #[must_use]
    pub fn last_data_offset(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }

    /// The retained batch with exactly this epoch and sequence range, if any.
    #[must_use]
    pub fn find_duplicate(
        &self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
            .copied()
    }

    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) {
        if epoch != self.producer_epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
        if self.batches.len() == NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.last_timestamp = batch.timestamp;
    }
}

/// The producer-state view a snapshot keeps of an entry (only the last batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SnapshotEntry {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Last sequence (`-1` if no batch).
    pub last_sequence: i32,
    /// Last offset (`-1` if no batch).
    pub last_offset: i64,
    /// Last batch's offset delta (`0` if no batch).
    pub offset_delta: i32,
    /// Last timestamp.
    pub timestamp: i64,
    /// Coordinator epoch.
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, `-1` for none.
    pub current_txn_first_offset: i64,
}

impl From<&ProducerStateEntry> for SnapshotEntry {
    fn from(e: &ProducerStateEntry) -> Self {
        let last = e.batches.back();
        SnapshotEntry {
            producer_id: e.producer_id,
            producer_epoch: e.producer_epoch,
            last_sequence: last.map_or(NO_SEQUENCE, |b| b.last_seq),
            last_offset: last.map_or(-1, |b| b.last_offset),
            offset_delta: last.map_or(0, |b| b.offset_delta),
            timestamp: e.last_timestamp,
            coordinator_epoch: e.coordinator_epoch,
            current_txn_first_offset: e.current_txn_first_offset.unwrap_or(-1),
        }
    }
}

impl From<SnapshotEntry> for ProducerStateEntry {
    fn from(s: SnapshotEntry) -> Self {
        let mut batches = VecDeque::new();
        // Kafka restores the batch only when the entry has a written offset.
        if s.last_offset >= 0 {
            batches.push_back(BatchMetadata {
                last_seq: s.last_sequence,
                last_offset: s.last_offset,
                offset_delta: s.offset_delta,
                timestamp: s.timestamp,
            });
        }
        ProducerStateEntry {
            producer_id: s.producer_id,
            producer_epoch: s.producer_epoch,
            batches,
            coordinator_epoch: s.coordinator_epoch,
            last_timestamp: s.timestamp,
            current_txn_first_offset: (s.current_txn_first_offset >= 0)
                .then_some(s.current_txn_first_offset),
        }
    }
}

/// A client batch refused by the producer-state checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerStateError {
    /// The batch's epoch is older than the partition's (a zombie producer). Kafka code
    /// `INVALID_PRODUCER_EPOCH`; the producer must re-initialise.
    #[error(
        "producer {producer_id}: epoch {epoch} is older than the current epoch {current_epoch}"
    )]
    InvalidProducerEpoch {
        /// Producer id.
        producer_id: i64,
        /// The batch's epoch.
        epoch: i16,
        /// The partition's epoch for it.
        current_epoch: i16,
    },
    /// The batch starts above the lowest sequence seen while its producer's transaction is
    /// being verified (KIP-890). Kafka code `OUT_OF_ORDER_SEQUENCE_NUMBER`.
    #[error(
        "Out of order sequence number for producer {producer_id}: {first_seq} (incoming seq. number), {lowest_seq} (earliest seen sequence)"
    )]
    AboveVerifiedSequence {
        /// Producer id.
        producer_id: i64,
        /// The batch's first sequence.
        first_seq: i32,
        /// The lowest sequence seen verifying.
        lowest_seq: i32,
    },
    /// The batch does not continue the producer's sequence (or a new epoch does not start at
    /// 0). Kafka code `OUT_OF_ORDER_SEQUENCE_NUMBER`.
    #[error(
        "producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow {last_seq} (current epoch {current_epoch})"
    )]
    OutOfOrderSequence {
        /// Producer id.
        producer_id: i64,
        /// The batch's epoch.
        epoch: i16,
        /// The batch's first sequence.
        first_seq: i32,
        /// The last sequence the partition has for the producer (`-1` if none).
        last_seq: i32,
        /// The partition's epoch for it.
        current_epoch: i16,
    },
    /// A non-transactional batch from a producer with a transaction open on the partition
    /// (Kafka's `appendDataBatch`). Kafka code `INVALID_TXN_STATE`.
    #[error("producer {producer_id}: expected a transactional write, a transaction is open")]
    InvalidTxnState {
        /// Producer id.
        producer_id: i64,
    },
}

/// A transaction marker refused by the producer-state checks (Kafka's
/// `ProducerAppendInfo.appendEndTxnMarker` for a coordinator append).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// The marker's producer epoch is older than the partition's. Kafka code
    /// `INVALID_PRODUCER_EPOCH`.
    #[error(
        "producer {producer_id}: marker epoch {epoch} is older than the current epoch {current_epoch}"
    )]
    InvalidProducerEpoch {
        /// Producer id.
        producer_id: i64,
        /// The marker's producer epoch.
        epoch: i16,
        /// The partition's epoch for the producer.
        current_epoch: i16,
    },
    /// The marker comes from a coordinator older than the last one that wrote a marker for
    /// this producer. Kafka code `TRANSACTION_COORDINATOR_FENCED`.
    #[error(
        "producer {producer_id}: coordinator epoch {coordinator_epoch} is older than {current}"
    )]
    CoordinatorFenced {
        /// Producer id.
        producer_id: i64,
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The last coordinator epoch seen for the producer.
        current: i32,
    },
}

/// A transaction ended by a marker (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch.
    pub first_offset: i64,
    /// Offset of the marker.
    pub last_offset: i64,
    /// Ended by an ABORT marker.
    pub is_aborted: bool,
}

/// A snapshot file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Bytes are not a version-1 snapshot or fail their CRC; the file is deleted and an older
    /// one (or a full replay) is used instead.
    #[error("{path}: corrupt producer snapshot: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Reading, writing or listing failed.
    #[error("producer snapshot I/O on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading the log for replay failed.
    #[error("replaying the log into producer state")]
    Log(#[from] LogError),
}

/// The header fields of a batch that the producer checks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    /// Producer id (`-1`: not idempotent; no checks).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// First sequence.
    pub base_sequence: i32,
    /// `last_offset_delta` of the batch.
    pub last_offset_delta: i32,
    /// Transactional batch.
    pub is_transactional: bool,
    /// Control batch (transaction marker).
    pub is_control: bool,
}

impl ProducerBatch {
    /// Header fields of `batch`.
    #[must_use]
    pub fn of(batch: &RecordBatch) -> Self {
        ProducerBatch {
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            last_offset_delta: batch.last_offset_delta(),
            is_transactional: batch.is_transactional(),
            is_control: batch.is_control(),
        }
    }

    /// Sequence of the last record, wrapping at `i32::MAX`.
    #[must_use]
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            NO_SEQUENCE
        } else {
            increment_sequence(self.base_sequence, self.last_offset_delta)
        }
    }
}

/// Outcome of [`ProducerStateManager::check_client_append`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendCheck {
    /// Append the batches.
    Append,
    /// Batch `index` repeats an appended batch: answer with its offsets, append nothing.
    Duplicate {
        /// Index of the duplicate batch in the request.
        index: usize,
        /// The original batch.
        original: BatchMetadata,
    },
}

/// Producer state of one partition; see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: BTreeMap<i64, ProducerStateEntry>,
    /// Completed transactions whose marker is not yet below the high watermark, by first
    /// offset (Kafka's `unreplicatedTxns`): they still bound the last stable offset.
    unreplicated_txns: BTreeMap<i64, CompletedTxn>,
    /// Aborted transactions met by [`ProducerStateManager::replay`], with their last stable
    /// offsets, for the caller to (re)index ([`ProducerStateManager::take_replayed_aborted`]).
    replayed_aborted: Vec<krust_log::txn_index::AbortedTxn>,
    /// Offset after the last batch applied (the log end offset once caught up).
    last_map_offset: i64,
    producer_id_expiration_ms: i64,
}

impl ProducerStateManager {
    /// Empty state at offset 0.
    #[must_use]
    pub fn new(producer_id_expiration_ms: i64) -> Self {
        ProducerStateManager {
            producers: BTreeMap::new(),
            unreplicated_txns: BTreeMap::new(),
            replayed_aborted: Vec::new(),
            last_map_offset: 0,
            producer_id_expiration_ms,
        }
    }

    /// Offset after the last batch applied.
    #[must_use]
    pub fn last_map_offset(&self) -> i64 {
        self.last_map_offset
    }

    /// The entry of `producer_id`.
    #[must_use]
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// All entries, by producer id.
    pub fn entries(&self) -> impl Iterator<Item = &ProducerStateEntry> {
        self.producers.values()
    }

    /// The snapshot view of every entry, by producer id.
    #[must_use]
    pub fn snapshot_entries(&self) -> Vec<SnapshotEntry> {
        self.producers.values().map(SnapshotEntry::from).collect()
    }

    /// Kafka's `firstUnstableOffset`: the smallest first offset of an open transaction or of
    /// a completed one whose marker is at or above `high_watermark` (bounds the last stable
    /// offset).
    #[must_use]
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let ongoing = self
            .producers
            .values()
            .filter_map(|e| e.current_txn_first_offset)
            .min();
        let unreplicated = self
            .unreplicated_txns
            .values()
            .filter(|t| t.last_offset >= high_watermark)
            .map(|t| t.first_offset)
            .min();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The high watermark moved: completed transactions whose marker is below it no longer
    /// bound the last stable offset (Kafka's `onHighWatermarkUpdated`).
    pub fn on_high_watermark_updated(&mut self, high_watermark: i64) {
        self.unreplicated_txns
            .retain(|_, t| t.last_offset >= high_watermark);
    }

    /// The last stable offset recorded with a transaction `completed` just ended (Kafka's
    /// `lastStableOffset(completedTxn)`): the first offset of the earliest other open
    /// transaction, else the marker's offset + 1. Call after the marker was applied.
    #[must_use]
    pub fn last_stable_offset_of(&self, completed: &CompletedTxn) -> i64 {
        self.producers
            .values()
            .filter(|e| e.producer_id != completed.producer_id)
            .filter_map(|e| e.current_txn_first_offset)
            .min()
            .unwrap_or(completed.last_offset + 1)
    }

    /// Checks a transaction marker the coordinator asks the leader to write (Kafka's
    /// `appendEndTxnMarker` with `AppendOrigin.COORDINATOR`). A producer the partition does
    /// not know is accepted (its marker ends nothing).
    ///
    /// # Errors
    /// [`MarkerError`].
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), MarkerError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < entry.producer_epoch {
            return Err(MarkerError::InvalidProducerEpoch {
                producer_id,
                epoch: producer_epoch,
                current_epoch: entry.producer_epoch,
            });
        }
        if entry.coordinator_epoch > coordinator_epoch {
            return Err(MarkerError::CoordinatorFenced {
                producer_id,
                coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Aborted transactions met by the last [`ProducerStateManager::load`] /
    /// [`ProducerStateManager::replay`], to index.
    pub fn take_replayed_aborted(&mut self) -> Vec<krust_log::txn_index::AbortedTxn> {
        std::mem::take(&mut self.replayed_aborted)
    }

    /// Checks a leader append from a client, batch by batch, as Kafka's
    /// `analyzeAndValidateProducerState` with `AppendOrigin.CLIENT`: the first duplicate
    /// wins; later batches of the same producer are checked against the earlier ones.
    ///
    /// # Errors
    /// [`ProducerStateError`] for the first batch that fails.
    pub fn check_client_append(
        &self,
        batches: &[ProducerBatch],
    ) -> Result<AppendCheck, ProducerStateError> {
        self.check_client_append_verifying(batches, &BTreeMap::new())
    }

    /// [`Self::check_client_append`] with the lowest sequences of the producers whose KIP-890
    /// verification is in flight (Kafka's `VerificationStateEntry.lowestSequence`): a batch of
    /// such a producer starting above it is OUT_OF_ORDER_SEQUENCE_NUMBER (checked after the
    /// epoch, before the sequence continuity).
    ///
    /// # Errors
    /// [`ProducerStateError`] for the first batch that fails.
    pub fn check_client_append_verifying(
        &self,
        batches: &[ProducerBatch],
        lowest_sequences: &BTreeMap<i64, i32>,
    ) -> Result<AppendCheck, ProducerStateError> {
        // (epoch, last sequence) of producers updated by earlier batches of this append.
        let mut updated: BTreeMap<i64, (i16, i32)> = BTreeMap::new();
        // Whether each producer has a transaction open after earlier batches of this append.
        let mut txn_open: BTreeMap<i64, bool> = BTreeMap::new();
        for (index, batch) in batches.iter().enumerate() {
            if batch.producer_id < 0 || batch.is_control {
                continue;
            }
            let current = self.producers.get(&batch.producer_id);
            if let Some(original) = current.and_then(|e| {
                e.find_duplicate(
                    batch.producer_epoch,
                    batch.base_sequence,
                    batch.last_sequence(),
                )
            }) {
                return Ok(AppendCheck::Duplicate { index, original });
            }
            let current_epoch = current.map_or(NO_PRODUCER_EPOCH, |e| e.producer_epoch);
            let (updated_epoch, updated_last_seq) = match updated.get(&batch.producer_id) {
                Some(&(epoch, seq)) => (epoch, Some(seq)),
                None => (current_epoch, None),
            };
            if batch.producer_epoch < updated_epoch {
                return Err(ProducerStateError::InvalidProducerEpoch {
                    producer_id: batch.producer_id,
                    epoch: batch.producer_epoch,
                    current_epoch: updated_epoch,
                });
            }
            let first_seq = batch.base_sequence;
            if let Some(&lowest) = lowest_sequences.get(&batch.producer_id)
                && first_seq > lowest
            {
                return Err(ProducerStateError::AboveVerifiedSequence {
                    producer_id: batch.producer_id,
                    first_seq,
                    lowest_seq: lowest,
                });
            }
            if batch.producer_epoch != updated_epoch {
                if first_seq != 0 && updated_epoch != NO_PRODUCER_EPOCH {
                    return Err(ProducerStateError::OutOfOrderSequence {
                        producer_id: batch.producer_id,
                        epoch: batch.producer_epoch,
                        first_seq,
                        last_seq: updated_last_seq.unwrap_or_else(|| {
                            current.map_or(NO_SEQUENCE, ProducerStateEntry::last_seq)
                        }),
                        current_epoch: updated_epoch,
                    });
                }
            } else {
                let last_seq = match updated_last_seq {
                    Some(seq) => seq,
                    None => current.map_or(NO_SEQUENCE, ProducerStateEntry::last_seq),
                };
                // An entry with no epoch (records deleted by retention) accepts any sequence.
                if current_epoch != NO_PRODUCER_EPOCH && !in_sequence(last_seq, first_seq) {
                    return Err(ProducerStateError::OutOfOrderSequence {
                        producer_id: batch.producer_id,
                        epoch: batch.producer_epoch,
                        first_seq,
                        last_seq,
                        current_epoch,
                    });
                }
            }
            let open = txn_open
                .get(&batch.producer_id)
                .copied()
                .unwrap_or_else(|| current.is_some_and(|e| e.current_txn_first_offset.is_some()));
            if open && !batch.is_transactional {
                return Err(ProducerStateError::InvalidTxnState {
                    producer_id: batch.producer_id,
                });
            }
            txn_open.insert(batch.producer_id, open || batch.is_transactional);
            updated.insert(
                batch.producer_id,
                (batch.producer_epoch, batch.last_sequence()),
            );
        }
        Ok(AppendCheck::Append)
    }

    /// Kafka's `analyzeAndValidateProducerState` with `AppendOrigin.COORDINATOR` (the group
    /// coordinator writing a TxnOffsetCommit's offsets): no duplicate or sequence checks, only a
    /// producer epoch older than the partition's is refused.
    ///
    /// # Errors
    /// [`ProducerStateError::InvalidProducerEpoch`] for the first such batch.
    pub fn check_coordinator_append(
        &self,
        batches: &[ProducerBatch],
    ) -> Result<(), ProducerStateError> {
        for batch in batches {
            if batch.producer_id < 0 || batch.is_control {
                continue;
            }
            if let Some(entry) = self.producers.get(&batch.producer_id)
                && batch.producer_epoch < entry.producer_epoch
            {
                return Err(ProducerStateError::InvalidProducerEpoch {
                    producer_id: batch.producer_id,
                    epoch: batch.producer_epoch,
                    current_epoch: entry.producer_epoch,
                });
            }
        }
        Ok(())
    }

    /// Applies a batch that is in the log (leader after append, follower append, replay at
    /// open), without checks (Kafka's `AppendOrigin.REPLICATION`). A COMMIT/ABORT marker that
    /// ends an open transaction returns it, already counted as unreplicated (it bounds the
    /// last stable offset until the high watermark passes the marker); an aborted one must be
    /// indexed by the caller with [`ProducerStateManager::last_stable_offset_of`].
    pub fn apply_batch(&mut self, batch: &RecordBatch) -> Option<CompletedTxn> {
        self.last_map_offset = self.last_map_offset.max(batch.next_offset());
        let pid = batch.producer_id();
        if pid < 0 {
            return None;
        }
        let entry = self
            .producers
            .entry(pid)
            .or_insert_with(|| ProducerStateEntry::empty(pid));
        let epoch = batch.producer_epoch();
        if batch.is_control() {
            // A transaction marker ends the open transaction (Kafka's appendEndTxnMarker).
            // A control batch that is not a readable COMMIT/ABORT (emptied by the cleaner, or
            // unreadable) changes nothing.
            let marker = match krust_log::txn_marker::EndTxnMarker::of(batch) {
                Ok(Some(marker)) => marker,
                Ok(None) => return None,
                Err(reason) => {
                    warn!(producer_id = pid, offset = batch.base_offset(), %reason,
                        "ignoring an unreadable transaction marker");
                    return None;
                }
            };
            if entry.producer_epoch != epoch {
                entry.batches.clear();
                entry.producer_epoch = epoch;
            }
            let completed = entry
                .current_txn_first_offset
                .take()
                .map(|first| CompletedTxn {
                    producer_id: pid,
                    first_offset: first,
                    last_offset: batch.base_offset(),
                    is_aborted: !marker.commit,
                });
            entry.coordinator_epoch = marker.coordinator_epoch;
            entry.last_timestamp = batch.max_timestamp();
            if let Some(done) = completed {
                self.unreplicated_txns.insert(done.first_offset, done);
            }
            return completed;
        }
        let header = ProducerBatch::of(batch);
        entry.add_batch(
            epoch,
            BatchMetadata {
                last_seq: header.last_sequence(),
                last_offset: batch.last_offset(),
                offset_delta: batch.last_offset_delta(),
                timestamp: batch.max_timestamp(),
            },
        );
        if batch.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(batch.base_offset());
        }
        None
    }

    /// Removes producers idle for `producer.id.expiration.ms` with no open transaction
    /// (Kafka's `removeExpiredProducers`). Returns how many were removed.
    pub fn remove_expired(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration = self.producer_id_expiration_ms;
        self.producers
            .retain(|_, e| !is_expired(e, now_ms, expiration));
        before - self.producers.len()
    }

    /// Forgets producers whose last write is below the new log start offset.
    pub fn on_log_start_offset_incremented(&mut self, log_start_offset: i64) {
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || e.last_data_offset() >= log_start_offset
        });
    }

    /// Writes `<last_map_offset>.snapshot` in `dir` (tmp → fsync → rename → fsync dir, so a
    /// crash leaves the old set of snapshots or the new one).
    ///
    /// # Errors
    /// [`SnapshotError::Io`].
    pub fn write_snapshot(&self, dir: &Path) -> Result<PathBuf, SnapshotError> {
        let path = offset_file_path(dir, self.last_map_offset, PRODUCER_SNAPSHOT_FILE_SUFFIX);
        let bytes = encode_snapshot(&self.snapshot_entries());
        krust_log::fs::write_atomically(&path, &bytes).map_err(|source| SnapshotError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// The `<last_map_offset>.snapshot` file [`ProducerStateManager::write_snapshot`] would
    /// write, as a path and its bytes, for someone else to write: at a roll the partition hands
    /// it to the roll's background flush ([`krust_log::FlushJob::also_publish_file`]), so the
    /// produce path neither creates nor fsyncs a file (Kafka writes it under the log lock with
    /// `takeSnapshot(sync = false)` and flushes it on the scheduler).
    #[must_use]
    pub fn snapshot_file(&self, dir: &Path) -> (PathBuf, Vec<u8>) {
        let path = offset_file_path(dir, self.last_map_offset, PRODUCER_SNAPSHOT_FILE_SUFFIX);
        (path, encode_snapshot(&self.snapshot_entries()))
    }

    /// Rebuilds the state of `log` (Kafka's `loadProducerState`): deletes snapshots above
    /// the log end offset, loads the newest readable snapshot at or below it (a corrupt one
    /// is deleted with a warning and the next older tried), drops producers expired at
    /// `now_ms`, then replays the batches from the snapshot offset (or the log start) to the
    /// log end.
    ///
    /// # Errors
    /// [`SnapshotError::Io`] (listing, reading or deleting); [`SnapshotError::Log`].
    pub fn load(
        log: &Log,
        producer_id_expiration_ms: i64,
        now_ms: i64,
    ) -> Result<ProducerStateManager, SnapshotError> {
        let dir = log.dir();
        let log_end = log.log_end_offset();
        let mut state = ProducerStateManager::new(producer_id_expiration_ms);
        let mut snapshots = list_snapshots(dir)?;
        for &(offset, ref path) in snapshots.iter().filter(|(o, _)| *o > log_end) {
            warn!(path = %path.display(), offset, log_end, "deleting producer snapshot beyond the log end");
            remove_file(path)?;
        }
        snapshots.retain(|(o, _)| *o <= log_end);
        if log.txn_indexes_need_rebuild() {
            // A corrupt `.txnindex` was dropped: replay the whole log so every aborted
            // transaction is met again and re-indexed.
            snapshots.clear();
        }
        let mut start = log.log_start_offset();
        while let Some((offset, path)) = snapshots.pop() {
            let bytes = std::fs::read(&path).map_err(|source| SnapshotError::Io {
                path: path.clone(),
                source,
            })?;
            match decode_snapshot(&bytes) {
                Ok(entries) => {
                    for entry in entries {
                        let entry = ProducerStateEntry::from(entry);
                        if !is_expired(&entry, now_ms, producer_id_expiration_ms) {
                            state.producers.insert(entry.producer_id, entry);
                        }
                    }
                    start = start.max(offset);
                    break;
                }
                Err(reason) => {
                    warn!(path = %path.display(), %reason, "deleting corrupt producer snapshot");
                    remove_file(&path)?;
                }
            }
        }
        state.last_map_offset = start;
        state.replay(log, start)?;
        Ok(state)
    }

    /// Applies every batch of `log` from `from_offset` to its end.
    ///
    /// # Errors
    /// [`SnapshotError::Log`].
    pub fn replay(&mut self, log: &Log, from_offset: i64) -> Result<(), SnapshotError> {
        let mut next = from_offset.max(log.log_start_offset());
        while next < log.log_end_offset() {
            let read = log.read(next, REPLAY_READ_BYTES)?;
            if read.batches.is_empty() {
                break;
            }
            for batch in &read.batches {
                if batch.last_offset() >= next {
                    if let Some(done) = self.apply_batch(batch)
                        && done.is_aborted
                    {
                        let last_stable_offset = self.last_stable_offset_of(&done);
                        self.replayed_aborted
                            .push(krust_log::txn_index::AbortedTxn {
                                producer_id: done.producer_id,
                                first_offset: done.first_offset,
                                last_offset: done.last_offset,
                                last_stable_offset,
                            });
                    }
                    next = batch.next_offset();
                }
            }
        }
        self.last_map_offset = self.last_map_offset.max(next);
        Ok(())
    }
}

fn is_expired(entry: &ProducerStateEntry, now_ms: i64, expiration_ms: i64) -> bool {
    entry.current_txn_first_offset.is_none()
        && now_ms.saturating_sub(entry.last_timestamp) >= expiration_ms
}

fn remove_file(path: &Path) -> Result<(), SnapshotError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SnapshotError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Producer snapshots in `dir`, sorted by offset.
///
/// # Errors
/// [`SnapshotError::Io`] if the directory cannot be listed.
pub fn list_snapshots(dir: &Path) -> Result<Vec<(i64, PathBuf)>, SnapshotError> {
    let io_err = |source| SnapshotError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        if let Some(offset) = name
            .to_str()
            .and_then(|n| parse_offset_file_name(n, PRODUCER_SNAPSHOT_FILE_SUFFIX))
        {
            out.push((offset, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Deletes producer snapshots below `offset` (Kafka's `deleteSnapshotsBefore`).
///
/// # Errors
/// [`SnapshotError::Io`].
pub fn delete_snapshots_before(dir: &Path, offset: i64) -> Result<usize, SnapshotError> {
    let mut deleted = 0;
    for (snapshot_offset, path) in list_snapshots(dir)? {
        if snapshot_offset < offset {
            remove_file(&path)?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Encodes a version-1 snapshot of `entries`.
#[must_use]
pub fn encode_snapshot(entries: &[SnapshotEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRIES_OFFSET + 4 + entries.len() * ENTRY_BYTES);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
    out.extend_from_slice(&count.to_be_bytes());
    for e in entries.iter().take(usize::try_from(count).unwrap_or(0)) {
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.producer_epoch.to_be_bytes());
        out.extend_from_slice(&e.last_sequence.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.offset_delta.to_be_bytes());
        out.extend_from_slice(&e.timestamp.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
    }
    // `out` holds at least the 10 header bytes written above, so both slices are in range.
    let crc = crc32c::crc32c(&out[ENTRIES_OFFSET..]);
    out[CRC_OFFSET..ENTRIES_OFFSET].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Decodes a version-1 snapshot, checking version, CRC-32C and lengths.
///
/// # Errors
/// A description of the first defect.
pub fn decode_snapshot(bytes: &[u8]) -> Result<Vec<SnapshotEntry>, String> {
    let mut r = Reader { buf: bytes };
    let version = r.i16()?;
    if version != SNAPSHOT_VERSION {
        return Err(format!("unknown snapshot version {version}"));
    }
    let stored = r.u32()?;
    let computed = crc32c::crc32c(r.buf);
    if stored != computed {
        return Err(format!(
            "stored CRC {stored:#010x}, computed {computed:#010x}"
        ));
    }
    let count = r.i32()?;
    let count = usize::try_from(count).map_err(|_| format!("negative entry count {count}"))?;
    if r.buf.len() != count.saturating_mul(ENTRY_BYTES) {
        return Err(format!(
            "{count} entries need {} bytes, have {}",
            count.saturating_mul(ENTRY_BYTES),
            r.buf.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(SnapshotEntry {
            producer_id: r.i64()?,
            producer_epoch: r.i16()?,
            last_sequence: r.i32()?,
            last_offset: r.i64()?,
            offset_delta: r.i32()?,
            timestamp: r.i64()?,
            coordinator_epoch: r.i32()?,
            current_txn_first_offset: r.i64()?,
        });
    }
    Ok(out)
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let Some((head, rest)) = self.buf.split_first_chunk::<N>() else {
            return Err(format!(
                "cut short: need {N} bytes, have {}",
                self.buf.len()
            ));
        };
        self.buf = rest;
        Ok(*head)
    }
    fn i16(&mut self) -> Result<i16, String> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.take().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_be_bytes)
    }
}
