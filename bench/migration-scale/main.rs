//! `migration-scale`: the KIP-866 ZooKeeper → KRaft migration at scale — a krust controller and
//! an Apache Kafka 3.9 controller migrating the same ZooKeeper cluster, in alternating rounds of
//! the same run.
//!
//! Each run (one implementation, one round) starts from nothing:
//!
//! 1. **ZooKeeper**: a fresh standalone ZooKeeper (Kafka 3.9's, `zookeeper-server-start.sh`'s JVM
//!    settings), seeded directly with krust-zk's znode codecs (Kafka 3.9's bytes) in multi-ops
//!    of [`SEED_BATCH`] creates: `--topics` topics × `--partitions` partitions on broker
//!    [`BROKER_ID`] (assignment znode with a topic id, `partitions/<p>` and `state` znodes),
//!    `/config/topics/<t>` for every topic (as Kafka's `AdminZkClient` writes it) with two
//!    configs on every `--config-every`-th topic, `--scram-users` users with a SCRAM-SHA-256
//!    credential, `--acls` literal topic ACLs (`--acls-per-resource` per topic), `/cluster/id`,
//!    `/controller_epoch`, `/latest_producer_id_block`. The seed is the same in every run (topic
//!    ids and SCRAM bytes are derived from the topic/user number).
//! 2. **Controller**: one KRaft controller (a single voter) with
//!    `zookeeper.metadata.migration.enable=true`: `krust server`, or Kafka 3.9's `kafka.Kafka` with
//!    `kafka-server-start.sh`'s JVM settings. It waits in PRE_MIGRATION.
//! 3. **Broker**: one Kafka 3.9 ZooKeeper-mode broker in migration mode (same JVM settings). The
//!    seed holds a persistent `/controller` naming a broker that does not exist (id
//!    [`ABSENT_ZK_CONTROLLER`]), so that the broker does not become ZooKeeper controller and
//!    load every partition before the copy; the KRaft controller replaces it when it claims
//!    controllership (facts §6.6). Once the broker has registered, the controller copies.
//! 4. **Copy**: the controller's own line — "Completed migration of metadata from ZooKeeper to
//!    KRaft. N records were generated in X ms across B batches…" (the same wording in Kafka's
//!    `KRaftMigrationDriver` and krust's driver) — gives records, ms and batches; records/s =
//!    N / X. The active controller's RSS (`VmRSS` from `/proc/<pid>/status`) right after.
//! 5. **Dual-write lag**: once a probe change is seen in ZooKeeper (the driver is
//!    dual-writing) and the broker hosts every partition (it creates them after the copy, from
//!    the controller's full LeaderAndIsr; waiting keeps that work out of the measurement),
//!    `--changes-per-second` topic config changes for `--lag-seconds` (after
//!    `--warmup-seconds`): IncrementalAlterConfigs (SET `retention.ms` to an increasing number)
//!    sent straight to the controller listener, spread over `--lanes` topics, one request in
//!    flight per lane, each lane paced on a fixed schedule. The znode `/config/topics/<t>` of
//!    every lane topic is watched (a ZooKeeper data watch, re-armed by the read that follows
//!    each notification): a change is reflected at the first read that shows its value or a
//!    later one. Lag = that read's time − the time the controller's answer arrived (0 if the
//!    znode showed it first); also reported from the send. The same method for both.
//!    `VmRSS` and `VmHWM` (peak) of the controller afterwards.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/migration-scale --topics 2000 --partitions 5   # a quick run
//! target/release/migration-scale --partitions 10                # the issue's full size
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_bench::kafka_jvm::{
    KAFKA_SERVER_HEAP_OPTS, ZOOKEEPER_SERVER_HEAP_OPTS, server_jvm_args, server_jvm_flags,
    start_kafka_server,
};
use krust_bench::{STARTED_LINE, cores, cpu_model, default_krust_binary, load_average, ms};
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    KAFKA_STARTED_LINE, KafkaDist, KafkaNode, KafkaRole, KrustProcess, ManagedProcess, ProcessSpec,
    ZOOKEEPER_MAIN, free_port, run_binary,
};
use krust_zk::backend::ZkBackend as _;
use krust_zk::client::{ZkClient, ZkClientConfig};
use krust_zk::model::acls::{AclEntry, AclZNode, PATTERN_LITERAL};
use krust_zk::model::cluster::{ControllerRegistration, cluster_id, controller_epoch};
use krust_zk::model::configs::{ConfigEntityZNode, ScramCredentialString};
use krust_zk::model::topics::{
    PartitionStateZNode, ProducerIdBlockZNode, ReplicaAssignment, TopicZNode,
};
use krust_zk::model::{acls, paths};
use krust_zk::ops::ZkOp;

/// krust vs. Kafka 3.9 controllers migrating the same ZooKeeper cluster (KIP-866).
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Folder for the runs' data (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Topics in ZooKeeper.
    #[arg(long, default_value_t = 10_000)]
    topics: usize,
    /// Partitions per topic (the issue's 10 means 100,000 partitions on the one broker).
    #[arg(long, default_value_t = 2)]
    partitions: i32,
    /// Every n-th topic has two configs (10: 10% of the topics).
    #[arg(long, default_value_t = 10)]
    config_every: usize,
    /// Literal topic ACLs in ZooKeeper.
    #[arg(long, default_value_t = 10_000)]
    acls: usize,
    /// ACLs per topic resource (`--acls` / this many resources).
    #[arg(long, default_value_t = 10)]
    acls_per_resource: usize,
    /// Users with a SCRAM-SHA-256 credential.
    #[arg(long, default_value_t = 1_000)]
    scram_users: usize,
    /// Rounds; each round migrates once with krust, then once with Kafka.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Metadata changes per second during dual-write.
    #[arg(long, default_value_t = 1_000)]
    changes_per_second: u32,
    /// Topics the changes are spread over (one request in flight per topic).
    #[arg(long, default_value_t = 50)]
    lanes: usize,
    /// Seconds of changes measured.
    #[arg(long, default_value_t = 10)]
    lag_seconds: u64,
    /// Seconds of changes sent first and not counted.
    #[arg(long, default_value_t = 2)]
    warmup_seconds: u64,
    /// Longest wait for the broker to host every partition after the copy.
    #[arg(long, default_value_t = 900)]
    broker_wait_seconds: u64,
    /// Measure krust only.
    #[arg(long)]
    skip_kafka: bool,
    /// Measure Kafka only.
    #[arg(long)]
    skip_krust: bool,
}

/// Longest wait for a start or for the copy.
const STEP_TIMEOUT: Duration = Duration::from_secs(1800);
/// The ZooKeeper broker (every replica is on it).
const BROKER_ID: i32 = 1;
/// The broker id in the seeded `/controller`: no such broker exists.
const ABSENT_ZK_CONTROLLER: i32 = 999;
/// The KRaft controller's node id (both implementations).
const CONTROLLER_ID: i32 = 3000;
/// Creates per ZooKeeper multi-op when seeding.
const SEED_BATCH: usize = 1000;
/// Both controllers' line once the copy is committed (Kafka's `KRaftMigrationDriver` wording).
const MIGRATION_COMPLETED: &str = "Completed migration of metadata from ZooKeeper to KRaft";
/// Values of `retention.ms` set during dual-write are `LAG_BASE + sequence number`.
const LAG_BASE: i64 = 2_000_000_000;
/// The config the changes set.
const LAG_KEY: &str = "retention.ms";
/// Settle time after the last change for the last ones to reach ZooKeeper.
const LAG_GRACE: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Krust,
    Kafka,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Krust => "krust",
            Kind::Kafka => "kafka",
        }
    }
}

fn topic_name(i: usize) -> String {
    format!("mig-{i:06}")
}

/// A fixed, valid (not reserved) topic id per topic number.
fn topic_id(i: usize) -> uuid::Uuid {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(b"MIGR");
    bytes[8..].copy_from_slice(&(i as u64 + 1).to_be_bytes());
    uuid::Uuid::from_bytes(bytes)
}

/// Creates of the seed, parents first, in multi-ops of [`SEED_BATCH`].
struct Seeder<'a> {
    client: &'a ZkClient,
    ops: Vec<ZkOp>,
    created: std::collections::HashSet<String>,
    znodes: usize,
}

impl Seeder<'_> {
    async fn create(&mut self, path: &str, data: Vec<u8>) -> Result<()> {
        // Parents (empty) first.
        let mut parent = String::new();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            parent.push('/');
            parent.push_str(part);
            if self.created.insert(parent.clone()) {
                self.push(ZkOp::create(parent.clone(), Vec::new())).await?;
            }
        }
        if self.created.insert(path.to_owned()) {
            self.push(ZkOp::create(path, data)).await?;
        }
        Ok(())
    }

    /// A znode whose parents are known to exist (not remembered: leaves only).
    async fn leaf(&mut self, path: String, data: Vec<u8>) -> Result<()> {
        self.push(ZkOp::create(path, data)).await
    }

    async fn push(&mut self, op: ZkOp) -> Result<()> {
        self.ops.push(op);
        if self.ops.len() >= SEED_BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        self.client
            .multi(&self.ops)
            .await
            .context("seeding ZooKeeper")?;
        self.znodes += self.ops.len();
        self.ops.clear();
        Ok(())
    }
}

/// Writes the seed cluster into the empty ZooKeeper at `connect`; the number of znodes.
async fn seed(connect: &str, args: &Args, cluster: &str) -> Result<usize> {
    // The port is open a moment before ZooKeeper serves sessions.
    let mut attempts = 0;
    let client = loop {
        match ZkClient::connect(ZkClientConfig::new(connect)).await {
            Ok(client) => break client,
            Err(_) if attempts < 60 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context("connect to ZooKeeper"),
        }
    };
    let mut s = Seeder {
        client: &client,
        ops: Vec::new(),
        created: std::collections::HashSet::new(),
        znodes: 0,
    };
    for path in paths::PERSISTENT_PATHS {
        s.create(path, Vec::new()).await?;
    }
    s.create(paths::CLUSTER_ID, cluster_id::encode(cluster))
        .await?;
    s.create(paths::CONTROLLER_EPOCH, controller_epoch::encode(1))
        .await?;
    let absent = ControllerRegistration {
        broker_id: ABSENT_ZK_CONTROLLER,
        timestamp_ms: 0,
        kraft_controller_epoch: None,
    };
    s.create(paths::CONTROLLER, absent.encode()).await?;
    // Kafka's ZooKeeper controller wrote the last block (1000 ids) handed to broker 1.
    let block = ProducerIdBlockZNode {
        broker: BROKER_ID,
        block_start: 0,
        block_end: 999,
    };
    // `/latest_producer_id_block` is a persistent path (created empty above): set at the end.
    for store in [
        paths::LITERAL_ACL_CHANGES,
        paths::EXTENDED_ACL_CHANGES,
        "/kafka-acl/Topic",
        "/kafka-acl/Group",
        "/kafka-acl-extended/prefixed/Topic",
    ] {
        s.create(store, Vec::new()).await?;
    }
    for i in 0..args.topics {
        let name = topic_name(i);
        let mut znode = TopicZNode {
            topic_id: Some(topic_id(i)),
            partitions: BTreeMap::new(),
        };
        for p in 0..args.partitions {
            znode.partitions.insert(
                p,
                ReplicaAssignment {
                    replicas: vec![BROKER_ID],
                    ..ReplicaAssignment::default()
                },
            );
        }
        let mut config = BTreeMap::new();
        if args.config_every > 0 && i % args.config_every == 0 {
            config.insert("retention.ms".to_owned(), (86_400_000 + i).to_string());
            config.insert("segment.bytes".to_owned(), "536870912".to_owned());
        }
        s.leaf(
            paths::config_entity("topics", &name),
            ConfigEntityZNode { config }.encode(),
        )
        .await?;
        s.leaf(paths::topic(&name), znode.encode()).await?;
        s.leaf(paths::topic_partitions(&name), Vec::new()).await?;
        for p in 0..args.partitions {
            s.leaf(paths::topic_partition(&name, p), Vec::new()).await?;
            let state = PartitionStateZNode {
                leader: BROKER_ID,
                leader_epoch: 0,
                controller_epoch: 1,
                isr: vec![BROKER_ID],
                leader_recovery_state: 0,
            };
            s.leaf(paths::partition_state(&name, p), state.encode())
                .await?;
        }
    }
    for u in 0..args.scram_users {
        let byte = |salt: u8| -> Vec<u8> {
            (0u8..32)
                .map(|k| k ^ salt ^ (u as u8) ^ ((u >> 8) as u8))
                .collect()
        };
        let credential = ScramCredentialString {
            salt: byte(0x11)[..16].to_vec(),
            stored_key: byte(0x22),
            server_key: byte(0x33),
            iterations: 4096,
        };
        let mut config = BTreeMap::new();
        config.insert("SCRAM-SHA-256".to_owned(), credential.encode());
        s.leaf(
            paths::config_entity("users", &format!("user-{u:05}")),
            ConfigEntityZNode { config }.encode(),
        )
        .await?;
    }
    let per = args.acls_per_resource.max(1);
    let topic_code = acls::resource_type_code("Topic").context("Topic")?;
    let read = acls::operation_code("Read").context("Read")?;
    let allow = acls::permission_type_code("Allow").context("Allow")?;
    let mut left = args.acls;
    let mut resource = 0;
    while left > 0 {
        let n = left.min(per);
        let znode = AclZNode {
            acls: (0..n)
                .map(|j| AclEntry {
                    principal: format!("User:user-{:05}", (resource * per + j) % 100_000),
                    host: "*".to_owned(),
                    operation: read,
                    permission_type: allow,
                })
                .collect(),
        };
        let path = acls::resource_path(topic_code, &topic_name(resource), PATTERN_LITERAL)
            .context("ACL path")?;
        s.leaf(path, znode.encode().context("ACL znode")?).await?;
        left -= n;
        resource += 1;
    }
    s.flush().await?;
    client
        .apply(&ZkOp::set_data(
            paths::PRODUCER_ID_BLOCK,
            block.encode(),
            krust_zk::ops::ANY_VERSION,
        ))
        .await
        .context("set /latest_producer_id_block")?;
    Ok(s.znodes)
}

/// A standalone ZooKeeper with `zookeeper-server-start.sh`'s JVM settings.
fn start_zookeeper(dist: &KafkaDist, dir: &Path) -> Result<(ManagedProcess, u16)> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let config = dir.join("zookeeper.properties");
    std::fs::write(
        &config,
        format!(
            "dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\ntickTime=2000\n",
            dir.join("data").display()
        ),
    )?;
    let spec = ProcessSpec::new("zookeeper", dist.java(), dir.join("zookeeper.log"))
        .args(server_jvm_args(
            dist,
            ZOOKEEPER_SERVER_HEAP_OPTS,
            ZOOKEEPER_MAIN,
        ))
        .arg(&config);
    let mut process = ManagedProcess::start(spec).context("start ZooKeeper")?;
    process
        .wait_for_port(port, Duration::from_secs(120))
        .context("ZooKeeper started")?;
    Ok((process, port))
}

/// The controller under test.
enum Controller {
    Krust(Box<KrustProcess>),
    Kafka {
        process: Box<ManagedProcess>,
        // Holds the node's settings (its folder is the run's).
        _node: Box<KafkaNode>,
    },
}

impl Controller {
    fn pid(&self) -> Option<u32> {
        match self {
            Controller::Krust(p) => p.pid(),
            Controller::Kafka { process, .. } => process.pid(),
        }
    }

    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        Ok(match self {
            Controller::Krust(p) => p.wait_for_line(needle, timeout)?,
            Controller::Kafka { process, .. } => process.wait_for_log(needle, timeout)?,
        })
    }
}

/// `(VmRSS, VmHWM)` of `pid` in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `N records were generated in X ms across B batches` of the completion line.
fn parse_completion(line: &str) -> Result<(u64, u64, u64)> {
    let rest = line
        .split(MIGRATION_COMPLETED)
        .nth(1)
        .context("no completion text")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let after = |word: &str| -> Result<u64> {
        let i = words
            .iter()
            .position(|w| *w == word)
            .with_context(|| format!("no {word:?} in {line:?}"))?;
        words
            .get(i + 1)
            .and_then(|w| w.parse().ok())
            .with_context(|| format!("no number after {word:?} in {line:?}"))
    };
    let records: u64 = words
        .get(1)
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("no record count in {line:?}"))?;
    Ok((records, after("in")?, after("across")?))
}

fn client(address: &str) -> Client {
    Client::new(
        address.to_owned(),
        ClientConfig {
            client_id: "migration-scale".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    )
}

/// IncrementalAlterConfigs SET `retention.ms` of `topic`; `Ok(error code)`.
async fn set_retention(client: &Client, topic: &str, value: i64) -> Result<i16> {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_owned()))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(StrBytes::from_static_str(LAG_KEY))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(value.to_string()))),
            ]),
    ]);
    match client.send(request, 1).await? {
        ResponseKind::IncrementalAlterConfigs(r) => {
            Ok(r.responses.first().map_or(-1, |r| r.error_code))
        }
        other => bail!("unexpected response {other:?}"),
    }
}

/// The sequence number `retention.ms` of a config znode shows (-1: none of ours).
fn lag_sequence(data: &[u8]) -> i64 {
    ConfigEntityZNode::decode("/config/topics", data)
        .ok()
        .and_then(|c| c.config.get(LAG_KEY).and_then(|v| v.parse::<i64>().ok()))
        .map_or(-1, |v| if v >= LAG_BASE { v - LAG_BASE } else { -1 })
}

/// Sends one change to lane topic 0 until the controller accepts it and ZooKeeper shows it:
/// the driver is dual-writing.
async fn probe_dual_write(address: &str, connect: &str) -> Result<Duration> {
    let started = Instant::now();
    let c = client(address);
    let zk = ZkClient::connect(ZkClientConfig::new(connect)).await?;
    let topic = topic_name(0);
    let path = paths::config_entity("topics", &topic);
    let mut accepted = false;
    while started.elapsed() < STEP_TIMEOUT {
        if !accepted {
            accepted = matches!(set_retention(&c, &topic, LAG_BASE - 1).await, Ok(0));
        }
        if accepted {
            let (data, _) = zk.get_data(&path).await?;
            let shown = ConfigEntityZNode::decode(&path, &data)
                .ok()
                .and_then(|c| c.config.get(LAG_KEY).cloned());
            if shown == Some((LAG_BASE - 1).to_string()) {
                return Ok(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("no dual-write of the probe change within {STEP_TIMEOUT:?}")
}

/// One change: when sent, when answered (and how), when ZooKeeper showed it.
#[derive(Clone, Copy, Debug)]
struct Change {
    sent: Instant,
    acked: Option<Instant>,
    error_code: i16,
}

#[derive(Debug, Default)]
struct LagFigures {
    sent: usize,
    ok: usize,
    refused: usize,
    unseen: usize,
    rate: f64,
    /// Answer → seen in ZooKeeper (changes never seen count until the end of the grace).
    ack_lags: Vec<Duration>,
    /// Sent → seen in ZooKeeper.
    send_lags: Vec<Duration>,
}

/// The dual-write phase: changes at a fixed rate over `lanes` topics, each lane's config
/// znode watched.
async fn measure_lag(address: &str, connect: &str, args: &Args) -> Result<LagFigures> {
    let lanes = args.lanes.clamp(1, args.topics.max(1));
    let rate = f64::from(args.changes_per_second.max(1));
    let total_secs = args.warmup_seconds + args.lag_seconds;
    let per_lane = (((rate * total_secs as f64) / lanes as f64).ceil() as usize).max(1);
    let zk = zookeeper_client::Client::connect(connect)
        .await
        .context("connect to ZooKeeper (watcher)")?;
    let seen: Vec<Arc<Mutex<Vec<Option<Instant>>>>> = (0..lanes)
        .map(|_| Arc::new(Mutex::new(vec![None; per_lane])))
        .collect();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut watchers = tokio::task::JoinSet::new();
    for (lane, seen) in seen.iter().enumerate() {
        let zk = zk.clone();
        let seen = seen.clone();
        let mut stop = stop_rx.clone();
        let path = paths::config_entity("topics", &topic_name(lane));
        watchers.spawn(async move {
            let mut last: i64 = -1;
            loop {
                let (data, _, watcher) = zk
                    .get_and_watch_data(&path)
                    .await
                    .map_err(|e| anyhow::anyhow!("watch {path}: {e}"))?;
                let now = Instant::now();
                let shown = lag_sequence(&data);
                if shown > last {
                    let mut seen = seen.lock().expect("not poisoned");
                    let from = usize::try_from(last + 1).unwrap_or(0);
                    let to = usize::try_from(shown).unwrap_or(0).min(seen.len() - 1);
                    for slot in seen.iter_mut().take(to + 1).skip(from) {
                        slot.get_or_insert(now);
                    }
                    last = shown;
                }
                tokio::select! {
                    _ = watcher.changed() => {}
                    _ = stop.changed() => return Ok::<(), anyhow::Error>(()),
                }
            }
        });
    }
    // Let every watch be armed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for lane in 0..lanes {
        let c = Arc::new(client(address));
        let topic = topic_name(lane);
        senders.spawn(async move {
            let mut changes = Vec::with_capacity(per_lane);
            for i in 0..per_lane {
                let due = start + Duration::from_secs_f64((i * lanes + lane) as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let sent = Instant::now();
                let value = LAG_BASE + i as i64;
                let (acked, error_code) = match set_retention(&c, &topic, value).await {
                    Ok(code) => (Some(Instant::now()), code),
                    Err(_) => (None, -1),
                };
                changes.push(Change {
                    sent,
                    acked,
                    error_code,
                });
            }
            (lane, changes)
        });
    }
    let mut all: Vec<Vec<Change>> = vec![Vec::new(); lanes];
    while let Some(done) = senders.join_next().await {
        let (lane, changes) = done.context("sender task")?;
        all[lane] = changes;
    }
    let sending = start.elapsed();
    // Wait for every accepted change to show (or the grace to run out).
    let deadline = Instant::now() + LAG_GRACE;
    loop {
        let missing = all.iter().zip(&seen).any(|(changes, seen)| {
            let seen = seen.lock().expect("not poisoned");
            changes
                .iter()
                .zip(seen.iter())
                .any(|(c, s)| c.error_code == 0 && s.is_none())
        });
        if !missing || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grace_end = Instant::now();
    let _ = stop_tx.send(true);
    while let Some(done) = watchers.join_next().await {
        done.context("watcher task")??;
    }
    let warmup_end = start + Duration::from_secs(args.warmup_seconds);
    let mut figures = LagFigures::default();
    for (changes, seen) in all.iter().zip(&seen) {
        let seen = seen.lock().expect("not poisoned");
        for (change, shown) in changes.iter().zip(seen.iter()) {
            if change.sent < warmup_end {
                continue;
            }
            figures.sent += 1;
            let Some(acked) = change.acked.filter(|_| change.error_code == 0) else {
                figures.refused += 1;
                continue;
            };
            figures.ok += 1;
            match shown {
                Some(at) => {
                    figures.ack_lags.push(at.saturating_duration_since(acked));
                    figures
                        .send_lags
                        .push(at.saturating_duration_since(change.sent));
                }
                // Not seen by the end of the grace: counted at the end of the grace, so
                // the percentiles are lower bounds when `unseen` > 0.
                None => {
                    figures.unseen += 1;
                    figures
                        .ack_lags
                        .push(grace_end.saturating_duration_since(acked));
                    figures
                        .send_lags
                        .push(grace_end.saturating_duration_since(change.sent));
                }
            }
        }
    }
    let measured = sending
        .saturating_sub(Duration::from_secs(args.warmup_seconds))
        .as_secs_f64();
    figures.rate = figures.ok as f64 / measured.max(1e-9);
    figures.ack_lags.sort_unstable();
    figures.send_lags.sort_unstable();
    Ok(figures)
}

/// What one run measured.
#[derive(Debug, Default)]
struct Figures {
    records: u64,
    copy_ms: u64,
    batches: u64,
    broker_start_to_copy: Duration,
    rss_after_copy_kib: u64,
    rss_end_kib: u64,
    hwm_end_kib: u64,
    lag: LagFigures,
}

impl Figures {
    fn records_per_s(&self) -> f64 {
        self.records as f64 / (self.copy_ms as f64 / 1e3).max(1e-9)
    }
}

fn start_controller(
    kind: Kind,
    krust: &Path,
    dist: &KafkaDist,
    dir: &Path,
    cluster: &str,
    connect: &str,
) -> Result<(Controller, String, String)> {
    match kind {
        Kind::Krust => {
            let port = free_port()?;
            let voters = format!("{CONTROLLER_ID}@127.0.0.1:{port}");
            std::fs::create_dir_all(dir)?;
            let props = dir.join("server.properties");
            std::fs::write(
                &props,
                format!(
                    "process.roles=controller\nnode.id={CONTROLLER_ID}\n\
                     controller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
                     controller.quorum.voters={voters}\nlog.dirs={}\n\
                     zookeeper.metadata.migration.enable=true\nzookeeper.connect={connect}\n",
                    dir.join("data").display()
                ),
            )?;
            let props_arg = props.display().to_string();
            let cluster_arg = format!("--cluster-id={cluster}");
            run_binary(
                krust,
                &["storage", "format", &cluster_arg, "-c", &props_arg],
                None,
                Duration::from_secs(60),
            )
            .context("krust storage format")?
            .ok()
            .context("krust storage format")?;
            let mut process = KrustProcess::builder(krust)
                .args(["server".as_ref(), props.as_os_str()])
                .env("RUST_LOG", "info,krust_net=warn")
                .dir(dir.to_path_buf())
                .name("krust-controller")
                .start()
                .context("start krust")?;
            process
                .wait_for_line(STARTED_LINE, STEP_TIMEOUT)
                .context("krust started")?;
            Ok((
                Controller::Krust(Box::new(process)),
                voters,
                format!("127.0.0.1:{port}"),
            ))
        }
        Kind::Kafka => {
            let node = KafkaNode::builder(dist)
                .role(KafkaRole::Controller)
                .node_id(CONTROLLER_ID)
                .cluster_id(cluster.to_owned())
                .zookeeper(connect.to_owned())
                .migration()
                .dir(dir.to_path_buf())
                .build()
                .context("format the Kafka controller")?;
            let mut process = start_kafka_server(
                dist,
                "kafka-controller",
                &node.properties_path(),
                &dir.join("server.log"),
            )
            .context("start the Kafka controller")?;
            process
                .wait_for_log(KAFKA_STARTED_LINE, STEP_TIMEOUT)
                .context("Kafka controller started")?;
            let voters = node.quorum_voters().to_owned();
            let address = node.bootstrap_controller();
            Ok((
                Controller::Kafka {
                    process: Box::new(process),
                    _node: Box::new(node),
                },
                voters,
                address,
            ))
        }
    }
}

/// Partition folders in the broker's log dir.
fn hosted_partitions(log_dir: &Path) -> usize {
    std::fs::read_dir(log_dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("mig-"))
            .count()
    })
}

/// One migration: fresh ZooKeeper, seed, controller, broker, copy, dual-write.
fn run(
    kind: Kind,
    round: usize,
    args: &Args,
    krust: &Path,
    dist: &KafkaDist,
    runtime: &tokio::runtime::Runtime,
) -> Result<Figures> {
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut root = tempfile::Builder::new()
        .prefix("migration-scale-")
        .tempdir_in(&parent)
        .context("temp dir")?;
    if std::env::var_os("MIGRATION_SCALE_KEEP").is_some() {
        root.disable_cleanup(true);
        println!("  keeping {}", root.path().display());
    }
    let tag = format!("[round {round} {}]", kind.name());
    // Kafka's StorageTool would take an id starting with '-' for an option.
    let cluster = loop {
        let id = krust_testkit::random_kafka_uuid();
        if !id.starts_with('-') {
            break id;
        }
    };

    let (_zookeeper, zk_port) = start_zookeeper(dist, &root.path().join("zookeeper"))?;
    let connect = format!("127.0.0.1:{zk_port}");
    let seeding = Instant::now();
    let znodes = runtime.block_on(seed(&connect, args, &cluster))?;
    println!(
        "{tag} seeded {znodes} znodes in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );

    let (mut controller, voters, address) = start_controller(
        kind,
        krust,
        dist,
        &root.path().join("controller"),
        &cluster,
        &connect,
    )?;
    let broker = KafkaNode::builder(dist)
        .role(KafkaRole::ZkBroker)
        .node_id(BROKER_ID)
        .zookeeper(connect.clone())
        .quorum_voters(voters)
        .migration()
        .dir(root.path().join("broker"))
        .build()
        .context("configure the ZooKeeper broker")?;
    let broker_started = Instant::now();
    let broker_process = start_kafka_server(
        dist,
        "zk-broker",
        &broker.properties_path(),
        &root.path().join("broker").join("server.log"),
    )
    .context("start the ZooKeeper broker")?;
    let line = controller
        .wait_for_line(MIGRATION_COMPLETED, STEP_TIMEOUT)
        .with_context(|| format!("{tag} the copy"))?;
    let mut figures = Figures {
        broker_start_to_copy: broker_started.elapsed(),
        ..Figures::default()
    };
    (figures.records, figures.copy_ms, figures.batches) = parse_completion(&line)?;
    let pid = controller.pid().context("controller pid")?;
    figures.rss_after_copy_kib = rss_kib(pid).0;
    println!(
        "{tag} copy: {} records in {} ms across {} batches ({:.0} records/s), RSS {:.0} MiB",
        figures.records,
        figures.copy_ms,
        figures.batches,
        figures.records_per_s(),
        figures.rss_after_copy_kib as f64 / 1024.0
    );

    let probe = runtime.block_on(probe_dual_write(&address, &connect))?;
    let expected = args.topics * usize::try_from(args.partitions).unwrap_or(0);
    let waited = Instant::now();
    let deadline = waited + Duration::from_secs(args.broker_wait_seconds);
    let mut hosted = hosted_partitions(&broker.log_dir());
    while hosted < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        hosted = hosted_partitions(&broker.log_dir());
    }
    println!(
        "{tag} dual-writing {:.1} s after the copy; broker hosts {hosted}/{expected} partitions \
         after {:.1} s more",
        probe.as_secs_f64(),
        waited.elapsed().as_secs_f64()
    );

    println!(
        "{tag} load average before the dual-write phase: {}",
        load_average()
    );
    figures.lag = runtime.block_on(measure_lag(&address, &connect, args))?;
    (figures.rss_end_kib, figures.hwm_end_kib) = rss_kib(pid);
    let lag = &figures.lag;
    println!(
        "{tag} dual-write: {} sent, {} ok ({:.0}/s), {} refused, {} not seen; lag after the \
         answer p50 {:.1} ms p99 {:.1} ms max {:.1} ms; from the send p50 {:.1} ms p99 {:.1} ms; \
         RSS {:.0} MiB (peak {:.0} MiB); load {}",
        lag.sent,
        lag.ok,
        lag.rate,
        lag.refused,
        lag.unseen,
        ms(krust_bench::percentile(&lag.ack_lags, 0.5)),
        ms(krust_bench::percentile(&lag.ack_lags, 0.99)),
        ms(lag.ack_lags.last().copied().unwrap_or_default()),
        ms(krust_bench::percentile(&lag.send_lags, 0.5)),
        ms(krust_bench::percentile(&lag.send_lags, 0.99)),
        figures.rss_end_kib as f64 / 1024.0,
        figures.hwm_end_kib as f64 / 1024.0,
        load_average()
    );
    // Processes are SIGKILLed as they drop (controller, broker, ZooKeeper), then the folder.
    drop(controller);
    drop(broker_process);
    Ok(figures)
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        "-".to_owned()
    } else {
        format!("{min:.1}-{max:.1}")
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let krust = args.krust.clone().unwrap_or_else(default_krust_binary);
    if !args.skip_krust && !krust.exists() {
        bail!(
            "{} not found: cargo build --release -p krust -p krust-bench",
            krust.display()
        );
    }
    let dist = KafkaDist::locate().context("Kafka 3.9 (scripts/fetch-kafka.sh)")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!(
        "migration-scale: KIP-866 ZooKeeper -> KRaft migration, krust vs Kafka 3.9 controllers"
    );
    println!(
        "machine: {} ({} cores), load average {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: {} topics x {} partitions (RF 1, one ZooKeeper broker), configs on every \
         {}th topic, {} ACLs ({} per topic resource), {} SCRAM users; dual-write: {} changes/s \
         over {} topics for {} s after {} s of warm-up; {} rounds",
        args.topics,
        args.partitions,
        args.config_every,
        args.acls,
        args.acls_per_resource,
        args.scram_users,
        args.changes_per_second,
        args.lanes,
        args.lag_seconds,
        args.warmup_seconds,
        args.rounds
    );
    println!(
        "Kafka JVMs (controller, ZooKeeper broker): {}; ZooKeeper: {}",
        server_jvm_flags(KAFKA_SERVER_HEAP_OPTS),
        server_jvm_flags(ZOOKEEPER_SERVER_HEAP_OPTS)
    );
    println!(
        "krust: {} (release build expected: cargo build --release -p krust)",
        krust.display()
    );
    let mut kinds = Vec::new();
    if !args.skip_krust {
        kinds.push(Kind::Krust);
    }
    if !args.skip_kafka {
        kinds.push(Kind::Kafka);
    }
    let mut results: BTreeMap<&'static str, Vec<Figures>> = BTreeMap::new();
    for round in 0..args.rounds {
        for &kind in &kinds {
            let figures = run(kind, round, &args, &krust, &dist, &runtime)
                .with_context(|| format!("round {round}, {}", kind.name()))?;
            results.entry(kind.name()).or_default().push(figures);
        }
    }

    println!();
    println!("load average after: {}", load_average());
    println!(
        "{:<36} {:>22} {:>22} {:>8}",
        "median [min-max] over rounds", "krust", "kafka 3.9", "ratio"
    );
    type Metric = (&'static str, fn(&Figures) -> f64, bool);
    let metrics: [Metric; 9] = [
        ("copy time (ms, driver's line)", |f| f.copy_ms as f64, true),
        ("copy records/s", Figures::records_per_s, false),
        ("records copied", |f| f.records as f64, true),
        (
            "broker start -> copy done (s)",
            |f| f.broker_start_to_copy.as_secs_f64(),
            true,
        ),
        (
            "dual-write lag p50 (ms)",
            |f| ms(krust_bench::percentile(&f.lag.ack_lags, 0.5)),
            true,
        ),
        (
            "dual-write lag p99 (ms)",
            |f| ms(krust_bench::percentile(&f.lag.ack_lags, 0.99)),
            true,
        ),
        (
            "send -> znode p99 (ms)",
            |f| ms(krust_bench::percentile(&f.lag.send_lags, 0.99)),
            true,
        ),
        (
            "controller RSS after copy (MiB)",
            |f| f.rss_after_copy_kib as f64 / 1024.0,
            true,
        ),
        (
            "controller RSS peak (MiB)",
            |f| f.hwm_end_kib as f64 / 1024.0,
            true,
        ),
    ];
    let empty = Vec::new();
    for (name, get, lower_better) in metrics {
        let column = |kind: &str| -> (Option<f64>, String) {
            let runs = results.get(kind).unwrap_or(&empty);
            if runs.is_empty() {
                return (None, "-".to_owned());
            }
            let values: Vec<f64> = runs.iter().map(get).collect();
            let m = median(&mut values.clone());
            (Some(m), format!("{m:.1} [{}]", spread(&values)))
        };
        let (k, k_text) = column("krust");
        let (j, j_text) = column("kafka");
        let ratio = match (k, j) {
            (Some(k), Some(j)) if k > 0.0 && j > 0.0 => {
                format!("{:.2}", if lower_better { j / k } else { k / j })
            }
            _ => "-".to_owned(),
        };
        println!("{name:<36} {k_text:>22} {j_text:>22} {ratio:>8}");
    }
    println!(
        "ratio: kafka/krust for times, lags and RSS, krust/kafka for rates (> 1 = krust ahead); \
         goals: copy >= 2x faster, lag p99 <= Kafka's. A change never seen in ZooKeeper within \
         {} s of the last send counts with the lag it had then (a lower bound).",
        LAG_GRACE.as_secs()
    );
    for (kind, runs) in &results {
        let refused: usize = runs.iter().map(|f| f.lag.refused).sum();
        let unseen: usize = runs.iter().map(|f| f.lag.unseen).sum();
        let rates: Vec<String> = runs.iter().map(|f| format!("{:.0}", f.lag.rate)).collect();
        println!(
            "{kind}: changes accepted/s per round {}, refused {refused}, never seen in ZooKeeper \
             {unseen}",
            rates.join(", ")
        );
    }
    Ok(())
}
