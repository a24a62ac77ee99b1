//! Znode codecs against the exact bytes Kafka 3.9.1 writes. Each expected string was produced
//! by calling Kafka's own encoder (`kafka.zk.*ZNode.encode`, `ScramCredentialUtils`,
//! `Sanitizer`) from the 3.9.1 jars; decoding them and re-encoding must give the same bytes.

use std::collections::BTreeMap;

use krust_zk::model::ZNodeError;
use krust_zk::model::acls::{
    AclChange, AclEntry, AclZNode, PATTERN_LITERAL, PATTERN_PREFIXED, resource_path,
};
use krust_zk::model::cluster::{
    BrokerRegistrationZNode, ControllerRegistration, FeatureZNode, MigrationZNode, cluster_id,
    controller_epoch,
};
use krust_zk::model::configs::{ConfigEntityZNode, ScramCredentialString, change_notification};
use krust_zk::model::paths;
use krust_zk::model::tokens::DelegationTokenZNode;
use krust_zk::model::topics::{
    PartitionStateZNode, ProducerIdBlockZNode, ReplicaAssignment, TopicZNode,
    uuid_from_kafka_string,
};

fn s(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("utf-8")
}

#[test]
fn controller_and_cluster_id_and_migration_match_kafka() {
    let c = ControllerRegistration {
        broker_id: 3000,
        timestamp_ms: 1_700_000_000_000,
        kraft_controller_epoch: Some(7),
    };
    let golden =
        r#"{"version":2,"brokerid":3000,"timestamp":"1700000000000","kraftControllerEpoch":7}"#;
    assert_eq!(s(&c.encode()), golden);
    assert_eq!(
        ControllerRegistration::decode(golden.as_bytes()).expect("decodes"),
        c
    );
    // A v1 ZooKeeper controller (no KRaft epoch).
    let v1 = ControllerRegistration::decode(br#"{"version":1,"brokerid":1,"timestamp":"5"}"#)
        .expect("decodes");
    assert_eq!(v1.kraft_controller_epoch, None);

    assert_eq!(
        s(&cluster_id::encode("abc")),
        r#"{"version":"1","id":"abc"}"#
    );
    assert_eq!(
        cluster_id::decode(br#"{"id":"abc","version":"1"}"#).expect("decodes"),
        "abc"
    );
    assert_eq!(controller_epoch::decode(b"17").expect("decodes"), 17);
    assert_eq!(controller_epoch::encode(17), b"17");

    let m = MigrationZNode {
        kraft_controller_id: 3000,
        kraft_controller_epoch: 7,
        kraft_metadata_offset: 100,
        kraft_metadata_epoch: 6,
    };
    let golden = r#"{"version":0,"kraft_metadata_offset":100,"kraft_controller_id":3000,"kraft_metadata_epoch":6,"kraft_controller_epoch":7}"#;
    assert_eq!(s(&m.encode()), golden);
    assert_eq!(
        MigrationZNode::decode(golden.as_bytes()).expect("decodes"),
        m
    );
    assert!(m.initial_migration_done());
    assert!(!MigrationZNode::EMPTY.initial_migration_done());
}

#[test]
fn topic_znode_matches_kafka_key_orders() {
    let mut partitions = BTreeMap::new();
    partitions.insert(
        0,
        ReplicaAssignment {
            replicas: vec![1, 2, 3],
            ..Default::default()
        },
    );
    partitions.insert(
        1,
        ReplicaAssignment {
            replicas: vec![2, 3, 4],
            adding_replicas: vec![4],
            removing_replicas: vec![1],
        },
    );
    let topic = TopicZNode {
        topic_id: uuid_from_kafka_string("7DYWEHTfSrm7Gzv9BSMfSg"),
        partitions,
    };
    let golden = r#"{"partitions":{"0":[1,2,3],"1":[2,3,4]},"topic_id":"7DYWEHTfSrm7Gzv9BSMfSg","adding_replicas":{"1":[4]},"removing_replicas":{"1":[1]},"version":3}"#;
    assert_eq!(s(&topic.encode()), golden);
    assert_eq!(
        TopicZNode::decode("foo", golden.as_bytes()).expect("decodes"),
        topic
    );
    let no_id = TopicZNode {
        topic_id: None,
        ..topic.clone()
    };
    assert_eq!(
        s(&no_id.encode()),
        r#"{"partitions":{"0":[1,2,3],"1":[2,3,4]},"adding_replicas":{"1":[4]},"removing_replicas":{"1":[1]},"version":3}"#
    );
    // 30 partitions: the order of Scala's mutable.HashMap after it grew to 64 buckets.
    let mut partitions = BTreeMap::new();
    for p in 0..30 {
        partitions.insert(
            p,
            ReplicaAssignment {
                replicas: vec![p],
                adding_replicas: if p % 3 == 0 { vec![7] } else { vec![] },
                removing_replicas: vec![],
            },
        );
    }
    let golden = r#"{"partitions":{"22":[22],"23":[23],"24":[24],"25":[25],"26":[26],"27":[27],"28":[28],"29":[29],"10":[10],"11":[11],"12":[12],"13":[13],"14":[14],"15":[15],"16":[16],"17":[17],"18":[18],"19":[19],"0":[0],"1":[1],"2":[2],"3":[3],"4":[4],"5":[5],"6":[6],"7":[7],"8":[8],"9":[9],"20":[20],"21":[21]},"adding_replicas":{"0":[7],"12":[7],"24":[7],"3":[7],"15":[7],"27":[7],"6":[7],"18":[7],"9":[7],"21":[7]},"removing_replicas":{},"version":3}"#;
    let t30 = TopicZNode {
        topic_id: None,
        partitions,
    };
    assert_eq!(s(&t30.encode()), golden);
    assert_eq!(
        TopicZNode::decode("foo", golden.as_bytes()).expect("decodes"),
        t30
    );
    // Version 1 (pre-2.8, no topic id, no reassignment maps).
    let v1 =
        TopicZNode::decode("old", br#"{"version":1,"partitions":{"0":[1]}}"#).expect("decodes");
    assert_eq!(v1.topic_id, None);
    assert_eq!(v1.partitions[&0].replicas, vec![1]);
}

#[test]
fn partition_state_and_producer_id_block_match_kafka() {
    let st = PartitionStateZNode {
        leader: 1,
        leader_epoch: 5,
        controller_epoch: 9,
        isr: vec![1, 2],
        leader_recovery_state: 0,
    };
    let golden = r#"{"controller_epoch":9,"leader":1,"version":1,"leader_epoch":5,"isr":[1,2]}"#;
    assert_eq!(s(&st.encode()), golden);
    let path = paths::partition_state("foo", 0);
    assert_eq!(
        PartitionStateZNode::decode(&path, golden.as_bytes()).expect("decodes"),
        st
    );
    let rec = PartitionStateZNode {
        isr: vec![1],
        leader_recovery_state: 1,
        ..st
    };
    let golden = r#"{"controller_epoch":9,"leader":1,"version":1,"leader_recovery_state":1,"leader_epoch":5,"isr":[1]}"#;
    assert_eq!(s(&rec.encode()), golden);
    assert_eq!(
        PartitionStateZNode::decode(&path, golden.as_bytes()).expect("decodes"),
        rec
    );

    let block = ProducerIdBlockZNode::for_next_producer_id(2000);
    let golden = r#"{"version":1,"broker":-1,"block_start":"2000","block_end":"2999"}"#;
    assert_eq!(s(&block.encode()), golden);
    assert_eq!(
        ProducerIdBlockZNode::decode(golden.as_bytes()).expect("decodes"),
        block
    );
    assert_eq!(block.next_block_first_id(), 3000);
}

#[test]
fn configs_scram_and_change_notifications_match_kafka() {
    let cfg = ConfigEntityZNode {
        config: [("retention.ms", "1000"), ("cleanup.policy", "compact")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    };
    let golden = r#"{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}"#;
    assert_eq!(s(&cfg.encode()), golden);
    assert_eq!(
        ConfigEntityZNode::decode("/config/topics/foo", golden.as_bytes()).expect("decodes"),
        cfg
    );
    assert_eq!(
        s(&ConfigEntityZNode::default().encode()),
        r#"{"version":1,"config":{}}"#
    );
    // A user's quotas and SCRAM credentials: java.util.Properties order.
    let user = ConfigEntityZNode {
        config: [
            ("consumer_byte_rate", "1024"),
            ("producer_byte_rate", "2048"),
            ("request_percentage", "12.5"),
            ("SCRAM-SHA-256", "x"),
            ("SCRAM-SHA-512", "y"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    };
    assert_eq!(
        s(&user.encode()),
        r#"{"version":1,"config":{"SCRAM-SHA-512":"y","SCRAM-SHA-256":"x","request_percentage":"12.5","producer_byte_rate":"2048","consumer_byte_rate":"1024"}}"#
    );
    // 15 topic configs: the table has grown to 32 bins. (Kafka's golden had 16 keys; the 16th,
    // `delete.retention.ms`, shares a bin with `retention.bytes`, where Java keeps insertion
    // order — see `java_properties_order`.)
    let keys = [
        "retention.ms",
        "cleanup.policy",
        "segment.bytes",
        "min.insync.replicas",
        "max.message.bytes",
        "compression.type",
        "flush.ms",
        "flush.messages",
        "segment.ms",
        "retention.bytes",
        "file.delete.delay.ms",
        "index.interval.bytes",
        "message.timestamp.type",
        "preallocate",
        "unclean.leader.election.enable",
    ];
    let many = ConfigEntityZNode {
        config: keys
            .iter()
            .map(|k| ((*k).to_owned(), "v".to_owned()))
            .collect(),
    };
    assert_eq!(
        s(&many.encode()),
        r#"{"version":1,"config":{"compression.type":"v","file.delete.delay.ms":"v","max.message.bytes":"v","message.timestamp.type":"v","min.insync.replicas":"v","preallocate":"v","index.interval.bytes":"v","unclean.leader.election.enable":"v","retention.bytes":"v","cleanup.policy":"v","flush.ms":"v","retention.ms":"v","segment.bytes":"v","segment.ms":"v","flush.messages":"v"}}"#
    );

    let golden = r#"{"version":2,"entity_path":"users/alice/clients/app"}"#;
    assert_eq!(
        s(&change_notification::encode("users/alice/clients/app")),
        golden
    );
    assert_eq!(
        change_notification::decode(
            "/config/changes/config_change_0000000001",
            golden.as_bytes()
        )
        .expect("decodes"),
        "users/alice/clients/app"
    );

    let cred = ScramCredentialString {
        salt: vec![1, 2, 3],
        stored_key: vec![4, 5],
        server_key: vec![6],
        iterations: 4096,
    };
    let golden = "salt=AQID,stored_key=BAU=,server_key=Bg==,iterations=4096";
    assert_eq!(cred.encode(), golden);
    assert_eq!(
        ScramCredentialString::decode(golden).expect("decodes"),
        cred
    );
    assert_eq!(
        ScramCredentialString::decode("iterations=4096,server_key=Bg==,salt=AQID,stored_key=BAU=")
            .expect("any order"),
        cred
    );
    assert!(ScramCredentialString::decode("salt=AQID,stored_key=BAU=,server_key=Bg==").is_err());
    assert!(
        ScramCredentialString::decode("salt=AQID,stored_key=BAU=,server_key=Bg==,iterations=x")
            .is_err()
    );
    assert!(ScramCredentialString::decode("=a,b=c,d=e,f=g").is_err());
}

#[test]
fn acls_and_acl_changes_match_kafka() {
    let acls = AclZNode {
        acls: vec![AclEntry {
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        }],
    };
    let golden = r#"{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"}],"version":1}"#;
    assert_eq!(s(&acls.encode().expect("known codes")), golden);
    assert_eq!(
        AclZNode::decode("/kafka-acl/Topic/foo", golden.as_bytes()).expect("decodes"),
        acls
    );
    // The comment example in Kafka's ZkData (other key order, spaces, Deny).
    let doc = r#"{"version": 1, "acls": [ { "host":"host1", "permissionType": "Deny","operation": "Read","principal": "User:alice"}]}"#;
    let decoded = AclZNode::decode("/kafka-acl/Topic/topic-1", doc.as_bytes()).expect("decodes");
    assert_eq!(decoded.acls[0].permission_type, 2);
    assert_eq!(decoded.acls[0].host, "host1");

    assert_eq!(
        resource_path(5, "tx*", PATTERN_PREFIXED).as_deref(),
        Some("/kafka-acl-extended/prefixed/TransactionalId/tx*")
    );
    assert_eq!(
        resource_path(6, "t1", PATTERN_LITERAL).as_deref(),
        Some("/kafka-acl/DelegationToken/t1")
    );
    let ext = AclChange {
        resource_type: 5,
        name: "tx*".into(),
        pattern_type: PATTERN_PREFIXED,
    };
    let (prefix, bytes) = ext.encode().expect("known");
    assert_eq!(prefix, "/kafka-acl-extended-changes/acl_changes_");
    assert_eq!(
        s(&bytes),
        r#"{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx*","patternType":"PREFIXED"}"#
    );
    assert_eq!(
        AclChange::decode_extended("/x", &bytes).expect("decodes"),
        ext
    );
    let lit = AclChange {
        resource_type: 6,
        name: "t1".into(),
        pattern_type: PATTERN_LITERAL,
    };
    let (prefix, bytes) = lit.encode().expect("known");
    assert_eq!(prefix, "/kafka-acl-changes/acl_changes_");
    assert_eq!(s(&bytes), "DELEGATION_TOKEN:t1");
    assert_eq!(
        AclChange::decode_literal("/x", &bytes).expect("decodes"),
        lit
    );
    assert_eq!(
        AclChange::decode_literal("/x", b"Topic:a:b")
            .expect("decodes")
            .name,
        "a:b"
    );
}

#[test]
fn delegation_token_matches_kafka() {
    let token = DelegationTokenZNode {
        token_id: "tok1".into(),
        owner: "User:al ice*".into(),
        token_requester: "User:al ice*".into(),
        renewers: vec!["User:bob".into()],
        issue_timestamp_ms: 1000,
        max_timestamp_ms: 3000,
        expiry_timestamp_ms: 2000,
    };
    let golden = r#"{"issueTimestamp":1000,"renewers":["User%3Abob"],"tokenRequester":"User%3Aal%20ice%2A","tokenId":"tok1","owner":"User%3Aal%20ice%2A","expiryTimestamp":2000,"maxTimestamp":3000,"version":3}"#;
    assert_eq!(s(&token.encode()), golden);
    assert_eq!(
        DelegationTokenZNode::decode("tok1", golden.as_bytes()).expect("decodes"),
        token
    );
    // Version 1: no tokenRequester, the owner requested it.
    let v1 = r#"{"version":1,"owner":"User%3Aa","renewers":[],"issueTimestamp":1,"maxTimestamp":3,"expiryTimestamp":2,"tokenId":"t"}"#;
    let d = DelegationTokenZNode::decode("t", v1.as_bytes()).expect("decodes");
    assert_eq!(d.token_requester, "User:a");
}

#[test]
fn broker_and_feature_znodes_decode() {
    // Kafka's documented v5 example (BrokerIdZNode.decode doc comment).
    let v5 = r#"{"version":5,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666","endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":"dc1","features":{"feature1":{"min_version":1,"max_version":2},"feature2":{"min_version":2,"max_version":4}}}"#;
    let b = BrokerRegistrationZNode::decode(1, v5.as_bytes()).expect("decodes");
    assert_eq!(b.endpoints.len(), 2);
    assert_eq!(b.rack.as_deref(), Some("dc1"));
    assert_eq!(b.features["feature2"].max, 4);
    let v1 =
        r#"{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}"#;
    assert_eq!(
        BrokerRegistrationZNode::decode(1, v1.as_bytes())
            .expect("decodes")
            .endpoints,
        vec!["PLAINTEXT://localhost:9092"]
    );

    // Kafka 3.9.1 FeatureZNode.encode(FeatureZNode(IBP_3_9_IV0, Enabled, Map())).
    let f = FeatureZNode::decode(br#"{"features":{},"version":2,"status":1}"#).expect("decodes");
    assert!(f.enabled);
    let f = FeatureZNode::decode(
        br#"{"features":{"metadata.version":{"max_version_level":21}},"version":2,"status":1}"#,
    )
    .expect("decodes");
    assert_eq!(f.features["metadata.version"], 21);
    let err = FeatureZNode::decode(
        br#"{"features":{"x":{"max_version_level":2}},"version":1,"status":1}"#,
    )
    .expect_err("v1 needs min");
    assert_eq!(err.path(), "/feature");
}

#[test]
fn bad_bytes_are_errors_naming_the_znode() {
    let cases: Vec<(&str, Result<(), ZNodeError>)> = vec![
        ("migration not JSON", MigrationZNode::decode(b"{nope").map(drop)),
        ("migration version 1", MigrationZNode::decode(br#"{"version":1,"kraft_controller_id":1,"kraft_controller_epoch":1,"kraft_metadata_offset":1,"kraft_metadata_epoch":1}"#).map(drop)),
        ("migration field missing", MigrationZNode::decode(br#"{"version":0}"#).map(drop)),
        ("topic: bad partition id", TopicZNode::decode("t", br#"{"partitions":{"x":[1]}}"#).map(drop)),
        ("topic: bad replica", TopicZNode::decode("t", br#"{"partitions":{"0":["a"]}}"#).map(drop)),
        ("topic: bad id", TopicZNode::decode("t", br#"{"topic_id":"nope","partitions":{}}"#).map(drop)),
        ("state: array", PartitionStateZNode::decode("/brokers/topics/t/partitions/0/state", b"[]").map(drop)),
        ("state: recovery 7", PartitionStateZNode::decode("/brokers/topics/t/partitions/0/state", br#"{"leader":1,"leader_epoch":1,"controller_epoch":1,"isr":[1],"leader_recovery_state":7}"#).map(drop)),
        ("acl version 2", AclZNode::decode("/kafka-acl/Topic/t", br#"{"version":2,"acls":[]}"#).map(drop)),
        ("acl bad op", AclZNode::decode("/kafka-acl/Topic/t", br#"{"version":1,"acls":[{"principal":"User:a","host":"*","operation":"Fly","permissionType":"Allow"}]}"#).map(drop)),
        ("token version 4", DelegationTokenZNode::decode("t", br#"{"version":4}"#).map(drop)),
        ("broker version 6", BrokerRegistrationZNode::decode(3, br#"{"version":6}"#).map(drop)),
        ("config value not a string", ConfigEntityZNode::decode("/config/topics/t", br#"{"version":1,"config":{"a":1}}"#).map(drop)),
        ("controller epoch text", controller_epoch::decode(b"x").map(drop)),
        ("producer id block", ProducerIdBlockZNode::decode(br#"{"version":1,"broker":1,"block_start":"x","block_end":"1"}"#).map(drop)),
    ];
    for (case, result) in cases {
        let err = result.expect_err(case);
        assert!(
            err.path().starts_with('/'),
            "{case}: error must name the znode, got {err}"
        );
        assert!(err.to_string().contains(err.path()), "{case}: {err}");
    }
}
