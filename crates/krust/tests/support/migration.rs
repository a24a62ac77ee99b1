//! Shared scaffolding of the ZooKeeper → KRaft migration process tests (`zk_migration.rs`,
//! `zk_migration_faults.rs`, `zk_migration_acceptance.rs`): a Kafka 3.9 ZooKeeper-mode broker, its roll into migration mode,
//! znode reads through `zookeeper-shell`, a stopped controller's metadata log, decoded, and
//! `krust migration verify` run until ZooKeeper and the quorum agree, and metadata changes made
//! with Kafka's own tools ([`Step`], [`run_step`]).
//!
//! Include it as `#[path = "support/migration.rs"] mod migration;` next to
//! `#[path = "support/mod.rs"] mod cluster;` and `#[path = "quorum_support/mod.rs"] mod support;`.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::{Duration, Instant};

use krust_metadata::ApiMessageAndVersion;
use krust_metadata::records::MetadataRecord;
use std::path::Path;

use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, ToolOutput, ZooKeeperServer, class, run_binary,
};

use crate::support::{KRUST, Quorum, read_metadata_log};

/// How long a migration step (a JVM start, the copy, a dual-write) may take on a loaded 2-core
/// machine.
pub const WAIT: Duration = Duration::from_secs(120);
/// What the migration driver logs once the metadata is copied into the log (Kafka's line).
pub const MIGRATION_COMPLETED: &str = "Completed migration of metadata from ZooKeeper to KRaft";
/// What Kafka 3.9's `BrokerLifecycleManager` logs once its registration is accepted.
pub const REGISTERED: &str = "Successfully registered broker";

/// A ZooKeeper-mode Kafka 3.9 broker `id` on `zk`, started.
pub fn zk_broker(dist: &KafkaDist, zk: &ZooKeeperServer, id: i32) -> KafkaNode {
    KafkaNode::builder(dist)
        .role(KafkaRole::ZkBroker)
        .node_id(id)
        .zookeeper(zk.connect_string())
        .start_timeout(WAIT)
        .start()
        .expect("ZooKeeper-mode broker starts")
}

/// Restarts `broker` in migration mode, registering with `quorum`.
pub fn roll_into_migration_mode(broker: &mut KafkaNode, quorum: &Quorum) {
    broker
        .enable_migration(&quorum.voters)
        .expect("broker config");
    broker.restart().unwrap_or_else(|e| {
        panic!(
            "broker restarts in migration mode: {e}\n{}",
            quorum.log_tails()
        )
    });
}

/// The data of `path` as `zookeeper-shell get` prints it ("" when missing).
pub fn zk_get(zk: &ZooKeeperServer, path: &str) -> String {
    zk.shell(&["get", path])
        .map(|o| o.stdout)
        .unwrap_or_default()
}

/// Polls `path` until it exists; its data.
pub fn wait_for_znode(zk: &ZooKeeperServer, path: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let data = zk_get(zk, path);
        if data.contains('{') {
            return data;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never appeared in ZooKeeper"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The metadata records of a stopped controller's log, decoded, in log order.
pub fn metadata_records(quorum: &Quorum, id: i32) -> Vec<MetadataRecord> {
    let node = quorum.nodes.iter().find(|n| n.id == id).expect("node");
    read_metadata_log(&node.data_dir())
        .into_iter()
        .filter(|r| !r.control)
        .filter_map(|r| r.value)
        .map(|v| {
            ApiMessageAndVersion::decode(&v)
                .expect("a metadata record")
                .record
        })
        .collect()
}

/// `krust <args>`, bounded.
pub fn krust(args: &[&str]) -> ToolOutput {
    run_binary(KRUST, args, None, Duration::from_secs(90)).expect("run krust")
}

/// `krust migration verify` against `zk` and the controllers at `bootstrap`, run until it
/// reports no difference (dual-write is asynchronous: a change committed in the log reaches
/// ZooKeeper a little later) or [`WAIT`] passes; the last run.
pub fn verify_until_equal(zk: &ZooKeeperServer, bootstrap: &str) -> ToolOutput {
    let connect = zk.connect_string();
    let args = [
        "migration",
        "verify",
        "--zookeeper",
        &connect,
        "--bootstrap-controller",
        bootstrap,
    ];
    let deadline = Instant::now() + WAIT;
    loop {
        let out = krust(&args);
        if (out.success() && out.stdout.is_empty()) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The output of a tool run, for a failure message.
pub fn text(out: &ToolOutput) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status, out.stdout, out.stderr
    )
}

/// `kafka-configs.sh` (still Scala in 3.9).
pub const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";
/// `kafka-acls.sh` (still Scala in 3.9).
pub const ACL_COMMAND: &str = "kafka.admin.AclCommand";

/// The Kafka tool a [`Step`] runs.
#[derive(Clone, Copy, Debug)]
pub enum Tool {
    Topics,
    Configs,
    Acls,
    /// The console producer (idempotent): `args[0]` is the topic.
    Produce,
}

/// One metadata change made with a Kafka tool through the brokers.
pub struct Step {
    pub name: &'static str,
    pub tool: Tool,
    pub args: &'static [&'static str],
}

pub const fn step(name: &'static str, tool: Tool, args: &'static [&'static str]) -> Step {
    Step { name, tool, args }
}

/// Runs `step` through `bootstrap` (`--command-config` for the admin tools); the tool's
/// complaint when it fails.
pub fn run_step(
    dist: &KafkaDist,
    bootstrap: &str,
    command_config: &Path,
    step: &Step,
) -> Result<(), String> {
    let command_config = command_config.display().to_string();
    let class = match step.tool {
        Tool::Produce => {
            return dist
                .console_produce(
                    bootstrap,
                    step.args[0],
                    "r-1\nr-2\n",
                    &[],
                    &[("acks", "all"), ("enable.idempotence", "true")],
                )
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        Tool::Topics => class::TOPIC_COMMAND,
        Tool::Configs => CONFIG_COMMAND,
        Tool::Acls => ACL_COMMAND,
    };
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        &command_config,
    ];
    args.extend_from_slice(step.args);
    dist.run_tool(class, &args, WAIT)
        .and_then(|o| o.ok())
        .map(|_| ())
        .map_err(|e| e.to_string())
}
