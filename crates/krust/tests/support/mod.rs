//! Shared scaffolding of the `broker_*`, `groups_failover` and `controller_*` cluster tests
//! (the latter include it as `cluster` next to `quorum_support`): `krust server` nodes (controllers, brokers or combined) on loopback, formatted with `krust storage format`,
//! started, restarted and SIGKILLed as real processes (killed on drop by `KrustProcess`).

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, KafkaNode, KrustProcess, LogRecord, class, run_binary};

pub const KRUST: &str = env!("CARGO_BIN_EXE_krust");
/// A `krust server` up to "Kafka Server started": for a broker that is after it registered and
/// was unfenced, which on a loaded 2-core machine may take a while.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
pub const STARTED_LINE: &str = "Kafka Server started";
pub const CONSUME_TIMEOUT: Duration = Duration::from_secs(30);
const FORMAT_TIMEOUT: Duration = Duration::from_secs(30);
/// A Kafka CLI tool (a JVM) on a loaded 2-core machine.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// One `krust server` node: its directory (holding `server.properties`) and, once started, its
/// process.
pub struct Node {
    pub id: i32,
    pub dir: PathBuf,
    pub process: Option<KrustProcess>,
}

impl Node {
    pub fn properties(&self) -> PathBuf {
        self.dir.join("server.properties")
    }

    /// Starts the node (or restarts its process, keeping its log) and waits for
    /// [`STARTED_LINE`] written by this run.
    pub fn start(&mut self) {
        match &mut self.process {
            Some(p) => {
                let mark = p.log_mark();
                p.restart().expect("restart");
                p.wait_for_line_since(mark, STARTED_LINE, START_TIMEOUT)
                    .unwrap_or_else(|e| {
                        panic!("node {} restart: {e}\n{}", self.id, p.log_tail(40))
                    });
            }
            None => {
                self.process = Some(start_server(&self.dir, self.id));
            }
        }
    }

    pub fn process(&mut self) -> &mut KrustProcess {
        self.process.as_mut().expect("started")
    }

    /// The directory of `topic`-0 under the node's `logs` log dir.
    pub fn partition_dir(&self, topic: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{topic}-0"))
    }

    /// The last `lines` of the node's output, empty if it never started.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }
}

/// Spawns `krust server <dir>/server.properties` as node `id`, without waiting for it.
pub fn spawn_server(dir: &Path, id: impl std::fmt::Display) -> KrustProcess {
    KrustProcess::builder(KRUST)
        .args(["server".as_ref(), dir.join("server.properties").as_os_str()])
        .env("RUST_LOG", "info,krust_net=warn")
        .dir(dir.to_path_buf())
        .name(format!("krust-{id}"))
        .start()
        .expect("start krust server")
}

/// Starts `krust server <dir>/server.properties` as node `id` and waits for [`STARTED_LINE`].
pub fn start_server(dir: &Path, id: i32) -> KrustProcess {
    start_server_within(dir, id, START_TIMEOUT)
}

/// [`start_server`], waiting up to `timeout` for [`STARTED_LINE`].
pub fn start_server_within(dir: &Path, id: i32, timeout: Duration) -> KrustProcess {
    let mut p = spawn_server(dir, id);
    p.wait_for_line(STARTED_LINE, timeout)
        .unwrap_or_else(|e| panic!("node {id} start: {e}\n{}", p.log_tail(40)));
    p
}

/// `krust storage format -t <cluster_id> -c <props>`.
pub fn format(props: &Path, cluster_id: &str) {
    let props = props.display().to_string();
    run_binary(
        KRUST,
        &["storage", "format", "-t", cluster_id, "-c", &props],
        None,
        FORMAT_TIMEOUT,
    )
    .expect("run krust storage format")
    .ok()
    .expect("krust storage format");
}

/// Writes `<root>/node<id>/server.properties` and formats the node's storage; not started yet.
pub fn write_node(root: &Path, id: i32, text: &str, cluster_id: &str) -> Node {
    let dir = root.join(format!("node{id}"));
    std::fs::create_dir_all(&dir).expect("node dir");
    let node = Node {
        id,
        dir,
        process: None,
    };
    std::fs::write(node.properties(), text).expect("write properties");
    format(&node.properties(), cluster_id);
    node
}

/// `controller.quorum.voters` for controllers 1, 2, 3 on the first three `ports`.
pub fn voters(ports: &[u16]) -> String {
    (1..=3)
        .zip(ports)
        .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `server.properties` of controller `id` (a fast election timeout), its data under
/// `<root>/node<id>/data`; `extra` lines are appended.
pub fn controller_properties(root: &Path, id: i32, port: u16, voters: &str, extra: &str) -> String {
    let data = root.join(format!("node{id}")).join("data");
    format!(
        "process.roles=controller\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
         listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters={voters}\n\
         log.dirs={}\ncontroller.quorum.election.timeout.ms=500\n\
         controller.quorum.fetch.timeout.ms=1000\n{extra}",
        data.display()
    )
}

/// Writes and formats controllers 1, 2, 3 on the first three `ports` (not started yet).
pub fn write_controllers(root: &Path, ports: &[u16], cluster_id: &str, extra: &str) -> Vec<Node> {
    let voters = voters(ports);
    (1..=3)
        .zip(ports)
        .map(|(id, &port)| {
            let text = controller_properties(root, id, port, &voters, extra);
            write_node(root, id, &text, cluster_id)
        })
        .collect()
}

/// SIGKILLs node `id` of `nodes`.
pub fn kill(nodes: &mut [Node], id: i32) {
    nodes
        .iter_mut()
        .find(|b| b.id == id)
        .unwrap_or_else(|| panic!("{id} is not a broker"))
        .process()
        .kill()
        .expect("SIGKILL");
}

/// Kafka's console consumer reads `n` records of `topic` through `bootstrap`; the values,
/// sorted (partitions interleave in any order).
pub fn consume_sorted(dist: &KafkaDist, bootstrap: &str, topic: &str, n: usize) -> Vec<String> {
    let out = dist
        .console_consume(bootstrap, topic, n, &[], CONSUME_TIMEOUT)
        .unwrap_or_else(|e| panic!("kafka-console-consumer via {bootstrap}: {e}"));
    let mut lines: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// `kafka-topics --describe --topic <topic>` through `bootstrap`: its stdout.
pub fn describe_topic(dist: &KafkaDist, bootstrap: &str, topic: &str) -> String {
    dist.run_tool(
        class::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            topic,
        ],
        TOOL_TIMEOUT,
    )
    .expect("run kafka-topics --describe")
    .ok()
    .expect("kafka-topics --describe")
    .stdout
}

/// `server.properties` of broker `id` listening (and advertised) on PLAINTEXT 127.0.0.1:`port`,
/// registering with the controllers `voters`; `rest` (its log dirs and tuning) is appended.
pub fn broker_properties(id: i32, port: u16, voters: &str, rest: &str) -> String {
    format!(
        "process.roles=broker\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
         controller.quorum.voters={voters}\n\
         listeners=PLAINTEXT://127.0.0.1:{port}\n\
         advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
         inter.broker.listener.name=PLAINTEXT\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n{rest}"
    )
}

/// Partition 0 of `topic` as Kafka's console consumer reads `count` records of it through
/// `bootstrap` (`print.offset=true`: `Offset:N\tvalue`).
pub fn consume_offsets(
    dist: &KafkaDist,
    bootstrap: &str,
    topic: &str,
    count: usize,
) -> Vec<LogRecord> {
    let out = dist
        .console_consume(
            bootstrap,
            topic,
            count,
            &[("print.offset", "true")],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("kafka-console-consumer {topic} via {bootstrap}: {e}"));
    out.stdout
        .lines()
        .map(|line| {
            let (offset, value) = line
                .strip_prefix("Offset:")
                .and_then(|rest| rest.split_once('\t'))
                .unwrap_or_else(|| panic!("console consumer line {line:?}"));
            LogRecord {
                offset: offset.parse().expect("offset"),
                value: Some(value.to_owned()),
            }
        })
        .collect()
}

/// `krust_logs` followed by the last 40 lines of each Kafka broker's log, for a failure message.
pub fn with_kafka_logs(krust_logs: String, brokers: &[KafkaNode]) -> String {
    let mut text = vec![krust_logs];
    for broker in brokers {
        text.push(format!(
            "--- Kafka broker {} ---\n{}",
            broker.node_id(),
            krust_testkit::log_tail(&broker.log_path(), 40)
        ));
    }
    text.join("\n")
}

/// Runs the Kafka tool `class_name` with `args` (each run bounded by [`TOOL_TIMEOUT`]) until it
/// succeeds and `accept` holds for its stdout, for up to `wait`: metadata reaches brokers and
/// controllers asynchronously. The last output or error otherwise.
pub fn tool_until(
    dist: &KafkaDist,
    class_name: &str,
    args: &[&str],
    wait: Duration,
    accept: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let deadline = Instant::now() + wait;
    let mut last = String::new();
    while Instant::now() < deadline {
        match dist.run_tool(class_name, args, TOOL_TIMEOUT) {
            Ok(out) if out.success() && accept(&out.stdout) => return Ok(out.stdout),
            Ok(out) => last = format!("{}{}", out.stdout, out.stderr),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(last)
}

/// SIGTERMs each node in turn (a controlled shutdown) and asserts it exits 0.
pub fn terminate_cleanly<'a>(nodes: impl Iterator<Item = &'a mut Node>) {
    for node in nodes {
        let status = node
            .process()
            .terminate(Duration::from_secs(60))
            .expect("terminate");
        assert!(status.success(), "node {} exit status {status}", node.id);
    }
}

/// `kafka-get-offsets --time -1`: the log end offset of `topic`-0.
pub fn end_offset(dist: &KafkaDist, bootstrap: &str, topic: &str) -> i64 {
    let out = dist
        .run_tool(
            class::GET_OFFSET_SHELL,
            &[
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--time",
                "-1",
            ],
            TOOL_TIMEOUT,
        )
        .expect("run kafka-get-offsets")
        .ok()
        .expect("kafka-get-offsets");
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{topic}:0:"))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("kafka-get-offsets output:\n{}", out.stdout))
}

/// Spawns every Kafka broker first (they register concurrently), then waits up to `wait` for
/// each to be ready: the errors of those that were not.
pub fn start_kafka_brokers(brokers: &mut [KafkaNode], wait: Duration) -> Vec<String> {
    for broker in brokers.iter_mut() {
        broker.spawn().expect("spawn broker");
    }
    brokers
        .iter_mut()
        .filter_map(|b| b.wait_ready(wait).err().map(|e| e.to_string()))
        .collect()
}
