//! DescribeTopicPartitions (KIP-966) parity with Apache Kafka 3.9: one combined Kafka 3.9 node
//! and `krust dev` get the same topics, then the same DescribeTopicPartitions requests — every
//! topic, paged with small partition limits by following each answer's cursor; named topics
//! with an unknown and an invalid name; a cursor outside the named topics; a negative cursor
//! partition; a zero limit — and must answer the same (topic ids masked to "set"/"nil").
//! Kafka's own `kafka-topics --describe` (which uses this API in 3.9) then prints the same on
//! both.
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1.

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Client, ClientConfig};
use krust_testkit::{BrokerUnderTest, KafkaDist, class};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// Topics both nodes get: (name, partitions).
const TOPICS: &[(&str, i32)] = &[("alpha", 5), ("beta", 1), ("gamma", 3), ("delta", 4)];

fn name(v: &str) -> TopicName {
    TopicName(StrBytes::from_string(v.to_owned()))
}

fn request(
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| TopicRequest::default().with_name(name(t)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| {
            Cursor::default()
                .with_topic_name(name(t))
                .with_partition_index(p)
        }))
}

/// The response as comparable lines (topic ids masked).
fn lines(r: &DescribeTopicPartitionsResponse) -> Vec<String> {
    let mut out = Vec::new();
    for t in &r.topics {
        out.push(format!(
            "topic {:?} error {} internal {} id {} ops {}",
            t.name.as_ref().map(|n| n.0.to_string()),
            t.error_code,
            t.is_internal,
            if t.topic_id.is_nil() { "nil" } else { "set" },
            t.topic_authorized_operations
        ));
        for p in &t.partitions {
            out.push(format!(
                "  partition {} error {} leader {} epoch {} replicas {:?} isr {:?} elr {:?} last_elr {:?} offline {:?}",
                p.partition_index,
                p.error_code,
                p.leader_id.0,
                p.leader_epoch,
                p.replica_nodes.iter().map(|b| b.0).collect::<Vec<_>>(),
                p.isr_nodes.iter().map(|b| b.0).collect::<Vec<_>>(),
                p.eligible_leader_replicas.as_ref().map(|v| v.iter().map(|b| b.0).collect::<Vec<_>>()),
                p.last_known_elr.as_ref().map(|v| v.iter().map(|b| b.0).collect::<Vec<_>>()),
                p.offline_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            ));
        }
    }
    out.push(format!(
        "next cursor {:?}",
        r.next_cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index))
    ));
    out
}

async fn describe(
    client: &Client,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    match client.send(request, 0).await {
        Ok(ResponseKind::DescribeTopicPartitions(r)) => r,
        other => panic!("DescribeTopicPartitions to {}: {other:?}", client.addr()),
    }
}

/// Every answer, labelled, from one node.
async fn run(bootstrap: &str) -> Vec<(String, Vec<String>)> {
    let client = Client::new(
        bootstrap,
        ClientConfig {
            client_id: "describe-topic-partitions-vs-kafka".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let create = CreateTopicsRequest::default()
        .with_topics(
            TOPICS
                .iter()
                .map(|(t, n)| {
                    CreatableTopic::default()
                        .with_name(name(t))
                        .with_num_partitions(*n)
                        .with_replication_factor(1)
                })
                .collect(),
        )
        .with_timeout_ms(30_000);
    match client.send(create, 7).await {
        Ok(ResponseKind::CreateTopics(r)) => {
            assert!(r.topics.iter().all(|t| t.error_code == 0), "{r:?}");
        }
        other => panic!("CreateTopics: {other:?}"),
    }
    // Every partition led before comparing (leaders settle a moment after creation on Kafka).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = describe(&client, request(&[], 2000, None)).await;
        let led = r
            .topics
            .iter()
            .map(|t| t.partitions.iter().filter(|p| p.leader_id.0 >= 0).count())
            .sum::<usize>();
        if led == TOPICS.iter().map(|(_, n)| *n as usize).sum::<usize>() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "partitions not led: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut out = Vec::new();
    // Paging through every topic with small limits, following the cursor as Kafka's Admin does.
    for limit in [1, 2, 3, 7, 2000] {
        let mut cursor: Option<(String, i32)> = None;
        for page in 0.. {
            assert!(page < 50, "paging does not end");
            let r = describe(
                &client,
                request(&[], limit, cursor.as_ref().map(|(t, p)| (t.as_str(), *p))),
            )
            .await;
            out.push((format!("all, limit {limit}, page {page}"), lines(&r)));
            match r.next_cursor {
                Some(c) => cursor = Some((c.topic_name.0.to_string(), c.partition_index)),
                None => break,
            }
        }
    }
    let cases: Vec<(&str, DescribeTopicPartitionsRequest)> = vec![
        (
            "named with unknown and invalid",
            request(
                &["gamma", "nope", "alpha", "bad name!", "gamma"],
                2000,
                None,
            ),
        ),
        (
            "named, cursor inside",
            request(&["alpha", "gamma", "beta"], 3, Some(("alpha", 2))),
        ),
        (
            "named, cursor on an unknown topic named",
            request(&["nope", "zulu"], 10, Some(("nope", 0))),
        ),
        (
            "named, cursor outside the list",
            request(&["alpha", "beta"], 10, Some(("gamma", 0))),
        ),
        (
            "negative cursor partition",
            request(&["alpha"], 10, Some(("alpha", -1))),
        ),
        (
            "cursor past the last partition",
            request(&["beta"], 10, Some(("beta", 5))),
        ),
        ("zero limit", request(&["alpha", "beta"], 0, None)),
        ("negative limit, all", request(&[], -5, None)),
        (
            "all, cursor between topics",
            request(&[], 100, Some(("c", 0))),
        ),
    ];
    for (label, r) in cases {
        let answer = describe(&client, r).await;
        out.push((label.to_owned(), lines(&answer)));
    }
    out
}

fn collect(cluster: &BrokerUnderTest) -> Vec<(String, Vec<String>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        tokio::time::timeout(RUN_TIMEOUT, run(&cluster.bootstrap()))
            .await
            .unwrap_or_else(|_| panic!("{}: run timed out", cluster.kind()))
    })
}

/// `kafka-topics --describe` output with the topic ids masked.
fn topics_describe(dist: &KafkaDist, bootstrap: &str) -> String {
    let out = dist
        .run_tool(
            class::TOPIC_COMMAND,
            &["--bootstrap-server", bootstrap, "--describe"],
            Duration::from_secs(120),
        )
        .expect("run kafka-topics")
        .ok()
        .expect("kafka-topics --describe");
    out.stdout
        .lines()
        .map(|l| {
            l.split('\t')
                .map(|cell| {
                    if cell.trim_start().starts_with("TopicId:") {
                        "TopicId: <id>".to_owned()
                    } else {
                        cell.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn describe_topic_partitions_matches_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One JVM or krust at a time: the machine has two cores.
    let (kafka, kafka_cli) = {
        // `krust dev` writes `min.insync.replicas=1` (a topic config's broker synonym, which
        // `kafka-topics --describe` prints): the Kafka node gets it too.
        let node =
            BrokerUnderTest::kafka(&dist, &[("min.insync.replicas", "1")]).expect("Kafka 3.9 node");
        let answers = collect(&node);
        (answers, topics_describe(&dist, &node.bootstrap()))
    };
    let (krust, krust_cli) = {
        let node = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
        let answers = collect(&node);
        (answers, topics_describe(&dist, &node.bootstrap()))
    };
    assert!(kafka.len() > 10, "Kafka answered {} requests", kafka.len());
    let mut diffs = Vec::new();
    for (i, (label, want)) in kafka.iter().enumerate() {
        match krust.get(i) {
            Some((l, got)) if l == label && got == want => {}
            Some((l, got)) => diffs.push(format!(
                "[{label}] kafka:\n  {}\n[{l}] krust:\n  {}",
                want.join("\n  "),
                got.join("\n  ")
            )),
            None => diffs.push(format!("[{label}] missing on krust")),
        }
    }
    if krust.len() > kafka.len() {
        diffs.push(format!(
            "krust answered {} pages, Kafka {}",
            krust.len(),
            kafka.len()
        ));
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    println!("kafka-topics --describe:\n{kafka_cli}");
    assert_eq!(
        krust_cli, kafka_cli,
        "kafka-topics --describe prints the same"
    );
}
