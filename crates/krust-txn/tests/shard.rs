//! The transaction coordinator shard driven as the broker runtime drives it: requests in,
//! appends committed (or failed) by hand, markers acknowledged, timers fired with explicit
//! time. Expected answers are Kafka 3.9's (`TransactionCoordinator.scala`,
//! `TransactionMetadata.scala`).

use std::collections::BTreeSet;

use krust_txn::{
    Action, AppendId, MarkerJob, Reply, RequestId, TopicPartition, TxnConfig, TxnCoordinatorShard,
    TxnError, TxnState,
    records::{decode_key, decode_value},
};

const T0: i64 = 1_000_000;
const TIMEOUT: i32 = 60_000;

struct Harness {
    shard: TxnCoordinatorShard,
    next_request: u64,
    next_pid: i64,
    now: i64,
}

#[derive(Debug, Default)]
struct Drained {
    appends: Vec<(AppendId, String, Option<krust_txn::TxnLogValue>)>,
    replies: Vec<(RequestId, Result<Reply, TxnError>)>,
    markers: Vec<MarkerJob>,
}

impl Harness {
    fn new() -> Self {
        Harness::with_config(TxnConfig::default())
    }

    fn with_config(config: TxnConfig) -> Self {
        Harness {
            shard: TxnCoordinatorShard::new(3, 7, config, T0),
            next_request: 0,
            next_pid: 1000,
            now: T0,
        }
    }

    fn drain(&mut self) -> Drained {
        let mut d = Drained::default();
        while let Some(a) = self.shard.poll_action() {
            match a {
                Action::Append { id, key, value, .. } => {
                    let txn = decode_key(&key).expect("key decodes");
                    let v = decode_value(&txn, value.as_deref()).expect("value decodes");
                    d.appends.push((id, txn, v));
                }
                Action::Respond { request, result } => d.replies.push((request, result)),
                Action::WriteMarkers(job) => d.markers.push(job),
            }
        }
        d
    }

    fn request(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    /// Sends a request, commits every append it causes, returns the one answer.
    fn commit_all(&mut self) -> Drained {
        let mut all = Drained::default();
        loop {
            let d = self.drain();
            if d.appends.is_empty() && d.replies.is_empty() && d.markers.is_empty() {
                return all;
            }
            for (id, _, _) in &d.appends {
                self.shard.handle_append_committed(self.now, *id);
            }
            all.appends.extend(d.appends);
            all.replies.extend(d.replies);
            all.markers.extend(d.markers);
        }
    }

    fn init(&mut self, txn: &str, pid: i64, epoch: i16) -> Result<Reply, TxnError> {
        let r = self.request();
        let fresh = self.shard.needs_new_producer_id(txn).then(|| {
            self.next_pid += 1;
            self.next_pid
        });
        self.shard
            .handle_init_producer_id(self.now, r, txn, TIMEOUT, pid, epoch, fresh);
        self.one_reply(r)
    }

    fn add(
        &mut self,
        txn: &str,
        pid: i64,
        epoch: i16,
        parts: &[(&str, i32)],
    ) -> Result<Reply, TxnError> {
        let r = self.request();
        let set = tps(parts);
        self.shard
            .handle_add_partitions(self.now, r, txn, pid, epoch, &set);
        self.one_reply(r)
    }

    fn end(
        &mut self,
        txn: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
    ) -> (Result<Reply, TxnError>, Vec<MarkerJob>) {
        let r = self.request();
        self.shard
            .handle_end_txn(self.now, r, txn, pid, epoch, commit);
        let d = self.commit_all();
        let replies: Vec<_> = d.replies.iter().filter(|(id, _)| *id == r).collect();
        assert_eq!(replies.len(), 1, "one answer to EndTxn: {d:?}");
        (replies[0].1, d.markers)
    }

    fn one_reply(&mut self, r: RequestId) -> Result<Reply, TxnError> {
        let d = self.commit_all();
        let replies: Vec<_> = d.replies.iter().filter(|(id, _)| *id == r).collect();
        assert_eq!(replies.len(), 1, "one answer: {d:?}");
        replies[0].1
    }

    fn state(&self, txn: &str) -> TxnState {
        self.shard.transaction(txn).expect("id is known").state
    }
}

fn tps(parts: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    parts
        .iter()
        .map(|(t, p)| TopicPartition::new(*t, *p))
        .collect()
}

fn pid_epoch(r: Result<Reply, TxnError>) -> (i64, i16) {
    match r {
        Ok(Reply::ProducerId {
            producer_id,
            producer_epoch,
        }) => (producer_id, producer_epoch),
        other => panic!("expected a producer id, got {other:?}"),
    }
}

#[test]
fn commit_goes_through_prepare_markers_and_complete() {
    // Kafka 3.9's answers: nothing held while the markers are written.
    let mut h = Harness::with_config(TxnConfig {
        add_partitions_hold_ms: 0,
        ..TxnConfig::default()
    });
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    assert_eq!(epoch, 0, "a new id starts at epoch 0");
    assert_eq!(h.state("tx"), TxnState::Empty);

    assert_eq!(
        h.add("tx", pid, epoch, &[("a", 0), ("b", 1)]),
        Ok(Reply::Done)
    );
    assert_eq!(h.state("tx"), TxnState::Ongoing);
    assert_eq!(h.shard.transaction("tx").expect("tx is known").start_ms, T0);
    // Already in the transaction: answered at once, nothing written.
    let r = h.request();
    h.shard
        .handle_add_partitions(h.now, r, "tx", pid, epoch, &tps(&[("a", 0)]));
    let d = h.drain();
    assert!(d.appends.is_empty());
    assert_eq!(d.replies, vec![(r, Ok(Reply::Done))]);

    let (reply, markers) = h.end("tx", pid, epoch, true);
    assert_eq!(
        reply,
        Ok(Reply::Done),
        "answered once PrepareCommit is durable"
    );
    assert_eq!(h.state("tx"), TxnState::PrepareCommit);
    assert_eq!(
        markers,
        vec![MarkerJob {
            transactional_id: "tx".into(),
            producer_id: pid,
            producer_epoch: epoch,
            commit: true,
            coordinator_epoch: 7,
            partitions: tps(&[("a", 0), ("b", 1)]),
        }]
    );
    // While markers are written every request for the id must wait.
    assert_eq!(h.init("tx", -1, -1), Err(TxnError::ConcurrentTransactions));
    assert_eq!(
        h.add("tx", pid, epoch, &[("c", 0)]),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        h.end("tx", pid, epoch, true).0,
        Err(TxnError::ConcurrentTransactions)
    );

    h.shard.handle_markers_written("tx", pid, epoch);
    let d = h.commit_all();
    assert_eq!(d.appends.len(), 1);
    let complete = d.appends[0].2.as_ref().expect("not a tombstone");
    assert_eq!(complete.state, TxnState::CompleteCommit);
    assert!(complete.partitions.is_empty());
    assert_eq!(h.state("tx"), TxnState::CompleteCommit);

    // EndTxn retried after completion: NONE; the opposite result: INVALID_TXN_STATE.
    assert_eq!(h.end("tx", pid, epoch, true).0, Ok(Reply::Done));
    assert_eq!(
        h.end("tx", pid, epoch, false).0,
        Err(TxnError::InvalidTxnState)
    );
    // The next transaction starts from CompleteCommit.
    assert_eq!(h.add("tx", pid, epoch, &[("a", 0)]), Ok(Reply::Done));
    let (reply, markers) = h.end("tx", pid, epoch, false);
    assert_eq!(reply, Ok(Reply::Done));
    assert!(!markers[0].commit);
}

/// An AddPartitions for the next transaction while the markers of the previous one are written
/// is held for its Complete record, then handled as if it had arrived after it; one still
/// waiting when its hold runs out gets Kafka's CONCURRENT_TRANSACTIONS; refusals that do not
/// depend on the completion are answered at once.
#[test]
fn add_partitions_while_completing_is_held_for_the_complete_record() {
    let mut h = Harness::new();
    let hold = TxnConfig::default().add_partitions_hold_ms;
    assert_eq!(hold, 100);
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    assert_eq!(h.add("tx", pid, epoch, &[("a", 0)]), Ok(Reply::Done));
    let (reply, _) = h.end("tx", pid, epoch, true);
    assert_eq!(reply, Ok(Reply::Done));

    // Held while the markers are written, past the Complete append's start.
    let held = h.request();
    h.shard
        .handle_add_partitions(h.now, held, "tx", pid, epoch, &tps(&[("b", 0)]));
    assert!(h.drain().replies.is_empty(), "held, not refused");
    assert_eq!(h.shard.poll_timeout(), h.now + hold, "a timer for the hold");
    // A stale epoch is refused at once, held or not.
    assert_eq!(
        h.add("tx", pid, epoch - 1, &[("b", 0)]),
        Err(TxnError::ProducerFenced)
    );
    h.now += 5;
    h.shard.handle_markers_written("tx", pid, epoch);
    let complete = h.drain();
    assert_eq!(complete.appends.len(), 1);
    assert!(complete.replies.is_empty(), "still held during the append");
    h.shard
        .handle_append_committed(h.now, complete.appends[0].0);
    // Released: handled as a new transaction's first AddPartitions.
    let d = h.commit_all();
    assert_eq!(d.replies, vec![(held, Ok(Reply::Done))]);
    assert_eq!(h.state("tx"), TxnState::Ongoing);
    assert_eq!(
        h.shard.transaction("tx").expect("known").partitions,
        tps(&[("b", 0)])
    );

    // Markers that take longer than the hold: CONCURRENT_TRANSACTIONS at its end.
    let (reply, _) = h.end("tx", pid, epoch, true);
    assert_eq!(reply, Ok(Reply::Done));
    let late = h.request();
    h.shard
        .handle_add_partitions(h.now, late, "tx", pid, epoch, &tps(&[("c", 0)]));
    assert!(h.drain().replies.is_empty());
    h.now += hold - 1;
    h.shard.handle_timeout(h.now);
    assert!(h.drain().replies.is_empty(), "not yet");
    h.now += 1;
    h.shard.handle_timeout(h.now);
    assert_eq!(
        h.drain().replies,
        vec![(late, Err(TxnError::ConcurrentTransactions))]
    );
    h.shard.handle_markers_written("tx", pid, epoch);
    h.commit_all();
    assert_eq!(h.state("tx"), TxnState::CompleteCommit);
}

#[test]
fn end_txn_refusals_are_kafkas() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    assert_eq!(
        h.end("tx", pid, epoch, true).0,
        Err(TxnError::InvalidTxnState),
        "Empty"
    );
    assert_eq!(
        h.end("nope", pid, epoch, true).0,
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.end("tx", pid + 1, epoch, true).0,
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.end("tx", pid, epoch + 1, true).0,
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(h.end("", pid, epoch, true).0, Err(TxnError::InvalidRequest));
    assert_eq!(TxnError::ProducerFenced.code(), 90);
    assert_eq!(
        TxnError::ProducerFenced.code_for(false),
        47,
        "INVALID_PRODUCER_EPOCH for old clients"
    );
    // A second InitProducerId fences the first producer.
    let (_, epoch2) = pid_epoch(h.init("tx", -1, -1));
    assert_eq!(epoch2, 1);
    assert_eq!(
        h.add("tx", pid, epoch, &[("a", 0)]),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        h.add("nope", pid, epoch2, &[("a", 0)]),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn init_producer_id_refusals() {
    let mut h = Harness::new();
    assert_eq!(
        h.init("tx", 5, -1),
        Err(TxnError::InvalidRequest),
        "pid without epoch"
    );
    assert_eq!(
        h.init("tx", -1, 3),
        Err(TxnError::InvalidRequest),
        "epoch without pid"
    );
    assert_eq!(h.init("", -1, -1), Err(TxnError::InvalidRequest));
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", 900_001, -1, -1, Some(1));
    assert_eq!(h.one_reply(r), Err(TxnError::InvalidTransactionTimeout));
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", 0, -1, -1, Some(1));
    assert_eq!(h.one_reply(r), Err(TxnError::InvalidTransactionTimeout));
    // No producer id could be allocated for a new id: retriable.
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", TIMEOUT, -1, -1, None);
    assert_eq!(h.one_reply(r), Err(TxnError::CoordinatorLoadInProgress));
}

#[test]
fn kip360_bump_retry_and_fencing() {
    let mut h = Harness::new();
    let (pid, e0) = pid_epoch(h.init("tx", -1, -1));
    // The producer recovers with its current pair: epoch+1, last epoch remembered.
    let (pid1, e1) = pid_epoch(h.init("tx", pid, e0));
    assert_eq!((pid1, e1), (pid, e0 + 1));
    // The answer was lost; the same request again returns the same epoch.
    assert_eq!(pid_epoch(h.init("tx", pid, e0)), (pid, e1));
    // An epoch neither current nor last: fenced.
    assert_eq!(h.init("tx", pid, e0 + 5), Err(TxnError::ProducerFenced));
    // Another producer id: fenced.
    assert_eq!(h.init("tx", pid + 77, 0), Err(TxnError::ProducerFenced));
}

#[test]
fn exhausted_epoch_rotates_the_producer_id() {
    let mut h = Harness::new();
    let (pid, _) = pid_epoch(h.init("tx", -1, -1));
    // Load a record at the last usable epoch.
    let mut loaded = TxnCoordinatorShard::new(3, 7, TxnConfig::default(), T0);
    let value = krust_txn::TxnLogValue {
        producer_id: pid,
        producer_epoch: i16::MAX - 1,
        timeout_ms: TIMEOUT,
        state: TxnState::CompleteCommit,
        partitions: BTreeSet::new(),
        last_update_ms: T0,
        start_ms: T0,
    };
    loaded
        .replay(
            Some(&krust_txn::records::encode_key("tx")),
            Some(&krust_txn::records::encode_value(&value)),
        )
        .expect("accepted");
    loaded.finish_load(T0);
    h.shard = loaded;
    assert!(h.shard.needs_new_producer_id("tx"));
    let (new_pid, epoch) = pid_epoch(h.init("tx", pid, i16::MAX - 1));
    assert_ne!(new_pid, pid);
    assert_eq!(epoch, 0);
    // The producer retries after losing that answer: the old pid with its exhausted epoch is
    // still accepted (lastProducerId), and gets a bump of the new id.
    let (again, e) = pid_epoch(h.init("tx", pid, i16::MAX - 1));
    assert_eq!(again, new_pid);
    assert!(e <= 1);
}

#[test]
fn init_while_ongoing_fences_and_aborts() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    h.add("tx", pid, epoch, &[("a", 0)]).expect("accepted");
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", TIMEOUT, -1, -1, None);
    let d = h.commit_all();
    assert_eq!(d.replies, vec![(r, Err(TxnError::ConcurrentTransactions))]);
    let abort = d.appends[0].2.as_ref().expect("not a tombstone");
    assert_eq!(
        (abort.state, abort.producer_epoch),
        (TxnState::PrepareAbort, epoch + 1)
    );
    assert_eq!(d.markers.len(), 1);
    assert!(!d.markers[0].commit);
    assert_eq!(d.markers[0].producer_epoch, epoch + 1);
    // The old producer is fenced.
    assert_eq!(
        h.end("tx", pid, epoch, true).0,
        Err(TxnError::ProducerFenced)
    );
    // Retrying while markers are written: still CONCURRENT_TRANSACTIONS.
    assert_eq!(h.init("tx", -1, -1), Err(TxnError::ConcurrentTransactions));
    h.shard.handle_markers_written("tx", pid, epoch + 1);
    h.commit_all();
    assert_eq!(h.state("tx"), TxnState::CompleteAbort);
    assert_eq!(pid_epoch(h.init("tx", -1, -1)), (pid, epoch + 2));
}

#[test]
fn timed_out_transactions_are_aborted_with_a_bumped_epoch() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    h.add("tx", pid, epoch, &[("a", 0)]).expect("accepted");
    let (pid2, e2) = pid_epoch(h.init("young", -1, -1));
    h.now = T0 + i64::from(TIMEOUT) - 1;
    h.add("young", pid2, e2, &[("a", 1)]).expect("accepted");
    // Not before the scan interval and the timeout have passed.
    assert_eq!(h.shard.poll_timeout(), T0 + 10_000);
    h.now = T0 + i64::from(TIMEOUT) + 1;
    h.shard.handle_timeout(h.now);
    let d = h.commit_all();
    assert_eq!(d.appends.len(), 1, "only the expired one: {d:?}");
    assert_eq!(d.appends[0].1, "tx");
    assert_eq!(d.markers[0].producer_epoch, epoch + 1);
    assert!(d.replies.is_empty());
    assert_eq!(
        h.add("tx", pid, epoch, &[("b", 0)]),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(h.state("young"), TxnState::Ongoing);
}

#[test]
fn idle_ids_expire_with_a_tombstone() {
    let config = TxnConfig {
        transactional_id_expiration_ms: 1_000,
        remove_expired_interval_ms: 500,
        ..TxnConfig::default()
    };
    let mut h = Harness::with_config(config);
    let (pid, epoch) = pid_epoch(h.init("idle", -1, -1));
    pid_epoch(h.init("busy", -1, -1));
    let (bp, be) = (
        h.shard
            .transaction("busy")
            .expect("busy is known")
            .producer_id,
        0,
    );
    h.now = T0 + 900;
    h.add("busy", bp, be, &[("a", 0)]).expect("accepted");
    h.now = T0 + 1_000;
    h.shard.handle_timeout(h.now);
    let d = h.commit_all();
    assert_eq!(d.appends.len(), 1);
    assert_eq!(
        (d.appends[0].1.as_str(), d.appends[0].2.clone()),
        ("idle", None)
    );
    assert!(h.shard.transaction("idle").is_none());
    assert_eq!(
        h.shard.describe("idle"),
        Err(TxnError::TransactionalIdNotFound)
    );
    assert_eq!(
        h.end("idle", pid, epoch, true).0,
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert!(
        h.shard.transaction("busy").is_some(),
        "Ongoing ids never expire"
    );
}

#[test]
fn verify_only_reports_each_partition() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    h.add("tx", pid, epoch, &[("a", 0)]).expect("accepted");
    let parts = tps(&[("a", 0), ("a", 1)]);
    let got = h
        .shard
        .verify_partitions("tx", pid, epoch, &parts)
        .expect("accepted");
    assert_eq!(
        got,
        vec![
            (TopicPartition::new("a", 0), Ok(())),
            (
                TopicPartition::new("a", 1),
                Err(TxnError::TransactionAbortable)
            ),
        ]
    );
    assert!(h.drain().appends.is_empty(), "verification writes nothing");
    assert_eq!(
        h.shard.verify_partitions("tx", pid, epoch + 1, &parts),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        h.shard.verify_partitions("other", pid, epoch, &parts),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(h.end("tx", pid, epoch, true).0, Ok(Reply::Done));
    assert_eq!(
        h.shard.verify_partitions("tx", pid, epoch, &parts),
        Err(TxnError::ConcurrentTransactions)
    );
}

#[test]
fn failed_appends_leave_the_state_and_map_errors() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    let r = h.request();
    h.shard
        .handle_add_partitions(h.now, r, "tx", pid, epoch, &tps(&[("a", 0)]));
    let d = h.drain();
    h.shard.handle_append_failed(h.now, d.appends[0].0, 6); // NOT_LEADER_OR_FOLLOWER
    let d = h.drain();
    assert_eq!(d.replies, vec![(r, Err(TxnError::NotCoordinator))]);
    assert_eq!(h.state("tx"), TxnState::Empty);
    assert_eq!(
        TxnError::from_append_error(19),
        TxnError::CoordinatorNotAvailable
    );
    assert_eq!(TxnError::from_append_error(7).code(), 15);
    assert_eq!(TxnError::from_append_error(10).code(), -1);
    // Nothing pending is left behind: the next attempt works.
    assert_eq!(h.add("tx", pid, epoch, &[("a", 0)]), Ok(Reply::Done));

    // A failed fence: the epoch stays bumped in memory and is not bumped again.
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", TIMEOUT, -1, -1, None);
    let d = h.drain();
    h.shard.handle_append_failed(h.now, d.appends[0].0, 7);
    assert_eq!(
        h.drain().replies,
        vec![(r, Err(TxnError::CoordinatorNotAvailable))]
    );
    assert_eq!(
        h.shard
            .transaction("tx")
            .expect("tx is known")
            .producer_epoch,
        epoch + 1
    );
    let r = h.request();
    h.shard
        .handle_init_producer_id(h.now, r, "tx", TIMEOUT, -1, -1, None);
    let d = h.commit_all();
    assert_eq!(
        d.appends[0]
            .2
            .as_ref()
            .expect("not a tombstone")
            .producer_epoch,
        epoch + 1
    );

    // A failed Complete append is retried after a back-off.
    h.shard.handle_markers_written("tx", pid, epoch + 1);
    let d = h.drain();
    assert_eq!(h.shard.log_append_retry_queue_size(), 0);
    h.shard.handle_append_failed(h.now, d.appends[0].0, 19);
    assert!(h.drain().appends.is_empty());
    assert_eq!(
        h.shard.log_append_retry_queue_size(),
        1,
        "waits for its retry"
    );
    h.now += 100;
    assert_eq!(h.shard.poll_timeout(), h.now);
    h.shard.handle_timeout(h.now);
    assert_eq!(
        h.shard.log_append_retry_queue_size(),
        0,
        "being appended again"
    );
    h.commit_all();
    assert_eq!(h.state("tx"), TxnState::CompleteAbort);
}

#[test]
fn load_resends_markers_of_prepared_transactions() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("tx", -1, -1));
    h.add("tx", pid, epoch, &[("a", 0)]).expect("accepted");
    let (p2, e2) = pid_epoch(h.init("gone", -1, -1));
    let _ = (p2, e2);
    // Record everything the first coordinator wrote, up to PrepareCommit.
    let r = h.request();
    h.shard.handle_end_txn(h.now, r, "tx", pid, epoch, true);
    let mut log: Vec<(bytes::Bytes, Option<bytes::Bytes>)> = Vec::new();
    let mut first = TxnCoordinatorShard::new(3, 7, TxnConfig::default(), T0);
    // Rebuild a log by replaying the actions of a fresh coordinator.
    let mut req = 0;
    let drive = |s: &mut TxnCoordinatorShard,
                 log: &mut Vec<(bytes::Bytes, Option<bytes::Bytes>)>| {
        while let Some(a) = s.poll_action() {
            if let Action::Append { id, key, value, .. } = a {
                log.push((key, value));
                s.handle_append_committed(T0, id);
            }
        }
    };
    req += 1;
    first.handle_init_producer_id(T0, RequestId(req), "tx", TIMEOUT, -1, -1, Some(42));
    drive(&mut first, &mut log);
    req += 1;
    first.handle_init_producer_id(T0, RequestId(req), "gone", TIMEOUT, -1, -1, Some(43));
    drive(&mut first, &mut log);
    req += 1;
    first.handle_add_partitions(T0, RequestId(req), "tx", 42, 0, &tps(&[("a", 0), ("b", 2)]));
    drive(&mut first, &mut log);
    req += 1;
    first.handle_end_txn(T0, RequestId(req), "tx", 42, 0, true);
    drive(&mut first, &mut log);
    log.push((krust_txn::records::encode_key("gone"), None));

    let mut second = TxnCoordinatorShard::new(3, 8, TxnConfig::default(), T0 + 5);
    for (k, v) in &log {
        second.replay(Some(k), v.as_deref()).expect("accepted");
    }
    second.finish_load(T0 + 5);
    assert!(second.transaction("gone").is_none(), "tombstone removes");
    let m = second.transaction("tx").expect("tx is loaded");
    assert_eq!(m.state, TxnState::PrepareCommit);
    let mut markers = Vec::new();
    while let Some(a) = second.poll_action() {
        if let Action::WriteMarkers(job) = a {
            markers.push(job);
        }
    }
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0].coordinator_epoch, 8);
    assert_eq!(markers[0].partitions, tps(&[("a", 0), ("b", 2)]));
    assert!(markers[0].commit);

    // A corrupt record is a clear error, not a panic.
    let mut third = TxnCoordinatorShard::new(3, 9, TxnConfig::default(), T0);
    let (k, v) = &log[0];
    let mut bad = v.as_ref().expect("not a tombstone").to_vec();
    bad.truncate(bad.len() - 3);
    let err = third.replay(Some(k), Some(&bad)).expect_err("corrupt");
    assert!(err.to_string().contains("cut short"), "{err}");
    assert!(third.replay(None, Some(&bad)).is_err());
}

#[test]
fn describe_and_list() {
    let mut h = Harness::new();
    let (pid, epoch) = pid_epoch(h.init("a", -1, -1));
    h.add("a", pid, epoch, &[("t", 0), ("t", 1)])
        .expect("accepted");
    pid_epoch(h.init("b", -1, -1));
    let d = h.shard.describe("a").expect("a is known");
    assert_eq!(
        (d.state, d.producer_id, d.start_ms),
        (TxnState::Ongoing, pid, T0)
    );
    assert_eq!(d.partitions.len(), 2);
    assert_eq!(
        h.shard.describe("zz"),
        Err(TxnError::TransactionalIdNotFound)
    );
    let none = BTreeSet::new();
    assert_eq!(h.shard.list(None, &none, -1, T0).len(), 2);
    let ongoing: BTreeSet<_> = [TxnState::Ongoing].into();
    let l = h.shard.list(Some(&ongoing), &none, -1, T0);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].transactional_id, "a");
    let pids: BTreeSet<_> = [pid].into();
    assert_eq!(h.shard.list(None, &pids, -1, T0).len(), 1);
    assert_eq!(h.shard.list(Some(&ongoing), &none, 10, T0 + 10).len(), 0);
    assert_eq!(h.shard.list(Some(&ongoing), &none, 10, T0 + 11).len(), 1);
    assert!(
        h.shard
            .list(Some(&BTreeSet::new()), &none, -1, T0)
            .is_empty()
    );
}
