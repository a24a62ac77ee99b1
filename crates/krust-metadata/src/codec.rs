//! Checked readers and writers for Kafka's flexible ("compact") message encoding, as used by
//! metadata record bodies (§3.1 of the facts sheet): unsigned varints, compact strings, tagged
//! field sections. Every read checks the remaining length first; nothing here panics on input.

use thiserror::Error;

/// Why a byte sequence could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended inside a field. Remedy: the bytes are truncated or not this format.
    #[error("input ends inside {field}: need {need} more bytes, have {have}")]
    UnexpectedEnd {
        /// The field being read.
        field: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// An unsigned varint ran past 5 bytes or past `u32::MAX`.
    #[error("malformed unsigned varint in {field}")]
    MalformedVarint {
        /// The field being read.
        field: &'static str,
    },
    /// A value is out of the range its field allows (e.g. a frame api key above `i16::MAX`).
    #[error("{field} value {value} is out of range")]
    OutOfRange {
        /// The field being read.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A string field is not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field being read.
        field: &'static str,
    },
    /// A tagged field's bytes were not all used by its value.
    #[error("{trailing} unexpected bytes after tagged field {field}")]
    TrailingBytes {
        /// The field being read.
        field: &'static str,
        /// Bytes left over.
        trailing: usize,
    },
    /// A non-nullable field held null.
    #[error("{field} is null, but the schema does not allow null")]
    UnexpectedNull {
        /// The field being read.
        field: &'static str,
    },
}

/// A cursor over borrowed bytes with checked reads.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> ByteReader<'a> {
    /// Starts reading at the first byte of `bytes`.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    /// Bytes not read yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// How many bytes were consumed so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.position
    }

    /// Takes the next `n` bytes.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than `n` bytes remain.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let have = self.remaining();
        if have < n {
            return Err(DecodeError::UnexpectedEnd {
                field,
                need: n,
                have,
            });
        }
        let out = &self.bytes[self.position..self.position + n];
        self.position += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let slice = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] at end of input.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Reads a big-endian `int16`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than 2 bytes remain.
    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `int32`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than 4 bytes remain.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `int64`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than 8 bytes remain.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Reads an unsigned varint (at most 5 bytes, at most `u32::MAX`).
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] or [`DecodeError::MalformedVarint`].
    pub fn unsigned_varint(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..5 {
            let byte = self.u8(field)?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return u32::try_from(value).map_err(|_| DecodeError::MalformedVarint { field });
            }
        }
        Err(DecodeError::MalformedVarint { field })
    }

    /// Reads a compact string that may be null (length varint + 1, 0 = null).
    ///
    /// # Errors
    /// Truncation, malformed length or invalid UTF-8.
    pub fn compact_nullable_string(
        &mut self,
        field: &'static str,
    ) -> Result<Option<String>, DecodeError> {
        let len_plus_one = self.unsigned_varint(field)?;
        let Some(len) = len_plus_one.checked_sub(1) else {
            return Ok(None);
        };
        let bytes = self.take(len as usize, field)?;
        let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8 { field })?;
        Ok(Some(text.to_owned()))
    }

    /// Reads a compact string that must not be null.
    ///
    /// # Errors
    /// As [`Self::compact_nullable_string`], plus [`DecodeError::UnexpectedNull`].
    pub fn compact_string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.compact_nullable_string(field)?
            .ok_or(DecodeError::UnexpectedNull { field })
    }

    /// Reads one byte as an `int8`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] at end of input.
    pub fn i8(&mut self, field: &'static str) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes([self.u8(field)?]))
    }

    /// Reads a `bool` (one byte, non-zero = true, as Kafka reads it).
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] at end of input.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        Ok(self.u8(field)? != 0)
    }

    /// Reads a big-endian `uint16`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than 2 bytes remain.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    /// Reads a 16-byte UUID.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] if fewer than 16 bytes remain.
    pub fn uuid(&mut self, field: &'static str) -> Result<uuid::Uuid, DecodeError> {
        Ok(uuid::Uuid::from_bytes(self.array(field)?))
    }

    /// Reads a compact array length (`None` = null). The count is checked against the bytes
    /// left, assuming each element takes at least `min_element_bytes`, so a corrupt count never
    /// causes a huge allocation.
    ///
    /// # Errors
    /// Truncation, malformed varint, or a count the remaining bytes cannot hold.
    pub fn compact_array_len(
        &mut self,
        field: &'static str,
        min_element_bytes: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let len_plus_one = self.unsigned_varint(field)?;
        let Some(len) = len_plus_one.checked_sub(1) else {
            return Ok(None);
        };
        let len = len as usize;
        let need = len.saturating_mul(min_element_bytes.max(1));
        if need > self.remaining() {
            return Err(DecodeError::UnexpectedEnd {
                field,
                need,
                have: self.remaining(),
            });
        }
        Ok(Some(len))
    }

    /// Reads a non-null compact array of `int32`.
    ///
    /// # Errors
    /// As [`Self::compact_array_len`], plus [`DecodeError::UnexpectedNull`].
    pub fn compact_i32_array(&mut self, field: &'static str) -> Result<Vec<i32>, DecodeError> {
        self.compact_nullable_i32_array(field)?
            .ok_or(DecodeError::UnexpectedNull { field })
    }

    /// Reads a nullable compact array of `int32`.
    ///
    /// # Errors
    /// As [`Self::compact_array_len`].
    pub fn compact_nullable_i32_array(
        &mut self,
        field: &'static str,
    ) -> Result<Option<Vec<i32>>, DecodeError> {
        let Some(len) = self.compact_array_len(field, 4)? else {
            return Ok(None);
        };
        (0..len)
            .map(|_| self.i32(field))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// Reads a non-null compact array of UUIDs.
    ///
    /// # Errors
    /// As [`Self::compact_array_len`], plus [`DecodeError::UnexpectedNull`].
    pub fn compact_uuid_array(
        &mut self,
        field: &'static str,
    ) -> Result<Vec<uuid::Uuid>, DecodeError> {
        let len = self
            .compact_array_len(field, 16)?
            .ok_or(DecodeError::UnexpectedNull { field })?;
        (0..len).map(|_| self.uuid(field)).collect()
    }

    /// Reads non-null compact bytes (length varint + 1).
    ///
    /// # Errors
    /// Truncation, malformed length, or null.
    pub fn compact_bytes(&mut self, field: &'static str) -> Result<Vec<u8>, DecodeError> {
        let len_plus_one = self.unsigned_varint(field)?;
        let len = len_plus_one
            .checked_sub(1)
            .ok_or(DecodeError::UnexpectedNull { field })?;
        Ok(self.take(len as usize, field)?.to_vec())
    }

    /// Reads a tagged-field section and returns the unknown fields as `(tag, bytes)` in order.
    /// Callers of schemas without known tagged fields keep them to re-encode byte for byte.
    ///
    /// # Errors
    /// Truncation or malformed varints.
    pub fn tagged_fields(&mut self) -> Result<Vec<(u32, Vec<u8>)>, DecodeError> {
        let count = self.unsigned_varint("tagged field count")?;
        // Each tagged field takes at least 2 bytes, which bounds `count` by the input size.
        if count as usize > self.remaining() / 2 {
            return Err(DecodeError::UnexpectedEnd {
                field: "tagged fields",
                need: count as usize * 2,
                have: self.remaining(),
            });
        }
        let mut fields = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let tag = self.unsigned_varint("tag")?;
            let size = self.unsigned_varint("tagged field size")?;
            let data = self.take(size as usize, "tagged field")?;
            fields.push((tag, data.to_vec()));
        }
        Ok(fields)
    }
}

/// Appends an unsigned varint.
pub fn put_unsigned_varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a compact string (non-null).
///
/// # Panics
/// If `value` is longer than `u32::MAX - 1` bytes (a caller bug: schema strings are short).
pub fn put_compact_string(out: &mut Vec<u8>, value: &str) {
    let len = u32::try_from(value.len())
        .ok()
        .and_then(|l| l.checked_add(1))
        .expect("compact string longer than u32::MAX - 1 bytes");
    put_unsigned_varint(out, len);
    out.extend_from_slice(value.as_bytes());
}

/// Decodes one known tagged field's bytes with `read`, which must consume them all.
///
/// # Errors
/// What `read` returns, or [`DecodeError::TrailingBytes`].
pub fn decode_tagged<T>(
    bytes: &[u8],
    field: &'static str,
    read: impl FnOnce(&mut ByteReader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut sub = ByteReader::new(bytes);
    let value = read(&mut sub)?;
    if sub.remaining() > 0 {
        return Err(DecodeError::TrailingBytes {
            field,
            trailing: sub.remaining(),
        });
    }
    Ok(value)
}

/// Appends a compact array length (`None` = null).
///
/// # Panics
/// If `len` is `u32::MAX` or more (a caller bug: arrays are bounded by the batch size).
pub fn put_compact_array_len(out: &mut Vec<u8>, len: Option<usize>) {
    let encoded = match len {
        None => 0,
        Some(n) => u32::try_from(n)
            .ok()
            .and_then(|n| n.checked_add(1))
            .expect("array longer than u32::MAX - 1"),
    };
    put_unsigned_varint(out, encoded);
}

/// Appends a nullable compact string.
pub fn put_compact_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        None => put_unsigned_varint(out, 0),
        Some(v) => put_compact_string(out, v),
    }
}

/// Appends a nullable compact array of `int32`.
pub fn put_compact_i32_array(out: &mut Vec<u8>, values: Option<&[i32]>) {
    put_compact_array_len(out, values.map(<[i32]>::len));
    for v in values.unwrap_or_default() {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a compact array of UUIDs.
pub fn put_compact_uuid_array(out: &mut Vec<u8>, values: &[uuid::Uuid]) {
    put_compact_array_len(out, Some(values.len()));
    for v in values {
        out.extend_from_slice(v.as_bytes());
    }
}

/// Merges known tagged fields (already encoded, `(tag, bytes)`) with unknown ones and appends
/// the section in ascending tag order.
pub fn put_tagged_section(
    out: &mut Vec<u8>,
    mut known: Vec<(u32, Vec<u8>)>,
    unknown: &[(u32, Vec<u8>)],
) {
    known.extend(unknown.iter().cloned());
    known.sort_by_key(|(tag, _)| *tag);
    put_tagged_fields(out, &known);
}

/// Appends non-null compact bytes.
///
/// # Panics
/// If `value` is longer than `u32::MAX - 1` bytes (a caller bug: schema fields are short).
pub fn put_compact_bytes(out: &mut Vec<u8>, value: &[u8]) {
    let len = u32::try_from(value.len())
        .ok()
        .and_then(|l| l.checked_add(1))
        .expect("compact bytes longer than u32::MAX - 1");
    put_unsigned_varint(out, len);
    out.extend_from_slice(value);
}

/// Appends a tagged-field section holding `fields` (which must be in ascending tag order).
///
/// # Panics
/// If a field is longer than `u32::MAX` bytes.
pub fn put_tagged_fields(out: &mut Vec<u8>, fields: &[(u32, Vec<u8>)]) {
    let count = u32::try_from(fields.len()).expect("more than u32::MAX tagged fields");
    put_unsigned_varint(out, count);
    for (tag, data) in fields {
        put_unsigned_varint(out, *tag);
        put_unsigned_varint(
            out,
            u32::try_from(data.len()).expect("tagged field longer than u32::MAX"),
        );
        out.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_varint_round_trips_edge_values() {
        for value in [0u32, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut out = Vec::new();
            put_unsigned_varint(&mut out, value);
            let mut reader = ByteReader::new(&out);
            assert_eq!(reader.unsigned_varint("v"), Ok(value), "value {value}");
            assert_eq!(reader.remaining(), 0);
        }
    }

    #[test]
    fn unsigned_varint_rejects_six_bytes_and_overflow() {
        let mut reader = ByteReader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(
            reader.unsigned_varint("v"),
            Err(DecodeError::MalformedVarint { field: "v" })
        );
        let mut reader = ByteReader::new(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert_eq!(
            reader.unsigned_varint("v"),
            Err(DecodeError::MalformedVarint { field: "v" })
        );
    }

    #[test]
    fn compact_string_checks_length_and_utf8() {
        let mut reader = ByteReader::new(&[5, b'a', b'b']);
        assert!(matches!(
            reader.compact_string("name"),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
        let mut reader = ByteReader::new(&[2, 0xff]);
        assert_eq!(
            reader.compact_string("name"),
            Err(DecodeError::InvalidUtf8 { field: "name" })
        );
        let mut reader = ByteReader::new(&[0]);
        assert_eq!(
            reader.compact_string("name"),
            Err(DecodeError::UnexpectedNull { field: "name" })
        );
    }

    #[test]
    fn tagged_fields_count_is_bounded_by_input() {
        let mut reader = ByteReader::new(&[0xff, 0xff, 0x03]);
        assert!(matches!(
            reader.tagged_fields(),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
    }
}
