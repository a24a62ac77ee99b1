//! The broker runtime end to end on loopback: a `Broker` over a temp log dir, an in-test
//! `ControllerChannel`, a metadata image built from records and published to it, a real
//! `krust_net::Server` with the broker's client handler, and a `krust_net::Client`.
//!
//! Broker 1 is under test; broker 2 exists only in the metadata (it leads `remote-0`, which
//! broker 1 follows, and replicates `replicated-0`, whose follower fetches the test sends
//! by hand with `replica_id` 2).

mod server_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, DescribeClusterRequest, DescribeConfigsRequest,
    FetchRequest, InitProducerIdRequest, MetadataRequest, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use krust_broker::server::{Broker, BrokerConfig};
use krust_metadata::records::*;
use krust_net::{Client, ClientConfig};
use server_common::*;

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
            v.supported_features
                .iter()
                .any(|f| f.name.as_str() == "metadata.version"
                    && f.min_version == 1
                    && f.max_version == 21)
        );
        assert!(
            v.supported_features
                .iter()
                .any(|f| f.name.as_str() == "kraft.version")
        );
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

        // Unknown topic: auto-created through the controller, LEADER_NOT_AVAILABLE meanwhile;
        // clients polling while it is created send the controller no more requests.
        b.controller
            .create_delay_ms
            .store(300, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..2 {
            b.client
                .send(
                    MetadataRequest::default()
                        .with_allow_auto_topic_creation(true)
                        .with_topics(Some(vec![
                            MetadataRequestTopic::default().with_name(Some(tname("fresh"))),
                        ])),
                    12,
                )
                .await
                .expect("metadata");
        }
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
            ResponseError::UnknownTopicOrPartition.code(),
            "Kafka 3.9 (KRaft) answers a topic being auto-created so"
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
        // Any duplicate request would have been answered by now too.
        tokio::time::sleep(Duration::from_millis(400)).await;
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

        // Broker 2 fenced: gone from the brokers; its partition has no reachable leader
        // (Kafka: LISTENER_NOT_FOUND for a registered but unavailable leader), and a fenced
        // replica is not offline.
        publish_more(
            &b.broker,
            &[MetadataRecord::BrokerRegistrationChange(
                BrokerRegistrationChangeRecord {
                    broker_id: 2,
                    broker_epoch: 12,
                    fenced: 1,
                    ..Default::default()
                },
            )],
        );
        let ResponseKind::Metadata(m) = b
            .client
            .send(
                MetadataRequest::default().with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(tname("remote"))),
                ])),
                12,
            )
            .await
            .expect("metadata")
        else {
            panic!("not Metadata");
        };
        assert_eq!(m.brokers.len(), 1);
        let p = &m.topics[0].partitions[0];
        assert_eq!(p.error_code, ResponseError::ListenerNotFound.code());
        assert_eq!(p.leader_id.0, -1);
        assert!(p.offline_replicas.is_empty());
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

        // Clients may not write internal topics.
        assert_eq!(
            produce_one(&b.client, "__consumer_offsets", batch(1, now_ms()), 1)
                .await
                .0,
            ResponseError::InvalidTopicException.code()
        );

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
        wait_for_replicated(&b, |p| p.log_end_offset() == 2).await;
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
        // A full fetch naming the session closes it and opens a new one.
        let reopen = fetch_request("orders", 0, 0)
            .with_session_id(session)
            .with_session_epoch(0);
        let r = fetch(&b.client, reopen, 12).await;
        assert_eq!(r.error_code, 0);
        assert_ne!(r.session_id, 0);
        assert_ne!(r.session_id, session);
        let r = fetch(&b.client, incremental(3), 12).await;
        assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
        // A session opened by name cannot go on by topic id.
        let by_name = fetch_request("orders", 0, 0).with_session_epoch(0);
        let opened = fetch(&b.client, by_name, 12).await.session_id;
        let r = fetch(&b.client, incremental(1).with_session_id(opened), 13).await;
        assert_eq!(r.error_code, ResponseError::FetchSessionTopicIdError.code());

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
        // Kafka 3.9 drops broker synonyms ahead of the first named log.retention.ms.
        assert_eq!(synonyms, vec![("retention.ms", 1)]);
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
        // No block from the controller yet: a retriable error, as Kafka answers.
        b.controller
            .refuse_producer_ids
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let ResponseKind::InitProducerId(init) = b
            .client
            .send(
                InitProducerIdRequest::default().with_transactional_id(None),
                4,
            )
            .await
            .expect("init")
        else {
            panic!("not InitProducerId");
        };
        assert_eq!(
            init.error_code,
            ResponseError::CoordinatorLoadInProgress.code()
        );
        b.controller
            .refuse_producer_ids
            .store(false, std::sync::atomic::Ordering::SeqCst);
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
        let ResponseKind::DescribeProducers(d) = b
            .client
            .send(describe_producers_request("orders"), 0)
            .await
            .expect("describe producers")
        else {
            panic!("not DescribeProducers");
        };
        let p = &d.topics[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert_eq!(p.active_producers.len(), 1);
        let state = &p.active_producers[0];
        assert_eq!(
            (
                state.producer_id.0,
                state.producer_epoch,
                state.last_sequence
            ),
            (pid, 0, 2)
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
                static_config: std::sync::Arc::new(
                    krust_config::KafkaConfig::parse(&BTreeMap::from([(
                        "metadata.log.dir".to_string(),
                        dir.path().join("meta").display().to_string(),
                    )]))
                    .expect("valid test config"),
                ),
                advertised_listeners: Vec::new(),
                inter_broker_listener_name: "PLAINTEXT".to_string(),
                inter_broker_security: Default::default(),
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

        // After shutdown, publications no longer open logs.
        b.broker.shutdown().await;
        publish(&b.broker, &publication(1));
        assert!(b.broker.replica_manager().all_hosted().is_empty());
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_version_answers() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{
        DeleteRecordsRequest, DescribeLogDirsRequest, OffsetForLeaderEpochRequest, RequestKind,
    };
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        for &(key, min, max) in krust_broker::server::apis::OWN_APIS {
            for version in min..=max {
                let request: RequestKind = match key {
                    ApiKey::Produce => produce_request("orders", 0, batch(1, now_ms()), 1).into(),
                    ApiKey::Fetch => {
                        let mut r = fetch_request("orders", 0, 0);
                        if version >= 13 {
                            r.topics[0].topic = Default::default();
                            r.topics[0].topic_id = ORDERS;
                        }
                        if version < 7 {
                            r.session_epoch = -1;
                        }
                        r.into()
                    }
                    ApiKey::ListOffsets => ListOffsetsRequestExt::latest("orders").into(),
                    ApiKey::Metadata => MetadataRequest::default()
                        .with_topics(Some(vec![
                            MetadataRequestTopic::default().with_name(Some(tname("orders"))),
                        ]))
                        .into(),
                    ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::default()
                        .with_topics(vec![
                            OffsetForLeaderTopic::default()
                                .with_topic(tname("orders"))
                                .with_partitions(vec![
                                    OffsetForLeaderPartition::default()
                                        .with_partition(0)
                                        .with_current_leader_epoch(-1)
                                        .with_leader_epoch(4),
                                ]),
                        ])
                        .into(),
                    ApiKey::ApiVersions => ApiVersionsRequest::default()
                        .with_client_software_name(StrBytes::from_static_str("t"))
                        .with_client_software_version(StrBytes::from_static_str("1"))
                        .into(),
                    ApiKey::DescribeConfigs => DescribeConfigsRequest::default()
                        .with_include_synonyms(version >= 1)
                        .with_resources(vec![
                            DescribeConfigsResource::default()
                                .with_resource_type(2)
                                .with_resource_name(StrBytes::from_static_str("orders"))
                                .with_configuration_keys(None),
                            DescribeConfigsResource::default()
                                .with_resource_type(4)
                                .with_resource_name(StrBytes::from_static_str("1"))
                                .with_configuration_keys(None),
                        ])
                        .into(),
                    ApiKey::DeleteRecords => DeleteRecordsRequest::default()
                        .with_timeout_ms(1000)
                        .with_topics(vec![
                            DeleteRecordsTopic::default()
                                .with_name(tname("orders"))
                                .with_partitions(vec![
                                    DeleteRecordsPartition::default()
                                        .with_partition_index(0)
                                        .with_offset(0),
                                ]),
                        ])
                        .into(),
                    ApiKey::InitProducerId => InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .into(),
                    ApiKey::DescribeLogDirs => {
                        DescribeLogDirsRequest::default().with_topics(None).into()
                    }
                    ApiKey::DescribeCluster => DescribeClusterRequest::default().into(),
                    ApiKey::DescribeProducers => describe_producers_request("orders").into(),
                    // A marker for a producer the partition does not know: written.
                    ApiKey::WriteTxnMarkers => {
                        kafka_protocol::messages::WriteTxnMarkersRequest::default()
                            .with_markers(vec![
                                kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker::default()
                                    .with_producer_id(kafka_protocol::messages::ProducerId(424_242))
                                    .with_topics(vec![
                                        kafka_protocol::messages::write_txn_markers_request::WritableTxnMarkerTopic::default()
                                            .with_name(tname("orders"))
                                            .with_partition_indexes(vec![0]),
                                    ]),
                            ])
                            .into()
                    }
                    ApiKey::DescribeTopicPartitions => {
                        kafka_protocol::messages::DescribeTopicPartitionsRequest::default()
                            .with_response_partition_limit(10)
                            .into()
                    }
                    // Outside a SASL exchange the server answers ILLEGAL_SASL_STATE.
                    ApiKey::SaslHandshake => {
                        kafka_protocol::messages::SaslHandshakeRequest::default()
                            .with_mechanism(StrBytes::from_static_str("PLAIN"))
                            .into()
                    }
                    ApiKey::SaslAuthenticate => {
                        kafka_protocol::messages::SaslAuthenticateRequest::default().into()
                    }
                    // Without an authorizer: SECURITY_DISABLED, answered.
                    // (v0 has no pattern type: LITERAL.)
                    ApiKey::DescribeAcls => kafka_protocol::messages::DescribeAclsRequest::default()
                        .with_resource_type_filter(1)
                        .with_pattern_type_filter(if version == 0 { 3 } else { 1 })
                        .with_operation(1)
                        .with_permission_type(1)
                        .into(),
                    ApiKey::DescribeClientQuotas => {
                        kafka_protocol::messages::DescribeClientQuotasRequest::default().into()
                    }
                    ApiKey::DescribeUserScramCredentials => {
                        kafka_protocol::messages::DescribeUserScramCredentialsRequest::default()
                            .with_users(Some(Vec::new()))
                            .into()
                    }
                    other => panic!("no request built for {other:?}"),
                };
                let response = b.client.send(request, version).await;
                assert!(response.is_ok(), "{key:?} v{version}: {:?}", response.err());
            }
        }
        // Errors with leader hints, and sessions, at every version.
        for version in 3..=11 {
            let response = b
                .client
                .send(produce_request("remote", 0, batch(1, now_ms()), 1), version)
                .await
                .expect("produce");
            let ResponseKind::Produce(r) = response else {
                panic!("not Produce");
            };
            assert_eq!(
                r.responses[0].partition_responses[0].error_code,
                ResponseError::NotLeaderOrFollower.code(),
                "v{version}"
            );
        }
        for version in 4..=16 {
            let mut r = fetch_request("remote", 0, 0);
            if version >= 13 {
                r.topics[0].topic = Default::default();
                r.topics[0].topic_id = REMOTE;
            }
            if version >= 7 {
                r.session_epoch = 0;
            }
            let response = fetch(&b.client, r, version).await;
            // From v11 a consumer may read from a follower (KIP-392).
            let expected = if version >= 11 {
                0
            } else {
                ResponseError::NotLeaderOrFollower.code()
            };
            assert_eq!(
                response.responses[0].partitions[0].error_code, expected,
                "v{version}"
            );
        }
        // Everything still in order afterwards.
        assert_eq!(list_offset(&b.client, "orders", -1).await.0, 0);
        b.stop().await;
    })
    .await;
}

struct ListOffsetsRequestExt;

impl ListOffsetsRequestExt {
    fn latest(topic: &str) -> kafka_protocol::messages::ListOffsetsRequest {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        kafka_protocol::messages::ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(tname(topic))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1)
                            .with_current_leader_epoch(-1)
                            .with_max_num_offsets(1),
                    ]),
            ])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_retention_task_and_checkpoints() {
    use kafka_protocol::messages::DeleteRecordsRequest;
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut properties = BTreeMap::new();
        properties.insert(
            "log.retention.check.interval.ms".to_string(),
            "50".to_string(),
        );
        let b = start_with(dir.path(), properties).await;
        for _ in 0..5 {
            produce_one(&b.client, "orders", batch(1, now_ms()), 1).await;
        }
        let delete = |offset: i64| {
            DeleteRecordsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(tname("orders"))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(offset),
                        ]),
                ])
        };
        let ResponseKind::DeleteRecords(r) =
            b.client.send(delete(3), 2).await.expect("delete records")
        else {
            panic!("not DeleteRecords");
        };
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.error_code, p.low_watermark), (0, 3));
        assert_eq!(list_offset(&b.client, "orders", -2).await, (0, 3));
        let ResponseKind::DeleteRecords(r) =
            b.client.send(delete(99), 2).await.expect("delete records")
        else {
            panic!("not DeleteRecords");
        };
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            ResponseError::OffsetOutOfRange.code()
        );

        // A topic with tiny segments and 1 s retention: old batches go with the periodic
        // retention pass.
        publish_more(
            &b.broker,
            &[
                MetadataRecord::Topic(TopicRecord {
                    name: "short".into(),
                    topic_id: uuid::Uuid::from_u128(0x0004),
                    ..Default::default()
                }),
                partition_record(uuid::Uuid::from_u128(0x0004), 0, &[1], 1),
                MetadataRecord::Config(ConfigRecord {
                    resource_type: 2,
                    resource_name: "short".into(),
                    name: "segment.bytes".into(),
                    value: Some("100".into()),
                    ..Default::default()
                }),
                MetadataRecord::Config(ConfigRecord {
                    resource_type: 2,
                    resource_name: "short".into(),
                    name: "retention.ms".into(),
                    value: Some("1000".into()),
                    ..Default::default()
                }),
            ],
        );
        let old = now_ms() - 3_600_000;
        for _ in 0..4 {
            assert_eq!(produce_one(&b.client, "short", batch(1, old), 1).await.0, 0);
        }
        let mut start = 0;
        for _ in 0..1000 {
            start = list_offset(&b.client, "short", -2).await.1;
            if start > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(start > 0, "retention never ran");
        b.stop().await;

        // Clean shutdown wrote Kafka's checkpoint files.
        let hw = std::fs::read_to_string(dir.path().join("replication-offset-checkpoint"))
            .expect("replication-offset-checkpoint");
        assert!(hw.lines().any(|l| l == "orders 0 5"), "{hw}");
        let starts = std::fs::read_to_string(dir.path().join("log-start-offset-checkpoint"))
            .expect("log-start-offset-checkpoint");
        assert!(starts.lines().any(|l| l == "orders 0 3"), "{starts}");
        let recovery = std::fs::read_to_string(dir.path().join("recovery-point-offset-checkpoint"))
            .expect("recovery-point-offset-checkpoint");
        assert!(recovery.lines().any(|l| l == "orders 0 5"), "{recovery}");
    })
    .await;
}

/// Polls `replicated-0` on `b` until `done` holds (at most 500 × 10 ms; the caller asserts
/// what follows from it).
async fn wait_for_replicated(
    b: &Running,
    done: impl Fn(&krust_broker::partition::Partition) -> bool,
) {
    let tp = krust_metadata::image::topics::TopicPartition {
        topic: "replicated".to_string(),
        partition: 0,
    };
    let partition = b.broker.replica_manager().partition(&tp).expect("hosted");
    for _ in 0..500 {
        if done(&partition.lock().expect("lock")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn describe_producers_request(topic: &str) -> kafka_protocol::messages::DescribeProducersRequest {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    kafka_protocol::messages::DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(tname(topic))
            .with_partition_indexes(vec![0]),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_waits_for_the_followers_log_start() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        assert_eq!(
            produce_one(&b.client, "replicated", batch(3, now_ms()), 1).await,
            (0, 0)
        );
        // Broker 2 fetches everything: the HW reaches 3.
        let follower = |offset: i64, log_start: i64| {
            let mut r = fetch_request("replicated", offset, 0).with_replica_id(BrokerId(2));
            r.topics[0].partitions[0].log_start_offset = log_start;
            r
        };
        let r = fetch(&b.client, follower(3, 0), 12).await;
        assert_eq!(r.responses[0].partitions[0].high_watermark, 3);
        let delete = |offset: i64, timeout_ms: i32| {
            DeleteRecordsRequest::default()
                .with_timeout_ms(timeout_ms)
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(tname("replicated"))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(offset),
                        ]),
                ])
        };
        let send = |client: Client, request: DeleteRecordsRequest| async move {
            match client.send(request, 2).await.expect("delete records") {
                ResponseKind::DeleteRecords(r) => r,
                other => panic!("unexpected {other:?}"),
            }
        };
        // Broker 2 never reports a new log start: the request times out.
        let r: DeleteRecordsResponse = send(b.client.clone_for_test(), delete(1, 50)).await;
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            ResponseError::RequestTimedOut.code()
        );
        // It does now: the waiting request completes with the low watermark.
        let waiting = tokio::spawn(send(b.client.clone_for_test(), delete(2, 60_000)));
        wait_for_replicated(&b, |p| p.log_start_offset() == 2).await;
        assert!(!waiting.is_finished());
        fetch(&b.client, follower(3, 2), 12).await;
        let r = waiting.await.expect("join");
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.error_code, p.low_watermark), (0, 2));
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_ends_when_leadership_moves() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let client = b.client.clone_for_test();
        // Waits far longer than the test's bound unless the leadership change wakes it.
        let mut request = fetch_request("orders", 0, 600_000);
        request.topics[0].partitions[0].partition = 1;
        let poll = tokio::spawn(async move { fetch(&client, request, 10).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!poll.is_finished());
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
        let r = poll.await.expect("join");
        assert_eq!(
            r.responses[0].partitions[0].error_code,
            ResponseError::NotLeaderOrFollower.code()
        );
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_and_log_append_time() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        let config = |topic: &str, name: &str, value: &str| {
            MetadataRecord::Config(ConfigRecord {
                resource_type: 2,
                resource_name: topic.into(),
                name: name.into(),
                value: Some(value.into()),
                ..Default::default()
            })
        };
        publish_more(
            &b.broker,
            &[
                config("replicated", "min.insync.replicas", "2"),
                config("orders", "message.timestamp.type", "LogAppendTime"),
                // Broker 2 leaves the ISR of replicated-0.
                MetadataRecord::PartitionChange(PartitionChangeRecord {
                    partition_id: 0,
                    topic_id: REPLICATED,
                    isr: Some(vec![1]),
                    ..Default::default()
                }),
            ],
        );
        // acks=all below min.insync.replicas: refused, nothing written; acks=1 still works.
        assert_eq!(
            produce_one(&b.client, "replicated", batch(1, now_ms()), -1)
                .await
                .0,
            ResponseError::NotEnoughReplicas.code()
        );
        assert_eq!(
            produce_one(&b.client, "replicated", batch(1, now_ms()), 1).await,
            (0, 0)
        );
        // LogAppendTime: the broker stamps the batch and says when.
        let before = now_ms();
        let r = produce(&b.client, produce_request("orders", 0, batch(1, 1_000), 1)).await;
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0);
        assert!(p.log_append_time_ms >= before, "{}", p.log_append_time_ms);
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_metrics_in_kafka_names() {
    use krust_metrics::Collector;
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        produce_one(&b.client, "orders", batch(3, now_ms()), 1).await;
        produce_one(&b.client, "nope", batch(1, now_ms()), 1).await;
        let r = fetch(&b.client, fetch_request("orders", 0, 0), 12).await;
        let fetched = r.responses[0].partitions[0]
            .records
            .as_ref()
            .map_or(0, Bytes::len);
        let stats = b.broker.client_stats();
        assert_eq!(stats.messages_in(), 3);
        assert_eq!(stats.bytes_out(), fetched as u64);
        let mut families = Vec::new();
        stats.collect(std::time::Instant::now(), &mut families);
        let text = krust_metrics::render(&families);
        assert!(
            text.contains("kafka_server_brokertopicmetrics_messagesinpersec_count 3"),
            "{text}"
        );
        assert!(
            text.contains("kafka_server_brokertopicmetrics_failedproducerequestspersec_count 1"),
            "{text}"
        );
        assert!(
            text.contains("kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"} 2"),
            "{text}"
        );
        assert!(text.contains("request=\"FetchConsumer\""), "{text}");
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sessions_rotate_partitions_that_returned_data() {
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        assert_eq!(
            produce_one(&b.client, "orders", batch(1, now_ms()), 1).await,
            (0, 0)
        );
        let r = produce(
            &b.client,
            produce_request("orders", 1, batch(1, now_ms()), 1),
        )
        .await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        // A one-byte response budget: only the first partition read returns its batch.
        let mut full = fetch_request("orders", 0, 0)
            .with_max_bytes(1)
            .with_session_epoch(0);
        let p1 = full.topics[0].partitions[0].clone().with_partition(1);
        full.topics[0].partitions.push(p1);
        let r = fetch(&b.client, full, 12).await;
        let session = r.session_id;
        assert_ne!(session, 0);
        let incremental = |epoch: i32| {
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_bytes(1)
                .with_min_bytes(1)
                .with_max_wait_ms(0)
                .with_session_id(session)
                .with_session_epoch(epoch)
        };
        let with_records = |r: &kafka_protocol::messages::FetchResponse| -> Vec<i32> {
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .filter(|p| p.records.as_ref().is_some_and(|x| !x.is_empty()))
                .map(|p| p.partition_index)
                .collect()
        };
        let first = with_records(&fetch(&b.client, incremental(1), 12).await);
        let second = with_records(&fetch(&b.client, incremental(2), 12).await);
        assert_eq!(first.len(), 1);
        assert_eq!(second.len(), 1);
        assert_ne!(
            first, second,
            "the partition that returned data moves to the end"
        );
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_txn_markers_answers_per_partition_as_kafka() {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::{ProducerId, WriteTxnMarkersRequest};
    bounded(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = start(dir.path()).await;
        // A partition led here, one followed here (led elsewhere) and one nobody has: Kafka
        // looks for the local log first (UNKNOWN_TOPIC_OR_PARTITION without one), then
        // appends as leader (NOT_LEADER_OR_FOLLOWER on a follower).
        let request = WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(77))
                .with_producer_epoch(0)
                .with_transaction_result(false)
                .with_coordinator_epoch(3)
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(tname("orders"))
                        .with_partition_indexes(vec![0]),
                    WritableTxnMarkerTopic::default()
                        .with_name(tname("remote"))
                        .with_partition_indexes(vec![0]),
                    WritableTxnMarkerTopic::default()
                        .with_name(tname("nope"))
                        .with_partition_indexes(vec![0]),
                ]),
        ]);
        let ResponseKind::WriteTxnMarkers(r) = b.client.send(request, 1).await.expect("answer")
        else {
            panic!("not WriteTxnMarkers");
        };
        assert_eq!(r.markers.len(), 1);
        assert_eq!(r.markers[0].producer_id, ProducerId(77));
        let codes: Vec<(String, i16)> = r.markers[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.0.to_string(), p.error_code))
            })
            .collect();
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(
            codes,
            vec![
                ("orders".to_string(), 0),
                (
                    "remote".to_string(),
                    ResponseError::NotLeaderOrFollower.code()
                ),
                ("nope".to_string(), unknown)
            ]
        );
        // A stale coordinator epoch for the same producer is fenced.
        let stale = WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(77))
                .with_producer_epoch(0)
                .with_transaction_result(true)
                .with_coordinator_epoch(2)
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(tname("orders"))
                        .with_partition_indexes(vec![0]),
                ]),
        ]);
        let ResponseKind::WriteTxnMarkers(r) = b.client.send(stale, 0).await.expect("answer")
        else {
            panic!("not WriteTxnMarkers");
        };
        assert_eq!(
            r.markers[0].topics[0].partitions[0].error_code,
            ResponseError::TransactionCoordinatorFenced.code()
        );
    })
    .await;
}
