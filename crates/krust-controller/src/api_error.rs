//! [`ApiError`]: one item's error code and message in a response with per-item results
//! (Kafka's `ApiError`), and [`java_hash_map_order`], the iteration order of the Java
//! `HashMap`s Kafka builds those responses from (so krust lists results in Kafka's order).

use kafka_protocol::protocol::StrBytes;

use crate::error::ControllerError;

/// An item's result: Kafka's error code and message (`None` = Kafka sends a null message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The Kafka error code (0 = success).
    pub code: i16,
    /// The message, as Kafka's `ApiError.message()`.
    pub message: Option<String>,
}

impl ApiError {
    /// Success (Kafka's `ApiError.NONE`: code 0, null message).
    pub const NONE: ApiError = ApiError {
        code: 0,
        message: None,
    };

    /// `code` with `message`.
    #[must_use]
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: Some(message.into()),
        }
    }

    /// Whether this is an error.
    #[must_use]
    pub fn is_failure(&self) -> bool {
        self.code != 0
    }

    /// The message as the protocol carries it.
    #[must_use]
    pub fn message_bytes(&self) -> Option<StrBytes> {
        self.message.clone().map(StrBytes::from_string)
    }
}

impl From<&ControllerError> for ApiError {
    fn from(error: &ControllerError) -> Self {
        ApiError::new(error.code(), error.to_string())
    }
}

/// Java's `String.hashCode` (UTF-16 code units, wrapping `i32`).
#[must_use]
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// `HashMap`'s table size for `new HashMap<>(n)` (`tableSizeFor`); `new HashMap<>()` is 16.
#[must_use]
pub fn java_table_size_for(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// The order a Java `HashMap` (load factor 0.75) created with table size `initial_capacity`
/// iterates keys with hash codes `hashes`, given in first-insertion order, when at most
/// `max_size` entries were in it at once: by bucket of the final table
/// (`(h ^ h >>> 16) & (capacity - 1)`), then by insertion (buckets of fewer than 8 entries are
/// lists that keep insertion order across resizes). Returns indices into `hashes`.
#[must_use]
pub fn java_hash_map_order(hashes: &[i32], initial_capacity: usize, max_size: usize) -> Vec<usize> {
    let mut capacity = initial_capacity.max(1);
    // Java resizes when the size exceeds (int) (capacity * 0.75).
    while max_size > capacity * 3 / 4 {
        capacity *= 2;
    }
    let mask = capacity - 1;
    let bucket = |h: i32| {
        let h = u32::from_ne_bytes(h.to_ne_bytes());
        usize::try_from(h ^ (h >> 16)).unwrap_or(0) & mask
    };
    let mut order: Vec<usize> = (0..hashes.len()).collect();
    order.sort_by_key(|&i| (bucket(hashes[i]), i));
    order
}

/// [`java_hash_map_order`] of a map keyed by `keys` (Java `String.hashCode`).
#[must_use]
pub fn java_string_map_order(
    keys: &[&str],
    initial_capacity: usize,
    max_size: usize,
) -> Vec<usize> {
    let hashes: Vec<i32> = keys.iter().map(|k| java_string_hash(k)).collect();
    java_hash_map_order(&hashes, initial_capacity, max_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("ab"), 97 * 31 + 98);
        assert_eq!(java_string_hash("user"), 3_599_307);
    }

    #[test]
    fn hash_map_order_is_by_bucket_then_insertion() {
        // "b" (98) and "a" (97): bucket 2 before bucket 1? No: 97 & 15 = 1, 98 & 15 = 2.
        let hashes = [java_string_hash("b"), java_string_hash("a")];
        assert_eq!(java_hash_map_order(&hashes, 16, 2), vec![1, 0]);
        // Same bucket: insertion order.
        assert_eq!(java_hash_map_order(&[1, 17], 16, 2), vec![0, 1]);
        // 13 entries grow the table to 32: 1 and 17 are then in different buckets.
        assert_eq!(java_hash_map_order(&[17, 1], 16, 13), vec![1, 0]);
        // new HashMap<>(2) with two entries grows to 4: client-id (bucket 0) before user (1).
        assert_eq!(
            java_string_map_order(&["user", "client-id"], java_table_size_for(2), 2),
            vec![1, 0]
        );
    }
}
