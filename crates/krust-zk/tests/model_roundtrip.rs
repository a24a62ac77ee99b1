//! Round trips of the znode codecs over random contents: whatever krust encodes decodes back
//! to the same value (names with any characters, any partition layout, any config text).

use std::collections::BTreeMap;

use krust_zk::model::acls::{AclEntry, AclZNode};
use krust_zk::model::configs::{ConfigEntityZNode, ScramCredentialString};
use krust_zk::model::names::{desanitize, sanitize};
use krust_zk::model::tokens::DelegationTokenZNode;
use krust_zk::model::topics::{PartitionStateZNode, ReplicaAssignment, TopicZNode};
use proptest::prelude::*;

fn ids() -> impl Strategy<Value = Vec<i32>> {
    proptest::collection::vec(0..10_000i32, 0..5)
}

proptest! {
    #[test]
    fn sanitized_names_are_znode_safe_and_desanitize(name in "\\PC{0,12}") {
        let s = sanitize(&name);
        prop_assert!(!s.contains('/') && !s.contains('*') && !s.contains(' '));
        prop_assert_eq!(desanitize(&s).expect("desanitizes"), name);
    }

    #[test]
    fn topic_znodes_round_trip(
        parts in proptest::collection::btree_map(0..200i32, (ids(), ids(), ids()), 0..40),
        id in proptest::option::of(any::<u128>()),
    ) {
        let topic = TopicZNode {
            topic_id: id.map(uuid::Uuid::from_u128),
            partitions: parts
                .into_iter()
                .map(|(p, (replicas, adding_replicas, removing_replicas))| (p, ReplicaAssignment { replicas, adding_replicas, removing_replicas }))
                .collect(),
        };
        prop_assert_eq!(TopicZNode::decode("t", &topic.encode()).expect("decodes"), topic);
    }

    #[test]
    fn partition_states_round_trip(leader in -1..100i32, leader_epoch in 0..i32::MAX, controller_epoch in -1..100i32, isr in ids(), recovering in any::<bool>()) {
        let state = PartitionStateZNode { leader, leader_epoch, controller_epoch, isr, leader_recovery_state: i8::from(recovering) };
        prop_assert_eq!(PartitionStateZNode::decode("/s", &state.encode()).expect("decodes"), state);
    }

    #[test]
    fn configs_round_trip(config in proptest::collection::btree_map("\\PC{0,10}", "\\PC{0,10}", 0..30)) {
        let znode = ConfigEntityZNode { config: config.into_iter().collect::<BTreeMap<_, _>>() };
        prop_assert_eq!(ConfigEntityZNode::decode("/config/topics/t", &znode.encode()).expect("decodes"), znode);
    }

    #[test]
    fn scram_credentials_round_trip(salt in proptest::collection::vec(any::<u8>(), 0..40), stored_key in proptest::collection::vec(any::<u8>(), 0..64), server_key in proptest::collection::vec(any::<u8>(), 0..64), iterations in any::<i32>()) {
        let c = ScramCredentialString { salt, stored_key, server_key, iterations };
        prop_assert_eq!(ScramCredentialString::decode(&c.encode()).expect("decodes"), c);
    }

    #[test]
    fn acls_round_trip(entries in proptest::collection::vec(("User:\\PC{0,6}", "\\PC{0,6}", 2i8..15, 2i8..4), 0..10)) {
        let znode = AclZNode {
            acls: entries
                .into_iter()
                .map(|(principal, host, operation, permission_type)| AclEntry { principal, host, operation, permission_type })
                .collect(),
        };
        prop_assert_eq!(AclZNode::decode("/kafka-acl/Topic/t", &znode.encode().expect("known codes")).expect("decodes"), znode);
    }

    #[test]
    fn tokens_round_trip(owner in "User:\\PC{0,8}", renewers in proptest::collection::vec("User:\\PC{0,8}", 0..3), times in any::<(i64, i64, i64)>()) {
        let token = DelegationTokenZNode {
            token_id: "id".into(),
            owner: owner.clone(),
            token_requester: owner,
            renewers,
            issue_timestamp_ms: times.0,
            max_timestamp_ms: times.1,
            expiry_timestamp_ms: times.2,
        };
        prop_assert_eq!(DelegationTokenZNode::decode("id", &token.encode()).expect("decodes"), token);
    }
}
