//! The controller listener (`controller.listener.names`): Kafka 3.9's controller-side
//! ApiVersions, the Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
//! DescribeQuorum) and DescribeCluster (KIP-919: what `--bootstrap-controller` admin clients
//! ask first). Raft requests go to the driver; the core picks every error code.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Handler, Reply, RequestContext, SupportedApis};
use krust_raft::config::VoterAddress;
use krust_raft::driver::RaftHandle;
use krust_raft::driver::wire_versions::{
    BEGIN_QUORUM_EPOCH_VERSIONS, DESCRIBE_QUORUM_VERSIONS, END_QUORUM_EPOCH_VERSIONS,
    FETCH_SNAPSHOT_VERSIONS, FETCH_VERSIONS, VOTE_VERSIONS, fit_response,
};
use krust_raft::{NodeId, RaftRequest, RaftResponse};

/// Kafka's `MISMATCHED_ENDPOINT_TYPE` (114); `kafka-protocol` 0.15 has no name for it.
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
/// DescribeCluster `EndpointType` of a controller listener.
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

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
        }
    }

    fn describe_cluster(&self, request: &DescribeClusterRequest, version: i16) -> ResponseKind {
        let mut response = DescribeClusterResponse::default();
        if version >= 1 {
            response.endpoint_type = ENDPOINT_TYPE_CONTROLLER;
        }
        // v0 cannot say which endpoint type it wants: it means "broker".
        let wanted = if version >= 1 {
            request.endpoint_type
        } else {
            1
        };
        if wanted != ENDPOINT_TYPE_CONTROLLER {
            response.error_code = MISMATCHED_ENDPOINT_TYPE;
            response.error_message = Some(StrBytes::from_static_str(
                "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER",
            ));
            return ResponseKind::DescribeCluster(response);
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

/// The replica a Raft request names as its sender (candidate, leader or fetcher); -1 if none.
fn sender_of(request: &RaftRequest) -> NodeId {
    let id = match request {
        RaftRequest::Vote(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.candidate_id.0),
        RaftRequest::BeginQuorumEpoch(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.leader_id.0),
        RaftRequest::EndQuorumEpoch(r) => r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.leader_id.0),
        RaftRequest::Fetch(r) => Some(if r.replica_state.replica_id.0 >= 0 {
            r.replica_state.replica_id.0
        } else {
            r.replica_id.0
        }),
        RaftRequest::FetchSnapshot(r) => Some(r.replica_id.0),
        RaftRequest::DescribeQuorum(_) => None,
    };
    NodeId(id.unwrap_or(-1))
}

impl Handler for ControllerHandler {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let version = ctx.api_version;
        let raft_request = match request {
            RequestKind::ApiVersions(r) => {
                return ResponseKind::ApiVersions(self.apis.respond_to(&r, version)).into();
            }
            RequestKind::DescribeCluster(r) => return self.describe_cluster(&r, version).into(),
            RequestKind::Vote(r) => RaftRequest::Vote(r),
            RequestKind::BeginQuorumEpoch(r) => RaftRequest::BeginQuorumEpoch(r),
            RequestKind::EndQuorumEpoch(r) => RaftRequest::EndQuorumEpoch(r),
            RequestKind::Fetch(r) => RaftRequest::Fetch(r),
            RequestKind::FetchSnapshot(r) => RaftRequest::FetchSnapshot(r),
            RequestKind::DescribeQuorum(r) => RaftRequest::DescribeQuorum(r),
            // Not in `supported_apis`: the server never hands these over.
            _ => return Reply::Close,
        };
        let from = sender_of(&raft_request);
        let Some(mut response) = self.raft.handle_request(from, raft_request).await else {
            // The replica is stopping: nothing can answer.
            return Reply::Close;
        };
        if version >= 2
            && let RaftResponse::DescribeQuorum(r) = &mut response
            && r.error_code == 0
        {
            r.nodes = self.voter_nodes();
        }
        fit_response(&mut response, version);
        let kind = match response {
            RaftResponse::Vote(r) => ResponseKind::Vote(r),
            RaftResponse::BeginQuorumEpoch(r) => ResponseKind::BeginQuorumEpoch(r),
            RaftResponse::EndQuorumEpoch(r) => ResponseKind::EndQuorumEpoch(r),
            RaftResponse::Fetch(r) => ResponseKind::Fetch(r),
            RaftResponse::DescribeQuorum(r) => ResponseKind::DescribeQuorum(r),
            RaftResponse::FetchSnapshot(r) => ResponseKind::FetchSnapshot(r),
        };
        kind.into()
    }
}
