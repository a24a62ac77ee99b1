//! Topics and partitions (Kafka's `TopicsImage` / `TopicImage` / `TopicsDelta` / `TopicDelta`,
//! `PartitionRegistration`, `LocalReplicaChanges`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use imbl::OrdMap;
use uuid::Uuid;

use super::ReplayError;
use super::writer::{ImageWriteError, ImageWriterOptions, RecordSink, emit};
use crate::records::{
    MetadataRecord, NO_LEADER_CHANGE, PartitionChangeRecord, PartitionRecord, RemoveTopicRecord,
    TopicRecord,
};

/// `Leader` of a partition without one.
pub const NO_LEADER: i32 = -1;

/// Reserved log directory ids (App. A).
pub mod directory_id {
    use uuid::Uuid;

    /// The replica's directory is not known yet: it was created before directory assignment
    /// (metadata.version < 3.7-IV2) or by a ZooKeeper-mode broker.
    pub const MIGRATING: Uuid = Uuid::from_u64_pair(0, 0);
    /// The replica is not assigned to a directory yet.
    pub const UNASSIGNED: Uuid = Uuid::from_u64_pair(0, 1);
    /// The replica's directory went offline.
    pub const LOST: Uuid = Uuid::from_u64_pair(0, 2);
}

/// Whether a leader elected uncleanly has finished recovering (KIP-704; App. A).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LeaderRecoveryState {
    /// 0: normal.
    #[default]
    Recovered,
    /// 1: elected uncleanly, still recovering.
    Recovering,
}

impl LeaderRecoveryState {
    /// The value in records.
    #[must_use]
    pub const fn value(self) -> i8 {
        match self {
            Self::Recovered => 0,
            Self::Recovering => 1,
        }
    }

    /// Looks a record value up; `None` for anything but 0 and 1.
    #[must_use]
    pub const fn from_value(value: i8) -> Option<Self> {
        match value {
            0 => Some(Self::Recovered),
            1 => Some(Self::Recovering),
            _ => None,
        }
    }
}

/// A topic name and partition index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

/// The state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// Replicas in preferred order.
    pub replicas: Vec<i32>,
    /// Log directory of each replica (same order as `replicas`; [`directory_id::MIGRATING`]
    /// when unknown).
    pub directories: Vec<Uuid>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<i32>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<i32>,
    /// Eligible leader replicas (KIP-966).
    pub elr: Vec<i32>,
    /// Last known ELR (KIP-966).
    pub last_known_elr: Vec<i32>,
    /// Leader broker id, or [`NO_LEADER`].
    pub leader: i32,
    /// Leader recovery state.
    pub leader_recovery_state: LeaderRecoveryState,
    /// Bumped on every leader change.
    pub leader_epoch: i32,
    /// Bumped on every change.
    pub partition_epoch: i32,
}

impl PartitionRegistration {
    fn from_record(record: &PartitionRecord) -> Result<Self, ReplayError> {
        let invalid_directories = || ReplayError::ReplicaDirectoriesMismatch {
            topic_id: record.topic_id,
            partition_id: record.partition_id,
            replicas: record.replicas.len(),
            directories: record.directories.len(),
        };
        let directories = if record.directories.is_empty() {
            vec![directory_id::MIGRATING; record.replicas.len()]
        } else if record.directories.len() == record.replicas.len() {
            record.directories.clone()
        } else {
            return Err(invalid_directories());
        };
        let leader_recovery_state = LeaderRecoveryState::from_value(record.leader_recovery_state)
            .ok_or(ReplayError::InvalidLeaderRecoveryState {
            topic_id: record.topic_id,
            partition_id: record.partition_id,
            value: record.leader_recovery_state,
        })?;
        Ok(Self {
            replicas: record.replicas.clone(),
            directories,
            isr: record.isr.clone(),
            removing_replicas: record.removing_replicas.clone(),
            adding_replicas: record.adding_replicas.clone(),
            elr: record.eligible_leader_replicas.clone().unwrap_or_default(),
            last_known_elr: record.last_known_elr.clone().unwrap_or_default(),
            leader: record.leader,
            leader_recovery_state,
            leader_epoch: record.leader_epoch,
            partition_epoch: record.partition_epoch,
        })
    }

    /// This partition after `record`: absent fields keep their value, the partition epoch is
    /// bumped, and the leader epoch is bumped whenever `Leader` is present (facts §3.3).
    fn merge(&self, record: &PartitionChangeRecord) -> Result<Self, ReplayError> {
        let replicas = record
            .replicas
            .clone()
            .unwrap_or_else(|| self.replicas.clone());
        let directories = match (&record.directories, &record.replicas) {
            (Some(directories), _) if !directories.is_empty() => directories.clone(),
            // New replicas keep the directories of the replicas they already had.
            (_, Some(new_replicas)) => new_replicas
                .iter()
                .map(|replica| {
                    self.replicas
                        .iter()
                        .position(|r| r == replica)
                        .and_then(|i| self.directories.get(i).copied())
                        .unwrap_or(directory_id::UNASSIGNED)
                })
                .collect(),
            _ => self.directories.clone(),
        };
        if directories.len() != replicas.len() {
            return Err(ReplayError::ReplicaDirectoriesMismatch {
                topic_id: record.topic_id,
                partition_id: record.partition_id,
                replicas: replicas.len(),
                directories: directories.len(),
            });
        }
        let (leader, leader_epoch) = if record.leader == NO_LEADER_CHANGE {
            (self.leader, self.leader_epoch)
        } else {
            (record.leader, self.leader_epoch.wrapping_add(1))
        };
        let leader_recovery_state = if record.leader_recovery_state == -1 {
            self.leader_recovery_state
        } else {
            LeaderRecoveryState::from_value(record.leader_recovery_state).ok_or(
                ReplayError::InvalidLeaderRecoveryState {
                    topic_id: record.topic_id,
                    partition_id: record.partition_id,
                    value: record.leader_recovery_state,
                },
            )?
        };
        let or_keep = |new: &Option<Vec<i32>>, old: &Vec<i32>| new.clone().unwrap_or(old.clone());
        Ok(Self {
            replicas,
            directories,
            isr: or_keep(&record.isr, &self.isr),
            removing_replicas: or_keep(&record.removing_replicas, &self.removing_replicas),
            adding_replicas: or_keep(&record.adding_replicas, &self.adding_replicas),
            elr: or_keep(&record.eligible_leader_replicas, &self.elr),
            last_known_elr: or_keep(&record.last_known_elr, &self.last_known_elr),
            leader,
            leader_recovery_state,
            leader_epoch,
            partition_epoch: self.partition_epoch.wrapping_add(1),
        })
    }

    /// Whether the partition has a leader.
    #[must_use]
    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// The first replica, or [`NO_LEADER`] without replicas.
    #[must_use]
    pub fn preferred_replica(&self) -> i32 {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }

    /// The log directory of `replica`, if it is one.
    #[must_use]
    pub fn directory(&self, replica: i32) -> Option<Uuid> {
        let index = self.replicas.iter().position(|r| *r == replica)?;
        self.directories.get(index).copied()
    }

    fn write(
        &self,
        topic_id: Uuid,
        partition_id: i32,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        let mv = options.metadata_version;
        let mut record = PartitionRecord {
            partition_id,
            topic_id,
            replicas: self.replicas.clone(),
            isr: self.isr.clone(),
            removing_replicas: self.removing_replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            leader: self.leader,
            leader_recovery_state: self.leader_recovery_state.value(),
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        };
        // Below the ELR version Kafka drops ELR without calling it a loss: the controller
        // rebuilds it from the ISR.
        if mv.is_elr_supported() {
            record.eligible_leader_replicas = (!self.elr.is_empty()).then(|| self.elr.clone());
            record.last_known_elr =
                (!self.last_known_elr.is_empty()).then(|| self.last_known_elr.clone());
        }
        if mv.is_directory_assignment_supported() {
            record.directories.clone_from(&self.directories);
        } else if self
            .directories
            .iter()
            .any(|d| *d != directory_id::MIGRATING)
        {
            options.handle_loss("the directory assignment state of one or more replicas")?;
        }
        emit(
            sink,
            MetadataRecord::Partition(record),
            mv.partition_record_version(),
        );
        Ok(())
    }
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Partitions by index.
    pub partitions: OrdMap<i32, Arc<PartitionRegistration>>,
}

/// All topics, by id and by name (the two maps hold the same topics).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicsImage {
    /// Topics by id.
    pub by_id: OrdMap<Uuid, Arc<TopicImage>>,
    /// Topics by name.
    pub by_name: OrdMap<String, Arc<TopicImage>>,
}

impl TopicsImage {
    /// The topic with `id`.
    #[must_use]
    pub fn topic(&self, id: Uuid) -> Option<&TopicImage> {
        self.by_id.get(&id).map(Arc::as_ref)
    }

    /// The topic named `name`.
    #[must_use]
    pub fn topic_by_name(&self, name: &str) -> Option<&TopicImage> {
        self.by_name.get(name).map(Arc::as_ref)
    }

    /// The partition `partition_id` of topic `id`.
    #[must_use]
    pub fn partition(&self, id: Uuid, partition_id: i32) -> Option<&PartitionRegistration> {
        self.topic(id)?
            .partitions
            .get(&partition_id)
            .map(Arc::as_ref)
    }

    pub(crate) fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        for topic in self.by_id.values() {
            emit(
                sink,
                MetadataRecord::Topic(TopicRecord {
                    name: topic.name.clone(),
                    topic_id: topic.id,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
            for (partition_id, partition) in &topic.partitions {
                partition.write(topic.id, *partition_id, sink, options)?;
            }
        }
        Ok(())
    }
}

/// A partition this broker now leads or follows, with its topic id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPartitionInfo {
    /// Topic id.
    pub topic_id: Uuid,
    /// The partition after the delta.
    pub partition: Arc<PartitionRegistration>,
}

/// What a delta means for the replicas of one broker (Kafka's `LocalReplicaChanges`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalReplicaChanges {
    /// Partitions this broker no longer hosts: removed from its replicas or topic deleted.
    pub deletes: BTreeSet<TopicPartition>,
    /// Partitions this broker leads with a new leader epoch (a subset of `leaders`).
    pub elected_leaders: BTreeMap<TopicPartition, LocalPartitionInfo>,
    /// Partitions this broker leads whose partition epoch changed.
    pub leaders: BTreeMap<TopicPartition, LocalPartitionInfo>,
    /// Partitions this broker follows whose partition epoch changed.
    pub followers: BTreeMap<TopicPartition, LocalPartitionInfo>,
    /// Ids of the topics in `leaders` and `followers`.
    pub topic_ids: BTreeMap<String, Uuid>,
}

impl LocalReplicaChanges {
    /// Whether the delta changes nothing for this broker.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.leaders.is_empty() && self.followers.is_empty()
    }
}

/// Changes to one topic's partitions.
#[derive(Debug, Clone)]
pub struct TopicDelta {
    image: Arc<TopicImage>,
    partition_changes: BTreeMap<i32, Arc<PartitionRegistration>>,
}

impl TopicDelta {
    fn new(image: Arc<TopicImage>) -> Self {
        Self {
            image,
            partition_changes: BTreeMap::new(),
        }
    }

    /// The topic before this delta (no partitions for a created topic).
    #[must_use]
    pub fn image(&self) -> &TopicImage {
        &self.image
    }

    /// Topic name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.image.name
    }

    /// Topic id.
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.image.id
    }

    /// Partitions created or changed by this delta, as they are after it.
    #[must_use]
    pub fn partition_changes(&self) -> &BTreeMap<i32, Arc<PartitionRegistration>> {
        &self.partition_changes
    }

    /// The partition as of this delta.
    #[must_use]
    pub fn partition(&self, partition_id: i32) -> Option<&Arc<PartitionRegistration>> {
        self.partition_changes
            .get(&partition_id)
            .or_else(|| self.image.partitions.get(&partition_id))
    }

    fn apply(&self) -> TopicImage {
        let mut partitions = self.image.partitions.clone();
        for (id, partition) in &self.partition_changes {
            partitions.insert(*id, Arc::clone(partition));
        }
        TopicImage {
            name: self.image.name.clone(),
            id: self.image.id,
            partitions,
        }
    }

    fn add_local_changes(&self, broker_id: i32, changes: &mut LocalReplicaChanges) {
        for (partition_id, partition) in &self.partition_changes {
            let previous = self.image.partitions.get(partition_id);
            let tp = || TopicPartition {
                topic: self.name().to_owned(),
                partition: *partition_id,
            };
            let info = || LocalPartitionInfo {
                topic_id: self.id(),
                partition: Arc::clone(partition),
            };
            if !partition.replicas.contains(&broker_id) {
                if previous.is_some_and(|p| p.replicas.contains(&broker_id)) {
                    changes.deletes.insert(tp());
                }
                continue;
            }
            if previous.is_some_and(|p| p.partition_epoch == partition.partition_epoch) {
                continue;
            }
            changes.topic_ids.insert(self.name().to_owned(), self.id());
            if partition.leader == broker_id {
                if previous.is_none_or(|p| p.leader_epoch != partition.leader_epoch) {
                    changes.elected_leaders.insert(tp(), info());
                }
                changes.leaders.insert(tp(), info());
            } else {
                changes.followers.insert(tp(), info());
            }
        }
    }
}

/// Changes to the topics. Topics created and then deleted within the same delta leave no
/// trace (Kafka's `TopicsDelta`).
#[derive(Debug, Clone)]
pub struct TopicsDelta {
    image: Arc<TopicsImage>,
    /// Loading a snapshot on top of `image`: a `TopicRecord` may name a topic of the image
    /// (it replaces it), and [`Self::finish_snapshot`] deletes what the snapshot left out.
    snapshot: bool,
    changed_topics: BTreeMap<Uuid, TopicDelta>,
    deleted_topic_ids: BTreeSet<Uuid>,
    created_topics: BTreeMap<String, Uuid>,
}

impl TopicsDelta {
    pub(crate) fn new(image: Arc<TopicsImage>, snapshot: bool) -> Self {
        Self {
            image,
            snapshot,
            changed_topics: BTreeMap::new(),
            deleted_topic_ids: BTreeSet::new(),
            created_topics: BTreeMap::new(),
        }
    }

    /// The topics before this delta.
    #[must_use]
    pub fn image(&self) -> &TopicsImage {
        &self.image
    }

    /// Topics created or changed by this delta, by id.
    #[must_use]
    pub fn changed_topics(&self) -> &BTreeMap<Uuid, TopicDelta> {
        &self.changed_topics
    }

    /// Topics of the image deleted by this delta.
    #[must_use]
    pub fn deleted_topic_ids(&self) -> &BTreeSet<Uuid> {
        &self.deleted_topic_ids
    }

    /// Topics created by this delta (and not deleted again), name → id.
    #[must_use]
    pub fn created_topics(&self) -> &BTreeMap<String, Uuid> {
        &self.created_topics
    }

    /// Whether `id` was created by this delta.
    #[must_use]
    pub fn topic_was_created(&self, id: Uuid) -> bool {
        self.changed_topics.contains_key(&id) && !self.image.by_id.contains_key(&id)
    }

    /// Every partition created or changed by this delta: (topic id, topic name, partition
    /// index, partition after the delta).
    pub fn changed_partitions(
        &self,
    ) -> impl Iterator<Item = (Uuid, &str, i32, &Arc<PartitionRegistration>)> {
        self.changed_topics.values().flat_map(|topic| {
            topic
                .partition_changes
                .iter()
                .map(move |(id, p)| (topic.id(), topic.name(), *id, p))
        })
    }

    /// The partitions `broker_id` now leads, follows or must delete. Only partitions whose
    /// partition epoch changed are reported as led or followed; deleted topics put every
    /// partition the broker hosted in `deletes`.
    #[must_use]
    pub fn local_changes(&self, broker_id: i32) -> LocalReplicaChanges {
        let mut changes = LocalReplicaChanges::default();
        for topic in self.changed_topics.values() {
            topic.add_local_changes(broker_id, &mut changes);
        }
        for id in &self.deleted_topic_ids {
            if let Some(topic) = self.image.topic(*id) {
                for (partition_id, partition) in &topic.partitions {
                    if partition.replicas.contains(&broker_id) {
                        changes.deletes.insert(TopicPartition {
                            topic: topic.name.clone(),
                            partition: *partition_id,
                        });
                    }
                }
            }
        }
        changes
    }

    /// The topic with `id` as of this delta (deleted topics are gone).
    fn live_topic(&self, id: Uuid) -> Option<&TopicImage> {
        if let Some(delta) = self.changed_topics.get(&id) {
            return Some(delta.image());
        }
        if self.deleted_topic_ids.contains(&id) {
            return None;
        }
        self.image.topic(id)
    }

    pub(crate) fn replay_topic(&mut self, record: &TopicRecord) -> Result<(), ReplayError> {
        let id = record.topic_id;
        let in_image = self.image.by_id.contains_key(&id);
        if self.changed_topics.contains_key(&id) || (in_image && !self.snapshot) {
            return Err(ReplayError::DuplicateTopicId {
                topic_id: id,
                name: record.name.clone(),
            });
        }
        // While loading a snapshot, topics of the image not named again are deleted at the
        // end, so only the snapshot's own names can clash.
        let name_taken_by = self.created_topics.get(&record.name).copied().or_else(|| {
            self.image
                .topic_by_name(&record.name)
                .map(|t| t.id)
                .filter(|existing| !self.snapshot && !self.deleted_topic_ids.contains(existing))
        });
        if let Some(existing_id) = name_taken_by {
            return Err(ReplayError::DuplicateTopicName {
                name: record.name.clone(),
                existing_id,
                new_id: id,
            });
        }
        let topic = TopicImage {
            name: record.name.clone(),
            id,
            partitions: OrdMap::new(),
        };
        self.changed_topics
            .insert(id, TopicDelta::new(Arc::new(topic)));
        self.created_topics.insert(record.name.clone(), id);
        Ok(())
    }

    fn topic_delta_mut(&mut self, id: Uuid) -> Result<&mut TopicDelta, ReplayError> {
        if !self.changed_topics.contains_key(&id) {
            let topic = self
                .image
                .by_id
                .get(&id)
                .filter(|_| !self.deleted_topic_ids.contains(&id))
                .ok_or(ReplayError::UnknownTopic { topic_id: id })?;
            self.changed_topics
                .insert(id, TopicDelta::new(Arc::clone(topic)));
        }
        self.changed_topics
            .get_mut(&id)
            .ok_or(ReplayError::UnknownTopic { topic_id: id })
    }

    pub(crate) fn replay_partition(&mut self, record: &PartitionRecord) -> Result<(), ReplayError> {
        if self.live_topic(record.topic_id).is_none() {
            return Err(ReplayError::UnknownTopic {
                topic_id: record.topic_id,
            });
        }
        let partition = PartitionRegistration::from_record(record)?;
        self.topic_delta_mut(record.topic_id)?
            .partition_changes
            .insert(record.partition_id, Arc::new(partition));
        Ok(())
    }

    pub(crate) fn replay_partition_change(
        &mut self,
        record: &PartitionChangeRecord,
    ) -> Result<(), ReplayError> {
        let current = match self.changed_topics.get(&record.topic_id) {
            Some(delta) => delta.partition(record.partition_id),
            None => self
                .live_topic(record.topic_id)
                .ok_or(ReplayError::UnknownTopic {
                    topic_id: record.topic_id,
                })?
                .partitions
                .get(&record.partition_id),
        }
        .ok_or(ReplayError::UnknownPartition {
            topic_id: record.topic_id,
            partition_id: record.partition_id,
        })?;
        let next = current.merge(record)?;
        self.topic_delta_mut(record.topic_id)?
            .partition_changes
            .insert(record.partition_id, Arc::new(next));
        Ok(())
    }

    /// Returns the deleted topic's name (its configs go with it).
    pub(crate) fn replay_remove_topic(
        &mut self,
        record: &RemoveTopicRecord,
    ) -> Result<String, ReplayError> {
        let id = record.topic_id;
        if let Some(delta) = self.changed_topics.remove(&id) {
            let name = delta.name().to_owned();
            if self.image.by_id.contains_key(&id) {
                self.deleted_topic_ids.insert(id);
            } else {
                self.created_topics.remove(&name);
            }
            return Ok(name);
        }
        let topic = self
            .live_topic(id)
            .ok_or(ReplayError::UnknownTopic { topic_id: id })?;
        let name = topic.name.clone();
        self.deleted_topic_ids.insert(id);
        Ok(name)
    }

    /// Ends a snapshot load: every topic of the image the snapshot did not name is deleted.
    pub(crate) fn finish_snapshot(&mut self) {
        for id in self.image.by_id.keys() {
            if !self.changed_topics.contains_key(id) {
                self.deleted_topic_ids.insert(*id);
            }
        }
    }

    pub(crate) fn apply(&self) -> TopicsImage {
        let mut by_id = self.image.by_id.clone();
        let mut by_name = self.image.by_name.clone();
        for id in self
            .deleted_topic_ids
            .iter()
            .chain(self.changed_topics.keys())
        {
            // A replaced topic (snapshot load) drops its old name too.
            if let Some(topic) = by_id.remove(id) {
                by_name.remove(&topic.name);
            }
        }
        for (id, delta) in &self.changed_topics {
            let topic = Arc::new(delta.apply());
            by_name.insert(topic.name.clone(), Arc::clone(&topic));
            by_id.insert(*id, topic);
        }
        TopicsImage { by_id, by_name }
    }
}
