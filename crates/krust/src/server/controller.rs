//! The controller role's settings: `server.properties` → [`QuorumControllerConfig`] for the
//! controller server of `krust-node` (`krust_node::controller::ControllerServer`).

use std::path::Path;

use anyhow::Context as _;
use bytes::Bytes;
use krust_controller::QuorumControllerConfig;
use krust_controller::heartbeat::{
    BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT, BROKER_SESSION_TIMEOUT_MS_DEFAULT, HeartbeatConfig,
};
use krust_controller::quorum_controller::{
    LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS_DEFAULT, METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT,
    TopicValidationDefaults, UNCLEAN_LEADER_ELECTION_INTERVAL_MS_DEFAULT,
};
use krust_metadata::{BOOTSTRAP_FILE_NAME, BootstrapMetadata};

use crate::config::ServerConfig;

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
    fn parse<T: krust_config::FromConfigValue>(
        config: &ServerConfig,
        key: &str,
        default: T,
    ) -> anyhow::Result<T> {
        Ok(config.typed(key, default)?)
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
    // Parsed so a bad value fails at startup as in Kafka, but unused: Kafka 3.9's KRaft
    // controller balances every imbalanced partition (the percentage is a ZooKeeper-controller
    // setting).
    let _leader_imbalance_percentage: u32 =
        parse(config, "leader.imbalance.per.broker.percentage", 10)?;
    let auto_rebalance: bool = parse(config, "auto.leader.rebalance.enable", true)?;
    let check_interval_seconds: u64 = parse(
        config,
        "leader.imbalance.check.interval.seconds",
        LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS_DEFAULT,
    )?;
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
        leader_imbalance_check_interval_ms: auto_rebalance
            .then(|| check_interval_seconds.saturating_mul(1000)),
        topic_validation_defaults: TopicValidationDefaults {
            min_compaction_lag_ms: parse(config, "log.cleaner.min.compaction.lag.ms", 0)?,
            max_compaction_lag_ms: parse(config, "log.cleaner.max.compaction.lag.ms", i64::MAX)?,
        },
        zk_migration_enabled: parse(config, "zookeeper.metadata.migration.enable", false)?,
        max_zk_write_behind: max_zk_write_behind(config)?,
    })
}

/// `zookeeper.metadata.migration.write.behind.max.records` (a krust addition): how many metadata
/// records ZooKeeper may lag behind the log while dual-writing before admin writes are
/// refused; `-1` for no bound.
pub const MAX_WRITE_BEHIND_KEY: &str = "zookeeper.metadata.migration.write.behind.max.records";
/// Its default.
pub const MAX_WRITE_BEHIND_DEFAULT: i64 = 10_000;

fn max_zk_write_behind(config: &ServerConfig) -> anyhow::Result<Option<u64>> {
    let kafka = config.kafka_config()?;
    let value = kafka
        .extra(MAX_WRITE_BEHIND_KEY, krust_config::ConfigKind::Long)
        .map_err(|e| anyhow::anyhow!(e.message))?
        .and_then(|v| v.as_i64())
        .unwrap_or(MAX_WRITE_BEHIND_DEFAULT);
    match value {
        -1 => Ok(None),
        v if v >= 1 => Ok(u64::try_from(v).ok()),
        v => anyhow::bail!(
            "Invalid value {v} for configuration {MAX_WRITE_BEHIND_KEY}: Value must be at least 1, or -1 for no bound"
        ),
    }
}

/// The controller's admin API settings: `authorizer.class.name` (CreateAcls/DeleteAcls are
/// served only with an authorizer, as Kafka's controller does) and the delegation-token keys.
pub fn admin_config(
    config: &ServerConfig,
) -> anyhow::Result<krust_controller::quorum_controller::AdminConfig> {
    let defaults = krust_controller::delegation_tokens::DelegationTokenConfig::default();
    let secret_key = config
        .get("delegation.token.secret.key")
        .or_else(|| config.get("delegation.token.master.key"))
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    Ok(krust_controller::quorum_controller::AdminConfig {
        static_properties: config
            .values()
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect(),
        authorizer_enabled: config
            .get("authorizer.class.name")
            .is_some_and(|c| !c.trim().is_empty()),
        delegation_tokens: krust_controller::delegation_tokens::DelegationTokenConfig {
            secret_key,
            max_lifetime_ms: config
                .typed("delegation.token.max.lifetime.ms", defaults.max_lifetime_ms)?,
            expiry_time_ms: config
                .typed("delegation.token.expiry.time.ms", defaults.expiry_time_ms)?,
            // Kafka's definition: a LONG of at least 1.
            expiry_check_interval_ms: config
                .typed::<i64>(
                    "delegation.token.expiry.check.interval.ms",
                    i64::try_from(defaults.expiry_check_interval_ms).unwrap_or(i64::MAX),
                )?
                .max(1)
                .unsigned_abs(),
        },
    })
}
