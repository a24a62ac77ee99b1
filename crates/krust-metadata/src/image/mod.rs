//! What a node knows about the cluster: [`MetadataImage`], changed only through a
//! [`MetadataDelta`] (Kafka 3.9's `org.apache.kafka.image`; STYLE §2).
//!
//! An image is never mutated. Clones are cheap: each sub-image is an `Arc` over persistent
//! maps (`imbl`), and a delta's `apply` shares every sub-image no record touched. A snapshot is
//! loaded the same way the log is: as a delta replayed on the empty image
//! ([`MetadataImage::from_records`]), and written with [`MetadataImage::write`] in Kafka's order
//! (facts §4.4).
//!
//! # Layout
//!
//! - `delta.rs`: [`MetadataDelta`] (`replay` every record type, `apply`, `local_changes`) and
//!   [`ReplayError`].
//! - [`features`]: metadata.version, other finalized features, ZooKeeper migration state.
//! - [`cluster`]: broker and controller registrations.
//! - [`topics`]: topics, partitions, and [`topics::LocalReplicaChanges`] for a broker.
//! - [`configs`], [`client_quotas`], [`producer_ids`], [`acls`], [`scram`],
//!   [`delegation_tokens`]: one sub-image and sub-delta each.
//! - [`loader`]: [`MetadataBatchLoader`], committed batches → published images, with KIP-868
//!   metadata transactions; [`MetadataLoader`], the node's loader (catching up with the high
//!   watermark, then every image to the registered publishers).
//! - [`publisher`]: [`MetadataPublisher`] and [`LoaderManifest`], the loader/publisher seam.
//! - [`writer`]: the record sink and the metadata-loss policy of [`MetadataImage::write`].
//! - `snapshot.rs`: an image to and from KIP-630 snapshot bytes (no IO).

pub mod acls;
pub mod client_quotas;
pub mod cluster;
pub mod configs;
pub mod delegation_tokens;
mod delta;
pub mod features;
pub mod loader;
pub mod producer_ids;
pub mod publisher;
pub mod scram;
mod snapshot;
pub mod topics;
pub mod writer;

use std::sync::Arc;

pub use delta::{MetadataDelta, ReplayError};
pub use loader::{LoadFault, LoadOutcome, MetadataBatchLoader, MetadataLoader, Publication};
pub use publisher::{LeaderAndEpoch, LoaderManifest, MetadataPublisher};
pub use snapshot::{ImageSnapshotError, read_image_snapshot, write_image_snapshot};
pub use writer::{ImageWriteError, ImageWriterOptions, RecordSink};

use crate::frame::ApiMessageAndVersion;
use crate::metadata_version::MetadataVersion;
use crate::records::MetadataRecord;
use acls::AclsImage;
use client_quotas::ClientQuotasImage;
use cluster::ClusterImage;
use configs::ConfigsImage;
use delegation_tokens::DelegationTokensImage;
use features::FeaturesImage;
use producer_ids::ProducerIdsImage;
use scram::ScramImage;
use topics::TopicsImage;

/// Which part of the metadata log an image reflects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetadataProvenance {
    /// Offset of the last record in the image; -1 for the empty image.
    pub last_contained_offset: i64,
    /// Leader epoch of that record; -1 for the empty image.
    pub last_contained_epoch: i32,
    /// Append time of that record's batch (ms); -1 for the empty image.
    pub last_contained_log_time_ms: i64,
}

impl MetadataProvenance {
    /// The provenance of the empty image.
    pub const EMPTY: Self = Self::new(-1, -1, -1);

    /// A provenance.
    #[must_use]
    pub const fn new(
        last_contained_offset: i64,
        last_contained_epoch: i32,
        last_contained_log_time_ms: i64,
    ) -> Self {
        Self {
            last_contained_offset,
            last_contained_epoch,
            last_contained_log_time_ms,
        }
    }

    /// The id of a snapshot of an image with this provenance: end offset = last contained
    /// offset + 1 (exclusive), epoch of the last record (facts §4.4).
    #[must_use]
    pub fn snapshot_id(&self) -> krust_raft::snapshot::SnapshotId {
        krust_raft::snapshot::SnapshotId {
            end_offset: self.last_contained_offset.saturating_add(1),
            epoch: self.last_contained_epoch,
        }
    }
}

impl Default for MetadataProvenance {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// What this node knows about the cluster as of `provenance`. Never mutated: clones are cheap
/// (`Arc` sub-images over persistent maps), and every change goes through a [`MetadataDelta`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetadataImage {
    /// The log position the image reflects.
    pub provenance: MetadataProvenance,
    /// Finalized features (metadata.version first among them) and ZooKeeper migration state.
    pub features: Arc<FeaturesImage>,
    /// Broker and controller registrations.
    pub cluster: Arc<ClusterImage>,
    /// Topics and partitions.
    pub topics: Arc<TopicsImage>,
    /// Dynamic configs.
    pub configs: Arc<ConfigsImage>,
    /// Client quotas.
    pub client_quotas: Arc<ClientQuotasImage>,
    /// Next producer-id block.
    pub producer_ids: Arc<ProducerIdsImage>,
    /// ACLs.
    pub acls: Arc<AclsImage>,
    /// SCRAM credentials.
    pub scram: Arc<ScramImage>,
    /// Delegation tokens.
    pub delegation_tokens: Arc<DelegationTokensImage>,
}

impl MetadataImage {
    /// The empty image (what a node knows before reading anything).
    #[must_use]
    pub fn empty() -> Self {
        Self::default()
    }

    /// Whether the image holds nothing beyond its provenance.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        let empty = Self::empty();
        Self {
            provenance: empty.provenance,
            ..self.clone()
        } == empty
    }

    /// `metadata.version`.
    #[must_use]
    pub fn metadata_version(&self) -> MetadataVersion {
        self.features.metadata_version
    }

    /// Builds an image by replaying `records` on the empty image: how a snapshot is loaded.
    ///
    /// # Errors
    /// The first [`ReplayError`].
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = &'a MetadataRecord>,
        provenance: MetadataProvenance,
    ) -> Result<Self, ReplayError> {
        let mut delta = MetadataDelta::new(&Self::empty());
        for record in records {
            delta.replay(record)?;
        }
        Ok(delta.apply(provenance))
    }

    /// Writes the image as records in Kafka's snapshot order (facts §4.4): features
    /// (`metadata.version` first, then `ZkMigrationStateRecord` from 3.4-IV0), cluster, topics
    /// (each `TopicRecord` followed by its `PartitionRecord`s), configs, client quotas,
    /// producer ids, ACLs, SCRAM credentials, delegation tokens. Record versions follow
    /// `options.metadata_version`.
    ///
    /// # Errors
    /// [`ImageWriteError::MetadataLoss`] when the version cannot carry something in the image
    /// and `options` does not accept loss; `sink` then holds the records written so far.
    pub fn write(
        &self,
        sink: &mut dyn RecordSink,
        mut options: ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        self.features.write(sink, &mut options)?;
        self.cluster.write(sink, &mut options)?;
        self.topics.write(sink, &mut options)?;
        self.configs.write(sink);
        self.client_quotas.write(sink);
        self.producer_ids.write(sink);
        self.acls.write(sink);
        self.scram.write(sink, &mut options)?;
        self.delegation_tokens.write(sink, &mut options)?;
        Ok(())
    }

    /// [`Self::write`] into a `Vec` at `metadata_version`, refusing any loss.
    ///
    /// # Errors
    /// [`ImageWriteError::MetadataLoss`].
    pub fn to_records(
        &self,
        metadata_version: MetadataVersion,
    ) -> Result<Vec<ApiMessageAndVersion>, ImageWriteError> {
        let mut records = Vec::new();
        self.write(&mut records, ImageWriterOptions::new(metadata_version))?;
        Ok(records)
    }
}
