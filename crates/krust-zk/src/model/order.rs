//! The key orders Kafka 3.9's JSON writer produces.
//!
//! Kafka serializes znode JSON with Jackson over a Scala or Java map, so the order of the keys
//! is the map's iteration order, which depends on Java's `String.hashCode`. Byte-equal output
//! (what a golden test compares, and what a ZooKeeper watcher diffing bytes sees) needs the same
//! order. Fixed key sets have their order written out where they are encoded; this module
//! orders the variable key sets: partition ids in `/brokers/topics/<t>` (a Scala 2.13
//! `mutable.HashMap`) and config keys in `/config/...` (a `java.util.Properties`, a
//! `ConcurrentHashMap` since Java 9).

/// Java's `String.hashCode` (over UTF-16 code units, wrapping).
#[must_use]
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The table size of a Java/Scala hash map holding `len` keys with the default initial capacity
/// (16) and load factor (0.75): the table doubles once `len` reaches three quarters of it.
fn table_size(len: usize) -> u32 {
    let mut size: u32 = 16;
    while len >= (size as usize) / 4 * 3 && size < (1 << 30) {
        size *= 2;
    }
    size
}

fn spread(h: i32) -> u32 {
    let h = h as u32;
    h ^ (h >> 16)
}

/// Orders `keys` as a Scala 2.13 `mutable.HashMap[String, _]` iterates them: by bucket
/// (`improveHash(h) & (size - 1)`), then by hash inside a bucket; equal hashes keep the given
/// order.
pub fn scala_mutable_hash_map_order<T>(items: &mut [(String, T)]) {
    let mask = table_size(items.len()) - 1;
    items.sort_by_key(|(k, _)| {
        let h = spread(java_string_hash(k));
        (h & mask, h)
    });
}

/// Orders `keys` as a `java.util.Properties` (Java 9+: a `ConcurrentHashMap`) iterates them: by
/// bin (`spread(h) & (size - 1)`); keys sharing a bin keep the given order (ConcurrentHashMap
/// appends to a bin; after a resize Java's order inside a bin can differ, a case the writer's
/// small config maps rarely meet).
pub fn java_properties_order<T>(items: &mut [(String, T)]) {
    let mask = table_size(items.len()) - 1;
    items.sort_by_key(|(k, _)| (spread(java_string_hash(k)) & 0x7fff_ffff) & mask);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("0"), 48);
        assert_eq!(java_string_hash("10"), 1567);
        assert_eq!(java_string_hash("hello"), 99_162_322);
    }
}
