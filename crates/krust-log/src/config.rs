//! Per-log configuration with Kafka 3.9's topic-level names and defaults
//! (`org.apache.kafka.storage.internals.log.LogConfig`, `ServerLogConfigs`).

use crate::batch::{RECORD_BATCH_OVERHEAD, TimestampType};
use crate::compression::TopicCompression;
use crate::offset_index::OFFSET_INDEX_ENTRY_SIZE;
use crate::time_index::TIME_INDEX_ENTRY_SIZE;

/// Kafka's default `segment.bytes` (`log.segment.bytes`): 1 GiB.
pub const DEFAULT_SEGMENT_BYTES: u32 = 1024 * 1024 * 1024;
/// Kafka's default `segment.ms` (`log.roll.ms`/`log.roll.hours`): 7 days.
pub const DEFAULT_SEGMENT_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Kafka's default `segment.index.bytes` (`log.index.size.max.bytes`): 10 MiB.
pub const DEFAULT_SEGMENT_INDEX_BYTES: u32 = 10 * 1024 * 1024;
/// Kafka's default `index.interval.bytes` (`log.index.interval.bytes`).
pub const DEFAULT_INDEX_INTERVAL_BYTES: u32 = 4096;
/// Kafka's default `retention.ms` (`log.retention.hours=168`).
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Kafka's default `max.message.bytes` (`message.max.bytes`): 1 MiB + 12 bytes of log overhead.
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1024 * 1024 + 12;
/// Kafka's default `log.retention.check.interval.ms`.
pub const DEFAULT_RETENTION_CHECK_INTERVAL_MS: i64 = 300_000;
/// Kafka's default `file.delete.delay.ms`.
pub const DEFAULT_FILE_DELETE_DELAY_MS: i64 = 60_000;

/// Kafka's default `delete.retention.ms` (`log.cleaner.delete.retention.ms`): 1 day.
pub const DEFAULT_DELETE_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;
/// Kafka's default `min.cleanable.dirty.ratio` (`log.cleaner.min.cleanable.ratio`).
pub const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;

/// `cleanup.policy`: what reclaims space in a log (Kafka 3.9 `TopicConfig.CLEANUP_POLICY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// `delete`: retention by time and size only.
    #[default]
    Delete,
    /// `compact`: the log cleaner keeps the latest record per key; no time/size retention.
    Compact,
    /// `compact,delete` (or `delete,compact`): both.
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether `retention.ms` / `retention.bytes` apply (Kafka's `LogConfig.delete`).
    #[must_use]
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    /// Whether the log cleaner compacts the log (Kafka's `LogConfig.compact`).
    #[must_use]
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }

    /// Parses Kafka's comma-separated list (`delete`, `compact`, `compact,delete`, in any order,
    /// spaces around items ignored, case-insensitive as Kafka's `ValidList` of lower-cased
    /// values). `None` for anything else (empty, unknown item).
    #[must_use]
    pub fn parse(value: &str) -> Option<CleanupPolicy> {
        let (mut compact, mut delete) = (false, false);
        for item in value.split(',') {
            match item.trim().to_ascii_lowercase().as_str() {
                "compact" => compact = true,
                "delete" => delete = true,
                _ => return None,
            }
        }
        match (compact, delete) {
            (true, true) => Some(CleanupPolicy::CompactDelete),
            (true, false) => Some(CleanupPolicy::Compact),
            (false, true) => Some(CleanupPolicy::Delete),
            (false, false) => None,
        }
    }

    /// Kafka's spelling of the policy.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
}

/// Configuration of one log. Field names are Kafka's config names with `.` → `_`.
///
/// `Eq` holds although `min_cleanable_dirty_ratio` is an `f64`: [`LogConfig::validate`]
/// rejects NaN, so equality is reflexive for every config a log accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow beyond this.
    pub segment_bytes: u32,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: i64,
    /// `segment.jitter.ms`: subtracted from `segment_ms` (Kafka picks a random value up to it
    /// per segment; krust uses it as a fixed amount so behaviour stays deterministic).
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`: maximum size of an offset/time index; roll when one is full.
    pub segment_index_bytes: u32,
    /// `index.interval.bytes`: bytes of batches between two offset index entries.
    pub index_interval_bytes: u32,
    /// `retention.ms`: delete segments whose newest timestamp is older (-1 = forever).
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log is larger (-1 = unlimited).
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest batch accepted on append.
    pub max_message_bytes: u32,
    /// `message.timestamp.type`: `LogAppendTime` makes the leader stamp batches.
    pub message_timestamp_type: TimestampType,
    /// `log.retention.check.interval.ms` (broker-level): how often the caller should run
    /// [`crate::Log::apply_retention`]. krust-log never runs timers itself.
    pub retention_check_interval_ms: i64,
    /// `flush.messages`: the caller flushes after this many appended messages (Kafka's
    /// default, `i64::MAX`, leaves flushing to the OS and replication). krust-log never
    /// flushes on its own; see [`crate::Log::flush`].
    pub flush_messages: i64,
    /// `flush.ms`: the caller flushes when the oldest unflushed data is this old.
    pub flush_ms: i64,
    /// `file.delete.delay.ms`: kept for config compatibility; krust deletes segment files
    /// at once (readers hold their own `Bytes`, so no reader can see a file disappear).
    pub file_delete_delay_ms: i64,
    /// `cleanup.policy`: `delete` (default), `compact` or `compact,delete`. Retention by time
    /// and size applies only with `delete`; the cleaner (see [`crate::cleaner`]) only with
    /// `compact`.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio`: a compacted log is cleaned once its dirty (never cleaned)
    /// bytes are more than this fraction of its cleanable bytes (0.5).
    pub min_cleanable_dirty_ratio: f64,
    /// `delete.retention.ms`: how long a tombstone survives after the cleaning pass that first
    /// saw it (its batch's delete horizon is set to that pass's time plus this).
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: segments with a record newer than this are not cleaned (0).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: dirty data older than this forces a cleaning whatever the
    /// dirty ratio (`i64::MAX`: never). The caller should also keep `segment.ms` below it so the
    /// active segment rolls and becomes cleanable.
    pub max_compaction_lag_ms: i64,
    /// `compression.type` with its `compression.*.level` (KIP-390): the leader stores every
    /// client batch with this codec, recompressing when the producer used another;
    /// `producer` keeps the producer's codec.
    pub compression: TopicCompression,
}

impl Eq for LogConfig {}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_ms: DEFAULT_SEGMENT_MS,
            segment_jitter_ms: 0,
            segment_index_bytes: DEFAULT_SEGMENT_INDEX_BYTES,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            retention_ms: DEFAULT_RETENTION_MS,
            retention_bytes: -1,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            message_timestamp_type: TimestampType::CreateTime,
            retention_check_interval_ms: DEFAULT_RETENTION_CHECK_INTERVAL_MS,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: DEFAULT_FILE_DELETE_DELAY_MS,
            cleanup_policy: CleanupPolicy::Delete,
            min_cleanable_dirty_ratio: DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            compression: TopicCompression::Producer,
        }
    }
}

/// A configuration value Kafka would reject.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LogConfigError {
    /// The named setting is outside its valid range.
    #[error("invalid value {value} for {name}: must be at least {min}")]
    BelowMinimum {
        /// Kafka config name.
        name: &'static str,
        /// Value given.
        value: i64,
        /// Smallest accepted value.
        min: i64,
    },
    /// `min.compaction.lag.ms` is above `max.compaction.lag.ms` (Kafka rejects the pair).
    #[error("min.compaction.lag.ms {min} is above max.compaction.lag.ms {max}")]
    CompactionLagConflict {
        /// `min.compaction.lag.ms`.
        min: i64,
        /// `max.compaction.lag.ms`.
        max: i64,
    },
    /// `min.cleanable.dirty.ratio` is outside `[0, 1]` (or NaN).
    #[error("invalid value {value} for min.cleanable.dirty.ratio: must be in [0, 1]")]
    DirtyRatioOutOfRange {
        /// Value given.
        value: f64,
    },
}

impl LogConfig {
    /// The `segment.ms` rolls use: for a compacted log, `max.compaction.lag.ms` if smaller, so
    /// the active segment (which is never cleaned) rolls in time for the lag to be honoured
    /// (Kafka 3.9 `LogConfig.maxSegmentMs`).
    #[must_use]
    pub fn max_segment_ms(&self) -> i64 {
        if self.cleanup_policy.compacts() && self.max_compaction_lag_ms > 0 {
            self.segment_ms.min(self.max_compaction_lag_ms)
        } else {
            self.segment_ms
        }
    }

    /// Checks ranges the way Kafka's `ConfigDef` validators do (`segment.bytes` ≥ 14 — krust
    /// needs one batch header, 61 — `segment.index.bytes` ≥ 4 index entries, `segment.ms` ≥ 1,
    /// `max.message.bytes` ≥ 0, `index.interval.bytes` ≥ 0, `retention.ms` ≥ -1,
    /// `delete.retention.ms` ≥ 0, `min.compaction.lag.ms` ≥ 0 and ≤ `max.compaction.lag.ms` ≥ 1,
    /// `min.cleanable.dirty.ratio` in `[0, 1]`).
    ///
    /// # Errors
    /// [`LogConfigError::BelowMinimum`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), LogConfigError> {
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return Err(LogConfigError::DirtyRatioOutOfRange {
                value: self.min_cleanable_dirty_ratio,
            });
        }
        let checks: [(&'static str, i64, i64); 9] = [
            (
                "segment.bytes",
                i64::from(self.segment_bytes),
                RECORD_BATCH_OVERHEAD as i64,
            ),
            (
                "segment.index.bytes",
                i64::from(self.segment_index_bytes),
                4 * TIME_INDEX_ENTRY_SIZE.max(OFFSET_INDEX_ENTRY_SIZE) as i64,
            ),
            ("segment.ms", self.segment_ms, 1),
            ("segment.jitter.ms", self.segment_jitter_ms, 0),
            ("retention.ms", self.retention_ms, -1),
            ("delete.retention.ms", self.delete_retention_ms, 0),
            ("min.compaction.lag.ms", self.min_compaction_lag_ms, 0),
            ("max.compaction.lag.ms", self.max_compaction_lag_ms, 1),
            (
                "max.message.bytes",
                i64::from(self.max_message_bytes),
                RECORD_BATCH_OVERHEAD as i64,
            ),
        ];
        for (name, value, min) in checks {
            if value < min {
                return Err(LogConfigError::BelowMinimum { name, value, min });
            }
        }
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(LogConfigError::CompactionLagConflict {
                min: self.min_compaction_lag_ms,
                max: self.max_compaction_lag_ms,
            });
        }
        Ok(())
    }
}
