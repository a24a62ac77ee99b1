//! Replication (Kafka's `ReplicaFetcherManager`, `AlterPartitionManager` and the ISR parts
//! of `Partition`): one fetcher per source broker batching partitions, truncation by
//! diverging epoch, and ISR shrink/expand proposed to the controller with AlterPartition.
//!
//! CONTRACT (used by [`super::publisher`] and [`super::apis`]):
//! the publisher calls [`ReplicationManager::become_follower`] for partitions this broker now
//! follows (new leader or epoch) and [`ReplicationManager::stop_following`] for partitions it
//! leads or no longer hosts; the fetch handler calls
//! [`ReplicationManager::on_follower_fetch`] after recording a follower's fetch on a leader
//! (ISR expansion check) — without holding the partition's lock, which it takes.
//!
//! # Layout
//! - [`config`]: [`ReplicationConfig`], the `replica.*` settings with Kafka's defaults.
//! - `fetcher`: the follower side — one task per leader broker sends Fetch requests for all
//!   partitions it follows there, appends, truncates (diverging epoch, OffsetForLeaderEpoch
//!   for leaders without Fetch v12, OFFSET_OUT_OF_RANGE via ListOffsets) and backs off.
//! - `isr`: the leader side — the `isr-expiration` check every `replica.lag.time.max.ms / 2`,
//!   the expansion check after follower fetches, and the AlterPartition sender (batched,
//!   one proposal in flight per partition, which the partition's maximal ISR reflects).
//!
//! Time: follower fetch state on the leader is kept in wall-clock milliseconds
//! ([`now_ms`]), the same clock the fetch handler must pass to `Partition::read`.

pub mod config;
mod fetcher;
mod isr;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use krust_metadata::image::topics::TopicPartition;
use tokio::task::JoinHandle;
use tracing::warn;

use super::BrokerConfig;
use super::controller_channel::ControllerChannel;
use super::replica_manager::ReplicaManager;
pub use config::ReplicationConfig;

/// A partition this broker follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// Its topic id (Fetch v13+).
    pub topic_id: uuid::Uuid,
    /// The leader's broker id.
    pub leader_id: i32,
    /// The leader epoch.
    pub leader_epoch: i32,
}

/// Counters of this broker's replication (Kafka's `ReplicaManager` metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicationStats {
    /// ISR shrinks committed by the controller (`IsrShrinksPerSec` counts these).
    pub isr_shrinks: u64,
    /// ISR expansions committed by the controller (`IsrExpandsPerSec`).
    pub isr_expands: u64,
    /// AlterPartition proposals that failed (`FailedIsrUpdatesPerSec`).
    pub failed_isr_updates: u64,
    /// Partitions led here whose ISR is smaller than their replica set
    /// (`UnderReplicatedPartitions`).
    pub under_replicated_partitions: u64,
    /// Partitions led here whose ISR is below `min.insync.replicas`
    /// (`UnderMinIsrPartitionCount`).
    pub under_min_isr_partitions: u64,
    /// Partitions followed by the fetchers.
    pub followed_partitions: u64,
}

/// What every replication task shares.
pub(crate) struct Context {
    node_id: i32,
    config: ReplicationConfig,
    replicas: Arc<ReplicaManager>,
    channel: Arc<dyn ControllerChannel>,
    isr_shrinks: AtomicU64,
    isr_expands: AtomicU64,
    failed_isr_updates: AtomicU64,
}

impl Context {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Replication of one broker.
pub struct ReplicationManager {
    ctx: Arc<Context>,
    fetchers: fetcher::FetcherManager,
    isr: Arc<isr::IsrManager>,
    /// Background tasks (ISR expiration, AlterPartition sender), started on first use inside
    /// a tokio runtime.
    tasks: Mutex<Option<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for ReplicationManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationManager")
            .field("node_id", &self.ctx.node_id)
            .finish_non_exhaustive()
    }
}

impl Drop for ReplicationManager {
    /// The ISR tasks never outlive the manager (a broker dropped without `shutdown`); the
    /// fetchers stop with their own manager.
    fn drop(&mut self) {
        let tasks = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        for task in tasks.unwrap_or_default() {
            task.abort();
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch (the clock of follower fetch state).
#[must_use]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl ReplicationManager {
    /// For this broker. Background tasks start here when called inside a tokio runtime,
    /// else on the first call that is.
    #[must_use]
    pub fn new(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        channel: Arc<dyn ControllerChannel>,
    ) -> Self {
        let replication_config = ReplicationConfig::from_broker_config(config);
        let ctx = Arc::new(Context {
            node_id: config.node_id,
            config: replication_config,
            replicas,
            channel,
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            failed_isr_updates: AtomicU64::new(0),
        });
        let manager = ReplicationManager {
            fetchers: fetcher::FetcherManager::new(ctx.clone()),
            isr: Arc::new(isr::IsrManager::new(ctx.clone())),
            ctx,
            tasks: Mutex::new(None),
        };
        manager.ensure_started();
        manager
    }

    /// The settings in use.
    #[must_use]
    pub fn config(&self) -> &ReplicationConfig {
        &self.ctx.config
    }

    fn ensure_started(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if tasks.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *tasks = Some(self.isr.clone().start(&runtime));
    }

    /// Starts (or re-targets) fetching for these partitions. A partition already fetched
    /// from the same leader in the same epoch keeps its position; one the publisher has not
    /// made a follower (`Partition::make_follower`) is skipped.
    pub fn become_follower(&self, partitions: Vec<FollowedPartition>) {
        self.ensure_started();
        self.fetchers.add_partitions(partitions);
    }

    /// Stops fetching for these partitions.
    pub fn stop_following(&self, partitions: &[TopicPartition]) {
        self.fetchers.remove_partitions(partitions);
    }

    /// A follower's fetch was recorded on a partition this broker leads: proposes adding it
    /// to the ISR if it caught up (Kafka's `maybeExpandIsr`). Must be called without the
    /// partition's lock held.
    pub fn on_follower_fetch(&self, tp: &TopicPartition, replica_id: i32) {
        self.on_follower_fetch_with_epoch(tp, replica_id, -1);
    }

    /// [`ReplicationManager::on_follower_fetch`] for a fetch that carried the follower's
    /// broker epoch (Fetch v15+ `ReplicaState`, KIP-903): a follower fetching with another
    /// epoch than its current registration is not added to the ISR.
    pub fn on_follower_fetch_with_epoch(
        &self,
        tp: &TopicPartition,
        replica_id: i32,
        broker_epoch: i64,
    ) {
        self.ensure_started();
        self.isr.maybe_expand_isr(tp, replica_id, broker_epoch);
    }

    /// Runs the ISR shrink check now (also run every `replica.lag.time.max.ms / 2`).
    pub fn check_isr_expiration(&self) {
        self.ensure_started();
        self.isr.maybe_shrink_isrs();
    }

    /// Counters and gauges for metrics.
    #[must_use]
    pub fn stats(&self) -> ReplicationStats {
        self.ensure_started();
        let (under_replicated, under_min_isr) = self.isr.under_replicated_counts();
        ReplicationStats {
            isr_shrinks: self.ctx.isr_shrinks.load(Ordering::Relaxed),
            isr_expands: self.ctx.isr_expands.load(Ordering::Relaxed),
            failed_isr_updates: self.ctx.failed_isr_updates.load(Ordering::Relaxed),
            under_replicated_partitions: under_replicated,
            under_min_isr_partitions: under_min_isr,
            followed_partitions: self.fetchers.partition_count(),
        }
    }

    /// Stops every fetcher and the ISR tasks.
    pub async fn shutdown(&self) {
        self.fetchers.shutdown().await;
        let tasks = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(Vec::new());
        for task in tasks.unwrap_or_default() {
            task.abort();
            if let Err(e) = task.await
                && !e.is_cancelled()
            {
                warn!(error = %e, "replication task failed");
            }
        }
    }
}
