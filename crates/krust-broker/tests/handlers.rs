//! Request handlers over a `ReplicaSet`: kafka_protocol requests in, responses (or what they
//! wait for) out, with per-partition errors as Kafka 3.9 returns them.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, ProduceRequest,
};
use krust_broker::fetch::handle_fetch;
use krust_broker::list_offsets::handle_list_offsets;
use krust_broker::offset_for_leader_epoch::handle_offset_for_leader_epoch;
use krust_broker::partition::PartitionConfig;
use krust_broker::produce::{ProduceOutcome, handle_produce, topic_name};
use krust_broker::{Partition, ReplicaSet, TopicMetadata};
use krust_log::{Log, LogConfig, RecordBatchBuilder};
use uuid::Uuid;

const T0: i64 = 1_700_000_000_000;
const TOPIC_ID: Uuid = Uuid::from_u128(0x1234);

/// Broker 1 leads `orders-0` (replicas 1, 2; ISR as given); `orders` has 2 partitions, so
/// `orders-1` exists elsewhere.
fn setup(dir: &std::path::Path, isr: &[i32], min_isr: i32) -> ReplicaSet {
    let log = Log::open(&dir.join("orders-0"), LogConfig::default(), 0).expect("log");
    let config = PartitionConfig {
        min_insync_replicas: min_isr,
        ..PartitionConfig::default()
    };
    let mut p = Partition::open(1, log, config, 0, T0).expect("open");
    p.make_leader(3, &[1, 2], isr, T0).expect("leader");
    let mut set = ReplicaSet::new();
    set.set_topic(
        "orders",
        TopicMetadata {
            topic_id: TOPIC_ID,
            partition_count: 2,
        },
    );
    set.insert("orders", 0, p);
    set
}

fn records(count: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for _ in 0..count {
        b.append_kv(ts, None, Some(Bytes::from_static(b"v")));
    }
    b.build().into_bytes()
}

fn produce(topic: &str, partitions: &[(i32, Bytes)], acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(
                    partitions
                        .iter()
                        .map(|(i, r)| {
                            PartitionProduceData::default()
                                .with_index(*i)
                                .with_records(Some(r.clone()))
                        })
                        .collect(),
                ),
        ])
}

fn respond(outcome: ProduceOutcome) -> Vec<(i32, i16, i64)> {
    let ProduceOutcome::Respond(response) = outcome else {
        panic!("expected an immediate response");
    };
    response
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .map(|p| (p.index, p.error_code, p.base_offset))
        .collect()
}

fn follower_fetch(set: &mut ReplicaSet, offset: i64) {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(2))
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_topic("orders", offset, 3)]);
    let out = handle_fetch(set, &request, 12, T0);
    assert_eq!(out.response.responses[0].partitions[0].error_code, 0);
}

fn fetch_topic(topic: &str, offset: i64, epoch: i32) -> FetchTopic {
    FetchTopic::default()
        .with_topic(topic_name(topic))
        .with_partitions(vec![
            FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(epoch)
                .with_partition_max_bytes(1 << 20),
        ])
}

#[test]
fn produce_answers_per_partition_errors_as_kafka() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    let got = respond(handle_produce(
        &mut set,
        &produce(
            "orders",
            &[
                (0, records(2, T0)),
                (1, records(1, T0)),
                (7, records(1, T0)),
            ],
            1,
        ),
        9,
        T0,
    ));
    assert_eq!(
        got,
        vec![
            (0, 0, 0),
            (1, ResponseError::NotLeaderOrFollower.code(), -1),
            (7, ResponseError::UnknownTopicOrPartition.code(), -1),
        ]
    );
    let unknown = respond(handle_produce(
        &mut set,
        &produce("nope", &[(0, records(1, T0))], 1),
        9,
        T0,
    ));
    assert_eq!(
        unknown,
        vec![(0, ResponseError::UnknownTopicOrPartition.code(), -1)]
    );
    let bad_acks = respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(1, T0))], 2),
        9,
        T0,
    ));
    assert_eq!(
        bad_acks,
        vec![(0, ResponseError::InvalidRequiredAcks.code(), -1)]
    );
    let mut two = records(1, T0).to_vec();
    two.extend_from_slice(&records(1, T0));
    let two_batches = respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, Bytes::from(two))], 1),
        9,
        T0,
    ));
    assert_eq!(
        two_batches,
        vec![(0, ResponseError::InvalidRecord.code(), -1)]
    );
}

#[test]
fn produce_acks_all_below_min_insync_is_not_enough_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 2);
    let got = respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(1, T0))], -1),
        9,
        T0,
    ));
    assert_eq!(got, vec![(0, ResponseError::NotEnoughReplicas.code(), -1)]);
}

#[test]
fn produce_acks_all_waits_for_the_follower_then_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1, 2], 2);
    let ProduceOutcome::Wait(mut delayed) = handle_produce(
        &mut set,
        &produce("orders", &[(0, records(3, T0))], -1),
        9,
        T0,
    ) else {
        panic!("acks=all must wait for the follower");
    };
    assert!(delayed.try_complete(&set).is_none());
    follower_fetch(&mut set, 3);
    let response = delayed.try_complete(&set).expect("complete");
    let part = &response.responses[0].partition_responses[0];
    assert_eq!((part.error_code, part.base_offset), (0, 0));
}

#[test]
fn produce_acks_all_expires_with_request_timed_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1, 2], 1);
    let ProduceOutcome::Wait(delayed) = handle_produce(
        &mut set,
        &produce("orders", &[(0, records(1, T0))], -1),
        9,
        T0,
    ) else {
        panic!("waits");
    };
    let response = delayed.expire();
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        ResponseError::RequestTimedOut.code()
    );
}

#[test]
fn fetch_by_name_and_by_topic_id_with_kafka_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(2, T0))], 1),
        9,
        T0,
    ));
    let by_name = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_min_bytes(1)
        .with_max_wait_ms(500)
        .with_topics(vec![fetch_topic("orders", 0, 3)]);
    let out = handle_fetch(&mut set, &by_name, 12, T0);
    let p = &out.response.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 2));
    assert!(out.bytes_read > 0 && out.min_bytes_reached);

    let mut by_id = by_name.clone();
    by_id.topics[0].topic = topic_name("");
    by_id.topics[0].topic_id = TOPIC_ID;
    let out = handle_fetch(&mut set, &by_id, 13, T0);
    assert_eq!(out.response.responses[0].topic_id, TOPIC_ID);
    assert_eq!(out.response.responses[0].partitions[0].high_watermark, 2);
    by_id.topics[0].topic_id = Uuid::from_u128(99);
    let out = handle_fetch(&mut set, &by_id, 13, T0);
    assert_eq!(
        out.response.responses[0].partitions[0].error_code,
        ResponseError::UnknownTopicId.code()
    );

    let beyond = by_name
        .clone()
        .with_topics(vec![fetch_topic("orders", 5, 3)]);
    let p = handle_fetch(&mut set, &beyond, 12, T0).response.responses[0].partitions[0].clone();
    assert_eq!(
        (p.error_code, p.high_watermark),
        (ResponseError::OffsetOutOfRange.code(), -1)
    );
    let fenced = by_name
        .clone()
        .with_topics(vec![fetch_topic("orders", 0, 2)]);
    let p = &handle_fetch(&mut set, &fenced, 12, T0).response.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::FencedLeaderEpoch.code());
}

#[test]
fn fetch_below_min_bytes_asks_to_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_min_bytes(1)
        .with_max_wait_ms(500)
        .with_topics(vec![fetch_topic("orders", 0, 3)]);
    let out = handle_fetch(&mut set, &request, 12, T0);
    assert!(!out.min_bytes_reached, "empty log: wait for data");
    respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(1, T0))], 1),
        9,
        T0,
    ));
    assert!(handle_fetch(&mut set, &request, 12, T0).min_bytes_reached);
}

#[test]
fn fetch_respects_max_bytes_but_returns_at_least_one_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    for _ in 0..3 {
        respond(handle_produce(
            &mut set,
            &produce("orders", &[(0, records(1, T0))], 1),
            9,
            T0,
        ));
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1)
        .with_topics(vec![fetch_topic("orders", 0, 3)]);
    let out = handle_fetch(&mut set, &request, 12, T0);
    let records = out.response.responses[0].partitions[0]
        .records
        .clone()
        .expect("records");
    let batches = krust_log::batch::parse_all(records, 1 << 20).expect("whole batches");
    assert_eq!(batches.len(), 1);
}

#[test]
fn list_offsets_by_timestamp_and_duplicate_partitions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(2, 1000))], 1),
        9,
        2000,
    ));
    respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(2, 1500))], 1),
        9,
        2000,
    ));
    let part = |ts| {
        ListOffsetsPartition::default()
            .with_partition_index(0)
            .with_timestamp(ts)
    };
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic_name("orders"))
                .with_partitions(vec![part(1200)]),
            ListOffsetsTopic::default()
                .with_name(topic_name("orders"))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(1)
                        .with_timestamp(-1),
                ]),
        ]);
    let response = handle_list_offsets(&mut set, &request, 7);
    let p = &response.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.timestamp, p.offset, p.leader_epoch),
        (0, 1500, 2, 3)
    );
    assert_eq!(
        response.topics[1].partitions[0].error_code,
        ResponseError::NotLeaderOrFollower.code()
    );
    let dup = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic_name("orders"))
                .with_partitions(vec![part(-1), part(-2)]),
        ]);
    let response = handle_list_offsets(&mut set, &dup, 7);
    assert!(
        response.topics[0]
            .partitions
            .iter()
            .all(|p| p.error_code == ResponseError::InvalidRequest.code())
    );
}

#[test]
fn offset_for_leader_epoch_answers_epoch_end_or_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut set = setup(dir.path(), &[1], 1);
    respond(handle_produce(
        &mut set,
        &produce("orders", &[(0, records(2, T0))], 1),
        9,
        T0,
    ));
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(2))
        .with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(topic_name("orders"))
                .with_partitions(vec![
                    OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(3)
                        .with_leader_epoch(3),
                    OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(4)
                        .with_leader_epoch(3),
                    OffsetForLeaderPartition::default()
                        .with_partition(9)
                        .with_current_leader_epoch(3)
                        .with_leader_epoch(3),
                ]),
        ]);
    let response = handle_offset_for_leader_epoch(&mut set, &request, 4);
    let got: Vec<_> = response.topics[0]
        .partitions
        .iter()
        .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 3, 2),
            (ResponseError::UnknownLeaderEpoch.code(), -1, -1),
            (ResponseError::UnknownTopicOrPartition.code(), -1, -1),
        ]
    );
}

#[test]
fn produce_with_an_invalid_timestamp_names_the_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(&dir.path().join("orders-0"), LogConfig::default(), 0).expect("log");
    let config = PartitionConfig {
        message_timestamp_after_max_ms: 1000,
        ..PartitionConfig::default()
    };
    let mut p = Partition::open(1, log, config, 0, T0).expect("open");
    p.make_leader(3, &[1], &[1], T0).expect("leader");
    let mut set = ReplicaSet::new();
    set.insert("orders", 0, p);
    let mut b = RecordBatchBuilder::new(0);
    b.append_kv(T0, None, None);
    b.append_kv(T0 + 5000, None, None);
    let ProduceOutcome::Respond(response) = handle_produce(
        &mut set,
        &produce("orders", &[(0, b.build().into_bytes())], 1),
        9,
        T0,
    ) else {
        panic!("immediate");
    };
    let part = &response.responses[0].partition_responses[0];
    assert_eq!(part.error_code, ResponseError::InvalidTimestamp.code());
    assert_eq!(part.record_errors.len(), 1);
    assert_eq!(part.record_errors[0].batch_index, 1);
    assert!(part.error_message.is_some());
}

mod robustness {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Bytes from the network never panic the produce path: they are appended whole or
        /// answered with an error code, and the log stays readable.
        #[test]
        fn arbitrary_produce_bytes_get_an_error_code_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..200),
            flip in 0usize..80,
            acks in -2i16..3,
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut set = setup(dir.path(), &[1], 1);
            let mut valid = records(2, T0).to_vec();
            if let Some(b) = valid.get_mut(flip) {
                *b ^= 0x5a;
            }
            for bytes in [Bytes::from(garbage.clone()), Bytes::from(valid)] {
                let _ = handle_produce(&mut set, &produce("orders", &[(0, bytes)], acks), 9, T0);
            }
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_bytes(1 << 20)
                .with_topics(vec![fetch_topic("orders", 0, 3)]);
            let out = handle_fetch(&mut set, &request, 12, T0);
            prop_assert_eq!(out.response.responses[0].partitions[0].error_code, 0);
        }

        /// A corrupt snapshot file is reported, never a panic.
        #[test]
        fn arbitrary_snapshot_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = krust_broker::producer_state::decode_snapshot(&bytes);
        }
    }
}
