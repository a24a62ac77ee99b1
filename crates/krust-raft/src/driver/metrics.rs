//! The measured half of Kafka's `raft-metrics` group (facts §1.12; Kafka 3.9
//! `KafkaRaftMetrics`), recorded by the driver with the `Instant`s it already reads, and a
//! [`Collector`] that renders the whole group (the core's gauges from [`RaftStatus`] too).
//!
//! What is measured, and when (as Kafka's `KafkaRaftClient` records it):
//!
//! * `commit-latency-avg/max` — for each batch this replica appends as leader, the time from
//!   its append to the high watermark passing it, divided by its records (Kafka's
//!   `elapsedTimePerRecord`), recorded at the append time. Batches truncated away or still
//!   waiting when leadership is lost are never recorded. Milliseconds, with sub-millisecond
//!   precision (Kafka's clock has whole milliseconds).
//! * `election-latency-avg/max` — from becoming candidate (each new candidacy restarts it) to
//!   knowing a leader (becoming leader or follower). A single voter elects itself without a
//!   candidacy to time, so, as in Kafka, it records nothing.
//! * `append-records-rate` — records (offsets) appended per second as leader.
//! * `fetch-records-rate` — records (offsets) appended per second from the leader's Fetch
//!   responses, as follower or observer.
//! * `poll-idle-ratio-avg` — the share of time the driver task waits for input, Kafka's
//!   `TimeRatio` (default 1.0): each scrape sees the interval since the previous one.
//! * `number-unknown-voter-connections` — 0: every voter's address is configured
//!   (`controller.quorum.voters`), as Kafka 3.9 reports for static voters.
//!
//! Windows use Kafka's defaults (`metrics.sample.window.ms` 30000 × `metrics.num.samples` 2)
//! until [`RaftMetricsCollector::configure_samples`] sets others.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use krust_log::batch::RecordBatch;
use krust_metrics::{Collector, Family, Rate, SampleConfig, TimeRatio, WindowedStat};
use tokio::sync::watch;

use super::RaftStatus;
use crate::core::RoleKind;
use crate::types::{LeaderEpoch, LogOffset};

/// JMX domain of the group (`kafka.server:type=raft-metrics`).
pub const DOMAIN: &str = "kafka.server";
/// Kafka's metric group.
pub const GROUP: &str = "raft-metrics";
/// Leader batches whose commit is timed at once; later ones go untimed until some commit.
pub const MAX_TIMED_COMMITS: usize = 65_536;
/// The values of `current-state`.
pub const STATES: [&str; 6] = [
    "leader",
    "candidate",
    "voted",
    "follower",
    "unattached",
    "observer",
];

/// One leader batch waiting for the high watermark.
#[derive(Clone, Copy, Debug)]
struct TimedCommit {
    last_offset: i64,
    appended: Instant,
    records: u32,
}

#[derive(Debug)]
struct Measured {
    commit_latency_avg: WindowedStat,
    commit_latency_max: WindowedStat,
    election_latency_avg: WindowedStat,
    election_latency_max: WindowedStat,
    append_records: Rate,
    fetch_records: Rate,
    poll_idle: TimeRatio,
    timed_commits: VecDeque<TimedCommit>,
    election_start: Option<Instant>,
    last_role: Option<(RoleKind, LeaderEpoch)>,
    poll_start: Option<Instant>,
}

/// The measured stats at one instant (for tests and the collector).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeasuredValues {
    /// `commit-latency-avg` (ms; `NaN` with no commit in the window).
    pub commit_latency_avg: f64,
    /// `commit-latency-max` (ms).
    pub commit_latency_max: f64,
    /// `election-latency-avg` (ms).
    pub election_latency_avg: f64,
    /// `election-latency-max` (ms).
    pub election_latency_max: f64,
    /// `append-records-rate` (per second).
    pub append_records_rate: f64,
    /// `fetch-records-rate` (per second).
    pub fetch_records_rate: f64,
    /// `poll-idle-ratio-avg` (0..=1; measuring starts a new interval).
    pub poll_idle_ratio_avg: f64,
}

/// The driver's recorder; shared (`Arc`) with collectors. Every method takes the time.
#[derive(Debug)]
pub struct RaftDriverMetrics {
    inner: Mutex<Measured>,
}

impl RaftDriverMetrics {
    /// Empty stats sampled as `config` says.
    #[must_use]
    pub fn new(config: SampleConfig) -> Self {
        Self {
            inner: Mutex::new(Measured {
                commit_latency_avg: WindowedStat::avg(config),
                commit_latency_max: WindowedStat::max(config),
                election_latency_avg: WindowedStat::avg(config),
                election_latency_max: WindowedStat::max(config),
                append_records: Rate::new(config),
                fetch_records: Rate::new(config),
                poll_idle: TimeRatio::new(1.0),
                timed_commits: VecDeque::new(),
                election_start: None,
                last_role: None,
                poll_start: None,
            }),
        }
    }

    /// Restarts every windowed stat empty with `config` (Kafka's `metrics.sample.window.ms`
    /// and `metrics.num.samples`), keeping the election clock and the commits being timed.
    /// Meant for start-up, before anyone scrapes.
    pub fn configure_samples(&self, config: SampleConfig) {
        let mut m = self.lock();
        m.commit_latency_avg = WindowedStat::avg(config);
        m.commit_latency_max = WindowedStat::max(config);
        m.election_latency_avg = WindowedStat::avg(config);
        m.election_latency_max = WindowedStat::max(config);
        m.append_records = Rate::new(config);
        m.fetch_records = Rate::new(config);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Measured> {
        // Every update leaves the stats consistent: a panic elsewhere cannot break them.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Batches written to the log at `now`: as leader (`append-records`, and their commit is
    /// timed) or from a Fetch response (`fetch-records`).
    pub fn record_append(&self, as_leader: bool, batches: &[RecordBatch], now: Instant) {
        let mut m = self.lock();
        let mut total: i64 = 0;
        for batch in batches {
            let records = (batch.last_offset() - batch.base_offset() + 1).max(0);
            total = total.saturating_add(records);
            if as_leader && m.timed_commits.len() < MAX_TIMED_COMMITS && records > 0 {
                m.timed_commits.push_back(TimedCommit {
                    last_offset: batch.last_offset(),
                    appended: now,
                    records: u32::try_from(records).unwrap_or(u32::MAX),
                });
            }
        }
        if as_leader {
            m.append_records.record(total as f64, now);
        } else {
            m.fetch_records.record(total as f64, now);
        }
    }

    /// The log was cut at `end_offset`: batches at or past it will never commit.
    pub fn record_truncate(&self, end_offset: LogOffset) {
        let mut m = self.lock();
        m.timed_commits.retain(|c| c.last_offset < end_offset.0);
    }

    /// The high watermark reached `high_watermark` (exclusive) at `now`: every timed batch
    /// below it committed.
    pub fn record_high_watermark(&self, high_watermark: LogOffset, now: Instant) {
        let mut m = self.lock();
        while let Some(c) = m.timed_commits.front().copied() {
            if c.last_offset >= high_watermark.0 {
                break;
            }
            m.timed_commits.pop_front();
            let elapsed_ms = now.saturating_duration_since(c.appended).as_secs_f64() * 1000.0;
            let per_record = elapsed_ms / f64::from(c.records.max(1));
            m.commit_latency_avg.record(per_record, c.appended);
            m.commit_latency_max.record(per_record, c.appended);
        }
    }

    /// The replica's role after an input, at `now`: starts the election clock on a new
    /// candidacy, records the election latency once a leader is known, and forgets commit
    /// timings once this replica no longer leads.
    pub fn observe_role(&self, role: RoleKind, epoch: LeaderEpoch, now: Instant) {
        let mut m = self.lock();
        if m.last_role == Some((role, epoch)) {
            return;
        }
        m.last_role = Some((role, epoch));
        match role {
            RoleKind::Candidate => m.election_start = Some(now),
            RoleKind::Leader | RoleKind::Follower | RoleKind::Observer => {
                // An observer without a known leader is not "following" yet.
                if let Some(start) = m.election_start.take() {
                    let ms = now.saturating_duration_since(start).as_secs_f64() * 1000.0;
                    m.election_latency_avg.record(ms, now);
                    m.election_latency_max.record(ms, now);
                }
            }
            RoleKind::Voted | RoleKind::Unattached | RoleKind::Resigned => {}
        }
        if !matches!(role, RoleKind::Leader | RoleKind::Resigned) {
            m.timed_commits.clear();
        }
    }

    /// The driver starts waiting for input (Kafka's `updatePollStart`).
    pub fn record_poll_start(&self, now: Instant) {
        self.lock().poll_start = Some(now);
    }

    /// The driver has an input to handle (Kafka's `updatePollEnd`): the wait was idle time.
    pub fn record_poll_end(&self, now: Instant) {
        let mut m = self.lock();
        if let Some(start) = m.poll_start.take() {
            m.poll_idle
                .record(now.saturating_duration_since(start), now);
        }
    }

    /// Every measured stat at `now`. Measuring `poll-idle-ratio-avg` starts its next interval.
    pub fn measure(&self, now: Instant) -> MeasuredValues {
        let mut m = self.lock();
        MeasuredValues {
            commit_latency_avg: m.commit_latency_avg.measure(now),
            commit_latency_max: m.commit_latency_max.measure(now),
            election_latency_avg: m.election_latency_avg.measure(now),
            election_latency_max: m.election_latency_max.measure(now),
            append_records_rate: m.append_records.measure(now),
            fetch_records_rate: m.fetch_records.measure(now),
            poll_idle_ratio_avg: m.poll_idle.measure(),
        }
    }
}

/// Renders the `raft-metrics` group of one replica: gauges from its latest [`RaftStatus`],
/// measured stats from its [`RaftDriverMetrics`]. Get one from
/// [`super::RaftHandle::metrics_collector`].
#[derive(Debug, Clone)]
pub struct RaftMetricsCollector {
    status: watch::Receiver<RaftStatus>,
    measured: Arc<RaftDriverMetrics>,
}

impl RaftMetricsCollector {
    pub(crate) fn new(
        status: watch::Receiver<RaftStatus>,
        measured: Arc<RaftDriverMetrics>,
    ) -> Self {
        Self { status, measured }
    }

    /// Samples the replica's windowed stats as `config` says (see
    /// [`RaftDriverMetrics::configure_samples`]); the driver starts with Kafka's defaults.
    pub fn configure_samples(&self, config: SampleConfig) {
        self.measured.configure_samples(config);
    }
}

fn name(metric: &str) -> String {
    krust_metrics::prometheus_name(DOMAIN, GROUP, metric)
}

/// The group's families, in Kafka's registration order, with Kafka's descriptions.
#[must_use]
pub fn families(status: &RaftStatus, measured: &MeasuredValues) -> Vec<Family> {
    let g = &status.metrics;
    vec![
        Family::state_set(
            name("current-state"),
            "The current state of this member; possible values are leader, candidate, voted, follower, unattached, observer",
            "state",
            &STATES,
            g.current_state,
        ),
        Family::gauge(
            name("current-leader"),
            "The current quorum leader's id; -1 indicates unknown",
            f64::from(g.current_leader),
        ),
        Family::gauge(
            name("current-vote"),
            "The current voted id; -1 indicates not voted for anyone",
            f64::from(g.current_vote),
        ),
        Family::gauge(
            name("current-epoch"),
            "The current quorum epoch.",
            f64::from(g.current_epoch),
        ),
        Family::gauge(
            name("high-watermark"),
            "The high watermark maintained on this member; -1 if it is unknown",
            g.high_watermark as f64,
        ),
        Family::gauge(
            name("log-end-offset"),
            "The current raft log end offset.",
            g.log_end_offset as f64,
        ),
        Family::gauge(
            name("log-end-epoch"),
            "The current raft log end epoch.",
            f64::from(g.log_end_epoch),
        ),
        Family::gauge(
            name("number-unknown-voter-connections"),
            "Number of unknown voters whose connection information is not cached; would never be larger than quorum-size.",
            0.0,
        ),
        Family::gauge(
            name("commit-latency-avg"),
            "The average time in milliseconds to commit an entry in the raft log.",
            measured.commit_latency_avg,
        ),
        Family::gauge(
            name("commit-latency-max"),
            "The maximum time in milliseconds to commit an entry in the raft log.",
            measured.commit_latency_max,
        ),
        Family::gauge(
            name("election-latency-avg"),
            "The average time in milliseconds spent on electing a new leader.",
            measured.election_latency_avg,
        ),
        Family::gauge(
            name("election-latency-max"),
            "The maximum time in milliseconds spent on electing a new leader.",
            measured.election_latency_max,
        ),
        Family::gauge(
            name("fetch-records-rate"),
            "The average number of records fetched from the leader of the raft quorum.",
            measured.fetch_records_rate,
        ),
        Family::gauge(
            name("append-records-rate"),
            "The average number of records appended per sec as the leader of the raft quorum.",
            measured.append_records_rate,
        ),
        Family::gauge(
            name("poll-idle-ratio-avg"),
            "The ratio of time the Raft IO thread is idle as opposed to doing work (e.g. handling requests or replicating from the leader)",
            measured.poll_idle_ratio_avg,
        ),
    ]
}

impl Collector for RaftMetricsCollector {
    fn collect(&self, now: Instant, out: &mut Vec<Family>) {
        let status = self.status.borrow().clone();
        let measured = self.measured.measure(now);
        out.extend(families(&status, &measured));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use krust_log::batch::RecordBatchBuilder;

    use super::*;
    use crate::core::RaftMetrics;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    fn batch(base_offset: i64, records: usize) -> RecordBatch {
        let mut b = RecordBatchBuilder::new(base_offset);
        for _ in 0..records {
            b.append_kv(0, None, Some(Bytes::from_static(b"x")));
        }
        b.build()
    }

    #[test]
    fn commit_latency_is_per_record_from_append_to_high_watermark() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        m.observe_role(RoleKind::Leader, LeaderEpoch(1), t0);
        // Batch [0..=1] (2 records) and [2..=5] (4 records), appended at t0.
        m.record_append(true, &[batch(0, 2), batch(2, 4)], t0);
        // HW 2 at 20 ms commits the first: 20 ms / 2 records = 10 ms.
        m.record_high_watermark(LogOffset(2), at(t0, 20));
        let v = m.measure(at(t0, 20));
        assert_eq!((v.commit_latency_avg, v.commit_latency_max), (10.0, 10.0));
        // HW 5 does not cover offset 5; HW 6 at 40 ms does: 40 ms / 4 = 10 ms.
        m.record_high_watermark(LogOffset(5), at(t0, 30));
        m.record_high_watermark(LogOffset(6), at(t0, 40));
        let v = m.measure(at(t0, 40));
        assert_eq!((v.commit_latency_avg, v.commit_latency_max), (10.0, 10.0));
        // Append rate: 6 records over 40 ms, counted as at least one full 30 s window.
        assert!((v.append_records_rate - 6.0 / 30.04).abs() < 1e-9, "{v:?}");
        assert_eq!(v.fetch_records_rate, 0.0);
    }

    #[test]
    fn truncated_or_abandoned_batches_are_never_timed() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        m.observe_role(RoleKind::Leader, LeaderEpoch(1), t0);
        m.record_append(true, &[batch(0, 1), batch(1, 1)], t0);
        m.record_truncate(LogOffset(1));
        m.record_high_watermark(LogOffset(1), at(t0, 5));
        m.record_high_watermark(LogOffset(10), at(t0, 500));
        let v = m.measure(at(t0, 500));
        assert_eq!(v.commit_latency_max, 5.0, "only the untruncated batch");
        m.record_append(true, &[batch(2, 1)], at(t0, 600));
        m.observe_role(RoleKind::Unattached, LeaderEpoch(2), at(t0, 700));
        m.record_high_watermark(LogOffset(20), at(t0, 9000));
        let v = m.measure(at(t0, 9000));
        assert_eq!(
            v.commit_latency_max, 5.0,
            "lost leadership: never committed by us"
        );
    }

    #[test]
    fn election_latency_runs_from_the_last_candidacy_to_a_known_leader() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        m.observe_role(RoleKind::Follower, LeaderEpoch(1), t0);
        assert!(
            m.measure(t0).election_latency_max.is_nan(),
            "no candidacy yet"
        );
        m.observe_role(RoleKind::Candidate, LeaderEpoch(2), at(t0, 100));
        // A new candidacy (epoch 3) restarts the clock, as Kafka's onBecomeCandidate does.
        m.observe_role(RoleKind::Candidate, LeaderEpoch(3), at(t0, 600));
        m.observe_role(RoleKind::Leader, LeaderEpoch(3), at(t0, 1600));
        m.observe_role(RoleKind::Unattached, LeaderEpoch(4), at(t0, 2000));
        m.observe_role(RoleKind::Candidate, LeaderEpoch(5), at(t0, 2000));
        m.observe_role(RoleKind::Voted, LeaderEpoch(6), at(t0, 2300));
        m.observe_role(RoleKind::Follower, LeaderEpoch(6), at(t0, 2800));
        let v = m.measure(at(t0, 2800));
        // 1000 ms, then 800 ms (Kafka's shouldRecordLatency numbers).
        assert_eq!(v.election_latency_avg, 900.0);
        assert_eq!(v.election_latency_max, 1000.0);
    }

    #[test]
    fn follower_appends_count_as_fetched_records() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        m.observe_role(RoleKind::Follower, LeaderEpoch(1), t0);
        m.record_append(false, &[batch(0, 24)], t0);
        assert!((m.measure(t0).fetch_records_rate - 0.8).abs() < 1e-12);
        m.record_append(false, &[batch(24, 48)], t0);
        assert!((m.measure(t0).fetch_records_rate - 2.4).abs() < 1e-12);
        m.record_high_watermark(LogOffset(72), at(t0, 10));
        assert!(
            m.measure(at(t0, 10)).commit_latency_max.is_nan(),
            "followers time no commits"
        );
    }

    #[test]
    fn poll_idle_ratio_is_waiting_time_over_the_interval() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        assert_eq!(m.measure(t0).poll_idle_ratio_avg, 1.0, "Kafka's default");
        // First wait starts the interval; then 30 ms idle of 100 ms.
        m.record_poll_start(t0);
        m.record_poll_end(at(t0, 10));
        m.record_poll_start(at(t0, 20));
        m.record_poll_end(at(t0, 50));
        m.record_poll_start(at(t0, 110));
        m.record_poll_end(at(t0, 110));
        assert!((m.measure(at(t0, 120)).poll_idle_ratio_avg - 0.3).abs() < 1e-9);
    }

    #[test]
    fn configured_windows_are_used() {
        let t0 = Instant::now();
        let m = RaftDriverMetrics::new(SampleConfig::default());
        m.configure_samples(SampleConfig::new(Duration::from_secs(1), 3));
        m.observe_role(RoleKind::Follower, LeaderEpoch(1), t0);
        // 12 records at t0 over at least 2 full 1 s windows of a 3-sample ring: 6/s.
        m.record_append(false, &[batch(0, 12)], t0);
        assert!((m.measure(t0).fetch_records_rate - 6.0).abs() < 1e-12);
        // After 3 s the sample is forgotten.
        assert_eq!(m.measure(at(t0, 3000)).fetch_records_rate, 0.0);
    }

    #[test]
    fn the_group_renders_with_kafkas_names() {
        let status = RaftStatus {
            role: RoleKind::Leader,
            metrics: RaftMetrics {
                current_state: "leader",
                current_leader: 1,
                current_vote: 1,
                current_epoch: 3,
                high_watermark: 7,
                log_end_offset: 7,
                log_end_epoch: 3,
            },
        };
        let measured = MeasuredValues {
            commit_latency_avg: 1.5,
            commit_latency_max: 2.0,
            election_latency_avg: f64::NAN,
            election_latency_max: f64::NAN,
            append_records_rate: 0.25,
            fetch_records_rate: 0.0,
            poll_idle_ratio_avg: 1.0,
        };
        let text = krust_metrics::render(&families(&status, &measured));
        let want = include_str!("metrics_golden.txt");
        assert_eq!(text, want);
    }
}
