//! `krust server <server.properties>`: a KRaft node. For now the controller role only: the
//! Raft driver over `<metadata.log.dir>/__cluster_metadata-0`, the quorum controller task
//! ([`controller`]) replaying committed batches and, while active, writing records, and the
//! controller listener serving the Raft RPCs and the controller APIs. With the
//! `--test-append-socket` hook the test owns the log's contents: no controller task runs and
//! committed batches are only counted.
//!
//! Lifecycle, as Kafka's `KafkaRaftServer`: check `meta.properties`, start the replica and the
//! listener, log `[KafkaRaftServer nodeId=N] Kafka Server started`; on SIGTERM/SIGINT the
//! replica resigns if it leads (EndQuorumEpoch, so the others elect at once instead of waiting
//! for a fetch timeout), flushes, and the process exits 0.

pub mod controller;
pub mod listener;
pub mod metrics_http;
pub mod test_writer;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};
use krust_log::LogConfig;
use krust_metadata::meta_properties::MetaProperties;
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
    /// Test hook: serve appends on this Unix socket (see [`test_writer`]).
    pub test_append_socket: Option<PathBuf>,
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
    driver: DriverConfig,
    listener_name: String,
    bind: String,
    metadata_dir: PathBuf,
}

fn setup(config: &ServerConfig) -> anyhow::Result<NodeSetup> {
    config.validate()?;
    let roles = config.process_roles()?;
    if roles != BTreeSet::from([ProcessRole::Controller]) {
        bail!("krust server supports only process.roles=controller so far");
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
        listener_name: listener.listener_name.clone(),
        bind,
        metadata_dir: PathBuf::from(&metadata_dir),
        driver: DriverConfig {
            raft,
            voters,
            partition_dir: Path::new(&metadata_dir).join("__cluster_metadata-0"),
            log_config,
            rng_seed: None,
            metadata_log: metadata_log_config(config)?,
        },
    })
}

/// Snapshot triggers and metadata retention (Kafka's names; unset keys keep Kafka's defaults).
fn metadata_log_config(config: &ServerConfig) -> anyhow::Result<MetadataLogConfig> {
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
    let config = ServerConfig::load(&args.config)?;
    let node = setup(&config)?;
    let prefix = format!("[KafkaRaftServer nodeId={}]", node.node_id);
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let voters = node.driver.voters.clone();
    let partition_dir = node.driver.partition_dir.clone();
    let snapshot_triggers = node.driver.metadata_log;
    // Without the test hook, the quorum controller owns what is written to the log.
    let controller_config = match &args.test_append_socket {
        None => Some(controller::quorum_controller_config(
            &config,
            node.node_id,
            &node.cluster_id,
            &node.metadata_dir,
        )?),
        Some(_) => None,
    };
    let driver =
        RaftDriver::start(node.driver, Some(events_tx)).context("starting the KRaft replica")?;
    let raft = driver.handle();
    let committed = Arc::new(AtomicU64::new(0));
    let (replay, controller_task, channel) = match controller_config {
        Some(qc_config) => {
            let qc = krust_controller::QuorumController::new(qc_config, rand::random());
            let (channel, task) = controller::spawn(
                qc,
                controller::ControllerNode {
                    node_id: node.node_id,
                    listener_name: node.listener_name.clone(),
                    voters: voters.clone(),
                    partition_dir,
                },
                raft.clone(),
                events_rx,
                &snapshot_triggers,
            );
            (None, Some(task), Some(channel))
        }
        None => (
            Some(tokio::spawn(replay_committed(events_rx, committed.clone()))),
            None,
            None,
        ),
    };
    let apis = if channel.is_some() {
        listener::controller_apis_with_controller()
    } else {
        listener::controller_apis()
    }
    .context("controller API table")?;
    let mut handler = listener::ControllerHandler::new(
        apis,
        raft.clone(),
        node.cluster_id.clone(),
        node.listener_name.clone(),
        voters,
    );
    if let Some(channel) = channel {
        handler = handler.with_controller(channel);
    }
    let handler = Arc::new(handler);
    let net_config = krust_net::ServerConfig {
        listener_name: node.listener_name.clone(),
        // Raft RPCs are independent; a parked Fetch must not hold up a Vote on one connection.
        max_in_flight_requests_per_connection: 8,
        ..krust_net::ServerConfig::default()
    };
    let server = krust_net::Server::bind(&node.bind, handler, net_config)
        .await
        .with_context(|| format!("binding the controller listener {}", node.bind))?;
    let writer = match &args.test_append_socket {
        Some(path) => Some(
            test_writer::TestWriter::bind(path, raft.clone())
                .with_context(|| format!("binding the test append socket {}", path.display()))?,
        ),
        None => None,
    };
    let metrics = metrics_http::start(&config, &node.bind, &raft).await?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    info!(node_id = node.node_id, listener = %server.local_addr(), cluster_id = %node.cluster_id, "{prefix} Kafka Server started");
    println!("{prefix} Kafka Server started (kafka.server.KafkaRaftServer)");
    let controller_failed = async {
        match controller_task {
            Some(task) => match task.await {
                Ok(Ok(())) => std::future::pending().await,
                Ok(Err(e)) => format!("{:#}", anyhow::Error::from(e)),
                Err(e) => format!("the controller task panicked: {e}"),
            },
            None => std::future::pending().await,
        }
    };
    let exit = tokio::select! {
        _ = sigterm.recv() => None,
        _ = sigint.recv() => None,
        exit = driver.join() => Some(exit),
        reason = controller_failed => Some(DriverExit::Failed(format!("the controller failed: {reason}"))),
    };
    println!("{prefix} shutting down");
    drop(writer);
    drop(metrics);
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
    server.shutdown().await;
    if let Some(replay) = replay {
        let _ = replay.await;
    }
    println!(
        "{prefix} shut down completed; replayed {} committed batches",
        committed.load(Ordering::Relaxed)
    );
    Ok(code)
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
