//! The broker's metadata loader (Kafka's `MetadataLoader` in front of the broker's
//! publishers): committed batches and installed snapshots from the Raft driver become
//! [`Publication`]s through the sans-IO [`MetadataBatchLoader`] (KIP-868 transactions
//! included), and each publication goes to the broker; the highest applied offset goes to the
//! lifecycle's heartbeats, so the controller unfences the broker once it has caught up with its
//! own registration record.
//!
//! On a broker-only node the loader also writes metadata snapshots of the published image
//! (Kafka's broker-side `SnapshotGenerator`) on the `metadata.log.max.*` triggers, so that
//! the driver's retention can bound the local metadata log; on a combined node the controller
//! task writes them.
//!
//! Nothing is published, and no applied offset reported, until the loader has caught up with
//! the high watermark its replica knows (Kafka's `MetadataLoader` "catching up" phase): after a
//! restart the log replays in chunks as the high watermark becomes known, and an image built
//! from the first chunk alone would make the broker act on stale metadata (e.g. treat the
//! partitions of topics created later in the log as strays). The publications made while
//! catching up are queued and handed over in order once caught up.
//!
//! Fault policy (Kafka's `SharedServer` for brokers): a record that does not decode or does not
//! fit the image is counted (`metadata-load-error-count`), logged and skipped; the broker keeps
//! its last good image and goes on. A snapshot that cannot be read at all is counted the same
//! way and the loader keeps the image it had.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_metadata::image::{MetadataBatchLoader, Publication};
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_raft::OffsetAndEpoch;
use krust_raft::driver::{MetadataLogConfig, RaftEvent, RaftHandle, RaftStatus};
use krust_raft::snapshot::{SnapshotId, read_snapshot};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info};

use super::snapshot_trigger::SnapshotTrigger;

/// Where publications and the applied offset go.
pub trait MetadataSink: Send + Sync + 'static {
    /// A new image (called in log order, never concurrently).
    fn publish(&self, publication: &Publication);
    /// Everything up to `offset` (inclusive) is applied.
    fn applied(&self, offset: i64);
}

/// What the loader has done, for metrics and readiness.
#[derive(Debug, Default)]
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

/// Writes snapshots of the published image through the Raft driver (see the module doc).
pub struct SnapshotWriter {
    raft: RaftHandle,
    trigger: SnapshotTrigger,
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

/// Starts the loader over the driver's `events`; snapshots are read from `partition_dir` and,
/// with a `snapshots` writer, written on its triggers.
#[must_use]
pub fn spawn(
    events: mpsc::Receiver<RaftEvent>,
    status: watch::Receiver<RaftStatus>,
    partition_dir: PathBuf,
    sink: Arc<dyn MetadataSink>,
    stats: Arc<LoaderStats>,
    snapshots: Option<SnapshotWriter>,
) -> JoinHandle<()> {
    let loader = Loader {
        loader: MetadataBatchLoader::new(MetadataImage::empty()),
        delivered_end: 0,
        status,
        caught_up: false,
        held: Vec::new(),
        partition_dir,
        sink,
        stats,
        snapshots,
    };
    tokio::spawn(loader.run(events))
}

struct Loader {
    loader: MetadataBatchLoader,
    /// Offset after the last batch (data or control) handed up by the driver.
    delivered_end: i64,
    /// The replica's status (its high watermark).
    status: watch::Receiver<RaftStatus>,
    /// Whether the loader has once reached the high watermark.
    caught_up: bool,
    /// Publications made while catching up, in order.
    held: Vec<Publication>,
    partition_dir: PathBuf,
    sink: Arc<dyn MetadataSink>,
    stats: Arc<LoaderStats>,
    snapshots: Option<SnapshotWriter>,
}

impl Loader {
    async fn run(mut self, mut events: mpsc::Receiver<RaftEvent>) {
        while let Some(event) = events.recv().await {
            match event {
                RaftEvent::Commit(batches) => {
                    for batch in &batches {
                        self.load_batch(batch);
                    }
                    if let Some(publication) = self.loader.maybe_flush() {
                        self.publish(publication);
                    }
                    self.maybe_caught_up();
                    self.report_applied();
                    if let Some(snapshots) = &mut self.snapshots {
                        snapshots.maybe_snapshot(self.loader.image());
                    }
                }
                RaftEvent::SnapshotInstalled(id) => {
                    self.load_snapshot(id).await;
                    self.maybe_caught_up();
                    self.report_applied();
                }
                RaftEvent::LeaderChange { .. } => {}
            }
        }
        debug!("the metadata loader stopped: the Raft driver is gone");
    }

    /// Hands `publication` to the sink, or holds it while catching up.
    fn publish(&mut self, publication: Publication) {
        if self.caught_up {
            self.sink.publish(&publication);
            self.stats.publications.fetch_add(1, Ordering::Relaxed);
        } else {
            self.held.push(publication);
        }
    }

    /// Ends the catching-up phase once everything up to the known high watermark is loaded,
    /// handing over the held publications.
    fn maybe_caught_up(&mut self) {
        if self.caught_up {
            return;
        }
        let high_watermark = self.status.borrow().metrics.high_watermark;
        if high_watermark <= 0 || self.delivered_end < high_watermark {
            return;
        }
        self.caught_up = true;
        info!(
            high_watermark,
            publications = self.held.len(),
            "the broker's metadata caught up with the high watermark"
        );
        for publication in std::mem::take(&mut self.held) {
            self.publish(publication);
        }
        self.stats.set_caught_up();
    }

    fn fault(&self, what: &str) {
        self.stats.load_errors.fetch_add(1, Ordering::Relaxed);
        error!(
            fault = what,
            "metadata load error; skipping (the broker keeps its last good image)"
        );
    }

    /// The highest offset applied: every delivered batch, unless a transaction holds
    /// records back (then the published image's end).
    fn report_applied(&self) {
        if !self.caught_up {
            return;
        }
        let offset = if self.loader.in_transaction() {
            self.loader.image().provenance.last_contained_offset
        } else {
            self.delivered_end - 1
        };
        if offset >= 0 {
            self.stats
                .applied_offset
                .fetch_max(offset, Ordering::AcqRel);
            self.sink.applied(offset);
        }
    }

    fn load_batch(&mut self, batch: &RecordBatch) {
        if batch.next_offset() <= self.delivered_end {
            // Already covered by a loaded snapshot.
            return;
        }
        self.delivered_end = batch.next_offset();
        if batch.is_control() {
            return;
        }
        if let Some(snapshots) = &mut self.snapshots {
            snapshots.trigger.batch_applied(batch.size_in_bytes());
        }
        let base_offset = batch.base_offset();
        let records = match batch.records() {
            Ok(records) => records,
            Err(e) => {
                self.fault(&format!("batch at offset {base_offset}: {e}"));
                return;
            }
        };
        let mut decoded: Vec<MetadataRecord> = Vec::with_capacity(records.len());
        for record in &records {
            let offset = base_offset + i64::from(record.offset_delta);
            match record.value.as_deref().map(ApiMessageAndVersion::decode) {
                Some(Ok(framed)) => decoded.push(framed.record),
                Some(Err(e)) => self.fault(&format!("record at offset {offset}: {e}")),
                None => self.fault(&format!("record at offset {offset} has no value")),
            }
        }
        let outcome = self.loader.load_batch(
            base_offset,
            batch.partition_leader_epoch(),
            batch.max_timestamp(),
            &decoded,
        );
        for fault in &outcome.faults {
            self.fault(&fault.to_string());
        }
        for publication in outcome.publications {
            self.publish(publication);
        }
    }

    async fn load_snapshot(&mut self, id: OffsetAndEpoch) {
        let snapshot_id = SnapshotId {
            end_offset: id.offset.0,
            epoch: id.epoch.0,
        };
        let path = self.partition_dir.join(snapshot_id.file_name());
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => Bytes::from(bytes),
            Err(e) => {
                self.fault(&format!("reading snapshot {}: {e}", path.display()));
                return;
            }
        };
        let contents = match read_snapshot(bytes, Some(id.epoch.0)) {
            Ok(contents) => contents,
            Err(e) => {
                self.fault(&format!("snapshot {}: {e}", path.display()));
                return;
            }
        };
        let mut records = Vec::with_capacity(contents.records.len());
        for (index, value) in contents.records.iter().enumerate() {
            match ApiMessageAndVersion::decode(value) {
                Ok(framed) => records.push(framed.record),
                Err(e) => self.fault(&format!("snapshot {id} record {index}: {e}")),
            }
        }
        let provenance = MetadataProvenance::new(
            id.offset.0 - 1,
            id.epoch.0,
            contents.header.last_contained_log_timestamp,
        );
        let (publication, faults) = self.loader.load_snapshot(&records, provenance);
        for fault in &faults {
            self.fault(&fault.to_string());
        }
        self.delivered_end = id.offset.0;
        if let Some(snapshots) = &mut self.snapshots {
            snapshots.trigger.snapshot_loaded(id.offset.0);
        }
        self.publish(publication);
        info!(snapshot = %id, records = records.len(), "the broker loaded a metadata snapshot");
    }
}
