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
//! Exposed today: Kafka's `raft-metrics` group of this node's replica.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use krust_metrics::Registry;
use krust_metrics::http::MetricsServer;
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

/// Starts the endpoint if `metrics.port` is set, registering `raft`'s metrics.
///
/// # Errors
/// A bad `metrics.port` or the bind failure.
pub async fn start(
    config: &ServerConfig,
    bind: &str,
    raft: &RaftHandle,
) -> anyhow::Result<Option<MetricsServer>> {
    let Some(address) = metrics_address(config, bind)? else {
        return Ok(None);
    };
    let registry = Arc::new(Registry::new());
    registry.register(Arc::new(raft.metrics_collector()));
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
