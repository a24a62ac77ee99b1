//! The cleaner's bounded offset map: key hash → offset of the key's latest record (Kafka 3.9
//! `SkimpyOffsetMap`). Keys are stored as 16-byte digests (the first half of SHA-256; Kafka uses
//! MD5), so an entry costs 24 bytes of the dedupe buffer, as in Kafka; the map takes at most
//! `dedupe buffer / 24 × load factor` entries.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// Bytes of dedupe buffer one entry accounts for: a 16-byte key digest and an 8-byte offset.
pub const BYTES_PER_ENTRY: u64 = 16 + 8;

/// Key digest → latest offset, with a fixed capacity.
#[derive(Debug)]
pub struct OffsetMap {
    entries: HashMap<u128, i64>,
    max_entries: usize,
    latest_offset: i64,
}

fn digest(key: &[u8]) -> u128 {
    let hash = Sha256::digest(key);
    let mut first = [0u8; 16];
    first.copy_from_slice(&hash[..16]);
    u128::from_be_bytes(first)
}

impl OffsetMap {
    /// A map for `dedupe_buffer_bytes` of memory filled up to `load_factor` (Kafka:
    /// `slots = memory / bytesPerEntry`, `maxDesiredMapSize = slots × loadFactor`).
    #[must_use]
    pub fn new(dedupe_buffer_bytes: u64, load_factor: f64) -> Self {
        let slots = dedupe_buffer_bytes / BYTES_PER_ENTRY;
        // Truncation is intended: a partial entry does not fit.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let max_entries = (slots as f64 * load_factor.clamp(0.0, 1.0)) as usize;
        OffsetMap {
            entries: HashMap::new(),
            max_entries,
            latest_offset: -1,
        }
    }

    /// Most entries the map takes before it is full.
    #[must_use]
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Distinct key digests stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the map takes no more entries (Kafka checks this before every put, even of a
    /// key it already holds).
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    /// Records `offset` as the latest offset of `key`; also the map's latest offset.
    ///
    /// # Panics
    /// If the map is full (callers check [`OffsetMap::is_full`] first).
    pub fn put(&mut self, key: &[u8], offset: i64) {
        assert!(!self.is_full(), "put into a full offset map");
        self.entries.insert(digest(key), offset);
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// The latest offset stored for `key`, `-1` if none (Kafka's `get`).
    #[must_use]
    pub fn get(&self, key: &[u8]) -> i64 {
        self.entries.get(&digest(key)).copied().unwrap_or(-1)
    }

    /// Raises the latest offset the map covers (offsets without keys, gaps, segment ends).
    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// Highest offset the map covers: records above it were not looked at (`-1` if none).
    #[must_use]
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    /// Empties the map for the next cleaning (capacity kept).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.latest_offset = -1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_follows_the_dedupe_buffer_and_load_factor() {
        let map = OffsetMap::new(24 * 100, 0.9);
        assert_eq!(map.max_entries(), 90);
        assert_eq!(OffsetMap::new(23, 0.9).max_entries(), 0);
    }

    #[test]
    fn keeps_the_latest_offset_per_key() {
        let mut map = OffsetMap::new(24 * 10, 1.0);
        map.put(b"a", 1);
        map.put(b"b", 2);
        map.put(b"a", 5);
        assert_eq!((map.get(b"a"), map.get(b"b"), map.get(b"c")), (5, 2, -1));
        assert_eq!((map.len(), map.latest_offset()), (2, 5));
        map.clear();
        assert_eq!((map.len(), map.latest_offset(), map.get(b"a")), (0, -1, -1));
    }
}
