//! The `QuorumController` driven the way the Raft driver will drive it, with virtual time: an
//! active controller and a standby share one simulated log; batches are appended at the
//! offsets the controller names, committed, and fed to both. After every step the harness
//! checks the invariants: every partition's leader is in its ISR and unfenced (or -1), leader
//! and partition epochs only grow, and the standby's image (plain replay of the committed log)
//! equals the active controller's committed image — and its full image once all is committed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_request::{self, PartitionData};
use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    AlterPartitionRequest, BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest,
    CreatePartitionsRequest, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    ElectLeadersRequest, IncrementalAlterConfigsRequest, TopicName, UnregisterBrokerRequest,
};
use kafka_protocol::protocol::StrBytes;
use krust_controller::heartbeat::HeartbeatConfig;
use krust_controller::quorum_controller::top_level_error;
use krust_controller::{
    CommittedBatch, ControllerAction, ControllerRequest, ControllerResponse, QuorumController,
    QuorumControllerConfig, RequestId,
};
use krust_metadata::records::MetadataRecord;
use krust_metadata::{BootstrapMetadata, MetadataImage, MetadataVersion};
use uuid::Uuid;

const CLUSTER_ID: &str = "J8qXRwI-Qyi2G0guFTiuYw";
const SESSION_MS: u64 = 9_000;

fn config(node_id: i32) -> QuorumControllerConfig {
    QuorumControllerConfig {
        node_id,
        cluster_id: CLUSTER_ID.to_owned(),
        heartbeat: HeartbeatConfig::default(),
        metadata_max_idle_interval_ms: 500,
        bootstrap: BootstrapMetadata::from_versions(
            MetadataVersion::IBP_3_9_IV0,
            &BTreeMap::new(),
            "test",
        )
        .expect("3.9 bootstraps"),
        default_num_partitions: 1,
        default_replication_factor: 1,
        kraft_version: 0,
        unclean_leader_election_interval_ms: 300_000,
        leader_imbalance_check_interval_ms: Some(300_000),
        topic_validation_defaults: krust_config::TopicValidationDefaults::default(),
        zk_migration_enabled: false,
        max_zk_write_behind: None,
    }
}

/// Two controllers over one log.
struct Sim {
    t0: Instant,
    now: Instant,
    controllers: Vec<QuorumController>,
    active: usize,
    epoch: i32,
    log: Vec<CommittedBatch>,
    committed: usize,
    responses: BTreeMap<RequestId, ControllerResponse>,
    /// (topic id, partition) → (leader epoch, partition epoch) last seen.
    epochs: BTreeMap<(Uuid, i32), (i32, i32)>,
}

impl Sim {
    fn new() -> Self {
        Self::with_config(config)
    }

    /// Both controllers configured by `config`.
    fn with_config(config: impl Fn(i32) -> QuorumControllerConfig) -> Self {
        let now = Instant::now();
        let mut sim = Self {
            t0: now,
            now,
            controllers: vec![
                QuorumController::new(config(3000), 1),
                QuorumController::new(config(3001), 2),
            ],
            active: 0,
            epoch: 1,
            log: Vec::new(),
            committed: 0,
            responses: BTreeMap::new(),
            epochs: BTreeMap::new(),
        };
        sim.controllers[0]
            .handle_leader_change(now, true, 1, 0)
            .expect("activation");
        sim.drain();
        sim.commit_all();
        sim
    }

    fn active(&self) -> &QuorumController {
        &self.controllers[self.active]
    }

    fn log_end(&self) -> i64 {
        self.log.last().map_or(0, |b| b.last_offset() + 1)
    }

    fn drain(&mut self) {
        while let Some(action) = self.controllers[self.active].poll_action() {
            match action {
                ControllerAction::Append {
                    epoch,
                    base_offset,
                    records,
                } => {
                    assert_eq!(epoch, self.epoch, "append in the current epoch");
                    assert_eq!(base_offset, self.log_end(), "append at the log end");
                    for record in &records {
                        let bytes = record.encode().expect("encodable");
                        assert_eq!(
                            &krust_metadata::ApiMessageAndVersion::decode(&bytes).expect("decodes"),
                            record
                        );
                    }
                    self.log.push(CommittedBatch {
                        base_offset,
                        epoch,
                        records,
                    });
                }
                ControllerAction::Respond { id, response } => {
                    assert!(
                        self.responses.insert(id, response).is_none(),
                        "one response"
                    );
                }
            }
        }
    }

    fn commit_all(&mut self) {
        for batch in &self.log[self.committed..] {
            for controller in &mut self.controllers {
                controller
                    .handle_committed(self.now, batch)
                    .expect("replays");
            }
        }
        self.committed = self.log.len();
        self.drain();
        self.check_invariants();
    }

    fn check_invariants(&mut self) {
        let active = &self.controllers[self.active];
        let standby = &self.controllers[1 - self.active];
        assert_eq!(
            standby.image(),
            active.committed_image(),
            "standby replay == active committed image"
        );
        if self.committed == self.log.len() {
            assert_eq!(active.image(), active.committed_image(), "all committed");
        }
        let image = active.image();
        for topic in image.topics.by_id.values() {
            for (&partition_id, p) in &topic.partitions {
                if p.leader != -1 {
                    assert!(
                        p.isr.contains(&p.leader),
                        "{}-{partition_id}: leader {} not in ISR {:?}",
                        topic.name,
                        p.leader,
                        p.isr
                    );
                    let broker = image.cluster.broker(p.leader).expect("leader registered");
                    assert!(
                        !broker.fenced,
                        "{}-{partition_id}: fenced leader {}",
                        topic.name, p.leader
                    );
                }
                assert!(!p.isr.is_empty(), "ISR never empty");
                let key = (topic.id, partition_id);
                if let Some(&(leader_epoch, partition_epoch)) = self.epochs.get(&key) {
                    assert!(p.leader_epoch >= leader_epoch, "leader epoch went back");
                    assert!(
                        p.partition_epoch >= partition_epoch,
                        "partition epoch went back"
                    );
                }
                self.epochs.insert(key, (p.leader_epoch, p.partition_epoch));
            }
        }
    }

    /// Sends a request, appends and commits what it wrote, and returns its response.
    fn request(&mut self, request: ControllerRequest) -> ControllerResponse {
        let id = self.controllers[self.active].handle_request(self.now, request);
        self.drain();
        self.commit_all();
        self.responses.remove(&id).expect("answered once committed")
    }

    fn advance(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        self.controllers[self.active].handle_timeout(self.now);
        self.drain();
        self.commit_all();
    }

    fn register(&mut self, broker_id: i32) -> i64 {
        let dir = Uuid::from_u64_pair(7, u64::try_from(broker_id).unwrap_or(0) + 1000);
        self.register_with_dirs(broker_id, vec![dir])
    }

    fn register_with_dirs(&mut self, broker_id: i32, log_dirs: Vec<Uuid>) -> i64 {
        let request = BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
            .with_incarnation_id(Uuid::from_u64_pair(
                42,
                u64::try_from(broker_id).unwrap_or(0),
            ))
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
            .with_log_dirs(log_dirs);
        match self.request(ControllerRequest::BrokerRegistration(request)) {
            ControllerResponse::BrokerRegistration(r) => {
                assert_eq!(r.error_code, 0, "registration of {broker_id}");
                r.broker_epoch
            }
            other => panic!("{other:?}"),
        }
    }

    fn heartbeat_with(
        &mut self,
        broker_id: i32,
        epoch: i64,
        want_shut_down: bool,
    ) -> kafka_protocol::messages::BrokerHeartbeatResponse {
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_broker_epoch(epoch)
            .with_want_shut_down(want_shut_down)
            .with_current_metadata_offset(self.active().committed_offset());
        match self.request(ControllerRequest::BrokerHeartbeat(request)) {
            ControllerResponse::BrokerHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn heartbeat(
        &mut self,
        broker_id: i32,
        epoch: i64,
    ) -> kafka_protocol::messages::BrokerHeartbeatResponse {
        self.heartbeat_with(broker_id, epoch, false)
    }

    /// Registers and unfences brokers 1..=n; returns their epochs.
    fn brokers(&mut self, n: i32) -> BTreeMap<i32, i64> {
        let epochs: BTreeMap<i32, i64> = (1..=n).map(|id| (id, self.register(id))).collect();
        for (&id, &epoch) in &epochs {
            let reply = self.heartbeat(id, epoch);
            assert_eq!(reply.error_code, 0);
            assert!(!reply.is_fenced, "broker {id} unfenced once caught up");
        }
        epochs
    }

    fn create(&mut self, topic: CreatableTopic, validate_only: bool) -> CreateTopicsResponse {
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_validate_only(validate_only);
        match self.request(ControllerRequest::CreateTopics(request)) {
            ControllerResponse::CreateTopics(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn image(&self) -> &MetadataImage {
        self.active().image()
    }
}

fn topic(name: &str, partitions: i32, rf: i16) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_owned())))
        .with_num_partitions(partitions)
        .with_replication_factor(rf)
}

#[test]
fn first_activation_bootstraps_in_a_transaction_and_the_standby_follows() {
    let sim = Sim::new();
    let kinds: Vec<&str> = sim.log[0]
        .records
        .iter()
        .map(|r| r.record.record_type().name())
        .collect();
    assert_eq!(
        kinds,
        [
            "BEGIN_TRANSACTION_RECORD",
            "FEATURE_LEVEL_RECORD",
            "ZK_MIGRATION_STATE_RECORD",
            "END_TRANSACTION_RECORD"
        ]
    );
    assert_eq!(sim.image().metadata_version(), MetadataVersion::IBP_3_9_IV0);
    assert_eq!(sim.controllers[1].image(), sim.image());
}

#[test]
fn noop_records_are_written_every_idle_interval_while_active() {
    let mut sim = Sim::new();
    let due = sim.active().poll_timeout().expect("a timer while active");
    assert_eq!(due, sim.now + Duration::from_millis(500));
    assert_eq!(
        sim.controllers[1].poll_timeout(),
        None,
        "a standby has no timers"
    );
    let before = sim.log.len();
    sim.advance(500);
    assert_eq!(sim.log.len(), before + 1);
    assert!(matches!(
        sim.log[before].records[0].record,
        MetadataRecord::NoOp(_)
    ));
}

#[test]
fn a_standby_refuses_requests_with_not_controller() {
    let mut sim = Sim::new();
    let id = sim.controllers[1].handle_request(
        sim.now,
        ControllerRequest::CreateTopics(
            CreateTopicsRequest::default().with_topics(vec![topic("a", 1, 1)]),
        ),
    );
    match sim.controllers[1].poll_action() {
        Some(ControllerAction::Respond {
            id: got,
            response: ControllerResponse::CreateTopics(r),
        }) => {
            assert_eq!(got, id);
            assert_eq!(r.topics[0].error_code, 41);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn registration_then_heartbeat_unfences_and_stale_epochs_are_refused() {
    let mut sim = Sim::new();
    let epoch = sim.register(1);
    assert!(sim.image().cluster.broker(1).expect("registered").fenced);
    assert_eq!(
        epoch,
        sim.log_end() - 1,
        "broker epoch is the record's offset"
    );
    let reply = sim.heartbeat(1, epoch);
    assert!(!reply.is_fenced && reply.is_caught_up);
    assert!(!sim.image().cluster.broker(1).expect("registered").fenced);
    let stale = sim.heartbeat(1, epoch - 1);
    assert_eq!(stale.error_code, 77, "STALE_BROKER_EPOCH");
}

#[test]
fn topic_lifecycle_and_bad_requests_write_nothing() {
    let mut sim = Sim::new();
    sim.brokers(3);
    let created = sim.create(topic("foo", 6, 3), false);
    let result = &created.topics[0];
    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    let foo = sim
        .image()
        .topics
        .topic_by_name("foo")
        .expect("created")
        .clone();
    assert_eq!(foo.id, result.topic_id);
    assert_eq!(foo.partitions.len(), 6);
    for p in foo.partitions.values() {
        assert_eq!(p.replicas.len(), 3);
        assert_eq!(p.isr, p.replicas, "all replicas unfenced: full ISR");
        assert_eq!(p.leader, p.replicas[0]);
    }

    let absurd = i32::try_from(10_i64.pow(9)).expect("fits");
    let long = "x".repeat(250);
    let cases: Vec<(CreatableTopic, i16, &str)> = vec![
        (topic("foo", 1, 1), 36, "TOPIC_ALREADY_EXISTS"),
        (topic("f.o", 1, 1), 0, "fine"),
        (topic("f_o", 1, 1), 17, "collides with f.o"),
        (topic("", 1, 1), 17, "empty name"),
        (topic(&long, 1, 1), 17, "too long"),
        (topic("a b", 1, 1), 17, "illegal char"),
        (topic("__cluster_metadata", 1, 1), 42, "reserved"),
        (topic("big", absurd, 1), 37, "absurd partition count"),
        (topic("zero", 0, 1), 37, "zero partitions"),
        (topic("rf0", 1, 0), 38, "zero replication factor"),
        (topic("rf9", 1, 9), 38, "more replicas than brokers"),
        (
            topic("manual", 1, 1).with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(1)]),
            ]),
            42,
            "assignments need -1 counts",
        ),
        (
            topic("manual", -1, -1).with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(9)]),
            ]),
            39,
            "unregistered broker",
        ),
        (
            topic("conf", 1, 1).with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("unclean.leader.election.enable"))
                    .with_value(Some(StrBytes::from_static_str("maybe"))),
            ]),
            40,
            "bad boolean",
        ),
    ];
    for (request, code, why) in cases {
        let before = sim.log.len();
        let response = sim.create(request, false);
        assert_eq!(
            response.topics[0].error_code, code,
            "{why}: {:?}",
            response.topics[0].error_message
        );
        if code != 0 {
            assert_eq!(sim.log.len(), before, "{why}: no records");
        }
    }

    let before = sim.log.len();
    let dry = sim.create(topic("dry", 3, 2), true);
    assert_eq!(dry.topics[0].error_code, 0);
    assert_eq!(dry.topics[0].num_partitions, 3);
    assert_eq!(sim.log.len(), before, "validateOnly writes nothing");
    assert!(sim.image().topics.topic_by_name("dry").is_none());

    let manual = sim.create(
        topic("manual", -1, -1).with_assignments(vec![
            CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(3), BrokerId(1)]),
        ]),
        false,
    );
    assert_eq!(manual.topics[0].error_code, 0);
    let p = sim
        .image()
        .topics
        .topic_by_name("manual")
        .expect("created")
        .partitions[&0]
        .clone();
    assert_eq!((p.leader, p.replicas.clone()), (3, vec![3, 1]));

    let delete = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_static_str("foo"))])
        .with_topics(vec![
            DeleteTopicState::default().with_topic_id(Uuid::from_u64_pair(1, 2)),
            DeleteTopicState::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("nope")))),
        ]);
    match sim.request(ControllerRequest::DeleteTopics(delete)) {
        ControllerResponse::DeleteTopics(r) => {
            // Kafka shuffles the results (so that their positions tell nothing): compare sorted.
            let mut codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
            codes.sort_unstable();
            assert_eq!(codes, [0, 3, 100]);
            let deleted = r.responses.iter().find(|t| t.error_code == 0).expect("foo");
            assert_eq!(deleted.topic_id, foo.id);
        }
        other => panic!("{other:?}"),
    }
    assert!(sim.image().topics.topic_by_name("foo").is_none());
    assert!(sim.image().topics.topic(foo.id).is_none());
}

#[test]
fn session_expiry_fences_the_broker_and_moves_its_leaderships() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(3);
    assert_eq!(sim.create(topic("t", 9, 3), false).topics[0].error_code, 0);
    // Brokers 1 and 2 keep heartbeating; 3 goes silent.
    for _ in 0..5 {
        sim.advance(2_000);
        for id in [1, 2] {
            assert!(!sim.heartbeat(id, epochs[&id]).is_fenced);
        }
    }
    assert!(sim.image().cluster.broker(3).expect("registered").fenced);
    assert!(!sim.image().cluster.broker(1).expect("registered").fenced);
    let t = sim
        .image()
        .topics
        .topic_by_name("t")
        .expect("exists")
        .clone();
    for p in t.partitions.values() {
        assert_ne!(p.leader, 3, "no leadership left on the fenced broker");
        assert!(!p.isr.contains(&3), "fenced broker left every ISR");
    }
    assert_eq!(
        sim.active().sessions().timed_out_broker_heartbeat_count(),
        1
    );
    let _ = SESSION_MS;

    // It comes back: the heartbeat unfences it; it rejoins ISRs only via AlterPartition.
    let reply = sim.heartbeat(3, epochs[&3]);
    assert!(!reply.is_fenced);
}

#[test]
fn last_replica_fenced_leaves_the_partition_leaderless_until_it_returns() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("solo", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(1, epochs[&1]);
    }
    let p = sim
        .image()
        .topics
        .topic_by_name("solo")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!(p.leader, -1);
    assert_eq!(p.isr, vec![2], "the last ISR member stays");
    sim.heartbeat(2, epochs[&2]);
    let p = sim
        .image()
        .topics
        .topic_by_name("solo")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!(p.leader, 2, "unfencing elects it again");
}

#[test]
fn controlled_shutdown_moves_leadership_then_allows_shutdown() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(3);
    assert_eq!(sim.create(topic("t", 6, 3), false).topics[0].error_code, 0);
    let reply = sim.heartbeat_with(1, epochs[&1], true);
    assert!(!reply.should_shut_down, "first it moves leaderships");
    let t = sim
        .image()
        .topics
        .topic_by_name("t")
        .expect("exists")
        .clone();
    for p in t.partitions.values() {
        assert_ne!(p.leader, 1);
        assert!(!p.isr.contains(&1));
    }
    assert!(
        sim.image()
            .cluster
            .broker(1)
            .expect("registered")
            .in_controlled_shutdown
    );
    // The others catch up past the shutdown batch.
    sim.heartbeat(2, epochs[&2]);
    sim.heartbeat(3, epochs[&3]);
    let reply = sim.heartbeat_with(1, epochs[&1], true);
    assert!(reply.should_shut_down, "then it may stop");
    assert!(sim.image().cluster.broker(1).expect("registered").fenced);

    let unregister = UnregisterBrokerRequest::default().with_broker_id(BrokerId(1));
    let response = sim.request(ControllerRequest::UnregisterBroker(unregister));
    assert_eq!(top_level_error(&response), None);
    assert!(sim.image().cluster.broker(1).is_none());
}

fn alter(
    broker: i32,
    broker_epoch: i64,
    topic_id: Uuid,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[i32],
) -> ControllerRequest {
    ControllerRequest::AlterPartition(
        AlterPartitionRequest::default()
            .with_broker_id(BrokerId(broker))
            .with_broker_epoch(broker_epoch)
            .with_topics(vec![
                alter_partition_request::TopicData::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![
                        PartitionData::default()
                            .with_partition_index(0)
                            .with_leader_epoch(leader_epoch)
                            .with_partition_epoch(partition_epoch)
                            .with_new_isr(isr.iter().copied().map(BrokerId).collect()),
                    ]),
            ]),
    )
}

fn partition_code(response: &ControllerResponse) -> i16 {
    match response {
        ControllerResponse::AlterPartition(r) => {
            if r.error_code != 0 {
                return r.error_code;
            }
            r.topics[0].partitions[0].error_code
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn alter_partition_checks_epochs_and_eligibility() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(3);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;

    // The leader shrinks the ISR.
    let ok = sim.request(alter(1, epochs[&1], id, 0, 0, &[1, 2]));
    assert_eq!(partition_code(&ok), 0);
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(
        (p.isr.clone(), p.leader_epoch, p.partition_epoch),
        (vec![1, 2], 0, 1)
    );
    if let ControllerResponse::AlterPartition(r) = &ok {
        assert_eq!(r.topics[0].partitions[0].partition_epoch, 1);
    }

    let cases = [
        (
            alter(1, epochs[&1] - 1, id, 0, 1, &[1]),
            77,
            "stale broker epoch",
        ),
        (
            alter(1, epochs[&1], id, 0, 0, &[1]),
            95,
            "stale partition epoch",
        ),
        (
            alter(2, epochs[&2], id, 0, 1, &[1, 2]),
            42,
            "not the leader",
        ),
        (
            alter(1, epochs[&1], id, 1, 1, &[1]),
            41,
            "newer leader epoch than the controller",
        ),
        (
            alter(1, epochs[&1], id, 0, 1, &[2, 3]),
            42,
            "ISR without the leader",
        ),
        (
            alter(1, epochs[&1], Uuid::from_u64_pair(5, 5), 0, 1, &[1]),
            100,
            "unknown topic id",
        ),
    ];
    for (request, code, why) in cases {
        let before = sim.log.len();
        let response = sim.request(request);
        assert_eq!(partition_code(&response), code, "{why}");
        assert_eq!(sim.log.len(), before, "{why}: no records");
    }

    // Broker 3 goes silent and is fenced: it may not rejoin the ISR.
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(1, epochs[&1]);
        sim.heartbeat(2, epochs[&2]);
    }
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    let response = sim.request(alter(
        1,
        epochs[&1],
        id,
        p.leader_epoch,
        p.partition_epoch,
        &[1, 2, 3],
    ));
    assert_eq!(partition_code(&response), 107, "INELIGIBLE_REPLICA");

    // AlterPartition v3 names each replica's broker epoch: a stale one is ineligible.
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    let with_epochs = ControllerRequest::AlterPartition(
        AlterPartitionRequest::default()
            .with_broker_id(BrokerId(1))
            .with_broker_epoch(epochs[&1])
            .with_topics(vec![
                alter_partition_request::TopicData::default()
                    .with_topic_id(id)
                    .with_partitions(vec![
                        PartitionData::default()
                            .with_leader_epoch(p.leader_epoch)
                            .with_partition_epoch(p.partition_epoch)
                            .with_new_isr_with_epochs(vec![
                                alter_partition_request::BrokerState::default()
                                    .with_broker_id(BrokerId(1))
                                    .with_broker_epoch(epochs[&1]),
                                alter_partition_request::BrokerState::default()
                                    .with_broker_id(BrokerId(2))
                                    .with_broker_epoch(epochs[&2] - 1),
                            ]),
                    ]),
            ]),
    );
    assert_eq!(
        partition_code(&sim.request(with_epochs)),
        107,
        "stale replica epoch"
    );

    // An old leader epoch after a leadership move: FENCED_LEADER_EPOCH.
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(2, epochs[&2]);
    }
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.leader, 2, "leadership moved off silent broker 1");
    let response = sim.request(alter(
        2,
        epochs[&2],
        id,
        p.leader_epoch - 1,
        p.partition_epoch,
        &[2],
    ));
    assert_eq!(partition_code(&response), 74, "FENCED_LEADER_EPOCH");
}

#[test]
fn failover_fails_uncommitted_requests_and_the_new_controller_resumes_from_its_image() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(3);
    assert_eq!(
        sim.create(topic("kept", 3, 3), false).topics[0].error_code,
        0
    );

    // A request whose records never commit.
    let id = sim.controllers[0].handle_request(
        sim.now,
        ControllerRequest::CreateTopics(
            CreateTopicsRequest::default().with_topics(vec![topic("lost", 1, 1)]),
        ),
    );
    sim.drain();
    assert!(
        !sim.responses.contains_key(&id),
        "not answered before commit"
    );
    assert!(
        sim.controllers[0]
            .image()
            .topics
            .topic_by_name("lost")
            .is_some()
    );
    sim.log.truncate(sim.committed); // the new leader's log does not have it
    sim.controllers[0]
        .handle_leader_change(sim.now, false, 2, 0)
        .expect("activation");
    sim.drain();
    match sim.responses.remove(&id) {
        Some(ControllerResponse::CreateTopics(r)) => assert_eq!(r.topics[0].error_code, 41),
        other => panic!("{other:?}"),
    }
    assert!(
        sim.controllers[0]
            .image()
            .topics
            .topic_by_name("lost")
            .is_none()
    );
    assert_eq!(
        sim.controllers[0].image(),
        sim.controllers[1].image(),
        "both back to the committed image"
    );

    // Controller 3001 takes over.
    sim.epoch = 2;
    sim.active = 1;
    let end = sim.log_end();
    sim.controllers[1]
        .handle_leader_change(sim.now, true, 2, end)
        .expect("activation");
    sim.drain();
    assert_eq!(sim.log_end(), end, "no bootstrap on a non-empty log");
    for (&broker, &epoch) in &epochs {
        assert_eq!(
            sim.heartbeat(broker, epoch).error_code,
            0,
            "sessions known to the new controller"
        );
    }
    assert_eq!(
        sim.create(topic("after", 2, 2), false).topics[0].error_code,
        0
    );
    assert!(sim.image().topics.topic_by_name("kept").is_some());
    let stale = sim.heartbeat(1, epochs[&1] + 1000);
    assert_eq!(
        top_level_error(&ControllerResponse::BrokerHeartbeat(stale)),
        Some(ResponseError::StaleBrokerEpoch)
    );
}

#[test]
fn unclean_election_only_when_the_topic_allows_it() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    for (name, unclean) in [("clean", "false"), ("dirty", "true")] {
        let request = topic(name, -1, -1)
            .with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
            ])
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("unclean.leader.election.enable"))
                    .with_value(Some(StrBytes::from_string(unclean.to_owned()))),
            ]);
        assert_eq!(sim.create(request, false).topics[0].error_code, 0);
        let id = sim.image().topics.topic_by_name(name).expect("exists").id;
        // Leader 1 drops 2 from the ISR.
        assert_eq!(
            partition_code(&sim.request(alter(1, epochs[&1], id, 0, 0, &[1]))),
            0
        );
    }
    // Broker 1 goes silent and is fenced; broker 2 stays.
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(2, epochs[&2]);
    }
    let clean = sim
        .image()
        .topics
        .topic_by_name("clean")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!((clean.leader, clean.isr.clone()), (-1, vec![1]));
    let dirty = sim
        .image()
        .topics
        .topic_by_name("dirty")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!((dirty.leader, dirty.isr.clone()), (2, vec![2]));
    assert_eq!(dirty.leader_recovery_state.value(), 1, "RECOVERING");
}

fn add_partitions(
    sim: &mut Sim,
    name: &str,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
) -> i16 {
    let topic = CreatePartitionsTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_owned())))
        .with_count(count)
        .with_assignments(assignments.map(|lists| {
            lists
                .into_iter()
                .map(|l| {
                    CreatePartitionsAssignment::default()
                        .with_broker_ids(l.into_iter().map(BrokerId).collect())
                })
                .collect()
        }));
    let request = CreatePartitionsRequest::default().with_topics(vec![topic]);
    match sim.request(ControllerRequest::CreatePartitions(request)) {
        ControllerResponse::CreatePartitions(r) => r.results[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// (topic, new count, assignments, expected code, why).
type GrowCase = (&'static str, i32, Option<Vec<Vec<i32>>>, i16, &'static str);

#[test]
fn create_partitions_grows_a_topic_and_refuses_shrinks_and_bad_assignments() {
    let mut sim = Sim::new();
    sim.brokers(3);
    assert_eq!(sim.create(topic("t", 2, 2), false).topics[0].error_code, 0);
    let cases: [GrowCase; 6] = [
        ("t", 1, None, 37, "a decrease"),
        ("t", 2, None, 37, "no increase"),
        ("t", 1_000_000_000, None, 37, "absurd count"),
        ("nope", 3, None, 3, "unknown topic"),
        ("t", 3, Some(vec![vec![1]]), 39, "wrong replication factor"),
        ("t", 4, Some(vec![vec![1, 2]]), 39, "too few assignments"),
    ];
    for (name, count, assignments, code, why) in cases {
        let before = sim.log.len();
        assert_eq!(
            add_partitions(&mut sim, name, count, assignments),
            code,
            "{why}"
        );
        assert_eq!(sim.log.len(), before, "{why}: no records");
    }
    assert_eq!(add_partitions(&mut sim, "t", 3, Some(vec![vec![3, 1]])), 0);
    assert_eq!(add_partitions(&mut sim, "t", 5, None), 0);
    let t = sim
        .image()
        .topics
        .topic_by_name("t")
        .expect("exists")
        .clone();
    assert_eq!(t.partitions.len(), 5);
    assert_eq!(t.partitions[&2].replicas, vec![3, 1]);
    assert!(t.partitions.values().all(|p| p.replicas.len() == 2));
}

#[test]
fn preferred_election_returns_leadership_after_a_broker_comes_back() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let elect = |election_type: i8| {
        ControllerRequest::ElectLeaders(
            ElectLeadersRequest::default()
                .with_election_type(election_type)
                .with_topic_partitions(Some(vec![
                    TopicPartitions::default()
                        .with_topic(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(vec![0, 7]),
                ])),
        )
    };
    let codes = |response: ControllerResponse| match response {
        ControllerResponse::ElectLeaders(r) => r.replica_election_results[0]
            .partition_result
            .iter()
            .map(|p| p.error_code)
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        codes(sim.request(elect(0))),
        [84, 3],
        "already preferred; unknown partition"
    );
    // Broker 1 is fenced; leadership moves to 2. It returns and rejoins the ISR.
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(2, epochs[&2]);
    }
    sim.heartbeat(1, epochs[&1]);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.leader, 2);
    assert_eq!(
        partition_code(&sim.request(alter(
            2,
            epochs[&2],
            id,
            p.leader_epoch,
            p.partition_epoch,
            &[2, 1]
        ))),
        0
    );
    assert_eq!(codes(sim.request(elect(0))), [0, 3]);
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.leader, 1, "preferred leader restored");
    assert_eq!(
        codes(sim.request(elect(1))),
        [84, 3],
        "unclean not needed with a leader"
    );
    let bad = sim.request(elect(5));
    assert_eq!(top_level_error(&bad), Some(ResponseError::InvalidRequest));
}

/// A seeded random walk over every request kind, clock jumps and failovers; the harness
/// checks the invariants after every commit. `KRUST_SIM_SEED=n` reruns one seed.
#[test]
fn random_operations_keep_the_invariants() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let seeds: Vec<u64> = match std::env::var("KRUST_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("KRUST_SIM_SEED is a number")],
        Err(_) => (0..32).collect(),
    };
    for seed in seeds {
        let result = std::panic::catch_unwind(|| random_walk(seed));
        if let Err(panic) = result {
            eprintln!(
                "rerun: KRUST_SIM_SEED={seed} cargo test -p krust-controller random_operations"
            );
            std::panic::resume_unwind(panic);
        }
    }

    fn random_walk(seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sim = Sim::new();
        let mut epochs: BTreeMap<i32, i64> = BTreeMap::new();
        let names = ["a", "b", "c", "d"];
        for _ in 0..300 {
            let broker = rng.gen_range(1..=4);
            match rng.gen_range(0..14) {
                0 => {
                    let epoch = sim.register(broker);
                    epochs.insert(broker, epoch);
                }
                1..=3 => {
                    if let Some(&epoch) = epochs.get(&broker) {
                        let reply = sim.heartbeat_with(broker, epoch, rng.gen_bool(0.05));
                        if reply.should_shut_down {
                            epochs.remove(&broker);
                        }
                    }
                }
                4 => sim.advance(rng.gen_range(0..4_000)),
                5 => {
                    let name = names[rng.gen_range(0..names.len())];
                    sim.create(topic(name, rng.gen_range(1..4), rng.gen_range(1..4)), false);
                }
                6 => {
                    let name = names[rng.gen_range(0..names.len())];
                    sim.request(ControllerRequest::DeleteTopics(
                        DeleteTopicsRequest::default()
                            .with_topic_names(vec![TopicName(StrBytes::from_static_str(name))]),
                    ));
                }
                7 => {
                    // The leader of some partition changes its ISR.
                    let image = sim.image().clone();
                    let Some(t) = image.topics.by_id.values().next() else {
                        continue;
                    };
                    let Some(p) = t.partitions.get(&0) else {
                        continue;
                    };
                    let Some(&epoch) = epochs.get(&p.leader) else {
                        continue;
                    };
                    let mut isr: Vec<i32> = p
                        .replicas
                        .iter()
                        .copied()
                        .filter(|&r| r == p.leader || rng.gen_bool(0.5))
                        .collect();
                    if rng.gen_bool(0.2) {
                        isr.retain(|&r| r != p.leader);
                    }
                    sim.request(alter(
                        p.leader,
                        epoch,
                        t.id,
                        p.leader_epoch,
                        p.partition_epoch - i32::from(rng.gen_bool(0.1)),
                        &isr,
                    ));
                }
                8 => {
                    sim.request(ControllerRequest::ElectLeaders(
                        ElectLeadersRequest::default().with_election_type(rng.gen_range(0..2)),
                    ));
                }
                10 => {
                    let name = names[rng.gen_range(0..names.len())];
                    add_partitions(&mut sim, name, rng.gen_range(1..6), None);
                }
                11 => {
                    let name = names[rng.gen_range(0..names.len())];
                    let value = if rng.gen_bool(0.5) { "true" } else { "false" };
                    alter_configs(
                        &mut sim,
                        2,
                        name,
                        0,
                        "unclean.leader.election.enable",
                        Some(value),
                        false,
                    );
                }
                12 => {
                    if rng.gen_bool(0.3) {
                        sim.request(ControllerRequest::UnregisterBroker(
                            UnregisterBrokerRequest::default().with_broker_id(BrokerId(broker)),
                        ));
                        epochs.remove(&broker);
                    }
                }
                _ => {
                    if rng.gen_bool(0.2) {
                        let old = sim.active;
                        sim.controllers[old]
                            .handle_leader_change(sim.now, false, sim.epoch, 0)
                            .expect("activation");
                        sim.drain();
                        sim.epoch += 1;
                        sim.active = 1 - old;
                        let end = sim.log_end();
                        let epoch = sim.epoch;
                        sim.controllers[sim.active]
                            .handle_leader_change(sim.now, true, epoch, end)
                            .expect("activation");
                        sim.drain();
                        sim.commit_all();
                    }
                }
            }
        }
    }
}

fn alter_configs(
    sim: &mut Sim,
    resource_type: i8,
    name: &str,
    op: i8,
    key: &str,
    value: Option<&str>,
    validate_only: bool,
) -> i16 {
    let request = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name.to_owned()))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string(key.to_owned()))
                        .with_config_operation(op)
                        .with_value(value.map(|v| StrBytes::from_string(v.to_owned()))),
                ]),
        ]);
    match sim.request(ControllerRequest::IncrementalAlterConfigs(request)) {
        ControllerResponse::IncrementalAlterConfigs(r) => r.responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[test]
fn incremental_alter_configs_sets_and_deletes_topic_and_broker_configs() {
    use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
    let mut sim = Sim::new();
    sim.brokers(1);
    assert_eq!(sim.create(topic("t", 1, 1), false).topics[0].error_code, 0);
    let unclean = "unclean.leader.election.enable";
    let cases = [
        (2, "nope", 0, unclean, Some("true"), 3, "unknown topic"),
        (2, "t", 0, unclean, Some("maybe"), 40, "not a boolean"),
        (2, "t", 9, unclean, Some("true"), 42, "unknown operation"),
        (2, "t", 0, "retention.ms", Some("-5"), 40, "out of range"),
        (
            2,
            "t",
            0,
            "no.such.config",
            Some("1"),
            40,
            "unknown topic config",
        ),
        (
            2,
            "t",
            2,
            unclean,
            Some("x"),
            40,
            "APPEND to a key that is not a LIST",
        ),
        (
            4,
            "1",
            0,
            "broker.id",
            Some("3"),
            42,
            "a read-only broker config",
        ),
        (
            4,
            "1",
            0,
            "message.max.bytes",
            Some("x"),
            42,
            "a broker value of the wrong type",
        ),
        (
            4,
            "x",
            0,
            "log.retention.ms",
            Some("1"),
            42,
            "non-integral broker id",
        ),
        (
            4,
            "7",
            0,
            "log.retention.ms",
            Some("1"),
            102,
            "unregistered broker",
        ),
        (3, "g", 0, "a", Some("1"), 42, "not a controller resource"),
    ];
    for (resource_type, name, op, key, value, code, why) in cases {
        let before = sim.log.len();
        assert_eq!(
            alter_configs(&mut sim, resource_type, name, op, key, value, false),
            code,
            "{why}"
        );
        assert_eq!(sim.log.len(), before, "{why}: no records");
    }
    let before = sim.log.len();
    assert_eq!(
        alter_configs(&mut sim, 2, "t", 0, unclean, Some("true"), true),
        0
    );
    assert_eq!(sim.log.len(), before, "validateOnly writes nothing");
    // As in Kafka's controller, SET without a value deletes (a broker refuses it before
    // forwarding): nothing was set, so nothing is written.
    assert_eq!(alter_configs(&mut sim, 2, "t", 0, unclean, None, false), 0);
    assert_eq!(
        sim.log.len(),
        before,
        "deleting an unset key writes nothing"
    );

    assert_eq!(
        alter_configs(&mut sim, 2, "t", 0, unclean, Some("true"), false),
        0
    );
    let topic_configs = sim.image().configs.configs(&ConfigResource::topic("t"));
    assert_eq!(topic_configs.get(unclean).map(String::as_str), Some("true"));
    assert_eq!(
        alter_configs(&mut sim, 4, "", 0, "log.retention.ms", Some("5"), false),
        0
    );
    assert_eq!(
        alter_configs(&mut sim, 4, "1", 2, "metric.reporters", Some("x,y"), false),
        0
    );
    assert_eq!(
        alter_configs(&mut sim, 4, "1", 3, "metric.reporters", Some("x"), false),
        0
    );
    let broker = ConfigResource {
        resource_type: ConfigResourceType::BROKER,
        name: "1".to_owned(),
    };
    assert_eq!(
        sim.image()
            .configs
            .configs(&broker)
            .get("metric.reporters")
            .map(String::as_str),
        Some("y")
    );
    // APPEND to an unset LIST starts from Kafka's default (`cleanup.policy` is `delete`).
    assert_eq!(
        alter_configs(
            &mut sim,
            2,
            "t",
            2,
            "cleanup.policy",
            Some("compact"),
            false
        ),
        0
    );
    let topic_configs = sim.image().configs.configs(&ConfigResource::topic("t"));
    assert_eq!(
        topic_configs.get("cleanup.policy").map(String::as_str),
        Some("delete,compact")
    );
    assert_eq!(alter_configs(&mut sim, 2, "t", 1, unclean, None, false), 0);
    let topic_configs = sim.image().configs.configs(&ConfigResource::topic("t"));
    assert_eq!(topic_configs.get(unclean), None, "deleted");
}

#[test]
fn an_offline_log_directory_moves_leadership_off_its_partitions() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let dir = sim
        .image()
        .cluster
        .broker(1)
        .expect("registered")
        .directories[0];
    let p = sim
        .image()
        .topics
        .topic_by_name("t")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!(
        p.directory(1),
        Some(dir),
        "a one-directory broker's replica lives there"
    );
    let request = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(1))
        .with_broker_epoch(epochs[&1])
        .with_current_metadata_offset(sim.active().committed_offset())
        .with_offline_log_dirs(vec![dir]);
    let response = sim.request(ControllerRequest::BrokerHeartbeat(request));
    assert_eq!(top_level_error(&response), None);
    let p = sim
        .image()
        .topics
        .topic_by_name("t")
        .expect("exists")
        .partitions[&0]
        .clone();
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    // (Its only directory going offline leaves `LogDirs` empty, which the record format
    // reads as "unchanged"; a broker without directories shuts itself down.)
}

#[test]
fn a_controller_loaded_from_a_snapshot_activates_without_bootstrapping() {
    use krust_metadata::MetadataProvenance;
    let mut sim = Sim::new();
    sim.brokers(2);
    assert_eq!(sim.create(topic("t", 2, 2), false).topics[0].error_code, 0);
    let image = sim.image().clone();
    let records = image
        .to_records(image.metadata_version())
        .expect("writable at its own version");
    let mut restored = QuorumController::new(config(3002), 9);
    let provenance = MetadataProvenance::new(sim.log_end() - 1, 1, 0);
    restored
        .handle_snapshot(sim.now, &records, provenance)
        .expect("loads");
    assert_eq!(restored.image().topics, image.topics);
    assert_eq!(restored.image().cluster, image.cluster);
    restored
        .handle_leader_change(sim.now, true, 2, sim.log_end())
        .expect("activation");
    assert_eq!(restored.poll_action(), None, "no bootstrap over a snapshot");
    assert!(
        restored.sessions().broker_epoch(1).is_some(),
        "sessions rebuilt from the image"
    );
}

#[test]
fn producer_id_blocks_and_feature_updates_go_through_the_log() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::{AllocateProducerIdsRequest, UpdateFeaturesRequest};
    let mut sim = Sim::new();
    let epochs = sim.brokers(1);
    let allocate = |epoch: i64| {
        ControllerRequest::AllocateProducerIds(
            AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(1))
                .with_broker_epoch(epoch),
        )
    };
    for first in [0, 1000] {
        match sim.request(allocate(epochs[&1])) {
            ControllerResponse::AllocateProducerIds(r) => {
                assert_eq!(
                    (r.error_code, r.producer_id_start.0, r.producer_id_len),
                    (0, first, 1000)
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(sim.image().producer_ids.next_producer_id, 2000);
    let stale = sim.request(allocate(epochs[&1] + 1));
    assert_eq!(
        top_level_error(&stale),
        Some(ResponseError::StaleBrokerEpoch)
    );

    let update = |level: i16| ControllerRequest::UpdateFeatures {
        request: UpdateFeaturesRequest::default().with_feature_updates(vec![
            FeatureUpdateKey::default()
                .with_feature(StrBytes::from_static_str("metadata.version"))
                .with_max_version_level(level)
                .with_upgrade_type(1),
        ]),
        version: 1,
    };
    let code = |response: ControllerResponse| match response {
        ControllerResponse::UpdateFeatures(r) => r.results[0].error_code,
        other => panic!("{other:?}"),
    };
    let before = sim.log.len();
    assert_eq!(code(sim.request(update(22))), 95, "no broker supports 22");
    assert_eq!(sim.log.len(), before, "refused: no records");
    assert_eq!(
        code(sim.request(update(21))),
        0,
        "the current level is accepted"
    );
    assert_eq!(sim.image().metadata_version(), MetadataVersion::IBP_3_9_IV0);
}

#[test]
fn enabling_unclean_election_later_elects_leaderless_partitions_on_the_next_pass() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;
    assert_eq!(
        partition_code(&sim.request(alter(1, epochs[&1], id, 0, 0, &[1]))),
        0
    );
    for _ in 0..5 {
        sim.advance(2_000);
        sim.heartbeat(2, epochs[&2]);
    }
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.leader, -1, "clean election impossible");
    let unclean = "unclean.leader.election.enable";
    assert_eq!(
        alter_configs(&mut sim, 2, "t", 0, unclean, Some("true"), false),
        0
    );
    // The next pass is due 300 s after activation.
    while sim.image().topics.topic(id).expect("exists").partitions[&0].leader == -1 {
        assert!(
            sim.now - sim.t0 < Duration::from_secs(301),
            "no unclean election"
        );
        sim.advance(1_000);
        sim.heartbeat(2, epochs[&2]);
    }
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

/// Broker 1 (preferred leader of `t-0`, replicas [1, 2]) is fenced by session expiry and comes
/// back into the ISR; returns the sim, broker epochs, topic id and when broker 1 was fenced.
fn preferred_leader_away_and_back(mut sim: Sim) -> (Sim, BTreeMap<i32, i64>, Uuid, Duration) {
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;
    while !sim.image().cluster.broker(1).expect("registered").fenced {
        assert!(sim.now - sim.t0 < Duration::from_secs(60), "never fenced");
        sim.advance(1_000);
        sim.heartbeat(2, epochs[&2]);
    }
    let fenced_at = sim.now - sim.t0;
    sim.heartbeat(1, epochs[&1]);
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.leader, 2, "leadership moved off the fenced broker");
    assert_eq!(
        partition_code(&sim.request(alter(
            2,
            epochs[&2],
            id,
            p.leader_epoch,
            p.partition_epoch,
            &[2, 1]
        ))),
        0,
        "broker 1 back in the ISR"
    );
    (sim, epochs, id, fenced_at)
}

/// `auto.leader.rebalance.enable`: one `leader.imbalance.check.interval.seconds` after the
/// partition became imbalanced, the controller moves leadership back to the preferred
/// replica (in the ISR and unfenced) — not before.
#[test]
fn auto_leader_rebalance_elects_the_preferred_replica_after_the_check_interval() {
    let (mut sim, epochs, id, fenced_at) = preferred_leader_away_and_back(Sim::new());
    let leader = |sim: &Sim| sim.image().topics.topic(id).expect("exists").partitions[&0].leader;
    while leader(&sim) == 2 {
        assert!(
            sim.now - sim.t0 < fenced_at + Duration::from_secs(302),
            "no automatic preferred election"
        );
        sim.advance(1_000);
        sim.heartbeat(1, epochs[&1]);
        sim.heartbeat(2, epochs[&2]);
    }
    let elected_at = sim.now - sim.t0;
    assert!(
        elected_at >= fenced_at + Duration::from_secs(300),
        "elected at {elected_at:?}, before the check interval after {fenced_at:?}"
    );
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!((p.leader, p.isr.clone()), (1, vec![2, 1]));
    // Balanced now: nothing more is scheduled beyond the regular timers.
    let log_len = sim.log.len();
    for _ in 0..80 {
        sim.advance(5_000);
        sim.heartbeat(1, epochs[&1]);
        sim.heartbeat(2, epochs[&2]);
    }
    assert!(
        sim.log[log_len..].iter().all(|b| b
            .records
            .iter()
            .all(|r| !matches!(r.record, MetadataRecord::PartitionChange(_)))),
        "no further leadership change"
    );
}

/// A preferred replica outside the ISR (here: after a controlled shutdown) is not elected,
/// however many check intervals pass.
#[test]
fn auto_leader_rebalance_waits_for_the_preferred_replica_to_join_the_isr() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;
    // Broker 1 shuts down in a controlled way: leadership moves to 2 and 1 leaves the ISR.
    sim.heartbeat_with(1, epochs[&1], true);
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    let partition_changes = |sim: &Sim| {
        sim.log
            .iter()
            .flat_map(|b| &b.records)
            .filter(|r| matches!(r.record, MetadataRecord::PartitionChange(_)))
            .count()
    };
    let before = partition_changes(&sim);
    // Two check intervals pass with broker 1 outside the ISR: no election.
    for _ in 0..121 {
        sim.advance(5_000);
        sim.heartbeat(2, epochs[&2]);
    }
    assert_eq!(
        partition_changes(&sim),
        before,
        "preferred replica not in the ISR"
    );
    assert_eq!(
        sim.image().topics.topic(id).expect("exists").partitions[&0].leader,
        2
    );
}

/// `auto.leader.rebalance.enable=false`: leadership stays where it is.
#[test]
fn auto_leader_rebalance_disabled_leaves_leadership_alone() {
    let sim = Sim::with_config(|node_id| QuorumControllerConfig {
        leader_imbalance_check_interval_ms: None,
        ..config(node_id)
    });
    let (mut sim, epochs, id, _) = preferred_leader_away_and_back(sim);
    for _ in 0..140 {
        sim.advance(5_000);
        sim.heartbeat(1, epochs[&1]);
        sim.heartbeat(2, epochs[&2]);
    }
    assert_eq!(
        sim.image().topics.topic(id).expect("exists").partitions[&0].leader,
        2
    );
}

/// A legacy AlterConfigs resource: `(type, name, [(key, value)])`.
type LegacyResource<'a> = (i8, &'a str, &'a [(&'a str, Option<&'a str>)]);
/// One resource's answer: `(type, name, error code)`.
type LegacyResult = (i8, String, i16);

fn legacy_alter_configs(
    sim: &mut Sim,
    resources: &[LegacyResource<'_>],
    validate_only: bool,
) -> Vec<LegacyResult> {
    use kafka_protocol::messages::AlterConfigsRequest;
    use kafka_protocol::messages::alter_configs_request::{
        AlterConfigsResource as LegacyResource, AlterableConfig as LegacyConfig,
    };
    let request = AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(
            resources
                .iter()
                .map(|(resource_type, name, configs)| {
                    LegacyResource::default()
                        .with_resource_type(*resource_type)
                        .with_resource_name(StrBytes::from_string((*name).to_owned()))
                        .with_configs(
                            configs
                                .iter()
                                .map(|(k, v)| {
                                    LegacyConfig::default()
                                        .with_name(StrBytes::from_string((*k).to_owned()))
                                        .with_value(v.map(|v| StrBytes::from_string(v.to_owned())))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    match sim.request(ControllerRequest::AlterConfigs(request)) {
        ControllerResponse::AlterConfigs(r) => r
            .responses
            .iter()
            .map(|r| (r.resource_type, r.resource_name.to_string(), r.error_code))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Legacy AlterConfigs replaces a resource's whole config set (keys not given are deleted),
/// validates as IncrementalAlterConfigs, and refuses duplicates and unknown resource types
/// without writing anything for them.
#[test]
fn legacy_alter_configs_replaces_the_whole_config_set() {
    use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
    let mut sim = Sim::new();
    sim.brokers(1);
    assert_eq!(sim.create(topic("t", 1, 1), false).topics[0].error_code, 0);
    let unclean = "unclean.leader.election.enable";
    let topic_configs = |sim: &Sim| -> Vec<(String, String)> {
        sim.image()
            .configs
            .configs(&ConfigResource::topic("t"))
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let ok = |t: i8, n: &str| vec![(t, n.to_owned(), 0)];

    let set: &[(&str, Option<&str>)] = &[("retention.ms", Some("1000")), (unclean, Some("true"))];
    assert_eq!(
        legacy_alter_configs(&mut sim, &[(2, "t", set)], false),
        ok(2, "t")
    );
    assert_eq!(
        topic_configs(&sim),
        pairs(&[("retention.ms", "1000"), (unclean, "true")])
    );
    // Full replacement: retention.ms is gone, cleanup.policy is new, unclean unchanged.
    let before = sim.log.len();
    let replace: &[(&str, Option<&str>)] =
        &[("cleanup.policy", Some("compact")), (unclean, Some("true"))];
    assert_eq!(
        legacy_alter_configs(&mut sim, &[(2, "t", replace)], false),
        ok(2, "t")
    );
    assert_eq!(
        topic_configs(&sim),
        pairs(&[("cleanup.policy", "compact"), (unclean, "true")])
    );
    let written: Vec<_> = sim.log[before..]
        .iter()
        .flat_map(|b| &b.records)
        .filter_map(|r| match &r.record {
            MetadataRecord::Config(c) => Some((c.name.clone(), c.value.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        written,
        [
            ("cleanup.policy".to_owned(), Some("compact".to_owned())),
            ("retention.ms".to_owned(), None)
        ],
        "only the differences are written"
    );
    // validateOnly and refusals write nothing.
    let before = sim.log.len();
    assert_eq!(
        legacy_alter_configs(&mut sim, &[(2, "t", &[])], true),
        ok(2, "t")
    );
    let bad_bool: &[(&str, Option<&str>)] = &[(unclean, Some("maybe"))];
    let cases: Vec<(Vec<LegacyResource<'_>>, Vec<LegacyResult>, &str)> = vec![
        (
            vec![(2, "nope", &[])],
            vec![(2, "nope".to_owned(), 3)],
            "unknown topic",
        ),
        (
            vec![(2, "t", bad_bool)],
            vec![(2, "t".to_owned(), 40)],
            "not a boolean",
        ),
        (
            vec![(4, "x", &[])],
            vec![(4, "x".to_owned(), 42)],
            "non-integral broker id",
        ),
        (
            vec![(4, "7", &[])],
            vec![(4, "7".to_owned(), 102)],
            "unregistered broker",
        ),
        (
            vec![(3, "g", &[])],
            vec![(3, "g".to_owned(), 35)],
            "unknown resource type",
        ),
        (
            vec![(8, "1", &[])],
            vec![(8, "1".to_owned(), 42)],
            "broker logger: not here",
        ),
        (
            vec![(2, "t", &[]), (2, "t", &[]), (2, "t", &[])],
            vec![(2, "t".to_owned(), 42)],
            "duplicate resource: one refusal, no change",
        ),
    ];
    for (resources, expected, why) in cases {
        assert_eq!(
            legacy_alter_configs(&mut sim, &resources, false),
            expected,
            "{why}"
        );
    }
    assert_eq!(sim.log.len(), before, "nothing written");
    assert_eq!(topic_configs(&sim).len(), 2);

    // Brokers: the cluster default (empty name) and one broker; an empty set clears it.
    let retention: &[(&str, Option<&str>)] = &[("log.retention.ms", Some("5"))];
    assert_eq!(
        legacy_alter_configs(
            &mut sim,
            &[(4, "", retention), (4, "1", retention), (2, "t", &[])],
            false
        ),
        vec![
            (4, String::new(), 0),
            (4, "1".to_owned(), 0),
            (2, "t".to_owned(), 0)
        ]
    );
    assert!(
        topic_configs(&sim).is_empty(),
        "an empty set clears the topic"
    );
    let broker = |name: &str| ConfigResource {
        resource_type: ConfigResourceType::BROKER,
        name: name.to_owned(),
    };
    for name in ["", "1"] {
        assert_eq!(
            sim.image()
                .configs
                .configs(&broker(name))
                .get("log.retention.ms")
                .map(String::as_str),
            Some("5")
        );
    }
}

/// One pass elects at most 1000 preferred leaders (Kafka's `maxElectionsPerImbalance`); when
/// it was cut short, the next pass is due at once, not a check interval later.
#[test]
fn auto_leader_rebalance_caps_a_pass_and_reruns_at_once() {
    const PARTITIONS: i32 = 1_100;
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(
        (0..PARTITIONS)
            .map(|p| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(p)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2)])
            })
            .collect(),
    );
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;
    while !sim.image().cluster.broker(1).expect("registered").fenced {
        assert!(sim.now - sim.t0 < Duration::from_secs(60), "never fenced");
        sim.advance(1_000);
        sim.heartbeat(2, epochs[&2]);
    }
    sim.heartbeat(1, epochs[&1]);
    // Broker 2, now leading everything, takes broker 1 back into every ISR.
    let partitions: Vec<PartitionData> = sim
        .image()
        .topics
        .topic(id)
        .expect("exists")
        .partitions
        .iter()
        .map(|(&index, p)| {
            assert_eq!(p.leader, 2);
            PartitionData::default()
                .with_partition_index(index)
                .with_leader_epoch(p.leader_epoch)
                .with_partition_epoch(p.partition_epoch)
                .with_new_isr(vec![BrokerId(2), BrokerId(1)])
        })
        .collect();
    let request = AlterPartitionRequest::default()
        .with_broker_id(BrokerId(2))
        .with_broker_epoch(epochs[&2])
        .with_topics(vec![
            alter_partition_request::TopicData::default()
                .with_topic_id(id)
                .with_partitions(partitions),
        ]);
    match sim.request(ControllerRequest::AlterPartition(request)) {
        ControllerResponse::AlterPartition(r) => assert_eq!(r.error_code, 0),
        other => panic!("{other:?}"),
    }
    let led_by_1 = |sim: &Sim| {
        sim.image()
            .topics
            .topic(id)
            .expect("exists")
            .partitions
            .values()
            .filter(|p| p.leader == 1)
            .count()
    };
    while led_by_1(&sim) == 0 {
        assert!(
            sim.now - sim.t0 < Duration::from_secs(400),
            "no automatic preferred election"
        );
        sim.advance(1_000);
        sim.heartbeat(1, epochs[&1]);
        sim.heartbeat(2, epochs[&2]);
    }
    assert_eq!(led_by_1(&sim), 1_000, "one pass elects at most 1000");
    assert_eq!(
        sim.active().poll_timeout(),
        Some(sim.now),
        "the rest is due at once"
    );
    sim.now += Duration::from_millis(1);
    let now = sim.now;
    sim.controllers[sim.active].handle_timeout(now);
    sim.drain();
    sim.commit_all();
    assert_eq!(led_by_1(&sim), 1_100, "the second pass elects the rest");
}

/// A huge legacy AlterConfigs (50,000 resources, every one an unknown topic, one repeated)
/// is answered per resource without writing anything.
#[test]
fn legacy_alter_configs_with_a_huge_request_answers_every_resource() {
    let mut sim = Sim::new();
    let names: Vec<String> = (0..50_000).map(|i| format!("nope-{i}")).collect();
    let mut resources: Vec<LegacyResource<'_>> =
        names.iter().map(|n| (2, n.as_str(), &[][..])).collect();
    resources.push((2, "nope-7", &[]));
    let before = sim.log.len();
    let answers = legacy_alter_configs(&mut sim, &resources, false);
    assert_eq!(answers.len(), 50_000, "one answer per distinct resource");
    assert_eq!(
        answers.iter().filter(|(_, _, code)| *code == 42).count(),
        1,
        "the duplicate"
    );
    assert_eq!(
        answers.iter().filter(|(_, _, code)| *code == 3).count(),
        49_999
    );
    assert_eq!(sim.log.len(), before, "nothing written");
}

/// One partition's AlterPartitionReassignments (`None`: cancel).
fn reassign(sim: &mut Sim, topic: &str, replicas: Option<&[i32]>) -> (i16, Option<String>) {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    let request = kafka_protocol::messages::AlterPartitionReassignmentsRequest::default()
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(replicas.map(|r| r.iter().copied().map(BrokerId).collect())),
                ]),
        ]);
    match sim.request(ControllerRequest::AlterPartitionReassignments(request)) {
        ControllerResponse::AlterPartitionReassignments(r) => {
            assert_eq!(r.error_code, 0, "{r:?}");
            let p = &r.responses[0].partitions[0];
            (
                p.error_code,
                p.error_message.as_ref().map(ToString::to_string),
            )
        }
        other => panic!("{other:?}"),
    }
}

/// One reassigning partition as ListPartitionReassignments reports it: (topic, partition,
/// replicas, adding, removing).
type Ongoing = (String, i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// The reassigning partitions as ListPartitionReassignments reports them.
fn list_reassignments(sim: &mut Sim) -> Vec<Ongoing> {
    let request = kafka_protocol::messages::ListPartitionReassignmentsRequest::default();
    match sim.request(ControllerRequest::ListPartitionReassignments(request)) {
        ControllerResponse::ListPartitionReassignments(r) => r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
                    (
                        t.name.to_string(),
                        p.partition_index,
                        ids(&p.replicas),
                        ids(&p.adding_replicas),
                        ids(&p.removing_replicas),
                    )
                })
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// KIP-455 as Kafka 3.9's controller runs it: the target replicas join the replica list with
/// adding/removing set; the AlterPartition that brings the new replica into the ISR completes
/// the reassignment (the removed leader moves, NEW_LEADER_ELECTED to the requester); a
/// cancellation reverts; bad targets are refused with Kafka's codes and messages and write
/// nothing.
#[test]
fn partition_reassignment_moves_a_replica_and_completes_on_the_isr() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(4);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let id = sim.image().topics.topic_by_name("t").expect("exists").id;

    let refusals: [(&str, Option<&[i32]>, i16, &str); 5] = [
        (
            "t",
            Some(&[]),
            39,
            "The manual partition assignment includes an empty replica list.",
        ),
        (
            "t",
            Some(&[1, 9]),
            39,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
        (
            "t",
            Some(&[2, 2]),
            39,
            "The manual partition assignment includes the broker 2 more than once.",
        ),
        ("nope", Some(&[1]), 3, "Unable to find a topic named nope."),
        ("t", None, 85, "No partition reassignment is in progress."),
    ];
    for (name, replicas, code, message) in refusals {
        let before = sim.log.len();
        assert_eq!(
            reassign(&mut sim, name, replicas),
            (code, Some(message.to_owned())),
            "{name} {replicas:?}"
        );
        assert_eq!(sim.log.len(), before, "{message}: no records");
    }

    // 1,2,3 → 4,2,3: broker 4 is added, the leader 1 removed.
    assert_eq!(reassign(&mut sim, "t", Some(&[4, 2, 3])), (0, None));
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.replicas, vec![4, 2, 3, 1]);
    assert_eq!(p.adding_replicas, vec![4]);
    assert_eq!(p.removing_replicas, vec![1]);
    assert_eq!(
        p.leader, 1,
        "the leader stays until the new replica caught up"
    );
    assert_eq!(
        p.leader_epoch, 0,
        "no replica has left yet: the leader epoch stays"
    );
    assert_eq!(
        list_reassignments(&mut sim),
        vec![("t".to_owned(), 0, vec![4, 2, 3, 1], vec![4], vec![1])]
    );

    // The leader adds broker 4 to the ISR: the reassignment completes and 1 leaves, so
    // leadership moves and the requester hears NEW_LEADER_ELECTED (108).
    let response = sim.request(alter(
        1,
        epochs[&1],
        id,
        0,
        p.partition_epoch,
        &[1, 2, 3, 4],
    ));
    assert_eq!(partition_code(&response), 108);
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.replicas, vec![4, 2, 3]);
    assert_eq!(p.isr, vec![2, 3, 4]);
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert_eq!(p.leader, 4, "the first target replica in the ISR");
    assert!(list_reassignments(&mut sim).is_empty());

    // A reassignment that only reorders completes at once.
    assert_eq!(reassign(&mut sim, "t", Some(&[2, 3, 4])), (0, None));
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.replicas, vec![2, 3, 4]);
    assert!(list_reassignments(&mut sim).is_empty());

    // Cancelling a reassignment in flight reverts to the original replicas.
    assert_eq!(reassign(&mut sim, "t", Some(&[1, 2, 3])), (0, None));
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.replicas, vec![1, 2, 3, 4]);
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![1], vec![4])
    );
    assert_eq!(reassign(&mut sim, "t", None), (0, None));
    let p = sim.image().topics.topic(id).expect("exists").partitions[&0].clone();
    assert_eq!(p.replicas, vec![2, 3, 4]);
    assert_eq!(p.isr, vec![2, 3, 4]);
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert!(list_reassignments(&mut sim).is_empty());
}

/// One AssignReplicasToDirs of `(directory, topic id, partitions)` entries.
fn assign_dirs(
    broker_id: i32,
    broker_epoch: i64,
    entries: &[(Uuid, Uuid, &[i32])],
) -> ControllerRequest {
    use kafka_protocol::messages::assign_replicas_to_dirs_request::{
        DirectoryData, PartitionData as DirPartition, TopicData,
    };
    let directories = entries
        .iter()
        .map(|&(dir, topic_id, partitions)| {
            DirectoryData::default().with_id(dir).with_topics(vec![
                TopicData::default()
                    .with_topic_id(topic_id)
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&p| DirPartition::default().with_partition_index(p))
                            .collect(),
                    ),
            ])
        })
        .collect();
    ControllerRequest::AssignReplicasToDirs(
        kafka_protocol::messages::AssignReplicasToDirsRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_broker_epoch(broker_epoch)
            .with_directories(directories),
    )
}

/// The AssignReplicasToDirs response as (top-level code, [(dir, topic, [(partition, code)])]).
#[allow(clippy::type_complexity)]
fn dirs_outcome(response: ControllerResponse) -> (i16, Vec<(Uuid, Uuid, Vec<(i32, i16)>)>) {
    let ControllerResponse::AssignReplicasToDirs(r) = response else {
        panic!("not an AssignReplicasToDirs response: {response:?}");
    };
    let entries = r
        .directories
        .iter()
        .flat_map(|d| {
            d.topics.iter().map(|t| {
                (
                    d.id,
                    t.topic_id,
                    t.partitions
                        .iter()
                        .map(|p| (p.partition_index, p.error_code))
                        .collect(),
                )
            })
        })
        .collect();
    (r.error_code, entries)
}

/// KIP-858 as Kafka 3.9's `handleAssignReplicasToDirs`: the broker epoch is checked first
/// (STALE_BROKER_EPOCH for the whole request), then each partition (UNKNOWN_TOPIC_ID,
/// UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER when the broker holds no replica);
/// an accepted one gets a `PartitionChangeRecord` with the new directory, which bumps the
/// partition epoch but not the leader epoch; a refused request writes nothing.
#[test]
fn assign_replicas_to_dirs_records_directories_and_refuses_what_kafka_refuses() {
    let mut sim = Sim::new();
    let first = Uuid::from_u64_pair(7, 1);
    let second = Uuid::from_u64_pair(7, 2);
    let epoch1 = sim.register_with_dirs(1, vec![first, second]);
    let epoch2 = sim.register(2);
    for (id, epoch) in [(1, epoch1), (2, epoch2)] {
        assert!(!sim.heartbeat(id, epoch).is_fenced);
    }
    let on = |brokers: &[i32]| {
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(brokers.iter().copied().map(BrokerId).collect())
    };
    assert_eq!(
        sim.create(
            topic("both", -1, -1).with_assignments(vec![on(&[1, 2])]),
            false
        )
        .topics[0]
            .error_code,
        0
    );
    assert_eq!(
        sim.create(
            topic("other", -1, -1).with_assignments(vec![on(&[2])]),
            false
        )
        .topics[0]
            .error_code,
        0
    );
    let both = sim.image().topics.topic_by_name("both").expect("exists").id;
    let other = sim
        .image()
        .topics
        .topic_by_name("other")
        .expect("exists")
        .id;
    let before = sim
        .image()
        .topics
        .partition(both, 0)
        .expect("exists")
        .clone();
    let unknown_topic = Uuid::from_u64_pair(99, 99);

    // Whole-request refusals write nothing.
    let log_end = sim.log_end();
    for (reason, broker_id, broker_epoch) in [
        ("an old broker epoch", 1, epoch1 - 1),
        ("a broker that never registered", 9, 0),
    ] {
        let response = sim.request(assign_dirs(
            broker_id,
            broker_epoch,
            &[(second, both, &[0])],
        ));
        let (code, entries) = dirs_outcome(response);
        assert_eq!(
            code,
            ResponseError::StaleBrokerEpoch.code(),
            "case: {reason}"
        );
        assert!(entries.is_empty(), "case: {reason}: no directories");
    }
    assert_eq!(sim.log_end(), log_end, "nothing written");

    let response = sim.request(assign_dirs(
        1,
        epoch1,
        &[
            (second, both, &[0, 5]),
            (second, unknown_topic, &[0]),
            (second, other, &[0]),
        ],
    ));
    assert_eq!(
        dirs_outcome(response),
        (
            0,
            vec![
                (
                    second,
                    both,
                    vec![(0, 0), (5, ResponseError::UnknownTopicOrPartition.code())]
                ),
                (
                    second,
                    unknown_topic,
                    vec![(0, ResponseError::UnknownTopicId.code())]
                ),
                (
                    second,
                    other,
                    vec![(0, ResponseError::NotLeaderOrFollower.code())]
                ),
            ]
        )
    );
    let after = sim
        .image()
        .topics
        .partition(both, 0)
        .expect("exists")
        .clone();
    assert_eq!(after.directory(1), Some(second), "the replica moved");
    assert_eq!(after.directory(2), before.directory(2), "the other stays");
    assert_eq!(after.leader_epoch, before.leader_epoch, "no leader change");
    assert_eq!(after.partition_epoch, before.partition_epoch + 1);
    assert_eq!((after.leader, &after.isr), (before.leader, &before.isr));

    // The same assignment again changes nothing and writes nothing.
    let log_end = sim.log_end();
    let response = sim.request(assign_dirs(1, epoch1, &[(second, both, &[0])]));
    assert_eq!(dirs_outcome(response).0, 0);
    assert_eq!(sim.log_end(), log_end, "no record for no change");
}

/// A replica assigned to a directory its broker did not register as online (a failed one)
/// is recorded there and leaves the ISR and leadership, as Kafka's "offline-dir-assignment".
#[test]
fn assigning_a_replica_to_an_offline_directory_takes_it_out_of_the_isr() {
    let mut sim = Sim::new();
    let epochs = sim.brokers(2);
    let assign = topic("t", -1, -1).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
    ]);
    assert_eq!(sim.create(assign, false).topics[0].error_code, 0);
    let t = sim.image().topics.topic_by_name("t").expect("exists").id;
    assert_eq!(
        sim.image().topics.partition(t, 0).expect("exists").leader,
        1
    );
    let failed = Uuid::from_u64_pair(7, 4242);
    let response = sim.request(assign_dirs(1, epochs[&1], &[(failed, t, &[0])]));
    assert_eq!(dirs_outcome(response), (0, vec![(failed, t, vec![(0, 0)])]));
    let p = sim.image().topics.partition(t, 0).expect("exists").clone();
    assert_eq!(p.directory(1), Some(failed));
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

/// Below metadata.version 3.7-IV2 the request is refused with UNSUPPORTED_VERSION ("Directory
/// assignment is not supported yet."), and in a migration's PRE_MIGRATION with NOT_CONTROLLER
/// (it is not one of Kafka's RUNS_IN_PREMIGRATION operations).
#[test]
fn assign_replicas_to_dirs_is_refused_before_3_7_iv2_and_in_pre_migration() {
    let mut old = Sim::with_config(|node_id| QuorumControllerConfig {
        bootstrap: BootstrapMetadata::from_versions(
            MetadataVersion::IBP_3_7_IV1,
            &BTreeMap::new(),
            "test",
        )
        .expect("3.7-IV1 bootstraps"),
        ..config(node_id)
    });
    let epoch = old.register(1);
    let log_end = old.log_end();
    let response = old.request(assign_dirs(
        1,
        epoch,
        &[(Uuid::from_u64_pair(7, 1), Uuid::nil(), &[0])],
    ));
    assert_eq!(
        dirs_outcome(response),
        (ResponseError::UnsupportedVersion.code(), Vec::new())
    );
    assert_eq!(old.log_end(), log_end);

    let mut premigration = Sim::with_config(|node_id| QuorumControllerConfig {
        zk_migration_enabled: true,
        ..config(node_id)
    });
    let response = premigration.request(assign_dirs(1, 0, &[]));
    assert_eq!(
        dirs_outcome(response),
        (ResponseError::NotController.code(), Vec::new())
    );
}

/// A `controller_mutation_rate` quota that records what it is asked and refuses once it has
/// allowed `allow` topics.
#[derive(Debug, Clone)]
struct RecordingQuota {
    asked: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    allow: usize,
}

impl krust_controller::PartitionChangeQuota for RecordingQuota {
    fn apply(&mut self, partitions: usize) -> Result<(), krust_controller::QuotaExceeded> {
        let mut asked = self
            .asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        asked.push(partitions);
        if asked.len() > self.allow {
            Err(krust_controller::QuotaExceeded)
        } else {
            Ok(())
        }
    }
}

impl RecordingQuota {
    fn allowing(allow: usize) -> Self {
        Self {
            asked: std::sync::Arc::default(),
            allow,
        }
    }

    fn asked(&self) -> Vec<usize> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn request_with_quota(
    sim: &mut Sim,
    request: ControllerRequest,
    quota: &RecordingQuota,
) -> ControllerResponse {
    let id = sim.controllers[sim.active].handle_request_with_quota(
        sim.now,
        request,
        Box::new(quota.clone()),
    );
    sim.drain();
    sim.commit_all();
    sim.responses.remove(&id).expect("answered once committed")
}

#[test]
fn the_mutation_quota_is_asked_per_topic_after_validation_and_a_refusal_writes_nothing() {
    // Kafka 3.9's ReplicationControlManager: `applyPartitionChangeQuota(partitions)` once per
    // topic after its validation; a refusal is THROTTLING_QUOTA_EXCEEDED (89) with a null
    // message (`ApiError.fromThrowable` drops the default text) and no records.
    let mut sim = Sim::new();
    sim.brokers(3);
    let quota = RecordingQuota::allowing(1);
    let request = CreateTopicsRequest::default().with_topics(vec![
        topic("a", 3, 1),
        topic("bad", 0, 1),
        topic("b", 2, 1),
    ]);
    let ControllerResponse::CreateTopics(r) =
        request_with_quota(&mut sim, ControllerRequest::CreateTopics(request), &quota)
    else {
        panic!("a CreateTopics response");
    };
    let codes: Vec<(String, i16, Option<String>)> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.error_code,
                t.error_message.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    assert_eq!(codes[0], ("a".to_owned(), 0, None));
    assert_eq!(
        codes[1].1, 37,
        "invalid before the quota is asked: {codes:?}"
    );
    assert_eq!(codes[2], ("b".to_owned(), 89, None));
    assert_eq!(quota.asked(), [3, 2], "asked for a and b only");
    assert!(sim.image().topics.topic_by_name("a").is_some());
    assert!(sim.image().topics.topic_by_name("b").is_none());
    // CreatePartitions: the partitions added (3 → 5), refused.
    let quota = RecordingQuota::allowing(0);
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("a")))
            .with_count(5)
            .with_assignments(None),
    ]);
    let ControllerResponse::CreatePartitions(r) =
        request_with_quota(&mut sim, ControllerRequest::CreatePartitions(grow), &quota)
    else {
        panic!("a CreatePartitions response");
    };
    assert_eq!(
        (r.results[0].error_code, r.results[0].error_message.clone()),
        (89, None)
    );
    assert_eq!(quota.asked(), [2]);
    // DeleteTopics: all the topic's partitions, allowed.
    let quota = RecordingQuota::allowing(1);
    let delete = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_static_str("a"))]);
    let ControllerResponse::DeleteTopics(r) =
        request_with_quota(&mut sim, ControllerRequest::DeleteTopics(delete), &quota)
    else {
        panic!("a DeleteTopics response");
    };
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(quota.asked(), [3]);
    assert!(sim.image().topics.topic_by_name("a").is_none());
}
