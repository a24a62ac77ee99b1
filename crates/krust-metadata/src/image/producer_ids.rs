//! The producer-id block allocator's state (Kafka's `ProducerIdsImage` / `ProducerIdsDelta`).

use super::writer::{RecordSink, emit};
use crate::records::{MetadataRecord, ProducerIdsRecord};

/// The first producer id of the next block to hand out; -1 before any block was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdsImage {
    /// Next block start, or -1.
    pub next_producer_id: i64,
}

impl Default for ProducerIdsImage {
    fn default() -> Self {
        Self {
            next_producer_id: -1,
        }
    }
}

impl ProducerIdsImage {
    /// Written only once a block was allocated, with broker id and epoch -1 (as Kafka does:
    /// which broker asked is not part of the image).
    pub(crate) fn write(&self, sink: &mut dyn RecordSink) {
        if self.next_producer_id >= 0 {
            emit(
                sink,
                MetadataRecord::ProducerIds(ProducerIdsRecord {
                    broker_id: -1,
                    broker_epoch: -1,
                    next_producer_id: self.next_producer_id,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
        }
    }
}

/// A new next-block start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdsDelta {
    /// The next block start after this delta.
    pub next_producer_id: i64,
}

impl ProducerIdsDelta {
    pub(crate) fn new(image: &ProducerIdsImage) -> Self {
        Self {
            next_producer_id: image.next_producer_id,
        }
    }

    pub(crate) fn replay(&mut self, record: &ProducerIdsRecord) {
        self.next_producer_id = record.next_producer_id;
    }

    /// Ends a snapshot load: without a `ProducerIdsRecord` no block was ever allocated.
    pub(crate) fn finish_snapshot(&mut self, replayed: bool) {
        if !replayed {
            self.next_producer_id = -1;
        }
    }

    pub(crate) fn apply(&self) -> ProducerIdsImage {
        ProducerIdsImage {
            next_producer_id: self.next_producer_id,
        }
    }
}
