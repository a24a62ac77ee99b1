//! Kafka 3.9's client tools as functions: create topics, produce, consume, measure. They take a
//! bootstrap address, so they work the same against a Kafka node and against krust (that is the
//! point: Kafka's own clients checking krust's broker).
//!
//! Also the non-JVM clients the `clients_*` tests drive, installed by `scripts/clients/`: [`Kcat`],
//! [`PythonClients`] (confluent-kafka, kafka-python in a venv) and [`LibrdkafkaTests`]
//! (librdkafka's own test suite). A missing one fails the test in CI (`CI=true`) and skips it,
//! with the reason printed, elsewhere ([`missing_client_tool`]).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dist::{DEFAULT_TOOL_TIMEOUT, KafkaDist, ToolOutput, class, run_binary};
use crate::error::{HarnessError, Result};
use crate::kafka::{KafkaCluster, KafkaNode};
use crate::krust::KrustProcess;
use crate::ports::free_port;

/// The last summary line of `ProducerPerformance`
/// (`N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, …`).
#[derive(Clone, Debug)]
pub struct ProducerPerfSummary {
    /// Records acknowledged.
    pub records_sent: u64,
    /// Throughput in records per second.
    pub records_per_sec: f64,
    /// Throughput in MB per second.
    pub mb_per_sec: f64,
    /// Mean produce latency.
    pub avg_latency_ms: f64,
    /// Worst produce latency.
    pub max_latency_ms: f64,
    /// Everything the tool printed.
    pub output: ToolOutput,
}

impl KafkaDist {
    /// `kafka-topics.sh --bootstrap-server <bootstrap> --create --topic <topic> --partitions <n>
    /// --replication-factor <rf> [--config k=v]…`.
    ///
    /// # Errors
    /// `ToolFailed` (with Kafka's message, e.g. `TopicExistsException`) or `ToolTimeout`.
    pub fn create_topic(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        replication_factor: u16,
        configs: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--create".to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--partitions".to_owned(),
            partitions.to_string(),
            "--replication-factor".to_owned(),
            replication_factor.to_string(),
        ];
        for (key, value) in configs {
            args.push("--config".to_owned());
            args.push(format!("{key}={value}"));
        }
        self.tool(class::TOPIC_COMMAND).args(args).run()?.ok()
    }

    /// `kafka-console-producer.sh`: sends `input` (one record per line) to `topic` with
    /// `acks=all`, then exits once everything is acknowledged. `properties` are passed as
    /// `--property k=v` (e.g. `parse.key=true`, `key.separator=:`, `parse.headers=true`,
    /// `null.marker=NULL`) and `producer_properties` as `--producer-property k=v` (e.g.
    /// `linger.ms=100`, `batch.size=600`; `compression.type=gzip` is passed as
    /// `--compression-codec gzip`, because the tool would otherwise force it to `none`).
    ///
    /// # Errors
    /// `ToolFailed` or `ToolTimeout`.
    pub fn console_produce(
        &self,
        bootstrap: &str,
        topic: &str,
        input: &str,
        properties: &[(&str, &str)],
        producer_properties: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--producer-property".to_owned(),
            "acks=all".to_owned(),
        ];
        for (key, value) in properties {
            args.push("--property".to_owned());
            args.push(format!("{key}={value}"));
        }
        for (key, value) in producer_properties {
            if *key == "compression.type" {
                args.push("--compression-codec".to_owned());
                args.push((*value).to_owned());
            } else {
                args.push("--producer-property".to_owned());
                args.push(format!("{key}={value}"));
            }
        }
        self.tool(class::CONSOLE_PRODUCER)
            .args(args)
            .stdin(input.as_bytes())
            .run()?
            .ok()
    }

    /// `kafka-console-consumer.sh --from-beginning --max-messages <n>`: the first `max_messages`
    /// records of `topic`, one per line on stdout (formatted by `properties`, e.g.
    /// `print.key=true`, `print.offset=true`, `print.headers=true`, `key.separator=\t`). The tool
    /// gives up after `timeout` without a new record (`--timeout-ms`) and then exits 0 all the
    /// same, so fewer lines than `max_messages` is turned into an error here.
    ///
    /// # Errors
    /// `ConsumedTooFew`, `ToolFailed` or `ToolTimeout`.
    pub fn console_consume(
        &self,
        bootstrap: &str,
        topic: &str,
        max_messages: usize,
        properties: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--from-beginning".to_owned(),
            "--max-messages".to_owned(),
            max_messages.to_string(),
            "--timeout-ms".to_owned(),
            timeout.as_millis().to_string(),
        ];
        for (key, value) in properties {
            args.push("--property".to_owned());
            args.push(format!("{key}={value}"));
        }
        let output = self
            .tool(class::CONSOLE_CONSUMER)
            .args(args)
            .timeout(timeout + DEFAULT_TOOL_TIMEOUT)
            .run()?
            .ok()?;
        let got = output.stdout.lines().count();
        if got < max_messages {
            return Err(HarnessError::ConsumedTooFew {
                topic: topic.to_owned(),
                expected: max_messages,
                got,
                stdout: output.stdout,
                stderr: output.stderr,
            });
        }
        Ok(output)
    }

    /// `kafka-producer-perf-test.sh --topic <topic> --num-records <n> --record-size <size>
    /// --throughput -1 --producer-props bootstrap.servers=<bootstrap> acks=all <props>…` and its
    /// final summary.
    ///
    /// # Errors
    /// `ToolFailed`, `ToolTimeout`, or `Invalid` if the summary line is missing.
    pub fn producer_perf(
        &self,
        bootstrap: &str,
        topic: &str,
        num_records: u64,
        record_size: usize,
        producer_props: &[(&str, &str)],
    ) -> Result<ProducerPerfSummary> {
        let mut args = vec![
            "--topic".to_owned(),
            topic.to_owned(),
            "--num-records".to_owned(),
            num_records.to_string(),
            "--record-size".to_owned(),
            record_size.to_string(),
            "--throughput".to_owned(),
            "-1".to_owned(),
            "--producer-props".to_owned(),
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".to_owned(),
        ];
        args.extend(producer_props.iter().map(|(k, v)| format!("{k}={v}")));
        let output = self
            .tool(class::PRODUCER_PERFORMANCE)
            .args(args)
            .run()?
            .ok()?;
        parse_producer_perf(output)
    }
}

fn parse_producer_perf(output: ToolOutput) -> Result<ProducerPerfSummary> {
    let invalid = |output: &ToolOutput| {
        HarnessError::Invalid(format!(
            "no ProducerPerformance summary line in:\n{}\n{}",
            output.stdout, output.stderr
        ))
    };
    let Some(line) = output
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains(" records sent, "))
    else {
        return Err(invalid(&output));
    };
    // "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, …"
    let numbers: Vec<f64> = line
        .split([' ', '(', ','])
        .filter_map(|token| token.parse::<f64>().ok())
        .collect();
    let [sent, per_sec, mb, avg, max, ..] = numbers[..] else {
        return Err(invalid(&output));
    };
    Ok(ProducerPerfSummary {
        records_sent: sent as u64,
        records_per_sec: per_sec,
        mb_per_sec: mb,
        avg_latency_ms: avg,
        max_latency_ms: max,
        output,
    })
}

// ---------------------------------------------------------------------------------------------
// Non-JVM clients: kcat, Python clients in a venv, librdkafka's own test runner.
// Installed by `scripts/clients/install.sh` and `scripts/clients/build-librdkafka-tests.sh`.
// ---------------------------------------------------------------------------------------------

/// Whether this run is CI (`CI=true` or `CI=1`, as CI systems set it). In CI a missing client tool
/// fails the test instead of skipping it: `.ci/run` installs every tool, so a missing one is an
/// install bug that a skip would hide.
pub fn running_in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// What to do about a client tool that is not installed: in CI an error (`Invalid`, with the
/// install command), locally `Ok(None)` after printing why the test is skipped, so a developer
/// without the tools can still run `cargo test`.
///
/// # Errors
/// `Invalid` when [`running_in_ci`].
pub fn missing_client_tool<T>(tool: &str, reason: &str, install: &str) -> Result<Option<T>> {
    let message = format!("{tool} is not available ({reason}); install it with `{install}`");
    if running_in_ci() {
        return Err(HarnessError::Invalid(format!(
            "{message} (CI=true, so this is a failure, not a skip)"
        )));
    }
    eprintln!("SKIPPED: {message}");
    Ok(None)
}

/// The folder holding the cached client installs: `$KRUST_CACHE` or `~/.cache/krust`.
pub fn client_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KRUST_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("krust")
}

fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The `kcat` (formerly `kafkacat`) binary.
#[derive(Clone, Debug)]
pub struct Kcat {
    path: PathBuf,
}

impl Kcat {
    /// `kcat` or `kafkacat` on `PATH` (or `$KCAT`).
    ///
    /// # Errors
    /// `Invalid` if it is missing and [`running_in_ci`]; `Ok(None)` (test skipped) otherwise.
    pub fn locate() -> Result<Option<Kcat>> {
        let found = std::env::var_os("KCAT")
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| find_on_path(&["kcat", "kafkacat"]));
        match found {
            Some(path) => Ok(Some(Kcat { path })),
            None => missing_client_tool(
                "kcat",
                "neither kcat nor kafkacat is on PATH",
                "scripts/clients/install.sh",
            ),
        }
    }

    /// The binary.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `kcat -b <bootstrap> <args>…` with `stdin`, killed after `timeout`. The exit status is
    /// not checked (call [`ToolOutput::ok`]).
    ///
    /// # Errors
    /// `Spawn` or `ToolTimeout`.
    pub fn run(
        &self,
        bootstrap: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<ToolOutput> {
        let mut all = vec!["-b", bootstrap];
        all.extend_from_slice(args);
        run_binary(&self.path, &all, stdin, timeout)
    }
}

/// The Python venv with `confluent-kafka` and `kafka-python` (`scripts/clients/install.sh`).
#[derive(Clone, Debug)]
pub struct PythonClients {
    python: PathBuf,
}

impl PythonClients {
    /// `$KRUST_VENV/bin/python` (default `~/.cache/krust/venv`), if both client packages import.
    ///
    /// # Errors
    /// `Invalid` if the venv or a package is missing and [`running_in_ci`]; `Ok(None)` otherwise.
    pub fn locate() -> Result<Option<PythonClients>> {
        let venv = std::env::var_os("KRUST_VENV")
            .map_or_else(|| client_cache_dir().join("venv"), PathBuf::from);
        let python = venv.join("bin").join("python");
        if !python.is_file() {
            return missing_client_tool(
                "the Python clients venv",
                &format!("{} does not exist", python.display()),
                "scripts/clients/install.sh",
            );
        }
        let probe = run_binary(
            &python,
            &["-c", "import confluent_kafka, kafka"],
            None,
            Duration::from_secs(60),
        )?;
        if !probe.success() {
            return missing_client_tool(
                "confluent-kafka / kafka-python",
                &format!("importing them failed: {}", probe.stderr.trim()),
                "scripts/clients/install.sh",
            );
        }
        Ok(Some(PythonClients { python }))
    }

    /// The venv's interpreter.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// Runs `script` (Python source) as `python -c <script> <args>…`, killed after `timeout`.
    /// Scripts take the bootstrap address and topic names as arguments (`sys.argv[1:]`) and
    /// exit non-zero with a message on stderr when a check fails. The exit status is not checked
    /// here (call [`ToolOutput::ok`]).
    ///
    /// # Errors
    /// `Spawn` or `ToolTimeout`.
    pub fn run_script(&self, script: &str, args: &[&str], timeout: Duration) -> Result<ToolOutput> {
        let mut all = vec!["-c", script];
        all.extend_from_slice(args);
        run_binary(&self.python, &all, None, timeout)
    }
}

/// librdkafka's own test suite (`tests/test-runner`), built from the librdkafka source in the
/// `rdkafka-sys` crate by `scripts/clients/build-librdkafka-tests.sh`.
#[derive(Clone, Debug)]
pub struct LibrdkafkaTests {
    tests_dir: PathBuf,
}

/// One test's outcome as the runner's summary table reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct LibrdkafkaTestResult {
    /// The test's name, e.g. `0001_multiobj`.
    pub name: String,
    /// `PASSED`, `FAILED`, `SKIPPED`, … as printed.
    pub status: String,
    /// Its duration as printed, in seconds.
    pub seconds: f64,
}

/// A whole `test-runner` run.
#[derive(Clone, Debug)]
pub struct LibrdkafkaRun {
    /// One entry per test in the summary table.
    pub results: Vec<LibrdkafkaTestResult>,
    /// Everything the runner printed.
    pub output: ToolOutput,
}

impl LibrdkafkaRun {
    /// What did not pass: rows that are neither `PASSED` nor `SKIPPED`, and requested tests
    /// with no `PASSED` row (a number like `0031` also names `0031_get_offsets_mock`, which
    /// `-L` filters out as `SKIPPED`, so a skipped sibling row alone is not a failure).
    pub fn not_passed(&self, requested: &[&str]) -> Vec<String> {
        let mut bad: Vec<String> = self
            .results
            .iter()
            .filter(|r| r.status != "PASSED" && r.status != "SKIPPED")
            .map(|r| format!("{} {}", r.name, r.status))
            .collect();
        for want in requested {
            let passed = self
                .results
                .iter()
                .any(|r| r.name.starts_with(want) && r.status == "PASSED");
            let reported = self.results.iter().any(|r| r.name.starts_with(want));
            if !passed && !reported {
                bad.push(format!("{want} did not run"));
            } else if !passed && !bad.iter().any(|b| b.starts_with(want)) {
                bad.push(format!("{want} was skipped"));
            }
        }
        bad
    }
}

impl LibrdkafkaTests {
    /// The newest `~/.cache/krust/librdkafka-*/tests` whose build completed (`.complete`), or
    /// `$KRUST_LIBRDKAFKA_TESTS`.
    ///
    /// # Errors
    /// `Invalid` if none is built and [`running_in_ci`]; `Ok(None)` otherwise.
    pub fn locate() -> Result<Option<LibrdkafkaTests>> {
        if let Some(dir) = std::env::var_os("KRUST_LIBRDKAFKA_TESTS") {
            return Ok(Some(LibrdkafkaTests {
                tests_dir: PathBuf::from(dir),
            }));
        }
        let cache = client_cache_dir();
        let mut built: Vec<PathBuf> = std::fs::read_dir(&cache)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("librdkafka-"))
                            && p.join(".complete").is_file()
                            && p.join("tests").join("test-runner").is_file()
                    })
                    .collect()
            })
            .unwrap_or_default();
        built.sort();
        match built.pop() {
            Some(home) => Ok(Some(LibrdkafkaTests {
                tests_dir: home.join("tests"),
            })),
            None => missing_client_tool(
                "librdkafka's test-runner",
                &format!("no completed build under {}", cache.display()),
                "scripts/clients/build-librdkafka-tests.sh",
            ),
        }
    }

    /// The built `tests` folder.
    pub fn tests_dir(&self) -> &Path {
        &self.tests_dir
    }

    /// `<librdkafka>/src:<librdkafka>/src-cpp`, where the built shared libraries are.
    fn library_path(&self) -> String {
        let home = self.tests_dir.parent().unwrap_or(&self.tests_dir);
        format!(
            "{}:{}",
            home.join("src").display(),
            home.join("src-cpp").display()
        )
    }

    /// Runs the named tests (4-digit numbers, e.g. `0001`) one after the other against
    /// `bootstrap`, in a scratch `work_dir` holding the `test.conf` written here (the runner
    /// writes its reports there too). Each test is run as its own `test-runner` process, so a
    /// test that crashes the runner does not hide the others' results; `per_test_timeout`
    /// bounds each (the runner's own per-test timeouts are shorter).
    ///
    /// `TEST_KAFKA_VERSION` is 3.9.0 so that the version-gated tests run as against Kafka 3.9;
    /// `-E -L -Q`: no socket-emulation tests, no local-only tests, quick mode.
    ///
    /// # Errors
    /// `Io` writing `test.conf`, `Spawn`.
    pub fn run(
        &self,
        bootstrap: &str,
        tests: &[&str],
        extra_conf: &[(&str, &str)],
        work_dir: &Path,
        per_test_timeout: Duration,
    ) -> Result<LibrdkafkaRun> {
        self.run_mode(
            bootstrap,
            tests,
            extra_conf,
            work_dir,
            per_test_timeout,
            true,
        )
    }

    /// [`LibrdkafkaTests::run`] without the runner's quick mode (`-Q`): every sub-test runs,
    /// e.g. 0055's latency measurements, which quick mode skips.
    ///
    /// # Errors
    /// As [`LibrdkafkaTests::run`].
    pub fn run_full(
        &self,
        bootstrap: &str,
        tests: &[&str],
        extra_conf: &[(&str, &str)],
        work_dir: &Path,
        per_test_timeout: Duration,
    ) -> Result<LibrdkafkaRun> {
        self.run_mode(
            bootstrap,
            tests,
            extra_conf,
            work_dir,
            per_test_timeout,
            false,
        )
    }

    fn run_mode(
        &self,
        bootstrap: &str,
        tests: &[&str],
        extra_conf: &[(&str, &str)],
        work_dir: &Path,
        per_test_timeout: Duration,
        quick: bool,
    ) -> Result<LibrdkafkaRun> {
        let conf = work_dir.join("test.conf");
        let mut text = format!("bootstrap.servers={bootstrap}\ntest.topic.random=true\n");
        for (key, value) in extra_conf {
            text.push_str(&format!("{key}={value}\n"));
        }
        std::fs::write(&conf, text)
            .map_err(|e| HarnessError::io(format!("writing {}", conf.display()), e))?;
        let kafka_path = java_helpers_kafka_path(work_dir)?;
        let runner = self.tests_dir.join("test-runner");
        let mut results = Vec::new();
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut last_status = None;
        for test in tests {
            // `env -C`: the runner finds its fixtures relative to the current folder; the
            // harness's `run_binary` has no cwd/env parameters, and `env` gives both.
            let mut args = vec![
                "-C".to_owned(),
                self.tests_dir.display().to_string(),
                // The runner's own CI mode would change timeouts; keep the local defaults.
                // (`env` options must come before the NAME=VALUE assignments.)
                "-u".to_owned(),
                "CI".to_owned(),
                format!("TESTS={test}"),
                format!("RDKAFKA_TEST_CONF={}", conf.display()),
                "TEST_KAFKA_VERSION=3.9.0".to_owned(),
                format!("KAFKA_PATH={}", kafka_path.display()),
                // The freshly built librdkafka, not the system's (Debian's is older): what
                // `run-test.sh` does, with absolute paths and ours first.
                format!("LD_LIBRARY_PATH={}", self.library_path()),
                runner.display().to_string(),
                // No socket-emulation tests, no local-only tests (they never reach a broker),
                // quick mode (less data, fewer iterations: a CI budget).
                "-E".to_owned(),
                "-L".to_owned(),
            ];
            if quick {
                args.push("-Q".to_owned());
            }
            let output = match run_binary("env", &args, None, per_test_timeout) {
                Ok(output) => output,
                Err(HarnessError::ToolTimeout {
                    stdout: out,
                    stderr: err,
                    ..
                }) => {
                    results.push(LibrdkafkaTestResult {
                        name: (*test).to_owned(),
                        status: format!("TIMEOUT after {per_test_timeout:?}"),
                        seconds: per_test_timeout.as_secs_f64(),
                    });
                    stdout.push_str(&out);
                    stderr.push_str(&err);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut parsed = parse_librdkafka_summary(&output.stdout, &output.stderr);
            if parsed.is_empty() {
                parsed.push(LibrdkafkaTestResult {
                    name: (*test).to_owned(),
                    status: format!(
                        "NO SUMMARY (exit {}): {}",
                        output.status,
                        output.stderr.lines().last().unwrap_or("")
                    ),
                    seconds: 0.0,
                });
            }
            results.extend(parsed);
            stdout.push_str(&output.stdout);
            stderr.push_str(&output.stderr);
            last_status = Some(output.status);
        }
        let output = ToolOutput {
            class: runner.display().to_string(),
            args: tests.iter().map(|t| (*t).to_owned()).collect(),
            status: last_status.unwrap_or_else(|| std::process::ExitStatus::from_raw(0)),
            stdout,
            stderr,
        };
        Ok(LibrdkafkaRun { results, output })
    }
}

/// The `KAFKA_PATH` the runner's Java helpers (`tests/java/run-class.sh`, e.g. 0098's
/// `TransactionProducerCli`) start through: `bin/kafka-run-class.sh` running `java` with
/// Kafka 3.9's jars ([`KafkaDist`]) after the helpers' own `CLASSPATH`, and `libs/` for their
/// Makefile. Written under `work_dir`.
fn java_helpers_kafka_path(work_dir: &Path) -> Result<PathBuf> {
    let dist = KafkaDist::locate()?;
    let root = work_dir.join("kafka-path");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin)
        .map_err(|e| HarnessError::io(format!("creating {}", bin.display()), e))?;
    let libs = root.join("libs");
    if !libs.exists() {
        std::os::unix::fs::symlink(dist.libs_dir(), &libs)
            .map_err(|e| HarnessError::io(format!("linking {}", libs.display()), e))?;
    }
    let log4j = dist.home().join("testkit").join("tools-log4j.properties");
    let script = bin.join("kafka-run-class.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec '{}' -Xmx512m -Dlog4j.configuration=file:'{}' -cp \"$CLASSPATH:{}/*\" \"$@\"\n",
            dist.java().display(),
            log4j.display(),
            dist.libs_dir().display()
        ),
    )
    .map_err(|e| HarnessError::io(format!("writing {}", script.display()), e))?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| HarnessError::io(format!("chmod {}", script.display()), e))?;
    Ok(root)
}

/// The runner's summary table: lines like
/// `| 0001_multiobj                            |     PASSED |     2.345s |` (possibly wrapped in
/// ANSI colours), on stdout or stderr.
pub fn parse_librdkafka_summary(stdout: &str, stderr: &str) -> Vec<LibrdkafkaTestResult> {
    let mut results = Vec::new();
    for line in stdout.lines().chain(stderr.lines()) {
        let clean = strip_ansi(line);
        let cells: Vec<&str> = clean
            .split('|')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        let [name, status, seconds, ..] = cells[..] else {
            continue;
        };
        let Some(seconds) = seconds
            .strip_suffix('s')
            .and_then(|s| s.parse::<f64>().ok())
        else {
            continue;
        };
        if name.len() > 4 && name.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
            results.push(LibrdkafkaTestResult {
                name: name.to_owned(),
                status: status.to_owned(),
                seconds,
            });
        }
    }
    results
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ … final byte in @..~
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_table_rows_are_parsed_with_and_without_colours() {
        let stdout = "\
TEST 20261129 | TEST                                     |     RESULT |  ELAPSED |\n\
| 0001_multiobj                            |     \u{1b}[32mPASSED\u{1b}[0m |     2.345s |\n\
| 0002_unkpart                             |     FAILED |    10.000s |\n";
        let results = parse_librdkafka_summary(stdout, "");
        assert_eq!(
            results,
            vec![
                LibrdkafkaTestResult {
                    name: "0001_multiobj".to_owned(),
                    status: "PASSED".to_owned(),
                    seconds: 2.345
                },
                LibrdkafkaTestResult {
                    name: "0002_unkpart".to_owned(),
                    status: "FAILED".to_owned(),
                    seconds: 10.0
                },
            ]
        );
    }
}

/// The broker a client test talks to: Apache Kafka 3.9 (the oracle, to validate a test and its
/// expectations) or `krust dev` (the system under test). Both are set up the way `krust dev`
/// promises: one combined node on 127.0.0.1, Kafka's defaults, `auto.create.topics.enable=true`.
/// Killed on drop.
#[derive(Debug)]
pub enum BrokerUnderTest {
    /// One combined Kafka 3.9 node ([`KafkaNode`]).
    Kafka(Box<KafkaNode>),
    /// Three combined Kafka 3.9 nodes ([`KafkaCluster`]).
    KafkaCluster(Box<KafkaCluster>),
    /// Three combined `krust server` nodes: Kafka's harness writes each `server.properties`
    /// (the same settings as [`BrokerUnderTest::kafka_cluster`]), `krust storage format`
    /// formats it, `krust server` runs it. The [`KafkaNode`]s are never started; they own the
    /// folders.
    KrustCluster(Vec<(KafkaNode, KrustProcess)>),
    /// `krust dev --data-dir <tmp> --port <port>`.
    KrustDev {
        /// The process.
        process: Box<KrustProcess>,
        /// Its Kafka listener port on 127.0.0.1.
        port: u16,
    },
}

/// Nodes of [`BrokerUnderTest::kafka_cluster`] and [`BrokerUnderTest::krust_cluster`].
pub const CLUSTER_SIZE: usize = 3;

/// Settings of both 3-node clusters: replicated by default (RF 3, `min.insync.replicas=2`, also
/// for `__consumer_offsets`) and Kafka's `auto.create.topics.enable=true` (the harness turns it
/// off otherwise).
pub const CLUSTER_PROPS: &[(&str, &str)] = &[
    ("default.replication.factor", "3"),
    ("min.insync.replicas", "2"),
    ("offsets.topic.replication.factor", "3"),
    ("auto.create.topics.enable", "true"),
];

/// How long `krust dev` may take to print its `ready` line.
pub const KRUST_DEV_READY_TIMEOUT: Duration = Duration::from_secs(60);

impl BrokerUnderTest {
    /// A started single combined Kafka 3.9 node with `auto.create.topics.enable=true` (Kafka's
    /// default, which the harness otherwise turns off) plus `props`.
    ///
    /// # Errors
    /// As [`KafkaNodeBuilder::start`](crate::KafkaNodeBuilder::start).
    pub fn kafka(dist: &KafkaDist, props: &[(&str, &str)]) -> Result<BrokerUnderTest> {
        let mut builder = KafkaNode::builder(dist).prop("auto.create.topics.enable", "true");
        for (key, value) in props {
            builder = builder.prop(*key, *value);
        }
        Ok(BrokerUnderTest::Kafka(Box::new(builder.start()?)))
    }

    /// `krust dev` from `binary` on a free port with a fresh data dir, once it has printed its
    /// `ready` line (issue 5: "prints a line with `ready` and the bootstrap address once clients
    /// can connect").
    ///
    /// # Errors
    /// `BinaryNotFound`, `Spawn`, `Exited` or `Timeout` (with the log's last lines).
    pub fn krust_dev(binary: impl Into<PathBuf>) -> Result<BrokerUnderTest> {
        let port = free_port()?;
        let mut process = KrustProcess::builder(binary)
            .name("krust-dev")
            .args([
                "dev",
                "--data-dir",
                "krust-data",
                "--port",
                &port.to_string(),
            ])
            .env("RUST_LOG", "info")
            .start()?;
        process.wait_for_line("ready", KRUST_DEV_READY_TIMEOUT)?;
        process.wait_for_port(port, KRUST_DEV_READY_TIMEOUT)?;
        Ok(BrokerUnderTest::KrustDev {
            process: Box::new(process),
            port,
        })
    }

    /// Three combined Kafka 3.9 nodes with [`CLUSTER_PROPS`] plus `props`.
    ///
    /// # Errors
    /// As [`KafkaClusterBuilder::start`](crate::KafkaClusterBuilder::start).
    pub fn kafka_cluster(dist: &KafkaDist, props: &[(&str, &str)]) -> Result<BrokerUnderTest> {
        let mut builder = KafkaCluster::builder(dist).combined(CLUSTER_SIZE);
        for (key, value) in CLUSTER_PROPS.iter().chain(props) {
            builder = builder.prop(*key, *value);
        }
        Ok(BrokerUnderTest::KafkaCluster(Box::new(builder.start()?)))
    }

    /// Three combined `krust server` nodes from `binary` with [`CLUSTER_PROPS`] plus `props`,
    /// once each has printed Kafka's `Kafka Server started` line (registered and unfenced).
    ///
    /// # Errors
    /// `BinaryNotFound`, `ToolFailed` (format), `Spawn`, `Exited` or `Timeout`.
    pub fn krust_cluster(
        dist: &KafkaDist,
        binary: impl Into<PathBuf>,
        props: &[(&str, &str)],
    ) -> Result<BrokerUnderTest> {
        let binary: PathBuf = binary.into();
        // The servers run in their own folders: a relative path would not resolve there.
        let binary = std::fs::canonicalize(&binary).map_err(|_| HarnessError::BinaryNotFound {
            path: binary.clone(),
        })?;
        let ports = crate::ports::free_ports(2 * CLUSTER_SIZE)?;
        let voters = (0..CLUSTER_SIZE)
            .map(|i| format!("{}@127.0.0.1:{}", i + 1, ports[CLUSTER_SIZE + i]))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = crate::random_kafka_uuid();
        let mut nodes = Vec::new();
        for i in 0..CLUSTER_SIZE {
            let mut builder = KafkaNode::builder(dist)
                .node_id(i as i32 + 1)
                .role(crate::KafkaRole::Combined)
                .cluster_id(cluster_id.clone())
                .broker_port(ports[i])
                .controller_port(ports[CLUSTER_SIZE + i])
                .quorum_voters(voters.clone());
            for (key, value) in CLUSTER_PROPS.iter().chain(props) {
                builder = builder.prop(*key, *value);
            }
            let node = builder.build_unformatted()?;
            let properties = node.properties_path().display().to_string();
            run_binary(
                &binary,
                &["storage", "format", "-t", &cluster_id, "-c", &properties],
                None,
                DEFAULT_TOOL_TIMEOUT,
            )?
            .ok()?;
            let process = KrustProcess::builder(&binary)
                .args(["server", &properties])
                .env("RUST_LOG", "info")
                .dir(node.dir().join("krust"))
                .name(format!("krust-{}", i + 1))
                .start()?;
            nodes.push((node, process));
        }
        for (_, process) in &mut nodes {
            process.wait_for_line("Kafka Server started", KRUST_DEV_READY_TIMEOUT)?;
        }
        Ok(BrokerUnderTest::KrustCluster(nodes))
    }

    /// SIGKILLs node `node_id` of a cluster (ids from 1), then starts it again on the same
    /// data and waits until it serves ([`BrokerUnderTest::kill_node`], then
    /// [`BrokerUnderTest::restart_node`]).
    ///
    /// # Errors
    /// As those two.
    pub fn kill_and_restart(&mut self, node_id: i32) -> Result<()> {
        self.kill_node(node_id)?;
        self.restart_node(node_id)
    }

    /// SIGKILLs node `node_id` of a cluster (ids from 1); it stays down until
    /// [`BrokerUnderTest::restart_node`].
    ///
    /// # Errors
    /// `Invalid` for a single node or an unknown id; as the node's kill otherwise.
    pub fn kill_node(&mut self, node_id: i32) -> Result<()> {
        match self {
            BrokerUnderTest::KafkaCluster(cluster) => cluster_node(cluster, node_id)?.kill(),
            BrokerUnderTest::KrustCluster(nodes) => krust_node(nodes, node_id)?.kill().map(|_| ()),
            _ => Err(HarnessError::Invalid(
                "kill_node needs a cluster".to_string(),
            )),
        }
    }

    /// Starts node `node_id` of a cluster again on the same data after
    /// [`BrokerUnderTest::kill_node`] and waits until it serves (krust: its `Kafka Server
    /// started` line of this run; Kafka: ready).
    ///
    /// # Errors
    /// `Invalid` for a single node or an unknown id; as the node's start otherwise.
    pub fn restart_node(&mut self, node_id: i32) -> Result<()> {
        match self {
            BrokerUnderTest::KafkaCluster(cluster) => cluster_node(cluster, node_id)?.start(),
            BrokerUnderTest::KrustCluster(nodes) => {
                let process = krust_node(nodes, node_id)?;
                let mark = process.log_mark();
                process.restart()?;
                process
                    .wait_for_line_since(mark, "Kafka Server started", KRUST_DEV_READY_TIMEOUT)
                    .map(|_| ())
            }
            _ => Err(HarnessError::Invalid(
                "restart_node needs a cluster".to_string(),
            )),
        }
    }

    /// How many brokers serve clients.
    pub fn broker_count(&self) -> usize {
        match self {
            BrokerUnderTest::Kafka(_) | BrokerUnderTest::KrustDev { .. } => 1,
            BrokerUnderTest::KafkaCluster(_) | BrokerUnderTest::KrustCluster(_) => CLUSTER_SIZE,
        }
    }

    /// Whether this is Apache Kafka (the oracle) rather than krust.
    pub fn is_kafka(&self) -> bool {
        matches!(
            self,
            BrokerUnderTest::Kafka(_) | BrokerUnderTest::KafkaCluster(_)
        )
    }

    /// `127.0.0.1:<port>[,…]` of the Kafka listener(s).
    pub fn bootstrap(&self) -> String {
        match self {
            BrokerUnderTest::Kafka(node) => node.bootstrap_servers(),
            BrokerUnderTest::KafkaCluster(cluster) => cluster.bootstrap_servers(),
            BrokerUnderTest::KrustCluster(nodes) => nodes
                .iter()
                .filter_map(|(node, _)| node.broker_port())
                .map(|port| format!("127.0.0.1:{port}"))
                .collect::<Vec<_>>()
                .join(","),
            BrokerUnderTest::KrustDev { port, .. } => format!("127.0.0.1:{port}"),
        }
    }

    /// `kafka`, `krust`, `kafka cluster` or `krust cluster`, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            BrokerUnderTest::Kafka(_) => "kafka",
            BrokerUnderTest::KrustDev { .. } => "krust",
            BrokerUnderTest::KafkaCluster(_) => "kafka cluster",
            BrokerUnderTest::KrustCluster(_) => "krust cluster",
        }
    }

    /// The last lines of the broker's log, to quote in a failed assertion.
    pub fn log_tail(&self, lines: usize) -> String {
        match self {
            BrokerUnderTest::Kafka(node) => crate::log_tail(&node.log_path(), lines),
            BrokerUnderTest::KrustDev { process, .. } => process.log_tail(lines),
            BrokerUnderTest::KafkaCluster(cluster) => cluster
                .nodes()
                .iter()
                .map(|n| {
                    format!(
                        "--- node {} ---\n{}",
                        n.node_id(),
                        crate::log_tail(&n.log_path(), lines)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
            BrokerUnderTest::KrustCluster(nodes) => nodes
                .iter()
                .map(|(n, p)| format!("--- krust {} ---\n{}", n.node_id(), p.log_tail(lines)))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

fn cluster_node(cluster: &mut KafkaCluster, node_id: i32) -> Result<&mut KafkaNode> {
    cluster
        .node_mut(node_id)
        .ok_or_else(|| HarnessError::Invalid(format!("no node {node_id} in the Kafka cluster")))
}

fn krust_node(nodes: &mut [(KafkaNode, KrustProcess)], node_id: i32) -> Result<&mut KrustProcess> {
    usize::try_from(node_id - 1)
        .ok()
        .and_then(|i| nodes.get_mut(i))
        .map(|(_, process)| process)
        .ok_or_else(|| HarnessError::Invalid(format!("no node {node_id} in the krust cluster")))
}
