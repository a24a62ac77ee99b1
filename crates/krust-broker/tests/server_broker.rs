//! The broker runtime end to end on loopback: a `Broker` over a temp log dir, an in-test
//! `ControllerChannel`, a metadata image built from records and published to it, a real
//! `krust_net::Server` with the broker's client handler, and a `krust_net::Client`.
//!
//! Broker 1 is under test; broker 2 exists only in the metadata (it leads `remote-0`, which
//! broker 1 follows, and replicates `replicated-0`, whose follower fetches the test sends
//! by hand with `replica_id` 2).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AllocateProducerIdsResponse, ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsResponse,
    DescribeClusterRequest, DescribeConfigsRequest, FetchRequest, FetchResponse,
    InitProducerIdRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest, ProduceResponse,
    ProducerId, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::server::{Broker, BrokerConfig, Endpoint};
use krust_log::RecordBatchBuilder;
use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance, Publication};
use krust_metadata::records::*;
use krust_net::{Client, ClientConfig, Server, ServerConfig};
use uuid::Uuid;

const ORDERS: Uuid = Uuid::from_u128(0x0001);
const REMOTE: Uuid = Uuid::from_u128(0x0002);
const REPLICATED: Uuid = Uuid::from_u128(0x0003);
/// Every test is bounded by this.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The controller as far as this broker needs it: producer id blocks and topic creation.
#[derive(Default)]
struct FakeController {
    created: Mutex<Vec<String>>,
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
                RequestKind::AllocateProducerIds(_) => Ok(ResponseKind::AllocateProducerIds(
                    AllocateProducerIdsResponse::default()
                        .with_producer_id_start(ProducerId(5000))
                        .with_producer_id_len(1000),
                )),
                RequestKind::CreateTopics(r) => {
                    let mut created = self.created.lock().expect("lock");
                    created.extend(r.topics.iter().map(|t| t.name.0.to_string()));
                    Ok(ResponseKind::CreateTopics(CreateTopicsResponse::default()))
                }
                other => Err(ControllerChannelError::Unsupported(format!("{other:?}"))),
            }
        })
    }
}

fn broker_record(id: i32, port: u16) -> MetadataRecord {
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

fn topic_record(name: &str, id: Uuid) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: id,
        ..Default::default()
    })
}

fn partition_record(id: Uuid, index: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
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
fn publication(port: u16) -> Publication {
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

struct Running {
    broker: Arc<Broker>,
    server: Server,
    client: Client,
    controller: Arc<FakeController>,
}

impl Running {
    fn addr(&self) -> String {
        self.server.local_addr().to_string()
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.broker.shutdown().await;
    }
}

async fn start(dir: &Path) -> Running {
    let mut properties = BTreeMap::new();
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
        properties,
        advertised_listeners: vec![Endpoint {
            name: "PLAINTEXT".to_string(),
            host: "127.0.0.1".to_string(),
            port: 0,
            security_protocol: 0,
        }],
        inter_broker_listener_name: "PLAINTEXT".to_string(),
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
    broker.publish(&publication(server.local_addr().port()));
    let client = Client::new(server.local_addr().to_string(), ClientConfig::default());
    Running {
        broker,
        server,
        client,
        controller,
    }
}

fn batch(count: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..count {
        b.append_kv(ts + i as i64, None, Some(Bytes::from(format!("v{i}"))));
    }
    b.build().into_bytes()
}

fn idempotent_batch(pid: i64, seq: i32, count: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0).producer(pid, 0, seq);
    for _ in 0..count {
        b.append_kv(now_ms(), None, Some(Bytes::from_static(b"idem")));
    }
    b.build().into_bytes()
}

fn now_ms() -> i64 {
    krust_broker::server::replica_manager::now_ms()
}

fn tname(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
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

async fn produce(client: &Client, request: ProduceRequest) -> ProduceResponse {
    match client.send(request, 11).await.expect("produce") {
        ResponseKind::Produce(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// (error, base offset) of the single partition.
async fn produce_one(client: &Client, topic: &str, records: Bytes, acks: i16) -> (i16, i64) {
    let r = produce(client, produce_request(topic, 0, records, acks)).await;
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_topic(topic, offset)])
}

fn fetch_topic(topic: &str, offset: i64) -> FetchTopic {
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

async fn fetch(client: &Client, request: FetchRequest, version: i16) -> FetchResponse {
    match client.send(request, version).await.expect("fetch") {
        ResponseKind::Fetch(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn list_offset(client: &Client, topic: &str, timestamp: i64) -> (i16, i64) {
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

async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_metadata_and_cluster() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let ResponseKind::ApiVersions(v) = b
            .client
            .send(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("test"))
                    .with_client_software_version(StrBytes::from_static_str("1")),
                3,
            )
            .await
            .expect("api versions")
        else {
            panic!("not ApiVersions");
        };
        let keys: Vec<i16> = v.api_keys.iter().map(|k| k.api_key).collect();
        assert!(keys.contains(&(ApiKey::Produce as i16)));
        assert!(keys.contains(&(ApiKey::Fetch as i16)));
        // Groups and forwarding are not plugged in: not advertised.
        assert!(!keys.contains(&(ApiKey::JoinGroup as i16)));
        assert!(!keys.contains(&(ApiKey::CreateTopics as i16)));
        assert!(
            v.finalized_features
                .iter()
                .any(|f| f.name.as_str() == "metadata.version" && f.max_version_level == 21)
        );

        let ResponseKind::Metadata(m) = b
            .client
            .send(MetadataRequest::default().with_topics(None), 12)
            .await
            .expect("metadata")
        else {
            panic!("not Metadata");
        };
        let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2]);
        assert!(ids.contains(&m.controller_id.0));
        assert_eq!(m.cluster_id.as_deref(), Some("test-cluster-id-00000"));
        let orders = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "orders"))
            .expect("orders");
        assert_eq!(orders.topic_id, ORDERS);
        assert_eq!(orders.partitions.len(), 2);
        assert_eq!(orders.partitions[0].leader_id.0, 1);
        assert_eq!(orders.partitions[0].leader_epoch, 4);

        // Unknown topic: auto-created through the controller, LEADER_NOT_AVAILABLE meanwhile.
        let ResponseKind::Metadata(m) = b
            .client
            .send(
                MetadataRequest::default()
                    .with_allow_auto_topic_creation(true)
                    .with_topics(Some(vec![
                        MetadataRequestTopic::default().with_name(Some(tname("fresh"))),
                        MetadataRequestTopic::default().with_name(Some(tname("bad/name"))),
                    ])),
                12,
            )
            .await
            .expect("metadata")
        else {
            panic!("not Metadata");
        };
        assert_eq!(
            m.topics[0].error_code,
            ResponseError::LeaderNotAvailable.code()
        );
        assert_eq!(
            m.topics[1].error_code,
            ResponseError::InvalidTopicException.code()
        );
        for _ in 0..200 {
            if !b.controller.created.lock().expect("lock").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *b.controller.created.lock().expect("lock"),
            vec!["fresh".to_string()]
        );

        let ResponseKind::DescribeCluster(c) = b
            .client
            .send(DescribeClusterRequest::default().with_endpoint_type(1), 1)
            .await
            .expect("describe cluster")
        else {
            panic!("not DescribeCluster");
        };
        assert_eq!(c.error_code, 0);
        assert_eq!(c.brokers.len(), 2);
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_acks_and_errors() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        assert_eq!(
            produce_one(&b.client, "orders", batch(3, now_ms()), 1).await,
            (0, 0)
        );
        assert_eq!(
            produce_one(&b.client, "orders", batch(2, now_ms()), -1).await,
            (0, 3)
        );

        // acks=0: no response; the records land all the same.
        let fire_and_forget = Client::new(
            b.addr(),
            ClientConfig {
                request_timeout: Duration::from_millis(300),
                ..ClientConfig::default()
            },
        );
        let _ = fire_and_forget
            .send(produce_request("orders", 0, batch(1, now_ms()), 0), 11)
            .await;
        let mut end = 0;
        for _ in 0..500 {
            end = list_offset(&b.client, "orders", -1).await.1;
            if end == 6 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(end, 6);

        // A follower's partition: NOT_LEADER_OR_FOLLOWER with the leader hint.
        let r = produce(
            &b.client,
            produce_request("remote", 0, batch(1, now_ms()), 1),
        )
        .await;
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
        assert_eq!(
            (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
            (2, 4)
        );
        assert_eq!(r.node_endpoints.len(), 1);

        // Unknown topic, unknown partition.
        assert_eq!(
            produce_one(&b.client, "nope", batch(1, now_ms()), 1)
                .await
                .0,
            ResponseError::UnknownTopicOrPartition.code()
        );
        let r = produce(
            &b.client,
            produce_request("orders", 9, batch(1, now_ms()), 1),
        )
        .await;
        assert_eq!(
            r.responses[0].partition_responses[0].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );

        // A flipped payload byte: CRC mismatch, CORRUPT_MESSAGE, nothing written.
        let mut bad = batch(2, now_ms()).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert_eq!(
            produce_one(&b.client, "orders", Bytes::from(bad), 1)
                .await
                .0,
            ResponseError::CorruptMessage.code()
        );
        assert_eq!(list_offset(&b.client, "orders", -1).await, (0, 6));

        // acks=all on a partition whose ISR includes broker 2: waits for its fetch.
        let client = b.client.clone_for_test();
        let waiting = tokio::spawn(async move {
            produce_one(&client, "replicated", batch(2, now_ms()), -1).await
        });
        let tp = krust_metadata::image::topics::TopicPartition {
            topic: "replicated".to_string(),
            partition: 0,
        };
        let partition = b.broker.replica_manager().partition(&tp).expect("hosted");
        for _ in 0..500 {
            if partition.lock().expect("lock").log_end_offset() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!waiting.is_finished());
        let follower = fetch_request("replicated", 2, 0).with_replica_id(BrokerId(2));
        let r = fetch(&b.client, follower, 12).await;
        assert_eq!(r.responses[0].partitions[0].error_code, 0);
        assert_eq!(r.responses[0].partitions[0].high_watermark, 2);
        assert_eq!(waiting.await.expect("join"), (0, 0));

        // acks=all times out when the follower never fetches.
        let mut request = produce_request("replicated", 0, batch(1, now_ms()), -1);
        request.timeout_ms = 50;
        let r = produce(&b.client, request).await;
        assert_eq!(
            r.responses[0].partition_responses[0].error_code,
            ResponseError::RequestTimedOut.code()
        );
        b.stop().await;
    })
    .await;
}

trait CloneForTest {
    fn clone_for_test(&self) -> Client;
}

impl CloneForTest for Client {
    fn clone_for_test(&self) -> Client {
        Client::new(self.addr().to_string(), ClientConfig::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_poll_sessions_and_offsets() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let t0 = now_ms();
        assert_eq!(
            produce_one(&b.client, "orders", batch(2, t0), 1).await,
            (0, 0)
        );

        // Beyond the log end.
        let r = fetch(&b.client, fetch_request("orders", 99, 0), 12).await;
        assert_eq!(
            r.responses[0].partitions[0].error_code,
            ResponseError::OffsetOutOfRange.code()
        );

        // Long poll at the end: woken by a produce.
        let client = b.client.clone_for_test();
        let poll =
            tokio::spawn(
                async move { fetch(&client, fetch_request("orders", 2, 60_000), 12).await },
            );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!poll.is_finished());
        assert_eq!(
            produce_one(&b.client, "orders", batch(1, t0 + 10), 1).await,
            (0, 2)
        );
        let r = poll.await.expect("join");
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert_eq!(p.high_watermark, 3);
        assert!(!p.records.as_ref().expect("records").is_empty());

        // Sessions: a full fetch opens one, incremental fetches list only changes.
        let full = fetch_request("orders", 0, 0)
            .with_session_id(0)
            .with_session_epoch(0);
        let r = fetch(&b.client, full, 12).await;
        assert_ne!(r.session_id, 0);
        let session = r.session_id;
        assert_eq!(r.responses[0].partitions.len(), 1);
        let incremental = |epoch: i32| {
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_bytes(1 << 20)
                .with_min_bytes(1)
                .with_max_wait_ms(0)
                .with_session_id(session)
                .with_session_epoch(epoch)
        };
        // The client moved on to offset 3: nothing new there.
        let r = fetch(
            &b.client,
            incremental(1).with_topics(vec![fetch_topic("orders", 3)]),
            12,
        )
        .await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.session_id, session);
        assert!(r.responses.is_empty(), "{r:?}");
        assert_eq!(
            produce_one(&b.client, "orders", batch(1, t0 + 20), 1).await,
            (0, 3)
        );
        let r = fetch(&b.client, incremental(2), 12).await;
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].partitions[0].high_watermark, 4);
        let r = fetch(&b.client, incremental(7), 12).await;
        assert_eq!(r.error_code, ResponseError::InvalidFetchSessionEpoch.code());
        let r = fetch(
            &b.client,
            incremental(1).with_session_id(session.wrapping_add(1)),
            12,
        )
        .await;
        assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());

        // ListOffsets: earliest, latest, by timestamp, max timestamp.
        assert_eq!(list_offset(&b.client, "orders", -2).await, (0, 0));
        assert_eq!(list_offset(&b.client, "orders", -1).await, (0, 4));
        assert_eq!(list_offset(&b.client, "orders", t0 + 1).await, (0, 1));
        assert_eq!(list_offset(&b.client, "orders", -3).await, (0, 3));
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_with_sources_and_synonyms() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let request = DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("orders"))
                    .with_configuration_keys(None),
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("nope"))
                    .with_configuration_keys(None),
            ]);
        let ResponseKind::DescribeConfigs(r) = b.client.send(request, 4).await.expect("describe")
        else {
            panic!("not DescribeConfigs");
        };
        let orders = &r.results[0];
        assert_eq!(orders.error_code, 0);
        let get = |name: &str| {
            orders
                .configs
                .iter()
                .find(|c| c.name.as_str() == name)
                .expect(name)
                .clone()
        };
        let retention = get("retention.ms");
        assert_eq!(retention.value.as_deref(), Some("86400000"));
        assert_eq!(retention.config_source, 1);
        let synonyms: Vec<(&str, i8)> = retention
            .synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(
            synonyms,
            vec![
                ("retention.ms", 1),
                ("log.retention.hours", 4),
                ("log.retention.hours", 5)
            ]
        );
        let segment = get("segment.bytes");
        assert_eq!(segment.value.as_deref(), Some("1073741824"));
        assert_eq!(segment.config_source, 5);
        assert_eq!(
            r.results[1].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_survives_restart() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let ResponseKind::InitProducerId(init) = b
            .client
            .send(
                InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000),
                4,
            )
            .await
            .expect("init")
        else {
            panic!("not InitProducerId");
        };
        assert_eq!(
            (init.error_code, init.producer_id.0, init.producer_epoch),
            (0, 5000, 0)
        );
        let pid = init.producer_id.0;
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 0, 2), -1).await,
            (0, 0)
        );
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 2, 1), -1).await,
            (0, 2)
        );
        // A retried batch: the original offset, nothing appended.
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 2, 1), -1).await,
            (0, 2)
        );
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 9, 1), -1)
                .await
                .0,
            ResponseError::OutOfOrderSequenceNumber.code()
        );
        b.stop().await;

        // Same log dir, new process-equivalent: data and producer state are back.
        let b = start(dir.path()).await;
        assert_eq!(list_offset(&b.client, "orders", -1).await, (0, 3));
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 2, 1), -1).await,
            (0, 2)
        );
        assert_eq!(
            produce_one(&b.client, "orders", idempotent_batch(pid, 3, 1), -1).await,
            (0, 3)
        );
        let r = fetch(&b.client, fetch_request("orders", 0, 0), 12).await;
        let p = &r.responses[0].partitions[0];
        assert_eq!((p.error_code, p.high_watermark), (0, 4));
        let records = p.records.clone().expect("records");
        let batches = krust_log::batch::parse_all(records, 1 << 20).expect("batches");
        assert_eq!(batches.len(), 3);
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_log_dir_is_refused_and_strays_are_removed() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        // A partition of a topic the metadata no longer has.
        std::fs::create_dir_all(dir.path().join("gone-0")).expect("mkdir");
        let b = start(dir.path()).await;
        assert!(!dir.path().join("gone-0").exists());
        assert!(dir.path().join("orders-0").is_dir());
        let again = Broker::open(
            BrokerConfig {
                node_id: 1,
                cluster_id: String::new(),
                log_dirs: vec![dir.path().to_path_buf()],
                properties: BTreeMap::from([(
                    "metadata.log.dir".to_string(),
                    dir.path().join("meta").display().to_string(),
                )]),
                advertised_listeners: Vec::new(),
                inter_broker_listener_name: "PLAINTEXT".to_string(),
                rack: None,
            },
            Arc::new(FakeController::default()),
        );
        assert!(matches!(
            again,
            Err(krust_broker::server::BrokerError::Locked { .. })
        ));
        b.stop().await;
    })
    .await;
}

/// Publishes `records` on top of the broker's current image.
fn publish_more(broker: &Broker, records: &[MetadataRecord]) {
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
    broker.publish(&Publication { delta, image: next });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_leadership_moves_and_deletes_apply() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        assert_eq!(
            produce_one(&b.client, "orders", batch(20, now_ms()), 1).await,
            (0, 0)
        );

        // max.message.bytes lowered: the same batch is now too large.
        publish_more(
            &b.broker,
            &[MetadataRecord::Config(ConfigRecord {
                resource_type: 2,
                resource_name: "orders".into(),
                name: "max.message.bytes".into(),
                value: Some("100".into()),
                ..Default::default()
            })],
        );
        assert_eq!(
            produce_one(&b.client, "orders", batch(20, now_ms()), 1)
                .await
                .0,
            ResponseError::MessageTooLarge.code()
        );

        // orders-1 moves to broker 2: this broker follows it now.
        publish_more(
            &b.broker,
            &[MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 1,
                topic_id: ORDERS,
                replicas: Some(vec![1, 2]),
                isr: Some(vec![1, 2]),
                leader: 2,
                ..Default::default()
            })],
        );
        let r = produce(
            &b.client,
            produce_request("orders", 1, batch(1, now_ms()), 1),
        )
        .await;
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
        assert_eq!(
            (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
            (2, 5)
        );

        // The topic is deleted: its directories go, and it is unknown.
        publish_more(
            &b.broker,
            &[MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: ORDERS,
                ..Default::default()
            })],
        );
        assert!(!dir.path().join("orders-0").exists());
        assert!(!dir.path().join("orders-1").exists());
        assert_eq!(
            produce_one(&b.client, "orders", batch(1, now_ms()), 1)
                .await
                .0,
            ResponseError::UnknownTopicOrPartition.code()
        );
        let leftovers: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("orders"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        b.stop().await;
    })
    .await;
}
