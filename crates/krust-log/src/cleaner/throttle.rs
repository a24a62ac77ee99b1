//! `log.cleaner.io.max.bytes.per.second`: Kafka's `Throttler` (check every 300 ms; when the
//! observed rate is above the limit, sleep long enough to bring it back down), with the clock
//! injected so tests run in virtual time.

/// Time as the throttle sees it.
pub trait ThrottleClock {
    /// Milliseconds on a monotonic clock.
    fn now_ms(&mut self) -> i64;
    /// Blocks the cleaning for `ms` milliseconds.
    fn sleep_ms(&mut self, ms: u64);
}

/// The real clock: `std::time::Instant` and `std::thread::sleep` (the cleaner runs on its own
/// thread, as Kafka's `CleanerThread`s do).
#[derive(Debug)]
pub struct SystemThrottleClock {
    start: std::time::Instant,
}

impl Default for SystemThrottleClock {
    fn default() -> Self {
        SystemThrottleClock {
            start: std::time::Instant::now(),
        }
    }
}

impl ThrottleClock for SystemThrottleClock {
    fn now_ms(&mut self) -> i64 {
        i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
    fn sleep_ms(&mut self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Kafka's `Throttler.checkIntervalMs` for the cleaner.
pub const THROTTLE_CHECK_INTERVAL_MS: i64 = 300;

/// Rate limiter over bytes read and written by the cleaner.
#[derive(Debug)]
pub struct Throttler<C> {
    max_bytes_per_second: f64,
    clock: C,
    period_start_ms: Option<i64>,
    observed: u64,
    slept_ms: u64,
}

impl<C: ThrottleClock> Throttler<C> {
    /// A throttle at `max_bytes_per_second` (`f64::MAX`, Kafka's default, never sleeps).
    pub fn new(max_bytes_per_second: f64, clock: C) -> Self {
        Throttler {
            max_bytes_per_second,
            clock,
            period_start_ms: None,
            observed: 0,
            slept_ms: 0,
        }
    }

    /// Counts `bytes` of I/O; sleeps if the rate over the current period is too high.
    pub fn maybe_throttle(&mut self, bytes: u64) {
        let now = self.clock.now_ms();
        let start = *self.period_start_ms.get_or_insert(now);
        self.observed += bytes;
        let elapsed_ms = now - start;
        if elapsed_ms <= THROTTLE_CHECK_INTERVAL_MS || self.observed == 0 {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let observed = self.observed as f64;
        #[allow(clippy::cast_precision_loss)]
        let rate = observed * 1000.0 / elapsed_ms as f64;
        if rate > self.max_bytes_per_second {
            // Solve for the sleep that brings the period's rate down to the limit.
            #[allow(clippy::cast_precision_loss)]
            let sleep = (observed / (self.max_bytes_per_second / 1000.0)) - elapsed_ms as f64;
            if sleep >= 1.0 {
                // Bounded: `observed` is at most a few buffers' worth past the check.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let sleep = sleep.round() as u64;
                self.clock.sleep_ms(sleep);
                self.slept_ms += sleep;
            }
        }
        self.period_start_ms = Some(self.clock.now_ms());
        self.observed = 0;
    }

    /// Total time slept so far.
    #[must_use]
    pub fn slept_ms(&self) -> u64 {
        self.slept_ms
    }

    /// The clock (tests read their virtual time from it).
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Virtual time: advances only when told to or when the throttle sleeps.
    #[derive(Debug, Default)]
    struct FakeClock {
        now: i64,
    }
    impl ThrottleClock for FakeClock {
        fn now_ms(&mut self) -> i64 {
            self.now
        }
        fn sleep_ms(&mut self, ms: u64) {
            self.now += i64::try_from(ms).unwrap_or(i64::MAX);
        }
    }

    #[test]
    fn sleeps_until_the_rate_is_back_to_the_limit() {
        // 1000 B/s; 1000 bytes over 400 ms is 2500 B/s → sleep 600 ms to average 1000 B/s.
        let mut t = Throttler::new(1000.0, FakeClock::default());
        t.maybe_throttle(0);
        t.clock.now = 400;
        t.maybe_throttle(1000);
        assert_eq!(t.slept_ms(), 600);
        assert_eq!(t.clock().now, 1000);
    }

    #[test]
    fn no_sleep_below_the_limit_or_inside_the_check_interval() {
        let mut t = Throttler::new(1000.0, FakeClock::default());
        t.maybe_throttle(1_000_000); // within the first interval: not checked yet
        assert_eq!(t.slept_ms(), 0);
        let mut t = Throttler::new(1000.0, FakeClock::default());
        t.maybe_throttle(0);
        t.clock.now = 1000;
        t.maybe_throttle(900);
        assert_eq!(t.slept_ms(), 0);
    }
}
