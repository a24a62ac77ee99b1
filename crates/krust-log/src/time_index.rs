//! The time index (`<base>.timeindex`): 12-byte entries `i64 timestamp, i32 relative offset`
//! (big-endian). Each entry says "up to this offset, the largest timestamp seen is this";
//! timestamps strictly increase (Kafka's `TimeIndex.maybeAppend`). The last slot is reserved for
//! the entry written when the segment stops being active, so the index counts as full one
//! entry early (Kafka's `TimeIndex.isFull`).

use std::path::Path;

use crate::batch::NO_TIMESTAMP;
use crate::error::LogError;
use crate::index_file::{IndexDefect, IndexEntry, IndexFile};

/// Bytes per time index entry.
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;

/// A time index entry in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// Largest timestamp up to `offset`.
    pub timestamp: i64,
    /// Absolute offset (the last offset of the batch holding that timestamp).
    pub offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawTimeEntry {
    timestamp: i64,
    relative_offset: i32,
}

impl IndexEntry for RawTimeEntry {
    const SIZE: usize = TIME_INDEX_ENTRY_SIZE;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[..8]);
        RawTimeEntry {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: i32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
}

/// A segment's time index.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    file: IndexFile<RawTimeEntry>,
}

impl TimeIndex {
    pub(crate) fn create(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
    ) -> Result<Self, LogError> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::create(path, max_index_bytes)?,
        })
    }

    /// Opens an existing index and checks it: timestamps strictly increasing, offsets
    /// non-decreasing within `[base_offset, last_offset]`. `Ok(Err(_))` means: rebuild it.
    pub(crate) fn open(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
        last_offset: i64,
    ) -> Result<Result<Self, IndexDefect>, LogError> {
        let file = match IndexFile::<RawTimeEntry>::open(path, max_index_bytes)? {
            Ok(f) => f,
            Err(defect) => return Ok(Err(defect)),
        };
        let mut previous: Option<RawTimeEntry> = None;
        for e in &file.entries {
            if e.relative_offset < 0 || base_offset + i64::from(e.relative_offset) > last_offset {
                return Ok(Err(IndexDefect::Inconsistent("offset outside the segment")));
            }
            if previous.is_some_and(|p| {
                e.timestamp <= p.timestamp || e.relative_offset < p.relative_offset
            }) {
                return Ok(Err(IndexDefect::Inconsistent("entries not increasing")));
            }
            previous = Some(*e);
        }
        Ok(Ok(TimeIndex { base_offset, file }))
    }

    fn absolute(&self, e: RawTimeEntry) -> TimestampOffset {
        TimestampOffset {
            timestamp: e.timestamp,
            offset: self.base_offset + i64::from(e.relative_offset),
        }
    }

    /// Entries, oldest first.
    #[must_use]
    pub fn entries(&self) -> Vec<TimestampOffset> {
        self.file
            .all()
            .into_iter()
            .map(|e| self.absolute(e))
            .collect()
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.file.len()
    }

    /// Whether there are no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.file.len() == 0
    }

    /// Full, keeping the last slot for the entry written at roll.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.file.len() + 1 >= self.file.max_entries()
    }

    /// The last entry, or `(NO_TIMESTAMP, base_offset)` if empty.
    #[must_use]
    pub fn last_entry(&self) -> TimestampOffset {
        self.file.last().map_or(
            TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.base_offset,
            },
            |e| self.absolute(e),
        )
    }

    /// The entry with the largest timestamp ≤ `target`, or `(NO_TIMESTAMP, base_offset)`.
    #[must_use]
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        let start = TimestampOffset {
            timestamp: NO_TIMESTAMP,
            offset: self.base_offset,
        };
        match self.file.partition_point(|e| e.timestamp <= target) {
            Some(i) if i > 0 => self.file.get(i - 1).map_or(start, |e| self.absolute(e)),
            // No entry at or below the target, or the index could not be read: scan.
            _ => start,
        }
    }

    /// Appends `(timestamp, offset)` if `timestamp` is larger than the last entry's. With
    /// `on_roll`, the reserved last slot may be used.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: i64, on_roll: bool) {
        if (!on_roll && self.is_full()) || !self.file.is_resident() {
            // A sealed (evicted) index already holds its final entry.
            return;
        }
        if self.file.len() >= self.file.max_entries() {
            return;
        }
        let last = self.file.last();
        if last.is_some_and(|l| timestamp <= l.timestamp) || (last.is_none() && timestamp < 0) {
            return;
        }
        let relative = offset.saturating_sub(self.base_offset);
        if !(0..=i64::from(i32::MAX)).contains(&relative)
            || last.is_some_and(|l| i64::from(l.relative_offset) > relative)
        {
            // Only possible when a trusted index or header read from disk disagrees with the
            // data: an entry out of range or order would make the file invalid, so leave it
            // out (lookups fall back to scanning).
            return;
        }
        self.file.push(RawTimeEntry {
            timestamp,
            relative_offset: relative as i32,
        });
    }

    /// Removes entries with offset ≥ `offset`.
    pub(crate) fn truncate_to_offset(&mut self, offset: i64) -> Result<(), LogError> {
        self.file.ensure_resident()?;
        let keep = self
            .file
            .partition_point(|e| self.base_offset + i64::from(e.relative_offset) < offset)
            .unwrap_or(0);
        self.file.truncate_entries(keep)
    }

    pub(crate) fn clear(&mut self) -> Result<(), LogError> {
        self.file.clear()
    }

    pub(crate) fn evict(&mut self) {
        self.file.evict();
    }

    pub(crate) fn ensure_resident(&mut self) -> Result<(), LogError> {
        self.file.ensure_resident()
    }

    pub(crate) fn write_out(&mut self) -> Result<(), LogError> {
        self.file.write_out()
    }

    pub(crate) fn trim_and_flush(&mut self) -> Result<(), LogError> {
        self.file.trim_and_flush()
    }

    pub(crate) fn trim(&mut self) -> Result<(), LogError> {
        self.file.trim()
    }

    pub(crate) fn sync(&self) -> Result<(), LogError> {
        self.file.sync()
    }

    pub(crate) fn sync_handle(&self) -> (std::path::PathBuf, std::sync::Arc<std::fs::File>) {
        self.file.sync_handle()
    }

    pub(crate) fn rename_to(&mut self, path: &Path) -> Result<(), LogError> {
        self.file.rename_to(path)
    }

    /// A spare index (created empty and pre-allocated ahead of a roll, see
    /// [`crate::segment::SpareSegment`]) becomes the index of the segment at `base_offset`,
    /// under `path`. It has no entries, so only its base changes.
    pub(crate) fn adopt(mut self, base_offset: i64, path: &Path) -> Result<Self, LogError> {
        debug_assert_eq!(self.len(), 0, "a spare index has no entries");
        self.file.rename_to(path)?;
        self.base_offset = base_offset;
        Ok(self)
    }

    /// The index file.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub(crate) fn delete(self) -> Result<(), LogError> {
        self.file.delete()
    }
}
