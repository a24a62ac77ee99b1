//! Three-node clusters for the broker benchmarks: three combined `krust server` nodes, and three
//! combined Apache Kafka 3.9 nodes started with `kafka-server-start.sh`'s JVM settings
//! ([`crate::kafka_jvm`]). Both get the same `server.properties` from Kafka's harness; dropping a
//! [`Cluster`] SIGKILLs its processes and removes their folders.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use krust_testkit::{
    KAFKA_STARTED_LINE, KafkaDist, KafkaNode, KafkaRole, KrustProcess, ManagedProcess, free_ports,
    run_binary,
};

use crate::kafka_jvm::start_kafka_server;

/// How long a node may take to start.
pub const CLUSTER_START_WAIT: Duration = Duration::from_secs(120);

/// The three nodes of one implementation, for the tools' bootstrap and the CPU readings.
pub struct Cluster {
    /// `host:port,…` of the three brokers.
    pub bootstrap: String,
    /// The server processes.
    pub pids: Vec<u32>,
    // Field order matters: the processes are killed before their folders are removed.
    _kafka: Vec<ManagedProcess>,
    _krust: Vec<KrustProcess>,
    _nodes: Vec<KafkaNode>,
}

/// `server.properties` of the 3 nodes: `node.id` 1–3, combined roles, fresh ports and folders,
/// `props` added.
fn configure(dist: &KafkaDist, props: &[(&str, &str)], format: bool) -> Result<Vec<KafkaNode>> {
    let ports = free_ports(6).context("ports")?;
    let voters = (0..3)
        .map(|i| format!("{}@127.0.0.1:{}", i + 1, ports[3 + i]))
        .collect::<Vec<_>>()
        .join(",");
    let cluster_id = krust_testkit::random_kafka_uuid();
    (0..3)
        .map(|i| {
            let mut builder = KafkaNode::builder(dist)
                .node_id(i as i32 + 1)
                .role(KafkaRole::Combined)
                .cluster_id(cluster_id.clone())
                .broker_port(ports[i])
                .controller_port(ports[3 + i])
                .quorum_voters(voters.clone());
            for (key, value) in props {
                builder = builder.prop(*key, *value);
            }
            if format {
                builder.build().context("Kafka's StorageTool format")
            } else {
                builder
                    .build_unformatted()
                    .context("writing server.properties")
            }
        })
        .collect()
}

fn bootstrap_of(nodes: &[KafkaNode]) -> String {
    nodes
        .iter()
        .filter_map(KafkaNode::broker_port)
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Three combined Apache Kafka 3.9 nodes with `props`, each JVM started as
/// `kafka-server-start.sh` starts it (G1, C2, 1 GiB heap), once each logged `Kafka Server
/// started`.
///
/// # Errors
/// Formatting, start or readiness failures, with context.
pub fn start_kafka_cluster(dist: &KafkaDist, props: &[(&str, &str)]) -> Result<Cluster> {
    let nodes = configure(dist, props, true)?;
    let mut processes = Vec::new();
    for node in &nodes {
        let process = start_kafka_server(
            dist,
            &format!("kafka node {}", node.node_id()),
            &node.properties_path(),
            &node.dir().join("server.log"),
        )
        .context("starting a Kafka 3.9 node")?;
        processes.push(process);
    }
    for (node, process) in nodes.iter().zip(&mut processes) {
        process
            .wait_for_log(KAFKA_STARTED_LINE, CLUSTER_START_WAIT)
            .with_context(|| format!("Kafka node {} started", node.node_id()))?;
    }
    Ok(Cluster {
        bootstrap: bootstrap_of(&nodes),
        pids: processes.iter().filter_map(ManagedProcess::pid).collect(),
        _kafka: processes,
        _krust: Vec::new(),
        _nodes: nodes,
    })
}

/// Three combined `krust server` nodes from `binary` with `props`: Kafka's harness writes each
/// `server.properties` (the same settings as [`start_kafka_cluster`]), `krust storage format`
/// formats it, `krust server` runs it (`RUST_LOG=warn`); ready once each printed `Kafka Server
/// started` (registered and unfenced).
///
/// # Errors
/// A missing binary, formatting, start or readiness failures, with context.
pub fn start_krust_cluster(
    dist: &KafkaDist,
    binary: &Path,
    props: &[(&str, &str)],
) -> Result<Cluster> {
    if !binary.is_file() {
        bail!(
            "{} does not exist (cargo build --release -p krust)",
            binary.display()
        );
    }
    // The servers run in their own folders: a relative path would not resolve there.
    let binary = &std::fs::canonicalize(binary)
        .with_context(|| format!("resolving {}", binary.display()))?;
    let nodes = configure(dist, props, false)?;
    let mut processes = Vec::new();
    for node in &nodes {
        let properties = node.properties_path().display().to_string();
        let cluster_id = node.cluster_id().to_owned();
        run_binary(
            binary,
            &["storage", "format", "-t", &cluster_id, "-c", &properties],
            None,
            CLUSTER_START_WAIT,
        )?
        .ok()
        .context("krust storage format")?;
        let process = KrustProcess::builder(binary)
            .args(["server", &properties])
            .env("RUST_LOG", "warn")
            .dir(node.dir().join("krust"))
            .name(format!("krust-{}", node.node_id()))
            .start()
            .context("starting krust server")?;
        processes.push(process);
    }
    for (node, process) in nodes.iter().zip(&mut processes) {
        let port = node.broker_port().context("broker port")?;
        process
            .wait_for_port(port, CLUSTER_START_WAIT)
            .with_context(|| format!("krust node {} listening on {port}", node.node_id()))?;
        // Printed (as Kafka does) once the broker is registered and unfenced.
        process
            .wait_for_line("Kafka Server started", CLUSTER_START_WAIT)
            .with_context(|| format!("krust node {} unfenced", node.node_id()))?;
    }
    Ok(Cluster {
        bootstrap: bootstrap_of(&nodes),
        pids: processes.iter().filter_map(KrustProcess::pid).collect(),
        _kafka: Vec::new(),
        _krust: processes,
        _nodes: nodes,
    })
}

/// User + system CPU seconds of `pids` (and their threads) so far.
#[must_use]
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    // /proc reports clock ticks of USER_HZ, which the kernel ABI fixes at 100 on Linux (so no
    // sysconf call, which would need libc, is required).
    const CLOCK_TICKS: f64 = 100.0;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the ")" of the command name: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / CLOCK_TICKS)
        })
        .sum()
}
