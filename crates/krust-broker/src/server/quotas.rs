//! Client quotas as Kafka 3.9's `ClientQuotaManager` enforces them: the byte-rate quotas
//! `producer_byte_rate` (Produce request size) and `consumer_byte_rate` (consumer Fetch
//! response size), `request_percentage` (the time a request's handling runs, as a percentage
//! of one thread: [`super::request_time`] says what is measured and how it differs from
//! Kafka's thread time) and `controller_mutation_rate` (KIP-599, partitions created or deleted
//! per second, a [`TokenBucket`] per sensor; its manager runs on the controller listener, see
//! [`ControllerMutationQuota`]), from the image's `ClientQuotaRecord`s, kept current by
//! [`ClientQuotaPublisher`].
//!
//! # Resolution (Kafka's `DefaultQuotaCallback`)
//! A request's quota comes from the first of these entities that has the quota key, most
//! specific first: `/users/<user>/clients/<client-id>`, `/users/<user>/clients/<default>`,
//! `/users/<user>`, `/users/<default>/clients/<client-id>`, `/users/<default>/clients/<default>`,
//! `/users/<default>`, `/clients/<client-id>`, `/clients/<default>` (user = the principal's
//! name, `ANONYMOUS` without authentication; client-id from the request header). Requests are
//! grouped into one sensor per *metric tags* (user tag, client-id tag) chosen by the level that
//! applies, so all clients under one user-level quota share one rate. While only one kind of
//! level has ever been configured for a quota type, the tags are that kind's (Kafka's fast
//! path); a level once configured keeps counting until restart, as in Kafka.
//!
//! # Rate and throttle
//! Each sensor is a [`QuotaRate`] over `quota.window.num` samples of `quota.window.size.seconds`
//! (11 × 1 s). A recording that takes the rate over the limit yields Kafka's throttle time
//! `round((rate − limit) / limit × window_ms)` ([`krust_metrics::QuotaViolation`]); byte-rate
//! throttles are **not** capped (Kafka's `ClientQuotaManager.throttleTime` is the unbounded
//! `QuotaUtils.throttleTime`). The handler puts it in `throttle_time_ms` and mutes the
//! connection for that long (`RequestContext::throttle`), as Kafka's `SocketServer` does.
//!
//! # Metrics
//! Kafka's `kafka.server:type=Produce|Fetch|Request|ControllerMutation,user=…,client-id=…`:
//! `byte-rate` / `request-time` / `mutation-rate` (the sensor's rate), `tokens` (the
//! controller mutation bucket) and `throttle-time` (average throttle in ms, over the default metric window
//! `metrics.sample.window.ms` 30 s × 2), created when quotas are enabled for the type, as
//! Kafka's sensors are. Sensors idle for an hour are dropped (Kafka's
//! `InactiveSensorExpirationTimeSeconds`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use krust_metrics::{
    Collector, Family, MetricKind, QuotaRate, SampleConfig, TokenBucket, WindowedStat,
};
use tracing::info;

/// `quota.window.num` default.
pub const QUOTA_WINDOW_NUM_DEFAULT: usize = 11;
/// `quota.window.size.seconds` default.
pub const QUOTA_WINDOW_SIZE_SECONDS_DEFAULT: u64 = 1;
/// Kafka's `ClientQuotaManager.InactiveSensorExpirationTimeSeconds`.
const INACTIVE_SENSOR_EXPIRATION: Duration = Duration::from_secs(3600);
/// Sensors created between two sweeps for idle ones (bounds the sweep's cost per request).
const SWEEP_EVERY_CREATIONS: usize = 1024;

/// The quota types enforced here (Kafka's `QuotaType`), each with its quota key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// `producer_byte_rate`, bytes of Produce requests per second.
    Produce,
    /// `consumer_byte_rate`, bytes of consumer Fetch responses per second.
    Fetch,
    /// `request_percentage`, handler time as a percentage of one thread (Kafka's
    /// `ClientRequestQuotaManager`).
    Request,
    /// `controller_mutation_rate`, partitions created or deleted per second, a token bucket
    /// (Kafka's `ControllerMutationQuotaManager`, KIP-599).
    ControllerMutation,
}

impl QuotaType {
    /// The client-quota key of this type.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => "producer_byte_rate",
            QuotaType::Fetch => "consumer_byte_rate",
            QuotaType::Request => "request_percentage",
            QuotaType::ControllerMutation => "controller_mutation_rate",
        }
    }

    /// The metric group (`kafka.server:type=<group>`).
    #[must_use]
    pub fn group(self) -> &'static str {
        match self {
            QuotaType::Produce => "Produce",
            QuotaType::Fetch => "Fetch",
            QuotaType::Request => "Request",
            QuotaType::ControllerMutation => "ControllerMutation",
        }
    }

    /// The name of the sensor's rate metric (Kafka's `clientQuotaMetricName` /
    /// `clientRateMetricName`).
    fn rate_metric(self) -> (&'static str, &'static str) {
        match self {
            QuotaType::Produce | QuotaType::Fetch => {
                ("byte-rate", "Tracking byte-rate per user/client-id")
            }
            QuotaType::Request => ("request-time", "Tracking request-time per user/client-id"),
            QuotaType::ControllerMutation => {
                ("mutation-rate", "Tracking mutation-rate per user/client-id")
            }
        }
    }
}

/// One side of a quota entity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Level {
    /// A named user or client-id.
    Named(String),
    /// `<default>`.
    Default,
}

/// A (user, client-id) quota entity; `None` = that side is not part of the entity.
type Entity = (Option<Level>, Option<Level>);

/// Which kinds of levels have been configured (Kafka's `QuotaTypes`).
const CLIENT_ID_QUOTA_ENABLED: u8 = 1;
const USER_QUOTA_ENABLED: u8 = 2;
const USER_CLIENT_ID_QUOTA_ENABLED: u8 = 4;

/// The limits of one quota type (Kafka's `DefaultQuotaCallback.overriddenQuotas` and
/// `quotaTypesEnabled`).
#[derive(Clone, Debug, Default)]
struct Limits {
    overrides: HashMap<Entity, f64>,
    /// Sticky: a kind of level once configured stays enabled (Kafka: until restart).
    enabled: u8,
}

/// Metric tags of a sensor: (user, client-id), `""` where the tag is not used.
type Tags = (String, String);

impl Limits {
    fn get(&self, user: Option<Level>, client: Option<Level>) -> Option<f64> {
        self.overrides.get(&(user, client)).copied()
    }

    fn has(&self, user: Option<&Level>, client: Option<&Level>) -> bool {
        self.overrides
            .contains_key(&(user.cloned(), client.cloned()))
    }

    /// Kafka's `DefaultQuotaCallback.quotaMetricTags`.
    fn metric_tags(&self, user: &str, client_id: &str) -> Tags {
        let (u, c) = (user.to_owned(), client_id.to_owned());
        match self.enabled {
            0 | CLIENT_ID_QUOTA_ENABLED => (String::new(), c),
            USER_QUOTA_ENABLED => (u, String::new()),
            USER_CLIENT_ID_QUOTA_ENABLED => (u, c),
            _ => {
                let user_level = Level::Named(user.to_owned());
                let client_level = Level::Named(client_id.to_owned());
                let d = Level::Default;
                if self.has(Some(&user_level), Some(&client_level))
                    || self.has(Some(&user_level), Some(&d))
                {
                    (u, c)
                } else if self.has(Some(&user_level), None) {
                    (u, String::new())
                } else if self.has(Some(&d), Some(&client_level)) || self.has(Some(&d), Some(&d)) {
                    (u, c)
                } else if self.has(Some(&d), None) {
                    (u, String::new())
                } else {
                    (String::new(), c)
                }
            }
        }
    }

    /// Kafka's `DefaultQuotaCallback.quotaLimit`: the limit for a sensor's tags, `None` =
    /// unlimited.
    fn limit(&self, (user, client_id): &Tags) -> Option<f64> {
        let named = |s: &str| Some(Level::Named(s.to_owned()));
        let d = || Some(Level::Default);
        if !user.is_empty() && !client_id.is_empty() {
            self.get(named(user), named(client_id))
                .or_else(|| self.get(named(user), d()))
                .or_else(|| self.get(d(), named(client_id)))
                .or_else(|| self.get(d(), d()))
        } else if !user.is_empty() {
            self.get(named(user), None).or_else(|| self.get(d(), None))
        } else if !client_id.is_empty() {
            self.get(None, named(client_id))
                .or_else(|| self.get(None, d()))
        } else {
            None
        }
    }
}

/// The sensors of one (user, client-id) tag pair.
#[derive(Debug)]
struct ClientSensors {
    /// The quota sensor's rate (`byte-rate`, `request-time`, `mutation-rate`).
    rate: QuotaRate,
    /// `controller_mutation_rate`'s quota metric (`tokens`); unused by the other types.
    bucket: TokenBucket,
    /// `throttle-time`: Kafka's `Avg` over the default metric window.
    throttle_time: WindowedStat,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct ManagerState {
    limits: Limits,
    sensors: HashMap<Tags, ClientSensors>,
    created_since_sweep: usize,
}

/// Kafka's `ClientQuotaManager` for one [`QuotaType`].
#[derive(Debug)]
pub struct ClientQuotaManager {
    quota_type: QuotaType,
    window: SampleConfig,
    /// `quotas_enabled`, readable without the lock: requests take no lock while no quota of
    /// this type was ever configured.
    enabled: AtomicBool,
    state: Mutex<ManagerState>,
}

impl ClientQuotaManager {
    /// A manager with no quotas over `quota.window.num` samples of
    /// `quota.window.size.seconds`.
    #[must_use]
    pub fn new(quota_type: QuotaType, window: SampleConfig) -> Self {
        ClientQuotaManager {
            quota_type,
            window,
            enabled: AtomicBool::new(false),
            state: Mutex::new(ManagerState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ManagerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a quota of this type has ever been configured (Kafka's `quotasEnabled`):
    /// nothing is recorded before.
    #[must_use]
    pub fn quotas_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// The sensors for `user` / `client_id`, created on first use.
    fn sensors<'a>(
        &self,
        state: &'a mut ManagerState,
        user: &str,
        client_id: &str,
        now: Instant,
    ) -> (Tags, &'a mut ClientSensors) {
        let tags = state.limits.metric_tags(user, client_id);
        if !state.sensors.contains_key(&tags) {
            state.created_since_sweep += 1;
            if state.created_since_sweep >= SWEEP_EVERY_CREATIONS {
                state.created_since_sweep = 0;
                state.sensors.retain(|_, s| {
                    now.saturating_duration_since(s.last_used) < INACTIVE_SENSOR_EXPIRATION
                });
            }
        }
        let window = self.window;
        let sensors = state
            .sensors
            .entry(tags.clone())
            .or_insert_with(|| ClientSensors {
                rate: QuotaRate::new(window),
                bucket: TokenBucket::new(window),
                throttle_time: WindowedStat::avg(SampleConfig::default()),
                last_used: now,
            });
        sensors.last_used = now;
        (tags, sensors)
    }

    /// Kafka's `maybeRecordAndGetThrottleTimeMs`: records `value` for the client and returns
    /// the throttle time in ms (0 within the quota, or when no quota of this type was ever
    /// configured).
    pub fn record_and_get_throttle_time_ms(
        &self,
        user: &str,
        client_id: &str,
        value: f64,
        now: Instant,
    ) -> i32 {
        if !self.quotas_enabled() {
            return 0;
        }
        let mut state = self.lock();
        let (tags, _) = self.sensors(&mut state, user, client_id, now);
        // Without a limit the bound is Kafka's `Long.MAX_VALUE` default: never exceeded.
        let bound = state.limits.limit(&tags).unwrap_or(i64::MAX as f64);
        let Some(sensors) = state.sensors.get_mut(&tags) else {
            return 0;
        };
        match sensors.rate.record_checked(value, now, bound) {
            Ok(()) => 0,
            Err(violation) => {
                let ms = if self.quota_type == QuotaType::Request {
                    // Kafka's `ClientRequestQuotaManager.throttleTime`: capped at one
                    // quota window.
                    violation.bounded_throttle_time_ms(
                        i64::try_from(self.window.window.as_millis()).unwrap_or(i64::MAX),
                    )
                } else {
                    violation.throttle_time_ms()
                };
                i32::try_from(ms.max(0)).unwrap_or(i32::MAX)
            }
        }
    }

    /// Kafka's `ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs` (on a
    /// [`QuotaType::Request`] manager): records `busy` — the time the request's handling
    /// spent running — as a percentage of one thread-second (`nanosToPercentage`,
    /// `nanos × 100 / 10⁹`) and returns the throttle time, capped at one quota window.
    pub fn record_request_time(
        &self,
        user: &str,
        client_id: &str,
        busy: Duration,
        now: Instant,
    ) -> i32 {
        let percentage = busy.as_nanos() as f64 * 100.0 / 1e9;
        self.record_and_get_throttle_time_ms(user, client_id, percentage, now)
    }

    /// Kafka's `StrictControllerMutationQuota.record` / `PermissiveControllerMutationQuota
    /// .record` (on a [`QuotaType::ControllerMutation`] manager): takes `permits` partitions
    /// from the client's token bucket. Strict: refused, nothing taken, while the bucket is
    /// negative; permissive: always taken. `Err` carries the throttle time in ms (the time for
    /// the bucket to refill to zero).
    ///
    /// # Errors
    /// The throttle time when the bucket is (strict: was; permissive: went) negative.
    pub fn record_mutation(
        &self,
        user: &str,
        client_id: &str,
        permits: f64,
        strict: bool,
        now: Instant,
    ) -> Result<(), i64> {
        if !self.quotas_enabled() {
            return Ok(());
        }
        let mut state = self.lock();
        let (tags, _) = self.sensors(&mut state, user, client_id, now);
        let bound = state.limits.limit(&tags).unwrap_or(i64::MAX as f64);
        let Some(sensors) = state.sensors.get_mut(&tags) else {
            return Ok(());
        };
        if strict {
            sensors
                .bucket
                .check(now, bound)
                .map_err(|v| v.token_bucket_throttle_time_ms())?;
            sensors.bucket.record(permits, now, bound);
            sensors.rate.record(permits, now);
            Ok(())
        } else {
            sensors.bucket.record(permits, now, bound);
            sensors.rate.record(permits, now);
            sensors
                .bucket
                .check(now, bound)
                .map_err(|v| v.token_bucket_throttle_time_ms())
        }
    }

    /// Kafka's `unrecordQuotaSensor`: takes back `value` recorded for a request that will
    /// not be served (a throttled fetch answers empty).
    pub fn unrecord(&self, user: &str, client_id: &str, value: f64, now: Instant) {
        if !self.quotas_enabled() {
            return;
        }
        let mut state = self.lock();
        let (_, sensors) = self.sensors(&mut state, user, client_id, now);
        sensors.rate.record(-value, now);
    }

    /// Kafka's `getMaxValueInQuotaWindow`: the most that can be recorded at once without a
    /// certain throttle, `limit × (samples − 1) × window seconds` (a consumer's fetch size is
    /// capped to it); unbounded without a quota.
    #[must_use]
    pub fn max_value_in_quota_window(&self, user: &str, client_id: &str) -> f64 {
        if !self.quotas_enabled() {
            return f64::MAX;
        }
        let state = self.lock();
        let tags = state.limits.metric_tags(user, client_id);
        state.limits.limit(&tags).map_or(f64::MAX, |limit| {
            limit
                * (self.window.samples.saturating_sub(1)) as f64
                * self.window.window.as_secs_f64()
        })
    }

    /// Records a throttle of `throttle_time_ms` in the client's `throttle-time` sensor (the
    /// caller mutes the connection).
    pub fn record_throttle(
        &self,
        user: &str,
        client_id: &str,
        throttle_time_ms: i32,
        now: Instant,
    ) {
        if throttle_time_ms <= 0 {
            return;
        }
        let mut state = self.lock();
        let (_, sensors) = self.sensors(&mut state, user, client_id, now);
        sensors
            .throttle_time
            .record(f64::from(throttle_time_ms), now);
    }

    /// Takes the quotas of this type from `image`.
    pub fn update(&self, image: &MetadataImage) {
        let key = self.quota_type.key();
        let mut overrides = HashMap::new();
        let mut enabled = 0u8;
        for (entity, values) in &image.client_quotas.entities {
            let Some(value) = values.get(key) else {
                continue;
            };
            let level = |kind: &str| {
                entity
                    .0
                    .get(kind)
                    .map(|name| name.clone().map_or(Level::Default, Level::Named))
            };
            let (user, client) = (level("user"), level("client-id"));
            enabled |= match (&user, &client) {
                (Some(_), Some(_)) => USER_CLIENT_ID_QUOTA_ENABLED,
                (Some(_), None) => USER_QUOTA_ENABLED,
                (None, Some(_)) => CLIENT_ID_QUOTA_ENABLED,
                (None, None) => continue, // an `ip` entity
            };
            overrides.insert((user, client), *value);
        }
        let mut state = self.lock();
        if overrides != state.limits.overrides {
            info!(
                quota_type = self.quota_type.group(),
                quotas = overrides.len(),
                "client quotas changed"
            );
        }
        state.limits.enabled |= enabled;
        state.limits.overrides = overrides;
        self.enabled
            .store(state.limits.enabled != 0, Ordering::Release);
    }

    /// The limit that applies to `user` / `client_id` now (tests and diagnostics).
    #[must_use]
    pub fn quota(&self, user: &str, client_id: &str) -> Option<f64> {
        let state = self.lock();
        let tags = state.limits.metric_tags(user, client_id);
        state.limits.limit(&tags)
    }

    fn collect(&self, now: Instant, out: &mut Vec<Family>) {
        let mut state = self.lock();
        if state.sensors.is_empty() {
            return;
        }
        let group = self.quota_type.group();
        let (rate_name, rate_help) = self.quota_type.rate_metric();
        let mut byte_rate = Family {
            name: krust_metrics::prometheus_name("kafka.server", group, rate_name),
            help: rate_help.to_owned(),
            kind: MetricKind::Gauge,
            samples: Vec::new(),
        };
        let mut tokens = Family {
            name: krust_metrics::prometheus_name("kafka.server", group, "tokens"),
            help: "Tracking remaining tokens in the token bucket per user/client-id".to_owned(),
            kind: MetricKind::Gauge,
            samples: Vec::new(),
        };
        let mut throttle = Family {
            name: krust_metrics::prometheus_name("kafka.server", group, "throttle-time"),
            help: "Tracking average throttle-time per user/client-id".to_owned(),
            kind: MetricKind::Gauge,
            samples: Vec::new(),
        };
        let mut tags: Vec<Tags> = state.sensors.keys().cloned().collect();
        tags.sort();
        for t in tags {
            let labels = vec![
                ("user".to_owned(), sanitize(&t.0)),
                ("client_id".to_owned(), t.1.clone()),
            ];
            if self.quota_type == QuotaType::ControllerMutation {
                let bound = state.limits.limit(&t).unwrap_or(i64::MAX as f64);
                if let Some(s) = state.sensors.get_mut(&t) {
                    tokens.samples.push(krust_metrics::Sample {
                        suffix: "",
                        labels: labels.clone(),
                        value: s.bucket.measure(now, bound),
                    });
                }
            }
            let Some(s) = state.sensors.get_mut(&t) else {
                continue;
            };
            byte_rate.samples.push(krust_metrics::Sample {
                suffix: "",
                labels: labels.clone(),
                value: s.rate.measure(now),
            });
            throttle.samples.push(krust_metrics::Sample {
                suffix: "",
                labels,
                value: s.throttle_time.measure(now),
            });
        }
        out.push(byte_rate);
        if !tokens.samples.is_empty() {
            out.push(tokens);
        }
        out.push(throttle);
    }
}

/// Kafka's `Sanitizer.sanitize` for the `user` metric tag: URL-encoding (UTF-8, `' '` →
/// `%20`, `*` → `%2A`; letters, digits and `.-_` kept).
#[must_use]
pub fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The broker's client quota managers (Kafka's `QuotaFactory.QuotaManagers`, the byte-rate
/// ones), a `/metrics` collector.
#[derive(Debug)]
pub struct ClientQuotas {
    /// `producer_byte_rate`.
    pub produce: ClientQuotaManager,
    /// `consumer_byte_rate`.
    pub fetch: ClientQuotaManager,
    /// `request_percentage`.
    pub request: ClientQuotaManager,
}

impl ClientQuotas {
    /// Managers with no quotas, windows of `quota.window.num` × `quota.window.size.seconds`.
    #[must_use]
    pub fn new(window: SampleConfig) -> Self {
        ClientQuotas {
            produce: ClientQuotaManager::new(QuotaType::Produce, window),
            fetch: ClientQuotaManager::new(QuotaType::Fetch, window),
            request: ClientQuotaManager::new(QuotaType::Request, window),
        }
    }

    /// Kafka's `ClientQuotaManager.throttle` for the request of `ctx`: records the throttle
    /// in `manager`'s `throttle-time` and mutes the connection for `throttle_time_ms` (the
    /// response still goes out at once, carrying it).
    pub fn throttle(
        manager: &ClientQuotaManager,
        ctx: &krust_net::RequestContext,
        throttle_time_ms: i32,
        now: Instant,
    ) {
        if throttle_time_ms <= 0 {
            return;
        }
        manager.record_throttle(&ctx.principal.name, &ctx.client_id, throttle_time_ms, now);
        ctx.throttle.throttle(Duration::from_millis(
            u64::try_from(throttle_time_ms).unwrap_or(0),
        ));
    }

    /// Takes every quota from `image`.
    pub fn update(&self, image: &MetadataImage) {
        self.produce.update(image);
        self.fetch.update(image);
        self.request.update(image);
    }
}

impl Collector for ClientQuotaManager {
    fn collect(&self, now: Instant, out: &mut Vec<Family>) {
        ClientQuotaManager::collect(self, now, out);
    }
}

impl Collector for ClientQuotas {
    fn collect(&self, now: Instant, out: &mut Vec<Family>) {
        self.produce.collect(now, out);
        self.fetch.collect(now, out);
        self.request.collect(now, out);
    }
}

/// A strict [`ControllerMutationQuota`] refused a mutation (Kafka's
/// `ThrottlingQuotaExceededException`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutationRefused;

/// One request's `controller_mutation_rate` quota (Kafka's `StrictControllerMutationQuota` /
/// `PermissiveControllerMutationQuota`): strict for CreateTopics v6+, CreatePartitions v3+ and
/// DeleteTopics v5+ (a mutation is refused while the bucket is negative), permissive for older
/// versions (accepted, the client throttled). Remembers the last throttle for the response.
#[derive(Debug)]
pub struct ControllerMutationQuota {
    manager: Arc<ClientQuotaManager>,
    user: String,
    client_id: String,
    strict: bool,
    last_throttle_time_ms: i64,
    last_recorded: Option<Instant>,
}

impl ControllerMutationQuota {
    /// The quota of `user` / `client_id` in `manager` (a [`QuotaType::ControllerMutation`]
    /// manager), strict or permissive.
    #[must_use]
    pub fn new(
        manager: Arc<ClientQuotaManager>,
        user: &str,
        client_id: &str,
        strict: bool,
    ) -> Self {
        ControllerMutationQuota {
            manager,
            user: user.to_owned(),
            client_id: client_id.to_owned(),
            strict,
            last_throttle_time_ms: 0,
            last_recorded: None,
        }
    }

    /// Kafka's `ControllerMutationQuotaManager.newQuotaFor`: strict from `strict_since_version`.
    #[must_use]
    pub fn for_version(
        manager: Arc<ClientQuotaManager>,
        user: &str,
        client_id: &str,
        api_version: i16,
        strict_since_version: i16,
    ) -> Self {
        Self::new(
            manager,
            user,
            client_id,
            api_version >= strict_since_version,
        )
    }

    /// Takes `partitions` at `now`.
    ///
    /// # Errors
    /// [`MutationRefused`] when strict and the quota is used up: the mutation must be refused
    /// with `THROTTLING_QUOTA_EXCEEDED`.
    pub fn record(&mut self, partitions: usize, now: Instant) -> Result<(), MutationRefused> {
        match self.manager.record_mutation(
            &self.user,
            &self.client_id,
            partitions as f64,
            self.strict,
            now,
        ) {
            Ok(()) => Ok(()),
            Err(throttle_ms) => {
                self.last_throttle_time_ms = throttle_ms;
                self.last_recorded = Some(now);
                if self.strict {
                    Err(MutationRefused)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Kafka's `AbstractControllerMutationQuota.throttleTime`: the last throttle less the time
    /// since it was computed.
    #[must_use]
    pub fn throttle_time_ms(&self, now: Instant) -> i32 {
        let Some(at) = self.last_recorded else {
            return 0;
        };
        let elapsed =
            i64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(i64::MAX);
        i32::try_from((self.last_throttle_time_ms - elapsed).max(0)).unwrap_or(i32::MAX)
    }

    /// The manager (its `throttle-time` sensor records the throttle).
    #[must_use]
    pub fn manager(&self) -> &ClientQuotaManager {
        &self.manager
    }
}

/// Whether a published image may hold other client quotas than the last one: a snapshot, or a
/// delta with quota records.
fn client_quotas_changed(delta: &MetadataDelta, manifest: &LoaderManifest) -> bool {
    matches!(manifest, LoaderManifest::Snapshot { .. }) || delta.client_quotas_delta().is_some()
}

/// Quota changes to the broker's managers (Kafka's `DynamicClientQuotaPublisher`).
#[derive(Debug)]
pub struct ClientQuotaPublisher {
    quotas: Arc<ClientQuotas>,
}

impl ClientQuotaPublisher {
    /// For `quotas`.
    #[must_use]
    pub fn new(quotas: Arc<ClientQuotas>) -> Self {
        ClientQuotaPublisher { quotas }
    }
}

impl MetadataPublisher for ClientQuotaPublisher {
    fn name(&self) -> &str {
        "DynamicClientQuotaPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        if client_quotas_changed(delta, manifest) {
            self.quotas.update(image);
        }
    }
}

/// The `connection_creation_rate` of `ip` entities (`None` = the default entity) in `image`;
/// names that are not IP addresses are skipped (the controller accepts only addresses).
#[must_use]
pub fn ip_connection_rates(image: &MetadataImage) -> HashMap<Option<std::net::IpAddr>, f64> {
    let mut rates = HashMap::new();
    for (entity, values) in &image.client_quotas.entities {
        let (Some(name), Some(rate)) = (entity.0.get("ip"), values.get("connection_creation_rate"))
        else {
            continue;
        };
        match name {
            None => {
                rates.insert(None, *rate);
            }
            Some(address) => {
                if let Ok(ip) = address.parse() {
                    rates.insert(Some(ip), *rate);
                }
            }
        }
    }
    rates
}

/// IP connection-rate quota changes to the listeners' [`krust_net::ConnectionQuotas`] (Kafka's
/// `ClientQuotaMetadataManager` → `ConnectionQuotas.updateIpConnectionRateQuota`).
#[derive(Debug)]
pub struct IpConnectionRatePublisher {
    quotas: Arc<krust_net::ConnectionQuotas>,
}

impl IpConnectionRatePublisher {
    /// For `quotas`.
    #[must_use]
    pub fn new(quotas: Arc<krust_net::ConnectionQuotas>) -> Self {
        IpConnectionRatePublisher { quotas }
    }
}

impl MetadataPublisher for IpConnectionRatePublisher {
    fn name(&self) -> &str {
        "IpConnectionRatePublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        if client_quotas_changed(delta, manifest) {
            self.quotas
                .set_ip_connection_rates(ip_connection_rates(image));
        }
    }
}

#[cfg(test)]
mod tests {
    use krust_metadata::image::MetadataProvenance;
    use krust_metadata::records::{ClientQuotaRecord, MetadataRecord, QuotaEntity};

    use super::*;

    fn limits(entries: &[(Option<Level>, Option<Level>, f64)]) -> Limits {
        let mut l = Limits::default();
        for (u, c, v) in entries {
            l.enabled |= match (u, c) {
                (Some(_), Some(_)) => USER_CLIENT_ID_QUOTA_ENABLED,
                (Some(_), None) => USER_QUOTA_ENABLED,
                _ => CLIENT_ID_QUOTA_ENABLED,
            };
            l.overrides.insert((u.clone(), c.clone()), *v);
        }
        l
    }

    fn n(s: &str) -> Option<Level> {
        Some(Level::Named(s.to_owned()))
    }

    const D: Option<Level> = Some(Level::Default);

    #[test]
    fn the_most_specific_level_with_the_key_applies_in_kafkas_order() {
        // Kafka's ClientQuotaManagerTest.testQuotaConfigPrecedence, one level removed at a
        // time: each case names the level expected to apply to (userA, client1).
        let all = vec![
            (n("userA"), n("client1"), 1.0),
            (n("userA"), D, 2.0),
            (n("userA"), None, 3.0),
            (D, n("client1"), 4.0),
            (D, D, 5.0),
            (D, None, 6.0),
            (None, n("client1"), 7.0),
            (None, D, 8.0),
        ];
        for (drop, want, why) in [
            (0, 1.0, "/users/userA/clients/client1"),
            (1, 2.0, "/users/userA/clients/<default>"),
            (2, 3.0, "/users/userA"),
            (3, 4.0, "/users/<default>/clients/client1"),
            (4, 5.0, "/users/<default>/clients/<default>"),
            (5, 6.0, "/users/<default>"),
            (6, 7.0, "/clients/client1"),
            (7, 8.0, "/clients/<default>"),
        ] {
            let l = limits(&all[drop..]);
            let tags = l.metric_tags("userA", "client1");
            assert_eq!(l.limit(&tags), Some(want), "{why}");
        }
        // Another user and client fall to the defaults.
        let l = limits(&all);
        assert_eq!(l.limit(&l.metric_tags("userB", "client2")), Some(5.0));
        // A client sending no client id: the user levels only.
        assert_eq!(l.limit(&l.metric_tags("userB", "")), Some(6.0));
    }

    #[test]
    fn a_single_kind_of_level_shares_one_sensor_per_tag() {
        // Only client-id quotas: the user tag is empty, so every user of client1 shares one
        // rate (Kafka's fast path).
        let l = limits(&[(None, n("client1"), 100.0)]);
        assert_eq!(
            l.metric_tags("alice", "client1"),
            (String::new(), "client1".to_owned())
        );
        assert_eq!(l.limit(&l.metric_tags("bob", "client1")), Some(100.0));
        assert_eq!(l.limit(&l.metric_tags("bob", "client2")), None);
        // Only user quotas: the client tag is empty.
        let l = limits(&[(n("alice"), None, 50.0)]);
        assert_eq!(
            l.metric_tags("alice", "c"),
            ("alice".to_owned(), String::new())
        );
        assert_eq!(l.limit(&l.metric_tags("alice", "other")), Some(50.0));
        assert_eq!(l.limit(&l.metric_tags("bob", "c")), None);
    }

    #[test]
    fn producer_over_its_quota_gets_kafkas_throttle_and_metrics() {
        let window = SampleConfig::new(Duration::from_secs(1), 11);
        let m = ClientQuotaManager::new(QuotaType::Produce, window);
        let t0 = Instant::now();
        assert_eq!(
            m.record_and_get_throttle_time_ms("ANONYMOUS", "p", 1e9, t0),
            0,
            "nothing is recorded before any quota is configured"
        );
        let mut state = m.lock();
        state.limits = limits(&[(None, n("p"), 1000.0)]);
        drop(state);
        m.enabled.store(true, Ordering::Release);
        // First burst: 15000 bytes over a 10 s window = 1500 B/s → (1500-1000)/1000 × 10000.
        assert_eq!(
            m.record_and_get_throttle_time_ms("ANONYMOUS", "p", 15_000.0, t0),
            5000
        );
        m.record_throttle("ANONYMOUS", "p", 5000, t0);
        // Another client id has no quota.
        assert_eq!(
            m.record_and_get_throttle_time_ms("ANONYMOUS", "q", 1e9, t0),
            0
        );
        // Consumers' fetch size cap: 1000 × (11 − 1) × 1 s.
        assert_eq!(m.max_value_in_quota_window("ANONYMOUS", "p"), 10_000.0);
        let mut out = Vec::new();
        m.collect(t0, &mut out);
        let names: Vec<&str> = out.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kafka_server_produce_byte_rate",
                "kafka_server_produce_throttle_time"
            ]
        );
        let p = &out[0].samples[0];
        assert_eq!(p.labels[1], ("client_id".to_owned(), "p".to_owned()));
        assert!((p.value - 1500.0).abs() < 1e-9, "{p:?}");
        assert_eq!(out[1].samples[0].value, 5000.0);
    }

    fn with_limits(m: &ClientQuotaManager, l: Limits) {
        m.lock().limits = l;
        m.enabled.store(true, Ordering::Release);
    }

    #[test]
    fn controller_mutations_are_refused_strictly_and_throttled_permissively() {
        // controller_mutation_rate 2 on client c: a bucket of 11 × 1 s × 2 = 22 partitions.
        let window = SampleConfig::new(Duration::from_secs(1), 11);
        let m = Arc::new(ClientQuotaManager::new(
            QuotaType::ControllerMutation,
            window,
        ));
        with_limits(&m, limits(&[(None, n("c"), 2.0)]));
        let t0 = Instant::now();
        // CreateTopics v7 (strict since v6): 10, 10, 10 taken (22 → −8), then refused.
        let mut strict = ControllerMutationQuota::for_version(Arc::clone(&m), "u", "c", 7, 6);
        for _ in 0..3 {
            assert_eq!(strict.record(10, t0), Ok(()));
        }
        assert_eq!(strict.throttle_time_ms(t0), 0, "nothing refused yet");
        assert_eq!(strict.record(10, t0), Err(MutationRefused));
        assert_eq!(strict.throttle_time_ms(t0), 4000, "8 tokens at 2/s");
        assert_eq!(
            strict.throttle_time_ms(t0 + Duration::from_millis(1500)),
            2500,
            "less the time since"
        );
        // CreateTopics v5 (permissive) on the same sensor: taken (−18), throttled 9 s.
        let mut permissive = ControllerMutationQuota::for_version(Arc::clone(&m), "u", "c", 5, 6);
        assert_eq!(permissive.record(10, t0), Ok(()));
        assert_eq!(permissive.throttle_time_ms(t0), 9000);
        // Another client id has no quota.
        let mut other = ControllerMutationQuota::for_version(Arc::clone(&m), "u", "d", 7, 6);
        assert_eq!(other.record(1000, t0), Ok(()));
        let mut out = Vec::new();
        m.collect(t0, &mut out);
        let names: Vec<&str> = out.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kafka_server_controllermutation_mutation_rate",
                "kafka_server_controllermutation_tokens",
                "kafka_server_controllermutation_throttle_time"
            ]
        );
    }

    #[test]
    fn request_time_is_a_percentage_of_one_thread_and_its_throttle_is_capped() {
        // request_percentage 1 (1 % of a thread) on client c. 50 ms of handling = 5 %, over
        // the first window of 10 s: 0.5 %/s ≤ 1, not throttled. 200 ms more: 25 % / 10 s =
        // 2.5 > 1 → (2.5 − 1) / 1 × 10000 = 15000 ms, capped at one window (1000 ms).
        let window = SampleConfig::new(Duration::from_secs(1), 11);
        let m = ClientQuotaManager::new(QuotaType::Request, window);
        with_limits(&m, limits(&[(None, n("c"), 1.0)]));
        let t0 = Instant::now();
        assert_eq!(
            m.record_request_time("u", "c", Duration::from_millis(50), t0),
            0
        );
        assert_eq!(
            m.record_request_time("u", "c", Duration::from_millis(200), t0),
            1000
        );
        assert_eq!(
            m.record_request_time("u", "other", Duration::from_secs(5), t0),
            0
        );
    }

    fn quota_record(entity: &[(&str, Option<&str>)], key: &str, value: f64) -> MetadataRecord {
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: entity
                .iter()
                .map(|(t, n)| QuotaEntity {
                    entity_type: (*t).to_owned(),
                    entity_name: n.map(str::to_owned),
                    unknown_tagged_fields: Vec::new(),
                })
                .collect(),
            key: key.to_owned(),
            value,
            remove: false,
            unknown_tagged_fields: Vec::new(),
        })
    }

    #[test]
    fn quotas_are_taken_from_the_image_by_key_and_entity() {
        let records = vec![
            quota_record(&[("client-id", Some("p"))], "producer_byte_rate", 1000.0),
            quota_record(&[("user", None)], "consumer_byte_rate", 2000.0),
            quota_record(
                &[("user", Some("alice")), ("client-id", None)],
                "producer_byte_rate",
                3000.0,
            ),
            quota_record(&[("ip", None)], "connection_creation_rate", 5.0),
            quota_record(&[("ip", Some("10.1.2.3"))], "connection_creation_rate", 7.0),
        ];
        let image = MetadataImage::from_records(&records, MetadataProvenance::new(5, 1, 1000))
            .expect("image");
        let quotas = ClientQuotas::new(SampleConfig::new(Duration::from_secs(1), 11));
        quotas.update(&image);
        // Produce: client-id and user+client-id levels configured.
        assert_eq!(quotas.produce.quota("bob", "p"), Some(1000.0));
        assert_eq!(
            quotas.produce.quota("alice", "p"),
            Some(3000.0),
            "user + <default> client"
        );
        assert_eq!(quotas.produce.quota("bob", "q"), None);
        // Fetch: only the default user.
        assert_eq!(quotas.fetch.quota("anyone", "c"), Some(2000.0));
        let rates = ip_connection_rates(&image);
        assert_eq!(rates.get(&None), Some(&5.0));
        assert_eq!(
            rates.get(&Some("10.1.2.3".parse().expect("ip"))),
            Some(&7.0)
        );
        assert_eq!(rates.len(), 2);
    }

    #[test]
    fn sanitize_matches_kafkas_url_encoding() {
        assert_eq!(sanitize("ANONYMOUS"), "ANONYMOUS");
        assert_eq!(sanitize("CN=a b,O=c*"), "CN%3Da%20b%2CO%3Dc%2A");
    }
}
