//! The leader's append accumulator (Kafka's `BatchAccumulator`): client records are given
//! offsets as they arrive and are cut into batches of at most `max_batch_size_bytes`, released
//! when a batch is full or `append.linger.ms` after its first record.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::MAX_ACCUMULATED_BATCHES;
use crate::types::{LeaderEpoch, LogOffset};

/// Bytes a data record adds to a v2 batch besides its value: length, attributes, timestamp
/// and offset deltas, null key, value length and header count varints (upper bound).
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 24;
/// Header bytes of a v2 batch (`RECORD_BATCH_OVERHEAD`).
pub(crate) const BATCH_HEADER_BYTES: usize = 61;

/// Why the leader refused an append. Nothing was buffered.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum AppendError {
    /// This replica is not the leader, or the caller's epoch is older than the leader's
    /// (Kafka's `NotLeaderException`). Wait for the next leader change.
    #[error("not the leader of epoch {requested} (current epoch {current})")]
    NotLeader {
        /// The epoch the caller wrote for.
        requested: LeaderEpoch,
        /// This replica's epoch.
        current: LeaderEpoch,
    },
    /// The caller's epoch is newer than this leader's: a caller bug (`IllegalArgumentException`).
    #[error("append for epoch {requested} is newer than the leader epoch {current}")]
    FutureEpoch {
        /// The epoch the caller wrote for.
        requested: LeaderEpoch,
        /// This replica's epoch.
        current: LeaderEpoch,
    },
    /// The records cannot fit one batch (`RecordBatchTooLargeException`).
    #[error("{size} bytes of records cannot fit a batch of at most {max} bytes")]
    RecordBatchTooLarge {
        /// Estimated batch size.
        size: usize,
        /// Limit.
        max: usize,
    },
    /// The accumulator already holds its maximum of full batches (`BufferAllocationException`);
    /// retry after the leader's next flush.
    #[error("the append buffer is full ({batches} batches waiting)")]
    BufferFull {
        /// Batches waiting.
        batches: usize,
    },
    /// No records were given.
    #[error("an append needs at least one record")]
    Empty,
}

/// Records waiting to become one batch.
#[derive(Clone, Debug)]
pub(crate) struct PendingBatch {
    pub base_offset: LogOffset,
    pub records: Vec<Bytes>,
    bytes: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct Accumulator {
    epoch: LeaderEpoch,
    next_offset: LogOffset,
    linger: Duration,
    max_batch_bytes: usize,
    open: Option<PendingBatch>,
    full: Vec<PendingBatch>,
    linger_deadline: Option<Instant>,
}

impl Accumulator {
    pub(crate) fn new(
        epoch: LeaderEpoch,
        next_offset: LogOffset,
        linger: Duration,
        max_batch_bytes: usize,
    ) -> Self {
        Self {
            epoch,
            next_offset,
            linger,
            max_batch_bytes,
            open: None,
            full: Vec::new(),
            linger_deadline: None,
        }
    }

    pub(crate) fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }

    /// Offset the next record will get.
    #[cfg(test)]
    pub(crate) fn next_offset(&self) -> LogOffset {
        self.next_offset
    }

    /// Moves the offset counter (the leader wrote a control batch outside the accumulator).
    pub(crate) fn skip_to(&mut self, offset: LogOffset) {
        assert!(
            self.open.is_none() && self.full.is_empty(),
            "control batch written over buffered records"
        );
        assert!(
            offset >= self.next_offset,
            "accumulator offsets go backwards"
        );
        self.next_offset = offset;
    }

    /// When the open batch must be released, if one is open.
    pub(crate) fn linger_deadline(&self) -> Option<Instant> {
        self.linger_deadline
    }

    /// Whether a full batch is waiting (release it without waiting for linger).
    pub(crate) fn has_full_batches(&self) -> bool {
        !self.full.is_empty()
    }

    /// Buffers `records` in one batch (Kafka keeps one append in one batch) and returns the
    /// offset of the last record.
    pub(crate) fn append(
        &mut self,
        now: Instant,
        records: Vec<Bytes>,
    ) -> Result<LogOffset, AppendError> {
        if records.is_empty() {
            return Err(AppendError::Empty);
        }
        let size: usize = records
            .iter()
            .map(|r| r.len() + RECORD_OVERHEAD_BYTES)
            .sum();
        if size + BATCH_HEADER_BYTES > self.max_batch_bytes {
            return Err(AppendError::RecordBatchTooLarge {
                size: size + BATCH_HEADER_BYTES,
                max: self.max_batch_bytes,
            });
        }
        let fits_open = self
            .open
            .as_ref()
            .is_some_and(|b| b.bytes + size <= self.max_batch_bytes);
        if !fits_open {
            if self.full.len() >= MAX_ACCUMULATED_BATCHES {
                return Err(AppendError::BufferFull {
                    batches: self.full.len(),
                });
            }
            if let Some(done) = self.open.take() {
                self.full.push(done);
            }
            self.open = Some(PendingBatch {
                base_offset: self.next_offset,
                records: Vec::new(),
                bytes: BATCH_HEADER_BYTES,
            });
            self.linger_deadline = Some(now + self.linger);
        }
        let count = i64::try_from(records.len()).unwrap_or(i64::MAX);
        let open = self.open.as_mut().expect("opened just above when absent");
        open.bytes += size;
        open.records.extend(records);
        self.next_offset = self.next_offset.plus(count);
        Ok(self.next_offset.plus(-1))
    }

    /// Takes the batches ready at `now` (full ones, and the open one once its linger expired
    /// or when `force`).
    pub(crate) fn drain(&mut self, now: Instant, force: bool) -> Vec<PendingBatch> {
        let mut out = std::mem::take(&mut self.full);
        if force || self.linger_deadline.is_some_and(|at| at <= now) {
            if let Some(open) = self.open.take() {
                out.push(open);
            }
            self.linger_deadline = None;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_get_offsets_and_linger_releases_the_batch() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(
            LeaderEpoch(2),
            LogOffset(10),
            Duration::from_millis(25),
            1024,
        );
        assert_eq!(
            acc.append(t0, vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
            Ok(LogOffset(11))
        );
        assert_eq!(
            acc.append(t0, vec![Bytes::from_static(b"c")]),
            Ok(LogOffset(12))
        );
        assert!(
            acc.drain(t0 + Duration::from_millis(24), false).is_empty(),
            "still lingering"
        );
        let out = acc.drain(t0 + Duration::from_millis(25), false);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].base_offset, out[0].records.len()),
            (LogOffset(10), 3)
        );
        assert_eq!(acc.next_offset(), LogOffset(13));
    }

    #[test]
    fn size_limits_cut_batches_and_reject_oversized_appends() {
        let t0 = Instant::now();
        let mut acc =
            Accumulator::new(LeaderEpoch(1), LogOffset(0), Duration::from_millis(25), 200);
        let big = Bytes::from(vec![0u8; 100]);
        assert!(acc.append(t0, vec![big.clone()]).is_ok());
        assert!(
            acc.append(t0, vec![big.clone()]).is_ok(),
            "second record opens a new batch"
        );
        assert!(acc.has_full_batches());
        assert_eq!(
            acc.drain(t0, false).len(),
            1,
            "full batch released without linger"
        );
        assert!(matches!(
            acc.append(t0, vec![Bytes::from(vec![0u8; 300])]),
            Err(AppendError::RecordBatchTooLarge { .. })
        ));
        assert_eq!(acc.append(t0, vec![]), Err(AppendError::Empty));
    }
}
