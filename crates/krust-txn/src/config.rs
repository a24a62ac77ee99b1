//! Transaction coordinator settings, with Kafka 3.9's names and defaults
//! (`TransactionLogConfigs`, `TransactionStateManagerConfigs`).

/// `transaction.*` settings the coordinator and its runtime use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions` (50).
    pub num_partitions: i32,
    /// `transaction.state.log.replication.factor` (3).
    pub replication_factor: i16,
    /// `transaction.state.log.min.isr` (2).
    pub min_isr: i32,
    /// `transaction.state.log.segment.bytes` (104857600).
    pub segment_bytes: i32,
    /// `transaction.state.log.load.buffer.size` (5242880).
    pub load_buffer_size: i32,
    /// `transaction.max.timeout.ms` (900000): InitProducerId timeouts above it are refused.
    pub max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10000).
    pub abort_timed_out_interval_ms: i64,
    /// `transactional.id.expiration.ms` (604800000, 7 days).
    pub transactional_id_expiration_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (3600000).
    pub remove_expired_interval_ms: i64,
    /// How long an AddPartitionsToTxn/AddOffsetsToTxn arriving while the producer's previous
    /// transaction completes (markers being written) is held for that completion before it
    /// gets CONCURRENT_TRANSACTIONS (100 ms; 0: answered at once, as Kafka 3.9 does). Not a
    /// Kafka config: the design of KAFKA-9878, which 3.9 does not have; the bound is Kafka
    /// 4.0's `add.partitions.to.txn.retry.backoff.max.ms` default.
    pub add_partitions_hold_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            num_partitions: 50,
            replication_factor: 3,
            min_isr: 2,
            segment_bytes: 104_857_600,
            load_buffer_size: 5_242_880,
            max_timeout_ms: 900_000,
            abort_timed_out_interval_ms: 10_000,
            transactional_id_expiration_ms: 604_800_000,
            remove_expired_interval_ms: 3_600_000,
            add_partitions_hold_ms: 100,
        }
    }
}

/// Java's `String.hashCode`: `h = 31*h + c` over UTF-16 code units, wrapping.
#[must_use]
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__transaction_state` partition of `transactional_id`: Kafka's
/// `Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`
/// (`Utils.abs(Integer.MIN_VALUE) == 0`).
///
/// # Panics
/// If `num_partitions` is not positive (a config error caught at start-up).
#[must_use]
pub fn partition_for_txn(transactional_id: &str, num_partitions: i32) -> i32 {
    assert!(
        num_partitions > 0,
        "transaction.state.log.num.partitions must be positive"
    );
    let hash = java_string_hash(transactional_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_is_javas() {
        // "my-txn".hashCode() == -1061187895 in Java; abs % 50 == 45.
        assert_eq!(java_string_hash("my-txn"), -1_061_187_895);
        assert_eq!(partition_for_txn("my-txn", 50), 45);
        assert_eq!(partition_for_txn("", 50), 0);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for_txn("polygenelubricants", 7), 0);
    }
}
