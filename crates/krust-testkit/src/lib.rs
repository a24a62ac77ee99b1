//! krust-testkit: the test harness that runs real Apache Kafka 3.9 and krust processes on
//! 127.0.0.1, so krust's tests can check byte-for-byte compatibility against the real thing.
//!
//! **Test-only.** Take it as a `[dev-dependencies]` entry (`krust-testkit.workspace = true`);
//! production code never links it, and it depends on no other krust crate.
//!
//! Guarantees every helper keeps:
//! * every wait has a timeout and fails with a typed [`HarnessError`] that quotes the last lines
//!   of the process's log (also printed to stderr, which `cargo test` shows for failed tests);
//! * every process is SIGKILLed when its handle is dropped, including while a failed test
//!   unwinds; temp dirs are removed after that (`KRUST_TESTKIT_KEEP=1` keeps them);
//! * stdout/stderr of long-running processes go to a log file in the test's temp dir;
//! * only 127.0.0.1 and ports from [`free_port`]/[`free_ports`] are used, or addresses of a
//!   [`NetLab`] the test created itself;
//! * JVMs get `-Xmx512m`, serial GC and C1 only, to share a 2-core machine;
//! * if the test process itself is SIGKILLed (so no `Drop` runs), a tiny per-child `sh`
//!   watchdog kills the child within about a second.
//!
//! # Layout
//!
//! - [`KafkaDist`] (`dist.rs`): the cached Kafka 3.9.1 jars (`scripts/fetch-kafka.sh`), the
//!   `java` binary, and one-shot tool runs ([`KafkaDist::run_tool`], [`KafkaDist::tool`]); the
//!   tool main classes are in [`class`]. [`run_binary`] runs any program the same way.
//! - [`KafkaNode`], [`KafkaCluster`] (`kafka.rs`): KRaft nodes (broker, controller or combined;
//!   static `controller.quorum.voters` or a KIP-853 [`KafkaNodeBuilder::standalone`] quorum):
//!   `server.properties`, `StorageTool format` (or [`KafkaNodeBuilder::build_unformatted`] for
//!   another formatter), start, readiness (`Kafka Server started` + ports), `kill` (SIGKILL),
//!   `terminate` (SIGTERM), `restart`; [`KafkaNode::meta_properties`], [`read_properties`].
//! - [`ZooKeeperServer`] (`zookeeper.rs`): a standalone ZooKeeper 3.8 (Kafka's own jar) for
//!   [`KafkaRole::ZkBroker`] nodes and KIP-866 migration setups ([`KafkaNodeBuilder::migration`],
//!   [`KafkaNode::enable_migration`]; `tests/zk_migration.rs` stages Kafka's own migration).
//! - [`KafkaDist::create_topic`], [`KafkaDist::console_produce`], [`KafkaDist::console_consume`],
//!   [`KafkaDist::producer_perf`] (`clients.rs`): Kafka's client tools against any bootstrap
//!   address — a Kafka node or a krust broker; [`Kcat`], [`PythonClients`], [`LibrdkafkaTests`]
//!   (real non-JVM clients from `scripts/clients/`: skipped with a reason locally, a failure in
//!   CI) and [`BrokerUnderTest`] (a Kafka node, `krust dev`, or 3-node Kafka/krust clusters).
//! - [`KafkaDist::start_acked_producer`] (`acked_producer.rs`): an idempotent `acks=all` Kafka
//!   producer writing numbered records in the background and reporting each acknowledged one
//!   ([`AckedProducer`]), for no-loss checks while brokers crash; [`KafkaDist::read_replica_logs`]
//!   and [`check_acked_records`] (`replica_logs.rs`) check them against each replica's log files.
//! - [`KafkaDist::start_group_consumer`] (`group_consumer.rs`): a Kafka consumer in a group
//!   that consumes and commits in the background and reports what it consumed and committed
//!   ([`GroupConsumer`]), for "the group never reprocesses a committed offset" checks.
//! - [`NetLab`] (`netns.rs`): nodes in network namespaces of their own joined by a bridge, links
//!   cut and healed with blackhole routes, a node's link taken down; removed on drop (needs root;
//!   [`NetLab::unavailable`] says why not). Used by `crates/krust/tests/chaos.rs`.
//! - [`KrustProcess`] (`krust.rs`): a `krust` binary (or any other) under supervision.
//! - [`ManagedProcess`] (`process.rs`): the shared building block — log file, log-line and port
//!   waits, signals, kill on drop.
//! - [`free_port`], [`free_ports`] (`ports.rs`): loopback ports, never handed out twice per process.
//! - [`parse_dump_log`], [`KafkaDist::dump_log_segments`] (`dump_log.rs`): Kafka's
//!   `DumpLogSegments` output as data, to assert on Kafka's reading of files krust wrote.
//! - [`HarnessError`] (`error.rs`).
//!
//! # Examples
//!
//! A Kafka 3.9 node, a topic with small segments, records produced by Kafka's console producer,
//! then a clean stop so the partition folder can be read by krust:
//!
//! ```no_run
//! use std::time::Duration;
//! use krust_testkit::{KafkaDist, KafkaNode};
//!
//! # fn main() -> Result<(), krust_testkit::HarnessError> {
//! let dist = KafkaDist::locate()?; // fetches Kafka on first use if it is not cached
//! let mut node = KafkaNode::builder(&dist).segment_bytes(1024).start()?;
//! node.create_topic("events", 1, &[("segment.bytes", "1024")])?;
//! node.console_produce("events", "k1\tv1\nk2\tv2\n", &[("parse.key", "true")], &[])?;
//! node.terminate(Duration::from_secs(60))?; // SIGTERM: segments closed, indexes trimmed
//! let partition_dir = node.partition_dir("events", 0); // <log dir>/events-0
//! # let _ = partition_dir;
//! # Ok(())
//! # }
//! ```
//!
//! ## For `krust storage` (crate `krust`): checking `format` and `info` against Kafka
//!
//! Kafka writes a node's `server.properties` without formatting; `krust storage format` formats
//! it; Kafka's own `StorageTool info` must accept the result and Kafka must start on it. The
//! reverse direction (Kafka formats, krust reads) uses [`KafkaNodeBuilder::build`], which runs
//! Kafka's `StorageTool format`.
//!
//! ```no_run
//! use std::time::Duration;
//! use krust_testkit::{KafkaDist, KafkaNode, class, run_binary};
//!
//! # fn main() -> Result<(), krust_testkit::HarnessError> {
//! # let krust_bin = "target/debug/krust"; // in the krust crate: env!("CARGO_BIN_EXE_krust")
//! let dist = KafkaDist::locate()?;
//! let mut node = KafkaNode::builder(&dist).build_unformatted()?;
//! let props = node.properties_path().display().to_string();
//!
//! // krust formats the storage …
//! let out = run_binary(krust_bin, &["storage", "format", "-t", node.cluster_id(), "-c", &props], None,
//!                      Duration::from_secs(30))?
//!     .ok()?; // ToolFailed with both streams if the exit code is not 0
//! assert!(out.stdout.contains("Formatting metadata directory"));
//!
//! // … Kafka's `kafka-storage.sh info` agrees with what krust wrote …
//! let info = dist.run_tool(class::STORAGE_TOOL, &["info", "-c", &props], Duration::from_secs(60))?.ok()?;
//! assert!(info.stdout.contains(&format!("cluster.id={}", node.cluster_id())));
//!
//! // … and Kafka 3.9 starts on it.
//! node.start()?;
//!
//! // Reverse: Kafka formats (StorageTool format), krust reads.
//! let other = KafkaNode::builder(&dist).build()?;
//! let info = run_binary(krust_bin, &["storage", "info", "-c", &other.properties_path().display().to_string()],
//!                       None, Duration::from_secs(30))?;
//! assert!(info.success(), "{}", info.stderr);
//! # Ok(())
//! # }
//! ```
//!
//! ## A long-running `krust` process
//!
//! ```no_run
//! use std::time::Duration;
//! use krust_testkit::{KrustProcess, free_port, krust_binary};
//!
//! # fn main() -> Result<(), krust_testkit::HarnessError> {
//! let port = free_port()?;
//! let mut krust = KrustProcess::builder(krust_binary()?) // or env!("CARGO_BIN_EXE_krust")
//!     .args(["dev", "--port", &port.to_string()])
//!     .env("RUST_LOG", "info")
//!     .start()?;
//! krust.wait_for_port(port, Duration::from_secs(30))?;
//! krust.wait_for_line("started", Duration::from_secs(30))?;
//! krust.kill()?; // SIGKILL, a crash; `terminate(timeout)` sends SIGTERM
//! krust.restart()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Kafka's own reading of a krust-written log
//!
//! ```no_run
//! use std::path::Path;
//! use std::time::Duration;
//! use krust_testkit::KafkaDist;
//!
//! # fn main() -> Result<(), krust_testkit::HarnessError> {
//! let dist = KafkaDist::locate()?;
//! let segment = Path::new("/tmp/t-0/00000000000000000000.log");
//! let dump = dist.dump_log_segments(&[segment], &["--deep-iteration", "--print-data-log"],
//!                                   Duration::from_secs(60))?;
//! for batch in dump.batches() {
//!     assert!(batch.is_valid, "Kafka rejects the CRC of batch {}", batch.base_offset);
//! }
//! assert!(dump.problems.is_empty(), "{:?}", dump.problems);
//! # Ok(())
//! # }
//! ```
//!
//! # Environment
//!
//! * `KRUST_KAFKA_HOME`: where Kafka's jars are (`libs/`); default `~/.cache/krust/kafka-3.9.1`.
//! * `JAVA_HOME`: which `java`; default `java` on `PATH`.
//! * `KRUST_BIN`: the `krust` binary for [`krust_binary`]; default `<target>/debug/krust`.
//! * `KRUST_TESTKIT_KEEP=1`: keep Kafka nodes' temp dirs (data and `kafka.log`) for a post-mortem.

mod acked_producer;
mod clients;
mod dist;
mod dump_log;
mod error;
mod group_consumer;
mod kafka;
mod krust;
mod netns;
mod ports;
mod process;
mod replica_logs;
mod tls;
mod zookeeper;

pub use acked_producer::{
    AckedProducer, AckedRecord, PartitionState, ProducerReport, parse_partition_line, parse_report,
};
pub use clients::{
    BrokerUnderTest, CLUSTER_PROPS, CLUSTER_SIZE, KRUST_DEV_READY_TIMEOUT, Kcat, LibrdkafkaRun,
    LibrdkafkaTestResult, LibrdkafkaTests, ProducerPerfSummary, PythonClients, client_cache_dir,
    missing_client_tool, parse_librdkafka_summary, running_in_ci,
};
pub use dist::{
    DEFAULT_TOOL_TIMEOUT, JVM_MAX_HEAP, KAFKA_VERSION, KafkaDist, ToolCommand, ToolOutput, class,
    random_kafka_uuid, run_binary, workspace_root,
};
pub use dump_log::{
    DumpLog, DumpParseError, DumpedBatch, DumpedFile, DumpedRecord, parse_dump_log,
};
pub use error::{HarnessError, Result};
pub use group_consumer::{
    ConsumedValues, GroupConsumer, GroupConsumerReport, parse_group_consumer_report,
};
pub use kafka::{
    BROKER_LISTENER, CONTROLLER_LISTENER, DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT,
    KAFKA_STARTED_LINE, KafkaCluster, KafkaClusterBuilder, KafkaNode, KafkaNodeBuilder, KafkaRole,
    MAX_PORT_CONFLICT_RETRIES, ZK_BROKER_STARTED_LINE, read_properties,
};
pub use krust::{KrustProcess, KrustProcessBuilder, krust_binary};
pub use netns::{LabNode, NetLab};
pub use ports::{free_port, free_ports, port_accepts, wait_for_port};
pub use process::{LOG_TAIL_LINES, LogMark, ManagedProcess, ProcessSpec, log_tail};
pub use replica_logs::{
    AckedTally, LogRecord, ReplicaLog, check_acked_records, tally_acked_records,
};
pub use tls::{TEST_CLIENT_DN, TEST_STORE_PASSWORD, TestPki};
pub use zookeeper::{DEFAULT_ZK_START_TIMEOUT, ZOOKEEPER_CLI, ZOOKEEPER_MAIN, ZooKeeperServer};
