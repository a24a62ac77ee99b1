//! Prompt metadata (issue 14): a topic created through one broker of a 3-node cluster, then
//! looked up with Metadata on every broker — on a krust cluster and, in the same test, on a
//! Kafka 3.9 cluster (`BrokerUnderTest::krust_cluster` / `kafka_cluster`: three combined nodes
//! each, the same settings).
//!
//! For each of [`TOPICS`] topics: CreateTopics v7 to broker 1; the moment it answers, a Metadata
//! v12 request for the topic to broker 1 (the broker that forwarded the creation), then Metadata
//! to every broker until each lists the topic with a leader. Printed for both clusters: how
//! often the first Metadata on broker 1 found the topic, and the time from the CreateTopics
//! answer until every broker knew it (p50, p99, max).
//!
//! Asserted (no wall time): on krust, the first Metadata on the forwarding broker always finds
//! the topic (it answers CreateTopics once its own image holds it), and every broker learns
//! every topic. Kafka's figures are printed beside krust's, not asserted: that run is on demand
//! (`cargo test -p krust --test metadata_propagation_vs_kafka -- --ignored`).
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1.

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Client, ClientConfig};
use krust_testkit::{BrokerUnderTest, KafkaDist};
use tokio::time::Instant;

/// Topics created per cluster.
const TOPICS: usize = 200;
/// The bound of one cluster's whole run.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one topic may take to reach every broker before the run fails.
const VISIBLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What one cluster showed.
struct Figures {
    kind: &'static str,
    /// Topics whose first Metadata on the forwarding broker listed them.
    first_try_hits: usize,
    /// Per topic, the time from the CreateTopics answer until every broker listed it.
    all_brokers: Vec<Duration>,
}

fn name(v: &str) -> TopicName {
    TopicName(StrBytes::from_string(v.to_owned()))
}

/// Whether `client`'s broker lists `topic` with a leader for its partition.
async fn lists(client: &Client, topic: &str) -> bool {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(topic))),
        ]))
        .with_allow_auto_topic_creation(false);
    match client.send(request, 12).await {
        Ok(ResponseKind::Metadata(r)) => r.topics.iter().any(|t| {
            t.error_code == 0
                && t.name.as_ref().is_some_and(|n| n.0.as_str() == topic)
                && t.partitions
                    .iter()
                    .all(|p| p.error_code == 0 && p.leader_id.0 >= 0)
                && !t.partitions.is_empty()
        }),
        Ok(other) => panic!("not a MetadataResponse: {other:?}"),
        Err(e) => panic!("Metadata to {}: {e}", client.addr()),
    }
}

async fn run(cluster: &BrokerUnderTest) -> Figures {
    let clients: Vec<Client> = cluster
        .bootstrap()
        .split(',')
        .map(|addr| {
            Client::new(
                addr,
                ClientConfig {
                    client_id: "metadata-propagation".to_owned(),
                    request_timeout: Duration::from_secs(30),
                    ..ClientConfig::default()
                },
            )
        })
        .collect();
    assert_eq!(clients.len(), 3, "three brokers");
    let mut figures = Figures {
        kind: cluster.kind(),
        first_try_hits: 0,
        all_brokers: Vec::with_capacity(TOPICS),
    };
    for i in 0..TOPICS {
        let topic = format!("propagation-{i}");
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(name(&topic))
                    .with_num_partitions(1)
                    .with_replication_factor(3),
            ])
            .with_timeout_ms(30_000);
        match clients[0].send(request, 7).await {
            Ok(ResponseKind::CreateTopics(r)) => {
                let result = r.topics.first().expect("one topic result");
                assert_eq!(
                    result.error_code, 0,
                    "{}: create {topic}: {result:?}",
                    figures.kind
                );
            }
            other => panic!("{}: create {topic}: {other:?}", figures.kind),
        }
        let answered = Instant::now();
        if lists(&clients[0], &topic).await {
            figures.first_try_hits += 1;
        }
        let mut pending: Vec<&Client> = clients.iter().collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for client in pending {
                if !lists(client, &topic).await {
                    still.push(client);
                }
            }
            pending = still;
            assert!(
                answered.elapsed() < VISIBLE_TIMEOUT,
                "{}: {topic} not on every broker after {VISIBLE_TIMEOUT:?}",
                figures.kind
            );
        }
        figures.all_brokers.push(answered.elapsed());
    }
    figures
}

fn collect(cluster: &BrokerUnderTest) -> Figures {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        tokio::time::timeout(RUN_TIMEOUT, run(cluster))
            .await
            .unwrap_or_else(|_| panic!("{}: run timed out", cluster.kind()))
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(f: &Figures) -> String {
    let mut sorted = f.all_brokers.clone();
    sorted.sort();
    format!(
        "{:>13}: first Metadata on the forwarding broker found the topic {}/{}; \
         CreateTopics answer → on all 3 brokers: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        f.kind,
        f.first_try_hits,
        f.all_brokers.len(),
        percentile(&sorted, 50.0).as_secs_f64() * 1e3,
        percentile(&sorted, 99.0).as_secs_f64() * 1e3,
        sorted.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    )
}

fn krust_figures(dist: &KafkaDist) -> Figures {
    let cluster = BrokerUnderTest::krust_cluster(dist, env!("CARGO_BIN_EXE_krust"), &[])
        .expect("krust cluster");
    collect(&cluster)
}

fn assert_first_try(krust: &Figures) {
    assert_eq!(
        krust.first_try_hits, TOPICS,
        "krust: a Metadata request right after CreateTopics missed the topic on the broker that forwarded it"
    );
}

#[test]
fn a_created_topic_is_visible_at_once_on_the_forwarding_broker_and_soon_on_all() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let krust = krust_figures(&dist);
    eprintln!("{}", report(&krust));
    assert_first_try(&krust);
}

/// The same run on a Kafka 3.9 cluster beside krust's, for the printed comparison (Kafka's
/// figures are not asserted, so CI leaves this out for its time).
#[test]
#[ignore = "prints Kafka 3.9's figures beside krust's (nothing more asserted); on demand with `-- --ignored`"]
fn propagation_figures_beside_kafkas() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One cluster at a time: the machine has two cores.
    let krust = krust_figures(&dist);
    let kafka = {
        let cluster = BrokerUnderTest::kafka_cluster(&dist, &[]).expect("Kafka 3.9 cluster");
        collect(&cluster)
    };
    eprintln!("{}\n{}", report(&krust), report(&kafka));
    assert_first_try(&krust);
}
