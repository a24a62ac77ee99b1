//! Hosted partitions, shared by the API handlers, the metadata publisher, replication and the
//! group coordinator (Kafka's `ReplicaManager`).
//!
//! CONTRACT (other modules build against these signatures; the owner of this file may add
//! to them but not change them without updating every caller):
//! - [`ReplicaManager::partition`] hands out one `Arc<std::sync::Mutex<Partition>>` per hosted
//!   partition; hold the lock only for in-memory work and one log call, never across `.await`.
//! - After anything that moves a partition's log end offset or high watermark (leader append,
//!   follower append, follower fetch recorded on the leader, ISR change), call
//!   [`ReplicaManager::partition_changed`] so delayed produces/fetches re-check.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::TopicPartition;

use crate::error::PartitionError;
use crate::partition::Partition;

/// The outcome of an append through [`ReplicaManager::append_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendResult {
    /// Offset of the first record appended (or of the original append for a duplicate
    /// idempotent batch).
    pub base_offset: i64,
    /// `LogAppendTime` assigned, `-1` for `CreateTime` topics.
    pub log_append_time_ms: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
}

/// Hosted partitions of this broker.
#[derive(Debug)]
pub struct ReplicaManager {
    // Owned by the broker-core implementer.
}

impl ReplicaManager {
    /// This broker's id.
    #[must_use]
    pub fn node_id(&self) -> i32 {
        todo!("broker core")
    }

    /// The latest published metadata image (cheap clone).
    #[must_use]
    pub fn image(&self) -> MetadataImage {
        todo!("broker core")
    }

    /// The hosted partition, if any.
    #[must_use]
    pub fn partition(&self, _tp: &TopicPartition) -> Option<Arc<Mutex<Partition>>> {
        todo!("broker core")
    }

    /// Wakes delayed operations waiting on `tp` (see the contract above).
    pub fn partition_changed(&self, _tp: &TopicPartition) {
        todo!("broker core")
    }

    /// Appends a batch set as leader (`acks` 0, 1 or -1) and waits, up to `timeout`, for
    /// what `acks` requires — the produce path, also used by the group coordinator for
    /// `__consumer_offsets` writes.
    ///
    /// # Errors
    /// The partition's error (not leader, not enough replicas, timeout, …).
    pub async fn append_records(
        &self,
        _tp: &TopicPartition,
        _records: Bytes,
        _acks: i16,
        _timeout: Duration,
    ) -> Result<AppendResult, PartitionError> {
        todo!("broker core")
    }
}
