//! The seam between a node's metadata loader and what acts on metadata (Kafka 3.9's
//! `image/publisher/MetadataPublisher` and `image/loader/LoaderManifest`).
//!
//! A [`MetadataPublisher`] is registered with a node's [`super::MetadataLoader`] when the node is
//! built, and from then on learns about metadata only through it: every published image comes
//! with the delta that made it and a [`LoaderManifest`] saying what was loaded. Publishers run
//! one after another in registration order, never concurrently, so a later publisher may rely
//! on an earlier one having acted on the same image (the broker's group coordinator relies on
//! the replica manager having made it leader of `__consumer_offsets` partitions).
//!
//! Nothing is published before the loader has caught up with the high watermark; the first
//! publications are then handed over in log order.

use std::time::Duration;

use super::{MetadataDelta, MetadataImage, MetadataProvenance};

/// The Raft leader of the metadata log (the active controller) and its leader epoch, as the
/// loader last heard (Kafka's `LeaderAndEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderAndEpoch {
    /// The leader's node id, `None` while no leader is known.
    pub leader_id: Option<i32>,
    /// The leader epoch (`0` before any is known).
    pub leader_epoch: i32,
}

/// What went into a published image (Kafka's `SnapshotManifest` / `LogDeltaManifest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoaderManifest {
    /// A whole snapshot was loaded over the previous image (whatever it lacked is gone).
    Snapshot {
        /// The highest offset and epoch the new image contains.
        provenance: MetadataProvenance,
        /// How long loading the snapshot took.
        elapsed: Duration,
    },
    /// Committed log batches were replayed on top of the previous image.
    LogDelta {
        /// The highest offset and epoch the new image contains.
        provenance: MetadataProvenance,
        /// The leader when the image was published.
        leader_and_epoch: LeaderAndEpoch,
        /// Data batches replayed into this delta.
        num_batches: usize,
        /// Their size in bytes.
        num_bytes: u64,
        /// From the first of those batches to publication.
        elapsed: Duration,
    },
}

impl LoaderManifest {
    /// The highest offset and epoch included in the new image.
    #[must_use]
    pub fn provenance(&self) -> MetadataProvenance {
        match self {
            LoaderManifest::Snapshot { provenance, .. }
            | LoaderManifest::LogDelta { provenance, .. } => *provenance,
        }
    }

    /// Whether the image came from a snapshot (Kafka's `LoaderManifestType.SNAPSHOT`).
    #[must_use]
    pub fn is_snapshot(&self) -> bool {
        matches!(self, LoaderManifest::Snapshot { .. })
    }
}

/// Something that acts on published metadata images (see the module doc). Kafka's
/// `MetadataPublisher`: the broker's replica manager and group coordinator, the controller
/// node's features publisher and, next, the ZooKeeper migration driver.
pub trait MetadataPublisher: Send {
    /// A short name for logs (Kafka's `name()`, e.g. `FeaturesPublisher`).
    fn name(&self) -> &str;

    /// The metadata log's leader changed (Kafka's `onControllerChange`). Called in log order
    /// with the updates, also while the loader is still catching up.
    fn on_controller_change(&mut self, _leader_and_epoch: LeaderAndEpoch) {}

    /// A new image: `delta` is what changed since the previous one (`delta.image()`),
    /// `image` the complete new state, `manifest` what was loaded. Must not block on IO that
    /// can wait forever: every publisher after this one waits for it.
    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    );

    /// The loader stops; nothing is published after this call.
    fn close(&mut self) {}
}
