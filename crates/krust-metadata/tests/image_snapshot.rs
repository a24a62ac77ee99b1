//! Writing an image as snapshot records: Kafka's order (facts §4.4), record versions chosen by
//! metadata.version (facts §5), metadata loss below the versions that carry a feature, and
//! the round trip image → records / snapshot bytes → image.

use bytes::Bytes;
use krust_metadata::image::{
    ImageWriteError, ImageWriterOptions, MetadataImage, MetadataProvenance, read_image_snapshot,
    write_image_snapshot,
};
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::*;
use krust_metadata::{ApiMessageAndVersion, MetadataDelta};
use krust_raft::snapshot::SnapshotWriterOptions;
use uuid::Uuid;

const PROVENANCE: MetadataProvenance = MetadataProvenance::new(41, 3, 1_700_000_000_000);

fn full_image(metadata_level: i16) -> MetadataImage {
    let topic_id = Uuid::from_u64_pair(1, 1);
    let records = vec![
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", metadata_level)),
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("group.version", 1)),
        MetadataRecord::ZkMigrationState(ZkMigrationStateRecord::default()),
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 1,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(2, 2),
            broker_epoch: 7,
            end_points: vec![RegistrationEndpoint {
                name: "PLAINTEXT".into(),
                host: "localhost".into(),
                port: 9092,
                security_protocol: 0,
                unknown_tagged_fields: Vec::new(),
            }],
            features: Vec::new(),
            rack: None,
            fenced: false,
            in_controlled_shutdown: false,
            log_dirs: vec![Uuid::from_u64_pair(3, 3)],
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::RegisterController(RegisterControllerRecord {
            controller_id: 3000,
            incarnation_id: Uuid::from_u64_pair(4, 4),
            zk_migration_ready: false,
            end_points: Vec::new(),
            features: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::Topic(TopicRecord {
            name: "foo".into(),
            topic_id,
            ..Default::default()
        }),
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id,
            replicas: vec![1],
            isr: vec![1],
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader: 1,
            leader_recovery_state: 0,
            leader_epoch: 3,
            partition_epoch: 4,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: "foo".into(),
            name: "cleanup.policy".into(),
            value: Some("compact".into()),
            ..Default::default()
        }),
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: vec![QuotaEntity {
                entity_type: "user".into(),
                entity_name: None,
                ..Default::default()
            }],
            key: "producer_byte_rate".into(),
            value: 1e6,
            remove: false,
            ..Default::default()
        }),
        MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 7,
            next_producer_id: 5000,
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
            id: Uuid::from_u64_pair(5, 5),
            resource_type: 2,
            resource_name: "foo".into(),
            pattern_type: 3,
            principal: "User:a".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
            ..Default::default()
        }),
        MetadataRecord::UserScramCredential(UserScramCredentialRecord {
            name: "a".into(),
            mechanism: 1,
            salt: vec![1],
            stored_key: vec![2],
            server_key: vec![3],
            iterations: 4096,
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::DelegationToken(DelegationTokenRecord {
            owner: "User:a".into(),
            requester: "User:a".into(),
            renewers: Vec::new(),
            issue_timestamp: 1,
            max_timestamp: 2,
            expiration_timestamp: 2,
            token_id: "t".into(),
            ..Default::default()
        }),
    ];
    MetadataImage::from_records(&records, PROVENANCE).expect("valid records")
}

fn types(records: &[ApiMessageAndVersion]) -> Vec<MetadataRecordType> {
    records.iter().map(|r| r.record.record_type()).collect()
}

#[test]
fn records_are_written_in_kafkas_snapshot_order() {
    let image = full_image(21);
    let records = image
        .to_records(MetadataVersion::IBP_3_9_IV0)
        .expect("writable");
    use MetadataRecordType as T;
    assert_eq!(
        types(&records),
        vec![
            T::FeatureLevel,
            T::FeatureLevel,
            T::ZkMigrationState,
            T::RegisterBroker,
            T::RegisterController,
            T::Topic,
            T::Partition,
            T::Config,
            T::ClientQuota,
            T::ProducerIds,
            T::AccessControlEntry,
            T::UserScramCredential,
            T::DelegationToken,
        ]
    );
    let MetadataRecord::FeatureLevel(first) = &records[0].record else {
        panic!("first record is {:?}", records[0]);
    };
    assert_eq!(
        (first.name.as_str(), first.feature_level),
        ("metadata.version", 21)
    );
    // The producer-id block is written without the broker that asked for it.
    let Some(MetadataRecord::ProducerIds(ids)) = records.get(9).map(|r| &r.record) else {
        panic!("no producer ids record");
    };
    assert_eq!(
        (ids.broker_id, ids.broker_epoch, ids.next_producer_id),
        (-1, -1, 5000)
    );
}

#[test]
fn record_versions_follow_metadata_version() {
    let version_of = |records: &[ApiMessageAndVersion], t: MetadataRecordType| {
        records
            .iter()
            .find(|r| r.record.record_type() == t)
            .map(|r| r.version)
    };
    let at_39 = full_image(21)
        .to_records(MetadataVersion::IBP_3_9_IV0)
        .expect("ok");
    assert_eq!(
        version_of(&at_39, MetadataRecordType::RegisterBroker),
        Some(3)
    );
    assert_eq!(version_of(&at_39, MetadataRecordType::Partition), Some(1));
    let at_40 = full_image(22)
        .to_records(MetadataVersion::IBP_4_0_IV0)
        .expect("ok");
    assert_eq!(version_of(&at_40, MetadataRecordType::Partition), Some(2));

    // 3.3-IV3 has no migration state, no controller registrations, no directories,
    // no SCRAM and no delegation tokens: an image without those writes fine.
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for record in [
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 7)),
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 1,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(1, 1),
            broker_epoch: 1,
            end_points: Vec::new(),
            features: Vec::new(),
            rack: None,
            fenced: true,
            in_controlled_shutdown: true,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        }),
    ] {
        delta.replay(&record).expect("valid");
    }
    let old = delta.apply(PROVENANCE);
    let at_33 = old.to_records(MetadataVersion::IBP_3_3_IV3).expect("ok");
    assert_eq!(
        types(&at_33),
        vec![
            MetadataRecordType::FeatureLevel,
            MetadataRecordType::RegisterBroker
        ]
    );
    assert_eq!(
        version_of(&at_33, MetadataRecordType::RegisterBroker),
        Some(1)
    );
    // Every record written encodes at the version chosen.
    for record in at_39.iter().chain(&at_40).chain(&at_33) {
        let bytes = record.encode().expect("encodable at its version");
        assert_eq!(
            &ApiMessageAndVersion::decode(&bytes).expect("decodes"),
            record
        );
    }
}

#[test]
fn what_an_old_metadata_version_cannot_carry_is_a_loss() {
    let image = full_image(21);
    let err = image
        .to_records(MetadataVersion::IBP_3_4_IV0)
        .expect_err("3.4 has no controller registrations, directories, SCRAM or tokens");
    let ImageWriteError::MetadataLoss {
        metadata_version,
        what,
    } = err;
    assert_eq!(metadata_version, MetadataVersion::IBP_3_4_IV0);
    assert_eq!(what, "the online log directories of one or more brokers");

    let mut lost = Vec::new();
    let mut on_loss = |what: &str| lost.push(what.to_owned());
    let mut records = Vec::new();
    image
        .write(
            &mut records,
            ImageWriterOptions::lossy(MetadataVersion::IBP_3_4_IV0, &mut on_loss),
        )
        .expect("lossy write goes on");
    assert_eq!(
        lost,
        vec![
            "the online log directories of one or more brokers".to_owned(),
            "controller registration data".to_owned(),
            "SCRAM credentials for a (mechanism 1)".to_owned(),
            "Delegation Tokens: t".to_owned(),
        ]
    );
    assert!(!types(&records).contains(&MetadataRecordType::UserScramCredential));
    assert!(!types(&records).contains(&MetadataRecordType::RegisterController));
}

#[test]
fn image_round_trips_through_records() {
    for level in [21, 22] {
        let image = full_image(level);
        let mv = image.metadata_version();
        let records = image.to_records(mv).expect("writable");
        let back = MetadataImage::from_records(records.iter().map(|r| &r.record), PROVENANCE)
            .expect("replays");
        assert_eq!(back, image, "metadata.version level {level}");
    }
    let empty = MetadataImage::empty();
    assert!(empty.is_empty());
    assert!(!full_image(21).is_empty());
}

#[test]
fn image_round_trips_through_snapshot_bytes() {
    let image = full_image(21);
    let mut options = SnapshotWriterOptions::new(PROVENANCE.snapshot_id());
    options.last_contained_log_timestamp_ms = PROVENANCE.last_contained_log_time_ms;
    let bytes =
        write_image_snapshot(&image, image.metadata_version(), options).expect("snapshot written");
    let back = read_image_snapshot(Bytes::from(bytes.clone()), PROVENANCE.snapshot_id())
        .expect("snapshot read");
    assert_eq!(back, image);
    assert_eq!(back.provenance, PROVENANCE);

    let mut corrupt = bytes;
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0x40;
    assert!(read_image_snapshot(Bytes::from(corrupt), PROVENANCE.snapshot_id()).is_err());
}
