//! Bad input on a krust controller listener gets Kafka 3.9's error codes (facts §1.3, §1.7) and
//! never takes the process down: wrong topic/partition, another cluster's id, stale and future
//! epochs, a request meant for another voter, a Fetch from an unknown replica, and frames that
//! are cut short, oversized or garbage. After all of it the node still leads and answers.

#[path = "quorum_support/mod.rs"]
mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use kafka_protocol::messages::{
    BeginQuorumEpochRequest, BrokerId, FetchRequest, RequestKind, ResponseKind, TopicName,
    VoteRequest, begin_quorum_epoch_request, fetch_request, vote_request,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::{ClientConfig, Connection};
use support::{Quorum, wait_for_quorum};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);
const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);

// Kafka error codes.
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const FENCED_LEADER_EPOCH: i16 = 74;
const INVALID_REQUEST: i16 = 42;
const INCONSISTENT_CLUSTER_ID: i16 = 104;
const INVALID_VOTER_KEY: i16 = 125;

fn fetch(
    cluster_id: &str,
    replica: i32,
    epoch: i32,
    topic_id: Uuid,
    partition: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_owned())))
        .with_replica_state(
            fetch_request::ReplicaState::default().with_replica_id(BrokerId(replica)),
        )
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(epoch)
                        .with_fetch_offset(0)
                        .with_last_fetched_epoch(0)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

fn vote(cluster_id: &str, voter_id: i32, candidate: i32, epoch: i32) -> VoteRequest {
    VoteRequest::default()
        .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_owned())))
        .with_voter_id(BrokerId(voter_id))
        .with_topics(vec![
            vote_request::TopicData::default()
                .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
                .with_partitions(vec![
                    vote_request::PartitionData::default()
                        .with_partition_index(0)
                        .with_candidate_epoch(epoch)
                        .with_candidate_id(BrokerId(candidate))
                        .with_last_offset_epoch(0)
                        .with_last_offset(0),
                ]),
        ])
}

/// (top-level error, partition error).
type Errors = (i16, Option<i16>);

/// (top-level error, partition error) of a Fetch answer.
fn fetch_errors(response: ResponseKind) -> Errors {
    let ResponseKind::Fetch(r) = response else {
        panic!("not a Fetch response: {response:?}");
    };
    let partition = r
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code);
    (r.error_code, partition)
}

fn vote_errors(response: ResponseKind) -> (i16, Option<(i16, bool)>) {
    let ResponseKind::Vote(r) = response else {
        panic!("not a Vote response: {response:?}");
    };
    let partition = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| (p.error_code, p.vote_granted));
    (r.error_code, partition)
}

/// Sends raw bytes on a fresh connection and reads until the server closes it (bounded).
fn send_raw(addr: &str, bytes: &[u8]) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = Vec::new();
    let _ = stream.take(1 << 20).read_to_end(&mut sink);
}

#[test]
fn bad_requests_get_kafkas_error_codes_and_the_node_keeps_serving() {
    let mut quorum = Quorum::new(1, &[]);
    quorum.start_all();
    let q = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| {
        q.leader_id == 1 && q.high_watermark > 0
    })
    .unwrap_or_else(|| panic!("single voter did not elect itself\n{}", quorum.log_tails()));
    let epoch = q.leader_epoch;
    let cluster = quorum.cluster_id.clone();
    let addr = quorum.nodes[0].address();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let config = ClientConfig {
            negotiate_api_versions: true,
            request_timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        };
        let conn = Connection::connect(&addr, config).await.expect("connect");
        let send = |request: RequestKind, version: i16| {
            let conn = &conn;
            async move { conn.send(request, version).await.expect("answer") }
        };

        let cases: Vec<(&str, FetchRequest, Errors)> = vec![
            (
                "another cluster's id",
                fetch("someOtherClusterIdAAAA", 2, epoch, METADATA_TOPIC_ID, 0),
                (INCONSISTENT_CLUSTER_ID, None),
            ),
            (
                "unknown topic id",
                fetch(&cluster, 2, epoch, Uuid::from_u64_pair(7, 7), 0),
                (INVALID_REQUEST, None),
            ),
            (
                "partition 1 of the metadata topic",
                fetch(&cluster, 2, epoch, METADATA_TOPIC_ID, 1),
                (INVALID_REQUEST, None),
            ),
            (
                "stale epoch",
                fetch(&cluster, 2, epoch - 1, METADATA_TOPIC_ID, 0),
                (0, Some(FENCED_LEADER_EPOCH)),
            ),
            (
                "future epoch",
                fetch(&cluster, 2, epoch + 5, METADATA_TOPIC_ID, 0),
                (0, Some(UNKNOWN_LEADER_EPOCH)),
            ),
            (
                "unknown replica (an observer) at the right epoch",
                fetch(&cluster, 99, epoch, METADATA_TOPIC_ID, 0),
                (0, Some(0)),
            ),
        ];
        for (why, request, expected) in cases {
            let (top, partition) = fetch_errors(send(RequestKind::Fetch(request), 17).await);
            let got = if top != 0 {
                (top, None)
            } else {
                (top, partition)
            };
            assert_eq!(got, expected, "Fetch with {why}");
        }

        // Vote v1 addressed to voter 42 (not us) in our epoch: INVALID_VOTER_KEY, not granted.
        let (top, partition) =
            vote_errors(send(RequestKind::Vote(vote(&cluster, 42, 2, epoch)), 1).await);
        assert_eq!(
            (top, partition),
            (0, Some((INVALID_VOTER_KEY, false))),
            "Vote for another voter"
        );
        // A candidate whose last epoch is not below its candidate epoch: malformed.
        let (top, partition) =
            vote_errors(send(RequestKind::Vote(vote(&cluster, 1, 99, 0)), 1).await);
        assert_eq!(
            (top, partition.map(|p| p.0)),
            (0, Some(INVALID_REQUEST)),
            "Vote with LastOffsetEpoch >= CandidateEpoch"
        );
        // A leader of an older epoch announcing itself: fenced.
        let begin = BeginQuorumEpochRequest::default()
            .with_cluster_id(Some(StrBytes::from_string(cluster.clone())))
            .with_topics(vec![
                begin_quorum_epoch_request::TopicData::default()
                    .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
                    .with_partitions(vec![
                        begin_quorum_epoch_request::PartitionData::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(99))
                            .with_leader_epoch(epoch - 1),
                    ]),
            ]);
        let ResponseKind::BeginQuorumEpoch(r) = send(RequestKind::BeginQuorumEpoch(begin), 0).await
        else {
            panic!("not a BeginQuorumEpoch response");
        };
        let partition = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code);
        assert_eq!(
            (r.error_code, partition),
            (0, Some(FENCED_LEADER_EPOCH)),
            "stale BeginQuorumEpoch from unknown voter 99"
        );
        // Another cluster's Vote.
        let (top, _) = vote_errors(
            send(
                RequestKind::Vote(vote("someOtherClusterIdAAAA", 1, 2, epoch + 1)),
                1,
            )
            .await,
        );
        assert_eq!(top, INCONSISTENT_CLUSTER_ID, "foreign Vote");
    });

    // Broken frames: each closes its own connection only.
    send_raw(&addr, &[0, 0, 0, 100, 0, 1, 0]); // size 100, 3 bytes, then EOF
    send_raw(&addr, &[0x7f, 0xff, 0xff, 0xff]); // size beyond socket.request.max.bytes
    send_raw(&addr, &[0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]); // unknown API key 57005
    send_raw(
        &addr,
        &[0, 0, 0, 12, 0, 1, 0, 17, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],
    ); // Fetch v17, body cut short
    send_raw(&addr, &[0, 0, 0, 2, 0]); // shorter than a header

    assert!(
        quorum.nodes[0].is_running(),
        "the controller died\n{}",
        quorum.log_tails()
    );
    let after = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id == 1)
        .unwrap_or_else(|| panic!("no answer after bad input\n{}", quorum.log_tails()));
    assert_eq!(
        after.leader_epoch, epoch,
        "bad input must not disturb the leader"
    );
    quorum.stop_all();
}
