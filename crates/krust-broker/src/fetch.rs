//! Fetch (API key 1) over local partitions (Kafka 3.9 `KafkaApis.handleFetchRequest` +
//! `ReplicaManager.fetchMessages`/`readFromLocalLog`), without blocking.
//!
//! Topics are named by name up to v12 and by topic id from v13 (`UNKNOWN_TOPIC_ID` when the
//! id is not known). A replica id ≥ 0 (`replica_id` up to v14, `replica_state` from v15) makes
//! it a follower fetch: it reads to the log end and updates the leader's view of that
//! follower. Consumers read to the high watermark (or the last stable offset with
//! `READ_COMMITTED`); from v11 they may read from a follower. The response budget is
//! `max_bytes` across partitions, `partition_max_bytes` each, and the first partition with
//! data returns at least one whole batch.
//!
//! [`FetchOutcome::min_bytes_reached`] says whether to answer now; if not, the purgatory
//! waits up to `max_wait_ms` and runs [`handle_fetch`] again when data arrives (Kafka's
//! `DelayedFetch` re-reads too).
//!
//! Fetch sessions (KIP-227) are the caller's: [`handle_fetch`] reads every partition the
//! request lists and ignores `session_id`/`session_epoch`/`forgotten_topics_data`
//! (`server::apis::fetch` resolves a session into a full partition list first).
//! `READ_COMMITTED` answers carry the aborted transactions overlapping the returned batches
//! (Kafka's `abortedTransactions`, an empty list when there are none; null for
//! `READ_UNCOMMITTED`), read from the segments' `.txnindex` files.
//! Limits: no preferred read replica.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset as WireEpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId, TopicName};
use krust_log::batch::{MAX_BATCH_BYTES, peek_batch_size};

use crate::error::PartitionError;
use crate::partition::{Fetcher, IsolationLevel};
use crate::replicas::PartitionAccess;

/// A fetch answered from the local logs.
#[derive(Debug)]
pub struct FetchOutcome {
    /// The response as of now.
    pub response: FetchResponse,
    /// Bytes of records in it.
    pub bytes_read: usize,
    /// Answer now: `max_wait_ms` ≤ 0, `min_bytes` reached, an error, or a diverging epoch.
    pub min_bytes_reached: bool,
}

/// Whole batches at the front of `records` fitting `limit` bytes (at least one if
/// `min_one_batch`).
fn trim_to_whole_batches(records: Bytes, limit: usize, min_one_batch: bool) -> Bytes {
    let mut end = 0usize;
    while end < records.len() {
        let Some(rest) = records.get(end..) else {
            break;
        };
        let Ok(size) = peek_batch_size(rest, MAX_BATCH_BYTES) else {
            break;
        };
        let next = end.saturating_add(size);
        if next > records.len() || (next > limit && !(min_one_batch && end == 0)) {
            break;
        }
        end = next;
    }
    records.slice(..end)
}

fn error_partition(index: i32, error: ResponseError) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
}

/// Handles a fetch request of `version` at `now_ms`; see the module doc.
pub fn handle_fetch<R: PartitionAccess>(
    replicas: &mut R,
    request: &FetchRequest,
    version: i16,
    now_ms: i64,
) -> FetchOutcome {
    let mut response = FetchResponse::default();
    let replica_id = if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    let fetcher = if replica_id >= 0 {
        Fetcher::Follower { replica_id }
    } else {
        Fetcher::Consumer {
            isolation: IsolationLevel::from_wire(request.isolation_level),
        }
    };
    let fetch_only_from_leader = replica_id >= 0 || version < 11;
    let mut remaining = usize::try_from(request.max_bytes).unwrap_or(0);
    // v3+ has a response limit that the first batch may exceed (KIP-74); before v3 the
    // partition limit is hard.
    let mut min_one_batch = version >= 3;
    let mut bytes_read = 0usize;
    let mut error_or_divergence = false;
    for topic in &request.topics {
        let (name, known_id) = if version >= 13 {
            match replicas.topic_name_of(topic.topic_id) {
                Some(name) => (name, true),
                None => (String::new(), false),
            }
        } else {
            (topic.topic.0.to_string(), true)
        };
        let mut topic_response = FetchableTopicResponse::default();
        if version >= 13 {
            topic_response.topic_id = topic.topic_id;
        } else {
            topic_response.topic = TopicName(name.clone().into());
        }
        for fp in &topic.partitions {
            let index = fp.partition;
            if !known_id {
                error_or_divergence = true;
                topic_response
                    .partitions
                    .push(error_partition(index, ResponseError::UnknownTopicId));
                continue;
            }
            let partition_max = usize::try_from(fp.partition_max_bytes).unwrap_or(0);
            let limit = partition_max.min(remaining);
            let current_leader_epoch = Some(fp.current_leader_epoch);
            let last_fetched_epoch = (version >= 12).then_some(fp.last_fetched_epoch);
            let read_committed = fetcher
                == Fetcher::Consumer {
                    isolation: IsolationLevel::ReadCommitted,
                };
            let read = replicas.with_partition(&name, index, |p| {
                let mut data = p.read(
                    fp.fetch_offset,
                    limit.max(1),
                    fetcher,
                    current_leader_epoch,
                    last_fetched_epoch,
                    fetch_only_from_leader,
                    now_ms,
                )?;
                if let Fetcher::Follower { replica_id } = fetcher
                    && version >= 5
                {
                    p.record_follower_log_start(replica_id, fp.log_start_offset);
                }
                // READ_COMMITTED: the aborted transactions of exactly the batches returned
                // (trimmed here as below, so the upper bound matches what is sent).
                let aborted = if read_committed {
                    data.records = trim_to_whole_batches(data.records, limit, min_one_batch);
                    Some(p.aborted_transactions(fp.fetch_offset, &data.records))
                } else {
                    None
                };
                Ok((data, aborted))
            });
            let data = match read {
                Err(e) => {
                    error_or_divergence = true;
                    error_partition(index, read_error(e))
                }
                Ok((data, aborted)) => {
                    let records = trim_to_whole_batches(data.records, limit, min_one_batch);
                    if !records.is_empty() {
                        min_one_batch = false;
                    }
                    remaining = remaining.saturating_sub(records.len());
                    bytes_read = bytes_read.saturating_add(records.len());
                    let mut out = PartitionData::default()
                        .with_partition_index(index)
                        .with_high_watermark(data.high_watermark)
                        .with_last_stable_offset(data.last_stable_offset)
                        .with_log_start_offset(data.log_start_offset)
                        .with_records(Some(records))
                        .with_aborted_transactions(aborted.map(|list| {
                            list.into_iter()
                                .map(|t| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(t.producer_id))
                                        .with_first_offset(t.first_offset)
                                })
                                .collect()
                        }));
                    if let Some(diverging) = data.diverging_epoch {
                        error_or_divergence = true;
                        out.diverging_epoch = WireEpochEndOffset::default()
                            .with_epoch(diverging.leader_epoch)
                            .with_end_offset(diverging.end_offset);
                    }
                    out
                }
            };
            topic_response.partitions.push(data);
        }
        response.responses.push(topic_response);
    }
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    FetchOutcome {
        response,
        bytes_read,
        min_bytes_reached: request.max_wait_ms <= 0
            || request.topics.is_empty()
            || bytes_read >= min_bytes
            || error_or_divergence,
    }
}

fn read_error(e: PartitionError) -> ResponseError {
    e.response_error()
}
