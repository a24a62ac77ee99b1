//! The controller APIs of `krust server` (process.roles=controller), spoken to directly with
//! the krust-net client over loopback: three controllers formatted by `krust storage format`.
//!
//! Checks: ApiVersions advertises the controller APIs next to the Raft ones with Kafka 3.9's
//! ranges; a standby answers NOT_CONTROLLER; on the active controller a broker registers
//! (fenced), heartbeats until unfenced, CreateTopics commits a topic, a duplicate inside an
//! Envelope comes back as TOPIC_ALREADY_EXISTS in the wrapped response, the legacy AlterConfigs
//! works directly and inside an Envelope, and an Envelope with
//! garbage or a non-forwardable API is refused with INVALID_REQUEST.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, ApiVersionsRequest, BrokerHeartbeatRequest, BrokerId,
    BrokerRegistrationRequest, CreateTopicsRequest, EnvelopeRequest, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::MetadataVersion;
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_net::{Client, ClientConfig};
use support::{FAST_TIMEOUTS, Quorum, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(60);
const NOT_CONTROLLER: i16 = 41;
const INVALID_REQUEST: i16 = 42;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const BROKER_ID: i32 = 7;

fn start_controllers() -> Quorum {
    let mut quorum = Quorum::new(3, FAST_TIMEOUTS);
    for id in 1..=3 {
        let node = quorum.node(id);
        node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
    }
    quorum
}

fn client(address: String) -> Client {
    Client::new(
        address,
        ClientConfig {
            client_id: "controller-apis-test".to_owned(),
            request_timeout: Duration::from_secs(15),
            ..ClientConfig::default()
        },
    )
}

fn registration(cluster_id: &str) -> BrokerRegistrationRequest {
    let mv = MetadataVersion::LATEST_PRODUCTION.feature_level();
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(BROKER_ID))
        .with_cluster_id(StrBytes::from_string(cluster_id.to_owned()))
        .with_incarnation_id(uuid::Uuid::from_u128(
            0x1234_5678_9abc_def0_1234_5678_9abc_def0,
        ))
        .with_listeners(vec![
            Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092)
                .with_security_protocol(0),
        ])
        .with_features(vec![
            Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(1)
                .with_max_supported_version(mv),
        ])
        .with_log_dirs(vec![uuid::Uuid::from_u128(
            0xfeed_0000_0000_0000_0000_0000_0000_0001,
        )])
}

fn create_topic(name: &str) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(30_000)
}

/// A legacy AlterConfigs setting `(topic, key, value)` (one resource per entry).
fn legacy_alter_configs(topics: &[(&str, &str, &str)]) -> AlterConfigsRequest {
    AlterConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|(topic, key, value)| {
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string((*topic).to_owned()))
                    .with_configs(vec![
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string((*key).to_owned()))
                            .with_value(Some(StrBytes::from_string((*value).to_owned()))),
                    ])
            })
            .collect(),
    )
}

/// Awaits all `futures` concurrently, in order (a tiny `join_all`).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for future in futures {
        set.push(Box::pin(future));
    }
    let mut out = Vec::with_capacity(set.len());
    let mut pending: Vec<Option<_>> = set.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *result = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

fn envelope(inner: &RequestKind, api_key: ApiKey, version: i16) -> EnvelopeRequest {
    let frame = encode_request(api_key, version, 77, "forwarded-client", inner).expect("encode");
    EnvelopeRequest::default()
        .with_request_data(frame.slice(4..))
        .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1]))
}

#[test]
fn controller_apis_register_a_broker_create_topics_and_unwrap_envelopes() {
    let quorum = start_controllers();
    let leader = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()))
        .leader_id;
    let address_of = |id: i32| {
        quorum
            .nodes
            .iter()
            .find(|n| n.id == id)
            .expect("node")
            .address()
    };
    let standby = (1..=3).find(|id| *id != leader).expect("a standby");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cluster_id = quorum.cluster_id.clone();
    let result = runtime.block_on(async {
        let active = client(address_of(leader));
        let other = client(address_of(standby));

        // ApiVersions: controller APIs with Kafka 3.9's ranges, next to the Raft ones.
        // Until the bootstrap records are committed, no finalized features are reported.
        let deadline = Instant::now() + WAIT;
        let versions = loop {
            let ResponseKind::ApiVersions(versions) = active
                .send(
                    ApiVersionsRequest::default()
                        .with_client_software_name(StrBytes::from_static_str("krust-test"))
                        .with_client_software_version(StrBytes::from_static_str("1.0")),
                    3,
                )
                .await
                .expect("ApiVersions")
            else {
                panic!("not an ApiVersions response");
            };
            if !versions.finalized_features.is_empty() {
                break versions;
            }
            assert!(Instant::now() < deadline, "no finalized features");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let range = |key: ApiKey| {
            versions
                .api_keys
                .iter()
                .find(|k| k.api_key == key as i16)
                .map(|k| (k.min_version, k.max_version))
        };
        assert_eq!(versions.error_code, 0, "ApiVersions");
        for (key, want) in [
            (ApiKey::BrokerRegistration, (0, 4)),
            (ApiKey::BrokerHeartbeat, (0, 1)),
            (ApiKey::CreateTopics, (0, 7)),
            (ApiKey::Envelope, (0, 0)),
            (ApiKey::AlterPartition, (0, 3)),
            (ApiKey::AlterConfigs, (0, 2)),
            (ApiKey::ControllerRegistration, (0, 0)),
            (ApiKey::Vote, (0, 1)),
        ] {
            assert_eq!(range(key), Some(want), "{key:?}");
        }
        // Supported and finalized features.
        let feature = |name: &str| {
            versions
                .finalized_features
                .iter()
                .find(|f| f.name.as_str() == name)
                .map(|f| f.max_version_level)
        };
        assert!(
            versions
                .supported_features
                .iter()
                .any(|f| f.name.as_str() == "metadata.version" && f.min_version == 1),
            "supported features: {:?}",
            versions.supported_features
        );
        assert_eq!(
            feature("metadata.version"),
            Some(MetadataVersion::LATEST_PRODUCTION.feature_level()),
            "finalized features: {:?}",
            versions.finalized_features
        );
        assert!(versions.finalized_features_epoch >= 0);

        // A standby refuses.
        let ResponseKind::BrokerRegistration(refused) = other
            .send(registration(&cluster_id), 4)
            .await
            .expect("registration at the standby")
        else {
            panic!("not a BrokerRegistration response");
        };
        assert_eq!(refused.error_code, NOT_CONTROLLER, "standby answer");

        // The active controller registers the broker (fenced), then unfences it.
        let ResponseKind::BrokerRegistration(registered) = active
            .send(registration(&cluster_id), 4)
            .await
            .expect("registration")
        else {
            panic!("not a BrokerRegistration response");
        };
        assert_eq!(registered.error_code, 0, "registration");
        let broker_epoch = registered.broker_epoch;
        assert!(broker_epoch >= 0, "broker epoch {broker_epoch}");
        let deadline = Instant::now() + WAIT;
        loop {
            let ResponseKind::BrokerHeartbeat(beat) = active
                .send(
                    BrokerHeartbeatRequest::default()
                        .with_broker_id(BrokerId(BROKER_ID))
                        .with_broker_epoch(broker_epoch)
                        .with_current_metadata_offset(i64::MAX / 2),
                    1,
                )
                .await
                .expect("heartbeat")
            else {
                panic!("not a BrokerHeartbeat response");
            };
            assert_eq!(beat.error_code, 0, "heartbeat");
            if !beat.is_fenced {
                break;
            }
            assert!(Instant::now() < deadline, "broker never unfenced");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // CreateTopics directly, then the same inside an Envelope.
        let ResponseKind::CreateTopics(created) = active
            .send(create_topic("direct"), 7)
            .await
            .expect("CreateTopics")
        else {
            panic!("not a CreateTopics response");
        };
        assert_eq!(created.topics.len(), 1);
        assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0]);
        assert_eq!(created.topics[0].num_partitions, 2);

        // Many CreateTopics at once: the controller pipelines their appends (no wait per
        // commit) and answers each once its own records are committed.
        let concurrent: Vec<Client> = (0..16).map(|_| client(address_of(leader))).collect();
        let answers = futures_join_all(
            concurrent
                .iter()
                .enumerate()
                .map(|(i, c)| c.send(create_topic(&format!("pipelined-{i}")), 7)),
        )
        .await;
        for (i, answer) in answers.into_iter().enumerate() {
            let ResponseKind::CreateTopics(created) = answer.expect("CreateTopics") else {
                panic!("not a CreateTopics response");
            };
            assert_eq!(
                created.topics[0].error_code, 0,
                "pipelined-{i}: {created:?}"
            );
        }

        let inner = RequestKind::CreateTopics(create_topic("direct"));
        let ResponseKind::Envelope(wrapped) = active
            .send(envelope(&inner, ApiKey::CreateTopics, 7), 0)
            .await
            .expect("Envelope")
        else {
            panic!("not an Envelope response");
        };
        assert_eq!(wrapped.error_code, 0, "envelope");
        let mut data = wrapped.response_data.expect("response data");
        let correlation =
            decode_response_header(&mut data, ApiKey::CreateTopics, 7).expect("inner header");
        assert_eq!(correlation, 77, "inner correlation id");
        let ResponseKind::CreateTopics(duplicate) =
            decode_response_body(data, ApiKey::CreateTopics, 7).expect("inner body")
        else {
            panic!("not a CreateTopics response inside");
        };
        assert_eq!(duplicate.topics[0].error_code, TOPIC_ALREADY_EXISTS);

        // Legacy AlterConfigs: directly (an unknown topic is refused per resource), then
        // inside an Envelope, as a broker forwards it.
        let ResponseKind::AlterConfigs(altered) = active
            .send(
                legacy_alter_configs(&[
                    ("direct", "retention.ms", "1000"),
                    ("nope", "retention.ms", "1000"),
                ]),
                2,
            )
            .await
            .expect("AlterConfigs")
        else {
            panic!("not an AlterConfigs response");
        };
        let codes: Vec<(String, i16)> = altered
            .responses
            .iter()
            .map(|r| (r.resource_name.to_string(), r.error_code))
            .collect();
        assert_eq!(
            codes,
            [
                ("direct".to_owned(), 0),
                ("nope".to_owned(), UNKNOWN_TOPIC_OR_PARTITION)
            ]
        );
        let inner = RequestKind::AlterConfigs(legacy_alter_configs(&[(
            "direct",
            "cleanup.policy",
            "compact",
        )]));
        let ResponseKind::Envelope(wrapped) = active
            .send(envelope(&inner, ApiKey::AlterConfigs, 2), 0)
            .await
            .expect("Envelope")
        else {
            panic!("not an Envelope response");
        };
        assert_eq!(wrapped.error_code, 0, "envelope");
        let mut data = wrapped.response_data.expect("response data");
        decode_response_header(&mut data, ApiKey::AlterConfigs, 2).expect("inner header");
        let ResponseKind::AlterConfigs(forwarded) =
            decode_response_body(data, ApiKey::AlterConfigs, 2).expect("inner body")
        else {
            panic!("not an AlterConfigs response inside");
        };
        assert_eq!(forwarded.responses.len(), 1);
        assert_eq!(forwarded.responses[0].error_code, 0, "{forwarded:?}");

        // Refused envelopes: garbage, and an API that is never forwarded.
        let garbage = EnvelopeRequest::default()
            .with_request_data(Bytes::from_static(&[0, 1, 2]))
            .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1]));
        let ResponseKind::Envelope(bad) = active.send(garbage, 0).await.expect("Envelope") else {
            panic!("not an Envelope response");
        };
        assert_eq!(bad.error_code, INVALID_REQUEST, "garbage envelope");
        let heartbeat = RequestKind::BrokerHeartbeat(
            BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(BROKER_ID))
                .with_broker_epoch(broker_epoch),
        );
        let ResponseKind::Envelope(not_forwardable) = active
            .send(envelope(&heartbeat, ApiKey::BrokerHeartbeat, 1), 0)
            .await
            .expect("Envelope")
        else {
            panic!("not an Envelope response");
        };
        assert_eq!(
            not_forwardable.error_code, INVALID_REQUEST,
            "non-forwardable API in an envelope"
        );
        Ok::<(), String>(())
    });
    if let Err(e) = result {
        panic!("{e}\n{}", quorum.log_tails());
    }
}
