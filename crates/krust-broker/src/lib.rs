//! krust-broker: the broker — partition data path (sans-IO) and the runtime around it.
//!
//! The partition-level pieces are deterministic and take time explicitly (`now_ms`); their
//! handlers never block: where Kafka would park a request (acks=all waiting for the high
//! watermark, a fetch below `min_bytes`), they return what the request waits for. The
//! [`server`] module is the tokio runtime that drives them: the metadata publisher, the
//! purgatory that parks those requests, and the client API handler on a `krust_net` listener.
//!
//! # Limits
//!
//! - Transactions, partition side: markers (WriteTxnMarkers), the last stable offset, the
//!   `.txnindex` and read-committed fetches, KIP-890 part 1 verification of transactional
//!   produce, the log cleaner's transaction rules (in `krust_log::cleaner`). Not yet: the
//!   lowest-sequence check of a verification guard.
//! - Produce below v3 and Fetch below v4 are not served (they need message-format
//!   down-conversion).
//!
//! # Layout
//!
//! - [`producer_state`]: idempotent producer state of a partition (last 5 batches per
//!   producer, sequence/epoch checks, `<offset>.snapshot` files in Kafka's format, rebuild
//!   from snapshot + log, expiry), open and completed transactions (COMMIT/ABORT markers with
//!   their producer and coordinator epoch checks, the first unstable offset, the aborted
//!   transactions met by a replay for re-indexing).
//! - [`partition`]: [`Partition`] — a `krust_log::Log` with leader epoch, high watermark, the
//!   leader's view of follower fetch state (ISR candidates), leader append with Kafka's
//!   validation, reads for consumers and followers, ListOffsets, OffsetForLeaderEpoch,
//!   DeleteRecords, follower divergence truncation, config updates; transaction markers as
//!   leader, the last stable offset, aborted transactions in the log's `.txnindex` (and of a
//!   read-committed read), KIP-890 verification guards.
//! - [`replicas`]: [`PartitionAccess`] (how handlers reach partitions) and [`ReplicaSet`] —
//!   hosted partitions plus the topics the metadata knows (NOT_LEADER_OR_FOLLOWER vs
//!   UNKNOWN_TOPIC_OR_PARTITION, topic ids), the sans-IO implementation.
//! - [`produce`], [`fetch`], [`list_offsets`], [`offset_for_leader_epoch`]: request handlers
//!   as functions over a [`PartitionAccess`], `kafka_protocol` messages in and out; produce
//!   and fetch return what they wait for instead of blocking.
//! - [`topic_config`]: topic configs resolved as Kafka does (topic override, dynamic broker,
//!   dynamic default, `server.properties` synonym, default) into `LogConfig` and
//!   `PartitionConfig`, with sources and synonyms for DescribeConfigs.
//! - [`group`]: the classic group coordinator, a sans-IO shard per `__consumer_offsets`
//!   partition (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets, records, loading).
//! - [`server`]: the runtime — `Broker` (log dir locks, checkpoints, retention task,
//!   shutdown), `ReplicaManager`, the metadata publisher, the purgatory, the client APIs, and
//!   the plug-ins (replication, groups, transactions, forwarding, lifecycle).
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
pub use replicas::{PartitionAccess, ReplicaSet, TopicMetadata};
