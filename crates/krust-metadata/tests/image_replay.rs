//! Replay of each metadata record type into a `MetadataDelta`, checked against Kafka 3.9's image
//! semantics (`org.apache.kafka.image.*Delta`): what each record does, what the delta reports
//! as changed, and that a record that does not fit is a typed error leaving the delta and the
//! previous image as they were.

use std::sync::Arc;

use krust_metadata::image::cluster::VersionRange;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::image::topics::{LeaderRecoveryState, TopicPartition, directory_id};
use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance, ReplayError};
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::*;
use uuid::Uuid;

fn topic_id(n: u64) -> Uuid {
    Uuid::from_u64_pair(0xaaaa, n)
}

fn topic(name: &str, n: u64) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: topic_id(n),
        ..Default::default()
    })
}

fn partition(n: u64, partition_id: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        partition_id,
        topic_id: topic_id(n),
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader,
        leader_recovery_state: 0,
        leader_epoch: 0,
        partition_epoch: 0,
        directories: Vec::new(),
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: Vec::new(),
    })
}

fn change(n: u64, partition_id: i32) -> PartitionChangeRecord {
    PartitionChangeRecord {
        partition_id,
        topic_id: topic_id(n),
        ..Default::default()
    }
}

fn broker(id: i32, epoch: i64) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: false,
        incarnation_id: Uuid::from_u64_pair(0xbbbb, id as u64),
        broker_epoch: epoch,
        end_points: vec![RegistrationEndpoint {
            name: "PLAINTEXT".into(),
            host: "localhost".into(),
            port: 9092 + id as u16,
            security_protocol: 0,
            unknown_tagged_fields: Vec::new(),
        }],
        features: vec![RegistrationFeature {
            name: "metadata.version".into(),
            min_supported_version: 1,
            max_supported_version: 21,
            unknown_tagged_fields: Vec::new(),
        }],
        rack: Some("r1".into()),
        fenced: true,
        in_controlled_shutdown: false,
        log_dirs: vec![Uuid::from_u64_pair(7, 7), Uuid::from_u64_pair(1, 1)],
        unknown_tagged_fields: Vec::new(),
    })
}

fn config(resource_type: i8, name: &str, key: &str, value: Option<&str>) -> MetadataRecord {
    MetadataRecord::Config(ConfigRecord {
        resource_type,
        resource_name: name.into(),
        name: key.into(),
        value: value.map(Into::into),
        ..Default::default()
    })
}

fn image_of(records: &[MetadataRecord]) -> MetadataImage {
    MetadataImage::from_records(records, MetadataProvenance::new(10, 1, 1000)).expect("valid")
}

fn replay_all(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataDelta {
    let mut delta = MetadataDelta::new(image);
    for record in records {
        delta.replay(record).expect("valid record");
    }
    delta
}

const NEXT: MetadataProvenance = MetadataProvenance::new(20, 2, 2000);

#[test]
fn topic_and_partition_records_create_a_topic_by_id_and_by_name() {
    let image = image_of(&[topic("foo", 1), partition(1, 0, &[1, 2, 3], 1)]);
    let foo = image.topics.topic_by_name("foo").expect("by name");
    assert_eq!(foo.id, topic_id(1));
    assert_eq!(image.topics.topic(topic_id(1)), Some(foo));
    let p = image.topics.partition(topic_id(1), 0).expect("partition 0");
    assert_eq!(p.replicas, vec![1, 2, 3]);
    assert_eq!(p.isr, vec![1, 2, 3]);
    assert_eq!(p.leader, 1);
    assert_eq!(p.leader_recovery_state, LeaderRecoveryState::Recovered);
    // A record without directories means "not known yet" for every replica.
    assert_eq!(p.directories, vec![directory_id::MIGRATING; 3]);
    assert!(p.elr.is_empty() && p.last_known_elr.is_empty());
    assert_eq!(image.provenance, MetadataProvenance::new(10, 1, 1000));
}

#[test]
fn partition_change_keeps_absent_fields_and_bumps_epochs() {
    let image = image_of(&[topic("foo", 1), partition(1, 0, &[1, 2, 3], 1)]);
    // Only the ISR: partition epoch +1, leader and leader epoch kept.
    let shrink = PartitionChangeRecord {
        isr: Some(vec![1, 2]),
        ..change(1, 0)
    };
    let next = replay_all(&image, &[MetadataRecord::PartitionChange(shrink)]).apply(NEXT);
    let p = next.topics.partition(topic_id(1), 0).expect("exists");
    assert_eq!((p.isr.clone(), p.leader), (vec![1, 2], 1));
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
    assert_eq!(p.replicas, vec![1, 2, 3]);

    // Leader present, even the same leader: the leader epoch is bumped too.
    let same_leader = PartitionChangeRecord {
        leader: 1,
        ..change(1, 0)
    };
    let recovering = PartitionChangeRecord {
        leader: -1,
        leader_recovery_state: 1,
        ..change(1, 0)
    };
    let next = replay_all(
        &next,
        &[
            MetadataRecord::PartitionChange(same_leader),
            MetadataRecord::PartitionChange(recovering),
        ],
    )
    .apply(NEXT);
    let p = next.topics.partition(topic_id(1), 0).expect("exists");
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (-1, 2, 3));
    assert!(!p.has_leader());
    assert_eq!(p.leader_recovery_state, LeaderRecoveryState::Recovering);
}

#[test]
fn replica_change_keeps_known_directories_and_marks_new_ones_unassigned() {
    let dir_a = Uuid::from_u64_pair(5, 1);
    let dir_b = Uuid::from_u64_pair(5, 2);
    let image = image_of(&[
        topic("foo", 1),
        partition(1, 0, &[1, 2], 1),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            directories: Some(vec![dir_a, dir_b]),
            ..change(1, 0)
        }),
    ]);
    let reassign = PartitionChangeRecord {
        replicas: Some(vec![2, 3]),
        adding_replicas: Some(vec![3]),
        removing_replicas: Some(vec![1]),
        ..change(1, 0)
    };
    let next = replay_all(&image, &[MetadataRecord::PartitionChange(reassign)]).apply(NEXT);
    let p = next.topics.partition(topic_id(1), 0).expect("exists");
    assert_eq!(p.directories, vec![dir_b, directory_id::UNASSIGNED]);
    assert_eq!(p.directory(2), Some(dir_b));
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![3], vec![1])
    );
    assert_eq!(p.partition_epoch, 2);
}

#[test]
fn elr_fields_are_replaced_only_when_present() {
    let image = image_of(&[topic("foo", 1), partition(1, 0, &[1, 2, 3], 1)]);
    let set = PartitionChangeRecord {
        eligible_leader_replicas: Some(vec![2]),
        last_known_elr: Some(vec![3]),
        ..change(1, 0)
    };
    let untouched = PartitionChangeRecord {
        isr: Some(vec![1]),
        ..change(1, 0)
    };
    let next = replay_all(
        &image,
        &[
            MetadataRecord::PartitionChange(set),
            MetadataRecord::PartitionChange(untouched),
        ],
    )
    .apply(NEXT);
    let p = next.topics.partition(topic_id(1), 0).expect("exists");
    assert_eq!(
        (p.elr.clone(), p.last_known_elr.clone()),
        (vec![2], vec![3])
    );
}

#[test]
fn remove_topic_deletes_its_partitions_and_configs() {
    let image = image_of(&[
        topic("foo", 1),
        partition(1, 0, &[1], 1),
        topic("bar", 2),
        config(2, "foo", "retention.ms", Some("1000")),
        config(2, "bar", "retention.ms", Some("2000")),
    ]);
    let delta = replay_all(
        &image,
        &[MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: topic_id(1),
            ..Default::default()
        })],
    );
    let topics = delta.topics_delta().expect("topics changed");
    assert!(topics.deleted_topic_ids().contains(&topic_id(1)));
    let next = delta.apply(NEXT);
    assert!(next.topics.topic_by_name("foo").is_none());
    assert!(next.topics.topic(topic_id(1)).is_none());
    assert!(
        next.configs
            .configs(&ConfigResource::topic("foo"))
            .is_empty()
    );
    assert_eq!(
        next.configs
            .configs(&ConfigResource::topic("bar"))
            .get("retention.ms")
            .map(String::as_str),
        Some("2000")
    );
}

#[test]
fn topics_created_then_deleted_in_one_delta_leave_no_trace() {
    let image = image_of(&[topic("keep", 9)]);
    let delta = replay_all(
        &image,
        &[
            topic("foo", 1),
            partition(1, 0, &[1, 2], 1),
            config(2, "foo", "retention.ms", Some("1")),
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                leader: 2,
                ..change(1, 0)
            }),
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: topic_id(1),
                ..Default::default()
            }),
        ],
    );
    let topics = delta.topics_delta().expect("topics delta");
    assert!(topics.created_topics().is_empty());
    assert!(topics.deleted_topic_ids().is_empty());
    assert!(topics.changed_topics().is_empty());
    assert!(delta.local_changes(1).is_empty());
    assert!(delta.configs_delta().expect("created").changes().is_empty());
    let next = delta.apply(NEXT);
    assert_eq!(next.topics, image.topics);
    assert_eq!(next.configs, image.configs);
}

#[test]
fn a_deleted_name_can_be_reused_in_the_same_delta() {
    let image = image_of(&[topic("foo", 1), partition(1, 0, &[1], 1)]);
    let next = replay_all(
        &image,
        &[
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: topic_id(1),
                ..Default::default()
            }),
            topic("foo", 2),
        ],
    )
    .apply(NEXT);
    assert_eq!(
        next.topics.topic_by_name("foo").map(|t| t.id),
        Some(topic_id(2))
    );
    assert_eq!(next.topics.by_id.len(), 1);
}

#[test]
fn config_record_sets_and_null_value_deletes() {
    let image = image_of(&[
        config(4, "", "log.retention.ms", Some("1")),
        config(4, "1", "log.cleaner.threads", Some("2")),
    ]);
    let next = replay_all(
        &image,
        &[
            config(4, "", "log.retention.ms", None),
            config(4, "1", "log.cleaner.threads", Some("3")),
            config(4, "1", "never.set", None),
        ],
    )
    .apply(NEXT);
    let default = ConfigResource {
        resource_type: ConfigResourceType::BROKER,
        name: String::new(),
    };
    assert!(
        !next.configs.resources.contains_key(&default),
        "emptied resource is gone"
    );
    let broker1 = ConfigResource {
        resource_type: ConfigResourceType::BROKER,
        name: "1".into(),
    };
    let configs = next.configs.configs(&broker1);
    assert_eq!(configs.len(), 1);
    assert_eq!(
        configs.get("log.cleaner.threads").map(String::as_str),
        Some("3")
    );
}

#[test]
fn broker_registration_fencing_and_unregistration() {
    let image = image_of(&[broker(1, 100)]);
    let b = image.cluster.broker(1).expect("registered");
    assert!(b.fenced && !b.in_controlled_shutdown);
    assert_eq!(b.listeners["PLAINTEXT"].port, 9093);
    assert_eq!(
        b.supported_features["metadata.version"],
        VersionRange { min: 1, max: 21 }
    );
    // Kept sorted the way Kafka sorts Uuids.
    assert_eq!(
        b.directories,
        vec![Uuid::from_u64_pair(1, 1), Uuid::from_u64_pair(7, 7)]
    );

    let unfence = MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
        broker_id: 1,
        broker_epoch: 100,
        fenced: -1,
        ..Default::default()
    });
    let shutdown = MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
        broker_id: 1,
        broker_epoch: 100,
        in_controlled_shutdown: 1,
        log_dirs: vec![Uuid::from_u64_pair(9, 9)],
        ..Default::default()
    });
    let next = replay_all(&image, &[unfence, shutdown]).apply(NEXT);
    let b = next.cluster.broker(1).expect("registered");
    assert!(!b.fenced && b.in_controlled_shutdown);
    assert_eq!(b.directories, vec![Uuid::from_u64_pair(9, 9)]);

    // The pre-3.3-IV2 records.
    let fence = MetadataRecord::FenceBroker(BrokerFencingRecord {
        id: 1,
        epoch: 100,
        ..Default::default()
    });
    let next = replay_all(&next, &[fence]).apply(NEXT);
    assert!(next.cluster.broker(1).expect("registered").fenced);
    let unfence = MetadataRecord::UnfenceBroker(BrokerFencingRecord {
        id: 1,
        epoch: 100,
        ..Default::default()
    });
    let next = replay_all(&next, &[unfence]).apply(NEXT);
    assert!(!next.cluster.broker(1).expect("registered").fenced);

    let unregister = MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
        broker_id: 1,
        broker_epoch: 100,
        ..Default::default()
    });
    let delta = replay_all(&next, &[unregister]);
    assert_eq!(
        delta
            .cluster_delta()
            .expect("changed")
            .changed_brokers()
            .get(&1),
        Some(&None)
    );
    assert!(delta.apply(NEXT).cluster.brokers.is_empty());
}

#[test]
fn a_registration_change_that_changes_nothing_is_not_reported() {
    let image = image_of(&[broker(1, 100)]);
    let no_op = MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
        broker_id: 1,
        broker_epoch: 100,
        fenced: 1,
        ..Default::default()
    });
    let delta = replay_all(&image, &[no_op]);
    assert!(
        delta
            .cluster_delta()
            .expect("created")
            .changed_brokers()
            .is_empty()
    );
}

#[test]
fn controller_registration() {
    let record = MetadataRecord::RegisterController(RegisterControllerRecord {
        controller_id: 3000,
        incarnation_id: Uuid::from_u64_pair(3, 3),
        zk_migration_ready: true,
        end_points: vec![RegistrationEndpoint {
            name: "CONTROLLER".into(),
            host: "h".into(),
            port: 9093,
            security_protocol: 0,
            unknown_tagged_fields: Vec::new(),
        }],
        features: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    });
    let image = image_of(&[record]);
    let c = &image.cluster.controllers[&3000];
    assert!(c.zk_migration_ready);
    assert_eq!(c.listeners["CONTROLLER"].host, "h");
}

#[test]
fn feature_levels_set_metadata_version_and_level_zero_removes() {
    let image = image_of(&[
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 21)),
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("transaction.version", 2)),
    ]);
    assert_eq!(image.metadata_version(), MetadataVersion::IBP_3_9_IV0);
    assert_eq!(image.features.level("transaction.version"), Some(2));
    assert_eq!(image.features.level("metadata.version"), Some(21));
    let delta = replay_all(
        &image,
        &[MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
            "transaction.version",
            0,
        ))],
    );
    assert_eq!(
        delta
            .features_delta()
            .expect("changed")
            .changes()
            .get("transaction.version"),
        Some(&None)
    );
    let next = delta.apply(NEXT);
    assert_eq!(next.features.level("transaction.version"), None);
    assert_eq!(next.metadata_version(), MetadataVersion::IBP_3_9_IV0);
    assert_eq!(
        MetadataImage::empty().metadata_version(),
        MetadataVersion::IBP_3_0_IV1,
        "a log without a FeatureLevelRecord is 3.0-IV1"
    );
}

#[test]
fn zk_migration_state_record() {
    let image = image_of(&[MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
        zk_migration_state: 2,
        ..Default::default()
    })]);
    assert_eq!(
        image.features.zk_migration_state,
        ZkMigrationState::PreMigration
    );
    assert!(image.features.zk_migration_state.in_progress());
}

#[test]
fn client_quotas_set_and_remove() {
    let entity = vec![
        QuotaEntity {
            entity_type: "user".into(),
            entity_name: Some("alice".into()),
            ..Default::default()
        },
        QuotaEntity {
            entity_type: "client-id".into(),
            entity_name: None,
            ..Default::default()
        },
    ];
    let set = |key: &str, value: f64, remove: bool| {
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: entity.clone(),
            key: key.into(),
            value,
            remove,
            ..Default::default()
        })
    };
    let image = image_of(&[
        set("producer_byte_rate", 1024.0, false),
        set("consumer_byte_rate", 2.5, false),
    ]);
    let (_, quotas) = image
        .client_quotas
        .entities
        .iter()
        .next()
        .expect("one entity");
    assert_eq!(quotas.get("consumer_byte_rate"), Some(&2.5));
    let next = replay_all(
        &image,
        &[
            set("producer_byte_rate", 0.0, true),
            set("consumer_byte_rate", 0.0, true),
        ],
    )
    .apply(NEXT);
    assert!(next.client_quotas.entities.is_empty());
}

#[test]
fn producer_ids_record_moves_the_next_block() {
    assert_eq!(MetadataImage::empty().producer_ids.next_producer_id, -1);
    let image = image_of(&[MetadataRecord::ProducerIds(ProducerIdsRecord {
        broker_id: 1,
        broker_epoch: 5,
        next_producer_id: 2000,
        unknown_tagged_fields: Vec::new(),
    })]);
    assert_eq!(image.producer_ids.next_producer_id, 2000);
}

fn acl(n: u64) -> MetadataRecord {
    MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
        id: Uuid::from_u64_pair(0xac1, n),
        resource_type: 2,
        resource_name: "foo".into(),
        pattern_type: 3,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission_type: 3,
        ..Default::default()
    })
}

fn remove_acl(n: u64) -> MetadataRecord {
    MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
        id: Uuid::from_u64_pair(0xac1, n),
        ..Default::default()
    })
}

#[test]
fn acls_add_and_remove() {
    let image = image_of(&[acl(1)]);
    assert_eq!(
        image.acls.acls[&Uuid::from_u64_pair(0xac1, 1)].principal,
        "User:alice"
    );
    let delta = replay_all(&image, &[acl(2), remove_acl(2), remove_acl(1)]);
    assert_eq!(
        delta.acls_delta().expect("changed").changes().len(),
        1,
        "2 left no trace"
    );
    assert!(delta.apply(NEXT).acls.acls.is_empty());
}

#[test]
fn scram_credentials_add_and_remove() {
    let cred = |name: &str, mechanism: i8| {
        MetadataRecord::UserScramCredential(UserScramCredentialRecord {
            name: name.into(),
            mechanism,
            salt: vec![1],
            stored_key: vec![2],
            server_key: vec![3],
            iterations: 4096,
            unknown_tagged_fields: Vec::new(),
        })
    };
    let image = image_of(&[cred("alice", 1), cred("alice", 2)]);
    assert_eq!(image.scram.credentials.len(), 2);
    let next = replay_all(
        &image,
        &[MetadataRecord::RemoveUserScramCredential(
            RemoveUserScramCredentialRecord {
                name: "alice".into(),
                mechanism: 1,
                ..Default::default()
            },
        )],
    )
    .apply(NEXT);
    assert_eq!(
        next.scram.credentials.keys().cloned().collect::<Vec<_>>(),
        vec![(2, "alice".to_owned())]
    );
}

#[test]
fn delegation_tokens_add_and_remove() {
    let image = image_of(&[MetadataRecord::DelegationToken(DelegationTokenRecord {
        owner: "User:alice".into(),
        requester: "User:alice".into(),
        renewers: vec!["User:bob".into()],
        issue_timestamp: 1,
        max_timestamp: 3,
        expiration_timestamp: 2,
        token_id: "tok".into(),
        ..Default::default()
    })]);
    assert_eq!(
        image.delegation_tokens.tokens["tok"].renewers,
        vec!["User:bob".to_owned()]
    );
    let next = replay_all(
        &image,
        &[MetadataRecord::RemoveDelegationToken(
            RemoveDelegationTokenRecord {
                token_id: "tok".into(),
                ..Default::default()
            },
        )],
    )
    .apply(NEXT);
    assert!(next.delegation_tokens.tokens.is_empty());
}

#[test]
fn noop_and_transaction_markers_change_nothing_and_share_every_sub_image() {
    let image = image_of(&[topic("foo", 1), broker(1, 1)]);
    let delta = replay_all(
        &image,
        &[
            MetadataRecord::NoOp(NoOpRecord::default()),
            MetadataRecord::BeginTransaction(BeginTransactionRecord {
                name: Some("bootstrap".into()),
                ..Default::default()
            }),
            MetadataRecord::EndTransaction(EndTransactionRecord::default()),
            MetadataRecord::AbortTransaction(AbortTransactionRecord::default()),
        ],
    );
    let next = delta.apply(NEXT);
    assert!(Arc::ptr_eq(&next.topics, &image.topics));
    assert!(Arc::ptr_eq(&next.cluster, &image.cluster));
    assert!(Arc::ptr_eq(&next.features, &image.features));
    assert_eq!(next.provenance, NEXT);
}

#[test]
fn untouched_sub_images_are_shared_not_copied() {
    let image = image_of(&[
        topic("foo", 1),
        broker(1, 1),
        config(2, "foo", "a", Some("b")),
    ]);
    let next = replay_all(&image, &[partition(1, 0, &[1], 1)]).apply(NEXT);
    assert!(!Arc::ptr_eq(&next.topics, &image.topics));
    assert!(Arc::ptr_eq(&next.cluster, &image.cluster));
    assert!(Arc::ptr_eq(&next.configs, &image.configs));
    assert!(Arc::ptr_eq(&next.acls, &image.acls));
}

/// Each case: the base records, the bad record, the error expected.
#[test]
fn records_that_do_not_fit_are_typed_errors_and_change_nothing() {
    let base = image_of(&[topic("foo", 1), partition(1, 0, &[1, 2], 1), broker(1, 100)]);
    let cases: Vec<(&str, MetadataRecord, ReplayError)> = vec![
        (
            "partition for an unknown topic",
            partition(2, 0, &[1], 1),
            ReplayError::UnknownTopic {
                topic_id: topic_id(2),
            },
        ),
        (
            "change of an unknown partition",
            MetadataRecord::PartitionChange(change(1, 5)),
            ReplayError::UnknownPartition {
                topic_id: topic_id(1),
                partition_id: 5,
            },
        ),
        (
            "change of a partition of an unknown topic",
            MetadataRecord::PartitionChange(change(3, 0)),
            ReplayError::UnknownTopic {
                topic_id: topic_id(3),
            },
        ),
        (
            "removal of an unknown topic",
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: topic_id(4),
                ..Default::default()
            }),
            ReplayError::UnknownTopic {
                topic_id: topic_id(4),
            },
        ),
        (
            "a second topic with the same name",
            topic("foo", 5),
            ReplayError::DuplicateTopicName {
                name: "foo".into(),
                existing_id: topic_id(1),
                new_id: topic_id(5),
            },
        ),
        (
            "a topic id used again",
            topic("other", 1),
            ReplayError::DuplicateTopicId {
                topic_id: topic_id(1),
                name: "other".into(),
            },
        ),
        (
            "unregister an unknown broker",
            MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                broker_id: 7,
                broker_epoch: 1,
                ..Default::default()
            }),
            ReplayError::UnknownBroker {
                broker_id: 7,
                action: "unregister",
            },
        ),
        (
            "fence with a stale broker epoch",
            MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id: 1,
                broker_epoch: 99,
                fenced: 1,
                ..Default::default()
            }),
            ReplayError::BrokerEpochMismatch {
                broker_id: 1,
                action: "change",
                record_epoch: 99,
                current_epoch: 100,
            },
        ),
        (
            "an invalid fencing change",
            MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id: 1,
                broker_epoch: 100,
                fenced: 3,
                ..Default::default()
            }),
            ReplayError::InvalidFencingChange {
                broker_id: 1,
                value: 3,
            },
        ),
        (
            "unfence an unknown broker (pre-3.3-IV2 record)",
            MetadataRecord::UnfenceBroker(BrokerFencingRecord {
                id: 2,
                epoch: 1,
                ..Default::default()
            }),
            ReplayError::UnknownBroker {
                broker_id: 2,
                action: "unfence",
            },
        ),
        (
            "directories that do not match the replicas",
            MetadataRecord::Partition(PartitionRecord {
                directories: vec![Uuid::from_u64_pair(1, 1)],
                ..match partition(1, 1, &[1, 2], 1) {
                    MetadataRecord::Partition(p) => p,
                    _ => unreachable!("built as a partition"),
                }
            }),
            ReplayError::ReplicaDirectoriesMismatch {
                topic_id: topic_id(1),
                partition_id: 1,
                replicas: 2,
                directories: 1,
            },
        ),
        (
            "an invalid leader recovery state",
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                leader_recovery_state: 7,
                ..change(1, 0)
            }),
            ReplayError::InvalidLeaderRecoveryState {
                topic_id: topic_id(1),
                partition_id: 0,
                value: 7,
            },
        ),
        (
            "an unknown metadata.version",
            MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 99)),
            ReplayError::UnknownMetadataVersion { feature_level: 99 },
        ),
        (
            "an unknown migration state",
            MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                zk_migration_state: 4,
                ..Default::default()
            }),
            ReplayError::UnknownZkMigrationState { value: 4 },
        ),
        (
            "removal of an unknown ACL",
            remove_acl(9),
            ReplayError::UnknownAcl {
                id: Uuid::from_u64_pair(0xac1, 9),
            },
        ),
    ];
    let snapshot_of_base = base.clone();
    for (case, record, expected) in cases {
        // On a fresh delta: the error, and no sub-delta is left behind.
        let mut delta = MetadataDelta::new(&base);
        assert_eq!(delta.replay(&record), Err(expected.clone()), "case: {case}");
        assert_eq!(
            delta.apply(NEXT),
            MetadataImage {
                provenance: NEXT,
                ..base.clone()
            },
            "case: {case}"
        );
        // In the middle of a delta: what was replayed before the bad record is kept intact.
        let mut delta = MetadataDelta::new(&base);
        let good = config(2, "foo", "k", Some("v"));
        delta.replay(&good).expect("valid");
        let before = delta.apply(NEXT);
        assert_eq!(delta.replay(&record), Err(expected), "case: {case}");
        assert_eq!(delta.apply(NEXT), before, "case: {case}");
        assert_eq!(
            base, snapshot_of_base,
            "case: {case}: the previous image changed"
        );
    }
}

#[test]
fn local_changes_tell_a_broker_what_it_leads_follows_and_deletes() {
    let image = image_of(&[
        topic("foo", 1),
        partition(1, 0, &[1, 2], 1),
        partition(1, 1, &[2, 3], 2),
        partition(1, 2, &[1, 3], 3),
        topic("gone", 2),
        partition(2, 0, &[1], 1),
        partition(2, 1, &[2], 2),
    ]);
    let delta = replay_all(
        &image,
        &[
            // foo-0: ISR shrink, broker 1 keeps leading in the same leader epoch.
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                isr: Some(vec![1]),
                ..change(1, 0)
            }),
            // foo-1: broker 1 is added as a follower.
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                replicas: Some(vec![2, 3, 1]),
                ..change(1, 1)
            }),
            // foo-2: broker 1 is removed.
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                replicas: Some(vec![3]),
                isr: Some(vec![3]),
                ..change(1, 2)
            }),
            // A new topic led by broker 1.
            topic("new", 3),
            partition(3, 0, &[1, 2], 1),
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: topic_id(2),
                ..Default::default()
            }),
        ],
    );
    let tp = |topic: &str, partition: i32| TopicPartition {
        topic: topic.into(),
        partition,
    };
    let local = delta.local_changes(1);
    assert_eq!(
        local.leaders.keys().cloned().collect::<Vec<_>>(),
        vec![tp("foo", 0), tp("new", 0)]
    );
    assert_eq!(
        local.elected_leaders.keys().cloned().collect::<Vec<_>>(),
        vec![tp("new", 0)],
        "foo-0 kept its leader epoch"
    );
    assert_eq!(
        local.followers.keys().cloned().collect::<Vec<_>>(),
        vec![tp("foo", 1)]
    );
    assert_eq!(
        local.deletes.iter().cloned().collect::<Vec<_>>(),
        vec![tp("foo", 2), tp("gone", 0)]
    );
    assert_eq!(local.topic_ids.get("new"), Some(&topic_id(3)));
    assert_eq!(local.leaders[&tp("new", 0)].topic_id, topic_id(3));
    // Broker 9 hosts nothing.
    assert!(delta.local_changes(9).is_empty());
    // Created topics and changed partitions for publishers.
    let topics = delta.topics_delta().expect("changed");
    assert_eq!(topics.created_topics().get("new"), Some(&topic_id(3)));
    assert!(topics.topic_was_created(topic_id(3)));
    assert_eq!(topics.changed_partitions().count(), 4);
}

#[test]
fn a_snapshot_loaded_over_an_image_replaces_it_and_reports_the_difference() {
    let old = image_of(&[
        topic("kept", 1),
        partition(1, 0, &[1, 2], 1),
        topic("dropped", 2),
        partition(2, 0, &[1], 1),
        broker(1, 100),
        broker(2, 200),
        config(2, "kept", "a", Some("1")),
        config(2, "kept", "b", Some("2")),
        acl(1),
    ]);
    // The snapshot: "kept" with a new leader, broker 2 only, config "a" only.
    let snapshot = [
        topic("kept", 1),
        MetadataRecord::Partition(PartitionRecord {
            leader_epoch: 5,
            partition_epoch: 6,
            ..match partition(1, 0, &[1, 2], 2) {
                MetadataRecord::Partition(p) => p,
                _ => unreachable!("built as a partition"),
            }
        }),
        broker(2, 200),
        config(2, "kept", "a", Some("1")),
    ];
    let mut delta = MetadataDelta::new_snapshot(&old);
    for record in &snapshot {
        delta.replay(record).expect("valid");
    }
    delta.finish_snapshot();
    let next = delta.apply(NEXT);
    assert_eq!(
        next,
        MetadataImage {
            provenance: NEXT,
            ..image_of(&snapshot)
        }
    );
    let local = delta.local_changes(1);
    assert_eq!(
        local.deletes.iter().cloned().collect::<Vec<_>>(),
        vec![TopicPartition {
            topic: "dropped".into(),
            partition: 0
        }]
    );
    assert_eq!(local.followers.len(), 1, "kept-0 is now led by broker 2");
    assert_eq!(
        delta
            .cluster_delta()
            .expect("changed")
            .changed_brokers()
            .get(&1),
        Some(&None)
    );
}

#[test]
#[should_panic(expected = "not a snapshot load")]
fn finishing_a_log_delta_as_a_snapshot_is_a_bug() {
    MetadataDelta::new(&MetadataImage::empty()).finish_snapshot();
}

#[test]
fn a_change_to_one_partition_shares_every_other_partition_and_topic() {
    let mut records = vec![topic("big", 1), topic("other", 2), partition(2, 0, &[1], 1)];
    records.extend((0..2_000).map(|p| partition(1, p, &[1, 2, 3], 1)));
    let image = image_of(&records);
    let next = replay_all(
        &image,
        &[MetadataRecord::PartitionChange(PartitionChangeRecord {
            isr: Some(vec![1]),
            ..change(1, 1_000)
        })],
    )
    .apply(NEXT);
    let before = image.topics.topic(topic_id(1)).expect("big");
    let after = next.topics.topic(topic_id(1)).expect("big");
    let shared = before
        .partitions
        .iter()
        .filter(|(id, p)| Arc::ptr_eq(p, &after.partitions[*id]))
        .count();
    assert_eq!(shared, 1_999, "only the changed partition is new");
    assert!(Arc::ptr_eq(
        &image.topics.by_id[&topic_id(2)],
        &next.topics.by_id[&topic_id(2)]
    ));
}
