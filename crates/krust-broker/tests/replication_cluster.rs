//! Replication between in-process brokers on loopback: real `Broker`s serving the Kafka
//! protocol through `krust_net::Server`, their `ReplicationManager`s fetching from each other,
//! and a fake in-test controller (a `ControllerChannel`) that applies AlterPartition to an
//! in-test metadata image and publishes it to every broker, as the metadata log would.
//!
//! Covered: followers catch up and take the HW; acks=all answers only once every ISR member
//! has the batch; the ISR shrinks when a follower stops and expands when it comes back; a
//! follower with a divergent log truncates after a leader change (diverging epoch, KIP-320);
//! a follower below the leader's log start restarts its log there (OFFSET_OUT_OF_RANGE →
//! ListOffsets); a refused AlterPartition falls back to the committed ISR and is re-proposed;
//! a follower of a leader without Fetch v12 truncates by OffsetForLeaderEpoch (KIP-101);
//! leadership moving between live brokers re-targets every fetcher; a follower finds its
//! leader again after it restarts on another port.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterPartitionResponse, ProduceRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_broker::fetch::handle_fetch;
use krust_broker::offset_for_leader_epoch::handle_offset_for_leader_epoch;
use krust_broker::partition::PartitionConfig;
use krust_broker::server::Broker;
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::{Partition, ReplicaSet, TopicMetadata};
use krust_log::RecordBatchBuilder;
use krust_log::{Log, LogConfig};
use krust_metadata::image::topics::TopicPartition;
use krust_metadata::records::{
    MetadataRecord, PartitionChangeRecord, PartitionRecord, TopicRecord,
};
use krust_net::{Client, Handler, Reply, RequestContext, Server, ServerConfig, SupportedApis};
use tempfile::TempDir;
use uuid::Uuid;

mod metadata_log;

use metadata_log::MetadataLog;

const TOPIC: &str = "replicated";
const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// `metadata.version` 3.9-IV0.
const METADATA_VERSION: i16 = 21;

fn topic_id() -> Uuid {
    Uuid::from_u64_pair(0x7e57, 1)
}

fn tp() -> TopicPartition {
    TopicPartition {
        topic: TOPIC.to_string(),
        partition: 0,
    }
}

/// Bounds a test: a hang is a failure, not a stuck CI job.
async fn bounded<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out");
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The in-test controller: the metadata image, and the brokers it publishes to.
#[derive(Default)]
struct FakeController {
    state: Mutex<ControllerState>,
}

#[derive(Default)]
struct ControllerState {
    meta: MetadataLog,
    alter_partitions: usize,
    /// Answer every AlterPartition partition with this error code.
    refuse_with: Option<i16>,
}

metadata_log::deref_metadata_log!(ControllerState);

impl FakeController {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits `records` and publishes the new image to every live broker.
    fn commit(&self, records: &[MetadataRecord]) {
        let mut state = self.lock();
        Self::commit_locked(&mut state, records);
    }

    fn commit_locked(state: &mut ControllerState, records: &[MetadataRecord]) {
        state.meta.commit(records);
    }

    /// Publishes everything so far to a (re)started broker, as a snapshot load would.
    fn attach(&self, node_id: i32, broker: &Arc<Broker>) {
        self.lock().meta.attach(node_id, broker);
    }

    fn detach(&self, node_id: i32) {
        self.lock().brokers.remove(&node_id);
    }

    fn partition(&self) -> Arc<krust_metadata::image::topics::PartitionRegistration> {
        self.lock()
            .image
            .topics
            .topic(topic_id())
            .and_then(|t| t.partitions.get(&0).cloned())
            .expect("partition")
    }

    fn isr(&self) -> Vec<i32> {
        self.partition().isr.clone()
    }

    /// Kafka's controller checks for AlterPartition, then a PartitionChangeRecord.
    fn alter_partition(
        &self,
        request: &kafka_protocol::messages::AlterPartitionRequest,
    ) -> AlterPartitionResponse {
        let mut state = self.lock();
        state.alter_partitions += 1;
        let refuse_with = state.refuse_with;
        state.meta.alter_partition(request, refuse_with)
    }
}

/// The broker side of the fake controller.
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
                RequestKind::AlterPartition(r) => {
                    Ok(ResponseKind::AlterPartition(self.0.alter_partition(&r)))
                }
                _ => Err(ControllerChannelError::Timeout(timeout)),
            }
        })
    }
}

/// One running broker.
struct Node {
    broker: Arc<Broker>,
    server: Option<Server>,
    port: u16,
}

struct Cluster {
    controller: Arc<FakeController>,
    dirs: BTreeMap<i32, TempDir>,
    nodes: BTreeMap<i32, Node>,
    epochs: BTreeMap<i32, i64>,
    properties: Vec<(&'static str, &'static str)>,
}

impl Cluster {
    fn new(ids: &[i32], properties: Vec<(&'static str, &'static str)>) -> Cluster {
        let controller = Arc::new(FakeController::default());
        controller.commit(&[metadata_log::metadata_version_record(METADATA_VERSION)]);
        Cluster {
            controller,
            dirs: ids
                .iter()
                .map(|&id| (id, tempfile::tempdir().expect("tempdir")))
                .collect(),
            nodes: BTreeMap::new(),
            epochs: BTreeMap::new(),
            properties,
        }
    }

    /// A cluster of `ids`, every broker started (in order), with the topic on replicas `ids`
    /// led by the first.
    async fn started(ids: &[i32], properties: Vec<(&'static str, &'static str)>) -> Cluster {
        let mut cluster = Cluster::new(ids, properties);
        for &id in ids {
            cluster.start(id).await;
        }
        cluster.create_topic(ids, ids[0]);
        cluster
    }

    fn log_dir(&self, id: i32) -> PathBuf {
        self.dirs[&id].path().to_path_buf()
    }

    /// Opens broker `id` over its log dir, serves it on an ephemeral loopback port and
    /// registers it (a new broker epoch each start).
    async fn start(&mut self, id: i32) {
        let config = metadata_log::broker_config(
            id,
            "replication-test",
            self.log_dir(id),
            self.properties
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        );
        let channel: Arc<dyn ControllerChannel> = Arc::new(Channel(self.controller.clone()));
        let broker = Broker::builder(config.clone(), channel)
            .with_replication()
            .open()
            .expect("broker opens");
        let (server, port) = metadata_log::serve(&broker).await;
        self.controller.attach(id, &broker);
        self.register(id, port);
        self.nodes.insert(
            id,
            Node {
                broker,
                server: Some(server),
                port,
            },
        );
    }

    /// Registers broker `id` listening on `port` (a new broker epoch each time).
    fn register(&mut self, id: i32, port: u16) {
        let epoch = self.epochs.get(&id).map_or(100, |e| e + 1);
        self.epochs.insert(id, epoch);
        self.controller
            .commit(&[metadata_log::register_broker_record(
                id,
                port,
                epoch,
                Uuid::from_u64_pair(u64::from(id.unsigned_abs()), epoch as u64),
            )]);
    }

    /// Stops broker `id` (its listener first, then fetchers and logs) and forgets it.
    async fn stop(&mut self, id: i32) {
        self.controller.detach(id);
        let mut node = self.nodes.remove(&id).expect("running");
        if let Some(server) = node.server.take() {
            server.shutdown().await;
        }
        node.broker.shutdown().await;
    }

    fn create_topic(&self, replicas: &[i32], leader: i32) {
        self.controller.commit(&[
            MetadataRecord::Topic(TopicRecord {
                name: TOPIC.into(),
                topic_id: topic_id(),
                unknown_tagged_fields: Default::default(),
            }),
            MetadataRecord::Partition(PartitionRecord {
                partition_id: 0,
                topic_id: topic_id(),
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
                unknown_tagged_fields: Default::default(),
            }),
        ]);
    }

    /// A leader election as the controller would do it: new leader and ISR, epoch bumped.
    fn elect(&self, leader: i32, isr: &[i32]) {
        self.controller
            .commit(&[MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: topic_id(),
                leader,
                isr: Some(isr.to_vec()),
                ..Default::default()
            })]);
    }

    /// (LEO, HW) of the partition on broker `id`.
    fn offsets(&self, id: i32) -> (i64, i64) {
        let partition = self.nodes[&id]
            .broker
            .replica_manager()
            .partition(&tp())
            .expect("hosted");
        let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
        (p.log_end_offset(), p.high_watermark())
    }

    /// The raw log bytes of broker `id` from offset 0.
    fn log_bytes(&self, id: i32) -> Bytes {
        let partition = self.nodes[&id]
            .broker
            .replica_manager()
            .partition(&tp())
            .expect("hosted");
        let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
        p.log().read(0, 64 * 1024 * 1024).expect("read").bytes
    }

    fn client(&self, id: i32) -> Client {
        metadata_log::loopback_client(self.nodes[&id].port, Duration::from_secs(20))
    }

    async fn shutdown(mut self) {
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

fn batch(count: usize, tag: &str) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..count {
        b.append_kv(
            1_700_000_000_000,
            None,
            Some(Bytes::from(format!("{tag}-{i}"))),
        );
    }
    b.build().into_bytes()
}

/// Produces one batch to `client` with `acks`; the partition's (error code, base offset).
async fn produce(client: &Client, acks: i16, records: Bytes) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(15_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    let response = client.send(request, 9).await.expect("produce answered");
    let ResponseKind::Produce(response) = response else {
        panic!("not a produce response: {response:?}");
    };
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_catch_up_and_acks_all_waits_for_the_isr() {
    bounded(async {
        let cluster = Cluster::started(&[1, 2, 3], vec![("replica.fetch.backoff.ms", "100")]).await;
        let client = cluster.client(1);
        let mut end = 0;
        for round in 0..5 {
            let (error, base) = produce(&client, -1, batch(10, &format!("r{round}"))).await;
            assert_eq!(error, 0, "acks=all produce failed");
            assert_eq!(base, end);
            end += 10;
            // acks=all answered: every ISR member already holds the batch.
            for id in [2, 3] {
                let (leo, _) = cluster.offsets(id);
                assert!(leo >= end, "follower {id} has {leo} < {end} after acks=all");
            }
        }
        // The followers learn the HW on their next fetch.
        eventually("followers take the leader's HW", || {
            [1, 2, 3]
                .iter()
                .all(|&id| cluster.offsets(id) == (end, end))
        })
        .await;
        let leader_log = cluster.log_bytes(1);
        assert_eq!(cluster.log_bytes(2), leader_log);
        assert_eq!(cluster.log_bytes(3), leader_log);
        assert_eq!(cluster.controller.isr(), vec![1, 2, 3]);
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isr_shrinks_when_a_follower_stops_and_expands_when_it_returns() {
    bounded(async {
        let mut cluster = Cluster::started(
            &[1, 2, 3],
            vec![
                ("replica.lag.time.max.ms", "1000"),
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        let client = cluster.client(1);
        assert_eq!(produce(&client, -1, batch(5, "before")).await, (0, 0));

        // A stopped follower leaves the ISR once it lags (a follower at the log end with no
        // new writes counts as caught up, as in Kafka). An acks=all produce meanwhile waits
        // for broker 3, and completes once the shrink is committed.
        cluster.stop(3).await;
        assert_eq!(produce(&client, -1, batch(5, "while-down")).await, (0, 5));
        assert_eq!(cluster.controller.isr(), vec![1, 2]);
        // The fake controller publishes the new image before it answers, so the counter may
        // lag the produce's completion by a moment.
        eventually("the leader counts the shrink", || {
            cluster.nodes[&1]
                .broker
                .replication()
                .is_some_and(|r| r.stats().isr_shrinks >= 1)
        })
        .await;
        let stats = cluster.nodes[&1]
            .broker
            .replication()
            .expect("replication")
            .stats();
        assert_eq!(stats.under_replicated_partitions, 1, "{stats:?}");
        // acks=all with the smaller ISR completes without broker 3.
        assert_eq!(produce(&client, -1, batch(5, "shrunk")).await, (0, 10));

        cluster.start(3).await;
        eventually("ISR expands back to [1, 2, 3]", || {
            cluster.controller.isr() == vec![1, 2, 3]
        })
        .await;
        eventually("the returning follower catches up", || {
            cluster.offsets(3).0 == 15
        })
        .await;
        eventually("the leader counts the expansion", || {
            cluster.nodes[&1]
                .broker
                .replication()
                .is_some_and(|r| r.stats().isr_expands >= 1)
        })
        .await;
        eventually("leader sees no under-replicated partition", || {
            cluster.nodes[&1]
                .broker
                .replication()
                .is_some_and(|r| r.stats().under_replicated_partitions == 0)
        })
        .await;
        assert_eq!(cluster.log_bytes(3), cluster.log_bytes(1));
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergent_follower_truncates_after_a_leader_change() {
    bounded(async {
        let mut cluster = Cluster::started(
            &[1, 2],
            vec![
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        let client = cluster.client(1);
        assert_eq!(produce(&client, -1, batch(4, "committed")).await, (0, 0));

        // Broker 2 goes away; broker 1 takes writes nobody else has (acks=1).
        cluster.stop(2).await;
        assert_eq!(produce(&client, 1, batch(3, "lost")).await, (0, 4));
        assert_eq!(cluster.offsets(1).0, 7);
        cluster.stop(1).await;

        // Broker 2 comes back and is elected (epoch 1); it takes different writes.
        cluster.start(2).await;
        cluster.elect(2, &[2]);
        let client = cluster.client(2);
        eventually("broker 2 leads", || {
            cluster.nodes[&2]
                .broker
                .replica_manager()
                .partition(&tp())
                .is_some_and(|p| p.lock().unwrap_or_else(PoisonError::into_inner).is_leader())
        })
        .await;
        assert_eq!(produce(&client, 1, batch(2, "new-leader")).await, (0, 4));
        assert_eq!(cluster.offsets(2).0, 6);

        // Broker 1 returns as a follower with offsets 4..7 of epoch 0 that the leader never
        // had: it must truncate to 4 and take the leader's epoch-1 batch.
        cluster.start(1).await;
        eventually("broker 1 matches the leader's log", || {
            cluster.offsets(1).0 == 6 && cluster.log_bytes(1) == cluster.log_bytes(2)
        })
        .await;
        eventually("ISR expands back to [1, 2]", || {
            cluster.controller.isr() == vec![1, 2]
        })
        .await;
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_behind_the_leaders_log_start_restarts_its_log_there() {
    bounded(async {
        let mut cluster = Cluster::started(
            &[1, 2],
            vec![
                ("replica.lag.time.max.ms", "1000"),
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        let client = cluster.client(1);
        assert_eq!(produce(&client, -1, batch(5, "both")).await, (0, 0));
        cluster.stop(2).await;
        assert_eq!(produce(&client, 1, batch(5, "a")).await, (0, 5));
        assert_eq!(produce(&client, 1, batch(5, "b")).await, (0, 10));
        eventually("ISR shrinks to [1]", || cluster.controller.isr() == vec![1]).await;
        eventually("the leader's HW reaches its end", || {
            cluster.offsets(1) == (15, 15)
        })
        .await;
        {
            let partition = cluster.nodes[&1]
                .broker
                .replica_manager()
                .partition(&tp())
                .expect("hosted");
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            assert_eq!(p.delete_records(12).expect("delete records"), 12);
        }
        // Broker 2 ends at 5, below the leader's log start: OFFSET_OUT_OF_RANGE, then
        // ListOffsets says the leader starts at 12, so broker 2 empties its log and restarts
        // it there.
        cluster.start(2).await;
        eventually(
            "broker 2 restarts its log at the leader's start and catches up",
            || {
                let partition = cluster.nodes[&2]
                    .broker
                    .replica_manager()
                    .partition(&tp())
                    .expect("hosted");
                let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                eprintln!(
                    "DEBUG {} {} {}",
                    p.log_start_offset(),
                    p.log_end_offset(),
                    p.high_watermark()
                );
                p.log_start_offset() == 12 && p.log_end_offset() == 15
            },
        )
        .await;
        eventually("ISR expands back to [1, 2]", || {
            cluster.controller.isr() == vec![1, 2]
        })
        .await;
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_isr_change_reverts_and_is_proposed_again() {
    bounded(async {
        let mut cluster = Cluster::started(
            &[1, 2],
            vec![
                ("replica.lag.time.max.ms", "600"),
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        let client = cluster.client(1);
        assert_eq!(produce(&client, -1, batch(3, "x")).await, (0, 0));
        // INELIGIBLE_REPLICA: the proposal is dropped and the committed ISR stands.
        cluster.controller.lock().refuse_with = Some(107);
        cluster.stop(2).await;
        assert_eq!(produce(&client, 1, batch(3, "y")).await, (0, 3));
        eventually("two refused proposals", || {
            cluster.controller.lock().alter_partitions >= 2
        })
        .await;
        assert_eq!(cluster.controller.isr(), vec![1, 2]);
        let stats = cluster.nodes[&1]
            .broker
            .replication()
            .expect("replication")
            .stats();
        assert!(stats.failed_isr_updates >= 1, "{stats:?}");
        {
            let partition = cluster.nodes[&1]
                .broker
                .replica_manager()
                .partition(&tp())
                .expect("hosted");
            let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            // The refused shrink never moved the HW past what broker 2 has.
            assert_eq!(p.high_watermark(), 3);
        }
        cluster.controller.lock().refuse_with = None;
        eventually("the next proposal shrinks the ISR", || {
            cluster.controller.isr() == vec![1]
        })
        .await;
        eventually("the HW moves once the ISR is [1]", || {
            cluster.offsets(1) == (6, 6)
        })
        .await;
        cluster.shutdown().await;
    })
    .await;
}

/// A leader from before Fetch v12 (no diverging epochs in fetch responses), built on the
/// crate's sans-IO handlers: Fetch v4–11 and OffsetForLeaderEpoch v3–4 over one `Partition`.
struct OldLeader {
    apis: SupportedApis,
    replicas: Mutex<ReplicaSet>,
}

impl Handler for OldLeader {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    fn handle(
        &self,
        ctx: RequestContext,
        request: RequestKind,
    ) -> impl Future<Output = Reply> + Send {
        let now = krust_broker::server::replication::now_ms();
        let (reply, empty) = {
            let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
            match request {
                RequestKind::ApiVersions(r) => (
                    Reply::from(ResponseKind::ApiVersions(
                        self.apis.respond_to(&r, ctx.api_version),
                    )),
                    false,
                ),
                RequestKind::Fetch(r) => {
                    let outcome = handle_fetch(&mut *replicas, &r, ctx.api_version, now);
                    (
                        Reply::from(ResponseKind::Fetch(outcome.response)),
                        outcome.bytes_read == 0,
                    )
                }
                RequestKind::OffsetForLeaderEpoch(r) => (
                    Reply::from(ResponseKind::OffsetForLeaderEpoch(
                        handle_offset_for_leader_epoch(&mut *replicas, &r, ctx.api_version),
                    )),
                    false,
                ),
                _ => (Reply::Close, false),
            }
        };
        async move {
            // A poor man's long poll, so an idle follower does not spin.
            if empty {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            reply
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_of_a_pre_v12_leader_truncates_by_offset_for_leader_epoch() {
    bounded(async {
        let mut cluster = Cluster::new(
            &[2],
            vec![
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        );
        cluster.start(2).await;
        // Broker 2 leads epoch 0 and writes 5 records nobody else will have past offset 3.
        cluster.create_topic(&[2, 1], 2);
        assert_eq!(
            produce(&cluster.client(2), 1, batch(5, "epoch0")).await,
            (0, 0)
        );

        // The old leader: epoch 0 ends at 3 in its log, epoch 1 holds offsets 3..6.
        let leader_dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(leader_dir.path(), LogConfig::default(), 0).expect("log");
        let now = krust_broker::server::replication::now_ms();
        let mut partition =
            Partition::open(1, log, PartitionConfig::default(), 0, now).expect("partition");
        partition
            .make_leader(0, &[2, 1], &[1, 2], now)
            .expect("leader");
        partition
            .append_as_leader(batch(3, "old-leader-epoch0"), 1, now)
            .expect("append");
        partition
            .make_leader(1, &[2, 1], &[1, 2], now)
            .expect("leader");
        partition
            .append_as_leader(batch(3, "old-leader-epoch1"), 1, now)
            .expect("append");
        let mut replicas = ReplicaSet::new();
        replicas.set_topic(
            TOPIC,
            TopicMetadata {
                topic_id: topic_id(),
                partition_count: 1,
            },
        );
        replicas.insert(TOPIC, 0, partition);
        let leader = Arc::new(OldLeader {
            apis: SupportedApis::new([
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::Fetch, 4, 11),
                (ApiKey::OffsetForLeaderEpoch, 3, 4),
            ])
            .expect("apis"),
            replicas: Mutex::new(replicas),
        });
        let server = Server::bind("127.0.0.1:0", leader.clone(), ServerConfig::default())
            .await
            .expect("bind");
        cluster.register(1, server.local_addr().port());
        cluster.elect(1, &[1, 2]);

        // Broker 2 asks where epoch 0 ends (3), truncates its 5 records to 3, then fetches
        // the leader's epoch-1 batch at Fetch v11.
        let leader_tail = {
            let replicas = leader
                .replicas
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let p = replicas.get(TOPIC, 0).expect("leader partition");
            p.log().read(3, 1 << 20).expect("read").bytes
        };
        eventually(
            "broker 2 truncates to 3 and takes the leader's epoch 1",
            || {
                let partition = cluster.nodes[&2]
                    .broker
                    .replica_manager()
                    .partition(&tp())
                    .expect("hosted");
                let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                p.log_end_offset() == 6
                    && p.log().read(3, 1 << 20).map(|r| r.bytes).ok() == Some(leader_tail.clone())
            },
        )
        .await;
        server.shutdown().await;
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_between_live_brokers_and_fetchers_follow() {
    bounded(async {
        let cluster = Cluster::started(
            &[1, 2, 3],
            vec![
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        assert_eq!(
            produce(&cluster.client(1), -1, batch(4, "one")).await,
            (0, 0)
        );
        // Each election moves every follower's fetch to the new leader (broker 3 from 1 to 2,
        // then to 3's own leadership; the old leaders start fetching).
        let mut end = 4;
        for (leader, tag) in [(2, "two"), (3, "three"), (1, "back")] {
            cluster.elect(leader, &[1, 2, 3]);
            let client = cluster.client(leader);
            eventually("the new leader leads", || {
                cluster.nodes[&leader]
                    .broker
                    .replica_manager()
                    .partition(&tp())
                    .is_some_and(|p| p.lock().unwrap_or_else(PoisonError::into_inner).is_leader())
            })
            .await;
            assert_eq!(produce(&client, -1, batch(3, tag)).await, (0, end));
            end += 3;
            for id in [1, 2, 3] {
                assert!(
                    cluster.offsets(id).0 >= end,
                    "broker {id} lags after acks=all"
                );
            }
        }
        let leader_log = cluster.log_bytes(1);
        assert_eq!(cluster.log_bytes(2), leader_log);
        assert_eq!(cluster.log_bytes(3), leader_log);
        // One fetcher per source broker: brokers 2 and 3 follow one partition each now.
        for id in [2, 3] {
            let stats = cluster.nodes[&id]
                .broker
                .replication()
                .expect("replication")
                .stats();
            assert_eq!(stats.followed_partitions, 1, "broker {id}: {stats:?}");
        }
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_finds_a_leader_restarted_on_another_port() {
    bounded(async {
        let mut cluster = Cluster::started(
            &[1, 2],
            vec![
                ("replica.fetch.backoff.ms", "100"),
                ("replica.fetch.wait.max.ms", "100"),
            ],
        )
        .await;
        assert_eq!(
            produce(&cluster.client(1), -1, batch(2, "first")).await,
            (0, 0)
        );
        // Broker 1 comes back on a new port (its registration says so); broker 2's fetcher,
        // which kept running, must look the address up again.
        // (An ephemeral port; the OS practically never hands the same one back at once.)
        cluster.stop(1).await;
        cluster.start(1).await;
        assert_eq!(
            produce(&cluster.client(1), -1, batch(2, "second")).await,
            (0, 2)
        );
        assert!(
            cluster.offsets(2).0 >= 4,
            "acks=all answered before broker 2 had the batch"
        );
        cluster.shutdown().await;
    })
    .await;
}
