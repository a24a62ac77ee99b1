//! Stats with Kafka's windowed semantics (`org.apache.kafka.common.metrics.stats`), every time
//! passed in by the caller.
//!
//! A [`WindowedStat`] is Kafka 3.9's `SampledStat`: a ring of [`SampleConfig::samples`] + 1
//! slots (the extra one holds the sample overlapping the start of the monitored window). A
//! recording goes into the current sample unless that sample is [`SampleConfig::window`] old,
//! in which case the next slot of the ring is reset and used. Before measuring, every sample
//! whose **last recording** is `samples × window` old or older is reset (a sample that began
//! before the window but was recorded into within it still counts). [`Rate`] divides a
//! windowed sum by the milliseconds the retained samples cover, counted as at least
//! `samples - 1` full windows (so a first burst is not divided by ~0) — Kafka's
//! `Rate.windowSize`, which the quota throttle time ([`crate::quota`]) is computed from.

use std::time::{Duration, Instant};

/// Kafka's `metrics.sample.window.ms` default.
pub const SAMPLE_WINDOW_DEFAULT: Duration = Duration::from_secs(30);
/// Kafka's `metrics.num.samples` default.
pub const NUM_SAMPLES_DEFAULT: usize = 2;
/// Most samples a stat may keep (bounds memory whatever the config says).
pub const MAX_SAMPLES: usize = 1024;

/// How a windowed stat samples (Kafka's `MetricConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleConfig {
    /// Length of one sample's window (`metrics.sample.window.ms`).
    pub window: Duration,
    /// Samples kept (`metrics.num.samples`), 1..=[`MAX_SAMPLES`].
    pub samples: usize,
}

impl Default for SampleConfig {
    fn default() -> Self {
        Self {
            window: SAMPLE_WINDOW_DEFAULT,
            samples: NUM_SAMPLES_DEFAULT,
        }
    }
}

impl SampleConfig {
    /// A config from Kafka's two settings, clamped into range (at least 1 ms, 1..=1024 samples).
    #[must_use]
    pub fn new(window: Duration, samples: usize) -> Self {
        Self {
            window: window.max(Duration::from_millis(1)),
            samples: samples.clamp(1, MAX_SAMPLES),
        }
    }

    /// The age at which a sample is forgotten.
    fn expiry(&self) -> Duration {
        // `samples` is at most MAX_SAMPLES, so this fits a u32.
        self.window * u32::try_from(self.samples).unwrap_or(u32::MAX)
    }
}

/// What a [`WindowedStat`] combines its samples into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// Kafka's `Avg`: sum of values / number of recordings; `NaN` with none.
    Avg,
    /// Kafka's `Max`: largest value recorded; `NaN` with none.
    Max,
    /// Kafka's `WindowedSum`: sum of values; `0` with none.
    Sum,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// When this sample's window began.
    start: Instant,
    /// When a value was last recorded into it (its start while empty).
    last_event: Instant,
    value: f64,
    count: u64,
}

impl Sample {
    fn new(kind: StatKind, start: Instant) -> Self {
        Self {
            start,
            last_event: start,
            value: initial(kind),
            count: 0,
        }
    }
}

fn initial(kind: StatKind) -> f64 {
    match kind {
        StatKind::Avg | StatKind::Sum => 0.0,
        StatKind::Max => f64::NEG_INFINITY,
    }
}

/// Kafka's `SampledStat` with one of [`StatKind`]'s combinations.
#[derive(Clone, Debug)]
pub struct WindowedStat {
    kind: StatKind,
    config: SampleConfig,
    samples: Vec<Sample>,
    current: usize,
}

impl WindowedStat {
    /// An empty stat.
    #[must_use]
    pub fn new(kind: StatKind, config: SampleConfig) -> Self {
        let config = SampleConfig::new(config.window, config.samples);
        Self {
            kind,
            config,
            samples: Vec::with_capacity(config.samples + 1),
            current: 0,
        }
    }

    /// Kafka's `Avg`.
    #[must_use]
    pub fn avg(config: SampleConfig) -> Self {
        Self::new(StatKind::Avg, config)
    }

    /// Kafka's `Max`.
    #[must_use]
    pub fn max(config: SampleConfig) -> Self {
        Self::new(StatKind::Max, config)
    }

    /// Kafka's `WindowedSum`.
    #[must_use]
    pub fn sum(config: SampleConfig) -> Self {
        Self::new(StatKind::Sum, config)
    }

    /// Records `value` at `now`. An `Instant` earlier than the current window's start is
    /// counted in the current window.
    pub fn record(&mut self, value: f64, now: Instant) {
        let window = self.config.window;
        let kind = self.kind;
        if self.samples.is_empty() {
            self.samples.push(Sample::new(kind, now));
            self.current = 0;
        } else if now.saturating_duration_since(self.samples[self.current].start) >= window {
            self.advance(now);
        }
        let sample = &mut self.samples[self.current];
        match kind {
            StatKind::Avg | StatKind::Sum => sample.value += value,
            StatKind::Max => sample.value = sample.value.max(value),
        }
        sample.count = sample.count.saturating_add(1);
        sample.last_event = now;
    }

    /// Moves to the next slot of the ring (`samples + 1` slots, as Kafka's), starting a fresh
    /// sample there at `now`.
    fn advance(&mut self, now: Instant) {
        self.current = (self.current + 1) % (self.config.samples + 1);
        let fresh = Sample::new(self.kind, now);
        if self.current >= self.samples.len() {
            self.samples.push(fresh);
            self.current = self.samples.len() - 1;
        } else {
            self.samples[self.current] = fresh;
        }
    }

    /// Resets every sample last recorded into `samples × window` or longer before `now`
    /// (Kafka's `purgeObsoleteSamples`).
    fn purge(&mut self, now: Instant) {
        let expiry = self.config.expiry();
        let kind = self.kind;
        for sample in &mut self.samples {
            if now.saturating_duration_since(sample.last_event) >= expiry {
                *sample = Sample::new(kind, now);
            }
        }
    }

    /// The stat over the retained samples at `now`.
    pub fn measure(&mut self, now: Instant) -> f64 {
        self.purge(now);
        let count: u64 = self.samples.iter().map(|s| s.count).sum();
        match self.kind {
            StatKind::Sum => self.samples.iter().map(|s| s.value).sum(),
            _ if count == 0 => f64::NAN,
            StatKind::Avg => self.samples.iter().map(|s| s.value).sum::<f64>() / count as f64,
            StatKind::Max => self
                .samples
                .iter()
                .map(|s| s.value)
                .fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// How long the retained samples span at `now`, in whole milliseconds (Kafka's
    /// `Rate.windowSize`): from the oldest sample's start, counted as at least `samples - 1`
    /// full windows, at least 1 ms.
    fn span_ms(&mut self, now: Instant) -> u64 {
        self.purge(now);
        if self.samples.is_empty() {
            // Kafka creates a sample at `now` here: its span is 0.
            self.samples.push(Sample::new(self.kind, now));
            self.current = 0;
        }
        let oldest = self.samples.iter().map(|s| s.start).min().unwrap_or(now);
        let mut elapsed_ms =
            u64::try_from(now.saturating_duration_since(oldest).as_millis()).unwrap_or(u64::MAX);
        let window_ms = u64::try_from(self.config.window.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let full = elapsed_ms / window_ms;
        // At most MAX_SAMPLES: fits.
        let min_full = self.config.samples as u64 - 1;
        if full < min_full {
            elapsed_ms = elapsed_ms.saturating_add((min_full - full).saturating_mul(window_ms));
        }
        elapsed_ms.max(1)
    }
}

/// Kafka's `Rate(TimeUnit.SECONDS, new WindowedSum())`: values recorded per second.
#[derive(Clone, Debug)]
pub struct Rate {
    sum: WindowedStat,
}

impl Rate {
    /// An empty rate.
    #[must_use]
    pub fn new(config: SampleConfig) -> Self {
        Self {
            sum: WindowedStat::sum(config),
        }
    }

    /// Records `value` (e.g. a number of records) at `now`.
    pub fn record(&mut self, value: f64, now: Instant) {
        self.sum.record(value, now);
    }

    /// Sum of the retained samples divided by the seconds they span.
    pub fn measure(&mut self, now: Instant) -> f64 {
        let span_ms = self.sum.span_ms(now);
        self.sum.measure(now) / (span_ms as f64 / 1000.0)
    }

    /// The milliseconds the retained samples span at `now` (Kafka's `Rate.windowSize`).
    pub fn window_size_ms(&mut self, now: Instant) -> u64 {
        self.sum.span_ms(now)
    }

    /// The sample settings.
    #[must_use]
    pub fn config(&self) -> SampleConfig {
        self.sum.config
    }
}

/// Kafka's Raft `TimeRatio`: the share of time spent in some activity (e.g. the Raft thread
/// idle), from the recorded durations over the time between the first and the last recording
/// since the previous measurement. **Measuring resets it**: each scrape sees the interval since
/// the one before. The first recording only starts the interval.
#[derive(Clone, Debug)]
pub struct TimeRatio {
    default_ratio: f64,
    interval_start: Option<Instant>,
    last_recorded: Option<Instant>,
    recorded: Duration,
}

impl TimeRatio {
    /// A ratio reading `default_ratio` until it has an interval.
    ///
    /// # Panics
    /// If `default_ratio` is not within `0.0..=1.0` (a programming error).
    #[must_use]
    pub fn new(default_ratio: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&default_ratio),
            "TimeRatio default {default_ratio} is not within 0..=1"
        );
        Self {
            default_ratio,
            interval_start: None,
            last_recorded: None,
            recorded: Duration::ZERO,
        }
    }

    /// Records an activity of `duration` that ended at `now`.
    pub fn record(&mut self, duration: Duration, now: Instant) {
        if self.interval_start.is_none() {
            // The activity happened before the interval began: discard it.
            self.interval_start = Some(now);
        } else {
            self.recorded = self.recorded.saturating_add(duration);
            self.last_recorded = Some(now);
        }
    }

    /// The ratio since the last measurement (or the default with no interval), and starts a
    /// new interval at the last recording.
    pub fn measure(&mut self) -> f64 {
        let (Some(start), Some(last)) = (self.interval_start, self.last_recorded) else {
            return self.default_ratio;
        };
        let interval = last.saturating_duration_since(start);
        let ratio = if interval.is_zero() {
            self.default_ratio
        } else if self.recorded > interval {
            1.0
        } else {
            self.recorded.as_secs_f64() / interval.as_secs_f64()
        };
        self.interval_start = Some(last);
        self.recorded = Duration::ZERO;
        ratio
    }
}

/// A monotonic count (Kafka's `CumulativeCount`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter(u64);

impl Counter {
    /// Adds `n` (saturating).
    pub fn add(&mut self, n: u64) {
        self.0 = self.0.saturating_add(n);
    }

    /// The count.
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0
    }
}

/// Most buckets a [`Histogram`] may have.
pub const MAX_BUCKETS: usize = 64;

/// A cumulative histogram with fixed upper bounds (Prometheus style), for request latencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Upper bounds, ascending, finite; `+Inf` is implied.
    bounds: Vec<f64>,
    /// `counts[i]`: observations `<= bounds[i]` and `> bounds[i - 1]`; last: above all bounds.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Request latencies in milliseconds: 1, 2, 5, … 10000 ms.
    pub const LATENCY_MS_BOUNDS: [f64; 13] = [
        1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
    ];

    /// A histogram with `bounds` (sorted and deduplicated; non-finite bounds dropped; at most
    /// [`MAX_BUCKETS`] kept).
    #[must_use]
    pub fn new(bounds: &[f64]) -> Self {
        let mut bounds: Vec<f64> = bounds.iter().copied().filter(|b| b.is_finite()).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        bounds.truncate(MAX_BUCKETS);
        let counts = vec![0; bounds.len() + 1];
        Self {
            bounds,
            counts,
            sum: 0.0,
            count: 0,
        }
    }

    /// Adds one observation.
    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|b| *b < value);
        self.counts[bucket] = self.counts[bucket].saturating_add(1);
        self.sum += value;
        self.count = self.count.saturating_add(1);
    }

    /// `(upper bound, cumulative count)` per bucket, ending with `(+Inf, count)`.
    #[must_use]
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut running = 0u64;
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.counts)
            .map(|(bound, n)| {
                running = running.saturating_add(*n);
                (bound, running)
            })
            .collect()
    }

    /// Sum of all observations.
    #[must_use]
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn avg_and_max_match_kafkas_raft_metrics_test() {
        // KafkaRaftMetricsTest.shouldRecordLatency: 1000 then 800 → avg 900, max 1000.
        let t0 = Instant::now();
        let mut avg = WindowedStat::avg(SampleConfig::default());
        let mut max = WindowedStat::max(SampleConfig::default());
        assert!(avg.measure(t0).is_nan(), "no recording yet");
        assert!(max.measure(t0).is_nan(), "no recording yet");
        for (ms, v) in [(1000, 1000.0), (1800, 800.0)] {
            avg.record(v, at(t0, ms));
            max.record(v, at(t0, ms));
        }
        assert_eq!(avg.measure(at(t0, 1800)), 900.0);
        assert_eq!(max.measure(at(t0, 1800)), 1000.0);
    }

    #[test]
    fn samples_older_than_the_ring_are_forgotten() {
        let t0 = Instant::now();
        let mut max = WindowedStat::max(SampleConfig::default());
        let mut avg = WindowedStat::avg(SampleConfig::default());
        max.record(50.0, t0);
        avg.record(50.0, t0);
        // Second window: a new sample; the first still counts.
        max.record(10.0, at(t0, 31_000));
        avg.record(10.0, at(t0, 31_000));
        assert_eq!(max.measure(at(t0, 59_999)), 50.0);
        assert_eq!(avg.measure(at(t0, 59_999)), 30.0);
        // 60 s after the first window began (2 × 30 s) it is purged.
        assert_eq!(max.measure(at(t0, 60_000)), 10.0);
        assert_eq!(avg.measure(at(t0, 60_000)), 10.0);
        // And later everything is gone.
        assert!(max.measure(at(t0, 91_000)).is_nan());
        assert!(avg.measure(at(t0, 91_000)).is_nan());
    }

    #[test]
    fn a_third_window_reuses_the_oldest_slot() {
        let t0 = Instant::now();
        let mut sum = WindowedStat::sum(SampleConfig::default());
        sum.record(1.0, t0);
        sum.record(2.0, at(t0, 30_000)); // slot 1
        sum.record(4.0, at(t0, 45_000)); // still slot 1 (window began at 30 s)
        sum.record(8.0, at(t0, 60_000)); // slot 2 (Kafka keeps samples + 1 slots)
        // The 1.0 was last recorded 60 s (samples × window) ago: purged.
        assert_eq!(sum.measure(at(t0, 60_000)), 14.0);
        sum.record(16.0, at(t0, 90_000)); // slot 0 again: the ring wraps
        // The 2.0 + 4.0 sample was last recorded at 45 s: still within 60 s.
        assert_eq!(sum.measure(at(t0, 90_000)), 30.0);
        assert_eq!(
            sum.samples.len(),
            3,
            "the ring never grows past metrics.num.samples + 1"
        );
    }

    #[test]
    fn rate_matches_kafkas_raft_metrics_test() {
        // KafkaRaftMetricsTest.shouldRecordRate: 12 records → 0.4/s, then 9 more → 0.7/s
        // (one partial window counts as the one full window a 2-sample ring must cover).
        let t0 = Instant::now();
        let mut rate = Rate::new(SampleConfig::default());
        rate.record(12.0, t0);
        assert!((rate.measure(t0) - 0.4).abs() < 1e-12);
        rate.record(9.0, t0);
        assert!((rate.measure(t0) - 0.7).abs() < 1e-12);
    }

    #[test]
    fn rate_divides_by_the_time_covered_once_past_one_window() {
        let t0 = Instant::now();
        let mut rate = Rate::new(SampleConfig::default());
        assert_eq!(rate.measure(t0), 0.0, "nothing recorded");
        rate.record(30.0, t0);
        rate.record(30.0, at(t0, 40_000));
        // The oldest sample began 45 s ago: 60 records / 45 s.
        let r = rate.measure(at(t0, 45_000));
        assert!((r - 60.0 / 45.0).abs() < 1e-9, "{r}");
        // At 70 s the first sample expired; the second began 30 s ago and spans one window.
        let r = rate.measure(at(t0, 70_000));
        assert!((r - 1.0).abs() < 1e-9, "{r}");
    }

    #[test]
    fn time_ratio_follows_kafkas_definition() {
        let t0 = Instant::now();
        let mut ratio = TimeRatio::new(1.0);
        assert_eq!(ratio.measure(), 1.0, "default before any interval");
        ratio.record(Duration::from_millis(100), t0); // starts the interval, discarded
        assert_eq!(ratio.measure(), 1.0, "no interval yet");
        ratio.record(Duration::from_millis(30), at(t0, 50));
        ratio.record(Duration::from_millis(20), at(t0, 100));
        assert!((ratio.measure() - 0.5).abs() < 1e-12);
        // The next interval starts at the last recording (100 ms).
        ratio.record(Duration::from_millis(500), at(t0, 200));
        assert_eq!(
            ratio.measure(),
            1.0,
            "more recorded than elapsed clamps to 1"
        );
    }

    #[test]
    fn histogram_counts_are_cumulative() {
        let mut h = Histogram::new(&[10.0, 1.0, 5.0, f64::NAN, 5.0]);
        for v in [0.5, 1.0, 3.0, 7.0, 100.0] {
            h.observe(v);
        }
        assert_eq!(
            h.cumulative(),
            vec![(1.0, 2), (5.0, 3), (10.0, 4), (f64::INFINITY, 5)]
        );
        assert_eq!(h.count(), 5);
        assert_eq!(h.sum(), 111.5);
    }

    #[test]
    fn counter_saturates() {
        let mut c = Counter::default();
        c.add(u64::MAX);
        c.add(1);
        assert_eq!(c.get(), u64::MAX);
    }
}
