//! Dynamic configs by resource (Kafka's `ConfigurationsImage` / `ConfigurationsDelta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::writer::{RecordSink, emit};
use crate::records::{ConfigRecord, MetadataRecord};

/// `ConfigResource.Type` as stored in `ConfigRecord.ResourceType` (App. A). Kept as the raw
/// code so that a code krust does not know survives a snapshot round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigResourceType(pub i8);

impl ConfigResourceType {
    /// 0.
    pub const UNKNOWN: Self = Self(0);
    /// 2.
    pub const TOPIC: Self = Self(2);
    /// 4; the empty name is the cluster-wide default.
    pub const BROKER: Self = Self(4);
    /// 8.
    pub const BROKER_LOGGER: Self = Self(8);
    /// 16.
    pub const CLIENT_METRICS: Self = Self(16);
}

/// A config resource: type and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigResource {
    /// Resource type.
    pub resource_type: ConfigResourceType,
    /// Resource name (topic name, broker id, or empty for the broker default).
    pub name: String,
}

impl ConfigResource {
    /// The configs of topic `name`.
    #[must_use]
    pub fn topic(name: impl Into<String>) -> Self {
        Self {
            resource_type: ConfigResourceType::TOPIC,
            name: name.into(),
        }
    }
}

/// Configs by resource; a resource without configs is absent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigsImage {
    /// Resource → config name → value.
    pub resources: OrdMap<ConfigResource, OrdMap<String, String>>,
}

impl ConfigsImage {
    /// The configs of `resource` (empty if none).
    #[must_use]
    pub fn configs(&self, resource: &ConfigResource) -> OrdMap<String, String> {
        self.resources.get(resource).cloned().unwrap_or_default()
    }

    pub(crate) fn write(&self, sink: &mut dyn RecordSink) {
        for (resource, configs) in &self.resources {
            for (name, value) in configs {
                emit(
                    sink,
                    MetadataRecord::Config(ConfigRecord {
                        resource_type: resource.resource_type.0,
                        resource_name: resource.name.clone(),
                        name: name.clone(),
                        value: Some(value.clone()),
                        unknown_tagged_fields: Vec::new(),
                    }),
                    0,
                );
            }
        }
    }
}

/// Changes to configs: resource → name → new value (`None` = deleted).
#[derive(Debug, Clone)]
pub struct ConfigsDelta {
    image: Arc<ConfigsImage>,
    changes: BTreeMap<ConfigResource, BTreeMap<String, Option<String>>>,
}

impl ConfigsDelta {
    pub(crate) fn new(image: Arc<ConfigsImage>) -> Self {
        Self {
            image,
            changes: BTreeMap::new(),
        }
    }

    /// Changed configs by resource (`None` = deleted).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<ConfigResource, BTreeMap<String, Option<String>>> {
        &self.changes
    }

    pub(crate) fn replay_config(&mut self, record: &ConfigRecord) {
        let resource = ConfigResource {
            resource_type: ConfigResourceType(record.resource_type),
            name: record.resource_name.clone(),
        };
        self.changes
            .entry(resource)
            .or_default()
            .insert(record.name.clone(), record.value.clone());
    }

    /// Deletes every config of a deleted topic. A topic created and deleted within the delta
    /// leaves no config change behind.
    pub(crate) fn delete_topic_configs(&mut self, topic_name: &str) {
        let resource = ConfigResource::topic(topic_name);
        let existing = self.image.configs(&resource);
        if existing.is_empty() {
            self.changes.remove(&resource);
            return;
        }
        let changes = self.changes.entry(resource).or_default();
        changes.clear();
        for name in existing.keys() {
            changes.insert(name.clone(), None);
        }
    }

    /// Ends a snapshot load: configs the snapshot did not hold are deleted.
    pub(crate) fn finish_snapshot(&mut self) {
        for (resource, configs) in &self.image.resources {
            let changes = self.changes.entry(resource.clone()).or_default();
            for name in configs.keys() {
                changes.entry(name.clone()).or_insert(None);
            }
        }
    }

    pub(crate) fn apply(&self) -> ConfigsImage {
        let mut resources = self.image.resources.clone();
        for (resource, changes) in &self.changes {
            let mut configs = self.image.configs(resource);
            for (name, value) in changes {
                match value {
                    Some(value) => {
                        configs.insert(name.clone(), value.clone());
                    }
                    None => {
                        configs.remove(name);
                    }
                }
            }
            if configs.is_empty() {
                resources.remove(resource);
            } else {
                resources.insert(resource.clone(), configs);
            }
        }
        ConfigsImage { resources }
    }
}
