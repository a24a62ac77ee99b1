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

use thiserror::Error;

use super::{MetadataDelta, MetadataImage, MetadataProvenance, ReplayError};
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
