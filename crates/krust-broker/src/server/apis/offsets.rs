//! ListOffsets (2), OffsetForLeaderEpoch (23) and DeleteRecords (21) over the replica
//! manager.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};

use krust_metadata::authorizer::{AclOperation, resource_type};
use krust_net::RequestContext;

use crate::list_offsets::handle_list_offsets;
use crate::offset_for_leader_epoch::handle_offset_for_leader_epoch;
use crate::replicas::PartitionAccess;
use crate::server::Broker;

const TAF: i16 = 29;

/// Handles a ListOffsets request; DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED).
#[must_use]
pub fn list_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ListOffsetsRequest,
    version: i16,
) -> ResponseKind {
    let authz = broker.authz(ctx);
    let mut request = request;
    let (denied, allowed): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|t| !authz.allows(AclOperation::Describe, resource_type::TOPIC, &t.name));
    request.topics = allowed;
    let mut response: ListOffsetsResponse =
        handle_list_offsets(&mut broker.replica_manager().access(), &request, version);
    response.topics.extend(denied.iter().map(|t| {
        ListOffsetsTopicResponse::default()
            .with_name(t.name.clone())
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(TAF)
                            .with_timestamp(-1)
                            .with_offset(-1)
                            .with_leader_epoch(-1)
                    })
                    .collect(),
            )
    }));
    ResponseKind::ListOffsets(response)
}

/// Handles an OffsetForLeaderEpoch request: CLUSTER_ACTION on the cluster (followers), else
/// DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED).
#[must_use]
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
    version: i16,
) -> ResponseKind {
    let authz = broker.authz(ctx);
    let mut request = request;
    // Cluster CLUSTER_ACTION only chooses the path: not audited at INFO (Kafka's
    // `logIfDenied = false`).
    let cluster = authz.filter_allows_cluster(AclOperation::ClusterAction);
    let (denied, allowed): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|t| {
            !cluster && !authz.allows(AclOperation::Describe, resource_type::TOPIC, &t.topic)
        });
    request.topics = allowed;
    let mut response: OffsetForLeaderEpochResponse =
        handle_offset_for_leader_epoch(&mut broker.replica_manager().access(), &request, version);
    response.topics.extend(denied.iter().map(|t| {
        OffsetForLeaderTopicResult::default()
            .with_topic(t.topic.clone())
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        EpochEndOffset::default()
                            .with_partition(p.partition)
                            .with_error_code(TAF)
                            .with_leader_epoch(-1)
                            .with_end_offset(-1)
                    })
                    .collect(),
            )
    }));
    ResponseKind::OffsetForLeaderEpoch(response)
}

/// Handles a DeleteRecords request (Kafka's `deleteRecordsOnLeader` + `DelayedDeleteRecords`):
/// each leader moves its log start, then the answer waits until the low watermark (the
/// smallest log start of the leader and its live followers, as their fetches report it)
/// reaches it, or `timeout_ms` passes (`REQUEST_TIMED_OUT`).
pub async fn delete_records(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DeleteRecordsRequest,
) -> ResponseKind {
    // DELETE on each topic (TOPIC_AUTHORIZATION_FAILED), before anything else.
    let authz = broker.authz(ctx);
    let mut request = request;
    let (denied, allowed): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|t| !authz.allows(AclOperation::Delete, resource_type::TOPIC, &t.name));
    request.topics = allowed;
    let denied = denied.iter().map(|t| {
        DeleteRecordsTopicResult::default()
            .with_name(t.name.clone())
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(p.partition_index)
                            .with_low_watermark(-1)
                            .with_error_code(TAF)
                    })
                    .collect(),
            )
    });
    let denied: Vec<_> = denied.collect();
    let mut response = delete_authorized_records(broker, &request).await;
    if let ResponseKind::DeleteRecords(r) = &mut response {
        r.topics.extend(denied);
    }
    response
}

async fn delete_authorized_records(
    broker: &Arc<Broker>,
    request: &DeleteRecordsRequest,
) -> ResponseKind {
    let replicas = broker.replica_manager();
    let mut access = replicas.access();
    let mut response = DeleteRecordsResponse::default();
    // (topic index, partition index, required low watermark) still waiting.
    let mut waiting = Vec::new();
    for topic in &request.topics {
        let mut out = DeleteRecordsTopicResult::default().with_name(topic.name.clone());
        for p in &topic.partitions {
            let mut result =
                DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            match access.with_partition(topic.name.0.as_str(), p.partition_index, |partition| {
                partition.delete_records(p.offset)
            }) {
                Ok(start) => {
                    result.low_watermark = start;
                    waiting.push((response.topics.len(), out.partitions.len(), start));
                }
                Err(e) => {
                    result.low_watermark = -1;
                    result.error_code = e.code();
                }
            }
            out.partitions.push(result);
        }
        response.topics.push(out);
    }
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0));
    let check = |response: &mut DeleteRecordsResponse, waiting: &mut Vec<(usize, usize, i64)>| {
        let image = replicas.image();
        let alive = |id: i32| image.cluster.broker(id).is_some_and(|b| !b.fenced);
        waiting.retain(|&(t, p, required)| {
            let Some(topic) = response.topics.get_mut(t) else {
                return false;
            };
            let Some(part) = topic.partitions.get_mut(p) else {
                return false;
            };
            let low = access.inspect_partition(topic.name.0.as_str(), part.partition_index, |x| {
                x.low_watermark(alive)
            });
            match low {
                Some(Ok(low)) if low >= required => {
                    part.low_watermark = low;
                    false
                }
                Some(Ok(_)) => true,
                Some(Err(e)) => {
                    part.low_watermark = -1;
                    part.error_code = e.code();
                    false
                }
                None => {
                    part.low_watermark = -1;
                    part.error_code = ResponseError::NotLeaderOrFollower.code();
                    false
                }
            }
        });
        waiting.is_empty().then_some(())
    };
    let done = replicas
        .purgatory()
        .wait_for(timeout, || check(&mut response, &mut waiting))
        .await;
    if done.is_none() {
        for (t, p, _) in waiting {
            if let Some(part) = response
                .topics
                .get_mut(t)
                .and_then(|topic| topic.partitions.get_mut(p))
            {
                part.low_watermark = -1;
                part.error_code = ResponseError::RequestTimedOut.code();
            }
        }
    }
    ResponseKind::DeleteRecords(response)
}
