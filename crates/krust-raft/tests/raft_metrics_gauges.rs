//! The `raft-metrics` gauges the core reports, against Kafka 3.9's `KafkaRaftMetrics`:
//! `current-vote` is the replica's own id while it is candidate or leader (Kafka returns
//! `localIdOrThrow()` for both), and `current-state` names the role.

use std::time::Instant;

use krust_raft::core::RecoveredLog;
use krust_raft::{NodeId, RaftConfig, RaftCore, RoleKind};
use rand::SeedableRng as _;
use rand::rngs::StdRng;

/// Runs timers (draining actions and reporting flushes) until `role` or 50 rounds.
fn run_until(core: &mut RaftCore, start: Instant, role: RoleKind) {
    let mut now = start;
    for _ in 0..50 {
        while let Some(action) = core.poll_action() {
            if let krust_raft::Action::Flush { end_offset } = action {
                core.handle_flushed(now, end_offset);
            }
        }
        if core.role() == role {
            return;
        }
        let Some(due) = core.poll_timeout() else {
            break;
        };
        now = due.max(now);
        core.handle_timeout(now);
    }
    assert_eq!(core.role(), role, "never reached {role:?}");
}

#[test]
fn current_vote_is_the_own_id_as_candidate_and_as_leader() {
    let start = Instant::now();
    let mut single = RaftCore::new(
        RaftConfig::new(NodeId(1), "cluster", [NodeId(1)]),
        None,
        RecoveredLog::default(),
        StdRng::seed_from_u64(1),
        start,
    )
    .expect("core");
    run_until(&mut single, start, RoleKind::Leader);
    let m = single.metrics();
    assert_eq!(m.current_state, "leader");
    assert_eq!(m.current_leader, 1);
    assert_eq!(m.current_vote, 1, "a leader reports its own id (Kafka 3.9)");

    let mut three = RaftCore::new(
        RaftConfig::new(NodeId(2), "cluster", [NodeId(1), NodeId(2), NodeId(3)]),
        None,
        RecoveredLog::default(),
        StdRng::seed_from_u64(2),
        start,
    )
    .expect("core");
    assert_eq!(three.metrics().current_vote, -1, "unattached, no vote");
    run_until(&mut three, start, RoleKind::Candidate);
    let m = three.metrics();
    assert_eq!(m.current_state, "candidate");
    assert_eq!(m.current_vote, 2, "a candidate votes for itself");
    assert_eq!(m.current_leader, -1);
}
