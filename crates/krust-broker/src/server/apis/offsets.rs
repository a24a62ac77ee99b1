//! ListOffsets (2), OffsetForLeaderEpoch (23) and DeleteRecords (21) over the replica
//! manager.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};

use crate::list_offsets::handle_list_offsets;
use crate::offset_for_leader_epoch::handle_offset_for_leader_epoch;
use crate::replicas::PartitionAccess;
use crate::server::Broker;

/// Handles a ListOffsets request.
#[must_use]
pub fn list_offsets(
    broker: &Arc<Broker>,
    request: &ListOffsetsRequest,
    version: i16,
) -> ResponseKind {
    let response: ListOffsetsResponse =
        handle_list_offsets(&mut broker.replica_manager().access(), request, version);
    ResponseKind::ListOffsets(response)
}

/// Handles an OffsetForLeaderEpoch request.
#[must_use]
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    request: &OffsetForLeaderEpochRequest,
    version: i16,
) -> ResponseKind {
    let response: OffsetForLeaderEpochResponse =
        handle_offset_for_leader_epoch(&mut broker.replica_manager().access(), request, version);
    ResponseKind::OffsetForLeaderEpoch(response)
}

/// Handles a DeleteRecords request on the leaders (Kafka's `deleteRecordsOnLeader`). The
/// answer is the leader's new low watermark; followers catch up through their fetches
/// (Kafka waits for every replica, krust answers once the leader moved).
pub async fn delete_records(broker: &Arc<Broker>, request: &DeleteRecordsRequest) -> ResponseKind {
    let mut access = broker.replica_manager().access();
    let mut response = DeleteRecordsResponse::default();
    for topic in &request.topics {
        let mut out = DeleteRecordsTopicResult::default().with_name(topic.name.clone());
        for p in &topic.partitions {
            let mut result =
                DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            match access.with_partition(topic.name.0.as_str(), p.partition_index, |partition| {
                partition.delete_records(p.offset)
            }) {
                Ok(low_watermark) => result.low_watermark = low_watermark,
                Err(e) => {
                    result.low_watermark = -1;
                    result.error_code = e.code();
                }
            }
            out.partitions.push(result);
        }
        response.topics.push(out);
    }
    ResponseKind::DeleteRecords(response)
}
