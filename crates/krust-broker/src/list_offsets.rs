//! ListOffsets (API key 2) over local partitions (Kafka 3.9
//! `KafkaApis.handleListOffsetRequest` + `ReplicaManager.fetchOffset`).
//!
//! `replica_id` -1 is a consumer (reads to the HW or, with `READ_COMMITTED`, the LSO; the
//! isolation level matters from v2), -2 a debugging client (may ask a follower), ≥ 0 a
//! replica (reads to the LEO). A partition named twice in one request answers
//! `INVALID_REQUEST`. Version 0 answers through `old_style_offsets` (one offset at most).

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::partition::IsolationLevel;
use crate::replicas::PartitionAccess;

/// `replica_id` of a consumer.
pub const CONSUMER_REPLICA_ID: i32 = -1;
/// `replica_id` of a debugging client.
pub const DEBUGGING_REPLICA_ID: i32 = -2;

/// Handles a ListOffsets request of `version`.
#[must_use]
pub fn handle_list_offsets<R: PartitionAccess>(
    replicas: &mut R,
    request: &ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let replica_id = request.replica_id.0;
    let isolation = (replica_id == CONSUMER_REPLICA_ID).then(|| {
        if version >= 2 {
            IsolationLevel::from_wire(request.isolation_level)
        } else {
            IsolationLevel::ReadUncommitted
        }
    });
    let fetch_only_from_leader = replica_id != DEBUGGING_REPLICA_ID;
    let mut seen = BTreeSet::new();
    let mut duplicates = BTreeSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            if !seen.insert((topic.name.0.as_str(), p.partition_index)) {
                duplicates.insert((topic.name.0.as_str(), p.partition_index));
            }
        }
    }
    let mut response = ListOffsetsResponse::default();
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let mut out = ListOffsetsTopicResponse::default().with_name(topic.name.clone());
        for p in &topic.partitions {
            let index = p.partition_index;
            let mut part = ListOffsetsPartitionResponse::default().with_partition_index(index);
            if duplicates.contains(&(name, index)) {
                part.error_code = ResponseError::InvalidRequest.code();
                out.partitions.push(part);
                continue;
            }
            let current_leader_epoch = (version >= 4).then_some(p.current_leader_epoch);
            let result = replicas.with_partition(name, index, |partition| {
                partition.list_offsets(
                    p.timestamp,
                    isolation,
                    current_leader_epoch,
                    fetch_only_from_leader,
                )
            });
            match result {
                Err(e) => part.error_code = e.response_error().code(),
                Ok(None) => {}
                Ok(Some(found)) => {
                    if version == 0 {
                        part.old_style_offsets = vec![found.offset];
                    } else {
                        part.timestamp = found.timestamp;
                        part.offset = found.offset;
                        // v0–3 cannot carry a leader epoch (the codec refuses a set one).
                        if version >= 4 {
                            part.leader_epoch = found.leader_epoch.unwrap_or(-1);
                        }
                    }
                }
            }
            out.partitions.push(part);
        }
        response.topics.push(out);
    }
    response
}
