//! Legacy message sets (magic 0 and 1) written by a real Kafka 3.9 ZooKeeper-mode broker
//! (`tests/fixtures/kafka-3.9-legacy/`, see its README): krust-log decodes every entry with
//! Kafka's offsets, sizes and CRCs (from `DumpLogSegments`), including gzip wrappers with
//! absolute (magic 0) and relative (magic 1) inner offsets; opens the partitions with a full
//! recovery without cutting a byte; indexes them; cuts a torn or corrupt tail back to the
//! last whole entry; serves them as stored (never mixed with v2 batches in one read); and
//! answers timestamp lookups from their timestamps.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use krust_log::legacy::{LegacyEntry, LegacyRecord, MAGIC_V0, MAGIC_V1};
use krust_log::{Compression, Log, LogConfig, LogOpenOptions, TimestampType};

const RECORDS: i64 = 60;

fn fixture(magic: i8) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kafka-3.9-legacy")
        .join(format!("magic{magic}"))
}

/// A copy of the fixture as partition directory `legacy-0` (tests modify it).
fn partition_copy(magic: i8) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("legacy-0");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for entry in std::fs::read_dir(fixture(magic)).expect("fixture") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
    }
    (root, dir)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

fn gunzip(bytes: &[u8]) -> Bytes {
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut plain)
        .expect("gunzip");
    Bytes::from(plain)
}

/// What the producers wrote: `none-i` at offset i, then `gzip-i` at offset 30 + i.
fn expected_value(offset: i64) -> String {
    if offset < 30 {
        format!("none-{offset}")
    } else {
        format!("gzip-{}", offset - 30)
    }
}

/// `(segment base, position, size, entry offset, crc, codec)` of every entry, and the records.
type Shallow = (i64, usize, usize, i64, u32, Compression);

fn decode(dir: &Path) -> (Vec<Shallow>, Vec<LegacyRecord>) {
    let mut shallow = Vec::new();
    let mut records = Vec::new();
    for path in segments(dir) {
        let base: i64 = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .expect("segment name");
        let mut rest = Bytes::from(std::fs::read(&path).expect("segment"));
        let mut position = 0;
        while !rest.is_empty() {
            let (entry, tail) = LegacyEntry::parse(rest, usize::MAX).expect("valid entry");
            shallow.push((
                base,
                position,
                entry.size_in_bytes(),
                entry.offset(),
                entry.crc(),
                entry.compression(),
            ));
            position += entry.size_in_bytes();
            match entry.compression() {
                Compression::None => records.push(entry.record().expect("plain message")),
                Compression::Gzip => {
                    let (_, value) = entry.key_value().expect("wrapper value");
                    let inner = gunzip(&value.expect("a wrapper has a value"));
                    records.extend(entry.inner_records(inner).expect("inner messages"));
                }
                other => panic!("unexpected codec {other:?}"),
            }
            rest = tail;
        }
    }
    (shallow, records)
}

fn check_records(records: &[LegacyRecord], magic: i8) {
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..RECORDS).collect::<Vec<_>>());
    for r in records {
        assert_eq!(r.key, None);
        assert_eq!(
            r.value.as_deref(),
            Some(expected_value(r.offset).as_bytes()),
            "offset {}",
            r.offset
        );
        if magic == MAGIC_V0 {
            assert_eq!((r.timestamp, r.timestamp_type), (-1, None));
        } else {
            assert_eq!(r.timestamp_type, Some(TimestampType::CreateTime));
            assert!(r.timestamp > 1_700_000_000_000, "{}", r.timestamp);
        }
    }
}

#[test]
fn magic0_entries_match_kafkas_dump() {
    let (shallow, records) = decode(&fixture(MAGIC_V0));
    assert_eq!(shallow.len(), 33, "30 messages and 3 gzip wrappers");
    // DumpLogSegments: `offset: 0 position: 0 … size: 32 magic: 0 compresscodec: none crc:
    // 463836505`, `offset: 10 position: 320 … size: 33 … crc: 868655675`, and the wrappers
    // `offset: 43 position: 0 size: 230 crc: 377557233`, `56 @230 size 222 crc 1653474443`,
    // `59 @452 size 97 crc 446641523` (inner offsets 30..43, 44..56, 57..59, absolute).
    assert_eq!(shallow[0], (0, 0, 32, 0, 463_836_505, Compression::None));
    assert_eq!(
        shallow[10],
        (0, 320, 33, 10, 868_655_675, Compression::None)
    );
    assert_eq!(
        &shallow[30..],
        &[
            (30, 0, 230, 43, 377_557_233, Compression::Gzip),
            (30, 230, 222, 56, 1_653_474_443, Compression::Gzip),
            (30, 452, 97, 59, 446_641_523, Compression::Gzip),
        ]
    );
    check_records(&records, MAGIC_V0);
}

#[test]
fn magic1_entries_match_kafkas_dump() {
    let (shallow, records) = decode(&fixture(MAGIC_V1));
    assert_eq!(shallow.len(), 33);
    // DumpLogSegments: `offset: 0 position: 0 CreateTime: 1796152288497 size: 40 magic: 1
    // compresscodec: none crc: 3531219318`; the wrappers `43 @656 size 256 crc 1437508943`
    // (in segment 14), `56 @0 size 240 crc 260414331`, `59 @240 size 112 crc 2872466920`
    // (segment 44; inner relative offsets 0..n-1 made absolute from the wrapper's).
    assert_eq!(shallow[0], (0, 0, 40, 0, 3_531_219_318, Compression::None));
    assert_eq!(records[0].timestamp, 1_796_152_288_497);
    assert_eq!(
        &shallow[30..],
        &[
            (14, 656, 256, 43, 1_437_508_943, Compression::Gzip),
            (44, 0, 240, 56, 260_414_331, Compression::Gzip),
            (44, 240, 112, 59, 2_872_466_920, Compression::Gzip),
        ]
    );
    check_records(&records, MAGIC_V1);
}

/// Opens `dir` with a full recovery (recovery point 0): every entry is re-checked.
fn open_recovering(dir: &Path) -> (Log, krust_log::RecoveryReport) {
    Log::open_with(dir, LogConfig::default(), LogOpenOptions::new(0))
        .expect("krust-log opens a legacy partition")
}

#[test]
fn legacy_partitions_recover_without_losing_a_byte() {
    for magic in [MAGIC_V0, MAGIC_V1] {
        for recovery_point in [0, RECORDS] {
            let (_root, dir) = partition_copy(magic);
            let sizes: Vec<u64> = segments(&dir)
                .iter()
                .map(|p| std::fs::metadata(p).expect("size").len())
                .collect();
            let (log, report) = Log::open_with(
                &dir,
                LogConfig::default(),
                LogOpenOptions::new(recovery_point),
            )
            .expect("open");
            assert_eq!(
                report.truncated_bytes(),
                0,
                "magic {magic}, recovery point {recovery_point}: {report:?}"
            );
            assert!(report.deleted_segments.is_empty());
            assert_eq!(log.log_end_offset(), RECORDS, "magic {magic}");
            assert_eq!(log.segment_count(), sizes.len());
            let after: Vec<u64> = segments(&dir)
                .iter()
                .map(|p| std::fs::metadata(p).expect("size").len())
                .collect();
            assert_eq!(after, sizes, "segment files untouched");
            log.close().expect("close");
        }
    }
}

#[test]
fn a_torn_legacy_tail_is_cut_back_to_the_last_whole_entry() {
    // magic 1: the last wrapper (offset 59, 112 bytes at 240 of segment 44) loses 5 bytes.
    let (_root, dir) = partition_copy(MAGIC_V1);
    let last = dir.join("00000000000000000044.log");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open");
    file.set_len(352 - 5).expect("tear");
    drop(file);
    let (log, report) = open_recovering(&dir);
    assert_eq!(report.truncated_bytes(), 112 - 5);
    assert_eq!(
        log.log_end_offset(),
        57,
        "the wrapper ending at 56 is whole"
    );
    assert_eq!(std::fs::metadata(&last).expect("size").len(), 240);
    drop(log);

    // magic 0: one flipped byte inside the entry at offset 10 (position 320) of segment 0;
    // everything from there on is cut, and the later segment is deleted.
    let (_root, dir) = partition_copy(MAGIC_V0);
    let first = dir.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&first).expect("read");
    bytes[320 + 30] ^= 0x20;
    std::fs::write(&first, &bytes).expect("write");
    let (log, report) = open_recovering(&dir);
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(std::fs::metadata(&first).expect("size").len(), 320);
    assert_eq!(report.deleted_segments, vec![30]);
}

/// Offsets of the legacy entries in `bytes` (each parsed and CRC-checked again).
fn entry_offsets(bytes: &Bytes) -> Vec<i64> {
    let mut rest = bytes.clone();
    let mut offsets = Vec::new();
    while !rest.is_empty() {
        let (entry, tail) = LegacyEntry::parse(rest, usize::MAX).expect("whole entries");
        offsets.push(entry.offset());
        rest = tail;
    }
    offsets
}

#[test]
fn reads_serve_legacy_entries_as_stored() {
    let (_root, dir) = partition_copy(MAGIC_V1);
    let (mut log, _) = open_recovering(&dir);
    // From offset 0: segment 0's 14 messages, byte for byte.
    let read = log.read(0, 1 << 20).expect("read");
    assert!(read.batches.is_empty(), "no v2 batch");
    let segment0 = std::fs::read(dir.join("00000000000000000000.log")).expect("segment");
    assert_eq!(&read.bytes[..], &segment0[..]);
    assert_eq!(entry_offsets(&read.bytes), (0..14).collect::<Vec<_>>());
    // From the middle of segment 14, up to the high watermark 25.
    let read = log.read_up_to(20, 1 << 20, 25).expect("read");
    assert_eq!(entry_offsets(&read.bytes), (20..25).collect::<Vec<_>>());
    // Offset 50 is inside the wrapper ending at 56: the whole wrapper comes back (Kafka too).
    let read = log.read(50, 1).expect("read");
    assert_eq!(
        entry_offsets(&read.bytes),
        [56],
        "at least one entry, however large"
    );
    // A wrapper at the high watermark is not served yet.
    let read = log.read_up_to(57, 1 << 20, 59).expect("read");
    assert!(read.bytes.is_empty());

    // krust appends v2 batches after Kafka's legacy entries; a read never mixes the two.
    let mut batch = krust_log::RecordBatchBuilder::new(0);
    batch.append_kv(1_800_000_000_000, None, Some(Bytes::from("v2-60")));
    let info = log
        .append_as_leader(vec![batch.build()], 3, 1_800_000_000_000)
        .expect("append after legacy entries");
    assert_eq!(info.first_offset, RECORDS);
    let read = log.read(57, 1 << 20).expect("read");
    assert_eq!(entry_offsets(&read.bytes), [59]);
    let read = log.read(60, 1 << 20).expect("read");
    assert_eq!(read.batches.len(), 1);
    assert_eq!(read.batches[0].base_offset(), 60);
    let recovery_point = log.close().expect("close");
    // Recovery walks both formats in one segment.
    let (log, report) = open_recovering(&dir);
    assert_eq!(report.truncated_bytes(), 0);
    assert_eq!(log.log_end_offset(), RECORDS + 1);
    assert!(recovery_point > 0);
}

#[test]
fn timestamp_lookups_answer_from_legacy_timestamps() {
    let (_root, dir) = partition_copy(MAGIC_V1);
    let (log, _) = open_recovering(&dir);
    let (shallow, records) = decode(&fixture(MAGIC_V1));
    // Kafka's exact answer: the first record with a timestamp at or after the target.
    let exact = |target: i64| {
        records
            .iter()
            .find(|r| r.timestamp >= target)
            .map(|r| r.offset)
    };
    // Plain messages: exact.
    for record in records.iter().take(30).step_by(7) {
        let found = log
            .offset_for_timestamp(record.timestamp)
            .expect("lookup")
            .expect("found");
        assert_eq!(Some(found.offset), exact(record.timestamp), "{record:?}");
        assert!(found.timestamp >= record.timestamp);
        assert_eq!(found.leader_epoch, None);
    }
    // Inside the first gzip wrapper (offsets 30..=43, timestamp = its max): the first offset
    // the wrapper can hold, at or before Kafka's exact inner answer.
    let target = records[35].timestamp;
    let found = log
        .offset_for_timestamp(target)
        .expect("lookup")
        .expect("found");
    assert_eq!(found.offset, 30);
    assert!(exact(target).is_some_and(|e| e >= found.offset));
    // Nothing at or after a future timestamp.
    assert_eq!(log.offset_for_timestamp(i64::MAX).expect("lookup"), None);
    // MAX_TIMESTAMP: the entry carrying the largest timestamp (a wrapper: its offset).
    let max = records.iter().map(|r| r.timestamp).max().expect("records");
    let found = log
        .fetch_offset_by_timestamp(krust_log::log::MAX_TIMESTAMP)
        .expect("lookup")
        .expect("found");
    assert_eq!(found.timestamp, max);
    assert!(
        shallow.iter().any(|s| s.3 == found.offset),
        "an entry's offset"
    );

    // Magic 0 has no timestamps: no answer, as in Kafka.
    let (_root, dir) = partition_copy(MAGIC_V0);
    let (log, _) = open_recovering(&dir);
    assert_eq!(log.offset_for_timestamp(0).expect("lookup"), None);
}

#[test]
fn legacy_entries_are_indexed_like_kafkas_recovery_indexes_them() {
    // Kafka's recovery: an offset index entry (the entry's offset → its position) and a time
    // index entry (max timestamp so far) each time more than index.interval.bytes were read.
    let (_root, dir) = partition_copy(MAGIC_V1);
    let config = LogConfig {
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let (log, _) = Log::open_with(&dir, config.clone(), LogOpenOptions::new(0)).expect("open");
    let segment = log.segments().next().expect("segment 0");
    // Segment 0: 14 messages of 40/41 bytes: entries after > 100 bytes, at 120, 240, …
    let offsets = segment.offset_index().entries();
    assert!(!offsets.is_empty(), "an offset index was rebuilt");
    let segment0 = Bytes::from(std::fs::read(dir.join("00000000000000000000.log")).expect("log"));
    for e in &offsets {
        let (entry, _) = LegacyEntry::parse(segment0.slice(e.position as usize..), usize::MAX)
            .expect("an index entry points at an entry");
        assert_eq!(entry.offset(), e.offset);
    }
    let times = segment.time_index().entries();
    assert!(!times.is_empty(), "magic 1 timestamps are indexed");
    assert!(times.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
    let recovery_point = log.close().expect("close");
    assert_eq!(recovery_point, RECORDS);
    // Reopened from a recovery point inside segment 14: recovery starts at an index entry,
    // which it checks (CRC-32 of the legacy entry there) and trusts.
    let (log, report) = Log::open_with(&dir, config, LogOpenOptions::new(20)).expect("reopen");
    assert_eq!(report.truncated_bytes(), 0);
    assert_eq!(log.log_end_offset(), RECORDS);
}
