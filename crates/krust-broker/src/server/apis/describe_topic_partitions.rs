//! DescribeTopicPartitions (API key 75, KIP-966) from the published image, as Kafka 3.9's
//! `DescribeTopicPartitionsRequestHandler` and `KRaftMetadataCache` answer it: the requested
//! topics (all of them when none is named) in name order from the cursor on, at most
//! `min(max.request.partition.size.limit, ResponsePartitionLimit)` partitions (at least 1), and
//! a next cursor where the limit cut the answer. Every topic is authorized (no authorizer yet).

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::{AclOperation, resource_type};
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::TopicImage;
use krust_net::RequestContext;
use krust_net::error_codes::{
    INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use uuid::Uuid;

use super::metadata::{
    BrokerEndpoint, INTERNAL_TOPICS, alive_brokers, is_valid_topic_name, offline_replicas,
};
use crate::server::Broker;
use crate::server::authz::Authz;

/// `max.request.partition.size.limit`'s default.
const MAX_REQUEST_PARTITION_SIZE_LIMIT_DEFAULT: i32 = 2000;
fn name(v: &str) -> TopicName {
    TopicName(StrBytes::from_string(v.to_owned()))
}

/// Answers one request.
pub fn describe_topic_partitions(
    broker: &Broker,
    ctx: &RequestContext,
    request: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let image = broker.replica_manager().image();
    let alive = alive_brokers(broker, &image, &ctx.listener_name);
    let limit = broker.config().prop(
        "max.request.partition.size.limit",
        MAX_REQUEST_PARTITION_SIZE_LIMIT_DEFAULT,
    );
    answer(&image, &alive, limit, request, &broker.authz(ctx))
}

/// The answer over `image` with `alive` brokers on the request's listener.
#[must_use]
pub fn answer(
    image: &MetadataImage,
    alive: &[BrokerEndpoint],
    max_partitions_config: i32,
    request: &DescribeTopicPartitionsRequest,
    authz: &Authz,
) -> DescribeTopicPartitionsResponse {
    let fetch_all = request.topics.is_empty();
    let describe = |name: &str| authz.allows(AclOperation::Describe, resource_type::TOPIC, name);
    let operations = |name: &str| authz.authorized_operations(resource_type::TOPIC, name);
    let cursor = request.cursor.as_ref();
    let cursor_topic = cursor.map_or("", |c| c.topic_name.0.as_str());
    let mut topics: Vec<String> = if fetch_all {
        image
            .topics
            .by_name
            .keys()
            .filter(|n| n.as_str() >= cursor_topic)
            .cloned()
            .collect()
    } else {
        request
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .filter(|n| n.as_str() >= cursor_topic)
            .collect()
    };
    topics.sort();
    topics.dedup();
    // Kafka's handler: topics the principal may not describe are left out of an all-topics
    // answer and refused by name otherwise (topic id zero), after the described ones.
    let (refused, topics): (Vec<String>, Vec<String>) =
        topics.into_iter().partition(|t| !describe(t));
    let refused: Vec<DescribeTopicPartitionsResponseTopic> = if fetch_all {
        Vec::new()
    } else {
        refused
            .iter()
            .map(|t| {
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    .with_name(Some(name(t)))
                    .with_topic_id(Uuid::nil())
                    .with_is_internal(false)
            })
            .collect()
    };
    if let Some(c) = cursor {
        // Kafka: the cursor's topic must be among the named ones, and its partition valid.
        if (!fetch_all && !topics.iter().any(|t| t.as_str() == cursor_topic))
            || c.partition_index < 0
        {
            return error_response(request, INVALID_REQUEST);
        }
    }
    let mut remaining = max_partitions_config
        .min(request.response_partition_limit)
        .max(1);
    let mut response = DescribeTopicPartitionsResponse::default();
    for topic in topics {
        if remaining == 0 {
            // Every partition of the previous topic fitted: go on at this topic's start.
            response.next_cursor = Some(
                Cursor::default()
                    .with_topic_name(name(&topic))
                    .with_partition_index(0),
            );
            break;
        }
        let start = match cursor {
            Some(c) if c.topic_name.0.as_str() == topic => c.partition_index,
            _ => 0,
        };
        match image.topics.topic_by_name(&topic) {
            Some(t) => {
                let (partitions, next) = partitions_from(image, t, alive, start, remaining);
                remaining -= i32::try_from(partitions.len()).unwrap_or(i32::MAX);
                response.topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(name(&topic)))
                        .with_topic_id(t.id)
                        .with_is_internal(INTERNAL_TOPICS.contains(&topic.as_str()))
                        .with_partitions(partitions)
                        .with_topic_authorized_operations(operations(&topic)),
                );
                if let Some(next) = next {
                    response.next_cursor = Some(
                        Cursor::default()
                            .with_topic_name(name(&topic))
                            .with_partition_index(next),
                    );
                    break;
                }
            }
            None if !fetch_all => {
                let error = if is_valid_topic_name(&topic) {
                    UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    INVALID_TOPIC_EXCEPTION
                };
                response.topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(error)
                        .with_name(Some(name(&topic)))
                        .with_topic_id(Uuid::nil())
                        .with_is_internal(INTERNAL_TOPICS.contains(&topic.as_str()))
                        .with_topic_authorized_operations(operations(&topic)),
                );
            }
            None => {}
        }
    }
    response.topics.extend(refused);
    response
}

/// Partitions `start..` of `topic`, at most `max`, and the index to go on from if some are
/// left.
fn partitions_from(
    image: &MetadataImage,
    topic: &TopicImage,
    alive: &[BrokerEndpoint],
    start: i32,
    max: i32,
) -> (Vec<DescribeTopicPartitionsResponsePartition>, Option<i32>) {
    let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
    let upper = count.min(start.saturating_add(max));
    let next = (upper < count).then_some(upper);
    let ids = |ids: &[i32]| ids.iter().map(|&r| BrokerId(r)).collect::<Vec<_>>();
    let partitions = (start..upper)
        .filter_map(|index| topic.partitions.get(&index).map(|p| (index, p)))
        .map(|(index, p)| {
            let leader = if alive.iter().any(|b| b.id == p.leader) {
                p.leader
            } else {
                -1
            };
            DescribeTopicPartitionsResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(ids(&p.replicas))
                .with_isr_nodes(ids(&p.isr))
                .with_eligible_leader_replicas(Some(ids(&p.elr)))
                .with_last_known_elr(Some(ids(&p.last_known_elr)))
                .with_offline_replicas(offline_replicas(image, p))
        })
        .collect();
    (partitions, next)
}

/// Kafka's `DescribeTopicPartitionsRequest.getErrorResponse`: each named topic with the error.
fn error_response(
    request: &DescribeTopicPartitionsRequest,
    code: i16,
) -> DescribeTopicPartitionsResponse {
    DescribeTopicPartitionsResponse::default().with_topics(
        request
            .topics
            .iter()
            .map(|t| {
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(t.name.clone()))
                    .with_error_code(code)
                    .with_is_internal(false)
            })
            .collect(),
    )
}
