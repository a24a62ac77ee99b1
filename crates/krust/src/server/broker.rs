//! The broker role of `krust server` (Kafka's `BrokerServer`): the broker runtime of
//! `krust-broker` built from `server.properties`, its metadata publishers registered with the
//! node's metadata loader (`krust_node::loader`).
//!
//! Start-up, in Kafka's order where it matters:
//! 1. broker listeners (`listeners` minus `controller.listener.names`) get their ports (a `0`
//!    port is resolved to a free one first, so it can be advertised);
//! 2. [`Broker::builder`] locks the log dirs and builds the broker with replication, the group
//!    coordinator and Envelope forwarding, all talking to the active controller through one
//!    [`QuorumChannel`];
//! 3. the node's metadata loader calls the broker's publishers
//!    ([`BrokerRole::metadata_publishers`]) with every committed image and reports the applied
//!    offset to the [`BrokerLifecycle`] ([`BrokerRole::applied_offset_listener`]), which
//!    registers (listeners, features, `directory.id`s) and heartbeats until the controller
//!    unfences it;
//! 4. once the loader has caught up with the high watermark, the client listeners start
//!    serving (the binary calls [`BrokerRole::open_listeners`]).
//!
//! Shutdown (SIGTERM): controlled shutdown (heartbeats with `WantShutDown` until the controller
//! has moved leaderships away, Kafka's `BrokerLifecycleManager.beginControlledShutdown`), then
//! the listeners close and the broker flushes and checkpoints its logs; then the node stops
//! its loader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};
use krust_broker::server::apis::ClientApiHandler;
use krust_broker::server::forwarding::Forwarder;
use krust_broker::server::lifecycle::{
    BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT, BrokerLifecycle, BrokerState, LifecycleConfig,
};
use krust_broker::server::replica_manager::lock;
use krust_broker::server::{Broker, BrokerConfig, Endpoint};
use krust_metadata::image::MetadataPublisher;
use krust_metrics::{Collector, Family, prometheus_name};
use krust_node::loader::{AppliedOffsetListener, LoaderStats};
use krust_node::quorum_channel::QuorumChannel;
use krust_raft::config::VoterAddress;
use krust_raft::driver::RaftHandle;
use tracing::info;

use crate::config::ServerConfig;

/// How long a controlled shutdown waits for the controller before the broker stops anyway.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// `request.timeout.ms` default: bound of one registration/heartbeat through the channel.
const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Kafka's security protocol id of PLAINTEXT, the only one krust serves so far.
const PLAINTEXT: i16 = 0;

/// A bound broker listener.
#[derive(Debug)]
struct BrokerListener {
    name: String,
    bind: String,
}

/// The running broker role.
pub struct BrokerRole {
    broker: Arc<Broker>,
    lifecycle: Arc<BrokerLifecycle>,
    channel: Arc<QuorumChannel>,
    handler: Arc<ClientApiHandler>,
    /// The client listeners to open once the metadata caught up.
    listeners: Vec<(BrokerListener, krust_net::ServerConfig)>,
    servers: tokio::sync::Mutex<Vec<krust_net::Server>>,
    /// The node's metadata loader's stats.
    stats: Arc<LoaderStats>,
    /// The client-facing (first) listener's `host:port` as advertised.
    bootstrap: String,
}

impl std::fmt::Debug for BrokerRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerRole")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

/// A free loopback-or-given-host port: bind port 0, read it, release it. Racy in theory; the
/// listener binds it again at once.
fn free_port(host: &str) -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind((host, 0))
        .with_context(|| format!("finding a free port on {host}"))?;
    Ok(listener.local_addr()?.port())
}

/// Kafka's security protocol ids.
fn security_protocol_id(name: &str) -> Option<i16> {
    match name {
        "PLAINTEXT" => Some(PLAINTEXT),
        "SSL" => Some(1),
        "SASL_PLAINTEXT" => Some(2),
        "SASL_SSL" => Some(3),
        _ => None,
    }
}

/// The broker's listeners (bind addresses) and advertised endpoints, client-facing first.
fn broker_listeners(config: &ServerConfig) -> anyhow::Result<(Vec<BrokerListener>, Vec<Endpoint>)> {
    let controller_names: Vec<String> = config
        .controller_listener_names()
        .iter()
        .map(|n| n.to_uppercase())
        .collect();
    let protocols = config.effective_listener_security_protocol_map()?;
    let advertised = match config.get("advertised.listeners") {
        Some(v) => crate::config::listeners::parse_listeners(v)
            .map_err(crate::config::ConfigError::Invalid)?,
        None => Vec::new(),
    };
    let mut binds = Vec::new();
    let mut endpoints = Vec::new();
    for listener in config.listeners()? {
        if controller_names.contains(&listener.listener_name) {
            continue;
        }
        let protocol = protocols
            .get(&listener.listener_name)
            .map_or("PLAINTEXT", String::as_str);
        if protocol != "PLAINTEXT" {
            bail!(
                "listener {}: security protocol {protocol} is not supported by krust yet (PLAINTEXT only)",
                listener.listener_name
            );
        }
        let bind_host = listener
            .host
            .clone()
            .unwrap_or_else(|| "0.0.0.0".to_owned());
        let port = if listener.port == 0 {
            free_port(&bind_host)?
        } else {
            listener.port
        };
        let advertised_entry = advertised
            .iter()
            .find(|e| e.listener_name == listener.listener_name);
        let (host, advertised_port) = match advertised_entry {
            Some(e) => (e.host.clone(), if e.port == 0 { port } else { e.port }),
            None => (listener.host.clone(), port),
        };
        // Kafka advertises the canonical host name for an empty or wildcard host; krust uses
        // `localhost`, which every client on this machine can reach.
        let host = match host.as_deref() {
            None | Some("0.0.0.0" | "::" | "[::]") => "localhost".to_owned(),
            Some(h) => h.to_owned(),
        };
        binds.push(BrokerListener {
            name: listener.listener_name.clone(),
            bind: format!("{bind_host}:{port}"),
        });
        endpoints.push(Endpoint {
            name: listener.listener_name.clone(),
            host,
            port: advertised_port,
            security_protocol: security_protocol_id(protocol).unwrap_or(PLAINTEXT),
        });
    }
    if binds.is_empty() {
        bail!(
            "process.roles contains broker, but listeners has no listener outside controller.listener.names"
        );
    }
    Ok((binds, endpoints))
}

/// `inter.broker.listener.name`, else the listener of `security.inter.broker.protocol`
/// (default PLAINTEXT), as Kafka 3.9 `KafkaConfig.interBrokerListenerName`.
fn inter_broker_listener_name(
    config: &ServerConfig,
    endpoints: &[Endpoint],
) -> anyhow::Result<String> {
    let name = match config.get("inter.broker.listener.name") {
        Some(name) => name.trim().to_uppercase(),
        None => config
            .get("security.inter.broker.protocol")
            .unwrap_or("PLAINTEXT")
            .trim()
            .to_uppercase(),
    };
    if !endpoints.iter().any(|e| e.name == name) {
        bail!(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based on currently configured listeners are {}",
            endpoints
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(name)
}

/// The `directory.id` of each log dir's `meta.properties` (written by `kafka-storage format`).
fn log_dir_ids(log_dirs: &[PathBuf]) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut ids = Vec::new();
    for dir in log_dirs {
        let meta = super::read_meta_properties(dir)?;
        if let Some(id) = meta.directory_id {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// A client listener's limits from Kafka's keys (`socket.request.max.bytes`,
/// `max.connections`, `connections.max.idle.ms`; Kafka's defaults when unset).
fn listener_config(config: &ServerConfig, name: &str) -> anyhow::Result<krust_net::ServerConfig> {
    let defaults = krust_net::ServerConfig::default();
    let number = |key: &str, default: usize| -> anyhow::Result<usize> {
        match config.get(key) {
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => bail!("Invalid value {v} for configuration {key}: Value must be at least 1"),
            },
            None => Ok(default),
        }
    };
    Ok(krust_net::ServerConfig {
        listener_name: name.to_owned(),
        socket_request_max_bytes: number(
            "socket.request.max.bytes",
            defaults.socket_request_max_bytes,
        )?,
        max_connections: number("max.connections", defaults.max_connections)?,
        connections_max_idle: parse_ms(
            config,
            "connections.max.idle.ms",
            u64::try_from(defaults.connections_max_idle.as_millis()).unwrap_or(u64::MAX),
        )?,
        ..defaults
    })
}

fn parse_ms(config: &ServerConfig, key: &str, default: u64) -> anyhow::Result<Duration> {
    match config.get(key) {
        Some(v) => Ok(Duration::from_millis(
            v.trim()
                .parse::<u64>()
                .with_context(|| format!("{key}={v}"))?,
        )),
        None => Ok(Duration::from_millis(default)),
    }
}

impl BrokerRole {
    /// Starts the broker role over this node's Raft replica `raft`; `stats` are those of the
    /// node's metadata loader, with which [`Self::metadata_publishers`] and
    /// [`Self::applied_offset_listener`] must be registered.
    ///
    /// # Errors
    /// Bad listener settings, unformatted log dirs, a locked log dir, a bind failure.
    pub fn start(
        config: &ServerConfig,
        node_id: i32,
        cluster_id: &str,
        voters: &[VoterAddress],
        raft: &RaftHandle,
        stats: Arc<LoaderStats>,
    ) -> anyhow::Result<BrokerRole> {
        let (binds, endpoints) = broker_listeners(config)?;
        let inter_broker = inter_broker_listener_name(config, &endpoints)?;
        let log_dirs: Vec<PathBuf> = config.log_dirs().into_iter().map(PathBuf::from).collect();
        for dir in &log_dirs {
            // Each log dir must be formatted for this node and cluster, as the metadata dir.
            let meta = super::read_meta_properties(dir)?;
            if meta.cluster_id.as_deref() != Some(cluster_id) {
                bail!(
                    "Invalid cluster.id in: {}/meta.properties. Expected {cluster_id}, but read {}",
                    dir.display(),
                    meta.cluster_id.as_deref().unwrap_or("")
                );
            }
        }
        let properties: BTreeMap<String, String> = config
            .values()
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect();
        let broker_config = BrokerConfig {
            node_id,
            cluster_id: cluster_id.to_owned(),
            log_dirs: log_dirs.clone(),
            properties,
            advertised_listeners: endpoints.clone(),
            inter_broker_listener_name: inter_broker,
            rack: config.get("broker.rack").map(str::to_owned),
        };
        let channel = Arc::new(QuorumChannel::new(
            voters,
            raft,
            format!("broker-{node_id}-to-controller"),
        ));
        let forwarder = Forwarder::new(channel.clone()).with_timeout(parse_ms(
            config,
            "request.timeout.ms",
            REQUEST_TIMEOUT_MS_DEFAULT,
        )?);
        let broker = Broker::builder(broker_config.clone(), channel.clone())
            .with_replication()
            .with_groups()
            .with_forwarder(forwarder)
            .open()
            .context("opening the broker's log directories")?;
        let lifecycle = BrokerLifecycle::start(
            LifecycleConfig {
                node_id,
                cluster_id: cluster_id.to_owned(),
                incarnation_id: uuid::Uuid::new_v4(),
                listeners: endpoints.clone(),
                rack: broker_config.rack.clone(),
                log_dir_ids: log_dir_ids(&log_dirs)?,
                previous_broker_epoch: -1,
                heartbeat_interval: parse_ms(
                    config,
                    "broker.heartbeat.interval.ms",
                    BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT,
                )?,
                request_timeout: parse_ms(
                    config,
                    "request.timeout.ms",
                    REQUEST_TIMEOUT_MS_DEFAULT,
                )?,
            },
            channel.clone(),
        );
        let handler = Arc::new(broker.client_handler());
        let listeners = binds
            .into_iter()
            .map(|listener| {
                let net_config = listener_config(config, &listener.name)?;
                Ok((listener, net_config))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let bootstrap = endpoints
            .first()
            .map(|e| format!("{}:{}", e.host, e.port))
            .unwrap_or_default();
        Ok(BrokerRole {
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
    /// [`Broker::metadata_publishers`]).
    #[must_use]
    pub fn metadata_publishers(&self) -> Vec<Box<dyn MetadataPublisher>> {
        self.broker.metadata_publishers()
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
    /// A listener's address cannot be bound.
    pub async fn open_listeners(&self) -> anyhow::Result<()> {
        let mut servers = self.servers.lock().await;
        if !servers.is_empty() {
            return Ok(());
        }
        for (listener, net_config) in &self.listeners {
            let server =
                krust_net::Server::bind(&listener.bind, self.handler.clone(), net_config.clone())
                    .await
                    .with_context(|| {
                        format!(
                            "binding the broker listener {} ({})",
                            listener.bind, listener.name
                        )
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

    /// The broker's metrics for `/metrics`: this module's gauges and the client listener's
    /// request metrics (`BrokerTopicMetrics`, `RequestMetrics`, from the broker core).
    #[must_use]
    pub fn metrics_collectors(&self) -> Vec<Arc<dyn Collector>> {
        let client: Arc<dyn Collector> = self.broker.client_stats().clone();
        vec![
            Arc::new(BrokerMetrics {
                broker: self.broker.clone(),
                lifecycle: self.lifecycle.clone(),
                stats: self.stats.clone(),
            }),
            client,
        ]
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
/// `UnderReplicatedPartitions`, `UnderMinIsrPartitionCount` and the `IsrShrinksPerSec` /
/// `IsrExpandsPerSec` / `FailedIsrUpdatesPerSec` counts, and the
/// `broker-metadata-metrics` group's `last-applied-record-offset` and
/// `metadata-load-error-count`, plus krust's `fenced` gauge (1 while the controller keeps the
/// broker fenced).
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

/// Whether `dir` holds `meta.properties` (used by `krust dev` to decide whether to format).
#[must_use]
pub fn is_formatted(dir: &Path) -> bool {
    dir.join("meta.properties").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ServerConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("server.properties");
        std::fs::write(&path, text).expect("write");
        ServerConfig::load(&path).expect("load")
    }

    const BASE: &str = "process.roles=broker\nnode.id=4\ncontroller.listener.names=CONTROLLER\n\
                        controller.quorum.voters=1@127.0.0.1:9093\n";

    #[test]
    fn broker_listeners_skip_the_controller_listener_and_follow_advertised_listeners() {
        let c = config(&format!(
            "{BASE}listeners=PLAINTEXT://:19092,CONTROLLER://127.0.0.1:9093\n\
             advertised.listeners=PLAINTEXT://broker4.example:29092\n"
        ));
        let (binds, endpoints) = broker_listeners(&c).expect("listeners");
        assert_eq!(binds.len(), 1);
        assert_eq!(binds[0].bind, "0.0.0.0:19092");
        assert_eq!(
            endpoints,
            vec![Endpoint {
                name: "PLAINTEXT".to_owned(),
                host: "broker4.example".to_owned(),
                port: 29092,
                security_protocol: PLAINTEXT,
            }]
        );
        assert_eq!(
            inter_broker_listener_name(&c, &endpoints).expect("inter-broker"),
            "PLAINTEXT"
        );
    }

    #[test]
    fn listener_limits_come_from_kafkas_keys() {
        let c = config(&format!(
            "{BASE}socket.request.max.bytes=1048576\nmax.connections=10\nconnections.max.idle.ms=5000\n"
        ));
        let net = listener_config(&c, "PLAINTEXT").expect("limits");
        assert_eq!(net.socket_request_max_bytes, 1_048_576);
        assert_eq!(net.max_connections, 10);
        assert_eq!(net.connections_max_idle, Duration::from_secs(5));
        let defaults = listener_config(&config(BASE), "PLAINTEXT").expect("defaults");
        assert_eq!(
            defaults.socket_request_max_bytes,
            krust_net::SOCKET_REQUEST_MAX_BYTES_DEFAULT
        );
        let bad = config(&format!("{BASE}max.connections=0\n"));
        let err = listener_config(&bad, "PLAINTEXT").expect_err("zero");
        assert!(err.to_string().contains("max.connections"), "{err}");
    }

    #[test]
    fn a_zero_port_is_advertised_as_the_port_actually_used() {
        let c = config(&format!("{BASE}listeners=PLAINTEXT://127.0.0.1:0\n"));
        let (binds, endpoints) = broker_listeners(&c).expect("listeners");
        assert_ne!(endpoints[0].port, 0);
        assert_eq!(binds[0].bind, format!("127.0.0.1:{}", endpoints[0].port));
        assert_eq!(endpoints[0].host, "127.0.0.1");
    }

    #[test]
    fn bad_broker_listener_settings_are_clear_errors() {
        let only_controller = config(&format!("{BASE}listeners=CONTROLLER://127.0.0.1:9093\n"));
        let err = broker_listeners(&only_controller).expect_err("no broker listener");
        assert!(err.to_string().contains("no listener outside"), "{err}");
        let ssl = config(&format!(
            "{BASE}listeners=SSL://127.0.0.1:9094\nlistener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT\n"
        ));
        let err = broker_listeners(&ssl).expect_err("SSL is refused");
        assert!(err.to_string().contains("not supported"), "{err}");
        let c = config(&format!(
            "{BASE}listeners=PLAINTEXT://127.0.0.1:9092\ninter.broker.listener.name=INTERNAL\n"
        ));
        let (_, endpoints) = broker_listeners(&c).expect("listeners");
        let err = inter_broker_listener_name(&c, &endpoints).expect_err("unknown listener");
        assert!(
            err.to_string().contains("inter.broker.listener.name"),
            "{err}"
        );
    }
}
