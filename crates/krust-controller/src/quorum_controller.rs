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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_response;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterPartitionRequest,
    AlterPartitionResponse, BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId,
    BrokerRegistrationRequest, BrokerRegistrationResponse, ControllerRegistrationRequest,
    ControllerRegistrationResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ElectLeadersRequest, ElectLeadersResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName, UnregisterBrokerRequest, UnregisterBrokerResponse,
    UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::image::topics::{LeaderRecoveryState, PartitionRegistration};
use krust_metadata::kafka_uuid::{
    DIRECTORY_ID_MIGRATING, DIRECTORY_ID_UNASSIGNED, random_kafka_uuid,
};
use krust_metadata::records::{
    BeginTransactionRecord, ConfigRecord, EndTransactionRecord, MetadataRecord, NoOpRecord,
    PartitionRecord, RemoveTopicRecord, TopicRecord, ZkMigrationStateRecord,
};
use krust_metadata::{
    ApiMessageAndVersion, BootstrapMetadata, MetadataDelta, MetadataImage, MetadataProvenance,
    ReplayError,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tracing::{info, warn};
use uuid::Uuid;

use crate::configs::incremental_alter_configs;
use crate::error::ControllerError;
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
use crate::topic_names;

/// `metadata.max.idle.interval.ms` default: a `NoOpRecord` this often while active.
pub const METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT: u64 = 500;
/// Most partitions one CreateTopics may create (Kafka's `MAX_PARTITIONS_PER_BATCH`). Checked
/// before anything is allocated, so an absurd count costs nothing.
pub const MAX_PARTITIONS_PER_REQUEST: i64 = 10_000;
/// The topic config that allows unclean leader election.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// `BeginTransactionRecord.Name` of the bootstrap transaction.
const BOOTSTRAP_TRANSACTION_NAME: &str = "Bootstrap records";

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
    /// CreatePartitions.
    CreatePartitions(CreatePartitionsRequest),
    /// ElectLeaders.
    ElectLeaders(ElectLeadersRequest),
    /// IncrementalAlterConfigs (topic and broker resources).
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    /// AllocateProducerIds.
    AllocateProducerIds(AllocateProducerIdsRequest),
    /// UpdateFeatures at request version `version` (the upgrade-type field depends on it).
    UpdateFeatures {
        /// The request.
        request: UpdateFeaturesRequest,
        /// Its API version.
        version: i16,
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
    /// CreatePartitions.
    CreatePartitions(CreatePartitionsResponse),
    /// ElectLeaders.
    ElectLeaders(ElectLeadersResponse),
    /// IncrementalAlterConfigs.
    IncrementalAlterConfigs(IncrementalAlterConfigsResponse),
    /// AllocateProducerIds.
    AllocateProducerIds(AllocateProducerIdsResponse),
    /// UpdateFeatures.
    UpdateFeatures(UpdateFeaturesResponse),
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
}

/// The quorum controller. See the module doc for the driving contract.
#[derive(Debug)]
pub struct QuorumController {
    config: QuorumControllerConfig,
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
}

impl QuorumController {
    /// A standby controller with an empty image; randomness (placement, topic ids) from
    /// `seed`.
    #[must_use]
    pub fn new(config: QuorumControllerConfig, seed: u64) -> Self {
        Self {
            sessions: BrokerHeartbeatManager::new(config.heartbeat),
            config,
            committed_image: MetadataImage::empty(),
            image: MetadataImage::empty(),
            committed_offset: -1,
            placer: StripedReplicaPlacer::new(StdRng::seed_from_u64(seed)),
            rng: StdRng::seed_from_u64(seed.wrapping_add(0x9E37_79B9_7F4A_7C15)),
            active: None,
            actions: VecDeque::new(),
            next_request_id: 0,
        }
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
        let provenance = MetadataProvenance::new(last_offset, batch.epoch, 0);
        let mut delta = MetadataDelta::new(&self.committed_image);
        for record in &batch.records {
            delta.replay(&record.record)?;
        }
        self.committed_image = delta.apply(provenance);
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
            for (i, record) in batch.records.iter().enumerate() {
                let offset = batch.base_offset + i64::try_from(i).unwrap_or(i64::MAX);
                self.sessions.replay(now, &record.record, offset);
            }
            self.image = self.committed_image.clone();
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
        self.rebuild_sessions(now);
        Ok(())
    }

    /// This node became the active controller in `epoch` (with the log ending before
    /// `log_end_offset`), or stopped being it (`is_active == false`). Losing leadership fails
    /// every pending request with `NOT_CONTROLLER` and drops uncommitted state.
    pub fn handle_leader_change(
        &mut self,
        now: Instant,
        is_active: bool,
        epoch: i32,
        log_end_offset: i64,
    ) {
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
            self.rebuild_sessions(now);
        }
        if !is_active {
            return;
        }
        assert!(
            log_end_offset > self.committed_offset,
            "activated at log end {log_end_offset} before replaying up to {}",
            self.committed_offset
        );
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
        });
        self.sessions.activate(now);
        if self.image.is_empty() {
            let records = self.bootstrap_records();
            self.write(now, records);
        }
        self.schedule_noop(now);
    }

    fn bootstrap_records(&self) -> Vec<ApiMessageAndVersion> {
        let bootstrap = &self.config.bootstrap;
        let mv = bootstrap.metadata_version();
        info!(
            metadata_version = %mv,
            source = bootstrap.source(),
            "writing bootstrap records to an empty log"
        );
        let mut records = Vec::new();
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
        if mv.is_migration_supported() {
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                    zk_migration_state: ZkMigrationState::None.value(),
                    ..ZkMigrationStateRecord::default()
                }),
                0,
            ));
        }
        if transaction {
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::EndTransaction(EndTransactionRecord::default()),
                0,
            ));
        }
        records
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
        [self.sessions.poll_timeout(), active.next_noop]
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
        for expiry in self.sessions.handle_timeout(now, mv) {
            let mut records =
                self.partition_work(expiry.broker_id, PartitionWork::RemoveBrokerBefore);
            records.extend(expiry.records);
            self.write(now, records);
        }
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
        let mut delta = MetadataDelta::new(&self.image);
        for (i, record) in records.iter().enumerate() {
            // Our own records not fitting our own image is a bug, not bad input.
            if let Err(error) = delta.replay(&record.record) {
                panic!("controller wrote a record its image refuses: {error}: {record:?}");
            }
            self.sessions.replay(
                now,
                &record.record,
                base_offset + i64::try_from(i).unwrap_or(0),
            );
        }
        self.image = delta.apply(MetadataProvenance::new(last_offset, active.epoch, 0));
        active.next_write_offset = last_offset + 1;
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
            zk_migration_enabled: false,
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
                                |p| {
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
                let (records, response) = incremental_alter_configs(&self.image, r);
                (
                    records,
                    Reply::Ready(ControllerResponse::IncrementalAlterConfigs(response)),
                    None,
                )
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

    /// Whether `broker` may lead or join an ISR now (Kafka's `isActive`).
    fn broker_is_active(&self, broker: i32) -> bool {
        self.sessions.state(broker) == Some(BrokerControlState::Unfenced)
            && self
                .image
                .cluster
                .broker(broker)
                .is_some_and(|b| !b.in_controlled_shutdown && !b.fenced)
    }

    /// The `PartitionChangeRecord`s for `work` on `broker_id` (Kafka's
    /// `generateLeaderAndIsrUpdates`), built against the current image.
    fn partition_work(&self, broker_id: i32, work: PartitionWork) -> Vec<ApiMessageAndVersion> {
        self.partition_work_where(broker_id, work, |_| true)
    }

    /// [`Self::partition_work`] limited to the partitions `only` accepts.
    fn partition_work_where(
        &self,
        broker_id: i32,
        work: PartitionWork,
        only: impl Fn(&PartitionRegistration) -> bool,
    ) -> Vec<ApiMessageAndVersion> {
        let mv = self.image.metadata_version();
        let mut records = Vec::new();
        for topic in self.image.topics.by_id.values() {
            let unclean = self.unclean_election_enabled(&topic.name);
            for (&partition_id, partition) in &topic.partitions {
                if !only(partition) {
                    continue;
                }
                let built = match work {
                    PartitionWork::None => None,
                    PartitionWork::RemoveBrokerBefore | PartitionWork::RemoveBrokerAfter => {
                        if !partition.isr.contains(&broker_id) {
                            continue;
                        }
                        let acceptable = |r: i32| r != broker_id && self.broker_is_active(r);
                        let isr: Vec<i32> = partition
                            .isr
                            .iter()
                            .copied()
                            .filter(|&r| r != broker_id)
                            .collect();
                        PartitionChangeBuilder::new(
                            partition,
                            topic.id,
                            partition_id,
                            &acceptable,
                            mv,
                        )
                        .with_target_isr(isr)
                        .with_election(if unclean {
                            Election::Unclean
                        } else {
                            Election::Online
                        })
                        .build()
                    }
                    PartitionWork::ElectLeaderlessAfter => {
                        if partition.leader != NO_LEADER {
                            continue;
                        }
                        let acceptable = |r: i32| r == broker_id || self.broker_is_active(r);
                        PartitionChangeBuilder::new(
                            partition,
                            topic.id,
                            partition_id,
                            &acceptable,
                            mv,
                        )
                        .with_election(if unclean {
                            Election::Unclean
                        } else {
                            Election::Online
                        })
                        .build()
                    }
                };
                records.extend(built);
            }
        }
        records
    }

    fn unclean_election_enabled(&self, topic: &str) -> bool {
        self.image
            .configs
            .configs(&ConfigResource::topic(topic))
            .get(UNCLEAN_LEADER_ELECTION_ENABLE)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    fn create_topics(
        &mut self,
        request: &CreateTopicsRequest,
    ) -> (Vec<ApiMessageAndVersion>, CreateTopicsResponse) {
        let mut records = Vec::new();
        let mut results = Vec::new();
        let mut seen = BTreeMap::new();
        for topic in &request.topics {
            *seen.entry(topic.name.0.to_string()).or_insert(0) += 1;
        }
        // Kafka's per-request cap, counted without allocating anything.
        let total: i64 = request
            .topics
            .iter()
            .map(|t| {
                if t.assignments.is_empty() {
                    i64::from(if t.num_partitions == -1 {
                        self.config.default_num_partitions
                    } else {
                        t.num_partitions
                    })
                    .max(0)
                } else {
                    i64::try_from(t.assignments.len()).unwrap_or(i64::MAX)
                }
            })
            .sum();
        // Names created earlier in this request, for the collision check.
        let mut created_now: BTreeSet<String> = BTreeSet::new();
        for topic in &request.topics {
            let name = topic.name.0.to_string();
            let result = if seen.get(&name).copied().unwrap_or(0) > 1 {
                Err(ControllerError::InvalidRequest {
                    reason: "Duplicate topic name.".to_owned(),
                })
            } else if total > MAX_PARTITIONS_PER_REQUEST {
                Err(ControllerError::InvalidPartitions {
                    reason: "Excessively large number of partitions per request.".to_owned(),
                })
            } else {
                self.create_topic(topic, request.validate_only, &created_now)
            };
            match result {
                Ok((topic_id, num_partitions, replication_factor, topic_records)) => {
                    created_now.insert(name.clone());
                    results.push(
                        CreatableTopicResult::default()
                            .with_name(topic.name.clone())
                            .with_topic_id(topic_id)
                            .with_num_partitions(num_partitions)
                            .with_replication_factor(replication_factor),
                    );
                    records.extend(topic_records);
                }
                Err(e) => results.push(
                    CreatableTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_error_code(e.code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string())))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                ),
            }
        }
        (
            records,
            CreateTopicsResponse::default().with_topics(results),
        )
    }

    /// Validates and builds one topic: `(id, partitions, replication factor, records)`.
    fn create_topic(
        &mut self,
        topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
        validate_only: bool,
        created_now: &BTreeSet<String>,
    ) -> Result<(Uuid, i32, i16, Vec<ApiMessageAndVersion>), ControllerError> {
        let name = topic.name.0.to_string();
        topic_names::validate(&name)?;
        if name == topic_names::CLUSTER_METADATA_TOPIC_NAME {
            return Err(ControllerError::InvalidRequest {
                reason: format!("Creation of internal topic {name} is prohibited."),
            });
        }
        if self.image.topics.topic_by_name(&name).is_some() || created_now.contains(&name) {
            return Err(ControllerError::TopicAlreadyExists { name });
        }
        let unified = topic_names::unify_collision_chars(&name);
        if let Some(existing) = self
            .image
            .topics
            .by_name
            .keys()
            .chain(created_now.iter())
            .find(|n| topic_names::unify_collision_chars(n) == unified)
        {
            return Err(ControllerError::InvalidTopicName {
                reason: format!("Topic '{name}' collides with existing topic: {existing}"),
            });
        }
        let mut configs = Vec::new();
        for config in &topic.configs {
            let Some(value) = &config.value else {
                return Err(ControllerError::InvalidRequest {
                    reason: format!(
                        "Null value not supported for topic configs: {}",
                        config.name
                    ),
                });
            };
            if config.name.as_str() == UNCLEAN_LEADER_ELECTION_ENABLE
                && !matches!(value.to_ascii_lowercase().as_str(), "true" | "false")
            {
                return Err(ControllerError::InvalidConfig {
                    reason: format!(
                        "Invalid value {value} for configuration {UNCLEAN_LEADER_ELECTION_ENABLE}: Expected value to be either true or false"
                    ),
                });
            }
            configs.push((config.name.to_string(), value.to_string()));
        }
        let assignments = if topic.assignments.is_empty() {
            let num_partitions = if topic.num_partitions == -1 {
                self.config.default_num_partitions
            } else {
                topic.num_partitions
            };
            let replication_factor = if topic.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                topic.replication_factor
            };
            if num_partitions <= 0 {
                return Err(ControllerError::InvalidPartitions {
                    reason: "Number of partitions was set to an invalid non-positive value."
                        .to_owned(),
                });
            }
            if replication_factor <= 0 {
                return Err(ControllerError::InvalidReplicationFactor {
                    reason:
                        "Replication factor must be larger than 0, or -1 to use the default value."
                            .to_owned(),
                });
            }
            let count = usize::try_from(num_partitions).expect("positive, and capped per request");
            let image = self.image.clone();
            let usable = self
                .sessions
                .usable_brokers(|id| image.cluster.broker(id).and_then(|b| b.rack.clone()));
            let placed = self
                .placer
                .place(count, i32::from(replication_factor), &usable)?;
            self.check_placed_isrs(&placed, i32::from(replication_factor))?;
            placed
        } else {
            if topic.num_partitions != -1 {
                return Err(ControllerError::InvalidRequest {
                    reason: "A manual partition assignment was specified, but numPartitions was not set to -1.".to_owned(),
                });
            }
            if topic.replication_factor != -1 {
                return Err(ControllerError::InvalidRequest {
                    reason: "A manual partition assignment was specified, but replicationFactor was not set to -1.".to_owned(),
                });
            }
            let mut assignments = Vec::with_capacity(topic.assignments.len());
            for (expected, assignment) in topic.assignments.iter().enumerate() {
                let invalid = |reason: String| ControllerError::InvalidReplicaAssignment { reason };
                if usize::try_from(assignment.partition_index).ok() != Some(expected) {
                    return Err(invalid(
                        "partitions should be a consecutive 0-based integer sequence".to_owned(),
                    ));
                }
                let replicas: Vec<i32> = assignment.broker_ids.iter().map(|b| b.0).collect();
                self.validate_manual_assignment(&replicas, expected)?;
                assignments.push(replicas);
            }
            if assignments.iter().any(|a| a.len() != assignments[0].len()) {
                return Err(ControllerError::InvalidReplicaAssignment {
                    reason: "The manual partition assignment includes a partition with a different replication factor than the others.".to_owned(),
                });
            }
            assignments
        };
        let num_partitions = i32::try_from(assignments.len()).expect("capped per request");
        let replication_factor = i16::try_from(assignments[0].len()).unwrap_or(i16::MAX);
        if validate_only {
            return Ok((Uuid::nil(), num_partitions, replication_factor, Vec::new()));
        }
        let topic_id = loop {
            let id = random_kafka_uuid(&mut self.rng);
            if self.image.topics.topic(id).is_none() {
                break id;
            }
        };
        let mut records = vec![ApiMessageAndVersion::new(
            MetadataRecord::Topic(TopicRecord {
                name: name.clone(),
                topic_id,
                ..TopicRecord::default()
            }),
            0,
        )];
        for (resource_config, value) in configs {
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::Config(ConfigRecord {
                    resource_type: ConfigResourceType::TOPIC.0,
                    resource_name: name.clone(),
                    name: resource_config,
                    value: Some(value),
                    ..ConfigRecord::default()
                }),
                0,
            ));
        }
        for (partition_id, replicas) in assignments.into_iter().enumerate() {
            let partition_id = i32::try_from(partition_id).expect("capped per request");
            records.push(self.new_partition_record(topic_id, partition_id, replicas));
        }
        info!(topic = %name, %topic_id, num_partitions, replication_factor, "creating topic");
        Ok((topic_id, num_partitions, replication_factor, records))
    }

    /// Every placed partition needs an active replica to start its ISR (the placer's view of
    /// fencing comes from the sessions, "active" also needs the registration out of controlled
    /// shutdown), as Kafka's `createTopic` checks.
    fn check_placed_isrs(
        &self,
        placed: &[Vec<i32>],
        replication_factor: i32,
    ) -> Result<(), ControllerError> {
        if placed
            .iter()
            .any(|replicas| !replicas.iter().any(|&r| self.broker_is_active(r)))
        {
            return Err(ControllerError::InvalidReplicationFactor {
                reason: format!(
                    "Unable to replicate the partition {replication_factor} time(s): All brokers are currently fenced or in controlled shutdown."
                ),
            });
        }
        Ok(())
    }

    /// Kafka's checks of one manually assigned replica list (partition `index`).
    fn validate_manual_assignment(
        &self,
        replicas: &[i32],
        index: usize,
    ) -> Result<(), ControllerError> {
        let invalid = |reason: String| Err(ControllerError::InvalidReplicaAssignment { reason });
        if replicas.is_empty() {
            return invalid(
                "The manual partition assignment includes an empty replica list.".to_owned(),
            );
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = replicas.iter().find(|&&r| !seen.insert(r)) {
            return invalid(format!(
                "The manual partition assignment includes the broker {twice} more than once."
            ));
        }
        if let Some(missing) = replicas
            .iter()
            .find(|&&r| self.image.cluster.broker(r).is_none())
        {
            return invalid(format!(
                "The manual partition assignment includes broker {missing}, but no such broker is registered."
            ));
        }
        if !replicas.iter().any(|&r| self.broker_is_active(r)) {
            return invalid(format!(
                "All brokers specified in the manual partition assignment for partition {index} are fenced or in controlled shutdown."
            ));
        }
        Ok(())
    }

    /// The `PartitionRecord` of a new partition: the ISR is the active replicas, the leader
    /// the first of them.
    fn new_partition_record(
        &self,
        topic_id: Uuid,
        partition_id: i32,
        replicas: Vec<i32>,
    ) -> ApiMessageAndVersion {
        let mv = self.image.metadata_version();
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|&r| self.broker_is_active(r))
            .collect();
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        let directories = if mv.is_directory_assignment_supported() {
            replicas
                .iter()
                .map(|&r| self.default_directory(r))
                .collect()
        } else {
            Vec::new()
        };
        ApiMessageAndVersion::new(
            MetadataRecord::Partition(PartitionRecord {
                partition_id,
                topic_id,
                replicas,
                isr,
                removing_replicas: Vec::new(),
                adding_replicas: Vec::new(),
                leader,
                leader_recovery_state: LeaderRecoveryState::Recovered.value(),
                leader_epoch: 0,
                partition_epoch: 0,
                directories,
                eligible_leader_replicas: None,
                last_known_elr: None,
                unknown_tagged_fields: Default::default(),
            }),
            mv.partition_record_version(),
        )
    }

    fn create_partitions(
        &mut self,
        request: &CreatePartitionsRequest,
    ) -> (Vec<ApiMessageAndVersion>, CreatePartitionsResponse) {
        let mut records = Vec::new();
        let mut results = Vec::new();
        let mut seen = BTreeMap::new();
        for topic in &request.topics {
            *seen.entry(topic.name.0.to_string()).or_insert(0) += 1;
        }
        let mut total_added: i64 = 0;
        for topic in &request.topics {
            let name = topic.name.0.to_string();
            let result = if seen.get(&name).copied().unwrap_or(0) > 1 {
                Err(ControllerError::InvalidRequest {
                    reason: "Duplicate topic name.".to_owned(),
                })
            } else {
                self.create_partitions_of(topic, &mut total_added)
            };
            let entry = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
            match result {
                Ok(new_records) => {
                    if !request.validate_only {
                        records.extend(new_records);
                    }
                    results.push(entry);
                }
                Err(e) => results.push(
                    entry
                        .with_error_code(e.code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                ),
            }
        }
        (
            records,
            CreatePartitionsResponse::default().with_results(results),
        )
    }

    /// Kafka's `createPartitions` for one topic.
    fn create_partitions_of(
        &mut self,
        topic: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
        total_added: &mut i64,
    ) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
        let name = topic.name.0.as_str();
        let Some(existing) = self.image.topics.topic_by_name(name) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("Unable to locate topic {name}"),
            });
        };
        let topic_id = existing.id;
        let current = i32::try_from(existing.partitions.len()).unwrap_or(i32::MAX);
        let replication_factor = existing.partitions.get(&0).map_or(1, |p| p.replicas.len());
        if topic.count < current {
            return Err(ControllerError::InvalidPartitions {
                reason: format!(
                    "The topic {name} currently has {current} partition(s); {} would not be an increase.",
                    topic.count
                ),
            });
        }
        if topic.count == current {
            return Err(ControllerError::InvalidPartitions {
                reason: format!("Topic already has {current} partition(s)."),
            });
        }
        let additional = topic.count - current;
        *total_added += i64::from(additional);
        if *total_added > MAX_PARTITIONS_PER_REQUEST {
            return Err(ControllerError::InvalidPartitions {
                reason: "Excessively large number of partitions per request.".to_owned(),
            });
        }
        let count = usize::try_from(additional).expect("positive and capped");
        let assignments = match &topic.assignments {
            Some(assignments) => {
                if assignments.len() != count {
                    return Err(ControllerError::InvalidReplicaAssignment {
                        reason: format!(
                            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                            assignments.len()
                        ),
                    });
                }
                let mut lists = Vec::with_capacity(count);
                for (i, assignment) in assignments.iter().enumerate() {
                    let replicas: Vec<i32> = assignment.broker_ids.iter().map(|b| b.0).collect();
                    if replicas.len() != replication_factor {
                        return Err(ControllerError::InvalidReplicaAssignment {
                            reason: format!(
                                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
                                replicas.len()
                            ),
                        });
                    }
                    self.validate_manual_assignment(
                        &replicas,
                        i + usize::try_from(current).unwrap_or(0),
                    )?;
                    lists.push(replicas);
                }
                lists
            }
            None => {
                let image = self.image.clone();
                let usable = self
                    .sessions
                    .usable_brokers(|id| image.cluster.broker(id).and_then(|b| b.rack.clone()));
                let replication_factor = i32::try_from(replication_factor).unwrap_or(i32::MAX);
                let placed = self.placer.place(count, replication_factor, &usable)?;
                self.check_placed_isrs(&placed, replication_factor)?;
                placed
            }
        };
        Ok(assignments
            .into_iter()
            .zip(current..)
            .map(|(replicas, partition_id)| {
                self.new_partition_record(topic_id, partition_id, replicas)
            })
            .collect())
    }

    /// Kafka's `electLeaders`: preferred (type 0) or unclean (type 1) elections.
    fn elect_leaders(
        &self,
        request: &ElectLeadersRequest,
    ) -> Result<(Vec<ApiMessageAndVersion>, ElectLeadersResponse), ControllerError> {
        let election = match request.election_type {
            0 => Election::Preferred,
            1 => Election::Unclean,
            other => {
                return Err(ControllerError::InvalidRequest {
                    reason: format!("Unknown election type {other}"),
                });
            }
        };
        let mut records = Vec::new();
        let mut results = Vec::new();
        let all = request.topic_partitions.is_none();
        let targets: Vec<(TopicName, Vec<i32>)> = match &request.topic_partitions {
            Some(topics) => topics
                .iter()
                .map(|t| (t.topic.clone(), t.partitions.clone()))
                .collect(),
            None => self
                .image
                .topics
                .by_name
                .values()
                .map(|t| {
                    (
                        TopicName(StrBytes::from_string(t.name.clone())),
                        t.partitions.keys().copied().collect(),
                    )
                })
                .collect(),
        };
        for (topic, partitions) in targets {
            let mut partition_results = Vec::new();
            for partition_id in partitions {
                let outcome = self.elect_leader(&topic.0, partition_id, election);
                let (code, message) = match outcome {
                    Ok(Some(record)) => {
                        records.push(record);
                        (0, None)
                    }
                    Ok(None) if all => continue,
                    Ok(None) => (
                        ResponseError::ElectionNotNeeded.code(),
                        Some(StrBytes::from_static_str(
                            "Leader election not needed for topic partition.",
                        )),
                    ),
                    Err(e) => error_fields(&e),
                };
                partition_results.push(
                    PartitionResult::default()
                        .with_partition_id(partition_id)
                        .with_error_code(code)
                        .with_error_message(message),
                );
            }
            results.push(
                ReplicaElectionResult::default()
                    .with_topic(topic)
                    .with_partition_result(partition_results),
            );
        }
        Ok((
            records,
            ElectLeadersResponse::default().with_replica_election_results(results),
        ))
    }

    /// One election: `Ok(None)` when not needed.
    fn elect_leader(
        &self,
        topic: &str,
        partition_id: i32,
        election: Election,
    ) -> Result<Option<ApiMessageAndVersion>, ControllerError> {
        let found = self.image.topics.topic_by_name(topic);
        let Some(partition) = found.and_then(|t| t.partitions.get(&partition_id)) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("No such topic partition {topic}-{partition_id}"),
            });
        };
        let topic_id = found.map(|t| t.id).unwrap_or_default();
        let not_needed = match election {
            Election::Preferred => partition.leader == partition.preferred_replica(),
            _ => partition.has_leader(),
        };
        if not_needed {
            return Ok(None);
        }
        let acceptable = |r: i32| self.broker_is_active(r);
        PartitionChangeBuilder::new(
            partition,
            topic_id,
            partition_id,
            &acceptable,
            self.image.metadata_version(),
        )
        .with_election(election)
        .build()
        .map(Some)
        .ok_or(if election == Election::Preferred {
            ControllerError::PreferredLeaderNotAvailable
        } else {
            ControllerError::EligibleLeadersNotAvailable
        })
    }

    /// Kafka's `ClusterControlManager.defaultDir`: the only directory of a single-directory
    /// broker, else unassigned (migrating for a broker that reported none).
    fn default_directory(&self, broker: i32) -> Uuid {
        match self
            .image
            .cluster
            .broker(broker)
            .map(|b| b.directories.as_slice())
        {
            Some([only]) => *only,
            Some([]) | None => DIRECTORY_ID_MIGRATING,
            Some(_) => DIRECTORY_ID_UNASSIGNED,
        }
    }

    fn delete_topics(
        &mut self,
        request: &DeleteTopicsRequest,
    ) -> (Vec<ApiMessageAndVersion>, DeleteTopicsResponse) {
        let mut targets: Vec<(Option<String>, Uuid)> = request
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect();
        targets.extend(
            request
                .topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
        );
        let mut removed = BTreeSet::new();
        let mut records = Vec::new();
        let mut responses = Vec::new();
        for (name, id) in targets {
            let found = match (&name, id.is_nil()) {
                (Some(name), true) => self
                    .image
                    .topics
                    .topic_by_name(name)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or_else(|| ControllerError::UnknownTopicOrPartition {
                        reason: "This server does not host this topic-partition.".to_owned(),
                    }),
                (_, false) => self
                    .image
                    .topics
                    .topic(id)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or(ControllerError::UnknownTopicId { topic_id: id }),
                (None, true) => Err(ControllerError::InvalidRequest {
                    reason: "Neither topic name nor id were specified.".to_owned(),
                }),
            };
            let result = DeletableTopicResult::default();
            match found {
                Ok((name, topic_id)) => {
                    if removed.insert(topic_id) {
                        info!(topic = %name, %topic_id, "deleting topic");
                        records.push(ApiMessageAndVersion::new(
                            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                                topic_id,
                                ..RemoveTopicRecord::default()
                            }),
                            0,
                        ));
                    }
                    responses.push(
                        result
                            .with_name(Some(TopicName(StrBytes::from_string(name))))
                            .with_topic_id(topic_id),
                    );
                }
                Err(e) => responses.push(
                    result
                        .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
                        .with_topic_id(id)
                        .with_error_code(e.code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                ),
            }
        }
        (
            records,
            DeleteTopicsResponse::default().with_responses(responses),
        )
    }

    /// Looks up the partition of one AlterPartition entry.
    fn alter_partition_target(
        &self,
        topic: &kafka_protocol::messages::alter_partition_request::TopicData,
        partition_id: i32,
    ) -> Result<(Uuid, PartitionRegistration), ControllerError> {
        let found = if topic.topic_id.is_nil() {
            self.image.topics.topic_by_name(&topic.topic_name.0)
        } else {
            self.image.topics.topic(topic.topic_id)
        };
        let Some(found) = found else {
            return Err(if topic.topic_id.is_nil() {
                ControllerError::UnknownTopicOrPartition {
                    reason: format!("No such topic as {}", topic.topic_name.0.as_str()),
                }
            } else {
                ControllerError::UnknownTopicId {
                    topic_id: topic.topic_id,
                }
            });
        };
        found
            .partitions
            .get(&partition_id)
            .map(|p| (found.id, PartitionRegistration::clone(p)))
            .ok_or_else(|| ControllerError::UnknownTopicOrPartition {
                reason: format!("No such partition {}-{partition_id}", found.name),
            })
    }

    /// Kafka's `validateAlterPartitionData`.
    fn validate_alter_partition(
        &self,
        broker_id: i32,
        partition: &PartitionRegistration,
        data: &kafka_protocol::messages::alter_partition_request::PartitionData,
    ) -> Result<(Vec<i32>, LeaderRecoveryState), ControllerError> {
        if data.leader_epoch > partition.leader_epoch
            || data.partition_epoch > partition.partition_epoch
        {
            // The broker knows a newer state than this controller: it is not the active one
            // as far as the broker can tell.
            return Err(ControllerError::NotController);
        }
        if data.leader_epoch < partition.leader_epoch {
            return Err(ControllerError::FencedLeaderEpoch {
                current: partition.leader_epoch,
                got: data.leader_epoch,
            });
        }
        if broker_id != partition.leader {
            return Err(ControllerError::InvalidRequest {
                reason: format!(
                    "Broker {broker_id} is not the leader ({}) of the partition",
                    partition.leader
                ),
            });
        }
        if data.partition_epoch < partition.partition_epoch {
            return Err(ControllerError::StalePartitionEpoch {
                current: partition.partition_epoch,
                got: data.partition_epoch,
            });
        }
        let with_epochs: Vec<(i32, i64)> = if data.new_isr_with_epochs.is_empty() {
            data.new_isr.iter().map(|b| (b.0, -1)).collect()
        } else {
            data.new_isr_with_epochs
                .iter()
                .map(|b| (b.broker_id.0, b.broker_epoch))
                .collect()
        };
        let new_isr: Vec<i32> = with_epochs.iter().map(|(b, _)| *b).collect();
        let distinct: BTreeSet<i32> = new_isr.iter().copied().collect();
        if new_isr.is_empty()
            || distinct.len() != new_isr.len()
            || new_isr.iter().any(|r| !partition.replicas.contains(r))
        {
            return Err(ControllerError::InvalidRequest {
                reason: format!("Invalid ISR {new_isr:?}"),
            });
        }
        if !new_isr.contains(&partition.leader) {
            return Err(ControllerError::InvalidRequest {
                reason: format!("The new ISR {new_isr:?} does not include the leader"),
            });
        }
        let state =
            LeaderRecoveryState::from_value(data.leader_recovery_state).ok_or_else(|| {
                ControllerError::InvalidRequest {
                    reason: format!(
                        "Unknown leader recovery state {}",
                        data.leader_recovery_state
                    ),
                }
            })?;
        if state == LeaderRecoveryState::Recovering && new_isr.len() > 1 {
            return Err(ControllerError::InvalidRequest {
                reason: "A recovering leader cannot grow the ISR".to_owned(),
            });
        }
        if partition.leader_recovery_state == LeaderRecoveryState::Recovered
            && state == LeaderRecoveryState::Recovering
        {
            return Err(ControllerError::InvalidRequest {
                reason: "The leader recovery state cannot change from RECOVERED to RECOVERING."
                    .to_owned(),
            });
        }
        let ineligible: Vec<i32> = with_epochs
            .iter()
            .filter(|&&(r, epoch)| {
                !self.broker_is_active(r)
                    || (epoch != -1 && self.sessions.broker_epoch(r) != Some(epoch))
            })
            .map(|&(r, _)| r)
            .collect();
        if !ineligible.is_empty() {
            return Err(ControllerError::IneligibleReplica {
                replicas: ineligible,
            });
        }
        Ok((new_isr, state))
    }

    /// The records of an AlterPartition, and each partition's refusal (by topic, then
    /// partition, in request order), decided against the image before the records.
    fn alter_partition_records(
        &self,
        request: &AlterPartitionRequest,
    ) -> (Vec<ApiMessageAndVersion>, Vec<Vec<Option<ControllerError>>>) {
        let mv = self.image.metadata_version();
        let mut records = Vec::new();
        let mut errors = Vec::new();
        for topic in &request.topics {
            let mut topic_errors = Vec::new();
            for data in &topic.partitions {
                let checked = self
                    .alter_partition_target(topic, data.partition_index)
                    .and_then(|(topic_id, partition)| {
                        self.validate_alter_partition(request.broker_id.0, &partition, data)
                            .map(|accepted| (topic_id, partition, accepted))
                    });
                match checked {
                    Ok((topic_id, partition, (new_isr, state))) => {
                        let acceptable = |r: i32| self.broker_is_active(r);
                        records.extend(
                            PartitionChangeBuilder::new(
                                &partition,
                                topic_id,
                                data.partition_index,
                                &acceptable,
                                mv,
                            )
                            .with_target_isr(new_isr)
                            .with_target_leader_recovery_state(state)
                            .build(),
                        );
                        topic_errors.push(None);
                    }
                    Err(e) => topic_errors.push(Some(e)),
                }
            }
            errors.push(topic_errors);
        }
        (records, errors)
    }

    /// The AlterPartition response: refusals as decided, accepted partitions as they are in
    /// the image after the request's records.
    fn alter_partition_response(
        &self,
        request: &AlterPartitionRequest,
        errors: &[Vec<Option<ControllerError>>],
    ) -> ControllerResponse {
        let mut topics = Vec::new();
        for (topic, topic_errors) in request.topics.iter().zip(errors) {
            let mut partitions = Vec::new();
            for (data, error) in topic.partitions.iter().zip(topic_errors) {
                let result = alter_partition_response::PartitionData::default()
                    .with_partition_index(data.partition_index);
                let current = match error {
                    Some(e) => Err(e.clone()),
                    None => self.alter_partition_target(topic, data.partition_index),
                };
                let result = match current {
                    Err(e) => result.with_error_code(e.code()),
                    Ok((_, partition)) => result
                        .with_leader_id(BrokerId(partition.leader))
                        .with_leader_epoch(partition.leader_epoch)
                        .with_isr(partition.isr.iter().copied().map(BrokerId).collect())
                        .with_leader_recovery_state(partition.leader_recovery_state.value())
                        .with_partition_epoch(partition.partition_epoch),
                };
                partitions.push(result);
            }
            topics.push(
                alter_partition_response::TopicData::default()
                    .with_topic_name(topic.topic_name.clone())
                    .with_topic_id(topic.topic_id)
                    .with_partitions(partitions),
            );
        }
        ControllerResponse::AlterPartition(AlterPartitionResponse::default().with_topics(topics))
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

/// The response refusing `request` as a whole with `error`.
fn refusal(request: &ControllerRequest, error: &ControllerError) -> ControllerResponse {
    let (code, message) = error_fields(error);
    match request {
        ControllerRequest::BrokerRegistration(_) => ControllerResponse::BrokerRegistration(
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        ControllerRequest::BrokerHeartbeat(_) => ControllerResponse::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        ControllerRequest::UnregisterBroker(_) => ControllerResponse::UnregisterBroker(
            UnregisterBrokerResponse::default()
                .with_error_code(code)
                .with_error_message(message),
        ),
        ControllerRequest::ControllerRegistration(_) => ControllerResponse::ControllerRegistration(
            ControllerRegistrationResponse::default()
                .with_error_code(code)
                .with_error_message(message),
        ),
        ControllerRequest::CreateTopics(r) => ControllerResponse::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
            ),
        ),
        ControllerRequest::DeleteTopics(r) => {
            let mut responses: Vec<DeletableTopicResult> = r
                .topic_names
                .iter()
                .map(|n| {
                    DeletableTopicResult::default()
                        .with_name(Some(n.clone()))
                        .with_error_code(code)
                })
                .collect();
            responses.extend(r.topics.iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_error_code(code)
            }));
            ControllerResponse::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(responses),
            )
        }
        ControllerRequest::AlterPartition(_) => ControllerResponse::AlterPartition(
            AlterPartitionResponse::default().with_error_code(code),
        ),
        ControllerRequest::CreatePartitions(r) => ControllerResponse::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
            ),
        ),
        ControllerRequest::ElectLeaders(_) => {
            ControllerResponse::ElectLeaders(ElectLeadersResponse::default().with_error_code(code))
        }
        ControllerRequest::AllocateProducerIds(_) => ControllerResponse::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        ControllerRequest::UpdateFeatures { .. } => ControllerResponse::UpdateFeatures(
            UpdateFeaturesResponse::default()
                .with_error_code(code)
                .with_error_message(message.clone()),
        ),
        ControllerRequest::IncrementalAlterConfigs(r) => {
            ControllerResponse::IncrementalAlterConfigs(
                IncrementalAlterConfigsResponse::default().with_responses(
                    r.resources
                        .iter()
                        .map(|c| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(c.resource_type)
                                .with_resource_name(c.resource_name.clone())
                                .with_error_code(code)
                                .with_error_message(message.clone())
                        })
                        .collect(),
                ),
            )
        }
    }
}

/// A prepared response turned into a refusal with `error` (lost leadership before commit).
fn error_response(response: &ControllerResponse, error: &ControllerError) -> ControllerResponse {
    let code = error.code();
    match response {
        ControllerResponse::BrokerRegistration(_) => ControllerResponse::BrokerRegistration(
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        ControllerResponse::BrokerHeartbeat(_) => ControllerResponse::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        ControllerResponse::UnregisterBroker(_) => ControllerResponse::UnregisterBroker(
            UnregisterBrokerResponse::default().with_error_code(code),
        ),
        ControllerResponse::ControllerRegistration(_) => {
            ControllerResponse::ControllerRegistration(
                ControllerRegistrationResponse::default().with_error_code(code),
            )
        }
        ControllerResponse::CreateTopics(r) => {
            let mut r = r.clone();
            for t in &mut r.topics {
                t.error_code = code;
                t.error_message = None;
            }
            ControllerResponse::CreateTopics(r)
        }
        ControllerResponse::DeleteTopics(r) => {
            let mut r = r.clone();
            for t in &mut r.responses {
                t.error_code = code;
            }
            ControllerResponse::DeleteTopics(r)
        }
        ControllerResponse::AlterPartition(_) => ControllerResponse::AlterPartition(
            AlterPartitionResponse::default().with_error_code(code),
        ),
        ControllerResponse::CreatePartitions(r) => {
            let mut r = r.clone();
            for t in &mut r.results {
                t.error_code = code;
                t.error_message = None;
            }
            ControllerResponse::CreatePartitions(r)
        }
        ControllerResponse::ElectLeaders(_) => {
            ControllerResponse::ElectLeaders(ElectLeadersResponse::default().with_error_code(code))
        }
        ControllerResponse::AllocateProducerIds(_) => ControllerResponse::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        ControllerResponse::UpdateFeatures(_) => ControllerResponse::UpdateFeatures(
            UpdateFeaturesResponse::default().with_error_code(code),
        ),
        ControllerResponse::IncrementalAlterConfigs(r) => {
            let mut r = r.clone();
            for c in &mut r.responses {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::IncrementalAlterConfigs(r)
        }
    }
}

/// The Kafka error of a response as a [`ResponseError`], for callers and tests.
#[must_use]
pub fn top_level_error(response: &ControllerResponse) -> Option<ResponseError> {
    use kafka_protocol::error::ParseResponseErrorCode;
    let code = match response {
        ControllerResponse::BrokerRegistration(r) => r.error_code,
        ControllerResponse::BrokerHeartbeat(r) => r.error_code,
        ControllerResponse::UnregisterBroker(r) => r.error_code,
        ControllerResponse::ControllerRegistration(r) => r.error_code,
        ControllerResponse::AlterPartition(r) => r.error_code,
        ControllerResponse::ElectLeaders(r) => r.error_code,
        ControllerResponse::AllocateProducerIds(r) => r.error_code,
        ControllerResponse::UpdateFeatures(r) => r.error_code,
        ControllerResponse::CreateTopics(_)
        | ControllerResponse::DeleteTopics(_)
        | ControllerResponse::CreatePartitions(_)
        | ControllerResponse::IncrementalAlterConfigs(_) => 0,
    };
    code.err()
}
