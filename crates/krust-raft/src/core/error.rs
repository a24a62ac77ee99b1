//! Why the core refused a request, and the one place that maps refusals to Kafka error codes.

use kafka_protocol::error::ResponseError;

use crate::core::wire::INVALID_VOTER_KEY;
use crate::types::{LeaderEpoch, NodeId};

/// A request the core answers with an error instead of acting on it (Kafka 3.9 §1.3, §1.7, §1.9).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The request carries another cluster's id: the sender belongs to a different cluster
    /// (or was formatted with another `cluster.id`). Fix the sender's `meta.properties`.
    #[error("request is for cluster {found:?}, this is {expected:?}")]
    InconsistentClusterId {
        /// Cluster id in the request.
        found: String,
        /// Ours.
        expected: String,
    },
    /// Raft RPCs name exactly one topic (`__cluster_metadata`) with exactly partition 0.
    #[error("request does not name exactly the partition __cluster_metadata-0")]
    NotMetadataPartition,
    /// A field holds a value no correct sender produces.
    #[error("{field} = {value} is invalid")]
    InvalidField {
        /// Kafka's field name.
        field: &'static str,
        /// The value received.
        value: i64,
    },
    /// The sender is behind: its epoch is older than ours. It will learn the new epoch from the response.
    #[error("request epoch {request} is older than our epoch {current}")]
    FencedLeaderEpoch {
        /// Epoch in the request.
        request: LeaderEpoch,
        /// Ours.
        current: LeaderEpoch,
    },
    /// We are behind: the sender's epoch is newer than ours; it retries until we catch up.
    #[error("request epoch {request} is newer than our epoch {current}")]
    UnknownLeaderEpoch {
        /// Epoch in the request.
        request: LeaderEpoch,
        /// Ours.
        current: LeaderEpoch,
    },
    /// Only the leader serves this request; the response names the leader if we know it.
    #[error("not the leader (leader is {leader:?})")]
    NotLeader {
        /// The leader we know of.
        leader: Option<NodeId>,
    },
    /// Another node claims to lead the epoch we lead: a faulty or forged peer.
    #[error("node {claimant} claims our own epoch {epoch}")]
    ConflictingLeader {
        /// The epoch.
        epoch: LeaderEpoch,
        /// Who claims it.
        claimant: NodeId,
    },
    /// FetchSnapshot for a snapshot we do not have (or the bootstrap snapshot, never served).
    #[error("no snapshot {snapshot_id}")]
    SnapshotNotFound {
        /// The id asked for.
        snapshot_id: crate::types::OffsetAndEpoch,
    },
    /// FetchSnapshot position outside the file.
    #[error("position {position} is outside the snapshot (size {size:?})")]
    PositionOutOfRange {
        /// Position asked for.
        position: i64,
        /// File size, when known.
        size: Option<i64>,
    },
    /// The request was meant for another voter (its `VoterId` is not ours).
    #[error("request is addressed to voter {voter_id}, this is node {me}")]
    InvalidVoterKey {
        /// `VoterId` in the request.
        voter_id: i32,
        /// Our id.
        me: NodeId,
    },
}

impl RequestError {
    /// The Kafka error code sent back for this refusal.
    #[must_use]
    pub fn response_error(&self) -> ResponseError {
        match self {
            Self::InconsistentClusterId { .. } => ResponseError::InconsistentClusterId,
            Self::NotMetadataPartition
            | Self::InvalidField { .. }
            | Self::ConflictingLeader { .. } => ResponseError::InvalidRequest,
            Self::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            Self::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
            Self::NotLeader { .. } => ResponseError::NotLeaderOrFollower,
            Self::InvalidVoterKey { .. } => INVALID_VOTER_KEY,
            Self::SnapshotNotFound { .. } => ResponseError::SnapshotNotFound,
            Self::PositionOutOfRange { .. } => ResponseError::PositionOutOfRange,
        }
    }

    /// Whether Kafka reports this in the response's top-level error code (otherwise it goes in
    /// the partition, next to the current leader and epoch).
    #[must_use]
    pub fn is_top_level(&self) -> bool {
        matches!(
            self,
            Self::InconsistentClusterId { .. } | Self::NotMetadataPartition
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_kafka_codes() {
        let e = LeaderEpoch(1);
        let cases = [
            (
                RequestError::InconsistentClusterId {
                    found: "a".into(),
                    expected: "b".into(),
                },
                104,
                true,
            ),
            (RequestError::NotMetadataPartition, 42, true),
            (
                RequestError::InvalidField {
                    field: "FetchOffset",
                    value: -1,
                },
                42,
                false,
            ),
            (
                RequestError::FencedLeaderEpoch {
                    request: e,
                    current: e,
                },
                74,
                false,
            ),
            (
                RequestError::UnknownLeaderEpoch {
                    request: e,
                    current: e,
                },
                75,
                false,
            ),
            (RequestError::NotLeader { leader: None }, 6, false),
            (
                RequestError::ConflictingLeader {
                    epoch: e,
                    claimant: NodeId(2),
                },
                42,
                false,
            ),
            (
                RequestError::InvalidVoterKey {
                    voter_id: 3,
                    me: NodeId(1),
                },
                125,
                false,
            ),
        ];
        for (error, code, top) in cases {
            assert_eq!(
                (error.response_error().code(), error.is_top_level()),
                (code, top),
                "{error}"
            );
        }
    }
}
