//! Apache Kafka 3.9 as cached on this machine, and its command-line tools.
//!
//! The jars come from Maven Central through `scripts/fetch-kafka.sh` (run by `scripts/test.sh`,
//! and by [`KafkaDist::locate`] when the cache is missing). Kafka's shell wrappers are not used:
//! the harness starts `java -cp '<libs>/*' <main class>` itself, with a small heap and a light JIT
//! so that several JVMs fit on a 2-core machine.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::RngCore;

use crate::error::{HarnessError, Result};

/// The Apache Kafka release the harness runs (see `scripts/kafka/pom.xml`).
pub const KAFKA_VERSION: &str = "3.9.1";

/// Main classes of Kafka 3.9.1's tools, checked against its jars.
pub mod class {
    /// `kafka-server-start.sh`: the broker/controller process.
    pub const KAFKA: &str = "kafka.Kafka";
    /// `kafka-storage.sh`: `format`, `info`, `random-uuid`.
    pub const STORAGE_TOOL: &str = "kafka.tools.StorageTool";
    /// `kafka-dump-log.sh`.
    pub const DUMP_LOG_SEGMENTS: &str = "kafka.tools.DumpLogSegments";
    /// `kafka-console-producer.sh` (still Scala in 3.9).
    pub const CONSOLE_PRODUCER: &str = "kafka.tools.ConsoleProducer";
    /// `kafka-console-consumer.sh`.
    pub const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    /// `kafka-producer-perf-test.sh`.
    pub const PRODUCER_PERFORMANCE: &str = "org.apache.kafka.tools.ProducerPerformance";
    /// `kafka-topics.sh`.
    pub const TOPIC_COMMAND: &str = "org.apache.kafka.tools.TopicCommand";
    /// `kafka-get-offsets.sh`.
    pub const GET_OFFSET_SHELL: &str = "org.apache.kafka.tools.GetOffsetShell";
    /// `kafka-metadata-quorum.sh`.
    pub const METADATA_QUORUM: &str = "org.apache.kafka.tools.MetadataQuorumCommand";
    /// `kafka-features.sh`.
    pub const FEATURE_COMMAND: &str = "org.apache.kafka.tools.FeatureCommand";
    /// `kafka-metadata-shell.sh`.
    pub const METADATA_SHELL: &str = "org.apache.kafka.shell.MetadataShell";
}

/// JVM flags for every Kafka process the harness starts: serial GC and C1 only (fast start, little
/// background CPU), no perf-data files in /tmp.
const JVM_FLAGS: &[&str] = &[
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Dfile.encoding=UTF-8",
];
/// Heap cap of every JVM the harness starts.
pub const JVM_MAX_HEAP: &str = "-Xmx512m";
/// Default time limit of a tool run.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `scripts/fetch-kafka.sh` may take on a fresh machine (Maven downloads ~100 jars).
const FETCH_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The server's log4j (1.x/reload4j) configuration: everything at INFO to stdout, which the harness
/// sends to the node's log file.
const SERVER_LOG4J: &str = "\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
";
/// The tools' log4j configuration: warnings only, on stderr, so stdout holds only the tool's output.
const TOOLS_LOG4J: &str = "\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
";

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

/// A Kafka 3.9 installation (jars) plus the `java` to run it with.
#[derive(Clone, Debug)]
pub struct KafkaDist {
    home: PathBuf,
    java: PathBuf,
    server_log4j: PathBuf,
    tools_log4j: PathBuf,
}

impl KafkaDist {
    /// Finds the cached Kafka (`$KRUST_KAFKA_HOME`, else `~/.cache/krust/kafka-3.9.1`), running
    /// `scripts/fetch-kafka.sh` if it is missing, and the `java` binary (`$JAVA_HOME/bin/java`,
    /// else `java` on `PATH`). The result is computed once per test process.
    ///
    /// # Errors
    /// `KafkaUnavailable` or `JavaNotFound`, with what was tried.
    pub fn locate() -> Result<KafkaDist> {
        static LOCATED: OnceLock<std::result::Result<KafkaDist, String>> = OnceLock::new();
        match LOCATED.get_or_init(|| Self::locate_uncached().map_err(|e| e.to_string())) {
            Ok(dist) => Ok(dist.clone()),
            Err(reason) => Err(HarnessError::KafkaUnavailable {
                reason: reason.clone(),
            }),
        }
    }

    fn locate_uncached() -> Result<KafkaDist> {
        let java = find_java()?;
        let home = match cached_home() {
            Some(home) => home,
            None => run_fetch_script()?,
        };
        if !has_kafka_jar(&home) {
            return Err(HarnessError::KafkaUnavailable {
                reason: format!("{} holds no libs/kafka_2.13-*.jar", home.display()),
            });
        }
        let conf = home.join("testkit");
        std::fs::create_dir_all(&conf)
            .map_err(|e| HarnessError::io(format!("creating {}", conf.display()), e))?;
        let server_log4j = conf.join("server-log4j.properties");
        let tools_log4j = conf.join("tools-log4j.properties");
        write_if_changed(&server_log4j, SERVER_LOG4J)?;
        write_if_changed(&tools_log4j, TOOLS_LOG4J)?;
        Ok(KafkaDist {
            home,
            java,
            server_log4j,
            tools_log4j,
        })
    }

    /// The Kafka folder (holds `libs/`).
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The folder of Kafka's jars.
    pub fn libs_dir(&self) -> PathBuf {
        self.home.join("libs")
    }

    /// The `java` binary.
    pub fn java(&self) -> &Path {
        &self.java
    }

    /// The `-cp` value (`<libs>/*`, expanded by the JVM).
    pub fn classpath(&self) -> String {
        format!("{}/*", self.libs_dir().display())
    }

    /// `java` arguments up to and including the main class: JVM flags, heap, log4j config,
    /// classpath. `server` selects the log4j config (INFO to stdout vs WARN to stderr).
    pub fn jvm_args(&self, main_class: &str, server: bool) -> Vec<OsString> {
        self.jvm_args_with_classpath(main_class, server, &self.classpath())
    }

    /// [`KafkaDist::jvm_args`] with another `-cp` value (e.g. an application's classes and jars
    /// before [`KafkaDist::classpath`]).
    pub fn jvm_args_with_classpath(
        &self,
        main_class: &str,
        server: bool,
        classpath: &str,
    ) -> Vec<OsString> {
        let log4j = if server {
            &self.server_log4j
        } else {
            &self.tools_log4j
        };
        let mut args: Vec<OsString> = JVM_FLAGS.iter().map(OsString::from).collect();
        args.push(JVM_MAX_HEAP.into());
        args.push(format!("-Dlog4j.configuration=file:{}", log4j.display()).into());
        args.push("-cp".into());
        args.push(classpath.into());
        args.push(main_class.into());
        args
    }

    /// A tool run to configure: `dist.tool(class::STORAGE_TOOL).args(["random-uuid"]).run()`.
    pub fn tool(&self, main_class: &str) -> ToolCommand<'_> {
        ToolCommand {
            dist: self,
            class: main_class.to_owned(),
            args: Vec::new(),
            stdin: None,
            timeout: DEFAULT_TOOL_TIMEOUT,
        }
    }

    /// Runs a Kafka tool to completion (or `timeout`) and returns its output, whatever its exit
    /// code (see [`ToolOutput::ok`]).
    ///
    /// # Errors
    /// `Spawn` if `java` cannot start; `ToolTimeout` if it does not finish in time (it is killed).
    pub fn run_tool<S: AsRef<str>>(
        &self,
        main_class: &str,
        args: &[S],
        timeout: Duration,
    ) -> Result<ToolOutput> {
        self.tool(main_class).args(args).timeout(timeout).run()
    }

    /// [`KafkaDist::run_tool`] with `stdin` written to the tool's standard input (then closed).
    ///
    /// # Errors
    /// As [`KafkaDist::run_tool`].
    pub fn run_tool_with_stdin<S: AsRef<str>>(
        &self,
        main_class: &str,
        args: &[S],
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<ToolOutput> {
        self.tool(main_class)
            .args(args)
            .stdin(stdin)
            .timeout(timeout)
            .run()
    }

    /// `kafka-storage.sh random-uuid`: a fresh id from Kafka itself (one JVM start; the harness
    /// uses the equivalent [`random_kafka_uuid`] when it needs one).
    ///
    /// # Errors
    /// As [`KafkaDist::run_tool`], or `ToolFailed`.
    pub fn storage_random_uuid(&self) -> Result<String> {
        let output = self
            .run_tool(class::STORAGE_TOOL, &["random-uuid"], DEFAULT_TOOL_TIMEOUT)?
            .ok()?;
        Ok(output.stdout.trim().to_owned())
    }
}

/// A tool invocation being configured; see [`KafkaDist::tool`].
#[derive(Debug)]
pub struct ToolCommand<'a> {
    dist: &'a KafkaDist,
    class: String,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl ToolCommand<'_> {
    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<str>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Bytes for the tool's standard input (closed afterwards; without this, stdin is empty).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Time limit (default [`DEFAULT_TOOL_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs the tool and returns its output whatever its exit code.
    ///
    /// # Errors
    /// `Spawn` if `java` cannot start; `ToolTimeout` if it does not finish in time (it is killed).
    pub fn run(self) -> Result<ToolOutput> {
        let mut command = Command::new(self.dist.java());
        command
            .args(self.dist.jvm_args(&self.class, false))
            .args(&self.args);
        run_captured(command, self.class, self.args, self.stdin, self.timeout)
    }
}

/// Runs any program to completion (or `timeout`, then SIGKILL) with stdout and stderr captured
/// apart: e.g. a one-shot `krust storage format …` or `krust dump-log …`. `stdin`, if given, is
/// written to its standard input, which is then closed.
///
/// # Errors
/// `Spawn` if it cannot start; `ToolTimeout` (with what it printed) if it does not finish in time.
pub fn run_binary<S: AsRef<str>>(
    program: impl AsRef<Path>,
    args: &[S],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<ToolOutput> {
    let program = program.as_ref();
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_owned()).collect();
    let mut command = Command::new(program);
    command.args(&args);
    run_captured(
        command,
        program.display().to_string(),
        args,
        stdin.map(<[u8]>::to_vec),
        timeout,
    )
}

fn run_captured(
    mut command: Command,
    label: String,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<ToolOutput> {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|source| HarnessError::Spawn {
        program: label.clone(),
        source,
    })?;
    // Three threads so a program that fills one pipe while we write to another cannot deadlock.
    let writer = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(bytes)) => Some(std::thread::spawn(move || {
            // A program that exits without reading everything closes the pipe: not our error.
            let _ = pipe.write_all(&bytes);
        })),
        _ => None,
    };
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::io(format!("waiting for {label}"), e));
            }
        }
    };
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let stdout = joined(stdout);
    let stderr = joined(stderr);
    match status {
        Some(status) => Ok(ToolOutput {
            class: label,
            args,
            status,
            stdout,
            stderr,
        }),
        None => {
            eprintln!(
                "krust-testkit: {label} timed out after {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            );
            Err(HarnessError::ToolTimeout {
                class: label,
                args: args.join(" "),
                waited: timeout,
                stdout,
                stderr,
            })
        }
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

fn joined(handle: Option<JoinHandle<Vec<u8>>>) -> String {
    let bytes = handle.and_then(|h| h.join().ok()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What a tool printed and how it exited.
#[derive(Clone, Debug)]
pub struct ToolOutput {
    /// The Java main class (or, for [`run_binary`], the program) that ran.
    pub class: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its exit status.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (Kafka's WARN/ERROR log lines land here too).
    pub stderr: String,
}

impl ToolOutput {
    /// Whether the tool exited with code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `self` if the tool exited with code 0.
    ///
    /// # Errors
    /// `ToolFailed` with both output streams otherwise.
    pub fn ok(self) -> Result<ToolOutput> {
        if self.success() {
            Ok(self)
        } else {
            Err(HarnessError::ToolFailed {
                class: self.class,
                args: self.args.join(" "),
                status: self.status,
                stdout: self.stdout,
                stderr: self.stderr,
            })
        }
    }
}

/// A random id in Kafka's `Uuid.toString()` form: 16 random bytes, URL-safe base64 without
/// padding (22 characters). Like Kafka's `Uuid.randomUuid()` it never starts with `-` and is never
/// one of the reserved ids (all-zero, or `...AQ`, the metadata topic id).
pub fn random_kafka_uuid() -> String {
    let mut rng = rand::thread_rng();
    loop {
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        let msb = u64::from_be_bytes(bytes[..8].try_into().unwrap_or_default());
        let lsb = u64::from_be_bytes(bytes[8..].try_into().unwrap_or_default());
        if msb == 0 && lsb < 100 {
            continue;
        }
        let text = base64_url_no_pad(&bytes);
        if !text.starts_with('-') {
            return text;
        }
    }
}

fn base64_url_no_pad(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    // `chunks` never yields an empty chunk, so `chunk[0]` exists.
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}

fn find_java() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = PathBuf::from(home).join("bin").join("java");
        if java.is_file() {
            return Ok(java);
        }
    }
    let path = std::env::var_os("PATH").ok_or(HarnessError::JavaNotFound)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("java"))
        .find(|candidate| candidate.is_file())
        .ok_or(HarnessError::JavaNotFound)
}

/// The Kafka folder to use without fetching: `$KRUST_KAFKA_HOME` if it holds Kafka's jars (a
/// fetched cache or an unpacked Kafka 3.9 distribution), else the default cache once
/// `fetch-kafka.sh` has completed it.
fn cached_home() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KRUST_KAFKA_HOME") {
        let home = PathBuf::from(dir);
        if has_kafka_jar(&home) {
            return Some(home);
        }
    }
    let home = PathBuf::from(std::env::var_os("HOME")?)
        .join(".cache/krust")
        .join(format!("kafka-{KAFKA_VERSION}"));
    (home.join(".complete").is_file() && has_kafka_jar(&home)).then_some(home)
}

fn has_kafka_jar(home: &Path) -> bool {
    std::fs::read_dir(home.join("libs")).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("kafka_2.13-") && name.ends_with(".jar")
        })
    })
}

fn run_fetch_script() -> Result<PathBuf> {
    let script = workspace_root().join("scripts/fetch-kafka.sh");
    if !script.is_file() {
        return Err(HarnessError::KafkaUnavailable {
            reason: format!("not cached, and {} does not exist", script.display()),
        });
    }
    let mut child = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            program: script.display().to_string(),
            source,
        })?;
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + FETCH_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::KafkaUnavailable {
                    reason: format!(
                        "{} did not finish within {FETCH_TIMEOUT:?}",
                        script.display()
                    ),
                });
            }
            Err(e) => {
                return Err(HarnessError::io(
                    format!("waiting for {}", script.display()),
                    e,
                ));
            }
        }
    };
    let stdout = joined(stdout);
    let stderr = joined(stderr);
    if !status.success() {
        return Err(HarnessError::KafkaUnavailable {
            reason: format!("{} exited with {status}: {stderr}", script.display()),
        });
    }
    let home = stdout.lines().last().unwrap_or_default().trim();
    Ok(PathBuf::from(home))
}

/// Writes `contents` to `path` unless it already holds exactly that; via a temp file and a rename
/// so that concurrent test processes never see a half-written file.
fn write_if_changed(path: &Path, contents: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|existing| existing == contents) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, contents)
        .map_err(|e| HarnessError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        HarnessError::io(
            format!("renaming {} to {}", tmp.display(), path.display()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64_url_no_pad(b""), "");
        assert_eq!(base64_url_no_pad(b"f"), "Zg");
        assert_eq!(base64_url_no_pad(b"fo"), "Zm8");
        assert_eq!(base64_url_no_pad(b"foo"), "Zm9v");
        assert_eq!(base64_url_no_pad(&[0xfb, 0xff]), "-_8");
        // Kafka's metadata topic id: msb 0, lsb 1.
        let mut metadata_topic = [0u8; 16];
        metadata_topic[15] = 1;
        assert_eq!(base64_url_no_pad(&metadata_topic), "AAAAAAAAAAAAAAAAAAAAAQ");
    }

    #[test]
    fn random_kafka_uuids_have_kafkas_shape() {
        for _ in 0..1_000 {
            let id = random_kafka_uuid();
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{id}"
            );
        }
    }
}
