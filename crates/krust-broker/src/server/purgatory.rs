//! Delayed operations (Kafka's `DelayedOperationPurgatory` for `DelayedProduce` and
//! `DelayedFetch`), kept simple: one version counter bumped by every
//! [`super::replica_manager::ReplicaManager::partition_changed`]. A waiter subscribes
//! *before* it checks its condition, so a change between the check and the wait is never
//! missed, then sleeps until the counter moves or its deadline passes and checks again.
//!
//! One counter for all partitions wakes every waiter on every change; that costs a re-check
//! each (cheap: an in-memory comparison or one read) and keeps wake-ups impossible to lose.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The wake-up source of delayed operations.
#[derive(Debug)]
pub struct Purgatory {
    version: watch::Sender<u64>,
}

impl Default for Purgatory {
    fn default() -> Self {
        Purgatory::new()
    }
}

/// One waiter's view of the counter: created before checking the condition.
#[derive(Debug)]
pub struct Waiter {
    rx: watch::Receiver<u64>,
}

impl Waiter {
    /// Waits until something changed since this waiter was created (or since the previous
    /// wait returned `true`), or `deadline` passes. Returns `false` at the deadline.
    pub async fn wait_until(&mut self, deadline: Instant) -> bool {
        tokio::select! {
            changed = self.rx.changed() => {
                // A closed channel means the broker is going away: report the deadline so
                // the caller answers with what it has instead of spinning.
                changed.is_ok()
            }
            () = tokio::time::sleep_until(deadline) => false,
        }
    }
}

impl Purgatory {
    /// No waiters.
    #[must_use]
    pub fn new() -> Self {
        let (version, _) = watch::channel(0);
        Purgatory { version }
    }

    /// A waiter to create before checking a condition.
    #[must_use]
    pub fn waiter(&self) -> Waiter {
        let mut rx = self.version.subscribe();
        rx.mark_unchanged();
        Waiter { rx }
    }

    /// Something moved (a log end offset, a high watermark, an ISR, a leadership): every
    /// waiter re-checks.
    pub fn wake_all(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Runs `check` until it returns `Some`, re-checking after every change, up to
    /// `timeout`; `None` at the deadline.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiter = self.waiter();
            if let Some(done) = check() {
                return Some(done);
            }
            if !waiter.wait_until(deadline).await {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_change_wakes_a_waiter_and_the_deadline_ends_it() {
        let purgatory = Arc::new(Purgatory::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (p, f) = (Arc::clone(&purgatory), Arc::clone(&flag));
        let setter = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            f.store(true, Ordering::SeqCst);
            p.wake_all();
        });
        let got = purgatory
            .wait_for(Duration::from_secs(30), || {
                flag.load(Ordering::SeqCst).then_some(7)
            })
            .await;
        assert_eq!(got, Some(7));
        setter.await.expect("setter");
        let never = purgatory
            .wait_for(Duration::from_millis(10), || None::<()>)
            .await;
        assert_eq!(never, None);
    }
}
