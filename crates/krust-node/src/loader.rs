//! The node's metadata loader task (Kafka's `MetadataLoader` as `SharedServer` runs it, one
//! per node whatever its roles): committed batches, installed snapshots and leader changes
//! from the Raft driver go into the sans-IO [`MetadataLoader`], which calls the
//! [`MetadataPublisher`]s registered when the task was built — the controller server's and
//! the broker's — once it has caught up with the high watermark.
//!
//! After each batch of events the applied offset goes to the [`LoaderStats`] and to the
//! applied-offset listeners (the broker's heartbeats carry it, so the controller unfences the
//! broker once it has caught up with its own registration record).
//!
//! On a broker-only node the loader also writes metadata snapshots of its image (Kafka's
//! broker-side `SnapshotGenerator`) on the `metadata.log.max.*` triggers, so that the driver's
//! retention can bound the local metadata log; on a controller node the controller task
//! writes them.
//!
//! Fault policy (Kafka's `SharedServer.metadataLoaderFaultHandler`): on a node with the
//! controller role a record that does not decode or fit the image, or a snapshot that cannot
//! be read, stops the task with a [`LoaderTaskError`] (the process stops, as the controller
//! would); on a broker-only node it is counted (`metadata-load-error-count`), logged and
//! skipped, and the broker keeps its last good image.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use krust_metadata::image::{
    LeaderAndEpoch, LoadFault, LoadOutcome, MetadataLoader, MetadataPublisher,
};
use krust_metadata::{MetadataImage, MetadataProvenance};
use krust_raft::OffsetAndEpoch;
use krust_raft::driver::{MetadataLogConfig, RaftEvent, RaftHandle, RaftStatus};
use krust_raft::snapshot::{SnapshotId, SnapshotReadError, read_snapshot};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error};

use crate::snapshot_trigger::SnapshotTrigger;

/// What the loader has done, for metrics and readiness.
#[derive(Debug)]
pub struct LoaderStats {
    /// Offset of the last applied record (`-1` before any).
    pub applied_offset: AtomicI64,
    /// Records or snapshots skipped (`metadata-load-error-count`).
    pub load_errors: AtomicU64,
    /// Images published.
    pub publications: AtomicU64,
    /// Set once the loader caught up with the high watermark.
    caught_up: AtomicBool,
    caught_up_notify: tokio::sync::Notify,
}

impl Default for LoaderStats {
    fn default() -> Self {
        LoaderStats {
            applied_offset: AtomicI64::new(-1),
            load_errors: AtomicU64::new(0),
            publications: AtomicU64::new(0),
            caught_up: AtomicBool::new(false),
            caught_up_notify: tokio::sync::Notify::new(),
        }
    }
}

impl LoaderStats {
    /// Whether the loader has caught up with the high watermark (and published).
    #[must_use]
    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// Resolves once the loader has caught up with the high watermark.
    pub async fn wait_until_caught_up(&self) {
        loop {
            // Registered before the check, so a notification in between is not lost.
            let notified = self.caught_up_notify.notified();
            if self.is_caught_up() {
                return;
            }
            notified.await;
        }
    }

    fn set_caught_up(&self) {
        self.caught_up.store(true, Ordering::Release);
        self.caught_up_notify.notify_waiters();
    }
}

/// Writes snapshots of the loader's image through the Raft driver (see the module doc).
pub struct SnapshotWriter {
    raft: RaftHandle,
    trigger: SnapshotTrigger,
}

impl std::fmt::Debug for SnapshotWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotWriter").finish_non_exhaustive()
    }
}

impl SnapshotWriter {
    /// Snapshots through `raft` on `triggers`.
    #[must_use]
    pub fn new(raft: RaftHandle, triggers: &MetadataLogConfig) -> Self {
        SnapshotWriter {
            raft,
            trigger: SnapshotTrigger::new(triggers, "the broker wrote a metadata snapshot"),
        }
    }

    /// Starts writing a snapshot of `image` when one is due and none is being written.
    fn maybe_snapshot(&mut self, image: &MetadataImage) {
        self.trigger.maybe_snapshot(
            &self.raft,
            image,
            image.provenance.last_contained_log_time_ms,
        );
    }
}

/// What a load fault does (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoaderFaultPolicy {
    /// Stop the task (nodes with the controller role).
    Fatal,
    /// Count, log and skip (broker-only nodes).
    Count,
}

/// Why the loader task stopped (under [`LoaderFaultPolicy::Fatal`]).
#[derive(Debug, thiserror::Error)]
pub enum LoaderTaskError {
    /// A record, batch or snapshot record could not be loaded.
    #[error("metadata loading failed")]
    Load(#[from] LoadFault),
    /// An installed snapshot's file could not be read.
    #[error("reading snapshot {path}")]
    ReadSnapshot {
        /// The `.checkpoint` file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// An installed snapshot's file is not a valid snapshot.
    #[error("snapshot {path}")]
    Snapshot {
        /// The `.checkpoint` file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: SnapshotReadError,
    },
}

/// Called with each new applied offset (see [`MetadataLoaderTask::on_applied`]).
pub type AppliedOffsetListener = Box<dyn Fn(i64) + Send + Sync>;

/// Builds and starts the node's loader task: its publishers and listeners are given here,
/// before any event is loaded.
pub struct MetadataLoaderTask {
    partition_dir: PathBuf,
    status: watch::Receiver<RaftStatus>,
    stats: Arc<LoaderStats>,
    fault_policy: LoaderFaultPolicy,
    publishers: Vec<Box<dyn MetadataPublisher>>,
    applied: Vec<AppliedOffsetListener>,
    snapshots: Option<SnapshotWriter>,
}

impl std::fmt::Debug for MetadataLoaderTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataLoaderTask")
            .field(
                "publishers",
                &self.publishers.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("fault_policy", &self.fault_policy)
            .finish_non_exhaustive()
    }
}

impl MetadataLoaderTask {
    /// A loader over the replica whose status is `raft` (its high watermark) and whose
    /// snapshots are read from `partition_dir` (`__cluster_metadata-0`), reporting to `stats`.
    #[must_use]
    pub fn builder(
        raft: &RaftHandle,
        partition_dir: PathBuf,
        stats: Arc<LoaderStats>,
        fault_policy: LoaderFaultPolicy,
    ) -> Self {
        MetadataLoaderTask {
            partition_dir,
            status: raft.watch_status(),
            stats,
            fault_policy,
            publishers: Vec::new(),
            applied: Vec::new(),
            snapshots: None,
        }
    }

    /// Registers `publishers`, called after those registered before.
    #[must_use]
    pub fn with_publishers(
        mut self,
        publishers: impl IntoIterator<Item = Box<dyn MetadataPublisher>>,
    ) -> Self {
        self.publishers.extend(publishers);
        self
    }

    /// Registers a listener of the applied offset (a broker's heartbeats).
    #[must_use]
    pub fn on_applied(mut self, listener: AppliedOffsetListener) -> Self {
        self.applied.push(listener);
        self
    }

    /// Writes snapshots of the loaded image (broker-only nodes).
    #[must_use]
    pub fn with_snapshots(mut self, snapshots: SnapshotWriter) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// Starts loading the driver's `events`; the task ends when the driver is gone (or, under
    /// [`LoaderFaultPolicy::Fatal`], at the first fault), closing the publishers.
    #[must_use]
    pub fn spawn(
        self,
        events: mpsc::Receiver<RaftEvent>,
    ) -> JoinHandle<Result<(), LoaderTaskError>> {
        let task = LoaderTask {
            loader: MetadataLoader::new(self.publishers),
            status: self.status,
            partition_dir: self.partition_dir,
            stats: self.stats,
            fault_policy: self.fault_policy,
            applied: self.applied,
            snapshots: self.snapshots,
        };
        tokio::spawn(task.run(events))
    }
}

struct LoaderTask {
    loader: MetadataLoader,
    /// The replica's status (its high watermark).
    status: watch::Receiver<RaftStatus>,
    partition_dir: PathBuf,
    stats: Arc<LoaderStats>,
    fault_policy: LoaderFaultPolicy,
    applied: Vec<AppliedOffsetListener>,
    snapshots: Option<SnapshotWriter>,
}

impl LoaderTask {
    async fn run(mut self, mut events: mpsc::Receiver<RaftEvent>) -> Result<(), LoaderTaskError> {
        let result = self.load(&mut events).await;
        self.loader.close();
        result
    }

    async fn load(
        &mut self,
        events: &mut mpsc::Receiver<RaftEvent>,
    ) -> Result<(), LoaderTaskError> {
        while let Some(event) = events.recv().await {
            match event {
                RaftEvent::Commit(batches) => {
                    let outcome =
                        self.loader
                            .handle_commit(Instant::now(), &batches, self.high_watermark());
                    self.after_load(&outcome)?;
                    if let Some(snapshots) = &mut self.snapshots {
                        snapshots.trigger.bytes_applied(outcome.data_bytes);
                        snapshots.maybe_snapshot(self.loader.image());
                    }
                }
                RaftEvent::SnapshotInstalled(id) => self.load_snapshot(id).await?,
                RaftEvent::LeaderChange { leader, epoch } => {
                    self.loader.handle_leader_change(LeaderAndEpoch {
                        leader_id: leader.map(|l| l.0),
                        leader_epoch: epoch.0,
                    });
                }
            }
        }
        debug!("the metadata loader stopped: the Raft driver is gone");
        Ok(())
    }

    fn high_watermark(&self) -> i64 {
        self.status.borrow().metrics.high_watermark
    }

    /// Applies the fault policy, then reports progress.
    fn after_load(&mut self, outcome: &LoadOutcome) -> Result<(), LoaderTaskError> {
        for fault in &outcome.faults {
            self.fault(&fault.to_string());
            if self.fault_policy == LoaderFaultPolicy::Fatal {
                return Err(fault.clone().into());
            }
        }
        self.stats
            .publications
            .store(self.loader.published(), Ordering::Relaxed);
        if outcome.caught_up {
            self.stats.set_caught_up();
        }
        if let Some(offset) = self.loader.applied_offset() {
            self.stats
                .applied_offset
                .fetch_max(offset, Ordering::AcqRel);
            for listener in &self.applied {
                listener(offset);
            }
        }
        Ok(())
    }

    fn fault(&self, what: &str) {
        self.stats.load_errors.fetch_add(1, Ordering::Relaxed);
        match self.fault_policy {
            LoaderFaultPolicy::Count => error!(
                fault = what,
                "metadata load error; skipping (the broker keeps its last good image)"
            ),
            LoaderFaultPolicy::Fatal => error!(fault = what, "metadata load error"),
        }
    }

    async fn load_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), LoaderTaskError> {
        let started = Instant::now();
        let snapshot_id = SnapshotId {
            end_offset: id.offset.0,
            epoch: id.epoch.0,
        };
        let path = self.partition_dir.join(snapshot_id.file_name());
        let contents = match tokio::fs::read(&path).await {
            Ok(bytes) => read_snapshot(Bytes::from(bytes), Some(id.epoch.0)).map_err(|source| {
                LoaderTaskError::Snapshot {
                    path: path.clone(),
                    source,
                }
            }),
            Err(source) => Err(LoaderTaskError::ReadSnapshot {
                path: path.clone(),
                source,
            }),
        };
        let contents = match contents {
            Ok(contents) => contents,
            Err(e) => {
                self.fault(&format!("{e}: {}", error_chain(&e)));
                return match self.fault_policy {
                    LoaderFaultPolicy::Fatal => Err(e),
                    // The loader keeps the image it had.
                    LoaderFaultPolicy::Count => Ok(()),
                };
            }
        };
        let provenance = MetadataProvenance::new(
            id.offset.0 - 1,
            id.epoch.0,
            contents.header.last_contained_log_timestamp,
        );
        let outcome = self.loader.handle_load_snapshot(
            started,
            Instant::now(),
            &contents.records,
            provenance,
            self.high_watermark(),
        );
        if let Some(snapshots) = &mut self.snapshots {
            snapshots.trigger.snapshot_loaded(id.offset.0);
        }
        self.after_load(&outcome)
    }
}

/// The causes of `error`, for a one-line log field.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut causes = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    causes.join(": ")
}
