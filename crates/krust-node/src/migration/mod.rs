//! The controller node's side of the KIP-866 migration that does IO: the publisher that feeds
//! the driver ([`publisher`]) and the channels to ZooKeeper-mode brokers ([`zk_brokers`]).

pub mod publisher;
pub mod zk_brokers;
