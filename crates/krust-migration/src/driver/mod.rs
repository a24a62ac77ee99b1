//! [`MigrationDriver`]: Kafka 3.9's `KRaftMigrationDriver` (facts §6.4–§6.8) as a sans-IO state
//! machine for one controller node. It does no IO and reads no clock: events come in through
//! `handle_*` with an explicit `now`, requests go out through [`MigrationDriver::poll_action`].
//!
//! # Driving it
//!
//! 1. Build it with [`MigrationDriver::new`] at `now` (it is UNINITIALIZED and asks, at once,
//!    to recover `/migration`: [`MigrationDriver::poll_timeout`] is `now`).
//! 2. Feed it, in the order the controller node's metadata loader sees them, every leader
//!    change ([`MigrationDriver::handle_leader_change`], Kafka's `onControllerChange`) and every
//!    published image ([`MigrationDriver::handle_metadata`], Kafka's `onMetadataUpdate`).
//! 3. After every `handle_*` call drain [`MigrationDriver::poll_action`] and carry each action
//!    out in order: [`MigrationAction::Zk`] against ZooKeeper (report with
//!    [`MigrationDriver::handle_zk_result`]), [`MigrationAction::AppendRecords`] through the
//!    active controller (report with [`MigrationDriver::handle_append_committed`] /
//!    [`MigrationDriver::handle_append_failed`]), [`MigrationAction::SendRpcs`] to the
//!    ZooKeeper brokers, [`MigrationAction::AbortMigration`] as a fatal fault. At most one
//!    ZooKeeper request or append is outstanding at a time; the driver ignores completions it
//!    no longer waits for (a leadership change drops them).
//! 4. Call [`MigrationDriver::handle_timeout`] when [`MigrationDriver::poll_timeout`] is due
//!    (Kafka's `PollEvent`: 100 ms × 2 up to 60 s, ±2 % jitter, reset on every state change;
//!    retriable ZooKeeper failures are retried on it).
//!
//! Safety comes from ZooKeeper, not from timing: every write the driver asks for is a multi-op
//! that checks `/controller_epoch` at the version this controller's claim produced and
//! `/migration` at the version last seen (facts §6.7), so a controller that lost its
//! leadership cannot land a write even if its actions were already under way.
//!
//! # Layout
//!
//! - this file: the state machine (events, state steps, replies).
//! - [`io`]: actions, ZooKeeper requests and replies as data.
//! - [`seams`]: the reader, writer and propagator traits the driver calls.
//! - [`status`]: [`MigrationStatus`], [`WaitReason`], [`MigrationManifest`].
//! - `backoff`: the poll interval.

mod backoff;
pub mod io;
pub mod seams;
pub mod status;

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use krust_metadata::image::LeaderAndEpoch;
use krust_metadata::image::LoaderManifest;
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::{
    BeginTransactionRecord, EndTransactionRecord, MetadataRecord, MetadataRecordType,
    ZkMigrationStateRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataDelta, MetadataImage};
use krust_zk::ops::{ANY_VERSION, CreateMode, Stat, ZkErrorCode, ZkOp, ZkOpResult};
use krust_zk::tree::ZkTree;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tracing::{debug, error, info, trace, warn};

pub use io::{MigrationAction, RequestId, ZkFailure, ZkReply, ZkRequest, ZkStep};
pub use seams::{
    BrokerPropagator, SeamError, ZkMetadataCopy, ZkMetadataReader, ZkMetadataWriter, ZkWriteBatch,
};
pub use status::{
    BrokerWait, MigrationManifest, MigrationStatus, MissingBroker, QuorumNotReady, WaitReason,
    completion_log_line,
};

use crate::state::{
    CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, ControllerZnode, MIGRATION_PATH, MigrationDriverState,
    OffsetAndEpoch, ZkMigrationLeadershipState, decode_controller_epoch, encode_controller_epoch,
};
use backoff::PollBackoff;

/// How long the driver waits for one migration batch to commit (Kafka's
/// `METADATA_COMMIT_MAX_WAIT_MS`).
pub const METADATA_COMMIT_MAX_WAIT: Duration = Duration::from_millis(300_000);

/// Default of `zookeeper.metadata.migration.min.batch.size`.
pub const DEFAULT_MIN_BATCH_SIZE: usize = 200;

/// Dual-writes queued behind the one in flight before they are folded into one full
/// reconciliation against the latest image (a bound on memory while ZooKeeper is down).
pub const MAX_PENDING_DUAL_WRITES: usize = 1_000;

/// The name of the initial copy's metadata transaction.
pub const MIGRATION_TRANSACTION_NAME: &str = "ZK Migration";

/// Kafka's persistent top-level paths, created at recovery if missing (facts §6.9).
pub const TOP_LEVEL_PATHS: [&str; 14] = [
    "/consumers",
    "/brokers/ids",
    "/brokers/topics",
    "/config/changes",
    "/admin/delete_topics",
    "/brokers/seqid",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
];

/// `/brokers/ids`: the ZooKeeper broker registrations.
pub const BROKER_IDS_PATH: &str = "/brokers/ids";
/// `/brokers/topics`: the topic assignments.
pub const BROKER_TOPICS_PATH: &str = "/brokers/topics";

/// The driver's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationDriverConfig {
    /// This controller's `node.id`.
    pub node_id: i32,
    /// The controller quorum's voter ids (all must be migration-ready).
    pub quorum_voter_ids: BTreeSet<i32>,
    /// `zookeeper.metadata.migration.min.batch.size` (≥ 1).
    pub min_batch_size: usize,
    /// Seed of the poll jitter.
    pub rng_seed: u64,
}

impl MigrationDriverConfig {
    /// A configuration with Kafka's defaults.
    #[must_use]
    pub fn new(node_id: i32, quorum_voter_ids: impl IntoIterator<Item = i32>) -> Self {
        Self {
            node_id,
            quorum_voter_ids: quorum_voter_ids.into_iter().collect(),
            min_batch_size: DEFAULT_MIN_BATCH_SIZE,
            rng_seed: u64::try_from(node_id).unwrap_or(0),
        }
    }
}

/// What an outstanding request is for.
#[derive(Debug)]
enum Purpose<Rpcs> {
    /// Start-up: `/migration` (UNINITIALIZED).
    Recover,
    /// Leadership gained: `/migration` again (KAFKA-16667).
    LeaderReload,
    /// WAIT_FOR_BROKERS: `/brokers/ids` and `/brokers/topics`.
    ReadBrokers,
    /// BECOME_CONTROLLER: `/controller_epoch` and `/controller`.
    ReadControllerZnodes,
    /// BECOME_CONTROLLER: the claim multi-op.
    Claim { new_zk_controller_epoch: i32 },
    /// BECOME_CONTROLLER: the unconditional `/migration` rewrite.
    RewriteMigration,
    /// ZK_MIGRATION: the subtrees the reader needs.
    ReadForCopy,
    /// ZK_MIGRATION: one migration batch.
    AppendCopy(CopyAppend),
    /// ZK_MIGRATION: the copy's position into `/migration`.
    PersistCopy { position: OffsetAndEpoch },
    /// SYNC_KRAFT_TO_ZK: the subtrees the writer compares.
    ReadForSync,
    /// SYNC_KRAFT_TO_ZK: the reconciliation's writes.
    WriteSync {
        started: Instant,
        synced: OffsetAndEpoch,
    },
    /// Dual-write of a snapshot: the subtrees the writer compares.
    ReadForSnapshotDualWrite { image: MetadataImage },
    /// Dual-write: the writes and the `/migration` bump.
    WriteDualWrite(PreparedWrite<Rpcs>),
}

#[derive(Debug)]
struct PreparedWrite<Rpcs> {
    target: OffsetAndEpoch,
    wrote_something: bool,
    snapshot: bool,
    rpcs: Option<(bool, Rpcs)>,
    started: Option<Instant>,
}

#[derive(Debug, Clone)]
struct CopyAppend {
    kind: AppendKind,
    records: usize,
    counts: Vec<MetadataRecordType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppendKind {
    Begin,
    Data,
    Complete,
}

#[derive(Debug)]
struct InFlight<Rpcs> {
    id: RequestId,
    issued_at: Instant,
    purpose: Purpose<Rpcs>,
    /// The steps of a write (kept to resume after a retriable failure).
    steps: Vec<ZkStep>,
}

/// A write to re-issue from its failed step on the next poll.
#[derive(Debug)]
struct Retry<Rpcs> {
    purpose: Purpose<Rpcs>,
    steps: Vec<ZkStep>,
}

#[derive(Debug)]
struct CopyProgress {
    started: Instant,
    appends: VecDeque<(AppendKind, Vec<ApiMessageAndVersion>)>,
    committed_batches: usize,
    manifest: MigrationManifest,
    broker_ids: BTreeSet<i32>,
}

#[derive(Debug)]
enum DualWriteJob<Rpcs> {
    Snapshot(MetadataImage),
    Delta {
        target: OffsetAndEpoch,
        writes: ZkWriteBatch,
        rpcs: Option<Rpcs>,
    },
}

/// Kafka's `KRaftMigrationDriver` for one controller node (see the module doc for how to drive
/// it).
#[derive(Debug)]
pub struct MigrationDriver<R, W, P: BrokerPropagator> {
    config: MigrationDriverConfig,
    reader: R,
    writer: W,
    propagator: P,
    clock_origin: Instant,
    wall_origin_ms: i64,

    state: MigrationDriverState,
    leadership: ZkMigrationLeadershipState,
    leader: LeaderAndEpoch,
    image: MetadataImage,
    first_publish: bool,
    /// Leadership gained and `/migration` not yet re-read.
    reload_pending: bool,

    backoff: PollBackoff,
    next_poll_at: Option<Instant>,
    wake: bool,
    next_request_id: RequestId,
    in_flight: Option<InFlight<P::Rpcs>>,
    retry: Option<Retry<P::Rpcs>>,
    actions: VecDeque<MigrationAction<P::Rpcs>>,
    copy: Option<CopyProgress>,
    dual_writes: VecDeque<DualWriteJob<P::Rpcs>>,

    waiting_for: Option<WaitReason>,
    last_error: Option<String>,
    manifest: Option<MigrationManifest>,
    completion_message: Option<String>,
    dual_write_offset: Option<i64>,
    last_snapshot_write_ms: Option<u64>,
    last_delta_write_ms: Option<u64>,
    zk_retries: u64,
    consecutive_zk_failures: u32,
    transitions: VecDeque<MigrationDriverState>,
}

/// State changes kept for [`MigrationDriver::take_transitions`].
const MAX_RECORDED_TRANSITIONS: usize = 64;

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    /// A driver in UNINITIALIZED, due to poll at `now`. `wall_clock_ms` is the wall clock at
    /// `now` (for `/controller`'s timestamp; later instants are offset from it).
    pub fn new(
        config: MigrationDriverConfig,
        reader: R,
        writer: W,
        propagator: P,
        now: Instant,
        wall_clock_ms: i64,
    ) -> Self {
        let rng = StdRng::seed_from_u64(config.rng_seed);
        Self {
            config,
            reader,
            writer,
            propagator,
            clock_origin: now,
            wall_origin_ms: wall_clock_ms,
            state: MigrationDriverState::Uninitialized,
            leadership: ZkMigrationLeadershipState::EMPTY,
            leader: LeaderAndEpoch::default(),
            image: MetadataImage::empty(),
            first_publish: false,
            reload_pending: false,
            backoff: PollBackoff::new(rng),
            next_poll_at: Some(now),
            wake: false,
            next_request_id: 1,
            in_flight: None,
            retry: None,
            actions: VecDeque::new(),
            copy: None,
            dual_writes: VecDeque::new(),
            waiting_for: None,
            last_error: None,
            manifest: None,
            completion_message: None,
            dual_write_offset: None,
            last_snapshot_write_ms: None,
            last_delta_write_ms: None,
            zk_retries: 0,
            consecutive_zk_failures: 0,
            transitions: VecDeque::new(),
        }
    }

    // ----- queries -----

    /// The driver state.
    #[must_use]
    pub fn state(&self) -> MigrationDriverState {
        self.state
    }

    /// What the driver knows of `/migration` and its ZooKeeper controller claim.
    #[must_use]
    pub fn leadership(&self) -> &ZkMigrationLeadershipState {
        &self.leadership
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &MigrationDriverConfig {
        &self.config
    }

    /// The reader, writer and propagator (tests inspect their fakes).
    pub fn seams_mut(&mut self) -> (&mut R, &mut W, &mut P) {
        (&mut self.reader, &mut self.writer, &mut self.propagator)
    }

    /// Whether this node is the KRaft leader as last heard.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.leader.leader_id == Some(self.config.node_id)
    }

    /// A status snapshot (see [`MigrationStatus`]).
    #[must_use]
    pub fn status(&self) -> MigrationStatus {
        let migrating_zk_broker_count = self
            .image
            .cluster
            .brokers
            .values()
            .filter(|b| b.is_migrating_zk_broker)
            .count();
        let zk_write_behind_lag = if self.state.allows_dual_write() && self.is_leader() {
            let reflected = self
                .dual_write_offset
                .unwrap_or(self.leadership.kraft_metadata_offset);
            (self.image.provenance.last_contained_offset - reflected).max(0)
        } else {
            0
        };
        let copy = match &self.copy {
            Some(copy) => Some(copy.manifest.clone()),
            None => self.manifest.clone(),
        };
        MigrationStatus {
            node_id: self.config.node_id,
            state: self.state,
            zk_migration_state: self.image.features.zk_migration_state,
            kraft_leader: self.leader,
            leadership: self.leadership,
            waiting_for: self.waiting_for.clone(),
            migrating_zk_broker_count,
            zk_write_behind_lag,
            dual_write_offset: self.dual_write_offset,
            copy,
            last_snapshot_write_ms: self.last_snapshot_write_ms,
            last_delta_write_ms: self.last_delta_write_ms,
            pending_dual_writes: self.dual_writes.len(),
            zk_retries: self.zk_retries,
            last_error: self.last_error.clone(),
        }
    }

    /// The states entered since the last call, oldest first (at most the last 64): for logs
    /// and tests that follow every transition.
    pub fn take_transitions(&mut self) -> Vec<MigrationDriverState> {
        self.transitions.drain(..).collect()
    }

    /// Kafka's completion log line of the last initial copy done on this node.
    #[must_use]
    pub fn completion_message(&self) -> Option<&str> {
        self.completion_message.as_deref()
    }

    /// When [`Self::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let append_deadline = self.in_flight.as_ref().and_then(|f| match f.purpose {
            Purpose::AppendCopy(_) => Some(f.issued_at + METADATA_COMMIT_MAX_WAIT),
            _ => None,
        });
        match (self.next_poll_at, append_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next action, in order.
    pub fn poll_action(&mut self) -> Option<MigrationAction<P::Rpcs>> {
        self.actions.pop_front()
    }

    // ----- events -----

    /// The KRaft leader changed (Kafka's `KRaftLeaderEvent`). Losing the leadership drops
    /// every outstanding request (its completion is ignored) and goes INACTIVE; gaining it goes
    /// INACTIVE, re-reads `/migration`, then WAIT_FOR_CONTROLLER_QUORUM.
    pub fn handle_leader_change(&mut self, now: Instant, leader: LeaderAndEpoch) {
        self.leader = leader;
        if self.state != MigrationDriverState::Uninitialized {
            self.apply_leader(now);
        }
        self.pump(now);
    }

    /// A published image (from the controller node's metadata loader): `delta` made it from
    /// `delta.image()`; `manifest` says whether it was a snapshot. While dual-writing, queues
    /// the ZooKeeper writes, the `/migration` bump and the RPCs for it.
    pub fn handle_metadata(
        &mut self,
        now: Instant,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        if !self.first_publish && image.is_empty() {
            // KAFKA-15389: an empty first image carries no bootstrap records; ignore it.
            return;
        }
        self.first_publish = true;
        self.image = image.clone();
        match self.state {
            MigrationDriverState::Uninitialized | MigrationDriverState::Inactive => {}
            state if !state.allows_dual_write() => {
                if delta.cluster_delta().is_some() {
                    self.wake = true;
                }
            }
            _ => self.enqueue_dual_write(delta, image, manifest.is_snapshot()),
        }
        self.pump(now);
    }

    /// The runtime's answer to [`MigrationAction::Zk`] `id`.
    pub fn handle_zk_result(
        &mut self,
        now: Instant,
        id: RequestId,
        result: Result<ZkReply, ZkFailure>,
    ) {
        let Some(in_flight) = self.take_in_flight(id) else {
            trace!(
                node_id = self.config.node_id,
                id, "ignoring a stale ZooKeeper result"
            );
            return;
        };
        match result {
            Ok(reply) => self.on_zk_reply(now, in_flight, reply),
            Err(failure) => self.on_zk_failure(now, in_flight, &failure),
        }
        self.pump(now);
    }

    /// Migration batch `id` committed; its last record is at (`last_offset`, `last_epoch`).
    pub fn handle_append_committed(
        &mut self,
        now: Instant,
        id: RequestId,
        last_offset: i64,
        last_epoch: i32,
    ) {
        let Some(in_flight) = self.take_in_flight(id) else {
            trace!(
                node_id = self.config.node_id,
                id, "ignoring a stale append commit"
            );
            return;
        };
        let Purpose::AppendCopy(append) = in_flight.purpose else {
            self.in_flight = Some(in_flight);
            return;
        };
        let waited = now.saturating_duration_since(in_flight.issued_at);
        let Some(copy) = self.copy.as_mut() else {
            return;
        };
        copy.committed_batches += 1;
        if append.kind == AppendKind::Data {
            copy.manifest.total_batches += 1;
            copy.manifest.total_records += append.records;
            copy.manifest.batch_wait += waited;
            for record_type in append.counts {
                *copy
                    .manifest
                    .record_type_counts
                    .entry(record_type)
                    .or_default() += 1;
            }
        }
        copy.manifest.elapsed = now.saturating_duration_since(copy.started);
        if append.kind == AppendKind::Complete {
            let position = OffsetAndEpoch::new(last_offset, last_epoch);
            let line = completion_log_line(&copy.manifest, position, &copy.broker_ids);
            info!(node_id = self.config.node_id, "{line}");
            self.completion_message = Some(line);
            self.manifest = Some(copy.manifest.clone());
            let new_state = self
                .leadership
                .with_kraft_metadata_offset_and_epoch(last_offset, last_epoch);
            let steps = vec![ZkStep::Multi(vec![
                self.controller_epoch_check(),
                ZkOp::set_data(
                    MIGRATION_PATH,
                    new_state.to_migration_json(),
                    self.leadership.migration_zk_version,
                ),
            ])];
            self.issue_write(now, Purpose::PersistCopy { position }, steps);
        } else {
            self.issue_next_append(now);
        }
        self.pump(now);
    }

    /// Migration batch `id` could not be appended or committed: the copy is aborted
    /// ([`MigrationAction::AbortMigration`]).
    pub fn handle_append_failed(&mut self, now: Instant, id: RequestId, reason: &str) {
        let Some(in_flight) = self.take_in_flight(id) else {
            return;
        };
        if matches!(in_flight.purpose, Purpose::AppendCopy(_)) {
            self.abort_copy(now, format!("appending a migration batch failed: {reason}"));
        } else {
            self.in_flight = Some(in_flight);
        }
        self.pump(now);
    }

    /// The poll timer ([`Self::poll_timeout`]) fired: runs the current state's step (Kafka's
    /// `PollEvent`), re-issues a write that failed retriably, and fails a migration batch not
    /// committed within [`METADATA_COMMIT_MAX_WAIT`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(f) = &self.in_flight
            && matches!(f.purpose, Purpose::AppendCopy(_))
            && now >= f.issued_at + METADATA_COMMIT_MAX_WAIT
        {
            self.in_flight = None;
            self.abort_copy(
                now,
                format!(
                    "the metadata layer did not commit a migration batch within {} ms",
                    METADATA_COMMIT_MAX_WAIT.as_millis()
                ),
            );
        }
        if self.next_poll_at.is_some_and(|at| now >= at) {
            self.poll_event(now);
        }
        self.pump(now);
    }

    // ----- the state machine -----

    fn pump(&mut self, now: Instant) {
        // Each round either issues a request or changes state; the table has 9 states, so a
        // handful of rounds always settles.
        for _ in 0..32 {
            if !self.wake || self.in_flight.is_some() {
                return;
            }
            self.wake = false;
            self.poll_event(now);
        }
    }

    fn poll_event(&mut self, now: Instant) {
        if self.in_flight.is_none() {
            self.run_state_step(now);
        }
        self.next_poll_at = Some(now + self.backoff.next_interval());
    }

    fn transition(&mut self, to: MigrationDriverState) {
        match self.state.transition_to(to) {
            Ok(to) => {
                if to != self.state {
                    info!(
                        node_id = self.config.node_id,
                        from = %self.state,
                        to = %to,
                        "{} transitioning from {} to {} state",
                        self.config.node_id,
                        self.state,
                        to
                    );
                    self.backoff.reset();
                    self.wake = true;
                    self.waiting_for = None;
                    if self.transitions.len() == MAX_RECORDED_TRANSITIONS {
                        self.transitions.pop_front();
                    }
                    self.transitions.push_back(to);
                }
                self.state = to;
            }
            Err(e) => {
                error!(node_id = self.config.node_id, error = %e, "refusing a transition");
                self.last_error = Some(e.to_string());
            }
        }
    }

    fn apply_leader(&mut self, now: Instant) {
        self.drop_work();
        let _ = now;
        if self.is_leader() {
            self.leadership = self.leadership.with_unknown_zk_controller();
            self.transition(MigrationDriverState::Inactive);
            self.reload_pending = true;
            self.waiting_for = Some(WaitReason::MigrationState);
            self.wake = true;
        } else {
            self.leadership = self
                .leadership
                .with_new_kraft_controller(
                    self.leader.leader_id.unwrap_or(-1),
                    self.leader.leader_epoch,
                )
                .with_unknown_zk_controller();
            self.transition(MigrationDriverState::Inactive);
            self.reload_pending = false;
            self.waiting_for = Some(WaitReason::Leadership);
        }
    }

    /// Forgets every outstanding request, queued action and partial copy.
    fn drop_work(&mut self) {
        self.in_flight = None;
        self.retry = None;
        self.copy = None;
        self.dual_writes.clear();
        if !self.actions.is_empty() {
            debug!(
                node_id = self.config.node_id,
                dropped = self.actions.len(),
                "dropping actions of a previous leadership"
            );
            self.actions.clear();
        }
    }

    /// A fenced or failed ZooKeeper write: back to INACTIVE; if still the leader, re-read
    /// `/migration` and go through the gates and a full reconciliation again.
    fn reactivate(&mut self, reason: String) {
        warn!(node_id = self.config.node_id, reason = %reason, "migration driver going inactive");
        self.last_error = Some(reason);
        self.drop_work();
        self.leadership = self.leadership.with_unknown_zk_controller();
        self.transition(MigrationDriverState::Inactive);
        self.reload_pending = self.is_leader();
        self.wake = true;
    }

    fn run_state_step(&mut self, now: Instant) {
        if let Some(retry) = self.retry.take() {
            self.issue_write(now, retry.purpose, retry.steps);
            return;
        }
        match self.state {
            MigrationDriverState::Uninitialized => {
                self.issue_get_or_create(now, Purpose::Recover);
            }
            MigrationDriverState::Inactive => {
                if self.reload_pending && self.is_leader() {
                    self.issue_get_or_create(now, Purpose::LeaderReload);
                }
            }
            MigrationDriverState::WaitForControllerQuorum => self.check_controller_quorum(),
            MigrationDriverState::WaitForBrokers => {
                if self.first_publish {
                    let roots = vec![BROKER_IDS_PATH.to_owned(), BROKER_TOPICS_PATH.to_owned()];
                    self.issue(
                        now,
                        Purpose::ReadBrokers,
                        ZkRequest::ReadTrees { roots },
                        Vec::new(),
                    );
                } else {
                    self.waiting_for = Some(WaitReason::FirstImage);
                }
            }
            MigrationDriverState::BecomeController => {
                if self.leadership.has_zk_controller() {
                    self.issue_rewrite_migration(now);
                } else {
                    let paths = vec![CONTROLLER_EPOCH_PATH.to_owned(), CONTROLLER_PATH.to_owned()];
                    self.issue(
                        now,
                        Purpose::ReadControllerZnodes,
                        ZkRequest::Get { paths },
                        Vec::new(),
                    );
                }
            }
            MigrationDriverState::ZkMigration => {
                if self.copy.is_some() {
                    self.issue_next_append(now);
                } else {
                    let roots = self.reader.metadata_roots();
                    self.issue(
                        now,
                        Purpose::ReadForCopy,
                        ZkRequest::ReadTrees { roots },
                        Vec::new(),
                    );
                }
            }
            MigrationDriverState::SyncKraftToZk => {
                if self.image_behind_zk() {
                    return;
                }
                let roots = self.writer.snapshot_roots();
                self.issue(
                    now,
                    Purpose::ReadForSync,
                    ZkRequest::ReadTrees { roots },
                    Vec::new(),
                );
            }
            MigrationDriverState::KraftControllerToBrokerComm => {
                if self.image_behind_zk() {
                    return;
                }
                info!(
                    node_id = self.config.node_id,
                    "Sending RPCs to broker before moving to dual-write mode using at offset and epoch {}",
                    self.image_position()
                );
                let rpcs = self
                    .propagator
                    .rpcs_for_image(&self.image, self.leadership.zk_controller_epoch);
                self.push_rpcs(true, rpcs);
                self.transition(MigrationDriverState::DualWrite);
            }
            MigrationDriverState::DualWrite => self.drive_dual_writes(now),
        }
    }

    fn image_position(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(
            self.image.provenance.last_contained_offset,
            self.image.provenance.last_contained_epoch,
        )
    }

    /// Whether the image lacks what `/migration` says ZooKeeper holds (then waits).
    fn image_behind_zk(&mut self) -> bool {
        let image = self.image_position();
        let migration = self.leadership.offset_and_epoch();
        if image < migration {
            self.waiting_for = Some(WaitReason::ImageBehindZk { image, migration });
            true
        } else {
            false
        }
    }

    fn check_controller_quorum(&mut self) {
        if !self.first_publish {
            self.waiting_for = Some(WaitReason::FirstImage);
            return;
        }
        let zk_migration_state = self.image.features.zk_migration_state;
        match zk_migration_state {
            ZkMigrationState::None => {
                error!(
                    node_id = self.config.node_id,
                    "The controller's ZkMigrationState is NONE which means this cluster should not be migrated from ZooKeeper. This controller should not be configured with 'zookeeper.metadata.migration.enable' set to true. Will not proceed with a migration."
                );
                self.transition(MigrationDriverState::Inactive);
                self.waiting_for = Some(WaitReason::MigrationNotAllowed { zk_migration_state });
            }
            ZkMigrationState::PreMigration => match self.controller_quorum_not_ready() {
                Some(reason) => {
                    warn!(node_id = self.config.node_id, reason = ?reason, "Still waiting for all controller nodes ready to begin the migration.");
                    self.waiting_for = Some(WaitReason::ControllerQuorum(reason));
                }
                None => {
                    info!(
                        node_id = self.config.node_id,
                        "Controller Quorum is ready for Zk to KRaft migration. Now waiting for ZK brokers."
                    );
                    self.transition(MigrationDriverState::WaitForBrokers);
                }
            },
            ZkMigrationState::Migration => {
                if self.leadership.initial_migration_done() {
                    info!(
                        node_id = self.config.node_id,
                        "Migration is in already progress, not waiting on ZK brokers."
                    );
                    self.transition(MigrationDriverState::BecomeController);
                } else {
                    error!(
                        node_id = self.config.node_id,
                        "KRaft controller indicates an active migration, but the ZK state does not."
                    );
                    self.transition(MigrationDriverState::Inactive);
                    self.waiting_for = Some(WaitReason::MigrationNotAllowed { zk_migration_state });
                }
            }
            ZkMigrationState::PostMigration => {
                error!(
                    node_id = self.config.node_id,
                    "KRaft controller indicates a completed migration, but the migration driver is somehow active."
                );
                self.transition(MigrationDriverState::Inactive);
                self.waiting_for = Some(WaitReason::MigrationNotAllowed { zk_migration_state });
            }
        }
    }

    /// Kafka's `reasonAllControllersZkMigrationNotReady`.
    fn controller_quorum_not_ready(&self) -> Option<QuorumNotReady> {
        let mv = self.image.metadata_version();
        if !mv.is_migration_supported() {
            return Some(QuorumNotReady::MetadataVersionTooLow(mv));
        }
        if !mv.is_controller_registration_supported() {
            return None;
        }
        for id in &self.config.quorum_voter_ids {
            match self.image.cluster.controllers.get(id) {
                None => return Some(QuorumNotReady::NotRegistered(*id)),
                Some(c) if !c.zk_migration_ready => {
                    return Some(QuorumNotReady::NotMigrationReady(*id));
                }
                Some(_) => {}
            }
        }
        None
    }

    /// WAIT_FOR_BROKERS's gate over `/brokers/ids` + `/brokers/topics` and the image.
    fn broker_wait(&mut self, tree: &ZkTree) -> Result<BrokerWait, String> {
        let zk_ids: BTreeSet<i32> = tree
            .children(BROKER_IDS_PATH)
            .unwrap_or_default()
            .iter()
            .filter_map(|name| name.parse::<i32>().ok())
            .collect();
        let assignment_ids = self
            .reader
            .assignment_broker_ids(tree)
            .map_err(|e| format!("reading topic assignments: {e}"))?;
        let migrating: BTreeSet<i32> = self
            .image
            .cluster
            .brokers
            .values()
            .filter(|b| b.is_migrating_zk_broker)
            .map(|b| b.id)
            .collect();
        let mut wait = BrokerWait {
            no_brokers_in_kraft: self.image.cluster.brokers.is_empty(),
            no_brokers_in_zk: zk_ids.is_empty(),
            ..BrokerWait::default()
        };
        for id in zk_ids.difference(&migrating) {
            wait.missing.insert(*id, MissingBroker::ZkRegistered);
        }
        for id in assignment_ids.difference(&migrating) {
            wait.missing
                .entry(*id)
                .or_insert(MissingBroker::AssignmentOnly);
        }
        Ok(wait)
    }

    // ----- issuing requests -----

    fn next_id(&mut self) -> RequestId {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    fn current_epoch(&self) -> Option<i32> {
        self.is_leader().then_some(self.leader.leader_epoch)
    }

    fn issue(
        &mut self,
        now: Instant,
        purpose: Purpose<P::Rpcs>,
        request: ZkRequest,
        steps: Vec<ZkStep>,
    ) {
        debug_assert!(self.in_flight.is_none(), "one request at a time");
        let id = self.next_id();
        self.in_flight = Some(InFlight {
            id,
            issued_at: now,
            purpose,
            steps,
        });
        self.actions.push_back(MigrationAction::Zk {
            id,
            leader_epoch: self.current_epoch(),
            request,
        });
    }

    fn issue_write(&mut self, now: Instant, purpose: Purpose<P::Rpcs>, steps: Vec<ZkStep>) {
        let request = ZkRequest::Write {
            steps: steps.clone(),
        };
        self.issue(now, purpose, request, steps);
    }

    fn issue_get_or_create(&mut self, now: Instant, purpose: Purpose<P::Rpcs>) {
        let request = ZkRequest::GetOrCreateMigration {
            top_level_paths: TOP_LEVEL_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            initial_data: ZkMigrationLeadershipState::EMPTY.to_migration_json(),
        };
        self.issue(now, purpose, request, Vec::new());
    }

    fn issue_rewrite_migration(&mut self, now: Instant) {
        // KAFKA-16171 / KAFKA-16667: ZooKeeper does not order our earlier read of /migration
        // after the previous controller's last write to it; a write unconditional on
        // /migration tells us its latest version before any fenced write. Unlike Kafka's, it
        // is still fenced by our claim of /controller_epoch, so a deposed leader's late
        // rewrite cannot land.
        let steps = vec![ZkStep::Multi(vec![
            self.controller_epoch_check(),
            ZkOp::set_data(
                MIGRATION_PATH,
                self.leadership.to_migration_json(),
                ANY_VERSION,
            ),
        ])];
        self.issue_write(now, Purpose::RewriteMigration, steps);
    }

    fn issue_next_append(&mut self, now: Instant) {
        let Some(epoch) = self.current_epoch() else {
            return;
        };
        let Some(copy) = self.copy.as_mut() else {
            return;
        };
        let Some((kind, records)) = copy.appends.pop_front() else {
            return;
        };
        self.waiting_for = Some(WaitReason::CopyCommit {
            committed_batches: copy.committed_batches,
            remaining_batches: copy.appends.len() + 1,
        });
        let append = CopyAppend {
            kind,
            records: records.len(),
            counts: records.iter().map(|r| r.record.record_type()).collect(),
        };
        let id = self.next_id();
        self.in_flight = Some(InFlight {
            id,
            issued_at: now,
            purpose: Purpose::AppendCopy(append),
            steps: Vec::new(),
        });
        self.actions.push_back(MigrationAction::AppendRecords {
            id,
            leader_epoch: epoch,
            records,
        });
    }

    fn take_in_flight(&mut self, id: RequestId) -> Option<InFlight<P::Rpcs>> {
        if self.in_flight.as_ref().is_some_and(|f| f.id == id) {
            self.in_flight.take()
        } else {
            None
        }
    }

    fn controller_epoch_check(&self) -> ZkOp {
        ZkOp::check(
            CONTROLLER_EPOCH_PATH,
            self.leadership.zk_controller_epoch_zk_version,
        )
    }

    /// Facts §6.7: each write in its own multi-op checking `/controller_epoch` and
    /// `/migration`; notifications after, unfenced; then `/migration` set to `new_state` at
    /// its known version (the bump that tells any other writer it lost).
    fn fenced_steps(
        &self,
        batch: &ZkWriteBatch,
        new_state: &ZkMigrationLeadershipState,
    ) -> Vec<ZkStep> {
        assert!(
            self.leadership.has_zk_controller(),
            "fenced writes need a ZooKeeper controller claim"
        );
        let migration_version = self.leadership.migration_zk_version;
        let mut steps: Vec<ZkStep> = batch
            .ops
            .iter()
            .map(|op| {
                ZkStep::Multi(vec![
                    self.controller_epoch_check(),
                    ZkOp::check(MIGRATION_PATH, migration_version),
                    op.clone(),
                ])
            })
            .collect();
        steps.extend(batch.notifications.iter().cloned().map(ZkStep::Single));
        steps.push(ZkStep::Multi(vec![
            self.controller_epoch_check(),
            ZkOp::set_data(
                MIGRATION_PATH,
                new_state.to_migration_json(),
                migration_version,
            ),
        ]));
        steps
    }

    fn push_rpcs(&mut self, full: bool, rpcs: P::Rpcs) {
        if let Some(leader_epoch) = self.current_epoch() {
            self.actions.push_back(MigrationAction::SendRpcs {
                leader_epoch,
                zk_controller_epoch: self.leadership.zk_controller_epoch,
                full,
                rpcs,
            });
        }
    }

    fn abort_copy(&mut self, now: Instant, reason: String) {
        let _ = now;
        let manifest = self.copy.take().map(|c| c.manifest).unwrap_or_default();
        error!(
            node_id = self.config.node_id,
            "Aborting the metadata migration from ZooKeeper to KRaft. {manifest}. {reason}"
        );
        self.last_error = Some(reason.clone());
        if let Some(leader_epoch) = self.current_epoch() {
            self.actions.push_back(MigrationAction::AbortMigration {
                leader_epoch,
                reason,
            });
        }
        self.in_flight = None;
        self.retry = None;
        self.reload_pending = false;
        self.transition(MigrationDriverState::Inactive);
    }

    // ----- replies -----

    fn on_zk_failure(&mut self, now: Instant, in_flight: InFlight<P::Rpcs>, failure: &ZkFailure) {
        let code = failure.error.code;
        if code.is_retriable() {
            self.zk_retries += 1;
            if self.consecutive_zk_failures == 0 {
                // Retry soon, then back off (the poll interval may have grown long while all
                // was well, e.g. in DUAL_WRITE).
                self.backoff.reset();
                self.next_poll_at = Some(now + self.backoff.next_interval());
            }
            self.consecutive_zk_failures = self.consecutive_zk_failures.saturating_add(1);
            debug!(node_id = self.config.node_id, error = %failure, "Encountered ZooKeeper error. Will retry.");
            self.waiting_for = Some(WaitReason::Zk {
                error: failure.error.to_string(),
            });
            if !in_flight.steps.is_empty() {
                // The steps before the failed one were applied and none of them bumped
                // /migration (only the last step does), so the rest still fences correctly.
                let steps = in_flight
                    .steps
                    .get(failure.step..)
                    .unwrap_or_default()
                    .to_vec();
                self.retry = Some(Retry {
                    purpose: in_flight.purpose,
                    steps,
                });
            }
            return;
        }
        if code == ZkErrorCode::AuthFailed || code == ZkErrorCode::NoAuth {
            error!(node_id = self.config.node_id, error = %failure, "Encountered ZooKeeper authentication error");
        }
        match in_flight.purpose {
            Purpose::Claim { .. }
                if matches!(
                    code,
                    ZkErrorCode::BadVersion | ZkErrorCode::NoNode | ZkErrorCode::NodeExists
                ) =>
            {
                info!(node_id = self.config.node_id, error = %failure, "Unable to claim leadership, will retry until we learn of a different KRaft leader");
                self.waiting_for = Some(WaitReason::ClaimRace);
            }
            Purpose::Recover
            | Purpose::LeaderReload
            | Purpose::ReadBrokers
            | Purpose::ReadControllerZnodes
            | Purpose::ReadForCopy
            | Purpose::ReadForSync
            | Purpose::Claim { .. } => {
                self.last_error = Some(format!("ZooKeeper error: {failure}"));
            }
            Purpose::ReadForSnapshotDualWrite { image } => {
                self.last_error = Some(format!("ZooKeeper error: {failure}"));
                self.dual_writes.push_front(DualWriteJob::Snapshot(image));
            }
            Purpose::AppendCopy(_) => {}
            Purpose::RewriteMigration
            | Purpose::PersistCopy { .. }
            | Purpose::WriteSync { .. }
            | Purpose::WriteDualWrite(_) => {
                let fenced = code == ZkErrorCode::BadVersion
                    && (failure.error.path == MIGRATION_PATH
                        || failure.error.path == CONTROLLER_EPOCH_PATH);
                let reason = if fenced {
                    format!(
                        "Conditional update on {} failed ({failure}). This indicates that another KRaft controller is making writes to ZooKeeper.",
                        failure.error.path
                    )
                } else {
                    format!("ZooKeeper write failed: {failure}")
                };
                self.reactivate(reason);
            }
        }
        let _ = now;
    }

    fn on_zk_reply(&mut self, now: Instant, in_flight: InFlight<P::Rpcs>, reply: ZkReply) {
        let expected_state = match &in_flight.purpose {
            Purpose::Recover => MigrationDriverState::Uninitialized,
            Purpose::LeaderReload => MigrationDriverState::Inactive,
            Purpose::ReadBrokers => MigrationDriverState::WaitForBrokers,
            Purpose::ReadControllerZnodes | Purpose::Claim { .. } | Purpose::RewriteMigration => {
                MigrationDriverState::BecomeController
            }
            Purpose::ReadForCopy | Purpose::AppendCopy(_) | Purpose::PersistCopy { .. } => {
                MigrationDriverState::ZkMigration
            }
            Purpose::ReadForSync | Purpose::WriteSync { .. } => MigrationDriverState::SyncKraftToZk,
            Purpose::ReadForSnapshotDualWrite { .. } | Purpose::WriteDualWrite(_) => self.state,
        };
        if self.state != expected_state {
            debug!(node_id = self.config.node_id, state = %self.state, "ignoring a reply for another state");
            return;
        }
        self.consecutive_zk_failures = 0;
        if matches!(self.waiting_for, Some(WaitReason::Zk { .. })) {
            self.waiting_for = None;
        }
        match (in_flight.purpose, reply) {
            (Purpose::Recover, ZkReply::Migration { data, stat }) => {
                match ZkMigrationLeadershipState::from_migration_json(
                    &data,
                    stat.version,
                    stat.mtime,
                ) {
                    Ok(recovered) => {
                        self.leadership = recovered;
                        let done = if recovered.initial_migration_done() {
                            "done"
                        } else {
                            "not done"
                        };
                        info!(
                            node_id = self.config.node_id,
                            "Recovered migration state from ZK: {recovered}. Initial migration of ZK metadata is {done}."
                        );
                        self.transition(MigrationDriverState::Inactive);
                        self.apply_leader(now);
                    }
                    Err(e) => self.last_error = Some(e.to_string()),
                }
            }
            (Purpose::LeaderReload, ZkReply::Migration { data, stat }) => {
                match ZkMigrationLeadershipState::from_migration_json(
                    &data,
                    stat.version,
                    stat.mtime,
                ) {
                    Ok(recovered) => {
                        self.leadership = recovered
                            .with_new_kraft_controller(
                                self.config.node_id,
                                self.leader.leader_epoch,
                            )
                            .with_unknown_zk_controller();
                        self.reload_pending = false;
                        info!(
                            node_id = self.config.node_id,
                            "Became active migration driver: {}", self.leadership
                        );
                        self.transition(MigrationDriverState::WaitForControllerQuorum);
                    }
                    Err(e) => self.last_error = Some(e.to_string()),
                }
            }
            (Purpose::ReadBrokers, ZkReply::Trees(tree)) => match self.broker_wait(&tree) {
                Ok(wait)
                    if !wait.no_brokers_in_kraft
                        && !wait.no_brokers_in_zk
                        && wait.missing.is_empty() =>
                {
                    info!(
                        node_id = self.config.node_id,
                        "Zk brokers are registered and ready for migration"
                    );
                    self.transition(MigrationDriverState::BecomeController);
                }
                Ok(wait) => {
                    let reason = WaitReason::Brokers(wait);
                    info!(node_id = self.config.node_id, "{reason}");
                    self.waiting_for = Some(reason);
                }
                Err(e) => self.last_error = Some(e),
            },
            (Purpose::ReadControllerZnodes, ZkReply::Got(entries)) => {
                self.on_controller_znodes(now, &entries);
            }
            (
                Purpose::Claim {
                    new_zk_controller_epoch,
                },
                ZkReply::Wrote(results),
            ) => {
                let version = results
                    .first()
                    .and_then(|r| r.first())
                    .and_then(|r| match r {
                        ZkOpResult::SetData { stat } => Some(stat.version),
                        _ => None,
                    });
                match version {
                    Some(version) => {
                        self.leadership = self
                            .leadership
                            .with_zk_controller(new_zk_controller_epoch, version);
                        info!(
                            node_id = self.config.node_id,
                            "Claimed ZK controller leadership with ZK controller epoch {new_zk_controller_epoch}"
                        );
                        self.issue_rewrite_migration(now);
                    }
                    None => {
                        self.last_error =
                            Some("claim multi-op reply without a setData result".to_owned());
                    }
                }
            }
            (Purpose::RewriteMigration, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                if self.leadership.initial_migration_done() {
                    self.transition(MigrationDriverState::SyncKraftToZk);
                } else {
                    self.transition(MigrationDriverState::ZkMigration);
                }
            }
            (Purpose::ReadForCopy, ZkReply::Trees(tree)) => self.start_copy(now, &tree),
            (Purpose::PersistCopy { position }, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.leadership = self
                    .leadership
                    .with_kraft_metadata_offset_and_epoch(position.offset, position.epoch);
                self.copy = None;
                info!(
                    node_id = self.config.node_id,
                    "Finished initial migration of ZK metadata to KRaft: {}", self.leadership
                );
                // Even after a copy, pass through SYNC_KRAFT_TO_ZK (Kafka does, to check
                // consistency and exercise the snapshot path).
                self.transition(MigrationDriverState::SyncKraftToZk);
            }
            (Purpose::ReadForSync, ZkReply::Trees(tree)) => {
                let started = in_flight.issued_at;
                match self.writer.snapshot_writes(
                    &self.image,
                    &tree,
                    self.leadership.zk_controller_epoch,
                ) {
                    Ok(batch)
                        if batch.is_empty()
                            && self.image_position() <= self.leadership.offset_and_epoch() =>
                    {
                        info!(
                            node_id = self.config.node_id,
                            "Did not make any ZK writes when reconciling with KRaft state."
                        );
                        self.record_snapshot_time(now, started);
                        self.transition(MigrationDriverState::KraftControllerToBrokerComm);
                    }
                    Ok(batch) => {
                        info!(node_id = self.config.node_id, counts = ?batch.counts, "Made the following ZK writes when reconciling with KRaft state");
                        // ZooKeeper now reflects the image: say so in /migration (Kafka keeps
                        // the older offset until the next delta, which shows as write-behind
                        // lag although nothing is behind).
                        let synced = self.image_position();
                        let new_state = self
                            .leadership
                            .with_kraft_metadata_offset_and_epoch(synced.offset, synced.epoch);
                        let steps = self.fenced_steps(&batch, &new_state);
                        self.issue_write(now, Purpose::WriteSync { started, synced }, steps);
                    }
                    Err(e) => {
                        self.last_error = Some(format!("reconciling KRaft with ZK: {e}"));
                    }
                }
            }
            (Purpose::WriteSync { started, synced }, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.record_snapshot_time(now, started);
                if synced > self.leadership.offset_and_epoch() {
                    self.leadership = self
                        .leadership
                        .with_kraft_metadata_offset_and_epoch(synced.offset, synced.epoch);
                    self.dual_write_offset = Some(synced.offset);
                }
                if self.image_position() > synced {
                    // Images published while the reconciliation's writes were under way were
                    // ignored (not yet dual-writing): reconcile with the latest one first
                    // thing in dual-write. (Kafka's single event thread has no such window.)
                    self.dual_writes
                        .push_back(DualWriteJob::Snapshot(self.image.clone()));
                }
                self.transition(MigrationDriverState::KraftControllerToBrokerComm);
            }
            (Purpose::ReadForSnapshotDualWrite { image }, ZkReply::Trees(tree)) => {
                self.prepare_snapshot_dual_write(now, image, &tree, in_flight.issued_at);
            }
            (Purpose::WriteDualWrite(prepared), ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.leadership = self.leadership.with_kraft_metadata_offset_and_epoch(
                    prepared.target.offset,
                    prepared.target.epoch,
                );
                self.dual_write_offset = Some(prepared.target.offset);
                if let Some(started) = prepared.started {
                    if prepared.snapshot {
                        self.record_snapshot_time(now, started);
                    } else if prepared.wrote_something {
                        self.last_delta_write_ms = Some(millis(now, started));
                    }
                }
                if let Some((full, rpcs)) = prepared.rpcs {
                    self.push_rpcs(full, rpcs);
                }
                self.drive_dual_writes(now);
            }
            (purpose, reply) => {
                error!(node_id = self.config.node_id, purpose = ?purpose, reply = ?reply, "unexpected ZooKeeper reply");
                self.last_error = Some("unexpected ZooKeeper reply".to_owned());
            }
        }
    }

    fn record_snapshot_time(&mut self, now: Instant, started: Instant) {
        self.last_snapshot_write_ms = Some(millis(now, started));
    }

    /// Updates `/migration`'s version from the results of a write whose steps set it.
    fn learn_migration_version(&mut self, steps: &[ZkStep], results: &[Vec<ZkOpResult>]) {
        for (step, step_results) in steps.iter().zip(results) {
            for (op, result) in step.ops().iter().zip(step_results) {
                if let (ZkOp::SetData { path, .. }, ZkOpResult::SetData { stat }) = (op, result)
                    && path == MIGRATION_PATH
                {
                    self.leadership = self
                        .leadership
                        .with_migration_zk_version(stat.version, stat.mtime);
                }
            }
        }
    }

    fn on_controller_znodes(&mut self, now: Instant, entries: &[Option<(Vec<u8>, Stat)>]) {
        let our_epoch = self.leadership.kraft_controller_epoch;
        let Some(Some((epoch_data, epoch_stat))) = entries.first() else {
            self.waiting_for = Some(WaitReason::NoControllerEpoch);
            warn!(
                node_id = self.config.node_id,
                "Cannot register KRaft controller as the active controller since there is no ZK controller epoch present."
            );
            return;
        };
        let current_epoch = match decode_controller_epoch(epoch_data) {
            Ok(epoch) => epoch,
            Err(e) => {
                self.last_error = Some(e.to_string());
                return;
            }
        };
        let controller = match entries.get(1) {
            Some(Some((data, stat))) => match ControllerZnode::from_json(data) {
                Ok(znode) => Some((znode, stat.version)),
                Err(e) => {
                    self.last_error = Some(e.to_string());
                    return;
                }
            },
            _ => None,
        };
        if let Some((znode, _)) = &controller
            && let Some(epoch_in_zk) = znode.kraft_controller_epoch
            && epoch_in_zk >= our_epoch
            // Our own registration from this very leadership (we were fenced, or a claim's
            // reply was lost): Raft has one leader per epoch, so nobody else wrote it, and
            // claiming again bumps /controller_epoch, fencing any other writer. Kafka refuses
            // here and stays stuck until the next leader change.
            && !(znode.broker_id == self.config.node_id && epoch_in_zk == our_epoch)
        {
            info!(
                node_id = self.config.node_id,
                "Cannot register KRaft controller {} with epoch {our_epoch} as the current controller register in ZK has the same or newer epoch {epoch_in_zk}.",
                self.config.node_id
            );
            self.waiting_for = Some(WaitReason::ControllerClaimLost {
                kraft_controller_epoch_in_zk: epoch_in_zk,
                our_kraft_controller_epoch: our_epoch,
            });
            return;
        }
        let new_epoch = current_epoch.saturating_add(1);
        let registration = ControllerZnode {
            broker_id: self.config.node_id,
            timestamp_ms: self.wall_clock_ms(now),
            kraft_controller_epoch: Some(our_epoch),
        };
        let mut ops = vec![ZkOp::set_data(
            CONTROLLER_EPOCH_PATH,
            encode_controller_epoch(new_epoch),
            epoch_stat.version,
        )];
        if let Some((_, version)) = controller {
            ops.push(ZkOp::delete(CONTROLLER_PATH, version));
        }
        // Persistent, not ephemeral: ZooKeeper brokers must not win an election while the
        // KRaft leadership moves (facts §6.6).
        ops.push(ZkOp::Create {
            path: CONTROLLER_PATH.to_owned(),
            data: registration.to_json(),
            mode: CreateMode::Persistent,
        });
        self.issue_write(
            now,
            Purpose::Claim {
                new_zk_controller_epoch: new_epoch,
            },
            vec![ZkStep::Multi(ops)],
        );
    }

    fn wall_clock_ms(&self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.clock_origin).as_millis();
        self.wall_origin_ms
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
    }

    /// ZK_MIGRATION: the reader turns the tree into batches; they are appended one at a time
    /// inside a metadata transaction, buffered to `min_batch_size` records (Kafka's
    /// `BufferingBatchConsumer`).
    fn start_copy(&mut self, now: Instant, tree: &ZkTree) {
        info!(node_id = self.config.node_id, "Starting ZK migration");
        let copied = match self.reader.read_all_metadata(tree) {
            Ok(copied) => copied,
            Err(e) => {
                let epoch = self.current_epoch();
                self.last_error = Some(format!("reading ZooKeeper metadata: {e}"));
                if let Some(leader_epoch) = epoch {
                    self.actions.push_back(MigrationAction::AbortMigration {
                        leader_epoch,
                        reason: format!("reading ZooKeeper metadata: {e}"),
                    });
                }
                self.transition(MigrationDriverState::Inactive);
                return;
            }
        };
        let transactions = self
            .image
            .metadata_version()
            .is_metadata_transaction_supported();
        let mut appends = VecDeque::new();
        if transactions {
            appends.push_back((
                AppendKind::Begin,
                vec![record(MetadataRecord::BeginTransaction(
                    BeginTransactionRecord {
                        name: Some(MIGRATION_TRANSACTION_NAME.to_owned()),
                        ..BeginTransactionRecord::default()
                    },
                ))],
            ));
        } else {
            warn!(
                node_id = self.config.node_id,
                "Starting a ZK migration without metadata transactions: it is not fault-tolerant (metadata.version below 3.6-IV1)"
            );
        }
        let min_batch_size = self.config.min_batch_size.max(1);
        let mut buffer: Vec<ApiMessageAndVersion> = Vec::new();
        for batch in copied.batches {
            buffer.extend(batch);
            if buffer.len() >= min_batch_size {
                appends.push_back((AppendKind::Data, std::mem::take(&mut buffer)));
            }
        }
        if !buffer.is_empty() {
            appends.push_back((AppendKind::Data, buffer));
        }
        let mut complete = vec![record(MetadataRecord::ZkMigrationState(
            ZkMigrationStateRecord {
                zk_migration_state: ZkMigrationState::Migration.value(),
                ..ZkMigrationStateRecord::default()
            },
        ))];
        if transactions {
            complete.push(record(MetadataRecord::EndTransaction(
                EndTransactionRecord::default(),
            )));
        }
        appends.push_back((AppendKind::Complete, complete));
        self.copy = Some(CopyProgress {
            started: now,
            appends,
            committed_batches: 0,
            manifest: MigrationManifest::default(),
            broker_ids: copied.broker_ids,
        });
        self.issue_next_append(now);
    }

    // ----- dual-write -----

    fn enqueue_dual_write(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        is_snapshot: bool,
    ) {
        let kind = if is_snapshot { "snapshot" } else { "delta" };
        if !self.leadership.initial_migration_done() {
            info!(
                node_id = self.config.node_id,
                "Ignoring {kind} since the migration has not finished."
            );
            return;
        }
        let target = OffsetAndEpoch::new(
            image.provenance.last_contained_offset,
            image.provenance.last_contained_epoch,
        );
        if target < self.leadership.offset_and_epoch() {
            info!(
                node_id = self.config.node_id,
                "Ignoring {kind} {target} which contains metadata that has already been written to ZK."
            );
            return;
        }
        let job = if is_snapshot {
            DualWriteJob::Snapshot(image.clone())
        } else {
            let zk_epoch = self.leadership.zk_controller_epoch;
            match self.writer.delta_writes(delta, image, zk_epoch) {
                Ok(writes) => {
                    let rpcs = if delta.topics_delta().is_some() || delta.cluster_delta().is_some()
                    {
                        self.propagator.rpcs_for_delta(delta, image, zk_epoch)
                    } else {
                        None
                    };
                    DualWriteJob::Delta {
                        target,
                        writes,
                        rpcs,
                    }
                }
                Err(e) => {
                    // A full reconciliation against this image repairs whatever the delta
                    // path could not express.
                    self.last_error = Some(format!("dual-write of a delta: {e}"));
                    DualWriteJob::Snapshot(image.clone())
                }
            }
        };
        self.dual_writes.push_back(job);
        if self.dual_writes.len() > MAX_PENDING_DUAL_WRITES {
            warn!(
                node_id = self.config.node_id,
                pending = self.dual_writes.len(),
                "too many pending dual-writes; folding them into one full reconciliation"
            );
            self.dual_writes.clear();
            self.dual_writes
                .push_back(DualWriteJob::Snapshot(image.clone()));
        }
        self.wake = true;
    }

    fn drive_dual_writes(&mut self, now: Instant) {
        if !self.state.allows_dual_write() || self.in_flight.is_some() || self.retry.is_some() {
            return;
        }
        let Some(job) = self.dual_writes.pop_front() else {
            return;
        };
        match job {
            DualWriteJob::Snapshot(image) => {
                let roots = self.writer.snapshot_roots();
                self.issue(
                    now,
                    Purpose::ReadForSnapshotDualWrite { image },
                    ZkRequest::ReadTrees { roots },
                    Vec::new(),
                );
            }
            DualWriteJob::Delta {
                target,
                writes,
                rpcs,
            } => {
                if target < self.leadership.offset_and_epoch() {
                    self.drive_dual_writes(now);
                    return;
                }
                trace!(node_id = self.config.node_id, counts = ?writes.counts, "dual-writing a delta");
                let new_state = self
                    .leadership
                    .with_kraft_metadata_offset_and_epoch(target.offset, target.epoch);
                let steps = self.fenced_steps(&writes, &new_state);
                let prepared = PreparedWrite {
                    target,
                    wrote_something: !writes.is_empty(),
                    snapshot: false,
                    rpcs: rpcs.map(|r| (false, r)),
                    started: Some(now),
                };
                self.issue_write(now, Purpose::WriteDualWrite(prepared), steps);
            }
        }
    }

    fn prepare_snapshot_dual_write(
        &mut self,
        now: Instant,
        image: MetadataImage,
        tree: &ZkTree,
        started: Instant,
    ) {
        let zk_epoch = self.leadership.zk_controller_epoch;
        let writes = match self.writer.snapshot_writes(&image, tree, zk_epoch) {
            Ok(writes) => writes,
            Err(e) => {
                self.last_error = Some(format!("reconciling a snapshot with ZK: {e}"));
                self.dual_writes.push_front(DualWriteJob::Snapshot(image));
                return;
            }
        };
        let target = OffsetAndEpoch::new(
            image.provenance.last_contained_offset,
            image.provenance.last_contained_epoch,
        );
        let new_state = self
            .leadership
            .with_kraft_metadata_offset_and_epoch(target.offset, target.epoch);
        let steps = self.fenced_steps(&writes, &new_state);
        let rpcs = self.propagator.rpcs_for_image(&image, zk_epoch);
        let prepared = PreparedWrite {
            target,
            wrote_something: !writes.is_empty(),
            snapshot: true,
            rpcs: Some((true, rpcs)),
            started: Some(started),
        };
        self.issue_write(now, Purpose::WriteDualWrite(prepared), steps);
    }
}

fn record(record: MetadataRecord) -> ApiMessageAndVersion {
    ApiMessageAndVersion { record, version: 0 }
}

fn millis(now: Instant, since: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX)
}
