//! CreateTopics (19): forwarded to the controller, then answered once this broker's published
//! image holds the topics the controller created.
//!
//! Kafka 3.9 answers as soon as the controller does, so a Metadata request sent right after
//! may still miss the topic on the broker that forwarded it (the new records reach its
//! metadata log a fetch later). krust waits for its own image first — read-your-writes on the
//! forwarding broker — bounded by the request's timeout (at most [`MAX_VISIBILITY_WAIT`]): a
//! broker that cannot catch up still answers, as Kafka would.

use std::time::Duration;

use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::MetadataImage;
use krust_net::{Reply, RequestContext};
use tokio::time::Instant;
use uuid::Uuid;

use super::super::Broker;
use super::super::forwarding::Forwarder;
use super::authorize;

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
    let mut request = RequestKind::CreateTopics(request);
    let refusals = authorize::split_forwarded(
        &broker.authz(ctx),
        &broker.replica_manager().image(),
        &mut request,
    );
    let RequestKind::CreateTopics(request) = request else {
        return Reply::Close;
    };
    let reply = create_authorized_topics(broker, forwarder, ctx, request).await;
    let Reply::Send(mut response) = reply else {
        return reply;
    };
    refusals.merge(&mut response);
    Reply::Send(response)
}

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
