//! `krust server <server.properties>`: a KRaft node with `process.roles` = `controller`,
//! `broker` or both (combined). Every node runs the Raft driver over
//! `<metadata.log.dir>/__cluster_metadata-0` (a voter when it is in
//! `controller.quorum.voters`, else an observer).
//!
//! The node runtime is `krust-node`'s; this module reads the configuration and wires it:
//!
//! - Controller role: the controller server (`krust_node::controller::ControllerServer`, its
//!   settings from [`controller`]) replaying committed batches and, while active, writing
//!   records, and the controller listener (`krust_node::controller::listener`) serving the
//!   Raft RPCs and the controller APIs. With the `--test-append-socket` hook the test owns
//!   the log's contents: no controller server or loader runs and committed batches are only
//!   counted.
//! - Broker role: the broker server (`krust_node::broker::BrokerServer`, its settings from
//!   [`broker`]): the `krust-broker` runtime, registration/heartbeats and forwarding through
//!   `krust_node::quorum_channel::QuorumChannel`, the client listeners.
//! - Every node runs one metadata loader (`krust_node::loader::MetadataLoaderTask`, Kafka's
//!   `SharedServer` loader) with the publishers of its roles registered at start: the
//!   controller server's first, then the broker's. A load fault stops a node with the
//!   controller role and is counted on a broker-only node.
//! - With the controller role, the driver's events are copied to the controller task and the
//!   loader.
//!
//! Lifecycle, as Kafka's `KafkaRaftServer`: check `meta.properties`, start the replica and the
//! listeners, log `[KafkaRaftServer nodeId=N] Kafka Server started` (a broker: once the
//! controller has unfenced it); on SIGTERM/SIGINT a broker shuts down in a controlled way
//! first (the controller moves its leaderships away), then the replica resigns if it leads
//! (EndQuorumEpoch, so the others elect at once instead of waiting for a fetch timeout),
//! flushes, and the process exits 0.

pub mod broker;
pub mod controller;
pub mod key_stores;
pub mod metrics_http;
pub mod migration;
pub mod security;
pub mod test_writer;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};
use krust_log::LogConfig;
use krust_metadata::meta_properties::MetaProperties;
use krust_node::broker::BrokerServer;
use krust_node::controller::{ControllerNode, ControllerServer, listener};
use krust_node::loader::{LoaderFaultPolicy, LoaderStats, MetadataLoaderTask, SnapshotWriter};
use krust_node::migration::publisher::MigrationPublisher;
use krust_raft::NodeId;
use krust_raft::config::{RaftConfig, parse_quorum_voters};
use krust_raft::driver::{DriverConfig, DriverExit, MetadataLogConfig, RaftDriver, RaftEvent};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::config::{ProcessRole, ServerConfig};

/// `metadata.log.segment.bytes` default (1 GiB).
const METADATA_LOG_SEGMENT_BYTES_DEFAULT: u32 = 1024 * 1024 * 1024;
/// Kafka's floor for `metadata.log.segment.bytes` (`metadata.log.segment.min.bytes`, 8 MiB).
const METADATA_LOG_SEGMENT_MIN_BYTES: u32 = 8 * 1024 * 1024;
/// Committed-batch events buffered between the driver and the replay task.
const EVENT_QUEUE: usize = 1024;

/// Options of `krust server`.
#[derive(Debug, Clone)]
pub struct ServerArgs {
    /// `server.properties`.
    pub config: PathBuf,
    /// `--override key=value` pairs, over the file's values (`kafka-server-start.sh`).
    pub overrides: Vec<(String, String)>,
    /// Test hook: serve appends on this Unix socket (see [`test_writer`]).
    pub test_append_socket: Option<PathBuf>,
    /// Print `<banner> ready: bootstrap.servers=<host:port>` once the broker is unfenced
    /// (`krust dev`).
    pub ready_banner: Option<String>,
}

/// Runs the server until SIGTERM/SIGINT; returns the exit code.
///
/// # Errors
/// Configuration, storage or bind failures (with context).
pub fn run_server(args: &ServerArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

struct NodeSetup {
    node_id: i32,
    cluster_id: String,
    roles: BTreeSet<ProcessRole>,
    driver: DriverConfig,
    /// The controller listener's name and bind address (controller role only).
    controller_listener: Option<(String, String)>,
    /// The controller listener's security protocol (the first of `controller.listener.names`).
    controller_protocol: String,
    metadata_dir: PathBuf,
}

impl NodeSetup {
    fn is_controller(&self) -> bool {
        self.roles.contains(&ProcessRole::Controller)
    }
    fn is_broker(&self) -> bool {
        self.roles.contains(&ProcessRole::Broker)
    }
}

fn setup(config: &ServerConfig) -> anyhow::Result<NodeSetup> {
    config.validate()?;
    let roles = config.process_roles()?;
    if roles.is_empty() {
        bail!(
            "krust server runs KRaft nodes only: set process.roles to broker, controller or both"
        );
    }
    let node_id = config.node_id()?;
    let metadata_dir = config
        .metadata_log_dir()
        .or_else(|| config.log_dirs().into_iter().next())
        .context("neither metadata.log.dir nor log.dirs is set")?;
    let meta = read_meta_properties(Path::new(&metadata_dir))?;
    let stored_node = meta.node_id.unwrap_or(-1);
    if stored_node != node_id {
        bail!(
            "Stored node id {stored_node} doesn't match previous node id {node_id} in {metadata_dir}/meta.properties. If you moved your data, make sure your configured node id matches. If you intend to create a new node, you should remove all data in your data directories."
        );
    }
    let cluster_id = meta
        .cluster_id
        .clone()
        .with_context(|| format!("{metadata_dir}/meta.properties has no cluster.id"))?;
    let props: BTreeMap<String, String> = config
        .values()
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    let raft = RaftConfig::from_properties(NodeId(node_id), cluster_id.clone(), &props)
        .context("controller.quorum.* settings")?;
    let voters = parse_quorum_voters(props.get("controller.quorum.voters").map_or("", |v| v))
        .context("controller.quorum.voters")?;
    let is_voter = voters.iter().any(|v| v.id.0 == node_id);
    let controller_listener = if roles.contains(&ProcessRole::Controller) {
        if !is_voter {
            bail!(
                "If process.roles contains controller, the node id {node_id} must be included in the set of voters controller.quorum.voters"
            );
        }
        let listener = config
            .controller_listeners()?
            .into_iter()
            .next()
            .context("no listener named by controller.listener.names is in listeners")?;
        let bind = format!(
            "{}:{}",
            listener.host.as_deref().unwrap_or("0.0.0.0"),
            listener.port
        );
        Some((listener.listener_name.clone(), bind))
    } else {
        if is_voter {
            bail!(
                "If process.roles contains just the 'broker' role, the node id {node_id} must not be included in the set of voters controller.quorum.voters"
            );
        }
        None
    };
    // Every node's connections to controllers (Raft RPCs, registration, heartbeats,
    // forwarding) are secured as the controller listener is.
    let (controller_protocol, controller_security) = security::controller_client(config)?;
    let segment_bytes = match config.get("metadata.log.segment.bytes") {
        Some(v) => v
            .trim()
            .parse::<u32>()
            .with_context(|| format!("metadata.log.segment.bytes={v}"))?
            .max(METADATA_LOG_SEGMENT_MIN_BYTES),
        None => METADATA_LOG_SEGMENT_BYTES_DEFAULT,
    };
    let log_config = LogConfig {
        segment_bytes,
        // The KRaft layer, not log retention, reclaims metadata log space (facts §4.1, §4.5).
        retention_ms: -1,
        retention_bytes: -1,
        max_message_bytes: 8 * 1024 * 1024,
        ..LogConfig::default()
    };
    Ok(NodeSetup {
        node_id,
        cluster_id,
        roles,
        controller_listener,
        controller_protocol,
        metadata_dir: PathBuf::from(&metadata_dir),
        driver: DriverConfig {
            raft,
            voters,
            partition_dir: Path::new(&metadata_dir).join("__cluster_metadata-0"),
            log_config,
            rng_seed: None,
            metadata_log: metadata_log_config(config)?,
            client_security: controller_security,
        },
    })
}

/// Snapshot triggers and metadata retention (Kafka's names; unset keys keep Kafka's defaults).
fn metadata_log_config(config: &ServerConfig) -> anyhow::Result<MetadataLogConfig> {
    fn parse<T: krust_config::FromConfigValue>(
        config: &ServerConfig,
        key: &str,
        default: T,
    ) -> anyhow::Result<T> {
        Ok(config.typed(key, default)?)
    }
    let d = MetadataLogConfig::default();
    Ok(MetadataLogConfig {
        max_record_bytes_between_snapshots: parse(
            config,
            "metadata.log.max.record.bytes.between.snapshots",
            d.max_record_bytes_between_snapshots,
        )?,
        max_snapshot_interval_ms: parse(
            config,
            "metadata.log.max.snapshot.interval.ms",
            d.max_snapshot_interval_ms,
        )?,
        max_retention_bytes: parse(
            config,
            "metadata.max.retention.bytes",
            d.max_retention_bytes,
        )?,
        max_retention_ms: parse(config, "metadata.max.retention.ms", d.max_retention_ms)?,
        retention_check_interval_ms: parse(
            config,
            "log.retention.check.interval.ms",
            d.retention_check_interval_ms,
        )?,
    })
}

fn read_meta_properties(dir: &Path) -> anyhow::Result<MetaProperties> {
    let path = dir.join("meta.properties");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "No `meta.properties` found in {} (have you run `kafka-storage.sh` to format the directory?)",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    MetaProperties::parse(&krust_metadata::properties::decode_text(&bytes))
        .with_context(|| format!("parsing {}", path.display()))
}

async fn serve(args: &ServerArgs) -> anyhow::Result<i32> {
    let config = ServerConfig::load(&args.config)?.with_overrides(&args.overrides);
    let node = setup(&config)?;
    if args.test_append_socket.is_some() && node.is_broker() {
        bail!("--test-append-socket is for process.roles=controller only");
    }
    let prefix = format!("[KafkaRaftServer nodeId={}]", node.node_id);
    let (is_controller, is_broker) = (node.is_controller(), node.is_broker());
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let voters = node.driver.voters.clone();
    let controller_client_security = node.driver.client_security.clone();
    // The SCRAM credentials of the newest image, for SASL listeners (the controller's too).
    let scram_credentials = Arc::new(security::ImageScramCredentials::default());
    let partition_dir = node.driver.partition_dir.clone();
    let snapshot_triggers = node.driver.metadata_log;
    // Without the test hook, the quorum controller owns what is written to the log.
    let controller_config = match (&args.test_append_socket, is_controller) {
        (None, true) => Some(controller::quorum_controller_config(
            &config,
            node.node_id,
            &node.cluster_id,
            &node.metadata_dir,
        )?),
        _ => None,
    };
    let driver =
        RaftDriver::start(node.driver, Some(events_tx)).context("starting the KRaft replica")?;
    let raft = driver.handle();
    // The driver has one listener. With a controller server, its events are copied to the
    // controller task and to the node's metadata loader; a broker-only node has the loader
    // only; the test hook counts them.
    let committed = Arc::new(AtomicU64::new(0));
    let (controller_events, loader_events, replay) = match (&controller_config, is_broker) {
        (Some(_), _) => {
            let (controller_tx, controller_rx) = mpsc::channel(EVENT_QUEUE);
            let (loader_tx, loader_rx) = mpsc::channel(EVENT_QUEUE);
            tokio::spawn(fan_out(events_rx, controller_tx, loader_tx));
            (Some(controller_rx), Some(loader_rx), None)
        }
        (None, true) => (None, Some(events_rx), None),
        (None, false) => (
            None,
            None,
            Some(tokio::spawn(replay_committed(events_rx, committed.clone()))),
        ),
    };
    let zk_migration_enabled = controller_config
        .as_ref()
        .is_some_and(|c| c.zk_migration_enabled);
    let migration = match &controller_config {
        Some(c) if c.zk_migration_enabled => Some(migration::settings(
            &config,
            c.bootstrap.metadata_version(),
        )?),
        _ => None,
    };
    let mut migration_events = None;
    let zk_write_behind = Arc::new(std::sync::atomic::AtomicI64::new(0));
    // The controller listener's authorizer (Kafka's `ControllerApis` authorizes too), kept
    // current by its own ACL publisher.
    let controller_authorizer = match (&controller_config, broker::authorizer_config(&config)?) {
        (Some(_), Some(settings)) => Some(Arc::new(
            krust_broker::server::authz::BrokerAuthorizer::new(settings),
        )),
        _ => None,
    };
    let (controller, controller_publishers) = match (controller_config, controller_events) {
        (Some(qc_config), Some(events)) => {
            let qc = krust_controller::QuorumController::new(qc_config, rand::random())
                .with_admin_config(controller::admin_config(&config)?);
            let (listener_name, _) = node.controller_listener.clone().unwrap_or_default();
            let mut builder = ControllerServer::builder(
                qc,
                ControllerNode {
                    node_id: node.node_id,
                    listener_name,
                    voters: voters.clone(),
                    partition_dir: partition_dir.clone(),
                    security_protocol: broker::security_protocol_id(&node.controller_protocol)
                        .unwrap_or(0),
                    client_security: controller_client_security.clone(),
                },
                raft.clone(),
            )
            .with_snapshot_triggers(&snapshot_triggers);
            if migration.is_some() {
                let (publisher, events) = MigrationPublisher::new();
                builder = builder
                    .with_publisher(Box::new(publisher))
                    .with_zk_write_behind(zk_write_behind.clone());
                migration_events = Some(events);
            }
            if let Some(authorizer) = &controller_authorizer {
                builder = builder.with_publisher(Box::new(
                    krust_broker::server::authz::AclPublisher::new(Arc::clone(authorizer)),
                ));
            }
            let (server, publishers) = builder.start(events);
            (Some(server), publishers)
        }
        _ => (None, Vec::new()),
    };
    let migration_task = match (migration, migration_events, &controller) {
        (Some(settings), Some(events), Some(server)) => {
            let voter_ids = voters.iter().map(|v| v.id.0).collect();
            let (task, metrics) = migration::start(
                settings,
                node.cluster_id.clone(),
                node.node_id,
                voter_ids,
                server.channel().clone(),
                events,
                zk_write_behind.clone(),
            );
            Some((task, metrics))
        }
        _ => None,
    };
    let (migration_task, migration_metrics) = match migration_task {
        Some((task, metrics)) => (Some(task), Some(metrics)),
        None => (None, None),
    };
    let mut controller_server = None;
    // The controller listener's `controller_mutation_rate` sensors, for `/metrics`.
    let mut mutation_quotas = None;
    if let Some((listener_name, bind)) = &node.controller_listener {
        let apis = if controller.is_some() {
            listener::controller_apis_with_controller()
        } else {
            listener::controller_apis()
        }
        .context("controller API table")?;
        let mut handler = listener::ControllerHandler::new(
            apis,
            raft.clone(),
            node.cluster_id.clone(),
            listener_name.clone(),
            voters.clone(),
        );
        if let Some(controller) = &controller {
            handler = handler
                .with_controller(controller.channel().clone())
                .with_zk_migration_ready(zk_migration_enabled)
                .with_node_config(node.node_id, config.kafka_config()?.originals().clone());
            if let Some(authorizer) = &controller_authorizer {
                handler = handler.with_authorizer(Arc::clone(authorizer));
            }
        }
        if controller.is_some() {
            mutation_quotas = Some(handler.mutation_quotas());
        }
        let handler = Arc::new(handler);
        // The controller listener's limits and security (TLS and SASL as on a broker
        // listener, from its `listener.name.<l>.*` keys).
        let net_config = krust_net::ServerConfig {
            listener_name: listener_name.clone(),
            // Raft RPCs are independent; a parked Fetch must not hold up a Vote on one connection.
            max_in_flight_requests_per_connection: 8,
            ..broker::listener_config(
                &config,
                listener_name,
                &node.controller_protocol,
                &scram_credentials,
            )?
        };
        let server = krust_net::Server::bind(bind, handler, net_config)
            .await
            .with_context(|| format!("binding the controller listener {bind}"))?;
        info!(node_id = node.node_id, listener = %server.local_addr(), cluster_id = %node.cluster_id, "controller listener started");
        controller_server = Some(server);
    }
    let loader_stats = Arc::new(LoaderStats::default());
    let broker_role = if is_broker {
        Some(BrokerServer::start(
            broker::broker_server_config(
                &config,
                node.node_id,
                &node.cluster_id,
                &scram_credentials,
            )?,
            &voters,
            &raft,
            loader_stats.clone(),
        )?)
    } else {
        None
    };
    // One loader per node, its publishers registered before it loads anything: the
    // controller server's, then the broker's (Kafka's `SharedServer`).
    let loader = loader_events.map(|events| {
        let policy = if is_controller {
            LoaderFaultPolicy::Fatal
        } else {
            LoaderFaultPolicy::Count
        };
        let scram_publisher: Box<dyn krust_metadata::image::MetadataPublisher> = Box::new(
            security::ScramCredentialsPublisher(scram_credentials.clone()),
        );
        let mut loader =
            MetadataLoaderTask::builder(&raft, partition_dir.clone(), loader_stats.clone(), policy)
                .with_publishers(controller_publishers)
                .with_publishers(vec![scram_publisher]);
        if let Some(role) = &broker_role {
            loader = loader
                .with_publishers(role.metadata_publishers())
                .on_applied(role.applied_offset_listener());
        }
        if !is_controller {
            // Broker-only: nobody else writes snapshots of this node's metadata log.
            loader = loader.with_snapshots(SnapshotWriter::new(raft.clone(), &snapshot_triggers));
        }
        loader.spawn(events)
    });
    let writer = match &args.test_append_socket {
        Some(path) => Some(
            test_writer::TestWriter::bind(path, raft.clone())
                .with_context(|| format!("binding the test append socket {}", path.display()))?,
        ),
        None => None,
    };
    let metrics_bind = match (&node.controller_listener, &broker_role) {
        (Some((_, bind)), _) => bind.clone(),
        (None, Some(role)) => role.bootstrap().to_owned(),
        (None, None) => "127.0.0.1:0".to_owned(),
    };
    let mut extra_collectors: Vec<Arc<dyn krust_metrics::Collector>> = broker_role
        .iter()
        .flat_map(BrokerServer::metrics_collectors)
        .collect();
    if let Some(metrics) = migration_metrics {
        extra_collectors.push(Arc::new(metrics));
    }
    if let Some(quotas) = mutation_quotas {
        extra_collectors.push(quotas);
    }
    let metrics = metrics_http::start(&config, &metrics_bind, &raft, extra_collectors).await?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    if broker_role.is_none() {
        info!(node_id = node.node_id, cluster_id = %node.cluster_id, "{prefix} Kafka Server started");
        println!("{prefix} Kafka Server started (kafka.server.KafkaRaftServer)");
    }
    let controller_failed = async {
        match controller {
            Some(server) => match server.join().await {
                Ok(()) => std::future::pending().await,
                Err(e) => format!("{:#}", anyhow::Error::from(e)),
            },
            None => std::future::pending().await,
        }
    };
    tokio::pin!(controller_failed);
    let migration_failed = async {
        match migration_task {
            Some(task) => match task.await {
                Ok(reason) => reason,
                Err(e) => format!("the migration task panicked: {e}"),
            },
            None => std::future::pending().await,
        }
    };
    tokio::pin!(migration_failed);
    let loader_abort = loader.as_ref().map(tokio::task::JoinHandle::abort_handle);
    let loader_failed = async {
        match loader {
            Some(task) => match task.await {
                Ok(Ok(())) => std::future::pending().await,
                Ok(Err(e)) => format!("{:#}", anyhow::Error::from(e)),
                Err(e) => format!("the metadata loader panicked: {e}"),
            },
            None => std::future::pending().await,
        }
    };
    tokio::pin!(loader_failed);
    let driver_exit = driver.join();
    tokio::pin!(driver_exit);
    // A broker opens its client listeners once its metadata caught up, and is started (Kafka
    // logs "Kafka Server started") once the controller unfenced it.
    let mut listening = broker_role.is_none();
    let mut announced = broker_role.is_none();
    let exit = loop {
        let caught_up = async {
            match &broker_role {
                Some(role) if !listening => role.wait_until_caught_up().await,
                _ => std::future::pending().await,
            }
        };
        let running = async {
            match &broker_role {
                Some(role) if listening && !announced => role.wait_until_running().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = caught_up => {
                listening = true;
                if let Some(role) = &broker_role
                    && let Err(e) = role.open_listeners().await
                {
                    break Some(DriverExit::Failed(format!("{:#}", anyhow::Error::from(e))));
                }
            }
            () = running => {
                announced = true;
                info!(node_id = node.node_id, cluster_id = %node.cluster_id, "{prefix} Kafka Server started");
                println!("{prefix} Kafka Server started (kafka.server.KafkaRaftServer)");
                if let (Some(role), Some(banner)) = (&broker_role, &args.ready_banner) {
                    println!("{banner} ready: bootstrap.servers={}", role.bootstrap());
                }
            }
            _ = sigterm.recv() => break None,
            _ = sigint.recv() => break None,
            exit = &mut driver_exit => break Some(exit),
            reason = &mut controller_failed => break Some(DriverExit::Failed(format!("the controller failed: {reason}"))),
            reason = &mut loader_failed => break Some(DriverExit::Failed(format!("the metadata loader failed: {reason}"))),
            reason = &mut migration_failed => break Some(DriverExit::Failed(format!("the ZooKeeper migration failed: {reason}"))),
        }
    };
    println!("{prefix} shutting down");
    drop(writer);
    drop(metrics);
    // The broker first: its controlled shutdown needs the controller and the replica.
    if let Some(role) = broker_role {
        role.shutdown().await;
        // Nothing more to publish to the broker.
        if let Some(loader) = &loader_abort {
            loader.abort();
        }
    }
    let code = match exit {
        None => {
            // Graceful: resign (EndQuorumEpoch) while the listener still answers, then stop.
            raft.shutdown().await;
            0
        }
        Some(DriverExit::Shutdown) => 0,
        Some(DriverExit::Failed(reason)) => {
            eprintln!("{prefix} the KRaft replica failed: {reason}");
            1
        }
    };
    if let Some(server) = controller_server {
        server.shutdown().await;
    }
    match replay {
        // The test hook's counter.
        Some(replay) => {
            let _ = replay.await;
            println!(
                "{prefix} shut down completed; replayed {} committed batches",
                committed.load(Ordering::Relaxed)
            );
        }
        None => println!("{prefix} shut down completed"),
    }
    Ok(code)
}

/// Copies every driver event to the controller task and the node's metadata loader. Stops
/// when the driver or both consumers are gone.
async fn fan_out(
    mut events: mpsc::Receiver<RaftEvent>,
    controller: mpsc::Sender<RaftEvent>,
    loader: mpsc::Sender<RaftEvent>,
) {
    while let Some(event) = events.recv().await {
        let to_controller = controller.send(event.clone()).await.is_ok();
        let to_loader = loader.send(event).await.is_ok();
        if !to_controller && !to_loader {
            return;
        }
    }
}

/// Consumes committed batches. No controller logic yet: count them, log each at debug.
async fn replay_committed(mut events: mpsc::Receiver<RaftEvent>, committed: Arc<AtomicU64>) {
    while let Some(event) = events.recv().await {
        match event {
            RaftEvent::Commit(batches) => {
                for batch in &batches {
                    debug!(
                        base_offset = batch.base_offset(),
                        last_offset = batch.last_offset(),
                        control = batch.is_control(),
                        "replayed committed batch"
                    );
                }
                committed.fetch_add(batches.len() as u64, Ordering::Relaxed);
            }
            RaftEvent::LeaderChange { leader, epoch } => {
                info!(leader = ?leader.map(|l| l.0), epoch = epoch.0, "new quorum leader");
            }
            RaftEvent::SnapshotInstalled(id) => info!(snapshot = %id, "loaded snapshot"),
        }
    }
}
