//! Scenario tests for one [`RaftCore`], ported from Kafka 3.9's `KafkaRaftClientTest` and
//! `KafkaRaftClientSnapshotTest` (names in each test's doc line). Each test drives the core with
//! explicit virtual time and asserts on the actions it emits.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    BeginQuorumEpochRequest, DescribeQuorumRequest, EndQuorumEpochRequest, FetchRequest,
    VoteRequest, describe_quorum_request,
};
use kafka_protocol::protocol::StrBytes;
use krust_log::batch::{RecordBatch, RecordBatchBuilder};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::wire::{self, FetchAnswer};
use super::*;

const CLUSTER: &str = "test-cluster";

fn batch(base: i64, epoch: i32, records: usize) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(epoch);
    for i in 0..records {
        b.append_kv(0, None, Some(Bytes::from(format!("r{}", base + i as i64))));
    }
    b.build()
}

/// Batches of `(epoch, records)` laid end to end from offset 0.
fn log_of(shape: &[(i32, usize)]) -> Vec<RecordBatch> {
    let mut out: Vec<RecordBatch> = Vec::new();
    for (epoch, n) in shape {
        let base = out.last().map_or(0, RecordBatch::next_offset);
        out.push(batch(base, *epoch, *n));
    }
    out
}

fn concat(batches: &[RecordBatch]) -> Bytes {
    let mut out = Vec::new();
    for b in batches {
        out.extend_from_slice(b.as_bytes());
    }
    Bytes::from(out)
}

fn n(id: i32) -> NodeId {
    NodeId(id)
}

/// The test harness: one core, virtual time, collected actions.
struct Ctx {
    core: RaftCore,
    now: Instant,
    next_inbound: u64,
}

struct Builder {
    me: i32,
    voters: Vec<i32>,
    state: Option<QuorumStateData>,
    log: RecoveredLog,
    tune: fn(&mut RaftConfig),
}

impl Builder {
    fn new(me: i32, voters: &[i32]) -> Self {
        Self {
            me,
            voters: voters.to_vec(),
            state: None,
            log: RecoveredLog::default(),
            tune: |_| {},
        }
    }

    fn state(mut self, epoch: i32, leader: Option<i32>, voted: Option<i32>) -> Self {
        self.state = Some(QuorumStateData {
            leader_epoch: LeaderEpoch(epoch),
            leader_id: leader.map(NodeId),
            voted_id: voted.map(NodeId),
            voted_directory_id: uuid::Uuid::nil(),
            current_voters: None,
            data_version: 0,
        });
        self
    }

    fn log(mut self, batches: Vec<RecordBatch>) -> Self {
        self.log.batches = batches;
        self
    }

    fn snapshot_at_start(mut self, start: i64, epoch: i32) -> Self {
        self.log.log_start_offset = LogOffset(start);
        self.log.latest_snapshot = Some(OffsetAndEpoch::new(start, epoch));
        self.log.earliest_snapshot = Some(OffsetAndEpoch::new(start, epoch));
        self
    }

    fn tune(mut self, f: fn(&mut RaftConfig)) -> Self {
        self.tune = f;
        self
    }

    fn build(self) -> Ctx {
        let mut config = RaftConfig::new(
            NodeId(self.me),
            CLUSTER,
            self.voters.iter().map(|v| NodeId(*v)),
        );
        (self.tune)(&mut config);
        let now = Instant::now();
        let core = RaftCore::new(config, self.state, self.log, StdRng::seed_from_u64(42), now)
            .expect("core starts");
        Ctx {
            core,
            now,
            next_inbound: 1_000,
        }
    }
}

impl Ctx {
    fn take(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.core.poll_action()).collect()
    }

    fn advance(&mut self, ms: u64) -> Vec<Action> {
        self.now += Duration::from_millis(ms);
        self.core.handle_timeout(self.now);
        self.take()
    }

    /// Advances until `handle_timeout` is due (at most `max_ms`) and fires it.
    fn run_timers(&mut self, max_ms: u64) -> Vec<Action> {
        let limit = self.now + Duration::from_millis(max_ms);
        let mut out = Vec::new();
        while let Some(at) = self.core.poll_timeout() {
            if at > limit {
                break;
            }
            self.now = self.now.max(at);
            self.core.handle_timeout(self.now);
            out.extend(self.take());
        }
        out
    }

    fn request(&mut self, from: i32, request: RaftRequest) -> (RequestId, Vec<Action>) {
        self.next_inbound += 1;
        let id = RequestId(self.next_inbound);
        self.core.handle_request(self.now, n(from), id, request);
        (id, self.take())
    }

    /// Reports every requested flush as done.
    fn flush_all(&mut self, actions: &[Action]) -> Vec<Action> {
        let mut out = Vec::new();
        for a in actions {
            if let Action::Flush { end_offset } = a {
                self.core.handle_flushed(self.now, *end_offset);
                out.extend(self.take());
            }
        }
        out
    }

    fn vote(&mut self, from: i32, epoch: i32, last_epoch: i32, last_offset: i64) -> Vec<Action> {
        let me = self.core.config().node_id;
        let r = wire::vote_request(
            CLUSTER,
            me,
            LeaderEpoch(epoch),
            n(from),
            OffsetAndEpoch::new(last_offset, last_epoch),
        );
        self.request(from, RaftRequest::Vote(r)).1
    }

    fn fetch(
        &mut self,
        from: i32,
        epoch: i32,
        offset: i64,
        last_epoch: i32,
        max_wait_ms: u64,
    ) -> (RequestId, Vec<Action>) {
        let r = wire::fetch_request(
            CLUSTER,
            n(from),
            LeaderEpoch(epoch),
            OffsetAndEpoch::new(offset, last_epoch),
            max_wait_ms,
            1 << 20,
        );
        self.request(from, RaftRequest::Fetch(r))
    }

    fn begin_epoch(&mut self, from: i32, epoch: i32) -> Vec<Action> {
        let me = self.core.config().node_id;
        let r = wire::begin_quorum_epoch_request(CLUSTER, me, n(from), LeaderEpoch(epoch));
        self.request(from, RaftRequest::BeginQuorumEpoch(r)).1
    }

    fn end_epoch(&mut self, from: i32, epoch: i32, preferred: &[i32]) -> Vec<Action> {
        let preferred: Vec<NodeId> = preferred.iter().map(|p| n(*p)).collect();
        let r = wire::end_quorum_epoch_request(CLUSTER, n(from), LeaderEpoch(epoch), &preferred);
        self.request(from, RaftRequest::EndQuorumEpoch(r)).1
    }

    fn respond(&mut self, from: i32, id: RequestId, response: RaftResponse) -> Vec<Action> {
        self.core.handle_response(self.now, n(from), id, response);
        self.take()
    }

    /// Makes this (voter) core the leader of the next epoch with the given voters granting.
    fn elect(&mut self) -> Vec<Action> {
        let mut actions = self.take();
        while !matches!(self.core.role(), RoleKind::Candidate | RoleKind::Leader) {
            let at = self.core.poll_timeout().expect("an election timer");
            self.now = self.now.max(at);
            self.core.handle_timeout(self.now);
            actions.extend(self.take());
        }
        let requests = vote_requests(&actions);
        assert!(
            !requests.is_empty() || self.core.role() == RoleKind::Leader,
            "no election started: {actions:?}"
        );
        for (to, id) in requests {
            let epoch = self.core.epoch();
            let info = wire::LeaderInfo {
                error: None,
                leader_id: None,
                epoch,
            };
            actions.extend(self.respond(
                to.0,
                id,
                RaftResponse::Vote(wire::vote_response(info, true)),
            ));
            if self.core.role() == RoleKind::Leader {
                break;
            }
        }
        assert_eq!(self.core.role(), RoleKind::Leader);
        actions
    }
}

fn vote_requests(actions: &[Action]) -> Vec<(NodeId, RequestId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendRequest {
                to,
                id,
                request: RaftRequest::Vote(_),
            } => Some((*to, *id)),
            _ => None,
        })
        .collect()
}

fn fetch_requests(actions: &[Action]) -> Vec<(NodeId, RequestId, FetchRequest)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendRequest {
                to,
                id,
                request: RaftRequest::Fetch(r),
            } => Some((*to, *id, r.clone())),
            _ => None,
        })
        .collect()
}

fn vote_answer(actions: &[Action]) -> (Option<ResponseError>, Option<ResponseError>, bool) {
    for a in actions {
        if let Action::SendResponse {
            response: RaftResponse::Vote(r),
            ..
        } = a
        {
            let (top, part) = wire::parse_vote_response(r).expect("well-formed");
            return match part {
                Some((info, granted)) => (top, info.error, granted),
                None => (top, None, false),
            };
        }
    }
    panic!("no VoteResponse in {actions:?}");
}

fn fetch_answer(actions: &[Action]) -> (Option<ResponseError>, Option<FetchAnswer>) {
    for a in actions {
        if let Action::SendResponse {
            response: RaftResponse::Fetch(r),
            ..
        } = a
        {
            return wire::parse_fetch_response(r).expect("well-formed");
        }
    }
    panic!("no FetchResponse in {actions:?}");
}

fn responded(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::SendResponse { .. }))
}

fn partition_error<T>(
    answer: (Option<ResponseError>, Option<T>),
    get: impl Fn(&T) -> Option<ResponseError>,
) -> Option<ResponseError> {
    answer.0.or_else(|| answer.1.as_ref().and_then(get))
}

fn persisted(actions: &[Action]) -> Vec<QuorumStateData> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::PersistQuorumState(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

fn appended(actions: &[Action]) -> Vec<RecordBatch> {
    actions
        .iter()
        .flat_map(|a| match a {
            Action::Append { batches } => batches.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn hw_advances(actions: &[Action]) -> Vec<LogOffset> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::HighWatermarkAdvanced(o) => Some(*o),
            _ => None,
        })
        .collect()
}

// -------------------------------------------------------------------------------------------------
// Initialisation
// -------------------------------------------------------------------------------------------------

/// testInitializeSingleMemberQuorum / testLeaderAppendSingleMemberQuorum: a lone voter is
/// leader at once, writes the LeaderChange control batch, and commits on its own flush.
#[test]
fn single_member_quorum_becomes_leader_and_commits_alone() {
    let mut ctx = Builder::new(1, &[1]).build();
    let actions = ctx.take();
    assert_eq!(ctx.core.role(), RoleKind::Leader);
    assert_eq!(ctx.core.epoch(), LeaderEpoch(1));
    let batches = appended(&actions);
    assert_eq!(batches.len(), 1);
    assert!(
        batches[0].is_control(),
        "first batch of the epoch is the LeaderChange control batch"
    );
    assert_eq!(batches[0].partition_leader_epoch(), 1);
    assert!(
        !actions.iter().any(|a| matches!(
            a,
            Action::LeaderChange {
                leader: Some(_),
                ..
            }
        )),
        "no 'I lead' before the epoch start is committed and handed up"
    );
    let after = ctx.flush_all(&actions);
    assert_eq!(hw_advances(&after), vec![LogOffset(1)]);
    let commit = after
        .iter()
        .position(|a| matches!(a, Action::Commit { .. }));
    let lead = after.iter().position(|a| {
        *a == Action::LeaderChange {
            leader: Some(n(1)),
            epoch: LeaderEpoch(1),
        }
    });
    assert!(
        commit.is_some() && commit < lead,
        "LeaderChange follows the Commit: {after:?}"
    );
    let last = ctx
        .core
        .append(ctx.now, LeaderEpoch(1), vec![Bytes::from_static(b"a")])
        .expect("leader appends");
    assert_eq!(last, LogOffset(1));
    let actions = ctx.advance(25); // linger
    let after = ctx.flush_all(&actions);
    assert_eq!(hw_advances(&after), vec![LogOffset(2)]);
    assert!(
        after
            .iter()
            .any(|a| matches!(a, Action::Commit { batches } if batches[0].base_offset() == 1))
    );
}

/// testInitializeAsResignedAndBecomeCandidate: a restarted leader never writes in its old epoch;
/// it is Resigned, then stands for election in the next epoch.
#[test]
fn restarted_leader_resigns_then_stands_in_the_next_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(5, Some(1), None)
        .log(log_of(&[(5, 2)]))
        .build();
    assert_eq!(ctx.core.role(), RoleKind::Resigned);
    assert_eq!(ctx.core.epoch(), LeaderEpoch(5));
    let actions = ctx.take();
    assert!(persisted(&actions).is_empty(), "Resigned is soft state");
    let ends = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::SendRequest {
                    request: RaftRequest::EndQuorumEpoch(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(ends, 2, "EndQuorumEpoch to both other voters");
    let actions = ctx.run_timers(2_000);
    assert_eq!(ctx.core.role(), RoleKind::Candidate);
    assert_eq!(ctx.core.epoch(), LeaderEpoch(6));
    assert_eq!(persisted(&actions)[0].voted_id, Some(n(1)));
}

/// testInitializeAsCandidateFromStateStore: restarting after voting for itself resumes the
/// candidacy in the same epoch (it already voted there).
#[test]
fn restarted_self_voter_is_candidate_in_the_same_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(4, None, Some(1)).build();
    assert_eq!(
        (ctx.core.role(), ctx.core.epoch()),
        (RoleKind::Candidate, LeaderEpoch(4))
    );
    assert_eq!(vote_requests(&ctx.take()).len(), 2);
}

/// QuorumState.initialize: a persisted epoch behind the log's last epoch moves up to it.
#[test]
fn persisted_epoch_behind_the_log_is_raised_to_the_log_epoch() {
    let ctx = Builder::new(1, &[1, 2, 3])
        .state(2, None, None)
        .log(log_of(&[(2, 1), (4, 1)]))
        .build();
    assert_eq!(
        (ctx.core.role(), ctx.core.epoch()),
        (RoleKind::Unattached, LeaderEpoch(4))
    );
}

/// Restart as follower: a persisted leader that is not us makes us its follower, fetching at once.
#[test]
fn restarted_follower_fetches_from_its_leader() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(3, Some(2), None)
        .log(log_of(&[(3, 2)]))
        .build();
    assert_eq!(ctx.core.role(), RoleKind::Follower);
    let fetches = fetch_requests(&ctx.take());
    assert_eq!(fetches.len(), 1);
    let args = wire::fetch_args(&fetches[0].2).expect("raft fetch");
    assert_eq!(
        (
            fetches[0].0,
            args.fetch_offset,
            args.last_fetched_epoch,
            args.current_leader_epoch
        ),
        (n(2), 2, 3, 3)
    );
    assert_eq!(args.max_wait_ms, 500);
}

// -------------------------------------------------------------------------------------------------
// Elections
// -------------------------------------------------------------------------------------------------

/// testInitializeAsCandidateAndBecomeLeaderQuorumOfThree: the election timer fires within
/// [T, 2T), the candidate persists its self-vote before asking, and one grant makes a leader
/// that announces itself with BeginQuorumEpoch.
#[test]
fn candidate_with_a_majority_becomes_leader() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    assert!(ctx.take().is_empty() || ctx.core.role() == RoleKind::Unattached);
    let deadline = ctx.core.poll_timeout().expect("election timer armed");
    let wait = deadline - ctx.now;
    assert!(
        wait >= Duration::from_millis(1000) && wait < Duration::from_millis(2000),
        "{wait:?}"
    );
    let actions = ctx.run_timers(2_000);
    assert!(
        matches!(actions[0], Action::PersistQuorumState(_)),
        "self-vote is durable before the requests: {actions:?}"
    );
    assert_eq!(ctx.core.role(), RoleKind::Candidate);
    let requests = vote_requests(&actions);
    assert_eq!(requests.len(), 2);
    let (to, id) = requests[0];
    let info = wire::LeaderInfo {
        error: None,
        leader_id: None,
        epoch: LeaderEpoch(1),
    };
    let actions = ctx.respond(
        to.0,
        id,
        RaftResponse::Vote(wire::vote_response(info, true)),
    );
    assert_eq!(ctx.core.role(), RoleKind::Leader);
    let state = persisted(&actions);
    assert_eq!(state[0].leader_id, Some(n(1)));
    let first_persist = actions
        .iter()
        .position(|a| matches!(a, Action::PersistQuorumState(_)));
    let first_append = actions
        .iter()
        .position(|a| matches!(a, Action::Append { .. }));
    assert!(
        first_persist < first_append,
        "the election is durable before the first append"
    );
    let begins = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::SendRequest {
                    request: RaftRequest::BeginQuorumEpoch(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(begins, 2);
}

/// onBecomeLeader: the first batch of the epoch is a control batch whose single record is a
/// LeaderChangeMessage v0 (key = version 0, type 2) naming the leader, the voters and the
/// voters that granted.
#[test]
fn new_leader_writes_a_leader_change_message_first() {
    use kafka_protocol::messages::LeaderChangeMessage;
    use kafka_protocol::protocol::Decodable;
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .log(log_of(&[(1, 4)]))
        .state(1, None, None)
        .build();
    let actions = ctx.elect();
    let batches = appended(&actions);
    assert_eq!(batches.len(), 1);
    let control = &batches[0];
    assert!(control.is_control());
    assert_eq!(
        (control.base_offset(), control.partition_leader_epoch()),
        (4, 2)
    );
    let records = control.records().expect("decodable");
    assert_eq!(records.len(), 1);
    let key = records[0].key.clone().expect("control key");
    assert_eq!(&key[..], &[0, 0, 0, 2]);
    let mut value = records[0].value.clone().expect("value");
    let message = LeaderChangeMessage::decode(&mut value, 0).expect("LeaderChangeMessage v0");
    assert_eq!(message.leader_id.0, 1);
    let voters: Vec<i32> = message.voters.iter().map(|v| v.voter_id).collect();
    assert_eq!(voters, vec![1, 2, 3]);
    assert_eq!(
        message.granting_voters.len(),
        2,
        "self + one granting voter"
    );
}

/// testRetryElection: rejected by everyone, the candidate backs off and stands again in epoch + 1.
#[test]
fn rejected_candidate_backs_off_and_retries_with_a_higher_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.run_timers(2_000);
    for (to, id) in vote_requests(&actions) {
        let info = wire::LeaderInfo {
            error: None,
            leader_id: None,
            epoch: LeaderEpoch(1),
        };
        ctx.respond(
            to.0,
            id,
            RaftResponse::Vote(wire::vote_response(info, false)),
        );
    }
    assert_eq!(
        (ctx.core.role(), ctx.core.epoch()),
        (RoleKind::Candidate, LeaderEpoch(1))
    );
    let backoff = ctx.core.poll_timeout().expect("backoff armed") - ctx.now;
    assert!(
        backoff <= Duration::from_millis(100),
        "first backoff is 0 or 100 ms, got {backoff:?}"
    );
    let actions = ctx.run_timers(100);
    assert_eq!(
        (ctx.core.role(), ctx.core.epoch()),
        (RoleKind::Candidate, LeaderEpoch(2))
    );
    assert_eq!(vote_requests(&actions).len(), 2);
}

/// testVoteRequestTimeout: an unanswered VoteRequest is sent again after request.timeout.ms.
#[test]
fn unanswered_vote_requests_are_retried() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.run_timers(2_000);
    let actions = ctx.advance(2_000);
    assert_eq!(vote_requests(&actions).len(), 2, "{actions:?}");
    assert_eq!(ctx.core.epoch(), LeaderEpoch(1), "still the same election");
}

/// testVoterBecomeCandidateAfterFetchTimeout / testFollowerAsObserverDoesNotBecomeCandidateAfterFetchTimeout.
#[test]
fn fetch_timeout_makes_a_voter_candidate_but_not_an_observer() {
    let mut voter = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    voter.take();
    voter.advance(2_000);
    assert_eq!(
        (voter.core.role(), voter.core.epoch()),
        (RoleKind::Candidate, LeaderEpoch(3))
    );

    let mut observer = Builder::new(9, &[1, 2, 3]).state(2, Some(2), None).build();
    assert_eq!(observer.core.role(), RoleKind::Observer);
    observer.take();
    let actions = observer.advance(2_000);
    assert_eq!(observer.core.role(), RoleKind::Observer);
    assert_eq!(
        fetch_requests(&actions).len(),
        1,
        "observer looks for the leader at a voter instead"
    );
}

/// testUnattachedAsObserverDoesNotBecomeCandidateAfterElectionTimeout.
#[test]
fn unattached_observer_never_stands_for_election() {
    let mut observer = Builder::new(9, &[1, 2, 3]).build();
    observer.take();
    observer.run_timers(20_000);
    assert_ne!(observer.core.role(), RoleKind::Candidate);
    assert_eq!(observer.core.epoch(), LeaderEpoch(0));
}

// -------------------------------------------------------------------------------------------------
// Vote handling
// -------------------------------------------------------------------------------------------------

/// testHandleValidVoteRequestAsUnattached + Appendix C.1: the vote is persisted before the
/// response that grants it.
#[test]
fn vote_is_durable_before_it_is_granted() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(1, None, None).build();
    ctx.take();
    let actions = ctx.vote(2, 2, 0, 0);
    let persist = actions
        .iter()
        .rposition(|a| matches!(a, Action::PersistQuorumState(s) if s.voted_id == Some(n(2))));
    let respond = actions
        .iter()
        .position(|a| matches!(a, Action::SendResponse { .. }));
    assert!(persist.is_some() && persist < respond, "{actions:?}");
    assert_eq!(vote_answer(&actions), (None, None, true));
    assert_eq!(
        (ctx.core.role(), ctx.core.voted_for()),
        (RoleKind::Voted, Some(n(2)))
    );
}

/// Vote rules: one vote per epoch, idempotent re-grant to the same candidate.
#[test]
fn a_voter_grants_one_candidate_per_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.take();
    assert!(vote_answer(&ctx.vote(2, 1, 0, 0)).2);
    assert!(
        vote_answer(&ctx.vote(2, 1, 0, 0)).2,
        "same candidate again: granted"
    );
    assert!(persisted(&ctx.vote(3, 1, 0, 0)).is_empty());
    assert!(
        !vote_answer(&ctx.vote(3, 1, 0, 0)).2,
        "other candidate, same epoch: rejected"
    );
    assert!(
        vote_answer(&ctx.vote(3, 2, 0, 0)).2,
        "a higher epoch frees the vote"
    );
}

/// testHandleVoteRequestAsFollowerWithElectedLeader / rejected because the log is behind.
#[test]
fn votes_are_refused_to_stale_logs_and_when_a_leader_is_known() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(2, None, None)
        .log(log_of(&[(1, 3), (2, 2)]))
        .build();
    ctx.take();
    let cases = [
        ("older last epoch", 3, 1, 10, false),
        ("same epoch, shorter log", 3, 2, 4, false),
        ("same epoch, same length", 3, 2, 5, true),
    ];
    for (reason, epoch, last_epoch, last_offset, want) in cases {
        let mut fresh = Builder::new(1, &[1, 2, 3])
            .state(2, None, None)
            .log(log_of(&[(1, 3), (2, 2)]))
            .build();
        fresh.take();
        assert_eq!(
            vote_answer(&fresh.vote(2, epoch, last_epoch, last_offset)).2,
            want,
            "{reason}"
        );
    }
    let mut follower = Builder::new(1, &[1, 2, 3]).state(2, Some(3), None).build();
    follower.take();
    assert!(
        !vote_answer(&follower.vote(2, 2, 1, 100)).2,
        "follower of a known leader never grants"
    );
    let _ = ctx;
}

/// testHandleInvalidVoteRequestWithOlderEpoch / testInvalidVoteRequest / testInvalidVoterReplicaVoteRequest.
#[test]
fn bad_vote_requests_get_kafka_error_codes() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(5, None, None).build();
    ctx.take();
    assert_eq!(
        vote_answer(&ctx.vote(2, 4, 0, 0)).1,
        Some(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        vote_answer(&ctx.vote(2, 6, 6, 0)).1,
        Some(ResponseError::InvalidRequest),
        "last epoch ≥ candidate epoch"
    );
    assert_eq!(
        vote_answer(&ctx.vote(2, 6, 1, -1)).1,
        Some(ResponseError::InvalidRequest),
        "negative offset"
    );
    let wrong_voter = wire::vote_request(
        CLUSTER,
        n(3),
        LeaderEpoch(6),
        n(2),
        OffsetAndEpoch::new(0, 0),
    );
    let (_, actions) = ctx.request(2, RaftRequest::Vote(wrong_voter));
    assert_eq!(
        vote_answer(&actions),
        (None, Some(INVALID_VOTER_KEY), false)
    );
    let mut foreign = wire::vote_request(
        CLUSTER,
        n(1),
        LeaderEpoch(7),
        n(2),
        OffsetAndEpoch::new(0, 0),
    );
    foreign.cluster_id = Some(StrBytes::from_static_str("other"));
    let (_, actions) = ctx.request(2, RaftRequest::Vote(foreign));
    assert_eq!(
        vote_answer(&actions).0,
        Some(ResponseError::InconsistentClusterId)
    );
    let (_, actions) = ctx.request(2, RaftRequest::Vote(VoteRequest::default()));
    assert_eq!(
        vote_answer(&actions).0,
        Some(ResponseError::InvalidRequest),
        "no partition"
    );
}

/// testLeaderIgnoreVoteRequestOnSameEpoch / testCandidateIgnoreVoteRequestOnSameEpoch.
#[test]
fn leaders_and_candidates_reject_votes_in_their_own_epoch() {
    let mut leader = Builder::new(1, &[1, 2, 3]).build();
    leader.elect();
    let epoch = leader.core.epoch().0;
    assert_eq!(
        vote_answer(&leader.vote(2, epoch, 0, 100)),
        (None, None, false)
    );
    assert_eq!(leader.core.role(), RoleKind::Leader);

    let mut candidate = Builder::new(1, &[1, 2, 3]).build();
    candidate.run_timers(2_000);
    let epoch = candidate.core.epoch().0;
    assert!(!vote_answer(&candidate.vote(2, epoch, 0, 100)).2);
}

/// testGrantVotesFromHigherEpochAfterResigning / testRejectVotesFromSameEpochAfterResigning.
#[test]
fn resigned_leader_rejects_same_epoch_and_grants_higher_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(5, Some(1), None).build();
    ctx.take();
    assert!(!vote_answer(&ctx.vote(2, 5, 0, 0)).2);
    assert!(vote_answer(&ctx.vote(2, 6, 0, 0)).2);
    assert_eq!(ctx.core.epoch(), LeaderEpoch(6));
}

/// testHandleVoteRequestAsObserver (static quorum): observers never vote (Appendix C.10).
#[test]
fn observers_do_not_vote() {
    let mut ctx = Builder::new(9, &[1, 2, 3]).build();
    ctx.take();
    assert!(!vote_answer(&ctx.vote(2, 1, 0, 0)).2);
    assert_eq!(
        ctx.core.epoch(),
        LeaderEpoch(0),
        "a leaderless epoch means nothing to an observer"
    );
}

/// Found by the simulator (seed 1184): an observer that adopted the epoch of a candidate that
/// then died was stranded above the quorum's epoch. Observers move only with a known leader.
#[test]
fn observer_ignores_leaderless_epochs_and_finds_the_leader() {
    let mut ctx = Builder::new(9, &[1, 2, 3]).state(4, Some(3), None).build();
    let (to, id, _) = fetch_requests(&ctx.take()).remove(0);
    assert_eq!(to, n(3));
    // The leader answers "fenced" from a candidate's epoch 5 with no leader: ignored.
    let mut fenced = answer(3, 5, None, Bytes::new());
    fenced.info.error = Some(ResponseError::FencedLeaderEpoch);
    fenced.info.leader_id = None;
    ctx.respond(3, id, RaftResponse::Fetch(wire::fetch_response(&fenced)));
    assert_eq!(
        (ctx.core.epoch(), ctx.core.leader()),
        (LeaderEpoch(4), Some(n(3)))
    );
    // A leader of a newer epoch is followed.
    let actions = ctx.advance(2_000);
    let (to, id, _) = fetch_requests(&actions).remove(0);
    let mut moved = answer(1, 6, None, Bytes::new());
    moved.info.error = Some(ResponseError::FencedLeaderEpoch);
    let actions = ctx.respond(to.0, id, RaftResponse::Fetch(wire::fetch_response(&moved)));
    assert_eq!(
        (ctx.core.epoch(), ctx.core.leader()),
        (LeaderEpoch(6), Some(n(1)))
    );
    assert_eq!(fetch_requests(&actions)[0].0, n(1));
}

/// testVoteResponseIgnoredAfterBecomingFollower.
#[test]
fn vote_responses_after_becoming_follower_are_ignored() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let requests = vote_requests(&ctx.run_timers(2_000));
    ctx.begin_epoch(3, 1);
    assert_eq!(ctx.core.role(), RoleKind::Follower);
    let (to, id) = requests[0];
    let info = wire::LeaderInfo {
        error: None,
        leader_id: None,
        epoch: LeaderEpoch(1),
    };
    ctx.respond(
        to.0,
        id,
        RaftResponse::Vote(wire::vote_response(info, true)),
    );
    assert_eq!(
        (ctx.core.role(), ctx.core.leader()),
        (RoleKind::Follower, Some(n(3)))
    );
}

// -------------------------------------------------------------------------------------------------
// BeginQuorumEpoch / EndQuorumEpoch
// -------------------------------------------------------------------------------------------------

/// testHandleBeginQuorumRequest: an unattached voter follows the announced leader.
#[test]
fn begin_quorum_epoch_makes_the_sender_our_leader() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(1, None, Some(2)).build();
    ctx.take();
    let actions = ctx.begin_epoch(2, 2);
    assert_eq!(
        (ctx.core.role(), ctx.core.leader(), ctx.core.epoch()),
        (RoleKind::Follower, Some(n(2)), LeaderEpoch(2))
    );
    assert_eq!(
        persisted(&actions).last().map(|s| s.leader_id),
        Some(Some(n(2)))
    );
    assert_eq!(fetch_requests(&actions).len(), 1);
    let stale = ctx.begin_epoch(3, 1);
    let error = stale.iter().find_map(|a| match a {
        Action::SendResponse {
            response: RaftResponse::BeginQuorumEpoch(r),
            ..
        } => wire::parse_begin_quorum_epoch_response(r)
            .and_then(|(_, i)| i)
            .and_then(|i| i.error),
        _ => None,
    });
    assert_eq!(error, Some(ResponseError::FencedLeaderEpoch));
    let mut foreign = wire::begin_quorum_epoch_request(CLUSTER, n(1), n(3), LeaderEpoch(9));
    foreign.cluster_id = Some(StrBytes::from_static_str("other"));
    let (_, actions) = ctx.request(3, RaftRequest::BeginQuorumEpoch(foreign));
    assert!(actions.iter().any(|a| matches!(a, Action::SendResponse { response: RaftResponse::BeginQuorumEpoch(r), .. } if r.error_code == ResponseError::InconsistentClusterId.code())));
    let (_, actions) = ctx.request(
        3,
        RaftRequest::BeginQuorumEpoch(BeginQuorumEpochRequest::default()),
    );
    assert!(actions.iter().any(|a| matches!(a, Action::SendResponse { response: RaftResponse::BeginQuorumEpoch(r), .. } if r.error_code == ResponseError::InvalidRequest.code())));
}

/// testBeginQuorumEpochHeartbeat: the leader re-sends BeginQuorumEpoch every fetch.timeout/2
/// to voters that have not fetched.
#[test]
fn leader_resends_begin_quorum_epoch_to_silent_voters() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.elect();
    let epoch = ctx.core.epoch().0;
    ctx.advance(500);
    ctx.fetch(2, epoch, 0, 0, 0);
    let actions = ctx.advance(500);
    let targets: Vec<NodeId> = actions
        .iter()
        .filter_map(|a| match a {
            Action::SendRequest {
                to,
                request: RaftRequest::BeginQuorumEpoch(_),
                ..
            } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(
        targets,
        vec![n(3)],
        "voter 2 fetched recently, voter 3 did not"
    );
}

/// testHandleEndQuorumRequestWithLowerPriorityToBecomeLeader / testHandleEndQuorumRequest:
/// the first preferred successor runs at once, later ones wait exponentially longer.
#[test]
fn end_quorum_epoch_orders_the_successors_elections() {
    // Me first in the list: election immediately.
    let mut first = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    first.take();
    first.end_epoch(2, 2, &[1, 3]);
    first.advance(0);
    assert_eq!(first.core.role(), RoleKind::Candidate);
    // Second of two: (1000 >> 1) << 0 = 500 ms.
    let mut second = Builder::new(3, &[1, 2, 3]).state(2, Some(2), None).build();
    second.take();
    second.end_epoch(2, 2, &[1, 3]);
    second.advance(499);
    assert_eq!(second.core.role(), RoleKind::Follower);
    second.advance(1);
    assert_eq!(second.core.role(), RoleKind::Candidate);
}

/// testEndQuorumStartsNewElectionImmediatelyIfFollowerUnattached.
#[test]
fn end_quorum_epoch_hurries_an_unattached_voter() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, None, None).build();
    ctx.take();
    ctx.end_epoch(2, 2, &[1]);
    ctx.advance(0);
    assert_eq!(
        (ctx.core.role(), ctx.core.epoch()),
        (RoleKind::Candidate, LeaderEpoch(3))
    );
}

/// testLeaderGracefulShutdown / testEndQuorumEpochSentBasedOnFetchOffset: a leader that shuts
/// down resigns and names its successors in descending fetch-offset order.
#[test]
fn graceful_shutdown_names_successors_by_fetch_offset() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch().0;
    ctx.fetch(3, epoch, 1, epoch, 0);
    ctx.fetch(2, epoch, 0, 0, 0);
    ctx.core.begin_shutdown(ctx.now);
    let actions = ctx.take();
    assert_eq!(ctx.core.role(), RoleKind::Resigned);
    let ends: Vec<(NodeId, EndQuorumEpochRequest)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::SendRequest {
                to,
                request: RaftRequest::EndQuorumEpoch(r),
                ..
            } => Some((*to, r.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2);
    let args = wire::end_quorum_epoch_args(&ends[0].1).expect("valid");
    assert_eq!(args.preferred, vec![n(3), n(2)]);
    ctx.run_timers(10_000);
    assert_ne!(
        ctx.core.role(),
        RoleKind::Candidate,
        "a node shutting down never stands again"
    );
}

/// testEndQuorumEpochRetriesWhileResigned.
#[test]
fn resigned_leader_retries_end_quorum_epoch_until_acknowledged() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .tune(|c| c.election_timeout_ms = 100_000)
        .build();
    ctx.elect();
    ctx.core.resign(ctx.now, ctx.core.epoch());
    ctx.take();
    let actions = ctx.advance(2_000);
    let resent = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::SendRequest {
                    request: RaftRequest::EndQuorumEpoch(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(resent, 2);
}

// -------------------------------------------------------------------------------------------------
// Fetch: leader side
// -------------------------------------------------------------------------------------------------

/// A leader at epoch 5 with log [epoch 1: 0..3, epoch 3: 3..5, epoch 5: 5..6 (LeaderChange)].
fn leader_with_history() -> Ctx {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(4, None, None)
        .log(log_of(&[(1, 3), (3, 2)]))
        .build();
    let actions = ctx.elect();
    assert_eq!(ctx.core.epoch(), LeaderEpoch(5));
    let after = ctx.flush_all(&actions);
    assert!(
        hw_advances(&after).is_empty(),
        "the leader alone is not a majority"
    );
    ctx
}

/// testLeaderImmediatelySendsDivergingEpoch / testFollowerLogReconciliation (leader side).
#[test]
fn leader_answers_divergent_fetches_with_the_diverging_epoch() {
    let mut ctx = leader_with_history();
    let cases: [(&str, i64, i32, Option<OffsetAndEpoch>); 5] = [
        (
            "epoch 2 never led here: end of epoch 1",
            4,
            2,
            Some(OffsetAndEpoch::new(3, 1)),
        ),
        (
            "epoch 1 but past its end",
            4,
            1,
            Some(OffsetAndEpoch::new(3, 1)),
        ),
        (
            "past the log end in epoch 5",
            9,
            5,
            Some(OffsetAndEpoch::new(6, 5)),
        ),
        ("exactly at the end of epoch 1: valid", 3, 1, None),
        ("empty follower: valid", 0, 0, None),
    ];
    for (reason, offset, last_epoch, want) in cases {
        let (_, actions) = ctx.fetch(2, 5, offset, last_epoch, 0);
        let (_, answer) = fetch_answer(&actions);
        let answer = answer.expect("partition");
        assert_eq!(answer.info.error, None, "{reason}");
        assert_eq!(answer.diverging, want, "{reason}");
        if want.is_none() {
            assert!(!answer.records.is_empty(), "{reason}: records follow");
        }
    }
}

/// KafkaRaftClientSnapshotTest: fetch offset 0, or below the log start, or an epoch older
/// than the snapshot's, is answered with the latest snapshot id.
#[test]
fn leader_answers_fetches_below_its_snapshot_with_the_snapshot_id() {
    let snapshot = OffsetAndEpoch::new(10, 2);
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(2, None, None)
        .snapshot_at_start(10, 2)
        .log(vec![batch(10, 2, 2)])
        .build();
    ctx.elect();
    let epoch = ctx.core.epoch().0;
    let cases: [(&str, i64, i32, Option<OffsetAndEpoch>); 4] = [
        ("fetch offset 0", 0, 0, Some(snapshot)),
        ("below log start", 5, 1, Some(snapshot)),
        ("at log start with another epoch", 10, 1, Some(snapshot)),
        ("at log start with the snapshot epoch", 10, 2, None),
    ];
    for (reason, offset, last_epoch, want) in cases {
        let (_, actions) = ctx.fetch(2, epoch, offset, last_epoch, 0);
        let answer = fetch_answer(&actions).1.expect("partition");
        assert_eq!(answer.snapshot_id, want, "{reason}");
    }
}

/// testInvalidFetchRequest and the epoch checks of §1.3.
#[test]
fn bad_fetches_get_kafka_error_codes() {
    let mut ctx = leader_with_history();
    let err = |ctx: &mut Ctx, epoch: i32, offset: i64, last: i32| {
        let (_, actions) = ctx.fetch(2, epoch, offset, last, 0);
        partition_error(fetch_answer(&actions), |a: &FetchAnswer| a.info.error)
    };
    assert_eq!(
        err(&mut ctx, 5, -1, 0),
        Some(ResponseError::InvalidRequest),
        "negative offset"
    );
    assert_eq!(
        err(&mut ctx, 5, 0, -1),
        Some(ResponseError::InvalidRequest),
        "negative epoch"
    );
    assert_eq!(
        err(&mut ctx, 5, 0, 6),
        Some(ResponseError::InvalidRequest),
        "last fetched epoch above current"
    );
    assert_eq!(
        err(&mut ctx, 4, 0, 0),
        Some(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        err(&mut ctx, 6, 0, 0),
        Some(ResponseError::UnknownLeaderEpoch)
    );
    let mut foreign = wire::fetch_request(
        CLUSTER,
        n(2),
        LeaderEpoch(5),
        OffsetAndEpoch::new(0, 0),
        0,
        100,
    );
    foreign.cluster_id = Some(StrBytes::from_static_str("other"));
    let (_, actions) = ctx.request(2, RaftRequest::Fetch(foreign));
    assert_eq!(
        fetch_answer(&actions).0,
        Some(ResponseError::InconsistentClusterId)
    );
    let (_, actions) = ctx.request(2, RaftRequest::Fetch(FetchRequest::default()));
    assert_eq!(
        fetch_answer(&actions).0,
        Some(ResponseError::InvalidRequest),
        "not the metadata partition"
    );

    let mut follower = Builder::new(1, &[1, 2, 3]).state(5, Some(2), None).build();
    follower.take();
    assert_eq!(
        err(&mut follower, 5, 0, 0),
        Some(ResponseError::NotLeaderOrFollower)
    );
}

/// The leader's HW is unknown until a record of its own epoch is on a majority (Raft §5.4.2),
/// and it only counts voters (testFetchShouldBeTreatedAsLeaderAcknowledgement).
#[test]
fn high_watermark_waits_for_a_record_of_the_current_epoch() {
    let mut ctx = leader_with_history();
    // Follower 2 has the old entries only: still no HW (5 = epoch start offset).
    let (_, actions) = ctx.fetch(2, 5, 5, 3, 0);
    assert!(hw_advances(&actions).is_empty());
    assert_eq!(
        fetch_answer(&actions).1.expect("partition").high_watermark,
        None
    );
    // An observer with everything does not count.
    let (_, actions) = ctx.fetch(9, 5, 6, 5, 0);
    assert!(hw_advances(&actions).is_empty());
    // Follower 3 has the LeaderChange batch: HW = 6.
    let (_, actions) = ctx.fetch(3, 5, 6, 5, 0);
    assert_eq!(hw_advances(&actions), vec![LogOffset(6)]);
    assert_eq!(ctx.core.high_watermark(), LogOffset(6));
    let committed: Vec<i64> = actions
        .iter()
        .flat_map(|a| match a {
            Action::Commit { batches } => batches.iter().map(RecordBatch::base_offset).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        committed,
        vec![0, 3, 5],
        "every batch below the HW is handed up once, in order"
    );
}

/// A leader counts its own log only once flushed: with both followers caught up but the
/// leader's own write not yet fsynced, a 3-voter quorum still commits on the two followers.
#[test]
fn leader_counts_only_its_flushed_log() {
    let mut ctx = Builder::new(1, &[1, 2, 3, 4, 5]).build();
    ctx.elect();
    let epoch = ctx.core.epoch().0;
    ctx.fetch(2, epoch, 1, epoch, 0);
    let (_, actions) = ctx.fetch(3, epoch, 1, epoch, 0);
    assert!(
        hw_advances(&actions).is_empty(),
        "2 followers + an unflushed leader are not 3 of 5"
    );
    let actions = ctx.advance(0);
    let _ = actions;
    ctx.core.handle_flushed(ctx.now, LogOffset(1));
    assert_eq!(hw_advances(&ctx.take()), vec![LogOffset(1)]);
}

/// A replica — a follower or a broker's observer — that fetches at the log end after the high
/// watermark moved without telling it (it was moved by another replica's fetch) is answered at
/// once with the new high watermark instead of waiting out its long poll.
#[test]
fn fetch_at_the_end_is_answered_at_once_when_the_replica_missed_a_high_watermark() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    ctx.fetch(2, epoch.0, 1, epoch.0, 500);
    ctx.fetch(3, epoch.0, 1, epoch.0, 500);
    ctx.fetch(2, epoch.0, 1, epoch.0, 500);
    // An observer (broker 7) that already follows the log end.
    let (_, actions) = ctx.fetch(7, epoch.0, 1, epoch.0, 500);
    assert_eq!(
        fetch_answer(&actions).1.expect("answered").high_watermark,
        Some(LogOffset(1))
    );
    let (_, actions) = ctx.fetch(7, epoch.0, 1, epoch.0, 500);
    assert!(!responded(&actions), "nothing new: parked");

    // A write: the parked fetches get the record (with the old high watermark) at once.
    ctx.core
        .append(ctx.now, epoch, vec![Bytes::from_static(b"x")])
        .expect("append");
    let actions = ctx.advance(25);
    assert!(responded(&actions), "the parked fetches get the record");
    ctx.flush_all(&actions);
    // Follower 2 fetches past it: the high watermark moves to 2 and parked fetches learn it...
    let (_, actions) = ctx.fetch(2, epoch.0, 2, epoch.0, 500);
    assert_eq!(hw_advances(&actions), vec![LogOffset(2)]);
    // ...but the observer's next fetch, at the new end, arrives after that: it must not park.
    let (_, actions) = ctx.fetch(7, epoch.0, 2, epoch.0, 500);
    let answer = fetch_answer(&actions).1.expect("answered at once");
    assert_eq!(answer.high_watermark, Some(LogOffset(2)));
    assert!(answer.records.is_empty());
    // Told: its next fetch parks again.
    let (_, actions) = ctx.fetch(7, epoch.0, 2, epoch.0, 500);
    assert!(!responded(&actions), "parked once told");
}

/// testPurgatoryFetchTimeout / testPurgatoryFetchSatisfiedByWrite / testResignWillCompleteFetchPurgatory.
#[test]
fn long_poll_fetches_wait_for_data_or_their_deadline() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    // The first fetch at the end commits the leader-change batch and is answered at once with the
    // new high watermark; the next one has nothing new to learn and parks.
    let (_, actions) = ctx.fetch(2, epoch.0, 1, epoch.0, 500);
    assert_eq!(
        fetch_answer(&actions).1.expect("answered").high_watermark,
        Some(LogOffset(1))
    );
    let (_, _) = ctx.fetch(3, epoch.0, 1, epoch.0, 500);
    let (id, actions) = ctx.fetch(2, epoch.0, 1, epoch.0, 500);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::SendResponse { .. })),
        "parked"
    );
    ctx.core
        .append(ctx.now, epoch, vec![Bytes::from_static(b"x")])
        .expect("append");
    let actions = ctx.advance(25);
    let answered = actions
        .iter()
        .find(|a| matches!(a, Action::SendResponse { id: i, .. } if *i == id));
    assert!(
        answered.is_some(),
        "the append completes the parked fetch: {actions:?}"
    );
    let (_, answer) = fetch_answer(&actions);
    assert!(!answer.expect("partition").records.is_empty());

    let (id, _) = ctx.fetch(3, epoch.0, 2, epoch.0, 500);
    let actions = ctx.advance(499);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::SendResponse { id: i, .. } if *i == id))
    );
    let actions = ctx.advance(1);
    let answer = fetch_answer(&actions).1.expect("partition");
    assert!(
        answer.records.is_empty() && answer.info.error.is_none(),
        "empty answer at the deadline"
    );

    let (id, _) = ctx.fetch(3, epoch.0, 2, epoch.0, 500);
    ctx.core.resign(ctx.now, epoch);
    let actions = ctx.take();
    let resigned_answer = actions.iter().find_map(|a| match a {
        Action::SendResponse {
            id: i,
            response: RaftResponse::Fetch(r),
            ..
        } if *i == id => wire::parse_fetch_response(r),
        _ => None,
    });
    assert_eq!(
        resigned_answer
            .and_then(|(_, a)| a)
            .and_then(|a| a.info.error),
        Some(ResponseError::NotLeaderOrFollower)
    );
}

/// testLeaderShouldResignLeadershipIfNotGetFetchRequestFromMajorityVoters /
/// testLeaderShouldNotResignLeadershipIfOnlyOneVoters.
#[test]
fn leader_resigns_when_a_majority_stops_fetching() {
    let mut ctx = Builder::new(1, &[1, 2, 3, 4, 5]).build();
    ctx.elect();
    let epoch = ctx.core.epoch().0;
    ctx.advance(2_000);
    ctx.fetch(2, epoch, 0, 0, 0);
    ctx.fetch(3, epoch, 0, 0, 0);
    ctx.advance(2_999);
    assert_eq!(
        ctx.core.role(),
        RoleKind::Leader,
        "two fetched: window restarted"
    );
    ctx.fetch(2, epoch, 0, 0, 0);
    ctx.advance(3_000);
    assert_eq!(
        ctx.core.role(),
        RoleKind::Resigned,
        "only one voter fetched in the window"
    );

    let mut alone = Builder::new(1, &[1]).build();
    alone.take();
    alone.advance(60_000);
    assert_eq!(alone.core.role(), RoleKind::Leader);
}

/// testDescribeQuorum*: the leader reports voters and observers; others answer NOT_LEADER_OR_FOLLOWER.
#[test]
fn describe_quorum_is_answered_by_the_leader_only() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    ctx.core.set_wall_clock(ctx.now, 1_700_000_000_000);
    let epoch = ctx.core.epoch().0;
    ctx.fetch(2, epoch, 1, epoch, 0);
    ctx.fetch(7, epoch, 0, 0, 0);
    let request = DescribeQuorumRequest::default().with_topics(vec![
        describe_quorum_request::TopicData::default()
            .with_topic_name(kafka_protocol::messages::TopicName(
                StrBytes::from_static_str(METADATA_TOPIC_NAME),
            ))
            .with_partitions(vec![describe_quorum_request::PartitionData::default()]),
    ]);
    let (_, actions) = ctx.request(5, RaftRequest::DescribeQuorum(request.clone()));
    let Some(Action::SendResponse {
        response: RaftResponse::DescribeQuorum(r),
        ..
    }) = actions.first()
    else {
        panic!("{actions:?}")
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!(
        (
            p.error_code,
            p.leader_id.0,
            p.leader_epoch,
            p.high_watermark
        ),
        (0, 1, epoch, 1)
    );
    let voters: Vec<(i32, i64)> = p
        .current_voters
        .iter()
        .map(|v| (v.replica_id.0, v.log_end_offset))
        .collect();
    assert_eq!(voters, vec![(1, 1), (2, 1), (3, -1)]);
    assert_eq!(
        p.observers
            .iter()
            .map(|o| o.replica_id.0)
            .collect::<Vec<_>>(),
        vec![7]
    );
    assert_eq!(p.current_voters[1].last_fetch_timestamp, 1_700_000_000_000);

    let mut follower = Builder::new(2, &[1, 2, 3]).state(1, Some(1), None).build();
    let (_, actions) = follower.request(5, RaftRequest::DescribeQuorum(request));
    let Some(Action::SendResponse {
        response: RaftResponse::DescribeQuorum(r),
        ..
    }) = actions.last()
    else {
        panic!("{actions:?}")
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::NotLeaderOrFollower.code()
    );
}

/// Kafka's `handleDescribeQuorumRequest`: a request not naming the metadata partition gets
/// UNKNOWN_TOPIC_OR_PARTITION per partition asked for and no top-level error.
#[test]
fn describe_quorum_of_another_partition_is_unknown_per_partition() {
    let mut ctx = Builder::new(1, &[1]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let other = DescribeQuorumRequest::default().with_topics(vec![
        describe_quorum_request::TopicData::default()
            .with_topic_name(kafka_protocol::messages::TopicName(
                StrBytes::from_static_str("orders"),
            ))
            .with_partitions(vec![
                describe_quorum_request::PartitionData::default().with_partition_index(3),
            ]),
    ]);
    for (request, expected) in [
        (DescribeQuorumRequest::default(), vec![]),
        (other, vec![("orders".to_owned(), 3, 3)]),
    ] {
        let (_, actions) = ctx.request(5, RaftRequest::DescribeQuorum(request));
        let Some(Action::SendResponse {
            response: RaftResponse::DescribeQuorum(r),
            ..
        }) = actions.first()
        else {
            panic!("{actions:?}")
        };
        assert_eq!(r.error_code, 0);
        let got: Vec<(String, i32, i16)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_name.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        assert_eq!(got, expected);
    }
}

// -------------------------------------------------------------------------------------------------
// Fetch: follower side
// -------------------------------------------------------------------------------------------------

fn answer(leader: i32, epoch: i32, hw: Option<i64>, records: Bytes) -> FetchAnswer {
    FetchAnswer {
        info: wire::LeaderInfo {
            error: None,
            leader_id: Some(n(leader)),
            epoch: LeaderEpoch(epoch),
        },
        high_watermark: hw.map(LogOffset),
        diverging: None,
        snapshot_id: None,
        malformed_snapshot_id: false,
        records,
    }
}

/// testFollowerReplication: records are appended, flushed before the next fetch (the fetch
/// offset acknowledges durable data), and the HW follows the leader's, capped at our end.
#[test]
fn follower_appends_flushes_then_fetches_again() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let records = concat(&log_of(&[(1, 2), (2, 1)]));
    let actions = ctx.respond(
        2,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(2, 2, Some(10), records))),
    );
    assert_eq!(appended(&actions).len(), 2);
    assert!(
        fetch_requests(&actions).is_empty(),
        "no fetch before the flush"
    );
    assert_eq!(
        hw_advances(&actions),
        vec![LogOffset(3)],
        "HW capped at the local log end"
    );
    let after = ctx.flush_all(&actions);
    let fetches = fetch_requests(&after);
    assert_eq!(fetches.len(), 1);
    let args = wire::fetch_args(&fetches[0].2).expect("fetch");
    assert_eq!((args.fetch_offset, args.last_fetched_epoch), (3, 2));
}

/// testFollowerLogReconciliation: a diverging epoch truncates to where the logs agree.
#[test]
fn follower_truncates_to_the_diverging_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(4, Some(2), None)
        .log(log_of(&[(1, 3), (2, 3)]))
        .build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let mut a = answer(2, 4, Some(10), Bytes::new());
    a.diverging = Some(OffsetAndEpoch::new(4, 1));
    let actions = ctx.respond(2, id, RaftResponse::Fetch(wire::fetch_response(&a)));
    assert!(
        actions.contains(&Action::Truncate {
            end_offset: LogOffset(3)
        }),
        "epoch 1 ends at 3 locally: {actions:?}"
    );
    // Found by the simulator: what is left may still differ from the leader's log, so the
    // leader's HW must not make it "committed" yet.
    assert_eq!(
        ctx.core.high_watermark(),
        LogOffset(0),
        "no HW from a diverging answer"
    );
    let fetches = fetch_requests(&actions);
    let args = wire::fetch_args(&fetches[0].2).expect("fetch");
    assert_eq!((args.fetch_offset, args.last_fetched_epoch), (3, 1));
}

/// Appendix C.6: a follower never truncates below its HW; that is fatal, not silent data loss.
#[test]
fn truncation_below_the_high_watermark_is_fatal() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let records = concat(&log_of(&[(1, 4)]));
    let actions = ctx.respond(
        2,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(2, 2, Some(4), records))),
    );
    let after = ctx.flush_all(&actions);
    let (_, id, _) = fetch_requests(&after).remove(0);
    let mut a = answer(2, 2, None, Bytes::new());
    a.diverging = Some(OffsetAndEpoch::new(1, 1));
    let actions = ctx.respond(2, id, RaftResponse::Fetch(wire::fetch_response(&a)));
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Fatal(FatalError::TruncateBelowHighWatermark { .. })
    )));
    assert!(!actions.iter().any(|a| matches!(a, Action::Truncate { .. })));
    assert_eq!(ctx.core.log_end().offset, LogOffset(4));
}

/// Corrupt or non-contiguous records from the wire are refused, never appended.
#[test]
fn corrupt_or_misplaced_fetched_records_are_refused() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let mut bytes = concat(&log_of(&[(1, 2)])).to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let actions = ctx.respond(
        2,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(
            2,
            2,
            None,
            Bytes::from(bytes),
        ))),
    );
    assert!(appended(&actions).is_empty(), "CRC mismatch");
    let actions = ctx.advance(20);
    let (_, id, _) = fetch_requests(&actions).remove(0);
    let misplaced = concat(&[batch(5, 1, 1)]);
    let actions = ctx.respond(
        2,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(2, 2, None, misplaced))),
    );
    assert!(
        appended(&actions).is_empty(),
        "does not start at our log end"
    );
    let actions = ctx.advance(20);
    let (_, id, _) = fetch_requests(&actions).remove(0);
    let future = concat(&[batch(0, 3, 1)]);
    let actions = ctx.respond(
        2,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(2, 2, None, future))),
    );
    assert!(appended(&actions).is_empty(), "epoch above the leader's");
}

/// testFetchRequestTruncateToLogStart / KafkaMetadataLog.maybeClean: once the log below a
/// snapshot is deleted, a fetch below the new log start is answered with the snapshot id.
#[test]
fn deleting_the_log_prefix_sends_laggards_the_snapshot() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    ctx.core
        .append(ctx.now, epoch, vec![Bytes::from_static(b"a")])
        .expect("append");
    let actions = ctx.advance(25);
    ctx.flush_all(&actions);
    ctx.fetch(2, epoch.0, 2, epoch.0, 0);
    assert_eq!(ctx.core.high_watermark(), LogOffset(2));
    let snapshot = OffsetAndEpoch::new(2, epoch.0);
    assert!(matches!(
        ctx.core.delete_log_prefix(snapshot),
        Err(SnapshotIdError::NotLatestSnapshot { .. })
    ));
    ctx.core
        .snapshot_created(snapshot)
        .expect("committed and on an epoch boundary");
    ctx.core
        .delete_log_prefix(snapshot)
        .expect("latest snapshot");
    assert_eq!(
        ctx.take(),
        vec![Action::DeleteLogPrefix {
            log_start_offset: LogOffset(2)
        }]
    );
    let (_, actions) = ctx.fetch(3, epoch.0, 1, epoch.0, 0);
    assert_eq!(
        fetch_answer(&actions).1.expect("partition").snapshot_id,
        Some(snapshot)
    );
    let (_, actions) = ctx.fetch(3, epoch.0, 2, epoch.0, 0);
    let answer = fetch_answer(&actions).1.expect("partition");
    assert_eq!(
        (answer.snapshot_id, answer.diverging),
        (None, None),
        "at the log start with the snapshot epoch: valid"
    );
}

/// KafkaMetadataLog.deleteBeforeSnapshot: retention moves the log start to an older snapshot
/// than the latest; the latest stays the one named to fetchers below the start, and the start
/// never moves past the latest snapshot or backwards.
#[test]
fn retention_moves_the_log_start_to_an_older_snapshot_and_keeps_the_latest() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    for value in [b"a", b"b"] {
        ctx.core
            .append(ctx.now, epoch, vec![Bytes::from_static(value)])
            .expect("append");
        let actions = ctx.advance(25);
        ctx.flush_all(&actions);
    }
    ctx.fetch(2, epoch.0, 3, epoch.0, 0);
    assert_eq!(ctx.core.high_watermark(), LogOffset(3));
    let older = OffsetAndEpoch::new(2, epoch.0);
    let latest = OffsetAndEpoch::new(3, epoch.0);
    assert!(matches!(
        ctx.core.advance_log_start(older),
        Err(SnapshotIdError::AfterLatestSnapshot { latest: None, .. })
    ));
    ctx.core.check_snapshot_id(older).expect("valid id");
    ctx.core.snapshot_created(older).expect("older");
    ctx.core.snapshot_created(latest).expect("latest");
    let _ = ctx.take();
    assert_eq!(ctx.core.advance_log_start(older), Ok(true));
    assert_eq!(
        ctx.take(),
        vec![Action::DeleteLogPrefix {
            log_start_offset: LogOffset(2)
        }]
    );
    assert_eq!(ctx.core.log_start_offset(), LogOffset(2));
    assert_eq!(
        ctx.core.advance_log_start(older),
        Ok(false),
        "not backwards"
    );
    assert!(matches!(
        ctx.core.advance_log_start(OffsetAndEpoch::new(4, epoch.0)),
        Err(SnapshotIdError::AfterLatestSnapshot { .. })
    ));
    let (_, actions) = ctx.fetch(3, epoch.0, 1, epoch.0, 0);
    assert_eq!(
        fetch_answer(&actions).1.expect("partition").snapshot_id,
        Some(latest),
        "a laggard is sent the latest snapshot"
    );
}

/// KafkaRaftClientSnapshotTest (follower side): a snapshot id answer starts a FetchSnapshot
/// loop; each slice must continue the file; the last one installs the snapshot, which
/// replaces the log, moves the HW to its end offset, and fetching resumes after it.
#[test]
fn follower_downloads_and_installs_the_snapshot_it_is_told_about() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(2, Some(2), None)
        .log(log_of(&[(1, 2)]))
        .build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let snapshot = OffsetAndEpoch::new(100, 2);
    let mut a = answer(2, 2, Some(100), Bytes::new());
    a.snapshot_id = Some(snapshot);
    let actions = ctx.respond(2, id, RaftResponse::Fetch(wire::fetch_response(&a)));
    assert_eq!(
        ctx.core.high_watermark(),
        LogOffset(0),
        "no HW from a snapshot answer"
    );
    let request = |actions: &[Action]| {
        actions
            .iter()
            .find_map(|a| match a {
                Action::SendRequest {
                    to,
                    id,
                    request: RaftRequest::FetchSnapshot(r),
                } => Some((*to, *id, r.clone())),
                _ => None,
            })
            .expect("a FetchSnapshot request")
    };
    let (to, id, r) = request(&actions);
    let args = wire::fetch_snapshot_args(&r).expect("valid");
    assert_eq!(
        (
            to,
            args.snapshot_id,
            args.position,
            args.current_leader_epoch
        ),
        (n(2), snapshot, 0, 2)
    );
    let slice = |position: i64, bytes: &'static [u8]| {
        RaftResponse::FetchSnapshot(wire::fetch_snapshot_response(&wire::SnapshotSlice {
            info: wire::LeaderInfo {
                error: None,
                leader_id: Some(n(2)),
                epoch: LeaderEpoch(2),
            },
            snapshot_id: snapshot,
            size: 6,
            position,
            bytes: Bytes::from_static(bytes),
        }))
    };
    let actions = ctx.respond(2, id, slice(0, b"abcd"));
    assert!(actions.contains(&Action::WriteSnapshotChunk {
        snapshot_id: snapshot,
        position: 0,
        bytes: Bytes::from_static(b"abcd")
    }));
    let (_, id, r) = request(&actions);
    assert_eq!(wire::fetch_snapshot_args(&r).map(|a| a.position), Some(4));
    // A slice at the wrong position is refused (retried after backoff).
    let actions = ctx.respond(2, id, slice(3, b"xyz"));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::WriteSnapshotChunk { .. }))
    );
    let actions = ctx.advance(20);
    let (_, id, _) = request(&actions);
    let actions = ctx.respond(2, id, slice(4, b"ef"));
    let install = actions.iter().position(|a| {
        *a == Action::InstallSnapshot {
            snapshot_id: snapshot,
        }
    });
    assert!(install.is_some(), "{actions:?}");
    assert_eq!(ctx.core.high_watermark(), LogOffset(100));
    assert_eq!(
        ctx.core.log_end(),
        snapshot,
        "the log now starts (and ends) at the snapshot"
    );
    let fetches = fetch_requests(&actions);
    let args = wire::fetch_args(&fetches[0].2).expect("fetch");
    assert_eq!(
        (args.fetch_offset, args.last_fetched_epoch),
        (100, 2),
        "fetching resumes after the snapshot"
    );
}

/// KafkaRaftClientSnapshotTest (leader side): FetchSnapshot is validated like Fetch, the
/// bootstrap snapshot is never served, and the driver's bytes come back with the size.
#[test]
fn leader_serves_snapshot_slices_through_the_driver() {
    let mut ctx = Builder::new(1, &[1, 2, 3])
        .state(2, None, None)
        .snapshot_at_start(10, 2)
        .log(vec![batch(10, 2, 2)])
        .build();
    ctx.elect();
    let epoch = ctx.core.epoch();
    let snapshot = OffsetAndEpoch::new(10, 2);
    let ask = |ctx: &mut Ctx, id: OffsetAndEpoch, epoch: LeaderEpoch, position: i64| {
        let r = wire::fetch_snapshot_request(CLUSTER, n(2), epoch, id, position, 4);
        ctx.request(2, RaftRequest::FetchSnapshot(r))
    };
    let error_of = |actions: &[Action]| {
        actions.iter().find_map(|a| match a {
            Action::SendResponse {
                response: RaftResponse::FetchSnapshot(r),
                ..
            } => wire::parse_fetch_snapshot_response(r)
                .map(|(top, slice)| top.or(slice.and_then(|s| s.info.error))),
            _ => None,
        })
    };
    let (_, actions) = ask(&mut ctx, OffsetAndEpoch::new(0, 0), epoch, 0);
    assert_eq!(
        error_of(&actions),
        Some(Some(ResponseError::SnapshotNotFound)),
        "bootstrap snapshot"
    );
    let (_, actions) = ask(&mut ctx, snapshot, LeaderEpoch(epoch.0 - 1), 0);
    assert_eq!(
        error_of(&actions),
        Some(Some(ResponseError::FencedLeaderEpoch))
    );
    let (_, actions) = ask(&mut ctx, snapshot, epoch, -1);
    assert_eq!(
        error_of(&actions),
        Some(Some(ResponseError::PositionOutOfRange))
    );
    let (id, actions) = ask(&mut ctx, snapshot, epoch, 2);
    assert_eq!(
        actions,
        vec![Action::ReadSnapshot {
            to: n(2),
            id,
            snapshot_id: snapshot,
            position: 2,
            max_bytes: 4
        }]
    );
    let now = ctx.now;
    ctx.core.handle_snapshot_read(
        now,
        n(2),
        id,
        snapshot,
        2,
        SnapshotRead::Chunk {
            size: 9,
            bytes: Bytes::from_static(b"cdef"),
        },
    );
    let actions = ctx.take();
    let Some(Action::SendResponse {
        response: RaftResponse::FetchSnapshot(r),
        ..
    }) = actions.first()
    else {
        panic!("{actions:?}")
    };
    let slice = wire::parse_fetch_snapshot_response(r)
        .and_then(|(_, s)| s)
        .expect("slice");
    assert_eq!(
        (
            slice.size,
            slice.position,
            &slice.bytes[..],
            slice.info.error
        ),
        (9, 2, &b"cdef"[..], None)
    );
    let (id, _) = ask(&mut ctx, snapshot, epoch, 9);
    ctx.core.handle_snapshot_read(
        now,
        n(2),
        id,
        snapshot,
        9,
        SnapshotRead::Chunk {
            size: 9,
            bytes: Bytes::new(),
        },
    );
    assert_eq!(
        error_of(&ctx.take()),
        Some(Some(ResponseError::PositionOutOfRange)),
        "position at the end"
    );
    let (id, _) = ask(&mut ctx, OffsetAndEpoch::new(50, 2), epoch, 0);
    ctx.core.handle_snapshot_read(
        now,
        n(2),
        id,
        OffsetAndEpoch::new(50, 2),
        0,
        SnapshotRead::NotFound,
    );
    assert_eq!(
        error_of(&ctx.take()),
        Some(Some(ResponseError::SnapshotNotFound))
    );
}

/// testCreateSnapshotAsLeaderWithInvalidSnapshotId: a snapshot covers committed data only and
/// ends on a batch of its epoch; a registered one is then named in Fetch answers.
#[test]
fn snapshots_must_end_at_committed_offsets_of_their_epoch() {
    let mut ctx = Builder::new(1, &[1]).build();
    let actions = ctx.take();
    ctx.flush_all(&actions);
    ctx.core
        .append(ctx.now, LeaderEpoch(1), vec![Bytes::from_static(b"a")])
        .expect("append");
    let actions = ctx.advance(25);
    ctx.flush_all(&actions);
    assert_eq!(ctx.core.high_watermark(), LogOffset(2));
    assert!(matches!(
        ctx.core.snapshot_created(OffsetAndEpoch::new(3, 1)),
        Err(SnapshotIdError::BeyondHighWatermark { .. })
    ));
    assert!(matches!(
        ctx.core.snapshot_created(OffsetAndEpoch::new(2, 0)),
        Err(SnapshotIdError::EpochMismatch { .. })
    ));
    assert_eq!(ctx.core.snapshot_created(OffsetAndEpoch::new(2, 1)), Ok(()));
}

/// testFetchResponseIgnoredAfterBecomingCandidate / duplicate responses: answers to requests
/// that are no longer outstanding change nothing.
#[test]
fn stale_and_duplicate_fetch_responses_are_ignored() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    let response = RaftResponse::Fetch(wire::fetch_response(&answer(
        2,
        2,
        None,
        concat(&log_of(&[(1, 1)])),
    )));
    let first = ctx.respond(2, id, response.clone());
    assert_eq!(appended(&first).len(), 1);
    let again = ctx.respond(2, id, response.clone());
    assert!(again.is_empty(), "duplicate: {again:?}");
    ctx.flush_all(&first);
    ctx.advance(2_000);
    assert_eq!(ctx.core.role(), RoleKind::Candidate);
    assert!(ctx.respond(2, id, response).is_empty());
}

/// Common response handling: an error naming a newer leader moves us to it; UNKNOWN_LEADER_EPOCH
/// is ignored (testObserverHandleRetryFetchToLeader).
#[test]
fn fetch_errors_carrying_a_newer_leader_redirect_the_fetcher() {
    let mut observer = Builder::new(9, &[1, 2, 3]).build();
    let (to, id, _) = fetch_requests(&observer.take()).remove(0);
    let mut a = answer(3, 4, None, Bytes::new());
    a.info.error = Some(ResponseError::FencedLeaderEpoch);
    let actions = observer.respond(to.0, id, RaftResponse::Fetch(wire::fetch_response(&a)));
    assert_eq!(
        (
            observer.core.role(),
            observer.core.leader(),
            observer.core.epoch()
        ),
        (RoleKind::Observer, Some(n(3)), LeaderEpoch(4))
    );
    let fetches = fetch_requests(&actions);
    assert_eq!(fetches[0].0, n(3), "fetches from the leader now");
    let mut unknown = answer(3, 5, None, Bytes::new());
    unknown.info.error = Some(ResponseError::UnknownLeaderEpoch);
    observer.respond(
        3,
        fetches[0].1,
        RaftResponse::Fetch(wire::fetch_response(&unknown)),
    );
    assert_eq!(observer.core.epoch(), LeaderEpoch(4));
}

// -------------------------------------------------------------------------------------------------
// Appends
// -------------------------------------------------------------------------------------------------

/// testAppendFailedWithNotLeaderException / FencedEpoch / RecordBatchTooLarge.
#[test]
fn appends_fail_with_typed_errors() {
    let mut follower = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    let now = follower.now;
    assert!(matches!(
        follower
            .core
            .append(now, LeaderEpoch(2), vec![Bytes::new()]),
        Err(AppendError::NotLeader { .. })
    ));
    let mut leader = Builder::new(1, &[1, 2, 3])
        .tune(|c| c.max_batch_size_bytes = 1024)
        .build();
    leader.elect();
    let epoch = leader.core.epoch();
    let now = leader.now;
    assert!(matches!(
        leader
            .core
            .append(now, LeaderEpoch(epoch.0 - 1), vec![Bytes::new()]),
        Err(AppendError::NotLeader { .. })
    ));
    assert!(matches!(
        leader.core.append(now, epoch.next(), vec![Bytes::new()]),
        Err(AppendError::FutureEpoch { .. })
    ));
    assert!(matches!(
        leader
            .core
            .append(now, epoch, vec![Bytes::from(vec![0; 2048])]),
        Err(AppendError::RecordBatchTooLarge { .. })
    ));
}

/// testAccumulatorClearedAfterBecomingFollower: buffered appends die with the leadership and
/// nothing is written in the old epoch afterwards.
#[test]
fn losing_leadership_drops_buffered_appends() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.elect();
    let epoch = ctx.core.epoch();
    ctx.core
        .append(ctx.now, epoch, vec![Bytes::from_static(b"lost")])
        .expect("buffered");
    ctx.begin_epoch(2, epoch.0 + 1);
    assert_eq!(ctx.core.role(), RoleKind::Follower);
    let actions = ctx.advance(100);
    assert!(appended(&actions).is_empty());
}

/// Linger: appends within `append.linger.ms` share one batch.
#[test]
fn appends_within_the_linger_share_a_batch() {
    let mut ctx = Builder::new(1, &[1]).build();
    let actions = ctx.take();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    for i in 0..3u8 {
        ctx.core
            .append(ctx.now, epoch, vec![Bytes::from(vec![i])])
            .expect("append");
        ctx.advance(5);
    }
    let actions = ctx.advance(10);
    let batches = appended(&actions);
    assert_eq!(batches.len(), 1);
    assert_eq!(
        (batches[0].base_offset(), batches[0].record_count()),
        (1, 3)
    );
}

/// `flush_appends`: what was appended is written at once, without waiting for the linger.
#[test]
fn flushed_appends_are_written_without_the_linger() {
    let mut ctx = Builder::new(1, &[1]).build();
    let actions = ctx.take();
    ctx.flush_all(&actions);
    let epoch = ctx.core.epoch();
    ctx.core
        .append(
            ctx.now,
            epoch,
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
        )
        .expect("append");
    ctx.core.flush_appends(ctx.now);
    let batches = appended(&ctx.take());
    assert_eq!(batches.len(), 1);
    assert_eq!(
        (batches[0].base_offset(), batches[0].record_count()),
        (1, 2)
    );
    // Nothing left to linger: the timer brings no second batch.
    assert!(appended(&ctx.advance(30)).is_empty());
}

/// testMetrics: the `raft-metrics` gauges follow the state.
#[test]
fn metrics_follow_the_replica_state() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.take();
    assert_eq!(ctx.core.metrics().current_state, "unattached");
    ctx.vote(2, 1, 0, 0);
    let m = ctx.core.metrics();
    assert_eq!(
        (
            m.current_state,
            m.current_vote,
            m.current_epoch,
            m.current_leader
        ),
        ("voted", 2, 1, -1)
    );
    let actions = ctx.elect();
    ctx.flush_all(&actions);
    let m = ctx.core.metrics();
    assert_eq!(
        (m.current_state, m.current_leader, m.current_epoch),
        ("leader", 1, 2)
    );
    assert_eq!((m.log_end_offset, m.log_end_epoch), (1, 2));
    ctx.core.resign(ctx.now, LeaderEpoch(2));
    assert_eq!(
        ctx.core.metrics().current_state,
        "unattached",
        "Resigned reports unattached"
    );
    let observer = Builder::new(9, &[1, 2, 3]).state(2, Some(1), None).build();
    assert_eq!(observer.core.metrics().current_state, "observer");
}

/// testEmptyRecordSetInFetchResponse / testObserverReplication: an empty answer still proves
/// the leader alive (fetch timer reset) and carries its HW; observers replicate like followers.
#[test]
fn empty_fetch_answers_keep_the_follower_attached() {
    let mut ctx = Builder::new(9, &[1, 2, 3]).state(3, Some(1), None).build();
    let (_, id, _) = fetch_requests(&ctx.take()).remove(0);
    ctx.advance(1_500);
    let records = concat(&log_of(&[(2, 2), (3, 1)]));
    let actions = ctx.respond(
        1,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(1, 3, Some(2), records))),
    );
    assert_eq!(hw_advances(&actions), vec![LogOffset(2)]);
    let after = ctx.flush_all(&actions);
    let (_, id, _) = fetch_requests(&after).remove(0);
    ctx.advance(1_500);
    ctx.respond(
        1,
        id,
        RaftResponse::Fetch(wire::fetch_response(&answer(1, 3, Some(3), Bytes::new()))),
    );
    assert_eq!(ctx.core.high_watermark(), LogOffset(3));
    ctx.advance(1_500);
    assert_eq!(
        (ctx.core.role(), ctx.core.leader()),
        (RoleKind::Observer, Some(n(1))),
        "3 s without timeout: answers reset it"
    );
}

/// testResignInOlderEpochIgnored / testCannotResign: only the leader of the given epoch resigns.
#[test]
fn resign_only_applies_to_the_current_leader_epoch() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.elect();
    let epoch = ctx.core.epoch();
    ctx.core.resign(ctx.now, LeaderEpoch(epoch.0 - 1));
    assert_eq!(ctx.core.role(), RoleKind::Leader);
    let mut follower = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    follower.core.resign(follower.now, LeaderEpoch(2));
    assert_eq!(follower.core.role(), RoleKind::Follower);
    ctx.core.resign(ctx.now, epoch);
    assert_eq!(ctx.core.role(), RoleKind::Resigned);
}

/// testGrantVotesWhenShuttingDown / testFollowerGracefulShutdown: a follower shutting down
/// sends nothing special and still votes, but never stands for election itself.
#[test]
fn shutting_down_voters_still_vote_but_never_stand() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).state(2, Some(2), None).build();
    ctx.take();
    ctx.core.begin_shutdown(ctx.now);
    assert!(ctx.take().is_empty());
    assert!(vote_answer(&ctx.vote(3, 3, 0, 0)).2);
    ctx.run_timers(10_000);
    assert_ne!(ctx.core.role(), RoleKind::Candidate);
}

/// testEndQuorumIgnoredAsCandidateIfOlderEpoch / testEndQuorumIgnoredAsLeaderIfOlderEpoch.
#[test]
fn end_quorum_epoch_from_an_older_epoch_is_fenced() {
    let mut ctx = Builder::new(1, &[1, 2, 3]).build();
    ctx.elect();
    let epoch = ctx.core.epoch().0;
    let actions = ctx.end_epoch(2, epoch - 1, &[1]);
    let error = actions.iter().find_map(|a| match a {
        Action::SendResponse {
            response: RaftResponse::EndQuorumEpoch(r),
            ..
        } => wire::parse_end_quorum_epoch_response(r)
            .and_then(|(_, i)| i)
            .and_then(|i| i.error),
        _ => None,
    });
    assert_eq!(error, Some(ResponseError::FencedLeaderEpoch));
    assert_eq!(ctx.core.role(), RoleKind::Leader);
}

/// testInitializeObserverNoPreviousState / testObserverQuorumDiscovery: an observer with no
/// state asks a voter, and a NOT_LEADER answer naming the leader attaches it.
#[test]
fn observer_discovers_the_leader_through_any_voter() {
    let mut ctx = Builder::new(9, &[1, 2, 3]).build();
    let (to, id, _) = fetch_requests(&ctx.take()).remove(0);
    let mut redirect = answer(2, 0, None, Bytes::new());
    redirect.info.error = Some(ResponseError::NotLeaderOrFollower);
    redirect.info.leader_id = Some(n(2));
    redirect.info.epoch = LeaderEpoch(4);
    let actions = ctx.respond(
        to.0,
        id,
        RaftResponse::Fetch(wire::fetch_response(&redirect)),
    );
    assert_eq!(
        (ctx.core.role(), ctx.core.leader(), ctx.core.epoch()),
        (RoleKind::Observer, Some(n(2)), LeaderEpoch(4))
    );
    assert_eq!(fetch_requests(&actions)[0].0, n(2));
}

// -------------------------------------------------------------------------------------------------
// Hostile input: whatever arrives, the core answers or ignores it, never panics
// -------------------------------------------------------------------------------------------------

mod hostile {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Input {
        Vote {
            from: i32,
            voter: i32,
            epoch: i32,
            candidate: i32,
            last_epoch: i32,
            last_offset: i64,
        },
        Begin {
            from: i32,
            voter: i32,
            leader: i32,
            epoch: i32,
        },
        End {
            from: i32,
            leader: i32,
            epoch: i32,
            preferred: Vec<i32>,
        },
        Fetch {
            from: i32,
            replica: i32,
            epoch: i32,
            offset: i64,
            last_epoch: i32,
            max_wait: i32,
        },
        /// Answer the `pick`-th outstanding request with made-up content.
        Answer {
            pick: usize,
            error: i16,
            leader: i32,
            epoch: i32,
            hw: i64,
            diverging: (i32, i64),
            snapshot: (i32, i64),
            records: u8,
            granted: bool,
        },
        Advance {
            ms: u64,
        },
        Flush,
        Append {
            records: u8,
        },
    }

    fn input() -> impl Strategy<Value = Input> {
        let node = -2..7i32;
        let epoch = -1..8i32;
        let offset = -3..20i64;
        prop_oneof![
            (
                node.clone(),
                node.clone(),
                epoch.clone(),
                node.clone(),
                epoch.clone(),
                offset.clone()
            )
                .prop_map(
                    |(from, voter, epoch, candidate, last_epoch, last_offset)| Input::Vote {
                        from,
                        voter,
                        epoch,
                        candidate,
                        last_epoch,
                        last_offset
                    }
                ),
            (node.clone(), node.clone(), node.clone(), epoch.clone()).prop_map(
                |(from, voter, leader, epoch)| Input::Begin {
                    from,
                    voter,
                    leader,
                    epoch
                }
            ),
            (
                node.clone(),
                node.clone(),
                epoch.clone(),
                proptest::collection::vec(node.clone(), 0..5)
            )
                .prop_map(|(from, leader, epoch, preferred)| Input::End {
                    from,
                    leader,
                    epoch,
                    preferred
                }),
            (
                node.clone(),
                -2..10i32,
                epoch.clone(),
                offset.clone(),
                epoch.clone(),
                -1..600i32
            )
                .prop_map(|(from, replica, epoch, offset, last_epoch, max_wait)| {
                    Input::Fetch {
                        from,
                        replica,
                        epoch,
                        offset,
                        last_epoch,
                        max_wait,
                    }
                }),
            (
                0..8usize,
                prop_oneof![
                    Just(0i16),
                    Just(6),
                    Just(8),
                    Just(42),
                    Just(74),
                    Just(75),
                    Just(104),
                    Just(125),
                    Just(-1)
                ],
                node.clone(),
                epoch.clone(),
                offset.clone(),
                (epoch.clone(), offset.clone()),
                (epoch.clone(), offset.clone()),
                0..4u8,
                any::<bool>()
            )
                .prop_map(
                    |(pick, error, leader, epoch, hw, diverging, snapshot, records, granted)| {
                        Input::Answer {
                            pick,
                            error,
                            leader,
                            epoch,
                            hw,
                            diverging,
                            snapshot,
                            records,
                            granted,
                        }
                    }
                ),
            (0..3_000u64).prop_map(|ms| Input::Advance { ms }),
            Just(Input::Flush),
            (1..4u8).prop_map(|records| Input::Append { records }),
        ]
    }

    fn records_blob(kind: u8, base: i64, epoch: i32) -> Bytes {
        match kind {
            0 => Bytes::new(),
            1 => concat(&[batch(base.max(0), epoch.max(0), 2)]),
            2 => Bytes::from_static(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x30garbage"),
            _ => concat(&[batch(base.max(0) + 3, epoch.max(0), 1)]),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Random, hostile requests and responses in any order: no panic, epochs and the
        /// high watermark never go back, and every request gets at most one answer.
        #[test]
        fn hostile_input_never_panics(
            me in 1..4i32,
            start_epoch in 0..4i32,
            start_leader in -1..4i32,
            log_len in 0..3usize,
            inputs in proptest::collection::vec(input(), 1..60),
        ) {
            let shape: Vec<(i32, usize)> = (0..log_len).map(|i| (i32::try_from(i).unwrap_or(0).min(start_epoch), 2)).collect();
            let leader = (start_leader >= 0 && start_leader != me).then_some(start_leader);
            let mut ctx = Builder::new(me, &[1, 2, 3]).state(start_epoch, leader, None).log(log_of(&shape)).build();
            let mut outstanding: Vec<(NodeId, RequestId, &'static str)> = Vec::new();
            let mut flushes: Vec<LogOffset> = Vec::new();
            let mut answered = std::collections::BTreeSet::new();
            let mut last_epoch = ctx.core.epoch();
            let mut last_hw = ctx.core.high_watermark();
            let mut record = |actions: &[Action], outstanding: &mut Vec<(NodeId, RequestId, &'static str)>, flushes: &mut Vec<LogOffset>| {
                for a in actions {
                    match a {
                        Action::SendRequest { to, id, request } => {
                            let kind = match request {
                                RaftRequest::Vote(_) => "vote",
                                RaftRequest::BeginQuorumEpoch(_) => "begin",
                                RaftRequest::EndQuorumEpoch(_) => "end",
                                RaftRequest::Fetch(_) => "fetch",
                                RaftRequest::DescribeQuorum(_) => "describe",
                                RaftRequest::FetchSnapshot(_) => "fetch_snapshot",
                            };
                            outstanding.push((*to, *id, kind));
                        }
                        Action::SendResponse { id, .. } => {
                            assert!(answered.insert(*id), "request {id:?} answered twice");
                        }
                        Action::Flush { end_offset } => flushes.push(*end_offset),
                        _ => {}
                    }
                }
            };
            let initial = ctx.take();
            record(&initial, &mut outstanding, &mut flushes);
            for input in inputs {
                let actions = match input {
                    Input::Vote { from, voter, epoch, candidate, last_epoch, last_offset } => {
                        let mut r = wire::vote_request(CLUSTER, n(voter), LeaderEpoch(epoch), n(candidate), OffsetAndEpoch::new(last_offset, last_epoch));
                        r.voter_id = kafka_protocol::messages::BrokerId(voter);
                        ctx.request(from, RaftRequest::Vote(r)).1
                    }
                    Input::Begin { from, voter, leader, epoch } => {
                        let r = wire::begin_quorum_epoch_request(CLUSTER, n(voter), n(leader), LeaderEpoch(epoch));
                        ctx.request(from, RaftRequest::BeginQuorumEpoch(r)).1
                    }
                    Input::End { from, leader, epoch, preferred } => {
                        let preferred: Vec<NodeId> = preferred.into_iter().map(NodeId).collect();
                        let r = wire::end_quorum_epoch_request(CLUSTER, n(leader), LeaderEpoch(epoch), &preferred);
                        ctx.request(from, RaftRequest::EndQuorumEpoch(r)).1
                    }
                    Input::Fetch { from, replica, epoch, offset, last_epoch, max_wait } => {
                        let mut r = wire::fetch_request(CLUSTER, n(replica), LeaderEpoch(epoch), OffsetAndEpoch::new(offset, last_epoch), 0, 1 << 20);
                        r.max_wait_ms = max_wait;
                        ctx.request(from, RaftRequest::Fetch(r)).1
                    }
                    Input::Answer { pick, error, leader, epoch, hw, diverging, snapshot, records, granted } => {
                        if outstanding.is_empty() {
                            continue;
                        }
                        let (to, id, kind) = outstanding.remove(pick % outstanding.len());
                        let info = wire::LeaderInfo {
                            error: ResponseError::try_from_code(error),
                            leader_id: (leader >= 0).then_some(NodeId(leader)),
                            epoch: LeaderEpoch(epoch),
                        };
                        let response = match kind {
                            "vote" => RaftResponse::Vote(wire::vote_response(info, granted)),
                            "begin" => RaftResponse::BeginQuorumEpoch(wire::begin_quorum_epoch_response(info)),
                            "end" => RaftResponse::EndQuorumEpoch(wire::end_quorum_epoch_response(info)),
                            "fetch_snapshot" => RaftResponse::FetchSnapshot(wire::fetch_snapshot_response(&wire::SnapshotSlice {
                                info,
                                snapshot_id: OffsetAndEpoch::new(snapshot.1, snapshot.0),
                                size: hw,
                                position: diverging.1,
                                bytes: records_blob(records, 0, 0),
                            })),
                            _ => {
                                let mut r = wire::fetch_response(&wire::FetchAnswer {
                                    info,
                                    high_watermark: (hw >= 0).then_some(LogOffset(hw)),
                                    diverging: None,
                                    snapshot_id: None,
                                    malformed_snapshot_id: false,
                                    records: records_blob(records, ctx.core.log_end().offset.0, epoch),
                                });
                                let p = &mut r.responses[0].partitions[0];
                                p.diverging_epoch.epoch = diverging.0;
                                p.diverging_epoch.end_offset = diverging.1;
                                p.snapshot_id.epoch = snapshot.0;
                                p.snapshot_id.end_offset = snapshot.1;
                                RaftResponse::Fetch(r)
                            }
                        };
                        ctx.respond(to.0, id, response)
                    }
                    Input::Advance { ms } => ctx.advance(ms),
                    Input::Flush => {
                        if flushes.is_empty() {
                            continue;
                        }
                        let end = flushes.remove(0);
                        ctx.core.handle_flushed(ctx.now, end);
                        ctx.take()
                    }
                    Input::Append { records } => {
                        let epoch = ctx.core.epoch();
                        let now = ctx.now;
                        let _ = ctx.core.append(now, epoch, (0..records).map(|i| Bytes::from(vec![i])).collect());
                        ctx.take()
                    }
                };
                record(&actions, &mut outstanding, &mut flushes);
                prop_assert!(ctx.core.epoch() >= last_epoch, "epoch went back");
                prop_assert!(ctx.core.high_watermark() >= last_hw, "high watermark went back");
                prop_assert!(ctx.core.high_watermark() <= ctx.core.log_end().offset, "HW beyond the log end");
                last_epoch = ctx.core.epoch();
                last_hw = ctx.core.high_watermark();
            }
        }
    }
}
