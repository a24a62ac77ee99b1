//! The tokio driver: one task that owns a [`RaftCore`] and does its IO.
//!
//! The task feeds the core its inputs — requests handed over by the controller listener
//! ([`RaftHandle::handle_request`]), responses from peers, timer expiry at
//! [`RaftCore::poll_timeout`], completed fsyncs, client appends ([`RaftHandle::append`]) — and
//! after each input executes every [`Action`] **in order**:
//!
//! * `PersistQuorumState` → `quorum-state` written with `write_atomically` (fsynced) before the
//!   next action runs, so a vote is durable before the response granting it is handed back;
//! * `Append` / `Truncate` → the `__cluster_metadata-0` [`krust_log::Log`];
//! * `Flush` → `fsync`, then `handle_flushed` — a voter's Fetch offset, and the leader's own
//!   count toward the high watermark, only ever cover flushed data;
//! * `SendRequest` → a task sending through the [`NetworkClient`] pool to the address from
//!   `controller.quorum.voters` (timeout `controller.quorum.request.timeout.ms`); its answer
//!   comes back into the loop as an input;
//! * `SendResponse` → back to the listener task waiting for it;
//! * `Commit` / `LeaderChange` / `InstallSnapshot` → to the [`RaftEvent`] listener;
//! * `HighWatermarkAdvanced` → completes waiting [`RaftHandle::append`] calls;
//! * `ReadSnapshot` / `WriteSnapshotChunk` / `InstallSnapshot` / `DeleteLogPrefix` → the
//!   snapshot files and the log start ([`MetadataStore`]).
//!
//! Snapshots (KIP-630): the state machine above writes one with
//! [`RaftHandle::create_snapshot`] (id checked by the core, file written off the driver task,
//! then registered). Retention is Kafka's `KafkaMetadataLog.maybeClean`, run after each new
//! snapshot and every `log.retention.check.interval.ms` ([`MetadataLogConfig`]): the oldest
//! snapshot goes while the log plus snapshots exceed `metadata.max.retention.bytes` or it is
//! older than `metadata.max.retention.ms`, the log start moving up to the next snapshot; the
//! latest snapshot always stays. At start-up the log start is put on a snapshot boundary and a
//! listener of a log starting above 0 is handed the latest snapshot first. The store holds
//! `<metadata.log.dir>/.lock` for its lifetime.
//!
//! Decisions stay in the core; the driver only does IO. A storage failure or an
//! `Action::Fatal` stops the replica ([`DriverExit::Failed`]): a voter that cannot persist must
//! leave the quorum rather than acknowledge what it may lose.
//!
//! # Layout
//!
//! * `mod.rs` — [`RaftDriver`], [`RaftHandle`], the event loop.
//! * `storage.rs` — [`MetadataStore`]: log, `quorum-state`, snapshot files.
//! * `metrics.rs` — the measured `raft-metrics` (commit/election latency, append/fetch
//!   rates, poll idle ratio) and [`RaftHandle::metrics_collector`] for Prometheus.
//! * `wire_versions.rs` — the Raft RPC versions served and sent, and fitting messages to older
//!   versions.

pub mod metrics;
mod storage;
pub mod wire_versions;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{
    DescribeQuorumRequest, RequestKind, ResponseKind, describe_quorum_request,
};
use krust_log::LogConfig;
use krust_log::batch::RecordBatch;
use krust_net::{ClientConfig, ClientError, NetworkClient};
use rand::SeedableRng as _;
use rand::rngs::StdRng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant as TokioInstant;
use tracing::{debug, error, info, trace, warn};

pub use storage::{
    LOCK_FILE, MetadataStore, QUORUM_STATE_FILE, SnapshotMeta, StorageError, write_snapshot_file,
};

use crate::config::{RaftConfig, VoterAddress};
use crate::core::{
    Action, AppendError, FatalError, InitError, METADATA_PARTITION, METADATA_TOPIC_NAME, RaftCore,
    RaftMetrics, RaftRequest, RaftResponse, RoleKind, SnapshotIdError,
};
use crate::types::{LeaderEpoch, LogOffset, NodeId, OffsetAndEpoch, RequestId};

/// Commands queued to the driver before it pushes back on callers.
const COMMAND_QUEUE: usize = 1024;
/// Responses from peers queued before send tasks wait.
const RESPONSE_QUEUE: usize = 1024;
/// How long a graceful shutdown of a leader waits for a successor before stopping anyway
/// (Kafka's `RaftManager` gives its client 5 s).
pub const SHUTDOWN_RESIGN_TIMEOUT: Duration = Duration::from_secs(5);

/// Snapshot and retention settings of the metadata log (Kafka 3.9 `KRaftConfigs` /
/// `MetadataLogConfig` names and defaults, facts §1.4, §4.4, §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataLogConfig {
    /// `metadata.log.max.record.bytes.between.snapshots` (20 MiB): the state machine above
    /// snapshots once it applied this many record bytes since its last snapshot. The driver
    /// does not act on it; callers of [`RaftHandle::create_snapshot`] do.
    pub max_record_bytes_between_snapshots: u64,
    /// `metadata.log.max.snapshot.interval.ms` (1 h): the state machine above snapshots at
    /// least this often when records arrived. Also the caller's.
    pub max_snapshot_interval_ms: u64,
    /// `metadata.max.retention.bytes` (100 MiB): log plus snapshots above this → the oldest
    /// snapshot and the log below the next one are deleted. Below 1: no size limit.
    pub max_retention_bytes: i64,
    /// `metadata.max.retention.ms` (7 days): snapshots whose `LastContainedLogTimestamp` is
    /// older are deleted (with the log below the next one). Below 1: no time limit.
    pub max_retention_ms: i64,
    /// How often the driver checks retention (Kafka's `log.retention.check.interval.ms`,
    /// 5 min). It also checks after every snapshot it registers.
    pub retention_check_interval_ms: u64,
}

impl Default for MetadataLogConfig {
    fn default() -> Self {
        Self {
            max_record_bytes_between_snapshots: 20 * 1024 * 1024,
            max_snapshot_interval_ms: 60 * 60 * 1000,
            max_retention_bytes: 100 * 1024 * 1024,
            max_retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_check_interval_ms: 300_000,
        }
    }
}

/// What the driver needs to run one replica.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// `controller.quorum.*` and identity.
    pub raft: RaftConfig,
    /// Addresses of the voters (`controller.quorum.voters`).
    pub voters: Vec<VoterAddress>,
    /// `<metadata.log.dir>/__cluster_metadata-0`.
    pub partition_dir: PathBuf,
    /// Settings of the metadata log (Kafka: retention off, `metadata.log.segment.bytes`).
    pub log_config: LogConfig,
    /// Seed for the core's rng (election jitter); `None` draws one.
    pub rng_seed: Option<u64>,
    /// Snapshot triggers (for the caller) and snapshot/log retention (the driver's).
    pub metadata_log: MetadataLogConfig,
    /// The client side of the controller listener's security (TLS, SASL with
    /// `sasl.mechanism.controller.protocol`) for the Raft RPCs this replica sends.
    pub client_security: krust_net::security::ClientSecurity,
}

/// What the listener of a replica is told, in log order.
#[derive(Clone, Debug, PartialEq)]
pub enum RaftEvent {
    /// Batches now committed (below the high watermark), each exactly once per process life;
    /// after a restart delivery starts again at the log start.
    Commit(Vec<RecordBatch>),
    /// The known leader changed.
    LeaderChange {
        /// The leader, if known.
        leader: Option<NodeId>,
        /// The quorum epoch.
        epoch: LeaderEpoch,
    },
    /// Load this snapshot; `Commit`s continue at its end offset. Sent when the log was replaced
    /// by a snapshot (a follower caught up by FetchSnapshot), and first thing after a start
    /// whose log begins above 0 (the latest snapshot, as Kafka's listener does when its next
    /// offset is below the log start).
    SnapshotInstalled(OffsetAndEpoch),
}

/// A replica's state as the driver last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// The core's role.
    pub role: RoleKind,
    /// The `raft-metrics` gauges.
    pub metrics: RaftMetrics,
}

/// Why [`RaftHandle::append`] did not report a commit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DriverAppendError {
    /// The core refused the records (not the leader, batch too large, buffer full).
    #[error(transparent)]
    Rejected(#[from] AppendError),
    /// The records were appended but later truncated away by a new leader: they were not
    /// committed. Retrying may be safe (they are not in the log).
    #[error("appended at offset {offset} but truncated by a new leader before committing")]
    Truncated {
        /// The offset the records had.
        offset: LogOffset,
    },
    /// The driver stopped before the records committed (outcome unknown).
    #[error("the Raft driver stopped")]
    Stopped,
}

/// Why [`RaftHandle::create_snapshot`] did not create a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum CreateSnapshotError {
    /// The id may not become a snapshot (Kafka's `createSnapshot` checks): it ends beyond the
    /// high watermark, or the record before its end offset is not of its epoch.
    #[error(transparent)]
    InvalidId(#[from] SnapshotIdError),
    /// A frozen snapshot with this id already exists (Kafka then returns no writer).
    #[error("snapshot {snapshot_id} already exists")]
    Exists {
        /// The id.
        snapshot_id: OffsetAndEpoch,
    },
    /// Writing, fsyncing or renaming the file failed (the partial file is removed).
    #[error("writing snapshot {snapshot_id}")]
    Write {
        /// The id.
        snapshot_id: OffsetAndEpoch,
        /// What failed.
        #[source]
        source: StorageError,
    },
    /// The driver stopped before the snapshot was registered.
    #[error("the Raft driver stopped")]
    Stopped,
}

/// How the driver task ended.
#[derive(Debug)]
pub enum DriverExit {
    /// [`RaftHandle::shutdown`] (after resigning, if leader).
    Shutdown,
    /// Storage failed or the core hit a fatal condition; the process must stop.
    Failed(String),
}

/// Why the driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriverStartError {
    /// The partition directory or `quorum-state` could not be read.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The core refused the recovered state.
    #[error("starting the Raft core")]
    Init(#[from] InitError),
}

enum Command {
    Request {
        from: NodeId,
        request: RaftRequest,
        reply: oneshot::Sender<RaftResponse>,
    },
    Append {
        /// `None`: the current epoch.
        epoch: Option<LeaderEpoch>,
        records: Vec<Bytes>,
        /// Reply as soon as the records are in the log (offsets assigned), not at commit.
        appended_only: bool,
        /// Write the records' batch now instead of after `append.linger.ms`.
        flush: bool,
        reply: oneshot::Sender<Result<LogOffset, DriverAppendError>>,
    },
    Resign {
        epoch: LeaderEpoch,
    },
    /// Check that a snapshot id may be created (before the caller writes the file).
    CheckSnapshot {
        snapshot_id: OffsetAndEpoch,
        reply: oneshot::Sender<Result<(), CreateSnapshotError>>,
    },
    /// A snapshot file was frozen: register it with the core and the store, then clean.
    SnapshotFrozen {
        snapshot_id: OffsetAndEpoch,
        reply: oneshot::Sender<Result<(), CreateSnapshotError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

struct PeerResponse {
    from: NodeId,
    id: RequestId,
    result: Result<RaftResponse, ClientError>,
}

/// A cheap, cloneable handle to a running driver.
#[derive(Clone, Debug)]
pub struct RaftHandle {
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<RaftStatus>,
    measured: Arc<metrics::RaftDriverMetrics>,
    node_id: NodeId,
    partition_dir: PathBuf,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Request { from, .. } => write!(f, "Request(from {from})"),
            Command::Append { records, .. } => write!(f, "Append({} records)", records.len()),
            Command::Resign { epoch } => write!(f, "Resign({epoch})"),
            Command::CheckSnapshot { snapshot_id, .. } => write!(f, "CheckSnapshot({snapshot_id})"),
            Command::SnapshotFrozen { snapshot_id, .. } => {
                write!(f, "SnapshotFrozen({snapshot_id})")
            }
            Command::Shutdown { .. } => f.write_str("Shutdown"),
        }
    }
}

impl RaftHandle {
    /// This replica's id.
    #[must_use]
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Kafka's `raft-metrics` group of this replica (gauges and measured stats), for a
    /// [`krust_metrics::Registry`].
    #[must_use]
    pub fn metrics_collector(&self) -> metrics::RaftMetricsCollector {
        metrics::RaftMetricsCollector::new(self.status.clone(), self.measured.clone())
    }

    /// Hands a request from the controller listener to the core and waits for its answer
    /// (a Fetch may wait up to its `MaxWaitMs`). `from` is the replica the request names
    /// (candidate, leader or fetcher), `-1` if none.
    ///
    /// # Errors
    /// `None` when the driver has stopped.
    pub async fn handle_request(&self, from: NodeId, request: RaftRequest) -> Option<RaftResponse> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Request {
                from,
                request,
                reply,
            })
            .await
            .ok()?;
        answer.await.ok()
    }

    /// Appends `records` (one value each) as the leader of the current epoch and waits until
    /// they commit. Returns the offset of the last record.
    ///
    /// # Errors
    /// [`DriverAppendError`]; `Rejected(NotLeader)` on a follower.
    pub async fn append(&self, records: Vec<Bytes>) -> Result<LogOffset, DriverAppendError> {
        self.send_append(None, records, false, false).await
    }

    /// [`RaftHandle::append`] only if this replica leads `epoch` (Kafka's
    /// `prepareAppend(epoch, records)`): a controller that has seen leadership of `epoch`
    /// never writes into a later term it has not caught up with.
    ///
    /// # Errors
    /// As [`RaftHandle::append`]; `Rejected(NotLeader | FutureEpoch)` for another epoch.
    pub async fn append_in_epoch(
        &self,
        epoch: LeaderEpoch,
        records: Vec<Bytes>,
    ) -> Result<LogOffset, DriverAppendError> {
        self.send_append(Some(epoch), records, false, false).await
    }

    /// [`RaftHandle::append_in_epoch`] that returns once the records are in the leader's log
    /// (the offset of the last one assigned), without waiting for the commit: a writer that
    /// learns of commits from [`RaftEvent::Commit`] (the quorum controller) keeps appending
    /// while earlier batches commit, as Kafka's controller does.
    ///
    /// # Errors
    /// As [`RaftHandle::append_in_epoch`].
    pub async fn append_in_epoch_no_wait(
        &self,
        epoch: LeaderEpoch,
        records: Vec<Bytes>,
    ) -> Result<LogOffset, DriverAppendError> {
        self.send_append(Some(epoch), records, true, false).await
    }

    /// [`RaftHandle::append_in_epoch_no_wait`] whose batch is written at once instead of
    /// lingering `controller.quorum.append.linger.ms` for company: for a writer that waits for
    /// each batch to commit before it sends the next (the ZooKeeper migration's copy), so that
    /// nothing would join it anyway.
    ///
    /// # Errors
    /// As [`RaftHandle::append_in_epoch`].
    pub async fn append_in_epoch_no_wait_now(
        &self,
        epoch: LeaderEpoch,
        records: Vec<Bytes>,
    ) -> Result<LogOffset, DriverAppendError> {
        self.send_append(Some(epoch), records, true, true).await
    }

    async fn send_append(
        &self,
        epoch: Option<LeaderEpoch>,
        records: Vec<Bytes>,
        appended_only: bool,
        flush: bool,
    ) -> Result<LogOffset, DriverAppendError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Append {
                epoch,
                records,
                appended_only,
                flush,
                reply,
            })
            .await
            .map_err(|_| DriverAppendError::Stopped)?;
        answer.await.map_err(|_| DriverAppendError::Stopped)?
    }

    /// Kafka's `resign(epoch)`: the leader of `epoch` steps down (EndQuorumEpoch) and the
    /// quorum elects again; ignored for any other epoch. Returns once queued.
    pub async fn resign(&self, epoch: LeaderEpoch) {
        let _ = self.commands.send(Command::Resign { epoch }).await;
    }

    /// Kafka's `RaftClient.createSnapshot` + `SnapshotWriter.freeze`: writes the state
    /// machine's `records` (framed metadata records, one value each) as snapshot `snapshot_id`
    /// — end offset (exclusive) and epoch of the last record it covers — with the header's
    /// `LastContainedLogTimestamp`, and registers it: the leader then names it to fetchers
    /// below its log start, and retention may delete older snapshots and the log below them.
    ///
    /// The id is checked first (at or below the high watermark; the record before its end
    /// offset has its epoch). The file is written off the driver task as
    /// `<id>-<random>.checkpoint.part`, fsynced, renamed to `<id>.checkpoint` and the directory
    /// fsynced. Call it every `metadata.log.max.record.bytes.between.snapshots` /
    /// `metadata.log.max.snapshot.interval.ms` ([`MetadataLogConfig`]).
    ///
    /// # Errors
    /// [`CreateSnapshotError`]: the id is refused, exists already, the write failed, or the
    /// driver stopped.
    pub async fn create_snapshot<I>(
        &self,
        snapshot_id: OffsetAndEpoch,
        last_contained_log_timestamp_ms: i64,
        records: I,
    ) -> Result<(), CreateSnapshotError>
    where
        I: IntoIterator<Item = Bytes> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::CheckSnapshot { snapshot_id, reply })
            .await
            .map_err(|_| CreateSnapshotError::Stopped)?;
        answer.await.map_err(|_| CreateSnapshotError::Stopped)??;
        let dir = self.partition_dir.clone();
        let append_timestamp_ms = unix_ms();
        tokio::task::spawn_blocking(move || {
            write_snapshot_file(
                &dir,
                snapshot_id,
                last_contained_log_timestamp_ms,
                append_timestamp_ms,
                records,
            )
        })
        .await
        .map_err(|_| CreateSnapshotError::Stopped)?
        .map_err(|source| CreateSnapshotError::Write {
            snapshot_id,
            source,
        })?;
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::SnapshotFrozen { snapshot_id, reply })
            .await
            .map_err(|_| CreateSnapshotError::Stopped)?;
        answer.await.map_err(|_| CreateSnapshotError::Stopped)?
    }

    /// The core's answer to DescribeQuorum (only the leader answers without error).
    pub async fn describe_quorum(&self) -> Option<RaftResponse> {
        let request = DescribeQuorumRequest::default().with_topics(vec![
            describe_quorum_request::TopicData::default()
                .with_topic_name(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str(METADATA_TOPIC_NAME),
                ))
                .with_partitions(vec![
                    describe_quorum_request::PartitionData::default()
                        .with_partition_index(METADATA_PARTITION),
                ]),
        ]);
        self.handle_request(NodeId(-1), RaftRequest::DescribeQuorum(request))
            .await
    }

    /// The latest status.
    #[must_use]
    pub fn status(&self) -> RaftStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    #[must_use]
    pub fn watch_status(&self) -> watch::Receiver<RaftStatus> {
        self.status.clone()
    }

    /// Graceful shutdown: a leader resigns (EndQuorumEpoch to the voters) and, as Kafka's
    /// `maybeCompleteShutdown`, keeps serving until another leader is known — so it can still
    /// vote for its successor, which a two-voter quorum needs — for at most
    /// [`SHUTDOWN_RESIGN_TIMEOUT`]. Then the driver flushes and closes the log and stops.
    /// Returns when it has.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Shutdown { done }).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// A running driver: its handle and task.
#[derive(Debug)]
pub struct RaftDriver {
    handle: RaftHandle,
    task: JoinHandle<DriverExit>,
}

impl RaftDriver {
    /// Opens the metadata partition (crash recovery of the log, `quorum-state`, snapshots),
    /// builds the core and spawns the driver task. Committed batches and leader changes go to
    /// `events` (bounded: a slow listener slows the replica rather than losing events).
    ///
    /// # Errors
    /// [`DriverStartError`].
    pub fn start(
        config: DriverConfig,
        events: Option<mpsc::Sender<RaftEvent>>,
    ) -> Result<Self, DriverStartError> {
        let store = MetadataStore::open(&config.partition_dir, config.log_config.clone())?;
        let persisted = store.read_quorum_state()?;
        let recovered = store.recover()?;
        info!(
            node = config.raft.node_id.0,
            dir = %config.partition_dir.display(),
            log_start = recovered.log_start_offset.0,
            batches = recovered.batches.len(),
            snapshot = ?recovered.latest_snapshot,
            epoch = persisted.as_ref().map(|p| p.leader_epoch.0),
            "recovered metadata log"
        );
        // Kafka hands a listener starting below the log start the latest snapshot first.
        let startup_snapshot = recovered
            .latest_snapshot
            .filter(|_| recovered.log_start_offset.0 > 0);
        let rng = match config.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        let now = std::time::Instant::now();
        let mut core = RaftCore::new(config.raft.clone(), persisted, recovered, rng, now)?;
        core.set_wall_clock(now, unix_ms());
        let node_id = config.raft.node_id;
        let status = RaftStatus {
            role: core.role(),
            metrics: core.metrics(),
        };
        let (status_tx, status_rx) = watch::channel(status);
        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        let (responses_tx, responses_rx) = mpsc::channel(RESPONSE_QUEUE);
        let client_config = ClientConfig {
            client_id: format!("raft-client-{}", node_id.0),
            request_timeout: Duration::from_millis(config.raft.request_timeout_ms),
            connect_timeout: Duration::from_millis(config.raft.request_timeout_ms),
            reconnect_backoff: Duration::from_millis(config.raft.retry_backoff_ms.max(1)),
            negotiate_api_versions: true,
            security: config.client_security.clone(),
            ..ClientConfig::default()
        };
        let pool = NetworkClient::new(client_config);
        for voter in &config.voters {
            if voter.id != node_id {
                pool.set_node(voter.id.0, format!("{}:{}", voter.host, voter.port));
            }
        }
        let measured = Arc::new(metrics::RaftDriverMetrics::new(
            krust_metrics::SampleConfig::default(),
        ));
        let driver = Driver {
            core,
            measured: measured.clone(),
            store: Some(store),
            pool: Arc::new(pool),
            events,
            status: status_tx,
            responses_tx,
            inbound: HashMap::new(),
            next_inbound: 0,
            appends: BTreeMap::new(),
            shutdown: None,
            resigning: false,
            end_quorum_pending: HashSet::new(),
            committed_batches: 0,
            retention: config.metadata_log,
            snapshot_reads: HashMap::new(),
            startup_snapshot,
        };
        let span = tracing::info_span!("raft", node_id = node_id.0);
        let task = tokio::spawn(tracing::Instrument::instrument(
            driver.run(commands_rx, responses_rx),
            span,
        ));
        Ok(Self {
            handle: RaftHandle {
                commands: commands_tx,
                status: status_rx,
                measured,
                node_id,
                partition_dir: config.partition_dir.clone(),
            },
            task,
        })
    }

    /// A handle for callers.
    #[must_use]
    pub fn handle(&self) -> RaftHandle {
        self.handle.clone()
    }

    /// Waits for the driver task to end.
    pub async fn join(self) -> DriverExit {
        match self.task.await {
            Ok(exit) => exit,
            Err(e) => DriverExit::Failed(format!("driver task ended abnormally: {e}")),
        }
    }
}

struct Driver {
    core: RaftCore,
    /// The measured `raft-metrics` (see [`metrics`]).
    measured: Arc<metrics::RaftDriverMetrics>,
    /// `None` once closed at shutdown.
    store: Option<MetadataStore>,
    pool: Arc<NetworkClient>,
    events: Option<mpsc::Sender<RaftEvent>>,
    status: watch::Sender<RaftStatus>,
    responses_tx: mpsc::Sender<PeerResponse>,
    /// Inbound requests waiting for the core's answer, by the id given to the core.
    inbound: HashMap<RequestId, oneshot::Sender<RaftResponse>>,
    next_inbound: u64,
    /// Appends waiting for the HW, by the offset of their last record.
    appends: BTreeMap<LogOffset, Vec<oneshot::Sender<Result<LogOffset, DriverAppendError>>>>,
    /// Set while a graceful shutdown waits for EndQuorumEpoch answers.
    shutdown: Option<(TokioInstant, Vec<oneshot::Sender<()>>)>,
    /// Whether this replica led when the shutdown began (then it waits for a successor).
    resigning: bool,
    /// EndQuorumEpoch requests sent and not yet answered or failed.
    end_quorum_pending: HashSet<RequestId>,
    committed_batches: u64,
    /// Retention limits for snapshots and the log below them.
    retention: MetadataLogConfig,
    /// When each snapshot was last read for a FetchSnapshot: retention keeps a snapshot a
    /// follower is still downloading (see [`Driver::maybe_clean`]).
    snapshot_reads: HashMap<OffsetAndEpoch, TokioInstant>,
    /// The snapshot announced at start-up: committed batches below its end are not delivered
    /// again (the listener has them from the snapshot).
    startup_snapshot: Option<OffsetAndEpoch>,
}

/// The core and the driver both use `std::time::Instant`; tokio's converts losslessly.
fn std_now() -> std::time::Instant {
    TokioInstant::now().into_std()
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut responses: mpsc::Receiver<PeerResponse>,
    ) -> DriverExit {
        info!(role = ?self.core.role(), epoch = self.core.epoch().0, "Raft driver started");
        if let Some(snapshot) = self.startup_snapshot {
            info!(snapshot = %snapshot, "handing the latest snapshot to the listener");
            self.emit(RaftEvent::SnapshotInstalled(snapshot)).await;
        }
        if let Err(exit) = self.drain().await {
            return self.fail(exit);
        }
        let check_every = Duration::from_millis(self.retention.retention_check_interval_ms.max(1));
        let mut retention_check =
            tokio::time::interval_at(TokioInstant::now() + check_every, check_every);
        retention_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let due = self.core.poll_timeout().map(TokioInstant::from_std);
            let shutdown_deadline = self.shutdown.as_ref().map(|(d, _)| *d);
            let wake = match (due, shutdown_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            self.measured.record_poll_start(std_now());
            tokio::select! {
                command = commands.recv() => match command {
                    Some(Command::SnapshotFrozen { snapshot_id, reply }) => {
                        // Retention runs before the caller hears back, so it sees its effect.
                        let result = self.on_snapshot_frozen(snapshot_id);
                        if result.is_ok() && let Err(exit) = self.maybe_clean().await {
                            return self.fail(exit);
                        }
                        let _ = reply.send(result);
                    }
                    Some(command) => self.on_command(command),
                    // Every handle is gone: nobody can ask for anything again.
                    None => self.begin_shutdown(None),
                },
                Some(response) = responses.recv() => self.on_response(response),
                () = sleep => {
                    let now = std_now();
                    self.measured.record_poll_end(now);
                    self.core.set_wall_clock(now, unix_ms());
                    self.core.handle_timeout(now);
                }
                _ = retention_check.tick() => {
                    if let Err(exit) = self.remove_deleted_snapshots() {
                        return self.fail(exit);
                    }
                    if let Err(exit) = self.maybe_clean().await {
                        return self.fail(exit);
                    }
                }
            }
            if let Err(exit) = self.drain().await {
                return self.fail(exit);
            }
            self.publish_status();
            if self.shutdown_complete() {
                return self.finish_shutdown();
            }
        }
    }

    fn on_command(&mut self, command: Command) {
        let now = std_now();
        self.measured.record_poll_end(now);
        self.core.set_wall_clock(now, unix_ms());
        match command {
            Command::Request {
                from,
                request,
                reply,
            } => {
                self.next_inbound = self.next_inbound.wrapping_add(1);
                let id = RequestId(self.next_inbound);
                self.inbound.insert(id, reply);
                self.core.handle_request(now, from, id, request);
            }
            Command::Append {
                epoch,
                records,
                appended_only,
                flush,
                reply,
            } => {
                if self.shutdown.is_some() {
                    let _ = reply.send(Err(DriverAppendError::Stopped));
                    return;
                }
                let epoch = epoch.unwrap_or_else(|| self.core.epoch());
                let appended = self.core.append(now, epoch, records);
                if flush && appended.is_ok() {
                    self.core.flush_appends(now);
                }
                match appended {
                    Ok(last) if appended_only => {
                        let _ = reply.send(Ok(last));
                    }
                    Ok(last) => self.appends.entry(last).or_default().push(reply),
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            Command::Resign { epoch } => self.core.resign(now, epoch),
            Command::CheckSnapshot { snapshot_id, reply } => {
                let _ = reply.send(self.check_snapshot(snapshot_id));
            }
            Command::SnapshotFrozen { snapshot_id, reply } => {
                let _ = reply.send(self.on_snapshot_frozen(snapshot_id));
            }
            Command::Shutdown { done } => self.begin_shutdown(Some(done)),
        }
    }

    fn check_snapshot(&self, snapshot_id: OffsetAndEpoch) -> Result<(), CreateSnapshotError> {
        self.core.check_snapshot_id(snapshot_id)?;
        let exists = self
            .store
            .as_ref()
            .is_some_and(|s| s.snapshots().contains_key(&snapshot_id));
        if exists {
            return Err(CreateSnapshotError::Exists { snapshot_id });
        }
        Ok(())
    }

    /// Registers a snapshot the caller froze. If the id became invalid meanwhile (a snapshot
    /// from the leader replaced the log) the file is deleted again.
    fn on_snapshot_frozen(
        &mut self,
        snapshot_id: OffsetAndEpoch,
    ) -> Result<(), CreateSnapshotError> {
        let Some(store) = self.store.as_mut() else {
            return Err(CreateSnapshotError::Stopped);
        };
        let write = |source| CreateSnapshotError::Write {
            snapshot_id,
            source,
        };
        store.add_snapshot(snapshot_id).map_err(write)?;
        if let Err(e) = self.core.snapshot_created(snapshot_id) {
            store.delete_snapshots(&[snapshot_id]).map_err(write)?;
            return Err(e.into());
        }
        // A snapshot below the latest (the log start moved past it meanwhile) is not needed.
        if store.latest_snapshot() != Some(snapshot_id)
            && snapshot_id.offset < self.core.log_start_offset()
        {
            store.delete_snapshots(&[snapshot_id]).map_err(write)?;
        }
        info!(snapshot = %snapshot_id, "created snapshot");
        Ok(())
    }

    /// Kafka's `KafkaMetadataLog.maybeClean` (facts §4.5): while the log plus all snapshots
    /// exceed `metadata.max.retention.bytes`, or the oldest snapshot's
    /// `LastContainedLogTimestamp` is older than `metadata.max.retention.ms`, delete the oldest
    /// snapshot and move the log start up to the next one (deleting whole segments below it).
    /// The latest snapshot is never deleted, and the log start always equals the end offset
    /// of a snapshot on disk. A snapshot read by a FetchSnapshot within the last
    /// `controller.quorum.fetch.timeout.ms` stops the loop until the next check, so a
    /// download in progress is not cut off (a download that still finds its snapshot gone
    /// gets SNAPSHOT_NOT_FOUND and starts again from the leader's current snapshot).
    async fn maybe_clean(&mut self) -> Result<(), String> {
        let retention = self.retention;
        let in_use_for = Duration::from_millis(self.core.config().fetch_timeout_ms);
        let now = TokioInstant::now();
        self.snapshot_reads
            .retain(|_, at| now.saturating_duration_since(*at) < in_use_for);
        let now_ms = unix_ms();
        loop {
            let Some(store) = self.store.as_mut() else {
                return Ok(());
            };
            let mut ids = store.snapshots().iter();
            let (Some((&oldest, meta)), Some((&next, _))) = (ids.next(), ids.next()) else {
                return Ok(());
            };
            let over_bytes = retention.max_retention_bytes >= 1
                && store.retained_bytes() > retention.max_retention_bytes.unsigned_abs();
            let expired = retention.max_retention_ms >= 1
                && meta.last_contained_log_timestamp_ms
                    <= now_ms.saturating_sub(retention.max_retention_ms);
            if !over_bytes && !expired {
                return Ok(());
            }
            if self.snapshot_reads.contains_key(&oldest) {
                debug!(snapshot = %oldest, "retention waits for a snapshot download");
                return Ok(());
            }
            match self.core.advance_log_start(next) {
                Ok(_) => {}
                Err(e) => {
                    // Not yet committed here (a follower's HW lags) or not on a batch boundary
                    // of this log: try again at the next check.
                    debug!(snapshot = %next, error = %e, "log start cannot move to the next snapshot yet");
                    return Ok(());
                }
            }
            info!(
                snapshot = %oldest,
                reason = if over_bytes { "size" } else { "time" },
                log_start_offset = next.offset.0,
                "retention deletes a snapshot and the log below the next one"
            );
            // Runs the core's DeleteLogPrefix before the snapshot goes, so the log start never
            // lacks its snapshot.
            self.drain().await?;
            let Some(store) = self.store.as_mut() else {
                return Ok(());
            };
            let start = self.core.log_start_offset();
            // The oldest goes even when the log already started at the next one (two ids with
            // one end offset), so the loop always makes progress.
            let below: Vec<OffsetAndEpoch> = store
                .snapshots()
                .keys()
                .filter(|s| s.offset < start || **s == oldest)
                .copied()
                .collect();
            store.delete_snapshots(&below).map_err(error_chain)?;
            assert!(
                store.snapshots().keys().any(|s| s.offset == start),
                "log start {start} without a snapshot ending there"
            );
        }
    }

    fn remove_deleted_snapshots(&mut self) -> Result<(), String> {
        match self.store.as_mut() {
            Some(store) => store.remove_deleted().map_err(error_chain),
            None => Ok(()),
        }
    }

    fn begin_shutdown(&mut self, done: Option<oneshot::Sender<()>>) {
        if let Some((_, waiters)) = &mut self.shutdown {
            waiters.extend(done);
            return;
        }
        info!(role = ?self.core.role(), epoch = self.core.epoch().0, "shutting down the Raft replica");
        let now = std_now();
        self.resigning = self.core.role() == RoleKind::Leader;
        self.core.begin_shutdown(now);
        let deadline = TokioInstant::now() + SHUTDOWN_RESIGN_TIMEOUT;
        self.shutdown = Some((deadline, done.into_iter().collect()));
    }

    /// Kafka 3.9's rule (`maybeCompleteShutdown`): done once another node leads, when this is
    /// the only voter, or when the wait is over. One deviation: a replica that was not leading
    /// stops at once (after any EndQuorumEpoch is answered) instead of waiting for a leader to
    /// appear, so stopping a leaderless quorum does not take the full timeout per node.
    fn shutdown_complete(&self) -> bool {
        let Some((deadline, _)) = &self.shutdown else {
            return false;
        };
        let me = self.core.config().node_id;
        TokioInstant::now() >= *deadline
            || self.core.config().voters.len() <= 1
            || self.core.leader().is_some_and(|leader| leader != me)
            || (!self.resigning && self.end_quorum_pending.is_empty())
    }

    fn finish_shutdown(mut self) -> DriverExit {
        for (_, waiters) in std::mem::take(&mut self.appends) {
            for w in waiters {
                let _ = w.send(Err(DriverAppendError::Stopped));
            }
        }
        if let Some(store) = self.store.take()
            && let Err(e) = store.close()
        {
            error!(error = %e, "closing the metadata log");
        }
        info!(
            committed_batches = self.committed_batches,
            "Raft replica stopped"
        );
        if let Some((_, waiters)) = self.shutdown.take() {
            for w in waiters {
                let _ = w.send(());
            }
        }
        DriverExit::Shutdown
    }

    fn fail(mut self, reason: String) -> DriverExit {
        error!(reason = %reason, "Raft replica stopping after a fatal error");
        for (_, waiters) in std::mem::take(&mut self.appends) {
            for w in waiters {
                let _ = w.send(Err(DriverAppendError::Stopped));
            }
        }
        DriverExit::Failed(reason)
    }

    fn on_response(&mut self, response: PeerResponse) {
        let now = std_now();
        self.measured.record_poll_end(now);
        self.core.set_wall_clock(now, unix_ms());
        let PeerResponse { from, id, result } = response;
        self.end_quorum_pending.remove(&id);
        match result {
            Ok(response) => self.core.handle_response(now, from, id, response),
            Err(e) => {
                debug!(to = from.0, id = id.0, error = %e, "request failed");
                if matches!(
                    e.response_error(),
                    kafka_protocol::error::ResponseError::NetworkException
                ) {
                    // Refused, reset, in reconnect backoff: retry after retry.backoff.ms, as
                    // Kafka does (the client's reconnect backoff spaces the attempts).
                    self.core.handle_send_failed(now, id);
                }
                // Anything else (timeout, protocol error): the core's own deadline handles it.
            }
        }
    }

    /// Executes every queued action in order. A `Flush` is reported to the core at once
    /// (the fsync is synchronous), which may queue further actions; the loop runs them too.
    async fn drain(&mut self) -> Result<(), String> {
        while let Some(action) = self.core.poll_action() {
            self.execute(action).await?;
        }
        Ok(())
    }

    async fn execute(&mut self, action: Action) -> Result<(), String> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        match action {
            Action::PersistQuorumState(state) => {
                debug!(epoch = state.leader_epoch.0, leader = ?state.leader_id, voted = ?state.voted_id, "persisting quorum-state");
                store.write_quorum_state(&state).map_err(error_chain)?;
            }
            Action::Append { batches } => {
                let as_leader = self.core.role() == RoleKind::Leader;
                self.measured.record_append(as_leader, &batches, std_now());
                let now_ms = unix_ms();
                store.append(batches, now_ms).map_err(error_chain)?;
            }
            Action::Truncate { end_offset } => {
                warn!(end_offset = end_offset.0, "truncating the metadata log");
                store.truncate(end_offset).map_err(error_chain)?;
                self.measured.record_truncate(end_offset);
                // Appends at or beyond the cut are gone: they did not commit.
                let cut: Vec<LogOffset> =
                    self.appends.range(end_offset..).map(|(o, _)| *o).collect();
                for offset in cut {
                    for w in self.appends.remove(&offset).unwrap_or_default() {
                        let _ = w.send(Err(DriverAppendError::Truncated { offset }));
                    }
                }
            }
            Action::Flush { end_offset } => {
                store.flush().map_err(error_chain)?;
                self.core.handle_flushed(std_now(), end_offset);
            }
            Action::SendRequest { to, id, request } => self.send_request(to, id, request),
            Action::SendResponse { id, response, .. } => {
                if let Some(reply) = self.inbound.remove(&id) {
                    let _ = reply.send(response);
                }
            }
            Action::HighWatermarkAdvanced(high_watermark) => {
                store.set_high_watermark(high_watermark);
                self.measured
                    .record_high_watermark(high_watermark, std_now());
                let done: Vec<LogOffset> = self
                    .appends
                    .range(..high_watermark)
                    .map(|(o, _)| *o)
                    .collect();
                for offset in done {
                    for w in self.appends.remove(&offset).unwrap_or_default() {
                        let _ = w.send(Ok(offset));
                    }
                }
            }
            Action::Commit { mut batches } => {
                if let Some(snapshot) = self.startup_snapshot {
                    batches.retain(|b| b.base_offset() >= snapshot.offset.0);
                    if batches.is_empty() {
                        return Ok(());
                    }
                }
                self.committed_batches += batches.len() as u64;
                for batch in &batches {
                    trace!(
                        base_offset = batch.base_offset(),
                        last_offset = batch.last_offset(),
                        epoch = batch.partition_leader_epoch(),
                        control = batch.is_control(),
                        records = batch.record_count(),
                        "committed batch"
                    );
                }
                self.emit(RaftEvent::Commit(batches)).await;
            }
            Action::LeaderChange { leader, epoch } => {
                info!(leader = ?leader.map(|l| l.0), epoch = epoch.0, "leader changed");
                self.emit(RaftEvent::LeaderChange { leader, epoch }).await;
            }
            Action::ReadSnapshot {
                to,
                id,
                snapshot_id,
                position,
                max_bytes,
            } => {
                self.snapshot_reads.insert(snapshot_id, TokioInstant::now());
                let read = store
                    .read_snapshot(snapshot_id, position, max_bytes)
                    .map_err(error_chain)?;
                self.core
                    .handle_snapshot_read(std_now(), to, id, snapshot_id, position, read);
            }
            Action::WriteSnapshotChunk {
                snapshot_id,
                position,
                bytes,
            } => {
                store
                    .write_snapshot_chunk(snapshot_id, position, &bytes)
                    .map_err(error_chain)?;
            }
            Action::InstallSnapshot { snapshot_id } => {
                info!(snapshot = %snapshot_id, "installing a snapshot from the leader");
                self.startup_snapshot = None;
                store.install_snapshot(snapshot_id).map_err(error_chain)?;
                self.emit(RaftEvent::SnapshotInstalled(snapshot_id)).await;
            }
            Action::DeleteLogPrefix { log_start_offset } => {
                info!(
                    log_start_offset = log_start_offset.0,
                    "deleting the log below a snapshot"
                );
                store.delete_prefix(log_start_offset).map_err(error_chain)?;
            }
            Action::AbandonSnapshot { snapshot_id } => {
                debug!(snapshot = %snapshot_id, "abandoning a snapshot download");
                store.abandon_partial().map_err(error_chain)?;
            }
            Action::Fatal(fatal) => return Err(fatal_message(&fatal)),
        }
        Ok(())
    }

    async fn emit(&mut self, event: RaftEvent) {
        if let Some(events) = &self.events
            && events.send(event).await.is_err()
        {
            // The listener went away (process stopping): keep replicating without it.
            self.events = None;
        }
    }

    fn send_request(&mut self, to: NodeId, id: RequestId, request: RaftRequest) {
        let Some(client) = self.pool.client(to.0) else {
            warn!(to = to.0, "no address for node; request dropped");
            return;
        };
        if matches!(request, RaftRequest::EndQuorumEpoch(_)) {
            self.end_quorum_pending.insert(id);
        }
        let responses = self.responses_tx.clone();
        let timeout = Duration::from_millis(self.core.config().request_timeout_ms);
        tokio::spawn(async move {
            let result = send_one(&client, request, timeout).await;
            let _ = responses
                .send(PeerResponse {
                    from: to,
                    id,
                    result,
                })
                .await;
        });
    }

    fn publish_status(&mut self) {
        self.measured
            .observe_role(self.core.role(), self.core.epoch(), std_now());
        let status = RaftStatus {
            role: self.core.role(),
            metrics: self.core.metrics(),
        };
        self.status.send_if_modified(|old| {
            if *old == status {
                false
            } else {
                *old = status;
                true
            }
        });
    }
}

/// Sends one request on `client`'s connection at the newest version both sides speak.
async fn send_one(
    client: &krust_net::Client,
    mut request: RaftRequest,
    timeout: Duration,
) -> Result<RaftResponse, ClientError> {
    let deadline = TokioInstant::now() + timeout;
    let connection = client.connection(deadline).await?;
    let (api_key, ours) = wire_versions::request_api(&request);
    let version = connection.usable_version(api_key, ours)?;
    wire_versions::fit_request(&mut request, version);
    let kind = match request {
        RaftRequest::Vote(r) => RequestKind::Vote(r),
        RaftRequest::BeginQuorumEpoch(r) => RequestKind::BeginQuorumEpoch(r),
        RaftRequest::EndQuorumEpoch(r) => RequestKind::EndQuorumEpoch(r),
        RaftRequest::Fetch(r) => RequestKind::Fetch(r),
        RaftRequest::DescribeQuorum(r) => RequestKind::DescribeQuorum(r),
        RaftRequest::FetchSnapshot(r) => RequestKind::FetchSnapshot(r),
    };
    let left = deadline.saturating_duration_since(TokioInstant::now());
    let response = connection.send_with_timeout(kind, version, left).await?;
    match response {
        ResponseKind::Vote(r) => Ok(RaftResponse::Vote(r)),
        ResponseKind::BeginQuorumEpoch(r) => Ok(RaftResponse::BeginQuorumEpoch(r)),
        ResponseKind::EndQuorumEpoch(r) => Ok(RaftResponse::EndQuorumEpoch(r)),
        ResponseKind::Fetch(r) => Ok(RaftResponse::Fetch(r)),
        ResponseKind::DescribeQuorum(r) => Ok(RaftResponse::DescribeQuorum(r)),
        ResponseKind::FetchSnapshot(r) => Ok(RaftResponse::FetchSnapshot(r)),
        _ => Err(ClientError::UnexpectedResponse {
            addr: connection.addr().to_owned(),
        }),
    }
}

fn error_chain(e: impl std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn fatal_message(fatal: &FatalError) -> String {
    format!("fatal Raft condition: {fatal}")
}
