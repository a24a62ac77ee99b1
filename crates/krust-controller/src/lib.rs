//! krust-controller: the KIP-631 quorum controller's deterministic building blocks. Each is a
//! plain struct or function driven with explicit time (`now: Instant`) and seeded randomness,
//! that turns a request into Kafka 3.9 metadata records ([`ApiMessageAndVersion`] of
//! `krust_metadata`) or a [`ControllerError`] carrying a Kafka error code. None does IO and none
//! reads a `MetadataImage` directly: each takes a small description of the cluster that the
//! `QuorumController` (next) fills from the image. Only the active controller calls these; the
//! records they return are not applied here — they go to the log, and every node (this one
//! included) replays them.
//!
//! # Layout
//!
//! - [`placement`]: striped, rack-aware replica placement (Kafka's `StripedReplicaPlacer`).
//! - [`heartbeat`]: broker sessions, fencing, unfencing and controlled shutdown
//!   (`BrokerHeartbeatManager` + the heartbeat half of `ReplicationControlManager`).
//! - [`registration`]: BrokerRegistration, ControllerRegistration and UnregisterBroker
//!   validation → `RegisterBrokerRecord` / `RegisterControllerRecord` /
//!   `UnregisterBrokerRecord` (`ClusterControlManager`).
//! - [`producer_ids`]: AllocateProducerIds in blocks of 1000 (`ProducerIdControlManager`).
//! - [`features`]: UpdateFeatures validation → `FeatureLevelRecord`s (`FeatureControlManager`).
//! - [`quorum_controller`]: [`QuorumController`], the state machine that wires the blocks
//!   above to the image: committed batches in, atomic record batches and (commit-gated)
//!   responses out; bootstrap, no-ops, topics, AlterPartition, leadership moves.
//! - [`configs`]: IncrementalAlterConfigs for topics and brokers → `ConfigRecord`s.
//! - [`acls`]: CreateAcls / DeleteAcls → `AccessControlEntryRecord` /
//!   `RemoveAccessControlEntryRecord` (`AclControlManager`).
//! - [`client_quotas`]: AlterClientQuotas → `ClientQuotaRecord`s (`ClientQuotaControlManager`).
//! - [`scram`]: AlterUserScramCredentials → `UserScramCredentialRecord` /
//!   `RemoveUserScramCredentialRecord` (`ScramControlManager`).
//! - [`delegation_tokens`]: Create/Renew/ExpireDelegationToken → `DelegationTokenRecord` /
//!   `RemoveDelegationTokenRecord` (`DelegationTokenControlManager`).
//! - [`api_error`]: per-item results (Kafka's `ApiError`) and Java `HashMap` result order.
//! - [`partition_change`]: one partition's next leader/ISR (`PartitionChangeBuilder`).
//! - [`topic_names`]: topic name rules.
//! - [`error`]: [`ControllerError`] and its Kafka error codes.
//!
//! [`ApiMessageAndVersion`]: krust_metadata::ApiMessageAndVersion

pub mod acls;
pub mod api_error;
pub mod client_quotas;
pub mod configs;
pub mod delegation_tokens;
pub mod error;
pub mod features;
pub mod heartbeat;
pub mod partition_change;
pub mod placement;
pub mod producer_ids;
pub mod quorum_controller;
pub mod registration;
pub mod scram;
pub mod topic_names;

pub use error::ActivationError;
pub use error::ControllerError;
pub use quorum_controller::{
    AdminConfig, CommittedBatch, ControllerAction, ControllerRequest, ControllerResponse,
    MigrationBatchCommitted, PartitionChangeQuota, QuorumController, QuorumControllerConfig,
    QuotaExceeded, RequestId,
};
