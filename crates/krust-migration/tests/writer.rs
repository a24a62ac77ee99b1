//! The dual-write path (facts §6.7, §6.10): images and deltas become ZooKeeper writes
//! (`writer`), run fenced through a `MemZk` (`exec`), and read back (`reader`).
//!
//! The central property: whatever ZooKeeper held, reconciling it with an image and applying
//! the batch leaves a ZooKeeper from which the initial-copy reader rebuilds the image's
//! content; reconciling again then writes nothing. Deltas are checked the same way, from a
//! ZooKeeper in sync with the previous image. The executor is checked for its fence (a stale
//! fence writes nothing) and for re-application after ZooKeeper fails mid-batch.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use krust_metadata::records::{
    AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, DelegationTokenRecord,
    MetadataRecord, PartitionChangeRecord, PartitionRecord, ProducerIdsRecord, QuotaEntity,
    RemoveAccessControlEntryRecord, RemoveDelegationTokenRecord, RemoveTopicRecord, TopicRecord,
    UserScramCredentialRecord,
};
use krust_metadata::{MetadataDelta, MetadataImage, MetadataProvenance, MetadataVersion};
use krust_migration::exec::{ExecError, Fence, apply_batch};
use krust_migration::reader::{MIGRATION_READ_ROOTS, read_all_metadata};
use krust_migration::writer::{WriterContext, ZkWrite, ZkWriteBatch, op, reconcile, write_delta};
use krust_zk::backend::{MemZk, ZkBackend, read_tree};
use krust_zk::model::cluster::MigrationZNode;
use krust_zk::model::password::PasswordEncoder;
use krust_zk::model::paths;
use krust_zk::ops::{ANY_VERSION, MultiError, Stat, ZkError, ZkOp, ZkOpResult};
use krust_zk::tree::ZkTree;
use rand::SeedableRng;
use rand::rngs::StdRng;
use uuid::Uuid;

const FOO: Uuid = Uuid::from_u64_pair(1, 1);
const BAR: Uuid = Uuid::from_u64_pair(2, 2);
const ZED: Uuid = Uuid::from_u64_pair(3, 3);
const SECRET: &str = "secret";

fn ctx() -> WriterContext {
    WriterContext {
        kraft_controller_epoch: 5,
        password_encoder: Some(PasswordEncoder::new(SECRET)),
    }
}

fn topic(name: &str, id: Uuid) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: id,
        unknown_tagged_fields: vec![],
    })
}

fn partition(
    id: Uuid,
    p: i32,
    replicas: &[i32],
    leader: i32,
    leader_epoch: i32,
) -> PartitionRecord {
    PartitionRecord {
        partition_id: p,
        topic_id: id,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        removing_replicas: vec![],
        adding_replicas: vec![],
        leader,
        leader_recovery_state: 0,
        leader_epoch,
        partition_epoch: 3,
        directories: vec![],
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: vec![],
    }
}

fn config(resource_type: i8, resource: &str, name: &str, value: Option<&str>) -> MetadataRecord {
    MetadataRecord::Config(ConfigRecord {
        resource_type,
        resource_name: resource.into(),
        name: name.into(),
        value: value.map(str::to_owned),
        unknown_tagged_fields: vec![],
    })
}

fn quota(entity: &[(&str, Option<&str>)], key: &str, value: f64, remove: bool) -> MetadataRecord {
    MetadataRecord::ClientQuota(ClientQuotaRecord {
        entity: entity
            .iter()
            .map(|(t, n)| QuotaEntity {
                entity_type: (*t).into(),
                entity_name: n.map(str::to_owned),
                unknown_tagged_fields: vec![],
            })
            .collect(),
        key: key.into(),
        value,
        remove,
        unknown_tagged_fields: vec![],
    })
}

fn scram(user: &str, mechanism: i8, salt: u8) -> MetadataRecord {
    MetadataRecord::UserScramCredential(UserScramCredentialRecord {
        name: user.into(),
        mechanism,
        salt: vec![salt; 4],
        stored_key: vec![salt + 1; 8],
        server_key: vec![salt + 2; 8],
        iterations: 4096,
        unknown_tagged_fields: vec![],
    })
}

fn acl(
    id: u64,
    resource_type: i8,
    name: &str,
    pattern_type: i8,
    principal: &str,
    operation: i8,
) -> MetadataRecord {
    MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
        id: Uuid::from_u64_pair(9, id),
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission_type: 3,
        unknown_tagged_fields: vec![],
    })
}

fn token(id: &str, expiry: i64) -> MetadataRecord {
    MetadataRecord::DelegationToken(DelegationTokenRecord {
        owner: "User:alice".into(),
        requester: "User:alice".into(),
        renewers: vec!["User:b ob".into()],
        issue_timestamp: 1,
        max_timestamp: 10_000,
        expiration_timestamp: expiry,
        token_id: id.into(),
        unknown_tagged_fields: vec![],
    })
}

/// A cluster with something of every kind the migration writes.
fn base_records() -> Vec<MetadataRecord> {
    let mut recovering = partition(FOO, 1, &[2, 3, 4], 2, 7);
    recovering.isr = vec![2];
    recovering.leader_recovery_state = 1;
    let mut reassigning = partition(BAR, 0, &[1, 2, 3], 1, 0);
    reassigning.adding_replicas = vec![3];
    reassigning.removing_replicas = vec![1];
    vec![
        topic("foo", FOO),
        MetadataRecord::Partition(partition(FOO, 0, &[1, 2, 3], 1, 4)),
        MetadataRecord::Partition(recovering),
        topic("bar", BAR),
        MetadataRecord::Partition(reassigning),
        config(2, "foo", "retention.ms", Some("1000")),
        config(2, "foo", "cleanup.policy", Some("compact")),
        config(4, "1", "log.cleaner.threads", Some("2")),
        config(4, "", "ssl.keystore.password", Some("pa55word")),
        quota(
            &[("user", Some("alice"))],
            "producer_byte_rate",
            1024.0,
            false,
        ),
        quota(&[("user", None)], "consumer_byte_rate", 2048.0, false),
        quota(
            &[("user", Some("alice")), ("client-id", None)],
            "request_percentage",
            12.5,
            false,
        ),
        quota(
            &[("client-id", Some("app*"))],
            "producer_byte_rate",
            10.0,
            false,
        ),
        quota(
            &[("ip", Some("10.0.0.1"))],
            "connection_creation_rate",
            5.0,
            false,
        ),
        scram("alice", 1, 1),
        scram("carol", 2, 7),
        acl(1, 2, "foo", 3, "User:alice", 3),
        acl(2, 2, "foo", 3, "User:bob", 4),
        acl(3, 3, "app", 4, "User:alice", 8),
        token("tok1", 2000),
        MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 5,
            next_producer_id: 5000,
            unknown_tagged_fields: vec![],
        }),
    ]
}

fn image_of(records: &[MetadataRecord]) -> MetadataImage {
    MetadataImage::from_records(records.iter(), MetadataProvenance::new(10, 1, 0)).expect("replays")
}

/// An ensemble as a Kafka 3.9 cluster about to be dual-written leaves it: the persistent
/// paths, `/controller_epoch` claimed (version 1) and `/migration` written (version 0).
fn ensemble() -> MemZk {
    let zk = MemZk::default();
    zk.with_tree(|t| {
        for p in paths::PERSISTENT_PATHS {
            t.insert_read(p, Vec::new(), Stat::default());
        }
        t.insert_read(
            paths::CONTROLLER_EPOCH,
            b"8".to_vec(),
            Stat {
                version: 1,
                ..Stat::default()
            },
        );
        t.insert_read(
            paths::MIGRATION,
            MigrationZNode::EMPTY.encode(),
            Stat::default(),
        );
    });
    zk
}

fn fence() -> Fence {
    Fence {
        controller_epoch_zk_version: 1,
        migration_zk_version: 0,
    }
}

fn migration_json(offset: i64) -> Vec<u8> {
    MigrationZNode {
        kraft_controller_id: 3000,
        kraft_controller_epoch: 5,
        kraft_metadata_offset: offset,
        kraft_metadata_epoch: 5,
    }
    .encode()
}

async fn snapshot_of<B: ZkBackend>(zk: &B) -> ZkTree {
    read_tree(zk, MIGRATION_READ_ROOTS).await.expect("reads")
}

/// What the reader rebuilds from ZooKeeper, as an image.
async fn read_back(zk: &MemZk) -> MetadataImage {
    let tree = snapshot_of(zk).await;
    let mut rng = StdRng::seed_from_u64(3);
    let encoder = PasswordEncoder::new(SECRET);
    let batches = read_all_metadata(
        &tree,
        MetadataVersion::IBP_3_9_IV0,
        Some(&encoder),
        &mut rng,
    )
    .expect("reads back");
    let records: Vec<MetadataRecord> = batches
        .batches
        .into_iter()
        .flatten()
        .map(|r| r.record)
        .collect();
    image_of(&records)
}

/// The part of an image ZooKeeper holds: everything but ACL ids, partition epochs, directories,
/// the producer-id block's broker, and registrations.
///
/// `next_producer_id` is what a read-back yields: the writer stores the block
/// `[next, next + 999]` and the reader resumes after it (Kafka does the same: a round trip
/// through ZooKeeper skips one block, never reuses one).
/// Replicas, ISR, adding, removing, leader, leader epoch, leader recovery state.
type PartitionContent = (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>, i32, i32, i8);
/// Salt, stored key, server key, iterations.
type ScramContent = (Vec<u8>, Vec<u8>, Vec<u8>, i32);

#[derive(Debug, PartialEq)]
struct Content {
    topics: BTreeMap<String, (Uuid, BTreeMap<i32, PartitionContent>)>,
    configs: BTreeMap<(i8, String), BTreeMap<String, String>>,
    quotas: BTreeMap<String, BTreeMap<String, String>>,
    scram: BTreeMap<(i8, String), ScramContent>,
    acls: BTreeSet<(i8, String, i8, String, String, i8, i8)>,
    tokens: BTreeMap<String, String>,
    next_producer_id: i64,
}

fn content(image: &MetadataImage) -> Content {
    Content {
        topics: image
            .topics
            .by_name
            .iter()
            .map(|(name, t)| {
                let parts = t
                    .partitions
                    .iter()
                    .map(|(p, r)| {
                        (
                            *p,
                            (
                                r.replicas.clone(),
                                r.isr.clone(),
                                r.adding_replicas.clone(),
                                r.removing_replicas.clone(),
                                r.leader,
                                r.leader_epoch,
                                r.leader_recovery_state.value(),
                            ),
                        )
                    })
                    .collect();
                (name.clone(), (t.id, parts))
            })
            .collect(),
        configs: image
            .configs
            .resources
            .iter()
            .map(|(r, c)| {
                (
                    (r.resource_type.0, r.name.clone()),
                    c.clone().into_iter().collect(),
                )
            })
            .collect(),
        quotas: image
            .client_quotas
            .entities
            .iter()
            .map(|(e, q)| {
                (
                    format!("{:?}", e.0),
                    q.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
                )
            })
            .collect(),
        scram: image
            .scram
            .credentials
            .iter()
            .map(|(k, c)| {
                (
                    k.clone(),
                    (
                        c.salt.clone(),
                        c.stored_key.clone(),
                        c.server_key.clone(),
                        c.iterations,
                    ),
                )
            })
            .collect(),
        acls: image
            .acls
            .acls
            .values()
            .map(|a| {
                (
                    a.resource_type,
                    a.resource_name.clone(),
                    a.pattern_type,
                    a.principal.clone(),
                    a.host.clone(),
                    a.operation,
                    a.permission_type,
                )
            })
            .collect(),
        tokens: image
            .delegation_tokens
            .tokens
            .iter()
            .map(|(k, t)| (k.clone(), format!("{t:?}")))
            .collect(),
        next_producer_id: image.producer_ids.next_producer_id,
    }
}

/// The content the reader gets back from a ZooKeeper written from `image`.
fn expected_read_back(image: &MetadataImage) -> Content {
    let mut c = content(image);
    if c.next_producer_id >= 0 {
        c.next_producer_id += 1000;
    }
    c
}

async fn sync(zk: &MemZk, image: &MetadataImage, fence: &mut Fence) -> ZkWriteBatch {
    let mut rng = StdRng::seed_from_u64(11);
    let batch = reconcile(image, &snapshot_of(zk).await, &ctx(), &mut rng).expect("reconciles");
    apply_batch(zk, fence, &batch, &migration_json(10))
        .await
        .expect("applies");
    batch
}

fn data(zk: &MemZk, path: &str) -> String {
    zk.with_tree(|t| String::from_utf8(t.get(path).expect(path).0.to_vec()).expect("utf-8"))
}

#[tokio::test]
async fn reconciling_an_empty_zookeeper_writes_the_image_and_then_nothing() {
    let image = image_of(&base_records());
    let zk = ensemble();
    let mut fence = fence();
    let batch = sync(&zk, &image, &mut fence).await;
    let counts = batch.counts();
    assert_eq!(
        counts[op::CREATE_TOPIC],
        4,
        "per topic: its znodes in one multi-op, its config znode"
    );
    assert_eq!(
        counts[op::UPDATE_CLIENT_QUOTA],
        6,
        "5 quota entities + carol's SCRAM-only user"
    );
    assert_eq!(
        fence.migration_zk_version, 1,
        "/migration written once, by the last write"
    );
    assert_eq!(
        MigrationZNode::decode(data(&zk, paths::MIGRATION).as_bytes())
            .expect("decodes")
            .kraft_metadata_offset,
        10
    );

    assert_eq!(content(&read_back(&zk).await), expected_read_back(&image));
    // Exact bytes of a few znodes (Kafka's key orders; controller_epoch = the KRaft epoch).
    assert_eq!(
        data(&zk, "/brokers/topics/foo/partitions/1/state"),
        r#"{"controller_epoch":5,"leader":2,"version":1,"leader_recovery_state":1,"leader_epoch":7,"isr":[2]}"#
    );
    assert_eq!(
        data(&zk, "/config/topics/foo"),
        r#"{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}"#
    );
    assert_eq!(
        data(&zk, "/config/users/alice/clients/<default>"),
        r#"{"version":1,"config":{"request_percentage":"12.5"}}"#
    );
    assert_eq!(
        data(&zk, "/config/clients/app%2A"),
        r#"{"version":1,"config":{"producer_byte_rate":"10"}}"#
    );
    assert_eq!(
        data(&zk, "/latest_producer_id_block"),
        r#"{"version":1,"broker":-1,"block_start":"5000","block_end":"5999"}"#
    );
    assert!(
        data(&zk, "/config/brokers/<default>").contains("cipherAlgorithm:AES/CBC/PKCS5Padding"),
        "passwords are stored encrypted"
    );
    assert!(!data(&zk, "/config/brokers/<default>").contains("pa55word"));
    assert!(
        zk.with_tree(|t| t.children("/config/changes").expect("exists").len()) >= 8,
        "config change notifications"
    );
    assert_eq!(
        zk.with_tree(|t| t.children("/kafka-acl-changes").expect("exists")),
        vec!["acl_changes_0000000000".to_owned()]
    );
    assert_eq!(
        data(&zk, "/kafka-acl-changes/acl_changes_0000000000"),
        "TOPIC:foo"
    );

    let mut rng = StdRng::seed_from_u64(12);
    let again = reconcile(&image, &snapshot_of(&zk).await, &ctx(), &mut rng).expect("reconciles");
    assert_eq!(again.writes, vec![], "a ZooKeeper in sync needs no writes");
}

#[tokio::test]
async fn reconciling_repairs_a_drifted_zookeeper() {
    let image = image_of(&base_records());
    let zk = ensemble();
    let mut fence = fence();
    sync(&zk, &image, &mut fence).await;
    // Drift: a topic KRaft does not know (pending deletion), a stale partition state, an extra
    // partition, a stale topic config and a config of a broker KRaft has none for, a changed
    // SCRAM credential, an extra ACL resource, an extra token, an old producer-id block.
    zk.with_tree(|t| {
        // Written as ZooKeeper would (parents created, children counted), by some other writer.
        let put = |t: &mut ZkTree, path: &str, data: &str| {
            let mut prefix = String::new();
            for part in path.trim_start_matches('/').split('/') {
                prefix.push('/');
                prefix.push_str(part);
                let _exists = t.apply(&ZkOp::create(prefix.clone(), Vec::new()), 0, 0);
            }
            t.apply(&ZkOp::set_data(path, data.as_bytes().to_vec(), ANY_VERSION), 0, 0).expect("set");
        };
        put(t, "/brokers/topics/old", r#"{"partitions":{"0":[1]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","adding_replicas":{},"removing_replicas":{},"version":3}"#);
        put(t, "/brokers/topics/old/partitions/0/state", r#"{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}"#);
        put(t, "/admin/delete_topics/old", "");
        put(t, "/brokers/topics/foo/partitions/0/state", r#"{"controller_epoch":1,"leader":3,"version":1,"leader_epoch":99,"isr":[3]}"#);
        put(t, "/brokers/topics/bar", r#"{"partitions":{"0":[1,2,3],"1":[2]},"topic_id":"AAAAAAAAAAIAAAAAAAAAAg","adding_replicas":{"0":[3]},"removing_replicas":{"0":[1]},"version":3}"#);
        put(t, "/brokers/topics/bar/partitions/1/state", r#"{"controller_epoch":1,"leader":2,"version":1,"leader_epoch":0,"isr":[2]}"#);
        put(t, "/config/topics/foo", r#"{"version":1,"config":{"retention.ms":"1"}}"#);
        put(t, "/config/brokers/7", r#"{"version":1,"config":{"num.io.threads":"9"}}"#);
        put(t, "/config/users/carol", r#"{"version":1,"config":{"SCRAM-SHA-512":"salt=AQ==,stored_key=AQ==,server_key=AQ==,iterations=4096"}}"#);
        put(t, "/kafka-acl/Group/stale", r#"{"acls":[{"principal":"User:x","permissionType":"Allow","host":"*","operation":"Read"}],"version":1}"#);
        put(t, "/delegation_token/tokens/old", r#"{"issueTimestamp":1,"renewers":[],"tokenRequester":"User%3Ax","tokenId":"old","owner":"User%3Ax","expiryTimestamp":2,"maxTimestamp":3,"version":3}"#);
        put(t, "/latest_producer_id_block", r#"{"version":1,"broker":1,"block_start":"1000","block_end":"1999"}"#);
    });
    let batch = sync(&zk, &image, &mut fence).await;
    let counts = batch.counts();
    assert_eq!(
        batch.writes[0].0,
        op::DELETE_PENDING_TOPIC_DELETION,
        "pending deletions are cleared first"
    );
    for (name, n) in [
        (op::DELETE_TOPIC, 2),
        (op::DELETE_PARTITION, 1),
        (op::UPDATE_TOPIC, 1),
        (op::UPDATE_PARTITION, 1),
        (op::UPDATE_TOPIC_CONFIG, 1),
        (op::DELETE_BROKER_CONFIG, 1),
        (op::DELETE_ACL, 1),
        (op::DELETE_DELEGATION_TOKEN, 1),
        (op::UPDATE_PRODUCER_ID, 1),
        (op::UPDATE_CLIENT_QUOTA, 1),
    ] {
        assert_eq!(counts.get(name).copied(), Some(n), "{name}: {counts:?}");
    }
    assert_eq!(content(&read_back(&zk).await), expected_read_back(&image));
    zk.with_tree(|t| {
        assert!(
            t.children("/admin/delete_topics")
                .expect("exists")
                .is_empty()
        );
        assert!(t.exists("/brokers/topics/old").is_none());
        assert!(t.exists("/config/brokers/7").is_none());
        assert!(t.exists("/brokers/topics/bar/partitions/1").is_none());
    });
    let mut rng = StdRng::seed_from_u64(12);
    assert_eq!(
        reconcile(&image, &snapshot_of(&zk).await, &ctx(), &mut rng)
            .expect("reconciles")
            .writes,
        vec![]
    );
}

#[tokio::test]
async fn every_kind_of_delta_is_mirrored() {
    let before = image_of(&base_records());
    let zk = ensemble();
    let mut fence = fence();
    sync(&zk, &before, &mut fence).await;

    let changes = vec![
        MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: BAR,
            unknown_tagged_fields: vec![],
        }),
        topic("zed", ZED),
        MetadataRecord::Partition(partition(ZED, 0, &[4, 5], 4, 0)),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: 0,
            topic_id: FOO,
            leader: 2,
            isr: Some(vec![2, 3]),
            ..Default::default()
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: 1,
            topic_id: FOO,
            replicas: Some(vec![2, 3, 4, 5]),
            adding_replicas: Some(vec![5]),
            ..Default::default()
        }),
        MetadataRecord::Partition(partition(FOO, 2, &[3, 1], 3, 0)),
        config(2, "foo", "retention.ms", None),
        config(2, "foo", "cleanup.policy", None),
        config(4, "1", "log.cleaner.threads", Some("4")),
        config(2, "zed", "segment.ms", Some("60000")),
        quota(&[("user", Some("alice"))], "producer_byte_rate", 0.0, true),
        quota(&[("ip", None)], "connection_creation_rate", 50.0, false),
        scram("alice", 2, 3),
        scram("dave", 1, 9),
        MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 5,
            next_producer_id: 6000,
            unknown_tagged_fields: vec![],
        }),
        MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
            id: Uuid::from_u64_pair(9, 3),
            unknown_tagged_fields: vec![],
        }),
        acl(4, 5, "tx-", 4, "User:alice", 4),
        acl(5, 2, "foo", 3, "User:carol", 3),
        MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
            token_id: "tok1".into(),
            unknown_tagged_fields: vec![],
        }),
        token("tok2", 5000),
    ];
    let mut delta = MetadataDelta::new(&before);
    for record in &changes {
        delta.replay(record).expect("replays");
    }
    let after = delta.apply(MetadataProvenance::new(20, 1, 0));
    let mut rng = StdRng::seed_from_u64(13);
    let batch = write_delta(&delta, &before, &after, &ctx(), &mut rng);
    let names: BTreeSet<&str> = batch.writes.iter().map(|(n, _)| *n).collect();
    let expected: BTreeSet<&str> = [
        op::DELETE_TOPIC,
        op::CREATE_TOPIC,
        op::UPDATE_TOPIC,
        op::UPDATE_PARTITION,
        op::UPDATE_CONFIG,
        op::DELETE_CONFIG,
        op::UPDATE_CLIENT_QUOTA,
        op::UPDATE_PRODUCER_ID,
        op::UPDATE_ACL,
        op::DELETE_ACL,
        op::UPDATE_DELEGATION_TOKEN,
        op::DELETE_DELEGATION_TOKEN,
    ]
    .into_iter()
    .collect();
    assert_eq!(names, expected);
    apply_batch(&zk, &mut fence, &batch, &migration_json(20))
        .await
        .expect("applies");
    assert_eq!(content(&read_back(&zk).await), expected_read_back(&after));
    // Alice lost her only quota but kept SCRAM: her znode holds both mechanisms and no quota.
    let alice = data(&zk, "/config/users/alice");
    assert!(
        alice.contains("SCRAM-SHA-256")
            && alice.contains("SCRAM-SHA-512")
            && !alice.contains("producer_byte_rate"),
        "{alice}"
    );
    // And the delta left ZooKeeper exactly where a full reconciliation would.
    let mut rng = StdRng::seed_from_u64(14);
    assert_eq!(
        reconcile(&after, &snapshot_of(&zk).await, &ctx(), &mut rng)
            .expect("reconciles")
            .writes,
        vec![]
    );
}

#[tokio::test]
async fn a_stale_fence_writes_nothing() {
    let image = image_of(&base_records());
    let mut rng = StdRng::seed_from_u64(1);
    for (case, stale) in [
        (
            "another controller wrote /migration",
            Fence {
                controller_epoch_zk_version: 1,
                migration_zk_version: 7,
            },
        ),
        (
            "a ZooKeeper controller was elected",
            Fence {
                controller_epoch_zk_version: 0,
                migration_zk_version: 0,
            },
        ),
    ] {
        let zk = ensemble();
        let batch =
            reconcile(&image, &snapshot_of(&zk).await, &ctx(), &mut rng).expect("reconciles");
        let before = zk.snapshot();
        let mut fence = stale;
        let err = apply_batch(&zk, &mut fence, &batch, &migration_json(10))
            .await
            .expect_err(case);
        assert!(matches!(err, ExecError::Fenced { .. }), "{case}: {err}");
        assert_eq!(zk.snapshot(), before, "{case}: nothing written");
        assert_eq!(fence, stale, "{case}: fence unchanged");
    }
    let zk = ensemble();
    let mut unknown = Fence {
        controller_epoch_zk_version: -1,
        migration_zk_version: 0,
    };
    let err = apply_batch(
        &zk,
        &mut unknown,
        &ZkWriteBatch::default(),
        &migration_json(1),
    )
    .await
    .expect_err("no fence");
    assert!(matches!(err, ExecError::NoFence { .. }));
}

#[tokio::test]
async fn an_empty_batch_still_records_the_offset() {
    let zk = ensemble();
    let mut fence = fence();
    let counts = apply_batch(
        &zk,
        &mut fence,
        &ZkWriteBatch::default(),
        &migration_json(42),
    )
    .await
    .expect("applies");
    assert_eq!(counts.multi_ops, 1);
    assert_eq!(fence.migration_zk_version, 1);
    assert_eq!(
        MigrationZNode::decode(data(&zk, paths::MIGRATION).as_bytes())
            .expect("decodes")
            .kraft_metadata_offset,
        42
    );
}

#[tokio::test]
async fn creating_an_existing_topic_is_done_and_deleting_an_absent_one_is_fine() {
    let image = image_of(&base_records());
    let zk = ensemble();
    let mut fence = fence();
    sync(&zk, &image, &mut fence).await;
    let foo = image.topics.topic_by_name("foo").expect("foo");
    let create = ZkWrite::Ops {
        ops: vec![ZkOp::create("/brokers/topics/foo", b"{}".to_vec())],
        if_exists_done: true,
    };
    let batch = ZkWriteBatch {
        writes: vec![
            (op::CREATE_TOPIC, create),
            (
                op::DELETE_TOPIC,
                ZkWrite::Delete {
                    path: "/brokers/topics/nope".into(),
                    recursive: true,
                },
            ),
            (
                op::DELETE_ACL,
                ZkWrite::Delete {
                    path: "/kafka-acl/Topic/nope".into(),
                    recursive: false,
                },
            ),
        ],
        notifications: vec![],
    };
    apply_batch(&zk, &mut fence, &batch, &migration_json(11))
        .await
        .expect("idempotent writes succeed");
    assert_ne!(
        data(&zk, "/brokers/topics/foo"),
        "{}",
        "the existing topic was left alone"
    );
    assert_eq!(foo.partitions.len(), 2);
    assert_eq!(
        fence.migration_zk_version, 2,
        "the last write (a no-op delete) still moved /migration"
    );
}

#[tokio::test]
async fn a_topic_recreated_under_its_name_keeps_its_configs() {
    // Found by the random-image property: the old topic's deletion removes its config znode,
    // so configs equal to the old ones must still be written for the new topic.
    let old = image_of(&[
        topic("t", FOO),
        MetadataRecord::Partition(partition(FOO, 0, &[1], 1, 0)),
        config(2, "t", "e", Some("")),
    ]);
    let new = image_of(&[
        topic("t", BAR),
        MetadataRecord::Partition(partition(BAR, 0, &[2], 2, 0)),
        config(2, "t", "e", Some("")),
    ]);
    let zk = ensemble();
    let mut fence = fence();
    sync(&zk, &old, &mut fence).await;
    let batch = sync(&zk, &new, &mut fence).await;
    assert_eq!(
        batch.writes[0].0,
        op::DELETE_TOPIC,
        "the old topic goes before the new one is created"
    );
    assert_eq!(content(&read_back(&zk).await), expected_read_back(&new));
}

#[tokio::test]
async fn a_created_topic_becomes_exactly_kafkas_znodes() {
    let before = image_of(&[]);
    let records = [
        topic("foo", FOO),
        MetadataRecord::Partition(partition(FOO, 0, &[1, 2], 1, 0)),
        config(2, "foo", "retention.ms", Some("1000")),
    ];
    let mut delta = MetadataDelta::new(&before);
    for r in &records {
        delta.replay(r).expect("replays");
    }
    let after = delta.apply(MetadataProvenance::new(1, 1, 0));
    let mut rng = StdRng::seed_from_u64(1);
    let batch = write_delta(&delta, &before, &after, &ctx(), &mut rng);
    let zk = ensemble();
    let mut fence = fence();
    let counts = apply_batch(&zk, &mut fence, &batch, &migration_json(1))
        .await
        .expect("applies");
    assert_eq!(counts.notifications, 1);
    let under = |prefixes: &[&str]| -> Vec<(String, String)> {
        zk.with_tree(|t| {
            t.paths()
                .filter(|p| prefixes.iter().any(|pre| p.starts_with(pre)))
                .map(|p| {
                    (
                        p.to_owned(),
                        String::from_utf8(t.get(p).expect("listed").0.to_vec()).expect("utf-8"),
                    )
                })
                .collect()
        })
    };
    let foo_id = krust_zk::model::topics::uuid_to_kafka_string(&FOO);
    let expected: Vec<(String, String)> = [
        ("/brokers/topics/foo".to_owned(), format!(r#"{{"partitions":{{"0":[1,2]}},"topic_id":"{foo_id}","adding_replicas":{{}},"removing_replicas":{{}},"version":3}}"#)),
        ("/brokers/topics/foo/partitions".to_owned(), String::new()),
        ("/brokers/topics/foo/partitions/0".to_owned(), String::new()),
        ("/brokers/topics/foo/partitions/0/state".to_owned(), r#"{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}"#.to_owned()),
        ("/config/changes".to_owned(), String::new()),
        ("/config/changes/config_change_0000000000".to_owned(), r#"{"version":2,"entity_path":"topics/foo"}"#.to_owned()),
        ("/config/topics".to_owned(), String::new()),
        ("/config/topics/foo".to_owned(), r#"{"version":1,"config":{"retention.ms":"1000"}}"#.to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        under(&["/brokers/topics/foo", "/config/topics", "/config/changes"]),
        expected
    );
    assert_eq!(
        under(&["/migration"]),
        vec![(
            "/migration".to_owned(),
            String::from_utf8(migration_json(1)).expect("utf-8")
        )]
    );
    assert_eq!(
        zk.with_tree(|t| t.get(paths::MIGRATION).expect("exists").1.version),
        1
    );
    assert_eq!(fence.migration_zk_version, 1);
}

/// A backend that loses its connection after `budget` multi-ops.
struct FlakyZk {
    inner: MemZk,
    budget: AtomicUsize,
}

impl ZkBackend for FlakyZk {
    fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send {
        self.inner.get_data(path)
    }
    fn exists(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send {
        self.inner.exists(path)
    }
    fn get_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        self.inner.get_children(path)
    }
    fn apply(&self, op: &ZkOp) -> impl Future<Output = Result<ZkOpResult, ZkError>> + Send {
        self.inner.apply(op)
    }
    fn multi(
        &self,
        ops: &[ZkOp],
    ) -> impl Future<Output = Result<Vec<ZkOpResult>, MultiError>> + Send {
        let allowed = self
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
            .is_ok();
        if !allowed {
            self.inner.set_down(true);
        }
        let result = self.inner.multi(ops);
        self.inner.set_down(false);
        result
    }
}

#[tokio::test]
async fn zookeeper_failing_mid_batch_then_reapplied_gives_the_same_tree() {
    let image = image_of(&base_records());
    let reference = ensemble();
    let mut fence_ok = fence();
    let batch = sync(&reference, &image, &mut fence_ok).await;
    let expected = snapshot_of(&reference).await;
    let data_of = |t: &ZkTree| -> BTreeMap<String, Vec<u8>> {
        t.paths()
            .map(|p| (p.to_owned(), t.get(p).expect("listed").0.to_vec()))
            .collect()
    };
    let total_multis = batch.writes.len() + 8;
    for budget in 0..total_multis {
        let zk = FlakyZk {
            inner: ensemble(),
            budget: AtomicUsize::new(budget),
        };
        let mut f = fence();
        match apply_batch(&zk, &mut f, &batch, &migration_json(10)).await {
            Err(ExecError::Retriable { .. }) => {
                assert_eq!(
                    f,
                    fence(),
                    "budget {budget}: the fence moves only with the last write"
                );
                zk.budget.store(usize::MAX, Ordering::SeqCst);
                apply_batch(&zk, &mut f, &batch, &migration_json(10))
                    .await
                    .expect("re-applies");
            }
            Err(e) => panic!("budget {budget}: {e}"),
            Ok(_) => {}
        }
        let got = snapshot_of(&zk.inner).await;
        assert_eq!(data_of(&got), data_of(&expected), "budget {budget}");
        assert_eq!(f, fence_ok, "budget {budget}");
    }
}

mod random_images {
    //! The reconciliation property over random small images: from a ZooKeeper holding another
    //! random image (topics that collide by name with other ids, partitions, configs, quotas
    //! under sanitized and `<default>` names, SCRAM users, literal and prefixed ACLs, tokens),
    //! one reconcile + apply gives a ZooKeeper that reads back as the image, and a second
    //! reconcile writes nothing.

    use super::*;
    use proptest::prelude::*;

    const NAMES: [&str; 4] = ["alice", "b ob", "c*rl", "dé/x"];

    fn opt_name() -> impl Strategy<Value = Option<&'static str>> {
        prop_oneof![
            Just(None),
            proptest::sample::select(&NAMES[..]).prop_map(Some)
        ]
    }

    fn topic_records() -> impl Strategy<Value = Vec<MetadataRecord>> {
        let partition_strategy = (
            proptest::sample::subsequence(vec![1, 2, 3, 4, 5], 1..=3),
            any::<bool>(),
            0..5i32,
            any::<bool>(),
        );
        proptest::collection::btree_map(
            proptest::sample::select(vec!["t1", "t2", "t3"]),
            (1u64..4, proptest::collection::vec(partition_strategy, 1..3)),
            0..3,
        )
        .prop_map(|topics| {
            let mut out = Vec::new();
            for (name, (id, parts)) in topics {
                let id =
                    Uuid::from_u64_pair(100 + id, name.len() as u64 + name.as_bytes()[1] as u64);
                out.push(topic(name, id));
                for (p, (replicas, leaderless, epoch, recovering)) in parts.into_iter().enumerate()
                {
                    let p = i32::try_from(p).expect("small");
                    let leader = if leaderless { -1 } else { replicas[0] };
                    let mut record = partition(id, p, &replicas, leader, epoch);
                    record.isr = if leaderless {
                        vec![]
                    } else {
                        replicas[..1].to_vec()
                    };
                    record.leader_recovery_state = i8::from(recovering && !leaderless);
                    if replicas.len() == 3 && epoch == 4 {
                        record.adding_replicas = vec![replicas[2]];
                        record.removing_replicas = vec![replicas[0]];
                    }
                    out.push(MetadataRecord::Partition(record));
                }
            }
            out
        })
    }

    fn other_records() -> impl Strategy<Value = Vec<MetadataRecord>> {
        let configs = proptest::collection::vec(
            (
                prop_oneof![
                    Just((2i8, "t1")),
                    Just((2, "t2")),
                    Just((4, "1")),
                    Just((4, ""))
                ],
                proptest::sample::select(vec!["a.b", "c.d", "e"]),
                "[a-z0-9 ]{0,4}",
            ),
            0..4,
        )
        .prop_map(|cs| {
            cs.into_iter()
                .map(|((t, r), k, v)| config(t, r, k, Some(&v)))
                .collect::<Vec<_>>()
        });
        let entity = prop_oneof![
            opt_name().prop_map(|u| vec![("user", u)]),
            (opt_name(), opt_name()).prop_map(|(u, c)| vec![("user", u), ("client-id", c)]),
            opt_name().prop_map(|c| vec![("client-id", c)]),
            opt_name().prop_map(|_| vec![("ip", Some("10.0.0.1"))]),
        ];
        let quotas =
            proptest::collection::vec((entity, 1u32..5000, any::<bool>()), 0..4).prop_map(|qs| {
                qs.into_iter()
                    .map(|(e, n, double)| {
                        let ip = e[0].0 == "ip";
                        let (key, value) = match (ip, double) {
                            (true, _) => ("connection_creation_rate", f64::from(n)),
                            (false, true) => ("request_percentage", f64::from(n) / 8.0),
                            (false, false) => ("producer_byte_rate", f64::from(n)),
                        };
                        quota(&e, key, value, false)
                    })
                    .collect::<Vec<_>>()
            });
        let scrams =
            proptest::collection::vec((proptest::sample::select(&NAMES[..]), 1i8..3, 1u8..9), 0..3)
                .prop_map(|ss| {
                    ss.into_iter()
                        .map(|(u, m, s)| scram(u, m, s))
                        .collect::<Vec<_>>()
                });
        let acls = proptest::collection::vec(
            (
                2i8..8,
                proptest::sample::select(vec!["r1", "r*", "r 2"]),
                prop_oneof![Just(3i8), Just(4i8)],
                proptest::sample::select(vec!["User:alice", "User:b ob"]),
                2i8..15,
                any::<u16>(),
            ),
            0..4,
        )
        .prop_map(|acls| {
            acls.into_iter()
                .map(|(rt, name, pt, principal, op, id)| {
                    acl(u64::from(id), rt, name, pt, principal, op)
                })
                .collect::<Vec<_>>()
        });
        let tokens = proptest::collection::vec(
            (proptest::sample::select(vec!["k1", "k2"]), 1i64..9000),
            0..2,
        )
        .prop_map(|ts| {
            ts.into_iter()
                .map(|(id, e)| token(id, e))
                .collect::<Vec<_>>()
        });
        let pid = proptest::option::of(0i64..100).prop_map(|p| {
            p.map(|n| {
                MetadataRecord::ProducerIds(ProducerIdsRecord {
                    broker_id: 1,
                    broker_epoch: 1,
                    next_producer_id: n * 1000,
                    unknown_tagged_fields: vec![],
                })
            })
            .into_iter()
            .collect::<Vec<_>>()
        });
        (configs, quotas, scrams, acls, tokens, pid)
            .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f].concat())
    }

    fn image() -> impl Strategy<Value = MetadataImage> {
        (topic_records(), other_records()).prop_map(|(mut t, o)| {
            // Topic configs only for topics that exist (KRaft refuses others).
            let names: BTreeSet<String> = t
                .iter()
                .filter_map(|r| match r {
                    MetadataRecord::Topic(t) => Some(t.name.clone()),
                    _ => None,
                })
                .collect();
            t.extend(o.into_iter().filter(|r| !matches!(r, MetadataRecord::Config(c) if c.resource_type == 2 && !names.contains(&c.resource_name))));
            image_of(&t)
        })
    }

    fn plain_ctx() -> WriterContext {
        WriterContext {
            kraft_controller_epoch: 5,
            password_encoder: None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn reconcile_from_any_zookeeper_reads_back_as_the_image(old in image(), new in image()) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            runtime.block_on(async {
                let zk = ensemble();
                let mut fence = fence();
                let mut rng = StdRng::seed_from_u64(5);
                for target in [&old, &new] {
                    let batch = reconcile(target, &snapshot_of(&zk).await, &plain_ctx(), &mut rng).expect("reconciles");
                    apply_batch(&zk, &mut fence, &batch, &migration_json(1)).await.expect("applies");
                    let tree = snapshot_of(&zk).await;
                    let batches = read_all_metadata(&tree, MetadataVersion::IBP_3_9_IV0, None, &mut rng).expect("reads back");
                    let records: Vec<MetadataRecord> = batches.batches.into_iter().flatten().map(|r| r.record).collect();
                    let mut got = content(&image_of(&records));
                    if target.producer_ids.next_producer_id < 0 {
                        // KRaft never allocated a block: Kafka leaves ZooKeeper's block alone.
                        got.next_producer_id = -1;
                    }
                    assert_eq!(got, expected_read_back(target));
                    let again = reconcile(target, &tree, &plain_ctx(), &mut rng).expect("reconciles");
                    assert_eq!(again.writes, vec![], "in sync");
                }
            });
        }
    }
}
