//! The controller role's state machine, wired to the Raft driver: one tokio task owns the
//! sans-IO [`QuorumController`] (Kafka 3.9 `QuorumController` + `QuorumMetaLogListener`).
//!
//! - Every committed batch from the driver is decoded (ApiMessageAndVersion frames) and
//!   replayed; control batches only advance the delivered offset. An installed snapshot is
//!   read from its `.checkpoint` file and loaded in place of the image.
//! - When the driver announces this node as leader of an epoch (it does so only once every
//!   batch committed before that epoch, and the epoch's own leader-change batch, was handed
//!   up), the controller activates at the delivered end offset, which is then the log end.
//! - Each [`ControllerAction::Append`] goes to an appender task that hands the records to
//!   [`RaftHandle::append_in_epoch`] one append at a time, in order, so each lands right after
//!   the previous; a refused append or one that landed elsewhere makes the node resign that
//!   epoch (Kafka's `QuorumController.renounce`).
//! - Requests come from the controller listener through a [`ControllerChannel`]; each waits
//!   for its [`ControllerAction::Respond`] (the controller releases it once its records are
//!   committed, or at once with `NOT_CONTROLLER` on a standby).
//!
//! A record that does not decode or replay is fatal (Kafka's controller fault handler): the
//! task ends with a [`ControllerTaskError`] and the process stops.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use bytes::Bytes;
use krust_controller::heartbeat::{
    BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT, BROKER_SESSION_TIMEOUT_MS_DEFAULT, HeartbeatConfig,
};
use krust_controller::quorum_controller::{
    METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT, UNCLEAN_LEADER_ELECTION_INTERVAL_MS_DEFAULT,
};
use krust_controller::{
    CommittedBatch, ControllerAction, ControllerRequest, ControllerResponse, QuorumController,
    QuorumControllerConfig, RequestId,
};
use krust_log::batch::RecordBatch;
use krust_metadata::{
    ApiMessageAndVersion, BOOTSTRAP_FILE_NAME, BootstrapMetadata, FrameError, MetadataProvenance,
    ReplayError,
};
use krust_raft::driver::{RaftEvent, RaftHandle};
use krust_raft::snapshot::{SnapshotId, read_snapshot};
use krust_raft::{LeaderEpoch, OffsetAndEpoch};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::config::ServerConfig;

/// Requests waiting to reach the controller task (Kafka's `queued.max.requests` default).
const REQUEST_QUEUE: usize = 500;
/// Appends waiting for the appender task. Full means the log cannot keep up: the controller
/// resigns rather than block the task that must keep replaying commits.
const APPEND_QUEUE: usize = 4096;

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
    /// An installed snapshot could not be read or loaded.
    #[error("loading snapshot {snapshot}: {reason}")]
    Snapshot {
        /// The snapshot id.
        snapshot: OffsetAndEpoch,
        /// What failed.
        reason: String,
    },
}

/// The controller settings of `server.properties` (Kafka's names and defaults) and the
/// bootstrap metadata from `<metadata dir>/bootstrap.checkpoint` (else from
/// `inter.broker.protocol.version`, facts §4.7).
///
/// # Errors
/// An unparseable value or an unreadable `bootstrap.checkpoint` (with context).
pub fn quorum_controller_config(
    config: &ServerConfig,
    node_id: i32,
    cluster_id: &str,
    metadata_dir: &Path,
) -> anyhow::Result<QuorumControllerConfig> {
    fn parse<T: std::str::FromStr>(
        config: &ServerConfig,
        key: &str,
        default: T,
    ) -> anyhow::Result<T>
    where
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        match config.get(key) {
            Some(v) => v.trim().parse().with_context(|| format!("{key}={v}")),
            None => Ok(default),
        }
    }
    let bootstrap_path = metadata_dir.join(BOOTSTRAP_FILE_NAME);
    let bootstrap = match std::fs::read(&bootstrap_path) {
        Ok(bytes) => BootstrapMetadata::from_checkpoint_bytes(
            Bytes::from(bytes),
            &format!(
                "the binary bootstrap metadata file: {}",
                bootstrap_path.display()
            ),
        )
        .with_context(|| format!("reading {}", bootstrap_path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            BootstrapMetadata::from_configuration(config.get("inter.broker.protocol.version"))
                .context("inter.broker.protocol.version")?
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", bootstrap_path.display())),
    };
    Ok(QuorumControllerConfig {
        node_id,
        cluster_id: cluster_id.to_owned(),
        heartbeat: HeartbeatConfig {
            broker_session_timeout_ms: parse(
                config,
                "broker.session.timeout.ms",
                BROKER_SESSION_TIMEOUT_MS_DEFAULT,
            )?,
            broker_heartbeat_interval_ms: parse(
                config,
                "broker.heartbeat.interval.ms",
                BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT,
            )?,
        },
        metadata_max_idle_interval_ms: parse(
            config,
            "metadata.max.idle.interval.ms",
            METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT,
        )?,
        bootstrap,
        default_num_partitions: parse(config, "num.partitions", 1)?,
        default_replication_factor: parse(config, "default.replication.factor", 1)?,
        // Static quorum (controller.quorum.voters): kraft.version 0.
        kraft_version: 0,
        unclean_leader_election_interval_ms: parse(
            config,
            "unclean.leader.election.interval.ms",
            UNCLEAN_LEADER_ELECTION_INTERVAL_MS_DEFAULT,
        )?,
    })
}

/// A request on its way to the controller task.
struct Submitted {
    request: ControllerRequest,
    reply: oneshot::Sender<ControllerResponse>,
}

/// The listener's way to the controller task. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ControllerChannel {
    requests: mpsc::Sender<Submitted>,
}

impl ControllerChannel {
    /// Hands `request` to the controller and waits for its response (after its records
    /// commit). `None` when the controller task has stopped.
    pub async fn call(&self, request: ControllerRequest) -> Option<ControllerResponse> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Submitted { request, reply })
            .await
            .ok()?;
        answer.await.ok()
    }
}

/// One batch for the appender task.
struct PendingAppend {
    epoch: i32,
    base_offset: i64,
    records: Vec<Bytes>,
}

/// Starts the controller task over `raft`'s `events` (the driver's listener channel).
/// `partition_dir` is `__cluster_metadata-0`, where installed snapshots are read from.
#[must_use]
pub fn spawn(
    controller: QuorumController,
    node_id: i32,
    raft: RaftHandle,
    events: mpsc::Receiver<RaftEvent>,
    partition_dir: PathBuf,
) -> (
    ControllerChannel,
    JoinHandle<Result<(), ControllerTaskError>>,
) {
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE);
    let (appends_tx, appends_rx) = mpsc::channel(APPEND_QUEUE);
    tokio::spawn(run_appender(raft.clone(), appends_rx));
    let task = ControllerTask {
        controller,
        node_id,
        raft,
        partition_dir,
        waiting: HashMap::new(),
        delivered_end: 0,
        active_epoch: None,
        appends: appends_tx,
    };
    let handle = tokio::spawn(task.run(events, requests_rx));
    (
        ControllerChannel {
            requests: requests_tx,
        },
        handle,
    )
}

/// Hands appends to the driver one at a time, each once the previous committed, so each
/// lands where the controller expects (nothing else writes while it is active). A failure
/// resigns the epoch; the rest of that epoch's appends are dropped (the controller learns of
/// the resignation through the leader-change event and fails their requests).
async fn run_appender(raft: RaftHandle, mut appends: mpsc::Receiver<PendingAppend>) {
    let mut failed_epoch = None;
    while let Some(append) = appends.recv().await {
        if failed_epoch == Some(append.epoch) {
            continue;
        }
        let count = i64::try_from(append.records.len()).unwrap_or(i64::MAX);
        let result = raft
            .append_in_epoch(LeaderEpoch(append.epoch), append.records)
            .await;
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
    /// Offset after the last batch (data or control) handed up by the driver.
    delivered_end: i64,
    /// The epoch this controller is active in.
    active_epoch: Option<i32>,
    appends: mpsc::Sender<PendingAppend>,
}

impl ControllerTask {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<RaftEvent>,
        mut requests: mpsc::Receiver<Submitted>,
    ) -> Result<(), ControllerTaskError> {
        let mut requests_open = true;
        loop {
            let deadline = self.controller.poll_timeout();
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.handle_event(event).await?,
                    // The driver stopped.
                    None => return Ok(()),
                },
                submitted = requests.recv(), if requests_open => match submitted {
                    Some(Submitted { request, reply }) => {
                        let id = self.controller.handle_request(Instant::now(), request);
                        self.waiting.insert(id, reply);
                    }
                    None => requests_open = false,
                },
                () = sleep_until(deadline), if deadline.is_some() => {
                    self.controller.handle_timeout(Instant::now());
                }
            }
            self.drain_actions();
        }
    }

    async fn handle_event(&mut self, event: RaftEvent) -> Result<(), ControllerTaskError> {
        match event {
            RaftEvent::Commit(batches) => {
                for batch in batches {
                    self.replay(&batch)?;
                }
            }
            RaftEvent::LeaderChange { leader, epoch } => {
                let now = Instant::now();
                let leads = leader.is_some_and(|l| l.0 == self.node_id);
                if self
                    .active_epoch
                    .is_some_and(|active| !leads || active != epoch.0)
                {
                    self.controller
                        .handle_leader_change(now, false, epoch.0, self.delivered_end);
                    self.active_epoch = None;
                }
                if leads && self.active_epoch.is_none() {
                    info!(
                        epoch = epoch.0,
                        log_end_offset = self.delivered_end,
                        "becoming the active controller"
                    );
                    self.controller
                        .handle_leader_change(now, true, epoch.0, self.delivered_end);
                    self.active_epoch = Some(epoch.0);
                }
            }
            RaftEvent::SnapshotInstalled(id) => self.load_snapshot(id).await?,
        }
        Ok(())
    }

    fn deactivate(&mut self) {
        if let Some(epoch) = self.active_epoch.take() {
            self.controller
                .handle_leader_change(Instant::now(), false, epoch, self.delivered_end);
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
        info!(snapshot = %id, "controller loaded a snapshot");
        Ok(())
    }

    fn drain_actions(&mut self) {
        while let Some(action) = self.controller.poll_action() {
            match action {
                ControllerAction::Append {
                    epoch,
                    base_offset,
                    records,
                } => self.append(epoch, base_offset, &records),
                ControllerAction::Respond { id, response } => {
                    if let Some(reply) = self.waiting.remove(&id) {
                        // The requester may have gone (connection closed): nothing to do.
                        let _ = reply.send(response);
                    }
                }
            }
        }
    }

    fn append(&mut self, epoch: i32, base_offset: i64, records: &[ApiMessageAndVersion]) {
        let encoded: Result<Vec<Bytes>, _> =
            records.iter().map(ApiMessageAndVersion::encode).collect();
        let failure = match encoded {
            Ok(records) => match self.appends.try_send(PendingAppend {
                epoch,
                base_offset,
                records,
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
