//! OffsetForLeaderEpoch (API key 23) over local partitions (Kafka 3.9
//! `ReplicaManager.lastOffsetForLeaderEpoch`): the leader answers where a leader epoch ends
//! in its log; errors answer epoch -1 and end offset -1.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::replicas::PartitionAccess;

/// Handles an OffsetForLeaderEpoch request of `version`.
#[must_use]
pub fn handle_offset_for_leader_epoch<R: PartitionAccess>(
    replicas: &mut R,
    request: &OffsetForLeaderEpochRequest,
    version: i16,
) -> OffsetForLeaderEpochResponse {
    let mut response = OffsetForLeaderEpochResponse::default();
    for topic in &request.topics {
        let name = topic.topic.0.as_str();
        let mut out = OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone());
        for p in &topic.partitions {
            let current_leader_epoch = (version >= 2).then_some(p.current_leader_epoch);
            let mut part = EpochEndOffset::default().with_partition(p.partition);
            match replicas.with_partition(name, p.partition, |partition| {
                partition.offset_for_leader_epoch(current_leader_epoch, p.leader_epoch)
            }) {
                Ok(end) => {
                    part.leader_epoch = end.leader_epoch;
                    part.end_offset = end.end_offset;
                }
                Err(e) => part.error_code = e.response_error().code(),
            }
            out.partitions.push(part);
        }
        response.topics.push(out);
    }
    response
}
