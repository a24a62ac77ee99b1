//! Retention: deleting whole old segments (Kafka 3.9 `UnifiedLog.deleteOldSegments`).
//!
//! Three rules, applied in Kafka's order, each deleting a prefix of the segments (rules 2 and 3
//! only when `cleanup.policy` includes `delete`):
//! 1. the next segment starts at or below the log start offset;
//! 2. `retention.bytes`: the log is larger than the limit by at least the segment's size;
//! 3. `retention.ms`: the segment's newest timestamp (its file's mtime if it has none) is
//!    more than `retention.ms` before `now_ms`.
//!
//! A segment is only deletable if all its offsets are below the high watermark, and an empty
//! active segment never is. When every segment goes (possible for the active segment, as in
//! Kafka), the log first rolls so an empty active segment remains. Deletion is immediate; the
//! periodic `log.retention.check.interval.ms` loop belongs to the caller.

use std::time::UNIX_EPOCH;

use crate::error::LogError;
use crate::log::Log;
use crate::segment::Segment;

/// Segments deleted by [`Log::apply_retention`], per rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Below the log start offset.
    pub log_start_offset_breached: usize,
    /// Over `retention.bytes`.
    pub size_breached: usize,
    /// Older than `retention.ms`.
    pub time_breached: usize,
}

impl RetentionOutcome {
    /// Segments deleted in total.
    #[must_use]
    pub fn total(&self) -> usize {
        self.log_start_offset_breached + self.size_breached + self.time_breached
    }
}

/// Kafka's `LogSegment.largestTimestamp`: the newest batch timestamp, else the file's mtime.
pub(crate) fn largest_timestamp_ms(segment: &Segment) -> i64 {
    let max = segment.max_timestamp().timestamp;
    if max >= 0 {
        return max;
    }
    std::fs::metadata(segment.log_path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Log {
    /// Runs the three retention rules once at `now_ms` and deletes what they select.
    ///
    /// # Errors
    /// [`LogError::Io`], [`LogError::Checkpoint`].
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<RetentionOutcome, LogError> {
        self.clock_ms = self.clock_ms.max(now_ms);
        let log_start_offset_breached = self.delete_log_start_offset_breached_segments()?;
        // Kafka 3.9 `UnifiedLog.deleteOldSegments`: size and time retention only apply when
        // `cleanup.policy` includes `delete`; a `compact`-only log keeps every segment.
        if !self.config.cleanup_policy.deletes() {
            return Ok(RetentionOutcome {
                log_start_offset_breached,
                ..RetentionOutcome::default()
            });
        }
        let size_breached = self.delete_retention_size_breached_segments()?;
        let time_breached = self.delete_retention_ms_breached_segments(now_ms)?;
        Ok(RetentionOutcome {
            log_start_offset_breached,
            size_breached,
            time_breached,
        })
    }

    /// How many of the oldest segments `predicate(segment, next)` selects, stopping at the
    /// first it rejects; only segments wholly below the high watermark, never an empty last
    /// segment (Kafka's `deletableSegments`).
    fn deletable_prefix(
        &self,
        mut predicate: impl FnMut(&Segment, Option<&Segment>) -> bool,
    ) -> usize {
        let high_watermark = self.high_watermark.unwrap_or(self.log_end_offset);
        let segments: Vec<&Segment> = self.segments.values().collect();
        let mut count = 0;
        for (i, segment) in segments.iter().enumerate() {
            let next = segments.get(i + 1).copied();
            let upper_bound = next.map_or(self.log_end_offset, Segment::base_offset);
            let last_and_empty = next.is_none() && segment.size() == 0;
            if high_watermark >= upper_bound && !last_and_empty && predicate(segment, next) {
                count += 1;
            } else {
                break;
            }
        }
        count
    }

    pub(crate) fn delete_log_start_offset_breached_segments(&mut self) -> Result<usize, LogError> {
        let start = self.log_start_offset;
        let count = self.deletable_prefix(|_, next| next.is_some_and(|n| n.base_offset() <= start));
        self.delete_oldest_segments(count)?;
        Ok(count)
    }

    fn delete_retention_size_breached_segments(&mut self) -> Result<usize, LogError> {
        let retention_bytes = self.config.retention_bytes;
        let size = self.size_in_bytes();
        if retention_bytes < 0 || size < retention_bytes as u64 {
            return Ok(0);
        }
        let mut diff = size - retention_bytes as u64;
        let count = self.deletable_prefix(|segment, _| {
            if diff >= segment.size() {
                diff -= segment.size();
                true
            } else {
                false
            }
        });
        self.delete_oldest_segments(count)?;
        Ok(count)
    }

    fn delete_retention_ms_breached_segments(&mut self, now_ms: i64) -> Result<usize, LogError> {
        let retention_ms = self.config.retention_ms;
        if retention_ms < 0 {
            return Ok(0);
        }
        let count = self.deletable_prefix(|segment, _| {
            now_ms.saturating_sub(largest_timestamp_ms(segment)) > retention_ms
        });
        self.delete_oldest_segments(count)?;
        Ok(count)
    }
}
