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
//! - this file: the configuration, the driver's fields, its queries, the `handle_*` events
//!   and state changes.
//! - `steps`: the work of each state, run on the poll timer and on every state change
//!   (Kafka's per-state events), and the gates of facts §6.4.
//! - `requests`: issuing ZooKeeper requests and migration batches; the fence of facts §6.7.
//! - `replies`: ZooKeeper replies and failures: recovery, the claim (§6.6), the copy (§6.8),
//!   the reconciliation (§6.10).
//! - `dual_write`: one job per published image while dual-writing; deltas published while a
//!   write is in flight are coalesced into the job queued behind it.
//! - [`io`]: actions, ZooKeeper requests and replies as data.
//! - [`seams`]: the reader, writer and propagator traits the driver calls.
//! - [`status`]: [`MigrationStatus`], [`WaitReason`], [`MigrationManifest`].
//! - `backoff`: the poll interval.

mod backoff;
mod dual_write;
pub mod io;
mod replies;
mod requests;
pub mod seams;
pub mod status;
mod steps;

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
    completion_log_line, zk_migration_state_name,
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

/// Deltas published while a dual-write is in flight are coalesced into the job queued behind
/// it until it holds this many ZooKeeper operations; ZooKeeper then sees one batch (and one
/// `/migration` bump) instead of one per delta, which is how dual-write keeps up with
/// thousands of metadata changes per second.
pub const MAX_COALESCED_OPS: usize = 5_000;

/// Fenced operations sent in one multi-op at most (besides the two guards).
pub const MAX_OPS_PER_MULTI: usize = 1_000;

/// Paths and data of the operations of one multi-op, at most (ZooKeeper refuses a request
/// over `jute.maxbuffer`, 1 MiB by default; an operation larger than this goes alone).
pub const MAX_MULTI_BYTES: usize = 256 * 1024;

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
    /// Dual-write: a write re-sent after its connection was lost was refused as if already
    /// applied (a node it creates exists, `/migration` moved on): `/migration` read back. Our
    /// own `data` at `version` means the first send was applied and only its reply was lost.
    VerifyLostWrite {
        prepared: PreparedWrite<Rpcs>,
        data: Vec<u8>,
        version: i32,
    },
}

#[derive(Debug)]
struct PreparedWrite<Rpcs> {
    target: OffsetAndEpoch,
    wrote_something: bool,
    snapshot: bool,
    /// The broker RPCs to send once the write is in (several when deltas were coalesced).
    rpcs: Vec<(bool, Rpcs)>,
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

impl CopyAppend {
    /// What the copy waits for while this batch commits, in the words of Kafka 3.9's
    /// `FutureUtils.waitWithLogging` calls in `KRaftMigrationDriver.MigrateMetadataEvent`
    /// ("Waiting for …" / "Finished waiting for …").
    fn wait_action(&self) -> String {
        match self.kind {
            AppendKind::Begin => "the metadata layer to begin the migration transaction".to_owned(),
            AppendKind::Data => format!(
                "the metadata layer to commit {} migration records",
                self.records
            ),
            AppendKind::Complete => "the metadata layer to complete the migration".to_owned(),
        }
    }
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
    /// One published delta's writes, or several consecutive ones coalesced while an earlier
    /// write was in flight (their ops in order; `target` is the last one's).
    Delta {
        target: OffsetAndEpoch,
        writes: ZkWriteBatch,
        rpcs: Vec<Rpcs>,
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
    /// The write in flight is a re-send after a retriable failure (its first send may have
    /// been applied with the reply lost).
    resent: bool,
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
    write_timings: VecDeque<WriteTiming>,
}

/// How long one ZooKeeper write took (Kafka's `ZkWriteSnapshotTimeMs` / `ZkWriteDeltaTimeMs`
/// histograms), for [`MigrationDriver::take_write_timings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteTiming {
    /// A full reconciliation, in ms.
    Snapshot(u64),
    /// A delta dual-write that wrote something, in ms.
    Delta(u64),
}

/// Timings kept until taken (older ones are dropped).
const MAX_WRITE_TIMINGS: usize = 1_024;

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
            resent: false,
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
            write_timings: VecDeque::new(),
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

    /// The ZooKeeper write durations since the last call (at most the last 1,024), oldest
    /// first: the runtime feeds them to the `ZkWrite*TimeMs` histograms.
    pub fn take_write_timings(&mut self) -> Vec<WriteTiming> {
        self.write_timings.drain(..).collect()
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
            self.apply_leader();
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
        info!(
            node_id = self.config.node_id,
            "Finished waiting for {}",
            append.wait_action()
        );
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
            self.abort_copy(format!("appending a migration batch failed: {reason}"));
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
            self.abort_copy(format!(
                "the metadata layer did not commit a migration batch within {} ms",
                METADATA_COMMIT_MAX_WAIT.as_millis()
            ));
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

    fn apply_leader(&mut self) {
        self.drop_work();
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
}

fn record(record: MetadataRecord) -> ApiMessageAndVersion {
    ApiMessageAndVersion { record, version: 0 }
}

fn millis(now: Instant, since: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX)
}
