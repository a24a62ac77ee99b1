//! Shared file handling of the two index kinds: fixed-size entries kept in memory, written to a
//! pre-allocated file (Kafka pre-allocates `segment.index.bytes`, rounded down to whole
//! entries) and trimmed to the entries on roll/close so closed segments match Kafka's files.
//!
//! Durability: entries are written out by [`IndexFile::write_out`] (the segment's flush) and
//! fsynced by [`IndexFile::trim_and_flush`] (roll and close). That is safe because an active
//! segment's index is never trusted blindly: recovery re-reads from the recovery point's entry
//! after checking that entry against the data, and rebuilds the rest.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::LogError;

/// One fixed-size index entry.
pub(crate) trait IndexEntry: Copy + std::fmt::Debug + PartialEq {
    const SIZE: usize;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Self;
}

/// Why an index file on disk was not usable (the caller rebuilds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexDefect {
    Missing,
    /// Length is not a multiple of the entry size.
    PartialEntry(u64),
    /// Entries out of order, out of range, or pointing nowhere.
    Inconsistent(&'static str),
}

#[derive(Debug)]
pub(crate) struct IndexFile<E: IndexEntry> {
    path: PathBuf,
    /// Shared with a roll's background flush ([`crate::log::FlushJob`]), which fsyncs it.
    file: Arc<File>,
    pub(crate) entries: Vec<E>,
    max_entries: usize,
    /// Entries already written to the file.
    persisted: usize,
    /// Whether the file is currently pre-allocated (longer than its entries).
    preallocated: bool,
    /// Whether `entries` holds the index. A sealed segment's index is evicted: lookups
    /// binary-search the file (page cache) so memory does not grow with the log.
    resident: bool,
    /// Entries in the file while evicted.
    evicted_len: usize,
}

fn max_entries_for<E: IndexEntry>(max_index_bytes: u32) -> usize {
    (max_index_bytes as usize / E::SIZE).max(1)
}

impl<E: IndexEntry> IndexFile<E> {
    /// Creates (or empties) the file and pre-allocates it.
    pub(crate) fn create(path: &Path, max_index_bytes: u32) -> Result<Self, LogError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| LogError::io(path, e))?;
        let mut index = IndexFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            entries: Vec::new(),
            max_entries: max_entries_for::<E>(max_index_bytes),
            persisted: 0,
            preallocated: false,
            resident: true,
            evicted_len: 0,
        };
        index.preallocate()?;
        Ok(index)
    }

    /// Reads an existing file. `Ok(Err(defect))` if it is missing or structurally bad; the
    /// caller validates the entries' meaning and rebuilds with [`IndexFile::create`].
    pub(crate) fn open(
        path: &Path,
        max_index_bytes: u32,
    ) -> Result<Result<Self, IndexDefect>, LogError> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(IndexDefect::Missing)),
            Err(e) => return Err(LogError::io(path, e)),
        };
        let len = file.metadata().map_err(|e| LogError::io(path, e))?.len();
        if len % E::SIZE as u64 != 0 {
            return Ok(Err(IndexDefect::PartialEntry(len)));
        }
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| LogError::io(path, e))?;
        // A pre-allocated file (the active segment's index before a crash) ends in zeros:
        // those slots were never written.
        let used = bytes
            .chunks_exact(E::SIZE)
            .rposition(|chunk| chunk.iter().any(|&b| b != 0))
            .map_or(0, |last| last + 1);
        let entries: Vec<E> = bytes[..used * E::SIZE]
            .chunks_exact(E::SIZE)
            .map(E::decode)
            .collect();
        let max_entries = max_entries_for::<E>(max_index_bytes).max(entries.len());
        let persisted = entries.len();
        Ok(Ok(IndexFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            entries,
            max_entries,
            persisted,
            preallocated: used * E::SIZE < bytes.len(),
            resident: true,
            evicted_len: 0,
        }))
    }

    fn preallocate(&mut self) -> Result<(), LogError> {
        let len = (self.max_entries * E::SIZE) as u64;
        self.file
            .set_len(len)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.preallocated = true;
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn len(&self) -> usize {
        if self.resident {
            self.entries.len()
        } else {
            self.evicted_len
        }
    }

    pub(crate) fn is_resident(&self) -> bool {
        self.resident
    }

    pub(crate) fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Entry `i`; `None` past the end or if reading an evicted index fails (callers then fall
    /// back to scanning the segment, whose own reads report the I/O error).
    pub(crate) fn get(&self, i: usize) -> Option<E> {
        if self.resident {
            return self.entries.get(i).copied();
        }
        if i >= self.evicted_len {
            return None;
        }
        let mut buf = [0u8; 16];
        let buf = &mut buf[..E::SIZE];
        match self.file.read_exact_at(buf, (i * E::SIZE) as u64) {
            Ok(()) => Some(E::decode(buf)),
            Err(e) => {
                tracing::warn!(index = %self.path.display(), error = %e, "reading index entry failed");
                None
            }
        }
    }

    pub(crate) fn last(&self) -> Option<E> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Number of leading entries for which `pred` holds (entries are sorted so that `pred`
    /// is true then false). `None` if an evicted index could not be read.
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(&E) -> bool) -> Option<usize> {
        if self.resident {
            return Some(self.entries.partition_point(pred));
        }
        let (mut lo, mut hi) = (0, self.evicted_len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(&self.get(mid)?) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// All entries (reads the file if evicted; an unreadable file gives none).
    pub(crate) fn all(&self) -> Vec<E> {
        if self.resident {
            return self.entries.clone();
        }
        (0..self.evicted_len).map_while(|i| self.get(i)).collect()
    }

    /// Drops the in-memory entries of a sealed index (written and trimmed already).
    pub(crate) fn evict(&mut self) {
        if self.resident && self.persisted == self.entries.len() && !self.preallocated {
            self.evicted_len = self.entries.len();
            self.entries = Vec::new();
            self.resident = false;
        }
    }

    /// Loads an evicted index back (its segment becomes active again after a truncation).
    pub(crate) fn ensure_resident(&mut self) -> Result<(), LogError> {
        if self.resident {
            return Ok(());
        }
        let mut bytes = vec![0u8; self.evicted_len * E::SIZE];
        self.file
            .read_exact_at(&mut bytes, 0)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.entries = bytes.chunks_exact(E::SIZE).map(E::decode).collect();
        self.persisted = self.entries.len();
        self.resident = true;
        self.evicted_len = 0;
        Ok(())
    }

    pub(crate) fn push(&mut self, entry: E) {
        assert!(self.resident, "appending to an evicted index");
        assert!(
            self.entries.len() < self.max_entries,
            "index {} is full; the segment must roll first",
            self.path.display()
        );
        self.entries.push(entry);
    }

    /// Keeps the first `n` entries; the file is cut to match (and re-extended if it was
    /// pre-allocated) so no stale entry survives on disk.
    pub(crate) fn truncate_entries(&mut self, n: usize) -> Result<(), LogError> {
        self.ensure_resident()?;
        if n >= self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(n);
        if self.persisted > n {
            self.persisted = n;
            self.file
                .set_len((n * E::SIZE) as u64)
                .map_err(|e| LogError::io(&self.path, e))?;
            if self.preallocated {
                self.preallocate()?;
            }
        }
        Ok(())
    }

    /// Drops every entry (before a rebuild).
    pub(crate) fn clear(&mut self) -> Result<(), LogError> {
        self.resident = true;
        self.evicted_len = 0;
        self.entries.clear();
        self.persisted = 0;
        self.file
            .set_len(0)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.preallocate()
    }

    /// Writes entries not yet in the file (no fsync: see [`crate::segment::Segment`]'s
    /// flush for why the active segment's index needs none).
    pub(crate) fn write_out(&mut self) -> Result<(), LogError> {
        self.write_pending()
    }

    fn write_pending(&mut self) -> Result<(), LogError> {
        // An evicted index is fully written by construction.
        if !self.resident || self.persisted == self.entries.len() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity((self.entries.len() - self.persisted) * E::SIZE);
        for e in &self.entries[self.persisted..] {
            e.encode(&mut buf);
        }
        self.file
            .write_all_at(&buf, (self.persisted * E::SIZE) as u64)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.persisted = self.entries.len();
        Ok(())
    }

    /// Writes pending entries, cuts the file to exactly its entries, and fsyncs: what Kafka
    /// does when the log is closed (and krust when a cleaned or recovered segment is sealed).
    pub(crate) fn trim_and_flush(&mut self) -> Result<(), LogError> {
        self.trim()?;
        self.sync()
    }

    /// Writes pending entries and cuts the file to exactly its entries, without fsync: what
    /// Kafka's `onBecomeInactiveSegment` does on a roll. The fsync comes later, from the
    /// roll's background flush ([`crate::log::FlushJob`]) or [`crate::Log::flush`]; until then
    /// the segment lies above the recovery point, so recovery rebuilds this index if a crash
    /// lost it.
    pub(crate) fn trim(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.file
            .set_len((self.len() * E::SIZE) as u64)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.preallocated = false;
        Ok(())
    }

    /// fsyncs the file (its entries were written by [`IndexFile::trim`]).
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        self.file
            .sync_all()
            .map_err(|e| LogError::io(&self.path, e))
    }

    /// The path and a shared handle, for an fsync off the caller's thread.
    pub(crate) fn sync_handle(&self) -> (PathBuf, Arc<File>) {
        (self.path.clone(), Arc::clone(&self.file))
    }

    /// Renames the file (the cleaner's `.cleaned` index taking its final name); the open
    /// handle stays valid. The caller fsyncs the directory.
    pub(crate) fn rename_to(&mut self, path: &Path) -> Result<(), LogError> {
        std::fs::rename(&self.path, path).map_err(|e| LogError::io(path, e))?;
        self.path = path.to_path_buf();
        Ok(())
    }

    /// Deletes the file (its segment is being deleted).
    pub(crate) fn delete(self) -> Result<(), LogError> {
        drop(self.file);
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LogError::io(&self.path, e)),
        }
    }
}
