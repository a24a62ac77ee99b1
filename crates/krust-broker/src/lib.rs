//! krust-broker: the broker's data path, below the cluster wiring.
//!
//! Everything here is deterministic and takes time explicitly (`now_ms`): the metadata
//! publisher, the network server and the delayed-operation purgatory come later and drive
//! these pieces. Handlers never block: where Kafka would park a request (acks=all waiting for
//! the high watermark, a fetch below `min_bytes`), they return what the request waits for.
//!
//! # Limits (for the wiring that comes next)
//!
//! - ISR eligibility (fenced brokers, controlled shutdown, broker epochs) and pending
//!   AlterPartition state ("maximal ISR") are not modelled: the ISR is what the metadata says.
//! - Transactions: open transactions bound the last stable offset, but there is no
//!   transaction index, no aborted-transaction list in fetches and no coordinator verification.
//! - Fetch sessions (KIP-227) are not kept: full fetches only.
//! - Error responses carry no `current_leader`/`node_endpoints` hints yet.
//!
//! # Layout
//!
//! - [`producer_state`]: idempotent producer state of a partition (last 5 batches per
//!   producer, sequence/epoch checks, `<offset>.snapshot` files in Kafka's format, rebuild
//!   from snapshot + log, expiry).
//! - [`partition`]: [`Partition`] — a `krust_log::Log` with leader epoch, high watermark, the
//!   leader's view of follower fetch state (ISR candidates), leader append with Kafka's
//!   validation, reads for consumers and followers, ListOffsets, OffsetForLeaderEpoch and
//!   follower divergence truncation.
//! - [`replicas`]: [`ReplicaSet`] — hosted partitions plus the topics the metadata knows
//!   (NOT_LEADER_OR_FOLLOWER vs UNKNOWN_TOPIC_OR_PARTITION, topic ids).
//! - [`produce`], [`fetch`], [`list_offsets`], [`offset_for_leader_epoch`]: request handlers
//!   as functions over a [`ReplicaSet`], `kafka_protocol` messages in and out; produce and
//!   fetch return what they wait for instead of blocking.
//! - [`group`]: the classic group coordinator, a sans-IO shard per `__consumer_offsets`
//!   partition (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets, records, loading).
//! - [`error`]: [`PartitionError`] and its one mapping to Kafka error codes.
pub mod error;
pub mod fetch;
pub mod group;
pub mod list_offsets;
pub mod offset_for_leader_epoch;
pub mod partition;
pub mod produce;
pub mod producer_state;
pub mod replicas;
pub mod server;
pub mod topic_config;

pub use error::PartitionError;
pub use partition::Partition;
pub use producer_state::ProducerStateManager;
pub use replicas::{ReplicaSet, TopicMetadata};
