//! KRaft → ZooKeeper: the writes that keep ZooKeeper a faithful copy of the KRaft metadata
//! while the migration dual-writes (facts §6.10; Kafka 3.9's `KRaftMigrationZkWriter` and the
//! `Zk*MigrationClient`s behind it).
//!
//! Pure functions: [`write_delta`] turns one committed delta into ZooKeeper writes,
//! [`reconcile`] diffs a whole image against what ZooKeeper holds (the snapshot path, run on
//! every leadership change and every snapshot loaded while dual-writing: it repairs missed
//! writes). Both return a [`ZkWriteBatch`] that [`crate::exec::apply_batch`] runs, each write
//! fenced by `/controller_epoch` and `/migration`.
//!
//! Every write can be re-applied: creates that find their node are done (topic creation) or
//! are upserts, deletes accept an absent node, updates overwrite. A batch cut short by a
//! ZooKeeper outage is therefore simply run again.
//!
//! Deviations from Kafka, all towards fewer or safer writes with the same final content:
//! a topic's creation is one multi-op (Kafka: one per znode); the snapshot path deletes
//! ZooKeeper-only topics before creating KRaft-only ones (Kafka creates first, so a topic
//! re-created under the same name with a new id would be lost), and rewrites a quota, SCRAM
//! credential or delegation token only when it differs (Kafka rewrites all of them); partition
//! states are compared without their partition epoch (the ZooKeeper one is the state znode's
//! version) and controller epoch; the producer-id block is in sync when it starts at the
//! image's next producer id.

use std::collections::{BTreeMap, BTreeSet};

use krust_metadata::image::acls::StandardAcl;
use krust_metadata::image::client_quotas::ClientQuotaEntity;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::image::delegation_tokens::DelegationTokenData;
use krust_metadata::image::topics::{PartitionRegistration, TopicImage};
use krust_metadata::{MetadataDelta, MetadataImage};
use krust_zk::model::acls::{AclChange, AclEntry, AclZNode, resource_path};
use krust_zk::model::configs::{
    ConfigEntityZNode, ScramCredentialString, change_notification, entity_path,
    quota_value_to_string, scram_mechanism_name,
};
use krust_zk::model::names::{config_resource_znode_name, quota_entity_znode_name};
use krust_zk::model::password::{PasswordEncoder, is_password_config};
use krust_zk::model::paths::{self, config_type};
use krust_zk::model::tokens::DelegationTokenZNode;
use krust_zk::model::topics::{
    PartitionStateZNode, ProducerIdBlockZNode, ReplicaAssignment, TopicZNode,
};
use krust_zk::ops::{ANY_VERSION, CreateMode, ZkOp};
use krust_zk::tree::ZkTree;

use crate::reader::{QUOTA_CLIENT_ID, QUOTA_IP, QUOTA_USER, ReadError, ZkMetadata, ZkPartition};

/// Kafka's operation names (counted per write for logging).
pub mod op {
    /// A topic created.
    pub const CREATE_TOPIC: &str = "CreateTopic";
    /// A topic's assignment rewritten.
    pub const UPDATE_TOPIC: &str = "UpdateTopic";
    /// A topic deleted.
    pub const DELETE_TOPIC: &str = "DeleteTopic";
    /// A `/admin/delete_topics` entry cleared.
    pub const DELETE_PENDING_TOPIC_DELETION: &str = "DeletePendingTopicDeletion";
    /// A partition created or its state rewritten.
    pub const UPDATE_PARTITION: &str = "UpdatePartition";
    /// A partition ZooKeeper has and KRaft not.
    pub const DELETE_PARTITION: &str = "DeletePartition";
    /// Broker configs written (snapshot).
    pub const UPDATE_BROKER_CONFIG: &str = "UpdateBrokerConfig";
    /// Broker configs deleted (snapshot).
    pub const DELETE_BROKER_CONFIG: &str = "DeleteBrokerConfig";
    /// Topic configs written (snapshot).
    pub const UPDATE_TOPIC_CONFIG: &str = "UpdateTopicConfig";
    /// Topic configs deleted (snapshot).
    pub const DELETE_TOPIC_CONFIG: &str = "DeleteTopicConfig";
    /// Configs written (delta).
    pub const UPDATE_CONFIG: &str = "UpdateConfig";
    /// Configs deleted (delta).
    pub const DELETE_CONFIG: &str = "DeleteConfig";
    /// Client quotas and/or SCRAM credentials written.
    pub const UPDATE_CLIENT_QUOTA: &str = "UpdateClientQuota";
    /// A resource's ACLs written.
    pub const UPDATE_ACL: &str = "UpdateAcl";
    /// A resource's ACLs deleted.
    pub const DELETE_ACL: &str = "DeleteAcl";
    /// The producer-id block written.
    pub const UPDATE_PRODUCER_ID: &str = "UpdateProducerId";
    /// A delegation token written.
    pub const UPDATE_DELEGATION_TOKEN: &str = "UpdateDelegationToken";
    /// A delegation token deleted.
    pub const DELETE_DELEGATION_TOKEN: &str = "DeleteDelegationToken";
}

/// One ZooKeeper write; the executor wraps each in its own fenced multi-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkWrite {
    /// These operations in one fenced multi-op (the executor adds the fence in front).
    Ops {
        /// The operations.
        ops: Vec<ZkOp>,
        /// `NODEEXISTS` on the first operation (a create) means the write was already done
        /// (a topic's creation re-applied): not an error.
        if_exists_done: bool,
    },
    /// `setData` at any version, or — when the node is absent — create it, creating missing
    /// parents with empty data.
    Upsert {
        /// The node.
        path: String,
        /// Its new data.
        data: Vec<u8>,
    },
    /// Delete the node, and with `recursive` everything under it; an absent node is fine.
    Delete {
        /// The node.
        path: String,
        /// Delete its children first.
        recursive: bool,
    },
}

/// The writes for one delta or one reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZkWriteBatch {
    /// Fenced writes, in order, each with Kafka's operation name.
    pub writes: Vec<(&'static str, ZkWrite)>,
    /// Change notifications (`/config/changes/config_change_*`, ACL changes), written after
    /// all fenced writes succeeded, unfenced (Kafka writes them outside the guarded multi-op).
    pub notifications: Vec<ZkOp>,
}

impl ZkWriteBatch {
    /// Whether there is nothing to write.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.notifications.is_empty()
    }

    /// Number of writes per operation name.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (name, _) in &self.writes {
            *counts.entry(*name).or_insert(0) += 1;
        }
        counts
    }

    fn push(&mut self, name: &'static str, write: ZkWrite) {
        self.writes.push((name, write));
    }

    fn notify_config(&mut self, entity_type: &str, znode_name: &str) {
        self.notifications.push(ZkOp::Create {
            path: paths::CONFIG_CHANGE_PREFIX.to_owned(),
            data: change_notification::encode(&entity_path(entity_type, znode_name)),
            mode: CreateMode::PersistentSequential,
        });
    }

    fn notify_acl(&mut self, pattern: &AclPattern) {
        let change = AclChange {
            resource_type: pattern.0,
            name: pattern.1.clone(),
            pattern_type: pattern.2,
        };
        if let Some((prefix, data)) = change.encode() {
            self.notifications.push(ZkOp::Create {
                path: prefix.to_owned(),
                data,
                mode: CreateMode::PersistentSequential,
            });
        }
    }
}

/// What the writer needs besides the metadata.
#[derive(Debug, Clone)]
pub struct WriterContext {
    /// The `controller_epoch` written into partition state znodes. Kafka 3.9 writes the KRaft
    /// controller's epoch there (`ZkTopicMigrationClient` passes
    /// `state.kraftControllerEpoch()`), not the claimed ZooKeeper controller epoch.
    pub kraft_controller_epoch: i32,
    /// Encrypts password-type broker configs (`password.encoder.secret`); without one they
    /// are written as they are (Kafka's no-op encoder).
    pub password_encoder: Option<PasswordEncoder>,
}

/// (resource type, resource name, pattern type).
type AclPattern = (i8, String, i8);

/// A quota entity's quotas and SCRAM credential strings by config key.
type QuotasAndScram = (BTreeMap<String, f64>, BTreeMap<String, String>);

fn state_znode(partition: &PartitionRegistration, ctx: &WriterContext) -> PartitionStateZNode {
    PartitionStateZNode {
        leader: partition.leader,
        leader_epoch: partition.leader_epoch,
        controller_epoch: ctx.kraft_controller_epoch,
        isr: partition.isr.clone(),
        leader_recovery_state: partition.leader_recovery_state.value(),
    }
}

fn topic_znode(topic: &TopicImage) -> TopicZNode {
    TopicZNode {
        topic_id: Some(topic.id),
        partitions: topic
            .partitions
            .iter()
            .map(|(id, p)| {
                (
                    *id,
                    ReplicaAssignment {
                        replicas: p.replicas.clone(),
                        adding_replicas: p.adding_replicas.clone(),
                        removing_replicas: p.removing_replicas.clone(),
                    },
                )
            })
            .collect(),
    }
}

fn create_topic(batch: &mut ZkWriteBatch, topic: &TopicImage, ctx: &WriterContext) {
    let mut ops = vec![
        ZkOp::create(paths::topic(&topic.name), topic_znode(topic).encode()),
        ZkOp::create(paths::topic_partitions(&topic.name), Vec::new()),
    ];
    for (id, partition) in &topic.partitions {
        ops.push(ZkOp::create(
            paths::topic_partition(&topic.name, *id),
            Vec::new(),
        ));
        ops.push(ZkOp::create(
            paths::partition_state(&topic.name, *id),
            state_znode(partition, ctx).encode(),
        ));
    }
    batch.push(
        op::CREATE_TOPIC,
        ZkWrite::Ops {
            ops,
            if_exists_done: true,
        },
    );
    // The topic's (empty) config znode, as its own upsert: a config znode left behind by an
    // interrupted deletion must not make the creation fail forever (Kafka creates it in the
    // same batch and would). The topic's real configs, if any, are written after this by the
    // config writes of the same delta or reconciliation.
    batch.push(
        op::CREATE_TOPIC,
        ZkWrite::Upsert {
            path: paths::config_entity(config_type::TOPIC, &topic.name),
            data: ConfigEntityZNode::default().encode(),
        },
    );
}

fn update_topic(batch: &mut ZkWriteBatch, topic: &TopicImage) {
    batch.push(
        op::UPDATE_TOPIC,
        ZkWrite::Ops {
            ops: vec![ZkOp::set_data(
                paths::topic(&topic.name),
                topic_znode(topic).encode(),
                ANY_VERSION,
            )],
            if_exists_done: false,
        },
    );
}

fn delete_topic(batch: &mut ZkWriteBatch, name: &str) {
    batch.push(
        op::DELETE_TOPIC,
        ZkWrite::Delete {
            path: paths::topic(name),
            recursive: true,
        },
    );
    batch.push(
        op::DELETE_TOPIC,
        ZkWrite::Delete {
            path: paths::config_entity(config_type::TOPIC, name),
            recursive: false,
        },
    );
}

fn write_partition(
    batch: &mut ZkWriteBatch,
    topic: &str,
    id: i32,
    p: &PartitionRegistration,
    ctx: &WriterContext,
) {
    batch.push(
        op::UPDATE_PARTITION,
        ZkWrite::Upsert {
            path: paths::partition_state(topic, id),
            data: state_znode(p, ctx).encode(),
        },
    );
}

fn same_assignment(a: &PartitionRegistration, b: &PartitionRegistration) -> bool {
    a.replicas == b.replicas
        && a.adding_replicas == b.adding_replicas
        && a.removing_replicas == b.removing_replicas
}

fn config_entity_type(resource: &ConfigResource) -> Option<&'static str> {
    match resource.resource_type {
        ConfigResourceType::BROKER => Some(config_type::BROKER),
        ConfigResourceType::TOPIC => Some(config_type::TOPIC),
        _ => None,
    }
}

/// Writes `configs` of a broker or topic (delete when empty) and a change notification.
fn write_configs(
    batch: &mut ZkWriteBatch,
    resource: &ConfigResource,
    configs: &BTreeMap<String, String>,
    snapshot: bool,
    ctx: &WriterContext,
    rng: &mut impl rand::Rng,
) {
    let Some(kind) = config_entity_type(resource) else {
        tracing::error!(resource = ?resource, "not writing configs of a resource that is neither a broker nor a topic to ZooKeeper");
        return;
    };
    let broker = kind == config_type::BROKER;
    let znode_name = config_resource_znode_name(&resource.name);
    let path = paths::config_entity(kind, znode_name);
    if configs.is_empty() {
        let name = match (snapshot, broker) {
            (false, _) => op::DELETE_CONFIG,
            (true, true) => op::DELETE_BROKER_CONFIG,
            (true, false) => op::DELETE_TOPIC_CONFIG,
        };
        batch.push(
            name,
            ZkWrite::Delete {
                path,
                recursive: false,
            },
        );
    } else {
        let mut stored = BTreeMap::new();
        for (key, value) in configs {
            let value = match &ctx.password_encoder {
                Some(encoder) if is_password_config(key) => match encoder.encode(value, rng) {
                    Ok(encrypted) => encrypted,
                    Err(error) => {
                        tracing::error!(key = %key, error = %error, "cannot encrypt a password config; not writing it to ZooKeeper");
                        continue;
                    }
                },
                _ => value.clone(),
            };
            stored.insert(key.clone(), value);
        }
        let name = match (snapshot, broker) {
            (false, _) => op::UPDATE_CONFIG,
            (true, true) => op::UPDATE_BROKER_CONFIG,
            (true, false) => op::UPDATE_TOPIC_CONFIG,
        };
        batch.push(
            name,
            ZkWrite::Upsert {
                path,
                data: ConfigEntityZNode { config: stored }.encode(),
            },
        );
    }
    batch.notify_config(kind, znode_name);
}

/// The znode and entity path of a quota entity (Kafka's `writeClientQuotas`), `None` for an
/// entity ZooKeeper cannot hold.
fn quota_znode(entity: &ClientQuotaEntity) -> Option<(String, String, String)> {
    let component = |t: &str| {
        entity
            .0
            .get(t)
            .map(|name| quota_entity_znode_name(name.as_deref()))
    };
    let user = component(QUOTA_USER);
    let client = component(QUOTA_CLIENT_ID);
    let ip = component(QUOTA_IP);
    let (kind, name) = match (user, client, ip) {
        (Some(u), None, _) => (config_type::USER, u),
        (Some(u), Some(c), _) => (config_type::USER, format!("{u}/clients/{c}")),
        (None, Some(c), _) => (config_type::CLIENT, c),
        (None, None, Some(i)) => (config_type::IP, i),
        (None, None, None) => return None,
    };
    Some((paths::config_entity(kind, &name), kind.to_owned(), name))
}

fn write_client_quotas(
    batch: &mut ZkWriteBatch,
    entity: &ClientQuotaEntity,
    quotas: &BTreeMap<String, f64>,
    scram: &BTreeMap<String, String>,
) {
    let Some((path, kind, name)) = quota_znode(entity) else {
        tracing::error!(entity = ?entity, "skipping unknown client quota entity");
        return;
    };
    let mut config: BTreeMap<String, String> = quotas
        .iter()
        .map(|(k, v)| (k.clone(), quota_value_to_string(k, *v)))
        .collect();
    config.extend(scram.iter().map(|(k, v)| (k.clone(), v.clone())));
    batch.push(
        op::UPDATE_CLIENT_QUOTA,
        ZkWrite::Upsert {
            path,
            data: ConfigEntityZNode { config }.encode(),
        },
    );
    batch.notify_config(&kind, &name);
}

fn user_entity(user: &str) -> ClientQuotaEntity {
    ClientQuotaEntity(
        [(QUOTA_USER.to_owned(), Some(user.to_owned()))]
            .into_iter()
            .collect(),
    )
}

fn is_user_only(entity: &ClientQuotaEntity) -> Option<Option<String>> {
    if entity.0.contains_key(QUOTA_CLIENT_ID) {
        return None;
    }
    entity.0.get(QUOTA_USER).cloned()
}

/// The SCRAM credential strings of `user` in `image`, by config key.
fn scram_strings(image: &MetadataImage, user: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for ((mechanism, name), credential) in &image.scram.credentials {
        if name != user {
            continue;
        }
        if let Some(key) = scram_mechanism_name(*mechanism) {
            let text = ScramCredentialString {
                salt: credential.salt.clone(),
                stored_key: credential.stored_key.clone(),
                server_key: credential.server_key.clone(),
                iterations: credential.iterations,
            }
            .encode();
            out.insert(key.to_owned(), text);
        }
    }
    out
}

fn quotas_of(image: &MetadataImage, entity: &ClientQuotaEntity) -> BTreeMap<String, f64> {
    image
        .client_quotas
        .entities
        .get(entity)
        .map(|q| q.iter().map(|(k, v)| (k.clone(), *v)).collect())
        .unwrap_or_default()
}

fn acl_pattern(acl: &StandardAcl) -> AclPattern {
    (
        acl.resource_type,
        acl.resource_name.clone(),
        acl.pattern_type,
    )
}

fn acl_entry(acl: &StandardAcl) -> AclEntry {
    AclEntry {
        principal: acl.principal.clone(),
        host: acl.host.clone(),
        operation: acl.operation,
        permission_type: acl.permission_type,
    }
}

fn acls_by_pattern(image: &MetadataImage) -> BTreeMap<AclPattern, BTreeSet<AclEntry>> {
    let mut out: BTreeMap<AclPattern, BTreeSet<AclEntry>> = BTreeMap::new();
    for acl in image.acls.acls.values() {
        out.entry(acl_pattern(acl))
            .or_default()
            .insert(acl_entry(acl));
    }
    out
}

fn write_acls(batch: &mut ZkWriteBatch, pattern: &AclPattern, entries: &BTreeSet<AclEntry>) {
    let Some(path) = resource_path(pattern.0, &pattern.1, pattern.2) else {
        tracing::error!(pattern = ?pattern, "skipping ACLs of a resource pattern ZooKeeper cannot hold");
        return;
    };
    if entries.is_empty() {
        batch.push(
            op::DELETE_ACL,
            ZkWrite::Delete {
                path,
                recursive: false,
            },
        );
    } else {
        let znode = AclZNode {
            acls: entries.iter().cloned().collect(),
        };
        let Some(data) = znode.encode() else {
            tracing::error!(pattern = ?pattern, "skipping ACLs with an unknown operation or permission");
            return;
        };
        batch.push(op::UPDATE_ACL, ZkWrite::Upsert { path, data });
    }
    batch.notify_acl(pattern);
}

fn token_znode(id: &str, token: &DelegationTokenData) -> DelegationTokenZNode {
    DelegationTokenZNode {
        token_id: id.to_owned(),
        owner: token.owner.clone(),
        token_requester: token.requester.clone(),
        renewers: token.renewers.clone(),
        issue_timestamp_ms: token.issue_timestamp_ms,
        max_timestamp_ms: token.max_timestamp_ms,
        expiry_timestamp_ms: token.expiration_timestamp_ms,
    }
}

fn write_producer_id(batch: &mut ZkWriteBatch, next_producer_id: i64) {
    batch.push(
        op::UPDATE_PRODUCER_ID,
        ZkWrite::Upsert {
            path: paths::PRODUCER_ID_BLOCK.to_owned(),
            data: ProducerIdBlockZNode::for_next_producer_id(next_producer_id).encode(),
        },
    );
}

/// The ZooKeeper writes mirroring one committed `delta` (`previous` → `image`), in Kafka's
/// order: topics, configs, client quotas and SCRAM, producer ids, ACLs, delegation tokens.
/// `rng` salts encrypted password configs.
#[must_use]
pub fn write_delta(
    delta: &MetadataDelta,
    previous: &MetadataImage,
    image: &MetadataImage,
    ctx: &WriterContext,
    rng: &mut impl rand::Rng,
) -> ZkWriteBatch {
    let mut batch = ZkWriteBatch::default();
    if let Some(topics) = delta.topics_delta() {
        for id in topics.deleted_topic_ids() {
            match previous.topics.topic(*id) {
                Some(topic) => delete_topic(&mut batch, &topic.name),
                None => {
                    tracing::error!(topic_id = %id, "cannot delete a topic from ZooKeeper: it is not in the previous image")
                }
            }
        }
        for (id, topic_delta) in topics.changed_topics() {
            let Some(topic) = image.topics.topic(*id) else {
                continue;
            };
            if topics.topic_was_created(*id) {
                create_topic(&mut batch, topic, ctx);
                continue;
            }
            let before = &topic_delta.image().partitions;
            let assignment_changed = topic_delta
                .partition_changes()
                .iter()
                .any(|(p, after)| before.get(p).is_none_or(|b| !same_assignment(b, after)));
            if assignment_changed {
                update_topic(&mut batch, topic);
            }
            for (p, after) in topic_delta.partition_changes() {
                write_partition(&mut batch, &topic.name, *p, after, ctx);
            }
        }
    }
    if let Some(configs) = delta.configs_delta() {
        for resource in configs.changes().keys() {
            let current: BTreeMap<String, String> =
                image.configs.configs(resource).into_iter().collect();
            write_configs(&mut batch, resource, &current, false, ctx, rng);
        }
    }
    if delta.client_quotas_delta().is_some() || delta.scram_delta().is_some() {
        let mut users: BTreeSet<Option<String>> = BTreeSet::new();
        if let Some(scram) = delta.scram_delta() {
            users.extend(scram.changes().keys().map(|(_, user)| Some(user.clone())));
        }
        if let Some(quotas) = delta.client_quotas_delta() {
            for entity in quotas.changes().keys() {
                match is_user_only(entity) {
                    Some(user) => {
                        users.insert(user);
                    }
                    None => write_client_quotas(
                        &mut batch,
                        entity,
                        &quotas_of(image, entity),
                        &BTreeMap::new(),
                    ),
                }
            }
        }
        for user in users {
            let entity = ClientQuotaEntity(
                [(QUOTA_USER.to_owned(), user.clone())]
                    .into_iter()
                    .collect(),
            );
            let scram = user
                .as_deref()
                .map(|u| scram_strings(image, u))
                .unwrap_or_default();
            write_client_quotas(&mut batch, &entity, &quotas_of(image, &entity), &scram);
        }
    }
    if delta.producer_ids_delta().is_some() && image.producer_ids.next_producer_id >= 0 {
        write_producer_id(&mut batch, image.producer_ids.next_producer_id);
    }
    if let Some(acls) = delta.acls_delta() {
        let mut patterns = BTreeSet::new();
        for (id, change) in acls.changes() {
            match change {
                Some(acl) => {
                    patterns.insert(acl_pattern(acl));
                }
                None => match previous.acls.acls.get(id) {
                    Some(acl) => {
                        patterns.insert(acl_pattern(acl));
                    }
                    None => {
                        tracing::error!(acl_id = %id, "cannot delete an ACL from ZooKeeper: it is not in the previous image")
                    }
                },
            }
        }
        let current = acls_by_pattern(image);
        for pattern in patterns {
            let entries = current.get(&pattern).cloned().unwrap_or_default();
            write_acls(&mut batch, &pattern, &entries);
        }
    }
    if let Some(tokens) = delta.delegation_tokens_delta() {
        for id in tokens.changes().keys() {
            match image.delegation_tokens.tokens.get(id) {
                Some(token) => batch.push(
                    op::UPDATE_DELEGATION_TOKEN,
                    ZkWrite::Upsert {
                        path: paths::delegation_token(id),
                        data: token_znode(id, token).encode(),
                    },
                ),
                None => batch.push(
                    op::DELETE_DELEGATION_TOKEN,
                    ZkWrite::Delete {
                        path: paths::delegation_token(id),
                        recursive: false,
                    },
                ),
            }
        }
    }
    batch
}

fn state_matches(zk: &ZkPartition, kraft: &PartitionRegistration) -> bool {
    zk.state.as_ref().is_some_and(|(state, _)| {
        state.leader == kraft.leader
            && state.leader_epoch == kraft.leader_epoch
            && state.isr == kraft.isr
            && state.leader_recovery_state == kraft.leader_recovery_state.value()
    })
}

fn zk_assignment_matches(zk: &ZkPartition, kraft: &PartitionRegistration) -> bool {
    zk.replicas == kraft.replicas
        && zk.adding_replicas == kraft.adding_replicas
        && zk.removing_replicas == kraft.removing_replicas
}

/// The full diff of `image` against ZooKeeper's content `zk` (read from
/// [`crate::reader::MIGRATION_READ_ROOTS`]): the snapshot path of Kafka's writer. In order:
/// clear pending topic deletions; delete ZooKeeper-only topics; create KRaft-only topics;
/// rewrite changed assignments, create missing partitions, rewrite changed partition states,
/// delete extra partitions; then configs, client quotas and SCRAM, the producer-id block,
/// ACLs and delegation tokens wherever they differ.
///
/// # Errors
/// A znode of `zk` that does not decode.
pub fn reconcile(
    image: &MetadataImage,
    zk: &ZkTree,
    ctx: &WriterContext,
    rng: &mut impl rand::Rng,
) -> Result<ZkWriteBatch, ReadError> {
    let metadata = ZkMetadata::parse(zk, ctx.password_encoder.as_ref())?;
    let mut batch = ZkWriteBatch::default();

    for topic in &metadata.pending_deletions {
        batch.push(
            op::DELETE_PENDING_TOPIC_DELETION,
            ZkWrite::Delete {
                path: paths::delete_topic(topic),
                recursive: false,
            },
        );
    }

    // Topics.
    let mut in_zk = BTreeSet::new();
    // Topics whose config znode this reconciliation deletes or resets: their ZooKeeper configs
    // are gone by the time the configs are compared.
    let mut configs_reset = BTreeSet::new();
    for topic in &metadata.topics {
        match image.topics.topic(topic.id) {
            Some(kraft) if kraft.name == topic.name => {
                in_zk.insert(topic.id);
            }
            _ => {
                delete_topic(&mut batch, &topic.name);
                configs_reset.insert(topic.name.clone());
            }
        }
    }
    for (id, topic) in &image.topics.by_id {
        if !in_zk.contains(id) {
            create_topic(&mut batch, topic, ctx);
            configs_reset.insert(topic.name.clone());
        }
    }
    for zk_topic in &metadata.topics {
        if !in_zk.contains(&zk_topic.id) {
            continue;
        }
        let Some(kraft) = image.topics.topic(zk_topic.id) else {
            continue;
        };
        let same_partitions = zk_topic
            .partitions
            .keys()
            .copied()
            .eq(kraft.partitions.keys().copied());
        let assignment_changed = !same_partitions
            || zk_topic.partitions.iter().any(|(p, zp)| {
                kraft
                    .partitions
                    .get(p)
                    .is_some_and(|kp| !zk_assignment_matches(zp, kp))
            });
        if assignment_changed {
            update_topic(&mut batch, kraft);
        }
        for (p, kp) in &kraft.partitions {
            let missing_or_changed = zk_topic
                .partitions
                .get(p)
                .is_none_or(|zp| !state_matches(zp, kp));
            if missing_or_changed {
                write_partition(&mut batch, &kraft.name, *p, kp, ctx);
            }
        }
        for p in zk_topic.partitions.keys() {
            if !kraft.partitions.contains_key(p) {
                batch.push(
                    op::DELETE_PARTITION,
                    ZkWrite::Delete {
                        path: paths::topic_partition(&kraft.name, *p),
                        recursive: true,
                    },
                );
            }
        }
    }

    // Configs.
    let mut zk_configs: BTreeMap<ConfigResource, BTreeMap<String, String>> = BTreeMap::new();
    for (name, config) in &metadata.topic_configs {
        if !configs_reset.contains(name) {
            zk_configs.insert(ConfigResource::topic(name.clone()), config.clone());
        }
    }
    for (name, config) in &metadata.broker_configs {
        zk_configs.insert(
            ConfigResource {
                resource_type: ConfigResourceType::BROKER,
                name: name.clone(),
            },
            config.clone(),
        );
    }
    let mut resources: BTreeSet<ConfigResource> = zk_configs.keys().cloned().collect();
    resources.extend(
        image
            .configs
            .resources
            .keys()
            .filter(|r| config_entity_type(r).is_some())
            .cloned(),
    );
    for resource in resources {
        let kraft: BTreeMap<String, String> =
            image.configs.configs(&resource).into_iter().collect();
        match zk_configs.get(&resource) {
            Some(zk) if *zk == kraft => {}
            None if kraft.is_empty() => {}
            _ => write_configs(&mut batch, &resource, &kraft, true, ctx, rng),
        }
    }

    // Client quotas and SCRAM credentials.
    let mut zk_quotas: BTreeMap<ClientQuotaEntity, QuotasAndScram> = BTreeMap::new();
    for entity in &metadata.quota_entities {
        let key = ClientQuotaEntity(
            entity
                .entity
                .iter()
                .map(|(t, n)| ((*t).to_owned(), n.clone()))
                .collect(),
        );
        let scram = entity
            .scram
            .iter()
            .filter_map(|(m, c)| scram_mechanism_name(*m).map(|k| (k.to_owned(), c.encode())))
            .collect();
        zk_quotas.insert(key, (entity.quotas.clone(), scram));
    }
    let mut entities: BTreeSet<ClientQuotaEntity> = zk_quotas.keys().cloned().collect();
    entities.extend(image.client_quotas.entities.keys().cloned());
    entities.extend(
        image
            .scram
            .credentials
            .keys()
            .map(|(_, user)| user_entity(user)),
    );
    for entity in entities {
        let quotas = quotas_of(image, &entity);
        let scram = match is_user_only(&entity) {
            Some(Some(user)) => scram_strings(image, &user),
            _ => BTreeMap::new(),
        };
        let differs = match zk_quotas.get(&entity) {
            Some((zq, zs)) => *zq != quotas || *zs != scram,
            None => !quotas.is_empty() || !scram.is_empty(),
        };
        if differs {
            write_client_quotas(&mut batch, &entity, &quotas, &scram);
        }
    }

    // Producer ids.
    let next = image.producer_ids.next_producer_id;
    // In sync when ZooKeeper holds the block this writer writes for `next` ([next, next+999]).
    // Kafka compares `block_end + 1` with `next`, which never holds after its own write, so it
    // rewrites the block on every reconciliation.
    if next >= 0
        && metadata
            .producer_id_block
            .is_none_or(|b| b.block_start != next)
    {
        write_producer_id(&mut batch, next);
    }

    // ACLs.
    let kraft_acls = acls_by_pattern(image);
    let zk_acls: BTreeMap<AclPattern, BTreeSet<AclEntry>> = metadata
        .acls
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
        .collect();
    for (pattern, entries) in &kraft_acls {
        if zk_acls.get(pattern) != Some(entries) {
            write_acls(&mut batch, pattern, entries);
        }
    }
    for pattern in zk_acls.keys() {
        if !kraft_acls.contains_key(pattern) {
            write_acls(&mut batch, pattern, &BTreeSet::new());
        }
    }

    // Delegation tokens.
    for (id, token) in &image.delegation_tokens.tokens {
        let znode = token_znode(id, token);
        if metadata.tokens.get(id) != Some(&znode) {
            batch.push(
                op::UPDATE_DELEGATION_TOKEN,
                ZkWrite::Upsert {
                    path: paths::delegation_token(id),
                    data: znode.encode(),
                },
            );
        }
    }
    for id in metadata.tokens.keys() {
        if !image.delegation_tokens.tokens.contains_key(id) {
            batch.push(
                op::DELETE_DELEGATION_TOKEN,
                ZkWrite::Delete {
                    path: paths::delegation_token(id),
                    recursive: false,
                },
            );
        }
    }
    Ok(batch)
}
