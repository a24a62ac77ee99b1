//! Kafka's metric quotas: a [`Rate`] with an upper bound (a `Sensor` whose `MetricConfig`
//! carries a `Quota`), the [`QuotaViolation`] a recording over the bound raises
//! (`QuotaViolationException`), and the throttle time computed from it (Kafka 3.9's
//! `QuotaUtils.throttleTime` / `boundedThrottleTime`).
//!
//! If `O` is the observed rate and `T` the bound over a window of `W` ms, a client must wait
//! `X` ms with no further traffic for `O × W / (W + X) = T`, so `X = (O − T) / T × W`, rounded
//! as Java's `Math.round`. `W` is the rate's own window ([`Rate::window_size_ms`]) at the time of
//! the recording.

use std::time::Instant;

use crate::stats::{Rate, SampleConfig};

/// A recording took a quota-bound rate over its bound (Kafka's `QuotaViolationException`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaViolation {
    /// The rate measured right after the recording.
    pub value: f64,
    /// The quota's bound.
    pub bound: f64,
    /// The window the rate was measured over, in ms (Kafka's `Rate.windowSize`).
    pub window_ms: u64,
}

impl QuotaViolation {
    /// Kafka's `QuotaUtils.throttleTime`: how long the client must stay quiet for the rate to
    /// fall back to the bound, `round((value − bound) / bound × window_ms)`.
    #[must_use]
    pub fn throttle_time_ms(&self) -> i64 {
        let ms = (self.value - self.bound) / self.bound * self.window_ms as f64;
        java_round(ms)
    }

    /// Kafka's `QuotaUtils.boundedThrottleTime`: [`QuotaViolation::throttle_time_ms`] capped at
    /// `max_ms`.
    #[must_use]
    pub fn bounded_throttle_time_ms(&self, max_ms: i64) -> i64 {
        self.throttle_time_ms().min(max_ms)
    }
}

/// Kafka's `TokenBucket` stat under a quota `bound` (KIP-599, the `controller_mutation_rate`
/// quota): a bucket of up to `burst = samples × window seconds × bound` tokens, refilled at
/// `bound` tokens per second, from which each recording takes its value. A new bucket is full
/// (Kafka's starts empty at time 0, so its first refill fills it). The tokens may go negative;
/// a negative bucket is a violation (`Sensor.checkQuotas` special-cases `TokenBucket`), and the
/// throttle is the time to refill to zero, `round(−tokens / bound × 1000)` ms
/// (`ControllerMutationQuotaManager.throttleTimeMs`).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    config: SampleConfig,
    tokens: f64,
    last_update: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket over `config` (`controller.quota.window.num` samples of
    /// `controller.quota.window.size.seconds`).
    #[must_use]
    pub fn new(config: SampleConfig) -> Self {
        Self {
            config,
            tokens: f64::MAX,
            last_update: None,
        }
    }

    fn burst(&self, bound: f64) -> f64 {
        self.config.samples as f64 * self.config.window.as_secs_f64() * bound
    }

    /// Kafka's `refill`: adds `bound` tokens per second since the last update, up to the burst.
    fn refill(&mut self, now: Instant, bound: f64) {
        let burst = self.burst(bound);
        let elapsed_s = self.last_update.map_or(f64::MAX, |last| {
            // Kafka converts whole milliseconds.
            now.saturating_duration_since(last).as_millis() as f64 / 1000.0
        });
        self.tokens = burst.min(self.tokens + bound * elapsed_s);
        self.last_update = Some(now);
    }

    /// The tokens left at `now` (Kafka's `measure`, the `tokens` metric).
    pub fn measure(&mut self, now: Instant, bound: f64) -> f64 {
        self.refill(now, bound);
        self.tokens
    }

    /// Takes `value` tokens at `now`, whatever is left (Kafka's `record`).
    pub fn record(&mut self, value: f64, now: Instant, bound: f64) {
        self.refill(now, bound);
        self.tokens = self.burst(bound).min(self.tokens - value);
    }

    /// Kafka's `Sensor.checkQuotas` for a token bucket: a violation when the bucket is
    /// negative at `now`.
    ///
    /// # Errors
    /// The violation, whose [`QuotaViolation::token_bucket_throttle_time_ms`] is the wait.
    pub fn check(&mut self, now: Instant, bound: f64) -> Result<(), QuotaViolation> {
        let tokens = self.measure(now, bound);
        if tokens < 0.0 {
            Err(QuotaViolation {
                value: tokens,
                bound,
                window_ms: 0,
            })
        } else {
            Ok(())
        }
    }
}

impl QuotaViolation {
    /// Kafka's `ControllerMutationQuotaManager.throttleTimeMs` for a [`TokenBucket`]
    /// violation: the time to refill the bucket to zero, `round(−tokens / bound × 1000)`.
    #[must_use]
    pub fn token_bucket_throttle_time_ms(&self) -> i64 {
        java_round(-self.value / self.bound * 1000.0)
    }
}

/// Java's `Math.round(double)`: `floor(x + 0.5)`, `NaN` → 0, saturating at the `long` range.
fn java_round(x: f64) -> i64 {
    if x.is_nan() {
        return 0;
    }
    // `as` saturates for out-of-range floats, as Java's conversion does.
    (x + 0.5).floor() as i64
}

/// A rate with an upper bound checked at each recording: Kafka's quota `Sensor` with one
/// `Rate` metric (`record(value, timeMs, checkQuotas)`). The bound is passed at each
/// recording, so a quota changed by the operator applies to the next recording at once (Kafka
/// updates the live metric's `MetricConfig`).
#[derive(Clone, Debug)]
pub struct QuotaRate {
    rate: Rate,
}

impl QuotaRate {
    /// An empty rate over `config` (a client quota uses `quota.window.num` samples of
    /// `quota.window.size.seconds`).
    #[must_use]
    pub fn new(config: SampleConfig) -> Self {
        Self {
            rate: Rate::new(config),
        }
    }

    /// Records `value` at `now`, then measures: a rate over `bound` is a violation (the value
    /// stays recorded, as in Kafka; see [`QuotaRate::record`] to take it back).
    ///
    /// # Errors
    /// [`QuotaViolation`] when the rate after this recording is above `bound`.
    pub fn record_checked(
        &mut self,
        value: f64,
        now: Instant,
        bound: f64,
    ) -> Result<(), QuotaViolation> {
        self.rate.record(value, now);
        let window_ms = self.rate.window_size_ms(now);
        let measured = self.rate.measure(now);
        // Kafka's `Quota.acceptable` for an upper bound: `value <= bound`.
        if measured <= bound {
            Ok(())
        } else {
            Err(QuotaViolation {
                value: measured,
                bound,
                window_ms,
            })
        }
    }

    /// Records `value` at `now` without checking (a negative value "un-records" an earlier
    /// one, as Kafka's `unrecordQuotaSensor` does for a throttled fetch).
    pub fn record(&mut self, value: f64, now: Instant) {
        self.rate.record(value, now);
    }

    /// The rate per second at `now`.
    pub fn measure(&mut self, now: Instant) -> f64 {
        self.rate.measure(now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `quota.window.num` 11 × `quota.window.size.seconds` 1 (Kafka's defaults).
    fn client_quota_window() -> SampleConfig {
        SampleConfig::new(Duration::from_secs(1), 11)
    }

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn spike_after_ten_seconds_under_quota_is_throttled_2100_ms() {
        // Kafka 3.9's ClientQuotaManagerTest.testQuotaViolation, worked by hand: 400 bytes
        // each second for 10 s under a 500 B/s quota, then 2300 bytes at 10.5 s:
        // (400 × 10 + 2300) / 10.5 s = 600 B/s, throttle (600 − 500) / 500 × 10500 = 2100 ms.
        let t0 = Instant::now();
        let mut rate = QuotaRate::new(client_quota_window());
        for s in 0..10 {
            assert_eq!(rate.record_checked(400.0, at(t0, s * 1000), 500.0), Ok(()));
        }
        let violation = rate
            .record_checked(2300.0, at(t0, 10_500), 500.0)
            .expect_err("over the quota");
        assert_eq!(violation.window_ms, 10_500);
        assert!((violation.value - 600.0).abs() < 1e-9, "{violation:?}");
        assert_eq!(violation.throttle_time_ms(), 2100);
        // Kafka's test: once the spike's sample has rolled out of the 11 windows (400 B/s
        // meanwhile), a recording of 0 is not throttled.
        let mut t = 10_500 + 2100;
        for _ in 0..10 {
            let _ = rate.record_checked(400.0, at(t0, t), 500.0);
            t += 1000;
        }
        assert_eq!(rate.record_checked(0.0, at(t0, t), 500.0), Ok(()));
    }

    #[test]
    fn a_first_burst_is_divided_by_ten_full_windows() {
        // Nothing recorded before: the window counts as samples − 1 = 10 full seconds, so a
        // first 15000-byte request against 1000 B/s measures 1500 B/s and waits
        // (1500 − 1000) / 1000 × 10000 = 5000 ms.
        let t0 = Instant::now();
        let mut rate = QuotaRate::new(client_quota_window());
        let violation = rate.record_checked(15_000.0, t0, 1000.0).expect_err("over");
        assert_eq!(violation.window_ms, 10_000);
        assert_eq!(violation.throttle_time_ms(), 5000);
        // A request-percentage or connection-rate throttle is capped at one window (1000 ms).
        assert_eq!(violation.bounded_throttle_time_ms(1000), 1000);
        // Exactly at the bound is acceptable (Kafka's `Quota.acceptable`: value <= bound).
        let mut rate = QuotaRate::new(client_quota_window());
        assert_eq!(rate.record_checked(10_000.0, t0, 1000.0), Ok(()));
    }

    #[test]
    fn unrecording_restores_the_previous_rate() {
        // A throttled fetch's bytes are taken back (Kafka's `unrecordQuotaSensor`).
        let t0 = Instant::now();
        let mut rate = QuotaRate::new(client_quota_window());
        rate.record(5000.0, t0);
        let before = rate.measure(at(t0, 300));
        assert!(rate.record_checked(20_000.0, at(t0, 300), 1000.0).is_err());
        rate.record(-20_000.0, at(t0, 300));
        assert_eq!(rate.measure(at(t0, 300)), before);
    }

    #[test]
    fn a_consumer_like_sequence_throttles_exactly_as_kafkas_sensor() {
        // Expected values printed by Kafka 3.9's own classes
        // (`scripts/quota-probe/KafkaRateProbe.java`: a `Sensor` with `new Rate()` and
        // `MetricConfig().timeWindow(1 s).samples(11).quota(upperBound(262144))`, recorded at
        // these explicit times, `QuotaUtils.throttleTime` on each `QuotaViolationException`,
        // then the value un-recorded as a throttled fetch does): ~1 MB fetches, retries after
        // each throttle, samples expiring 11 s after their last recording.
        let t0 = Instant::now();
        let mut rate = QuotaRate::new(client_quota_window());
        let bound = 262_144.0;
        for (ms, value, want) in [
            (0, 100.0, 0),
            (1000, 1e6, 0),
            (1100, 1e6, 0),
            (1200, 1e6, 1244),
            (2634, 1e6, 810),
            (3631, 1e6, 813),
            (4630, 1e6, 814),
            (11_000, 1e6, 1444),
            (12_050, 1e6, 394),
            (12_100, 1e6, 344),
            (12_200, 1e6, 0),
            (13_500, 1e6, 0),
            (14_000, 1e6, 78),
            (23_000, 1e6, 494),
        ] {
            let now = at(t0, ms);
            let got = match rate.record_checked(value, now, bound) {
                Ok(()) => 0,
                Err(violation) => {
                    rate.record(-value, now);
                    violation.throttle_time_ms()
                }
            };
            assert_eq!(got, want, "at {ms} ms");
        }
    }

    #[test]
    fn token_bucket_strict_and_permissive_as_kafkas_sensor() {
        // Expected values printed by Kafka 3.9's own classes
        // (`scripts/quota-probe/KafkaTokenBucketProbe.java`: a `Sensor` with `new TokenBucket()`
        // and `MetricConfig().timeWindow(1 s).samples(11).quota(upperBound(2))`, a burst of 22
        // tokens). Strict (CreateTopics v6+): `checkQuotas`, then `record` unchecked — a
        // violation refuses the mutation. Permissive (older versions): `record` then check — a
        // violation only throttles. Rows: (ms, partitions, strict throttle ms, strict tokens
        // after, permissive throttle ms, permissive tokens after).
        let t0 = Instant::now();
        let bound = 2.0;
        let mut strict = TokenBucket::new(client_quota_window());
        let mut permissive = TokenBucket::new(client_quota_window());
        for (ms, permits, strict_ms, strict_tokens, permissive_ms, permissive_tokens) in [
            (0, 10.0, 0, 12.0, 0, 12.0),
            (100, 10.0, 0, 2.2, 0, 2.2),
            (200, 10.0, 0, -7.6, 3800, -7.6),
            (300, 10.0, 3700, -7.4, 8700, -17.4),
            (4000, 10.0, 0, -10.0, 10_000, -20.0),
            (4100, 10.0, 4900, -9.8, 14_900, -29.8),
            (9000, 3.0, 0, -3.0, 11_500, -23.0),
        ] {
            let now = at(t0, ms);
            let got = match strict.check(now, bound) {
                Ok(()) => {
                    strict.record(permits, now, bound);
                    0
                }
                Err(v) => v.token_bucket_throttle_time_ms(),
            };
            assert_eq!(got, strict_ms, "strict at {ms} ms");
            let tokens = strict.measure(now, bound);
            assert!(
                (tokens - strict_tokens).abs() < 1e-9,
                "strict at {ms} ms: {tokens}"
            );
            permissive.record(permits, now, bound);
            let got = match permissive.check(now, bound) {
                Ok(()) => 0,
                Err(v) => v.token_bucket_throttle_time_ms(),
            };
            assert_eq!(got, permissive_ms, "permissive at {ms} ms");
            let tokens = permissive.measure(now, bound);
            assert!(
                (tokens - permissive_tokens).abs() < 1e-9,
                "permissive at {ms} ms: {tokens}"
            );
        }
    }

    #[test]
    fn throttle_time_rounds_as_java() {
        for (value, bound, window_ms, want, why) in [
            // Bounds that are powers of two keep the quotients exact.
            (1025.0, 1024.0, 10_752, 11, "10.5 rounds up"),
            (1024.5, 1024.0, 9_216, 5, "4.5 rounds up"),
            (1024.25, 1024.0, 1_024, 0, "0.25 rounds down"),
            (1024.75, 1024.0, 1_024, 1, "0.75 rounds up"),
        ] {
            let v = QuotaViolation {
                value,
                bound,
                window_ms,
            };
            assert_eq!(v.throttle_time_ms(), want, "{why}");
        }
    }
}
