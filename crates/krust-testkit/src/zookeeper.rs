//! A standalone ZooKeeper server on 127.0.0.1 — the one shipped with Kafka 3.9
//! (`zookeeper-3.8.4.jar` in Kafka's libs, started like `zookeeper-server-start.sh`) — for
//! ZooKeeper-mode Kafka brokers and the KIP-866 migration tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::dist::{KafkaDist, ToolOutput};
use crate::error::{HarnessError, Result};
use crate::ports::free_port;
use crate::process::{LOG_TAIL_LINES, ManagedProcess, ProcessSpec};

/// ZooKeeper's main class (`zookeeper-server-start.sh`); with no `server.N` lines it runs
/// standalone.
pub const ZOOKEEPER_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// ZooKeeper's command-line client (`zookeeper-shell.sh`).
pub const ZOOKEEPER_CLI: &str = "org.apache.zookeeper.ZooKeeperMain";
/// Default limit for ZooKeeper to start.
pub const DEFAULT_ZK_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Limit of one four-letter-word exchange.
const FOUR_LETTER_WORD_TIMEOUT: Duration = Duration::from_secs(5);
/// Cap on a four-letter-word answer (they are a few hundred bytes).
const FOUR_LETTER_WORD_MAX_BYTES: u64 = 1024 * 1024;

/// A running standalone ZooKeeper. SIGKILLed on drop; its folder (data, config, log) is removed
/// after that unless `KRUST_TESTKIT_KEEP=1`.
#[derive(Debug)]
pub struct ZooKeeperServer {
    // The process is killed (dropped) before its folder is removed.
    process: ManagedProcess,
    dist: KafkaDist,
    port: u16,
    dir: PathBuf,
    _temp: TempDir,
}

impl ZooKeeperServer {
    /// Starts a standalone ZooKeeper on a free port and waits until it serves requests.
    ///
    /// # Errors
    /// `Io`, `Spawn`, `Exited` or `Timeout` (quoting its log).
    pub fn start(dist: &KafkaDist) -> Result<ZooKeeperServer> {
        let mut temp = tempfile::Builder::new()
            .prefix("krust-zookeeper-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for ZooKeeper", e))?;
        if std::env::var_os("KRUST_TESTKIT_KEEP").is_some_and(|v| !v.is_empty() && v != "0") {
            temp.disable_cleanup(true);
        }
        let dir = temp.path().to_path_buf();
        let port = free_port()?;
        let config = dir.join("zookeeper.properties");
        let text = format!(
            "dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\ntickTime=2000\n",
            dir.join("data").display()
        );
        std::fs::write(&config, text)
            .map_err(|e| HarnessError::io(format!("writing {}", config.display()), e))?;
        let spec = ProcessSpec::new("zookeeper", dist.java(), dir.join("zookeeper.log"))
            .args(dist.jvm_args(ZOOKEEPER_MAIN, true))
            .arg(&config);
        let process = ManagedProcess::start(spec)?;
        let mut server = ZooKeeperServer {
            process,
            dist: dist.clone(),
            port,
            dir,
            _temp: temp,
        };
        server.wait_ready(DEFAULT_ZK_START_TIMEOUT)?;
        Ok(server)
    }

    /// Waits until the port accepts connections and `srvr` reports a `Mode:` (`ruok` says
    /// `imok` too early: before the server serves requests).
    ///
    /// # Errors
    /// `Exited` or `Timeout`.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.process.wait_for_port(self.port, timeout)?;
        loop {
            if self
                .four_letter_word("srvr")
                .is_ok_and(|answer| answer.contains("Mode: "))
            {
                return Ok(());
            }
            if !self.process.is_running()? || Instant::now() >= deadline {
                let log_tail = self.process.log_tail(LOG_TAIL_LINES);
                return Err(HarnessError::Timeout {
                    what: "zookeeper: srvr to report a Mode".to_owned(),
                    waited: timeout,
                    log: self.process.log_path().to_path_buf(),
                    log_tail,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `stat`, `mntr`, …) and returns the answer.
    ///
    /// # Errors
    /// `Io` if the connection fails or times out.
    pub fn four_letter_word(&self, word: &str) -> Result<String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let io = |e| HarnessError::io(format!("four-letter word {word:?} to {addr}"), e);
        let mut stream = TcpStream::connect_timeout(&addr, FOUR_LETTER_WORD_TIMEOUT).map_err(io)?;
        stream
            .set_read_timeout(Some(FOUR_LETTER_WORD_TIMEOUT))
            .map_err(io)?;
        stream.write_all(word.as_bytes()).map_err(io)?;
        let mut answer = String::new();
        stream
            .take(FOUR_LETTER_WORD_MAX_BYTES)
            .read_to_string(&mut answer)
            .map_err(io)?;
        Ok(answer)
    }

    /// `zookeeper-shell.sh 127.0.0.1:<port> <command…>`, e.g. `["get", "/cluster/id"]`.
    ///
    /// # Errors
    /// `Spawn` or `ToolTimeout` (the exit code is in the output).
    pub fn shell(&self, command: &[&str]) -> Result<ToolOutput> {
        let connect = self.connect_string();
        let mut args = vec!["-server", connect.as_str()];
        args.extend_from_slice(command);
        self.dist
            .run_tool(ZOOKEEPER_CLI, &args, crate::dist::DEFAULT_TOOL_TIMEOUT)
    }

    /// `127.0.0.1:<port>`, for `zookeeper.connect`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's folder (`data/`, `zookeeper.properties`, `zookeeper.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// SIGKILL.
    ///
    /// # Errors
    /// As [`ManagedProcess::kill`].
    pub fn kill(&mut self) -> Result<()> {
        self.process.kill().map(|_| ())
    }

    /// Starts it again (same port and data) after it stopped, and waits until it is ready.
    ///
    /// # Errors
    /// As [`ZooKeeperServer::start`].
    pub fn restart(&mut self) -> Result<()> {
        if self.process.is_running()? {
            self.process.terminate(Duration::from_secs(30))?;
        }
        self.process.restart()?;
        self.wait_ready(DEFAULT_ZK_START_TIMEOUT)
    }
}
