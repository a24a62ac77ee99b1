//! Whole-set validation of config changes, as Kafka 3.9 does it:
//! - topic configs (`LogConfig.validate`, run by the controller's
//!   `ControllerConfigurationValidator` for CreateTopics and both AlterConfigs APIs);
//! - dynamic broker configs (`DynamicBrokerConfig.validate`, run by the receiving broker's
//!   `ConfigAdminManager.preprocess` before it forwards the change).

use std::collections::BTreeMap;

use crate::def::{ConfigDefEntry, DynamicScope};
use crate::error::ConfigException;
use crate::{
    BROKER_CONFIG_DEFS, BROKER_QUOTA_CONFIG_DEFS, INTERNAL_BROKER_CONFIG_DEFS,
    INTERNAL_TOPIC_CONFIG_DEFS, TOPIC_CONFIG_DEFS, broker_def, topic_def,
};

/// The broker-level values a topic's configs are validated together with (Kafka merges
/// `KafkaConfig.extractLogConfigMap` under the topic's overrides before parsing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicValidationDefaults {
    /// `log.cleaner.min.compaction.lag.ms`.
    pub min_compaction_lag_ms: i64,
    /// `log.cleaner.max.compaction.lag.ms`.
    pub max_compaction_lag_ms: i64,
}

impl Default for TopicValidationDefaults {
    fn default() -> Self {
        Self {
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// Kafka 3.9 `LogConfig.validate(existing, props, brokerLogConfigs, tieredStorage = false)`
/// on a topic's whole config set after a change. Every failure is `INVALID_CONFIG`.
///
/// # Errors
/// The first failure, with Kafka's message: "Unknown topic config name: x", a value that does
/// not parse or validate (checked in Kafka's definition order), "conflict topic config setting
/// min.compaction.lag.ms (…) > max.compaction.lag.ms (…)", or tiered storage asked for.
pub fn validate_topic_configs(
    configs: &BTreeMap<String, String>,
    defaults: &TopicValidationDefaults,
) -> Result<(), ConfigException> {
    for name in configs.keys() {
        if topic_def(name).is_none() {
            return Err(ConfigException::new(format!(
                "Unknown topic config name: {name}"
            )));
        }
    }
    let mut defs: Vec<&ConfigDefEntry> = TOPIC_CONFIG_DEFS
        .iter()
        .chain(INTERNAL_TOPIC_CONFIG_DEFS)
        .filter(|d| configs.contains_key(d.name))
        .collect();
    defs.sort_by_key(|d| d.order);
    let mut parsed = BTreeMap::new();
    for def in defs {
        let value = def.parse(&configs[def.name])?;
        parsed.insert(def.name, value);
    }
    let long = |name: &str, default: i64| {
        parsed
            .get(name)
            .and_then(crate::ConfigValue::as_i64)
            .unwrap_or(default)
    };
    let min_lag = long("min.compaction.lag.ms", defaults.min_compaction_lag_ms);
    let max_lag = long("max.compaction.lag.ms", defaults.max_compaction_lag_ms);
    if min_lag > max_lag {
        return Err(ConfigException::new(format!(
            "conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )));
    }
    // krust has no tiered storage: `remote.log.storage.system.enable` is always false.
    if parsed
        .get("remote.storage.enable")
        .and_then(crate::ConfigValue::as_bool)
        == Some(true)
    {
        return Err(ConfigException::new(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.",
        ));
    }
    Ok(())
}

/// `SslConfigs.RECONFIGURABLE_CONFIGS` (`DynamicBrokerConfig.DynamicSecurityConfigs`): only
/// settable with a `listener.name.<l>.` prefix.
const DYNAMIC_SECURITY_CONFIGS: [&str; 10] = [
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.certificates",
];

/// `DynamicBrokerConfig.ClusterLevelListenerConfigs`: listener-prefixed yet cluster-wide.
const CLUSTER_LEVEL_LISTENER_CONFIGS: [&str; 3] = [
    "max.connections",
    "max.connection.creation.rate",
    "num.network.threads",
];

/// `listener.name.<l>.<base>` → `<base>` (Kafka's `ListenerConfigRegex`).
fn listener_base(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("listener.name.")?;
    let (listener, base) = rest.split_once('.')?;
    (!listener.contains('.')).then_some(base)
}

/// Scala's `Set(a, b)` as printed in Kafka's messages.
fn scala_set(names: &[&str]) -> String {
    format!("Set({})", names.join(", "))
}

/// Whether `name` can be set dynamically for a broker at all (a dynamic `KafkaConfig` key or a
/// broker quota key); other Kafka keys are read-only.
fn is_dynamic_broker_key(name: &str) -> bool {
    BROKER_QUOTA_CONFIG_DEFS.iter().any(|d| d.name == name)
        || broker_def(name).is_some_and(|d| d.dynamic)
}

/// The defs of every dynamic broker key in the order `DynamicConfig.Broker` parses them.
fn dynamic_broker_defs() -> impl Iterator<Item = &'static ConfigDefEntry> {
    let mut kafka: Vec<&ConfigDefEntry> = BROKER_CONFIG_DEFS.iter().filter(|d| d.dynamic).collect();
    kafka.sort_by_key(|d| d.order);
    let mut quotas: Vec<&ConfigDefEntry> = BROKER_QUOTA_CONFIG_DEFS.iter().collect();
    quotas.sort_by_key(|d| d.order);
    quotas.into_iter().chain(kafka)
}

/// Kafka 3.9 `DynamicBrokerConfig.validateConfigs(props, perBrokerConfig)`: the checks of a
/// dynamic broker config set that do not depend on the broker's current state. `per_broker`
/// is true for a broker resource `"<id>"`, false for the cluster default `""`. Keys Kafka does
/// not know are allowed (custom configs), as in Kafka.
///
/// # Errors
/// Kafka's message: "Cannot update these configs dynamically: Set(…)", "These security configs
/// can be dynamically updated only per-listener using the listener prefix: Set(…)", a value
/// that does not parse or validate, "Cannot update these configs at default cluster level,
/// broker id must be specified: Set(…)". A receiving broker answers `INVALID_REQUEST` with it.
pub fn validate_dynamic_broker_configs(
    props: &BTreeMap<String, String>,
    per_broker: bool,
) -> Result<(), ConfigException> {
    let read_only: Vec<&str> = props
        .keys()
        .map(String::as_str)
        .filter(|k| {
            (broker_def(k).is_some() || INTERNAL_BROKER_CONFIG_DEFS.iter().any(|d| d.name == *k))
                && !is_dynamic_broker_key(k)
        })
        .collect();
    if !read_only.is_empty() {
        return Err(ConfigException::new(format!(
            "Cannot update these configs dynamically: {}",
            scala_set(&read_only)
        )));
    }
    let unprefixed: Vec<&str> = DYNAMIC_SECURITY_CONFIGS
        .iter()
        .copied()
        .filter(|k| props.contains_key(*k))
        .collect();
    if !unprefixed.is_empty() {
        return Err(ConfigException::new(format!(
            "These security configs can be dynamically updated only per-listener using the listener prefix: HashSet({})",
            unprefixed.join(", ")
        )));
    }
    // `validateConfigTypes`: listener-prefixed keys are parsed as their base key.
    let mut base: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in props {
        base.insert(listener_base(k).unwrap_or(k), v);
    }
    for def in dynamic_broker_defs() {
        if let Some(value) = base.get(def.name) {
            def.parse(value)?;
        }
    }
    if !per_broker {
        let per_broker_keys: Vec<&str> = props
            .keys()
            .map(String::as_str)
            .filter(|k| match listener_base(k) {
                Some(base) => !CLUSTER_LEVEL_LISTENER_CONFIGS.contains(&base),
                None => broker_def(k).is_some_and(|d| d.scope == DynamicScope::PerBroker),
            })
            .collect();
        if !per_broker_keys.is_empty() {
            return Err(ConfigException::new(format!(
                "Cannot update these configs at default cluster level, broker id must be specified: {}",
                scala_set(&per_broker_keys)
            )));
        }
    }
    Ok(())
}

/// Kafka 3.9 `DynamicBrokerConfig.fromPersistentProps` (less password decoding): the stored
/// dynamic configs of a broker resource with every entry Kafka would ignore removed — values
/// that do not validate, read-only keys, unprefixed security keys, and per-broker keys at the
/// cluster default. A change is validated over what remains, so a bad value stored by an older
/// build never blocks a later change.
#[must_use]
pub fn usable_dynamic_broker_configs(
    stored: &BTreeMap<String, String>,
    per_broker: bool,
) -> BTreeMap<String, String> {
    stored
        .iter()
        .filter(|(k, v)| {
            let one = BTreeMap::from([((*k).clone(), (*v).clone())]);
            validate_dynamic_broker_configs(&one, per_broker).is_ok()
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The dynamic broker configs whose change Kafka's reconfigurables check against the broker's
/// current value (`DynamicThreadPool`, `LogCleaner`).
const THREAD_POOL_CONFIGS: [&str; 4] = [
    "num.io.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
    "background.threads",
];

/// The layers of a broker's config that a dynamic change is applied over.
#[derive(Debug, Clone, Default)]
pub struct BrokerConfigLayers<'a> {
    /// `server.properties`.
    pub static_props: BTreeMap<&'a str, &'a str>,
    /// The cluster default (`ConfigResource` broker `""`).
    pub dynamic_default: BTreeMap<&'a str, &'a str>,
    /// This broker's own (`ConfigResource` broker `"<id>"`).
    pub dynamic_broker: BTreeMap<&'a str, &'a str>,
}

impl BrokerConfigLayers<'_> {
    /// The effective raw value of `name`: the per-broker value, then the default, then static.
    fn effective(&self, name: &str) -> Option<&str> {
        self.dynamic_broker
            .get(name)
            .or_else(|| self.dynamic_default.get(name))
            .or_else(|| self.static_props.get(name))
            .copied()
    }
}

fn int_value(name: &str, raw: Option<&str>) -> i64 {
    let def = broker_def(name);
    raw.or_else(|| def.and_then(|d| d.default))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Kafka 3.9 `DynamicBrokerConfig.validate(props, perBrokerConfig)`: [`validate_dynamic_broker_configs`],
/// then the reconfigurables' checks of the new values against the broker's current ones
/// (thread pools may at most halve or double; log cleaner threads likewise, and at least 1).
/// `props` is the resource's whole new dynamic config set.
///
/// # Errors
/// As [`validate_dynamic_broker_configs`], or a reconfigurable's refusal wrapped as Kafka
/// wraps it ("Invalid value org.apache.kafka.common.config.ConfigException: … for
/// configuration Invalid dynamic configuration").
pub fn validate_dynamic_broker_change(
    props: &BTreeMap<String, String>,
    per_broker: bool,
    current: &BrokerConfigLayers<'_>,
) -> Result<(), ConfigException> {
    validate_dynamic_broker_configs(props, per_broker)?;
    // The new effective config: Kafka's `validatedKafkaProps` (a per-broker change is layered
    // over the cluster default; a default change stays under the broker's own values).
    let mut next = current.clone();
    let given: BTreeMap<&str, &str> = props
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if per_broker {
        next.dynamic_broker = given;
    } else {
        next.dynamic_default = given;
    }
    // Kafka wraps a reconfigurable's refusal as `new ConfigException("Invalid dynamic
    // configuration", e)`: the (name, value) constructor, so the message reads oddly but is
    // Kafka's, word for word.
    let invalid = |inner: String| {
        ConfigException::invalid(
            "Invalid dynamic configuration",
            &format!("org.apache.kafka.common.config.ConfigException: {inner}"),
            None,
        )
    };
    for name in THREAD_POOL_CONFIGS {
        let old = int_value(name, current.effective(name));
        let new = int_value(name, next.effective(name));
        if new == old {
            continue;
        }
        let what = format!("Dynamic thread count update validation failed for {name}={new}");
        if new <= 0 {
            return Err(invalid(format!("{what}, value should be at least 1")));
        }
        if new < old / 2 {
            return Err(invalid(format!(
                "{what}, value should be at least half the current value {old}"
            )));
        }
        if new > old * 2 {
            return Err(invalid(format!(
                "{what}, value should not be greater than double the current value {old}"
            )));
        }
    }
    let name = "log.cleaner.threads";
    let old = int_value(name, current.effective(name));
    let new = int_value(name, next.effective(name));
    if new != old {
        if new < 1 {
            return Err(invalid(
                "Log cleaner threads should be at least 1".to_owned(),
            ));
        }
        if new < old / 2 {
            return Err(invalid(format!(
                "Log cleaner threads cannot be reduced to less than half the current value {old}"
            )));
        }
        if new > old * 2 {
            return Err(invalid(format!(
                "Log cleaner threads cannot be increased to more than double the current value {old}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn topic_error(pairs: &[(&str, &str)]) -> String {
        validate_topic_configs(&props(pairs), &TopicValidationDefaults::default())
            .expect_err("refused")
            .message
    }

    #[test]
    fn topic_configs_are_refused_with_kafkas_messages() {
        for (pairs, message) in [
            (
                vec![("retention.ms", "not-a-number")],
                "Invalid value not-a-number for configuration retention.ms: Not a number of type LONG",
            ),
            (
                vec![("retention.ms", "-5")],
                "Invalid value -5 for configuration retention.ms: Value must be at least -1",
            ),
            (
                vec![("cleanup.policy", "bogus")],
                "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete",
            ),
            (
                vec![("segment.bytes", "10")],
                "Invalid value 10 for configuration segment.bytes: Value must be at least 14",
            ),
            (
                vec![("min.insync.replicas", "0")],
                "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
            ),
            (
                vec![("no.such.config", "1")],
                "Unknown topic config name: no.such.config",
            ),
            (
                vec![
                    ("min.compaction.lag.ms", "10"),
                    ("max.compaction.lag.ms", "5"),
                ],
                "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
            ),
        ] {
            assert_eq!(topic_error(&pairs), message, "{pairs:?}");
        }
    }

    #[test]
    fn valid_topic_configs_pass() {
        validate_topic_configs(
            &props(&[
                ("retention.ms", "-1"),
                ("cleanup.policy", "compact,delete"),
                ("compression.type", "zstd"),
                ("min.cleanable.dirty.ratio", "0.5"),
            ]),
            &TopicValidationDefaults::default(),
        )
        .expect("valid");
    }

    #[test]
    fn broker_configs_are_refused_with_kafkas_messages() {
        let error = |pairs: &[(&str, &str)], per_broker| {
            validate_dynamic_broker_configs(&props(pairs), per_broker)
                .expect_err("refused")
                .message
        };
        assert_eq!(
            error(&[("log.retention.ms", "abc")], true),
            "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"
        );
        assert_eq!(
            error(&[("log.cleaner.threads", "-1")], false),
            "Invalid value -1 for configuration log.cleaner.threads: Value must be at least 0"
        );
        assert_eq!(
            error(&[("broker.id", "3")], true),
            "Cannot update these configs dynamically: Set(broker.id)"
        );
        assert_eq!(
            error(
                &[("listener.name.plaintext.ssl.keystore.location", "/x")],
                false
            ),
            "Cannot update these configs at default cluster level, broker id must be specified: Set(listener.name.plaintext.ssl.keystore.location)"
        );
        validate_dynamic_broker_configs(&props(&[("no.such.config", "1")]), true)
            .expect("custom configs are allowed");
    }

    #[test]
    fn thread_pools_may_at_most_halve_or_double() {
        let layers = BrokerConfigLayers::default();
        let change = |v: &str| {
            validate_dynamic_broker_change(&props(&[("num.io.threads", v)]), true, &layers)
        };
        assert!(change("16").is_ok());
        assert_eq!(
            change("17").expect_err("more than double").message,
            "Invalid value org.apache.kafka.common.config.ConfigException: Dynamic thread count update validation failed for num.io.threads=17, value should not be greater than double the current value 8 for configuration Invalid dynamic configuration"
        );
        assert!(change("3").is_err());
    }
}
