//! The `krust` command's library half: what the binary wires together, kept testable.
//!
//! # Layout
//!
//! - [`config`]: `server.properties` parsing and typed access (Kafka 3.9 names, defaults and
//!   `KafkaConfig` validation messages).
//! - [`server`]: `krust server <server.properties>` (controller, broker or combined roles).
//! - [`dev`]: `krust dev [--data-dir DIR] [--port N]` (a one-node combined cluster, no config).
//! - [`metadata_quorum`]: `krust metadata-quorum describe --status | --replication`.
//! - [`dump_log`]: `krust dump-log --cluster-metadata-decoder --files …` (`kafka-dump-log.sh`).
//! - [`metadata_shell`]: `krust metadata-shell --snapshot <file> | --directory <dir> [command]`.
//! - [`storage`]: `krust storage random-uuid | format | info` (Kafka's `kafka-storage.sh`).
//! - [`migration`]: `krust migration preflight | status | verify | rollback-plan` (the
//!   ZooKeeper → KRaft migration's operator tools; krust's addition).

pub mod config;
pub mod dev;
pub mod dump_log;
pub mod metadata_quorum;
pub mod metadata_shell;
pub mod migration;
pub mod server;
pub mod storage;
