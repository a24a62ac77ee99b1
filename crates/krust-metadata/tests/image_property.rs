//! Replay determinism, as properties (STYLE §8; Kafka's `RecordTestUtils`
//! `TestThroughAllIntermediateImagesLeadingToFinalImageHelper`).
//!
//! A generator turns random choices into a *valid* record sequence by looking at the image
//! built so far: it creates and deletes topics, changes partitions (ISR, leader, reassignment,
//! recovery state, directories, ELR), registers, fences, unfences and unregisters brokers,
//! registers controllers, sets and deletes configs, feature levels, quotas, producer-id
//! blocks, ACLs, SCRAM credentials and delegation tokens, with no-ops and transaction markers
//! in between. Then:
//! - however the records are cut into deltas, the final image is the same;
//! - a snapshot of any intermediate image (written at its metadata.version, framed to bytes
//!   and decoded again) plus the remaining records gives the same final image.

use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance};
use krust_metadata::records::*;
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use proptest::prelude::*;
use uuid::Uuid;

const FINAL: MetadataProvenance = MetadataProvenance::new(1_000, 9, 99_000);

/// One random choice: what kind of record, and three numbers to pick its contents.
type Choice = (u8, u32, u32, u32);

struct Generator {
    image: MetadataImage,
    records: Vec<MetadataRecord>,
    counter: u64,
}

fn pick<T: Clone>(items: &[T], n: u32) -> Option<T> {
    if items.is_empty() {
        None
    } else {
        items.get(n as usize % items.len()).cloned()
    }
}

/// Up to `count` distinct broker ids from 0..6, starting at `seed`.
fn brokers(seed: u32, count: u32) -> Vec<i32> {
    (0..count).map(|i| ((seed + i) % 6) as i32).collect()
}

impl Generator {
    fn new(metadata_level: i16) -> Self {
        let mut generator = Self {
            image: MetadataImage::empty(),
            records: Vec::new(),
            counter: 0,
        };
        generator.push(MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
            "metadata.version",
            metadata_level,
        )));
        generator
    }

    fn push(&mut self, record: MetadataRecord) {
        let mut delta = MetadataDelta::new(&self.image);
        if let Err(e) = delta.replay(&record) {
            panic!("the generator made an invalid record {record:?}: {e}");
        }
        let offset = self.records.len() as i64;
        self.image = delta.apply(MetadataProvenance::new(offset, 1, offset));
        check_invariants(&self.image);
        self.records.push(record);
    }

    fn next_id(&mut self, kind: u64) -> Uuid {
        self.counter += 1;
        Uuid::from_u64_pair(kind, self.counter)
    }

    fn partitions(&self) -> Vec<(Uuid, i32, Vec<i32>)> {
        self.image
            .topics
            .by_id
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|(id, p)| (t.id, *id, p.replicas.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn step(&mut self, (kind, a, b, c): Choice) {
        let topic_ids: Vec<Uuid> = self.image.topics.by_id.keys().copied().collect();
        let broker_epochs: Vec<(i32, i64)> = self
            .image
            .cluster
            .brokers
            .values()
            .map(|b| (b.id, b.epoch))
            .collect();
        match kind % 16 {
            0 => {
                let mut name = format!("t{}", a % 8);
                if self.image.topics.by_name.contains_key(&name) {
                    name = format!("u{}", self.counter);
                }
                let topic_id = self.next_id(0x7090);
                self.push(MetadataRecord::Topic(TopicRecord {
                    name,
                    topic_id,
                    ..Default::default()
                }));
                for partition_id in 0..=(b % 3) as i32 {
                    let replicas = brokers(c + partition_id as u32, 1 + c % 3);
                    let directories = if c % 2 == 0 {
                        Vec::new()
                    } else {
                        replicas
                            .iter()
                            .map(|r| Uuid::from_u64_pair(0xd1, *r as u64))
                            .collect()
                    };
                    self.push(MetadataRecord::Partition(PartitionRecord {
                        partition_id,
                        topic_id,
                        replicas: replicas.clone(),
                        isr: replicas.clone(),
                        removing_replicas: Vec::new(),
                        adding_replicas: Vec::new(),
                        leader: replicas[0],
                        leader_recovery_state: 0,
                        leader_epoch: 0,
                        partition_epoch: 0,
                        directories,
                        eligible_leader_replicas: None,
                        last_known_elr: None,
                        unknown_tagged_fields: Vec::new(),
                    }));
                }
            }
            1 | 2 => {
                let Some((topic_id, partition_id, replicas)) = pick(&self.partitions(), a) else {
                    return;
                };
                let base = PartitionChangeRecord {
                    partition_id,
                    topic_id,
                    ..Default::default()
                };
                let elr = self.image.metadata_version().is_elr_supported();
                let record = match b % 6 {
                    0 => PartitionChangeRecord {
                        isr: Some(replicas[..=(c as usize % replicas.len())].to_vec()),
                        ..base
                    },
                    1 => PartitionChangeRecord {
                        leader: pick(&replicas, c).filter(|_| c % 4 != 0).unwrap_or(-1),
                        ..base
                    },
                    2 => {
                        let new = brokers(c, 1 + c % 3);
                        PartitionChangeRecord {
                            isr: Some(new.clone()),
                            leader: new[0],
                            adding_replicas: Some(
                                new.iter()
                                    .filter(|r| !replicas.contains(r))
                                    .copied()
                                    .collect(),
                            ),
                            removing_replicas: Some(Vec::new()),
                            replicas: Some(new),
                            ..base
                        }
                    }
                    3 => PartitionChangeRecord {
                        leader_recovery_state: (c % 2) as i8,
                        ..base
                    },
                    4 => PartitionChangeRecord {
                        directories: Some(
                            replicas
                                .iter()
                                .map(|r| {
                                    Uuid::from_u64_pair(0xd2, (*r as u64) << 8 | u64::from(c % 4))
                                })
                                .collect(),
                        ),
                        ..base
                    },
                    _ if elr => PartitionChangeRecord {
                        eligible_leader_replicas: Some(
                            replicas[..(c as usize % replicas.len())].to_vec(),
                        ),
                        last_known_elr: Some(if c % 2 == 0 {
                            Vec::new()
                        } else {
                            vec![replicas[0]]
                        }),
                        ..base
                    },
                    _ => PartitionChangeRecord {
                        isr: Some(replicas.clone()),
                        ..base
                    },
                };
                self.push(MetadataRecord::PartitionChange(record));
            }
            3 => {
                if let Some(topic_id) = pick(&topic_ids, a) {
                    self.push(MetadataRecord::RemoveTopic(RemoveTopicRecord {
                        topic_id,
                        ..Default::default()
                    }));
                }
            }
            4 => {
                self.counter += 1;
                let id = (a % 5) as i32;
                self.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                    broker_id: id,
                    is_migrating_zk_broker: b % 5 == 0,
                    incarnation_id: Uuid::from_u64_pair(0xb0, self.counter),
                    broker_epoch: self.counter as i64 * 10,
                    end_points: vec![RegistrationEndpoint {
                        name: "PLAINTEXT".into(),
                        host: format!("h{id}"),
                        port: 9092,
                        security_protocol: 0,
                        unknown_tagged_fields: Vec::new(),
                    }],
                    features: vec![RegistrationFeature {
                        name: "metadata.version".into(),
                        min_supported_version: 1,
                        max_supported_version: 22,
                        unknown_tagged_fields: Vec::new(),
                    }],
                    rack: (b % 2 == 0).then(|| format!("rack{}", b % 3)),
                    fenced: true,
                    in_controlled_shutdown: false,
                    log_dirs: (0..c % 3)
                        .map(|i| Uuid::from_u64_pair(0xd3, u64::from(c.wrapping_sub(i))))
                        .collect(),
                    unknown_tagged_fields: Vec::new(),
                }));
            }
            5 => {
                if let Some((broker_id, broker_epoch)) = pick(&broker_epochs, a) {
                    self.push(MetadataRecord::BrokerRegistrationChange(
                        BrokerRegistrationChangeRecord {
                            broker_id,
                            broker_epoch,
                            fenced: [-1, 0, 1][b as usize % 3],
                            in_controlled_shutdown: (c % 2) as i8,
                            log_dirs: (0..c % 3)
                                .map(|i| Uuid::from_u64_pair(0xd4, u64::from(i + b % 4)))
                                .collect(),
                            unknown_tagged_fields: Vec::new(),
                        },
                    ));
                }
            }
            6 => {
                if let Some((broker_id, broker_epoch)) = pick(&broker_epochs, a) {
                    self.push(MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                        broker_id,
                        broker_epoch,
                        ..Default::default()
                    }));
                }
            }
            7 => {
                let (resource_type, resource_name) = match a % 3 {
                    0 => (4, String::new()),
                    1 => (4, format!("{}", b % 3)),
                    _ => (2, format!("t{}", b % 8)),
                };
                self.push(MetadataRecord::Config(ConfigRecord {
                    resource_type,
                    resource_name,
                    name: format!("k{}", c % 4),
                    value: (c % 3 != 0).then(|| format!("v{c}")),
                    ..Default::default()
                }));
            }
            8 => {
                let name = ["transaction.version", "group.version", "test.feature"][a as usize % 3];
                self.push(MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
                    name,
                    (b % 3) as i16,
                )));
            }
            9 => {
                let entity = vec![QuotaEntity {
                    entity_type: ["user", "client-id", "ip"][a as usize % 3].into(),
                    entity_name: (b % 3 != 0).then(|| format!("e{}", b % 3)),
                    ..Default::default()
                }];
                self.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity,
                    key: ["producer_byte_rate", "consumer_byte_rate"][c as usize % 2].into(),
                    value: f64::from(c % 1000) * 1.5,
                    remove: c % 5 == 0,
                    ..Default::default()
                }));
            }
            10 => {
                let next = self.image.producer_ids.next_producer_id.max(0) + 1000;
                self.push(MetadataRecord::ProducerIds(ProducerIdsRecord {
                    broker_id: (a % 5) as i32,
                    broker_epoch: i64::from(b),
                    next_producer_id: next,
                    unknown_tagged_fields: Vec::new(),
                }));
            }
            11 => {
                let acl_ids: Vec<Uuid> = self.image.acls.acls.keys().copied().collect();
                match pick(&acl_ids, a).filter(|_| b % 2 == 0) {
                    Some(id) => self.push(MetadataRecord::RemoveAccessControlEntry(
                        RemoveAccessControlEntryRecord {
                            id,
                            ..Default::default()
                        },
                    )),
                    None => {
                        let id = self.next_id(0xac1);
                        self.push(MetadataRecord::AccessControlEntry(
                            AccessControlEntryRecord {
                                id,
                                resource_type: 2,
                                resource_name: format!("t{}", c % 8),
                                pattern_type: 3,
                                principal: format!("User:u{}", c % 3),
                                host: "*".into(),
                                operation: (2 + c % 13) as i8,
                                permission_type: 3,
                                ..Default::default()
                            },
                        ));
                    }
                }
            }
            12 => {
                let name = format!("u{}", a % 3);
                let mechanism = 1 + (b % 2) as i8;
                if c % 3 == 0 {
                    self.push(MetadataRecord::RemoveUserScramCredential(
                        RemoveUserScramCredentialRecord {
                            name,
                            mechanism,
                            ..Default::default()
                        },
                    ));
                } else {
                    self.push(MetadataRecord::UserScramCredential(
                        UserScramCredentialRecord {
                            name,
                            mechanism,
                            salt: c.to_be_bytes().to_vec(),
                            stored_key: vec![1; 32],
                            server_key: vec![2; 32],
                            iterations: 4096,
                            unknown_tagged_fields: Vec::new(),
                        },
                    ));
                }
            }
            13 => {
                let token_id = format!("tok{}", a % 3);
                if c % 3 == 0 {
                    self.push(MetadataRecord::RemoveDelegationToken(
                        RemoveDelegationTokenRecord {
                            token_id,
                            ..Default::default()
                        },
                    ));
                } else {
                    self.push(MetadataRecord::DelegationToken(DelegationTokenRecord {
                        owner: "User:a".into(),
                        requester: "User:b".into(),
                        renewers: (0..b % 3).map(|i| format!("User:r{i}")).collect(),
                        issue_timestamp: i64::from(c),
                        max_timestamp: i64::from(c) + 100,
                        expiration_timestamp: i64::from(c) + 50,
                        token_id,
                        ..Default::default()
                    }));
                }
            }
            14 => {
                let id = self.next_id(0xc0);
                self.push(MetadataRecord::RegisterController(
                    RegisterControllerRecord {
                        controller_id: 3000 + (a % 3) as i32,
                        incarnation_id: id,
                        zk_migration_ready: b % 2 == 0,
                        end_points: vec![RegistrationEndpoint {
                            name: "CONTROLLER".into(),
                            host: "c".into(),
                            port: 9093,
                            security_protocol: 0,
                            unknown_tagged_fields: Vec::new(),
                        }],
                        features: Vec::new(),
                        unknown_tagged_fields: Vec::new(),
                    },
                ));
            }
            _ => {
                let record = match a % 5 {
                    0 => MetadataRecord::NoOp(NoOpRecord::default()),
                    1 => MetadataRecord::BeginTransaction(BeginTransactionRecord::default()),
                    2 => MetadataRecord::EndTransaction(EndTransactionRecord::default()),
                    3 => MetadataRecord::AbortTransaction(AbortTransactionRecord::default()),
                    _ => MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                        zk_migration_state: (b % 4) as i8,
                        ..Default::default()
                    }),
                };
                self.push(record);
            }
        }
    }
}

/// What every image must satisfy, checked after every generated record.
fn check_invariants(image: &MetadataImage) {
    let topics = &image.topics;
    assert_eq!(
        topics.by_id.len(),
        topics.by_name.len(),
        "by id and by name differ"
    );
    for (name, topic) in &topics.by_name {
        assert_eq!(&topic.name, name);
        assert_eq!(topics.by_id.get(&topic.id), Some(topic), "{name} by id");
        for (id, partition) in &topic.partitions {
            assert_eq!(
                partition.directories.len(),
                partition.replicas.len(),
                "{name}-{id}: one directory per replica"
            );
        }
    }
    for (id, broker) in &image.cluster.brokers {
        assert_eq!(*id, broker.id);
    }
    for configs in image.configs.resources.values() {
        assert!(!configs.is_empty(), "a resource without configs is absent");
    }
    for quotas in image.client_quotas.entities.values() {
        assert!(!quotas.is_empty(), "an entity without quotas is absent");
    }
}

fn generate(elr: bool, choices: &[Choice]) -> Generator {
    let mut generator = Generator::new(if elr { 22 } else { 21 });
    for choice in choices {
        generator.step(*choice);
    }
    generator
}

fn replay_in_deltas(records: &[MetadataRecord], cut_after: &[bool]) -> MetadataImage {
    let mut image = MetadataImage::empty();
    let mut delta = MetadataDelta::new(&image);
    for (i, record) in records.iter().enumerate() {
        delta.replay(record).expect("valid record");
        if cut_after.get(i).copied().unwrap_or(false) {
            image = delta.apply(MetadataProvenance::new(i as i64, 1, i as i64));
            delta = MetadataDelta::new(&image);
        }
    }
    delta.apply(FINAL)
}

/// The image as snapshot records, framed to bytes and decoded, then replayed on the empty image.
fn through_snapshot(image: &MetadataImage) -> MetadataImage {
    let mv: MetadataVersion = image.metadata_version();
    let records: Vec<MetadataRecord> = image
        .to_records(mv)
        .expect("nothing is lost at the image's own metadata.version")
        .iter()
        .map(|r| {
            let bytes = r.encode().expect("encodable at the version chosen");
            ApiMessageAndVersion::decode(&bytes)
                .expect("decodable")
                .record
        })
        .collect();
    MetadataImage::from_records(&records, image.provenance).expect("a snapshot replays")
}

fn choices() -> impl Strategy<Value = Vec<Choice>> {
    proptest::collection::vec(
        (any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>()),
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn deltas_cut_anywhere_give_the_same_image(
        elr in any::<bool>(),
        choices in choices(),
        cuts in proptest::collection::vec(any::<bool>(), 0..200),
    ) {
        let generated = generate(elr, &choices);
        let one_delta = replay_in_deltas(&generated.records, &[]);
        let every_record = replay_in_deltas(&generated.records, &vec![true; generated.records.len()]);
        let random_cuts = replay_in_deltas(&generated.records, &cuts);
        prop_assert_eq!(&one_delta, &every_record);
        prop_assert_eq!(&one_delta, &random_cuts);
        prop_assert_eq!(&one_delta, &MetadataImage { provenance: FINAL, ..generated.image });
    }

    #[test]
    fn a_snapshot_loaded_over_any_image_gives_the_snapshots_image(
        elr in any::<bool>(),
        before in choices(),
        after in choices(),
    ) {
        let old = generate(elr, &before).image;
        let new = generate(!elr, &after).image;
        let mut delta = MetadataDelta::new_snapshot(&old);
        for record in new.to_records(new.metadata_version()).expect("writable") {
            delta.replay(&record.record).expect("a snapshot replays over any image");
        }
        delta.finish_snapshot();
        let loaded = delta.apply(new.provenance);
        check_invariants(&loaded);
        prop_assert_eq!(loaded, new);
    }

    #[test]
    fn snapshot_of_an_intermediate_image_plus_the_tail_gives_the_same_image(
        elr in any::<bool>(),
        choices in choices(),
        split in any::<usize>(),
    ) {
        let generated = generate(elr, &choices);
        let records = &generated.records;
        let full = replay_in_deltas(records, &[]);
        let k = split % (records.len() + 1);
        let head = MetadataImage::from_records(&records[..k], MetadataProvenance::new(k as i64, 1, 7))
            .expect("valid head");
        let loaded = through_snapshot(&head);
        prop_assert_eq!(&loaded, &head, "snapshot round trip of the image after {} records", k);
        let mut delta = MetadataDelta::new(&loaded);
        for record in &records[k..] {
            delta.replay(record).expect("the tail replays on the snapshot");
        }
        prop_assert_eq!(delta.apply(FINAL), full);
    }
}

/// The generator is only as good as what it reaches: over a few hundred fixed runs it makes
/// every record type except the pre-3.3-IV2 fence/unfence records (covered in image_replay.rs).
#[test]
fn the_generator_reaches_every_record_type() {
    let mut seen = std::collections::BTreeSet::new();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 16) as u32
    };
    for run in 0..300 {
        let choices: Vec<Choice> = (0..40)
            .map(|_| ((next() % 256) as u8, next(), next(), next()))
            .collect();
        for record in generate(run % 2 == 0, &choices).records {
            seen.insert(record.record_type());
        }
    }
    let missing: Vec<_> = MetadataRecordType::ALL
        .into_iter()
        .filter(|t| !seen.contains(t))
        .collect();
    assert_eq!(
        missing,
        vec![
            MetadataRecordType::FenceBroker,
            MetadataRecordType::UnfenceBroker
        ]
    );
}
