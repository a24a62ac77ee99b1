//! The broker server (Kafka's `BrokerServer`): the `krust-broker` runtime built with
//! replication, the group coordinator and Envelope forwarding, its lifecycle (registration and
//! heartbeats) and client listeners, reaching the active controller through one
//! [`QuorumChannel`]. It is fed by the node's metadata loader, with which
//! [`BrokerServer::metadata_publishers`] and [`BrokerServer::applied_offset_listener`] are
//! registered when the node is built.
//!
//! Start-up, in Kafka's order where it matters:
//! 1. [`BrokerServer::start`]: `Broker::builder` locks the log dirs and builds the broker with
//!    every part; the [`BrokerLifecycle`] registers (listeners, features, `directory.id`s) and
//!    heartbeats, with the loader's applied offset, until the controller unfences it;
//! 2. once the loader has caught up with the high watermark, the client listeners start
//!    serving ([`BrokerServer::open_listeners`]).
//!
//! Shutdown (SIGTERM): controlled shutdown (heartbeats with `WantShutDown` until the controller
//! has moved leaderships away, Kafka's `BrokerLifecycleManager.beginControlledShutdown`), then
//! the listeners close and the broker flushes and checkpoints its logs; then the node stops
//! its loader.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use krust_broker::server::apis::ClientApiHandler;
use krust_broker::server::forwarding::Forwarder;
use krust_broker::server::lifecycle::{BrokerLifecycle, BrokerState, LifecycleConfig};
use krust_broker::server::replica_manager::lock;
use krust_broker::server::{Broker, BrokerConfig, BrokerError};
use krust_metadata::authorizer::AuthorizerConfig;
use krust_metadata::image::MetadataPublisher;
use krust_metrics::{Collector, Family, prometheus_name};
use krust_raft::config::VoterAddress;
use krust_raft::driver::RaftHandle;
use tracing::info;

use crate::loader::{AppliedOffsetListener, LoaderStats};
use crate::quorum_channel::QuorumChannel;

/// How long a controlled shutdown waits for the controller before the broker stops anyway.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// A client listener of the broker, bound once the metadata caught up.
#[derive(Debug, Clone)]
pub struct BrokerListener {
    /// Listener name (`PLAINTEXT`, …).
    pub name: String,
    /// `host:port` to bind.
    pub bind: String,
    /// Its limits (`socket.request.max.bytes`, `max.connections`, …).
    pub config: krust_net::ServerConfig,
}

/// What the broker server is built from (the binary reads it from `server.properties`).
#[derive(Debug, Clone)]
pub struct BrokerServerConfig {
    /// The broker runtime's config.
    pub broker: BrokerConfig,
    /// Registration and heartbeats.
    pub lifecycle: LifecycleConfig,
    /// The client listeners, client-facing first.
    pub listeners: Vec<BrokerListener>,
    /// How long a forwarded admin request waits for the controller (`request.timeout.ms`).
    pub forward_timeout: Duration,
    /// Kafka's `StandardAuthorizer` (`authorizer.class.name`), if configured.
    pub authorizer: Option<AuthorizerConfig>,
    /// The client side of the controller listener's security (the first of
    /// `controller.listener.names`, `sasl.mechanism.controller.protocol`): registration,
    /// heartbeats, AlterPartition and forwarded requests go to the controllers with it.
    pub controller_security: krust_net::security::ClientSecurity,
}

/// Why the broker server cannot start or serve.
#[derive(Debug, thiserror::Error)]
pub enum BrokerServerError {
    /// The log dirs cannot be locked or read.
    #[error("opening the broker's log directories")]
    Open(#[source] BrokerError),
    /// A client listener cannot be bound.
    #[error("binding the broker listener {bind} ({name})")]
    Bind {
        /// The listener's name.
        name: String,
        /// The address.
        bind: String,
        /// What failed.
        #[source]
        source: krust_net::ServerError,
    },
}

/// The running broker server (see the module doc).
pub struct BrokerServer {
    broker: Arc<Broker>,
    lifecycle: Arc<BrokerLifecycle>,
    channel: Arc<QuorumChannel>,
    handler: Arc<ClientApiHandler>,
    /// The client listeners to open once the metadata caught up.
    listeners: Vec<BrokerListener>,
    servers: tokio::sync::Mutex<Vec<krust_net::Server>>,
    /// The node's metadata loader's stats.
    stats: Arc<LoaderStats>,
    /// The client-facing (first) listener's `host:port` as advertised.
    bootstrap: String,
}

impl std::fmt::Debug for BrokerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerServer")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

impl BrokerServer {
    /// Builds the broker over this node's Raft replica `raft` (whose leader is the active
    /// controller among `voters`) and starts its lifecycle; `stats` are those of the node's
    /// metadata loader.
    ///
    /// # Errors
    /// [`BrokerServerError::Open`]: a log dir is locked or its checkpoints are malformed.
    pub fn start(
        config: BrokerServerConfig,
        voters: &[VoterAddress],
        raft: &RaftHandle,
        stats: Arc<LoaderStats>,
    ) -> Result<BrokerServer, BrokerServerError> {
        let BrokerServerConfig {
            broker: broker_config,
            lifecycle: lifecycle_config,
            listeners,
            forward_timeout,
            authorizer,
            controller_security,
        } = config;
        let node_id = broker_config.node_id;
        let bootstrap = broker_config
            .advertised_listeners
            .first()
            .map(|e| format!("{}:{}", e.host, e.port))
            .unwrap_or_default();
        let channel = Arc::new(
            QuorumChannel::new(voters, raft, format!("broker-{node_id}-to-controller"))
                .with_security(controller_security),
        );
        let forwarder = Forwarder::new(channel.clone()).with_timeout(forward_timeout);
        let mut builder = Broker::builder(broker_config, channel.clone())
            .with_replication()
            .with_groups()
            .with_forwarder(forwarder);
        if let Some(authorizer) = authorizer {
            builder = builder.with_authorizer(authorizer);
        }
        let broker = builder.open().map_err(BrokerServerError::Open)?;
        let lifecycle = BrokerLifecycle::start(lifecycle_config, channel.clone());
        let handler = Arc::new(broker.client_handler());
        Ok(BrokerServer {
            broker,
            lifecycle,
            channel,
            handler,
            listeners,
            servers: tokio::sync::Mutex::new(Vec::new()),
            stats,
            bootstrap,
        })
    }

    /// The broker's metadata publishers, for the node's metadata loader (see
    /// [`Broker::metadata_publishers`]), then the listeners' `IpConnectionRatePublisher`.
    #[must_use]
    pub fn metadata_publishers(&self) -> Vec<Box<dyn MetadataPublisher>> {
        let mut publishers = self.broker.metadata_publishers();
        // The listeners share one `ConnectionQuotas`: IP connection rates from the image.
        if let Some(quotas) = self
            .listeners
            .iter()
            .find_map(|l| l.config.connection_quotas.clone())
        {
            publishers.push(Box::new(
                krust_broker::server::quotas::IpConnectionRatePublisher::new(quotas),
            ));
        }
        publishers
    }

    /// Hands the loader's applied offset to the heartbeats (`CurrentMetadataOffset`).
    #[must_use]
    pub fn applied_offset_listener(&self) -> AppliedOffsetListener {
        let lifecycle = self.lifecycle.clone();
        Box::new(move |offset| lifecycle.set_metadata_offset(offset))
    }

    /// The client-facing listener's advertised `host:port`.
    #[must_use]
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Resolves once the metadata loader has caught up with the high watermark: then
    /// [`Self::open_listeners`] (Kafka enables the client listeners at this point, so no
    /// client sees the broker's metadata before it is current).
    pub async fn wait_until_caught_up(&self) {
        self.stats.wait_until_caught_up().await;
    }

    /// Binds the client listeners (see [`Self::wait_until_caught_up`]).
    ///
    /// # Errors
    /// [`BrokerServerError::Bind`]: a listener's address cannot be bound.
    pub async fn open_listeners(&self) -> Result<(), BrokerServerError> {
        let mut servers = self.servers.lock().await;
        if !servers.is_empty() {
            return Ok(());
        }
        for listener in &self.listeners {
            let server = krust_net::Server::bind(
                &listener.bind,
                self.handler.clone(),
                listener.config.clone(),
            )
            .await
            .map_err(|source| BrokerServerError::Bind {
                name: listener.name.clone(),
                bind: listener.bind.clone(),
                source,
            })?;
            info!(listener = %listener.name, address = %server.local_addr(), "broker listener started");
            servers.push(server);
        }
        Ok(())
    }

    /// Resolves once the controller has unfenced the broker.
    pub async fn wait_until_running(&self) {
        let mut states = self.lifecycle.watch_state();
        let _ = states.wait_for(|s| *s == BrokerState::Running).await;
    }

    /// The broker's metrics for `/metrics`: this module's gauges, the client listener's
    /// request metrics (`BrokerTopicMetrics`, `RequestMetrics`, from the broker core), the
    /// client quota sensors (`kafka.server:type=Produce|Fetch`) and the listeners' connection
    /// metrics (`kafka.server:type=socket-server-metrics`).
    #[must_use]
    pub fn metrics_collectors(&self) -> Vec<Arc<dyn Collector>> {
        let client: Arc<dyn Collector> = self.broker.client_stats().clone();
        let quotas: Arc<dyn Collector> = self.broker.quotas().clone();
        let mut collectors: Vec<Arc<dyn Collector>> = vec![
            Arc::new(BrokerMetrics {
                broker: self.broker.clone(),
                lifecycle: self.lifecycle.clone(),
                stats: self.stats.clone(),
            }),
            client,
            quotas,
        ];
        if let Some(connections) = self
            .listeners
            .iter()
            .find_map(|l| l.config.connection_quotas.clone())
        {
            collectors.push(connections);
        }
        collectors
    }

    /// Controlled shutdown, then the listeners and the broker's logs (the node stops the
    /// loader afterwards).
    pub async fn shutdown(self) {
        let agreed = self
            .lifecycle
            .controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT)
            .await;
        info!(agreed, "controlled shutdown finished");
        for server in self.servers.into_inner() {
            server.shutdown().await;
        }
        self.broker.shutdown().await;
        self.channel.close();
    }
}

/// Broker gauges (Kafka's names): `kafka.server:type=KafkaServer,name=BrokerState`,
/// `kafka.server:type=ReplicaManager` `PartitionCount`, `LeaderCount`,
/// `UnderReplicatedPartitions`, `UnderMinIsrPartitionCount`,
/// `kafka.cluster:type=Partition,name=LastStableOffsetLag` per partition, the `IsrShrinksPerSec` /
/// `IsrExpandsPerSec` / `FailedIsrUpdatesPerSec` counts, and the
/// `broker-metadata-metrics` group's `last-applied-record-offset` and
/// `metadata-load-error-count`, the transaction coordinator's
/// `kafka.coordinator.transaction:type=TransactionMarkerChannelManager,name=UnknownDestinationQueueSize`
/// and `LogAppendRetryQueueSize`, and `transaction-coordinator-metrics` `partition-load-time-max/avg`, plus krust's `fenced`
/// gauge (1 while the controller keeps the broker fenced).
struct BrokerMetrics {
    broker: Arc<Broker>,
    lifecycle: Arc<BrokerLifecycle>,
    stats: Arc<LoaderStats>,
}

impl Collector for BrokerMetrics {
    fn collect(&self, _now: std::time::Instant, out: &mut Vec<Family>) {
        #[allow(clippy::cast_precision_loss)] // offsets and counts far below 2^53
        let as_f64 = |v: i64| v as f64;
        out.push(Family::gauge(
            prometheus_name("kafka.server", "KafkaServer", "BrokerState"),
            "The broker's state: 1 starting, 2 recovery, 3 running, 6 pending controlled shutdown, 7 shutting down.",
            f64::from(self.lifecycle.state().value()),
        ));
        let hosted = self.broker.replica_manager().all_hosted();
        let leaders = hosted
            .iter()
            .filter(|(_, h)| lock(&h.partition).is_leader())
            .count();
        out.push(Family::gauge(
            prometheus_name("kafka.server", "ReplicaManager", "PartitionCount"),
            "Number of partitions on this broker.",
            as_f64(i64::try_from(hosted.len()).unwrap_or(i64::MAX)),
        ));
        out.push(Family::gauge(
            prometheus_name("kafka.server", "ReplicaManager", "LeaderCount"),
            "Number of partitions this broker leads.",
            as_f64(i64::try_from(leaders).unwrap_or(i64::MAX)),
        ));
        // Kafka's `kafka.cluster:type=Partition,name=LastStableOffsetLag` per hosted
        // partition: high watermark minus last stable offset (an open transaction's lag).
        let mut lso_lag = Family::gauge(
            prometheus_name("kafka.cluster", "Partition", "LastStableOffsetLag"),
            "High watermark minus last stable offset of the partition.",
            0.0,
        );
        lso_lag.samples = hosted
            .iter()
            .map(|(tp, h)| {
                let p = lock(&h.partition);
                krust_metrics::Sample {
                    suffix: "",
                    labels: vec![
                        ("topic".to_string(), tp.topic.clone()),
                        ("partition".to_string(), tp.partition.to_string()),
                    ],
                    value: as_f64(p.high_watermark() - p.last_stable_offset()),
                }
            })
            .collect();
        out.push(lso_lag);
        if let Some(replication) = self.broker.replication() {
            let stats = replication.stats();
            let count = |v: u64| as_f64(i64::try_from(v).unwrap_or(i64::MAX));
            for (name, help, value) in [
                (
                    "UnderReplicatedPartitions",
                    "Partitions led here whose ISR is smaller than their replica set.",
                    stats.under_replicated_partitions,
                ),
                (
                    "UnderMinIsrPartitionCount",
                    "Partitions led here whose ISR is below min.insync.replicas.",
                    stats.under_min_isr_partitions,
                ),
            ] {
                out.push(Family::gauge(
                    prometheus_name("kafka.server", "ReplicaManager", name),
                    help,
                    count(value),
                ));
            }
            // Kafka's meters; the JMX exporter exposes their `Count` attribute.
            for (name, help, value) in [
                (
                    "IsrShrinksPerSec",
                    "ISR shrinks committed by the controller.",
                    stats.isr_shrinks,
                ),
                (
                    "IsrExpandsPerSec",
                    "ISR expansions committed by the controller.",
                    stats.isr_expands,
                ),
                (
                    "FailedIsrUpdatesPerSec",
                    "AlterPartition proposals that failed.",
                    stats.failed_isr_updates,
                ),
            ] {
                let mut family = Family::gauge(
                    format!(
                        "{}_count",
                        prometheus_name("kafka.server", "ReplicaManager", name)
                    ),
                    help,
                    count(value),
                );
                family.kind = krust_metrics::MetricKind::Counter;
                out.push(family);
            }
        }
        if let Some(txn) = self.broker.txn() {
            let stats = txn.stats();
            out.push(Family::gauge(
                prometheus_name(
                    "kafka.coordinator.transaction",
                    "TransactionMarkerChannelManager",
                    "UnknownDestinationQueueSize",
                ),
                "Transaction markers waiting for their partition's leader to be known.",
                as_f64(stats.unknown_destination_queue_size()),
            ));
            out.push(Family::gauge(
                prometheus_name(
                    "kafka.coordinator.transaction",
                    "TransactionMarkerChannelManager",
                    "LogAppendRetryQueueSize",
                ),
                "Transaction completions (CompleteCommit/CompleteAbort) whose log append failed, waiting to be retried.",
                as_f64(stats.log_append_retry_queue_size()),
            ));
            let (max, avg) = stats.partition_load_time();
            for (name, help, value) in [
                (
                    "partition-load-time-max",
                    "The max time it took to load the partitions in the last 30sec",
                    max,
                ),
                (
                    "partition-load-time-avg",
                    "The avg time it took to load the partitions in the last 30sec",
                    avg,
                ),
            ] {
                out.push(Family::gauge(
                    prometheus_name("kafka.server", "transaction-coordinator-metrics", name),
                    help,
                    value,
                ));
            }
        }
        out.push(Family::gauge(
            prometheus_name("kafka.server", "broker-metadata-metrics", "fenced"),
            "1 while the controller keeps this broker fenced.",
            if self.lifecycle.is_fenced() { 1.0 } else { 0.0 },
        ));
        out.push(Family::gauge(
            prometheus_name(
                "kafka.server",
                "broker-metadata-metrics",
                "last-applied-record-offset",
            ),
            "The offset of the last record from the cluster metadata partition that was applied by the broker",
            as_f64(self.stats.applied_offset.load(Ordering::Acquire)),
        ));
        out.push(Family::gauge(
            prometheus_name(
                "kafka.server",
                "broker-metadata-metrics",
                "metadata-load-error-count",
            ),
            "The number of errors encountered by the BrokerMetadataListener while loading the metadata log and generating a new MetadataDelta based on it.",
            as_f64(
                i64::try_from(self.stats.load_errors.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
            ),
        ));
    }
}
