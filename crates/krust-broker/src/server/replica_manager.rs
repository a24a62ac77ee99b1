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
//! - After anything that may roll a segment (appends, DeleteRecords), take
//!   [`Partition::take_roll_flush`] before releasing the lock and pass it to
//!   [`schedule_roll_flush`]: the sealed segment is fsynced in the background and the
//!   recovery point moves only after that (Kafka's `roll` → scheduler `flush-log`).
//!   [`ManagerAccess::with_partition`] and [`ReplicaManager::append_records`] do it; a job not
//!   taken is not lost, only late (the next roll's job or a full flush covers it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::TopicPartition;
use uuid::Uuid;

use super::purgatory::Purgatory;
use crate::error::PartitionError;
use crate::partition::Partition;
use crate::replicas::PartitionAccess;

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

/// One hosted partition.
#[derive(Debug, Clone)]
pub struct HostedPartition {
    /// The replica.
    pub partition: Arc<Mutex<Partition>>,
    /// Its topic id.
    pub topic_id: Uuid,
    /// The log directory holding it.
    pub log_dir: PathBuf,
}

/// Hosted partitions of this broker.
#[derive(Debug)]
pub struct ReplicaManager {
    node_id: i32,
    image: RwLock<MetadataImage>,
    partitions: RwLock<BTreeMap<TopicPartition, HostedPartition>>,
    purgatory: Purgatory,
    /// Bumped by every [`ReplicaManager::set_image`].
    image_changes: Purgatory,
}

/// Wall-clock milliseconds since the epoch (the `now_ms` the sans-IO parts take).
#[must_use]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs a roll's flush ([`Partition::take_roll_flush`]) on a blocking thread, never on the
/// async workers and without the partition lock (Kafka 3.9 `UnifiedLog.roll` schedules
/// `flushUptoOffsetExclusive` on the scheduler so produce does not wait for the fsync), then
/// marks it done under the lock: the recovery point — and with it the next
/// `recovery-point-offset-checkpoint` — moves only after the fsyncs returned. A failed fsync
/// leaves the partition refusing appends (KAFKA_STORAGE_ERROR) with its recovery point frozen.
/// Outside a tokio runtime (unit tests) the job runs inline.
pub fn schedule_roll_flush(partition: &Arc<Mutex<Partition>>, job: Option<krust_log::FlushJob>) {
    let Some(job) = job else {
        return;
    };
    let partition = Arc::clone(partition);
    let mut job = job;
    let work = move || {
        // The next segment's files first, handed over at once: with small segments the next
        // roll may come before the fsyncs below are done.
        if let Some(spare) = job.make_spare_segment() {
            lock(&partition).add_spare_segment(spare);
        }
        let done = job.run();
        let mut p = lock(&partition);
        if let Err(error) = p.mark_flushed(done) {
            tracing::error!(%error, dir = %p.log().dir().display(),
                "flush after a segment roll failed: the partition refuses appends until restart");
        }
    };
    match tokio::runtime::Handle::try_current() {
        // Detached: nothing waits for it; a broker shutdown flushes every log itself.
        Ok(runtime) => drop(runtime.spawn_blocking(work)),
        Err(_) => work(),
    }
}

/// Locks a partition. A panic while holding the lock leaves the partition as it was at the
/// panic (every mutation is one log call), so a poisoned lock is still usable.
pub fn lock(partition: &Mutex<Partition>) -> MutexGuard<'_, Partition> {
    partition.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ReplicaManager {
    /// Empty, for broker `node_id`.
    #[must_use]
    pub fn new(node_id: i32) -> Self {
        ReplicaManager {
            node_id,
            image: RwLock::new(MetadataImage::empty()),
            partitions: RwLock::new(BTreeMap::new()),
            purgatory: Purgatory::new(),
            image_changes: Purgatory::new(),
        }
    }

    /// This broker's id.
    #[must_use]
    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The latest published metadata image (cheap clone).
    #[must_use]
    pub fn image(&self) -> MetadataImage {
        self.image
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the image (the publisher, before it applies a publication's changes) and wakes
    /// the requests waiting for one ([`ReplicaManager::image_changes`]: a forwarded
    /// CreateTopics), not the partition purgatory's produce and fetch waiters.
    pub fn set_image(&self, image: MetadataImage) {
        *self.image.write().unwrap_or_else(PoisonError::into_inner) = image;
        self.image_changes.wake_all();
    }

    /// Wake-ups on every new image (subscribe before checking, as with the purgatory).
    #[must_use]
    pub fn image_changes(&self) -> &Purgatory {
        &self.image_changes
    }

    /// The hosted partition, if any.
    #[must_use]
    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<Mutex<Partition>>> {
        self.hosted(tp).map(|h| h.partition)
    }

    /// The hosted partition with its topic id and directory.
    #[must_use]
    pub fn hosted(&self, tp: &TopicPartition) -> Option<HostedPartition> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tp)
            .cloned()
    }

    /// Every hosted partition.
    #[must_use]
    pub fn all_hosted(&self) -> Vec<(TopicPartition, HostedPartition)> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(tp, h)| (tp.clone(), h.clone()))
            .collect()
    }

    /// Starts hosting `tp` (the publisher).
    pub fn insert(&self, tp: TopicPartition, hosted: HostedPartition) {
        self.partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tp, hosted);
    }

    /// Stops hosting `tp` (the publisher), returning it.
    pub fn remove(&self, tp: &TopicPartition) -> Option<HostedPartition> {
        let removed = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(tp);
        if removed.is_some() {
            self.partition_changed(tp);
        }
        removed
    }

    /// Wakes delayed operations waiting on `tp` (see the contract above).
    pub fn partition_changed(&self, _tp: &TopicPartition) {
        self.purgatory.wake_all();
    }

    /// The delayed-operation wake-ups.
    #[must_use]
    pub fn purgatory(&self) -> &Purgatory {
        &self.purgatory
    }

    /// Why `tp` is not hosted: NOT_LEADER_OR_FOLLOWER if the image has it (elsewhere),
    /// UNKNOWN_TOPIC_OR_PARTITION otherwise.
    #[must_use]
    pub fn missing_partition_error(&self, topic: &str, partition: i32) -> PartitionError {
        let image = self.image();
        let known = image
            .topics
            .topic_by_name(topic)
            .is_some_and(|t| t.partitions.contains_key(&partition));
        if known {
            PartitionError::NotLeaderOrFollower
        } else {
            PartitionError::UnknownTopicOrPartition
        }
    }

    /// A [`PartitionAccess`] over this manager for the sans-IO handlers.
    #[must_use]
    pub fn access(&self) -> ManagerAccess<'_> {
        ManagerAccess { manager: self }
    }

    /// Appends a batch set as leader (`acks` 0, 1 or -1) and waits, up to `timeout`, for
    /// what `acks` requires — the produce path, also used by the group coordinator for
    /// `__consumer_offsets` writes.
    ///
    /// # Errors
    /// The partition's error (not leader, not enough replicas, timeout, …).
    pub async fn append_records(
        &self,
        tp: &TopicPartition,
        records: Bytes,
        acks: i16,
        timeout: Duration,
    ) -> Result<AppendResult, PartitionError> {
        self.append_then_wait(tp, timeout, |p| p.append_as_leader(records, acks, now_ms()))
            .await
    }

    /// The group coordinator's write of a TxnOffsetCommit (Kafka's `AppendOrigin.COORDINATOR`,
    /// acks=-1; see [`Partition::append_coordinator_records`]): waits up to `timeout` for the
    /// high watermark to pass it.
    ///
    /// # Errors
    /// The partition's error (not leader, INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, not enough
    /// replicas, timeout, …).
    pub async fn append_coordinator_records(
        &self,
        tp: &TopicPartition,
        records: Bytes,
        guard: Option<crate::partition::VerificationGuard>,
        timeout: Duration,
    ) -> Result<AppendResult, PartitionError> {
        self.append_then_wait(tp, timeout, |p| {
            p.append_coordinator_records(records, guard, now_ms())
        })
        .await
    }

    /// Runs `append` on the partition under its lock (scheduling a roll's flush), then waits
    /// up to `timeout` for what the append requires of the high watermark.
    async fn append_then_wait(
        &self,
        tp: &TopicPartition,
        timeout: Duration,
        append: impl FnOnce(&mut Partition) -> Result<crate::partition::LeaderAppend, PartitionError>,
    ) -> Result<AppendResult, PartitionError> {
        let Some(partition) = self.partition(tp) else {
            return Err(self.missing_partition_error(&tp.topic, tp.partition));
        };
        let (append, roll_flush) = {
            let mut p = lock(&partition);
            let append = append(&mut p);
            (append, p.take_roll_flush())
        };
        schedule_roll_flush(&partition, roll_flush);
        let append = append?;
        self.partition_changed(tp);
        let result = AppendResult {
            base_offset: append.base_offset,
            log_append_time_ms: append.log_append_time_ms,
            log_start_offset: append.log_start_offset,
        };
        let Some(required) = append.wait_for_high_watermark else {
            return Ok(result);
        };
        match self
            .purgatory
            .wait_for(timeout, || {
                lock(&partition).check_enough_replicas_reach_offset(required)
            })
            .await
        {
            Some(Ok(())) => Ok(result),
            Some(Err(e)) => Err(e),
            None => Err(PartitionError::RequestTimedOut),
        }
    }

    /// Directory of `tp` under `log_dir` (Kafka's `<topic>-<partition>`).
    #[must_use]
    pub fn partition_dir(log_dir: &Path, tp: &TopicPartition) -> PathBuf {
        log_dir.join(format!("{}-{}", tp.topic, tp.partition))
    }
}

/// [`PartitionAccess`] over a [`ReplicaManager`]: one partition lock at a time, and a
/// wake-up of delayed operations when an operation moved the log end or high watermark.
#[derive(Debug, Clone, Copy)]
pub struct ManagerAccess<'a> {
    manager: &'a ReplicaManager,
}

impl PartitionAccess for ManagerAccess<'_> {
    fn topic_name_of(&self, topic_id: Uuid) -> Option<String> {
        self.manager
            .image()
            .topics
            .topic(topic_id)
            .map(|t| t.name.clone())
    }

    fn with_partition<T>(
        &mut self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&mut Partition) -> Result<T, PartitionError>,
    ) -> Result<T, PartitionError> {
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition: partition_index,
        };
        let Some(partition) = self.manager.partition(&tp) else {
            return Err(self.manager.missing_partition_error(topic, partition_index));
        };
        let (result, moved, roll_flush) = {
            let mut guard = lock(&partition);
            // What delayed operations wait on: log end (fetch), high watermark (produce),
            // low watermark (DeleteRecords).
            let state = |p: &Partition| {
                (
                    p.log_end_offset(),
                    p.high_watermark(),
                    p.low_watermark(|_| true).ok(),
                )
            };
            let before = state(&guard);
            let result = f(&mut guard);
            let after = state(&guard);
            (result, before != after, guard.take_roll_flush())
        };
        schedule_roll_flush(&partition, roll_flush);
        if moved {
            self.manager.partition_changed(&tp);
        }
        result
    }

    fn inspect_partition<T>(
        &self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&Partition) -> T,
    ) -> Option<T> {
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition: partition_index,
        };
        let partition = self.manager.partition(&tp)?;
        let guard = lock(&partition);
        Some(f(&guard))
    }
}
