//! A deterministic runtime for [`MigrationDriver`]s: one in-memory ZooKeeper ([`ZkTree`]), one
//! in-memory metadata log that commits what the active controller appends and publishes the
//! resulting images to every driver through [`MetadataDelta`]s, fake reader / writer /
//! propagator behind the driver's seams, and virtual time. Every action is carried out when
//! the driver emits it; completions can be delayed. Invariants are checked after every event.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::image::{LeaderAndEpoch, LoaderManifest};
use krust_metadata::records::{
    AbortTransactionRecord, FeatureLevelRecord, MetadataRecord, PartitionRecord,
    RegisterBrokerRecord, RegisterControllerRecord, RemoveTopicRecord, TopicRecord,
    ZkMigrationStateRecord,
};
use krust_metadata::{
    ApiMessageAndVersion, MetadataDelta, MetadataImage, MetadataProvenance, MetadataVersion,
};
use krust_migration::driver::{
    BrokerPropagator, MigrationAction, MigrationDriver, MigrationDriverConfig, RequestId,
    SeamError, ZkFailure, ZkMetadataCopy, ZkMetadataReader, ZkMetadataWriter, ZkReply, ZkRequest,
    ZkStep, ZkWriteBatch,
};
use krust_migration::state::{
    CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, ControllerZnode, MIGRATION_PATH, MigrationDriverState,
    ZkMigrationLeadershipState,
};
use krust_zk::ops::{ANY_VERSION, CreateMode, ZkError, ZkErrorCode, ZkOp};
use krust_zk::tree::{ZkTree, join};
use uuid::Uuid;

pub const VOTERS: [i32; 3] = [3000, 3001, 3002];

// ----- fakes behind the driver's seams -----

/// Topic znodes: `{"version":3,"topic_id":"…","partitions":{"0":[1,2]}}`.
pub fn topic_json(id: Uuid, partitions: &BTreeMap<i32, Vec<i32>>) -> Vec<u8> {
    let parts: serde_json::Map<String, serde_json::Value> = partitions
        .iter()
        .map(|(p, r)| (p.to_string(), serde_json::json!(r)))
        .collect();
    serde_json::json!({"version": 3, "topic_id": id.to_string(), "partitions": parts})
        .to_string()
        .into_bytes()
}

fn parse_topic(data: &[u8]) -> Result<Assignment, SeamError> {
    let value: serde_json::Value = serde_json::from_slice(data)?;
    let id = value
        .get("topic_id")
        .and_then(|v| v.as_str())
        .ok_or("topic_id missing")?;
    let id = Uuid::parse_str(id)?;
    let mut partitions = BTreeMap::new();
    for (p, replicas) in value
        .get("partitions")
        .and_then(|v| v.as_object())
        .ok_or("partitions missing")?
    {
        let replicas: Vec<i32> = serde_json::from_value(replicas.clone())?;
        partitions.insert(p.parse::<i32>()?, replicas);
    }
    Ok((id, partitions))
}

/// A topic's id and partition → replicas.
type Assignment = (Uuid, BTreeMap<i32, Vec<i32>>);

fn zk_topics(zk: &ZkTree) -> Result<BTreeMap<String, Assignment>, SeamError> {
    let mut topics = BTreeMap::new();
    for name in zk.children("/brokers/topics").unwrap_or_default() {
        let (data, _) = zk.get(&join("/brokers/topics", &name))?;
        topics.insert(name, parse_topic(data)?);
    }
    Ok(topics)
}

fn rec(record: MetadataRecord) -> ApiMessageAndVersion {
    ApiMessageAndVersion { record, version: 0 }
}

pub fn partition_record(topic_id: Uuid, partition_id: i32, replicas: &[i32]) -> PartitionRecord {
    PartitionRecord {
        partition_id,
        topic_id,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader: replicas.first().copied().unwrap_or(-1),
        leader_recovery_state: 0,
        leader_epoch: 0,
        partition_epoch: 0,
        directories: Vec::new(),
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: Vec::new(),
    }
}

/// Reads `/brokers/topics` into one batch per topic.
#[derive(Debug, Default)]
pub struct FakeReader {
    pub copies: usize,
}

impl ZkMetadataReader for FakeReader {
    fn metadata_roots(&self) -> Vec<String> {
        vec!["/brokers/topics".to_owned()]
    }

    fn read_all_metadata(&mut self, zk: &ZkTree) -> Result<ZkMetadataCopy, SeamError> {
        self.copies += 1;
        let mut copy = ZkMetadataCopy::default();
        for (name, (id, partitions)) in zk_topics(zk)? {
            let mut batch = vec![rec(MetadataRecord::Topic(TopicRecord {
                name,
                topic_id: id,
                ..TopicRecord::default()
            }))];
            for (p, replicas) in &partitions {
                copy.broker_ids.extend(replicas.iter().copied());
                batch.push(rec(MetadataRecord::Partition(partition_record(
                    id, *p, replicas,
                ))));
            }
            copy.batches.push(batch);
        }
        Ok(copy)
    }

    fn assignment_broker_ids(&self, zk: &ZkTree) -> Result<BTreeSet<i32>, SeamError> {
        Ok(zk_topics(zk)?
            .values()
            .flat_map(|(_, parts)| parts.values().flatten().copied())
            .collect())
    }
}

/// Mirrors topics (only their assignment znode) to `/brokers/topics`.
#[derive(Debug, Default)]
pub struct FakeWriter;

fn image_assignment(image: &MetadataImage, name: &str) -> Option<Assignment> {
    let topic = image.topics.topic_by_name(name)?;
    Some((
        topic.id,
        topic
            .partitions
            .iter()
            .map(|(p, reg)| (*p, reg.replicas.clone()))
            .collect(),
    ))
}

impl ZkMetadataWriter for FakeWriter {
    fn snapshot_roots(&self) -> Vec<String> {
        vec!["/brokers/topics".to_owned()]
    }

    fn snapshot_writes(
        &mut self,
        image: &MetadataImage,
        zk: &ZkTree,
        _zk_controller_epoch: i32,
    ) -> Result<ZkWriteBatch, SeamError> {
        let in_zk = zk_topics(zk)?;
        let mut batch = ZkWriteBatch::default();
        for name in image.topics.by_name.keys() {
            let Some((id, parts)) = image_assignment(image, name) else {
                continue;
            };
            let path = join("/brokers/topics", name);
            match in_zk.get(name) {
                None => {
                    batch.ops.push(ZkOp::create(path, topic_json(id, &parts)));
                    *batch.counts.entry("CreateTopic".to_owned()).or_default() += 1;
                }
                Some(existing) if *existing != (id, parts.clone()) => {
                    batch
                        .ops
                        .push(ZkOp::set_data(path, topic_json(id, &parts), ANY_VERSION));
                    *batch.counts.entry("UpdateTopic".to_owned()).or_default() += 1;
                }
                Some(_) => {}
            }
        }
        for name in in_zk.keys() {
            if image.topics.topic_by_name(name).is_none() {
                batch
                    .ops
                    .push(ZkOp::delete(join("/brokers/topics", name), ANY_VERSION));
                *batch.counts.entry("DeleteTopic".to_owned()).or_default() += 1;
            }
        }
        Ok(batch)
    }

    fn delta_writes(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _zk_controller_epoch: i32,
    ) -> Result<ZkWriteBatch, SeamError> {
        let mut batch = ZkWriteBatch::default();
        let Some(topics) = delta.topics_delta() else {
            return Ok(batch);
        };
        for id in topics.deleted_topic_ids() {
            if let Some(topic) = delta.image().topics.topic(*id) {
                batch.ops.push(ZkOp::delete(
                    join("/brokers/topics", &topic.name),
                    ANY_VERSION,
                ));
                *batch.counts.entry("DeleteTopic".to_owned()).or_default() += 1;
            }
        }
        for name in topics.created_topics().keys() {
            if let Some((id, parts)) = image_assignment(image, name) {
                batch.ops.push(ZkOp::create(
                    join("/brokers/topics", name),
                    topic_json(id, &parts),
                ));
                batch.notifications.push(ZkOp::Create {
                    path: "/config/changes/config_change_".to_owned(),
                    data: b"{}".to_vec(),
                    mode: CreateMode::PersistentSequential,
                });
                *batch.counts.entry("CreateTopic".to_owned()).or_default() += 1;
            }
        }
        Ok(batch)
    }
}

/// What the fake propagator "sends".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRpcs {
    pub full: bool,
    pub offset: i64,
    pub topics: usize,
}

#[derive(Debug, Default)]
pub struct FakePropagator;

impl BrokerPropagator for FakePropagator {
    type Rpcs = FakeRpcs;

    fn rpcs_for_image(&mut self, image: &MetadataImage, _zk_controller_epoch: i32) -> FakeRpcs {
        FakeRpcs {
            full: true,
            offset: image.provenance.last_contained_offset,
            topics: image.topics.by_name.len(),
        }
    }

    fn rpcs_for_delta(
        &mut self,
        _delta: &MetadataDelta,
        image: &MetadataImage,
        _zk_controller_epoch: i32,
    ) -> Option<FakeRpcs> {
        Some(FakeRpcs {
            full: false,
            offset: image.provenance.last_contained_offset,
            topics: image.topics.by_name.len(),
        })
    }
}

pub type Driver = MigrationDriver<FakeReader, FakeWriter, FakePropagator>;

// ----- the simulated runtime -----

#[derive(Debug)]
enum Event {
    Leader(LeaderAndEpoch),
    Metadata(Arc<MetadataDelta>, MetadataImage),
    Zk(RequestId, Result<ZkReply, ZkFailure>),
    /// A request still travelling to ZooKeeper (executed on delivery).
    ZkExec(RequestId, Option<i32>, ZkRequest),
    Committed(RequestId, i64, i32),
    AppendFailed(RequestId),
}

/// One successful ZooKeeper write step, for the invariants.
#[derive(Debug, Clone)]
pub struct ZkWriteSeen {
    pub node: i32,
    pub leader_epoch: Option<i32>,
    pub step: ZkStep,
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Delay before a ZooKeeper reply reaches the driver.
    pub zk_delay: Duration,
    /// Delay before a migration batch's commit reaches the driver.
    pub commit_delay: Duration,
    /// Nodes run a driver.
    pub voters: Vec<i32>,
    /// Run ZooKeeper requests when they arrive (after `zk_delay`) rather than when emitted, so
    /// a deposed leader's writes may still reach ZooKeeper (and must be fenced there).
    pub zk_execute_on_delivery: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            zk_delay: Duration::ZERO,
            commit_delay: Duration::ZERO,
            voters: VOTERS.to_vec(),
            zk_execute_on_delivery: false,
        }
    }
}

pub struct Sim {
    pub start: Instant,
    pub now: Instant,
    pub options: SimOptions,
    pub zk: ZkTree,
    pub zk_down: bool,
    /// Fail the next write after this many steps succeeded (once).
    pub zk_fail_write_after_steps: Option<usize>,
    /// Apply the next write whole, then answer CONNECTIONLOSS (the reply lost), once.
    pub zk_lose_next_write_reply: bool,
    pub image: MetadataImage,
    next_offset: i64,
    open_txn: Option<Vec<MetadataRecord>>,
    pub leader: LeaderAndEpoch,
    pub drivers: BTreeMap<i32, Driver>,
    scheduled: Vec<(Instant, u64, i32, Event)>,
    seq: u64,
    pub rpcs: Vec<(i32, i32, FakeRpcs)>,
    pub aborts: Vec<(i32, i32, String)>,
    pub appends: Vec<(i32, i32, Vec<ApiMessageAndVersion>)>,
    pub zk_writes: Vec<ZkWriteSeen>,
    pub failed_zk_writes: Vec<(i32, ZkError)>,
    pub zk_requests: Vec<(Instant, i32, ZkRequest)>,
    /// States each driver went through, in order (deduplicated).
    pub visited: BTreeMap<i32, Vec<MigrationDriverState>>,
    max_migration_offset: i64,
    pub log: Vec<String>,
}

impl Sim {
    pub fn new(options: SimOptions) -> Self {
        let start = Instant::now();
        let mut drivers = BTreeMap::new();
        for (i, id) in options.voters.iter().enumerate() {
            let mut config = MigrationDriverConfig::new(*id, VOTERS);
            config.rng_seed = 17 + i as u64;
            drivers.insert(
                *id,
                MigrationDriver::new(
                    config,
                    FakeReader::default(),
                    FakeWriter,
                    FakePropagator,
                    start,
                    1_700_000_000_000,
                ),
            );
        }
        Self {
            start,
            now: start,
            options,
            zk: ZkTree::new(),
            zk_down: false,
            zk_fail_write_after_steps: None,
            zk_lose_next_write_reply: false,
            image: MetadataImage::empty(),
            next_offset: 0,
            open_txn: None,
            leader: LeaderAndEpoch::default(),
            drivers,
            scheduled: Vec::new(),
            seq: 0,
            rpcs: Vec::new(),
            aborts: Vec::new(),
            appends: Vec::new(),
            zk_writes: Vec::new(),
            failed_zk_writes: Vec::new(),
            zk_requests: Vec::new(),
            visited: BTreeMap::new(),
            max_migration_offset: -1,
            log: Vec::new(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    pub fn driver(&self, id: i32) -> &Driver {
        self.drivers.get(&id).expect("driver exists")
    }

    pub fn state(&self, id: i32) -> MigrationDriverState {
        self.driver(id).state()
    }

    // ----- ZooKeeper set-up -----

    pub fn zk_create(&mut self, path: &str, data: &[u8]) {
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            if self.zk.exists(&prefix).is_none() {
                let bytes = if prefix == path {
                    data.to_vec()
                } else {
                    Vec::new()
                };
                self.zk
                    .apply(&ZkOp::create(prefix.clone(), bytes), 1, 0)
                    .expect("create");
            }
        }
    }

    /// A ZooKeeper cluster: brokers registered, a ZooKeeper controller (broker `brokers[0]`),
    /// `/controller_epoch` = 5, and `topics` (name → replicas of partition 0).
    pub fn zk_cluster(&mut self, brokers: &[i32], topics: &[(&str, Vec<i32>)]) {
        for b in brokers {
            self.zk_create(&format!("/brokers/ids/{b}"), b"{}");
        }
        self.zk_create(CONTROLLER_EPOCH_PATH, b"5");
        if let Some(b) = brokers.first() {
            self.zk_create(
                CONTROLLER_PATH,
                format!("{{\"version\":1,\"brokerid\":{b},\"timestamp\":\"1\"}}").as_bytes(),
            );
        }
        for (i, (name, replicas)) in topics.iter().enumerate() {
            let id = Uuid::from_u128(0x1000 + i as u128);
            let parts = BTreeMap::from([(0, replicas.clone())]);
            self.zk_create(&format!("/brokers/topics/{name}"), &topic_json(id, &parts));
        }
    }

    pub fn zk_topics(&self) -> BTreeSet<String> {
        self.zk
            .children("/brokers/topics")
            .unwrap_or_default()
            .into_iter()
            .collect()
    }

    pub fn zk_migration(&self) -> ZkMigrationLeadershipState {
        let (data, stat) = self.zk.get(MIGRATION_PATH).expect("/migration exists");
        ZkMigrationLeadershipState::from_migration_json(data, stat.version, stat.mtime)
            .expect("/migration decodes")
    }

    pub fn zk_controller(&self) -> ControllerZnode {
        let (data, _) = self.zk.get(CONTROLLER_PATH).expect("/controller exists");
        ControllerZnode::from_json(data).expect("/controller decodes")
    }

    pub fn zk_controller_epoch(&self) -> i32 {
        let (data, _) = self.zk.get(CONTROLLER_EPOCH_PATH).expect("exists");
        std::str::from_utf8(data)
            .expect("utf8")
            .parse()
            .expect("int")
    }

    // ----- the metadata log -----

    /// The controller's bootstrap: metadata.version, the migration state, controller
    /// registrations (migration-ready), and the migrating ZooKeeper brokers.
    pub fn bootstrap(&mut self, state: Option<ZkMigrationState>, brokers: &[i32]) {
        self.bootstrap_at(MetadataVersion::IBP_3_9_IV0, state, brokers);
    }

    /// [`Self::bootstrap`] at `metadata_version` (controller registrations only from 3.7-IV0).
    pub fn bootstrap_at(
        &mut self,
        metadata_version: MetadataVersion,
        state: Option<ZkMigrationState>,
        brokers: &[i32],
    ) {
        let mut records = vec![MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
            "metadata.version",
            metadata_version.feature_level(),
        ))];
        if let Some(state) = state {
            records.push(MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                zk_migration_state: state.value(),
                ..ZkMigrationStateRecord::default()
            }));
        }
        for id in VOTERS {
            if !metadata_version.is_controller_registration_supported() {
                break;
            }
            records.push(MetadataRecord::RegisterController(
                RegisterControllerRecord {
                    controller_id: id,
                    incarnation_id: Uuid::from_u128(u128::try_from(id).expect("positive")),
                    zk_migration_ready: true,
                    end_points: Vec::new(),
                    features: Vec::new(),
                    unknown_tagged_fields: Vec::new(),
                },
            ));
        }
        for b in brokers {
            records.push(register_broker(*b));
        }
        self.commit(records);
    }

    pub fn register_broker(&mut self, id: i32) {
        self.commit(vec![register_broker(id)]);
    }

    pub fn create_topic(&mut self, name: &str, replicas: &[i32]) -> Uuid {
        let id = Uuid::from_u128(0xABC0_0000 + self.next_offset as u128);
        self.commit(vec![
            MetadataRecord::Topic(TopicRecord {
                name: name.to_owned(),
                topic_id: id,
                ..TopicRecord::default()
            }),
            MetadataRecord::Partition(partition_record(id, 0, replicas)),
        ]);
        id
    }

    pub fn delete_topic(&mut self, name: &str) {
        if let Some(topic) = self.image.topics.topic_by_name(name) {
            let topic_id = topic.id;
            self.commit(vec![MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id,
                ..RemoveTopicRecord::default()
            })]);
        }
    }

    /// Appends and commits `records` in the current leader epoch, publishing them (or holding
    /// them while a metadata transaction is open). Returns the last offset.
    pub fn commit(&mut self, records: Vec<MetadataRecord>) -> i64 {
        let epoch = self.leader.leader_epoch;
        let mut publish = Vec::new();
        for record in records {
            self.next_offset += 1;
            match (&record, self.open_txn.is_some()) {
                (MetadataRecord::BeginTransaction(_), _) => {
                    self.open_txn = Some(Vec::new());
                }
                (MetadataRecord::EndTransaction(_), true) => {
                    publish.extend(self.open_txn.take().unwrap_or_default());
                }
                (_, true) => self.open_txn.as_mut().expect("open").push(record),
                (_, false) => publish.push(record),
            }
        }
        let last_offset = self.next_offset - 1;
        if self.open_txn.is_none() {
            self.publish(&publish, last_offset, epoch);
        }
        last_offset
    }

    fn publish(&mut self, records: &[MetadataRecord], last_offset: i64, epoch: i32) {
        let mut delta = MetadataDelta::new(&self.image);
        for r in records {
            delta.replay(r).expect("replay");
        }
        let image = delta.apply(MetadataProvenance::new(last_offset, epoch, 0));
        self.image = image.clone();
        let delta = Arc::new(delta);
        for id in self.drivers.keys().copied().collect::<Vec<_>>() {
            self.schedule(
                Duration::ZERO,
                id,
                Event::Metadata(Arc::clone(&delta), image.clone()),
            );
        }
    }

    /// A new KRaft leader (or none). The new active controller aborts an open transaction
    /// (Kafka's activation).
    pub fn set_leader(&mut self, leader: Option<i32>, epoch: i32) {
        self.leader = LeaderAndEpoch {
            leader_id: leader,
            leader_epoch: epoch,
        };
        self.log.push(format!(
            "{:?} leader {leader:?} epoch {epoch}",
            self.elapsed()
        ));
        if leader.is_some() && self.open_txn.is_some() {
            self.open_txn = None;
            self.next_offset += 1;
            let record = MetadataRecord::AbortTransaction(AbortTransactionRecord {
                reason: Some("controller failover".to_owned()),
                ..AbortTransactionRecord::default()
            });
            self.publish(&[record], self.next_offset - 1, epoch);
        }
        // Every loader hears of the change at once, before anything already scheduled.
        let now = self.now;
        for driver in self.drivers.values_mut() {
            driver.handle_leader_change(now, self.leader);
        }
        self.after_event(0);
    }

    // ----- running -----

    fn schedule(&mut self, delay: Duration, node: i32, event: Event) {
        self.seq += 1;
        self.scheduled
            .push((self.now + delay, self.seq, node, event));
    }

    fn deliver(&mut self, node: i32, event: Event) {
        let now = self.now;
        let event = match event {
            Event::ZkExec(id, leader_epoch, request) => {
                Event::Zk(id, self.run_zk(node, leader_epoch, &request))
            }
            other => other,
        };
        let Some(driver) = self.drivers.get_mut(&node) else {
            return;
        };
        match event {
            Event::Leader(leader) => driver.handle_leader_change(now, leader),
            Event::Metadata(delta, image) => {
                let manifest = LoaderManifest::LogDelta {
                    provenance: image.provenance,
                    leader_and_epoch: self.leader,
                    num_batches: 1,
                    num_bytes: 0,
                    elapsed: Duration::ZERO,
                };
                driver.handle_metadata(now, &delta, &image, &manifest);
            }
            Event::Zk(id, result) => driver.handle_zk_result(now, id, result),
            Event::ZkExec(..) => unreachable!("handled above"),
            Event::Committed(id, offset, epoch) => {
                driver.handle_append_committed(now, id, offset, epoch);
            }
            Event::AppendFailed(id) => driver.handle_append_failed(now, id, "not the leader"),
        }
        self.after_event(node);
    }

    fn after_event(&mut self, node: i32) {
        for id in self.drivers.keys().copied().collect::<Vec<_>>() {
            let entered = self
                .drivers
                .get_mut(&id)
                .map(Driver::take_transitions)
                .unwrap_or_default();
            let visited = self
                .visited
                .entry(id)
                .or_insert_with(|| vec![MigrationDriverState::Uninitialized]);
            visited.extend(entered);
        }
        let _ = node;
        self.check_invariants();
        self.drain_actions();
    }

    fn drain_actions(&mut self) {
        loop {
            let mut any = false;
            for id in self.drivers.keys().copied().collect::<Vec<_>>() {
                while let Some(action) = self.drivers.get_mut(&id).and_then(Driver::poll_action) {
                    any = true;
                    self.execute(id, action);
                }
            }
            if !any {
                return;
            }
        }
    }

    fn execute(&mut self, node: i32, action: MigrationAction<FakeRpcs>) {
        match action {
            MigrationAction::Zk {
                id,
                leader_epoch,
                request,
            } => {
                self.zk_requests.push((self.now, node, request.clone()));
                if self.options.zk_execute_on_delivery {
                    self.schedule(
                        self.options.zk_delay,
                        node,
                        Event::ZkExec(id, leader_epoch, request),
                    );
                } else {
                    let result = self.run_zk(node, leader_epoch, &request);
                    self.schedule(self.options.zk_delay, node, Event::Zk(id, result));
                }
            }
            MigrationAction::AppendRecords {
                id,
                leader_epoch,
                records,
            } => {
                let is_leader =
                    self.leader.leader_id == Some(node) && self.leader.leader_epoch == leader_epoch;
                if is_leader {
                    self.appends.push((node, leader_epoch, records.clone()));
                    let last = self.commit(records.into_iter().map(|r| r.record).collect());
                    self.schedule(
                        self.options.commit_delay,
                        node,
                        Event::Committed(id, last, leader_epoch),
                    );
                } else {
                    self.schedule(self.options.commit_delay, node, Event::AppendFailed(id));
                }
            }
            MigrationAction::SendRpcs {
                leader_epoch, rpcs, ..
            } => {
                assert_eq!(
                    self.leader.leader_id,
                    Some(node),
                    "only the leader sends RPCs"
                );
                self.rpcs.push((node, leader_epoch, rpcs));
            }
            MigrationAction::AbortMigration {
                leader_epoch,
                reason,
            } => self.aborts.push((node, leader_epoch, reason)),
        }
    }

    fn run_zk(
        &mut self,
        node: i32,
        leader_epoch: Option<i32>,
        request: &ZkRequest,
    ) -> Result<ZkReply, ZkFailure> {
        let down = |path: &str| ZkFailure {
            step: 0,
            error: ZkError::new(ZkErrorCode::ConnectionLoss, path),
        };
        if self.zk_down {
            return Err(down(""));
        }
        let now_ms = i64::try_from(self.elapsed().as_millis()).expect("small");
        match request {
            ZkRequest::GetOrCreateMigration {
                top_level_paths,
                initial_data,
            } => {
                for path in top_level_paths {
                    self.zk_create(path, b"");
                }
                if self.zk.exists(MIGRATION_PATH).is_none() {
                    self.zk
                        .apply(
                            &ZkOp::create(MIGRATION_PATH, initial_data.clone()),
                            1,
                            now_ms,
                        )
                        .map_err(|error| ZkFailure { step: 0, error })?;
                }
                let (data, stat) = self.zk.get(MIGRATION_PATH).expect("exists");
                Ok(ZkReply::Migration {
                    data: data.to_vec(),
                    stat,
                })
            }
            ZkRequest::Get { paths } => Ok(ZkReply::Got(
                paths
                    .iter()
                    .map(|p| self.zk.get(p).ok().map(|(d, s)| (d.to_vec(), s)))
                    .collect(),
            )),
            ZkRequest::ReadTrees { roots } => {
                let mut tree = ZkTree::new();
                let mut stack: Vec<String> = roots.clone();
                while let Some(path) = stack.pop() {
                    let Ok((data, stat)) = self.zk.get(&path) else {
                        continue;
                    };
                    tree.insert_read(&path, data.to_vec(), stat);
                    for child in self.zk.children(&path).unwrap_or_default() {
                        stack.push(join(&path, &child));
                    }
                }
                Ok(ZkReply::Trees(tree))
            }
            ZkRequest::Write { steps } => {
                assert!(
                    self.options.zk_execute_on_delivery
                        || self.leader.leader_id == Some(node)
                            && leader_epoch == Some(self.leader.leader_epoch),
                    "node {node} wrote ZooKeeper in epoch {leader_epoch:?} while the leader is {:?}",
                    self.leader
                );
                let mut results = Vec::new();
                for (index, step) in steps.iter().enumerate() {
                    if self.zk_fail_write_after_steps == Some(index) {
                        self.zk_fail_write_after_steps = None;
                        let mut failure = down(step.ops().first().map_or("", ZkOp::path));
                        failure.step = index;
                        return Err(failure);
                    }
                    let result = match step {
                        ZkStep::Multi(ops) => self.zk.multi(ops, 1, now_ms).map_err(|e| e.error),
                        ZkStep::Single(op) => self.zk.apply(op, 1, now_ms).map(|r| vec![r]),
                    };
                    match result {
                        Ok(r) => {
                            self.zk_writes.push(ZkWriteSeen {
                                node,
                                leader_epoch,
                                step: step.clone(),
                            });
                            self.check_write_fenced(node, step);
                            results.push(r);
                        }
                        Err(error) => {
                            self.failed_zk_writes.push((node, error.clone()));
                            return Err(ZkFailure { step: index, error });
                        }
                    }
                }
                if std::mem::take(&mut self.zk_lose_next_write_reply) {
                    let mut failure = down(
                        steps
                            .last()
                            .and_then(|s| s.ops().first())
                            .map_or("", ZkOp::path),
                    );
                    failure.step = steps.len().saturating_sub(1);
                    return Err(failure);
                }
                Ok(ZkReply::Wrote(results))
            }
        }
    }

    /// Delivers everything due and fires due timers, until `until`.
    pub fn run_until(&mut self, until: Instant) {
        self.drain_actions();
        for _ in 0..1_000_000 {
            let next_event = self.scheduled.iter().map(|(t, s, _, _)| (*t, *s)).min();
            let next_timer = self
                .drivers
                .iter()
                .filter_map(|(id, d)| d.poll_timeout().map(|t| (t, *id)))
                .min();
            let event_due = next_event.filter(|(t, _)| *t <= until);
            let timer_due = next_timer.filter(|(t, _)| *t <= until);
            match (event_due, timer_due) {
                (None, None) => {
                    self.now = self.now.max(until);
                    return;
                }
                (Some((t, seq)), timer) if timer.is_none_or(|(tt, _)| t <= tt) => {
                    self.now = self.now.max(t);
                    let pos = self
                        .scheduled
                        .iter()
                        .position(|(_, s, _, _)| *s == seq)
                        .expect("scheduled");
                    let (_, _, node, event) = self.scheduled.remove(pos);
                    self.deliver(node, event);
                }
                (Some(_), None) => unreachable!("covered by the arm above"),
                (_, Some((t, id))) => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    if let Some(d) = self.drivers.get_mut(&id) {
                        d.handle_timeout(now);
                    }
                    self.after_event(id);
                }
            }
        }
        panic!("run_until did not settle");
    }

    pub fn run_for(&mut self, duration: Duration) {
        let until = self.now + duration;
        self.run_until(until);
    }

    // ----- invariants -----

    /// Every successful write step that is not the claim or the unconditional `/migration`
    /// rewrite checks `/controller_epoch` (so it carries the writer's claim) and `/migration`.
    fn check_write_fenced(&mut self, node: i32, step: &ZkStep) {
        let ops = step.ops();
        let is_claim = ops
            .iter()
            .any(|op| op.path() == CONTROLLER_EPOCH_PATH && matches!(op, ZkOp::SetData { .. }));
        // Notifications go out unfenced, one alone or several packed in one multi-op.
        let is_notification = !ops.is_empty()
            && ops
                .iter()
                .all(|op| matches!(op, ZkOp::Create { path, .. } if path.starts_with("/config/changes/")));
        if is_claim {
            assert_eq!(
                self.zk_controller().broker_id,
                node,
                "claim wrote /controller"
            );
        } else if is_notification && !self.options.zk_execute_on_delivery {
            assert_eq!(
                self.zk_controller().broker_id,
                node,
                "only the claimed controller writes notifications"
            );
        } else if !is_notification {
            assert!(
                matches!(ops.first(), Some(ZkOp::Check { path, .. }) if path == CONTROLLER_EPOCH_PATH),
                "write not fenced by /controller_epoch: {step:?}"
            );
            assert!(
                ops.iter().any(|op| op.path() == MIGRATION_PATH),
                "write not fenced by /migration: {step:?}"
            );
            assert_eq!(
                self.zk_controller().broker_id,
                node,
                "fenced write by a non-controller"
            );
        }
        if let Ok((data, stat)) = self.zk.get(MIGRATION_PATH) {
            let state = ZkMigrationLeadershipState::from_migration_json(data, stat.version, 0)
                .expect("/migration decodes");
            assert!(
                state.kraft_metadata_offset >= self.max_migration_offset,
                "/migration offset went backwards: {} -> {}",
                self.max_migration_offset,
                state.kraft_metadata_offset
            );
            self.max_migration_offset = state.kraft_metadata_offset;
        }
    }

    fn check_invariants(&self) {
        for (id, driver) in &self.drivers {
            if driver.state().allows_dual_write() {
                assert_eq!(
                    self.image.features.zk_migration_state,
                    ZkMigrationState::Migration,
                    "node {id} dual-writes before the copy's transaction committed"
                );
                assert!(
                    self.open_txn.is_none(),
                    "node {id} dual-writes during a transaction"
                );
                assert!(driver.leadership().initial_migration_done());
            }
            if driver.state() != MigrationDriverState::Uninitialized
                && driver.state() != MigrationDriverState::Inactive
            {
                assert_eq!(
                    self.leader.leader_id,
                    Some(*id),
                    "node {id} is active in {} without being the leader",
                    driver.state()
                );
            }
            assert_eq!(
                driver
                    .status()
                    .last_error
                    .as_deref()
                    .filter(|e| e.contains("Invalid transition")),
                None
            );
        }
    }
}

fn register_broker(id: i32) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: true,
        incarnation_id: Uuid::from_u128(0xB000 + u128::try_from(id).expect("positive")),
        broker_epoch: i64::from(id) + 10,
        end_points: Vec::new(),
        features: Vec::new(),
        rack: None,
        fenced: false,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

/// `n` topics `t000…`, one partition each on brokers `[0, 1]`.
pub fn many_topics(n: usize) -> Vec<(String, Vec<i32>)> {
    (0..n).map(|i| (format!("t{i:03}"), vec![0, 1])).collect()
}

/// The happy-path cluster: 3 ZooKeeper brokers, migrating, `topics` topics, the quorum in
/// PRE_MIGRATION, 3000 the leader in epoch 1.
pub fn ready_cluster(options: SimOptions, topics: usize) -> Sim {
    let mut sim = Sim::new(options);
    let topics = many_topics(topics);
    let refs: Vec<(&str, Vec<i32>)> = topics
        .iter()
        .map(|(n, r)| (n.as_str(), r.clone()))
        .collect();
    sim.zk_cluster(&[0, 1, 2], &refs);
    sim.bootstrap(Some(ZkMigrationState::PreMigration), &[0, 1, 2]);
    sim
}
