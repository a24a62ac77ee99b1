//! `log-append`: krust-log append throughput against the disk's own sequential write speed.
//!
//! Appends batches of 1 KiB records (16 KiB per batch by default) through the leader path of
//! [`krust_log::Log`] — validation, offset assignment, segment/index bookkeeping — with
//! `flush()` every 64 MiB, and compares with a plain `write` + `fdatasync` of the same bytes,
//! in the same chunks, to the same directory, in the same run. The two grow in lockstep, one
//! flush window at a time with alternating order, so both see the same disk and the same noise
//! from other processes (the machine is shared); the ratio is of the summed times. Then reads
//! the whole log back sequentially (page cache warm).
//!
//! ```text
//! cargo run --release -p krust-bench --bin log-append -- --dir /tmp/bench --size 2G
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use krust_bench::{cores, cpu_model, filesystem_of, mb_per_s, parse_size, thread_cpu_seconds};
use krust_log::{Log, LogConfig, RecordBatch, RecordBatchBuilder};

/// krust-log append throughput vs. plain sequential write + fdatasync.
#[derive(Debug, Parser)]
struct Args {
    /// Directory to write to (a fresh subdirectory is created and removed).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Bytes to append per run (K/M/G suffixes).
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    size: u64,
    /// Target batch size.
    #[arg(long, default_value = "16K", value_parser = parse_size)]
    batch_bytes: u64,
    /// Record value size.
    #[arg(long, default_value = "1K", value_parser = parse_size)]
    record_bytes: u64,
    /// fsync every this many bytes.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    flush_bytes: u64,
    /// Paired runs (times are summed over all runs).
    #[arg(long, default_value_t = 2)]
    runs: u32,
}

fn template_batch(batch_bytes: u64, record_bytes: u64) -> RecordBatch {
    let records = (batch_bytes / record_bytes.max(1)).max(1);
    let mut builder = RecordBatchBuilder::new(0);
    for i in 0..records {
        let value: Vec<u8> = (0..record_bytes).map(|j| (i + j) as u8).collect();
        builder.append_kv(
            1_700_000_000_000 + i as i64,
            Some(Bytes::from(format!("key-{i}"))),
            Some(Bytes::from(value)),
        );
    }
    builder.build()
}

/// Time spent and bytes written by each side of one run.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    log_seconds: f64,
    plain_seconds: f64,
    log_cpu_seconds: f64,
    plain_cpu_seconds: f64,
    bytes: u64,
}

/// One run: the log and the plain file grow in lockstep, one flush window (`flush_bytes`) at
/// a time, alternating which goes first, so both see the same disk and the same noise from
/// other processes. Each window ends with its fsync; the times of the two sides are summed.
fn run_paired(
    log_dir: &Path,
    plain_path: &Path,
    template: &RecordBatch,
    count: u64,
    flush_bytes: u64,
) -> Result<Totals> {
    let mut log = Log::open(log_dir, LogConfig::default(), 0).context("open log")?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(plain_path)
        .context("create plain file")?;
    let batch_size = template.size_in_bytes() as u64;
    let per_window = (flush_bytes / batch_size).max(1);
    let mut totals = Totals::default();
    let mut done = 0u64;
    let mut window = 0u64;
    while done < count {
        let n = per_window.min(count - done);
        let order: [bool; 2] = if window.is_multiple_of(2) {
            [true, false]
        } else {
            [false, true]
        };
        for is_log in order {
            let start = Instant::now();
            let cpu_start = thread_cpu_seconds();
            if is_log {
                for _ in 0..n {
                    // A fresh buffer per batch, as a produce request would bring.
                    let batch =
                        RecordBatch::parse_default(Bytes::copy_from_slice(template.as_bytes()))
                            .context("parse")?
                            .0;
                    log.append_as_leader(vec![batch], 0, 1_700_000_000_000)
                        .context("append")?;
                }
                log.flush().context("flush")?;
                totals.log_seconds += start.elapsed().as_secs_f64();
                totals.log_cpu_seconds += thread_cpu_seconds() - cpu_start;
            } else {
                for _ in 0..n {
                    // The same per-chunk copy the log side makes.
                    let chunk = Bytes::copy_from_slice(template.as_bytes());
                    file.write_all(&chunk).context("write")?;
                }
                file.sync_data().context("fdatasync")?;
                totals.plain_seconds += start.elapsed().as_secs_f64();
                totals.plain_cpu_seconds += thread_cpu_seconds() - cpu_start;
            }
        }
        done += n;
        window += 1;
        totals.bytes += n * batch_size;
    }
    log.close().context("close")?;
    Ok(totals)
}

/// Reads the whole log sequentially; returns seconds and bytes read.
fn run_read(dir: &Path) -> Result<(f64, u64)> {
    let start = Instant::now();
    let log = Log::open(dir, LogConfig::default(), i64::MAX).context("reopen log")?;
    println!(
        "reopen:  clean open of the log ({} segments) {:.3} s",
        log.segment_count(),
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let mut offset = log.log_start_offset();
    let mut bytes = 0u64;
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20).context("read")?;
        let Some(last) = read.batches.last() else {
            bail!("read at {offset} returned nothing");
        };
        offset = last.next_offset();
        bytes += read.bytes.len() as u64;
    }
    Ok((start.elapsed().as_secs_f64(), bytes))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let parent = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => std::env::temp_dir(),
    };
    let work = tempfile::Builder::new()
        .prefix("log-append-")
        .tempdir_in(&parent)
        .context("creating work dir")?;
    let template = template_batch(args.batch_bytes, args.record_bytes);
    let batch_size = template.size_in_bytes() as u64;
    let count = (args.size / batch_size).max(1);
    let (mount, fstype, device) = filesystem_of(work.path());

    println!("machine: cpu {:?}, {} cores", cpu_model(), cores());
    println!(
        "target:  {} (fs {fstype} on {device}, mounted at {mount})",
        work.path().display()
    );
    println!(
        "params:  {count} batches x {batch_size} B ({} records of {} B values) = {:.1} MiB per run, flush every {} MiB, {} paired runs, segment.bytes {} MiB",
        template.record_count(),
        args.record_bytes,
        (count * batch_size) as f64 / (1u64 << 20) as f64,
        args.flush_bytes >> 20,
        args.runs,
        LogConfig::default().segment_bytes >> 20,
    );

    let mut sum = Totals::default();
    let mut log_dir: Option<PathBuf> = None;
    for run in 1..=args.runs {
        let dir = work.path().join(format!("bench-{run}"));
        let plain_path = work.path().join(format!("plain-{run}.bin"));
        let t = run_paired(&dir, &plain_path, &template, count, args.flush_bytes)?;
        std::fs::remove_file(&plain_path).context("removing plain file")?;
        if let Some(previous) = log_dir.replace(dir) {
            std::fs::remove_dir_all(previous).context("removing previous log")?;
        }
        println!(
            "run {run}: plain write+fdatasync {:7.1} MB/s ({:.2} CPU-s), krust-log append+flush {:7.1} MB/s ({:.2} CPU-s), ratio {:.3}",
            mb_per_s(t.bytes, t.plain_seconds),
            t.plain_cpu_seconds,
            mb_per_s(t.bytes, t.log_seconds),
            t.log_cpu_seconds,
            t.plain_seconds / t.log_seconds
        );
        sum.log_cpu_seconds += t.log_cpu_seconds;
        sum.plain_cpu_seconds += t.plain_cpu_seconds;
        sum.log_seconds += t.log_seconds;
        sum.plain_seconds += t.plain_seconds;
        sum.bytes += t.bytes;
    }
    let plain = mb_per_s(sum.bytes, sum.plain_seconds);
    let log = mb_per_s(sum.bytes, sum.log_seconds);
    println!(
        "total:   plain {plain:.1} MB/s, krust-log {log:.1} MB/s, ratio {:.3} (goal >= 0.9)",
        log / plain
    );

    if let Some(dir) = log_dir {
        let (secs, bytes) = run_read(&dir)?;
        println!(
            "read:    sequential read of the whole log {:.1} MB/s ({bytes} B in {secs:.2} s, page cache warm, CRC checked)",
            mb_per_s(bytes, secs)
        );
    }
    Ok(())
}
