//! `krust dump-log`: Kafka 3.9's `kafka-dump-log.sh` (`kafka.tools.DumpLogSegments`) for the
//! files of a KRaft metadata log: `.log` segments and `.checkpoint` snapshots, printed line for
//! line as Kafka prints them (facts §7.4).
//!
//! With `--cluster-metadata-decoder` every data record's value is decoded as an
//! `ApiMessageAndVersion` frame and printed as `payload: {"type":…,"version":…,"data":{…}}`
//! ([`json`]); control records print their decoded form (`SnapshotHeader {…}`, …) or
//! `controlType: NAME(id)`. Without a decoder, `--print-data-log` prints keys and values as UTF-8
//! text (Kafka's `StringDecoder`).
//!
//! A batch whose CRC does not match is printed with `isvalid: false`, as Kafka does. Differences
//! from Kafka, for files Kafka itself would choke on or that are not metadata files: a batch
//! that fails to parse otherwise (bad length or magic, cut short) ends the dump of that file
//! with Kafka's `Found <n> invalid bytes at the end of <file>` line (Kafka stops the same way
//! at a cut-short tail, and throws on the rest); index, time-index and producer-snapshot files
//! are not dumped (`Ignoring unknown file`).

pub mod json;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::{KRaftVersionRecord, SnapshotFooterRecord, SnapshotHeaderRecord};
use kafka_protocol::protocol::Decodable;
use krust_log::batch::{
    BatchError, Compression, RECORD_BATCH_OVERHEAD, Record, RecordBatch, RecordBatchBuilder,
    TimestampType,
};
use krust_metadata::codec::{ByteReader, DecodeError};
use krust_metadata::records::RecordError;
use krust_metadata::{ApiMessageAndVersion, FrameError};
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName};

use json::JsonObject;

/// Largest batch the dump accepts (Kafka's `FileRecords` has no limit below `Int.MaxValue`).
const MAX_BATCH_BYTES: usize = i32::MAX as usize;
/// Largest file read whole into memory.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What `krust dump-log` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// The files to dump, in order.
    pub files: Vec<PathBuf>,
    /// `--cluster-metadata-decoder` (implies the two below).
    pub cluster_metadata_decoder: bool,
    /// `--print-data-log` (implies deep iteration).
    pub print_data_log: bool,
    /// `--deep-iteration`: print every record, not only batches.
    pub deep_iteration: bool,
    /// `--skip-record-metadata`: leave out each record's `offset: … headerKeys: […]` part.
    pub skip_record_metadata: bool,
}

impl DumpOptions {
    fn print_contents(&self) -> bool {
        self.print_data_log || self.cluster_metadata_decoder
    }

    fn deep(&self) -> bool {
        self.deep_iteration || self.print_contents()
    }
}

/// Dumps every file of `options` to `out`, notices to `err`, as Kafka's `DumpLogSegments`.
///
/// # Errors
/// A file that cannot be read, or a `.checkpoint` whose name is not a snapshot id.
pub fn run_dump_log(
    options: &DumpOptions,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<i32> {
    let mut non_consecutive: Vec<(PathBuf, Vec<(i64, i64)>)> = Vec::new();
    for file in &options.files {
        writeln!(out, "Dumping {}", file.display())?;
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".log") || name.ends_with(".checkpoint") {
            let pairs = dump_file(file, name, options, out)?;
            if !pairs.is_empty() {
                non_consecutive.push((file.clone(), pairs));
            }
        } else {
            writeln!(err, "Ignoring unknown file {}", file.display())?;
        }
    }
    for (file, pairs) in non_consecutive {
        let absolute = std::path::absolute(&file).unwrap_or(file);
        writeln!(err, "Non-consecutive offsets in {}", absolute.display())?;
        for (first, second) in pairs.iter().rev() {
            writeln!(err, "  {first} is followed by {second}")?;
        }
    }
    Ok(0)
}

/// Dumps one `.log` or `.checkpoint` file; returns the non-consecutive offset pairs seen.
fn dump_file(
    file: &Path,
    name: &str,
    options: &DumpOptions,
    out: &mut impl Write,
) -> anyhow::Result<Vec<(i64, i64)>> {
    if let Some(stem) = name.strip_suffix(".log") {
        let start: i64 = stem
            .parse()
            .with_context(|| format!("{name}: a segment name is its base offset"))?;
        writeln!(out, "Log starting offset: {start}")?;
    } else if name == krust_metadata::BOOTSTRAP_FILE_NAME {
        writeln!(out, "KRaft bootstrap snapshot")?;
    } else {
        let parsed = SnapshotFileName::parse(name)
            .ok()
            .flatten()
            .filter(|n| n.kind == SnapshotFileKind::Frozen)
            .with_context(|| format!("{name} is not a snapshot file name"))?;
        writeln!(
            out,
            "Snapshot end offset: {}, epoch: {}",
            parsed.id.end_offset, parsed.id.epoch
        )?;
    }
    let size = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    anyhow::ensure!(
        size <= MAX_FILE_BYTES,
        "{}: {size} bytes is more than this tool reads",
        file.display()
    );
    let bytes =
        Bytes::from(std::fs::read(file).with_context(|| format!("reading {}", file.display()))?);
    let total = bytes.len();
    let mut rest = bytes;
    let mut valid_bytes = 0usize;
    let mut last_offset = -1i64;
    let mut non_consecutive = Vec::new();
    while !rest.is_empty() {
        let (batch, tail, stored_crc) = match RecordBatch::parse(rest.clone(), MAX_BATCH_BYTES) {
            Ok((batch, tail)) => (batch, tail, None),
            // Kafka prints a batch whose CRC does not match with `isvalid: false` and reads on.
            Err(BatchError::CrcMismatch { stored, .. }) => match rebuild_with_valid_crc(&rest) {
                Some((batch, tail)) => (batch, tail, Some(stored)),
                None => break,
            },
            Err(_) => break,
        };
        print_batch(&batch, valid_bytes, stored_crc, out)?;
        if options.deep() {
            match batch.records() {
                Ok(records) => {
                    for record in &records {
                        let offset = batch.base_offset() + i64::from(record.offset_delta);
                        if last_offset != -1 && offset != last_offset + 1 {
                            non_consecutive.push((last_offset, offset));
                        }
                        last_offset = offset;
                        print_record(&batch, record, offset, options, out)?;
                    }
                }
                Err(e) => writeln!(
                    out,
                    "Error at {}, skipping. cannot read the batch's records: {e}",
                    batch.base_offset()
                )?,
            }
        }
        valid_bytes += batch.size_in_bytes();
        rest = tail;
    }
    let trailing = total - valid_bytes;
    if trailing > 0 {
        writeln!(out, "Found {trailing} invalid bytes at the end of {name}")?;
    }
    Ok(non_consecutive)
}

fn timestamp_type_name(batch: &RecordBatch) -> &'static str {
    match batch.timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

fn compression_name(compression: Compression) -> &'static str {
    match compression {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
fn sequence_at(base_sequence: i32, delta: i32) -> i32 {
    if base_sequence == -1 {
        return -1;
    }
    if base_sequence > i32::MAX - delta {
        delta - (i32::MAX - base_sequence) - 1
    } else {
        base_sequence + delta
    }
}

/// The batch at the front of `buf`, whose framing parsed but whose CRC did not match, rebuilt
/// from its own header fields and records area so that it can be printed; and the bytes after
/// it. `None` if the header is unusable (an unknown compression codec).
fn rebuild_with_valid_crc(buf: &Bytes) -> Option<(RecordBatch, Bytes)> {
    let be = |range: std::ops::Range<usize>| buf.get(range);
    let i64_at = |at: usize| {
        be(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_be_bytes)
    };
    let i32_at = |at: usize| {
        be(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_be_bytes)
    };
    let i16_at = |at: usize| {
        be(at..at + 2)
            .and_then(|b| b.try_into().ok())
            .map(i16::from_be_bytes)
    };
    let size = 12 + usize::try_from(i32_at(8)?).ok()?;
    if size < RECORD_BATCH_OVERHEAD || size > buf.len() || size > krust_log::batch::MAX_BATCH_BYTES
    {
        return None;
    }
    let attributes = i16_at(21)?;
    let compression = Compression::from_id(u8::try_from(attributes & 0x07).ok()?)?;
    let timestamp_type = if attributes & 0x08 != 0 {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    };
    let batch = RecordBatchBuilder::new(i64_at(0)?)
        .partition_leader_epoch(i32_at(12)?)
        .timestamp_type(timestamp_type)
        .base_timestamp(i64_at(27)?)
        .max_timestamp(i64_at(35)?)
        .producer(i64_at(43)?, i16_at(51)?, i32_at(53)?)
        .transactional(attributes & 0x10 != 0)
        .control(attributes & 0x20 != 0)
        .delete_horizon(attributes & 0x40 != 0)
        .compression(compression)
        .last_offset_delta(i32_at(23)?)
        .opaque_payload(buf.slice(RECORD_BATCH_OVERHEAD..size), i32_at(57)?)
        .build();
    Some((batch, buf.slice(size..)))
}

fn print_batch(
    batch: &RecordBatch,
    position: usize,
    stored_crc: Option<u32>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let delete_horizon = if batch.has_delete_horizon() {
        format!("OptionalLong[{}]", batch.base_timestamp())
    } else {
        "OptionalLong.empty".to_owned()
    };
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         deleteHorizonMs: {delete_horizon} position: {position} {}: {} size: {} magic: {} \
         compresscodec: {} crc: {} isvalid: {}",
        batch.base_offset(),
        batch.last_offset(),
        batch.record_count(),
        batch.base_sequence(),
        sequence_at(batch.base_sequence(), batch.last_offset_delta()),
        batch.producer_id(),
        batch.producer_epoch(),
        batch.partition_leader_epoch(),
        batch.is_transactional(),
        batch.is_control(),
        timestamp_type_name(batch),
        batch.max_timestamp(),
        batch.size_in_bytes(),
        batch.magic(),
        compression_name(batch.compression()),
        stored_crc.unwrap_or(batch.crc()),
        stored_crc.is_none(),
    )
}

fn len_or_minus_one(bytes: Option<&Bytes>) -> i64 {
    bytes.map_or(-1, |b| i64::try_from(b.len()).unwrap_or(i64::MAX))
}

fn print_record(
    batch: &RecordBatch,
    record: &Record,
    offset: i64,
    options: &DumpOptions,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut line = String::new();
    let mut prefix = "| ";
    if !options.skip_record_metadata {
        let timestamp = match batch.timestamp_type() {
            TimestampType::CreateTime => batch.base_timestamp() + record.timestamp_delta,
            TimestampType::LogAppendTime => batch.max_timestamp(),
        };
        let header_keys: Vec<&str> = record.headers.iter().map(|h| h.key.as_str()).collect();
        line.push_str(&format!(
            "{prefix}offset: {offset} {}: {timestamp} keySize: {} valueSize: {} sequence: {} \
             headerKeys: [{}]",
            timestamp_type_name(batch),
            len_or_minus_one(record.key.as_ref()),
            len_or_minus_one(record.value.as_ref()),
            sequence_at(batch.base_sequence(), record.offset_delta),
            header_keys.join(","),
        ));
        prefix = " ";
        if batch.is_control() {
            line.push(' ');
            line.push_str(&control_record(record));
        }
    }
    if options.print_contents() && !batch.is_control() {
        if options.cluster_metadata_decoder {
            if let Some(value) = &record.value {
                line.push_str(" payload: ");
                line.push_str(&metadata_payload(value, offset));
            }
        } else {
            if let Some(key) = &record.key {
                line.push_str(&format!("{prefix}key: {}", String::from_utf8_lossy(key)));
            }
            if let Some(value) = &record.value {
                line.push_str(&format!(" payload: {}", String::from_utf8_lossy(value)));
            }
        }
    }
    writeln!(out, "{line}")
}

/// A data record's value as Kafka's `ClusterMetadataLogMessageParser` prints it.
fn metadata_payload(value: &Bytes, offset: i64) -> String {
    match ApiMessageAndVersion::decode(value) {
        Ok(framed) => {
            let mut o = JsonObject::new();
            o.str("type", framed.record.record_type().name())
                .num("version", framed.version)
                .raw(
                    "data",
                    &json::metadata_record(&framed.record, framed.version),
                );
            o.finish()
        }
        // Kafka's `MetadataRecordSerde` wording for a body that does not parse; krust's own
        // message for the other cases (frame header, unknown type or version, trailing bytes).
        Err(FrameError::Record(RecordError::MalformedBody { record_type, .. })) => format!(
            "Error at {offset}, skipping. Failed to deserialize record with type {}",
            record_type.api_key()
        ),
        Err(e) => format!("Error at {offset}, skipping. {e}"),
    }
}

/// Kafka's `ControlRecordType` names by id.
fn control_type_name(id: i16) -> &'static str {
    match id {
        0 => "ABORT",
        1 => "COMMIT",
        2 => "LEADER_CHANGE",
        3 => "SNAPSHOT_HEADER",
        4 => "SNAPSHOT_FOOTER",
        5 => "KRAFT_VERSION",
        6 => "KRAFT_VOTERS",
        _ => "UNKNOWN",
    }
}

/// The part of a control record's line after `headerKeys: []`.
fn control_record(record: &Record) -> String {
    let Some(key) = record.key.as_ref().filter(|k| k.len() >= 4) else {
        return "controlType: invalid control record key".to_owned();
    };
    let type_id = i16::from_be_bytes([key[2], key[3]]);
    let mut value = record.value.clone().unwrap_or_default();
    let decoded = match type_id {
        0 | 1 => {
            if value.len() >= 6 {
                let _version = value.get_i16();
                let coordinator_epoch = value.get_i32();
                Ok(format!(
                    "endTxnMarker: {} coordinatorEpoch: {coordinator_epoch}",
                    control_type_name(type_id)
                ))
            } else {
                Err("end transaction marker value is cut short".to_owned())
            }
        }
        3 => SnapshotHeaderRecord::decode(&mut value, 0)
            .map(|h| {
                let mut o = JsonObject::new();
                o.num("version", h.version)
                    .num("lastContainedLogTimestamp", h.last_contained_log_timestamp);
                format!("SnapshotHeader {}", o.finish())
            })
            .map_err(|e| e.to_string()),
        4 => SnapshotFooterRecord::decode(&mut value, 0)
            .map(|f| {
                let mut o = JsonObject::new();
                o.num("version", f.version);
                format!("SnapshotFooter {}", o.finish())
            })
            .map_err(|e| e.to_string()),
        5 => KRaftVersionRecord::decode(&mut value, 0)
            .map(|k| {
                let mut o = JsonObject::new();
                o.num("version", k.version)
                    .num("kRaftVersion", k.k_raft_version);
                format!("KRaftVersion {}", o.finish())
            })
            .map_err(|e| e.to_string()),
        6 => voters_json(&value)
            .map(|json| format!("KRaftVoters {json}"))
            .map_err(|e| e.to_string()),
        _ => Ok(format!(
            "controlType: {}({type_id})",
            control_type_name(type_id)
        )),
    };
    decoded
        .unwrap_or_else(|e| format!("controlType: {}({type_id}) {e}", control_type_name(type_id)))
}

/// A `VotersRecord` (version 0) as Kafka's `VotersRecordJsonConverter` writes it. Decoded here
/// with krust's checked reader rather than `kafka-protocol`, whose array decoding reserves the
/// claimed element count up front (a corrupt count would ask for gigabytes).
fn voters_json(value: &[u8]) -> Result<String, DecodeError> {
    let mut r = ByteReader::new(value);
    let version = r.i16("VotersRecord.Version")?;
    // A voter takes at least 24 bytes (id, directory id, two counts, feature, tags).
    let count = r
        .compact_array_len("VotersRecord.Voters", 24)?
        .unwrap_or_default();
    let mut voters = Vec::with_capacity(count);
    for _ in 0..count {
        let voter_id = r.i32("Voter.VoterId")?;
        let directory_id = r.uuid("Voter.VoterDirectoryId")?;
        let endpoint_count = r
            .compact_array_len("Voter.Endpoints", 5)?
            .unwrap_or_default();
        let mut endpoints = Vec::with_capacity(endpoint_count);
        for _ in 0..endpoint_count {
            let name = r.compact_string("Endpoint.Name")?;
            let host = r.compact_string("Endpoint.Host")?;
            let port = r.u16("Endpoint.Port")?;
            r.tagged_fields()?;
            let mut o = JsonObject::new();
            o.str("name", &name).str("host", &host).num("port", port);
            endpoints.push(o.finish());
        }
        let min = r.i16("KRaftVersionFeature.MinSupportedVersion")?;
        let max = r.i16("KRaftVersionFeature.MaxSupportedVersion")?;
        r.tagged_fields()?;
        r.tagged_fields()?;
        let mut feature = JsonObject::new();
        feature
            .num("minSupportedVersion", min)
            .num("maxSupportedVersion", max);
        let mut o = JsonObject::new();
        o.num("voterId", voter_id)
            .uuid("voterDirectoryId", &directory_id)
            .raw("endpoints", &format!("[{}]", endpoints.join(",")))
            .raw("kRaftVersionFeature", &feature.finish());
        voters.push(o.finish());
    }
    let mut o = JsonObject::new();
    o.num("version", version)
        .raw("voters", &format!("[{}]", voters.join(",")));
    Ok(o.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_voters_record_claiming_billions_of_voters_is_an_error_not_an_allocation() {
        // Version 0, then a compact array count of 2^32 - 2 voters.
        let value = [0u8, 0, 0xfe, 0xff, 0xff, 0xff, 0x0f];
        assert!(voters_json(&value).is_err());
        let record = Record {
            offset_delta: 0,
            timestamp_delta: 0,
            key: Some(Bytes::from_static(&[0, 0, 0, 6])),
            value: Some(Bytes::copy_from_slice(&value)),
            headers: Vec::new(),
        };
        assert!(control_record(&record).starts_with("controlType: KRAFT_VOTERS(6) "));
    }

    #[test]
    fn a_batch_with_a_bad_crc_prints_isvalid_false_and_the_dump_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("00000000000000000000.log");
        let mut first = RecordBatchBuilder::new(0).partition_leader_epoch(3);
        first.append_kv(5, None, Some(Bytes::from_static(b"not a frame")));
        let good = first.build();
        let mut bad = good.as_bytes().to_vec();
        let last = bad.len() - 3;
        bad[last] ^= 0x01; // inside the record's value: only the CRC notices
        let mut second = RecordBatchBuilder::new(1);
        second.append_kv(6, None, Some(Bytes::from_static(b"x")));
        bad.extend_from_slice(second.build().as_bytes());
        std::fs::write(&file, &bad).expect("write");
        let options = DumpOptions {
            files: vec![file],
            cluster_metadata_decoder: true,
            ..DumpOptions::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run_dump_log(&options, &mut out, &mut err).expect("dump");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2].ends_with(&format!("crc: {} isvalid: false", good.crc())),
            "{text}"
        );
        assert!(lines[2].contains("partitionLeaderEpoch: 3"), "{text}");
        assert!(lines[3].starts_with("| offset: 0 CreateTime: 5"), "{text}");
        assert!(
            lines[4].starts_with("baseOffset: 1 ") && lines[4].ends_with("isvalid: true"),
            "{text}"
        );
        assert_eq!(lines.len(), 6, "{text}");
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(sequence_at(-1, 5), -1);
        assert_eq!(sequence_at(10, 5), 15);
        assert_eq!(sequence_at(i32::MAX, 1), 0);
        assert_eq!(sequence_at(i32::MAX - 1, 3), 1);
    }

    /// xorshift64*: a seeded byte source, so a failing seed can be replayed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn bytes(&mut self, max_len: u64) -> Vec<u8> {
            let len = self.next() % (max_len + 1);
            (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
        }
    }

    /// Arbitrary record keys and values inside valid (CRC-correct) data and control batches
    /// reach the metadata frame decoder, the JSON writer and the control-record decoders (all
    /// five KRaft types, plus end-transaction markers): every line is printed, nothing panics.
    #[test]
    fn arbitrary_record_bytes_in_valid_batches_never_panic() {
        use krust_log::batch::RecordBatchBuilder;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("00000000000000000000.log");
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut bytes = Vec::new();
            for batch_index in 0..4i64 {
                let control = rng.next().is_multiple_of(2);
                let mut builder = RecordBatchBuilder::new(batch_index * 8).control(control);
                for _ in 0..(1 + rng.next() % 4) {
                    let key = if control {
                        // A valid control key header with a random type, or random bytes.
                        let mut key = vec![0, 0, 0, u8::try_from(rng.next() % 8).unwrap_or(0)];
                        if rng.next().is_multiple_of(4) {
                            key = rng.bytes(6);
                        }
                        Some(Bytes::from(key))
                    } else {
                        None
                    };
                    let mut value = rng.bytes(48);
                    if !control && rng.next().is_multiple_of(2) && value.len() >= 3 {
                        // A valid frame header (version 1, a known api key) over random bytes.
                        value[0] = 1;
                        value[1] = u8::try_from(rng.next() % 28).unwrap_or(0);
                        value[2] = u8::try_from(rng.next() % 4).unwrap_or(0);
                    }
                    builder.append_kv(0, key, Some(Bytes::from(value)));
                }
                bytes.extend_from_slice(builder.build().as_bytes());
            }
            std::fs::write(&file, &bytes).expect("write");
            let options = DumpOptions {
                files: vec![file.clone()],
                cluster_metadata_decoder: true,
                ..DumpOptions::default()
            };
            let (mut out, mut err) = (Vec::new(), Vec::new());
            run_dump_log(&options, &mut out, &mut err)
                .unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains("invalid bytes"), "seed {seed}: {text}");
        }
    }

    #[test]
    fn garbage_files_end_with_the_invalid_bytes_line_not_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("00000000000000000000.log");
        std::fs::write(&file, b"not a batch at all, just bytes").expect("write");
        let options = DumpOptions {
            files: vec![file.clone()],
            cluster_metadata_decoder: true,
            ..DumpOptions::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run_dump_log(&options, &mut out, &mut err).expect("dump");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            format!(
                "Dumping {}\nLog starting offset: 0\nFound 30 invalid bytes at the end of 00000000000000000000.log\n",
                file.display()
            )
        );
    }
}
