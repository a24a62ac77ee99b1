//! The group coordinator runtime (`server/groups`) over a real `ReplicaManager` hosting real
//! `__consumer_offsets` partitions on disk (no network, no controller: a fake
//! `ControllerChannel` records the CreateTopics it is sent).
//!
//! Checked: `partitionFor` against values computed by Kafka 3.9.1's own `Utils.abs` and
//! `String.hashCode`; FindCoordinator (topic creation, leader endpoint per listener, batched
//! keys, TRANSACTION and invalid key types); two members through join/sync/heartbeat,
//! offset commit/fetch; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS by shard state; the
//! coordinator moving away and back (state reloaded from the log, records in Kafka's format);
//! a failed append answered NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE when replication timed
//! out) and followed by a reload.
//!
//! Every test runs under a timeout; timers use real time but nothing asserts on durations.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use krust_broker::error::PartitionError;
use krust_broker::group::{CoordinatorRecord, GroupConfig, partition_for_group};
use krust_broker::partition::{Partition, PartitionConfig};
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::server::groups::{
    CoordinatorLog, GroupCoordinator, GroupCoordinatorSettings, LoadChunk,
};
use krust_broker::server::replica_manager::{HostedPartition, ReplicaManager};
use krust_log::{Log, LogConfig};
use krust_metadata::image::topics::TopicPartition;
use krust_metadata::image::{MetadataImage, MetadataProvenance};
use krust_metadata::records::{
    MetadataRecord, PartitionRecord, RegisterBrokerRecord, RegistrationEndpoint, TopicRecord,
};
use krust_net::{Reply, RequestContext};
use uuid::Uuid;

const NUM_PARTITIONS: i32 = 4;
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Records every request; answers CreateTopics with success.
#[derive(Default)]
struct FakeChannel {
    sent: Mutex<Vec<RequestKind>>,
}

impl ControllerChannel for FakeChannel {
    fn send(
        &self,
        request: RequestKind,
        _api_version: Option<i16>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
        self.sent.lock().expect("lock").push(request.clone());
        Box::pin(async move {
            match request {
                RequestKind::CreateTopics(r) => {
                    let topics = r
                        .topics
                        .iter()
                        .map(|t| {
                            create_topics_response::CreatableTopicResult::default()
                                .with_name(t.name.clone())
                        })
                        .collect();
                    Ok(ResponseKind::CreateTopics(
                        CreateTopicsResponse::default().with_topics(topics),
                    ))
                }
                _ => Err(ControllerChannelError::Closed),
            }
        })
    }
}

/// The replica manager as the coordinator's log, with a gate that can hold loads and a
/// switch that fails appends.
struct TestLog {
    replicas: Arc<ReplicaManager>,
    loads_open: Mutex<bool>,
    loads_opened: Condvar,
    fail_appends: AtomicBool,
    time_out_appends: AtomicBool,
    appends: AtomicUsize,
}

impl TestLog {
    fn new(replicas: Arc<ReplicaManager>) -> Arc<TestLog> {
        Arc::new(TestLog {
            replicas,
            loads_open: Mutex::new(true),
            loads_opened: Condvar::new(),
            fail_appends: AtomicBool::new(false),
            time_out_appends: AtomicBool::new(false),
            appends: AtomicUsize::new(0),
        })
    }

    fn hold_loads(&self, hold: bool) {
        *self.loads_open.lock().expect("lock") = !hold;
        self.loads_opened.notify_all();
    }
}

impl CoordinatorLog for TestLog {
    fn read(
        &self,
        partition: i32,
        from_offset: i64,
        max_bytes: usize,
    ) -> Result<LoadChunk, PartitionError> {
        let mut open = self.loads_open.lock().expect("lock");
        while !*open {
            // Bounded: a test that holds loads opens them again within its timeout.
            open = self
                .loads_opened
                .wait_timeout(open, Duration::from_secs(30))
                .expect("lock")
                .0;
        }
        drop(open);
        CoordinatorLog::read(self.replicas.as_ref(), partition, from_offset, max_bytes)
    }

    fn append(
        &self,
        partition: i32,
        records: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(), PartitionError>> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        if self.fail_appends.swap(false, Ordering::SeqCst) {
            return Box::pin(async { Err(PartitionError::NotLeaderOrFollower) });
        }
        if self.time_out_appends.swap(false, Ordering::SeqCst) {
            return Box::pin(async { Err(PartitionError::RequestTimedOut) });
        }
        CoordinatorLog::append(self.replicas.as_ref(), partition, records, timeout)
    }

    fn image(&self) -> MetadataImage {
        self.replicas.image()
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    replicas: Arc<ReplicaManager>,
    log: Arc<TestLog>,
    channel: Arc<FakeChannel>,
    coordinator: GroupCoordinator,
}

fn settings() -> GroupCoordinatorSettings {
    GroupCoordinatorSettings {
        group: GroupConfig {
            offsets_topic_num_partitions: NUM_PARTITIONS,
            // Both members of the tests join within this window (they are sent together).
            group_initial_rebalance_delay_ms: 1000,
            ..GroupConfig::default()
        },
        offsets_topic_replication_factor: 1,
        ..GroupCoordinatorSettings::default()
    }
}

fn offsets_tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: "__consumer_offsets".to_owned(),
        partition,
    }
}

fn harness() -> Harness {
    harness_with_segments(&[])
}

/// A harness whose `__consumer_offsets` partitions start with the given first segment bytes
/// (what an older broker left in the log dir).
fn harness_with_segments(segments: &[(i32, Vec<u8>)]) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let replicas = Arc::new(ReplicaManager::new(1));
    for p in 0..NUM_PARTITIONS {
        let tp = offsets_tp(p);
        let path = ReplicaManager::partition_dir(dir.path(), &tp);
        if let Some((_, bytes)) = segments.iter().find(|(sp, _)| *sp == p) {
            std::fs::create_dir_all(&path).expect("partition dir");
            std::fs::write(path.join("00000000000000000000.log"), bytes).expect("segment");
        }
        let log = Log::open(&path, LogConfig::default(), 0).expect("log");
        let partition = Partition::open(1, log, PartitionConfig::default(), 0, 0).expect("open");
        replicas.insert(
            tp,
            HostedPartition {
                partition: Arc::new(Mutex::new(partition)),
                topic_id: Uuid::from_u128(0xc0),
                log_dir: dir.path().to_path_buf(),
            },
        );
    }
    // The members commit offsets of `orders`: the metadata must know it.
    replicas.set_image(image_with_orders_topic());
    let log = TestLog::new(Arc::clone(&replicas));
    let channel = Arc::new(FakeChannel::default());
    let coordinator = GroupCoordinator::with_log(
        settings(),
        Arc::clone(&log) as Arc<dyn CoordinatorLog>,
        Arc::clone(&channel) as Arc<dyn ControllerChannel>,
    );
    Harness {
        _dir: dir,
        replicas,
        log,
        channel,
        coordinator,
    }
}

impl Harness {
    /// Broker 1 leads `partition` in `epoch` (replicas and ISR = {1}: acks=-1 commits at once).
    fn lead(&self, partition: i32, epoch: i32) {
        let p = self
            .replicas
            .partition(&offsets_tp(partition))
            .expect("hosted");
        p.lock()
            .expect("lock")
            .make_leader(epoch, &[1], &[1], 0)
            .expect("leader");
        self.coordinator.on_elected(partition, epoch);
    }

    fn follow(&self, partition: i32, epoch: i32) {
        let p = self
            .replicas
            .partition(&offsets_tp(partition))
            .expect("hosted");
        p.lock()
            .expect("lock")
            .make_follower(epoch, Some(2), &[1, 2], &[2]);
        self.coordinator.on_resigned(partition, Some(epoch));
    }

    async fn wait_active(&self, partition: i32) {
        while !self.coordinator.active_partitions().contains(&partition) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn call(&self, api_key: ApiKey, api_version: i16, request: RequestKind) -> ResponseKind {
        let ctx = RequestContext {
            api_key,
            api_version,
            correlation_id: 1,
            client_id: "test-client".to_owned(),
            peer_addr: SocketAddr::from(([127, 0, 0, 1], 50_000)),
            listener_name: Arc::from("PLAINTEXT"),
            connection_id: 1,
            principal: Arc::new(krust_net::KafkaPrincipal::anonymous()),
            request_size: 0,
            throttle: krust_net::ConnectionThrottle::default(),
        };
        match self.coordinator.handle(&ctx, request).await {
            Reply::Send(r) => *r,
            other => panic!("unexpected reply {other:?}"),
        }
    }
}

fn join_request(group: &str, member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(60_000)
        .with_member_id(sb(member_id))
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(sb("range"))
                .with_metadata(Bytes::from_static(b"\x00\x01")),
        ])
}

async fn join(h: &Harness, group: &str, member_id: &str) -> JoinGroupResponse {
    match h
        .call(
            ApiKey::JoinGroup,
            7,
            RequestKind::JoinGroup(join_request(group, member_id)),
        )
        .await
    {
        ResponseKind::JoinGroup(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn heartbeat(h: &Harness, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_generation_id(generation);
    match h
        .call(ApiKey::Heartbeat, 4, RequestKind::Heartbeat(request))
        .await
    {
        ResponseKind::Heartbeat(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

async fn commit(h: &Harness, group: &str, member: &str, generation: i32, offset: i64) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb("orders")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_metadata(Some(sb("meta"))),
                ]),
        ]);
    match h
        .call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(request))
        .await
    {
        ResponseKind::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v8 (batched) of `orders-0`: (group error, committed offset).
async fn fetch_v8(h: &Harness, group: &str) -> (i16, i64) {
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(sb(group)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0]),
            ])),
    ]);
    match h
        .call(ApiKey::OffsetFetch, 8, RequestKind::OffsetFetch(request))
        .await
    {
        ResponseKind::OffsetFetch(r) => {
            let g = &r.groups[0];
            let offset = g
                .topics
                .first()
                .map_or(-1, |t| t.partitions[0].committed_offset);
            (g.error_code, offset)
        }
        other => panic!("{other:?}"),
    }
}

/// A group that hashes to `partition`.
fn group_on(partition: i32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|g| partition_for_group(g, NUM_PARTITIONS) == partition)
        .expect("some group id hashes to every partition")
}

/// Two members join (KIP-394 second join with the given member id), sync, heartbeat.
/// Returns (leader member id, follower member id, generation).
async fn form_group(h: &Arc<Harness>, group: &str) -> (String, String, i32) {
    let a = join(h, group, "").await;
    assert_eq!(a.error_code, 79, "MEMBER_ID_REQUIRED first");
    let b = join(h, group, "").await;
    assert_eq!(b.error_code, 79);
    let (a_id, b_id) = (a.member_id.to_string(), b.member_id.to_string());
    let (ha, hb) = (Arc::clone(h), Arc::clone(h));
    let (g, a2, b2) = (group.to_owned(), a_id.clone(), b_id.clone());
    let ja = tokio::spawn(async move { join(&ha, &g, &a2).await });
    let g = group.to_owned();
    let jb = tokio::spawn(async move { join(&hb, &g, &b2).await });
    let (ra, rb) = (ja.await.expect("join a"), jb.await.expect("join b"));
    assert_eq!((ra.error_code, rb.error_code), (0, 0));
    assert_eq!(ra.generation_id, rb.generation_id);
    assert_eq!(ra.leader, rb.leader);
    let generation = ra.generation_id;
    let leader = ra.leader.to_string();
    let follower = if leader == a_id { b_id } else { a_id };
    let (leader_join, follower_join) = if ra.member_id.as_str() == leader {
        (ra, rb)
    } else {
        (rb, ra)
    };
    assert_eq!(leader_join.members.len(), 2, "the leader sees both members");
    assert!(follower_join.members.is_empty());

    let assignments = vec![
        SyncGroupRequestAssignment::default()
            .with_member_id(sb(&leader))
            .with_assignment(Bytes::from_static(b"leader-part")),
        SyncGroupRequestAssignment::default()
            .with_member_id(sb(&follower))
            .with_assignment(Bytes::from_static(b"follower-part")),
    ];
    let sync = |member: &str, assignments: Vec<SyncGroupRequestAssignment>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId(sb(group)))
            .with_generation_id(generation)
            .with_member_id(sb(member))
            .with_protocol_type(Some(sb("consumer")))
            .with_protocol_name(Some(sb("range")))
            .with_assignments(assignments)
    };
    let hf = Arc::clone(h);
    let follower_sync = sync(&follower, Vec::new());
    let fs = tokio::spawn(async move {
        hf.call(ApiKey::SyncGroup, 5, RequestKind::SyncGroup(follower_sync))
            .await
    });
    let ls = h
        .call(
            ApiKey::SyncGroup,
            5,
            RequestKind::SyncGroup(sync(&leader, assignments)),
        )
        .await;
    let fs = fs.await.expect("follower sync");
    match (ls, fs) {
        (ResponseKind::SyncGroup(l), ResponseKind::SyncGroup(f)) => {
            assert_eq!((l.error_code, f.error_code), (0, 0));
            assert_eq!(l.assignment.as_ref(), b"leader-part");
            assert_eq!(f.assignment.as_ref(), b"follower-part");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(heartbeat(h, group, &leader, generation).await, 0);
    assert_eq!(heartbeat(h, group, &follower, generation).await, 0);
    (leader, follower, generation)
}

async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out");
}

#[test]
fn partition_for_matches_kafka_utils_abs_of_string_hash_code() {
    // (group id, Java `String.hashCode`, `Utils.abs(hashCode) % 50`), printed by a Java 17
    // program calling Kafka 3.9.1's `org.apache.kafka.common.utils.Utils.abs`.
    let cases: &[(&str, i32, i32)] = &[
        ("group", 98_629_247, 47),
        ("my-group", -1_906_497_762, 12),
        ("test-consumer-group", -1_793_216_381, 31),
        ("console-consumer-12345", 158_455_506, 6),
        ("", 0, 0),
        ("Aa", 2112, 12),
        ("BB", 2112, 12),
        ("héllo-ü", 289_793_213, 13),
        // A surrogate pair: Java hashes UTF-16 code units.
        ("\u{1F600}grp", 1_276_929_186, 36),
        // hashCode == Integer.MIN_VALUE: Utils.abs maps it to 0, not to a negative number.
        ("polygenelubricants", i32::MIN, 0),
        ("GydZG_", i32::MIN, 0),
        ("DESIGNING WORKHOUSES", i32::MIN, 0),
    ];
    for &(group, hash, partition) in cases {
        assert_eq!(
            krust_broker::group::java_string_hash(group),
            hash,
            "hash of {group:?}"
        );
        assert_eq!(
            partition_for_group(group, 50),
            partition,
            "partition of {group:?}"
        );
    }
    let h = GroupCoordinatorSettings::default();
    assert_eq!(h.group.offsets_topic_num_partitions, 50);
}

#[test]
fn settings_come_from_server_properties_with_kafka_defaults() {
    use krust_config::KafkaConfig;
    let parse = |pairs: &[(&str, &str)]| {
        KafkaConfig::parse(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    };
    let d = GroupCoordinatorSettings::from_config(&parse(&[]).expect("empty is valid"));
    assert_eq!(d.group.offsets_topic_num_partitions, 50);
    assert_eq!(d.offsets_topic_replication_factor, 3);
    assert_eq!(d.offsets_commit_timeout_ms, 5000);
    assert_eq!(d.group.offsets_retention_ms, 10_080 * 60_000);
    let config = parse(&[
        ("offsets.topic.num.partitions", "7"),
        ("offsets.topic.replication.factor", "1"),
        ("group.initial.rebalance.delay.ms", "0"),
        ("offsets.retention.minutes", "2"),
    ])
    .expect("valid");
    let s = GroupCoordinatorSettings::from_config(&config);
    assert_eq!(s.group.offsets_topic_num_partitions, 7);
    assert_eq!(s.offsets_topic_replication_factor, 1);
    assert_eq!(s.group.group_initial_rebalance_delay_ms, 0);
    assert_eq!(s.group.offsets_retention_ms, 120_000);
    // A bad value never reaches the settings: the config is refused when it is read.
    assert!(parse(&[("group.min.session.timeout.ms", "not a number")]).is_err());
}

fn image_with_offsets_topic(leader: i32, fenced: bool) -> MetadataImage {
    image_with_offsets_partitions(leader, fenced, NUM_PARTITIONS)
}

fn image_with_offsets_partitions(leader: i32, fenced: bool, partitions: i32) -> MetadataImage {
    let topic_id = Uuid::from_u128(0xc0);
    let mut records = vec![
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 1,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u128(1),
            broker_epoch: 10,
            end_points: vec![RegistrationEndpoint {
                name: "PLAINTEXT".into(),
                host: "broker1.local".into(),
                port: 19092,
                security_protocol: 0,
                unknown_tagged_fields: Vec::new(),
            }],
            features: Vec::new(),
            rack: None,
            fenced,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        }),
        MetadataRecord::Topic(TopicRecord {
            name: "__consumer_offsets".into(),
            topic_id,
            ..Default::default()
        }),
    ];
    for p in 0..partitions {
        records.push(MetadataRecord::Partition(PartitionRecord {
            partition_id: p,
            topic_id,
            replicas: vec![1],
            isr: vec![1],
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
        }));
    }
    MetadataImage::from_records(&records, MetadataProvenance::new(10, 1, 1000)).expect("image")
}

async fn find(h: &Harness, version: i16, key_type: i8, keys: &[&str]) -> FindCoordinatorResponse {
    let mut request = FindCoordinatorRequest::default().with_key_type(key_type);
    if version >= 4 {
        request = request.with_coordinator_keys(keys.iter().map(|k| sb(k)).collect());
    } else {
        request = request.with_key(sb(keys[0]));
    }
    match h
        .call(
            ApiKey::FindCoordinator,
            version,
            RequestKind::FindCoordinator(request),
        )
        .await
    {
        ResponseKind::FindCoordinator(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn find_coordinator_creates_the_offsets_topic_then_answers_the_leader() {
    bounded(async {
        let h = harness();
        // No topic yet: COORDINATOR_NOT_AVAILABLE, and the controller is asked to create it.
        let r = find(&h, 3, 0, &["my-group"]).await;
        assert_eq!((r.error_code, r.node_id.0, r.port), (15, -1, -1));
        while h.channel.sent.lock().expect("lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sent = h.channel.sent.lock().expect("lock").clone();
        let RequestKind::CreateTopics(create) = &sent[0] else {
            panic!("{sent:?}")
        };
        let topic = &create.topics[0];
        assert_eq!(topic.name.0.as_str(), "__consumer_offsets");
        assert_eq!(topic.num_partitions, NUM_PARTITIONS);
        assert_eq!(topic.replication_factor, 1);
        let configs: BTreeMap<String, String> = topic
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.value
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(configs["cleanup.policy"], "compact");
        assert_eq!(configs["compression.type"], "producer");
        assert_eq!(configs["segment.bytes"], "104857600");

        // The topic exists with broker 1 leading: its PLAINTEXT endpoint.
        h.replicas.set_image(image_with_offsets_topic(1, false));
        let r = find(&h, 3, 0, &["my-group"]).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.error_message.as_deref(), Some("NONE"));
        assert_eq!(
            (r.node_id.0, r.host.as_str(), r.port),
            (1, "broker1.local", 19092)
        );
        // v4+: one answer per key, in order.
        let r = find(&h, 4, 0, &["a", "b"]).await;
        let keys: Vec<(&str, i16, i32)> = r
            .coordinators
            .iter()
            .map(|c| (c.key.as_str(), c.error_code, c.node_id.0))
            .collect();
        assert_eq!(keys, vec![("a", 0, 1), ("b", 0, 1)]);
        // No transaction coordinator; unknown key types are invalid.
        let r = find(&h, 4, 1, &["txn"]).await;
        assert_eq!(r.coordinators[0].error_code, 15);
        let r = find(&h, 3, 9, &["x"]).await;
        assert_eq!(r.error_code, 42);
        // No leader, or a fenced leader: not available.
        h.replicas.set_image(image_with_offsets_topic(-1, false));
        assert_eq!(find(&h, 2, 0, &["g"]).await.error_code, 15);
        h.replicas.set_image(image_with_offsets_topic(1, true));
        assert_eq!(find(&h, 2, 0, &["g"]).await.error_code, 15);
    })
    .await;
}

#[tokio::test]
async fn two_members_join_sync_heartbeat_and_commit_offsets() {
    bounded(async {
        let h = Arc::new(harness());
        let group = group_on(1, "two-members");
        // Not loaded anywhere: NOT_COORDINATOR (OffsetFetch v1 carries it per partition,
        // having no top-level error code).
        assert_eq!(join(&h, &group, "").await.error_code, 16);
        let v1 = OffsetFetchRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0, 1]),
            ]));
        let ResponseKind::OffsetFetch(r) = h
            .call(ApiKey::OffsetFetch, 1, RequestKind::OffsetFetch(v1))
            .await
        else {
            panic!()
        };
        let errors: Vec<(i32, i16, i64)> = r.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.committed_offset))
            .collect();
        assert_eq!(errors, vec![(0, 16, -1), (1, 16, -1)]);
        h.lead(1, 1);
        h.wait_active(1).await;
        let (leader, follower, generation) = form_group(&h, &group).await;

        assert_eq!(commit(&h, &group, &leader, generation, 42).await, 0);
        assert_eq!(fetch_v8(&h, &group).await, (0, 42));
        // Fencing: a stale generation and an unknown member are refused.
        assert_eq!(commit(&h, &group, &leader, generation + 1, 43).await, 22);
        assert_eq!(commit(&h, &group, "nobody", generation, 43).await, 25);
        assert_eq!(heartbeat(&h, &group, &follower, generation + 5).await, 22);
        // OffsetFetch v5 (single group) sees the same offset.
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0]),
            ]));
        let ResponseKind::OffsetFetch(r) = h
            .call(ApiKey::OffsetFetch, 5, RequestKind::OffsetFetch(request))
            .await
        else {
            panic!()
        };
        assert_eq!(r.topics[0].partitions[0].committed_offset, 42);

        let describe = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(sb(&group)), GroupId(sb("unknown-group"))]);
        let ResponseKind::DescribeGroups(d) = h
            .call(
                ApiKey::DescribeGroups,
                5,
                RequestKind::DescribeGroups(describe),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(d.groups.len(), 2, "one answer per group, in request order");
        assert_eq!(d.groups[0].group_id.as_str(), group);
        assert_eq!(d.groups[0].group_state.as_str(), "Stable");
        assert_eq!(d.groups[0].members.len(), 2);
        assert_eq!(d.groups[0].members[0].client_host.as_str(), "/127.0.0.1");
        assert_eq!(d.groups[1].group_id.as_str(), "unknown-group");

        let ResponseKind::ListGroups(l) = h
            .call(
                ApiKey::ListGroups,
                4,
                RequestKind::ListGroups(ListGroupsRequest::default()),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(l.error_code, 0);
        assert!(l.groups.iter().any(|g| g.group_id.as_str() == group));
    })
    .await;
}

#[tokio::test]
async fn coordinator_moves_away_and_back_reloading_state_from_the_log() {
    bounded(async {
        let h = Arc::new(harness());
        let group = group_on(2, "moving");
        h.lead(2, 1);
        h.wait_active(2).await;
        let (leader, follower, generation) = form_group(&h, &group).await;
        assert_eq!(commit(&h, &group, &leader, generation, 7).await, 0);

        // The records on disk are Kafka's: an OffsetCommit key v1 and a GroupMetadata key v2.
        let chunk = CoordinatorLog::read(h.replicas.as_ref(), 2, 0, 1 << 20).expect("read");
        let (batches, stop) = krust_log::batch::BatchReader::new(chunk.records, 1 << 20).read_all();
        assert!(stop.is_none());
        let mut kinds = Vec::new();
        for b in batches {
            for r in b.records().expect("records") {
                let key = r.key.expect("key");
                kinds.push(i16::from_be_bytes([key[0], key[1]]));
                CoordinatorRecord::decode(&key, r.value.as_deref()).expect("decodes");
            }
        }
        assert!(kinds.contains(&1) && kinds.contains(&2), "{kinds:?}");

        // Leadership moves to broker 2: NOT_COORDINATOR for everything about the group.
        h.follow(2, 2);
        assert_eq!(heartbeat(&h, &group, &leader, generation).await, 16);
        assert_eq!(fetch_v8(&h, &group).await.0, 16);
        assert!(!h.coordinator.active_partitions().contains(&2));

        // Back to broker 1: the shard is rebuilt from the log (loads held first: the group
        // answers COORDINATOR_LOAD_IN_PROGRESS meanwhile, heartbeats NONE as in Kafka).
        h.log.hold_loads(true);
        h.lead(2, 3);
        assert_eq!(heartbeat(&h, &group, &leader, generation).await, 0);
        assert_eq!(join(&h, &group, &leader).await.error_code, 14);
        assert_eq!(fetch_v8(&h, &group).await.0, 14);
        h.log.hold_loads(false);
        h.wait_active(2).await;
        assert_eq!(fetch_v8(&h, &group).await, (0, 7));
        // The members and generation came back with the group metadata record.
        assert_eq!(heartbeat(&h, &group, &leader, generation).await, 0);
        assert_eq!(heartbeat(&h, &group, &follower, generation).await, 0);
        assert_eq!(commit(&h, &group, &follower, generation, 8).await, 0);
        assert_eq!(fetch_v8(&h, &group).await, (0, 8));
        // An older epoch's resignation does not unload the newer shard.
        h.coordinator.on_resigned(2, Some(3));
        assert!(h.coordinator.active_partitions().contains(&2));
    })
    .await;
}

#[tokio::test]
async fn a_failed_append_answers_not_coordinator_then_the_shard_reloads() {
    bounded(async {
        let h = Arc::new(harness());
        let group = group_on(3, "failing");
        h.lead(3, 1);
        h.wait_active(3).await;
        let (leader, _follower, generation) = form_group(&h, &group).await;
        assert_eq!(commit(&h, &group, &leader, generation, 5).await, 0);

        h.log.fail_appends.store(true, Ordering::SeqCst);
        assert_eq!(commit(&h, &group, &leader, generation, 6).await, 16);
        // Reloaded from the log: the failed commit never happened, the earlier one did.
        h.wait_active(3).await;
        let mut fetched = fetch_v8(&h, &group).await;
        while fetched.0 == 14 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            fetched = fetch_v8(&h, &group).await;
        }
        assert_eq!(fetched, (0, 5));
        assert_eq!(commit(&h, &group, &leader, generation, 9).await, 0);
        assert_eq!(fetch_v8(&h, &group).await, (0, 9));
        // Replication falling short is COORDINATOR_NOT_AVAILABLE (Kafka's
        // handleOperationException), and the shard reloads again.
        h.log.time_out_appends.store(true, Ordering::SeqCst);
        assert_eq!(commit(&h, &group, &leader, generation, 10).await, 15);
        h.wait_active(3).await;
        let mut fetched = fetch_v8(&h, &group).await;
        while fetched.0 == 14 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            fetched = fetch_v8(&h, &group).await;
        }
        assert_eq!(fetched, (0, 9));
        assert!(h.log.appends.load(Ordering::SeqCst) >= 4);
        h.coordinator.shutdown().await;
        assert!(h.coordinator.active_partitions().is_empty());
    })
    .await;
}

fn image_with_orders_topic() -> MetadataImage {
    let topic_id = Uuid::from_u128(0x0de5);
    let records = vec![
        MetadataRecord::Topic(TopicRecord {
            name: "orders".into(),
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
            leader_epoch: 0,
            partition_epoch: 0,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        }),
    ];
    MetadataImage::from_records(&records, MetadataProvenance::new(10, 1, 1000)).expect("image")
}

#[tokio::test]
async fn offsets_of_a_deleted_topic_are_dropped_and_stay_dropped_after_a_reload() {
    bounded(async {
        let h = Arc::new(harness());
        let group = group_on(0, "deleted-topic");
        h.lead(0, 1);
        h.wait_active(0).await;
        let (leader, _follower, generation) = form_group(&h, &group).await;
        h.coordinator.on_metadata(&image_with_orders_topic());
        assert_eq!(commit(&h, &group, &leader, generation, 11).await, 0);
        assert_eq!(fetch_v8(&h, &group).await, (0, 11));

        // `orders` is deleted: its offsets go (a tombstone is written).
        h.coordinator.on_metadata(&MetadataImage::empty());
        let mut fetched = fetch_v8(&h, &group).await;
        while fetched.1 == 11 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            fetched = fetch_v8(&h, &group).await;
        }
        assert_eq!(fetched, (0, -1));

        h.follow(0, 2);
        h.lead(0, 3);
        h.wait_active(0).await;
        assert_eq!(
            fetch_v8(&h, &group).await,
            (0, -1),
            "the tombstone was written"
        );
    })
    .await;
}

/// A random string from a small alphabet (collisions on purpose), sometimes empty or long.
fn random_string(rng: &mut rand::rngs::StdRng) -> String {
    use rand::Rng;
    match rng.gen_range(0..10) {
        0 => String::new(),
        1 => "x".repeat(rng.gen_range(0..40_000)),
        _ => (0..rng.gen_range(1..6))
            .map(|_| ['a', 'b', 'é', '-', '\u{1F600}'][rng.gen_range(0..5)])
            .collect(),
    }
}

fn random_bytes(rng: &mut rand::rngs::StdRng) -> Bytes {
    use rand::Rng;
    let len = rng.gen_range(0..64);
    Bytes::from((0..len).map(|_| rng.r#gen::<u8>()).collect::<Vec<u8>>())
}

#[tokio::test]
async fn random_group_requests_get_kafka_answers_never_a_panic() {
    use rand::{Rng, SeedableRng};
    bounded(async {
        let h = Arc::new(harness());
        for p in 0..NUM_PARTITIONS {
            h.lead(p, 1);
            h.wait_active(p).await;
        }
        let seed: u64 = std::env::var("KRUST_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x6a0f);
        eprintln!("seed {seed} (rerun: KRUST_TEST_SEED={seed})");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for i in 0..300 {
            let group = GroupId(sb(&random_string(&mut rng)));
            let member = sb(&random_string(&mut rng));
            let generation = rng.gen_range(-2..3);
            let (key, version, request) = match rng.gen_range(0..7) {
                0 => (
                    ApiKey::JoinGroup,
                    rng.gen_range(0..=9),
                    RequestKind::JoinGroup(
                        JoinGroupRequest::default()
                            .with_group_id(group)
                            .with_member_id(member)
                            .with_session_timeout_ms(rng.gen_range(-1..40_000))
                            .with_rebalance_timeout_ms(rng.gen_range(-1..2_000))
                            .with_protocol_type(sb(&random_string(&mut rng)))
                            .with_protocols(vec![
                                JoinGroupRequestProtocol::default()
                                    .with_name(sb(&random_string(&mut rng)))
                                    .with_metadata(random_bytes(&mut rng)),
                            ]),
                    ),
                ),
                1 => (
                    ApiKey::SyncGroup,
                    rng.gen_range(0..=5),
                    RequestKind::SyncGroup(
                        SyncGroupRequest::default()
                            .with_group_id(group)
                            .with_member_id(member.clone())
                            .with_generation_id(generation)
                            .with_assignments(vec![
                                SyncGroupRequestAssignment::default()
                                    .with_member_id(member)
                                    .with_assignment(random_bytes(&mut rng)),
                            ]),
                    ),
                ),
                2 => (
                    ApiKey::Heartbeat,
                    rng.gen_range(0..=4),
                    RequestKind::Heartbeat(
                        HeartbeatRequest::default()
                            .with_group_id(group)
                            .with_member_id(member)
                            .with_generation_id(generation),
                    ),
                ),
                3 => (
                    ApiKey::OffsetCommit,
                    rng.gen_range(0..=9),
                    RequestKind::OffsetCommit(
                        OffsetCommitRequest::default()
                            .with_group_id(group)
                            .with_member_id(member)
                            .with_generation_id_or_member_epoch(generation)
                            .with_topics(vec![
                                OffsetCommitRequestTopic::default()
                                    .with_name(TopicName(sb(&random_string(&mut rng))))
                                    .with_partitions(vec![
                                        OffsetCommitRequestPartition::default()
                                            .with_partition_index(rng.gen_range(-1..3))
                                            .with_committed_offset(rng.gen_range(-2..100))
                                            .with_committed_metadata(Some(sb(&random_string(
                                                &mut rng,
                                            )))),
                                    ]),
                            ]),
                    ),
                ),
                4 => (
                    ApiKey::LeaveGroup,
                    rng.gen_range(0..=5),
                    RequestKind::LeaveGroup(
                        LeaveGroupRequest::default()
                            .with_group_id(group)
                            .with_member_id(member),
                    ),
                ),
                5 => (
                    ApiKey::DeleteGroups,
                    rng.gen_range(0..=2),
                    RequestKind::DeleteGroups(
                        DeleteGroupsRequest::default().with_groups_names(vec![group]),
                    ),
                ),
                _ => (
                    ApiKey::OffsetDelete,
                    0,
                    RequestKind::OffsetDelete(OffsetDeleteRequest::default().with_group_id(group)),
                ),
            };
            // A join may legitimately wait for its rebalance; every answer is bounded.
            let answer =
                tokio::time::timeout(Duration::from_secs(10), h.call(key, version, request)).await;
            match answer {
                Ok(response) => {
                    let answered = match response {
                        ResponseKind::JoinGroup(_) => ApiKey::JoinGroup,
                        ResponseKind::SyncGroup(_) => ApiKey::SyncGroup,
                        ResponseKind::Heartbeat(_) => ApiKey::Heartbeat,
                        ResponseKind::OffsetCommit(_) => ApiKey::OffsetCommit,
                        ResponseKind::LeaveGroup(_) => ApiKey::LeaveGroup,
                        ResponseKind::DeleteGroups(_) => ApiKey::DeleteGroups,
                        ResponseKind::OffsetDelete(_) => ApiKey::OffsetDelete,
                        other => panic!("request {i}: {other:?}"),
                    };
                    assert_eq!(answered, key, "request {i}");
                }
                Err(_) => assert_eq!(key, ApiKey::JoinGroup, "request {i} ({key:?}) hung"),
            }
        }
        // Still serving.
        let (_leader, _follower, _generation) = form_group(&h, "after-the-noise").await;
    })
    .await;
}

#[tokio::test]
async fn partition_for_follows_the_existing_offsets_topic_of_the_first_image() {
    bounded(async {
        // Configured for 4 partitions, but the cluster's `__consumer_offsets` has 2 (created
        // under another config): as Kafka, the coordinator addresses the topic as it is.
        let h = harness();
        assert_eq!(h.coordinator.partition_for("group"), 98_629_247 % 4);
        h.coordinator
            .on_metadata(&image_with_offsets_partitions(1, false, 2));
        assert_eq!(h.coordinator.partition_for("group"), 98_629_247 % 2);
        // Only the first image decides (Kafka fixes it when the coordinator starts).
        h.coordinator
            .on_metadata(&image_with_offsets_partitions(1, false, 3));
        assert_eq!(h.coordinator.partition_for("group"), 98_629_247 % 2);

        // A first image without the topic keeps `offsets.topic.num.partitions`.
        let h = harness();
        h.coordinator.on_metadata(&MetadataImage::empty());
        h.coordinator
            .on_metadata(&image_with_offsets_partitions(1, false, 2));
        assert_eq!(h.coordinator.partition_for("group"), 98_629_247 % 4);
    })
    .await;
}

/// Kafka's group-coordinator key and value bytes at old schema versions (big-endian, `int16`
/// string lengths), as a pre-0.11 broker wrote them.
fn str16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&i16::try_from(s.len()).expect("short").to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn offset_key(version: i16, group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut k = version.to_be_bytes().to_vec();
    str16(&mut k, group);
    str16(&mut k, topic);
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

/// OffsetCommit value v0 (offset, metadata, timestamp) or v1 (… commit and expire timestamps).
fn offset_value(version: i16, offset: i64, metadata: &str, timestamp: i64) -> Vec<u8> {
    let mut v = version.to_be_bytes().to_vec();
    v.extend_from_slice(&offset.to_be_bytes());
    str16(&mut v, metadata);
    v.extend_from_slice(&timestamp.to_be_bytes());
    if version == 1 {
        v.extend_from_slice(&(timestamp + 86_400_000).to_be_bytes());
    }
    v
}

/// A `__consumer_offsets` partition written before Kafka 0.11 — magic 0 and magic 1 messages,
/// the last two in a gzip wrapper — loads: the group's committed offsets come back, the latest one wins, a tombstone deletes,
/// and the coordinator appends v2 batches after the legacy ones and reloads them all.
#[tokio::test]
async fn legacy_magic_0_and_1_offsets_load_and_new_commits_follow_them() {
    use krust_log::legacy::{MAGIC_V0, MAGIC_V1, encode_entry};
    bounded(async {
        let group = group_on(3, "legacy");
        let gone = group_on(3, "legacy-gone");
        let now = 1_700_000_000_000i64;
        let mut segment = Vec::new();
        let entries: Vec<(i8, Vec<u8>, Option<Vec<u8>>)> = vec![
            (
                MAGIC_V0,
                offset_key(0, &group, "orders", 0),
                Some(offset_value(0, 5, "m0", now)),
            ),
            (
                MAGIC_V0,
                offset_key(0, &gone, "orders", 0),
                Some(offset_value(0, 9, "", now)),
            ),
            (
                MAGIC_V1,
                offset_key(1, &group, "orders", 0),
                Some(offset_value(1, 42, "m1", now)),
            ),
            // A tombstone for the other group's offset (the cleaner had not run yet).
            (MAGIC_V1, offset_key(1, &gone, "orders", 0), None),
        ];
        for (offset, (magic, key, value)) in entries.iter().enumerate() {
            segment.extend(encode_entry(
                *magic,
                i64::try_from(offset).expect("small"),
                0,
                now,
                Some(key),
                value.as_deref(),
            ));
        }
        // Then a gzip wrapper (magic 1, offsets 4 and 5: relative 0 and 1 inside, the wrapper
        // at the last) as a broker with `offsets.topic.compression.codec=1` wrote them.
        let mut inner = Vec::new();
        for (relative, committed) in [(0i64, 50i64), (1, 60)] {
            inner.extend(encode_entry(
                MAGIC_V1,
                relative,
                0,
                now,
                Some(&offset_key(1, &group, "orders", 0)),
                Some(&offset_value(1, committed, "", now)),
            ));
        }
        let gzipped =
            krust_log::compression::compress(krust_log::batch::Compression::Gzip, None, &inner)
                .expect("gzip");
        segment.extend(encode_entry(MAGIC_V1, 5, 1, now, None, Some(&gzipped)));
        let h = Arc::new(harness_with_segments(&[(3, segment)]));
        h.lead(3, 1);
        h.wait_active(3).await;
        assert_eq!(
            fetch_v8(&h, &group).await,
            (0, 60),
            "the last commit, inside the compressed wrapper, wins"
        );
        assert_eq!(
            fetch_v8(&h, &gone).await,
            (0, -1),
            "the tombstone deleted it"
        );

        // New commits go after the legacy entries as v2 batches; a reload reads both kinds.
        let (leader, _follower, generation) = form_group(&h, &group).await;
        assert_eq!(commit(&h, &group, &leader, generation, 77).await, 0);
        h.follow(3, 2);
        h.lead(3, 3);
        h.wait_active(3).await;
        assert_eq!(fetch_v8(&h, &group).await, (0, 77));
        assert_eq!(fetch_v8(&h, &gone).await, (0, -1));
    })
    .await;
}

/// Transactional offset commits (KIP-98) in `__consumer_offsets`, as a Kafka 3.9 group
/// coordinator writes them: the offsets of a transactional batch stay invisible until their
/// producer's COMMIT marker (a control batch) is loaded, and are dropped by an ABORT marker;
/// a producer whose marker is not in the log yet gets its offsets through
/// `GroupCoordinator::on_txn_marker`, the call the partition leader makes once it wrote the
/// marker.
#[tokio::test]
async fn transactional_offsets_wait_for_their_markers() {
    use krust_log::batch::RecordBatchBuilder;
    bounded(async {
        let committed = group_on(3, "txn-committed");
        let aborted = group_on(3, "txn-aborted");
        let open = group_on(3, "txn-open");
        let now = 1_700_000_000_000i64;
        let mut segment = Vec::new();
        let mut next_offset = 0i64;
        let mut push = |producer_id: i64, control: bool, key: Vec<u8>, value: Vec<u8>| {
            let mut builder = RecordBatchBuilder::new(next_offset)
                .producer(producer_id, 0, if control { -1 } else { 0 })
                .transactional(true)
                .control(control);
            builder.append_kv(now, Some(Bytes::from(key)), Some(Bytes::from(value)));
            segment.extend_from_slice(&builder.build().into_bytes());
            next_offset += 1;
        };
        // Control record key: version 0, type 0 (ABORT) or 1 (COMMIT); value: version 0,
        // coordinator epoch 0.
        let marker = |commit: bool| (vec![0, 0, 0, u8::from(commit)], vec![0, 0, 0, 0, 0, 0]);
        push(
            7,
            false,
            offset_key(1, &committed, "orders", 0),
            offset_value(1, 11, "", now),
        );
        push(
            8,
            false,
            offset_key(1, &aborted, "orders", 0),
            offset_value(1, 22, "", now),
        );
        push(
            9,
            false,
            offset_key(1, &open, "orders", 0),
            offset_value(1, 33, "", now),
        );
        let (k, v) = marker(true);
        push(7, true, k, v);
        let (k, v) = marker(false);
        push(8, true, k, v);
        let h = Arc::new(harness_with_segments(&[(3, segment)]));
        h.lead(3, 1);
        h.wait_active(3).await;
        assert_eq!(
            fetch_v8(&h, &committed).await,
            (0, 11),
            "COMMIT marker loaded"
        );
        assert_eq!(fetch_v8(&h, &aborted).await, (0, -1), "ABORT marker loaded");
        assert_eq!(fetch_v8(&h, &open).await, (0, -1), "no marker yet");
        assert_eq!(
            fetch_stable(&h, &open).await,
            (88, -1),
            "require_stable: UNSTABLE_OFFSET_COMMIT while pending"
        );
        h.coordinator.on_txn_marker(3, 9, true).await;
        assert_eq!(fetch_stable(&h, &open).await, (0, 33));
        assert_eq!(
            fetch_v8(&h, &open).await,
            (0, 33),
            "COMMIT marker written live"
        );
        // A repeated notice, or one for a partition not loaded here, changes nothing.
        h.coordinator.on_txn_marker(3, 9, false).await;
        h.coordinator.on_txn_marker(4, 9, true).await;
        assert_eq!(fetch_v8(&h, &open).await, (0, 33));
    })
    .await;
}

/// OffsetFetch v8 `require_stable` of `orders`-0: (partition error code, offset).
async fn fetch_stable(h: &Harness, group: &str) -> (i16, i64) {
    let request = OffsetFetchRequest::default()
        .with_require_stable(true)
        .with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(sb(group)))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(sb("orders")))
                        .with_partition_indexes(vec![0]),
                ])),
        ]);
    match h
        .call(ApiKey::OffsetFetch, 8, RequestKind::OffsetFetch(request))
        .await
    {
        ResponseKind::OffsetFetch(r) => {
            let p = &r.groups[0].topics[0].partitions[0];
            (p.error_code, p.committed_offset)
        }
        other => panic!("{other:?}"),
    }
}
