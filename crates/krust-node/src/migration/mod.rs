//! The controller node's side of the KIP-866 migration that does IO: the publisher that feeds
//! the driver ([`publisher`]), the task that runs the sans-IO driver against ZooKeeper, the
//! active controller and the brokers ([`runtime`]), the channels to ZooKeeper-mode brokers
//! ([`zk_brokers`]), and Kafka's migration metrics ([`metrics`]).

pub mod metrics;
pub mod publisher;
pub mod runtime;
pub mod zk_brokers;
