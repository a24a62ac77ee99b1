//! `transactions` (issue 13's benchmark): a consume-transform-produce loop in transactions of
//! `--txn-records` (100) records on 3 brokers with replication factor 3, krust vs Apache Kafka
//! 3.9 in the same run.
//!
//! The client is `bench/transactions/TxnBench.java` on Kafka 3.9's own client jars, compiled at
//! start with the JDK's `javac`: `--copiers` (3) threads, each a read_committed consumer of the
//! input topic (one group) and a transactional producer, copy records to the output topic, each
//! transaction also carrying the consumer's offsets (`sendOffsetsToTransaction`).
//!
//! * **throughput**: the input holds `--warmup-records` + `--records` records; the copiers copy
//!   them all; committed transactions/s and records/s are measured after the warm-up, and the
//!   output is read back read_committed (every record exactly once).
//! * **latency**: a feeder writes `--rate` records/s (default: `--latency-fraction` of the lower
//!   of the two implementations' median throughputs, so both run at the same load) for
//!   `--warmup-seconds` + `--latency-seconds`, stamping each value with the time it was due; a
//!   read_committed consumer of the output measures end to end latency (due → delivered) of the
//!   records sent after the warm-up: p50/p99/p99.9.
//!
//! Each phase runs `--rounds` (3) times, alternating which implementation goes first, on fresh
//! topics; the table shows medians and every round. Kafka's JVMs run with
//! `kafka-server-start.sh`'s settings (G1, C2, 1 GiB heap); the client JVM with the same flags,
//! for both. Broker CPU (user+system of the 3 server processes) is reported per 1,000
//! committed transactions of the throughput phase.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/transactions [--records 100000 --rounds 3] [--skip-krust | --skip-kafka]
//!     [--client-log-dir DIR]   (each client run's log: the transaction manager's requests, timed)
//! ```
//! Goal (issue 13): krust ≥ 1.5× Kafka's throughput, p99 ≤ Kafka's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use krust_bench::cluster::{Cluster, cpu_seconds, start_kafka_cluster, start_krust_cluster};
use krust_bench::kafka_jvm::{
    KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_SERVER_HEAP_OPTS, server_jvm_flags,
};
use krust_bench::{cores, cpu_model, default_krust_binary, load_average};
use krust_testkit::{KafkaDist, ToolOutput, run_binary, workspace_root};

const CLIENT_MAIN: &str = "TxnBench";
const PHASE_TIMEOUT: Duration = Duration::from_secs(1200);
/// The client's log4j settings with `--client-log-dir`: warnings, plus the transaction
/// manager's requests, answers and retries, with millisecond timestamps and the thread.
const CLIENT_LOG4J: &str = "log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} [%t] %p %c{1} %m%n
log4j.logger.org.apache.kafka.clients.producer.internals.TransactionManager=DEBUG
";

/// krust vs Apache Kafka 3.9: transactional consume-transform-produce on 3 brokers, RF=3.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Records copied in each throughput round (after the warm-up).
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Records copied before each throughput round's clock starts.
    #[arg(long, default_value_t = 20_000)]
    warmup_records: u64,
    /// Records per transaction.
    #[arg(long, default_value_t = 100)]
    txn_records: u32,
    /// Value size in bytes (at least 16: the due time and a sequence number).
    #[arg(long, default_value_t = 100)]
    record_bytes: u32,
    /// Consume-transform-produce loops (threads, one transactional id each).
    #[arg(long, default_value_t = 3)]
    copiers: u32,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Records/s fed in the latency phase (default: --latency-fraction of the lower median
    /// throughput).
    #[arg(long)]
    rate: Option<u64>,
    /// Share of the lower median throughput fed in the latency phase.
    #[arg(long, default_value_t = 0.5)]
    latency_fraction: f64,
    /// Seconds fed before the latency phase's measurement starts.
    #[arg(long, default_value_t = 5)]
    warmup_seconds: u64,
    /// Seconds measured in each latency round.
    #[arg(long, default_value_t = 20)]
    latency_seconds: u64,
    /// Rounds of each phase (alternating which implementation goes first).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Only measure Kafka.
    #[arg(long)]
    skip_krust: bool,
    /// Only measure krust.
    #[arg(long)]
    skip_kafka: bool,
    /// Keep each client run's stderr (the Kafka client's warnings: retried requests and the
    /// like) as `<dir>/<krust|kafka>-<mode>-<round>.log`, for looking into a slow round.
    #[arg(long)]
    client_log_dir: Option<PathBuf>,
}

/// One throughput round.
#[derive(Debug, Clone, Copy)]
struct Throughput {
    txn_s: f64,
    records_s: f64,
    cpu_s_per_1k_txn: f64,
}

/// One latency round.
#[derive(Debug, Clone, Copy)]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    delivered: u64,
    sent: u64,
}

struct Implementation {
    name: &'static str,
    cluster: Cluster,
    throughput: Vec<Throughput>,
    latency: Vec<Latency>,
    failures: Vec<String>,
}

fn cluster_props() -> Vec<(&'static str, &'static str)> {
    vec![
        ("default.replication.factor", "3"),
        ("min.insync.replicas", "2"),
        ("offsets.topic.replication.factor", "3"),
        ("transaction.state.log.replication.factor", "3"),
        ("transaction.state.log.min.isr", "2"),
        ("num.network.threads", "3"),
        ("num.io.threads", "8"),
    ]
}

fn client_jvm_flags() -> Vec<&'static str> {
    KAFKA_SERVER_HEAP_OPTS
        .iter()
        .chain(KAFKA_JVM_PERFORMANCE_OPTS)
        .copied()
        .collect()
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.record_bytes < 16 {
        bail!("--record-bytes must be at least 16");
    }
    let dist = KafkaDist::locate().context("Kafka 3.9 jars (scripts/fetch-kafka.sh)")?;
    let work = tempfile::tempdir().context("temp dir")?;
    let classes = compile_client(&dist, work.path())?;
    println!("transactions: krust vs Apache Kafka 3.9.1, consume-transform-produce on 3 brokers");
    println!(
        "machine: {} ({} cores), load {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: {} copiers, {} records/transaction, {} B values, {} partitions in and out, \
         RF=3, min.insync.replicas=2, acks=all; throughput: {} records after {} warm-up; \
         latency: {} s after {} s warm-up; {} rounds each, alternating",
        args.copiers,
        args.txn_records,
        args.record_bytes,
        args.partitions,
        args.records,
        args.warmup_records,
        args.latency_seconds,
        args.warmup_seconds,
        args.rounds
    );
    println!(
        "Kafka server JVM: {}; client JVM (both): {}",
        server_jvm_flags(KAFKA_SERVER_HEAP_OPTS),
        client_jvm_flags().join(" ")
    );

    let mut impls = Vec::new();
    if !args.skip_kafka {
        impls.push(Implementation {
            name: "kafka",
            cluster: start_kafka_cluster(&dist, &cluster_props())?,
            throughput: Vec::new(),
            latency: Vec::new(),
            failures: Vec::new(),
        });
    }
    if !args.skip_krust {
        let binary = args.krust.clone().unwrap_or_else(default_krust_binary);
        impls.push(Implementation {
            name: "krust",
            cluster: start_krust_cluster(&dist, &binary, &cluster_props())?,
            throughput: Vec::new(),
            latency: Vec::new(),
            failures: Vec::new(),
        });
    }

    for round in 0..args.rounds {
        for i in order(impls.len(), round) {
            let imp = &mut impls[i];
            match throughput_round(&dist, &classes, (imp.name, &imp.cluster), &args, round) {
                Ok(t) => {
                    println!(
                        "throughput round {round} {}: {:.1} txn/s, {:.0} records/s, {:.2} broker CPU s/1k txn",
                        imp.name, t.txn_s, t.records_s, t.cpu_s_per_1k_txn
                    );
                    imp.throughput.push(t);
                }
                Err(e) => {
                    println!("throughput round {round} {}: failed: {e:#}", imp.name);
                    imp.failures
                        .push(format!("throughput round {round}: {e:#}"));
                }
            }
        }
    }
    let rate = match args.rate {
        Some(rate) => rate,
        None => {
            let lowest = impls
                .iter()
                .map(|imp| median(imp.throughput.iter().map(|t| t.records_s)))
                .filter(|r| r.is_finite())
                .fold(f64::INFINITY, f64::min);
            if !lowest.is_finite() {
                bail!("no throughput round succeeded: no rate for the latency phase");
            }
            ((lowest * args.latency_fraction) as u64).max(100)
        }
    };
    println!(
        "latency phase at {rate} records/s for both ({} of the lower median throughput unless --rate)",
        args.latency_fraction
    );
    for round in 0..args.rounds {
        for i in order(impls.len(), round) {
            let imp = &mut impls[i];
            match latency_round(
                &dist,
                &classes,
                (imp.name, &imp.cluster),
                &args,
                round,
                rate,
            ) {
                Ok(l) => {
                    println!(
                        "latency round {round} {}: p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms ({} of {} delivered)",
                        imp.name, l.p50_ms, l.p99_ms, l.p999_ms, l.delivered, l.sent
                    );
                    imp.latency.push(l);
                }
                Err(e) => {
                    println!("latency round {round} {}: failed: {e:#}", imp.name);
                    imp.failures.push(format!("latency round {round}: {e:#}"));
                }
            }
        }
    }
    print_summary(&impls, rate);
    Ok(())
}

/// Which implementation goes first in `round`: alternating.
fn order(n: usize, round: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        f64::midpoint(v[mid - 1], v[mid])
    }
}

/// Compiles `TxnBench.java` against Kafka's client jars into `work/classes`.
fn compile_client(dist: &KafkaDist, work: &Path) -> Result<PathBuf> {
    let source = workspace_root().join("bench/transactions/TxnBench.java");
    let classes = work.join("classes");
    std::fs::create_dir_all(&classes).context("classes folder")?;
    let javac = dist
        .java()
        .parent()
        .map(|bin| bin.join("javac"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("javac"));
    let out = run_binary(
        &javac,
        &[
            "-nowarn".to_owned(),
            "-d".to_owned(),
            classes.display().to_string(),
            "-cp".to_owned(),
            dist.classpath(),
            source.display().to_string(),
        ],
        None,
        Duration::from_secs(300),
    )
    .with_context(|| {
        format!(
            "{} (a JDK is needed: apt-get install openjdk-17-jdk-headless)",
            javac.display()
        )
    })?;
    out.ok().context("compiling TxnBench.java")?;
    Ok(classes)
}

/// Runs `TxnBench` with `args` and returns its `RESULT` line's `key=value` pairs.
fn run_client(
    dist: &KafkaDist,
    classes: &Path,
    args: &[String],
    log: Option<PathBuf>,
) -> Result<Vec<(String, f64)>> {
    // With a log to keep: timestamps, and the transaction manager's requests and retries.
    let log4j = match log.as_ref().and_then(|l| l.parent()) {
        Some(dir) => {
            let path = dir.join("client-log4j.properties");
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(&path, CLIENT_LOG4J)
                .with_context(|| format!("writing {}", path.display()))?;
            path
        }
        None => dist.home().join("testkit").join("tools-log4j.properties"),
    };
    let mut java_args: Vec<String> = client_jvm_flags().into_iter().map(str::to_owned).collect();
    java_args.push(format!("-Dlog4j.configuration=file:{}", log4j.display()));
    java_args.push("-cp".to_owned());
    java_args.push(format!("{}:{}", classes.display(), dist.classpath()));
    java_args.push(CLIENT_MAIN.to_owned());
    java_args.extend(args.iter().cloned());
    let out = run_binary(dist.java(), &java_args, None, PHASE_TIMEOUT)?;
    if let Some(log) = log {
        std::fs::write(&log, &out.stderr).with_context(|| format!("writing {}", log.display()))?;
    }
    let out: ToolOutput = out.ok().context("TxnBench")?;
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| format!("no RESULT line; stderr:\n{}", out.stderr))?;
    Ok(line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse::<f64>().ok()?)))
        .collect())
}

fn field(result: &[(String, f64)], key: &str) -> Result<f64> {
    result
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .with_context(|| format!("RESULT has no {key}"))
}

fn create_topics(dist: &KafkaDist, cluster: &Cluster, args: &Args, names: [&str; 2]) -> Result<()> {
    for topic in names {
        dist.create_topic(
            &cluster.bootstrap,
            topic,
            args.partitions,
            3,
            &[("min.insync.replicas", "2")],
        )
        .with_context(|| format!("creating {topic}"))?;
    }
    Ok(())
}

/// One `TxnBench <mode>` run on fresh topics `<prefix>-in-<round>` / `<prefix>-out-<round>`:
/// the arguments every mode takes, then `tail`.
fn run_phase(
    dist: &KafkaDist,
    classes: &Path,
    cluster: &Cluster,
    args: &Args,
    (name, mode, prefix, round): (&str, &str, &str, u32),
    tail: &[String],
) -> Result<Vec<(String, f64)>> {
    let (input, output) = (
        format!("{prefix}-in-{round}"),
        format!("{prefix}-out-{round}"),
    );
    create_topics(dist, cluster, args, [&input, &output])?;
    let mut client_args = vec![
        mode.to_owned(),
        cluster.bootstrap.clone(),
        input,
        output,
        args.copiers.to_string(),
        args.txn_records.to_string(),
        args.record_bytes.to_string(),
    ];
    client_args.extend_from_slice(tail);
    let log = args
        .client_log_dir
        .as_ref()
        .map(|dir| dir.join(format!("{name}-{mode}-{round}.log")));
    run_client(dist, classes, &client_args, log)
}

fn throughput_round(
    dist: &KafkaDist,
    classes: &Path,
    (name, cluster): (&str, &Cluster),
    args: &Args,
    round: u32,
) -> Result<Throughput> {
    let cpu_before = cpu_seconds(&cluster.pids);
    let result = run_phase(
        dist,
        classes,
        cluster,
        args,
        (name, "throughput", "tput", round),
        &[args.warmup_records.to_string(), args.records.to_string()],
    )?;
    // The whole run's CPU (input writes, warm-up and check included), per transaction of it.
    let cpu = cpu_seconds(&cluster.pids) - cpu_before;
    let wrong = field(&result, "not_exactly_once")?;
    if wrong != 0.0 {
        bail!("{wrong} input records not exactly once in the output");
    }
    let total_txns = (args.records + args.warmup_records) as f64 / f64::from(args.txn_records);
    Ok(Throughput {
        txn_s: field(&result, "txn_per_s")?,
        records_s: field(&result, "records_per_s")?,
        cpu_s_per_1k_txn: cpu / total_txns * 1000.0,
    })
}

fn latency_round(
    dist: &KafkaDist,
    classes: &Path,
    (name, cluster): (&str, &Cluster),
    args: &Args,
    round: u32,
    rate: u64,
) -> Result<Latency> {
    let result = run_phase(
        dist,
        classes,
        cluster,
        args,
        (name, "latency", "lat", round),
        &[
            rate.to_string(),
            args.warmup_seconds.to_string(),
            args.latency_seconds.to_string(),
        ],
    )?;
    let duplicates = field(&result, "duplicates")?;
    if duplicates != 0.0 {
        bail!("{duplicates} records delivered more than once (read_committed)");
    }
    Ok(Latency {
        p50_ms: field(&result, "p50_ms")?,
        p99_ms: field(&result, "p99_ms")?,
        p999_ms: field(&result, "p999_ms")?,
        delivered: field(&result, "delivered")? as u64,
        sent: field(&result, "sent")? as u64,
    })
}

fn print_summary(impls: &[Implementation], rate: u64) {
    println!();
    println!(
        "{:<6} {:>8} {:>11} {:>14} {:>9} {:>9} {:>10}   (medians; latency at {rate} records/s)",
        "", "txn/s", "records/s", "CPU s/1k txn", "p50 ms", "p99 ms", "p99.9 ms"
    );
    let mut medians = Vec::new();
    for imp in impls {
        let txn_s = median(imp.throughput.iter().map(|t| t.txn_s));
        let records_s = median(imp.throughput.iter().map(|t| t.records_s));
        let cpu = median(imp.throughput.iter().map(|t| t.cpu_s_per_1k_txn));
        let p50 = median(imp.latency.iter().map(|l| l.p50_ms));
        let p99 = median(imp.latency.iter().map(|l| l.p99_ms));
        let p999 = median(imp.latency.iter().map(|l| l.p999_ms));
        println!(
            "{:<6} {txn_s:>8.1} {records_s:>11.0} {cpu:>14.2} {p50:>9.1} {p99:>9.1} {p999:>10.1}",
            imp.name
        );
        medians.push((imp.name, records_s, p99));
        for failure in &imp.failures {
            println!("{}: {failure}", imp.name);
        }
    }
    if let [
        ("kafka", kafka_rs, kafka_p99),
        ("krust", krust_rs, krust_p99),
    ] = medians[..]
    {
        println!(
            "ratio krust/kafka: throughput {:.2} (goal >= 1.5), p99 {:.2} (goal <= 1); peer (Kafka) {kafka_rs:.0} records/s, p99 {kafka_p99:.1} ms",
            krust_rs / kafka_rs,
            krust_p99 / kafka_p99
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_and_medians_ignore_failures() {
        assert_eq!(order(2, 0), vec![0, 1]);
        assert_eq!(order(2, 1), vec![1, 0]);
        assert!((median([3.0, 1.0, 2.0].into_iter()) - 2.0).abs() < 1e-9);
        assert!((median([4.0, 1.0].into_iter()) - 2.5).abs() < 1e-9);
        assert!(median(std::iter::empty()).is_nan());
        assert!((median([f64::NAN, 5.0].into_iter()) - 5.0).abs() < 1e-9);
    }
}
