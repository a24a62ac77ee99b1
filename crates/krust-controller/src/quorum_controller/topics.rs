//! CreateTopics, CreatePartitions and DeleteTopics (Kafka 3.9 `ReplicationControlManager`
//! `createTopics` / `createPartitions` / `deleteTopics`), against the controller's image.

use super::*;
use kafka_protocol::messages::create_topics_response::CreatableTopicConfigs;

impl QuorumController {
    pub(super) fn create_topics(
        &mut self,
        request: &CreateTopicsRequest,
    ) -> (Vec<ApiMessageAndVersion>, CreateTopicsResponse) {
        let mut records = Vec::new();
        let mut results = Vec::new();
        let mut seen = BTreeMap::new();
        for topic in &request.topics {
            *seen.entry(topic.name.0.to_string()).or_insert(0) += 1;
        }
        // Kafka's per-request cap, counted without allocating anything.
        let total: i64 = request
            .topics
            .iter()
            .map(|t| {
                if t.assignments.is_empty() {
                    i64::from(if t.num_partitions == -1 {
                        self.config.default_num_partitions
                    } else {
                        t.num_partitions
                    })
                    .max(0)
                } else {
                    i64::try_from(t.assignments.len()).unwrap_or(i64::MAX)
                }
            })
            .sum();
        // Names created earlier in this request, for the collision check.
        let mut created_now: BTreeSet<String> = BTreeSet::new();
        for topic in &request.topics {
            let name = topic.name.0.to_string();
            // Kafka's `ControllerApis`: a name given twice is answered once, after the rest.
            if seen.get(&name).copied().unwrap_or(0) > 1 {
                continue;
            }
            let result = if total > MAX_PARTITIONS_PER_REQUEST {
                Err(ControllerError::InvalidPartitions {
                    reason: "Excessively large number of partitions per request.".to_owned(),
                })
            } else {
                self.create_topic(topic, request.validate_only, &created_now)
            };
            match result {
                Ok((topic_id, num_partitions, replication_factor, topic_records)) => {
                    created_now.insert(name.clone());
                    results.push(
                        CreatableTopicResult::default()
                            .with_name(topic.name.clone())
                            .with_error_message(None)
                            .with_topic_id(topic_id)
                            .with_num_partitions(num_partitions)
                            .with_replication_factor(replication_factor)
                            .with_configs(Some(self.effective_topic_configs(topic))),
                    );
                    records.extend(topic_records);
                }
                Err(e) => results.push(
                    CreatableTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_error_code(e.code())
                        .with_error_message(e.item_message().map(StrBytes::from_string))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                ),
            }
        }
        for name in duplicated_names(request.topics.iter().map(|t| &t.name)) {
            results.push(
                CreatableTopicResult::default()
                    .with_name(name)
                    .with_error_code(
                        ControllerError::InvalidRequest {
                            reason: String::new(),
                        }
                        .code(),
                    )
                    .with_error_message(Some(StrBytes::from_static_str("Duplicate topic name.")))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
        }
        (
            records,
            CreateTopicsResponse::default().with_topics(results),
        )
    }

    /// A new topic's effective configs, sorted by name (Kafka's `computeEffectiveTopicConfigs`):
    /// the request's configs (the last of a repeated key), else this controller's dynamic
    /// config, else the dynamic cluster default, else its `server.properties`, else Kafka's
    /// default — with each value's source.
    fn effective_topic_configs(
        &self,
        topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    ) -> Vec<CreatableTopicConfigs> {
        use krust_config::topic_layers::{ConfigLayers, TOPIC_CONFIGS};
        use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
        let creation: BTreeMap<String, String> = topic
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        let broker = |name: String| -> BTreeMap<String, String> {
            self.image
                .configs
                .configs(&ConfigResource {
                    resource_type: ConfigResourceType::BROKER,
                    name,
                })
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let node = broker(self.config.node_id.to_string());
        let cluster = broker(String::new());
        let layers = ConfigLayers {
            topic: &creation,
            broker_dynamic: &node,
            broker_default: &cluster,
            static_props: &self.admin.static_properties,
        };
        let mut defs: Vec<_> = TOPIC_CONFIGS.iter().collect();
        defs.sort_by_key(|d| d.name);
        defs.into_iter()
            .map(|def| {
                let (value, source) = layers.resolve(def);
                CreatableTopicConfigs::default()
                    .with_name(StrBytes::from_static_str(def.name))
                    .with_value(Some(StrBytes::from_string(value)))
                    .with_read_only(false)
                    .with_config_source(source)
                    .with_is_sensitive(false)
            })
            .collect()
    }

    /// Validates and builds one topic: `(id, partitions, replication factor, records)`.
    pub(super) fn create_topic(
        &mut self,
        topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
        validate_only: bool,
        created_now: &BTreeSet<String>,
    ) -> Result<(Uuid, i32, i16, Vec<ApiMessageAndVersion>), ControllerError> {
        let name = topic.name.0.to_string();
        topic_names::validate(&name)?;
        if name == topic_names::CLUSTER_METADATA_TOPIC_NAME {
            return Err(ControllerError::InvalidRequest {
                reason: format!("Creation of internal topic {name} is prohibited."),
            });
        }
        if self.image.topics.topic_by_name(&name).is_some() || created_now.contains(&name) {
            return Err(ControllerError::TopicAlreadyExists { name });
        }
        let unified = topic_names::unify_collision_chars(&name);
        if let Some(existing) = self
            .image
            .topics
            .by_name
            .keys()
            .chain(created_now.iter())
            .find(|n| topic_names::unify_collision_chars(n) == unified)
        {
            return Err(ControllerError::InvalidTopicName {
                reason: format!("Topic '{name}' collides with existing topic: {existing}"),
            });
        }
        // Kafka's `computeConfigChanges`: null values are refused together; a repeated key
        // keeps its last value. Then the set is validated as a new resource's configs.
        let nulls: Vec<&str> = topic
            .configs
            .iter()
            .filter(|c| c.value.is_none())
            .map(|c| c.name.as_str())
            .collect();
        if !nulls.is_empty() {
            return Err(ControllerError::InvalidConfig {
                reason: format!(
                    "Null value not supported for topic configs: {}",
                    nulls.join(",")
                ),
            });
        }
        let configs: BTreeMap<String, String> = topic
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        krust_config::validate_topic_configs(&configs, &self.config.topic_validation_defaults)
            .map_err(|e| ControllerError::InvalidConfig { reason: e.message })?;
        let assignments = if topic.assignments.is_empty() {
            let num_partitions = if topic.num_partitions == -1 {
                self.config.default_num_partitions
            } else {
                topic.num_partitions
            };
            let replication_factor = if topic.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                topic.replication_factor
            };
            if num_partitions <= 0 {
                return Err(ControllerError::InvalidPartitions {
                    reason: "Number of partitions was set to an invalid non-positive value."
                        .to_owned(),
                });
            }
            if replication_factor <= 0 {
                return Err(ControllerError::InvalidReplicationFactor {
                    reason:
                        "Replication factor must be larger than 0, or -1 to use the default value."
                            .to_owned(),
                });
            }
            let count = usize::try_from(num_partitions).expect("positive, and capped per request");
            let image = self.image.clone();
            let usable = self
                .sessions
                .usable_brokers(|id| image.cluster.broker(id).and_then(|b| b.rack.clone()));
            let placed = self
                .placer
                .place(count, i32::from(replication_factor), &usable)?;
            self.check_placed_isrs(&placed, i32::from(replication_factor))?;
            placed
        } else {
            if topic.num_partitions != -1 {
                return Err(ControllerError::InvalidRequest {
                    reason: "A manual partition assignment was specified, but numPartitions was not set to -1.".to_owned(),
                });
            }
            if topic.replication_factor != -1 {
                return Err(ControllerError::InvalidRequest {
                    reason: "A manual partition assignment was specified, but replicationFactor was not set to -1.".to_owned(),
                });
            }
            let mut assignments = Vec::with_capacity(topic.assignments.len());
            for (expected, assignment) in topic.assignments.iter().enumerate() {
                let invalid = |reason: String| ControllerError::InvalidReplicaAssignment { reason };
                if usize::try_from(assignment.partition_index).ok() != Some(expected) {
                    return Err(invalid(
                        "partitions should be a consecutive 0-based integer sequence".to_owned(),
                    ));
                }
                let replicas: Vec<i32> = assignment.broker_ids.iter().map(|b| b.0).collect();
                self.validate_manual_assignment(&replicas, expected)?;
                assignments.push(replicas);
            }
            if assignments.iter().any(|a| a.len() != assignments[0].len()) {
                return Err(ControllerError::InvalidReplicaAssignment {
                    reason: "The manual partition assignment includes a partition with a different replication factor than the others.".to_owned(),
                });
            }
            assignments
        };
        let num_partitions = i32::try_from(assignments.len()).expect("capped per request");
        let replication_factor = i16::try_from(assignments[0].len()).unwrap_or(i16::MAX);
        // Kafka: the controller mutation quota, after validation, validate-only included.
        self.apply_partition_change_quota(assignments.len())?;
        if validate_only {
            return Ok((Uuid::nil(), num_partitions, replication_factor, Vec::new()));
        }
        let topic_id = loop {
            let id = random_kafka_uuid(&mut self.rng);
            if self.image.topics.topic(id).is_none() {
                break id;
            }
        };
        let mut records = vec![ApiMessageAndVersion::new(
            MetadataRecord::Topic(TopicRecord {
                name: name.clone(),
                topic_id,
                ..TopicRecord::default()
            }),
            0,
        )];
        for (resource_config, value) in configs {
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::Config(ConfigRecord {
                    resource_type: ConfigResourceType::TOPIC.0,
                    resource_name: name.clone(),
                    name: resource_config,
                    value: Some(value),
                    ..ConfigRecord::default()
                }),
                0,
            ));
        }
        for (partition_id, replicas) in assignments.into_iter().enumerate() {
            let partition_id = i32::try_from(partition_id).expect("capped per request");
            records.push(self.new_partition_record(topic_id, partition_id, replicas));
        }
        info!(topic = %name, %topic_id, num_partitions, replication_factor, "creating topic");
        Ok((topic_id, num_partitions, replication_factor, records))
    }

    /// Every placed partition needs an active replica to start its ISR (the placer's view of
    /// fencing comes from the sessions, "active" also needs the registration out of controlled
    /// shutdown), as Kafka's `createTopic` checks.
    pub(super) fn check_placed_isrs(
        &self,
        placed: &[Vec<i32>],
        replication_factor: i32,
    ) -> Result<(), ControllerError> {
        if placed
            .iter()
            .any(|replicas| !replicas.iter().any(|&r| self.broker_is_active(r)))
        {
            return Err(ControllerError::InvalidReplicationFactor {
                reason: format!(
                    "Unable to replicate the partition {replication_factor} time(s): All brokers are currently fenced or in controlled shutdown."
                ),
            });
        }
        Ok(())
    }

    /// Kafka's checks of one manually assigned replica list (partition `index`).
    pub(super) fn validate_manual_assignment(
        &self,
        replicas: &[i32],
        index: usize,
    ) -> Result<(), ControllerError> {
        let invalid = |reason: String| Err(ControllerError::InvalidReplicaAssignment { reason });
        if replicas.is_empty() {
            return invalid(
                "The manual partition assignment includes an empty replica list.".to_owned(),
            );
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = replicas.iter().find(|&&r| !seen.insert(r)) {
            return invalid(format!(
                "The manual partition assignment includes the broker {twice} more than once."
            ));
        }
        if let Some(missing) = replicas
            .iter()
            .find(|&&r| self.image.cluster.broker(r).is_none())
        {
            return invalid(format!(
                "The manual partition assignment includes broker {missing}, but no such broker is registered."
            ));
        }
        if !replicas.iter().any(|&r| self.broker_is_active(r)) {
            return invalid(format!(
                "All brokers specified in the manual partition assignment for partition {index} are fenced or in controlled shutdown."
            ));
        }
        Ok(())
    }

    /// The `PartitionRecord` of a new partition: the ISR is the active replicas, the leader
    /// the first of them.
    pub(super) fn new_partition_record(
        &self,
        topic_id: Uuid,
        partition_id: i32,
        replicas: Vec<i32>,
    ) -> ApiMessageAndVersion {
        let mv = self.image.metadata_version();
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|&r| self.broker_is_active(r))
            .collect();
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        let directories = if mv.is_directory_assignment_supported() {
            replicas
                .iter()
                .map(|&r| self.default_directory(r))
                .collect()
        } else {
            Vec::new()
        };
        ApiMessageAndVersion::new(
            MetadataRecord::Partition(PartitionRecord {
                partition_id,
                topic_id,
                replicas,
                isr,
                removing_replicas: Vec::new(),
                adding_replicas: Vec::new(),
                leader,
                leader_recovery_state: LeaderRecoveryState::Recovered.value(),
                leader_epoch: 0,
                partition_epoch: 0,
                directories,
                eligible_leader_replicas: None,
                last_known_elr: None,
                unknown_tagged_fields: Default::default(),
            }),
            mv.partition_record_version(),
        )
    }

    pub(super) fn create_partitions(
        &mut self,
        request: &CreatePartitionsRequest,
    ) -> (Vec<ApiMessageAndVersion>, CreatePartitionsResponse) {
        let mut records = Vec::new();
        let mut results = Vec::new();
        let mut seen = BTreeMap::new();
        for topic in &request.topics {
            *seen.entry(topic.name.0.to_string()).or_insert(0) += 1;
        }
        for name in duplicated_names(request.topics.iter().map(|t| &t.name)) {
            results.push(
                CreatePartitionsTopicResult::default()
                    .with_name(name)
                    .with_error_code(
                        ControllerError::InvalidRequest {
                            reason: String::new(),
                        }
                        .code(),
                    )
                    .with_error_message(Some(StrBytes::from_static_str("Duplicate topic name."))),
            );
        }
        let mut total_added: i64 = 0;
        for topic in &request.topics {
            let name = topic.name.0.to_string();
            // Kafka's `ControllerApis`: a name given twice is answered once, first.
            if seen.get(&name).copied().unwrap_or(0) > 1 {
                continue;
            }
            let result = self.create_partitions_of(topic, &mut total_added);
            let entry = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
            match result {
                Ok(new_records) => {
                    if !request.validate_only {
                        records.extend(new_records);
                    }
                    results.push(entry);
                }
                Err(e) => results.push(
                    entry
                        .with_error_code(e.code())
                        .with_error_message(e.item_message().map(StrBytes::from_string)),
                ),
            }
        }
        (
            records,
            CreatePartitionsResponse::default().with_results(results),
        )
    }

    /// Kafka's `createPartitions` for one topic.
    pub(super) fn create_partitions_of(
        &mut self,
        topic: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
        total_added: &mut i64,
    ) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
        let name = topic.name.0.as_str();
        let Some(existing) = self.image.topics.topic_by_name(name) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("Unable to locate topic {name}"),
            });
        };
        let topic_id = existing.id;
        let current = i32::try_from(existing.partitions.len()).unwrap_or(i32::MAX);
        let replication_factor = existing.partitions.get(&0).map_or(1, |p| p.replicas.len());
        if topic.count < current {
            return Err(ControllerError::InvalidPartitions {
                reason: format!(
                    "The topic {name} currently has {current} partition(s); {} would not be an increase.",
                    topic.count
                ),
            });
        }
        if topic.count == current {
            return Err(ControllerError::InvalidPartitions {
                reason: format!("Topic already has {current} partition(s)."),
            });
        }
        let additional = topic.count - current;
        *total_added += i64::from(additional);
        if *total_added > MAX_PARTITIONS_PER_REQUEST {
            return Err(ControllerError::InvalidPartitions {
                reason: "Excessively large number of partitions per request.".to_owned(),
            });
        }
        let count = usize::try_from(additional).expect("positive and capped");
        let assignments = match &topic.assignments {
            Some(assignments) => {
                if assignments.len() != count {
                    return Err(ControllerError::InvalidReplicaAssignment {
                        reason: format!(
                            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                            assignments.len()
                        ),
                    });
                }
                let mut lists = Vec::with_capacity(count);
                for (i, assignment) in assignments.iter().enumerate() {
                    let replicas: Vec<i32> = assignment.broker_ids.iter().map(|b| b.0).collect();
                    if replicas.len() != replication_factor {
                        return Err(ControllerError::InvalidReplicaAssignment {
                            reason: format!(
                                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
                                replicas.len()
                            ),
                        });
                    }
                    self.validate_manual_assignment(
                        &replicas,
                        i + usize::try_from(current).unwrap_or(0),
                    )?;
                    lists.push(replicas);
                }
                lists
            }
            None => {
                let image = self.image.clone();
                let usable = self
                    .sessions
                    .usable_brokers(|id| image.cluster.broker(id).and_then(|b| b.rack.clone()));
                let replication_factor = i32::try_from(replication_factor).unwrap_or(i32::MAX);
                let placed = self.placer.place(count, replication_factor, &usable)?;
                self.check_placed_isrs(&placed, replication_factor)?;
                placed
            }
        };
        // Kafka: the controller mutation quota, for the partitions added, after validation.
        self.apply_partition_change_quota(assignments.len())?;
        Ok(assignments
            .into_iter()
            .zip(current..)
            .map(|(replicas, partition_id)| {
                self.new_partition_record(topic_id, partition_id, replicas)
            })
            .collect())
    }

    /// Kafka's `ClusterControlManager.defaultDir`: the only directory of a single-directory
    /// broker, else unassigned (migrating for a broker that reported none).
    pub(super) fn default_directory(&self, broker: i32) -> Uuid {
        match self
            .image
            .cluster
            .broker(broker)
            .map(|b| b.directories.as_slice())
        {
            Some([only]) => *only,
            Some([]) | None => DIRECTORY_ID_MIGRATING,
            Some(_) => DIRECTORY_ID_UNASSIGNED,
        }
    }

    /// Kafka's `ControllerApis.deleteTopics` (validation) and `deleteTopics`: a name or id
    /// given twice, an entry with both or neither, and a name mapping to an id also given are
    /// INVALID_REQUEST and delete nothing; unknown names and ids are answered as such; the rest
    /// are deleted.
    pub(super) fn delete_topics(
        &mut self,
        request: &DeleteTopicsRequest,
    ) -> (Vec<ApiMessageAndVersion>, DeleteTopicsResponse) {
        let invalid = ControllerError::InvalidRequest {
            reason: String::new(),
        }
        .code();
        let mut responses = Vec::new();
        let mut answer = |name: Option<&str>, id: Uuid, code: i16, message: Option<String>| {
            responses.push(
                DeletableTopicResult::default()
                    .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_owned()))))
                    .with_topic_id(id)
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string)),
            );
        };
        // Names and ids given once, in request order; those given more than once.
        let mut names: Vec<String> = Vec::new();
        let mut duplicate_names: Vec<String> = Vec::new();
        let mut add_name = |name: String, names: &mut Vec<String>| {
            if duplicate_names.contains(&name) {
            } else if let Some(i) = names.iter().position(|n| *n == name) {
                names.remove(i);
                duplicate_names.push(name);
            } else {
                names.push(name);
            }
        };
        for name in &request.topic_names {
            add_name(name.0.to_string(), &mut names);
        }
        let mut ids: Vec<Uuid> = Vec::new();
        let mut duplicate_ids: Vec<Uuid> = Vec::new();
        for topic in &request.topics {
            match (&topic.name, topic.topic_id.is_nil()) {
                (None, true) => answer(
                    None,
                    Uuid::nil(),
                    invalid,
                    Some("Neither topic name nor id were specified.".to_owned()),
                ),
                (None, false) => {
                    let id = topic.topic_id;
                    if duplicate_ids.contains(&id) {
                    } else if let Some(i) = ids.iter().position(|x| *x == id) {
                        ids.remove(i);
                        duplicate_ids.push(id);
                    } else {
                        ids.push(id);
                    }
                }
                (Some(name), true) => add_name(name.0.to_string(), &mut names),
                (Some(name), false) => answer(
                    Some(name.as_str()),
                    topic.topic_id,
                    invalid,
                    Some("You may not specify both topic name and topic id.".to_owned()),
                ),
            }
        }
        for name in &duplicate_names {
            answer(
                Some(name),
                Uuid::nil(),
                invalid,
                Some("Duplicate topic name.".to_owned()),
            );
        }
        for id in &duplicate_ids {
            answer(None, *id, invalid, Some("Duplicate topic id.".to_owned()));
        }
        // Id → name of what is deleted.
        let mut deleting: Vec<(Uuid, String)> = Vec::new();
        for id in ids {
            match self.image.topics.topic(id) {
                Some(t) => deleting.push((id, t.name.clone())),
                None => {
                    let e = ControllerError::UnknownTopicId { topic_id: id };
                    answer(None, id, e.code(), Some(e.to_string()));
                }
            }
        }
        for name in names {
            let Some(topic) = self.image.topics.topic_by_name(&name) else {
                let e = ControllerError::UnknownTopicOrPartition {
                    reason: "This server does not host this topic-partition.".to_owned(),
                };
                answer(Some(&name), Uuid::nil(), e.code(), Some(e.to_string()));
                continue;
            };
            let id = topic.id;
            if duplicate_ids.contains(&id) || deleting.iter().any(|(d, _)| *d == id) {
                deleting.retain(|(d, _)| *d != id);
                if !duplicate_ids.contains(&id) {
                    duplicate_ids.push(id);
                }
                answer(
                    Some(&name),
                    id,
                    invalid,
                    Some(
                        "The provided topic name maps to an ID that was already supplied."
                            .to_owned(),
                    ),
                );
            } else {
                deleting.push((id, name));
            }
        }
        let mut records = Vec::new();
        for (topic_id, name) in deleting {
            // Kafka: the controller mutation quota, once per topic, for all its partitions.
            let partitions = self
                .image
                .topics
                .topic(topic_id)
                .map_or(0, |t| t.partitions.len());
            if let Err(e) = self.apply_partition_change_quota(partitions) {
                answer(Some(&name), topic_id, e.code(), e.item_message());
                continue;
            }
            info!(topic = %name, %topic_id, "deleting topic");
            records.push(ApiMessageAndVersion::new(
                MetadataRecord::RemoveTopic(RemoveTopicRecord {
                    topic_id,
                    ..RemoveTopicRecord::default()
                }),
                0,
            ));
            answer(Some(&name), topic_id, 0, None);
        }
        (
            records,
            DeleteTopicsResponse::default().with_responses(responses),
        )
    }
}

/// The names that appear more than once, each once, in order of first appearance.
fn duplicated_names<'a>(names: impl Iterator<Item = &'a TopicName>) -> Vec<TopicName> {
    let mut seen: Vec<&TopicName> = Vec::new();
    let mut twice: Vec<TopicName> = Vec::new();
    for name in names {
        if seen.contains(&name) {
            if !twice.contains(name) {
                twice.push(name.clone());
            }
        } else {
            seen.push(name);
        }
    }
    twice
}
