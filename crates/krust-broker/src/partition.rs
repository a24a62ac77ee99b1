//! One partition replica on this broker (Kafka 3.9 `Partition`, the parts of `UnifiedLog` and
//! `Replica` it uses).
//!
//! A [`Partition`] wraps a [`krust_log::Log`] with the leader epoch, the high watermark, the
//! ISR as the metadata image last said, the producer state, and — on the leader — each
//! follower's fetch state. ISR changes are not made here: in KRaft they go to the controller
//! (AlterPartition) and come back through the metadata image ([`Partition::update_isr`]);
//! [`Partition::out_of_sync_replicas`] and [`Partition::isr_expansion_candidates`] say what to
//! propose.
//!
//! # High watermark (leader)
//! `HW = min(leader LEO, LEO of every ISR member and of every caught-up follower that is not
//! yet in the ISR)` — Kafka's `maybeIncrementLeaderHW`, where a follower that has caught up
//! holds the HW back so it can join the ISR. While an ISR change is with the controller
//! ([`Partition::begin_isr_change`]) the proposed members count as ISR too (Kafka's maximal
//! ISR: an expansion holds the HW at once, a shrink frees it only once committed through
//! [`Partition::update_isr`]). The leader's HW never moves backwards, and does
//! not move at all while the ISR is below the effective `min.insync.replicas` (capped by the
//! replica count). Every follower counts as ISR-eligible (fencing and controlled shutdown
//! come with the metadata wiring). A
//! follower is **caught up** (Kafka's `ReplicaState.isCaughtUp`) if its LEO equals the leader's
//! or its `last_caught_up_time_ms` is within `replica.lag.time.max.ms`; that time advances to a
//! fetch's time when the fetch reached the leader's LEO at that moment, or to the previous
//! fetch's time when this fetch reached the leader LEO seen at that previous fetch.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use krust_log::batch::{MAX_BATCH_BYTES, NO_TIMESTAMP, parse_all};
use krust_log::leader_epoch::{EpochEndOffset, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
use krust_log::log::{LATEST_TIMESTAMP, MAX_TIMESTAMP};
use krust_log::txn_index::AbortedTxn;
use krust_log::{Log, LogError, RecordBatch, TimestampAndOffset, TimestampType};
use tracing::info;

use crate::error::PartitionError;
use crate::producer_state::{
    AppendCheck, DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerBatch, ProducerStateManager,
};

/// `replica.lag.time.max.ms` default.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// Partition-level configs (Kafka's names, `.` → `_`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    /// `min.insync.replicas` (1): smallest ISR an acks=all produce is accepted with.
    pub min_insync_replicas: i32,
    /// `replica.lag.time.max.ms` (30000).
    pub replica_lag_time_max_ms: i64,
    /// `message.timestamp.before.max.ms` (`i64::MAX`): how far in the past a CreateTime
    /// record may be.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (`i64::MAX`): how far in the future it may be.
    pub message_timestamp_after_max_ms: i64,
    /// `producer.id.expiration.ms` (86400000).
    pub producer_id_expiration_ms: i64,
    /// `transaction.partition.verification.enable` (true, KIP-890 part 1): the first
    /// transactional batch of a producer epoch from a client must carry the
    /// [`VerificationGuard`] of a verification with the transaction coordinator.
    pub transaction_verification_enable: bool,
}

/// A verification in flight for one producer (Kafka's `VerificationStateEntry`).
#[derive(Debug, Clone, Copy)]
struct VerificationEntry {
    guard: VerificationGuard,
    /// The newest producer epoch seen verifying.
    epoch: i16,
    /// The lowest first sequence seen verifying in that epoch: until the transaction's first
    /// batch is written, a client batch starting above it is OUT_OF_ORDER_SEQUENCE_NUMBER.
    lowest_sequence: i32,
}

/// Who writes a batch (Kafka's `AppendOrigin`, the leader-side kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppendOrigin {
    /// A producer's Produce: duplicates and sequences are checked.
    Client,
    /// A coordinator of this broker: only the producer epoch is checked.
    Coordinator,
}

/// Proof that the transaction coordinator confirmed a partition is part of a producer's
/// transaction (Kafka's `VerificationGuard`): handed out by
/// [`Partition::maybe_start_txn_verification`] before asking the coordinator, presented to
/// [`Partition::append_client_records`] after its answer. A marker or the first
/// transactional batch written meanwhile invalidates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            min_insync_replicas: 1,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: i64::MAX,
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            transaction_verification_enable: true,
        }
    }
}

/// Fetch/ListOffsets isolation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Up to the high watermark.
    ReadUncommitted,
    /// Up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    /// From the wire (`0` uncommitted, `1` committed); other values read uncommitted.
    #[must_use]
    pub fn from_wire(value: i8) -> Self {
        if value == 1 {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        }
    }
}

/// Who reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetcher {
    /// A consumer: reads up to the HW or LSO.
    Consumer {
        /// Reading committed or uncommitted data.
        isolation: IsolationLevel,
    },
    /// A follower replica: reads up to the LEO; the read updates its fetch state.
    Follower {
        /// Its broker id.
        replica_id: i32,
    },
}

/// The leader's view of one follower (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// Its log end offset, `-1` until it fetched in this leader epoch.
    pub log_end_offset: i64,
    /// Last time it was caught up to the leader's LEO.
    pub last_caught_up_time_ms: i64,
    /// Leader LEO at its previous fetch.
    pub last_fetch_leader_log_end_offset: i64,
    /// Time of its previous fetch.
    pub last_fetch_time_ms: i64,
    /// Its log start offset as its last fetch said (Fetch v5+), `-1` until known: bounds
    /// the partition's low watermark (DeleteRecords).
    pub log_start_offset: i64,
}

impl FollowerState {
    fn is_caught_up(&self, leader_log_end_offset: i64, now_ms: i64, max_lag_ms: i64) -> bool {
        self.log_end_offset == leader_log_end_offset
            || now_ms.saturating_sub(self.last_caught_up_time_ms) <= max_lag_ms
    }
}

/// What a leader append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAppend {
    /// Offset of the first record (`-1` if nothing was appended).
    pub base_offset: i64,
    /// Offset of the last record (`-1` if nothing was appended).
    pub last_offset: i64,
    /// LogAppendTime stamped, or the original batch's timestamp for a duplicate; `-1` else.
    pub log_append_time_ms: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// The batch repeated an earlier one: nothing was written, offsets are the original's.
    pub duplicate: bool,
    /// acks=all: answer once the high watermark reaches this offset (see
    /// [`Partition::check_enough_replicas_reach_offset`]). `None` for acks 0/1.
    pub wait_for_high_watermark: Option<i64>,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    /// Whole batches.
    pub records: Bytes,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset.
    pub last_stable_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Log end offset.
    pub log_end_offset: i64,
    /// For a follower whose log diverges: where the leader's log for its last fetched epoch
    /// ends (it must truncate; no records are returned).
    pub diverging_epoch: Option<EpochEndOffset>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Leader {
        followers: BTreeMap<i32, FollowerState>,
    },
    Follower {
        leader_id: Option<i32>,
    },
}

/// One partition replica; see the module doc.
#[derive(Debug)]
pub struct Partition {
    local_broker_id: i32,
    log: Log,
    producer_state: ProducerStateManager,
    config: PartitionConfig,
    leader_epoch: i32,
    leader_epoch_start_offset: i64,
    replicas: Vec<i32>,
    isr: BTreeSet<i32>,
    /// An ISR change sent to the controller and not answered yet (Kafka's
    /// `PendingExpandIsr`/`PendingShrinkIsr`): the HW counts the *maximal* ISR meanwhile.
    pending_isr: Option<BTreeSet<i32>>,
    /// Brokers the metadata says are fenced or in controlled shutdown (Kafka's
    /// `isReplicaIsrEligible`): a caught-up follower outside the ISR holds the HW back only
    /// when it could join the ISR, so a broker that just shut down does not stall acks=all.
    ineligible_replicas: BTreeSet<i32>,
    role: Role,
    high_watermark: i64,
    /// The producer snapshot taken at the latest roll (path, bytes), for the roll's background
    /// flush to write ([`Partition::take_roll_flush`]).
    roll_snapshot: Option<(std::path::PathBuf, Vec<u8>)>,
    /// Verifications in flight with the transaction coordinator, by producer id: (guard,
    /// producer epoch) (Kafka's `VerificationStateEntry`).
    verification_guards: BTreeMap<i64, VerificationEntry>,
    next_verification_guard: u64,
}

/// A log-compaction pass planned under the partition lock ([`Partition::plan_compaction`]),
/// to be prepared without it ([`krust_log::Cleaner::prepare`]) and committed under it again
/// ([`Partition::finish_compaction`]).
#[derive(Debug)]
pub struct CompactionPlan {
    /// What the pass reads.
    pub snapshot: krust_log::cleaner::CleaningSnapshot,
    /// Each active idempotent producer's last batch's last offset: that batch keeps its header
    /// (its sequence survives).
    pub active_producer_last_offsets: std::collections::HashMap<i64, i64>,
}

impl Partition {
    /// A follower of no leader over an opened `log`, with the checkpointed high watermark
    /// (clamped to the log) and producer state rebuilt from snapshot + log at `now_ms`.
    ///
    /// # Errors
    /// [`PartitionError::Snapshot`] if producer state cannot be rebuilt.
    pub fn open(
        local_broker_id: i32,
        log: Log,
        config: PartitionConfig,
        checkpointed_high_watermark: i64,
        now_ms: i64,
    ) -> Result<Partition, PartitionError> {
        let mut log = log;
        let mut producer_state =
            ProducerStateManager::load(&log, config.producer_id_expiration_ms, now_ms)?;
        index_replayed_aborted(&mut log, &mut producer_state)?;
        let high_watermark =
            checkpointed_high_watermark.clamp(log.log_start_offset(), log.log_end_offset());
        let mut partition = Partition {
            local_broker_id,
            log,
            producer_state,
            config,
            leader_epoch: UNDEFINED_EPOCH,
            leader_epoch_start_offset: UNDEFINED_EPOCH_OFFSET,
            replicas: Vec::new(),
            isr: BTreeSet::new(),
            pending_isr: None,
            ineligible_replicas: BTreeSet::new(),
            role: Role::Follower { leader_id: None },
            high_watermark,
            roll_snapshot: None,
            verification_guards: BTreeMap::new(),
            next_verification_guard: 1,
        };
        partition.log.set_high_watermark(high_watermark);
        Ok(partition)
    }

    /// The log.
    #[must_use]
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Plans a log-compaction pass (the broker's log cleaner, `server/cleaner.rs`, under the
    /// partition lock; cheap). `checkpoint` is the partition's entry in
    /// `cleaner-offset-checkpoint`. `None` when the dirty part is below
    /// `min.cleanable.dirty.ratio` (and not overdue by `max.compaction.lag.ms`).
    ///
    /// # Errors
    /// [`LogError`] reading an index.
    pub fn plan_compaction(
        &self,
        checkpoint: Option<i64>,
        now_ms: i64,
    ) -> Result<Option<CompactionPlan>, LogError> {
        let to_clean = self
            .log
            .log_to_clean(checkpoint, self.last_stable_offset(), now_ms);
        if !to_clean.needs_cleaning(self.log.config().min_cleanable_dirty_ratio) {
            return Ok(None);
        }
        let active_producer_last_offsets = self
            .producer_state
            .entries()
            .filter_map(|e| e.batches.back().map(|b| (e.producer_id, b.last_offset)))
            .collect();
        Ok(Some(CompactionPlan {
            snapshot: self.log.cleaning_snapshot(&to_clean)?,
            active_producer_last_offsets,
        }))
    }

    /// Swaps a pass prepared without the lock into the log (under the partition lock), after
    /// [`krust_log::Cleaner::commit`]'s revalidation. Compaction never changes offsets, the log
    /// start or the log end, so the high watermark, epochs and producer state stay valid.
    /// Returns the pass's outcome: store its next dirty offset.
    ///
    /// # Errors
    /// [`krust_log::CleanerError`]: after [`krust_log::CleanerError::Log`] the log should be
    /// reopened before it is cleaned again.
    pub fn finish_compaction(
        &mut self,
        cleaner: &mut krust_log::Cleaner,
        prepared: krust_log::cleaner::PreparedCleaning,
    ) -> Result<krust_log::cleaner::CleanOutcome, krust_log::CleanerError> {
        cleaner.commit(&mut self.log, prepared)
    }

    /// The producer state.
    #[must_use]
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producer_state
    }

    /// Current leader epoch (`-1` before the first leader change).
    #[must_use]
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// High watermark.
    #[must_use]
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Log end offset.
    #[must_use]
    pub fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// Log start offset.
    #[must_use]
    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// Last stable offset (Kafka's `UnifiedLog.lastStableOffset`): the HW, or the first
    /// offset of an open transaction (or of a completed one whose marker is not yet below
    /// the HW) when that is lower.
    #[must_use]
    pub fn last_stable_offset(&self) -> i64 {
        self.producer_state
            .first_unstable_offset(self.high_watermark)
            .map_or(self.high_watermark, |o| o.min(self.high_watermark))
    }

    /// Whether this replica leads the partition.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader { .. })
    }

    /// The ISR as last set by the metadata.
    #[must_use]
    pub fn isr(&self) -> &BTreeSet<i32> {
        &self.isr
    }

    /// The leader's view of `replica_id`.
    #[must_use]
    pub fn follower_state(&self, replica_id: i32) -> Option<FollowerState> {
        match &self.role {
            Role::Leader { followers } => followers.get(&replica_id).copied(),
            Role::Follower { .. } => None,
        }
    }

    /// Becomes leader in `leader_epoch` (Kafka's `makeLeader`): a new epoch starts at the log
    /// end offset in the leader-epoch cache and resets follower states (ISR members count as
    /// caught up now, others never were); the same epoch again only updates replicas and ISR.
    ///
    /// # Errors
    /// [`PartitionError::Log`] if the leader-epoch checkpoint cannot be written.
    pub fn make_leader(
        &mut self,
        leader_epoch: i32,
        replicas: &[i32],
        isr: &[i32],
        now_ms: i64,
    ) -> Result<(), PartitionError> {
        let log_end = self.log.log_end_offset();
        let new_epoch = leader_epoch > self.leader_epoch || !self.is_leader();
        if new_epoch {
            self.log.assign_epoch_start_offset(leader_epoch, log_end)?;
            self.leader_epoch_start_offset = log_end;
            // The log directory's name is the topic-partition (`orders-0`).
            let partition = self
                .log
                .dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            info!(
                local_broker_id = self.local_broker_id,
                partition = %partition,
                leader_epoch,
                log_end,
                "became leader"
            );
        }
        self.leader_epoch = self.leader_epoch.max(leader_epoch);
        self.replicas = replicas.to_vec();
        self.isr = isr.iter().copied().collect();
        // The metadata is the committed state: a proposal in flight is answered or moot.
        self.pending_isr = None;
        // Same epoch (only the replica set or ISR changed): continuing followers keep their
        // fetch state, as in Kafka's makeLeader.
        let previous = match std::mem::replace(&mut self.role, Role::Follower { leader_id: None }) {
            Role::Leader { followers } if !new_epoch => followers,
            _ => BTreeMap::new(),
        };
        let followers = replicas
            .iter()
            .filter(|&&r| r != self.local_broker_id)
            .map(|&r| {
                let caught_up = if self.isr.contains(&r) { now_ms } else { 0 };
                let state = previous.get(&r).copied().unwrap_or(FollowerState {
                    log_end_offset: -1,
                    last_caught_up_time_ms: caught_up,
                    last_fetch_leader_log_end_offset: -1,
                    last_fetch_time_ms: 0,
                    log_start_offset: -1,
                });
                (r, state)
            })
            .collect();
        self.role = Role::Leader { followers };
        self.maybe_increment_high_watermark(now_ms);
        Ok(())
    }

    /// Becomes a follower of `leader_id` in `leader_epoch`.
    pub fn make_follower(
        &mut self,
        leader_epoch: i32,
        leader_id: Option<i32>,
        replicas: &[i32],
        isr: &[i32],
    ) {
        info!(
            local_broker_id = self.local_broker_id,
            leader_epoch,
            ?leader_id,
            "became follower"
        );
        self.leader_epoch = leader_epoch;
        self.leader_epoch_start_offset = UNDEFINED_EPOCH_OFFSET;
        self.replicas = replicas.to_vec();
        self.isr = isr.iter().copied().collect();
        self.pending_isr = None;
        self.role = Role::Follower { leader_id };
    }

    /// The ISR changed in the metadata (an AlterPartition committed). The HW may advance.
    pub fn update_isr(&mut self, isr: &[i32], now_ms: i64) {
        self.isr = isr.iter().copied().collect();
        self.pending_isr = None;
        self.maybe_increment_high_watermark(now_ms);
    }

    /// Leader: records that `proposed` was sent to the controller (AlterPartition). Until
    /// [`Partition::update_isr`], [`Partition::abort_isr_change`] or a leader/follower
    /// change, the HW treats the union of the committed and proposed ISR as in sync
    /// (Kafka's maximal ISR: an expansion counts at once, a shrink only once committed).
    /// Returns `false` (and changes nothing) if a change is already in flight or this
    /// replica does not lead.
    pub fn begin_isr_change(&mut self, proposed: &[i32]) -> bool {
        if !self.is_leader() || self.pending_isr.is_some() {
            return false;
        }
        self.pending_isr = Some(proposed.iter().copied().collect());
        true
    }

    /// The controller refused the proposal for good: back to the committed ISR.
    pub fn abort_isr_change(&mut self) {
        self.pending_isr = None;
    }

    /// The ISR proposal in flight, if any.
    #[must_use]
    pub fn pending_isr(&self) -> Option<&BTreeSet<i32>> {
        self.pending_isr.as_ref()
    }

    /// Committed ISR plus a proposal in flight (Kafka's `maximalIsr`).
    #[must_use]
    pub fn maximal_isr(&self) -> BTreeSet<i32> {
        match &self.pending_isr {
            Some(pending) => self.isr.union(pending).copied().collect(),
            None => self.isr.clone(),
        }
    }

    /// Follower: after a fetch, takes the leader's HW bounded by the LEO (Kafka's
    /// `updateHighWatermark`) and advances the log start offset to the leader's (never
    /// beyond the new HW; Kafka's `maybeIncrementLogStartOffset`).
    ///
    /// # Errors
    /// [`PartitionError::Log`].
    pub fn update_follower_offsets(
        &mut self,
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) -> Result<(), PartitionError> {
        self.high_watermark = leader_high_watermark.clamp(0, self.log.log_end_offset());
        self.log.set_high_watermark(self.high_watermark);
        let start = leader_log_start_offset.min(self.high_watermark);
        if start > self.log.log_start_offset() {
            self.log.delete_records(start)?;
            self.producer_state
                .on_log_start_offset_incremented(self.log.log_start_offset());
        }
        Ok(())
    }

    /// Follower: empties the log and restarts it at `offset` (the leader's log start is past
    /// our end after OFFSET_OUT_OF_RANGE; Kafka's `truncateFullyAndStartAt`).
    ///
    /// # Errors
    /// [`PartitionError::Log`], [`PartitionError::Snapshot`].
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: i64,
        now_ms: i64,
    ) -> Result<(), PartitionError> {
        self.log.truncate_fully_and_start_at(offset)?;
        self.producer_state =
            ProducerStateManager::load(&self.log, self.config.producer_id_expiration_ms, now_ms)?;
        index_replayed_aborted(&mut self.log, &mut self.producer_state)?;
        self.high_watermark = offset;
        self.log.set_high_watermark(offset);
        Ok(())
    }

    fn check_current_leader_epoch(
        &self,
        current_leader_epoch: Option<i32>,
    ) -> Result<(), PartitionError> {
        match current_leader_epoch {
            Some(e) if e != UNDEFINED_EPOCH && e < self.leader_epoch => {
                Err(PartitionError::FencedLeaderEpoch {
                    request_epoch: e,
                    current_epoch: self.leader_epoch,
                })
            }
            Some(e) if e != UNDEFINED_EPOCH && e > self.leader_epoch => {
                Err(PartitionError::UnknownLeaderEpoch {
                    request_epoch: e,
                    current_epoch: self.leader_epoch,
                })
            }
            _ => Ok(()),
        }
    }

    /// Kafka's `effectiveMinIsr`: `min.insync.replicas` capped by the replica count.
    fn effective_min_isr(&self) -> usize {
        let replica_count = match &self.role {
            Role::Leader { followers } => followers.len() + 1,
            Role::Follower { .. } => self.replicas.len().max(1),
        };
        usize::try_from(self.config.min_insync_replicas)
            .unwrap_or(0)
            .min(replica_count)
    }

    /// The ISR is smaller than the effective `min.insync.replicas` (Kafka's
    /// `isUnderMinIsr`): acks=all is refused and the HW does not advance.
    #[must_use]
    pub fn is_under_min_isr(&self) -> bool {
        self.is_leader() && self.isr.len() < self.effective_min_isr()
    }

    fn require_leader(&self) -> Result<(), PartitionError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(PartitionError::NotLeaderOrFollower)
        }
    }

    /// Appends a produce request's records as leader (Kafka's `appendRecordsToLeader`):
    /// acks=all needs an ISR of at least `min.insync.replicas`; every batch is parsed and
    /// CRC-checked, size-checked against `max.message.bytes`, its record count checked against
    /// its offsets, CreateTime timestamps checked against
    /// `message.timestamp.before/after.max.ms`, and idempotent batches checked against the
    /// producer state. A duplicate returns the original offsets and writes nothing. Nothing is
    /// written if any check fails.
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`], [`PartitionError::NotEnoughReplicas`],
    /// [`PartitionError::InvalidTimestamp`], [`PartitionError::Producer`],
    /// [`PartitionError::Log`] (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD, storage).
    pub fn append_as_leader(
        &mut self,
        records: Bytes,
        required_acks: i16,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        self.append_as_leader_from(records, required_acks, now_ms, AppendOrigin::Client)
    }

    fn append_as_leader_from(
        &mut self,
        records: Bytes,
        required_acks: i16,
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<LeaderAppend, PartitionError> {
        self.require_leader()?;
        if required_acks == -1 && self.is_under_min_isr() {
            return Err(PartitionError::NotEnoughReplicas {
                isr_size: self.isr.len(),
                min_isr: self.config.min_insync_replicas,
            });
        }
        let batches = parse_all(records, MAX_BATCH_BYTES)
            .map_err(|(index, source)| LogError::InvalidBatch { index, source })?;
        let wait = |last_offset: i64| (required_acks == -1).then_some(last_offset + 1);
        if batches.is_empty() {
            return Ok(LeaderAppend {
                base_offset: -1,
                last_offset: -1,
                log_append_time_ms: NO_TIMESTAMP,
                log_start_offset: self.log.log_start_offset(),
                duplicate: false,
                wait_for_high_watermark: None,
            });
        }
        for (index, batch) in batches.iter().enumerate() {
            if batch.is_control() {
                return Err(PartitionError::InvalidRecord {
                    index,
                    reason: "clients are not allowed to write control records",
                });
            }
            if batch.producer_id() >= 0 && batch.base_sequence() < 0 {
                return Err(PartitionError::InvalidRecord {
                    index,
                    reason: "idempotent batch with a negative base sequence",
                });
            }
        }
        self.validate_records(&batches, now_ms)?;
        let headers: Vec<ProducerBatch> = batches.iter().map(ProducerBatch::of).collect();
        let lowest: BTreeMap<i64, i32> = self
            .verification_guards
            .iter()
            .map(|(pid, e)| (*pid, e.lowest_sequence))
            .collect();
        if origin == AppendOrigin::Coordinator {
            self.producer_state.check_coordinator_append(&headers)?;
        } else if let AppendCheck::Duplicate { original, .. } = self
            .producer_state
            .check_client_append_verifying(&headers, &lowest)?
        {
            return Ok(LeaderAppend {
                base_offset: original.first_offset(),
                last_offset: original.last_offset,
                log_append_time_ms: original.timestamp,
                log_start_offset: self.log.log_start_offset(),
                duplicate: true,
                wait_for_high_watermark: wait(original.last_offset),
            });
        }
        let active_base = self.active_segment_base();
        let info = self
            .log
            .append_as_leader(batches, self.leader_epoch, now_ms)?;
        self.apply_written(&info.batches, active_base);
        self.maybe_increment_high_watermark(now_ms);
        Ok(LeaderAppend {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            log_append_time_ms: info.log_append_time_ms.unwrap_or(NO_TIMESTAMP),
            log_start_offset: self.log.log_start_offset(),
            duplicate: false,
            wait_for_high_watermark: wait(info.last_offset),
        })
    }

    /// KIP-890 part 1 (Kafka's `UnifiedLog.maybeStartTransactionVerification`): `None` when
    /// the producer already has a transaction open here in `producer_epoch` (no verification
    /// needed), else the guard to present with the append once the coordinator confirmed the
    /// partition is in the transaction (an existing guard is reused unless the epoch is newer).
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`].
    pub fn maybe_start_txn_verification(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        sequence: i32,
    ) -> Result<Option<VerificationGuard>, PartitionError> {
        self.require_leader()?;
        if self.has_ongoing_txn(producer_id, producer_epoch) {
            return Ok(None);
        }
        // Kafka's `maybeCreateVerificationStateEntry` + `maybeUpdateLowestSequenceAndEpoch`:
        // one guard per producer until its transaction starts here; a lower sequence of the
        // same epoch, or a newer epoch, moves the lowest sequence.
        if let Some(entry) = self.verification_guards.get_mut(&producer_id) {
            if producer_epoch == entry.epoch && sequence < entry.lowest_sequence {
                entry.lowest_sequence = sequence;
            }
            if producer_epoch > entry.epoch {
                entry.epoch = producer_epoch;
                entry.lowest_sequence = sequence;
            }
            return Ok(Some(entry.guard));
        }
        let guard = VerificationGuard(self.next_verification_guard);
        self.next_verification_guard += 1;
        self.verification_guards.insert(
            producer_id,
            VerificationEntry {
                guard,
                epoch: producer_epoch,
                lowest_sequence: sequence,
            },
        );
        Ok(Some(guard))
    }

    fn has_ongoing_txn(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.producer_state.entry(producer_id).is_some_and(|e| {
            e.current_txn_first_offset.is_some() && e.producer_epoch == producer_epoch
        })
    }

    /// [`Partition::append_as_leader`] for a client's Produce (Kafka's `AppendOrigin.CLIENT`
    /// with `transaction.partition.verification.enable`): a transactional batch of a producer
    /// without an open transaction in its epoch needs `guard`, the one this partition handed
    /// out for the producer's verification, else INVALID_TXN_STATE ("Record was not part of an
    /// ongoing transaction") and nothing is written.
    ///
    /// # Errors
    /// [`PartitionError::InvalidTxnState`], then as [`Partition::append_as_leader`].
    pub fn append_client_records(
        &mut self,
        records: Bytes,
        required_acks: i16,
        guard: Option<VerificationGuard>,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        self.check_verification(&records, guard)?;
        self.append_as_leader(records, required_acks, now_ms)
    }

    /// A group coordinator's write of a TxnOffsetCommit's offsets (Kafka's
    /// `AppendOrigin.COORDINATOR`, acks=-1): the verification rule of
    /// [`Partition::append_client_records`], then [`Partition::append_as_leader`] without the
    /// duplicate and sequence checks (the coordinator writes every batch at sequence 0); a
    /// producer epoch older than the partition's is still INVALID_PRODUCER_EPOCH.
    ///
    /// # Errors
    /// As [`Partition::append_client_records`].
    pub fn append_coordinator_records(
        &mut self,
        records: Bytes,
        guard: Option<VerificationGuard>,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        self.check_verification(&records, guard)?;
        self.append_as_leader_from(records, -1, now_ms, AppendOrigin::Coordinator)
    }

    /// KIP-890: a transactional batch of a producer without an open transaction in its epoch
    /// needs the guard this partition handed out for the producer's verification.
    fn check_verification(
        &self,
        records: &Bytes,
        guard: Option<VerificationGuard>,
    ) -> Result<(), PartitionError> {
        if self.config.transaction_verification_enable {
            self.require_leader()?;
            // Headers only: the append parses and CRC-checks every batch anyway.
            for (pid, epoch) in transactional_producers(records) {
                if self.has_ongoing_txn(pid, epoch) {
                    continue;
                }
                let expected = self.verification_guards.get(&pid).map(|e| e.guard);
                if expected.is_none() || expected != guard {
                    return Err(PartitionError::InvalidTxnState { producer_id: pid });
                }
            }
        }
        Ok(())
    }

    /// Writes a COMMIT or ABORT marker for `producer_id` as leader (Kafka's
    /// `ReplicaManager.appendRecords` of a WriteTxnMarkers request: acks=-1, origin
    /// COORDINATOR). The marker's producer epoch may not be older than the partition's, nor
    /// its coordinator epoch older than the last marker's; a producer the partition does not
    /// know gets its marker written (it ends nothing). The caller answers once the high
    /// watermark reaches [`LeaderAppend::wait_for_high_watermark`].
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`], [`PartitionError::NotEnoughReplicas`],
    /// [`PartitionError::Marker`] (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED),
    /// [`PartitionError::Log`].
    pub fn append_txn_marker_as_leader(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: krust_log::txn_marker::EndTxnMarker,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        self.require_leader()?;
        if self.is_under_min_isr() {
            return Err(PartitionError::NotEnoughReplicas {
                isr_size: self.isr.len(),
                min_isr: self.config.min_insync_replicas,
            });
        }
        self.producer_state
            .check_marker(producer_id, producer_epoch, marker.coordinator_epoch)?;
        let batch = marker.batch(producer_id, producer_epoch, now_ms);
        let active_base = self.active_segment_base();
        let info = self
            .log
            .append_as_leader(vec![batch], self.leader_epoch, now_ms)?;
        self.apply_written(&info.batches, active_base);
        self.maybe_increment_high_watermark(now_ms);
        Ok(LeaderAppend {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            log_append_time_ms: info.log_append_time_ms.unwrap_or(NO_TIMESTAMP),
            log_start_offset: self.log.log_start_offset(),
            duplicate: false,
            wait_for_high_watermark: Some(info.last_offset + 1),
        })
    }

    /// Aborted transactions a read-committed fetch from `fetch_offset` must be told about,
    /// for the whole batches in `records` (Kafka's `LocalLog.addAbortedTransactions`): those
    /// overlapping `[fetch_offset, upper bound)`, where the upper bound is the offset after
    /// the last returned batch. Empty when nothing is returned.
    #[must_use]
    pub fn aborted_transactions(&self, fetch_offset: i64, records: &Bytes) -> Vec<AbortedTxn> {
        let Some(upper) = next_offset_after(records) else {
            return Vec::new();
        };
        self.log.collect_aborted_txns(fetch_offset, upper)
    }

    /// Kafka's `LogValidator` record checks, one allocation-free scan per batch:
    /// - a compacted topic keeps the latest record per key, so a record without one cannot be
    ///   written (`validateKey`; all keyless records of the batch are named);
    /// - a CreateTime record must lie within `message.timestamp.before/after.max.ms`.
    ///
    /// A batch's keyless records are reported before its timestamps. Compressed batches are
    /// inflated and checked record by record, as Kafka does.
    fn validate_records(&self, batches: &[RecordBatch], now_ms: i64) -> Result<(), PartitionError> {
        let compacted = self.log.config().cleanup_policy.compacts();
        let create_time = self.log.config().message_timestamp_type == TimestampType::CreateTime;
        if !compacted && !create_time {
            return Ok(());
        }
        let earliest = now_ms.saturating_sub(self.config.message_timestamp_before_max_ms);
        let latest = now_ms.saturating_add(self.config.message_timestamp_after_max_ms);
        let check = |index: usize, record_index: usize, timestamp: i64| {
            if create_time
                && timestamp != NO_TIMESTAMP
                && (timestamp < earliest || timestamp > latest)
            {
                Err(PartitionError::InvalidTimestamp {
                    index,
                    record_index,
                    timestamp,
                    now_ms,
                })
            } else {
                Ok(())
            }
        };
        for (index, batch) in batches.iter().enumerate() {
            let mut keyless = Vec::new();
            let mut bad_timestamp = None;
            batch
                .scan_records(|record_index, record| {
                    if compacted && !record.has_key {
                        keyless.push(record_index);
                    }
                    if bad_timestamp.is_none() {
                        bad_timestamp = check(index, record_index, record.timestamp).err();
                    }
                })
                .map_err(|source| LogError::InvalidBatch { index, source })?;
            if !keyless.is_empty() {
                let topic_partition = self
                    .log
                    .dir()
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                return Err(PartitionError::RecordsWithoutKey {
                    topic_partition,
                    record_indices: keyless,
                });
            }
            if let Some(e) = bad_timestamp {
                return Err(e);
            }
        }
        Ok(())
    }

    /// For a waiting acks=all produce (Kafka's `checkEnoughReplicasReachOffset`): `None` while
    /// the HW is below `required_offset`, then `Some(Ok(()))`, or
    /// `Some(Err(NotEnoughReplicasAfterAppend))` if the ISR shrank below
    /// `min.insync.replicas` meanwhile, or `Some(Err(NotLeaderOrFollower))` after losing
    /// leadership.
    #[must_use]
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: i64,
    ) -> Option<Result<(), PartitionError>> {
        if !self.is_leader() {
            return Some(Err(PartitionError::NotLeaderOrFollower));
        }
        if self.high_watermark < required_offset {
            return None;
        }
        if self.is_under_min_isr() {
            return Some(Err(PartitionError::NotEnoughReplicasAfterAppend {
                isr_size: self.isr.len(),
                min_isr: self.config.min_insync_replicas,
            }));
        }
        Some(Ok(()))
    }

    /// Leader: moves the HW up to the smallest LEO of the ISR and of caught-up followers
    /// (see the module doc); never down. Returns whether it moved.
    pub fn maybe_increment_high_watermark(&mut self, now_ms: i64) -> bool {
        // Kafka ≥ 3.7 (KAFKA-15583): no HW progress while under min ISR.
        if self.is_under_min_isr() {
            return false;
        }
        let Role::Leader { followers } = &self.role else {
            return false;
        };
        let leader_end = self.log.log_end_offset();
        let mut new_hw = leader_end;
        let pending = self.pending_isr.as_ref();
        for (id, f) in followers {
            let holds_back = self.isr.contains(id)
                || pending.is_some_and(|p| p.contains(id))
                || f.is_caught_up(leader_end, now_ms, self.config.replica_lag_time_max_ms)
                    && f.log_end_offset >= 0
                    && !self.ineligible_replicas.contains(id);
            if holds_back && f.log_end_offset < new_hw {
                new_hw = f.log_end_offset;
            }
        }
        if new_hw > self.high_watermark {
            self.high_watermark = new_hw;
            self.log.set_high_watermark(new_hw);
            self.producer_state.on_high_watermark_updated(new_hw);
            true
        } else {
            false
        }
    }

    /// Sets the brokers that cannot join the ISR (fenced or in controlled shutdown, from the
    /// metadata image); returns whether the high watermark moved as a result.
    pub fn set_ineligible_replicas(&mut self, ids: &BTreeSet<i32>, now_ms: i64) -> bool {
        if self.ineligible_replicas == *ids {
            return false;
        }
        self.ineligible_replicas = ids.clone();
        self.maybe_increment_high_watermark(now_ms)
    }

    /// ISR members that are no longer caught up (to shrink away through AlterPartition).
    #[must_use]
    pub fn out_of_sync_replicas(&self, now_ms: i64) -> Vec<i32> {
        let Role::Leader { followers } = &self.role else {
            return Vec::new();
        };
        let leader_end = self.log.log_end_offset();
        followers
            .iter()
            .filter(|(id, f)| {
                self.isr.contains(id)
                    && !f.is_caught_up(leader_end, now_ms, self.config.replica_lag_time_max_ms)
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// Followers outside the ISR that reached the HW and this leader epoch's start (Kafka's
    /// `isFollowerInSync`): candidates to add through AlterPartition.
    #[must_use]
    pub fn isr_expansion_candidates(&self) -> Vec<i32> {
        let Role::Leader { followers } = &self.role else {
            return Vec::new();
        };
        followers
            .iter()
            .filter(|(id, f)| {
                !self.isr.contains(id)
                    && f.log_end_offset >= self.high_watermark
                    && f.log_end_offset >= self.leader_epoch_start_offset
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// Reads for a fetch (Kafka's `Partition.fetchRecords` + `UnifiedLog.read`): checks the
    /// request's current leader epoch, requires leadership for followers (and for consumers
    /// when `fetch_only_from_leader`), detects a follower's divergence from
    /// `last_fetched_epoch` (Fetch v12+), checks `fetch_offset` against `[log start, LEO]`,
    /// then returns whole batches below the HW (uncommitted), the LSO (committed) or the LEO
    /// (followers). A follower's read then updates its fetch state and may advance the HW.
    ///
    /// # Errors
    /// [`PartitionError::FencedLeaderEpoch`], [`PartitionError::UnknownLeaderEpoch`],
    /// [`PartitionError::NotLeaderOrFollower`], [`PartitionError::OffsetOutOfRange`],
    /// [`PartitionError::Log`].
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &mut self,
        fetch_offset: i64,
        max_bytes: usize,
        fetcher: Fetcher,
        current_leader_epoch: Option<i32>,
        last_fetched_epoch: Option<i32>,
        fetch_only_from_leader: bool,
        now_ms: i64,
    ) -> Result<FetchData, PartitionError> {
        self.check_current_leader_epoch(current_leader_epoch)?;
        let follower_id = match fetcher {
            Fetcher::Follower { replica_id } => {
                self.require_leader()?;
                if self.follower_state(replica_id).is_none() {
                    return Err(PartitionError::NotLeaderOrFollower);
                }
                Some(replica_id)
            }
            Fetcher::Consumer { .. } => {
                if fetch_only_from_leader {
                    self.require_leader()?;
                }
                None
            }
        };
        let mut data = FetchData {
            records: Bytes::new(),
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset(),
            log_start_offset: self.log.log_start_offset(),
            log_end_offset: self.log.log_end_offset(),
            diverging_epoch: None,
        };
        let log_start = self.log.log_start_offset();
        let leader_end = self.log.log_end_offset();
        if let (Some(_), Some(last_epoch)) = (follower_id, last_fetched_epoch.filter(|&e| e >= 0)) {
            let end = self.log.end_offset_for_epoch(last_epoch);
            // Kafka's `readFromLocalLog`: an epoch whose end is unknown here, or a fetch below
            // the log start, is OFFSET_OUT_OF_RANGE (the follower then asks ListOffsets)
            // before any divergence is reported.
            if end.end_offset == UNDEFINED_EPOCH_OFFSET
                || end.leader_epoch == UNDEFINED_EPOCH
                || fetch_offset < log_start
            {
                return Err(PartitionError::OffsetOutOfRange {
                    offset: fetch_offset,
                    log_start_offset: log_start,
                    log_end_offset: leader_end,
                });
            }
            if end.leader_epoch < last_epoch || end.end_offset < fetch_offset {
                data.diverging_epoch = Some(end);
                return Ok(data);
            }
        }
        if fetch_offset < log_start || fetch_offset > leader_end {
            return Err(PartitionError::OffsetOutOfRange {
                offset: fetch_offset,
                log_start_offset: log_start,
                log_end_offset: leader_end,
            });
        }
        let max_offset = match fetcher {
            Fetcher::Follower { .. } => leader_end,
            Fetcher::Consumer {
                isolation: IsolationLevel::ReadUncommitted,
            } => self.high_watermark,
            Fetcher::Consumer {
                isolation: IsolationLevel::ReadCommitted,
            } => self.last_stable_offset(),
        };
        if fetch_offset < max_offset {
            data.records = self
                .log
                .read_up_to(fetch_offset, max_bytes, max_offset)?
                .bytes;
        }
        if let Some(replica_id) = follower_id {
            self.update_follower_fetch_state(replica_id, fetch_offset, leader_end, now_ms);
            data.high_watermark = self.high_watermark;
            data.last_stable_offset = self.last_stable_offset();
        }
        Ok(data)
    }

    /// Kafka's `Replica.updateFetchStateOrThrow` + `maybeIncrementLeaderHW`.
    fn update_follower_fetch_state(
        &mut self,
        replica_id: i32,
        fetch_offset: i64,
        leader_end_at_read: i64,
        now_ms: i64,
    ) {
        let Role::Leader { followers } = &mut self.role else {
            return;
        };
        let Some(f) = followers.get_mut(&replica_id) else {
            return;
        };
        if fetch_offset >= leader_end_at_read {
            f.last_caught_up_time_ms = f.last_caught_up_time_ms.max(now_ms);
        } else if fetch_offset >= f.last_fetch_leader_log_end_offset {
            f.last_caught_up_time_ms = f.last_caught_up_time_ms.max(f.last_fetch_time_ms);
        }
        f.log_end_offset = fetch_offset;
        f.last_fetch_leader_log_end_offset = leader_end_at_read;
        f.last_fetch_time_ms = now_ms;
        self.maybe_increment_high_watermark(now_ms);
    }

    /// ListOffsets for one partition (Kafka's `fetchOffsetForTimestamp`). `isolation` is
    /// `None` for a replica (reads to the LEO). Latest answers the last fetchable offset with
    /// the current leader epoch; timestamp lookups only answer offsets below it; `None` means
    /// no such offset (the response carries offset -1).
    ///
    /// # Errors
    /// Leader-epoch and leadership errors as [`Partition::read`];
    /// [`PartitionError::OffsetNotAvailable`] for a client while a new leader's HW is below
    /// its epoch start; [`PartitionError::Log`].
    pub fn list_offsets(
        &self,
        timestamp: i64,
        isolation: Option<IsolationLevel>,
        current_leader_epoch: Option<i32>,
        fetch_only_from_leader: bool,
    ) -> Result<Option<TimestampAndOffset>, PartitionError> {
        self.check_current_leader_epoch(current_leader_epoch)?;
        if fetch_only_from_leader {
            self.require_leader()?;
        }
        let last_fetchable = match isolation {
            Some(IsolationLevel::ReadUncommitted) => self.high_watermark,
            Some(IsolationLevel::ReadCommitted) => self.last_stable_offset(),
            None => self.log.log_end_offset(),
        };
        let offsets_error = (isolation.is_some()
            && self.is_leader()
            && self.leader_epoch_start_offset > self.high_watermark)
            .then_some(PartitionError::OffsetNotAvailable {
                high_watermark: self.high_watermark,
                epoch_start: self.leader_epoch_start_offset,
            });
        match timestamp {
            LATEST_TIMESTAMP => match offsets_error {
                Some(e) => Err(e),
                None => Ok(Some(TimestampAndOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: last_fetchable,
                    leader_epoch: Some(self.leader_epoch).filter(|&e| e >= 0),
                })),
            },
            t if t < 0 && t != MAX_TIMESTAMP => Ok(self.log.fetch_offset_by_timestamp(t)?),
            t => {
                let found = self
                    .log
                    .fetch_offset_by_timestamp(t)?
                    .filter(|found| found.offset < last_fetchable);
                match (found, offsets_error) {
                    (Some(found), _) => Ok(Some(found)),
                    (None, Some(e)) => Err(e),
                    (None, None) => Ok(None),
                }
            }
        }
    }

    /// OffsetForLeaderEpoch on the leader: where `leader_epoch` ends in this log (the largest
    /// epoch ≤ it and the start of the next one, or the LEO for the latest epoch);
    /// `(-1, -1)` if unknown.
    ///
    /// # Errors
    /// Leader-epoch errors as [`Partition::read`]; [`PartitionError::NotLeaderOrFollower`].
    pub fn offset_for_leader_epoch(
        &self,
        current_leader_epoch: Option<i32>,
        leader_epoch: i32,
    ) -> Result<EpochEndOffset, PartitionError> {
        self.check_current_leader_epoch(current_leader_epoch)?;
        self.require_leader()?;
        Ok(self.log.end_offset_for_epoch(leader_epoch))
    }

    /// Follower: appends fetched records as they are and takes the leader's HW (bounded by
    /// the LEO).
    ///
    /// # Errors
    /// [`PartitionError::Log`] (non-contiguous offsets, corrupt batches, storage).
    pub fn append_as_follower(
        &mut self,
        records: Bytes,
        leader_high_watermark: i64,
        now_ms: i64,
    ) -> Result<i64, PartitionError> {
        let active_base = self.active_segment_base();
        let info = self.log.append_records_as_follower(records, now_ms)?;
        // The log records each batch's leader epoch in its epoch cache.
        self.apply_written(&info.batches, active_base);
        self.high_watermark = leader_high_watermark.clamp(0, self.log.log_end_offset());
        self.log.set_high_watermark(self.high_watermark);
        Ok(self.log.log_end_offset())
    }

    /// Follower: truncates after the leader reported a diverging epoch (KIP-101/KIP-320,
    /// Kafka's `getOffsetTruncationState`): to the HW if the leader knows no such epoch; to
    /// `min(leader end, our end for that epoch)` when both have the epoch; to our end of the
    /// older epoch we have instead. Producer state is rebuilt and the HW bounded by the new
    /// LEO. Returns the new log end offset.
    ///
    /// # Errors
    /// [`PartitionError::Log`], [`PartitionError::Snapshot`].
    pub fn truncate_to_epoch_end(
        &mut self,
        diverging: EpochEndOffset,
        now_ms: i64,
    ) -> Result<i64, PartitionError> {
        let log_end = self.log.log_end_offset();
        let target = if diverging.end_offset == UNDEFINED_EPOCH_OFFSET {
            self.high_watermark
        } else if diverging.leader_epoch == UNDEFINED_EPOCH {
            diverging.end_offset.min(log_end)
        } else {
            let ours = self.log.end_offset_for_epoch(diverging.leader_epoch);
            if ours.end_offset == UNDEFINED_EPOCH_OFFSET {
                diverging.end_offset.min(log_end)
            } else if ours.leader_epoch == diverging.leader_epoch {
                diverging.end_offset.min(ours.end_offset)
            } else {
                ours.end_offset.min(log_end)
            }
        };
        // Also at or past the log end: no record goes then, but an epoch this broker cached at
        // its log end (a leadership it held without appending) must, or the next fetch names
        // it again and diverges again, forever.
        self.log.truncate_to(target)?;
        if target < log_end {
            info!(
                local_broker_id = self.local_broker_id,
                leader_epoch = diverging.leader_epoch,
                from = log_end,
                to = target,
                "truncated diverging log"
            );
            self.producer_state = ProducerStateManager::load(
                &self.log,
                self.config.producer_id_expiration_ms,
                now_ms,
            )?;
            index_replayed_aborted(&mut self.log, &mut self.producer_state)?;
        }
        self.high_watermark = self.high_watermark.min(self.log.log_end_offset());
        self.log.set_high_watermark(self.high_watermark);
        Ok(self.log.log_end_offset())
    }

    fn active_segment_base(&self) -> i64 {
        self.log
            .segments()
            .map(krust_log::segment::Segment::base_offset)
            .max()
            .unwrap_or(0)
    }

    /// Applies written batches to the producer state, taking a snapshot at the base offset
    /// of every segment the append rolled to (Kafka snapshots at each roll, so a restart
    /// replays at most the active segment). A failed snapshot is logged and skipped: it
    /// only costs replay time at the next open.
    fn apply_written(&mut self, batches: &[RecordBatch], active_base_before: i64) {
        let new_bases: BTreeSet<i64> = self
            .log
            .segments()
            .map(krust_log::segment::Segment::base_offset)
            .filter(|&base| base > active_base_before)
            .collect();
        for batch in batches {
            if new_bases.contains(&batch.base_offset()) {
                // Taken now (the state as of the new segment's base), written by the roll's
                // background flush: no file is created or fsynced on the produce path.
                self.roll_snapshot = Some(self.producer_state.snapshot_file(self.log.dir()));
            }
            if batch.is_transactional() {
                // The first transactional batch or a marker ends a verification (Kafka clears
                // the producer's `VerificationStateEntry`).
                self.verification_guards.remove(&batch.producer_id());
            }
            if let Some(done) = self.producer_state.apply_batch(batch)
                && done.is_aborted
            {
                // Kafka's `UnifiedLog.append` → `LogSegment.updateTxnIndex`: the aborted
                // transaction goes into the index of the segment holding its marker.
                let txn = AbortedTxn {
                    producer_id: done.producer_id,
                    first_offset: done.first_offset,
                    last_offset: done.last_offset,
                    last_stable_offset: self.producer_state.last_stable_offset_of(&done),
                };
                if let Err(error) = self.log.append_aborted_txn(txn) {
                    // The marker is in the log; a restart rebuilds the missing entry when it
                    // replays past it.
                    tracing::error!(%error, dir = %self.log.dir().display(),
                        "writing the transaction index failed");
                }
            }
        }
        self.producer_state
            .on_high_watermark_updated(self.high_watermark);
    }

    /// The flush the last roll(s) left behind ([`krust_log::Log::take_roll_flush`]), with the
    /// producer snapshot taken at the roll for it to write (published by
    /// [`Partition::mark_flushed`] unless the log was truncated meanwhile). Take it under the
    /// partition lock right after an append (or anything else that may roll), run it without
    /// the lock on a blocking thread, and pass the result to [`Partition::mark_flushed`]: the
    /// recovery point moves only then (`server/replica_manager.rs` does all three).
    pub fn take_roll_flush(&mut self) -> Option<krust_log::FlushJob> {
        let mut job = self.log.take_roll_flush()?;
        if let Some((path, contents)) = self.roll_snapshot.take() {
            job.also_publish_file(path, contents);
        }
        Some(job)
    }

    /// Files a roll's flush made ahead for the next rolls
    /// ([`krust_log::FlushJob::make_spare_segment`]).
    pub fn add_spare_segment(&mut self, spare: krust_log::segment::SpareSegment) {
        self.log.add_spare_segment(spare);
    }

    /// A roll's flush finished: see [`krust_log::Log::mark_flushed`]. Returns whether the
    /// recovery point moved.
    ///
    /// # Errors
    /// [`PartitionError::Log`]: the flush failed (the log now refuses appends with
    /// KAFKA_STORAGE_ERROR) or an earlier one did.
    pub fn mark_flushed(
        &mut self,
        done: Result<krust_log::FlushedUpTo, LogError>,
    ) -> Result<bool, PartitionError> {
        Ok(self.log.mark_flushed(done)?)
    }

    /// Applies `retention.ms`/`retention.bytes` (Kafka's `deleteOldSegments`), then forgets
    /// producers whose last write went with the deleted segments and deletes producer
    /// snapshots below the first remaining segment. Returns the segments deleted.
    ///
    /// # Errors
    /// [`PartitionError::Log`], [`PartitionError::Snapshot`].
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<usize, PartitionError> {
        let deleted = self.log.apply_retention(now_ms)?.total();
        if deleted > 0 {
            let log_start = self.log.log_start_offset();
            self.producer_state
                .on_log_start_offset_incremented(log_start);
            let oldest_base = self
                .log
                .segments()
                .map(krust_log::segment::Segment::base_offset)
                .min()
                .unwrap_or(log_start);
            crate::producer_state::delete_snapshots_before(self.log.dir(), oldest_base)?;
        }
        Ok(deleted)
    }

    /// Writes a producer-state snapshot at the current end (Kafka takes one at each roll and
    /// at shutdown).
    ///
    /// # Errors
    /// [`PartitionError::Snapshot`].
    pub fn write_producer_snapshot(&self) -> Result<(), PartitionError> {
        self.producer_state.write_snapshot(self.log.dir())?;
        Ok(())
    }

    /// Drops producers idle for `producer.id.expiration.ms`.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> usize {
        self.producer_state.remove_expired(now_ms)
    }

    /// The partition-level configs in force.
    #[must_use]
    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    /// A topic config changed (`min.insync.replicas`, timestamp bounds, …); the HW may move
    /// now that the effective min ISR differs.
    pub fn set_config(&mut self, config: PartitionConfig, now_ms: i64) {
        self.config = config;
        self.maybe_increment_high_watermark(now_ms);
    }

    /// A topic config changed: the log's part (retention, segment size, `max.message.bytes`,
    /// timestamp type, …).
    ///
    /// # Errors
    /// [`PartitionError::Log`] for a config the log refuses (it keeps the old one).
    pub fn set_log_config(&mut self, config: krust_log::LogConfig) -> Result<(), PartitionError> {
        if *self.log.config() != config {
            self.log.set_config(config)?;
        }
        Ok(())
    }

    /// A follower's fetch told its log start offset (Fetch v5+). Returns whether it changed.
    pub fn record_follower_log_start(&mut self, replica_id: i32, log_start_offset: i64) -> bool {
        let Role::Leader { followers } = &mut self.role else {
            return false;
        };
        match followers.get_mut(&replica_id) {
            Some(f) if f.log_start_offset != log_start_offset => {
                f.log_start_offset = log_start_offset;
                true
            }
            _ => false,
        }
    }

    /// Kafka's `lowWatermarkIfLeader`: the smallest log start offset of this replica and of
    /// the followers on live brokers (`is_alive`); a follower that never said counts as `-1`.
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`].
    pub fn low_watermark(&self, is_alive: impl Fn(i32) -> bool) -> Result<i64, PartitionError> {
        let Role::Leader { followers } = &self.role else {
            return Err(PartitionError::NotLeaderOrFollower);
        };
        Ok(followers
            .iter()
            .filter(|(id, _)| is_alive(**id))
            .map(|(_, f)| f.log_start_offset)
            .fold(self.log.log_start_offset(), i64::min))
    }

    /// The replica set as the metadata last said.
    #[must_use]
    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// The leader this replica follows (`Some(self)` on the leader, `None` if unknown).
    #[must_use]
    pub fn leader_id(&self) -> Option<i32> {
        match &self.role {
            Role::Leader { .. } => Some(self.local_broker_id),
            Role::Follower { leader_id } => *leader_id,
        }
    }

    /// Stops leading or following (the partition is being deleted or the broker stops):
    /// waiting acks=all produces then answer NOT_LEADER_OR_FOLLOWER.
    pub fn stop(&mut self) {
        self.role = Role::Follower { leader_id: None };
    }

    /// Flushes the log to disk; returns the new recovery point.
    ///
    /// # Errors
    /// [`PartitionError::Log`].
    pub fn flush(&mut self) -> Result<i64, PartitionError> {
        self.log.flush()?;
        Ok(self.log.recovery_point())
    }

    /// DeleteRecords on the leader (Kafka's `Partition.deleteRecordsOnLeader`): moves the log
    /// start offset to `offset` (`-1` = the high watermark), never past the HW. Returns the
    /// new log start offset (Kafka's `low_watermark`).
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`], [`PartitionError::OffsetOutOfRange`] when
    /// `offset` is negative or above the HW, [`PartitionError::Log`].
    pub fn delete_records(&mut self, offset: i64) -> Result<i64, PartitionError> {
        self.require_leader()?;
        let target = if offset == -1 {
            self.high_watermark
        } else {
            offset
        };
        if target < 0 || target > self.high_watermark {
            return Err(PartitionError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log.log_start_offset(),
                log_end_offset: self.high_watermark,
            });
        }
        let start = self.log.delete_records(target)?;
        self.producer_state.on_log_start_offset_incremented(start);
        Ok(start)
    }

    /// Closes the log; returns its recovery point.
    ///
    /// # Errors
    /// [`PartitionError::Log`].
    pub fn close(self) -> Result<i64, PartitionError> {
        Ok(self.log.close()?)
    }
}

/// Indexes the aborted transactions a producer-state load met in the log (entries already in
/// a `.txnindex` are skipped), then clears the log's rebuild request: this is how a corrupt or
/// torn `.txnindex` is rebuilt (Kafka rebuilds it while recovering segments).
fn index_replayed_aborted(
    log: &mut Log,
    producer_state: &mut ProducerStateManager,
) -> Result<(), PartitionError> {
    for txn in producer_state.take_replayed_aborted() {
        log.append_aborted_txn(txn)?;
    }
    log.txn_indexes_rebuilt();
    Ok(())
}

/// The offset after the last whole batch in `records` (v2 batches and magic 0/1 entries),
/// `None` if there is none.
fn next_offset_after(records: &Bytes) -> Option<i64> {
    let mut pos = 0usize;
    let mut next = None;
    while let Some(rest) = records.get(pos..) {
        let Ok(size) = krust_log::batch::peek_batch_size(rest, MAX_BATCH_BYTES) else {
            break;
        };
        let (Some(header), true) = (rest.get(..17), size <= rest.len()) else {
            break;
        };
        let mut base = [0u8; 8];
        base.copy_from_slice(&header[..8]);
        let base = i64::from_be_bytes(base);
        // A legacy entry's offset is its last offset; a v2 batch adds its last offset delta.
        let delta = match rest.get(23..27) {
            Some(d) if header[16] >= 2 => i32::from_be_bytes([d[0], d[1], d[2], d[3]]),
            _ => 0,
        };
        next = Some(base.saturating_add(i64::from(delta)).saturating_add(1));
        pos += size;
    }
    next
}

/// (producer id, epoch, base sequence) of every transactional data batch in `records`, read from the v2
/// batch headers alone (no CRC check: callers parse the batches fully later). Stops at the
/// first header that is cut short or not v2.
#[must_use]
pub fn transactional_batches(records: &Bytes) -> Vec<(i64, i16, i32)> {
    const MAGIC: usize = 16;
    const ATTRIBUTES: usize = 21;
    const PRODUCER_ID: usize = 43;
    const PRODUCER_EPOCH: usize = 51;
    const BASE_SEQUENCE: usize = 53;
    const HEADER: usize = 61;
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = records.get(pos..) {
        let Ok(size) = krust_log::batch::peek_batch_size(rest, MAX_BATCH_BYTES) else {
            break;
        };
        let Some(h) = rest.get(..HEADER).filter(|h| h[MAGIC] == 2) else {
            break;
        };
        let attributes = i16::from_be_bytes([h[ATTRIBUTES], h[ATTRIBUTES + 1]]);
        let mut pid = [0u8; 8];
        pid.copy_from_slice(&h[PRODUCER_ID..PRODUCER_ID + 8]);
        let pid = i64::from_be_bytes(pid);
        let epoch = i16::from_be_bytes([h[PRODUCER_EPOCH], h[PRODUCER_EPOCH + 1]]);
        // 0x10 transactional, 0x20 control.
        if attributes & 0x10 != 0 && attributes & 0x20 == 0 && pid >= 0 {
            let sequence = i32::from_be_bytes([
                h[BASE_SEQUENCE],
                h[BASE_SEQUENCE + 1],
                h[BASE_SEQUENCE + 2],
                h[BASE_SEQUENCE + 3],
            ]);
            out.push((pid, epoch, sequence));
        }
        pos = pos.saturating_add(size);
    }
    out
}

/// (producer id, epoch) of every transactional data batch in `records`
/// ([`transactional_batches`] without the sequences).
#[must_use]
pub fn transactional_producers(records: &Bytes) -> Vec<(i64, i16)> {
    transactional_batches(records)
        .into_iter()
        .map(|(pid, epoch, _)| (pid, epoch))
        .collect()
}
