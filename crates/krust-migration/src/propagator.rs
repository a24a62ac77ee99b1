//! The propagator: the LeaderAndIsr / UpdateMetadata / StopReplica requests a KRaft controller
//! sends to ZooKeeper-mode brokers while the migration dual-writes (KIP-866; facts §6.11).
//!
//! Kafka 3.9's `MigrationPropagator` reuses the ZooKeeper controller's request batching
//! (`AbstractControllerBrokerRequestBatch` in `ControllerChannelManager.scala`, driven by a
//! `MigrationControllerChannelContext` over the image). Here the same rules are pure functions:
//! an image (or a delta and the image after it) in, the requests out, in the order Kafka queues
//! them. Sending, retries and responses belong to the caller.
//!
//! # The rules (Kafka 3.9)
//!
//! - **Who receives.** Requests are queued for brokers of the image, but only the controller
//!   channel's members get them: registered brokers with `isMigratingZkBroker` that are not
//!   fenced (`MigrationPropagator.publishMetadata`). Everything else is dropped, as Kafka's
//!   `ControllerChannelManager.sendRequest` drops a request for a broker it does not know.
//! - **From an image** ([`requests_for_image`]; entering dual-write, or a snapshot while
//!   dual-writing): batch 1 = UpdateMetadata with every partition to every ZK broker (type
//!   UNKNOWN); batch 2 (type FULL) = LeaderAndIsr with `isNew = true` for every partition to its
//!   replicas, which also queues UpdateMetadata with those partitions to every registered
//!   broker. No StopReplica: an image does not say what a broker hosts but should not.
//! - **From a delta** ([`requests_for_delta`]): batch 1 (type UNKNOWN) = UpdateMetadata with
//!   every partition to ZK brokers whose registration changed and is unfenced ("new" brokers),
//!   and, if any registration changed at all, UpdateMetadata (no partitions, live brokers only)
//!   to the other ZK brokers. Batch 2 (type INCREMENTAL): new brokers get LeaderAndIsr for
//!   every partition they host; a topic change or deletion sends UpdateMetadata to the other ZK
//!   brokers; each partition of a deleted topic gets StopReplica(`deletePartition`, leader
//!   epoch -2) to its replicas and an UpdateMetadata entry with the "being deleted" marker
//!   (leader -2, leader epoch 0, partition epoch 0, request-level ZK controller epoch); each
//!   changed partition gets LeaderAndIsr (`isNew = true`) to its replicas, and StopReplica
//!   (`deletePartition`) to replicas a reassignment removed.
//! - **Within a batch** one LeaderAndIsr, one UpdateMetadata and one StopReplica at most go to
//!   each broker, in that order (all LeaderAndIsr first, then UpdateMetadata, then StopReplica).
//!   A partition queued twice keeps the last state (`isNew` and `deletePartition` are sticky).
//!   Every UpdateMetadata of a batch carries the same partitions and the same live brokers
//!   (every registered broker, fenced or not, KRaft or ZK).
//! - **Fields.** `controllerId` = the KRaft node id, `isKRaftController = true`,
//!   `controllerEpoch` = the ZooKeeper controller epoch the KRaft controller claimed, broker
//!   epochs from the registrations. A partition state's own `controllerEpoch` is the leader
//!   epoch of the image's last record (`image.highestOffsetAndEpoch().epoch()`), except in the
//!   deletion marker. Live leaders of a LeaderAndIsr are given on the controller's
//!   `inter.broker.listener.name`.
//! - **Versions** follow the image's `metadata.version`, as Kafka's batch reads it from the
//!   image (not a separate parameter): see [`request_versions`].
//!
//! Kafka quirk kept on purpose: the `OfflineReplicas` of a deletion marker lists the replicas
//! whose broker *is* registered (`MigrationPropagator` filters with `isReplicaOnline` and names
//! the result `offlineReplicas`). A ZK broker drops the partition on the marker either way.
//!
//! Orders Kafka leaves to hash maps (brokers, topics, partitions) are sorted here, so the output
//! is deterministic.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::leader_and_isr_request::{
    LeaderAndIsrLiveLeader, LeaderAndIsrPartitionState, LeaderAndIsrTopicState,
};
use kafka_protocol::messages::stop_replica_request::{
    StopReplicaPartitionState, StopReplicaTopicState,
};
use kafka_protocol::messages::update_metadata_request::{
    UpdateMetadataBroker, UpdateMetadataEndpoint, UpdateMetadataPartitionState,
    UpdateMetadataTopicState,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, LeaderAndIsrRequest, StopReplicaRequest, TopicName, UpdateMetadataRequest,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use krust_metadata::image::cluster::BrokerRegistration;
use krust_metadata::image::topics::{PartitionRegistration, TopicPartition};
use krust_metadata::image::{MetadataDelta, MetadataImage};
use krust_metadata::metadata_version::MetadataVersion;
use uuid::Uuid;

/// `LeaderAndIsr.LeaderDuringDelete`: the leader of a partition whose topic is being deleted.
pub const LEADER_DURING_DELETE: i32 = -2;
/// `LeaderAndIsr.EpochDuringDelete`: the StopReplica leader epoch of a deleted topic.
pub const EPOCH_DURING_DELETE: i32 = -2;
/// `LeaderAndIsr.NoEpoch`: the StopReplica leader epoch of a partition the image lacks.
pub const NO_EPOCH: i32 = -1;
/// `LeaderAndIsr.InitialLeaderEpoch` / `InitialPartitionEpoch`: the epochs of a deletion marker.
const INITIAL_EPOCH: i32 = 0;

/// What the propagator needs besides the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropagatorContext {
    /// The KRaft controller's `node.id` (requests' `ControllerId`).
    pub controller_id: i32,
    /// The ZooKeeper controller epoch the KRaft controller claimed (`/controller_epoch`).
    pub zk_controller_epoch: i32,
    /// The controller's `inter.broker.listener.name`: the listener of a LeaderAndIsr's live
    /// leaders (the ZK brokers' inter-broker listener).
    pub inter_broker_listener_name: String,
}

/// `AbstractControlRequest.Type`: how a LeaderAndIsr (v5+) or UpdateMetadata (v8+) relates to
/// the broker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateType {
    /// 0: what a ZooKeeper controller sends.
    Unknown,
    /// 1: changes only.
    Incremental,
    /// 2: everything the broker should know (a FULL UpdateMetadata is authoritative; a FULL
    /// LeaderAndIsr lets the broker find stray replicas).
    Full,
}

impl UpdateType {
    /// The wire value.
    #[must_use]
    pub fn value(self) -> i8 {
        match self {
            Self::Unknown => 0,
            Self::Incremental => 1,
            Self::Full => 2,
        }
    }
}

/// One request, as the `kafka-protocol` message.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerRequest {
    /// UpdateMetadata (API key 6).
    UpdateMetadata(UpdateMetadataRequest),
    /// LeaderAndIsr (API key 4).
    LeaderAndIsr(LeaderAndIsrRequest),
    /// StopReplica (API key 5).
    StopReplica(StopReplicaRequest),
}

impl BrokerRequest {
    /// The request's API key.
    #[must_use]
    pub fn api_key(&self) -> ApiKey {
        match self {
            Self::UpdateMetadata(_) => ApiKey::UpdateMetadata,
            Self::LeaderAndIsr(_) => ApiKey::LeaderAndIsr,
            Self::StopReplica(_) => ApiKey::StopReplica,
        }
    }
}

/// A request for one broker, with the version it must be sent at.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingRequest {
    /// The receiving broker.
    pub broker_id: i32,
    /// The request version ([`request_versions`]).
    pub version: i16,
    /// The request.
    pub request: BrokerRequest,
}

impl OutgoingRequest {
    /// The request body encoded at [`Self::version`] (no request header).
    ///
    /// # Errors
    /// [`PropagatorError::Encode`] if the message does not fit the version (a bug here).
    pub fn encode_body(&self) -> Result<Vec<u8>, PropagatorError> {
        let mut buf = Vec::new();
        let encoded = match &self.request {
            BrokerRequest::UpdateMetadata(r) => r.encode(&mut buf, self.version),
            BrokerRequest::LeaderAndIsr(r) => r.encode(&mut buf, self.version),
            BrokerRequest::StopReplica(r) => r.encode(&mut buf, self.version),
        };
        encoded.map_err(|e| PropagatorError::Encode {
            api_key: self.request.api_key() as i16,
            version: self.version,
            reason: e.to_string(),
        })?;
        Ok(buf)
    }
}

/// Why no requests could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropagatorError {
    /// A partition leader's registration has no endpoint on the inter-broker listener, so it
    /// cannot be named as a live leader (Kafka fails the whole batch with
    /// `BrokerEndPointNotAvailableException`). Remedy: the brokers must register the listener
    /// named by the controller's `inter.broker.listener.name`.
    #[error("broker {broker_id} has no endpoint for the inter-broker listener {listener}")]
    LeaderWithoutListener {
        /// The leader.
        broker_id: i32,
        /// The listener asked for.
        listener: String,
    },
    /// A request could not be encoded at its version.
    #[error("request (API key {api_key}) does not encode at version {version}: {reason}")]
    Encode {
        /// The API key.
        api_key: i16,
        /// The version.
        version: i16,
        /// What the encoder said.
        reason: String,
    },
}

/// The request versions Kafka 3.9's controller picks for a `metadata.version`
/// (`AbstractControllerBrokerRequestBatch.send*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestVersions {
    /// 7 from 3.4-IV0 (`isKRaftController`), 6 from 3.2-IV0 (`LeaderRecoveryState`), else 5.
    pub leader_and_isr: i16,
    /// 8 from 3.4-IV0 (`isKRaftController`, `Type`), else 7.
    pub update_metadata: i16,
    /// 4 from 3.4-IV0 (`isKRaftController`), else 3.
    pub stop_replica: i16,
}

/// See [`RequestVersions`]. Every KRaft `metadata.version` is at least 3.0-IV1, past 2.8-IV1, so
/// the grouped-by-topic forms (LeaderAndIsr v2+, UpdateMetadata v5+, StopReplica v3+) and topic
/// ids (LeaderAndIsr v5+, UpdateMetadata v7+) are always used.
#[must_use]
pub fn request_versions(metadata_version: MetadataVersion) -> RequestVersions {
    let v3_4 = metadata_version >= MetadataVersion::IBP_3_4_IV0;
    RequestVersions {
        leader_and_isr: if v3_4 {
            7
        } else if metadata_version >= MetadataVersion::IBP_3_2_IV0 {
            6
        } else {
            5
        },
        update_metadata: if v3_4 { 8 } else { 7 },
        stop_replica: if v3_4 { 4 } else { 3 },
    }
}

/// The requests that bring every ZK broker up to `image` (`sendRPCsToBrokersFromMetadataImage`).
///
/// # Errors
/// [`PropagatorError::LeaderWithoutListener`].
pub fn requests_for_image(
    image: &MetadataImage,
    ctx: &PropagatorContext,
) -> Result<Vec<OutgoingRequest>, PropagatorError> {
    let partitions = all_partitions(image);
    let zk_brokers: Vec<i32> = zk_broker_ids(image).collect();
    let mut out = Vec::new();

    let mut batch = Batch::new(image, ctx);
    batch.add_update_metadata_for_partitions(&zk_brokers, partitions.iter().map(|(tp, _)| tp));
    batch.send(&mut out)?;

    let mut batch = Batch::new(image, ctx);
    batch.update_type = UpdateType::Full;
    for (tp, partition) in &partitions {
        batch.add_leader_and_isr(&partition.replicas, tp, true);
    }
    batch.send(&mut out)?;
    Ok(out)
}

/// The requests for the changes of `delta`, `image` being the image after it
/// (`sendRPCsToBrokersFromMetadataDelta`).
///
/// # Errors
/// [`PropagatorError::LeaderWithoutListener`].
pub fn requests_for_delta(
    delta: &MetadataDelta,
    image: &MetadataImage,
    ctx: &PropagatorContext,
) -> Result<Vec<OutgoingRequest>, PropagatorError> {
    let previous = delta.image();
    let changed_brokers = delta.cluster_delta().map(|c| c.changed_brokers());
    // Brokers whose registration changed into an unfenced ZK broker: they get everything.
    let new_zk_brokers: BTreeSet<i32> = changed_brokers
        .into_iter()
        .flatten()
        .filter_map(|(id, registration)| {
            registration
                .as_ref()
                .filter(|r| r.is_migrating_zk_broker && !r.fenced)
                .map(|_| *id)
        })
        .collect();
    let old_zk_brokers: Vec<i32> = zk_broker_ids(image)
        .filter(|id| !new_zk_brokers.contains(id))
        .collect();
    let brokers_changed = changed_brokers.is_some_and(|c| !c.is_empty());
    let new_zk_brokers: Vec<i32> = new_zk_brokers.into_iter().collect();
    let mut out = Vec::new();

    // Batch 1: who is alive, before anything that depends on it.
    let mut batch = Batch::new(image, ctx);
    if !new_zk_brokers.is_empty() {
        let partitions = all_partitions(image);
        batch.add_update_metadata_for_partitions(
            &new_zk_brokers,
            partitions.iter().map(|(tp, _)| tp),
        );
    }
    if brokers_changed {
        batch.add_update_metadata_brokers(&old_zk_brokers);
    }
    batch.send(&mut out)?;

    // Batch 2: partitions.
    let mut batch = Batch::new(image, ctx);
    batch.update_type = UpdateType::Incremental;
    if !new_zk_brokers.is_empty() {
        for (tp, partition) in all_partitions(image) {
            let hosts: Vec<i32> = partition
                .replicas
                .iter()
                .copied()
                .filter(|r| new_zk_brokers.contains(r))
                .collect();
            if !hosts.is_empty() {
                batch.add_leader_and_isr(&hosts, &tp, true);
            }
        }
    }
    let Some(topics) = delta.topics_delta() else {
        batch.send(&mut out)?;
        return Ok(out);
    };
    if !topics.deleted_topic_ids().is_empty() || !topics.changed_topics().is_empty() {
        batch.add_update_metadata_brokers(&old_zk_brokers);
    }
    for id in topics.deleted_topic_ids() {
        let Some(topic) = previous.topics.topic(*id) else {
            continue;
        };
        for (partition_id, partition) in &topic.partitions {
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: *partition_id,
            };
            // Kafka's `offlineReplicas` here are the replicas whose broker is registered.
            let marked: Vec<i32> = partition
                .replicas
                .iter()
                .copied()
                .filter(|r| image.cluster.brokers.contains_key(r))
                .collect();
            batch.add_stop_replica(&partition.replicas, &tp, true);
            let marker = UpdateMetadataPartitionState::default()
                .with_partition_index(tp.partition)
                .with_controller_epoch(ctx.zk_controller_epoch)
                .with_leader(BrokerId(LEADER_DURING_DELETE))
                .with_leader_epoch(INITIAL_EPOCH)
                .with_isr(broker_ids(&partition.isr))
                .with_zk_version(INITIAL_EPOCH)
                .with_replicas(broker_ids(&partition.replicas))
                .with_offline_replicas(broker_ids(&marked));
            batch.add_update_metadata_state(&old_zk_brokers, tp, marker);
        }
    }
    for topic in topics.changed_topics().values() {
        for (partition_id, partition) in topic.partition_changes() {
            let tp = TopicPartition {
                topic: topic.name().to_owned(),
                partition: *partition_id,
            };
            batch.add_leader_and_isr(&partition.replicas, &tp, true);
            let removed: Vec<i32> = previous
                .topics
                .partition(topic.id(), *partition_id)
                .map(|old| {
                    let mut removed: Vec<i32> = old
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| !partition.replicas.contains(r))
                        .collect();
                    removed.sort_unstable();
                    removed.dedup();
                    removed
                })
                .unwrap_or_default();
            if !removed.is_empty() {
                batch.add_stop_replica(&removed, &tp, true);
            }
        }
    }
    batch.send(&mut out)?;
    Ok(out)
}

/// Every partition of the image, by topic name then index.
fn all_partitions(image: &MetadataImage) -> Vec<(TopicPartition, &PartitionRegistration)> {
    image
        .topics
        .by_name
        .iter()
        .flat_map(|(name, topic)| {
            topic.partitions.iter().map(move |(id, partition)| {
                (
                    TopicPartition {
                        topic: name.clone(),
                        partition: *id,
                    },
                    partition.as_ref(),
                )
            })
        })
        .collect()
}

/// Registered ZK brokers, fenced or not.
fn zk_broker_ids(image: &MetadataImage) -> impl Iterator<Item = i32> + '_ {
    image
        .cluster
        .brokers
        .values()
        .filter(|b| b.is_migrating_zk_broker)
        .map(|b| b.id)
}

fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// One batch of `AbstractControllerBrokerRequestBatch`, over the image as
/// `MigrationControllerChannelContext` sees it.
struct Batch<'a> {
    image: &'a MetadataImage,
    ctx: &'a PropagatorContext,
    update_type: UpdateType,
    leader_and_isr: BTreeMap<i32, BTreeMap<TopicPartition, LeaderAndIsrPartitionState>>,
    stop_replica: BTreeMap<i32, BTreeMap<TopicPartition, StopReplicaPartitionState>>,
    update_metadata_brokers: BTreeSet<i32>,
    update_metadata_partitions: BTreeMap<TopicPartition, UpdateMetadataPartitionState>,
}

impl<'a> Batch<'a> {
    fn new(image: &'a MetadataImage, ctx: &'a PropagatorContext) -> Self {
        Self {
            image,
            ctx,
            update_type: UpdateType::Unknown,
            leader_and_isr: BTreeMap::new(),
            stop_replica: BTreeMap::new(),
            update_metadata_brokers: BTreeSet::new(),
            update_metadata_partitions: BTreeMap::new(),
        }
    }

    fn partition(&self, tp: &TopicPartition) -> Option<&'a PartitionRegistration> {
        let image: &'a MetadataImage = self.image;
        image
            .topics
            .topic_by_name(&tp.topic)
            .and_then(|topic| topic.partitions.get(&tp.partition))
            .map(AsRef::as_ref)
    }

    /// The partition state's controller epoch: the leader epoch of the image's last record.
    fn image_epoch(&self) -> i32 {
        self.image.provenance.last_contained_epoch
    }

    /// `addLeaderAndIsrRequestForBrokers`: the partition as the image has it, to `brokers`, and
    /// an UpdateMetadata entry for it to every registered broker.
    fn add_leader_and_isr(&mut self, brokers: &[i32], tp: &TopicPartition, is_new: bool) {
        let Some(partition) = self.partition(tp) else {
            return;
        };
        let mut state = LeaderAndIsrPartitionState::default()
            .with_partition_index(tp.partition)
            .with_controller_epoch(self.image_epoch())
            .with_leader(BrokerId(partition.leader))
            .with_leader_epoch(partition.leader_epoch)
            .with_isr(broker_ids(&partition.isr))
            .with_partition_epoch(partition.partition_epoch)
            .with_replicas(broker_ids(&partition.replicas))
            .with_adding_replicas(broker_ids(&partition.adding_replicas))
            .with_removing_replicas(broker_ids(&partition.removing_replicas));
        if self.image.metadata_version() >= MetadataVersion::IBP_3_2_IV0 {
            state = state.with_leader_recovery_state(partition.leader_recovery_state.value());
        }
        for broker in brokers.iter().copied().filter(|b| *b >= 0) {
            let states = self.leader_and_isr.entry(broker).or_default();
            let already_new = states.get(tp).is_some_and(|s| s.is_new);
            states.insert(tp.clone(), state.clone().with_is_new(is_new || already_new));
        }
        let registered: Vec<i32> = self.image.cluster.brokers.keys().copied().collect();
        self.add_update_metadata_for_partitions(&registered, std::iter::once(tp));
    }

    /// `addStopReplicaRequestForBrokers`.
    fn add_stop_replica(&mut self, brokers: &[i32], tp: &TopicPartition, delete: bool) {
        let leader_epoch = if self.image.topics.topic_by_name(&tp.topic).is_none() {
            EPOCH_DURING_DELETE
        } else {
            self.partition(tp).map_or(NO_EPOCH, |p| p.leader_epoch)
        };
        for broker in brokers.iter().copied().filter(|b| *b >= 0) {
            let states = self.stop_replica.entry(broker).or_default();
            let already_delete = states.get(tp).is_some_and(|s| s.delete_partition);
            states.insert(
                tp.clone(),
                StopReplicaPartitionState::default()
                    .with_partition_index(tp.partition)
                    .with_leader_epoch(leader_epoch)
                    .with_delete_partition(already_delete || delete),
            );
        }
    }

    /// `addUpdateMetadataRequestForBrokers(brokerIds)`: the brokers get this batch's
    /// UpdateMetadata, whatever partitions it ends up with.
    fn add_update_metadata_brokers(&mut self, brokers: &[i32]) {
        self.update_metadata_brokers
            .extend(brokers.iter().copied().filter(|b| *b >= 0));
    }

    /// `addUpdateMetadataRequestForBrokers(brokerIds, partitions)`: the partitions as the image
    /// has them (a partition the image lacks is skipped, as Kafka skips one without leadership
    /// info).
    fn add_update_metadata_for_partitions<'p>(
        &mut self,
        brokers: &[i32],
        partitions: impl Iterator<Item = &'p TopicPartition>,
    ) {
        self.add_update_metadata_brokers(brokers);
        for tp in partitions {
            let Some(partition) = self.partition(tp) else {
                continue;
            };
            let offline: Vec<i32> = partition
                .replicas
                .iter()
                .copied()
                .filter(|r| !self.image.cluster.brokers.contains_key(r))
                .collect();
            let state = UpdateMetadataPartitionState::default()
                .with_partition_index(tp.partition)
                .with_controller_epoch(self.image_epoch())
                .with_leader(BrokerId(partition.leader))
                .with_leader_epoch(partition.leader_epoch)
                .with_isr(broker_ids(&partition.isr))
                .with_zk_version(partition.partition_epoch)
                .with_replicas(broker_ids(&partition.replicas))
                .with_offline_replicas(broker_ids(&offline));
            self.update_metadata_partitions.insert(tp.clone(), state);
        }
    }

    /// `addUpdateMetadataRequestForBrokers(brokerIds, controllerEpoch, partition, …)`: an
    /// explicit state.
    fn add_update_metadata_state(
        &mut self,
        brokers: &[i32],
        tp: TopicPartition,
        state: UpdateMetadataPartitionState,
    ) {
        self.add_update_metadata_brokers(brokers);
        self.update_metadata_partitions.insert(tp, state);
    }

    fn registration(&self, broker: i32) -> Option<&'a BrokerRegistration> {
        let image: &'a MetadataImage = self.image;
        image.cluster.brokers.get(&broker).map(AsRef::as_ref)
    }

    /// Whether the controller channel has the broker: registered, a ZK broker, not fenced.
    fn in_channel(&self, broker: i32) -> bool {
        self.registration(broker)
            .is_some_and(|b| b.is_migrating_zk_broker && !b.fenced)
    }

    fn topic_id(&self, topic: &str) -> Uuid {
        self.image
            .topics
            .topic_by_name(topic)
            .map_or(Uuid::nil(), |t| t.id)
    }

    /// `sendRequestsToBrokers`: LeaderAndIsr, then UpdateMetadata, then StopReplica.
    fn send(self, out: &mut Vec<OutgoingRequest>) -> Result<(), PropagatorError> {
        let versions = request_versions(self.image.metadata_version());
        self.send_leader_and_isr(versions.leader_and_isr, out)?;
        self.send_update_metadata(versions.update_metadata, out);
        self.send_stop_replica(versions.stop_replica, out);
        Ok(())
    }

    fn send_leader_and_isr(
        &self,
        version: i16,
        out: &mut Vec<OutgoingRequest>,
    ) -> Result<(), PropagatorError> {
        for (broker, states) in &self.leader_and_isr {
            let Some(registration) = self.registration(*broker) else {
                continue;
            };
            let leader_ids: BTreeSet<i32> = states.values().map(|s| s.leader.0).collect();
            let mut live_leaders = Vec::new();
            for leader in self
                .image
                .cluster
                .brokers
                .values()
                .filter(|b| leader_ids.contains(&b.id))
            {
                let listener = &self.ctx.inter_broker_listener_name;
                let endpoint = leader.listeners.get(listener).ok_or_else(|| {
                    PropagatorError::LeaderWithoutListener {
                        broker_id: leader.id,
                        listener: listener.clone(),
                    }
                })?;
                live_leaders.push(
                    LeaderAndIsrLiveLeader::default()
                        .with_broker_id(BrokerId(leader.id))
                        .with_host_name(str_bytes(&endpoint.host))
                        .with_port(i32::from(endpoint.port)),
                );
            }
            if !self.in_channel(*broker) {
                continue;
            }
            let mut topics: BTreeMap<&str, LeaderAndIsrTopicState> = BTreeMap::new();
            for (tp, state) in states {
                topics
                    .entry(tp.topic.as_str())
                    .or_insert_with(|| {
                        LeaderAndIsrTopicState::default()
                            .with_topic_name(TopicName(str_bytes(&tp.topic)))
                            .with_topic_id(self.topic_id(&tp.topic))
                    })
                    .partition_states
                    .push(state.clone());
            }
            let mut request = LeaderAndIsrRequest::default()
                .with_controller_id(BrokerId(self.ctx.controller_id))
                .with_controller_epoch(self.ctx.zk_controller_epoch)
                .with_broker_epoch(registration.epoch)
                .with_type(self.update_type.value())
                .with_topic_states(topics.into_values().collect())
                .with_live_leaders(live_leaders);
            if version >= 7 {
                request = request.with_is_k_raft_controller(true);
            }
            out.push(OutgoingRequest {
                broker_id: *broker,
                version,
                request: BrokerRequest::LeaderAndIsr(request),
            });
        }
        Ok(())
    }

    fn send_update_metadata(&self, version: i16, out: &mut Vec<OutgoingRequest>) {
        let mut topics: BTreeMap<&str, UpdateMetadataTopicState> = BTreeMap::new();
        for (tp, state) in &self.update_metadata_partitions {
            topics
                .entry(tp.topic.as_str())
                .or_insert_with(|| {
                    UpdateMetadataTopicState::default()
                        .with_topic_name(TopicName(str_bytes(&tp.topic)))
                        .with_topic_id(self.topic_id(&tp.topic))
                })
                .partition_states
                .push(state.clone());
        }
        let topic_states: Vec<UpdateMetadataTopicState> = topics.into_values().collect();
        let live_brokers: Vec<UpdateMetadataBroker> = self
            .image
            .cluster
            .brokers
            .values()
            .map(|b| {
                let endpoints = b
                    .listeners
                    .iter()
                    .map(|(name, e)| {
                        UpdateMetadataEndpoint::default()
                            .with_port(i32::from(e.port))
                            .with_host(str_bytes(&e.host))
                            .with_listener(str_bytes(name))
                            .with_security_protocol(e.security_protocol)
                    })
                    .collect();
                UpdateMetadataBroker::default()
                    .with_id(BrokerId(b.id))
                    .with_endpoints(endpoints)
                    .with_rack(b.rack.as_deref().map(str_bytes))
            })
            .collect();
        for broker in &self.update_metadata_brokers {
            let Some(registration) = self.registration(*broker) else {
                continue;
            };
            if !self.in_channel(*broker) {
                continue;
            }
            let mut request = UpdateMetadataRequest::default()
                .with_controller_id(BrokerId(self.ctx.controller_id))
                .with_controller_epoch(self.ctx.zk_controller_epoch)
                .with_broker_epoch(registration.epoch)
                .with_topic_states(topic_states.clone())
                .with_live_brokers(live_brokers.clone());
            if version >= 8 {
                request = request
                    .with_is_k_raft_controller(true)
                    .with_type(self.update_type.value());
            }
            out.push(OutgoingRequest {
                broker_id: *broker,
                version,
                request: BrokerRequest::UpdateMetadata(request),
            });
        }
    }

    fn send_stop_replica(&self, version: i16, out: &mut Vec<OutgoingRequest>) {
        for (broker, states) in &self.stop_replica {
            let Some(registration) = self.registration(*broker) else {
                continue;
            };
            if !self.in_channel(*broker) {
                continue;
            }
            let mut topics: BTreeMap<&str, StopReplicaTopicState> = BTreeMap::new();
            for (tp, state) in states {
                topics
                    .entry(tp.topic.as_str())
                    .or_insert_with(|| {
                        StopReplicaTopicState::default()
                            .with_topic_name(TopicName(str_bytes(&tp.topic)))
                    })
                    .partition_states
                    .push(state.clone());
            }
            let mut request = StopReplicaRequest::default()
                .with_controller_id(BrokerId(self.ctx.controller_id))
                .with_controller_epoch(self.ctx.zk_controller_epoch)
                .with_broker_epoch(registration.epoch)
                .with_topic_states(topics.into_values().collect());
            if version >= 4 {
                request = request.with_is_k_raft_controller(true);
            }
            out.push(OutgoingRequest {
                broker_id: *broker,
                version,
                request: BrokerRequest::StopReplica(request),
            });
        }
    }
}
