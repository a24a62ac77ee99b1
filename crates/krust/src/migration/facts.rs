//! `server.properties` files (and the controller's `meta.properties`) read into the typed
//! facts `krust_migration::tools::preflight` checks.

use std::path::Path;

use anyhow::Context as _;
use krust_metadata::{BOOTSTRAP_FILE_NAME, BootstrapMetadata, MetaProperties, MetadataVersion};
use krust_migration::tools::preflight::{BrokerFacts, ControllerFacts};

use crate::config::{ConfigError, ServerConfig};

/// Largest `meta.properties` read.
const MAX_META_PROPERTIES_BYTES: u64 = 64 * 1024;
/// Largest `bootstrap.checkpoint` read.
const MAX_BOOTSTRAP_BYTES: u64 = 16 * 1024 * 1024;

fn raw_list(config: &ServerConfig, key: &str) -> Vec<String> {
    config
        .get(key)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn flag(config: &ServerConfig, key: &str, errors: &mut Vec<String>) -> bool {
    match config.typed::<bool>(key, false) {
        Ok(v) => v,
        Err(e) => {
            errors.push(e.to_string());
            false
        }
    }
}

fn or_record<T>(result: Result<T, ConfigError>, default: T, errors: &mut Vec<String>) -> T {
    result.unwrap_or_else(|e| {
        let text = e.to_string();
        if !errors.contains(&text) {
            errors.push(text);
        }
        default
    })
}

/// The controller's facts: its file, and the `meta.properties` of its metadata log directory.
///
/// # Errors
/// The file cannot be read or is not properties syntax; `meta.properties` exists but cannot
/// be read or parsed.
pub fn controller_facts(path: &Path) -> anyhow::Result<ControllerFacts> {
    let config = ServerConfig::load(path).with_context(|| format!("reading {}", path.display()))?;
    let mut errors = Vec::new();
    if let Err(e) = config.validate() {
        errors.push(e.to_string());
    }
    let migration_enabled = flag(&config, "zookeeper.metadata.migration.enable", &mut errors);
    let node_id = or_record(config.node_id(), -1, &mut errors);
    let listener_names = or_record(config.listeners(), Vec::new(), &mut errors)
        .into_iter()
        .map(|e| e.listener_name)
        .collect();
    let voter_ids = or_record(config.quorum_voter_ids(), Vec::new(), &mut errors);
    let metadata_log_dir = config.metadata_log_dir();
    let formatted_cluster_id = match &metadata_log_dir {
        Some(dir) => read_cluster_id(&Path::new(dir).join("meta.properties"))?,
        None => None,
    };
    let bootstrap_metadata_version = match &metadata_log_dir {
        Some(dir) => read_bootstrap_version(&Path::new(dir).join(BOOTSTRAP_FILE_NAME))?,
        None => None,
    };
    // As `krust server` (Kafka's `interBrokerListenerName`).
    let inter_broker_listener = config
        .get("inter.broker.listener.name")
        .or(config.get("security.inter.broker.protocol"))
        .unwrap_or("PLAINTEXT")
        .to_owned();
    Ok(ControllerFacts {
        file: path.display().to_string(),
        process_roles: raw_list(&config, "process.roles"),
        node_id,
        migration_enabled,
        zookeeper_connect: config.get("zookeeper.connect").map(str::to_owned),
        listener_names,
        controller_listener_names: config.controller_listener_names(),
        voter_ids,
        bootstrap_servers: config.quorum_bootstrap_servers(),
        config_errors: errors,
        metadata_log_dir,
        formatted_cluster_id,
        bootstrap_metadata_version,
        inter_broker_listener,
    })
}

fn read_bootstrap_version(path: &Path) -> anyhow::Result<Option<MetadataVersion>> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = crate::config::read_bounded(path, MAX_BOOTSTRAP_BYTES)
        .with_context(|| format!("reading {}", path.display()))?;
    let bootstrap =
        BootstrapMetadata::from_checkpoint_bytes(bytes.into(), &path.display().to_string())
            .with_context(|| format!("parsing {}", path.display()))?;
    Ok(Some(bootstrap.metadata_version()))
}

fn read_cluster_id(path: &Path) -> anyhow::Result<Option<String>> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = crate::config::read_bounded(path, MAX_META_PROPERTIES_BYTES)
        .with_context(|| format!("reading {}", path.display()))?;
    let meta = MetaProperties::parse(&String::from_utf8_lossy(&bytes))
        .with_context(|| format!("parsing {}", path.display()))?;
    Ok(meta.cluster_id)
}

/// One ZooKeeper-mode broker's facts.
///
/// # Errors
/// The file cannot be read or is not properties syntax.
pub fn broker_facts(path: &Path) -> anyhow::Result<BrokerFacts> {
    let config = ServerConfig::load(path).with_context(|| format!("reading {}", path.display()))?;
    let mut errors = Vec::new();
    if let Err(e) = config.validate_values() {
        errors.push(e.to_string());
    }
    let migration_enabled = flag(&config, "zookeeper.metadata.migration.enable", &mut errors);
    let broker_id = or_record(config.node_id(), -1, &mut errors);
    let broker_id_generation_enable = or_record(
        config.typed::<bool>("broker.id.generation.enable", true),
        true,
        &mut errors,
    );
    let reserved_broker_max_id = or_record(
        config.typed::<i32>("reserved.broker.max.id", 1000),
        1000,
        &mut errors,
    );
    let voter_ids = or_record(config.quorum_voter_ids(), Vec::new(), &mut errors);
    let security_protocol_map_names = or_record(
        config.effective_listener_security_protocol_map(),
        Default::default(),
        &mut errors,
    )
    .into_keys()
    .collect();
    Ok(BrokerFacts {
        file: path.display().to_string(),
        process_roles: raw_list(&config, "process.roles"),
        broker_id,
        broker_id_generation_enable,
        reserved_broker_max_id,
        inter_broker_protocol_version: config.inter_broker_protocol_version().map(str::to_owned),
        log_dir_count: config.log_dirs().len(),
        migration_enabled,
        zookeeper_connect: config.get("zookeeper.connect").map(str::to_owned),
        voter_ids,
        bootstrap_servers: config.quorum_bootstrap_servers(),
        controller_listener_names: config.controller_listener_names(),
        security_protocol_map_names,
        config_errors: errors,
    })
}
