//! [`TxnMetadata`]: what the coordinator knows of one transactional id, and the
//! [`TxnTransit`] a state change writes before it takes effect (Kafka's
//! `TransactionMetadata` / `TxnTransitMetadata`).

use std::collections::BTreeSet;

use crate::TopicPartition;
use crate::records::TxnLogValue;
use crate::state::TxnState;

/// `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Whether no further epoch may be handed out for a producer id: Kafka keeps `Short.MAX_VALUE`
/// for the coordinator's own fencing bump.
#[must_use]
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    /// The id.
    pub transactional_id: String,
    /// Current producer id.
    pub producer_id: i64,
    /// The producer id before the last rotation (memory only; KIP-360 retries).
    pub last_producer_id: i64,
    /// Current producer epoch (−1 for an id just created).
    pub producer_epoch: i16,
    /// The epoch before the last client-requested bump (memory only; KIP-360 retries).
    pub last_producer_epoch: i16,
    /// The producer's `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// Current state.
    pub state: TxnState,
    /// Partitions of the open (or completing) transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the first partition was added, −1 when no transaction was started.
    pub start_ms: i64,
    /// Last state change (for `transactional.id.expiration.ms`).
    pub last_update_ms: i64,
    /// The state being written, if any: requests meanwhile get CONCURRENT_TRANSACTIONS.
    pub pending: Option<TxnState>,
    /// A fencing bump whose write failed: the next fence does not bump again.
    pub has_failed_epoch_fence: bool,
}

/// A state change waiting for its `__transaction_state` record to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTransit {
    /// New producer id.
    pub producer_id: i64,
    /// The producer id before this change.
    pub last_producer_id: i64,
    /// New epoch.
    pub producer_epoch: i16,
    /// New last epoch.
    pub last_producer_epoch: i16,
    /// New timeout.
    pub timeout_ms: i32,
    /// New state.
    pub state: TxnState,
    /// New partition set.
    pub partitions: BTreeSet<TopicPartition>,
    /// New start time.
    pub start_ms: i64,
    /// New last update time.
    pub last_update_ms: i64,
}

impl TxnTransit {
    /// The `TransactionLogValue` that records it.
    #[must_use]
    pub fn log_value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: self.partitions.clone(),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
        }
    }
}

impl TxnMetadata {
    /// A new id: Empty with no epoch yet, as Kafka creates it before its first bump.
    #[must_use]
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            last_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            pending: None,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a loaded record describes (the last ids and epochs are not stored).
    #[must_use]
    pub fn from_log(transactional_id: &str, value: TxnLogValue) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: value.producer_id,
            last_producer_id: NO_PRODUCER_ID,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: value.timeout_ms,
            state: value.state,
            partitions: value.partitions,
            start_ms: value.start_ms,
            last_update_ms: value.last_update_ms,
            pending: None,
            has_failed_epoch_fence: false,
        }
    }

    /// Whether the epoch of the current producer id is used up.
    #[must_use]
    pub fn epoch_exhausted(&self) -> bool {
        epoch_exhausted(self.producer_epoch)
    }

    /// Marks `transit` pending and returns it.
    ///
    /// # Panics
    /// If a transition is already pending or `transit.state` may not follow the current state:
    /// callers check both first (a broken check is a bug, not bad input).
    fn prepare(&mut self, transit: TxnTransit) -> TxnTransit {
        assert!(
            self.pending.is_none(),
            "{}: transition to {:?} while {:?} is pending",
            self.transactional_id,
            transit.state,
            self.pending
        );
        assert!(
            transit.state.may_follow(self.state),
            "{}: illegal transition {:?} -> {:?}",
            self.transactional_id,
            self.state,
            transit.state
        );
        self.pending = Some(transit.state);
        transit
    }

    #[allow(clippy::too_many_arguments)] // one per field of the transit, as Kafka's
    fn transit(
        &self,
        state: TxnState,
        producer_id: i64,
        producer_epoch: i16,
        last_producer_epoch: i16,
        timeout_ms: i32,
        partitions: BTreeSet<TopicPartition>,
        start_ms: i64,
        last_update_ms: i64,
    ) -> TxnTransit {
        TxnTransit {
            producer_id,
            last_producer_id: self.producer_id,
            producer_epoch,
            last_producer_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            last_update_ms,
        }
    }

    /// The epoch a fence moves to (timed-out transaction, or InitProducerId while Ongoing):
    /// one more, unless an earlier fence's write failed (that bumped epoch was never returned
    /// to anyone). `None` at `i16::MAX`. Kafka's `prepareFenceProducerEpoch`; the
    /// PrepareEpochFence state it sets is cleared at once by the abort that follows, so krust
    /// goes straight to that abort.
    #[must_use]
    pub fn fence_epoch(&self) -> Option<i16> {
        if self.has_failed_epoch_fence {
            Some(self.producer_epoch)
        } else {
            self.producer_epoch.checked_add(1)
        }
    }

    /// InitProducerId's bump (Kafka's `prepareIncrementProducerEpoch`).
    ///
    /// # Errors
    /// PRODUCER_FENCED when `expected_epoch` is neither the current nor the last epoch.
    pub fn prepare_increment_epoch(
        &mut self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<TxnTransit, crate::TxnError> {
        debug_assert!(!self.epoch_exhausted());
        let bumped = self.producer_epoch + 1;
        let (epoch, last) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            // A retry of a bump whose answer was lost: the same epoch again.
            Some(e) if e == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(crate::TxnError::ProducerFenced),
        };
        let t = self.transit(
            TxnState::Empty,
            self.producer_id,
            epoch,
            last,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        );
        Ok(self.prepare(t))
    }

    /// InitProducerId with an exhausted epoch: a new producer id at epoch 0.
    pub fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> TxnTransit {
        let last = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        let t = self.transit(
            TxnState::Empty,
            new_producer_id,
            0,
            last,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        );
        self.prepare(t)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with the union of partitions.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> TxnTransit {
        let start_ms = match self.state {
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => now_ms,
            _ => self.start_ms,
        };
        let partitions = self.partitions.union(added).cloned().collect();
        let t = self.transit(
            TxnState::Ongoing,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            partitions,
            start_ms,
            now_ms,
        );
        self.prepare(t)
    }

    /// EndTxn: PrepareCommit or PrepareAbort.
    pub fn prepare_abort_or_commit(&mut self, state: TxnState, now_ms: i64) -> TxnTransit {
        let t = self.transit(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            self.partitions.clone(),
            self.start_ms,
            now_ms,
        );
        self.prepare(t)
    }

    /// Every marker written: CompleteCommit / CompleteAbort with no partitions.
    pub fn prepare_complete(&mut self, now_ms: i64) -> TxnTransit {
        let state = if self.state == TxnState::PrepareCommit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        self.has_failed_epoch_fence = false;
        let t = self.transit(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            BTreeSet::new(),
            self.start_ms,
            now_ms,
        );
        self.prepare(t)
    }

    /// Expiry: Dead (a tombstone is written).
    pub fn prepare_dead(&mut self) -> TxnTransit {
        let t = self.transit(
            TxnState::Dead,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            BTreeSet::new(),
            self.start_ms,
            self.last_update_ms,
        );
        self.prepare(t)
    }

    /// The pending transition's record committed: take it over.
    ///
    /// # Panics
    /// If `transit` is not the pending transition (a bug of the caller).
    pub fn complete(&mut self, transit: &TxnTransit) {
        assert_eq!(
            self.pending,
            Some(transit.state),
            "{}: completing a transition that is not pending",
            self.transactional_id
        );
        self.pending = None;
        if transit.state == TxnState::Empty {
            // Only InitProducerId moves the producer id (Kafka keeps the last one otherwise).
            self.last_producer_id = transit.last_producer_id;
        }
        self.producer_id = transit.producer_id;
        self.producer_epoch = transit.producer_epoch;
        self.last_producer_epoch = transit.last_producer_epoch;
        self.timeout_ms = transit.timeout_ms;
        self.state = transit.state;
        self.partitions.clone_from(&transit.partitions);
        self.start_ms = transit.start_ms;
        self.last_update_ms = transit.last_update_ms;
    }
}
