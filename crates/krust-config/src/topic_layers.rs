//! Topic configs as Kafka 3.9 resolves them (`LogConfig`, `ServerTopicConfigSynonyms`,
//! `KafkaConfigSchema.resolveEffectiveTopicConfig`): a topic override, else the node's
//! dynamic config, else the dynamic cluster default (`ConfigResource` broker `""`), else the
//! static `server.properties` synonym (`log.retention.hours`, …), else Kafka's default — with
//! each value's source and synonyms. Used by brokers (to open logs, DescribeConfigs) and the
//! controller (a created topic's configs in CreateTopics).

use std::collections::BTreeMap;

use crate::{BROKER_CONFIG_DEFS, ConfigDefEntry};

/// DescribeConfigs `config_type` codes (Kafka's `ConfigType`).
pub mod config_type {
    /// `BOOLEAN`.
    pub const BOOLEAN: i8 = 1;
    /// `STRING`.
    pub const STRING: i8 = 2;
    /// `INT`.
    pub const INT: i8 = 3;
    /// `LONG`.
    pub const LONG: i8 = 5;
    /// `DOUBLE`.
    pub const DOUBLE: i8 = 6;
    /// `LIST`.
    pub const LIST: i8 = 7;
}

/// DescribeConfigs `config_source` codes (Kafka's `ConfigSource`).
pub mod config_source {
    /// `TOPIC_CONFIG`: a topic override.
    pub const TOPIC_CONFIG: i8 = 1;
    /// `DYNAMIC_BROKER_CONFIG`: set for this broker through the controller.
    pub const DYNAMIC_BROKER_CONFIG: i8 = 2;
    /// `DYNAMIC_DEFAULT_BROKER_CONFIG`: the cluster-wide broker default.
    pub const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
    /// `STATIC_BROKER_CONFIG`: `server.properties`.
    pub const STATIC_BROKER_CONFIG: i8 = 4;
    /// `DEFAULT_CONFIG`: Kafka's built-in default.
    pub const DEFAULT_CONFIG: i8 = 5;
}

/// A broker config that stands in for a topic config, with the factor from its unit to the
/// topic config's (hours → ms is 3 600 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synonym {
    /// Broker config name.
    pub name: &'static str,
    /// Multiplier to the topic config's unit.
    pub factor: i64,
}

/// One topic config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicConfigDef {
    /// Topic config name.
    pub name: &'static str,
    /// Broker synonyms, highest priority first.
    pub synonyms: &'static [Synonym],
    /// Kafka's default, as `(synonym holding it, value in that synonym's unit)`; for configs
    /// without a synonym the synonym name is the topic config's own.
    pub default: (&'static str, &'static str),
    /// `config_type`.
    pub config_type: i8,
}

const fn syn(name: &'static str) -> Synonym {
    Synonym { name, factor: 1 }
}

const HOURS: i64 = 3_600_000;
const MINUTES: i64 = 60_000;
const LONG_MAX: &str = "9223372036854775807";

/// Kafka 3.9's topic configs (`TopicConfig`), by name.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        synonyms: &[syn("log.cleanup.policy")],
        default: ("log.cleanup.policy", "delete"),
        config_type: config_type::LIST,
    },
    TopicConfigDef {
        name: "compression.gzip.level",
        synonyms: &[syn("compression.gzip.level")],
        default: ("compression.gzip.level", "-1"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "compression.lz4.level",
        synonyms: &[syn("compression.lz4.level")],
        default: ("compression.lz4.level", "9"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "compression.type",
        synonyms: &[syn("compression.type")],
        default: ("compression.type", "producer"),
        config_type: config_type::STRING,
    },
    TopicConfigDef {
        name: "compression.zstd.level",
        synonyms: &[syn("compression.zstd.level")],
        default: ("compression.zstd.level", "3"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        synonyms: &[syn("log.cleaner.delete.retention.ms")],
        default: ("log.cleaner.delete.retention.ms", "86400000"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "file.delete.delay.ms",
        synonyms: &[syn("log.segment.delete.delay.ms")],
        default: ("log.segment.delete.delay.ms", "60000"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "flush.messages",
        synonyms: &[syn("log.flush.interval.messages")],
        default: ("log.flush.interval.messages", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "flush.ms",
        synonyms: &[
            syn("log.flush.interval.ms"),
            syn("log.flush.scheduler.interval.ms"),
        ],
        default: ("log.flush.scheduler.interval.ms", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "follower.replication.throttled.replicas",
        synonyms: &[],
        default: ("follower.replication.throttled.replicas", ""),
        config_type: config_type::LIST,
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        synonyms: &[syn("log.index.interval.bytes")],
        default: ("log.index.interval.bytes", "4096"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "leader.replication.throttled.replicas",
        synonyms: &[],
        default: ("leader.replication.throttled.replicas", ""),
        config_type: config_type::LIST,
    },
    TopicConfigDef {
        name: "local.retention.bytes",
        synonyms: &[syn("log.local.retention.bytes")],
        default: ("log.local.retention.bytes", "-2"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "local.retention.ms",
        synonyms: &[syn("log.local.retention.ms")],
        default: ("log.local.retention.ms", "-2"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        synonyms: &[syn("log.cleaner.max.compaction.lag.ms")],
        default: ("log.cleaner.max.compaction.lag.ms", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "max.message.bytes",
        synonyms: &[syn("message.max.bytes")],
        default: ("message.max.bytes", "1048588"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "message.downconversion.enable",
        synonyms: &[syn("log.message.downconversion.enable")],
        default: ("log.message.downconversion.enable", "true"),
        config_type: config_type::BOOLEAN,
    },
    TopicConfigDef {
        name: "message.format.version",
        synonyms: &[syn("log.message.format.version")],
        default: ("log.message.format.version", "3.0-IV1"),
        config_type: config_type::STRING,
    },
    TopicConfigDef {
        name: "message.timestamp.after.max.ms",
        synonyms: &[syn("log.message.timestamp.after.max.ms")],
        default: ("log.message.timestamp.after.max.ms", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "message.timestamp.before.max.ms",
        synonyms: &[syn("log.message.timestamp.before.max.ms")],
        default: ("log.message.timestamp.before.max.ms", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "message.timestamp.difference.max.ms",
        synonyms: &[syn("log.message.timestamp.difference.max.ms")],
        default: ("log.message.timestamp.difference.max.ms", LONG_MAX),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        synonyms: &[syn("log.message.timestamp.type")],
        default: ("log.message.timestamp.type", "CreateTime"),
        config_type: config_type::STRING,
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        synonyms: &[syn("log.cleaner.min.cleanable.ratio")],
        default: ("log.cleaner.min.cleanable.ratio", "0.5"),
        config_type: config_type::DOUBLE,
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        synonyms: &[syn("log.cleaner.min.compaction.lag.ms")],
        default: ("log.cleaner.min.compaction.lag.ms", "0"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        synonyms: &[syn("min.insync.replicas")],
        default: ("min.insync.replicas", "1"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "preallocate",
        synonyms: &[syn("log.preallocate")],
        default: ("log.preallocate", "false"),
        config_type: config_type::BOOLEAN,
    },
    TopicConfigDef {
        name: "remote.log.copy.disable",
        synonyms: &[],
        default: ("remote.log.copy.disable", "false"),
        config_type: config_type::BOOLEAN,
    },
    TopicConfigDef {
        name: "remote.log.delete.on.disable",
        synonyms: &[],
        default: ("remote.log.delete.on.disable", "false"),
        config_type: config_type::BOOLEAN,
    },
    TopicConfigDef {
        name: "remote.storage.enable",
        synonyms: &[],
        default: ("remote.storage.enable", "false"),
        config_type: config_type::BOOLEAN,
    },
    TopicConfigDef {
        name: "retention.bytes",
        synonyms: &[syn("log.retention.bytes")],
        default: ("log.retention.bytes", "-1"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "retention.ms",
        synonyms: &[
            syn("log.retention.ms"),
            Synonym {
                name: "log.retention.minutes",
                factor: MINUTES,
            },
            Synonym {
                name: "log.retention.hours",
                factor: HOURS,
            },
        ],
        default: ("log.retention.hours", "168"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "segment.bytes",
        synonyms: &[syn("log.segment.bytes")],
        default: ("log.segment.bytes", "1073741824"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        synonyms: &[syn("log.index.size.max.bytes")],
        default: ("log.index.size.max.bytes", "10485760"),
        config_type: config_type::INT,
    },
    TopicConfigDef {
        name: "segment.jitter.ms",
        synonyms: &[
            syn("log.roll.jitter.ms"),
            Synonym {
                name: "log.roll.jitter.hours",
                factor: HOURS,
            },
        ],
        default: ("log.roll.jitter.hours", "0"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "segment.ms",
        synonyms: &[
            syn("log.roll.ms"),
            Synonym {
                name: "log.roll.hours",
                factor: HOURS,
            },
        ],
        default: ("log.roll.hours", "168"),
        config_type: config_type::LONG,
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        synonyms: &[syn("unclean.leader.election.enable")],
        default: ("unclean.leader.election.enable", "false"),
        config_type: config_type::BOOLEAN,
    },
];

/// The definition of topic config `name`.
#[must_use]
pub fn topic_config_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Kafka's definition of broker config `name` (`KafkaConfig`), if it is one.
#[must_use]
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDefEntry> {
    BROKER_CONFIG_DEFS
        .binary_search_by(|d| d.name.cmp(name))
        .ok()
        .and_then(|i| BROKER_CONFIG_DEFS.get(i))
}

/// The broker configs a broker config stands for, itself included, highest priority first
/// (Kafka's `DynamicBrokerConfig.brokerConfigSynonyms`). With `match_listener_override`,
/// `listener.name.<l>.<config>` also stands for `<config>` (and `listener.name.<l>.<mechanism>.<config>`
/// for `<mechanism>.<config>` and `<config>`).
#[must_use]
pub fn broker_config_synonyms(name: &str, match_listener_override: bool) -> Vec<String> {
    const ROLL: [&str; 2] = ["log.roll.ms", "log.roll.hours"];
    const JITTER: [&str; 2] = ["log.roll.jitter.ms", "log.roll.jitter.hours"];
    const RETENTION: [&str; 3] = [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ];
    let own = |names: &[&str]| names.iter().map(|s| (*s).to_string()).collect();
    if ROLL.contains(&name) {
        return own(&ROLL);
    }
    if JITTER.contains(&name) {
        return own(&JITTER);
    }
    if RETENTION.contains(&name) {
        return own(&RETENTION);
    }
    if name == "log.flush.interval.ms" {
        // Kafka uses log.flush.scheduler.interval.ms as its default.
        return own(&["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]);
    }
    if match_listener_override
        && let Some(rest) = name.strip_prefix("listener.name.")
        && let Some((_, base)) = rest.split_once('.')
    {
        let mechanism = base.split_once('.').map_or(base, |(_, c)| c);
        return vec![name.to_string(), base.to_string(), mechanism.to_string()];
    }
    vec![name.to_string()]
}

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonymValue {
    /// Config name (the topic's or a broker synonym).
    pub name: String,
    /// Value as set (in the synonym's unit).
    pub value: String,
    /// `config_source`.
    pub source: i8,
}

/// The layers a topic config resolves through.
#[derive(Debug, Clone, Copy)]
pub struct ConfigLayers<'a> {
    /// The topic's overrides (from the image).
    pub topic: &'a BTreeMap<String, String>,
    /// This broker's dynamic configs (image resource broker `<id>`).
    pub broker_dynamic: &'a BTreeMap<String, String>,
    /// The cluster-wide dynamic broker defaults (image resource broker `""`).
    pub broker_default: &'a BTreeMap<String, String>,
    /// `server.properties`.
    pub static_props: &'a BTreeMap<String, String>,
}

impl ConfigLayers<'_> {
    /// This broker's effective broker configs as Kafka's `DynamicBrokerConfig` builds them:
    /// `server.properties`, overridden by the dynamic cluster defaults, overridden by this
    /// broker's dynamic configs, where each dynamic key first removes its synonyms from the
    /// layers below (a dynamic default `log.retention.ms` hides a static
    /// `log.retention.hours`, which then reads as its default).
    #[must_use]
    pub fn effective_broker_props(&self) -> BTreeMap<String, String> {
        let mut props = self.static_props.clone();
        for layer in [self.broker_default, self.broker_dynamic] {
            for (k, v) in layer {
                for synonym in broker_config_synonyms(k, false) {
                    props.remove(&synonym);
                }
                props.insert(k.clone(), v.clone());
            }
        }
        props
    }

    /// This broker's effective value of broker config `name` (see
    /// [`Self::effective_broker_props`]); `None` when unset (Kafka's default applies).
    #[must_use]
    pub fn broker_value(&self, name: &str) -> Option<String> {
        self.effective_broker_props().remove(name)
    }

    /// Kafka's synonym list for a DescribeConfigs entry (`ConfigHelper.configSynonyms`):
    /// every name of `names` set in this broker's dynamic configs, then in the dynamic
    /// defaults, then in `server.properties`, then with a non-null Kafka default — layer by
    /// layer, not name by name — and then everything ahead of the first entry called
    /// `target` is dropped. So a topic's `retention.ms` (target `log.retention.ms`) whose
    /// only broker synonym is the default `log.retention.hours=168` has no broker synonym
    /// at all, as in Kafka 3.9.
    #[must_use]
    pub fn broker_synonyms(&self, names: &[&str], target: &str) -> Vec<ConfigSynonymValue> {
        let mut out = Vec::new();
        for (layer, source) in [
            (self.broker_dynamic, config_source::DYNAMIC_BROKER_CONFIG),
            (
                self.broker_default,
                config_source::DYNAMIC_DEFAULT_BROKER_CONFIG,
            ),
            (self.static_props, config_source::STATIC_BROKER_CONFIG),
        ] {
            for name in names {
                if let Some(v) = layer.get(*name) {
                    out.push(ConfigSynonymValue {
                        name: (*name).to_string(),
                        value: v.clone(),
                        source,
                    });
                }
            }
        }
        for name in names {
            if let Some(v) = broker_config_def(name).and_then(|d| d.default) {
                out.push(ConfigSynonymValue {
                    name: (*name).to_string(),
                    value: v.to_string(),
                    source: config_source::DEFAULT_CONFIG,
                });
            }
        }
        let skip = out.iter().take_while(|s| s.name != target).count();
        out.split_off(skip)
    }

    /// The synonyms DescribeConfigs lists for topic config `def` (`ConfigHelper`'s
    /// `createTopicConfigEntry`): the topic override, if any, then the broker synonyms; the
    /// head is the config's `config_source` (`DEFAULT_CONFIG` when empty).
    #[must_use]
    pub fn synonyms(&self, def: &TopicConfigDef) -> Vec<ConfigSynonymValue> {
        let mut out = Vec::new();
        if let Some(v) = self.topic.get(def.name) {
            out.push(ConfigSynonymValue {
                name: def.name.to_string(),
                value: v.clone(),
                source: config_source::TOPIC_CONFIG,
            });
        }
        let names: Vec<&str> = def.synonyms.iter().map(|s| s.name).collect();
        if let Some(target) = names.first() {
            out.extend(self.broker_synonyms(&names, target));
        }
        out
    }

    /// The effective value of `def` in the topic config's unit (the topic override, else
    /// the first broker synonym set in any broker layer, scaled to the topic's unit, else
    /// Kafka's default), with the `config_source` DescribeConfigs reports for it. The two
    /// can disagree as in Kafka: `log.retention.hours=1` in `server.properties` makes
    /// `retention.ms` 3600000 but its source stays `DEFAULT_CONFIG`.
    #[must_use]
    pub fn resolve(&self, def: &TopicConfigDef) -> (String, i8) {
        let source = self
            .synonyms(def)
            .first()
            .map_or(config_source::DEFAULT_CONFIG, |s| s.source);
        if let Some(v) = self.topic.get(def.name) {
            return (v.clone(), source);
        }
        let effective = self.effective_broker_props();
        let set = def
            .synonyms
            .iter()
            .find_map(|s| effective.get(s.name).map(|v| (v, s.factor)));
        let (raw, factor) = match set {
            Some((v, factor)) => (v.clone(), factor),
            None => {
                let factor = def
                    .synonyms
                    .iter()
                    .find(|s| s.name == def.default.0)
                    .map_or(1, |s| s.factor);
                (def.default.1.to_string(), factor)
            }
        };
        let value = if factor == 1 {
            raw
        } else {
            raw.trim()
                .parse::<i64>()
                .map_or(raw.clone(), |v| v.saturating_mul(factor).to_string())
        };
        (value, source)
    }

    /// The effective value of topic config `name`, if it is one.
    #[must_use]
    pub fn value(&self, name: &str) -> Option<String> {
        topic_config_def(name).map(|d| self.resolve(d).0)
    }
}
