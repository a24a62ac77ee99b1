//! A seeded random walk over the transaction coordinator shard: random InitProducerId,
//! AddPartitions, EndTxn (right and stale epochs), appends committed or failed in order,
//! markers acknowledged late, timers fired. After every step: at most one pending transition
//! per id, every answer arrives exactly once, and the state rebuilt from the records the shard
//! wrote (what a new coordinator loads) equals the live state, memory-only fields aside.
//! `KRUST_SIM_SEED=n` replays one seed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use krust_txn::{
    Action, AppendId, MarkerJob, RequestId, TopicPartition, TxnConfig, TxnCoordinatorShard,
    TxnState,
};

/// A small deterministic generator (xorshift64*), so the test needs no rand dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("KRUST_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("KRUST_SIM_SEED is a number")],
        Err(_) => (1..=25).collect(),
    }
}

const IDS: [&str; 3] = ["a", "b", "c"];

fn run(seed: u64) -> Result<usize, String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let config = TxnConfig {
        abort_timed_out_interval_ms: 1_000,
        remove_expired_interval_ms: 5_000,
        transactional_id_expiration_ms: 20_000,
        ..TxnConfig::default()
    };
    let mut now = 1_000_000i64;
    let mut shard = TxnCoordinatorShard::new(0, 1, config.clone(), now);
    let mut log: Vec<(Bytes, Option<Bytes>)> = Vec::new();
    let mut appends: VecDeque<(AppendId, Bytes, Option<Bytes>)> = VecDeque::new();
    let mut markers: Vec<MarkerJob> = Vec::new();
    let mut open_requests: BTreeSet<RequestId> = BTreeSet::new();
    let mut next_request = 0u64;
    let mut next_pid = 100i64;
    // What each id's producer believes: (pid, epoch).
    let mut producers: BTreeMap<&str, (i64, i16)> = BTreeMap::new();
    for step in 0..400 {
        let id = IDS[rng.below(3) as usize];
        next_request += 1;
        let r = RequestId(next_request);
        match rng.below(10) {
            0 | 1 => {
                let fresh = shard.needs_new_producer_id(id).then(|| {
                    next_pid += 1;
                    next_pid
                });
                open_requests.insert(r);
                shard.handle_init_producer_id(now, r, id, 5_000, -1, -1, fresh);
            }
            2 | 3 => {
                let (pid, epoch) = producers.get(id).copied().unwrap_or((1, 0));
                let stale = rng.below(5) == 0;
                let parts: BTreeSet<TopicPartition> = (0..=rng.below(2))
                    .map(|p| TopicPartition::new("t", i32::try_from(p).unwrap_or(0)))
                    .collect();
                open_requests.insert(r);
                shard.handle_add_partitions(now, r, id, pid, epoch - i16::from(stale), &parts);
            }
            4 => {
                let (pid, epoch) = producers.get(id).copied().unwrap_or((1, 0));
                open_requests.insert(r);
                shard.handle_end_txn(now, r, id, pid, epoch, rng.below(2) == 0);
            }
            5..=7 => {
                // The oldest append commits (or fails: the partition moved for a moment).
                if let Some((append, key, value)) = appends.pop_front() {
                    if rng.below(8) == 0 {
                        shard.handle_append_failed(now, append, 19);
                    } else {
                        log.push((key, value));
                        shard.handle_append_committed(now, append);
                    }
                }
            }
            8 => {
                if !markers.is_empty() {
                    let job = markers.remove(rng.below(markers.len() as u64) as usize);
                    shard.handle_markers_written(
                        &job.transactional_id,
                        job.producer_id,
                        job.producer_epoch,
                    );
                }
            }
            _ => {
                now += i64::try_from(rng.below(3_000)).unwrap_or(0);
                shard.handle_timeout(now);
            }
        }
        while let Some(action) = shard.poll_action() {
            match action {
                Action::Append { id, key, value, .. } => appends.push_back((id, key, value)),
                Action::Respond { request, result } => {
                    if !open_requests.remove(&request) {
                        return Err(format!(
                            "step {step}: {request:?} answered twice or unasked"
                        ));
                    }
                    if let Ok(krust_txn::Reply::ProducerId {
                        producer_id,
                        producer_epoch,
                    }) = result
                    {
                        // The request's id is not echoed: find whose InitProducerId it was by
                        // the metadata that now carries this pid.
                        for m in shard.transactions() {
                            if m.producer_id == producer_id {
                                let key = IDS.iter().find(|i| **i == m.transactional_id);
                                if let Some(k) = key {
                                    producers.insert(k, (producer_id, producer_epoch));
                                }
                            }
                        }
                    }
                }
                Action::WriteMarkers(job) => markers.push(job),
            }
        }
        for m in shard.transactions() {
            if m.state == TxnState::Dead || m.state == TxnState::PrepareEpochFence {
                return Err(format!(
                    "step {step}: {} rests in {:?}",
                    m.transactional_id, m.state
                ));
            }
        }
        // Everything whose append is not outstanding must equal a reload of the log.
        let outstanding: BTreeSet<&str> = shard
            .transactions()
            .filter(|m| m.pending.is_some())
            .map(|m| m.transactional_id.as_str())
            .collect();
        let mut reloaded = TxnCoordinatorShard::new(0, 2, config.clone(), now);
        for (k, v) in &log {
            reloaded
                .replay(Some(k), v.as_deref())
                .map_err(|e| format!("step {step}: written record does not load: {e}"))?;
        }
        for m in shard.transactions() {
            if outstanding.contains(m.transactional_id.as_str()) || m.producer_epoch < 0 {
                continue;
            }
            let Some(l) = reloaded.transaction(&m.transactional_id) else {
                // Created in memory by an InitProducerId whose write failed.
                continue;
            };
            let live = (
                m.producer_id,
                m.state,
                &m.partitions,
                m.timeout_ms,
                m.start_ms,
            );
            let loaded = (
                l.producer_id,
                l.state,
                &l.partitions,
                l.timeout_ms,
                l.start_ms,
            );
            // A fence bumps the epoch in memory before its abort is written (as Kafka), so
            // the live epoch may be one ahead of the log's after a failed fence write.
            if live != loaded
                || !(l.producer_epoch..=l.producer_epoch + 1).contains(&m.producer_epoch)
            {
                return Err(format!(
                    "step {step}: {} live {live:?} epoch {} != loaded {loaded:?} epoch {}",
                    m.transactional_id, m.producer_epoch, l.producer_epoch
                ));
            }
        }
    }
    // How many transactions completed (a walk that never gets there checks little).
    let completed = log
        .iter()
        .filter_map(|(k, v)| {
            let id = krust_txn::records::decode_key(k).ok()?;
            krust_txn::records::decode_value(&id, v.as_deref()).ok()?
        })
        .filter(|v| matches!(v.state, TxnState::CompleteCommit | TxnState::CompleteAbort))
        .count();
    Ok(completed)
}

#[test]
fn state_rebuilt_from_written_records_equals_live_state() {
    let mut completed = 0;
    for seed in seeds() {
        match run(seed) {
            Ok(n) => completed += n,
            Err(failure) => panic!(
                "{failure}\nrerun: KRUST_SIM_SEED={seed} cargo test -p krust-txn --test random_walk"
            ),
        }
    }
    eprintln!("completed transactions over all seeds: {completed}");
    assert!(completed > 0, "the walk never completed a transaction");
}
