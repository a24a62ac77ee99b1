//! [`TxnCoordinatorShard`]: the transaction coordinator of one `__transaction_state`
//! partition, sans-IO (Kafka 3.9's `TransactionCoordinator` + `TransactionStateManager`, for
//! one partition).
//!
//! Driving it:
//! 1. Loading: [`TxnCoordinatorShard::replay`] every record of the partition in log order,
//!    then [`TxnCoordinatorShard::finish_load`] (transactions found prepared get their
//!    markers sent again).
//! 2. `handle_*` for each request routed to this partition, and
//!    [`TxnCoordinatorShard::handle_timeout`] when [`TxnCoordinatorShard::poll_timeout`] is
//!    due (aborting timed-out transactions, expiring idle ids).
//! 3. Drain [`TxnCoordinatorShard::poll_action`]:
//!    - [`Action::Append`]: append the record (acks=-1) to the partition, then call
//!      `handle_append_committed(id)` or `handle_append_failed(id, code)`. The state changes
//!      only once its record is committed; until then the id has a pending transition and
//!      other requests for it get CONCURRENT_TRANSACTIONS.
//!    - [`Action::Respond`]: send the answer.
//!    - [`Action::WriteMarkers`]: write the markers to every partition's leader (retrying
//!      across leader changes; a partition that no longer exists counts as done), then call
//!      `handle_markers_written`. Meanwhile the id stays pending, as in Kafka.
//! 4. On resignation drop the shard and the marker jobs it emitted; the next leader loads
//!    the log and redoes them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use tracing::{debug, info, warn};

use crate::TopicPartition;
use crate::config::TxnConfig;
use crate::error::TxnError;
use crate::metadata::{
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnTransit, epoch_exhausted,
};
use crate::records::{TxnRecordError, decode_key, decode_value, encode_key, encode_value};
use crate::state::TxnState;

/// Identifies a request; chosen by the driver, echoed in [`Action::Respond`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies an [`Action::Append`]; ids increase in emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppendId(pub u64);

/// How long after a failed CompleteCommit/CompleteAbort append it is tried again.
pub const COMPLETE_RETRY_BACKOFF_MS: i64 = 100;

/// A successful answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn: NONE.
    Done,
    /// InitProducerId.
    ProducerId {
        /// The producer id.
        producer_id: i64,
        /// Its epoch.
        producer_epoch: i16,
    },
}

/// The markers of one ended transaction, for every partition it wrote to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    /// The transaction.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its (final) producer epoch.
    pub producer_epoch: i16,
    /// COMMIT (true) or ABORT markers.
    pub commit: bool,
    /// This coordinator's epoch (the `__transaction_state` partition's leader epoch at load).
    pub coordinator_epoch: i32,
    /// Where to write them.
    pub partitions: BTreeSet<TopicPartition>,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Action {
    /// Append one record to this `__transaction_state` partition (acks=-1, uncompressed).
    Append {
        /// Echo in `handle_append_committed` / `handle_append_failed`.
        id: AppendId,
        /// The record's key (`TransactionLogKey` v0).
        key: Bytes,
        /// The value (`TransactionLogValue` v0), `None` for a tombstone.
        value: Option<Bytes>,
        /// Kafka appends with the transaction's timeout as the request timeout.
        timeout_ms: i32,
    },
    /// Answer a request.
    Respond {
        /// The request.
        request: RequestId,
        /// The answer.
        result: Result<Reply, TxnError>,
    },
    /// Send the markers, then call `handle_markers_written`.
    WriteMarkers(MarkerJob),
}

/// What to do when an append commits or fails.
#[derive(Debug, Clone, PartialEq, Eq)]
enum After {
    InitProducerId(RequestId),
    AddPartitions(RequestId),
    /// PrepareCommit/PrepareAbort. `reply`: the client's EndTxn (answered NONE), or an
    /// InitProducerId that fenced an ongoing transaction (answered CONCURRENT_TRANSACTIONS).
    EndTxn {
        reply: Option<(RequestId, Result<Reply, TxnError>)>,
        epoch_fence: bool,
    },
    Complete,
    Expire,
}

/// An AddPartitionsToTxn/AddOffsetsToTxn waiting for the Complete record of its id's previous
/// transaction, answered CONCURRENT_TRANSACTIONS at `until_ms` if it is still not written.
#[derive(Debug, Clone)]
struct Held {
    request: RequestId,
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    partitions: BTreeSet<TopicPartition>,
    until_ms: i64,
}

#[derive(Debug, Clone)]
struct InFlight {
    transactional_id: String,
    transit: TxnTransit,
    after: After,
}

/// One partition's answer to a verification: `Ok` if it is in the transaction.
pub type PartitionVerdict = (TopicPartition, Result<(), TxnError>);

/// A DescribeTransactions answer for one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    /// State name.
    pub state: TxnState,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// Start of the transaction, −1 if none.
    pub start_ms: i64,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Partitions of the transaction.
    pub partitions: BTreeSet<TopicPartition>,
}

/// A ListTransactions entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTxn {
    /// The id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its state.
    pub state: TxnState,
}

/// The coordinator of one `__transaction_state` partition.
#[derive(Debug)]
pub struct TxnCoordinatorShard {
    partition: i32,
    coordinator_epoch: i32,
    config: TxnConfig,
    txns: BTreeMap<String, TxnMetadata>,
    in_flight: BTreeMap<AppendId, InFlight>,
    /// Complete* transitions waiting for their markers, by id.
    completing: BTreeMap<String, TxnTransit>,
    /// Complete* appends that failed retriably, tried again at `retry_at_ms`.
    retry_complete: Vec<String>,
    retry_at_ms: Option<i64>,
    /// AddPartitions that arrived while their id's previous transaction was completing, held
    /// for its Complete record ([`TxnConfig::add_partitions_hold_ms`]).
    held: Vec<Held>,
    actions: VecDeque<Action>,
    next_append: u64,
    next_abort_scan_ms: i64,
    next_expiry_scan_ms: i64,
}

impl TxnCoordinatorShard {
    /// An empty shard for `partition`, loaded at `coordinator_epoch` (the partition's leader
    /// epoch).
    #[must_use]
    pub fn new(partition: i32, coordinator_epoch: i32, config: TxnConfig, now_ms: i64) -> Self {
        let next_abort_scan_ms = now_ms + config.abort_timed_out_interval_ms;
        let next_expiry_scan_ms = now_ms + config.remove_expired_interval_ms;
        TxnCoordinatorShard {
            partition,
            coordinator_epoch,
            config,
            txns: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            completing: BTreeMap::new(),
            retry_complete: Vec::new(),
            retry_at_ms: None,
            held: Vec::new(),
            actions: VecDeque::new(),
            next_append: 0,
            next_abort_scan_ms,
            next_expiry_scan_ms,
        }
    }

    /// The `__transaction_state` partition.
    #[must_use]
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The coordinator epoch.
    #[must_use]
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// One id's metadata.
    #[must_use]
    pub fn transaction(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    /// Every id's metadata, by id.
    pub fn transactions(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.txns.values()
    }

    /// Loads one record of the partition (key, value or tombstone), last one per id wins.
    ///
    /// # Errors
    /// A record Kafka 3.9 would not write; the caller stops loading and reports it (the
    /// partition is then not served).
    pub fn replay(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(), TxnRecordError> {
        let key = key.ok_or(TxnRecordError::MissingKey)?;
        let id = decode_key(key)?;
        match decode_value(&id, value)? {
            None => {
                self.txns.remove(&id);
            }
            Some(value) => {
                let metadata = TxnMetadata::from_log(&id, value);
                self.txns.insert(id, metadata);
            }
        }
        Ok(())
    }

    /// Loading is done: every transaction found in PrepareCommit/PrepareAbort has its markers
    /// sent again (Kafka's `loadTransactionsForTxnTopicPartition`).
    pub fn finish_load(&mut self, now_ms: i64) {
        let prepared: Vec<String> = self
            .txns
            .values()
            .filter(|m| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|m| m.transactional_id.clone())
            .collect();
        info!(
            partition = self.partition,
            coordinator_epoch = self.coordinator_epoch,
            transactions = self.txns.len(),
            prepared = prepared.len(),
            "loaded __transaction_state partition"
        );
        for id in prepared {
            self.start_markers(now_ms, &id);
        }
    }

    /// Whether InitProducerId for `transactional_id` may need a fresh producer id (an unknown
    /// id, or an exhausted epoch): the driver allocates one before calling
    /// [`TxnCoordinatorShard::handle_init_producer_id`].
    #[must_use]
    pub fn needs_new_producer_id(&self, transactional_id: &str) -> bool {
        self.txns
            .get(transactional_id)
            .is_none_or(TxnMetadata::epoch_exhausted)
    }

    /// InitProducerId with a transactional id (`producer_id`/`producer_epoch`: the KIP-360
    /// expected pair, both −1 when absent). `new_producer_id`: one the driver allocated when
    /// [`TxnCoordinatorShard::needs_new_producer_id`] said so.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_init_producer_id(
        &mut self,
        now_ms: i64,
        request: RequestId,
        transactional_id: &str,
        timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        new_producer_id: Option<i64>,
    ) {
        if let Err(e) = self.init_producer_id(
            now_ms,
            request,
            transactional_id,
            timeout_ms,
            producer_id,
            producer_epoch,
            new_producer_id,
        ) {
            self.respond(request, Err(e));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn init_producer_id(
        &mut self,
        now_ms: i64,
        request: RequestId,
        transactional_id: &str,
        timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        new_producer_id: Option<i64>,
    ) -> Result<(), TxnError> {
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH) {
            return Err(TxnError::InvalidRequest);
        }
        let expected = (producer_id != NO_PRODUCER_ID).then_some((producer_id, producer_epoch));
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        if !self.txns.contains_key(transactional_id) {
            let pid = new_producer_id.ok_or(TxnError::CoordinatorLoadInProgress)?;
            self.txns.insert(
                transactional_id.to_string(),
                TxnMetadata::new(transactional_id, pid, timeout_ms, now_ms),
            );
        }
        let Some(m) = self.txns.get_mut(transactional_id) else {
            unreachable!("inserted above");
        };
        if m.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if let Some((pid, epoch)) = expected {
            // KIP-360: a just-created id, the current producer id, or a retry after a
            // rotation whose answer was lost.
            let valid = m.producer_epoch == NO_PRODUCER_EPOCH
                || pid == m.producer_id
                || (pid == m.last_producer_id && epoch_exhausted(epoch));
            if !valid {
                return Err(TxnError::ProducerFenced);
            }
        }
        let transit = match m.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => {
                return Err(TxnError::ConcurrentTransactions);
            }
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => {
                if m.epoch_exhausted() && expected.is_none_or(|(_, e)| e == m.producer_epoch) {
                    let pid = new_producer_id.ok_or(TxnError::CoordinatorLoadInProgress)?;
                    m.prepare_producer_id_rotation(pid, timeout_ms, now_ms, expected.is_some())
                } else {
                    m.prepare_increment_epoch(timeout_ms, expected.map(|(_, e)| e), now_ms)?
                }
            }
            TxnState::Ongoing => {
                // Fence the producer and abort its transaction; the client retries and gets
                // a further bump once the abort completed.
                let id = transactional_id.to_string();
                return self.fence_and_abort(now_ms, &id, Some(request));
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                warn!(transactional_id, state = ?m.state, "transactional id in a state it never rests in");
                return Err(TxnError::ConcurrentTransactions);
            }
        };
        self.append(transactional_id, transit, After::InitProducerId(request));
        Ok(())
    }

    /// Bumps the epoch of an Ongoing transaction and writes PrepareAbort with it (Kafka's
    /// `prepareFenceProducerEpoch` + `endTransaction(isFromClient = false)`).
    fn fence_and_abort(
        &mut self,
        now_ms: i64,
        transactional_id: &str,
        reply: Option<RequestId>,
    ) -> Result<(), TxnError> {
        let Some(m) = self.txns.get_mut(transactional_id) else {
            return Err(TxnError::InvalidProducerIdMapping);
        };
        debug_assert_eq!(m.state, TxnState::Ongoing);
        let Some(epoch) = m.fence_epoch() else {
            warn!(
                transactional_id,
                "cannot fence a producer at epoch i16::MAX"
            );
            return Err(TxnError::UnknownServerError);
        };
        info!(
            transactional_id,
            producer_id = m.producer_id,
            producer_epoch = epoch,
            "fencing producer and aborting its transaction"
        );
        // As Kafka, the bumped epoch is in memory before the abort is written: the old producer
        // is fenced from now on, even if the write fails.
        m.producer_epoch = epoch;
        m.last_producer_epoch = NO_PRODUCER_EPOCH;
        let transit = m.prepare_abort_or_commit(TxnState::PrepareAbort, now_ms);
        let reply = reply.map(|r| (r, Err(TxnError::ConcurrentTransactions)));
        self.append(
            transactional_id,
            transit,
            After::EndTxn {
                reply,
                epoch_fence: true,
            },
        );
        Ok(())
    }

    /// AddPartitionsToTxn (v0–3, or a v4 entry without `verify_only`) and AddOffsetsToTxn
    /// (with the group's `__consumer_offsets` partition). The same answer goes to every
    /// partition.
    ///
    /// One that arrives while the producer's previous transaction is completing (its markers
    /// being written, or its Complete record) is held until that record is written, then
    /// handled; CONCURRENT_TRANSACTIONS if it is not written within
    /// [`TxnConfig::add_partitions_hold_ms`]. Kafka 3.9 answers CONCURRENT_TRANSACTIONS at
    /// once and its producer retries 20 ms later: every back-to-back transaction would wait
    /// that long for markers that take a few milliseconds.
    pub fn handle_add_partitions(
        &mut self,
        now_ms: i64,
        request: RequestId,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
    ) {
        let hold_until = now_ms.saturating_add(self.config.add_partitions_hold_ms);
        self.add_partitions(
            now_ms,
            Held {
                request,
                transactional_id: transactional_id.to_owned(),
                producer_id,
                producer_epoch,
                partitions: partitions.clone(),
                until_ms: hold_until,
            },
        );
    }

    /// [`Self::handle_add_partitions`], held until `add.until_ms` while the previous
    /// transaction completes.
    fn add_partitions(&mut self, now_ms: i64, add: Held) {
        let (request, transactional_id, partitions) =
            (add.request, add.transactional_id.as_str(), &add.partitions);
        let checked = self.check_producer(transactional_id, add.producer_id, add.producer_epoch);
        let completing = checked.as_ref().is_ok_and(|m| {
            matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
                || matches!(
                    m.pending,
                    Some(TxnState::CompleteCommit | TxnState::CompleteAbort)
                )
        });
        if completing && now_ms < add.until_ms {
            self.held.push(add);
            return;
        }
        let result = checked.and_then(|m| {
            if m.pending.is_some()
                || matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            {
                Err(TxnError::ConcurrentTransactions)
            } else if m.state == TxnState::Ongoing && partitions.is_subset(&m.partitions) {
                Ok(None)
            } else {
                Ok(Some(m.prepare_add_partitions(partitions, now_ms)))
            }
        });
        match result {
            Err(e) => self.respond(request, Err(e)),
            Ok(None) => self.respond(request, Ok(Reply::Done)),
            Ok(Some(transit)) => {
                self.append(transactional_id, transit, After::AddPartitions(request));
            }
        }
    }

    /// AddPartitionsToTxn v4 `verify_only` (KIP-890 part 1, from partition leaders): NONE for
    /// each partition in the transaction, TRANSACTION_ABORTABLE for the others; nothing is
    /// written. A pending transition is not checked (Kafka: the append is checked again).
    ///
    /// # Errors
    /// One error for every partition: unknown id / other producer id →
    /// INVALID_PRODUCER_ID_MAPPING, another epoch → PRODUCER_FENCED, a prepared transaction
    /// → CONCURRENT_TRANSACTIONS, an empty id → INVALID_REQUEST.
    pub fn verify_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<Vec<PartitionVerdict>, TxnError> {
        let m = self.check_producer(transactional_id, producer_id, producer_epoch)?;
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(TxnError::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|tp| {
                let r = if m.partitions.contains(tp) {
                    Ok(())
                } else {
                    Err(TxnError::TransactionAbortable)
                };
                (tp.clone(), r)
            })
            .collect())
    }

    /// EndTxn from the client.
    pub fn handle_end_txn(
        &mut self,
        now_ms: i64,
        request: RequestId,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) {
        let checked = self.check_producer(transactional_id, producer_id, producer_epoch);
        let result = checked.and_then(|m| {
            if m.pending.is_some() {
                return Err(TxnError::ConcurrentTransactions);
            }
            match (m.state, commit) {
                (TxnState::Ongoing, _) => {
                    let next = if commit {
                        TxnState::PrepareCommit
                    } else {
                        TxnState::PrepareAbort
                    };
                    Ok(Some(m.prepare_abort_or_commit(next, now_ms)))
                }
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(None),
                (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                    Err(TxnError::ConcurrentTransactions)
                }
                _ => Err(TxnError::InvalidTxnState),
            }
        });
        match result {
            Err(e) => self.respond(request, Err(e)),
            Ok(None) => self.respond(request, Ok(Reply::Done)),
            Ok(Some(transit)) => self.append(
                transactional_id,
                transit,
                After::EndTxn {
                    reply: Some((request, Ok(Reply::Done))),
                    epoch_fence: false,
                },
            ),
        }
    }

    /// The id's metadata if `producer_id`/`producer_epoch` are its current ones.
    fn check_producer(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&mut TxnMetadata, TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let m = self
            .txns
            .get_mut(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if m.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if m.producer_epoch != producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(m)
    }

    /// The record of append `id` is committed: the state change takes effect and its request
    /// is answered.
    pub fn handle_append_committed(&mut self, now_ms: i64, id: AppendId) {
        let Some(done) = self.in_flight.remove(&id) else {
            return;
        };
        let txn_id = done.transactional_id;
        if done.after == After::Expire {
            if self
                .txns
                .get(&txn_id)
                .is_some_and(|m| m.pending == Some(TxnState::Dead))
            {
                self.txns.remove(&txn_id);
                info!(transactional_id = %txn_id, "expired transactional id");
            }
            return;
        }
        let Some(m) = self.txns.get_mut(&txn_id) else {
            return;
        };
        m.complete(&done.transit);
        match done.after {
            After::InitProducerId(request) => {
                let reply = Reply::ProducerId {
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                };
                self.respond(request, Ok(reply));
            }
            After::AddPartitions(request) => self.respond(request, Ok(Reply::Done)),
            After::EndTxn { reply, .. } => {
                if let Some((request, result)) = reply {
                    self.respond(request, result);
                }
                self.start_markers(now_ms, &txn_id);
            }
            After::Complete => {
                debug!(transactional_id = %txn_id, state = ?m.state, "completed transaction");
                self.release_held(now_ms, Some(&txn_id));
            }
            After::Expire => {}
        }
    }

    /// Handles again the held AddPartitions whose hold ran out, and those of `completed`, whose
    /// previous transaction was just completed.
    fn release_held(&mut self, now_ms: i64, completed: Option<&str>) {
        let (release, keep): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| {
                completed.is_some_and(|id| h.transactional_id == id) || h.until_ms <= now_ms
            });
        self.held = keep;
        for held in release {
            self.add_partitions(now_ms, held);
        }
    }

    /// Append `id` failed with Kafka error `code` (as the partition answered it).
    pub fn handle_append_failed(&mut self, now_ms: i64, id: AppendId, code: i16) {
        let Some(failed) = self.in_flight.remove(&id) else {
            return;
        };
        let txn_id = failed.transactional_id;
        let error = TxnError::from_append_error(code);
        warn!(transactional_id = %txn_id, state = ?failed.transit.state, code, "__transaction_state append failed");
        if failed.after == After::Complete {
            // The markers are written; only the Complete record is missing. Kafka retries it
            // until it is written or the coordinator moves.
            if error != TxnError::NotCoordinator {
                self.completing.insert(txn_id.clone(), failed.transit);
                self.retry_complete.push(txn_id);
                self.retry_at_ms
                    .get_or_insert(now_ms + COMPLETE_RETRY_BACKOFF_MS);
            }
            return;
        }
        if let Some(m) = self.txns.get_mut(&txn_id) {
            m.pending = None;
            if let After::EndTxn {
                epoch_fence: true, ..
            } = failed.after
            {
                m.has_failed_epoch_fence = true;
            }
        }
        match failed.after {
            After::InitProducerId(request) | After::AddPartitions(request) => {
                self.respond(request, Err(error));
            }
            After::EndTxn {
                reply: Some((request, _)),
                ..
            } => self.respond(request, Err(error)),
            _ => {}
        }
    }

    /// Complete* records whose append failed retriably and wait for their retry: Kafka's
    /// `TransactionMarkerChannelManager` `LogAppendRetryQueueSize` (for this shard).
    #[must_use]
    pub fn log_append_retry_queue_size(&self) -> usize {
        self.retry_complete.len()
    }

    /// Every marker of the job for `transactional_id` was written (or its partition is gone):
    /// the Complete record is appended.
    pub fn handle_markers_written(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) {
        let Some(transit) = self.completing.remove(transactional_id) else {
            return;
        };
        if transit.producer_id != producer_id || transit.producer_epoch != producer_epoch {
            // A job of an earlier transaction of the id; keep waiting for the current one.
            self.completing
                .insert(transactional_id.to_string(), transit);
            return;
        }
        self.append(transactional_id, transit, After::Complete);
    }

    /// Timers: the timed-out transaction abort and the idle id expiry.
    pub fn handle_timeout(&mut self, now_ms: i64) {
        if self.held.iter().any(|h| h.until_ms <= now_ms) {
            self.release_held(now_ms, None);
        }
        if self.retry_at_ms.is_some_and(|at| at <= now_ms) {
            self.retry_at_ms = None;
            for id in std::mem::take(&mut self.retry_complete) {
                if let Some(transit) = self.completing.remove(&id) {
                    self.append(&id, transit, After::Complete);
                }
            }
        }
        if self.next_abort_scan_ms <= now_ms {
            self.next_abort_scan_ms = now_ms + self.config.abort_timed_out_interval_ms;
            let timed_out: Vec<String> = self
                .txns
                .values()
                .filter(|m| {
                    m.state == TxnState::Ongoing
                        && m.pending.is_none()
                        && m.start_ms.saturating_add(i64::from(m.timeout_ms)) < now_ms
                })
                .map(|m| m.transactional_id.clone())
                .collect();
            for id in timed_out {
                info!(transactional_id = %id, "aborting timed-out transaction");
                let _ = self.fence_and_abort(now_ms, &id, None);
            }
        }
        if self.next_expiry_scan_ms <= now_ms {
            self.next_expiry_scan_ms = now_ms + self.config.remove_expired_interval_ms;
            let horizon = now_ms.saturating_sub(self.config.transactional_id_expiration_ms);
            let expired: Vec<String> = self
                .txns
                .values()
                .filter(|m| {
                    m.state.expiration_allowed()
                        && m.pending.is_none()
                        && m.last_update_ms <= horizon
                })
                .map(|m| m.transactional_id.clone())
                .collect();
            for id in expired {
                if let Some(m) = self.txns.get_mut(&id) {
                    let transit = m.prepare_dead();
                    self.append(&id, transit, After::Expire);
                }
            }
        }
    }

    /// When `handle_timeout` is next due (ms).
    #[must_use]
    pub fn poll_timeout(&self) -> i64 {
        let scans = self.next_abort_scan_ms.min(self.next_expiry_scan_ms);
        let held = self
            .held
            .iter()
            .map(|h| h.until_ms)
            .min()
            .unwrap_or(i64::MAX);
        self.retry_at_ms.map_or(scans, |r| r.min(scans)).min(held)
    }

    /// The next action, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// DescribeTransactions of one id.
    ///
    /// # Errors
    /// TRANSACTIONAL_ID_NOT_FOUND for an unknown (or expiring) id, INVALID_REQUEST for "".
    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        match self.txns.get(transactional_id) {
            Some(m) if m.state != TxnState::Dead && m.pending != Some(TxnState::Dead) => {
                Ok(TxnDescription {
                    state: m.state,
                    timeout_ms: m.timeout_ms,
                    start_ms: m.start_ms,
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    partitions: m.partitions.clone(),
                })
            }
            _ => Err(TxnError::TransactionalIdNotFound),
        }
    }

    /// ListTransactions over this shard: `states` (`None`: any; names the caller could not
    /// parse make it `Some` of the others, as Kafka), `producer_ids` (empty: any),
    /// `min_duration_ms` (−1: any; else only those open longer).
    #[must_use]
    pub fn list(
        &self,
        states: Option<&BTreeSet<TxnState>>,
        producer_ids: &BTreeSet<i64>,
        min_duration_ms: i64,
        now_ms: i64,
    ) -> Vec<ListedTxn> {
        self.txns
            .values()
            .filter(|m| m.state != TxnState::Dead)
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            .filter(|m| states.is_none_or(|s| s.contains(&m.state)))
            .filter(|m| min_duration_ms < 0 || now_ms - m.start_ms > min_duration_ms)
            .map(|m| ListedTxn {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect()
    }

    /// After PrepareCommit/PrepareAbort is durable: Complete* is prepared (pending) and the
    /// markers go out; with no partitions the Complete record is written at once.
    fn start_markers(&mut self, now_ms: i64, transactional_id: &str) {
        let Some(m) = self.txns.get_mut(transactional_id) else {
            return;
        };
        if m.pending.is_some() {
            return;
        }
        let commit = m.state == TxnState::PrepareCommit;
        let job = MarkerJob {
            transactional_id: transactional_id.to_string(),
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            commit,
            coordinator_epoch: self.coordinator_epoch,
            partitions: m.partitions.clone(),
        };
        let transit = m.prepare_complete(now_ms);
        if job.partitions.is_empty() {
            self.append(transactional_id, transit, After::Complete);
        } else {
            self.completing
                .insert(transactional_id.to_string(), transit);
            self.actions.push_back(Action::WriteMarkers(job));
        }
    }

    fn append(&mut self, transactional_id: &str, transit: TxnTransit, after: After) {
        let id = AppendId(self.next_append);
        self.next_append += 1;
        let value = (after != After::Expire).then(|| encode_value(&transit.log_value()));
        self.actions.push_back(Action::Append {
            id,
            key: encode_key(transactional_id),
            value,
            timeout_ms: transit.timeout_ms,
        });
        self.in_flight.insert(
            id,
            InFlight {
                transactional_id: transactional_id.to_string(),
                transit,
                after,
            },
        );
    }

    fn respond(&mut self, request: RequestId, result: Result<Reply, TxnError>) {
        self.actions.push_back(Action::Respond { request, result });
    }
}
