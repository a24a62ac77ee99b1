//! `krust dev [--data-dir DIR] [--port N]`: a single-node cluster in one command, no config.
//!
//! A combined node (`process.roles=broker,controller`, `node.id=1`) whose storage lives under
//! `--data-dir` (default `./krust-data`): on first start the directory gets a generated
//! `server.properties` and is formatted (`kafka-storage format` with a random cluster id); later
//! starts reuse both: only the keys `dev` owns (roles, ids, listeners, paths, the metrics port)
//! are rewritten — the controller listener and metrics ports are kept, the client port follows
//! `--port` — and every other line the user wrote stays. `--override key=value` sets a value
//! for this run only, over the file, as `kafka-server-start.sh --override` does. Clients connect to `127.0.0.1:N` (default 9092); the controller listener
//! takes a free loopback port. Kafka's defaults for a one-broker cluster are set
//! (`auto.create.topics.enable=true`, `offsets.topic.replication.factor=1`,
//! `transaction.state.log.replication.factor=1`, `transaction.state.log.min.isr=1`,
//! `num.partitions=1`) and `/metrics` is on (`metrics.port`, printed at start).
//!
//! Once the broker is unfenced (clients can produce and consume) it prints
//! `krust dev ready: bootstrap.servers=127.0.0.1:N`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::config::ServerConfig;
use crate::server::{self, ServerArgs};
use crate::storage::{FormatArgs, run_format};

/// The generated config inside the data dir.
pub const DEV_CONFIG_FILE: &str = "server.properties";
/// Partition logs live here, inside the data dir.
const LOG_DIR: &str = "logs";
/// The metadata log lives here, apart from the partition logs (as Kafka's quickstart keeps
/// `metadata.log.dir` apart when set): `kafka-dump-log` and `krust metadata-shell --directory`
/// then see only metadata.
const METADATA_DIR: &str = "metadata";
/// The loopback host every dev listener binds.
const HOST: &str = "127.0.0.1";

/// Options of `krust dev`.
#[derive(Debug, Clone)]
pub struct DevArgs {
    /// Where everything is stored.
    pub data_dir: PathBuf,
    /// The Kafka listener's port.
    pub port: u16,
    /// `--override key=value`, over the file (as `kafka-server-start.sh --override`).
    pub overrides: Vec<(String, String)>,
}

/// Ports chosen at first start and kept afterwards.
struct KeptPorts {
    controller: u16,
    metrics: u16,
}

fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind((HOST, 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// The controller and metrics ports of an existing dev config, else fresh free ones.
fn kept_ports(config_path: &Path) -> anyhow::Result<KeptPorts> {
    if config_path.is_file() {
        let config = ServerConfig::load(config_path)?;
        let controller = config
            .get("controller.quorum.voters")
            .and_then(|v| v.rsplit_once(':'))
            .and_then(|(_, port)| port.trim().parse::<u16>().ok());
        let metrics = config
            .get("metrics.port")
            .and_then(|v| v.trim().parse::<u16>().ok());
        if let (Some(controller), Some(metrics)) = (controller, metrics) {
            return Ok(KeptPorts {
                controller,
                metrics,
            });
        }
    }
    Ok(KeptPorts {
        controller: free_port()?,
        metrics: free_port()?,
    })
}

/// The keys `krust dev` owns and rewrites at every start (paths and ports); every other line
/// of an existing `server.properties` is the user's and is kept as written.
fn dev_owned_properties(
    data_dir: &Path,
    port: u16,
    kept: &KeptPorts,
) -> Vec<(&'static str, String)> {
    let controller = kept.controller;
    vec![
        ("process.roles", "broker,controller".to_owned()),
        ("node.id", "1".to_owned()),
        ("controller.quorum.voters", format!("1@{HOST}:{controller}")),
        (
            "listeners",
            format!("PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}"),
        ),
        ("advertised.listeners", format!("PLAINTEXT://{HOST}:{port}")),
        ("controller.listener.names", "CONTROLLER".to_owned()),
        ("inter.broker.listener.name", "PLAINTEXT".to_owned()),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned(),
        ),
        ("log.dirs", data_dir.join(LOG_DIR).display().to_string()),
        (
            "metadata.log.dir",
            data_dir.join(METADATA_DIR).display().to_string(),
        ),
        ("metrics.port", kept.metrics.to_string()),
    ]
}

/// Kafka's settings for a one-broker cluster, written on first start only (the user may
/// change them afterwards).
const DEV_DEFAULTS: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "true"),
    ("num.partitions", "1"),
    ("default.replication.factor", "1"),
    ("min.insync.replicas", "1"),
    ("offsets.topic.replication.factor", "1"),
    ("transaction.state.log.replication.factor", "1"),
    ("transaction.state.log.min.isr", "1"),
    ("group.initial.rebalance.delay.ms", "0"),
];

/// The `server.properties` of a dev node: `existing` (the file from an earlier start, if any)
/// with the owned keys set to `owned`, or a new file with the owned keys and [`DEV_DEFAULTS`].
fn dev_properties(existing: Option<&str>, owned: &[(&'static str, String)]) -> String {
    let Some(existing) = existing else {
        let mut text =
            "# Generated by `krust dev`. The keys above the blank line are rewritten at every\n\
                        # start (paths and ports); edit the others freely.\n"
                .to_owned();
        for (k, v) in owned {
            text.push_str(&format!("{k}={v}\n"));
        }
        text.push('\n');
        for (k, v) in DEV_DEFAULTS {
            text.push_str(&format!("{k}={v}\n"));
        }
        return text;
    };
    let mut written = std::collections::BTreeSet::new();
    let mut text = String::new();
    for line in existing.lines() {
        let key = line
            .trim_start()
            .split(['=', ':'])
            .next()
            .unwrap_or("")
            .trim();
        let is_comment = line.trim_start().starts_with(['#', '!']);
        match owned.iter().find(|(k, _)| *k == key) {
            Some((k, v)) if !is_comment => {
                // One line per owned key: the first keeps its place, repeats are dropped.
                if written.insert(*k) {
                    text.push_str(&format!("{k}={v}\n"));
                }
            }
            _ => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    for (k, v) in owned {
        if !written.contains(k) {
            text.push_str(&format!("{k}={v}\n"));
        }
    }
    text
}

/// Runs `krust dev` until SIGTERM/SIGINT; returns the exit code.
///
/// # Errors
/// The data dir cannot be created or formatted, or the server fails to start.
pub fn run_dev(args: &DevArgs) -> anyhow::Result<i32> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .with_context(|| format!("resolving {}", args.data_dir.display()))?;
    let log_dir = data_dir.join(LOG_DIR);
    let config_path = data_dir.join(DEV_CONFIG_FILE);
    let kept = kept_ports(&config_path)?;
    let existing = match std::fs::read_to_string(&config_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", config_path.display())),
    };
    let owned = dev_owned_properties(&data_dir, args.port, &kept);
    krust_log::fs::write_atomically(
        &config_path,
        dev_properties(existing.as_deref(), &owned).as_bytes(),
    )
    .with_context(|| format!("writing {}", config_path.display()))?;
    if !log_dir.join("meta.properties").is_file()
        || !data_dir
            .join(METADATA_DIR)
            .join("meta.properties")
            .is_file()
    {
        let uuid = krust_metadata::kafka_uuid::random_kafka_uuid(&mut rand::thread_rng());
        let cluster_id = krust_metadata::kafka_uuid::to_kafka_string(&uuid);
        let mut out = Vec::new();
        run_format(
            &FormatArgs {
                config: config_path.clone(),
                cluster_id: cluster_id.clone(),
                release_version: None,
                features: Vec::new(),
                ignore_formatted: true,
                standalone: false,
                initial_controllers: None,
                no_initial_controllers: false,
                add_scram: Vec::new(),
            },
            &mut out,
        )
        .with_context(|| format!("formatting {}", log_dir.display()))?;
        println!(
            "krust dev: formatted {} (cluster id {cluster_id})",
            log_dir.display()
        );
    }
    println!(
        "krust dev: data in {}, metrics on http://{HOST}:{}/metrics",
        data_dir.display(),
        kept.metrics
    );
    server::run_server(&ServerArgs {
        config: config_path,
        overrides: args.overrides.clone(),
        test_append_socket: None,
        ready_banner: Some("krust dev".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_config_is_a_valid_combined_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(DEV_CONFIG_FILE);
        let kept = KeptPorts {
            controller: 19093,
            metrics: 19404,
        };
        let owned = dev_owned_properties(dir.path(), 9092, &kept);
        std::fs::write(&path, dev_properties(None, &owned)).expect("write");
        let config = ServerConfig::load(&path).expect("loads");
        config.validate().expect("valid");
        assert_eq!(config.node_id().expect("node id"), 1);
        assert_eq!(config.quorum_voter_ids().expect("voters"), vec![1]);
        let again = kept_ports(&path).expect("kept");
        assert_eq!((again.controller, again.metrics), (19093, 19404));
        assert!(
            config.unknown_keys().is_empty(),
            "{:?}",
            config.unknown_keys()
        );
    }

    #[test]
    fn a_restart_keeps_the_users_lines_and_rewrites_only_owned_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = KeptPorts {
            controller: 19093,
            metrics: 19404,
        };
        let text = dev_properties(None, &dev_owned_properties(dir.path(), 9092, &first));
        let edited =
            format!("{text}num.partitions=4\n# my note\nlisteners=PLAINTEXT://0.0.0.0:1\n");
        let again = dev_properties(
            Some(&edited),
            &dev_owned_properties(dir.path(), 9095, &first),
        );
        let path = dir.path().join(DEV_CONFIG_FILE);
        std::fs::write(&path, &again).expect("write");
        let config = ServerConfig::load(&path).expect("loads");
        assert_eq!(
            config.get("num.partitions"),
            Some("4"),
            "the user's value is kept"
        );
        assert!(again.contains("# my note\n"));
        assert_eq!(
            config.get("listeners"),
            Some("PLAINTEXT://127.0.0.1:9095,CONTROLLER://127.0.0.1:19093"),
            "owned keys follow --port, once"
        );
        assert_eq!(again.matches("\nlisteners=").count(), 1);
        config.validate().expect("valid");
    }
}
