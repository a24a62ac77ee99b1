//! The group coordinator runtime (Kafka's `GroupCoordinatorService` for the classic
//! protocol): one [`crate::group::GroupCoordinatorShard`] per `__consumer_offsets`
//! partition this broker leads, its records written through the replica manager, loaded on
//! election and unloaded on resignation.
//!
//! CONTRACT (used by [`super::apis`] and [`super::publisher`]):
//! [`GroupCoordinator::apis`] lists the APIs and versions it serves (FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete); [`GroupCoordinator::handle`] answers one.
//! The publisher calls [`GroupCoordinator::on_elected`] / [`GroupCoordinator::on_resigned`]
//! for `__consumer_offsets` partitions and [`GroupCoordinator::on_metadata`] with every image.
//! `on_elected` spawns a task, so it must run inside a tokio runtime (or the coordinator must
//! have been created inside one).
//!
//! # Layout
//! - `mod.rs`: [`GroupCoordinator`] — routing of each request to the shard of
//!   `partitionFor(group)`, fan-out/merge of multi-group requests (OffsetFetch v8+,
//!   DescribeGroups, DeleteGroups, ListGroups), shard lifecycle, settings from
//!   `server.properties`.
//! - [`find_coordinator`]: FindCoordinator v0–v5 and the creation of `__consumer_offsets`.
//! - `runtime.rs`: the task of one shard (load from the log, real-time timers, group-commit
//!   appends, responses).
//! - [`log`]: [`CoordinatorLog`], what the runtime needs from the broker (implemented by
//!   [`ReplicaManager`]; tests wrap it to hold loads or fail appends).
//!
//! # Limits
//! - Offsets of deleted topics are dropped only by shards loaded when the deletion is
//!   published (Kafka the same) and only if the shard's queue has room; others expire by
//!   `offsets.retention.minutes`.
//! - An append is not fenced by the leader epoch the shard was loaded in (the replica
//!   manager's append has no epoch argument): a leadership change between the check and the
//!   write is caught only by the append failing.
//! - A shard finds its next timer by scanning its groups and members after every event
//!   (Kafka keeps a timer wheel): fine for thousands of members per partition, not millions.
//! - Only classic groups: no KIP-848 `ConsumerGroupHeartbeat`; TRANSACTION keys are the
//!   transaction coordinator's ([`super::txn`]). `TxnOffsetCommit`
//!   ([`GroupCoordinator::txn_offset_commit`], KIP-890 verified by the caller's closure)
//!   writes the offsets as the producer's transactional batch; they stay pending (and load
//!   as pending) until the producer's COMMIT/ABORT marker — loaded, or reported by the
//!   partition leader's WriteTxnMarkers handler through [`GroupCoordinator::on_txn_marker`].

pub mod find_coordinator;
pub mod log;
mod runtime;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, HeartbeatResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, RequestKind, ResponseKind,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic},
};
use krust_metadata::image::MetadataImage;
use krust_net::{Reply, RequestContext};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::BrokerConfig;
use super::cleaner::{LogCleaner, LogCleanerSettings};
use super::controller_channel::ControllerChannel;
use super::replica_manager::ReplicaManager;
use crate::group::{
    GroupConfig, GroupError, GroupRequest, GroupResponse, RequestContext as ShardContext,
    partition_for_group, txn_offset_commit_error,
};
use crate::partition::VerificationGuard;
pub use log::{CoordinatorLog, GROUP_METADATA_TOPIC_NAME, LoadChunk};
use runtime::{ACTIVE, LOADING, STOPPED, ShardCommand, ShardSettings, ShardSlot};

/// Settings of the coordinator, from `server.properties` with Kafka 3.9's defaults.
#[derive(Debug, Clone)]
pub struct GroupCoordinatorSettings {
    /// The shards' settings (`group.*`, `offsets.*`).
    pub group: GroupConfig,
    /// `offsets.topic.replication.factor` (3): replication factor `__consumer_offsets` is
    /// created with. Creation fails (and FindCoordinator answers COORDINATOR_NOT_AVAILABLE)
    /// until that many brokers are registered.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes` (104857600).
    pub offsets_topic_segment_bytes: i32,
    /// `offsets.load.buffer.size` (5242880).
    pub offsets_load_buffer_size: usize,
    /// `offsets.commit.timeout.ms` (5000).
    pub offsets_commit_timeout_ms: u64,
}

impl Default for GroupCoordinatorSettings {
    fn default() -> Self {
        GroupCoordinatorSettings {
            group: GroupConfig::default(),
            offsets_topic_replication_factor: 3,
            offsets_topic_segment_bytes: 104_857_600,
            offsets_load_buffer_size: 5_242_880,
            offsets_commit_timeout_ms: 5000,
        }
    }
}

impl GroupCoordinatorSettings {
    /// From the validated `server.properties` (unset keys: Kafka's defaults).
    #[must_use]
    pub fn from_config(properties: &krust_config::KafkaConfig) -> Self {
        let d = GroupCoordinatorSettings::default();
        let g = &d.group;
        let num_partitions = properties.get_or(
            "offsets.topic.num.partitions",
            g.offsets_topic_num_partitions,
        );
        let group = GroupConfig {
            group_min_session_timeout_ms: properties.get_or(
                "group.min.session.timeout.ms",
                g.group_min_session_timeout_ms,
            ),
            group_max_session_timeout_ms: properties.get_or(
                "group.max.session.timeout.ms",
                g.group_max_session_timeout_ms,
            ),
            group_initial_rebalance_delay_ms: properties.get_or(
                "group.initial.rebalance.delay.ms",
                g.group_initial_rebalance_delay_ms,
            ),
            group_max_size: properties.get_or("group.max.size", g.group_max_size),
            offset_metadata_max_bytes: properties
                .get_or("offset.metadata.max.bytes", g.offset_metadata_max_bytes),
            offsets_retention_ms: properties
                .get_or("offsets.retention.minutes", g.offsets_retention_ms / 60_000)
                .saturating_mul(60_000),
            offsets_retention_check_interval_ms: properties.get_or(
                "offsets.retention.check.interval.ms",
                g.offsets_retention_check_interval_ms,
            ),
            // Kafka refuses a non-positive count at startup; never divide by zero here.
            offsets_topic_num_partitions: if num_partitions > 0 {
                num_partitions
            } else {
                g.offsets_topic_num_partitions
            },
            new_member_join_timeout_ms: g.new_member_join_timeout_ms,
        };
        GroupCoordinatorSettings {
            group,
            offsets_topic_replication_factor: properties.get_or(
                "offsets.topic.replication.factor",
                d.offsets_topic_replication_factor,
            ),
            offsets_topic_segment_bytes: properties
                .get_or("offsets.topic.segment.bytes", d.offsets_topic_segment_bytes),
            offsets_load_buffer_size: properties
                .get_or("offsets.load.buffer.size", d.offsets_load_buffer_size),
            offsets_commit_timeout_ms: properties
                .get_or("offsets.commit.timeout.ms", d.offsets_commit_timeout_ms),
        }
    }

    fn shard_settings(&self) -> ShardSettings {
        ShardSettings {
            group: self.group.clone(),
            load_buffer_size: self.offsets_load_buffer_size.max(1),
            commit_timeout: Duration::from_millis(self.offsets_commit_timeout_ms),
        }
    }
}

/// The group coordinator of one broker.
pub struct GroupCoordinator {
    log: Arc<dyn CoordinatorLog>,
    channel: Arc<dyn ControllerChannel>,
    settings: GroupCoordinatorSettings,
    shards: Mutex<HashMap<i32, ShardSlot>>,
    /// A CreateTopics for `__consumer_offsets` is in flight (Kafka's
    /// `AutoTopicCreationManager` inflight set): one at a time.
    creating_offsets_topic: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Handle>,
    /// The log cleaner this coordinator started (see [`super::cleaner`]).
    cleaner: Mutex<Option<LogCleaner>>,
    /// Topic id → (name, partition count) of the last image (`on_metadata`).
    known_topics: Mutex<Option<BTreeMap<uuid::Uuid, (String, i32)>>>,
    /// `partitionFor`'s modulus: `offsets.topic.num.partitions`, or the partition count of
    /// `__consumer_offsets` when the first image already has it (Kafka's
    /// `BrokerMetadataPublisher.initializeManagers` → `groupCoordinator.startup`), so a topic
    /// created with another count keeps being addressed as it was written.
    num_partitions: std::sync::atomic::AtomicI32,
}

impl GroupCoordinator {
    /// For this broker; `channel` creates `__consumer_offsets` when a FindCoordinator needs it.
    /// Also starts the broker's log cleaner ([`super::cleaner`], `log.cleaner.*`) when called
    /// inside a tokio runtime, so `__consumer_offsets` and every other compacted topic hosted
    /// by `replicas` get compacted; [`GroupCoordinator::shutdown`] stops it.
    #[must_use]
    pub fn new(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        let coordinator = Self::with_log(
            GroupCoordinatorSettings::from_config(&config.static_config),
            Arc::clone(&replicas) as Arc<dyn CoordinatorLog>,
            channel,
        );
        if let Some(runtime) = &coordinator.runtime {
            let settings = LogCleanerSettings::from_config(&config.static_config);
            *coordinator
                .cleaner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                LogCleaner::spawn(runtime, replicas, settings);
        } else {
            warn!("group coordinator created outside a tokio runtime: no log cleaner");
        }
        coordinator
    }

    /// Over any [`CoordinatorLog`] (tests use an in-memory one).
    #[must_use]
    pub fn with_log(
        settings: GroupCoordinatorSettings,
        log: Arc<dyn CoordinatorLog>,
        channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        let settings_partitions = settings.group.offsets_topic_num_partitions;
        GroupCoordinator {
            log,
            channel,
            settings,
            shards: Mutex::new(HashMap::new()),
            creating_offsets_topic: Arc::new(AtomicBool::new(false)),
            runtime: tokio::runtime::Handle::try_current().ok(),
            cleaner: Mutex::new(None),
            known_topics: Mutex::new(None),
            num_partitions: std::sync::atomic::AtomicI32::new(settings_partitions),
        }
    }

    /// The settings in use.
    #[must_use]
    pub fn settings(&self) -> &GroupCoordinatorSettings {
        &self.settings
    }

    /// The APIs served, with version ranges (Kafka 3.9's, FindCoordinator without v6's
    /// share-group key type).
    #[must_use]
    pub fn apis() -> Vec<(ApiKey, i16, i16)> {
        vec![
            (ApiKey::FindCoordinator, 0, 5),
            (ApiKey::JoinGroup, 0, 9),
            (ApiKey::SyncGroup, 0, 5),
            (ApiKey::Heartbeat, 0, 4),
            (ApiKey::LeaveGroup, 0, 5),
            (ApiKey::OffsetCommit, 0, 9),
            (ApiKey::OffsetFetch, 0, 9),
            (ApiKey::ListGroups, 0, 5),
            (ApiKey::DescribeGroups, 0, 5),
            (ApiKey::DeleteGroups, 0, 2),
            (ApiKey::OffsetDelete, 0, 0),
            (ApiKey::TxnOffsetCommit, 0, 4),
        ]
    }

    /// The `__consumer_offsets` partition coordinating `group_id`.
    #[must_use]
    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for_group(group_id, self.num_partitions.load(Ordering::SeqCst))
    }

    /// Answers one group API request.
    pub async fn handle(&self, ctx: &RequestContext, request: RequestKind) -> Reply {
        let shard_ctx = ShardContext {
            api_version: ctx.api_version,
            client_id: ctx.client_id.clone(),
            // Kafka's `InetAddress.toString` form, as DescribeGroups shows it.
            client_host: format!("/{}", ctx.peer_addr.ip()),
        };
        let response = match request {
            RequestKind::FindCoordinator(r) => {
                return ResponseKind::FindCoordinator(self.find_coordinator(ctx, &r)).into();
            }
            RequestKind::JoinGroup(r) => {
                let p = self.partition_for(&r.group_id);
                self.route(p, shard_ctx, GroupRequest::JoinGroup(r)).await
            }
            RequestKind::SyncGroup(r) => {
                let p = self.partition_for(&r.group_id);
                self.route(p, shard_ctx, GroupRequest::SyncGroup(r)).await
            }
            RequestKind::Heartbeat(r) => {
                let p = self.partition_for(&r.group_id);
                self.route(p, shard_ctx, GroupRequest::Heartbeat(r)).await
            }
            RequestKind::LeaveGroup(r) => {
                let p = self.partition_for(&r.group_id);
                self.route(p, shard_ctx, GroupRequest::LeaveGroup(r)).await
            }
            RequestKind::OffsetCommit(mut r) => {
                // Kafka's `handleOffsetCommitRequest`: topics the metadata does not know get
                // UNKNOWN_TOPIC_OR_PARTITION here and never reach the coordinator.
                let image = self.log.image();
                let (known, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                    .into_iter()
                    .partition(|t| image.topics.topic_by_name(&t.name.0).is_some());
                r.topics = known;
                let unknown_topics = crate::group::shard::offset_commit_errors(
                    &unknown,
                    ResponseError::UnknownTopicOrPartition.code(),
                );
                if r.topics.is_empty() && !unknown_topics.is_empty() {
                    GroupResponse::OffsetCommit(
                        OffsetCommitResponse::default().with_topics(unknown_topics),
                    )
                } else {
                    let p = self.partition_for(&r.group_id);
                    match self
                        .route(p, shard_ctx, GroupRequest::OffsetCommit(r))
                        .await
                    {
                        GroupResponse::OffsetCommit(mut response) => {
                            response.topics.extend(unknown_topics);
                            GroupResponse::OffsetCommit(response)
                        }
                        other => other,
                    }
                }
            }
            RequestKind::OffsetDelete(r) => {
                let p = self.partition_for(&r.group_id);
                self.route(p, shard_ctx, GroupRequest::OffsetDelete(r))
                    .await
            }
            RequestKind::OffsetFetch(r) => {
                if ctx.api_version >= 8 {
                    GroupResponse::OffsetFetch(self.offset_fetch_batched(shard_ctx, r).await)
                } else {
                    let p = self.partition_for(&r.group_id);
                    self.route(p, shard_ctx, GroupRequest::OffsetFetch(r)).await
                }
            }
            RequestKind::DescribeGroups(r) => {
                GroupResponse::DescribeGroups(self.describe_groups(shard_ctx, r).await)
            }
            RequestKind::DeleteGroups(r) => {
                GroupResponse::DeleteGroups(self.delete_groups(shard_ctx, r).await)
            }
            RequestKind::ListGroups(r) => {
                GroupResponse::ListGroups(self.list_groups(shard_ctx, r).await)
            }
            _ => {
                warn!(api = ?ctx.api_key, "not a group API: closing the connection");
                return Reply::Close;
            }
        };
        into_response_kind(response).into()
    }

    /// TxnOffsetCommit (Kafka 3.9 `KafkaApis.handleTxnOffsetCommitRequest` →
    /// `GroupCoordinator.handleTxnCommitOffsets`): topics and partitions the metadata does not
    /// know get UNKNOWN_TOPIC_OR_PARTITION; an empty group id INVALID_GROUP_ID; a group this
    /// broker does not coordinate NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading).
    /// Then `verify` is asked, with the group's `__consumer_offsets` partition, for KIP-890's
    /// verification guard (`Err(code)`: the coordinator's refusal, mapped as Kafka's
    /// `maybeConvertOffsetCommitError`), and the shard validates the member, generation and
    /// metadata and writes the offsets as the producer's transactional batch. Below v2,
    /// COORDINATOR_LOAD_IN_PROGRESS is answered as COORDINATOR_NOT_AVAILABLE (KAFKA-7296).
    pub async fn txn_offset_commit<V, F>(
        &self,
        ctx: &RequestContext,
        mut r: TxnOffsetCommitRequest,
        verify: V,
    ) -> TxnOffsetCommitResponse
    where
        V: FnOnce(i32) -> F,
        F: std::future::Future<Output = Result<Option<VerificationGuard>, i16>>,
    {
        let image = self.log.image();
        let mut unknown: Vec<TxnOffsetCommitResponseTopic> = Vec::new();
        let mut known = Vec::new();
        for mut topic in std::mem::take(&mut r.topics) {
            let refuse = |partitions: &[i32]| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            })
                            .collect(),
                    )
            };
            let Some(meta) = image.topics.topic_by_name(&topic.name.0) else {
                let all: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
                unknown.push(refuse(&all));
                continue;
            };
            let (valid, invalid): (Vec<_>, Vec<_>) = std::mem::take(&mut topic.partitions)
                .into_iter()
                .partition(|p| meta.partitions.contains_key(&p.partition_index));
            if !invalid.is_empty() {
                let missing: Vec<i32> = invalid.iter().map(|p| p.partition_index).collect();
                unknown.push(refuse(&missing));
            }
            if !valid.is_empty() {
                topic.partitions = valid;
                known.push(topic);
            }
        }
        r.topics = known;
        let mut response = if r.topics.is_empty() {
            TxnOffsetCommitResponse::default()
        } else {
            self.txn_offset_commit_known(ctx, r, verify).await
        };
        response.topics.extend(unknown);
        if ctx.api_version < 2 {
            let loading = GroupError::CoordinatorLoadInProgress.code();
            for p in response
                .topics
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
            {
                if p.error_code == loading {
                    p.error_code = GroupError::CoordinatorNotAvailable.code();
                }
            }
        }
        response
    }

    async fn txn_offset_commit_known<V, F>(
        &self,
        ctx: &RequestContext,
        r: TxnOffsetCommitRequest,
        verify: V,
    ) -> TxnOffsetCommitResponse
    where
        V: FnOnce(i32) -> F,
        F: std::future::Future<Output = Result<Option<VerificationGuard>, i16>>,
    {
        let all = |code: i16| txn_offset_commit_error(&r, code);
        if r.group_id.0.is_empty() {
            return all(GroupError::InvalidGroupId.code());
        }
        let partition = self.partition_for(&r.group_id);
        let status = self
            .lock_shards()
            .get(&partition)
            .map(|s| s.status.load(Ordering::SeqCst));
        match status {
            Some(ACTIVE) => {}
            Some(LOADING) => return all(GroupError::CoordinatorLoadInProgress.code()),
            _ => return all(GroupError::NotCoordinator.code()),
        }
        let guard = match verify(partition).await {
            Ok(guard) => guard,
            Err(code) => return all(convert_offset_commit_error(code)),
        };
        let shard_ctx = ShardContext {
            api_version: ctx.api_version,
            client_id: ctx.client_id.clone(),
            client_host: format!("/{}", ctx.peer_addr.ip()),
        };
        match self
            .route(
                partition,
                shard_ctx,
                GroupRequest::TxnOffsetCommit { request: r, guard },
            )
            .await
        {
            GroupResponse::TxnOffsetCommit(response) => response,
            _ => TxnOffsetCommitResponse::default(),
        }
    }

    /// Sends `request` to the shard of `partition` and waits for its answer.
    async fn route(
        &self,
        partition: i32,
        ctx: ShardContext,
        request: GroupRequest,
    ) -> GroupResponse {
        let slot = {
            let shards = self.lock_shards();
            shards
                .get(&partition)
                .map(|s| (s.status.load(Ordering::SeqCst), s.requests.clone()))
        };
        let Some((status, requests)) = slot else {
            return request.error_response(&ctx, GroupError::NotCoordinator);
        };
        match status {
            // Kafka answers heartbeats blindly while the group loads (its
            // `GroupCoordinatorService.heartbeat`): the member keeps its session.
            LOADING if matches!(request, GroupRequest::Heartbeat(_)) => {
                return GroupResponse::Heartbeat(HeartbeatResponse::default());
            }
            LOADING => {
                return request.error_response(&ctx, GroupError::CoordinatorLoadInProgress);
            }
            ACTIVE => {}
            _ => return request.error_response(&ctx, GroupError::NotCoordinator),
        }
        // Built before the request moves into the shard: the answer if the shard goes away.
        let fallback = request.error_response(&ctx, GroupError::NotCoordinator);
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::Request {
            ctx,
            request,
            reply,
        };
        if requests.send(command).await.is_err() {
            return fallback;
        }
        answer.await.unwrap_or(fallback)
    }

    /// Splits `items` by the shard owning each one's group (`group_of`), sends each shard its
    /// part (`request` builds the shard's request, `answers` takes the answers out of its
    /// response) and returns the answers in the order of `items`, keyed by `answer_group`; an
    /// item no shard answered is left out.
    async fn scatter_by_group<I: Clone, A>(
        &self,
        ctx: &ShardContext,
        items: &[I],
        group_of: impl Fn(&I) -> &str,
        request: impl Fn(Vec<I>) -> GroupRequest,
        answers: impl Fn(GroupResponse) -> Option<Vec<A>>,
        answer_group: impl Fn(&A) -> &str,
    ) -> Vec<A> {
        let mut by_partition: BTreeMap<i32, Vec<I>> = BTreeMap::new();
        for item in items {
            by_partition
                .entry(self.partition_for(group_of(item)))
                .or_default()
                .push(item.clone());
        }
        let mut answered = Vec::new();
        for (p, part) in by_partition {
            if let Some(part_answers) = answers(self.route(p, ctx.clone(), request(part)).await) {
                answered.extend(part_answers);
            }
        }
        items
            .iter()
            .filter_map(|item| {
                let i = answered
                    .iter()
                    .position(|a| answer_group(a) == group_of(item))?;
                Some(answered.swap_remove(i))
            })
            .collect()
    }

    /// OffsetFetch v8+: the groups split by shard, answered in request order.
    async fn offset_fetch_batched(
        &self,
        ctx: ShardContext,
        r: OffsetFetchRequest,
    ) -> OffsetFetchResponse {
        let groups = self
            .scatter_by_group(
                &ctx,
                &r.groups,
                |g| &g.group_id,
                |groups| GroupRequest::OffsetFetch(r.clone().with_groups(groups)),
                |resp| match resp {
                    GroupResponse::OffsetFetch(resp) => Some(resp.groups),
                    _ => None,
                },
                |a| &a.group_id,
            )
            .await;
        OffsetFetchResponse::default().with_groups(groups)
    }

    async fn describe_groups(
        &self,
        ctx: ShardContext,
        r: DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        let groups = self
            .scatter_by_group(
                &ctx,
                &r.groups,
                |g| g,
                |groups| GroupRequest::DescribeGroups(r.clone().with_groups(groups)),
                |resp| match resp {
                    GroupResponse::DescribeGroups(resp) => Some(resp.groups),
                    _ => None,
                },
                |a| &a.group_id,
            )
            .await;
        DescribeGroupsResponse::default().with_groups(groups)
    }

    async fn delete_groups(
        &self,
        ctx: ShardContext,
        r: DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        let results = self
            .scatter_by_group(
                &ctx,
                &r.groups_names,
                |g| g,
                |groups| GroupRequest::DeleteGroups(r.clone().with_groups_names(groups)),
                |resp| match resp {
                    GroupResponse::DeleteGroups(resp) => Some(resp.results),
                    _ => None,
                },
                |a| &a.group_id,
            )
            .await;
        DeleteGroupsResponse::default().with_results(results)
    }

    /// ListGroups over every active shard (Kafka asks `activeTopicPartitions` only, so
    /// loading shards add nothing); the last shard error, if any, is the top-level error.
    async fn list_groups(&self, ctx: ShardContext, r: ListGroupsRequest) -> ListGroupsResponse {
        let active: Vec<i32> = {
            let shards = self.lock_shards();
            let mut ps: Vec<i32> = shards
                .iter()
                .filter(|(_, s)| s.status.load(Ordering::SeqCst) == ACTIVE)
                .map(|(p, _)| *p)
                .collect();
            ps.sort_unstable();
            ps
        };
        let mut response = ListGroupsResponse::default();
        for p in active {
            if let GroupResponse::ListGroups(resp) = self
                .route(p, ctx.clone(), GroupRequest::ListGroups(r.clone()))
                .await
            {
                if resp.error_code != 0 {
                    response.error_code = resp.error_code;
                }
                response.groups.extend(resp.groups);
            }
        }
        response
    }

    fn lock_shards(&self) -> std::sync::MutexGuard<'_, HashMap<i32, ShardSlot>> {
        // A poisoned lock means a panic elsewhere while holding it; the map itself is still
        // consistent (every update is a single insert or remove), so keep serving.
        self.shards
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This broker became leader of `__consumer_offsets` partition `partition` at `leader_epoch`.
    /// Loads its shard in the background (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS);
    /// an already loaded or loading shard only takes the newer epoch (Kafka's
    /// `scheduleLoadOperation`).
    pub fn on_elected(&self, partition: i32, leader_epoch: i32) {
        let mut shards = self.lock_shards();
        if let Some(slot) = shards.get_mut(&partition) {
            let status = slot.status.load(Ordering::SeqCst);
            if status != STOPPED {
                slot.leader_epoch = slot.leader_epoch.max(leader_epoch);
                return;
            }
            // A shard that failed to load is loaded again for the new epoch.
            if let Some(old) = shards.remove(&partition) {
                drop(old.unload());
            }
        }
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(_) => match &self.runtime {
                Some(h) => h.clone(),
                None => {
                    warn!(
                        partition,
                        "on_elected outside a tokio runtime: the shard is not loaded"
                    );
                    return;
                }
            },
        };
        info!(partition, leader_epoch, "loading group coordinator shard");
        let slot = ShardSlot::spawn(
            &runtime,
            partition,
            leader_epoch,
            Arc::clone(&self.log),
            self.settings.shard_settings(),
        );
        shards.insert(partition, slot);
    }

    /// This broker stopped leading `partition` (`leader_epoch` the new one, if known). The
    /// shard is unloaded unless it was loaded for an epoch at least as new (Kafka's
    /// `scheduleUnloadOperation`); its waiting requests get NOT_COORDINATOR.
    pub fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        let mut shards = self.lock_shards();
        let unload = shards
            .get(&partition)
            .is_some_and(|s| leader_epoch.is_none_or(|e| s.leader_epoch < e));
        if unload && let Some(slot) = shards.remove(&partition) {
            info!(
                partition,
                ?leader_epoch,
                "unloading group coordinator shard"
            );
            // The task finishes on its own; nothing to wait for here.
            drop(slot.unload());
        }
    }

    /// A new metadata image: offsets committed for partitions of topics deleted since the
    /// previous image are removed from every loaded shard (Kafka's
    /// `GroupCoordinatorService.onPartitionsDeleted`, called by the metadata publisher). The
    /// first image fixes `partitionFor`'s partition count if `__consumer_offsets` exists.
    /// Partition leadership arrives through `on_elected`/`on_resigned` instead.
    pub fn on_metadata(&self, image: &MetadataImage) {
        let current: BTreeMap<uuid::Uuid, (String, i32)> = image
            .topics
            .by_id
            .iter()
            .map(|(id, t)| {
                let count = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
                (*id, (t.name.clone(), count))
            })
            .collect();
        let previous = self
            .known_topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(current.clone());
        let Some(previous) = previous else {
            // The first image: the group coordinator starts (see `num_partitions`).
            if let Some(topic) = image.topics.topic_by_name(GROUP_METADATA_TOPIC_NAME)
                && let Ok(count) = i32::try_from(topic.partitions.len())
                && count > 0
            {
                self.num_partitions.store(count, Ordering::SeqCst);
            }
            return;
        };
        let deleted: Vec<(String, i32)> = previous
            .iter()
            .filter(|(id, _)| !current.contains_key(id))
            .flat_map(|(_, (name, count))| (0..*count).map(move |p| (name.clone(), p)))
            .collect();
        if deleted.is_empty() {
            return;
        }
        info!(
            partitions = deleted.len(),
            "dropping offsets of deleted topics"
        );
        for slot in self.lock_shards().values() {
            let command = ShardCommand::PartitionsDeleted(deleted.clone());
            // A full queue drops the notice: those offsets then go by retention instead.
            if slot.requests.try_send(command).is_err() {
                warn!("a group coordinator shard is busy: deleted topics' offsets kept");
            }
        }
    }

    /// A COMMIT (`commit`) or ABORT marker of `producer_id` was written to
    /// `__consumer_offsets-partition` by this broker as its leader (the WriteTxnMarkers
    /// handler calls this once the marker is appended): the shard makes the producer's
    /// pending transactional offsets visible, or drops them. Also safe to call for a partition
    /// still loading (the notice waits in the shard's queue) or not loaded here (ignored).
    pub async fn on_txn_marker(&self, partition: i32, producer_id: i64, commit: bool) {
        let sender = self
            .lock_shards()
            .get(&partition)
            .map(|slot| slot.requests.clone());
        if let Some(sender) = sender {
            // Waits for room rather than dropping the notice: a lost marker would leave the
            // producer's offsets pending until the partition is loaded again. An error means
            // the shard is gone; its successor replays the marker from the log.
            let _ = sender
                .send(ShardCommand::TxnMarker {
                    producer_id,
                    commit,
                })
                .await;
        }
    }

    /// Partitions whose shard is loaded and serving (for tests and metrics).
    #[must_use]
    pub fn active_partitions(&self) -> Vec<i32> {
        let shards = self.lock_shards();
        let mut ps: Vec<i32> = shards
            .iter()
            .filter(|(_, s)| s.status.load(Ordering::SeqCst) == ACTIVE)
            .map(|(p, _)| *p)
            .collect();
        ps.sort_unstable();
        ps
    }

    /// Stops the log cleaner (after its current pass) and every shard (broker shutdown), and
    /// waits for the shard tasks, at most 5 s each (an append in flight finishes in its own
    /// task).
    pub async fn shutdown(&self) {
        let cleaner = self
            .cleaner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(cleaner) = cleaner {
            cleaner.shutdown().await;
        }
        let slots: Vec<ShardSlot> = self.lock_shards().drain().map(|(_, s)| s).collect();
        for slot in slots {
            let task = slot.unload();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                warn!("a group coordinator shard did not stop within 5 s");
            }
        }
    }
}

/// Kafka 3.9 `GroupMetadataManager.maybeConvertOffsetCommitError`, for a failed
/// verification of a transactional offset commit.
fn convert_offset_commit_error(code: i16) -> i16 {
    use kafka_protocol::error::ResponseError as E;
    let Some(error) = E::try_from_code(code) else {
        return code;
    };
    match error {
        E::NetworkException => E::CoordinatorLoadInProgress.code(),
        E::UnknownTopicOrPartition | E::NotEnoughReplicas | E::NotEnoughReplicasAfterAppend => {
            E::CoordinatorNotAvailable.code()
        }
        E::NotLeaderOrFollower | E::KafkaStorageError => E::NotCoordinator.code(),
        E::MessageTooLarge | E::RecordListTooLarge | E::InvalidFetchSize => {
            E::InvalidCommitOffsetSize.code()
        }
        _ => code,
    }
}

/// The wire response of a shard answer.
fn into_response_kind(response: GroupResponse) -> ResponseKind {
    match response {
        GroupResponse::JoinGroup(r) => ResponseKind::JoinGroup(r),
        GroupResponse::SyncGroup(r) => ResponseKind::SyncGroup(r),
        GroupResponse::Heartbeat(r) => ResponseKind::Heartbeat(r),
        GroupResponse::LeaveGroup(r) => ResponseKind::LeaveGroup(r),
        GroupResponse::OffsetCommit(r) => ResponseKind::OffsetCommit(r),
        GroupResponse::OffsetFetch(r) => ResponseKind::OffsetFetch(r),
        GroupResponse::OffsetDelete(r) => ResponseKind::OffsetDelete(r),
        GroupResponse::ListGroups(r) => ResponseKind::ListGroups(r),
        GroupResponse::DescribeGroups(r) => ResponseKind::DescribeGroups(r),
        GroupResponse::DeleteGroups(r) => ResponseKind::DeleteGroups(r),
        GroupResponse::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(r),
    }
}
