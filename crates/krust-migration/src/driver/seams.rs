//! What the driver needs from the ZooKeeper reader, the ZooKeeper writer and the propagator:
//! pure functions over data (a [`ZkTree`] read by the runtime, images and deltas), called by
//! the driver inside its `handle_*` methods. They do no IO.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use krust_metadata::{ApiMessageAndVersion, MetadataDelta, MetadataImage};
use krust_zk::ops::ZkOp;
use krust_zk::tree::ZkTree;

/// An error from a reader, writer or propagator (their own typed errors, boxed at the seam).
pub type SeamError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What the initial copy appends: ZooKeeper's metadata as record batches in Kafka's order
/// (facts §6.8), and the broker ids the metadata mentions (for the completion log line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZkMetadataCopy {
    /// Record batches (a topic with its configs and partitions, a broker's configs, …).
    pub batches: Vec<Vec<ApiMessageAndVersion>>,
    /// Broker ids seen in the migrated metadata.
    pub broker_ids: BTreeSet<i32>,
}

/// ZooKeeper → records (facts §6.8).
pub trait ZkMetadataReader {
    /// The subtrees [`Self::read_all_metadata`] needs (the runtime reads them first).
    fn metadata_roots(&self) -> Vec<String>;

    /// The whole copy, from the subtrees read.
    ///
    /// # Errors
    /// A znode that does not parse (named in the error).
    fn read_all_metadata(&mut self, zk: &ZkTree) -> Result<ZkMetadataCopy, SeamError>;

    /// Every broker id in any topic's replica assignment, from a tree holding
    /// `/brokers/topics`.
    ///
    /// # Errors
    /// A topic znode that does not parse.
    fn assignment_broker_ids(&self, zk: &ZkTree) -> Result<BTreeSet<i32>, SeamError>;
}

/// ZooKeeper writes for a KRaft change, before the driver fences them (facts §6.10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZkWriteBatch {
    /// Creates, setDatas and deletes; the driver wraps each in its own multi-op with the
    /// `/controller_epoch` and `/migration` version checks (facts §6.7).
    pub ops: Vec<ZkOp>,
    /// Change notifications, written outside the fence after the guarded writes.
    pub notifications: Vec<ZkOp>,
    /// Operation counts by Kafka's name (`CreateTopic`, `UpdatePartition`, …) for the log.
    pub counts: BTreeMap<String, usize>,
}

impl ZkWriteBatch {
    /// Whether there is nothing to write.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.notifications.is_empty()
    }
}

/// KRaft image/delta → ZooKeeper writes (Kafka's `KRaftMigrationZkWriter`).
pub trait ZkMetadataWriter {
    /// The subtrees [`Self::snapshot_writes`] compares the image with.
    fn snapshot_roots(&self) -> Vec<String>;

    /// The full reconciliation: what makes ZooKeeper (`zk`) match `image`.
    ///
    /// # Errors
    /// A znode that does not parse.
    fn snapshot_writes(
        &mut self,
        image: &MetadataImage,
        zk: &ZkTree,
        zk_controller_epoch: i32,
    ) -> Result<ZkWriteBatch, SeamError>;

    /// The writes for one delta (`delta.image()` is the previous image).
    ///
    /// # Errors
    /// Something the writer cannot express.
    fn delta_writes(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        zk_controller_epoch: i32,
    ) -> Result<ZkWriteBatch, SeamError>;
}

/// KRaft image/delta → LeaderAndIsr / UpdateMetadata / StopReplica for ZooKeeper-mode
/// brokers (Kafka's `MigrationPropagator`; facts §6.11).
pub trait BrokerPropagator {
    /// What the runtime sends.
    type Rpcs: fmt::Debug;

    /// Full UpdateMetadata + FULL LeaderAndIsr for every ZooKeeper broker.
    fn rpcs_for_image(&mut self, image: &MetadataImage, zk_controller_epoch: i32) -> Self::Rpcs;

    /// Incremental requests for a delta; `None` when nothing relevant changed.
    fn rpcs_for_delta(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        zk_controller_epoch: i32,
    ) -> Option<Self::Rpcs>;
}
