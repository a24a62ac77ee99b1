//! The payload codecs of a compressed v2 record batch, byte-compatible with Kafka 3.9's
//! `org.apache.kafka.common.compress` (what its clients and brokers write and read):
//!
//! - gzip: a gzip stream (Kafka's `GZIPInputStream` also reads concatenated members);
//! - snappy: xerial framing for every magic (`SnappyOutputStream`: the 16-byte header
//!   `\x82SNAPPY\0`, version 1, compatible version 1, then `i32` length + raw snappy block
//!   chunks of 32 KiB input each); `SnappyInputStream` reads a payload without that header as
//!   one raw snappy block, as librdkafka may send;
//! - lz4: an LZ4 frame (Kafka's `Lz4BlockOutputStream`: 64 KiB independent blocks, no block or
//!   content checksum; the reader refuses dependent blocks, reserved bits and versions other
//!   than 1, and checks the frame descriptor checksum, which magic 2 always gets right);
//! - zstd: a zstd frame.
//!
//! Decompression is bounded by a caller-given limit (Kafka has none): a few kilobytes can
//! inflate to gigabytes, and the leader decompresses every batch it is sent.

use std::io::{self, Read, Write};

use crate::batch::Compression;

/// The most bytes a batch payload may inflate to on the leader or in the cleaner (krust's
/// bound; Kafka has none). Four times `socket.request.max.bytes`' default would be 400 MiB;
/// 128 MiB keeps two concurrent decompressions well inside a small broker's memory while
/// being 128 times the default `max.message.bytes`.
pub const MAX_DECOMPRESSED_BYTES: usize = 128 * 1024 * 1024;

/// Kafka's `compression.gzip.level` default (`Deflater.DEFAULT_COMPRESSION`, i.e. 6).
pub const GZIP_DEFAULT_LEVEL: i32 = -1;
/// Kafka's `compression.lz4.level` default (lz4-java's fast compressor).
pub const LZ4_DEFAULT_LEVEL: i32 = 9;
/// Kafka's `compression.zstd.level` default.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// xerial snappy-java's stream header magic (`SnappyCodec.MAGIC_HEADER`).
const SNAPPY_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Header: magic, version (1), compatible version (1), each version a big-endian `i32`.
const SNAPPY_HEADER_LEN: usize = 16;
/// snappy-java's `SnappyOutputStream` default block size.
const SNAPPY_BLOCK_BYTES: usize = 32 * 1024;
/// LZ4 frame magic (little-endian on the wire).
const LZ4_MAGIC: u32 = 0x184D_2204;

/// A topic's `compression.type` with its level (KIP-390: `compression.gzip.level`,
/// `compression.lz4.level`, `compression.zstd.level`; snappy has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopicCompression {
    /// `producer`: batches are stored with the codec the producer chose.
    #[default]
    Producer,
    /// `uncompressed`: every batch is stored uncompressed.
    Uncompressed,
    /// `gzip` at `compression.gzip.level` (1..=9, or -1 for the default 6).
    Gzip {
        /// The level.
        level: i32,
    },
    /// `snappy`.
    Snappy,
    /// `lz4` at `compression.lz4.level` (1..=17).
    Lz4 {
        /// The level.
        level: i32,
    },
    /// `zstd` at `compression.zstd.level` (-131072..=22).
    Zstd {
        /// The level.
        level: i32,
    },
}

impl TopicCompression {
    /// The codec batches are stored with, or `None` for `producer` (the producer's codec).
    #[must_use]
    pub fn target(self) -> Option<(Compression, Option<i32>)> {
        match self {
            TopicCompression::Producer => None,
            TopicCompression::Uncompressed => Some((Compression::None, None)),
            TopicCompression::Gzip { level } => Some((Compression::Gzip, Some(level))),
            TopicCompression::Snappy => Some((Compression::Snappy, None)),
            TopicCompression::Lz4 { level } => Some((Compression::Lz4, Some(level))),
            TopicCompression::Zstd { level } => Some((Compression::Zstd, Some(level))),
        }
    }
}

/// Why a payload could not be decompressed or compressed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The compressed stream ended early (Kafka: "Incorrect declared batch size, premature EOF
    /// reached", `INVALID_RECORD`).
    #[error("{codec:?} stream ended early: {source}")]
    Truncated {
        /// The codec.
        codec: Compression,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// The compressed bytes are not a valid stream (Kafka: "Failed to decompress record
    /// stream", a `KafkaException` answered with `UNKNOWN_SERVER_ERROR`).
    #[error("{codec:?} stream is corrupt: {reason}")]
    Corrupt {
        /// The codec.
        codec: Compression,
        /// What the decoder said.
        reason: String,
    },
    /// The payload inflates beyond the limit ([`MAX_DECOMPRESSED_BYTES`]).
    #[error("{codec:?} payload inflates beyond {limit} bytes")]
    TooLarge {
        /// The codec.
        codec: Compression,
        /// The limit.
        limit: usize,
    },
    /// The encoder failed (an unsupported level). Remedy: fix the topic's level config.
    #[error("cannot compress with {codec:?}: {reason}")]
    Compress {
        /// The codec.
        codec: Compression,
        /// What the encoder said.
        reason: String,
    },
}

impl CodecError {
    fn from_io(codec: Compression, e: io::Error) -> CodecError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            CodecError::Truncated { codec, source: e }
        } else {
            CodecError::Corrupt {
                codec,
                reason: e.to_string(),
            }
        }
    }
}

/// Reads `reader` to the end, failing once more than `limit` bytes come out.
fn read_bounded(
    codec: Compression,
    reader: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| CodecError::from_io(codec, e))?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { codec, limit });
    }
    Ok(out)
}

/// Inflates a batch payload written with `codec` (`Compression::None` returns it as is).
///
/// # Errors
/// [`CodecError::Truncated`], [`CodecError::Corrupt`], or [`CodecError::TooLarge`] past
/// `limit` bytes.
pub fn decompress(codec: Compression, payload: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None => {
            if payload.len() > limit {
                return Err(CodecError::TooLarge { codec, limit });
            }
            Ok(payload.to_vec())
        }
        Compression::Gzip => read_bounded(codec, flate2::read::MultiGzDecoder::new(payload), limit),
        Compression::Snappy => snappy_decompress(payload, limit),
        Compression::Lz4 => {
            check_lz4_frame_descriptor(payload)?;
            let mut decoder =
                lz4::Decoder::new(payload).map_err(|e| CodecError::from_io(codec, e))?;
            let out = read_bounded(codec, &mut decoder, limit)?;
            // liblz4 reads a frame cut short as a short stream; Kafka's reader fails on it.
            decoder.finish().1.map_err(|e| CodecError::Truncated {
                codec,
                source: io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()),
            })?;
            Ok(out)
        }
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(payload)
                .map_err(|e| CodecError::from_io(codec, e))?;
            read_bounded(codec, decoder.single_frame(), limit)
        }
    }
}

/// Deflates `data` with `codec` at `level` (`None`: Kafka's default for the codec; snappy has
/// no level). `Compression::None` returns the bytes as they are.
///
/// # Errors
/// [`CodecError::Compress`] when the encoder refuses the level.
pub fn compress(
    codec: Compression,
    level: Option<i32>,
    data: &[u8],
) -> Result<Vec<u8>, CodecError> {
    let fail = |e: io::Error| CodecError::Compress {
        codec,
        reason: e.to_string(),
    };
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let level = match level.unwrap_or(GZIP_DEFAULT_LEVEL) {
                l @ 0..=9 => flate2::Compression::new(l.unsigned_abs()),
                _ => flate2::Compression::default(),
            };
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(data).map_err(fail)?;
            encoder.finish().map_err(fail)
        }
        Compression::Snappy => snappy_compress(data),
        Compression::Lz4 => {
            // Kafka uses lz4-java's fast compressor at the default level and its high
            // compressor otherwise; liblz4 frames do the same with level 0 and 3+.
            let level = match level.unwrap_or(LZ4_DEFAULT_LEVEL) {
                LZ4_DEFAULT_LEVEL => 0,
                l => l.clamp(3, 12).unsigned_abs(),
            };
            let mut encoder = lz4::EncoderBuilder::new()
                .level(level)
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())
                .map_err(fail)?;
            encoder.write_all(data).map_err(fail)?;
            let (out, result) = encoder.finish();
            result.map_err(fail)?;
            Ok(out)
        }
        Compression::Zstd => {
            zstd::stream::encode_all(data, level.unwrap_or(ZSTD_DEFAULT_LEVEL)).map_err(fail)
        }
    }
}

fn snappy_decompress(payload: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let codec = Compression::Snappy;
    let corrupt = |e: snap::Error| CodecError::Corrupt {
        codec,
        reason: e.to_string(),
    };
    let raw_block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), CodecError> {
        let len = snap::raw::decompress_len(block).map_err(corrupt)?;
        if out.len().saturating_add(len) > limit {
            return Err(CodecError::TooLarge { codec, limit });
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(corrupt)?;
        out.truncate(start + written);
        Ok(())
    };
    let mut out = Vec::new();
    if payload.len() < SNAPPY_HEADER_LEN || payload[..SNAPPY_MAGIC.len()] != SNAPPY_MAGIC {
        // snappy-java's `SnappyInputStream`: no stream header, so one raw block.
        raw_block(payload, &mut out)?;
        return Ok(out);
    }
    let mut rest = &payload[SNAPPY_HEADER_LEN..];
    while !rest.is_empty() {
        let Some((len_bytes, after)) = rest.split_first_chunk::<4>() else {
            return Err(CodecError::Truncated {
                codec,
                source: io::Error::new(io::ErrorKind::UnexpectedEof, "chunk length cut short"),
            });
        };
        let len =
            usize::try_from(i32::from_be_bytes(*len_bytes)).map_err(|_| CodecError::Corrupt {
                codec,
                reason: "negative chunk length".to_string(),
            })?;
        if after.len() < len {
            return Err(CodecError::Truncated {
                codec,
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("chunk of {len} bytes, {} left", after.len()),
                ),
            });
        }
        raw_block(&after[..len], &mut out)?;
        rest = &after[len..];
    }
    Ok(out)
}

fn snappy_compress(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(SNAPPY_HEADER_LEN + data.len() / 2 + 64);
    out.extend_from_slice(&SNAPPY_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(SNAPPY_BLOCK_BYTES) {
        let block = encoder
            .compress_vec(chunk)
            .map_err(|e| CodecError::Compress {
                codec: Compression::Snappy,
                reason: e.to_string(),
            })?;
        let len = i32::try_from(block.len()).map_err(|_| CodecError::Compress {
            codec: Compression::Snappy,
            reason: "block larger than 2 GiB".to_string(),
        })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

/// What Kafka's `Lz4BlockInputStream` refuses in the frame descriptor, checked before liblz4
/// (which accepts dependent blocks).
fn check_lz4_frame_descriptor(payload: &[u8]) -> Result<(), CodecError> {
    let codec = Compression::Lz4;
    let (Some(magic), Some(&flg)) = (payload.first_chunk::<4>(), payload.get(4)) else {
        return Err(CodecError::Truncated {
            codec,
            source: io::Error::new(io::ErrorKind::UnexpectedEof, "LZ4 frame header cut short"),
        });
    };
    let reason = if u32::from_le_bytes(*magic) != LZ4_MAGIC {
        "Stream unsupported (invalid magic bytes)"
    } else if flg & 0b11 != 0 {
        "Reserved bits must be 0"
    } else if flg & 0b0010_0000 == 0 {
        "Dependent block stream is unsupported"
    } else if flg >> 6 != 1 {
        "Version is unsupported"
    } else {
        return Ok(());
    };
    Err(CodecError::Corrupt {
        codec,
        reason: reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 ^ (i / 7) as u8).collect()
    }

    #[test]
    fn every_codec_round_trips_empty_small_and_multi_block_payloads() {
        for codec in CODECS {
            for len in [0, 1, 100, 200_000] {
                let data = sample(len);
                let packed = compress(codec, None, &data).expect("compress");
                let unpacked = decompress(codec, &packed, MAX_DECOMPRESSED_BYTES)
                    .unwrap_or_else(|e| panic!("{codec:?} len {len}: {e}"));
                assert_eq!(unpacked, data, "{codec:?} len {len}");
            }
        }
    }

    #[test]
    fn levels_of_kip_390_round_trip() {
        for (codec, level) in [
            (Compression::Gzip, 1),
            (Compression::Gzip, 9),
            (Compression::Lz4, 1),
            (Compression::Lz4, 17),
            (Compression::Zstd, -5),
            (Compression::Zstd, 22),
        ] {
            let data = sample(10_000);
            let packed = compress(codec, Some(level), &data).expect("compress");
            assert_eq!(
                decompress(codec, &packed, usize::MAX).expect("decompress"),
                data,
                "{codec:?} level {level}"
            );
        }
    }

    #[test]
    fn snappy_is_written_in_xerial_framing_and_read_raw_too() {
        let data = sample(70_000);
        let framed = compress(Compression::Snappy, None, &data).expect("compress");
        assert_eq!(framed[..8], SNAPPY_MAGIC);
        assert_eq!(framed[8..16], [0, 0, 0, 1, 0, 0, 0, 1]);
        let raw = snap::raw::Encoder::new().compress_vec(&data).expect("raw");
        assert_eq!(
            decompress(Compression::Snappy, &raw, usize::MAX).expect("raw"),
            data
        );
    }

    #[test]
    fn lz4_frames_are_written_as_kafka_writes_them() {
        let framed = compress(Compression::Lz4, None, &sample(1000)).expect("compress");
        assert_eq!(
            u32::from_le_bytes([framed[0], framed[1], framed[2], framed[3]]),
            LZ4_MAGIC
        );
        // Version 1, independent blocks, no block/content checksum, no content size.
        assert_eq!(framed[4], 0b0110_0000);
        // 64 KiB maximum block size.
        assert_eq!(framed[5], 4 << 4);
    }

    #[test]
    fn lz4_dependent_blocks_are_refused_as_kafka_refuses_them() {
        let mut framed = compress(Compression::Lz4, None, &sample(1000)).expect("compress");
        framed[4] &= !0b0010_0000;
        let err = decompress(Compression::Lz4, &framed, usize::MAX).expect_err("refused");
        assert!(err.to_string().contains("Dependent block"), "{err}");
    }

    #[test]
    fn inflating_past_the_limit_is_an_error_not_an_allocation() {
        let data = vec![0u8; 1 << 20];
        for codec in CODECS {
            let packed = compress(codec, None, &data).expect("compress");
            assert!(
                matches!(
                    decompress(codec, &packed, 1000),
                    Err(CodecError::TooLarge { limit: 1000, .. })
                ),
                "{codec:?}"
            );
        }
    }

    proptest::proptest! {
        /// Any bytes, under any codec, decompress or fail: no panic, nothing past the limit.
        #[test]
        fn arbitrary_payloads_never_panic(
            codec_id in 1u8..=4,
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            framed in proptest::bool::ANY,
        ) {
            let codec = Compression::from_id(codec_id).expect("codec");
            let mut bytes = payload;
            if framed {
                // Give the decoders a valid header so they reach their block parsers.
                let header = compress(codec, None, b"").expect("compress");
                bytes.splice(0..0, header.iter().take(16).copied());
            }
            if let Ok(out) = decompress(codec, &bytes, 1 << 16) {
                proptest::prop_assert!(out.len() <= 1 << 16);
            }
        }
    }

    #[test]
    fn cut_and_garbled_payloads_are_errors() {
        let data = sample(50_000);
        for codec in CODECS.into_iter().skip(1) {
            let packed = compress(codec, None, &data).expect("compress");
            for cut in [0, 3, packed.len() / 2, packed.len() - 1] {
                assert!(
                    decompress(codec, &packed[..cut], usize::MAX).is_err(),
                    "{codec:?} cut at {cut}"
                );
            }
            let garbage: Vec<u8> = packed.iter().map(|b| b ^ 0x5a).collect();
            let _ = decompress(codec, &garbage, 1 << 20);
        }
    }
}
