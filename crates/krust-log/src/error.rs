//! Errors of the log API ([`LogError`]) and their Kafka error codes.

use std::io;
use std::path::PathBuf;

use crate::batch::{
    BatchError, INVALID_RECORD, KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE,
    UNKNOWN_SERVER_ERROR,
};
use crate::checkpoint::CheckpointError;
use crate::config::LogConfigError;

/// Why a log operation failed. Nothing is written when an append fails validation.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The disk failed: propagate, and take the log dir offline (Kafka: `KAFKA_STORAGE_ERROR`).
    /// Never retried by krust-log.
    #[error("I/O error on {path}")]
    Io {
        /// File or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An appended batch is malformed (bad length, magic, CRC, records).
    #[error("batch {index} of the append is invalid")]
    InvalidBatch {
        /// Position of the batch in the append (0-based).
        index: usize,
        /// What is wrong.
        #[source]
        source: BatchError,
    },
    /// A batch is larger than `max.message.bytes`.
    #[error("batch {index} is {size} bytes, above max.message.bytes {max}")]
    RecordTooLarge {
        /// Position of the batch in the append.
        index: usize,
        /// Its size.
        size: usize,
        /// The limit.
        max: u32,
    },
    /// Leader path: `recordsCount` does not match the offset range (or is zero), as Kafka's
    /// `LogValidator` checks for client batches.
    #[error("batch {index}: {record_count} records but offset range spans {offset_span}")]
    InconsistentRecordCount {
        /// Position of the batch in the append.
        index: usize,
        /// `recordsCount`.
        record_count: i32,
        /// `lastOffsetDelta + 1`.
        offset_span: i64,
    },
    /// Follower path: the batch does not start where the log (or the previous batch) ends.
    /// Kafka's `UnexpectedAppendOffsetException` / `OffsetsOutOfOrderException`.
    #[error("batch {index} starts at offset {base_offset}, expected {expected}")]
    NonContiguousOffset {
        /// Position of the batch in the append.
        index: usize,
        /// Offset the batch should start at.
        expected: i64,
        /// Its base offset.
        base_offset: i64,
    },
    /// Follower path: `lastOffsetDelta` is negative.
    #[error("batch {index} has last offset {last_offset} below its base offset {base_offset}")]
    NonMonotonicOffsets {
        /// Position of the batch in the append.
        index: usize,
        /// Base offset.
        base_offset: i64,
        /// Last offset.
        last_offset: i64,
    },
    /// A read or lookup outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// Offset asked for.
        offset: i64,
        /// First offset in the log.
        log_start_offset: i64,
        /// Next offset to be written.
        log_end_offset: i64,
    },
    /// Stored bytes failed validation where the log cannot truncate them (a read below the
    /// recovery point): the file is corrupt; never served.
    #[error("{path}: corrupt batch at position {position}")]
    CorruptSegment {
        /// Segment file.
        path: PathBuf,
        /// Byte position of the bad batch.
        position: u64,
        /// What is wrong.
        #[source]
        source: BatchError,
    },
    /// An offset does not fit the segment's 32-bit relative offsets, or other impossible offset
    /// arithmetic (offset overflow).
    #[error("offset {offset} cannot be stored in the segment starting at {base_offset}")]
    OffsetOverflow {
        /// The offset.
        offset: i64,
        /// Segment base offset.
        base_offset: i64,
    },
    /// An earlier I/O error while replacing segments left the log without any: reopen it.
    #[error("{dir}: log has no active segment after an earlier I/O error; reopen it")]
    NoActiveSegment {
        /// The partition directory.
        dir: PathBuf,
    },
    /// An earlier fsync of this log failed: its unwritten pages may be gone, so nothing later
    /// is trusted — appends and flushes are refused and the recovery point is frozen (Kafka
    /// takes the log dir offline). Reopen the log after fixing the disk.
    #[error("{dir}: an earlier flush failed; the log refuses writes until it is reopened")]
    FlushFailed {
        /// The partition directory.
        dir: PathBuf,
    },
    /// A checkpoint file could not be read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] LogConfigError),
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            path: path.into(),
            source,
        }
    }

    /// The Kafka error code a broker returns for this failure.
    #[must_use]
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            LogError::Io { .. }
            | LogError::CorruptSegment { .. }
            | LogError::Checkpoint(_)
            | LogError::NoActiveSegment { .. }
            | LogError::FlushFailed { .. } => KAFKA_STORAGE_ERROR,
            LogError::InvalidBatch { source, .. } => source.kafka_error_code(),
            LogError::RecordTooLarge { .. } => MESSAGE_TOO_LARGE,
            LogError::InconsistentRecordCount { .. } => INVALID_RECORD,
            // Kafka has no wire code for these follower-side exceptions: UNKNOWN_SERVER_ERROR.
            LogError::NonContiguousOffset { .. }
            | LogError::NonMonotonicOffsets { .. }
            | LogError::OffsetOverflow { .. }
            | LogError::Config(_) => UNKNOWN_SERVER_ERROR,
            LogError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        }
    }
}
