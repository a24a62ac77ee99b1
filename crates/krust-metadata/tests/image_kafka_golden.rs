//! Golden files from a real Apache Kafka 3.9 node (run by `krust-testkit`), formatted at
//! metadata.version 3.9-IV0 and again at 3.5-IV2: its metadata log segment and a snapshot it wrote
//! are replayed by krust into images, and
//! - the log's image holds what was done to Kafka (topics with their partitions, topic
//!   configs, the broker and controller registrations, metadata.version, a SCRAM credential);
//! - the snapshot's image equals krust's image of the log up to the snapshot's end offset, so
//!   Kafka's `MetadataImage` and ours agree record for record;
//! - krust writes that image back as the same records Kafka's snapshot holds;
//! - the `MetadataBatchLoader` fed the log batch by batch (with the bootstrap transaction of
//!   3.6-IV1+) publishes the same image as a straight replay.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_metadata::image::configs::ConfigResource;
use krust_metadata::image::{
    MetadataBatchLoader, MetadataDelta, MetadataImage, MetadataProvenance, read_image_snapshot,
};
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName, SnapshotId};
use krust_testkit::{KafkaDist, KafkaNode};

/// A data batch of the metadata log: base offset, leader epoch, append time, records.
type LogBatch = (i64, i32, i64, Vec<MetadataRecord>);

/// Every data batch of the metadata log, in offset order.
fn read_log(dir: &Path) -> Vec<LogBatch> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .expect("metadata log dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let mut batches = Vec::new();
    for segment in segments {
        let mut rest = Bytes::from(std::fs::read(&segment).expect("segment"));
        while !rest.is_empty() {
            let (batch, tail) = RecordBatch::parse_default(rest).expect("valid batch");
            rest = tail;
            if batch.is_control() {
                continue;
            }
            let mut records = Vec::new();
            for (expected_delta, record) in (0..).zip(batch.records().expect("records")) {
                assert_eq!(record.offset_delta, expected_delta, "contiguous offsets");
                let value = record.value.expect("metadata records have values");
                let framed = ApiMessageAndVersion::decode(&value).expect("a metadata record");
                records.push(framed.record);
            }
            batches.push((
                batch.base_offset(),
                batch.partition_leader_epoch(),
                batch.base_timestamp(),
                records,
            ));
        }
    }
    batches
}

/// The records of `batches` with their offsets.
fn with_offsets(batches: &[LogBatch]) -> Vec<(i64, &MetadataRecord)> {
    batches
        .iter()
        .flat_map(|(base, _, _, records)| (*base..).zip(records))
        .collect()
}

fn latest_snapshot(dir: &Path) -> Option<SnapshotId> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            SnapshotFileName::parse(&name).ok().flatten()
        })
        .filter(|f| f.kind == SnapshotFileKind::Frozen)
        .map(|f| f.id)
        .max_by_key(|id| id.end_offset)
}

fn load_snapshot(dir: &Path, id: SnapshotId) -> MetadataImage {
    let bytes = std::fs::read(dir.join(id.file_name())).expect("snapshot file");
    read_image_snapshot(Bytes::from(bytes), id).expect("Kafka's snapshot loads")
}

fn snapshot_records(dir: &Path, id: SnapshotId) -> Vec<ApiMessageAndVersion> {
    let bytes = std::fs::read(dir.join(id.file_name())).expect("snapshot file");
    krust_raft::snapshot::read_snapshot(Bytes::from(bytes), Some(id.epoch))
        .expect("valid snapshot")
        .records
        .iter()
        .map(|v| ApiMessageAndVersion::decode(v).expect("metadata record"))
        .collect()
}

/// Records compared as a multiset: Kafka writes map entries in hash order.
fn sorted(records: &[ApiMessageAndVersion]) -> Vec<String> {
    let mut out: Vec<String> = records.iter().map(|r| format!("{r:?}")).collect();
    out.sort();
    out
}

/// Both runs share one test so that only one JVM runs at a time on a 2-core machine.
#[test]
fn krust_replays_kafkas_metadata_log_and_snapshot() {
    let dist =
        KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh) and java");
    // 3.9-IV0: transactions, controller registrations, directories (RegisterBroker v3,
    // PartitionRecord v1). 3.5-IV2: none of those (RegisterBroker v2, PartitionRecord v0).
    check_against_kafka(&dist, None, MetadataVersion::IBP_3_9_IV0);
    check_against_kafka(&dist, Some("3.5"), MetadataVersion::IBP_3_5_IV2);
}

fn check_against_kafka(dist: &KafkaDist, release: Option<&str>, expected: MetadataVersion) {
    let mut builder = KafkaNode::builder(dist);
    if let Some(release) = release {
        builder = builder.format_arg("--release-version").format_arg(release);
    }
    let mut node = builder
        .format_arg("--add-scram")
        .format_arg("SCRAM-SHA-256=[name=alice,password=alice-secret]")
        .prop("metadata.log.max.snapshot.interval.ms", 1000)
        .start()
        .expect("Kafka starts");
    node.create_topic("golden-a", 3, &[("retention.ms", "12345")])
        .expect("create golden-a");
    node.create_topic("golden-b", 1, &[])
        .expect("create golden-b");
    let metadata_dir = node.log_dir().join("__cluster_metadata-0");

    // Wait for a snapshot that holds both topics.
    let deadline = Instant::now() + Duration::from_secs(60);
    let snapshot_id = loop {
        if let Some(id) = latest_snapshot(&metadata_dir) {
            let image = load_snapshot(&metadata_dir, id);
            if image.topics.topic_by_name("golden-b").is_some() {
                break id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Kafka wrote no snapshot with both topics in 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    node.terminate(Duration::from_secs(60)).expect("clean stop");

    let batches = read_log(&metadata_dir);
    let log = with_offsets(&batches);
    let (last_offset, _) = log.last().copied().expect("records");
    let (_, last_epoch, last_time, _) = batches.last().expect("batches");
    let log_image = MetadataImage::from_records(
        log.iter().map(|(_, r)| *r),
        MetadataProvenance::new(last_offset, *last_epoch, *last_time),
    )
    .expect("krust replays Kafka's log");

    // The loader, fed batch by batch with a commit point after each, publishes the same image
    // (Kafka's bootstrap records sit in a metadata transaction from 3.6-IV1 on).
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    for (base_offset, epoch, time, records) in &batches {
        let outcome = loader.load_batch(*base_offset, *epoch, *time, records);
        assert!(outcome.faults.is_empty(), "{:?}", outcome.faults);
        loader.maybe_flush();
    }
    assert!(!loader.in_transaction());
    assert_eq!(
        log.iter()
            .any(|(_, r)| matches!(r, MetadataRecord::BeginTransaction(_))),
        expected.is_metadata_transaction_supported(),
        "bootstrap records in a transaction exactly from 3.6-IV1 on"
    );
    assert_eq!(loader.image(), &log_image);

    assert_eq!(log_image.metadata_version(), expected);
    let jbod = expected.is_directory_assignment_supported();
    let node_id = node.node_id();
    let a = log_image
        .topics
        .topic_by_name("golden-a")
        .expect("golden-a");
    assert_eq!(a.partitions.len(), 3);
    for (partition_id, p) in &a.partitions {
        assert_eq!(p.replicas, vec![node_id], "golden-a-{partition_id}");
        assert_eq!(p.isr, vec![node_id]);
        // SIGTERM ran a controlled shutdown: the controller moved leadership off the broker,
        // and with no other replica that leaves the partition without a leader.
        assert_eq!(
            p.leader, -1,
            "golden-a-{partition_id} after controlled shutdown"
        );
        assert_eq!(p.directories.len(), 1);
    }
    assert_eq!(
        log_image
            .topics
            .topic_by_name("golden-b")
            .map(|t| t.partitions.len()),
        Some(1)
    );
    assert_eq!(
        log_image
            .configs
            .configs(&ConfigResource::topic("golden-a"))
            .get("retention.ms")
            .map(String::as_str),
        Some("12345")
    );
    let broker = log_image
        .cluster
        .broker(node_id)
        .expect("the broker registered");
    assert!(broker.listeners.contains_key("PLAINTEXT"), "{broker:?}");
    assert!(broker.fenced || broker.in_controlled_shutdown, "{broker:?}");
    assert_eq!(broker.directories.len(), usize::from(jbod));
    assert_eq!(
        log_image.cluster.controllers.contains_key(&node_id),
        expected.is_controller_registration_supported()
    );
    assert!(
        log_image
            .scram
            .credentials
            .contains_key(&(1, "alice".to_owned())),
        "SCRAM-SHA-256 credential from --add-scram"
    );

    // The snapshot is Kafka's image at its end offset; ours from the log must be equal.
    let snapshot_image = load_snapshot(&metadata_dir, snapshot_id);
    let a = snapshot_image
        .topics
        .topic_by_name("golden-a")
        .expect("golden-a");
    assert!(a.partitions.values().all(|p| p.leader == node_id), "{a:?}");
    assert!(
        !snapshot_image
            .cluster
            .broker(node_id)
            .expect("registered")
            .fenced
    );
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for (offset, record) in &log {
        if *offset < snapshot_id.end_offset {
            delta.replay(record).expect("prefix replays");
        }
    }
    let prefix_image = delta.apply(snapshot_image.provenance);
    assert_eq!(prefix_image, snapshot_image);

    // And krust writes that image as the records Kafka's snapshot holds.
    let ours = snapshot_image
        .to_records(snapshot_image.metadata_version())
        .expect("writable at its own version");
    assert_eq!(
        sorted(&ours),
        sorted(&snapshot_records(&metadata_dir, snapshot_id)),
        "metadata.version {expected}"
    );
}
