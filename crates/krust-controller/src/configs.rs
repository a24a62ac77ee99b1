//! IncrementalAlterConfigs for topics and brokers (Kafka 3.9 `ConfigurationControlManager`
//! `incrementalAlterConfigs`, with basic validation): SET, DELETE, APPEND and SUBTRACT on the
//! configs in the image, as `ConfigRecord`s (a `null` value deletes). The legacy
//! AlterConfigs (`legacyAlterConfigs`) replaces a resource's whole config set: every given key
//! is set, every other key it had is deleted; validation is the same.
//!
//! Each resource's resulting config set is validated as Kafka's `ControllerConfigurationValidator`
//! does (`krust_config`): a topic's with `LogConfig.validate` (INVALID_CONFIG with Kafka's
//! message), a broker's name. Beyond Kafka's controller, a broker resource's values are also
//! checked as the receiving Kafka broker checks them before forwarding
//! (`DynamicBrokerConfig.validateConfigs`, INVALID_REQUEST), so a request sent straight to the
//! controller cannot store a value no broker would accept.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_config::{
    ConfigDefEntry, ConfigKind, TopicValidationDefaults, validate_dynamic_broker_configs,
    validate_topic_configs,
};
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::records::{ConfigRecord, MetadataRecord};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};

use crate::error::ControllerError;
use crate::topic_names;

/// `AlterConfigOp.OpType.SET`.
const SET: i8 = 0;
/// `AlterConfigOp.OpType.DELETE`.
const DELETE: i8 = 1;
/// `AlterConfigOp.OpType.APPEND`.
const APPEND: i8 = 2;
/// `AlterConfigOp.OpType.SUBTRACT`.
const SUBTRACT: i8 = 3;

/// The records and the response of one IncrementalAlterConfigs. Resources are independent:
/// a refused one writes nothing, the others still apply. `validate_only` writes nothing.
#[must_use]
pub fn incremental_alter_configs(
    image: &MetadataImage,
    request: &IncrementalAlterConfigsRequest,
    defaults: &TopicValidationDefaults,
) -> (Vec<ApiMessageAndVersion>, IncrementalAlterConfigsResponse) {
    let mut records = Vec::new();
    let mut responses = Vec::new();
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<(i8, String)> = request
        .resources
        .iter()
        .map(|r| (r.resource_type, r.resource_name.to_string()))
        .filter(|key| !seen.insert(key.clone()))
        .collect();
    for resource in &request.resources {
        let key = (resource.resource_type, resource.resource_name.to_string());
        let result = if duplicates.contains(&key) {
            Err(ControllerError::InvalidRequest {
                reason: "Duplicate resource.".to_owned(),
            })
        } else {
            alter_resource(image, resource, defaults)
        };
        // Kafka answers success with a null message.
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone())
            .with_error_message(None);
        match result {
            Ok(resource_records) => {
                if !request.validate_only {
                    records.extend(resource_records);
                }
                responses.push(response);
            }
            Err(e) => responses.push(
                response
                    .with_error_code(e.code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            ),
        }
    }
    (
        records,
        IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}

use krust_net::error_codes::UNSUPPORTED_VERSION;

/// Resource type ids Kafka 3.9's `ConfigResource.Type.forId` knows (TOPIC, BROKER,
/// BROKER_LOGGER, CLIENT_METRICS); anything else is `UNKNOWN`.
const KNOWN_RESOURCE_TYPES: [i8; 4] = [2, 4, 8, 16];

/// The records and the response of one legacy AlterConfigs (Kafka 3.9
/// `ControllerApis.handleLegacyAlterConfigs` + `ConfigurationControlManager
/// .legacyAlterConfigs`): each resource's configs become exactly the given ones. An unknown
/// resource type is refused with `UNSUPPORTED_VERSION`; a resource named twice with one
/// `INVALID_REQUEST` ("Duplicate resource.") and neither change applied; refusals come first
/// in the response, as Kafka adds them before the controller's results. Resources are
/// independent; `validate_only` writes nothing.
#[must_use]
pub fn legacy_alter_configs(
    image: &MetadataImage,
    request: &AlterConfigsRequest,
    defaults: &TopicValidationDefaults,
) -> (Vec<ApiMessageAndVersion>, AlterConfigsResponse) {
    use kafka_protocol::messages::alter_configs_request::AlterConfigsResource as LegacyResource;
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyResponse;

    let mut refused = Vec::new();
    // In request order; a slot is emptied when its resource turns out to be duplicated.
    let mut changes: Vec<Option<&LegacyResource>> = Vec::new();
    // Resource → its slot in `changes` (a map, so a huge request stays O(n log n)).
    let mut slots: BTreeMap<(i8, String), usize> = BTreeMap::new();
    let mut duplicates: BTreeSet<(i8, String)> = BTreeSet::new();
    let refusal = |resource: &LegacyResource, code: i16, message: String| {
        LegacyResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone())
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    for resource in &request.resources {
        let key = (resource.resource_type, resource.resource_name.to_string());
        if !KNOWN_RESOURCE_TYPES.contains(&resource.resource_type) {
            refused.push(refusal(
                resource,
                UNSUPPORTED_VERSION,
                format!("Unknown resource type {}.", resource.resource_type),
            ));
        } else if duplicates.contains(&key) {
            // Kafka answers a resource's duplicates once, at the second mention.
        } else if let Some(&i) = slots.get(&key) {
            changes[i] = None;
            duplicates.insert(key);
            refused.push(refusal(
                resource,
                ControllerError::InvalidRequest {
                    reason: String::new(),
                }
                .code(),
                "Duplicate resource.".to_owned(),
            ));
        } else {
            slots.insert(key, changes.len());
            changes.push(Some(resource));
        }
    }
    let mut records = Vec::new();
    let mut responses = refused;
    for resource in changes.into_iter().flatten() {
        let configs: Vec<(String, Option<String>)> = resource
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.value.as_ref().map(ToString::to_string),
                )
            })
            .collect();
        let response = LegacyResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone())
            .with_error_message(None);
        match replace_resource(
            image,
            resource.resource_type,
            &resource.resource_name,
            &configs,
            defaults,
        ) {
            Ok(resource_records) => {
                if !request.validate_only {
                    records.extend(resource_records);
                }
                responses.push(response);
            }
            Err(e) => responses.push(
                response
                    .with_error_code(e.code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            ),
        }
    }
    (
        records,
        AlterConfigsResponse::default().with_responses(responses),
    )
}

/// The `ConfigRecord`s that make `configs` (last value of a repeated key wins, as Kafka's map)
/// the whole config set of one resource (Kafka's `legacyAlterConfigResource`).
fn replace_resource(
    image: &MetadataImage,
    resource_type: i8,
    name: &str,
    configs: &[(String, Option<String>)],
    defaults: &TopicValidationDefaults,
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    let resource = ConfigResource {
        resource_type: ConfigResourceType(resource_type),
        name: name.to_owned(),
    };
    check_handled_type(resource.resource_type)?;
    let current = image.configs.configs(&resource);
    let wanted: BTreeMap<&str, Option<&str>> = configs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    let always = resource.resource_type == ConfigResourceType::BROKER;
    let mut records = Vec::new();
    for (&key, &value) in &wanted {
        // KAFKA-14136: a broker config is written even when unchanged, to make brokers reload.
        if always || current.get(key).map(String::as_str) != value {
            records.push(config_record(
                resource_type,
                name,
                key,
                value.map(str::to_owned),
            ));
        }
    }
    for key in current.keys() {
        if !wanted.contains_key(key.as_str()) {
            records.push(config_record(resource_type, name, key, None));
        }
    }
    let mut all = BTreeMap::new();
    for (&key, &value) in &wanted {
        if let Some(v) = value {
            all.insert(key.to_owned(), v.to_owned());
        }
    }
    let changed: BTreeSet<&str> = wanted.keys().copied().collect();
    validate_resource(image, &resource, &all, &changed, defaults)?;
    Ok(records)
}

fn config_record(
    resource_type: i8,
    name: &str,
    key: &str,
    value: Option<String>,
) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::Config(ConfigRecord {
            resource_type,
            resource_name: name.to_owned(),
            name: key.to_owned(),
            value,
            ..ConfigRecord::default()
        }),
        0,
    )
}

/// The resource types whose configs live in the metadata log.
fn check_handled_type(resource_type: ConfigResourceType) -> Result<(), ControllerError> {
    if resource_type == ConfigResourceType::TOPIC || resource_type == ConfigResourceType::BROKER {
        Ok(())
    } else {
        Err(ControllerError::InvalidRequest {
            reason: format!("Unknown resource type {}", resource_type.0),
        })
    }
}

/// `ControllerConfigurationValidator.validate(resource)`: a topic resource needs a legal
/// topic name, a broker resource `""` or a non-negative integer.
fn check_resource_name(resource: &ConfigResource) -> Result<(), ControllerError> {
    if resource.resource_type == ConfigResourceType::TOPIC {
        if resource.name.is_empty() {
            return Err(ControllerError::InvalidRequest {
                reason: "Default topic resources are not allowed.".to_owned(),
            });
        }
        topic_names::validate(&resource.name)?;
    } else if resource.resource_type == ConfigResourceType::BROKER && !resource.name.is_empty() {
        let id: i32 = resource
            .name
            .parse()
            .map_err(|_| ControllerError::InvalidRequest {
                reason: "Unable to parse broker name as a base 10 number.".to_owned(),
            })?;
        if id < 0 {
            return Err(ControllerError::InvalidRequest {
                reason: "Invalid negative broker ID.".to_owned(),
            });
        }
    }
    Ok(())
}

/// Kafka's `validateAlterConfig` on the resource's whole resulting config set `all`: the name,
/// the values, then that the resource exists (`ConfigResourceExistenceChecker`). A broker
/// resource's check looks at the `changed` keys only: like a Kafka broker, which ignores stored
/// dynamic values it would refuse (`fromPersistentProps`), an earlier bad value does not block
/// a later change.
fn validate_resource(
    image: &MetadataImage,
    resource: &ConfigResource,
    all: &BTreeMap<String, String>,
    changed: &BTreeSet<&str>,
    defaults: &TopicValidationDefaults,
) -> Result<(), ControllerError> {
    check_resource_name(resource)?;
    if resource.resource_type == ConfigResourceType::TOPIC {
        validate_topic_configs(all, defaults)
            .map_err(|e| ControllerError::InvalidConfig { reason: e.message })?;
        if image.topics.topic_by_name(&resource.name).is_none() {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("The topic '{}' does not exist.", resource.name),
            });
        }
    } else {
        let changed_values: BTreeMap<String, String> = all
            .iter()
            .filter(|(k, _)| changed.contains(k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        validate_dynamic_broker_configs(&changed_values, !resource.name.is_empty())
            .map_err(|e| ControllerError::InvalidRequest { reason: e.message })?;
        if !resource.name.is_empty() {
            // `check_resource_name` proved it parses.
            let id: i32 = resource.name.parse().unwrap_or(-1);
            if image.cluster.broker(id).is_none() && !image.cluster.controllers.contains_key(&id) {
                return Err(ControllerError::BrokerIdNotRegistered {
                    reason: format!("No node with id {id} found."),
                });
            }
        }
    }
    Ok(())
}

/// Kafka's definition of `key` for a resource of `resource_type` (`KafkaConfigSchema`).
fn def_of(resource_type: ConfigResourceType, key: &str) -> Option<&'static ConfigDefEntry> {
    if resource_type == ConfigResourceType::TOPIC {
        krust_config::topic_def(key)
    } else {
        krust_config::broker_def(key)
    }
}

/// Whether APPEND and SUBTRACT apply to `key` (`KafkaConfigSchema.isSplittable`: LIST-typed).
fn is_splittable(resource_type: ConfigResourceType, key: &str) -> bool {
    def_of(resource_type, key).is_some_and(|d| d.kind == ConfigKind::List)
}

/// `getParts`: the current value's items, Kafka's default when unset, empty items dropped.
fn list_parts(resource_type: ConfigResourceType, key: &str, value: Option<&str>) -> Vec<String> {
    let default = def_of(resource_type, key).and_then(|d| d.default);
    value
        .or(default)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Kafka's `incrementalAlterConfigResource`: each operation against the current value, then
/// the whole resulting set validated.
fn alter_resource(
    image: &MetadataImage,
    resource: &AlterConfigsResource,
    defaults: &TopicValidationDefaults,
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    let config_resource = ConfigResource {
        resource_type: ConfigResourceType(resource.resource_type),
        name: resource.resource_name.to_string(),
    };
    let resource_type = config_resource.resource_type;
    check_handled_type(resource_type)?;
    let current = image.configs.configs(&config_resource);
    // Kafka keys the operations by name: the last one of a repeated key wins.
    let mut ops: BTreeMap<String, (i8, Option<String>)> = BTreeMap::new();
    for config in &resource.configs {
        ops.insert(
            config.name.to_string(),
            (
                config.config_operation,
                config.value.as_ref().map(ToString::to_string),
            ),
        );
    }
    let mut all: BTreeMap<String, String> = current.clone().into_iter().collect();
    let mut records = Vec::new();
    for (key, (operation, value)) in ops {
        let existing = current.get(&key).cloned();
        let new_value = match operation {
            SET => value,
            DELETE => None,
            APPEND | SUBTRACT => {
                let op = if operation == APPEND {
                    "APPEND"
                } else {
                    "SUBTRACT"
                };
                if !is_splittable(resource_type, &key) {
                    return Err(ControllerError::InvalidConfig {
                        reason: format!("Can't {op} to key {key} because its type is not LIST."),
                    });
                }
                let mut items = list_parts(resource_type, &key, existing.as_deref());
                let given = value.unwrap_or_default();
                for item in given.split(',') {
                    if operation == APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_owned());
                        }
                    } else if let Some(i) = items.iter().position(|i| i == item) {
                        items.remove(i);
                    }
                }
                Some(items.join(","))
            }
            other => {
                return Err(ControllerError::InvalidRequest {
                    reason: format!("Unknown operations type {other}"),
                });
            }
        };
        match &new_value {
            Some(v) => all.insert(key.clone(), v.clone()),
            None => all.remove(&key),
        };
        // KAFKA-14136: a broker config is written even when unchanged, to make brokers reload.
        if new_value != existing || resource_type == ConfigResourceType::BROKER {
            records.push(config_record(
                resource.resource_type,
                &config_resource.name,
                &key,
                new_value,
            ));
        }
    }
    let changed: BTreeSet<&str> = resource.configs.iter().map(|c| c.name.as_str()).collect();
    validate_resource(image, &config_resource, &all, &changed, defaults)?;
    Ok(records)
}
