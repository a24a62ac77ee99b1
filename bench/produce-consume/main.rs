//! `produce-consume` (issue 5's broker benchmark): 3 brokers on loopback, a topic with 12
//! partitions and replication factor 3 (`min.insync.replicas=2`), 1 KiB records produced with
//! `acks=all` by Kafka 3.9's own `ProducerPerformance` and read back by its
//! `ConsumerPerformance`; krust and an all-Apache-Kafka-3.9 cluster in the same run, printed side
//! by side with ratios.
//!
//! Per implementation: (1) max producer throughput (`--throughput -1`), (2) latency percentiles
//! (p50/p99/p99.9 as ProducerPerformance reports them) at 50% of that rate, (3) consumer
//! throughput over everything produced, and CPU seconds per GB produced: user+system CPU of the
//! three broker processes (`/proc/<pid>/stat`) during phase (1), divided by the GB sent.
//! Both clusters are 3 combined (broker+controller) nodes with the same settings; Kafka's JVMs
//! run with `kafka-server-start.sh`'s settings (G1, C2, 1 GiB heap; `krust_bench::cluster`); the
//! client JVMs are the harness's (`-Xmx512m`, serial GC, C1), the same for both.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/produce-consume [--records 300000] [--skip-krust | --skip-kafka]
//! ```
//! Goal (issue 5): krust ≥ 1.5× Kafka's throughput and ≤ 0.5× its p99.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use krust_bench::cluster::{Cluster, cpu_seconds, start_kafka_cluster, start_krust_cluster};
use krust_bench::{cores, cpu_model, default_krust_binary, load_average};
use krust_testkit::{KafkaDist, ToolOutput, class};

/// `ConsumerPerformance`'s main class (`kafka-consumer-perf-test.sh`).
const CONSUMER_PERFORMANCE: &str = "org.apache.kafka.tools.ConsumerPerformance";
const TOPIC: &str = "produce-consume";

/// krust vs Apache Kafka 3.9: produce/consume throughput, latency and CPU per GB on 3 brokers.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Records in the max-throughput run (and read back by the consumer).
    #[arg(long, default_value_t = 300_000)]
    records: u64,
    /// Record size in bytes.
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 12)]
    partitions: u32,
    /// Seconds of the latency run at 50% of the max rate.
    #[arg(long, default_value_t = 20)]
    latency_seconds: u64,
    /// Only measure Kafka.
    #[arg(long)]
    skip_krust: bool,
    /// Only measure krust.
    #[arg(long)]
    skip_kafka: bool,
}

/// What one implementation measured.
#[derive(Debug, Default)]
struct Figures {
    max_mb_s: f64,
    max_records_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    latency_rate: f64,
    consume_mb_s: Option<f64>,
    cpu_s_per_gb: f64,
    notes: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dist = KafkaDist::locate().context("Kafka 3.9 jars (scripts/fetch-kafka.sh)")?;
    println!("produce-consume: krust vs Apache Kafka 3.9.1 on 3 brokers (loopback)");
    println!(
        "machine: {} ({} cores), load {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: {} records x {} B, {} partitions, RF=3, min.insync.replicas=2, acks=all; latency at 50% of max rate for {} s",
        args.records, args.record_size, args.partitions, args.latency_seconds
    );
    let mut results: Vec<(&str, Result<Figures>)> = Vec::new();
    if !args.skip_kafka {
        results.push((
            "kafka",
            start_kafka_cluster(&dist, &cluster_props()).and_then(|c| measure(&dist, &c, &args)),
        ));
    }
    if !args.skip_krust {
        let binary = args.krust.clone().unwrap_or_else(default_krust_binary);
        results.push((
            "krust",
            start_krust_cluster(&dist, &binary, &cluster_props())
                .and_then(|c| measure(&dist, &c, &args)),
        ));
    }
    print_table(&results);
    Ok(())
}

fn cluster_props() -> Vec<(&'static str, &'static str)> {
    vec![
        ("default.replication.factor", "3"),
        ("min.insync.replicas", "2"),
        ("offsets.topic.replication.factor", "3"),
        ("num.network.threads", "3"),
        ("num.io.threads", "8"),
        // The harness's quiet defaults turn this off; Kafka's default is on.
        ("auto.create.topics.enable", "true"),
    ]
}

fn producer_perf(
    dist: &KafkaDist,
    cluster: &Cluster,
    records: u64,
    record_size: usize,
    throughput: f64,
) -> Result<ToolOutput> {
    let throughput = if throughput < 0.0 {
        "-1".to_owned()
    } else {
        format!("{}", throughput as u64)
    };
    let out = dist
        .tool(class::PRODUCER_PERFORMANCE)
        .args([
            "--topic".to_owned(),
            TOPIC.to_owned(),
            "--num-records".to_owned(),
            records.to_string(),
            "--record-size".to_owned(),
            record_size.to_string(),
            "--throughput".to_owned(),
            throughput,
            "--producer-props".to_owned(),
            format!("bootstrap.servers={}", cluster.bootstrap),
            "acks=all".to_owned(),
        ])
        .timeout(Duration::from_secs(900))
        .run()?;
    out.ok().context("ProducerPerformance")
}

/// The final summary line of ProducerPerformance: `N records sent, R records/sec (M MB/sec),
/// A ms avg latency, X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.`
fn parse_summary(out: &ToolOutput) -> Result<[f64; 9]> {
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains(" records sent, ") && l.contains("99.9th"))
        .with_context(|| format!("no ProducerPerformance summary in:\n{}", out.stdout))?;
    let numbers: Vec<f64> = line
        .split([' ', '(', ','])
        .filter_map(|t| t.parse::<f64>().ok())
        .collect();
    // 99.9th parses as a number too ("99.9th" does not, "99.9" would): keep the first nine.
    let Ok(first) = <[f64; 9]>::try_from(&numbers[..9.min(numbers.len())]) else {
        bail!("unexpected ProducerPerformance summary: {line}");
    };
    Ok(first)
}

fn measure(dist: &KafkaDist, cluster: &Cluster, args: &Args) -> Result<Figures> {
    let mut figures = Figures::default();
    dist.create_topic(
        &cluster.bootstrap,
        TOPIC,
        args.partitions,
        3,
        &[("min.insync.replicas", "2")],
    )
    .context("creating the topic")?;
    // Warm-up (JIT of the brokers, connections, leaders known): 10% of the records.
    producer_perf(
        dist,
        cluster,
        (args.records / 10).max(1000),
        args.record_size,
        -1.0,
    )
    .context("warm-up")?;

    let cpu_before = cpu_seconds(&cluster.pids);
    let max = producer_perf(dist, cluster, args.records, args.record_size, -1.0)?;
    let cpu = cpu_seconds(&cluster.pids) - cpu_before;
    let [sent, records_s, mb_s, ..] = parse_summary(&max)?;
    figures.max_records_s = records_s;
    figures.max_mb_s = mb_s;
    let gb = sent * args.record_size as f64 / 1e9;
    figures.cpu_s_per_gb = if gb > 0.0 { cpu / gb } else { f64::NAN };

    let rate = (records_s / 2.0).max(1.0);
    figures.latency_rate = rate;
    let latency_records = (rate * args.latency_seconds as f64) as u64;
    let paced = producer_perf(
        dist,
        cluster,
        latency_records.max(1000),
        args.record_size,
        rate,
    )?;
    let [.., p50, _p95, p99, p999] = parse_summary(&paced)?;
    figures.p50_ms = p50;
    figures.p99_ms = p99;
    figures.p999_ms = p999;

    // Everything produced so far, read back by one consumer (ConsumerPerformance subscribes,
    // so this needs the group coordinator).
    let total = args.records + (args.records / 10).max(1000) + latency_records.max(1000);
    let consumed = dist
        .tool(CONSUMER_PERFORMANCE)
        .args([
            "--bootstrap-server".to_owned(),
            cluster.bootstrap.clone(),
            "--topic".to_owned(),
            TOPIC.to_owned(),
            "--messages".to_owned(),
            total.to_string(),
            "--timeout".to_owned(),
            "60000".to_owned(),
        ])
        .timeout(Duration::from_secs(900))
        .run();
    match consumed
        .map_err(anyhow::Error::from)
        .and_then(|o| o.ok().map_err(Into::into))
    {
        Ok(out) => match parse_consumer(&out.stdout) {
            Some(mb_s) => figures.consume_mb_s = Some(mb_s),
            None => figures.notes.push(format!(
                "ConsumerPerformance printed no figures:\n{}",
                out.stdout
            )),
        },
        Err(e) => figures
            .notes
            .push(format!("ConsumerPerformance failed: {e:#}")),
    }
    Ok(figures)
}

/// ConsumerPerformance's data line: `start.time, end.time, data.consumed.in.MB, MB.sec, …`.
fn parse_consumer(stdout: &str) -> Option<f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.split(',').count() >= 6 && !l.contains("start.time"))?;
    line.split(',').nth(3)?.trim().parse().ok()
}

fn print_table(results: &[(&str, Result<Figures>)]) {
    println!();
    println!(
        "{:<6} {:>10} {:>12} {:>14} {:>9} {:>9} {:>9} {:>12} {:>10}",
        "",
        "max MB/s",
        "records/s",
        "at 50%: rec/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "consume MB/s",
        "CPU s/GB"
    );
    for (name, result) in results {
        match result {
            Ok(f) => println!(
                "{:<6} {:>10.1} {:>12.0} {:>14.0} {:>9.1} {:>9.1} {:>9.1} {:>12} {:>10.1}",
                name,
                f.max_mb_s,
                f.max_records_s,
                f.latency_rate,
                f.p50_ms,
                f.p99_ms,
                f.p999_ms,
                f.consume_mb_s
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}")),
                f.cpu_s_per_gb
            ),
            Err(e) => println!("{name:<6} failed: {e:#}"),
        }
    }
    for (name, result) in results {
        if let Ok(f) = result {
            for note in &f.notes {
                println!("{name}: {note}");
            }
        }
    }
    if let [(_, Ok(kafka)), (_, Ok(krust))] = results {
        println!(
            "ratio krust/kafka: throughput {:.2} (goal >= 1.5), p99 {:.2} (goal <= 0.5), CPU s/GB {:.2}",
            krust.max_mb_s / kafka.max_mb_s,
            krust.p99_ms / kafka.p99_ms,
            krust.cpu_s_per_gb / kafka.cpu_s_per_gb
        );
    }
}
