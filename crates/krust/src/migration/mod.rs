//! `krust migration`: the operator tools of the ZooKeeper → KRaft migration (KIP-866).
//!
//! **krust's addition: Kafka 3.9 has no such tools.** Its operators follow docs/ops.html by
//! hand; these commands check and report the same facts. The logic lives in
//! `krust_migration::tools` (pure functions); this module reads the files, ZooKeeper (read
//! only: nothing is written, not even a missing chroot) and the controller quorum, and prints.
//!
//! # Usage
//!
//! ```text
//! krust migration preflight --zookeeper zk1:2181/kafka --config controller.properties \
//!     [--broker-config server-1.properties]...
//! krust migration status --bootstrap-controller c1:9093 [--zookeeper zk1:2181/kafka] [--json]
//! krust migration verify --zookeeper zk1:2181/kafka --bootstrap-controller c1:9093 \
//!     [--config controller.properties]
//! krust migration rollback-plan --zookeeper zk1:2181/kafka [--bootstrap-controller c1:9093]
//! ```
//!
//! - `preflight`: every documented precondition, one line each,
//!   `OK|WARN|FAIL <check>: <found>[ — fix: <what to change>]`; exit 0 only when no check fails
//!   (the migration can start).
//! - `status`: the phase (PRE_MIGRATION waiting for brokers, MIGRATION hybrid, MIGRATION all
//!   brokers in KRaft mode, POST_MIGRATION), each broker's registration (ZooKeeper-mode or
//!   KRaft, fenced or not, or not registered while ZooKeeper knows it — why the migration
//!   waits), records copied, the ZooKeeper write-behind lag, the KRaft controller in
//!   `/controller`; `--json` for machines.
//! - `verify`: ZooKeeper's metadata (read with the migration's reader) diffed with the quorum's
//!   image: no output and exit 0 when they agree, one line per difference and exit 1 otherwise.
//!   `--config` takes `password.encoder.secret` from the controller's file to compare password
//!   configs.
//! - `rollback-plan`: docs/ops.html's revert steps for the last completed step, filled in with
//!   this cluster's connect string, broker ids and `zookeeper-shell.sh` commands, or
//!   "cannot revert: finalized".
//!
//! The quorum's image is read as an observer (replica id -1) from the leader controller:
//! Fetch of `__cluster_metadata-0` (FetchSnapshot when its log starts at a snapshot), committed
//! batches only (see [`quorum`]).

pub mod facts;
pub mod quorum;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use krust_metadata::image::features::ZkMigrationState;
use krust_migration::reader::MIGRATION_READ_ROOTS;
use krust_migration::tools::preflight::{can_start, preflight};
use krust_migration::tools::rollback::rollback_plan;
use krust_migration::tools::status::{QuorumView, derive_status};
use krust_migration::tools::verify::{diff_images, zk_image};
use krust_migration::tools::zk_view::{CLUSTER_READ_ROOTS, ClusterZnodes};
use krust_net::security::ClientSecurity;
use krust_zk::backend::read_tree;
use krust_zk::client::{ZkClient, ZkClientConfig};
use krust_zk::model::password::PasswordEncoder;
use krust_zk::model::paths;
use krust_zk::tree::ZkTree;

use crate::config::ServerConfig;

/// Budget of one command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for a ZooKeeper session.
const ZK_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the quorum to name a leader.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(20);

/// `krust migration preflight`'s arguments.
#[derive(Debug, Clone)]
pub struct PreflightArgs {
    /// `--zookeeper host:port[,…][/chroot]`.
    pub zookeeper: String,
    /// `--config`: the KRaft controller's `server.properties`.
    pub config: PathBuf,
    /// `--broker-config` (repeatable): ZooKeeper-mode brokers' `server.properties`.
    pub broker_configs: Vec<PathBuf>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn block_on<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    runtime()?.block_on(async {
        tokio::time::timeout(COMMAND_TIMEOUT, future)
            .await
            .map_err(|_| anyhow::anyhow!("timed out after {COMMAND_TIMEOUT:?}"))?
    })
}

/// Reads the subtrees under `roots` (paths relative to the connect string's chroot).
async fn read_zk(connect: &str, roots: &[&str]) -> anyhow::Result<ZkTree> {
    let mut config = ZkClientConfig::new(connect).with_connection_timeout(ZK_CONNECT_TIMEOUT);
    if config.split_connect().is_err() {
        bail!(
            "invalid ZooKeeper connect string {connect:?}: expected \
             host:port[,host:port…][/chroot]"
        );
    }
    // A tool only reads: a missing chroot is reported, not created.
    config.create_chroot = false;
    let client = ZkClient::connect(config)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to ZooKeeper {connect}: {e}"))?;
    read_tree(&client, roots)
        .await
        .map_err(|e| anyhow::anyhow!("reading ZooKeeper {connect}: {e}"))
}

async fn read_quorum(
    bootstrap_controller: &str,
    security: &ClientSecurity,
) -> anyhow::Result<quorum::QuorumRead> {
    quorum::read_image(bootstrap_controller, security, QUORUM_TIMEOUT)
        .await
        .with_context(|| {
            format!("reading the quorum's metadata through --bootstrap-controller {bootstrap_controller}")
        })
}

async fn read_cluster(connect: &str) -> anyhow::Result<ClusterZnodes> {
    Ok(ClusterZnodes::parse(
        &read_zk(connect, CLUSTER_READ_ROOTS).await?,
    ))
}

/// `krust migration preflight`: prints one line per check; returns 0 when the migration can
/// start, 1 otherwise.
///
/// # Errors
/// A file cannot be read, or ZooKeeper cannot be reached.
pub fn run_preflight(args: &PreflightArgs, out: &mut dyn Write) -> anyhow::Result<i32> {
    let controller = facts::controller_facts(&args.config)?;
    let brokers = args
        .broker_configs
        .iter()
        .map(|p| facts::broker_facts(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let zk = block_on(read_cluster(&args.zookeeper))?;
    let checks = preflight(&args.zookeeper, &controller, &brokers, &zk);
    for check in &checks {
        writeln!(out, "{check}")?;
    }
    let ok = can_start(&checks);
    writeln!(
        out,
        "{}",
        if ok {
            "The migration can start."
        } else {
            "The migration cannot start: fix the FAIL lines above."
        }
    )?;
    Ok(if ok { 0 } else { 1 })
}

/// `krust migration status`.
///
/// # Errors
/// ZooKeeper or the quorum cannot be read.
pub fn run_status(
    bootstrap_controller: &str,
    security: &ClientSecurity,
    zookeeper: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (read, zk) = block_on(async {
        let read = read_quorum(bootstrap_controller, security).await?;
        let zk = match zookeeper {
            Some(zookeeper) => Some(read_cluster(zookeeper).await?),
            None => None,
        };
        Ok((read, zk))
    })?;
    for warning in &read.warnings {
        eprintln!("warning: {warning}");
    }
    let report = derive_status(
        &QuorumView {
            image: read.image,
            leader_id: read.quorum.leader_id,
            leader_epoch: read.quorum.leader_epoch,
            high_watermark: read.high_watermark,
            copied_records: read.copied_records,
            snapshot: read.snapshot,
            voter_ids: read.quorum.voters.iter().map(|v| v.replica_id.0).collect(),
        },
        zk.as_ref(),
    );
    if json {
        writeln!(out, "{}", report.to_json())?;
    } else {
        write!(out, "ClusterId: {}\n{report}", read.cluster_id)?;
    }
    Ok(0)
}

/// `krust migration verify`: prints one line per difference; 0 when ZooKeeper and the quorum
/// agree, 1 otherwise.
///
/// # Errors
/// ZooKeeper or the quorum cannot be read; ZooKeeper holds a znode the reader refuses; the
/// quorum has not copied anything yet.
pub fn run_verify(
    zookeeper: &str,
    bootstrap_controller: &str,
    security: &ClientSecurity,
    config: Option<&PathBuf>,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let encoder = match config {
        None => None,
        Some(path) => {
            let config =
                ServerConfig::load(path).with_context(|| format!("reading {}", path.display()))?;
            config
                .get("password.encoder.secret")
                .map(PasswordEncoder::new)
        }
    };
    let mut roots: Vec<&str> = MIGRATION_READ_ROOTS.to_vec();
    roots.push(paths::MIGRATION);
    let (read, tree) = block_on(async {
        let read = read_quorum(bootstrap_controller, security).await?;
        let tree = read_zk(zookeeper, &roots).await?;
        Ok((read, tree))
    })?;
    let state = read.image.features.zk_migration_state;
    match state {
        ZkMigrationState::None => {
            bail!("the quorum was created in KRaft mode (ZkMigrationState NONE): nothing to verify")
        }
        ZkMigrationState::PreMigration => {
            bail!("the quorum is in PRE_MIGRATION: no metadata was copied from ZooKeeper yet")
        }
        ZkMigrationState::PostMigration => eprintln!(
            "note: the migration is finalized (POST_MIGRATION): ZooKeeper is no longer written, \
             differences are expected"
        ),
        ZkMigrationState::Migration => {}
    }
    let zk_metadata = zk_image(&tree, read.image.metadata_version(), encoder.as_ref())
        .context("reading ZooKeeper's metadata")?;
    let differences = diff_images(&zk_metadata, &read.image, encoder.is_some());
    for difference in &differences {
        writeln!(out, "{difference}")?;
    }
    if !differences.is_empty() {
        let zk = ClusterZnodes::parse(&tree);
        let last = read.high_watermark - 1;
        if let Some(m) = zk.migration
            && m.kraft_metadata_offset < last
        {
            eprintln!(
                "note: ZooKeeper reflects KRaft offset {} of {last}: some differences may be \
                 dual-writes in flight; run verify again",
                m.kraft_metadata_offset
            );
        }
    }
    Ok(if differences.is_empty() { 0 } else { 1 })
}

/// `krust migration rollback-plan`.
///
/// # Errors
/// ZooKeeper (or the quorum, when given) cannot be read.
pub fn run_rollback_plan(
    zookeeper: &str,
    bootstrap_controller: Option<&str>,
    security: &ClientSecurity,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (image, zk) = block_on(async {
        let image = match bootstrap_controller {
            Some(b) => Some(read_quorum(b, security).await?.image),
            None => None,
        };
        Ok((image, read_cluster(zookeeper).await?))
    })?;
    write!(out, "{}", rollback_plan(zookeeper, &zk, image.as_ref()))?;
    Ok(0)
}
