//! WriteTxnMarkers (API key 27, v0–1): a transaction coordinator asks this broker, as the
//! partitions' leader, to end a transaction with a COMMIT or ABORT marker (Kafka 3.9
//! `KafkaApis.handleWriteTxnMarkersRequest`).
//!
//! For every marker and partition: a partition this broker does not host answers
//! `UNKNOWN_TOPIC_OR_PARTITION` (Kafka looks up the local log's format first); otherwise the
//! marker is appended as leader with acks=-1
//! ([`crate::partition::Partition::append_txn_marker_as_leader`]: `NOT_LEADER_OR_FOLLOWER`,
//! `NOT_ENOUGH_REPLICAS`, `INVALID_PRODUCER_EPOCH` for a stale producer epoch,
//! `TRANSACTION_COORDINATOR_FENCED` for a stale coordinator epoch) and the answer waits until
//! the high watermark passes it (`NOT_ENOUGH_REPLICAS_AFTER_APPEND`, or `REQUEST_TIMED_OUT`
//! after `request.timeout.ms`). The response is sent once every append is done, one result
//! per producer id.
//!
//! Markers that land in `__consumer_offsets` partitions are reported to this broker's group
//! coordinator ([`crate::server::groups::GroupCoordinator::on_txn_marker`]) once replicated:
//! it makes the transaction's pending offsets visible (commit) or drops them (abort).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use krust_log::txn_marker::EndTxnMarker;

use crate::error::PartitionError;
use crate::replicas::PartitionAccess;
use crate::server::Broker;
use crate::server::replica_manager::{ManagerAccess, now_ms};

/// Kafka's `GROUP_METADATA_TOPIC_NAME`.
const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// `request.timeout.ms` default: how long a marker append waits for its replication.
const DEFAULT_REQUEST_TIMEOUT_MS: i32 = 30_000;

/// One marker's append on one partition.
struct PendingAppend {
    marker: usize,
    topic: String,
    partition: i32,
    /// `Ok(required high watermark)` while waiting, or the final error.
    state: Result<Option<i64>, ResponseError>,
}

/// Handles a WriteTxnMarkers request.
pub async fn handle(
    broker: &Arc<Broker>,
    request: &WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let replicas = broker.replica_manager();
    let now = now_ms();
    let mut appends = Vec::new();
    let mut access = replicas.access();
    for (marker_index, marker) in request.markers.iter().enumerate() {
        let end = EndTxnMarker {
            commit: marker.transaction_result,
            coordinator_epoch: marker.coordinator_epoch,
        };
        for topic in &marker.topics {
            let name = topic.name.0.as_str();
            for &partition in &topic.partition_indexes {
                let state = if access.inspect_partition(name, partition, |_| ()).is_none() {
                    Err(ResponseError::UnknownTopicOrPartition)
                } else {
                    access
                        .with_partition(name, partition, |p| {
                            p.append_txn_marker_as_leader(
                                marker.producer_id.0,
                                marker.producer_epoch,
                                end,
                                now,
                            )
                        })
                        .map(|append| append.wait_for_high_watermark)
                        .map_err(|e| e.response_error())
                };
                appends.push(PendingAppend {
                    marker: marker_index,
                    topic: name.to_string(),
                    partition,
                    state,
                });
            }
        }
    }
    let timeout_ms = broker
        .config()
        .static_config
        .int("request.timeout.ms")
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let completed = replicas
        .purgatory()
        .wait_for(timeout, || try_complete(&access, &mut appends))
        .await;
    if completed.is_none() {
        for append in &mut appends {
            if matches!(append.state, Ok(Some(_))) {
                append.state = Err(ResponseError::RequestTimedOut);
            }
        }
    }
    notify_group_coordinator(broker, request, &appends).await;
    build_response(request, &appends)
}

/// Settles every append whose high watermark arrived; `Some` once none waits.
fn try_complete(access: &ManagerAccess<'_>, appends: &mut [PendingAppend]) -> Option<()> {
    let mut waiting = false;
    for append in appends.iter_mut() {
        let Ok(Some(required)) = append.state else {
            continue;
        };
        let done = access
            .inspect_partition(&append.topic, append.partition, |p| {
                p.check_enough_replicas_reach_offset(required)
            })
            .unwrap_or(Some(Err(PartitionError::NotLeaderOrFollower)));
        match done {
            None => waiting = true,
            Some(Ok(())) => append.state = Ok(None),
            Some(Err(e)) => append.state = Err(e.response_error()),
        }
    }
    (!waiting).then_some(())
}

async fn notify_group_coordinator(
    broker: &Broker,
    request: &WriteTxnMarkersRequest,
    appends: &[PendingAppend],
) {
    let Some(groups) = broker.groups() else {
        return;
    };
    for (index, marker) in request.markers.iter().enumerate() {
        for append in appends
            .iter()
            .filter(|a| a.marker == index && a.topic == CONSUMER_OFFSETS_TOPIC && a.state.is_ok())
        {
            groups
                .on_txn_marker(
                    append.partition,
                    marker.producer_id.0,
                    marker.transaction_result,
                )
                .await;
        }
    }
}

/// One result per producer id (Kafka keys the results by producer id, so two markers of one
/// producer share an entry), topics in request order.
fn build_response(
    request: &WriteTxnMarkersRequest,
    appends: &[PendingAppend],
) -> WriteTxnMarkersResponse {
    let mut markers: Vec<WritableTxnMarkerResult> = Vec::new();
    for (index, marker) in request.markers.iter().enumerate() {
        let pos = match markers
            .iter()
            .position(|m| m.producer_id == marker.producer_id)
        {
            Some(pos) => pos,
            None => {
                markers
                    .push(WritableTxnMarkerResult::default().with_producer_id(marker.producer_id));
                markers.len() - 1
            }
        };
        let Some(result) = markers.get_mut(pos) else {
            continue;
        };
        for append in appends.iter().filter(|a| a.marker == index) {
            let code = match append.state {
                Ok(_) => 0,
                Err(e) => e.code(),
            };
            let partition = WritableTxnMarkerPartitionResult::default()
                .with_partition_index(append.partition)
                .with_error_code(code);
            match result
                .topics
                .iter_mut()
                .find(|t| t.name.0.as_str() == append.topic)
            {
                Some(topic) => topic.partitions.push(partition),
                None => result.topics.push(
                    WritableTxnMarkerTopicResult::default()
                        .with_name(crate::produce::topic_name(&append.topic))
                        .with_partitions(vec![partition]),
                ),
            }
        }
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}
