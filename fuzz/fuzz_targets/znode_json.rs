//! The ZooKeeper znodes a migrating controller reads from a Kafka 3.9 ZooKeeper cluster
//! (`krust_zk::model`): cluster id, controller and controller epoch, migration state, broker
//! registrations, features, topics and partition states, producer id blocks, entity configs
//! and their change notifications, SCRAM credentials and encoded passwords, ACLs and ACL
//! change notifications, delegation tokens, sanitized names.
//!
//! Input: a selector byte (which decoder), a path-choice byte, then the znode's data.
#![no_main]

use krust_zk::model::acls::{AclChange, AclZNode};
use krust_zk::model::cluster::{
    BrokerRegistrationZNode, ControllerRegistration, FeatureZNode, MigrationZNode, cluster_id,
    controller_epoch,
};
use krust_zk::model::configs::{ConfigEntityZNode, ScramCredentialString, change_notification};
use krust_zk::model::names::{desanitize, quota_entity_from_znode_name};
use krust_zk::model::password::PasswordEncoder;
use krust_zk::model::tokens::DelegationTokenZNode;
use krust_zk::model::topics::{PartitionStateZNode, ProducerIdBlockZNode, TopicZNode};
use libfuzzer_sys::fuzz_target;

const ACL_PATHS: [&str; 4] = [
    "/kafka-acl/Topic/t",
    "/kafka-acl/Cluster/kafka-cluster",
    "/kafka-acl-extended/prefixed/Group/g",
    "/kafka-acl/Unknown/x",
];
const CONFIG_PATHS: [&str; 4] = [
    "/config/topics/t",
    "/config/brokers/<default>",
    "/config/users/alice/clients/c",
    "/config/ips/127.0.0.1",
];

fuzz_target!(|data: &[u8]| {
    let Some((&[selector, path], bytes)) = data.split_first_chunk::<2>() else {
        return;
    };
    let acl_path = ACL_PATHS[usize::from(path) % ACL_PATHS.len()];
    let config_path = CONFIG_PATHS[usize::from(path) % CONFIG_PATHS.len()];
    let text = String::from_utf8_lossy(bytes);
    match selector % 18 {
        0 => drop(cluster_id::decode(bytes)),
        1 => drop(ControllerRegistration::decode(bytes)),
        2 => drop(controller_epoch::decode(bytes)),
        3 => drop(MigrationZNode::decode(bytes)),
        4 => drop(BrokerRegistrationZNode::decode(i32::from(path), bytes)),
        5 => drop(FeatureZNode::decode(bytes)),
        6 => drop(ConfigEntityZNode::decode(config_path, bytes)),
        7 => drop(change_notification::decode(
            "/config/changes/config_change_0000000001",
            bytes,
        )),
        8 => drop(ScramCredentialString::decode(&text)),
        9 => drop(AclZNode::decode(acl_path, bytes)),
        10 => drop(AclChange::decode_literal(
            "/kafka-acl-changes/acl_changes_0000000001",
            bytes,
        )),
        11 => drop(AclChange::decode_extended(
            "/kafka-acl-extended-changes/acl_changes_0000000001",
            bytes,
        )),
        12 => drop(DelegationTokenZNode::decode("token-1", bytes)),
        13 => drop(TopicZNode::decode("t", bytes)),
        14 => drop(PartitionStateZNode::decode(
            "/brokers/topics/t/partitions/0/state",
            bytes,
        )),
        15 => drop(ProducerIdBlockZNode::decode(bytes)),
        16 => drop(PasswordEncoder::new("secret").decode(&text)),
        _ => {
            let _ = desanitize(&text);
            let _ = quota_entity_from_znode_name(&text);
        }
    }
});
