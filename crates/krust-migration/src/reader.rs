//! ZooKeeper → KRaft records: the initial copy of a migration (facts §6.8, Kafka 3.9's
//! `ZkMigrationClient.readAllMetadata`).
//!
//! [`read_all_metadata`] walks a [`ZkTree`] — the subtrees under [`MIGRATION_READ_ROOTS`], read
//! from the ensemble with [`krust_zk::backend::read_tree`] after the controller has claimed
//! `/controller` — and returns the record batches exactly as Kafka groups them: one batch per
//! topic (`TopicRecord`, its `ConfigRecord`s, its `PartitionRecord`s), one per broker config
//! entity, one per SCRAM credential and one per quota entity, one for the producer-id block, at
//! most 100 ACLs per batch and resource, one batch of delegation tokens. Buffering batches up to
//! `zookeeper.metadata.migration.min.batch.size` is the driver's job.
//!
//! Where Kafka iterates a hash set (topics, partitions, config keys), krust sorts: the records
//! are the same, in a deterministic order. Kafka writes every record at version 0, whatever the
//! metadata.version; so does krust.
//!
//! The parsing helpers ([`ZkMetadata::parse`]) are shared with the writer's reconciliation,
//! which compares the same view of ZooKeeper with a KRaft image.

use std::collections::{BTreeMap, BTreeSet};

use krust_metadata::records::{
    AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, DelegationTokenRecord,
    MetadataRecord, MetadataRecordType, PartitionRecord, ProducerIdsRecord, QuotaEntity,
    TopicRecord, UserScramCredentialRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use krust_zk::model::ZNodeError;
use krust_zk::model::acls::{
    AclEntry, AclZNode, PATTERN_LITERAL, PATTERN_PREFIXED, resource_type_code,
};
use krust_zk::model::configs::{ConfigEntityZNode, SCRAM_MECHANISMS, ScramCredentialString};
use krust_zk::model::names::{
    config_resource_from_znode_name, desanitize, quota_entity_from_znode_name,
};
use krust_zk::model::password::{PasswordEncoder, PasswordError, is_password_config};
use krust_zk::model::paths::{self, config_type};
use krust_zk::model::tokens::DelegationTokenZNode;
use krust_zk::model::topics::{PartitionStateZNode, ProducerIdBlockZNode, TopicZNode};
use krust_zk::tree::{ZkTree, join};
use uuid::Uuid;

/// The subtrees the initial copy and the reconciliation read. Read them with
/// [`krust_zk::backend::read_tree`].
pub const MIGRATION_READ_ROOTS: &[&str] = &[
    paths::TOPICS,
    paths::DELETE_TOPICS,
    "/config/topics",
    "/config/brokers",
    "/config/users",
    "/config/clients",
    "/config/ips",
    paths::PRODUCER_ID_BLOCK,
    paths::LITERAL_ACLS,
    paths::EXTENDED_ACLS,
    paths::DELEGATION_TOKENS,
];

/// Most ACL records in one batch (Kafka's `ZkMigrationClient.MaxBatchSize`).
pub const MAX_ACL_BATCH_SIZE: usize = 100;

/// Quota entity types (`ClientQuotaEntity`).
pub const QUOTA_USER: &str = "user";
/// `client-id`.
pub const QUOTA_CLIENT_ID: &str = "client-id";
/// `ip`.
pub const QUOTA_IP: &str = "ip";

/// Why ZooKeeper's content cannot be migrated. Each names the znode; the remedy is to fix or
/// remove that znode (it was not written by Kafka 3.x) and retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// A znode's content does not decode.
    #[error(transparent)]
    ZNode(#[from] ZNodeError),
    /// A topic has no topic id (created before Kafka 2.8 and never given one; Kafka's reader
    /// fails the same way). Remedy: let a ZooKeeper-mode controller of Kafka ≥ 2.8 add it.
    #[error("{path}: topic has no topic_id")]
    MissingTopicId {
        /// The topic znode.
        path: String,
    },
    /// A partition has no replicas, so no leader can be derived for its missing state.
    #[error("{path}: partition has no replicas")]
    NoReplicas {
        /// The topic znode.
        path: String,
    },
    /// A znode name is not what Kafka writes there (a broker id that is not a number, a name
    /// that does not URL-decode, an unknown ACL resource type, a bad quota path).
    #[error("{path}: unexpected znode name")]
    BadName {
        /// The znode.
        path: String,
    },
    /// A SCRAM credential string does not parse.
    #[error("{path}: SCRAM credential {mechanism} is not valid")]
    Scram {
        /// The user config znode.
        path: String,
        /// The mechanism.
        mechanism: &'static str,
    },
    /// A quota value is not a number (Kafka: "Unexpected client quota configuration value").
    #[error("{path}: quota {key} = {value:?} is not a number")]
    QuotaValue {
        /// The config znode.
        path: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// An encrypted password config does not decrypt (wrong `password.encoder.secret`?).
    #[error("{path}: password config {key} does not decode")]
    Password {
        /// The config znode.
        path: String,
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: PasswordError,
    },
    /// The metadata.version cannot hold a migration (below 3.4-IV0).
    #[error("metadata.version {0:?} does not support ZooKeeper migration")]
    MetadataVersion(MetadataVersion),
}

/// What the initial copy produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MigrationBatches {
    /// Record batches, in Kafka's order and grouping.
    pub batches: Vec<Vec<ApiMessageAndVersion>>,
    /// Broker ids seen: replicas and adding replicas of every partition, and every broker with
    /// a config znode (for the "Saw K brokers in the migrated metadata" log line and the
    /// broker-registration check).
    pub broker_ids: BTreeSet<i32>,
    /// Records by type (for "The record types were {…}").
    pub record_counts: BTreeMap<MetadataRecordType, usize>,
}

impl MigrationBatches {
    fn push(&mut self, batch: Vec<ApiMessageAndVersion>) {
        for r in &batch {
            *self
                .record_counts
                .entry(r.record.record_type())
                .or_insert(0) += 1;
        }
        self.batches.push(batch);
    }

    /// Number of records over all batches.
    #[must_use]
    pub fn record_count(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }
}

/// One partition as ZooKeeper holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkPartition {
    /// Replicas and reassignment.
    pub replicas: Vec<i32>,
    /// Adding replicas.
    pub adding_replicas: Vec<i32>,
    /// Removing replicas.
    pub removing_replicas: Vec<i32>,
    /// The state znode and its ZooKeeper version (the partition epoch), `None` if missing.
    pub state: Option<(PartitionStateZNode, i32)>,
}

/// One topic as ZooKeeper holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkTopic {
    /// The name.
    pub name: String,
    /// The id.
    pub id: Uuid,
    /// Partitions by id (from the topic znode's assignment).
    pub partitions: BTreeMap<i32, ZkPartition>,
}

/// A quota/SCRAM config entity: what `/config/{users,clients,ips}/…` holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ZkQuotaEntity {
    /// The znode.
    pub path: String,
    /// Entity components in Kafka's order (`user` then `client-id`), `None` = default.
    pub entity: Vec<(&'static str, Option<String>)>,
    /// Quotas.
    pub quotas: BTreeMap<String, f64>,
    /// SCRAM credentials by mechanism type.
    pub scram: BTreeMap<i8, ScramCredentialString>,
}

/// The metadata ZooKeeper holds, parsed: what the reader turns into records and the
/// reconciliation compares with an image.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ZkMetadata {
    /// Topics pending deletion (`/admin/delete_topics/<t>`).
    pub pending_deletions: BTreeSet<String>,
    /// Topics, sorted by name, pending deletions included.
    pub topics: Vec<ZkTopic>,
    /// Topic configs by topic name (decoded passwords).
    pub topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Broker configs by KRaft resource name (`""` = `<default>`; decoded passwords).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Users, then clients, then users' clients, then ips (Kafka's order).
    pub quota_entities: Vec<ZkQuotaEntity>,
    /// The last producer-id block.
    pub producer_id_block: Option<ProducerIdBlockZNode>,
    /// ACLs by (resource type, name, pattern type).
    pub acls: BTreeMap<(i8, String, i8), Vec<AclEntry>>,
    /// Delegation tokens by id.
    pub tokens: BTreeMap<String, DelegationTokenZNode>,
}

fn children(zk: &ZkTree, path: &str) -> Vec<String> {
    zk.children(path).unwrap_or_default()
}

fn data<'a>(zk: &'a ZkTree, path: &str) -> Option<(&'a [u8], i32)> {
    zk.get(path).ok().map(|(d, stat)| (d, stat.version))
}

impl ZkMetadata {
    /// Parses everything under [`MIGRATION_READ_ROOTS`].
    ///
    /// # Errors
    /// The first znode that does not decode.
    pub fn parse(
        zk: &ZkTree,
        password_encoder: Option<&PasswordEncoder>,
    ) -> Result<Self, ReadError> {
        let mut out = Self {
            pending_deletions: children(zk, paths::DELETE_TOPICS).into_iter().collect(),
            ..Self::default()
        };
        for name in children(zk, paths::TOPICS) {
            out.topics.push(parse_topic(zk, &name)?);
        }
        let decode_config =
            |path: &str, bytes: &[u8]| -> Result<BTreeMap<String, String>, ReadError> {
                let mut config = ConfigEntityZNode::decode(path, bytes)?.config;
                for (key, value) in &mut config {
                    if is_password_config(key)
                        && let Some(encoder) = password_encoder
                    {
                        *value = encoder
                            .decode(value)
                            .map_err(|source| ReadError::Password {
                                path: path.to_owned(),
                                key: key.clone(),
                                source,
                            })?;
                    }
                }
                Ok(config)
            };
        for (kind, target) in [
            (config_type::TOPIC, &mut out.topic_configs),
            (config_type::BROKER, &mut out.broker_configs),
        ] {
            let dir = paths::config_type(kind);
            for name in children(zk, &dir) {
                let path = join(&dir, &name);
                let Some((bytes, _)) = data(zk, &path) else {
                    continue;
                };
                let resource = if kind == config_type::BROKER {
                    let resource = config_resource_from_znode_name(&name);
                    if !resource.is_empty() && resource.parse::<i32>().is_err() {
                        return Err(ReadError::BadName { path });
                    }
                    resource.to_owned()
                } else {
                    name.clone()
                };
                target.insert(resource, decode_config(&path, bytes)?);
            }
        }
        out.quota_entities = parse_quota_entities(zk)?;
        if let Some((bytes, _)) = data(zk, paths::PRODUCER_ID_BLOCK)
            && !bytes.is_empty()
        {
            out.producer_id_block = Some(ProducerIdBlockZNode::decode(bytes)?);
        }
        for (store, pattern_type) in [
            (paths::LITERAL_ACLS, PATTERN_LITERAL),
            (paths::PREFIXED_ACLS, PATTERN_PREFIXED),
        ] {
            for type_name in children(zk, store) {
                let type_path = join(store, &type_name);
                let resource_type =
                    resource_type_code(&type_name).ok_or_else(|| ReadError::BadName {
                        path: type_path.clone(),
                    })?;
                for name in children(zk, &type_path) {
                    let path = join(&type_path, &name);
                    let Some((bytes, _)) = data(zk, &path) else {
                        continue;
                    };
                    let acls = AclZNode::decode(&path, bytes)?.acls;
                    if !acls.is_empty() {
                        out.acls.insert((resource_type, name, pattern_type), acls);
                    }
                }
            }
        }
        for id in children(zk, paths::DELEGATION_TOKENS) {
            let path = paths::delegation_token(&id);
            let Some((bytes, _)) = data(zk, &path) else {
                continue;
            };
            if bytes.is_empty() {
                continue;
            }
            out.tokens
                .insert(id.clone(), DelegationTokenZNode::decode(&id, bytes)?);
        }
        Ok(out)
    }
}

fn parse_topic(zk: &ZkTree, name: &str) -> Result<ZkTopic, ReadError> {
    let path = paths::topic(name);
    let bytes = data(zk, &path).map(|(b, _)| b).unwrap_or_default();
    let znode = TopicZNode::decode(name, bytes)?;
    let id = znode
        .topic_id
        .ok_or_else(|| ReadError::MissingTopicId { path: path.clone() })?;
    let mut partitions = BTreeMap::new();
    for (p, assignment) in znode.partitions {
        let state_path = paths::partition_state(name, p);
        let state = match data(zk, &state_path) {
            Some((bytes, version)) if !bytes.is_empty() => {
                Some((PartitionStateZNode::decode(&state_path, bytes)?, version))
            }
            _ => None,
        };
        partitions.insert(
            p,
            ZkPartition {
                replicas: assignment.replicas,
                adding_replicas: assignment.adding_replicas,
                removing_replicas: assignment.removing_replicas,
                state,
            },
        );
    }
    Ok(ZkTopic {
        name: name.to_owned(),
        id,
        partitions,
    })
}

fn parse_quota_entity(
    zk: &ZkTree,
    path: String,
    entity: Vec<(&'static str, Option<String>)>,
    allow_scram: bool,
) -> Result<Option<ZkQuotaEntity>, ReadError> {
    let Some((bytes, _)) = data(zk, &path) else {
        return Ok(None);
    };
    let mut config = ConfigEntityZNode::decode(&path, bytes)?.config;
    let mut scram = BTreeMap::new();
    if allow_scram {
        for (mechanism, key) in SCRAM_MECHANISMS {
            if let Some(text) = config.remove(key) {
                let credential =
                    ScramCredentialString::decode(&text).map_err(|_| ReadError::Scram {
                        path: path.clone(),
                        mechanism: key,
                    })?;
                scram.insert(mechanism, credential);
            }
        }
    }
    let mut quotas = BTreeMap::new();
    for (key, value) in config {
        let number: f64 = value.trim().parse().map_err(|_| ReadError::QuotaValue {
            path: path.clone(),
            key: key.clone(),
            value: value.clone(),
        })?;
        quotas.insert(key, number);
    }
    Ok(Some(ZkQuotaEntity {
        path,
        entity,
        quotas,
        scram,
    }))
}

fn entity_name(path: &str, znode_name: &str) -> Result<Option<String>, ReadError> {
    quota_entity_from_znode_name(znode_name).map_err(|_| ReadError::BadName {
        path: path.to_owned(),
    })
}

/// Kafka's `iterateClientQuotas` order: users, clients, users' clients, ips.
fn parse_quota_entities(zk: &ZkTree) -> Result<Vec<ZkQuotaEntity>, ReadError> {
    let mut out = Vec::new();
    let users_dir = paths::config_type(config_type::USER);
    let clients_dir = paths::config_type(config_type::CLIENT);
    let ips_dir = paths::config_type(config_type::IP);
    for user in children(zk, &users_dir) {
        let path = join(&users_dir, &user);
        let entity = vec![(QUOTA_USER, entity_name(&path, &user)?)];
        out.extend(parse_quota_entity(zk, path, entity, true)?);
    }
    for client in children(zk, &clients_dir) {
        let path = join(&clients_dir, &client);
        let entity = vec![(QUOTA_CLIENT_ID, entity_name(&path, &client)?)];
        out.extend(parse_quota_entity(zk, path, entity, false)?);
    }
    for user in children(zk, &users_dir) {
        let user_path = join(&users_dir, &user);
        for child in children(zk, &user_path) {
            let child_path = join(&user_path, &child);
            if child != "clients" {
                return Err(ReadError::BadName { path: child_path });
            }
            for client in children(zk, &child_path) {
                let path = join(&child_path, &client);
                let entity = vec![
                    (QUOTA_USER, entity_name(&user_path, &user)?),
                    (QUOTA_CLIENT_ID, entity_name(&path, &client)?),
                ];
                out.extend(parse_quota_entity(zk, path, entity, false)?);
            }
        }
    }
    for ip in children(zk, &ips_dir) {
        let path = join(&ips_dir, &ip);
        let entity = vec![(QUOTA_IP, entity_name(&path, &ip)?)];
        out.extend(parse_quota_entity(zk, path, entity, false)?);
    }
    Ok(out)
}

fn v0(record: MetadataRecord) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(record, 0)
}

/// The `PartitionRecord` of a ZooKeeper partition (Kafka's `iterateTopics`): the state znode's
/// leader, ISR, epochs (partition epoch = the state znode's version), or — when the state
/// znode is missing — ISR = replicas, leader = the first replica, epochs 0.
///
/// # Errors
/// [`ReadError::NoReplicas`] when the state is missing and there is no replica to lead.
pub fn partition_record(
    topic: &ZkTopic,
    partition_id: i32,
    partition: &ZkPartition,
) -> Result<PartitionRecord, ReadError> {
    let (isr, leader, leader_epoch, partition_epoch, leader_recovery_state) = match &partition.state
    {
        Some((state, version)) => (
            state.isr.clone(),
            state.leader,
            state.leader_epoch,
            *version,
            state.leader_recovery_state,
        ),
        None => {
            let leader = *partition
                .replicas
                .first()
                .ok_or_else(|| ReadError::NoReplicas {
                    path: paths::topic(&topic.name),
                })?;
            tracing::warn!(
                topic = %topic.name,
                partition = partition_id,
                "could not find partition state in ZooKeeper, initializing it with ISR = replicas and leader epoch 0"
            );
            (partition.replicas.clone(), leader, 0, 0, 0)
        }
    };
    Ok(PartitionRecord {
        partition_id,
        topic_id: topic.id,
        replicas: partition.replicas.clone(),
        isr,
        removing_replicas: partition.removing_replicas.clone(),
        adding_replicas: partition.adding_replicas.clone(),
        leader,
        leader_recovery_state,
        leader_epoch,
        partition_epoch,
        directories: Vec::new(),
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: Vec::new(),
    })
}

/// Reads all metadata from `zk` (read from the subtrees of [`MIGRATION_READ_ROOTS`]) into record
/// batches in Kafka's order: topics (skipping those pending deletion), broker configs, client
/// quotas and SCRAM credentials, the producer-id block, ACLs (each with a fresh random id from
/// `rng`), delegation tokens. Password configs are decrypted with `password_encoder` when one
/// is given (Kafka without `password.encoder.secret` copies them as stored).
///
/// # Errors
/// The first znode that does not decode, or a metadata.version below 3.4-IV0.
pub fn read_all_metadata(
    zk: &ZkTree,
    mv: MetadataVersion,
    password_encoder: Option<&PasswordEncoder>,
    rng: &mut impl rand::Rng,
) -> Result<MigrationBatches, ReadError> {
    if !mv.is_migration_supported() {
        return Err(ReadError::MetadataVersion(mv));
    }
    let metadata = ZkMetadata::parse(zk, password_encoder)?;
    let mut out = MigrationBatches::default();

    for topic in &metadata.topics {
        if metadata.pending_deletions.contains(&topic.name) {
            tracing::info!(topic = %topic.name, "not migrating pending deleted topic");
            continue;
        }
        let mut batch = vec![v0(MetadataRecord::Topic(TopicRecord {
            name: topic.name.clone(),
            topic_id: topic.id,
            unknown_tagged_fields: Vec::new(),
        }))];
        for (name, value) in metadata
            .topic_configs
            .get(&topic.name)
            .into_iter()
            .flatten()
        {
            batch.push(v0(MetadataRecord::Config(ConfigRecord {
                resource_type: 2,
                resource_name: topic.name.clone(),
                name: name.clone(),
                value: Some(value.clone()),
                unknown_tagged_fields: Vec::new(),
            })));
        }
        for (id, partition) in &topic.partitions {
            let record = partition_record(topic, *id, partition)?;
            out.broker_ids.extend(record.replicas.iter().copied());
            out.broker_ids
                .extend(record.adding_replicas.iter().copied());
            batch.push(v0(MetadataRecord::Partition(record)));
        }
        out.push(batch);
    }

    for (broker, config) in &metadata.broker_configs {
        if let Ok(id) = broker.parse::<i32>() {
            out.broker_ids.insert(id);
        }
        let batch: Vec<_> = config
            .iter()
            .map(|(name, value)| {
                v0(MetadataRecord::Config(ConfigRecord {
                    resource_type: 4,
                    resource_name: broker.clone(),
                    name: name.clone(),
                    value: Some(value.clone()),
                    unknown_tagged_fields: Vec::new(),
                }))
            })
            .collect();
        if !batch.is_empty() {
            out.push(batch);
        }
    }

    for entity in &metadata.quota_entities {
        if let Some((_, user)) = entity.entity.first()
            && entity.entity.len() == 1
        {
            for (mechanism, credential) in &entity.scram {
                // A SCRAM user is always named (Kafka desanitizes the znode name, `<default>` included).
                let name = user
                    .clone()
                    .unwrap_or_else(|| krust_zk::model::names::DEFAULT_ENTITY.to_owned());
                out.push(vec![v0(MetadataRecord::UserScramCredential(
                    UserScramCredentialRecord {
                        name,
                        mechanism: *mechanism,
                        salt: credential.salt.clone(),
                        stored_key: credential.stored_key.clone(),
                        server_key: credential.server_key.clone(),
                        iterations: credential.iterations,
                        unknown_tagged_fields: Vec::new(),
                    },
                ))]);
            }
        }
        if entity.quotas.is_empty() {
            continue;
        }
        let record_entity: Vec<QuotaEntity> = entity
            .entity
            .iter()
            .map(|(entity_type, name)| QuotaEntity {
                entity_type: (*entity_type).to_owned(),
                entity_name: name.clone(),
                unknown_tagged_fields: Vec::new(),
            })
            .collect();
        out.push(
            entity
                .quotas
                .iter()
                .map(|(key, value)| {
                    v0(MetadataRecord::ClientQuota(ClientQuotaRecord {
                        entity: record_entity.clone(),
                        key: key.clone(),
                        value: *value,
                        remove: false,
                        unknown_tagged_fields: Vec::new(),
                    }))
                })
                .collect(),
        );
    }

    if let Some(block) = metadata.producer_id_block {
        out.push(vec![v0(MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: block.broker,
            broker_epoch: -1,
            next_producer_id: block.next_block_first_id(),
            unknown_tagged_fields: Vec::new(),
        }))]);
    }

    for ((resource_type, name, pattern_type), acls) in &metadata.acls {
        for chunk in acls.chunks(MAX_ACL_BATCH_SIZE) {
            let batch = chunk
                .iter()
                .map(|acl| {
                    v0(MetadataRecord::AccessControlEntry(
                        AccessControlEntryRecord {
                            id: krust_metadata::kafka_uuid::random_kafka_uuid(rng),
                            resource_type: *resource_type,
                            resource_name: name.clone(),
                            pattern_type: *pattern_type,
                            principal: acl.principal.clone(),
                            host: acl.host.clone(),
                            operation: acl.operation,
                            permission_type: acl.permission_type,
                            unknown_tagged_fields: Vec::new(),
                        },
                    ))
                })
                .collect();
            out.push(batch);
        }
    }

    let tokens: Vec<_> = metadata
        .tokens
        .iter()
        .map(|(id, token)| {
            v0(MetadataRecord::DelegationToken(DelegationTokenRecord {
                owner: token.owner.clone(),
                requester: token.token_requester.clone(),
                renewers: token.renewers.clone(),
                issue_timestamp: token.issue_timestamp_ms,
                max_timestamp: token.max_timestamp_ms,
                expiration_timestamp: token.expiry_timestamp_ms,
                token_id: id.clone(),
                unknown_tagged_fields: Vec::new(),
            }))
        })
        .collect();
    if !tokens.is_empty() {
        out.push(tokens);
    }
    Ok(out)
}

/// Desanitizes a znode name, as an error naming `path` if it does not decode.
///
/// # Errors
/// [`ReadError::BadName`].
pub fn desanitize_name(path: &str, name: &str) -> Result<String, ReadError> {
    desanitize(name).map_err(|_| ReadError::BadName {
        path: path.to_owned(),
    })
}
