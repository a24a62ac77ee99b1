//! The initial copy (facts §6.8): a ZooKeeper tree populated the way a Kafka 3.9 ZooKeeper
//! cluster populates it (byte strings as Kafka writes them) is read into record batches; the
//! batches are checked record by record where Kafka's grouping matters, then replayed into a
//! `MetadataDelta` and the resulting image is checked.

use krust_metadata::image::client_quotas::ClientQuotaEntity;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::records::{MetadataRecord, MetadataRecordType, PartitionRecord, TopicRecord};
use krust_metadata::{MetadataImage, MetadataProvenance, MetadataVersion};
use krust_migration::reader::{MIGRATION_READ_ROOTS, ReadError, read_all_metadata};
use krust_zk::model::password::PasswordEncoder;
use krust_zk::model::topics::uuid_from_kafka_string;
use krust_zk::ops::Stat;
use krust_zk::tree::ZkTree;
use rand::SeedableRng;
use uuid::Uuid;

const FOO_ID: &str = "7DYWEHTfSrm7Gzv9BSMfSg";
const BAR_ID: &str = "Xmz0ZmBnRRyRHcmJc7M9bA";
const GONE_ID: &str = "q4CkxWXwTHW0vgx1f4s5Kw";
/// `ssl.keystore.password` = "pa55word", encrypted by Kafka 3.9.1 with secret "secret".
const KAFKA_ENCRYPTED: &str = "initializationVector:lDuGSAWt3DI6dvvQJV/RFg==,keyLength:128,salt:5Kqz1xksnCSLdJM1zgRwJdn6cIIT3nyLbcrhK0Swt0cw/TXwteZWk1tx7ghHyRpr2l4uEB9IXmwx+9Qs1rsV4OynRIsu4XOi09R+6RKTMNBu5AemfNebbKWypyIczGM33KUwVgfGpWwn8+OxcD/iJ4z5X3mQ8YZa9EniLCPOWEAX+l28jKE+bLi1dE4/bJt6x5P9yqZAPV6+fkmRzAJPs42u8sW/cFdx6P18ZX3M6g+kaZda6/OPMX4/ukTi0OLN9+Ej6mbmyOIUmphzo8uZfDh8sB4QvviKgx36xclp6wuQMZWL5WW6TzejJp57K38euA96eFUd+V1VEuCf+Fj59g==,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,iterations:4096,passwordLength:8,encryptedPassword:MeJLxsOgARqfJSGHJy+ZCw==";

fn id(text: &str) -> Uuid {
    uuid_from_kafka_string(text).expect("valid topic id")
}

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

/// A ZooKeeper cluster as Kafka 3.9 leaves it: two topics (one whose partition 1 lost its state
/// znode), one topic pending deletion, topic and broker configs (with `<default>` and an
/// encrypted password), quotas for users, `<default>` users, clients (a sanitized name),
/// users' clients and ips, SCRAM users, literal and prefixed ACLs, a delegation token and a
/// producer-id block.
fn kafka_cluster() -> ZkTree {
    let mut t = ZkTree::new();
    for p in krust_zk::model::paths::PERSISTENT_PATHS {
        put(&mut t, p, "", 0);
    }
    put(
        &mut t,
        "/brokers/topics/foo",
        &format!(
            r#"{{"partitions":{{"0":[1,2,3],"1":[2,3,1]}},"topic_id":"{FOO_ID}","adding_replicas":{{}},"removing_replicas":{{}},"version":3}}"#
        ),
        0,
    );
    put(&mut t, "/brokers/topics/foo/partitions", "", 0);
    put(
        &mut t,
        "/brokers/topics/foo/partitions/0/state",
        r#"{"controller_epoch":9,"leader":2,"version":1,"leader_epoch":5,"isr":[2,3]}"#,
        7,
    );
    put(
        &mut t,
        "/brokers/topics/foo/partitions/1/state",
        r#"{"controller_epoch":9,"leader":3,"version":1,"leader_recovery_state":1,"leader_epoch":1,"isr":[3]}"#,
        2,
    );
    put(
        &mut t,
        "/brokers/topics/bar",
        &format!(
            r#"{{"partitions":{{"0":[3,1,4]}},"topic_id":"{BAR_ID}","adding_replicas":{{"0":[4]}},"removing_replicas":{{"0":[1]}},"version":3}}"#
        ),
        0,
    );
    put(&mut t, "/brokers/topics/bar/partitions/0", "", 0); // the state znode is missing
    put(
        &mut t,
        "/brokers/topics/gone",
        &format!(
            r#"{{"partitions":{{"0":[9]}},"topic_id":"{GONE_ID}","adding_replicas":{{}},"removing_replicas":{{}},"version":3}}"#
        ),
        0,
    );
    put(&mut t, "/admin/delete_topics/gone", "", 0);
    put(
        &mut t,
        "/config/topics/foo",
        r#"{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/topics/bar",
        r#"{"version":1,"config":{}}"#,
        0,
    );
    put(
        &mut t,
        "/config/brokers/1",
        r#"{"version":1,"config":{"log.cleaner.threads":"2"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/brokers/<default>",
        &format!(r#"{{"version":1,"config":{{"ssl.keystore.password":"{KAFKA_ENCRYPTED}"}}}}"#),
        0,
    );
    put(
        &mut t,
        "/config/users/alice",
        r#"{"version":1,"config":{"SCRAM-SHA-256":"salt=AQID,stored_key=BAU=,server_key=Bg==,iterations=4096","producer_byte_rate":"1024"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/users/bob",
        r#"{"version":1,"config":{"SCRAM-SHA-512":"salt=AQ==,stored_key=Ag==,server_key=Aw==,iterations=8192","SCRAM-SHA-256":"salt=BA==,stored_key=BQ==,server_key=Bg==,iterations=4096"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/users/<default>",
        r#"{"version":1,"config":{"consumer_byte_rate":"2048"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/users/alice/clients/<default>",
        r#"{"version":1,"config":{"producer_byte_rate":"10"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/clients/app%2A",
        r#"{"version":1,"config":{"request_percentage":"12.5"}}"#,
        0,
    );
    put(
        &mut t,
        "/config/ips/10.0.0.1",
        r#"{"version":1,"config":{"connection_creation_rate":"5"}}"#,
        0,
    );
    put(
        &mut t,
        "/latest_producer_id_block",
        r#"{"version":1,"broker":2,"block_start":"2000","block_end":"2999"}"#,
        3,
    );
    put(
        &mut t,
        "/kafka-acl/Topic/foo",
        r#"{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"},{"principal":"User:bob","permissionType":"Deny","host":"10.0.0.1","operation":"Write"}],"version":1}"#,
        0,
    );
    put(
        &mut t,
        "/kafka-acl-extended/prefixed/Group/app",
        r#"{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Describe"}],"version":1}"#,
        0,
    );
    put(
        &mut t,
        "/delegation_token/tokens/tok1",
        r#"{"issueTimestamp":1000,"renewers":["User%3Abob"],"tokenRequester":"User%3Aalice","tokenId":"tok1","owner":"User%3Aalice","expiryTimestamp":2000,"maxTimestamp":3000,"version":3}"#,
        0,
    );
    t
}

fn read(tree: &ZkTree) -> krust_migration::reader::MigrationBatches {
    let encoder = PasswordEncoder::new("secret");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    read_all_metadata(tree, MetadataVersion::IBP_3_9_IV0, Some(&encoder), &mut rng).expect("reads")
}

#[test]
fn topics_come_first_one_batch_each_skipping_pending_deletions() {
    let out = read(&kafka_cluster());
    let records = |i: usize| -> Vec<MetadataRecord> {
        out.batches[i].iter().map(|r| r.record.clone()).collect()
    };
    // bar sorts before foo; "gone" is pending deletion.
    let bar = records(0);
    assert_eq!(
        bar.len(),
        2,
        "bar: TopicRecord + one PartitionRecord (no topic configs)"
    );
    assert_eq!(
        bar[0],
        MetadataRecord::Topic(TopicRecord {
            name: "bar".into(),
            topic_id: id(BAR_ID),
            unknown_tagged_fields: vec![]
        })
    );
    assert_eq!(
        bar[1],
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: id(BAR_ID),
            replicas: vec![3, 1, 4],
            // The state znode is missing: ISR = replicas, leader = first replica, epochs 0.
            isr: vec![3, 1, 4],
            removing_replicas: vec![1],
            adding_replicas: vec![4],
            leader: 3,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: vec![],
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: vec![],
        })
    );
    let foo = records(1);
    assert_eq!(
        foo.len(),
        5,
        "foo: TopicRecord, 2 ConfigRecords, 2 PartitionRecords"
    );
    let MetadataRecord::Config(c) = &foo[1] else {
        panic!("config second: {:?}", foo[1])
    };
    assert_eq!(
        (
            c.resource_type,
            c.resource_name.as_str(),
            c.name.as_str(),
            c.value.as_deref()
        ),
        (2, "foo", "cleanup.policy", Some("compact"))
    );
    let MetadataRecord::Partition(p0) = &foo[3] else {
        panic!("partition: {:?}", foo[3])
    };
    assert_eq!(
        (
            p0.leader,
            p0.leader_epoch,
            p0.partition_epoch,
            p0.isr.clone()
        ),
        (2, 5, 7, vec![2, 3]),
        "partition epoch = state znode version"
    );
    let MetadataRecord::Partition(p1) = &foo[4] else {
        panic!("partition: {:?}", foo[4])
    };
    assert_eq!(p1.leader_recovery_state, 1);
    assert!(
        out.batches.iter().flatten().all(|r| r.version == 0),
        "Kafka writes every migration record at version 0"
    );
    for record in out.batches.iter().flatten() {
        record
            .encode()
            .expect("every record encodes at its version");
    }
    assert!(
        !out.batches
            .iter()
            .flatten()
            .any(|r| matches!(&r.record, MetadataRecord::Topic(t) if t.name == "gone"))
    );
}

#[test]
fn batches_follow_kafkas_grouping_and_order() {
    let out = read(&kafka_cluster());
    let kinds: Vec<Vec<MetadataRecordType>> = out
        .batches
        .iter()
        .map(|b| b.iter().map(|r| r.record.record_type()).collect())
        .collect();
    use MetadataRecordType as T;
    assert_eq!(
        kinds,
        vec![
            vec![T::Topic, T::Partition],                                     // bar
            vec![T::Topic, T::Config, T::Config, T::Partition, T::Partition], // foo
            vec![T::Config],                                                  // broker <default>
            vec![T::Config],                                                  // broker 1
            vec![T::ClientQuota],                                             // <default> user
            vec![T::UserScramCredential],                                     // alice SHA-256
            vec![T::ClientQuota],                                             // alice quotas
            vec![T::UserScramCredential],                                     // bob SHA-256
            vec![T::UserScramCredential],                                     // bob SHA-512
            vec![T::ClientQuota],                                             // client app*
            vec![T::ClientQuota], // alice / <default> client
            vec![T::ClientQuota], // ip
            vec![T::ProducerIds],
            vec![T::AccessControlEntry, T::AccessControlEntry], // literal Topic:foo
            vec![T::AccessControlEntry],                        // prefixed Group:app
            vec![T::DelegationToken],
        ]
    );
    assert_eq!(
        out.broker_ids.iter().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(out.record_counts[&T::ClientQuota], 5);
    assert_eq!(out.record_count(), 22);
}

#[test]
fn replayed_records_build_the_clusters_image() {
    let out = read(&kafka_cluster());
    let records: Vec<MetadataRecord> = out
        .batches
        .iter()
        .flatten()
        .map(|r| r.record.clone())
        .collect();
    let image = MetadataImage::from_records(records.iter(), MetadataProvenance::new(21, 1, 0))
        .expect("replays");

    assert_eq!(
        image.topics.by_name.keys().cloned().collect::<Vec<_>>(),
        vec!["bar".to_owned(), "foo".to_owned()]
    );
    let foo = image.topics.topic_by_name("foo").expect("foo");
    assert_eq!(foo.id, id(FOO_ID));
    assert_eq!(foo.partitions[&0].leader, 2);

    let broker_default = ConfigResource {
        resource_type: ConfigResourceType::BROKER,
        name: String::new(),
    };
    assert_eq!(
        image
            .configs
            .configs(&broker_default)
            .get("ssl.keystore.password")
            .map(String::as_str),
        Some("pa55word"),
        "decrypted with password.encoder.secret"
    );
    assert_eq!(
        image.configs.configs(&ConfigResource::topic("foo")).len(),
        2
    );

    let entity = |pairs: &[(&str, Option<&str>)]| {
        ClientQuotaEntity(
            pairs
                .iter()
                .map(|(t, n)| ((*t).to_owned(), n.map(str::to_owned)))
                .collect(),
        )
    };
    let quotas = &image.client_quotas.entities;
    assert_eq!(
        quotas[&entity(&[("user", Some("alice"))])]["producer_byte_rate"],
        1024.0
    );
    assert_eq!(
        quotas[&entity(&[("user", None)])]["consumer_byte_rate"],
        2048.0,
        "<default> is the null entity"
    );
    assert_eq!(
        quotas[&entity(&[("client-id", Some("app*"))])]["request_percentage"],
        12.5,
        "names are desanitized"
    );
    assert_eq!(
        quotas[&entity(&[("user", Some("alice")), ("client-id", None)])]["producer_byte_rate"],
        10.0
    );
    assert_eq!(
        quotas[&entity(&[("ip", Some("10.0.0.1"))])]["connection_creation_rate"],
        5.0
    );

    assert_eq!(image.scram.credentials.len(), 3);
    let alice = &image.scram.credentials[&(1, "alice".to_owned())];
    assert_eq!(
        (alice.salt.clone(), alice.iterations),
        (vec![1, 2, 3], 4096)
    );
    assert_eq!(image.producer_ids.next_producer_id, 3000);
    assert_eq!(image.acls.acls.len(), 3);
    let token = &image.delegation_tokens.tokens["tok1"];
    assert_eq!(
        (token.owner.as_str(), token.renewers.clone()),
        ("User:alice", vec!["User:bob".to_owned()])
    );
}

#[test]
fn acl_ids_are_fresh_and_large_resources_are_cut_into_batches_of_100() {
    let mut t = ZkTree::new();
    let entries: Vec<String> = (0..250)
        .map(|i| format!(r#"{{"principal":"User:u{i}","permissionType":"Allow","host":"*","operation":"Read"}}"#))
        .collect();
    put(
        &mut t,
        "/kafka-acl/Topic/big",
        &format!(r#"{{"acls":[{}],"version":1}}"#, entries.join(",")),
        0,
    );
    let out = read(&t);
    assert_eq!(
        out.batches.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![100, 100, 50]
    );
    let ids: std::collections::BTreeSet<Uuid> = out
        .batches
        .iter()
        .flatten()
        .filter_map(|r| match &r.record {
            MetadataRecord::AccessControlEntry(a) => Some(a.id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 250);
}

#[test]
fn malformed_znodes_are_errors_naming_them() {
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "topic without id",
            "/brokers/topics/old",
            r#"{"version":1,"partitions":{"0":[1]}}"#,
        ),
        ("topic not JSON", "/brokers/topics/x", "not json"),
        (
            "state not JSON",
            "/brokers/topics/foo/partitions/0/state",
            "{",
        ),
        (
            "broker id not a number",
            "/config/brokers/abc",
            r#"{"version":1,"config":{}}"#,
        ),
        (
            "quota not a number",
            "/config/clients/c",
            r#"{"version":1,"config":{"producer_byte_rate":"fast"}}"#,
        ),
        (
            "bad SCRAM",
            "/config/users/u",
            r#"{"version":1,"config":{"SCRAM-SHA-256":"salt=AQID"}}"#,
        ),
        (
            "bad ACL type",
            "/kafka-acl/Spaceship/x",
            r#"{"acls":[],"version":1}"#,
        ),
        (
            "token version 9",
            "/delegation_token/tokens/t",
            r#"{"version":9}"#,
        ),
        (
            "producer id block",
            "/latest_producer_id_block",
            r#"{"version":1}"#,
        ),
    ];
    for (case, path, data) in cases {
        let mut t = kafka_cluster();
        put(&mut t, path, data, 0);
        let encoder = PasswordEncoder::new("secret");
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let err = read_all_metadata(&t, MetadataVersion::IBP_3_9_IV0, Some(&encoder), &mut rng)
            .expect_err(case);
        let text = err.to_string();
        // The error names the znode (or, for a bad ACL resource type, its type directory).
        let named = text.contains(path)
            || krust_zk::tree::parent_of(path).is_some_and(|p| text.starts_with(p));
        assert!(named, "{case}: {text}");
    }
    // A wrong password.encoder.secret.
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let err = read_all_metadata(
        &kafka_cluster(),
        MetadataVersion::IBP_3_9_IV0,
        Some(&PasswordEncoder::new("wrong")),
        &mut rng,
    )
    .expect_err("wrong secret");
    assert!(
        matches!(&err, ReadError::Password { path, .. } if path == "/config/brokers/<default>"),
        "{err}"
    );
    let err = read_all_metadata(
        &kafka_cluster(),
        MetadataVersion::IBP_3_3_IV3,
        None,
        &mut rng,
    )
    .expect_err("old mv");
    assert!(matches!(err, ReadError::MetadataVersion(_)));
}

#[test]
fn read_roots_cover_every_subtree_read() {
    for root in [
        "/brokers/topics",
        "/admin/delete_topics",
        "/config/users",
        "/kafka-acl",
        "/kafka-acl-extended",
        "/delegation_token/tokens",
        "/latest_producer_id_block",
    ] {
        assert!(MIGRATION_READ_ROOTS.contains(&root), "{root}");
    }
}
