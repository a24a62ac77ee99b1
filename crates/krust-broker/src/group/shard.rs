//! [`GroupCoordinatorShard`]: the classic group coordinator of one `__consumer_offsets`
//! partition, sans-IO (Kafka 3.9 `GroupMetadataManager` classic parts +
//! `OffsetMetadataManager`).
//!
//! Driving it:
//! 1. `handle_request(now, id, ctx, request)` for every group request routed to this
//!    partition; `handle_timeout(now)` when [`GroupCoordinatorShard::poll_timeout`] is due.
//! 2. Drain [`GroupCoordinatorShard::poll_action`]: an [`Action::Append`] must be appended to
//!    the partition, and `handle_append_committed(id)` called once it is committed (appends
//!    commit in the order they were emitted). An [`Action::Respond`] is sent as is.
//! 3. Every response is held until all appends emitted before it are committed, so no client
//!    sees state that could still be lost.
//! 4. A failed append (`handle_append_failed`) means the partition moved: the in-memory state
//!    is ahead of the log, so the shard answers NOT_COORDINATOR from then on and the driver
//!    must drop it; the new leader rebuilds the state with [`GroupCoordinatorShard::replay`].

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    delete_groups_response::DeletableGroupResult,
    describe_groups_response::{DescribedGroup, DescribedGroupMember},
    join_group_response::JoinGroupResponseMember,
    leave_group_response::MemberResponse,
    list_groups_response::ListedGroup,
    offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic},
    offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic},
    offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
        OffsetFetchResponseTopic, OffsetFetchResponseTopics,
    },
    txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic},
};
use kafka_protocol::protocol::StrBytes;

use super::classic::{ClassicGroup, ClassicMember, GroupState};
use super::config::GroupConfig;
use super::error::GroupError;
use super::records::{CoordinatorRecord, OffsetCommitValue, RecordDecodeError};
use crate::partition::VerificationGuard;

/// Identifies a request; chosen by the driver, echoed in [`Action::Respond`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies an [`Action::Append`]; ids increase in emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppendId(pub u64);

/// What the request header says about the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestContext {
    /// API version of the request (decides KIP-394, batched LeaveGroup/OffsetFetch, …).
    pub api_version: i16,
    /// Header client id.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
}

/// A group request routed to this shard.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupRequest {
    /// JoinGroup.
    JoinGroup(JoinGroupRequest),
    /// SyncGroup.
    SyncGroup(SyncGroupRequest),
    /// Heartbeat.
    Heartbeat(HeartbeatRequest),
    /// LeaveGroup.
    LeaveGroup(LeaveGroupRequest),
    /// OffsetCommit.
    OffsetCommit(OffsetCommitRequest),
    /// OffsetFetch.
    OffsetFetch(OffsetFetchRequest),
    /// OffsetDelete.
    OffsetDelete(OffsetDeleteRequest),
    /// ListGroups (this shard's groups; the broker merges shards).
    ListGroups(ListGroupsRequest),
    /// DescribeGroups.
    DescribeGroups(DescribeGroupsRequest),
    /// DeleteGroups.
    DeleteGroups(DeleteGroupsRequest),
    /// TxnOffsetCommit whose `__consumer_offsets` partition passed KIP-890 verification:
    /// `guard` is the partition's verification guard for the producer (`None`: the producer
    /// already has a transaction open on the partition, or verification is off).
    TxnOffsetCommit {
        /// The request (unknown topics already answered by the broker).
        request: TxnOffsetCommitRequest,
        /// The partition's verification guard.
        guard: Option<VerificationGuard>,
    },
}

/// The producer of a transactional append (a TxnOffsetCommit's offsets): the batch carries
/// its id and epoch, is transactional, and goes to the partition alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnAppend {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// The partition's KIP-890 verification guard to present with the append.
    pub guard: Option<VerificationGuard>,
}

/// The answer to a [`GroupRequest`].
#[derive(Debug, Clone, PartialEq)]
pub enum GroupResponse {
    /// JoinGroup.
    JoinGroup(JoinGroupResponse),
    /// SyncGroup.
    SyncGroup(SyncGroupResponse),
    /// Heartbeat.
    Heartbeat(HeartbeatResponse),
    /// LeaveGroup.
    LeaveGroup(LeaveGroupResponse),
    /// OffsetCommit.
    OffsetCommit(OffsetCommitResponse),
    /// OffsetFetch.
    OffsetFetch(OffsetFetchResponse),
    /// OffsetDelete.
    OffsetDelete(OffsetDeleteResponse),
    /// ListGroups.
    ListGroups(ListGroupsResponse),
    /// DescribeGroups.
    DescribeGroups(DescribeGroupsResponse),
    /// DeleteGroups.
    DeleteGroups(DeleteGroupsResponse),
    /// TxnOffsetCommit.
    TxnOffsetCommit(TxnOffsetCommitResponse),
}

/// Output of the shard, in order.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Action {
    /// Append `records` to the partition; report with `handle_append_committed(append_id)`.
    Append {
        /// Id to report back.
        append_id: AppendId,
        /// Records, in order.
        records: Vec<CoordinatorRecord>,
        /// `Some`: a transactional batch of this producer, appended alone; if the partition
        /// refuses it for the producer's sake (nothing written), report
        /// `handle_append_rejected(append_id, error)`.
        txn: Option<TxnAppend>,
    },
    /// Send `response` for `request_id`.
    Respond {
        /// The request.
        request_id: RequestId,
        /// Its response.
        response: GroupResponse,
    },
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Offset.
    pub offset: i64,
    /// Leader epoch (-1 unknown).
    pub leader_epoch: i32,
    /// Metadata.
    pub metadata: String,
    /// Commit time.
    pub commit_timestamp_ms: i64,
    /// Explicit expiry.
    pub expire_timestamp_ms: Option<i64>,
}

impl From<OffsetCommitValue> for CommittedOffset {
    fn from(v: OffsetCommitValue) -> Self {
        CommittedOffset {
            offset: v.offset,
            leader_epoch: v.leader_epoch,
            metadata: v.metadata,
            commit_timestamp_ms: v.commit_timestamp_ms,
            expire_timestamp_ms: v.expire_timestamp_ms,
        }
    }
}

/// Offsets of one group: (topic, partition) → offset.
pub type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

/// The classic group coordinator of one `__consumer_offsets` partition.
#[derive(Debug)]
pub struct GroupCoordinatorShard {
    config: GroupConfig,
    groups: BTreeMap<String, ClassicGroup>,
    offsets: BTreeMap<String, GroupOffsets>,
    rng_state: u64,
    join_seq: u64,
    next_append_id: u64,
    /// Last emitted append not yet committed.
    last_uncommitted: Option<AppendId>,
    /// Responses waiting for appends up to the id to commit.
    held: VecDeque<(AppendId, RequestId, GroupResponse)>,
    actions: VecDeque<Action>,
    next_retention_check_ms: i64,
    failed: bool,
    /// Offsets written by a transactional producer whose COMMIT/ABORT marker has not reached
    /// this partition yet: producer id → group → offsets. Invisible to OffsetFetch (Kafka's
    /// `pendingTransactionalOffsetCommits`).
    pending_txn_offsets: BTreeMap<i64, BTreeMap<String, GroupOffsets>>,
    /// Transactional appends not yet committed: what each put into `pending_txn_offsets`
    /// (producer, group, and each partition's previous pending offset), to undo it if the
    /// partition refuses the batch.
    txn_appends: BTreeMap<AppendId, PendingTxnAppend>,
}

/// What a transactional append changed in `pending_txn_offsets`.
#[derive(Debug)]
struct PendingTxnAppend {
    /// The TxnOffsetCommit the append answers.
    request_id: RequestId,
    producer_id: i64,
    group: String,
    previous: Vec<((String, i32), Option<CommittedOffset>)>,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl GroupCoordinatorShard {
    /// An empty shard. `seed` makes generated member ids reproducible.
    #[must_use]
    pub fn new(config: GroupConfig, now_ms: i64, seed: u64) -> Self {
        let next_retention_check_ms = now_ms + config.offsets_retention_check_interval_ms;
        GroupCoordinatorShard {
            config,
            groups: BTreeMap::new(),
            offsets: BTreeMap::new(),
            rng_state: seed,
            join_seq: 0,
            next_append_id: 0,
            last_uncommitted: None,
            held: VecDeque::new(),
            actions: VecDeque::new(),
            next_retention_check_ms,
            failed: false,
            pending_txn_offsets: BTreeMap::new(),
            txn_appends: BTreeMap::new(),
        }
    }

    fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.pending_txn_offsets.values().any(|groups| {
            groups
                .get(group)
                .is_some_and(|o| o.contains_key(&(topic.to_owned(), partition)))
        })
    }

    /// Offsets waiting for their transaction's marker, by producer id and group.
    #[must_use]
    pub fn pending_txn_offsets(&self) -> &BTreeMap<i64, BTreeMap<String, GroupOffsets>> {
        &self.pending_txn_offsets
    }

    /// Replays one record of a transactional batch of `producer_id` (loading): an offset
    /// commit is held as pending until the producer's marker is replayed; other records apply
    /// at once, as Kafka's `GroupMetadataManager.doLoadGroupsAndOffsets` does.
    ///
    /// # Errors
    /// A record that does not decode; the caller decides whether to skip it.
    pub fn replay_transactional(
        &mut self,
        now_ms: i64,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), RecordDecodeError> {
        match CoordinatorRecord::decode(key, value)? {
            CoordinatorRecord::OffsetCommit {
                group,
                topic,
                partition,
                value: Some(v),
            } => {
                self.pending_txn_offsets
                    .entry(producer_id)
                    .or_default()
                    .entry(group)
                    .or_default()
                    .insert((topic, partition), CommittedOffset::from(v));
            }
            other => self.replay_record(now_ms, other),
        }
        Ok(())
    }

    /// A COMMIT (`commit`) or ABORT marker of `producer_id` reached this partition (replayed
    /// while loading, or written by this broker as partition leader): its pending offsets
    /// become committed offsets, or are dropped (Kafka's `handleTxnCompletion`). Idempotent: a
    /// second marker finds nothing pending. Offsets committed outside the transaction after
    /// it are overwritten by the transaction's (Kafka keeps the later by log position).
    pub fn handle_txn_marker(&mut self, now_ms: i64, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending_txn_offsets.remove(&producer_id) else {
            return;
        };
        if !commit {
            return;
        }
        for (group, offsets) in pending {
            self.groups
                .entry(group.clone())
                .or_insert_with(|| ClassicGroup::new(group.clone(), now_ms));
            self.offsets.entry(group).or_default().extend(offsets);
        }
    }

    /// Groups by id.
    #[must_use]
    pub fn groups(&self) -> &BTreeMap<String, ClassicGroup> {
        &self.groups
    }

    /// Committed offsets by group.
    #[must_use]
    pub fn offsets(&self) -> &BTreeMap<String, GroupOffsets> {
        &self.offsets
    }

    /// Replays one record of the partition (loading when this broker becomes its leader).
    ///
    /// # Errors
    /// A record that does not decode; the caller decides whether to skip it.
    pub fn replay(
        &mut self,
        now_ms: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), RecordDecodeError> {
        self.replay_record(now_ms, CoordinatorRecord::decode(key, value)?);
        Ok(())
    }

    fn replay_record(&mut self, now_ms: i64, record: CoordinatorRecord) {
        match record {
            CoordinatorRecord::OffsetCommit {
                group,
                topic,
                partition,
                value,
            } => match value {
                Some(v) => {
                    self.groups
                        .entry(group.clone())
                        .or_insert_with(|| ClassicGroup::new(group.clone(), now_ms));
                    self.offsets
                        .entry(group)
                        .or_default()
                        .insert((topic, partition), CommittedOffset::from(v));
                }
                None => {
                    if let Some(o) = self.offsets.get_mut(&group) {
                        o.remove(&(topic, partition));
                        if o.is_empty() {
                            self.offsets.remove(&group);
                        }
                    }
                }
            },
            CoordinatorRecord::GroupMetadata { group, value } => match value {
                Some(v) => {
                    let g = ClassicGroup::from_record(group.clone(), &v, now_ms);
                    self.join_seq = self.join_seq.max(g.members.len() as u64);
                    self.groups.insert(group, g);
                }
                None => {
                    self.groups.remove(&group);
                }
            },
        }
    }

    /// When `handle_timeout` is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<i64> {
        let mut next = Some(self.next_retention_check_ms);
        let mut consider = |t: Option<i64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: i64| n.min(t)));
            }
        };
        for g in self.groups.values() {
            consider(g.join_deadline_ms);
            consider(g.sync_deadline_ms);
            for d in g.pending_members.values() {
                consider(Some(*d));
            }
            for m in g.members.values() {
                if m.session_can_expire() {
                    consider(Some(m.session_deadline_ms));
                }
            }
        }
        next
    }

    /// Next action, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The append `append_id` (and every earlier one) is committed: releases the responses
    /// that waited for it.
    pub fn handle_append_committed(&mut self, append_id: AppendId) {
        self.txn_appends = self.txn_appends.split_off(&AppendId(append_id.0 + 1));
        if self.last_uncommitted.is_some_and(|last| last <= append_id) {
            self.last_uncommitted = None;
        }
        while let Some((wait, _, _)) = self.held.front() {
            if *wait > append_id {
                break;
            }
            let (_, request_id, response) = self.held.pop_front().expect("front exists");
            self.actions.push_back(Action::Respond {
                request_id,
                response,
            });
        }
    }

    /// The append failed (the partition's leadership moved): every held response is answered
    /// NOT_COORDINATOR and so is every later request. Drop the shard and reload.
    pub fn handle_append_failed(&mut self, append_id: AppendId) {
        self.handle_append_failed_with(append_id, GroupError::NotCoordinator);
    }

    /// [`GroupCoordinatorShard::handle_append_failed`], answering the held responses with
    /// `error` (the driver maps the partition's error as Kafka's
    /// `GroupCoordinatorService.handleOperationException` does); later requests still get
    /// NOT_COORDINATOR until the shard is dropped.
    pub fn handle_append_failed_with(&mut self, _append_id: AppendId, error: GroupError) {
        self.failed = true;
        let held: Vec<_> = self.held.drain(..).collect();
        for (_, request_id, response) in held {
            let response = error_like(&response, error.clone());
            self.actions.push_back(Action::Respond {
                request_id,
                response,
            });
        }
    }

    /// The partition refused the transactional append `append_id` for its producer's sake
    /// (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, …: nothing was written): the offsets it
    /// made pending are taken back, the TxnOffsetCommit waiting for it is answered with
    /// `error`, and the shard goes on (appends emitted before it are committed: appends
    /// commit in order).
    pub fn handle_append_rejected(&mut self, append_id: AppendId, error: GroupError) {
        let mut rejected = None;
        if let Some(undo) = self.txn_appends.remove(&append_id) {
            rejected = Some(undo.request_id);
            let pending = self
                .pending_txn_offsets
                .entry(undo.producer_id)
                .or_default();
            let offsets = pending.entry(undo.group.clone()).or_default();
            for (tp, previous) in undo.previous {
                match previous {
                    Some(p) => {
                        offsets.insert(tp, p);
                    }
                    None => {
                        offsets.remove(&tp);
                    }
                }
            }
            if offsets.is_empty() {
                pending.remove(&undo.group);
            }
            if pending.is_empty() {
                self.pending_txn_offsets.remove(&undo.producer_id);
            }
        }
        for (_, request_id, response) in &mut self.held {
            if Some(*request_id) == rejected {
                *response = error_like(response, error.clone());
            }
        }
        self.handle_append_committed(append_id);
    }

    fn random_uuid(&mut self) -> uuid::Uuid {
        let mut next = || {
            // splitmix64: reproducible from the seed.
            self.rng_state = self.rng_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.rng_state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&next().to_be_bytes());
        bytes[8..].copy_from_slice(&next().to_be_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    fn append(&mut self, records: Vec<CoordinatorRecord>) {
        self.emit_append(records, None);
    }

    /// Emits an append (none for no records); its id.
    fn emit_append(
        &mut self,
        records: Vec<CoordinatorRecord>,
        txn: Option<TxnAppend>,
    ) -> Option<AppendId> {
        if records.is_empty() {
            return None;
        }
        let append_id = AppendId(self.next_append_id);
        self.next_append_id += 1;
        self.last_uncommitted = Some(append_id);
        self.actions.push_back(Action::Append {
            append_id,
            records,
            txn,
        });
        Some(append_id)
    }

    /// The value to store for a committed offset, or OFFSET_METADATA_TOO_LARGE (Kafka's
    /// `validateOffsetMetadataLength`; a record string cannot exceed an int16 length either).
    fn offset_value(
        &self,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<&str>,
        now_ms: i64,
        expire_timestamp_ms: Option<i64>,
    ) -> Result<OffsetCommitValue, GroupError> {
        let metadata = metadata.unwrap_or("").to_owned();
        if metadata.len() > self.config.offset_metadata_max_bytes
            || metadata.len() > MAX_RECORD_STRING_BYTES
        {
            return Err(GroupError::OffsetMetadataTooLarge);
        }
        Ok(OffsetCommitValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms: now_ms,
            expire_timestamp_ms,
        })
    }

    fn respond(&mut self, request_id: RequestId, response: GroupResponse) {
        match self.last_uncommitted {
            Some(wait) => self.held.push_back((wait, request_id, response)),
            None => self.actions.push_back(Action::Respond {
                request_id,
                response,
            }),
        }
    }

    fn store_group(&mut self, group_id: &str) {
        if let Some(g) = self.groups.get(group_id) {
            let value = g.to_record_value();
            self.append(vec![CoordinatorRecord::GroupMetadata {
                group: group_id.to_owned(),
                value: Some(value),
            }]);
        }
    }

    /// Handles one request. Its response comes out of `poll_action`, possibly later (a
    /// JoinGroup waits for the join phase, a SyncGroup for the leader).
    pub fn handle_request(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        request: GroupRequest,
    ) {
        if self.failed {
            let response = error_response(&request, ctx, GroupError::NotCoordinator);
            self.actions.push_back(Action::Respond {
                request_id,
                response,
            });
            return;
        }
        if let Err(e) = check_record_strings(ctx, &request) {
            let response = error_response(&request, ctx, e);
            self.respond(request_id, response);
            return;
        }
        match request {
            GroupRequest::JoinGroup(r) => self.join_group(now_ms, request_id, ctx, r),
            GroupRequest::SyncGroup(r) => self.sync_group(now_ms, request_id, r),
            GroupRequest::Heartbeat(r) => {
                let error_code = match self.heartbeat(now_ms, &r) {
                    Ok(()) => 0,
                    Err(e) => e.code(),
                };
                let response = HeartbeatResponse::default().with_error_code(error_code);
                self.respond(request_id, GroupResponse::Heartbeat(response));
            }
            GroupRequest::LeaveGroup(r) => self.leave_group(now_ms, request_id, ctx, r),
            GroupRequest::OffsetCommit(r) => self.offset_commit(now_ms, request_id, ctx, r),
            GroupRequest::OffsetFetch(r) => {
                let response = self.offset_fetch(ctx, &r);
                self.respond(request_id, GroupResponse::OffsetFetch(response));
            }
            GroupRequest::OffsetDelete(r) => self.offset_delete(request_id, r),
            GroupRequest::ListGroups(r) => {
                let response = self.list_groups(&r);
                self.respond(request_id, GroupResponse::ListGroups(response));
            }
            GroupRequest::DescribeGroups(r) => {
                let response = self.describe_groups(&r);
                self.respond(request_id, GroupResponse::DescribeGroups(response));
            }
            GroupRequest::DeleteGroups(r) => self.delete_groups(now_ms, request_id, r),
            GroupRequest::TxnOffsetCommit { request, guard } => {
                self.txn_offset_commit(now_ms, request_id, &request, guard);
            }
        }
        self.check_invariants();
    }

    fn check_invariants(&self) {
        for g in self.groups.values() {
            if let Some(leader) = &g.leader_id {
                assert!(
                    g.members.contains_key(leader) || g.state == GroupState::Empty,
                    "group {}: leader {leader} is not a member",
                    g.group_id
                );
            }
            assert!(
                g.state != GroupState::Empty || g.members.is_empty(),
                "group {}: Empty with members",
                g.group_id
            );
        }
    }

    // ---- JoinGroup ------------------------------------------------------------------------

    fn join_error(&mut self, request_id: RequestId, member_id: &str, error: GroupError) {
        let response = JoinGroupResponse::default()
            .with_error_code(error.code())
            .with_generation_id(-1)
            .with_member_id(sb(member_id));
        self.respond(request_id, GroupResponse::JoinGroup(response));
    }

    fn join_group(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        r: JoinGroupRequest,
    ) {
        let group_id = r.group_id.0.to_string();
        let member_id = r.member_id.to_string();
        if group_id.is_empty() {
            return self.join_error(request_id, &member_id, GroupError::InvalidGroupId);
        }
        if r.session_timeout_ms < self.config.group_min_session_timeout_ms
            || r.session_timeout_ms > self.config.group_max_session_timeout_ms
        {
            let e = GroupError::InvalidSessionTimeout(r.session_timeout_ms);
            return self.join_error(request_id, &member_id, e);
        }
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        let rebalance_timeout_ms = if r.rebalance_timeout_ms <= 0 {
            r.session_timeout_ms
        } else {
            r.rebalance_timeout_ms
        };
        let protocols: Vec<(String, Bytes)> = r
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        let protocol_type = r.protocol_type.to_string();
        let instance_id = r.group_instance_id.as_ref().map(|s| s.to_string());

        if !self.groups.contains_key(&group_id) {
            if !member_id.is_empty() {
                return self.join_error(request_id, &member_id, GroupError::UnknownMemberId);
            }
            self.groups.insert(
                group_id.clone(),
                ClassicGroup::new(group_id.clone(), now_ms),
            );
        }
        let max_size = self.config.group_max_size;
        let g = self.groups.get(&group_id).expect("inserted above");
        if g.state == GroupState::Dead {
            return self.join_error(request_id, &member_id, GroupError::CoordinatorNotAvailable);
        }
        if !g.supports_protocols(&protocol_type, &protocols) {
            return self.join_error(
                request_id,
                &member_id,
                GroupError::InconsistentGroupProtocol,
            );
        }
        let known = g.members.contains_key(&member_id);
        let awaiting = g
            .members
            .get(&member_id)
            .is_some_and(ClassicMember::is_awaiting_join);
        // Kafka's `acceptJoiningMember`. krust also never lets a new member take the group
        // above `group.max.size` (Kafka may briefly, during a rebalance).
        let accept = match g.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                awaiting || g.members.values().filter(|m| m.is_awaiting_join()).count() < max_size
            }
            _ => known || g.size() < max_size,
        };
        if !accept || (!known && g.size() >= max_size) {
            if known {
                // Kafka removes a known member it cannot take back.
                self.remove_member_and_update(
                    now_ms,
                    &group_id,
                    &member_id,
                    GroupError::GroupMaxSizeReached,
                );
            }
            return self.join_error(request_id, "", GroupError::GroupMaxSizeReached);
        }
        let join = Join {
            request_id,
            client_id: ctx.client_id.clone(),
            client_host: ctx.client_host.clone(),
            session_timeout_ms: r.session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            instance_id,
            api_version: ctx.api_version,
        };
        if member_id.is_empty() {
            self.join_new_member(now_ms, &group_id, ctx.api_version, join);
        } else {
            self.join_existing_member(now_ms, &group_id, member_id, join);
        }
    }

    fn join_new_member(&mut self, now_ms: i64, group_id: &str, api_version: i16, join: Join) {
        let uuid = self.random_uuid();
        if let Some(instance) = join.instance_id.clone() {
            let new_id = format!("{instance}-{uuid}");
            let g = self.groups.get(group_id).expect("caller checked");
            if let Some(old_id) = g.static_member_id(&instance).map(str::to_owned) {
                return self.replace_static_member(now_ms, group_id, old_id, new_id, join);
            }
            return self.add_member_and_rebalance(now_ms, group_id, new_id, join);
        }
        let new_id = format!("{}-{uuid}", join.client_id);
        if api_version >= 4 {
            // KIP-394: hand out the id; the member joins again with it.
            let max = self.config.group_max_size;
            let g = self.groups.get_mut(group_id).expect("caller checked");
            if g.pending_members.len() >= max {
                return self.join_error(join.request_id, "", GroupError::GroupMaxSizeReached);
            }
            g.pending_members
                .insert(new_id.clone(), now_ms + i64::from(join.session_timeout_ms));
            return self.join_error(join.request_id, &new_id, GroupError::MemberIdRequired);
        }
        self.add_member_and_rebalance(now_ms, group_id, new_id, join);
    }

    fn join_existing_member(&mut self, now_ms: i64, group_id: &str, member_id: String, join: Join) {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        if g.pending_members.remove(&member_id).is_some() {
            return self.add_member_and_rebalance(now_ms, group_id, member_id, join);
        }
        if let Err(e) = g.validate_member(&member_id, join.instance_id.as_deref()) {
            return self.join_error(join.request_id, &member_id, e);
        }
        let m = g.members.get(&member_id).expect("validated");
        let same_protocols = m.protocols == join.protocols;
        let is_leader = g.leader_id.as_deref() == Some(member_id.as_str());
        match g.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(now_ms, group_id, &member_id, join);
            }
            GroupState::CompletingRebalance if same_protocols => {
                // Lost join response: answer with the current generation.
                let response = self.join_response(group_id, &member_id, false);
                self.respond(join.request_id, GroupResponse::JoinGroup(response));
            }
            GroupState::Stable if same_protocols && !is_leader => {
                let response = self.join_response(group_id, &member_id, false);
                self.respond(join.request_id, GroupResponse::JoinGroup(response));
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(now_ms, group_id, &member_id, join);
            }
            GroupState::Empty | GroupState::Dead => {
                self.join_error(join.request_id, &member_id, GroupError::UnknownMemberId);
            }
        }
    }

    fn replace_static_member(
        &mut self,
        now_ms: i64,
        group_id: &str,
        old_id: String,
        new_id: String,
        join: Join,
    ) {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        let mut member = g.members.remove(&old_id).expect("static member exists");
        let fenced_join = member.awaiting_join.take();
        let fenced_sync = member.awaiting_sync.take();
        let old_protocols = std::mem::replace(&mut member.protocols, join.protocols.clone());
        member.member_id = new_id.clone();
        member.session_timeout_ms = join.session_timeout_ms;
        member.rebalance_timeout_ms = join.rebalance_timeout_ms;
        member.session_deadline_ms = now_ms + i64::from(join.session_timeout_ms);
        g.members.insert(new_id.clone(), member);
        if g.leader_id.as_deref() == Some(old_id.as_str()) {
            g.leader_id = Some(new_id.clone());
        }
        if g.pending_sync.remove(&old_id) {
            g.pending_sync.insert(new_id.clone());
        }
        let state = g.state;
        let selected_unchanged = g.select_protocol() == g.protocol_name;
        if let Some(id) = fenced_join {
            self.join_error(id, &old_id, GroupError::FencedInstanceId);
        }
        if let Some(id) = fenced_sync {
            let response =
                SyncGroupResponse::default().with_error_code(GroupError::FencedInstanceId.code());
            self.respond(id, GroupResponse::SyncGroup(response));
        }
        match state {
            GroupState::Stable if selected_unchanged => {
                // KIP-345: no rebalance; persist the new member id, then answer. A static
                // leader gets the members with skip_assignment (KIP-814).
                self.store_group(group_id);
                let g = &self.groups[group_id];
                let is_leader = g.leader_id.as_deref() == Some(new_id.as_str());
                let response = if join.api_version >= 9 {
                    self.join_response(group_id, &new_id, is_leader)
                } else {
                    // Before KIP-814 the rejoined static member gets no member list, and
                    // Kafka names the leader as it was before the replacement.
                    let previous_leader = if is_leader {
                        old_id.as_str()
                    } else {
                        g.leader_id.as_deref().unwrap_or("")
                    };
                    self.join_response(group_id, &new_id, false)
                        .with_members(Vec::new())
                        .with_leader(sb(previous_leader))
                };
                self.respond(join.request_id, GroupResponse::JoinGroup(response));
            }
            _ => {
                let g = self.groups.get_mut(group_id).expect("exists");
                if let Some(m) = g.members.get_mut(&new_id) {
                    m.protocols = old_protocols;
                }
                self.update_member_and_rebalance(now_ms, group_id, &new_id, join);
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: String,
        join: Join,
    ) {
        self.join_seq += 1;
        let seq = self.join_seq;
        let new_member_timeout = i64::from(self.config.new_member_join_timeout_ms);
        let g = self.groups.get_mut(group_id).expect("caller checked");
        if g.members.is_empty() {
            g.protocol_type = Some(join.protocol_type.clone());
        }
        g.members.insert(
            member_id.clone(),
            ClassicMember {
                member_id: member_id.clone(),
                group_instance_id: join.instance_id,
                client_id: join.client_id,
                client_host: join.client_host,
                rebalance_timeout_ms: join.rebalance_timeout_ms,
                session_timeout_ms: join.session_timeout_ms,
                protocols: join.protocols,
                assignment: Bytes::new(),
                awaiting_join: Some(join.request_id),
                awaiting_sync: None,
                session_deadline_ms: now_ms + new_member_timeout,
                join_seq: seq,
                is_new: true,
            },
        );
        if g.leader_id.is_none() {
            g.leader_id = Some(member_id);
        }
        if g.state == GroupState::PreparingRebalance && g.initial_delay_remaining_ms.is_some() {
            g.new_member_added = true;
        }
        self.prepare_rebalance_or_complete_join(now_ms, group_id);
    }

    fn update_member_and_rebalance(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        join: Join,
    ) {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        let m = g.members.get_mut(member_id).expect("caller checked");
        let replaced = m.awaiting_join.replace(join.request_id);
        m.protocols = join.protocols;
        m.session_timeout_ms = join.session_timeout_ms;
        m.rebalance_timeout_ms = join.rebalance_timeout_ms;
        m.session_deadline_ms = now_ms + i64::from(join.session_timeout_ms);
        if let Some(old) = replaced {
            self.join_error(old, member_id, GroupError::RebalanceInProgress);
        }
        self.prepare_rebalance_or_complete_join(now_ms, group_id);
    }

    fn prepare_rebalance_or_complete_join(&mut self, now_ms: i64, group_id: &str) {
        let state = self.groups[group_id].state;
        match state {
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms, group_id),
            _ => self.prepare_rebalance(now_ms, group_id),
        }
    }

    fn prepare_rebalance(&mut self, now_ms: i64, group_id: &str) {
        let initial_delay = i64::from(self.config.group_initial_rebalance_delay_ms);
        let g = self.groups.get_mut(group_id).expect("caller checked");
        if g.state == GroupState::PreparingRebalance {
            return;
        }
        let mut syncs = Vec::new();
        if g.state == GroupState::CompletingRebalance {
            for m in g.members.values_mut() {
                m.assignment = Bytes::new();
                syncs.extend(m.awaiting_sync.take());
            }
        }
        g.pending_sync.clear();
        g.sync_deadline_ms = None;
        let was_empty = g.state == GroupState::Empty;
        g.transition(GroupState::PreparingRebalance, now_ms);
        if was_empty {
            let rebalance = i64::from(g.rebalance_timeout_ms());
            let delay = initial_delay;
            g.join_deadline_ms = Some(now_ms + delay);
            g.initial_delay_remaining_ms = Some((rebalance - delay).max(0));
            g.new_member_added = false;
        } else {
            g.join_deadline_ms = Some(now_ms + i64::from(g.rebalance_timeout_ms()));
            g.initial_delay_remaining_ms = None;
        }
        for id in syncs {
            let response = SyncGroupResponse::default()
                .with_error_code(GroupError::RebalanceInProgress.code());
            self.respond(id, GroupResponse::SyncGroup(response));
        }
        self.maybe_complete_join(now_ms, group_id);
    }

    /// Completes the join phase early once everyone rejoined (not during the initial delay).
    fn maybe_complete_join(&mut self, now_ms: i64, group_id: &str) {
        let g = &self.groups[group_id];
        if g.state == GroupState::PreparingRebalance
            && g.initial_delay_remaining_ms.is_none()
            && g.has_all_members_joined()
        {
            self.complete_join(now_ms, group_id);
        }
    }

    fn complete_join(&mut self, now_ms: i64, group_id: &str) {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        g.join_deadline_ms = None;
        g.initial_delay_remaining_ms = None;
        g.new_member_added = false;
        // Members that did not rejoin in time are removed (Kafka: notYetRejoinedMembers).
        let gone: Vec<String> = g
            .members
            .values()
            .filter(|m| !m.is_awaiting_join())
            .map(|m| m.member_id.clone())
            .collect();
        let mut orphaned_syncs = Vec::new();
        for id in &gone {
            if let Some(m) = g.members.remove(id) {
                orphaned_syncs.extend(m.awaiting_sync);
            }
        }
        g.pending_members.clear();
        if g.leader_id
            .as_ref()
            .is_none_or(|l| !g.members.contains_key(l))
        {
            g.leader_id = g
                .members
                .values()
                .min_by_key(|m| m.join_seq)
                .map(|m| m.member_id.clone());
        }
        g.generation_id = g.generation_id.wrapping_add(1);
        if g.members.is_empty() {
            g.protocol_name = None;
            g.leader_id = None;
            g.transition(GroupState::Empty, now_ms);
            self.store_group(group_id);
        } else {
            g.protocol_name = g.select_protocol();
            g.transition(GroupState::CompletingRebalance, now_ms);
            g.pending_sync = g.members.keys().cloned().collect();
            g.sync_deadline_ms = Some(now_ms + i64::from(g.rebalance_timeout_ms()));
            let mut joins = Vec::new();
            for m in g.members.values_mut() {
                m.is_new = false;
                m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
                if let Some(id) = m.awaiting_join.take() {
                    joins.push((id, m.member_id.clone()));
                }
            }
            for (request_id, member_id) in joins {
                let response = self.join_response(group_id, &member_id, false);
                self.respond(request_id, GroupResponse::JoinGroup(response));
            }
        }
        for id in orphaned_syncs {
            let response =
                SyncGroupResponse::default().with_error_code(GroupError::UnknownMemberId.code());
            self.respond(id, GroupResponse::SyncGroup(response));
        }
    }

    fn join_response(
        &self,
        group_id: &str,
        member_id: &str,
        skip_assignment: bool,
    ) -> JoinGroupResponse {
        let g = &self.groups[group_id];
        let leader = g.leader_id.clone().unwrap_or_default();
        let protocol = g.protocol_name.clone().unwrap_or_default();
        let members = if leader == member_id {
            g.members
                .values()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(sb(&m.member_id))
                        .with_group_instance_id(m.group_instance_id.as_deref().map(sb))
                        .with_metadata(m.metadata(&protocol).cloned().unwrap_or_default())
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinGroupResponse::default()
            .with_generation_id(g.generation_id)
            .with_protocol_type(g.protocol_type.as_deref().map(sb))
            .with_protocol_name(g.protocol_name.as_deref().map(sb))
            .with_leader(sb(&leader))
            .with_skip_assignment(skip_assignment)
            .with_member_id(sb(member_id))
            .with_members(members)
    }

    // ---- SyncGroup ------------------------------------------------------------------------

    fn sync_group(&mut self, now_ms: i64, request_id: RequestId, r: SyncGroupRequest) {
        match self.try_sync_group(now_ms, request_id, &r) {
            Ok(()) => {}
            Err(e) => {
                let response = SyncGroupResponse::default().with_error_code(e.code());
                self.respond(request_id, GroupResponse::SyncGroup(response));
            }
        }
    }

    fn try_sync_group(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        r: &SyncGroupRequest,
    ) -> Result<(), GroupError> {
        let group_id = r.group_id.0.to_string();
        let member_id = r.member_id.to_string();
        let g = self
            .groups
            .get_mut(&group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if g.state == GroupState::Empty {
            return Err(GroupError::UnknownMemberId);
        }
        g.validate_member(&member_id, r.group_instance_id.as_deref())?;
        if r.generation_id != g.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        if r.protocol_type
            .as_ref()
            .is_some_and(|t| g.protocol_type.as_deref() != Some(t.as_str()))
            || r.protocol_name
                .as_ref()
                .is_some_and(|n| g.protocol_name.as_deref() != Some(n.as_str()))
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        match g.state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::Stable => {
                let m = g.members.get_mut(&member_id).expect("validated");
                m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
                let response = SyncGroupResponse::default()
                    .with_protocol_type(g.protocol_type.as_deref().map(sb))
                    .with_protocol_name(g.protocol_name.as_deref().map(sb))
                    .with_assignment(m.assignment.clone());
                self.respond(request_id, GroupResponse::SyncGroup(response));
                Ok(())
            }
            GroupState::CompletingRebalance => {
                g.pending_sync.remove(&member_id);
                let m = g.members.get_mut(&member_id).expect("validated");
                m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
                if let Some(old) = m.awaiting_sync.replace(request_id) {
                    let response = SyncGroupResponse::default()
                        .with_error_code(GroupError::RebalanceInProgress.code());
                    self.respond(old, GroupResponse::SyncGroup(response));
                }
                let g = self.groups.get_mut(&group_id).expect("exists");
                if g.leader_id.as_deref() == Some(member_id.as_str()) {
                    let assignments: BTreeMap<String, Bytes> = r
                        .assignments
                        .iter()
                        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                        .collect();
                    for m in g.members.values_mut() {
                        m.assignment = assignments.get(&m.member_id).cloned().unwrap_or_default();
                    }
                    g.transition(GroupState::Stable, now_ms);
                    g.pending_sync.clear();
                    g.sync_deadline_ms = None;
                    self.store_group(&group_id);
                    let g = self.groups.get_mut(&group_id).expect("exists");
                    let protocol_type = g.protocol_type.clone();
                    let protocol_name = g.protocol_name.clone();
                    let parked: Vec<(RequestId, Bytes)> = g
                        .members
                        .values_mut()
                        .filter_map(|m| m.awaiting_sync.take().map(|id| (id, m.assignment.clone())))
                        .collect();
                    for (id, assignment) in parked {
                        let response = SyncGroupResponse::default()
                            .with_protocol_type(protocol_type.as_deref().map(sb))
                            .with_protocol_name(protocol_name.as_deref().map(sb))
                            .with_assignment(assignment);
                        self.respond(id, GroupResponse::SyncGroup(response));
                    }
                }
                Ok(())
            }
        }
    }

    // ---- Heartbeat ------------------------------------------------------------------------

    fn heartbeat(&mut self, now_ms: i64, r: &HeartbeatRequest) -> Result<(), GroupError> {
        let g = self
            .groups
            .get_mut(r.group_id.0.as_str())
            .ok_or(GroupError::UnknownMemberId)?;
        if g.state == GroupState::Empty || g.state == GroupState::Dead {
            return Err(GroupError::UnknownMemberId);
        }
        g.validate_member(&r.member_id, r.group_instance_id.as_deref())?;
        if r.generation_id != g.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        let state = g.state;
        let m = g.members.get_mut(r.member_id.as_str()).expect("validated");
        m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
        match state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    // ---- LeaveGroup -----------------------------------------------------------------------

    fn leave_group(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        r: LeaveGroupRequest,
    ) {
        let group_id = r.group_id.0.to_string();
        let identities: Vec<(String, Option<String>)> = if ctx.api_version >= 3 {
            r.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|s| s.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(r.member_id.to_string(), None)]
        };
        let mut results = Vec::new();
        let mut top_error = 0;
        if !self.groups.contains_key(&group_id) {
            top_error = GroupError::UnknownMemberId.code();
        } else {
            for (member_id, instance_id) in &identities {
                let result = self.remove_leaving_member(
                    now_ms,
                    &group_id,
                    member_id,
                    instance_id.as_deref(),
                );
                let code = result.as_ref().map_or_else(GroupError::code, |_| 0);
                results.push(
                    MemberResponse::default()
                        .with_member_id(sb(member_id))
                        .with_group_instance_id(instance_id.as_deref().map(sb))
                        .with_error_code(code),
                );
            }
            if ctx.api_version < 3 {
                top_error = results.first().map_or(0, |m| m.error_code);
                results.clear();
            }
            if self.groups.contains_key(&group_id) {
                let state = self.groups[&group_id].state;
                if state == GroupState::PreparingRebalance {
                    self.maybe_complete_join(now_ms, &group_id);
                }
            }
        }
        let response = LeaveGroupResponse::default()
            .with_error_code(top_error)
            .with_members(results);
        self.respond(request_id, GroupResponse::LeaveGroup(response));
    }

    fn remove_leaving_member(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        let target = match instance_id {
            Some(instance) => {
                let existing = g
                    .static_member_id(instance)
                    .ok_or(GroupError::UnknownMemberId)?;
                if !member_id.is_empty() && existing != member_id {
                    return Err(GroupError::FencedInstanceId);
                }
                existing.to_owned()
            }
            None => {
                if g.pending_members.remove(member_id).is_some() {
                    return Ok(());
                }
                if !g.members.contains_key(member_id) {
                    return Err(GroupError::UnknownMemberId);
                }
                member_id.to_owned()
            }
        };
        self.remove_member_and_update(now_ms, group_id, &target, GroupError::UnknownMemberId);
        Ok(())
    }

    /// Removes a member; its parked requests get `error`; the group rebalances as Kafka's
    /// `removeMemberAndUpdateClassicGroup`.
    fn remove_member_and_update(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        error: GroupError,
    ) {
        let g = self.groups.get_mut(group_id).expect("caller checked");
        let Some(m) = g.members.remove(member_id) else {
            return;
        };
        g.pending_sync.remove(member_id);
        if g.leader_id.as_deref() == Some(member_id) {
            g.leader_id = g
                .members
                .values()
                .filter(|m| m.is_awaiting_join())
                .chain(g.members.values())
                .min_by_key(|m| (!m.is_awaiting_join(), m.join_seq))
                .map(|m| m.member_id.clone());
        }
        let state = g.state;
        if let Some(id) = m.awaiting_join {
            self.join_error(id, member_id, error.clone());
        }
        if let Some(id) = m.awaiting_sync {
            let response = SyncGroupResponse::default().with_error_code(error.code());
            self.respond(id, GroupResponse::SyncGroup(response));
        }
        match state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now_ms, group_id)
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms, group_id),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    // ---- Timers ---------------------------------------------------------------------------

    /// Fires every timer due at `now_ms`: session expiry, join phase end (with the initial
    /// delay's extensions), sync deadline, offsets retention.
    pub fn handle_timeout(&mut self, now_ms: i64) {
        if self.failed {
            return;
        }
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for group_id in ids {
            self.expire_group_timers(now_ms, &group_id);
        }
        if now_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms;
            self.cleanup_expired_offsets(now_ms);
        }
        self.check_invariants();
    }

    /// Topic partitions were deleted (Kafka 3.9 `OffsetMetadataManager.onPartitionsDeleted`):
    /// the offsets every group committed for them are removed and tombstoned. Groups stay;
    /// an Empty group left without offsets goes at the next retention check.
    pub fn handle_partitions_deleted(&mut self, deleted: &[(String, i32)]) {
        if self.failed || deleted.is_empty() {
            return;
        }
        let mut records = Vec::new();
        for (group_id, offsets) in &mut self.offsets {
            for key in deleted {
                if offsets.remove(key).is_some() {
                    records.push(CoordinatorRecord::OffsetCommit {
                        group: group_id.clone(),
                        topic: key.0.clone(),
                        partition: key.1,
                        value: None,
                    });
                }
            }
        }
        self.offsets.retain(|_, o| !o.is_empty());
        self.append(records);
    }

    fn expire_group_timers(&mut self, now_ms: i64, group_id: &str) {
        let initial_delay = i64::from(self.config.group_initial_rebalance_delay_ms);
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        let expired_pending: Vec<String> = g
            .pending_members
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired_pending {
            g.pending_members.remove(id);
        }
        let expired: Vec<String> = g
            .members
            .values()
            .filter(|m| m.session_can_expire() && m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            tracing::info!(group = group_id, member = %id, "session timeout: removing member");
            self.remove_member_and_update(now_ms, group_id, &id, GroupError::UnknownMemberId);
        }
        if !expired_pending.is_empty() {
            self.maybe_complete_join(now_ms, group_id);
        }
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        if g.state == GroupState::CompletingRebalance
            && g.sync_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            // Members that never synced are removed (Kafka: pending sync timeout).
            let missing: Vec<String> = g.pending_sync.iter().cloned().collect();
            g.sync_deadline_ms = None;
            for id in missing {
                self.remove_member_and_update(now_ms, group_id, &id, GroupError::UnknownMemberId);
            }
        }
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        if g.state == GroupState::PreparingRebalance
            && g.join_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            match g.initial_delay_remaining_ms {
                Some(remaining) if g.new_member_added && remaining > 0 => {
                    // InitialDelayedJoin: a member arrived, wait one more delay (bounded by
                    // the rebalance timeout).
                    let delay = initial_delay.min(remaining);
                    g.join_deadline_ms = Some(now_ms + delay);
                    g.initial_delay_remaining_ms = Some(remaining - delay);
                    g.new_member_added = false;
                }
                _ => self.complete_join(now_ms, group_id),
            }
        }
    }

    /// Kafka's `cleanupGroupMetadata`: expires offsets by the group's
    /// `offsetExpirationCondition` (an explicit expire timestamp wins; otherwise
    /// `offsets.retention.minutes` after the time the group became Empty, or after the commit
    /// for simple groups and for unsubscribed topics of a Stable consumer group), then deletes
    /// Empty groups left without offsets.
    fn cleanup_expired_offsets(&mut self, now_ms: i64) {
        let retention = self.config.offsets_retention_ms;
        let mut records = Vec::new();
        let group_ids: Vec<String> = self.groups.keys().cloned().collect();
        for group_id in group_ids {
            let g = &self.groups[&group_id];
            let empty = g.state == GroupState::Empty;
            // Some(true): base is the state timestamp; Some(false): the commit timestamp.
            let base_is_state_time = if g.protocol_type.is_none() {
                Some(false)
            } else if empty {
                Some(true)
            } else if g.uses_consumer_protocol()
                && g.state == GroupState::Stable
                && g.subscribed_topics().is_some()
            {
                Some(false)
            } else {
                None
            };
            if let (Some(base_is_state_time), Some(offsets)) =
                (base_is_state_time, self.offsets.get_mut(&group_id))
            {
                let expired: Vec<(String, i32)> = offsets
                    .iter()
                    .filter(|((topic, _), o)| {
                        if g.is_subscribed_to(topic) {
                            return false;
                        }
                        match o.expire_timestamp_ms {
                            Some(t) => now_ms >= t,
                            None => {
                                let base = if base_is_state_time {
                                    g.state_timestamp_ms
                                } else {
                                    o.commit_timestamp_ms
                                };
                                now_ms.saturating_sub(base) >= retention
                            }
                        }
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for (topic, partition) in expired {
                    offsets.remove(&(topic.clone(), partition));
                    records.push(CoordinatorRecord::OffsetCommit {
                        group: group_id.clone(),
                        topic,
                        partition,
                        value: None,
                    });
                }
                if offsets.is_empty() {
                    self.offsets.remove(&group_id);
                }
            }
            if empty && !self.offsets.contains_key(&group_id) {
                self.groups.remove(&group_id);
                records.push(CoordinatorRecord::GroupMetadata {
                    group: group_id,
                    value: None,
                });
            }
        }
        self.append(records);
    }

    // ---- Offsets --------------------------------------------------------------------------

    fn validate_offset_commit(
        &mut self,
        now_ms: i64,
        r: &OffsetCommitRequest,
    ) -> Result<(), GroupError> {
        let group_id = r.group_id.0.to_string();
        let generation = r.generation_id_or_member_epoch;
        let Some(g) = self.groups.get_mut(&group_id) else {
            if generation < 0 {
                self.groups
                    .insert(group_id.clone(), ClassicGroup::new(group_id, now_ms));
                return Ok(());
            }
            return Err(GroupError::IllegalGeneration);
        };
        match g.state {
            GroupState::Dead => return Err(GroupError::CoordinatorNotAvailable),
            GroupState::Empty if generation < 0 => return Ok(()),
            _ => {}
        }
        g.validate_member(&r.member_id, r.group_instance_id.as_deref())?;
        if generation != g.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        if g.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        if let Some(m) = g.members.get_mut(r.member_id.as_str()) {
            m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
        }
        Ok(())
    }

    fn offset_commit(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        r: OffsetCommitRequest,
    ) {
        let group_id = r.group_id.0.to_string();
        let check = if group_id.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else {
            self.validate_offset_commit(now_ms, &r)
        };
        let expire = (ctx.api_version >= 2 && r.retention_time_ms >= 0)
            .then(|| now_ms.saturating_add(r.retention_time_ms));
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for t in &r.topics {
            let mut partitions = Vec::new();
            for p in &t.partitions {
                let value = check.clone().and_then(|()| {
                    self.offset_value(
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_deref(),
                        now_ms,
                        expire,
                    )
                });
                let code = match value {
                    Err(e) => e.code(),
                    Ok(value) => {
                        records.push(CoordinatorRecord::OffsetCommit {
                            group: group_id.clone(),
                            topic: t.name.0.to_string(),
                            partition: p.partition_index,
                            value: Some(value),
                        });
                        0
                    }
                };
                partitions.push(
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            topics.push(
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        for rec in &records {
            self.replay_record(now_ms, rec.clone());
        }
        self.append(records);
        let response = OffsetCommitResponse::default().with_topics(topics);
        self.respond(request_id, GroupResponse::OffsetCommit(response));
    }

    /// Kafka 3.9 `GroupCoordinator.validateOffsetCommit` for a transactional commit (a group
    /// that does not exist is created Empty, as `handleTxnCommitOffsets` does).
    fn validate_txn_offset_commit(
        &mut self,
        now_ms: i64,
        r: &TxnOffsetCommitRequest,
    ) -> Result<(), GroupError> {
        let group_id = r.group_id.0.to_string();
        let g = self
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| ClassicGroup::new(group_id, now_ms));
        let generation = r.generation_id;
        let instance = r.group_instance_id.as_deref();
        if g.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation < 0 && g.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !r.member_id.is_empty() || instance.is_some() {
            g.validate_member(&r.member_id, instance)?;
            if generation != g.generation_id {
                return Err(GroupError::IllegalGeneration);
            }
        }
        Ok(())
    }

    /// TxnOffsetCommit (Kafka 3.9 `doTxnCommitOffsets` → `storeOffsets` with a producer): the
    /// offsets become pending for the producer at once (OffsetFetch with `require_stable`
    /// answers UNSTABLE_OFFSET_COMMIT for them), are written in one transactional batch, and
    /// become committed offsets with the producer's COMMIT marker ([`Self::handle_txn_marker`]).
    fn txn_offset_commit(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        r: &TxnOffsetCommitRequest,
        guard: Option<VerificationGuard>,
    ) {
        let group_id = r.group_id.0.to_string();
        let check = if group_id.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else {
            self.validate_txn_offset_commit(now_ms, r)
        };
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for t in &r.topics {
            let mut partitions = Vec::new();
            for p in &t.partitions {
                let value = check.clone().and_then(|()| {
                    self.offset_value(
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_deref(),
                        now_ms,
                        None,
                    )
                });
                let code = match value {
                    Err(e) => e.code(),
                    Ok(value) => {
                        records.push(CoordinatorRecord::OffsetCommit {
                            group: group_id.clone(),
                            topic: t.name.0.to_string(),
                            partition: p.partition_index,
                            value: Some(value),
                        });
                        0
                    }
                };
                partitions.push(
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            topics.push(
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        let producer_id = r.producer_id.0;
        let mut previous = Vec::new();
        if !records.is_empty() {
            let pending = self
                .pending_txn_offsets
                .entry(producer_id)
                .or_default()
                .entry(group_id.clone())
                .or_default();
            for record in &records {
                if let CoordinatorRecord::OffsetCommit {
                    topic,
                    partition,
                    value: Some(v),
                    ..
                } = record
                {
                    let tp = (topic.clone(), *partition);
                    let before = pending.insert(tp.clone(), CommittedOffset::from(v.clone()));
                    previous.push((tp, before));
                }
            }
        }
        let txn = TxnAppend {
            producer_id,
            producer_epoch: r.producer_epoch,
            guard,
        };
        if let Some(append_id) = self.emit_append(records, Some(txn)) {
            self.txn_appends.insert(
                append_id,
                PendingTxnAppend {
                    request_id,
                    producer_id,
                    group: group_id,
                    previous,
                },
            );
        }
        let response = TxnOffsetCommitResponse::default().with_topics(topics);
        self.respond(request_id, GroupResponse::TxnOffsetCommit(response));
    }

    fn fetch_group_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(TopicName, Vec<i32>)>>,
    ) -> Vec<FetchedTopic<'_>> {
        let offsets = self.offsets.get(group_id);
        match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(name, parts)| {
                    let rows = parts
                        .into_iter()
                        .map(|p| (p, offsets.and_then(|o| o.get(&(name.0.to_string(), p)))))
                        .collect();
                    (name, rows)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<&str, Vec<(i32, Option<&CommittedOffset>)>> =
                    BTreeMap::new();
                for ((topic, p), o) in offsets.into_iter().flatten() {
                    by_topic
                        .entry(topic.as_str())
                        .or_default()
                        .push((*p, Some(o)));
                }
                by_topic
                    .into_iter()
                    .map(|(t, rows)| (TopicName(sb(t)), rows))
                    .collect()
            }
        }
    }

    fn offset_fetch(&self, ctx: &RequestContext, r: &OffsetFetchRequest) -> OffsetFetchResponse {
        // `require_stable` (v7+, KIP-447): a requested partition with offsets pending in a
        // transaction answers UNSTABLE_OFFSET_COMMIT, as Kafka's `GroupMetadataManager.getOffsets`
        // (not when all of the group's offsets are asked for).
        if ctx.api_version >= 8 {
            let groups = r
                .groups
                .iter()
                .map(|gr| {
                    let topics = gr.topics.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| (t.name.clone(), t.partition_indexes.clone()))
                            .collect()
                    });
                    let topics = self
                        .fetch_group_offsets(gr.group_id.0.as_str(), topics)
                        .into_iter()
                        .map(|(name, rows)| {
                            let partitions = rows
                                .into_iter()
                                .map(|(p, o)| {
                                    let unstable = r.require_stable
                                        && gr.topics.is_some()
                                        && self.has_pending_txn_offset(
                                            gr.group_id.0.as_str(),
                                            name.0.as_str(),
                                            p,
                                        );
                                    let o = if unstable { None } else { o };
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o.map_or(-1, |o| o.offset))
                                        .with_committed_leader_epoch(
                                            o.map_or(-1, |o| o.leader_epoch),
                                        )
                                        .with_metadata(Some(sb(
                                            o.map_or("", |o| o.metadata.as_str())
                                        )))
                                        .with_error_code(if unstable {
                                            GroupError::UnstableOffsetCommit.code()
                                        } else {
                                            0
                                        })
                                })
                                .collect();
                            OffsetFetchResponseTopics::default()
                                .with_name(name)
                                .with_partitions(partitions)
                        })
                        .collect();
                    OffsetFetchResponseGroup::default()
                        .with_group_id(gr.group_id.clone())
                        .with_topics(topics)
                })
                .collect();
            return OffsetFetchResponse::default().with_groups(groups);
        }
        let topics = r.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.clone(), t.partition_indexes.clone()))
                .collect()
        });
        let topics = self
            .fetch_group_offsets(r.group_id.0.as_str(), topics)
            .into_iter()
            .map(|(name, rows)| {
                let partitions = rows
                    .into_iter()
                    .map(|(p, o)| {
                        // KIP-447: `require_stable` (v7) refuses a partition whose offsets
                        // wait for a transaction marker.
                        let unstable = r.require_stable
                            && r.topics.is_some()
                            && self.has_pending_txn_offset(
                                r.group_id.0.as_str(),
                                name.0.as_str(),
                                p,
                            );
                        let o = if unstable { None } else { o };
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(p)
                            .with_error_code(if unstable {
                                GroupError::UnstableOffsetCommit.code()
                            } else {
                                0
                            })
                            .with_committed_offset(o.map_or(-1, |o| o.offset))
                            .with_committed_leader_epoch(o.map_or(-1, |o| o.leader_epoch))
                            .with_metadata(Some(sb(o.map_or("", |o| o.metadata.as_str()))))
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetFetchResponse::default().with_topics(topics)
    }

    fn offset_delete(&mut self, request_id: RequestId, r: OffsetDeleteRequest) {
        let group_id = r.group_id.0.to_string();
        let check = match self.groups.get(&group_id) {
            None => Err(GroupError::GroupIdNotFound),
            Some(g) if g.state == GroupState::Dead => Err(GroupError::GroupIdNotFound),
            Some(g)
                if g.state != GroupState::Empty
                    && g.protocol_type.as_deref() != Some("consumer") =>
            {
                Err(GroupError::NonEmptyGroup)
            }
            Some(_) => Ok(()),
        };
        if let Err(e) = check {
            let response = OffsetDeleteResponse::default().with_error_code(e.code());
            return self.respond(request_id, GroupResponse::OffsetDelete(response));
        }
        let g = &self.groups[&group_id];
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for t in &r.topics {
            let topic = t.name.0.to_string();
            let subscribed = g.is_subscribed_to(&topic);
            let mut partitions = Vec::new();
            for p in &t.partitions {
                let code = if subscribed {
                    GroupError::GroupSubscribedToTopic.code()
                } else {
                    let key = (topic.clone(), p.partition_index);
                    if self
                        .offsets
                        .get(&group_id)
                        .is_some_and(|o| o.contains_key(&key))
                    {
                        records.push(CoordinatorRecord::OffsetCommit {
                            group: group_id.clone(),
                            topic: topic.clone(),
                            partition: p.partition_index,
                            value: None,
                        });
                    }
                    0
                };
                partitions.push(
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        for rec in &records {
            self.replay_record(0, rec.clone());
        }
        self.append(records);
        let response = OffsetDeleteResponse::default().with_topics(topics);
        self.respond(request_id, GroupResponse::OffsetDelete(response));
    }

    // ---- Admin ----------------------------------------------------------------------------

    fn list_groups(&self, r: &ListGroupsRequest) -> ListGroupsResponse {
        let groups = self
            .groups
            .values()
            .filter(|g| {
                r.states_filter.is_empty()
                    || r.states_filter
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(g.state.name()))
            })
            .filter(|_g| {
                r.types_filter.is_empty()
                    || r.types_filter
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case("classic"))
            })
            .map(|g| {
                ListedGroup::default()
                    .with_group_id(GroupId(sb(&g.group_id)))
                    .with_protocol_type(sb(g.protocol_type.as_deref().unwrap_or("")))
                    .with_group_state(sb(g.state.name()))
                    .with_group_type(sb("classic"))
            })
            .collect();
        ListGroupsResponse::default().with_groups(groups)
    }

    fn describe_groups(&self, r: &DescribeGroupsRequest) -> DescribeGroupsResponse {
        let groups = r
            .groups
            .iter()
            .map(|id| match self.groups.get(id.0.as_str()) {
                None => DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(sb(GroupState::Dead.name())),
                Some(g) => {
                    let stable = g.state == GroupState::Stable;
                    let protocol = g.protocol_name.clone().unwrap_or_default();
                    let members = g
                        .members
                        .values()
                        .map(|m| {
                            let member = DescribedGroupMember::default()
                                .with_member_id(sb(&m.member_id))
                                .with_group_instance_id(m.group_instance_id.as_deref().map(sb))
                                .with_client_id(sb(&m.client_id))
                                .with_client_host(sb(&m.client_host));
                            if stable {
                                member
                                    .with_member_metadata(
                                        m.metadata(&protocol).cloned().unwrap_or_default(),
                                    )
                                    .with_member_assignment(m.assignment.clone())
                            } else {
                                member
                            }
                        })
                        .collect();
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_group_state(sb(g.state.name()))
                        .with_protocol_type(sb(g.protocol_type.as_deref().unwrap_or("")))
                        .with_protocol_data(sb(if stable { &protocol } else { "" }))
                        .with_members(members)
                }
            })
            .collect();
        DescribeGroupsResponse::default().with_groups(groups)
    }

    fn delete_groups(&mut self, now_ms: i64, request_id: RequestId, r: DeleteGroupsRequest) {
        let mut records = Vec::new();
        let mut results = Vec::new();
        for id in &r.groups_names {
            let group_id = id.0.to_string();
            let code = match self.groups.get(&group_id) {
                None => GroupError::GroupIdNotFound.code(),
                Some(g) if g.state == GroupState::Dead => GroupError::GroupIdNotFound.code(),
                Some(g) if g.state != GroupState::Empty => GroupError::NonEmptyGroup.code(),
                Some(_) => {
                    for (topic, partition) in self
                        .offsets
                        .remove(&group_id)
                        .unwrap_or_default()
                        .into_keys()
                    {
                        records.push(CoordinatorRecord::OffsetCommit {
                            group: group_id.clone(),
                            topic,
                            partition,
                            value: None,
                        });
                    }
                    records.push(CoordinatorRecord::GroupMetadata {
                        group: group_id.clone(),
                        value: None,
                    });
                    if let Some(mut g) = self.groups.remove(&group_id) {
                        g.transition(GroupState::Dead, now_ms);
                    }
                    0
                }
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(id.clone())
                    .with_error_code(code),
            );
        }
        self.append(records);
        let response = DeleteGroupsResponse::default().with_results(results);
        self.respond(request_id, GroupResponse::DeleteGroups(response));
    }
}

/// Longest string a record's int16 length prefix can carry.
const MAX_RECORD_STRING_BYTES: usize = i16::MAX as usize;

/// Refuses requests whose strings could not be written into a record.
fn check_record_strings(ctx: &RequestContext, request: &GroupRequest) -> Result<(), GroupError> {
    let check = |field: &'static str, value: &str| {
        if value.len() > MAX_RECORD_STRING_BYTES {
            Err(GroupError::InvalidRequest { field })
        } else {
            Ok(())
        }
    };
    match request {
        GroupRequest::JoinGroup(r) => {
            check("client_id", &ctx.client_id)?;
            check("client_host", &ctx.client_host)?;
            check("group_id", &r.group_id.0)?;
            check("member_id", &r.member_id)?;
            check(
                "group_instance_id",
                r.group_instance_id.as_deref().unwrap_or(""),
            )?;
            check("protocol_type", &r.protocol_type)?;
            r.protocols
                .iter()
                .try_for_each(|p| check("protocol name", &p.name))
        }
        GroupRequest::OffsetCommit(r) => {
            check("group_id", &r.group_id.0)?;
            r.topics
                .iter()
                .try_for_each(|t| check("topic name", &t.name.0))
        }
        GroupRequest::TxnOffsetCommit { request: r, .. } => {
            check("group_id", &r.group_id.0)?;
            r.topics
                .iter()
                .try_for_each(|t| check("topic name", &t.name.0))
        }
        _ => Ok(()),
    }
}

/// One topic of an OffsetFetch answer: partition → committed offset, if any.
type FetchedTopic<'a> = (TopicName, Vec<(i32, Option<&'a CommittedOffset>)>);

/// The parts of a JoinGroup the handlers pass around.
struct Join {
    request_id: RequestId,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    instance_id: Option<String>,
    /// JoinGroup version (v9+ knows `skip_assignment`, KIP-814).
    api_version: i16,
}

/// A response of the same kind carrying `error` (used when the shard lost its partition).
fn error_like(response: &GroupResponse, error: GroupError) -> GroupResponse {
    let code = error.code();
    match response {
        GroupResponse::JoinGroup(_) => GroupResponse::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        GroupResponse::SyncGroup(_) => {
            GroupResponse::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        GroupResponse::Heartbeat(_) => {
            GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        GroupResponse::LeaveGroup(_) => {
            GroupResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        GroupResponse::OffsetCommit(r) => {
            let mut r = r.clone();
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    p.error_code = code;
                }
            }
            GroupResponse::OffsetCommit(r)
        }
        GroupResponse::OffsetFetch(_) => {
            GroupResponse::OffsetFetch(OffsetFetchResponse::default().with_error_code(code))
        }
        GroupResponse::OffsetDelete(_) => {
            GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code))
        }
        GroupResponse::ListGroups(_) => {
            GroupResponse::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        GroupResponse::DescribeGroups(r) => {
            let mut r = r.clone();
            for g in &mut r.groups {
                g.error_code = code;
                g.members.clear();
            }
            GroupResponse::DescribeGroups(r)
        }
        GroupResponse::DeleteGroups(r) => {
            let mut r = r.clone();
            for g in &mut r.results {
                g.error_code = code;
            }
            GroupResponse::DeleteGroups(r)
        }
        GroupResponse::TxnOffsetCommit(r) => {
            let mut r = r.clone();
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    p.error_code = code;
                }
            }
            GroupResponse::TxnOffsetCommit(r)
        }
    }
}

impl GroupRequest {
    /// The answer to this request when no shard can take it (`error` for every group,
    /// topic and partition it names, as the request's version carries it): NOT_COORDINATOR,
    /// COORDINATOR_LOAD_IN_PROGRESS.
    #[must_use]
    pub fn error_response(&self, ctx: &RequestContext, error: GroupError) -> GroupResponse {
        error_response(self, ctx, error)
    }
}

/// An error response to `request` (shard no longer the coordinator).
fn error_response(
    request: &GroupRequest,
    ctx: &RequestContext,
    error: GroupError,
) -> GroupResponse {
    let code = error.code();
    match request {
        // OffsetFetch v0/v1 have no top-level error: Kafka's `OffsetFetchRequest.getErrorResponse`
        // puts the error on every requested partition (offset -1, metadata "").
        GroupRequest::OffsetFetch(r) if ctx.api_version < 2 => {
            let topics = r
                .topics
                .iter()
                .flatten()
                .map(|t| {
                    OffsetFetchResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|&p| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(-1)
                                        .with_metadata(Some(sb("")))
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            GroupResponse::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(code)
                    .with_topics(topics),
            )
        }
        GroupRequest::JoinGroup(_) => GroupResponse::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        GroupRequest::SyncGroup(_) => {
            GroupResponse::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        GroupRequest::Heartbeat(_) => {
            GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        GroupRequest::LeaveGroup(_) => {
            GroupResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        GroupRequest::OffsetCommit(r) => GroupResponse::OffsetCommit(
            OffsetCommitResponse::default().with_topics(offset_commit_errors(&r.topics, code)),
        ),
        GroupRequest::OffsetFetch(r) => {
            let groups = r
                .groups
                .iter()
                .map(|g| {
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(code)
                })
                .collect();
            GroupResponse::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(code)
                    .with_groups(groups),
            )
        }
        GroupRequest::OffsetDelete(_) => {
            GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code))
        }
        GroupRequest::ListGroups(_) => {
            GroupResponse::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        GroupRequest::DescribeGroups(r) => GroupResponse::DescribeGroups(
            DescribeGroupsResponse::default().with_groups(
                r.groups
                    .iter()
                    .map(|id| {
                        DescribedGroup::default()
                            .with_group_id(id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        GroupRequest::DeleteGroups(r) => GroupResponse::DeleteGroups(
            DeleteGroupsResponse::default().with_results(
                r.groups_names
                    .iter()
                    .map(|id| {
                        DeletableGroupResult::default()
                            .with_group_id(id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        GroupRequest::TxnOffsetCommit { request: r, .. } => {
            GroupResponse::TxnOffsetCommit(txn_offset_commit_error(r, code))
        }
    }
}

/// `code` for every partition of a TxnOffsetCommit.
#[must_use]
pub fn txn_offset_commit_error(r: &TxnOffsetCommitRequest, code: i16) -> TxnOffsetCommitResponse {
    TxnOffsetCommitResponse::default().with_topics(txn_offset_commit_errors(&r.topics, code))
}

/// `code` for every partition of some TxnOffsetCommit topics.
#[must_use]
pub fn txn_offset_commit_errors(
    topics: &[kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic],
    code: i16,
) -> Vec<TxnOffsetCommitResponseTopic> {
    topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// `code` for every partition of some OffsetCommit topics.
#[must_use]
pub fn offset_commit_errors(
    topics: &[kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic],
    code: i16,
) -> Vec<OffsetCommitResponseTopic> {
    topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}
