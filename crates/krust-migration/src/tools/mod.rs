//! The operator tools of the migration, as pure functions: `krust migration preflight`,
//! `status`, `verify` and `rollback-plan` (the `krust` binary does the IO: files, ZooKeeper,
//! the controller quorum; these functions get what it read as typed values).
//!
//! **krust goes beyond Kafka here**: Kafka 3.9 has no tool for any of this. An operator reads
//! `docs/ops.html`, greps logs for "Completed migration of metadata from ZooKeeper to KRaft",
//! watches JMX (`ZkMigrationState`, `ZkWriteBehindLag`) and runs `zookeeper-shell.sh` by hand.
//! These tools check and report the same facts (facts §6) from ZooKeeper and the quorum itself.
//!
//! # Layout
//!
//! - [`zk_view`]: [`zk_view::ClusterZnodes`], the cluster-level znodes the tools read
//!   (`/cluster/id`, `/brokers/ids`, `/controller`, `/migration`, `/feature`, pending
//!   reassignments and deletions, the brokers of topic assignments), decoded from a
//!   [`krust_zk::tree::ZkTree`]; a znode that does not decode is kept as an error, never a panic.
//! - [`preflight`]: every documented precondition (facts §6.1, Kafka's `KafkaConfig`
//!   `validateValues` messages), checked against the controller's and brokers' configs
//!   ([`preflight::ControllerFacts`], [`preflight::BrokerFacts`]) and ZooKeeper; one
//!   [`preflight::Check`] line each: `OK|WARN|FAIL <check>: <found>[ — fix: …]`.
//! - [`status`]: the migration phase and why it waits, from the quorum's image, `/migration`
//!   and ZooKeeper's brokers ([`status::derive_status`]); [`status::CopyCounter`] counts the
//!   records of the initial copy while the log is replayed.
//! - [`verify`]: ZooKeeper replayed into an image with the migration's reader
//!   ([`verify::zk_image`]) and diffed field by field with the quorum's image
//!   ([`verify::diff_images`]).
//! - [`rollback`]: the steps of the documented rollback (facts §6.14) for this cluster and its
//!   current phase ([`rollback::rollback_plan`]).

pub mod preflight;
pub mod rollback;
pub mod status;
pub mod verify;
pub mod zk_view;
