//! Leadership and ISR changes: moves on fence/unfence/shutdown/unregister (Kafka's
//! `generateLeaderAndIsrUpdates`), AlterPartition and ElectLeaders.

use krust_metadata::records::NO_LEADER_CHANGE;

use super::*;

impl QuorumController {
    /// Whether `broker` may lead or join an ISR now (Kafka's `isActive`).
    pub(super) fn broker_is_active(&self, broker: i32) -> bool {
        self.sessions.state(broker) == Some(BrokerControlState::Unfenced)
            && self
                .image
                .cluster
                .broker(broker)
                .is_some_and(|b| !b.in_controlled_shutdown && !b.fenced)
    }

    /// A [`PartitionChangeBuilder`] for one partition at this controller's metadata.version,
    /// bumping the leader epoch on every ISR shrink while ZooKeeper-mode brokers may be
    /// registered (Kafka's `setZkMigrationEnabled(clusterControl.zkRegistrationAllowed())`,
    /// which every one of Kafka's call sites sets).
    pub(super) fn partition_change<'a>(
        &self,
        partition: &'a PartitionRegistration,
        topic_id: Uuid,
        partition_id: i32,
        is_acceptable_leader: &'a dyn Fn(i32) -> bool,
    ) -> PartitionChangeBuilder<'a> {
        PartitionChangeBuilder::new(
            partition,
            topic_id,
            partition_id,
            is_acceptable_leader,
            self.image.metadata_version(),
        )
        .with_zk_migration(self.zk_registration_allowed())
    }

    /// The `PartitionChangeRecord`s for `work` on `broker_id` (Kafka's
    /// `generateLeaderAndIsrUpdates`), built against the current image.
    pub(super) fn partition_work(
        &self,
        broker_id: i32,
        work: PartitionWork,
    ) -> Vec<ApiMessageAndVersion> {
        self.partition_work_where(broker_id, work, |_, _, _| true)
    }

    /// [`Self::partition_work`] limited to the partitions `only` accepts (given the topic id,
    /// the partition index and the partition).
    pub(super) fn partition_work_where(
        &self,
        broker_id: i32,
        work: PartitionWork,
        only: impl Fn(Uuid, i32, &PartitionRegistration) -> bool,
    ) -> Vec<ApiMessageAndVersion> {
        let mut records = Vec::new();
        for topic in self.image.topics.by_id.values() {
            let unclean = self.unclean_election_enabled(&topic.name);
            for (&partition_id, partition) in &topic.partitions {
                if !only(topic.id, partition_id, partition) {
                    continue;
                }
                let built = match work {
                    PartitionWork::None => None,
                    PartitionWork::RemoveBrokerBefore | PartitionWork::RemoveBrokerAfter => {
                        if !partition.isr.contains(&broker_id) {
                            continue;
                        }
                        let acceptable = |r: i32| r != broker_id && self.broker_is_active(r);
                        let isr: Vec<i32> = partition
                            .isr
                            .iter()
                            .copied()
                            .filter(|&r| r != broker_id)
                            .collect();
                        self.partition_change(partition, topic.id, partition_id, &acceptable)
                            .with_target_isr(isr)
                            .with_election(if unclean {
                                Election::Unclean
                            } else {
                                Election::Online
                            })
                            .build()
                    }
                    PartitionWork::ElectLeaderlessAfter => {
                        if partition.leader != NO_LEADER {
                            continue;
                        }
                        let acceptable = |r: i32| r == broker_id || self.broker_is_active(r);
                        self.partition_change(partition, topic.id, partition_id, &acceptable)
                            .with_election(if unclean {
                                Election::Unclean
                            } else {
                                Election::Online
                            })
                            .build()
                    }
                };
                records.extend(built);
            }
        }
        records
    }

    pub(super) fn unclean_election_enabled(&self, topic: &str) -> bool {
        self.image
            .configs
            .configs(&ConfigResource::topic(topic))
            .get(UNCLEAN_LEADER_ELECTION_ENABLE)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// Kafka's `electLeaders`: preferred (type 0) or unclean (type 1) elections.
    pub(super) fn elect_leaders(
        &self,
        request: &ElectLeadersRequest,
    ) -> Result<(Vec<ApiMessageAndVersion>, ElectLeadersResponse), ControllerError> {
        let election = match request.election_type {
            0 => Election::Preferred,
            1 => Election::Unclean,
            other => {
                return Err(ControllerError::InvalidRequest {
                    reason: format!("Unknown election type {other}"),
                });
            }
        };
        let mut records = Vec::new();
        let mut results = Vec::new();
        let all = request.topic_partitions.is_none();
        let targets: Vec<(TopicName, Vec<i32>)> = match &request.topic_partitions {
            Some(topics) => topics
                .iter()
                .map(|t| (t.topic.clone(), t.partitions.clone()))
                .collect(),
            None => self
                .image
                .topics
                .by_name
                .values()
                .map(|t| {
                    (
                        TopicName(StrBytes::from_string(t.name.clone())),
                        t.partitions.keys().copied().collect(),
                    )
                })
                .collect(),
        };
        for (topic, partitions) in targets {
            let mut partition_results = Vec::new();
            for partition_id in partitions {
                let outcome = self.elect_leader(&topic.0, partition_id, election);
                let (code, message) = match outcome {
                    Ok(Some(record)) => {
                        records.push(record);
                        (0, None)
                    }
                    Ok(None) if all => continue,
                    Ok(None) => (
                        ResponseError::ElectionNotNeeded.code(),
                        Some(StrBytes::from_static_str(
                            "Leader election not needed for topic partition.",
                        )),
                    ),
                    Err(e) => error_fields(&e),
                };
                partition_results.push(
                    PartitionResult::default()
                        .with_partition_id(partition_id)
                        .with_error_code(code)
                        .with_error_message(message),
                );
            }
            results.push(
                ReplicaElectionResult::default()
                    .with_topic(topic)
                    .with_partition_result(partition_results),
            );
        }
        Ok((
            records,
            ElectLeadersResponse::default().with_replica_election_results(results),
        ))
    }

    /// One election: `Ok(None)` when not needed.
    pub(super) fn elect_leader(
        &self,
        topic: &str,
        partition_id: i32,
        election: Election,
    ) -> Result<Option<ApiMessageAndVersion>, ControllerError> {
        let found = self.image.topics.topic_by_name(topic);
        let Some(partition) = found.and_then(|t| t.partitions.get(&partition_id)) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("No such topic partition {topic}-{partition_id}"),
            });
        };
        let topic_id = found.map(|t| t.id).unwrap_or_default();
        let not_needed = match election {
            Election::Preferred => partition.leader == partition.preferred_replica(),
            _ => partition.has_leader(),
        };
        if not_needed {
            return Ok(None);
        }
        let acceptable = |r: i32| self.broker_is_active(r);
        self.partition_change(partition, topic_id, partition_id, &acceptable)
            .with_election(election)
            .build()
            .map(Some)
            .ok_or(if election == Election::Preferred {
                ControllerError::PreferredLeaderNotAvailable
            } else {
                ControllerError::EligibleLeadersNotAvailable
            })
    }

    /// Looks up the partition of one AlterPartition entry.
    pub(super) fn alter_partition_target(
        &self,
        topic: &kafka_protocol::messages::alter_partition_request::TopicData,
        partition_id: i32,
    ) -> Result<(Uuid, PartitionRegistration), ControllerError> {
        let found = if topic.topic_id.is_nil() {
            self.image.topics.topic_by_name(&topic.topic_name.0)
        } else {
            self.image.topics.topic(topic.topic_id)
        };
        let Some(found) = found else {
            return Err(if topic.topic_id.is_nil() {
                ControllerError::UnknownTopicOrPartition {
                    reason: format!("No such topic as {}", topic.topic_name.0.as_str()),
                }
            } else {
                ControllerError::UnknownTopicId {
                    topic_id: topic.topic_id,
                }
            });
        };
        found
            .partitions
            .get(&partition_id)
            .map(|p| (found.id, PartitionRegistration::clone(p)))
            .ok_or_else(|| ControllerError::UnknownTopicOrPartition {
                reason: format!("No such partition {}-{partition_id}", found.name),
            })
    }

    /// Kafka's `validateAlterPartitionData`.
    pub(super) fn validate_alter_partition(
        &self,
        broker_id: i32,
        partition: &PartitionRegistration,
        data: &kafka_protocol::messages::alter_partition_request::PartitionData,
    ) -> Result<(Vec<i32>, LeaderRecoveryState), ControllerError> {
        if data.leader_epoch > partition.leader_epoch
            || data.partition_epoch > partition.partition_epoch
        {
            // The broker knows a newer state than this controller: it is not the active one
            // as far as the broker can tell.
            return Err(ControllerError::NotController);
        }
        if data.leader_epoch < partition.leader_epoch {
            return Err(ControllerError::FencedLeaderEpoch {
                current: partition.leader_epoch,
                got: data.leader_epoch,
            });
        }
        if broker_id != partition.leader {
            return Err(ControllerError::InvalidRequest {
                reason: format!(
                    "Broker {broker_id} is not the leader ({}) of the partition",
                    partition.leader
                ),
            });
        }
        if data.partition_epoch < partition.partition_epoch {
            return Err(ControllerError::StalePartitionEpoch {
                current: partition.partition_epoch,
                got: data.partition_epoch,
            });
        }
        let with_epochs: Vec<(i32, i64)> = if data.new_isr_with_epochs.is_empty() {
            data.new_isr.iter().map(|b| (b.0, -1)).collect()
        } else {
            data.new_isr_with_epochs
                .iter()
                .map(|b| (b.broker_id.0, b.broker_epoch))
                .collect()
        };
        let new_isr: Vec<i32> = with_epochs.iter().map(|(b, _)| *b).collect();
        let distinct: BTreeSet<i32> = new_isr.iter().copied().collect();
        if new_isr.is_empty()
            || distinct.len() != new_isr.len()
            || new_isr.iter().any(|r| !partition.replicas.contains(r))
        {
            return Err(ControllerError::InvalidRequest {
                reason: format!("Invalid ISR {new_isr:?}"),
            });
        }
        if !new_isr.contains(&partition.leader) {
            return Err(ControllerError::InvalidRequest {
                reason: format!("The new ISR {new_isr:?} does not include the leader"),
            });
        }
        let state =
            LeaderRecoveryState::from_value(data.leader_recovery_state).ok_or_else(|| {
                ControllerError::InvalidRequest {
                    reason: format!(
                        "Unknown leader recovery state {}",
                        data.leader_recovery_state
                    ),
                }
            })?;
        if state == LeaderRecoveryState::Recovering && new_isr.len() > 1 {
            return Err(ControllerError::InvalidRequest {
                reason: "A recovering leader cannot grow the ISR".to_owned(),
            });
        }
        if partition.leader_recovery_state == LeaderRecoveryState::Recovered
            && state == LeaderRecoveryState::Recovering
        {
            return Err(ControllerError::InvalidRequest {
                reason: "The leader recovery state cannot change from RECOVERED to RECOVERING."
                    .to_owned(),
            });
        }
        let ineligible: Vec<i32> = with_epochs
            .iter()
            .filter(|&&(r, epoch)| {
                !self.broker_is_active(r)
                    || (epoch != -1 && self.sessions.broker_epoch(r) != Some(epoch))
            })
            .map(|&(r, _)| r)
            .collect();
        if !ineligible.is_empty() {
            return Err(ControllerError::IneligibleReplica {
                replicas: ineligible,
            });
        }
        Ok((new_isr, state))
    }

    /// The records of an AlterPartition, and each partition's refusal (by topic, then
    /// partition, in request order), decided against the image before the records.
    pub(super) fn alter_partition_records(
        &self,
        request: &AlterPartitionRequest,
    ) -> (Vec<ApiMessageAndVersion>, Vec<Vec<Option<ControllerError>>>) {
        let mut records = Vec::new();
        let mut errors = Vec::new();
        for topic in &request.topics {
            let mut topic_errors = Vec::new();
            for data in &topic.partitions {
                let checked = self
                    .alter_partition_target(topic, data.partition_index)
                    .and_then(|(topic_id, partition)| {
                        self.validate_alter_partition(request.broker_id.0, &partition, data)
                            .map(|accepted| (topic_id, partition, accepted))
                    });
                match checked {
                    Ok((topic_id, partition, (new_isr, state))) => {
                        let acceptable = |r: i32| self.broker_is_active(r);
                        let change = self
                            .partition_change(
                                &partition,
                                topic_id,
                                data.partition_index,
                                &acceptable,
                            )
                            .with_target_isr(new_isr)
                            .with_target_leader_recovery_state(state)
                            .build();
                        // The requester may no longer lead (say, it is shutting down): the
                        // change still goes in, and it hears NEW_LEADER_ELECTED, as in Kafka.
                        let new_leader = change.as_ref().and_then(|c| match &c.record {
                            MetadataRecord::PartitionChange(r)
                                if r.leader != NO_LEADER_CHANGE
                                    && r.leader != request.broker_id.0 =>
                            {
                                Some(r.leader)
                            }
                            _ => None,
                        });
                        records.extend(change);
                        topic_errors.push(
                            new_leader.map(|leader| ControllerError::NewLeaderElected { leader }),
                        );
                    }
                    Err(e) => topic_errors.push(Some(e)),
                }
            }
            errors.push(topic_errors);
        }
        (records, errors)
    }

    /// The AlterPartition response: refusals as decided, accepted partitions as they are in
    /// the image after the request's records.
    pub(super) fn alter_partition_response(
        &self,
        request: &AlterPartitionRequest,
        errors: &[Vec<Option<ControllerError>>],
    ) -> ControllerResponse {
        let mut topics = Vec::new();
        for (topic, topic_errors) in request.topics.iter().zip(errors) {
            let mut partitions = Vec::new();
            for (data, error) in topic.partitions.iter().zip(topic_errors) {
                let result = alter_partition_response::PartitionData::default()
                    .with_partition_index(data.partition_index);
                let current = match error {
                    Some(e) => Err(e.clone()),
                    None => self.alter_partition_target(topic, data.partition_index),
                };
                let result = match current {
                    Err(e) => result.with_error_code(e.code()),
                    Ok((_, partition)) => result
                        .with_leader_id(BrokerId(partition.leader))
                        .with_leader_epoch(partition.leader_epoch)
                        .with_isr(partition.isr.iter().copied().map(BrokerId).collect())
                        .with_leader_recovery_state(partition.leader_recovery_state.value())
                        .with_partition_epoch(partition.partition_epoch),
                };
                partitions.push(result);
            }
            topics.push(
                alter_partition_response::TopicData::default()
                    .with_topic_name(topic.topic_name.clone())
                    .with_topic_id(topic.topic_id)
                    .with_partitions(partitions),
            );
        }
        ControllerResponse::AlterPartition(AlterPartitionResponse::default().with_topics(topics))
    }

    /// Unclean elections for leaderless partitions of topics whose
    /// `unclean.leader.election.enable` is true (Kafka 3.9's periodic check), at most `limit`.
    pub(super) fn unclean_elections(&self, limit: usize) -> Vec<ApiMessageAndVersion> {
        let acceptable = |r: i32| self.broker_is_active(r);
        let mut records = Vec::new();
        for topic in self.image.topics.by_id.values() {
            if !self.unclean_election_enabled(&topic.name) {
                continue;
            }
            for (&partition_id, partition) in &topic.partitions {
                if records.len() >= limit {
                    return records;
                }
                if partition.has_leader() {
                    continue;
                }
                records.extend(
                    self.partition_change(partition, topic.id, partition_id, &acceptable)
                        .with_election(Election::Unclean)
                        .build(),
                );
            }
        }
        records
    }

    /// Preferred-leader elections for the imbalanced partitions, at most `limit` (Kafka's
    /// `maybeBalancePartitionLeaders`): a partition moves to its first replica only if that
    /// replica is in the ISR and active (unfenced, not shutting down). Returns the records and
    /// whether the limit cut the pass short (then it runs again at once).
    pub(super) fn preferred_elections(&self, limit: usize) -> (Vec<ApiMessageAndVersion>, bool) {
        let Some(active) = &self.active else {
            return (Vec::new(), false);
        };
        let acceptable = |r: i32| self.broker_is_active(r);
        let mut records = Vec::new();
        for &(topic_id, partition_id) in &active.imbalanced {
            if records.len() >= limit {
                return (records, true);
            }
            let Some(partition) = self
                .image
                .topics
                .topic(topic_id)
                .and_then(|t| t.partitions.get(&partition_id))
            else {
                continue;
            };
            records.extend(
                self.partition_change(partition, topic_id, partition_id, &acceptable)
                    .with_election(Election::Preferred)
                    .build(),
            );
        }
        (records, false)
    }
}
