//! The broker runtime on tokio: the pieces below wired into one [`Broker`] that the node
//! runtime starts for `process.roles` containing `broker`.
//!
//! Flow: [`Broker::builder`] builds the broker with its parts (replication, group
//! coordinator, forwarding) at once; [`Broker::metadata_publishers`] are registered with the
//! node's metadata loader (Kafka's `MetadataLoader` → `MetadataPublisher`s), which calls them
//! with every new image once it has caught up: topic/broker config changes, partition logs
//! created/deleted, leader/follower transitions and replication, then the group coordinator.
//! Clients talk to [`apis::ClientApiHandler`] (a `krust_net::Handler`). Everything that needs
//! the active controller goes through [`controller_channel::ControllerChannel`].
//!
//! # Layout
//! - [`controller_channel`]: the trait the node runtime implements to reach the active
//!   controller.
//! - [`replica_manager`]: [`replica_manager::ReplicaManager`] — hosted partitions, shared by
//!   the API handlers, replication and the group coordinator; appends and wake-ups.
//! - [`metadata_publishers`]: the broker's `MetadataPublisher`s.
//! - [`publisher`]: what the replica manager and config publishers do with a new image.
//! - [`purgatory`]: delayed produce (acks=all) and delayed fetch (long poll).
//! - [`apis`]: the client listener's request handler, one module per API family.
//! - [`lifecycle`]: broker registration, heartbeats, controlled shutdown.
//! - [`forwarding`]: admin requests forwarded to the controller in an `Envelope`.
//! - [`replication`]: follower fetchers and ISR shrink/expand via AlterPartition.
//! - [`groups`]: the group coordinator runtime over the sans-IO shards of [`crate::group`].
//! - [`txn`]: the transaction coordinator runtime over `krust-txn`'s sans-IO shards, and its
//!   marker sender.

pub mod apis;
pub mod authz;
pub mod cleaner;
pub mod controller_channel;
pub mod forwarding;
pub mod groups;
pub mod lifecycle;
pub mod metadata_publishers;
pub mod publisher;
pub mod purgatory;
pub mod quotas;
pub mod replica_manager;
pub mod replication;
pub mod request_time;
pub mod txn;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use krust_log::checkpoint::{
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE, TopicPartition as LogTopicPartition,
    read_offset_checkpoint, write_offset_checkpoint,
};
use krust_metadata::authorizer::AuthorizerConfig;
use krust_metadata::image::MetadataPublisher;
use krust_net::RequestContext;
use thiserror::Error;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use self::controller_channel::ControllerChannel;
use self::forwarding::Forwarder;
use self::groups::GroupCoordinator;
use self::metadata_publishers::{
    DynamicConfigPublisher, GroupCoordinatorPublisher, ReplicaManagerPublisher,
};
use self::publisher::{Publisher, StartupCheckpoints};
use self::replica_manager::{ReplicaManager, lock, now_ms};
use self::replication::ReplicationManager;

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
    /// `server.properties`, validated once by the binary: typed values for the broker's
    /// settings, the keys as written for DescribeConfigs.
    pub static_config: Arc<krust_config::KafkaConfig>,
    /// Advertised listeners, client-facing first.
    pub advertised_listeners: Vec<Endpoint>,
    /// `inter.broker.listener.name`: the listener followers fetch from.
    pub inter_broker_listener_name: String,
    /// The client side of the inter-broker listener's security protocol (TLS, SASL): every
    /// connection this broker opens to another broker (replica fetchers, transaction markers,
    /// transaction verification) uses it.
    pub inter_broker_security: krust_net::security::ClientSecurity,
    /// `broker.rack`.
    pub rack: Option<String>,
}

impl BrokerConfig {
    /// The typed value of `KafkaConfig` key `key` (set, else Kafka's default), or `default`
    /// when Kafka's default is null.
    ///
    /// # Panics
    /// If `key` is not a `KafkaConfig` key (a bug in krust).
    #[must_use]
    pub fn prop<T: krust_config::FromConfigValue>(&self, key: &str, default: T) -> T {
        self.static_config.get_or(key, default)
    }

    /// `server.properties` as written (Kafka's `originals`), for DescribeConfigs and the
    /// config layers.
    #[must_use]
    pub fn properties(&self) -> &BTreeMap<String, String> {
        self.static_config.originals()
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

/// One broker's runtime: hosted partitions, its metadata publishers, the client API handler
/// and the parts it was built with (replication, groups, forwarding; see [`BrokerBuilder`]).
pub struct Broker {
    config: Arc<BrokerConfig>,
    channel: Arc<dyn ControllerChannel>,
    replicas: Arc<ReplicaManager>,
    publisher: Publisher,
    replication: Option<Arc<ReplicationManager>>,
    groups: Option<Arc<GroupCoordinator>>,
    /// The transaction coordinator, built with the group coordinator.
    txn: Option<Arc<txn::TxnCoordinator>>,
    forwarder: Option<Arc<Forwarder>>,
    /// Kafka's `StandardAuthorizer`, if the broker was built with one.
    authorizer: Option<Arc<authz::BrokerAuthorizer>>,
    pub(crate) fetch_sessions: apis::fetch::FetchSessionCache,
    pub(crate) producer_ids: apis::producer_id::ProducerIdManager,
    pub(crate) txn_verifier: apis::txn_verification::TxnVerifier,
    client_stats: Arc<apis::stats::ClientApiStats>,
    /// The client quota managers (`producer_byte_rate`, `consumer_byte_rate`).
    quotas: Arc<quotas::ClientQuotas>,
    /// Topics with an auto-creation in flight (Kafka's `AutoTopicCreationManager`
    /// `inflightTopics`): clients polling Metadata do not send the controller one each.
    pub(crate) auto_create_inflight: Mutex<std::collections::BTreeSet<String>>,
    background: Mutex<Option<JoinHandle<()>>>,
    /// Serialises the metadata publishers (tests may call from several tasks); `true` once shut
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

/// Builds a [`Broker`] with the parts it runs (Kafka's `BrokerServer` construction): every
/// part exists from the start, so no request or publication ever sees a half-built broker.
pub struct BrokerBuilder {
    config: BrokerConfig,
    channel: Arc<dyn ControllerChannel>,
    replication: bool,
    groups: bool,
    forwarder: Option<Forwarder>,
    authorizer: Option<AuthorizerConfig>,
}

impl std::fmt::Debug for BrokerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerBuilder")
            .field("node_id", &self.config.node_id)
            .field("replication", &self.replication)
            .field("groups", &self.groups)
            .field("forwarder", &self.forwarder.is_some())
            .finish_non_exhaustive()
    }
}

impl BrokerBuilder {
    /// Follower replication and ISR changes ([`ReplicationManager`]) over the broker's channel.
    #[must_use]
    pub fn with_replication(mut self) -> Self {
        self.replication = true;
        self
    }

    /// The group coordinator ([`GroupCoordinator`], which also starts the log cleaner) over
    /// the broker's channel.
    #[must_use]
    pub fn with_groups(mut self) -> Self {
        self.groups = true;
        self
    }

    /// Envelope forwarding of admin requests to the controller (KIP-590).
    #[must_use]
    pub fn with_forwarder(mut self, forwarder: Forwarder) -> Self {
        self.forwarder = Some(forwarder);
        self
    }

    /// Kafka's `StandardAuthorizer` (`authorizer.class.name`): every request is authorized
    /// against the image's ACLs as Kafka's `KafkaApis` does; without it, everything is allowed.
    #[must_use]
    pub fn with_authorizer(mut self, config: AuthorizerConfig) -> Self {
        self.authorizer = Some(config);
        self
    }

    /// Locks the log dirs (all but `metadata.log.dir`, which the Raft driver locks), reads
    /// their checkpoints and builds the chosen parts. Partition directories are opened when a
    /// publication says they are hosted; strays are removed at the first one. In a tokio
    /// runtime, starts the periodic retention/checkpoint task.
    ///
    /// # Errors
    /// [`BrokerError`].
    pub fn open(self) -> Result<Arc<Broker>, BrokerError> {
        let BrokerBuilder {
            config,
            channel,
            replication,
            groups,
            forwarder,
            authorizer,
        } = self;
        if config.log_dirs.is_empty() {
            return Err(BrokerError::NoLogDirs);
        }
        let mut locks = Vec::new();
        let mut checkpoints = StartupCheckpoints::default();
        // The Raft driver holds the `.lock` of `metadata.log.dir` (by default the first log
        // dir), as Kafka's RaftManager does; locking it again would refuse ourselves.
        let metadata_dir = config
            .properties()
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
        let replicas = Arc::new(ReplicaManager::new(config.node_id));
        let replication = replication.then(|| {
            Arc::new(ReplicationManager::new(
                &config,
                Arc::clone(&replicas),
                Arc::clone(&channel),
            ))
        });
        let groups = groups.then(|| {
            Arc::new(GroupCoordinator::new(
                &config,
                Arc::clone(&replicas),
                Arc::clone(&channel),
            ))
        });
        let txn = groups.is_some().then(|| {
            Arc::new(txn::TxnCoordinator::new(
                txn::txn_config(&config.static_config),
                config.node_id,
                config.inter_broker_listener_name.clone(),
                config.inter_broker_security.clone(),
                Arc::clone(&replicas),
                Arc::clone(&channel),
            ))
        });
        // `quota.window.num` × `quota.window.size.seconds` (validated by the binary: ≥ 1).
        let quota_window = krust_metrics::SampleConfig::new(
            Duration::from_secs(
                u64::try_from(config.prop(
                    "quota.window.size.seconds",
                    i32::try_from(quotas::QUOTA_WINDOW_SIZE_SECONDS_DEFAULT).unwrap_or(1),
                ))
                .unwrap_or(1),
            ),
            usize::try_from(config.prop(
                "quota.window.num",
                i32::try_from(quotas::QUOTA_WINDOW_NUM_DEFAULT).unwrap_or(11),
            ))
            .unwrap_or(quotas::QUOTA_WINDOW_NUM_DEFAULT),
        );
        let broker = Arc::new(Broker {
            publisher: Publisher::new(Arc::clone(&config), checkpoints),
            fetch_sessions: apis::fetch::FetchSessionCache::new(config.prop(
                "max.incremental.fetch.session.cache.slots",
                apis::fetch::DEFAULT_SESSION_CACHE_SLOTS,
            )),
            producer_ids: apis::producer_id::ProducerIdManager::default(),
            txn_verifier: apis::txn_verification::TxnVerifier::new(
                config.inter_broker_security.clone(),
            ),
            replicas,
            config,
            channel,
            replication,
            groups,
            txn,
            forwarder: forwarder.map(Arc::new),
            authorizer: authorizer.map(|config| Arc::new(authz::BrokerAuthorizer::new(config))),
            client_stats: Arc::new(apis::stats::ClientApiStats::default()),
            quotas: Arc::new(quotas::ClientQuotas::new(quota_window)),
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
}

impl Broker {
    /// A broker with no replication, group coordinator or forwarding (tests of the data
    /// path): [`Broker::builder`] with nothing added.
    ///
    /// # Errors
    /// [`BrokerError`].
    pub fn open(
        config: BrokerConfig,
        channel: Arc<dyn ControllerChannel>,
    ) -> Result<Arc<Broker>, BrokerError> {
        Broker::builder(config, channel).open()
    }

    /// Starts building a broker for `config` that reaches the active controller through
    /// `channel`; its parts are chosen on the builder, never plugged in later.
    #[must_use]
    pub fn builder(config: BrokerConfig, channel: Arc<dyn ControllerChannel>) -> BrokerBuilder {
        BrokerBuilder {
            config,
            channel,
            replication: false,
            groups: false,
            authorizer: None,
            forwarder: None,
        }
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

    /// The client quota managers: enforced by the Produce and Fetch handlers, a `/metrics`
    /// collector (`kafka.server:type=Produce|Fetch` `byte-rate`, `throttle-time`).
    #[must_use]
    pub fn quotas(&self) -> &Arc<quotas::ClientQuotas> {
        &self.quotas
    }

    /// The hosted partitions.
    #[must_use]
    pub fn replica_manager(&self) -> &Arc<ReplicaManager> {
        &self.replicas
    }

    /// Replication, if the broker was built with it.
    #[must_use]
    pub fn replication(&self) -> Option<&Arc<ReplicationManager>> {
        self.replication.as_ref()
    }

    /// The group coordinator, if the broker was built with it.
    #[must_use]
    pub fn groups(&self) -> Option<&Arc<GroupCoordinator>> {
        self.groups.as_ref()
    }

    /// The transaction coordinator (present with the group coordinator).
    #[must_use]
    pub fn txn(&self) -> Option<&Arc<txn::TxnCoordinator>> {
        self.txn.as_ref()
    }

    /// One request's authorization (everything allowed without an authorizer).
    #[must_use]
    pub fn authz(&self, ctx: &RequestContext) -> authz::Authz {
        authz::Authz::new(self, ctx)
    }

    /// The forwarder, if the broker was built with it.
    #[must_use]
    pub fn forwarder(&self) -> Option<&Arc<Forwarder>> {
        self.forwarder.as_ref()
    }

    /// The client listener's handler (it advertises the APIs of the parts the broker was built
    /// with).
    #[must_use]
    pub fn client_handler(self: &Arc<Self>) -> apis::ClientApiHandler {
        apis::ClientApiHandler::new(Arc::clone(self))
    }

    /// The broker's metadata publishers, in the order the node's metadata loader must call
    /// them (Kafka's `BrokerServer` registers its `BrokerMetadataPublisher` the same way):
    /// [`authz::AclPublisher`] (ACLs before the image they came with is served),
    /// [`DynamicConfigPublisher`], [`ReplicaManagerPublisher`] (replication included), then,
    /// when built with one, [`GroupCoordinatorPublisher`], which relies on the replica manager
    /// having made this broker leader of its `__consumer_offsets` partitions, and
    /// [`txn::TxnCoordinatorPublisher`] (the same for `__transaction_state`). Register them
    /// with the loader when the node is built; they are handles over this broker's state.
    #[must_use]
    pub fn metadata_publishers(self: &Arc<Self>) -> Vec<Box<dyn MetadataPublisher>> {
        let mut publishers: Vec<Box<dyn MetadataPublisher>> = Vec::new();
        if let Some(authorizer) = &self.authorizer {
            publishers.push(Box::new(authz::AclPublisher::new(Arc::clone(authorizer))));
        }
        publishers.push(Box::new(DynamicConfigPublisher::new(Arc::clone(self))));
        publishers.push(Box::new(quotas::ClientQuotaPublisher::new(Arc::clone(
            &self.quotas,
        ))));
        publishers.push(Box::new(ReplicaManagerPublisher::new(Arc::clone(self))));
        if self.groups.is_some() {
            publishers.push(Box::new(GroupCoordinatorPublisher::new(Arc::clone(self))));
        }
        if self.txn.is_some() {
            publishers.push(Box::new(txn::TxnCoordinatorPublisher::new(Arc::clone(
                self,
            ))));
        }
        publishers
    }

    /// Runs `apply` unless the broker has shut down; publications are serialised (no log is
    /// reopened behind [`Broker::shutdown`]).
    pub(crate) fn while_open(&self, apply: impl FnOnce()) {
        let shut_down = self
            .publish_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !*shut_down {
            apply();
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
        if let Some(replication) = &self.replication {
            replication.shutdown().await;
        }
        if let Some(groups) = &self.groups {
            groups.shutdown().await;
        }
        if let Some(txn) = &self.txn {
            txn.shutdown().await;
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
