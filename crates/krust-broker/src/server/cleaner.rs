//! The broker's log cleaner (Kafka 3.9 `LogCleaner` / `LogCleanerManager` scheduling): one
//! cleaner thread (`log.cleaner.threads`, only 1 is supported) that repeatedly picks the
//! filthiest hosted log with `cleanup.policy` containing `compact` (dirty ratio above its
//! `min.cleanable.dirty.ratio`, or overdue by `max.compaction.lag.ms` first), runs one
//! [`krust_log::Cleaner`] pass on it and stores the next dirty offset in its log dir's
//! `cleaner-offset-checkpoint`; when nothing needs cleaning it sleeps `log.cleaner.backoff.ms`.
//!
//! Who runs it: [`super::groups::GroupCoordinator::new`] spawns it (so `__consumer_offsets`
//! and every other compacted topic get cleaned without more wiring) and stops it in
//! `shutdown`.
//!
//! Locking (as Kafka, which locks the log only in `replaceSegments`): a pass runs on a blocking
//! thread, never on the async ones, and takes the partition lock that produce and fetch take
//! only twice, briefly — to plan ([`Partition::plan_compaction`]: the range and read-only
//! handles on the sealed segments) and to swap ([`Partition::finish_compaction`]: revalidate,
//! rename, delete). Building the offset map and writing the cleaned segments happen in between
//! without it (`krust_log::cleaner`'s "Locking" section says why that is safe). Before the
//! swap the partition must still be the hosted one: a deleted partition's directory may
//! already hold a re-created topic of the same name, whose files the swap must not touch.
//! A log whose pass fails with an I/O or corruption error is marked uncleanable until restart
//! (Kafka's `markPartitionUncleanable`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use krust_log::checkpoint::TopicPartition as CheckpointPartition;
use krust_log::cleaner::{read_cleaner_checkpoint, write_cleaner_checkpoint};
use krust_log::{Cleaner, CleanerConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::replica_manager::ReplicaManager;
use crate::partition::Partition;

/// `log.cleaner.*` settings with Kafka 3.9's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LogCleanerSettings {
    /// `log.cleaner.enable` (true).
    pub enable: bool,
    /// `log.cleaner.backoff.ms` (15000): sleep when no log needs cleaning.
    pub backoff_ms: u64,
    /// The cleaner's buffers and throttle (`log.cleaner.dedupe.buffer.size`,
    /// `log.cleaner.io.buffer.size`, `log.cleaner.io.buffer.load.factor`,
    /// `log.cleaner.io.max.bytes.per.second`).
    pub cleaner: CleanerConfig,
}

impl Default for LogCleanerSettings {
    fn default() -> Self {
        LogCleanerSettings {
            enable: true,
            backoff_ms: 15_000,
            cleaner: CleanerConfig::default(),
        }
    }
}

impl LogCleanerSettings {
    /// From the validated `server.properties` (unset keys: Kafka's defaults).
    #[must_use]
    pub fn from_config(properties: &krust_config::KafkaConfig) -> Self {
        let d = LogCleanerSettings::default();
        let threads: i64 = properties.get_or("log.cleaner.threads", 1);
        if threads > 1 {
            warn!(
                threads,
                "log.cleaner.threads > 1 is not supported: one cleaner thread runs"
            );
        }
        LogCleanerSettings {
            enable: properties.get_or("log.cleaner.enable", d.enable),
            backoff_ms: properties.get_or("log.cleaner.backoff.ms", d.backoff_ms),
            cleaner: CleanerConfig {
                dedupe_buffer_size: properties.get_or(
                    "log.cleaner.dedupe.buffer.size",
                    d.cleaner.dedupe_buffer_size,
                ),
                io_buffer_load_factor: properties.get_or(
                    "log.cleaner.io.buffer.load.factor",
                    d.cleaner.io_buffer_load_factor,
                ),
                io_buffer_size: properties
                    .get_or("log.cleaner.io.buffer.size", d.cleaner.io_buffer_size),
                io_max_bytes_per_second: properties.get_or(
                    "log.cleaner.io.max.bytes.per.second",
                    d.cleaner.io_max_bytes_per_second,
                ),
            },
        }
    }
}

/// What the cleaner thread keeps between passes.
pub struct LogCleanerState {
    cleaner: Cleaner,
    /// `cleaner-offset-checkpoint` of each log dir, read on first use.
    checkpoints: HashMap<PathBuf, BTreeMap<CheckpointPartition, i64>>,
    /// Logs whose pass failed (I/O, corruption): skipped until restart.
    uncleanable: HashSet<CheckpointPartition>,
}

impl LogCleanerState {
    /// A fresh cleaner with `config`'s buffers.
    #[must_use]
    pub fn new(config: CleanerConfig) -> Self {
        LogCleanerState {
            cleaner: Cleaner::new(config),
            checkpoints: HashMap::new(),
            uncleanable: HashSet::new(),
        }
    }

    fn checkpoint_of(&mut self, log_dir: &Path) -> &mut BTreeMap<CheckpointPartition, i64> {
        self.checkpoints
            .entry(log_dir.to_path_buf())
            .or_insert_with(|| {
                match read_cleaner_checkpoint(log_dir) {
                    Ok(c) => c,
                    Err(e) => {
                        // Kafka fails the log dir; here the logs are cleaned from their start
                        // again, which is correct, only slower.
                        warn!(dir = %log_dir.display(), error = %e,
                        "unreadable cleaner-offset-checkpoint: cleaning from the log start");
                        BTreeMap::new()
                    }
                }
            })
    }
}

/// Wall time in ms: delete horizons and `max.compaction.lag.ms` are wall-clock based.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn lock(partition: &std::sync::Mutex<Partition>) -> MutexGuard<'_, Partition> {
    // Every partition mutation is one log call: a panic elsewhere leaves it consistent.
    partition.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One cleaner iteration (Kafka's `CleanerThread.tryCleanFilthiestLog`): cleans the filthiest
/// compacted log hosted by `replicas`, if any needs it. Blocking IO: run it off the async
/// threads. Returns whether a log was cleaned.
pub fn clean_filthiest(
    replicas: &ReplicaManager,
    state: &mut LogCleanerState,
    now_ms: i64,
) -> bool {
    // Pick: overdue logs first (`max.compaction.lag.ms`), then the highest dirty ratio.
    let mut best: Option<(bool, f64, CheckpointPartition, PathBuf)> = None;
    for (tp, hosted) in replicas.all_hosted() {
        let key = CheckpointPartition {
            topic: tp.topic.clone(),
            partition: tp.partition,
        };
        if state.uncleanable.contains(&key) {
            continue;
        }
        let checkpoint = state.checkpoint_of(&hosted.log_dir).get(&key).copied();
        let p = lock(&hosted.partition);
        let config = p.log().config();
        if !config.cleanup_policy.compacts() {
            continue;
        }
        let to_clean = p
            .log()
            .log_to_clean(checkpoint, p.last_stable_offset(), now_ms);
        if !to_clean.needs_cleaning(config.min_cleanable_dirty_ratio) {
            continue;
        }
        let rank = (
            to_clean.max_compaction_delay_ms > 0,
            to_clean.cleanable_ratio,
        );
        if best
            .as_ref()
            .is_none_or(|(o, r, _, _)| (rank.0, rank.1) > (*o, *r))
        {
            best = Some((rank.0, rank.1, key, hosted.log_dir.clone()));
        }
    }
    let Some((_, ratio, key, log_dir)) = best else {
        return false;
    };
    let tp = krust_metadata::image::topics::TopicPartition {
        topic: key.topic.clone(),
        partition: key.partition,
    };
    let Some(partition) = replicas.partition(&tp) else {
        return false;
    };
    let checkpoint = state.checkpoint_of(&log_dir).get(&key).copied();
    let plan = lock(&partition).plan_compaction(checkpoint, now_ms);
    let plan = match plan {
        Ok(Some(plan)) => plan,
        Ok(None) => return false,
        Err(e) => {
            warn!(topic = %key.topic, partition = key.partition, error = %e,
                "planning a cleaning pass failed: the log is marked uncleanable");
            state.uncleanable.insert(key);
            return false;
        }
    };
    // The expensive part, without the partition lock: produce and fetch go on meanwhile.
    let prepared =
        state
            .cleaner
            .prepare(&plan.snapshot, now_ms, &plan.active_producer_last_offsets);
    let outcome = {
        let mut p = lock(&partition);
        // Lock order partition → partitions map: nothing takes them the other way round
        // (`ReplicaManager` hands out clones and releases its map first).
        let still_hosted = replicas
            .partition(&tp)
            .is_some_and(|current| Arc::ptr_eq(&current, &partition));
        if !still_hosted {
            drop(p);
            debug!(topic = %key.topic, partition = key.partition,
                "partition removed during its cleaning pass: discarding the pass");
            state.cleaner.discard(prepared);
            return false;
        }
        p.finish_compaction(&mut state.cleaner, prepared)
    };
    match outcome {
        Ok(outcome) if outcome.aborted => {
            info!(topic = %key.topic, partition = key.partition,
                "log truncated during its cleaning pass: the pass was discarded");
            false
        }
        Ok(outcome) => {
            info!(topic = %key.topic, partition = key.partition, ratio,
                next_dirty_offset = outcome.next_dirty_offset,
                bytes_before = outcome.bytes_before, bytes_after = outcome.bytes_after,
                "cleaned log");
            let offsets = state.checkpoint_of(&log_dir);
            offsets.insert(key, outcome.next_dirty_offset);
            let offsets = offsets.clone();
            if let Err(e) = write_cleaner_checkpoint(&log_dir, &offsets) {
                warn!(dir = %log_dir.display(), error = %e,
                    "writing cleaner-offset-checkpoint failed");
            }
            true
        }
        Err(e) => {
            warn!(topic = %key.topic, partition = key.partition, error = %e,
                "cleaning failed: the log is marked uncleanable");
            state.uncleanable.insert(key);
            false
        }
    }
}

/// The running cleaner thread.
pub struct LogCleaner {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl LogCleaner {
    /// Starts the cleaner over `replicas` on `runtime`, or `None` when `log.cleaner.enable`
    /// is false.
    #[must_use]
    pub fn spawn(
        runtime: &tokio::runtime::Handle,
        replicas: Arc<ReplicaManager>,
        settings: LogCleanerSettings,
    ) -> Option<LogCleaner> {
        if !settings.enable {
            return None;
        }
        let (stop, mut stop_rx) = watch::channel(false);
        let task = runtime.spawn(async move {
            let mut state = Some(LogCleanerState::new(settings.cleaner.clone()));
            let backoff = Duration::from_millis(settings.backoff_ms);
            loop {
                let Some(mut st) = state.take() else { return };
                let replicas = Arc::clone(&replicas);
                let pass = tokio::task::spawn_blocking(move || {
                    let cleaned = clean_filthiest(&replicas, &mut st, wall_clock_ms());
                    (st, cleaned)
                });
                let cleaned = match pass.await {
                    Ok((st, cleaned)) => {
                        state = Some(st);
                        cleaned
                    }
                    Err(e) => {
                        warn!(error = %e, "log cleaner pass panicked: the cleaner stops");
                        return;
                    }
                };
                if *stop_rx.borrow() {
                    return;
                }
                if cleaned {
                    continue;
                }
                debug!(backoff_ms = settings.backoff_ms, "no log needs cleaning");
                tokio::select! {
                    _ = stop_rx.wait_for(|s| *s) => return,
                    () = tokio::time::sleep(backoff) => {}
                }
            }
        });
        Some(LogCleaner { stop, task })
    }

    /// Stops the cleaner after its current pass.
    pub async fn shutdown(self) {
        // An error means the task already ended.
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
