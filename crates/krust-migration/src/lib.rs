//! krust-migration: the KIP-866 ZooKeeper → KRaft migration, sans-IO.
//!
//! # Layout
//!
//! - [`state`]: Kafka's `MigrationDriverState` (9 states, legal transitions) and
//!   `ZkMigrationLeadershipState` (the `/migration` znode's content plus versions).
//! - [`driver`]: the driver — events in (leader change, published image/delta, ZooKeeper
//!   results, timer), actions out (fenced ZooKeeper multi-ops, record batches to append in a
//!   metadata transaction, RPCs to ZooKeeper-mode brokers).
//! - [`reader`]: ZooKeeper → records (the initial copy, in Kafka's order and batching).
//! - [`writer`]: KRaft image/delta → ZooKeeper operations (dual-write and full reconciliation).
//! - [`exec`]: runs the writer's batches through any ZooKeeper backend, each write fenced by
//!   `/controller_epoch` and `/migration`.
//! - [`kafka_seams`]: the driver's reader/writer seams implemented with [`reader`] and
//!   [`writer`] (single fenced operations from whole writes).
//! - [`propagator`]: UpdateMetadata / LeaderAndIsr / StopReplica for ZooKeeper-mode brokers.
//! - [`tools`]: the operator tools (`krust migration preflight / status / verify /
//!   rollback-plan`) as pure functions — krust's addition, Kafka has none.

pub mod driver;
pub mod exec;
pub mod kafka_seams;
pub mod propagator;
pub mod reader;
pub mod state;
pub mod tools;
pub mod writer;
