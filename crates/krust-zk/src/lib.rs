//! krust-zk: ZooKeeper as Apache Kafka 3.9 uses it — a client wired to tokio and Kafka's znode
//! model. Nothing ZooKeeper-specific leaks out of this crate's API: callers see [`ops::ZkOp`]s,
//! [`ops::Stat`]s, [`ops::ZkErrorCode`]s and the typed znode contents of [`model`].
//!
//! # Layout
//!
//! - [`ops`]: the operations (create, setData, delete, check, multi) and their results and
//!   error codes, as plain data (no IO), so a sans-IO driver can emit and consume them.
//! - [`tree`]: [`tree::ZkTree`], an in-memory ZooKeeper data tree with ZooKeeper's semantics
//!   (versions, atomic multi-ops, sequential and ephemeral nodes): the fake ZooKeeper of
//!   deterministic tests, and the snapshot of a real ensemble's subtrees that the migration
//!   reads.
//! - [`backend`]: [`backend::ZkBackend`], what the migration needs from an ensemble (get,
//!   exists, children, one op, multi-op), implemented by the real client and by
//!   [`backend::MemZk`] (a shared [`tree::ZkTree`] with injectable outages);
//!   [`backend::read_tree`] reads subtrees through any backend.
//! - [`model`]: Kafka's znodes — every path and JSON version of facts §6.9, URL-sanitized
//!   names, `<default>` entities, config-change and ACL-change notifications, encrypted password
//!   configs.
//! - [`client`]: the async client over a real ensemble (sessions, multi-ops, versions,
//!   watches), and reading a set of subtrees into a [`tree::ZkTree`].

pub mod backend;
pub mod client;
pub mod model;
pub mod ops;
pub mod tree;
