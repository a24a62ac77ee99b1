//! DescribeConfigs (32) for topics and this broker (Kafka's `ConfigHelper`): every topic
//! config with its effective value, source and — when asked — synonyms (topic override,
//! dynamic broker, dynamic default, `server.properties`, default); broker configs from the
//! image's dynamic configs and `server.properties`, plus the defaults of the topic configs'
//! broker synonyms.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::server::Broker;
use crate::server::publisher::topic_layers_maps;
use crate::topic_config::{ConfigLayers, TOPIC_CONFIGS, config_source, config_type};

/// `ConfigResource.Type.TOPIC`.
const TOPIC: i8 = 2;
/// `ConfigResource.Type.BROKER`.
const BROKER: i8 = 4;

fn is_sensitive(name: &str) -> bool {
    name.contains("password") || name.ends_with(".secret") || name.contains("sasl.jaas.config")
}

fn entry(
    name: &str,
    value: Option<String>,
    source: i8,
    kind: i8,
    synonyms: Vec<DescribeConfigsSynonym>,
    version: i16,
) -> DescribeConfigsResourceResult {
    let sensitive = is_sensitive(name);
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(if sensitive {
            None
        } else {
            value.map(StrBytes::from_string)
        })
        .with_read_only(false)
        .with_is_default(version == 0 && source == config_source::DEFAULT_CONFIG)
        .with_config_source(source)
        .with_is_sensitive(sensitive)
        .with_synonyms(synonyms)
        .with_config_type(kind)
}

fn describe_topic(
    broker: &Broker,
    name: &str,
    keys: Option<&Vec<StrBytes>>,
    include_synonyms: bool,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, ResponseError> {
    let image = broker.replica_manager().image();
    if image.topics.topic_by_name(name).is_none() {
        return Err(ResponseError::UnknownTopicOrPartition);
    }
    let maps = topic_layers_maps(&image, name, broker.config().node_id);
    let layers = ConfigLayers {
        topic: &maps[0],
        broker_dynamic: &maps[1],
        broker_default: &maps[2],
        static_props: &broker.config().properties,
    };
    let wanted = |n: &str| keys.is_none_or(|k| k.iter().any(|k| k.as_str() == n));
    Ok(TOPIC_CONFIGS
        .iter()
        .filter(|d| wanted(d.name))
        .map(|def| {
            let (value, source) = layers.resolve(def);
            let synonyms = if include_synonyms && version >= 1 {
                layers
                    .synonyms(def)
                    .into_iter()
                    .map(|s| {
                        DescribeConfigsSynonym::default()
                            .with_value(Some(StrBytes::from_string(s.value)))
                            .with_name(StrBytes::from_string(s.name))
                            .with_source(s.source)
                    })
                    .collect()
            } else {
                Vec::new()
            };
            entry(
                def.name,
                Some(value),
                source,
                def.config_type,
                synonyms,
                version,
            )
        })
        .collect())
}

fn describe_broker(
    broker: &Broker,
    resource_name: &str,
    keys: Option<&Vec<StrBytes>>,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, ResponseError> {
    let node_id = broker.config().node_id;
    let image = broker.replica_manager().image();
    let maps = topic_layers_maps(&image, "", node_id);
    let wanted = |n: &str| keys.is_none_or(|k| k.iter().any(|k| k.as_str() == n));
    let mut out: BTreeMap<String, (String, i8)> = BTreeMap::new();
    if resource_name.is_empty() {
        // The cluster-wide dynamic defaults only.
        for (k, v) in &maps[2] {
            out.insert(
                k.clone(),
                (v.clone(), config_source::DYNAMIC_DEFAULT_BROKER_CONFIG),
            );
        }
    } else if resource_name == node_id.to_string() {
        for def in TOPIC_CONFIGS {
            out.insert(
                def.default.0.to_string(),
                (def.default.1.to_string(), config_source::DEFAULT_CONFIG),
            );
        }
        for (k, v) in &broker.config().properties {
            out.insert(k.clone(), (v.clone(), config_source::STATIC_BROKER_CONFIG));
        }
        for (k, v) in &maps[2] {
            out.insert(
                k.clone(),
                (v.clone(), config_source::DYNAMIC_DEFAULT_BROKER_CONFIG),
            );
        }
        for (k, v) in &maps[1] {
            out.insert(k.clone(), (v.clone(), config_source::DYNAMIC_BROKER_CONFIG));
        }
    } else {
        return Err(ResponseError::InvalidRequest);
    }
    Ok(out
        .into_iter()
        .filter(|(k, _)| wanted(k))
        .map(|(k, (v, source))| {
            entry(
                &k,
                Some(v),
                source,
                config_type::STRING,
                Vec::new(),
                version,
            )
        })
        .collect())
}

/// Handles a DescribeConfigs request.
#[must_use]
pub fn describe_configs(
    broker: &Arc<Broker>,
    request: &DescribeConfigsRequest,
    version: i16,
) -> ResponseKind {
    let mut response = DescribeConfigsResponse::default();
    for resource in &request.resources {
        let name = resource.resource_name.as_str();
        let keys = resource.configuration_keys.as_ref();
        let result = match resource.resource_type {
            TOPIC => describe_topic(broker, name, keys, request.include_synonyms, version),
            BROKER => describe_broker(broker, name, keys, version),
            _ => Err(ResponseError::InvalidRequest),
        };
        let mut out = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        match result {
            Ok(configs) => out.configs = configs,
            Err(e) => {
                out.error_code = e.code();
                out.error_message = Some(StrBytes::from_string(match e {
                    ResponseError::UnknownTopicOrPartition => {
                        format!("Topic '{name}' does not exist.")
                    }
                    _ => format!(
                        "Unexpected resource {name} of type {} (expected a topic, broker {} or the empty name)",
                        resource.resource_type,
                        broker.config().node_id
                    ),
                }));
            }
        }
        response.results.push(out);
    }
    ResponseKind::DescribeConfigs(response)
}
