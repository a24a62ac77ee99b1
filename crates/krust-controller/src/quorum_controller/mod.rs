//! [`QuorumController`]: the KIP-631 controller state machine (Kafka 3.9 `QuorumController`),
//! sans-IO. Every controller (active or standby) replays committed batches into its
//! [`MetadataImage`]; the active one also turns requests and timers into atomic record
//! batches and answers each request once the records it depends on are committed.
//!
//! # Driving it
//!
//! 1. [`QuorumController::handle_committed`] with every committed batch (and
//!    [`QuorumController::handle_snapshot`] for a loaded snapshot), in log order.
//! 2. [`QuorumController::handle_leader_change`] when this node becomes the Raft leader —
//!    only after every batch below `log_end_offset` went through step 1 — or stops being it.
//! 3. [`QuorumController::handle_request`] per request; [`QuorumController::handle_timeout`]
//!    at [`QuorumController::poll_timeout`].
//! 4. Drain [`QuorumController::poll_action`] after each call: an
//!    [`ControllerAction::Append`] must land at exactly its `base_offset` in its leader epoch
//!    (Raft's `append_in_epoch`); if it cannot, the driver resigns and reports the loss of
//!    leadership. A [`ControllerAction::Respond`] goes to the client.
//!
//! The active controller's image already holds its own uncommitted writes (the next request
//! sees them, as Kafka's timeline structures do); on losing leadership it falls back to the
//! image of committed records and rebuilds its broker sessions from it ("fresh timers, no
//! reload").
//!
//! # Layout
//!
//! - this file: the state machine (replay, activation, bootstrap, timers, writes, pending
//!   responses) and request dispatch (registration, heartbeats, producer ids, features).
//! - `topics`: CreateTopics, CreatePartitions, DeleteTopics.
//! - `replication`: leadership/ISR moves, AlterPartition, ElectLeaders.
//! - `reassignment`: AlterPartitionReassignments, ListPartitionReassignments (KIP-455).
//! - `directories`: AssignReplicasToDirs (KIP-858).
//! - `responses`: whole-request refusals, NOT_CONTROLLER on failover.
//! - CreateAcls/DeleteAcls, AlterClientQuotas, AlterUserScramCredentials are built by
//!   [`crate::acls`], [`crate::client_quotas`] and [`crate::scram`] from the image.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyAlterConfigsResourceResponse;
use kafka_protocol::messages::alter_partition_response;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterClientQuotasRequest,
    AlterClientQuotasResponse, AlterConfigsRequest, AlterConfigsResponse,
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, AlterPartitionRequest,
    AlterPartitionResponse, AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    AssignReplicasToDirsRequest, AssignReplicasToDirsResponse, BrokerHeartbeatRequest,
    BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest, BrokerRegistrationResponse,
    ControllerRegistrationRequest, ControllerRegistrationResponse, CreateAclsRequest,
    CreateAclsResponse, CreateDelegationTokenRequest, CreateDelegationTokenResponse,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteAclsRequest, DeleteAclsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ElectLeadersRequest, ElectLeadersResponse, ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse, TopicName, UnregisterBrokerRequest,
    UnregisterBrokerResponse, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::image::topics::{LeaderRecoveryState, PartitionRegistration};
use krust_metadata::kafka_uuid::{
    DIRECTORY_ID_MIGRATING, DIRECTORY_ID_UNASSIGNED, random_kafka_uuid,
};
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::{
    AbortTransactionRecord, BeginTransactionRecord, ConfigRecord, EndTransactionRecord,
    MetadataRecord, NoOpRecord, PartitionRecord, RemoveTopicRecord, TopicRecord,
    ZkMigrationStateRecord,
};
use krust_metadata::{
    ApiMessageAndVersion, BootstrapMetadata, MetadataImage, MetadataProvenance, ReplayError,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tracing::{info, warn};
use uuid::Uuid;

use crate::acls::{create_acls, delete_acls};
use crate::client_quotas::alter_client_quotas;
use crate::configs::{incremental_alter_configs, legacy_alter_configs};
use crate::delegation_tokens::{
    DelegationTokenConfig, TokenContext, create_delegation_token, expire_delegation_token,
    renew_delegation_token,
};
use crate::error::{ActivationError, ControllerError};
use crate::features::{FeatureContext, NodeFeatures, update_features};
use crate::heartbeat::{
    BrokerControlState, BrokerHeartbeatManager, HeartbeatConfig, PartitionWork,
};
use crate::partition_change::{Election, NO_LEADER, PartitionChangeBuilder};
use crate::placement::StripedReplicaPlacer;
use crate::producer_ids::ProducerIdControl;
use crate::registration::{
    ImageClusterView, register_broker, register_controller, unregister_broker,
};
use crate::scram::alter_user_scram_credentials;
use crate::topic_names;
pub use krust_config::TopicValidationDefaults;

mod directories;
mod reassignment;
mod replication;
mod responses;
mod topics;
mod transactions;

use transactions::{OpenTransaction, replay_records};

pub use responses::top_level_error;
use responses::{error_response, refusal};

/// `metadata.max.idle.interval.ms` default: a `NoOpRecord` this often while active.
pub const METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT: u64 = 500;
/// Most partitions one CreateTopics may create (Kafka's `MAX_PARTITIONS_PER_BATCH`). Checked
/// before anything is allocated, so an absurd count costs nothing.
pub const MAX_PARTITIONS_PER_REQUEST: i64 = 10_000;
/// `unclean.leader.election.interval.ms` default: how often leaderless partitions of topics
/// that allow unclean election get one.
pub const UNCLEAN_LEADER_ELECTION_INTERVAL_MS_DEFAULT: u64 = 300_000;
/// Most elections one periodic unclean-election pass makes (Kafka's
/// `MAX_ELECTIONS_PER_IMBALANCE`); the rest wait for the next pass.
pub const MAX_ELECTIONS_PER_PASS: usize = 1_000;
/// The topic config that allows unclean leader election.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// `leader.imbalance.check.interval.seconds` default (with `auto.leader.rebalance.enable`
/// true, its default): how long after a balancing pass that elected everything it could the
/// next one runs.
pub const LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS_DEFAULT: u64 = 300;
/// `BeginTransactionRecord.Name` of the bootstrap transaction.
const BOOTSTRAP_TRANSACTION_NAME: &str = "Bootstrap records";
/// `AbortTransactionRecord.Reason` of a transaction a new active controller finds open.
const FAILOVER_ABORT_REASON: &str = "Controller failover";

/// The controller's settings (Kafka's names and defaults).
#[derive(Debug, Clone)]
pub struct QuorumControllerConfig {
    /// `node.id`.
    pub node_id: i32,
    /// The cluster id from `meta.properties`.
    pub cluster_id: String,
    /// Broker session settings.
    pub heartbeat: HeartbeatConfig,
    /// `metadata.max.idle.interval.ms`; 0 disables the no-op records.
    pub metadata_max_idle_interval_ms: u64,
    /// What to write on first activation with an empty log.
    pub bootstrap: BootstrapMetadata,
    /// `num.partitions` (used for CreateTopics with -1).
    pub default_num_partitions: i32,
    /// `default.replication.factor` (used for CreateTopics with -1).
    pub default_replication_factor: i16,
    /// `kraft.version` as the Raft layer has it.
    pub kraft_version: i16,
    /// `unclean.leader.election.interval.ms`; 0 disables the periodic pass.
    pub unclean_leader_election_interval_ms: u64,
    /// `leader.imbalance.check.interval.seconds` (in ms) when `auto.leader.rebalance.enable`,
    /// else `None` (no automatic preferred-leader elections). Kafka 3.9's KRaft controller
    /// balances every partition whose leader is not its preferred replica; it does not use
    /// `leader.imbalance.per.broker.percentage` (a ZooKeeper-controller setting).
    pub leader_imbalance_check_interval_ms: Option<u64>,
    /// The broker-level log settings topic configs are validated together with
    /// (`KafkaConfig.extractLogConfigMap` in Kafka's `ControllerConfigurationValidator`).
    pub topic_validation_defaults: TopicValidationDefaults,
    /// `zookeeper.metadata.migration.enable`: this controller takes part in a KIP-866
    /// migration (activation writes PRE_MIGRATION on an empty log; ZooKeeper-mode brokers may
    /// register).
    pub zk_migration_enabled: bool,
    /// While dual-writing, the most metadata records ZooKeeper may lag behind the log before
    /// admin writes are refused (a krust addition, Kafka has no bound:
    /// `zookeeper.metadata.migration.write.behind.max.records`); `None`: no bound.
    pub max_zk_write_behind: Option<u64>,
}

/// Settings of the admin APIs served from the image's security parts (ACLs, quotas, SCRAM,
/// delegation tokens), set with [`QuorumController::with_admin_config`] (kept apart from
/// [`QuorumControllerConfig`] so existing constructions stay valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// An authorizer is configured (`authorizer.class.name`, Kafka's
    /// `org.apache.kafka.metadata.authorizer.StandardAuthorizer`): CreateAcls and DeleteAcls
    /// are served. Without one Kafka answers them `SECURITY_DISABLED`; `krust server` sets this
    /// from `authorizer.class.name` as Kafka does. (The default, `true`, is for embedders.)
    pub authorizer_enabled: bool,
    /// `delegation.token.secret.key` (alias `delegation.token.master.key`),
    /// `delegation.token.max.lifetime.ms`, `delegation.token.expiry.time.ms`.
    pub delegation_tokens: DelegationTokenConfig,
    /// The controller's `server.properties`: the static layer of a created topic's effective
    /// configs in the CreateTopics answer (Kafka's `computeEffectiveTopicConfigs`).
    pub static_properties: std::collections::BTreeMap<String, String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            authorizer_enabled: true,
            delegation_tokens: DelegationTokenConfig::default(),
            static_properties: std::collections::BTreeMap::new(),
        }
    }
}

/// One committed batch from the Raft listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedBatch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Leader epoch it was written in.
    pub epoch: i32,
    /// The records, in order.
    pub records: Vec<ApiMessageAndVersion>,
}

impl CommittedBatch {
    /// Offset of the last record.
    ///
    /// # Panics
    /// On an empty batch (Raft never commits one).
    #[must_use]
    pub fn last_offset(&self) -> i64 {
        assert!(!self.records.is_empty(), "empty committed batch");
        self.base_offset + i64::try_from(self.records.len()).unwrap_or(i64::MAX) - 1
    }
}

/// A request the controller answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerRequest {
    /// BrokerRegistration.
    BrokerRegistration(BrokerRegistrationRequest),
    /// BrokerHeartbeat.
    BrokerHeartbeat(BrokerHeartbeatRequest),
    /// UnregisterBroker.
    UnregisterBroker(UnregisterBrokerRequest),
    /// ControllerRegistration.
    ControllerRegistration(ControllerRegistrationRequest),
    /// CreateTopics.
    CreateTopics(CreateTopicsRequest),
    /// DeleteTopics.
    DeleteTopics(DeleteTopicsRequest),
    /// AlterPartition.
    AlterPartition(AlterPartitionRequest),
    /// AssignReplicasToDirs (KIP-858).
    AssignReplicasToDirs(AssignReplicasToDirsRequest),
    /// CreatePartitions.
    CreatePartitions(CreatePartitionsRequest),
    /// ElectLeaders.
    ElectLeaders(ElectLeadersRequest),
    /// AlterPartitionReassignments.
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    /// ListPartitionReassignments (read-only: answered from the image, no records).
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
    /// IncrementalAlterConfigs (topic and broker resources).
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    /// The legacy AlterConfigs (whole config set of topic and broker resources).
    AlterConfigs(AlterConfigsRequest),
    /// AllocateProducerIds.
    AllocateProducerIds(AllocateProducerIdsRequest),
    /// UpdateFeatures at request version `version` (the upgrade-type field depends on it).
    UpdateFeatures {
        /// The request.
        request: UpdateFeaturesRequest,
        /// Its API version.
        version: i16,
    },
    /// CreateAcls.
    CreateAcls(CreateAclsRequest),
    /// DeleteAcls.
    DeleteAcls(DeleteAclsRequest),
    /// AlterClientQuotas.
    AlterClientQuotas(AlterClientQuotasRequest),
    /// AlterUserScramCredentials.
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    /// CreateDelegationToken, with who asks and the wall clock.
    CreateDelegationToken {
        /// The request.
        request: CreateDelegationTokenRequest,
        /// The caller and the time.
        context: TokenContext,
    },
    /// RenewDelegationToken.
    RenewDelegationToken {
        /// The request.
        request: RenewDelegationTokenRequest,
        /// The caller and the time.
        context: TokenContext,
    },
    /// ExpireDelegationToken.
    ExpireDelegationToken {
        /// The request.
        request: ExpireDelegationTokenRequest,
        /// The caller and the time.
        context: TokenContext,
    },
    /// Records of the ZooKeeper migration's initial copy (Kafka's `MigrationRecordConsumer`),
    /// written as one atomic batch. Runs in PRE_MIGRATION; answered once committed. Refused
    /// with NOT_CONTROLLER unless this controller is active in `leader_epoch` (the migration
    /// driver's batches belong to the leadership that read ZooKeeper).
    MigrationRecords {
        /// The leader epoch the driver made the batch in.
        leader_epoch: i32,
        /// The records.
        records: Vec<ApiMessageAndVersion>,
    },
}

/// The answer to a [`ControllerRequest`].
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerResponse {
    /// BrokerRegistration.
    BrokerRegistration(BrokerRegistrationResponse),
    /// BrokerHeartbeat.
    BrokerHeartbeat(BrokerHeartbeatResponse),
    /// UnregisterBroker.
    UnregisterBroker(UnregisterBrokerResponse),
    /// ControllerRegistration.
    ControllerRegistration(ControllerRegistrationResponse),
    /// CreateTopics.
    CreateTopics(CreateTopicsResponse),
    /// DeleteTopics.
    DeleteTopics(DeleteTopicsResponse),
    /// AlterPartition.
    AlterPartition(AlterPartitionResponse),
    /// AssignReplicasToDirs.
    AssignReplicasToDirs(AssignReplicasToDirsResponse),
    /// CreatePartitions.
    CreatePartitions(CreatePartitionsResponse),
    /// ElectLeaders.
    ElectLeaders(ElectLeadersResponse),
    /// IncrementalAlterConfigs.
    IncrementalAlterConfigs(IncrementalAlterConfigsResponse),
    /// AlterConfigs.
    AlterConfigs(AlterConfigsResponse),
    /// AllocateProducerIds.
    AllocateProducerIds(AllocateProducerIdsResponse),
    /// UpdateFeatures.
    UpdateFeatures(UpdateFeaturesResponse),
    /// CreateAcls.
    CreateAcls(CreateAclsResponse),
    /// DeleteAcls.
    DeleteAcls(DeleteAclsResponse),
    /// AlterClientQuotas.
    AlterClientQuotas(AlterClientQuotasResponse),
    /// AlterUserScramCredentials.
    AlterUserScramCredentials(AlterUserScramCredentialsResponse),
    /// CreateDelegationToken (boxed: the largest response).
    CreateDelegationToken(Box<CreateDelegationTokenResponse>),
    /// RenewDelegationToken.
    RenewDelegationToken(RenewDelegationTokenResponse),
    /// ExpireDelegationToken.
    ExpireDelegationToken(ExpireDelegationTokenResponse),
    /// AlterPartitionReassignments.
    AlterPartitionReassignments(AlterPartitionReassignmentsResponse),
    /// ListPartitionReassignments.
    ListPartitionReassignments(ListPartitionReassignmentsResponse),
    /// The migration batch is committed: where it ended, or why it was refused.
    MigrationRecords(Result<MigrationBatchCommitted, ControllerError>),
}

/// Where a committed migration batch ended (the `/migration` znode records it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationBatchCommitted {
    /// Offset of the batch's last record.
    pub last_offset: i64,
    /// The leader epoch it was written in.
    pub epoch: i32,
}

/// Identifies a request until its response comes out of [`QuorumController::poll_action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum ControllerAction {
    /// Append `records` as one atomic batch at `base_offset` in leader epoch `epoch`.
    Append {
        /// The controller's (Raft leader) epoch.
        epoch: i32,
        /// Where the first record must land.
        base_offset: i64,
        /// The records.
        records: Vec<ApiMessageAndVersion>,
    },
    /// Send `response` for request `id`.
    Respond {
        /// The request.
        id: RequestId,
        /// Its response.
        response: ControllerResponse,
    },
}

/// A response waiting for the log to commit through `offset`.
#[derive(Debug)]
struct PendingResponse {
    offset: i64,
    id: RequestId,
    response: ControllerResponse,
}

/// State that exists only while active.
#[derive(Debug)]
struct ActiveState {
    epoch: i32,
    /// The log end at activation: batches from here on are this controller's own writes.
    first_write_offset: i64,
    /// Where the next batch goes.
    next_write_offset: i64,
    /// Ordered by offset (writes only go forward).
    pending: VecDeque<PendingResponse>,
    /// When the next `NoOpRecord` is due.
    next_noop: Option<Instant>,
    /// When the next periodic unclean election pass is due.
    next_unclean_check: Option<Instant>,
    /// When expired delegation tokens are next removed.
    next_token_sweep: Option<Instant>,
    /// Partitions whose leader is not their preferred replica (Kafka's
    /// `imbalancedPartitions`), kept up to date by every write.
    imbalanced: BTreeSet<(Uuid, i32)>,
    /// The automatic preferred-leader balancing pass (Kafka's `imbalancedScheduled`).
    rebalance: RebalanceSchedule,
}

/// When the next automatic preferred-leader balancing pass runs (Kafka's
/// `ImbalanceSchedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RebalanceSchedule {
    /// Not scheduled; once an imbalance exists, run one check interval from then.
    Deferred,
    /// Not scheduled; the last pass hit its election limit, so run again at once.
    Immediately,
    /// Due at this instant.
    Scheduled(Instant),
}

/// The quorum controller. See the module doc for the driving contract.
#[derive(Debug)]
pub struct QuorumController {
    config: QuorumControllerConfig,
    admin: AdminConfig,
    /// Replay of committed records only.
    committed_image: MetadataImage,
    /// `committed_image` plus this controller's uncommitted writes (equal on a standby).
    image: MetadataImage,
    /// Offset of the last committed record; -1 before any.
    committed_offset: i64,
    sessions: BrokerHeartbeatManager,
    placer: StripedReplicaPlacer,
    rng: StdRng,
    active: Option<ActiveState>,
    actions: VecDeque<ControllerAction>,
    next_request_id: u64,
    /// The transaction open in the committed log.
    committed_transaction: Option<OpenTransaction>,
    /// The transaction open in `image` (the committed one, or one this controller opened).
    image_transaction: Option<OpenTransaction>,
    /// Records committed to the log but not yet written to ZooKeeper (the migration driver's
    /// `ZkWriteBehindLag`), as last reported.
    zk_write_behind: i64,
    /// The wall clock in ms since the epoch (delegation tokens expire by it).
    wall_clock_ms: fn() -> i64,
    /// The caller's `controller_mutation_rate` quota while one request runs
    /// ([`QuorumController::handle_request_with_quota`]); `None` = unlimited.
    partition_change_quota: Option<Box<dyn PartitionChangeQuota>>,
}

/// Kafka's `ControllerRequestContext.applyPartitionChangeQuota` (KIP-599): the caller's
/// `controller_mutation_rate` quota, asked once per topic created, extended or deleted, with
/// the number of partitions, after the topic's validation and before its records. The driver
/// supplies it (the quota's token bucket runs on the node's clock, as Kafka's does); the
/// controller only asks.
pub trait PartitionChangeQuota: Send + std::fmt::Debug {
    /// Takes `partitions` from the quota.
    ///
    /// # Errors
    /// [`QuotaExceeded`] when the mutation is refused (strict mode, quota used up): the topic
    /// is answered `THROTTLING_QUOTA_EXCEEDED` and nothing is written for it.
    fn apply(&mut self, partitions: usize) -> Result<(), QuotaExceeded>;
}

/// A mutation refused by a [`PartitionChangeQuota`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaExceeded;

/// The system clock in ms since the Unix epoch.
fn system_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl QuorumController {
    /// A standby controller with an empty image; randomness (placement, topic ids) from
    /// `seed`.
    #[must_use]
    pub fn new(config: QuorumControllerConfig, seed: u64) -> Self {
        Self {
            sessions: BrokerHeartbeatManager::new(config.heartbeat),
            config,
            admin: AdminConfig::default(),
            committed_image: MetadataImage::empty(),
            image: MetadataImage::empty(),
            committed_offset: -1,
            placer: StripedReplicaPlacer::new(StdRng::seed_from_u64(seed)),
            rng: StdRng::seed_from_u64(seed.wrapping_add(0x9E37_79B9_7F4A_7C15)),
            active: None,
            actions: VecDeque::new(),
            next_request_id: 0,
            committed_transaction: None,
            image_transaction: None,
            zk_write_behind: 0,
            wall_clock_ms: system_clock_ms,
            partition_change_quota: None,
        }
    }

    /// Reads the wall clock (ms since the Unix epoch) from `clock` instead of the system's
    /// (tests).
    #[must_use]
    pub fn with_wall_clock(mut self, clock: fn() -> i64) -> Self {
        self.wall_clock_ms = clock;
        self
    }

    /// The migration driver's write-behind lag (records committed but not yet in ZooKeeper);
    /// with `max_zk_write_behind`, admin writes are refused while it is above the bound.
    pub fn set_zk_write_behind(&mut self, lag: i64) {
        self.zk_write_behind = lag;
    }

    /// Kafka's `zkRegistrationAllowed`: the migration flag at a metadata.version that supports
    /// the migration (ZooKeeper-mode brokers may be registered).
    pub(super) fn zk_registration_allowed(&self) -> bool {
        self.config.zk_migration_enabled && self.image.metadata_version().is_migration_supported()
    }

    /// The admin API settings (defaults: [`AdminConfig::default`]).
    #[must_use]
    pub fn with_admin_config(mut self, admin: AdminConfig) -> Self {
        self.admin = admin;
        self
    }

    /// `zookeeper.metadata.migration.enable` on this controller (sent as `ZkMigrationReady`
    /// in its ControllerRegistration).
    #[must_use]
    pub fn zk_migration_enabled(&self) -> bool {
        self.config.zk_migration_enabled
    }

    /// The cluster-wide ZooKeeper migration state of the image (with this controller's own
    /// writes).
    #[must_use]
    pub fn zk_migration_state(&self) -> ZkMigrationState {
        self.image.features.zk_migration_state
    }

    /// Offset of the `BeginTransactionRecord` of the transaction open in the committed log.
    #[must_use]
    pub fn open_transaction_offset(&self) -> Option<i64> {
        self.committed_transaction.as_ref().map(|t| t.start_offset)
    }

    /// The image, including this controller's uncommitted writes while active.
    #[must_use]
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// The image of committed records only.
    #[must_use]
    pub fn committed_image(&self) -> &MetadataImage {
        &self.committed_image
    }

    /// Offset of the last committed record (-1 before any).
    #[must_use]
    pub fn committed_offset(&self) -> i64 {
        self.committed_offset
    }

    /// Whether this controller is active.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// The broker sessions (for metrics and tests).
    #[must_use]
    pub fn sessions(&self) -> &BrokerHeartbeatManager {
        &self.sessions
    }

    /// Next action, in order.
    pub fn poll_action(&mut self) -> Option<ControllerAction> {
        self.actions.pop_front()
    }

    /// Replays one committed batch.
    ///
    /// # Errors
    /// A [`ReplayError`] when a record does not fit the image: the log is not one this
    /// controller can follow, and the caller must stop (Kafka's fatal fault handler).
    ///
    /// # Panics
    /// If the batch does not follow the last committed offset, or if the active controller is
    /// handed a batch from before its activation (see the module doc).
    pub fn handle_committed(
        &mut self,
        now: Instant,
        batch: &CommittedBatch,
    ) -> Result<(), ReplayError> {
        assert!(
            batch.base_offset > self.committed_offset,
            "committed batch at {} after offset {}",
            batch.base_offset,
            self.committed_offset
        );
        let last_offset = batch.last_offset();
        let (image, aborted) = replay_records(
            &self.committed_image,
            &mut self.committed_transaction,
            batch.base_offset,
            batch.epoch,
            &batch.records,
            |_, _| {},
        )?;
        self.committed_image = image;
        self.committed_offset = last_offset;
        let own_write = self
            .active
            .as_ref()
            .is_some_and(|a| batch.base_offset >= a.first_write_offset);
        if own_write {
            let written = self.active.as_ref().map_or(0, |a| a.next_write_offset);
            assert!(
                last_offset < written,
                "committed offset {last_offset} beyond what this controller wrote ({written})"
            );
            self.complete_pending();
        } else {
            // The driver activates this controller only once the log before the activation
            // offset is replayed; anything else would overwrite uncommitted writes.
            assert!(
                self.active.is_none(),
                "batch at {} from before the activation committed while active",
                batch.base_offset
            );
            // A standby: the image follows the log.
            self.image = self.committed_image.clone();
            self.image_transaction = self.committed_transaction.clone();
            if aborted {
                self.rebuild_sessions(now);
            } else {
                for (i, record) in batch.records.iter().enumerate() {
                    let offset = batch.base_offset + i64::try_from(i).unwrap_or(i64::MAX);
                    self.sessions.replay(now, &record.record, offset);
                }
            }
        }
        Ok(())
    }

    /// Loads a snapshot (the records of an image at `provenance`) in place of everything
    /// replayed so far. Standbys only.
    ///
    /// # Panics
    /// On the active controller (the Raft leader never loads a snapshot).
    ///
    /// # Errors
    /// A [`ReplayError`] when the snapshot does not describe an image.
    pub fn handle_snapshot(
        &mut self,
        now: Instant,
        records: &[ApiMessageAndVersion],
        provenance: MetadataProvenance,
    ) -> Result<(), ReplayError> {
        assert!(
            self.active.is_none(),
            "the active controller loads no snapshot"
        );
        let image = MetadataImage::from_records(records.iter().map(|r| &r.record), provenance)?;
        self.committed_offset = provenance.last_contained_offset;
        self.committed_image = image.clone();
        self.image = image;
        // A snapshot holds committed, stable state only.
        self.committed_transaction = None;
        self.image_transaction = None;
        self.rebuild_sessions(now);
        Ok(())
    }

    /// This node became the active controller in `epoch` (with the log ending before
    /// `log_end_offset`), or stopped being it (`is_active == false`). Losing leadership fails
    /// every pending request with `NOT_CONTROLLER` and drops uncommitted state.
    ///
    /// Activation writes Kafka's activation records: the bootstrap on an empty log (with the
    /// ZooKeeper migration state), an `AbortTransactionRecord` for a transaction left open by
    /// the previous leader, `POST_MIGRATION` when a migrated cluster's controller runs without
    /// `zookeeper.metadata.migration.enable` (finalization).
    ///
    /// # Errors
    /// The log and this controller's settings cannot go together (Kafka's
    /// `ActivationRecordsGenerator` refusals, e.g. migration enabled on a cluster created in
    /// KRaft mode); the caller must stop the process. Nothing was written.
    pub fn handle_leader_change(
        &mut self,
        now: Instant,
        is_active: bool,
        epoch: i32,
        log_end_offset: i64,
    ) -> Result<(), ActivationError> {
        if let Some(previous) = self.active.take() {
            warn!(epoch = previous.epoch, "controller no longer active");
            for pending in previous.pending {
                let response = error_response(&pending.response, &ControllerError::NotController);
                self.actions.push_back(ControllerAction::Respond {
                    id: pending.id,
                    response,
                });
            }
            self.sessions.deactivate();
            self.image = self.committed_image.clone();
            self.image_transaction = self.committed_transaction.clone();
            self.rebuild_sessions(now);
        }
        if !is_active {
            return Ok(());
        }
        assert!(
            log_end_offset > self.committed_offset,
            "activated at log end {log_end_offset} before replaying up to {}",
            self.committed_offset
        );
        let activation = self.activation_records()?;
        info!(
            node_id = self.config.node_id,
            epoch, log_end_offset, "controller activated"
        );
        self.active = Some(ActiveState {
            epoch,
            first_write_offset: log_end_offset,
            next_write_offset: log_end_offset,
            pending: VecDeque::new(),
            next_noop: None,
            next_unclean_check: None,
            next_token_sweep: None,
            imbalanced: imbalanced_partitions(&self.image),
            rebalance: RebalanceSchedule::Deferred,
        });
        self.sessions.activate(now);
        self.write(now, activation);
        self.schedule_noop(now);
        self.schedule_unclean_check(now);
        self.schedule_token_sweep(now);
        self.maybe_schedule_rebalance(now);
        Ok(())
    }

    /// What a newly active controller writes first (Kafka's `ActivationRecordsGenerator`).
    fn activation_records(&self) -> Result<Vec<ApiMessageAndVersion>, ActivationError> {
        let migration_enabled = self.config.zk_migration_enabled;
        let open = self.committed_transaction.as_ref();
        let abort = || {
            ApiMessageAndVersion::new(
                MetadataRecord::AbortTransaction(AbortTransactionRecord {
                    reason: Some(FAILOVER_ABORT_REASON.to_owned()),
                    ..AbortTransactionRecord::default()
                }),
                0,
            )
        };
        if self.image.is_empty() && open.is_none() {
            return self.bootstrap_records(Vec::new());
        }
        if let Some(open) = open
            && open.image_before.is_empty()
        {
            // A bootstrap transaction the previous leader did not finish: abort it and write
            // the bootstrap again.
            let mv = self.config.bootstrap.metadata_version();
            if !mv.is_metadata_transaction_supported() {
                return Err(ActivationError(format!(
                    "Detected partial bootstrap records transaction at {}, but the metadata.version {mv} does not support transactions. Cannot continue.",
                    open.start_offset
                )));
            }
            warn!(
                offset = open.start_offset,
                "aborting a partial bootstrap records transaction and re-appending the bootstrap records"
            );
            return self.bootstrap_records(vec![abort()]);
        }
        let mv = self.image.metadata_version();
        let mut records = Vec::new();
        if let Some(open) = open {
            if !mv.is_metadata_transaction_supported() {
                return Err(ActivationError(format!(
                    "Detected in-progress transaction at offset {}, but the metadata.version {mv} does not support transactions. Cannot continue.",
                    open.start_offset
                )));
            }
            warn!(
                offset = open.start_offset,
                "aborting in-progress metadata transaction"
            );
            records.push(abort());
        }
        // The state once the abort is applied.
        let state = open.map_or(self.image.features.zk_migration_state, |o| {
            o.image_before.features.zk_migration_state
        });
        if migration_enabled && !mv.is_migration_supported() {
            return Err(ActivationError(format!(
                "Should not have ZK migrations enabled on a cluster running metadata.version {mv}"
            )));
        }
        if mv.is_migration_supported() {
            match state {
                ZkMigrationState::None if migration_enabled => {
                    return Err(ActivationError(
                        "Should not have ZK migrations enabled on a cluster that was created in KRaft mode.".to_owned(),
                    ));
                }
                ZkMigrationState::Migration if !migration_enabled => {
                    info!(
                        "Completing the ZK migration since this controller was configured with 'zookeeper.metadata.migration.enable' set to 'false'."
                    );
                    records.push(migration_state_record(ZkMigrationState::PostMigration));
                }
                ZkMigrationState::Migration => info!(
                    "Staying in ZK migration mode since 'zookeeper.metadata.migration.enable' is still 'true'."
                ),
                ZkMigrationState::PostMigration if migration_enabled => info!(
                    "Ignoring 'zookeeper.metadata.migration.enable' value of 'true' since the ZK migration has been completed."
                ),
                _ => {}
            }
        }
        Ok(records)
    }

    /// The bootstrap records of an empty log, after `prefix` (an abort of a partial bootstrap).
    fn bootstrap_records(
        &self,
        prefix: Vec<ApiMessageAndVersion>,
    ) -> Result<Vec<ApiMessageAndVersion>, ActivationError> {
        let bootstrap = &self.config.bootstrap;
        let mv = bootstrap.metadata_version();
        let migration_enabled = self.config.zk_migration_enabled;
        if migration_enabled && !mv.is_metadata_transaction_supported() {
            return Err(ActivationError(format!(
                "The bootstrap metadata.version {mv} does not support ZK migrations. Cannot continue with ZK migrations enabled."
            )));
        }
        info!(
            metadata_version = %mv,
            source = bootstrap.source(),
            "writing bootstrap records to an empty log"
        );
        let mut records = prefix;
        let transaction = mv.is_metadata_transaction_supported();
        if transaction {
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::BeginTransaction(BeginTransactionRecord {
                    name: Some(BOOTSTRAP_TRANSACTION_NAME.to_owned()),
                    ..BeginTransactionRecord::default()
                }),
                0,
            ));
        }
        records.extend(bootstrap.records().iter().cloned());
        // Kafka 3.9 writes the migration state of a new log only at metadata.versions with
        // transactions (the minimum for a new migration).
        if transaction {
            if migration_enabled {
                info!(
                    "Putting the controller into pre-migration mode. No metadata updates will be allowed until the ZK metadata has been migrated."
                );
                records.push(migration_state_record(ZkMigrationState::PreMigration));
            } else {
                records.push(migration_state_record(ZkMigrationState::None));
            }
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::EndTransaction(EndTransactionRecord::default()),
                0,
            ));
        }
        Ok(records)
    }

    fn schedule_unclean_check(&mut self, now: Instant) {
        let interval = self.config.unclean_leader_election_interval_ms;
        if let Some(active) = &mut self.active {
            active.next_unclean_check =
                (interval > 0).then(|| now + Duration::from_millis(interval));
        }
    }

    /// Kafka's `maybeScheduleNextExpiredDelegationTokenSweep`: only with tokens enabled (a
    /// secret key) at a metadata.version that has them.
    fn schedule_token_sweep(&mut self, now: Instant) {
        let tokens = &self.admin.delegation_tokens;
        let enabled = tokens.secret_key.is_some()
            && self
                .image
                .metadata_version()
                .is_delegation_token_supported();
        let at = (enabled && tokens.expiry_check_interval_ms > 0)
            .then(|| now + Duration::from_millis(tokens.expiry_check_interval_ms));
        if let Some(active) = &mut self.active {
            active.next_token_sweep = at;
        }
    }

    fn schedule_noop(&mut self, now: Instant) {
        let interval = self.config.metadata_max_idle_interval_ms;
        if let Some(active) = &mut self.active {
            active.next_noop = (interval > 0).then(|| now + Duration::from_millis(interval));
        }
    }

    /// When [`Self::handle_timeout`] is next due: a broker session expiry or the next no-op.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let active = self.active.as_ref()?;
        let rebalance = match active.rebalance {
            RebalanceSchedule::Scheduled(at) => Some(at),
            RebalanceSchedule::Deferred | RebalanceSchedule::Immediately => None,
        };
        [
            self.sessions.poll_timeout(),
            active.next_noop,
            active.next_unclean_check,
            active.next_token_sweep,
            rebalance,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Fences brokers whose session expired (moving their leaderships) and writes the
    /// `NoOpRecord` when due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.active.is_none() {
            return;
        }
        let mv = self.image.metadata_version();
        if self.zk_migration_state() == ZkMigrationState::PreMigration {
            // Only the no-op record runs in pre-migration (Kafka's RUNS_IN_PREMIGRATION): no
            // fencing, elections or balancing before the ZooKeeper metadata is in the log.
            self.write_noop_if_due(now, mv);
            return;
        }
        for expiry in self.sessions.handle_timeout(now, mv) {
            let mut records =
                self.partition_work(expiry.broker_id, PartitionWork::RemoveBrokerBefore);
            records.extend(expiry.records);
            self.write(now, records);
        }
        let unclean_due = self
            .active
            .as_ref()
            .and_then(|a| a.next_unclean_check)
            .is_some_and(|t| now >= t);
        if unclean_due {
            let records = self.unclean_elections(MAX_ELECTIONS_PER_PASS);
            self.write(now, records);
            self.schedule_unclean_check(now);
        }
        let sweep_due = self
            .active
            .as_ref()
            .and_then(|a| a.next_token_sweep)
            .is_some_and(|t| now >= t);
        if sweep_due {
            let records = crate::delegation_tokens::sweep_expired_delegation_tokens(
                &self.image,
                (self.wall_clock_ms)(),
            );
            self.write(now, records);
            self.schedule_token_sweep(now);
        }
        let rebalance_due = self
            .active
            .as_ref()
            .is_some_and(|a| matches!(a.rebalance, RebalanceSchedule::Scheduled(t) if now >= t));
        if rebalance_due {
            let (records, more) = self.preferred_elections(MAX_ELECTIONS_PER_PASS);
            if !records.is_empty() {
                info!(
                    elections = records.len(),
                    more, "automatic preferred leader elections"
                );
            }
            if let Some(active) = &mut self.active {
                active.rebalance = if more {
                    RebalanceSchedule::Immediately
                } else {
                    RebalanceSchedule::Deferred
                };
            }
            self.write(now, records);
        }
        self.write_noop_if_due(now, mv);
        self.maybe_schedule_rebalance(now);
    }

    fn write_noop_if_due(&mut self, now: Instant, mv: MetadataVersion) {
        let due = self
            .active
            .as_ref()
            .and_then(|a| a.next_noop)
            .is_some_and(|t| now >= t);
        if due {
            if mv.is_noop_record_supported() {
                self.write(
                    now,
                    vec![ApiMessageAndVersion::new(
                        MetadataRecord::NoOp(NoOpRecord::default()),
                        0,
                    )],
                );
            }
            self.schedule_noop(now);
        }
    }

    /// Schedules the automatic preferred-leader balancing pass when some partition's leader
    /// is not its preferred replica and none is scheduled (Kafka's
    /// `maybeScheduleNextBalancePartitionLeaders`, run after every write): one check interval
    /// from now, or at once when the last pass stopped at its election limit.
    fn maybe_schedule_rebalance(&mut self, now: Instant) {
        let Some(interval) = self.config.leader_imbalance_check_interval_ms else {
            return;
        };
        let Some(active) = &mut self.active else {
            return;
        };
        let at = match active.rebalance {
            RebalanceSchedule::Scheduled(_) => return,
            _ if active.imbalanced.is_empty() => return,
            RebalanceSchedule::Deferred => now + Duration::from_millis(interval),
            RebalanceSchedule::Immediately => now,
        };
        active.rebalance = RebalanceSchedule::Scheduled(at);
    }

    /// [`Self::handle_request`] for a caller with a `controller_mutation_rate` quota: CreateTopics,
    /// CreatePartitions and DeleteTopics ask `quota` for each topic's partitions (Kafka's
    /// `ControllerApis` passes the quota of the request's principal and client id).
    pub fn handle_request_with_quota(
        &mut self,
        now: Instant,
        request: ControllerRequest,
        quota: Box<dyn PartitionChangeQuota>,
    ) -> RequestId {
        self.partition_change_quota = Some(quota);
        let id = self.handle_request(now, request);
        self.partition_change_quota = None;
        id
    }

    /// Asks the request's quota for `partitions` (none = unlimited).
    pub(super) fn apply_partition_change_quota(
        &mut self,
        partitions: usize,
    ) -> Result<(), ControllerError> {
        match &mut self.partition_change_quota {
            Some(quota) => quota
                .apply(partitions)
                .map_err(|QuotaExceeded| ControllerError::ThrottlingQuotaExceeded),
            None => Ok(()),
        }
    }

    /// Takes a request; its response comes out of [`Self::poll_action`] once the records it
    /// depends on are committed (at once when refused, or when this node is not active).
    pub fn handle_request(&mut self, now: Instant, request: ControllerRequest) -> RequestId {
        let id = RequestId(self.next_request_id);
        self.next_request_id += 1;
        if self.active.is_none() {
            let response = refusal(&request, &ControllerError::NotController);
            self.actions
                .push_back(ControllerAction::Respond { id, response });
            return id;
        }
        if let Some(max) = self.config.max_zk_write_behind
            && self.zk_migration_state() == ZkMigrationState::Migration
            && u64::try_from(self.zk_write_behind).is_ok_and(|lag| lag > max)
            && bounded_by_write_behind(&request)
        {
            let error = ControllerError::ZkWriteBehind {
                lag: self.zk_write_behind,
                max,
            };
            warn!(request = request_name(&request), %error, "refusing an admin write");
            let response = refusal(&request, &error);
            self.actions
                .push_back(ControllerAction::Respond { id, response });
            return id;
        }
        if self.zk_migration_state() == ZkMigrationState::PreMigration
            && !runs_in_premigration(&request)
        {
            info!(
                request = request_name(&request),
                "Cannot run write operation in pre-migration mode. Returning NOT_CONTROLLER."
            );
            let response = refusal(&request, &ControllerError::NotController);
            self.actions
                .push_back(ControllerAction::Respond { id, response });
            return id;
        }
        let (records, response, after_write) = self.process(now, &request);
        let end_offset = self.write(now, records);
        if let Some(AfterWrite::ControlledShutdown(broker_id)) = after_write {
            self.sessions
                .handle_controlled_shutdown_appended(broker_id, end_offset);
        }
        let response = match response {
            Reply::Ready(response) => response,
            Reply::AlterPartition(request, errors) => {
                self.alter_partition_response(&request, &errors)
            }
        };
        let active = self.active.as_mut().expect("checked active above");
        active.pending.push_back(PendingResponse {
            offset: end_offset,
            id,
            response,
        });
        self.complete_pending();
        self.maybe_schedule_rebalance(now);
        id
    }

    /// Releases responses whose records are committed.
    fn complete_pending(&mut self) {
        let Some(active) = &mut self.active else {
            return;
        };
        while active
            .pending
            .front()
            .is_some_and(|p| p.offset <= self.committed_offset)
        {
            let pending = active.pending.pop_front().expect("front exists");
            self.actions.push_back(ControllerAction::Respond {
                id: pending.id,
                response: pending.response,
            });
        }
    }

    /// Applies `records` to the image and the sessions and asks the driver to append them;
    /// returns the offset of the last record written so far (the commit a response waits
    /// for), whether or not `records` is empty.
    fn write(&mut self, now: Instant, records: Vec<ApiMessageAndVersion>) -> i64 {
        let active = self
            .active
            .as_mut()
            .expect("only the active controller writes");
        if records.is_empty() {
            return active.next_write_offset - 1;
        }
        let base_offset = active.next_write_offset;
        let count = i64::try_from(records.len()).expect("a batch fits in i64");
        let last_offset = base_offset + count - 1;
        let epoch = active.epoch;
        let sessions = &mut self.sessions;
        let replayed = replay_records(
            &self.image,
            &mut self.image_transaction,
            base_offset,
            epoch,
            &records,
            |offset, record| sessions.replay(now, record, offset),
        );
        // Our own records not fitting our own image is a bug, not bad input (migration
        // records are checked before they get here).
        let (image, aborted) = match replayed {
            Ok(done) => done,
            Err(error) => panic!("controller wrote records its image refuses: {error}"),
        };
        self.image = image;
        if aborted {
            self.rebuild_sessions(now);
            self.sessions.activate(now);
        }
        let active = self.active.as_mut().expect("checked above");
        active.next_write_offset = last_offset + 1;
        if aborted {
            active.imbalanced = imbalanced_partitions(&self.image);
        } else {
            for record in &records {
                track_imbalance(&mut active.imbalanced, &self.image, &record.record);
            }
        }
        self.actions.push_back(ControllerAction::Append {
            epoch: active.epoch,
            base_offset,
            records,
        });
        last_offset
    }

    /// A fresh heartbeat manager from the image (registration offset = broker epoch, as
    /// KRaft defines the broker epoch).
    fn rebuild_sessions(&mut self, now: Instant) {
        let mut sessions = BrokerHeartbeatManager::new(self.config.heartbeat);
        let mv = self.image.metadata_version();
        match self.image.to_records(mv) {
            Ok(records) => {
                for record in records {
                    let offset = match &record.record {
                        MetadataRecord::RegisterBroker(r) => r.broker_epoch,
                        _ => self.committed_offset,
                    };
                    sessions.replay(now, &record.record, offset);
                }
            }
            Err(error) => warn!(%error, "cannot rebuild broker sessions from the image"),
        }
        self.sessions = sessions;
    }

    fn view(&self) -> ImageClusterView<'_> {
        ImageClusterView {
            image: &self.image,
            kraft_version: self.config.kraft_version,
            cluster_id: &self.config.cluster_id,
            zk_migration_enabled: self.config.zk_migration_enabled,
        }
    }

    fn next_write_offset(&self) -> i64 {
        self.active.as_ref().map_or(0, |a| a.next_write_offset)
    }

    fn process(
        &mut self,
        now: Instant,
        request: &ControllerRequest,
    ) -> (Vec<ApiMessageAndVersion>, Reply, Option<AfterWrite>) {
        let refused =
            |error: ControllerError| (Vec::new(), Reply::Ready(refusal(request, &error)), None);
        match request {
            ControllerRequest::BrokerRegistration(r) => {
                let broker_id = r.broker_id.0;
                let mut records = Vec::new();
                let known = self.image.cluster.broker(broker_id).is_some();
                // A registration record fences the broker: an unfenced broker that
                // re-registers (the same incarnation retrying) first hands its leaderships
                // and ISR places over, as on fencing, so no fenced broker leads.
                let was_unfenced = self
                    .image
                    .cluster
                    .broker(broker_id)
                    .is_some_and(|b| !b.fenced);
                let epoch_guess = self.next_write_offset();
                // The ELR cleanup (RemoveBrokerBefore) of a re-registration goes first, so
                // the broker epoch is the offset after those records.
                let outcome = register_broker(&self.view(), &self.sessions, now, r, epoch_guess);
                let outcome = match outcome {
                    Ok(o) if (o.partition_work != PartitionWork::None && known) || was_unfenced => {
                        records = self.partition_work(broker_id, PartitionWork::RemoveBrokerBefore);
                        let epoch = epoch_guess + i64::try_from(records.len()).unwrap_or(0);
                        register_broker(&self.view(), &self.sessions, now, r, epoch)
                    }
                    other => other,
                };
                match outcome {
                    Ok(o) => {
                        records.extend(o.records);
                        let response =
                            BrokerRegistrationResponse::default().with_broker_epoch(o.broker_epoch);
                        (
                            records,
                            Reply::Ready(ControllerResponse::BrokerRegistration(response)),
                            None,
                        )
                    }
                    Err(e) => refused(e),
                }
            }
            ControllerRequest::BrokerHeartbeat(r) => {
                let broker_id = r.broker_id.0;
                let mv = self.image.metadata_version();
                let image = self.image.clone();
                let outcome = self
                    .sessions
                    .handle_heartbeat(now, r, mv, || leads_any(&image, broker_id));
                match outcome {
                    Ok(o) => {
                        let records = match o.partition_work {
                            PartitionWork::RemoveBrokerBefore => {
                                let mut records = self.partition_work(broker_id, o.partition_work);
                                records.extend(o.records);
                                records
                            }
                            PartitionWork::RemoveBrokerAfter
                            | PartitionWork::ElectLeaderlessAfter => {
                                let mut records = o.records;
                                records.extend(self.partition_work(broker_id, o.partition_work));
                                records
                            }
                            PartitionWork::None => o.records,
                        };
                        // Leadership and ISR places in offline directories move away before
                        // the `LogDirs` change (the last record), as Kafka's
                        // `handleDirectoriesOffline`.
                        // (A heartbeat that also fences or shuts down takes the broker out of
                        // every ISR already.)
                        let records = if o.offline_directories.is_empty()
                            || o.partition_work != PartitionWork::None
                        {
                            records
                        } else {
                            let mut records = records;
                            let dirs_change = records.pop();
                            records.extend(self.partition_work_where(
                                broker_id,
                                PartitionWork::RemoveBrokerBefore,
                                |_, _, p| {
                                    p.directory(broker_id)
                                        .is_some_and(|d| o.offline_directories.contains(&d))
                                },
                            ));
                            records.extend(dirs_change);
                            records
                        };
                        let after = (o.to == BrokerControlState::ControlledShutdown
                            && o.from != BrokerControlState::ControlledShutdown)
                            .then_some(AfterWrite::ControlledShutdown(broker_id));
                        let response = ControllerResponse::BrokerHeartbeat(o.reply.to_response());
                        (records, Reply::Ready(response), after)
                    }
                    Err(e) => refused(e),
                }
            }
            ControllerRequest::UnregisterBroker(r) => match unregister_broker(&self.view(), r) {
                Ok((unregister, work)) => {
                    let mut records = self.partition_work(r.broker_id.0, work);
                    records.extend(unregister);
                    let response =
                        ControllerResponse::UnregisterBroker(UnregisterBrokerResponse::default());
                    (records, Reply::Ready(response), None)
                }
                Err(e) => refused(e),
            },
            ControllerRequest::ControllerRegistration(r) => {
                match register_controller(self.image.metadata_version(), r) {
                    Ok(records) => (
                        records,
                        Reply::Ready(ControllerResponse::ControllerRegistration(
                            ControllerRegistrationResponse::default(),
                        )),
                        None,
                    ),
                    Err(e) => refused(e),
                }
            }
            ControllerRequest::CreateTopics(r) => {
                let (records, response) = self.create_topics(r);
                (
                    records,
                    Reply::Ready(ControllerResponse::CreateTopics(response)),
                    None,
                )
            }
            ControllerRequest::DeleteTopics(r) => {
                let (records, response) = self.delete_topics(r);
                (
                    records,
                    Reply::Ready(ControllerResponse::DeleteTopics(response)),
                    None,
                )
            }
            ControllerRequest::CreatePartitions(r) => {
                let (records, response) = self.create_partitions(r);
                (
                    records,
                    Reply::Ready(ControllerResponse::CreatePartitions(response)),
                    None,
                )
            }
            ControllerRequest::ElectLeaders(r) => match self.elect_leaders(r) {
                Ok((records, response)) => (
                    records,
                    Reply::Ready(ControllerResponse::ElectLeaders(response)),
                    None,
                ),
                Err(e) => refused(e),
            },
            ControllerRequest::AllocateProducerIds(r) => {
                let control = ProducerIdControl::from_image(&self.image.producer_ids);
                match control.generate_next_block(&self.view(), r.broker_id.0, r.broker_epoch) {
                    Ok((block, records)) => (
                        records,
                        Reply::Ready(ControllerResponse::AllocateProducerIds(block.to_response())),
                        None,
                    ),
                    Err(e) => refused(e),
                }
            }
            ControllerRequest::UpdateFeatures { request, version } => {
                let (records, response) = self.update_features(request, *version);
                (
                    records,
                    Reply::Ready(ControllerResponse::UpdateFeatures(response)),
                    None,
                )
            }
            ControllerRequest::IncrementalAlterConfigs(r) => {
                let (records, response) = incremental_alter_configs(
                    &self.image,
                    r,
                    &self.config.topic_validation_defaults,
                );
                (
                    records,
                    Reply::Ready(ControllerResponse::IncrementalAlterConfigs(response)),
                    None,
                )
            }
            ControllerRequest::AlterConfigs(r) => {
                let (records, response) =
                    legacy_alter_configs(&self.image, r, &self.config.topic_validation_defaults);
                (
                    records,
                    Reply::Ready(ControllerResponse::AlterConfigs(response)),
                    None,
                )
            }
            ControllerRequest::CreateAcls(r) => {
                let (records, response) =
                    create_acls(&self.image, r, self.admin.authorizer_enabled, &mut self.rng);
                (
                    records,
                    Reply::Ready(ControllerResponse::CreateAcls(response)),
                    None,
                )
            }
            ControllerRequest::DeleteAcls(r) => {
                let (records, response) =
                    delete_acls(&self.image, r, self.admin.authorizer_enabled);
                (
                    records,
                    Reply::Ready(ControllerResponse::DeleteAcls(response)),
                    None,
                )
            }
            ControllerRequest::AlterClientQuotas(r) => {
                let (records, response) = alter_client_quotas(&self.image, r);
                (
                    records,
                    Reply::Ready(ControllerResponse::AlterClientQuotas(response)),
                    None,
                )
            }
            ControllerRequest::AlterUserScramCredentials(r) => {
                let (records, response) = alter_user_scram_credentials(&self.image, r);
                (
                    records,
                    Reply::Ready(ControllerResponse::AlterUserScramCredentials(response)),
                    None,
                )
            }
            ControllerRequest::CreateDelegationToken { request, context } => {
                let (records, response) = create_delegation_token(
                    &self.image,
                    &self.admin.delegation_tokens,
                    context,
                    request,
                    &mut self.rng,
                );
                (
                    records,
                    Reply::Ready(ControllerResponse::CreateDelegationToken(Box::new(
                        response,
                    ))),
                    None,
                )
            }
            ControllerRequest::RenewDelegationToken { request, context } => {
                let (records, response) = renew_delegation_token(
                    &self.image,
                    &self.admin.delegation_tokens,
                    context,
                    request,
                );
                (
                    records,
                    Reply::Ready(ControllerResponse::RenewDelegationToken(response)),
                    None,
                )
            }
            ControllerRequest::AlterPartitionReassignments(r) => {
                let (records, response) = self.alter_partition_reassignments(r);
                (
                    records,
                    Reply::Ready(ControllerResponse::AlterPartitionReassignments(response)),
                    None,
                )
            }
            ControllerRequest::ListPartitionReassignments(r) => (
                Vec::new(),
                Reply::Ready(ControllerResponse::ListPartitionReassignments(
                    self.list_partition_reassignments(r),
                )),
                None,
            ),
            ControllerRequest::ExpireDelegationToken { request, context } => {
                let (records, response) = expire_delegation_token(
                    &self.image,
                    &self.admin.delegation_tokens,
                    context,
                    request,
                );
                (
                    records,
                    Reply::Ready(ControllerResponse::ExpireDelegationToken(response)),
                    None,
                )
            }
            ControllerRequest::MigrationRecords {
                leader_epoch,
                records,
            } => {
                if self.active.as_ref().map(|a| a.epoch) != Some(*leader_epoch) {
                    return refused(ControllerError::NotController);
                }
                // Records read from ZooKeeper: checked against the image before they are
                // written, so bad ZooKeeper data is refused instead of breaking the log.
                let mut trial = self.image_transaction.clone();
                let base = self.next_write_offset();
                let epoch = self.active.as_ref().map_or(-1, |a| a.epoch);
                match replay_records(&self.image, &mut trial, base, epoch, records, |_, _| {}) {
                    Ok(_) => {
                        let last_offset =
                            base + i64::try_from(records.len()).unwrap_or(i64::MAX) - 1;
                        let committed = MigrationBatchCommitted { last_offset, epoch };
                        (
                            records.clone(),
                            Reply::Ready(ControllerResponse::MigrationRecords(Ok(committed))),
                            None,
                        )
                    }
                    Err(error) => refused(ControllerError::InvalidMigrationRecords {
                        reason: error.to_string(),
                    }),
                }
            }
            ControllerRequest::AlterPartition(r) => {
                if let Err(e) = self
                    .sessions
                    .check_broker_epoch(r.broker_id.0, r.broker_epoch)
                {
                    return refused(e);
                }
                let (records, errors) = self.alter_partition_records(r);
                (records, Reply::AlterPartition(r.clone(), errors), None)
            }
            ControllerRequest::AssignReplicasToDirs(r) => match self.assign_replicas_to_dirs(r) {
                Ok((records, response)) => (
                    records,
                    Reply::Ready(ControllerResponse::AssignReplicasToDirs(response)),
                    None,
                ),
                Err(e) => refused(e),
            },
        }
    }

    fn update_features(
        &self,
        request: &UpdateFeaturesRequest,
        version: i16,
    ) -> (Vec<ApiMessageAndVersion>, UpdateFeaturesResponse) {
        let finalized: BTreeMap<String, i16> = self
            .image
            .features
            .finalized_levels
            .iter()
            .map(|(name, level)| (name.clone(), *level))
            .collect();
        let brokers = NodeFeatures::brokers_of(&self.image.cluster);
        let controllers = NodeFeatures::controllers_of(&self.image.cluster);
        let context = FeatureContext {
            metadata_version: self.image.metadata_version(),
            finalized: &finalized,
            zk_migration_state: self.image.features.zk_migration_state,
            local_controller_id: self.config.node_id,
            unstable_feature_versions_enable: false,
            brokers: &brokers,
            controllers: &controllers,
        };
        let outcome = update_features(&context, request, version);
        let results = outcome
            .results
            .into_iter()
            .map(|(feature, result)| {
                let entry =
                    UpdatableFeatureResult::default().with_feature(StrBytes::from_string(feature));
                match result {
                    Ok(()) => entry,
                    Err(e) => entry
                        .with_error_code(e.code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                }
            })
            .collect();
        (
            outcome.records,
            UpdateFeaturesResponse::default().with_results(results),
        )
    }
}

/// What a processed request answers with.
enum Reply {
    Ready(ControllerResponse),
    /// Built from the image once the records are applied.
    AlterPartition(AlterPartitionRequest, Vec<Vec<Option<ControllerError>>>),
}

/// Bookkeeping after the batch is written.
enum AfterWrite {
    /// The broker's controlled-shutdown batch ends at the written offset.
    ControlledShutdown(i32),
}

/// Partitions whose leader is not their preferred replica (leaderless ones included, as
/// Kafka's `hasPreferredLeader` counts them).
fn imbalanced_partitions(image: &MetadataImage) -> BTreeSet<(Uuid, i32)> {
    image
        .topics
        .by_id
        .values()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .filter(|(_, p)| p.leader != p.preferred_replica())
                .map(move |(&partition_id, _)| (topic.id, partition_id))
        })
        .collect()
}

/// Keeps `imbalanced` in step with `image` after `record` was applied to it (Kafka's
/// `ReplicationControlManager.replay` of partition records).
fn track_imbalance(
    imbalanced: &mut BTreeSet<(Uuid, i32)>,
    image: &MetadataImage,
    record: &MetadataRecord,
) {
    let (topic_id, partition_id) = match record {
        MetadataRecord::Partition(r) => (r.topic_id, r.partition_id),
        MetadataRecord::PartitionChange(r) => (r.topic_id, r.partition_id),
        MetadataRecord::RemoveTopic(r) => {
            imbalanced.retain(|(topic_id, _)| *topic_id != r.topic_id);
            return;
        }
        _ => return,
    };
    let balanced = image
        .topics
        .topic(topic_id)
        .and_then(|t| t.partitions.get(&partition_id))
        .is_none_or(|p| p.leader == p.preferred_replica());
    if balanced {
        imbalanced.remove(&(topic_id, partition_id));
    } else {
        imbalanced.insert((topic_id, partition_id));
    }
}

/// A `ZkMigrationStateRecord` for `state`.
fn migration_state_record(state: ZkMigrationState) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
            zk_migration_state: state.value(),
            ..ZkMigrationStateRecord::default()
        }),
        0,
    )
}

/// The operations Kafka flags `RUNS_IN_PREMIGRATION`: everything else is refused with
/// NOT_CONTROLLER until the ZooKeeper metadata is in the log.
fn runs_in_premigration(request: &ControllerRequest) -> bool {
    matches!(
        request,
        ControllerRequest::BrokerRegistration(_)
            | ControllerRequest::BrokerHeartbeat(_)
            | ControllerRequest::UnregisterBroker(_)
            | ControllerRequest::ControllerRegistration(_)
            | ControllerRequest::MigrationRecords { .. }
    )
}

/// The admin writes refused while ZooKeeper lags too far behind the log (broker lifecycle,
/// ISR changes and producer-id blocks keep the cluster running and always go through).
fn bounded_by_write_behind(request: &ControllerRequest) -> bool {
    matches!(
        request,
        ControllerRequest::CreateTopics(_)
            | ControllerRequest::DeleteTopics(_)
            | ControllerRequest::CreatePartitions(_)
            | ControllerRequest::ElectLeaders(_)
            | ControllerRequest::AlterPartitionReassignments(_)
            | ControllerRequest::IncrementalAlterConfigs(_)
            | ControllerRequest::AlterConfigs(_)
            | ControllerRequest::UpdateFeatures { .. }
            | ControllerRequest::CreateAcls(_)
            | ControllerRequest::DeleteAcls(_)
            | ControllerRequest::AlterClientQuotas(_)
            | ControllerRequest::AlterUserScramCredentials(_)
            | ControllerRequest::CreateDelegationToken { .. }
            | ControllerRequest::RenewDelegationToken { .. }
            | ControllerRequest::ExpireDelegationToken { .. }
    )
}

/// Kafka's operation name of a request (for logs).
fn request_name(request: &ControllerRequest) -> &'static str {
    match request {
        ControllerRequest::BrokerRegistration(_) => "registerBroker",
        ControllerRequest::BrokerHeartbeat(_) => "processBrokerHeartbeat",
        ControllerRequest::UnregisterBroker(_) => "unregisterBroker",
        ControllerRequest::ControllerRegistration(_) => "registerController",
        ControllerRequest::CreateTopics(_) => "createTopics",
        ControllerRequest::DeleteTopics(_) => "deleteTopics",
        ControllerRequest::AlterPartition(_) => "alterPartition",
        ControllerRequest::AssignReplicasToDirs(_) => "assignReplicasToDirs",
        ControllerRequest::CreatePartitions(_) => "createPartitions",
        ControllerRequest::ElectLeaders(_) => "electLeaders",
        ControllerRequest::AlterPartitionReassignments(_) => "alterPartitionReassignments",
        ControllerRequest::ListPartitionReassignments(_) => "listPartitionReassignments",
        ControllerRequest::IncrementalAlterConfigs(_) => "incrementalAlterConfigs",
        ControllerRequest::AlterConfigs(_) => "legacyAlterConfigs",
        ControllerRequest::AllocateProducerIds(_) => "allocateProducerIds",
        ControllerRequest::UpdateFeatures { .. } => "updateFeatures",
        ControllerRequest::CreateAcls(_) => "createAcls",
        ControllerRequest::DeleteAcls(_) => "deleteAcls",
        ControllerRequest::AlterClientQuotas(_) => "alterClientQuotas",
        ControllerRequest::AlterUserScramCredentials(_) => "alterUserScramCredentials",
        ControllerRequest::CreateDelegationToken { .. } => "createDelegationToken",
        ControllerRequest::RenewDelegationToken { .. } => "renewDelegationToken",
        ControllerRequest::ExpireDelegationToken { .. } => "expireDelegationToken",
        ControllerRequest::MigrationRecords { .. } => "ZK Migration Batch",
    }
}

fn leads_any(image: &MetadataImage, broker_id: i32) -> bool {
    image
        .topics
        .by_id
        .values()
        .any(|t| t.partitions.values().any(|p| p.leader == broker_id))
}

fn error_fields(error: &ControllerError) -> (i16, Option<StrBytes>) {
    (error.code(), Some(StrBytes::from_string(error.to_string())))
}
