//! The controller server's features publisher (Kafka's `FeaturesPublisher`): the finalized
//! features of each image the node's metadata loader publishes, for the controller
//! listener's ApiVersions.

use std::sync::Arc;

use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use tokio::sync::watch;

/// The finalized features as ApiVersions reports them: the published image's levels, with
/// the offset of the image that last changed them as epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizedFeatures {
    /// `FinalizedFeaturesEpoch`.
    pub epoch: i64,
    /// `metadata.version` first, then every other finalized feature by name.
    pub levels: Vec<(String, i16)>,
}

/// Publishes the finalized features of each image that changed them (see the module doc).
#[derive(Debug)]
pub struct FeaturesPublisher {
    features: Arc<watch::Sender<Option<FinalizedFeatures>>>,
}

impl FeaturesPublisher {
    /// A publisher writing to `features`.
    #[must_use]
    pub fn new(features: Arc<watch::Sender<Option<FinalizedFeatures>>>) -> Self {
        FeaturesPublisher { features }
    }
}

impl MetadataPublisher for FeaturesPublisher {
    fn name(&self) -> &str {
        "FeaturesPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        // Before the first metadata.version record there is nothing finalized to report.
        if image.is_empty() {
            return;
        }
        let unchanged = delta.features_delta().is_none() && self.features.borrow().is_some();
        if unchanged {
            return;
        }
        let features = &image.features;
        let mut levels = vec![(
            krust_metadata::metadata_version::FEATURE_NAME.to_owned(),
            features.metadata_version.feature_level(),
        )];
        levels.extend(
            features
                .finalized_levels
                .iter()
                .map(|(name, level)| (name.clone(), *level)),
        );
        self.features.send_replace(Some(FinalizedFeatures {
            epoch: image.provenance.last_contained_offset,
            levels,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krust_log::batch::{RecordBatch, RecordBatchBuilder};
    use krust_metadata::ApiMessageAndVersion;
    use krust_metadata::image::MetadataLoader;
    use krust_metadata::records::{FeatureLevelRecord, MetadataRecord, NoOpRecord, TopicRecord};
    use std::time::Instant;

    fn batch(base_offset: i64, records: Vec<MetadataRecord>) -> RecordBatch {
        let mut builder = RecordBatchBuilder::new(base_offset).partition_leader_epoch(1);
        for record in records {
            let value = ApiMessageAndVersion::new(record, 0)
                .encode()
                .expect("encodes");
            builder.append_kv(0, None, Some(value));
        }
        builder.build()
    }

    fn feature(name: &str, level: i16) -> MetadataRecord {
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new(name, level))
    }

    /// The publisher is registered with a `MetadataLoader` and learns about features only
    /// through it: nothing before the loader caught up, then the levels of each image that
    /// changed them, with that image's offset as epoch.
    #[test]
    fn finalized_features_follow_the_images_the_loader_publishes() {
        let (tx, rx) = watch::channel(None);
        let mut loader = MetadataLoader::new(vec![Box::new(FeaturesPublisher::new(Arc::new(tx)))]);
        let now = Instant::now();
        loader.handle_commit(now, &[batch(0, vec![feature("metadata.version", 21)])], 5);
        assert_eq!(*rx.borrow(), None, "held while catching up");
        loader.handle_commit(now, &[batch(1, vec![feature("group.version", 1)])], 5);
        loader.handle_commit(
            now,
            &[batch(2, vec![MetadataRecord::NoOp(NoOpRecord::default())])],
            3,
        );
        let expected = FinalizedFeatures {
            epoch: 1,
            levels: vec![
                ("metadata.version".to_owned(), 21),
                ("group.version".to_owned(), 1),
            ],
        };
        assert_eq!(rx.borrow().as_ref(), Some(&expected));
        // An image that does not touch the features leaves them (and their epoch) alone.
        loader.handle_commit(
            now,
            &[batch(
                3,
                vec![MetadataRecord::Topic(TopicRecord {
                    name: "t".to_owned(),
                    ..Default::default()
                })],
            )],
            4,
        );
        assert_eq!(rx.borrow().as_ref(), Some(&expected));
    }
}
