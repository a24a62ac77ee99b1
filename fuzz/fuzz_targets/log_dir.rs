//! A partition directory as a broker finds it at startup: segment files recovered by
//! `Log::open_with` (with and without their index files, from offset 0 or trusting a recovery
//! point) and read back, `leader-epoch-checkpoint`, an offset checkpoint
//! (`recovery-point-offset-checkpoint` and its siblings) and `partition.metadata`.
//!
//! Input: a mode byte, then the file's bytes. Mode 1 splits them as
//! `log_len:u16, index_len:u16, .log, .index, .timeindex`. Files go to a directory under
//! `$TMPDIR` (`scripts/fuzz.sh` points it at a scratch directory it removes).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use krust_log::checkpoint::{
    LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    read_offset_checkpoint,
};
use krust_log::{LeaderEpochCache, Log, LogConfig, LogOpenOptions, PartitionMetadata};
use libfuzzer_sys::fuzz_target;

const SEGMENT: &str = "00000000000000000000";

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::temp_dir().join(format!("krust-fuzz-log-dir-{}", std::process::id()))
    })
}

/// A fresh, empty `topic-0` partition directory.
fn partition_dir() -> PathBuf {
    let dir = scratch().join("topic-0");
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("creating {}: {e}", dir.display());
    }
    dir
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, bytes) {
        panic!("writing {}: {e}", path.display());
    }
}

fn open_and_read(dir: &Path, recovery_point: i64) {
    let config = LogConfig {
        // The smallest index Kafka allows keeps each run's files small.
        segment_index_bytes: 48,
        ..LogConfig::default()
    };
    let options = LogOpenOptions {
        recovery_point,
        log_start_offset: 0,
        now_ms: 0,
    };
    let Ok((log, _report)) = Log::open_with(dir, config, options) else {
        return;
    };
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    // Read back what recovery kept, as a fetch would (bounded: every read advances).
    for _ in 0..64 {
        if offset >= end {
            break;
        }
        let Ok(result) = log.read(offset, 1 << 16) else {
            break;
        };
        let Some(next) = result
            .batches
            .last()
            .map(|b| b.next_offset())
            .filter(|&n| n > offset)
        else {
            break;
        };
        offset = next;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = partition_dir();
    match mode % 5 {
        0 => {
            write(&dir, &format!("{SEGMENT}.log"), rest);
            open_and_read(&dir, 0);
        }
        1 => {
            let Some((&[l0, l1, i0, i1], files)) = rest.split_first_chunk::<4>() else {
                return;
            };
            let log_len = usize::from(u16::from_be_bytes([l0, l1])).min(files.len());
            let (log, indexes) = files.split_at(log_len);
            let index_len = usize::from(u16::from_be_bytes([i0, i1])).min(indexes.len());
            let (index, time_index) = indexes.split_at(index_len);
            write(&dir, &format!("{SEGMENT}.log"), log);
            write(&dir, &format!("{SEGMENT}.index"), index);
            write(&dir, &format!("{SEGMENT}.timeindex"), time_index);
            // A recovery point past the end: the files are trusted as a clean shutdown left
            // them, so the index files are read rather than rebuilt.
            open_and_read(&dir, i64::MAX);
        }
        2 => {
            write(&dir, LEADER_EPOCH_CHECKPOINT_FILE, rest);
            let _ = LeaderEpochCache::load(&dir);
        }
        3 => {
            write(&dir, RECOVERY_POINT_CHECKPOINT_FILE, rest);
            let _ = read_offset_checkpoint(&dir.join(RECOVERY_POINT_CHECKPOINT_FILE));
        }
        _ => {
            write(&dir, PARTITION_METADATA_FILE, rest);
            let _ = PartitionMetadata::read(&dir);
        }
    }
});
