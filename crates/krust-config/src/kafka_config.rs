//! [`KafkaConfig`]: a node's `server.properties` parsed and validated once, as Kafka 3.9's
//! `KafkaConfig` constructor does, then read through typed getters that return the parsed value
//! or Kafka's default. Nothing after start-up parses a config string again.

use std::collections::BTreeMap;

use crate::def::{ConfigDefEntry, ConfigKind};
use crate::error::ConfigException;
use crate::value::ConfigValue;
use crate::{broker_def, parse_type};

/// One set key: the text as written and, for a key Kafka defines, its parsed value.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    raw: String,
    parsed: Option<ConfigValue>,
}

/// A node's static config, validated (every key `KafkaConfig` defines parses as its type and
/// passes its validator). Keys Kafka does not define are kept as given.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KafkaConfig {
    entries: BTreeMap<String, Entry>,
}

impl KafkaConfig {
    /// Kafka's `ConfigDef.parse` over `props`: the first failure in Kafka's definition order is
    /// the error. A lone `node.id` is also read as `broker.id` and the other way round, as
    /// Kafka copies one into the other before parsing (so a bad lone `node.id` is reported as
    /// `broker.id`, which is defined first).
    ///
    /// # Errors
    /// Kafka's `ConfigException` message, naming the key.
    pub fn parse(props: &BTreeMap<String, String>) -> Result<Self, ConfigException> {
        let mut values: BTreeMap<&str, &str> = props
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        for (from, to) in [("node.id", "broker.id"), ("broker.id", "node.id")] {
            if let Some(&v) = values.get(from) {
                values.entry(to).or_insert(v);
            }
        }
        let mut defs: Vec<(&ConfigDefEntry, &str, &str)> = values
            .iter()
            .filter_map(|(k, v)| Some((broker_def(k)?, *k, *v)))
            .collect();
        defs.sort_by_key(|(d, _, _)| d.order);
        let mut entries = BTreeMap::new();
        for (def, name, raw) in defs {
            let parsed = def.parse(raw)?;
            entries.insert(
                name.to_owned(),
                Entry {
                    raw: raw.to_owned(),
                    parsed: Some(parsed),
                },
            );
        }
        for (name, raw) in values {
            entries.entry(name.to_owned()).or_insert_with(|| Entry {
                raw: raw.to_owned(),
                parsed: None,
            });
        }
        Ok(Self { entries })
    }

    /// Every key as written (`AbstractConfig.originals`), known to Kafka or not.
    pub fn originals(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(k, e)| (k.as_str(), e.raw.as_str()))
    }

    /// The keys as written, as a map (DescribeConfigs' static layer).
    #[must_use]
    pub fn originals_map(&self) -> BTreeMap<String, String> {
        self.originals()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Whether `name` is set.
    #[must_use]
    pub fn is_set(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The parsed value of `name` if set, else Kafka's default (`None` for a null default).
    ///
    /// # Panics
    /// If `name` is not a `KafkaConfig` key: asking for one is a bug in krust, not a user error.
    #[must_use]
    pub fn value(&self, name: &str) -> Option<ConfigValue> {
        let def = broker_def(name).unwrap_or_else(|| panic!("{name} is not a KafkaConfig key"));
        match self.entries.get(name).and_then(|e| e.parsed.clone()) {
            Some(v) => Some(v),
            None => def.default_value(),
        }
    }

    fn typed<T>(
        &self,
        name: &str,
        kind: ConfigKind,
        get: impl Fn(&ConfigValue) -> Option<T>,
    ) -> Option<T> {
        let def = broker_def(name).unwrap_or_else(|| panic!("{name} is not a KafkaConfig key"));
        assert_eq!(def.kind, kind, "{name} is a {:?}", def.kind);
        self.value(name).as_ref().and_then(get)
    }

    /// An INT key (`None` only for a null default).
    ///
    /// # Panics
    /// If `name` is not an INT `KafkaConfig` key.
    #[must_use]
    pub fn int(&self, name: &str) -> Option<i32> {
        self.typed(name, ConfigKind::Int, |v| match v {
            ConfigValue::Int(i) => Some(*i),
            _ => None,
        })
    }

    /// A SHORT key.
    ///
    /// # Panics
    /// If `name` is not a SHORT `KafkaConfig` key.
    #[must_use]
    pub fn short(&self, name: &str) -> Option<i16> {
        self.typed(name, ConfigKind::Short, |v| match v {
            ConfigValue::Short(i) => Some(*i),
            _ => None,
        })
    }

    /// A LONG key.
    ///
    /// # Panics
    /// If `name` is not a LONG `KafkaConfig` key.
    #[must_use]
    pub fn long(&self, name: &str) -> Option<i64> {
        self.typed(name, ConfigKind::Long, |v| match v {
            ConfigValue::Long(i) => Some(*i),
            _ => None,
        })
    }

    /// A BOOLEAN key.
    ///
    /// # Panics
    /// If `name` is not a BOOLEAN `KafkaConfig` key.
    #[must_use]
    pub fn boolean(&self, name: &str) -> Option<bool> {
        self.typed(name, ConfigKind::Boolean, ConfigValue::as_bool)
    }

    /// A DOUBLE key.
    ///
    /// # Panics
    /// If `name` is not a DOUBLE `KafkaConfig` key.
    #[must_use]
    pub fn double(&self, name: &str) -> Option<f64> {
        self.typed(name, ConfigKind::Double, |v| match v {
            ConfigValue::Double(d) => Some(*d),
            _ => None,
        })
    }

    /// A STRING (or PASSWORD, CLASS) key, trimmed.
    ///
    /// # Panics
    /// If `name` is not a `KafkaConfig` key of a string kind.
    #[must_use]
    pub fn string(&self, name: &str) -> Option<String> {
        let def = broker_def(name).unwrap_or_else(|| panic!("{name} is not a KafkaConfig key"));
        assert!(
            matches!(
                def.kind,
                ConfigKind::String | ConfigKind::Password | ConfigKind::Class
            ),
            "{name} is a {:?}",
            def.kind
        );
        self.value(name)
            .as_ref()
            .and_then(|v| v.as_str().map(str::to_owned))
    }

    /// A LIST key's items (empty for a null default).
    ///
    /// # Panics
    /// If `name` is not a LIST `KafkaConfig` key.
    #[must_use]
    pub fn list(&self, name: &str) -> Vec<String> {
        self.typed(name, ConfigKind::List, |v| {
            v.as_list().map(<[String]>::to_vec)
        })
        .unwrap_or_default()
    }

    /// A key Kafka does not define (a krust addition such as `metrics.port`), parsed as `kind`.
    ///
    /// # Errors
    /// Kafka's message for a value of the wrong type.
    pub fn extra(
        &self,
        name: &str,
        kind: ConfigKind,
    ) -> Result<Option<ConfigValue>, ConfigException> {
        self.entries
            .get(name)
            .map(|e| parse_type(name, &e.raw, kind))
            .transpose()
    }
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

    #[test]
    fn values_are_typed_with_kafkas_defaults() {
        let c = KafkaConfig::parse(&props(&[
            ("log.retention.hours", " 100 "),
            ("log.cleanup.policy", "delete , compact"),
            ("metrics.port", "9404"),
        ]))
        .expect("valid");
        assert_eq!(c.int("log.retention.hours"), Some(100));
        assert_eq!(c.long("log.retention.ms"), None, "a null default");
        assert_eq!(c.int("num.partitions"), Some(1), "Kafka's default");
        assert_eq!(c.list("log.cleanup.policy"), vec!["delete", "compact"]);
        assert_eq!(c.boolean("auto.create.topics.enable"), Some(true));
        assert_eq!(
            c.extra("metrics.port", ConfigKind::Int).expect("an int"),
            Some(ConfigValue::Int(9404))
        );
        assert_eq!(c.originals().count(), 3);
    }

    #[test]
    fn the_first_bad_value_in_definition_order_is_reported() {
        let e = KafkaConfig::parse(&props(&[("node.id", "x")])).expect_err("bad");
        assert_eq!(
            e.message,
            "Invalid value x for configuration broker.id: Not a number of type INT"
        );
    }
}
