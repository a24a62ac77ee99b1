//! The broker's metadata loader (Kafka's `MetadataLoader` in front of the broker's
//! publishers): committed batches and installed snapshots from the Raft driver become
//! [`Publication`]s through the sans-IO [`MetadataBatchLoader`] (KIP-868 transactions
//! included), and each publication goes to the broker; the highest applied offset goes to the
//! lifecycle's heartbeats, so the controller unfences the broker once it has caught up with its
//! own registration record.
//!
//! Fault policy (Kafka's `SharedServer` for brokers): a record that does not decode or does not
//! fit the image is counted (`metadata-load-error-count`), logged and skipped; the broker keeps
//! its last good image and goes on. A snapshot that cannot be read at all is counted the same
//! way and the loader keeps the image it had.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_metadata::image::{MetadataBatchLoader, Publication};
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_raft::OffsetAndEpoch;
use krust_raft::driver::RaftEvent;
use krust_raft::snapshot::{SnapshotId, read_snapshot};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, error, info};

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
}

/// Starts the loader over the driver's `events`; snapshots are read from `partition_dir`.
#[must_use]
pub fn spawn(
    events: mpsc::Receiver<RaftEvent>,
    partition_dir: PathBuf,
    sink: Arc<dyn MetadataSink>,
    stats: Arc<LoaderStats>,
) -> JoinHandle<()> {
    let loader = Loader {
        loader: MetadataBatchLoader::new(MetadataImage::empty()),
        delivered_end: 0,
        partition_dir,
        sink,
        stats,
    };
    tokio::spawn(loader.run(events))
}

struct Loader {
    loader: MetadataBatchLoader,
    /// Offset after the last batch (data or control) handed up by the driver.
    delivered_end: i64,
    partition_dir: PathBuf,
    sink: Arc<dyn MetadataSink>,
    stats: Arc<LoaderStats>,
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
                        self.publish(&publication);
                    }
                    self.report_applied();
                }
                RaftEvent::SnapshotInstalled(id) => {
                    self.load_snapshot(id).await;
                    self.report_applied();
                }
                RaftEvent::LeaderChange { .. } => {}
            }
        }
        debug!("the metadata loader stopped: the Raft driver is gone");
    }

    fn publish(&self, publication: &Publication) {
        self.sink.publish(publication);
        self.stats.publications.fetch_add(1, Ordering::Relaxed);
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
        for publication in &outcome.publications {
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
        self.publish(&publication);
        info!(snapshot = %id, records = records.len(), "the broker loaded a metadata snapshot");
    }
}
