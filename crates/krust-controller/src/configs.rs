//! IncrementalAlterConfigs for topics and brokers (Kafka 3.9 `ConfigurationControlManager`
//! `incrementalAlterConfigs`, with basic validation): SET, DELETE, APPEND and SUBTRACT on the
//! configs in the image, as `ConfigRecord`s (a `null` value deletes).
//!
//! Kafka validates each value against the config's type; krust knows the types of only the
//! configs the controller itself reads (today `unclean.leader.election.enable`), so other
//! values are stored as given and APPEND/SUBTRACT treat the value as a comma-separated list.

use std::collections::BTreeSet;

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
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

fn alter_resource(
    image: &MetadataImage,
    resource: &AlterConfigsResource,
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    let name = resource.resource_name.to_string();
    let resource_type = ConfigResourceType(resource.resource_type);
    if resource_type == ConfigResourceType::TOPIC {
        if image.topics.topic_by_name(&name).is_none() {
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
                resource.resource_type
            ),
        });
    }
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
        if let Some(v) = &new_value
            && BOOLEAN_CONFIGS.contains(&key.as_str())
            && !matches!(v.to_ascii_lowercase().as_str(), "true" | "false")
        {
            return Err(ControllerError::InvalidConfig {
                reason: format!(
                    "Invalid value {v} for configuration {key}: Expected value to be either true or false"
                ),
            });
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
