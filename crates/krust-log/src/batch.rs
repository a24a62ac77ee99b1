//! The v2 record batch (magic 2): parse, validate, build, and the in-place rewrites the leader
//! path makes.
//!
//! Byte layout (big-endian; Kafka 3.9 `DefaultRecordBatch`, facts §4.3):
//!
//! ```text
//!  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
//! 21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
//! 43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records
//! ```
//!
//! The CRC-32C covers bytes 21.. (attributes to the end), so `baseOffset` and
//! `partitionLeaderEpoch` can be rewritten without recomputing it. A [`RecordBatch`] always holds
//! a batch whose length, magic and CRC were checked (by [`RecordBatch::parse`] or by
//! [`RecordBatchBuilder::build`]); its records are decoded lazily by [`RecordBatch::records`],
//! which inflates a compressed payload first ([`crate::compression`]).

use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::compression::{self, CodecError, MAX_DECOMPRESSED_BYTES};
use crate::varint::{
    VarintError, read_varint, read_varlong, varint_size, varlong_size, write_varint, write_varlong,
};

/// Bytes before `batchLength`'s coverage starts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, log overhead included (`RECORD_BATCH_OVERHEAD`).
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// The only magic value krust reads and writes.
pub const MAGIC_V2: i8 = 2;
/// Kafka's `RecordBatch.NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Kafka's `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;
/// Kafka's `RecordBatch.NO_PARTITION_LEADER_EPOCH`.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// Largest batch [`RecordBatch::parse_default`] accepts: the size field is an i32, so nothing
/// larger can be framed. Callers that know their limit (`max.message.bytes`, the socket's
/// `socket.request.max.bytes`) pass it to [`RecordBatch::parse`].
pub const MAX_BATCH_BYTES: usize = i32::MAX as usize;

const BASE_OFFSET_OFFSET: usize = 0;
const LENGTH_OFFSET: usize = 8;
const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const BASE_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const PRODUCER_EPOCH_OFFSET: usize = 51;
const BASE_SEQUENCE_OFFSET: usize = 53;
const RECORDS_COUNT_OFFSET: usize = 57;

const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;
const DELETE_HORIZON_FLAG_MASK: i16 = 0x40;

// Kafka error codes of batch failures, from the one table (`krust_net::error_codes`).
pub use krust_net::error_codes::{
    CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP, KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE,
    OFFSET_OUT_OF_RANGE, UNKNOWN_SERVER_ERROR, UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
};

/// Compression codec, attribute bits 0–2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// 0: records are stored as-is.
    None,
    /// 1.
    Gzip,
    /// 2.
    Snappy,
    /// 3.
    Lz4,
    /// 4.
    Zstd,
}

impl Compression {
    /// The attribute value (`CompressionType.id`).
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec for an attribute value, `None` for 5–7 (unassigned).
    #[must_use]
    pub fn from_id(id: u8) -> Option<Compression> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// Attribute bit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Timestamps were set by the producer.
    CreateTime,
    /// The broker set `maxTimestamp` when appending (`message.timestamp.type=LogAppendTime`).
    LogAppendTime,
}

/// What is wrong inside one record of a batch (maps to `INVALID_RECORD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordDefect {
    /// A varint field is cut short or too long.
    Varint(VarintError),
    /// The record's length prefix is negative.
    NegativeLength(i32),
    /// The record claims more bytes than the batch has left.
    LengthBeyondBatch {
        /// Declared record body length.
        length: i32,
        /// Bytes left in the batch.
        available: usize,
    },
    /// The record body ended before all its fields were read.
    PrematureEnd,
    /// Key or value length below -1.
    InvalidFieldLength(i32),
    /// Negative header count.
    NegativeHeaderCount(i32),
    /// Header key length negative (header keys are never null).
    NegativeHeaderKeyLength(i32),
    /// Header key is not UTF-8.
    HeaderKeyNotUtf8,
    /// Leader path: the record's offset delta is not its position in the batch.
    OffsetDeltaNotSequential(i32),
    /// The fields did not use exactly the declared record length.
    SizeMismatch {
        /// Declared body length.
        declared: i32,
        /// Bytes the fields used.
        read: usize,
    },
}

impl fmt::Display for RecordDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordDefect::Varint(e) => write!(f, "{e}"),
            RecordDefect::NegativeLength(n) => write!(f, "negative record length {n}"),
            RecordDefect::LengthBeyondBatch { length, available } => write!(
                f,
                "record length {length} exceeds the {available} bytes left in the batch"
            ),
            RecordDefect::PrematureEnd => write!(f, "record ended before its last field"),
            RecordDefect::InvalidFieldLength(n) => write!(f, "invalid key/value length {n}"),
            RecordDefect::NegativeHeaderCount(n) => write!(f, "invalid header count {n}"),
            RecordDefect::NegativeHeaderKeyLength(n) => {
                write!(f, "invalid negative header key length {n}")
            }
            RecordDefect::HeaderKeyNotUtf8 => write!(f, "header key is not UTF-8"),
            RecordDefect::OffsetDeltaNotSequential(d) => {
                write!(
                    f,
                    "offset delta {d} is not the record's position in the batch"
                )
            }
            RecordDefect::SizeMismatch { declared, read } => write!(
                f,
                "expected to read {declared} bytes in record payload, but read {read}"
            ),
        }
    }
}

/// Why bytes are not a valid v2 batch, or its records cannot be decoded.
///
/// Each variant maps to a Kafka error code with [`BatchError::kafka_error_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The buffer ends before the batch does (a torn write, or a short network frame).
    /// Remedy: on disk, truncate at `position`; on the wire, reject the request.
    #[error("batch is cut short: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the header says the batch has (or the header size if that is not known yet).
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// `batchLength` is negative or too small to hold the 61-byte header (or, for a legacy
    /// entry, its 14- or 22-byte header).
    #[error(
        "invalid batch length {batch_length}: a batch needs at least {min} bytes after the length field"
    )]
    InvalidLength {
        /// The `batchLength` field.
        batch_length: i32,
        /// Smallest legal value.
        min: usize,
    },
    /// The batch is larger than the caller's limit (`max.message.bytes` or similar).
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Total size including the log overhead.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Magic byte is not 2. Legacy magics 0 and 1 are well formed but not supported by krust
    /// (Kafka 3.9 answers `INVALID_RECORD` to a v3+ produce with them); anything else is
    /// corrupt (Kafka's `FileLogInputStream`: "Invalid magic found in record").
    #[error("unsupported record batch magic {magic}")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// The stored CRC-32C does not match the bytes: corrupt data, never serve it.
    #[error(
        "batch at offset {base_offset}: stored CRC-32C {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        /// `baseOffset` field of the bad batch (itself unverified).
        base_offset: i64,
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// Attribute bits 0–2 hold 5, 6 or 7.
    #[error("unknown compression codec id {codec}")]
    UnknownCompression {
        /// The codec bits.
        codec: u8,
    },
    /// A legacy (magic 0/1) wrapper asked for its single message: its inner messages are
    /// read with `LegacyEntry::inner_records` instead.
    #[error("cannot decode records of a {compression:?}-compressed batch")]
    Compressed {
        /// The batch's codec.
        compression: Compression,
    },
    /// A compressed payload does not inflate: cut short (Kafka: "Incorrect declared batch
    /// size, premature EOF reached", INVALID_RECORD), corrupt (Kafka: "Failed to decompress
    /// record stream", UNKNOWN_SERVER_ERROR) or larger than krust's bound.
    #[error("{compression:?} payload does not decompress ({failure:?}): {reason}")]
    Decompress {
        /// The batch's codec.
        compression: Compression,
        /// Which way it failed.
        failure: DecompressFailure,
        /// What the decoder said.
        reason: String,
    },
    /// Records could not be compressed with the codec (an unsupported level; levels are
    /// validated with the topic config, so this is not expected).
    #[error("cannot compress with {compression:?}: {reason}")]
    CompressFailed {
        /// The codec.
        compression: Compression,
        /// What the encoder said.
        reason: String,
    },
    /// `recordsCount` is negative.
    #[error("invalid record count {count}")]
    InvalidRecordCount {
        /// The field.
        count: i32,
    },
    /// A record inside the batch is malformed.
    #[error("record {index} of the batch is invalid: {defect}")]
    InvalidRecord {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// What is wrong.
        defect: RecordDefect,
    },
    /// Bytes left over after `recordsCount` records.
    #[error("{trailing} bytes left after the {count} declared records")]
    TrailingBytes {
        /// Declared count.
        count: i32,
        /// Bytes left.
        trailing: usize,
    },
}

/// How a compressed payload failed to inflate (see [`BatchError::Decompress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecompressFailure {
    /// The stream ended early.
    Truncated,
    /// The bytes are not a valid stream.
    Corrupt,
    /// It inflates beyond [`MAX_DECOMPRESSED_BYTES`].
    TooLarge,
}

impl BatchError {
    pub(crate) fn decompress(compression: Compression, e: CodecError) -> BatchError {
        let failure = match &e {
            CodecError::Truncated { .. } => DecompressFailure::Truncated,
            CodecError::TooLarge { .. } => DecompressFailure::TooLarge,
            CodecError::Corrupt { .. } | CodecError::Compress { .. } => DecompressFailure::Corrupt,
        };
        BatchError::Decompress {
            compression,
            failure,
            reason: e.to_string(),
        }
    }

    /// The Kafka error code a broker returns for this failure.
    #[must_use]
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            BatchError::Truncated { .. }
            | BatchError::InvalidLength { .. }
            | BatchError::CrcMismatch { .. } => CORRUPT_MESSAGE,
            BatchError::TooLarge { .. } => MESSAGE_TOO_LARGE,
            BatchError::UnsupportedMagic { magic: 0 | 1 } => INVALID_RECORD,
            BatchError::UnsupportedMagic { .. } => CORRUPT_MESSAGE,
            // Kafka 3.9's `CompressionType.forId` throws IllegalArgumentException, which the
            // produce path answers with UNKNOWN_SERVER_ERROR.
            BatchError::UnknownCompression { .. } => UNKNOWN_SERVER_ERROR,
            BatchError::Compressed { .. } => UNSUPPORTED_COMPRESSION_TYPE,
            BatchError::Decompress {
                failure: DecompressFailure::Truncated | DecompressFailure::TooLarge,
                ..
            } => INVALID_RECORD,
            // Kafka wraps the decoder's IOException in a KafkaException.
            BatchError::Decompress {
                failure: DecompressFailure::Corrupt,
                ..
            }
            | BatchError::CompressFailed { .. } => UNKNOWN_SERVER_ERROR,
            BatchError::InvalidRecordCount { .. }
            | BatchError::InvalidRecord { .. }
            | BatchError::TrailingBytes { .. } => INVALID_RECORD,
        }
    }
}

/// A record header. Keys are never null; values may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// UTF-8 key.
    pub key: String,
    /// Value, `None` for a null value (length -1).
    pub value: Option<Bytes>,
}

/// One record inside a v2 batch. Offsets and timestamps are relative to the batch's base.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// `None` for a null key.
    pub key: Option<Bytes>,
    /// `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<Header>,
}

fn nullable_size(field: Option<&[u8]>) -> usize {
    match field {
        None => varint_size(-1),
        Some(b) => varint_size(len_i32(b.len())) + b.len(),
    }
}

/// Lengths inside a batch are i32; a batch is bounded by `MAX_BATCH_BYTES`, so a longer field is
/// a caller bug, not bad input.
fn len_i32(len: usize) -> i32 {
    i32::try_from(len).unwrap_or_else(|_| panic!("field of {len} bytes does not fit a v2 record"))
}

fn write_nullable(field: Option<&[u8]>, out: &mut Vec<u8>) {
    match field {
        None => write_varint(-1, out),
        Some(b) => {
            write_varint(len_i32(b.len()), out);
            out.extend_from_slice(b);
        }
    }
}

impl Record {
    /// Body size: everything after the length varint.
    fn body_size(&self) -> usize {
        1 + varlong_size(self.timestamp_delta)
            + varint_size(self.offset_delta)
            + nullable_size(self.key.as_deref())
            + nullable_size(self.value.as_deref())
            + varint_size(len_i32(self.headers.len()))
            + self
                .headers
                .iter()
                .map(|h| {
                    varint_size(len_i32(h.key.len()))
                        + h.key.len()
                        + nullable_size(h.value.as_deref())
                })
                .sum::<usize>()
    }

    /// Encoded size including the length prefix.
    #[must_use]
    pub fn encoded_size(&self) -> usize {
        let body = self.body_size();
        varint_size(len_i32(body)) + body
    }

    /// Appends the record in v2 format (attributes byte 0).
    ///
    /// # Panics
    /// If a key, value or header is longer than `i32::MAX` bytes (callers bound batch sizes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let body = self.body_size();
        out.reserve(body + 5);
        write_varint(len_i32(body), out);
        out.push(0);
        write_varlong(self.timestamp_delta, out);
        write_varint(self.offset_delta, out);
        write_nullable(self.key.as_deref(), out);
        write_nullable(self.value.as_deref(), out);
        write_varint(len_i32(self.headers.len()), out);
        for h in &self.headers {
            write_varint(len_i32(h.key.len()), out);
            out.extend_from_slice(h.key.as_bytes());
            write_nullable(h.value.as_deref(), out);
        }
    }

    /// Decodes one record from the front of `buf` (a slice of the batch's records area).
    /// Returns the record and the bytes it used.
    fn decode(buf: &Bytes) -> Result<(Record, usize), RecordDefect> {
        let mut headers = Vec::new();
        let view = walk_record(buf, |key, value| {
            headers.push(Header {
                key: key.to_owned(),
                value: value.map(|r| buf.slice(r)),
            });
        })?;
        Ok((
            Record {
                offset_delta: view.offset_delta,
                timestamp_delta: view.timestamp_delta,
                key: view.key.map(|r| buf.slice(r)),
                value: view.value.map(|r| buf.slice(r)),
                headers,
            },
            view.end,
        ))
    }
}

/// What the leader checks of one record (see [`RecordBatch::scan_records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSummary {
    /// The record's offset delta as encoded.
    pub offset_delta: i32,
    /// Its absolute timestamp (`baseTimestamp` + delta).
    pub timestamp: i64,
    /// Whether its key is non-null.
    pub has_key: bool,
}

/// Where the fields of one encoded record are (ranges index the buffer given to
/// [`walk_record`]).
struct RecordView {
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
    /// Bytes the record used, length prefix included.
    end: usize,
}

/// Checks the record at the front of `buf` and locates its fields without copying; headers
/// are handed to `on_header` (key already checked to be UTF-8). One parser serves both
/// [`RecordBatch::records`] and the allocation-free [`RecordBatch::validate_records`].
fn walk_record(
    buf: &[u8],
    mut on_header: impl FnMut(&str, Option<Range<usize>>),
) -> Result<RecordView, RecordDefect> {
    let (length, body_start) = read_varint(buf).map_err(RecordDefect::Varint)?;
    if length < 0 {
        return Err(RecordDefect::NegativeLength(length));
    }
    let body_len = length as usize;
    let available = buf.len() - body_start;
    if body_len > available {
        return Err(RecordDefect::LengthBeyondBatch { length, available });
    }
    let end = body_start + body_len;
    let mut cur = Cursor {
        buf: &buf[..end],
        pos: body_start,
    };
    let _attributes = cur.byte()?;
    let timestamp_delta = cur.varlong()?;
    let offset_delta = cur.varint()?;
    let key = cur.nullable()?;
    let value = cur.nullable()?;
    let header_count = cur.varint()?;
    if header_count < 0 {
        return Err(RecordDefect::NegativeHeaderCount(header_count));
    }
    for _ in 0..header_count {
        let key_len = cur.varint()?;
        if key_len < 0 {
            return Err(RecordDefect::NegativeHeaderKeyLength(key_len));
        }
        let key = cur.take(key_len as usize)?;
        let key = std::str::from_utf8(&buf[key]).map_err(|_| RecordDefect::HeaderKeyNotUtf8)?;
        let value = cur.nullable()?;
        on_header(key, value);
    }
    if cur.pos != end {
        return Err(RecordDefect::SizeMismatch {
            declared: length,
            read: cur.pos - body_start,
        });
    }
    Ok(RecordView {
        offset_delta,
        timestamp_delta,
        key,
        value,
        end,
    })
}

/// Reads fields from `buf[..]` (already cut at the record's end) starting at `pos`.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, RecordDefect> {
        let b = *self.buf.get(self.pos).ok_or(RecordDefect::PrematureEnd)?;
        self.pos += 1;
        Ok(b)
    }
    fn varint(&mut self) -> Result<i32, RecordDefect> {
        let rest = self.buf.get(self.pos..).ok_or(RecordDefect::PrematureEnd)?;
        let (v, n) = read_varint(rest).map_err(|e| match e {
            VarintError::UnexpectedEnd => RecordDefect::PrematureEnd,
            other => RecordDefect::Varint(other),
        })?;
        self.pos += n;
        Ok(v)
    }
    fn varlong(&mut self) -> Result<i64, RecordDefect> {
        let rest = self.buf.get(self.pos..).ok_or(RecordDefect::PrematureEnd)?;
        let (v, n) = read_varlong(rest).map_err(|e| match e {
            VarintError::UnexpectedEnd => RecordDefect::PrematureEnd,
            other => RecordDefect::Varint(other),
        })?;
        self.pos += n;
        Ok(v)
    }
    fn take(&mut self, n: usize) -> Result<Range<usize>, RecordDefect> {
        if self.buf.len() - self.pos < n {
            return Err(RecordDefect::PrematureEnd);
        }
        let range = self.pos..self.pos + n;
        self.pos += n;
        Ok(range)
    }
    fn nullable(&mut self) -> Result<Option<Range<usize>>, RecordDefect> {
        match self.varint()? {
            -1 => Ok(None),
            n if n < -1 => Err(RecordDefect::InvalidFieldLength(n)),
            n => self.take(n as usize).map(Some),
        }
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Size of the batch starting at the front of `buf`, from its length field, after checking the
/// length is sane and below `max_batch_bytes`. Does not need the whole batch to be present.
///
/// # Errors
/// [`BatchError::Truncated`] if fewer than 12 bytes are present, [`BatchError::InvalidLength`]
/// or [`BatchError::TooLarge`] for a bad length field.
///
/// A legacy entry (magic 0 or 1 at byte 16, when 17 bytes are present; see [`crate::legacy`])
/// is framed by its own, smaller minimum size: framing a Fetch response or a segment read
/// walks legacy entries too. [`RecordBatch::parse`] still refuses them
/// ([`BatchError::UnsupportedMagic`]).
pub fn peek_batch_size(buf: &[u8], max_batch_bytes: usize) -> Result<usize, BatchError> {
    if buf.len() < LOG_OVERHEAD {
        return Err(BatchError::Truncated {
            need: LOG_OVERHEAD,
            have: buf.len(),
        });
    }
    if crate::legacy::legacy_magic(buf).is_some() {
        return crate::legacy::peek_entry_size(buf, max_batch_bytes);
    }
    let batch_length = be_i32(buf, LENGTH_OFFSET);
    let min = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD;
    if batch_length < 0 || (batch_length as usize) < min {
        return Err(BatchError::InvalidLength { batch_length, min });
    }
    let size = batch_length as usize + LOG_OVERHEAD;
    if size > max_batch_bytes {
        return Err(BatchError::TooLarge {
            size,
            max: max_batch_bytes,
        });
    }
    Ok(size)
}

/// One v2 record batch, log overhead included, whose framing, magic and CRC-32C are valid.
///
/// Cheap to clone (shares the underlying [`Bytes`]).
#[derive(Clone, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
}

impl fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("partition_leader_epoch", &self.partition_leader_epoch())
            .field("attributes", &self.attributes())
            .field("record_count", &self.record_count())
            .field("size_in_bytes", &self.size_in_bytes())
            .finish()
    }
}

impl RecordBatch {
    /// Parses the batch at the front of `buf`, returning it and the bytes after it.
    ///
    /// Checks, in Kafka's order: a 12-byte log overhead is present, `batchLength` holds at least
    /// the header and the total is at most `max_batch_bytes`, the whole batch is present, magic
    /// is 2, the compression codec is known, and the CRC-32C matches. Records are not decoded.
    ///
    /// # Errors
    /// A [`BatchError`] naming the first check that failed.
    pub fn parse(buf: Bytes, max_batch_bytes: usize) -> Result<(RecordBatch, Bytes), BatchError> {
        let size = peek_batch_size(&buf, max_batch_bytes)?;
        if buf.len() < size {
            return Err(BatchError::Truncated {
                need: size,
                have: buf.len(),
            });
        }
        let mut bytes = buf;
        let rest = bytes.split_off(size);
        let batch = RecordBatch::from_framed(bytes)?;
        Ok((batch, rest))
    }

    /// [`RecordBatch::parse`] with the largest limit the format allows.
    ///
    /// # Errors
    /// See [`RecordBatch::parse`].
    pub fn parse_default(buf: Bytes) -> Result<(RecordBatch, Bytes), BatchError> {
        RecordBatch::parse(buf, MAX_BATCH_BYTES)
    }

    /// Validates a buffer holding exactly one batch (length already checked against the buffer).
    fn from_framed(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let magic = bytes[MAGIC_OFFSET] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic { magic });
        }
        let batch = RecordBatch { bytes };
        let stored = batch.crc();
        let computed = batch.compute_crc();
        if stored != computed {
            return Err(BatchError::CrcMismatch {
                base_offset: batch.base_offset(),
                stored,
                computed,
            });
        }
        let codec = (batch.attributes() & COMPRESSION_CODEC_MASK) as u8;
        if Compression::from_id(codec).is_none() {
            return Err(BatchError::UnknownCompression { codec });
        }
        Ok(batch)
    }

    fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[ATTRIBUTES_OFFSET..])
    }

    /// First offset in the batch.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        be_i64(&self.bytes, BASE_OFFSET_OFFSET)
    }
    /// `batchLength`: bytes after the length field.
    #[must_use]
    pub fn batch_length(&self) -> i32 {
        be_i32(&self.bytes, LENGTH_OFFSET)
    }
    /// `base_offset + last_offset_delta`.
    #[must_use]
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }
    /// The offset after this batch (`last_offset + 1`).
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    /// `lastOffsetDelta` field.
    #[must_use]
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(&self.bytes, LAST_OFFSET_DELTA_OFFSET)
    }
    /// Leader epoch of the leader that appended the batch (-1 if none).
    #[must_use]
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(&self.bytes, PARTITION_LEADER_EPOCH_OFFSET)
    }
    /// Always 2.
    #[must_use]
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC_OFFSET] as i8
    }
    /// Stored CRC-32C.
    #[must_use]
    pub fn crc(&self) -> u32 {
        be_i32(&self.bytes, CRC_OFFSET) as u32
    }
    /// Raw attributes.
    #[must_use]
    pub fn attributes(&self) -> i16 {
        be_i16(&self.bytes, ATTRIBUTES_OFFSET)
    }
    /// Compression codec (validated by parse/build).
    #[must_use]
    pub fn compression(&self) -> Compression {
        // parse and build only produce batches with a known codec.
        Compression::from_id((self.attributes() & COMPRESSION_CODEC_MASK) as u8)
            .unwrap_or(Compression::None)
    }
    /// Timestamp type, attribute bit 3.
    #[must_use]
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Attribute bit 4.
    #[must_use]
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_FLAG_MASK != 0
    }
    /// Attribute bit 5: the batch holds control records (KRaft control records, txn markers).
    #[must_use]
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_FLAG_MASK != 0
    }
    /// Attribute bit 6: `baseTimestamp` is the delete horizon (compaction).
    #[must_use]
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_FLAG_MASK != 0
    }
    /// `baseTimestamp`.
    #[must_use]
    pub fn base_timestamp(&self) -> i64 {
        be_i64(&self.bytes, BASE_TIMESTAMP_OFFSET)
    }
    /// `maxTimestamp` (the append time for `LogAppendTime` batches).
    #[must_use]
    pub fn max_timestamp(&self) -> i64 {
        be_i64(&self.bytes, MAX_TIMESTAMP_OFFSET)
    }
    /// `producerId` (-1 if none).
    #[must_use]
    pub fn producer_id(&self) -> i64 {
        be_i64(&self.bytes, PRODUCER_ID_OFFSET)
    }
    /// `producerEpoch` (-1 if none).
    #[must_use]
    pub fn producer_epoch(&self) -> i16 {
        be_i16(&self.bytes, PRODUCER_EPOCH_OFFSET)
    }
    /// `baseSequence` (-1 if none).
    #[must_use]
    pub fn base_sequence(&self) -> i32 {
        be_i32(&self.bytes, BASE_SEQUENCE_OFFSET)
    }
    /// `recordsCount` as stored (may be inconsistent with the payload until
    /// [`RecordBatch::records`] checks it).
    #[must_use]
    pub fn record_count(&self) -> i32 {
        be_i32(&self.bytes, RECORDS_COUNT_OFFSET)
    }
    /// Total size including the 12-byte log overhead.
    #[must_use]
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }
    /// The whole batch.
    #[must_use]
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
    /// Consumes the batch, returning its bytes.
    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }
    /// The payload after the header: encoded records, or the compressed blob.
    #[must_use]
    pub fn payload(&self) -> Bytes {
        self.bytes.slice(RECORD_BATCH_OVERHEAD..)
    }

    /// The encoded records: the payload itself, or the payload inflated with the batch's codec
    /// (bounded by [`MAX_DECOMPRESSED_BYTES`]).
    ///
    /// # Errors
    /// [`BatchError::Decompress`] when a compressed payload does not inflate.
    pub fn uncompressed_records(&self) -> Result<Bytes, BatchError> {
        let compression = self.compression();
        if compression == Compression::None {
            return Ok(self.payload());
        }
        compression::decompress(compression, &self.payload(), MAX_DECOMPRESSED_BYTES)
            .map(Bytes::from)
            .map_err(|e| BatchError::decompress(compression, e))
    }

    /// Decodes the records (inflating a compressed payload first), checking `recordsCount`
    /// against them: fewer records than declared or bytes left after them are errors, as in
    /// Kafka's `DefaultRecordBatch` iterators.
    ///
    /// # Errors
    /// [`BatchError::Decompress`] for a payload that does not inflate;
    /// [`BatchError::InvalidRecordCount`], [`BatchError::InvalidRecord`],
    /// [`BatchError::TrailingBytes`] for malformed contents.
    pub fn records(&self) -> Result<Vec<Record>, BatchError> {
        let count = self.record_count();
        if count < 0 {
            return Err(BatchError::InvalidRecordCount { count });
        }
        let mut rest = self.uncompressed_records()?;
        // A record takes at least 7 bytes; bound the allocation by the payload, not the count.
        let mut records = Vec::with_capacity((count as usize).min(rest.len() / 7 + 1));
        for index in 0..count as usize {
            let (record, used) = Record::decode(&rest)
                .map_err(|defect| BatchError::InvalidRecord { index, defect })?;
            records.push(record);
            rest = rest.slice(used..);
        }
        if !rest.is_empty() {
            return Err(BatchError::TrailingBytes {
                count,
                trailing: rest.len(),
            });
        }
        Ok(records)
    }

    /// Walks every record without allocating records (a compressed payload is inflated once),
    /// with the checks of [`RecordBatch::records`], handing `f` each record's index and
    /// [`RecordSummary`]. The leader's key and timestamp checks use it: a small compressed
    /// batch may hold millions of records, which must not become millions of allocations.
    ///
    /// # Errors
    /// As [`RecordBatch::records`]; `f` has seen the records before the bad one.
    pub fn scan_records(&self, mut f: impl FnMut(usize, RecordSummary)) -> Result<(), BatchError> {
        let count = self.record_count();
        if count < 0 {
            return Err(BatchError::InvalidRecordCount { count });
        }
        let records = self.uncompressed_records()?;
        let payload = &records[..];
        let base_timestamp = self.base_timestamp();
        let mut pos = 0;
        for index in 0..count as usize {
            let view = walk_record(&payload[pos..], |_, _| {})
                .map_err(|defect| BatchError::InvalidRecord { index, defect })?;
            f(
                index,
                RecordSummary {
                    offset_delta: view.offset_delta,
                    timestamp: base_timestamp.saturating_add(view.timestamp_delta),
                    has_key: view.key.is_some(),
                },
            );
            pos += view.end;
        }
        if pos != payload.len() {
            return Err(BatchError::TrailingBytes {
                count,
                trailing: payload.len() - pos,
            });
        }
        Ok(())
    }

    /// Checks every record — the checks of [`RecordBatch::scan_records`] — and that offset
    /// deltas run 0, 1, 2, … (Kafka's leader-side validation). Returns the largest record
    /// timestamp (`NO_TIMESTAMP` if none).
    ///
    /// # Errors
    /// As [`RecordBatch::records`], plus [`RecordDefect::OffsetDeltaNotSequential`] for the
    /// first record out of place.
    pub fn validate_records(&self) -> Result<i64, BatchError> {
        let mut max_timestamp = NO_TIMESTAMP;
        let mut out_of_place = None;
        self.scan_records(|index, record| {
            if out_of_place.is_none() && i64::from(record.offset_delta) != index as i64 {
                out_of_place = Some((index, record.offset_delta));
            }
            max_timestamp = max_timestamp.max(record.timestamp);
        })?;
        if let Some((index, offset_delta)) = out_of_place {
            return Err(BatchError::InvalidRecord {
                index,
                defect: RecordDefect::OffsetDeltaNotSequential(offset_delta),
            });
        }
        Ok(max_timestamp)
    }

    /// The batch rebuilt with its records compressed by `codec` at `level` (Kafka's
    /// `LogValidator.buildRecordsAndAssignOffsets`): the header fields (base offset and
    /// timestamp, leader epoch, producer id/epoch/sequence, transactional flag, timestamp type)
    /// are kept, records are checked as [`RecordBatch::records`] checks them, and their offset
    /// deltas are renumbered 0, 1, 2, … (Kafka rewrites wrong inner offsets rather than
    /// refusing them). `maxTimestamp` becomes the records' largest timestamp.
    ///
    /// # Errors
    /// As [`RecordBatch::records`], and [`RecordBatchBuilder::build_compressed`]'s.
    pub fn recompressed(
        &self,
        codec: Compression,
        level: Option<i32>,
    ) -> Result<RecordBatch, BatchError> {
        let records = self.records()?;
        let mut builder = RecordBatchBuilder::new(self.base_offset())
            .partition_leader_epoch(self.partition_leader_epoch())
            .base_timestamp(self.base_timestamp())
            .timestamp_type(self.timestamp_type())
            .producer(
                self.producer_id(),
                self.producer_epoch(),
                self.base_sequence(),
            )
            .transactional(self.is_transactional())
            .control(self.is_control())
            .compression(codec);
        for (offset_delta, mut record) in (0i32..).zip(records) {
            record.offset_delta = offset_delta;
            builder.append(record);
        }
        builder.build_compressed(level)
    }

    fn modify(&mut self, f: impl FnOnce(&mut [u8])) {
        let bytes = std::mem::take(&mut self.bytes);
        let mut owned = bytes
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        f(&mut owned);
        self.bytes = owned.freeze();
    }

    /// Rewrites `baseOffset` (outside the CRC; the batch stays valid). Copies the bytes if they
    /// are shared.
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.modify(|b| {
            b[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8]
                .copy_from_slice(&base_offset.to_be_bytes())
        });
    }

    /// Rewrites `partitionLeaderEpoch` (outside the CRC).
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.modify(|b| {
            b[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
                .copy_from_slice(&epoch.to_be_bytes());
        });
    }

    /// Sets the timestamp type and `maxTimestamp` and recomputes the CRC (Kafka's
    /// `DefaultRecordBatch.setMaxTimestamp`). A no-op if both already match.
    pub fn set_max_timestamp(&mut self, timestamp_type: TimestampType, max_timestamp: i64) {
        if self.timestamp_type() == timestamp_type && self.max_timestamp() == max_timestamp {
            return;
        }
        let attributes = match timestamp_type {
            TimestampType::CreateTime => self.attributes() & !TIMESTAMP_TYPE_MASK,
            TimestampType::LogAppendTime => self.attributes() | TIMESTAMP_TYPE_MASK,
        };
        self.modify(|b| {
            b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
            b[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
                .copy_from_slice(&max_timestamp.to_be_bytes());
            let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
            b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        });
    }

    /// Marks the batch `LogAppendTime` with `timestamp` as its `maxTimestamp` (leader path for
    /// `message.timestamp.type=LogAppendTime`); recomputes the CRC.
    pub fn set_log_append_time(&mut self, timestamp: i64) {
        self.set_max_timestamp(TimestampType::LogAppendTime, timestamp);
    }

    /// Re-checks the CRC (a batch is checked when built and again when read back).
    #[must_use]
    pub fn is_crc_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }
}

/// Builds one v2 batch.
///
/// Records appended with [`RecordBatchBuilder::append`] are encoded as given (offset and
/// timestamp deltas included); [`RecordBatchBuilder::append_kv`] assigns the next offset delta and
/// computes the timestamp delta. For compressed batches, set the codec with
/// [`RecordBatchBuilder::compression`] and either hand over the already-compressed payload
/// with [`RecordBatchBuilder::opaque_payload`] and call `build`, or append records and call
/// [`RecordBatchBuilder::build_compressed`].
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    base_timestamp: Option<i64>,
    timestamp_type: TimestampType,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    delete_horizon: bool,
    compression: Compression,
    records: Vec<u8>,
    record_count: i32,
    max_offset_delta: Option<i32>,
    max_timestamp: i64,
    last_offset_delta_override: Option<i32>,
    max_timestamp_override: Option<i64>,
    opaque: Option<(Bytes, i32)>,
}

impl RecordBatchBuilder {
    /// A builder for a batch at `base_offset`, epoch -1, CreateTime, no producer, uncompressed.
    #[must_use]
    pub fn new(base_offset: i64) -> Self {
        RecordBatchBuilder {
            base_offset,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            base_timestamp: None,
            timestamp_type: TimestampType::CreateTime,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            delete_horizon: false,
            compression: Compression::None,
            records: Vec::new(),
            record_count: 0,
            max_offset_delta: None,
            max_timestamp: NO_TIMESTAMP,
            last_offset_delta_override: None,
            max_timestamp_override: None,
            opaque: None,
        }
    }

    /// Sets `partitionLeaderEpoch`.
    #[must_use]
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }
    /// Sets `baseTimestamp` (default: the first `append_kv` timestamp, or 0 for `append`, or -1
    /// for an empty batch).
    #[must_use]
    pub fn base_timestamp(mut self, timestamp: i64) -> Self {
        self.base_timestamp = Some(timestamp);
        self
    }
    /// Sets the timestamp type bit.
    #[must_use]
    pub fn timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }
    /// Sets producer id, epoch and base sequence (idempotent/transactional producers).
    #[must_use]
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }
    /// Sets the transactional bit.
    #[must_use]
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }
    /// Sets the control bit.
    #[must_use]
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }
    /// Sets the delete-horizon bit.
    #[must_use]
    pub fn delete_horizon(mut self, delete_horizon: bool) -> Self {
        self.delete_horizon = delete_horizon;
        self
    }
    /// Sets the compression attribute. With anything but `None`, also call
    /// [`RecordBatchBuilder::opaque_payload`]; otherwise the batch claims compression over
    /// plain records (useful only to test readers).
    #[must_use]
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
    /// Uses `payload` verbatim as the records area (e.g. a compressed blob), declaring
    /// `record_count` records; records appended with `append*` are ignored.
    /// Set `last_offset_delta` / `max_timestamp` to describe the payload.
    #[must_use]
    pub fn opaque_payload(mut self, payload: Bytes, record_count: i32) -> Self {
        self.opaque = Some((payload, record_count));
        self
    }
    /// Overrides `lastOffsetDelta` (default: the largest appended offset delta, 0 when empty).
    #[must_use]
    pub fn last_offset_delta(mut self, delta: i32) -> Self {
        self.last_offset_delta_override = Some(delta);
        self
    }
    /// Overrides `maxTimestamp` (default: largest record timestamp, -1 when empty).
    #[must_use]
    pub fn max_timestamp(mut self, timestamp: i64) -> Self {
        self.max_timestamp_override = Some(timestamp);
        self
    }

    /// Appends `record` as given (deltas relative to the batch's base offset and timestamp).
    pub fn append(&mut self, record: Record) -> &mut Self {
        let base_ts = *self.base_timestamp.get_or_insert(0);
        record.encode(&mut self.records);
        self.record_count += 1;
        self.max_offset_delta = Some(
            self.max_offset_delta
                .map_or(record.offset_delta, |m| m.max(record.offset_delta)),
        );
        self.max_timestamp = self
            .max_timestamp
            .max(base_ts.saturating_add(record.timestamp_delta));
        self
    }

    /// Appends a record at the next offset with an absolute `timestamp` and no headers.
    pub fn append_kv(
        &mut self,
        timestamp: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
    ) -> &mut Self {
        self.append_with_headers(timestamp, key, value, Vec::new())
    }

    /// Appends a record at the next offset with an absolute `timestamp` and headers.
    pub fn append_with_headers(
        &mut self,
        timestamp: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<Header>,
    ) -> &mut Self {
        let base_ts = *self.base_timestamp.get_or_insert(timestamp);
        let offset_delta = self.max_offset_delta.map_or(0, |d| d + 1);
        self.append(Record {
            offset_delta,
            timestamp_delta: timestamp.wrapping_sub(base_ts),
            key,
            value,
            headers,
        })
    }

    /// Records appended so far.
    #[must_use]
    pub fn record_count(&self) -> i32 {
        self.record_count
    }

    /// Size the batch would have if built now.
    #[must_use]
    pub fn estimated_size(&self) -> usize {
        RECORD_BATCH_OVERHEAD
            + self
                .opaque
                .as_ref()
                .map_or(self.records.len(), |(p, _)| p.len())
    }

    /// Encodes the batch with its appended records compressed by the codec set with
    /// [`RecordBatchBuilder::compression`] at `level` (`None`: Kafka's default level), as a
    /// Kafka producer or the leader's recompression does. With `Compression::None` this is
    /// [`RecordBatchBuilder::build`].
    ///
    /// # Errors
    /// [`BatchError::CompressFailed`] if the encoder refuses the level, or
    /// [`BatchError::TooLarge`] if the compressed batch would exceed [`MAX_BATCH_BYTES`].
    pub fn build_compressed(&self, level: Option<i32>) -> Result<RecordBatch, BatchError> {
        if self.compression == Compression::None || self.opaque.is_some() {
            return Ok(self.build());
        }
        let compressed =
            compression::compress(self.compression, level, &self.records).map_err(|e| {
                BatchError::CompressFailed {
                    compression: self.compression,
                    reason: e.to_string(),
                }
            })?;
        let size = RECORD_BATCH_OVERHEAD + compressed.len();
        if size > MAX_BATCH_BYTES {
            return Err(BatchError::TooLarge {
                size,
                max: MAX_BATCH_BYTES,
            });
        }
        Ok(self.encode(&compressed, self.record_count))
    }

    /// Encodes the batch and computes its CRC.
    ///
    /// # Panics
    /// If the batch would exceed [`MAX_BATCH_BYTES`] (a caller bug: callers bound batch sizes).
    #[must_use]
    pub fn build(&self) -> RecordBatch {
        let (payload, record_count): (&[u8], i32) = match &self.opaque {
            Some((p, n)) => (p, *n),
            None => (&self.records, self.record_count),
        };
        self.encode(payload, record_count)
    }

    fn encode(&self, payload: &[u8], record_count: i32) -> RecordBatch {
        let size = RECORD_BATCH_OVERHEAD + payload.len();
        assert!(
            size <= MAX_BATCH_BYTES,
            "batch of {size} bytes is too large"
        );
        let mut attributes = i16::from(self.compression.id());
        if self.timestamp_type == TimestampType::LogAppendTime {
            attributes |= TIMESTAMP_TYPE_MASK;
        }
        if self.transactional {
            attributes |= TRANSACTIONAL_FLAG_MASK;
        }
        if self.control {
            attributes |= CONTROL_FLAG_MASK;
        }
        if self.delete_horizon {
            attributes |= DELETE_HORIZON_FLAG_MASK;
        }
        let last_offset_delta = self
            .last_offset_delta_override
            .unwrap_or(self.max_offset_delta.unwrap_or(0));
        let base_timestamp = self.base_timestamp.unwrap_or(NO_TIMESTAMP);
        let max_timestamp = self.max_timestamp_override.unwrap_or(self.max_timestamp);

        let mut b = Vec::with_capacity(size);
        b.extend_from_slice(&self.base_offset.to_be_bytes());
        b.extend_from_slice(&((size - LOG_OVERHEAD) as i32).to_be_bytes());
        b.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b.push(MAGIC_V2 as u8);
        b.extend_from_slice(&[0; 4]); // CRC, filled below
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&last_offset_delta.to_be_bytes());
        b.extend_from_slice(&base_timestamp.to_be_bytes());
        b.extend_from_slice(&max_timestamp.to_be_bytes());
        b.extend_from_slice(&self.producer_id.to_be_bytes());
        b.extend_from_slice(&self.producer_epoch.to_be_bytes());
        b.extend_from_slice(&self.base_sequence.to_be_bytes());
        b.extend_from_slice(&record_count.to_be_bytes());
        debug_assert_eq!(b.len(), RECORD_BATCH_OVERHEAD);
        b.extend_from_slice(payload);
        let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        let batch = RecordBatch {
            bytes: Bytes::from(b),
        };
        // Paired with the check in parse: a batch we build must read back.
        assert!(batch.is_crc_valid(), "freshly built batch has a bad CRC");
        batch
    }
}

/// Parses a buffer that must hold only whole, valid batches (a produce request's records or
/// a fetched partition on the follower path). Returns the index of the first bad batch and
/// why.
///
/// # Errors
/// `(index, error)` for the first batch that fails [`RecordBatch::parse`].
pub fn parse_all(
    buf: Bytes,
    max_batch_bytes: usize,
) -> Result<Vec<RecordBatch>, (usize, BatchError)> {
    let mut rest = buf;
    let mut batches = Vec::new();
    while !rest.is_empty() {
        let (batch, tail) =
            RecordBatch::parse(rest, max_batch_bytes).map_err(|e| (batches.len(), e))?;
        batches.push(batch);
        rest = tail;
    }
    Ok(batches)
}

/// Where and why a [`BatchReader`] stopped before the end of its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadStop {
    /// Byte position (from the start of the buffer) of the first invalid batch.
    pub position: usize,
    /// What was wrong with it.
    pub error: BatchError,
}

/// Iterates over consecutive batches in a buffer. Stops at the first invalid batch (a torn or
/// corrupt tail) and remembers where and why in [`BatchReader::stop`].
#[derive(Debug)]
pub struct BatchReader {
    rest: Bytes,
    position: usize,
    max_batch_bytes: usize,
    stop: Option<ReadStop>,
}

impl BatchReader {
    /// A reader over `buf` rejecting batches above `max_batch_bytes`.
    #[must_use]
    pub fn new(buf: Bytes, max_batch_bytes: usize) -> Self {
        BatchReader {
            rest: buf,
            position: 0,
            max_batch_bytes,
            stop: None,
        }
    }

    /// Bytes consumed by the valid batches returned so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.position
    }

    /// Why reading stopped early, if it did.
    #[must_use]
    pub fn stop(&self) -> Option<&ReadStop> {
        self.stop.as_ref()
    }

    /// Reads all valid batches; returns them with the stop reason, if any.
    #[must_use]
    pub fn read_all(mut self) -> (Vec<RecordBatch>, Option<ReadStop>) {
        let batches: Vec<RecordBatch> = self.by_ref().collect();
        (batches, self.stop)
    }
}

impl Iterator for BatchReader {
    type Item = RecordBatch;

    fn next(&mut self) -> Option<RecordBatch> {
        if self.stop.is_some() || self.rest.is_empty() {
            return None;
        }
        match RecordBatch::parse(self.rest.clone(), self.max_batch_bytes) {
            Ok((batch, rest)) => {
                self.position += batch.size_in_bytes();
                self.rest = rest;
                Some(batch)
            }
            Err(error) => {
                self.stop = Some(ReadStop {
                    position: self.position,
                    error,
                });
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn legacy_entries_are_framed_but_not_parsed_as_v2() {
        // A 32-byte magic-0 message (smaller than any v2 batch): framing walks it, parsing
        // refuses it with INVALID_RECORD (Kafka 3.9 to a Produce v3+ holding magic 0/1).
        let entry = crate::legacy::encode_entry(0, 7, 0, NO_TIMESTAMP, None, Some(b"none-0"));
        let mut two = entry.clone();
        two.extend_from_slice(&entry);
        assert_eq!(peek_batch_size(&two, MAX_BATCH_BYTES), Ok(32));
        let err = RecordBatch::parse(Bytes::from(two), MAX_BATCH_BYTES).expect_err("magic 0");
        assert_eq!(err, BatchError::UnsupportedMagic { magic: 0 });
        assert_eq!(err.kafka_error_code(), INVALID_RECORD);
        // Fewer than 17 bytes cannot tell: the v2 rules apply (the entry is cut short anyway).
        assert!(peek_batch_size(&entry[..16], MAX_BATCH_BYTES).is_err());
    }

    #[test]
    fn built_batch_parses_back_with_all_header_fields() {
        let mut builder = RecordBatchBuilder::new(100)
            .partition_leader_epoch(7)
            .producer(42, 3, 9)
            .transactional(true);
        builder.append_kv(1_000, b("k"), b("v"));
        builder.append_kv(1_005, None, None);
        let batch = builder.build();
        let (parsed, rest) = RecordBatch::parse_default(batch.as_bytes().clone()).expect("parse");
        assert!(rest.is_empty());
        assert_eq!(parsed.base_offset(), 100);
        assert_eq!(parsed.last_offset(), 101);
        assert_eq!(parsed.partition_leader_epoch(), 7);
        assert_eq!(parsed.magic(), 2);
        assert_eq!(parsed.base_timestamp(), 1_000);
        assert_eq!(parsed.max_timestamp(), 1_005);
        assert_eq!(parsed.producer_id(), 42);
        assert_eq!(parsed.producer_epoch(), 3);
        assert_eq!(parsed.base_sequence(), 9);
        assert!(parsed.is_transactional());
        assert!(!parsed.is_control());
        assert_eq!(parsed.compression(), Compression::None);
        assert_eq!(parsed.timestamp_type(), TimestampType::CreateTime);
        assert_eq!(parsed.record_count(), 2);
        let records = parsed.records().expect("records");
        assert_eq!(records[0].key, b("k"));
        assert_eq!(records[1].offset_delta, 1);
        assert_eq!(records[1].timestamp_delta, 5);
        assert_eq!(records[1].value, None);
    }

    #[test]
    fn rewriting_base_offset_and_epoch_keeps_crc_valid() {
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_kv(5, None, b("x"));
        let mut batch = builder.build();
        let crc = batch.crc();
        batch.set_base_offset(1 << 40);
        batch.set_partition_leader_epoch(12);
        assert_eq!(batch.crc(), crc);
        assert!(batch.is_crc_valid());
        assert_eq!(batch.base_offset(), 1 << 40);
        batch.set_log_append_time(99);
        assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(batch.max_timestamp(), 99);
        assert!(batch.is_crc_valid());
        RecordBatch::parse_default(batch.as_bytes().clone()).expect("still valid");
    }

    #[test]
    fn leader_rewrites_do_not_copy_a_uniquely_owned_batch() {
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_kv(5, None, b("x"));
        let bytes = Bytes::copy_from_slice(builder.build().as_bytes());
        let (mut batch, _) = RecordBatch::parse_default(bytes).expect("parse");
        let before = batch.as_bytes().as_ptr();
        batch.set_base_offset(77);
        batch.set_partition_leader_epoch(3);
        assert_eq!(batch.as_bytes().as_ptr(), before, "rewritten in place");
        // A shared buffer is copied, leaving the other owner untouched.
        let shared = batch.clone();
        batch.set_base_offset(78);
        assert_eq!(shared.base_offset(), 77);
        assert_eq!(batch.base_offset(), 78);
    }

    #[test]
    fn parse_rejects_bad_framing_with_kafka_codes() {
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_kv(5, None, b("x"));
        let good = builder.build().into_bytes().to_vec();

        let cases: Vec<(&str, Vec<u8>, i16)> = vec![
            ("short header", good[..10].to_vec(), CORRUPT_MESSAGE),
            ("cut body", good[..good.len() - 1].to_vec(), CORRUPT_MESSAGE),
            (
                "negative length",
                with(&good, 8, &(-1i32).to_be_bytes()),
                CORRUPT_MESSAGE,
            ),
            (
                "length below header",
                with(&good, 8, &48i32.to_be_bytes()),
                CORRUPT_MESSAGE,
            ),
            ("legacy magic", with(&good, 16, &[1]), INVALID_RECORD),
            ("future magic", with(&good, 16, &[3]), CORRUPT_MESSAGE),
            (
                "flipped payload bit",
                flip(&good, good.len() - 1),
                CORRUPT_MESSAGE,
            ),
            ("flipped crc", flip(&good, 18), CORRUPT_MESSAGE),
        ];
        for (why, bytes, code) in cases {
            let err = RecordBatch::parse_default(Bytes::from(bytes)).expect_err(why);
            assert_eq!(err.kafka_error_code(), code, "{why}: {err}");
        }
        let err = RecordBatch::parse(Bytes::from(good.clone()), 20).expect_err("too large");
        assert_eq!(err.kafka_error_code(), MESSAGE_TOO_LARGE);
        // Bytes outside the CRC may change freely.
        RecordBatch::parse_default(Bytes::from(flip(&good, 13))).expect("epoch is outside CRC");
    }

    fn with(good: &[u8], at: usize, patch: &[u8]) -> Vec<u8> {
        let mut v = good.to_vec();
        v[at..at + patch.len()].copy_from_slice(patch);
        v
    }

    fn flip(good: &[u8], at: usize) -> Vec<u8> {
        let mut v = good.to_vec();
        v[at] ^= 0x10;
        v
    }

    #[test]
    fn batch_reader_stops_at_torn_tail_and_reports_position() {
        let mut all = Vec::new();
        let mut sizes = Vec::new();
        for i in 0..3 {
            let mut builder = RecordBatchBuilder::new(i);
            builder.append_kv(i, None, b("value"));
            let batch = builder.build();
            sizes.push(batch.size_in_bytes());
            all.extend_from_slice(batch.as_bytes());
        }
        all.truncate(all.len() - 3);
        let (batches, stop) = BatchReader::new(Bytes::from(all), MAX_BATCH_BYTES).read_all();
        assert_eq!(batches.len(), 2);
        let stop = stop.expect("torn tail");
        assert_eq!(stop.position, sizes[0] + sizes[1]);
        assert!(matches!(stop.error, BatchError::Truncated { .. }));
    }

    #[test]
    fn compressed_batches_round_trip_with_every_codec() {
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut builder = RecordBatchBuilder::new(10).compression(codec);
            for i in 0..50 {
                builder.append_kv(1_000 + i, b(&format!("k{i}")), b(&"v".repeat(100)));
            }
            let plain: Vec<Record> = {
                let mut p = RecordBatchBuilder::new(10);
                for i in 0..50 {
                    p.append_kv(1_000 + i, b(&format!("k{i}")), b(&"v".repeat(100)));
                }
                p.build().records().expect("plain")
            };
            let batch = builder.build_compressed(None).expect("compress");
            let (parsed, _) = RecordBatch::parse_default(batch.into_bytes()).expect("parse");
            assert_eq!(parsed.compression(), codec);
            assert_eq!(parsed.record_count(), 50);
            assert_eq!(parsed.last_offset(), 59);
            assert_eq!(parsed.max_timestamp(), 1_049);
            assert!(parsed.payload().len() < 50 * 100, "{codec:?} compresses");
            assert_eq!(parsed.records().expect("records"), plain, "{codec:?}");
            assert_eq!(parsed.validate_records(), Ok(1_049), "{codec:?}");
        }
    }

    #[test]
    fn undecodable_compressed_payload_gets_kafkas_codes() {
        let batch = RecordBatchBuilder::new(10)
            .compression(Compression::Gzip)
            .opaque_payload(Bytes::from_static(b"\x1f\x8b not really gzip"), 4)
            .last_offset_delta(3)
            .build();
        let err = batch.records().expect_err("garbage");
        assert!(matches!(err, BatchError::Decompress { .. }), "{err:?}");
        assert_eq!(err.kafka_error_code(), UNKNOWN_SERVER_ERROR);
        // A stream cut short: Kafka's "premature EOF reached", INVALID_RECORD.
        let mut builder = RecordBatchBuilder::new(0).compression(Compression::Zstd);
        builder.append_kv(1, b("k"), b("v"));
        let whole = builder.build_compressed(None).expect("compress").payload();
        let cut = RecordBatchBuilder::new(0)
            .compression(Compression::Zstd)
            .opaque_payload(whole.slice(..whole.len() - 2), 1)
            .build();
        let err = cut.records().expect_err("cut");
        assert_eq!(err.kafka_error_code(), INVALID_RECORD, "{err:?}");
    }

    #[test]
    fn compressed_batch_with_a_wrong_inner_count_is_invalid_record() {
        let mut builder = RecordBatchBuilder::new(0).compression(Compression::Lz4);
        builder.append_kv(1, b("a"), b("1"));
        builder.append_kv(2, b("b"), b("2"));
        let two = builder.build_compressed(None).expect("compress");
        for declared in [1, 3] {
            let batch = RecordBatchBuilder::new(0)
                .compression(Compression::Lz4)
                .opaque_payload(two.payload(), declared)
                .last_offset_delta(declared - 1)
                .build();
            let err = batch.validate_records().expect_err("wrong count");
            assert_eq!(
                err.kafka_error_code(),
                INVALID_RECORD,
                "{declared}: {err:?}"
            );
        }
    }

    #[test]
    fn malformed_records_are_invalid_record() {
        // recordsCount says 2 but only one record is present.
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_kv(1, b("k"), b("v"));
        let one = builder.build();
        let batch = RecordBatchBuilder::new(0)
            .opaque_payload(one.payload(), 2)
            .build();
        let err = batch.records().expect_err("count mismatch");
        assert_eq!(err.kafka_error_code(), INVALID_RECORD);
        // recordsCount 0 with a record present: trailing bytes.
        let batch = RecordBatchBuilder::new(0)
            .opaque_payload(one.payload(), 0)
            .build();
        assert!(matches!(
            batch.records(),
            Err(BatchError::TrailingBytes { .. })
        ));
        // Negative header count.
        let mut payload = Vec::new();
        write_varint(6, &mut payload); // body length
        payload.push(0); // attributes
        write_varlong(0, &mut payload);
        write_varint(0, &mut payload);
        write_varint(-1, &mut payload);
        write_varint(-1, &mut payload);
        write_varint(-3, &mut payload);
        let batch = RecordBatchBuilder::new(0)
            .opaque_payload(Bytes::from(payload), 1)
            .build();
        assert_eq!(
            batch.records(),
            Err(BatchError::InvalidRecord {
                index: 0,
                defect: RecordDefect::NegativeHeaderCount(-3)
            })
        );
    }

    #[test]
    fn random_bytes_never_panic_the_parser() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        let mut builder = RecordBatchBuilder::new(0);
        builder.append_with_headers(
            3,
            b("key"),
            b("value"),
            vec![Header {
                key: "h".into(),
                value: None,
            }],
        );
        let good = builder.build().into_bytes().to_vec();
        for _ in 0..5_000 {
            let mut v = good.clone();
            let n = rng.gen_range(1..4);
            for _ in 0..n {
                let at = rng.gen_range(0..v.len());
                v[at] = rng.r#gen();
            }
            v.truncate(rng.gen_range(0..=v.len()));
            if let Ok((batch, _)) = RecordBatch::parse_default(Bytes::from(v.clone())) {
                let _ = batch.records();
            }
            // Records decoding of arbitrary payloads with a valid CRC must not panic either.
            let forged = RecordBatchBuilder::new(0)
                .opaque_payload(Bytes::from(v), rng.gen_range(-2..4))
                .build();
            // The allocation-free validator agrees with the decoder.
            match (forged.records(), forged.validate_records()) {
                (Ok(records), Ok(_)) => {
                    assert!(
                        records
                            .iter()
                            .enumerate()
                            .all(|(i, r)| r.offset_delta == i as i32)
                    );
                }
                (Ok(records), Err(BatchError::InvalidRecord { index, defect })) => {
                    assert_eq!(
                        defect,
                        RecordDefect::OffsetDeltaNotSequential(records[index].offset_delta)
                    );
                }
                (Err(a), Err(b)) => assert_eq!(a, b),
                (a, b) => panic!("decoder {a:?} vs validator {b:?}"),
            }
        }
    }
}
