//! Crash safety of the KRaft quorum with real processes: a writer appends numbered entries
//! (through the leader's `--test-append-socket`) while the test SIGKILLs the leader ten times,
//! restarting it each time. Afterwards every node's metadata log, read back from the segment
//! files with krust-log once the processes are stopped, holds the same committed records, and
//! every acknowledged entry is there exactly once at the offset it was acknowledged with. The
//! writer never re-sends a number, so an entry whose outcome was unknown may be present (once)
//! or absent, but nothing appears twice.

#[path = "quorum_support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{
    FAST_TIMEOUTS, Quorum, append_via, data_records, read_metadata_log, wait_for_quorum,
};

const ROUNDS: usize = 10;
const WAIT: Duration = Duration::from_secs(60);

#[test]
fn acknowledged_entries_survive_ten_leader_crashes_exactly_once_on_every_node() {
    let mut quorum = Quorum::new(3, FAST_TIMEOUTS);
    quorum.start_all();
    let sockets: Vec<_> = quorum.nodes.iter().map(support::Node::socket).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeMap<u64, i64>>> = Arc::default();
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        std::thread::spawn(move || {
            let mut next = 0u64;
            let mut target = 0usize;
            let mut failures = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let entry = format!("entry-{next}");
                match append_via(&sockets[target], &entry) {
                    Ok(offset) => {
                        acked.lock().expect("lock").insert(next, offset);
                    }
                    Err(_) => {
                        failures += 1;
                        target = (target + 1) % sockets.len();
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                // Never re-send a number: its outcome may be unknown.
                next += 1;
            }
            (next, failures)
        })
    };

    let mut epochs = Vec::new();
    for round in 0..ROUNDS {
        let before = acked.lock().expect("lock").len();
        let q = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
            .unwrap_or_else(|| panic!("round {round}: no leader\n{}", quorum.log_tails()));
        // Let some entries commit in this leader's epoch before crashing it.
        for _ in 0..200 {
            if acked.lock().expect("lock").len() >= before + 5 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (leader, epoch) = (q.leader_id, q.leader_epoch);
        quorum.kill(leader);
        let survivors = quorum.bootstrap_without(&[leader]);
        let next = wait_for_quorum(&survivors, WAIT, |q| {
            q.leader_epoch > epoch && q.leader_id != leader
        })
        .unwrap_or_else(|| {
            panic!(
                "round {round}: no new leader after killing {leader}\n{}",
                quorum.log_tails()
            )
        });
        epochs.push((leader, epoch, next.leader_id, next.leader_epoch));
        quorum.start(leader);
    }
    stop.store(true, Ordering::Relaxed);
    let (sent, failures) = writer.join().expect("writer thread");
    let acked = acked.lock().expect("lock").clone();
    println!("kills (old leader, epoch -> new leader, epoch): {epochs:?}");
    println!(
        "entries sent {sent}, acknowledged {}, failed or unknown {failures}",
        acked.len()
    );
    assert!(
        acked.len() >= ROUNDS * 5,
        "too few acknowledged entries: {}",
        acked.len()
    );

    // Everybody caught up to the same committed end, then stop and read the files.
    let q = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| {
        let end = q.voters.iter().map(|v| v.log_end_offset).max();
        q.voters.len() == 3
            && q.voters.iter().all(|v| Some(v.log_end_offset) == end)
            && Some(q.high_watermark) == end
    })
    .unwrap_or_else(|| panic!("quorum did not catch up\n{}", quorum.log_tails()));
    let committed_end = q.high_watermark;
    quorum.stop_all();

    let logs: Vec<_> = quorum
        .nodes
        .iter()
        .map(|n| {
            read_metadata_log(&n.data_dir())
                .into_iter()
                .filter(|r| r.offset < committed_end)
                .collect::<Vec<_>>()
        })
        .collect();
    for (i, log) in logs.iter().enumerate().skip(1) {
        assert_eq!(
            log.len(),
            logs[0].len(),
            "node {} holds {} committed records, node 1 {}",
            i + 1,
            log.len(),
            logs[0].len()
        );
        for (a, b) in logs[0].iter().zip(log) {
            assert_eq!(
                a,
                b,
                "node 1 and node {} differ at offset {}",
                i + 1,
                a.offset
            );
        }
    }
    let data = data_records(&logs[0], committed_end);
    let mut seen: BTreeMap<&str, i64> = BTreeMap::new();
    for (offset, value) in &data {
        if let Some(first) = seen.insert(value, *offset) {
            panic!("{value} is in the log twice: offsets {first} and {offset}");
        }
    }
    for (n, offset) in &acked {
        let value = format!("entry-{n}");
        assert_eq!(
            seen.get(value.as_str()),
            Some(offset),
            "acknowledged {value} at offset {offset} is not there"
        );
    }
    println!(
        "committed end offset {committed_end}: {} data records, all {} acknowledged entries present once, logs identical on 3 nodes",
        data.len(),
        acked.len()
    );
}
