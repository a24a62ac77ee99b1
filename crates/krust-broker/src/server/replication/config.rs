//! The `replica.*` broker settings replication uses, with Kafka 3.9's defaults.

use std::time::Duration;

use tracing::warn;

use crate::server::BrokerConfig;

/// Replication settings (Kafka's names, `.` → `_`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `inter.broker.listener.name`: the leader's listener followers fetch from.
    pub inter_broker_listener_name: String,
    /// The client side of that listener's security (TLS, SASL).
    pub inter_broker_security: krust_net::security::ClientSecurity,
    /// `num.replica.fetchers` (1). Only 1 is implemented: one fetcher per source broker.
    pub num_replica_fetchers: i32,
    /// `replica.fetch.max.bytes` (1 MiB): per-partition budget of a follower fetch.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes` (10 MiB): budget of a whole follower fetch.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms` (500): how long the leader may hold a follower fetch.
    pub replica_fetch_wait_max_ms: i32,
    /// `replica.fetch.min.bytes` (1).
    pub replica_fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms` (1000): pause after a failed fetch of a partition.
    pub replica_fetch_backoff_ms: u64,
    /// `replica.lag.time.max.ms` (30000): the ISR shrink check runs every half of it.
    pub replica_lag_time_max_ms: u64,
    /// `replica.socket.timeout.ms` (30000): request timeout of follower fetches, on top of
    /// `replica.fetch.wait.max.ms`.
    pub replica_socket_timeout_ms: u64,
    /// `request.timeout.ms` for AlterPartition (Kafka's `AlterPartitionManager` channel:
    /// 30000 for broker-to-controller requests).
    pub alter_partition_timeout_ms: u64,
    /// Pause before an AlterPartition is retried after a request-level failure (Kafka's
    /// channel uses `retry.backoff.ms` = 100 … 1000 growing; a fixed 100 ms here).
    pub alter_partition_retry_backoff_ms: u64,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            inter_broker_listener_name: "PLAINTEXT".to_string(),
            inter_broker_security: krust_net::security::ClientSecurity::default(),
            num_replica_fetchers: 1,
            replica_fetch_max_bytes: 1024 * 1024,
            replica_fetch_response_max_bytes: 10 * 1024 * 1024,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_min_bytes: 1,
            replica_fetch_backoff_ms: 1000,
            replica_lag_time_max_ms: 30_000,
            replica_socket_timeout_ms: 30_000,
            alter_partition_timeout_ms: 30_000,
            alter_partition_retry_backoff_ms: 100,
        }
    }
}

/// A validated value (Kafka's validators ran at start-up), else `default` (a null default).
fn parse<T: krust_config::FromConfigValue>(
    config: &krust_config::KafkaConfig,
    key: &str,
    default: T,
) -> T {
    config.get(key).unwrap_or(default)
}

impl ReplicationConfig {
    /// From the validated `server.properties` (unset keys take Kafka's defaults).
    #[must_use]
    pub fn from_broker_config(config: &BrokerConfig) -> Self {
        let p = &config.static_config;
        let d = ReplicationConfig::default();
        let num_replica_fetchers = parse(p, "num.replica.fetchers", 1_i32);
        if num_replica_fetchers > 1 {
            warn!(
                num_replica_fetchers,
                "num.replica.fetchers > 1 is not implemented; one fetcher per source broker"
            );
        }
        ReplicationConfig {
            inter_broker_listener_name: config.inter_broker_listener_name.clone(),
            inter_broker_security: config.inter_broker_security.clone(),
            num_replica_fetchers,
            replica_fetch_max_bytes: parse(p, "replica.fetch.max.bytes", d.replica_fetch_max_bytes),
            replica_fetch_response_max_bytes: parse(
                p,
                "replica.fetch.response.max.bytes",
                d.replica_fetch_response_max_bytes,
            ),
            replica_fetch_wait_max_ms: parse(
                p,
                "replica.fetch.wait.max.ms",
                d.replica_fetch_wait_max_ms,
            ),
            replica_fetch_min_bytes: parse(p, "replica.fetch.min.bytes", d.replica_fetch_min_bytes),
            replica_fetch_backoff_ms: parse(
                p,
                "replica.fetch.backoff.ms",
                d.replica_fetch_backoff_ms,
            ),
            replica_lag_time_max_ms: parse(p, "replica.lag.time.max.ms", d.replica_lag_time_max_ms),
            replica_socket_timeout_ms: parse(
                p,
                "replica.socket.timeout.ms",
                d.replica_socket_timeout_ms,
            ),
            alter_partition_timeout_ms: parse(
                p,
                "request.timeout.ms",
                d.alter_partition_timeout_ms,
            ),
            alter_partition_retry_backoff_ms: d.alter_partition_retry_backoff_ms,
        }
    }

    /// `replica.fetch.backoff.ms`.
    #[must_use]
    pub fn fetch_backoff(&self) -> Duration {
        Duration::from_millis(self.replica_fetch_backoff_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker_config(props: &[(&str, &str)]) -> BrokerConfig {
        BrokerConfig {
            node_id: 1,
            cluster_id: "c".into(),
            log_dirs: Vec::new(),
            static_config: std::sync::Arc::new(
                krust_config::KafkaConfig::parse(
                    &props
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .collect(),
                )
                .expect("valid test config"),
            ),
            advertised_listeners: Vec::new(),
            inter_broker_listener_name: "BROKER".into(),
            inter_broker_security: Default::default(),
            rack: None,
        }
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = ReplicationConfig::from_broker_config(&broker_config(&[]));
        assert_eq!(c.replica_fetch_max_bytes, 1_048_576);
        assert_eq!(c.replica_fetch_response_max_bytes, 10_485_760);
        assert_eq!(c.replica_fetch_wait_max_ms, 500);
        assert_eq!(c.replica_fetch_min_bytes, 1);
        assert_eq!(c.replica_fetch_backoff_ms, 1000);
        assert_eq!(c.replica_lag_time_max_ms, 30_000);
        assert_eq!(c.inter_broker_listener_name, "BROKER");
    }

    #[test]
    fn settings_are_read_typed_and_bad_values_never_reach_them() {
        let c = ReplicationConfig::from_broker_config(&broker_config(&[
            ("replica.lag.time.max.ms", "2000"),
            ("replica.fetch.backoff.ms", "50"),
        ]));
        assert_eq!(c.replica_lag_time_max_ms, 2000);
        assert_eq!(c.replica_fetch_backoff_ms, 50);
        // Kafka's validators refuse these when the config is read, before any broker starts.
        for (k, v) in [
            ("replica.fetch.max.bytes", "-5"),
            ("replica.fetch.wait.max.ms", "lots"),
        ] {
            let props = [(k.to_owned(), v.to_owned())].into_iter().collect();
            assert!(krust_config::KafkaConfig::parse(&props).is_err(), "{k}={v}");
        }
    }
}
