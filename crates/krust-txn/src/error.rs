//! [`TxnError`]: every refusal of the coordinator, and its one mapping to Kafka error codes.

use krust_net::error_codes as codes;

/// Why the coordinator refused a request (Kafka's `Errors` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// Null or empty transactional id, or only one of producer id / epoch given.
    #[error("INVALID_REQUEST")]
    InvalidRequest,
    /// Timeout not in `1..=transaction.max.timeout.ms`.
    #[error("INVALID_TRANSACTION_TIMEOUT")]
    InvalidTransactionTimeout,
    /// A transition is being written, or markers are being sent: retry later.
    #[error("CONCURRENT_TRANSACTIONS")]
    ConcurrentTransactions,
    /// The caller's epoch is not the current one (old clients see INVALID_PRODUCER_EPOCH).
    #[error("PRODUCER_FENCED")]
    ProducerFenced,
    /// Unknown transactional id, or another producer id.
    #[error("INVALID_PRODUCER_ID_MAPPING")]
    InvalidProducerIdMapping,
    /// EndTxn with the opposite result of a prepared/completed transaction, or of an Empty one.
    #[error("INVALID_TXN_STATE")]
    InvalidTxnState,
    /// Verification: the partition is not in the transaction (KIP-890).
    #[error("TRANSACTION_ABORTABLE")]
    TransactionAbortable,
    /// DescribeTransactions of an id this coordinator does not know.
    #[error("TRANSACTIONAL_ID_NOT_FOUND")]
    TransactionalIdNotFound,
    /// The partition is being loaded, or no producer id could be allocated yet.
    #[error("COORDINATOR_LOAD_IN_PROGRESS")]
    CoordinatorLoadInProgress,
    /// The `__transaction_state` append failed in a retriable way.
    #[error("COORDINATOR_NOT_AVAILABLE")]
    CoordinatorNotAvailable,
    /// This broker no longer leads the partition.
    #[error("NOT_COORDINATOR")]
    NotCoordinator,
    /// The append failed in a way retrying will not fix (record too large).
    #[error("UNKNOWN_SERVER_ERROR")]
    UnknownServerError,
    /// Any other append failure, passed through as Kafka does.
    #[error("append failed with error code {0}")]
    Append(i16),
}

impl TxnError {
    /// The Kafka error code.
    #[must_use]
    pub fn code(self) -> i16 {
        match self {
            TxnError::InvalidRequest => codes::INVALID_REQUEST,
            TxnError::InvalidTransactionTimeout => codes::INVALID_TRANSACTION_TIMEOUT,
            TxnError::ConcurrentTransactions => codes::CONCURRENT_TRANSACTIONS,
            TxnError::ProducerFenced => codes::PRODUCER_FENCED,
            TxnError::InvalidProducerIdMapping => codes::INVALID_PRODUCER_ID_MAPPING,
            TxnError::InvalidTxnState => codes::INVALID_TXN_STATE,
            TxnError::TransactionAbortable => codes::TRANSACTION_ABORTABLE,
            TxnError::TransactionalIdNotFound => codes::TRANSACTIONAL_ID_NOT_FOUND,
            TxnError::CoordinatorLoadInProgress => codes::COORDINATOR_LOAD_IN_PROGRESS,
            TxnError::CoordinatorNotAvailable => codes::COORDINATOR_NOT_AVAILABLE,
            TxnError::NotCoordinator => codes::NOT_COORDINATOR,
            TxnError::UnknownServerError => codes::UNKNOWN_SERVER_ERROR,
            TxnError::Append(code) => code,
        }
    }

    /// The code for a client that may predate PRODUCER_FENCED: InitProducerId below v4 and
    /// AddPartitionsToTxn / AddOffsetsToTxn / EndTxn below v2 get INVALID_PRODUCER_EPOCH, as
    /// Kafka's `KafkaApis` rewrites it.
    #[must_use]
    pub fn code_for(self, producer_fenced_supported: bool) -> i16 {
        if self == TxnError::ProducerFenced && !producer_fenced_supported {
            codes::INVALID_PRODUCER_EPOCH
        } else {
            self.code()
        }
    }

    /// What a caller sees when its `__transaction_state` append failed with `code`
    /// (Kafka's `TransactionStateManager.appendTransactionToLog`).
    #[must_use]
    pub fn from_append_error(code: i16) -> TxnError {
        match code {
            codes::UNKNOWN_TOPIC_OR_PARTITION
            | codes::NOT_ENOUGH_REPLICAS
            | codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | codes::REQUEST_TIMED_OUT => TxnError::CoordinatorNotAvailable,
            codes::NOT_LEADER_OR_FOLLOWER | codes::KAFKA_STORAGE_ERROR => TxnError::NotCoordinator,
            codes::MESSAGE_TOO_LARGE | codes::RECORD_LIST_TOO_LARGE => TxnError::UnknownServerError,
            other => TxnError::Append(other),
        }
    }
}
