//! `produce-roll` (issue 10, part 5: blocking file IO off the async workers): produce latency
//! across forced segment rolls. One `krust dev` node, two single-partition topics written the
//! same way — `produce-roll-small` with a small `segment.bytes` (it rolls every few requests)
//! and `produce-roll-big` with Kafka's default 1 GiB (it never rolls in the run) — and the p99
//! of the produce round trip on each, in alternating rounds, each after a warm-up.
//!
//! A roll used to fsync the sealed segment on the produce path under the partition lock; it now
//! leaves the fsync to a background flush (as Kafka's `UnifiedLog.roll` does), so the p99 with
//! rolls should stay close to the p99 without.
//!
//! The load is closed-loop: one Produce v9 request in flight on one connection (acks=1), each
//! with one uncompressed batch of `--records-per-request` records of `--record-bytes` bytes, so
//! every request is a sample and a roll lands in `request bytes / segment.bytes` of them.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/produce-roll [--small-segment-bytes 256K --requests 3000 --warmup 500 --rounds 3]
//! ```
//! Goal (issue 10): p99 with rolls ≤ 2 × p99 without.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use clap::Parser;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_bench::{
    cores, cpu_model, default_krust_binary, filesystem_of, load_average, ms, parse_size, percentile,
};
use krust_log::RecordBatchBuilder;
use krust_net::{ClientConfig, Connection};
use krust_testkit::{KrustProcess, free_port};

const SMALL_TOPIC: &str = "produce-roll-small";
const BIG_TOPIC: &str = "produce-roll-big";
/// Kafka's default `segment.bytes`.
const BIG_SEGMENT_BYTES: u64 = 1 << 30;
/// Produce v9 (flexible, what Kafka 3.x clients send).
const PRODUCE_VERSION: i16 = 9;

/// Produce p99 with frequent segment rolls vs without, on one krust node.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// `segment.bytes` of the rolling topic (binary units: 256K, 1M).
    #[arg(long, default_value = "256K")]
    small_segment_bytes: String,
    /// Records per Produce request (one batch).
    #[arg(long, default_value_t = 16)]
    records_per_request: usize,
    /// Value bytes per record.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Measured requests per round.
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// Requests sent before each round's measurement (not measured).
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Rounds per topic, alternating small, big, small, …
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Parent of the temporary data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.rounds < 1 || args.requests == 0 || args.records_per_request == 0 {
        bail!("--rounds, --requests and --records-per-request must be positive");
    }
    let small_segment_bytes = parse_size(&args.small_segment_bytes).map_err(anyhow::Error::msg)?;
    let binary = args.krust.clone().unwrap_or_else(default_krust_binary);
    if !binary.is_file() {
        bail!(
            "{} does not exist (cargo build --release -p krust)",
            binary.display()
        );
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let data = tempfile::Builder::new()
        .prefix("produce-roll-")
        .tempdir_in(&parent)
        .context("temp dir")?;
    let (mount, fstype, device) = filesystem_of(data.path());
    let batch = batch_bytes(args.records_per_request, args.record_bytes);
    println!("produce-roll: krust produce latency across segment rolls (issue 10, part 5)");
    println!(
        "machine: {} ({} cores), load {}, data on {mount} ({fstype}, {device})",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: krust dev (1 node), 1 partition per topic, acks=1, 1 request in flight, \
         {} records x {} B per request ({} B batch), {} warm-up + {} measured requests per round, \
         {} rounds per topic alternating; segment.bytes {} (rolls every ~{:.1} requests) vs {} (no roll)",
        args.records_per_request,
        args.record_bytes,
        batch.len(),
        args.warmup,
        args.requests,
        args.rounds,
        small_segment_bytes,
        small_segment_bytes as f64 / batch.len() as f64,
        BIG_SEGMENT_BYTES
    );
    println!("binary: {}", binary.display());

    let port = free_port().context("port")?;
    let data_dir = data.path().join("krust-data");
    let mut process = KrustProcess::builder(&binary)
        .name("krust-dev")
        .args([
            "dev".to_owned(),
            "--data-dir".to_owned(),
            data_dir.to_string_lossy().into_owned(),
            "--port".to_owned(),
            port.to_string(),
        ])
        .env("RUST_LOG", "warn")
        .start()
        .context("starting krust dev")?;
    let wait = Duration::from_secs(60);
    process
        .wait_for_line("ready", wait)
        .context("krust dev ready")?;
    process
        .wait_for_port(port, wait)
        .context("krust dev port")?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let result = runtime.block_on(run(&args, port, small_segment_bytes, &batch, &data_dir));
    let _ = process.kill();
    result
}

async fn run(
    args: &Args,
    port: u16,
    small_segment_bytes: u64,
    batch: &Bytes,
    data_dir: &Path,
) -> Result<()> {
    let config = ClientConfig {
        client_id: "produce-roll".to_owned(),
        request_timeout: Duration::from_secs(30),
        ..ClientConfig::default()
    };
    let conn = Connection::connect(&format!("127.0.0.1:{port}"), config)
        .await
        .context("connect")?;
    create_topic(&conn, SMALL_TOPIC, small_segment_bytes).await?;
    create_topic(&conn, BIG_TOPIC, BIG_SEGMENT_BYTES).await?;

    let mut small: Vec<Duration> = Vec::new();
    let mut big: Vec<Duration> = Vec::new();
    let mut small_p99s = Vec::new();
    let mut big_p99s = Vec::new();
    for round in 0..args.rounds {
        for (topic, pooled, p99s) in [
            (SMALL_TOPIC, &mut small, &mut small_p99s),
            (BIG_TOPIC, &mut big, &mut big_p99s),
        ] {
            let mut samples = produce_round(&conn, topic, batch, args.warmup, args.requests)
                .await
                .with_context(|| format!("round {round} on {topic}"))?;
            samples.sort_unstable();
            let p50 = percentile(&samples, 0.5);
            let p99 = percentile(&samples, 0.99);
            let max = samples.last().copied().unwrap_or_default();
            println!(
                "  round {round} {topic:<20} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>8.3} ms  (load {})",
                ms(p50),
                ms(p99),
                ms(max),
                load_average()
            );
            p99s.push(p99);
            pooled.extend(samples);
        }
    }
    small.sort_unstable();
    big.sort_unstable();
    let segments = count_segments(data_dir, &format!("{SMALL_TOPIC}-0"));
    println!(
        "segments of {SMALL_TOPIC}-0 at the end: {} (rolls during the run, warm-ups included)",
        segments.map_or_else(|| "?".to_owned(), |n| n.to_string())
    );
    println!();
    println!("| topic | segment.bytes | p50 ms | p99 ms | p99.9 ms | p99 per round (ms) |");
    println!("|---|---|---|---|---|---|");
    for (topic, bytes, samples, p99s) in [
        (SMALL_TOPIC, small_segment_bytes, &small, &small_p99s),
        (BIG_TOPIC, BIG_SEGMENT_BYTES, &big, &big_p99s),
    ] {
        let rounds: Vec<String> = p99s.iter().map(|d| format!("{:.3}", ms(*d))).collect();
        println!(
            "| {topic} | {bytes} | {:.3} | {:.3} | {:.3} | {} |",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99)),
            ms(percentile(samples, 0.999)),
            rounds.join(", ")
        );
    }
    let with_rolls = ms(percentile(&small, 0.99));
    let without = ms(percentile(&big, 0.99));
    println!();
    println!(
        "p99 with rolls {with_rolls:.3} ms / p99 without {without:.3} ms = {:.2} (goal <= 2), load {}",
        with_rolls / without.max(f64::MIN_POSITIVE),
        load_average()
    );
    Ok(())
}

/// One uncompressed batch of `records` records with `record_bytes`-byte values (offsets are
/// assigned by the leader, so the same bytes serve every request).
fn batch_bytes(records: usize, record_bytes: usize) -> Bytes {
    let mut builder = RecordBatchBuilder::new(0);
    for i in 0..records {
        builder.append_kv(
            1_700_000_000_000 + i as i64,
            Some(Bytes::from(format!("key-{i}"))),
            Some(Bytes::from(vec![b'x'; record_bytes])),
        );
    }
    builder.build().as_bytes().clone()
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

async fn create_topic(conn: &Connection, topic: &str, segment_bytes: u64) -> Result<()> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic_name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(vec![
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_static_str("segment.bytes"))
                        .with_value(Some(StrBytes::from_string(segment_bytes.to_string()))),
                ]),
        ]);
    match conn.send(request, 7).await.context("CreateTopics")? {
        ResponseKind::CreateTopics(r) => {
            let code = r.topics.first().map_or(-1, |t| t.error_code);
            if code != 0 {
                bail!("creating {topic}: error {code} {r:?}");
            }
            Ok(())
        }
        other => bail!("CreateTopics answered {other:?}"),
    }
}

/// `warmup` unmeasured then `requests` measured Produce round trips to partition 0 of `topic`.
/// A retriable error (the partition's leader not ready yet) is retried during the warm-up only.
async fn produce_round(
    conn: &Connection,
    topic: &str,
    batch: &Bytes,
    warmup: usize,
    requests: usize,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(requests);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut warm = 0;
    while warm < warmup.max(1) {
        match produce_once(conn, topic, batch).await? {
            0 => warm += 1,
            // The partition's leader is not ready yet: retry.
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            code => bail!("{topic}: produce error {code} during warm-up"),
        }
    }
    for _ in 0..requests {
        let start = Instant::now();
        let code = produce_once(conn, topic, batch).await?;
        let elapsed = start.elapsed();
        if code != 0 {
            bail!("{topic}: produce error {code}");
        }
        samples.push(elapsed);
    }
    Ok(samples)
}

/// One acks=1 Produce v9 of `batch`; the partition's error code.
async fn produce_once(conn: &Connection, topic: &str, batch: &Bytes) -> Result<i16> {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    match conn
        .send(request, PRODUCE_VERSION)
        .await
        .context("Produce")?
    {
        ResponseKind::Produce(r) => Ok(r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .map_or(-1, |p| p.error_code)),
        other => bail!("Produce answered {other:?}"),
    }
}

/// `.log` files in the partition directory named `partition_dir` anywhere under `root`.
fn count_segments(root: &Path, partition_dir: &str) -> Option<usize> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name().to_string_lossy() == partition_dir {
                let logs = std::fs::read_dir(&path)
                    .ok()?
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                    .count();
                return Some(logs);
            }
            stack.push(path);
        }
    }
    None
}
