//! The aborted-transaction index (Kafka 3.9 `TransactionIndex`, `AbortedTxn`): one
//! `<20-digit base offset>.txnindex` file per segment, holding an entry for every transaction
//! aborted by an ABORT marker written into that segment (the transaction's first offset may lie
//! in an earlier segment).
//!
//! # File format
//! A sequence of 34-byte big-endian entries, no header: `version:int16 (0)`,
//! `producer_id:int64`, `first_offset:int64`, `last_offset:int64` (the ABORT marker's offset),
//! `last_stable_offset:int64` (the partition's first unstable offset once the marker was
//! written). Entries have strictly increasing `last_offset`, each at or above the segment's
//! base offset. The file is created at the first entry, as Kafka does.
//!
//! A file that breaks these rules (a length not a multiple of 34, another version, offsets out
//! of order or out of the segment) is not trusted: [`TransactionIndex::load`] reports it and
//! the caller rebuilds the index from the log (the broker's producer-state replay).
//!
//! Appends are written to the page cache; the file is fsynced with its segment
//! ([`TransactionIndex::flush`]). Recovery checks it on open, so a torn tail is caught.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use crate::error::LogError;

/// Bytes of one entry.
pub const ABORTED_TXN_BYTES: usize = 34;
/// The only entry version.
pub const ABORTED_TXN_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch in this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The partition's last stable offset once the marker was written: the first offset of
    /// the earliest other open transaction, or `last_offset + 1`.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// The entry's 34 bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; ABORTED_TXN_BYTES] {
        let mut out = [0u8; ABORTED_TXN_BYTES];
        out[0..2].copy_from_slice(&ABORTED_TXN_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8; ABORTED_TXN_BYTES]) -> Result<AbortedTxn, String> {
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != ABORTED_TXN_VERSION {
            return Err(format!("entry version {version}, expected 0"));
        }
        let i64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            i64::from_be_bytes(b)
        };
        Ok(AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// Decodes a whole `.txnindex` of the segment at `base_offset`, checking every rule of the
/// module doc; entries at or beyond `end_offset` (data cut by recovery) are refused too.
///
/// # Errors
/// A description of the first defect.
pub fn decode_index(
    bytes: &[u8],
    base_offset: i64,
    end_offset: i64,
) -> Result<Vec<AbortedTxn>, String> {
    if !bytes.len().is_multiple_of(ABORTED_TXN_BYTES) {
        return Err(format!(
            "{} bytes is not a whole number of {ABORTED_TXN_BYTES}-byte entries",
            bytes.len()
        ));
    }
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ABORTED_TXN_BYTES);
    for (i, chunk) in bytes.chunks_exact(ABORTED_TXN_BYTES).enumerate() {
        let mut entry = [0u8; ABORTED_TXN_BYTES];
        entry.copy_from_slice(chunk);
        let txn = AbortedTxn::decode(&entry).map_err(|e| format!("entry {i}: {e}"))?;
        if txn.last_offset < base_offset || txn.last_offset >= end_offset {
            return Err(format!(
                "entry {i}: last offset {} outside the segment [{base_offset}, {end_offset})",
                txn.last_offset
            ));
        }
        if txn.first_offset > txn.last_offset || txn.first_offset < 0 {
            return Err(format!(
                "entry {i}: first offset {} after last offset {}",
                txn.first_offset, txn.last_offset
            ));
        }
        if let Some(prev) = out.last()
            && prev.last_offset >= txn.last_offset
        {
            return Err(format!(
                "entry {i}: last offset {} does not increase (previous {})",
                txn.last_offset, prev.last_offset
            ));
        }
        out.push(txn);
    }
    Ok(out)
}

/// What [`TransactionIndex::collect`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnIndexSearch {
    /// Aborted transactions overlapping the range, in index order.
    pub aborted: Vec<AbortedTxn>,
    /// An entry's last stable offset reached the upper bound: later segments need not be
    /// searched.
    pub complete: bool,
}

/// One segment's `.txnindex`: its entries in memory (they are few: one per aborted
/// transaction) and the file they are appended to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionIndex {
    path: PathBuf,
    base_offset: i64,
    entries: Vec<AbortedTxn>,
    /// Appended since the last flush.
    dirty: bool,
}

impl TransactionIndex {
    /// The (empty, not yet created) index of the segment at `base_offset` in `dir`.
    #[must_use]
    pub fn new(dir: &Path, base_offset: i64) -> Self {
        TransactionIndex {
            path: crate::fs::offset_file_path(dir, base_offset, crate::fs::TXN_INDEX_FILE_SUFFIX),
            base_offset,
            entries: Vec::new(),
            dirty: false,
        }
    }

    /// Reads the index of the segment at `base_offset` whose data ends before `end_offset`.
    /// A missing file is an empty index. `Ok(Err(reason))`: the file is corrupt — it has been
    /// deleted and the returned index is empty; the caller must rebuild it from the log.
    ///
    /// # Errors
    /// [`LogError::Io`] if the file cannot be read or deleted.
    pub fn load(
        dir: &Path,
        base_offset: i64,
        end_offset: i64,
    ) -> Result<(TransactionIndex, Option<String>), LogError> {
        let mut index = TransactionIndex::new(dir, base_offset);
        let bytes = match std::fs::read(&index.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((index, None)),
            Err(e) => return Err(LogError::io(&index.path, e)),
        };
        match decode_index(&bytes, base_offset, end_offset) {
            Ok(entries) => {
                index.entries = entries;
                Ok((index, None))
            }
            Err(reason) => {
                tracing::warn!(file = %index.path.display(), %reason,
                    "deleting a corrupt transaction index; it is rebuilt from the log");
                crate::segment::remove_if_exists(&index.path)?;
                Ok((index, Some(reason)))
            }
        }
    }

    /// Replaces the index of the segment at `base_offset` by `entries` (in order), written
    /// with [`crate::fs::write_atomically`] (the cleaner moving a group's entries to its
    /// cleaned segment).
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn write_new(
        dir: &Path,
        base_offset: i64,
        entries: Vec<AbortedTxn>,
    ) -> Result<TransactionIndex, LogError> {
        let mut index = TransactionIndex::new(dir, base_offset);
        let bytes: Vec<u8> = entries.iter().flat_map(AbortedTxn::encode).collect();
        crate::fs::write_atomically(&index.path, &bytes)
            .map_err(|e| LogError::io(&index.path, e))?;
        index.entries = entries;
        Ok(index)
    }

    /// The segment's base offset.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All entries, in order.
    #[must_use]
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Appends `txn` (to the file too, creating it). An entry whose last offset does not
    /// exceed the previous one is skipped (it is already indexed: a replay over a kept index).
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn append(&mut self, txn: AbortedTxn) -> Result<bool, LogError> {
        if self
            .entries
            .last()
            .is_some_and(|last| last.last_offset >= txn.last_offset)
        {
            return Ok(false);
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| LogError::io(&self.path, e))?;
        file.write_all(&txn.encode())
            .map_err(|e| LogError::io(&self.path, e))?;
        self.entries.push(txn);
        self.dirty = true;
        Ok(true)
    }

    /// Drops entries whose last offset is at or beyond `offset` (Kafka's `truncateTo`).
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let keep = self.entries.partition_point(|t| t.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        let len = (keep * ABORTED_TXN_BYTES) as u64;
        match std::fs::OpenOptions::new().write(true).open(&self.path) {
            Ok(file) => {
                file.set_len(len).map_err(|e| LogError::io(&self.path, e))?;
                // Truncation is made durable at once, like the log's.
                file.sync_all().map_err(|e| LogError::io(&self.path, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(&self.path, e)),
        }
        Ok(())
    }

    /// fsyncs appended entries (with the segment's data).
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn flush(&mut self) -> Result<(), LogError> {
        if !self.dirty {
            return Ok(());
        }
        match std::fs::File::open(&self.path) {
            Ok(file) => file.sync_all().map_err(|e| LogError::io(&self.path, e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(&self.path, e)),
        }
        self.dirty = false;
        Ok(())
    }

    /// Entries overlapping `[fetch_offset, upper_bound_offset)` (Kafka's
    /// `collectAbortedTxns`): last offset ≥ `fetch_offset` and first offset < the bound; the
    /// search is complete at the first entry whose last stable offset reaches the bound.
    #[must_use]
    pub fn collect(&self, fetch_offset: i64, upper_bound_offset: i64) -> TxnIndexSearch {
        let mut out = TxnIndexSearch::default();
        for txn in &self.entries {
            if txn.last_offset >= fetch_offset && txn.first_offset < upper_bound_offset {
                out.aborted.push(*txn);
            }
            if txn.last_stable_offset >= upper_bound_offset {
                out.complete = true;
                return out;
            }
        }
        out
    }
}

impl crate::Log {
    /// Appends an aborted transaction to the active segment's `.txnindex` (Kafka writes it to
    /// the segment that holds the ABORT marker: call this right after appending the marker).
    /// Indexes of segments deleted since are forgotten.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<(), LogError> {
        let segments = &self.segments;
        self.txn_indexes
            .retain(|base, _| segments.contains_key(base));
        let base = self
            .segments
            .range(..=txn.last_offset)
            .next_back()
            .map_or(self.log_start_offset, |(b, _)| *b);
        let dir = self.dir.clone();
        self.txn_indexes
            .entry(base)
            .or_insert_with(|| TransactionIndex::new(&dir, base))
            .append(txn)?;
        Ok(())
    }

    /// Aborted transactions overlapping `[fetch_offset, upper_bound_offset)`, searching the
    /// segments from the one holding `fetch_offset` on (Kafka's `collectAbortedTransactions`).
    #[must_use]
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> Vec<AbortedTxn> {
        let start = self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let mut out = Vec::new();
        for base in self.segments.range(start..).map(|(b, _)| *b) {
            if let Some(index) = self.txn_indexes.get(&base) {
                let found = index.collect(fetch_offset, upper_bound_offset);
                out.extend(found.aborted);
                if found.complete {
                    break;
                }
            }
        }
        out
    }

    /// Every aborted transaction indexed in the log, oldest first.
    #[must_use]
    pub fn all_aborted_txns(&self) -> Vec<AbortedTxn> {
        self.segments
            .keys()
            .filter_map(|b| self.txn_indexes.get(b))
            .flat_map(|i| i.entries().iter().copied())
            .collect()
    }

    /// The base offset of the segment after the one holding `offset`, or the log end offset
    /// (the upper bound Kafka uses when a read ends with its segment).
    #[must_use]
    pub fn next_segment_base_after(&self, offset: i64) -> i64 {
        self.segments
            .range(offset.saturating_add(1)..)
            .next()
            .map_or(self.log_end_offset, |(b, _)| *b)
    }

    /// A `.txnindex` was corrupt at open (and deleted): the caller must rebuild the aborted
    /// transactions from the log, from its start, with [`Log::append_aborted_txn`] (entries
    /// already present are skipped), then call [`Log::txn_indexes_rebuilt`].
    #[must_use]
    pub fn txn_indexes_need_rebuild(&self) -> bool {
        self.txn_indexes_corrupt
    }

    /// Clears what [`Log::txn_indexes_need_rebuild`] reports.
    pub fn txn_indexes_rebuilt(&mut self) {
        self.txn_indexes_corrupt = false;
    }

    /// Drops every index entry of segments at or after the one holding `offset`, so a replay
    /// from `offset` appends them again; a no-op for entries already there.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub fn reset_txn_indexes_from(&mut self, offset: i64) -> Result<(), LogError> {
        for index in self.txn_indexes.values_mut() {
            index.truncate_to(offset)?;
        }
        Ok(())
    }
}

/// Loads the `.txnindex` of every segment of a log being opened (`bases` ascending, the last
/// segment's data ending before `log_end_offset`); `true` if one was corrupt (and deleted).
///
/// # Errors
/// [`LogError::Io`].
pub(crate) fn load_all(
    dir: &Path,
    bases: &[i64],
    log_end_offset: i64,
) -> Result<(std::collections::BTreeMap<i64, TransactionIndex>, bool), LogError> {
    let mut out = std::collections::BTreeMap::new();
    let mut corrupt = false;
    for (i, &base) in bases.iter().enumerate() {
        let end = bases.get(i + 1).copied().unwrap_or(log_end_offset);
        let (index, defect) = TransactionIndex::load(dir, base, end)?;
        corrupt |= defect.is_some();
        if !index.entries().is_empty() {
            out.insert(base, index);
        }
    }
    Ok((out, corrupt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entry_bytes_are_kafkas_layout() {
        let bytes = txn(0x0102, 3, 9, 10).encode();
        assert_eq!(&bytes[0..2], &[0, 0], "version 0");
        assert_eq!(&bytes[2..10], &0x0102i64.to_be_bytes());
        assert_eq!(&bytes[10..18], &3i64.to_be_bytes());
        assert_eq!(&bytes[18..26], &9i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &10i64.to_be_bytes());
        let decoded = decode_index(&bytes, 0, 100).expect("valid");
        assert_eq!(decoded, vec![txn(0x0102, 3, 9, 10)]);
    }

    #[test]
    fn corrupt_indexes_are_refused_with_a_reason() {
        let a = txn(1, 0, 5, 6).encode();
        let b = txn(2, 1, 4, 6).encode();
        let cases: Vec<(&str, Vec<u8>, i64, i64)> = vec![
            ("torn entry", a[..20].to_vec(), 0, 100),
            (
                "version 1",
                {
                    let mut v = a.to_vec();
                    v[1] = 1;
                    v
                },
                0,
                100,
            ),
            ("below the segment base", a.to_vec(), 10, 100),
            ("beyond the log end", a.to_vec(), 0, 5),
            ("last offsets not increasing", [a, b].concat(), 0, 100),
        ];
        for (why, bytes, base, end) in cases {
            assert!(decode_index(&bytes, base, end).is_err(), "{why} accepted");
        }
    }

    #[test]
    fn collect_stops_at_the_first_entry_whose_lso_reaches_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = TransactionIndex::new(dir.path(), 0);
        // Three aborted transactions; the second one's LSO already covers offset 20.
        index.append(txn(1, 0, 10, 5)).expect("append");
        index.append(txn(2, 5, 15, 20)).expect("append");
        index.append(txn(3, 16, 25, 26)).expect("append");
        let found = index.collect(11, 18);
        assert_eq!(found.aborted, vec![txn(2, 5, 15, 20)]);
        assert!(found.complete);
        let found = index.collect(0, 30);
        assert_eq!(found.aborted.len(), 3);
        assert!(!found.complete);
        // Reloaded from disk, the same entries.
        let (loaded, corrupt) = TransactionIndex::load(dir.path(), 0, 100).expect("load");
        assert!(corrupt.is_none());
        assert_eq!(loaded.entries(), index.entries());
        assert_eq!(
            std::fs::metadata(dir.path().join("00000000000000000000.txnindex"))
                .expect("file")
                .len(),
            3 * 34
        );
    }

    #[test]
    fn truncation_drops_entries_at_or_after_the_offset_on_disk_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = TransactionIndex::new(dir.path(), 0);
        index.append(txn(1, 0, 10, 11)).expect("append");
        index.append(txn(2, 12, 20, 21)).expect("append");
        assert!(
            !index.append(txn(2, 12, 20, 21)).expect("append"),
            "repeat skipped"
        );
        index.truncate_to(20).expect("truncate");
        assert_eq!(index.entries(), &[txn(1, 0, 10, 11)]);
        let (loaded, _) = TransactionIndex::load(dir.path(), 0, 100).expect("load");
        assert_eq!(loaded.entries(), &[txn(1, 0, 10, 11)]);
    }

    #[test]
    fn a_corrupt_file_is_deleted_and_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.txnindex");
        std::fs::write(&path, [7u8; 40]).expect("write");
        let (index, corrupt) = TransactionIndex::load(dir.path(), 0, 100).expect("load");
        assert!(corrupt.is_some());
        assert!(index.entries().is_empty());
        assert!(!path.exists());
    }
}
