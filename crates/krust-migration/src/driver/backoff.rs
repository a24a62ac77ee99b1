//! Kafka's poll interval for the driver (`PollTimeSupplier`: `ExponentialBackoff(100, 2,
//! 60000, 0.02)`), reset on every state change, with jitter from a seeded rng.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

/// First poll interval (ms).
pub const POLL_INITIAL_MS: u64 = 100;
/// Growth factor.
pub const POLL_MULTIPLIER: u32 = 2;
/// Largest poll interval (ms).
pub const POLL_MAX_MS: u64 = 60_000;
/// Relative jitter (±2 %).
pub const POLL_JITTER: f64 = 0.02;

/// The poll interval's attempt counter and jitter source.
#[derive(Debug)]
pub(crate) struct PollBackoff {
    attempts: u32,
    rng: StdRng,
}

impl PollBackoff {
    pub(crate) fn new(rng: StdRng) -> Self {
        Self { attempts: 0, rng }
    }

    /// Back to the first interval (every state change).
    pub(crate) fn reset(&mut self) {
        self.attempts = 0;
    }

    /// The next interval: `100 × 2^min(attempts, log2(600))`, times a factor in
    /// [0.98, 1.02), capped at 60 s.
    pub(crate) fn next_interval(&mut self) -> Duration {
        #[allow(clippy::cast_precision_loss)]
        let exp_max = ((POLL_MAX_MS as f64) / (POLL_INITIAL_MS as f64)).ln()
            / f64::from(POLL_MULTIPLIER).ln();
        let exp = f64::from(self.attempts).min(exp_max);
        #[allow(clippy::cast_precision_loss)]
        let term = POLL_INITIAL_MS as f64 * f64::from(POLL_MULTIPLIER).powf(exp);
        let factor = self.rng.gen_range((1.0 - POLL_JITTER)..(1.0 + POLL_JITTER));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ms = ((factor * term) as u64).min(POLL_MAX_MS);
        self.attempts = self.attempts.saturating_add(1);
        Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn doubles_from_100ms_to_60s_with_2_percent_jitter_and_resets() {
        let mut backoff = PollBackoff::new(StdRng::seed_from_u64(7));
        let mut expected = 100.0_f64;
        for _ in 0..15 {
            let got = backoff.next_interval().as_millis();
            let got = f64::from(u32::try_from(got).expect("small"));
            let nominal = expected.min(60_000.0);
            assert!(got >= (nominal * 0.98).floor() - 1.0, "{got} vs {nominal}");
            assert!(got <= (nominal * 1.02).min(60_000.0), "{got} vs {nominal}");
            expected *= 2.0;
        }
        assert!(backoff.next_interval() >= Duration::from_millis(58_800));
        backoff.reset();
        assert!(backoff.next_interval() <= Duration::from_millis(102));
    }
}
