//! krust-node: the KRaft node runtime as a library (Kafka's `SharedServer`, `ControllerServer`
//! and `BrokerServer`). The `krust` binary parses the configuration
//! and wires these pieces per `process.roles`; everything that runs lives here or in the
//! crates below.
//!
//! One metadata loader per node, whatever its roles ([`loader::MetadataLoaderTask`] over the
//! sans-IO `krust_metadata::image::MetadataLoader`), feeds the publishers registered when the
//! node is built: the controller server's ([`controller::ControllerServer`]: the features
//! publisher, next the ZooKeeper migration driver) and the broker's
//! (`krust_broker::server::Broker::metadata_publishers`: dynamic configs, replica manager,
//! group coordinator).
//!
//! # Layout
//! - [`broker`]: the broker server — the `krust-broker` runtime with every part, its
//!   lifecycle, client listeners and metrics.
//! - [`loader`]: the loader task (Raft events in, publishers called once caught up), its
//!   stats, fault policy and broker-side snapshot writer.
//! - [`controller`]: the controller server — the quorum controller task, the controller
//!   listener ([`controller::listener`]), the features publisher
//!   ([`controller::features`]).
//! - [`quorum_channel`]: the broker's `ControllerChannel` to the active controller.
//! - [`snapshot_trigger`]: the `metadata.log.max.*` snapshot triggers, shared by the
//!   controller task and the loader.

pub mod broker;
pub mod controller;
pub mod loader;
pub mod migration;
pub mod quorum_channel;
pub mod snapshot_trigger;
