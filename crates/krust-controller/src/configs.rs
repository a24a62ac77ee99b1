//! IncrementalAlterConfigs for topics and brokers (Kafka 3.9 `ConfigurationControlManager`
//! `incrementalAlterConfigs`, with basic validation): SET, DELETE, APPEND and SUBTRACT on the
//! configs in the image, as `ConfigRecord`s (a `null` value deletes). The legacy
//! AlterConfigs (`legacyAlterConfigs`) replaces a resource's whole config set: every given key
//! is set, every other key it had is deleted; validation is the same.
//!
//! Kafka validates each value against the config's type; krust knows the types of only the
//! configs the controller itself reads (today `unclean.leader.election.enable`), so other
//! values are stored as given and APPEND/SUBTRACT treat the value as a comma-separated list.

use std::collections::BTreeSet;

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::records::{ConfigRecord, MetadataRecord};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};

use crate::error::ControllerError;

/// `AlterConfigOp.OpType.SET`.
const SET: i8 = 0;
/// `AlterConfigOp.OpType.DELETE`.
const DELETE: i8 = 1;
/// `AlterConfigOp.OpType.APPEND`.
const APPEND: i8 = 2;
/// `AlterConfigOp.OpType.SUBTRACT`.
const SUBTRACT: i8 = 3;

/// Boolean configs the controller reads and so validates.
const BOOLEAN_CONFIGS: [&str; 1] = ["unclean.leader.election.enable"];

/// The records and the response of one IncrementalAlterConfigs. Resources are independent:
/// a refused one writes nothing, the others still apply. `validate_only` writes nothing.
#[must_use]
pub fn incremental_alter_configs(
    image: &MetadataImage,
    request: &IncrementalAlterConfigsRequest,
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
            alter_resource(image, resource)
        };
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
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

/// `UNSUPPORTED_VERSION`, Kafka's answer to a resource type id it does not know.
const UNSUPPORTED_VERSION: i16 = 35;

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
) -> (Vec<ApiMessageAndVersion>, AlterConfigsResponse) {
    use kafka_protocol::messages::alter_configs_request::AlterConfigsResource as LegacyResource;
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as LegacyResponse;

    let mut refused = Vec::new();
    // In request order; a slot is emptied when its resource turns out to be duplicated.
    let mut changes: Vec<Option<&LegacyResource>> = Vec::new();
    // Resource → its slot in `changes` (a map, so a huge request stays O(n log n)).
    let mut slots: std::collections::BTreeMap<(i8, String), usize> =
        std::collections::BTreeMap::new();
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
            .with_resource_name(resource.resource_name.clone());
        match replace_resource(
            image,
            resource.resource_type,
            &resource.resource_name,
            &configs,
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
/// the whole config set of one resource.
fn replace_resource(
    image: &MetadataImage,
    resource_type: i8,
    name: &str,
    configs: &[(String, Option<String>)],
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    let resource_type = check_resource(image, resource_type, name)?;
    let current = image.configs.configs(&ConfigResource {
        resource_type,
        name: name.to_owned(),
    });
    let wanted: std::collections::BTreeMap<&str, Option<&str>> = configs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    let mut records = Vec::new();
    for (&key, &value) in &wanted {
        if let Some(v) = value {
            check_value(key, v)?;
        }
        if current.get(key).map(String::as_str) == value {
            continue;
        }
        records.push(config_record(
            resource_type.0,
            name,
            key,
            value.map(str::to_owned),
        ));
    }
    for key in current.keys() {
        if !wanted.contains_key(key.as_str()) {
            records.push(config_record(resource_type.0, name, key, None));
        }
    }
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

/// A value of a config the controller knows the type of must have that type.
fn check_value(key: &str, value: &str) -> Result<(), ControllerError> {
    if BOOLEAN_CONFIGS.contains(&key)
        && !matches!(value.to_ascii_lowercase().as_str(), "true" | "false")
    {
        return Err(ControllerError::InvalidConfig {
            reason: format!(
                "Invalid value {value} for configuration {key}: Expected value to be either true or false"
            ),
        });
    }
    Ok(())
}

/// The resource exists and is one the controller stores configs for.
fn check_resource(
    image: &MetadataImage,
    resource_type: i8,
    name: &str,
) -> Result<ConfigResourceType, ControllerError> {
    let resource_type = ConfigResourceType(resource_type);
    if resource_type == ConfigResourceType::TOPIC {
        if image.topics.topic_by_name(name).is_none() {
            return Err(ControllerError::UnknownTopicOrPartition {
                reason: format!("The topic '{name}' does not exist."),
            });
        }
    } else if resource_type == ConfigResourceType::BROKER {
        if !name.is_empty() {
            let id: i32 = name.parse().map_err(|_| ControllerError::InvalidRequest {
                reason: format!("Illegal non-integral BROKER resource type name {name}"),
            })?;
            if image.cluster.broker(id).is_none() && !image.cluster.controllers.contains_key(&id) {
                return Err(ControllerError::BrokerIdNotRegistered {
                    reason: format!("Broker ID {id} is not currently registered"),
                });
            }
        }
    } else {
        return Err(ControllerError::InvalidRequest {
            reason: format!(
                "The controller does not handle {} config resources",
                resource_type.0
            ),
        });
    }
    Ok(resource_type)
}

fn alter_resource(
    image: &MetadataImage,
    resource: &AlterConfigsResource,
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    let name = resource.resource_name.to_string();
    let resource_type = check_resource(image, resource.resource_type, &name)?;
    let current = image.configs.configs(&ConfigResource {
        resource_type,
        name: name.clone(),
    });
    let mut records = Vec::new();
    for config in &resource.configs {
        let key = config.name.to_string();
        let value = config.value.as_ref().map(ToString::to_string);
        let existing = current.get(&key).cloned();
        let new_value = match config.config_operation {
            SET => Some(value.ok_or_else(|| ControllerError::InvalidRequest {
                reason: format!("Null value not supported for : {key}"),
            })?),
            DELETE => None,
            APPEND | SUBTRACT => {
                let mut items: Vec<String> = existing
                    .iter()
                    .flat_map(|v| v.split(','))
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                let given: Vec<String> = value
                    .iter()
                    .flat_map(|v| v.split(','))
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                if config.config_operation == APPEND {
                    for item in given {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|i| !given.contains(i));
                }
                Some(items.join(","))
            }
            other => {
                return Err(ControllerError::InvalidRequest {
                    reason: format!("Unknown config operation {other} for {key}"),
                });
            }
        };
        if let Some(v) = &new_value {
            check_value(&key, v)?;
        }
        if new_value == existing {
            continue;
        }
        records.push(ApiMessageAndVersion::new(
            MetadataRecord::Config(ConfigRecord {
                resource_type: resource.resource_type,
                resource_name: name.clone(),
                name: key,
                value: new_value,
                ..ConfigRecord::default()
            }),
            0,
        ));
    }
    Ok(records)
}
