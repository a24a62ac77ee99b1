//! The broker runtime on tokio: the pieces below wired into one [`Broker`] that the `krust`
//! binary starts for `process.roles` containing `broker`.
//!
//! Flow: the binary runs the Raft observer and a `MetadataBatchLoader`; every
//! [`Publication`] goes to [`Broker::publish`] (the metadata publisher: partition logs
//! created/deleted, leader/follower transitions, replication and group coordinator notified).
//! Clients talk to [`apis::ClientApiHandler`] (a `krust_net::Handler`). Everything that needs
//! the active controller goes through [`controller_channel::ControllerChannel`].
//!
//! # Layout
//! - [`controller_channel`]: the trait the binary implements to reach the active controller.
//! - [`replica_manager`]: [`replica_manager::ReplicaManager`] — hosted partitions, shared by
//!   the API handlers, replication and the group coordinator; appends and wake-ups.
//! - [`publisher`]: applies metadata publications to the replica manager.
//! - [`purgatory`]: delayed produce (acks=all) and delayed fetch (long poll).
//! - [`apis`]: the client listener's request handler, one module per API family.
//! - [`lifecycle`]: broker registration, heartbeats, controlled shutdown.
//! - [`forwarding`]: admin requests forwarded to the controller in an `Envelope`.
//! - [`replication`]: follower fetchers and ISR shrink/expand via AlterPartition.
//! - [`groups`]: the group coordinator runtime over the sans-IO shards of [`crate::group`].

pub mod apis;
pub mod controller_channel;
pub mod forwarding;
pub mod groups;
pub mod lifecycle;
pub mod publisher;
pub mod purgatory;
pub mod replica_manager;
pub mod replication;

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A listener as advertised to clients and other brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Listener name (`PLAINTEXT`, `BROKER`, …).
    pub name: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port (the bound port when `listeners` said 0).
    pub port: u16,
    /// Kafka's security protocol id (0 = PLAINTEXT).
    pub security_protocol: i16,
}

/// What a broker is told at start-up (from `server.properties` or `krust dev`).
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id`.
    pub node_id: i32,
    /// From `meta.properties`.
    pub cluster_id: String,
    /// `log.dirs` (formatted).
    pub log_dirs: Vec<PathBuf>,
    /// Every key of `server.properties` (Kafka's names), for defaults and DescribeConfigs.
    pub properties: BTreeMap<String, String>,
    /// Advertised listeners, client-facing first.
    pub advertised_listeners: Vec<Endpoint>,
    /// `inter.broker.listener.name`: the listener followers fetch from.
    pub inter_broker_listener_name: String,
    /// `broker.rack`.
    pub rack: Option<String>,
}
