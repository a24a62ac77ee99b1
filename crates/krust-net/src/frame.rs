//! Size-prefixed frames, sans IO: every Kafka request and response is a 4-byte big-endian
//! size followed by that many bytes (header + body).
//!
//! [`FrameDecoder::decode`] checks the size against the limit (`socket.request.max.bytes` on a
//! server) *as soon as the 4 prefix bytes are there*, before any of the frame is buffered, so a
//! peer cannot make us reserve more than the limit (Kafka's `NetworkReceive` does the same and
//! throws `InvalidReceiveException`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::FrameError;

/// Bytes of the size prefix.
pub const SIZE_PREFIX_BYTES: usize = 4;

/// Kafka's `socket.request.max.bytes` default (100 MiB).
pub const SOCKET_REQUEST_MAX_BYTES_DEFAULT: usize = 104_857_600;

/// How many bytes a reader asks the socket for when it is between frames.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Cuts complete frames off the front of a read buffer.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_bytes: usize,
}

impl FrameDecoder {
    /// A decoder that rejects frames larger than `max_frame_bytes` (the size prefix excluded,
    /// as in Kafka).
    #[must_use]
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameDecoder { max_frame_bytes }
    }

    /// The limit this decoder enforces.
    #[must_use]
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Takes one complete frame (without its size prefix) off the front of `buf`, or returns
    /// `Ok(None)` when more bytes are needed. When the frame is incomplete, `buf` gets enough
    /// spare capacity for the rest of it (and never more than the limit), so the caller can read
    /// into it with `read_buf`.
    ///
    /// # Errors
    ///
    /// [`FrameError::Oversized`] / [`FrameError::NegativeSize`] when the prefix announces a frame
    /// that cannot be accepted; the caller must close the connection, since the stream cannot be
    /// resynchronised.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = buf.get(..SIZE_PREFIX_BYTES) else {
            buf.reserve(READ_CHUNK_BYTES);
            return Ok(None);
        };
        let mut prefix_bytes = [0u8; SIZE_PREFIX_BYTES];
        prefix_bytes.copy_from_slice(prefix);
        let size = i32::from_be_bytes(prefix_bytes);
        let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
        if size > self.max_frame_bytes {
            return Err(FrameError::Oversized {
                size,
                max: self.max_frame_bytes,
            });
        }
        let total = SIZE_PREFIX_BYTES + size;
        if buf.len() < total {
            // Room for the rest of this frame only; the size is within the limit.
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        buf.advance(SIZE_PREFIX_BYTES);
        Ok(Some(buf.split_to(size).freeze()))
    }
}

/// A buffer for one outgoing frame: write the header and body after [`FrameBuilder::new`], then
/// call [`FrameBuilder::finish`] to fill in the size prefix.
#[derive(Debug)]
pub(crate) struct FrameBuilder {
    buf: BytesMut,
}

impl FrameBuilder {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut buf = BytesMut::with_capacity(SIZE_PREFIX_BYTES + capacity);
        buf.put_i32(0);
        FrameBuilder { buf }
    }

    pub(crate) fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The finished frame, or `None` when the content does not fit a 4-byte signed size.
    pub(crate) fn finish(mut self) -> Option<Bytes> {
        let size = i32::try_from(self.buf.len() - SIZE_PREFIX_BYTES).ok()?;
        self.buf[..SIZE_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
        Some(self.buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(size: i32, content: &[u8]) -> BytesMut {
        let mut buf = BytesMut::new();
        buf.put_i32(size);
        buf.put_slice(content);
        buf
    }

    #[test]
    fn decode_table() {
        struct Case {
            reason: &'static str,
            input: BytesMut,
            max: usize,
            expect: Result<Option<&'static [u8]>, FrameError>,
            left: usize,
        }
        let cases = [
            Case {
                reason: "empty buffer needs the size prefix",
                input: BytesMut::new(),
                max: 10,
                expect: Ok(None),
                left: 0,
            },
            Case {
                reason: "three prefix bytes are not a prefix yet",
                input: BytesMut::from(&[0u8, 0, 0][..]),
                max: 10,
                expect: Ok(None),
                left: 3,
            },
            Case {
                reason: "a frame cut short waits for the rest",
                input: frame(5, b"abc"),
                max: 10,
                expect: Ok(None),
                left: 7,
            },
            Case {
                reason: "a complete frame is returned without its prefix",
                input: frame(3, b"abc"),
                max: 10,
                expect: Ok(Some(b"abc")),
                left: 0,
            },
            Case {
                reason: "bytes of the next frame stay in the buffer",
                input: frame(2, b"abXYZ"),
                max: 10,
                expect: Ok(Some(b"ab")),
                left: 3,
            },
            Case {
                reason: "a zero-size frame is a frame (the header decoder rejects it later)",
                input: frame(0, b""),
                max: 10,
                expect: Ok(Some(b"")),
                left: 0,
            },
            Case {
                reason: "exactly the limit is accepted",
                input: frame(10, b"0123456789"),
                max: 10,
                expect: Ok(Some(b"0123456789")),
                left: 0,
            },
            Case {
                reason: "one byte over the limit is rejected before buffering",
                input: frame(11, b""),
                max: 10,
                expect: Err(FrameError::Oversized { size: 11, max: 10 }),
                left: 4,
            },
            Case {
                reason: "a negative size is rejected",
                input: frame(-1, b""),
                max: 10,
                expect: Err(FrameError::NegativeSize { size: -1 }),
                left: 4,
            },
            Case {
                reason: "i32::MAX is rejected against the default limit",
                input: frame(i32::MAX, b""),
                max: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                expect: Err(FrameError::Oversized {
                    size: i32::MAX as usize,
                    max: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                }),
                left: 4,
            },
            Case {
                reason: "'GET ' (HTTP on a Kafka port) reads as a huge size",
                input: BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]),
                max: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                expect: Err(FrameError::Oversized {
                    size: 0x4745_5420,
                    max: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                }),
                left: 16,
            },
        ];
        for case in cases {
            let mut buf = case.input;
            let got = FrameDecoder::new(case.max).decode(&mut buf);
            let got = got.map(|f| f.map(|b| b.to_vec()));
            let want = case.expect.map(|f| f.map(<[u8]>::to_vec));
            assert_eq!(got, want, "case: {}", case.reason);
            assert_eq!(buf.len(), case.left, "bytes left, case: {}", case.reason);
        }
    }

    #[test]
    fn incomplete_frame_reserves_no_more_than_its_size() {
        let mut buf = frame(100, b"a");
        let before = buf.capacity();
        assert_eq!(FrameDecoder::new(1000).decode(&mut buf), Ok(None));
        assert!(buf.capacity() >= 104, "room for the whole frame");
        assert!(buf.capacity() <= before.max(104) * 2, "no unbounded growth");
    }

    #[test]
    fn oversized_prefix_reserves_nothing() {
        let mut buf = frame(i32::MAX, b"");
        let before = buf.capacity();
        assert!(FrameDecoder::new(100).decode(&mut buf).is_err());
        assert_eq!(buf.capacity(), before);
    }

    #[test]
    fn builder_fills_in_the_size() {
        let mut builder = FrameBuilder::new(3);
        builder.buf().put_slice(b"xyz");
        let frame_bytes = builder.finish().expect("small frame");
        assert_eq!(&frame_bytes[..], &[0, 0, 0, 3, b'x', b'y', b'z']);
    }
}
