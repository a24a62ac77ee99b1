//! The group coordinator in real in-process `Broker`s on loopback, driven over the Kafka
//! protocol with `krust_net::Client` (one connection per member, as consumers have), with a
//! fake in-test controller (a `ControllerChannel`) that commits CreateTopics and
//! AlterPartition into an in-test metadata image and publishes it to every broker, as the
//! metadata log would.
//!
//! Covered: FindCoordinator creates `__consumer_offsets` (Kafka's configs) and then names the
//! partition leader; two members join, sync, heartbeat, commit and fetch offsets over the
//! wire; in a 3-broker cluster with `offsets.topic.replication.factor=3`, the coordinator's
//! partition moves to another broker: the old one answers NOT_COORDINATOR, FindCoordinator
//! names the new one, which loaded the group and its offsets from its replica; the same when
//! the coordinating broker dies and is fenced; 50 members join one group in one generation.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use krust_broker::group::partition_for_group;
use krust_broker::server::Broker;
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_metadata::records::{
    BrokerRegistrationChangeRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord,
    TopicRecord,
};
use krust_net::{Client, Server};
use tempfile::TempDir;
use uuid::Uuid;

mod metadata_log;

use metadata_log::MetadataLog;

const TEST_TIMEOUT: Duration = Duration::from_secs(90);
/// `metadata.version` 3.9-IV0.
const METADATA_VERSION: i16 = 21;
const OFFSETS_TOPIC: &str = "__consumer_offsets";
const NUM_PARTITIONS: i32 = 3;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

async fn bounded<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out");
}

/// The in-test controller: the image, the brokers it publishes to, the CreateTopics seen.
#[derive(Default)]
struct FakeController {
    state: Mutex<ControllerState>,
}

#[derive(Default)]
struct ControllerState {
    meta: MetadataLog,
    create_topics: Vec<CreateTopicsRequest>,
}

metadata_log::deref_metadata_log!(ControllerState);

impl FakeController {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn commit(&self, records: &[MetadataRecord]) {
        let mut state = self.lock();
        Self::commit_locked(&mut state, records);
    }

    fn commit_locked(state: &mut ControllerState, records: &[MetadataRecord]) {
        state.meta.commit(records);
    }

    fn attach(&self, node_id: i32, broker: &Arc<Broker>) {
        self.lock().meta.attach(node_id, broker);
    }

    /// Kafka's controller for CreateTopics (replicas striped over the registered brokers).
    fn create_topics(&self, request: &CreateTopicsRequest) -> CreateTopicsResponse {
        let mut state = self.lock();
        state.create_topics.push(request.clone());
        let brokers: Vec<i32> = state.image.cluster.brokers.keys().copied().collect();
        let mut results = Vec::new();
        for t in &request.topics {
            let result = CreatableTopicResult::default().with_name(t.name.clone());
            if state.image.topics.topic_by_name(&t.name).is_some() {
                results.push(result.with_error_code(ResponseError::TopicAlreadyExists.code()));
                continue;
            }
            let rf = usize::try_from(t.replication_factor).unwrap_or(0);
            if rf == 0 || rf > brokers.len() {
                results
                    .push(result.with_error_code(ResponseError::InvalidReplicationFactor.code()));
                continue;
            }
            let topic_id = Uuid::from_u64_pair(0x0ff5, state.offset as u64);
            let mut records = vec![MetadataRecord::Topic(TopicRecord {
                name: t.name.to_string(),
                topic_id,
                unknown_tagged_fields: Default::default(),
            })];
            for p in 0..t.num_partitions {
                let replicas: Vec<i32> = (0..rf)
                    .map(|i| brokers[(p as usize + i) % brokers.len()])
                    .collect();
                records.push(MetadataRecord::Partition(PartitionRecord {
                    partition_id: p,
                    topic_id,
                    replicas: replicas.clone(),
                    isr: replicas.clone(),
                    removing_replicas: Vec::new(),
                    adding_replicas: Vec::new(),
                    leader: replicas[0],
                    leader_recovery_state: 0,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    directories: Vec::new(),
                    eligible_leader_replicas: None,
                    last_known_elr: None,
                    unknown_tagged_fields: Default::default(),
                }));
            }
            Self::commit_locked(&mut state, &records);
            results.push(result);
        }
        CreateTopicsResponse::default().with_topics(results)
    }

    /// AlterPartition as Kafka's controller checks it, then a PartitionChangeRecord.
    fn alter_partition(&self, request: &AlterPartitionRequest) -> AlterPartitionResponse {
        self.lock().meta.alter_partition(request, None)
    }

    /// Moves the leadership of `__consumer_offsets-partition` to `leader` (epoch bumped).
    fn elect(&self, partition: i32, leader: i32) {
        let topic_id = self
            .lock()
            .image
            .topics
            .topic_by_name(OFFSETS_TOPIC)
            .expect("offsets topic")
            .id;
        self.commit(&[MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: partition,
            topic_id,
            leader,
            ..Default::default()
        })]);
    }

    /// What Kafka's controller does when a broker's session expires: fence it, take it out
    /// of every ISR and elect a new leader from the rest of the ISR where it led.
    fn fence(&self, broker_id: i32) {
        let mut state = self.lock();
        state.brokers.remove(&broker_id);
        let mut records = vec![MetadataRecord::BrokerRegistrationChange(
            BrokerRegistrationChangeRecord {
                broker_id,
                broker_epoch: 100,
                fenced: 1,
                ..Default::default()
            },
        )];
        for topic in state.image.topics.by_id.values() {
            for (&partition_id, p) in &topic.partitions {
                if !p.isr.contains(&broker_id) {
                    continue;
                }
                let isr: Vec<i32> = p.isr.iter().copied().filter(|&b| b != broker_id).collect();
                let mut change = PartitionChangeRecord {
                    partition_id,
                    topic_id: topic.id,
                    isr: Some(isr.clone()),
                    ..Default::default()
                };
                if p.leader == broker_id {
                    change.leader = isr.first().copied().unwrap_or(-1);
                }
                records.push(MetadataRecord::PartitionChange(change));
            }
        }
        Self::commit_locked(&mut state, &records);
    }

    fn leader_of(&self, partition: i32) -> Option<i32> {
        let state = self.lock();
        let topic = state.image.topics.topic_by_name(OFFSETS_TOPIC)?;
        topic.partitions.get(&partition).map(|p| p.leader)
    }
}

struct Channel(Arc<FakeController>);

impl ControllerChannel for Channel {
    fn send(
        &self,
        request: RequestKind,
        _api_version: Option<i16>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
        Box::pin(async move {
            match request {
                RequestKind::CreateTopics(r) => {
                    Ok(ResponseKind::CreateTopics(self.0.create_topics(&r)))
                }
                RequestKind::AlterPartition(r) => {
                    Ok(ResponseKind::AlterPartition(self.0.alter_partition(&r)))
                }
                _ => Err(ControllerChannelError::Timeout(timeout)),
            }
        })
    }
}

struct Node {
    broker: Arc<Broker>,
    server: Option<Server>,
    port: u16,
}

struct Cluster {
    controller: Arc<FakeController>,
    dirs: BTreeMap<i32, TempDir>,
    nodes: BTreeMap<i32, Node>,
    replication_factor: usize,
}

impl Cluster {
    async fn start(ids: &[i32]) -> Cluster {
        let controller = Arc::new(FakeController::default());
        controller.commit(&[metadata_log::metadata_version_record(METADATA_VERSION)]);
        let mut cluster = Cluster {
            controller,
            dirs: ids
                .iter()
                .map(|&id| (id, tempfile::tempdir().expect("tempdir")))
                .collect(),
            nodes: BTreeMap::new(),
            replication_factor: ids.len(),
        };
        for &id in ids {
            cluster.start_node(id).await;
        }
        cluster
    }

    async fn start_node(&mut self, id: i32) {
        let rf = self.replication_factor.to_string();
        let properties: BTreeMap<String, String> = [
            ("offsets.topic.num.partitions", NUM_PARTITIONS.to_string()),
            ("offsets.topic.replication.factor", rf),
            // Both members are sent together; they join within this window.
            ("group.initial.rebalance.delay.ms", "500".to_owned()),
            ("replica.fetch.wait.max.ms", "50".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let config = metadata_log::broker_config(
            id,
            "groups-test",
            self.dirs[&id].path().to_path_buf(),
            properties,
        );
        let channel: Arc<dyn ControllerChannel> = Arc::new(Channel(self.controller.clone()));
        let broker = Broker::builder(config.clone(), channel)
            .with_replication()
            .with_groups()
            .open()
            .expect("broker opens");
        let (server, port) = metadata_log::serve(&broker).await;
        self.controller.attach(id, &broker);
        self.controller
            .commit(&[metadata_log::register_broker_record(
                id,
                port,
                100,
                Uuid::from_u64_pair(7, u64::from(id.unsigned_abs())),
            )]);
        self.nodes.insert(
            id,
            Node {
                broker,
                server: Some(server),
                port,
            },
        );
    }

    fn client(&self, id: i32) -> Client {
        metadata_log::loopback_client(self.nodes[&id].port, Duration::from_secs(30))
    }

    fn node_of_port(&self, port: i32) -> i32 {
        *self
            .nodes
            .iter()
            .find(|(_, n)| i32::from(n.port) == port)
            .expect("a node listens there")
            .0
    }

    /// Broker `id` dies: its listener goes, the broker is dropped without a clean shutdown
    /// (its shard tasks end with the coordinator), and the controller fences it.
    async fn kill(&mut self, id: i32) {
        let mut node = self.nodes.remove(&id).expect("running");
        if let Some(server) = node.server.take() {
            server.shutdown().await;
        }
        drop(node);
        self.controller.fence(id);
    }

    async fn shutdown(mut self) {
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        for id in ids {
            let mut node = self.nodes.remove(&id).expect("running");
            if let Some(server) = node.server.take() {
                server.shutdown().await;
            }
            node.broker.shutdown().await;
        }
    }
}

/// FindCoordinator v3 until it names a coordinator (bounded): its node id.
async fn find_coordinator(cluster: &Cluster, via: i32, group: &str) -> i32 {
    let client = cluster.client(via);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let request = FindCoordinatorRequest::default()
            .with_key(sb(group))
            .with_key_type(0);
        let ResponseKind::FindCoordinator(r) = client.send(request, 3).await.expect("answered")
        else {
            panic!("not a FindCoordinator response")
        };
        if r.error_code == 0 {
            assert_eq!(cluster.node_of_port(r.port), r.node_id.0);
            return r.node_id.0;
        }
        assert_eq!(
            r.error_code, 15,
            "COORDINATOR_NOT_AVAILABLE while not ready"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator for {group}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn join(client: &Client, group: &str, member_id: &str) -> JoinGroupResponse {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(60_000)
        .with_member_id(sb(member_id))
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(sb("range"))
                .with_metadata(Bytes::from_static(b"\x00\x01")),
        ]);
    match client.send(request, 9).await.expect("join answered") {
        ResponseKind::JoinGroup(r) => r,
        other => panic!("{other:?}"),
    }
}

/// JoinGroup until it is not COORDINATOR_LOAD_IN_PROGRESS (the shard loads after election).
async fn join_loaded(client: &Client, group: &str, member_id: &str) -> JoinGroupResponse {
    loop {
        let r = join(client, group, member_id).await;
        if r.error_code != 14 {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn heartbeat(client: &Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_generation_id(generation);
    match client.send(request, 4).await.expect("heartbeat answered") {
        ResponseKind::Heartbeat(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

async fn commit(client: &Client, group: &str, member: &str, generation: i32, offset: i64) -> i16 {
    commit_to(client, group, member, generation, "orders", offset).await
}

async fn commit_to(
    client: &Client,
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb(topic)))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ]);
    match client.send(request, 9).await.expect("commit answered") {
        ResponseKind::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v9 of `orders-0`: (group error, committed offset).
async fn fetch(client: &Client, group: &str) -> (i16, i64) {
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(sb(group)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0]),
            ])),
    ]);
    match client.send(request, 9).await.expect("fetch answered") {
        ResponseKind::OffsetFetch(r) => {
            let g = &r.groups[0];
            (
                g.error_code,
                g.topics
                    .first()
                    .map_or(-1, |t| t.partitions[0].committed_offset),
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Two members (each on its own connection to `coordinator`) form the group.
/// Returns (clients, member ids, generation), leader first.
async fn form_group(
    cluster: &Cluster,
    coordinator: i32,
    group: &str,
) -> ([Client; 2], [String; 2], i32) {
    // The members commit offsets of `orders-0`: the topic must exist (a commit for an
    // unknown topic is UNKNOWN_TOPIC_OR_PARTITION, as in Kafka).
    cluster
        .controller
        .create_topics(&CreateTopicsRequest::default().with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(sb("orders")))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]));
    let (a, b) = (cluster.client(coordinator), cluster.client(coordinator));
    let ra = join_loaded(&a, group, "").await;
    assert_eq!(ra.error_code, 79, "MEMBER_ID_REQUIRED");
    let rb = join_loaded(&b, group, "").await;
    assert_eq!(rb.error_code, 79);
    let (ida, idb) = (ra.member_id.to_string(), rb.member_id.to_string());
    let g = group.to_owned();
    let ida2 = ida.clone();
    let ja = tokio::spawn(async move {
        let r = join(&a, &g, &ida2).await;
        (a, r)
    });
    let g = group.to_owned();
    let idb2 = idb.clone();
    let jb = tokio::spawn(async move {
        let r = join(&b, &g, &idb2).await;
        (b, r)
    });
    let ((a, ra), (b, rb)) = (ja.await.expect("a"), jb.await.expect("b"));
    assert_eq!((ra.error_code, rb.error_code), (0, 0));
    assert_eq!(ra.generation_id, rb.generation_id);
    let generation = ra.generation_id;
    let ((lc, lid), (fc, fid)) = if ra.leader == ra.member_id {
        ((a, ida), (b, idb))
    } else {
        ((b, idb), (a, ida))
    };
    let sync = |member: &str, assignments: Vec<SyncGroupRequestAssignment>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId(sb(group)))
            .with_generation_id(generation)
            .with_member_id(sb(member))
            .with_protocol_type(Some(sb("consumer")))
            .with_protocol_name(Some(sb("range")))
            .with_assignments(assignments)
    };
    let follower_sync = sync(&fid, Vec::new());
    let fs = tokio::spawn(async move {
        let r = fc.send(follower_sync, 5).await.expect("sync answered");
        (fc, r)
    });
    let leader_sync = sync(
        &lid,
        vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(sb(&lid))
                .with_assignment(Bytes::from_static(b"L")),
            SyncGroupRequestAssignment::default()
                .with_member_id(sb(&fid))
                .with_assignment(Bytes::from_static(b"F")),
        ],
    );
    let ls = lc.send(leader_sync, 5).await.expect("sync answered");
    let (fc, fs) = fs.await.expect("follower sync");
    match (ls, fs) {
        (ResponseKind::SyncGroup(l), ResponseKind::SyncGroup(f)) => {
            assert_eq!((l.error_code, f.error_code), (0, 0));
            assert_eq!(
                (l.assignment.as_ref(), f.assignment.as_ref()),
                (&b"L"[..], &b"F"[..])
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(heartbeat(&lc, group, &lid, generation).await, 0);
    assert_eq!(heartbeat(&fc, group, &fid, generation).await, 0);
    ([lc, fc], [lid, fid], generation)
}

#[tokio::test]
async fn find_coordinator_creates_the_offsets_topic_and_a_group_forms_over_the_wire() {
    bounded(async {
        let cluster = Cluster::start(&[1]).await;
        let coordinator = find_coordinator(&cluster, 1, "wire-group").await;
        assert_eq!(coordinator, 1);
        {
            let state = cluster.controller.lock();
            let create = &state.create_topics[0];
            let t = &create.topics[0];
            assert_eq!(t.name.as_str(), OFFSETS_TOPIC);
            assert_eq!(
                (t.num_partitions, t.replication_factor),
                (NUM_PARTITIONS, 1)
            );
        }
        let (clients, members, generation) = form_group(&cluster, 1, "wire-group").await;
        assert_eq!(
            commit(&clients[0], "wire-group", &members[0], generation, 17).await,
            0
        );
        assert_eq!(fetch(&clients[1], "wire-group").await, (0, 17));
        // Kafka's handleOffsetCommitRequest: a topic the metadata does not know.
        assert_eq!(
            commit_to(
                &clients[0],
                "wire-group",
                &members[0],
                generation,
                "no-such-topic",
                1
            )
            .await,
            3,
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn the_coordinator_moves_and_the_new_leader_serves_the_replicated_group() {
    bounded(async {
        let cluster = Cluster::start(&[1, 2, 3]).await;
        let group = "moving-group";
        let partition = partition_for_group(group, NUM_PARTITIONS);
        let first = find_coordinator(&cluster, 1, group).await;
        assert_eq!(cluster.controller.leader_of(partition), Some(first));
        let (clients, members, generation) = form_group(&cluster, first, group).await;
        // acks=-1: answered once every ISR member has the records.
        assert_eq!(
            commit(&clients[0], group, &members[0], generation, 99).await,
            0
        );

        let second = [1, 2, 3]
            .into_iter()
            .find(|&id| id != first)
            .expect("another broker");
        cluster.controller.elect(partition, second);
        // The old coordinator gave the partition up.
        assert_eq!(
            heartbeat(&clients[0], group, &members[0], generation).await,
            16
        );
        assert_eq!(fetch(&clients[1], group).await.0, 16);
        assert_eq!(find_coordinator(&cluster, first, group).await, second);

        // The new coordinator loaded the group and its offsets from its replica.
        let moved = cluster.client(second);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let fetched = loop {
            let f = fetch(&moved, group).await;
            if f.0 != 14 {
                break f;
            }
            assert!(tokio::time::Instant::now() < deadline, "shard never loaded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(fetched, (0, 99));
        assert_eq!(heartbeat(&moved, group, &members[1], generation).await, 0);
        assert_eq!(commit(&moved, group, &members[1], generation, 100).await, 0);
        assert_eq!(fetch(&moved, group).await, (0, 100));
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn the_coordinating_broker_dies_and_the_group_goes_on_elsewhere() {
    bounded(async {
        let mut cluster = Cluster::start(&[1, 2, 3]).await;
        let group = "orphaned-group";
        let dead = find_coordinator(&cluster, 1, group).await;
        let (_clients, members, generation) = form_group(&cluster, dead, group).await;
        let coordinator = cluster.client(dead);
        assert_eq!(
            commit(&coordinator, group, &members[0], generation, 41).await,
            0
        );
        drop(coordinator);

        cluster.kill(dead).await;
        let survivor = [1, 2, 3]
            .into_iter()
            .find(|&id| id != dead)
            .expect("a survivor");
        let moved = find_coordinator(&cluster, survivor, group).await;
        assert_ne!(moved, dead);
        let client = cluster.client(moved);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let fetched = loop {
            let f = fetch(&client, group).await;
            if f.0 != 14 {
                break f;
            }
            assert!(tokio::time::Instant::now() < deadline, "shard never loaded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(
            fetched,
            (0, 41),
            "committed offsets survive the coordinator"
        );
        // The members keep their generation: no rebalance is needed to go on.
        assert_eq!(heartbeat(&client, group, &members[0], generation).await, 0);
        assert_eq!(heartbeat(&client, group, &members[1], generation).await, 0);
        assert_eq!(commit(&client, group, &members[1], generation, 42).await, 0);
        assert_eq!(fetch(&client, group).await, (0, 42));
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn fifty_members_join_one_group_in_one_generation() {
    bounded(async {
        let cluster = Cluster::start(&[1]).await;
        let group = "fifty";
        assert_eq!(find_coordinator(&cluster, 1, group).await, 1);
        let mut ids = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..50 {
            let client = cluster.client(1);
            let r = join_loaded(&client, group, "").await;
            assert_eq!(r.error_code, 79);
            ids.push(r.member_id.to_string());
            clients.push(client);
        }
        let mut joins = Vec::new();
        for (client, id) in clients.into_iter().zip(ids.clone()) {
            joins.push(tokio::spawn(async move { join(&client, group, &id).await }));
        }
        let mut generations = std::collections::BTreeSet::new();
        let mut leaders = std::collections::BTreeSet::new();
        let mut member_lists = 0;
        for j in joins {
            let r = j.await.expect("join");
            assert_eq!(r.error_code, 0);
            generations.insert(r.generation_id);
            leaders.insert(r.leader.to_string());
            if !r.members.is_empty() {
                assert_eq!(r.members.len(), 50);
                member_lists += 1;
            }
        }
        assert_eq!(generations.len(), 1, "one generation: {generations:?}");
        assert_eq!(leaders.len(), 1);
        assert_eq!(member_lists, 1, "only the leader gets the member list");
        cluster.shutdown().await;
    })
    .await;
}
