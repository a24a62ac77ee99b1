//! Stock clients against the in-process broker (see `server_common`): kcat (librdkafka) and
//! Kafka 3.9's own tools — console producer (idempotent, acks=all) and consumer (assigned
//! partition, no group), `kafka-get-offsets`, `kafka-configs --describe`, `kafka-log-dirs`,
//! `kafka-delete-records`.
//! The tools are blocking processes with their own timeouts, run off the async workers.

mod server_common;

use std::time::Duration;

use krust_testkit::{KafkaDist, Kcat, class};
use server_common::*;

const TOOL_TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_produces_and_consumes() {
    bounded(async {
        let Some(kcat) = Kcat::locate().expect("kcat") else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let addr = b.addr();
        let out = tokio::task::spawn_blocking(move || {
            let list = kcat
                .run(&addr, &["-L"], None, TOOL_TIMEOUT)
                .expect("kcat -L");
            let produce = kcat
                .run(
                    &addr,
                    &["-P", "-t", "orders", "-p", "0"],
                    Some(b"one\ntwo\nthree\n"),
                    TOOL_TIMEOUT,
                )
                .expect("kcat -P");
            let consume = kcat
                .run(
                    &addr,
                    &["-C", "-t", "orders", "-p", "0", "-o", "beginning", "-e"],
                    None,
                    TOOL_TIMEOUT,
                )
                .expect("kcat -C");
            (list, produce, consume)
        })
        .await
        .expect("join");
        let (list, produce, consume) = out;
        let list = list.ok().expect("kcat -L succeeds");
        assert!(
            list.stdout.contains("topic \"orders\" with 2 partitions"),
            "{}",
            list.stdout
        );
        produce.ok().expect("kcat -P succeeds");
        let consume = consume.ok().expect("kcat -C succeeds");
        let lines: Vec<&str> = consume.stdout.lines().collect();
        assert_eq!(lines, vec!["one", "two", "three"], "{}", consume.stderr);
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_tools_produce_consume_and_describe() {
    bounded(async {
        let dist = KafkaDist::locate().expect("Kafka 3.9 distribution");
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let addr = b.addr();
        let addr_for_tools = addr.clone();
        let run = move |class: &str, args: &[&str]| {
            let mut all = vec!["--bootstrap-server", addr_for_tools.as_str()];
            all.extend_from_slice(args);
            dist.tool(class)
                .args(all)
                .timeout(TOOL_TIMEOUT)
                .run()
                .expect("tool runs")
                .ok()
                .expect("tool succeeds")
        };
        let dist_for_produce = KafkaDist::locate().expect("Kafka 3.9 distribution");
        let produce_addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            let input: String = (0..50).map(|i| format!("record-{i}\n")).collect();
            dist_for_produce
                .console_produce(
                    &produce_addr,
                    "orders",
                    &input,
                    &[],
                    &[("enable.idempotence", "true")],
                )
                .expect("console producer")
        })
        .await
        .expect("join");
        let (offsets, consume, configs, log_dirs) = tokio::task::spawn_blocking(move || {
            let offsets = run(class::GET_OFFSET_SHELL, &["--topic", "orders"]);
            // `orders:<partition>:<end offset>` per partition.
            let ends: Vec<(String, i64)> = offsets
                .stdout
                .lines()
                .filter_map(|l| {
                    let (p, end) = l.strip_prefix("orders:")?.split_once(':')?;
                    Some((p.to_string(), end.trim().parse().ok()?))
                })
                .collect();
            let (partition, count) = ends
                .iter()
                .max_by_key(|(_, end)| *end)
                .cloned()
                .expect("partition ends");
            let count = count.to_string();
            let consume = run(
                class::CONSOLE_CONSUMER,
                &[
                    "--topic",
                    "orders",
                    "--partition",
                    &partition,
                    "--offset",
                    "earliest",
                    "--max-messages",
                    &count,
                    "--timeout-ms",
                    "60000",
                ],
            );
            let configs = run(
                "kafka.admin.ConfigCommand",
                &[
                    "--describe",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    "orders",
                ],
            );
            let log_dirs = run(
                "org.apache.kafka.tools.LogDirsCommand",
                &["--describe", "--broker-list", "1", "--topic-list", "orders"],
            );
            // kafka-delete-records on the fullest partition, then its earliest offset.
            let json = tempfile::NamedTempFile::new().expect("json file");
            std::fs::write(
                json.path(),
                format!(
                    r#"{{"version":1,"partitions":[{{"topic":"orders","partition":{partition},"offset":1}}]}}"#
                ),
            )
            .expect("write json");
            let json_path = json.path().display().to_string();
            let deleted = run(
                "org.apache.kafka.tools.DeleteRecordsCommand",
                &["--offset-json-file", &json_path],
            );
            assert!(
                deleted.stdout.contains("low_watermark: 1"),
                "{}",
                deleted.stdout
            );
            let earliest = run(
                class::GET_OFFSET_SHELL,
                &["--topic", "orders", "--partitions", &partition, "--time", "-2"],
            );
            assert_eq!(
                earliest.stdout.trim(),
                format!("orders:{partition}:1"),
                "{}",
                earliest.stderr
            );
            ((ends, count), consume, configs, log_dirs)
        })
        .await
        .expect("join");
        let ((ends, count), consume, configs, log_dirs) = (offsets, consume, configs, log_dirs);
        let total: i64 = ends.iter().map(|(_, end)| end).sum();
        assert_eq!(total, 50, "{ends:?}");
        let consumed: Vec<&str> = consume.stdout.lines().collect();
        assert_eq!(consumed.len().to_string(), count, "{}", consume.stderr);
        assert!(
            consumed.iter().all(|l| l.starts_with("record-")),
            "{consumed:?}"
        );
        assert!(
            configs.stdout.contains("retention.ms=86400000"),
            "{}",
            configs.stdout
        );
        assert!(
            log_dirs.stdout.contains("\"partition\":\"orders-"),
            "{}",
            log_dirs.stdout
        );
        b.stop().await;
    })
    .await;
}

/// confluent-kafka: an idempotent producer per compression codec, then a consumer assigned to
/// partition 0 reads everything back; kafka-python produces and consumes on partition 1.
const PYTHON_SCRIPT: &str = r#"
import sys
from confluent_kafka import Producer, Consumer, TopicPartition
import kafka

bootstrap, topic = sys.argv[1], sys.argv[2]
expected = []
for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "compression.type": codec, "linger.ms": 5})
    errors = []
    for i in range(20):
        value = f"{codec}-{i}".encode()
        expected.append(value)
        p.produce(topic, value=value, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    if p.flush(30) != 0 or errors:
        sys.exit(f"{codec}: delivery failed: {errors}")

# kafka-python has no snappy here: it writes and reads partition 1 alone.
kp = kafka.KafkaProducer(bootstrap_servers=bootstrap)
mine = []
for i in range(10):
    value = f"kafka-python-{i}".encode()
    mine.append(value)
    kp.send(topic, value=value, partition=1).get(timeout=30)
kp.close()

c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
c.assign([TopicPartition(topic, 0, 0)])
got = []
while len(got) < len(expected):
    msg = c.poll(30)
    if msg is None:
        sys.exit(f"confluent consumer timed out after {len(got)} records")
    if msg.error():
        sys.exit(f"consumer error: {msg.error()}")
    got.append(msg.value())
c.close()
if got != expected:
    sys.exit(f"confluent consumer read {got[:5]}... expected {expected[:5]}...")

kc = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         consumer_timeout_ms=30000)
tp = kafka.TopicPartition(topic, 1)
kc.assign([tp])
kc.seek_to_beginning(tp)
got = [m.value for _, m in zip(range(len(mine)), kc)]
kc.close()
if got != mine:
    sys.exit(f"kafka-python consumer read {got}, expected {mine}")
print("ok", len(expected) + len(mine))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_with_every_codec_and_idempotence() {
    bounded(async {
        let Some(python) = krust_testkit::PythonClients::locate().expect("python clients") else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let addr = b.addr();
        let out = tokio::task::spawn_blocking(move || {
            python
                .run_script(PYTHON_SCRIPT, &[&addr, "orders"], TOOL_TIMEOUT)
                .expect("python runs")
        })
        .await
        .expect("join");
        assert!(
            out.status.success(),
            "stdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        assert_eq!(out.stdout.trim(), "ok 110");
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_performance_gets_every_record_acknowledged() {
    bounded(async {
        let dist = KafkaDist::locate().expect("Kafka 3.9 distribution");
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let addr = b.addr();
        let summary = tokio::task::spawn_blocking(move || {
            dist.producer_perf(&addr, "orders", 100_000, 1024, &[("linger.ms", "5")])
                .expect("ProducerPerformance")
        })
        .await
        .expect("join");
        eprintln!(
            "{}",
            summary.output.stdout.lines().last().unwrap_or_default()
        );
        assert_eq!(summary.records_sent, 100_000);
        let ends = list_offset(&b.client, "orders", -1).await.1;
        let ends_1 = {
            let r = fetch(&b.client, fetch_request_partition("orders", 1), 12).await;
            r.responses[0].partitions[0].high_watermark
        };
        assert_eq!(ends + ends_1, 100_000);
        b.stop().await;
    })
    .await;
}

fn fetch_request_partition(topic: &str, partition: i32) -> kafka_protocol::messages::FetchRequest {
    let mut r = fetch_request(topic, 0, 0);
    r.topics[0].partitions[0].partition = partition;
    r.topics[0].partitions[0].partition_max_bytes = 1;
    r
}
