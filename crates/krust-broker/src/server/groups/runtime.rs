//! One tokio task per loaded `__consumer_offsets` partition (Kafka's `CoordinatorRuntime`
//! event loop for one `CoordinatorContext`): it loads the partition into a
//! [`GroupCoordinatorShard`], then feeds it requests and timer ticks in real time, writes the
//! records it emits and releases its responses.
//!
//! Appends: the shard's records go out in emission order, one append in flight at a time;
//! while it is in flight, later appends queue and go out together as the next batch (group
//! commit), so acks=-1 replication latency is paid once per batch, not per request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use krust_log::batch::{BatchError, MAX_BATCH_BYTES, RecordBatchBuilder};
use krust_log::legacy::{LogEntry, read_log_entries};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::log::CoordinatorLog;
use crate::error::PartitionError;
use crate::group::{
    Action, AppendId, CoordinatorRecord, GroupConfig, GroupCoordinatorShard, GroupError,
    GroupRequest, GroupResponse, RequestContext, RequestId, TxnAppend,
};

/// Shard status: reading its partition; requests get COORDINATOR_LOAD_IN_PROGRESS.
pub(super) const LOADING: u8 = 0;
/// Shard status: serving.
pub(super) const ACTIVE: u8 = 1;
/// Shard status: unloaded or failed to load; requests get NOT_COORDINATOR.
pub(super) const STOPPED: u8 = 2;

/// Requests queued for one shard before senders wait (Kafka's `queued.max.requests`, 500,
/// bounds the whole broker the same way).
const SHARD_QUEUE_CAPACITY: usize = 500;

/// Largest batch the runtime builds from queued appends (Kafka's default `message.max.bytes`,
/// 1048588, which `__consumer_offsets` inherits). A single append larger than this still
/// goes out alone.
const MAX_COMBINED_BATCH_BYTES: usize = 1_048_588;

/// Runtime settings of a shard task.
#[derive(Debug, Clone)]
pub(super) struct ShardSettings {
    /// The shard's config.
    pub group: GroupConfig,
    /// `offsets.load.buffer.size` (5242880): bytes read per step while loading.
    pub load_buffer_size: usize,
    /// `offsets.commit.timeout.ms` (5000): how long an append waits for acks=-1.
    pub commit_timeout: Duration,
}

/// Input of a shard task.
// Requests are the common case, moved once into the channel: boxing them would add an
// allocation per request only to shrink the rare variant's slot.
#[allow(clippy::large_enum_variant)]
pub(super) enum ShardCommand {
    /// A request, with where to send its answer. A dropped `reply` (the shard was unloaded,
    /// or reloads after a failed append) means NOT_COORDINATOR.
    Request {
        ctx: RequestContext,
        request: GroupRequest,
        reply: oneshot::Sender<GroupResponse>,
    },
    /// Topic partitions were deleted: drop the offsets committed for them.
    PartitionsDeleted(Vec<(String, i32)>),
    /// A COMMIT/ABORT marker of a producer reached this partition.
    TxnMarker { producer_id: i64, commit: bool },
}

/// The coordinator's handle on one shard task.
pub(super) struct ShardSlot {
    /// The partition's leader epoch this broker leads it in.
    pub leader_epoch: i32,
    /// [`LOADING`], [`ACTIVE`] or [`STOPPED`].
    pub status: Arc<AtomicU8>,
    /// Requests in.
    pub requests: mpsc::Sender<ShardCommand>,
    /// `true` stops the task (unload).
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ShardSlot {
    /// Spawns the task for `partition`: load, then serve.
    pub fn spawn(
        runtime: &tokio::runtime::Handle,
        partition: i32,
        leader_epoch: i32,
        log: Arc<dyn CoordinatorLog>,
        settings: ShardSettings,
    ) -> ShardSlot {
        let status = Arc::new(AtomicU8::new(LOADING));
        let (requests, rx) = mpsc::channel(SHARD_QUEUE_CAPACITY);
        let (stop, stop_rx) = watch::channel(false);
        let task = runtime.spawn(run_shard(
            partition,
            log,
            settings,
            rx,
            stop_rx,
            Arc::clone(&status),
        ));
        ShardSlot {
            leader_epoch,
            status,
            requests,
            stop,
            task,
        }
    }

    /// Unloads: requests arriving from now on get NOT_COORDINATOR, and so do the ones the
    /// task still holds (their reply senders are dropped). Returns the task to await.
    pub fn unload(self) -> JoinHandle<()> {
        self.status.store(STOPPED, Ordering::SeqCst);
        // An error means the task is gone already.
        let _ = self.stop.send(true);
        self.task
    }
}

/// Kafka's coordinator clock: wall time in ms (commit timestamps are stored in records).
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Why loading a shard stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadError {
    /// The partition could not be read (not led here any more, IO).
    #[error("reading the partition: {0}")]
    Partition(#[from] PartitionError),
    /// The log did not advance (a batch ends before the offset asked for).
    #[error("the log did not advance at offset {0}")]
    Stuck(i64),
}

/// Reads `__consumer_offsets-partition` from its log start to its log end offset into a new
/// shard (Kafka's `CoordinatorLoaderImpl.load`): v2 batches and legacy (magic 0/1) entries.
/// Undecodable records are skipped with a warning, as Kafka skips unknown record types.
/// Offset commits of transactional batches are held per producer until its control batch
/// (COMMIT/ABORT marker) is replayed. Blocking IO.
pub(super) fn load_shard(
    log: &dyn CoordinatorLog,
    partition: i32,
    settings: &ShardSettings,
    now_ms: i64,
    seed: u64,
) -> Result<GroupCoordinatorShard, LoadError> {
    let mut shard = GroupCoordinatorShard::new(settings.group.clone(), now_ms, seed);
    let mut offset = 0i64;
    let mut end: Option<i64> = None;
    let mut records_loaded = 0u64;
    loop {
        let chunk = log.read(partition, offset, settings.load_buffer_size)?;
        offset = offset.max(chunk.log_start_offset);
        // Kafka reads to the log end offset seen at the start of the load.
        let end = *end.get_or_insert(chunk.log_end_offset);
        if offset >= end || chunk.records.is_empty() {
            break;
        }
        let (entries, stop) = read_log_entries(chunk.records, MAX_BATCH_BYTES);
        if let Some(stop) = stop {
            debug!(partition, ?stop, "load read stopped inside a chunk");
        }
        let before = offset;
        for entry in entries {
            if entry.next_offset() <= offset {
                continue;
            }
            offset = entry.next_offset();
            // Transactional offset commits wait for their producer's marker (KIP-98).
            if let LogEntry::Batch(batch) = &entry
                && batch.is_control()
            {
                match control_marker(batch) {
                    Some(commit) => shard.handle_txn_marker(now_ms, batch.producer_id(), commit),
                    None => warn!(
                        partition,
                        next_offset = offset,
                        "skipping an unreadable control batch in __consumer_offsets"
                    ),
                }
                continue;
            }
            let transactional = match &entry {
                LogEntry::Batch(batch) if batch.is_transactional() => Some(batch.producer_id()),
                _ => None,
            };
            let records = match entry_records(&entry) {
                Ok(Some(records)) => records,
                Ok(None) => continue,
                Err(e) => {
                    warn!(partition, next_offset = offset, error = %e,
                        "skipping an unreadable __consumer_offsets batch");
                    continue;
                }
            };
            for (key, value) in records {
                let replayed = match transactional {
                    Some(producer_id) => {
                        shard.replay_transactional(now_ms, producer_id, &key, value.as_deref())
                    }
                    None => shard.replay(now_ms, &key, value.as_deref()),
                };
                if let Err(e) = replayed {
                    warn!(partition, error = %e, "skipping an undecodable __consumer_offsets record");
                } else {
                    records_loaded += 1;
                }
            }
        }
        if offset <= before {
            return Err(LoadError::Stuck(offset));
        }
    }
    info!(
        partition,
        records_loaded,
        groups = shard.groups().len(),
        "loaded group coordinator shard"
    );
    Ok(shard)
}

/// The marker of a control batch: `Some(true)` COMMIT, `Some(false)` ABORT, `None` if its
/// first record's key is not a control record key (int16 version, int16 type) of type 0 or 1.
fn control_marker(batch: &krust_log::batch::RecordBatch) -> Option<bool> {
    let records = batch.records().ok()?;
    let key = records.first()?.key.as_ref()?;
    match key.get(2..4)? {
        [0, 0] => Some(false),
        [0, 1] => Some(true),
        _ => None,
    }
}

/// A record's key and value (`None`: a tombstone).
type KeyedRecord = (Bytes, Option<Bytes>);

/// The keyed records of one stored entry, `None` for a control batch (transaction markers).
/// A legacy entry (magic 0/1, written before Kafka 0.11 or under an old
/// `message.format.version`) yields its message, or a compressed wrapper's inner messages.
fn entry_records(entry: &LogEntry) -> Result<Option<Vec<KeyedRecord>>, BatchError> {
    let keyed = |key: Option<Bytes>, value: Option<Bytes>| key.map(|k| (k, value));
    match entry {
        LogEntry::Batch(batch) => {
            if batch.is_control() {
                return Ok(None);
            }
            // Compressed when `offsets.topic.compression.codec` was set: inflated here.
            Ok(Some(
                batch
                    .records()?
                    .into_iter()
                    .filter_map(|r| keyed(r.key, r.value))
                    .collect(),
            ))
        }
        LogEntry::Legacy(legacy) => Ok(Some(
            legacy
                .records()?
                .into_iter()
                .filter_map(|r| keyed(r.key, r.value))
                .collect(),
        )),
    }
}

/// One batch (CreateTime `now_ms`) of the given records, in order: without a producer, or
/// a transactional batch of `txn`'s producer at sequence 0 (Kafka's `storeOffsets` for a
/// TxnOffsetCommit).
pub(super) fn build_batch(
    records: &[CoordinatorRecord],
    now_ms: i64,
    txn: Option<&TxnAppend>,
) -> Bytes {
    let mut builder = RecordBatchBuilder::new(0);
    if let Some(txn) = txn {
        builder = builder
            .producer(txn.producer_id, txn.producer_epoch, 0)
            .transactional(true);
    }
    for record in records {
        let (key, value) = record.encode();
        builder.append_kv(now_ms, Some(key), value);
    }
    builder.build().into_bytes()
}

/// The task of one shard: loads (again after a failed append), serves until stopped.
async fn run_shard(
    partition: i32,
    log: Arc<dyn CoordinatorLog>,
    settings: ShardSettings,
    mut requests: mpsc::Receiver<ShardCommand>,
    mut stop: watch::Receiver<bool>,
    status: Arc<AtomicU8>,
) {
    loop {
        status.store(LOADING, Ordering::SeqCst);
        let load = {
            let log = Arc::clone(&log);
            let settings = settings.clone();
            tokio::task::spawn_blocking(move || {
                load_shard(log.as_ref(), partition, &settings, now_ms(), rand::random())
            })
        };
        let shard = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            loaded = load => match loaded {
                Ok(Ok(shard)) => shard,
                Ok(Err(e)) => {
                    warn!(partition, error = %e, "failed to load group coordinator shard");
                    status.store(STOPPED, Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    warn!(partition, error = %e, "group coordinator load task failed");
                    status.store(STOPPED, Ordering::SeqCst);
                    return;
                }
            },
        };
        if *stop.borrow() {
            return;
        }
        status.store(ACTIVE, Ordering::SeqCst);
        let outcome = serve(
            partition,
            &log,
            &settings,
            shard,
            &mut requests,
            &mut stop,
            &status,
        )
        .await;
        match outcome {
            ServeOutcome::Stopped => return,
            ServeOutcome::AppendFailed => {
                // The in-memory state may be ahead of the log: rebuild it from the log, as
                // Kafka reverts to its last committed snapshot.
                info!(
                    partition,
                    "reloading group coordinator shard after a failed append"
                );
            }
        }
    }
}

enum ServeOutcome {
    Stopped,
    AppendFailed,
}

/// The append in flight: the last append id it carries, whether it is a transactional batch,
/// and the task doing it.
type InFlight = (AppendId, bool, JoinHandle<Result<(), PartitionError>>);

/// An append the shard emitted, waiting to go out.
type Queued = (AppendId, Vec<CoordinatorRecord>, Option<TxnAppend>);

async fn serve(
    partition: i32,
    log: &Arc<dyn CoordinatorLog>,
    settings: &ShardSettings,
    mut shard: GroupCoordinatorShard,
    requests: &mut mpsc::Receiver<ShardCommand>,
    stop: &mut watch::Receiver<bool>,
    status: &AtomicU8,
) -> ServeOutcome {
    let mut next_request_id = 0u64;
    let mut waiting: HashMap<RequestId, oneshot::Sender<GroupResponse>> = HashMap::new();
    let mut queued: Vec<Queued> = Vec::new();
    let mut in_flight: Option<InFlight> = None;
    loop {
        while let Some(action) = shard.poll_action() {
            match action {
                Action::Append {
                    append_id,
                    records,
                    txn,
                } => queued.push((append_id, records, txn)),
                Action::Respond {
                    request_id,
                    response,
                } => {
                    if let Some(reply) = waiting.remove(&request_id) {
                        // The requester may have gone (connection closed): nothing to do.
                        let _ = reply.send(response);
                    }
                }
            }
        }
        if in_flight.is_none() && !queued.is_empty() {
            in_flight = Some(start_append(partition, log, settings, &mut queued));
        }
        let now = now_ms();
        // At least 1 ms: a deadline the shard kept after handling it must not spin the task.
        let sleep = shard.poll_timeout().map(|deadline| {
            Duration::from_millis(
                u64::try_from(deadline.saturating_sub(now))
                    .unwrap_or(0)
                    .max(1),
            )
        });
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return ServeOutcome::Stopped,
            command = requests.recv() => {
                match command {
                    None => return ServeOutcome::Stopped,
                    Some(ShardCommand::Request { ctx, request, reply }) => {
                        let request_id = RequestId(next_request_id);
                        next_request_id += 1;
                        waiting.insert(request_id, reply);
                        shard.handle_request(now_ms(), request_id, &ctx, request);
                    }
                    Some(ShardCommand::PartitionsDeleted(deleted)) => {
                        shard.handle_partitions_deleted(&deleted);
                    }
                    Some(ShardCommand::TxnMarker { producer_id, commit }) => {
                        shard.handle_txn_marker(now_ms(), producer_id, commit);
                    }
                }
            }
            result = async {
                match in_flight.as_mut() {
                    Some((_, _, task)) => task.await,
                    None => std::future::pending().await,
                }
            } => {
                let Some((last, transactional, _)) = in_flight.take() else { continue };
                match result {
                    Ok(Ok(())) => shard.handle_append_committed(last),
                    Ok(Err(e)) if transactional && let Some(error) = txn_rejection(&e) => {
                        debug!(partition, error = %e, "transactional offsets refused");
                        shard.handle_append_rejected(last, error);
                    }
                    Ok(Err(e)) => {
                        warn!(partition, error = %e, "__consumer_offsets append failed");
                        let error = append_error(&e);
                        return fail(&mut shard, last, error, &mut waiting, status);
                    }
                    Err(e) => {
                        warn!(partition, error = %e, "__consumer_offsets append task failed");
                        let error = GroupError::NotCoordinator;
                        return fail(&mut shard, last, error, &mut waiting, status);
                    }
                }
            }
            () = async {
                match sleep {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => shard.handle_timeout(now_ms()),
        }
    }
}

/// What the requests waiting for a failed append are answered with (Kafka 3.9
/// `GroupCoordinatorService.handleOperationException`): the partition moved → NOT_COORDINATOR;
/// replication fell short → COORDINATOR_NOT_AVAILABLE (the client retries); a batch too large
/// → UNKNOWN_SERVER_ERROR; anything else as it is.
fn append_error(e: &PartitionError) -> GroupError {
    use kafka_protocol::error::ResponseError as E;
    match e.response_error() {
        E::NotLeaderOrFollower | E::KafkaStorageError => GroupError::NotCoordinator,
        E::UnknownTopicOrPartition | E::NotEnoughReplicas | E::RequestTimedOut => {
            GroupError::CoordinatorNotAvailable
        }
        E::MessageTooLarge | E::RecordListTooLarge | E::InvalidFetchSize => {
            GroupError::UnknownServerError
        }
        other => GroupError::AppendFailed(other.code()),
    }
}

/// A transactional append the partition refused for its producer's sake, before writing
/// anything: the answer to its TxnOffsetCommit (Kafka's `maybeConvertOffsetCommitError`:
/// a batch too large → INVALID_COMMIT_OFFSET_SIZE, producer and transaction errors as they
/// are). `None`: a partition failure, handled as any failed append.
fn txn_rejection(e: &PartitionError) -> Option<GroupError> {
    use kafka_protocol::error::ResponseError as E;
    match e {
        PartitionError::InvalidTxnState { .. }
        | PartitionError::Producer(_)
        | PartitionError::InvalidRecord { .. }
        | PartitionError::InvalidTimestamp { .. } => Some(GroupError::AppendFailed(e.code())),
        PartitionError::Log(_) => match e.response_error() {
            E::MessageTooLarge | E::RecordListTooLarge | E::InvalidFetchSize => {
                Some(GroupError::AppendFailed(E::InvalidCommitOffsetSize.code()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A failed append: the shard answers what it held with NOT_COORDINATOR; every other waiting
/// request gets it too (its reply sender is dropped); the caller reloads.
fn fail(
    shard: &mut GroupCoordinatorShard,
    append_id: AppendId,
    error: GroupError,
    waiting: &mut HashMap<RequestId, oneshot::Sender<GroupResponse>>,
    status: &AtomicU8,
) -> ServeOutcome {
    status.store(LOADING, Ordering::SeqCst);
    shard.handle_append_failed_with(append_id, error);
    while let Some(action) = shard.poll_action() {
        if let Action::Respond {
            request_id,
            response,
        } = action
            && let Some(reply) = waiting.remove(&request_id)
        {
            let _ = reply.send(response);
        }
    }
    waiting.clear();
    ServeOutcome::AppendFailed
}

/// Takes queued appends (at least one, up to [`MAX_COMBINED_BATCH_BYTES`]) into one batch and
/// starts appending it.
fn start_append(
    partition: i32,
    log: &Arc<dyn CoordinatorLog>,
    settings: &ShardSettings,
    queued: &mut Vec<Queued>,
) -> InFlight {
    let timeout = settings.commit_timeout;
    // A transactional append goes alone, as its producer's batch.
    if let Some((id, _, Some(txn))) = queued.first() {
        let (id, txn) = (*id, *txn);
        let (_, records, _) = queued.remove(0);
        let batch = build_batch(&records, now_ms(), Some(&txn));
        let log = Arc::clone(log);
        let task = tokio::spawn(async move {
            log.append_transactional(partition, batch, txn.guard, timeout)
                .await
        });
        return (id, true, task);
    }
    let mut records = Vec::new();
    let mut taken = 0;
    let mut size = 0usize;
    for (_, rs, txn) in queued.iter() {
        if txn.is_some() {
            break;
        }
        let append_size: usize = rs
            .iter()
            .map(|r| {
                let (k, v) = r.encode();
                k.len() + v.map_or(0, |v| v.len()) + 16
            })
            .sum();
        if taken > 0 && size + append_size > MAX_COMBINED_BATCH_BYTES {
            break;
        }
        size += append_size;
        taken += 1;
    }
    let mut last = AppendId(0);
    for (id, rs, _) in queued.drain(..taken) {
        last = id;
        records.extend(rs);
    }
    let batch = build_batch(&records, now_ms(), None);
    let log = Arc::clone(log);
    let task = tokio::spawn(async move { log.append(partition, batch, timeout).await });
    (last, false, task)
}
