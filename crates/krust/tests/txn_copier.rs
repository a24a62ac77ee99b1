//! Kafka's own exactly-once check (issue 13 acceptance): `org.apache.kafka.tools.
//! TransactionalMessageCopier` from Kafka 3.9's tools jar copies a topic of numbered records
//! inside transactions (100 records each, a third aborted at random, the consumer's offsets
//! sent to each transaction) while the test SIGKILLs, in turn, the copier's transaction
//! coordinator and the leader of the output partition, and starts each again (5 rounds, each
//! while the copier is still copying). Then Kafka's console consumer with
//! `isolation.level=read_committed` must see every input record exactly once in the output
//! topic. The same run goes against 3 combined krust nodes (in CI) and 3 combined Apache Kafka
//! 3.9 nodes (the oracle, on demand: `cargo test -p krust --test txn_copier -- --ignored`; it
//! takes 150 s of CI's hour). Both passed on 2026-12-02: krust in 68 s, Kafka in 148 s.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest, ResponseKind, TopicName};
use krust_net::{Client, ClientConfig};
use krust_testkit::{BrokerUnderTest, KafkaDist, class};

const COPIER: &str = "org.apache.kafka.tools.TransactionalMessageCopier";
const VERIFIABLE_PRODUCER: &str = "org.apache.kafka.tools.VerifiableProducer";
const INPUT: &str = "copier-in";
const OUTPUT: &str = "copier-out";
const TRANSACTIONAL_ID: &str = "copier-1";
const RECORDS: usize = 30_000;
const ROUNDS: usize = 5;
const COPY_TIMEOUT: Duration = Duration::from_secs(300);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// The leader of `OUTPUT`-0 and the coordinator of `TRANSACTIONAL_ID`, as the cluster names
/// them now (`None` while it cannot say).
fn victims(bootstrap: &str) -> (Option<i32>, Option<i32>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for address in bootstrap.split(',') {
            let client = Client::new(
                address.to_string(),
                ClientConfig {
                    client_id: "txn-copier-test".to_owned(),
                    request_timeout: Duration::from_secs(5),
                    ..ClientConfig::default()
                },
            );
            let metadata = MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(OUTPUT.into()))),
            ]));
            let leader = match client.send(metadata, 12).await {
                Ok(ResponseKind::Metadata(r)) => r
                    .topics
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.leader_id.0)
                    .filter(|&l| l >= 0),
                _ => continue,
            };
            let find = FindCoordinatorRequest::default()
                .with_key(TRANSACTIONAL_ID.into())
                .with_key_type(1);
            let coordinator = match client.send(find, 3).await {
                Ok(ResponseKind::FindCoordinator(r)) if r.error_code == 0 => Some(r.node_id.0),
                _ => None,
            };
            return (leader, coordinator);
        }
        (None, None)
    })
}

/// One whole run against `broker`; returns the output values read back read_committed.
fn copy_under_kills(dist: &KafkaDist, broker: &mut BrokerUnderTest) -> Vec<String> {
    let bootstrap = broker.bootstrap();
    for topic in [INPUT, OUTPUT] {
        let out = dist
            .run_tool(
                class::TOPIC_COMMAND,
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--create",
                    "--topic",
                    topic,
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "3",
                ],
                TOOL_TIMEOUT,
            )
            .expect("kafka-topics --create");
        assert!(out.success(), "{} create {topic}: {out:?}", broker.kind());
    }
    let records = RECORDS.to_string();
    let produced = dist
        .run_tool(
            VERIFIABLE_PRODUCER,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                INPUT,
                "--max-messages",
                &records,
                "--acks",
                "-1",
            ],
            TOOL_TIMEOUT,
        )
        .expect("VerifiableProducer");
    let acked = produced.stdout.matches("\"producer_send_success\"").count();
    assert_eq!(
        acked,
        RECORDS,
        "{}: input written: {produced:?}",
        broker.kind()
    );
    let copier = {
        let dist = dist.clone();
        let bootstrap = bootstrap.clone();
        std::thread::spawn(move || {
            dist.run_tool(
                COPIER,
                &[
                    "--broker-list",
                    &bootstrap,
                    "--transactional-id",
                    TRANSACTIONAL_ID,
                    "--consumer-group",
                    "copier-group",
                    "--input-topic",
                    INPUT,
                    "--input-partition",
                    "0",
                    "--output-topic",
                    OUTPUT,
                    "--max-messages",
                    &RECORDS.to_string(),
                    "--transaction-size",
                    "100",
                    "--transaction-timeout",
                    "30000",
                    "--enable-random-aborts",
                ],
                COPY_TIMEOUT,
            )
        })
    };
    let mut killed = Vec::new();
    for round in 0..ROUNDS {
        std::thread::sleep(Duration::from_millis(200));
        if copier.is_finished() {
            break;
        }
        let (leader, coordinator) = victims(&bootstrap);
        let wanted = if round % 2 == 0 { coordinator } else { leader };
        let victim = wanted
            .or(coordinator)
            .or(leader)
            .unwrap_or(i32::try_from(round % 3).unwrap_or(0) + 1);
        broker
            .kill_and_restart(victim)
            .unwrap_or_else(|e| panic!("{}: kill and restart node {victim}: {e}", broker.kind()));
        killed.push(victim);
    }
    let copied = copier
        .join()
        .expect("copier thread")
        .unwrap_or_else(|e| panic!("{}: TransactionalMessageCopier: {e}", broker.kind()));
    let tail = |s: &str| s[s.len().saturating_sub(3000)..].to_string();
    assert!(
        copied.success(),
        "{}: TransactionalMessageCopier exited with {}\nstdout (tail):\n{}\nstderr (tail):\n{}\n{}",
        broker.kind(),
        copied.status,
        tail(&copied.stdout),
        tail(&copied.stderr),
        broker.log_tail(40)
    );
    assert_eq!(
        killed.len(),
        ROUNDS,
        "{}: the copier finished after {} kill rounds ({killed:?}); every round must hit it while \
         it copies",
        broker.kind(),
        killed.len()
    );
    eprintln!(
        "{}: SIGKILLed and restarted nodes {killed:?} while copying",
        broker.kind()
    );
    let consumed = dist
        .run_tool(
            class::CONSOLE_CONSUMER,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                OUTPUT,
                "--from-beginning",
                "--isolation-level",
                "read_committed",
                "--max-messages",
                &records,
                "--timeout-ms",
                "60000",
            ],
            TOOL_TIMEOUT,
        )
        .expect("kafka-console-consumer");
    consumed.stdout.lines().map(str::to_owned).collect()
}

/// Values that are not exactly one of each `0..RECORDS`: (value, times seen).
fn not_exactly_once(values: &[String]) -> Vec<(String, usize)> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *seen.entry(v.clone()).or_default() += 1;
    }
    let mut wrong: Vec<(String, usize)> = (0..RECORDS)
        .map(|i| i.to_string())
        .filter(|v| seen.get(v) != Some(&1))
        .map(|v| {
            let n = seen.get(&v).copied().unwrap_or(0);
            (v, n)
        })
        .collect();
    wrong.extend(
        seen.into_iter()
            .filter(|(v, _)| v.parse::<usize>().map_or(true, |n| n >= RECORDS)),
    );
    wrong
}

fn check(dist: &KafkaDist, mut broker: BrokerUnderTest) {
    let started = Instant::now();
    let values = copy_under_kills(dist, &mut broker);
    let wrong = not_exactly_once(&values);
    eprintln!(
        "{}: {} records read back, {} not exactly once ({:.0?})",
        broker.kind(),
        values.len(),
        wrong.len(),
        started.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "{}: not exactly once: {:?}\n{}",
        broker.kind(),
        &wrong[..wrong.len().min(20)],
        broker.log_tail(40)
    );
}

#[test]
#[ignore = "oracle run against 3 Apache Kafka 3.9 nodes (150 s on 2 cores); on demand with `-- --ignored`, kept out of CI for its time"]
fn transactional_message_copier_is_exactly_once_across_kills_on_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::kafka_cluster(&dist, &[]).expect("Kafka 3.9 cluster"),
    );
}

#[test]
fn transactional_message_copier_is_exactly_once_across_kills_on_krust() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::krust_cluster(&dist, env!("CARGO_BIN_EXE_krust"), &[])
            .expect("krust cluster"),
    );
}
