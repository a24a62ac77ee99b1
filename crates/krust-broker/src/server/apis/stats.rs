//! The client listener's metrics, in Kafka's names (`kafka.server:type=BrokerTopicMetrics` and
//! `kafka.network:type=RequestMetrics,name=TotalTimeMs`), for the `/metrics` endpoint: the
//! binary registers [`ClientApiStats`] (a `krust_metrics::Collector`) from
//! `Broker::client_stats`.
//!
//! Kafka's meters are exposed as their `Count` (`…_count`, a Prometheus counter), the request
//! times as one histogram family labelled `request` (`FetchConsumer` / `FetchFollower` for
//! Fetch, as Kafka splits them).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_metrics::{Collector, Family, Histogram, MetricKind, prometheus_name};

/// Offset of `recordCount` in a v2 batch header.
const RECORD_COUNT_OFFSET: usize = 57;
/// Offset of `batchLength` (after `baseOffset`).
const BATCH_LENGTH_OFFSET: usize = 8;
/// `baseOffset` + `batchLength`.
const LOG_OVERHEAD: usize = 12;

/// Counters and request-time histograms of one broker's client listener.
#[derive(Debug)]
pub struct ClientApiStats {
    messages_in: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    replication_bytes_out: AtomicU64,
    total_produce: AtomicU64,
    total_fetch: AtomicU64,
    failed_produce: AtomicU64,
    failed_fetch: AtomicU64,
    total_time_ms: Mutex<BTreeMap<String, Histogram>>,
}

impl Default for ClientApiStats {
    fn default() -> Self {
        ClientApiStats {
            messages_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            replication_bytes_out: AtomicU64::new(0),
            total_produce: AtomicU64::new(0),
            total_fetch: AtomicU64::new(0),
            failed_produce: AtomicU64::new(0),
            failed_fetch: AtomicU64::new(0),
            total_time_ms: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Records in a well-formed batch set (its headers' `recordCount`s; a malformed tail counts
/// nothing — the append refused it anyway).
#[must_use]
pub fn record_count(records: &Bytes) -> u64 {
    let mut total = 0u64;
    let mut at = 0usize;
    while let Some(header) = records.get(at..at.saturating_add(RECORD_COUNT_OFFSET + 4)) {
        let length = header
            .get(BATCH_LENGTH_OFFSET..LOG_OVERHEAD)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_be_bytes)
            .and_then(|l| usize::try_from(l).ok());
        let count = header
            .get(RECORD_COUNT_OFFSET..RECORD_COUNT_OFFSET + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_be_bytes)
            .and_then(|c| u64::try_from(c).ok());
        let (Some(length), Some(count)) = (length, count) else {
            break;
        };
        total = total.saturating_add(count);
        at = at.saturating_add(LOG_OVERHEAD).saturating_add(length);
    }
    total
}

impl ClientApiStats {
    /// A produce request was answered: `appended` (records bytes) per successful partition.
    pub fn record_produce<'a>(&self, appended: impl IntoIterator<Item = &'a Bytes>, failed: bool) {
        self.total_produce.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed_produce.fetch_add(1, Ordering::Relaxed);
        }
        for records in appended {
            self.messages_in
                .fetch_add(record_count(records), Ordering::Relaxed);
            self.bytes_in
                .fetch_add(records.len() as u64, Ordering::Relaxed);
        }
    }

    /// A fetch was answered with `bytes` of records; a follower's counts as replication
    /// (Kafka keeps `BytesOutPerSec` for clients).
    pub fn record_fetch(&self, bytes: u64, failed: bool, follower: bool) {
        self.total_fetch.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed_fetch.fetch_add(1, Ordering::Relaxed);
        }
        if follower {
            self.replication_bytes_out
                .fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A request of `request` (Kafka's RequestMetrics name) took `elapsed`.
    pub fn record_time(&self, request: &str, elapsed: Duration) {
        let ms = elapsed.as_secs_f64() * 1000.0;
        let mut times = self
            .total_time_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // No allocation once the request name is known.
        if let Some(histogram) = times.get_mut(request) {
            histogram.observe(ms);
        } else {
            let mut histogram = Histogram::new(&Histogram::LATENCY_MS_BOUNDS);
            histogram.observe(ms);
            times.insert(request.to_owned(), histogram);
        }
    }

    /// `MessagesInPerSec` count so far.
    #[must_use]
    pub fn messages_in(&self) -> u64 {
        self.messages_in.load(Ordering::Relaxed)
    }

    /// `BytesOutPerSec` count so far.
    #[must_use]
    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
}

impl Collector for ClientApiStats {
    fn collect(&self, _now: Instant, out: &mut Vec<Family>) {
        #[allow(clippy::cast_precision_loss)] // counts far below 2^53
        let meters = [
            (
                "MessagesInPerSec",
                "Messages appended by clients.",
                &self.messages_in,
            ),
            (
                "BytesInPerSec",
                "Bytes of records appended by clients.",
                &self.bytes_in,
            ),
            (
                "BytesOutPerSec",
                "Bytes of records sent to consumers.",
                &self.bytes_out,
            ),
            (
                "ReplicationBytesOutPerSec",
                "Bytes of records sent to follower replicas.",
                &self.replication_bytes_out,
            ),
            (
                "TotalProduceRequestsPerSec",
                "Produce requests.",
                &self.total_produce,
            ),
            (
                "TotalFetchRequestsPerSec",
                "Fetch requests.",
                &self.total_fetch,
            ),
            (
                "FailedProduceRequestsPerSec",
                "Produce requests with a failed partition.",
                &self.failed_produce,
            ),
            (
                "FailedFetchRequestsPerSec",
                "Fetch requests that failed.",
                &self.failed_fetch,
            ),
        ];
        for (name, help, value) in meters {
            #[allow(clippy::cast_precision_loss)]
            let mut family = Family::gauge(
                format!(
                    "{}_count",
                    prometheus_name("kafka.server", "BrokerTopicMetrics", name)
                ),
                help,
                value.load(Ordering::Relaxed) as f64,
            );
            family.kind = MetricKind::Counter;
            out.push(family);
        }
        let times = self
            .total_time_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if times.is_empty() {
            return;
        }
        let name = prometheus_name("kafka.network", "RequestMetrics", "TotalTimeMs");
        let mut merged: Option<Family> = None;
        for (request, histogram) in times.iter() {
            let mut family = Family::histogram(
                name.clone(),
                "Time from receiving a request to handing its response to the network, ms.",
                histogram,
            );
            for sample in &mut family.samples {
                sample
                    .labels
                    .insert(0, ("request".to_owned(), request.clone()));
            }
            match &mut merged {
                Some(m) => m.samples.extend(family.samples),
                None => merged = Some(family),
            }
        }
        out.extend(merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_count_reads_batch_headers_and_stops_at_garbage() {
        let mut b = krust_log::RecordBatchBuilder::new(0);
        for _ in 0..3 {
            b.append_kv(1, None, Some(Bytes::from_static(b"v")));
        }
        let one = b.build().into_bytes();
        let mut two = one.to_vec();
        two.extend_from_slice(&one);
        assert_eq!(record_count(&one), 3);
        assert_eq!(record_count(&Bytes::from(two.clone())), 6);
        two.extend_from_slice(b"garbage");
        assert_eq!(record_count(&Bytes::from(two)), 6);
        assert_eq!(record_count(&Bytes::new()), 0);
    }
}
