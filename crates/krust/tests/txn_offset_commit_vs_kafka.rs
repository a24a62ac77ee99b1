//! TxnOffsetCommit refusals side by side (issue 13, "offsets in transactions"; Kafka 3.9 is the
//! oracle): the same requests go to one Apache Kafka 3.9 node and to `krust dev`, each the group
//! and transaction coordinator of everything, and every answer's per-partition error codes must
//! be equal. The requests: an unknown topic and an unknown partition (v0 and v3), an empty group
//! id, a commit before AddOffsetsToTxn (KIP-890 verification), a producer id the transaction
//! coordinator does not know, a member and generation the group does not have, metadata over
//! `offset.metadata.max.bytes`, and a commit that is taken. Raw requests through krust's client,
//! 127.0.0.1 only, every wait bounded, the brokers killed on drop.

use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, CreateTopicsRequest, FindCoordinatorRequest, GroupId,
    InitProducerIdRequest, ProducerId, ResponseKind, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Client, ClientConfig};
use krust_testkit::{BrokerUnderTest, KafkaDist};

const TXN_ID: &str = "tx-offsets";
const GROUP: &str = "g-offsets";
const TOPIC: &str = "t-offsets";
/// Errors the coordinators answer while they start (loading, topic creation).
const RETRIABLE: &[i16] = &[14, 15, 16, 51];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn client(address: &str) -> Client {
    Client::new(
        address.to_string(),
        ClientConfig {
            client_id: "txn-offset-commit-vs-kafka".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    )
}

/// Calls `send` until it answers with an error code that is not a starting-up one.
async fn until_ready<T>(what: &str, mut send: impl AsyncFnMut() -> Option<(i16, T)>) -> (i16, T) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((code, value)) = send().await
            && !RETRIABLE.contains(&code)
        {
            return (code, value);
        }
        assert!(Instant::now() < deadline, "{what}: no answer within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One TxnOffsetCommit: `(topic, partition, metadata)` entries committed at offset 5.
#[allow(clippy::too_many_arguments)]
async fn commit(
    c: &Client,
    version: i16,
    group: &str,
    producer: (i64, i16),
    member: &str,
    generation: i32,
    entries: &[(&str, i32, &str)],
) -> Vec<(String, i32, i16)> {
    let topics = entries
        .iter()
        .map(|(t, p, m)| {
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(*p)
                        .with_committed_offset(5)
                        .with_committed_metadata(Some(s(m))),
                ])
        })
        .collect();
    let mut request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(TXN_ID)))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_topics(topics);
    if version >= 3 {
        request = request
            .with_generation_id(generation)
            .with_member_id(s(member));
    }
    let ResponseKind::TxnOffsetCommit(r) = c.send(request, version).await.expect("TxnOffsetCommit")
    else {
        panic!("not a TxnOffsetCommit response");
    };
    let mut codes: Vec<(String, i32, i16)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    codes.sort();
    codes
}

/// The answers of one broker to the whole sequence, labelled.
async fn answers(address: &str) -> Vec<(String, Vec<(String, i32, i16)>)> {
    let c = client(address);
    let created = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
    let ResponseKind::CreateTopics(r) = c.send(created, 5).await.expect("CreateTopics") else {
        panic!("not a CreateTopics response");
    };
    assert_eq!(r.topics[0].error_code, 0, "CreateTopics {TOPIC}");
    for (key, key_type) in [(GROUP, 0i8), (TXN_ID, 1)] {
        until_ready(&format!("FindCoordinator {key}"), async || {
            let request = FindCoordinatorRequest::default()
                .with_key(s(key))
                .with_key_type(key_type);
            match c.send(request, 3).await {
                Ok(ResponseKind::FindCoordinator(r)) => Some((r.error_code, ())),
                _ => None,
            }
        })
        .await;
    }
    let (code, producer) = until_ready("InitProducerId", async || {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(TXN_ID))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match c.send(request, 4).await {
            Ok(ResponseKind::InitProducerId(r)) => {
                Some((r.error_code, (r.producer_id.0, r.producer_epoch)))
            }
            _ => None,
        }
    })
    .await;
    assert_eq!(code, 0, "InitProducerId");
    let mut out = Vec::new();
    let mut ask = async |label: &str,
                         version: i16,
                         group: &str,
                         producer: (i64, i16),
                         member: &str,
                         generation: i32,
                         entries: &[(&str, i32, &str)]| {
        let codes = commit(&c, version, group, producer, member, generation, entries).await;
        out.push((label.to_owned(), codes));
    };
    ask(
        "unknown topic v0",
        0,
        GROUP,
        producer,
        "",
        -1,
        &[("nope", 0, "")],
    )
    .await;
    ask(
        "unknown topic and partition v3",
        3,
        GROUP,
        producer,
        "",
        -1,
        &[("nope", 0, ""), (TOPIC, 7, "")],
    )
    .await;
    ask("empty group id", 3, "", producer, "", -1, &[(TOPIC, 0, "")]).await;
    ask(
        "before AddOffsetsToTxn",
        3,
        GROUP,
        producer,
        "",
        -1,
        &[(TOPIC, 0, "")],
    )
    .await;
    let (code, ()) = until_ready("AddOffsetsToTxn", async || {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(TXN_ID)))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_group_id(GroupId(s(GROUP)));
        match c.send(request, 3).await {
            Ok(ResponseKind::AddOffsetsToTxn(r)) => Some((r.error_code, ())),
            _ => None,
        }
    })
    .await;
    assert_eq!(code, 0, "AddOffsetsToTxn");
    ask(
        "unknown producer id",
        3,
        GROUP,
        (producer.0 + 1000, 0),
        "",
        -1,
        &[(TOPIC, 0, "")],
    )
    .await;
    ask(
        "unknown member, generation 5",
        3,
        GROUP,
        producer,
        "member-x",
        5,
        &[(TOPIC, 0, "")],
    )
    .await;
    let big = "x".repeat(5000);
    ask(
        "metadata over offset.metadata.max.bytes",
        3,
        GROUP,
        producer,
        "",
        -1,
        &[(TOPIC, 0, big.as_str())],
    )
    .await;
    ask("taken", 3, GROUP, producer, "", -1, &[(TOPIC, 0, "ok")]).await;
    out
}

#[test]
fn txn_offset_commit_answers_like_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let kafka = BrokerUnderTest::kafka(&dist, &[]).expect("Kafka 3.9 node");
    let expected = runtime.block_on(answers(&kafka.bootstrap()));
    drop(kafka);
    let krust = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
    let got = runtime.block_on(answers(&krust.bootstrap()));
    for (e, g) in expected.iter().zip(&got) {
        eprintln!("{}: kafka {:?} krust {:?}", e.0, e.1, g.1);
    }
    assert_eq!(
        got,
        expected,
        "krust's answers (left) differ from Kafka 3.9's (right)\nkrust log:\n{}",
        krust.log_tail(30)
    );
}
