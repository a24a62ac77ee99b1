//! Shared helpers of the `quorum_*` process tests: a quorum of `krust server` controllers on
//! loopback, formatted with `krust storage format`, with the `--test-append-socket` hook.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust::metadata_quorum::{Bootstrap, QuorumInfo, describe};
use krust_log::{Log, LogConfig};
use krust_testkit::{KrustProcess, free_ports, run_binary};

pub const KRUST: &str = env!("CARGO_BIN_EXE_krust");
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
pub const STARTED_LINE: &str = "Kafka Server started";

/// One krust controller node of a [`Quorum`].
pub struct Node {
    pub id: i32,
    pub port: u16,
    pub dir: PathBuf,
    pub process: Option<KrustProcess>,
}

impl Node {
    pub fn properties(&self) -> PathBuf {
        self.dir.join("server.properties")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("append.sock")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn is_running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| p.is_running().unwrap_or(false))
    }
}

/// Several krust controllers (ids 1..=n) sharing one `controller.quorum.voters`.
pub struct Quorum {
    pub root: tempfile::TempDir,
    pub cluster_id: String,
    pub voters: String,
    pub nodes: Vec<Node>,
}

/// Extra `server.properties` lines for faster elections in tests (Kafka's defaults are 1000 /
/// 2000 / 2000 ms).
pub const FAST_TIMEOUTS: &[(&str, &str)] = &[
    ("controller.quorum.election.timeout.ms", "500"),
    ("controller.quorum.fetch.timeout.ms", "1000"),
    ("controller.quorum.request.timeout.ms", "1000"),
];

pub fn server_properties(
    id: i32,
    port: u16,
    voters: &str,
    data: &Path,
    extra: &[(&str, &str)],
) -> String {
    let mut text = format!(
        "process.roles=controller\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
         listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters={voters}\n\
         log.dirs={}\n",
        data.display()
    );
    for (k, v) in extra {
        text.push_str(&format!("{k}={v}\n"));
    }
    text
}

/// `krust storage format -t <cluster> -c <props>`.
pub fn format(props: &Path, cluster_id: &str) {
    let props = props.display().to_string();
    run_binary(
        KRUST,
        &["storage", "format", "-t", cluster_id, "-c", &props],
        None,
        Duration::from_secs(30),
    )
    .expect("run krust storage format")
    .ok()
    .expect("krust storage format");
}

impl Quorum {
    /// Writes and formats `n` nodes (not started).
    pub fn new(n: usize, extra: &[(&str, &str)]) -> Self {
        Self::in_cluster(n, extra, &krust_testkit::random_kafka_uuid())
    }

    /// Writes and formats `n` nodes of cluster `cluster_id` (e.g. a ZooKeeper cluster's id, for
    /// a migration).
    pub fn in_cluster(n: usize, extra: &[(&str, &str)], cluster_id: &str) -> Self {
        let mut root = tempfile::tempdir().expect("tempdir");
        // As krust-testkit's Kafka nodes: kept for a post-mortem with KRUST_TESTKIT_KEEP=1.
        if std::env::var_os("KRUST_TESTKIT_KEEP").is_some_and(|v| v == "1") {
            root.disable_cleanup(true);
            eprintln!("keeping the quorum's files in {}", root.path().display());
        }
        let cluster_id = cluster_id.to_owned();
        let ports = free_ports(n).expect("ports");
        let ids: Vec<i32> = (1..=n as i32).collect();
        let voters = ids
            .iter()
            .zip(&ports)
            .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (id, port) in ids.into_iter().zip(ports) {
            let dir = root.path().join(format!("node{id}"));
            std::fs::create_dir_all(&dir).expect("node dir");
            let node = Node {
                id,
                port,
                dir,
                process: None,
            };
            std::fs::write(
                node.properties(),
                server_properties(id, port, &voters, &node.data_dir(), extra),
            )
            .expect("write properties");
            format(&node.properties(), &cluster_id);
            nodes.push(node);
        }
        Self {
            root,
            cluster_id,
            voters,
            nodes,
        }
    }

    pub fn node(&mut self, id: i32) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node id")
    }

    /// Starts (or restarts) node `id` and waits for its started line.
    pub fn start(&mut self, id: i32) {
        let node = self.node(id);
        match &mut node.process {
            Some(p) => {
                let mark = p.log_mark();
                p.restart().expect("restart");
                p.wait_for_line_since(mark, STARTED_LINE, START_TIMEOUT)
                    .expect("restarted");
            }
            None => {
                let mut p = KrustProcess::builder(KRUST)
                    .args([
                        "server".as_ref(),
                        node.properties().as_os_str(),
                        "--test-append-socket".as_ref(),
                        node.socket().as_os_str(),
                    ])
                    .env("RUST_LOG", "info,krust_net=warn")
                    .dir(node.dir.clone())
                    .name(format!("krust-{}", node.id))
                    .start()
                    .expect("start krust server");
                p.wait_for_line(STARTED_LINE, START_TIMEOUT)
                    .expect("started");
                node.process = Some(p);
            }
        }
    }

    pub fn start_all(&mut self) {
        let ids: Vec<i32> = self.nodes.iter().map(|n| n.id).collect();
        for id in ids {
            self.start(id);
        }
    }

    pub fn bootstrap(&self) -> Bootstrap {
        self.bootstrap_without(&[])
    }

    /// `--bootstrap-controller` over the nodes not in `skip`.
    pub fn bootstrap_without(&self, skip: &[i32]) -> Bootstrap {
        Bootstrap::Controller(
            self.nodes
                .iter()
                .filter(|n| !skip.contains(&n.id))
                .map(Node::address)
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    pub fn kill(&mut self, id: i32) {
        if let Some(p) = &mut self.node(id).process {
            p.kill().expect("kill");
        }
    }

    pub fn terminate(&mut self, id: i32) -> std::process::ExitStatus {
        self.node(id)
            .process
            .as_mut()
            .expect("started")
            .terminate(Duration::from_secs(30))
            .expect("terminate")
    }

    pub fn stop_all(&mut self) {
        for node in &mut self.nodes {
            if let Some(p) = &mut node.process
                && p.is_running().unwrap_or(false)
            {
                p.terminate(Duration::from_secs(30)).expect("terminate");
            }
        }
    }

    pub fn log_tails(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|n| {
                n.process
                    .as_ref()
                    .map(|p| format!("--- node {} ---\n{}", n.id, p.log_tail(30)))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Polls DescribeQuorum until `accept` holds; returns the quorum it accepted.
pub fn wait_for_quorum(
    bootstrap: &Bootstrap,
    timeout: Duration,
    accept: impl Fn(&QuorumInfo) -> bool,
) -> Option<QuorumInfo> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok((_, q)) = describe(bootstrap, left.min(Duration::from_secs(2)))
            && accept(&q)
        {
            return Some(q);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Appends one line through a node's test socket; `Ok(offset)` once committed.
pub fn append_via(socket: &Path, line: &str) -> Result<i64, String> {
    let stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    writer
        .write_all(format!("{line}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    match answer.trim_end().strip_prefix("OK ") {
        Some(offset) => offset
            .parse()
            .map_err(|e| format!("bad offset {offset}: {e}")),
        None => Err(answer.trim_end().to_owned()),
    }
}

/// One record as read back from a node's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRecord {
    pub offset: i64,
    pub epoch: i32,
    pub control: bool,
    pub value: Option<Bytes>,
}

/// Every record of `<data>/__cluster_metadata-0`, read with krust-log (after the node stopped).
pub fn read_metadata_log(data: &Path) -> Vec<LoggedRecord> {
    let dir = data.join("__cluster_metadata-0");
    let log = Log::open(&dir, LogConfig::default(), 0).expect("open metadata log");
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20).expect("read");
        let Some(last) = read.batches.last() else {
            break;
        };
        next = last.next_offset();
        for batch in &read.batches {
            for record in batch.records().expect("records") {
                out.push(LoggedRecord {
                    offset: batch.base_offset() + i64::from(record.offset_delta),
                    epoch: batch.partition_leader_epoch(),
                    control: batch.is_control(),
                    value: record.value.clone(),
                });
            }
        }
    }
    out
}

/// `(offset, value)` of the data (non-control) records below `end`.
pub fn data_records(records: &[LoggedRecord], end: i64) -> BTreeMap<i64, String> {
    records
        .iter()
        .filter(|r| !r.control && r.offset < end)
        .map(|r| {
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            (r.offset, value)
        })
        .collect()
}
