//! The `ApiMessageAndVersion` frame that wraps every metadata record in the log (facts §3.4):
//! `frame version: uvarint (= 1)`, `api key: uvarint`, `record version: uvarint`, then the body.
//! The frame is the whole *value* of a v2 record whose key is null.

use bytes::Bytes;
use thiserror::Error;

use crate::codec::{ByteReader, DecodeError, put_unsigned_varint};
use crate::records::{MetadataRecord, MetadataRecordType, RecordError};

/// The only frame version Kafka writes and accepts (0 was the 2.8 preview format).
pub const FRAME_VERSION: u32 = 1;

/// A metadata record with the schema version it is (or will be) written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiMessageAndVersion {
    /// The record.
    pub record: MetadataRecord,
    /// The schema version of the body.
    pub version: i16,
}

/// Why a record value is not a valid metadata frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The frame header (version, api key, record version) is cut short or malformed.
    #[error("malformed metadata record frame")]
    Header(#[source] DecodeError),
    /// The frame version is not 1. Remedy: the value is not a metadata record (or is from the
    /// 2.8 KRaft preview, which Kafka 3.9 does not read either).
    #[error("metadata record frame version {found} is not supported (expected {FRAME_VERSION})")]
    UnsupportedFrameVersion {
        /// The frame version found.
        found: u32,
    },
    /// The api key or record version does not fit in an int16.
    #[error("metadata record frame {field} {value} does not fit in an int16")]
    OutOfRange {
        /// `api key` or `record version`.
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// The body could not be decoded.
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl ApiMessageAndVersion {
    /// Wraps `record` at `version`.
    #[must_use]
    pub fn new(record: MetadataRecord, version: i16) -> Self {
        Self { record, version }
    }

    /// Encodes frame + body: the value of one v2 record.
    ///
    /// # Errors
    /// [`FrameError::Record`] if the record cannot be written at `self.version`.
    pub fn encode(&self) -> Result<Bytes, FrameError> {
        let mut body = Vec::with_capacity(64);
        self.record.encode_body(self.version, &mut body)?;
        // `encode_body` accepted the version, so it is in 0..=max_version and non-negative.
        let version = u32::from(self.version.unsigned_abs());
        let mut out = Vec::with_capacity(body.len() + 4);
        put_unsigned_varint(&mut out, FRAME_VERSION);
        put_unsigned_varint(
            &mut out,
            u32::from(self.record.record_type().api_key().unsigned_abs()),
        );
        put_unsigned_varint(&mut out, version);
        out.extend_from_slice(&body);
        Ok(Bytes::from(out))
    }

    /// Decodes one record value. All bytes must belong to the record.
    ///
    /// # Errors
    /// Any [`FrameError`].
    pub fn decode(value: &[u8]) -> Result<Self, FrameError> {
        let mut reader = ByteReader::new(value);
        let frame_version = reader
            .unsigned_varint("frame version")
            .map_err(FrameError::Header)?;
        if frame_version != FRAME_VERSION {
            return Err(FrameError::UnsupportedFrameVersion {
                found: frame_version,
            });
        }
        let api_key = read_i16(&mut reader, "api key")?;
        let version = read_i16(&mut reader, "record version")?;
        let record_type = MetadataRecordType::from_api_key(api_key)
            .ok_or(RecordError::UnknownType { api_key })?;
        let body = &value[reader.position()..];
        let record = MetadataRecord::decode_body(record_type, version, body)?;
        Ok(Self { record, version })
    }
}

fn read_i16(reader: &mut ByteReader<'_>, field: &'static str) -> Result<i16, FrameError> {
    let value = reader.unsigned_varint(field).map_err(FrameError::Header)?;
    i16::try_from(value).map_err(|_| FrameError::OutOfRange { field, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::FeatureLevelRecord;

    /// The exact value bytes Kafka 3.9's `kafka-storage format` wrote for metadata.version 21.
    const KAFKA_MV21: &[u8] = &[
        0x01, 0x0c, 0x00, 0x11, b'm', b'e', b't', b'a', b'd', b'a', b't', b'a', b'.', b'v', b'e',
        b'r', b's', b'i', b'o', b'n', 0x00, 0x15, 0x00,
    ];

    #[test]
    fn feature_level_record_matches_kafka_bytes() {
        let record = ApiMessageAndVersion::new(
            MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 21)),
            0,
        );
        assert_eq!(record.encode().as_deref(), Ok(KAFKA_MV21));
        assert_eq!(ApiMessageAndVersion::decode(KAFKA_MV21), Ok(record));
    }

    #[test]
    fn frame_version_zero_and_two_are_rejected() {
        for bad in [0u8, 2] {
            let mut value = KAFKA_MV21.to_vec();
            value[0] = bad;
            assert_eq!(
                ApiMessageAndVersion::decode(&value),
                Err(FrameError::UnsupportedFrameVersion {
                    found: u32::from(bad)
                })
            );
        }
    }

    #[test]
    fn unknown_api_key_is_a_typed_error() {
        let value = [0x01, 0x10, 0x00];
        assert_eq!(
            ApiMessageAndVersion::decode(&value),
            Err(FrameError::Record(RecordError::UnknownType { api_key: 16 }))
        );
    }

    #[test]
    fn api_key_beyond_int16_is_rejected() {
        let value = [0x01, 0xff, 0xff, 0x03, 0x00];
        assert_eq!(
            ApiMessageAndVersion::decode(&value),
            Err(FrameError::OutOfRange {
                field: "api key",
                value: 0xffff
            })
        );
    }

    #[test]
    fn garbage_after_the_body_is_rejected() {
        let mut value = KAFKA_MV21.to_vec();
        value.push(0);
        assert!(matches!(
            ApiMessageAndVersion::decode(&value),
            Err(FrameError::Record(RecordError::TrailingBytes {
                trailing: 1,
                ..
            }))
        ));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for len in 0..KAFKA_MV21.len() {
            assert!(
                ApiMessageAndVersion::decode(&KAFKA_MV21[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary record values give a frame or a typed error, never a panic.
        #[test]
        fn arbitrary_values_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ApiMessageAndVersion::decode(&bytes);
        }

        /// FeatureLevelRecords round-trip.
        #[test]
        fn feature_level_records_round_trip(name in "\\PC{0,40}", level in any::<i16>()) {
            let record = ApiMessageAndVersion::new(
                MetadataRecord::FeatureLevel(crate::records::FeatureLevelRecord::new(name, level)),
                0,
            );
            let bytes = record.encode().expect("encodes");
            prop_assert_eq!(ApiMessageAndVersion::decode(&bytes), Ok(record));
        }
    }
}
