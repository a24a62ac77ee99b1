//! Apache Kafka 3.9 nodes in KRaft mode on 127.0.0.1: one node ([`KafkaNode`]) or a small
//! cluster ([`KafkaCluster`]).
//!
//! A node gets its own folder (a temp dir unless given one) holding `server.properties`, the
//! data/metadata log dir `data/` (formatted with Kafka's `StorageTool`) and the process log
//! `kafka.log`. It is killed when dropped; the folder is removed with it unless
//! `KRUST_TESTKIT_KEEP=1` is set.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::clients::ProducerPerfSummary;
use crate::dist::{KafkaDist, ToolOutput, class, random_kafka_uuid};
use crate::error::{HarnessError, Result};
use crate::ports::free_ports;
use crate::process::{LOG_TAIL_LINES, LogMark, ManagedProcess, ProcessSpec};

/// The line Kafka 3.9 logs when a KRaft node (any role) has started:
/// `[KafkaRaftServer nodeId=1] Kafka Server started (kafka.server.KafkaRaftServer)`.
pub const KAFKA_STARTED_LINE: &str = "Kafka Server started";
/// The line Kafka 3.9 logs when a ZooKeeper-mode broker has started:
/// `[KafkaServer id=1] started (kafka.server.KafkaServer)`.
pub const ZK_BROKER_STARTED_LINE: &str = "] started (kafka.server.KafkaServer)";
/// Default limit for a node to start (a JVM start takes 5–10 s on this machine, more when loaded).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often [`KafkaNode::start`] retries with new ports after "Address already in use".
pub const MAX_PORT_CONFLICT_RETRIES: u32 = 3;
/// Default limit for a node to stop after SIGTERM.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// Listener names the harness uses.
pub const BROKER_LISTENER: &str = "PLAINTEXT";
/// The controller listener's name.
pub const CONTROLLER_LISTENER: &str = "CONTROLLER";

/// What a node is: `process.roles` of a KRaft node, or a ZooKeeper-mode broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KafkaRole {
    /// `process.roles=broker`: needs controllers elsewhere.
    Broker,
    /// `process.roles=controller`.
    Controller,
    /// `process.roles=broker,controller` (a "combined" node).
    Combined,
    /// A ZooKeeper-mode broker (`broker.id`, `zookeeper.connect`, no `process.roles`); not
    /// formatted (Kafka writes a v0 `meta.properties` itself). See
    /// [`KafkaNodeBuilder::zookeeper`] and [`KafkaNodeBuilder::migration`].
    ZkBroker,
}

impl KafkaRole {
    /// The `process.roles` value ("" for a ZooKeeper-mode broker).
    pub fn process_roles(self) -> &'static str {
        match self {
            KafkaRole::Broker => "broker",
            KafkaRole::Controller => "controller",
            KafkaRole::Combined => "broker,controller",
            KafkaRole::ZkBroker => "",
        }
    }

    /// Whether the node serves clients.
    pub fn is_broker(self) -> bool {
        matches!(
            self,
            KafkaRole::Broker | KafkaRole::Combined | KafkaRole::ZkBroker
        )
    }

    /// Whether the node keeps its metadata in ZooKeeper.
    pub fn is_zk_mode(self) -> bool {
        self == KafkaRole::ZkBroker
    }

    /// Whether the node is a controller (a voter of the metadata quorum).
    pub fn is_controller(self) -> bool {
        matches!(self, KafkaRole::Controller | KafkaRole::Combined)
    }
}

/// Configures a [`KafkaNode`]; see [`KafkaNode::builder`].
#[derive(Debug)]
pub struct KafkaNodeBuilder {
    dist: KafkaDist,
    node_id: i32,
    role: KafkaRole,
    cluster_id: Option<String>,
    broker_port: Option<u16>,
    controller_port: Option<u16>,
    quorum_voters: Option<String>,
    standalone: bool,
    zookeeper: Option<String>,
    migration: bool,
    format_args: Vec<String>,
    segment_bytes: Option<u64>,
    props: Vec<(String, String)>,
    dir: Option<PathBuf>,
    start_timeout: Duration,
}

impl KafkaNodeBuilder {
    /// `node.id` (default 1).
    pub fn node_id(mut self, node_id: i32) -> Self {
        self.node_id = node_id;
        self
    }

    /// `process.roles` (default combined).
    pub fn role(mut self, role: KafkaRole) -> Self {
        self.role = role;
        self
    }

    /// The cluster id given to `StorageTool format` (default: a fresh random one).
    pub fn cluster_id(mut self, cluster_id: impl Into<String>) -> Self {
        self.cluster_id = Some(cluster_id.into());
        self
    }

    /// The client (PLAINTEXT) port (default: a free one). Ignored for controller-only nodes.
    pub fn broker_port(mut self, port: u16) -> Self {
        self.broker_port = Some(port);
        self
    }

    /// The CONTROLLER listener port (default: a free one). Ignored for broker-only nodes.
    pub fn controller_port(mut self, port: u16) -> Self {
        self.controller_port = Some(port);
        self
    }

    /// `controller.quorum.voters`, e.g. `1@127.0.0.1:9093,2@127.0.0.1:9094`. Default for a
    /// controller or combined node: itself alone. Required for a broker-only node.
    pub fn quorum_voters(mut self, voters: impl Into<String>) -> Self {
        self.quorum_voters = Some(voters.into());
        self
    }

    /// A KIP-853 dynamic quorum of this node alone: no `controller.quorum.voters`,
    /// `controller.quorum.bootstrap.servers` = this node's controller port, and storage
    /// formatted with `--standalone` (kraft.version 1). For controller and combined nodes.
    pub fn standalone(mut self) -> Self {
        self.standalone = true;
        self
    }

    /// `zookeeper.connect` (e.g. [`crate::ZooKeeperServer::connect_string`]). Required for a
    /// [`KafkaRole::ZkBroker`]; on a KRaft controller it is the ZooKeeper to migrate from (with
    /// [`KafkaNodeBuilder::migration`]).
    pub fn zookeeper(mut self, connect: impl Into<String>) -> Self {
        self.zookeeper = Some(connect.into());
        self
    }

    /// KIP-866 migration mode: `zookeeper.metadata.migration.enable=true`. On a ZooKeeper-mode
    /// broker this also sets `controller.listener.names` and needs
    /// [`KafkaNodeBuilder::quorum_voters`] (the KRaft controllers it registers with); on a KRaft
    /// controller it needs [`KafkaNodeBuilder::zookeeper`] and the ZooKeeper cluster's id
    /// ([`KafkaNodeBuilder::cluster_id`], e.g. from a ZK broker's [`KafkaNode::cluster_id`]).
    pub fn migration(mut self) -> Self {
        self.migration = true;
        self
    }

    /// An extra argument for `StorageTool format` (e.g. `--release-version`, `3.7`, or
    /// `--feature`, `transaction.version=2`), in order.
    pub fn format_arg(mut self, arg: impl Into<String>) -> Self {
        self.format_args.push(arg.into());
        self
    }

    /// `log.segment.bytes` (Kafka 3.9 accepts down to 14 bytes), to make logs roll quickly.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = Some(bytes);
        self
    }

    /// Any other `server.properties` entry; overrides the harness's value for the same key.
    pub fn prop(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.props.push((key.into(), value.to_string()));
        self
    }

    /// Puts the node's files in `dir` (created if missing, not removed on drop) instead of a
    /// fresh temp dir.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// How long [`KafkaNode::start`] waits for readiness (default [`DEFAULT_START_TIMEOUT`]).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Writes `server.properties` and formats the storage with Kafka's `StorageTool`, without
    /// starting the node (start it with [`KafkaNode::start`], or [`KafkaNode::spawn`] +
    /// [`KafkaNode::wait_ready`] to start several at once).
    ///
    /// # Errors
    /// `Invalid` for a broker without `quorum_voters`; `Io`; `ToolFailed` if formatting fails.
    pub fn build(self) -> Result<KafkaNode> {
        self.build_inner(true)
    }

    fn build_inner(self, format: bool) -> Result<KafkaNode> {
        let role = self.role;
        // A standalone voter's endpoint is written into its bootstrap snapshot at format time,
        // so its ports cannot change afterwards.
        let ports_chosen_by_harness = self.broker_port.is_none()
            && self.controller_port.is_none()
            && self.quorum_voters.is_none()
            && !self.standalone;
        if self.standalone && (!role.is_controller() || self.quorum_voters.is_some()) {
            return Err(HarnessError::Invalid(format!(
                "node {}: standalone() needs a controller or combined node without quorum_voters",
                self.node_id
            )));
        }
        if role.is_zk_mode() && self.zookeeper.is_none() {
            return Err(HarnessError::Invalid(format!(
                "ZooKeeper-mode broker {} needs zookeeper(connect)",
                self.node_id
            )));
        }
        if self.migration && self.zookeeper.is_none() {
            return Err(HarnessError::Invalid(format!(
                "node {}: migration() needs zookeeper(connect)",
                self.node_id
            )));
        }
        if self.migration && role.is_zk_mode() && self.quorum_voters.is_none() {
            return Err(HarnessError::Invalid(format!(
                "ZooKeeper-mode broker {}: migration() needs quorum_voters (the KRaft controllers)",
                self.node_id
            )));
        }
        let mut props = self.props;
        if let Some(connect) = &self.zookeeper {
            props.insert(0, ("zookeeper.connect".to_owned(), connect.clone()));
        }
        if self.migration {
            props.insert(
                0,
                (
                    "zookeeper.metadata.migration.enable".to_owned(),
                    "true".to_owned(),
                ),
            );
        }
        let mut format_args = self.format_args;
        let mut fresh = free_ports(2)?.into_iter();
        let mut next_port = || fresh.next().unwrap_or(0);
        let broker_port = role
            .is_broker()
            .then(|| self.broker_port.unwrap_or_else(&mut next_port));
        let controller_port = role
            .is_controller()
            .then(|| self.controller_port.unwrap_or_else(&mut next_port));
        let quorum_voters = match (self.quorum_voters, controller_port) {
            (Some(voters), _) => voters,
            (None, Some(port)) if self.standalone => {
                props.insert(
                    0,
                    (
                        "controller.quorum.bootstrap.servers".to_owned(),
                        format!("127.0.0.1:{port}"),
                    ),
                );
                format_args.push("--standalone".to_owned());
                String::new()
            }
            (None, Some(port)) => format!("{}@127.0.0.1:{port}", self.node_id),
            // A plain ZooKeeper-mode broker has no controllers.
            (None, None) if role.is_zk_mode() => String::new(),
            (None, None) => {
                return Err(HarnessError::Invalid(format!(
                    "broker node {} needs quorum_voters (the controllers it registers with)",
                    self.node_id
                )));
            }
        };
        let (temp, dir) = match self.dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
                (None, dir)
            }
            None => {
                let mut temp = tempfile::Builder::new()
                    .prefix(&format!("krust-kafka-node{}-", self.node_id))
                    .tempdir()
                    .map_err(|e| HarnessError::io("creating a temp dir for a Kafka node", e))?;
                if keep_dirs() {
                    temp.disable_cleanup(true);
                }
                let path = temp.path().to_path_buf();
                (Some(temp), path)
            }
        };
        let cluster_id = self.cluster_id.unwrap_or_else(random_kafka_uuid);
        let node = KafkaNode {
            process: None,
            dist: self.dist,
            node_id: self.node_id,
            role,
            cluster_id,
            broker_port,
            controller_port,
            quorum_voters,
            dir,
            start_timeout: self.start_timeout,
            segment_bytes: self.segment_bytes,
            extra_props: props,
            format_args,
            ports_chosen_by_harness,
            _temp: temp,
        };
        node.write_properties()?;
        if format && !role.is_zk_mode() {
            node.format()?;
        }
        Ok(node)
    }

    /// Like [`KafkaNodeBuilder::build`] but leaves the storage unformatted: for formatting it
    /// with another tool (e.g. `krust storage format -t <node.cluster_id()> -c
    /// <node.properties_path()>`) and then proving with [`KafkaNode::start`] that Kafka accepts
    /// the result.
    ///
    /// # Errors
    /// As [`KafkaNodeBuilder::build`], without `ToolFailed`.
    pub fn build_unformatted(self) -> Result<KafkaNode> {
        self.build_inner(false)
    }

    /// [`KafkaNodeBuilder::build`], then [`KafkaNode::start`].
    ///
    /// # Errors
    /// As both.
    pub fn start(self) -> Result<KafkaNode> {
        let mut node = self.build()?;
        node.start()?;
        Ok(node)
    }
}

/// Reads a Java properties file the simple way Kafka's own files need: `key=value` lines,
/// `#`/`!` comments and blank lines skipped, whitespace around keys and values trimmed.
///
/// # Errors
/// `Io` if the file cannot be read.
pub fn read_properties(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| HarnessError::io(format!("reading {}", path.display()), e))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect())
}

fn keep_dirs() -> bool {
    std::env::var_os("KRUST_TESTKIT_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

/// One Apache Kafka 3.9 KRaft node (see the module docs). Killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct KafkaNode {
    // Field order matters: the process is killed before its folder is removed.
    process: Option<ManagedProcess>,
    dist: KafkaDist,
    node_id: i32,
    role: KafkaRole,
    cluster_id: String,
    broker_port: Option<u16>,
    controller_port: Option<u16>,
    quorum_voters: String,
    dir: PathBuf,
    start_timeout: Duration,
    segment_bytes: Option<u64>,
    extra_props: Vec<(String, String)>,
    format_args: Vec<String>,
    /// Whether the harness picked every port (and so may pick new ones if one is taken).
    ports_chosen_by_harness: bool,
    _temp: Option<TempDir>,
}

impl KafkaNode {
    /// A builder with the defaults: node 1, combined roles, free ports, a temp dir.
    pub fn builder(dist: &KafkaDist) -> KafkaNodeBuilder {
        KafkaNodeBuilder {
            dist: dist.clone(),
            node_id: 1,
            role: KafkaRole::Combined,
            cluster_id: None,
            broker_port: None,
            controller_port: None,
            quorum_voters: None,
            standalone: false,
            zookeeper: None,
            migration: false,
            format_args: Vec::new(),
            segment_bytes: None,
            props: Vec::new(),
            dir: None,
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    /// A started single combined node (broker + sole controller) with the defaults.
    ///
    /// # Errors
    /// As [`KafkaNodeBuilder::start`].
    pub fn start_combined(dist: &KafkaDist) -> Result<KafkaNode> {
        Self::builder(dist).start()
    }

    fn write_properties(&self) -> Result<()> {
        let props = self.server_properties(self.segment_bytes, &self.extra_props);
        let path = self.properties_path();
        std::fs::write(&path, props)
            .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
    }

    fn server_properties(&self, segment_bytes: Option<u64>, extra: &[(String, String)]) -> String {
        let mut props: Vec<(String, String)> = Vec::new();
        let mut set = |key: &str, value: String| {
            if let Some(entry) = props.iter_mut().find(|(k, _)| k == key) {
                entry.1 = value;
            } else {
                props.push((key.to_owned(), value));
            }
        };
        if self.role.is_zk_mode() {
            set("broker.id", self.node_id.to_string());
        } else {
            set("process.roles", self.role.process_roles().to_owned());
            set("node.id", self.node_id.to_string());
        }
        if !self.quorum_voters.is_empty() {
            set("controller.quorum.voters", self.quorum_voters.clone());
        }
        let mut listeners = Vec::new();
        if let Some(port) = self.broker_port {
            listeners.push(format!("{BROKER_LISTENER}://127.0.0.1:{port}"));
            set(
                "advertised.listeners",
                format!("{BROKER_LISTENER}://127.0.0.1:{port}"),
            );
            set("inter.broker.listener.name", BROKER_LISTENER.to_owned());
        }
        if let Some(port) = self.controller_port {
            listeners.push(format!("{CONTROLLER_LISTENER}://127.0.0.1:{port}"));
        }
        set("listeners", listeners.join(","));
        // A ZooKeeper-mode broker must not name a controller listener unless it migrates.
        if !self.role.is_zk_mode() || !self.quorum_voters.is_empty() {
            set("controller.listener.names", CONTROLLER_LISTENER.to_owned());
        }
        set(
            "listener.security.protocol.map",
            format!("{BROKER_LISTENER}:PLAINTEXT,{CONTROLLER_LISTENER}:PLAINTEXT"),
        );
        set("log.dirs", self.log_dir().display().to_string());
        // Small, quiet, single-machine settings.
        set("num.partitions", "1".to_owned());
        set("default.replication.factor", "1".to_owned());
        set("offsets.topic.replication.factor", "1".to_owned());
        set("offsets.topic.num.partitions", "1".to_owned());
        set("transaction.state.log.replication.factor", "1".to_owned());
        set("transaction.state.log.min.isr", "1".to_owned());
        set("transaction.state.log.num.partitions", "1".to_owned());
        set("group.initial.rebalance.delay.ms", "0".to_owned());
        set("num.network.threads", "2".to_owned());
        set("num.io.threads", "2".to_owned());
        set("background.threads", "2".to_owned());
        set("num.recovery.threads.per.data.dir", "1".to_owned());
        set("auto.create.topics.enable", "false".to_owned());
        if let Some(bytes) = segment_bytes {
            set("log.segment.bytes", bytes.to_string());
        }
        for (key, value) in extra {
            set(key, value.clone());
        }
        let mut text = String::from("# written by krust-testkit\n");
        for (key, value) in props {
            let _ = writeln!(text, "{key}={value}");
        }
        text
    }

    fn format(&self) -> Result<()> {
        let props = self.properties_path();
        self.dist
            .tool(class::STORAGE_TOOL)
            // `--cluster-id=`: a ZooKeeper cluster's id may begin with '-', which Kafka's
            // StorageTool would take for an option after `-t`.
            .args([
                "format".to_owned(),
                format!("--cluster-id={}", self.cluster_id),
                "-c".to_owned(),
            ])
            .arg(props.display().to_string())
            .args(&self.format_args)
            .run()?
            .ok()?;
        Ok(())
    }

    /// Starts the node (if it is not running) and waits until it is ready: the log says
    /// `Kafka Server started` and its listener ports accept connections.
    ///
    /// Another process may grab a port between [`free_ports`] and Kafka's bind; if the harness
    /// chose all of this node's ports and Kafka exits with "Address already in use", it picks
    /// new ports, rewrites `server.properties` and tries again (up to
    /// [`MAX_PORT_CONFLICT_RETRIES`] times).
    ///
    /// # Errors
    /// `Spawn`, `Exited` or `Timeout` (quoting the node's log).
    pub fn start(&mut self) -> Result<()> {
        let mut retries = 0;
        loop {
            self.spawn()?;
            let result = self.wait_ready(self.start_timeout);
            let port_conflict = matches!(result, Err(HarnessError::Exited { .. }))
                && self
                    .process
                    .as_ref()
                    .is_some_and(|p| p.log_since_start().contains("Address already in use"));
            if port_conflict && self.ports_chosen_by_harness && retries < MAX_PORT_CONFLICT_RETRIES
            {
                retries += 1;
                eprintln!(
                    "krust-testkit: kafka node {}: a port was taken, retrying with new ports",
                    self.node_id
                );
                self.reassign_ports()?;
                continue;
            }
            return result;
        }
    }

    fn reassign_ports(&mut self) -> Result<()> {
        let mut fresh = free_ports(2)?.into_iter();
        if self.broker_port.is_some() {
            self.broker_port = fresh.next();
        }
        if self.controller_port.is_some() {
            self.controller_port = fresh.next();
        }
        if let Some(port) = self.controller_port {
            self.quorum_voters = format!("{}@127.0.0.1:{port}", self.node_id);
        }
        self.write_properties()
    }

    /// Starts the JVM without waiting (use [`KafkaNode::wait_ready`]); a no-op if it runs.
    ///
    /// # Errors
    /// `Spawn` or `Io`.
    pub fn spawn(&mut self) -> Result<()> {
        match &mut self.process {
            Some(process) => {
                if process.is_running()? {
                    Ok(())
                } else {
                    process.restart()
                }
            }
            None => {
                let spec = ProcessSpec::new(
                    format!("kafka node {}", self.node_id),
                    self.dist.java(),
                    self.log_path(),
                )
                .args(self.dist.jvm_args(class::KAFKA, true))
                .arg(self.properties_path());
                self.process = Some(ManagedProcess::start(spec)?);
                Ok(())
            }
        }
    }

    /// Waits up to `timeout` for the current run to log `Kafka Server started` and for its
    /// ports to accept connections.
    ///
    /// # Errors
    /// `Invalid` if it was never started; `Exited` or `Timeout` (quoting the node's log).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let ports: Vec<u16> = self
            .broker_port
            .into_iter()
            .chain(self.controller_port)
            .collect();
        let zk_mode = self.role.is_zk_mode();
        let process = self.process_mut()?;
        let started = if zk_mode {
            ZK_BROKER_STARTED_LINE
        } else {
            KAFKA_STARTED_LINE
        };
        process.wait_for_log(started, timeout)?;
        for port in ports {
            process.wait_for_port(port, timeout)?;
        }
        if zk_mode {
            // ZooKeeper chose the cluster id (`/cluster/id`); the broker wrote it down.
            if let Some(id) = self.meta_properties()?.get("cluster.id") {
                self.cluster_id.clone_from(id);
            }
        }
        Ok(())
    }

    fn process_mut(&mut self) -> Result<&mut ManagedProcess> {
        let node_id = self.node_id;
        self.process
            .as_mut()
            .ok_or_else(|| HarnessError::Invalid(format!("kafka node {node_id} was never started")))
    }

    /// SIGKILLs the node: a crash, the active segment is left as it was.
    ///
    /// # Errors
    /// As [`ManagedProcess::kill`].
    pub fn kill(&mut self) -> Result<()> {
        if let Some(process) = &mut self.process {
            process.kill()?;
        }
        Ok(())
    }

    /// SIGTERMs the node and waits up to `timeout` for a clean shutdown (segments closed,
    /// indexes trimmed, checkpoints written). SIGKILLs it and fails if it takes longer.
    ///
    /// # Errors
    /// `Timeout` as above; `Io`.
    pub fn terminate(&mut self, timeout: Duration) -> Result<()> {
        if let Some(process) = &mut self.process {
            let status = process.terminate(timeout)?;
            // Kafka exits 0 after a clean shutdown on SIGTERM; 143 = killed by the signal itself.
            if !status.success() && status.code() != Some(143) {
                let log_tail = process.log_tail(LOG_TAIL_LINES);
                return Err(HarnessError::Exited {
                    what: format!("kafka node {}: clean shutdown", self.node_id),
                    status,
                    log: process.log_path().to_path_buf(),
                    log_tail,
                });
            }
        }
        Ok(())
    }

    /// Sets (or overrides) one `server.properties` entry and rewrites the file; it takes effect
    /// at the next start ([`KafkaNode::restart`]).
    ///
    /// # Errors
    /// `Io` if the file cannot be written.
    pub fn set_prop(&mut self, key: impl Into<String>, value: impl ToString) -> Result<()> {
        let key = key.into();
        let value = value.to_string();
        match self.extra_props.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.extra_props.push((key, value)),
        }
        self.write_properties()
    }

    /// KIP-866 phase 2 for a ZooKeeper-mode broker: sets `zookeeper.metadata.migration.enable`,
    /// `controller.quorum.voters` and `controller.listener.names` so that, after
    /// [`KafkaNode::restart`], it registers with the KRaft controllers at `quorum_voters` (which
    /// run with [`KafkaNodeBuilder::migration`]).
    ///
    /// # Errors
    /// `Invalid` for a KRaft node; `Io` if `server.properties` cannot be written.
    pub fn enable_migration(&mut self, quorum_voters: &str) -> Result<()> {
        if !self.role.is_zk_mode() {
            return Err(HarnessError::Invalid(format!(
                "node {} is a KRaft node; enable_migration() is for ZooKeeper-mode brokers",
                self.node_id
            )));
        }
        self.quorum_voters = quorum_voters.to_owned();
        self.set_prop("zookeeper.metadata.migration.enable", "true")
    }

    /// Takes a ZooKeeper-mode broker out of migration mode, as the rollback procedure does
    /// (Kafka's docs, "Reverting to ZooKeeper mode"): `zookeeper.metadata.migration.enable=false`,
    /// no `controller.quorum.voters`, no `controller.listener.names`. Restart it to apply.
    ///
    /// # Errors
    /// `Invalid` for a KRaft node; `Io` if `server.properties` cannot be written.
    pub fn disable_migration(&mut self) -> Result<()> {
        if !self.role.is_zk_mode() {
            return Err(HarnessError::Invalid(format!(
                "node {} is a KRaft node; disable_migration() is for ZooKeeper-mode brokers",
                self.node_id
            )));
        }
        self.quorum_voters.clear();
        self.set_prop("zookeeper.metadata.migration.enable", "false")
    }

    /// Stops the node cleanly ([`KafkaNode::terminate`] with [`DEFAULT_STOP_TIMEOUT`]) if it runs,
    /// then starts it again and waits until it is ready. Same ports, same data.
    ///
    /// # Errors
    /// As [`KafkaNode::terminate`] and [`KafkaNode::start`].
    pub fn restart(&mut self) -> Result<()> {
        self.terminate(DEFAULT_STOP_TIMEOUT)?;
        self.start()
    }

    /// Whether the JVM runs.
    ///
    /// # Errors
    /// `Io` if the operating system cannot tell.
    pub fn is_running(&mut self) -> Result<bool> {
        match &mut self.process {
            Some(process) => process.is_running(),
            None => Ok(false),
        }
    }

    /// The node's process, to wait for log lines etc. `None` before the first start.
    pub fn process(&mut self) -> Option<&mut ManagedProcess> {
        self.process.as_mut()
    }

    /// Waits for a line containing `needle` in the current run's log.
    ///
    /// # Errors
    /// As [`ManagedProcess::wait_for_log`]; `Invalid` if never started.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.process_mut()?.wait_for_log(needle, timeout)
    }

    /// The end of the node's log right now (see [`ManagedProcess::wait_for_log_since`]).
    pub fn log_mark(&self) -> LogMark {
        LogMark(std::fs::metadata(self.log_path()).map_or(0, |m| m.len()))
    }

    /// `node.id`.
    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// `process.roles`.
    pub fn role(&self) -> KafkaRole {
        self.role
    }

    /// The cluster id the storage was formatted with (for a ZooKeeper-mode broker: the id
    /// ZooKeeper chose, known once the broker has started).
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// `controller.quorum.voters` ("" for a [`KafkaNodeBuilder::standalone`] node).
    pub fn quorum_voters(&self) -> &str {
        &self.quorum_voters
    }

    /// The PLAINTEXT (client) port, for broker and combined nodes.
    pub fn broker_port(&self) -> Option<u16> {
        self.broker_port
    }

    /// The CONTROLLER port, for controller and combined nodes.
    pub fn controller_port(&self) -> Option<u16> {
        self.controller_port
    }

    /// `127.0.0.1:<broker port>` for clients and `--bootstrap-server` ("" for a controller-only
    /// node).
    pub fn bootstrap_servers(&self) -> String {
        self.broker_port
            .map(|p| format!("127.0.0.1:{p}"))
            .unwrap_or_default()
    }

    /// `127.0.0.1:<controller port>` for `--bootstrap-controller` ("" for a broker-only node).
    pub fn bootstrap_controller(&self) -> String {
        self.controller_port
            .map(|p| format!("127.0.0.1:{p}"))
            .unwrap_or_default()
    }

    /// The node's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `log.dirs` (also the metadata log dir): holds `meta.properties`, `__cluster_metadata-0/`
    /// and the partition folders.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The folder of one partition's log: `<log dir>/<topic>-<partition>`.
    pub fn partition_dir(&self, topic: &str, partition: u32) -> PathBuf {
        self.log_dir().join(format!("{topic}-{partition}"))
    }

    /// `<log dir>/meta.properties` as key/value pairs (comments skipped).
    ///
    /// # Errors
    /// `Io` if it cannot be read (e.g. the storage is not formatted).
    pub fn meta_properties(&self) -> Result<BTreeMap<String, String>> {
        read_properties(&self.log_dir().join("meta.properties"))
    }

    /// The `server.properties` the node runs with.
    pub fn properties_path(&self) -> PathBuf {
        self.dir.join("server.properties")
    }

    /// The file holding the JVM's stdout and stderr (Kafka's log at INFO).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("kafka.log")
    }

    /// The Kafka installation the node runs from.
    pub fn dist(&self) -> &KafkaDist {
        &self.dist
    }

    /// [`KafkaDist::create_topic`] on this node (replication factor 1).
    ///
    /// # Errors
    /// `ToolFailed` (with Kafka's message) or `ToolTimeout`.
    pub fn create_topic(
        &self,
        topic: &str,
        partitions: u32,
        configs: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        self.dist
            .create_topic(&self.bootstrap_servers(), topic, partitions, 1, configs)
    }

    /// [`KafkaDist::console_produce`] to this node.
    ///
    /// # Errors
    /// `ToolFailed` or `ToolTimeout`.
    pub fn console_produce(
        &self,
        topic: &str,
        input: &str,
        properties: &[(&str, &str)],
        producer_properties: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        self.dist.console_produce(
            &self.bootstrap_servers(),
            topic,
            input,
            properties,
            producer_properties,
        )
    }

    /// [`KafkaDist::console_consume`] from this node.
    ///
    /// # Errors
    /// `ToolFailed` or `ToolTimeout`.
    pub fn console_consume(
        &self,
        topic: &str,
        max_messages: usize,
        properties: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<ToolOutput> {
        self.dist.console_consume(
            &self.bootstrap_servers(),
            topic,
            max_messages,
            properties,
            timeout,
        )
    }

    /// [`KafkaDist::producer_perf`] against this node.
    ///
    /// # Errors
    /// `ToolFailed`, `ToolTimeout`, or `Invalid` if the summary line is missing.
    pub fn producer_perf(
        &self,
        topic: &str,
        num_records: u64,
        record_size: usize,
        producer_props: &[(&str, &str)],
    ) -> Result<ProducerPerfSummary> {
        self.dist.producer_perf(
            &self.bootstrap_servers(),
            topic,
            num_records,
            record_size,
            producer_props,
        )
    }
}

impl Drop for KafkaNode {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(process) = &self.process
        {
            eprintln!(
                "krust-testkit: kafka node {} log {} (last lines):\n{}",
                self.node_id,
                process.log_path().display(),
                process.log_tail(20)
            );
        }
        // `process` (declared first) is dropped — SIGKILLed — before `_temp` removes the folder.
    }
}

/// Configures a [`KafkaCluster`]; see [`KafkaCluster::builder`].
#[derive(Debug)]
pub struct KafkaClusterBuilder {
    dist: KafkaDist,
    combined: usize,
    controllers: usize,
    brokers: usize,
    segment_bytes: Option<u64>,
    props: Vec<(String, String)>,
    start_timeout: Duration,
}

impl KafkaClusterBuilder {
    /// `n` combined (broker + controller) nodes, ids 1..=n. Replaces `controllers`/`brokers`.
    pub fn combined(mut self, n: usize) -> Self {
        self.combined = n;
        self.controllers = 0;
        self.brokers = 0;
        self
    }

    /// `n` controller-only nodes (ids 1..=n) …
    pub fn controllers(mut self, n: usize) -> Self {
        self.combined = 0;
        self.controllers = n;
        self
    }

    /// … plus `n` broker-only nodes (ids following the controllers').
    pub fn brokers(mut self, n: usize) -> Self {
        self.combined = 0;
        self.brokers = n;
        self
    }

    /// `log.segment.bytes` on every node.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = Some(bytes);
        self
    }

    /// A `server.properties` entry for every node.
    pub fn prop(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.props.push((key.into(), value.to_string()));
        self
    }

    /// Readiness limit for the whole cluster.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Formats every node, starts them all at once (the controllers need each other to elect a
    /// leader) and waits until each is ready.
    ///
    /// # Errors
    /// `Invalid` for a cluster without a controller; otherwise as [`KafkaNode::start`].
    pub fn start(self) -> Result<KafkaCluster> {
        let voters_count = if self.combined > 0 {
            self.combined
        } else {
            self.controllers
        };
        if voters_count == 0 {
            return Err(HarnessError::Invalid(
                "a KRaft cluster needs at least one controller".into(),
            ));
        }
        let total = if self.combined > 0 {
            self.combined
        } else {
            self.controllers + self.brokers
        };
        let controller_ports = free_ports(voters_count)?;
        let voters = controller_ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}@127.0.0.1:{port}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = random_kafka_uuid();
        // Internal topics as replicated as the cluster allows (up to 3), so that killing one
        // broker does not take the group coordinator or transaction state with it.
        let brokers = if self.combined > 0 {
            self.combined
        } else {
            self.brokers
        };
        let internal_rf = brokers.clamp(1, 3).to_string();
        let mut nodes = Vec::with_capacity(total);
        for index in 0..total {
            let node_id = i32::try_from(index + 1)
                .map_err(|_| HarnessError::Invalid(format!("too many nodes: {total}")))?;
            let role = if self.combined > 0 {
                KafkaRole::Combined
            } else if index < self.controllers {
                KafkaRole::Controller
            } else {
                KafkaRole::Broker
            };
            let mut builder = KafkaNode::builder(&self.dist)
                .node_id(node_id)
                .role(role)
                .cluster_id(cluster_id.clone())
                .quorum_voters(voters.clone())
                .start_timeout(self.start_timeout);
            if let Some(port) = controller_ports.get(index) {
                builder = builder.controller_port(*port);
            }
            if let Some(bytes) = self.segment_bytes {
                builder = builder.segment_bytes(bytes);
            }
            builder = builder
                .prop("offsets.topic.replication.factor", &internal_rf)
                .prop("transaction.state.log.replication.factor", &internal_rf);
            for (key, value) in &self.props {
                builder = builder.prop(key.clone(), value);
            }
            nodes.push(builder.build()?);
        }
        for node in &mut nodes {
            node.spawn()?;
        }
        for node in &mut nodes {
            node.wait_ready(self.start_timeout)?;
        }
        Ok(KafkaCluster { nodes, cluster_id })
    }
}

/// Several Kafka 3.9 nodes sharing one static quorum (`controller.quorum.voters`). Every node
/// is killed on drop.
#[derive(Debug)]
pub struct KafkaCluster {
    nodes: Vec<KafkaNode>,
    cluster_id: String,
}

impl KafkaCluster {
    /// Defaults: 3 combined nodes.
    pub fn builder(dist: &KafkaDist) -> KafkaClusterBuilder {
        KafkaClusterBuilder {
            dist: dist.clone(),
            combined: 3,
            controllers: 0,
            brokers: 0,
            segment_bytes: None,
            props: Vec::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// All nodes, in id order.
    pub fn nodes(&self) -> &[KafkaNode] {
        &self.nodes
    }

    /// All nodes, mutable (to kill or restart one).
    pub fn nodes_mut(&mut self) -> &mut [KafkaNode] {
        &mut self.nodes
    }

    /// The node with `node.id` = `node_id`.
    pub fn node_mut(&mut self, node_id: i32) -> Option<&mut KafkaNode> {
        self.nodes.iter_mut().find(|n| n.node_id() == node_id)
    }

    /// `host:port,...` of every broker.
    pub fn bootstrap_servers(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.role().is_broker())
            .map(KafkaNode::bootstrap_servers)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `controller.quorum.voters` of the cluster.
    pub fn quorum_voters(&self) -> &str {
        self.nodes.first().map_or("", KafkaNode::quorum_voters)
    }
}
