//! Transaction markers: the control batches that end a transaction in a partition (Kafka 3.9
//! `EndTransactionMarker`, `ControlRecordType`, `MemoryRecords.withEndTransactionMarker`).
//!
//! A marker is a v2 batch with the transactional and control attributes, uncompressed,
//! CreateTime, the transaction's producer id and epoch, base sequence -1 and one record:
//! key `version:int16 = 0, type:int16` (0 ABORT, 1 COMMIT), value `version:int16 = 0,
//! coordinator_epoch:int32`. Offsets are assigned when it is appended.

use bytes::Bytes;

use crate::batch::{NO_SEQUENCE, RecordBatch, RecordBatchBuilder};

/// Control record type of an ABORT marker.
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type of a COMMIT marker.
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// The content of a COMMIT or ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    /// COMMIT (`true`) or ABORT.
    pub commit: bool,
    /// Epoch of the transaction coordinator that wrote it.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// The marker batch for `producer_id`/`producer_epoch` at `timestamp_ms` (offset 0 until
    /// appended).
    #[must_use]
    pub fn batch(&self, producer_id: i64, producer_epoch: i16, timestamp_ms: i64) -> RecordBatch {
        let kind = if self.commit {
            CONTROL_TYPE_COMMIT
        } else {
            CONTROL_TYPE_ABORT
        };
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        let mut value = Vec::with_capacity(6);
        value.extend_from_slice(&0i16.to_be_bytes());
        value.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        let mut builder = RecordBatchBuilder::new(0)
            .producer(producer_id, producer_epoch, NO_SEQUENCE)
            .transactional(true)
            .control(true);
        builder.append_kv(
            timestamp_ms,
            Some(Bytes::from(key)),
            Some(Bytes::from(value)),
        );
        builder.build()
    }

    /// The marker a control batch holds: `None` for a batch that is not a control batch, has
    /// no records (left by the cleaner), or holds another control type (KRaft's); an
    /// unreadable record, a negative key version or a value too short is `Err`.
    ///
    /// # Errors
    /// A description of the defect.
    pub fn of(batch: &RecordBatch) -> Result<Option<EndTxnMarker>, String> {
        if !batch.is_control() {
            return Ok(None);
        }
        let records = batch.records().map_err(|e| e.to_string())?;
        let Some(record) = records.first() else {
            return Ok(None);
        };
        let key = record.key.as_deref().unwrap_or_default();
        let (Some(version), Some(kind)) = (key.get(0..2), key.get(2..4)) else {
            return Err(format!("control record key of {} bytes", key.len()));
        };
        if i16::from_be_bytes([version[0], version[1]]) < 0 {
            return Err("negative control record key version".to_string());
        }
        let commit = match i16::from_be_bytes([kind[0], kind[1]]) {
            CONTROL_TYPE_ABORT => false,
            CONTROL_TYPE_COMMIT => true,
            _ => return Ok(None),
        };
        let value = record.value.as_deref().unwrap_or_default();
        let Some(epoch) = value.get(2..6) else {
            return Err(format!(
                "end transaction marker value of {} bytes",
                value.len()
            ));
        };
        Ok(Some(EndTxnMarker {
            commit,
            coordinator_epoch: i32::from_be_bytes([epoch[0], epoch[1], epoch[2], epoch[3]]),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_batch_has_kafkas_attributes_and_record() {
        let marker = EndTxnMarker {
            commit: false,
            coordinator_epoch: 7,
        };
        let batch = marker.batch(42, 3, 1_700_000_000_000);
        assert!(batch.is_control() && batch.is_transactional());
        assert_eq!(
            batch.attributes(),
            0x30,
            "transactional + control, no codec, CreateTime"
        );
        assert_eq!((batch.producer_id(), batch.producer_epoch()), (42, 3));
        assert_eq!(batch.base_sequence(), -1);
        assert_eq!(batch.record_count(), 1);
        let record = &batch.records().expect("records")[0];
        assert_eq!(record.key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
        assert_eq!(record.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
        assert_eq!(EndTxnMarker::of(&batch), Ok(Some(marker)));
        let commit = EndTxnMarker {
            commit: true,
            coordinator_epoch: 0,
        };
        assert_eq!(EndTxnMarker::of(&commit.batch(1, 0, 0)), Ok(Some(commit)));
    }
}
