//! The ZooKeeper migration on a controller node (`zookeeper.metadata.migration.enable=true`):
//! the settings read from `server.properties` and the migration task started beside the
//! controller server (Kafka's `ControllerServer` creates a `KRaftMigrationDriver` the same
//! way).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use krust_metadata::MetadataVersion;
use krust_migration::driver::{MigrationDriver, MigrationDriverConfig};
use krust_migration::kafka_seams::{KafkaPropagator, KafkaZkReader, KafkaZkWriter, KraftEpoch};
use krust_node::controller::ControllerChannel;
use krust_node::migration::metrics::MigrationMetrics;
use krust_node::migration::publisher::MetadataEvent;
use krust_node::migration::runtime::{MigrationStatusHandle, MigrationTask};
use krust_zk::client::{ZkClient, ZkClientConfig};
use krust_zk::model::password::PasswordEncoder;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::ServerConfig;

/// Pause between attempts to reach ZooKeeper at start-up.
const ZK_CONNECT_RETRY: Duration = Duration::from_secs(1);

/// What the migration needs from `server.properties`.
#[derive(Debug, Clone)]
pub struct MigrationSettings {
    /// `zookeeper.connect` and the `zookeeper.*` session settings.
    pub zk: ZkClientConfig,
    /// `zookeeper.metadata.migration.min.batch.size`.
    pub min_batch_size: usize,
    /// The ZooKeeper brokers' listener the controller sends LeaderAndIsr / UpdateMetadata /
    /// StopReplica to: `inter.broker.listener.name`, else the name of
    /// `security.inter.broker.protocol` (Kafka's `interBrokerListenerName`).
    pub inter_broker_listener: String,
    /// The client side of that listener's security protocol (from
    /// `listener.security.protocol.map`; `sasl.mechanism.inter.broker.protocol`).
    pub inter_broker_security: krust_net::security::ClientSecurity,
    /// `password.encoder.*`, when a secret is set.
    pub password_encoder: Option<PasswordEncoder>,
    /// The metadata.version the copy's records are written at.
    pub metadata_version: MetadataVersion,
}

/// Reads the migration settings.
///
/// # Errors
/// A setting that does not parse (the file was validated at start-up, so in practice only a
/// missing `zookeeper.connect`, refused there too).
pub fn settings(
    config: &ServerConfig,
    metadata_version: MetadataVersion,
) -> anyhow::Result<MigrationSettings> {
    let connect = config.get("zookeeper.connect").context(
        "If using `zookeeper.metadata.migration.enable` in KRaft mode, `zookeeper.connect` must also be set.",
    )?;
    let session_ms: i32 = config.typed("zookeeper.session.timeout.ms", 18_000)?;
    let mut zk = ZkClientConfig::new(connect.to_owned()).with_session_timeout(
        Duration::from_millis(u64::try_from(session_ms.max(1)).unwrap_or(18_000)),
    );
    if config.get("zookeeper.connection.timeout.ms").is_some() {
        let ms: i32 = config.typed("zookeeper.connection.timeout.ms", session_ms)?;
        zk = zk.with_connection_timeout(Duration::from_millis(
            u64::try_from(ms.max(1)).unwrap_or(18_000),
        ));
    }
    let min_batch_size: i32 = config.typed("zookeeper.metadata.migration.min.batch.size", 200)?;
    let inter_broker_listener = match config.get("inter.broker.listener.name") {
        Some(name) => name.to_owned(),
        None => config
            .get("security.inter.broker.protocol")
            .unwrap_or("PLAINTEXT")
            .to_owned(),
    };
    let inter_broker_protocol = config
        .effective_listener_security_protocol_map()?
        .get(&inter_broker_listener.to_uppercase())
        .cloned()
        .unwrap_or_else(|| inter_broker_listener.to_uppercase());
    let inter_broker_security = super::security::client_security(
        config,
        &inter_broker_listener,
        &inter_broker_protocol,
        "sasl.mechanism.inter.broker.protocol",
    )?;
    let password_encoder = match config.get("password.encoder.secret") {
        None => None,
        Some(secret) => {
            let key_factory = config
                .get("password.encoder.keyfactory.algorithm")
                .unwrap_or("PBKDF2WithHmacSHA512");
            let cipher = config
                .get("password.encoder.cipher.algorithm")
                .unwrap_or("AES/CBC/PKCS5Padding");
            let key_length: i32 = config.typed("password.encoder.key.length", 128)?;
            let iterations: i32 = config.typed("password.encoder.iterations", 4096)?;
            Some(PasswordEncoder::new(secret).with_parameters(
                key_factory,
                cipher,
                u32::try_from(key_length).unwrap_or(128),
                u32::try_from(iterations).unwrap_or(4096),
            ))
        }
    };
    Ok(MigrationSettings {
        zk,
        min_batch_size: usize::try_from(min_batch_size.max(1)).unwrap_or(200),
        inter_broker_listener,
        inter_broker_security,
        password_encoder,
        metadata_version,
    })
}

/// Refuses to migrate a ZooKeeper cluster whose `/cluster/id` is not the id this controller
/// was formatted with (a krust check; Kafka 3.9 does not compare them): nothing is written to
/// either side. A missing `/cluster/id` is left to the driver (a new ZooKeeper cluster has
/// nothing to migrate yet).
async fn check_cluster_id(zk: &ZkClient, connect: &str, cluster_id: &str) -> Result<(), String> {
    use krust_zk::backend::ZkBackend as _;
    use krust_zk::model::cluster::cluster_id as cluster_id_znode;
    use krust_zk::model::paths::CLUSTER_ID;
    use krust_zk::ops::ZkErrorCode;
    loop {
        match zk.get_data(CLUSTER_ID).await {
            Ok((data, _)) => {
                let found = cluster_id_znode::decode(&data).map_err(|e| {
                    format!("cannot read the ZooKeeper cluster id at {connect}: {e}")
                })?;
                if found != cluster_id {
                    return Err(format!(
                        "The ZooKeeper cluster at {connect} has cluster id {found} ({CLUSTER_ID}) but this controller was formatted with cluster id {cluster_id}: refusing to migrate it. Format the controllers with the ZooKeeper cluster's id."
                    ));
                }
                return Ok(());
            }
            Err(e) if e.code == ZkErrorCode::NoNode => return Ok(()),
            Err(e) if e.code.is_retriable() => {
                warn!(error = %e, "cannot read {CLUSTER_ID}; retrying");
                tokio::time::sleep(ZK_CONNECT_RETRY).await;
            }
            Err(e) => return Err(format!("cannot read {CLUSTER_ID} at {connect}: {e}")),
        }
    }
}

/// Starts the migration task: connects to ZooKeeper (retrying until it answers), then runs
/// the driver for this controller. Resolves with the reason if the migration fails fatally.
/// The metrics are for `/metrics`.
pub fn start(
    settings: MigrationSettings,
    cluster_id: String,
    node_id: i32,
    voter_ids: BTreeSet<i32>,
    controller: ControllerChannel,
    events: mpsc::UnboundedReceiver<MetadataEvent>,
    write_behind: Arc<AtomicI64>,
) -> (JoinHandle<String>, MigrationMetrics) {
    let status = MigrationStatusHandle::default();
    let metrics = MigrationMetrics::new(status.clone());
    let task_metrics = metrics.clone();
    let task = tokio::spawn(async move {
        let zk = loop {
            match ZkClient::connect(settings.zk.clone()).await {
                Ok(zk) => break zk,
                Err(e) => {
                    warn!(error = %e, connect = %settings.zk.connect, "cannot reach ZooKeeper; retrying");
                    tokio::time::sleep(ZK_CONNECT_RETRY).await;
                }
            }
        };
        info!(connect = %settings.zk.connect, session_id = zk.session_id(), "connected to ZooKeeper for the migration");
        if let Err(reason) = check_cluster_id(&zk, &settings.zk.connect, &cluster_id).await {
            return reason;
        }
        let seed: u64 = rand::random();
        let kraft_epoch = KraftEpoch::default();
        let mut driver_config = MigrationDriverConfig::new(node_id, voter_ids);
        driver_config.min_batch_size = settings.min_batch_size;
        driver_config.rng_seed = seed;
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let driver = MigrationDriver::new(
            driver_config,
            KafkaZkReader::new(
                settings.metadata_version,
                settings.password_encoder.clone(),
                seed,
            ),
            KafkaZkWriter::new(kraft_epoch.clone(), settings.password_encoder, seed ^ 1),
            KafkaPropagator::new(node_id, settings.inter_broker_listener.clone()),
            Instant::now(),
            wall_ms,
        );
        let task = MigrationTask::new(
            driver,
            zk,
            controller,
            settings.inter_broker_listener,
            krust_net::ClientConfig {
                security: settings.inter_broker_security,
                ..krust_net::ClientConfig::default()
            },
        )
        .with_kraft_epoch(kraft_epoch)
        .with_status(status)
        .with_metrics(task_metrics)
        .with_write_behind(write_behind);
        match task.run(events).await {
            Ok(()) => std::future::pending().await,
            Err(e) => e.to_string(),
        }
    });
    (task, metrics)
}
