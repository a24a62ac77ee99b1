//! `__transaction_state` records in Kafka 3.9's bytes (`TransactionLog.scala`,
//! `TransactionLogKey.json`, `TransactionLogValue.json`).
//!
//! Key: int16 version 0 + `TransactionalId:string`. Value: int16 version + `ProducerId:int64,
//! ProducerEpoch:int16, TransactionTimeoutMs:int32, TransactionStatus:int8,
//! TransactionPartitions:[]{Topic:string, PartitionIds:[]int32} (null when Empty),
//! TransactionLastUpdateTimestampMs:int64, TransactionStartTimestampMs:int64`. Version 0 is
//! what every production 3.9 cluster writes (version 1, flexible, needs `transaction.version`
//! ≥ 1, not production-ready in 3.9); both are read, only version 0 is written. A null value
//! is a tombstone (the id expired).

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::TopicPartition;
use crate::state::TxnState;

/// The only key version Kafka 3.9 knows.
pub const KEY_VERSION: i16 = 0;
/// The value version written (non-flexible).
pub const VALUE_VERSION: i16 = 0;
/// The highest value version read.
pub const MAX_VALUE_VERSION: i16 = 1;

/// Why a `__transaction_state` record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnRecordError {
    /// The record has no key (Kafka never writes one without).
    #[error("record has no key")]
    MissingKey,
    /// A key version other than 0.
    #[error("unknown key version {version}")]
    UnknownKeyVersion {
        /// The version read.
        version: i16,
    },
    /// A value version other than 0 or 1 (Kafka: "Unknown version … from the transaction log
    /// message value").
    #[error("unknown value version {version} for transactional id {transactional_id:?}")]
    UnknownValueVersion {
        /// The id of the key.
        transactional_id: String,
        /// The version read.
        version: i16,
    },
    /// The bytes end before a field.
    #[error("{what}: cut short at byte {position}")]
    Truncated {
        /// Key or value.
        what: &'static str,
        /// Where the missing field starts.
        position: usize,
    },
    /// A string that is not UTF-8, a negative length where none is allowed, trailing bytes.
    #[error("{what}: {reason} at byte {position}")]
    Malformed {
        /// Key or value.
        what: &'static str,
        /// What is wrong.
        reason: &'static str,
        /// Where.
        position: usize,
    },
    /// A `TransactionStatus` Kafka 3.9 does not know, or one it never writes (Dead,
    /// PrepareEpochFence).
    #[error(
        "transactional id {transactional_id:?}: transaction status {status} is not a stored state"
    )]
    BadStatus {
        /// The id of the key.
        transactional_id: String,
        /// The status byte.
        status: i8,
    },
}

/// A decoded `TransactionLogValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    /// `ProducerId`.
    pub producer_id: i64,
    /// `ProducerEpoch`.
    pub producer_epoch: i16,
    /// `TransactionTimeoutMs`.
    pub timeout_ms: i32,
    /// `TransactionStatus`.
    pub state: TxnState,
    /// `TransactionPartitions` (empty for null).
    pub partitions: BTreeSet<TopicPartition>,
    /// `TransactionLastUpdateTimestampMs`.
    pub last_update_ms: i64,
    /// `TransactionStartTimestampMs`.
    pub start_ms: i64,
}

/// The key bytes of `transactional_id`.
#[must_use]
pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

/// The value bytes (version 0) of `value`. An Empty transaction writes null partitions, as
/// Kafka's `valueToBytes`; partitions are grouped by topic in name order.
#[must_use]
pub fn encode_value(value: &TxnLogValue) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(VALUE_VERSION);
    buf.put_i64(value.producer_id);
    buf.put_i16(value.producer_epoch);
    buf.put_i32(value.timeout_ms);
    buf.put_i8(value.state.id());
    if value.state == TxnState::Empty {
        buf.put_i32(-1);
    } else {
        let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
        for tp in &value.partitions {
            match topics.last_mut() {
                Some((topic, ids)) if *topic == tp.topic => ids.push(tp.partition),
                _ => topics.push((&tp.topic, vec![tp.partition])),
            }
        }
        put_len(&mut buf, topics.len());
        for (topic, ids) in topics {
            put_string(&mut buf, topic);
            put_len(&mut buf, ids.len());
            for id in ids {
                buf.put_i32(id);
            }
        }
    }
    buf.put_i64(value.last_update_ms);
    buf.put_i64(value.start_ms);
    buf.freeze()
}

/// The transactional id of a key.
///
/// # Errors
/// A bad version, short or malformed bytes.
pub fn decode_key(key: &[u8]) -> Result<String, TxnRecordError> {
    let mut r = Reader::new(key, "TransactionLogKey");
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(TxnRecordError::UnknownKeyVersion { version });
    }
    let id = r.string(false)?;
    r.finish()?;
    Ok(id)
}

/// A value (`None` for a tombstone).
///
/// # Errors
/// A bad version, short or malformed bytes, a status Kafka never stores.
pub fn decode_value(
    transactional_id: &str,
    value: Option<&[u8]>,
) -> Result<Option<TxnLogValue>, TxnRecordError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let mut r = Reader::new(value, "TransactionLogValue");
    let version = r.i16()?;
    if !(0..=MAX_VALUE_VERSION).contains(&version) {
        return Err(TxnRecordError::UnknownValueVersion {
            transactional_id: transactional_id.to_string(),
            version,
        });
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let status = r.i8()?;
    let state = match TxnState::from_id(status) {
        Some(s) if s != TxnState::Dead && s != TxnState::PrepareEpochFence => s,
        _ => {
            return Err(TxnRecordError::BadStatus {
                transactional_id: transactional_id.to_string(),
                status,
            });
        }
    };
    let mut partitions = BTreeSet::new();
    if let Some(topics) = r.array_len(flexible)? {
        for _ in 0..topics {
            let topic = r.string(flexible)?;
            let ids = r
                .array_len(flexible)?
                .ok_or(r.malformed("null partition ids"))?;
            for _ in 0..ids {
                let partition = r.i32()?;
                partitions.insert(TopicPartition::new(topic.clone(), partition));
            }
            if flexible {
                r.skip_tags()?;
            }
        }
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    if flexible {
        r.skip_tags()?;
    }
    r.finish()?;
    if state == TxnState::Empty {
        // Kafka ignores the partitions of an Empty value.
        partitions.clear();
    }
    Ok(Some(TxnLogValue {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
    }))
}

fn put_string(buf: &mut BytesMut, s: &str) {
    // Transactional ids and topic names are bounded far below i16::MAX by the request decoder
    // (a string field's length is an int16); a longer one cannot reach here.
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    buf.put_i16(len);
    buf.put_slice(&s.as_bytes()[..len as usize]);
}

fn put_len(buf: &mut BytesMut, len: usize) {
    buf.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader {
            bytes,
            position: 0,
            what,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TxnRecordError> {
        if self.bytes.len() - self.position < n {
            return Err(TxnRecordError::Truncated {
                what: self.what,
                position: self.position,
            });
        }
        let out = &self.bytes[self.position..self.position + n];
        self.position += n;
        Ok(out)
    }

    fn malformed(&self, reason: &'static str) -> TxnRecordError {
        TxnRecordError::Malformed {
            what: self.what,
            reason,
            position: self.position,
        }
    }

    fn i8(&mut self) -> Result<i8, TxnRecordError> {
        Ok(self.take(1)?.get_i8())
    }
    fn i16(&mut self) -> Result<i16, TxnRecordError> {
        Ok(self.take(2)?.get_i16())
    }
    fn i32(&mut self) -> Result<i32, TxnRecordError> {
        Ok(self.take(4)?.get_i32())
    }
    fn i64(&mut self) -> Result<i64, TxnRecordError> {
        Ok(self.take(8)?.get_i64())
    }

    fn uvarint(&mut self) -> Result<u32, TxnRecordError> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed("varint longer than 5 bytes"))
    }

    fn string(&mut self, flexible: bool) -> Result<String, TxnRecordError> {
        let len = if flexible {
            match self.uvarint()? {
                0 => return Err(self.malformed("null string")),
                n => (n - 1) as usize,
            }
        } else {
            let n = self.i16()?;
            usize::try_from(n).map_err(|_| self.malformed("null or negative string length"))?
        };
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.malformed("string is not UTF-8"))
    }

    /// An array length; `None` for null. Bounded by the bytes left (each element is at least
    /// one byte), so a corrupt length cannot make the caller loop for long.
    fn array_len(&mut self, flexible: bool) -> Result<Option<usize>, TxnRecordError> {
        let len = if flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => i64::from(n) - 1,
            }
        } else {
            i64::from(self.i32()?)
        };
        if len < 0 {
            return if len == -1 {
                Ok(None)
            } else {
                Err(self.malformed("negative array length"))
            };
        }
        let len = len as usize;
        if len > self.bytes.len() - self.position {
            return Err(self.malformed("array longer than the bytes left"));
        }
        Ok(Some(len))
    }

    fn skip_tags(&mut self) -> Result<(), TxnRecordError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), TxnRecordError> {
        if self.position != self.bytes.len() {
            return Err(self.malformed("trailing bytes"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(state: TxnState) -> TxnLogValue {
        TxnLogValue {
            producer_id: 4000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state,
            partitions: [("b", 1), ("a", 2), ("a", 0)]
                .iter()
                .map(|(t, p)| TopicPartition::new(*t, *p))
                .collect(),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn key_bytes_are_kafkas() {
        assert_eq!(&encode_key("tx")[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&encode_key("tx")).expect("decodes"), "tx");
    }

    #[test]
    fn value_bytes_are_kafkas_v0() {
        let bytes = encode_value(&value(TxnState::Ongoing));
        let mut expected = vec![0, 0];
        expected.extend_from_slice(&4000i64.to_be_bytes());
        expected.extend_from_slice(&3i16.to_be_bytes());
        expected.extend_from_slice(&60_000i32.to_be_bytes());
        expected.push(1);
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        expected.extend_from_slice(&[0, 1, b'b', 0, 0, 0, 1, 0, 0, 0, 1]);
        expected.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(
            decode_value("t", Some(&bytes)).expect("decodes"),
            Some(value(TxnState::Ongoing))
        );
    }

    #[test]
    fn empty_writes_null_partitions() {
        let mut v = value(TxnState::Empty);
        let bytes = encode_value(&v);
        assert_eq!(&bytes[17..21], &(-1i32).to_be_bytes());
        v.partitions.clear();
        assert_eq!(decode_value("t", Some(&bytes)).expect("decodes"), Some(v));
    }

    #[test]
    fn flexible_v1_is_read() {
        let mut b = vec![0, 1];
        b.extend_from_slice(&7i64.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&1000i32.to_be_bytes());
        b.push(2); // PrepareCommit
        b.extend_from_slice(&[2, 2, b't', 2, 0, 0, 0, 5, 0]); // 1 topic "t", [5], no tags
        b.extend_from_slice(&9i64.to_be_bytes());
        b.extend_from_slice(&8i64.to_be_bytes());
        b.push(0);
        let v = decode_value("x", Some(&b))
            .expect("decodes")
            .expect("not a tombstone");
        assert_eq!(v.state, TxnState::PrepareCommit);
        assert_eq!(v.partitions.len(), 1);
        assert_eq!((v.last_update_ms, v.start_ms), (9, 8));
    }

    #[test]
    fn bad_bytes_are_errors() {
        let good = encode_value(&value(TxnState::Ongoing));
        for cut in 0..good.len() {
            assert!(
                decode_value("t", Some(&good[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        let mut extra = good.to_vec();
        extra.push(0);
        assert!(decode_value("t", Some(&extra)).is_err());
        let mut version = good.to_vec();
        version[1] = 9;
        assert!(matches!(
            decode_value("t", Some(&version)),
            Err(TxnRecordError::UnknownValueVersion { version: 9, .. })
        ));
        let mut status = good.to_vec();
        status[16] = 6;
        assert!(matches!(
            decode_value("t", Some(&status)),
            Err(TxnRecordError::BadStatus { status: 6, .. })
        ));
        let mut huge = good.to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value("t", Some(&huge)).is_err());
        assert!(decode_key(&[0, 1, 0, 0]).is_err());
        assert!(decode_key(&[0, 0, 0xff, 0xff]).is_err());
        assert!(decode_key(&[0, 0, 0, 1, 0xff]).is_err());
        assert_eq!(decode_value("t", None).expect("decodes"), None);
    }
}
