//! Helpers of the Raft benchmarks (`raft-commit`, `raft-failover`): a quorum of `krust server`
//! controllers on 127.0.0.1 (formatted with `krust storage format`, each with the
//! `--test-append-socket` hook), a connection to that hook, a DescribeQuorum poller that works
//! against krust and Apache Kafka alike, and the disk's own write + fdatasync latency.
//!
//! Every process is a [`KrustProcess`], SIGKILLed when dropped (also while a panic unwinds);
//! every wait has a timeout.

use std::fs::OpenOptions;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kafka_protocol::messages::describe_quorum_request;
use kafka_protocol::messages::{DescribeQuorumRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust::metadata_quorum::{QuorumInfo, quorum_info};
use krust_net::{Client, ClientConfig};
use krust_testkit::{KrustProcess, free_ports, run_binary};

/// The line `krust server` logs once it serves.
pub const STARTED_LINE: &str = "Kafka Server started";
/// Longest wait for a node to start.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one hook answer (the hook itself gives up after 10 s).
const HOOK_READ_TIMEOUT: Duration = Duration::from_secs(15);

/// `target/release/krust` of this workspace.
#[must_use]
pub fn default_krust_binary() -> PathBuf {
    krust_testkit::workspace_root()
        .join("target")
        .join("release")
        .join("krust")
}

/// One `krust server` controller of a [`KrustQuorum`].
#[derive(Debug)]
struct KrustNode {
    id: i32,
    port: u16,
    dir: PathBuf,
    process: Option<KrustProcess>,
}

impl KrustNode {
    fn properties(&self) -> PathBuf {
        self.dir.join("server.properties")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("append.sock")
    }
}

/// `n` krust controllers (ids `1..=n`) sharing one static `controller.quorum.voters`, in a temp
/// dir under the caller's folder (removed on drop, after the processes are killed).
#[derive(Debug)]
pub struct KrustQuorum {
    krust: PathBuf,
    nodes: Vec<KrustNode>,
    // Declared last: the processes (in `nodes`) are killed before the folder is removed.
    root: tempfile::TempDir,
}

impl KrustQuorum {
    /// Writes `server.properties` (plus `extra` lines) for `n` nodes and formats them.
    ///
    /// # Errors
    /// No free ports, an IO error, or `krust storage format` failing.
    pub fn new(krust: &Path, parent: &Path, n: usize, extra: &[(String, String)]) -> Result<Self> {
        let root = tempfile::Builder::new()
            .prefix("krust-quorum-")
            .tempdir_in(parent)
            .with_context(|| format!("creating a temp dir in {}", parent.display()))?;
        let cluster_id = krust_testkit::random_kafka_uuid();
        let ports = free_ports(n).context("free ports")?;
        let ids: Vec<i32> = (1..).take(n).collect();
        let voters = ids
            .iter()
            .zip(&ports)
            .map(|(id, port)| format!("{id}@127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::with_capacity(n);
        for (id, port) in ids.into_iter().zip(ports) {
            let dir = root.path().join(format!("node{id}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let node = KrustNode {
                id,
                port,
                dir,
                process: None,
            };
            let mut text = format!(
                "process.roles=controller\nnode.id={id}\ncontroller.listener.names=CONTROLLER\n\
                 listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters={voters}\n\
                 log.dirs={}\n",
                node.dir.join("data").display()
            );
            for (key, value) in extra {
                text.push_str(&format!("{key}={value}\n"));
            }
            std::fs::write(node.properties(), text)
                .with_context(|| format!("writing {}", node.properties().display()))?;
            let props = node.properties().display().to_string();
            run_binary(
                krust,
                &["storage", "format", "-t", &cluster_id, "-c", &props],
                None,
                Duration::from_secs(30),
            )
            .context("running krust storage format")?
            .ok()
            .context("krust storage format")?;
            nodes.push(node);
        }
        Ok(Self {
            krust: krust.to_owned(),
            nodes,
            root,
        })
    }

    /// The folder holding every node's data.
    #[must_use]
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Node ids, in order.
    #[must_use]
    pub fn ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn node(&mut self, id: i32) -> Result<&mut KrustNode> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .with_context(|| format!("no node {id}"))
    }

    /// The hook socket of node `id`.
    ///
    /// # Panics
    /// If there is no node `id` (a bug of the caller).
    #[must_use]
    pub fn socket(&self, id: i32) -> PathBuf {
        let node = self.nodes.iter().find(|n| n.id == id);
        assert!(node.is_some(), "no node {id}");
        node.map(KrustNode::socket).unwrap_or_default()
    }

    /// `(id, 127.0.0.1:port)` of every node.
    #[must_use]
    pub fn addresses(&self) -> Vec<(i32, String)> {
        self.nodes
            .iter()
            .map(|n| (n.id, format!("127.0.0.1:{}", n.port)))
            .collect()
    }

    /// Starts (or restarts) node `id` and waits for its started line.
    ///
    /// # Errors
    /// The process does not start or log its started line within [`START_TIMEOUT`].
    pub fn start(&mut self, id: i32) -> Result<()> {
        let krust = self.krust.clone();
        let node = self.node(id)?;
        match &mut node.process {
            Some(process) => {
                let mark = process.log_mark();
                process.restart().context("restart")?;
                process
                    .wait_for_line_since(mark, STARTED_LINE, START_TIMEOUT)
                    .with_context(|| format!("node {id} restarted"))?;
            }
            None => {
                let mut process = KrustProcess::builder(krust)
                    .args([
                        "server".as_ref(),
                        node.properties().as_os_str(),
                        "--test-append-socket".as_ref(),
                        node.socket().as_os_str(),
                    ])
                    .env("RUST_LOG", "info,krust_net=warn")
                    .dir(node.dir.clone())
                    .name(format!("krust-{id}"))
                    .start()
                    .with_context(|| format!("starting node {id}"))?;
                process
                    .wait_for_line(STARTED_LINE, START_TIMEOUT)
                    .with_context(|| format!("node {id} started"))?;
                node.process = Some(process);
            }
        }
        Ok(())
    }

    /// Starts every node.
    ///
    /// # Errors
    /// As [`KrustQuorum::start`].
    pub fn start_all(&mut self) -> Result<()> {
        for id in self.ids() {
            self.start(id)?;
        }
        Ok(())
    }

    /// SIGKILLs node `id` and waits for it to be gone.
    ///
    /// # Errors
    /// No such node, or the kill failed.
    pub fn kill(&mut self, id: i32) -> Result<()> {
        if let Some(process) = &mut self.node(id)?.process {
            process
                .kill()
                .with_context(|| format!("killing node {id}"))?;
        }
        Ok(())
    }

    /// The last lines of every node's log (for error messages).
    #[must_use]
    pub fn log_tails(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|n| {
                n.process
                    .as_ref()
                    .map(|p| format!("--- node {} ---\n{}", n.id, p.log_tail(15)))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One connection to a node's `--test-append-socket`: one line out, `OK <offset>` or
/// `ERR <reason>` back.
#[derive(Debug)]
pub struct HookConnection {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    answer: String,
}

impl HookConnection {
    /// Connects to `socket`.
    ///
    /// # Errors
    /// The connect error (e.g. the node is not running).
    pub fn connect(socket: &Path) -> Result<Self> {
        let stream = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        stream
            .set_read_timeout(Some(HOOK_READ_TIMEOUT))
            .context("set_read_timeout")?;
        stream
            .set_write_timeout(Some(HOOK_READ_TIMEOUT))
            .context("set_write_timeout")?;
        let reader = BufReader::new(stream.try_clone().context("clone socket")?);
        Ok(Self {
            writer: stream,
            reader,
            answer: String::new(),
        })
    }

    /// Appends `line` (no newline inside) and waits for the answer: `Ok(Ok(offset))` once
    /// committed, `Ok(Err(reason))` for an `ERR` answer (not the leader, timeout, …).
    ///
    /// # Errors
    /// The connection failed (the node died) or answered something unreadable; drop it then.
    pub fn append(&mut self, line: &[u8]) -> Result<std::result::Result<i64, String>> {
        assert!(!line.contains(&b'\n'), "a record value is one line");
        self.writer.write_all(line).context("write")?;
        self.writer.write_all(b"\n").context("write")?;
        self.answer.clear();
        let n = self.reader.read_line(&mut self.answer).context("read")?;
        if n == 0 {
            bail!("connection closed");
        }
        let answer = self.answer.trim_end();
        if let Some(offset) = answer.strip_prefix("OK ") {
            let offset = offset
                .parse()
                .with_context(|| format!("bad answer {answer:?}"))?;
            Ok(Ok(offset))
        } else if let Some(reason) = answer.strip_prefix("ERR ") {
            Ok(Err(reason.to_owned()))
        } else {
            bail!("bad answer {answer:?}")
        }
    }
}

/// Sends DescribeQuorum to each of a set of controllers (krust or Kafka) over kept-open
/// `krust-net` connections, so a poll costs one round trip and no connection setup.
#[derive(Debug)]
pub struct QuorumPoller {
    runtime: tokio::runtime::Runtime,
    clients: Vec<(i32, Arc<Client>)>,
    request_timeout: Duration,
}

impl QuorumPoller {
    /// A poller for `(node id, host:port)` controllers; each answer must arrive within
    /// `request_timeout`.
    ///
    /// # Errors
    /// The async runtime cannot start.
    pub fn new(controllers: &[(i32, String)], request_timeout: Duration) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let config = ClientConfig {
            client_id: "krust-bench".to_owned(),
            request_timeout,
            connect_timeout: request_timeout,
            reconnect_backoff: Duration::from_millis(10),
            reconnect_backoff_max: Duration::from_millis(100),
            negotiate_api_versions: true,
            ..ClientConfig::default()
        };
        let clients = controllers
            .iter()
            .map(|(id, addr)| (*id, Arc::new(Client::new(addr.clone(), config.clone()))))
            .collect();
        Ok(Self {
            runtime,
            clients,
            request_timeout,
        })
    }

    /// Asks every node not in `skip` at once; returns the first answer that names a leader
    /// (only the leader answers without `NOT_LEADER_OR_FOLLOWER`). `None` if none did.
    pub fn leader(&self, skip: &[i32]) -> Option<QuorumInfo> {
        let targets: Vec<Arc<Client>> = self
            .clients
            .iter()
            .filter(|(id, _)| !skip.contains(id))
            .map(|(_, c)| c.clone())
            .collect();
        let timeout = self.request_timeout;
        self.runtime.block_on(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for client in targets {
                tasks.spawn(async move {
                    let request = DescribeQuorumRequest::default().with_topics(vec![
                        describe_quorum_request::TopicData::default()
                            .with_topic_name(TopicName(StrBytes::from_static_str(
                                "__cluster_metadata",
                            )))
                            .with_partitions(vec![
                                describe_quorum_request::PartitionData::default()
                                    .with_partition_index(0),
                            ]),
                    ]);
                    let answer =
                        tokio::time::timeout(timeout, client.send_latest(request, (0, 2))).await;
                    match answer {
                        Ok(Ok((_, ResponseKind::DescribeQuorum(response)))) => {
                            quorum_info(&response).ok().flatten()
                        }
                        Ok(Err(_)) => {
                            // A failed connection is reopened by the next request.
                            None
                        }
                        _ => None,
                    }
                });
            }
            let mut found = None;
            while let Some(result) = tasks.join_next().await {
                if let Ok(Some(q)) = result
                    && found
                        .as_ref()
                        .is_none_or(|f: &QuorumInfo| q.leader_epoch > f.leader_epoch)
                {
                    found = Some(q);
                }
            }
            found
        })
    }

    /// Polls (every `interval`) until `accept` holds for the leader's answer, for at most
    /// `timeout`; returns that answer and when it arrived.
    pub fn wait_for(
        &self,
        skip: &[i32],
        interval: Duration,
        timeout: Duration,
        mut accept: impl FnMut(&QuorumInfo) -> bool,
    ) -> Option<(Instant, QuorumInfo)> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(q) = self.leader(skip)
                && accept(&q)
            {
                return Some((Instant::now(), q));
            }
            std::thread::sleep(interval);
        }
        None
    }
}

/// The disk's own durability cost: 1 record (`record_bytes`) appended to a file + `fdatasync`,
/// one sample at a time, so a benchmark can interleave it with what it compares against. The
/// file is removed on drop.
#[derive(Debug)]
pub struct FsyncProbe {
    file: std::fs::File,
    path: PathBuf,
    record: Vec<u8>,
}

impl FsyncProbe {
    /// Creates `fsync-probe.bin` in `dir`.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn create(dir: &Path, record_bytes: usize) -> Result<Self> {
        let path = dir.join("fsync-probe.bin");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file,
            path,
            record: vec![b'x'; record_bytes],
        })
    }

    /// One write + fdatasync; how long it took.
    ///
    /// # Errors
    /// An IO error.
    pub fn sample(&mut self) -> Result<Duration> {
        let start = Instant::now();
        self.file.write_all(&self.record).context("write")?;
        // The durability point being measured: what a Raft append waits for on each voter.
        self.file.sync_data().context("fdatasync")?;
        Ok(start.elapsed())
    }
}

impl Drop for FsyncProbe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
