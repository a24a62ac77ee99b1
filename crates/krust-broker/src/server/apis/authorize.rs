//! The whole-request authorization checks of Kafka's `KafkaApis` (facts: security C.4), run
//! before a request reaches its handler: a group, transactional id or cluster operation the
//! principal may not do answers the API's error response at once. The per-topic and
//! per-partition checks live in the handlers (Produce, Fetch, ListOffsets, Metadata, …).
//!
//! Requests forwarded to the controller (CreateTopics, CreateAcls, …) are checked here, on
//! the broker, with the same operations and codes as Kafka's controller checks them.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, BrokerId, DescribeAclsRequest,
    DescribeAclsResponse, DescribeLogDirsResponse, EndTxnResponse, FindCoordinatorResponse,
    HeartbeatResponse, InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse,
    OffsetFetchRequest, OffsetFetchResponse, ProducerId, RequestKind, ResponseKind,
    SyncGroupResponse, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::AclBindingFilter;
use krust_metadata::authorizer::AclOperation::{
    Alter, AlterConfigs, ClusterAction, Create, Delete, Describe, DescribeConfigs, IdempotentWrite,
    Read, Write,
};
use krust_metadata::authorizer::resource_type::{GROUP, TOPIC, TRANSACTIONAL_ID};
use krust_metadata::image::MetadataImage;
use krust_net::error_codes::{
    OPERATION_NOT_ATTEMPTED, SECURITY_DISABLED, UNKNOWN_TOPIC_OR_PARTITION,
};

use krust_net::{Reply, RequestContext};

use super::super::authz::Authz;
use super::super::forwarding::error_response;
use super::super::groups::GroupCoordinator;
use crate::group::shard::{offset_commit_errors, txn_offset_commit_error};

/// GROUP_AUTHORIZATION_FAILED.
pub const GAF: i16 = 30;
/// CLUSTER_AUTHORIZATION_FAILED.
pub const CAF: i16 = 31;
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
pub const TIAF: i16 = 53;
/// TOPIC_AUTHORIZATION_FAILED.
pub const TAF: i16 = 29;

/// Kafka's default message for an authorization error code.
#[must_use]
pub fn message(code: i16) -> &'static str {
    match code {
        GAF => "Group authorization failed.",
        CAF => "Cluster authorization failed.",
        TIAF => "Transactional Id authorization failed.",
        _ => "Topic authorization failed.",
    }
}

/// The error response when `request` may not be served at all, else `None`.
#[must_use]
pub fn denied(authz: &Authz, version: i16, request: &RequestKind) -> Option<ResponseKind> {
    if !authz.enabled() {
        return None;
    }
    let group = |op, id: &str| !authz.allows(op, GROUP, id);
    let txn = |id: &str| !authz.allows(Write, TRANSACTIONAL_ID, id);
    let cluster = |op| !authz.allows_cluster(op);
    Some(match request {
        RequestKind::JoinGroup(r) if group(Read, &r.group_id) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(GAF)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone())
                .with_protocol_name((version < 7).then(StrBytes::default)),
        ),
        RequestKind::SyncGroup(r) if group(Read, &r.group_id) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GAF))
        }
        RequestKind::Heartbeat(r) if group(Read, &r.group_id) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GAF))
        }
        RequestKind::LeaveGroup(r) if group(Read, &r.group_id) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GAF))
        }
        RequestKind::FindCoordinator(r) => return find_coordinator(authz, version, r),
        RequestKind::OffsetCommit(r) if group(Read, &r.group_id) => ResponseKind::OffsetCommit(
            kafka_protocol::messages::OffsetCommitResponse::default()
                .with_topics(offset_commit_errors(&r.topics, GAF)),
        ),
        RequestKind::TxnOffsetCommit(r) if txn(&r.transactional_id) || group(Read, &r.group_id) => {
            let code = if txn(&r.transactional_id) { TIAF } else { GAF };
            ResponseKind::TxnOffsetCommit(txn_offset_commit_error(r, code))
        }
        RequestKind::OffsetDelete(r) if group(Delete, &r.group_id) => ResponseKind::OffsetDelete(
            kafka_protocol::messages::OffsetDeleteResponse::default().with_error_code(GAF),
        ),
        RequestKind::InitProducerId(r) => {
            let allowed = match &r.transactional_id {
                Some(id) => !txn(id),
                None => {
                    // Cluster IDEMPOTENT_WRITE is tried without an INFO audit line (Kafka's
                    // `logIfDenied = false`).
                    authz.filter_allows_cluster(IdempotentWrite)
                        || authz.allows_any_of_type(Write, TOPIC)
                }
            };
            if allowed {
                return None;
            }
            let code = if r.transactional_id.is_some() {
                TIAF
            } else {
                CAF
            };
            ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_error_code(code)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
        }
        RequestKind::AddPartitionsToTxn(_) if version >= 4 && cluster(ClusterAction) => {
            ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_error_code(CAF),
            )
        }
        RequestKind::AddPartitionsToTxn(r)
            if version < 4 && txn(&r.v3_and_below_transactional_id) =>
        {
            ResponseKind::AddPartitionsToTxn(add_partitions_error(r, TIAF))
        }
        RequestKind::AddOffsetsToTxn(r) if txn(&r.transactional_id) => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(TIAF))
        }
        RequestKind::AddOffsetsToTxn(r) if group(Read, &r.group_id) => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(GAF))
        }
        RequestKind::EndTxn(r) if txn(&r.transactional_id) => {
            ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(TIAF))
        }
        // ALTER is tried first without an INFO audit line (Kafka's `logIfDenied = false`).
        RequestKind::WriteTxnMarkers(r)
            if !authz.filter_allows_cluster(Alter) && cluster(ClusterAction) =>
        {
            let mut response = WriteTxnMarkersResponse::default();
            response.markers = r
                .markers
                .iter()
                .map(|m| {
                    kafka_protocol::messages::write_txn_markers_response::WritableTxnMarkerResult::default()
                        .with_producer_id(m.producer_id)
                        .with_topics(
                            m.topics
                                .iter()
                                .map(|t| {
                                    kafka_protocol::messages::write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                                        .with_name(t.name.clone())
                                        .with_partitions(
                                            t.partition_indexes
                                                .iter()
                                                .map(|p| {
                                                    kafka_protocol::messages::write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                                                        .with_partition_index(*p)
                                                        .with_error_code(CAF)
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect();
            ResponseKind::WriteTxnMarkers(response)
        }
        RequestKind::DescribeLogDirs(_) if cluster(Describe) => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(CAF))
        }
        RequestKind::DescribeAcls(_) if cluster(Describe) => ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(CAF)
                .with_error_message(Some(StrBytes::from_static_str(message(CAF)))),
        ),
        RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
        | RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)
        | RequestKind::UpdateFeatures(_)
        | RequestKind::AlterUserScramCredentials(_)
            if cluster(Alter) =>
        {
            return error_response(request, version, CAF);
        }
        RequestKind::ListPartitionReassignments(_) if cluster(Describe) => {
            return error_response(request, version, CAF);
        }
        RequestKind::DescribeQuorum(_) if cluster(Describe) => {
            // `DescribeQuorumResponse.getTopLevelErrorResponse`: the default message (v2+).
            let mut response =
                kafka_protocol::messages::DescribeQuorumResponse::default().with_error_code(CAF);
            if version >= 2 {
                response.error_message = Some(StrBytes::from_static_str(message(CAF)));
            }
            ResponseKind::DescribeQuorum(response)
        }
        RequestKind::AlterClientQuotas(_) if cluster(AlterConfigs) => {
            return error_response(request, version, CAF);
        }
        RequestKind::DescribeClientQuotas(_) if cluster(DescribeConfigs) => {
            // Kafka's `ClusterAuthorizationException` with its default message: none sent.
            ResponseKind::DescribeClientQuotas(super::describe_security::quotas_error(CAF, None))
        }
        RequestKind::DescribeUserScramCredentials(r) if cluster(Describe) => {
            ResponseKind::DescribeUserScramCredentials(super::describe_security::scram_error(
                r, CAF, None,
            ))
        }
        _ => return None,
    })
}

fn add_partitions_error(
    r: &kafka_protocol::messages::AddPartitionsToTxnRequest,
    code: i16,
) -> AddPartitionsToTxnResponse {
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
        r.v3_and_below_topics
            .iter()
            .map(|t| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_partition_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// FindCoordinator: DESCRIBE on the group (key type 0) or the transactional id (1). Below v4
/// the one key's refusal is the whole answer (with Kafka's message); from v4 each refused key
/// answers in place and the rest go to the coordinator.
fn find_coordinator(
    authz: &Authz,
    version: i16,
    r: &kafka_protocol::messages::FindCoordinatorRequest,
) -> Option<ResponseKind> {
    let (resource, code) = match r.key_type {
        0 => (GROUP, GAF),
        1 => (TRANSACTIONAL_ID, TIAF),
        _ => return None,
    };
    let refused = |key: &str| !authz.allows(Describe, resource, key);
    if version < 4 {
        return refused(&r.key).then(|| {
            ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_static_str(message(code))))
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1),
            )
        });
    }
    // Every key refused: answered here; a mix is split by the dispatcher.
    (!r.coordinator_keys.is_empty() && r.coordinator_keys.iter().all(|k| refused(k))).then(|| {
        ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(
                r.coordinator_keys
                    .iter()
                    .map(|k| refused_coordinator(k, code))
                    .collect(),
            ),
        )
    })
}

/// A v4+ coordinator entry refused with `code`.
#[must_use]
pub fn refused_coordinator(key: &StrBytes, code: i16) -> Coordinator {
    Coordinator::default()
        .with_key(key.clone())
        .with_node_id(BrokerId(-1))
        .with_host(StrBytes::default())
        .with_port(-1)
        .with_error_code(code)
}

/// DescribeAcls (29) from the image's ACLs: SECURITY_DISABLED without an authorizer; the
/// matching ACLs grouped by resource pattern, in (type, name, pattern) order.
#[must_use]
pub fn describe_acls(authz: &Authz, r: &DescribeAclsRequest) -> DescribeAclsResponse {
    let Some(acls) = authz.acls() else {
        return DescribeAclsResponse::default()
            .with_error_code(SECURITY_DISABLED)
            .with_error_message(Some(StrBytes::from_static_str(
                "No Authorizer is configured.",
            )));
    };
    let filter = AclBindingFilter {
        resource_type: r.resource_type_filter,
        resource_name: r.resource_name_filter.as_deref().map(str::to_owned),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_deref().map(str::to_owned),
        host: r.host_filter.as_deref().map(str::to_owned),
        operation: r.operation,
        permission_type: r.permission_type,
    };
    let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in acls.iter().filter(|acl| filter.matches(acl)) {
        resources
            .entry((
                acl.resource_type,
                acl.resource_name.clone(),
                acl.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(StrBytes::from_string(acl.principal.clone()))
                    .with_host(StrBytes::from_string(acl.host.clone()))
                    .with_operation(acl.operation)
                    .with_permission_type(acl.permission_type),
            );
    }
    DescribeAclsResponse::default().with_resources(
        resources
            .into_iter()
            .map(|((resource_type, name, pattern_type), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_string(name))
                    .with_pattern_type(pattern_type)
                    .with_acls(acls)
            })
            .collect(),
    )
}

/// Kafka's `UNAUTHORIZED_PARTITION` in an OffsetFetch answer.
fn unauthorized_offset(partition_index: i32) -> OffsetFetchResponsePartitions {
    OffsetFetchResponsePartitions::default()
        .with_partition_index(partition_index)
        .with_committed_offset(-1)
        .with_committed_leader_epoch(-1)
        .with_metadata(Some(StrBytes::default()))
        .with_error_code(TAF)
}

/// OffsetFetch with authorization (Kafka's `handleOffsetFetchRequest`): DESCRIBE on each group
/// (GROUP_AUTHORIZATION_FAILED), DESCRIBE on each listed topic (its partitions
/// TOPIC_AUTHORIZATION_FAILED); asked for all offsets, the topics the principal may not
/// describe are left out. The rest is the group coordinator's answer.
pub async fn offset_fetch(
    authz: &Authz,
    groups: &GroupCoordinator,
    ctx: &RequestContext,
    mut r: OffsetFetchRequest,
) -> Reply {
    let version = ctx.api_version;
    let describe_group = |id: &str| authz.allows(Describe, GROUP, id);
    let describe_topic = |name: &str| authz.allows(Describe, TOPIC, name);
    if version < 8 {
        if !describe_group(&r.group_id) {
            let mut response = OffsetFetchResponse::default().with_error_code(GAF);
            if version < 2 {
                response.topics = r
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(-1)
                                            .with_committed_leader_epoch(-1)
                                            .with_metadata(Some(StrBytes::default()))
                                            .with_error_code(GAF)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                response.error_code = 0;
            }
            return ResponseKind::OffsetFetch(response).into();
        }
        let denied: Vec<_> = match &mut r.topics {
            Some(topics) => {
                let (denied, allowed) = std::mem::take(topics)
                    .into_iter()
                    .partition(|t| !describe_topic(&t.name));
                *topics = allowed;
                denied
            }
            None => Vec::new(),
        };
        let all_topics = r.topics.is_none();
        let skip = r.topics.as_ref().is_some_and(Vec::is_empty) && !denied.is_empty();
        let mut response = if skip {
            OffsetFetchResponse::default()
        } else {
            match groups.handle(ctx, RequestKind::OffsetFetch(r)).await {
                Reply::Send(b) => match *b {
                    ResponseKind::OffsetFetch(o) => o,
                    other => return Reply::Send(Box::new(other)),
                },
                other => return other,
            }
        };
        if all_topics {
            response.topics.retain(|t| describe_topic(&t.name));
        }
        response.topics.extend(denied.iter().map(|t| {
            OffsetFetchResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partition_indexes
                        .iter()
                        .map(|&p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_committed_leader_epoch(-1)
                                .with_metadata(Some(StrBytes::default()))
                                .with_error_code(TAF)
                        })
                        .collect(),
                )
        }));
        return ResponseKind::OffsetFetch(response).into();
    }
    let (denied_groups, mut allowed): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
        .into_iter()
        .partition(|g| !describe_group(&g.group_id));
    // Group id → its listed topics refused (`None`: all topics asked for).
    let mut refused: BTreeMap<String, Option<Vec<_>>> = BTreeMap::new();
    for group in &mut allowed {
        let entry = match &mut group.topics {
            Some(topics) => {
                let (denied, kept) = std::mem::take(topics)
                    .into_iter()
                    .partition(|t| !describe_topic(&t.name));
                *topics = kept;
                Some(denied)
            }
            None => None,
        };
        refused.insert(group.group_id.to_string(), entry);
    }
    r.groups = allowed;
    let mut response = if r.groups.is_empty() {
        OffsetFetchResponse::default()
    } else {
        match groups.handle(ctx, RequestKind::OffsetFetch(r)).await {
            Reply::Send(b) => match *b {
                ResponseKind::OffsetFetch(o) => o,
                other => return Reply::Send(Box::new(other)),
            },
            other => return other,
        }
    };
    for group in &mut response.groups {
        match refused.get(group.group_id.as_str()) {
            Some(None) => group.topics.retain(|t| describe_topic(&t.name)),
            Some(Some(denied)) => {
                group
                    .topics
                    .extend(denied.iter().map(|t: &OffsetFetchRequestTopics| {
                        OffsetFetchResponseTopics::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| unauthorized_offset(p))
                                    .collect(),
                            )
                    }));
            }
            None => {}
        }
    }
    response.groups.extend(denied_groups.into_iter().map(|g| {
        OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(GAF)
    }));
    ResponseKind::OffsetFetch(response).into()
}

/// AddPartitionsToTxn from a client (v0–3), its topics: WRITE on each (internal topics are
/// never authorized). Any refusal fails the whole request as Kafka does: refused topics
/// TOPIC_AUTHORIZATION_FAILED, unknown partitions UNKNOWN_TOPIC_OR_PARTITION, the rest
/// OPERATION_NOT_ATTEMPTED. `None`: every topic may be written.
#[must_use]
pub fn add_partitions_topics(
    authz: &Authz,
    image: &MetadataImage,
    r: &kafka_protocol::messages::AddPartitionsToTxnRequest,
) -> Option<AddPartitionsToTxnResponse> {
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    let writable = |name: &str| {
        !super::metadata::INTERNAL_TOPICS.contains(&name) && authz.allows(Write, TOPIC, name)
    };
    if !authz.enabled() || r.v3_and_below_topics.iter().all(|t| writable(&t.name)) {
        return None;
    }
    Some(
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
            r.v3_and_below_topics
                .iter()
                .map(|t| {
                    let topic = image.topics.topic_by_name(&t.name);
                    let code = |p: i32| {
                        if !writable(&t.name) {
                            TAF
                        } else if topic.is_none_or(|t| !t.partitions.contains_key(&p)) {
                            UNKNOWN_TOPIC_OR_PARTITION
                        } else {
                            OPERATION_NOT_ATTEMPTED
                        }
                    };
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|&p| {
                                    AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(p)
                                        .with_partition_error_code(code(p))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

/// Splits `topics` into (refused, allowed) by READ on each topic's name.
pub fn split_readable<T>(
    authz: &Authz,
    topics: Vec<T>,
    name: impl Fn(&T) -> &str,
) -> (Vec<T>, Vec<T>) {
    topics
        .into_iter()
        .partition(|t| !authz.allows(Read, TOPIC, name(t)))
}

/// DeleteTopics' refusals (Kafka's `ControllerApis.deleteTopics`): without DELETE on the
/// cluster, a topic named without DESCRIBE, or an existing one without DELETE, is
/// TOPIC_AUTHORIZATION_FAILED (by id: named only with DESCRIBE). Removes them from `r` and
/// returns their results; unknown names and ids go on to the controller.
pub fn delete_topics_refusals(
    authz: &Authz,
    image: &MetadataImage,
    r: &mut kafka_protocol::messages::DeleteTopicsRequest,
) -> Vec<kafka_protocol::messages::delete_topics_response::DeletableTopicResult> {
    use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
    // Cluster DELETE only chooses the path: not audited at INFO (Kafka's `logIfDenied = false`).
    if !authz.enabled() || authz.filter_allows_cluster(Delete) {
        return Vec::new();
    }
    let describe = |name: &str| authz.allows(Describe, TOPIC, name);
    let delete = |name: &str| authz.allows(Delete, TOPIC, name);
    let refuse =
        |name: Option<&str>, id: uuid::Uuid| {
            DeletableTopicResult::default()
                .with_name(name.map(|n| {
                    kafka_protocol::messages::TopicName(StrBytes::from_string(n.to_owned()))
                }))
                .with_topic_id(id)
                .with_error_code(TAF)
                .with_error_message(Some(StrBytes::from_static_str(message(TAF))))
        };
    // A name refused, or `None` to go on. Both checks run for every name, as Kafka filters all
    // the names by DESCRIBE and by DELETE (each denial in the audit log).
    let by_name = |name: &str| {
        let (describable, deletable) = (describe(name), delete(name));
        if !describable || (image.topics.topic_by_name(name).is_some() && !deletable) {
            Some(refuse(Some(name), uuid::Uuid::nil()))
        } else {
            None
        }
    };
    // Names or ids given twice, and entries with both or neither, are the controller's
    // INVALID_REQUEST before any authorization (and delete nothing): left to it.
    let mut names = BTreeMap::<String, usize>::new();
    let mut ids = BTreeMap::<uuid::Uuid, usize>::new();
    for name in &r.topic_names {
        *names.entry(name.to_string()).or_default() += 1;
    }
    for t in &r.topics {
        match (&t.name, t.topic_id.is_nil()) {
            (Some(name), true) => *names.entry(name.to_string()).or_default() += 1,
            (None, false) => *ids.entry(t.topic_id).or_default() += 1,
            _ => {}
        }
    }
    let once = |name: &str| names.get(name) == Some(&1);
    let mut refused = Vec::new();
    r.topic_names
        .retain(|name| match once(name).then(|| by_name(name)).flatten() {
            Some(result) => {
                refused.push(result);
                false
            }
            None => true,
        });
    r.topics.retain(|t| {
        let result = match (&t.name, t.topic_id.is_nil()) {
            (Some(name), true) if once(name) => by_name(name),
            (None, false) if ids.get(&t.topic_id) == Some(&1) => {
                image.topics.topic(t.topic_id).and_then(|topic| {
                    let (describable, deletable) = (describe(&topic.name), delete(&topic.name));
                    (!deletable)
                        .then(|| refuse(describable.then_some(topic.name.as_str()), t.topic_id))
                })
            }
            _ => None,
        };
        match result {
            Some(result) => {
                refused.push(result);
                false
            }
            None => true,
        }
    });
    refused
}

/// DescribeConfigs' refusals (Kafka's `handleDescribeConfigsRequest`): DESCRIBE_CONFIGS on the
/// cluster for broker, broker-logger and client-metrics resources (CLUSTER_AUTHORIZATION_FAILED),
/// on the topic for a topic (TOPIC_AUTHORIZATION_FAILED). Removes them from `r`.
pub fn describe_configs_refusals(
    authz: &Authz,
    r: &mut kafka_protocol::messages::DescribeConfigsRequest,
) -> Vec<kafka_protocol::messages::describe_configs_response::DescribeConfigsResult> {
    use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
    if !authz.enabled() {
        return Vec::new();
    }
    let refusal = |resource_type: i8, name: &str| match resource_type {
        4 | 8 | 16 => (!authz.allows_cluster(DescribeConfigs)).then_some(CAF),
        2 => (!authz.allows(DescribeConfigs, TOPIC, name)).then_some(TAF),
        _ => None,
    };
    let mut refused = Vec::new();
    r.resources.retain(
        |resource| match refusal(resource.resource_type, &resource.resource_name) {
            Some(code) => {
                refused.push(
                    DescribeConfigsResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(StrBytes::from_static_str(message(code))))
                        .with_resource_type(resource.resource_type)
                        .with_resource_name(resource.resource_name.clone()),
                );
                false
            }
            None => true,
        },
    );
    refused
}

/// CreatePartitions' refusals (Kafka's `ControllerApis.createPartitions`): ALTER on each topic
/// named once (TOPIC_AUTHORIZATION_FAILED). Removes them from `r`.
pub fn create_partitions_refusals(
    authz: &Authz,
    r: &mut kafka_protocol::messages::CreatePartitionsRequest,
) -> Vec<kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult> {
    use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for t in &r.topics {
        *count.entry(t.name.to_string()).or_default() += 1;
    }
    let mut refused = Vec::new();
    r.topics.retain(|t| {
        let once = count.get(t.name.as_str()) == Some(&1);
        if once && !authz.allows(Alter, TOPIC, &t.name) {
            refused.push(
                CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(TAF)
                    .with_error_message(Some(StrBytes::from_static_str(message(TAF)))),
            );
            false
        } else {
            true
        }
    });
    refused
}

/// A DescribeProducers topic refused: each partition TOPIC_AUTHORIZATION_FAILED.
#[must_use]
pub fn describe_producers_refused(
    t: &kafka_protocol::messages::describe_producers_request::TopicRequest,
) -> kafka_protocol::messages::describe_producers_response::TopicResponse {
    use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
    TopicResponse::default()
        .with_name(t.name.clone())
        .with_partitions(
            t.partition_indexes
                .iter()
                .map(|&p| {
                    PartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(TAF)
                        .with_error_message(Some(StrBytes::from_static_str(message(TAF))))
                })
                .collect(),
        )
}

/// What the per-topic and per-resource checks of a forwarded admin request refused, to add to
/// the controller's answer (Kafka's `ControllerApis`: the refused items never reach the
/// controller's logic; their results are appended to its answer).
#[derive(Debug, Default)]
pub enum Refusals {
    /// Nothing refused.
    #[default]
    None,
    /// CreateTopics: names without CREATE, and created topics whose configs are hidden (no
    /// DESCRIBE_CONFIGS).
    CreateTopics {
        /// Refused names.
        refused: Vec<String>,
        /// Names whose configs the answer must not show.
        hidden_configs: BTreeSet<String>,
    },
    /// DeleteTopics results.
    DeleteTopics(Vec<kafka_protocol::messages::delete_topics_response::DeletableTopicResult>),
    /// CreatePartitions results.
    CreatePartitions(
        Vec<kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult>,
    ),
    /// IncrementalAlterConfigs results.
    IncrementalAlterConfigs(
        Vec<kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse>,
    ),
    /// AlterConfigs results.
    AlterConfigs(Vec<kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse>),
}

/// Kafka's `ControllerApis.authorizeAlterResource`: the refusal of one config resource.
#[must_use]
pub fn alter_resource_refusal(authz: &Authz, resource_type: i8, name: &str) -> Option<i16> {
    match resource_type {
        4 | 16 => (!authz.allows_cluster(AlterConfigs)).then_some(CAF),
        2 => (!authz.allows(AlterConfigs, TOPIC, name)).then_some(TAF),
        _ => None,
    }
}

/// The resources of an (Incremental)AlterConfigs request refused by
/// [`alter_resource_refusal`], removed from the request, as the API's resource responses.
macro_rules! alter_refusals {
    ($authz:expr, $request:expr, $module:ident) => {{
        let mut refused = Vec::new();
        $request.resources.retain(|res| {
            match alter_resource_refusal($authz, res.resource_type, &res.resource_name) {
                Some(code) => {
                    refused.push(
                        kafka_protocol::messages::$module::AlterConfigsResourceResponse::default()
                            .with_error_code(code)
                            .with_error_message(Some(StrBytes::from_static_str(message(code))))
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone()),
                    );
                    false
                }
                None => true,
            }
        });
        refused
    }};
}

/// Runs the per-item checks of a forwarded admin request: removes the refused items from
/// `request` and returns them, to [`Refusals::merge`] into the answer.
pub fn split_forwarded(
    authz: &Authz,
    image: &MetadataImage,
    request: &mut RequestKind,
) -> Refusals {
    if !authz.enabled() {
        return Refusals::None;
    }
    match request {
        RequestKind::CreateTopics(r) => {
            let mut seen = BTreeMap::<String, usize>::new();
            for t in &r.topics {
                *seen.entry(t.name.to_string()).or_default() += 1;
            }
            // Cluster CREATE and DESCRIBE_CONFIGS only choose: not audited at INFO (Kafka's
            // `logIfDenied = false`); per-topic CREATE is.
            let cluster = authz.filter_allows_cluster(Create);
            let mut refused = Vec::new();
            let mut hidden_configs = BTreeSet::new();
            for (name, count) in &seen {
                if *count > 1 || name == "__cluster_metadata" {
                    continue;
                }
                if !cluster && !authz.allows(Create, TOPIC, name) {
                    refused.push(name.clone());
                } else if !authz.filter_allows(DescribeConfigs, TOPIC, name) {
                    hidden_configs.insert(name.clone());
                }
            }
            r.topics.retain(|t| !refused.contains(&t.name.to_string()));
            Refusals::CreateTopics {
                refused,
                hidden_configs,
            }
        }
        RequestKind::DeleteTopics(r) => {
            Refusals::DeleteTopics(delete_topics_refusals(authz, image, r))
        }
        RequestKind::CreatePartitions(r) => {
            Refusals::CreatePartitions(create_partitions_refusals(authz, r))
        }
        RequestKind::IncrementalAlterConfigs(r) => Refusals::IncrementalAlterConfigs(
            alter_refusals!(authz, r, incremental_alter_configs_response),
        ),
        RequestKind::AlterConfigs(r) => {
            Refusals::AlterConfigs(alter_refusals!(authz, r, alter_configs_response))
        }
        _ => Refusals::None,
    }
}

impl Refusals {
    /// Adds the refused items to the answer of the rest.
    pub fn merge(self, response: &mut ResponseKind) {
        use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
        match (self, response) {
            (
                Refusals::CreateTopics {
                    refused,
                    hidden_configs,
                },
                ResponseKind::CreateTopics(response),
            ) => {
                for topic in &mut response.topics {
                    if topic.error_code == 0 && hidden_configs.contains(topic.name.as_str()) {
                        topic.configs = Some(Vec::new());
                        topic.num_partitions = -1;
                        topic.replication_factor = -1;
                        topic.topic_config_error_code = TAF;
                    }
                }
                response.topics.extend(refused.into_iter().map(|name| {
                    CreatableTopicResult::default()
                        .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                            name,
                        )))
                        .with_error_code(TAF)
                        .with_error_message(Some(StrBytes::from_static_str(
                            "Authorization failed.",
                        )))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }));
            }
            (Refusals::DeleteTopics(refused), ResponseKind::DeleteTopics(response)) => {
                response.responses.extend(refused);
            }
            (Refusals::CreatePartitions(refused), ResponseKind::CreatePartitions(response)) => {
                response.results.extend(refused);
            }
            (
                Refusals::IncrementalAlterConfigs(refused),
                ResponseKind::IncrementalAlterConfigs(response),
            ) => response.responses.extend(refused),
            (Refusals::AlterConfigs(refused), ResponseKind::AlterConfigs(response)) => {
                response.responses.extend(refused);
            }
            _ => {}
        }
    }
}
