//! `RaftCore::handle_send_failed` (the driver's hook for refused or reset connections): a
//! failed request is resent after `retry.backoff.ms`, as Kafka's request manager does, instead
//! of waiting for the full `controller.quorum.request.timeout.ms`.

use std::time::{Duration, Instant};

use krust_raft::core::RecoveredLog;
use krust_raft::{Action, NodeId, RaftConfig, RaftCore, RaftRequest, RequestId};
use rand::SeedableRng as _;
use rand::rngs::StdRng;

fn vote_requests(core: &mut RaftCore) -> Vec<(NodeId, RequestId)> {
    let mut out = Vec::new();
    while let Some(action) = core.poll_action() {
        if let Action::SendRequest {
            to,
            id,
            request: RaftRequest::Vote(_),
        } = action
        {
            out.push((to, id));
        }
    }
    out
}

#[test]
fn a_refused_vote_request_is_resent_after_the_retry_backoff_not_the_request_timeout() {
    let mut config = RaftConfig::new(NodeId(1), "cluster", [NodeId(1), NodeId(2), NodeId(3)]);
    config.request_timeout_ms = 2000;
    config.retry_backoff_ms = 20;
    let start = Instant::now();
    let mut core = RaftCore::new(
        config,
        None,
        RecoveredLog::default(),
        StdRng::seed_from_u64(7),
        start,
    )
    .expect("core");
    // Run the election timer out: the replica becomes a candidate and asks both peers.
    let mut now = start;
    let mut sent = Vec::new();
    for _ in 0..10 {
        let Some(due) = core.poll_timeout() else {
            break;
        };
        now = due;
        core.handle_timeout(now);
        sent = vote_requests(&mut core);
        if !sent.is_empty() {
            break;
        }
    }
    assert_eq!(sent.len(), 2, "a candidate asks both other voters");
    let (peer, id) = sent[0];

    core.handle_send_failed(now, id);
    let due = core.poll_timeout().expect("a timer");
    assert!(
        due <= now + Duration::from_millis(20),
        "resend due after retry.backoff.ms"
    );
    core.handle_timeout(now + Duration::from_millis(20));
    let resent = vote_requests(&mut core);
    assert_eq!(
        resent.iter().map(|(to, _)| *to).collect::<Vec<_>>(),
        vec![peer],
        "only the failed one"
    );
    assert_ne!(resent[0].1, id, "a new request id");

    // An unknown id (already answered, or from an earlier life) changes nothing.
    let before = core.poll_timeout();
    core.handle_send_failed(now, RequestId(u64::MAX));
    assert_eq!(core.poll_timeout(), before);
}
