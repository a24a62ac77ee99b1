//! Idempotent producer state: the checks a leader applies to client batches (Kafka 3.9
//! `ProducerAppendInfo`), the snapshot file format, and rebuild from snapshot + log tail.

use std::path::Path;

use bytes::Bytes;
use krust_broker::producer_state::{
    AppendCheck, ProducerBatch, ProducerStateError, ProducerStateManager, SnapshotEntry,
    decode_snapshot, encode_snapshot, increment_sequence, list_snapshots,
};
use krust_log::{Log, LogConfig, RecordBatch, RecordBatchBuilder};
use proptest::prelude::*;

const DAY_MS: i64 = 86_400_000;
const T0: i64 = 1_700_000_000_000;

fn batch(pid: i64, epoch: i16, seq: i32, count: usize, ts: i64) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(0).producer(pid, epoch, seq);
    for i in 0..count {
        b.append_kv(ts, None, Some(Bytes::from(format!("v{i}"))));
    }
    b.build()
}

fn header(pid: i64, epoch: i16, seq: i32, count: i32) -> ProducerBatch {
    ProducerBatch {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        last_offset_delta: count - 1,
        is_transactional: false,
        is_control: false,
    }
}

fn open_log(dir: &Path) -> Log {
    Log::open(dir, LogConfig::default(), 0).expect("open log")
}

/// Appends as leader after the client checks, as the partition does.
fn append(log: &mut Log, state: &mut ProducerStateManager, b: RecordBatch) -> AppendCheck {
    let check = state
        .check_client_append(&[ProducerBatch::of(&b)])
        .expect("accepted");
    if check == AppendCheck::Append {
        let info = log.append_as_leader(vec![b], 0, T0).expect("append");
        for written in &info.batches {
            state.apply_batch(written);
        }
    }
    check
}

#[test]
fn duplicate_of_a_retained_batch_returns_its_original_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    let mut state = ProducerStateManager::new(DAY_MS);
    assert_eq!(
        append(&mut log, &mut state, batch(7, 0, 0, 3, T0)),
        AppendCheck::Append
    );
    assert_eq!(
        append(&mut log, &mut state, batch(7, 0, 3, 2, T0)),
        AppendCheck::Append
    );
    let check = state
        .check_client_append(&[header(7, 0, 0, 3)])
        .expect("duplicate is not an error");
    let AppendCheck::Duplicate { index, original } = check else {
        panic!("expected duplicate, got {check:?}");
    };
    assert_eq!(
        (index, original.first_offset(), original.last_offset),
        (0, 0, 2)
    );
    assert_eq!(log.log_end_offset(), 5);
}

#[test]
fn only_the_last_five_batches_are_recognised_as_duplicates() {
    let mut state = ProducerStateManager::new(DAY_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    for seq in 0..6 {
        append(&mut log, &mut state, batch(1, 0, seq, 1, T0));
    }
    assert_eq!(state.entry(1).expect("entry").batches.len(), 5);
    // Batch 0 fell out of the window: it is now simply out of sequence.
    assert!(matches!(
        state.check_client_append(&[header(1, 0, 0, 1)]),
        Err(ProducerStateError::OutOfOrderSequence { .. })
    ));
    assert!(matches!(
        state.check_client_append(&[header(1, 0, 1, 1)]),
        Ok(AppendCheck::Duplicate { .. })
    ));
}

#[test]
fn sequence_gap_is_out_of_order() {
    let mut state = ProducerStateManager::new(DAY_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    append(&mut log, &mut state, batch(1, 0, 0, 2, T0));
    let err = state
        .check_client_append(&[header(1, 0, 5, 1)])
        .expect_err("gap");
    assert_eq!(
        err,
        ProducerStateError::OutOfOrderSequence {
            producer_id: 1,
            epoch: 0,
            first_seq: 5,
            last_seq: 1,
            current_epoch: 0
        }
    );
    // A gap between two batches of the same request is caught too.
    assert!(
        state
            .check_client_append(&[header(1, 0, 2, 1), header(1, 0, 4, 1)])
            .is_err()
    );
    assert_eq!(
        state.check_client_append(&[header(1, 0, 2, 1), header(1, 0, 3, 1)]),
        Ok(AppendCheck::Append)
    );
}

#[test]
fn epoch_bump_starts_at_sequence_zero_and_fences_the_old_epoch() {
    let mut state = ProducerStateManager::new(DAY_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    append(&mut log, &mut state, batch(1, 3, 0, 4, T0));
    assert!(matches!(
        state.check_client_append(&[header(1, 4, 4, 1)]),
        Err(ProducerStateError::OutOfOrderSequence { .. })
    ));
    assert_eq!(
        append(&mut log, &mut state, batch(1, 4, 0, 1, T0)),
        AppendCheck::Append
    );
    let entry = state.entry(1).expect("entry");
    assert_eq!((entry.producer_epoch, entry.batches.len()), (4, 1));
    assert_eq!(
        state.check_client_append(&[header(1, 3, 4, 1)]),
        Err(ProducerStateError::InvalidProducerEpoch {
            producer_id: 1,
            epoch: 3,
            current_epoch: 4
        })
    );
}

#[test]
fn unknown_producer_is_accepted_at_any_sequence_as_in_kafka_3_9() {
    let state = ProducerStateManager::new(DAY_MS);
    assert_eq!(
        state.check_client_append(&[header(42, 0, 17, 3)]),
        Ok(AppendCheck::Append)
    );
}

#[test]
fn sequence_wraps_from_i32_max_to_zero() {
    assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    let mut state = ProducerStateManager::new(DAY_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    append(&mut log, &mut state, batch(1, 0, i32::MAX - 1, 2, T0));
    assert_eq!(state.entry(1).expect("entry").last_seq(), i32::MAX);
    assert_eq!(
        state.check_client_append(&[header(1, 0, 0, 1)]),
        Ok(AppendCheck::Append)
    );
    // A batch spanning the wrap is a duplicate by its wrapped range.
    append(&mut log, &mut state, batch(1, 0, 0, 1, T0));
    append(&mut log, &mut state, batch(2, 0, i32::MAX, 3, T0));
    assert!(matches!(
        state.check_client_append(&[header(2, 0, i32::MAX, 3)]),
        Ok(AppendCheck::Duplicate { .. })
    ));
    assert_eq!(state.entry(2).expect("entry").last_seq(), 1);
}

#[test]
fn producers_expire_after_producer_id_expiration_ms() {
    let mut state = ProducerStateManager::new(DAY_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_log(&dir.path().join("t-0"));
    append(&mut log, &mut state, batch(1, 0, 0, 1, T0));
    append(&mut log, &mut state, batch(2, 0, 0, 1, T0 + 1000));
    assert_eq!(state.remove_expired(T0 + DAY_MS - 1), 0);
    assert_eq!(state.remove_expired(T0 + DAY_MS), 1);
    assert!(state.entry(1).is_none() && state.entry(2).is_some());
}

#[test]
fn snapshot_has_kafkas_version_1_layout() {
    let entry = SnapshotEntry {
        producer_id: 0x0102_0304_0506_0708,
        producer_epoch: 2,
        last_sequence: 9,
        last_offset: 100,
        offset_delta: 4,
        timestamp: T0,
        coordinator_epoch: -1,
        current_txn_first_offset: -1,
    };
    let bytes = encode_snapshot(&[entry]);
    assert_eq!(bytes.len(), 2 + 4 + 4 + 46);
    assert_eq!(&bytes[0..2], &[0, 1], "version 1");
    assert_eq!(&bytes[6..10], &[0, 0, 0, 1], "one entry");
    assert_eq!(
        &bytes[10..18],
        &[1, 2, 3, 4, 5, 6, 7, 8],
        "producer_id first"
    );
    assert_eq!(&bytes[18..20], &[0, 2], "then epoch");
    let crc = u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    assert_eq!(crc, crc32c::crc32c(&bytes[6..]));
    assert_eq!(decode_snapshot(&bytes), Ok(vec![entry]));

    let mut corrupt = bytes.clone();
    corrupt[20] ^= 1;
    assert!(decode_snapshot(&corrupt).expect_err("crc").contains("CRC"));
    assert!(decode_snapshot(&bytes[..bytes.len() - 1]).is_err());
    let mut v2 = bytes;
    v2[1] = 2;
    assert!(decode_snapshot(&v2).is_err());
}

#[test]
fn corrupt_snapshot_is_deleted_and_state_rebuilt_by_full_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = open_log(&path);
    let mut state = ProducerStateManager::new(DAY_MS);
    append(&mut log, &mut state, batch(1, 0, 0, 2, T0));
    let snap = state.write_snapshot(&path).expect("snapshot");
    std::fs::write(&snap, b"garbage").expect("corrupt it");
    let loaded = ProducerStateManager::load(&log, DAY_MS, T0).expect("load");
    assert_eq!(loaded.snapshot_entries(), state.snapshot_entries());
    assert!(list_snapshots(&path).expect("list").is_empty());
}

#[test]
fn snapshots_beyond_the_log_end_are_deleted_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let mut log = open_log(&path);
    let mut state = ProducerStateManager::new(DAY_MS);
    append(&mut log, &mut state, batch(1, 0, 0, 2, T0));
    state.write_snapshot(&path).expect("snapshot at 2");
    log.truncate_to(1).expect("truncate");
    let loaded = ProducerStateManager::load(&log, DAY_MS, T0).expect("load");
    assert!(list_snapshots(&path).expect("list").is_empty());
    assert_eq!(
        loaded.last_map_offset(),
        0,
        "the truncated batch is gone whole"
    );
}

/// Kinds of appends in the generated histories.
#[derive(Debug, Clone)]
enum Step {
    Next { producer: i64, count: usize },
    Bump { producer: i64 },
    Plain,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0i64..3, 1usize..4).prop_map(|(producer, count)| Step::Next { producer, count }),
        1 => (0i64..3).prop_map(|producer| Step::Bump { producer }),
        1 => Just(Step::Plain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// However a history is cut by a snapshot, state loaded from the snapshot plus the log
    /// tail equals state replayed from the whole log (in what a snapshot keeps).
    #[test]
    fn state_from_snapshot_and_tail_equals_full_replay(
        steps in prop::collection::vec(step(), 1..25),
        cut in 0usize..25,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t-0");
        let mut log = open_log(&path);
        let mut state = ProducerStateManager::new(DAY_MS);
        let mut seqs = [(0i16, 0i32); 3];
        for (i, s) in steps.iter().enumerate() {
            if i == cut {
                state.write_snapshot(&path).expect("snapshot");
            }
            let b = match *s {
                Step::Next { producer, count } => {
                    let (epoch, seq) = seqs[producer as usize];
                    seqs[producer as usize] = (epoch, seq + count as i32);
                    batch(producer, epoch, seq, count, T0 + i as i64)
                }
                Step::Bump { producer } => {
                    let (epoch, _) = seqs[producer as usize];
                    seqs[producer as usize] = (epoch + 1, 1);
                    batch(producer, epoch + 1, 0, 1, T0 + i as i64)
                }
                Step::Plain => {
                    let mut b = RecordBatchBuilder::new(0);
                    b.append_kv(T0, None, None);
                    b.build()
                }
            };
            prop_assert_eq!(append(&mut log, &mut state, b), AppendCheck::Append);
        }
        let loaded = ProducerStateManager::load(&log, DAY_MS, T0).expect("load");
        let mut replayed = ProducerStateManager::new(DAY_MS);
        replayed.replay(&log, 0).expect("replay");
        prop_assert_eq!(loaded.snapshot_entries(), replayed.snapshot_entries());
        prop_assert_eq!(loaded.snapshot_entries(), state.snapshot_entries());
        prop_assert_eq!(loaded.last_map_offset(), log.log_end_offset());
        // Both accept the next batch of every producer.
        for (producer, &(epoch, seq)) in seqs.iter().enumerate() {
            let next = header(producer as i64, epoch, seq, 1);
            prop_assert_eq!(loaded.check_client_append(&[next]), replayed.check_client_append(&[next]));
        }
    }
}
