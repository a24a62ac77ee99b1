//! `raft-failover`: how long a 3-voter controller quorum takes to commit again after its leader
//! is SIGKILLed — krust next to Apache Kafka 3.9, with the same `controller.quorum.*` settings,
//! in the same run, rounds interleaved (krust, Kafka, krust, …) so both see the same noise.
//!
//! Each round waits until every voter has caught up, SIGKILLs the leader, measures, and
//! restarts the killed node. "Commits again" is measured two ways:
//!
//! * **krust, hook**: a writer keeps appending 1 KiB records through the `--test-append-socket`
//!   hook (moving to the next node on `ERR`); the time from the kill to the first record a
//!   surviving node acknowledges as committed.
//! * **DescribeQuorum** (both): every `--poll-ms` the surviving voters are asked DescribeQuorum
//!   over kept-open `krust-net` connections; the time from the kill to the first answer of a
//!   new leader (higher epoch) with a high watermark beyond the last one the old leader
//!   reported. Kafka's active controller appends a NoOpRecord every
//!   `metadata.max.idle.interval.ms` (set to `--idle-interval-ms` on both), so its high
//!   watermark moves without a writer; krust's moves with the hook writer, which is paused
//!   during Kafka's rounds.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/raft-failover --rounds 20
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use krust::metadata_quorum::QuorumInfo;
use krust_bench::{
    HookConnection, KrustQuorum, QuorumPoller, cores, cpu_model, default_krust_binary,
    load_average, ms, percentile,
};
use krust_testkit::{KafkaCluster, KafkaDist};

/// Leader-kill failover time of krust vs. Kafka 3.9 controller quorums.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Folder for the krust nodes' data (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Leader kills per implementation.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// `controller.quorum.election.timeout.ms` (Kafka's default).
    #[arg(long, default_value_t = 1000)]
    election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms` (Kafka's default).
    #[arg(long, default_value_t = 2000)]
    fetch_timeout_ms: u64,
    /// `controller.quorum.request.timeout.ms` (Kafka's default).
    #[arg(long, default_value_t = 2000)]
    request_timeout_ms: u64,
    /// `metadata.max.idle.interval.ms`: Kafka's leader appends a NoOpRecord this often.
    #[arg(long, default_value_t = 100)]
    idle_interval_ms: u64,
    /// DescribeQuorum polling interval.
    #[arg(long, default_value_t = 10)]
    poll_ms: u64,
    /// Record value size of the krust writer.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Measure krust only.
    #[arg(long)]
    skip_kafka: bool,
}

/// Longest wait for a new leader, a catch-up or a restart.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// One commit the hook acknowledged: when, which node, which offset.
type Ack = (Instant, i32, i64);

/// The writer's shared state.
#[derive(Debug, Default)]
struct Writer {
    stop: AtomicBool,
    paused: AtomicBool,
    /// Acknowledgements since the last `take` (bounded: cleared every round).
    acks: Mutex<Vec<Ack>>,
}

impl Writer {
    fn acks(&self) -> std::sync::MutexGuard<'_, Vec<Ack>> {
        // A poisoned lock only means the writer thread panicked; its data is still usable.
        self.acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Appends records forever through the hook of `sockets` (node id, path), moving to the next
/// node on any failure, until `writer.stop`.
fn run_writer(writer: &Writer, sockets: &[(i32, PathBuf)], record_bytes: usize) {
    const MAX_ACKS: usize = 1_000_000;
    let mut connections: Vec<Option<HookConnection>> = sockets.iter().map(|_| None).collect();
    let mut target = 0usize;
    let mut seq = 0u64;
    while !writer.stop.load(Ordering::Relaxed) {
        if writer.paused.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let (id, socket) = &sockets[target];
        if connections[target].is_none() {
            connections[target] = HookConnection::connect(socket).ok();
        }
        let Some(connection) = connections[target].as_mut() else {
            target = (target + 1) % sockets.len();
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let mut value = format!("{seq:010}-").into_bytes();
        value.resize(record_bytes.max(value.len()), b'x');
        seq += 1;
        match connection.append(&value) {
            Ok(Ok(offset)) => {
                let mut acks = writer.acks();
                if acks.len() < MAX_ACKS {
                    acks.push((Instant::now(), *id, offset));
                }
            }
            Ok(Err(_)) => {
                // Not the leader (or no longer): try the next node.
                target = (target + 1) % sockets.len();
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => {
                connections[target] = None;
                target = (target + 1) % sockets.len();
            }
        }
    }
}

/// Waits until there is a leader and every voter's log end has reached the high watermark the
/// leader reported first; returns the leader's latest answer.
fn wait_caught_up(poller: &QuorumPoller, what: &str) -> Result<QuorumInfo> {
    let interval = Duration::from_millis(20);
    let (_, first) = poller
        .wait_for(&[], interval, ROUND_TIMEOUT, |q| q.leader_id > 0)
        .with_context(|| format!("{what}: no leader within {ROUND_TIMEOUT:?}"))?;
    let target = first.high_watermark;
    let (_, q) = poller
        .wait_for(&[], interval, ROUND_TIMEOUT, |q| {
            q.voters.len() == 3 && q.voters.iter().all(|v| v.log_end_offset >= target)
        })
        .with_context(|| format!("{what}: voters did not catch up to {target}"))?;
    Ok(q)
}

/// Polls the survivors until a new leader (epoch above `old`'s) reports a high watermark
/// beyond `old`'s; also watches `acks` (krust) for the first commit a survivor acknowledged
/// after `killed_at`. Returns `(DescribeQuorum time, hook time, new leader's answer)`.
fn measure(
    poller: &QuorumPoller,
    old: &QuorumInfo,
    killed_at: Instant,
    poll: Duration,
    writer: Option<&Writer>,
) -> Result<(Duration, Option<Duration>, QuorumInfo)> {
    let deadline = killed_at + ROUND_TIMEOUT;
    let mut described: Option<(Duration, QuorumInfo)> = None;
    let mut committed: Option<Duration> = None;
    while Instant::now() < deadline {
        if described.is_none()
            && let Some(q) = poller.leader(&[old.leader_id])
            && q.leader_id != old.leader_id
            && q.leader_epoch > old.leader_epoch
            && q.high_watermark > old.high_watermark
        {
            described = Some((killed_at.elapsed(), q));
        }
        if let Some(writer) = writer
            && committed.is_none()
        {
            committed = writer
                .acks()
                .iter()
                .find(|(at, node, _)| *at > killed_at && *node != old.leader_id)
                .map(|(at, _, _)| at.duration_since(killed_at));
        }
        if let Some((took, q)) = &described
            && (writer.is_none() || committed.is_some())
        {
            return Ok((*took, committed, q.clone()));
        }
        std::thread::sleep(poll);
    }
    bail!(
        "no new leader committed within {ROUND_TIMEOUT:?} after killing node {} (epoch {})",
        old.leader_id,
        old.leader_epoch
    )
}

fn line(label: &str, samples: &mut [Duration]) -> Option<(Duration, Duration)> {
    if samples.is_empty() {
        println!("  {label:<34} no samples");
        return None;
    }
    samples.sort_unstable();
    let (p50, max) = (percentile(samples, 0.5), percentile(samples, 1.0));
    println!(
        "  {label:<34} n {:3}  p50 {:8.1} ms  max {:8.1} ms  min {:8.1} ms",
        samples.len(),
        ms(p50),
        ms(max),
        ms(samples[0])
    );
    Some((p50, max))
}

#[allow(clippy::too_many_lines)] // one straight script: setup, rounds, summary
fn main() -> Result<()> {
    let args = Args::parse();
    if args.rounds == 0 {
        bail!("--rounds must be positive");
    }
    let krust = args.krust.clone().unwrap_or_else(default_krust_binary);
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let poll = Duration::from_millis(args.poll_ms);
    let settings: Vec<(String, String)> = [
        (
            "controller.quorum.election.timeout.ms",
            args.election_timeout_ms,
        ),
        ("controller.quorum.fetch.timeout.ms", args.fetch_timeout_ms),
        (
            "controller.quorum.request.timeout.ms",
            args.request_timeout_ms,
        ),
        ("metadata.max.idle.interval.ms", args.idle_interval_ms),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_string()))
    .collect();

    println!("machine: cpu {:?}, {} cores", cpu_model(), cores());
    println!(
        "params:  {} rounds, 3 voters each on 127.0.0.1, {}; DescribeQuorum every {} ms; krust writer records of {} B",
        args.rounds,
        settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        args.poll_ms,
        args.record_bytes
    );
    println!("load:    {} (before start)", load_average());

    let mut quorum = KrustQuorum::new(&krust, &parent, 3, &settings)?;
    quorum.start_all()?;
    let krust_poller = QuorumPoller::new(&quorum.addresses(), Duration::from_millis(500))?;

    let mut kafka = if args.skip_kafka {
        None
    } else {
        let dist = KafkaDist::locate().context("locating Kafka 3.9 (or pass --skip-kafka)")?;
        let mut builder = KafkaCluster::builder(&dist)
            .controllers(3)
            .start_timeout(Duration::from_secs(120));
        for (k, v) in &settings {
            builder = builder.prop(k.clone(), v);
        }
        let cluster = builder.start().context("starting the Kafka quorum")?;
        let addresses: Vec<(i32, String)> = cluster
            .nodes()
            .iter()
            .filter_map(|n| {
                n.controller_port()
                    .map(|p| (n.node_id(), format!("127.0.0.1:{p}")))
            })
            .collect();
        let poller = QuorumPoller::new(&addresses, Duration::from_millis(500))?;
        println!(
            "kafka:   3 controllers of Kafka {}",
            krust_testkit::KAFKA_VERSION
        );
        Some((cluster, poller))
    };

    let writer = Arc::new(Writer::default());
    let sockets: Vec<(i32, PathBuf)> = quorum
        .ids()
        .into_iter()
        .map(|id| (id, quorum.socket(id)))
        .collect();
    let writer_thread = {
        let (writer, bytes) = (writer.clone(), args.record_bytes);
        std::thread::spawn(move || run_writer(&writer, &sockets, bytes))
    };
    // Stops the writer however `rounds` ends (the processes die with their handles).
    let result = rounds(
        &args,
        &mut quorum,
        &krust_poller,
        kafka.as_mut(),
        &writer,
        poll,
    );
    writer.stop.store(true, Ordering::Relaxed);
    if writer_thread.join().is_err() {
        eprintln!("writer thread panicked");
    }
    let (mut hook, mut krust_dq, mut kafka_dq) = result?;

    println!(
        "summary (time from SIGKILL of the leader to the first new commit; load {}):",
        load_average()
    );
    let hook_stats = line("krust, hook append acknowledged", &mut hook);
    let krust_stats = line("krust, DescribeQuorum HW advanced", &mut krust_dq);
    let kafka_stats = line("Kafka 3.9, DescribeQuorum HW adv.", &mut kafka_dq);
    if let Some((kafka_p50, kafka_max)) = kafka_stats {
        for (label, stats) in [("hook", hook_stats), ("DescribeQuorum", krust_stats)] {
            if let Some((p50, max)) = stats {
                println!(
                    "  ratio krust ({label}) / Kafka: p50 {:.2}, max {:.2} (goal: p50 <= 1)",
                    p50.as_secs_f64() / kafka_p50.as_secs_f64().max(1e-9),
                    max.as_secs_f64() / kafka_max.as_secs_f64().max(1e-9)
                );
            }
        }
    }
    Ok(())
}

/// The measured rounds: `(krust hook, krust DescribeQuorum, Kafka DescribeQuorum)` samples.
fn rounds(
    args: &Args,
    quorum: &mut KrustQuorum,
    krust_poller: &QuorumPoller,
    mut kafka: Option<&mut (KafkaCluster, QuorumPoller)>,
    writer: &Writer,
    poll: Duration,
) -> Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    let (mut hook, mut krust_dq, mut kafka_dq) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        // krust: steady state with the writer committing to this leader, then kill it.
        writer.paused.store(false, Ordering::Relaxed);
        let caught_up = wait_caught_up(krust_poller, "krust")
            .with_context(|| format!("round {round}\n{}", quorum.log_tails()))?;
        let wait_acks = Instant::now() + ROUND_TIMEOUT;
        writer.acks().clear();
        while writer
            .acks()
            .iter()
            .filter(|(_, node, _)| *node == caught_up.leader_id)
            .nth(4)
            .is_none()
        {
            if Instant::now() > wait_acks {
                bail!(
                    "round {round}: the writer commits nothing\n{}",
                    quorum.log_tails()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let old = krust_poller
            .leader(&[])
            .context("krust: the leader stopped answering")?;
        let killed_at = Instant::now();
        quorum.kill(old.leader_id)?;
        let (dq, committed, new) = measure(krust_poller, &old, killed_at, poll, Some(writer))
            .with_context(|| format!("round {round}\n{}", quorum.log_tails()))?;
        let committed = committed.context("the hook acknowledged nothing")?;
        hook.push(committed);
        krust_dq.push(dq);
        let mut report = format!(
            "round {round:2}: krust leader {} (epoch {}) killed: hook commit {:7.1} ms, DescribeQuorum {:7.1} ms (new leader {}, epoch {})",
            old.leader_id,
            old.leader_epoch,
            ms(committed),
            ms(dq),
            new.leader_id,
            new.leader_epoch
        );
        quorum.start(old.leader_id)?;

        if let Some((cluster, poller)) = kafka.as_deref_mut() {
            writer.paused.store(true, Ordering::Relaxed);
            wait_caught_up(poller, "kafka").with_context(|| format!("round {round}"))?;
            let old = poller
                .leader(&[])
                .context("kafka: the leader stopped answering")?;
            let node = cluster
                .node_mut(old.leader_id)
                .with_context(|| format!("kafka: no node {}", old.leader_id))?;
            let killed_at = Instant::now();
            node.kill().context("killing the Kafka leader")?;
            let (dq, _, new) = measure(poller, &old, killed_at, poll, None)
                .with_context(|| format!("round {round}: kafka"))?;
            kafka_dq.push(dq);
            report.push_str(&format!(
                " | Kafka leader {} (epoch {}) killed: {:7.1} ms (new leader {}, epoch {})",
                old.leader_id,
                old.leader_epoch,
                ms(dq),
                new.leader_id,
                new.leader_epoch
            ));
            // `start`, not `restart`: the node is dead already (restart would SIGTERM first).
            node.start().context("restarting the Kafka node")?;
        }
        println!("{report}; load {}", load_average());
    }
    Ok((hook, krust_dq, kafka_dq))
}
