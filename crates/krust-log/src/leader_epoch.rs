//! The leader epoch cache: which offset each leader epoch started at (Kafka's
//! `LeaderEpochFileCache`), persisted as `leader-epoch-checkpoint` (`0`, count, then
//! `<epoch> <startOffset>` lines). Used to answer OffsetForLeaderEpoch and to find where a
//! follower's log diverges from the leader's (KIP-101, KIP-279; Raft's diverging epoch).
//!
//! Every change is written to the file at once with [`crate::fs::write_atomically`] (epoch
//! changes are rare, and a lost entry would make truncation decisions wrong after a restart).

use std::path::{Path, PathBuf};

use tracing::warn;

use crate::checkpoint::{
    CheckpointError, LEADER_EPOCH_CHECKPOINT_FILE, read_versioned_entries, render_versioned_entries,
};
use crate::fs::write_atomically;

/// Kafka's `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// One `<epoch> <startOffset>` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// First offset written in that epoch.
    pub start_offset: i64,
}

/// Answer to "where does epoch E end?" (OffsetForLeaderEpoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// The largest epoch ≤ the requested one that this log knows, or [`UNDEFINED_EPOCH`].
    pub leader_epoch: i32,
    /// The start offset of the next larger epoch (or the log end offset for the latest
    /// epoch), or [`UNDEFINED_EPOCH_OFFSET`].
    pub end_offset: i64,
}

impl EpochEndOffset {
    /// `(-1, -1)`: the epoch is unknown.
    pub const UNDEFINED: EpochEndOffset = EpochEndOffset {
        leader_epoch: UNDEFINED_EPOCH,
        end_offset: UNDEFINED_EPOCH_OFFSET,
    };
}

/// The cache plus the file it is persisted to.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    /// Strictly increasing in both epoch and start offset.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// Loads `dir/leader-epoch-checkpoint` (empty if absent). Entries that are not strictly
    /// increasing are dropped with a warning, as Kafka does when it assigns them.
    ///
    /// # Errors
    /// [`CheckpointError`] if the file is malformed or unreadable.
    pub fn load(dir: &Path) -> Result<LeaderEpochCache, CheckpointError> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let loaded = read_versioned_entries(&path, |line| {
            let mut fields = line.split_whitespace();
            let epoch = fields.next()?.parse().ok()?;
            let start_offset = fields.next()?.parse().ok()?;
            fields.next().is_none().then_some(EpochEntry {
                epoch,
                start_offset,
            })
        })?;
        let mut cache = LeaderEpochCache {
            path,
            entries: Vec::with_capacity(loaded.len()),
        };
        for entry in loaded {
            cache.insert(entry);
        }
        Ok(cache)
    }

    /// The entries, oldest first.
    #[must_use]
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The latest epoch, if any.
    #[must_use]
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The latest entry, if any.
    #[must_use]
    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The epoch that `offset` was written in, from the entry with the largest start ≤ offset.
    #[must_use]
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// Inserts without persisting; returns whether anything changed.
    fn insert(&mut self, new: EpochEntry) -> bool {
        if self.entries.last().is_some_and(|latest| {
            latest.epoch == new.epoch && latest.start_offset <= new.start_offset
        }) {
            return false;
        }
        let before = self.entries.len();
        self.entries
            .retain(|e| e.epoch < new.epoch && e.start_offset < new.start_offset);
        if self.entries.len() != before {
            warn!(
                path = %self.path.display(),
                epoch = new.epoch,
                start_offset = new.start_offset,
                removed = before - self.entries.len(),
                "leader epoch entry conflicts with existing entries; removing them"
            );
        }
        self.entries.push(new);
        true
    }

    /// Records that `epoch` starts at `start_offset` (a batch with that leader epoch was
    /// appended at that offset). No-op if `epoch` is already the latest and starts earlier;
    /// entries with a larger or equal epoch or start offset are removed. Negative epochs are
    /// ignored (batches without a leader epoch).
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if persisting fails.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<(), CheckpointError> {
        if epoch < 0 {
            return Ok(());
        }
        if self.insert(EpochEntry {
            epoch,
            start_offset,
        }) {
            self.persist()?;
        }
        Ok(())
    }

    /// Where `requested_epoch` ends in a log whose end offset is `log_end_offset`
    /// (Kafka's `LeaderEpochFileCache.endOffsetFor`).
    #[must_use]
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> EpochEndOffset {
        if requested_epoch == UNDEFINED_EPOCH {
            return EpochEndOffset::UNDEFINED;
        }
        if self.latest_epoch() == Some(requested_epoch) {
            return EpochEndOffset {
                leader_epoch: requested_epoch,
                end_offset: log_end_offset,
            };
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested_epoch) else {
            return EpochEndOffset::UNDEFINED;
        };
        match self
            .entries
            .iter()
            .rev()
            .find(|e| e.epoch <= requested_epoch)
        {
            None => EpochEndOffset {
                leader_epoch: requested_epoch,
                end_offset: higher.start_offset,
            },
            Some(floor) => EpochEndOffset {
                leader_epoch: floor.epoch,
                end_offset: higher.start_offset,
            },
        }
    }

    /// Removes entries starting at or after `end_offset` (log truncated to `end_offset`).
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if persisting fails.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<(), CheckpointError> {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Drops entries wholly below `start_offset`; the last of them is kept, moved up to
    /// `start_offset` (log start offset advanced).
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if persisting fails.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<(), CheckpointError> {
        let below = self
            .entries
            .iter()
            .take_while(|e| e.start_offset < start_offset)
            .count();
        if below == 0 {
            return Ok(());
        }
        let last_below = self.entries[below - 1];
        self.entries.drain(..below);
        if self.entries.first().map(|e| e.start_offset) != Some(start_offset) {
            self.entries.insert(
                0,
                EpochEntry {
                    epoch: last_below.epoch,
                    start_offset,
                },
            );
        }
        self.persist()
    }

    /// Removes every entry.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if persisting fails.
    pub fn clear(&mut self) -> Result<(), CheckpointError> {
        self.entries.clear();
        self.persist()
    }

    fn persist(&self) -> Result<(), CheckpointError> {
        let text = render_versioned_entries(
            self.entries
                .iter()
                .map(|e| format!("{} {}", e.epoch, e.start_offset)),
        );
        write_atomically(&self.path, text.as_bytes()).map_err(|source| CheckpointError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path, entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::load(dir).expect("load");
        for &(epoch, offset) in entries {
            c.assign(epoch, offset).expect("assign");
        }
        c
    }

    #[test]
    fn end_offset_for_matches_kafka_cases() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cache(dir.path(), &[(2, 10), (4, 20), (6, 30)]);
        let cases = [
            (-1, EpochEndOffset::UNDEFINED, "undefined epoch"),
            (
                6,
                EpochEndOffset {
                    leader_epoch: 6,
                    end_offset: 40,
                },
                "latest epoch ends at LEO",
            ),
            (
                4,
                EpochEndOffset {
                    leader_epoch: 4,
                    end_offset: 30,
                },
                "known epoch ends where the next starts",
            ),
            (
                5,
                EpochEndOffset {
                    leader_epoch: 4,
                    end_offset: 30,
                },
                "unknown epoch answers with the floor epoch",
            ),
            (
                1,
                EpochEndOffset {
                    leader_epoch: 1,
                    end_offset: 10,
                },
                "below the earliest epoch",
            ),
            (7, EpochEndOffset::UNDEFINED, "above the latest epoch"),
        ];
        for (epoch, want, why) in cases {
            assert_eq!(c.end_offset_for(epoch, 40), want, "{why}");
        }
    }

    #[test]
    fn assign_ignores_repeats_and_removes_conflicts_and_persists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = cache(dir.path(), &[(1, 0), (1, 5), (3, 10)]);
        assert_eq!(
            c.entries().len(),
            2,
            "same epoch at a later offset is a no-op"
        );
        c.assign(2, 8).expect("assign");
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 2,
                    start_offset: 8
                }
            ]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).expect("read"),
            "0\n2\n1 0\n2 8\n"
        );
        let reloaded = LeaderEpochCache::load(dir.path()).expect("reload");
        assert_eq!(reloaded.entries(), c.entries());
    }

    #[test]
    fn truncation_from_both_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = cache(dir.path(), &[(1, 0), (2, 10), (3, 20)]);
        c.truncate_from_end(20).expect("truncate");
        assert_eq!(c.latest_epoch(), Some(2));
        c.truncate_from_start(15).expect("truncate");
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 2,
                start_offset: 15
            }]
        );
        assert_eq!(c.epoch_for_offset(16), Some(2));
        assert_eq!(c.epoch_for_offset(3), None);
    }
}
