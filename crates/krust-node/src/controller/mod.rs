//! The controller server (Kafka's `ControllerServer`): one tokio task owns the sans-IO
//! [`QuorumController`] (Kafka 3.9 `QuorumController` + `QuorumMetaLogListener`), the
//! controller listener ([`listener`]) serves the Raft RPCs and the controller APIs, and the
//! controller's metadata publishers ([`features::FeaturesPublisher`],
//! [`metadata_cache::MetadataCachePublisher`], and any added with
//! [`ControllerServerBuilder::with_publisher`], e.g. the ZooKeeper migration driver) are
//! registered with the node's metadata loader ([`crate::loader`]).
//!
//! - Every committed batch from the driver is decoded (ApiMessageAndVersion frames) and
//!   replayed; control batches only advance the delivered offset. An installed snapshot is
//!   read from its `.checkpoint` file and loaded in place of the image.
//! - When the driver announces this node as leader of an epoch (it does so only once every
//!   batch committed before that epoch, and the epoch's own leader-change batch, was handed
//!   up), the controller activates at the delivered end offset, which is then the log end.
//! - Each [`ControllerAction::Append`] goes to an appender task that hands the records to
//!   [`RaftHandle::append_in_epoch_no_wait`] in order, so each lands right after the previous;
//!   it does not wait for the commit (pipelined, as Kafka's controller keeps writing while
//!   earlier batches commit): responses are released by the controller when the commit events
//!   reach their offsets. A refused append or one that landed elsewhere makes the node resign
//!   that epoch (Kafka's `QuorumController.renounce`).
//! - Requests come from the controller listener through a [`ControllerChannel`]; each waits
//!   for its [`ControllerAction::Respond`] (the controller releases it once its records are
//!   committed, or at once with `NOT_CONTROLLER` on a standby).
//!
//! - Snapshots (Kafka's `SnapshotGenerator`): once the replayed data batches add up to
//!   `metadata.log.max.record.bytes.between.snapshots`, or `metadata.log.max.snapshot.interval.ms`
//!   passed with new records, the committed image is written with
//!   [`RaftHandle::create_snapshot`] (one at a time, off the task).
//!
//! - KIP-919 self-registration (Kafka's `ControllerRegistrationManager`): once the committed
//!   metadata.version supports it, the node sends ControllerRegistration (its listener, its
//!   supported features, a fresh incarnation id) to the active controller — itself included —
//!   and retries every [`REGISTRATION_RETRY`] until the committed image holds it.
//!
//! A record that does not decode or replay is fatal (Kafka's controller fault handler): the
//! task ends with a [`ControllerTaskError`] and the process stops.

mod envelope;
pub mod features;
pub mod listener;
pub mod metadata_cache;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::controller_registration_request::{Feature, Listener};
use kafka_protocol::messages::{ControllerRegistrationRequest, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_controller::{
    CommittedBatch, ControllerAction, ControllerRequest, ControllerResponse, QuorumController,
    RequestId,
};
use krust_log::batch::RecordBatch;
use krust_metadata::image::{MetadataImage, MetadataPublisher};
use krust_metadata::{ApiMessageAndVersion, FrameError, MetadataProvenance, ReplayError};
use krust_raft::config::VoterAddress;
use krust_raft::driver::{MetadataLogConfig, RaftEvent, RaftHandle};
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName, SnapshotId, read_snapshot};
use krust_raft::{LeaderEpoch, OffsetAndEpoch};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

pub use self::features::{FeaturesPublisher, FinalizedFeatures};
pub use self::metadata_cache::MetadataCachePublisher;
use crate::snapshot_trigger::SnapshotTrigger;

/// Requests waiting to reach the controller task (Kafka's `queued.max.requests` default).
const REQUEST_QUEUE: usize = 500;
/// Appends waiting for the appender task. Full means the log cannot keep up: the controller
/// resigns rather than block the task that must keep replaying commits.
const APPEND_QUEUE: usize = 4096;

/// How long to wait before sending ControllerRegistration again while the committed image does
/// not show this incarnation.
const REGISTRATION_RETRY: Duration = Duration::from_secs(1);
/// Timeout of a ControllerRegistration sent to another controller.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the controller task stopped the process.
#[derive(Debug, thiserror::Error)]
pub enum ControllerTaskError {
    /// A committed batch could not be read (its records do not parse).
    #[error("committed batch at offset {base_offset} does not parse")]
    Batch {
        /// The batch.
        base_offset: i64,
        /// What failed.
        #[source]
        source: krust_log::batch::BatchError,
    },
    /// A record is not an ApiMessageAndVersion frame of a known metadata record.
    #[error("record at offset {offset} is not a metadata record")]
    Decode {
        /// The record.
        offset: i64,
        /// What failed.
        #[source]
        source: FrameError,
    },
    /// A record with no value (metadata records always have one).
    #[error("record at offset {offset} has no value")]
    NoValue {
        /// The record.
        offset: i64,
    },
    /// A record does not fit the image: this log is not one the controller can follow.
    #[error("replaying the batch at offset {base_offset}")]
    Replay {
        /// The batch.
        base_offset: i64,
        /// What failed.
        #[source]
        source: ReplayError,
    },
    /// This controller cannot become active on this log with its settings (Kafka's
    /// activation refusals, e.g. `zookeeper.metadata.migration.enable` on a cluster created
    /// in KRaft mode): fatal, as Kafka's fault handler makes it.
    #[error("exception while completing controller activation: {0}")]
    Activation(#[from] krust_controller::ActivationError),
    /// An installed snapshot could not be read or loaded.
    #[error("loading snapshot {snapshot}: {reason}")]
    Snapshot {
        /// The snapshot id.
        snapshot: OffsetAndEpoch,
        /// What failed.
        reason: String,
    },
    /// The controller task panicked (a bug).
    #[error("the controller task panicked: {reason}")]
    Panicked {
        /// The panic.
        reason: String,
    },
}

/// A request on its way to the controller task.
struct Submitted {
    request: ControllerRequest,
    reply: oneshot::Sender<ControllerResponse>,
    /// The caller's `controller_mutation_rate` quota (KIP-599), if it has one.
    quota: Option<Box<dyn krust_controller::PartitionChangeQuota>>,
}

/// The listener's way to the controller task. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ControllerChannel {
    requests: mpsc::Sender<Submitted>,
    features: watch::Receiver<Option<FinalizedFeatures>>,
    image: watch::Receiver<Option<MetadataImage>>,
}

impl ControllerChannel {
    /// Hands `request` to the controller and waits for its response (after its records
    /// commit). `None` when the controller task has stopped.
    pub async fn call(&self, request: ControllerRequest) -> Option<ControllerResponse> {
        self.call_with_quota(request, None).await
    }

    /// [`Self::call`] with the caller's `controller_mutation_rate` quota, which CreateTopics,
    /// CreatePartitions and DeleteTopics consume topic by topic (Kafka's
    /// `ControllerRequestContext` with its partition-change quota applier).
    pub async fn call_with_quota(
        &self,
        request: ControllerRequest,
        quota: Option<Box<dyn krust_controller::PartitionChangeQuota>>,
    ) -> Option<ControllerResponse> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Submitted {
                request,
                reply,
                quota,
            })
            .await
            .ok()?;
        answer.await.ok()
    }

    /// The finalized features of the last image the node's metadata loader published (see
    /// [`FeaturesPublisher`]); `None` before the first metadata.version record.
    #[must_use]
    pub fn finalized_features(&self) -> Option<FinalizedFeatures> {
        self.features.borrow().clone()
    }

    /// The last image the node's metadata loader published (see
    /// [`MetadataCachePublisher`]); `None` before the first one.
    #[must_use]
    pub fn published_image(&self) -> Option<MetadataImage> {
        self.image.borrow().clone()
    }
}

/// One batch for the appender task.
struct PendingAppend {
    epoch: i32,
    base_offset: i64,
    records: Vec<Bytes>,
    /// Written at once instead of after the append linger (a migration batch).
    flush: bool,
}

/// Where the controller task runs: its identity and the quorum's addresses.
#[derive(Debug, Clone)]
pub struct ControllerNode {
    /// `node.id`.
    pub node_id: i32,
    /// The controller listener's name (first of `controller.listener.names`).
    pub listener_name: String,
    /// `controller.quorum.voters` (this node's own entry gives its registered endpoint).
    pub voters: Vec<VoterAddress>,
    /// `__cluster_metadata-0`, where installed snapshots are read from.
    pub partition_dir: PathBuf,
    /// The controller listener's security protocol id (Kafka's: 0 PLAINTEXT, 1 SSL,
    /// 2 SASL_PLAINTEXT, 3 SASL_SSL), registered with its endpoint.
    pub security_protocol: i16,
    /// The client side of it, for this node's connections to other controllers.
    pub client_security: krust_net::security::ClientSecurity,
}

/// The ControllerRegistration this process sends (KIP-919): its controller listener, the
/// features it supports (as advertised in ApiVersions) and a fresh incarnation id.
fn registration_request(
    node: &ControllerNode,
    zk_migration_ready: bool,
) -> ControllerRegistrationRequest {
    let own = node.voters.iter().find(|v| v.id.0 == node.node_id);
    let listeners = own
        .map(|v| {
            vec![
                Listener::default()
                    .with_name(StrBytes::from_string(node.listener_name.clone()))
                    .with_host(StrBytes::from_string(v.host.clone()))
                    .with_port(v.port)
                    .with_security_protocol(node.security_protocol),
            ]
        })
        .unwrap_or_default();
    let feature = |name: &str, min: i16, max: i16| {
        Feature::default()
            .with_name(StrBytes::from_string(name.to_owned()))
            .with_min_supported_version(min)
            .with_max_supported_version(max)
    };
    let features = krust_metadata::features::supported_feature_ranges()
        .into_iter()
        .map(|(name, min, max)| feature(name, min, max))
        .collect();
    ControllerRegistrationRequest::default()
        .with_controller_id(node.node_id)
        .with_incarnation_id(krust_metadata::kafka_uuid::random_kafka_uuid(
            &mut rand::thread_rng(),
        ))
        .with_zk_migration_ready(zk_migration_ready)
        .with_listeners(listeners)
        .with_features(features)
}

/// The running controller server (see the module doc).
#[derive(Debug)]
pub struct ControllerServer {
    channel: ControllerChannel,
    task: JoinHandle<Result<(), ControllerTaskError>>,
}

impl ControllerServer {
    /// Starts building the controller server of `node` around `controller`, writing through
    /// `raft`.
    #[must_use]
    pub fn builder(
        controller: QuorumController,
        node: ControllerNode,
        raft: RaftHandle,
    ) -> ControllerServerBuilder {
        ControllerServerBuilder {
            controller,
            node,
            raft,
            snapshots: MetadataLogConfig::default(),
            publishers: Vec::new(),
            zk_write_behind: None,
        }
    }

    /// The controller listener's way to the controller task.
    #[must_use]
    pub fn channel(&self) -> &ControllerChannel {
        &self.channel
    }

    /// Resolves when the controller task ends: `Ok` once the driver is gone, or the fault
    /// that stopped it.
    ///
    /// # Errors
    /// [`ControllerTaskError`]; a panic of the task is reported as
    /// [`ControllerTaskError::Panicked`].
    pub async fn join(self) -> Result<(), ControllerTaskError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(ControllerTaskError::Panicked {
                reason: e.to_string(),
            }),
        }
    }
}

/// Builds a [`ControllerServer`] with the metadata publishers of the controller node.
pub struct ControllerServerBuilder {
    controller: QuorumController,
    node: ControllerNode,
    raft: RaftHandle,
    snapshots: MetadataLogConfig,
    publishers: Vec<Box<dyn MetadataPublisher>>,
    zk_write_behind: Option<Arc<AtomicI64>>,
}

impl std::fmt::Debug for ControllerServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerServerBuilder")
            .field("node_id", &self.node.node_id)
            .field(
                "publishers",
                &self.publishers.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ControllerServerBuilder {
    /// The snapshot triggers (`metadata.log.max.*`; Kafka's defaults otherwise).
    #[must_use]
    pub fn with_snapshot_triggers(mut self, triggers: &MetadataLogConfig) -> Self {
        self.snapshots = *triggers;
        self
    }

    /// Adds a metadata publisher of the controller node (e.g. the ZooKeeper migration
    /// driver), called after the features publisher and those added before.
    #[must_use]
    pub fn with_publisher(mut self, publisher: Box<dyn MetadataPublisher>) -> Self {
        self.publishers.push(publisher);
        self
    }

    /// Reads the ZooKeeper migration's write-behind lag from `lag` (kept current by the
    /// migration task) before each request, for `max_zk_write_behind`.
    #[must_use]
    pub fn with_zk_write_behind(mut self, lag: Arc<AtomicI64>) -> Self {
        self.zk_write_behind = Some(lag);
        self
    }

    /// Starts the controller task over `events` (the driver's, or the combined node's copy of
    /// them). Returns the server and the controller node's metadata publishers —
    /// [`FeaturesPublisher`] first, [`MetadataCachePublisher`], then those added with
    /// [`Self::with_publisher`] — to be
    /// registered with the node's metadata loader before it loads anything.
    #[must_use]
    pub fn start(
        self,
        events: mpsc::Receiver<RaftEvent>,
    ) -> (ControllerServer, Vec<Box<dyn MetadataPublisher>>) {
        let ControllerServerBuilder {
            controller,
            node,
            raft,
            snapshots,
            publishers: extra,
            zk_write_behind,
        } = self;
        let zk_migration_ready = controller.zk_migration_enabled();
        let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE);
        let (appends_tx, appends_rx) = mpsc::channel(APPEND_QUEUE);
        let (features_tx, features_rx) = watch::channel(None);
        let (image_tx, image_rx) = watch::channel(None);
        tokio::spawn(run_appender(raft.clone(), appends_rx));
        let task = ControllerTask {
            controller,
            node_id: node.node_id,
            raft,
            partition_dir: node.partition_dir.clone(),
            registration: Registration {
                request: registration_request(&node, zk_migration_ready),
                client_security: node.client_security.clone(),
                voters: node.voters,
                leader: None,
                local: None,
                remote_in_flight: Arc::new(AtomicBool::new(false)),
                next_attempt: Instant::now(),
            },
            waiting: HashMap::new(),
            flush_appends: false,
            loaded_snapshot: None,
            zk_write_behind,
            delivered_end: 0,
            active_epoch: None,
            appends: appends_tx,
            snapshots: SnapshotTrigger::new(&snapshots, "wrote a metadata snapshot"),
            snapshot_log_time_ms: -1,
        };
        let handle = tokio::spawn(task.run(events, requests_rx));
        let mut publishers: Vec<Box<dyn MetadataPublisher>> = vec![
            Box::new(FeaturesPublisher::new(Arc::new(features_tx))),
            Box::new(MetadataCachePublisher::new(image_tx)),
        ];
        publishers.extend(extra);
        let server = ControllerServer {
            channel: ControllerChannel {
                requests: requests_tx,
                features: features_rx,
                image: image_rx,
            },
            task: handle,
        };
        (server, publishers)
    }
}

/// Hands appends to the driver in order, each once the previous is in the log (not
/// committed: the commit events release the responses), so each lands where the controller
/// expects (nothing else writes while it is active). A failure resigns the epoch; the rest of
/// that epoch's appends are dropped (the controller learns of the resignation through the
/// leader-change event and fails their requests).
async fn run_appender(raft: RaftHandle, mut appends: mpsc::Receiver<PendingAppend>) {
    let mut failed_epoch = None;
    while let Some(append) = appends.recv().await {
        if failed_epoch == Some(append.epoch) {
            continue;
        }
        let count = i64::try_from(append.records.len()).unwrap_or(i64::MAX);
        let epoch = LeaderEpoch(append.epoch);
        let result = if append.flush {
            raft.append_in_epoch_no_wait_now(epoch, append.records)
                .await
        } else {
            raft.append_in_epoch_no_wait(epoch, append.records).await
        };
        let landed = match result {
            Ok(last) if last.0 - count + 1 == append.base_offset => continue,
            Ok(last) => format!("landed at {}", last.0 - count + 1),
            Err(e) => e.to_string(),
        };
        warn!(
            epoch = append.epoch,
            base_offset = append.base_offset,
            outcome = %landed,
            "controller append failed; resigning"
        );
        failed_epoch = Some(append.epoch);
        raft.resign(LeaderEpoch(append.epoch)).await;
    }
}

struct ControllerTask {
    controller: QuorumController,
    node_id: i32,
    raft: RaftHandle,
    partition_dir: PathBuf,
    /// Requests waiting for their response.
    waiting: HashMap<RequestId, oneshot::Sender<ControllerResponse>>,
    /// The appends of the request being handled are written at once (a migration batch).
    flush_appends: bool,
    /// Offset after the last batch (data or control) handed up by the driver.
    delivered_end: i64,
    /// The epoch this controller is active in.
    active_epoch: Option<i32>,
    appends: mpsc::Sender<PendingAppend>,
    snapshots: SnapshotTrigger,
    /// Max timestamp of the last replayed data batch (the snapshot header's
    /// LastContainedLogTimestamp).
    snapshot_log_time_ms: i64,
    registration: Registration,
    /// The snapshot loaded from disk at start, if any.
    loaded_snapshot: Option<OffsetAndEpoch>,
    /// The migration's ZooKeeper write-behind lag, when migrating.
    zk_write_behind: Option<Arc<AtomicI64>>,
}

/// KIP-919 self-registration state.
struct Registration {
    request: ControllerRegistrationRequest,
    /// The controller listener's client-side security.
    client_security: krust_net::security::ClientSecurity,
    voters: Vec<VoterAddress>,
    /// The Raft leader (the active controller), if known.
    leader: Option<i32>,
    /// The registration handed to this node's own active controller.
    local: Option<RequestId>,
    /// Set while a registration sent to another controller awaits its answer.
    remote_in_flight: Arc<AtomicBool>,
    next_attempt: Instant,
}

impl ControllerTask {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<RaftEvent>,
        mut requests: mpsc::Receiver<Submitted>,
    ) -> Result<(), ControllerTaskError> {
        let mut requests_open = true;
        self.load_latest_local_snapshot().await?;
        loop {
            let deadline = self.controller.poll_timeout();
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.handle_event(event).await?,
                    // The driver stopped.
                    None => return Ok(()),
                },
                submitted = requests.recv(), if requests_open => match submitted {
                    Some(Submitted { request, reply, quota }) => {
                        if let Some(lag) = &self.zk_write_behind {
                            self.controller.set_zk_write_behind(lag.load(Ordering::Relaxed));
                        }
                        // The migration driver sends its next batch only once this one
                        // committed: nothing would join it while it lingers.
                        self.flush_appends =
                            matches!(request, ControllerRequest::MigrationRecords { .. });
                        let id = match quota {
                            Some(quota) => self.controller.handle_request_with_quota(
                                Instant::now(),
                                request,
                                quota,
                            ),
                            None => self.controller.handle_request(Instant::now(), request),
                        };
                        self.waiting.insert(id, reply);
                    }
                    None => requests_open = false,
                },
                () = sleep_until(deadline), if deadline.is_some() => {
                    self.controller.handle_timeout(Instant::now());
                }
                () = tokio::time::sleep(REGISTRATION_RETRY), if self.registration_pending() => {}
            }
            self.maybe_register();
            self.drain_actions();
            self.flush_appends = false;
        }
    }

    async fn handle_event(&mut self, event: RaftEvent) -> Result<(), ControllerTaskError> {
        match event {
            RaftEvent::Commit(batches) => {
                for batch in batches {
                    self.replay(&batch)?;
                }
                self.maybe_snapshot();
            }
            RaftEvent::LeaderChange { leader, epoch } => {
                let now = Instant::now();
                self.registration.leader = leader.map(|l| l.0);
                let leads = leader.is_some_and(|l| l.0 == self.node_id);
                if self
                    .active_epoch
                    .is_some_and(|active| !leads || active != epoch.0)
                {
                    self.controller.handle_leader_change(
                        now,
                        false,
                        epoch.0,
                        self.delivered_end,
                    )?;
                    self.active_epoch = None;
                }
                if leads && self.active_epoch.is_none() {
                    info!(
                        epoch = epoch.0,
                        log_end_offset = self.delivered_end,
                        "becoming the active controller"
                    );
                    self.controller
                        .handle_leader_change(now, true, epoch.0, self.delivered_end)?;
                    self.active_epoch = Some(epoch.0);
                }
            }
            // The start-up snapshot may be the one already loaded from disk.
            RaftEvent::SnapshotInstalled(id)
                if self.loaded_snapshot == Some(id) && self.delivered_end == id.offset.0 => {}
            RaftEvent::SnapshotInstalled(id) => self.load_snapshot(id).await?,
        }
        Ok(())
    }

    fn deactivate(&mut self) {
        if let Some(epoch) = self.active_epoch.take() {
            // Deactivating writes nothing and cannot fail.
            let _ = self.controller.handle_leader_change(
                Instant::now(),
                false,
                epoch,
                self.delivered_end,
            );
        }
    }

    fn replay(&mut self, batch: &RecordBatch) -> Result<(), ControllerTaskError> {
        let base_offset = batch.base_offset();
        if batch.next_offset() <= self.delivered_end {
            // Already covered by a loaded snapshot.
            return Ok(());
        }
        self.delivered_end = batch.next_offset();
        if batch.is_control() {
            return Ok(());
        }
        if self
            .active_epoch
            .is_some_and(|e| e != batch.partition_leader_epoch())
        {
            // Another leader's batch: this node no longer leads (the event may still be queued).
            self.deactivate();
        }
        let records = batch
            .records()
            .map_err(|source| ControllerTaskError::Batch {
                base_offset,
                source,
            })?;
        let mut decoded = Vec::with_capacity(records.len());
        for record in &records {
            let offset = base_offset + i64::from(record.offset_delta);
            let value = record
                .value
                .as_ref()
                .ok_or(ControllerTaskError::NoValue { offset })?;
            decoded.push(
                ApiMessageAndVersion::decode(value)
                    .map_err(|source| ControllerTaskError::Decode { offset, source })?,
            );
        }
        if decoded.is_empty() {
            return Ok(());
        }
        self.snapshots.batch_applied(batch.size_in_bytes());
        self.snapshot_log_time_ms = batch.max_timestamp();
        debug!(
            base_offset,
            records = decoded.len(),
            "replaying committed batch"
        );
        self.controller
            .handle_committed(
                Instant::now(),
                &CommittedBatch {
                    base_offset,
                    epoch: batch.partition_leader_epoch(),
                    records: decoded,
                },
            )
            .map_err(|source| ControllerTaskError::Replay {
                base_offset,
                source,
            })
    }

    /// On start, loads the newest frozen snapshot in the metadata log directory (Kafka's
    /// controller starts from the latest snapshot): the committed batches below its end offset,
    /// which the driver still hands up when the log begins at 0, are then skipped instead of
    /// replayed one by one. Snapshots hold only committed records, so any of them is a valid
    /// starting point.
    async fn load_latest_local_snapshot(&mut self) -> Result<(), ControllerTaskError> {
        let Ok(entries) = std::fs::read_dir(&self.partition_dir) else {
            return Ok(());
        };
        let latest = entries
            .filter_map(Result::ok)
            .filter_map(|e| SnapshotFileName::parse(&e.file_name().to_string_lossy()).ok()?)
            .filter(|n| n.kind == SnapshotFileKind::Frozen && n.id.end_offset > 0)
            .map(|n| n.id)
            .max();
        let Some(latest) = latest else {
            return Ok(());
        };
        let started = Instant::now();
        let id = OffsetAndEpoch::new(latest.end_offset, latest.epoch);
        self.load_snapshot(id).await?;
        self.loaded_snapshot = Some(id);
        info!(
            snapshot = %id,
            elapsed_ms = started.elapsed().as_millis(),
            "controller started from its latest snapshot"
        );
        Ok(())
    }

    async fn load_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), ControllerTaskError> {
        let failed = |reason: String| ControllerTaskError::Snapshot {
            snapshot: id,
            reason,
        };
        // The Raft leader never installs a snapshot; be safe if the event races a resign.
        self.deactivate();
        let snapshot_id = SnapshotId {
            end_offset: id.offset.0,
            epoch: id.epoch.0,
        };
        let path = self.partition_dir.join(snapshot_id.file_name());
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
        let contents = read_snapshot(Bytes::from(bytes), Some(id.epoch.0))
            .map_err(|e| failed(e.to_string()))?;
        let records = contents
            .records
            .iter()
            .map(|v| ApiMessageAndVersion::decode(v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(e.to_string()))?;
        let provenance = MetadataProvenance::new(
            id.offset.0 - 1,
            id.epoch.0,
            contents.header.last_contained_log_timestamp,
        );
        self.controller
            .handle_snapshot(Instant::now(), &records, provenance)
            .map_err(|e| failed(e.to_string()))?;
        self.delivered_end = id.offset.0;
        self.snapshots.snapshot_loaded(id.offset.0);
        info!(snapshot = %id, "controller loaded a snapshot");
        Ok(())
    }

    /// Whether this incarnation still has to appear in the committed image (and can, at the
    /// committed metadata.version).
    fn registration_pending(&self) -> bool {
        let image = self.controller.committed_image();
        if image.is_empty()
            || !image
                .features
                .metadata_version
                .is_controller_registration_supported()
        {
            return false;
        }
        image
            .cluster
            .controllers
            .get(&self.node_id)
            .is_none_or(|r| r.incarnation_id != self.registration.request.incarnation_id)
    }

    /// Sends ControllerRegistration to the active controller when due (Kafka's
    /// `ControllerRegistrationManager`).
    fn maybe_register(&mut self) {
        let now = Instant::now();
        if now < self.registration.next_attempt
            || self.registration.local.is_some()
            || self.registration.remote_in_flight.load(Ordering::Acquire)
            || !self.registration_pending()
        {
            return;
        }
        let Some(leader) = self.registration.leader else {
            return;
        };
        self.registration.next_attempt = now + REGISTRATION_RETRY;
        let request = self.registration.request.clone();
        if leader == self.node_id {
            if self.controller.is_active() {
                let id = self
                    .controller
                    .handle_request(now, ControllerRequest::ControllerRegistration(request));
                self.registration.local = Some(id);
            }
            return;
        }
        let Some(address) = self
            .registration
            .voters
            .iter()
            .find(|v| v.id.0 == leader)
            .map(|v| format!("{}:{}", v.host, v.port))
        else {
            return;
        };
        let in_flight = self.registration.remote_in_flight.clone();
        in_flight.store(true, Ordering::Release);
        let security = self.registration.client_security.clone();
        tokio::spawn(async move {
            let client = krust_net::Client::new(
                address,
                krust_net::ClientConfig {
                    client_id: "raft-controller-registration".to_owned(),
                    request_timeout: REGISTRATION_TIMEOUT,
                    security,
                    ..krust_net::ClientConfig::default()
                },
            );
            match client.send(request, 0).await {
                Ok(ResponseKind::ControllerRegistration(r)) if r.error_code == 0 => {
                    info!(leader, "controller registration sent");
                }
                Ok(ResponseKind::ControllerRegistration(r)) => {
                    debug!(
                        leader,
                        error_code = r.error_code,
                        "controller registration refused"
                    );
                }
                Ok(_) => warn!(leader, "unexpected answer to ControllerRegistration"),
                Err(e) => debug!(leader, error = %e, "controller registration failed"),
            }
            client.disconnect().await;
            in_flight.store(false, Ordering::Release);
        });
    }

    /// Starts writing a snapshot of the committed image when one is due and none is being
    /// written.
    fn maybe_snapshot(&mut self) {
        self.snapshots.maybe_snapshot(
            &self.raft,
            self.controller.committed_image(),
            self.snapshot_log_time_ms,
        );
    }

    fn drain_actions(&mut self) {
        while let Some(action) = self.controller.poll_action() {
            match action {
                ControllerAction::Append {
                    epoch,
                    base_offset,
                    records,
                } => self.append(epoch, base_offset, &records, self.flush_appends),
                ControllerAction::Respond { id, response } => {
                    if self.registration.local == Some(id) {
                        self.registration.local = None;
                        if let ControllerResponse::ControllerRegistration(r) = &response
                            && r.error_code != 0
                        {
                            warn!(error_code = r.error_code, "controller registration refused");
                        }
                        continue;
                    }
                    if let Some(reply) = self.waiting.remove(&id) {
                        // The requester may have gone (connection closed): nothing to do.
                        let _ = reply.send(response);
                    }
                }
            }
        }
    }

    fn append(
        &mut self,
        epoch: i32,
        base_offset: i64,
        records: &[ApiMessageAndVersion],
        flush: bool,
    ) {
        let encoded: Result<Vec<Bytes>, _> =
            records.iter().map(ApiMessageAndVersion::encode).collect();
        let failure = match encoded {
            Ok(records) => match self.appends.try_send(PendingAppend {
                epoch,
                base_offset,
                records,
                flush,
            }) {
                Ok(()) => return,
                Err(_) => "the append queue is full".to_owned(),
            },
            // Our own records: a failure here is a bug, but not one worth the process.
            Err(e) => format!("encoding records: {e}"),
        };
        error!(epoch, base_offset, %failure, "controller cannot append; resigning");
        let raft = self.raft.clone();
        tokio::spawn(async move { raft.resign(LeaderEpoch(epoch)).await });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
