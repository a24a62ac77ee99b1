//! Kafka 3.9's config definitions and their validation, in one place below the controller,
//! the broker and the binary.
//!
//! Every `KafkaConfig` (broker), `QuotaConfigs` (dynamic broker quota) and `LogConfig` (topic)
//! key with its type, default, validator, dynamic scope and documentation is generated from
//! Kafka's own jars (`scripts/gen-config-defs/`). On top of that:
//! - [`ConfigDefEntry::parse`]: Kafka's `ConfigDef.parseType` + `Validator.ensureValid`, with
//!   Kafka's messages ([`ConfigException`]);
//! - [`validate_topic_configs`]: `LogConfig.validate`, what the controller runs on every topic
//!   config change (CreateTopics, IncrementalAlterConfigs, AlterConfigs);
//! - [`validate_dynamic_broker_configs`] / [`validate_dynamic_broker_change`]:
//!   `DynamicBrokerConfig.validate`, what a broker runs on a dynamic broker config change.
//!
//! Strings are parsed here and nowhere else: callers get [`ConfigValue`]s or typed structs.
//!
//! # Layout
//! - `def.rs` — [`ConfigDefEntry`], [`ConfigKind`], [`Validator`], [`DynamicScope`].
//! - `defs.rs` — the generated tables.
//! - `value.rs` — parsing and validators; `custom.rs` — Kafka's validator classes.
//! - `validate.rs` — whole-set validation of topic and dynamic broker configs.
//! - `kafka_config.rs` — [`KafkaConfig`]: a node's `server.properties`, validated once, read
//!   through typed getters.
//! - `error.rs` — [`ConfigException`].
//! - `topic_layers.rs` — a topic config's effective value, source and synonyms over the
//!   topic, node, cluster-default and static layers (brokers and the controller).

mod custom;
mod def;
mod defs;
mod error;
mod kafka_config;
pub mod topic_layers;
mod validate;
mod value;

pub use def::{Bound, ConfigDefEntry, ConfigKind, DynamicScope, Validator};
pub use defs::{
    BROKER_CONFIG_DEFS, BROKER_QUOTA_CONFIG_DEFS, INTERNAL_BROKER_CONFIG_DEFS,
    INTERNAL_TOPIC_CONFIG_DEFS, TOPIC_CONFIG_DEFS,
};
pub use error::ConfigException;
pub use kafka_config::{FromConfigValue, KafkaConfig};
pub use validate::{
    BrokerConfigLayers, TopicValidationDefaults, usable_dynamic_broker_configs,
    validate_dynamic_broker_change, validate_dynamic_broker_configs, validate_topic_configs,
};
pub use value::{ConfigValue, ensure_valid, java_double, parse_type};

fn find(table: &'static [ConfigDefEntry], name: &str) -> Option<&'static ConfigDefEntry> {
    table
        .binary_search_by(|d| d.name.cmp(name))
        .ok()
        .map(|i| &table[i])
}

/// The `KafkaConfig` definition of `name` (internal keys included).
#[must_use]
pub fn broker_def(name: &str) -> Option<&'static ConfigDefEntry> {
    find(BROKER_CONFIG_DEFS, name).or_else(|| find(INTERNAL_BROKER_CONFIG_DEFS, name))
}

/// The `LogConfig` definition of `name` (internal keys included).
#[must_use]
pub fn topic_def(name: &str) -> Option<&'static ConfigDefEntry> {
    find(TOPIC_CONFIG_DEFS, name).or_else(|| find(INTERNAL_TOPIC_CONFIG_DEFS, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_by_name_for_lookups() {
        for table in [
            BROKER_CONFIG_DEFS,
            INTERNAL_BROKER_CONFIG_DEFS,
            BROKER_QUOTA_CONFIG_DEFS,
            TOPIC_CONFIG_DEFS,
            INTERNAL_TOPIC_CONFIG_DEFS,
        ] {
            assert!(table.windows(2).all(|w| w[0].name < w[1].name));
        }
    }

    #[test]
    fn every_default_is_valid() {
        for def in BROKER_CONFIG_DEFS.iter().chain(TOPIC_CONFIG_DEFS) {
            if let Some(d) = def.default {
                // A CLASS default names a Java class krust cannot load; it is still a name.
                def.parse(d).unwrap_or_else(|e| panic!("{}: {e}", def.name));
            }
        }
    }
}
