//! Produce (API key 0): [`crate::produce::handle_produce`] over the replica manager, acks=all
//! parked in the purgatory until the high watermarks reach the appends or `timeout_ms`
//! passes (`REQUEST_TIMED_OUT`). acks=0 sends nothing back, except that an error closes the
//! connection (Kafka does this so the producer notices and refreshes its metadata).
//! NOT_LEADER_OR_FOLLOWER carries the current leader (v10+, KIP-951).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, ResponseKind};
use krust_metadata::authorizer::{AclOperation, resource_type};
use krust_net::{Reply, RequestContext};

use super::metadata::{INTERNAL_TOPICS, leader_hint, leader_node_endpoints};
use crate::produce::{ProduceOutcome, handle_produce_verified};
use crate::server::Broker;
use crate::server::quotas::ClientQuotas;
use crate::server::replica_manager::now_ms;

/// The client id allowed to write internal topics (Kafka's `AdminUtils.ADMIN_CLIENT_ID`).
pub const ADMIN_CLIENT_ID: &str = "__admin_client";

/// Handles a Produce request.
pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ProduceRequest) -> Reply {
    let replicas = broker.replica_manager();
    let authz = broker.authz(ctx);
    let mut request = request;
    // Authorization first (Kafka's `handleProduceRequest`): a request with a transactional
    // batch needs a transactional id with WRITE on it (else the whole request fails), then
    // WRITE on each topic.
    if authz.enabled()
        && request
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .filter_map(|p| p.records.as_ref())
            .any(|records| !crate::partition::transactional_batches(records).is_empty())
        && !request.transactional_id.as_ref().is_some_and(|id| {
            authz.allows(AclOperation::Write, resource_type::TRANSACTIONAL_ID, id)
        })
    {
        return ResponseKind::Produce(whole_request_error(
            &request,
            ResponseError::TransactionalIdAuthorizationFailed.code(),
        ))
        .into();
    }
    let (denied, topics): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topic_data)
        .into_iter()
        .partition(|t| !authz.allows(AclOperation::Write, resource_type::TOPIC, &t.name));
    request.topic_data = topics;
    // Clients may not write the internal topics (Kafka's `InvalidTopicException` unless the
    // admin client id): those partitions answer INVALID_TOPIC_EXCEPTION, the rest go on.
    let (internal, topics): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topic_data)
        .into_iter()
        .partition(|t| {
            INTERNAL_TOPICS.contains(&t.name.0.as_str()) && ctx.client_id != ADMIN_CLIENT_ID
        });
    request.topic_data = topics;
    // KIP-890 part 1: transactional partitions are verified with the coordinator first; the
    // refused ones are answered without an append.
    let verified = super::txn_verification::verify(broker, &request, ctx.api_version).await;
    let mut refused = Vec::new();
    if !verified.errors.is_empty() {
        for topic in &mut request.topic_data {
            let name = topic.name.0.to_string();
            topic
                .partition_data
                .retain(|p| match verified.errors.get(&(name.clone(), p.index)) {
                    Some((error, message)) => {
                        refused.push((topic.name.clone(), p.index, *error, message.clone()));
                        false
                    }
                    None => true,
                });
        }
        request.topic_data.retain(|t| !t.partition_data.is_empty());
    }
    let outcome = handle_produce_verified(
        &mut replicas.access(),
        &request,
        ctx.api_version,
        now_ms(),
        &verified.guards,
    );
    let mut response = match outcome {
        ProduceOutcome::Respond(response) => response,
        ProduceOutcome::Wait(mut delayed) => {
            let timeout = Duration::from_millis(u64::try_from(delayed.timeout_ms).unwrap_or(0));
            let access = replicas.access();
            match replicas
                .purgatory()
                .wait_for(timeout, || delayed.try_complete(&access))
                .await
            {
                Some(response) => response,
                None => delayed.expire(),
            }
        }
    };
    for (topics, error) in [
        (internal, ResponseError::InvalidTopicException),
        (denied, ResponseError::TopicAuthorizationFailed),
    ] {
        response
            .responses
            .extend(topics.iter().map(|t| topic_error(t, error.code())));
    }
    for (name, index, error, message) in refused {
        let part = PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(error)
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
            .with_error_message(message.map(Into::into));
        match response.responses.iter_mut().find(|t| t.name == name) {
            Some(topic) => topic.partition_responses.push(part),
            None => response.responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_partition_responses(vec![part]),
            ),
        }
    }
    let has_error = response
        .responses
        .iter()
        .flat_map(|t| &t.partition_responses)
        .any(|p| p.error_code != 0);
    // Appended bytes per successful partition (the response follows the request's order).
    let appended = request
        .topic_data
        .iter()
        .zip(&response.responses)
        .flat_map(|(t, r)| t.partition_data.iter().zip(&r.partition_responses))
        .filter(|(_, r)| r.error_code == 0)
        .filter_map(|(p, _)| p.records.as_ref());
    broker.client_stats().record_produce(appended, has_error);
    // `producer_byte_rate` on the request's size, recorded once the append is done (Kafka's
    // `handleProduceRequest` callback); the connection is muted for the throttle, acks=0
    // included (no response, but the next request waits).
    let quotas = broker.quotas();
    let now = std::time::Instant::now();
    #[allow(clippy::cast_precision_loss)]
    let throttle_time_ms = quotas.produce.record_and_get_throttle_time_ms(
        &ctx.principal.name,
        &ctx.client_id,
        ctx.request_size as f64,
        now,
    );
    ClientQuotas::throttle(&quotas.produce, ctx, throttle_time_ms, now);
    response.throttle_time_ms = throttle_time_ms;
    if request.acks == 0 {
        return if has_error {
            Reply::Close
        } else {
            Reply::NoResponse
        };
    }
    if ctx.api_version >= 10 {
        add_leader_hints(broker, ctx, &mut response);
    }
    ResponseKind::Produce(response).into()
}

fn add_leader_hints(broker: &Broker, ctx: &RequestContext, response: &mut ProduceResponse) {
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let image = broker.replica_manager().image();
    let mut leaders = std::collections::BTreeSet::new();
    for topic in &mut response.responses {
        for p in &mut topic.partition_responses {
            if p.error_code == not_leader {
                let (leader, epoch) = leader_hint(&image, topic.name.0.as_str(), p.index);
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch);
                if leader >= 0 {
                    leaders.insert(leader);
                }
            }
        }
    }
    response.node_endpoints =
        leader_node_endpoints!(NodeEndpoint, broker, &image, &ctx.listener_name, leaders);
}

/// Every partition of `topic` answered `error`.
fn topic_error(topic: &TopicProduceData, error: i16) -> TopicProduceResponse {
    TopicProduceResponse::default()
        .with_name(topic.name.clone())
        .with_partition_responses(
            topic
                .partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(error)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}

/// Every partition of the request answered `error`.
fn whole_request_error(request: &ProduceRequest, error: i16) -> ProduceResponse {
    ProduceResponse::default().with_responses(
        request
            .topic_data
            .iter()
            .map(|t| topic_error(t, error))
            .collect(),
    )
}
