//! [`KafkaConfig`]: a node's `server.properties` parsed and validated once, as Kafka 3.9's
//! `KafkaConfig` constructor does, then read through typed getters that return the parsed value
//! or Kafka's default. Nothing after start-up parses a config string again.

use std::collections::BTreeMap;

use crate::def::{ConfigDefEntry, ConfigKind};
use crate::error::ConfigException;
use crate::value::ConfigValue;
use crate::{broker_def, parse_type};

/// A node's static config, validated (every key `KafkaConfig` defines parses as its type and
/// passes its validator). Keys Kafka does not define are kept as given.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KafkaConfig {
    /// Every key as written.
    originals: BTreeMap<String, String>,
    /// The parsed value of every set key Kafka defines.
    parsed: BTreeMap<String, ConfigValue>,
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
        let mut parsed = BTreeMap::new();
        for (def, name, raw) in defs {
            parsed.insert(name.to_owned(), def.parse(raw)?);
        }
        let originals = values
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok(Self { originals, parsed })
    }

    /// Every key as written (`AbstractConfig.originals`), known to Kafka or not; a lone
    /// `node.id` or `broker.id` also stands for the other, as in Kafka.
    #[must_use]
    pub fn originals(&self) -> &BTreeMap<String, String> {
        &self.originals
    }

    /// Whether `name` is set.
    #[must_use]
    pub fn is_set(&self, name: &str) -> bool {
        self.originals.contains_key(name)
    }

    /// The parsed value of `name` if set, else Kafka's default (`None` for a null default).
    ///
    /// # Panics
    /// If `name` is not a `KafkaConfig` key: asking for one is a bug in krust, not a user error.
    #[must_use]
    pub fn value(&self, name: &str) -> Option<ConfigValue> {
        let def = broker_def(name).unwrap_or_else(|| panic!("{name} is not a KafkaConfig key"));
        match self.parsed.get(name).cloned() {
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

    /// The value of `name` (set, else Kafka's default) as `T`: `None` for a null default or a
    /// value that does not fit `T` (a negative count read as unsigned).
    ///
    /// # Panics
    /// If `name` is not a `KafkaConfig` key.
    #[must_use]
    pub fn get<T: FromConfigValue>(&self, name: &str) -> Option<T> {
        self.value(name).as_ref().and_then(T::from_config_value)
    }

    /// [`Self::get`], or `default` where that is `None` (a null default, or a value that does
    /// not fit `T`).
    ///
    /// # Panics
    /// If `name` is not a `KafkaConfig` key.
    #[must_use]
    pub fn get_or<T: FromConfigValue>(&self, name: &str, default: T) -> T {
        self.get(name).unwrap_or(default)
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
        self.originals
            .get(name)
            .map(|raw| parse_type(name, raw, kind))
            .transpose()
    }
}

/// A Rust type a parsed config value converts to (see [`KafkaConfig::get`]).
pub trait FromConfigValue: Sized {
    /// The converted value, `None` when it does not fit.
    fn from_config_value(value: &ConfigValue) -> Option<Self>;
}

macro_rules! from_integer_config_value {
    ($($t:ty),*) => {$(
        impl FromConfigValue for $t {
            fn from_config_value(value: &ConfigValue) -> Option<Self> {
                value.as_i64().and_then(|v| <$t>::try_from(v).ok())
            }
        }
    )*};
}
from_integer_config_value!(i16, i32, i64, u16, u32, u64, usize);

impl FromConfigValue for f64 {
    fn from_config_value(value: &ConfigValue) -> Option<Self> {
        value.as_f64()
    }
}

impl FromConfigValue for bool {
    fn from_config_value(value: &ConfigValue) -> Option<Self> {
        value.as_bool()
    }
}

impl FromConfigValue for String {
    fn from_config_value(value: &ConfigValue) -> Option<Self> {
        value.as_str().map(str::to_owned)
    }
}

impl FromConfigValue for Vec<String> {
    fn from_config_value(value: &ConfigValue) -> Option<Self> {
        value.as_list().map(<[String]>::to_vec)
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
        assert_eq!(c.originals().len(), 3);
        assert_eq!(c.get::<u64>("log.retention.hours"), Some(100));
        assert_eq!(c.get::<u64>("log.retention.bytes"), None, "-1 does not fit");
        assert_eq!(c.get::<f64>("log.cleaner.min.cleanable.ratio"), Some(0.5));
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
