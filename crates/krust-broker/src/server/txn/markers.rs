//! The marker sender (Kafka's `TransactionMarkerChannelManager`): for each ended transaction,
//! WriteTxnMarkers to the current leader of every partition it wrote to, on the inter-broker
//! listener; retried across leader changes until each partition answered, then the shard is
//! told so and writes CompleteCommit/CompleteAbort. Markers for one broker queue up while a
//! request to it is in flight and go out together in the next one (Kafka's per-broker queue).
//!
//! Per partition answer (Kafka's `TransactionMarkerRequestCompletionHandler`): NONE → done;
//! UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
//! REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR → again, with the leader looked up anew;
//! INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED → the job stops (a newer coordinator
//! or producer owns the transaction); UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION →
//! done; so is a leader that does not serve WriteTxnMarkers at all (no common version). A
//! partition whose topic or partition no longer exists is done. A connection failure retries
//! every partition of that leader.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, ResponseKind, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use krust_net::error_codes as codes;
use krust_net::{Client, ClientConfig};
use krust_txn::{MarkerJob, TopicPartition};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::runtime::Command;
use crate::server::replica_manager::ReplicaManager;

/// Pause between rounds while some partitions are not done (Kafka's marker channel polls its
/// queues every `retry.backoff.ms`, 100 ms).
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// How long one WriteTxnMarkers may take (Kafka: `request.timeout.ms`, 30 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends the markers of every shard of this broker.
pub struct MarkerSender {
    replicas: Arc<ReplicaManager>,
    node_id: i32,
    listener: String,
    /// The inter-broker listener's security.
    security: krust_net::security::ClientSecurity,
    /// One client per destination broker, by `host:port`.
    clients: Mutex<HashMap<String, Arc<Client>>>,
    /// Per destination: whether a request is in flight, and the markers waiting for the next
    /// one (Kafka's per-broker marker queue, drained into one request).
    queues: Mutex<HashMap<String, (bool, Vec<Queued>)>>,
    /// The coordinator's metrics (shared with the shard tasks).
    stats: Arc<TxnCoordinatorStats>,
}

/// How long `partition-load-time-*` remembers a load: Kafka's sensor keeps 2 samples of 30 s.
const LOAD_TIME_WINDOW: Duration = Duration::from_secs(60);

/// The transaction coordinator's metrics, with Kafka 3.9's meaning.
#[derive(Debug, Default)]
pub struct TxnCoordinatorStats {
    /// Markers (one per transaction and partition) waiting because their partition has no
    /// leader, or its leader no address on the inter-broker listener (Kafka's
    /// `TransactionMarkerChannelManager` `UnknownDestinationQueueSize`).
    unknown_destination: std::sync::atomic::AtomicI64,
    /// CompleteCommit/CompleteAbort records whose `__transaction_state` append failed
    /// retriably, waiting to be appended again (Kafka's `LogAppendRetryQueueSize`): the sum
    /// over this broker's shards.
    log_append_retries: std::sync::atomic::AtomicI64,
    /// When each recent `__transaction_state` partition load ended, and how long it took (ms).
    loads: Mutex<std::collections::VecDeque<(std::time::Instant, f64)>>,
}

impl TxnCoordinatorStats {
    /// `UnknownDestinationQueueSize`.
    #[must_use]
    pub fn unknown_destination_queue_size(&self) -> i64 {
        self.unknown_destination
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `LogAppendRetryQueueSize`.
    #[must_use]
    pub fn log_append_retry_queue_size(&self) -> i64 {
        self.log_append_retries
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A shard's retry queue changed by `delta`.
    pub(super) fn add_log_append_retries(&self, delta: i64) {
        if delta != 0 {
            self.log_append_retries
                .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn add_unknown_destination(&self, delta: i64) {
        if delta != 0 {
            self.unknown_destination
                .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A partition load that took `took`.
    pub fn record_load(&self, took: Duration) {
        let mut loads = self
            .loads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        loads.retain(|(at, _)| now.duration_since(*at) < LOAD_TIME_WINDOW);
        loads.push_back((now, took.as_secs_f64() * 1000.0));
    }

    /// `partition-load-time-max` and `partition-load-time-avg` (ms) over the loads of the last
    /// minute (Kafka: its sensor's two 30-second samples); NaN without a load, as Kafka's
    /// `Max` and `Avg` answer for no events.
    #[must_use]
    pub fn partition_load_time(&self) -> (f64, f64) {
        let loads = self
            .loads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        let recent: Vec<f64> = loads
            .iter()
            .filter(|(at, _)| now.duration_since(*at) < LOAD_TIME_WINDOW)
            .map(|(_, ms)| *ms)
            .collect();
        if recent.is_empty() {
            return (f64::NAN, f64::NAN);
        }
        let max = recent.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        #[allow(clippy::cast_precision_loss)] // a handful of loads
        let avg = recent.iter().sum::<f64>() / recent.len() as f64;
        (max, avg)
    }
}

/// A marker waiting to go to one broker, and where its partitions' answers go.
struct Queued {
    marker: WritableTxnMarker,
    partitions: Vec<TopicPartition>,
    reply: oneshot::Sender<Result<Vec<(TopicPartition, i16)>, SendError>>,
}

/// Why a request to a leader got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendError {
    /// The leader does not serve WriteTxnMarkers.
    Unsupported,
    /// Connection failure or timeout: retry.
    Retriable,
}

impl std::fmt::Debug for MarkerSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerSender")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

enum Outcome {
    Done,
    Retry,
    Stop,
}

fn outcome(code: i16) -> Outcome {
    match code {
        codes::NONE | codes::UNSUPPORTED_FOR_MESSAGE_FORMAT | codes::UNSUPPORTED_VERSION => {
            Outcome::Done
        }
        codes::INVALID_PRODUCER_EPOCH | codes::TRANSACTION_COORDINATOR_FENCED => Outcome::Stop,
        // The retriable ones, and anything unexpected: try again (Kafka treats the rest as
        // fatal to the broker; krust keeps the job and says so).
        _ => Outcome::Retry,
    }
}

impl MarkerSender {
    /// For this broker (`node_id`), sending on `inter.broker.listener.name` with its
    /// security.
    #[must_use]
    pub fn new(
        replicas: Arc<ReplicaManager>,
        node_id: i32,
        listener: String,
        security: krust_net::security::ClientSecurity,
    ) -> Self {
        MarkerSender {
            replicas,
            node_id,
            listener,
            security,
            clients: Mutex::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            stats: Arc::new(TxnCoordinatorStats::default()),
        }
    }

    /// The coordinator's metrics.
    #[must_use]
    pub fn stats(&self) -> &Arc<TxnCoordinatorStats> {
        &self.stats
    }

    fn client(&self, addr: &str) -> Arc<Client> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(clients.entry(addr.to_owned()).or_insert_with(|| {
            Arc::new(Client::new(
                addr.to_owned(),
                ClientConfig {
                    client_id: format!("broker-{}-txn-marker-sender", self.node_id),
                    request_timeout: REQUEST_TIMEOUT,
                    negotiate_api_versions: true,
                    security: self.security.clone(),
                    ..ClientConfig::default()
                },
            ))
        }))
    }

    /// Starts writing `job`'s markers; `shard` gets [`Command::MarkersWritten`] once all are
    /// written. The job ends without it when the shard is gone (unloaded) or a partition
    /// answered that the transaction moved on.
    pub(super) fn spawn_job(self: &Arc<Self>, job: MarkerJob, shard: mpsc::Sender<Command>) {
        let sender = Arc::clone(self);
        tokio::spawn(async move { sender.run_job(job, shard).await });
    }

    async fn run_job(self: Arc<Self>, job: MarkerJob, shard: mpsc::Sender<Command>) {
        // This job's markers counted in `UnknownDestinationQueueSize`, taken back at its end.
        let mut unknown = 0i64;
        Arc::clone(&self)
            .write_markers(job, shard, &mut unknown)
            .await;
        self.stats.add_unknown_destination(-unknown);
    }

    async fn write_markers(
        self: Arc<Self>,
        job: MarkerJob,
        shard: mpsc::Sender<Command>,
        unknown: &mut i64,
    ) {
        let mut remaining: BTreeSet<TopicPartition> = job.partitions.clone();
        loop {
            if shard.is_closed() {
                debug!(transactional_id = %job.transactional_id, "shard unloaded: markers left to the next coordinator");
                return;
            }
            let image = self.replicas.image();
            let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
            let mut no_destination = 0i64;
            for tp in remaining.clone() {
                let registration = image
                    .topics
                    .topic_by_name(&tp.topic)
                    .and_then(|t| t.partitions.get(&tp.partition));
                match registration {
                    None => {
                        info!(topic = %tp.topic, partition = tp.partition, "partition gone: no marker needed");
                        remaining.remove(&tp);
                    }
                    Some(r) if r.leader < 0 => no_destination += 1,
                    Some(r) => by_leader.entry(r.leader).or_default().push(tp),
                }
            }
            // Leaders without an address on the listener count as unknown destinations too.
            let mut addressed = Vec::new();
            for (leader, tps) in by_leader {
                let addr = image
                    .cluster
                    .broker(leader)
                    .and_then(|b| b.listeners.get(&self.listener))
                    .map(|e| format!("{}:{}", e.host, e.port));
                match addr {
                    Some(addr) => addressed.push((leader, addr, tps)),
                    None => no_destination += i64::try_from(tps.len()).unwrap_or(i64::MAX),
                }
            }
            self.stats
                .add_unknown_destination(no_destination - *unknown);
            *unknown = no_destination;
            // Every leader's marker is queued before any answer is awaited: the requests to
            // the leaders are in flight together (Kafka's channel drains every broker's queue
            // in each round), not one replication wait after another.
            let pending: Vec<_> = addressed
                .into_iter()
                .map(|(leader, addr, tps)| {
                    let answer = self.enqueue(&addr, &job, &tps);
                    (leader, addr, tps, answer)
                })
                .collect();
            for (leader, addr, tps, answer) in pending {
                match answer.await.unwrap_or(Err(SendError::Retriable)) {
                    Ok(answers) => {
                        for (tp, code) in answers {
                            match outcome(code) {
                                Outcome::Done => {
                                    remaining.remove(&tp);
                                }
                                Outcome::Retry => {
                                    debug!(leader, topic = %tp.topic, partition = tp.partition, code, "marker to retry");
                                }
                                Outcome::Stop => {
                                    warn!(transactional_id = %job.transactional_id, leader,
                                        topic = %tp.topic, partition = tp.partition, code,
                                        "marker refused: the transaction has moved on; not completing it");
                                    return;
                                }
                            }
                        }
                    }
                    Err(SendError::Unsupported) => {
                        // Kafka treats UNSUPPORTED_VERSION as done: a leader that cannot write
                        // markers must not hold the transaction open forever.
                        warn!(leader, %addr, transactional_id = %job.transactional_id,
                            "the leader does not serve WriteTxnMarkers; its partitions get no marker");
                        for tp in &tps {
                            remaining.remove(tp);
                        }
                    }
                    Err(SendError::Retriable) => {
                        debug!(leader, %addr, "WriteTxnMarkers failed; retrying");
                    }
                }
            }
            if remaining.is_empty() {
                let _ = shard
                    .send(Command::MarkersWritten {
                        transactional_id: job.transactional_id.clone(),
                        producer_id: job.producer_id,
                        producer_epoch: job.producer_epoch,
                    })
                    .await;
                return;
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Queues the job's marker for `tps` to `addr`; the receiver gets the answer of the request
    /// that carries it, per partition (a partition missing from the answer counts as
    /// retriable; a dropped sender means the request failed).
    fn enqueue(
        self: &Arc<Self>,
        addr: &str,
        job: &MarkerJob,
        tps: &[TopicPartition],
    ) -> oneshot::Receiver<Result<Vec<(TopicPartition, i16)>, SendError>> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in tps {
            topics.entry(&tp.topic).or_default().push(tp.partition);
        }
        let marker = WritableTxnMarker::default()
            .with_producer_id(ProducerId(job.producer_id))
            .with_producer_epoch(job.producer_epoch)
            .with_transaction_result(job.commit)
            .with_coordinator_epoch(job.coordinator_epoch)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        WritableTxnMarkerTopic::default()
                            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                            .with_partition_indexes(partitions)
                    })
                    .collect(),
            );
        let (reply, answer) = oneshot::channel();
        let start_drain = {
            let mut queues = self.lock_queues();
            let (in_flight, queued) = queues.entry(addr.to_owned()).or_default();
            queued.push(Queued {
                marker,
                partitions: tps.to_vec(),
                reply,
            });
            !std::mem::replace(in_flight, true)
        };
        if start_drain {
            let sender = Arc::clone(self);
            let addr = addr.to_owned();
            tokio::spawn(async move { sender.drain(addr).await });
        }
        answer
    }

    fn lock_queues(&self) -> std::sync::MutexGuard<'_, HashMap<String, (bool, Vec<Queued>)>> {
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends everything queued for `addr`, one request at a time, each carrying every marker
    /// queued meanwhile, until the queue is empty.
    async fn drain(&self, addr: String) {
        loop {
            let batch: Vec<Queued> = {
                let mut queues = self.lock_queues();
                let Some((in_flight, queued)) = queues.get_mut(&addr) else {
                    return;
                };
                if queued.is_empty() {
                    *in_flight = false;
                    return;
                }
                std::mem::take(queued)
            };
            let request = WriteTxnMarkersRequest::default()
                .with_markers(batch.iter().map(|q| q.marker.clone()).collect());
            let client = self.client(&addr);
            match client.send_latest(request, (0, 1)).await {
                Ok((_, ResponseKind::WriteTxnMarkers(r))) => {
                    for (i, q) in batch.into_iter().enumerate() {
                        // Kafka answers the markers in request order.
                        let answered = r
                            .markers
                            .get(i)
                            .filter(|m| m.producer_id == q.marker.producer_id);
                        let mut answers: Vec<(TopicPartition, i16)> = q
                            .partitions
                            .iter()
                            .map(|tp| (tp.clone(), codes::REQUEST_TIMED_OUT))
                            .collect();
                        for t in answered.iter().flat_map(|m| m.topics.iter()) {
                            for p in &t.partitions {
                                if let Some(a) = answers.iter_mut().find(|(tp, _)| {
                                    tp.topic == t.name.0.as_str()
                                        && tp.partition == p.partition_index
                                }) {
                                    a.1 = p.error_code;
                                }
                            }
                        }
                        let _ = q.reply.send(Ok(answers));
                    }
                }
                Ok(_) => {
                    for q in batch {
                        let _ = q.reply.send(Err(SendError::Retriable));
                    }
                }
                Err(e) => {
                    let error = match e {
                        krust_net::ClientError::NoCommonVersion { .. } => SendError::Unsupported,
                        _ => SendError::Retriable,
                    };
                    if error == SendError::Retriable {
                        debug!(%addr, error = %e, "WriteTxnMarkers failed");
                        client.disconnect().await;
                    }
                    for q in batch {
                        let _ = q.reply.send(Err(error));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_times_are_nan_without_a_load_then_max_and_average() {
        let stats = TxnCoordinatorStats::default();
        let (max, avg) = stats.partition_load_time();
        assert!(
            max.is_nan() && avg.is_nan(),
            "Kafka's Max/Avg of no event: NaN"
        );
        stats.record_load(Duration::from_millis(10));
        stats.record_load(Duration::from_millis(30));
        let (max, avg) = stats.partition_load_time();
        assert!(
            (max - 30.0).abs() < 1e-9 && (avg - 20.0).abs() < 1e-9,
            "{max} {avg}"
        );
        stats.add_unknown_destination(3);
        stats.add_unknown_destination(-2);
        assert_eq!(stats.unknown_destination_queue_size(), 1);
    }
}
