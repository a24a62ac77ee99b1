//! `raft-commit`: commit latency and throughput of a 3-voter krust KRaft quorum on loopback,
//! next to the disk's own write + fdatasync latency measured in the same run.
//!
//! Three `krust server` controllers (`process.roles=controller`) are formatted and started in
//! a temp dir under `--dir`; a writer appends 1 KiB records through the leader's
//! `--test-append-socket` hook, which answers once the record is committed (on a majority,
//! fsynced). Two modes:
//!
//! * **latency**: one record at a time, each commit followed by one plain 1 KiB write +
//!   fdatasync on the same filesystem (alternating sample by sample, so both see the same disk
//!   and the same noise: the machine and its disk are shared). Ratio printed: commit p99 /
//!   fsync p99 (goal ≤ 3: a commit costs the leader's fsync, a round trip and a follower's
//!   fsync).
//! * **throughput**: `--concurrency` writers, each with its own hook connection (the hook
//!   serves one exchange at a time per connection), for `--seconds`; then one plain fsync
//!   writer for as long, for the disk's own rate.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/raft-commit --records 2000 --concurrency 8 --seconds 10
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use krust_bench::{
    FsyncProbe, HookConnection, KrustQuorum, QuorumPoller, cores, cpu_model, default_krust_binary,
    filesystem_of, load_average, ms, percentile,
};

/// Commit latency/throughput of a 3-voter krust quorum vs. the disk's fdatasync.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Folder for the nodes' data and the fsync probe (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Latency samples of each kind (commits, fsyncs).
    #[arg(long, default_value_t = 2000)]
    records: usize,
    /// Record value size in bytes.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Concurrent writers of the throughput mode (the hook serves at most 16 connections).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Duration of the throughput mode, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// `controller.quorum.append.linger.ms` of the voters (Kafka's default is 25: a lone
    /// append waits that long for company before it is written).
    #[arg(long, default_value_t = 25)]
    linger_ms: u64,
}

/// A record value of `bytes` bytes (no newline) starting with its sequence number.
fn record_value(seq: u64, bytes: usize) -> Vec<u8> {
    let mut value = format!("{seq:010}-").into_bytes();
    value.resize(bytes.max(value.len()), b'x');
    value
}

/// The current leader's id and a hook connection to it.
fn connect_to_leader(quorum: &KrustQuorum, poller: &QuorumPoller) -> Result<(i32, HookConnection)> {
    let (_, q) = poller
        .wait_for(
            &[],
            Duration::from_millis(20),
            Duration::from_secs(60),
            |q| q.leader_id > 0,
        )
        .with_context(|| format!("no leader within 60 s\n{}", quorum.log_tails()))?;
    let connection = HookConnection::connect(&quorum.socket(q.leader_id))?;
    Ok((q.leader_id, connection))
}

/// One committed append; fails on an `ERR` answer (the leader changed: the run is void).
fn commit(connection: &mut HookConnection, value: &[u8]) -> Result<Duration> {
    let start = Instant::now();
    match connection.append(value)? {
        Ok(_) => Ok(start.elapsed()),
        Err(reason) => bail!("append failed: {reason}"),
    }
}

fn summary(label: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let (p50, p99) = (percentile(samples, 0.50), percentile(samples, 0.99));
    println!(
        "{label:<28} n {:6}  p50 {:8.3} ms  p99 {:8.3} ms  max {:8.3} ms",
        samples.len(),
        ms(p50),
        ms(p99),
        ms(percentile(samples, 1.0)),
    );
    (p50, p99)
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.records == 0 || !(1..=16).contains(&args.concurrency) {
        bail!("--records must be positive, --concurrency 1..=16");
    }
    let krust = args.krust.clone().unwrap_or_else(default_krust_binary);
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;

    let extra = [(
        "controller.quorum.append.linger.ms".to_owned(),
        args.linger_ms.to_string(),
    )];
    let mut quorum = KrustQuorum::new(&krust, &parent, 3, &extra)?;
    let (mount, fstype, device) = filesystem_of(quorum.root());
    println!("machine: cpu {:?}, {} cores", cpu_model(), cores());
    println!(
        "target:  {} (fs {fstype} on {device}, mounted at {mount})",
        quorum.root().display()
    );
    println!(
        "params:  3 krust voters on 127.0.0.1 ({}), records of {} B, append.linger.ms {}; latency: {} commits + {} fsyncs, alternating; throughput: {} writers for {} s",
        krust.display(),
        args.record_bytes,
        args.linger_ms,
        args.records,
        args.records,
        args.concurrency,
        args.seconds
    );
    println!("load:    {} (before start)", load_average());
    quorum.start_all()?;
    let poller = QuorumPoller::new(&quorum.addresses(), Duration::from_millis(500))?;
    let (leader, mut connection) = connect_to_leader(&quorum, &poller)?;
    // Warm-up: the leader's first commits also settle the followers' fetch loops.
    for seq in 0..100 {
        commit(&mut connection, &record_value(seq, args.record_bytes)).context("warm-up append")?;
    }
    println!("leader:  node {leader}; load {}", load_average());

    // Latency: commits and fsyncs alternate sample by sample.
    let mut probe = FsyncProbe::create(quorum.root(), args.record_bytes)?;
    let mut commits = Vec::with_capacity(args.records);
    let mut fsyncs = Vec::with_capacity(args.records);
    for seq in 0..args.records as u64 {
        commits.push(commit(
            &mut connection,
            &record_value(100 + seq, args.record_bytes),
        )?);
        fsyncs.push(probe.sample()?);
    }
    println!("load:    {} (after latency mode)", load_average());
    println!("latency (one record at a time):");
    let (_, fsync_p99) = summary("  write 1 KiB + fdatasync", &mut fsyncs);
    let (_, commit_p99) = summary("  krust commit (3 voters)", &mut commits);
    println!(
        "  ratio commit p99 / fsync p99 = {:.2} (goal <= 3)",
        commit_p99.as_secs_f64() / fsync_p99.as_secs_f64().max(1e-9)
    );

    // Throughput: `concurrency` writers, each with its own connection. The hook serves at most
    // 16 connections at once; a 17th would wait for a free slot, so close ours first.
    drop(connection);
    let socket = quorum.socket(leader);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let results: Vec<Result<Vec<Duration>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.concurrency)
            .map(|writer| {
                let (socket, stop) = (&socket, &stop);
                let bytes = args.record_bytes;
                scope.spawn(move || -> Result<Vec<Duration>> {
                    let mut connection = HookConnection::connect(socket)?;
                    let mut out = Vec::new();
                    let mut seq = (writer as u64 + 1) << 40;
                    while !stop.load(Ordering::Relaxed) {
                        out.push(commit(&mut connection, &record_value(seq, bytes))?);
                        seq += 1;
                    }
                    Ok(out)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(args.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("writer panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let load_after = load_average();
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    // The same wall time of plain fsyncs, for the disk's own rate.
    let fsync_started = Instant::now();
    let mut fsync_all = Vec::new();
    while fsync_started.elapsed() < Duration::from_secs(args.seconds) {
        fsync_all.push(probe.sample()?);
    }
    let fsync_elapsed = fsync_started.elapsed().as_secs_f64();
    println!(
        "throughput ({} concurrent writers, {:.1} s; load {load_after}):",
        args.concurrency, elapsed
    );
    println!(
        "  write 1 KiB + fdatasync, one writer: {:9.0} fsyncs/s",
        fsync_all.len() as f64 / fsync_elapsed
    );
    println!(
        "  krust commits:                       {:9.0} commits/s ({:.2} MB/s of values)",
        all.len() as f64 / elapsed,
        (all.len() * args.record_bytes) as f64 / elapsed / 1e6
    );
    summary("  write 1 KiB + fdatasync", &mut fsync_all);
    summary("  krust commit (pipelined)", &mut all);
    println!("load:    {} (end)", load_average());
    Ok(())
}
