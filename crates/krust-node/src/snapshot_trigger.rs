//! When and how a node writes a metadata snapshot of an image (Kafka's `SnapshotGenerator`):
//! once `metadata.log.max.record.bytes.between.snapshots` data batch bytes were applied since
//! the last snapshot, or `metadata.log.max.snapshot.interval.ms` passed with any applied, the
//! image is encoded and handed to the Raft driver, one snapshot at a time.
//!
//! Shared by the controller task (combined and controller-only nodes) and the node's
//! metadata loader (broker-only nodes), which differ only in which image they snapshot and
//! which timestamp goes into the snapshot header.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_metadata::{ApiMessageAndVersion, MetadataImage};
use krust_raft::OffsetAndEpoch;
use krust_raft::driver::{MetadataLogConfig, RaftHandle};
use tracing::{info, warn};

/// The snapshot triggers and what has been applied since the last snapshot.
pub struct SnapshotTrigger {
    /// `metadata.log.max.record.bytes.between.snapshots`.
    max_bytes: u64,
    /// `metadata.log.max.snapshot.interval.ms`.
    max_interval: Duration,
    /// Data batch bytes applied since the last snapshot.
    bytes_since: u64,
    /// When the last snapshot was started (or the trigger created).
    last: Instant,
    /// End offset of the last snapshot started or loaded.
    last_end_offset: i64,
    /// Set while a snapshot is being written.
    in_flight: Arc<AtomicBool>,
    /// Logged once a snapshot is written (says which role wrote it).
    written_message: &'static str,
}

impl SnapshotTrigger {
    /// A trigger on `triggers`; `written_message` is logged for each snapshot written.
    #[must_use]
    pub fn new(triggers: &MetadataLogConfig, written_message: &'static str) -> Self {
        SnapshotTrigger {
            max_bytes: triggers.max_record_bytes_between_snapshots,
            max_interval: Duration::from_millis(triggers.max_snapshot_interval_ms),
            bytes_since: 0,
            last: Instant::now(),
            last_end_offset: 0,
            in_flight: Arc::new(AtomicBool::new(false)),
            written_message,
        }
    }

    /// Counts a data batch of `size_in_bytes` applied to the image.
    pub fn batch_applied(&mut self, size_in_bytes: usize) {
        self.bytes_applied(u64::try_from(size_in_bytes).unwrap_or(u64::MAX));
    }

    /// Counts `bytes` of data batches applied to the image.
    pub fn bytes_applied(&mut self, bytes: u64) {
        self.bytes_since = self.bytes_since.saturating_add(bytes);
    }

    /// A snapshot ending at `end_offset` was loaded: the image is as good as snapshotted there.
    pub fn snapshot_loaded(&mut self, end_offset: i64) {
        self.last_end_offset = end_offset;
        self.bytes_since = 0;
        self.last = Instant::now();
    }

    /// Whether a snapshot is due and none is being written.
    #[must_use]
    pub fn is_due(&self) -> bool {
        let due = self.bytes_since > 0
            && (self.bytes_since >= self.max_bytes || self.last.elapsed() >= self.max_interval);
        due && !self.in_flight.load(Ordering::Acquire)
    }

    /// Starts writing a snapshot of `image` through `raft` when one is due, none is being
    /// written and the image goes past the last snapshot; `log_time_ms` is the header's
    /// LastContainedLogTimestamp.
    pub fn maybe_snapshot(&mut self, raft: &RaftHandle, image: &MetadataImage, log_time_ms: i64) {
        if !self.is_due() || image.is_empty() {
            return;
        }
        let provenance = image.provenance;
        let end_offset = provenance.last_contained_offset + 1;
        if end_offset <= self.last_end_offset {
            return;
        }
        self.bytes_since = 0;
        self.last = Instant::now();
        let values = image
            .to_records(image.features.metadata_version)
            .map_err(|e| e.to_string())
            .and_then(|records| {
                records
                    .iter()
                    .map(ApiMessageAndVersion::encode)
                    .collect::<Result<Vec<Bytes>, _>>()
                    .map_err(|e| e.to_string())
            });
        let values = match values {
            Ok(values) => values,
            Err(reason) => {
                warn!(%reason, "cannot write the image as a snapshot");
                return;
            }
        };
        self.last_end_offset = end_offset;
        let id = OffsetAndEpoch::new(end_offset, provenance.last_contained_epoch);
        let in_flight = self.in_flight.clone();
        in_flight.store(true, Ordering::Release);
        let raft = raft.clone();
        let written_message = self.written_message;
        tokio::spawn(async move {
            match raft.create_snapshot(id, log_time_ms, values).await {
                Ok(()) => info!(snapshot = %id, "{written_message}"),
                Err(e) => warn!(snapshot = %id, error = %e, "metadata snapshot not written"),
            }
            in_flight.store(false, Ordering::Release);
        });
    }
}
