//! [`ControllerError`]: every way a request to the controller can be refused, and the one
//! function ([`ControllerError::response_error`]) that maps each to its Kafka error code.
//! Messages are Kafka 3.9's, so a Kafka operator (and Kafka's own admin tools) see the same text.

use kafka_protocol::error::ResponseError;
use thiserror::Error;
use uuid::Uuid;

/// `INVALID_REGISTRATION` (Kafka 3.9 `Errors`, code 119). `kafka-protocol` 0.15.1 predates it.
pub const INVALID_REGISTRATION_CODE: i16 = 119;

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
            Self::DuplicateBrokerRegistration { .. } => ResponseError::DuplicateBrokerRegistration,
            Self::UnsupportedFinalizedFeature { .. } | Self::ControllerRegistrationNotSupported => {
                ResponseError::UnsupportedVersion
            }
            Self::InvalidRegistration { .. } => ResponseError::Unknown(INVALID_REGISTRATION_CODE),
            Self::BrokerIdNotRegistered { .. } => ResponseError::BrokerIdNotRegistered,
            Self::StaleBrokerEpoch { .. } | Self::UnknownBrokerEpoch { .. } => {
                ResponseError::StaleBrokerEpoch
            }
            Self::InvalidUpdateVersion { .. } | Self::InvalidMetadataVersion { .. } => {
                ResponseError::InvalidUpdateVersion
            }
            Self::ProducerIdsExhausted => ResponseError::UnknownServerError,
        }
    }

    /// The numeric Kafka error code.
    #[must_use]
    pub fn code(&self) -> i16 {
        self.response_error().code()
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
