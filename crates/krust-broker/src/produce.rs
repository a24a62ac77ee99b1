//! Produce (API key 0) over local partitions (Kafka 3.9 `KafkaApis.handleProduceRequest` +
//! `ReplicaManager.appendRecords`), without blocking.
//!
//! [`handle_produce`] appends what it can at once and returns a [`ProduceOutcome`]:
//! [`ProduceOutcome::Respond`] when the answer is known (acks 0/1, every partition failed,
//! or acks=all already satisfied), [`ProduceOutcome::Wait`] with a [`DelayedProduce`] when
//! acks=all must wait for high watermarks. The purgatory calls
//! [`DelayedProduce::try_complete`] whenever a high watermark moves and
//! [`DelayedProduce::expire`] at `timeout_ms` (`REQUEST_TIMED_OUT` for partitions still
//! waiting). With acks=0 the caller sends no response at all.
//!
//! Transactional batches are checked against the partition's verification guards (KIP-890
//! part 1; the coordinator round trip is the runtime's, `server::apis::txn_verification`).
//! Limits: no `current_leader`/`node_endpoints` hints on NOT_LEADER_OR_FOLLOWER (they need the
//! metadata image).

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use krust_log::batch::{MAX_BATCH_BYTES, parse_all};

use std::collections::BTreeMap;

use crate::error::PartitionError;
use crate::partition::VerificationGuard;
use crate::replicas::PartitionAccess;

/// What to do with a produce request.
#[derive(Debug)]
pub enum ProduceOutcome {
    /// Send this response (unless acks=0).
    Respond(ProduceResponse),
    /// acks=all: wait for the high watermarks.
    Wait(DelayedProduce),
}

/// A produce request waiting for high watermarks (Kafka's `DelayedProduce`).
#[derive(Debug)]
pub struct DelayedProduce {
    response: ProduceResponse,
    /// (topic index, partition index in the response, required offset) still waiting.
    waiting: Vec<(usize, usize, i64)>,
    /// Request timeout (`timeout_ms`), for the purgatory.
    pub timeout_ms: i32,
}

impl DelayedProduce {
    /// Checks every waiting partition (Kafka's `checkEnoughReplicasReachOffset`); returns
    /// the response once none waits.
    pub fn try_complete<R: PartitionAccess>(&mut self, replicas: &R) -> Option<ProduceResponse> {
        let response = &mut self.response;
        self.waiting.retain(|&(t, p, required)| {
            let Some(topic) = response.responses.get_mut(t) else {
                return false;
            };
            let Some(part) = topic.partition_responses.get_mut(p) else {
                return false;
            };
            let done = replicas
                .inspect_partition(topic.name.0.as_str(), part.index, |partition| {
                    partition.check_enough_replicas_reach_offset(required)
                })
                .unwrap_or(Some(Err(PartitionError::NotLeaderOrFollower)));
            match done {
                None => true,
                Some(Ok(())) => false,
                Some(Err(e)) => {
                    set_error(part, e.response_error());
                    false
                }
            }
        });
        self.waiting
            .is_empty()
            .then(|| std::mem::take(&mut self.response))
    }

    /// The request timed out: partitions still waiting answer `REQUEST_TIMED_OUT`.
    #[must_use]
    pub fn expire(mut self) -> ProduceResponse {
        for (t, p, _) in self.waiting {
            if let Some(part) = self
                .response
                .responses
                .get_mut(t)
                .and_then(|topic| topic.partition_responses.get_mut(p))
            {
                set_error(part, ResponseError::RequestTimedOut);
            }
        }
        self.response
    }
}

fn set_error(part: &mut PartitionProduceResponse, error: ResponseError) {
    part.error_code = error.code();
    part.base_offset = -1;
    part.log_append_time_ms = -1;
    part.log_start_offset = -1;
}

fn error_response(index: i32, error: ResponseError) -> PartitionProduceResponse {
    let mut part = PartitionProduceResponse::default().with_index(index);
    set_error(&mut part, error);
    part
}

/// Kafka's `ProduceRequest.validateRecords` for v3+: exactly one v2 batch per partition.
/// Unparseable bytes are left to the append (CORRUPT_MESSAGE).
fn has_exactly_one_batch(records: &Bytes) -> bool {
    parse_all(records.clone(), MAX_BATCH_BYTES).map_or(true, |batches| batches.len() == 1)
}

/// Handles a produce request of `version` at `now_ms`; see the module doc. Transactional
/// batches that need a coordinator verification (KIP-890) are refused with INVALID_TXN_STATE:
/// use [`handle_produce_verified`] with the guards of the verifications done.
pub fn handle_produce<R: PartitionAccess>(
    replicas: &mut R,
    request: &ProduceRequest,
    version: i16,
    now_ms: i64,
) -> ProduceOutcome {
    handle_produce_verified(replicas, request, version, now_ms, &BTreeMap::new())
}

/// [`handle_produce`] with the [`VerificationGuard`]s of the partitions whose transaction
/// the coordinator confirmed, by (topic, partition).
pub fn handle_produce_verified<R: PartitionAccess>(
    replicas: &mut R,
    request: &ProduceRequest,
    version: i16,
    now_ms: i64,
    guards: &BTreeMap<(String, i32), VerificationGuard>,
) -> ProduceOutcome {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1..=1);
    let mut response = ProduceResponse::default();
    let mut waiting = Vec::new();
    for topic in &request.topic_data {
        let name = topic.name.0.as_str();
        let mut topic_response = TopicProduceResponse::default().with_name(topic.name.clone());
        for data in &topic.partition_data {
            let index = data.index;
            let part = if !valid_acks {
                error_response(index, ResponseError::InvalidRequiredAcks)
            } else {
                let records = data.records.clone().unwrap_or_default();
                if version >= 3 && !has_exactly_one_batch(&records) {
                    error_response(index, ResponseError::InvalidRecord)
                } else {
                    match replicas.with_partition(name, index, |p| {
                        let guard = guards.get(&(name.to_string(), index)).copied();
                        p.append_client_records(records, acks, guard, now_ms)
                    }) {
                        Err(e) => {
                            let mut part = error_response(index, e.response_error());
                            if let PartitionError::InvalidTimestamp { record_index, .. } = e {
                                // Kafka names the offending record (RecordValidationException).
                                part.record_errors = vec![
                                    BatchIndexAndErrorMessage::default()
                                        .with_batch_index(
                                            i32::try_from(record_index).unwrap_or(i32::MAX),
                                        )
                                        .with_batch_index_error_message(Some(e.to_string().into())),
                                ];
                                part.error_message = Some(e.to_string().into());
                            }
                            if let PartitionError::RecordsWithoutKey { record_indices, .. } = &e {
                                let message = crate::error::record_without_key_message(&format!(
                                    "{name}-{index}"
                                ));
                                part.record_errors = record_indices
                                    .iter()
                                    .map(|&i| {
                                        BatchIndexAndErrorMessage::default()
                                            .with_batch_index(i32::try_from(i).unwrap_or(i32::MAX))
                                            .with_batch_index_error_message(Some(
                                                message.clone().into(),
                                            ))
                                    })
                                    .collect();
                                part.error_message = Some(e.to_string().into());
                            }
                            part
                        }
                        Ok(append) => {
                            if let Some(required) = append.wait_for_high_watermark {
                                waiting.push((
                                    response.responses.len(),
                                    topic_response.partition_responses.len(),
                                    required,
                                ));
                            }
                            PartitionProduceResponse::default()
                                .with_index(index)
                                .with_base_offset(append.base_offset)
                                .with_log_append_time_ms(append.log_append_time_ms)
                                .with_log_start_offset(append.log_start_offset)
                        }
                    }
                }
            };
            topic_response.partition_responses.push(part);
        }
        response.responses.push(topic_response);
    }
    let mut delayed = DelayedProduce {
        response,
        waiting,
        timeout_ms: request.timeout_ms,
    };
    match delayed.try_complete(replicas) {
        Some(response) => ProduceOutcome::Respond(response),
        None => ProduceOutcome::Wait(delayed),
    }
}

/// Topic name from a string (for building requests in tests and callers).
#[must_use]
pub fn topic_name(name: &str) -> TopicName {
    TopicName(name.to_string().into())
}
