//! Opening directories full of garbage never panics or hangs: segments, indexes and
//! checkpoints with random contents either open (and then read back only CRC-valid batches)
//! or fail with a typed error. Seeded; `KRUST_LOG_SEED=n` reruns one case.

mod common;

use bytes::Bytes;
use krust_log::{Log, LogConfig, LogOpenOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Returns how many batches could be read back (0 if the open failed).
fn run_case(seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let root = common::temp_root();
    let dir = root.path().join("g-0");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // Some real batches to splice garbage into, so parsing gets past the first checks.
    let mut real = Vec::new();
    for i in 0..rng.gen_range(0..6) {
        real.extend_from_slice(common::batch_at(i * 2, 0, 2, i).as_bytes());
    }
    for _ in 0..rng.gen_range(1..5) {
        let base: i64 = *[0, 2, 4, 100, i64::MAX / 2, 99_999_999_999_999_999]
            .get(rng.gen_range(0..6))
            .unwrap_or(&0);
        let mut log_bytes = real.clone();
        for _ in 0..rng.gen_range(0..8) {
            if log_bytes.is_empty() {
                break;
            }
            let at = rng.gen_range(0..log_bytes.len());
            log_bytes[at] = rng.r#gen();
        }
        if rng.gen_bool(0.3) {
            log_bytes.extend((0..rng.gen_range(0..200)).map(|_| rng.r#gen::<u8>()));
        }
        std::fs::write(dir.join(format!("{base:020}.log")), &log_bytes).expect("write");
        for suffix in [".index", ".timeindex"] {
            if rng.gen_bool(0.7) {
                let len = rng.gen_range(0..100);
                let bytes: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
                std::fs::write(dir.join(format!("{base:020}{suffix}")), bytes).expect("write");
            }
        }
    }
    if rng.gen_bool(0.5) {
        let text =
            ["0\n1\n3 4\n", "0\n2\n1 0\n", "garbage", "0\n1\n-5 -7\n", ""][rng.gen_range(0..5)];
        std::fs::write(dir.join("leader-epoch-checkpoint"), text).expect("write");
    }
    let options = LogOpenOptions {
        recovery_point: [0, 3, i64::MAX][rng.gen_range(0..3)],
        log_start_offset: [0, 1, 1_000][rng.gen_range(0..3)],
        now_ms: 0,
    };
    let config = LogConfig {
        segment_index_bytes: 64,
        ..LogConfig::default()
    };
    let Ok((mut log, _)) = Log::open_with(&dir, config, options) else {
        return 0; // a typed error is fine
    };
    let mut read_batches = 0;
    // Everything readable is CRC-valid; reads end or fail with a typed error.
    let mut offset = log.log_start_offset();
    let mut steps = 0;
    while offset < log.log_end_offset() && steps < 1_000 {
        steps += 1;
        match log.read(offset, 4096) {
            Ok(read) => {
                let Some(last) = read.batches.last() else {
                    break;
                };
                assert!(read.batches.iter().all(|b| b.is_crc_valid()), "seed {seed}");
                assert!(last.next_offset() > offset, "seed {seed}: no progress");
                read_batches += read.batches.len();
                offset = last.next_offset();
            }
            Err(_) => break,
        }
    }
    let _ = log.offset_for_timestamp(3);
    let _ = log.append_records_as_leader(
        Bytes::copy_from_slice(common::batch(1, 0, 1).as_bytes()),
        1,
        0,
    );
    let _ = log.apply_retention(1 << 40);
    let _ = log.truncate_to(1);
    let _ = log.close();
    read_batches
}

#[test]
fn garbage_directories_open_or_fail_cleanly() {
    let seeds: Vec<u64> = match std::env::var("KRUST_LOG_SEED") {
        Ok(s) => vec![s.parse().expect("KRUST_LOG_SEED must be a number")],
        Err(_) => (0..400).collect(),
    };
    for seed in seeds {
        if std::panic::catch_unwind(|| run_case(seed)).is_err() {
            panic!(
                "seed {seed} panicked\nrerun: KRUST_LOG_SEED={seed} cargo test -p krust-log --test garbage_dirs"
            );
        }
    }
}
