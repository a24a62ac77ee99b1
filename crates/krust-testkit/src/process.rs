//! A child process owned by a test: its output goes to a log file, every wait has a timeout, and
//! it is killed (SIGKILL) when the handle is dropped — also while a failed test unwinds.
//!
//! [`ManagedProcess`] is the building block of [`crate::KafkaNode`] and [`crate::KrustProcess`].

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::error::{HarnessError, Result};

/// How often waits look at the log file, the port or the process.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many lines of the log an error message quotes.
pub const LOG_TAIL_LINES: usize = 40;
/// How far back from the end of the log the tail is looked for.
const LOG_TAIL_BYTES: u64 = 64 * 1024;
/// How long a SIGKILLed process may take to be reaped before the harness gives up on it.
const KILL_REAP_TIMEOUT: Duration = Duration::from_secs(30);

/// A position in a process's log file; lines after it are "new". See
/// [`ManagedProcess::log_mark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogMark(pub u64);

/// What to run. Built by [`crate::KrustProcess`] and [`crate::KafkaNode`]; public so tests can
/// supervise any other program (e.g. a client) the same way.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    /// Shown in messages, e.g. `kafka node 1` or `krust`.
    pub name: String,
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment variables (the rest is inherited).
    pub envs: Vec<(OsString, OsString)>,
    /// Working directory (default: inherited).
    pub current_dir: Option<PathBuf>,
    /// Where stdout and stderr go (appended; a marker line is written at each start).
    pub log_path: PathBuf,
}

impl ProcessSpec {
    /// A spec for `program` logging to `log_path`, with no arguments.
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        log_path: impl Into<PathBuf>,
    ) -> Self {
        ProcessSpec {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            current_dir: None,
            log_path: log_path.into(),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    fn command_line(&self) -> String {
        let mut line = self.program.display().to_string();
        for arg in &self.args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }
}

/// A running (or stopped) child process with its output in a log file.
///
/// Dropping it SIGKILLs the process if it still runs. It can be started again after it stopped
/// ([`ManagedProcess::restart`]); the log file is appended to, and waits look only at the output
/// of the current run unless given an explicit [`LogMark`].
#[derive(Debug)]
pub struct ManagedProcess {
    spec: ProcessSpec,
    child: Option<Child>,
    /// Kills `child` if this test process dies without running `Drop` (see [`spawn_watchdog`]).
    watchdog: Option<Child>,
    /// Where the current run's output starts in the log file.
    run_start: LogMark,
    last_status: Option<ExitStatus>,
}

impl ManagedProcess {
    /// Starts the process described by `spec`.
    ///
    /// # Errors
    /// `Io` if the log file cannot be opened, `Spawn` if the program cannot be started.
    pub fn start(spec: ProcessSpec) -> Result<Self> {
        let mut process = ManagedProcess {
            spec,
            child: None,
            watchdog: None,
            run_start: LogMark(0),
            last_status: None,
        };
        process.spawn()?;
        Ok(process)
    }

    fn spawn(&mut self) -> Result<()> {
        let log_path = &self.spec.log_path;
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| HarnessError::io(format!("creating {}", parent.display()), e))?;
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| HarnessError::io(format!("opening log {}", log_path.display()), e))?;
        writeln!(
            log,
            "=== krust-testkit: starting {}: {}",
            self.spec.name,
            self.spec.command_line()
        )
        .map_err(|e| HarnessError::io(format!("writing log {}", log_path.display()), e))?;
        // The run's output starts after the marker line (which quotes the command line, so a
        // wait must not match it).
        let start = log
            .seek(SeekFrom::End(0))
            .map_err(|e| HarnessError::io(format!("seeking log {}", log_path.display()), e))?;
        let stderr = log
            .try_clone()
            .map_err(|e| HarnessError::io(format!("duplicating log {}", log_path.display()), e))?;
        let mut command = Command::new(&self.spec.program);
        command
            .args(&self.spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr));
        for (key, value) in &self.spec.envs {
            command.env(key, value);
        }
        if let Some(dir) = &self.spec.current_dir {
            command.current_dir(dir);
        }
        let token = format!("{}-{}", std::process::id(), rand::random::<u64>());
        command.env(WATCHDOG_TOKEN_VAR, &token);
        let child = command.spawn().map_err(|source| HarnessError::Spawn {
            program: self.spec.program.display().to_string(),
            source,
        })?;
        self.stop_watchdog();
        self.watchdog = spawn_watchdog(child.id(), &token);
        self.child = Some(child);
        self.run_start = LogMark(start);
        self.last_status = None;
        Ok(())
    }

    /// Starts the process again after it stopped (same program, arguments and log file).
    ///
    /// # Errors
    /// `Invalid` if it is still running; otherwise as [`ManagedProcess::start`].
    pub fn restart(&mut self) -> Result<()> {
        if self.is_running()? {
            return Err(HarnessError::Invalid(format!(
                "{} is still running; stop it before restarting",
                self.spec.name
            )));
        }
        self.spawn()
    }

    /// The name given in the spec.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The log file holding stdout and stderr of every run.
    pub fn log_path(&self) -> &Path {
        &self.spec.log_path
    }

    /// The operating-system process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process still runs (reaps it if it exited).
    ///
    /// # Errors
    /// `Io` if the operating system cannot tell.
    pub fn is_running(&mut self) -> Result<bool> {
        Ok(self.try_wait()?.is_none() && self.child.is_some())
    }

    /// The exit status if the process has exited since it was (re)started, without blocking.
    fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(child) = &mut self.child {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    self.stop_watchdog();
                    self.last_status = Some(status);
                    Ok(Some(status))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(HarnessError::io(
                    format!("checking on {}", self.spec.name),
                    e,
                )),
            }
        } else {
            Ok(self.last_status)
        }
    }

    /// SIGKILLs the process and reaps it: nothing is flushed, nothing is closed cleanly — a
    /// crash. Returns the exit status (also if it had already exited).
    ///
    /// # Errors
    /// `Io` if the signal cannot be sent; `Timeout` if the process is not gone 30 s later.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.signal(Signal::KILL)?;
        self.wait_exit(KILL_REAP_TIMEOUT)
    }

    /// SIGTERMs the process and waits up to `timeout` for it to exit (Kafka closes its segments
    /// and writes its checkpoints on SIGTERM). If it has not exited by then it is SIGKILLed and
    /// `Timeout` is returned.
    ///
    /// # Errors
    /// `Io` if a signal cannot be sent; `Timeout` as above.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.signal(Signal::TERM)?;
        match self.wait_exit(timeout) {
            Ok(status) => Ok(status),
            Err(err) => {
                let _ = self.kill();
                Err(err)
            }
        }
    }

    /// SIGSTOPs the process: it keeps its sockets and state but runs no code until
    /// [`ManagedProcess::resume`] — a process pause (a long GC, a stalled VM).
    ///
    /// # Errors
    /// `Io` if the signal cannot be sent.
    pub fn pause(&mut self) -> Result<()> {
        self.signal(Signal::STOP)
    }

    /// SIGCONTs a process paused by [`ManagedProcess::pause`].
    ///
    /// # Errors
    /// `Io` if the signal cannot be sent.
    pub fn resume(&mut self) -> Result<()> {
        self.signal(Signal::CONT)
    }

    fn signal(&mut self, signal: Signal) -> Result<()> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        let pid = Pid::from_child(child);
        match rustix::process::kill_process(pid, signal) {
            Ok(()) => Ok(()),
            // Exited (and became a zombie or was reaped) between the check and the signal.
            Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(HarnessError::io(
                format!(
                    "sending {signal:?} to {} (pid {})",
                    self.spec.name,
                    child.id()
                ),
                e.into(),
            )),
        }
    }

    /// Waits up to `timeout` for the process to exit by itself.
    ///
    /// # Errors
    /// `Timeout` (with the log tail) if it still runs; the process is left running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(self.timeout_error(format!("{} to exit", self.spec.name), timeout));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The end of the log right now: pass it to [`ManagedProcess::wait_for_log_since`] to wait for
    /// a line printed after this moment.
    pub fn log_mark(&self) -> LogMark {
        LogMark(std::fs::metadata(&self.spec.log_path).map_or(0, |m| m.len()))
    }

    /// Waits up to `timeout` for a line containing `needle` in this run's output; returns the line.
    ///
    /// # Errors
    /// `Exited` if the process exits first, `Timeout` if the time runs out; both quote the log.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        let from = self.run_start;
        self.wait_for_log_since(from, needle, timeout)
    }

    /// Like [`ManagedProcess::wait_for_log`], looking only at output after `mark`.
    ///
    /// # Errors
    /// As [`ManagedProcess::wait_for_log`].
    pub fn wait_for_log_since(
        &mut self,
        mark: LogMark,
        needle: &str,
        timeout: Duration,
    ) -> Result<String> {
        self.wait_for_log_matching(
            mark,
            &format!("log line containing {needle:?}"),
            timeout,
            |line| line.contains(needle),
        )
    }

    /// Waits up to `timeout` for a line after `mark` for which `matches` is true; returns it.
    /// `what` describes the line for the error message.
    ///
    /// # Errors
    /// As [`ManagedProcess::wait_for_log`].
    pub fn wait_for_log_matching(
        &mut self,
        mark: LogMark,
        what: &str,
        timeout: Duration,
        mut matches: impl FnMut(&str) -> bool,
    ) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let path = self.spec.log_path.clone();
        let mut file = File::open(&path)
            .map_err(|e| HarnessError::io(format!("opening log {}", path.display()), e))?;
        file.seek(SeekFrom::Start(mark.0))
            .map_err(|e| HarnessError::io(format!("seeking log {}", path.display()), e))?;
        let mut scanner = LineScanner::default();
        loop {
            if let Some(line) = scanner
                .scan(&mut file, &mut matches, false)
                .map_err(|e| HarnessError::io(format!("reading log {}", path.display()), e))?
            {
                return Ok(line);
            }
            if let Some(status) = self.try_wait()? {
                // The process may have printed the line just before exiting: look once more,
                // including an unterminated last line.
                if let Some(line) = scanner
                    .scan(&mut file, &mut matches, true)
                    .map_err(|e| HarnessError::io(format!("reading log {}", path.display()), e))?
                {
                    return Ok(line);
                }
                let what = format!("{}: {what}", self.spec.name);
                let log_tail = self.log_tail(LOG_TAIL_LINES);
                eprintln!(
                    "krust-testkit: {what}: exited with {status}; last lines of {}:\n{log_tail}",
                    path.display()
                );
                return Err(HarnessError::Exited {
                    what,
                    status,
                    log: path,
                    log_tail,
                });
            }
            if Instant::now() >= deadline {
                return Err(self.timeout_error(what.to_owned(), timeout));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits up to `timeout` until `127.0.0.1:port` accepts connections.
    ///
    /// # Errors
    /// `Exited` if the process exits first, `Timeout` if the time runs out.
    pub fn wait_for_port(&mut self, port: u16, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if crate::ports::port_accepts(port) {
                return Ok(());
            }
            if let Some(status) = self.try_wait()? {
                let log_tail = self.log_tail(LOG_TAIL_LINES);
                return Err(HarnessError::Exited {
                    what: format!("{}: port {port} to accept connections", self.spec.name),
                    status,
                    log: self.spec.log_path.clone(),
                    log_tail,
                });
            }
            if Instant::now() >= deadline {
                return Err(
                    self.timeout_error(format!("127.0.0.1:{port} to accept connections"), timeout)
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The last `lines` lines of the log file (all runs).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.spec.log_path, lines)
    }

    /// This run's output so far (lossily decoded).
    pub fn log_since_start(&self) -> String {
        self.log_since(self.run_start)
    }

    /// The output after `mark` (lossily decoded).
    pub fn log_since(&self, mark: LogMark) -> String {
        let bytes = std::fs::read(&self.spec.log_path).unwrap_or_default();
        let from = usize::try_from(mark.0)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[from..]).into_owned()
    }

    fn timeout_error(&self, what: String, waited: Duration) -> HarnessError {
        let what = format!("{}: {what}", self.spec.name);
        let log_tail = self.log_tail(LOG_TAIL_LINES);
        eprintln!(
            "krust-testkit: timed out after {waited:?} waiting for {what}; last lines of {}:\n{log_tail}",
            self.spec.log_path.display()
        );
        HarnessError::Timeout {
            what,
            waited,
            log: self.spec.log_path.clone(),
            log_tail,
        }
    }
}

impl ManagedProcess {
    fn stop_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// The environment variable that marks a child as ours for its watchdog.
const WATCHDOG_TOKEN_VAR: &str = "KRUST_TESTKIT_TOKEN";

/// `Drop` kills children when a test passes or panics, but not when the test process itself is
/// SIGKILLed (e.g. by a timeout wrapper): then a JVM would live on. So each child gets a small
/// `sh` watchdog that polls the test process once a second and, once it is gone, SIGKILLs the
/// child — only if that pid still carries our token in its environment, so a reused pid is never
/// hit. `None` if `sh` cannot be started (the child then relies on `Drop` alone).
fn spawn_watchdog(child_pid: u32, token: &str) -> Option<Child> {
    spawn_watchdog_for(std::process::id(), child_pid, token)
}

fn spawn_watchdog_for(guarded_pid: u32, child_pid: u32, token: &str) -> Option<Child> {
    const SCRIPT: &str = "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
        if tr '\\0' '\\n' < \"/proc/$2/environ\" 2>/dev/null | grep -qx \"$3=$4\"; then kill -9 \"$2\"; fi";
    Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("krust-testkit-watchdog")
        .arg(guarded_pid.to_string())
        .arg(child_pid.to_string())
        .arg(WATCHDOG_TOKEN_VAR)
        .arg(token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop_watchdog();
        if let Some(child) = &mut self.child {
            // SIGKILL; errors are moot (already gone). `wait` reaps it so no zombie is left.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads a growing file line by line, keeping an unfinished last line for the next round.
#[derive(Default)]
struct LineScanner {
    pending: Vec<u8>,
}

impl LineScanner {
    /// Reads to the current end of `file`; returns the first complete line that `matches`. With
    /// `flush`, an unterminated last line is checked too.
    fn scan(
        &mut self,
        file: &mut File,
        matches: &mut impl FnMut(&str) -> bool,
        flush: bool,
    ) -> std::io::Result<Option<String>> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = file.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            let scan_from = self.pending.len();
            self.pending.extend_from_slice(&chunk[..n]);
            if self.pending[scan_from..].contains(&b'\n') {
                let mut consumed = 0;
                while let Some(offset) = self.pending[consumed..].iter().position(|&b| b == b'\n') {
                    let line = String::from_utf8_lossy(&self.pending[consumed..consumed + offset]);
                    let line = line.trim_end_matches('\r');
                    if matches(line) {
                        let found = line.to_owned();
                        self.pending.drain(..consumed + offset + 1);
                        return Ok(Some(found));
                    }
                    consumed += offset + 1;
                }
                self.pending.drain(..consumed);
            }
        }
        if flush && !self.pending.is_empty() {
            let line = String::from_utf8_lossy(&self.pending).into_owned();
            self.pending.clear();
            if matches(&line) {
                return Ok(Some(line));
            }
        }
        Ok(None)
    }
}

/// The last `lines` lines of the file at `path` ("" if it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) -> ManagedProcess {
        ManagedProcess::start(
            ProcessSpec::new("sh", "/bin/sh", dir.join("sh.log"))
                .arg("-c")
                .arg(script),
        )
        .expect("start sh")
    }

    fn wait_until_exited(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        None
    }

    #[test]
    fn the_watchdog_kills_a_tagged_child_once_the_guarded_process_is_gone() {
        let sleeper = || Command::new("sleep").arg("600").spawn().expect("sleep");
        let mut guarded = sleeper();
        let mut tagged = Command::new("sleep")
            .arg("600")
            .env(WATCHDOG_TOKEN_VAR, "token-1")
            .spawn()
            .expect("sleep");
        let mut untagged = sleeper();
        let mut w1 = spawn_watchdog_for(guarded.id(), tagged.id(), "token-1").expect("watchdog");
        // Same token, but the child does not carry it: must survive.
        let mut w2 = spawn_watchdog_for(guarded.id(), untagged.id(), "token-1").expect("watchdog");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            tagged.try_wait().expect("state").is_none(),
            "alive while the guarded process runs"
        );
        let _ = guarded.kill();
        let _ = guarded.wait();
        let status = wait_until_exited(&mut tagged, Duration::from_secs(10))
            .expect("killed by the watchdog");
        assert!(!status.success());
        assert!(
            wait_until_exited(&mut w2, Duration::from_secs(10)).is_some(),
            "watchdog 2 finished"
        );
        assert!(
            untagged.try_wait().expect("state").is_none(),
            "an untagged pid is never killed"
        );
        let _ = untagged.kill();
        let _ = untagged.wait();
        let _ = w1.wait();
    }

    #[test]
    fn wait_for_log_finds_a_line_printed_before_exit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = sh(dir.path(), "echo one; echo 'two ready'; printf 'three'");
        let line = p
            .wait_for_log("ready", Duration::from_secs(10))
            .expect("line");
        assert_eq!(line, "two ready");
        // An unterminated last line is seen once the process has exited.
        let last = p
            .wait_for_log("three", Duration::from_secs(10))
            .expect("last line");
        assert_eq!(last, "three");
    }

    #[test]
    fn wait_for_log_reports_exit_with_the_log_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = sh(dir.path(), "echo 'boom: bad config' >&2; exit 3");
        let err = p
            .wait_for_log("started", Duration::from_secs(10))
            .expect_err("must fail");
        match err {
            HarnessError::Exited {
                status, log_tail, ..
            } => {
                assert_eq!(status.code(), Some(3));
                assert!(log_tail.contains("boom: bad config"), "{log_tail}");
            }
            other => panic!("expected Exited, got {other}"),
        }
    }

    #[test]
    fn wait_for_log_times_out_and_drop_kills_the_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = sh(dir.path(), "echo waiting; exec sleep 600");
        let err = p
            .wait_for_log("never", Duration::from_millis(300))
            .expect_err("must time out");
        assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
        let pid = p.pid().expect("running");
        drop(p);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} must be gone after drop"
        );
    }

    #[test]
    fn terminate_sends_sigterm_and_restart_runs_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = sh(
            dir.path(),
            "trap 'echo got-term; exit 0' TERM; echo up; while :; do sleep 0.1; done",
        );
        p.wait_for_log("up", Duration::from_secs(10)).expect("up");
        let status = p.terminate(Duration::from_secs(10)).expect("terminate");
        assert!(status.success(), "{status}");
        assert!(p.log_since_start().contains("got-term"));
        p.restart().expect("restart");
        let mark_line = p
            .wait_for_log("up", Duration::from_secs(10))
            .expect("up again");
        assert_eq!(mark_line, "up");
        let status = p.kill().expect("kill");
        assert_eq!(status.code(), None, "killed by a signal");
    }
}
