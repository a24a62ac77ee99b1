//! Turning committed log batches into published images, with KIP-868 metadata transactions
//! (Kafka 3.9's `image/loader/MetadataBatchLoader`; facts §3.3). Sans-IO: the caller feeds
//! batches as they commit and calls [`MetadataBatchLoader::maybe_flush`] at the commit point.
//!
//! - Outside a transaction, records accumulate in one delta, published at the next flush.
//! - `BeginTransactionRecord` first publishes whatever came before it (unless nothing did);
//!   records inside the transaction are published only after `EndTransactionRecord`.
//! - `AbortTransactionRecord` discards the transaction's records; the next flush publishes an
//!   empty delta, so the offset still advances.
//! - A nested Begin, or End/Abort without Begin, is a [`LoadFault`], as is a record that does
//!   not fit the image. Loading carries on after a fault (as Kafka's loader does); what to do
//!   about it is the caller's fault policy: a controller stops, a broker counts it.
//!
//! [`MetadataLoader`] (Kafka's `image/loader/MetadataLoader`) sits on top: it takes committed
//! batches and snapshots as the Raft layer hands them up, holds every publication back until it
//! has caught up with the high watermark, and then hands each one, with its
//! [`LoaderManifest`], to the [`MetadataPublisher`]s registered when it was built.

use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_log::batch::{BatchError, RecordBatch};
use thiserror::Error;
use tracing::{debug, info};

use super::publisher::{LeaderAndEpoch, LoaderManifest, MetadataPublisher};
use super::{MetadataDelta, MetadataImage, MetadataProvenance, ReplayError};
use crate::frame::{ApiMessageAndVersion, FrameError};
use crate::records::MetadataRecord;

/// A new image for the publishers, and the delta that made it.
#[derive(Debug, Clone)]
pub struct Publication {
    /// What changed (its `image()` is the previous image).
    pub delta: MetadataDelta,
    /// The new image.
    pub image: MetadataImage,
}

/// A record the loader could not take. The record is skipped; loading goes on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoadFault {
    /// The record does not fit the image.
    #[error("Error loading metadata log record from offset {offset}")]
    Replay {
        /// Offset of the record.
        offset: i64,
        /// Why.
        #[source]
        source: ReplayError,
    },
    /// `BeginTransactionRecord` inside a transaction.
    #[error("Encountered BeginTransactionRecord while already in a transaction (offset {offset})")]
    NestedBegin {
        /// Offset of the record.
        offset: i64,
    },
    /// `EndTransactionRecord` outside a transaction.
    #[error(
        "Encountered EndTransactionRecord without having seen a BeginTransactionRecord (offset {offset})"
    )]
    EndWithoutBegin {
        /// Offset of the record.
        offset: i64,
    },
    /// A snapshot record that does not fit the image built so far.
    #[error("Error loading snapshot record {index}")]
    SnapshotReplay {
        /// Index of the record in the snapshot.
        index: usize,
        /// Why.
        #[source]
        source: ReplayError,
    },
    /// `AbortTransactionRecord` outside a transaction.
    #[error(
        "Encountered AbortTransactionRecord without having seen a BeginTransactionRecord (offset {offset})"
    )]
    AbortWithoutBegin {
        /// Offset of the record.
        offset: i64,
    },
    /// A committed batch whose records do not parse; the whole batch is skipped.
    #[error("committed batch at offset {base_offset} does not parse")]
    Batch {
        /// Base offset of the batch.
        base_offset: i64,
        /// Why.
        #[source]
        source: BatchError,
    },
    /// A record that is not an ApiMessageAndVersion frame of a known metadata record.
    #[error("record at offset {offset} is not a metadata record")]
    Decode {
        /// Offset of the record.
        offset: i64,
        /// Why.
        #[source]
        source: FrameError,
    },
    /// A record without a value (metadata records always have one).
    #[error("record at offset {offset} has no value")]
    NoValue {
        /// Offset of the record.
        offset: i64,
    },
    /// A snapshot record that is not an ApiMessageAndVersion frame.
    #[error("snapshot record {index} is not a metadata record")]
    SnapshotDecode {
        /// Index of the record in the snapshot.
        index: usize,
        /// Why.
        #[source]
        source: FrameError,
    },
}

/// What loading one batch produced.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    /// Images published while loading (a transaction began after other records).
    pub publications: Vec<Publication>,
    /// Records skipped, in offset order.
    pub faults: Vec<LoadFault>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransactionState {
    None,
    /// Begin seen; the transaction is open.
    Open,
    /// End seen; the transaction's records are published at the next flush.
    Ended,
    /// Abort seen; the transaction's records were dropped.
    Aborted,
}

/// Feeds committed batches into deltas and decides when to publish (see the module doc).
#[derive(Debug, Clone)]
pub struct MetadataBatchLoader {
    image: MetadataImage,
    delta: MetadataDelta,
    state: TransactionState,
    /// Whether any record went into `delta` since the last publication.
    pending: bool,
    last_offset: i64,
    last_epoch: i32,
    last_log_time_ms: i64,
}

impl MetadataBatchLoader {
    /// A loader whose published image so far is `image` (the empty image, or a loaded
    /// snapshot).
    #[must_use]
    pub fn new(image: MetadataImage) -> Self {
        let provenance = image.provenance;
        Self {
            delta: MetadataDelta::new(&image),
            image,
            state: TransactionState::None,
            pending: false,
            last_offset: provenance.last_contained_offset,
            last_epoch: provenance.last_contained_epoch,
            last_log_time_ms: provenance.last_contained_log_time_ms,
        }
    }

    /// The last published image.
    #[must_use]
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// Whether a transaction is open (nothing is published until it ends or aborts).
    #[must_use]
    pub fn in_transaction(&self) -> bool {
        self.state == TransactionState::Open
    }

    /// Loads the records of one committed batch starting at `base_offset`, written in leader
    /// `epoch` at `append_time_ms`.
    pub fn load_batch(
        &mut self,
        base_offset: i64,
        epoch: i32,
        append_time_ms: i64,
        records: &[MetadataRecord],
    ) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        self.last_epoch = epoch;
        self.last_log_time_ms = append_time_ms;
        for (index, record) in (0_i64..).zip(records) {
            let offset = base_offset + index;
            match record {
                MetadataRecord::BeginTransaction(_) => {
                    if self.state == TransactionState::Open {
                        outcome.faults.push(LoadFault::NestedBegin { offset });
                    } else {
                        // Publish what came before the transaction, so that it is not held
                        // back by it.
                        if self.pending || self.state == TransactionState::Aborted {
                            outcome.publications.push(self.publish());
                        }
                        self.state = TransactionState::Open;
                    }
                }
                MetadataRecord::EndTransaction(_) => {
                    if self.state == TransactionState::Open {
                        self.state = TransactionState::Ended;
                    } else {
                        outcome.faults.push(LoadFault::EndWithoutBegin { offset });
                    }
                }
                MetadataRecord::AbortTransaction(_) => {
                    if self.state == TransactionState::Open {
                        // Everything since Begin belongs to the transaction: drop it.
                        self.delta = MetadataDelta::new(&self.image);
                        self.pending = false;
                        self.state = TransactionState::Aborted;
                    } else {
                        outcome.faults.push(LoadFault::AbortWithoutBegin { offset });
                    }
                }
                other => {
                    match self.delta.replay(other) {
                        Ok(()) => self.pending = true,
                        Err(source) => outcome.faults.push(LoadFault::Replay { offset, source }),
                    }
                    if self.state != TransactionState::Open {
                        // Records after an ended or aborted transaction are ordinary ones.
                        self.state = TransactionState::None;
                    }
                }
            }
            self.last_offset = offset;
        }
        outcome
    }

    /// Loads a whole snapshot (records in snapshot order) on top of the published image and
    /// publishes the result at once: whatever the snapshot lacks is removed
    /// ([`MetadataDelta::new_snapshot`]). Anything loaded but not yet published, including an
    /// open transaction, is superseded and dropped.
    pub fn load_snapshot<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a MetadataRecord>,
        provenance: MetadataProvenance,
    ) -> (Publication, Vec<LoadFault>) {
        let mut delta = MetadataDelta::new_snapshot(&self.image);
        let mut faults = Vec::new();
        for (index, record) in records.into_iter().enumerate() {
            if let Err(source) = delta.replay(record) {
                faults.push(LoadFault::SnapshotReplay { index, source });
            }
        }
        delta.finish_snapshot();
        self.delta = delta;
        self.last_offset = provenance.last_contained_offset;
        self.last_epoch = provenance.last_contained_epoch;
        self.last_log_time_ms = provenance.last_contained_log_time_ms;
        (self.publish(), faults)
    }

    /// At a commit point (the loader caught up with the high watermark): publishes what was
    /// loaded, unless a transaction is open. An aborted transaction publishes an empty delta
    /// (plus any records after the abort) so that the image's offset advances.
    pub fn maybe_flush(&mut self) -> Option<Publication> {
        if self.state == TransactionState::Open {
            return None;
        }
        let moved = self.last_offset != self.image.provenance.last_contained_offset;
        (moved || self.pending).then(|| self.publish())
    }

    fn publish(&mut self) -> Publication {
        let provenance =
            MetadataProvenance::new(self.last_offset, self.last_epoch, self.last_log_time_ms);
        let delta = std::mem::replace(&mut self.delta, MetadataDelta::new(&self.image));
        let image = delta.apply(provenance);
        self.image = image.clone();
        self.delta = MetadataDelta::new(&self.image);
        self.pending = false;
        self.state = TransactionState::None;
        Publication { delta, image }
    }
}

/// What one `handle_*` call of [`MetadataLoader`] did, for the caller's fault policy and
/// snapshot triggers.
#[derive(Debug, Clone, Default)]
pub struct LoadOutcome {
    /// Records, batches or snapshot records skipped, in order.
    pub faults: Vec<LoadFault>,
    /// Bytes of the new data batches replayed (control batches and batches a loaded snapshot
    /// already covers do not count): what Kafka's `SnapshotGenerator` counts toward
    /// `metadata.log.max.record.bytes.between.snapshots`.
    pub data_bytes: u64,
    /// Whether this call ended the catching-up phase.
    pub caught_up: bool,
}

/// A node's metadata loader (Kafka 3.9's `MetadataLoader`), sans-IO: the runtime hands it
/// what the Raft layer delivers ([`Self::handle_commit`], [`Self::handle_load_snapshot`],
/// [`Self::handle_leader_change`]) with the current time and high watermark, and it calls the
/// [`MetadataPublisher`]s registered at construction, in order.
///
/// Catching up: nothing is published until everything below the high watermark the replica
/// knows has been loaded (after a restart the log replays in chunks as the high watermark
/// becomes known, and an image built from the first chunk alone would make a broker act on
/// stale metadata, e.g. treat the partitions of topics created later in the log as strays).
/// Publications made meanwhile are held and handed over in log order once caught up.
pub struct MetadataLoader {
    batches: MetadataBatchLoader,
    publishers: Vec<Box<dyn MetadataPublisher>>,
    /// Offset after the last batch (data or control) delivered.
    delivered_end: i64,
    caught_up: bool,
    /// Publications made while catching up, in order.
    held: Vec<(Publication, LoaderManifest)>,
    leader_and_epoch: LeaderAndEpoch,
    /// Data batches, bytes and first-batch time of the delta being built.
    pending_batches: usize,
    pending_bytes: u64,
    pending_since: Option<Instant>,
    /// Images handed to the publishers.
    published: u64,
    closed: bool,
}

impl std::fmt::Debug for MetadataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataLoader")
            .field(
                "publishers",
                &self.publishers.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("delivered_end", &self.delivered_end)
            .field("caught_up", &self.caught_up)
            .finish_non_exhaustive()
    }
}

impl MetadataLoader {
    /// A loader starting from the empty image, publishing to `publishers` in this order.
    #[must_use]
    pub fn new(publishers: Vec<Box<dyn MetadataPublisher>>) -> Self {
        MetadataLoader {
            batches: MetadataBatchLoader::new(MetadataImage::empty()),
            publishers,
            delivered_end: 0,
            caught_up: false,
            held: Vec::new(),
            leader_and_epoch: LeaderAndEpoch::default(),
            pending_batches: 0,
            pending_bytes: 0,
            pending_since: None,
            published: 0,
            closed: false,
        }
    }

    /// The names of the registered publishers, in call order.
    #[must_use]
    pub fn publisher_names(&self) -> Vec<&str> {
        self.publishers.iter().map(|p| p.name()).collect()
    }

    /// The last image built (published, or held while catching up).
    #[must_use]
    pub fn image(&self) -> &MetadataImage {
        self.batches.image()
    }

    /// Whether the loader has caught up with the high watermark (and publishes).
    #[must_use]
    pub fn is_caught_up(&self) -> bool {
        self.caught_up
    }

    /// Offset after the last batch delivered (data or control).
    #[must_use]
    pub fn delivered_end(&self) -> i64 {
        self.delivered_end
    }

    /// Images handed to the publishers so far.
    #[must_use]
    pub fn published(&self) -> u64 {
        self.published
    }

    /// The highest offset the publishers have seen applied, for a broker's heartbeats
    /// (`CurrentMetadataOffset`): every delivered batch, unless a transaction holds records
    /// back (then the published image's end). `None` while catching up or before any record.
    #[must_use]
    pub fn applied_offset(&self) -> Option<i64> {
        if !self.caught_up {
            return None;
        }
        let offset = if self.batches.in_transaction() {
            self.batches.image().provenance.last_contained_offset
        } else {
            self.delivered_end - 1
        };
        (offset >= 0).then_some(offset)
    }

    /// The metadata log's leader changed: the publishers hear it at once, and later log-delta
    /// manifests carry it.
    pub fn handle_leader_change(&mut self, leader_and_epoch: LeaderAndEpoch) {
        if self.closed {
            return;
        }
        self.leader_and_epoch = leader_and_epoch;
        for publisher in &mut self.publishers {
            publisher.on_controller_change(leader_and_epoch);
        }
    }

    /// Loads committed `batches` (in offset order) at `now`, publishes what they complete,
    /// and ends the catching-up phase once `high_watermark` is reached. Batches below the
    /// delivered end (covered by a loaded snapshot) are skipped; control batches only advance
    /// it. A batch or record that cannot be loaded is skipped and reported.
    pub fn handle_commit(
        &mut self,
        now: Instant,
        batches: &[RecordBatch],
        high_watermark: i64,
    ) -> LoadOutcome {
        let mut outcome = LoadOutcome::default();
        if self.closed {
            return outcome;
        }
        for batch in batches {
            self.load_batch(now, batch, &mut outcome);
        }
        if let Some(publication) = self.batches.maybe_flush() {
            self.publish_log_delta(now, publication);
        }
        outcome.caught_up = self.maybe_caught_up(high_watermark);
        outcome
    }

    /// Loads a snapshot whose framed record values are `values` (in snapshot order), ending
    /// at `provenance`, in place of the image (Kafka's `handleLoadSnapshot`). `started` is when
    /// reading it began (for the manifest's elapsed time).
    pub fn handle_load_snapshot(
        &mut self,
        started: Instant,
        now: Instant,
        values: &[Bytes],
        provenance: MetadataProvenance,
        high_watermark: i64,
    ) -> LoadOutcome {
        let mut outcome = LoadOutcome::default();
        if self.closed {
            return outcome;
        }
        let mut records = Vec::with_capacity(values.len());
        for (index, value) in values.iter().enumerate() {
            match ApiMessageAndVersion::decode(value) {
                Ok(framed) => records.push(framed.record),
                Err(source) => outcome
                    .faults
                    .push(LoadFault::SnapshotDecode { index, source }),
            }
        }
        let (publication, faults) = self.batches.load_snapshot(&records, provenance);
        outcome.faults.extend(faults);
        self.delivered_end = provenance.last_contained_offset + 1;
        // Whatever was loaded but not yet published is superseded by the snapshot.
        self.pending_batches = 0;
        self.pending_bytes = 0;
        self.pending_since = None;
        info!(
            offset = provenance.last_contained_offset,
            epoch = provenance.last_contained_epoch,
            records = records.len(),
            "the metadata loader loaded a snapshot"
        );
        self.publish(
            publication,
            LoaderManifest::Snapshot {
                provenance,
                elapsed: now.saturating_duration_since(started),
            },
        );
        outcome.caught_up = self.maybe_caught_up(high_watermark);
        outcome
    }

    /// Closes every publisher (in order); nothing is published afterwards.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        for publisher in &mut self.publishers {
            publisher.close();
        }
    }

    fn load_batch(&mut self, now: Instant, batch: &RecordBatch, outcome: &mut LoadOutcome) {
        if batch.next_offset() <= self.delivered_end {
            // Already covered by a loaded snapshot.
            return;
        }
        self.delivered_end = batch.next_offset();
        if batch.is_control() {
            return;
        }
        let size = u64::try_from(batch.size_in_bytes()).unwrap_or(u64::MAX);
        outcome.data_bytes = outcome.data_bytes.saturating_add(size);
        self.pending_batches += 1;
        self.pending_bytes = self.pending_bytes.saturating_add(size);
        self.pending_since.get_or_insert(now);
        let base_offset = batch.base_offset();
        let records = match batch.records() {
            Ok(records) => records,
            Err(source) => {
                outcome.faults.push(LoadFault::Batch {
                    base_offset,
                    source,
                });
                return;
            }
        };
        let mut decoded = Vec::with_capacity(records.len());
        for record in &records {
            let offset = base_offset + i64::from(record.offset_delta);
            match record.value.as_deref().map(ApiMessageAndVersion::decode) {
                Some(Ok(framed)) => decoded.push(framed.record),
                Some(Err(source)) => outcome.faults.push(LoadFault::Decode { offset, source }),
                None => outcome.faults.push(LoadFault::NoValue { offset }),
            }
        }
        let loaded = self.batches.load_batch(
            base_offset,
            batch.partition_leader_epoch(),
            batch.max_timestamp(),
            &decoded,
        );
        outcome.faults.extend(loaded.faults);
        for publication in loaded.publications {
            self.publish_log_delta(now, publication);
        }
    }

    fn publish_log_delta(&mut self, now: Instant, publication: Publication) {
        let manifest = LoaderManifest::LogDelta {
            provenance: publication.image.provenance,
            leader_and_epoch: self.leader_and_epoch,
            num_batches: std::mem::take(&mut self.pending_batches),
            num_bytes: std::mem::take(&mut self.pending_bytes),
            elapsed: self
                .pending_since
                .take()
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since)),
        };
        self.publish(publication, manifest);
    }

    /// Hands `publication` to the publishers, or holds it while catching up.
    fn publish(&mut self, publication: Publication, manifest: LoaderManifest) {
        if !self.caught_up {
            self.held.push((publication, manifest));
            return;
        }
        debug!(
            offset = manifest.provenance().last_contained_offset,
            snapshot = manifest.is_snapshot(),
            "publishing a new image"
        );
        for publisher in &mut self.publishers {
            publisher.on_metadata_update(&publication.delta, &publication.image, &manifest);
        }
        self.published += 1;
    }

    /// Ends the catching-up phase once everything below `high_watermark` is loaded, handing
    /// over the held publications. Returns whether it ended now.
    fn maybe_caught_up(&mut self, high_watermark: i64) -> bool {
        if self.caught_up || high_watermark <= 0 || self.delivered_end < high_watermark {
            return false;
        }
        self.caught_up = true;
        info!(
            high_watermark,
            publications = self.held.len(),
            publishers = ?self.publisher_names(),
            "the metadata loader caught up with the high watermark"
        );
        for (publication, manifest) in std::mem::take(&mut self.held) {
            self.publish(publication, manifest);
        }
        true
    }
}
