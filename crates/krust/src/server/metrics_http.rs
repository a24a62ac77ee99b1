//! `metrics.port`: a Prometheus `GET /metrics` endpoint. **A krust extension**, off unless the
//! key is set: Kafka exposes its metrics over JMX only (usually scraped through the Prometheus
//! JMX exporter); krust serves the same metrics under the names that exporter's usual rules
//! give them (`kafka.server:type=raft-metrics` attribute `commit-latency-avg` →
//! `kafka_server_raft_metrics_commit_latency_avg`; see `krust_metrics`).
//!
//! * `metrics.port=<0..65535>` — the TCP port (0: any free port, logged at start-up).
//! * The address is the host of the first controller listener (`listeners=CONTROLLER://h:p`),
//!   or `127.0.0.1` when that listener binds every interface (no host, `0.0.0.0`, `::`):
//!   metrics are not published beyond loopback unless the listener already is on one
//!   specific interface.
//!
//! * Windows: Kafka's `metrics.sample.window.ms` (30000) × `metrics.num.samples` (2), read
//!   (and checked) only when `metrics.port` is set.
//!
//! Exposed today: Kafka's `raft-metrics` group of this node's replica and, on a broker,
//! `KafkaServer` `BrokerState`, the `ReplicaManager` and `broker-metadata-metrics` gauges
//! (`server/broker.rs`) and the client listener's `BrokerTopicMetrics` / `RequestMetrics`.
//! The address is the controller listener's host, or on a broker-only node the client
//! listener's advertised host.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use krust_metrics::http::MetricsServer;
use krust_metrics::{Collector, Registry, SampleConfig};
use krust_raft::driver::RaftHandle;
use tracing::info;

use crate::config::ServerConfig;

/// The key (krust extension).
pub const METRICS_PORT: &str = "metrics.port";

/// Where to serve, from `metrics.port` and the controller listener's `host:port` (`bind`).
/// `None` when `metrics.port` is not set.
///
/// # Errors
/// `metrics.port` is not a port number.
pub fn metrics_address(config: &ServerConfig, bind: &str) -> anyhow::Result<Option<String>> {
    let Some(value) = config.get(METRICS_PORT) else {
        return Ok(None);
    };
    let Ok(port) = value.trim().parse::<u16>() else {
        bail!("Invalid value {value} for configuration {METRICS_PORT}: Not a port number");
    };
    let host = bind.rsplit_once(':').map_or("", |(h, _)| h);
    let host = match host {
        "" | "0.0.0.0" | "[::]" | "::" => "127.0.0.1",
        h => h,
    };
    Ok(Some(format!("{host}:{port}")))
}

/// Kafka's `metrics.sample.window.ms` (default 30000) and `metrics.num.samples` (default 2),
/// both at least 1.
///
/// # Errors
/// A value that is not a number or is below 1 (Kafka's message).
pub fn sample_config(config: &ServerConfig) -> anyhow::Result<SampleConfig> {
    fn at_least_one(config: &ServerConfig, key: &str, default: u64) -> anyhow::Result<u64> {
        let Some(value) = config.get(key) else {
            return Ok(default);
        };
        match value.trim().parse::<i64>() {
            Ok(n) if n >= 1 => Ok(n.unsigned_abs()),
            Ok(_) => {
                bail!("Invalid value {value} for configuration {key}: Value must be at least 1")
            }
            Err(_) => {
                bail!("Invalid value {value} for configuration {key}: Not a number of type LONG")
            }
        }
    }
    let window_ms = at_least_one(config, "metrics.sample.window.ms", 30_000)?;
    let samples = at_least_one(config, "metrics.num.samples", 2)?;
    Ok(SampleConfig::new(
        Duration::from_millis(window_ms),
        usize::try_from(samples).unwrap_or(usize::MAX),
    ))
}

/// Starts the endpoint if `metrics.port` is set, registering `raft`'s metrics and `extra`
/// (the broker's).
///
/// # Errors
/// A bad `metrics.port` or the bind failure.
pub async fn start(
    config: &ServerConfig,
    bind: &str,
    raft: &RaftHandle,
    extra: Vec<Arc<dyn Collector>>,
) -> anyhow::Result<Option<MetricsServer>> {
    let Some(address) = metrics_address(config, bind)? else {
        return Ok(None);
    };
    let collector = raft.metrics_collector();
    collector.configure_samples(sample_config(config)?);
    let registry = Arc::new(Registry::new());
    registry.register(Arc::new(collector));
    for collector in extra {
        registry.register(collector);
    }
    let server = MetricsServer::bind(&address, registry)
        .await
        .with_context(|| format!("binding the metrics endpoint {address} ({METRICS_PORT})"))?;
    info!(address = %server.local_addr(), "serving Prometheus metrics on /metrics");
    Ok(Some(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ServerConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("server.properties");
        std::fs::write(&path, text).expect("write");
        ServerConfig::load(&path).expect("load")
    }

    #[test]
    fn sample_windows_come_from_kafkas_metrics_keys() {
        assert_eq!(
            sample_config(&config("")).expect("defaults"),
            SampleConfig::default()
        );
        assert_eq!(
            sample_config(&config(
                "metrics.sample.window.ms=1000\nmetrics.num.samples=5\n"
            ))
            .expect("set"),
            SampleConfig::new(Duration::from_secs(1), 5)
        );
        for bad in ["metrics.num.samples=0\n", "metrics.sample.window.ms=x\n"] {
            let err = sample_config(&config(bad)).expect_err(bad);
            assert!(err.to_string().starts_with("Invalid value"), "{err}");
        }
    }

    #[test]
    fn the_address_follows_the_listener_host_and_defaults_to_loopback() {
        for (text, bind, want, why) in [
            ("", "127.0.0.1:9093", None, "off by default"),
            (
                "metrics.port=9404\n",
                "10.1.2.3:9093",
                Some("10.1.2.3:9404"),
                "listener host",
            ),
            (
                "metrics.port=9404\n",
                "0.0.0.0:9093",
                Some("127.0.0.1:9404"),
                "wildcard",
            ),
            (
                "metrics.port= 0\n",
                "[::]:9093",
                Some("127.0.0.1:0"),
                "v6 wildcard, any port",
            ),
            (
                "metrics.port=9404\n",
                "[::1]:9093",
                Some("[::1]:9404"),
                "v6 host",
            ),
        ] {
            let got = metrics_address(&config(text), bind).expect(why);
            assert_eq!(got.as_deref(), want, "{why}");
        }
        for bad in [
            "metrics.port=x\n",
            "metrics.port=70000\n",
            "metrics.port=-1\n",
        ] {
            let err = metrics_address(&config(bad), "127.0.0.1:9093").expect_err(bad);
            assert!(err.to_string().contains("metrics.port"), "{err}");
        }
    }
}
