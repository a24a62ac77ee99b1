//! `--test-append-socket PATH`: a **test hook** that lets process tests append entries to the
//! metadata log before krust has a controller that writes records of its own.
//!
//! Why a Unix socket: the controller listener must stay exactly Kafka's (no extra API a Kafka
//! client or tool could trip over), the hook must be off unless asked for, and it must not be
//! reachable from the network. A Unix socket created only when the flag is given, in a
//! directory the test owns, meets all three; it calls the same [`RaftHandle::append`] a
//! controller will.
//!
//! Protocol, one exchange at a time per connection: the client writes one line (at most
//! [`MAX_LINE_BYTES`]); its bytes, without the newline, become one record value. The answer is
//! `OK <offset>\n` once the record is committed, or `ERR <reason>\n` (e.g. not the leader, or
//! the record was truncated by a new leader and is not in the log).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use krust_raft::driver::RaftHandle;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Longest line accepted; longer ones close the connection.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Connections served at once.
const MAX_CONNECTIONS: usize = 16;
/// Longest wait for a commit before answering `ERR timeout` (outcome unknown).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The running hook; dropping it stops accepting and removes the socket file.
#[derive(Debug)]
pub struct TestWriter {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl TestWriter {
    /// Binds `path` (removing a stale socket file first) and serves appends to `raft`.
    ///
    /// # Errors
    /// The bind error.
    pub fn bind(path: &Path, raft: RaftHandle) -> std::io::Result<Self> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let raft = raft.clone();
                        tokio::spawn(async move {
                            serve(stream, raft).await;
                            drop(permit);
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "test writer: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(Self {
            path: path.to_owned(),
            task,
        })
    }
}

impl Drop for TestWriter {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(stream: UnixStream, raft: RaftHandle) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Bounded read: at most MAX_LINE_BYTES + 1 bytes are buffered per line.
        let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX) + 1;
        let mut limited = (&mut reader).take(limit);
        let n = match tokio::io::AsyncBufReadExt::read_until(&mut limited, b'\n', &mut line).await {
            Ok(n) => n,
            Err(e) => {
                debug!(error = %e, "test writer: read failed");
                return;
            }
        };
        if n == 0 {
            return;
        }
        if line.last() != Some(&b'\n') {
            let _ = write.write_all(b"ERR line too long\n").await;
            return;
        }
        line.pop();
        let value = Bytes::copy_from_slice(&line);
        let answer = match tokio::time::timeout(COMMIT_TIMEOUT, raft.append(vec![value])).await {
            Ok(Ok(offset)) => format!("OK {}\n", offset.0),
            Ok(Err(e)) => format!("ERR {e}\n"),
            Err(_) => "ERR timeout\n".to_owned(),
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
