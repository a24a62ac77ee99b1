//! Records that may or may not fit: drawn from small domains (a few topic ids, partitions,
//! broker ids and epochs, out-of-range codes), so that many refer to things that do not exist
//! or carry values Kafka rejects. Replay must never panic, and a failed replay must leave the
//! delta exactly as it was (DESIGN: bad input is an error, never a panic).

use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance};
use krust_metadata::records::*;
use proptest::prelude::*;
use uuid::Uuid;

const AT: MetadataProvenance = MetadataProvenance::new(5, 1, 5);

fn ids(n: u32) -> Vec<i32> {
    (0..n % 4).map(|i| i as i32).collect()
}

fn record((kind, a, b, c): (u8, u32, u32, u32)) -> MetadataRecord {
    let topic_id = Uuid::from_u64_pair(0x70, u64::from(a % 4));
    let i8_of = |v: u32, values: &[i8]| values[v as usize % values.len()];
    match kind % 14 {
        0 => MetadataRecord::Topic(TopicRecord {
            name: format!("n{}", b % 4),
            topic_id,
            ..Default::default()
        }),
        1 => MetadataRecord::Partition(PartitionRecord {
            partition_id: (b % 3) as i32,
            topic_id,
            replicas: ids(c),
            isr: ids(c / 4),
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader: (c % 3) as i32 - 1,
            leader_recovery_state: i8_of(c / 16, &[0, 1, 2]),
            leader_epoch: 0,
            partition_epoch: 0,
            directories: (0..(c / 64) % 3)
                .map(|i| Uuid::from_u64_pair(1, u64::from(i)))
                .collect(),
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        }),
        2 => MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: (b % 3) as i32,
            topic_id,
            isr: (c % 2 == 0).then(|| ids(c / 2)),
            leader: [-2, -1, 0, 1][(c / 8) as usize % 4],
            replicas: (c % 5 == 0).then(|| ids(c / 32)),
            leader_recovery_state: i8_of(c / 128, &[-1, 0, 1, 9]),
            directories: (c % 7 == 0)
                .then(|| vec![Uuid::from_u64_pair(2, 2); (c as usize / 512) % 3]),
            ..Default::default()
        }),
        3 => MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id,
            ..Default::default()
        }),
        4 => MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: (a % 3) as i32,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(3, u64::from(c)),
            broker_epoch: i64::from(b % 3),
            end_points: Vec::new(),
            features: Vec::new(),
            rack: None,
            fenced: c % 2 == 0,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        }),
        5 => MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
            broker_id: (a % 3) as i32,
            broker_epoch: i64::from(b % 3),
            ..Default::default()
        }),
        6 => {
            let fencing = BrokerFencingRecord {
                id: (a % 3) as i32,
                epoch: i64::from(b % 3),
                ..Default::default()
            };
            if c % 2 == 0 {
                MetadataRecord::FenceBroker(fencing)
            } else {
                MetadataRecord::UnfenceBroker(fencing)
            }
        }
        7 => MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id: (a % 3) as i32,
            broker_epoch: i64::from(b % 3),
            fenced: i8_of(c, &[-2, -1, 0, 1, 2]),
            in_controlled_shutdown: i8_of(c / 8, &[0, 1, 2]),
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        }),
        8 => MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
            if b % 2 == 0 {
                "metadata.version"
            } else {
                "transaction.version"
            },
            (a % 26) as i16,
        )),
        9 => MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
            zk_migration_state: (a % 6) as i8,
            ..Default::default()
        }),
        10 => MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
            id: Uuid::from_u64_pair(4, u64::from(a % 3)),
            ..Default::default()
        }),
        11 => MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
            id: Uuid::from_u64_pair(4, u64::from(a % 3)),
            ..Default::default()
        }),
        12 => MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: format!("n{}", a % 4),
            name: "k".into(),
            value: (b % 2 == 0).then(|| "v".into()),
            ..Default::default()
        }),
        _ => MetadataRecord::NoOp(NoOpRecord::default()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn replay_never_panics_and_a_failed_replay_changes_nothing(
        choices in proptest::collection::vec((any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>()), 1..80),
        cuts in proptest::collection::vec(any::<bool>(), 0..80),
    ) {
        let mut image = MetadataImage::empty();
        let mut delta = MetadataDelta::new(&image);
        for (i, choice) in choices.iter().enumerate() {
            let record = record(*choice);
            let before = delta.apply(AT);
            if delta.replay(&record).is_err() {
                prop_assert_eq!(delta.apply(AT), before, "after failed {:?}", record);
            }
            if cuts.get(i).copied().unwrap_or(false) {
                image = delta.apply(AT);
                delta = MetadataDelta::new(&image);
            }
        }
    }
}
