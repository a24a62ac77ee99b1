//! The quorum controller's part of the KIP-866 migration (Kafka 3.9's
//! `ActivationRecordsGenerator`, `RUNS_IN_PREMIGRATION`, `MigrationRecordConsumer` and
//! `OffsetControlManager`): what activation writes with and without
//! `zookeeper.metadata.migration.enable`, the operations refused before the ZooKeeper metadata
//! is in the log, the copy's records in a metadata transaction, and the abort of a copy the
//! previous leader did not finish.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    BrokerId, BrokerRegistrationRequest, ControllerRegistrationRequest, CreateTopicsRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_controller::heartbeat::HeartbeatConfig;
use krust_controller::quorum_controller::top_level_error;
use krust_controller::{
    CommittedBatch, ControllerAction, ControllerError, ControllerRequest, ControllerResponse,
    MigrationBatchCommitted, QuorumController, QuorumControllerConfig,
};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::{
    BeginTransactionRecord, EndTransactionRecord, MetadataRecord, MetadataRecordType,
    PartitionRecord, TopicRecord, ZkMigrationStateRecord,
};
use krust_metadata::{ApiMessageAndVersion, BootstrapMetadata, MetadataVersion};
use uuid::Uuid;

const CLUSTER_ID: &str = "J8qXRwI-Qyi2G0guFTiuYw";

fn config(node_id: i32, migration: bool, mv: MetadataVersion) -> QuorumControllerConfig {
    QuorumControllerConfig {
        node_id,
        cluster_id: CLUSTER_ID.to_owned(),
        heartbeat: HeartbeatConfig::default(),
        metadata_max_idle_interval_ms: 500,
        bootstrap: BootstrapMetadata::from_versions(mv, &BTreeMap::new(), "test")
            .expect("bootstraps"),
        default_num_partitions: 1,
        default_replication_factor: 1,
        kraft_version: 0,
        unclean_leader_election_interval_ms: 300_000,
        leader_imbalance_check_interval_ms: Some(300_000),
        topic_validation_defaults: krust_config::TopicValidationDefaults::default(),
        zk_migration_enabled: migration,
        max_zk_write_behind: Some(100),
    }
}

/// One active controller over a log it appends to; every append commits at once unless
/// `hold` is set, and a fresh controller can replay the log and take over.
struct Node {
    controller: QuorumController,
    epoch: i32,
    log: Vec<CommittedBatch>,
    responses: Vec<(krust_controller::RequestId, ControllerResponse)>,
    hold: bool,
    now: Instant,
}

impl Node {
    fn start(config: QuorumControllerConfig) -> Self {
        let now = Instant::now();
        let mut node = Self {
            controller: QuorumController::new(config, 7),
            epoch: 1,
            log: Vec::new(),
            responses: Vec::new(),
            hold: false,
            now,
        };
        node.controller
            .handle_leader_change(now, true, 1, 0)
            .expect("activation");
        node.drain();
        node
    }

    /// A new controller with `config` replays the committed log and becomes active in the
    /// next epoch.
    fn fail_over(&mut self, config: QuorumControllerConfig) -> Result<(), String> {
        let mut next = QuorumController::new(config, 8);
        for batch in &self.log {
            next.handle_committed(self.now, batch).expect("replays");
        }
        self.epoch += 1;
        let end = self.log_end();
        next.handle_leader_change(self.now, true, self.epoch, end)
            .map_err(|e| e.to_string())?;
        self.controller = next;
        self.hold = false;
        self.drain();
        Ok(())
    }

    fn log_end(&self) -> i64 {
        self.log.last().map_or(0, |b| b.last_offset() + 1)
    }

    fn drain(&mut self) {
        while let Some(action) = self.controller.poll_action() {
            match action {
                ControllerAction::Append {
                    epoch,
                    base_offset,
                    records,
                } => {
                    assert_eq!(base_offset, self.log_end());
                    let batch = CommittedBatch {
                        base_offset,
                        epoch,
                        records,
                    };
                    self.log.push(batch.clone());
                    if !self.hold {
                        self.controller
                            .handle_committed(self.now, &batch)
                            .expect("replays");
                    }
                }
                ControllerAction::Respond { id, response } => self.responses.push((id, response)),
            }
        }
    }

    fn request(&mut self, request: ControllerRequest) -> ControllerResponse {
        let id = self.controller.handle_request(self.now, request);
        self.drain();
        let at = self
            .responses
            .iter()
            .position(|(i, _)| *i == id)
            .expect("answered");
        self.responses.remove(at).1
    }

    fn records(&self) -> Vec<MetadataRecord> {
        self.log
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.record.clone()))
            .collect()
    }

    fn migration_batch(&mut self, records: Vec<MetadataRecord>) -> ControllerResponse {
        self.request(ControllerRequest::MigrationRecords {
            leader_epoch: self.epoch,
            records: records
                .into_iter()
                .map(|r| ApiMessageAndVersion::new(r, 0))
                .collect(),
        })
    }
}

fn types(records: &[MetadataRecord]) -> Vec<MetadataRecordType> {
    records.iter().map(MetadataRecord::record_type).collect()
}

fn broker_registration(broker_id: i32, zk: bool) -> ControllerRequest {
    ControllerRequest::BrokerRegistration(
        BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
            .with_incarnation_id(Uuid::from_u64_pair(42, 1))
            .with_is_migrating_zk_broker(zk)
            .with_listeners(vec![
                Listener::default()
                    .with_name(StrBytes::from_static_str("PLAINTEXT"))
                    .with_host(StrBytes::from_static_str("localhost"))
                    .with_port(9092)
                    .with_security_protocol(0),
            ])
            .with_features(vec![
                Feature::default()
                    .with_name(StrBytes::from_static_str("metadata.version"))
                    .with_min_supported_version(1)
                    .with_max_supported_version(21),
            ])
            .with_log_dirs(vec![Uuid::from_u64_pair(7, 1000)]),
    )
}

/// CreateTopics of topic `t` (1 partition, RF 1).
fn create_request() -> ControllerRequest {
    ControllerRequest::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]))
}

fn topic_records(name: &str, id: Uuid) -> Vec<MetadataRecord> {
    vec![
        MetadataRecord::Topic(TopicRecord {
            name: name.to_owned(),
            topic_id: id,
            ..TopicRecord::default()
        }),
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: id,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 3,
            partition_epoch: 5,
            ..PartitionRecord::default()
        }),
    ]
}

fn begin() -> MetadataRecord {
    MetadataRecord::BeginTransaction(BeginTransactionRecord {
        name: Some("ZK Migration".to_owned()),
        ..BeginTransactionRecord::default()
    })
}

fn state(state: ZkMigrationState) -> MetadataRecord {
    MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
        zk_migration_state: state.value(),
        ..ZkMigrationStateRecord::default()
    })
}

fn end() -> MetadataRecord {
    MetadataRecord::EndTransaction(EndTransactionRecord::default())
}

#[test]
fn an_empty_log_with_migration_enabled_starts_in_pre_migration() {
    let node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let records = node.records();
    assert_eq!(
        types(&records),
        vec![
            MetadataRecordType::BeginTransaction,
            MetadataRecordType::FeatureLevel,
            MetadataRecordType::ZkMigrationState,
            MetadataRecordType::EndTransaction,
        ]
    );
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::PreMigration
    );
    // Without the flag: NONE, as before.
    let plain = Node::start(config(3000, false, MetadataVersion::IBP_3_9_IV0));
    assert_eq!(
        plain.controller.zk_migration_state(),
        ZkMigrationState::None
    );
}

#[test]
fn migration_needs_metadata_transactions_on_an_empty_log() {
    let mut controller = QuorumController::new(config(3000, true, MetadataVersion::IBP_3_5_IV2), 1);
    let error = controller
        .handle_leader_change(Instant::now(), true, 1, 0)
        .expect_err("3.5 has no metadata transactions");
    assert_eq!(
        error.to_string(),
        "The bootstrap metadata.version 3.5-IV2 does not support ZK migrations. Cannot continue with ZK migrations enabled."
    );
    assert!(controller.poll_action().is_none(), "nothing written");
    // Kafka 3.9 writes no migration state into a new log below 3.6-IV1.
    let old = Node::start(config(3000, false, MetadataVersion::IBP_3_5_IV2));
    assert_eq!(
        types(&old.records()),
        vec![MetadataRecordType::FeatureLevel]
    );
}

#[test]
fn pre_migration_runs_only_registration_heartbeats_and_the_copy() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let create = create_request();
    match node.request(create) {
        ControllerResponse::CreateTopics(r) => assert_eq!(
            r.topics[0].error_code,
            ControllerError::NotController.code(),
            "NOT_CONTROLLER in pre-migration"
        ),
        other => panic!("{other:?}"),
    }
    // A KRaft broker may not register before the metadata is migrated; a ZK broker may.
    let kraft = node.request(broker_registration(1, false));
    assert_eq!(
        top_level_error(&kraft),
        Some(ResponseError::BrokerIdNotRegistered)
    );
    let zk = node.request(broker_registration(1, true));
    assert_eq!(top_level_error(&zk), None);
    let image = node.controller.image();
    assert!(
        image
            .cluster
            .broker(1)
            .is_some_and(|b| b.is_migrating_zk_broker)
    );
    let controller = node.request(ControllerRequest::ControllerRegistration(
        ControllerRegistrationRequest::default()
            .with_controller_id(3000)
            .with_incarnation_id(Uuid::from_u64_pair(1, 2))
            .with_zk_migration_ready(true),
    ));
    assert_eq!(top_level_error(&controller), None);
    assert!(
        node.controller
            .image()
            .cluster
            .controllers
            .get(&3000)
            .is_some_and(|c| c.zk_migration_ready)
    );
}

#[test]
fn the_copy_commits_in_a_transaction_and_moves_to_migration() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let id = Uuid::from_u64_pair(9, 9);
    let mut last = None;
    for batch in [
        vec![begin()],
        topic_records("made-in-zk", id),
        vec![state(ZkMigrationState::Migration), end()],
    ] {
        match node.migration_batch(batch) {
            ControllerResponse::MigrationRecords(Ok(committed)) => last = Some(committed),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        last,
        Some(MigrationBatchCommitted {
            last_offset: node.log_end() - 1,
            epoch: 1
        })
    );
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::Migration
    );
    assert!(node.controller.open_transaction_offset().is_none());
    assert!(
        node.controller
            .committed_image()
            .topics
            .topic_by_name("made-in-zk")
            .is_some()
    );
    // Out of pre-migration, ordinary requests run again.
    let create = create_request();
    match node.request(create) {
        ControllerResponse::CreateTopics(r) => assert_ne!(
            r.topics[0].error_code,
            ControllerError::NotController.code()
        ),
        other => panic!("{other:?}"),
    }

    // Still migrating after a failover with the flag; finalized by one without it.
    node.fail_over(config(3001, true, MetadataVersion::IBP_3_9_IV0))
        .expect("stays in migration");
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::Migration
    );
    let before = node.log_end();
    node.fail_over(config(3002, false, MetadataVersion::IBP_3_9_IV0))
        .expect("finalizes");
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::PostMigration
    );
    assert_eq!(
        types(&node.records()[usize::try_from(before).expect("fits")..]),
        vec![MetadataRecordType::ZkMigrationState]
    );
    // The flag is ignored after finalization.
    node.fail_over(config(3000, true, MetadataVersion::IBP_3_9_IV0))
        .expect("ignored after finalization");
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::PostMigration
    );
}

#[test]
fn a_copy_left_open_by_a_failed_leader_is_aborted_by_the_next() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let id = Uuid::from_u64_pair(9, 9);
    node.migration_batch(vec![begin()]);
    node.migration_batch(topic_records("half-copied", id));
    assert_eq!(node.controller.open_transaction_offset(), Some(4));
    assert!(
        node.controller
            .image()
            .topics
            .topic_by_name("half-copied")
            .is_some()
    );
    // The leader dies; the next one aborts the transaction on activation.
    let before = node.log_end();
    node.fail_over(config(3001, true, MetadataVersion::IBP_3_9_IV0))
        .expect("activates");
    let written = &node.records()[usize::try_from(before).expect("fits")..];
    match written {
        [MetadataRecord::AbortTransaction(abort)] => {
            assert_eq!(abort.reason.as_deref(), Some("Controller failover"));
        }
        other => panic!("{other:?}"),
    }
    for image in [node.controller.image(), node.controller.committed_image()] {
        assert!(image.topics.topic_by_name("half-copied").is_none());
        assert_eq!(
            image.features.zk_migration_state,
            ZkMigrationState::PreMigration
        );
    }
    assert!(node.controller.open_transaction_offset().is_none());
    // The copy can be redone, with the same topic id.
    node.migration_batch(vec![begin()]);
    node.migration_batch(topic_records("half-copied", id));
    node.migration_batch(vec![state(ZkMigrationState::Migration), end()]);
    assert!(
        node.controller
            .committed_image()
            .topics
            .topic_by_name("half-copied")
            .is_some()
    );
    // A standby replaying the whole log agrees.
    let mut standby = QuorumController::new(config(3002, true, MetadataVersion::IBP_3_9_IV0), 3);
    for batch in &node.log {
        standby.handle_committed(node.now, batch).expect("replays");
    }
    assert_eq!(standby.image(), node.controller.committed_image());
}

#[test]
fn a_partial_bootstrap_is_aborted_and_written_again() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    // Keep only the bootstrap's first record (Begin): the leader died mid-bootstrap.
    let first = node.log[0].records[0].clone();
    node.log = vec![CommittedBatch {
        base_offset: 0,
        epoch: 1,
        records: vec![first],
    }];
    node.fail_over(config(3001, true, MetadataVersion::IBP_3_9_IV0))
        .expect("activates");
    assert_eq!(
        types(&node.records()),
        vec![
            MetadataRecordType::BeginTransaction,
            MetadataRecordType::AbortTransaction,
            MetadataRecordType::BeginTransaction,
            MetadataRecordType::FeatureLevel,
            MetadataRecordType::ZkMigrationState,
            MetadataRecordType::EndTransaction,
        ]
    );
    assert_eq!(
        node.controller.zk_migration_state(),
        ZkMigrationState::PreMigration
    );
}

#[test]
fn migration_on_a_cluster_created_in_kraft_mode_is_refused() {
    let mut node = Node::start(config(3000, false, MetadataVersion::IBP_3_9_IV0));
    let error = node
        .fail_over(config(3001, true, MetadataVersion::IBP_3_9_IV0))
        .expect_err("refused");
    assert_eq!(
        error,
        "Should not have ZK migrations enabled on a cluster that was created in KRaft mode."
    );
}

#[test]
fn migration_records_of_another_leader_epoch_are_refused() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let before = node.log_end();
    let response = node.request(ControllerRequest::MigrationRecords {
        leader_epoch: node.epoch + 1,
        records: vec![ApiMessageAndVersion::new(begin(), 0)],
    });
    assert!(
        matches!(
            response,
            ControllerResponse::MigrationRecords(Err(ControllerError::NotController))
        ),
        "{response:?}"
    );
    assert_eq!(node.log_end(), before, "nothing written");
}

#[test]
fn migration_records_that_do_not_fit_are_refused_and_not_written() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    let before = node.log_end();
    let orphan = MetadataRecord::Partition(PartitionRecord {
        partition_id: 0,
        topic_id: Uuid::from_u64_pair(1, 1),
        replicas: vec![1],
        isr: vec![1],
        leader: 1,
        ..PartitionRecord::default()
    });
    match node.migration_batch(vec![orphan]) {
        ControllerResponse::MigrationRecords(Err(ControllerError::InvalidMigrationRecords {
            reason,
        })) => assert!(reason.contains("no topic with id"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(node.log_end(), before, "nothing written");
}

#[test]
fn admin_writes_wait_while_zookeeper_lags_too_far_behind() {
    let mut node = Node::start(config(3000, true, MetadataVersion::IBP_3_9_IV0));
    node.migration_batch(vec![begin()]);
    node.migration_batch(vec![state(ZkMigrationState::Migration), end()]);
    let create = create_request;
    node.controller.set_zk_write_behind(101);
    let before = node.log_end();
    match node.request(create()) {
        ControllerResponse::CreateTopics(r) => {
            assert_eq!(
                r.topics[0].error_code,
                ResponseError::RequestTimedOut.code()
            );
            assert_eq!(
                r.topics[0].error_message.as_deref(),
                Some(
                    "ZooKeeper is 101 metadata records behind the metadata log (the limit is 100): admin writes wait until the migration's dual-write catches up."
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(node.log_end(), before, "nothing written");
    // Broker lifecycle goes on.
    assert_eq!(
        top_level_error(&node.request(broker_registration(1, true))),
        None
    );
    // At the bound, writes go through again.
    node.controller.set_zk_write_behind(100);
    match node.request(create()) {
        ControllerResponse::CreateTopics(r) => assert_ne!(
            r.topics[0].error_code,
            ResponseError::RequestTimedOut.code()
        ),
        other => panic!("{other:?}"),
    }
}
