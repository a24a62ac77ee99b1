//! Follower fetchers (Kafka 3.9 `ReplicaFetcherManager`, `AbstractFetcherThread`,
//! `ReplicaFetcherThread`): one task per source broker (`num.replica.fetchers` = 1) fetching
//! every partition this broker follows there in one Fetch request.
//!
//! Per partition the task keeps Kafka's `PartitionFetchState`: the fetch offset (our log end),
//! the leader epoch it follows, the last fetched epoch (Fetch v12+ divergence detection,
//! KIP-320), whether it must truncate before fetching, and a back-off deadline.
//!
//! - A partition starts **truncating**: with no epoch in its log it truncates to its high
//!   watermark (Kafka's `truncateToHighWatermark`); with one, a leader serving Fetch v12+
//!   checks divergence on the fetch itself, an older leader is asked OffsetForLeaderEpoch
//!   first (KIP-101/279).
//! - A response's diverging epoch truncates (`Partition::truncate_to_epoch_end`); records are
//!   appended as they are, then the follower takes the leader's HW (bounded by its LEO) and
//!   log start offset; `ReplicaManager::partition_changed` wakes waiters.
//! - OFFSET_OUT_OF_RANGE: ListOffsets to the leader (Kafka's `fetchOffsetAndTruncate`): a
//!   leader end below ours truncates to it; a leader start beyond our end empties the log and
//!   restarts it there.
//! - FENCED_LEADER_EPOCH drops the partition until the metadata brings a new epoch (Kafka's
//!   `onPartitionFenced`); other partition errors and failed requests back off
//!   `replica.fetch.backoff.ms`.
//!
//! A response is applied only if the partition is still fetched in the same epoch from the
//! same offset (a re-targeting or truncation meanwhile makes it stale).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, OffsetForLeaderEpochRequest,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_log::batch::{MAX_BATCH_BYTES, parse_all, peek_batch_size};
use krust_log::leader_epoch::{EpochEndOffset, UNDEFINED_EPOCH};
use krust_metadata::image::topics::TopicPartition;
use krust_net::{Client, ClientConfig, ClientError};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::{Context, FollowedPartition, now_ms};
use crate::{Partition, PartitionError};

/// Fetch versions a follower uses: v12 brings diverging epochs (KIP-320) and v13 topic ids;
/// v17 is what Kafka 3.9 replica fetchers send (it only adds the KIP-853 directory id).
const FETCH_VERSIONS: (i16, i16) = (12, 17);
/// Leaders that predate Fetch v12 (no diverging epoch: OffsetForLeaderEpoch first), down to
/// v4 (`isolation_level`, record batches v2).
const OLD_FETCH_VERSIONS: (i16, i16) = (4, 11);
/// OffsetForLeaderEpoch with `replica_id` (v3+).
const OFFSET_FOR_LEADER_EPOCH_VERSIONS: (i16, i16) = (3, 4);
/// ListOffsets with `current_leader_epoch` (v4+).
const LIST_OFFSETS_VERSIONS: (i16, i16) = (4, 9);
/// ListOffsets' latest-offset and earliest-offset timestamps.
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
/// Shortest time given to connecting to a leader before its address is looked up again.
const MIN_CONNECT_WAIT: Duration = Duration::from_millis(500);
/// A fetcher with nothing to fetch re-checks this often (a new partition also wakes it).
const IDLE_WAIT: Duration = Duration::from_secs(1);

static GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// Kafka's `PartitionFetchState`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FetchState {
    topic_id: Uuid,
    leader_epoch: i32,
    fetch_offset: i64,
    last_fetched_epoch: Option<i32>,
    /// Must truncate (to the HW or by OffsetForLeaderEpoch) before fetching.
    truncating: bool,
    delayed_until: Option<Instant>,
    /// Changes whenever the state is replaced or moved by something other than a fetch
    /// response, so answers to requests sent before are dropped.
    generation: u64,
}

impl FetchState {
    fn ready(&self, now: Instant) -> bool {
        self.delayed_until.is_none_or(|at| at <= now)
    }
}

/// One source broker's partitions, shared by its task and the manager.
struct FetcherShared {
    leader_id: i32,
    partitions: Mutex<BTreeMap<TopicPartition, FetchState>>,
    wake: Notify,
}

impl FetcherShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TopicPartition, FetchState>> {
        self.partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state of `tp` if it is still the one of `generation`.
    fn update_if_current(
        &self,
        tp: &TopicPartition,
        generation: u64,
        f: impl FnOnce(&mut FetchState),
    ) {
        if let Some(state) = self.lock().get_mut(tp)
            && state.generation == generation
        {
            f(state);
        }
    }

    fn delay(&self, tp: &TopicPartition, generation: u64, backoff: Duration) {
        self.update_if_current(tp, generation, |s| {
            s.delayed_until = Some(Instant::now() + backoff);
        });
    }
}

struct FetcherHandle {
    shared: Arc<FetcherShared>,
    task: JoinHandle<()>,
}

/// The fetchers of this broker, by source broker id.
pub(super) struct FetcherManager {
    ctx: Arc<Context>,
    fetchers: Mutex<BTreeMap<i32, FetcherHandle>>,
}

impl FetcherManager {
    pub(super) fn new(ctx: Arc<Context>) -> Self {
        FetcherManager {
            ctx,
            fetchers: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, FetcherHandle>> {
        self.fetchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kafka's `addFetcherForPartitions`: each partition moves to its leader's fetcher.
    pub(super) fn add_partitions(&self, partitions: Vec<FollowedPartition>) {
        let mut fetchers = self.lock();
        for followed in partitions {
            if followed.leader_id == self.ctx.node_id || followed.leader_id < 0 {
                // No leader to fetch from (or it is us): stop fetching until one is elected.
                for handle in fetchers.values() {
                    handle.shared.lock().remove(&followed.tp);
                }
                continue;
            }
            for (id, handle) in fetchers.iter() {
                if *id != followed.leader_id {
                    handle.shared.lock().remove(&followed.tp);
                }
            }
            let Some(initial) = self.initial_state(&followed) else {
                continue;
            };
            let ctx = self.ctx.clone();
            let handle = fetchers.entry(followed.leader_id).or_insert_with(|| {
                let shared = Arc::new(FetcherShared {
                    leader_id: followed.leader_id,
                    partitions: Mutex::new(BTreeMap::new()),
                    wake: Notify::new(),
                });
                info!(
                    node_id = ctx.node_id,
                    leader_id = followed.leader_id,
                    "starting replica fetcher"
                );
                let task = tokio::spawn(run_fetcher(ctx, shared.clone()));
                FetcherHandle { shared, task }
            });
            {
                let mut states = handle.shared.lock();
                let keep = states.get(&followed.tp).is_some_and(|s| {
                    s.leader_epoch == followed.leader_epoch && s.topic_id == followed.topic_id
                });
                if !keep {
                    states.insert(followed.tp.clone(), initial);
                }
            }
            handle.shared.wake.notify_one();
        }
        Self::stop_idle(&mut fetchers);
    }

    /// Where a newly followed partition starts (Kafka's `InitialFetchState`): at our log end,
    /// truncating first.
    fn initial_state(&self, followed: &FollowedPartition) -> Option<FetchState> {
        let Some(partition) = self.ctx.replicas.partition(&followed.tp) else {
            warn!(tp = ?followed.tp, "asked to follow a partition that is not hosted here");
            return None;
        };
        let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
        Some(FetchState {
            topic_id: followed.topic_id,
            leader_epoch: followed.leader_epoch,
            fetch_offset: p.log_end_offset(),
            last_fetched_epoch: p.log().leader_epoch_cache().latest_epoch(),
            truncating: true,
            delayed_until: None,
            generation: next_generation(),
        })
    }

    pub(super) fn remove_partitions(&self, partitions: &[TopicPartition]) {
        let mut fetchers = self.lock();
        for handle in fetchers.values() {
            let mut states = handle.shared.lock();
            for tp in partitions {
                states.remove(tp);
            }
        }
        Self::stop_idle(&mut fetchers);
    }

    /// Kafka's `shutdownIdleFetcherThreads`.
    fn stop_idle(fetchers: &mut BTreeMap<i32, FetcherHandle>) {
        let idle: Vec<i32> = fetchers
            .iter()
            .filter(|(_, h)| h.shared.lock().is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in idle {
            if let Some(handle) = fetchers.remove(&id) {
                debug!(leader_id = id, "stopping idle replica fetcher");
                handle.task.abort();
            }
        }
    }

    pub(super) fn partition_count(&self) -> u64 {
        self.lock()
            .values()
            .map(|h| h.shared.lock().len() as u64)
            .sum()
    }

    pub(super) async fn shutdown(&self) {
        let handles: Vec<FetcherHandle> = std::mem::take(&mut *self.lock()).into_values().collect();
        for handle in handles {
            handle.task.abort();
            if let Err(e) = handle.task.await
                && !e.is_cancelled()
            {
                warn!(error = %e, "replica fetcher failed");
            }
        }
    }
}

impl Drop for FetcherManager {
    /// Fetcher tasks never outlive their manager (a broker dropped without `shutdown`).
    fn drop(&mut self) {
        for handle in self.lock().values() {
            handle.task.abort();
        }
    }
}

/// The connection to the leader, re-made when its advertised address changes.
struct LeaderClient {
    addr: String,
    client: Arc<Client>,
}

struct Fetcher {
    ctx: Arc<Context>,
    shared: Arc<FetcherShared>,
    client: Option<LeaderClient>,
}

async fn run_fetcher(ctx: Arc<Context>, shared: Arc<FetcherShared>) {
    let mut fetcher = Fetcher {
        ctx,
        shared,
        client: None,
    };
    loop {
        fetcher.do_work().await;
    }
}

/// A partition as sent in one request.
struct Sent {
    tp: TopicPartition,
    state: FetchState,
}

impl Fetcher {
    fn backoff(&self) -> Duration {
        self.ctx.config.fetch_backoff()
    }

    fn delay_all(&self, sent: &[Sent]) {
        for s in sent {
            self.shared.delay(&s.tp, s.state.generation, self.backoff());
        }
    }

    /// The leader's `host:port` on `inter.broker.listener.name`, per the latest image.
    fn leader_addr(&self) -> Option<String> {
        let image = self.ctx.replicas.image();
        let broker = image.cluster.broker(self.shared.leader_id)?;
        let endpoint = broker
            .listeners
            .get(&self.ctx.config.inter_broker_listener_name)?;
        Some(format!("{}:{}", endpoint.host, endpoint.port))
    }

    fn client(&mut self, addr: String) -> Arc<Client> {
        if let Some(c) = &self.client
            && c.addr == addr
        {
            return c.client.clone();
        }
        let config = &self.ctx.config;
        let response_max = usize::try_from(
            config
                .replica_fetch_response_max_bytes
                .max(config.replica_fetch_max_bytes),
        )
        .unwrap_or(0);
        let client_config = ClientConfig {
            client_id: format!("broker-{}-fetcher-0", self.ctx.node_id),
            request_timeout: Duration::from_millis(
                config
                    .replica_socket_timeout_ms
                    .saturating_add(u64::try_from(config.replica_fetch_wait_max_ms).unwrap_or(0)),
            ),
            max_in_flight_requests_per_connection: 1,
            // A response may exceed the budget by one batch (KIP-74): leave room for the
            // largest batch the format allows.
            max_response_bytes: response_max.saturating_add(MAX_BATCH_BYTES),
            negotiate_api_versions: true,
            security: config.inter_broker_security.clone(),
            ..ClientConfig::default()
        };
        let client = Arc::new(Client::new(addr.clone(), client_config));
        self.client = Some(LeaderClient {
            addr,
            client: client.clone(),
        });
        client
    }

    /// Waits until a partition is ready or something changes.
    async fn idle(&self) {
        let now = Instant::now();
        let earliest = self
            .shared
            .lock()
            .values()
            .filter_map(|s| s.delayed_until)
            .filter(|&at| at > now)
            .min();
        let until = earliest.map_or(now + IDLE_WAIT, |at| at.min(now + IDLE_WAIT));
        tokio::select! {
            () = self.shared.wake.notified() => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }

    /// One round: resolve the leader, truncate what must be, send one fetch, apply it.
    async fn do_work(&mut self) {
        let now = Instant::now();
        let ready: Vec<Sent> = self
            .shared
            .lock()
            .iter()
            .filter(|(_, s)| s.ready(now))
            .map(|(tp, s)| Sent {
                tp: tp.clone(),
                state: s.clone(),
            })
            .collect();
        if ready.is_empty() {
            self.idle().await;
            return;
        }
        let Some(addr) = self.leader_addr() else {
            debug!(
                leader_id = self.shared.leader_id,
                "leader has no endpoint on the inter-broker listener yet"
            );
            self.delay_all(&ready);
            self.idle().await;
            return;
        };
        let client = self.client(addr);
        // Connecting is bounded by the back-off, not the socket timeout: a leader that moved
        // (restarted on another port) is looked up again in the image after each attempt.
        let deadline = Instant::now() + self.backoff().max(MIN_CONNECT_WAIT);
        let connection = match client.connection(deadline).await {
            Ok(c) => c,
            Err(e) => {
                warn!(leader_id = self.shared.leader_id, error = %e, "cannot reach the leader");
                self.delay_all(&ready);
                return;
            }
        };
        let (version, supports_divergence) = match connection
            .usable_version(ApiKey::Fetch, FETCH_VERSIONS)
        {
            Ok(v) => (v, true),
            Err(_) => match connection.usable_version(ApiKey::Fetch, OLD_FETCH_VERSIONS) {
                Ok(v) => (v, false),
                Err(e) => {
                    warn!(leader_id = self.shared.leader_id, error = %e, "leader serves no usable Fetch version");
                    self.delay_all(&ready);
                    return;
                }
            },
        };
        let (truncating, fetching): (Vec<Sent>, Vec<Sent>) =
            ready.into_iter().partition(|s| s.state.truncating);
        if !truncating.is_empty() {
            self.truncate(&client, truncating, supports_divergence)
                .await;
        }
        if fetching.is_empty() {
            return;
        }
        self.fetch(&client, version, fetching).await;
    }

    /// Kafka's `maybeTruncate` for partitions in the truncating state.
    async fn truncate(&self, client: &Client, partitions: Vec<Sent>, supports_divergence: bool) {
        let mut by_epoch = Vec::new();
        for s in partitions {
            match s.state.last_fetched_epoch {
                // No epoch in our log: only the HW is known to be safe.
                None => self.truncate_to_high_watermark(&s),
                // The leader checks `last_fetched_epoch` on every fetch (KIP-320).
                Some(_) if supports_divergence => {
                    self.shared
                        .update_if_current(&s.tp, s.state.generation, |st| {
                            st.truncating = false;
                        });
                }
                Some(epoch) => by_epoch.push((s, epoch)),
            }
        }
        if !by_epoch.is_empty() {
            self.truncate_by_offset_for_leader_epoch(client, by_epoch)
                .await;
        }
    }

    fn truncate_to_high_watermark(&self, s: &Sent) {
        let Some(partition) = self.ctx.replicas.partition(&s.tp) else {
            self.shared.lock().remove(&s.tp);
            return;
        };
        let result = {
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            let hw = p.high_watermark();
            p.truncate_to_epoch_end(
                EpochEndOffset {
                    leader_epoch: UNDEFINED_EPOCH,
                    end_offset: hw,
                },
                now_ms(),
            )
            .map(|end| (end, p.log().leader_epoch_cache().latest_epoch()))
        };
        self.after_truncation(s, result);
    }

    fn after_truncation(&self, s: &Sent, result: Result<(i64, Option<i32>), PartitionError>) {
        match result {
            Ok((end, epoch)) => {
                self.shared
                    .update_if_current(&s.tp, s.state.generation, |st| {
                        st.fetch_offset = end;
                        st.last_fetched_epoch = epoch;
                        st.truncating = false;
                        st.generation = next_generation();
                    });
                self.ctx.replicas.partition_changed(&s.tp);
            }
            Err(e) => {
                warn!(tp = ?s.tp, error = %e, "follower truncation failed");
                self.shared.delay(&s.tp, s.state.generation, self.backoff());
            }
        }
    }

    /// KIP-101/279: ask the leader where our latest epoch ends, then truncate there.
    async fn truncate_by_offset_for_leader_epoch(
        &self,
        client: &Client,
        partitions: Vec<(Sent, i32)>,
    ) {
        let mut topics: BTreeMap<String, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        for (s, epoch) in &partitions {
            topics.entry(s.tp.topic.clone()).or_default().push(
                OffsetForLeaderPartition::default()
                    .with_partition(s.tp.partition)
                    .with_current_leader_epoch(s.state.leader_epoch)
                    .with_leader_epoch(*epoch),
            );
        }
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(self.ctx.node_id))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        OffsetForLeaderTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(name)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let response = match client
            .send_latest(request, OFFSET_FOR_LEADER_EPOCH_VERSIONS)
            .await
        {
            Ok((_, ResponseKind::OffsetForLeaderEpoch(r))) => r,
            Ok((_, other)) => {
                warn!(?other, "unexpected answer to OffsetForLeaderEpoch");
                for (s, _) in &partitions {
                    self.shared.delay(&s.tp, s.state.generation, self.backoff());
                }
                return;
            }
            Err(e) => {
                warn!(error = %e, "OffsetForLeaderEpoch failed");
                for (s, _) in &partitions {
                    self.shared.delay(&s.tp, s.state.generation, self.backoff());
                }
                return;
            }
        };
        let mut answers = HashMap::new();
        for topic in &response.topics {
            for p in &topic.partitions {
                answers.insert(
                    TopicPartition {
                        topic: topic.topic.0.to_string(),
                        partition: p.partition,
                    },
                    p.clone(),
                );
            }
        }
        for (s, _) in &partitions {
            let Some(answer) = answers.get(&s.tp) else {
                self.shared.delay(&s.tp, s.state.generation, self.backoff());
                continue;
            };
            if answer.error_code != 0 {
                self.partition_error(s, answer.error_code);
                continue;
            }
            let Some(partition) = self.ctx.replicas.partition(&s.tp) else {
                self.shared.lock().remove(&s.tp);
                continue;
            };
            let result = {
                let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                if p.is_leader() || p.leader_epoch() != s.state.leader_epoch {
                    continue;
                }
                p.truncate_to_epoch_end(
                    EpochEndOffset {
                        leader_epoch: answer.leader_epoch,
                        end_offset: answer.end_offset,
                    },
                    now_ms(),
                )
                .map(|end| (end, p.log().leader_epoch_cache().latest_epoch()))
            };
            self.after_truncation(s, result);
        }
    }

    fn build_fetch(&self, version: i16, partitions: &[Sent]) -> FetchRequest {
        let config = &self.ctx.config;
        let mut topics: BTreeMap<(Uuid, String), Vec<FetchPartition>> = BTreeMap::new();
        for s in partitions {
            let log_start = self.ctx.replicas.partition(&s.tp).map_or(-1, |p| {
                p.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .log_start_offset()
            });
            let mut partition = FetchPartition::default()
                .with_partition(s.tp.partition)
                .with_current_leader_epoch(s.state.leader_epoch)
                .with_fetch_offset(s.state.fetch_offset)
                .with_partition_max_bytes(config.replica_fetch_max_bytes);
            if version >= 5 {
                partition.log_start_offset = log_start;
            }
            if version >= 12 {
                partition.last_fetched_epoch =
                    s.state.last_fetched_epoch.unwrap_or(UNDEFINED_EPOCH);
            }
            let key = if version >= 13 {
                (s.state.topic_id, String::new())
            } else {
                (Uuid::nil(), s.tp.topic.clone())
            };
            topics.entry(key).or_default().push(partition);
        }
        let mut request = FetchRequest::default()
            .with_max_wait_ms(config.replica_fetch_wait_max_ms)
            .with_min_bytes(config.replica_fetch_min_bytes)
            .with_max_bytes(config.replica_fetch_response_max_bytes)
            .with_isolation_level(0)
            // Sessionless full fetches (KIP-227's FINAL_EPOCH with session 0).
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|((id, name), partitions)| {
                        let mut topic = FetchTopic::default().with_partitions(partitions);
                        if version >= 13 {
                            topic.topic_id = id;
                        } else {
                            topic.topic = TopicName(StrBytes::from_string(name));
                        }
                        topic
                    })
                    .collect(),
            );
        if version >= 15 {
            // KIP-903: the leader checks the broker epoch before adding us to the ISR.
            let epoch = self
                .ctx
                .replicas
                .image()
                .cluster
                .broker(self.ctx.node_id)
                .map_or(-1, |b| b.epoch);
            request.replica_state = ReplicaState::default()
                .with_replica_id(BrokerId(self.ctx.node_id))
                .with_replica_epoch(epoch);
        } else {
            request.replica_id = BrokerId(self.ctx.node_id);
        }
        request
    }

    async fn fetch(&self, client: &Client, version: i16, partitions: Vec<Sent>) {
        let request = self.build_fetch(version, &partitions);
        let response = match client.send(request, version).await {
            Ok(ResponseKind::Fetch(r)) => r,
            Ok(other) => {
                warn!(?other, "unexpected answer to Fetch");
                self.delay_all(&partitions);
                return;
            }
            Err(e) => {
                warn!(leader_id = self.shared.leader_id, error = %e, "follower fetch failed");
                if matches!(e, ClientError::RequestTimeout { .. }) {
                    client.disconnect().await;
                }
                self.delay_all(&partitions);
                return;
            }
        };
        self.process_response(client, version, &partitions, response)
            .await;
    }

    async fn process_response(
        &self,
        client: &Client,
        version: i16,
        sent: &[Sent],
        response: FetchResponse,
    ) {
        if response.error_code != 0 {
            warn!(
                leader_id = self.shared.leader_id,
                error_code = response.error_code,
                "follower fetch failed"
            );
            self.delay_all(sent);
            return;
        }
        let by_id: HashMap<Uuid, &str> = sent
            .iter()
            .map(|s| (s.state.topic_id, s.tp.topic.as_str()))
            .collect();
        let by_tp: HashMap<&TopicPartition, &Sent> = sent.iter().map(|s| (&s.tp, s)).collect();
        for topic in response.responses {
            let name = if version >= 13 {
                match by_id.get(&topic.topic_id) {
                    Some(name) => (*name).to_string(),
                    None => continue,
                }
            } else {
                topic.topic.0.to_string()
            };
            for data in topic.partitions {
                let tp = TopicPartition {
                    topic: name.clone(),
                    partition: data.partition_index,
                };
                let Some(s) = by_tp.get(&tp) else {
                    continue;
                };
                let current = self.shared.lock().get(&tp).is_some_and(|st| {
                    st.generation == s.state.generation && st.fetch_offset == s.state.fetch_offset
                });
                if !current {
                    continue;
                }
                if data.error_code == ResponseError::OffsetOutOfRange.code() {
                    self.handle_out_of_range(client, s).await;
                } else if data.error_code != 0 {
                    self.partition_error(s, data.error_code);
                } else {
                    let diverging = (data.diverging_epoch.epoch >= 0
                        || data.diverging_epoch.end_offset >= 0)
                        .then_some(EpochEndOffset {
                            leader_epoch: data.diverging_epoch.epoch,
                            end_offset: data.diverging_epoch.end_offset,
                        });
                    self.process_partition_data(
                        s,
                        diverging,
                        data.records.unwrap_or_default(),
                        data.high_watermark,
                        data.log_start_offset,
                    );
                }
            }
        }
    }

    /// Kafka's `processPartitionData` + `truncateOnFetchResponse`.
    fn process_partition_data(
        &self,
        s: &Sent,
        diverging: Option<EpochEndOffset>,
        records: Bytes,
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) {
        let Some(partition) = self.ctx.replicas.partition(&s.tp) else {
            self.shared.lock().remove(&s.tp);
            return;
        };
        let now = now_ms();
        let result = {
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            if p.is_leader() || p.leader_epoch() != s.state.leader_epoch {
                // The publisher moved on; it re-targets or stops this fetch.
                return;
            }
            if let Some(diverging) = diverging {
                info!(tp = ?s.tp, epoch = diverging.leader_epoch, end_offset = diverging.end_offset, "leader reported a diverging epoch");
                p.truncate_to_epoch_end(diverging, now)
            } else {
                let records = whole_batches(records);
                let appended = if records.is_empty() {
                    Ok(p.log_end_offset())
                } else {
                    append_as_follower(&mut p, records, leader_high_watermark, now)
                };
                appended.and_then(|end| {
                    p.update_follower_offsets(leader_high_watermark, leader_log_start_offset)
                        .map(|()| end)
                })
            }
            .map(|end| (end, p.log().leader_epoch_cache().latest_epoch()))
            .map(|r| (r, p.take_roll_flush()))
        };
        let result = result.map(|(r, flush)| {
            crate::server::replica_manager::schedule_roll_flush(&partition, flush);
            r
        });
        match result {
            Ok((end, epoch)) => {
                let truncated = diverging.is_some();
                self.shared
                    .update_if_current(&s.tp, s.state.generation, |st| {
                        st.fetch_offset = end;
                        st.last_fetched_epoch = epoch;
                        st.delayed_until = None;
                        if truncated {
                            st.generation = next_generation();
                        }
                    });
                self.ctx.replicas.partition_changed(&s.tp);
            }
            Err(e) => {
                warn!(tp = ?s.tp, error = %e, "follower could not apply fetched data");
                self.shared.delay(&s.tp, s.state.generation, self.backoff());
            }
        }
    }

    /// Kafka's `handlePartitionsWithErrors`/`onPartitionFenced`.
    fn partition_error(&self, s: &Sent, error_code: i16) {
        let error = ResponseError::try_from_code(error_code);
        if error == Some(ResponseError::FencedLeaderEpoch) {
            info!(tp = ?s.tp, leader_epoch = s.state.leader_epoch, "fenced by the leader; waiting for new metadata");
            let mut states = self.shared.lock();
            if states
                .get(&s.tp)
                .is_some_and(|st| st.generation == s.state.generation)
            {
                states.remove(&s.tp);
            }
            return;
        }
        debug!(tp = ?s.tp, ?error, error_code, "follower fetch error; backing off");
        self.shared.delay(&s.tp, s.state.generation, self.backoff());
    }

    /// Kafka's `fetchOffsetAndTruncate` after OFFSET_OUT_OF_RANGE.
    async fn handle_out_of_range(&self, client: &Client, s: &Sent) {
        let Some(partition) = self.ctx.replicas.partition(&s.tp) else {
            self.shared.lock().remove(&s.tp);
            return;
        };
        let leader_end = match self.list_offset(client, s, LATEST_TIMESTAMP).await {
            Ok(offset) => offset,
            Err(code) => return self.partition_error(s, code),
        };
        let replica_end = partition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .log_end_offset();
        if leader_end < replica_end {
            // Only after an unclean election: the leader has less than we do.
            warn!(tp = ?s.tp, leader_end, replica_end, "leader's log ends below ours; truncating");
            let result = {
                let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                p.truncate_to_epoch_end(
                    EpochEndOffset {
                        leader_epoch: UNDEFINED_EPOCH,
                        end_offset: leader_end,
                    },
                    now_ms(),
                )
                .map(|end| (end, p.log().leader_epoch_cache().latest_epoch()))
            };
            return self.after_truncation(s, result);
        }
        let leader_start = match self.list_offset(client, s, EARLIEST_TIMESTAMP).await {
            Ok(offset) => offset,
            Err(code) => return self.partition_error(s, code),
        };
        if leader_start > replica_end {
            info!(tp = ?s.tp, leader_start, replica_end, "leader's log starts past our end; restarting the log there");
            let result = {
                let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                p.truncate_fully_and_start_at(leader_start, now_ms())
                    .map(|()| (leader_start, None))
            };
            return self.after_truncation(s, result);
        }
        // Our end is inside the leader's log again (it moved meanwhile): fetch from it.
        self.shared
            .update_if_current(&s.tp, s.state.generation, |st| {
                st.fetch_offset = replica_end;
                st.generation = next_generation();
            });
    }

    /// ListOffsets to the leader as a replica; the offset, or the partition's error code.
    async fn list_offset(&self, client: &Client, s: &Sent, timestamp: i64) -> Result<i64, i16> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(self.ctx.node_id))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(s.tp.topic.clone())))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(s.tp.partition)
                            .with_current_leader_epoch(s.state.leader_epoch)
                            .with_timestamp(timestamp),
                    ]),
            ]);
        match client.send_latest(request, LIST_OFFSETS_VERSIONS).await {
            Ok((_, ResponseKind::ListOffsets(r))) => r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == s.tp.partition)
                .map_or(Err(ResponseError::UnknownServerError.code()), |p| {
                    if p.error_code == 0 {
                        Ok(p.offset)
                    } else {
                        Err(p.error_code)
                    }
                }),
            Ok(_) => Err(ResponseError::UnknownServerError.code()),
            Err(e) => {
                warn!(error = %e, "ListOffsets to the leader failed");
                Err(e.response_error().code())
            }
        }
    }
}

/// Appends fetched records. If our log is empty at the leader's log start and that start
/// falls inside the first batch (DeleteRecords is not batch-aligned), the log restarts at the
/// batch's base offset first — Kafka's `UnexpectedAppendOffsetException` handling in
/// `Partition.doAppendRecordsToFollowerOrFutureReplica`.
fn append_as_follower(
    p: &mut Partition,
    records: Bytes,
    leader_high_watermark: i64,
    now: i64,
) -> Result<i64, PartitionError> {
    let log_end = p.log_end_offset();
    if log_end == p.log_start_offset()
        && let Ok(batches) = parse_all(records.clone(), MAX_BATCH_BYTES)
        && let Some(first) = batches.first()
        && first.base_offset() < log_end
        && first.last_offset() >= log_end
    {
        info!(
            base_offset = first.base_offset(),
            log_end, "first fetched batch starts below our empty log; restarting the log at it"
        );
        p.truncate_fully_and_start_at(first.base_offset(), now)?;
    }
    p.append_as_follower(records, leader_high_watermark, now)
}

/// The whole batches at the front of `records`: a leader may end a response with a partial
/// batch cut at the byte limit, which followers (like consumers) ignore.
fn whole_batches(records: Bytes) -> Bytes {
    let mut end = 0usize;
    while let Some(rest) = records.get(end..) {
        if rest.is_empty() {
            break;
        }
        let Ok(size) = peek_batch_size(rest, MAX_BATCH_BYTES) else {
            break;
        };
        match end.checked_add(size) {
            Some(next) if next <= records.len() => end = next,
            _ => break,
        }
    }
    records.slice(..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use krust_log::RecordBatchBuilder;

    #[test]
    fn whole_batches_drops_a_cut_tail() {
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_kv(0, None, Some(Bytes::from_static(b"a")));
        let one = builder.build().into_bytes();
        let mut two = one.to_vec();
        two.extend_from_slice(&one[..one.len() / 2]);
        assert_eq!(whole_batches(Bytes::from(two)).len(), one.len());
        assert_eq!(whole_batches(Bytes::new()).len(), 0);
        assert_eq!(whole_batches(Bytes::from_static(b"xx")).len(), 0);
    }
}
