//! What the coordinator runtime needs from the broker: reading a `__consumer_offsets`
//! partition to load a shard, appending a shard's records, the metadata image.
//!
//! [`CoordinatorLog`] is implemented by [`ReplicaManager`] (the real broker). Unit tests put an
//! in-memory log behind it, so the runtime can be tested without a network or a controller.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::TopicPartition;

use crate::error::PartitionError;
use crate::partition::VerificationGuard;
use crate::server::controller_channel::BoxFuture;
use crate::server::replica_manager::ReplicaManager;

/// Kafka's `__consumer_offsets` topic name (`Topic.GROUP_METADATA_TOPIC_NAME`).
pub const GROUP_METADATA_TOPIC_NAME: &str = "__consumer_offsets";

/// One read of a partition while loading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadChunk {
    /// Whole batches from the requested offset on (empty at the end).
    pub records: Bytes,
    /// The partition's log end offset at the time of the read: loading stops there (Kafka's
    /// `CoordinatorLoaderImpl` reads to the log end, not the high watermark).
    pub log_end_offset: i64,
    /// The partition's log start offset (loading starts there).
    pub log_start_offset: i64,
}

/// The broker side of the group coordinator runtime.
pub trait CoordinatorLog: Send + Sync + 'static {
    /// Reads whole batches of `__consumer_offsets-partition` from `from_offset` (at least one
    /// batch, up to about `max_bytes`). Blocking file IO: call it off the async threads.
    ///
    /// # Errors
    /// The partition is not hosted or not led here, or its log failed.
    fn read(
        &self,
        partition: i32,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<LoadChunk, PartitionError>;

    /// Appends one batch to `__consumer_offsets-partition` as leader with acks=-1 and
    /// resolves once it is committed (the high watermark passed it) or failed.
    fn append(
        &self,
        partition: i32,
        records: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>>;

    /// Appends one transactional batch (a TxnOffsetCommit's offsets) as the coordinator
    /// (Kafka's `AppendOrigin.COORDINATOR`): `guard` is the partition's KIP-890 verification
    /// guard for the batch's producer. Resolves as [`CoordinatorLog::append`]. By default the
    /// plain append (logs without producer state).
    fn append_transactional(
        &self,
        partition: i32,
        records: Bytes,
        guard: Option<VerificationGuard>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        let _ = guard;
        self.append(partition, records, timeout)
    }

    /// The latest published metadata image.
    fn image(&self) -> MetadataImage;
}

fn offsets_tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: GROUP_METADATA_TOPIC_NAME.to_owned(),
        partition,
    }
}

impl CoordinatorLog for ReplicaManager {
    fn read(
        &self,
        partition: i32,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<LoadChunk, PartitionError> {
        let hosted = self
            .partition(&offsets_tp(partition))
            .ok_or(PartitionError::NotLeaderOrFollower)?;
        // Poisoned only if another thread panicked while holding the lock: that thread's
        // partition state is suspect, so refuse rather than load from it.
        let guard = hosted
            .lock()
            .map_err(|_| PartitionError::NotLeaderOrFollower)?;
        if !guard.is_leader() {
            return Err(PartitionError::NotLeaderOrFollower);
        }
        let log = guard.log();
        let log_start_offset = log.log_start_offset();
        let log_end_offset = log.log_end_offset();
        let from = from_offset.max(log_start_offset);
        let records = if from >= log_end_offset {
            Bytes::new()
        } else {
            log.read_up_to(from, max_bytes, log_end_offset)
                .map_err(PartitionError::from)?
                .bytes
        };
        Ok(LoadChunk {
            records,
            log_end_offset,
            log_start_offset,
        })
    }

    fn append(
        &self,
        partition: i32,
        records: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        Box::pin(async move {
            self.append_records(&offsets_tp(partition), records, -1, timeout)
                .await
                .map(|_| ())
        })
    }

    fn append_transactional(
        &self,
        partition: i32,
        records: Bytes,
        guard: Option<VerificationGuard>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        Box::pin(async move {
            self.append_coordinator_records(&offsets_tp(partition), records, guard, timeout)
                .await
                .map(|_| ())
        })
    }

    fn image(&self) -> MetadataImage {
        ReplicaManager::image(self)
    }
}

/// Lets an `Arc<ReplicaManager>` (what the broker holds) serve as the log.
impl<T: CoordinatorLog> CoordinatorLog for Arc<T> {
    fn read(
        &self,
        partition: i32,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<LoadChunk, PartitionError> {
        (**self).read(partition, from_offset, max_bytes)
    }

    fn append(
        &self,
        partition: i32,
        records: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        (**self).append(partition, records, timeout)
    }

    fn append_transactional(
        &self,
        partition: i32,
        records: Bytes,
        guard: Option<VerificationGuard>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        (**self).append_transactional(partition, records, guard, timeout)
    }

    fn image(&self) -> MetadataImage {
        (**self).image()
    }
}
