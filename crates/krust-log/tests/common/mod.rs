//! Helpers shared by the krust-log integration tests.
#![allow(dead_code)]

use bytes::Bytes;
use krust_log::{Compression, Header, RecordBatch, RecordBatchBuilder};

/// A batch of `count` records with values `value_size` bytes long, timestamps `ts`, `ts+1`, …
pub fn batch(count: usize, ts: i64, value_size: usize) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..count {
        let value = vec![(i % 251) as u8; value_size];
        b.append_kv(
            ts + i as i64,
            Some(Bytes::from(format!("key-{i}"))),
            Some(Bytes::from(value)),
        );
    }
    b.build()
}

/// A batch at `base_offset` with `count` records (follower path input).
pub fn batch_at(base_offset: i64, epoch: i32, count: usize, ts: i64) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(base_offset).partition_leader_epoch(epoch);
    for i in 0..count {
        b.append_kv(ts + i as i64, None, Some(Bytes::from(format!("v{i}"))));
    }
    b.build()
}

/// Batches of every shape the tests care about.
pub fn assorted_batches() -> Vec<RecordBatch> {
    let mut out = Vec::new();
    // One record, null key and value.
    let mut b = RecordBatchBuilder::new(0);
    b.append_kv(1_000, None, None);
    out.push(b.build());
    // Many records with keys, values and headers (null and non-null values).
    let mut b = RecordBatchBuilder::new(0).producer(7, 1, 0);
    for i in 0..50 {
        b.append_with_headers(
            1_010 + i,
            Some(Bytes::from(format!("k{i}"))),
            if i % 3 == 0 {
                None
            } else {
                Some(Bytes::from(vec![i as u8; i as usize]))
            },
            vec![
                Header {
                    key: "h1".into(),
                    value: Some(Bytes::from_static(b"x")),
                },
                Header {
                    key: "h2".into(),
                    value: None,
                },
            ],
        );
    }
    out.push(b.build());
    // A compressed batch of three records with each codec.
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut b = RecordBatchBuilder::new(0).compression(codec);
        for i in 0..3 {
            b.append_kv(
                1_100 + i,
                Some(Bytes::from(format!("key-{i}"))),
                Some(Bytes::from(vec![codec.id(); 100])),
            );
        }
        out.push(b.build_compressed(None).expect("compress"));
    }
    // A control batch (KRaft control records / transaction markers).
    let mut b = RecordBatchBuilder::new(0)
        .control(true)
        .transactional(true)
        .producer(9, 0, -1);
    b.append_kv(
        1_200,
        Some(Bytes::from_static(&[0, 0, 0, 0])),
        Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
    );
    out.push(b.build());
    out
}

/// Size of a file, 0 if it does not exist.
pub fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Sizes of every file in `dir`, sorted by name.
pub fn dir_sizes(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().expect("metadata").len(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A temp dir on tmpfs when there is one: seeded loops fsync a lot, and fsync on tmpfs is free.
pub fn temp_root() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("krust-log-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("tempdir")
}
