//! AssignReplicasToDirs (KIP-858): a broker tells the controller which of its log directories
//! holds each of its replicas (Kafka 3.9 `ReplicationControlManager.handleAssignReplicasToDirs`).

use kafka_protocol::messages::assign_replicas_to_dirs_response::{
    DirectoryData, PartitionData, TopicData,
};
use kafka_protocol::messages::{AssignReplicasToDirsRequest, AssignReplicasToDirsResponse};
use krust_metadata::image::cluster::BrokerRegistration;
use krust_metadata::kafka_uuid::DIRECTORY_ID_LOST;

use super::*;

impl QuorumController {
    /// The records and response of an AssignReplicasToDirs, checked as Kafka checks it: the
    /// metadata.version, then the broker epoch, then each topic and partition in request
    /// order. An accepted partition gets a `PartitionChangeRecord` with its new `Directories`
    /// (none when nothing changes); a replica assigned to a directory that is not online also
    /// leaves the ISR (and leadership) of that partition, after the directory changes.
    ///
    /// # Errors
    /// The whole request is refused with UNSUPPORTED_VERSION below metadata.version 3.7-IV2,
    /// STALE_BROKER_EPOCH for an unregistered broker or another broker epoch.
    pub(super) fn assign_replicas_to_dirs(
        &self,
        request: &AssignReplicasToDirsRequest,
    ) -> Result<(Vec<ApiMessageAndVersion>, AssignReplicasToDirsResponse), ControllerError> {
        let mv = self.image.metadata_version();
        if !mv.is_directory_assignment_supported() {
            return Err(ControllerError::DirectoryAssignmentNotSupported);
        }
        let broker_id = request.broker_id.0;
        self.sessions
            .check_broker_epoch(broker_id, request.broker_epoch)?;
        let Some(registration) = self.image.cluster.broker(broker_id) else {
            return Err(ControllerError::BrokerIdNotRegistered {
                reason: format!("Broker ID {broker_id} is not currently registered"),
            });
        };
        let acceptable = |r: i32| self.broker_is_active(r);
        let mut records = Vec::new();
        let mut offline_assignments: BTreeSet<(Uuid, i32)> = BTreeSet::new();
        let mut directories = Vec::with_capacity(request.directories.len());
        for requested_dir in &request.directories {
            let dir = requested_dir.id;
            let offline = !directory_is_online(registration, dir);
            let mut topics = Vec::with_capacity(requested_dir.topics.len());
            for requested_topic in &requested_dir.topics {
                let topic_id = requested_topic.topic_id;
                let topic = self.image.topics.topic(topic_id);
                if topic.is_none() {
                    warn!(
                        broker_id,
                        %topic_id,
                        "AssignReplicasToDirsRequest references an unknown topic ID"
                    );
                }
                let mut partitions = Vec::with_capacity(requested_topic.partitions.len());
                for requested_partition in &requested_topic.partitions {
                    let index = requested_partition.partition_index;
                    let outcome = match topic {
                        None => Err(ControllerError::UnknownTopicId { topic_id }),
                        Some(topic) => match topic.partitions.get(&index) {
                            None => Err(ControllerError::UnknownTopicOrPartition {
                                reason: format!("No such partition {}-{index}", topic.name),
                            }),
                            Some(partition) if !partition.replicas.contains(&broker_id) => {
                                Err(ControllerError::NotAssignedReplica {
                                    broker_id,
                                    topic: topic.name.clone(),
                                    partition: index,
                                })
                            }
                            Some(partition) => Ok(self
                                .partition_change(partition, topic_id, index, &acceptable)
                                .with_directory(broker_id, dir)
                                .build()),
                        },
                    };
                    let code = match outcome {
                        Ok(change) => {
                            records.extend(change);
                            if offline {
                                offline_assignments.insert((topic_id, index));
                            }
                            0
                        }
                        Err(error) => {
                            if topic.is_some() {
                                warn!(broker_id, %error, "refusing a directory assignment");
                            }
                            error.code()
                        }
                    };
                    partitions.push(
                        PartitionData::default()
                            .with_partition_index(index)
                            .with_error_code(code),
                    );
                }
                topics.push(
                    TopicData::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions),
                );
            }
            directories.push(DirectoryData::default().with_id(dir).with_topics(topics));
        }
        if !offline_assignments.is_empty() {
            // Kafka's `generateLeaderAndIsrUpdates("offline-dir-assignment", ..)`: a replica
            // in a directory that is not online cannot stay in the ISR.
            records.extend(self.partition_work_where(
                broker_id,
                PartitionWork::RemoveBrokerBefore,
                |topic_id, index, _| offline_assignments.contains(&(topic_id, index)),
            ));
        }
        Ok((
            records,
            AssignReplicasToDirsResponse::default().with_directories(directories),
        ))
    }
}

/// Kafka's `DirectoryId.isOnline` over a broker's registration: the unassigned and migrating
/// placeholders count as online, a lost directory does not, and a broker that registered no
/// directories (at a metadata.version before 3.7-IV2) is assumed to have every one online.
fn directory_is_online(registration: &BrokerRegistration, dir: Uuid) -> bool {
    if dir == DIRECTORY_ID_UNASSIGNED || dir == DIRECTORY_ID_MIGRATING {
        return true;
    }
    if dir == DIRECTORY_ID_LOST {
        return false;
    }
    registration.directories.is_empty() || registration.directories.contains(&dir)
}
