//! The sparse offset index (`<base>.index`): 8-byte entries `i32 relative offset, i32 position`
//! (big-endian), one per `index.interval.bytes` of batches. krust gives each entry the **last**
//! offset of the batch that starts at its position (what Kafka's recovery writes and what
//! `DumpLogSegments` verifies). Kafka's append path may instead use the last offset of a
//! multi-batch append at the position of its first batch; reading accepts any entry whose batch
//! starts at or before the entry's offset, which is all a lookup needs.

use std::path::Path;

use crate::error::LogError;
use crate::index_file::{IndexDefect, IndexEntry, IndexFile};

/// Bytes per offset index entry.
pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;

/// An index entry in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    /// Absolute offset (the last offset of the batch at `position`).
    pub offset: i64,
    /// Byte position of the batch in the `.log` file.
    pub position: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawOffsetEntry {
    relative_offset: i32,
    position: u32,
}

impl IndexEntry for RawOffsetEntry {
    const SIZE: usize = OFFSET_INDEX_ENTRY_SIZE;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        RawOffsetEntry {
            relative_offset: i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// A segment's offset index.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    file: IndexFile<RawOffsetEntry>,
}

impl OffsetIndex {
    pub(crate) fn create(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
    ) -> Result<Self, LogError> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::create(path, max_index_bytes)?,
        })
    }

    /// Opens an existing index and checks it against the segment: offsets strictly increasing
    /// and above the base offset, positions strictly increasing, positive and below
    /// `log_size`. `Ok(Err(_))` means: rebuild it.
    pub(crate) fn open(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
        log_size: u64,
    ) -> Result<Result<Self, IndexDefect>, LogError> {
        let file = match IndexFile::<RawOffsetEntry>::open(path, max_index_bytes)? {
            Ok(f) => f,
            Err(defect) => return Ok(Err(defect)),
        };
        let mut previous: Option<RawOffsetEntry> = None;
        for e in &file.entries {
            if e.relative_offset <= 0 || e.position == 0 {
                return Ok(Err(IndexDefect::Inconsistent(
                    "entry at or before the base",
                )));
            }
            if u64::from(e.position) >= log_size {
                return Ok(Err(IndexDefect::Inconsistent("position beyond the log")));
            }
            if previous
                .is_some_and(|p| e.relative_offset <= p.relative_offset || e.position <= p.position)
            {
                return Ok(Err(IndexDefect::Inconsistent("entries not increasing")));
            }
            previous = Some(*e);
        }
        Ok(Ok(OffsetIndex { base_offset, file }))
    }

    fn absolute(&self, e: RawOffsetEntry) -> OffsetPosition {
        OffsetPosition {
            offset: self.base_offset + i64::from(e.relative_offset),
            position: e.position,
        }
    }

    /// Entries, oldest first.
    #[must_use]
    pub fn entries(&self) -> Vec<OffsetPosition> {
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

    /// Whether the next append would overflow `segment.index.bytes` (the segment must roll).
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.file.len() >= self.file.max_entries()
    }

    /// The last entry, or `(base_offset, 0)` if empty.
    #[must_use]
    pub fn last_entry(&self) -> OffsetPosition {
        self.file.last().map_or(
            OffsetPosition {
                offset: self.base_offset,
                position: 0,
            },
            |e| self.absolute(e),
        )
    }

    /// The entry with the largest offset ≤ `target`, or `(base_offset, 0)`.
    #[must_use]
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let start = OffsetPosition {
            offset: self.base_offset,
            position: 0,
        };
        let idx = self
            .file
            .partition_point(|e| self.base_offset + i64::from(e.relative_offset) <= target);
        match idx {
            Some(i) if i > 0 => self.file.get(i - 1).map_or(start, |e| self.absolute(e)),
            // No entry at or below the target, or the index could not be read: scan.
            _ => start,
        }
    }

    /// Appends an entry. Offsets and positions must increase (checked: a violation is a bug).
    pub(crate) fn append(&mut self, offset: i64, position: u32) {
        let relative = offset - self.base_offset;
        assert!(
            relative > 0 && relative <= i64::from(i32::MAX),
            "offset {offset} not indexable in segment {}",
            self.base_offset
        );
        if let Some(last) = self.file.last() {
            assert!(
                i64::from(last.relative_offset) < relative && last.position < position,
                "offset index entries must increase"
            );
        }
        self.file.push(RawOffsetEntry {
            relative_offset: relative as i32,
            position,
        });
    }

    /// Removes entries at positions ≥ `position`.
    pub(crate) fn truncate_to_position(&mut self, position: u32) -> Result<(), LogError> {
        self.file.ensure_resident()?;
        let keep = self
            .file
            .partition_point(|e| e.position < position)
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
