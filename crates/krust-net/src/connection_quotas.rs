//! Kafka 3.9's `ConnectionQuotas` (`SocketServer`): limits on the connections a broker
//! accepts, shared by all of its listeners.
//!
//! At each accepted connection, in Kafka's order ([`ConnectionQuotas::acquire`]):
//! 1. `max.connection.creation.rate` (KIP-612), broker-wide and per listener
//!    (`listener.name.<l>.max.connection.creation.rate`, else the broker-wide value): the
//!    connection is recorded in both rates and, over either, the acceptor waits the throttle
//!    time (capped at one quota window) before going on — the connection is delayed, not
//!    refused. The inter-broker listener only counts against its own listener rate.
//!    Then `max.connections` (broker-wide): the acceptor waits until the broker has fewer
//!    connections (the inter-broker listener is exempt when the broker has more than one
//!    listener, as Kafka's "protected listener"). The per-listener limit
//!    (`listener.name.<l>.max.connections`, falling back to `max.connections`) is the
//!    listener's own `ServerConfig::max_connections`, enforced by its accept loop.
//! 2. The IP's `connection_creation_rate` (a client quota on the `ip` entity, or its default):
//!    a connection that would take the IP over it is not counted and is closed after the
//!    throttle time (Kafka's `ConnectionThrottledException` → `DelayedCloseSocket`), capped at
//!    one quota window (`quota.window.size.seconds`).
//! 3. `max.connections.per.ip` / `max.connections.per.ip.overrides`: a connection from an IP
//!    that already has that many is closed at once (`TooManyConnectionsException`, logged as
//!    Kafka logs it: "Rejected connection from /1.2.3.4, address already has the configured
//!    maximum of 2 connections.").
//!
//! A [`ConnectionSlot`] is counted for the connection's life and given back on drop.
//!
//! # Metrics
//! Kafka's `kafka.server:type=socket-server-metrics` ([`ConnectionQuotas`] is a
//! `krust_metrics::Collector`): `connection-count` and `connection-accept-rate` per listener
//! (the count summed over Kafka's network processors, which krust does not have),
//! `broker-connection-accept-rate`, `connection-accept-rate` per IP with a
//! `connection_creation_rate` quota, and `connection-accept-throttle-time` /
//! `ip-connection-accept-throttle-time` per listener (averages of the non-zero throttles). Accept rates are over the quota window, as Kafka's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use krust_metrics::{Collector, Family, MetricKind, QuotaRate, SampleConfig, WindowedStat};
use tokio::sync::Notify;

/// Kafka's `QuotaConfigs.IP_CONNECTION_RATE_DEFAULT` (`Integer.MAX_VALUE`: no IP rate quota).
pub const IP_CONNECTION_RATE_DEFAULT: f64 = 2_147_483_647.0;

/// The static limits (from `server.properties`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionQuotaSettings {
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides`, host names resolved.
    pub max_connections_per_ip_overrides: HashMap<IpAddr, usize>,
    /// `max.connections` (broker-wide).
    pub max_connections: usize,
    /// `max.connection.creation.rate` (broker-wide), connections per second.
    pub max_connection_creation_rate: f64,
    /// `listener.name.<l>.max.connection.creation.rate` by listener name; a listener not
    /// listed uses `max_connection_creation_rate`.
    pub listener_max_connection_creation_rates: HashMap<String, f64>,
    /// `inter.broker.listener.name`: may exceed `max.connections` when the broker has more
    /// than one listener.
    pub inter_broker_listener: Option<String>,
    /// `quota.window.num` × `quota.window.size.seconds`, for the IP connection rates.
    pub quota_window: SampleConfig,
}

impl Default for ConnectionQuotaSettings {
    fn default() -> Self {
        ConnectionQuotaSettings {
            max_connections_per_ip: 2_147_483_647,
            max_connections_per_ip_overrides: HashMap::new(),
            max_connections: 2_147_483_647,
            max_connection_creation_rate: 2_147_483_647.0,
            listener_max_connection_creation_rates: HashMap::new(),
            inter_broker_listener: None,
            quota_window: SampleConfig::new(Duration::from_secs(1), 11),
        }
    }
}

/// Why a connection is not served.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// `max.connections.per.ip` (or its override) reached: close now.
    TooManyConnections {
        /// The client's address.
        ip: IpAddr,
        /// The limit that applied.
        max: usize,
    },
    /// The IP's `connection_creation_rate` exceeded: close after `throttle`.
    Throttled {
        /// The client's address.
        ip: IpAddr,
        /// How long to hold the socket before closing it.
        throttle: Duration,
    },
}

#[derive(Debug)]
struct ListenerStats {
    connections: usize,
    /// `connection-accept-rate`, bounded by the listener's `max.connection.creation.rate`.
    accept_rate: QuotaRate,
    /// `connection-accept-throttle-time`.
    throttle_time: WindowedStat,
    /// `ip-connection-accept-throttle-time`.
    ip_throttle_time: WindowedStat,
}

#[derive(Debug)]
struct State {
    per_ip: HashMap<IpAddr, usize>,
    per_listener: HashMap<Arc<str>, ListenerStats>,
    total: usize,
    /// `broker-connection-accept-rate`.
    broker_accept_rate: QuotaRate,
    /// `connection_creation_rate` of the default `ip` entity, if set.
    default_ip_rate: Option<f64>,
    /// `connection_creation_rate` per IP.
    ip_rates: HashMap<IpAddr, f64>,
    ip_sensors: HashMap<IpAddr, (QuotaRate, Instant)>,
}

/// Sensors idle this long are dropped when the map is swept (bounds memory under many IPs).
const IP_SENSOR_EXPIRATION: Duration = Duration::from_secs(3600);
/// Most IP sensors kept before a sweep of idle ones.
const IP_SENSORS_SWEEP_AT: usize = 4096;

/// The broker's connection limits; see the module doc. Shared by every listener
/// (`ServerConfig::connection_quotas`); two are equal only if they are the same value.
#[derive(Debug)]
pub struct ConnectionQuotas {
    settings: ConnectionQuotaSettings,
    state: Mutex<State>,
    slot_freed: Notify,
}

impl PartialEq for ConnectionQuotas {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ConnectionQuotas {}

impl ConnectionQuotas {
    /// Limits with no connection yet.
    #[must_use]
    pub fn new(settings: ConnectionQuotaSettings) -> Arc<Self> {
        let state = State {
            per_ip: HashMap::new(),
            per_listener: HashMap::new(),
            total: 0,
            broker_accept_rate: QuotaRate::new(settings.quota_window),
            default_ip_rate: None,
            ip_rates: HashMap::new(),
            ip_sensors: HashMap::new(),
        };
        Arc::new(ConnectionQuotas {
            settings,
            state: Mutex::new(state),
            slot_freed: Notify::new(),
        })
    }

    fn listener_stats(&self) -> ListenerStats {
        ListenerStats {
            connections: 0,
            accept_rate: QuotaRate::new(self.settings.quota_window),
            throttle_time: WindowedStat::avg(SampleConfig::default()),
            ip_throttle_time: WindowedStat::avg(SampleConfig::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a listener (Kafka's `addListener`): its connections count per listener, and
    /// the broker-wide protection of the inter-broker listener needs to know how many exist.
    pub fn add_listener(&self, listener: &str) {
        let stats = self.listener_stats();
        self.lock()
            .per_listener
            .entry(Arc::from(listener))
            .or_insert(stats);
    }

    /// Takes the IP connection rates (`connection_creation_rate` of `ip` entities; `None` key =
    /// the default entity) from the newest image.
    pub fn set_ip_connection_rates(&self, rates: HashMap<Option<IpAddr>, f64>) {
        let mut state = self.lock();
        state.default_ip_rate = rates.get(&None).copied();
        state.ip_rates = rates
            .into_iter()
            .filter_map(|(ip, rate)| ip.map(|ip| (ip, rate)))
            .collect();
    }

    /// Connections open from `ip`.
    #[must_use]
    pub fn count(&self, ip: IpAddr) -> usize {
        self.lock().per_ip.get(&ip).copied().unwrap_or(0)
    }

    fn protected(&self, state: &State, listener: &str) -> bool {
        self.settings.inter_broker_listener.as_deref() == Some(listener)
            && state.per_listener.len() > 1
    }

    fn slot_available(&self, state: &State, listener: &str) -> bool {
        self.protected(state, listener) || state.total < self.settings.max_connections
    }

    /// Counts a new connection from `ip` on `listener`: waits out a
    /// `max.connection.creation.rate` throttle, then while the broker is at `max.connections`
    /// (Kafka blocks its acceptor the same way), then checks the IP's limits.
    ///
    /// # Errors
    /// A [`Refusal`]: the connection is not counted and must be closed (at once, or after the
    /// throttle).
    pub async fn acquire(
        self: &Arc<Self>,
        listener: &str,
        ip: IpAddr,
    ) -> Result<ConnectionSlot, Refusal> {
        // tokio's clock (virtual in paused tests), as std `Instant`s for the rates.
        let start = tokio::time::Instant::now();
        let throttle = {
            let mut state = self.lock();
            self.record_connection(&mut state, listener, start.into_std())
        };
        let throttle_end = start + throttle;
        loop {
            // Created before the check: a slot freed in between still wakes us.
            let freed = self.slot_freed.notified();
            let now = tokio::time::Instant::now();
            if now >= throttle_end {
                let mut state = self.lock();
                if self.slot_available(&state, listener) {
                    return self.admit(&mut state, listener, ip, now.into_std());
                }
            }
            if now < throttle_end {
                tokio::time::sleep_until(throttle_end).await;
            } else {
                freed.await;
            }
        }
    }

    /// Kafka's `recordConnectionAndGetThrottleTimeMs`: the connection in the broker-wide rate
    /// (not for the protected listener) and the listener's; the longer of their throttles,
    /// each capped at one quota window.
    fn record_connection(&self, state: &mut State, listener: &str, now: Instant) -> Duration {
        if !state.per_listener.contains_key(listener) {
            let stats = self.listener_stats();
            state.per_listener.insert(Arc::from(listener), stats);
        }
        let max_ms =
            i64::try_from(self.settings.quota_window.window.as_millis()).unwrap_or(i64::MAX);
        let throttle_ms = |r: Result<(), krust_metrics::QuotaViolation>| match r {
            Ok(()) => 0,
            Err(v) => v.bounded_throttle_time_ms(max_ms).max(0),
        };
        let broker_ms = if self.protected(state, listener) {
            0
        } else {
            throttle_ms(state.broker_accept_rate.record_checked(
                1.0,
                now,
                self.settings.max_connection_creation_rate,
            ))
        };
        let listener_rate = self
            .settings
            .listener_max_connection_creation_rates
            .get(listener)
            .copied()
            .unwrap_or(self.settings.max_connection_creation_rate);
        let mut ms = broker_ms;
        if let Some(stats) = state.per_listener.get_mut(listener) {
            ms = ms.max(throttle_ms(stats.accept_rate.record_checked(
                1.0,
                now,
                listener_rate,
            )));
            if ms > 0 {
                #[allow(clippy::cast_precision_loss)]
                stats.throttle_time.record(ms as f64, now);
            }
        }
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    fn admit(
        self: &Arc<Self>,
        state: &mut State,
        listener: &str,
        ip: IpAddr,
        now: Instant,
    ) -> Result<ConnectionSlot, Refusal> {
        // The connection is in the broker and listener rates already (`record_connection`).
        let protected = self.protected(state, listener);
        // The IP's connection rate (Kafka's `recordIpConnectionMaybeThrottle`).
        let rate = state
            .ip_rates
            .get(&ip)
            .copied()
            .or(state.default_ip_rate)
            .unwrap_or(IP_CONNECTION_RATE_DEFAULT);
        if rate < IP_CONNECTION_RATE_DEFAULT {
            if state.ip_sensors.len() >= IP_SENSORS_SWEEP_AT {
                state.ip_sensors.retain(|_, (_, used)| {
                    now.saturating_duration_since(*used) < IP_SENSOR_EXPIRATION
                });
            }
            let window = self.settings.quota_window;
            let (sensor, used) = state
                .ip_sensors
                .entry(ip)
                .or_insert_with(|| (QuotaRate::new(window), now));
            *used = now;
            if let Err(violation) = sensor.record_checked(1.0, now, rate) {
                // Un-record: the connection is not accepted.
                sensor.record(-1.0, now);
                let max_ms = i64::try_from(window.window.as_millis()).unwrap_or(i64::MAX);
                let ms = violation.bounded_throttle_time_ms(max_ms).max(0);
                // Kafka's `updateListenerMetrics`: the throttle recorded for the listener, the
                // connection un-recorded from the broker and listener rates.
                if !protected {
                    state.broker_accept_rate.record(-1.0, now);
                }
                if let Some(stats) = state.per_listener.get_mut(listener) {
                    #[allow(clippy::cast_precision_loss)]
                    stats.ip_throttle_time.record(ms as f64, now);
                    stats.accept_rate.record(-1.0, now);
                }
                return Err(Refusal::Throttled {
                    ip,
                    throttle: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
                });
            }
        }
        let count = state.per_ip.get(&ip).copied().unwrap_or(0);
        let max = self
            .settings
            .max_connections_per_ip_overrides
            .get(&ip)
            .copied()
            .unwrap_or(self.settings.max_connections_per_ip);
        if count >= max {
            return Err(Refusal::TooManyConnections { ip, max });
        }
        state.per_ip.insert(ip, count + 1);
        state.total += 1;
        let listener: Arc<str> = match state.per_listener.get_key_value(listener) {
            Some((name, _)) => Arc::clone(name),
            None => Arc::from(listener),
        };
        if let Some(stats) = state.per_listener.get_mut(&listener) {
            stats.connections += 1;
        }
        Ok(ConnectionSlot {
            quotas: Arc::clone(self),
            listener,
            ip,
        })
    }

    fn release(&self, listener: &str, ip: IpAddr) {
        {
            let mut state = self.lock();
            match state.per_ip.get_mut(&ip) {
                Some(1) => {
                    state.per_ip.remove(&ip);
                }
                Some(n) => *n -= 1,
                None => {}
            }
            state.total = state.total.saturating_sub(1);
            if let Some(stats) = state.per_listener.get_mut(listener) {
                stats.connections = stats.connections.saturating_sub(1);
            }
        }
        self.slot_freed.notify_waiters();
    }
}

impl Collector for ConnectionQuotas {
    fn collect(&self, now: Instant, out: &mut Vec<Family>) {
        let group = "socket-server-metrics";
        let family = |name: &str, help: &str| Family {
            name: krust_metrics::prometheus_name("kafka.server", group, name),
            help: help.to_owned(),
            kind: MetricKind::Gauge,
            samples: Vec::new(),
        };
        let sample = |label: &str, value: &str, v: f64| krust_metrics::Sample {
            suffix: "",
            labels: vec![(label.to_owned(), value.to_owned())],
            value: v,
        };
        let mut state = self.lock();
        let mut count = family(
            "connection-count",
            "The current number of active connections.",
        );
        let mut accept = family(
            "connection-accept-rate",
            "Tracking rate of accepting new connections (per second)",
        );
        let mut throttle = family(
            "connection-accept-throttle-time",
            "Tracking average throttle-time, out of non-zero throttle times, per listener",
        );
        let mut ip_throttle = family(
            "ip-connection-accept-throttle-time",
            "Tracking average throttle-time, out of non-zero throttle times, per listener",
        );
        let mut listeners: Vec<Arc<str>> = state.per_listener.keys().cloned().collect();
        listeners.sort();
        for name in listeners {
            let Some(stats) = state.per_listener.get_mut(&name) else {
                continue;
            };
            #[allow(clippy::cast_precision_loss)]
            count
                .samples
                .push(sample("listener", &name, stats.connections as f64));
            accept
                .samples
                .push(sample("listener", &name, stats.accept_rate.measure(now)));
            throttle
                .samples
                .push(sample("listener", &name, stats.throttle_time.measure(now)));
            ip_throttle.samples.push(sample(
                "listener",
                &name,
                stats.ip_throttle_time.measure(now),
            ));
        }
        let mut ips: Vec<IpAddr> = state.ip_sensors.keys().copied().collect();
        ips.sort();
        for ip in ips {
            if let Some((rate, _)) = state.ip_sensors.get_mut(&ip) {
                accept
                    .samples
                    .push(sample("ip", &ip.to_string(), rate.measure(now)));
            }
        }
        let broker = family(
            "broker-connection-accept-rate",
            "Tracking rate of accepting new connections (per second)",
        );
        let broker_rate = state.broker_accept_rate.measure(now);
        out.push(count);
        out.push(accept);
        out.push(Family {
            samples: vec![krust_metrics::Sample::plain(broker_rate)],
            ..broker
        });
        out.push(throttle);
        out.push(ip_throttle);
    }
}

/// One counted connection; given back when dropped.
#[derive(Debug)]
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    listener: Arc<str>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.quotas.release(&self.listener, self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[tokio::test]
    async fn per_ip_limit_and_override_refuse_the_next_connection() {
        let quotas = ConnectionQuotas::new(ConnectionQuotaSettings {
            max_connections_per_ip: 2,
            max_connections_per_ip_overrides: [(ip("127.0.0.2"), 1)].into(),
            ..ConnectionQuotaSettings::default()
        });
        quotas.add_listener("PLAINTEXT");
        let a = quotas
            .acquire("PLAINTEXT", ip("127.0.0.1"))
            .await
            .expect("1st");
        let _b = quotas
            .acquire("PLAINTEXT", ip("127.0.0.1"))
            .await
            .expect("2nd");
        assert_eq!(
            quotas.acquire("PLAINTEXT", ip("127.0.0.1")).await.err(),
            Some(Refusal::TooManyConnections {
                ip: ip("127.0.0.1"),
                max: 2
            })
        );
        let _c = quotas
            .acquire("PLAINTEXT", ip("127.0.0.2"))
            .await
            .expect("override 1");
        assert_eq!(
            quotas.acquire("PLAINTEXT", ip("127.0.0.2")).await.err(),
            Some(Refusal::TooManyConnections {
                ip: ip("127.0.0.2"),
                max: 1
            })
        );
        assert_eq!(quotas.count(ip("127.0.0.1")), 2, "refusals are not counted");
        drop(a);
        assert_eq!(quotas.count(ip("127.0.0.1")), 1);
        let _d = quotas
            .acquire("PLAINTEXT", ip("127.0.0.1"))
            .await
            .expect("room again");
    }

    #[tokio::test(start_paused = true)]
    async fn broker_wide_limit_waits_for_a_free_slot_except_on_the_inter_broker_listener() {
        let quotas = ConnectionQuotas::new(ConnectionQuotaSettings {
            max_connections: 1,
            inter_broker_listener: Some("INTERNAL".to_owned()),
            ..ConnectionQuotaSettings::default()
        });
        quotas.add_listener("PLAINTEXT");
        quotas.add_listener("INTERNAL");
        let first = quotas
            .acquire("PLAINTEXT", ip("127.0.0.1"))
            .await
            .expect("1st");
        // The protected listener may go past max.connections.
        let _internal = quotas
            .acquire("INTERNAL", ip("127.0.0.1"))
            .await
            .expect("protected");
        let waiting = {
            let quotas = Arc::clone(&quotas);
            tokio::spawn(async move { quotas.acquire("PLAINTEXT", ip("127.0.0.3")).await })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "the broker is at max.connections");
        drop(first);
        drop(_internal);
        let slot = waiting
            .await
            .expect("task")
            .expect("admitted once a slot is free");
        assert_eq!(quotas.count(ip("127.0.0.3")), 1);
        drop(slot);
    }

    #[tokio::test(start_paused = true)]
    async fn connection_creation_rate_delays_the_acceptor_by_the_throttle() {
        // max.connection.creation.rate 2/s over 11 × 1 s: the first 20 go at once (the window
        // counts as at least 10 s), the 21st measures 2.1/s and waits
        // (2.1 − 2) / 2 × 10000 = 500 ms of (virtual) time, then is accepted, not refused.
        let quotas = ConnectionQuotas::new(ConnectionQuotaSettings {
            max_connection_creation_rate: 2.0,
            ..ConnectionQuotaSettings::default()
        });
        let start = tokio::time::Instant::now();
        let mut open = Vec::new();
        for _ in 0..20 {
            open.push(
                quotas
                    .acquire("PLAINTEXT", ip("10.0.0.9"))
                    .await
                    .expect("within rate"),
            );
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "no wait within the rate");
        open.push(
            quotas
                .acquire("PLAINTEXT", ip("10.0.0.9"))
                .await
                .expect("delayed, accepted"),
        );
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        let mut families = Vec::new();
        quotas.collect(start.into_std(), &mut families);
        let throttle = families
            .iter()
            .find(|f| {
                f.name == "kafka_server_socket_server_metrics_connection_accept_throttle_time"
            })
            .map(|f| f.samples[0].value);
        assert_eq!(throttle, Some(500.0));
        // A listener's own limit applies on that listener only.
        let quotas = ConnectionQuotas::new(ConnectionQuotaSettings {
            listener_max_connection_creation_rates: [("SLOW".to_owned(), 0.1)].into(),
            ..ConnectionQuotaSettings::default()
        });
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            open.push(quotas.acquire("FAST", ip("10.0.0.9")).await.expect("fast"));
        }
        open.push(quotas.acquire("SLOW", ip("10.0.0.9")).await.expect("first"));
        assert_eq!(start.elapsed(), Duration::ZERO);
        // 2 / 10 s = 0.2/s over 0.1/s: capped at one quota window.
        open.push(
            quotas
                .acquire("SLOW", ip("10.0.0.9"))
                .await
                .expect("second"),
        );
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn ip_connection_rate_throttles_and_does_not_count_the_refused_one() {
        // connection_creation_rate 2/s over 11 × 1 s: a first burst may open 2 × 10 = 20
        // (the window counts as at least 10 s); the 21st measures 2.1/s, over the quota:
        // throttle (2.1 − 2) / 2 × 10000 = 500 ms.
        let quotas = ConnectionQuotas::new(ConnectionQuotaSettings::default());
        quotas.set_ip_connection_rates([(None, 2.0)].into());
        let mut open = Vec::new();
        for _ in 0..20 {
            open.push(
                quotas
                    .acquire("PLAINTEXT", ip("10.0.0.1"))
                    .await
                    .expect("within rate"),
            );
        }
        match quotas.acquire("PLAINTEXT", ip("10.0.0.1")).await {
            Err(Refusal::Throttled { throttle, .. }) => {
                // Computed from `Instant`s a few µs apart: 500 ms, give or take rounding.
                assert!((499..=500).contains(&throttle.as_millis()), "{throttle:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(quotas.count(ip("10.0.0.1")), 20);
        // The refused connection is not in the accept rates; its throttle is.
        let mut families = Vec::new();
        quotas.collect(Instant::now(), &mut families);
        let value = |name: &str, label: &str| {
            families
                .iter()
                .find(|f| f.name == name)
                .and_then(|f| {
                    f.samples
                        .iter()
                        .find(|s| s.labels.iter().any(|l| l.1 == label))
                })
                .map(|s| s.value)
        };
        assert_eq!(
            value(
                "kafka_server_socket_server_metrics_connection_count",
                "PLAINTEXT"
            ),
            Some(20.0)
        );
        assert_eq!(
            value(
                "kafka_server_socket_server_metrics_connection_accept_rate",
                "10.0.0.1"
            ),
            Some(2.0),
            "20 connections over the 10 s minimum window"
        );
        assert_eq!(
            value(
                "kafka_server_socket_server_metrics_ip_connection_accept_throttle_time",
                "PLAINTEXT"
            ),
            Some(500.0)
        );
        // Another IP with its own override of no limit.
        quotas.set_ip_connection_rates([(None, 2.0), (Some(ip("10.0.0.2")), 1e9)].into());
        for _ in 0..30 {
            open.push(
                quotas
                    .acquire("PLAINTEXT", ip("10.0.0.2"))
                    .await
                    .expect("override"),
            );
        }
    }
}
