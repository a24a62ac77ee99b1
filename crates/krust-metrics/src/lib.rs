//! krust-metrics: Kafka's metric semantics with explicit time, rendered for Prometheus.
//!
//! Kafka measures with `Sensor`s whose stats keep a ring of time-windowed samples
//! (`metrics.sample.window.ms` = 30000 × `metrics.num.samples` = 2 by default): `Avg`, `Max`
//! and `Rate` (per second, over a `WindowedSum`) forget what is older than the ring. The stats
//! here ([`stats`]) have the same semantics but take every time as an argument — the caller
//! passes `Instant`s — so they are tested without a wall clock, and they do no locking of
//! their own (the owner decides).
//!
//! A [`Registry`] holds [`Collector`]s; each scrape asks them for [`Family`]s (name, help,
//! type, samples) and renders the Prometheus text exposition format 0.0.4 (`# HELP`,
//! `# TYPE`, one line per sample). [`http::MetricsServer`] serves `GET /metrics`.
//!
//! # Names: Kafka JMX → Prometheus
//!
//! A Kafka metric is the JMX attribute `name` of MBean `<domain>:type=<group>` (for Raft:
//! `kafka.server:type=raft-metrics`, attribute `commit-latency-avg`). Its Prometheus name is
//! what the Prometheus JMX exporter's usual Kafka rules produce: domain, group and name joined
//! with `_`, lower-cased, and every character outside `[a-z0-9_]` replaced with `_`
//! ([`prometheus_name`]):
//!
//! ```
//! assert_eq!(
//!     krust_metrics::prometheus_name("kafka.server", "raft-metrics", "commit-latency-avg"),
//!     "kafka_server_raft_metrics_commit_latency_avg"
//! );
//! ```
//!
//! A Kafka gauge whose value is a string (such as `current-state`) becomes a labelled gauge:
//! one sample per possible value, the current one `1`, the others `0`
//! (`kafka_server_raft_metrics_current_state{state="leader"} 1`). A stat with no
//! measurement in its window reads `NaN`, as Kafka's `Avg` and `Max` do.
//!
//! # Layout
//!
//! * [`stats`] — [`SampleConfig`], [`WindowedStat`] (avg/max/sum), [`Rate`], [`TimeRatio`],
//!   [`Counter`], [`Histogram`].
//! * [`quota`] — [`QuotaRate`] (a rate with an upper bound checked at each recording) and
//!   [`QuotaViolation`] with Kafka's throttle-time arithmetic (`QuotaUtils`).
//! * [`exposition`] — [`Family`], [`Sample`], [`MetricKind`], text rendering.
//! * `registry` — [`Registry`], [`Collector`].
//! * [`http`] — [`http::MetricsServer`]: minimal HTTP/1.1 for `GET /metrics`.

pub mod exposition;
pub mod http;
pub mod quota;
mod registry;
pub mod stats;

pub use exposition::{Family, MetricKind, Sample, render};
pub use quota::{QuotaRate, QuotaViolation, TokenBucket};
pub use registry::{Collector, MAX_COLLECTORS, Registry};
pub use stats::{Counter, Histogram, Rate, SampleConfig, TimeRatio, WindowedStat};

/// The Prometheus name of Kafka metric `name` in MBean `<domain>:type=<group>` (see the crate
/// docs for the rule).
#[must_use]
pub fn prometheus_name(domain: &str, group: &str, name: &str) -> String {
    let mut out = String::with_capacity(domain.len() + group.len() + name.len() + 2);
    for (i, part) in [domain, group, name].into_iter().enumerate() {
        if i > 0 {
            out.push('_');
        }
        out.extend(part.chars().map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prometheus_name;

    #[test]
    fn jmx_names_map_to_prometheus_names() {
        for (domain, group, name, want) in [
            (
                "kafka.server",
                "raft-metrics",
                "commit-latency-avg",
                "kafka_server_raft_metrics_commit_latency_avg",
            ),
            (
                "kafka.server",
                "raft-metrics",
                "current-state",
                "kafka_server_raft_metrics_current_state",
            ),
            (
                "kafka.controller",
                "KafkaController",
                "ActiveControllerCount",
                "kafka_controller_kafkacontroller_activecontrollercount",
            ),
        ] {
            assert_eq!(
                prometheus_name(domain, group, name),
                want,
                "{domain}:{group}/{name}"
            );
        }
    }
}
