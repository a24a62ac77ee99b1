//! The one error type of the harness.
//!
//! Every failure that involves a process carries the path of its log file and the last lines of
//! that log, so a failed test shows *why* Kafka (or krust) did not come up without anyone having to
//! go and look for the file.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// What went wrong while preparing, starting, waiting for or stopping a test process.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Apache Kafka's jars are not cached and `scripts/fetch-kafka.sh` could not provide them.
    /// Remedy: run `./scripts/fetch-kafka.sh` from the workspace root (needs `java` and `mvn`),
    /// or point `KRUST_KAFKA_HOME` at a folder holding `libs/*.jar`.
    #[error("Apache Kafka 3.9 is not available: {reason}")]
    KafkaUnavailable {
        /// What was tried and what failed.
        reason: String,
    },
    /// No `java` binary in `$JAVA_HOME/bin` nor on `PATH`.
    /// Remedy: `apt-get install openjdk-17-jre-headless`.
    #[error("no java binary found ($JAVA_HOME/bin/java or java on PATH)")]
    JavaNotFound,
    /// A binary the caller named (e.g. the `krust` binary) does not exist.
    #[error("binary {path} does not exist (build it first, e.g. `cargo build -p krust`)")]
    BinaryNotFound {
        /// The path that was looked at.
        path: PathBuf,
    },
    /// Reading or writing a file of the harness (properties, logs, temp dirs) failed.
    #[error("{what}")]
    Io {
        /// What the harness was doing, with the path.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Starting a process failed (binary missing, not executable, …).
    #[error("starting {program}")]
    Spawn {
        /// The program that could not be started.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A wait (for a log line, a port, an exit, a tool run) did not finish in time. The process
    /// (if any) is still running; it is killed when its handle is dropped.
    #[error("timed out after {waited:?} waiting for {what}; log {log}, last lines:\n{log_tail}")]
    Timeout {
        /// What was awaited, e.g. `node 1: log line "Kafka Server started"`.
        what: String,
        /// How long the harness waited.
        waited: Duration,
        /// The process's log file.
        log: PathBuf,
        /// Its last lines.
        log_tail: String,
    },
    /// The process exited while the harness was waiting for it to become ready.
    #[error(
        "{what}: process exited with {status} while waiting; log {log}, last lines:\n{log_tail}"
    )]
    Exited {
        /// Which process and what was awaited.
        what: String,
        /// Its exit status.
        status: ExitStatus,
        /// The process's log file.
        log: PathBuf,
        /// Its last lines.
        log_tail: String,
    },
    /// A Kafka tool (e.g. `kafka.tools.StorageTool format`) exited unsuccessfully where success
    /// was required.
    #[error(
        "{class} {args} exited with {status}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    )]
    ToolFailed {
        /// The Java main class.
        class: String,
        /// Its arguments, space separated.
        args: String,
        /// Its exit status.
        status: ExitStatus,
        /// Everything it printed on stdout.
        stdout: String,
        /// Everything it printed on stderr.
        stderr: String,
    },
    /// A Kafka tool did not finish within its time limit; it was killed.
    #[error(
        "{class} {args} did not finish within {waited:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    )]
    ToolTimeout {
        /// The Java main class.
        class: String,
        /// Its arguments, space separated.
        args: String,
        /// The time limit.
        waited: Duration,
        /// What it printed on stdout before it was killed.
        stdout: String,
        /// What it printed on stderr before it was killed.
        stderr: String,
    },
    /// Kafka's console consumer gave up (its `--timeout-ms` passed without a new record)
    /// before it had consumed as many records as asked for. It exits 0 in that case.
    #[error(
        "consumed {got} of {expected} records from {topic}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    )]
    ConsumedTooFew {
        /// The topic.
        topic: String,
        /// Records asked for.
        expected: usize,
        /// Records printed.
        got: usize,
        /// What the consumer printed on stdout.
        stdout: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The caller asked for something that cannot work (e.g. a broker without controllers).
    #[error("invalid harness request: {0}")]
    Invalid(String),
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
