//! Kafka 3.9 server JVMs started the way `bin/kafka-server-start.sh` and
//! `bin/zookeeper-server-start.sh` start them (through `bin/kafka-run-class.sh`), not with the
//! test harness's light flags (serial GC, C1 only, 512 MiB): a benchmark's peer must run as an
//! operator runs it.

use std::ffi::OsString;
use std::path::Path;

use krust_testkit::{KafkaDist, ManagedProcess, ProcessSpec};

/// `KAFKA_JVM_PERFORMANCE_OPTS` of Kafka 3.9's `kafka-run-class.sh` (C2 stays on: no
/// `-XX:TieredStopAtLevel`).
pub const KAFKA_JVM_PERFORMANCE_OPTS: &[&str] = &[
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
];
/// `KAFKA_HEAP_OPTS` of `kafka-server-start.sh`.
pub const KAFKA_SERVER_HEAP_OPTS: &[&str] = &["-Xmx1G", "-Xms1G"];
/// `KAFKA_HEAP_OPTS` of `zookeeper-server-start.sh`.
pub const ZOOKEEPER_SERVER_HEAP_OPTS: &[&str] = &["-Xmx512M", "-Xms512M"];
/// Kafka's main class (`kafka-server-start.sh`).
pub const KAFKA_MAIN: &str = "kafka.Kafka";

/// The `java` arguments of a server: heap, performance options, the harness's server log4j
/// config (INFO to stdout), classpath, main class.
#[must_use]
pub fn server_jvm_args(dist: &KafkaDist, heap: &[&str], main_class: &str) -> Vec<OsString> {
    let mut args: Vec<OsString> = heap.iter().map(OsString::from).collect();
    args.extend(KAFKA_JVM_PERFORMANCE_OPTS.iter().map(OsString::from));
    // Written by `KafkaDist::locate` (the same file the harness's servers use).
    let log4j = dist.home().join("testkit").join("server-log4j.properties");
    args.push(format!("-Dlog4j.configuration=file:{}", log4j.display()).into());
    args.push("-cp".into());
    args.push(dist.classpath().into());
    args.push(main_class.into());
    args
}

/// The flags [`server_jvm_args`] passes besides the classpath, for printing.
#[must_use]
pub fn server_jvm_flags(heap: &[&str]) -> String {
    heap.iter()
        .chain(KAFKA_JVM_PERFORMANCE_OPTS)
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts `kafka.Kafka <properties>` with `kafka-server-start.sh`'s settings, output to `log`.
/// SIGKILLed when the returned process is dropped.
///
/// # Errors
/// The harness's error if `java` cannot start.
pub fn start_kafka_server(
    dist: &KafkaDist,
    name: &str,
    properties: &Path,
    log: &Path,
) -> krust_testkit::Result<ManagedProcess> {
    let spec = ProcessSpec::new(name, dist.java(), log)
        .args(server_jvm_args(dist, KAFKA_SERVER_HEAP_OPTS, KAFKA_MAIN))
        .arg(properties);
    ManagedProcess::start(spec)
}
