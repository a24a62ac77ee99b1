//! Group coordinator configuration, with Kafka 3.9's names and defaults.

/// `group.*` and `offsets.*` settings the coordinator shard uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms` (6000): shorter session timeouts are refused.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (1800000): longer session timeouts are refused.
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms` (3000): wait for more members when an empty group
    /// starts its first rebalance.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.max.size` (Kafka: `Integer.MAX_VALUE`): members per group. krust also bounds
    /// the members waiting for their KIP-394 second join by it.
    pub group_max_size: usize,
    /// `offset.metadata.max.bytes` (4096): longer commit metadata → OFFSET_METADATA_TOO_LARGE.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes` (10080, 7 days), in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000).
    pub offsets_retention_check_interval_ms: i64,
    /// `offsets.topic.num.partitions` (50).
    pub offsets_topic_num_partitions: i32,
    /// Kafka's `classicGroupNewMemberJoinTimeoutMs` (5 minutes, not a broker config): a new
    /// member parked in its first join phase is dropped after this long.
    pub new_member_join_timeout_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: i32::MAX as usize,
            offset_metadata_max_bytes: 4096,
            offsets_retention_ms: 10_080 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offsets_topic_num_partitions: 50,
            new_member_join_timeout_ms: 300_000,
        }
    }
}

/// The `__consumer_offsets` partition of `group_id`: Kafka's
/// `Utils.abs(groupId.hashCode()) % numPartitions`, with Java's `String.hashCode` over UTF-16
/// code units and `Utils.abs(Integer.MIN_VALUE) == 0`.
///
/// # Panics
/// If `num_partitions` is not positive (a config error caught at startup).
#[must_use]
pub fn partition_for_group(group_id: &str, num_partitions: i32) -> i32 {
    assert!(
        num_partitions > 0,
        "offsets.topic.num.partitions must be positive"
    );
    let hash = java_string_hash(group_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 units, wrapping.
#[must_use]
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}
