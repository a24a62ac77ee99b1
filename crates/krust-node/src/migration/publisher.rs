//! [`MigrationPublisher`]: the controller node's metadata publisher that hands every published
//! image (and the leader changes the loader sees) to the migration task (Kafka's
//! `KRaftMigrationDriver` registers itself as a `MetadataPublisher` the same way).
//!
//! The loader calls publishers in order and waits for each: this one only queues the update
//! (an unbounded channel, so a stalled ZooKeeper never stalls the loader; the task coalesces a
//! backlog, since each update carries the whole image).

use krust_metadata::image::{LeaderAndEpoch, LoaderManifest, MetadataPublisher};
use krust_metadata::{MetadataDelta, MetadataImage};
use tokio::sync::mpsc;

/// What the loader published, for the migration task.
#[derive(Debug)]
pub enum MetadataEvent {
    /// The metadata log's leader changed.
    LeaderChange(LeaderAndEpoch),
    /// A new image: what changed (`delta`), the image, and what was loaded.
    Update {
        /// The change since the previous image.
        delta: Box<MetadataDelta>,
        /// The new image.
        image: MetadataImage,
        /// A snapshot (the driver reconciles fully) or log deltas.
        manifest: LoaderManifest,
    },
}

/// Forwards published metadata to the migration task.
#[derive(Debug)]
pub struct MigrationPublisher {
    events: mpsc::UnboundedSender<MetadataEvent>,
}

impl MigrationPublisher {
    /// The publisher and the receiving end the migration task reads.
    #[must_use]
    pub fn new() -> (Self, mpsc::UnboundedReceiver<MetadataEvent>) {
        let (events, rx) = mpsc::unbounded_channel();
        (Self { events }, rx)
    }
}

impl MetadataPublisher for MigrationPublisher {
    fn name(&self) -> &str {
        "KRaftMigrationDriver"
    }

    fn on_controller_change(&mut self, leader_and_epoch: LeaderAndEpoch) {
        // A closed channel means the task stopped; the loader goes on.
        let _ = self
            .events
            .send(MetadataEvent::LeaderChange(leader_and_epoch));
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        let _ = self.events.send(MetadataEvent::Update {
            delta: Box::new(delta.clone()),
            image: image.clone(),
            manifest: *manifest,
        });
    }
}
