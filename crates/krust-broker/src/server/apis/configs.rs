//! DescribeConfigs (32) for topics and this broker, as Kafka 3.9's `ConfigHelper` answers:
//! every topic config (`LogConfig`) with its effective value, source, type and — when asked —
//! synonyms and documentation; for broker `<id>` every `KafkaConfig` key plus every other key
//! set in `server.properties` or dynamically, each with its type, `read_only` (not
//! dynamically changeable), sensitivity (passwords and unknown keys: value null) and Kafka's
//! synonym list; for broker `""` the cluster-wide dynamic defaults only. The key table is
//! generated from Kafka's jars (`krust-config`).
//!
//! The answer depends only on a [`ConfigsView`] (the published image, the node id and its
//! `server.properties`), so the controller listener (`krust-node`) answers DescribeConfigs
//! with the same code, as Kafka's `ControllerApis` uses the broker's `ConfigHelper`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use krust_metadata::MetadataImage;

use crate::server::Broker;
use crate::server::publisher::topic_layers_maps;
use crate::topic_config::{
    ConfigLayers, ConfigSynonymValue, TOPIC_CONFIGS, broker_config_def, broker_config_synonyms,
    config_source, config_type,
};
use krust_config::{BROKER_CONFIG_DEFS, TOPIC_CONFIG_DEFS};

/// `ConfigResource.Type.TOPIC`.
const TOPIC: i8 = 2;
/// `ConfigResource.Type.BROKER`.
const BROKER: i8 = 4;
/// `ConfigResource.Type.BROKER_LOGGER`.
const BROKER_LOGGER: i8 = 8;
/// `ConfigResource.Type.CLIENT_METRICS`.
const CLIENT_METRICS: i8 = 16;
/// DescribeConfigs `config_type` `UNKNOWN`: a key no `ConfigDef` knows.
const UNKNOWN_TYPE: i8 = 0;
/// DescribeConfigs `config_type` `PASSWORD`.
const PASSWORD_TYPE: i8 = 9;

/// What DescribeConfigs reads on a node (Kafka's `ConfigHelper` inputs: metadata cache,
/// `KafkaConfig`, config repository).
#[derive(Debug, Clone, Copy)]
pub struct ConfigsView<'a> {
    /// The image the node's metadata loader last published.
    pub image: &'a MetadataImage,
    /// `node.id`.
    pub node_id: i32,
    /// `server.properties` as written (Kafka's `originals`).
    pub properties: &'a BTreeMap<String, String>,
}

/// Why one resource is not described: Kafka's code, and Kafka's message where it is not
/// the one [`describe_configs_response`] picks by code.
#[derive(Debug)]
struct Refusal {
    error: ResponseError,
    message: Option<String>,
}

impl From<ResponseError> for Refusal {
    fn from(error: ResponseError) -> Self {
        Refusal {
            error,
            message: None,
        }
    }
}

/// What one request asks for besides the keys.
#[derive(Debug, Clone, Copy)]
struct Wants {
    synonyms: bool,
    documentation: bool,
}

/// The `config_type` of broker config `name`, falling back to its synonyms' (Kafka's
/// `ConfigHelper.configType`); `UNKNOWN` for keys no `ConfigDef` knows.
fn broker_config_type(name: &str, synonyms: &[String]) -> i8 {
    broker_config_def(name)
        .or_else(|| synonyms.iter().find_map(|s| broker_config_def(s)))
        .map_or(UNKNOWN_TYPE, |d| d.config_type)
}

/// Sensitive as Kafka's `KafkaConfig.maybeSensitive`: passwords, and keys of unknown type
/// ("treat it as a sensitive config to be safe").
fn is_sensitive(kind: i8) -> bool {
    kind == PASSWORD_TYPE || kind == UNKNOWN_TYPE
}

/// `value` as Kafka prints the parsed value (`ConfigDef.convertToString`): trimmed, lists
/// without blanks around the commas.
fn normalize(value: &str, kind: i8) -> String {
    let v = value.trim();
    match kind {
        config_type::LIST => v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(","),
        config_type::BOOLEAN => v.to_ascii_lowercase(),
        config_type::DOUBLE => v
            .parse::<f64>()
            .map_or_else(|_| v.to_string(), java_double_string),
        _ => v.to_string(),
    }
}

/// `v` as Java's `Double.toString` prints it (how Kafka prints a parsed DOUBLE config):
/// shortest digits, at least one decimal, scientific (`1.0E7`) outside `[1e-3, 1e7)`.
fn java_double_string(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "NaN".to_string()
        } else if v > 0.0 {
            "Infinity".to_string()
        } else {
            "-Infinity".to_string()
        };
    }
    let a = v.abs();
    if a == 0.0 || (1e-3..1e7).contains(&a) {
        let s = format!("{v}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let s = format!("{v:E}");
        match s.split_once('E') {
            Some((mantissa, exp)) if !mantissa.contains('.') => format!("{mantissa}.0E{exp}"),
            _ => s,
        }
    }
}

/// Why `name` is not a legal topic name, in Kafka's words (`Topic.detectInvalidTopic`):
/// 1–249 characters (Java's UTF-16 length) of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn invalid_topic_reason(name: &str) -> Option<String> {
    const MAX_NAME_LENGTH: usize = 249;
    if name.is_empty() {
        return Some("the empty string is not allowed".to_owned());
    }
    if name == "." || name == ".." {
        return Some(format!("'{name}' is not allowed"));
    }
    if name.encode_utf16().count() > MAX_NAME_LENGTH {
        return Some(format!(
            "the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
        ));
    }
    let legal = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-';
    if !name.chars().all(legal) {
        return Some(format!(
            "'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    None
}

/// Kafka's `Topic.validate(name)`: the `InvalidTopicException` message ("Topic name is
/// invalid: …") of an illegal name, `None` for a legal one.
pub(crate) fn invalid_topic_message(name: &str) -> Option<String> {
    invalid_topic_reason(name).map(|reason| format!("Topic name is invalid: {reason}"))
}

/// The resource types Kafka's `ConfigHelper` authorizes; any other type in a request fails the
/// whole request with INVALID_REQUEST (`Unexpected resource type`, thrown before any resource
/// is described).
const KNOWN_RESOURCE_TYPES: [i8; 4] = [TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS];

/// The message Kafka 3.9 puts on INVALID_REQUEST for an illegal topic name or an unsupported
/// resource type (the error's default message).
const INVALID_REQUEST_MESSAGE: &str = "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.";

fn synonym_entries(
    synonyms: &[ConfigSynonymValue],
    sensitive: bool,
) -> Vec<DescribeConfigsSynonym> {
    synonyms
        .iter()
        .map(|s| {
            DescribeConfigsSynonym::default()
                .with_name(StrBytes::from_string(s.name.clone()))
                .with_value(if sensitive {
                    None
                } else {
                    Some(StrBytes::from_string(s.value.clone()))
                })
                .with_source(s.source)
        })
        .collect()
}

/// The keys a resource asks for: all when the list is null or empty (Kafka's
/// `createResponseConfig`).
fn wanted(keys: Option<&Vec<StrBytes>>, name: &str) -> bool {
    match keys {
        None => true,
        Some(k) if k.is_empty() => true,
        Some(k) => k.iter().any(|k| k.as_str() == name),
    }
}

fn describe_topic(
    view: &ConfigsView<'_>,
    name: &str,
    keys: Option<&Vec<StrBytes>>,
    wants: Wants,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    // Kafka's `Topic.validate`: INVALID_TOPIC_EXCEPTION with "Topic name is invalid: …".
    if let Some(message) = invalid_topic_message(name) {
        return Err(Refusal {
            error: ResponseError::InvalidTopicException,
            message: Some(message),
        });
    }
    if view.image.topics.topic_by_name(name).is_none() {
        return Err(ResponseError::UnknownTopicOrPartition.into());
    }
    let maps = topic_layers_maps(view.image, name, view.node_id);
    let layers = ConfigLayers {
        topic: &maps[0],
        broker_dynamic: &maps[1],
        broker_default: &maps[2],
        static_props: view.properties,
    };
    Ok(TOPIC_CONFIGS
        .iter()
        .filter(|d| wanted(keys, d.name))
        .map(|def| {
            let (value, source) = layers.resolve(def);
            // Topic configs have no password type: never sensitive.
            let synonyms = if wants.synonyms {
                synonym_entries(&layers.synonyms(def), false)
            } else {
                Vec::new()
            };
            let documentation = if wants.documentation {
                TOPIC_CONFIG_DEFS
                    .iter()
                    .find(|d| d.name == def.name)
                    .and_then(|d| d.documentation)
            } else {
                None
            };
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_static_str(def.name))
                .with_value(Some(StrBytes::from_string(normalize(
                    &value,
                    def.config_type,
                ))))
                .with_read_only(false)
                .with_config_source(source)
                .with_is_sensitive(false)
                .with_synonyms(synonyms)
                .with_config_type(def.config_type)
                .with_documentation(documentation.map(StrBytes::from_static_str))
        })
        .collect())
}

/// One broker config entry (Kafka's `createBrokerConfigEntry`). `per_broker` is false for
/// the cluster default resource `""`, which lists only dynamic-default synonyms.
fn broker_entry(
    layers: &ConfigLayers<'_>,
    name: &str,
    value: Option<&str>,
    per_broker: bool,
    wants: Wants,
) -> DescribeConfigsResourceResult {
    let names = broker_config_synonyms(name, true);
    let kind = broker_config_type(name, &names);
    let sensitive = is_sensitive(kind);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let all: Vec<ConfigSynonymValue> = layers
        .broker_synonyms(&name_refs, name)
        .into_iter()
        .filter(|s| per_broker || s.source == config_source::DYNAMIC_DEFAULT_BROKER_CONFIG)
        .collect();
    let source = all
        .first()
        .map_or(config_source::DEFAULT_CONFIG, |s| s.source);
    let def = broker_config_def(name);
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(if sensitive {
            None
        } else {
            // Broker `<id>` prints parsed values; the default resource prints the strings
            // as stored (Kafka's `case v: String => v`).
            value.map(|v| {
                StrBytes::from_string(if per_broker {
                    normalize(v, kind)
                } else {
                    v.to_string()
                })
            })
        })
        .with_read_only(!def.is_some_and(|d| d.dynamic))
        .with_config_source(source)
        .with_is_sensitive(sensitive)
        .with_synonyms(if wants.synonyms {
            synonym_entries(&all, sensitive)
        } else {
            Vec::new()
        })
        .with_config_type(kind)
        .with_documentation(if wants.documentation {
            def.and_then(|d| d.documentation)
                .map(StrBytes::from_static_str)
        } else {
            None
        })
}

fn describe_broker(
    view: &ConfigsView<'_>,
    resource_name: &str,
    keys: Option<&Vec<StrBytes>>,
    wants: Wants,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let node_id = view.node_id;
    let maps = topic_layers_maps(view.image, "", node_id);
    // In KRaft mode Kafka's static config carries `broker.id` = `node.id` (KafkaConfig
    // copies it), so DescribeConfigs reports it as STATIC_BROKER_CONFIG.
    let mut static_props = view.properties.clone();
    static_props
        .entry("broker.id".to_string())
        .or_insert_with(|| node_id.to_string());
    let layers = ConfigLayers {
        topic: &maps[0],
        broker_dynamic: &maps[1],
        broker_default: &maps[2],
        static_props: &static_props,
    };
    if resource_name.is_empty() {
        return Ok(maps[2]
            .iter()
            .filter(|(k, _)| wanted(keys, k))
            .map(|(k, v)| broker_entry(&layers, k, Some(v), false, wants))
            .collect());
    }
    if resource_name.trim().parse::<i32>().ok() != Some(node_id) {
        return Err(ResponseError::InvalidRequest.into());
    }
    // Kafka lists `config.originals` (everything set, known or not) plus every
    // non-internal `KafkaConfig` value, each with its effective value.
    let effective = layers.effective_broker_props();
    let mut names: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for def in BROKER_CONFIG_DEFS {
        names.insert(def.name, def.default);
    }
    for k in layers
        .static_props
        .keys()
        .chain(layers.broker_default.keys())
        .chain(layers.broker_dynamic.keys())
    {
        names.entry(k.as_str()).or_insert(None);
    }
    Ok(names
        .into_iter()
        .filter(|(k, _)| wanted(keys, k))
        .map(|(k, default)| {
            let value = effective.get(k).map(String::as_str).or(default);
            broker_entry(&layers, k, value, true, wants)
        })
        .collect())
}

/// Handles a DescribeConfigs request on a broker.
#[must_use]
pub fn describe_configs(
    broker: &Arc<Broker>,
    request: &DescribeConfigsRequest,
    version: i16,
) -> ResponseKind {
    let image = broker.replica_manager().image();
    let view = ConfigsView {
        image: &image,
        node_id: broker.config().node_id,
        properties: broker.config().properties(),
    };
    ResponseKind::DescribeConfigs(describe_configs_response(&view, request, version))
}

/// The DescribeConfigs response of the node `view` describes (Kafka's
/// `ConfigHelper.describeConfigs`), at request version `version`.
#[must_use]
pub fn describe_configs_response(
    view: &ConfigsView<'_>,
    request: &DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    if request
        .resources
        .iter()
        .any(|r| !KNOWN_RESOURCE_TYPES.contains(&r.resource_type))
    {
        // Kafka's `DescribeConfigsRequest.getErrorResponse`: every resource gets the code
        // and its default message.
        response.results = request
            .resources
            .iter()
            .map(|r| {
                DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone())
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_static_str(INVALID_REQUEST_MESSAGE)))
            })
            .collect();
        return response;
    }
    let wants = Wants {
        synonyms: request.include_synonyms && version >= 1,
        documentation: request.include_documentation && version >= 3,
    };
    for resource in &request.resources {
        let name = resource.resource_name.as_str();
        let keys = resource.configuration_keys.as_ref();
        let result = match resource.resource_type {
            TOPIC => describe_topic(view, name, keys, wants),
            BROKER => describe_broker(view, name, keys, wants),
            // BROKER_LOGGER and CLIENT_METRICS are not described by krust.
            _ => Err(ResponseError::InvalidRequest.into()),
        };
        let mut out = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        match result {
            // Kafka 3.9 leaves v0's `is_default` false, even for defaults.
            Ok(configs) => out.configs = configs,
            Err(Refusal {
                error: e,
                message: Some(message),
            }) => {
                out.error_code = e.code();
                out.error_message = Some(StrBytes::from_string(message));
            }
            Err(Refusal {
                error: e,
                message: None,
            }) => {
                out.error_code = e.code();
                out.error_message = match e {
                    // Kafka sets only the code for an unknown topic: the message is "".
                    ResponseError::UnknownTopicOrPartition => Some(StrBytes::from_static_str("")),
                    _ if resource.resource_type == BROKER => Some(StrBytes::from_string(format!(
                        "Unexpected broker id, expected {} or empty string, but received {name}",
                        view.node_id
                    ))),
                    _ => Some(StrBytes::from_static_str(INVALID_REQUEST_MESSAGE)),
                };
            }
        }
        response.results.push(out);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java() {
        assert_eq!(java_double_string(0.6), "0.6");
        assert_eq!(java_double_string(0.5), "0.5");
        assert_eq!(java_double_string(2.0), "2.0");
        assert_eq!(java_double_string(1e7), "1.0E7");
        assert_eq!(java_double_string(f64::MAX), "1.7976931348623157E308");
        assert_eq!(java_double_string(1e-4), "1.0E-4");
        assert_eq!(normalize(" 0.60 ", config_type::DOUBLE), "0.6");
        assert_eq!(
            normalize("delete , compact", config_type::LIST),
            "delete,compact"
        );
    }

    #[test]
    fn topic_names_validate_as_kafka() {
        assert_eq!(invalid_topic_reason("orders-1.x_y"), None);
        assert_eq!(invalid_topic_reason(&"x".repeat(249)), None);
        let cases = [
            ("", "the empty string is not allowed"),
            (".", "'.' is not allowed"),
            ("..", "'..' is not allowed"),
            (
                "bad/name",
                "'bad/name' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'",
            ),
        ];
        for (name, reason) in cases {
            assert_eq!(
                invalid_topic_reason(name).as_deref(),
                Some(reason),
                "{name:?}"
            );
        }
        let long = "x".repeat(250);
        assert_eq!(
            invalid_topic_reason(&long),
            Some(format!(
                "the length of '{long}' is longer than the max allowed length 249"
            ))
        );
    }

    #[test]
    fn listener_overrides_stand_for_their_base_config() {
        assert_eq!(
            broker_config_synonyms("listener.name.broker.plain.sasl.jaas.config", true),
            vec![
                "listener.name.broker.plain.sasl.jaas.config",
                "plain.sasl.jaas.config",
                "sasl.jaas.config"
            ]
        );
        assert_eq!(
            broker_config_synonyms("log.retention.hours", false)[0],
            "log.retention.ms"
        );
    }
}
