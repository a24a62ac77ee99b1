//! The broker runtime on tokio: the pieces below wired into one [`Broker`] that the `krust`
//! binary starts for `process.roles` containing `broker`.
//!
//! Flow: the binary runs the Raft observer and a `MetadataBatchLoader`; every
//! [`Publication`] goes to [`Broker::publish`] (the metadata publisher: partition logs
//! created/deleted, leader/follower transitions, replication and group coordinator notified).
//! Clients talk to [`apis::ClientApiHandler`] (a `krust_net::Handler`). Everything that needs
//! the active controller goes through [`controller_channel::ControllerChannel`].
//!
//! # Layout
//! - [`controller_channel`]: the trait the binary implements to reach the active controller.
//! - [`replica_manager`]: [`replica_manager::ReplicaManager`] — hosted partitions, shared by
//!   the API handlers, replication and the group coordinator; appends and wake-ups.
//! - [`publisher`]: applies metadata publications to the replica manager.
//! - [`purgatory`]: delayed produce (acks=all) and delayed fetch (long poll).
//! - [`apis`]: the client listener's request handler, one module per API family.
//! - [`lifecycle`]: broker registration, heartbeats, controlled shutdown.
//! - [`forwarding`]: admin requests forwarded to the controller in an `Envelope`.
//! - [`replication`]: follower fetchers and ISR shrink/expand via AlterPartition.
//! - [`groups`]: the group coordinator runtime over the sans-IO shards of [`crate::group`].

pub mod apis;
pub mod cleaner;
pub mod controller_channel;
pub mod forwarding;
pub mod groups;
pub mod lifecycle;
pub mod publisher;
pub mod purgatory;
pub mod replica_manager;
pub mod replication;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use krust_log::checkpoint::{
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE, TopicPartition as LogTopicPartition,
    read_offset_checkpoint, write_offset_checkpoint,
};
use krust_metadata::image::Publication;
use thiserror::Error;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use self::controller_channel::ControllerChannel;
use self::forwarding::Forwarder;
use self::groups::GroupCoordinator;
use self::publisher::{Publisher, StartupCheckpoints};
use self::replica_manager::{ReplicaManager, lock, now_ms};
use self::replication::{FollowedPartition, ReplicationManager};

/// A listener as advertised to clients and other brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Listener name (`PLAINTEXT`, `BROKER`, …).
    pub name: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port (the bound port when `listeners` said 0).
    pub port: u16,
    /// Kafka's security protocol id (0 = PLAINTEXT).
    pub security_protocol: i16,
}

/// What a broker is told at start-up (from `server.properties` or `krust dev`).
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id`.
    pub node_id: i32,
    /// From `meta.properties`.
    pub cluster_id: String,
    /// `log.dirs` (formatted).
    pub log_dirs: Vec<PathBuf>,
    /// Every key of `server.properties` (Kafka's names), for defaults and DescribeConfigs.
    pub properties: BTreeMap<String, String>,
    /// Advertised listeners, client-facing first.
    pub advertised_listeners: Vec<Endpoint>,
    /// `inter.broker.listener.name`: the listener followers fetch from.
    pub inter_broker_listener_name: String,
    /// `broker.rack`.
    pub rack: Option<String>,
}

impl BrokerConfig {
    /// A `server.properties` value parsed, or `default` when absent or unparseable.
    #[must_use]
    pub fn prop<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.properties
            .get(key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    }
}

/// Why a broker cannot start.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// No `log.dirs`.
    #[error("no log directories configured (log.dirs)")]
    NoLogDirs,
    /// Another process holds a log dir's `.lock`.
    #[error("log directory {dir} is locked by another process")]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A log dir cannot be created, locked or read.
    #[error("log directory {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint file is malformed.
    #[error(transparent)]
    Checkpoint(#[from] krust_log::checkpoint::CheckpointError),
}

/// Kafka's lock file in each log dir.
pub const LOCK_FILE: &str = ".lock";

/// `replica.high.watermark.checkpoint.interval.ms` default.
pub const DEFAULT_HW_CHECKPOINT_INTERVAL_MS: u64 = 5_000;

/// One broker's runtime: hosted partitions, the publisher, the client API handler and the
/// parts other modules plug in (replication, groups, forwarding).
pub struct Broker {
    config: Arc<BrokerConfig>,
    channel: Arc<dyn ControllerChannel>,
    replicas: Arc<ReplicaManager>,
    publisher: Publisher,
    replication: OnceLock<Arc<ReplicationManager>>,
    groups: OnceLock<Arc<GroupCoordinator>>,
    forwarder: OnceLock<Arc<Forwarder>>,
    pub(crate) fetch_sessions: apis::fetch::FetchSessionCache,
    pub(crate) producer_ids: apis::producer_id::ProducerIdManager,
    client_stats: Arc<apis::stats::ClientApiStats>,
    /// Topics with an auto-creation in flight (Kafka's `AutoTopicCreationManager`
    /// `inflightTopics`): clients polling Metadata do not send the controller one each.
    pub(crate) auto_create_inflight: Mutex<std::collections::BTreeSet<String>>,
    background: Mutex<Option<JoinHandle<()>>>,
    /// Serialises publications (the binary may call from several tasks); `true` once shut
    /// down, after which publications are ignored (no log is reopened behind `shutdown`).
    publish_lock: Mutex<bool>,
    /// Held for the broker's lifetime: the OS lock on each log dir's `.lock`.
    _locks: Vec<File>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("node_id", &self.config.node_id)
            .finish_non_exhaustive()
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn lock_log_dir(dir: &Path) -> Result<File, BrokerError> {
    let io = |source| BrokerError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(BrokerError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

impl Broker {
    /// Locks the log dirs (all but `metadata.log.dir`, which the Raft driver locks) and reads
    /// their checkpoints. Partition directories are opened
    /// when a publication says they are hosted; strays are removed at the first one. In a
    /// tokio runtime, starts the periodic retention/checkpoint task.
    ///
    /// # Errors
    /// [`BrokerError`].
    pub fn open(
        config: BrokerConfig,
        channel: Arc<dyn ControllerChannel>,
    ) -> Result<Arc<Broker>, BrokerError> {
        if config.log_dirs.is_empty() {
            return Err(BrokerError::NoLogDirs);
        }
        let mut locks = Vec::new();
        let mut checkpoints = StartupCheckpoints::default();
        // The Raft driver holds the `.lock` of `metadata.log.dir` (by default the first log
        // dir), as Kafka's RaftManager does; locking it again would refuse ourselves.
        let metadata_dir = config
            .properties
            .get("metadata.log.dir")
            .map(PathBuf::from)
            .or_else(|| config.log_dirs.first().cloned());
        for dir in &config.log_dirs {
            if metadata_dir.as_ref().is_some_and(|m| same_dir(m, dir)) {
                std::fs::create_dir_all(dir).map_err(|source| BrokerError::Io {
                    dir: dir.clone(),
                    source,
                })?;
            } else {
                locks.push(lock_log_dir(dir)?);
            }
            checkpoints.recovery_points.extend(read_offset_checkpoint(
                &dir.join(RECOVERY_POINT_CHECKPOINT_FILE),
            )?);
            checkpoints.high_watermarks.extend(read_offset_checkpoint(
                &dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE),
            )?);
            checkpoints.log_start_offsets.extend(read_offset_checkpoint(
                &dir.join(LOG_START_OFFSET_CHECKPOINT_FILE),
            )?);
        }
        let config = Arc::new(config);
        let broker = Arc::new(Broker {
            replicas: Arc::new(ReplicaManager::new(config.node_id)),
            publisher: Publisher::new(Arc::clone(&config), checkpoints),
            fetch_sessions: apis::fetch::FetchSessionCache::new(config.prop(
                "max.incremental.fetch.session.cache.slots",
                apis::fetch::DEFAULT_SESSION_CACHE_SLOTS,
            )),
            producer_ids: apis::producer_id::ProducerIdManager::default(),
            config,
            channel,
            replication: OnceLock::new(),
            groups: OnceLock::new(),
            forwarder: OnceLock::new(),
            client_stats: Arc::new(apis::stats::ClientApiStats::default()),
            auto_create_inflight: Mutex::new(std::collections::BTreeSet::new()),
            background: Mutex::new(None),
            publish_lock: Mutex::new(false),
            _locks: locks,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(background_loop(Arc::downgrade(&broker)));
            *broker
                .background
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(task);
        }
        info!(node_id = broker.config.node_id, "broker opened");
        Ok(broker)
    }

    /// The config the broker was opened with.
    #[must_use]
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The line to the active controller.
    #[must_use]
    pub fn channel(&self) -> &Arc<dyn ControllerChannel> {
        &self.channel
    }

    /// The client listener's metrics (`BrokerTopicMetrics`, `RequestMetrics` `TotalTimeMs`):
    /// register it with the `/metrics` registry.
    #[must_use]
    pub fn client_stats(&self) -> &Arc<apis::stats::ClientApiStats> {
        &self.client_stats
    }

    /// The hosted partitions.
    #[must_use]
    pub fn replica_manager(&self) -> &Arc<ReplicaManager> {
        &self.replicas
    }

    /// Plugs in replication (once; later calls are ignored). Partitions already followed
    /// (publications before this call) are handed to it at once.
    pub fn set_replication(&self, replication: ReplicationManager) {
        let _serial = self
            .publish_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.replication.set(Arc::new(replication)).is_err() {
            warn!("replication manager already set");
            return;
        }
        let followed: Vec<FollowedPartition> = self
            .replicas
            .all_hosted()
            .into_iter()
            .filter_map(|(tp, hosted)| {
                let p = lock(&hosted.partition);
                let leader_id = p.leader_id().filter(|&l| l != self.config.node_id)?;
                Some(FollowedPartition {
                    tp,
                    topic_id: hosted.topic_id,
                    leader_id,
                    leader_epoch: p.leader_epoch(),
                })
            })
            .collect();
        if let (Some(replication), false) = (self.replication.get(), followed.is_empty()) {
            replication.become_follower(followed);
        }
    }

    /// Plugs in the group coordinator (once), before [`Broker::client_handler`].
    /// `__consumer_offsets` partitions already led are reported as elected at once.
    pub fn set_groups(&self, groups: GroupCoordinator) {
        let _serial = self
            .publish_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.groups.set(Arc::new(groups)).is_err() {
            warn!("group coordinator already set");
            return;
        }
        let Some(groups) = self.groups.get() else {
            return;
        };
        let image = self.replicas.image();
        if !image.is_empty() {
            groups.on_metadata(&image);
        }
        for (tp, hosted) in self.replicas.all_hosted() {
            if tp.topic != publisher::GROUP_METADATA_TOPIC_NAME {
                continue;
            }
            let (leader, epoch) = {
                let p = lock(&hosted.partition);
                (p.is_leader(), p.leader_epoch())
            };
            if leader {
                groups.on_elected(tp.partition, epoch);
            }
        }
    }

    /// Plugs in Envelope forwarding (once), before [`Broker::client_handler`].
    pub fn set_forwarder(&self, forwarder: Forwarder) {
        if self.forwarder.set(Arc::new(forwarder)).is_err() {
            warn!("forwarder already set");
        }
    }

    /// Replication, if plugged in.
    #[must_use]
    pub fn replication(&self) -> Option<&Arc<ReplicationManager>> {
        self.replication.get()
    }

    /// The group coordinator, if plugged in.
    #[must_use]
    pub fn groups(&self) -> Option<&Arc<GroupCoordinator>> {
        self.groups.get()
    }

    /// The forwarder, if plugged in.
    #[must_use]
    pub fn forwarder(&self) -> Option<&Arc<Forwarder>> {
        self.forwarder.get()
    }

    /// The client listener's handler. It advertises the APIs of the parts plugged in at the
    /// time of the call, so plug them in first.
    #[must_use]
    pub fn client_handler(self: &Arc<Self>) -> apis::ClientApiHandler {
        apis::ClientApiHandler::new(Arc::clone(self))
    }

    /// Applies a metadata publication (the metadata publisher; see [`publisher`]).
    pub fn publish(&self, publication: &Publication) {
        let shut_down = self
            .publish_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *shut_down {
            return;
        }
        let applied = self.publisher.apply(&self.replicas, publication);
        if let Some(replication) = self.replication.get() {
            if !applied.stop_following.is_empty() {
                replication.stop_following(&applied.stop_following);
            }
            if !applied.followers.is_empty() {
                replication.become_follower(applied.followers);
            }
        }
        if let Some(groups) = self.groups.get() {
            for (partition, epoch) in applied.resigned {
                groups.on_resigned(partition, epoch);
            }
            for (partition, epoch) in applied.elected {
                groups.on_elected(partition, epoch);
            }
            groups.on_metadata(&publication.image);
        }
    }

    /// Periodic work: retention (`log.retention.check.interval.ms`) and expired producers.
    fn run_retention(&self) {
        let now = now_ms();
        for (tp, hosted) in self.replicas.all_hosted() {
            let mut p = lock(&hosted.partition);
            match p.apply_retention(now) {
                Ok(0) => {}
                Ok(deleted) => {
                    info!(topic = %tp.topic, partition = tp.partition, deleted, "retention deleted segments");
                }
                Err(error) => {
                    warn!(%error, topic = %tp.topic, partition = tp.partition, "retention failed")
                }
            }
            p.remove_expired_producers(now);
        }
    }

    /// Writes `recovery-point-offset-checkpoint`, `replication-offset-checkpoint` and
    /// `log-start-offset-checkpoint` in every log dir, flushing each log first when `flush`
    /// (so the recovery points are true).
    pub fn write_checkpoints(&self, flush: bool) {
        let startup = self.publisher.startup_checkpoints();
        let hosted = self.replicas.all_hosted();
        for dir in &self.config.log_dirs {
            let mut recovery = BTreeMap::new();
            let mut hw = BTreeMap::new();
            let mut start = BTreeMap::new();
            // Partitions not opened yet keep their start-up entries while their directory
            // is still there.
            let still_there = |tp: &LogTopicPartition| {
                dir.join(format!("{}-{}", tp.topic, tp.partition)).is_dir()
            };
            for (source, target) in [
                (&startup.recovery_points, &mut recovery),
                (&startup.high_watermarks, &mut hw),
                (&startup.log_start_offsets, &mut start),
            ] {
                for (tp, offset) in source {
                    if still_there(tp) {
                        target.insert(tp.clone(), *offset);
                    }
                }
            }
            for (tp, h) in hosted.iter().filter(|(_, h)| &h.log_dir == dir) {
                let key = LogTopicPartition::new(tp.topic.clone(), tp.partition);
                let mut p = lock(&h.partition);
                if flush && let Err(error) = p.flush() {
                    warn!(%error, topic = %tp.topic, partition = tp.partition, "flush failed");
                }
                recovery.insert(key.clone(), p.log().recovery_point());
                hw.insert(key.clone(), p.high_watermark());
                start.insert(key, p.log_start_offset());
            }
            for (file, offsets) in [
                (RECOVERY_POINT_CHECKPOINT_FILE, &recovery),
                (REPLICATION_OFFSET_CHECKPOINT_FILE, &hw),
                (LOG_START_OFFSET_CHECKPOINT_FILE, &start),
            ] {
                if let Err(error) = write_offset_checkpoint(&dir.join(file), offsets) {
                    warn!(%error, "checkpoint write failed");
                }
            }
        }
    }

    /// Stops the broker's parts and closes every log cleanly: flushed, producer snapshots
    /// written, checkpoints written (a restart then recovers nothing).
    pub async fn shutdown(&self) {
        *self
            .publish_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        let task = self
            .background
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        if let Some(replication) = self.replication.get() {
            replication.shutdown().await;
        }
        if let Some(groups) = self.groups.get() {
            groups.shutdown().await;
        }
        for (tp, hosted) in self.replicas.all_hosted() {
            let p = lock(&hosted.partition);
            if let Err(error) = p.write_producer_snapshot() {
                warn!(%error, topic = %tp.topic, partition = tp.partition, "producer snapshot failed");
            }
        }
        self.write_checkpoints(true);
        for (tp, _) in self.replicas.all_hosted() {
            if let Some(hosted) = self.replicas.remove(&tp) {
                lock(&hosted.partition).stop();
                // Close (seal the active segment's indexes) when no request holds it.
                if let Ok(mutex) = Arc::try_unwrap(hosted.partition) {
                    let partition = mutex.into_inner().unwrap_or_else(PoisonError::into_inner);
                    if let Err(error) = partition.close() {
                        warn!(%error, topic = %tp.topic, partition = tp.partition, "close failed");
                    }
                }
            }
        }
        info!(node_id = self.config.node_id, "broker shut down");
    }
}

/// Retention every `log.retention.check.interval.ms`, checkpoints every
/// `replica.high.watermark.checkpoint.interval.ms`; stops when the broker is dropped.
async fn background_loop(broker: std::sync::Weak<Broker>) {
    let (retention_ms, checkpoint_ms) = match broker.upgrade() {
        Some(b) => (
            b.config
                .prop("log.retention.check.interval.ms", 300_000u64)
                .max(1),
            b.config
                .prop(
                    "replica.high.watermark.checkpoint.interval.ms",
                    DEFAULT_HW_CHECKPOINT_INTERVAL_MS,
                )
                .max(1),
        ),
        None => return,
    };
    let mut retention = tokio::time::interval(Duration::from_millis(retention_ms));
    let mut checkpoint = tokio::time::interval(Duration::from_millis(checkpoint_ms));
    retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    checkpoint.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first ticks fire at once; skip them (nothing to do at start-up).
    retention.tick().await;
    checkpoint.tick().await;
    loop {
        let retention_due = tokio::select! {
            _ = retention.tick() => true,
            _ = checkpoint.tick() => false,
        };
        let Some(b) = broker.upgrade() else {
            return;
        };
        // File work off the async workers.
        let work = tokio::task::spawn_blocking(move || {
            if retention_due {
                b.run_retention();
            } else {
                b.write_checkpoints(false);
            }
        });
        let _ = work.await;
    }
}
