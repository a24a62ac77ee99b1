//! Shared setup of the `server_*` tests: a `Broker` over a temp log dir, an in-test
//! `ControllerChannel`, a metadata image built from records and published to it, a real
//! `krust_net::Server` with the broker's client handler, and a `krust_net::Client`.
//!
//! Broker 1 is under test; broker 2 exists only in the metadata (it leads `remote-0`, which
//! broker 1 follows, and replicates `replicated-0`, whose follower fetches a test sends by
//! hand with `replica_id` 2).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AllocateProducerIdsResponse, BrokerId, CreateTopicsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ProduceRequest, ProduceResponse, ProducerId, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::server::{Broker, BrokerConfig, Endpoint};
use krust_log::RecordBatchBuilder;
use krust_metadata::image::{
    LeaderAndEpoch, LoaderManifest, MetadataDelta, MetadataImage, MetadataProvenance, Publication,
};
use krust_metadata::records::*;
use krust_net::{Client, ClientConfig, Server, ServerConfig};
use uuid::Uuid;

pub const ORDERS: Uuid = Uuid::from_u128(0x0001);
pub const REMOTE: Uuid = Uuid::from_u128(0x0002);
pub const REPLICATED: Uuid = Uuid::from_u128(0x0003);
/// Every test is bounded by this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The controller as far as this broker needs it: producer id blocks and topic creation.
#[derive(Default)]
pub struct FakeController {
    pub created: Mutex<Vec<String>>,
    /// Answer AllocateProducerIds with an error (a controller that cannot hand out blocks).
    pub refuse_producer_ids: std::sync::atomic::AtomicBool,
    /// Milliseconds CreateTopics takes (to see concurrent requests).
    pub create_delay_ms: std::sync::atomic::AtomicU64,
}

impl ControllerChannel for FakeController {
    fn send(
        &self,
        request: RequestKind,
        _api_version: Option<i16>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
        Box::pin(async move {
            match request {
                RequestKind::AllocateProducerIds(_)
                    if self
                        .refuse_producer_ids
                        .load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    Err(ControllerChannelError::Timeout(Duration::from_millis(1)))
                }
                RequestKind::AllocateProducerIds(_) => Ok(ResponseKind::AllocateProducerIds(
                    AllocateProducerIdsResponse::default()
                        .with_producer_id_start(ProducerId(5000))
                        .with_producer_id_len(1000),
                )),
                RequestKind::CreateTopics(r) => {
                    let delay = self
                        .create_delay_ms
                        .load(std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    let mut created = self.created.lock().expect("lock");
                    created.extend(r.topics.iter().map(|t| t.name.0.to_string()));
                    Ok(ResponseKind::CreateTopics(CreateTopicsResponse::default()))
                }
                other => Err(ControllerChannelError::Unsupported(format!("{other:?}"))),
            }
        })
    }
}

pub fn broker_record(id: i32, port: u16) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: false,
        incarnation_id: Uuid::from_u64_pair(0xbbbb, u64::from(id.unsigned_abs())),
        broker_epoch: 10 + i64::from(id),
        end_points: vec![RegistrationEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
            security_protocol: 0,
            unknown_tagged_fields: Vec::new(),
        }],
        features: vec![RegistrationFeature {
            name: "metadata.version".into(),
            min_supported_version: 1,
            max_supported_version: 21,
            unknown_tagged_fields: Vec::new(),
        }],
        rack: None,
        fenced: false,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

pub fn topic_record(name: &str, id: Uuid) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: id,
        ..Default::default()
    })
}

pub fn partition_record(id: Uuid, index: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        partition_id: index,
        topic_id: id,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader,
        leader_recovery_state: 0,
        leader_epoch: 4,
        partition_epoch: 7,
        directories: Vec::new(),
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: Vec::new(),
    })
}

/// The cluster's metadata with broker 1 at `port`.
pub fn publication(port: u16) -> Publication {
    let records = vec![
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: "metadata.version".into(),
            feature_level: 21,
            unknown_tagged_fields: Vec::new(),
        }),
        broker_record(1, port),
        broker_record(2, 1),
        topic_record("orders", ORDERS),
        partition_record(ORDERS, 0, &[1], 1),
        partition_record(ORDERS, 1, &[1], 1),
        topic_record("remote", REMOTE),
        partition_record(REMOTE, 0, &[2, 1], 2),
        topic_record("replicated", REPLICATED),
        partition_record(REPLICATED, 0, &[1, 2], 1),
        MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: "orders".into(),
            name: "retention.ms".into(),
            value: Some("86400000".into()),
            ..Default::default()
        }),
    ];
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for record in &records {
        delta.replay(record).expect("valid record");
    }
    let image = delta.apply(MetadataProvenance::new(100, 1, 1000));
    Publication { delta, image }
}

pub struct Running {
    pub broker: Arc<Broker>,
    pub server: Server,
    pub client: Client,
    pub controller: Arc<FakeController>,
}

impl Running {
    pub fn addr(&self) -> String {
        self.server.local_addr().to_string()
    }

    pub async fn stop(self) {
        self.server.shutdown().await;
        self.broker.shutdown().await;
    }
}

pub async fn start(dir: &Path) -> Running {
    start_with(dir, BTreeMap::new()).await
}

/// [`start`] with extra `server.properties`.
pub async fn start_with(dir: &Path, mut properties: BTreeMap<String, String>) -> Running {
    properties.insert("log.retention.hours".to_string(), "100".to_string());
    // A metadata log dir of its own, so the broker locks `dir` (the Raft driver would lock
    // the metadata one).
    properties.insert(
        "metadata.log.dir".to_string(),
        dir.join("meta").display().to_string(),
    );
    let config = BrokerConfig {
        node_id: 1,
        cluster_id: "test-cluster-id-00000".to_string(),
        log_dirs: vec![dir.to_path_buf()],
        static_config: Arc::new(
            krust_config::KafkaConfig::parse(&properties).expect("valid test config"),
        ),
        advertised_listeners: vec![Endpoint {
            name: "PLAINTEXT".to_string(),
            host: "127.0.0.1".to_string(),
            port: 0,
            security_protocol: 0,
        }],
        inter_broker_listener_name: "PLAINTEXT".to_string(),
        inter_broker_security: Default::default(),
        rack: None,
    };
    let controller = Arc::new(FakeController::default());
    let broker = Broker::open(
        config,
        Arc::clone(&controller) as Arc<dyn ControllerChannel>,
    )
    .expect("open broker");
    let handler = Arc::new(broker.client_handler());
    let server_config = ServerConfig {
        listener_name: "PLAINTEXT".to_string(),
        ..ServerConfig::default()
    };
    let server = Server::bind("127.0.0.1:0", handler, server_config)
        .await
        .expect("bind");
    publish(&broker, &publication(server.local_addr().port()));
    let client = Client::new(server.local_addr().to_string(), ClientConfig::default());
    Running {
        broker,
        server,
        client,
        controller,
    }
}

pub fn batch(count: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..count {
        b.append_kv(ts + i as i64, None, Some(Bytes::from(format!("v{i}"))));
    }
    b.build().into_bytes()
}

pub fn idempotent_batch(pid: i64, seq: i32, count: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0).producer(pid, 0, seq);
    for _ in 0..count {
        b.append_kv(now_ms(), None, Some(Bytes::from_static(b"idem")));
    }
    b.build().into_bytes()
}

pub fn now_ms() -> i64 {
    krust_broker::server::replica_manager::now_ms()
}

pub fn tname(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(tname(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ])
}

pub async fn produce(client: &Client, request: ProduceRequest) -> ProduceResponse {
    match client.send(request, 11).await.expect("produce") {
        ResponseKind::Produce(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// (error, base offset) of the single partition.
pub async fn produce_one(client: &Client, topic: &str, records: Bytes, acks: i16) -> (i16, i64) {
    let r = produce(client, produce_request(topic, 0, records, acks)).await;
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

pub fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_topic(topic, offset)])
}

pub fn fetch_topic(topic: &str, offset: i64) -> FetchTopic {
    FetchTopic::default()
        .with_topic(tname(topic))
        .with_partitions(vec![
            FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(1 << 20),
        ])
}

pub async fn fetch(client: &Client, request: FetchRequest, version: i16) -> FetchResponse {
    match client.send(request, version).await.expect("fetch") {
        ResponseKind::Fetch(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn list_offset(client: &Client, topic: &str, timestamp: i64) -> (i16, i64) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(tname(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp)
                        .with_current_leader_epoch(-1),
                ]),
        ]);
    match client.send(request, 7).await.expect("list offsets") {
        ResponseKind::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out");
}

pub trait CloneForTest {
    /// A second client to the same address.
    fn clone_for_test(&self) -> Client;
}

impl CloneForTest for Client {
    fn clone_for_test(&self) -> Client {
        Client::new(self.addr().to_string(), ClientConfig::default())
    }
}

/// Publishes `records` on top of the broker's current image.
pub fn publish_more(broker: &Arc<Broker>, records: &[MetadataRecord]) {
    let image = broker.replica_manager().image();
    let mut delta = MetadataDelta::new(&image);
    for record in records {
        delta.replay(record).expect("valid record");
    }
    let next = delta.apply(MetadataProvenance::new(
        image.provenance.last_contained_offset + 1,
        1,
        2000,
    ));
    publish(broker, &Publication { delta, image: next });
}

/// Hands `publication` to the broker's metadata publishers, in order, as the node's metadata
/// loader does with a log delta.
pub fn publish(broker: &Arc<Broker>, publication: &Publication) {
    let manifest = LoaderManifest::LogDelta {
        provenance: publication.image.provenance,
        leader_and_epoch: LeaderAndEpoch::default(),
        num_batches: 1,
        num_bytes: 0,
        elapsed: std::time::Duration::ZERO,
    };
    for mut publisher in broker.metadata_publishers() {
        publisher.on_metadata_update(&publication.delta, &publication.image, &manifest);
    }
}
