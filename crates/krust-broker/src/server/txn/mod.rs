//! The transaction coordinator runtime (Kafka 3.9's `TransactionCoordinator` wiring): one
//! [`krust_txn::TxnCoordinatorShard`] per `__transaction_state` partition this broker leads,
//! loaded on election and dropped on resignation, its records written through the replica
//! manager, its markers sent by the [`markers::MarkerSender`].
//!
//! CONTRACT (used by [`super::apis`] and the metadata publisher): [`TxnCoordinator::apis`]
//! lists the APIs served (AddPartitionsToTxn v0–5, AddOffsetsToTxn, EndTxn,
//! DescribeTransactions, ListTransactions); [`TxnCoordinator::handle`] answers one;
//! [`TxnCoordinator::init_producer_id`] answers a transactional InitProducerId;
//! [`TxnCoordinator::find_coordinator`] a FindCoordinator with key type TRANSACTION.
//! [`TxnCoordinatorPublisher`] calls `on_elected` / `on_resigned`.
//!
//! # Layout
//! - `mod.rs`: [`TxnCoordinator`] — routing by `partitionFor(transactional.id)`, the APIs,
//!   FindCoordinator and the creation of `__transaction_state`, shard lifecycle.
//! - `runtime.rs`: the task of one shard (load — a record Kafka would not write stops the load
//!   with an error and the partition is not served —, timers, appends, answers).
//! - [`markers`]: [`markers::MarkerSender`], WriteTxnMarkers to partition leaders.
//!
//! # Limits
//! - A transactional InitProducerId asks its shard whether it needs a fresh producer id, then
//!   takes one from the block; two concurrent InitProducerId for one new id may both take one
//!   (the second is not used): ids are never reused.
//! - Metrics: `UnknownDestinationQueueSize`, `LogAppendRetryQueueSize` (Complete records whose
//!   append failed retriably, waiting for the shard's retry) and `partition-load-time-max/avg`
//!   (over the last minute's loads).

pub mod markers;
mod runtime;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedState,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, CreateTopicsRequest, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    RequestKind, ResponseKind, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use krust_net::error_codes as codes;
use krust_net::{Reply as NetReply, RequestContext};
use krust_txn::{Reply, TopicPartition, TxnConfig, TxnError, TxnState, partition_for_txn};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Broker;
use super::controller_channel::ControllerChannel;
use super::replica_manager::{ReplicaManager, lock};
use markers::MarkerSender;
use runtime::{ACTIVE, Command, LOADING, ShardSlot};

/// Kafka's `__transaction_state` topic name (`Topic.TRANSACTION_STATE_TOPIC_NAME`).
pub const TRANSACTION_STATE_TOPIC_NAME: &str = "__transaction_state";

/// How long the CreateTopics for `__transaction_state` may take.
const CREATE_TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

/// `transaction.*` settings from `server.properties`, Kafka 3.9's defaults for unset keys.
#[must_use]
pub fn txn_config(properties: &krust_config::KafkaConfig) -> TxnConfig {
    let d = TxnConfig::default();
    let num_partitions =
        properties.get_or("transaction.state.log.num.partitions", d.num_partitions);
    TxnConfig {
        num_partitions: if num_partitions > 0 {
            num_partitions
        } else {
            d.num_partitions
        },
        replication_factor: properties.get_or(
            "transaction.state.log.replication.factor",
            d.replication_factor,
        ),
        min_isr: properties.get_or("transaction.state.log.min.isr", d.min_isr),
        segment_bytes: properties.get_or("transaction.state.log.segment.bytes", d.segment_bytes),
        load_buffer_size: properties
            .get_or("transaction.state.log.load.buffer.size", d.load_buffer_size),
        max_timeout_ms: properties.get_or("transaction.max.timeout.ms", d.max_timeout_ms),
        abort_timed_out_interval_ms: properties.get_or(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            d.abort_timed_out_interval_ms,
        ),
        transactional_id_expiration_ms: properties.get_or(
            "transactional.id.expiration.ms",
            d.transactional_id_expiration_ms,
        ),
        remove_expired_interval_ms: properties.get_or(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            d.remove_expired_interval_ms,
        ),
        // krust's own, not a Kafka config (`TxnConfig::add_partitions_hold_ms`).
        add_partitions_hold_ms: d.add_partitions_hold_ms,
    }
}

/// The transaction coordinator of one broker.
pub struct TxnCoordinator {
    replicas: Arc<ReplicaManager>,
    channel: Arc<dyn ControllerChannel>,
    config: TxnConfig,
    shards: Mutex<HashMap<i32, ShardSlot>>,
    creating_topic: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Handle>,
    markers: Arc<MarkerSender>,
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_owned()))
}

impl TxnCoordinator {
    /// The coordinator's metrics (`UnknownDestinationQueueSize`, `LogAppendRetryQueueSize`,
    /// `partition-load-time-*`).
    #[must_use]
    pub fn stats(&self) -> &Arc<markers::TxnCoordinatorStats> {
        self.markers.stats()
    }

    /// For this broker (`node_id`; markers go out on `inter_broker_listener`, secured with
    /// `inter_broker_security`).
    #[must_use]
    pub fn new(
        config: TxnConfig,
        node_id: i32,
        inter_broker_listener: String,
        inter_broker_security: krust_net::security::ClientSecurity,
        replicas: Arc<ReplicaManager>,
        channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        let markers = Arc::new(MarkerSender::new(
            Arc::clone(&replicas),
            node_id,
            inter_broker_listener,
            inter_broker_security,
        ));
        TxnCoordinator {
            replicas,
            channel,
            config,
            shards: Mutex::new(HashMap::new()),
            creating_topic: Arc::new(AtomicBool::new(false)),
            runtime: tokio::runtime::Handle::try_current().ok(),
            markers,
        }
    }

    /// The APIs served here, with Kafka 3.9's version ranges.
    #[must_use]
    pub fn apis() -> Vec<(ApiKey, i16, i16)> {
        vec![
            (ApiKey::AddPartitionsToTxn, 0, 5),
            (ApiKey::AddOffsetsToTxn, 0, 4),
            (ApiKey::EndTxn, 0, 4),
            (ApiKey::DescribeTransactions, 0, 0),
            (ApiKey::ListTransactions, 0, 1),
        ]
    }

    fn lock_shards(&self) -> std::sync::MutexGuard<'_, HashMap<i32, ShardSlot>> {
        self.shards
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `partitionFor(transactional_id)`: over the partition count of `__transaction_state`
    /// when it exists (it cannot change after creation), else the configured one.
    #[must_use]
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        let image = self.replicas.image();
        let count = image
            .topics
            .topic_by_name(TRANSACTION_STATE_TOPIC_NAME)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(0))
            .filter(|n| *n > 0)
            .unwrap_or(self.config.num_partitions);
        partition_for_txn(transactional_id, count)
    }

    /// This broker now leads `__transaction_state-partition` in `leader_epoch`: load it.
    pub fn on_elected(&self, partition: i32, leader_epoch: i32) {
        let Some(runtime) = self
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            warn!(
                partition,
                "no tokio runtime: transaction coordinator shard not loaded"
            );
            return;
        };
        let mut shards = self.lock_shards();
        if shards
            .get(&partition)
            .is_some_and(|s| s.leader_epoch >= leader_epoch)
        {
            return;
        }
        if let Some(old) = shards.remove(&partition) {
            drop(old.unload());
        }
        info!(
            partition,
            leader_epoch, "elected transaction coordinator; loading"
        );
        shards.insert(
            partition,
            ShardSlot::spawn(
                &runtime,
                partition,
                leader_epoch,
                Arc::clone(&self.replicas),
                self.config.clone(),
                Arc::clone(&self.markers),
            ),
        );
    }

    /// This broker no longer leads the partition (`leader_epoch`: the new epoch; `None`: the
    /// partition is gone).
    pub fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        let mut shards = self.lock_shards();
        let unload = shards
            .get(&partition)
            .is_some_and(|s| leader_epoch.is_none_or(|e| s.leader_epoch < e));
        if unload && let Some(slot) = shards.remove(&partition) {
            info!(partition, "resigned as transaction coordinator; unloading");
            drop(slot.unload());
        }
    }

    /// Stops every shard.
    pub async fn shutdown(&self) {
        let slots: Vec<ShardSlot> = self.lock_shards().drain().map(|(_, s)| s).collect();
        for slot in slots {
            let _ = slot.unload().await;
        }
    }

    /// Sends a command to the shard of `partition`; the error when there is none ready.
    async fn route<T>(
        &self,
        partition: i32,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, TxnError> {
        let sender = {
            let shards = self.lock_shards();
            let Some(slot) = shards.get(&partition) else {
                return Err(TxnError::NotCoordinator);
            };
            match slot.status.load(Ordering::SeqCst) {
                LOADING => return Err(TxnError::CoordinatorLoadInProgress),
                ACTIVE => slot.commands.clone(),
                _ => return Err(TxnError::NotCoordinator),
            }
        };
        let (tx, rx) = oneshot::channel();
        if sender.send(make(tx)).await.is_err() {
            return Err(TxnError::NotCoordinator);
        }
        rx.await.map_err(|_| TxnError::NotCoordinator)
    }

    /// Whether a transactional InitProducerId for `transactional_id` needs a fresh producer
    /// id (a new id, or an exhausted epoch); `false` when its shard cannot answer (the request
    /// then gets the shard's refusal).
    pub async fn needs_new_producer_id(&self, transactional_id: &str) -> bool {
        let partition = self.partition_for(transactional_id);
        let transactional_id = transactional_id.to_owned();
        self.route(partition, |reply| Command::NeedsProducerId {
            transactional_id,
            reply,
        })
        .await
        .unwrap_or(false)
    }

    /// A transactional InitProducerId (`new_producer_id`: one from the broker's block, if it
    /// could get one).
    pub async fn init_producer_id(
        &self,
        version: i16,
        request: &InitProducerIdRequest,
        new_producer_id: Option<i64>,
    ) -> InitProducerIdResponse {
        let txn_id = request
            .transactional_id
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let timeout_ms = request.transaction_timeout_ms;
        let (pid, epoch) = (request.producer_id.0, request.producer_epoch);
        let partition = self.partition_for(&txn_id);
        let result = self
            .route(partition, |reply| Command::InitProducerId {
                transactional_id: txn_id,
                timeout_ms,
                producer_id: pid,
                producer_epoch: epoch,
                new_producer_id,
                reply,
            })
            .await
            .and_then(|r| r);
        let response = InitProducerIdResponse::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match result {
            Ok(Reply::ProducerId {
                producer_id,
                producer_epoch,
            }) => response
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch),
            Ok(Reply::Done) => response.with_error_code(codes::UNKNOWN_SERVER_ERROR),
            // PRODUCER_FENCED is new in v4.
            Err(e) => response.with_error_code(e.code_for(version >= 4)),
        }
    }

    /// Answers one of [`TxnCoordinator::apis`].
    pub async fn handle(&self, ctx: &RequestContext, request: RequestKind) -> NetReply {
        let version = ctx.api_version;
        match request {
            RequestKind::AddPartitionsToTxn(r) => {
                ResponseKind::AddPartitionsToTxn(self.add_partitions(version, r).await).into()
            }
            RequestKind::AddOffsetsToTxn(r) => {
                ResponseKind::AddOffsetsToTxn(self.add_offsets(version, r).await).into()
            }
            RequestKind::EndTxn(r) => ResponseKind::EndTxn(self.end_txn(version, r).await).into(),
            RequestKind::DescribeTransactions(r) => {
                ResponseKind::DescribeTransactions(self.describe(r).await).into()
            }
            RequestKind::ListTransactions(r) => {
                ResponseKind::ListTransactions(self.list(r).await).into()
            }
            _ => NetReply::Close,
        }
    }

    async fn add_partitions_of(
        &self,
        txn_id: &str,
        pid: i64,
        epoch: i16,
        partitions: BTreeSet<TopicPartition>,
        verify_only: bool,
    ) -> BTreeMap<TopicPartition, Result<(), TxnError>> {
        if txn_id.is_empty() {
            return partitions
                .into_iter()
                .map(|tp| (tp, Err(TxnError::InvalidRequest)))
                .collect();
        }
        let partition = self.partition_for(txn_id);
        let transactional_id = txn_id.to_owned();
        if verify_only {
            let all = partitions.clone();
            match self
                .route(partition, |reply| Command::Verify {
                    transactional_id,
                    producer_id: pid,
                    producer_epoch: epoch,
                    partitions,
                    reply,
                })
                .await
                .and_then(|r| r)
            {
                Ok(verdicts) => verdicts.into_iter().collect(),
                Err(e) => all.into_iter().map(|tp| (tp, Err(e))).collect(),
            }
        } else {
            let all = partitions.clone();
            let result = self
                .route(partition, |reply| Command::AddPartitions {
                    transactional_id,
                    producer_id: pid,
                    producer_epoch: epoch,
                    partitions,
                    reply,
                })
                .await
                .and_then(|r| r)
                .map(|_| ());
            all.into_iter().map(|tp| (tp, result)).collect()
        }
    }

    /// Kafka's `KafkaApis.handleAddPartitionsToTxnRequest` existence check: partitions of
    /// unknown topics get UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED,
    /// nothing is added. `None` when every partition exists.
    fn unknown_partitions(
        image: &MetadataImage,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Option<BTreeMap<TopicPartition, i16>> {
        let exists = |tp: &TopicPartition| {
            image
                .topics
                .topic_by_name(&tp.topic)
                .is_some_and(|t| t.partitions.contains_key(&tp.partition))
        };
        if partitions.iter().all(exists) {
            return None;
        }
        Some(
            partitions
                .iter()
                .map(|tp| {
                    let code = if exists(tp) {
                        codes::OPERATION_NOT_ATTEMPTED
                    } else {
                        codes::UNKNOWN_TOPIC_OR_PARTITION
                    };
                    (tp.clone(), code)
                })
                .collect(),
        )
    }

    async fn add_partitions(
        &self,
        version: i16,
        r: AddPartitionsToTxnRequest,
    ) -> AddPartitionsToTxnResponse {
        let image = self.replicas.image();
        let fenced_supported = version >= 2;
        if version <= 3 {
            let partitions: BTreeSet<TopicPartition> = r
                .v3_and_below_topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| TopicPartition::new(t.name.0.to_string(), *p))
                })
                .collect();
            let codes_by_tp = match Self::unknown_partitions(&image, &partitions) {
                Some(refused) => refused,
                None => self
                    .add_partitions_of(
                        &r.v3_and_below_transactional_id.0,
                        r.v3_and_below_producer_id.0,
                        r.v3_and_below_producer_epoch,
                        partitions,
                        false,
                    )
                    .await
                    .into_iter()
                    .map(|(tp, res)| {
                        (
                            tp,
                            res.err()
                                .map_or(codes::NONE, |e| e.code_for(fenced_supported)),
                        )
                    })
                    .collect(),
            };
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topic_results(codes_by_tp));
        }
        let mut results = Vec::new();
        for t in r.transactions {
            let partitions: BTreeSet<TopicPartition> = t
                .topics
                .iter()
                .flat_map(|topic| {
                    topic
                        .partitions
                        .iter()
                        .map(|p| TopicPartition::new(topic.name.0.to_string(), *p))
                })
                .collect();
            let codes_by_tp = match Self::unknown_partitions(&image, &partitions) {
                Some(refused) => refused,
                None => self
                    .add_partitions_of(
                        &t.transactional_id.0,
                        t.producer_id.0,
                        t.producer_epoch,
                        partitions,
                        t.verify_only,
                    )
                    .await
                    .into_iter()
                    .map(|(tp, res)| (tp, res.err().map_or(codes::NONE, TxnError::code)))
                    .collect(),
            };
            results.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_topic_results(topic_results(codes_by_tp)),
            );
        }
        AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
    }

    async fn add_offsets(
        &self,
        version: i16,
        r: AddOffsetsToTxnRequest,
    ) -> AddOffsetsToTxnResponse {
        let image = self.replicas.image();
        let offsets_partitions = image
            .topics
            .topic_by_name(super::groups::GROUP_METADATA_TOPIC_NAME)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(0))
            .filter(|n| *n > 0)
            .unwrap_or(50);
        let group_partition = crate::group::partition_for_group(&r.group_id.0, offsets_partitions);
        let tp = TopicPartition::new(super::groups::GROUP_METADATA_TOPIC_NAME, group_partition);
        let result = self
            .add_partitions_of(
                &r.transactional_id.0,
                r.producer_id.0,
                r.producer_epoch,
                [tp].into(),
                false,
            )
            .await;
        let code = result
            .into_values()
            .next()
            .and_then(Result::err)
            .map_or(codes::NONE, |e| e.code_for(version >= 2));
        AddOffsetsToTxnResponse::default().with_error_code(code)
    }

    async fn end_txn(&self, version: i16, r: EndTxnRequest) -> EndTxnResponse {
        let txn_id = r.transactional_id.0.to_string();
        let result = if txn_id.is_empty() {
            Err(TxnError::InvalidRequest)
        } else {
            let partition = self.partition_for(&txn_id);
            self.route(partition, |reply| Command::EndTxn {
                transactional_id: txn_id,
                producer_id: r.producer_id.0,
                producer_epoch: r.producer_epoch,
                commit: r.committed,
                reply,
            })
            .await
            .and_then(|r| r)
        };
        EndTxnResponse::default().with_error_code(
            result
                .err()
                .map_or(codes::NONE, |e| e.code_for(version >= 2)),
        )
    }

    async fn describe(&self, r: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
        let mut states = Vec::new();
        for id in r.transactional_ids {
            let txn_id = id.0.to_string();
            let state = DescribedState::default().with_transactional_id(id.clone());
            let result = if txn_id.is_empty() {
                Err(TxnError::InvalidRequest)
            } else {
                let partition = self.partition_for(&txn_id);
                self.route(partition, |reply| Command::Describe {
                    transactional_id: txn_id,
                    reply,
                })
                .await
                .and_then(|r| r)
            };
            states.push(match result {
                Err(e) => state.with_error_code(e.code()),
                Ok(d) => {
                    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in d.partitions {
                        topics.entry(tp.topic).or_default().push(tp.partition);
                    }
                    state
                        .with_transaction_state(StrBytes::from_static_str(d.state.name()))
                        .with_transaction_timeout_ms(d.timeout_ms)
                        .with_transaction_start_time_ms(d.start_ms)
                        .with_producer_id(ProducerId(d.producer_id))
                        .with_producer_epoch(d.producer_epoch)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(t, p)| {
                                    TopicData::default()
                                        .with_topic(TopicName(StrBytes::from_string(t)))
                                        .with_partitions(p)
                                })
                                .collect(),
                        )
                }
            });
        }
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }

    async fn list(&self, r: ListTransactionsRequest) -> ListTransactionsResponse {
        let mut unknown = Vec::new();
        let states = if r.state_filters.is_empty() {
            None
        } else {
            let mut known = BTreeSet::new();
            for name in &r.state_filters {
                match TxnState::from_name(name) {
                    Some(s) => {
                        known.insert(s);
                    }
                    None => unknown.push(name.clone()),
                }
            }
            Some(known)
        };
        let producer_ids: BTreeSet<i64> = r.producer_id_filters.iter().map(|p| p.0).collect();
        let partitions: Vec<i32> = {
            let shards = self.lock_shards();
            if shards
                .values()
                .any(|s| s.status.load(Ordering::SeqCst) == LOADING)
            {
                return ListTransactionsResponse::default()
                    .with_error_code(codes::COORDINATOR_LOAD_IN_PROGRESS);
            }
            shards.keys().copied().collect()
        };
        let mut listed = Vec::new();
        for p in partitions {
            let states = states.clone();
            let producer_ids = producer_ids.clone();
            if let Ok(l) = self
                .route(p, |reply| Command::List {
                    states,
                    producer_ids,
                    min_duration_ms: r.duration_filter,
                    reply,
                })
                .await
            {
                listed.extend(l);
            }
        }
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(
                listed
                    .into_iter()
                    .map(|t| {
                        ListedState::default()
                            .with_transactional_id(tid(&t.transactional_id))
                            .with_producer_id(ProducerId(t.producer_id))
                            .with_transaction_state(StrBytes::from_static_str(t.state.name()))
                    })
                    .collect(),
            )
    }

    /// FindCoordinator for a TRANSACTION key: the leader of `__transaction_state-partitionFor(key)`
    /// on `listener`; COORDINATOR_NOT_AVAILABLE while the topic does not exist (its creation
    /// is requested), has no leader, or the leader has no such listener. Error code, node id,
    /// host, port.
    #[must_use]
    pub fn find_coordinator(&self, listener: &str, key: &str) -> (i16, i32, String, i32) {
        let none = (codes::COORDINATOR_NOT_AVAILABLE, -1, String::new(), -1);
        let image = self.replicas.image();
        let Some(topic) = image.topics.topic_by_name(TRANSACTION_STATE_TOPIC_NAME) else {
            self.create_topic();
            return none;
        };
        let partition = self.partition_for(key);
        let Some(registration) = topic.partitions.get(&partition) else {
            return none;
        };
        let endpoint = image
            .cluster
            .broker(registration.leader)
            .filter(|b| !b.fenced)
            .and_then(|b| b.listeners.get(listener));
        match endpoint {
            Some(e) if registration.leader >= 0 => (
                codes::NONE,
                registration.leader,
                e.host.clone(),
                i32::from(e.port),
            ),
            _ => none,
        }
    }

    /// Asks the controller to create `__transaction_state` (Kafka's
    /// `TransactionStateManager.transactionTopicConfigs`) unless a request is in flight.
    fn create_topic(&self) {
        if self.creating_topic.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(runtime) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        else {
            self.creating_topic.store(false, Ordering::SeqCst);
            return;
        };
        let config = |name: &'static str, value: String| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str(name))
                .with_value(Some(StrBytes::from_string(value)))
        };
        let c = &self.config;
        let topic = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(
                TRANSACTION_STATE_TOPIC_NAME,
            )))
            .with_num_partitions(c.num_partitions)
            .with_replication_factor(c.replication_factor)
            .with_configs(vec![
                config("cleanup.policy", "compact".to_owned()),
                config("compression.type", "uncompressed".to_owned()),
                config("min.insync.replicas", c.min_isr.to_string()),
                config("segment.bytes", c.segment_bytes.to_string()),
                config("unclean.leader.election.enable", "false".to_owned()),
            ]);
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(i32::try_from(CREATE_TOPIC_TIMEOUT.as_millis()).unwrap_or(i32::MAX));
        let channel = Arc::clone(&self.channel);
        let in_flight = Arc::clone(&self.creating_topic);
        runtime.spawn(async move {
            match channel
                .send(RequestKind::CreateTopics(request), None, CREATE_TOPIC_TIMEOUT)
                .await
            {
                Ok(ResponseKind::CreateTopics(resp)) => {
                    for t in resp.topics {
                        if t.error_code == 0 {
                            info!(topic = TRANSACTION_STATE_TOPIC_NAME, "created the transaction state topic");
                        } else {
                            warn!(topic = TRANSACTION_STATE_TOPIC_NAME, error_code = t.error_code,
                                message = ?t.error_message, "creating the transaction state topic failed");
                        }
                    }
                }
                Ok(other) => warn!(response = ?other, "unexpected answer to CreateTopics"),
                Err(e) => warn!(error = %e, "creating the transaction state topic failed"),
            }
            in_flight.store(false, Ordering::SeqCst);
        });
    }
}

fn topic_results(codes_by_tp: BTreeMap<TopicPartition, i16>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for (tp, code) in codes_by_tp {
        by_topic.entry(tp.topic).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(tp.partition)
                .with_partition_error_code(code),
        );
    }
    by_topic
        .into_iter()
        .map(|(t, results)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(t)))
                .with_results_by_partition(results)
        })
        .collect()
}

/// `__transaction_state` leadership to the transaction coordinator. Registered after the
/// replica manager's publisher: a shard loads from a partition this broker already leads.
#[derive(Debug)]
pub struct TxnCoordinatorPublisher {
    broker: Arc<Broker>,
}

impl TxnCoordinatorPublisher {
    /// For `broker` (which has a transaction coordinator; otherwise this does nothing).
    #[must_use]
    pub fn new(broker: Arc<Broker>) -> Self {
        TxnCoordinatorPublisher { broker }
    }
}

impl MetadataPublisher for TxnCoordinatorPublisher {
    fn name(&self) -> &str {
        "TxnCoordinatorPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        _image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        let broker = &self.broker;
        let Some(txn) = broker.txn() else {
            return;
        };
        broker.while_open(|| {
            let changes = delta.local_changes(broker.config().node_id);
            let state = |tp: &&krust_metadata::image::topics::TopicPartition| {
                tp.topic == TRANSACTION_STATE_TOPIC_NAME
            };
            for tp in changes.deletes.iter().filter(state) {
                txn.on_resigned(tp.partition, None);
            }
            for (tp, info) in changes.followers.iter().filter(|(tp, _)| state(tp)) {
                txn.on_resigned(tp.partition, Some(info.partition.leader_epoch));
            }
            for tp in changes.leaders.keys().filter(state) {
                let led = broker
                    .replica_manager()
                    .partition(tp)
                    .and_then(|partition| {
                        let p = lock(&partition);
                        p.is_leader().then(|| p.leader_epoch())
                    });
                if let Some(leader_epoch) = led {
                    txn.on_elected(tp.partition, leader_epoch);
                }
            }
        });
    }
}

/// FindCoordinator v0–v5 with key type TRANSACTION (v4+: each of `coordinator_keys`).
#[must_use]
pub fn find_coordinator(
    txn: &TxnCoordinator,
    ctx: &RequestContext,
    r: &kafka_protocol::messages::FindCoordinatorRequest,
) -> ResponseKind {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{BrokerId, FindCoordinatorResponse};
    let message = |code: i16| {
        StrBytes::from_static_str(if code == codes::NONE {
            "NONE"
        } else {
            "The coordinator is not available."
        })
    };
    if ctx.api_version >= 4 {
        let coordinators = r
            .coordinator_keys
            .iter()
            .map(|key| {
                let (code, node, host, port) = txn.find_coordinator(&ctx.listener_name, key);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(StrBytes::from_string(host))
                    .with_port(port)
                    .with_error_code(code)
            })
            .collect();
        return ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(coordinators),
        );
    }
    let (code, node, host, port) = txn.find_coordinator(&ctx.listener_name, &r.key);
    ResponseKind::FindCoordinator(
        FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_error_message(Some(message(code)))
            .with_node_id(BrokerId(node))
            .with_host(StrBytes::from_string(host))
            .with_port(port),
    )
}
