//! `MetadataLoader`: committed batches and snapshots in, images out to the publishers
//! registered at construction, only once caught up with the high watermark (Kafka 3.9's
//! `MetadataLoader`, `MetadataPublisher`, `LoaderManifest`). A recording publisher sees exactly
//! what the loader hands it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_log::batch::{RecordBatch, RecordBatchBuilder};
use krust_metadata::ApiMessageAndVersion;
use krust_metadata::image::{
    LeaderAndEpoch, LoadFault, LoaderManifest, MetadataDelta, MetadataImage, MetadataLoader,
    MetadataProvenance, MetadataPublisher,
};
use krust_metadata::records::*;
use uuid::Uuid;

/// What a publisher was told, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Leader(LeaderAndEpoch),
    Update {
        /// Topic names of the previous image (`delta.image()`).
        before: Vec<String>,
        /// Topic names of the new image.
        after: Vec<String>,
        manifest: LoaderManifest,
    },
    Closed,
}

/// Every call any recording publisher saw, with the publisher's name, in call order.
type Log = Arc<Mutex<Vec<(&'static str, Seen)>>>;

struct Recording {
    name: &'static str,
    seen: Log,
}

impl MetadataPublisher for Recording {
    fn name(&self) -> &str {
        self.name
    }
    fn on_controller_change(&mut self, leader_and_epoch: LeaderAndEpoch) {
        self.push(Seen::Leader(leader_and_epoch));
    }
    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        self.push(Seen::Update {
            before: names(delta.image()),
            after: names(image),
            manifest: *manifest,
        });
    }
    fn close(&mut self) {
        self.push(Seen::Closed);
    }
}

impl Recording {
    fn push(&self, seen: Seen) {
        self.seen.lock().expect("lock").push((self.name, seen));
    }
}

fn names(image: &MetadataImage) -> Vec<String> {
    image.topics.by_name.keys().cloned().collect()
}

fn topic(n: u64) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: format!("t{n}"),
        topic_id: Uuid::from_u64_pair(1, n),
        ..Default::default()
    })
}

fn value(record: MetadataRecord) -> Bytes {
    ApiMessageAndVersion::new(record, 0)
        .encode()
        .expect("encodes")
}

/// A committed data batch of `records` at `base_offset` in leader epoch `epoch`.
fn batch(base_offset: i64, epoch: i32, records: Vec<MetadataRecord>) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(base_offset).partition_leader_epoch(epoch);
    for record in records {
        builder.append_kv(1_000 + base_offset, None, Some(value(record)));
    }
    builder.build()
}

fn loader_with_two_publishers() -> (MetadataLoader, Log) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let publishers: Vec<Box<dyn MetadataPublisher>> = vec![
        Box::new(Recording {
            name: "first",
            seen: seen.clone(),
        }),
        Box::new(Recording {
            name: "second",
            seen: seen.clone(),
        }),
    ];
    (MetadataLoader::new(publishers), seen)
}

fn updates(seen: &Mutex<Vec<(&'static str, Seen)>>) -> Vec<(&'static str, Seen)> {
    seen.lock()
        .expect("lock")
        .iter()
        .filter(|(_, s)| matches!(s, Seen::Update { .. }))
        .cloned()
        .collect()
}

#[test]
fn nothing_is_published_before_the_high_watermark_then_every_image_in_order() {
    let (mut loader, seen) = loader_with_two_publishers();
    let t0 = Instant::now();
    assert_eq!(loader.publisher_names(), vec!["first", "second"]);
    let outcome = loader.handle_commit(t0, &[batch(0, 1, vec![topic(1)])], 3);
    assert!(!outcome.caught_up && outcome.faults.is_empty());
    assert!(
        outcome.data_bytes > 0,
        "a data batch counts toward snapshots"
    );
    assert!(updates(&seen).is_empty(), "held while catching up");
    assert_eq!(loader.applied_offset(), None);
    let outcome = loader.handle_commit(t0, &[batch(1, 1, vec![topic(2), topic(3)])], 3);
    assert!(outcome.caught_up);
    assert!(loader.is_caught_up());
    assert_eq!(loader.applied_offset(), Some(2));
    let got = updates(&seen);
    let names_after: Vec<(&str, Vec<String>)> = got
        .iter()
        .map(|(who, s)| match s {
            Seen::Update { after, .. } => (*who, after.clone()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        names_after,
        vec![
            ("first", vec!["t1".to_owned()]),
            ("second", vec!["t1".to_owned()]),
            (
                "first",
                vec!["t1".to_owned(), "t2".to_owned(), "t3".to_owned()]
            ),
            (
                "second",
                vec!["t1".to_owned(), "t2".to_owned(), "t3".to_owned()]
            ),
        ],
        "the held images, in log order, each to every publisher in registration order"
    );
    assert_eq!(loader.published(), 2);
}

#[test]
fn a_log_delta_manifest_counts_batches_bytes_and_carries_the_leader() {
    let (mut loader, seen) = loader_with_two_publishers();
    let leader = LeaderAndEpoch {
        leader_id: Some(3000),
        leader_epoch: 4,
    };
    loader.handle_leader_change(leader);
    let t0 = Instant::now();
    let batches = [batch(0, 4, vec![topic(1)]), batch(1, 4, vec![topic(2)])];
    let bytes: u64 = batches.iter().map(|b| b.size_in_bytes() as u64).sum();
    loader.handle_commit(t0 + Duration::from_millis(5), &batches, 2);
    let got = updates(&seen);
    let Some((
        _,
        Seen::Update {
            before,
            after,
            manifest,
        },
    )) = got.first()
    else {
        panic!("no update: {got:?}");
    };
    assert!(before.is_empty(), "the delta's previous image");
    assert_eq!(after, &vec!["t1".to_owned(), "t2".to_owned()]);
    assert_eq!(
        *manifest,
        LoaderManifest::LogDelta {
            provenance: MetadataProvenance::new(1, 4, 1_001),
            leader_and_epoch: leader,
            num_batches: 2,
            num_bytes: bytes,
            elapsed: Duration::ZERO,
        }
    );
    let leaders: Vec<_> = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|(_, s)| matches!(s, Seen::Leader(_)))
        .cloned()
        .collect();
    assert_eq!(
        leaders,
        vec![
            ("first", Seen::Leader(leader)),
            ("second", Seen::Leader(leader))
        ],
        "leader changes reach the publishers at once, even while catching up"
    );
}

#[test]
fn a_snapshot_replaces_the_image_and_says_so_in_its_manifest() {
    let (mut loader, seen) = loader_with_two_publishers();
    let t0 = Instant::now();
    loader.handle_commit(t0, &[batch(0, 1, vec![topic(1)])], 1);
    let provenance = MetadataProvenance::new(9, 2, 5_000);
    let outcome = loader.handle_load_snapshot(
        t0,
        t0 + Duration::from_millis(7),
        &[value(topic(2))],
        provenance,
        10,
    );
    assert!(outcome.faults.is_empty());
    assert_eq!(loader.delivered_end(), 10);
    let got = updates(&seen);
    assert_eq!(
        got.last(),
        Some(&(
            "second",
            Seen::Update {
                before: vec!["t1".to_owned()],
                after: vec!["t2".to_owned()],
                manifest: LoaderManifest::Snapshot {
                    provenance,
                    elapsed: Duration::from_millis(7),
                },
            }
        ))
    );
    // Batches the snapshot covers are skipped.
    let outcome = loader.handle_commit(t0, &[batch(5, 1, vec![topic(3)])], 10);
    assert_eq!(outcome.data_bytes, 0);
    assert_eq!(names(loader.image()), vec!["t2"]);
}

#[test]
fn records_that_do_not_load_are_reported_and_skipped() {
    let (mut loader, seen) = loader_with_two_publishers();
    let mut builder = RecordBatchBuilder::new(0).partition_leader_epoch(1);
    builder.append_kv(1, None, Some(value(topic(1))));
    builder.append_kv(1, None, Some(Bytes::from_static(&[9, 9, 9])));
    builder.append_kv(1, None, None);
    let outcome = loader.handle_commit(Instant::now(), &[builder.build()], 3);
    assert!(
        matches!(
            outcome.faults.as_slice(),
            [
                LoadFault::Decode { offset: 1, .. },
                LoadFault::NoValue { offset: 2 }
            ]
        ),
        "{:?}",
        outcome.faults
    );
    assert_eq!(
        names(loader.image()),
        vec!["t1"],
        "the good record is loaded"
    );
    assert_eq!(updates(&seen).len(), 2);
}

#[test]
fn control_batches_advance_the_applied_offset_without_an_image() {
    let (mut loader, seen) = loader_with_two_publishers();
    let t0 = Instant::now();
    loader.handle_commit(t0, &[batch(0, 1, vec![topic(1)])], 1);
    let mut control = RecordBatchBuilder::new(1).control(true);
    control.append_kv(1, Some(Bytes::from_static(&[0, 0, 0, 2])), None);
    loader.handle_commit(t0, &[control.build()], 2);
    assert_eq!(loader.applied_offset(), Some(1));
    assert_eq!(updates(&seen).len(), 2, "one image, two publishers");
}

#[test]
fn close_reaches_every_publisher_once_and_ends_publishing() {
    let (mut loader, seen) = loader_with_two_publishers();
    loader.close();
    loader.close();
    loader.handle_commit(Instant::now(), &[batch(0, 1, vec![topic(1)])], 1);
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![("first", Seen::Closed), ("second", Seen::Closed)]
    );
}
