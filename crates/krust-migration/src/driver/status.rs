//! What the driver reports: [`MigrationStatus`] for `krust migration status`, metrics and logs,
//! including why it is waiting ([`WaitReason`]), and [`MigrationManifest`], the initial copy's
//! summary (Kafka's `MigrationManifest`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use krust_metadata::MetadataVersion;
use krust_metadata::image::LeaderAndEpoch;
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::MetadataRecordType;

use crate::state::{MigrationDriverState, OffsetAndEpoch, ZkMigrationLeadershipState};

/// A snapshot of the driver for the status tool, metrics and logs.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationStatus {
    /// This controller's node id.
    pub node_id: i32,
    /// The driver state (`state.value()` is Kafka's ordinal).
    pub state: MigrationDriverState,
    /// The cluster-wide state from the latest image (`ZkMigrationState` metric).
    pub zk_migration_state: ZkMigrationState,
    /// The KRaft leader as last heard.
    pub kraft_leader: LeaderAndEpoch,
    /// `/migration` and the ZooKeeper controller claim as the driver knows them.
    pub leadership: ZkMigrationLeadershipState,
    /// Why the driver is not moving on, if it is waiting.
    pub waiting_for: Option<WaitReason>,
    /// Registered brokers that are still ZooKeeper brokers (`MigratingZkBrokerCount`).
    pub migrating_zk_broker_count: usize,
    /// `ZkWriteBehindLag`: latest committed offset − dual-write offset while dual-writing, else 0.
    pub zk_write_behind_lag: i64,
    /// The last offset mirrored to ZooKeeper by dual-write.
    pub dual_write_offset: Option<i64>,
    /// The copy in progress (partial) or the last completed copy on this node.
    pub copy: Option<MigrationManifest>,
    /// `ZkWriteSnapshotTimeMs` of the last full reconciliation.
    pub last_snapshot_write_ms: Option<u64>,
    /// `ZkWriteDeltaTimeMs` of the last delta dual-write that wrote something.
    pub last_delta_write_ms: Option<u64>,
    /// Dual-writes waiting behind the one in flight.
    pub pending_dual_writes: usize,
    /// ZooKeeper requests that failed retriably and were retried.
    pub zk_retries: u64,
    /// The last error the driver logged.
    pub last_error: Option<String>,
}

/// Why the driver is waiting (facts §6.4's gates, and the retry points).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// No metadata image published yet.
    FirstImage,
    /// Waiting for this node to become the active controller.
    Leadership,
    /// Reading `/migration` after gaining the leadership.
    MigrationState,
    /// The image's `ZkMigrationState` forbids a migration (NONE or POST_MIGRATION), or says
    /// MIGRATION while `/migration` says the copy never happened.
    MigrationNotAllowed {
        /// The image's state.
        zk_migration_state: ZkMigrationState,
    },
    /// Not every quorum controller can migrate yet.
    ControllerQuorum(QuorumNotReady),
    /// Not every ZooKeeper broker has registered with KRaft.
    Brokers(BrokerWait),
    /// `/controller` holds a KRaft controller with the same or a newer epoch.
    ControllerClaimLost {
        /// The epoch in `/controller`.
        kraft_controller_epoch_in_zk: i32,
        /// Ours.
        our_kraft_controller_epoch: i32,
    },
    /// `/controller_epoch` is missing: no ZooKeeper controller ever ran.
    NoControllerEpoch,
    /// The claim's multi-op lost a race (BADVERSION, NONODE, NODEEXISTS); retried.
    ClaimRace,
    /// The initial copy is appending (batches committed so far).
    CopyCommit {
        /// Batches committed so far (the transaction marker included).
        committed_batches: usize,
        /// Batches still to append.
        remaining_batches: usize,
    },
    /// The image is behind what `/migration` says ZooKeeper already holds.
    ImageBehindZk {
        /// The image's position.
        image: OffsetAndEpoch,
        /// `/migration`'s.
        migration: OffsetAndEpoch,
    },
    /// A ZooKeeper request failed retriably; retried on the poll timer.
    Zk {
        /// The error.
        error: String,
    },
}

/// Why the controller quorum is not ready (Kafka's `reasonAllControllersZkMigrationNotReady`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumNotReady {
    /// metadata.version below 3.4-IV0.
    MetadataVersionTooLow(MetadataVersion),
    /// A voter has no controller registration.
    NotRegistered(i32),
    /// A voter registered without `zookeeper.metadata.migration.enable`.
    NotMigrationReady(i32),
}

/// What WAIT_FOR_BROKERS is waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerWait {
    /// The image has no broker at all.
    pub no_brokers_in_kraft: bool,
    /// `/brokers/ids` is empty.
    pub no_brokers_in_zk: bool,
    /// Not yet registered with KRaft as a migrating ZooKeeper broker, by id.
    pub missing: BTreeMap<i32, MissingBroker>,
    /// ZooKeeper broker ids (in `/brokers/ids` or a topic assignment) that are also controller
    /// node ids. Brokers and controllers share one id space (KIP-866); Kafka 3.9 checks nothing
    /// and migrates anyway, after which the broker whose `broker.id` is the `brokerid` in
    /// `/controller` takes itself for the controller and fails admin requests ("Cannot set
    /// entity configs for topics … directly when there is a KRaft controller"). krust waits
    /// here instead, before touching ZooKeeper, until the ids are made distinct.
    pub controller_ids: BTreeSet<i32>,
}

/// Where a missing broker id was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingBroker {
    /// Registered in ZooKeeper (`/brokers/ids/<id>`).
    ZkRegistered,
    /// Only in a topic's replica assignment.
    AssignmentOnly,
}

impl BrokerWait {
    /// Missing ids registered in ZooKeeper.
    #[must_use]
    pub fn missing_zk_registered(&self) -> BTreeSet<i32> {
        self.by_source(MissingBroker::ZkRegistered)
    }

    /// Missing ids found only in assignments.
    #[must_use]
    pub fn missing_assignment_only(&self) -> BTreeSet<i32> {
        self.by_source(MissingBroker::AssignmentOnly)
    }

    fn by_source(&self, source: MissingBroker) -> BTreeSet<i32> {
        self.missing
            .iter()
            .filter(|(_, s)| **s == source)
            .map(|(id, _)| *id)
            .collect()
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FirstImage => f.write_str("waiting for the first metadata image"),
            Self::Leadership => f.write_str("not the active controller"),
            Self::MigrationState => f.write_str("reading /migration"),
            Self::MigrationNotAllowed { zk_migration_state } => {
                write!(
                    f,
                    "ZkMigrationState {zk_migration_state:?} does not allow a migration"
                )
            }
            Self::ControllerQuorum(QuorumNotReady::MetadataVersionTooLow(mv)) => {
                write!(f, "The metadata.version too low at {}", mv.version())
            }
            Self::ControllerQuorum(QuorumNotReady::NotRegistered(id)) => {
                write!(f, "No registration found for controller {id}")
            }
            Self::ControllerQuorum(QuorumNotReady::NotMigrationReady(id)) => write!(
                f,
                "Controller {id} has not enabled zookeeper.metadata.migration.enable"
            ),
            Self::Brokers(wait) if !wait.controller_ids.is_empty() => write!(
                f,
                "ZooKeeper brokers {:?} have the node ids of KRaft controllers: brokers and \
                 controllers share one id space, so the migration will not start. Give the \
                 controllers node ids no broker uses (krust migration preflight checks this).",
                wait.controller_ids
            ),
            Self::Brokers(wait) if wait.no_brokers_in_kraft => {
                f.write_str("No brokers are known to KRaft, waiting for brokers to register.")
            }
            Self::Brokers(wait) if wait.no_brokers_in_zk => {
                f.write_str("No brokers are registered in ZK, waiting for brokers to register.")
            }
            Self::Brokers(wait) => write!(
                f,
                "Still waiting for ZK brokers {:?} to register with KRaft (only in topic \
                 assignments: {:?}).",
                wait.missing_zk_registered(),
                wait.missing_assignment_only()
            ),
            Self::ControllerClaimLost {
                kraft_controller_epoch_in_zk,
                our_kraft_controller_epoch,
            } => write!(
                f,
                "/controller holds KRaft epoch {kraft_controller_epoch_in_zk} >= ours \
                 ({our_kraft_controller_epoch})"
            ),
            Self::NoControllerEpoch => f.write_str("/controller_epoch does not exist"),
            Self::ClaimRace => f.write_str("lost a race claiming /controller; retrying"),
            Self::CopyCommit {
                committed_batches,
                remaining_batches,
            } => write!(
                f,
                "copying: {committed_batches} batches committed, {remaining_batches} to go"
            ),
            Self::ImageBehindZk { image, migration } => {
                write!(f, "image at {image} is behind /migration at {migration}")
            }
            Self::Zk { error } => write!(f, "ZooKeeper unavailable ({error}); retrying"),
        }
    }
}

/// The initial copy's summary (Kafka's `MigrationManifest`): its `Display` is the middle of
/// Kafka's completion log line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationManifest {
    /// Records appended from ZooKeeper (transaction markers and the state record excluded).
    pub total_records: usize,
    /// Batches appended from ZooKeeper.
    pub total_batches: usize,
    /// Time spent waiting for those batches to commit.
    pub batch_wait: Duration,
    /// From the start of the copy to its end (or to now, while running).
    pub elapsed: Duration,
    /// Records by type.
    pub record_type_counts: BTreeMap<MetadataRecordType, usize>,
}

impl MigrationManifest {
    /// Average commit wait per batch (ms).
    #[must_use]
    pub fn avg_batch_wait_ms(&self) -> f64 {
        if self.total_batches == 0 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let batches = self.total_batches as f64;
        self.batch_wait.as_secs_f64() * 1000.0 / batches
    }
}

impl fmt::Display for MigrationManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} records were generated in {} ms across {} batches. The average time spent \
             waiting on a batch was {:.2} ms. The record types were {{",
            self.total_records,
            self.elapsed.as_millis(),
            self.total_batches,
            self.avg_batch_wait_ms()
        )?;
        for (i, (record_type, count)) in self.record_type_counts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{record_type}={count}")?;
        }
        f.write_str("}")
    }
}

/// Kafka's completion log line for the initial copy.
#[must_use]
pub fn completion_log_line(
    manifest: &MigrationManifest,
    offset_and_epoch: OffsetAndEpoch,
    brokers_in_metadata: &BTreeSet<i32>,
) -> String {
    format!(
        "Completed migration of metadata from ZooKeeper to KRaft. {manifest}. The current \
         metadata offset is now {} with an epoch of {}. Saw {} brokers in the migrated metadata \
         {brokers_in_metadata:?}.",
        offset_and_epoch.offset,
        offset_and_epoch.epoch,
        brokers_in_metadata.len()
    )
}

/// Kafka's name of a `ZkMigrationState` (`PRE_MIGRATION`).
#[must_use]
pub fn zk_migration_state_name(state: ZkMigrationState) -> &'static str {
    match state {
        ZkMigrationState::None => "NONE",
        ZkMigrationState::PreMigration => "PRE_MIGRATION",
        ZkMigrationState::Migration => "MIGRATION",
        ZkMigrationState::PostMigration => "POST_MIGRATION",
    }
}

impl fmt::Display for MigrationStatus {
    /// The status tool's text: one `key: value` line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "NodeId: {}", self.node_id)?;
        writeln!(f, "DriverState: {} ({})", self.state, self.state.value())?;
        writeln!(
            f,
            "ZkMigrationState: {} ({})",
            zk_migration_state_name(self.zk_migration_state),
            self.zk_migration_state.value()
        )?;
        match self.kraft_leader.leader_id {
            Some(id) => writeln!(
                f,
                "KRaftLeader: {id} (epoch {})",
                self.kraft_leader.leader_epoch
            )?,
            None => writeln!(
                f,
                "KRaftLeader: none (epoch {})",
                self.kraft_leader.leader_epoch
            )?,
        }
        writeln!(f, "MigrationZNode: {}", self.leadership)?;
        if let Some(reason) = &self.waiting_for {
            writeln!(f, "WaitingFor: {reason}")?;
        }
        writeln!(
            f,
            "MigratingZkBrokerCount: {}",
            self.migrating_zk_broker_count
        )?;
        writeln!(f, "ZkWriteBehindLag: {}", self.zk_write_behind_lag)?;
        if let Some(offset) = self.dual_write_offset {
            writeln!(f, "DualWriteOffset: {offset}")?;
        }
        if let Some(manifest) = &self.copy {
            writeln!(f, "Copy: {manifest}")?;
        }
        if let Some(ms) = self.last_snapshot_write_ms {
            writeln!(f, "ZkWriteSnapshotTimeMs: {ms}")?;
        }
        if let Some(ms) = self.last_delta_write_ms {
            writeln!(f, "ZkWriteDeltaTimeMs: {ms}")?;
        }
        writeln!(f, "PendingDualWrites: {}", self.pending_dual_writes)?;
        writeln!(f, "ZkRetries: {}", self.zk_retries)?;
        if let Some(error) = &self.last_error {
            writeln!(f, "LastError: {error}")?;
        }
        Ok(())
    }
}
