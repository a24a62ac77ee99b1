//! CreateTopics (19): forwarded to the controller, then answered once this broker's published
//! image holds the topics the controller created.
//!
//! Kafka 3.9 answers as soon as the controller does, so a Metadata request sent right after
//! may still miss the topic on the broker that forwarded it (the new records reach its
//! metadata log a fetch later). krust waits for its own image first — read-your-writes on the
//! forwarding broker — bounded by the request's timeout (at most [`MAX_VISIBILITY_WAIT`]): a
//! broker that cannot catch up still answers, as Kafka would.

use std::time::Duration;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::{AclOperation, resource_type};
use krust_metadata::image::MetadataImage;
use krust_net::error_codes::TOPIC_AUTHORIZATION_FAILED;
use krust_net::{Reply, RequestContext};
use tokio::time::Instant;
use uuid::Uuid;

use super::super::Broker;
use super::super::forwarding::Forwarder;

/// The longest a successful CreateTopics answer waits for the broker's own image.
pub const MAX_VISIBILITY_WAIT: Duration = Duration::from_secs(5);

/// Forwards `request` and waits until the created topics are visible here.
pub async fn create_topics(
    broker: &Broker,
    forwarder: &Forwarder,
    ctx: &RequestContext,
    request: CreateTopicsRequest,
) -> Reply {
    // Kafka's `ControllerApis.createTopics`: CREATE on the cluster, else on each topic; the
    // configs of a created topic only with DESCRIBE_CONFIGS on it.
    let authz = broker.authz(ctx);
    let mut request = request;
    let mut refused = Vec::new();
    let mut hidden_configs = std::collections::BTreeSet::new();
    if authz.enabled() {
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        for t in &request.topics {
            *seen.entry(t.name.to_string()).or_default() += 1;
        }
        let cluster = authz.allows_cluster(AclOperation::Create);
        for (name, count) in &seen {
            if *count > 1 || name == CLUSTER_METADATA_TOPIC {
                continue;
            }
            if !cluster && !authz.allows(AclOperation::Create, resource_type::TOPIC, name) {
                refused.push(name.clone());
            } else if !authz.allows(AclOperation::DescribeConfigs, resource_type::TOPIC, name) {
                hidden_configs.insert(name.clone());
            }
        }
        request
            .topics
            .retain(|t| !refused.contains(&t.name.to_string()));
    }
    let reply = create_authorized_topics(broker, forwarder, ctx, request).await;
    if refused.is_empty() && hidden_configs.is_empty() {
        return reply;
    }
    let Reply::Send(response) = reply else {
        return reply;
    };
    let ResponseKind::CreateTopics(mut response) = *response else {
        return Reply::Send(response);
    };
    for topic in &mut response.topics {
        if topic.error_code == 0 && hidden_configs.contains(topic.name.as_str()) {
            topic.configs = Some(Vec::new());
            topic.num_partitions = -1;
            topic.replication_factor = -1;
            topic.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED;
        }
    }
    response.topics.extend(refused.into_iter().map(|name| {
        CreatableTopicResult::default()
            .with_name(TopicName(StrBytes::from_string(name)))
            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
            .with_error_message(Some(StrBytes::from_static_str("Authorization failed.")))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
    }));
    ResponseKind::CreateTopics(response).into()
}

/// KRaft's metadata topic, never created by a client.
const CLUSTER_METADATA_TOPIC: &str = "__cluster_metadata";

async fn create_authorized_topics(
    broker: &Broker,
    forwarder: &Forwarder,
    ctx: &RequestContext,
    request: CreateTopicsRequest,
) -> Reply {
    let validate_only = request.validate_only;
    let wait = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0))
        .min(MAX_VISIBILITY_WAIT);
    let reply = forwarder
        .forward(ctx, RequestKind::CreateTopics(request))
        .await;
    if validate_only {
        return reply;
    }
    if let Reply::Send(response) = &reply
        && let ResponseKind::CreateTopics(response) = response.as_ref()
    {
        let created: Vec<(StrBytes, Uuid)> = response
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .map(|t| (t.name.0.clone(), t.topic_id))
            .collect();
        if !created.is_empty() {
            wait_until_visible(broker, &created, Instant::now() + wait).await;
        }
    }
    reply
}

/// Whether every topic of `created` is in `image` (by id when the response carried one, v7+).
fn all_visible(image: &MetadataImage, created: &[(StrBytes, Uuid)]) -> bool {
    created.iter().all(|(name, id)| {
        image
            .topics
            .topic_by_name(name)
            .is_some_and(|t| id.is_nil() || t.id == *id)
    })
}

async fn wait_until_visible(broker: &Broker, created: &[(StrBytes, Uuid)], deadline: Instant) {
    let replicas = broker.replica_manager();
    loop {
        // Subscribed before the check: a publication between the two is not missed.
        let mut waiter = replicas.image_changes().waiter();
        if all_visible(&replicas.image(), created) {
            return;
        }
        if !waiter.wait_until(deadline).await {
            return;
        }
    }
}
