//! Metadata (API key 3) and DescribeCluster (60) from the published image (Kafka's
//! `KRaftMetadataCache`), with auto topic creation (`auto.create.topics.enable`) through the
//! controller channel (Kafka's `AutoTopicCreationManager`: fire the CreateTopics, answer
//! `LEADER_NOT_AVAILABLE` meanwhile).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DescribeClusterRequest, DescribeClusterResponse,
    MetadataRequest, MetadataResponse, RequestKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::{AclOperation, CLUSTER_NAME, resource_type};
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::{PartitionRegistration, TopicImage, directory_id};
use krust_net::RequestContext;
use rand::seq::SliceRandom;
use tracing::{debug, warn};
use uuid::Uuid;

use crate::server::Broker;

/// `authorized_operations` when not requested (Kafka's `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Topics Kafka marks internal.
pub const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

/// How long an auto-creation may wait for the controller.
const AUTO_CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// An alive broker's endpoint on one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    /// Broker id.
    pub id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `broker.rack`.
    pub rack: Option<String>,
}

/// KIP-951 `NodeEndpoints` (Fetch v16+, Produce v10+): the alive brokers among `$leaders`
/// (a set of the broker ids named in the response's leader hints), as `$node_endpoint`s. A
/// macro because Fetch and Produce each have their own generated `NodeEndpoint` type.
macro_rules! leader_node_endpoints {
    ($node_endpoint:ty, $broker:expr, $image:expr, $listener:expr, $leaders:expr) => {
        $crate::server::apis::metadata::alive_brokers($broker, $image, $listener)
            .into_iter()
            .filter(|b| $leaders.contains(&b.id))
            .map(|b| {
                <$node_endpoint>::default()
                    .with_node_id(kafka_protocol::messages::BrokerId(b.id))
                    .with_host(kafka_protocol::protocol::StrBytes::from_string(b.host))
                    .with_port(i32::from(b.port))
                    .with_rack(b.rack.map(kafka_protocol::protocol::StrBytes::from_string))
            })
            .collect()
    };
}
pub(super) use leader_node_endpoints;

/// Unfenced brokers with an endpoint on `listener` (Kafka's `getAliveBrokerNodes`). Before
/// this broker's registration reaches the image, it lists itself from its config so
/// clients can bootstrap.
#[must_use]
pub fn alive_brokers(
    broker: &Broker,
    image: &MetadataImage,
    listener: &str,
) -> Vec<BrokerEndpoint> {
    let mut out: Vec<BrokerEndpoint> = image
        .cluster
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            b.listeners.get(listener).map(|e| BrokerEndpoint {
                id: b.id,
                host: e.host.clone(),
                port: e.port,
                rack: b.rack.clone(),
            })
        })
        .collect();
    let config = broker.config();
    if image.cluster.broker(config.node_id).is_none()
        && let Some(e) = config
            .advertised_listeners
            .iter()
            .find(|e| e.name == listener)
            .or_else(|| config.advertised_listeners.first())
    {
        out.push(BrokerEndpoint {
            id: config.node_id,
            host: e.host.clone(),
            port: e.port,
            rack: config.rack.clone(),
        });
    }
    out
}

/// Kafka's KRaft brokers report a random alive broker as the controller (clients send
/// admin requests there, and it forwards them).
#[must_use]
pub fn random_alive_broker(brokers: &[BrokerEndpoint]) -> i32 {
    brokers.choose(&mut rand::thread_rng()).map_or(-1, |b| b.id)
}

/// The current leader and epoch of a partition per the image (`(-1, -1)` if unknown): the
/// hint on NOT_LEADER_OR_FOLLOWER (Produce v10+, Fetch v12+).
#[must_use]
pub fn leader_hint(image: &MetadataImage, topic: &str, partition: i32) -> (i32, i32) {
    image
        .topics
        .topic_by_name(topic)
        .and_then(|t| t.partitions.get(&partition))
        .map_or((-1, -1), |p| (p.leader, p.leader_epoch))
}

/// Kafka's `Topic.validate`: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
#[must_use]
pub fn is_valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Kafka's `getOfflineReplicas`: unregistered brokers and lost directories (a fenced broker is
/// not offline).
#[must_use]
pub fn offline_replicas(image: &MetadataImage, p: &PartitionRegistration) -> Vec<BrokerId> {
    p.replicas
        .iter()
        .filter(|&&r| {
            image.cluster.broker(r).is_none() || p.directory(r) == Some(directory_id::LOST)
        })
        .map(|&r| BrokerId(r))
        .collect()
}

fn topic_response(
    image: &MetadataImage,
    topic: &TopicImage,
    alive: &[BrokerEndpoint],
    version: i16,
) -> MetadataResponseTopic {
    let is_alive = |id: i32| alive.iter().any(|b| b.id == id);
    let partitions = topic
        .partitions
        .iter()
        .map(|(&index, p)| {
            // v0 lists only available replicas and flags the rest (errorUnavailableEndpoints).
            let filter = |ids: &[i32]| -> Vec<BrokerId> {
                ids.iter()
                    .filter(|&&r| version > 0 || is_alive(r))
                    .map(|&r| BrokerId(r))
                    .collect()
            };
            let replicas = filter(&p.replicas);
            let isr = filter(&p.isr);
            let offline = offline_replicas(image, p);
            let mut out = MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_epoch(p.leader_epoch)
                .with_offline_replicas(offline);
            if is_alive(p.leader) {
                out.leader_id = BrokerId(p.leader);
                if replicas.len() < p.replicas.len() || isr.len() < p.isr.len() {
                    out.error_code = ResponseError::ReplicaNotAvailable.code();
                }
            } else {
                // Kafka: no such broker → LEADER_NOT_AVAILABLE; registered but fenced or
                // without this listener → LISTENER_NOT_FOUND.
                out.leader_id = BrokerId(-1);
                out.error_code = if image.cluster.broker(p.leader).is_none() {
                    ResponseError::LeaderNotAvailable.code()
                } else {
                    ResponseError::ListenerNotFound.code()
                };
            }
            out.replica_nodes = replicas;
            out.isr_nodes = isr;
            out
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(INTERNAL_TOPICS.contains(&topic.name.as_str()))
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn error_topic(
    name: Option<String>,
    topic_id: Uuid,
    error: ResponseError,
) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
        .with_topic_id(topic_id)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// Asks the controller to create `names` with the broker defaults, without waiting; names
/// already being created are skipped.
fn auto_create(broker: &Arc<Broker>, names: Vec<String>) {
    let names: Vec<String> = {
        let mut inflight = broker
            .auto_create_inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        names
            .into_iter()
            .filter(|n| inflight.insert(n.clone()))
            .collect()
    };
    if names.is_empty() {
        return;
    }
    let config = broker.config();
    let partitions: i32 = config.prop("num.partitions", 1);
    let replication_factor: i16 = config.prop("default.replication.factor", 1);
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(i32::try_from(AUTO_CREATE_TIMEOUT.as_millis()).unwrap_or(i32::MAX))
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(n.clone())))
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                })
                .collect(),
        );
    let done = |broker: &Broker, names: &[String]| {
        let mut inflight = broker
            .auto_create_inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for n in names {
            inflight.remove(n);
        }
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        done(broker, &names);
        return;
    };
    let broker = Arc::clone(broker);
    runtime.spawn(async move {
        match broker
            .channel()
            .send(
                RequestKind::CreateTopics(request),
                None,
                AUTO_CREATE_TIMEOUT,
            )
            .await
        {
            Ok(response) => debug!(?names, ?response, "auto topic creation answered"),
            Err(error) => warn!(%error, ?names, "auto topic creation failed"),
        }
        done(&broker, &names);
    });
}

/// Handles a Metadata request.
pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: &MetadataRequest,
) -> MetadataResponse {
    let version = ctx.api_version;
    let image = broker.replica_manager().image();
    let alive = alive_brokers(broker, &image, &ctx.listener_name);
    let mut response = MetadataResponse::default()
        .with_brokers(
            alive
                .iter()
                .map(|b| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.id))
                        .with_host(StrBytes::from_string(b.host.clone()))
                        .with_port(i32::from(b.port))
                        .with_rack(b.rack.clone().map(StrBytes::from_string))
                })
                .collect(),
        )
        .with_cluster_id(Some(StrBytes::from_string(
            broker.config().cluster_id.clone(),
        )))
        .with_controller_id(BrokerId(random_alive_broker(&alive)))
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    let authz = broker.authz(ctx);
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let all_topics = match &request.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    // Listing all topics only filters: a denial is not audited at INFO (Kafka's
    // `logIfDenied = !isAllTopics`).
    let describe = |name: &str| {
        if all_topics {
            authz.filter_allows(AclOperation::Describe, resource_type::TOPIC, name)
        } else {
            authz.allows(AclOperation::Describe, resource_type::TOPIC, name)
        }
    };
    if all_topics {
        // Topics the client may not describe are left out, silently.
        response.topics = image
            .topics
            .by_name
            .values()
            .filter(|t| describe(&t.name))
            .map(|t| topic_response(&image, t, &alive, version))
            .collect();
    } else {
        let allow_auto_create = (version < 4 || request.allow_auto_topic_creation)
            && broker.config().prop("auto.create.topics.enable", true);
        let create_any = allow_auto_create
            && authz.enabled()
            && authz.filter_allows_cluster(AclOperation::Create);
        let mut to_create = Vec::new();
        for wanted in request.topics.iter().flatten() {
            let by_name = wanted.name.as_ref().map(|n| n.0.to_string());
            let found = match &by_name {
                Some(name) => image.topics.topic_by_name(name),
                None => image.topics.topic(wanted.topic_id),
            };
            // Authorization before existence: an unauthorized caller cannot tell.
            let name = by_name.clone().or_else(|| found.map(|t| t.name.clone()));
            if let Some(name) = &name
                && !describe(name)
            {
                response.topics.push(match by_name {
                    Some(name) => error_topic(
                        Some(name),
                        Uuid::nil(),
                        ResponseError::TopicAuthorizationFailed,
                    ),
                    None => error_topic(
                        None,
                        wanted.topic_id,
                        ResponseError::TopicAuthorizationFailed,
                    ),
                });
                continue;
            }
            let out = match (found, by_name) {
                (Some(topic), _) => topic_response(&image, topic, &alive, version),
                (None, None) => error_topic(None, wanted.topic_id, ResponseError::UnknownTopicId),
                (None, Some(name)) if !is_valid_topic_name(&name) => error_topic(
                    Some(name),
                    Uuid::nil(),
                    ResponseError::InvalidTopicException,
                ),
                (None, Some(name))
                    if allow_auto_create
                        && !create_any
                        && !authz.allows(AclOperation::Create, resource_type::TOPIC, &name) =>
                {
                    error_topic(
                        Some(name),
                        Uuid::nil(),
                        ResponseError::TopicAuthorizationFailed,
                    )
                }
                (None, Some(name))
                    if allow_auto_create && !INTERNAL_TOPICS.contains(&name.as_str()) =>
                {
                    // Kafka 3.9's KRaft `AutoTopicCreationManager`: UNKNOWN_TOPIC_OR_PARTITION
                    // while the controller creates it (LEADER_NOT_AVAILABLE is ZooKeeper's).
                    to_create.push(name.clone());
                    error_topic(
                        Some(name),
                        Uuid::nil(),
                        ResponseError::UnknownTopicOrPartition,
                    )
                }
                (None, Some(name)) => error_topic(
                    Some(name),
                    Uuid::nil(),
                    ResponseError::UnknownTopicOrPartition,
                ),
            };
            response.topics.push(out);
        }
        auto_create(broker, to_create);
    }
    if version >= 8 {
        if version <= 10 && request.include_cluster_authorized_operations {
            response.cluster_authorized_operations = if authz.allows_cluster(AclOperation::Describe)
            {
                authz.authorized_operations(resource_type::CLUSTER, CLUSTER_NAME)
            } else {
                0
            };
        }
        if request.include_topic_authorized_operations {
            let authorized = ResponseError::TopicAuthorizationFailed.code();
            for topic in response.topics.iter_mut().filter(|t| {
                t.error_code != authorized && t.error_code != ResponseError::UnknownTopicId.code()
            }) {
                let name = topic
                    .name
                    .as_ref()
                    .map(|n| n.0.to_string())
                    .unwrap_or_default();
                topic.topic_authorized_operations =
                    authz.authorized_operations(resource_type::TOPIC, &name);
            }
        }
    }
    response
}

pub use krust_net::error_codes::{MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE};

/// Handles a DescribeCluster request (`endpoint_type` 1 = brokers; asking a broker for
/// controllers is `MISMATCHED_ENDPOINT_TYPE`, an unknown type `UNSUPPORTED_ENDPOINT_TYPE`).
#[must_use]
pub fn describe_cluster(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(StrBytes::from_string(broker.config().cluster_id.clone()))
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    if request.include_cluster_authorized_operations {
        let authz = broker.authz(ctx);
        response.cluster_authorized_operations = if authz.allows_cluster(AclOperation::Describe) {
            authz.authorized_operations(resource_type::CLUSTER, CLUSTER_NAME)
        } else {
            0
        };
    }
    if ctx.api_version >= 1 && request.endpoint_type != 1 {
        response.error_code = if request.endpoint_type == 2 {
            MISMATCHED_ENDPOINT_TYPE
        } else {
            UNSUPPORTED_ENDPOINT_TYPE
        };
        response.error_message = Some(StrBytes::from_static_str(
            "The target broker only supports the BROKER endpoint type",
        ));
        response.controller_id = BrokerId(-1);
        return response;
    }
    let image = broker.replica_manager().image();
    let alive = alive_brokers(broker, &image, &ctx.listener_name);
    response.controller_id = BrokerId(random_alive_broker(&alive));
    response.brokers = alive
        .iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.clone().map(StrBytes::from_string))
        })
        .collect();
    response
}
