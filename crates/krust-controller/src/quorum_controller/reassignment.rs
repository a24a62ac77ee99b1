//! Partition reassignment (KIP-455, Kafka 3.9 `ReplicationControlManager`):
//! AlterPartitionReassignments and ListPartitionReassignments.
//!
//! A reassignment goes in three steps. (1) One `PartitionChangeRecord` puts every target
//! replica into the replica list (the replicas being removed stay, after the target ones) and
//! sets `addingReplicas`/`removingReplicas`. (2) The new replicas catch up and the leader adds
//! them to the ISR with AlterPartition. (3) The AlterPartition that makes the ISR hold every
//! target replica completes it ([`crate::partition_change`]): the removed replicas leave the
//! replica list and the ISR, adding/removing are cleared, and the leader moves if it was
//! removed. A reassignment that only reorders replicas, or whose ISR already qualifies,
//! completes in step 1. Cancelling (`Replicas` null) reverts to the original replicas
//! (Kafka's `PartitionReassignmentRevert`).

use kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::*;

/// What cancelling a reassignment goes back to (Kafka's `PartitionReassignmentRevert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReassignmentRevert {
    /// The original replicas: the current ones without those being added.
    pub(crate) replicas: Vec<i32>,
    /// The ISR without the replicas being added (or the first original replica when nothing
    /// else is left: an unclean choice).
    pub(crate) isr: Vec<i32>,
    /// Whether the ISR had to be made up.
    pub(crate) unclean: bool,
}

impl ReassignmentRevert {
    pub(crate) fn of(partition: &PartitionRegistration) -> Result<Self, ControllerError> {
        let adding = &partition.adding_replicas;
        let replicas: Vec<i32> = partition
            .replicas
            .iter()
            .copied()
            .filter(|r| !adding.contains(r))
            .collect();
        let mut isr: Vec<i32> = partition
            .isr
            .iter()
            .copied()
            .filter(|r| !adding.contains(r))
            .collect();
        let mut unclean = false;
        if isr.is_empty() {
            let Some(&first) = replicas.first() else {
                return Err(ControllerError::InvalidReplicaAssignment {
                    reason: "Invalid replica assignment: addingReplicas contains all replicas."
                        .to_owned(),
                });
            };
            isr.push(first);
            unclean = true;
        }
        Ok(Self {
            replicas,
            isr,
            unclean,
        })
    }
}

/// The replica list, removing and adding replicas of a reassignment from `current` to
/// `target` (Kafka's `PartitionReassignmentReplicas`): removing and adding sorted, the list the
/// target followed by the replicas being removed.
pub(crate) fn reassignment_replicas(
    current: &[i32],
    target: &[i32],
) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let removing: BTreeSet<i32> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: BTreeSet<i32> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(removing.iter().copied());
    (
        replicas,
        removing.into_iter().collect(),
        adding.into_iter().collect(),
    )
}

impl QuorumController {
    /// Kafka's `validateManualPartitionAssignment` without a replication factor: brokers are
    /// checked in id order.
    fn validate_reassignment_target(&self, replicas: &[i32]) -> Result<(), ControllerError> {
        let invalid = |reason: String| Err(ControllerError::InvalidReplicaAssignment { reason });
        if replicas.is_empty() {
            return invalid(
                "The manual partition assignment includes an empty replica list.".to_owned(),
            );
        }
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        let mut previous = None;
        for broker in sorted {
            if self.image.cluster.broker(broker).is_none() {
                return invalid(format!(
                    "The manual partition assignment includes broker {broker}, but no such broker is registered."
                ));
            }
            if previous == Some(broker) {
                return invalid(format!(
                    "The manual partition assignment includes the broker {broker} more than once."
                ));
            }
            previous = Some(broker);
        }
        Ok(())
    }

    /// One partition of an AlterPartitionReassignments: its record, if anything changes.
    fn alter_partition_reassignment(
        &self,
        topic_name: &str,
        target: &ReassignablePartition,
    ) -> Result<Option<ApiMessageAndVersion>, ControllerError> {
        let Some(topic) = self.image.topics.topic_by_name(topic_name) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("Unable to find a topic named {topic_name}."),
            });
        };
        let Some(partition) = topic.partitions.get(&target.partition_index) else {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!(
                    "Unable to find partition {topic_name}:{}.",
                    target.partition_index
                ),
            });
        };
        let acceptable = |r: i32| self.broker_is_active(r);
        let default_dir = |r: i32| self.default_directory(r);
        let unclean = self.unclean_election_enabled(topic_name);
        let builder = self
            .partition_change(partition, topic.id, target.partition_index, &acceptable)
            .with_default_dir(&default_dir);
        let Some(target_replicas) = &target.replicas else {
            // Cancel.
            if partition.adding_replicas.is_empty() && partition.removing_replicas.is_empty() {
                return Err(ControllerError::NoReassignmentInProgress);
            }
            let revert = ReassignmentRevert::of(partition)?;
            if revert.unclean && !unclean {
                return Err(ControllerError::InvalidReplicaAssignment {
                    reason: format!(
                        "Unable to revert partition assignment for {topic_name}:{} because it would require an unclean leader election.",
                        target.partition_index
                    ),
                });
            }
            let builder = if unclean {
                builder.with_election(Election::Unclean)
            } else {
                builder
            };
            return Ok(builder
                .with_target_isr(revert.isr)
                .with_target_replicas(revert.replicas)
                .with_target_removing(Vec::new())
                .with_target_adding(Vec::new())
                .build());
        };
        let target_replicas: Vec<i32> = target_replicas.iter().map(|b| b.0).collect();
        self.validate_reassignment_target(&target_replicas)?;
        let (replicas, removing, adding) =
            reassignment_replicas(&partition.replicas, &target_replicas);
        let mut builder = builder;
        if replicas != partition.replicas {
            builder = builder.with_target_replicas(replicas);
        }
        if !removing.is_empty() {
            builder = builder.with_target_removing(removing);
        }
        if !adding.is_empty() {
            builder = builder.with_target_adding(adding);
        }
        Ok(builder.build())
    }

    /// AlterPartitionReassignments: every partition's outcome, the records of those accepted
    /// (applied atomically, as Kafka's `ControllerResult.atomicOf`).
    pub(super) fn alter_partition_reassignments(
        &self,
        request: &AlterPartitionReassignmentsRequest,
    ) -> (
        Vec<ApiMessageAndVersion>,
        AlterPartitionReassignmentsResponse,
    ) {
        let mut records = Vec::new();
        let mut responses = Vec::new();
        let (mut done, mut total) = (0_usize, 0_usize);
        for topic in &request.topics {
            let mut partitions = Vec::new();
            for partition in &topic.partitions {
                total += 1;
                let result = ReassignablePartitionResponse::default()
                    .with_partition_index(partition.partition_index);
                let result = match self.alter_partition_reassignment(&topic.name.0, partition) {
                    Ok(record) => {
                        done += 1;
                        records.extend(record);
                        result.with_error_message(None)
                    }
                    Err(e) => {
                        tracing::info!(
                            "Unable to alter partition reassignment for {}:{} because of an {:?} error: {e}",
                            topic.name.0.as_str(),
                            partition.partition_index,
                            e.response_error()
                        );
                        result
                            .with_error_code(e.code())
                            .with_error_message(Some(StrBytes::from_string(e.to_string())))
                    }
                };
                partitions.push(result);
            }
            responses.push(
                ReassignableTopicResponse::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        tracing::info!("Successfully altered {done} out of {total} partition reassignment(s).");
        (
            records,
            AlterPartitionReassignmentsResponse::default()
                .with_error_message(None)
                .with_responses(responses),
        )
    }

    /// ListPartitionReassignments: the reassigning partitions of the topics asked for (all
    /// topics when `topics` is null); unknown topics and partitions are left out, as Kafka does.
    pub(super) fn list_partition_reassignments(
        &self,
        request: &ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
        let ongoing = |topic: &krust_metadata::image::topics::TopicImage,
                       only: Option<&[i32]>|
         -> Option<OngoingTopicReassignment> {
            let partitions: Vec<OngoingPartitionReassignment> = topic
                .partitions
                .iter()
                .filter(|(id, _)| only.is_none_or(|ids| ids.contains(id)))
                .filter(|(_, p)| !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty())
                .map(|(&id, p)| {
                    let ids = |v: &[i32]| v.iter().copied().map(BrokerId).collect::<Vec<_>>();
                    OngoingPartitionReassignment::default()
                        .with_partition_index(id)
                        .with_replicas(ids(&p.replicas))
                        .with_adding_replicas(ids(&p.adding_replicas))
                        .with_removing_replicas(ids(&p.removing_replicas))
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(StrBytes::from_string(topic.name.clone())))
                    .with_partitions(partitions)
            })
        };
        let topics: Vec<OngoingTopicReassignment> = match &request.topics {
            None => self
                .image
                .topics
                .by_id
                .values()
                .filter_map(|t| ongoing(t, None))
                .collect(),
            Some(asked) => asked
                .iter()
                .filter_map(|t| {
                    let topic = self.image.topics.topic_by_name(&t.name.0)?;
                    ongoing(topic, Some(&t.partition_indexes))
                })
                .collect(),
        };
        ListPartitionReassignmentsResponse::default()
            .with_error_message(None)
            .with_topics(topics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_list_is_the_target_then_the_removed() {
        let (replicas, removing, adding) = reassignment_replicas(&[1, 2, 3], &[4, 3, 2]);
        assert_eq!(replicas, vec![4, 3, 2, 1]);
        assert_eq!(removing, vec![1]);
        assert_eq!(adding, vec![4]);
        let (replicas, removing, adding) = reassignment_replicas(&[1, 2, 3], &[3, 2, 1]);
        assert_eq!(replicas, vec![3, 2, 1]);
        assert!(removing.is_empty() && adding.is_empty());
    }

    fn reassigning(replicas: &[i32], isr: &[i32], adding: &[i32]) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            directories: vec![Uuid::nil(); replicas.len()],
            isr: isr.to_vec(),
            removing_replicas: Vec::new(),
            adding_replicas: adding.to_vec(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            leader: isr.first().copied().unwrap_or(-1),
            leader_recovery_state: krust_metadata::image::topics::LeaderRecoveryState::Recovered,
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }

    #[test]
    fn a_revert_drops_the_added_replicas() {
        let revert = ReassignmentRevert::of(&reassigning(&[4, 5, 1, 2], &[1, 2, 4], &[4, 5]))
            .expect("revertible");
        assert_eq!(revert.replicas, vec![1, 2]);
        assert_eq!(revert.isr, vec![1, 2]);
        assert!(!revert.unclean);
        let unclean =
            ReassignmentRevert::of(&reassigning(&[4, 1], &[4], &[4])).expect("revertible");
        assert_eq!(unclean.isr, vec![1]);
        assert!(unclean.unclean);
    }
}
