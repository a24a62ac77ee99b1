//! `controller-scale`: the quorum controller under load — 3 krust controllers next to 3 Apache
//! Kafka 3.9 controllers (one cluster after the other, same machine, same run), each with 3
//! Kafka 3.9 brokers on loopback.
//!
//! For each cluster:
//!
//! 1. **create**: `--topics` topics × `--partitions` partitions, RF `--replication-factor`,
//!    sent as CreateTopics requests of `--batch` topics straight to the active controller
//!    (`--concurrency` requests in flight); a controller answers once the records are committed,
//!    so the time is until the last answer. Records/s = the high watermark's growth over that
//!    time; controller RSS (`VmRSS` of the active controller) after it.
//! 2. **snapshot**: size of the first snapshot covering the created topics
//!    (`metadata.log.max.snapshot.interval.ms` = `--snapshot-interval-ms` on both), and a
//!    standby's restart: start → caught up with the leader (DescribeQuorum), plus krust's own
//!    snapshot load time from its log.
//! 3. **controlled shutdown**: SIGTERM of one broker → every partition it led has another
//!    leader (polled with Metadata through another broker).
//! 4. **failover**: SIGKILL of the active controller → the first CreateTopics a surviving
//!    controller commits.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/controller-scale --topics 10000   # --topics 500 for a quick run
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_bench::{QuorumPoller, cores, cpu_model, default_krust_binary, load_average};
use krust_net::{Client, ClientConfig};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, KrustProcess, free_ports, run_binary};

/// Quorum controller scale: krust vs. Kafka 3.9 controllers, each with 3 Kafka brokers.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Folder for the nodes' data (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Topics to create.
    #[arg(long, default_value_t = 10_000)]
    topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 10)]
    partitions: i32,
    /// Replication factor.
    #[arg(long, default_value_t = 3)]
    replication_factor: i16,
    /// Topics per CreateTopics request.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// CreateTopics requests in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// `metadata.log.max.snapshot.interval.ms` on both.
    #[arg(long, default_value_t = 5_000)]
    snapshot_interval_ms: u64,
    /// Measure krust only.
    #[arg(long)]
    skip_kafka: bool,
}

/// Longest wait for a start, a catch-up, a snapshot or a leadership move.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
const STARTED_LINE: &str = "Kafka Server started";
const BROKER_IDS: [i32; 3] = [101, 102, 103];
/// krust's log line when its controller starts from a snapshot.
const KRUST_LOADED: &str = "controller started from its latest snapshot";

/// A controller process of either implementation.
enum Controller {
    Krust {
        id: i32,
        dir: PathBuf,
        process: Box<KrustProcess>,
    },
    // Both boxed: the variants differ much in size.
    Kafka(Box<KafkaNode>),
}

impl Controller {
    fn id(&self) -> i32 {
        match self {
            Self::Krust { id, .. } => *id,
            Self::Kafka(node) => node.node_id(),
        }
    }

    fn pid(&mut self) -> Option<u32> {
        match self {
            Self::Krust { process, .. } => process.pid(),
            Self::Kafka(node) => node.process().and_then(|p| p.pid()),
        }
    }

    fn metadata_dir(&self) -> PathBuf {
        match self {
            Self::Krust { dir, .. } => dir.join("data").join("__cluster_metadata-0"),
            Self::Kafka(node) => node.log_dir().join("__cluster_metadata-0"),
        }
    }

    fn kill(&mut self) -> Result<()> {
        match self {
            Self::Krust { process, .. } => {
                process.kill().context("SIGKILL krust")?;
            }
            Self::Kafka(node) => node.kill().context("SIGKILL Kafka")?,
        }
        Ok(())
    }

    /// SIGTERM, then start again; returns when the process logged its start.
    fn restart(&mut self) -> Result<()> {
        match self {
            Self::Krust { process, .. } => {
                process
                    .terminate(Duration::from_secs(60))
                    .context("stop krust")?;
                let mark = process.log_mark();
                process.restart().context("restart krust")?;
                process
                    .wait_for_line_since(mark, STARTED_LINE, STEP_TIMEOUT)
                    .context("krust restarted")?;
            }
            Self::Kafka(node) => node.restart().context("restart Kafka")?,
        }
        Ok(())
    }

    /// krust's own snapshot load time (ms) from its log, if it logged one since the restart.
    fn krust_load_ms(&self) -> Option<u64> {
        let Self::Krust { process, .. } = self else {
            return None;
        };
        let log = std::fs::read_to_string(process.log_path()).ok()?;
        let line = log.lines().rev().find(|l| l.contains(KRUST_LOADED))?;
        line.split("elapsed_ms=")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

/// One cluster: 3 controllers and 3 Kafka brokers.
struct Cluster {
    kind: &'static str,
    controllers: Vec<Controller>,
    addresses: Vec<(i32, String)>,
    brokers: Vec<KafkaNode>,
    // Last: processes are killed (dropped) before the folder goes.
    _root: tempfile::TempDir,
}

fn krust_controllers(
    krust: &Path,
    root: &Path,
    cluster_id: &str,
    ids: &[i32],
    ports: &[u16],
    voters: &str,
    extra: &[(&str, String)],
) -> Result<Vec<Controller>> {
    let mut controllers = Vec::new();
    for (&id, &port) in ids.iter().zip(ports) {
        let dir = root.join(format!("krust{id}"));
        std::fs::create_dir_all(&dir)?;
        let mut text = format!(
            "process.roles=controller\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
             listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters={voters}\n\
             log.dirs={}\n",
            dir.join("data").display()
        );
        for (key, value) in extra {
            text.push_str(&format!("{key}={value}\n"));
        }
        let props = dir.join("server.properties");
        std::fs::write(&props, text)?;
        let props_arg = props.display().to_string();
        run_binary(
            krust,
            &["storage", "format", "-t", cluster_id, "-c", &props_arg],
            None,
            Duration::from_secs(30),
        )
        .context("krust storage format")?
        .ok()
        .context("krust storage format")?;
        let mut process = KrustProcess::builder(krust)
            .args(["server".as_ref(), props.as_os_str()])
            .env("RUST_LOG", "info,krust_net=warn")
            .dir(dir.clone())
            .name(format!("krust-{id}"))
            .start()
            .context("start krust")?;
        process
            .wait_for_line(STARTED_LINE, STEP_TIMEOUT)
            .context("krust started")?;
        controllers.push(Controller::Krust {
            id,
            dir,
            process: Box::new(process),
        });
    }
    Ok(controllers)
}

fn kafka_controllers(
    dist: &KafkaDist,
    root: &Path,
    cluster_id: &str,
    ids: &[i32],
    ports: &[u16],
    voters: &str,
    extra: &[(&str, String)],
) -> Result<Vec<Controller>> {
    let mut nodes = Vec::new();
    for (&id, &port) in ids.iter().zip(ports) {
        let mut builder = KafkaNode::builder(dist)
            .node_id(id)
            .role(KafkaRole::Controller)
            .cluster_id(cluster_id.to_owned())
            .controller_port(port)
            .quorum_voters(voters.to_owned())
            .dir(root.join(format!("kafka{id}")))
            .start_timeout(STEP_TIMEOUT);
        for (key, value) in extra {
            builder = builder.prop(*key, value);
        }
        let mut node = builder.build().context("format Kafka controller")?;
        node.spawn().context("spawn Kafka controller")?;
        nodes.push(node);
    }
    for node in &mut nodes {
        node.wait_ready(STEP_TIMEOUT)
            .context("Kafka controller started")?;
    }
    Ok(nodes
        .into_iter()
        .map(|n| Controller::Kafka(Box::new(n)))
        .collect())
}

impl Cluster {
    fn start(kind: &'static str, args: &Args, krust: &Path, dist: &KafkaDist) -> Result<Self> {
        let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        let mut root = tempfile::Builder::new()
            .prefix("controller-scale-")
            .tempdir_in(&parent)
            .context("temp dir")?;
        // CONTROLLER_SCALE_KEEP=1 keeps the data and logs for a look afterwards.
        if std::env::var_os("CONTROLLER_SCALE_KEEP").is_some() {
            root.disable_cleanup(true);
            println!("[{kind}] keeping {}", root.path().display());
        }
        let cluster_id = krust_testkit::random_kafka_uuid();
        let ids = [1, 2, 3];
        let ports = free_ports(3).context("ports")?;
        let voters = ids
            .iter()
            .zip(&ports)
            .map(|(id, port)| format!("{id}@127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let extra = [(
            "metadata.log.max.snapshot.interval.ms",
            args.snapshot_interval_ms.to_string(),
        )];
        let controllers = if kind == "krust" {
            krust_controllers(
                krust,
                root.path(),
                &cluster_id,
                &ids,
                &ports,
                &voters,
                &extra,
            )?
        } else {
            kafka_controllers(
                dist,
                root.path(),
                &cluster_id,
                &ids,
                &ports,
                &voters,
                &extra,
            )?
        };
        let mut brokers = Vec::new();
        for id in BROKER_IDS {
            let mut node = KafkaNode::builder(dist)
                .node_id(id)
                .role(KafkaRole::Broker)
                .cluster_id(cluster_id.clone())
                .quorum_voters(voters.clone())
                .dir(root.path().join(format!("broker{id}")))
                .start_timeout(STEP_TIMEOUT)
                .build()
                .context("format broker")?;
            node.spawn().context("spawn broker")?;
            brokers.push(node);
        }
        for broker in &mut brokers {
            broker.wait_ready(STEP_TIMEOUT).context("broker started")?;
        }
        let addresses = ids
            .iter()
            .zip(&ports)
            .map(|(id, port)| (*id, format!("127.0.0.1:{port}")))
            .collect();
        Ok(Self {
            kind,
            controllers,
            addresses,
            brokers,
            _root: root,
        })
    }

    fn controller(&mut self, id: i32) -> &mut Controller {
        self.controllers
            .iter_mut()
            .find(|c| c.id() == id)
            .expect("controller id")
    }
}

/// What one cluster measured.
#[derive(Debug, Default)]
struct Figures {
    create: Duration,
    records: i64,
    rss_kib: u64,
    snapshot_bytes: u64,
    restart_caught_up: Duration,
    krust_load_ms: Option<u64>,
    led_by_stopped: usize,
    shutdown_moved: Duration,
    failover: Duration,
}

fn client(address: &str, timeout: Duration) -> Client {
    Client::new(
        address.to_owned(),
        ClientConfig {
            client_id: "controller-scale".to_owned(),
            request_timeout: timeout,
            ..ClientConfig::default()
        },
    )
}

fn creatable(name: String, partitions: i32, rf: i16) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name)))
        .with_num_partitions(partitions)
        .with_replication_factor(rf)
}

/// Creates the topics on the controller at `address`; returns the time until the last answer.
async fn create_topics(address: &str, args: &Args) -> Result<Duration> {
    let names: Vec<String> = (0..args.topics).map(|i| format!("scale-{i:06}")).collect();
    let batches: Vec<Vec<String>> = names
        .chunks(args.batch.max(1))
        .map(<[String]>::to_vec)
        .collect();
    let clients: Vec<Arc<Client>> = (0..args.concurrency.max(1))
        .map(|_| Arc::new(client(address, Duration::from_secs(300))))
        .collect();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut next = 0usize;
    let mut failures = 0usize;
    let (partitions, rf) = (args.partitions, args.replication_factor);
    loop {
        while tasks.len() < clients.len() && next < batches.len() {
            let client = clients[next % clients.len()].clone();
            let topics: Vec<CreatableTopic> = batches[next]
                .iter()
                .map(|n| creatable(n.clone(), partitions, rf))
                .collect();
            next += 1;
            tasks.spawn(async move {
                let request = CreateTopicsRequest::default()
                    .with_topics(topics)
                    .with_timeout_ms(300_000);
                match client.send(request, 7).await {
                    Ok(ResponseKind::CreateTopics(r)) => {
                        r.topics.iter().filter(|t| t.error_code != 0).count()
                    }
                    _ => usize::MAX,
                }
            });
        }
        let Some(done) = tasks.join_next().await else {
            break;
        };
        let failed = done.unwrap_or(usize::MAX);
        if failed == usize::MAX {
            bail!("a CreateTopics request failed");
        }
        failures += failed;
    }
    if failures > 0 {
        bail!("{failures} topics were refused");
    }
    Ok(started.elapsed())
}

/// `(partitions led by each broker id)` as broker `address` reports it.
async fn leaders(address: &str) -> Result<Vec<i32>> {
    let client = client(address, Duration::from_secs(120));
    let request = MetadataRequest::default().with_topics(None);
    let response = client.send(request, 12).await.context("Metadata")?;
    let ResponseKind::Metadata(metadata) = response else {
        bail!("not a Metadata response");
    };
    Ok(metadata
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.leader_id.0))
        .collect())
}

/// Sends one small CreateTopics to each controller in turn until one commits it.
async fn probe_create(addresses: &[(i32, String)], name: &str) -> Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while Instant::now() < deadline {
        for (_, address) in addresses {
            let c = client(address, Duration::from_secs(5));
            let request = CreateTopicsRequest::default()
                .with_topics(vec![creatable(name.to_owned(), 1, 1)])
                .with_timeout_ms(5_000);
            if let Ok(ResponseKind::CreateTopics(r)) = c.send(request, 7).await
                && r.topics.first().is_some_and(|t| t.error_code == 0)
            {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("no controller committed {name}")
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Size of the newest snapshot file in `dir` whose end offset is at least `end`.
fn snapshot_at_least(dir: &Path, end: i64) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let offset: i64 = name
                .strip_suffix(".checkpoint")?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            (offset >= end)
                .then(|| e.metadata().ok().map(|m| m.len()))
                .flatten()
        })
        .max()
}

fn measure(cluster: &mut Cluster, args: &Args) -> Result<Figures> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let poller = QuorumPoller::new(&cluster.addresses, Duration::from_secs(5))?;
    let interval = Duration::from_millis(20);
    let (_, q) = poller
        .wait_for(&[], interval, STEP_TIMEOUT, |q| q.leader_id > 0)
        .context("no leader")?;
    let leader = q.leader_id;
    let address = cluster
        .addresses
        .iter()
        .find(|(id, _)| *id == leader)
        .map(|(_, a)| a.clone())
        .context("leader address")?;
    let mut figures = Figures::default();

    // 1. Create.
    let before = q.high_watermark;
    figures.create = runtime.block_on(create_topics(&address, args))?;
    let (_, after) = poller
        .wait_for(&[], interval, STEP_TIMEOUT, |q| q.leader_id == leader)
        .context("leader after create")?;
    figures.records = after.high_watermark - before;
    figures.rss_kib = cluster.controller(leader).pid().map_or(0, rss_kib);
    println!(
        "[{}] created {} topics in {:.2} s",
        cluster.kind,
        args.topics,
        figures.create.as_secs_f64()
    );

    let via = cluster.brokers[0].bootstrap_servers();
    let deadline = Instant::now() + STEP_TIMEOUT;
    let led = loop {
        let led = runtime.block_on(leaders(&via))?;
        let expected = args.topics * usize::try_from(args.partitions).unwrap_or(0);
        if led.len() >= expected || Instant::now() > deadline {
            break led;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let per_broker: Vec<(i32, usize)> = BROKER_IDS
        .iter()
        .map(|b| (*b, led.iter().filter(|l| *l == b).count()))
        .collect();
    println!(
        "[{}] partitions led per broker after create: {per_broker:?}",
        cluster.kind
    );

    // 2. Snapshot size; a standby's restart.
    let dir = cluster.controller(leader).metadata_dir();
    let deadline = Instant::now() + STEP_TIMEOUT;
    figures.snapshot_bytes = loop {
        if let Some(size) = snapshot_at_least(&dir, after.high_watermark) {
            break size;
        }
        if Instant::now() > deadline {
            bail!("no snapshot covering offset {}", after.high_watermark);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let standby = cluster
        .addresses
        .iter()
        .map(|(id, _)| *id)
        .find(|id| *id != leader)
        .context("a standby")?;
    let restarted = Instant::now();
    // The leader's view of a voter is from its last fetch: only a catch-up time after the
    // restart counts (DescribeQuorum v1+ `LastCaughtUpTimestamp`, wall-clock ms).
    let restarted_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
    )
    .unwrap_or(i64::MAX);
    cluster.controller(standby).restart()?;
    poller
        .wait_for(&[], interval, STEP_TIMEOUT, |q| {
            q.voters
                .iter()
                .find(|v| v.replica_id.0 == standby)
                .is_some_and(|v| {
                    v.log_end_offset >= after.high_watermark
                        && v.last_caught_up_timestamp >= restarted_ms
                })
        })
        .context("the restarted standby never caught up")?;
    figures.restart_caught_up = restarted.elapsed();
    figures.krust_load_ms = cluster.controller(standby).krust_load_ms();

    // 3. Controlled shutdown of broker 103.
    let stopped = BROKER_IDS[2];
    figures.led_by_stopped = runtime
        .block_on(leaders(&via))?
        .iter()
        .filter(|l| **l == stopped)
        .count();
    let broker = cluster
        .brokers
        .iter_mut()
        .find(|b| b.node_id() == stopped)
        .context("broker")?;
    let pid = broker
        .process()
        .and_then(|p| p.pid())
        .context("broker pid")?;
    let sigterm_at = Instant::now();
    // SIGTERM without waiting: Kafka's controlled shutdown runs while we poll.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("kill -TERM")?;
    if !status.success() {
        bail!("kill -TERM {pid}: {status}");
    }
    loop {
        let led = runtime
            .block_on(leaders(&via))?
            .iter()
            .filter(|l| **l == stopped)
            .count();
        if led == 0 {
            figures.shutdown_moved = sigterm_at.elapsed();
            break;
        }
        println!(
            "[{}] {:.1} s after SIGTERM: broker {stopped} still leads {led}",
            cluster.kind,
            sigterm_at.elapsed().as_secs_f64()
        );
        if sigterm_at.elapsed() > STEP_TIMEOUT {
            bail!("broker {stopped} still leads {led} partitions");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = broker.terminate(STEP_TIMEOUT);

    // 4. Failover: SIGKILL the active controller → the next committed CreateTopics.
    let (_, q) = poller
        .wait_for(&[], interval, STEP_TIMEOUT, |q| q.leader_id > 0)
        .context("no leader before the failover")?;
    let killed_at = Instant::now();
    cluster.controller(q.leader_id).kill()?;
    let survivors: Vec<(i32, String)> = cluster
        .addresses
        .iter()
        .filter(|(id, _)| *id != q.leader_id)
        .cloned()
        .collect();
    runtime.block_on(probe_create(&survivors, "failover-probe"))?;
    figures.failover = killed_at.elapsed();
    Ok(figures)
}

fn ratio(krust: f64, kafka: Option<f64>) -> String {
    match kafka {
        Some(k) if krust > 0.0 => format!("{:.2}", k / krust),
        _ => "-".to_owned(),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let krust = args.krust.clone().unwrap_or_else(default_krust_binary);
    if !krust.exists() {
        bail!(
            "{} not found: cargo build --release -p krust -p krust-bench",
            krust.display()
        );
    }
    let dist = KafkaDist::locate().context("Kafka 3.9 (scripts/fetch-kafka.sh)")?;
    println!("controller-scale");
    println!(
        "machine: {} ({} cores), load average {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: {} topics x {} partitions, RF {}, {} topics per CreateTopics, {} in flight, \
         3 controllers + 3 Kafka 3.9 brokers, snapshot interval {} ms",
        args.topics,
        args.partitions,
        args.replication_factor,
        args.batch,
        args.concurrency,
        args.snapshot_interval_ms
    );
    let mut results = Vec::new();
    let kinds: &[&'static str] = if args.skip_kafka {
        &["krust"]
    } else {
        &["krust", "kafka"]
    };
    for &kind in kinds {
        let mut cluster = Cluster::start(kind, &args, &krust, &dist)
            .with_context(|| format!("starting the {kind} cluster"))?;
        let figures = measure(&mut cluster, &args).with_context(|| format!("{kind} cluster"))?;
        println!("[{kind}] {figures:?}");
        results.push(figures);
        drop(cluster);
    }
    let krust_figures = &results[0];
    let kafka_figures = results.get(1);
    let secs = Duration::as_secs_f64;
    let rate = |f: &Figures| f.records as f64 / secs(&f.create).max(1e-9);
    println!();
    println!("load average after: {}", load_average());
    println!(
        "{:<46} {:>12} {:>12} {:>8}",
        "metric", "krust", "kafka 3.9", "ratio"
    );
    let row = |name: &str, k: f64, kafka: Option<f64>, better_lower: bool, unit: &str| {
        let r = if better_lower {
            ratio(k, kafka)
        } else {
            ratio(kafka.unwrap_or(0.0), Some(k))
        };
        println!(
            "{:<46} {:>12} {:>12} {:>8}",
            format!("{name} ({unit})"),
            format!("{k:.1}"),
            kafka.map_or("-".to_owned(), |v| format!("{v:.1}")),
            r
        );
    };
    row(
        "create: time",
        secs(&krust_figures.create),
        kafka_figures.map(|f| secs(&f.create)),
        true,
        "s",
    );
    row(
        "create: records committed/s",
        rate(krust_figures),
        kafka_figures.map(rate),
        false,
        "rec/s",
    );
    row(
        "active controller RSS",
        krust_figures.rss_kib as f64 / 1024.0,
        kafka_figures.map(|f| f.rss_kib as f64 / 1024.0),
        true,
        "MiB",
    );
    row(
        "snapshot size",
        krust_figures.snapshot_bytes as f64 / 1e6,
        kafka_figures.map(|f| f.snapshot_bytes as f64 / 1e6),
        true,
        "MB",
    );
    row(
        "standby restart -> caught up",
        secs(&krust_figures.restart_caught_up),
        kafka_figures.map(|f| secs(&f.restart_caught_up)),
        true,
        "s",
    );
    row(
        "controlled shutdown: leaderships moved",
        secs(&krust_figures.shutdown_moved),
        kafka_figures.map(|f| secs(&f.shutdown_moved)),
        true,
        "s",
    );
    row(
        "failover: kill -> next committed CreateTopics",
        secs(&krust_figures.failover),
        kafka_figures.map(|f| secs(&f.failover)),
        true,
        "s",
    );
    println!(
        "krust snapshot load on restart: {} ms; broker 103 led {} (krust) / {} (kafka) partitions",
        krust_figures
            .krust_load_ms
            .map_or("-".to_owned(), |v| v.to_string()),
        krust_figures.led_by_stopped,
        kafka_figures.map_or("-".to_owned(), |f| f.led_by_stopped.to_string())
    );
    println!("ratio: kafka/krust for times and sizes, krust/kafka for rates (> 1 = krust ahead)");
    Ok(())
}
