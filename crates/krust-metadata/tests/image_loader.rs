//! `MetadataBatchLoader`: when committed batches become published images, with KIP-868
//! metadata transactions (facts §3.3; Kafka 3.9 `MetadataBatchLoader`).

use krust_metadata::image::loader::LoadFault;
use krust_metadata::image::{MetadataBatchLoader, MetadataImage, MetadataProvenance, ReplayError};
use krust_metadata::records::*;
use uuid::Uuid;

fn topic(n: u64) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: format!("t{n}"),
        topic_id: Uuid::from_u64_pair(1, n),
        ..Default::default()
    })
}

fn begin() -> MetadataRecord {
    MetadataRecord::BeginTransaction(BeginTransactionRecord::default())
}

fn end() -> MetadataRecord {
    MetadataRecord::EndTransaction(EndTransactionRecord::default())
}

fn abort() -> MetadataRecord {
    MetadataRecord::AbortTransaction(AbortTransactionRecord {
        reason: Some("Controller failover".into()),
        ..Default::default()
    })
}

fn names(image: &MetadataImage) -> Vec<String> {
    image.topics.by_name.keys().cloned().collect()
}

#[test]
fn records_outside_transactions_are_published_at_the_next_flush() {
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    let outcome = loader.load_batch(0, 1, 100, &[topic(1), topic(2)]);
    assert!(outcome.publications.is_empty() && outcome.faults.is_empty());
    assert!(
        loader.image().topics.by_id.is_empty(),
        "nothing published before the flush"
    );
    loader.load_batch(2, 1, 200, &[MetadataRecord::NoOp(NoOpRecord::default())]);
    let published = loader.maybe_flush().expect("published");
    assert_eq!(names(&published.image), vec!["t1", "t2"]);
    assert_eq!(
        published.image.provenance,
        MetadataProvenance::new(2, 1, 200)
    );
    assert_eq!(
        published
            .delta
            .topics_delta()
            .map(|t| t.created_topics().len()),
        Some(2)
    );
    assert!(loader.maybe_flush().is_none(), "nothing new");
}

#[test]
fn a_transaction_is_published_only_once_it_ends() {
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    // t1 comes before the transaction in the same batch: published when Begin is seen.
    let outcome = loader.load_batch(0, 1, 100, &[topic(1), begin(), topic(2)]);
    assert_eq!(outcome.publications.len(), 1);
    assert_eq!(names(&outcome.publications[0].image), vec!["t1"]);
    assert_eq!(
        outcome.publications[0].image.provenance,
        MetadataProvenance::new(0, 1, 100)
    );
    assert!(loader.in_transaction());
    assert!(loader.maybe_flush().is_none(), "open transaction");
    loader.load_batch(3, 2, 300, &[topic(3)]);
    assert!(loader.maybe_flush().is_none(), "still open across batches");
    loader.load_batch(4, 2, 400, &[end()]);
    let published = loader.maybe_flush().expect("ended");
    assert_eq!(names(&published.image), vec!["t1", "t2", "t3"]);
    assert_eq!(
        published.image.provenance,
        MetadataProvenance::new(4, 2, 400)
    );
}

#[test]
fn an_aborted_transaction_is_dropped_but_the_offset_advances() {
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    loader.load_batch(0, 1, 100, &[topic(1)]);
    let first = loader.maybe_flush().expect("published");
    assert_eq!(first.image.provenance.last_contained_offset, 0);
    loader.load_batch(1, 1, 110, &[begin(), topic(2), topic(3)]);
    let outcome = loader.load_batch(4, 2, 120, &[abort(), topic(4)]);
    assert!(outcome.faults.is_empty());
    let published = loader.maybe_flush().expect("published after abort");
    assert_eq!(names(&published.image), vec!["t1", "t4"]);
    assert_eq!(published.image.provenance.last_contained_offset, 5);
    assert_eq!(published.image.topics.by_id.len(), 2);
    // Abort alone: an empty delta that moves the offset, sharing every sub-image.
    loader.load_batch(6, 2, 130, &[begin(), topic(5)]);
    loader.load_batch(8, 2, 140, &[abort()]);
    let empty = loader.maybe_flush().expect("empty delta");
    assert_eq!(empty.image.provenance.last_contained_offset, 8);
    assert!(std::sync::Arc::ptr_eq(
        &empty.image.topics,
        &published.image.topics
    ));
    assert!(empty.delta.topics_delta().is_none());
}

#[test]
fn unbalanced_markers_and_bad_records_are_faults_and_loading_goes_on() {
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    let outcome = loader.load_batch(
        10,
        1,
        100,
        &[
            end(),
            abort(),
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: Uuid::from_u64_pair(9, 9),
                ..Default::default()
            }),
            begin(),
            begin(),
            topic(1),
            end(),
        ],
    );
    assert_eq!(
        outcome.faults,
        vec![
            LoadFault::EndWithoutBegin { offset: 10 },
            LoadFault::AbortWithoutBegin { offset: 11 },
            LoadFault::Replay {
                offset: 12,
                source: ReplayError::UnknownTopic {
                    topic_id: Uuid::from_u64_pair(9, 9)
                }
            },
            LoadFault::NestedBegin { offset: 14 },
        ]
    );
    let published = loader.maybe_flush().expect("published");
    assert_eq!(names(&published.image), vec!["t1"]);
    assert_eq!(published.image.provenance.last_contained_offset, 16);
}

#[test]
fn a_snapshot_supersedes_what_was_loaded_and_is_published_at_once() {
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    loader.load_batch(0, 1, 100, &[topic(1), topic(2)]);
    loader.maybe_flush().expect("published");
    loader.load_batch(2, 1, 110, &[begin(), topic(3)]);
    let at = MetadataProvenance::new(99, 4, 999);
    let (published, faults) = loader.load_snapshot(&[topic(2), topic(7)], at);
    assert!(faults.is_empty());
    assert_eq!(names(&published.image), vec!["t2", "t7"]);
    assert_eq!(published.image.provenance, at);
    assert_eq!(
        published
            .delta
            .topics_delta()
            .map(|t| t.deleted_topic_ids().len()),
        Some(1),
        "t1 is gone"
    );
    assert!(!loader.in_transaction());
    assert!(loader.maybe_flush().is_none());
    loader.load_batch(100, 4, 1000, &[topic(8)]);
    let next = loader.maybe_flush().expect("published");
    assert_eq!(names(&next.image), vec!["t2", "t7", "t8"]);
}
