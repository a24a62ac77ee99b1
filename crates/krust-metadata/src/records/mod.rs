//! Metadata record types (Kafka 3.9 `metadata/src/main/resources/common/metadata/*.json`).
//!
//! Records are grouped in modules by kind (`simple`, `registration`, `partition`, `change`,
//! `security`, …). [`MetadataRecordType`] is the catalogue of every api key Kafka 3.9 defines,
//! with the highest version each has, and every one of them has a codec here. Unknown tagged
//! fields are kept, so decode → encode gives the original bytes back. Adding a record type (a
//! newer Kafka's) means: a struct, a [`MetadataRecordType`] entry, a variant in
//! [`MetadataRecord`], and one arm in [`MetadataRecord::decode_body`] / [`MetadataRecord::encode_body`].

mod change;
mod feature_level;
mod partition;
mod registration;
mod security;
mod simple;
mod user_scram_credential;

pub use change::{
    BrokerFencingRecord, BrokerRegistrationChangeRecord, NO_LEADER_CHANGE, PartitionChangeRecord,
};
pub use feature_level::FeatureLevelRecord;
pub use partition::PartitionRecord;
pub use registration::{
    RegisterBrokerRecord, RegisterControllerRecord, RegistrationEndpoint, RegistrationFeature,
};
pub use security::{
    AccessControlEntryRecord, ClientQuotaRecord, DelegationTokenRecord, QuotaEntity,
    RemoveAccessControlEntryRecord, RemoveDelegationTokenRecord, RemoveUserScramCredentialRecord,
};
pub use simple::{
    AbortTransactionRecord, BeginTransactionRecord, ConfigRecord, EndTransactionRecord, NoOpRecord,
    ProducerIdsRecord, RemoveTopicRecord, TopicRecord, UnknownTaggedFields, UnregisterBrokerRecord,
    ZkMigrationStateRecord,
};
pub use user_scram_credential::UserScramCredentialRecord;

use thiserror::Error;

use crate::codec::DecodeError;

/// The metadata record types of Kafka 3.9, by api key (facts §3.2). Keys 6 and 16 are retired and
/// 13 was never assigned: they decode as [`RecordError::UnknownType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetadataRecordType {
    /// 0
    RegisterBroker,
    /// 1
    UnregisterBroker,
    /// 2
    Topic,
    /// 3
    Partition,
    /// 4
    Config,
    /// 5
    PartitionChange,
    /// 7 (only before 3.3-IV2)
    FenceBroker,
    /// 8 (only before 3.3-IV2)
    UnfenceBroker,
    /// 9
    RemoveTopic,
    /// 10
    DelegationToken,
    /// 11
    UserScramCredential,
    /// 12
    FeatureLevel,
    /// 14
    ClientQuota,
    /// 15
    ProducerIds,
    /// 17
    BrokerRegistrationChange,
    /// 18
    AccessControlEntry,
    /// 19
    RemoveAccessControlEntry,
    /// 20
    NoOp,
    /// 21
    ZkMigrationState,
    /// 22
    RemoveUserScramCredential,
    /// 23
    BeginTransaction,
    /// 24
    EndTransaction,
    /// 25
    AbortTransaction,
    /// 26
    RemoveDelegationToken,
    /// 27
    RegisterController,
}

impl MetadataRecordType {
    /// Every type, in api-key order.
    pub const ALL: [Self; 25] = [
        Self::RegisterBroker,
        Self::UnregisterBroker,
        Self::Topic,
        Self::Partition,
        Self::Config,
        Self::PartitionChange,
        Self::FenceBroker,
        Self::UnfenceBroker,
        Self::RemoveTopic,
        Self::DelegationToken,
        Self::UserScramCredential,
        Self::FeatureLevel,
        Self::ClientQuota,
        Self::ProducerIds,
        Self::BrokerRegistrationChange,
        Self::AccessControlEntry,
        Self::RemoveAccessControlEntry,
        Self::NoOp,
        Self::ZkMigrationState,
        Self::RemoveUserScramCredential,
        Self::BeginTransaction,
        Self::EndTransaction,
        Self::AbortTransaction,
        Self::RemoveDelegationToken,
        Self::RegisterController,
    ];

    /// The api key written in the frame.
    #[must_use]
    pub const fn api_key(self) -> i16 {
        match self {
            Self::RegisterBroker => 0,
            Self::UnregisterBroker => 1,
            Self::Topic => 2,
            Self::Partition => 3,
            Self::Config => 4,
            Self::PartitionChange => 5,
            Self::FenceBroker => 7,
            Self::UnfenceBroker => 8,
            Self::RemoveTopic => 9,
            Self::DelegationToken => 10,
            Self::UserScramCredential => 11,
            Self::FeatureLevel => 12,
            Self::ClientQuota => 14,
            Self::ProducerIds => 15,
            Self::BrokerRegistrationChange => 17,
            Self::AccessControlEntry => 18,
            Self::RemoveAccessControlEntry => 19,
            Self::NoOp => 20,
            Self::ZkMigrationState => 21,
            Self::RemoveUserScramCredential => 22,
            Self::BeginTransaction => 23,
            Self::EndTransaction => 24,
            Self::AbortTransaction => 25,
            Self::RemoveDelegationToken => 26,
            Self::RegisterController => 27,
        }
    }

    /// The highest record version Kafka 3.9 defines for this type.
    #[must_use]
    pub const fn max_version(self) -> i16 {
        match self {
            Self::RegisterBroker => 3,
            Self::Partition | Self::PartitionChange | Self::BrokerRegistrationChange => 2,
            _ => 0,
        }
    }

    /// Looks a type up by api key.
    #[must_use]
    pub fn from_api_key(api_key: i16) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.api_key() == api_key)
    }

    /// Kafka's tooling name: the schema name in UPPER_SNAKE case, e.g. `FEATURE_LEVEL_RECORD`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::RegisterBroker => "REGISTER_BROKER_RECORD",
            Self::UnregisterBroker => "UNREGISTER_BROKER_RECORD",
            Self::Topic => "TOPIC_RECORD",
            Self::Partition => "PARTITION_RECORD",
            Self::Config => "CONFIG_RECORD",
            Self::PartitionChange => "PARTITION_CHANGE_RECORD",
            Self::FenceBroker => "FENCE_BROKER_RECORD",
            Self::UnfenceBroker => "UNFENCE_BROKER_RECORD",
            Self::RemoveTopic => "REMOVE_TOPIC_RECORD",
            Self::DelegationToken => "DELEGATION_TOKEN_RECORD",
            Self::UserScramCredential => "USER_SCRAM_CREDENTIAL_RECORD",
            Self::FeatureLevel => "FEATURE_LEVEL_RECORD",
            Self::ClientQuota => "CLIENT_QUOTA_RECORD",
            Self::ProducerIds => "PRODUCER_IDS_RECORD",
            Self::BrokerRegistrationChange => "BROKER_REGISTRATION_CHANGE_RECORD",
            Self::AccessControlEntry => "ACCESS_CONTROL_ENTRY_RECORD",
            Self::RemoveAccessControlEntry => "REMOVE_ACCESS_CONTROL_ENTRY_RECORD",
            Self::NoOp => "NO_OP_RECORD",
            Self::ZkMigrationState => "ZK_MIGRATION_STATE_RECORD",
            Self::RemoveUserScramCredential => "REMOVE_USER_SCRAM_CREDENTIAL_RECORD",
            Self::BeginTransaction => "BEGIN_TRANSACTION_RECORD",
            Self::EndTransaction => "END_TRANSACTION_RECORD",
            Self::AbortTransaction => "ABORT_TRANSACTION_RECORD",
            Self::RemoveDelegationToken => "REMOVE_DELEGATION_TOKEN_RECORD",
            Self::RegisterController => "REGISTER_CONTROLLER_RECORD",
        }
    }
}

impl std::fmt::Display for MetadataRecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a record body could not be decoded or encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError {
    /// The api key is not a Kafka 3.9 metadata record (includes retired keys 6, 16 and unused 13).
    /// Remedy: the data was written by a newer Kafka, or is corrupt.
    #[error("unknown metadata record type {api_key}")]
    UnknownType {
        /// The api key found in the frame.
        api_key: i16,
    },
    /// The type is known but the version is above what Kafka 3.9 defines (or negative).
    #[error("{record_type} version {version} is not supported (highest known: {max_version})")]
    UnsupportedVersion {
        /// The record type.
        record_type: MetadataRecordType,
        /// The version found.
        version: i16,
        /// The highest version krust knows.
        max_version: i16,
    },
    /// The body does not parse at that version.
    #[error("malformed {record_type} body (version {version})")]
    MalformedBody {
        /// The record type.
        record_type: MetadataRecordType,
        /// The version being read.
        version: i16,
        /// What went wrong.
        #[source]
        source: DecodeError,
    },
    /// A field holds a non-default value the requested version cannot carry (Kafka:
    /// `UnsupportedVersionException`). A caller bug: pick the version from the metadata.version.
    #[error("{record_type} version {version} cannot carry a non-default {field}")]
    FieldNotInVersion {
        /// The record type.
        record_type: MetadataRecordType,
        /// The version requested.
        version: i16,
        /// The field.
        field: &'static str,
    },
    /// Bytes were left after the body ("garbage after" in Kafka's serde).
    #[error("{trailing} unexpected bytes after the {record_type} body")]
    TrailingBytes {
        /// The record type.
        record_type: MetadataRecordType,
        /// How many bytes were left.
        trailing: usize,
    },
}

/// A decoded metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    /// `FeatureLevelRecord` (api key 12).
    FeatureLevel(FeatureLevelRecord),
    /// `UserScramCredentialRecord` (api key 11).
    UserScramCredential(UserScramCredentialRecord),
    /// `RegisterBrokerRecord` (api key 0).
    RegisterBroker(RegisterBrokerRecord),
    /// `UnregisterBrokerRecord` (api key 1).
    UnregisterBroker(UnregisterBrokerRecord),
    /// `TopicRecord` (api key 2).
    Topic(TopicRecord),
    /// `PartitionRecord` (api key 3).
    Partition(PartitionRecord),
    /// `ConfigRecord` (api key 4).
    Config(ConfigRecord),
    /// `RemoveTopicRecord` (api key 9).
    RemoveTopic(RemoveTopicRecord),
    /// `ProducerIdsRecord` (api key 15).
    ProducerIds(ProducerIdsRecord),
    /// `NoOpRecord` (api key 20).
    NoOp(NoOpRecord),
    /// `ZkMigrationStateRecord` (api key 21).
    ZkMigrationState(ZkMigrationStateRecord),
    /// `BeginTransactionRecord` (api key 23).
    BeginTransaction(BeginTransactionRecord),
    /// `EndTransactionRecord` (api key 24).
    EndTransaction(EndTransactionRecord),
    /// `AbortTransactionRecord` (api key 25).
    AbortTransaction(AbortTransactionRecord),
    /// `RegisterControllerRecord` (api key 27).
    RegisterController(RegisterControllerRecord),
    /// `PartitionChangeRecord` (api key 5).
    PartitionChange(PartitionChangeRecord),
    /// `FenceBrokerRecord` (api key 7).
    FenceBroker(BrokerFencingRecord),
    /// `UnfenceBrokerRecord` (api key 8).
    UnfenceBroker(BrokerFencingRecord),
    /// `DelegationTokenRecord` (api key 10).
    DelegationToken(DelegationTokenRecord),
    /// `ClientQuotaRecord` (api key 14).
    ClientQuota(ClientQuotaRecord),
    /// `BrokerRegistrationChangeRecord` (api key 17).
    BrokerRegistrationChange(BrokerRegistrationChangeRecord),
    /// `AccessControlEntryRecord` (api key 18).
    AccessControlEntry(AccessControlEntryRecord),
    /// `RemoveAccessControlEntryRecord` (api key 19).
    RemoveAccessControlEntry(RemoveAccessControlEntryRecord),
    /// `RemoveUserScramCredentialRecord` (api key 22).
    RemoveUserScramCredential(RemoveUserScramCredentialRecord),
    /// `RemoveDelegationTokenRecord` (api key 26).
    RemoveDelegationToken(RemoveDelegationTokenRecord),
}

impl MetadataRecord {
    /// The record type.
    #[must_use]
    pub fn record_type(&self) -> MetadataRecordType {
        match self {
            Self::FeatureLevel(_) => MetadataRecordType::FeatureLevel,
            Self::UserScramCredential(_) => MetadataRecordType::UserScramCredential,
            Self::RegisterBroker(_) => MetadataRecordType::RegisterBroker,
            Self::UnregisterBroker(_) => MetadataRecordType::UnregisterBroker,
            Self::Topic(_) => MetadataRecordType::Topic,
            Self::Partition(_) => MetadataRecordType::Partition,
            Self::Config(_) => MetadataRecordType::Config,
            Self::RemoveTopic(_) => MetadataRecordType::RemoveTopic,
            Self::ProducerIds(_) => MetadataRecordType::ProducerIds,
            Self::NoOp(_) => MetadataRecordType::NoOp,
            Self::ZkMigrationState(_) => MetadataRecordType::ZkMigrationState,
            Self::BeginTransaction(_) => MetadataRecordType::BeginTransaction,
            Self::EndTransaction(_) => MetadataRecordType::EndTransaction,
            Self::AbortTransaction(_) => MetadataRecordType::AbortTransaction,
            Self::RegisterController(_) => MetadataRecordType::RegisterController,
            Self::PartitionChange(_) => MetadataRecordType::PartitionChange,
            Self::FenceBroker(_) => MetadataRecordType::FenceBroker,
            Self::UnfenceBroker(_) => MetadataRecordType::UnfenceBroker,
            Self::DelegationToken(_) => MetadataRecordType::DelegationToken,
            Self::ClientQuota(_) => MetadataRecordType::ClientQuota,
            Self::BrokerRegistrationChange(_) => MetadataRecordType::BrokerRegistrationChange,
            Self::AccessControlEntry(_) => MetadataRecordType::AccessControlEntry,
            Self::RemoveAccessControlEntry(_) => MetadataRecordType::RemoveAccessControlEntry,
            Self::RemoveUserScramCredential(_) => MetadataRecordType::RemoveUserScramCredential,
            Self::RemoveDelegationToken(_) => MetadataRecordType::RemoveDelegationToken,
        }
    }

    /// Decodes a body of `record_type` at `version`. The whole of `body` must be consumed.
    ///
    /// # Errors
    /// [`RecordError::UnsupportedVersion`], [`RecordError::MalformedBody`] or
    /// [`RecordError::TrailingBytes`].
    pub fn decode_body(
        record_type: MetadataRecordType,
        version: i16,
        body: &[u8],
    ) -> Result<Self, RecordError> {
        if !(0..=record_type.max_version()).contains(&version) {
            return Err(RecordError::UnsupportedVersion {
                record_type,
                version,
                max_version: record_type.max_version(),
            });
        }
        let malformed = |source| RecordError::MalformedBody {
            record_type,
            version,
            source,
        };
        let mut reader = crate::codec::ByteReader::new(body);
        let record = match record_type {
            MetadataRecordType::FeatureLevel => Self::FeatureLevel(
                FeatureLevelRecord::decode(&mut reader, version).map_err(malformed)?,
            ),
            MetadataRecordType::UserScramCredential => Self::UserScramCredential(
                UserScramCredentialRecord::decode(&mut reader, version).map_err(malformed)?,
            ),
            MetadataRecordType::RegisterBroker => Self::RegisterBroker(
                RegisterBrokerRecord::decode(&mut reader, version).map_err(malformed)?,
            ),
            MetadataRecordType::UnregisterBroker => Self::UnregisterBroker(
                UnregisterBrokerRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::Topic => {
                Self::Topic(TopicRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::Partition => {
                Self::Partition(PartitionRecord::decode(&mut reader, version).map_err(malformed)?)
            }
            MetadataRecordType::Config => {
                Self::Config(ConfigRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::RemoveTopic => {
                Self::RemoveTopic(RemoveTopicRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::ProducerIds => {
                Self::ProducerIds(ProducerIdsRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::NoOp => {
                Self::NoOp(NoOpRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::ZkMigrationState => Self::ZkMigrationState(
                ZkMigrationStateRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::BeginTransaction => Self::BeginTransaction(
                BeginTransactionRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::EndTransaction => {
                Self::EndTransaction(EndTransactionRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::AbortTransaction => Self::AbortTransaction(
                AbortTransactionRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::RegisterController => Self::RegisterController(
                RegisterControllerRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::PartitionChange => Self::PartitionChange(
                PartitionChangeRecord::decode(&mut reader, version).map_err(malformed)?,
            ),
            MetadataRecordType::FenceBroker => {
                Self::FenceBroker(BrokerFencingRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::UnfenceBroker => {
                Self::UnfenceBroker(BrokerFencingRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::DelegationToken => Self::DelegationToken(
                DelegationTokenRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::ClientQuota => {
                Self::ClientQuota(ClientQuotaRecord::decode(&mut reader).map_err(malformed)?)
            }
            MetadataRecordType::BrokerRegistrationChange => Self::BrokerRegistrationChange(
                BrokerRegistrationChangeRecord::decode(&mut reader, version).map_err(malformed)?,
            ),
            MetadataRecordType::AccessControlEntry => Self::AccessControlEntry(
                AccessControlEntryRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::RemoveAccessControlEntry => Self::RemoveAccessControlEntry(
                RemoveAccessControlEntryRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::RemoveUserScramCredential => Self::RemoveUserScramCredential(
                RemoveUserScramCredentialRecord::decode(&mut reader).map_err(malformed)?,
            ),
            MetadataRecordType::RemoveDelegationToken => Self::RemoveDelegationToken(
                RemoveDelegationTokenRecord::decode(&mut reader).map_err(malformed)?,
            ),
        };
        if reader.remaining() > 0 {
            return Err(RecordError::TrailingBytes {
                record_type,
                trailing: reader.remaining(),
            });
        }
        Ok(record)
    }

    /// Appends the body at `version` to `out`.
    ///
    /// # Errors
    /// [`RecordError::UnsupportedVersion`] if `version` is not one this type has.
    pub fn encode_body(&self, version: i16, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let record_type = self.record_type();
        if !(0..=record_type.max_version()).contains(&version) {
            return Err(RecordError::UnsupportedVersion {
                record_type,
                version,
                max_version: record_type.max_version(),
            });
        }
        let not_in_version = |e: registration::FieldNotInVersion| RecordError::FieldNotInVersion {
            record_type,
            version,
            field: e.field,
        };
        match self {
            Self::FeatureLevel(record) => record.encode(version, out),
            Self::UserScramCredential(record) => record.encode(version, out),
            Self::RegisterBroker(record) => record.encode(version, out).map_err(not_in_version)?,
            Self::UnregisterBroker(record) => record.encode(out),
            Self::Topic(record) => record.encode(out),
            Self::Partition(record) => record.encode(version, out).map_err(not_in_version)?,
            Self::Config(record) => record.encode(out),
            Self::RemoveTopic(record) => record.encode(out),
            Self::ProducerIds(record) => record.encode(out),
            Self::NoOp(record) => record.encode(out),
            Self::ZkMigrationState(record) => record.encode(out),
            Self::BeginTransaction(record) => record.encode(out),
            Self::EndTransaction(record) => record.encode(out),
            Self::AbortTransaction(record) => record.encode(out),
            Self::RegisterController(record) => record.encode(out),
            Self::PartitionChange(record) => {
                record.encode(version, out).map_err(not_in_version)?;
            }
            Self::FenceBroker(record) | Self::UnfenceBroker(record) => record.encode(out),
            Self::DelegationToken(record) => record.encode(out),
            Self::ClientQuota(record) => record.encode(out),
            Self::BrokerRegistrationChange(record) => {
                record.encode(version, out).map_err(not_in_version)?;
            }
            Self::AccessControlEntry(record) => record.encode(out),
            Self::RemoveAccessControlEntry(record) => record.encode(out),
            Self::RemoveUserScramCredential(record) => record.encode(out),
            Self::RemoveDelegationToken(record) => record.encode(out),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_no_retired_or_unassigned_keys() {
        for retired in [6, 13, 16, 28, 29, -1] {
            assert_eq!(
                MetadataRecordType::from_api_key(retired),
                None,
                "key {retired}"
            );
        }
        for t in MetadataRecordType::ALL {
            assert_eq!(MetadataRecordType::from_api_key(t.api_key()), Some(t));
        }
    }

    fn samples() -> Vec<(MetadataRecord, i16)> {
        let id = uuid::Uuid::from_u64_pair(1, 2);
        let endpoint = RegistrationEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            security_protocol: 0,
            unknown_tagged_fields: Vec::new(),
        };
        let feature = RegistrationFeature {
            name: "metadata.version".into(),
            min_supported_version: 1,
            max_supported_version: 21,
            unknown_tagged_fields: Vec::new(),
        };
        let broker = |version: i16| RegisterBrokerRecord {
            broker_id: 1,
            is_migrating_zk_broker: version >= 2,
            incarnation_id: id,
            broker_epoch: 42,
            end_points: vec![endpoint.clone()],
            features: vec![feature.clone()],
            rack: (version % 2 == 0).then(|| "rack-a".into()),
            fenced: true,
            in_controlled_shutdown: version >= 1,
            log_dirs: if version >= 3 { vec![id] } else { Vec::new() },
            unknown_tagged_fields: vec![(7, vec![1, 2, 3])],
        };
        let partition = |version: i16| PartitionRecord {
            partition_id: 0,
            topic_id: id,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2],
            removing_replicas: vec![],
            adding_replicas: vec![3],
            leader: 1,
            leader_recovery_state: 1,
            leader_epoch: 5,
            partition_epoch: 9,
            directories: if version >= 1 {
                vec![id, id, id]
            } else {
                Vec::new()
            },
            eligible_leader_replicas: (version >= 2).then(|| vec![2]),
            last_known_elr: (version >= 2).then(Vec::new),
            unknown_tagged_fields: Vec::new(),
        };
        let mut out = vec![
            (
                MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 21)),
                0,
            ),
            (
                MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                    broker_id: 3,
                    broker_epoch: 7,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::Topic(TopicRecord {
                    name: "t".into(),
                    topic_id: id,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::Config(ConfigRecord {
                    resource_type: 2,
                    resource_name: "t".into(),
                    name: "retention.ms".into(),
                    value: None,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::RemoveTopic(RemoveTopicRecord {
                    topic_id: id,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::ProducerIds(ProducerIdsRecord {
                    broker_id: 1,
                    broker_epoch: -1,
                    next_producer_id: 1000,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            ),
            (MetadataRecord::NoOp(NoOpRecord::default()), 0),
            (
                MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                    zk_migration_state: 2,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::BeginTransaction(BeginTransactionRecord {
                    name: Some("bootstrap".into()),
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::EndTransaction(EndTransactionRecord::default()),
                0,
            ),
            (
                MetadataRecord::AbortTransaction(AbortTransactionRecord {
                    reason: None,
                    unknown_tagged_fields: vec![(3, vec![9])],
                }),
                0,
            ),
            (
                MetadataRecord::RegisterController(RegisterControllerRecord {
                    controller_id: 1,
                    incarnation_id: id,
                    zk_migration_ready: false,
                    end_points: vec![endpoint.clone()],
                    features: vec![feature.clone()],
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            ),
            (
                MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                    name: "alice".into(),
                    mechanism: 1,
                    salt: vec![1; 4],
                    stored_key: vec![2; 32],
                    server_key: vec![3; 32],
                    iterations: 4096,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            ),
        ];
        out.extend([
            (
                MetadataRecord::FenceBroker(BrokerFencingRecord {
                    id: 1,
                    epoch: 2,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::UnfenceBroker(BrokerFencingRecord {
                    id: 1,
                    epoch: 3,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::DelegationToken(DelegationTokenRecord {
                    owner: "User:a".into(),
                    requester: "User:b".into(),
                    renewers: vec!["User:c".into()],
                    issue_timestamp: 1,
                    max_timestamp: 2,
                    expiration_timestamp: 3,
                    token_id: "t".into(),
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
                    token_id: "t".into(),
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: vec![QuotaEntity {
                        entity_type: "user".into(),
                        entity_name: None,
                        ..Default::default()
                    }],
                    key: "producer_byte_rate".into(),
                    value: 1024.5,
                    remove: false,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
                    id,
                    resource_type: 2,
                    resource_name: "t".into(),
                    pattern_type: 3,
                    principal: "User:a".into(),
                    host: "*".into(),
                    operation: 3,
                    permission_type: 3,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
                    id,
                    ..Default::default()
                }),
                0,
            ),
            (
                MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                    name: "a".into(),
                    mechanism: 2,
                    ..Default::default()
                }),
                0,
            ),
        ]);
        for v in 0..=2 {
            out.push((
                MetadataRecord::PartitionChange(PartitionChangeRecord {
                    partition_id: 1,
                    topic_id: id,
                    isr: Some(vec![1]),
                    leader: 1,
                    leader_recovery_state: 0,
                    directories: (v >= 1).then(|| vec![id]),
                    eligible_leader_replicas: (v >= 2).then(|| vec![2]),
                    ..Default::default()
                }),
                v,
            ));
            out.push((
                MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                    broker_id: 1,
                    broker_epoch: 5,
                    fenced: -1,
                    in_controlled_shutdown: i8::from(v >= 1),
                    log_dirs: if v >= 2 { vec![id] } else { Vec::new() },
                    ..Default::default()
                }),
                v,
            ));
        }
        for v in 0..=3 {
            out.push((MetadataRecord::RegisterBroker(broker(v)), v));
        }
        for v in 0..=2 {
            out.push((MetadataRecord::Partition(partition(v)), v));
        }
        out
    }

    #[test]
    fn every_record_type_has_a_sample() {
        let covered: std::collections::BTreeSet<_> =
            samples().iter().map(|(r, _)| r.record_type()).collect();
        for t in MetadataRecordType::ALL {
            assert!(covered.contains(&t), "{t} has no sample");
        }
    }

    #[test]
    fn every_codec_round_trips_and_rejects_truncation() {
        for (record, version) in samples() {
            let name = record.record_type();
            let mut body = Vec::new();
            record.encode_body(version, &mut body).expect("encodes");
            assert_eq!(
                MetadataRecord::decode_body(name, version, &body).as_ref(),
                Ok(&record),
                "{name} v{version}"
            );
            for len in 0..body.len() {
                assert!(
                    MetadataRecord::decode_body(name, version, &body[..len]).is_err(),
                    "{name} v{version}: prefix of {len} bytes accepted"
                );
            }
        }
    }

    #[test]
    fn fields_a_version_cannot_carry_are_refused() {
        for (record, version) in samples() {
            if let MetadataRecord::RegisterBroker(_)
            | MetadataRecord::Partition(_)
            | MetadataRecord::PartitionChange(_)
            | MetadataRecord::BrokerRegistrationChange(_) = record
                && version == record.record_type().max_version()
                && version > 0
            {
                let err = record.encode_body(0, &mut Vec::new());
                assert!(
                    matches!(err, Err(RecordError::FieldNotInVersion { .. })),
                    "{:?}",
                    record.record_type()
                );
            }
        }
    }

    #[test]
    fn versions_above_the_catalogue_are_rejected() {
        let err = MetadataRecord::decode_body(MetadataRecordType::FeatureLevel, 1, &[]);
        assert_eq!(
            err,
            Err(RecordError::UnsupportedVersion {
                record_type: MetadataRecordType::FeatureLevel,
                version: 1,
                max_version: 0
            })
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bodies for any record type and version give a record or a typed error,
        /// never a panic or a huge allocation; whatever decodes re-encodes to the same bytes.
        #[test]
        fn arbitrary_bodies_never_panic(
            type_index in 0usize..MetadataRecordType::ALL.len(),
            version in -1i16..4,
            body in proptest::collection::vec(any::<u8>(), 0..96),
        ) {
            let record_type = MetadataRecordType::ALL[type_index];
            if let Ok(record) = MetadataRecord::decode_body(record_type, version, &body) {
                let mut out = Vec::new();
                record.encode_body(version, &mut out).expect("a decoded record re-encodes");
                // Tagged fields may come back in canonical (sorted) order and bools as 0/1, so
                // compare what the bytes mean rather than the bytes.
                prop_assert_eq!(MetadataRecord::decode_body(record_type, version, &out), Ok(record));
            }
        }
    }
}
