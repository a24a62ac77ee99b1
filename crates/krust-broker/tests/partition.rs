//! Partition behaviour as Kafka 3.9's `Partition`/`UnifiedLog`: leader append validation,
//! acks=all and `min.insync.replicas`, the high watermark moved by follower fetches, reads
//! for consumers and followers, leader-epoch fencing, ListOffsets, OffsetForLeaderEpoch and
//! follower divergence truncation. Time is explicit (`now` in ms).

use std::collections::BTreeSet;
use std::path::Path;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use krust_broker::partition::{Fetcher, IsolationLevel, PartitionConfig};
use krust_broker::{Partition, PartitionError};
use krust_log::leader_epoch::EpochEndOffset;
use krust_log::log::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP};
use krust_log::{Log, LogConfig, RecordBatchBuilder};

const T0: i64 = 1_700_000_000_000;
const LEADER: i32 = 1;
const CONSUMER: Fetcher = Fetcher::Consumer {
    isolation: IsolationLevel::ReadUncommitted,
};

fn records(count: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..count {
        b.append_kv(ts + i as i64, None, Some(Bytes::from(format!("v{i}"))));
    }
    b.build().into_bytes()
}

fn idempotent(pid: i64, epoch: i16, seq: i32, count: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0).producer(pid, epoch, seq);
    for _ in 0..count {
        b.append_kv(T0, None, Some(Bytes::from_static(b"x")));
    }
    b.build().into_bytes()
}

fn open(dir: &Path, config: PartitionConfig) -> Partition {
    let log = Log::open(dir, LogConfig::default(), 0).expect("log");
    Partition::open(LEADER, log, config, 0, T0).expect("partition")
}

fn leader(dir: &Path, replicas: &[i32], isr: &[i32], config: PartitionConfig) -> Partition {
    let mut p = open(dir, config);
    p.make_leader(5, replicas, isr, T0).expect("leader");
    p
}

fn follower_fetch(p: &mut Partition, replica_id: i32, offset: i64, now: i64) {
    p.read(
        offset,
        1 << 20,
        Fetcher::Follower { replica_id },
        Some(p.leader_epoch()),
        None,
        true,
        now,
    )
    .expect("follower fetch");
}

fn code(e: &PartitionError) -> ResponseError {
    e.response_error()
}

#[test]
fn duplicate_batch_is_acknowledged_with_original_offsets_and_not_reappended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[LEADER],
        &[LEADER],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(2, T0), 1, T0).expect("plain");
    let first = p
        .append_as_leader(idempotent(9, 0, 0, 3), 1, T0)
        .expect("first");
    assert_eq!(
        (first.base_offset, first.last_offset, first.duplicate),
        (2, 4, false)
    );
    let retry = p
        .append_as_leader(idempotent(9, 0, 0, 3), -1, T0)
        .expect("retry");
    assert_eq!(
        (retry.base_offset, retry.last_offset, retry.duplicate),
        (2, 4, true)
    );
    assert_eq!(retry.wait_for_high_watermark, Some(5));
    assert_eq!(p.log_end_offset(), 5);
}

#[test]
fn out_of_order_sequence_and_old_epoch_get_their_kafka_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[LEADER],
        &[LEADER],
        PartitionConfig::default(),
    );
    p.append_as_leader(idempotent(9, 1, 0, 1), 1, T0)
        .expect("first");
    let gap = p
        .append_as_leader(idempotent(9, 1, 2, 1), 1, T0)
        .expect_err("gap");
    assert_eq!(code(&gap), ResponseError::OutOfOrderSequenceNumber);
    let old = p
        .append_as_leader(idempotent(9, 0, 1, 1), 1, T0)
        .expect_err("old epoch");
    assert_eq!(code(&old), ResponseError::InvalidProducerEpoch);
    p.append_as_leader(idempotent(9, 2, 0, 1), 1, T0)
        .expect("epoch bump at seq 0");
    assert_eq!(p.log_end_offset(), 2);
}

#[test]
fn producer_state_survives_restart_via_snapshot_and_log_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut p = leader(&path, &[LEADER], &[LEADER], PartitionConfig::default());
    p.append_as_leader(idempotent(9, 0, 0, 2), 1, T0)
        .expect("a");
    p.write_producer_snapshot().expect("snapshot at 2");
    p.append_as_leader(idempotent(9, 0, 2, 2), 1, T0)
        .expect("b (tail)");
    p.append_as_leader(idempotent(4, 0, 0, 1), 1, T0)
        .expect("c (tail)");
    let before = p.producer_state().snapshot_entries();
    let recovery_point = p.close().expect("close");
    let log = Log::open(&path, LogConfig::default(), recovery_point).expect("reopen");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 5, T0).expect("open");
    assert_eq!(p.producer_state().snapshot_entries(), before);
    p.make_leader(6, &[LEADER], &[LEADER], T0).expect("leader");
    let dup = p
        .append_as_leader(idempotent(9, 0, 2, 2), 1, T0)
        .expect("dup");
    assert_eq!((dup.duplicate, dup.base_offset), (true, 2));
    let next = p
        .append_as_leader(idempotent(9, 0, 4, 1), 1, T0)
        .expect("next");
    assert_eq!(next.base_offset, 5);
    let gap = p
        .append_as_leader(idempotent(4, 0, 3, 1), 1, T0)
        .expect_err("gap");
    assert_eq!(code(&gap), ResponseError::OutOfOrderSequenceNumber);
}

#[test]
fn high_watermark_moves_with_isr_fetches_and_never_backwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2, 3],
        &[1, 2, 3],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(10, T0), 1, T0).expect("append");
    assert_eq!(p.high_watermark(), 0, "followers have not fetched");
    follower_fetch(&mut p, 2, 10, T0 + 1);
    assert_eq!(p.high_watermark(), 0, "replica 3 holds it back");
    follower_fetch(&mut p, 3, 4, T0 + 1);
    assert_eq!(p.high_watermark(), 4);
    follower_fetch(&mut p, 3, 10, T0 + 2);
    assert_eq!(p.high_watermark(), 10);
    // A follower fetching from an older offset (it truncated) does not move the HW back.
    follower_fetch(&mut p, 3, 7, T0 + 3);
    assert_eq!(p.high_watermark(), 10);
    // Once replica 3 leaves the ISR it no longer holds the HW.
    p.append_as_leader(records(5, T0), 1, T0 + 4)
        .expect("append");
    p.update_isr(&[1, 2], T0 + 40_000);
    follower_fetch(&mut p, 2, 15, T0 + 40_001);
    assert_eq!(p.high_watermark(), 15);
}

#[test]
fn lagging_isr_member_is_out_of_sync_and_caught_up_follower_is_a_candidate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2, 3],
        &[1, 2],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(3, T0), 1, T0).expect("append");
    follower_fetch(&mut p, 2, 3, T0 + 10);
    follower_fetch(&mut p, 3, 3, T0 + 10);
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(p.isr_expansion_candidates(), vec![3]);
    p.append_as_leader(records(1, T0), 1, T0 + 20)
        .expect("append");
    // Replica 2 keeps fetching but never reaches the end again.
    follower_fetch(&mut p, 2, 3, T0 + 20_000);
    assert!(
        p.out_of_sync_replicas(T0 + 30_010).is_empty(),
        "within 30 s of last caught up"
    );
    assert_eq!(p.out_of_sync_replicas(T0 + 30_011), vec![2]);
}

#[test]
fn acks_all_with_isr_below_min_insync_is_not_enough_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PartitionConfig {
        min_insync_replicas: 2,
        ..PartitionConfig::default()
    };
    let mut p = leader(&dir.path().join("t-0"), &[1, 2], &[1], config);
    let err = p
        .append_as_leader(records(1, T0), -1, T0)
        .expect_err("min isr");
    assert_eq!(code(&err), ResponseError::NotEnoughReplicas);
    assert_eq!(p.log_end_offset(), 0, "nothing written");
    p.append_as_leader(records(1, T0), 1, T0)
        .expect("acks=1 is fine");
}

#[test]
fn acks_all_waits_until_the_high_watermark_reaches_the_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PartitionConfig {
        min_insync_replicas: 2,
        ..PartitionConfig::default()
    };
    let mut p = leader(&dir.path().join("t-0"), &[1, 2], &[1, 2], config);
    let append = p.append_as_leader(records(2, T0), -1, T0).expect("append");
    let required = append.wait_for_high_watermark.expect("acks=all waits");
    assert_eq!(required, 2);
    assert!(p.check_enough_replicas_reach_offset(required).is_none());
    follower_fetch(&mut p, 2, 2, T0 + 1);
    assert!(matches!(
        p.check_enough_replicas_reach_offset(required),
        Some(Ok(()))
    ));
    p.update_isr(&[1], T0 + 2);
    let after = p
        .check_enough_replicas_reach_offset(required)
        .expect("done");
    assert_eq!(
        code(&after.expect_err("isr shrank")),
        ResponseError::NotEnoughReplicasAfterAppend
    );
}

#[test]
fn append_validation_maps_to_kafka_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PartitionConfig {
        message_timestamp_before_max_ms: 1000,
        message_timestamp_after_max_ms: 1000,
        ..PartitionConfig::default()
    };
    let mut p = leader(&dir.path().join("t-0"), &[LEADER], &[LEADER], config);
    let cases: Vec<(&str, Bytes, ResponseError)> = vec![
        (
            "timestamp too old",
            records(1, T0 - 1001),
            ResponseError::InvalidTimestamp,
        ),
        (
            "timestamp too new",
            records(1, T0 + 1001),
            ResponseError::InvalidTimestamp,
        ),
        (
            // Every record of a compressed batch is checked, not only the batch's bounds.
            "a zstd batch whose middle record is too old",
            {
                let mut b = RecordBatchBuilder::new(0).compression(krust_log::Compression::Zstd);
                for ts in [T0, T0 - 1001, T0] {
                    b.append_kv(ts, None, Some(Bytes::from_static(b"v")));
                }
                b.build_compressed(None).expect("compress").into_bytes()
            },
            ResponseError::InvalidTimestamp,
        ),
        (
            "bad CRC",
            {
                let mut b = records(1, T0).to_vec();
                let last = b.len() - 1;
                b[last] ^= 0xff;
                Bytes::from(b)
            },
            ResponseError::CorruptMessage,
        ),
        (
            "too large",
            {
                let mut b = RecordBatchBuilder::new(0);
                b.append_kv(T0, None, Some(Bytes::from(vec![0u8; 1_100_000])));
                b.build().into_bytes()
            },
            ResponseError::MessageTooLarge,
        ),
        (
            "truncated",
            records(1, T0).slice(..30),
            ResponseError::CorruptMessage,
        ),
        (
            "control batch from a client",
            {
                let mut b = RecordBatchBuilder::new(0).control(true);
                b.append_kv(T0, Some(Bytes::from_static(&[0, 0, 0, 0])), None);
                b.build().into_bytes()
            },
            ResponseError::InvalidRecord,
        ),
        (
            "producer id without a sequence",
            {
                let mut b = RecordBatchBuilder::new(0).producer(5, 0, -1);
                b.append_kv(T0, None, None);
                b.build().into_bytes()
            },
            ResponseError::InvalidRecord,
        ),
    ];
    for (name, bytes, expected) in cases {
        let err = p.append_as_leader(bytes, 1, T0).expect_err(name);
        assert_eq!(code(&err), expected, "case {name}: {err}");
    }
    assert_eq!(p.log_end_offset(), 0);
    p.append_as_leader(records(1, T0 + 1000), 1, T0)
        .expect("within bounds");
}

#[test]
fn consumers_read_up_to_the_high_watermark_and_followers_to_the_log_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2],
        &[1, 2],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(3, T0), 1, T0).expect("a");
    follower_fetch(&mut p, 2, 3, T0);
    p.append_as_leader(records(2, T0), 1, T0).expect("b");
    let consumer = p
        .read(0, 1 << 20, CONSUMER, None, None, true, T0)
        .expect("read");
    assert_eq!((consumer.high_watermark, consumer.log_end_offset), (3, 5));
    let batches = krust_log::batch::parse_all(consumer.records, 1 << 20).expect("parse");
    assert_eq!(batches.len(), 1, "only the committed batch");
    let above = p
        .read(3, 1 << 20, CONSUMER, None, None, true, T0)
        .expect("read at HW");
    assert!(above.records.is_empty());
    let follower = p
        .read(
            3,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            None,
            None,
            true,
            T0,
        )
        .expect("follower");
    assert!(!follower.records.is_empty());
    assert_eq!(follower.high_watermark, 3, "HW at read time for offset 3");
}

#[test]
fn fetch_beyond_log_end_is_offset_out_of_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[LEADER],
        &[LEADER],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(2, T0), 1, T0).expect("append");
    let err = p
        .read(3, 1024, CONSUMER, None, None, true, T0)
        .expect_err("beyond");
    assert_eq!(code(&err), ResponseError::OffsetOutOfRange);
    let at_end = p
        .read(2, 1024, CONSUMER, None, None, true, T0)
        .expect("at end");
    assert!(at_end.records.is_empty());
    let err = p
        .read(-1, 1024, CONSUMER, None, None, true, T0)
        .expect_err("below");
    assert_eq!(code(&err), ResponseError::OffsetOutOfRange);
}

#[test]
fn fenced_and_unknown_leader_epochs_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[LEADER],
        &[LEADER],
        PartitionConfig::default(),
    );
    let fenced = p
        .read(0, 1024, CONSUMER, Some(4), None, true, T0)
        .expect_err("older");
    assert_eq!(code(&fenced), ResponseError::FencedLeaderEpoch);
    let unknown = p
        .read(0, 1024, CONSUMER, Some(6), None, true, T0)
        .expect_err("newer");
    assert_eq!(code(&unknown), ResponseError::UnknownLeaderEpoch);
    p.read(0, 1024, CONSUMER, Some(-1), None, true, T0)
        .expect("no epoch given");
    let list = p
        .list_offsets(
            LATEST_TIMESTAMP,
            Some(IsolationLevel::ReadUncommitted),
            Some(4),
            true,
        )
        .expect_err("fenced");
    assert_eq!(code(&list), ResponseError::FencedLeaderEpoch);
    p.make_follower(6, Some(2), &[1, 2], &[1, 2]);
    let not_leader = p
        .read(0, 1024, CONSUMER, Some(6), None, true, T0)
        .expect_err("follower");
    assert_eq!(code(&not_leader), ResponseError::NotLeaderOrFollower);
}

#[test]
fn list_offsets_earliest_latest_max_and_by_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[LEADER],
        &[LEADER],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(3, 1000), 1, 2000).expect("a"); // offsets 0..2, ts 1000..1002
    p.append_as_leader(records(3, 1500), 1, 2000).expect("b"); // offsets 3..5, ts 1500..1502
    p.append_as_leader(records(1, 1200), 1, 2000).expect("c"); // offset 6, ts 1200
    let uncommitted = Some(IsolationLevel::ReadUncommitted);
    let at = |p: &Partition, ts| {
        p.list_offsets(ts, uncommitted, None, true)
            .expect("list")
            .map(|t| (t.timestamp, t.offset))
    };
    assert_eq!(at(&p, EARLIEST_TIMESTAMP), Some((-1, 0)));
    assert_eq!(at(&p, LATEST_TIMESTAMP), Some((-1, 7)));
    assert_eq!(at(&p, MAX_TIMESTAMP), Some((1502, 5)));
    assert_eq!(at(&p, 1001), Some((1001, 1)));
    assert_eq!(
        at(&p, 1100),
        Some((1500, 3)),
        "first record at or after the target"
    );
    assert_eq!(at(&p, 1503), None);
    let latest = p
        .list_offsets(LATEST_TIMESTAMP, uncommitted, None, true)
        .expect("latest");
    assert_eq!(latest.and_then(|t| t.leader_epoch), Some(5));
}

#[test]
fn list_offsets_by_timestamp_only_answers_below_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2],
        &[1, 2],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(2, 1000), 1, 2000).expect("a");
    let committed = p
        .list_offsets(1000, Some(IsolationLevel::ReadUncommitted), None, true)
        .expect("list");
    assert_eq!(committed, None, "offset 0 is above the HW (0)");
    let replica = p.list_offsets(1000, None, None, true).expect("replica");
    assert_eq!(replica.map(|t| t.offset), Some(0));
}

#[test]
fn offset_for_leader_epoch_answers_from_the_epoch_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = open(&dir.path().join("t-0"), PartitionConfig::default());
    p.make_leader(1, &[LEADER], &[LEADER], T0).expect("epoch 1");
    p.append_as_leader(records(3, T0), 1, T0).expect("a");
    p.make_leader(3, &[LEADER], &[LEADER], T0).expect("epoch 3");
    p.append_as_leader(records(2, T0), 1, T0).expect("b");
    let end = |e| p.offset_for_leader_epoch(Some(3), e).expect("answer");
    assert_eq!(
        end(1),
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 3
        }
    );
    assert_eq!(
        end(2),
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 3
        }
    );
    assert_eq!(
        end(3),
        EpochEndOffset {
            leader_epoch: 3,
            end_offset: 5
        }
    );
    assert_eq!(end(4), EpochEndOffset::UNDEFINED);
    assert_eq!(
        code(&p.offset_for_leader_epoch(Some(2), 1).expect_err("fenced")),
        ResponseError::FencedLeaderEpoch
    );
}

/// KIP-101/KIP-320: a follower that wrote records in an epoch the new leader ended earlier
/// learns of the divergence from its fetch (last fetched epoch) and truncates to the leader's
/// end of that epoch; then it fetches the leader's records.
#[test]
fn divergent_follower_truncates_to_the_leaders_epoch_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Leader (broker 1): epoch 1 has offsets 0..2, then epoch 2 starts at 3.
    let mut leader_p = open(&dir.path().join("leader"), PartitionConfig::default());
    leader_p
        .make_leader(1, &[1, 2], &[1, 2], T0)
        .expect("epoch 1");
    leader_p.append_as_leader(records(3, T0), 1, T0).expect("a");
    leader_p
        .make_leader(2, &[1, 2], &[1, 2], T0)
        .expect("epoch 2");
    leader_p.append_as_leader(records(2, T0), 1, T0).expect("b");

    // Follower (broker 2): also had epoch 1 but wrote 5 records in it (offsets 0..4).
    let log = Log::open(&dir.path().join("follower"), LogConfig::default(), 0).expect("log");
    let mut follower = Partition::open(2, log, PartitionConfig::default(), 0, T0).expect("open");
    follower
        .make_leader(1, &[1, 2], &[1, 2], T0)
        .expect("was leader in epoch 1");
    // Batches of one record: truncation removes whole batches (as Kafka's).
    for _ in 0..5 {
        follower
            .append_as_leader(records(1, T0), 1, T0)
            .expect("divergent tail");
    }
    follower.make_follower(2, Some(1), &[1, 2], &[1, 2]);

    let data = leader_p
        .read(
            5,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(2),
            Some(1),
            true,
            T0,
        )
        .expect("fetch");
    let diverging = data.diverging_epoch.expect("diverges");
    assert_eq!(
        diverging,
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 3
        }
    );
    assert!(data.records.is_empty());

    let new_end = follower
        .truncate_to_epoch_end(diverging, T0)
        .expect("truncate");
    assert_eq!(new_end, 3);
    let data = leader_p
        .read(
            3,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(2),
            Some(1),
            true,
            T0,
        )
        .expect("fetch again");
    assert!(data.diverging_epoch.is_none());
    follower
        .append_as_follower(data.records, data.high_watermark, T0)
        .expect("append fetched");
    assert_eq!(follower.log_end_offset(), 5);
    assert_eq!(follower.log().end_offset_for_epoch(2).end_offset, 5);
    assert_eq!(follower.log().end_offset_for_epoch(1).end_offset, 3);
}

/// A follower that was leader in an epoch without appending (its cache holds that epoch at its
/// log end) and the new leader never had: the leader reports the divergence, the follower's
/// truncation removes no record but must drop that epoch, so its next fetch agrees (before,
/// it fetched with the phantom epoch again and again, never catching up).
#[test]
fn an_epoch_led_without_appending_is_dropped_by_the_divergence_truncation() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Leader (broker 1): epoch 1 holds offsets 0..2, then epoch 3 starts at 3.
    let mut leader_p = open(&dir.path().join("leader"), PartitionConfig::default());
    leader_p
        .make_leader(1, &[1, 2], &[1, 2], T0)
        .expect("epoch 1");
    leader_p.append_as_leader(records(3, T0), 1, T0).expect("a");
    // Follower (broker 2) replicates them, then leads epoch 2 without writing.
    let log = Log::open(&dir.path().join("follower"), LogConfig::default(), 0).expect("log");
    let mut follower = Partition::open(2, log, PartitionConfig::default(), 0, T0).expect("open");
    follower.make_follower(1, Some(1), &[1, 2], &[1, 2]);
    let data = leader_p
        .read(
            0,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(1),
            None,
            true,
            T0,
        )
        .expect("fetch");
    follower
        .append_as_follower(data.records, data.high_watermark, T0)
        .expect("replicate");
    follower
        .make_leader(2, &[1, 2], &[1, 2], T0)
        .expect("epoch 2, nothing written");
    assert_eq!(follower.log().leader_epoch_cache().latest_epoch(), Some(2));
    leader_p
        .make_leader(3, &[1, 2], &[1, 2], T0)
        .expect("epoch 3");
    leader_p.append_as_leader(records(2, T0), 3, T0).expect("b");
    follower.make_follower(3, Some(1), &[1, 2], &[1, 2]);

    let last_epoch = |f: &Partition| f.log().leader_epoch_cache().latest_epoch();
    let data = leader_p
        .read(
            3,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(3),
            last_epoch(&follower),
            true,
            T0,
        )
        .expect("fetch");
    let diverging = data.diverging_epoch.expect("epoch 2 diverges");
    assert_eq!(
        diverging,
        EpochEndOffset {
            leader_epoch: 1,
            end_offset: 3
        }
    );
    assert_eq!(
        follower
            .truncate_to_epoch_end(diverging, T0)
            .expect("truncate"),
        3
    );
    assert_eq!(last_epoch(&follower), Some(1));
    let data = leader_p
        .read(
            3,
            1 << 20,
            Fetcher::Follower { replica_id: 2 },
            Some(3),
            last_epoch(&follower),
            true,
            T0,
        )
        .expect("fetch again");
    assert!(data.diverging_epoch.is_none());
    follower
        .append_as_follower(data.records, data.high_watermark, T0)
        .expect("append fetched");
    assert_eq!(follower.log_end_offset(), 5);
}

#[test]
fn truncation_to_undefined_epoch_end_goes_to_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(&dir.path().join("f"), LogConfig::default(), 0).expect("log");
    let mut f = Partition::open(2, log, PartitionConfig::default(), 0, T0).expect("open");
    f.make_leader(1, &[2], &[2], T0).expect("leader");
    f.append_as_leader(records(2, T0), 1, T0).expect("a");
    f.append_as_leader(records(2, T0), 1, T0).expect("b");
    assert_eq!(f.high_watermark(), 4);
    f.make_follower(2, Some(1), &[1, 2], &[1, 2]);
    f.append_as_follower(Bytes::new(), 2, T0)
        .expect("leader HW 2");
    let end = f
        .truncate_to_epoch_end(EpochEndOffset::UNDEFINED, T0)
        .expect("truncate");
    assert_eq!(end, 2);
}

#[test]
fn high_watermark_does_not_advance_while_under_min_isr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PartitionConfig {
        min_insync_replicas: 2,
        ..PartitionConfig::default()
    };
    let mut p = leader(&dir.path().join("t-0"), &[1, 2], &[1], config);
    p.append_as_leader(records(3, T0), 1, T0).expect("acks=1");
    assert!(p.is_under_min_isr());
    assert_eq!(
        p.high_watermark(),
        0,
        "Kafka >= 3.7 holds the HW under min ISR"
    );
    follower_fetch(&mut p, 2, 3, T0 + 1);
    assert_eq!(p.high_watermark(), 0);
    p.update_isr(&[1, 2], T0 + 2);
    assert_eq!(p.high_watermark(), 3);
}

#[test]
fn min_insync_replicas_is_capped_by_the_replica_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = PartitionConfig {
        min_insync_replicas: 3,
        ..PartitionConfig::default()
    };
    let mut p = leader(&dir.path().join("t-0"), &[LEADER], &[LEADER], config);
    let append = p
        .append_as_leader(records(1, T0), -1, T0)
        .expect("acks=all");
    assert!(matches!(
        p.check_enough_replicas_reach_offset(append.wait_for_high_watermark.expect("waits")),
        Some(Ok(()))
    ));
}

/// Kafka takes a producer snapshot at every roll (named after the new segment's base
/// offset), so a restart replays only the tail; retention deletes snapshots below the first
/// remaining segment.
#[test]
fn producer_snapshots_are_taken_at_rolls_and_dropped_by_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let log_config = LogConfig {
        segment_bytes: 300,
        retention_bytes: 100,
        ..LogConfig::default()
    };
    let log = Log::open(&path, log_config.clone(), 0).expect("log");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("open");
    p.make_leader(1, &[LEADER], &[LEADER], T0).expect("leader");
    for seq in 0..8 {
        p.append_as_leader(idempotent(9, 0, seq, 1), 1, T0)
            .expect("append");
        // The roll's background flush writes the snapshot (server/replica_manager.rs runs it).
        if let Some(job) = p.take_roll_flush() {
            let done = job.run();
            p.mark_flushed(done).expect("flushed");
        }
    }
    let snapshot_offsets = |path: &Path| -> Vec<i64> {
        krust_broker::producer_state::list_snapshots(path)
            .expect("list")
            .into_iter()
            .map(|(o, _)| o)
            .collect()
    };
    let bases: Vec<i64> = p
        .log()
        .segments()
        .map(|s| s.base_offset())
        .skip(1)
        .collect();
    assert!(!bases.is_empty(), "the appends rolled");
    assert_eq!(snapshot_offsets(&path), bases);

    let before = p.producer_state().snapshot_entries();
    let recovery_point = p.close().expect("close");
    let log = Log::open(&path, log_config, recovery_point).expect("reopen");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 8, T0).expect("open");
    assert_eq!(p.producer_state().snapshot_entries(), before);

    assert!(p.apply_retention(T0).expect("retention") > 0);
    let first_base = p
        .log()
        .segments()
        .map(|s| s.base_offset())
        .min()
        .expect("segment");
    assert!(snapshot_offsets(&path).iter().all(|&o| o >= first_base));
}

#[test]
fn a_roll_leaves_a_background_flush_that_alone_moves_the_recovery_point() {
    // Kafka 3.9: the roll's producer snapshot is written without fsync and flushed, with the
    // sealed segment, by the scheduler's `flush-log` task; the recovery point (what
    // `recovery-point-offset-checkpoint` records) moves to the new segment's base only then.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let log_config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let log = Log::open(&path, log_config, 0).expect("log");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("open");
    p.make_leader(1, &[LEADER], &[LEADER], T0).expect("leader");
    let mut seq = 0;
    while p.log().segment_count() < 2 {
        p.append_as_leader(idempotent(9, 0, seq, 1), 1, T0)
            .expect("append");
        seq += 1;
    }
    let new_base = p.log().segments().last().expect("active").base_offset();
    assert_eq!(
        p.log().recovery_point(),
        0,
        "the append path fsynced nothing"
    );
    let snapshot = path.join(format!("{new_base:020}.snapshot"));
    assert!(!snapshot.exists(), "nor created a file for the snapshot");
    let job = p.take_roll_flush().expect("the roll left a flush");
    assert_eq!(job.upto_offset(), new_base);
    // Produce goes on while the flush runs without the partition.
    p.append_as_leader(idempotent(9, 0, seq, 1), 1, T0)
        .expect("append");
    assert_eq!(p.log().recovery_point(), 0);
    let done = job.run();
    assert!(p.mark_flushed(done).expect("flushed"));
    assert_eq!(p.log().recovery_point(), new_base);
    assert!(
        snapshot.is_file(),
        "the flush wrote the roll's producer snapshot"
    );
    // It holds the state as of the roll: a reopen from it sees the producer's last sequence.
    let before = p.producer_state().snapshot_entries();
    let rp = p.close().expect("close");
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let log = Log::open(&path, config, rp).expect("reopen");
    let p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("open");
    assert_eq!(p.producer_state().snapshot_entries(), before);
}

#[test]
fn a_roll_snapshot_is_not_published_after_a_truncation() {
    // The snapshot describes the log as of the roll; after a truncation (follower
    // divergence) those offsets may hold other batches, so the flush must not publish it.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let log = Log::open(&path, config, 0).expect("log");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("open");
    p.make_leader(1, &[LEADER], &[LEADER], T0).expect("leader");
    let mut seq = 0;
    while p.log().segment_count() < 2 {
        p.append_as_leader(idempotent(9, 0, seq, 1), 1, T0)
            .expect("append");
        seq += 1;
    }
    let new_base = p.log().segments().last().expect("active").base_offset();
    let job = p.take_roll_flush().expect("roll");
    p.truncate_fully_and_start_at(0, T0).expect("truncate");
    let done = job.run();
    assert!(!p.mark_flushed(done).expect("flushed"));
    assert!(!path.join(format!("{new_base:020}.snapshot")).exists());
    let leftovers: Vec<String> = std::fs::read_dir(&path)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_roll_flush_that_fails_makes_the_partition_refuse_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let log_config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let log = Log::open(&path, log_config, 0).expect("log");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("open");
    p.make_leader(1, &[LEADER], &[LEADER], T0).expect("leader");
    while p.log().segment_count() < 2 {
        p.append_as_leader(records(1, T0), 1, T0).expect("append");
    }
    drop(p.take_roll_flush().expect("roll"));
    let failed = krust_log::LogError::Io {
        path: path.clone(),
        source: std::io::Error::other("injected fsync failure"),
    };
    assert!(p.mark_flushed(Err(failed)).is_err());
    let refused = p
        .append_as_leader(records(1, T0), 1, T0)
        .expect_err("refused");
    assert_eq!(code(&refused), ResponseError::KafkaStorageError);
    assert_eq!(p.log().recovery_point(), 0);
}

mod high_watermark_property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Append(usize),
        /// Follower (2 or 3) fetches at `fraction` of the way to the leader's LEO.
        Fetch {
            replica: i32,
            fraction: u8,
        },
        SetIsr {
            with_2: bool,
            with_3: bool,
        },
        Tick(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1usize..4).prop_map(Op::Append),
            4 => (2i32..4, 0u8..=4).prop_map(|(replica, fraction)| Op::Fetch { replica, fraction }),
            1 => (any::<bool>(), any::<bool>()).prop_map(|(with_2, with_3)| Op::SetIsr { with_2, with_3 }),
            1 => (0i64..40_000).prop_map(Op::Tick),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// Under any interleaving of appends, follower fetches, ISR changes and time, the
        /// leader's HW never moves backwards and never passes its LEO; once every ISR member
        /// has fetched to the end, the HW is the LEO.
        #[test]
        fn leader_high_watermark_is_monotonic_and_bounded(ops in prop::collection::vec(op(), 1..40)) {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut p = leader(&dir.path().join("t-0"), &[1, 2, 3], &[1, 2, 3], PartitionConfig::default());
            let mut now = T0;
            let mut hw = p.high_watermark();
            for op in ops {
                match op {
                    Op::Append(n) => {
                        p.append_as_leader(records(n, T0), 1, now).expect("append");
                    }
                    Op::Fetch { replica, fraction } => {
                        let offset = p.log_end_offset() * i64::from(fraction) / 4;
                        follower_fetch(&mut p, replica, offset, now);
                    }
                    Op::SetIsr { with_2, with_3 } => {
                        let mut isr = vec![1];
                        if with_2 { isr.push(2); }
                        if with_3 { isr.push(3); }
                        p.update_isr(&isr, now);
                    }
                    Op::Tick(ms) => now += ms,
                }
                prop_assert!(p.high_watermark() >= hw, "HW went back from {} to {}", hw, p.high_watermark());
                prop_assert!(p.high_watermark() <= p.log_end_offset());
                hw = p.high_watermark();
            }
            let end = p.log_end_offset();
            for replica in [2, 3] {
                follower_fetch(&mut p, replica, end, now);
            }
            prop_assert_eq!(p.high_watermark(), end);
        }
    }
}

#[test]
fn same_epoch_leader_update_keeps_follower_fetch_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2],
        &[1, 2],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(3, T0), 1, T0).expect("append");
    follower_fetch(&mut p, 2, 3, T0 + 1);
    p.make_leader(5, &[1, 2, 3], &[1, 2], T0 + 2)
        .expect("reassignment adds 3");
    assert_eq!(p.follower_state(2).map(|f| f.log_end_offset), Some(3));
    assert_eq!(p.follower_state(3).map(|f| f.log_end_offset), Some(-1));
    p.make_leader(6, &[1, 2, 3], &[1, 2], T0 + 3)
        .expect("new epoch");
    assert_eq!(p.follower_state(2).map(|f| f.log_end_offset), Some(-1));
    assert_eq!(p.log().end_offset_for_epoch(5).end_offset, 3);
}

/// Kafka's `LogValidator.validateKey`: a compacted topic refuses the whole batch when any
/// record has no key, naming each keyless record; keyed records are accepted.
#[test]
fn compacted_topic_refuses_records_without_a_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("compacted-0");
    let config = LogConfig {
        cleanup_policy: krust_log::CleanupPolicy::Compact,
        ..LogConfig::default()
    };
    let log = Log::open(&path, config, 0).expect("log");
    let mut p = Partition::open(LEADER, log, PartitionConfig::default(), 0, T0).expect("partition");
    p.make_leader(5, &[LEADER], &[LEADER], T0).expect("leader");

    let mut b = RecordBatchBuilder::new(0);
    for i in 0..10i64 {
        let key = (i % 4 != 0).then(|| Bytes::from(format!("k{i}")));
        b.append_kv(T0 + i, key, Some(Bytes::from_static(b"v")));
    }
    let e = p
        .append_as_leader(b.build().into_bytes(), 1, T0)
        .expect_err("keyless records refused");
    assert_eq!(code(&e), ResponseError::InvalidRecord);
    match &e {
        PartitionError::RecordsWithoutKey {
            topic_partition,
            record_indices,
        } => {
            assert_eq!(topic_partition, "compacted-0");
            assert_eq!(record_indices, &vec![0, 4, 8]);
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(
        p.log_end_offset(),
        0,
        "nothing of the refused batch is written"
    );

    let mut keyed = RecordBatchBuilder::new(0);
    keyed.append_kv(
        T0,
        Some(Bytes::from_static(b"k")),
        Some(Bytes::from_static(b"v")),
    );
    p.append_as_leader(keyed.build().into_bytes(), 1, T0)
        .expect("keyed record accepted");
    assert_eq!(p.log_end_offset(), 1);
}

/// Kafka's `isReplicaIsrEligible`: a caught-up follower outside the ISR holds the HW back so
/// it can join, unless its broker is fenced or in controlled shutdown.
#[test]
fn a_caught_up_follower_on_an_ineligible_broker_does_not_hold_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = leader(
        &dir.path().join("t-0"),
        &[1, 2, 3],
        &[1, 2],
        PartitionConfig::default(),
    );
    p.append_as_leader(records(5, T0), 1, T0).expect("append");
    follower_fetch(&mut p, 3, 5, T0 + 1);
    follower_fetch(&mut p, 2, 5, T0 + 1);
    assert_eq!(p.high_watermark(), 5);
    p.append_as_leader(records(5, T0), 1, T0 + 2)
        .expect("append");
    follower_fetch(&mut p, 2, 10, T0 + 3);
    assert_eq!(p.high_watermark(), 5, "caught-up replica 3 holds it back");
    assert!(p.set_ineligible_replicas(&BTreeSet::from([3]), T0 + 4));
    assert_eq!(p.high_watermark(), 10, "not once broker 3 is shutting down");
    assert!(!p.set_ineligible_replicas(&BTreeSet::from([3]), T0 + 5));
}
