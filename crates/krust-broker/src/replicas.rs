//! The partitions a broker hosts, plus what the metadata image says exists, so handlers can
//! tell `NOT_LEADER_OR_FOLLOWER` (the partition exists, elsewhere) from
//! `UNKNOWN_TOPIC_OR_PARTITION` (it does not exist) and resolve topic ids (Fetch v13+).

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::error::PartitionError;
use crate::partition::Partition;

/// A topic as the metadata image knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Its id.
    pub topic_id: Uuid,
    /// Number of partitions.
    pub partition_count: i32,
}

/// How the request handlers reach partitions: [`ReplicaSet`] in sans-IO tests, the runtime's
/// `ReplicaManager` (one lock per partition) on a broker.
pub trait PartitionAccess {
    /// The name of the topic with `topic_id`, if the metadata knows it.
    fn topic_name_of(&self, topic_id: Uuid) -> Option<String>;

    /// Runs `f` on the hosted partition, or says why there is none (Kafka's
    /// `getPartitionOrException`: NOT_LEADER_OR_FOLLOWER when the metadata has the partition
    /// elsewhere, UNKNOWN_TOPIC_OR_PARTITION otherwise).
    ///
    /// # Errors
    /// Why there is no partition, or what `f` returned.
    fn with_partition<T>(
        &mut self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&mut Partition) -> Result<T, PartitionError>,
    ) -> Result<T, PartitionError>;

    /// Runs `f` on the hosted partition read-only; `None` if it is not hosted.
    fn inspect_partition<T>(
        &self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&Partition) -> T,
    ) -> Option<T>;
}

impl PartitionAccess for ReplicaSet {
    fn topic_name_of(&self, topic_id: Uuid) -> Option<String> {
        self.topic_name(topic_id).map(str::to_string)
    }

    fn with_partition<T>(
        &mut self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&mut Partition) -> Result<T, PartitionError>,
    ) -> Result<T, PartitionError> {
        f(self.get_mut(topic, partition_index)?)
    }

    fn inspect_partition<T>(
        &self,
        topic: &str,
        partition_index: i32,
        f: impl FnOnce(&Partition) -> T,
    ) -> Option<T> {
        self.get(topic, partition_index).map(f)
    }
}

/// Local replicas by (topic, partition), and the topics of the metadata image.
#[derive(Debug, Default)]
pub struct ReplicaSet {
    partitions: BTreeMap<(String, i32), Partition>,
    topics: BTreeMap<String, TopicMetadata>,
    names_by_id: BTreeMap<Uuid, String>,
}

impl ReplicaSet {
    /// Empty.
    #[must_use]
    pub fn new() -> Self {
        ReplicaSet::default()
    }

    /// Records that the metadata image has `topic` (replaces an earlier entry).
    pub fn set_topic(&mut self, topic: &str, metadata: TopicMetadata) {
        if let Some(old) = self.topics.insert(topic.to_string(), metadata) {
            self.names_by_id.remove(&old.topic_id);
        }
        self.names_by_id
            .insert(metadata.topic_id, topic.to_string());
    }

    /// Hosts `partition` of `topic` here.
    pub fn insert(&mut self, topic: &str, partition_index: i32, partition: Partition) {
        self.partitions
            .insert((topic.to_string(), partition_index), partition);
    }

    /// Stops hosting a partition, returning it.
    pub fn remove(&mut self, topic: &str, partition_index: i32) -> Option<Partition> {
        self.partitions
            .remove(&(topic.to_string(), partition_index))
    }

    /// The name of the topic with `topic_id`.
    #[must_use]
    pub fn topic_name(&self, topic_id: Uuid) -> Option<&str> {
        self.names_by_id.get(&topic_id).map(String::as_str)
    }

    /// The id of `topic` (`Uuid::nil()` if unknown).
    #[must_use]
    pub fn topic_id(&self, topic: &str) -> Uuid {
        self.topics.get(topic).map_or(Uuid::nil(), |t| t.topic_id)
    }

    /// The hosted partition.
    #[must_use]
    pub fn get(&self, topic: &str, partition_index: i32) -> Option<&Partition> {
        self.partitions.get(&(topic.to_string(), partition_index))
    }

    /// The hosted partition, or why there is none (Kafka's `getPartitionOrException`).
    ///
    /// # Errors
    /// [`PartitionError::NotLeaderOrFollower`] if the metadata has it but it is not hosted
    /// here; [`PartitionError::UnknownTopicOrPartition`] otherwise.
    pub fn get_mut(
        &mut self,
        topic: &str,
        partition_index: i32,
    ) -> Result<&mut Partition, PartitionError> {
        let known = self
            .topics
            .get(topic)
            .is_some_and(|t| (0..t.partition_count).contains(&partition_index));
        match self
            .partitions
            .get_mut(&(topic.to_string(), partition_index))
        {
            Some(p) => Ok(p),
            None if known => Err(PartitionError::NotLeaderOrFollower),
            None => Err(PartitionError::UnknownTopicOrPartition),
        }
    }
}
