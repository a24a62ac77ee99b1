//! One tokio task per loaded `__transaction_state` partition: it loads the partition into a
//! [`TxnCoordinatorShard`], then feeds it requests and timer ticks in real time, writes the
//! records it emits (one append in flight, later ones combined into the next batch), answers
//! requests, and hands marker jobs to the [`MarkerSender`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use krust_log::batch::{MAX_BATCH_BYTES, RecordBatchBuilder};
use krust_log::legacy::{LogEntry, read_log_entries};
use krust_metadata::image::topics::TopicPartition as ImageTopicPartition;
use krust_txn::{
    Action, AppendId, ListedTxn, PartitionVerdict, Reply, RequestId, TopicPartition, TxnConfig,
    TxnCoordinatorShard, TxnDescription, TxnError, TxnRecordError, TxnState,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{error, warn};

use super::TRANSACTION_STATE_TOPIC_NAME;
use super::markers::{MarkerSender, TxnCoordinatorStats};
use crate::error::PartitionError;
use crate::server::replica_manager::{ReplicaManager, lock};

/// Shard status: reading its partition; requests get COORDINATOR_LOAD_IN_PROGRESS.
pub(super) const LOADING: u8 = 0;
/// Shard status: serving.
pub(super) const ACTIVE: u8 = 1;
/// Shard status: unloaded or failed to load; requests get NOT_COORDINATOR.
pub(super) const STOPPED: u8 = 2;

/// Commands queued for one shard before senders wait (as the group shards).
const SHARD_QUEUE_CAPACITY: usize = 500;

/// Bytes read per step while loading (`transaction.state.log.load.buffer.size` default).
const LOAD_BUFFER_BYTES: usize = 5_242_880;

/// Wall time in ms: the coordinator stores timestamps in records, as Kafka.
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A request for a shard, with where its answer goes. A dropped sender means NOT_COORDINATOR.
pub(super) enum Command {
    InitProducerId {
        transactional_id: String,
        timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        new_producer_id: Option<i64>,
        reply: oneshot::Sender<Result<Reply, TxnError>>,
    },
    AddPartitions {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TopicPartition>,
        reply: oneshot::Sender<Result<Reply, TxnError>>,
    },
    Verify {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TopicPartition>,
        reply: oneshot::Sender<Result<Vec<PartitionVerdict>, TxnError>>,
    },
    EndTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        reply: oneshot::Sender<Result<Reply, TxnError>>,
    },
    Describe {
        transactional_id: String,
        reply: oneshot::Sender<Result<TxnDescription, TxnError>>,
    },
    List {
        states: Option<BTreeSet<TxnState>>,
        producer_ids: BTreeSet<i64>,
        min_duration_ms: i64,
        reply: oneshot::Sender<Vec<ListedTxn>>,
    },
    /// Whether InitProducerId for the id needs a fresh producer id.
    NeedsProducerId {
        transactional_id: String,
        reply: oneshot::Sender<bool>,
    },
    /// Every marker of a job was written.
    MarkersWritten {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
    },
}

/// The coordinator's handle on one shard task.
pub(super) struct ShardSlot {
    /// The leader epoch this broker leads the partition in (the coordinator epoch).
    pub leader_epoch: i32,
    /// [`LOADING`], [`ACTIVE`] or [`STOPPED`].
    pub status: Arc<AtomicU8>,
    /// Commands in.
    pub commands: mpsc::Sender<Command>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ShardSlot {
    /// Spawns the task for `partition`: load, then serve.
    pub fn spawn(
        runtime: &tokio::runtime::Handle,
        partition: i32,
        leader_epoch: i32,
        replicas: Arc<ReplicaManager>,
        config: TxnConfig,
        markers: Arc<MarkerSender>,
    ) -> ShardSlot {
        let status = Arc::new(AtomicU8::new(LOADING));
        let (commands, rx) = mpsc::channel(SHARD_QUEUE_CAPACITY);
        let (stop, stop_rx) = watch::channel(false);
        let task = runtime.spawn(run_shard(
            partition,
            leader_epoch,
            replicas,
            config,
            markers,
            commands.clone(),
            rx,
            stop_rx,
            Arc::clone(&status),
        ));
        ShardSlot {
            leader_epoch,
            status,
            commands,
            stop,
            task,
        }
    }

    /// Unloads: requests from now on get NOT_COORDINATOR, so do those the task holds, and
    /// its marker jobs stop.
    pub fn unload(self) -> JoinHandle<()> {
        self.status.store(STOPPED, Ordering::SeqCst);
        let _ = self.stop.send(true);
        self.task
    }
}

/// Why loading a shard failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadError {
    /// The partition could not be read.
    #[error("reading the partition: {0}")]
    Partition(#[from] PartitionError),
    /// A batch could not be read.
    #[error("unreadable batch before offset {next_offset}: {error}")]
    Batch {
        next_offset: i64,
        error: krust_log::batch::BatchError,
    },
    /// A record Kafka 3.9 would not have written.
    #[error("record in the batch ending at offset {next_offset}: {error}")]
    Record {
        next_offset: i64,
        error: TxnRecordError,
    },
    /// The log did not advance.
    #[error("the log did not advance at offset {0}")]
    Stuck(i64),
}

fn state_tp(partition: i32) -> ImageTopicPartition {
    ImageTopicPartition {
        topic: TRANSACTION_STATE_TOPIC_NAME.to_owned(),
        partition,
    }
}

/// Reads `__transaction_state-partition` from its log start to its log end into a new shard
/// (Kafka's `TransactionStateManager.loadTransactionMetadata`). Blocking IO.
fn load_shard(
    replicas: &ReplicaManager,
    partition: i32,
    leader_epoch: i32,
    config: &TxnConfig,
    now_ms: i64,
) -> Result<TxnCoordinatorShard, LoadError> {
    let mut shard = TxnCoordinatorShard::new(partition, leader_epoch, config.clone(), now_ms);
    let hosted = replicas
        .partition(&state_tp(partition))
        .ok_or(PartitionError::NotLeaderOrFollower)?;
    let mut offset = 0i64;
    let mut end: Option<i64> = None;
    loop {
        let (records, log_start, log_end) = {
            let guard = lock(&hosted);
            if !guard.is_leader() {
                return Err(PartitionError::NotLeaderOrFollower.into());
            }
            let log = guard.log();
            let start = log.log_start_offset();
            let log_end = *end.get_or_insert(log.log_end_offset());
            let from = offset.max(start);
            let records = if from >= log_end {
                Bytes::new()
            } else {
                log.read_up_to(from, LOAD_BUFFER_BYTES, log_end)
                    .map_err(PartitionError::from)?
                    .bytes
            };
            (records, start, log_end)
        };
        offset = offset.max(log_start);
        if offset >= log_end || records.is_empty() {
            break;
        }
        let (entries, stop) = read_log_entries(records, MAX_BATCH_BYTES);
        let before = offset;
        for entry in entries {
            if entry.next_offset() <= offset {
                continue;
            }
            offset = entry.next_offset();
            let batch_error = |error| LoadError::Batch {
                next_offset: offset,
                error,
            };
            let records: Vec<(Option<Bytes>, Option<Bytes>)> = match &entry {
                LogEntry::Batch(batch) if batch.is_control() => continue,
                LogEntry::Batch(batch) => batch
                    .records()
                    .map_err(batch_error)?
                    .into_iter()
                    .map(|r| (r.key, r.value))
                    .collect(),
                LogEntry::Legacy(legacy) => legacy
                    .records()
                    .map_err(batch_error)?
                    .into_iter()
                    .map(|r| (r.key, r.value))
                    .collect(),
            };
            for (key, value) in records {
                shard
                    .replay(key.as_deref(), value.as_deref())
                    .map_err(|error| LoadError::Record {
                        next_offset: offset,
                        error,
                    })?;
            }
        }
        if offset <= before {
            if let Some(error) = stop {
                return Err(LoadError::Batch {
                    next_offset: offset,
                    error,
                });
            }
            return Err(LoadError::Stuck(offset));
        }
    }
    shard.finish_load(now_ms);
    Ok(shard)
}

#[allow(clippy::too_many_arguments)]
async fn run_shard(
    partition: i32,
    leader_epoch: i32,
    replicas: Arc<ReplicaManager>,
    config: TxnConfig,
    markers: Arc<MarkerSender>,
    self_commands: mpsc::Sender<Command>,
    mut commands: mpsc::Receiver<Command>,
    mut stop: watch::Receiver<bool>,
    status: Arc<AtomicU8>,
) {
    let load_started = std::time::Instant::now();
    let load = {
        let replicas = Arc::clone(&replicas);
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            load_shard(&replicas, partition, leader_epoch, &config, now_ms())
        })
    };
    let shard = tokio::select! {
        _ = stop.wait_for(|s| *s) => return,
        loaded = load => match loaded {
            Ok(Ok(shard)) => shard,
            Ok(Err(e)) => {
                error!(partition, error = %e,
                    "cannot load __transaction_state partition; its transactional ids are not served");
                status.store(STOPPED, Ordering::SeqCst);
                return;
            }
            Err(e) => {
                error!(partition, error = %e, "transaction coordinator load task failed");
                status.store(STOPPED, Ordering::SeqCst);
                return;
            }
        },
    };
    if *stop.borrow() {
        return;
    }
    markers.stats().record_load(load_started.elapsed());
    status.store(ACTIVE, Ordering::SeqCst);
    serve(
        partition,
        &replicas,
        shard,
        &markers,
        &self_commands,
        &mut commands,
        &mut stop,
    )
    .await;
    status.store(STOPPED, Ordering::SeqCst);
}

type Waiting = HashMap<RequestId, oneshot::Sender<Result<Reply, TxnError>>>;

/// The append in flight: the appends it carries and the task doing it.
type InFlight = (Vec<AppendId>, JoinHandle<Result<(), PartitionError>>);

/// An append waiting its turn: id, key, value, timeout (ms).
type Queued = (AppendId, Bytes, Option<Bytes>, i32);

async fn serve(
    partition: i32,
    replicas: &Arc<ReplicaManager>,
    mut shard: TxnCoordinatorShard,
    markers: &Arc<MarkerSender>,
    self_commands: &mpsc::Sender<Command>,
    commands: &mut mpsc::Receiver<Command>,
    stop: &mut watch::Receiver<bool>,
) {
    let mut next_request = 0u64;
    let mut waiting: Waiting = HashMap::new();
    let mut queued: Vec<Queued> = Vec::new();
    let mut in_flight: Option<InFlight> = None;
    // This shard's part of `LogAppendRetryQueueSize`, taken back when it stops.
    let mut retries = RetryQueueGauge {
        stats: Arc::clone(markers.stats()),
        reported: 0,
    };
    loop {
        retries.set(shard.log_append_retry_queue_size());
        while let Some(action) = shard.poll_action() {
            match action {
                Action::Append {
                    id,
                    key,
                    value,
                    timeout_ms,
                } => queued.push((id, key, value, timeout_ms)),
                Action::Respond { request, result } => {
                    if let Some(reply) = waiting.remove(&request) {
                        let _ = reply.send(result);
                    }
                }
                Action::WriteMarkers(job) => markers.spawn_job(job, self_commands.clone()),
            }
        }
        if in_flight.is_none() && !queued.is_empty() {
            in_flight = Some(start_append(partition, replicas, &mut queued));
        }
        let now = now_ms();
        let sleep = Duration::from_millis(
            u64::try_from(shard.poll_timeout().saturating_sub(now))
                .unwrap_or(0)
                .max(1),
        );
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            command = commands.recv() => {
                let Some(command) = command else { return };
                let now = now_ms();
                let mut id = || {
                    next_request += 1;
                    RequestId(next_request)
                };
                match command {
                    Command::InitProducerId { transactional_id, timeout_ms, producer_id, producer_epoch, new_producer_id, reply } => {
                        let r = id();
                        waiting.insert(r, reply);
                        shard.handle_init_producer_id(now, r, &transactional_id, timeout_ms, producer_id, producer_epoch, new_producer_id);
                    }
                    Command::AddPartitions { transactional_id, producer_id, producer_epoch, partitions, reply } => {
                        let r = id();
                        waiting.insert(r, reply);
                        shard.handle_add_partitions(now, r, &transactional_id, producer_id, producer_epoch, &partitions);
                    }
                    Command::EndTxn { transactional_id, producer_id, producer_epoch, commit, reply } => {
                        let r = id();
                        waiting.insert(r, reply);
                        shard.handle_end_txn(now, r, &transactional_id, producer_id, producer_epoch, commit);
                    }
                    Command::Verify { transactional_id, producer_id, producer_epoch, partitions, reply } => {
                        let _ = reply.send(shard.verify_partitions(&transactional_id, producer_id, producer_epoch, &partitions));
                    }
                    Command::NeedsProducerId { transactional_id, reply } => {
                        let _ = reply.send(shard.needs_new_producer_id(&transactional_id));
                    }
                    Command::Describe { transactional_id, reply } => {
                        let _ = reply.send(shard.describe(&transactional_id));
                    }
                    Command::List { states, producer_ids, min_duration_ms, reply } => {
                        let _ = reply.send(shard.list(states.as_ref(), &producer_ids, min_duration_ms, now));
                    }
                    Command::MarkersWritten { transactional_id, producer_id, producer_epoch } => {
                        shard.handle_markers_written(&transactional_id, producer_id, producer_epoch);
                    }
                }
            }
            result = async {
                match in_flight.as_mut() {
                    Some((_, task)) => task.await,
                    None => std::future::pending().await,
                }
            } => {
                let Some((ids, _)) = in_flight.take() else { continue };
                let now = now_ms();
                let code = match result {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.response_error().code()),
                    Err(_) => Some(krust_net::error_codes::NOT_LEADER_OR_FOLLOWER),
                };
                for id in ids {
                    match code {
                        None => shard.handle_append_committed(now, id),
                        Some(code) => shard.handle_append_failed(now, id, code),
                    }
                }
                if let Some(code) = code {
                    warn!(partition, code, "__transaction_state append failed");
                }
            }
            () = tokio::time::sleep(sleep) => shard.handle_timeout(now_ms()),
        }
    }
}

/// A shard's contribution to the broker's `LogAppendRetryQueueSize`, removed on drop (the
/// shard stopped: its retries are the next coordinator's).
struct RetryQueueGauge {
    stats: Arc<TxnCoordinatorStats>,
    reported: i64,
}

impl RetryQueueGauge {
    fn set(&mut self, size: usize) {
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        self.stats.add_log_append_retries(size - self.reported);
        self.reported = size;
    }
}

impl Drop for RetryQueueGauge {
    fn drop(&mut self) {
        self.stats.add_log_append_retries(-self.reported);
    }
}

/// Takes every queued append into one batch (acks=-1, uncompressed, CreateTime now) and
/// starts appending it, with the longest of their timeouts.
fn start_append(
    partition: i32,
    replicas: &Arc<ReplicaManager>,
    queued: &mut Vec<Queued>,
) -> InFlight {
    let now = now_ms();
    let mut builder = RecordBatchBuilder::new(0);
    let mut ids = Vec::new();
    let mut timeout_ms = 0;
    for (id, key, value, t) in queued.drain(..) {
        builder.append_kv(now, Some(key), value);
        ids.push(id);
        timeout_ms = timeout_ms.max(t);
    }
    let batch = builder.build().into_bytes();
    let replicas = Arc::clone(replicas);
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0).max(1));
    let task = tokio::spawn(async move {
        replicas
            .append_records(&state_tp(partition), batch, -1, timeout)
            .await
            .map(|_| ())
    });
    (ids, task)
}
