//! A `krust` process (or any other binary) under test: logs captured to a file, waits with
//! timeouts, SIGKILL/SIGTERM, killed on drop.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use tempfile::TempDir;

use crate::dist::workspace_root;
use crate::error::{HarnessError, Result};
use crate::process::{LogMark, ManagedProcess, ProcessSpec};

/// The `krust` binary of this workspace: `$KRUST_BIN` if set, else `<target dir>/debug/krust`
/// (`$CARGO_TARGET_DIR` or `<workspace>/target`). Inside the `krust` crate's own tests prefer
/// `env!("CARGO_BIN_EXE_krust")`, which cargo guarantees is freshly built.
///
/// # Errors
/// `BinaryNotFound` if the file does not exist.
pub fn krust_binary() -> Result<PathBuf> {
    let path = match std::env::var_os("KRUST_BIN") {
        Some(path) => PathBuf::from(path),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace_root().join("target"), PathBuf::from)
            .join("debug")
            .join("krust"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::BinaryNotFound { path })
    }
}

/// Configures a [`KrustProcess`]; see [`KrustProcess::builder`].
#[derive(Debug)]
pub struct KrustProcessBuilder {
    spec: ProcessSpec,
    dir: Option<PathBuf>,
}

impl KrustProcessBuilder {
    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.spec = self.spec.arg(arg);
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.spec = self.spec.args(args);
        self
    }

    /// Sets an environment variable (e.g. `RUST_LOG`).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.spec = self.spec.env(key, value);
        self
    }

    /// Runs in `dir` and writes the log there (default: a fresh temp dir, removed on drop).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Name used in messages and the log file name (default `krust`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.spec.name = name.into();
        self
    }

    /// Starts the process (does not wait for anything; use the `wait_for_*` methods).
    ///
    /// # Errors
    /// `BinaryNotFound`, `Io` or `Spawn`.
    pub fn start(self) -> Result<KrustProcess> {
        let mut spec = self.spec;
        if !spec.program.is_file() {
            return Err(HarnessError::BinaryNotFound { path: spec.program });
        }
        let (temp, dir) = match self.dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
                (None, dir)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("krust-process-")
                    .tempdir()
                    .map_err(|e| HarnessError::io("creating a temp dir for a krust process", e))?;
                let path = temp.path().to_path_buf();
                (Some(temp), path)
            }
        };
        let file_name: String = spec
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        spec.log_path = dir.join(format!("{file_name}.log"));
        spec.current_dir = Some(dir.clone());
        let process = ManagedProcess::start(spec)?;
        Ok(KrustProcess {
            process,
            dir,
            _temp: temp,
        })
    }
}

/// A running `krust` (or other) binary. SIGKILLed on drop; its temp dir (if the harness made
/// one) is removed after that.
#[derive(Debug)]
pub struct KrustProcess {
    // The process is killed (dropped) before its folder is removed.
    process: ManagedProcess,
    dir: PathBuf,
    _temp: Option<TempDir>,
}

impl KrustProcess {
    /// A process of `binary` (e.g. `env!("CARGO_BIN_EXE_krust")` or [`krust_binary`]) to configure.
    pub fn builder(binary: impl Into<PathBuf>) -> KrustProcessBuilder {
        KrustProcessBuilder {
            spec: ProcessSpec::new("krust", binary, PathBuf::new()),
            dir: None,
        }
    }

    /// Starts `binary args…` in a temp dir.
    ///
    /// # Errors
    /// As [`KrustProcessBuilder::start`].
    pub fn start<I, S>(binary: impl Into<PathBuf>, args: I) -> Result<KrustProcess>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::builder(binary).args(args).start()
    }

    /// The working folder (holds the log file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file holding stdout and stderr.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Waits for a line containing `needle` in this run's output; returns the line.
    ///
    /// # Errors
    /// `Exited` or `Timeout`, quoting the log.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.process.wait_for_log(needle, timeout)
    }

    /// Waits for a line after `mark` containing `needle`.
    ///
    /// # Errors
    /// `Exited` or `Timeout`, quoting the log.
    pub fn wait_for_line_since(
        &mut self,
        mark: LogMark,
        needle: &str,
        timeout: Duration,
    ) -> Result<String> {
        self.process.wait_for_log_since(mark, needle, timeout)
    }

    /// The end of the log right now.
    pub fn log_mark(&self) -> LogMark {
        self.process.log_mark()
    }

    /// Waits until `127.0.0.1:port` accepts connections.
    ///
    /// # Errors
    /// `Exited` or `Timeout`, quoting the log.
    pub fn wait_for_port(&mut self, port: u16, timeout: Duration) -> Result<()> {
        self.process.wait_for_port(port, timeout)
    }

    /// Waits for the process to exit by itself (e.g. a one-shot CLI command).
    ///
    /// # Errors
    /// `Timeout` (the process is left running until dropped).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process.wait_exit(timeout)
    }

    /// SIGKILL (a crash).
    ///
    /// # Errors
    /// As [`ManagedProcess::kill`].
    pub fn kill(&mut self) -> Result<ExitStatus> {
        self.process.kill()
    }

    /// SIGTERM, then wait up to `timeout` (SIGKILL and `Timeout` after that).
    ///
    /// # Errors
    /// As [`ManagedProcess::terminate`].
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process.terminate(timeout)
    }

    /// Starts it again (same args, same dir, log appended) after it stopped.
    ///
    /// # Errors
    /// As [`ManagedProcess::restart`].
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()
    }

    /// Whether it still runs.
    ///
    /// # Errors
    /// `Io` if the operating system cannot tell.
    pub fn is_running(&mut self) -> Result<bool> {
        self.process.is_running()
    }

    /// This run's output so far.
    pub fn output(&self) -> String {
        self.process.log_since_start()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// The underlying process handle.
    pub fn process(&mut self) -> &mut ManagedProcess {
        &mut self.process
    }
}

impl Drop for KrustProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "krust-testkit: {} log {} (last lines):\n{}",
                self.process.name(),
                self.process.log_path().display(),
                self.process.log_tail(20)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_binary_captures_its_output_and_reports_its_exit() {
        let mut p = KrustProcess::builder("/bin/sh")
            .name("echoer")
            .args(["-c", "echo hello from $GREETING; exit 7"])
            .env("GREETING", "krust")
            .start()
            .expect("start");
        let line = p
            .wait_for_line("hello", Duration::from_secs(10))
            .expect("line");
        assert_eq!(line, "hello from krust");
        let status = p.wait_exit(Duration::from_secs(10)).expect("exit");
        assert_eq!(status.code(), Some(7));
        assert!(p.log_path().ends_with("echoer.log"));
        assert!(p.output().contains("hello from krust"));
    }

    #[test]
    fn a_missing_binary_is_a_typed_error() {
        let err = KrustProcess::start("/nonexistent/krust", ["server"]).expect_err("must fail");
        assert!(matches!(err, HarnessError::BinaryNotFound { .. }), "{err}");
    }

    #[test]
    fn wait_for_port_times_out_when_nobody_listens_and_sigkill_stops_it() {
        let port = crate::ports::free_port().expect("port");
        let mut p = KrustProcess::start("/bin/sh", ["-c", "exec sleep 600"]).expect("start");
        let err = p
            .wait_for_port(port, Duration::from_millis(300))
            .expect_err("nobody listens");
        assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
        let status = p.kill().expect("kill");
        assert!(!status.success());
        assert!(!p.is_running().expect("state"));
    }
}
