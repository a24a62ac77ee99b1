//! The controller server's metadata cache (Kafka's `KRaftMetadataCachePublisher` on a
//! controller node): the last image the node's metadata loader published, for the controller
//! listener's read-only APIs (DescribeConfigs).

use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use tokio::sync::watch;

/// Keeps the last published image in a watch channel (images are cheap to clone: their
/// sub-images are shared).
#[derive(Debug)]
pub struct MetadataCachePublisher {
    image: watch::Sender<Option<MetadataImage>>,
}

impl MetadataCachePublisher {
    /// A publisher writing to `image`.
    #[must_use]
    pub fn new(image: watch::Sender<Option<MetadataImage>>) -> Self {
        MetadataCachePublisher { image }
    }
}

impl MetadataPublisher for MetadataCachePublisher {
    fn name(&self) -> &str {
        "KRaftMetadataCachePublisher"
    }

    fn on_metadata_update(
        &mut self,
        _delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        self.image.send_replace(Some(image.clone()));
    }
}
