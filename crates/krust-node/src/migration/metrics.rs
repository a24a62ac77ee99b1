//! The migration's metrics with Kafka's names (facts §6.13; group
//! `kafka.controller:type=KafkaController`), registered only on a controller with
//! `zookeeper.metadata.migration.enable`, as Kafka registers them:
//!
//! - `ZkMigrationState` — the image's `ZkMigrationState` (0 NONE, 1 MIGRATION, 2
//!   PRE_MIGRATION, 3 POST_MIGRATION);
//! - `MigratingZkBrokerCount` — registered brokers that are still ZooKeeper brokers;
//! - `ZkWriteBehindLag` — last committed offset − the offset mirrored to ZooKeeper, on the
//!   active controller while dual-writing (else 0);
//! - `ZkWriteSnapshotTimeMs` / `ZkWriteDeltaTimeMs` — histograms of full reconciliations and of
//!   delta dual-writes that wrote something, in ms.
//!
//! Beyond Kafka: `MigrationDriverState` (the driver's state ordinal on this node).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use krust_metrics::{Collector, Family, Histogram, prometheus_name};
use krust_migration::driver::WriteTiming;

use super::runtime::MigrationStatusHandle;

/// Bucket bounds (ms) of the write-time histograms.
const WRITE_TIME_BOUNDS_MS: [f64; 15] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0,
    30_000.0, 60_000.0,
];

#[derive(Debug)]
struct WriteTimes {
    snapshot: Histogram,
    delta: Histogram,
}

/// The migration's metrics, fed by the migration task.
#[derive(Debug, Clone)]
pub struct MigrationMetrics {
    status: MigrationStatusHandle,
    times: Arc<Mutex<WriteTimes>>,
}

impl MigrationMetrics {
    /// Metrics reading `status`.
    #[must_use]
    pub fn new(status: MigrationStatusHandle) -> Self {
        Self {
            status,
            times: Arc::new(Mutex::new(WriteTimes {
                snapshot: Histogram::new(&WRITE_TIME_BOUNDS_MS),
                delta: Histogram::new(&WRITE_TIME_BOUNDS_MS),
            })),
        }
    }

    /// Records the driver's write durations.
    pub fn observe(&self, timings: &[WriteTiming]) {
        if timings.is_empty() {
            return;
        }
        let mut times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        for timing in timings {
            #[allow(clippy::cast_precision_loss)] // durations in ms, far below 2^53
            match *timing {
                WriteTiming::Snapshot(ms) => times.snapshot.observe(ms as f64),
                WriteTiming::Delta(ms) => times.delta.observe(ms as f64),
            }
        }
    }
}

impl Collector for MigrationMetrics {
    fn collect(&self, _now: Instant, out: &mut Vec<Family>) {
        let name = |n: &str| prometheus_name("kafka.controller", "KafkaController", n);
        let status = self.status.get();
        #[allow(clippy::cast_precision_loss)] // counts and offsets far below 2^53
        let (state, brokers, lag, driver) = status.as_ref().map_or((0.0, 0.0, 0.0, 0.0), |s| {
            (
                f64::from(s.zk_migration_state.value()),
                s.migrating_zk_broker_count as f64,
                s.zk_write_behind_lag as f64,
                f64::from(s.state.value()),
            )
        });
        out.push(Family::gauge(
            name("ZkMigrationState"),
            "The ZooKeeper migration state of the cluster: 0 NONE, 1 MIGRATION, 2 PRE_MIGRATION, 3 POST_MIGRATION.",
            state,
        ));
        out.push(Family::gauge(
            name("MigratingZkBrokerCount"),
            "Registered brokers that are still ZooKeeper-mode brokers.",
            brokers,
        ));
        out.push(Family::gauge(
            name("ZkWriteBehindLag"),
            "Offsets committed to the metadata log but not yet written to ZooKeeper (active controller, dual-write).",
            lag,
        ));
        out.push(Family::gauge(
            name("MigrationDriverState"),
            "The migration driver's state on this controller (Kafka's MigrationDriverState ordinal; a krust extension).",
            driver,
        ));
        let times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        out.push(Family::histogram(
            name("ZkWriteSnapshotTimeMs"),
            "Time of full reconciliations of ZooKeeper with the metadata image, in ms.",
            &times.snapshot,
        ));
        out.push(Family::histogram(
            name("ZkWriteDeltaTimeMs"),
            "Time of delta dual-writes to ZooKeeper, in ms.",
            &times.delta,
        ));
    }
}
