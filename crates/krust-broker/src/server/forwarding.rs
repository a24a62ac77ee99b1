//! Admin requests a broker forwards to the active controller in an `Envelope` (KIP-590):
//! CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, AlterConfigs,
//! ElectLeaders, UpdateFeatures, CreateAcls, DeleteAcls, AlterClientQuotas,
//! AlterUserScramCredentials, AlterPartitionReassignments, ListPartitionReassignments and
//! DescribeQuorum (answered by the active controller's Raft replica, as Kafka 3.9 brokers
//! forward it for `kafka-metadata-quorum --bootstrap-server`), with the original request header
//! and principal.
//!
//! CONTRACT (used by [`super::apis`]): [`Forwarder::forwarded_apis`] lists the APIs and
//! versions forwarded; [`Forwarder::forward`] answers one of them.
//!
//! Kafka 3.9's `ForwardingManager`: the client's request is re-serialized (request header at
//! its version + body), wrapped in an `EnvelopeRequest` with the client's principal (Kafka's
//! `DefaultKafkaPrincipalBuilder` serialization: `int16 version` + `DefaultPrincipalData`) and
//! raw IP address, and sent through the [`ControllerChannel`] (which retries disconnects and
//! `NOT_CONTROLLER`). The `EnvelopeResponse` carries the controller's response (header + body
//! at the request's version), handed back to the client as is. When no answer comes, the
//! client gets the API's own error response ([`error_response`]): `REQUEST_TIMED_OUT` on
//! timeout, the envelope's error code otherwise.
//!
//! Only the forwardable APIs the krust controller serves are listed: delegation tokens (which
//! need SASL on the broker) are not, so the broker does not advertise them.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as AlterConfigsResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsResponse, ApiKey, CreatePartitionsResponse, CreateTopicsResponse,
    DefaultPrincipalData, DeleteTopicsResponse, ElectLeadersResponse, EnvelopeRequest,
    IncrementalAlterConfigsResponse, RequestKind, ResponseKind, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_net::{Reply, RequestContext};
use tracing::{debug, warn};

use super::controller_channel::{ControllerChannel, ControllerChannelError};

use krust_net::error_codes::{
    NOT_CONTROLLER, REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR, UNSUPPORTED_VERSION,
};
/// Size prefix of an encoded frame.
const SIZE_PREFIX_BYTES: usize = 4;
/// `request.timeout.ms` default: how long a forwarded request may wait for the controller.
pub const FORWARDING_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The forwarded APIs; the broker advertises Kafka 3.9's ranges, which the krust controller
/// listener serves in full.
const FORWARDED: [ApiKey; 13] = [
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::ElectLeaders,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AlterConfigs,
    ApiKey::UpdateFeatures,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::AlterClientQuotas,
    ApiKey::AlterUserScramCredentials,
    ApiKey::AlterPartitionReassignments,
    ApiKey::ListPartitionReassignments,
];

/// DescribeQuorum, forwarded at Kafka 3.9's range (a Raft RPC, not in the controller API table).
const DESCRIBE_QUORUM: (ApiKey, i16, i16) = (ApiKey::DescribeQuorum, 0, 2);

/// Forwards admin requests to the controller.
pub struct Forwarder {
    channel: Arc<dyn ControllerChannel>,
    timeout: Duration,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// Over `channel`, with [`FORWARDING_TIMEOUT_DEFAULT`].
    #[must_use]
    pub fn new(channel: Arc<dyn ControllerChannel>) -> Self {
        Forwarder {
            channel,
            timeout: FORWARDING_TIMEOUT_DEFAULT,
        }
    }

    /// How long one forwarded request may wait for the controller (`request.timeout.ms`).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The forwarded APIs with the version range the broker advertises for each.
    #[must_use]
    pub fn forwarded_apis() -> Vec<(ApiKey, i16, i16)> {
        FORWARDED
            .into_iter()
            .map(krust_net::api_versions::kafka_controller_api_versions)
            .chain([DESCRIBE_QUORUM])
            .collect()
    }

    /// Whether `api_key` is forwarded.
    #[must_use]
    pub fn forwards(api_key: ApiKey) -> bool {
        FORWARDED.contains(&api_key) || api_key == DESCRIBE_QUORUM.0
    }

    /// Forwards one request and turns the controller's answer into the client's response.
    pub async fn forward(&self, ctx: &RequestContext, request: RequestKind) -> Reply {
        let envelope = match envelope_request(ctx, &request) {
            Ok(envelope) => envelope,
            Err(reason) => {
                warn!(api = ?ctx.api_key, version = ctx.api_version, %reason, "cannot forward request");
                return reply(error_response(
                    &request,
                    ctx.api_version,
                    UNKNOWN_SERVER_ERROR,
                ));
            }
        };
        let answer = self
            .channel
            .send(RequestKind::Envelope(envelope), Some(0), self.timeout)
            .await;
        let code = match answer {
            Ok(ResponseKind::Envelope(response)) if response.error_code == 0 => {
                match response.response_data {
                    Some(data) => match unwrap_response(ctx, data) {
                        Ok(response) => return Reply::Send(Box::new(response)),
                        Err(reason) => {
                            warn!(api = ?ctx.api_key, version = ctx.api_version, %reason, "undecodable forwarded response");
                            UNKNOWN_SERVER_ERROR
                        }
                    },
                    None => UNKNOWN_SERVER_ERROR,
                }
            }
            Ok(ResponseKind::Envelope(response)) => {
                debug!(api = ?ctx.api_key, error_code = response.error_code, "the controller refused the envelope");
                response.error_code
            }
            Ok(_) => UNKNOWN_SERVER_ERROR,
            Err(ControllerChannelError::Timeout(_)) => REQUEST_TIMED_OUT,
            Err(ControllerChannelError::Unsupported(_)) => UNSUPPORTED_VERSION,
            // The broker is shutting down: the client retries elsewhere.
            Err(ControllerChannelError::Closed) => NOT_CONTROLLER,
        };
        reply(error_response(&request, ctx.api_version, code))
    }
}

fn reply(response: Option<ResponseKind>) -> Reply {
    match response {
        Some(response) => Reply::Send(Box::new(response)),
        // Not a forwarded API: never handed to `forward` by a correct caller.
        None => Reply::Close,
    }
}

/// The client's principal as Kafka's `DefaultKafkaPrincipalBuilder.serialize` writes it for an
/// Envelope: `int16 version` then `DefaultPrincipalData` (type, name, token-authenticated) at
/// that version. The controller authorizes the forwarded request as this principal.
///
/// # Errors
/// Never in practice: the message is valid at version 0.
pub fn serialized_principal(principal: &krust_net::KafkaPrincipal) -> Result<Bytes, String> {
    const VERSION: i16 = 0;
    let data = DefaultPrincipalData::default()
        .with_type(StrBytes::from_string(principal.principal_type.clone()))
        .with_name(StrBytes::from_string(principal.name.clone()))
        .with_token_authenticated(false);
    let mut buf = BytesMut::new();
    buf.put_i16(VERSION);
    data.encode(&mut buf, VERSION).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

/// The envelope around the client's request, as Kafka's `ForwardingManager` builds it.
fn envelope_request(
    ctx: &RequestContext,
    request: &RequestKind,
) -> Result<EnvelopeRequest, String> {
    let mut frame = encode_request(
        ctx.api_key,
        ctx.api_version,
        ctx.correlation_id,
        &ctx.client_id,
        request,
    )
    .map_err(|e| e.to_string())?;
    if frame.len() < SIZE_PREFIX_BYTES {
        return Err("encoded request shorter than its size prefix".to_owned());
    }
    let request_data = frame.split_off(SIZE_PREFIX_BYTES);
    let client_host_address = match ctx.peer_addr.ip() {
        std::net::IpAddr::V4(ip) => Bytes::copy_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => Bytes::copy_from_slice(&ip.octets()),
    };
    Ok(EnvelopeRequest::default()
        .with_request_data(request_data)
        .with_request_principal(Some(serialized_principal(&ctx.principal)?))
        .with_client_host_address(client_host_address))
}

/// The inner response of an `EnvelopeResponse` (response header + body at the request's
/// version).
fn unwrap_response(ctx: &RequestContext, mut data: Bytes) -> Result<ResponseKind, String> {
    decode_response_header(&mut data, ctx.api_key, ctx.api_version).map_err(|e| e.to_string())?;
    let response =
        decode_response_body(data, ctx.api_key, ctx.api_version).map_err(|e| e.to_string())?;
    if krust_net::codec::response_api_key(&response) != Some(ctx.api_key) {
        return Err("the controller answered another API".to_owned());
    }
    Ok(response)
}

/// One `$result` per config resource of the request, each with `$error_code` (the two
/// AlterConfigs APIs have each their own generated result type).
macro_rules! per_resource_errors {
    ($result:ty, $resources:expr, $error_code:expr) => {
        $resources
            .iter()
            .map(|res| {
                <$result>::default()
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name.clone())
                    .with_error_code($error_code)
            })
            .collect()
    };
}

/// The response of a forwarded API that fails as a whole with `error_code`: every item of the
/// request gets the code (Kafka's `AbstractRequest.getErrorResponse`), with only the fields
/// that exist at `api_version` set. `None` for an API that is not forwarded.
#[must_use]
pub fn error_response(
    request: &RequestKind,
    api_version: i16,
    error_code: i16,
) -> Option<ResponseKind> {
    Some(match request {
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(error_code)
                            .with_num_partitions(-1)
                            .with_replication_factor(-1)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteTopics(r) => {
            // v0–5 name topics in `topic_names`, v6 in `topics` (by name or id).
            let by_name = r.topic_names.iter().map(|name| {
                DeletableTopicResult::default()
                    .with_name(Some(name.clone()))
                    .with_error_code(error_code)
            });
            let by_state = r.topics.iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_error_code(error_code)
            });
            ResponseKind::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(by_name.chain(by_state).collect()),
            )
        }
        RequestKind::CreatePartitions(r) => ResponseKind::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(error_code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(per_resource_errors!(
                AlterConfigsResourceResponse,
                r.resources,
                error_code
            )),
        ),
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(
                per_resource_errors!(AlterConfigsResult, r.resources, error_code),
            ))
        }
        RequestKind::ElectLeaders(r) => ResponseKind::ElectLeaders(
            ElectLeadersResponse::default()
                // v0 has no top-level error code: the partitions carry it.
                .with_error_code(if api_version >= 1 { error_code } else { 0 })
                .with_replica_election_results(
                    r.topic_partitions
                        .iter()
                        .flatten()
                        .map(|t| {
                            ReplicaElectionResult::default()
                                .with_topic(t.topic.clone())
                                .with_partition_result(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            PartitionResult::default()
                                                .with_partition_id(*p)
                                                .with_error_code(error_code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ),
        // Kafka: `DescribeQuorumResponse.getTopLevelErrorResponse(error)`.
        RequestKind::DescribeQuorum(_) => ResponseKind::DescribeQuorum(
            kafka_protocol::messages::DescribeQuorumResponse::default().with_error_code(error_code),
        ),
        // Kafka: `UpdateFeaturesResponse.createWithErrors(error, emptyMap)`.
        RequestKind::UpdateFeatures(_) => ResponseKind::UpdateFeatures(
            UpdateFeaturesResponse::default().with_error_code(error_code),
        ),
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(
            kafka_protocol::messages::CreateAclsResponse::default().with_results(vec![
                kafka_protocol::messages::create_acls_response::AclCreationResult::default()
                    .with_error_code(error_code)
                    .with_error_message(None);
                r.creations.len()
            ]),
        ),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(
            kafka_protocol::messages::DeleteAclsResponse::default().with_filter_results(vec![
                kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult::default()
                    .with_error_code(error_code)
                    .with_error_message(None);
                r.filters.len()
            ]),
        ),
        // Kafka: every entry's entity with the error.
        RequestKind::AlterClientQuotas(r) => {
            use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
            ResponseKind::AlterClientQuotas(
                kafka_protocol::messages::AlterClientQuotasResponse::default().with_entries(
                    r.entries
                        .iter()
                        .map(|e| {
                            EntryData::default()
                                .with_error_code(error_code)
                                .with_error_message(None)
                                .with_entity(
                                    e.entity
                                        .iter()
                                        .map(|d| {
                                            EntityData::default()
                                                .with_entity_type(d.entity_type.clone())
                                                .with_entity_name(d.entity_name.clone())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        // Kafka: one result per distinct user of the deletions and upsertions.
        RequestKind::AlterUserScramCredentials(r) => {
            use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
            let mut users: Vec<&StrBytes> = Vec::new();
            for name in r
                .deletions
                .iter()
                .map(|d| &d.name)
                .chain(r.upsertions.iter().map(|u| &u.name))
            {
                if !users.contains(&name) {
                    users.push(name);
                }
            }
            ResponseKind::AlterUserScramCredentials(
                kafka_protocol::messages::AlterUserScramCredentialsResponse::default()
                    .with_results(
                        users
                            .into_iter()
                            .map(|user| {
                                AlterUserScramCredentialsResult::default()
                                    .with_user(user.clone())
                                    .with_error_code(error_code)
                                    .with_error_message(None)
                            })
                            .collect(),
                    ),
            )
        }
        // Kafka's `getErrorResponse`: the error at the top and on every partition.
        RequestKind::AlterPartitionReassignments(r) => {
            use kafka_protocol::messages::alter_partition_reassignments_response::{
                ReassignablePartitionResponse, ReassignableTopicResponse,
            };
            ResponseKind::AlterPartitionReassignments(
                kafka_protocol::messages::AlterPartitionReassignmentsResponse::default()
                    .with_error_code(error_code)
                    .with_responses(
                        r.topics
                            .iter()
                            .map(|t| {
                                ReassignableTopicResponse::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                ReassignablePartitionResponse::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_error_code(error_code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            )
        }
        RequestKind::ListPartitionReassignments(_) => ResponseKind::ListPartitionReassignments(
            kafka_protocol::messages::ListPartitionReassignmentsResponse::default()
                .with_error_code(error_code),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    //! The forwarder against a fake controller channel that plays Kafka's controller side of
    //! the envelope (decode the inner request, answer it inside an `EnvelopeResponse`).
    use super::*;
    use crate::server::controller_channel::BoxFuture;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{
        CreateTopicsRequest, DeleteTopicsRequest, EnvelopeResponse, TopicName,
    };
    use kafka_protocol::protocol::Decodable;
    use krust_net::SupportedApis;
    use krust_net::codec::{IncomingRequest, decode_request, encode_response};
    use std::sync::Mutex;

    enum Behaviour {
        /// Answer the inner request: CreateTopics gets one result per topic with this code.
        Answer(i16),
        /// Refuse the envelope with this code.
        Refuse(i16),
        /// No controller answers.
        Timeout,
    }

    struct FakeChannel {
        behaviour: Behaviour,
        seen: Mutex<Vec<EnvelopeRequest>>,
    }

    impl ControllerChannel for FakeChannel {
        fn send(
            &self,
            request: RequestKind,
            api_version: Option<i16>,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
            let answer = (|| {
                let RequestKind::Envelope(envelope) = request else {
                    return Err(ControllerChannelError::Unsupported(
                        "not an envelope".into(),
                    ));
                };
                assert_eq!(api_version, Some(0));
                self.seen.lock().expect("lock").push(envelope.clone());
                match self.behaviour {
                    Behaviour::Timeout => Err(ControllerChannelError::Timeout(timeout)),
                    Behaviour::Refuse(code) => Ok(ResponseKind::Envelope(
                        EnvelopeResponse::default().with_error_code(code),
                    )),
                    Behaviour::Answer(code) => {
                        let apis =
                            SupportedApis::new(Forwarder::forwarded_apis()).expect("valid table");
                        let Ok(IncomingRequest::Request { header, body }) =
                            decode_request(envelope.request_data, &apis)
                        else {
                            panic!("the envelope does not hold a forwardable request");
                        };
                        let RequestKind::CreateTopics(inner) = *body else {
                            panic!("expected CreateTopics");
                        };
                        let response = ResponseKind::CreateTopics(
                            CreateTopicsResponse::default().with_topics(
                                inner
                                    .topics
                                    .iter()
                                    .map(|t| {
                                        CreatableTopicResult::default()
                                            .with_name(t.name.clone())
                                            .with_error_code(code)
                                            .with_num_partitions(t.num_partitions)
                                    })
                                    .collect(),
                            ),
                        );
                        let frame = encode_response(
                            header.correlation_id,
                            header.api_key,
                            header.api_version,
                            &response,
                        )
                        .expect("encodes");
                        Ok(ResponseKind::Envelope(
                            EnvelopeResponse::default()
                                .with_response_data(Some(frame.slice(SIZE_PREFIX_BYTES..))),
                        ))
                    }
                }
            })();
            Box::pin(async move { answer })
        }
    }

    fn forwarder(behaviour: Behaviour) -> (Arc<FakeChannel>, Forwarder) {
        let channel = Arc::new(FakeChannel {
            behaviour,
            seen: Mutex::new(Vec::new()),
        });
        (channel.clone(), Forwarder::new(channel))
    }

    fn ctx(api_key: ApiKey, api_version: i16) -> RequestContext {
        RequestContext {
            api_key,
            api_version,
            correlation_id: 17,
            client_id: "adminclient-1".to_owned(),
            peer_addr: "127.0.0.5:40000".parse().expect("address"),
            listener_name: Arc::from("PLAINTEXT"),
            connection_id: 1,
            principal: Arc::new(krust_net::KafkaPrincipal::anonymous()),
            request_size: 0,
            throttle: krust_net::ConnectionThrottle::default(),
        }
    }

    fn create_topics() -> RequestKind {
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_topics(vec![
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("a")))
                        .with_num_partitions(3)
                        .with_replication_factor(1),
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("b")))
                        .with_num_partitions(1)
                        .with_replication_factor(1),
                ])
                .with_timeout_ms(1000),
        )
    }

    fn create_topics_codes(reply: Reply) -> Vec<(String, i16)> {
        let Reply::Send(response) = reply else {
            panic!("expected a response, got {reply:?}");
        };
        let ResponseKind::CreateTopics(response) = *response else {
            panic!("expected CreateTopics");
        };
        response
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.error_code))
            .collect()
    }

    #[tokio::test]
    async fn the_envelope_carries_the_request_principal_and_address_and_its_answer_comes_back() {
        let (channel, forwarder) = forwarder(Behaviour::Answer(0));
        let mut alice = ctx(ApiKey::CreateTopics, 7);
        alice.principal = Arc::new(krust_net::KafkaPrincipal::user("alice"));
        let reply = forwarder.forward(&alice, create_topics()).await;
        assert_eq!(
            create_topics_codes(reply),
            vec![("a".to_owned(), 0), ("b".to_owned(), 0)]
        );
        let seen = channel.seen.lock().expect("lock");
        let envelope = &seen[0];
        assert_eq!(envelope.client_host_address.as_ref(), &[127, 0, 0, 5]);
        // `int16 version` + DefaultPrincipalData v0: the client's User:alice, not
        // token-authenticated.
        let mut principal = envelope.request_principal.clone().expect("principal");
        assert_eq!(&principal[..2], &[0, 0]);
        let _ = principal.split_to(2);
        let data = DefaultPrincipalData::decode(&mut principal, 0).expect("decodes");
        assert_eq!(data._type.as_str(), "User");
        assert_eq!(data.name.as_str(), "alice");
        assert!(!data.token_authenticated);
    }

    #[tokio::test]
    async fn per_item_errors_of_the_controller_reach_the_client() {
        let (_, forwarder) = forwarder(Behaviour::Answer(36));
        let reply = forwarder
            .forward(&ctx(ApiKey::CreateTopics, 5), create_topics())
            .await;
        assert_eq!(
            create_topics_codes(reply),
            vec![("a".to_owned(), 36), ("b".to_owned(), 36)]
        );
    }

    #[tokio::test]
    async fn a_refused_envelope_becomes_the_apis_error_response() {
        let (_, forwarder) = forwarder(Behaviour::Refuse(NOT_CONTROLLER));
        let reply = forwarder
            .forward(&ctx(ApiKey::CreateTopics, 7), create_topics())
            .await;
        assert_eq!(
            create_topics_codes(reply),
            vec![
                ("a".to_owned(), NOT_CONTROLLER),
                ("b".to_owned(), NOT_CONTROLLER)
            ]
        );
    }

    #[tokio::test]
    async fn no_controller_answer_is_request_timed_out() {
        let (_, forwarder) = forwarder(Behaviour::Timeout);
        let reply = forwarder
            .forward(&ctx(ApiKey::CreateTopics, 7), create_topics())
            .await;
        assert_eq!(
            create_topics_codes(reply),
            vec![
                ("a".to_owned(), REQUEST_TIMED_OUT),
                ("b".to_owned(), REQUEST_TIMED_OUT)
            ]
        );
    }

    #[test]
    fn error_responses_name_every_item_of_the_request() {
        let delete = RequestKind::DeleteTopics(
            DeleteTopicsRequest::default()
                .with_topic_names(vec![TopicName(StrBytes::from_static_str("x"))]),
        );
        let Some(ResponseKind::DeleteTopics(r)) = error_response(&delete, 5, REQUEST_TIMED_OUT)
        else {
            panic!("DeleteTopics error response");
        };
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].error_code, REQUEST_TIMED_OUT);
        for (api, _, _) in Forwarder::forwarded_apis() {
            assert!(Forwarder::forwards(api));
        }
        assert!(error_response(&RequestKind::Metadata(Default::default()), 12, 7).is_none());
    }

    /// One request of each forwarded API naming one item, shaped for `version`.
    fn sample_request(api: ApiKey, version: i16) -> RequestKind {
        use kafka_protocol::messages::alter_configs_request::AlterConfigsResource as AlterResource;
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
        use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
        use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
        use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
        use kafka_protocol::messages::{
            AlterConfigsRequest, CreatePartitionsRequest, ElectLeadersRequest,
            IncrementalAlterConfigsRequest, UpdateFeaturesRequest,
        };
        let name = || TopicName(StrBytes::from_static_str("t"));
        match api {
            ApiKey::CreateTopics => create_topics(),
            ApiKey::DeleteTopics if version >= 6 => RequestKind::DeleteTopics(
                DeleteTopicsRequest::default()
                    .with_topics(vec![DeleteTopicState::default().with_name(Some(name()))]),
            ),
            ApiKey::DeleteTopics => RequestKind::DeleteTopics(
                DeleteTopicsRequest::default().with_topic_names(vec![name()]),
            ),
            ApiKey::CreatePartitions => {
                RequestKind::CreatePartitions(CreatePartitionsRequest::default().with_topics(vec![
                    CreatePartitionsTopic::default().with_name(name()).with_count(2),
                ]))
            }
            ApiKey::ElectLeaders => RequestKind::ElectLeaders(
                ElectLeadersRequest::default().with_topic_partitions(Some(vec![
                    TopicPartitions::default()
                        .with_topic(name())
                        .with_partitions(vec![0]),
                ])),
            ),
            ApiKey::IncrementalAlterConfigs => RequestKind::IncrementalAlterConfigs(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t")),
                ]),
            ),
            ApiKey::AlterConfigs => {
                RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
                    AlterResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t")),
                ]))
            }
            ApiKey::UpdateFeatures => RequestKind::UpdateFeatures(
                UpdateFeaturesRequest::default().with_feature_updates(vec![
                    FeatureUpdateKey::default()
                        .with_feature(StrBytes::from_static_str("metadata.version"))
                        .with_max_version_level(21),
                ]),
            ),
            ApiKey::CreateAcls => RequestKind::CreateAcls(
                kafka_protocol::messages::CreateAclsRequest::default().with_creations(vec![
                    kafka_protocol::messages::create_acls_request::AclCreation::default(),
                ]),
            ),
            ApiKey::DeleteAcls => RequestKind::DeleteAcls(
                kafka_protocol::messages::DeleteAclsRequest::default().with_filters(vec![
                    kafka_protocol::messages::delete_acls_request::DeleteAclsFilter::default(),
                ]),
            ),
            ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(
                kafka_protocol::messages::AlterClientQuotasRequest::default().with_entries(vec![
                    kafka_protocol::messages::alter_client_quotas_request::EntryData::default()
                        .with_entity(vec![
                            kafka_protocol::messages::alter_client_quotas_request::EntityData::default()
                                .with_entity_type(StrBytes::from_static_str("user"))
                                .with_entity_name(None),
                        ]),
                ]),
            ),
            ApiKey::AlterUserScramCredentials => RequestKind::AlterUserScramCredentials(
                kafka_protocol::messages::AlterUserScramCredentialsRequest::default()
                    .with_upsertions(vec![
                        kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                            .with_name(StrBytes::from_static_str("alice")),
                    ]),
            ),
            ApiKey::AlterPartitionReassignments => RequestKind::AlterPartitionReassignments(
                kafka_protocol::messages::AlterPartitionReassignmentsRequest::default()
                    .with_topics(vec![
                        kafka_protocol::messages::alter_partition_reassignments_request::ReassignableTopic::default()
                            .with_name(name())
                            .with_partitions(vec![
                                kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition::default(),
                            ]),
                    ]),
            ),
            ApiKey::ListPartitionReassignments => RequestKind::ListPartitionReassignments(
                kafka_protocol::messages::ListPartitionReassignmentsRequest::default(),
            ),
            ApiKey::DescribeQuorum => RequestKind::DescribeQuorum(
                kafka_protocol::messages::DescribeQuorumRequest::default(),
            ),
            other => panic!("not a forwarded API: {other:?}"),
        }
    }

    #[test]
    fn every_error_response_encodes_at_every_advertised_version() {
        for (api, min, max) in Forwarder::forwarded_apis() {
            for version in min..=max {
                let request = sample_request(api, version);
                let response = error_response(&request, version, REQUEST_TIMED_OUT)
                    .unwrap_or_else(|| panic!("{api:?} has an error response"));
                if let Err(e) = encode_response(1, api, version, &response) {
                    panic!("{api:?} v{version} error response does not encode: {e}");
                }
            }
        }
    }
}
