//! Zig-zag variable-length integers, as used inside v2 records (Kafka's `ByteUtils.writeVarint` /
//! `writeVarlong`): protobuf-style base-128 groups, least significant first, high bit = "more".
//!
//! A varint (i32) takes at most 5 bytes, a varlong (i64) at most 10; a longer encoding or a
//! buffer that ends mid-number is a [`VarintError`].

/// Why a varint could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The buffer ended before the last byte of the number (high bit still set).
    #[error("buffer ended inside a varint")]
    UnexpectedEnd,
    /// More than 5 (varint) or 10 (varlong) bytes had the continuation bit set.
    #[error("varint longer than {max_bytes} bytes")]
    TooLong {
        /// The longest valid encoding for the type.
        max_bytes: usize,
    },
}

fn read_unsigned(buf: &[u8], max_bytes: usize) -> Result<(u64, usize), VarintError> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let Some(&byte) = buf.get(i) else {
            return Err(VarintError::UnexpectedEnd);
        };
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(VarintError::TooLong { max_bytes })
}

/// Decodes a zig-zag varint (i32) from the front of `buf`; returns the value and bytes used.
///
/// # Errors
/// [`VarintError`] if `buf` ends early or the encoding is longer than 5 bytes.
pub fn read_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, used) = read_unsigned(buf, 5)?;
    // Five 7-bit groups carry 35 bits; like Kafka we keep the low 32.
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), used))
}

/// Decodes a zig-zag varlong (i64) from the front of `buf`; returns the value and bytes used.
///
/// # Errors
/// [`VarintError`] if `buf` ends early or the encoding is longer than 10 bytes.
pub fn read_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, used) = read_unsigned(buf, 10)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), used))
}

fn write_unsigned(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends `value` as a zig-zag varint.
pub fn write_varint(value: i32, out: &mut Vec<u8>) {
    write_unsigned(u64::from(((value << 1) ^ (value >> 31)) as u32), out);
}

/// Appends `value` as a zig-zag varlong.
pub fn write_varlong(value: i64, out: &mut Vec<u8>) {
    write_unsigned(((value << 1) ^ (value >> 63)) as u64, out);
}

/// Bytes [`write_varint`] uses for `value`.
#[must_use]
pub fn varint_size(value: i32) -> usize {
    unsigned_size(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// Bytes [`write_varlong`] uses for `value`.
#[must_use]
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(((value << 1) ^ (value >> 63)) as u64)
}

fn unsigned_size(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips_edge_values_with_kafka_sizes() {
        // Sizes from Kafka's ByteUtilsTest: 0 → 1 byte, -1 → 1, 63 → 1, 64 → 2, MIN/MAX → 5.
        for (value, size) in [
            (0, 1),
            (-1, 1),
            (63, 1),
            (-64, 1),
            (64, 2),
            (-65, 2),
            (i32::MAX, 5),
            (i32::MIN, 5),
        ] {
            let mut out = Vec::new();
            write_varint(value, &mut out);
            assert_eq!(out.len(), size, "value {value}");
            assert_eq!(varint_size(value), size, "value {value}");
            assert_eq!(read_varint(&out), Ok((value, size)), "value {value}");
        }
    }

    #[test]
    fn varlong_round_trips_edge_values() {
        for (value, size) in [
            (0, 1),
            (-1, 1),
            (i64::MAX, 10),
            (i64::MIN, 10),
            (1 << 40, 6),
        ] {
            let mut out = Vec::new();
            write_varlong(value, &mut out);
            assert_eq!(out.len(), size, "value {value}");
            assert_eq!(varlong_size(value), size, "value {value}");
            assert_eq!(read_varlong(&out), Ok((value, size)), "value {value}");
        }
    }

    #[test]
    fn varint_rejects_truncated_and_overlong_encodings() {
        assert_eq!(read_varint(&[]), Err(VarintError::UnexpectedEnd));
        assert_eq!(read_varint(&[0x80, 0x80]), Err(VarintError::UnexpectedEnd));
        assert_eq!(
            read_varint(&[0xff; 6]),
            Err(VarintError::TooLong { max_bytes: 5 })
        );
        assert_eq!(
            read_varlong(&[0xff; 11]),
            Err(VarintError::TooLong { max_bytes: 10 })
        );
    }
}
