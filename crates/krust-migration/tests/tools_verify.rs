//! `krust migration verify`: ZooKeeper read by the migration's reader into an image, diffed
//! with the quorum's image. Equal metadata gives no difference (whatever the random ACL ids);
//! every kind of drift is one line naming what differs.

use krust_metadata::records::{MetadataRecord, PartitionChangeRecord, RemoveTopicRecord};
use krust_metadata::{MetadataDelta, MetadataImage, MetadataProvenance, MetadataVersion};
use krust_migration::reader::read_all_metadata;
use krust_migration::tools::verify::{diff_images, zk_image};
use krust_zk::model::topics::uuid_from_kafka_string;
use krust_zk::ops::Stat;
use krust_zk::tree::ZkTree;
use rand::SeedableRng;

const MV: MetadataVersion = MetadataVersion::IBP_3_9_IV0;
const FOO_ID: &str = "7DYWEHTfSrm7Gzv9BSMfSg";

fn put(tree: &mut ZkTree, path: &str, data: &str, version: i32) {
    tree.insert_read(
        path,
        data.as_bytes().to_vec(),
        Stat {
            version,
            ..Stat::default()
        },
    );
}

fn cluster() -> ZkTree {
    let mut t = ZkTree::new();
    put(
        &mut t,
        "/brokers/topics/foo",
        &format!(
            r#"{{"partitions":{{"0":[1,2],"1":[2,1]}},"topic_id":"{FOO_ID}","adding_replicas":{{}},"removing_replicas":{{}},"version":3}}"#
        ),
        0,
    );
    put(
        &mut t,
        "/brokers/topics/foo/partitions/0/state",
        r#"{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}"#,
        6,
    );
    put(
        &mut t,
        "/brokers/topics/foo/partitions/1/state",
        r#"{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":1,"isr":[2,1]}"#,
        1,
    );
    put(
        &mut t,
        "/config/topics/foo",
        r#"{"version":1,"config":{"retention.ms":"1000"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/brokers/<default>",
        r#"{"version":1,"config":{"log.cleaner.threads":"2"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/users/alice",
        r#"{"version":1,"config":{"producer_byte_rate":"1024"}}"#,
        0,
    );
    put(
        &mut t,
        "/kafka-acl/Topic/foo",
        r#"{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}"#,
        0,
    );
    put(
        &mut t,
        "/latest_producer_id_block",
        r#"{"version":1,"broker":1,"block_start":"0","block_end":"999"}"#,
        0,
    );
    t
}

/// The quorum's image as the copy built it (with other random ACL ids), then `extra` records.
fn kraft(tree: &ZkTree, extra: &[MetadataRecord]) -> MetadataImage {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let batches = read_all_metadata(tree, MV, None, &mut rng).expect("reads");
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for r in batches.batches.iter().flatten() {
        delta.replay(&r.record).expect("replays");
    }
    for r in extra {
        delta.replay(r).expect("replays");
    }
    delta.apply(MetadataProvenance::new(10, 1, 0))
}

fn lines(zk: &ZkTree, kraft_image: &MetadataImage) -> Vec<String> {
    let zk = zk_image(zk, MV, None).expect("ZooKeeper reads");
    diff_images(&zk, kraft_image, false)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn equal_metadata_has_no_difference() {
    let t = cluster();
    assert_eq!(lines(&t, &kraft(&t, &[])), Vec::<String>::new());
}

/// Dual-write stores the block starting at the quorum's next id (Kafka's `writeProducerId`):
/// ZooKeeper's next id is then one block ahead, which is agreement, not drift.
#[test]
fn the_producer_id_block_dual_write_stores_agrees() {
    let mut t = cluster();
    put(
        &mut t,
        "/latest_producer_id_block",
        r#"{"version":1,"broker":-1,"block_start":"1000","block_end":"1999"}"#,
        1,
    );
    assert_eq!(lines(&t, &kraft(&cluster(), &[])), Vec::<String>::new());
}

#[test]
fn partition_topic_and_config_drift_is_reported() {
    let t = cluster();
    let foo = uuid_from_kafka_string(FOO_ID).expect("id");
    let shrink = MetadataRecord::PartitionChange(PartitionChangeRecord {
        partition_id: 0,
        topic_id: foo,
        isr: Some(vec![1]),
        ..PartitionChangeRecord::default()
    });
    let image = kraft(&t, &[shrink]);
    let diffs = lines(&t, &image);
    assert!(
        diffs.contains(&"topic foo partition 0 isr: zookeeper=[1, 2] kraft=[1]".to_owned()),
        "{diffs:#?}"
    );
    // ZooKeeper changed behind the quorum's back.
    let mut drifted = cluster();
    put(
        &mut drifted,
        "/config/topics/foo",
        r#"{"version":1,"config":{"retention.ms":"5"}}"#,
        1,
    );
    put(
        &mut drifted,
        "/config/users/alice",
        r#"{"version":1,"config":{"producer_byte_rate":"1"}}"#,
        1,
    );
    put(
        &mut drifted,
        "/latest_producer_id_block",
        r#"{"version":1,"broker":1,"block_start":"5000","block_end":"5999"}"#,
        1,
    );
    put(
        &mut drifted,
        "/kafka-acl/Topic/foo",
        r#"{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow","operation":"Read","host":"*"}]}"#,
        1,
    );
    let diffs = lines(&drifted, &kraft(&t, &[]));
    let has = |needle: &str| diffs.iter().any(|d| d.starts_with(needle));
    assert!(
        has("config topic foo retention.ms: zookeeper=\"5\" kraft=\"1000\""),
        "{diffs:#?}"
    );
    assert!(has("client quota user=alice:"), "{diffs:#?}");
    assert!(
        has("producer ids next block: zookeeper=6000 kraft=1000"),
        "{diffs:#?}"
    );
    assert!(
        has("acl resource_type=2 name=\"foo\" pattern_type=3 principal=\"User:bob\""),
        "{diffs:#?}"
    );
    assert!(
        diffs
            .iter()
            .any(|d| d.contains("User:alice") && d.ends_with("zookeeper=absent kraft=present x1")),
        "{diffs:#?}"
    );
    // A topic the quorum deleted but ZooKeeper still has.
    let removed = kraft(
        &t,
        &[MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: foo,
            ..RemoveTopicRecord::default()
        })],
    );
    let diffs = lines(&t, &removed);
    assert!(
        diffs
            .iter()
            .any(|d| d.starts_with("topic foo: zookeeper=id ") && d.ends_with("kraft=absent")),
        "{diffs:#?}"
    );
}

#[test]
fn bad_znodes_are_errors() {
    let mut t = cluster();
    put(&mut t, "/brokers/topics/bar", "not json", 0);
    assert!(zk_image(&t, MV, None).is_err());
    assert!(zk_image(&cluster(), MetadataVersion::IBP_3_3_IV3, None).is_err());
}
