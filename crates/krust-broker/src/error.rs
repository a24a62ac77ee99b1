//! Errors of partition operations and their Kafka error codes ([`PartitionError::response_error`]
//! is the one mapping; handlers never pick codes themselves).

use kafka_protocol::error::ResponseError;
use krust_log::LogError;

use crate::producer_state::{ProducerStateError, SnapshotError};

/// Why a partition refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// The broker is not the leader (leader-only operation), or hosts no replica. The client
    /// refreshes its metadata and retries.
    #[error("this broker is not the leader of the partition")]
    NotLeaderOrFollower,
    /// The partition is not hosted here at all (unknown topic name or partition index).
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    /// The request's topic id is not known here (Fetch v13+).
    #[error("unknown topic id")]
    UnknownTopicId,
    /// The request names a leader epoch older than ours: the sender is behind.
    #[error("request leader epoch {request_epoch} is older than the current {current_epoch}")]
    FencedLeaderEpoch {
        /// Epoch in the request.
        request_epoch: i32,
        /// Our epoch.
        current_epoch: i32,
    },
    /// The request names a leader epoch newer than ours: we are behind.
    #[error("request leader epoch {request_epoch} is newer than the current {current_epoch}")]
    UnknownLeaderEpoch {
        /// Epoch in the request.
        request_epoch: i32,
        /// Our epoch.
        current_epoch: i32,
    },
    /// acks=all while the ISR is smaller than `min.insync.replicas`; nothing was written.
    #[error("ISR size {isr_size} is below min.insync.replicas {min_isr}")]
    NotEnoughReplicas {
        /// ISR size.
        isr_size: usize,
        /// `min.insync.replicas`.
        min_isr: i32,
    },
    /// Written, but the ISR shrank below `min.insync.replicas` before acknowledging.
    #[error("ISR size {isr_size} fell below min.insync.replicas {min_isr} after the append")]
    NotEnoughReplicasAfterAppend {
        /// ISR size.
        isr_size: usize,
        /// `min.insync.replicas`.
        min_isr: i32,
    },
    /// A client batch Kafka's `LogValidator` refuses: a control batch, or a producer id with
    /// a negative base sequence. Kafka code `INVALID_RECORD`.
    #[error("batch {index}: {reason}")]
    InvalidRecord {
        /// Batch index in the request.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Records without a key sent to a compacted topic (Kafka's `LogValidator.validateKey`).
    /// Kafka code `INVALID_RECORD`, with one record error per keyless record.
    #[error("{}", records_without_key_message(topic_partition, record_indices))]
    RecordsWithoutKey {
        /// `<topic>-<partition>`.
        topic_partition: String,
        /// Indexes of the keyless records in the batch (the produce response's `batch_index`).
        record_indices: Vec<usize>,
    },
    /// A record timestamp is outside `message.timestamp.before.max.ms`/`after.max.ms`.
    #[error(
        "timestamp {timestamp} of record {record_index} in batch {index} is out of range at {now_ms}"
    )]
    InvalidTimestamp {
        /// Batch index in the request.
        index: usize,
        /// Index of the record in its batch (the produce response's `batch_index`).
        record_index: usize,
        /// The offending timestamp.
        timestamp: i64,
        /// Leader time.
        now_ms: i64,
    },
    /// The fetch or list offset is outside `[log start, log end]`.
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// Requested offset.
        offset: i64,
        /// Log start offset.
        log_start_offset: i64,
        /// Log end offset.
        log_end_offset: i64,
    },
    /// A new leader's high watermark has not yet reached its epoch start (ListOffsets).
    #[error("high watermark {high_watermark} is below the leader epoch start {epoch_start}")]
    OffsetNotAvailable {
        /// Current high watermark.
        high_watermark: i64,
        /// Start offset of the leader epoch.
        epoch_start: i64,
    },
    /// A delayed operation (acks=all) did not complete within the request's timeout.
    #[error("the request timed out waiting for replication")]
    RequestTimedOut,
    /// The partition is being deleted or the broker is shutting down.
    #[error("the partition is not available: {0}")]
    NotAvailable(&'static str),
    /// The producer-state checks refused a batch.
    #[error(transparent)]
    Producer(#[from] ProducerStateError),
    /// A transactional batch of a producer with no open transaction here arrived without a
    /// verification by the transaction coordinator (KIP-890 part 1), or after a marker ended
    /// the transaction. Kafka code `INVALID_TXN_STATE`.
    #[error("producer {producer_id}: record was not part of an ongoing transaction")]
    InvalidTxnState {
        /// Producer id.
        producer_id: i64,
    },
    /// A transaction marker refused by the producer state (stale producer or coordinator
    /// epoch).
    #[error(transparent)]
    Marker(#[from] crate::producer_state::MarkerError),
    /// The log refused or failed the operation.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Producer snapshot or replay failure.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

impl PartitionError {
    /// The Kafka error code for this failure.
    #[must_use]
    pub fn response_error(&self) -> ResponseError {
        match self {
            PartitionError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
            PartitionError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
            PartitionError::UnknownTopicId => ResponseError::UnknownTopicId,
            PartitionError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            PartitionError::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
            PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
            PartitionError::NotEnoughReplicasAfterAppend { .. } => {
                ResponseError::NotEnoughReplicasAfterAppend
            }
            PartitionError::InvalidRecord { .. } | PartitionError::RecordsWithoutKey { .. } => {
                ResponseError::InvalidRecord
            }
            PartitionError::RequestTimedOut => ResponseError::RequestTimedOut,
            PartitionError::NotAvailable(_) => ResponseError::NotLeaderOrFollower,
            PartitionError::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
            PartitionError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            PartitionError::OffsetNotAvailable { .. } => ResponseError::OffsetNotAvailable,
            PartitionError::Producer(ProducerStateError::InvalidProducerEpoch { .. }) => {
                ResponseError::InvalidProducerEpoch
            }
            PartitionError::Producer(
                ProducerStateError::OutOfOrderSequence { .. }
                | ProducerStateError::AboveVerifiedSequence { .. },
            ) => ResponseError::OutOfOrderSequenceNumber,
            PartitionError::Producer(ProducerStateError::InvalidTxnState { .. }) => {
                ResponseError::InvalidTxnState
            }
            PartitionError::InvalidTxnState { .. } => ResponseError::InvalidTxnState,
            PartitionError::Marker(crate::producer_state::MarkerError::InvalidProducerEpoch {
                ..
            }) => ResponseError::InvalidProducerEpoch,
            PartitionError::Marker(crate::producer_state::MarkerError::CoordinatorFenced {
                ..
            }) => ResponseError::TransactionCoordinatorFenced,
            PartitionError::Log(e) => code_to_error(e.kafka_error_code()),
            PartitionError::Snapshot(SnapshotError::Log(e)) => code_to_error(e.kafka_error_code()),
            PartitionError::Snapshot(_) => ResponseError::KafkaStorageError,
        }
    }

    /// [`PartitionError::response_error`] as the wire code.
    #[must_use]
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }
}

fn code_to_error(code: i16) -> ResponseError {
    ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)
}

/// Kafka's `LogValidator.validateKey` message for one record.
#[must_use]
pub fn record_without_key_message(topic_partition: &str) -> String {
    format!(
        "Compacted topic cannot accept message without key in topic partition {topic_partition}"
    )
}

/// Kafka's `RecordValidationException` message for keyless records (`processRecordErrors`:
/// the count, then at most three `RecordError`s).
fn records_without_key_message(topic_partition: &str, record_indices: &[usize]) -> String {
    let message = record_without_key_message(topic_partition);
    let shown: Vec<String> = record_indices
        .iter()
        .take(3)
        .map(|i| format!("RecordError(batchIndex={i}, message='{message}')"))
        .collect();
    format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        record_indices.len(),
        shown.join(", ")
    )
}
