//! Topic configs as Kafka 3.9 resolves them (`LogConfig`, `ServerTopicConfigSynonyms`): a
//! topic override, else the broker's dynamic default (`ConfigResource` broker `""`), else the
//! broker's static `server.properties` synonym (`log.retention.hours`, …), else Kafka's
//! default. Used by the metadata publisher (to open logs) and DescribeConfigs (values,
//! sources and synonyms).

use krust_log::TimestampType;
use krust_log::compression::{
    GZIP_DEFAULT_LEVEL, LZ4_DEFAULT_LEVEL, TopicCompression, ZSTD_DEFAULT_LEVEL,
};
use krust_log::config::{CleanupPolicy, LogConfig};
use tracing::warn;

use crate::partition::{DEFAULT_REPLICA_LAG_TIME_MAX_MS, PartitionConfig};
use crate::producer_state::DEFAULT_PRODUCER_ID_EXPIRATION_MS;
pub use krust_config::topic_layers::*;

/// The broker's readings of [`ConfigLayers`]: a log's and a partition's settings.
pub trait LogConfigLayers {
    /// The log's config; a value Kafka would refuse falls back to Kafka's default, with a
    /// warning (the controller validates values when they are set).
    fn log_config(&self) -> LogConfig;
    /// The partition's settings.
    fn partition_config(&self) -> PartitionConfig;
}

/// The effective value of topic config `name` if Kafka's `LogConfig` accepts it; a value it
/// refuses (stored by an older build that did not validate) is logged and reads as unset, so
/// Kafka's default applies.
fn valid_value(layers: &ConfigLayers<'_>, name: &str) -> Option<String> {
    let value = layers.value(name)?;
    if let Some(def) = krust_config::topic_def(name)
        && let Err(error) = def.parse(&value)
    {
        warn!(config = name, %error, "invalid topic config value in the metadata; using Kafka's default");
        return None;
    }
    Some(value)
}

fn parse<T: std::str::FromStr>(layers: &ConfigLayers<'_>, name: &str) -> Option<T> {
    valid_value(layers, name).and_then(|v| v.trim().parse().ok())
}

/// `compression.type` with the level of its codec (KIP-390, Kafka 3.8+).
fn compression(layers: &ConfigLayers<'_>) -> TopicCompression {
    let level = |name: &str, default: i32| parse(layers, name).unwrap_or(default);
    match valid_value(layers, "compression.type").as_deref() {
        Some("uncompressed") => TopicCompression::Uncompressed,
        Some("gzip") => TopicCompression::Gzip {
            level: level("compression.gzip.level", GZIP_DEFAULT_LEVEL),
        },
        Some("snappy") => TopicCompression::Snappy,
        Some("lz4") => TopicCompression::Lz4 {
            level: level("compression.lz4.level", LZ4_DEFAULT_LEVEL),
        },
        Some("zstd") => TopicCompression::Zstd {
            level: level("compression.zstd.level", ZSTD_DEFAULT_LEVEL),
        },
        _ => TopicCompression::Producer,
    }
}

impl LogConfigLayers for ConfigLayers<'_> {
    /// The log's config; a value Kafka would refuse falls back to Kafka's default, with a
    /// warning (the controller validates values when they are set).
    fn log_config(&self) -> LogConfig {
        let d = LogConfig::default();
        LogConfig {
            segment_bytes: parse(self, "segment.bytes").unwrap_or(d.segment_bytes),
            segment_ms: parse(self, "segment.ms").unwrap_or(d.segment_ms),
            segment_jitter_ms: parse(self, "segment.jitter.ms").unwrap_or(d.segment_jitter_ms),
            segment_index_bytes: parse(self, "segment.index.bytes")
                .unwrap_or(d.segment_index_bytes),
            index_interval_bytes: parse(self, "index.interval.bytes")
                .unwrap_or(d.index_interval_bytes),
            retention_ms: parse(self, "retention.ms").unwrap_or(d.retention_ms),
            retention_bytes: parse(self, "retention.bytes").unwrap_or(d.retention_bytes),
            max_message_bytes: parse(self, "max.message.bytes").unwrap_or(d.max_message_bytes),
            message_timestamp_type: match valid_value(self, "message.timestamp.type").as_deref() {
                Some("LogAppendTime") => TimestampType::LogAppendTime,
                _ => TimestampType::CreateTime,
            },
            retention_check_interval_ms: self
                .static_props
                .get("log.retention.check.interval.ms")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(d.retention_check_interval_ms),
            flush_messages: parse(self, "flush.messages").unwrap_or(d.flush_messages),
            flush_ms: parse(self, "flush.ms").unwrap_or(d.flush_ms),
            file_delete_delay_ms: parse(self, "file.delete.delay.ms")
                .unwrap_or(d.file_delete_delay_ms),
            cleanup_policy: valid_value(self, "cleanup.policy")
                .and_then(|v| CleanupPolicy::parse(&v))
                .unwrap_or(d.cleanup_policy),
            min_cleanable_dirty_ratio: parse(self, "min.cleanable.dirty.ratio")
                .unwrap_or(d.min_cleanable_dirty_ratio),
            delete_retention_ms: parse(self, "delete.retention.ms")
                .unwrap_or(d.delete_retention_ms),
            min_compaction_lag_ms: parse(self, "min.compaction.lag.ms")
                .unwrap_or(d.min_compaction_lag_ms),
            max_compaction_lag_ms: parse(self, "max.compaction.lag.ms")
                .unwrap_or(d.max_compaction_lag_ms),
            compression: compression(self),
        }
    }

    /// The partition-level config.
    fn partition_config(&self) -> PartitionConfig {
        let broker_long = |name: &str, default: i64| {
            self.static_props
                .get(name)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        PartitionConfig {
            min_insync_replicas: parse(self, "min.insync.replicas").unwrap_or(1),
            replica_lag_time_max_ms: broker_long(
                "replica.lag.time.max.ms",
                DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            ),
            message_timestamp_before_max_ms: parse(self, "message.timestamp.before.max.ms")
                .unwrap_or(i64::MAX),
            message_timestamp_after_max_ms: parse(self, "message.timestamp.after.max.ms")
                .unwrap_or(i64::MAX),
            producer_id_expiration_ms: broker_long(
                "producer.id.expiration.ms",
                DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            ),
            transaction_verification_enable: self
                .static_props
                .get("transaction.partition.verification.enable")
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn values_kafka_would_refuse_fall_back_to_the_default() {
        // As stored by builds that did not validate: Kafka's `LogConfig` refuses each.
        let topic: BTreeMap<String, String> = [
            ("retention.ms", "not-a-number"),
            ("segment.bytes", "10"),
            ("cleanup.policy", "bogus"),
            ("message.timestamp.type", "Bogus"),
            ("min.insync.replicas", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let empty = BTreeMap::new();
        let layers = ConfigLayers {
            topic: &topic,
            broker_dynamic: &empty,
            broker_default: &empty,
            static_props: &empty,
        };
        let d = LogConfig::default();
        let log = layers.log_config();
        assert_eq!(log.retention_ms, d.retention_ms);
        assert_eq!(log.segment_bytes, d.segment_bytes);
        assert_eq!(log.cleanup_policy, d.cleanup_policy);
        assert_eq!(log.message_timestamp_type, TimestampType::CreateTime);
        assert_eq!(layers.partition_config().min_insync_replicas, 1);
    }

    #[test]
    fn compression_type_and_its_level_make_the_logs_codec() {
        let empty = BTreeMap::new();
        let cases: [(&[(&str, &str)], TopicCompression); 7] = [
            (&[], TopicCompression::Producer),
            (
                &[("compression.type", "uncompressed")],
                TopicCompression::Uncompressed,
            ),
            (&[("compression.type", "snappy")], TopicCompression::Snappy),
            (
                &[("compression.type", "gzip")],
                TopicCompression::Gzip { level: -1 },
            ),
            (
                &[("compression.type", "lz4"), ("compression.lz4.level", "12")],
                TopicCompression::Lz4 { level: 12 },
            ),
            (
                &[
                    ("compression.type", "zstd"),
                    ("compression.zstd.level", "19"),
                ],
                TopicCompression::Zstd { level: 19 },
            ),
            // A level of another codec does not matter.
            (
                &[
                    ("compression.type", "zstd"),
                    ("compression.gzip.level", "9"),
                ],
                TopicCompression::Zstd { level: 3 },
            ),
        ];
        for (configs, expected) in cases {
            let topic: BTreeMap<String, String> = configs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let layers = ConfigLayers {
                topic: &topic,
                broker_dynamic: &empty,
                broker_default: &empty,
                static_props: &empty,
            };
            assert_eq!(layers.log_config().compression, expected, "{configs:?}");
        }
    }

    #[test]
    fn layers_resolve_in_kafka_order_with_units() {
        let topic = BTreeMap::new();
        let empty = BTreeMap::new();
        let mut props = BTreeMap::new();
        props.insert("log.retention.hours".to_string(), "1".to_string());
        let layers = ConfigLayers {
            topic: &topic,
            broker_dynamic: &empty,
            broker_default: &empty,
            static_props: &props,
        };
        let def = topic_config_def("retention.ms").expect("def");
        // Kafka's quirk: the value follows log.retention.hours, the source does not (the
        // synonym list starts at log.retention.ms, which is unset).
        assert_eq!(
            layers.resolve(def),
            ("3600000".to_string(), config_source::DEFAULT_CONFIG)
        );
        assert_eq!(layers.log_config().retention_ms, 3_600_000);
        let mut topic = BTreeMap::new();
        topic.insert("retention.ms".to_string(), "5".to_string());
        let layers = ConfigLayers {
            topic: &topic,
            ..layers
        };
        assert_eq!(layers.log_config().retention_ms, 5);
        let synonyms = layers.synonyms(def);
        assert_eq!(synonyms.len(), 1);
        assert_eq!(synonyms[0].source, config_source::TOPIC_CONFIG);
        // Layer by layer: a dynamic default log.retention.ms comes before the static hours.
        let mut defaults = BTreeMap::new();
        defaults.insert("log.retention.ms".to_string(), "7".to_string());
        let with_default = ConfigLayers {
            topic: &empty,
            broker_default: &defaults,
            ..layers
        };
        let names: Vec<(String, i8)> = with_default
            .synonyms(def)
            .into_iter()
            .map(|s| (s.name, s.source))
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    "log.retention.ms".to_string(),
                    config_source::DYNAMIC_DEFAULT_BROKER_CONFIG
                ),
                (
                    "log.retention.hours".to_string(),
                    config_source::STATIC_BROKER_CONFIG
                ),
                (
                    "log.retention.hours".to_string(),
                    config_source::DEFAULT_CONFIG
                ),
            ]
        );
        assert_eq!(
            with_default.resolve(def),
            (
                "7".to_string(),
                config_source::DYNAMIC_DEFAULT_BROKER_CONFIG
            )
        );
        // A dynamic key hides its static synonyms (Kafka's `overrideProps`): a dynamic
        // default log.retention.hours beats a static log.retention.ms.
        let mut statics = BTreeMap::new();
        statics.insert("log.retention.ms".to_string(), "5".to_string());
        let mut hours = BTreeMap::new();
        hours.insert("log.retention.hours".to_string(), "2".to_string());
        let hidden = ConfigLayers {
            topic: &empty,
            broker_dynamic: &empty,
            broker_default: &hours,
            static_props: &statics,
        };
        assert_eq!(hidden.resolve(def).0, "7200000");
        assert_eq!(hidden.broker_value("log.retention.ms"), None);
        let segment = topic_config_def("segment.bytes").expect("def");
        assert_eq!(
            layers.resolve(segment),
            ("1073741824".to_string(), config_source::DEFAULT_CONFIG)
        );
    }
}
