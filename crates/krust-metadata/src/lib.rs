//! krust-metadata: KRaft metadata records and what a node is formatted with — byte-compatible
//! with Apache Kafka 3.9. Pure data in, data out: this crate does no IO.
//!
//! # Layout
//!
//! - [`frame`]: the `ApiMessageAndVersion` frame around every metadata record (facts §3.4).
//! - [`records`]: the record catalogue (api keys, versions) and one module per record type
//!   (every record a Kafka 3.9 snapshot holds: features, broker/controller registrations,
//!   topics, partitions, configs, producer ids, SCRAM, migration state, transactions, no-ops,
//!   and the change/ACL/quota/token records).
//! - [`codec`]: checked readers/writers for Kafka's flexible encoding.
//! - [`metadata_version`]: the `metadata.version` table of Kafka 3.9 (facts §5).
//! - [`features`]: `kraft.version`, `transaction.version` and the format-time feature rules.
//! - [`bootstrap`]: `bootstrap.checkpoint` (facts §4.7), via [`krust_raft::snapshot`].
//! - [`dynamic_voters`]: `--initial-controllers` and the `VotersRecord` of the bootstrap snapshot.
//! - [`image`]: [`MetadataImage`] (immutable, `Arc` sub-images over persistent maps) and
//!   [`MetadataDelta`] (`replay` every record, `apply`, what changed, `local_changes`), snapshot
//!   write/read of an image in Kafka's order, a snapshot loaded over an image, the
//!   `MetadataBatchLoader` that publishes committed batches (KIP-868 transactions), and a
//!   node's `MetadataLoader` with the `MetadataPublisher` / `LoaderManifest` seam it calls.
//! - [`scram`]: `--add-scram` arguments and the `UserScramCredentialRecord` they become.
//! - [`meta_properties`]: `meta.properties` v0/v1 (facts §4.6).
//! - [`properties`]: Java `.properties` text.
//! - [`kafka_uuid`]: Kafka's base64 UUID text (cluster, directory and topic ids).
//! - [`authorizer`]: Kafka's `StandardAuthorizer` over the image's ACLs, and ACL filters.

pub mod authorizer;
pub mod bootstrap;
pub mod codec;
pub mod dynamic_voters;
pub mod features;
pub mod frame;
pub mod image;
pub mod kafka_uuid;
pub mod meta_properties;
pub mod metadata_version;
pub mod properties;
pub mod records;
pub mod scram;

pub use bootstrap::{BOOTSTRAP_FILE_NAME, BootstrapError, BootstrapMetadata};
pub use frame::{ApiMessageAndVersion, FrameError};
pub use image::{MetadataDelta, MetadataImage, MetadataProvenance, ReplayError};
pub use meta_properties::{MetaProperties, MetaPropertiesError, MetaPropertiesVersion};
pub use metadata_version::MetadataVersion;
