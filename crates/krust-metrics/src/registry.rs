//! [`Registry`]: the collectors a `/metrics` scrape asks, in registration order.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::exposition::{Family, render};

/// A source of metric families, asked at every scrape. Stats that measure over a window need
/// `now`; a collector must not block for long (it runs on the scrape's task).
pub trait Collector: Send + Sync {
    /// Appends this collector's families, measured at `now`.
    fn collect(&self, now: Instant, out: &mut Vec<Family>);
}

/// Most collectors one registry holds.
pub const MAX_COLLECTORS: usize = 256;

/// The set of collectors one process exposes.
#[derive(Default)]
pub struct Registry {
    collectors: Mutex<Vec<Arc<dyn Collector>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .collectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "Registry({n} collectors)")
    }
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a collector.
    ///
    /// # Panics
    /// Past [`MAX_COLLECTORS`] (collectors are registered once at start-up; more is a bug).
    pub fn register(&self, collector: Arc<dyn Collector>) {
        let mut collectors = self
            .collectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert!(
            collectors.len() < MAX_COLLECTORS,
            "more than {MAX_COLLECTORS} metric collectors"
        );
        collectors.push(collector);
    }

    /// Every collector's families at `now`.
    #[must_use]
    pub fn gather(&self, now: Instant) -> Vec<Family> {
        let collectors: Vec<Arc<dyn Collector>> = self
            .collectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = Vec::new();
        for c in collectors {
            c.collect(now, &mut out);
        }
        out
    }

    /// The text exposition of every family at `now`.
    #[must_use]
    pub fn render(&self, now: Instant) -> String {
        render(&self.gather(now))
    }
}
