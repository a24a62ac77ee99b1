//! The client listener's request handler (Kafka's `KafkaApis`): one [`ClientApiHandler`]
//! serving the data-plane APIs itself and dispatching forwarded admin APIs to the
//! [`super::forwarding::Forwarder`] and group APIs to the
//! [`super::groups::GroupCoordinator`] when those are plugged in.
//!
//! ApiVersions advertises exactly what is served: the APIs of this module at Kafka 3.9's
//! ranges capped to what is implemented (Produce from v3 and Fetch from v4: older versions
//! need message-format down-conversion, which krust does not do), plus the forwarded and
//! group APIs; finalized features come from the image.
//!
//! # Layout
//! - `produce.rs`: Produce (acks 0/1/all with the purgatory).
//! - `fetch.rs`: Fetch (long poll, KIP-227 sessions, follower fetches).
//! - `metadata.rs`: Metadata (auto topic creation), DescribeCluster.
//! - `offsets.rs`: ListOffsets, OffsetForLeaderEpoch, DeleteRecords.
//! - `configs.rs`: DescribeConfigs.
//! - `describe_topic_partitions.rs`: DescribeTopicPartitions (KIP-966, with its cursor).
//! - `describe_security.rs`: DescribeClientQuotas and DescribeUserScramCredentials from the
//!   image.
//! - `create_topics.rs`: CreateTopics, forwarded, answered once the topics are visible here.
//! - `log_dirs.rs`: DescribeLogDirs.
//! - `producer_id.rs`: InitProducerId (producer id blocks from the controller).
//! - `producers.rs`: DescribeProducers.
//! - `txn_verification.rs`: KIP-890 part 1, AddPartitionsToTxn `verify_only` to the
//!   transaction coordinator before a producer's first transactional batch on a partition.
//! - `write_txn_markers.rs`: WriteTxnMarkers (COMMIT/ABORT markers as partition leader;
//!   those in `__consumer_offsets` reported to the group coordinator).
//! - `stats.rs`: `BrokerTopicMetrics` and per-request `TotalTimeMs` for `/metrics`.
//! - `authorize.rs`: the whole-request authorization checks (group, transactional id,
//!   cluster) run before dispatch, and DescribeAcls from the image's ACLs.

use crate::group::shard::{offset_commit_errors, txn_offset_commit_errors};

mod alter_configs;
pub mod authorize;
pub mod configs;
pub mod create_topics;
pub mod describe_security;
pub mod describe_topic_partitions;
pub mod fetch;
pub mod log_dirs;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod producer_id;
pub mod producers;
pub mod stats;
pub mod txn_verification;
pub mod write_txn_markers;

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Handler, Reply, RequestContext, SupportedApis};
use tracing::warn;

use super::Broker;
use super::forwarding::Forwarder;
use super::groups::GroupCoordinator;

/// The APIs this module serves, with the version ranges advertised (Kafka 3.9's, capped to
/// what is implemented).
pub const OWN_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 0, 9),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetForLeaderEpoch, 0, 4),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::DescribeConfigs, 0, 4),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeLogDirs, 0, 4),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::WriteTxnMarkers, 0, 1),
    (ApiKey::DescribeAcls, 0, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    // Answered by krust-net: the SASL exchange on SASL listeners, ILLEGAL_SASL_STATE elsewhere.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The client listener's handler; see the module doc.
pub struct ClientApiHandler {
    broker: Arc<Broker>,
    supported: SupportedApis,
}

impl std::fmt::Debug for ClientApiHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientApiHandler")
            .field("supported", &self.supported)
            .finish_non_exhaustive()
    }
}

impl ClientApiHandler {
    /// For `broker`, advertising the parts plugged in now.
    #[must_use]
    pub fn new(broker: Arc<Broker>) -> Self {
        let mut apis: Vec<(ApiKey, i16, i16)> = OWN_APIS.to_vec();
        if broker.forwarder().is_some() {
            apis.extend(Forwarder::forwarded_apis());
        }
        if broker.groups().is_some() {
            apis.extend(GroupCoordinator::apis());
        }
        if broker.txn().is_some() {
            apis.extend(super::txn::TxnCoordinator::apis());
        }
        // A key listed twice (a plug-in claiming one of ours) keeps the first range; ranges
        // are clamped to the codec's so the set is always valid.
        let mut seen = std::collections::BTreeSet::new();
        let apis: Vec<(ApiKey, i16, i16)> = apis
            .into_iter()
            .filter(|(key, _, _)| seen.insert(*key as i16))
            .filter_map(|(key, min, max)| {
                let codec = key.valid_versions();
                let (min, max) = (min.max(codec.min), max.min(codec.max));
                (min <= max).then_some((key, min, max))
            })
            .collect();
        #[allow(clippy::expect_used)]
        let supported = SupportedApis::new(apis)
            .expect("unique keys with ranges inside the codec's are always accepted");
        ClientApiHandler { broker, supported }
    }

    /// The broker behind it.
    #[must_use]
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    fn api_versions(&self, request: &ApiVersionsRequest, version: i16) -> ResponseKind {
        let mut response = self.supported.respond_to(request, version);
        if response.error_code == 0 && version >= 3 {
            let image = self.broker.replica_manager().image();
            let features = &image.features;
            // Kafka's BrokerFeatures: metadata.version from the oldest KRaft version to the
            // latest production one, and the other features up to their production levels.
            let supported = |name: &str, min: i16, max: i16| {
                SupportedFeatureKey::default()
                    .with_name(StrBytes::from_string(name.to_owned()))
                    .with_min_version(min)
                    .with_max_version(max)
            };
            response.supported_features = krust_metadata::features::supported_feature_ranges()
                .into_iter()
                .map(|(name, min, max)| supported(name, min, max))
                .collect();
            if !image.is_empty() {
                let mut finalized = vec![
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str("metadata.version"))
                        .with_min_version_level(features.metadata_version.feature_level())
                        .with_max_version_level(features.metadata_version.feature_level()),
                ];
                for (name, level) in &features.finalized_levels {
                    if *level > 0 {
                        finalized.push(
                            FinalizedFeatureKey::default()
                                .with_name(StrBytes::from_string(name.clone()))
                                .with_min_version_level(*level)
                                .with_max_version_level(*level),
                        );
                    }
                }
                response.finalized_features = finalized;
                response.finalized_features_epoch = image.provenance.last_contained_offset;
            }
        }
        ResponseKind::ApiVersions(response)
    }
}

impl Handler for ClientApiHandler {
    fn supported_apis(&self) -> &SupportedApis {
        &self.supported
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let started = std::time::Instant::now();
        // Kafka's RequestMetrics name: Fetch splits by who fetches.
        let request_name = match &request {
            RequestKind::Fetch(r) => {
                let replica = if ctx.api_version >= 15 {
                    r.replica_state.replica_id.0
                } else {
                    r.replica_id.0
                };
                if replica >= 0 {
                    "FetchFollower".to_owned()
                } else {
                    "FetchConsumer".to_owned()
                }
            }
            _ => format!("{:?}", ctx.api_key),
        };
        let exempt = request_quota_exempt(ctx.api_key, &request_name);
        let quota_ctx = ctx.clone();
        let (mut reply, busy) =
            super::request_time::BusyTime::new(self.dispatch(ctx, request)).await;
        if !exempt {
            self.apply_request_quota(&quota_ctx, &mut reply, busy);
        }
        self.broker
            .client_stats()
            .record_time(&request_name, started.elapsed());
        reply
    }
}

/// Kafka's cluster-action requests answered with `sendResponseExemptThrottle` (follower
/// Fetch, WriteTxnMarkers, AlterPartition and the ZK-era controller requests): never
/// throttled by `request_percentage`.
fn request_quota_exempt(api_key: ApiKey, request_name: &str) -> bool {
    request_name == "FetchFollower"
        || matches!(
            api_key,
            ApiKey::WriteTxnMarkers
                | ApiKey::AlterPartition
                | ApiKey::LeaderAndIsr
                | ApiKey::StopReplica
                | ApiKey::UpdateMetadata
                | ApiKey::ControlledShutdown
        )
}

impl ClientApiHandler {
    /// Kafka's `RequestHandlerHelper.sendResponseMaybeThrottle` / `sendForwardedResponse`
    /// for `request_percentage`: records the time the request's handling ran (`busy`), and
    /// when over the quota raises the response's `throttle_time_ms` to the request throttle
    /// and mutes the connection for it. A forwarded response's own `throttle_time_ms` (the
    /// controller's `controller_mutation_rate` throttle) mutes the connection too. A request
    /// without a response (Produce acks=0) is not throttled by this quota, as in Kafka.
    fn apply_request_quota(
        &self,
        ctx: &RequestContext,
        reply: &mut Reply,
        busy: std::time::Duration,
    ) {
        let Reply::Send(response) = reply else {
            return;
        };
        let now = std::time::Instant::now();
        let quotas = self.broker.quotas();
        let request_ms =
            quotas
                .request
                .record_request_time(&ctx.principal.name, &ctx.client_id, busy, now);
        let forwarded_ms = if Forwarder::forwards(ctx.api_key) {
            krust_net::response_throttle::throttle_time_ms(response).unwrap_or(0)
        } else {
            0
        };
        if request_ms > 0 {
            krust_net::response_throttle::raise_throttle_time_ms(response, request_ms);
            super::quotas::ClientQuotas::throttle(&quotas.request, ctx, request_ms, now);
        }
        if forwarded_ms > request_ms {
            ctx.throttle.throttle(std::time::Duration::from_millis(
                u64::try_from(forwarded_ms).unwrap_or(0),
            ));
        }
    }
}

impl ClientApiHandler {
    /// FindCoordinator as [`ClientApiHandler::dispatch`] routes it, without authorization.
    async fn dispatch_find_coordinator(
        &self,
        ctx: RequestContext,
        r: kafka_protocol::messages::FindCoordinatorRequest,
    ) -> Reply {
        let broker = &self.broker;
        if r.key_type == 1
            && let Some(txn) = broker.txn()
        {
            return super::txn::find_coordinator(txn, &ctx, &r).into();
        }
        match broker.groups() {
            Some(groups) => groups.handle(&ctx, RequestKind::FindCoordinator(r)).await,
            None => Reply::Close,
        }
    }

    async fn dispatch(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let broker = &self.broker;
        let version = ctx.api_version;
        let authz = broker.authz(&ctx);
        if let Some(refused) = authorize::denied(&authz, version, &request) {
            return refused.into();
        }
        match request {
            RequestKind::ApiVersions(r) => self.api_versions(&r, version).into(),
            RequestKind::DescribeAcls(r) => {
                ResponseKind::DescribeAcls(authorize::describe_acls(&authz, &r)).into()
            }
            RequestKind::DescribeClientQuotas(r) => ResponseKind::DescribeClientQuotas(
                describe_security::describe_client_quotas(&broker.replica_manager().image(), &r),
            )
            .into(),
            RequestKind::DescribeUserScramCredentials(r) => {
                ResponseKind::DescribeUserScramCredentials(
                    describe_security::describe_user_scram_credentials(
                        &broker.replica_manager().image(),
                        &r,
                    ),
                )
                .into()
            }
            RequestKind::DescribeTransactions(mut r)
                if authz.enabled()
                    && let Some(txn) = broker.txn() =>
            {
                use kafka_protocol::messages::describe_transactions_response::TransactionState;
                use krust_metadata::authorizer::{AclOperation, resource_type};
                let order = r.transactional_ids.clone();
                r.transactional_ids.retain(|id| {
                    authz.allows(AclOperation::Describe, resource_type::TRANSACTIONAL_ID, id)
                });
                let mut answered = Vec::new();
                if !r.transactional_ids.is_empty() {
                    match txn.handle(&ctx, RequestKind::DescribeTransactions(r)).await {
                        Reply::Send(b) => match *b {
                            ResponseKind::DescribeTransactions(d) => {
                                answered = d.transaction_states;
                            }
                            other => return Reply::Send(Box::new(other)),
                        },
                        other => return other,
                    }
                }
                // Partitions of topics the principal may not describe are left out.
                for state in &mut answered {
                    state.topics.retain(|t| {
                        authz.allows(AclOperation::Describe, resource_type::TOPIC, &t.topic)
                    });
                }
                let states = order
                    .iter()
                    .map(
                        |id| match answered.iter().position(|s| &s.transactional_id == id) {
                            Some(i) => answered.remove(i),
                            None => TransactionState::default()
                                .with_transactional_id(id.clone())
                                .with_error_code(authorize::TIAF),
                        },
                    )
                    .collect();
                ResponseKind::DescribeTransactions(
                    kafka_protocol::messages::DescribeTransactionsResponse::default()
                        .with_transaction_states(states),
                )
                .into()
            }
            RequestKind::ListTransactions(r)
                if authz.enabled()
                    && let Some(txn) = broker.txn() =>
            {
                use krust_metadata::authorizer::{AclOperation, resource_type};
                let answered = txn.handle(&ctx, RequestKind::ListTransactions(r)).await;
                let Reply::Send(response) = answered else {
                    return answered;
                };
                let ResponseKind::ListTransactions(mut response) = *response else {
                    return Reply::Send(response);
                };
                response.transaction_states.retain(|s| {
                    authz.allows(
                        AclOperation::Describe,
                        resource_type::TRANSACTIONAL_ID,
                        &s.transactional_id,
                    )
                });
                ResponseKind::ListTransactions(response).into()
            }
            RequestKind::OffsetDelete(mut r)
                if authz.enabled()
                    && let Some(groups) = broker.groups() =>
            {
                use kafka_protocol::messages::offset_delete_response::{
                    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
                };
                let (denied, allowed) =
                    authorize::split_readable(&authz, std::mem::take(&mut r.topics), |t| &t.name);
                r.topics = allowed;
                let answered = groups.handle(&ctx, RequestKind::OffsetDelete(r)).await;
                let Reply::Send(response) = answered else {
                    return answered;
                };
                let ResponseKind::OffsetDelete(mut response) = *response else {
                    return Reply::Send(response);
                };
                response.topics.extend(denied.iter().map(|t| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(authorize::TAF)
                                })
                                .collect(),
                        )
                }));
                ResponseKind::OffsetDelete(response).into()
            }
            RequestKind::OffsetFetch(r)
                if authz.enabled()
                    && let Some(groups) = broker.groups() =>
            {
                authorize::offset_fetch(&authz, groups, &ctx, r).await
            }
            RequestKind::DescribeGroups(mut r) if let Some(groups) = broker.groups() => {
                let (denied, allowed): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut r.groups).into_iter().partition(|g| {
                        !authz.allows(
                            krust_metadata::authorizer::AclOperation::Describe,
                            krust_metadata::authorizer::resource_type::GROUP,
                            g,
                        )
                    });
                let with_operations = version >= 3 && r.include_authorized_operations;
                r.groups = allowed;
                let mut response = if r.groups.is_empty() {
                    kafka_protocol::messages::DescribeGroupsResponse::default()
                } else {
                    match groups.handle(&ctx, RequestKind::DescribeGroups(r)).await {
                        Reply::Send(b) => match *b {
                            ResponseKind::DescribeGroups(d) => d,
                            other => return Reply::Send(Box::new(other)),
                        },
                        other => return other,
                    }
                };
                if with_operations {
                    for g in &mut response.groups {
                        g.authorized_operations = authz.authorized_operations(
                            krust_metadata::authorizer::resource_type::GROUP,
                            &g.group_id,
                        );
                    }
                }
                response.groups.extend(denied.into_iter().map(|id| {
                    kafka_protocol::messages::describe_groups_response::DescribedGroup::default()
                        .with_group_id(id)
                        .with_error_code(authorize::GAF)
                        .with_authorized_operations(i32::MIN)
                }));
                ResponseKind::DescribeGroups(response).into()
            }
            RequestKind::DeleteGroups(mut r)
                if authz.enabled()
                    && let Some(groups) = broker.groups() =>
            {
                let (denied, allowed): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups_names)
                    .into_iter()
                    .partition(|g| {
                        !authz.allows(
                            krust_metadata::authorizer::AclOperation::Delete,
                            krust_metadata::authorizer::resource_type::GROUP,
                            g,
                        )
                    });
                r.groups_names = allowed;
                let mut response = if r.groups_names.is_empty() {
                    kafka_protocol::messages::DeleteGroupsResponse::default()
                } else {
                    match groups.handle(&ctx, RequestKind::DeleteGroups(r)).await {
                        Reply::Send(b) => match *b {
                            ResponseKind::DeleteGroups(d) => d,
                            other => return Reply::Send(Box::new(other)),
                        },
                        other => return other,
                    }
                };
                response.results.extend(denied.into_iter().map(|id| {
                    kafka_protocol::messages::delete_groups_response::DeletableGroupResult::default(
                    )
                    .with_group_id(id)
                    .with_error_code(authorize::GAF)
                }));
                ResponseKind::DeleteGroups(response).into()
            }
            RequestKind::ListGroups(r)
                if authz.enabled()
                    && !authz.filter_allows_cluster(
                        krust_metadata::authorizer::AclOperation::Describe,
                    )
                    && let Some(groups) = broker.groups() =>
            {
                let answered = groups.handle(&ctx, RequestKind::ListGroups(r)).await;
                let Reply::Send(response) = answered else {
                    return answered;
                };
                let ResponseKind::ListGroups(mut response) = *response else {
                    return Reply::Send(response);
                };
                // A filter: denials are not audited at INFO (Kafka's `logIfDenied = false`).
                response.groups.retain(|g| {
                    authz.filter_allows(
                        krust_metadata::authorizer::AclOperation::Describe,
                        krust_metadata::authorizer::resource_type::GROUP,
                        &g.group_id,
                    )
                });
                ResponseKind::ListGroups(response).into()
            }
            // v4+ with some keys refused: the rest go to the coordinators, the answers keep
            // the request's order.
            RequestKind::FindCoordinator(mut r)
                if version >= 4 && authz.enabled() && matches!(r.key_type, 0 | 1) =>
            {
                let (resource, code) = if r.key_type == 0 {
                    (
                        krust_metadata::authorizer::resource_type::GROUP,
                        authorize::GAF,
                    )
                } else {
                    (
                        krust_metadata::authorizer::resource_type::TRANSACTIONAL_ID,
                        authorize::TIAF,
                    )
                };
                let keys = std::mem::take(&mut r.coordinator_keys);
                let allowed = |k: &StrBytes| {
                    authz.allows(
                        krust_metadata::authorizer::AclOperation::Describe,
                        resource,
                        k,
                    )
                };
                r.coordinator_keys = keys.iter().filter(|k| allowed(k)).cloned().collect();
                let answered = Box::pin(self.dispatch_find_coordinator(ctx, r)).await;
                let Reply::Send(response) = answered else {
                    return answered;
                };
                let ResponseKind::FindCoordinator(mut response) = *response else {
                    return Reply::Send(response);
                };
                let mut found = std::mem::take(&mut response.coordinators);
                response.coordinators = keys
                    .iter()
                    .map(|k| match found.iter().position(|c| &c.key == k) {
                        Some(i) => found.swap_remove(i),
                        None => authorize::refused_coordinator(k, code),
                    })
                    .collect();
                ResponseKind::FindCoordinator(response).into()
            }
            RequestKind::Produce(r) => produce::handle(broker, &ctx, r).await,
            RequestKind::Fetch(r) => fetch::handle(broker, &ctx, r).await,
            RequestKind::ListOffsets(r) => offsets::list_offsets(broker, &ctx, r, version).into(),
            RequestKind::OffsetForLeaderEpoch(r) => {
                offsets::offset_for_leader_epoch(broker, &ctx, r, version).into()
            }
            RequestKind::DeleteRecords(r) => offsets::delete_records(broker, &ctx, r).await.into(),
            RequestKind::Metadata(r) => {
                ResponseKind::Metadata(metadata::handle(broker, &ctx, &r).await).into()
            }
            RequestKind::DescribeCluster(r) => {
                ResponseKind::DescribeCluster(metadata::describe_cluster(broker, &ctx, &r)).into()
            }
            RequestKind::DescribeConfigs(mut r) => {
                let refused = authorize::describe_configs_refusals(&authz, &mut r);
                let mut response = configs::describe_configs(broker, &r, version);
                if let ResponseKind::DescribeConfigs(d) = &mut response {
                    d.results.extend(refused);
                }
                response.into()
            }
            RequestKind::DescribeProducers(mut r) if authz.enabled() => {
                let order: Vec<_> = r.topics.iter().map(|t| t.name.clone()).collect();
                // Kafka checks the name before READ: an illegal one is INVALID_TOPIC_EXCEPTION.
                let (illegal, named): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                    .into_iter()
                    .partition(|t| configs::invalid_topic_message(t.name.0.as_str()).is_some());
                let (denied, mut allowed) = authorize::split_readable(&authz, named, |t| &t.name);
                allowed.extend(illegal);
                r.topics = allowed;
                let ResponseKind::DescribeProducers(mut response) =
                    producers::describe_producers(broker, &r)
                else {
                    return Reply::Close;
                };
                let mut answered = std::mem::take(&mut response.topics);
                response.topics = order
                    .iter()
                    .filter_map(|name| {
                        if let Some(t) = denied.iter().find(|t| &t.name == name) {
                            return Some(authorize::describe_producers_refused(t));
                        }
                        let i = answered.iter().position(|t| &t.name == name)?;
                        Some(answered.remove(i))
                    })
                    .collect();
                ResponseKind::DescribeProducers(response).into()
            }
            RequestKind::DescribeLogDirs(r) => log_dirs::describe_log_dirs(broker, &r).into(),
            RequestKind::InitProducerId(r) => producer_id::handle(broker, &r, version).await.into(),
            RequestKind::DescribeProducers(r) => producers::describe_producers(broker, &r).into(),
            RequestKind::WriteTxnMarkers(r) => {
                ResponseKind::WriteTxnMarkers(write_txn_markers::handle(broker, &r).await).into()
            }
            RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
                describe_topic_partitions::describe_topic_partitions(broker, &ctx, &r),
            )
            .into(),
            // Checked on the broker first (`ConfigAdminManager.preprocess`), then forwarded.
            RequestKind::IncrementalAlterConfigs(r) if let Some(forwarder) = broker.forwarder() => {
                alter_configs::incremental(broker, forwarder, &ctx, r).await
            }
            RequestKind::AlterConfigs(r) if let Some(forwarder) = broker.forwarder() => {
                alter_configs::legacy(broker, forwarder, &ctx, r).await
            }
            RequestKind::CreateTopics(r) if let Some(forwarder) = broker.forwarder() => {
                create_topics::create_topics(broker, forwarder, &ctx, r).await
            }
            RequestKind::AddPartitionsToTxn(r)
                if version < 4
                    && let Some(refused) = authorize::add_partitions_topics(
                        &authz,
                        &broker.replica_manager().image(),
                        &r,
                    ) =>
            {
                ResponseKind::AddPartitionsToTxn(refused).into()
            }
            RequestKind::OffsetCommit(mut r)
                if authz.enabled()
                    && let Some(groups) = broker.groups() =>
            {
                let (denied, allowed) =
                    authorize::split_readable(&authz, std::mem::take(&mut r.topics), |t| &t.name);
                r.topics = allowed;
                let mut response = if r.topics.is_empty() && !denied.is_empty() {
                    kafka_protocol::messages::OffsetCommitResponse::default()
                } else {
                    match groups.handle(&ctx, RequestKind::OffsetCommit(r)).await {
                        Reply::Send(b) => match *b {
                            ResponseKind::OffsetCommit(o) => o,
                            other => return Reply::Send(Box::new(other)),
                        },
                        other => return other,
                    }
                };
                response
                    .topics
                    .extend(offset_commit_errors(&denied, authorize::TAF));
                ResponseKind::OffsetCommit(response).into()
            }
            RequestKind::TxnOffsetCommit(mut r) if let Some(groups) = broker.groups() => {
                let (denied, allowed) =
                    authorize::split_readable(&authz, std::mem::take(&mut r.topics), |t| &t.name);
                r.topics = allowed;
                let denied = txn_offset_commit_errors(&denied, authorize::TAF);
                if r.topics.is_empty() && !denied.is_empty() {
                    return ResponseKind::TxnOffsetCommit(
                        kafka_protocol::messages::TxnOffsetCommitResponse::default()
                            .with_topics(denied),
                    )
                    .into();
                }
                let transactional_id = r.transactional_id.0.to_string();
                let (producer_id, producer_epoch) = (r.producer_id.0, r.producer_epoch);
                let verify = |partition: i32| async move {
                    txn_verification::verify_offsets_partition(
                        broker,
                        &transactional_id,
                        producer_id,
                        producer_epoch,
                        partition,
                        version,
                    )
                    .await
                };
                let mut response = groups.txn_offset_commit(&ctx, r, verify).await;
                response.topics.extend(denied);
                ResponseKind::TxnOffsetCommit(response).into()
            }
            RequestKind::FindCoordinator(r)
                if r.key_type == 1
                    && let Some(txn) = broker.txn() =>
            {
                super::txn::find_coordinator(txn, &ctx, &r).into()
            }
            other => {
                let key = ctx.api_key;
                if let Some(txn) = broker.txn()
                    && super::txn::TxnCoordinator::apis()
                        .iter()
                        .any(|(k, _, _)| *k == key)
                {
                    return txn.handle(&ctx, other).await;
                }
                if let Some(groups) = broker.groups()
                    && GroupCoordinator::apis().iter().any(|(k, _, _)| *k == key)
                {
                    return groups.handle(&ctx, other).await;
                }
                if let Some(forwarder) = broker.forwarder()
                    && Forwarder::forwarded_apis()
                        .iter()
                        .any(|(k, _, _)| *k == key)
                {
                    // Per-topic and per-resource refusals (the controller's checks, made here
                    // too: Kafka's controller makes them on the Envelope's principal).
                    let mut other = other;
                    let refusals = authorize::split_forwarded(
                        &authz,
                        &broker.replica_manager().image(),
                        &mut other,
                    );
                    let reply = forwarder.forward(&ctx, other).await;
                    let Reply::Send(mut response) = reply else {
                        return reply;
                    };
                    refusals.merge(&mut response);
                    return Reply::Send(response);
                }
                // The server only hands us advertised APIs; anything else is a bug upstream.
                warn!(?key, "request for an API this listener does not serve");
                Reply::Close
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_apis_fit_the_codec() {
        assert!(SupportedApis::new(OWN_APIS.iter().copied()).is_ok());
    }
}
