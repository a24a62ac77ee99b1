//! DescribeProducers (61): the active idempotent/transactional producers of partitions this
//! broker hosts, as leader or follower (Kafka's `ReplicaManager.activeProducerState`: any
//! replica with a log answers, which `kafka-transactions.sh find-hanging --broker-id` relies
//! on), as `kafka-transactions.sh describe-producers` shows them.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::PartitionError;
use crate::replicas::PartitionAccess;
use crate::server::Broker;
use krust_net::error_codes::INVALID_TOPIC_EXCEPTION;

/// Handles a DescribeProducers request.
#[must_use]
pub fn describe_producers(
    broker: &Arc<Broker>,
    request: &DescribeProducersRequest,
) -> ResponseKind {
    let mut access = broker.replica_manager().access();
    let mut response = DescribeProducersResponse::default();
    for topic in &request.topics {
        let mut out = TopicResponse::default().with_name(topic.name.clone());
        // Kafka's `checkValidTopic`: an illegal name is INVALID_TOPIC_EXCEPTION with
        // `Topic.validate`'s message on every partition asked for.
        if let Some(reason) = super::configs::invalid_topic_message(topic.name.0.as_str()) {
            out.partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    PartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(INVALID_TOPIC_EXCEPTION)
                        .with_error_message(Some(StrBytes::from_string(reason.clone())))
                })
                .collect();
            response.topics.push(out);
            continue;
        }
        for &index in &topic.partition_indexes {
            let mut part = PartitionResponse::default().with_partition_index(index);
            let producers = access.with_partition(topic.name.0.as_str(), index, |p| {
                Ok::<_, PartitionError>(
                    p.producer_state()
                        .entries()
                        .map(|e| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(e.producer_id))
                                .with_producer_epoch(i32::from(e.producer_epoch))
                                .with_last_sequence(e.last_seq())
                                .with_last_timestamp(e.last_timestamp)
                                .with_coordinator_epoch(e.coordinator_epoch)
                                .with_current_txn_start_offset(
                                    e.current_txn_first_offset.unwrap_or(-1),
                                )
                        })
                        .collect::<Vec<_>>(),
                )
            });
            match producers {
                Ok(active) => part.active_producers = active,
                Err(e) => {
                    part.error_code = e.code();
                    part.error_message = Some(StrBytes::from_string(e.to_string()));
                }
            }
            out.partitions.push(part);
        }
        response.topics.push(out);
    }
    ResponseKind::DescribeProducers(response)
}
