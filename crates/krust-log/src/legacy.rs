//! Legacy message sets: magic 0 and magic 1 (Kafka's `LegacyRecord`,
//! `AbstractLegacyRecordBatch`), as written by Kafka before 0.11 or by a ZooKeeper-mode broker
//! with `message.format.version` < 0.11 (honoured while `inter.broker.protocol.version` < 3.0).
//! Kafka 3.9 still reads them, so a krust broker taking over such a log dir must too.
//!
//! One entry ("shallow message") on disk:
//!
//! ```text
//!  0 offset i64 | 8 size i32 | 12 crc u32 | 16 magic i8 | 17 attributes i8
//!  [18 timestamp i64 — magic 1 only] | keyLength i32 | key | valueLength i32 | value
//! ```
//!
//! `size` counts the bytes after it; the CRC is CRC-32 (IEEE, not the v2 CRC-32C) over the
//! bytes from `magic` to the end. The first 17 bytes line up with a v2 batch header
//! (`baseOffset`, `batchLength`, 4 bytes, `magic`), which is how a reader tells them apart.
//!
//! A compressed entry (attributes bits 0–2: gzip 1, snappy 2, lz4 3; zstd needs magic 2) is a
//! *wrapper*: its value is a compressed message set of uncompressed entries of the same magic,
//! and its offset is the offset of the **last** inner message. Inner offsets are absolute in
//! magic 0 and relative (0, 1, …) in magic 1, where the absolute offset is
//! `wrapper offset - last inner relative offset + inner relative offset`. A magic-1 wrapper with
//! the LogAppendTime attribute (bit 3) gives its timestamp to every inner message.
//!
//! krust-log recognises legacy entries wherever it scans a segment (recovery, index rebuilding,
//! offset lookups: an entry's "last offset" is its offset, and the base offset of a wrapper,
//! unknown without decompressing it, is taken to be its offset too, which is all a lookup by
//! last offset needs). [`LegacyEntry`] decodes them: [`LegacyEntry::records`] gives an entry's
//! messages, inflating a wrapper's value with [`crate::compression`] (gzip, snappy, and lz4 as
//! magic 1 writes it: magic 0's lz4 frames carry a wrong header checksum, which the reader
//! refuses).

use bytes::Bytes;

use crate::batch::{
    BatchError, Compression, LOG_OVERHEAD, NO_TIMESTAMP, RecordDefect, TimestampType,
};

/// Magic 0 (Kafka 0.8–0.9): no timestamp.
pub const MAGIC_V0: i8 = 0;
/// Magic 1 (Kafka 0.10): a timestamp and its type.
pub const MAGIC_V1: i8 = 1;
/// Bytes after the log overhead of a magic-0 entry with null key and value
/// (Kafka's `LegacyRecord.RECORD_OVERHEAD_V0`).
pub const RECORD_OVERHEAD_V0: usize = 14;
/// The same for magic 1 (`LegacyRecord.RECORD_OVERHEAD_V1`).
pub const RECORD_OVERHEAD_V1: usize = 22;

const OFFSET_OFFSET: usize = 0;
const SIZE_OFFSET: usize = 8;
const CRC_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const ATTRIBUTES_OFFSET: usize = 17;
const TIMESTAMP_OFFSET: usize = 18;
const COMPRESSION_MASK: u8 = 0x07;
const TIMESTAMP_TYPE_MASK: u8 = 0x08;

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), Kafka's `Crc32` for legacy entries.
#[must_use]
pub fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The legacy magic of the entry at the front of `buf`, if its magic byte is 0 or 1.
#[must_use]
pub fn legacy_magic(buf: &[u8]) -> Option<i8> {
    match buf.get(MAGIC_OFFSET).map(|&m| m as i8) {
        Some(m @ (MAGIC_V0 | MAGIC_V1)) => Some(m),
        _ => None,
    }
}

/// Bytes after the log overhead that an entry of `magic` has at least.
#[must_use]
pub fn record_overhead(magic: i8) -> usize {
    if magic == MAGIC_V0 {
        RECORD_OVERHEAD_V0
    } else {
        RECORD_OVERHEAD_V1
    }
}

/// Size (log overhead included) of the legacy entry at the front of `buf`, from its size field,
/// after checking it holds at least the header of its magic and is at most `max_bytes`. Needs
/// 17 bytes (through the magic byte), not the whole entry.
///
/// # Errors
/// [`BatchError::Truncated`], [`BatchError::InvalidLength`], [`BatchError::TooLarge`], or
/// [`BatchError::UnsupportedMagic`] if the magic is not 0 or 1.
pub fn peek_entry_size(buf: &[u8], max_bytes: usize) -> Result<usize, BatchError> {
    if buf.len() <= MAGIC_OFFSET {
        return Err(BatchError::Truncated {
            need: MAGIC_OFFSET + 1,
            have: buf.len(),
        });
    }
    let magic = legacy_magic(buf).ok_or(BatchError::UnsupportedMagic {
        magic: buf[MAGIC_OFFSET] as i8,
    })?;
    let size_field = be_i32(buf, SIZE_OFFSET);
    let min = record_overhead(magic);
    if size_field < 0 || (size_field as usize) < min {
        return Err(BatchError::InvalidLength {
            batch_length: size_field,
            min,
        });
    }
    let size = size_field as usize + LOG_OVERHEAD;
    if size > max_bytes {
        return Err(BatchError::TooLarge {
            size,
            max: max_bytes,
        });
    }
    Ok(size)
}

/// One message of a legacy message set, as a consumer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyRecord {
    /// Absolute offset.
    pub offset: i64,
    /// `NO_TIMESTAMP` (-1) in magic 0.
    pub timestamp: i64,
    /// `None` in magic 0 (Kafka's `NoTimestampType`).
    pub timestamp_type: Option<TimestampType>,
    /// The key, if not null.
    pub key: Option<Bytes>,
    /// The value, if not null.
    pub value: Option<Bytes>,
}

/// One legacy entry (log overhead included) whose size, magic, codec and CRC-32 were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyEntry {
    bytes: Bytes,
}

impl LegacyEntry {
    /// Parses the entry at the front of `buf`, returning it and the bytes after it. Checks, in
    /// Kafka's order: the size field, that the whole entry is present, the CRC-32, and the
    /// compression codec (0–3).
    ///
    /// # Errors
    /// A [`BatchError`] naming the first check that failed.
    pub fn parse(buf: Bytes, max_bytes: usize) -> Result<(LegacyEntry, Bytes), BatchError> {
        let size = peek_entry_size(&buf, max_bytes)?;
        if buf.len() < size {
            return Err(BatchError::Truncated {
                need: size,
                have: buf.len(),
            });
        }
        let mut bytes = buf;
        let rest = bytes.split_off(size);
        let entry = LegacyEntry { bytes };
        let (stored, computed) = (entry.crc(), crc32(&entry.bytes[MAGIC_OFFSET..]));
        if stored != computed {
            return Err(BatchError::CrcMismatch {
                base_offset: entry.offset(),
                stored,
                computed,
            });
        }
        let codec = entry.attributes() & COMPRESSION_MASK;
        if codec > Compression::Lz4.id() {
            return Err(BatchError::UnknownCompression { codec });
        }
        // Key and value lengths must fit the entry.
        entry.key_value()?;
        Ok((entry, rest))
    }

    /// The entry's offset: the message's, or a wrapper's last inner offset (Kafka's
    /// `lastOffset`).
    #[must_use]
    pub fn offset(&self) -> i64 {
        be_i64(&self.bytes, OFFSET_OFFSET)
    }

    /// 0 or 1.
    #[must_use]
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC_OFFSET] as i8
    }

    /// The attributes byte.
    #[must_use]
    pub fn attributes(&self) -> u8 {
        self.bytes[ATTRIBUTES_OFFSET]
    }

    /// The codec of a wrapper (`None` for a plain message).
    #[must_use]
    pub fn compression(&self) -> Compression {
        Compression::from_id(self.attributes() & COMPRESSION_MASK).unwrap_or(Compression::None)
    }

    /// `None` in magic 0.
    #[must_use]
    pub fn timestamp_type(&self) -> Option<TimestampType> {
        (self.magic() == MAGIC_V1).then(|| {
            if self.attributes() & TIMESTAMP_TYPE_MASK != 0 {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            }
        })
    }

    /// The timestamp (magic 1), `NO_TIMESTAMP` in magic 0. For a wrapper, Kafka's max
    /// timestamp of the entry.
    #[must_use]
    pub fn timestamp(&self) -> i64 {
        if self.magic() == MAGIC_V1 {
            be_i64(&self.bytes, TIMESTAMP_OFFSET)
        } else {
            NO_TIMESTAMP
        }
    }

    /// The stored CRC-32.
    #[must_use]
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes([
            self.bytes[CRC_OFFSET],
            self.bytes[CRC_OFFSET + 1],
            self.bytes[CRC_OFFSET + 2],
            self.bytes[CRC_OFFSET + 3],
        ])
    }

    /// Total size, log overhead included.
    #[must_use]
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes as stored.
    #[must_use]
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Key and value (a wrapper's value is its compressed inner message set).
    ///
    /// # Errors
    /// [`BatchError::InvalidRecord`] if a length runs past the entry or bytes are left over.
    pub fn key_value(&self) -> Result<(Option<Bytes>, Option<Bytes>), BatchError> {
        let mut at = LOG_OVERHEAD + record_overhead(self.magic()) - 8;
        let key = self.bytes_field(&mut at)?;
        let value = self.bytes_field(&mut at)?;
        if at != self.bytes.len() {
            return Err(BatchError::TrailingBytes {
                count: 1,
                trailing: self.bytes.len() - at,
            });
        }
        Ok((key, value))
    }

    fn bytes_field(&self, at: &mut usize) -> Result<Option<Bytes>, BatchError> {
        let bad = BatchError::InvalidRecord {
            index: 0,
            defect: RecordDefect::PrematureEnd,
        };
        let len_end = at
            .checked_add(4)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(bad.clone())?;
        let len = be_i32(&self.bytes, *at);
        *at = len_end;
        if len < 0 {
            return Ok(None);
        }
        let end = at
            .checked_add(len as usize)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(bad)?;
        let field = self.bytes.slice(*at..end);
        *at = end;
        Ok(Some(field))
    }

    /// The message of an uncompressed entry.
    ///
    /// # Errors
    /// [`BatchError::Compressed`] for a wrapper (use [`LegacyEntry::inner_records`]), or a
    /// malformed key/value.
    pub fn record(&self) -> Result<LegacyRecord, BatchError> {
        if self.compression() != Compression::None {
            return Err(BatchError::Compressed {
                compression: self.compression(),
            });
        }
        let (key, value) = self.key_value()?;
        Ok(LegacyRecord {
            offset: self.offset(),
            timestamp: self.timestamp(),
            timestamp_type: self.timestamp_type(),
            key,
            value,
        })
    }

    /// The messages of this entry: its own message, or a wrapper's inner messages (its value
    /// inflated with at most [`crate::compression::MAX_DECOMPRESSED_BYTES`]).
    ///
    /// # Errors
    /// [`BatchError::Decompress`] for a value that does not inflate, or as
    /// [`LegacyEntry::record`] and [`LegacyEntry::inner_records`].
    pub fn records(&self) -> Result<Vec<LegacyRecord>, BatchError> {
        let codec = self.compression();
        if codec == Compression::None {
            return Ok(vec![self.record()?]);
        }
        let (_, value) = self.key_value()?;
        let value = value.unwrap_or_default();
        let inflated = crate::compression::decompress(
            codec,
            &value,
            crate::compression::MAX_DECOMPRESSED_BYTES,
        )
        .map_err(|e| BatchError::decompress(codec, e))?;
        self.inner_records(Bytes::from(inflated))
    }

    /// The messages of a wrapper, given its value decompressed by the caller: each inner entry
    /// is parsed and CRC-checked, must have the wrapper's magic and no codec, and gets its
    /// absolute offset (and, under LogAppendTime, the wrapper's timestamp).
    ///
    /// # Errors
    /// A [`BatchError`] for a malformed inner entry; [`BatchError::InvalidRecord`] for a magic
    /// mismatch, a nested wrapper or an empty set.
    pub fn inner_records(&self, decompressed: Bytes) -> Result<Vec<LegacyRecord>, BatchError> {
        let invalid = |index: usize| BatchError::InvalidRecord {
            index,
            defect: RecordDefect::PrematureEnd,
        };
        let mut inner = Vec::new();
        let mut rest = decompressed;
        while !rest.is_empty() {
            let (entry, tail) = LegacyEntry::parse(rest, usize::MAX)?;
            if entry.magic() != self.magic() || entry.compression() != Compression::None {
                return Err(invalid(inner.len()));
            }
            inner.push(entry);
            rest = tail;
        }
        let Some(last) = inner.last() else {
            return Err(invalid(0));
        };
        let base = if self.magic() == MAGIC_V1 {
            self.offset() - last.offset()
        } else {
            0
        };
        let log_append_time = self.timestamp_type() == Some(TimestampType::LogAppendTime);
        inner
            .iter()
            .map(|entry| {
                let mut record = entry.record()?;
                record.offset += base;
                if log_append_time {
                    record.timestamp = self.timestamp();
                    record.timestamp_type = Some(TimestampType::LogAppendTime);
                }
                Ok(record)
            })
            .collect()
    }
}

/// One legacy entry's bytes: `offset`, then `magic`, `attributes` (codec | timestamp type),
/// `timestamp` (magic 1 only), key and value, with its CRC-32 (Kafka's `LegacyRecord.write`).
#[must_use]
pub fn encode_entry(
    magic: i8,
    offset: i64,
    attributes: u8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let mut body = vec![magic as u8, attributes];
    if magic == MAGIC_V1 {
        body.extend_from_slice(&timestamp.to_be_bytes());
    }
    for field in [key, value] {
        match field {
            Some(bytes) => {
                body.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                body.extend_from_slice(bytes);
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    let mut out = Vec::with_capacity(LOG_OVERHEAD + 4 + body.len());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&crc32(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_ieee() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn kafka_magic0_entry_from_a_segment_parses() {
        // Offset 0 of a segment Kafka 3.9 wrote with message.format.version=0.9.0: value
        // "none-0", DumpLogSegments: size 32, crc 463836505.
        let bytes = encode_entry(MAGIC_V0, 0, 0, NO_TIMESTAMP, None, Some(b"none-0"));
        assert_eq!(bytes.len(), 32);
        let (entry, rest) = LegacyEntry::parse(Bytes::from(bytes), usize::MAX).expect("valid");
        assert!(rest.is_empty());
        assert_eq!(entry.crc(), 463_836_505);
        let record = entry.record().expect("plain");
        assert_eq!(record.value.as_deref(), Some(&b"none-0"[..]));
        assert_eq!(record.timestamp, NO_TIMESTAMP);
        assert_eq!(record.timestamp_type, None);
    }

    #[test]
    fn bad_entries_are_errors_not_panics() {
        let good = encode_entry(MAGIC_V1, 5, 0, 1_000, Some(b"k"), Some(b"v"));
        for cut in 0..good.len() {
            assert!(LegacyEntry::parse(Bytes::copy_from_slice(&good[..cut]), usize::MAX).is_err());
        }
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            LegacyEntry::parse(Bytes::from(flipped), usize::MAX),
            Err(BatchError::CrcMismatch { .. })
        ));
        // A key length running past the end, with a CRC that matches it.
        let mut body = vec![MAGIC_V0 as u8, 0];
        body.extend_from_slice(&100i32.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        let mut lying = Vec::new();
        lying.extend_from_slice(&0i64.to_be_bytes());
        lying.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
        lying.extend_from_slice(&crc32(&body).to_be_bytes());
        lying.extend_from_slice(&body);
        assert!(matches!(
            LegacyEntry::parse(Bytes::from(lying), usize::MAX),
            Err(BatchError::InvalidRecord { .. })
        ));
    }

    #[test]
    fn a_magic1_wrapper_gives_absolute_offsets_and_log_append_time() {
        let mut inner = Vec::new();
        for i in 0..3i64 {
            inner.extend(encode_entry(
                MAGIC_V1,
                i,
                0,
                10 + i,
                None,
                Some(format!("v{i}").as_bytes()),
            ));
        }
        // Pretend gzip: the caller decompresses; here the "compressed" value is the plain set.
        let wrapper = encode_entry(
            MAGIC_V1,
            42,
            1 | TIMESTAMP_TYPE_MASK,
            99,
            None,
            Some(&inner),
        );
        let (entry, _) = LegacyEntry::parse(Bytes::from(wrapper), usize::MAX).expect("wrapper");
        assert_eq!(entry.compression(), Compression::Gzip);
        assert!(matches!(entry.record(), Err(BatchError::Compressed { .. })));
        let records = entry.inner_records(Bytes::from(inner)).expect("inner");
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [40, 41, 42]);
        assert!(
            records.iter().all(
                |r| r.timestamp == 99 && r.timestamp_type == Some(TimestampType::LogAppendTime)
            )
        );
    }
}

/// One stored unit of a log as a reader meets it: a v2 batch or a legacy entry (a log dir that
/// predates Kafka 0.11 holds both, legacy first).
#[derive(Debug, Clone)]
pub enum LogEntry {
    /// A v2 batch (CRC-32C checked).
    Batch(crate::batch::RecordBatch),
    /// A magic 0/1 entry (CRC-32 checked).
    Legacy(LegacyEntry),
}

impl LogEntry {
    /// The offset after this entry's last record (a legacy wrapper's offset is its last inner
    /// message's).
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        match self {
            LogEntry::Batch(b) => b.next_offset(),
            LogEntry::Legacy(e) => e.offset().saturating_add(1),
        }
    }
}

/// Every whole v2 batch and legacy entry at the front of `buf`, in order, and the error that
/// stopped the reading, if any (a partial entry at the end is not an error).
#[must_use]
pub fn read_log_entries(buf: Bytes, max_bytes: usize) -> (Vec<LogEntry>, Option<BatchError>) {
    let mut entries = Vec::new();
    let mut rest = buf;
    while !rest.is_empty() {
        let parsed = if legacy_magic(&rest).is_some() {
            LegacyEntry::parse(rest.clone(), max_bytes).map(|(e, tail)| (LogEntry::Legacy(e), tail))
        } else {
            crate::batch::RecordBatch::parse(rest.clone(), max_bytes)
                .map(|(b, tail)| (LogEntry::Batch(b), tail))
        };
        match parsed {
            Ok((entry, tail)) => {
                entries.push(entry);
                rest = tail;
            }
            Err(BatchError::Truncated { .. }) => break,
            Err(error) => return (entries, Some(error)),
        }
    }
    (entries, None)
}
