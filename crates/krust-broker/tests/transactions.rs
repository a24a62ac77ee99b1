//! The partition side of transactions (Kafka 3.9 `ProducerStateManager`, `UnifiedLog`,
//! `TransactionIndex`): COMMIT/ABORT markers written as leader with their refusals, the last
//! stable offset held by open transactions and by completed ones until the high watermark
//! passes their marker, aborted transactions in `.txnindex` files (rebuilt when corrupt), and
//! read-committed fetches answering them. Time is explicit.

use std::path::Path;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use krust_broker::Partition;
use krust_broker::fetch::handle_fetch;
use krust_broker::partition::{Fetcher, IsolationLevel, PartitionConfig};
use krust_broker::replicas::{ReplicaSet, TopicMetadata};
use krust_log::txn_index::AbortedTxn;
use krust_log::txn_marker::EndTxnMarker;
use krust_log::{Log, LogConfig, RecordBatchBuilder};

const T0: i64 = 1_700_000_000_000;
const LEADER: i32 = 1;

fn txn_batch(pid: i64, epoch: i16, seq: i32, count: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0)
        .producer(pid, epoch, seq)
        .transactional(true);
    for i in 0..count {
        b.append_kv(T0, None, Some(Bytes::from(format!("t{i}"))));
    }
    b.build().into_bytes()
}

fn plain(count: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for _ in 0..count {
        b.append_kv(T0, None, Some(Bytes::from_static(b"p")));
    }
    b.build().into_bytes()
}

fn marker(commit: bool, coordinator_epoch: i32) -> EndTxnMarker {
    EndTxnMarker {
        commit,
        coordinator_epoch,
    }
}

fn open(dir: &Path) -> Partition {
    let log = Log::open(dir, LogConfig::default(), 0).expect("log");
    Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("partition")
}

fn sole_leader(dir: &Path) -> Partition {
    let mut p = open(dir);
    p.make_leader(3, &[LEADER], &[LEADER], T0).expect("leader");
    p
}

fn read_committed(p: &mut Partition, offset: i64) -> (Bytes, Vec<AbortedTxn>) {
    let data = p
        .read(
            offset,
            1 << 20,
            Fetcher::Consumer {
                isolation: IsolationLevel::ReadCommitted,
            },
            None,
            None,
            true,
            T0,
        )
        .expect("read");
    let aborted = p.aborted_transactions(offset, &data.records);
    (data.records, aborted)
}

#[test]
fn an_open_transaction_holds_the_lso_until_its_marker_and_the_hw_passes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = open(&dir.path().join("t-0"));
    // Leader with one follower in the ISR: the HW moves only with the follower's fetches.
    p.make_leader(3, &[LEADER, 2], &[LEADER, 2], T0)
        .expect("leader");
    p.append_as_leader(plain(2), 1, T0).expect("plain"); // 0-1
    p.append_as_leader(txn_batch(7, 0, 0, 3), 1, T0)
        .expect("txn"); // 2-4
    p.append_as_leader(plain(1), 1, T0).expect("plain"); // 5
    p.read(
        6,
        1 << 20,
        Fetcher::Follower { replica_id: 2 },
        Some(3),
        None,
        true,
        T0,
    )
    .expect("follower fetch");
    assert_eq!(p.high_watermark(), 6);
    assert_eq!(p.last_stable_offset(), 2, "open transaction from offset 2");
    let append = p
        .append_txn_marker_as_leader(7, 0, marker(true, 0), T0)
        .expect("commit marker"); // 6
    assert_eq!(
        (append.base_offset, append.wait_for_high_watermark),
        (6, Some(7))
    );
    assert_eq!(
        p.last_stable_offset(),
        2,
        "the completed transaction bounds the LSO until the HW passes its marker"
    );
    p.read(
        7,
        1 << 20,
        Fetcher::Follower { replica_id: 2 },
        Some(3),
        None,
        true,
        T0,
    )
    .expect("follower fetch");
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (7, 7));
    // A read-committed consumer sees up to the LSO only, and no aborted transactions.
    let (records, aborted) = read_committed(&mut p, 0);
    assert!(!records.is_empty());
    assert!(aborted.is_empty());
    assert!(
        !dir.path()
            .join("t-0/00000000000000000000.txnindex")
            .exists(),
        "a commit writes no index entry"
    );
}

#[test]
fn an_aborted_transaction_is_indexed_fetched_and_survives_restart_and_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut p = sole_leader(&path);
    p.append_txn_marker_as_leader(5, 0, marker(true, 0), T0)
        .expect("a marker for an unknown producer is written"); // 0
    p.append_as_leader(txn_batch(7, 0, 0, 2), 1, T0)
        .expect("txn 7"); // 1-2
    p.append_as_leader(txn_batch(8, 0, 0, 1), 1, T0)
        .expect("txn 8"); // 3
    assert_eq!(p.last_stable_offset(), 1);
    p.append_txn_marker_as_leader(7, 0, marker(false, 2), T0)
        .expect("abort 7"); // 4
    assert_eq!(p.last_stable_offset(), 3, "producer 8 still open");
    p.append_txn_marker_as_leader(8, 0, marker(true, 2), T0)
        .expect("commit 8"); // 5
    assert_eq!(p.last_stable_offset(), 6);
    let expected = vec![AbortedTxn {
        producer_id: 7,
        first_offset: 1,
        last_offset: 4,
        last_stable_offset: 3,
    }];
    assert_eq!(p.log().all_aborted_txns(), expected);
    let (_, aborted) = read_committed(&mut p, 0);
    assert_eq!(aborted, expected);
    let (_, aborted) = read_committed(&mut p, 5);
    assert!(
        aborted.is_empty(),
        "the fetch starts after the aborted transaction"
    );

    // Stale producer and coordinator epochs are refused with Kafka's codes.
    let stale = p
        .append_txn_marker_as_leader(7, -1, marker(false, 2), T0)
        .expect_err("older producer epoch");
    assert_eq!(stale.response_error(), ResponseError::InvalidProducerEpoch);
    let fenced = p
        .append_txn_marker_as_leader(7, 0, marker(false, 1), T0)
        .expect_err("older coordinator epoch");
    assert_eq!(
        fenced.response_error(),
        ResponseError::TransactionCoordinatorFenced
    );

    let index_path = path.join("00000000000000000000.txnindex");
    let written = std::fs::read(&index_path).expect("txnindex");
    assert_eq!(written.len(), 34);
    p.close().expect("close");

    // A restart reads the index back; a corrupt one is rebuilt from the log, byte for byte.
    let p = sole_leader(&path);
    assert_eq!(p.log().all_aborted_txns(), expected);
    assert_eq!(p.last_stable_offset(), 6);
    p.close().expect("close");
    std::fs::write(&index_path, [0xffu8; 50]).expect("corrupt");
    let p = sole_leader(&path);
    assert_eq!(p.log().all_aborted_txns(), expected);
    assert_eq!(std::fs::read(&index_path).expect("rebuilt"), written);
}

#[test]
fn markers_are_refused_on_a_follower() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = open(&dir.path().join("t-0"));
    p.make_follower(3, Some(2), &[2, LEADER], &[2, LEADER]);
    let e = p
        .append_txn_marker_as_leader(7, 0, marker(true, 0), T0)
        .expect_err("follower");
    assert_eq!(e.response_error(), ResponseError::NotLeaderOrFollower);
}

#[test]
fn read_committed_fetch_answers_aborted_transactions_and_read_uncommitted_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = sole_leader(&dir.path().join("t-0"));
    p.append_as_leader(txn_batch(7, 0, 0, 2), 1, T0)
        .expect("txn"); // 0-1
    p.append_txn_marker_as_leader(7, 0, marker(false, 0), T0)
        .expect("abort"); // 2
    p.append_as_leader(plain(1), 1, T0).expect("plain"); // 3
    let mut replicas = ReplicaSet::new();
    replicas.set_topic(
        "t",
        TopicMetadata {
            topic_id: uuid::Uuid::from_u128(1),
            partition_count: 1,
        },
    );
    replicas.insert("t", 0, p);
    for (isolation, want) in [(1i8, Some(vec![(7i64, 0i64)])), (0i8, None)] {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_bytes(1 << 20)
            .with_isolation_level(isolation)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName("t".to_string().into()))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(0)
                            .with_current_leader_epoch(-1)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let out = handle_fetch(&mut replicas, &request, 12, T0);
        let part = &out.response.responses[0].partitions[0];
        assert_eq!(part.error_code, 0);
        assert_eq!(part.last_stable_offset, 4);
        let got = part.aborted_transactions.as_ref().map(|l| {
            l.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect::<Vec<_>>()
        });
        assert_eq!(got, want, "isolation level {isolation}");
    }
}

#[test]
fn a_transactional_batch_needs_a_verification_guard_until_its_transaction_is_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = sole_leader(&dir.path().join("t-0"));
    let refused = p
        .append_client_records(txn_batch(7, 0, 0, 1), 1, None, T0)
        .expect_err("no verification");
    assert_eq!(refused.response_error(), ResponseError::InvalidTxnState);
    let guard = p
        .maybe_start_txn_verification(7, 0, 0)
        .expect("leader")
        .expect("verification needed");
    assert_eq!(
        p.maybe_start_txn_verification(7, 0, 0).expect("leader"),
        Some(guard),
        "a second request of the same epoch shares the verification"
    );
    p.append_client_records(txn_batch(7, 0, 0, 1), 1, Some(guard), T0)
        .expect("verified");
    assert_eq!(
        p.maybe_start_txn_verification(7, 0, 0).expect("leader"),
        None,
        "the transaction is open here: no verification"
    );
    p.append_client_records(txn_batch(7, 0, 1, 1), 1, None, T0)
        .expect("inside the open transaction");
    let plain_batch = {
        let mut b = RecordBatchBuilder::new(0).producer(7, 0, 2);
        b.append_kv(T0, None, Some(Bytes::from_static(b"x")));
        b.build().into_bytes()
    };
    let mixed = p
        .append_client_records(plain_batch, 1, None, T0)
        .expect_err("a non-transactional write inside the transaction");
    assert_eq!(mixed.response_error(), ResponseError::InvalidTxnState);
    // A verification started, then the transaction ends before the append: the late write
    // is refused (KIP-890: no transaction left hanging).
    p.append_txn_marker_as_leader(7, 0, marker(true, 0), T0)
        .expect("commit");
    let late_guard = p
        .maybe_start_txn_verification(7, 0, 0)
        .expect("leader")
        .expect("needed");
    p.append_txn_marker_as_leader(7, 0, marker(false, 0), T0)
        .expect("a marker without an open transaction");
    let late = p
        .append_client_records(txn_batch(7, 0, 2, 1), 1, Some(late_guard), T0)
        .expect_err("the marker ended the verification");
    assert_eq!(late.response_error(), ResponseError::InvalidTxnState);
    assert_eq!(p.last_stable_offset(), p.high_watermark(), "no stuck LSO");
    // With verification disabled the batch is taken as before.
    p.set_config(
        PartitionConfig {
            transaction_verification_enable: false,
            ..PartitionConfig::default()
        },
        T0,
    );
    p.append_client_records(txn_batch(7, 0, 2, 1), 1, None, T0)
        .expect("verification disabled");
}

#[test]
fn a_follower_indexes_the_aborted_transactions_it_replicates_as_the_leader_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut leader = open(&dir.path().join("leader/t-0"));
    leader
        .make_leader(3, &[LEADER, 2], &[LEADER, 2], T0)
        .expect("leader");
    let mut follower = {
        let log =
            Log::open(&dir.path().join("follower/t-0"), LogConfig::default(), 0).expect("log");
        Partition::open(2, log, PartitionConfig::default(), 0, T0).expect("partition")
    };
    follower.make_follower(3, Some(LEADER), &[LEADER, 2], &[LEADER, 2]);
    leader
        .append_as_leader(txn_batch(7, 0, 0, 2), 1, T0)
        .expect("txn 7");
    leader
        .append_as_leader(txn_batch(8, 0, 0, 1), 1, T0)
        .expect("txn 8");
    leader
        .append_txn_marker_as_leader(8, 0, marker(false, 1), T0)
        .expect("abort 8");
    leader
        .append_txn_marker_as_leader(7, 0, marker(false, 1), T0)
        .expect("abort 7");
    let data = leader
        .read(
            0,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(3),
            None,
            true,
            T0,
        )
        .expect("follower fetch");
    follower
        .append_as_follower(data.records, data.high_watermark, T0)
        .expect("replicate");
    assert_eq!(leader.log().all_aborted_txns().len(), 2);
    assert_eq!(
        follower.log().all_aborted_txns(),
        leader.log().all_aborted_txns()
    );
    assert_eq!(
        leader.log().all_aborted_txns()[0].last_stable_offset,
        0,
        "producer 7's transaction was still open when 8 aborted"
    );
}

/// KIP-890 (Kafka's `VerificationStateEntry`): while a producer's verification is in flight,
/// the partition keeps the lowest first sequence it was asked to verify, and a batch starting
/// above it is OUT_OF_ORDER_SEQUENCE_NUMBER, so a retried lower batch is not overtaken; a newer
/// epoch resets it.
#[test]
fn a_verification_keeps_the_lowest_sequence_it_saw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = sole_leader(&dir.path().join("t-0"));
    let guard = p
        .maybe_start_txn_verification(7, 0, 5)
        .expect("leader")
        .expect("needed");
    assert_eq!(
        p.maybe_start_txn_verification(7, 0, 3).expect("leader"),
        Some(guard),
        "a lower sequence shares the verification"
    );
    let overtaking = p
        .append_client_records(txn_batch(7, 0, 5, 1), 1, Some(guard), T0)
        .expect_err("sequence 5 while 3 waits");
    assert_eq!(
        overtaking.response_error(),
        ResponseError::OutOfOrderSequenceNumber
    );
    p.append_client_records(txn_batch(7, 0, 3, 2), 1, Some(guard), T0)
        .expect("the lowest sequence goes first");
    p.append_client_records(txn_batch(7, 0, 5, 1), 1, None, T0)
        .expect("then the rest, inside the open transaction");

    // A newer epoch moves the lowest sequence with it.
    let guard = p
        .maybe_start_txn_verification(8, 0, 4)
        .expect("leader")
        .expect("needed");
    p.maybe_start_txn_verification(8, 1, 9).expect("leader");
    p.append_client_records(txn_batch(8, 1, 9, 1), 1, Some(guard), T0)
        .expect("epoch 1 from its own lowest sequence");
}
