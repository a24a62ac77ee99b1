//! Znode paths (Kafka 3.9 `ZkData.scala`). Names go in as the znode name: callers sanitize
//! user/client ids first ([`super::names`]); topic names and broker ids are used as they are.

/// `/cluster/id`.
pub const CLUSTER_ID: &str = "/cluster/id";
/// `/controller`.
pub const CONTROLLER: &str = "/controller";
/// `/controller_epoch`.
pub const CONTROLLER_EPOCH: &str = "/controller_epoch";
/// `/migration`.
pub const MIGRATION: &str = "/migration";
/// `/brokers/ids`.
pub const BROKER_IDS: &str = "/brokers/ids";
/// `/brokers/topics`.
pub const TOPICS: &str = "/brokers/topics";
/// `/config`.
pub const CONFIG: &str = "/config";
/// `/config/changes`.
pub const CONFIG_CHANGES: &str = "/config/changes";
/// The sequential-node prefix of a config change: `/config/changes/config_change_`.
pub const CONFIG_CHANGE_PREFIX: &str = "/config/changes/config_change_";
/// `/admin/delete_topics`.
pub const DELETE_TOPICS: &str = "/admin/delete_topics";
/// `/admin/reassign_partitions`.
pub const REASSIGN_PARTITIONS: &str = "/admin/reassign_partitions";
/// `/latest_producer_id_block`.
pub const PRODUCER_ID_BLOCK: &str = "/latest_producer_id_block";
/// `/kafka-acl` (literal patterns).
pub const LITERAL_ACLS: &str = "/kafka-acl";
/// `/kafka-acl-extended` (one child per non-literal pattern type, lower case).
pub const EXTENDED_ACLS: &str = "/kafka-acl-extended";
/// `/kafka-acl-extended/prefixed`.
pub const PREFIXED_ACLS: &str = "/kafka-acl-extended/prefixed";
/// `/kafka-acl-changes`.
pub const LITERAL_ACL_CHANGES: &str = "/kafka-acl-changes";
/// `/kafka-acl-extended-changes`.
pub const EXTENDED_ACL_CHANGES: &str = "/kafka-acl-extended-changes";
/// The sequential-node prefix of a literal ACL change.
pub const LITERAL_ACL_CHANGE_PREFIX: &str = "/kafka-acl-changes/acl_changes_";
/// The sequential-node prefix of an extended ACL change.
pub const EXTENDED_ACL_CHANGE_PREFIX: &str = "/kafka-acl-extended-changes/acl_changes_";
/// `/delegation_token/tokens`.
pub const DELEGATION_TOKENS: &str = "/delegation_token/tokens";
/// `/feature`.
pub const FEATURE: &str = "/feature";

/// Config entity types (`ConfigType`): the children of `/config`.
pub mod config_type {
    /// `topics`.
    pub const TOPIC: &str = "topics";
    /// `clients`.
    pub const CLIENT: &str = "clients";
    /// `users`.
    pub const USER: &str = "users";
    /// `brokers`.
    pub const BROKER: &str = "brokers";
    /// `ips`.
    pub const IP: &str = "ips";
    /// All, in Kafka's `ConfigType.ALL` order.
    pub const ALL: [&str; 5] = [TOPIC, CLIENT, USER, BROKER, IP];
}

/// The persistent paths a Kafka broker creates at start-up (`ZkData.PersistentZkPaths`, in
/// order), which the migration also makes sure exist (`createTopLevelPaths`).
pub const PERSISTENT_PATHS: [&str; 14] = [
    "/consumers",
    "/brokers/ids",
    "/brokers/topics",
    "/config/changes",
    "/admin/delete_topics",
    "/brokers/seqid",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
];

/// `/brokers/ids/<id>`.
#[must_use]
pub fn broker(id: i32) -> String {
    format!("{BROKER_IDS}/{id}")
}

/// `/brokers/topics/<topic>`.
#[must_use]
pub fn topic(topic: &str) -> String {
    format!("{TOPICS}/{topic}")
}

/// `/brokers/topics/<topic>/partitions`.
#[must_use]
pub fn topic_partitions(topic: &str) -> String {
    format!("{TOPICS}/{topic}/partitions")
}

/// `/brokers/topics/<topic>/partitions/<partition>`.
#[must_use]
pub fn topic_partition(topic: &str, partition: i32) -> String {
    format!("{TOPICS}/{topic}/partitions/{partition}")
}

/// `/brokers/topics/<topic>/partitions/<partition>/state`.
#[must_use]
pub fn partition_state(topic: &str, partition: i32) -> String {
    format!("{TOPICS}/{topic}/partitions/{partition}/state")
}

/// `/config/<entity_type>`.
#[must_use]
pub fn config_type(entity_type: &str) -> String {
    format!("{CONFIG}/{entity_type}")
}

/// `/config/<entity_type>/<znode_name>`; `znode_name` may hold `/` (`alice/clients/app`).
#[must_use]
pub fn config_entity(entity_type: &str, znode_name: &str) -> String {
    format!("{CONFIG}/{entity_type}/{znode_name}")
}

/// `/config/users/<user>/clients/<client>` (both znode names).
#[must_use]
pub fn user_client_config(user: &str, client: &str) -> String {
    format!("{CONFIG}/users/{user}/clients/{client}")
}

/// `/admin/delete_topics/<topic>`.
#[must_use]
pub fn delete_topic(topic: &str) -> String {
    format!("{DELETE_TOPICS}/{topic}")
}

/// `/delegation_token/tokens/<token_id>`.
#[must_use]
pub fn delegation_token(token_id: &str) -> String {
    format!("{DELEGATION_TOKENS}/{token_id}")
}
