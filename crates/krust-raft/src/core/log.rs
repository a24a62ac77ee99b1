//! The core's mirror of the `__cluster_metadata-0` log: batches in offset order plus the
//! leader-epoch cache (epoch → start offset) used for divergence checks.
//!
//! The driver loads the durable log at start-up and hands it to [`RaftCore::new`](super::RaftCore::new);
//! from then on the core changes this mirror first and tells the driver to do the same on disk
//! (`Action::Append`, `Action::Truncate`), so both always hold the same bytes. Batches are Kafka v2
//! record batches ([`RecordBatch`]), exactly as they go on disk and on the wire.

use bytes::{Bytes, BytesMut};
use krust_log::batch::RecordBatch;

use crate::types::{LeaderEpoch, LogOffset, OffsetAndEpoch};

/// What the driver recovered from disk at start-up.
#[derive(Clone, Debug, Default)]
pub struct RecoveredLog {
    /// First offset in the log: 0, or the end offset of the snapshot the log starts at.
    pub log_start_offset: LogOffset,
    /// The latest snapshot on disk, if any (its end offset ≥ `log_start_offset`).
    pub latest_snapshot: Option<OffsetAndEpoch>,
    /// The earliest snapshot on disk (`== latest_snapshot` when there is only one).
    pub earliest_snapshot: Option<OffsetAndEpoch>,
    /// The batches from `log_start_offset`, contiguous, as read back (CRC-checked) from disk.
    pub batches: Vec<RecordBatch>,
}

/// Why a recovered log cannot be used: the batches are not a contiguous run of offsets with
/// non-decreasing epochs. The driver's recovery must cut the log back to the last good batch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LogShapeError {
    /// A batch does not start where the previous one ended.
    #[error("batch at offset {found} should start at {expected}")]
    Gap {
        /// Expected base offset.
        expected: i64,
        /// Found base offset.
        found: i64,
    },
    /// A batch's partitionLeaderEpoch is below its predecessor's.
    #[error("batch at offset {offset} has epoch {epoch}, below the previous batch's {previous}")]
    EpochDecreases {
        /// Base offset of the offending batch.
        offset: i64,
        /// Its epoch.
        epoch: i32,
        /// The epoch before it.
        previous: i32,
    },
}

/// In-memory view of the replicated log.
#[derive(Clone, Debug)]
pub(crate) struct RaftLog {
    start_offset: LogOffset,
    batches: Vec<RecordBatch>,
    /// `(epoch, start offset)` in increasing order of both (Kafka's `leader-epoch-checkpoint`).
    epochs: Vec<(LeaderEpoch, LogOffset)>,
    latest_snapshot: Option<OffsetAndEpoch>,
    earliest_snapshot: Option<OffsetAndEpoch>,
}

impl RaftLog {
    pub(crate) fn new(recovered: RecoveredLog) -> Result<Self, LogShapeError> {
        let mut log = Self {
            start_offset: recovered.log_start_offset,
            batches: Vec::with_capacity(recovered.batches.len()),
            epochs: Vec::new(),
            latest_snapshot: recovered.latest_snapshot,
            earliest_snapshot: recovered.earliest_snapshot.or(recovered.latest_snapshot),
        };
        for batch in recovered.batches {
            log.check_next(&batch)?;
            log.push(batch);
        }
        Ok(log)
    }

    /// Checks that `batch` may follow the current end (contiguous, epoch not decreasing).
    pub(crate) fn check_next(&self, batch: &RecordBatch) -> Result<(), LogShapeError> {
        let expected = self.end_offset().0;
        if batch.base_offset() != expected {
            return Err(LogShapeError::Gap {
                expected,
                found: batch.base_offset(),
            });
        }
        let previous = self.last_epoch().0;
        if batch.partition_leader_epoch() < previous {
            return Err(LogShapeError::EpochDecreases {
                offset: batch.base_offset(),
                epoch: batch.partition_leader_epoch(),
                previous,
            });
        }
        Ok(())
    }

    /// Appends a batch that passed [`RaftLog::check_next`].
    pub(crate) fn push(&mut self, batch: RecordBatch) {
        assert_eq!(
            batch.base_offset(),
            self.end_offset().0,
            "log append must be contiguous"
        );
        let epoch = LeaderEpoch(batch.partition_leader_epoch());
        assert!(
            epoch >= self.last_epoch(),
            "epoch of appended batch went backwards"
        );
        if self.epochs.last().is_none_or(|(e, _)| *e < epoch) {
            self.epochs.push((epoch, LogOffset(batch.base_offset())));
        }
        self.batches.push(batch);
    }

    pub(crate) fn start_offset(&self) -> LogOffset {
        self.start_offset
    }

    /// Log end offset (LEO): the next offset to write.
    pub(crate) fn end_offset(&self) -> LogOffset {
        self.batches
            .last()
            .map_or(self.start_offset, |b| LogOffset(b.next_offset()))
    }

    /// Epoch of the last batch, or of the snapshot the log starts at, or 0.
    pub(crate) fn last_epoch(&self) -> LeaderEpoch {
        match self.batches.last() {
            Some(b) => LeaderEpoch(b.partition_leader_epoch()),
            None => self
                .latest_snapshot
                .filter(|s| s.offset == self.start_offset)
                .map_or(LeaderEpoch(0), |s| s.epoch),
        }
    }

    /// `(LEO, last epoch)`: what a candidate advertises and a voter compares against.
    pub(crate) fn end_offset_and_epoch(&self) -> OffsetAndEpoch {
        OffsetAndEpoch {
            offset: self.end_offset(),
            epoch: self.last_epoch(),
        }
    }

    pub(crate) fn latest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.latest_snapshot
    }

    pub(crate) fn earliest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.earliest_snapshot
    }

    /// Kafka's `endOffsetForEpoch`: the end offset of the largest epoch ≤ `epoch`, with that
    /// epoch. If the log holds no such epoch, the log start with the start snapshot's epoch (or 0).
    pub(crate) fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> OffsetAndEpoch {
        let index = self.epochs.partition_point(|(e, _)| *e <= epoch);
        if index == 0 {
            let start_epoch = self
                .earliest_snapshot
                .filter(|s| s.offset == self.start_offset && s.epoch <= epoch)
                .map_or(LeaderEpoch(0), |s| s.epoch);
            return OffsetAndEpoch {
                offset: self.start_offset,
                epoch: start_epoch,
            };
        }
        let (found, _) = self.epochs[index - 1];
        let end = self
            .epochs
            .get(index)
            .map_or(self.end_offset(), |(_, start)| *start);
        OffsetAndEpoch {
            offset: end,
            epoch: found,
        }
    }

    /// Start offset of `epoch` in the log, if the log has batches of that epoch.
    #[cfg(test)]
    pub(crate) fn epoch_start_offset(&self, epoch: LeaderEpoch) -> Option<LogOffset> {
        self.epochs
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, start)| *start)
    }

    /// Removes every batch at or after `offset` and returns the new end offset. A batch that
    /// straddles `offset` is removed whole (Raft truncation points are batch boundaries).
    pub(crate) fn truncate_to(&mut self, offset: LogOffset) -> LogOffset {
        let keep = self
            .batches
            .partition_point(|b| b.next_offset() <= offset.0);
        self.batches.truncate(keep);
        let end = self.end_offset();
        self.epochs.retain(|(_, start)| *start < end);
        end
    }

    /// Index of the batch containing `offset`, if any.
    fn index_of(&self, offset: LogOffset) -> Option<usize> {
        let index = self
            .batches
            .partition_point(|b| b.next_offset() <= offset.0);
        self.batches
            .get(index)
            .filter(|b| b.base_offset() <= offset.0)
            .map(|_| index)
    }

    /// Whole batches from the one containing `offset`, at least one if any, at most `max_bytes`
    /// beyond the first. Returns the concatenated wire bytes (empty if nothing).
    pub(crate) fn read_from(&self, offset: LogOffset, max_bytes: usize) -> Bytes {
        let Some(first) = self.index_of(offset) else {
            return Bytes::new();
        };
        let mut out = BytesMut::new();
        for batch in &self.batches[first..] {
            if !out.is_empty() && out.len() + batch.size_in_bytes() > max_bytes {
                break;
            }
            out.extend_from_slice(batch.as_bytes());
        }
        out.freeze()
    }

    /// Batches whose records all lie in `[from, to)`.
    pub(crate) fn batches_between(&self, from: LogOffset, to: LogOffset) -> Vec<RecordBatch> {
        let first = self.batches.partition_point(|b| b.base_offset() < from.0);
        self.batches[first..]
            .iter()
            .take_while(|b| b.next_offset() <= to.0)
            .cloned()
            .collect()
    }

    /// Replaces the whole log by `snapshot` (a downloaded snapshot): no batches, log start =
    /// snapshot end offset, the snapshot is both the earliest and the latest.
    pub(crate) fn reset_to_snapshot(&mut self, snapshot: OffsetAndEpoch) {
        self.batches.clear();
        self.epochs.clear();
        self.start_offset = snapshot.offset;
        self.latest_snapshot = Some(snapshot);
        self.earliest_snapshot = Some(snapshot);
    }

    /// Drops batches below `snapshot.offset` (a batch boundary) and makes the snapshot the log
    /// start (and the latest, unless a later one is registered). The epoch cache keeps the
    /// epoch that spans the new start, moved up to it.
    pub(crate) fn trim_prefix(&mut self, snapshot: OffsetAndEpoch) {
        assert!(
            snapshot.offset <= self.end_offset(),
            "log start beyond the log end"
        );
        let drop = self
            .batches
            .partition_point(|b| b.next_offset() <= snapshot.offset.0);
        self.batches.drain(..drop);
        let start = snapshot.offset;
        // Keep the last epoch starting at or before the new start, and everything after it.
        let first_kept = self
            .epochs
            .partition_point(|(_, s)| *s <= start)
            .saturating_sub(1);
        self.epochs.drain(..first_kept);
        if let Some(first) = self.epochs.first_mut()
            && first.1 < start
        {
            first.1 = start;
        }
        // With no batch left, the start offset is described by the snapshot alone.
        if self.batches.is_empty() {
            self.epochs.clear();
        }
        self.start_offset = start;
        self.earliest_snapshot = Some(snapshot);
        // A later snapshot stays the latest (retention advances the start to an older one).
        if self
            .latest_snapshot
            .is_none_or(|l| l.offset < snapshot.offset)
        {
            self.latest_snapshot = Some(snapshot);
        }
    }

    /// Records a locally created snapshot as the latest.
    pub(crate) fn set_latest_snapshot(&mut self, snapshot: OffsetAndEpoch) {
        self.latest_snapshot = Some(snapshot);
        if self.earliest_snapshot.is_none() {
            self.earliest_snapshot = Some(snapshot);
        }
    }

    /// Whether `id.offset` ends a stretch of epoch `id.epoch`: the record just before it has
    /// that epoch (or it is the log start and the start snapshot has it).
    pub(crate) fn is_boundary_of_epoch(&self, id: OffsetAndEpoch) -> bool {
        if id.offset == self.start_offset {
            return self.last_epoch_before_start() == id.epoch;
        }
        let index = self
            .batches
            .partition_point(|b| b.next_offset() < id.offset.0);
        self.batches.get(index).is_some_and(|b| {
            b.next_offset() == id.offset.0 && b.partition_leader_epoch() == id.epoch.0
        })
    }

    fn last_epoch_before_start(&self) -> LeaderEpoch {
        self.earliest_snapshot
            .filter(|s| s.offset == self.start_offset)
            .map_or(LeaderEpoch(0), |s| s.epoch)
    }

    /// All batches (for tests and the simulator's checks).
    pub(crate) fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krust_log::batch::RecordBatchBuilder;

    fn batch(base: i64, epoch: i32, records: usize) -> RecordBatch {
        let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(epoch);
        for _ in 0..records {
            b.append_kv(0, None, Some(Bytes::from_static(b"x")));
        }
        b.build()
    }

    fn log_of(shape: &[(i32, usize)]) -> RaftLog {
        let mut log = RaftLog::new(RecoveredLog::default()).expect("empty log");
        for (epoch, n) in shape {
            let b = batch(log.end_offset().0, *epoch, *n);
            log.check_next(&b).expect("contiguous");
            log.push(b);
        }
        log
    }

    #[test]
    fn end_offset_for_epoch_follows_the_epoch_cache() {
        // epoch 1: [0, 3), epoch 3: [3, 5), epoch 4: [5, 8)
        let log = log_of(&[(1, 2), (1, 1), (3, 2), (4, 3)]);
        assert_eq!(log.end_offset(), LogOffset(8));
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(0)),
            OffsetAndEpoch::new(0, 0)
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(1)),
            OffsetAndEpoch::new(3, 1)
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(2)),
            OffsetAndEpoch::new(3, 1)
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(3)),
            OffsetAndEpoch::new(5, 3)
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(9)),
            OffsetAndEpoch::new(8, 4)
        );
        assert_eq!(log.epoch_start_offset(LeaderEpoch(3)), Some(LogOffset(3)));
    }

    #[test]
    fn truncation_drops_whole_batches_and_epochs() {
        let mut log = log_of(&[(1, 2), (1, 1), (3, 2), (4, 3)]);
        assert_eq!(
            log.truncate_to(LogOffset(4)),
            LogOffset(3),
            "straddling batch goes whole"
        );
        assert_eq!(log.last_epoch(), LeaderEpoch(1));
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(4)),
            OffsetAndEpoch::new(3, 1)
        );
        assert_eq!(log.truncate_to(LogOffset(0)), LogOffset(0));
        assert_eq!(log.end_offset_and_epoch(), OffsetAndEpoch::new(0, 0));
    }

    #[test]
    fn trimming_to_a_snapshot_keeps_the_epoch_spanning_the_new_start() {
        // epoch 1: [0, 3), epoch 3: [3, 5), epoch 4: [5, 8)
        let mut log = log_of(&[(1, 2), (1, 1), (3, 2), (4, 3)]);
        log.trim_prefix(OffsetAndEpoch::new(2, 1));
        assert_eq!(
            (log.start_offset(), log.end_offset()),
            (LogOffset(2), LogOffset(8))
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(1)),
            OffsetAndEpoch::new(3, 1)
        );
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(3)),
            OffsetAndEpoch::new(5, 3)
        );
        log.trim_prefix(OffsetAndEpoch::new(8, 4));
        assert_eq!(
            log.end_offset_and_epoch(),
            OffsetAndEpoch::new(8, 4),
            "empty log: the snapshot is its end"
        );
        assert!(log.is_boundary_of_epoch(OffsetAndEpoch::new(8, 4)));
        assert_eq!(log.earliest_snapshot(), Some(OffsetAndEpoch::new(8, 4)));
    }

    #[test]
    fn recovered_logs_must_be_contiguous_with_rising_epochs() {
        let gap = RecoveredLog {
            batches: vec![batch(0, 1, 1), batch(2, 1, 1)],
            ..RecoveredLog::default()
        };
        assert_eq!(
            RaftLog::new(gap).err(),
            Some(LogShapeError::Gap {
                expected: 1,
                found: 2
            })
        );
        let back = RecoveredLog {
            batches: vec![batch(0, 2, 1), batch(1, 1, 1)],
            ..RecoveredLog::default()
        };
        assert_eq!(
            RaftLog::new(back).err(),
            Some(LogShapeError::EpochDecreases {
                offset: 1,
                epoch: 1,
                previous: 2
            })
        );
    }

    #[test]
    fn reads_return_whole_batches_within_the_byte_limit() {
        let log = log_of(&[(1, 2), (1, 1), (3, 2)]);
        let all = log.read_from(LogOffset(0), usize::MAX);
        let one = log.read_from(LogOffset(1), 1);
        assert_eq!(
            one.len(),
            log.batches()[0].size_in_bytes(),
            "at least one batch, even over the limit"
        );
        assert!(all.len() > one.len());
        assert!(log.read_from(LogOffset(5), usize::MAX).is_empty());
        assert_eq!(log.batches_between(LogOffset(0), LogOffset(3)).len(), 2);
    }
}
