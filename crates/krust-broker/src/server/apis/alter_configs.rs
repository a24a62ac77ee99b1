//! IncrementalAlterConfigs (44) and AlterConfigs (33) on a broker, as Kafka 3.9's `KafkaApis`
//! with `ConfigAdminManager.preprocess`: the broker checks each resource first — a resource
//! named twice, repeated config keys, null values, a broker resource naming another broker,
//! and a dynamic broker config change that `DynamicBrokerConfig.validate` refuses (all
//! INVALID_REQUEST, Kafka's messages) — forwards only the rest to the controller, and answers
//! in the request's resource order.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyResourceResponse;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use krust_config::{BrokerConfigLayers, ConfigKind, usable_dynamic_broker_configs};
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_net::{Reply, RequestContext};

use super::authorize;
use crate::server::Broker;
use crate::server::authz::Authz;
use crate::server::forwarding::Forwarder;

use krust_net::error_codes::{INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_SERVER_ERROR};

/// `ConfigResource.Type` ids.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const CLIENT_METRICS: i8 = 16;

/// `AlterConfigOp.OpType` ids.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// One resource's answer from the broker itself: `(error code, message)`.
type Refusal = (i16, String);

fn refuse(code: i16, message: impl Into<String>) -> Refusal {
    (code, message.into())
}

/// A config operation as the broker checks it.
struct Op {
    name: String,
    operation: i8,
    value: Option<String>,
}

/// The resources named more than once: each of their mentions is refused.
fn duplicated(keys: &[(i8, String)]) -> BTreeSet<(i8, String)> {
    let mut seen = BTreeSet::new();
    keys.iter()
        .filter(|k| !seen.insert((*k).clone()))
        .cloned()
        .collect()
}

/// `ConfigAdminManager.preprocess` for one resource: `None` when it goes to the controller.
fn preprocess_resource(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    ops: &[Op],
    incremental: bool,
) -> Option<Refusal> {
    let mut names = BTreeSet::new();
    if !ops.iter().all(|op| names.insert(op.name.as_str())) {
        return Some(refuse(
            INVALID_REQUEST,
            "Error due to duplicate config keys",
        ));
    }
    let nulls: Vec<&str> = ops
        .iter()
        .filter(|op| op.value.is_none() && !(incremental && op.operation == DELETE))
        .map(|op| op.name.as_str())
        .collect();
    if !nulls.is_empty() {
        return Some(refuse(
            INVALID_REQUEST,
            format!("Null value not supported for : {}", nulls.join(", ")),
        ));
    }
    match resource_type {
        BROKER => {
            if !name.is_empty() {
                let Ok(id) = name.parse::<i32>() else {
                    return Some(refuse(
                        INVALID_REQUEST,
                        format!("Node id must be an integer, but it is: {name}"),
                    ));
                };
                let own = broker.config().node_id;
                if id != own {
                    return Some(refuse(
                        INVALID_REQUEST,
                        format!("Unexpected broker id, expected {own}, but received {name}"),
                    ));
                }
            }
            validate_broker_change(broker, name, ops, incremental).err()
        }
        TOPIC | CLIENT_METRICS => None,
        // Including BROKER_LOGGER (8): krust does not serve log4j levels, and Kafka's legacy
        // AlterConfigs refuses it the same way.
        other => Some(refuse(
            INVALID_REQUEST,
            format!("Unknown resource type {other}"),
        )),
    }
}

/// `validateBrokerConfigChange`: the resource's stored dynamic configs (less what Kafka
/// ignores), with the operations applied, validated as `DynamicBrokerConfig.validate`.
fn validate_broker_change(
    broker: &Broker,
    name: &str,
    ops: &[Op],
    incremental: bool,
) -> Result<(), Refusal> {
    let per_broker = !name.is_empty();
    let image = broker.replica_manager().image();
    let stored = |resource_name: &str| -> BTreeMap<String, String> {
        image
            .configs
            .configs(&ConfigResource {
                resource_type: ConfigResourceType::BROKER,
                name: resource_name.to_owned(),
            })
            .into_iter()
            .collect()
    };
    let mut props = if incremental {
        usable_dynamic_broker_configs(&stored(name), per_broker)
    } else {
        BTreeMap::new()
    };
    for op in ops {
        let value = op.value.clone().unwrap_or_default();
        match op.operation {
            SET => {
                props.insert(op.name.clone(), value);
            }
            DELETE => {
                props.remove(&op.name);
            }
            APPEND | SUBTRACT => {
                let verb = if op.operation == APPEND {
                    "append"
                } else {
                    "subtract"
                };
                let Some(def) = krust_config::broker_def(&op.name) else {
                    // Kafka looks the key up in a Scala map: an unknown one throws.
                    return Err(refuse(
                        UNKNOWN_SERVER_ERROR,
                        format!("key not found: {}", op.name),
                    ));
                };
                if def.kind != ConfigKind::List {
                    return Err(refuse(
                        INVALID_CONFIG,
                        format!(
                            "Config value {verb} is not allowed for config key: {}",
                            op.name
                        ),
                    ));
                }
                let old = props
                    .get(&op.name)
                    .map(String::as_str)
                    .or(def.default)
                    .unwrap_or("");
                let mut items: Vec<String> = if op.operation == APPEND && old.is_empty() {
                    Vec::new()
                } else {
                    old.split(',').map(str::to_owned).collect()
                };
                let given: Vec<&str> = value.split(',').collect();
                if op.operation == APPEND {
                    let old_items = items.clone();
                    items.extend(
                        given
                            .iter()
                            .filter(|v| !old_items.iter().any(|o| o == *v))
                            .map(|v| (*v).to_owned()),
                    );
                } else {
                    // Scala's `diff`: each given item removes one occurrence.
                    for v in given {
                        if let Some(i) = items.iter().position(|o| o == v) {
                            items.remove(i);
                        }
                    }
                }
                props.insert(op.name.clone(), items.join(","));
            }
            other => {
                return Err(refuse(
                    INVALID_REQUEST,
                    format!("Unknown operations type {other}"),
                ));
            }
        }
    }
    let id = broker.config().node_id.to_string();
    let dynamic_default = stored("");
    let dynamic_broker = stored(&id);
    let layers = BrokerConfigLayers {
        static_props: broker
            .config()
            .properties()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        dynamic_default: dynamic_default
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        dynamic_broker: dynamic_broker
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
    };
    krust_config::validate_dynamic_broker_change(&props, per_broker, &layers)
        .map_err(|e| refuse(INVALID_REQUEST, e.message))
}

/// Every resource's refusal (`None`: it goes to the controller), in request order.
fn preprocess_all(
    broker: &Broker,
    authz: &Authz,
    resources: &[((i8, String), Vec<Op>)],
    incremental: bool,
) -> Vec<Option<Refusal>> {
    let keys: Vec<(i8, String)> = resources.iter().map(|(k, _)| k.clone()).collect();
    let dups = duplicated(&keys);
    resources
        .iter()
        .map(|(key, ops)| {
            if dups.contains(key) {
                Some(refuse(
                    INVALID_REQUEST,
                    "Each resource must appear at most once.",
                ))
            } else {
                preprocess_resource(broker, key.0, &key.1, ops, incremental)
                    .or_else(|| authorize_alter(authz, key.0, &key.1))
            }
        })
        .collect()
}

/// Kafka's `ControllerApis.authorizeAlterResource`, checked before forwarding.
fn authorize_alter(authz: &Authz, resource_type: i8, name: &str) -> Option<Refusal> {
    authorize::alter_resource_refusal(authz, resource_type, name)
        .map(|code| refuse(code, authorize::message(code)))
}

/// Kafka's `reassemble*Response`: each resource's answer in request order, the broker's
/// refusal or the controller's result for it.
fn reassemble(
    keys: impl Iterator<Item = (i8, String)>,
    refusals: Vec<Option<Refusal>>,
    controller: impl IntoIterator<Item = ((i8, String), (i16, Option<StrBytes>))>,
) -> Vec<(i16, Option<StrBytes>)> {
    let mut answers: BTreeMap<(i8, String), (i16, Option<StrBytes>)> =
        controller.into_iter().collect();
    keys.zip(refusals)
        .map(|(key, refused)| match refused {
            Some((code, message)) => (code, Some(StrBytes::from_string(message))),
            None => answers.remove(&key).unwrap_or((UNKNOWN_SERVER_ERROR, None)),
        })
        .collect()
}

/// One AlterConfigs handler: each resource preprocessed on the broker, the rest forwarded,
/// the answers reassembled in request order. The two APIs differ only in their generated types
/// and in how an entry names its operation.
macro_rules! alter_configs_handler {
    ($(#[$doc:meta])* $name:ident, $request:ty, $kind:ident, $resource_response:ty,
     $response:ty, $incremental:expr, $operation:expr) => {
        $(#[$doc])*
        pub(super) async fn $name(
            broker: &Broker,
            forwarder: &Forwarder,
            ctx: &RequestContext,
            request: $request,
        ) -> Reply {
            let resources: Vec<((i8, String), Vec<Op>)> = request
                .resources
                .iter()
                .map(|r| {
                    let ops = r
                        .configs
                        .iter()
                        .map(|c| Op {
                            name: c.name.to_string(),
                            operation: $operation(c),
                            value: c.value.as_ref().map(ToString::to_string),
                        })
                        .collect();
                    ((r.resource_type, r.resource_name.to_string()), ops)
                })
                .collect();
            let refusals =
                preprocess_all(broker, &broker.authz(ctx), &resources, $incremental);
            let mut remaining = request.clone();
            remaining.resources = request
                .resources
                .iter()
                .zip(&refusals)
                .filter(|(_, refused)| refused.is_none())
                .map(|(r, _)| r.clone())
                .collect();
            let mut controller = Vec::new();
            if !remaining.resources.is_empty() {
                match forwarder.forward(ctx, RequestKind::$kind(remaining)).await {
                    Reply::Send(response) => {
                        if let ResponseKind::$kind(r) = *response {
                            controller.extend(r.responses.into_iter().map(|a| {
                                (
                                    (a.resource_type, a.resource_name.to_string()),
                                    (a.error_code, a.error_message),
                                )
                            }));
                        }
                    }
                    other => return other,
                }
            }
            let answers = reassemble(resources.into_iter().map(|(k, _)| k), refusals, controller);
            let responses = request
                .resources
                .iter()
                .zip(answers)
                .map(|(r, (code, message))| {
                    <$resource_response>::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name.clone())
                        .with_error_code(code)
                        .with_error_message(message)
                })
                .collect();
            Reply::Send(Box::new(ResponseKind::$kind(
                <$response>::default().with_responses(responses),
            )))
        }
    };
}

alter_configs_handler!(
    /// Handles IncrementalAlterConfigs: refusals from the broker, the rest from the controller.
    incremental,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigs,
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
    true,
    |c: &kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig| {
        c.config_operation
    }
);

alter_configs_handler!(
    /// Handles legacy AlterConfigs (every entry a SET of the whole set): refusals from the
    /// broker, the rest from the controller.
    legacy,
    AlterConfigsRequest,
    AlterConfigs,
    LegacyResourceResponse,
    AlterConfigsResponse,
    false,
    |_: &kafka_protocol::messages::alter_configs_request::AlterableConfig| SET
);
