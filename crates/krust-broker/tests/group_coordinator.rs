//! The classic group coordinator shard, driven with explicit time: every state transition,
//! rebalances through joins, leaves and session timeouts, KIP-394 and KIP-345 (static
//! members), generation/member fencing, offsets, admin requests, appends gating responses,
//! and a property: the state rebuilt from the emitted records equals the live state.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, ProducerId, SyncGroupRequest, TopicName,
    TransactionalId, TxnOffsetCommitRequest,
    join_group_request::JoinGroupRequestProtocol,
    leave_group_request::MemberIdentity,
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic},
    offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    },
    sync_group_request::SyncGroupRequestAssignment,
    txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic},
};
use kafka_protocol::protocol::StrBytes;
use krust_broker::group::{
    Action, CoordinatorRecord, GroupConfig, GroupCoordinatorShard, GroupError, GroupRequest,
    GroupResponse, GroupState, RequestContext, RequestId, TxnAppend,
};

const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;
const GROUP_MAX_SIZE_REACHED: i16 = 81;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
const NOT_COORDINATOR: i16 = 16;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// ConsumerProtocolSubscription v0 with `topics`, null user data.
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = vec![0, 0];
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    Bytes::from(b)
}

/// Drives a shard: records go to `log` (encoded), appends commit at once unless `hold_appends`.
struct Harness {
    shard: GroupCoordinatorShard,
    now: i64,
    next_request: u64,
    log: Vec<(Bytes, Option<Bytes>)>,
    records: Vec<CoordinatorRecord>,
    responses: BTreeMap<u64, GroupResponse>,
    hold_appends: bool,
    held: Vec<krust_broker::group::AppendId>,
    /// Transactional appends emitted, in order.
    txn_appends: Vec<(krust_broker::group::AppendId, TxnAppend)>,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(GroupConfig::default())
    }

    fn with_config(config: GroupConfig) -> Self {
        Harness {
            shard: GroupCoordinatorShard::new(config, 0, 42),
            now: 0,
            next_request: 0,
            log: Vec::new(),
            records: Vec::new(),
            responses: BTreeMap::new(),
            hold_appends: false,
            held: Vec::new(),
            txn_appends: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(action) = self.shard.poll_action() {
            match action {
                Action::Append {
                    append_id,
                    records,
                    txn,
                } => {
                    if let Some(txn) = txn {
                        self.txn_appends.push((append_id, txn));
                    }
                    for r in records {
                        self.log.push(r.encode());
                        self.records.push(r);
                    }
                    if self.hold_appends {
                        self.held.push(append_id);
                    } else {
                        self.shard.handle_append_committed(append_id);
                    }
                }
                Action::Respond {
                    request_id,
                    response,
                } => {
                    assert!(
                        self.responses.insert(request_id.0, response).is_none(),
                        "two responses"
                    );
                }
            }
        }
    }

    fn send_v(&mut self, api_version: i16, request: GroupRequest) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let ctx = RequestContext {
            api_version,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
        };
        self.shard.handle_request(self.now, id, &ctx, request);
        self.drain();
        id
    }

    fn send(&mut self, request: GroupRequest) -> RequestId {
        self.send_v(9, request)
    }

    fn advance(&mut self, ms: i64) {
        let target = self.now + ms;
        for _ in 0..10_000 {
            match self.shard.poll_timeout() {
                Some(t) if t <= target => {
                    self.now = self.now.max(t);
                    self.shard.handle_timeout(self.now);
                    self.drain();
                }
                _ => break,
            }
        }
        self.now = target;
    }

    fn take(&mut self, id: RequestId) -> Option<GroupResponse> {
        self.responses.remove(&id.0)
    }

    fn join_response(&mut self, id: RequestId) -> JoinGroupResponse {
        match self.take(id) {
            Some(GroupResponse::JoinGroup(r)) => r,
            other => panic!("expected a join response, got {other:?}"),
        }
    }

    fn error_code(&mut self, id: RequestId) -> i16 {
        match self.take(id).expect("a response") {
            GroupResponse::JoinGroup(r) => r.error_code,
            GroupResponse::SyncGroup(r) => r.error_code,
            GroupResponse::Heartbeat(r) => r.error_code,
            GroupResponse::LeaveGroup(r) => r.error_code,
            GroupResponse::OffsetDelete(r) => r.error_code,
            other => panic!("no single error code in {other:?}"),
        }
    }

    fn state(&self, group: &str) -> Option<GroupState> {
        self.shard.groups().get(group).map(|g| g.state)
    }

    /// Joins with KIP-394's two steps; returns the parked request and the member id.
    fn join_new(&mut self, group: &str, topics: &[&str]) -> (RequestId, String) {
        let first = self.send(join(group, "", None, topics));
        let r = self.join_response(first);
        assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
        let member = r.member_id.to_string();
        (self.send(join(group, &member, None, topics)), member)
    }

    /// One member, joined, synced and Stable; returns its member id (generation 1).
    fn stable_single(&mut self, group: &str, topics: &[&str]) -> String {
        let (id, member) = self.join_new(group, topics);
        self.advance(3000);
        let r = self.join_response(id);
        assert_eq!(r.error_code, NONE);
        let sync_id = self.send(sync(group, &member, r.generation_id, &[(&member, b"a")]));
        assert_eq!(self.error_code(sync_id), NONE);
        member
    }
}

fn join(group: &str, member: &str, instance: Option<&str>, topics: &[&str]) -> GroupRequest {
    GroupRequest::JoinGroup(
        JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(member))
            .with_group_instance_id(instance.map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(subscription(topics)),
            ]),
    )
}

fn sync(
    group: &str,
    member: &str,
    generation: i32,
    assignments: &[(&str, &'static [u8])],
) -> GroupRequest {
    GroupRequest::SyncGroup(
        SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(Bytes::from_static(a))
                    })
                    .collect(),
            ),
    )
}

fn heartbeat(group: &str, member: &str, generation: i32) -> GroupRequest {
    GroupRequest::Heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member)),
    )
}

fn leave(group: &str, members: &[(&str, Option<&str>)]) -> GroupRequest {
    GroupRequest::LeaveGroup(
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_members(
                members
                    .iter()
                    .map(|(m, i)| {
                        MemberIdentity::default()
                            .with_member_id(s(m))
                            .with_group_instance_id(i.map(s))
                    })
                    .collect(),
            ),
    )
}

fn commit(
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(&str, i32, i64, &str)],
) -> GroupRequest {
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (t, p, o, m) in offsets {
        topics.entry(t).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(3)
                .with_committed_metadata(Some(s(m))),
        );
    }
    GroupRequest::OffsetCommit(
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_retention_time_ms(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            ),
    )
}

fn commit_codes(h: &mut Harness, id: RequestId) -> Vec<(String, i32, i16)> {
    match h.take(id).expect("commit response") {
        GroupResponse::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v7 (single group) → (topic, partition, offset, metadata).
fn fetch(
    h: &mut Harness,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> Vec<(String, i32, i64, String)> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s(t)))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }));
    let id = h.send_v(7, GroupRequest::OffsetFetch(request));
    match h.take(id).expect("fetch response") {
        GroupResponse::OffsetFetch(r) => r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.metadata.as_deref().unwrap_or("").to_owned(),
                    )
                })
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

// ---- State machine --------------------------------------------------------------------------

#[test]
fn state_transitions_follow_kafkas_valid_previous_states() {
    use GroupState::*;
    let all = [Empty, PreparingRebalance, CompletingRebalance, Stable, Dead];
    let allowed = [
        (PreparingRebalance, Empty),
        (Empty, PreparingRebalance),
        (CompletingRebalance, PreparingRebalance),
        (Stable, PreparingRebalance),
        (PreparingRebalance, CompletingRebalance),
        (CompletingRebalance, Stable),
    ];
    for from in all {
        for to in all {
            let expected = to == Dead || allowed.contains(&(from, to));
            assert_eq!(from.may_become(to), expected, "{from:?} -> {to:?}");
        }
    }
}

#[test]
fn first_join_without_member_id_gets_member_id_required_from_v4() {
    let mut h = Harness::new();
    let id = h.send(join("g", "", None, &["t"]));
    let r = h.join_response(id);
    assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
    assert!(
        r.member_id.starts_with("client-"),
        "member id is client id + uuid: {}",
        r.member_id
    );
    assert_eq!(
        h.state("g"),
        Some(GroupState::Empty),
        "a pending member does not start a rebalance"
    );
    // v3 and older: the member is added at once.
    let id = h.send_v(3, join("g2", "", None, &["t"]));
    assert!(h.take(id).is_none(), "parked until the join phase ends");
    assert_eq!(h.state("g2"), Some(GroupState::PreparingRebalance));
}

#[test]
fn pending_member_that_never_rejoins_expires_after_its_session_timeout() {
    let mut h = Harness::new();
    let id = h.send(join("g", "", None, &["t"]));
    let member = h.join_response(id).member_id.to_string();
    h.advance(10_000);
    let id = h.send(join("g", &member, None, &["t"]));
    assert_eq!(h.join_response(id).error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn new_group_waits_initial_rebalance_delay_then_empty_to_preparing_to_completing() {
    let mut h = Harness::new();
    let (id, member) = h.join_new("g", &["t"]);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    h.advance(2999);
    assert!(
        h.take(id).is_none(),
        "group.initial.rebalance.delay.ms is 3000"
    );
    h.advance(1);
    let r = h.join_response(id);
    assert_eq!((r.error_code, r.generation_id), (NONE, 1));
    assert_eq!(r.leader.as_str(), member);
    assert_eq!(
        r.protocol_name.as_ref().map(|p| p.to_string()).as_deref(),
        Some("range")
    );
    assert_eq!(r.members.len(), 1, "the leader gets the member list");
    assert_eq!(h.state("g"), Some(GroupState::CompletingRebalance));
}

#[test]
fn member_joining_during_initial_delay_extends_it_and_both_get_responses() {
    let mut h = Harness::new();
    let (a, member_a) = h.join_new("g", &["t"]);
    h.advance(2000);
    let (b, member_b) = h.join_new("g", &["t"]);
    h.advance(1000); // first delay over; a member was added → one more delay
    assert!(h.take(a).is_none());
    h.advance(3000);
    let ra = h.join_response(a);
    let rb = h.join_response(b);
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(
        ra.leader.as_str(),
        member_a,
        "the first member to join leads"
    );
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty(), "followers get no member list");
    assert_eq!(rb.member_id.as_str(), member_b);
}

#[test]
fn leader_sync_stores_assignment_and_group_becomes_stable() {
    let mut h = Harness::new();
    let (a, member_a) = h.join_new("g", &["t"]);
    let (b, member_b) = h.join_new("g", &["t"]);
    h.advance(6000);
    let generation = h.join_response(a).generation_id;
    h.join_response(b);
    let follower_sync = h.send(sync("g", &member_b, generation, &[]));
    assert!(
        h.take(follower_sync).is_none(),
        "a follower waits for the leader"
    );
    let before = h.records.len();
    let leader_sync = h.send(sync(
        "g",
        &member_a,
        generation,
        &[(&member_a, b"A"), (&member_b, b"B")],
    ));
    assert_eq!(h.state("g"), Some(GroupState::Stable));
    let assignment = |r: Option<GroupResponse>| match r {
        Some(GroupResponse::SyncGroup(r)) => (r.error_code, r.assignment),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        assignment(h.take(leader_sync)),
        (NONE, Bytes::from_static(b"A"))
    );
    assert_eq!(
        assignment(h.take(follower_sync)),
        (NONE, Bytes::from_static(b"B"))
    );
    let written = &h.records[before..];
    assert!(
        matches!(written, [CoordinatorRecord::GroupMetadata { value: Some(v), .. }]
        if v.generation == 1 && v.members.len() == 2),
        "{written:?}"
    );
    // A late sync in Stable gets the stored assignment.
    let again = h.send(sync("g", &member_b, generation, &[]));
    assert_eq!(assignment(h.take(again)), (NONE, Bytes::from_static(b"B")));
}

#[test]
fn sync_fencing_illegal_generation_unknown_member_rebalance_in_progress() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    let id = h.send(sync("g", &member, 7, &[]));
    assert_eq!(h.error_code(id), ILLEGAL_GENERATION);
    let id = h.send(sync("g", "nobody", 1, &[]));
    assert_eq!(h.error_code(id), UNKNOWN_MEMBER_ID);
    let id = h.send(sync("nogroup", &member, 1, &[]));
    assert_eq!(h.error_code(id), UNKNOWN_MEMBER_ID);
    let (_, _other) = h.join_new("g", &["t"]); // a new member starts a rebalance
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    let id = h.send(sync("g", &member, 1, &[]));
    assert_eq!(h.error_code(id), REBALANCE_IN_PROGRESS);
}

#[test]
fn heartbeat_errors_and_rebalance_in_progress_during_rebalance() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    let id = h.send(heartbeat("g", &member, 1));
    assert_eq!(h.error_code(id), NONE);
    let id = h.send(heartbeat("g", &member, 0));
    assert_eq!(h.error_code(id), ILLEGAL_GENERATION);
    let id = h.send(heartbeat("g", "nobody", 1));
    assert_eq!(h.error_code(id), UNKNOWN_MEMBER_ID);
    let id = h.send(heartbeat("nogroup", &member, 1));
    assert_eq!(h.error_code(id), UNKNOWN_MEMBER_ID);
    h.join_new("g", &["t"]);
    let id = h.send(heartbeat("g", &member, 1));
    assert_eq!(h.error_code(id), REBALANCE_IN_PROGRESS);
}

#[test]
fn session_timeout_removes_silent_member_and_rebalances_the_rest() {
    let mut h = Harness::new();
    let (a, member_a) = h.join_new("g", &["t"]);
    let (b, member_b) = h.join_new("g", &["t"]);
    h.advance(6000);
    h.join_response(a);
    h.join_response(b);
    let sa = h.send(sync(
        "g",
        &member_a,
        1,
        &[(&member_a, b"A"), (&member_b, b"B")],
    ));
    let sb = h.send(sync("g", &member_b, 1, &[]));
    assert_eq!((h.error_code(sa), h.error_code(sb)), (NONE, NONE));
    // Only a heartbeats; b's 10 s session expires.
    for _ in 0..4 {
        h.advance(3000);
        let id = h.send(heartbeat("g", &member_a, 1));
        let code = h.error_code(id);
        if h.state("g") == Some(GroupState::PreparingRebalance) {
            assert_eq!(code, REBALANCE_IN_PROGRESS);
        }
    }
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert!(
        !h.shard.groups()["g"].members.contains_key(&member_b),
        "expired member removed"
    );
    let rejoin = h.send(join("g", &member_a, None, &["t"]));
    let r = h.join_response(rejoin);
    assert_eq!(
        (r.error_code, r.generation_id, r.members.len()),
        (NONE, 2, 1),
        "all remaining joined: no wait"
    );
    assert_eq!(h.state("g"), Some(GroupState::CompletingRebalance));
}

#[test]
fn member_that_does_not_rejoin_within_rebalance_timeout_is_removed() {
    let mut h = Harness::new();
    let (a, member_a) = h.join_new("g", &["t"]);
    let (b, member_b) = h.join_new("g", &["t"]);
    h.advance(6000);
    h.join_response(a);
    h.join_response(b);
    h.send(sync("g", &member_a, 1, &[]));
    h.send(sync("g", &member_b, 1, &[]));
    let id = h.send(join("g", &member_a, None, &["t", "u"])); // new subscription → rebalance
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    for _ in 0..10 {
        h.advance(3000);
        h.send(heartbeat("g", &member_b, 1)); // alive, but never rejoins
    }
    let r = h.join_response(id);
    assert_eq!(
        (r.generation_id, r.members.len()),
        (2, 1),
        "30 s rebalance timeout dropped b"
    );
}

#[test]
fn leave_group_v3_batches_members_and_last_leave_empties_the_group() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    let before = h.records.len();
    let id = h.send_v(3, leave("g", &[(&member, None), ("ghost", None)]));
    match h.take(id) {
        Some(GroupResponse::LeaveGroup(r)) => {
            assert_eq!(r.error_code, NONE);
            let codes: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
            assert_eq!(codes, vec![NONE, UNKNOWN_MEMBER_ID]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.state("g"),
        Some(GroupState::Empty),
        "Stable → PreparingRebalance → Empty"
    );
    let g = &h.shard.groups()["g"];
    assert_eq!(g.generation_id, 2);
    assert!(
        matches!(&h.records[before..], [CoordinatorRecord::GroupMetadata { value: Some(v), .. }]
        if v.members.is_empty() && v.generation == 2 && v.protocol.is_none())
    );
    let id = h.send_v(
        1,
        GroupRequest::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_member_id(s("ghost")),
        ),
    );
    assert_eq!(
        h.error_code(id),
        UNKNOWN_MEMBER_ID,
        "v0-2 answer at the top level"
    );
}

#[test]
fn static_member_rejoin_replaces_member_without_rebalance() {
    let mut h = Harness::new();
    let first = h.send(join("g", "", Some("instance-1"), &["t"]));
    h.advance(3000);
    let r = h.join_response(first);
    let old_id = r.member_id.to_string();
    assert!(
        old_id.starts_with("instance-1-"),
        "static ids are instance id + uuid"
    );
    h.send(sync("g", &old_id, 1, &[(&old_id, b"A")]));
    assert_eq!(h.state("g"), Some(GroupState::Stable));
    let before = h.records.len();
    let rejoin = h.send(join("g", "", Some("instance-1"), &["t"]));
    let r = h.join_response(rejoin);
    let new_id = r.member_id.to_string();
    assert_eq!(
        (r.error_code, r.generation_id),
        (NONE, 1),
        "same generation: no rebalance"
    );
    assert_ne!(new_id, old_id);
    assert!(
        r.skip_assignment,
        "a static leader rebuilds without assigning (KIP-814)"
    );
    assert_eq!(h.state("g"), Some(GroupState::Stable));
    assert!(
        matches!(&h.records[before..], [CoordinatorRecord::GroupMetadata { value: Some(v), .. }]
        if v.members[0].member_id == new_id && v.leader.as_deref() == Some(new_id.as_str()))
    );
    // The old incarnation is fenced.
    let hb = GroupRequest::Heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id(1)
            .with_member_id(s(&old_id))
            .with_group_instance_id(Some(s("instance-1"))),
    );
    let id = h.send(hb);
    assert_eq!(h.error_code(id), FENCED_INSTANCE_ID);
    let id = h.send(sync("g", &new_id, 1, &[]));
    assert_eq!(
        h.error_code(id),
        NONE,
        "the new id gets the stored assignment"
    );
}

#[test]
fn join_validation_session_timeout_protocol_and_max_size() {
    let mut h = Harness::with_config(GroupConfig {
        group_max_size: 1,
        ..GroupConfig::default()
    });
    let mut bad = join("g", "", None, &["t"]);
    if let GroupRequest::JoinGroup(r) = &mut bad {
        r.session_timeout_ms = 5999;
    }
    let id = h.send(bad);
    assert_eq!(h.error_code(id), INVALID_SESSION_TIMEOUT);
    let mut no_protocols = join("g", "", None, &["t"]);
    if let GroupRequest::JoinGroup(r) = &mut no_protocols {
        r.protocols.clear();
    }
    let id = h.send(no_protocols);
    assert_eq!(h.error_code(id), INCONSISTENT_GROUP_PROTOCOL);
    h.stable_single("g", &["t"]);
    let mut other_type = join("g", "", None, &["t"]);
    if let GroupRequest::JoinGroup(r) = &mut other_type {
        r.protocol_type = s("connect");
    }
    let id = h.send(other_type);
    assert_eq!(h.error_code(id), INCONSISTENT_GROUP_PROTOCOL);
    let id = h.send(join("g", "", None, &["t"]));
    assert_eq!(
        h.error_code(id),
        GROUP_MAX_SIZE_REACHED,
        "group.max.size = 1"
    );
    let id = h.send(join("nogroup", "someone", None, &["t"]));
    assert_eq!(h.error_code(id), UNKNOWN_MEMBER_ID);
}

// ---- Offsets ----------------------------------------------------------------------------------

#[test]
fn simple_commit_with_generation_minus_one_creates_an_empty_group_and_fetches_back() {
    let mut h = Harness::new();
    let id = h.send(commit(
        "simple",
        "",
        -1,
        &[("t", 0, 42, "meta"), ("t", 1, 7, "")],
    ));
    assert_eq!(
        commit_codes(&mut h, id),
        vec![("t".into(), 0, NONE), ("t".into(), 1, NONE)]
    );
    assert_eq!(h.state("simple"), Some(GroupState::Empty));
    assert_eq!(
        fetch(&mut h, "simple", Some(&[("t", &[0, 1, 2])])),
        vec![
            ("t".into(), 0, 42, "meta".into()),
            ("t".into(), 1, 7, String::new()),
            ("t".into(), 2, -1, String::new())
        ]
    );
    assert_eq!(
        fetch(&mut h, "simple", None).len(),
        2,
        "null topics → all committed offsets"
    );
    assert!(fetch(&mut h, "unknown", None).is_empty());
}

#[test]
fn offset_commit_checks_generation_and_member() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    let id = h.send(commit("g", &member, 1, &[("t", 0, 1, "")]));
    assert_eq!(commit_codes(&mut h, id)[0].2, NONE);
    let id = h.send(commit("g", &member, 2, &[("t", 0, 1, "")]));
    assert_eq!(commit_codes(&mut h, id)[0].2, ILLEGAL_GENERATION);
    let id = h.send(commit("g", "nobody", 1, &[("t", 0, 1, "")]));
    assert_eq!(commit_codes(&mut h, id)[0].2, UNKNOWN_MEMBER_ID);
    let id = h.send(commit("g", "", -1, &[("t", 0, 1, "")]));
    assert_eq!(
        commit_codes(&mut h, id)[0].2,
        UNKNOWN_MEMBER_ID,
        "simple commits only for empty groups"
    );
    let id = h.send(commit("nogroup", "m", 3, &[("t", 0, 1, "")]));
    assert_eq!(commit_codes(&mut h, id)[0].2, ILLEGAL_GENERATION);
}

#[test]
fn oversized_commit_metadata_is_refused_per_partition() {
    let mut h = Harness::new();
    let big = "x".repeat(4097);
    let ok = "y".repeat(4096);
    let id = h.send(commit("g", "", -1, &[("t", 0, 1, &big), ("t", 1, 2, &ok)]));
    assert_eq!(
        commit_codes(&mut h, id),
        vec![
            ("t".into(), 0, OFFSET_METADATA_TOO_LARGE),
            ("t".into(), 1, NONE)
        ]
    );
    assert_eq!(
        fetch(&mut h, "g", Some(&[("t", &[0])]))[0].2,
        -1,
        "nothing stored for the refused partition"
    );
}

#[test]
fn offset_fetch_v8_answers_several_groups() {
    let mut h = Harness::new();
    h.send(commit("a", "", -1, &[("t", 0, 5, "")]));
    h.send(commit("b", "", -1, &[("u", 1, 6, "")]));
    let request = OffsetFetchRequest::default()
        .with_require_stable(true)
        .with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("a")))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("b")))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("u")))
                        .with_partition_indexes(vec![1]),
                ])),
        ]);
    let id = h.send_v(8, GroupRequest::OffsetFetch(request));
    let Some(GroupResponse::OffsetFetch(r)) = h.take(id) else {
        panic!("fetch")
    };
    let got: Vec<(String, i64, i16)> = r
        .groups
        .iter()
        .flat_map(|g| {
            g.topics.iter().flat_map(move |t| {
                t.partitions
                    .iter()
                    .map(move |p| (g.group_id.0.to_string(), p.committed_offset, p.error_code))
            })
        })
        .collect();
    assert_eq!(
        got,
        vec![("a".into(), 5, NONE), ("b".into(), 6, NONE)],
        "require_stable: nothing pending, no UNSTABLE_OFFSET_COMMIT"
    );
}

#[test]
fn responses_wait_until_their_records_are_committed() {
    let mut h = Harness::new();
    h.hold_appends = true;
    let id = h.send(commit("g", "", -1, &[("t", 0, 1, "")]));
    assert!(h.take(id).is_none(), "held until the append commits");
    let read = h.send(GroupRequest::ListGroups(ListGroupsRequest::default()));
    assert!(
        h.take(read).is_none(),
        "later reads wait too: no uncommitted state leaks"
    );
    let append = h.held.remove(0);
    h.shard.handle_append_committed(append);
    h.drain();
    assert_eq!(commit_codes(&mut h, id)[0].2, NONE);
    assert!(h.take(read).is_some());
}

#[test]
fn failed_append_answers_not_coordinator_from_then_on() {
    let mut h = Harness::new();
    h.hold_appends = true;
    let id = h.send(commit("g", "", -1, &[("t", 0, 1, "")]));
    let append = h.held.remove(0);
    h.shard.handle_append_failed(append);
    h.drain();
    assert_eq!(commit_codes(&mut h, id)[0].2, NOT_COORDINATOR);
    let id = h.send(heartbeat("g", "m", 1));
    assert_eq!(h.error_code(id), NOT_COORDINATOR);
}

fn offset_delete(group: &str, topics: &[(&str, i32)]) -> GroupRequest {
    GroupRequest::OffsetDelete(
        OffsetDeleteRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(
                topics
                    .iter()
                    .map(|(t, p)| {
                        OffsetDeleteRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetDeleteRequestPartition::default().with_partition_index(*p),
                            ])
                    })
                    .collect(),
            ),
    )
}

#[test]
fn offset_delete_refuses_subscribed_topics_and_deletes_the_rest() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    h.send(commit(
        "g",
        &member,
        1,
        &[("t", 0, 1, ""), ("old", 0, 2, "")],
    ));
    let id = h.send(offset_delete("g", &[("t", 0), ("old", 0)]));
    let Some(GroupResponse::OffsetDelete(r)) = h.take(id) else {
        panic!("delete")
    };
    let codes: Vec<i16> = r
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(codes, vec![GROUP_SUBSCRIBED_TO_TOPIC, NONE]);
    assert!(
        matches!(h.records.last(), Some(CoordinatorRecord::OffsetCommit { topic, value: None, .. }) if topic == "old")
    );
    let id = h.send(offset_delete("nogroup", &[("t", 0)]));
    assert_eq!(h.error_code(id), GROUP_ID_NOT_FOUND);
}

#[test]
fn malformed_protocol_metadata_does_not_panic_and_counts_as_subscribed() {
    let mut h = Harness::new();
    let mut garbage = join("g", "", None, &[]);
    if let GroupRequest::JoinGroup(r) = &mut garbage {
        r.protocols[0].metadata = Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff, 1]);
    }
    let id = h.send(garbage.clone());
    let member = h.join_response(id).member_id.to_string();
    if let GroupRequest::JoinGroup(r) = &mut garbage {
        r.member_id = s(&member);
    }
    let id = h.send(garbage);
    h.advance(3000);
    h.join_response(id);
    h.send(sync("g", &member, 1, &[]));
    h.send(commit("g", &member, 1, &[("t", 0, 1, "")]));
    let id = h.send(offset_delete("g", &[("t", 0)]));
    let Some(GroupResponse::OffsetDelete(r)) = h.take(id) else {
        panic!("delete")
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code, GROUP_SUBSCRIBED_TO_TOPIC,
        "unknown subscription → subscribed to all"
    );
    let id = h.send(GroupRequest::DescribeGroups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
    ));
    assert!(h.take(id).is_some());
}

#[test]
fn delete_groups_refuses_non_empty_and_unknown_and_tombstones_empty_ones() {
    let mut h = Harness::new();
    h.stable_single("busy", &["t"]);
    h.send(commit("idle", "", -1, &[("t", 0, 1, "")]));
    let names = ["busy", "missing", "idle"]
        .iter()
        .map(|n| GroupId(s(n)))
        .collect();
    let id = h.send(GroupRequest::DeleteGroups(
        DeleteGroupsRequest::default().with_groups_names(names),
    ));
    let Some(GroupResponse::DeleteGroups(r)) = h.take(id) else {
        panic!("delete")
    };
    let codes: Vec<i16> = r.results.iter().map(|g| g.error_code).collect();
    assert_eq!(codes, vec![NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, NONE]);
    assert_eq!(h.state("idle"), None);
    let tail = &h.records[h.records.len() - 2..];
    assert!(matches!(
        tail,
        [
            CoordinatorRecord::OffsetCommit { value: None, .. },
            CoordinatorRecord::GroupMetadata { value: None, .. }
        ]
    ));
}

#[test]
fn list_groups_filters_by_state_and_describe_shows_stable_members() {
    let mut h = Harness::new();
    let member = h.stable_single("stable", &["t"]);
    h.send(commit("simple", "", -1, &[("t", 0, 1, "")]));
    let request = ListGroupsRequest::default().with_states_filter(vec![s("stable")]);
    let id = h.send_v(4, GroupRequest::ListGroups(request));
    let Some(GroupResponse::ListGroups(r)) = h.take(id) else {
        panic!("list")
    };
    let listed: Vec<(String, String)> = r
        .groups
        .iter()
        .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
        .collect();
    assert_eq!(listed, vec![("stable".into(), "Stable".into())]);
    let id = h.send(GroupRequest::ListGroups(ListGroupsRequest::default()));
    let Some(GroupResponse::ListGroups(r)) = h.take(id) else {
        panic!("list")
    };
    assert_eq!(r.groups.len(), 2);
    let names = ["stable", "none"].iter().map(|n| GroupId(s(n))).collect();
    let id = h.send(GroupRequest::DescribeGroups(
        DescribeGroupsRequest::default().with_groups(names),
    ));
    let Some(GroupResponse::DescribeGroups(r)) = h.take(id) else {
        panic!("describe")
    };
    assert_eq!(r.groups[0].group_state.as_str(), "Stable");
    assert_eq!(r.groups[0].protocol_data.as_str(), "range");
    assert_eq!(r.groups[0].members[0].member_id.as_str(), member);
    assert_eq!(
        r.groups[0].members[0].member_assignment,
        Bytes::from_static(b"a")
    );
    assert_eq!(
        r.groups[1].group_state.as_str(),
        "Dead",
        "unknown groups describe as Dead"
    );
}

#[test]
fn offsets_of_an_empty_group_expire_after_offsets_retention_minutes() {
    let mut h = Harness::new();
    h.send(commit("g", "", -1, &[("t", 0, 1, "")]));
    h.advance(7 * 24 * 3600 * 1000 - 600_000);
    assert_eq!(fetch(&mut h, "g", None).len(), 1, "not yet 7 days");
    h.advance(600_000);
    assert!(
        fetch(&mut h, "g", None).is_empty(),
        "expired at the retention check after 7 days"
    );
    assert_eq!(
        h.state("g"),
        None,
        "an empty group without offsets is removed"
    );
    assert!(matches!(
        h.records.last(),
        Some(CoordinatorRecord::GroupMetadata { value: None, .. })
    ));
}

// ---- Replay = live ----------------------------------------------------------------------------

/// What the log holds for a group: everything of Stable/Empty groups except timers and parked
/// requests (Preparing/Completing groups are ahead of their last record by design).
type DurableGroup = (
    i32,
    Option<String>,
    Option<String>,
    Option<String>,
    Vec<(String, Option<String>, String, i32, i32, Bytes, Bytes)>,
);

fn durable_view(
    shard: &GroupCoordinatorShard,
) -> (BTreeMap<String, DurableGroup>, BTreeSet<String>) {
    let mut groups = BTreeMap::new();
    let mut skipped = BTreeSet::new();
    for (id, g) in shard.groups() {
        let no_offsets = !shard.offsets().contains_key(id);
        if !matches!(g.state, GroupState::Stable | GroupState::Empty)
            || (g.generation_id == 0 && no_offsets)
        {
            skipped.insert(id.clone());
            continue;
        }
        let protocol = g.protocol_name.clone();
        let members = g
            .members
            .values()
            .map(|m| {
                let sub = protocol
                    .as_deref()
                    .and_then(|p| m.metadata(p).cloned())
                    .unwrap_or_default();
                (
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.client_id.clone(),
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    sub,
                    m.assignment.clone(),
                )
            })
            .collect();
        groups.insert(
            id.clone(),
            (
                g.generation_id,
                g.protocol_type.clone(),
                protocol,
                g.leader_id.clone(),
                members,
            ),
        );
    }
    (groups, skipped)
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        client: usize,
        static_member: bool,
    },
    Sync {
        client: usize,
    },
    Heartbeat {
        client: usize,
    },
    Leave {
        client: usize,
    },
    Commit {
        client: usize,
        partition: i32,
        offset: i64,
    },
    SimpleCommit {
        group: usize,
        partition: i32,
    },
    DeleteOffset {
        group: usize,
        partition: i32,
    },
    DeleteGroup {
        group: usize,
    },
    Advance {
        ms: i64,
    },
}

fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0..4usize, any::<bool>()).prop_map(|(client, static_member)| Op::Join { client, static_member }),
        3 => (0..4usize).prop_map(|client| Op::Sync { client }),
        2 => (0..4usize).prop_map(|client| Op::Heartbeat { client }),
        1 => (0..4usize).prop_map(|client| Op::Leave { client }),
        2 => (0..4usize, 0..3i32, 0..1000i64).prop_map(|(client, partition, offset)| Op::Commit { client, partition, offset }),
        1 => (0..3usize, 0..3i32).prop_map(|(group, partition)| Op::SimpleCommit { group, partition }),
        1 => (0..3usize, 0..3i32).prop_map(|(group, partition)| Op::DeleteOffset { group, partition }),
        1 => (0..3usize).prop_map(|group| Op::DeleteGroup { group }),
        2 => prop_oneof![Just(500i64), Just(3000), Just(11_000), Just(40_000)].prop_map(|ms| Op::Advance { ms }),
    ]
}

#[derive(Debug, Default, Clone)]
struct Client {
    member_id: String,
    generation: i32,
    pending: Vec<RequestId>,
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]
    /// Random requests from four clients over two groups (clients 0,1 → "g0", 2,3 → "g1");
    /// after each step, a shard rebuilt by replaying the emitted records equals the live one
    /// on every durable group and on all offsets.
    #[test]
    fn state_rebuilt_from_records_equals_live_state(ops in proptest::collection::vec(op_strategy(), 1..80)) {
        let mut h = Harness::new();
        let mut clients = vec![Client::default(); 4];
        let group_of = |c: usize| format!("g{}", c / 2);
        for op in ops {
            match op {
                Op::Join { client, static_member } => {
                    let instance = static_member.then(|| format!("inst-{client}"));
                    let c = &clients[client];
                    let id = h.send(join(&group_of(client), &c.member_id, instance.as_deref(), &["t", "u"]));
                    clients[client].pending.push(id);
                }
                Op::Sync { client } => {
                    let c = clients[client].clone();
                    let g = group_of(client);
                    let members: Vec<String> = h.shard.groups().get(&g).map(|g| g.members.keys().cloned().collect()).unwrap_or_default();
                    let assignments: Vec<(&str, &'static [u8])> = members.iter().map(|m| (m.as_str(), &b"x"[..])).collect();
                    let id = h.send(sync(&g, &c.member_id, c.generation, &assignments));
                    clients[client].pending.push(id);
                }
                Op::Heartbeat { client } => {
                    let c = &clients[client];
                    h.send(heartbeat(&group_of(client), &c.member_id, c.generation));
                }
                Op::Leave { client } => {
                    let c = &clients[client];
                    h.send_v(3, leave(&group_of(client), &[(&c.member_id, None)]));
                }
                Op::Commit { client, partition, offset } => {
                    let c = &clients[client];
                    h.send(commit(&group_of(client), &c.member_id, c.generation, &[("t", partition, offset, "m")]));
                }
                Op::SimpleCommit { group, partition } => {
                    h.send(commit(&format!("g{group}"), "", -1, &[("u", partition, 9, "")]));
                }
                Op::DeleteOffset { group, partition } => {
                    h.send(offset_delete(&format!("g{group}"), &[("u", partition), ("t", partition)]));
                }
                Op::DeleteGroup { group } => {
                    h.send(GroupRequest::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&format!("g{group}")))])));
                }
                Op::Advance { ms } => h.advance(ms),
            }
            // Clients learn their member ids and generations from the responses.
            for c in clients.iter_mut() {
                let pending = std::mem::take(&mut c.pending);
                for id in pending {
                    match h.responses.remove(&id.0) {
                        Some(GroupResponse::JoinGroup(r)) => {
                            if r.error_code == NONE || r.error_code == MEMBER_ID_REQUIRED {
                                c.member_id = r.member_id.to_string();
                            }
                            if r.error_code == NONE {
                                c.generation = r.generation_id;
                            }
                            if r.error_code == UNKNOWN_MEMBER_ID || r.error_code == FENCED_INSTANCE_ID {
                                c.member_id.clear();
                            }
                        }
                        Some(_) => {}
                        None => c.pending.push(id),
                    }
                }
            }
            h.responses.clear();
            let mut replayed = GroupCoordinatorShard::new(GroupConfig::default(), h.now, 1);
            for (key, value) in &h.log {
                replayed.replay(h.now, key, value.as_deref()).expect("our own records decode");
            }
            let (live, skipped) = durable_view(&h.shard);
            let (mut rebuilt, _) = durable_view(&replayed);
            rebuilt.retain(|id, _| !skipped.contains(id));
            proptest::prop_assert_eq!(&live, &rebuilt);
            proptest::prop_assert_eq!(h.shard.offsets(), replayed.offsets());
        }
    }
}

#[test]
fn stable_consumer_group_expires_only_offsets_of_topics_it_does_not_subscribe_to() {
    let mut h = Harness::new();
    let long_session = |member: &str| {
        let mut r = join("g", member, None, &["t"]);
        if let GroupRequest::JoinGroup(j) = &mut r {
            j.session_timeout_ms = 1_800_000;
        }
        r
    };
    let id = h.send(long_session(""));
    let member = h.join_response(id).member_id.to_string();
    let id = h.send(long_session(&member));
    h.advance(3000);
    assert_eq!(h.join_response(id).error_code, NONE);
    h.send(sync("g", &member, 1, &[]));
    h.send(commit(
        "g",
        &member,
        1,
        &[("t", 0, 1, ""), ("old", 0, 2, "")],
    ));
    for _ in 0..(7 * 24 * 6 + 1) {
        h.advance(600_000);
        let id = h.send(heartbeat("g", &member, 1));
        assert_eq!(h.error_code(id), NONE);
    }
    let left: Vec<String> = fetch(&mut h, "g", None)
        .into_iter()
        .map(|(t, ..)| t)
        .collect();
    assert_eq!(
        left,
        vec!["t".to_owned()],
        "the subscribed topic's offset is kept"
    );
    assert_eq!(h.state("g"), Some(GroupState::Stable));
}

#[test]
fn strings_too_long_for_a_record_are_invalid_requests() {
    let mut h = Harness::new();
    let long = "g".repeat(40_000);
    let id = h.send(join(&long, "", None, &["t"]));
    assert_eq!(h.error_code(id), 42, "INVALID_REQUEST");
    let id = h.send(commit("g", "", -1, &[(long.as_str(), 0, 1, "")]));
    assert_eq!(commit_codes(&mut h, id)[0].2, 42);
    assert!(h.shard.groups().is_empty(), "nothing was created");
}

#[test]
fn loaded_shard_serves_the_stable_group_and_its_offsets() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    h.send(commit("g", &member, 1, &[("t", 0, 11, "x")]));
    let mut loaded = Harness::new();
    loaded.now = h.now;
    for (key, value) in &h.log {
        loaded
            .shard
            .replay(h.now, key, value.as_deref())
            .expect("decodes");
    }
    assert_eq!(loaded.state("g"), Some(GroupState::Stable));
    let id = loaded.send(heartbeat("g", &member, 1));
    assert_eq!(
        loaded.error_code(id),
        NONE,
        "loaded members keep their ids and generation"
    );
    let id = loaded.send(sync("g", &member, 1, &[]));
    assert_eq!(loaded.error_code(id), NONE);
    assert_eq!(
        fetch(&mut loaded, "g", None),
        vec![("t".into(), 0, 11, "x".into())]
    );
    // Loaded members get a fresh session: silent ones expire and the group rebalances.
    loaded.advance(10_001);
    assert_eq!(
        loaded.state("g"),
        Some(GroupState::Empty),
        "Stable → PreparingRebalance → Empty"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]
    /// Arbitrary field values (protocol metadata bytes, generations, ids, timeouts, versions)
    /// are answered with error codes, never a panic, and every request gets one response.
    #[test]
    fn arbitrary_requests_never_panic(
        steps in proptest::collection::vec(
            (0..6u8, 0..3usize, -2..3i32, proptest::collection::vec(proptest::num::u8::ANY, 0..24), 0..12i16, -1..40_000i32),
            1..40,
        )
    ) {
        let mut h = Harness::new();
        let members = ["", "client-x", "inst-1"];
        let mut sent = Vec::new();
        for (kind, m, generation, bytes, version, timeout) in steps {
            let member = members[m];
            let metadata = Bytes::from(bytes);
            let request = match kind {
                0 => GroupRequest::JoinGroup(
                    JoinGroupRequest::default()
                        .with_group_id(GroupId(s("g")))
                        .with_session_timeout_ms(timeout.max(6000))
                        .with_rebalance_timeout_ms(timeout)
                        .with_member_id(s(member))
                        .with_group_instance_id((m == 2).then(|| s("inst")))
                        .with_protocol_type(s("consumer"))
                        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(s("range")).with_metadata(metadata)]),
                ),
                1 => sync("g", member, generation, &[(member, b"z")]),
                2 => heartbeat("g", member, generation),
                3 => leave("g", &[(member, (m == 2).then_some("inst"))]),
                4 => commit("g", member, generation, &[("t", generation, 1, "")]),
                _ => offset_delete("g", &[("t", 0)]),
            };
            sent.push(h.send_v(version, request));
            h.advance(i64::from(timeout.max(0)) / 4);
        }
        h.advance(3_600_000);
        for id in sent {
            proptest::prop_assert!(h.take(id).is_some(), "request {} was never answered", id.0);
        }
    }
}

#[test]
fn static_leader_rejoin_before_v9_gets_no_member_list_and_the_old_leader_id() {
    let mut h = Harness::new();
    let first = h.send(join("g", "", Some("instance-1"), &["t"]));
    h.advance(3000);
    let old_id = h.join_response(first).member_id.to_string();
    h.send(sync("g", &old_id, 1, &[(&old_id, b"A")]));
    let rejoin = h.send_v(8, join("g", "", Some("instance-1"), &["t"]));
    let r = h.join_response(rejoin);
    assert_eq!(
        (r.error_code, r.generation_id, r.skip_assignment),
        (NONE, 1, false)
    );
    assert!(r.members.is_empty());
    assert_eq!(r.leader.as_str(), old_id);
    assert_eq!(
        h.shard.groups()["g"].leader_id.as_deref(),
        Some(r.member_id.as_str())
    );
}

#[test]
fn member_parked_in_sync_outlives_its_session_while_the_leader_assigns() {
    let mut h = Harness::new();
    let (a, member_a) = h.join_new("g", &["t"]);
    let (b, member_b) = h.join_new("g", &["t"]);
    h.advance(6000);
    h.join_response(a);
    h.join_response(b);
    let parked = h.send(sync("g", &member_b, 1, &[]));
    for _ in 0..3 {
        h.advance(5000);
        let id = h.send(heartbeat("g", &member_a, 1));
        assert_eq!(
            h.error_code(id),
            NONE,
            "heartbeats are fine in CompletingRebalance"
        );
    }
    let leader = h.send(sync("g", &member_a, 1, &[(&member_b, b"B")]));
    assert_eq!(h.error_code(leader), NONE);
    assert_eq!(
        h.error_code(parked),
        NONE,
        "b waited 15 s > its 10 s session and was kept"
    );
    assert_eq!(h.state("g"), Some(GroupState::Stable));
}

#[test]
fn new_member_parked_in_a_long_join_phase_is_dropped_after_five_minutes() {
    let mut h = Harness::new();
    let long = |member: &str| {
        let mut r = join("g", member, None, &["t"]);
        if let GroupRequest::JoinGroup(j) = &mut r {
            j.rebalance_timeout_ms = 600_000;
        }
        r
    };
    let id = h.send(long(""));
    let member_a = h.join_response(id).member_id.to_string();
    let id = h.send(long(&member_a));
    h.advance(3000);
    h.join_response(id);
    h.send(sync("g", &member_a, 1, &[]));
    let id = h.send(long(""));
    let member_b = h.join_response(id).member_id.to_string();
    let parked_b = h.send(long(&member_b));
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    for _ in 0..61 {
        h.advance(5000);
        h.send(heartbeat("g", &member_a, 1)); // alive but not rejoining
    }
    let r = h.join_response(parked_b);
    assert_eq!(
        r.error_code, UNKNOWN_MEMBER_ID,
        "new member timed out after 300 s"
    );
    assert!(!h.shard.groups()["g"].members.contains_key(&member_b));
    let rejoin = h.send(long(&member_a));
    assert_eq!(
        h.join_response(rejoin).generation_id,
        2,
        "a alone completes the join at once"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]
    /// Records read from disk may carry any values (timestamps, timeouts, generations):
    /// loading them and running the timers and requests never panics.
    #[test]
    fn loaded_records_with_extreme_values_never_panic(
        commit_ts in proptest::num::i64::ANY,
        expire_ts in proptest::option::of(proptest::num::i64::ANY),
        state_ts in proptest::num::i64::ANY,
        generation in proptest::num::i32::ANY,
        session in proptest::num::i32::ANY,
        rebalance in proptest::num::i32::ANY,
        advance in 0..100_000_000i64,
    ) {
        use krust_broker::group::{GroupMetadataValue, MemberMetadata, OffsetCommitValue};
        let records = [
            CoordinatorRecord::GroupMetadata {
                group: "g".into(),
                value: Some(GroupMetadataValue {
                    protocol_type: "consumer".into(),
                    generation,
                    protocol: Some("range".into()),
                    leader: Some("m".into()),
                    current_state_timestamp_ms: state_ts,
                    members: vec![MemberMetadata {
                        member_id: "m".into(),
                        group_instance_id: Some("i".into()),
                        client_id: "c".into(),
                        client_host: "h".into(),
                        rebalance_timeout_ms: rebalance,
                        session_timeout_ms: session,
                        subscription: Bytes::from_static(&[0xff]),
                        assignment: Bytes::new(),
                    }],
                }),
            },
            CoordinatorRecord::OffsetCommit {
                group: "g".into(),
                topic: "t".into(),
                partition: 0,
                value: Some(OffsetCommitValue {
                    offset: 1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    commit_timestamp_ms: commit_ts,
                    expire_timestamp_ms: expire_ts,
                }),
            },
        ];
        let mut h = Harness::new();
        h.now = 1_000_000;
        for r in &records {
            let (k, v) = r.encode();
            h.shard.replay(h.now, &k, v.as_deref()).expect("decodes");
        }
        h.send(heartbeat("g", "m", generation));
        h.send(join("g", "m", Some("i"), &["t"]));
        h.advance(advance);
        h.send(join("g", "", Some("i"), &["t"]));
        h.advance(advance);
        h.send(offset_delete("g", &[("t", 0)]));
        h.advance(700_000_000);
    }
}

#[test]
fn group_loaded_above_a_reduced_max_size_sheds_members_on_rejoin() {
    use krust_broker::group::{GroupMetadataValue, MemberMetadata};
    let mut h = Harness::with_config(GroupConfig {
        group_max_size: 2,
        ..GroupConfig::default()
    });
    let member = |id: &str| MemberMetadata {
        member_id: id.into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        rebalance_timeout_ms: 30_000,
        session_timeout_ms: 10_000,
        subscription: subscription(&["t"]),
        assignment: Bytes::new(),
    };
    let record = CoordinatorRecord::GroupMetadata {
        group: "g".into(),
        value: Some(GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 0,
            members: vec![member("m1"), member("m2"), member("m3")],
        }),
    };
    let (k, v) = record.encode();
    h.shard.replay(0, &k, v.as_deref()).expect("decodes");
    let a = h.send(join("g", "m1", None, &["t"])); // the leader rejoins → rebalance
    let b = h.send(join("g", "m2", None, &["t"]));
    let c = h.send(join("g", "m3", None, &["t"]));
    assert_eq!(
        h.error_code(c),
        GROUP_MAX_SIZE_REACHED,
        "two already await the join"
    );
    assert!(
        !h.shard.groups()["g"].members.contains_key("m3"),
        "and m3 is removed"
    );
    let (ra, rb) = (h.join_response(a), h.join_response(b));
    assert_eq!(
        (ra.generation_id, rb.generation_id, ra.members.len()),
        (5, 5, 2)
    );
}

// ---- TxnOffsetCommit ----------------------------------------------------------------------

const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_GROUP_ID: i16 = 24;

/// TxnOffsetCommit v3 of producer `pid` (epoch 0) for `group`.
fn txn_commit(
    group: &str,
    pid: i64,
    member: &str,
    generation: i32,
    offsets: &[(&str, i32, i64, &str)],
) -> GroupRequest {
    let topics = offsets
        .iter()
        .map(|(t, p, o, m)| {
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(*p)
                        .with_committed_offset(*o)
                        .with_committed_leader_epoch(2)
                        .with_committed_metadata(Some(s(m))),
                ])
        })
        .collect();
    GroupRequest::TxnOffsetCommit {
        request: TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_group_id(GroupId(s(group)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(0)
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_topics(topics),
        guard: None,
    }
}

fn txn_codes(h: &mut Harness, id: RequestId) -> Vec<i16> {
    match h.take(id).expect("TxnOffsetCommit response") {
        GroupResponse::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v7 with `require_stable` of `t`-0 → (offset, partition error).
fn fetch_stable(h: &mut Harness, group: &str) -> (i64, i16) {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0]),
        ]));
    let id = h.send_v(7, GroupRequest::OffsetFetch(request));
    let Some(GroupResponse::OffsetFetch(r)) = h.take(id) else {
        panic!("fetch")
    };
    let p = &r.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[test]
fn txn_offsets_are_written_as_the_producers_batch_and_visible_only_after_its_commit_marker() {
    let mut h = Harness::new();
    let id = h.send(txn_commit("g", 7, "", -1, &[("t", 0, 5, "m")]));
    assert_eq!(txn_codes(&mut h, id), vec![NONE]);
    assert_eq!(
        h.txn_appends.iter().map(|(_, t)| t).collect::<Vec<_>>(),
        vec![&TxnAppend {
            producer_id: 7,
            producer_epoch: 0,
            guard: None
        }],
        "one transactional append of producer 7"
    );
    assert!(
        matches!(h.records.last(), Some(CoordinatorRecord::OffsetCommit { value: Some(v), .. })
            if v.offset == 5 && v.expire_timestamp_ms.is_none()),
        "the offset record: {:?}",
        h.records.last()
    );
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (-1, UNSTABLE_OFFSET_COMMIT),
        "pending: require_stable sees it unstable"
    );
    assert_eq!(
        fetch(&mut h, "g", Some(&[("t", &[0])]))[0].2,
        -1,
        "and invisible"
    );
    h.shard.handle_txn_marker(h.now, 7, true);
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (5, NONE),
        "committed by the marker"
    );

    let id = h.send(txn_commit("g", 7, "", -1, &[("t", 0, 9, "")]));
    assert_eq!(txn_codes(&mut h, id), vec![NONE]);
    h.shard.handle_txn_marker(h.now, 7, false);
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (5, NONE),
        "an aborted offset is dropped"
    );
    assert!(h.shard.pending_txn_offsets().is_empty());
}

#[test]
fn a_txn_offset_commit_the_partition_refuses_is_answered_with_its_error_and_undone() {
    let mut h = Harness::new();
    let id = h.send(txn_commit("g", 7, "", -1, &[("t", 0, 5, "")]));
    assert_eq!(txn_codes(&mut h, id), vec![NONE]);
    h.hold_appends = true;
    let refused = h.send(txn_commit("g", 7, "", -1, &[("t", 0, 9, "")]));
    // A TxnOffsetCommit refused by the shard itself, answered after the refused append: it
    // keeps its own error.
    let invalid = h.send(txn_commit("g", 7, "nobody", 1, &[("t", 0, 4, "")]));
    // A plain commit of another group after it: its append follows the refused one.
    let plain = h.send(commit("other", "", -1, &[("t", 0, 3, "")]));
    assert!(
        h.take(refused).is_none(),
        "held until the append is decided"
    );
    let (txn_append, _) = *h.txn_appends.last().expect("a txn append");
    assert_eq!(h.held.first(), Some(&txn_append));
    h.shard
        .handle_append_rejected(txn_append, GroupError::AppendFailed(INVALID_PRODUCER_EPOCH));
    h.held.remove(0);
    h.hold_appends = false;
    for id in std::mem::take(&mut h.held) {
        h.shard.handle_append_committed(id);
    }
    h.drain();
    assert_eq!(txn_codes(&mut h, refused), vec![INVALID_PRODUCER_EPOCH]);
    assert_eq!(txn_codes(&mut h, invalid), vec![UNKNOWN_MEMBER_ID]);
    assert_eq!(commit_codes(&mut h, plain), vec![("t".into(), 0, NONE)]);
    let pending = &h.shard.pending_txn_offsets()[&7]["g"];
    assert_eq!(
        pending[&("t".to_string(), 0)].offset,
        5,
        "the refused offset is taken back, the earlier one stays pending"
    );
    h.shard.handle_txn_marker(h.now, 7, true);
    assert_eq!(fetch_stable(&mut h, "g"), (5, NONE));
}

#[test]
fn txn_offset_commits_are_validated_like_kafkas_transactional_commits() {
    let mut h = Harness::new();
    let member = h.stable_single("g", &["t"]);
    let codes = |h: &mut Harness, member: &str, generation: i32| {
        let id = h.send(txn_commit("g", 7, member, generation, &[("t", 0, 5, "")]));
        txn_codes(h, id)
    };
    assert_eq!(codes(&mut h, "nobody", 1), vec![UNKNOWN_MEMBER_ID]);
    assert_eq!(codes(&mut h, &member, 2), vec![ILLEGAL_GENERATION]);
    assert_eq!(codes(&mut h, &member, 1), vec![NONE]);
    // Unlike OffsetCommit, a transactional commit without member and generation is taken by
    // a non-empty group (older producers send neither).
    assert_eq!(codes(&mut h, "", -1), vec![NONE]);
    let big = "x".repeat(5000);
    let id = h.send(txn_commit("g", 7, "", -1, &[("t", 0, 5, &big)]));
    assert_eq!(txn_codes(&mut h, id), vec![OFFSET_METADATA_TOO_LARGE]);
    let id = h.send(txn_commit("", 7, "", -1, &[("t", 0, 5, "")]));
    assert_eq!(txn_codes(&mut h, id), vec![INVALID_GROUP_ID]);
    // A group the coordinator has never seen is created (Empty) by the commit.
    let id = h.send(txn_commit("fresh", 8, "", -1, &[("t", 0, 1, "")]));
    assert_eq!(txn_codes(&mut h, id), vec![NONE]);
    assert_eq!(h.state("fresh"), Some(GroupState::Empty));
}
