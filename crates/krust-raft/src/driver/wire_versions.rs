//! Version fitting for the Raft RPCs the driver moves.
//!
//! The core builds messages in their newest layout. `kafka-protocol` refuses to encode a field
//! with a non-default value at a version that lacks it, so before a message goes out at an
//! older version (a peer that negotiated it, a client that asked with it) the fields that
//! version does not carry are reset here. Which fields exist where: facts §1.1–§1.3.

use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeQuorumResponse, FetchResponse, RequestKind, ResponseKind,
};
use uuid::Uuid;

use crate::core::{RaftRequest, RaftResponse, adapt_fetch_request, adapt_fetch_response};
use crate::types::NodeId;

/// The versions of each Raft RPC this replica speaks, as Kafka 3.9 serves them on a controller.
pub const VOTE_VERSIONS: (i16, i16) = (0, 1);
/// BeginQuorumEpoch.
pub const BEGIN_QUORUM_EPOCH_VERSIONS: (i16, i16) = (0, 1);
/// EndQuorumEpoch.
pub const END_QUORUM_EPOCH_VERSIONS: (i16, i16) = (0, 1);
/// Fetch (all of Kafka 3.9's; Raft peers use 12+, where the Raft fields exist).
pub const FETCH_VERSIONS: (i16, i16) = (0, 17);
/// Fetch versions a Raft replica sends (LastFetchedEpoch, DivergingEpoch, … exist from 12).
pub const RAFT_FETCH_SEND_VERSIONS: (i16, i16) = (12, 17);
/// DescribeQuorum.
pub const DESCRIBE_QUORUM_VERSIONS: (i16, i16) = (0, 2);
/// FetchSnapshot.
pub const FETCH_SNAPSHOT_VERSIONS: (i16, i16) = (0, 1);

/// The API key and the versions this replica sends a request with.
#[must_use]
pub fn request_api(request: &RaftRequest) -> (ApiKey, (i16, i16)) {
    match request {
        RaftRequest::Vote(_) => (ApiKey::Vote, VOTE_VERSIONS),
        RaftRequest::BeginQuorumEpoch(_) => (ApiKey::BeginQuorumEpoch, BEGIN_QUORUM_EPOCH_VERSIONS),
        RaftRequest::EndQuorumEpoch(_) => (ApiKey::EndQuorumEpoch, END_QUORUM_EPOCH_VERSIONS),
        RaftRequest::Fetch(_) => (ApiKey::Fetch, RAFT_FETCH_SEND_VERSIONS),
        RaftRequest::DescribeQuorum(_) => (ApiKey::DescribeQuorum, DESCRIBE_QUORUM_VERSIONS),
        RaftRequest::FetchSnapshot(_) => (ApiKey::FetchSnapshot, FETCH_SNAPSHOT_VERSIONS),
    }
}

/// Resets the fields `version` does not have in an outgoing request.
pub fn fit_request(request: &mut RaftRequest, version: i16) {
    match request {
        RaftRequest::Vote(r) if version < 1 => {
            r.voter_id = BrokerId(-1);
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    p.candidate_directory_id = Uuid::nil();
                    p.voter_directory_id = Uuid::nil();
                }
            }
        }
        RaftRequest::BeginQuorumEpoch(r) if version < 1 => {
            r.voter_id = BrokerId(-1);
            r.leader_endpoints.clear();
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    p.voter_directory_id = Uuid::nil();
                }
            }
        }
        RaftRequest::EndQuorumEpoch(r) => {
            if version < 1 {
                r.leader_endpoints.clear();
            }
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    if version < 1 {
                        p.preferred_candidates.clear();
                    } else {
                        p.preferred_successors.clear();
                    }
                }
            }
        }
        RaftRequest::Fetch(r) => adapt_fetch_request(r, version),
        _ => {}
    }
}

/// Resets the fields `version` does not have in a response about to be sent.
pub fn fit_response(response: &mut RaftResponse, version: i16) {
    match response {
        RaftResponse::Fetch(r) => fit_fetch_response(r, version),
        RaftResponse::DescribeQuorum(r) => fit_describe_quorum_response(r, version),
        RaftResponse::Vote(r) if version < 1 => r.node_endpoints.clear(),
        RaftResponse::BeginQuorumEpoch(r) if version < 1 => r.node_endpoints.clear(),
        RaftResponse::EndQuorumEpoch(r) if version < 1 => r.node_endpoints.clear(),
        RaftResponse::FetchSnapshot(r) if version < 1 => r.node_endpoints.clear(),
        _ => {}
    }
}

fn fit_fetch_response(r: &mut FetchResponse, version: i16) {
    adapt_fetch_response(r, version);
    if version < 16 {
        r.node_endpoints.clear();
    }
    if version < 12 {
        // Diverging epoch, current leader and snapshot id are Raft fields (v12+).
        for t in &mut r.responses {
            for p in &mut t.partitions {
                p.diverging_epoch = Default::default();
                p.current_leader = Default::default();
                p.snapshot_id = Default::default();
            }
        }
    }
}

fn fit_describe_quorum_response(r: &mut DescribeQuorumResponse, version: i16) {
    if version < 2 {
        r.error_message = None;
        r.nodes.clear();
    }
    for t in &mut r.topics {
        for p in &mut t.partitions {
            if version < 2 {
                p.error_message = None;
            }
            for replica in p.current_voters.iter_mut().chain(p.observers.iter_mut()) {
                if version < 2 {
                    replica.replica_directory_id = Uuid::nil();
                }
                if version < 1 {
                    replica.last_fetch_timestamp = -1;
                    replica.last_caught_up_timestamp = -1;
                }
            }
        }
    }
}

/// A decoded Kafka request, split into the Raft RPCs the replica answers and the rest.
#[derive(Debug)]
pub enum RoutedRequest {
    /// Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot or DescribeQuorum.
    Raft(RaftRequest),
    /// Anything else, unchanged (the listener answers it itself).
    Other(RequestKind),
}

/// Routes a decoded Kafka request: a Raft RPC for the replica, or the request back.
#[must_use]
pub fn raft_request(request: RequestKind) -> RoutedRequest {
    RoutedRequest::Raft(match request {
        RequestKind::Vote(r) => RaftRequest::Vote(r),
        RequestKind::BeginQuorumEpoch(r) => RaftRequest::BeginQuorumEpoch(r),
        RequestKind::EndQuorumEpoch(r) => RaftRequest::EndQuorumEpoch(r),
        RequestKind::Fetch(r) => RaftRequest::Fetch(r),
        RequestKind::FetchSnapshot(r) => RaftRequest::FetchSnapshot(r),
        RequestKind::DescribeQuorum(r) => RaftRequest::DescribeQuorum(r),
        other => return RoutedRequest::Other(other),
    })
}

/// The replica a Raft request names as its sender (candidate, leader or fetcher); -1 if none.
#[must_use]
pub fn sender_of(request: &RaftRequest) -> NodeId {
    let id = match request {
        RaftRequest::Vote(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.candidate_id.0),
        RaftRequest::BeginQuorumEpoch(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.leader_id.0),
        RaftRequest::EndQuorumEpoch(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.leader_id.0),
        RaftRequest::Fetch(r) => Some(if r.replica_state.replica_id.0 >= 0 {
            r.replica_state.replica_id.0
        } else {
            r.replica_id.0
        }),
        RaftRequest::FetchSnapshot(r) => Some(r.replica_id.0),
        RaftRequest::DescribeQuorum(_) => None,
    };
    NodeId(id.unwrap_or(-1))
}

/// A Raft response as the Kafka response the listener sends.
#[must_use]
pub fn response_kind(response: RaftResponse) -> ResponseKind {
    match response {
        RaftResponse::Vote(r) => ResponseKind::Vote(r),
        RaftResponse::BeginQuorumEpoch(r) => ResponseKind::BeginQuorumEpoch(r),
        RaftResponse::EndQuorumEpoch(r) => ResponseKind::EndQuorumEpoch(r),
        RaftResponse::Fetch(r) => ResponseKind::Fetch(r),
        RaftResponse::DescribeQuorum(r) => ResponseKind::DescribeQuorum(r),
        RaftResponse::FetchSnapshot(r) => ResponseKind::FetchSnapshot(r),
    }
}
