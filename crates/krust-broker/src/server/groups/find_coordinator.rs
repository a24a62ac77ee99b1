//! FindCoordinator v0–v5 (Kafka 3.9 `KafkaApis.handleFindCoordinatorRequest` /
//! `getCoordinator`) and the creation of `__consumer_offsets` on first use (Kafka's
//! `AutoTopicCreationManager` for internal topics).
//!
//! - GROUP keys: the leader of `__consumer_offsets-partitionFor(key)`, as its endpoint on the
//!   listener the request came in on; COORDINATOR_NOT_AVAILABLE while the topic does not exist
//!   (its creation is requested), the partition has no leader, or the leader is fenced or has
//!   no such listener.
//! - TRANSACTION keys: COORDINATOR_NOT_AVAILABLE here; the client listener sends them to the
//!   transaction coordinator ([`crate::server::txn::find_coordinator`]) when the broker has one.
//! - Any other key type: INVALID_REQUEST.
//! - v4+ answers each of `coordinator_keys`; v0–v3 the single `key`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, FindCoordinatorRequest, FindCoordinatorResponse, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::MetadataImage;
use krust_net::RequestContext;
use tracing::{info, warn};

use super::GroupCoordinator;
use super::log::GROUP_METADATA_TOPIC_NAME;

/// `CoordinatorType.GROUP`.
pub const KEY_TYPE_GROUP: i8 = 0;
/// `CoordinatorType.TRANSACTION`.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

use krust_net::error_codes::{COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE};

/// How long the CreateTopics for `__consumer_offsets` may take (Kafka's
/// `request.timeout.ms` default for the controller channel).
const CREATE_TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka's `Errors.message()` for the codes answered here (v1–v3 carry it).
fn error_message(code: i16) -> &'static str {
    match code {
        NONE => "NONE",
        COORDINATOR_NOT_AVAILABLE => "The coordinator is not available.",
        _ => {
            "This most likely occurs because of a request being malformed by the client library \
             or the message was sent to an incompatible broker. See the broker logs for more \
             details."
        }
    }
}

/// A coordinator found (or not): error code, node id, host, port (`Node.noNode()` on error).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    error_code: i16,
    node_id: i32,
    host: String,
    port: i32,
}

impl Found {
    fn error(error_code: i16) -> Found {
        Found {
            error_code,
            node_id: -1,
            host: String::new(),
            port: -1,
        }
    }
}

impl GroupCoordinator {
    /// Answers a FindCoordinator request.
    pub(super) fn find_coordinator(
        &self,
        ctx: &RequestContext,
        r: &FindCoordinatorRequest,
    ) -> FindCoordinatorResponse {
        let image = self.log.image();
        if ctx.api_version >= 4 {
            let coordinators = r
                .coordinator_keys
                .iter()
                .map(|key| {
                    let found = self.coordinator_for(&image, &ctx.listener_name, r.key_type, key);
                    Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(found.node_id))
                        .with_host(StrBytes::from_string(found.host))
                        .with_port(found.port)
                        .with_error_code(found.error_code)
                })
                .collect();
            return FindCoordinatorResponse::default().with_coordinators(coordinators);
        }
        let found = self.coordinator_for(&image, &ctx.listener_name, r.key_type, &r.key);
        FindCoordinatorResponse::default()
            .with_error_code(found.error_code)
            .with_error_message(Some(StrBytes::from_static_str(error_message(
                found.error_code,
            ))))
            .with_node_id(BrokerId(found.node_id))
            .with_host(StrBytes::from_string(found.host))
            .with_port(found.port)
    }

    fn coordinator_for(
        &self,
        image: &MetadataImage,
        listener: &str,
        key_type: i8,
        key: &str,
    ) -> Found {
        match key_type {
            KEY_TYPE_GROUP => {}
            KEY_TYPE_TRANSACTION => return Found::error(COORDINATOR_NOT_AVAILABLE),
            _ => return Found::error(INVALID_REQUEST),
        }
        let Some(topic) = image.topics.topic_by_name(GROUP_METADATA_TOPIC_NAME) else {
            self.create_offsets_topic();
            return Found::error(COORDINATOR_NOT_AVAILABLE);
        };
        let partition = self.partition_for(key);
        let Some(registration) = topic.partitions.get(&partition) else {
            return Found::error(COORDINATOR_NOT_AVAILABLE);
        };
        if registration.leader < 0 {
            return Found::error(COORDINATOR_NOT_AVAILABLE);
        }
        // Kafka's `getAliveBrokerNode`: registered, not fenced, with this listener.
        let endpoint = image
            .cluster
            .broker(registration.leader)
            .filter(|b| !b.fenced)
            .and_then(|b| b.listeners.get(listener));
        match endpoint {
            Some(e) => Found {
                error_code: NONE,
                node_id: registration.leader,
                host: e.host.clone(),
                port: i32::from(e.port),
            },
            None => Found::error(COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// Asks the controller to create `__consumer_offsets` unless a request is in flight. The
    /// answer is not awaited: FindCoordinator answers COORDINATOR_NOT_AVAILABLE and the client
    /// retries until the topic appears in the image with a leader.
    fn create_offsets_topic(&self) {
        if self.creating_offsets_topic.swap(true, Ordering::SeqCst) {
            return;
        }
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(_) => match &self.runtime {
                Some(h) => h.clone(),
                None => {
                    self.creating_offsets_topic.store(false, Ordering::SeqCst);
                    return;
                }
            },
        };
        let settings = &self.settings;
        let config = |name: &'static str, value: String| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str(name))
                .with_value(Some(StrBytes::from_string(value)))
        };
        // Kafka's `GroupCoordinator.groupMetadataTopicConfigs`.
        let topic = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(
                GROUP_METADATA_TOPIC_NAME,
            )))
            .with_num_partitions(settings.group.offsets_topic_num_partitions)
            .with_replication_factor(settings.offsets_topic_replication_factor)
            .with_configs(vec![
                config("cleanup.policy", "compact".to_owned()),
                config("compression.type", "producer".to_owned()),
                config(
                    "segment.bytes",
                    settings.offsets_topic_segment_bytes.to_string(),
                ),
            ]);
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(i32::try_from(CREATE_TOPIC_TIMEOUT.as_millis()).unwrap_or(i32::MAX));
        let channel = Arc::clone(&self.channel);
        let in_flight = Arc::clone(&self.creating_offsets_topic);
        runtime.spawn(async move {
            let result = channel
                .send(
                    RequestKind::CreateTopics(request),
                    None,
                    CREATE_TOPIC_TIMEOUT,
                )
                .await;
            match result {
                Ok(ResponseKind::CreateTopics(resp)) => {
                    for t in resp.topics {
                        if t.error_code == 0 {
                            info!(
                                topic = GROUP_METADATA_TOPIC_NAME,
                                "created the offsets topic"
                            );
                        } else {
                            warn!(
                                topic = GROUP_METADATA_TOPIC_NAME,
                                error_code = t.error_code,
                                message = ?t.error_message,
                                "creating the offsets topic failed"
                            );
                        }
                    }
                }
                Ok(other) => warn!(response = ?other, "unexpected answer to CreateTopics"),
                Err(e) => warn!(error = %e, "creating the offsets topic failed"),
            }
            in_flight.store(false, Ordering::SeqCst);
        });
    }
}
