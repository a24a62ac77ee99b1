//! [`ControllerError`]: every way a request to the controller can be refused, and the one
//! function ([`ControllerError::response_error`]) that maps each to its Kafka error code.
//! Messages are Kafka 3.9's, so a Kafka operator (and Kafka's own admin tools) see the same text.

use kafka_protocol::error::ResponseError;
use thiserror::Error;
use uuid::Uuid;

// Codes `kafka-protocol` 0.15.1 predates, from the one table.
use krust_net::error_codes::{INELIGIBLE_REPLICA, INVALID_REGISTRATION, NEW_LEADER_ELECTED};

/// Why the controller refused a request. Each variant's doc gives cause and remedy; the code a
/// client sees comes from [`ControllerError::response_error`] only.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ControllerError {
    /// Replication factor ≤ 0. Remedy: ask for at least one replica.
    #[error(
        "Invalid replication factor {replication_factor}: the replication factor must be positive."
    )]
    NonPositiveReplicationFactor {
        /// The replication factor asked for.
        replication_factor: i32,
    },
    /// More replicas than registered (usable) brokers. Remedy: lower the replication factor or
    /// register more brokers.
    #[error(
        "The target replication factor of {replication_factor} cannot be reached because only {registered} broker(s) are registered."
    )]
    TooFewBrokers {
        /// The replication factor asked for.
        replication_factor: i32,
        /// Usable brokers (fenced and unfenced, not shutting down).
        registered: usize,
    },
    /// No unfenced broker could lead a partition. Remedy: wait for brokers to catch up.
    #[error("All brokers are currently fenced.")]
    AllBrokersFenced,
    /// The caller's `controller_mutation_rate` quota is used up (KIP-599, strict mode).
    /// Remedy: retry after the response's `throttle_time_ms`.
    #[error("The throttling quota has been exceeded.")]
    ThrottlingQuotaExceeded,
    /// The request names another cluster. Remedy: the node was formatted for another cluster.
    #[error("Expected cluster ID {expected}, but got cluster ID {got}")]
    InconsistentClusterId {
        /// This cluster's id.
        expected: String,
        /// The id in the request.
        got: String,
    },
    /// A live broker (valid session) holds this id with another incarnation. Remedy: two
    /// processes share a `node.id`; stop one, or wait `broker.session.timeout.ms`.
    #[error("Another broker is registered with that broker id.")]
    DuplicateBrokerRegistration {
        /// The contested broker id.
        broker_id: i32,
        /// The incarnation holding the id.
        registered_incarnation_id: Uuid,
    },
    /// The broker cannot run at a finalized feature level. Remedy: upgrade the broker (or
    /// downgrade the feature).
    #[error(
        "Unable to register because the broker does not support finalized version {finalized} of {feature}. The broker wants a version between {min} and {max}, inclusive."
    )]
    UnsupportedFinalizedFeature {
        /// Feature name.
        feature: String,
        /// The cluster's finalized level.
        finalized: i16,
        /// The broker's lowest supported level.
        min: i16,
        /// The broker's highest supported level.
        max: i16,
    },
    /// While dual-writing, ZooKeeper lags more records behind the metadata log than allowed
    /// (`zookeeper.metadata.migration.write.behind.max.records`, a krust addition). Remedy: the
    /// write goes through once ZooKeeper catches up (check ZooKeeper's health; the controller's
    /// `ZkWriteBehindLag` metric shows the lag).
    #[error(
        "ZooKeeper is {lag} metadata records behind the metadata log (the limit is {max}): admin writes wait until the migration's dual-write catches up."
    )]
    ZkWriteBehind {
        /// Records committed but not yet in ZooKeeper.
        lag: i64,
        /// The bound.
        max: u64,
    },
    /// Records of the ZooKeeper migration's copy that do not fit the metadata image (bad
    /// ZooKeeper data). Remedy: fix the znode the reason names; the copy is redone.
    #[error("Invalid ZooKeeper migration records: {reason}")]
    InvalidMigrationRecords {
        /// What did not fit.
        reason: String,
    },
    /// The registration is malformed in a way Kafka reports as `INVALID_REGISTRATION` (log
    /// directories, listeners). Remedy: fix the broker's configuration.
    #[error("{reason}")]
    InvalidRegistration {
        /// Kafka's message.
        reason: String,
    },
    /// A broker id without a registration (or one that cannot register now, e.g. during a
    /// ZooKeeper migration). Remedy: register first.
    #[error("{reason}")]
    BrokerIdNotRegistered {
        /// Kafka's message.
        reason: String,
    },
    /// The broker epoch in the request is not the broker's current one. Remedy: the broker
    /// re-registers and uses the new epoch.
    #[error("Expected broker epoch {expected}, but got broker epoch {got}")]
    StaleBrokerEpoch {
        /// The broker id.
        broker_id: i32,
        /// The epoch the controller has.
        expected: i64,
        /// The epoch in the request.
        got: i64,
    },
    /// A request from a broker id that never registered. Remedy: register first.
    #[error("No broker registration found for broker id {broker_id}")]
    UnknownBrokerEpoch {
        /// The broker id.
        broker_id: i32,
    },
    /// An UpdateFeatures change the controller refuses (`INVALID_UPDATE_VERSION`).
    #[error("Invalid update version {level} for feature {feature}. {reason}")]
    InvalidUpdateVersion {
        /// Feature name.
        feature: String,
        /// The level asked for.
        level: i16,
        /// Kafka's reason.
        reason: String,
    },
    /// A metadata.version change the controller refuses (`INVALID_UPDATE_VERSION`).
    #[error("Invalid metadata.version {level}. {reason}")]
    InvalidMetadataVersion {
        /// The level asked for.
        level: i16,
        /// Kafka's reason.
        reason: String,
    },
    /// ControllerRegistration before metadata.version 3.7-IV0. Remedy: upgrade the
    /// metadata.version (the controller retries on its own).
    #[error("The current MetadataVersion is too old to support controller registrations.")]
    ControllerRegistrationNotSupported,
    /// Every producer id has been handed out. Remedy: none; the id space is 2^63.
    #[error(
        "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit"
    )]
    ProducerIdsExhausted,
    /// This node is not the active controller (or lost leadership before the records of the
    /// request were committed). Remedy: the client finds the active controller and retries.
    #[error("This is not the correct controller for this cluster.")]
    NotController,
    /// A malformed request (`INVALID_REQUEST`). Remedy: fix the request.
    #[error("{reason}")]
    InvalidRequest {
        /// Kafka's message.
        reason: String,
    },
    /// An illegal topic name, or one colliding with an existing topic. Remedy: pick another.
    #[error("{reason}")]
    InvalidTopicName {
        /// Kafka's message.
        reason: String,
    },
    /// The topic exists already. Remedy: none, or delete it first.
    #[error("Topic '{name}' already exists.")]
    TopicAlreadyExists {
        /// The topic name.
        name: String,
    },
    /// A bad partition count (`INVALID_PARTITIONS`). Remedy: ask for a sane positive count.
    #[error("{reason}")]
    InvalidPartitions {
        /// Kafka's message.
        reason: String,
    },
    /// A bad replication factor given directly (`INVALID_REPLICATION_FACTOR`).
    #[error("{reason}")]
    InvalidReplicationFactor {
        /// Kafka's message.
        reason: String,
    },
    /// A bad manual replica assignment (`INVALID_REPLICA_ASSIGNMENT`).
    #[error("{reason}")]
    InvalidReplicaAssignment {
        /// Kafka's message.
        reason: String,
    },
    /// A reassignment cancelled where none runs (`NO_REASSIGNMENT_IN_PROGRESS`).
    #[error("No partition reassignment is in progress.")]
    NoReassignmentInProgress,
    /// A bad topic config (`INVALID_CONFIG`).
    #[error("{reason}")]
    InvalidConfig {
        /// Kafka's message.
        reason: String,
    },
    /// No topic (or partition) of that name. Remedy: create it first.
    #[error("{reason}")]
    UnknownTopicOrPartition {
        /// Kafka's message.
        reason: String,
    },
    /// No topic with that id.
    #[error("No such topic id {topic_id}")]
    UnknownTopicId {
        /// The topic id asked for.
        topic_id: Uuid,
    },
    /// AlterPartition from a leader with an old leader epoch. Remedy: the broker waits for
    /// the newer partition state.
    #[error("The leader epoch {got} is older than the current leader epoch {current}.")]
    FencedLeaderEpoch {
        /// The leader epoch the controller has.
        current: i32,
        /// The leader epoch in the request.
        got: i32,
    },
    /// AlterPartition with an old partition epoch (`INVALID_UPDATE_VERSION`). Remedy: the
    /// broker retries from the newer partition state.
    #[error("The partition epoch {got} is older than the current partition epoch {current}.")]
    StalePartitionEpoch {
        /// The partition epoch the controller has.
        current: i32,
        /// The partition epoch in the request.
        got: i32,
    },
    /// ElectLeaders (preferred): the preferred replica cannot lead now.
    #[error("Failed to elect leader for partition: the preferred replica is not available.")]
    PreferredLeaderNotAvailable,
    /// ElectLeaders (unclean): no replica can lead now.
    #[error("Failed to elect leader for partition: no eligible replica is available.")]
    EligibleLeadersNotAvailable,
    /// AlterPartition whose change moved leadership away from the requester (it is fenced or
    /// shutting down). `NEW_LEADER_ELECTED`, 108. Remedy: the broker waits for the new state.
    #[error("A new leader {leader} was elected for the partition.")]
    NewLeaderElected {
        /// The new leader (-1 for none).
        leader: i32,
    },
    /// AssignReplicasToDirs below metadata.version 3.7-IV2 (`UNSUPPORTED_VERSION`). Remedy:
    /// upgrade the metadata.version; until then brokers do not send it.
    #[error("Directory assignment is not supported yet.")]
    DirectoryAssignmentNotSupported,
    /// AssignReplicasToDirs for a partition the broker is not a replica of
    /// (`NOT_LEADER_OR_FOLLOWER`). Remedy: none; the broker learns its replicas from the
    /// metadata.
    #[error(
        "AssignReplicasToDirsRequest from broker {broker_id} references non assigned partition {topic}-{partition}"
    )]
    NotAssignedReplica {
        /// The requesting broker.
        broker_id: i32,
        /// The topic name.
        topic: String,
        /// The partition index.
        partition: i32,
    },
    /// AlterPartition naming a replica that may not join the ISR (not registered, fenced, in
    /// controlled shutdown, or with another broker epoch). `INELIGIBLE_REPLICA`, 107.
    #[error("Ineligible replicas in the new ISR: {replicas:?}")]
    IneligibleReplica {
        /// The replicas refused.
        replicas: Vec<i32>,
    },
}

impl ControllerError {
    /// The Kafka error code for this refusal (the only place codes are chosen).
    #[must_use]
    pub fn response_error(&self) -> ResponseError {
        match self {
            Self::NonPositiveReplicationFactor { .. }
            | Self::TooFewBrokers { .. }
            | Self::AllBrokersFenced => ResponseError::InvalidReplicationFactor,
            Self::InconsistentClusterId { .. } => ResponseError::InconsistentClusterId,
            Self::ThrottlingQuotaExceeded => {
                ResponseError::Unknown(krust_net::error_codes::THROTTLING_QUOTA_EXCEEDED)
            }
            Self::DuplicateBrokerRegistration { .. } => ResponseError::DuplicateBrokerRegistration,
            Self::UnsupportedFinalizedFeature { .. }
            | Self::ControllerRegistrationNotSupported
            | Self::DirectoryAssignmentNotSupported => ResponseError::UnsupportedVersion,
            Self::NotAssignedReplica { .. } => ResponseError::NotLeaderOrFollower,
            Self::InvalidRegistration { .. } => ResponseError::Unknown(INVALID_REGISTRATION),
            Self::InvalidMigrationRecords { .. } => ResponseError::UnknownServerError,
            Self::ZkWriteBehind { .. } => ResponseError::RequestTimedOut,
            Self::BrokerIdNotRegistered { .. } => ResponseError::BrokerIdNotRegistered,
            Self::StaleBrokerEpoch { .. } | Self::UnknownBrokerEpoch { .. } => {
                ResponseError::StaleBrokerEpoch
            }
            Self::InvalidUpdateVersion { .. } | Self::InvalidMetadataVersion { .. } => {
                ResponseError::InvalidUpdateVersion
            }
            Self::ProducerIdsExhausted => ResponseError::UnknownServerError,
            Self::NotController => ResponseError::NotController,
            Self::InvalidRequest { .. } => ResponseError::InvalidRequest,
            Self::InvalidTopicName { .. } => ResponseError::InvalidTopicException,
            Self::TopicAlreadyExists { .. } => ResponseError::TopicAlreadyExists,
            Self::InvalidPartitions { .. } => ResponseError::InvalidPartitions,
            Self::InvalidReplicationFactor { .. } => ResponseError::InvalidReplicationFactor,
            Self::InvalidReplicaAssignment { .. } => ResponseError::InvalidReplicaAssignment,
            Self::InvalidConfig { .. } => ResponseError::InvalidConfig,
            Self::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
            Self::UnknownTopicOrPartition { .. } => ResponseError::UnknownTopicOrPartition,
            Self::UnknownTopicId { .. } => ResponseError::UnknownTopicId,
            Self::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            Self::StalePartitionEpoch { .. } => ResponseError::InvalidUpdateVersion,
            Self::PreferredLeaderNotAvailable => ResponseError::PreferredLeaderNotAvailable,
            Self::EligibleLeadersNotAvailable => ResponseError::EligibleLeadersNotAvailable,
            Self::NewLeaderElected { .. } => ResponseError::Unknown(NEW_LEADER_ELECTED),
            Self::IneligibleReplica { .. } => ResponseError::Unknown(INELIGIBLE_REPLICA),
        }
    }

    /// The numeric Kafka error code.
    #[must_use]
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }

    /// The message a per-item result carries (Kafka's `ApiError.fromThrowable`): none when it
    /// is the error's default text (THROTTLING_QUOTA_EXCEEDED's), else the error's text.
    #[must_use]
    pub fn item_message(&self) -> Option<String> {
        match self {
            Self::ThrottlingQuotaExceeded => None,
            other => Some(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_maps_to_kafkas_code() {
        let cases = [
            (
                ControllerError::AllBrokersFenced,
                38,
                "no unfenced broker: INVALID_REPLICATION_FACTOR",
            ),
            (
                ControllerError::InconsistentClusterId {
                    expected: "a".into(),
                    got: "b".into(),
                },
                104,
                "INCONSISTENT_CLUSTER_ID",
            ),
            (
                ControllerError::InvalidRegistration { reason: "x".into() },
                119,
                "INVALID_REGISTRATION is 119 in Kafka 3.9",
            ),
            (
                ControllerError::UnknownBrokerEpoch { broker_id: 1 },
                77,
                "no registration: STALE_BROKER_EPOCH",
            ),
            (
                ControllerError::ProducerIdsExhausted,
                -1,
                "UNKNOWN_SERVER_ERROR",
            ),
        ];
        for (error, code, why) in cases {
            assert_eq!(error.code(), code, "{why}: {error}");
        }
    }
}

/// Why a controller cannot become active on this log (Kafka's `ActivationRecordsGenerator`
/// throws, and the fatal fault handler stops the process). The message is Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct ActivationError(pub String);
