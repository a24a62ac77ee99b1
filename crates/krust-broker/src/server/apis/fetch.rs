//! Fetch (API key 1): KIP-227 fetch sessions, the long poll, and follower bookkeeping around
//! [`crate::fetch::handle_fetch`].
//!
//! Sessions (Kafka's `FetchSessionCache`/`FetchContext`), v7+:
//! - `session_id` 0, epoch -1: sessionless full fetch;
//! - `session_id` 0, epoch 0: full fetch that opens a session (its id in the response; id 0
//!   when the cache is full);
//! - `session_id` X, epoch -1: closes X, then a sessionless full fetch;
//! - `session_id` X, epoch 0: closes X, then a full fetch that opens a new session;
//! - `session_id` X, epoch N > 0: incremental — N must be X's next epoch
//!   (`INVALID_FETCH_SESSION_EPOCH`), X must exist (`FETCH_SESSION_ID_NOT_FOUND`) and be
//!   used with topic ids iff opened with them (`FETCH_SESSION_TOPIC_ID_ERROR`); listed
//!   partitions are added or updated, forgotten ones removed, and the response lists only
//!   partitions with records, an error, a diverging epoch or a changed high watermark, last
//!   stable offset or log start offset.
//!
//! The long poll re-runs the read when the request's partitions change until `min_bytes` or
//! `max_wait_ms` (Kafka's `DelayedFetch` re-reads too). The session is updated with the
//! response finally sent only.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{LeaderIdAndEpoch, NodeEndpoint, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::{AclOperation, resource_type};
use krust_metadata::image::topics::TopicPartition;
use krust_net::{Reply, RequestContext};
use rand::Rng;
use uuid::Uuid;

use super::metadata::{leader_hint, leader_node_endpoints};
use crate::fetch::handle_fetch;
use crate::replicas::PartitionAccess;
use crate::server::Broker;
use crate::server::quotas::ClientQuotas;
use crate::server::replica_manager::now_ms;

/// `max.incremental.fetch.session.cache.slots` default.
pub const DEFAULT_SESSION_CACHE_SLOTS: usize = 1000;
/// `min.incremental.fetch.session.eviction.ms` default: a session idle this long may be
/// evicted for a new one when the cache is full.
pub const SESSION_EVICTION_MS: u64 = 120_000;

/// `session_epoch` of a full fetch that opens a session.
const INITIAL_EPOCH: i32 = 0;
/// `session_epoch` of a sessionless fetch / closing a session.
const FINAL_EPOCH: i32 = -1;

/// (topic id, topic name, partition): names up to v12, ids from v13.
type SessionKey = (Uuid, String, i32);

#[derive(Debug, Clone)]
struct CachedPartition {
    fetch: FetchPartition,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    /// Opened with topic ids (v13+); later requests must use them too.
    uses_topic_ids: bool,
    partitions: BTreeMap<SessionKey, CachedPartition>,
    /// Read order: partitions that returned records move to the end, so a response budget
    /// (`max_bytes`) cannot starve the later ones (Kafka's session rotation).
    order: Vec<SessionKey>,
    last_used: Instant,
}

/// The fetch sessions of one broker.
#[derive(Debug)]
pub struct FetchSessionCache {
    slots: usize,
    sessions: Mutex<HashMap<i32, Session>>,
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

impl FetchSessionCache {
    /// With room for `slots` sessions.
    #[must_use]
    pub fn new(slots: usize) -> Self {
        FetchSessionCache {
            slots,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Number of open sessions.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no session is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a request relates to the session cache.
enum Context {
    /// No session: read what the request lists.
    Sessionless,
    /// Full fetch opening a new session.
    New,
    /// Incremental fetch on session `id`, whose partitions are the resolved request.
    Incremental { id: i32 },
}

/// The name of a topic the request names: by id from v13 (`None` when the image has no
/// topic with that id), by name before.
fn request_topic_name(
    image: &krust_metadata::image::MetadataImage,
    version: i16,
    topic_id: Uuid,
    name: &TopicName,
) -> Option<String> {
    if version >= 13 {
        image.topics.topic(topic_id).map(|t| t.name.clone())
    } else {
        Some(name.0.to_string())
    }
}

fn key_of(version: i16, topic: &FetchTopic, name: &str, partition: i32) -> SessionKey {
    if version >= 13 {
        (topic.topic_id, name.to_string(), partition)
    } else {
        (Uuid::nil(), name.to_string(), partition)
    }
}

/// The request as a full partition list, and how it relates to the session cache.
fn resolve(
    broker: &Broker,
    request: FetchRequest,
    version: i16,
) -> Result<(Context, FetchRequest), ResponseError> {
    let cache = &broker.fetch_sessions;
    if version < 7 {
        return Ok((Context::Sessionless, request));
    }
    let mut sessions = cache
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if request.session_epoch == INITIAL_EPOCH || request.session_epoch == FINAL_EPOCH {
        // A full fetch closes the session it names (Kafka's `FetchManager.newContext`).
        if request.session_id != 0 {
            sessions.remove(&request.session_id);
        }
        let context = if request.session_epoch == FINAL_EPOCH {
            Context::Sessionless
        } else {
            Context::New
        };
        return Ok((context, request));
    }
    let Some(session) = sessions.get_mut(&request.session_id) else {
        return Err(ResponseError::FetchSessionIdNotFound);
    };
    if request.session_epoch != session.next_epoch {
        return Err(ResponseError::InvalidFetchSessionEpoch);
    }
    if session.uses_topic_ids != (version >= 13) {
        return Err(ResponseError::FetchSessionTopicIdError);
    }
    let image = broker.replica_manager().image();
    let name_of = |topic: &FetchTopic| -> String {
        request_topic_name(&image, version, topic.topic_id, &topic.topic).unwrap_or_default()
    };
    for forgotten in &request.forgotten_topics_data {
        let name = request_topic_name(&image, version, forgotten.topic_id, &forgotten.topic)
            .unwrap_or_default();
        for &p in &forgotten.partitions {
            let key = if version >= 13 {
                (forgotten.topic_id, name.clone(), p)
            } else {
                (Uuid::nil(), name.clone(), p)
            };
            if session.partitions.remove(&key).is_some() {
                session.order.retain(|k| k != &key);
            }
        }
    }
    for topic in &request.topics {
        let name = name_of(topic);
        for p in &topic.partitions {
            let key = key_of(version, topic, &name, p.partition);
            match session.partitions.get_mut(&key) {
                Some(cached) => cached.fetch = p.clone(),
                None => {
                    session.order.push(key.clone());
                    session.partitions.insert(
                        key,
                        CachedPartition {
                            fetch: p.clone(),
                            high_watermark: -1,
                            last_stable_offset: -1,
                            log_start_offset: -1,
                        },
                    );
                }
            }
        }
    }
    session.last_used = Instant::now();
    // Rebuild the full request from the session, in its read order (a topic appears once per
    // run of its partitions, as Kafka's responses group them).
    let mut topics: Vec<FetchTopic> = Vec::new();
    for key in &session.order {
        let Some(cached) = session.partitions.get(key) else {
            continue;
        };
        let (topic_id, name, _) = key;
        let same = topics.last().is_some_and(|t: &FetchTopic| {
            if version >= 13 {
                t.topic_id == *topic_id
            } else {
                t.topic.0.as_str() == name.as_str()
            }
        });
        if !same {
            topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(name.clone())))
                    .with_topic_id(*topic_id),
            );
        }
        if let Some(t) = topics.last_mut() {
            t.partitions.push(cached.fetch.clone());
        }
    }
    let session_id = request.session_id;
    let mut full = request;
    full.topics = topics;
    full.forgotten_topics_data.clear();
    Ok((Context::Incremental { id: session_id }, full))
}

/// Opens a session over `response`'s partitions; returns its id (0 if the cache is full
/// of sessions too recent to evict).
fn open_session(
    broker: &Broker,
    request: &FetchRequest,
    response: &FetchResponse,
    version: i16,
) -> i32 {
    let cache = &broker.fetch_sessions;
    let mut sessions = cache
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if cache.slots == 0 {
        return 0;
    }
    if sessions.len() >= cache.slots {
        let oldest = sessions
            .iter()
            .min_by_key(|(_, s)| s.last_used)
            .map(|(&id, s)| (id, s.last_used));
        match oldest {
            Some((id, used)) if used.elapsed() >= Duration::from_millis(SESSION_EVICTION_MS) => {
                sessions.remove(&id);
            }
            _ => return 0,
        }
    }
    let mut rng = rand::thread_rng();
    let id = loop {
        let id: i32 = rng.gen_range(1..i32::MAX);
        if !sessions.contains_key(&id) {
            break id;
        }
    };
    let mut partitions = BTreeMap::new();
    let mut order = Vec::new();
    for (topic, topic_response) in request.topics.iter().zip(&response.responses) {
        let name = topic_response.topic.0.to_string();
        let name = if version >= 13 {
            broker
                .replica_manager()
                .image()
                .topics
                .topic(topic.topic_id)
                .map(|t| t.name.clone())
                .unwrap_or(name)
        } else {
            name
        };
        for (p, data) in topic.partitions.iter().zip(&topic_response.partitions) {
            let key = key_of(version, topic, &name, p.partition);
            if !partitions.contains_key(&key) {
                order.push(key.clone());
            }
            partitions.insert(
                key,
                CachedPartition {
                    fetch: p.clone(),
                    high_watermark: data.high_watermark,
                    last_stable_offset: data.last_stable_offset,
                    log_start_offset: data.log_start_offset,
                },
            );
        }
    }
    sessions.insert(
        id,
        Session {
            next_epoch: 1,
            uses_topic_ids: version >= 13,
            partitions,
            order,
            last_used: Instant::now(),
        },
    );
    id
}

/// Keeps only the partitions an incremental response must carry. With `commit`, also records
/// what was sent in the session and moves it to its next epoch; without, the session is left
/// alone (to size the response before deciding on a quota throttle).
fn filter_incremental(
    broker: &Broker,
    id: i32,
    full: &FetchRequest,
    response: &mut FetchResponse,
    version: i16,
    commit: bool,
) {
    let cache = &broker.fetch_sessions;
    let mut sessions = cache
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(session) = sessions.get_mut(&id) else {
        return;
    };
    if commit {
        session.next_epoch = next_epoch(session.next_epoch);
    }
    let mut returned_records = Vec::new();
    for (topic, topic_response) in full.topics.iter().zip(response.responses.iter_mut()) {
        let name = topic.topic.0.to_string();
        let partitions = std::mem::take(&mut topic_response.partitions);
        for (p, data) in topic.partitions.iter().zip(partitions) {
            let key = key_of(version, topic, &name, p.partition);
            let Some(cached) = session.partitions.get_mut(&key) else {
                continue;
            };
            let must_respond = data.error_code != 0
                || data.records.as_ref().is_some_and(|r| !r.is_empty())
                || data.diverging_epoch.epoch >= 0
                || data.high_watermark != cached.high_watermark
                || data.last_stable_offset != cached.last_stable_offset
                || data.log_start_offset != cached.log_start_offset;
            if data.records.as_ref().is_some_and(|r| !r.is_empty()) {
                returned_records.push(key.clone());
            }
            if must_respond {
                if commit {
                    cached.high_watermark = data.high_watermark;
                    cached.last_stable_offset = data.last_stable_offset;
                    cached.log_start_offset = data.log_start_offset;
                }
                topic_response.partitions.push(data);
            }
        }
    }
    response.responses.retain(|t| !t.partitions.is_empty());
    if commit && !returned_records.is_empty() {
        session.order.retain(|k| !returned_records.contains(k));
        session.order.extend(returned_records);
    }
}

/// A throttled incremental fetch: the session moves to its next epoch, nothing else changes
/// (Kafka's `IncrementalFetchContext.getThrottledResponse` after `newContext` bumped it).
fn bump_session_epoch(broker: &Broker, id: i32) {
    let mut sessions = broker
        .fetch_sessions
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = sessions.get_mut(&id) {
        session.next_epoch = next_epoch(session.next_epoch);
    }
}

/// Kafka's `FetchResponse.sizeOf`: the response's encoded size at `version` plus the 4-byte
/// correlation id of the header (what `consumer_byte_rate` counts).
fn response_size(response: &FetchResponse, version: i16) -> usize {
    use kafka_protocol::protocol::Encodable;
    4 + response.compute_size(version).unwrap_or(0)
}

/// (topic name, partition) of every partition a resolved request reads.
fn partition_keys(broker: &Broker, full: &FetchRequest, version: i16) -> Vec<(String, i32)> {
    let image = broker.replica_manager().image();
    full.topics
        .iter()
        .flat_map(|topic| {
            let name = request_topic_name(&image, version, topic.topic_id, &topic.topic)
                .unwrap_or_default();
            topic
                .partitions
                .iter()
                .map(move |p| (name.clone(), p.partition))
        })
        .collect()
}

/// What can complete a waiting fetch, per partition: its log end, HW, LSO, leader epoch and
/// leadership (Kafka's `DelayedFetch.tryComplete` cases), or that it is gone.
type PartitionState = Option<(i64, i64, i64, i32, bool)>;

fn partition_states(broker: &Broker, keys: &[(String, i32)]) -> Vec<PartitionState> {
    let access = broker.replica_manager().access();
    keys.iter()
        .map(|(topic, partition)| {
            access.inspect_partition(topic, *partition, |p| {
                (
                    p.log_end_offset(),
                    p.high_watermark(),
                    p.last_stable_offset(),
                    p.leader_epoch(),
                    p.is_leader(),
                )
            })
        })
        .collect()
}

/// Handles a Fetch request.
pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: FetchRequest) -> Reply {
    let version = ctx.api_version;
    let replicas = broker.replica_manager();
    let (context, mut full) = match resolve(broker, request, version) {
        Ok(resolved) => resolved,
        Err(error) => {
            let mut response = FetchResponse::default();
            response.error_code = error.code();
            broker.client_stats().record_fetch(0, true, false);
            return ResponseKind::Fetch(response).into();
        }
    };
    let from_follower = if version >= 15 {
        full.replica_state.replica_id.0
    } else {
        full.replica_id.0
    } >= 0;
    if !from_follower {
        // Kafka caps a consumer's fetch at what its `consumer_byte_rate` allows in one quota
        // window with nothing recorded before (more would be throttled for sure).
        let cap = broker
            .quotas()
            .fetch
            .max_value_in_quota_window(&ctx.principal.name, &ctx.client_id);
        if cap < f64::from(full.max_bytes) {
            // Below `i32::MAX` here.
            #[allow(clippy::cast_possible_truncation)]
            let cap = cap as i32;
            full.max_bytes = cap;
            full.min_bytes = full.min_bytes.min(cap);
        }
    }
    let max_wait = Duration::from_millis(u64::try_from(full.max_wait_ms).unwrap_or(0));
    let deadline = tokio::time::Instant::now() + max_wait;
    // The long poll. Wake-ups are broker-wide, so each one first compares the cheap state of
    // this request's partitions (see `partition_states`) and reads again only when it moved;
    // the deadline always reads once more (Kafka's DelayedFetch re-reads on completion).
    let keys = partition_keys(broker, &full, version);
    let mut waiter = replicas.purgatory().waiter();
    let mut seen = partition_states(broker, &keys);
    let mut outcome = handle_fetch(&mut replicas.access(), &full, version, now_ms());
    while !outcome.min_bytes_reached {
        let timed_out =
            !waiter.wait_until(deadline).await || tokio::time::Instant::now() >= deadline;
        waiter = replicas.purgatory().waiter();
        let now_seen = partition_states(broker, &keys);
        if timed_out || now_seen != seen {
            seen = now_seen;
            outcome = handle_fetch(&mut replicas.access(), &full, version, now_ms());
        }
        if timed_out {
            break;
        }
    }
    let mut response = outcome.response;
    let replica_id = if version >= 15 {
        full.replica_state.replica_id.0
    } else {
        full.replica_id.0
    };
    deny_unauthorized(broker, ctx, &full, &mut response, replica_id, version);
    if replica_id >= 0
        && let Some(replication) = broker.replication()
    {
        for (topic, topic_response) in full.topics.iter().zip(&response.responses) {
            let name = request_topic_name(&replicas.image(), version, topic.topic_id, &topic.topic);
            let Some(name) = name else { continue };
            for data in topic_response
                .partitions
                .iter()
                .filter(|d| d.error_code == 0)
            {
                // KIP-903: the follower's broker epoch (v15+) gates its ISR eligibility.
                replication.on_follower_fetch_with_epoch(
                    &TopicPartition {
                        topic: name.clone(),
                        partition: data.partition_index,
                    },
                    replica_id,
                    if version >= 15 {
                        full.replica_state.replica_epoch
                    } else {
                        -1
                    },
                );
            }
        }
    }
    if version >= 12 {
        add_leader_hints(broker, ctx, &full, &mut response, version);
    }
    // Sized only once a consumer quota exists (Kafka sizes every consumer response, then
    // records nothing while no quota was ever configured).
    if !from_follower && broker.quotas().fetch.quotas_enabled() {
        // `consumer_byte_rate` on the size of the response that would be sent (Kafka's
        // `fetchContext.getResponseSize`); when throttled, the bytes are taken back and an
        // empty response with the throttle goes out (a full fetch opens no session).
        let quotas = broker.quotas();
        let size = if let Context::Incremental { id } = context {
            let mut view = response.clone();
            filter_incremental(broker, id, &full, &mut view, version, false);
            response_size(&view, version)
        } else {
            response_size(&response, version)
        };
        let now = std::time::Instant::now();
        #[allow(clippy::cast_precision_loss)]
        let size = size as f64;
        let throttle_time_ms = quotas.fetch.record_and_get_throttle_time_ms(
            &ctx.principal.name,
            &ctx.client_id,
            size,
            now,
        );
        if throttle_time_ms > 0 {
            quotas
                .fetch
                .unrecord(&ctx.principal.name, &ctx.client_id, size, now);
            ClientQuotas::throttle(&quotas.fetch, ctx, throttle_time_ms, now);
            let mut throttled = FetchResponse::default().with_throttle_time_ms(throttle_time_ms);
            if let Context::Incremental { id } = context {
                bump_session_epoch(broker, id);
                throttled.session_id = id;
            }
            broker.client_stats().record_fetch(0, false, false);
            return ResponseKind::Fetch(throttled).into();
        }
    }
    match context {
        Context::Sessionless => {}
        Context::New => {
            response.session_id = open_session(broker, &full, &response, version);
        }
        Context::Incremental { id } => {
            filter_incremental(broker, id, &full, &mut response, version, true);
            response.session_id = id;
        }
    }
    let bytes_out: usize = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref().map(Bytes::len))
        .sum();
    broker
        .client_stats()
        .record_fetch(bytes_out as u64, response.error_code != 0, replica_id >= 0);
    ResponseKind::Fetch(response).into()
}

/// Kafka's `handleFetchRequest` authorization: a follower needs CLUSTER_ACTION on the
/// cluster, a consumer READ on each topic; the partitions refused answer
/// TOPIC_AUTHORIZATION_FAILED with no records.
fn deny_unauthorized(
    broker: &Broker,
    ctx: &RequestContext,
    full: &FetchRequest,
    response: &mut FetchResponse,
    replica_id: i32,
    version: i16,
) {
    let authz = broker.authz(ctx);
    if !authz.enabled() {
        return;
    }
    let follower_denied = replica_id >= 0 && !authz.allows_cluster(AclOperation::ClusterAction);
    let image = broker.replica_manager().image();
    for (topic, topic_response) in full.topics.iter().zip(response.responses.iter_mut()) {
        let Some(name) = request_topic_name(&image, version, topic.topic_id, &topic.topic) else {
            continue;
        };
        if follower_denied
            || (replica_id < 0 && !authz.allows(AclOperation::Read, resource_type::TOPIC, &name))
        {
            for data in &mut topic_response.partitions {
                if data.error_code != ResponseError::UnknownTopicId.code() {
                    *data = PartitionData::default()
                        .with_partition_index(data.partition_index)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(Bytes::new()));
                }
            }
        }
    }
}

fn add_leader_hints(
    broker: &Broker,
    ctx: &RequestContext,
    full: &FetchRequest,
    response: &mut FetchResponse,
    version: i16,
) {
    let hinted = [
        ResponseError::NotLeaderOrFollower.code(),
        ResponseError::FencedLeaderEpoch.code(),
    ];
    let image = broker.replica_manager().image();
    let mut leaders = std::collections::BTreeSet::new();
    for (topic, topic_response) in full.topics.iter().zip(response.responses.iter_mut()) {
        let name =
            request_topic_name(&image, version, topic.topic_id, &topic.topic).unwrap_or_default();
        for data in &mut topic_response.partitions {
            if hinted.contains(&data.error_code) {
                set_hint(data, &image, &name, &mut leaders);
            }
        }
    }
    if version >= 16 {
        response.node_endpoints =
            leader_node_endpoints!(NodeEndpoint, broker, &image, &ctx.listener_name, leaders);
    }
}

fn set_hint(
    data: &mut PartitionData,
    image: &krust_metadata::image::MetadataImage,
    topic: &str,
    leaders: &mut std::collections::BTreeSet<i32>,
) {
    let (leader, epoch) = leader_hint(image, topic, data.partition_index);
    data.current_leader = LeaderIdAndEpoch::default()
        .with_leader_id(BrokerId(leader))
        .with_leader_epoch(epoch);
    if leader >= 0 {
        leaders.insert(leader);
    }
}
