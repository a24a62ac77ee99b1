//! KIP-630 snapshot files: names, and the byte layout the writer produces and the reader checks
//! (facts §4.4, §3.4, §3.5; Kafka 3.9 `snapshot/Snapshots.java`, `RecordsSnapshotWriter.java`,
//! `raft/internals/RecordsIterator.java`).
//!
//! A snapshot (and `bootstrap.checkpoint`, which has the same layout) is a sequence of v2 record
//! batches whose offsets start at 0 inside the file and whose `partitionLeaderEpoch` is the
//! snapshot epoch:
//!
//! ```text
//! control batch  [SnapshotHeader, (KRaftVersion, (Voters)) when kraft.version ≥ 1]
//! data batches   [one record per metadata record: key null, value = opaque bytes] (≤ 8 MiB each)
//! control batch  [SnapshotFooter]
//! ```
//!
//! Pure bytes in and out: [`SnapshotWriter`] writes into any [`std::io::Write`] (a `Vec<u8>`, or a
//! `.checkpoint.part` file the caller fsyncs and renames), [`read_snapshot`] checks a complete
//! file held in memory. The records' meaning is the caller's business.

use std::fmt;
use std::io::Write;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    KRaftVersionRecord, SnapshotFooterRecord, SnapshotHeaderRecord, VotersRecord,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use krust_log::batch::{BatchError, Record, RecordBatch, RecordBatchBuilder};
use thiserror::Error;

/// Suffix of a frozen snapshot.
pub const SUFFIX: &str = ".checkpoint";
/// Suffix of a snapshot being written or downloaded (`<id>-<random>.checkpoint.part`).
pub const PARTIAL_SUFFIX: &str = ".checkpoint.part";
/// Suffix of a snapshot marked for deletion.
pub const DELETE_SUFFIX: &str = ".checkpoint.deleted";
/// Largest batch Kafka's Raft layer writes or reads (`KafkaRaftClient.MAX_BATCH_SIZE_BYTES`).
pub const MAX_BATCH_SIZE_BYTES: usize = 8 * 1024 * 1024;

const OFFSET_WIDTH: usize = 20;
const EPOCH_WIDTH: usize = 10;

/// Control record types KRaft accepts (`ControlRecordType` ids 2–6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRecordType {
    /// 2: `LeaderChangeMessage`.
    LeaderChange,
    /// 3: `SnapshotHeaderRecord`.
    SnapshotHeader,
    /// 4: `SnapshotFooterRecord`.
    SnapshotFooter,
    /// 5: `KRaftVersionRecord`.
    KRaftVersion,
    /// 6: `VotersRecord`.
    KRaftVoters,
}

impl ControlRecordType {
    /// The type id in the record key.
    #[must_use]
    pub const fn id(self) -> i16 {
        match self {
            Self::LeaderChange => 2,
            Self::SnapshotHeader => 3,
            Self::SnapshotFooter => 4,
            Self::KRaftVersion => 5,
            Self::KRaftVoters => 6,
        }
    }

    /// The type for `id`, if KRaft accepts it.
    #[must_use]
    pub const fn from_id(id: i16) -> Option<Self> {
        match id {
            2 => Some(Self::LeaderChange),
            3 => Some(Self::SnapshotHeader),
            4 => Some(Self::SnapshotFooter),
            5 => Some(Self::KRaftVersion),
            6 => Some(Self::KRaftVoters),
            _ => None,
        }
    }

    /// The 4-byte record key: `int16 version (0) | int16 type`.
    #[must_use]
    pub fn key(self) -> [u8; 4] {
        let id = self.id().to_be_bytes();
        [0, 0, id[0], id[1]]
    }
}

/// A snapshot's identity: it holds every record below `end_offset` (exclusive), and the last of
/// them has leader epoch `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId {
    /// Exclusive end offset (last contained offset + 1).
    pub end_offset: i64,
    /// Epoch of the last contained record.
    pub epoch: i32,
}

impl SnapshotId {
    /// `(0, 0)`: the bootstrap snapshot the formatter writes for a dynamic quorum. It is never
    /// served over FetchSnapshot.
    pub const BOOTSTRAP: Self = Self {
        end_offset: 0,
        epoch: 0,
    };

    /// `<20-digit end offset>-<10-digit epoch>`, the stem shared by all file kinds.
    ///
    /// Negative values are written with a leading `-` inside the padded width, as Java's
    /// `NumberFormat` does; such names never parse back (ids are never negative on disk).
    #[must_use]
    pub fn file_stem(&self) -> String {
        format!(
            "{}-{}",
            pad(i128::from(self.end_offset), OFFSET_WIDTH),
            pad(i128::from(self.epoch), EPOCH_WIDTH)
        )
    }

    /// `<stem>.checkpoint`.
    #[must_use]
    pub fn file_name(&self) -> String {
        format!("{}{SUFFIX}", self.file_stem())
    }

    /// `<stem>.checkpoint.deleted`.
    #[must_use]
    pub fn deleted_file_name(&self) -> String {
        format!("{}{DELETE_SUFFIX}", self.file_stem())
    }

    /// `<stem>-<unique>.checkpoint.part`: the temporary name while writing; `unique` keeps
    /// concurrent writers apart (Kafka uses `Files.createTempFile`).
    #[must_use]
    pub fn partial_file_name(&self, unique: &str) -> String {
        format!("{}-{unique}{PARTIAL_SUFFIX}", self.file_stem())
    }
}

fn pad(value: i128, width: usize) -> String {
    if value < 0 {
        format!("-{:0width$}", value.unsigned_abs())
    } else {
        format!("{value:0width$}")
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "OffsetAndEpoch(offset={}, epoch={})",
            self.end_offset, self.epoch
        )
    }
}

/// Which of the three snapshot file kinds a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFileKind {
    /// `.checkpoint`: complete and immutable.
    Frozen,
    /// `.checkpoint.part`: being written; delete on start-up.
    Partial,
    /// `.checkpoint.deleted`: marked for deletion.
    Deleted,
}

/// A parsed snapshot file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotFileName {
    /// The snapshot id in the name.
    pub id: SnapshotId,
    /// The kind of file.
    pub kind: SnapshotFileKind,
}

/// A file name with a snapshot suffix whose id part is malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{name:?} has a snapshot suffix but not a `<20-digit offset>-<10-digit epoch>` prefix")]
pub struct SnapshotNameError {
    /// The offending name.
    pub name: String,
}

impl SnapshotFileName {
    /// Parses a file name (no directory). `Ok(None)` for names without a snapshot suffix.
    ///
    /// # Errors
    /// [`SnapshotNameError`] when the suffix matches but the id does not parse (Kafka would
    /// throw `NumberFormatException` there).
    pub fn parse(name: &str) -> Result<Option<Self>, SnapshotNameError> {
        let kind = if name.ends_with(PARTIAL_SUFFIX) {
            SnapshotFileKind::Partial
        } else if name.ends_with(DELETE_SUFFIX) {
            SnapshotFileKind::Deleted
        } else if name.ends_with(SUFFIX) {
            SnapshotFileKind::Frozen
        } else {
            return Ok(None);
        };
        let error = || SnapshotNameError {
            name: name.to_owned(),
        };
        let offset_text = name.get(..OFFSET_WIDTH).ok_or_else(error)?;
        let dash = name.get(OFFSET_WIDTH..=OFFSET_WIDTH).ok_or_else(error)?;
        let epoch_text = name
            .get(OFFSET_WIDTH + 1..OFFSET_WIDTH + 1 + EPOCH_WIDTH)
            .ok_or_else(error)?;
        let rest = &name[OFFSET_WIDTH + 1 + EPOCH_WIDTH..];
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let rest_ok = match kind {
            SnapshotFileKind::Frozen => rest == SUFFIX,
            SnapshotFileKind::Deleted => rest == DELETE_SUFFIX,
            // `<stem>-<unique>.checkpoint.part`, or a bare `<stem>.checkpoint.part`.
            SnapshotFileKind::Partial => rest == PARTIAL_SUFFIX || rest.starts_with('-'),
        };
        if dash != "-" || !digits(offset_text) || !digits(epoch_text) || !rest_ok {
            return Err(error());
        }
        let end_offset = offset_text.parse().map_err(|_| error())?;
        let epoch = epoch_text.parse().map_err(|_| error())?;
        Ok(Some(Self {
            id: SnapshotId { end_offset, epoch },
            kind,
        }))
    }
}

/// What goes into the first (control) batch besides the `SnapshotHeader`, and the times and
/// limits the writer uses.
#[derive(Debug, Clone)]
pub struct SnapshotWriterOptions {
    /// The snapshot id; its epoch becomes every batch's `partitionLeaderEpoch`.
    pub snapshot_id: SnapshotId,
    /// `SnapshotHeader.LastContainedLogTimestamp`: append time of the last covered log record
    /// (0 in `bootstrap.checkpoint`).
    pub last_contained_log_timestamp_ms: i64,
    /// Timestamp of every batch and record (Kafka uses the wall clock at write time).
    pub append_timestamp_ms: i64,
    /// `kraft.version` feature level. At ≥ 1 the header batch also holds a `KRaftVersionRecord`.
    pub kraft_version: i16,
    /// The voter set, written as a `VotersRecord` after the `KRaftVersionRecord`. Only allowed
    /// with `kraft_version` ≥ 1.
    pub voters: Option<VotersRecord>,
    /// Upper bound on a data batch (Kafka: 8 MiB).
    pub max_batch_bytes: usize,
}

impl SnapshotWriterOptions {
    /// Options for `snapshot_id` with kraft.version 0, no voters, timestamps 0 and 8 MiB batches.
    #[must_use]
    pub fn new(snapshot_id: SnapshotId) -> Self {
        Self {
            snapshot_id,
            last_contained_log_timestamp_ms: 0,
            append_timestamp_ms: 0,
            kraft_version: 0,
            voters: None,
            max_batch_bytes: MAX_BATCH_SIZE_BYTES,
        }
    }
}

/// Why a snapshot could not be written.
#[derive(Debug, Error)]
pub enum SnapshotWriteError {
    /// Voters were given with kraft.version 0 (Kafka: "Voter set … not expected when the
    /// kraft.version is 0").
    #[error("a voter set is not expected when the kraft.version is {kraft_version}")]
    VotersWithoutReconfiguration {
        /// The kraft.version given.
        kraft_version: i16,
    },
    /// A data record value was empty: KRaft readers reject those, so none is written.
    #[error("record {index} has an empty value")]
    EmptyRecord {
        /// Index of the record among the data records.
        index: u64,
    },
    /// One record does not fit in a batch on its own.
    #[error("record {index} needs a batch of {size} bytes, above the limit of {max} bytes")]
    RecordTooLarge {
        /// Index of the record among the data records.
        index: u64,
        /// Size of a batch holding only that record.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A control record could not be encoded (e.g. a voter set that violates its schema).
    #[error("encoding the {record} control record: {reason}")]
    ControlRecord {
        /// The control record type.
        record: &'static str,
        /// The encoder's message.
        reason: String,
    },
    /// The sink failed.
    #[error("writing snapshot bytes")]
    Io(#[from] std::io::Error),
}

/// Streams a snapshot into `sink`: the header batch on creation, data batches as they fill,
/// the footer batch on [`SnapshotWriter::freeze`]. Durability is the caller's: fsync the sink
/// before renaming a `.checkpoint.part` to `.checkpoint`, so a crash never leaves a frozen name
/// on a partial file.
#[derive(Debug)]
pub struct SnapshotWriter<W: Write> {
    sink: W,
    options: SnapshotWriterOptions,
    next_offset: i64,
    records_appended: u64,
    current: Option<RecordBatchBuilder>,
    bytes_written: u64,
}

impl<W: Write> SnapshotWriter<W> {
    /// Starts a snapshot and writes its header batch.
    ///
    /// # Errors
    /// [`SnapshotWriteError::VotersWithoutReconfiguration`], [`SnapshotWriteError::ControlRecord`]
    /// or [`SnapshotWriteError::Io`].
    pub fn new(sink: W, options: SnapshotWriterOptions) -> Result<Self, SnapshotWriteError> {
        if options.kraft_version < 1 && options.voters.is_some() {
            return Err(SnapshotWriteError::VotersWithoutReconfiguration {
                kraft_version: options.kraft_version,
            });
        }
        let mut writer = Self {
            sink,
            options,
            next_offset: 0,
            records_appended: 0,
            current: None,
            bytes_written: 0,
        };
        let header = SnapshotHeaderRecord::default()
            .with_version(0)
            .with_last_contained_log_timestamp(writer.options.last_contained_log_timestamp_ms);
        let mut control = vec![(
            ControlRecordType::SnapshotHeader,
            encode_control(&header, "SnapshotHeader")?,
        )];
        if writer.options.kraft_version >= 1 {
            let kraft = KRaftVersionRecord::default()
                .with_version(0)
                .with_k_raft_version(writer.options.kraft_version);
            control.push((
                ControlRecordType::KRaftVersion,
                encode_control(&kraft, "KRaftVersion")?,
            ));
            if let Some(voters) = &writer.options.voters {
                control.push((
                    ControlRecordType::KRaftVoters,
                    encode_control(voters, "Voters")?,
                ));
            }
        }
        writer.write_control_batch(control)?;
        Ok(writer)
    }

    /// Appends one data record (one framed metadata record; key null).
    ///
    /// # Errors
    /// [`SnapshotWriteError::EmptyRecord`], [`SnapshotWriteError::RecordTooLarge`] or
    /// [`SnapshotWriteError::Io`] when a full batch is flushed.
    pub fn append(&mut self, value: Bytes) -> Result<(), SnapshotWriteError> {
        let index = self.records_appended;
        if value.is_empty() {
            return Err(SnapshotWriteError::EmptyRecord { index });
        }
        let max = self.options.max_batch_bytes;
        let record_size = |offset_delta: i32| {
            Record {
                offset_delta,
                timestamp_delta: 0,
                key: None,
                value: Some(value.clone()),
                headers: Vec::new(),
            }
            .encoded_size()
        };
        let alone = krust_log::batch::RECORD_BATCH_OVERHEAD + record_size(0);
        if alone > max {
            return Err(SnapshotWriteError::RecordTooLarge {
                index,
                size: alone,
                max,
            });
        }
        if let Some(builder) = &self.current {
            let delta = builder.record_count();
            if builder.estimated_size() + record_size(delta) > max {
                self.flush_data_batch()?;
            }
        }
        let next_offset = self.next_offset;
        let options = &self.options;
        let builder = self.current.get_or_insert_with(|| {
            RecordBatchBuilder::new(next_offset)
                .partition_leader_epoch(options.snapshot_id.epoch)
                .base_timestamp(options.append_timestamp_ms)
        });
        builder.append_kv(self.options.append_timestamp_ms, None, Some(value));
        self.records_appended += 1;
        Ok(())
    }

    /// Writes the last data batch and the footer batch, and returns the sink (unflushed).
    ///
    /// # Errors
    /// [`SnapshotWriteError::Io`] or [`SnapshotWriteError::ControlRecord`].
    pub fn freeze(mut self) -> Result<W, SnapshotWriteError> {
        self.flush_data_batch()?;
        let footer = SnapshotFooterRecord::default().with_version(0);
        self.write_control_batch(vec![(
            ControlRecordType::SnapshotFooter,
            encode_control(&footer, "SnapshotFooter")?,
        )])?;
        Ok(self.sink)
    }

    /// Bytes written to the sink so far.
    #[must_use]
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    fn flush_data_batch(&mut self) -> Result<(), SnapshotWriteError> {
        if let Some(builder) = self.current.take() {
            let batch = builder.build();
            self.write_batch(&batch)?;
        }
        Ok(())
    }

    fn write_control_batch(
        &mut self,
        records: Vec<(ControlRecordType, Bytes)>,
    ) -> Result<(), SnapshotWriteError> {
        let mut builder = RecordBatchBuilder::new(self.next_offset)
            .partition_leader_epoch(self.options.snapshot_id.epoch)
            .control(true)
            .base_timestamp(self.options.append_timestamp_ms);
        for (record_type, value) in records {
            builder.append_kv(
                self.options.append_timestamp_ms,
                Some(Bytes::copy_from_slice(&record_type.key())),
                Some(value),
            );
        }
        let batch = builder.build();
        self.write_batch(&batch)
    }

    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), SnapshotWriteError> {
        self.sink.write_all(batch.as_bytes())?;
        self.bytes_written += batch.size_in_bytes() as u64;
        self.next_offset = batch.next_offset();
        Ok(())
    }
}

fn encode_control<M: Encodable>(
    message: &M,
    record: &'static str,
) -> Result<Bytes, SnapshotWriteError> {
    let mut buf = BytesMut::new();
    message
        .encode(&mut buf, 0)
        .map_err(|e| SnapshotWriteError::ControlRecord {
            record,
            reason: e.to_string(),
        })?;
    Ok(buf.freeze())
}

/// Writes a whole snapshot into memory.
///
/// # Errors
/// As [`SnapshotWriter::new`], [`SnapshotWriter::append`] and [`SnapshotWriter::freeze`].
pub fn write_snapshot(
    options: SnapshotWriterOptions,
    records: impl IntoIterator<Item = Bytes>,
) -> Result<Vec<u8>, SnapshotWriteError> {
    let mut writer = SnapshotWriter::new(Vec::new(), options)?;
    for record in records {
        writer.append(record)?;
    }
    writer.freeze()
}

/// Why bytes are not a valid snapshot. `position` is the byte offset of the offending batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotReadError {
    /// The file has no bytes at all.
    #[error("snapshot is empty")]
    Empty,
    /// A batch is cut short, fails its CRC or is otherwise not a valid v2 batch.
    #[error("invalid record batch at byte {position}")]
    Batch {
        /// Byte offset of the batch.
        position: usize,
        /// What the batch codec found.
        #[source]
        source: BatchError,
    },
    /// A batch does not start where the previous one ended (offsets start at 0 and are
    /// contiguous inside a snapshot file).
    #[error("batch at byte {position} has base offset {found}, expected {expected}")]
    NonContiguousOffset {
        /// Byte offset of the batch.
        position: usize,
        /// Expected base offset.
        expected: i64,
        /// Base offset found.
        found: i64,
    },
    /// A batch's `partitionLeaderEpoch` is not the snapshot epoch.
    #[error("batch at byte {position} has partition leader epoch {found}, expected {expected}")]
    WrongEpoch {
        /// Byte offset of the batch.
        position: usize,
        /// The snapshot epoch.
        expected: i32,
        /// The epoch found.
        found: i32,
    },
    /// A control record whose key is not `int16 version ≥ 0 | int16 type`.
    #[error("control record at offset {offset} has an invalid key")]
    InvalidControlKey {
        /// Offset of the record.
        offset: i64,
    },
    /// A control record type other than 2–6.
    #[error("control record at offset {offset} has type {type_id}, which KRaft does not accept")]
    UnknownControlType {
        /// Offset of the record.
        offset: i64,
        /// The type id.
        type_id: i16,
    },
    /// A record whose value is missing or empty.
    #[error("record at offset {offset} has no value")]
    EmptyValue {
        /// Offset of the record.
        offset: i64,
    },
    /// A data record with a key, headers or a non-zero timestamp delta.
    #[error("data record at offset {offset} is not a KRaft record: {reason}")]
    InvalidDataRecord {
        /// Offset of the record.
        offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A control record's value does not decode as its message.
    #[error("control record {record} at offset {offset} does not decode: {reason}")]
    MalformedControlRecord {
        /// Offset of the record.
        offset: i64,
        /// The message name.
        record: &'static str,
        /// The decoder's message.
        reason: String,
    },
    /// The first record of the file is not a `SnapshotHeader` in a control batch.
    #[error("snapshot does not start with a SnapshotHeader control record")]
    MissingHeader,
    /// A `SnapshotHeader` after the first record.
    #[error("unexpected SnapshotHeader at offset {offset}")]
    MisplacedHeader {
        /// Offset of the record.
        offset: i64,
    },
    /// The last record is not a `SnapshotFooter` in a control batch.
    #[error("snapshot does not end with a SnapshotFooter control record")]
    MissingFooter,
    /// Records after the `SnapshotFooter`.
    #[error("record at offset {offset} follows the SnapshotFooter")]
    RecordAfterFooter {
        /// Offset of the record.
        offset: i64,
    },
    /// A `KRaftVersion` or `Voters` record outside the first batch, or a voter set without a
    /// `KRaftVersion` (≥ 1) before it.
    #[error("{record} at offset {offset} is not where a snapshot may hold it")]
    MisplacedKRaftRecord {
        /// Offset of the record.
        offset: i64,
        /// The message name.
        record: &'static str,
    },
}

/// A snapshot that passed [`read_snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotContents {
    /// The `SnapshotHeader` record.
    pub header: SnapshotHeaderRecord,
    /// `kraft.version` from the header batch; `None` means 0 (no record).
    pub kraft_version: Option<i16>,
    /// The voter set from the header batch, if any.
    pub voters: Option<VotersRecord>,
    /// The data record values (framed metadata records), in offset order.
    pub records: Vec<Bytes>,
    /// `LeaderChangeMessage` control records seen (rare in snapshots; kept, not interpreted).
    pub leader_changes: usize,
    /// Next offset after the footer (number of records in the file, control ones included).
    pub end_offset_in_file: i64,
}

/// Checks `bytes` as a complete snapshot file and returns its contents.
///
/// Checks: every batch is a valid uncompressed v2 batch (CRC-32C via krust-log) within
/// [`MAX_BATCH_SIZE_BYTES`]; offsets start at 0 and are contiguous; when `expected_epoch` is
/// given, every `partitionLeaderEpoch` equals it; the first record is a `SnapshotHeader`, the
/// last a `SnapshotFooter`, each in a control batch; control types are 2–6 with non-empty values;
/// data records have a null key, no headers, timestamp delta 0 and a non-empty value.
///
/// # Errors
/// The first [`SnapshotReadError`] found.
pub fn read_snapshot(
    bytes: Bytes,
    expected_epoch: Option<i32>,
) -> Result<SnapshotContents, SnapshotReadError> {
    if bytes.is_empty() {
        return Err(SnapshotReadError::Empty);
    }
    let mut rest = bytes;
    let mut position = 0usize;
    let mut next_offset = 0i64;
    let mut header: Option<SnapshotHeaderRecord> = None;
    let mut footer_seen = false;
    let mut kraft_version = None;
    let mut voters = None;
    let mut records = Vec::new();
    let mut leader_changes = 0;
    let mut batch_index = 0usize;
    while !rest.is_empty() {
        let (batch, tail) = RecordBatch::parse(rest.clone(), MAX_BATCH_SIZE_BYTES)
            .map_err(|source| SnapshotReadError::Batch { position, source })?;
        if batch.base_offset() != next_offset {
            return Err(SnapshotReadError::NonContiguousOffset {
                position,
                expected: next_offset,
                found: batch.base_offset(),
            });
        }
        if let Some(expected) = expected_epoch
            && batch.partition_leader_epoch() != expected
        {
            return Err(SnapshotReadError::WrongEpoch {
                position,
                expected,
                found: batch.partition_leader_epoch(),
            });
        }
        let batch_records = batch
            .records()
            .map_err(|source| SnapshotReadError::Batch { position, source })?;
        for record in batch_records {
            let offset = batch.base_offset() + i64::from(record.offset_delta);
            if footer_seen {
                return Err(SnapshotReadError::RecordAfterFooter { offset });
            }
            if header.is_none() && !batch.is_control() {
                return Err(SnapshotReadError::MissingHeader);
            }
            let value = match &record.value {
                Some(v) if !v.is_empty() => v.clone(),
                _ => return Err(SnapshotReadError::EmptyValue { offset }),
            };
            if !batch.is_control() {
                let reason = if record.key.is_some() {
                    Some("it has a key")
                } else if !record.headers.is_empty() {
                    Some("it has headers")
                } else if record.timestamp_delta != 0 {
                    Some("its timestamp delta is not 0")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(SnapshotReadError::InvalidDataRecord { offset, reason });
                }
                records.push(value);
                continue;
            }
            let record_type = control_type(&record, offset)?;
            match record_type {
                ControlRecordType::SnapshotHeader => {
                    if header.is_some() {
                        return Err(SnapshotReadError::MisplacedHeader { offset });
                    }
                    header = Some(decode_control(&value, offset, "SnapshotHeader")?);
                }
                _ if header.is_none() => return Err(SnapshotReadError::MissingHeader),
                ControlRecordType::SnapshotFooter => {
                    let _: SnapshotFooterRecord = decode_control(&value, offset, "SnapshotFooter")?;
                    footer_seen = true;
                }
                ControlRecordType::KRaftVersion => {
                    if batch_index != 0 || kraft_version.is_some() {
                        return Err(SnapshotReadError::MisplacedKRaftRecord {
                            offset,
                            record: "KRaftVersion",
                        });
                    }
                    let message: KRaftVersionRecord =
                        decode_control(&value, offset, "KRaftVersion")?;
                    kraft_version = Some(message.k_raft_version);
                }
                ControlRecordType::KRaftVoters => {
                    if batch_index != 0
                        || voters.is_some()
                        || kraft_version.is_none_or(|v: i16| v < 1)
                    {
                        return Err(SnapshotReadError::MisplacedKRaftRecord {
                            offset,
                            record: "Voters",
                        });
                    }
                    voters = Some(decode_control(&value, offset, "Voters")?);
                }
                ControlRecordType::LeaderChange => leader_changes += 1,
            }
        }
        next_offset = batch.next_offset();
        position += batch.size_in_bytes();
        rest = tail;
        batch_index += 1;
    }
    let header = header.ok_or(SnapshotReadError::MissingHeader)?;
    if !footer_seen {
        return Err(SnapshotReadError::MissingFooter);
    }
    Ok(SnapshotContents {
        header,
        kraft_version,
        voters,
        records,
        leader_changes,
        end_offset_in_file: next_offset,
    })
}

fn control_type(record: &Record, offset: i64) -> Result<ControlRecordType, SnapshotReadError> {
    let key = record
        .key
        .as_deref()
        .filter(|k| k.len() >= 4)
        .ok_or(SnapshotReadError::InvalidControlKey { offset })?;
    let version = i16::from_be_bytes([key[0], key[1]]);
    if version < 0 {
        return Err(SnapshotReadError::InvalidControlKey { offset });
    }
    let type_id = i16::from_be_bytes([key[2], key[3]]);
    ControlRecordType::from_id(type_id)
        .ok_or(SnapshotReadError::UnknownControlType { offset, type_id })
}

fn decode_control<M: Decodable>(
    value: &Bytes,
    offset: i64,
    record: &'static str,
) -> Result<M, SnapshotReadError> {
    let mut buf = value.clone();
    let malformed = |reason: String| SnapshotReadError::MalformedControlRecord {
        offset,
        record,
        reason,
    };
    if value.len() < 2 {
        return Err(malformed("shorter than its version field".into()));
    }
    let version = i16::from_be_bytes([value[0], value[1]]);
    // Every KRaft control message is written at version 0 (facts §3.5) and carries its own
    // version as the first field; decode at the version it claims only if the codec knows it.
    if version != 0 {
        return Err(malformed(format!("unsupported version {version}")));
    }
    let message = M::decode(&mut buf, 0).map_err(|e| malformed(e.to_string()))?;
    if !buf.is_empty() {
        return Err(malformed(format!("{} bytes after the message", buf.len())));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::voters_record::{Endpoint, KRaftVersionFeature, Voter};
    use kafka_protocol::protocol::StrBytes;

    fn record(i: u8) -> Bytes {
        Bytes::from(vec![1, 12, 0, i])
    }

    fn voters() -> VotersRecord {
        VotersRecord::default().with_voters(vec![
            Voter::default()
                .with_voter_id(1.into())
                .with_voter_directory_id(uuid::Uuid::from_u64_pair(7, 7))
                .with_endpoints(vec![
                    Endpoint::default()
                        .with_name(StrBytes::from_static_str("CONTROLLER"))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(9093),
                ])
                .with_k_raft_version_feature(
                    KRaftVersionFeature::default()
                        .with_min_supported_version(0)
                        .with_max_supported_version(1),
                ),
        ])
    }

    #[test]
    fn file_names_follow_kafka() {
        let id = SnapshotId {
            end_offset: 100,
            epoch: 1,
        };
        assert_eq!(id.file_name(), "00000000000000000100-0000000001.checkpoint");
        assert_eq!(
            SnapshotId::BOOTSTRAP.file_name(),
            "00000000000000000000-0000000000.checkpoint"
        );
        assert_eq!(
            id.deleted_file_name(),
            "00000000000000000100-0000000001.checkpoint.deleted"
        );
        for (name, kind) in [
            (id.file_name(), SnapshotFileKind::Frozen),
            (id.deleted_file_name(), SnapshotFileKind::Deleted),
            (id.partial_file_name("12345"), SnapshotFileKind::Partial),
        ] {
            assert_eq!(
                SnapshotFileName::parse(&name),
                Ok(Some(SnapshotFileName { id, kind })),
                "{name}"
            );
        }
        assert_eq!(
            SnapshotFileName::parse("00000000000000000000.log"),
            Ok(None)
        );
        assert_eq!(SnapshotFileName::parse("quorum-state"), Ok(None));
        for bad in [
            "0.checkpoint",
            "0000000000000000010x-0000000001.checkpoint",
            "00000000000000000100_0000000001.checkpoint",
            "00000000000000000100-0000000001x.checkpoint",
            "ü0000000000000000100-0000000001.checkpoint",
        ] {
            assert!(SnapshotFileName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trip_with_voters() {
        let mut options = SnapshotWriterOptions::new(SnapshotId {
            end_offset: 42,
            epoch: 3,
        });
        options.kraft_version = 1;
        options.voters = Some(voters());
        options.last_contained_log_timestamp_ms = 1234;
        options.append_timestamp_ms = 5678;
        let bytes = write_snapshot(options, (0..10).map(record)).expect("write");
        let contents = read_snapshot(Bytes::from(bytes), Some(3)).expect("read");
        assert_eq!(contents.header.last_contained_log_timestamp, 1234);
        assert_eq!(contents.kraft_version, Some(1));
        assert_eq!(contents.voters, Some(voters()));
        assert_eq!(contents.records, (0..10).map(record).collect::<Vec<_>>());
        assert_eq!(contents.end_offset_in_file, 3 + 10 + 1);
    }

    #[test]
    fn data_batches_are_split_at_the_limit() {
        let mut options = SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP);
        options.max_batch_bytes = 200;
        let values: Vec<Bytes> = (0..50).map(|i| Bytes::from(vec![i; 30])).collect();
        let bytes = write_snapshot(options, values.clone()).expect("write");
        let (batches, stop) =
            krust_log::batch::BatchReader::new(Bytes::from(bytes.clone()), usize::MAX).read_all();
        assert_eq!(stop, None);
        assert!(batches.len() > 3, "{} batches", batches.len());
        assert!(batches.iter().all(|b| b.size_in_bytes() <= 200));
        let contents = read_snapshot(Bytes::from(bytes), Some(0)).expect("read");
        assert_eq!(contents.records, values);
    }

    #[test]
    fn writer_rejects_bad_input() {
        let mut options = SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP);
        options.voters = Some(voters());
        assert!(matches!(
            SnapshotWriter::new(Vec::new(), options),
            Err(SnapshotWriteError::VotersWithoutReconfiguration { kraft_version: 0 })
        ));
        let mut options = SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP);
        options.max_batch_bytes = 100;
        let mut writer = SnapshotWriter::new(Vec::new(), options).expect("header fits");
        assert!(matches!(
            writer.append(Bytes::new()),
            Err(SnapshotWriteError::EmptyRecord { index: 0 })
        ));
        assert!(matches!(
            writer.append(Bytes::from(vec![0; 100])),
            Err(SnapshotWriteError::RecordTooLarge { .. })
        ));
    }

    fn sample() -> Vec<u8> {
        write_snapshot(
            SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP),
            (0..3).map(record),
        )
        .expect("write")
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let bytes = sample();
        for len in 0..bytes.len() {
            let result = read_snapshot(Bytes::copy_from_slice(&bytes[..len]), None);
            assert!(result.is_err(), "prefix of {len} bytes was accepted");
        }
    }

    #[test]
    fn every_flipped_byte_is_rejected_or_harmless() {
        // Flipping any byte covered by the CRC must be caught; flipping the base offset or
        // epoch must be caught by the layout checks.
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= 0x40;
            assert!(
                read_snapshot(Bytes::from(corrupt), Some(0)).is_err(),
                "flipping byte {i} was not detected"
            );
        }
    }

    fn batch(base: i64, control: bool, records: Vec<Record>) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(base)
            .partition_leader_epoch(0)
            .control(control)
            .base_timestamp(0);
        for r in records {
            builder.append(r);
        }
        builder.build().as_bytes().to_vec()
    }

    fn control(delta: i32, kind: ControlRecordType, value: Bytes) -> Record {
        Record {
            offset_delta: delta,
            key: Some(Bytes::copy_from_slice(&kind.key())),
            value: Some(value),
            ..Record::default()
        }
    }

    fn header() -> Bytes {
        encode_control(&SnapshotHeaderRecord::default(), "h").expect("encode")
    }
    fn footer() -> Bytes {
        encode_control(&SnapshotFooterRecord::default(), "f").expect("encode")
    }
    fn data(delta: i32) -> Record {
        Record {
            offset_delta: delta,
            value: Some(record(1)),
            ..Record::default()
        }
    }

    #[test]
    fn wrong_layouts_are_typed_errors() {
        let h = || {
            batch(
                0,
                true,
                vec![control(0, ControlRecordType::SnapshotHeader, header())],
            )
        };
        let f = |base| {
            batch(
                base,
                true,
                vec![control(0, ControlRecordType::SnapshotFooter, footer())],
            )
        };
        let cat = |parts: Vec<Vec<u8>>| Bytes::from(parts.concat());

        assert_eq!(
            read_snapshot(cat(vec![h(), f(1)]), Some(0)).map(|c| c.records.len()),
            Ok(0)
        );
        assert_eq!(
            read_snapshot(Bytes::new(), None),
            Err(SnapshotReadError::Empty)
        );
        assert_eq!(
            read_snapshot(cat(vec![batch(0, false, vec![data(0)]), f(1)]), None),
            Err(SnapshotReadError::MissingHeader)
        );
        assert_eq!(
            read_snapshot(cat(vec![h()]), None),
            Err(SnapshotReadError::MissingFooter)
        );
        assert_eq!(
            read_snapshot(cat(vec![h(), f(1), batch(2, false, vec![data(0)])]), None),
            Err(SnapshotReadError::RecordAfterFooter { offset: 2 })
        );
        assert!(matches!(
            read_snapshot(cat(vec![h(), f(5)]), None),
            Err(SnapshotReadError::NonContiguousOffset {
                expected: 1,
                found: 5,
                ..
            })
        ));
        assert!(matches!(
            read_snapshot(cat(vec![h(), f(1)]), Some(7)),
            Err(SnapshotReadError::WrongEpoch {
                expected: 7,
                found: 0,
                ..
            })
        ));
        let commit_marker = Record {
            key: Some(Bytes::from_static(&[0, 0, 0, 1])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            ..Record::default()
        };
        assert_eq!(
            read_snapshot(
                cat(vec![h(), batch(1, true, vec![commit_marker]), f(2)]),
                None
            ),
            Err(SnapshotReadError::UnknownControlType {
                offset: 1,
                type_id: 1
            })
        );
        let keyed = Record {
            key: Some(Bytes::from_static(b"k")),
            ..data(0)
        };
        assert!(matches!(
            read_snapshot(cat(vec![h(), batch(1, false, vec![keyed]), f(2)]), None),
            Err(SnapshotReadError::InvalidDataRecord { offset: 1, .. })
        ));
        let empty = Record {
            value: Some(Bytes::new()),
            ..data(0)
        };
        assert_eq!(
            read_snapshot(cat(vec![h(), batch(1, false, vec![empty]), f(2)]), None),
            Err(SnapshotReadError::EmptyValue { offset: 1 })
        );
        let late_kraft = batch(
            1,
            true,
            vec![control(
                0,
                ControlRecordType::KRaftVersion,
                encode_control(&KRaftVersionRecord::default(), "k").expect("encode"),
            )],
        );
        assert!(matches!(
            read_snapshot(cat(vec![h(), late_kraft, f(2)]), None),
            Err(SnapshotReadError::MisplacedKRaftRecord {
                record: "KRaftVersion",
                ..
            })
        ));
        let voters_without_kraft = batch(
            0,
            true,
            vec![
                control(0, ControlRecordType::SnapshotHeader, header()),
                control(
                    1,
                    ControlRecordType::KRaftVoters,
                    encode_control(&voters(), "v").expect("encode"),
                ),
            ],
        );
        assert!(matches!(
            read_snapshot(cat(vec![voters_without_kraft, f(2)]), None),
            Err(SnapshotReadError::MisplacedKRaftRecord {
                record: "Voters",
                ..
            })
        ));
        let bad_header = batch(
            0,
            true,
            vec![control(
                0,
                ControlRecordType::SnapshotHeader,
                Bytes::from_static(&[0, 0, 1]),
            )],
        );
        assert!(matches!(
            read_snapshot(cat(vec![bad_header, f(1)]), None),
            Err(SnapshotReadError::MalformedControlRecord {
                record: "SnapshotHeader",
                ..
            })
        ));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// However records are cut into batches, reading gives back exactly what was written.
        #[test]
        fn write_then_read_round_trips(
            records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 0..40),
            max_batch_bytes in 140usize..2048,
            epoch in 0i32..1000,
            timestamp in any::<i64>(),
        ) {
            let mut options = SnapshotWriterOptions::new(SnapshotId { end_offset: 1, epoch });
            options.max_batch_bytes = max_batch_bytes;
            options.append_timestamp_ms = timestamp;
            options.last_contained_log_timestamp_ms = timestamp;
            let values: Vec<Bytes> = records.into_iter().map(Bytes::from).collect();
            let bytes = write_snapshot(options, values.clone()).expect("records fit");
            let contents = read_snapshot(Bytes::from(bytes), Some(epoch)).expect("reads back");
            prop_assert_eq!(contents.records, values);
            prop_assert_eq!(contents.header.last_contained_log_timestamp, timestamp);
        }

        /// Arbitrary bytes give a typed error (or, by chance, a snapshot), never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_snapshot(Bytes::from(bytes), None);
        }

        /// Names round-trip through their text form.
        #[test]
        fn file_names_round_trip(end_offset in 0i64..=i64::MAX, epoch in 0i32..=i32::MAX) {
            let id = SnapshotId { end_offset, epoch };
            let parsed = SnapshotFileName::parse(&id.file_name()).expect("valid name");
            prop_assert_eq!(parsed, Some(SnapshotFileName { id, kind: SnapshotFileKind::Frozen }));
        }
    }
}
