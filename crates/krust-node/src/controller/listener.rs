//! The controller listener (`controller.listener.names`): Kafka 3.9's controller-side
//! ApiVersions, the Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
//! DescribeQuorum), DescribeCluster (KIP-919: what `--bootstrap-controller` admin clients
//! ask first) and, with a controller task attached, the controller APIs (facts §2.1: broker
//! registration and heartbeats, admin requests, AlterPartition, …) including Envelope, in
//! which brokers forward their clients' admin requests, AssignReplicasToDirs (KIP-858) and
//! DescribeConfigs (answered here from the published image and this node's
//! `server.properties`, with the broker's code, as Kafka's `ControllerApis` uses its
//! `ConfigHelper`). Raft requests go to the driver, the controller APIs to the
//! [`ControllerChannel`]; the cores pick every error code.

use std::collections::BTreeMap;

use kafka_protocol::messages::DefaultPrincipalData;
use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
    EnvelopeRequest, EnvelopeResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;

use krust_broker::server::apis::authorize;
use krust_broker::server::apis::configs::{ConfigsView, describe_configs_response};
use krust_broker::server::authz::{Authz, BrokerAuthorizer};
use krust_broker::server::quotas::{
    ClientQuotaManager, ControllerMutationQuota, MutationRefused, QUOTA_WINDOW_NUM_DEFAULT,
    QUOTA_WINDOW_SIZE_SECONDS_DEFAULT, QuotaType,
};
use krust_controller::delegation_tokens::{Principal, TokenContext};
use krust_controller::{
    ControllerRequest, ControllerResponse, PartitionChangeQuota, QuotaExceeded,
};
use krust_metadata::authorizer::{AclOperation, CLUSTER_NAME, resource_type};
use krust_net::codec::{IncomingRequest, decode_request, encode_response};
use krust_net::{Handler, Reply, RequestContext, SupportedApis};
use krust_raft::config::VoterAddress;
use krust_raft::driver::RaftHandle;
use krust_raft::driver::wire_versions::{
    BEGIN_QUORUM_EPOCH_VERSIONS, DESCRIBE_QUORUM_VERSIONS, END_QUORUM_EPOCH_VERSIONS,
    FETCH_SNAPSHOT_VERSIONS, FETCH_VERSIONS, RoutedRequest, VOTE_VERSIONS, fit_response,
    raft_request, response_kind, sender_of,
};
use krust_raft::{RaftRequest, RaftResponse};

use super::ControllerChannel;

use krust_net::error_codes::{
    INVALID_REQUEST, MISMATCHED_ENDPOINT_TYPE, NOT_CONTROLLER, UNSUPPORTED_ENDPOINT_TYPE,
};
/// DescribeCluster `EndpointType` of a controller listener.
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;
/// Length of the size prefix `encode_response` puts before a frame.
const SIZE_PREFIX_BYTES: usize = 4;

/// The controller APIs of Kafka 3.9's controller listener (facts §2.1, `ApiKeys` with the
/// `controller` listener), with its version ranges.
const CONTROLLER_APIS: [(ApiKey, i16, i16); 26] =
    krust_net::api_versions::KAFKA_CONTROLLER_API_VERSIONS;

/// The APIs a controller with a running controller task serves: the Raft ones of
/// [`controller_apis`] plus the controller APIs.
///
/// # Errors
/// Never in practice: the table is fixed and valid.
pub fn controller_apis_with_controller() -> Result<SupportedApis, krust_net::SupportedApisError> {
    let raft = controller_apis()?;
    let mut all: Vec<(ApiKey, i16, i16)> = raft
        .iter()
        .filter(|r| !CONTROLLER_APIS.iter().any(|(k, _, _)| *k == r.api_key))
        .map(|r| (r.api_key, r.min, r.max))
        .collect();
    all.extend(CONTROLLER_APIS);
    SupportedApis::new(all)
}

/// The APIs a krust controller serves, with Kafka 3.9's version ranges (facts §1.1).
///
/// # Errors
/// Never in practice: the table is fixed and valid.
pub fn controller_apis() -> Result<SupportedApis, krust_net::SupportedApisError> {
    SupportedApis::new([
        (ApiKey::Fetch, FETCH_VERSIONS.0, FETCH_VERSIONS.1),
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::Vote, VOTE_VERSIONS.0, VOTE_VERSIONS.1),
        (
            ApiKey::BeginQuorumEpoch,
            BEGIN_QUORUM_EPOCH_VERSIONS.0,
            BEGIN_QUORUM_EPOCH_VERSIONS.1,
        ),
        (
            ApiKey::EndQuorumEpoch,
            END_QUORUM_EPOCH_VERSIONS.0,
            END_QUORUM_EPOCH_VERSIONS.1,
        ),
        (
            ApiKey::DescribeQuorum,
            DESCRIBE_QUORUM_VERSIONS.0,
            DESCRIBE_QUORUM_VERSIONS.1,
        ),
        (ApiKey::DescribeCluster, 0, 1),
        (
            ApiKey::FetchSnapshot,
            FETCH_SNAPSHOT_VERSIONS.0,
            FETCH_SNAPSHOT_VERSIONS.1,
        ),
        // Kafka's controller listener serves SASL (SaslHandshake/SaslAuthenticate list the
        // `controller` listener): krust-net's server runs the exchange on SASL listeners and
        // answers them ILLEGAL_SASL_STATE elsewhere.
        (ApiKey::SaslHandshake, 0, 1),
        (ApiKey::SaslAuthenticate, 0, 2),
    ])
}

/// The controller listener's request handler.
#[derive(Debug)]
pub struct ControllerHandler {
    apis: SupportedApis,
    raft: RaftHandle,
    cluster_id: String,
    /// Controller listener name, as DescribeQuorum v2 reports voter endpoints.
    listener_name: String,
    voters: Vec<VoterAddress>,
    /// The controller task, when this node runs one.
    controller: Option<ControllerChannel>,
    /// `zookeeper.metadata.migration.enable` (ApiVersions' `ZkMigrationReady`).
    zk_migration_ready: bool,
    /// `node.id` and `server.properties` as written, for DescribeConfigs.
    node_config: Option<(i32, BTreeMap<String, String>)>,
    /// Kafka's `StandardAuthorizer` over this node's ACLs, when configured.
    authorizer: Option<Arc<BrokerAuthorizer>>,
    /// `controller_mutation_rate` (Kafka's `ControllerMutationQuotaManager` on the controller),
    /// with the offset of the image its quotas were last taken from.
    mutation_quotas: Arc<ClientQuotaManager>,
    mutation_quotas_offset: std::sync::Mutex<Option<i64>>,
}

/// One request's `controller_mutation_rate` quota, shared between the controller task (which
/// consumes it topic by topic) and the listener (which reads its throttle afterwards).
#[derive(Debug, Clone)]
struct SharedMutationQuota(Arc<std::sync::Mutex<ControllerMutationQuota>>);

impl SharedMutationQuota {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControllerMutationQuota> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PartitionChangeQuota for SharedMutationQuota {
    fn apply(&mut self, partitions: usize) -> Result<(), QuotaExceeded> {
        self.lock()
            .record(partitions, std::time::Instant::now())
            .map_err(|MutationRefused| QuotaExceeded)
    }
}

/// Kafka's `ControllerApis`: the versions from which CreateTopics (6), CreatePartitions (3) and
/// DeleteTopics (5) get a strict `controller_mutation_rate` quota; `None` for other APIs.
fn strict_mutation_quota_since(request: &RequestKind) -> Option<i16> {
    match request {
        RequestKind::CreateTopics(_) => Some(6),
        RequestKind::CreatePartitions(_) => Some(3),
        RequestKind::DeleteTopics(_) => Some(5),
        _ => None,
    }
}

impl ControllerHandler {
    /// A handler answering for `raft` in cluster `cluster_id`.
    #[must_use]
    pub fn new(
        apis: SupportedApis,
        raft: RaftHandle,
        cluster_id: String,
        listener_name: String,
        voters: Vec<VoterAddress>,
    ) -> Self {
        Self {
            apis,
            raft,
            cluster_id,
            listener_name,
            voters,
            controller: None,
            zk_migration_ready: false,
            node_config: None,
            authorizer: None,
            // `controller.quota.window.num` × `controller.quota.window.size.seconds` at
            // their defaults (11 × 1 s).
            mutation_quotas: Arc::new(ClientQuotaManager::new(
                QuotaType::ControllerMutation,
                krust_metrics::SampleConfig::new(
                    std::time::Duration::from_secs(QUOTA_WINDOW_SIZE_SECONDS_DEFAULT),
                    QUOTA_WINDOW_NUM_DEFAULT,
                ),
            )),
            mutation_quotas_offset: std::sync::Mutex::new(None),
        }
    }

    /// The `controller_mutation_rate` quota manager (a `/metrics` source).
    #[must_use]
    pub fn mutation_quotas(&self) -> Arc<ClientQuotaManager> {
        Arc::clone(&self.mutation_quotas)
    }

    /// The quota of `user` / `client_id` for a CreateTopics, CreatePartitions or DeleteTopics
    /// request at `version` (Kafka's `ControllerMutationQuotaManager.newQuotaFor`), the quotas
    /// taken from the last published image; `None` for other APIs or while no
    /// `controller_mutation_rate` was ever configured (Kafka's unbounded quota).
    fn mutation_quota(
        &self,
        request: &RequestKind,
        user: &str,
        client_id: &str,
        version: i16,
    ) -> Option<SharedMutationQuota> {
        let strict_since = strict_mutation_quota_since(request)?;
        if let Some(image) = self
            .controller
            .as_ref()
            .and_then(ControllerChannel::published_image)
        {
            let offset = image.provenance.last_contained_offset;
            let mut last = self
                .mutation_quotas_offset
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if *last != Some(offset) {
                self.mutation_quotas.update(&image);
                *last = Some(offset);
            }
        }
        if !self.mutation_quotas.quotas_enabled() {
            return None;
        }
        Some(SharedMutationQuota(Arc::new(std::sync::Mutex::new(
            ControllerMutationQuota::for_version(
                Arc::clone(&self.mutation_quotas),
                user,
                client_id,
                version,
                strict_since,
            ),
        ))))
    }

    /// Kafka's `sendResponseMaybeThrottleWithControllerQuota`: the quota's throttle goes in
    /// the response's `throttle_time_ms`, is recorded in `throttle-time`, and — for a request
    /// sent straight to this listener, not forwarded — mutes the connection.
    fn apply_mutation_throttle(
        &self,
        quota: Option<&SharedMutationQuota>,
        response: &mut ResponseKind,
        user: &str,
        client_id: &str,
        mute: Option<&krust_net::ConnectionThrottle>,
    ) {
        let Some(quota) = quota else {
            return;
        };
        let now = std::time::Instant::now();
        let throttle_ms = quota.lock().throttle_time_ms(now);
        if throttle_ms <= 0 {
            return;
        }
        krust_net::response_throttle::raise_throttle_time_ms(response, throttle_ms);
        self.mutation_quotas
            .record_throttle(user, client_id, throttle_ms, now);
        if let Some(throttle) = mute {
            throttle.throttle(std::time::Duration::from_millis(
                u64::try_from(throttle_ms).unwrap_or(0),
            ));
        }
    }

    /// Authorizes requests as Kafka's `ControllerApis` does (the envelope's sender needs
    /// CLUSTER_ACTION; a forwarded request is authorized as the client's principal), against
    /// `authorizer`, which the node's [`AclPublisher`] keeps current.
    ///
    /// [`AclPublisher`]: krust_broker::server::authz::AclPublisher
    #[must_use]
    pub fn with_authorizer(mut self, authorizer: Arc<BrokerAuthorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// The authorization of a `request` from `principal_type:name` at `host`.
    fn authz(
        &self,
        principal_type: &str,
        name: &str,
        host: std::net::IpAddr,
        request: ApiKey,
    ) -> Authz {
        Authz::with(
            self.authorizer.as_deref(),
            principal_type,
            name,
            host,
            request,
        )
    }

    /// Answers DescribeConfigs for node `node_id` configured with `properties`
    /// (`server.properties` as written, Kafka's `originals`); needs [`Self::with_controller`].
    #[must_use]
    pub fn with_node_config(mut self, node_id: i32, properties: BTreeMap<String, String>) -> Self {
        self.node_config = Some((node_id, properties));
        self
    }

    /// Kafka's `ControllerApis.handleDescribeConfigsRequest`: the broker's `ConfigHelper`
    /// over this node's config and its metadata cache (the last published image).
    fn describe_configs(
        &self,
        request: &kafka_protocol::messages::DescribeConfigsRequest,
        version: i16,
    ) -> Option<ResponseKind> {
        let (node_id, properties) = self.node_config.as_ref()?;
        let image = self
            .controller
            .as_ref()?
            .published_image()
            .unwrap_or_else(krust_metadata::MetadataImage::empty);
        let view = ConfigsView {
            image: &image,
            node_id: *node_id,
            properties,
        };
        Some(ResponseKind::DescribeConfigs(describe_configs_response(
            &view, request, version,
        )))
    }

    /// Answers ApiVersions with `ZkMigrationReady` set, as a controller with
    /// `zookeeper.metadata.migration.enable` does.
    #[must_use]
    pub fn with_zk_migration_ready(mut self, ready: bool) -> Self {
        self.zk_migration_ready = ready;
        self
    }

    /// Serves the controller APIs through `controller` (the table passed to [`Self::new`]
    /// should be [`controller_apis_with_controller`]).
    #[must_use]
    pub fn with_controller(mut self, controller: ControllerChannel) -> Self {
        self.controller = Some(controller);
        self
    }

    /// ApiVersions v3+ tagged fields of a controller (Kafka 3.9 `ControllerApis`): the
    /// features this node supports (`QuorumFeatures.defaultSupportedFeatureMap` without
    /// unstable versions) and the committed finalized levels with their epoch.
    fn add_features(&self, response: &mut ApiVersionsResponse) {
        let Some(controller) = &self.controller else {
            return;
        };
        response.zk_migration_ready = self.zk_migration_ready;
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
        if let Some(finalized) = controller.finalized_features() {
            response.finalized_features_epoch = finalized.epoch;
            response.finalized_features = finalized
                .levels
                .into_iter()
                .map(|(name, level)| {
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_string(name))
                        .with_min_version_level(level)
                        .with_max_version_level(level)
                })
                .collect();
        }
    }

    /// Runs a controller API request; `None` when the controller task has stopped.
    async fn call_controller(
        &self,
        request: ControllerRequest,
        quota: Option<&SharedMutationQuota>,
    ) -> Option<ResponseKind> {
        let quota = quota.map(|q| Box::new(q.clone()) as Box<dyn PartitionChangeQuota>);
        let response = self
            .controller
            .as_ref()?
            .call_with_quota(request, quota)
            .await?;
        Some(match response {
            ControllerResponse::BrokerRegistration(r) => ResponseKind::BrokerRegistration(r),
            ControllerResponse::BrokerHeartbeat(r) => ResponseKind::BrokerHeartbeat(r),
            ControllerResponse::UnregisterBroker(r) => ResponseKind::UnregisterBroker(r),
            ControllerResponse::ControllerRegistration(r) => {
                ResponseKind::ControllerRegistration(r)
            }
            ControllerResponse::CreateTopics(r) => ResponseKind::CreateTopics(r),
            ControllerResponse::DeleteTopics(r) => ResponseKind::DeleteTopics(r),
            ControllerResponse::AlterPartition(r) => ResponseKind::AlterPartition(r),
            ControllerResponse::AssignReplicasToDirs(r) => ResponseKind::AssignReplicasToDirs(r),
            ControllerResponse::CreatePartitions(r) => ResponseKind::CreatePartitions(r),
            ControllerResponse::ElectLeaders(r) => ResponseKind::ElectLeaders(r),
            ControllerResponse::IncrementalAlterConfigs(r) => {
                ResponseKind::IncrementalAlterConfigs(r)
            }
            ControllerResponse::AllocateProducerIds(r) => ResponseKind::AllocateProducerIds(r),
            ControllerResponse::UpdateFeatures(r) => ResponseKind::UpdateFeatures(r),
            ControllerResponse::AlterConfigs(r) => ResponseKind::AlterConfigs(r),
            ControllerResponse::CreateAcls(r) => ResponseKind::CreateAcls(r),
            ControllerResponse::DeleteAcls(r) => ResponseKind::DeleteAcls(r),
            ControllerResponse::AlterClientQuotas(r) => ResponseKind::AlterClientQuotas(r),
            ControllerResponse::AlterUserScramCredentials(r) => {
                ResponseKind::AlterUserScramCredentials(r)
            }
            ControllerResponse::CreateDelegationToken(r) => ResponseKind::CreateDelegationToken(*r),
            ControllerResponse::RenewDelegationToken(r) => ResponseKind::RenewDelegationToken(r),
            ControllerResponse::ExpireDelegationToken(r) => ResponseKind::ExpireDelegationToken(r),
            ControllerResponse::AlterPartitionReassignments(r) => {
                ResponseKind::AlterPartitionReassignments(r)
            }
            ControllerResponse::ListPartitionReassignments(r) => {
                ResponseKind::ListPartitionReassignments(r)
            }
            // Only the migration driver on this node asks for these; never over the wire.
            ControllerResponse::MigrationRecords(_) => return None,
        })
    }

    /// Kafka's `ControllerApis.handleEnvelopeRequest`: decode the forwarded request (header
    /// and body as the client sent them), run it if it is a forwardable controller API, and
    /// return its response (header and body) inside the envelope.
    async fn envelope(&self, request: EnvelopeRequest) -> ResponseKind {
        let refuse =
            |code: i16| ResponseKind::Envelope(EnvelopeResponse::default().with_error_code(code));
        let (header, body) = match decode_request(request.request_data, &self.apis) {
            Ok(IncomingRequest::Request { header, body }) => (header, body),
            Ok(IncomingRequest::UnsupportedApiVersions { .. }) | Err(_) => {
                return refuse(INVALID_REQUEST);
            }
        };
        let caller = Caller::forwarded(request.request_principal.as_ref());
        let client_host = client_address(&request.client_host_address);
        let authz = self.authz(
            &caller.principal.principal_type,
            &caller.principal.name,
            client_host,
            header.api_key,
        );
        let mut body = *body;
        if let Some(refused) = controller_denied(&authz, header.api_version, &body) {
            return self.wrap(&header, &refused);
        }
        let refusals = self.split(&authz, &mut body);
        let response = if let RequestKind::DescribeQuorum(r) = body {
            // Forwarded by a broker (Kafka 3.9 brokers forward DescribeQuorum): the replica
            // answers it, as it does on this listener.
            let Some(response) = self
                .raft_answer(RaftRequest::DescribeQuorum(r), header.api_version)
                .await
            else {
                return refuse(NOT_CONTROLLER);
            };
            response
        } else {
            let client_id = header.client_id.clone();
            let quota = self.mutation_quota(
                &body,
                &caller.principal.name,
                &client_id,
                header.api_version,
            );
            let Some(inner) = forwardable(body, header.api_version, &caller) else {
                return refuse(INVALID_REQUEST);
            };
            let Some(mut response) = self.call_controller(inner, quota.as_ref()).await else {
                return refuse(NOT_CONTROLLER);
            };
            // Forwarded: the throttle goes back in the response, the broker mutes its client.
            self.apply_mutation_throttle(
                quota.as_ref(),
                &mut response,
                &caller.principal.name,
                &client_id,
                None,
            );
            response
        };
        if super::envelope::redirects_forwarder(&response) {
            // Kafka: the forwarding broker must look for the active controller and resend.
            return refuse(NOT_CONTROLLER);
        }
        let mut response = response;
        refusals.merge(&mut response);
        self.wrap(&header, &response)
    }

    /// The inner `response` to the request of `header`, in an `EnvelopeResponse`.
    fn wrap(
        &self,
        header: &krust_net::codec::DecodedHeader,
        response: &ResponseKind,
    ) -> ResponseKind {
        match encode_response(
            header.correlation_id,
            header.api_key,
            header.api_version,
            response,
        ) {
            Ok(frame) if frame.len() >= SIZE_PREFIX_BYTES => ResponseKind::Envelope(
                EnvelopeResponse::default()
                    .with_response_data(Some(frame.slice(SIZE_PREFIX_BYTES..))),
            ),
            _ => {
                ResponseKind::Envelope(EnvelopeResponse::default().with_error_code(INVALID_REQUEST))
            }
        }
    }

    fn describe_cluster(
        &self,
        request: &DescribeClusterRequest,
        version: i16,
        authz: &Authz,
    ) -> ResponseKind {
        let mut response = DescribeClusterResponse::default();
        if version >= 1 {
            response.endpoint_type = ENDPOINT_TYPE_CONTROLLER;
        }
        // Kafka's `AuthHelper.computeDescribeClusterResponse`: v0 (which means "broker")
        // gets INVALID_REQUEST where v1 gets the endpoint type's own error.
        let refused = |v1_code: i16| {
            if version == 0 {
                INVALID_REQUEST
            } else {
                v1_code
            }
        };
        let wanted = request.endpoint_type;
        if wanted != 1 && wanted != ENDPOINT_TYPE_CONTROLLER {
            response.error_code = refused(UNSUPPORTED_ENDPOINT_TYPE);
            response.error_message = Some(StrBytes::from_string(format!(
                "Unsupported endpoint type {wanted}"
            )));
            return ResponseKind::DescribeCluster(response);
        }
        if wanted != ENDPOINT_TYPE_CONTROLLER {
            response.error_code = refused(MISMATCHED_ENDPOINT_TYPE);
            response.error_message = Some(StrBytes::from_static_str(
                "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER",
            ));
            return ResponseKind::DescribeCluster(response);
        }
        if request.include_cluster_authorized_operations {
            response.cluster_authorized_operations = if authz.allows_cluster(AclOperation::Describe)
            {
                authz.authorized_operations(resource_type::CLUSTER, CLUSTER_NAME)
            } else {
                0
            };
        }
        let leader = self.raft.status().metrics.current_leader;
        response.cluster_id = StrBytes::from_string(self.cluster_id.clone());
        response.controller_id = BrokerId(leader);
        response.brokers = self
            .voters
            .iter()
            .map(|v| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(v.id.0))
                    .with_host(StrBytes::from_string(v.host.clone()))
                    .with_port(i32::from(v.port))
            })
            .collect();
        ResponseKind::DescribeCluster(response)
    }

    fn voter_nodes(&self) -> Vec<Node> {
        self.voters
            .iter()
            .map(|v| {
                Node::default()
                    .with_node_id(BrokerId(v.id.0))
                    .with_listeners(vec![
                        Listener::default()
                            .with_name(StrBytes::from_string(self.listener_name.clone()))
                            .with_host(StrBytes::from_string(v.host.clone()))
                            .with_port(v.port),
                    ])
            })
            .collect()
    }
}

/// Who sent a controller API request, for the APIs that depend on it (delegation tokens).
#[derive(Debug, Clone)]
struct Caller {
    principal: Principal,
    token_authenticated: bool,
    forwarded: bool,
}

impl Caller {
    /// A request straight to this (PLAINTEXT) listener: `User:ANONYMOUS`.
    fn direct() -> Self {
        Self {
            principal: Principal::anonymous(),
            token_authenticated: false,
            forwarded: false,
        }
    }

    /// A request in an Envelope: the client's principal as the broker serialized it (a
    /// version-prefixed `DefaultPrincipalData`); `User:ANONYMOUS` if it cannot be read.
    fn forwarded(principal: Option<&bytes::Bytes>) -> Self {
        let decoded = principal.and_then(|bytes| {
            let mut buf = bytes.clone();
            if buf.len() < 2 {
                return None;
            }
            let version = i16::from_be_bytes([buf[0], buf[1]]);
            let _ = buf.split_to(2);
            DefaultPrincipalData::decode(&mut buf, version).ok()
        });
        match decoded {
            Some(data) => Self {
                principal: Principal {
                    principal_type: data._type.to_string(),
                    name: data.name.to_string(),
                },
                token_authenticated: data.token_authenticated,
                forwarded: true,
            },
            None => Self {
                forwarded: true,
                ..Self::direct()
            },
        }
    }

    /// The token APIs' context, stamped with this node's wall clock.
    fn token_context(&self, api_version: i16) -> TokenContext {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        TokenContext {
            principal: self.principal.clone(),
            token_authenticated: self.token_authenticated,
            forwarded: self.forwarded,
            now_ms,
            api_version,
        }
    }
}

/// A forwardable controller API (Kafka 3.9 `ApiKeys` forwardable flag) as a controller
/// request; `None` for anything else.
fn forwardable(request: RequestKind, version: i16, caller: &Caller) -> Option<ControllerRequest> {
    Some(match request {
        RequestKind::CreateTopics(r) => ControllerRequest::CreateTopics(r),
        RequestKind::DeleteTopics(r) => ControllerRequest::DeleteTopics(r),
        RequestKind::CreatePartitions(r) => ControllerRequest::CreatePartitions(r),
        RequestKind::ElectLeaders(r) => ControllerRequest::ElectLeaders(r),
        RequestKind::AlterPartitionReassignments(r) => {
            ControllerRequest::AlterPartitionReassignments(r)
        }
        RequestKind::ListPartitionReassignments(r) => {
            ControllerRequest::ListPartitionReassignments(r)
        }
        RequestKind::IncrementalAlterConfigs(r) => ControllerRequest::IncrementalAlterConfigs(r),
        RequestKind::AlterConfigs(r) => ControllerRequest::AlterConfigs(r),
        RequestKind::UpdateFeatures(r) => ControllerRequest::UpdateFeatures {
            request: r,
            version,
        },
        RequestKind::UnregisterBroker(r) => ControllerRequest::UnregisterBroker(r),
        RequestKind::AllocateProducerIds(r) => ControllerRequest::AllocateProducerIds(r),
        RequestKind::CreateAcls(r) => ControllerRequest::CreateAcls(r),
        RequestKind::DeleteAcls(r) => ControllerRequest::DeleteAcls(r),
        RequestKind::AlterClientQuotas(r) => ControllerRequest::AlterClientQuotas(r),
        RequestKind::AlterUserScramCredentials(r) => {
            ControllerRequest::AlterUserScramCredentials(r)
        }
        RequestKind::CreateDelegationToken(request) => ControllerRequest::CreateDelegationToken {
            request,
            context: caller.token_context(version),
        },
        RequestKind::RenewDelegationToken(request) => ControllerRequest::RenewDelegationToken {
            request,
            context: caller.token_context(version),
        },
        RequestKind::ExpireDelegationToken(request) => ControllerRequest::ExpireDelegationToken {
            request,
            context: caller.token_context(version),
        },
        _ => return None,
    })
}

/// Any controller API request (the broker-only ones and the forwardable ones sent directly,
/// e.g. by `--bootstrap-controller` admin clients); `None` for anything else.
fn controller_request(request: RequestKind, version: i16) -> Option<ControllerRequest> {
    Some(match request {
        RequestKind::BrokerRegistration(r) => ControllerRequest::BrokerRegistration(r),
        RequestKind::BrokerHeartbeat(r) => ControllerRequest::BrokerHeartbeat(r),
        RequestKind::ControllerRegistration(r) => ControllerRequest::ControllerRegistration(r),
        RequestKind::AlterPartition(r) => ControllerRequest::AlterPartition(r),
        RequestKind::AssignReplicasToDirs(r) => ControllerRequest::AssignReplicasToDirs(r),
        other => return forwardable(other, version, &Caller::direct()),
    })
}

impl Handler for ControllerHandler {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let version = ctx.api_version;
        let authz = self.authz(
            &ctx.principal.principal_type,
            &ctx.principal.name,
            ctx.peer_addr.ip(),
            ctx.api_key,
        );
        let raft_request = match request {
            RequestKind::ApiVersions(r) => {
                let mut response = self.apis.respond_to(&r, version);
                if version >= 3 && response.error_code == 0 {
                    self.add_features(&mut response);
                }
                return ResponseKind::ApiVersions(response).into();
            }
            RequestKind::DescribeCluster(r) => {
                // Kafka's `ControllerApis.handleDescribeCluster`: unlike on a broker, ALTER on
                // the cluster, checked before the endpoint type.
                if authz.enabled() && !authz.allows_cluster(AclOperation::Alter) {
                    return ResponseKind::DescribeCluster(
                        DescribeClusterResponse::default()
                            .with_error_code(authorize::CAF)
                            .with_error_message(Some(StrBytes::from_string(not_authorized(
                                &ctx,
                                "DescribeCluster",
                            )))),
                    )
                    .into();
                }
                return self.describe_cluster(&r, version, &authz).into();
            }
            RequestKind::DescribeConfigs(mut r) => {
                let refused = authorize::describe_configs_refusals(&authz, &mut r);
                return match self.describe_configs(&r, version) {
                    Some(ResponseKind::DescribeConfigs(mut response)) => {
                        response.results.extend(refused);
                        ResponseKind::DescribeConfigs(response).into()
                    }
                    Some(response) => response.into(),
                    // Not served without a controller task (not in `supported_apis` then).
                    None => Reply::Close,
                };
            }
            RequestKind::Envelope(r) if self.controller.is_some() => {
                // Kafka: only a principal with CLUSTER_ACTION (a broker) may forward.
                if !authz.allows_cluster(AclOperation::ClusterAction) {
                    return ResponseKind::Envelope(
                        EnvelopeResponse::default().with_error_code(authorize::CAF),
                    )
                    .into();
                }
                return self.envelope(r).await.into();
            }
            other => {
                if let Some(refused) = raft_denied(&authz, version, &other) {
                    return refused.into();
                }
                match raft_request(other) {
                    RoutedRequest::Raft(raft_request) => raft_request,
                    RoutedRequest::Other(other) => {
                        return self
                            .handle_controller_api(other, version, &authz, &ctx)
                            .await;
                    }
                }
            }
        };
        match self.raft_answer(raft_request, version).await {
            Some(response) => response.into(),
            // The replica is stopping: nothing can answer.
            None => Reply::Close,
        }
    }
}

impl ControllerHandler {
    /// A Raft RPC answered by this node's replica at `version`; `None` when it is stopping.
    async fn raft_answer(&self, raft_request: RaftRequest, version: i16) -> Option<ResponseKind> {
        let from = sender_of(&raft_request);
        let mut response = self.raft.handle_request(from, raft_request).await?;
        if version >= 2
            && let RaftResponse::DescribeQuorum(r) = &mut response
            && r.error_code == 0
        {
            r.nodes = self.voter_nodes();
        }
        fit_response(&mut response, version);
        Some(response_kind(response))
    }
}

impl ControllerHandler {
    /// A controller API. Anything else is not in `supported_apis`, so the server never hands it
    /// over; and without a controller task none of them is served.
    async fn handle_controller_api(
        &self,
        mut request: RequestKind,
        version: i16,
        authz: &Authz,
        ctx: &RequestContext,
    ) -> Reply {
        if self.controller.is_none() {
            return Reply::Close;
        }
        if let Some(refused) = controller_denied(authz, version, &request) {
            return refused.into();
        }
        let refusals = self.split(authz, &mut request);
        let quota = self.mutation_quota(&request, &ctx.principal.name, &ctx.client_id, version);
        let Some(request) = controller_request(request, version) else {
            return Reply::Close;
        };
        match self.call_controller(request, quota.as_ref()).await {
            Some(mut response) => {
                self.apply_mutation_throttle(
                    quota.as_ref(),
                    &mut response,
                    &ctx.principal.name,
                    &ctx.client_id,
                    Some(&ctx.throttle),
                );
                refusals.merge(&mut response);
                response.into()
            }
            // The controller task stopped: the process is going down.
            None => Reply::Close,
        }
    }

    /// The per-topic and per-resource refusals of an admin request (Kafka's `ControllerApis`),
    /// over the last published image.
    fn split(&self, authz: &Authz, request: &mut RequestKind) -> authorize::Refusals {
        if !authz.enabled() {
            return authorize::Refusals::None;
        }
        let image = self
            .controller
            .as_ref()
            .and_then(ControllerChannel::published_image)
            .unwrap_or_else(krust_metadata::MetadataImage::empty);
        authorize::split_forwarded(authz, &image, request)
    }
}

/// The client's address an Envelope carries (4 or 16 bytes); unspecified if malformed.
fn client_address(bytes: &[u8]) -> std::net::IpAddr {
    match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).unwrap_or([0; 4])),
        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).unwrap_or([0; 16])),
        _ => std::net::IpAddr::from([0u8; 4]),
    }
}

/// Kafka's `ControllerApis` checks of the Raft RPCs: CLUSTER_ACTION on the cluster for Vote,
/// BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot (voters and observers are
/// brokers and controllers, normally super users), DESCRIBE for DescribeQuorum; refused with
/// the request's top-level error response (`getErrorResponse`: a Fetch below v13 also carries
/// the error in every partition). `None`: go on.
fn raft_denied(authz: &Authz, version: i16, request: &RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages::{
        BeginQuorumEpochResponse, DescribeQuorumResponse, EndQuorumEpochResponse, FetchResponse,
        FetchSnapshotResponse, VoteResponse, fetch_response,
    };
    if !authz.enabled() {
        return None;
    }
    let caf = authorize::CAF;
    let action = || !authz.allows_cluster(AclOperation::ClusterAction);
    Some(match request {
        RequestKind::Vote(_) if action() => {
            ResponseKind::Vote(VoteResponse::default().with_error_code(caf))
        }
        RequestKind::BeginQuorumEpoch(_) if action() => {
            ResponseKind::BeginQuorumEpoch(BeginQuorumEpochResponse::default().with_error_code(caf))
        }
        RequestKind::EndQuorumEpoch(_) if action() => {
            ResponseKind::EndQuorumEpoch(EndQuorumEpochResponse::default().with_error_code(caf))
        }
        RequestKind::FetchSnapshot(_) if action() => {
            ResponseKind::FetchSnapshot(FetchSnapshotResponse::default().with_error_code(caf))
        }
        RequestKind::Fetch(r) if action() => {
            let responses = if version < 13 {
                r.topics
                    .iter()
                    .map(|t| {
                        fetch_response::FetchableTopicResponse::default()
                            .with_topic(t.topic.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        fetch_response::PartitionData::default()
                                            .with_partition_index(p.partition)
                                            .with_error_code(caf)
                                            .with_high_watermark(-1)
                                            .with_last_stable_offset(-1)
                                            .with_log_start_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect()
            } else {
                Vec::new()
            };
            ResponseKind::Fetch(
                FetchResponse::default()
                    .with_error_code(caf)
                    .with_session_id(r.session_id)
                    .with_responses(responses),
            )
        }
        RequestKind::DescribeQuorum(_) if !authz.allows_cluster(AclOperation::Describe) => {
            let mut response = DescribeQuorumResponse::default().with_error_code(caf);
            if version >= 2 {
                response.error_message = Some(StrBytes::from_static_str(authorize::message(caf)));
            }
            ResponseKind::DescribeQuorum(response)
        }
        _ => return None,
    })
}

/// Kafka's `AuthHelper.authorizeClusterOperation` message, "Request <request> is not
/// authorized.", where Kafka prints its `RequestChannel.Request` (processor, connection id,
/// buffer): here the API, the principal, the client's address and the listener.
fn not_authorized(ctx: &RequestContext, api: &str) -> String {
    format!(
        "Request {api}(session=Session({},/{}), listenerName=ListenerName({})) is not authorized.",
        ctx.principal,
        krust_broker::server::authz::java_host_address(ctx.peer_addr.ip()),
        ctx.listener_name,
    )
}

/// Kafka's `ControllerApis` whole-request checks: CLUSTER_ACTION for the brokers' and
/// controllers' own APIs, ALTER for UnregisterBroker, and the admin APIs' checks the broker
/// makes too ([`authorize::denied`]). `None`: go on.
fn controller_denied(authz: &Authz, version: i16, request: &RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages::{
        AllocateProducerIdsResponse, AlterPartitionResponse, AssignReplicasToDirsResponse,
        BrokerHeartbeatResponse, BrokerRegistrationResponse, ControllerRegistrationResponse,
        UnregisterBrokerResponse,
    };
    if !authz.enabled() {
        return None;
    }
    let caf = authorize::CAF;
    let action = || !authz.allows_cluster(AclOperation::ClusterAction);
    Some(match request {
        RequestKind::BrokerRegistration(_) if action() => ResponseKind::BrokerRegistration(
            BrokerRegistrationResponse::default().with_error_code(caf),
        ),
        RequestKind::BrokerHeartbeat(_) if action() => {
            ResponseKind::BrokerHeartbeat(BrokerHeartbeatResponse::default().with_error_code(caf))
        }
        RequestKind::AlterPartition(_) if action() => {
            ResponseKind::AlterPartition(AlterPartitionResponse::default().with_error_code(caf))
        }
        RequestKind::AllocateProducerIds(_) if action() => ResponseKind::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(caf),
        ),
        RequestKind::ControllerRegistration(_) if action() => ResponseKind::ControllerRegistration(
            ControllerRegistrationResponse::default()
                .with_error_code(caf)
                .with_error_message(Some(StrBytes::from_static_str(authorize::message(caf)))),
        ),
        RequestKind::AssignReplicasToDirs(_) if action() => ResponseKind::AssignReplicasToDirs(
            AssignReplicasToDirsResponse::default().with_error_code(caf),
        ),
        RequestKind::UnregisterBroker(_) if !authz.allows_cluster(AclOperation::Alter) => {
            ResponseKind::UnregisterBroker(
                UnregisterBrokerResponse::default()
                    .with_error_code(caf)
                    .with_error_message(Some(StrBytes::from_static_str(authorize::message(caf)))),
            )
        }
        other => return authorize::denied(authz, version, other),
    })
}
