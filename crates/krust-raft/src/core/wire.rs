//! Raft RPCs as the `kafka-protocol` crate defines them, and the narrow views the core works on.
//!
//! Every Raft RPC names exactly one topic (`__cluster_metadata`) and one partition (0). The
//! `*_args` functions check that shape and pull out the fields the core needs; the `*_response`
//! functions build answers. A request of another shape is answered with `INVALID_REQUEST` at the
//! top level, as Kafka 3.9 does ("until we support multi-raft").

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, BrokerId, DescribeQuorumRequest,
    DescribeQuorumResponse, EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest,
    FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, TopicName, VoteRequest,
    VoteResponse, begin_quorum_epoch_request, begin_quorum_epoch_response,
    describe_quorum_response, end_quorum_epoch_request, end_quorum_epoch_response, fetch_request,
    fetch_response, fetch_snapshot_request, fetch_snapshot_response, vote_request, vote_response,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::types::{LeaderEpoch, LogOffset, NodeId, OffsetAndEpoch};

/// The metadata topic's name.
pub const METADATA_TOPIC_NAME: &str = "__cluster_metadata";
/// The metadata partition.
pub const METADATA_PARTITION: i32 = 0;
/// `Uuid.METADATA_TOPIC_ID` (msb 0, lsb 1; `AAAAAAAAAAAAAAAAAAAAAQ`).
pub const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);
/// Kafka 3.9's `INVALID_VOTER_KEY` (125); `kafka-protocol` 0.15 predates it.
pub const INVALID_VOTER_KEY: ResponseError = ResponseError::Unknown(125);

/// A Raft request the core handles.
#[derive(Clone, Debug, PartialEq)]
pub enum RaftRequest {
    /// Vote (52).
    Vote(VoteRequest),
    /// BeginQuorumEpoch (53).
    BeginQuorumEpoch(BeginQuorumEpochRequest),
    /// EndQuorumEpoch (54).
    EndQuorumEpoch(EndQuorumEpochRequest),
    /// Fetch (1), as sent by followers and observers of the metadata partition.
    Fetch(FetchRequest),
    /// DescribeQuorum (55).
    DescribeQuorum(DescribeQuorumRequest),
    /// FetchSnapshot (59).
    FetchSnapshot(FetchSnapshotRequest),
}

/// A Raft response the core handles or produces.
#[derive(Clone, Debug, PartialEq)]
pub enum RaftResponse {
    /// Vote (52).
    Vote(VoteResponse),
    /// BeginQuorumEpoch (53).
    BeginQuorumEpoch(BeginQuorumEpochResponse),
    /// EndQuorumEpoch (54).
    EndQuorumEpoch(EndQuorumEpochResponse),
    /// Fetch (1).
    Fetch(FetchResponse),
    /// DescribeQuorum (55).
    DescribeQuorum(DescribeQuorumResponse),
    /// FetchSnapshot (59).
    FetchSnapshot(FetchSnapshotResponse),
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(METADATA_TOPIC_NAME))
}

fn is_metadata_topic(name: &TopicName) -> bool {
    name.0.as_str() == METADATA_TOPIC_NAME
}

/// `Some(partition)` if `topics` is exactly one metadata topic holding exactly partition 0.
fn single<'a, T, P>(
    topics: &'a [T],
    name_ok: impl Fn(&T) -> bool,
    partitions: impl Fn(&'a T) -> &'a [P],
    index: impl Fn(&P) -> i32,
) -> Option<&'a P> {
    match topics {
        [topic] if name_ok(topic) => match partitions(topic) {
            [p] if index(p) == METADATA_PARTITION => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a request's cluster id (null = not checked) matches ours.
pub(crate) fn cluster_id_matches(request: Option<&StrBytes>, mine: &str) -> bool {
    request.is_none_or(|id| id.as_str() == mine)
}

/// The fields of a VoteRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VoteArgs {
    pub voter_id: i32,
    pub candidate_epoch: i32,
    pub candidate_id: i32,
    pub last_offset_epoch: i32,
    pub last_offset: i64,
}

pub(crate) fn vote_args(request: &VoteRequest) -> Option<VoteArgs> {
    let p = single(
        &request.topics,
        |t| is_metadata_topic(&t.topic_name),
        |t| &t.partitions,
        |p| p.partition_index,
    )?;
    Some(VoteArgs {
        voter_id: request.voter_id.0,
        candidate_epoch: p.candidate_epoch,
        candidate_id: p.candidate_id.0,
        last_offset_epoch: p.last_offset_epoch,
        last_offset: p.last_offset,
    })
}

/// The fields of a Begin- or EndQuorumEpochRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QuorumEpochArgs {
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// EndQuorumEpoch only: preferred successors, best first.
    pub preferred: Vec<NodeId>,
}

pub(crate) fn begin_quorum_epoch_args(
    request: &BeginQuorumEpochRequest,
) -> Option<QuorumEpochArgs> {
    let p = single(
        &request.topics,
        |t| is_metadata_topic(&t.topic_name),
        |t| &t.partitions,
        |p| p.partition_index,
    )?;
    Some(QuorumEpochArgs {
        leader_id: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        preferred: Vec::new(),
    })
}

pub(crate) fn end_quorum_epoch_args(request: &EndQuorumEpochRequest) -> Option<QuorumEpochArgs> {
    let p = single(
        &request.topics,
        |t| is_metadata_topic(&t.topic_name),
        |t| &t.partitions,
        |p| p.partition_index,
    )?;
    // v0 carries PreferredSuccessors, v1 PreferredCandidates; take whichever is filled.
    let preferred = if p.preferred_candidates.is_empty() {
        p.preferred_successors
            .iter()
            .map(|id| NodeId(*id))
            .collect()
    } else {
        p.preferred_candidates
            .iter()
            .map(|c| NodeId(c.candidate_id.0))
            .collect()
    };
    Some(QuorumEpochArgs {
        leader_id: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        preferred,
    })
}

/// The fields of a Raft FetchRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FetchArgs {
    pub replica_id: i32,
    pub max_wait_ms: i32,
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
}

pub(crate) fn fetch_args(request: &FetchRequest) -> Option<FetchArgs> {
    let p = single(
        &request.topics,
        |t| t.topic_id == METADATA_TOPIC_ID || is_metadata_topic(&t.topic),
        |t| &t.partitions,
        |p| p.partition,
    )?;
    // v15+ moves the replica id into ReplicaState; older versions use the top-level field.
    let replica_id = if request.replica_state.replica_id.0 >= 0 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    Some(FetchArgs {
        replica_id,
        max_wait_ms: request.max_wait_ms,
        current_leader_epoch: p.current_leader_epoch,
        fetch_offset: p.fetch_offset,
        last_fetched_epoch: p.last_fetched_epoch,
    })
}

pub(crate) fn describe_quorum_is_valid(request: &DescribeQuorumRequest) -> bool {
    single(
        &request.topics,
        |t| is_metadata_topic(&t.topic_name),
        |t| &t.partitions,
        |p| p.partition_index,
    )
    .is_some()
}

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

pub(crate) fn vote_request(
    cluster_id: &str,
    voter_id: NodeId,
    candidate_epoch: LeaderEpoch,
    candidate_id: NodeId,
    last: OffsetAndEpoch,
) -> VoteRequest {
    let partition = vote_request::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_candidate_epoch(candidate_epoch.0)
        .with_candidate_id(BrokerId(candidate_id.0))
        .with_last_offset_epoch(last.epoch.0)
        .with_last_offset(last.offset.0);
    VoteRequest::default()
        .with_cluster_id(Some(str_bytes(cluster_id)))
        .with_voter_id(BrokerId(voter_id.0))
        .with_topics(vec![
            vote_request::TopicData::default()
                .with_topic_name(topic_name())
                .with_partitions(vec![partition]),
        ])
}

pub(crate) fn begin_quorum_epoch_request(
    cluster_id: &str,
    voter_id: NodeId,
    leader_id: NodeId,
    epoch: LeaderEpoch,
) -> BeginQuorumEpochRequest {
    let partition = begin_quorum_epoch_request::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_leader_id(BrokerId(leader_id.0))
        .with_leader_epoch(epoch.0);
    BeginQuorumEpochRequest::default()
        .with_cluster_id(Some(str_bytes(cluster_id)))
        .with_voter_id(BrokerId(voter_id.0))
        .with_topics(vec![
            begin_quorum_epoch_request::TopicData::default()
                .with_topic_name(topic_name())
                .with_partitions(vec![partition]),
        ])
}

pub(crate) fn end_quorum_epoch_request(
    cluster_id: &str,
    leader_id: NodeId,
    epoch: LeaderEpoch,
    preferred: &[NodeId],
) -> EndQuorumEpochRequest {
    let candidates = preferred
        .iter()
        .map(|id| {
            end_quorum_epoch_request::ReplicaInfo::default().with_candidate_id(BrokerId(id.0))
        })
        .collect();
    let partition = end_quorum_epoch_request::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_leader_id(BrokerId(leader_id.0))
        .with_leader_epoch(epoch.0)
        .with_preferred_successors(preferred.iter().map(|id| id.0).collect())
        .with_preferred_candidates(candidates);
    EndQuorumEpochRequest::default()
        .with_cluster_id(Some(str_bytes(cluster_id)))
        .with_topics(vec![
            end_quorum_epoch_request::TopicData::default()
                .with_topic_name(topic_name())
                .with_partitions(vec![partition]),
        ])
}

pub(crate) fn fetch_request(
    cluster_id: &str,
    replica_id: NodeId,
    epoch: LeaderEpoch,
    position: OffsetAndEpoch,
    max_wait_ms: u64,
    max_bytes: usize,
) -> FetchRequest {
    let partition = fetch_request::FetchPartition::default()
        .with_partition(METADATA_PARTITION)
        .with_current_leader_epoch(epoch.0)
        .with_fetch_offset(position.offset.0)
        .with_last_fetched_epoch(position.epoch.0)
        .with_partition_max_bytes(i32::try_from(max_bytes).unwrap_or(i32::MAX));
    FetchRequest::default()
        .with_cluster_id(Some(str_bytes(cluster_id)))
        // Newest layout (v15+): the id lives in ReplicaState; `adapt_fetch_request` moves it back.
        .with_replica_state(
            fetch_request::ReplicaState::default().with_replica_id(BrokerId(replica_id.0)),
        )
        .with_max_wait_ms(i32::try_from(max_wait_ms).unwrap_or(i32::MAX))
        .with_max_bytes(i32::try_from(max_bytes).unwrap_or(i32::MAX))
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(topic_name())
                .with_topic_id(METADATA_TOPIC_ID)
                .with_partitions(vec![partition]),
        ])
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// `(partition error, leader id or -1, epoch)` carried by every Raft response partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaderInfo {
    pub error: Option<ResponseError>,
    pub leader_id: Option<NodeId>,
    pub epoch: LeaderEpoch,
}

fn leader_id_raw(leader: Option<NodeId>) -> BrokerId {
    BrokerId(leader.map_or(-1, |n| n.0))
}

fn node_or_none(raw: i32) -> Option<NodeId> {
    (raw >= 0).then_some(NodeId(raw))
}

pub(crate) fn vote_response_top(error: ResponseError) -> VoteResponse {
    VoteResponse::default().with_error_code(error.code())
}

pub(crate) fn vote_response(info: LeaderInfo, granted: bool) -> VoteResponse {
    let partition = vote_response::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_error_code(code(info.error))
        .with_leader_id(leader_id_raw(info.leader_id))
        .with_leader_epoch(info.epoch.0)
        .with_vote_granted(granted);
    VoteResponse::default().with_topics(vec![
        vote_response::TopicData::default()
            .with_topic_name(topic_name())
            .with_partitions(vec![partition]),
    ])
}

/// `(top-level error, partition info, granted)`; `None` if the response has the wrong shape.
/// A parsed response: the top-level error, or the partition's payload.
pub(crate) type Parsed<T> = Option<(Option<ResponseError>, Option<T>)>;

pub(crate) fn parse_vote_response(r: &VoteResponse) -> Parsed<(LeaderInfo, bool)> {
    let top = ResponseError::try_from_code(r.error_code);
    if top.is_some() {
        return Some((top, None));
    }
    let p = single(
        &r.topics,
        |t| is_metadata_topic(&t.topic_name),
        |t| &t.partitions,
        |p| p.partition_index,
    )?;
    let info = LeaderInfo {
        error: ResponseError::try_from_code(p.error_code),
        leader_id: node_or_none(p.leader_id.0),
        epoch: LeaderEpoch(p.leader_epoch),
    };
    Some((None, Some((info, p.vote_granted))))
}

/// BeginQuorumEpoch and EndQuorumEpoch responses have the same shape (a top-level error, then one
/// partition carrying an error and the leader id and epoch it knows) over two generated types: one
/// builder set for both.
macro_rules! quorum_epoch_response_codec {
    ($top:ident, $build:ident, $parse:ident, $response:ident, $module:ident) => {
        pub(crate) fn $top(error: ResponseError) -> $response {
            $response::default().with_error_code(error.code())
        }

        pub(crate) fn $build(info: LeaderInfo) -> $response {
            let partition = $module::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_error_code(code(info.error))
                .with_leader_id(leader_id_raw(info.leader_id))
                .with_leader_epoch(info.epoch.0);
            $response::default().with_topics(vec![
                $module::TopicData::default()
                    .with_topic_name(topic_name())
                    .with_partitions(vec![partition]),
            ])
        }

        pub(crate) fn $parse(r: &$response) -> Parsed<LeaderInfo> {
            let top = ResponseError::try_from_code(r.error_code);
            if top.is_some() {
                return Some((top, None));
            }
            let p = single(
                &r.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Some((
                None,
                Some(LeaderInfo {
                    error: ResponseError::try_from_code(p.error_code),
                    leader_id: node_or_none(p.leader_id.0),
                    epoch: LeaderEpoch(p.leader_epoch),
                }),
            ))
        }
    };
}

quorum_epoch_response_codec!(
    begin_quorum_epoch_response_top,
    begin_quorum_epoch_response,
    parse_begin_quorum_epoch_response,
    BeginQuorumEpochResponse,
    begin_quorum_epoch_response
);
quorum_epoch_response_codec!(
    end_quorum_epoch_response_top,
    end_quorum_epoch_response,
    parse_end_quorum_epoch_response,
    EndQuorumEpochResponse,
    end_quorum_epoch_response
);

/// What a Fetch response partition tells the fetcher.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FetchAnswer {
    pub info: LeaderInfo,
    pub high_watermark: Option<LogOffset>,
    pub diverging: Option<OffsetAndEpoch>,
    pub snapshot_id: Option<OffsetAndEpoch>,
    /// Set when exactly one of the snapshot id's fields is negative: a protocol error.
    pub malformed_snapshot_id: bool,
    pub records: Bytes,
}

pub(crate) fn fetch_response_top(error: ResponseError) -> FetchResponse {
    FetchResponse::default().with_error_code(error.code())
}

pub(crate) fn fetch_response(answer: &FetchAnswer) -> FetchResponse {
    let diverging = answer.diverging.unwrap_or(OffsetAndEpoch::new(-1, -1));
    let snapshot = answer.snapshot_id.unwrap_or(OffsetAndEpoch::new(-1, -1));
    let partition = fetch_response::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_error_code(code(answer.info.error))
        .with_high_watermark(answer.high_watermark.map_or(-1, |o| o.0))
        .with_diverging_epoch(
            fetch_response::EpochEndOffset::default()
                .with_epoch(diverging.epoch.0)
                .with_end_offset(diverging.offset.0),
        )
        .with_current_leader(
            fetch_response::LeaderIdAndEpoch::default()
                .with_leader_id(leader_id_raw(answer.info.leader_id))
                .with_leader_epoch(answer.info.epoch.0),
        )
        .with_snapshot_id(
            fetch_response::SnapshotId::default()
                .with_end_offset(snapshot.offset.0)
                .with_epoch(snapshot.epoch.0),
        )
        .with_records(Some(answer.records.clone()));
    FetchResponse::default().with_responses(vec![
        fetch_response::FetchableTopicResponse::default()
            .with_topic(topic_name())
            .with_topic_id(METADATA_TOPIC_ID)
            .with_partitions(vec![partition]),
    ])
}

pub(crate) fn parse_fetch_response(
    r: &FetchResponse,
) -> Option<(Option<ResponseError>, Option<FetchAnswer>)> {
    let top = ResponseError::try_from_code(r.error_code);
    if top.is_some() {
        return Some((top, None));
    }
    let p = single(
        &r.responses,
        |t| t.topic_id == METADATA_TOPIC_ID || is_metadata_topic(&t.topic),
        |t| &t.partitions,
        |p| p.partition_index,
    )?;
    let diverging = (p.diverging_epoch.epoch >= 0 && p.diverging_epoch.end_offset >= 0)
        .then(|| OffsetAndEpoch::new(p.diverging_epoch.end_offset, p.diverging_epoch.epoch));
    let (snap_offset, snap_epoch) = (p.snapshot_id.end_offset, p.snapshot_id.epoch);
    let snapshot_id =
        (snap_offset >= 0 && snap_epoch >= 0).then(|| OffsetAndEpoch::new(snap_offset, snap_epoch));
    Some((
        None,
        Some(FetchAnswer {
            info: LeaderInfo {
                error: ResponseError::try_from_code(p.error_code),
                leader_id: node_or_none(p.current_leader.leader_id.0),
                epoch: LeaderEpoch(p.current_leader.leader_epoch),
            },
            high_watermark: (p.high_watermark >= 0).then_some(LogOffset(p.high_watermark)),
            diverging,
            snapshot_id,
            malformed_snapshot_id: (snap_offset >= 0) != (snap_epoch >= 0),
            records: p.records.clone().unwrap_or_default(),
        }),
    ))
}

/// The answer to a DescribeQuorum naming anything but the metadata partition (Kafka's
/// `DescribeQuorumRequest.getPartitionLevelErrorResponse` with UNKNOWN_TOPIC_OR_PARTITION).
pub(crate) fn describe_quorum_unknown_partitions(
    request: &DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    use kafka_protocol::messages::describe_quorum_response::{PartitionData, TopicData};
    let error = ResponseError::UnknownTopicOrPartition;
    let message = StrBytes::from_static_str("This server does not host this topic-partition.");
    DescribeQuorumResponse::default().with_topics(
        request
            .topics
            .iter()
            .map(|t| {
                TopicData::default()
                    .with_topic_name(t.topic_name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(error.code())
                                    .with_error_message(Some(message.clone()))
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

pub(crate) fn describe_quorum_response_top(error: ResponseError) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default().with_error_code(error.code())
}

/// One row of DescribeQuorum's voter or observer list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaRow {
    pub replica_id: NodeId,
    pub log_end_offset: Option<LogOffset>,
    pub last_fetch_timestamp_ms: Option<i64>,
    pub last_caught_up_timestamp_ms: Option<i64>,
}

pub(crate) fn describe_quorum_response(
    info: LeaderInfo,
    high_watermark: Option<LogOffset>,
    voters: &[ReplicaRow],
    observers: &[ReplicaRow],
) -> DescribeQuorumResponse {
    let row = |r: &ReplicaRow| {
        describe_quorum_response::ReplicaState::default()
            .with_replica_id(BrokerId(r.replica_id.0))
            .with_log_end_offset(r.log_end_offset.map_or(-1, |o| o.0))
            .with_last_fetch_timestamp(r.last_fetch_timestamp_ms.unwrap_or(-1))
            .with_last_caught_up_timestamp(r.last_caught_up_timestamp_ms.unwrap_or(-1))
    };
    let mut partition = describe_quorum_response::PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_error_code(code(info.error))
        .with_leader_id(leader_id_raw(info.leader_id))
        .with_leader_epoch(info.epoch.0)
        .with_high_watermark(high_watermark.map_or(-1, |o| o.0))
        .with_current_voters(voters.iter().map(row).collect())
        .with_observers(observers.iter().map(row).collect());
    if let Some(e) = info.error {
        partition = partition.with_error_message(Some(str_bytes(&e.to_string())));
    }
    DescribeQuorumResponse::default().with_topics(vec![
        describe_quorum_response::TopicData::default()
            .with_topic_name(topic_name())
            .with_partitions(vec![partition]),
    ])
}

/// Rewrites a Fetch request the core built (newest layout: `ReplicaState`, topic id) for a peer
/// that negotiated an older `version` (12–14 carry `ReplicaId` at the top level; 12 names the
/// topic instead of its id).
pub fn adapt_fetch_request(request: &mut FetchRequest, version: i16) {
    if version < 15 {
        request.replica_id = request.replica_state.replica_id;
        request.replica_state = fetch_request::ReplicaState::default();
    }
    if version < 13 {
        for topic in &mut request.topics {
            topic.topic_id = Uuid::nil();
        }
    } else {
        for topic in &mut request.topics {
            topic.topic = TopicName::default();
        }
    }
}

/// Rewrites a Fetch response for a peer on an older `version` (see [`adapt_fetch_request`]).
pub fn adapt_fetch_response(response: &mut FetchResponse, version: i16) {
    for topic in &mut response.responses {
        if version < 13 {
            topic.topic_id = Uuid::nil();
        } else {
            topic.topic = TopicName::default();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// FetchSnapshot (KIP-630)
// ---------------------------------------------------------------------------------------------

/// The fields of a FetchSnapshotRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FetchSnapshotArgs {
    pub replica_id: i32,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    pub snapshot_id: OffsetAndEpoch,
    pub position: i64,
}

pub(crate) fn fetch_snapshot_args(request: &FetchSnapshotRequest) -> Option<FetchSnapshotArgs> {
    let p = single(
        &request.topics,
        |t| is_metadata_topic(&t.name),
        |t| &t.partitions,
        |p| p.partition,
    )?;
    Some(FetchSnapshotArgs {
        replica_id: request.replica_id.0,
        max_bytes: request.max_bytes,
        current_leader_epoch: p.current_leader_epoch,
        snapshot_id: OffsetAndEpoch::new(p.snapshot_id.end_offset, p.snapshot_id.epoch),
        position: p.position,
    })
}

pub(crate) fn fetch_snapshot_request(
    cluster_id: &str,
    replica_id: NodeId,
    epoch: LeaderEpoch,
    snapshot_id: OffsetAndEpoch,
    position: i64,
    max_bytes: usize,
) -> FetchSnapshotRequest {
    let partition = fetch_snapshot_request::PartitionSnapshot::default()
        .with_partition(METADATA_PARTITION)
        .with_current_leader_epoch(epoch.0)
        .with_snapshot_id(
            fetch_snapshot_request::SnapshotId::default()
                .with_end_offset(snapshot_id.offset.0)
                .with_epoch(snapshot_id.epoch.0),
        )
        .with_position(position);
    FetchSnapshotRequest::default()
        .with_cluster_id(Some(str_bytes(cluster_id)))
        .with_replica_id(BrokerId(replica_id.0))
        .with_max_bytes(i32::try_from(max_bytes).unwrap_or(i32::MAX))
        .with_topics(vec![
            fetch_snapshot_request::TopicSnapshot::default()
                .with_name(topic_name())
                .with_partitions(vec![partition]),
        ])
}

/// A slice of a snapshot file, as a FetchSnapshot response carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotSlice {
    pub info: LeaderInfo,
    pub snapshot_id: OffsetAndEpoch,
    pub size: i64,
    pub position: i64,
    pub bytes: Bytes,
}

pub(crate) fn fetch_snapshot_response_top(error: ResponseError) -> FetchSnapshotResponse {
    FetchSnapshotResponse::default().with_error_code(error.code())
}

pub(crate) fn fetch_snapshot_response(slice: &SnapshotSlice) -> FetchSnapshotResponse {
    let partition = fetch_snapshot_response::PartitionSnapshot::default()
        .with_index(METADATA_PARTITION)
        .with_error_code(code(slice.info.error))
        .with_snapshot_id(
            fetch_snapshot_response::SnapshotId::default()
                .with_end_offset(slice.snapshot_id.offset.0)
                .with_epoch(slice.snapshot_id.epoch.0),
        )
        .with_current_leader(
            fetch_snapshot_response::LeaderIdAndEpoch::default()
                .with_leader_id(leader_id_raw(slice.info.leader_id))
                .with_leader_epoch(slice.info.epoch.0),
        )
        .with_size(slice.size)
        .with_position(slice.position)
        .with_unaligned_records(slice.bytes.clone());
    FetchSnapshotResponse::default().with_topics(vec![
        fetch_snapshot_response::TopicSnapshot::default()
            .with_name(topic_name())
            .with_partitions(vec![partition]),
    ])
}

pub(crate) fn parse_fetch_snapshot_response(r: &FetchSnapshotResponse) -> Parsed<SnapshotSlice> {
    let top = ResponseError::try_from_code(r.error_code);
    if top.is_some() {
        return Some((top, None));
    }
    let p = single(
        &r.topics,
        |t| is_metadata_topic(&t.name),
        |t| &t.partitions,
        |p| p.index,
    )?;
    Some((
        None,
        Some(SnapshotSlice {
            info: LeaderInfo {
                error: ResponseError::try_from_code(p.error_code),
                leader_id: node_or_none(p.current_leader.leader_id.0),
                epoch: LeaderEpoch(p.current_leader.leader_epoch),
            },
            snapshot_id: OffsetAndEpoch::new(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            size: p.size,
            position: p.position,
            bytes: p.unaligned_records.clone(),
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn round_trip<T: Encodable + Decodable + PartialEq + std::fmt::Debug>(
        message: &T,
        version: i16,
    ) -> T {
        let mut buf = BytesMut::new();
        message
            .encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
        let mut bytes = buf.freeze();
        T::decode(&mut bytes, version).unwrap_or_else(|e| panic!("decode v{version}: {e}"))
    }

    /// Every message the core builds encodes at the versions Kafka 3.9 speaks, and reads back
    /// to what the core needs.
    #[test]
    fn built_messages_encode_at_kafka_versions() {
        let last = OffsetAndEpoch::new(42, 3);
        let vote = vote_request("c", NodeId(2), LeaderEpoch(4), NodeId(1), last);
        for v in 0..=1 {
            let mut want = vote_args(&vote).expect("valid");
            if v == 0 {
                want.voter_id = -1; // VoterId is v1+
            }
            assert_eq!(vote_args(&round_trip(&vote, v)), Some(want), "Vote v{v}");
        }
        let info = LeaderInfo {
            error: Some(ResponseError::FencedLeaderEpoch),
            leader_id: Some(NodeId(3)),
            epoch: LeaderEpoch(4),
        };
        for v in 0..=1 {
            let r = round_trip(&vote_response(info, true), v);
            assert_eq!(parse_vote_response(&r), Some((None, Some((info, true)))));
        }
        let begin = begin_quorum_epoch_request("c", NodeId(2), NodeId(1), LeaderEpoch(4));
        let end = end_quorum_epoch_request("c", NodeId(1), LeaderEpoch(4), &[NodeId(3), NodeId(2)]);
        for v in 0..=1 {
            assert_eq!(
                begin_quorum_epoch_args(&round_trip(&begin, v)),
                begin_quorum_epoch_args(&begin)
            );
            assert_eq!(
                end_quorum_epoch_args(&round_trip(&end, v)).map(|a| a.preferred),
                Some(vec![NodeId(3), NodeId(2)]),
                "EndQuorumEpoch v{v}"
            );
            assert_eq!(
                parse_begin_quorum_epoch_response(&round_trip(
                    &begin_quorum_epoch_response(info),
                    v
                )),
                Some((None, Some(info)))
            );
            assert_eq!(
                parse_end_quorum_epoch_response(&round_trip(&end_quorum_epoch_response(info), v)),
                Some((None, Some(info)))
            );
        }
        let fetch = fetch_request("c", NodeId(2), LeaderEpoch(4), last, 500, 1 << 20);
        for v in 12..=17 {
            let mut adapted = fetch.clone();
            adapt_fetch_request(&mut adapted, v);
            assert_eq!(
                fetch_args(&round_trip(&adapted, v)),
                fetch_args(&fetch),
                "Fetch v{v}"
            );
        }
        let answer = FetchAnswer {
            info: LeaderInfo {
                error: None,
                leader_id: Some(NodeId(1)),
                epoch: LeaderEpoch(4),
            },
            high_watermark: Some(LogOffset(40)),
            diverging: Some(OffsetAndEpoch::new(30, 2)),
            snapshot_id: None,
            malformed_snapshot_id: false,
            records: Bytes::from_static(b"raw"),
        };
        for v in 12..=17 {
            let mut adapted = fetch_response(&answer);
            adapt_fetch_response(&mut adapted, v);
            assert_eq!(
                parse_fetch_response(&round_trip(&adapted, v)),
                Some((None, Some(answer.clone()))),
                "Fetch response v{v}"
            );
        }
        let row = ReplicaRow {
            replica_id: NodeId(2),
            log_end_offset: Some(LogOffset(9)),
            last_fetch_timestamp_ms: Some(5),
            last_caught_up_timestamp_ms: None,
        };
        let describe = describe_quorum_response(info, Some(LogOffset(9)), &[row], &[]);
        for v in 0..=2 {
            let r = round_trip(&describe, v);
            assert_eq!(
                r.topics[0].partitions[0].current_voters[0].log_end_offset, 9,
                "DescribeQuorum v{v}"
            );
        }
    }

    #[test]
    fn fetch_snapshot_messages_encode_at_kafka_versions() {
        let request = fetch_snapshot_request(
            "c",
            NodeId(2),
            LeaderEpoch(4),
            OffsetAndEpoch::new(100, 3),
            7,
            1 << 20,
        );
        let slice = SnapshotSlice {
            info: LeaderInfo {
                error: None,
                leader_id: Some(NodeId(1)),
                epoch: LeaderEpoch(4),
            },
            snapshot_id: OffsetAndEpoch::new(100, 3),
            size: 10,
            position: 7,
            bytes: Bytes::from_static(b"abc"),
        };
        for v in 0..=1 {
            assert_eq!(
                fetch_snapshot_args(&round_trip(&request, v)),
                fetch_snapshot_args(&request),
                "v{v}"
            );
            let r = round_trip(&fetch_snapshot_response(&slice), v);
            assert_eq!(
                parse_fetch_snapshot_response(&r),
                Some((None, Some(slice.clone()))),
                "v{v}"
            );
        }
    }

    /// Requests of the wrong shape are recognised (answered with INVALID_REQUEST by the core).
    #[test]
    fn requests_must_name_exactly_the_metadata_partition() {
        let mut vote = vote_request(
            "c",
            NodeId(2),
            LeaderEpoch(4),
            NodeId(1),
            OffsetAndEpoch::new(0, 0),
        );
        vote.topics[0].partitions[0].partition_index = 1;
        assert_eq!(vote_args(&vote), None);
        let mut two = vote_request(
            "c",
            NodeId(2),
            LeaderEpoch(4),
            NodeId(1),
            OffsetAndEpoch::new(0, 0),
        );
        let extra = two.topics[0].clone();
        two.topics.push(extra);
        assert_eq!(vote_args(&two), None);
        let mut fetch = fetch_request(
            "c",
            NodeId(2),
            LeaderEpoch(4),
            OffsetAndEpoch::new(0, 0),
            0,
            1,
        );
        fetch.topics[0].topic_id = Uuid::from_u128(7);
        fetch.topics[0].topic = TopicName(StrBytes::from_static_str("other"));
        assert_eq!(fetch_args(&fetch), None);
        assert!(cluster_id_matches(None, "c"));
        assert!(!cluster_id_matches(
            Some(&StrBytes::from_static_str("d")),
            "c"
        ));
    }
}
