//! AllocateProducerIds: producer ids handed to brokers in blocks of 1000 (Kafka 3.9
//! `ProducerIdControlManager`, facts §3.3 `ProducerIdsRecord`).
//!
//! The controller keeps only the first id of the next block. A request from a broker with its
//! current broker epoch gets `[next, next + 1000)` and writes a `ProducerIdsRecord` whose
//! `NextProducerId` is `next + 1000`; replaying that record (on every controller) moves the
//! counter. The block is only handed out once the record commits, so no id is ever given twice.

use kafka_protocol::messages::{AllocateProducerIdsResponse, ProducerId};
use krust_metadata::ApiMessageAndVersion;
use krust_metadata::image::producer_ids::ProducerIdsImage;
use krust_metadata::records::{MetadataRecord, ProducerIdsRecord};
use thiserror::Error;
use tracing::debug;

use crate::error::ControllerError;
use crate::registration::ClusterView;

/// Ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// Ids `[first_producer_id, first_producer_id + size)` for one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdsBlock {
    /// The broker the block is for.
    pub assigned_broker_id: i32,
    /// First id of the block.
    pub first_producer_id: i64,
    /// Number of ids.
    pub size: i32,
}

impl ProducerIdsBlock {
    /// The first id after this block.
    #[must_use]
    pub fn next_block_first_id(&self) -> i64 {
        self.first_producer_id + i64::from(self.size)
    }

    /// The AllocateProducerIds response carrying this block.
    #[must_use]
    pub fn to_response(&self) -> AllocateProducerIdsResponse {
        AllocateProducerIdsResponse::default()
            .with_producer_id_start(ProducerId(self.first_producer_id))
            .with_producer_id_len(self.size)
    }
}

/// A `ProducerIdsRecord` that would move the counter backwards: the log is inconsistent (a
/// controller fault, never a client error).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "Next Producer ID from replayed record ({replayed}) is not greater than current next Producer ID ({current})"
)]
pub struct ProducerIdsReplayError {
    /// `NextProducerId` of the record.
    pub replayed: i64,
    /// The counter before it.
    pub current: i64,
}

/// The next producer-id block, as replayed from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerIdControl {
    next_producer_id: i64,
    /// Broker epoch of the last allocation (kept for snapshots, as Kafka does).
    last_broker_epoch: i64,
}

impl Default for ProducerIdControl {
    fn default() -> Self {
        Self::new(0)
    }
}

impl ProducerIdControl {
    /// A counter whose next block starts at `next_producer_id` (0 on a new cluster; the
    /// `ProducerIdsImage` value on a loaded one).
    ///
    /// # Panics
    /// If `next_producer_id` is negative (an image invariant).
    #[must_use]
    pub fn new(next_producer_id: i64) -> Self {
        assert!(next_producer_id >= 0, "negative next producer id");
        Self {
            next_producer_id,
            last_broker_epoch: -1,
        }
    }

    /// The counter a loaded image implies (its -1, "no block allocated yet", means 0).
    #[must_use]
    pub fn from_image(image: &ProducerIdsImage) -> Self {
        Self::new(image.next_producer_id.max(0))
    }

    /// First id of the next block.
    #[must_use]
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    /// A block for `broker_id` and the record that reserves it. Does not move the counter:
    /// replaying the record does.
    ///
    /// # Errors
    /// `STALE_BROKER_EPOCH` when the broker is not registered or `broker_epoch` is not its
    /// current one; `UNKNOWN_SERVER_ERROR` when the next block would pass `i64::MAX`.
    pub fn generate_next_block(
        &self,
        view: &impl ClusterView,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<(ProducerIdsBlock, Vec<ApiMessageAndVersion>), ControllerError> {
        let registered = view
            .broker(broker_id)
            .ok_or(ControllerError::UnknownBrokerEpoch { broker_id })?;
        if registered.broker_epoch != broker_epoch {
            return Err(ControllerError::StaleBrokerEpoch {
                broker_id,
                expected: registered.broker_epoch,
                got: broker_epoch,
            });
        }
        if self.next_producer_id > i64::MAX - i64::from(PRODUCER_ID_BLOCK_SIZE) {
            return Err(ControllerError::ProducerIdsExhausted);
        }
        let block = ProducerIdsBlock {
            assigned_broker_id: broker_id,
            first_producer_id: self.next_producer_id,
            size: PRODUCER_ID_BLOCK_SIZE,
        };
        debug!(
            broker_id,
            first = block.first_producer_id,
            "producer id block"
        );
        let record = ProducerIdsRecord {
            broker_id,
            broker_epoch,
            next_producer_id: block.next_block_first_id(),
            unknown_tagged_fields: Vec::new(),
        };
        Ok((
            block,
            vec![ApiMessageAndVersion::new(
                MetadataRecord::ProducerIds(record),
                0,
            )],
        ))
    }

    /// Applies a `ProducerIdsRecord`.
    ///
    /// # Errors
    /// [`ProducerIdsReplayError`] when the record does not move the counter forward; nothing
    /// changes.
    pub fn replay(&mut self, record: &ProducerIdsRecord) -> Result<(), ProducerIdsReplayError> {
        if record.next_producer_id <= self.next_producer_id {
            return Err(ProducerIdsReplayError {
                replayed: record.next_producer_id,
                current: self.next_producer_id,
            });
        }
        self.next_producer_id = record.next_producer_id;
        self.last_broker_epoch = record.broker_epoch;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use krust_metadata::MetadataVersion;
    use krust_metadata::image::features::ZkMigrationState;
    use uuid::Uuid;

    use super::*;
    use crate::registration::RegisteredBroker;

    /// Brokers 1 (epoch 10) and 2 (epoch 20).
    struct TwoBrokers;

    impl ClusterView for TwoBrokers {
        fn cluster_id(&self) -> &str {
            "c"
        }
        fn metadata_version(&self) -> MetadataVersion {
            MetadataVersion::LATEST_PRODUCTION
        }
        fn finalized_features(&self) -> BTreeMap<String, i16> {
            BTreeMap::new()
        }
        fn zk_migration_state(&self) -> ZkMigrationState {
            ZkMigrationState::None
        }
        fn zk_migration_enabled(&self) -> bool {
            false
        }
        fn broker(&self, broker_id: i32) -> Option<RegisteredBroker> {
            matches!(broker_id, 1 | 2).then(|| RegisteredBroker {
                broker_epoch: i64::from(broker_id) * 10,
                incarnation_id: Uuid::nil(),
            })
        }
        fn directory_owner(&self, _directory: Uuid) -> Option<i32> {
            None
        }
    }

    fn record(records: &[ApiMessageAndVersion]) -> &ProducerIdsRecord {
        match &records[0].record {
            MetadataRecord::ProducerIds(r) => r,
            other => panic!("expected ProducerIdsRecord, got {other:?}"),
        }
    }

    #[test]
    fn blocks_of_1000_follow_each_other_once_replayed() {
        let mut control = ProducerIdControl::default();
        let mut starts = Vec::new();
        for (broker, epoch) in [(1, 10), (2, 20), (1, 10)] {
            let (block, records) = control
                .generate_next_block(&TwoBrokers, broker, epoch)
                .expect("current epoch");
            assert_eq!(block.size, 1000);
            assert_eq!(block.assigned_broker_id, broker);
            let r = record(&records);
            assert_eq!((r.broker_id, r.broker_epoch), (broker, epoch));
            assert_eq!(r.next_producer_id, block.first_producer_id + 1000);
            records[0].encode().expect("encodable");
            control.replay(r).expect("moves forward");
            starts.push(block.first_producer_id);
            let response = block.to_response();
            assert_eq!(
                (response.producer_id_start.0, response.producer_id_len),
                (block.first_producer_id, 1000)
            );
        }
        assert_eq!(starts, vec![0, 1000, 2000]);
        assert_eq!(control.next_producer_id(), 3000);
    }

    #[test]
    fn an_empty_image_starts_at_zero() {
        let control = ProducerIdControl::from_image(&ProducerIdsImage::default());
        assert_eq!(control.next_producer_id(), 0);
        let loaded = ProducerIdControl::from_image(&ProducerIdsImage {
            next_producer_id: 7000,
        });
        assert_eq!(loaded.next_producer_id(), 7000);
    }

    #[test]
    fn a_block_is_not_reserved_until_its_record_is_replayed() {
        let control = ProducerIdControl::new(5000);
        let (a, _) = control.generate_next_block(&TwoBrokers, 1, 10).expect("ok");
        let (b, _) = control.generate_next_block(&TwoBrokers, 2, 20).expect("ok");
        assert_eq!(
            a.first_producer_id, b.first_producer_id,
            "only the log moves the counter"
        );
    }

    #[test]
    fn stale_or_unknown_broker_epochs_are_refused() {
        let control = ProducerIdControl::default();
        let err = control
            .generate_next_block(&TwoBrokers, 1, 9)
            .expect_err("old epoch");
        assert_eq!(
            err,
            ControllerError::StaleBrokerEpoch {
                broker_id: 1,
                expected: 10,
                got: 9
            }
        );
        assert_eq!(err.code(), 77);
        let err = control
            .generate_next_block(&TwoBrokers, 3, 30)
            .expect_err("unregistered");
        assert_eq!(err.code(), 77);
    }

    #[test]
    fn the_id_space_runs_out_with_unknown_server_error() {
        let control = ProducerIdControl::new(i64::MAX - 999);
        let err = control
            .generate_next_block(&TwoBrokers, 1, 10)
            .expect_err("exhausted");
        assert_eq!(err.code(), -1);
        let last = ProducerIdControl::new(i64::MAX - 1000);
        let (block, _) = last
            .generate_next_block(&TwoBrokers, 1, 10)
            .expect("last block fits");
        assert_eq!(block.next_block_first_id(), i64::MAX);
    }

    #[test]
    fn replaying_a_record_that_goes_backwards_is_an_error_and_changes_nothing() {
        let mut control = ProducerIdControl::new(2000);
        let backwards = ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 10,
            next_producer_id: 2000,
            unknown_tagged_fields: Vec::new(),
        };
        let err = control.replay(&backwards).expect_err("not forward");
        assert_eq!(
            err,
            ProducerIdsReplayError {
                replayed: 2000,
                current: 2000
            }
        );
        assert_eq!(control.next_producer_id(), 2000);
    }
}
