//! Why the coordinator refused a group request, and the one mapping to Kafka error codes.

use kafka_protocol::error::ResponseError;

/// A refusal by the classic group coordinator. Handlers build these; only
/// [`GroupError::response_error`] turns them into Kafka codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// Empty group id. The client must name a group.
    #[error("invalid group id")]
    InvalidGroupId,
    /// Session timeout outside `group.min/max.session.timeout.ms`.
    #[error("session timeout {0} ms outside the broker's bounds")]
    InvalidSessionTimeout(i32),
    /// KIP-394: the first JoinGroup (v4+) gets a member id and must join again with it.
    #[error("member id required")]
    MemberIdRequired,
    /// The member (or group) is not known: the client rejoins with an empty member id.
    #[error("unknown member id")]
    UnknownMemberId,
    /// Another member now owns this `group.instance.id` (KIP-345).
    #[error("group instance id is owned by another member")]
    FencedInstanceId,
    /// The request's generation is not the group's.
    #[error("illegal generation")]
    IllegalGeneration,
    /// The group is rebalancing: the member must rejoin.
    #[error("rebalance in progress")]
    RebalanceInProgress,
    /// Protocol type or protocols do not match the group's.
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    /// The group already has `group.max.size` members.
    #[error("group max size reached")]
    GroupMaxSizeReached,
    /// Commit metadata longer than `offset.metadata.max.bytes`.
    #[error("offset metadata too large")]
    OffsetMetadataTooLarge,
    /// The group is unknown (OffsetDelete, DeleteGroups).
    #[error("group id not found")]
    GroupIdNotFound,
    /// The group still has members (DeleteGroups, OffsetDelete of a non-consumer group).
    #[error("group is not empty")]
    NonEmptyGroup,
    /// OffsetDelete of a topic the consumer group is subscribed to.
    #[error("group is subscribed to the topic")]
    GroupSubscribedToTopic,
    /// The shard lost its partition (a failed append): the client finds the new coordinator.
    #[error("not the coordinator")]
    NotCoordinator,
    /// A string that would be stored in a `__consumer_offsets` record is longer than its
    /// int16 length prefix allows (flexible request versions can carry longer ones).
    #[error("{field} is longer than 32767 bytes")]
    InvalidRequest {
        /// Which field.
        field: &'static str,
    },
    /// The group is being removed.
    #[error("coordinator not available")]
    CoordinatorNotAvailable,
    /// The shard of the group is still loading its `__consumer_offsets` partition: the
    /// client retries.
    #[error("coordinator load in progress")]
    CoordinatorLoadInProgress,
    /// Writing the group's records failed in a way Kafka reports as an internal error
    /// (record too large for the offsets topic).
    #[error("unknown server error")]
    UnknownServerError,
    /// OffsetFetch `require_stable`: the partition's offsets wait for a transaction marker.
    #[error("unstable offset commit")]
    UnstableOffsetCommit,
    /// Writing the group's records failed with this Kafka error code, passed on as Kafka
    /// passes on errors it does not map.
    #[error("append failed with error code {0}")]
    AppendFailed(i16),
}

impl GroupError {
    /// The Kafka error this refusal is answered with.
    #[must_use]
    pub fn response_error(&self) -> ResponseError {
        match self {
            GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
            GroupError::InvalidSessionTimeout(_) => ResponseError::InvalidSessionTimeout,
            GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
            GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
            GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
            GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
            GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
            GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
            GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
            GroupError::OffsetMetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
            GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
            GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
            GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
            GroupError::NotCoordinator => ResponseError::NotCoordinator,
            GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
            GroupError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
            GroupError::UnknownServerError => ResponseError::UnknownServerError,
            GroupError::UnstableOffsetCommit => ResponseError::UnstableOffsetCommit,
            GroupError::AppendFailed(code) => {
                ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError)
            }
            GroupError::InvalidRequest { .. } => ResponseError::InvalidRequest,
        }
    }

    /// The wire code.
    #[must_use]
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }
}
