//! The committed metadata of the in-test controllers (`groups_runtime_broker`,
//! `replication_cluster`): the image, every committed record, and the brokers each commit is
//! published to, as the controller's log and the brokers' metadata loaders would.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use krust_broker::server::Broker;
use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance, Publication};
use krust_metadata::records::MetadataRecord;

/// What the in-test controller has committed, and who hears of it.
#[derive(Default)]
pub struct MetadataLog {
    pub image: MetadataImage,
    /// Every committed record, to replay into a (re)started broker.
    pub log: Vec<MetadataRecord>,
    /// Offset of the last commit (one per `commit`).
    pub offset: i64,
    pub brokers: BTreeMap<i32, Weak<Broker>>,
}

impl MetadataLog {
    /// Commits `records` and publishes the new image to every live broker.
    pub fn commit(&mut self, records: &[MetadataRecord]) {
        let mut delta = MetadataDelta::new(&self.image);
        for record in records {
            delta.replay(record).expect("record fits the image");
        }
        self.log.extend(records.iter().cloned());
        self.offset += 1;
        let image = delta.apply(MetadataProvenance::new(self.offset, 1, 0));
        self.image = image.clone();
        let publication = Publication { delta, image };
        for broker in self.brokers.values().filter_map(Weak::upgrade) {
            broker.publish(&publication);
        }
    }

    /// Publishes everything so far to a (re)started broker, as a snapshot load would, and
    /// publishes later commits to it.
    pub fn attach(&mut self, node_id: i32, broker: &Arc<Broker>) {
        self.brokers.insert(node_id, Arc::downgrade(broker));
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for record in &self.log {
            delta.replay(record).expect("logged record");
        }
        let image = delta.apply(MetadataProvenance::new(self.offset, 1, 0));
        broker.publish(&Publication { delta, image });
    }
}
