//! The transaction coordinator (KIP-98, KIP-360, KIP-890 part 1) of Kafka 3.9, sans-IO: one
//! [`TxnCoordinatorShard`] per `__transaction_state` partition this broker leads. No sockets,
//! clock or files: requests and time come in, records to append, answers and marker jobs go
//! out. The broker's runtime (`krust-broker`'s `server/txn/`) loads and drives the shards.
//!
//! # Layout
//!
//! - [`shard`]: [`TxnCoordinatorShard`] — InitProducerId, AddPartitionsToTxn (and its v4
//!   `verify_only` check), AddOffsetsToTxn (as AddPartitions of the group's partition), EndTxn,
//!   the marker jobs, timeouts (timed-out transaction abort, `transactional.id.expiration.ms`),
//!   DescribeTransactions / ListTransactions, loading by `replay`.
//! - [`metadata`]: [`TxnMetadata`] and the [`TxnTransit`] of each state change (Kafka's
//!   `TransactionMetadata`), KIP-360 epoch bumps and producer id rotation.
//! - [`state`]: [`TxnState`], its stored ids, names and legal transitions.
//! - [`records`]: `TransactionLogKey` / `TransactionLogValue` in Kafka's bytes.
//! - [`config`]: [`TxnConfig`] (`transaction.*` defaults), [`partition_for_txn`].
//! - [`error`]: [`TxnError`] and its one mapping to Kafka error codes.
//!
//! # Limits
//!
//! - `lastProducerId`/`lastProducerEpoch` live in memory only, as in Kafka: a KIP-360 retry
//!   across a coordinator move is fenced.
//! - Only `TransactionLogValue` v0 is written (v1 needs `transaction.version` ≥ 1, not
//!   production-ready in Kafka 3.9); v0 and v1 are read.

pub mod config;
pub mod error;
pub mod metadata;
pub mod records;
pub mod shard;
pub mod state;

pub use config::{TxnConfig, java_string_hash, partition_for_txn};
pub use error::TxnError;
pub use metadata::{TxnMetadata, TxnTransit};
pub use records::{TxnLogValue, TxnRecordError};
pub use shard::{
    Action, AppendId, ListedTxn, MarkerJob, PartitionVerdict, Reply, RequestId,
    TxnCoordinatorShard, TxnDescription,
};
pub use state::TxnState;

/// A topic partition, ordered by topic then partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    #[must_use]
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}
