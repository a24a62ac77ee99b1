//! The time a request's handling runs, for `request_percentage` (Kafka's
//! `ClientRequestQuotaManager`).
//!
//! Kafka measures the time a request spends on a fixed pool of I/O threads (`requestThreadTimeNanos`,
//! from dequeue to response, a purgatory wait not included since the thread is released) plus
//! its network-thread time, as a percentage of one thread. krust has no fixed thread pools: a
//! request is an async task on tokio's workers, so [`BusyTime`] adds up the time spent inside
//! the handler future's `poll` calls — the time the request occupies a worker thread. Waits
//! (purgatory, long-poll, the controller's answer to a forwarded request, locks awaited) are
//! not counted; blocking work done on another task or thread for the request is not counted
//! either, nor is the framing and TLS work of the connection task (Kafka's network-thread
//! share).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Runs `F` and adds up the wall time of its `poll` calls; resolves to `F`'s output and that
/// time.
#[derive(Debug)]
pub struct BusyTime<F> {
    inner: Pin<Box<F>>,
    busy: Duration,
}

impl<F: Future> BusyTime<F> {
    /// Measures `inner`.
    pub fn new(inner: F) -> Self {
        BusyTime {
            inner: Box::pin(inner),
            busy: Duration::ZERO,
        }
    }
}

impl<F: Future> Future for BusyTime<F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        let busy = self.busy + started.elapsed();
        self.busy = busy;
        polled.map(|output| (output, busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_is_not_counted_running_is() {
        // A 200 ms wait: the future is polled twice, for microseconds; counting the wait
        // would make it 200 ms or more.
        let (_, busy) = BusyTime::new(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
        })
        .await;
        assert!(busy < Duration::from_millis(200), "{busy:?}");
        // Blocking inside `poll` is counted (a sleep lasts at least what it asks).
        let (_, busy) = BusyTime::new(async {
            std::thread::sleep(Duration::from_millis(20));
        })
        .await;
        assert!(busy >= Duration::from_millis(20), "{busy:?}");
    }
}
