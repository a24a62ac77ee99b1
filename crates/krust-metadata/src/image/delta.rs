//! `MetadataDelta`: records replayed on top of an image, then applied into the next image
//! (Kafka's `MetadataDelta`). Sub-deltas are created on first use; untouched sub-images are
//! shared by the next image, not copied.

use std::sync::Arc;

use thiserror::Error;
use uuid::Uuid;

use super::MetadataImage;
use super::MetadataProvenance;
use super::acls::AclsDelta;
use super::client_quotas::ClientQuotasDelta;
use super::cluster::ClusterDelta;
use super::configs::ConfigsDelta;
use super::delegation_tokens::DelegationTokensDelta;
use super::features::FeaturesDelta;
use super::producer_ids::ProducerIdsDelta;
use super::scram::ScramDelta;
use super::topics::{LocalReplicaChanges, TopicsDelta};
use crate::metadata_version::MetadataVersion;
use crate::records::MetadataRecord;

/// A record that does not fit the image it is replayed on. Kafka throws a `RuntimeException`;
/// the fault policy is the caller's (a controller stops; a broker counts the error and keeps
/// its last good image). A failed `replay` leaves the delta as it was before the call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplayError {
    /// A partition record, partition change or topic removal names a topic that does not exist
    /// (or was deleted earlier in the delta).
    #[error("no topic with id {topic_id}")]
    UnknownTopic {
        /// The topic id in the record.
        topic_id: Uuid,
    },
    /// A `PartitionChangeRecord` for a partition that was never created.
    #[error("unable to find partition {topic_id}:{partition_id}")]
    UnknownPartition {
        /// The topic id.
        topic_id: Uuid,
        /// The partition index.
        partition_id: i32,
    },
    /// A `TopicRecord` reuses a topic id (ids are never reused).
    #[error("topic id {topic_id} (name {name}) already exists")]
    DuplicateTopicId {
        /// The id.
        topic_id: Uuid,
        /// The name in the record.
        name: String,
    },
    /// A `TopicRecord` names a topic that exists under another id.
    #[error("topic {name} already exists with id {existing_id} (record id {new_id})")]
    DuplicateTopicName {
        /// The name.
        name: String,
        /// The id it has.
        existing_id: Uuid,
        /// The id in the record.
        new_id: Uuid,
    },
    /// A partition's directories do not match its replicas one to one.
    #[error(
        "partition {topic_id}:{partition_id} has {replicas} replicas but {directories} directories"
    )]
    ReplicaDirectoriesMismatch {
        /// The topic id.
        topic_id: Uuid,
        /// The partition index.
        partition_id: i32,
        /// Number of replicas.
        replicas: usize,
        /// Number of directories.
        directories: usize,
    },
    /// A `LeaderRecoveryState` other than 0 and 1 (or -1 for "no change").
    #[error("partition {topic_id}:{partition_id}: invalid leader recovery state {value}")]
    InvalidLeaderRecoveryState {
        /// The topic id.
        topic_id: Uuid,
        /// The partition index.
        partition_id: i32,
        /// The value found.
        value: i8,
    },
    /// A fence, unfence, change or unregister record for a broker that is not registered.
    #[error("Tried to {action} broker {broker_id}, but that broker was not registered.")]
    UnknownBroker {
        /// The broker id.
        broker_id: i32,
        /// `fence`, `unfence`, `change` or `unregister`.
        action: &'static str,
    },
    /// A broker record whose epoch is not the registration's.
    #[error(
        "Tried to {action} broker {broker_id}, but the given epoch, {record_epoch}, did not match the current broker epoch, {current_epoch}"
    )]
    BrokerEpochMismatch {
        /// The broker id.
        broker_id: i32,
        /// `fence`, `unfence`, `change` or `unregister`.
        action: &'static str,
        /// The epoch in the record.
        record_epoch: i64,
        /// The registered epoch.
        current_epoch: i64,
    },
    /// `BrokerRegistrationChangeRecord.Fenced` other than -1, 0, 1.
    #[error("broker {broker_id}: invalid fencing change {value}")]
    InvalidFencingChange {
        /// The broker id.
        broker_id: i32,
        /// The value found.
        value: i8,
    },
    /// `BrokerRegistrationChangeRecord.InControlledShutdown` other than 0, 1.
    #[error("broker {broker_id}: invalid in-controlled-shutdown change {value}")]
    InvalidControlledShutdownChange {
        /// The broker id.
        broker_id: i32,
        /// The value found.
        value: i8,
    },
    /// A `metadata.version` FeatureLevelRecord with a level Kafka 3.9 does not know.
    #[error("No MetadataVersion with feature level {feature_level}")]
    UnknownMetadataVersion {
        /// The level found.
        feature_level: i16,
    },
    /// A `ZkMigrationStateRecord` value other than 0–3.
    #[error("unknown ZooKeeper migration state {value}")]
    UnknownZkMigrationState {
        /// The value found.
        value: i8,
    },
    /// A `RemoveAccessControlEntryRecord` for an ACL that does not exist.
    #[error("Failed to find existing ACL with ID {id} in either image or changes")]
    UnknownAcl {
        /// The ACL id.
        id: Uuid,
    },
}

/// Runs `f` on the sub-delta in `slot`, creating it first if needed; a sub-delta created for a
/// record that then fails is dropped again, so a failed replay changes nothing.
fn with_delta<D, T>(
    slot: &mut Option<D>,
    create: impl FnOnce() -> D,
    f: impl FnOnce(&mut D) -> Result<T, ReplayError>,
) -> Result<T, ReplayError> {
    let created = slot.is_none();
    let delta = slot.get_or_insert_with(create);
    let result = f(delta);
    if result.is_err() && created {
        *slot = None;
    }
    result
}

/// Records replayed on top of `image`. `apply` builds the next image; the delta itself tells
/// publishers what changed.
///
/// ```
/// # use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance};
/// # use krust_metadata::records::{MetadataRecord, TopicRecord};
/// let image = MetadataImage::default();
/// let mut delta = MetadataDelta::new(&image);
/// let id = uuid::Uuid::from_u64_pair(1, 1);
/// delta.replay(&MetadataRecord::Topic(TopicRecord { name: "t".into(), topic_id: id, ..Default::default() }))?;
/// let next = delta.apply(MetadataProvenance::new(0, 1, 1_000));
/// assert!(next.topics.topic_by_name("t").is_some());
/// assert!(image.topics.by_id.is_empty()); // the old image is untouched
/// # Ok::<(), krust_metadata::image::ReplayError>(())
/// ```
#[derive(Debug, Clone)]
pub struct MetadataDelta {
    image: MetadataImage,
    /// Loading a whole snapshot on top of `image` (see [`MetadataDelta::new_snapshot`]).
    snapshot: bool,
    features: Option<FeaturesDelta>,
    cluster: Option<ClusterDelta>,
    topics: Option<TopicsDelta>,
    configs: Option<ConfigsDelta>,
    client_quotas: Option<ClientQuotasDelta>,
    producer_ids: Option<ProducerIdsDelta>,
    acls: Option<AclsDelta>,
    scram: Option<ScramDelta>,
    delegation_tokens: Option<DelegationTokensDelta>,
}

impl MetadataDelta {
    /// An empty delta on top of `image` (a cheap clone).
    #[must_use]
    pub fn new(image: &MetadataImage) -> Self {
        Self {
            image: image.clone(),
            snapshot: false,
            features: None,
            cluster: None,
            topics: None,
            configs: None,
            client_quotas: None,
            producer_ids: None,
            acls: None,
            scram: None,
            delegation_tokens: None,
        }
    }

    /// A delta that loads a whole snapshot on top of `image` (a node that fell behind the log
    /// start fetched one): replay every snapshot record, then call
    /// [`Self::finish_snapshot`], which removes whatever the snapshot did not hold. Publishers
    /// then see the difference between `image` and the snapshot as one delta (Kafka's
    /// `MetadataDelta.finishSnapshot`). A topic the snapshot names again is replaced whole.
    #[must_use]
    pub fn new_snapshot(image: &MetadataImage) -> Self {
        Self {
            snapshot: true,
            ..Self::new(image)
        }
    }

    /// Ends a snapshot load begun with [`Self::new_snapshot`]: every topic, registration,
    /// config, quota, ACL, credential, token and feature level of the starting image that the
    /// snapshot did not replay is removed.
    ///
    /// # Panics
    /// If the delta was not made by [`Self::new_snapshot`]: on a log delta this would delete
    /// everything the delta did not touch, so it is a programming error.
    pub fn finish_snapshot(&mut self) {
        assert!(
            self.snapshot,
            "finish_snapshot on a delta that is not a snapshot load"
        );
        let image = &self.image;
        self.features
            .get_or_insert_with(|| FeaturesDelta::new(Arc::clone(&image.features)))
            .finish_snapshot();
        self.cluster
            .get_or_insert_with(|| ClusterDelta::new(Arc::clone(&image.cluster)))
            .finish_snapshot();
        self.topics
            .get_or_insert_with(|| TopicsDelta::new(Arc::clone(&image.topics), true))
            .finish_snapshot();
        self.configs
            .get_or_insert_with(|| ConfigsDelta::new(Arc::clone(&image.configs)))
            .finish_snapshot();
        self.client_quotas
            .get_or_insert_with(|| ClientQuotasDelta::new(Arc::clone(&image.client_quotas)))
            .finish_snapshot();
        let replayed_producer_ids = self.producer_ids.is_some();
        self.producer_ids
            .get_or_insert_with(|| ProducerIdsDelta::new(&image.producer_ids))
            .finish_snapshot(replayed_producer_ids);
        self.acls
            .get_or_insert_with(|| AclsDelta::new(Arc::clone(&image.acls)))
            .finish_snapshot();
        self.scram
            .get_or_insert_with(|| ScramDelta::new(Arc::clone(&image.scram)))
            .finish_snapshot();
        self.delegation_tokens
            .get_or_insert_with(|| DelegationTokensDelta::new(Arc::clone(&image.delegation_tokens)))
            .finish_snapshot();
    }

    /// The image this delta started from.
    #[must_use]
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// `metadata.version` as of this delta.
    #[must_use]
    pub fn metadata_version(&self) -> MetadataVersion {
        self.features
            .as_ref()
            .and_then(FeaturesDelta::metadata_version_change)
            .unwrap_or(self.image.features.metadata_version)
    }

    /// Feature changes, if any record touched features.
    #[must_use]
    pub fn features_delta(&self) -> Option<&FeaturesDelta> {
        self.features.as_ref()
    }
    /// Registration changes, if any.
    #[must_use]
    pub fn cluster_delta(&self) -> Option<&ClusterDelta> {
        self.cluster.as_ref()
    }
    /// Topic changes, if any.
    #[must_use]
    pub fn topics_delta(&self) -> Option<&TopicsDelta> {
        self.topics.as_ref()
    }
    /// Config changes, if any.
    #[must_use]
    pub fn configs_delta(&self) -> Option<&ConfigsDelta> {
        self.configs.as_ref()
    }
    /// Quota changes, if any.
    #[must_use]
    pub fn client_quotas_delta(&self) -> Option<&ClientQuotasDelta> {
        self.client_quotas.as_ref()
    }
    /// Producer id block change, if any.
    #[must_use]
    pub fn producer_ids_delta(&self) -> Option<&ProducerIdsDelta> {
        self.producer_ids.as_ref()
    }
    /// ACL changes, if any.
    #[must_use]
    pub fn acls_delta(&self) -> Option<&AclsDelta> {
        self.acls.as_ref()
    }
    /// SCRAM credential changes, if any.
    #[must_use]
    pub fn scram_delta(&self) -> Option<&ScramDelta> {
        self.scram.as_ref()
    }
    /// Delegation token changes, if any.
    #[must_use]
    pub fn delegation_tokens_delta(&self) -> Option<&DelegationTokensDelta> {
        self.delegation_tokens.as_ref()
    }

    /// The partitions `broker_id` now leads, follows or must delete
    /// (see [`TopicsDelta::local_changes`]); empty when no topic changed.
    #[must_use]
    pub fn local_changes(&self, broker_id: i32) -> LocalReplicaChanges {
        self.topics
            .as_ref()
            .map(|topics| topics.local_changes(broker_id))
            .unwrap_or_default()
    }

    /// Replays one record. `NoOpRecord` and the transaction markers change nothing here:
    /// the loader decides what to publish around a transaction (facts §3.3, KIP-868).
    ///
    /// # Errors
    /// A [`ReplayError`] when the record does not fit; the delta is then unchanged.
    pub fn replay(&mut self, record: &MetadataRecord) -> Result<(), ReplayError> {
        let image = &self.image;
        let snapshot = self.snapshot;
        match record {
            MetadataRecord::FeatureLevel(r) => with_delta(
                &mut self.features,
                || FeaturesDelta::new(Arc::clone(&image.features)),
                |d| d.replay_feature_level(r),
            ),
            MetadataRecord::ZkMigrationState(r) => with_delta(
                &mut self.features,
                || FeaturesDelta::new(Arc::clone(&image.features)),
                |d| d.replay_zk_migration_state(r),
            ),
            MetadataRecord::RegisterBroker(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| {
                    d.replay_register_broker(r);
                    Ok(())
                },
            ),
            MetadataRecord::UnregisterBroker(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| d.replay_unregister_broker(r),
            ),
            MetadataRecord::FenceBroker(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| d.replay_fence(r),
            ),
            MetadataRecord::UnfenceBroker(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| d.replay_unfence(r),
            ),
            MetadataRecord::BrokerRegistrationChange(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| d.replay_registration_change(r),
            ),
            MetadataRecord::RegisterController(r) => with_delta(
                &mut self.cluster,
                || ClusterDelta::new(Arc::clone(&image.cluster)),
                |d| {
                    d.replay_register_controller(r);
                    Ok(())
                },
            ),
            MetadataRecord::Topic(r) => with_delta(
                &mut self.topics,
                || TopicsDelta::new(Arc::clone(&image.topics), snapshot),
                |d| d.replay_topic(r),
            ),
            MetadataRecord::Partition(r) => with_delta(
                &mut self.topics,
                || TopicsDelta::new(Arc::clone(&image.topics), snapshot),
                |d| d.replay_partition(r),
            ),
            MetadataRecord::PartitionChange(r) => with_delta(
                &mut self.topics,
                || TopicsDelta::new(Arc::clone(&image.topics), snapshot),
                |d| d.replay_partition_change(r),
            ),
            MetadataRecord::RemoveTopic(r) => {
                let name = with_delta(
                    &mut self.topics,
                    || TopicsDelta::new(Arc::clone(&image.topics), snapshot),
                    |d| d.replay_remove_topic(r),
                )?;
                // A deleted topic takes its configs with it (Kafka's MetadataDelta).
                self.configs
                    .get_or_insert_with(|| ConfigsDelta::new(Arc::clone(&image.configs)))
                    .delete_topic_configs(&name);
                Ok(())
            }
            MetadataRecord::Config(r) => {
                self.configs
                    .get_or_insert_with(|| ConfigsDelta::new(Arc::clone(&image.configs)))
                    .replay_config(r);
                Ok(())
            }
            MetadataRecord::ClientQuota(r) => {
                self.client_quotas
                    .get_or_insert_with(|| ClientQuotasDelta::new(Arc::clone(&image.client_quotas)))
                    .replay(r);
                Ok(())
            }
            MetadataRecord::ProducerIds(r) => {
                self.producer_ids
                    .get_or_insert_with(|| ProducerIdsDelta::new(&image.producer_ids))
                    .replay(r);
                Ok(())
            }
            MetadataRecord::AccessControlEntry(r) => {
                self.acls
                    .get_or_insert_with(|| AclsDelta::new(Arc::clone(&image.acls)))
                    .replay_add(r);
                Ok(())
            }
            MetadataRecord::RemoveAccessControlEntry(r) => with_delta(
                &mut self.acls,
                || AclsDelta::new(Arc::clone(&image.acls)),
                |d| d.replay_remove(r),
            ),
            MetadataRecord::UserScramCredential(r) => {
                self.scram
                    .get_or_insert_with(|| ScramDelta::new(Arc::clone(&image.scram)))
                    .replay_add(r);
                Ok(())
            }
            MetadataRecord::RemoveUserScramCredential(r) => {
                self.scram
                    .get_or_insert_with(|| ScramDelta::new(Arc::clone(&image.scram)))
                    .replay_remove(r);
                Ok(())
            }
            MetadataRecord::DelegationToken(r) => {
                self.delegation_tokens
                    .get_or_insert_with(|| {
                        DelegationTokensDelta::new(Arc::clone(&image.delegation_tokens))
                    })
                    .replay_add(r);
                Ok(())
            }
            MetadataRecord::RemoveDelegationToken(r) => {
                self.delegation_tokens
                    .get_or_insert_with(|| {
                        DelegationTokensDelta::new(Arc::clone(&image.delegation_tokens))
                    })
                    .replay_remove(r);
                Ok(())
            }
            MetadataRecord::NoOp(_)
            | MetadataRecord::BeginTransaction(_)
            | MetadataRecord::EndTransaction(_)
            | MetadataRecord::AbortTransaction(_) => Ok(()),
        }
    }

    /// The image after this delta, as of `provenance`. Sub-images no record touched are the
    /// same `Arc`s as in the starting image.
    #[must_use]
    pub fn apply(&self, provenance: MetadataProvenance) -> MetadataImage {
        fn next<D, I>(delta: Option<&D>, image: &Arc<I>, apply: impl Fn(&D) -> I) -> Arc<I> {
            delta.map_or_else(|| Arc::clone(image), |d| Arc::new(apply(d)))
        }
        let image = &self.image;
        MetadataImage {
            provenance,
            features: next(
                self.features.as_ref(),
                &image.features,
                FeaturesDelta::apply,
            ),
            cluster: next(self.cluster.as_ref(), &image.cluster, ClusterDelta::apply),
            topics: next(self.topics.as_ref(), &image.topics, TopicsDelta::apply),
            configs: next(self.configs.as_ref(), &image.configs, ConfigsDelta::apply),
            client_quotas: next(
                self.client_quotas.as_ref(),
                &image.client_quotas,
                ClientQuotasDelta::apply,
            ),
            producer_ids: next(
                self.producer_ids.as_ref(),
                &image.producer_ids,
                ProducerIdsDelta::apply,
            ),
            acls: next(self.acls.as_ref(), &image.acls, AclsDelta::apply),
            scram: next(self.scram.as_ref(), &image.scram, ScramDelta::apply),
            delegation_tokens: next(
                self.delegation_tokens.as_ref(),
                &image.delegation_tokens,
                DelegationTokensDelta::apply,
            ),
        }
    }
}
