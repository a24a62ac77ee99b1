//! The sans-IO KRaft replica: events in, actions out.
//!
//! [`RaftCore`] holds one replica's consensus state (KIP-595 as in Kafka 3.9). It reads no
//! clock, opens no socket and touches no file. The driver feeds it
//!
//! * requests and responses (`handle_request`, `handle_response`) with the time they arrived,
//! * timer expiry (`handle_timeout`, due at [`RaftCore::poll_timeout`]),
//! * completed fsyncs (`handle_flushed`),
//! * snapshot reads it asked for (`handle_snapshot_read`, answering `Action::ReadSnapshot`),
//! * client appends on the leader ([`RaftCore::append`]), and
//! * the state machine's snapshots (`snapshot_created`, then optionally `delete_log_prefix`),
//!
//! and after each call drains [`RaftCore::poll_action`] **in order**, executing every action
//! before the next one. Two orderings carry the safety of the protocol:
//!
//! 1. `PersistQuorumState` must be durable (tmp file fsynced and renamed) before any later
//!    action runs. A vote is granted only in a `SendResponse` queued after the persist of that
//!    vote, and a new leader persists its election before it appends.
//! 2. A follower's Fetch offset is its log end offset, which the core only sends once the
//!    driver reported (via `handle_flushed`) that everything below it is fsynced. The leader
//!    counts that offset toward the high watermark, so a voter never acknowledges data it
//!    could lose in a crash. The leader counts its own log only up to its flushed offset.
//!
//! Memory: the core mirrors the log from its start offset (the metadata log is bounded by
//! snapshots and retention); `delete_log_prefix` drops what a snapshot covers.
//!
//! Time must be monotonic across calls. Randomness (election jitter, backoff, choice of
//! bootstrap voter) comes from the seeded `StdRng` given to [`RaftCore::new`].

mod accumulator;
mod error;
mod leader;
mod log;
mod timer;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::leader_change_message::Voter;
use kafka_protocol::messages::{BrokerId, LeaderChangeMessage};
use kafka_protocol::protocol::Encodable;
use krust_log::batch::{BatchReader, RecordBatch, RecordBatchBuilder};
use rand::Rng;
use rand::rngs::StdRng;
use tracing::{debug, info, trace, warn};

pub use accumulator::AppendError;
pub use error::RequestError;
pub use log::{LogShapeError, RecoveredLog};
pub use timer::Timer;
pub use wire::{
    INVALID_VOTER_KEY, METADATA_PARTITION, METADATA_TOPIC_ID, METADATA_TOPIC_NAME, RaftRequest,
    RaftResponse, adapt_fetch_request, adapt_fetch_response,
};

use crate::config::{ELECTION_BACKOFF_BASE_MS, OBSERVER_SESSION_TIMEOUT_MS, RaftConfig};
use crate::quorum_state::QuorumStateData;
use crate::types::{LeaderEpoch, LogOffset, NodeId, OffsetAndEpoch, RequestId};
use accumulator::Accumulator;
use leader::{LeaderState, ParkedFetch, ReplicaProgress};
use log::RaftLog;
use wire::{FetchAnswer, LeaderInfo, ReplicaRow};

/// Control record type of `LeaderChangeMessage` (key = version 0 + type 2).
pub const LEADER_CHANGE_CONTROL_TYPE: i16 = 2;

/// Something the driver must do. Execute them in the order [`RaftCore::poll_action`] returns them.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Action {
    /// Write `quorum-state` (tmp file, fsync, rename, fsync dir) **before running any later
    /// action**: a vote is durable before the VoteResponse that grants it is sent.
    PersistQuorumState(QuorumStateData),
    /// Append these batches (already offset, epoch-stamped and CRC'd) at the log end. No fsync
    /// is implied; a `Flush` follows.
    Append {
        /// Batches in offset order; the first starts at the current log end.
        batches: Vec<RecordBatch>,
    },
    /// Remove every batch at or after `end_offset` (divergence with the leader). The truncation
    /// must be durable before the next `Flush` is reported done.
    Truncate {
        /// New log end offset.
        end_offset: LogOffset,
    },
    /// fsync the log, then call [`RaftCore::handle_flushed`] with `end_offset`. Required for
    /// correctness: a voter acknowledges (via its next Fetch offset) only flushed data.
    Flush {
        /// Log end offset at the time of the request.
        end_offset: LogOffset,
    },
    /// Send a request; deliver its response with [`RaftCore::handle_response`] and the same id.
    SendRequest {
        /// Destination.
        to: NodeId,
        /// Correlates the response.
        id: RequestId,
        /// The request.
        request: RaftRequest,
    },
    /// Answer the request `id` that `to` sent.
    SendResponse {
        /// Destination.
        to: NodeId,
        /// The id given to `handle_request`.
        id: RequestId,
        /// The response.
        response: RaftResponse,
    },
    /// The high watermark moved forward to this (exclusive) offset.
    HighWatermarkAdvanced(LogOffset),
    /// Committed batches, in offset order, each handed up exactly once per process lifetime
    /// (Kafka's `Listener.handleCommit`). After a restart delivery starts over at the log start.
    Commit {
        /// Batches entirely below the high watermark.
        batches: Vec<RecordBatch>,
    },
    /// The known leader changed (`Listener.handleLeaderChange`). When this replica becomes
    /// leader, the action comes after the `Commit` of its epoch's first batch, i.e. after every
    /// earlier committed batch was handed up.
    LeaderChange {
        /// The leader, if known.
        leader: Option<NodeId>,
        /// Its epoch.
        epoch: LeaderEpoch,
    },
    /// Leader: read at most `max_bytes` of snapshot `snapshot_id` (its `.checkpoint` file)
    /// from byte `position`, then call [`RaftCore::handle_snapshot_read`] with `to` and `id`.
    /// Never serve the bootstrap snapshot `(0, 0)` (the core already refuses it).
    ReadSnapshot {
        /// Who asked.
        to: NodeId,
        /// Their request.
        id: RequestId,
        /// Which snapshot.
        snapshot_id: OffsetAndEpoch,
        /// Byte position in the file.
        position: i64,
        /// Most bytes to return.
        max_bytes: usize,
    },
    /// Follower: write `bytes` at byte `position` of the partial download of `snapshot_id`
    /// (`<id>-<random>.checkpoint.part`; position 0 starts a new file).
    WriteSnapshotChunk {
        /// Which snapshot.
        snapshot_id: OffsetAndEpoch,
        /// Byte position of `bytes` in the file.
        position: i64,
        /// The bytes (not batch-aligned).
        bytes: Bytes,
    },
    /// Follower: the download is complete. fsync the partial file and rename it to
    /// `<id>.checkpoint`, then replace the log by the snapshot (delete every segment; log start =
    /// log end = the snapshot's end offset) and make that durable before running later actions.
    /// Then hand the snapshot to the listener (Kafka's `handleLoadSnapshot`); `Commit`s continue
    /// after its end offset.
    InstallSnapshot {
        /// The snapshot now at the log start.
        snapshot_id: OffsetAndEpoch,
    },
    /// Delete every segment (batch) below `log_start_offset` and record the new log start
    /// (`log-start-offset-checkpoint`). A snapshot ending at that offset exists.
    DeleteLogPrefix {
        /// New first offset of the log.
        log_start_offset: LogOffset,
    },
    /// Follower: a download was abandoned (the leader no longer has it); delete its partial file.
    AbandonSnapshot {
        /// Which snapshot.
        snapshot_id: OffsetAndEpoch,
    },
    /// An invariant that outside data should never break did break (e.g. the leader asks to
    /// truncate below the committed offset). The driver must stop this replica.
    Fatal(FatalError),
}

/// Conditions under which the replica must stop rather than continue (Kafka throws).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FatalError {
    /// A leader asked us to truncate committed data. Either the quorum lost data (more than a
    /// minority lost its disk) or a peer is faulty; needs an operator.
    #[error(
        "leader asked to truncate to offset {diverging_end} below the high watermark {high_watermark}"
    )]
    TruncateBelowHighWatermark {
        /// Offset the leader named.
        diverging_end: LogOffset,
        /// Our committed offset.
        high_watermark: LogOffset,
    },
}

/// What the driver read for an `Action::ReadSnapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotRead {
    /// Bytes from the requested position (at most `max_bytes`), and the file's total size.
    Chunk {
        /// Total size of the snapshot file in bytes.
        size: i64,
        /// The slice read.
        bytes: Bytes,
    },
    /// No such snapshot file (deleted by retention, or never existed).
    NotFound,
}

/// Why [`RaftCore::snapshot_created`] refused a snapshot id (Kafka's `createSnapshot` checks).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotIdError {
    /// A snapshot may only cover committed data.
    #[error("snapshot {snapshot_id} ends beyond the high watermark {high_watermark}")]
    BeyondHighWatermark {
        /// The id.
        snapshot_id: OffsetAndEpoch,
        /// Our HW.
        high_watermark: LogOffset,
    },
    /// Only the latest registered snapshot (covering committed data) may become the log start.
    #[error("snapshot {snapshot_id} is not the latest registered snapshot")]
    NotLatestSnapshot {
        /// The id.
        snapshot_id: OffsetAndEpoch,
    },
    /// The log start may only move to a snapshot at or below the latest registered one.
    #[error("snapshot {snapshot_id} ends after the latest registered snapshot {latest:?}")]
    AfterLatestSnapshot {
        /// The id.
        snapshot_id: OffsetAndEpoch,
        /// The latest registered snapshot, if any.
        latest: Option<OffsetAndEpoch>,
    },
    /// The record before the end offset is not of the snapshot's epoch.
    #[error("snapshot {snapshot_id} does not match the log's epoch at that offset")]
    EpochMismatch {
        /// The id.
        snapshot_id: OffsetAndEpoch,
    },
}

/// Why the core could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InitError {
    /// The recovered log is not a contiguous run of batches.
    #[error("recovered log is malformed: {0}")]
    Log(#[from] LogShapeError),
    /// `quorum-state` says we voted in an epoch but we have no identity to have voted with.
    #[error("quorum-state says node {voted} voted, but this node is {me}")]
    ForeignVote {
        /// Voted id found.
        voted: NodeId,
        /// Our id.
        me: NodeId,
    },
}

/// Replica roles (Kafka 3.9 states; "voted" is Unattached with a vote).
#[derive(Clone, Debug)]
enum Role {
    Unattached {
        voted: Option<NodeId>,
        leader_hint: Option<NodeId>,
    },
    Follower(FollowerState),
    Candidate {
        granted: BTreeSet<NodeId>,
        rejected: BTreeSet<NodeId>,
        retries: u32,
    },
    Leader(Box<LeaderState>),
    Resigned {
        unacked: BTreeSet<NodeId>,
        preferred: Vec<NodeId>,
    },
}

#[derive(Clone, Debug)]
struct FollowerState {
    leader: NodeId,
    /// The outstanding Fetch, if any (at most one).
    fetch_in_flight: Option<RequestId>,
    /// The snapshot being downloaded instead of fetching, and the next byte wanted.
    download: Option<(OffsetAndEpoch, i64)>,
    /// Set after a fatal condition: this replica stops fetching.
    halted: bool,
}

/// Role names as the `current-state` metric reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleKind {
    /// No leader known, no vote cast.
    Unattached,
    /// Unattached with a vote cast in this epoch.
    Voted,
    /// Voter following a leader.
    Follower,
    /// Non-voter replicating from the leader (or looking for it).
    Observer,
    /// Asking for votes.
    Candidate,
    /// Leader of the epoch.
    Leader,
    /// Former leader of the epoch, stepping down (reported as "unattached" by Kafka 3.9).
    Resigned,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestKind {
    Vote,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Fetch,
    FetchSnapshot,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    to: NodeId,
    kind: RequestKind,
    deadline: Instant,
}

/// The gauges of Kafka's `raft-metrics` group (§1.12) that the core knows; read with
/// [`RaftCore::metrics`]. Rates and latencies are the driver's to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftMetrics {
    /// `current-state`: `leader`, `candidate`, `voted`, `follower`, `observer` or `unattached`
    /// (Kafka 3.9 reports Resigned as `unattached`).
    pub current_state: &'static str,
    /// `current-leader`: the leader's id, or -1.
    pub current_leader: i32,
    /// `current-vote`: the candidate voted for in this epoch (this replica itself while
    /// candidate or leader, as in Kafka 3.9), or -1.
    pub current_vote: i32,
    /// `current-epoch`.
    pub current_epoch: i32,
    /// `high-watermark`.
    pub high_watermark: i64,
    /// `log-end-offset`.
    pub log_end_offset: i64,
    /// `log-end-epoch`.
    pub log_end_epoch: i32,
}

/// One KIP-595 replica (voter or observer). See the module docs for the calling contract.
#[derive(Debug)]
pub struct RaftCore {
    config: RaftConfig,
    rng: StdRng,
    epoch: LeaderEpoch,
    role: Role,
    log: RaftLog,
    /// Node-wide HW (what listeners have seen); monotonic.
    high_watermark: LogOffset,
    /// Everything below this offset is fsynced.
    flushed_end: LogOffset,
    /// Flushes requested and not yet reported, with their offset clamped by later truncations.
    pending_flushes: VecDeque<LogOffset>,
    /// Next offset to hand to the listener.
    delivered_end: LogOffset,
    timers: Timers,
    inflight: BTreeMap<RequestId, InFlight>,
    next_request_id: u64,
    actions: VecDeque<Action>,
    last_leader_change: Option<(Option<NodeId>, LeaderEpoch)>,
    shutting_down: bool,
    /// `(instant, unix ms)` pair from the driver, for DescribeQuorum timestamps and batch times.
    wall_clock: Option<(Instant, i64)>,
}

use timer::Timers;

impl RaftCore {
    /// Starts a replica from its persisted election and recovered log (Kafka's
    /// `QuorumState.initialize`, §1.6 of our facts). `persisted = None` means no `quorum-state`
    /// file: epoch 0, no leader, no vote.
    ///
    /// # Errors
    /// [`InitError`] if the log is malformed or the quorum-state names a vote that is not ours
    /// while we are the candidate.
    pub fn new(
        config: RaftConfig,
        persisted: Option<QuorumStateData>,
        recovered: RecoveredLog,
        rng: StdRng,
        now: Instant,
    ) -> Result<Self, InitError> {
        let log = RaftLog::new(recovered)?;
        let start = log.start_offset();
        let mut rng = rng;
        // Request ids start at a random point so a restarted replica never reuses the ids of its
        // previous life (a late answer to an old request is then simply unknown).
        let first_request_id = u64::from(rng.r#gen::<u32>()) << 32;
        let mut core = Self {
            config,
            rng,
            epoch: LeaderEpoch(0),
            role: Role::Unattached {
                voted: None,
                leader_hint: None,
            },
            log,
            high_watermark: start,
            // Everything recovered from disk is durable.
            flushed_end: LogOffset(0),
            pending_flushes: VecDeque::new(),
            delivered_end: start,
            timers: Timers::default(),
            inflight: BTreeMap::new(),
            next_request_id: first_request_id,
            actions: VecDeque::new(),
            last_leader_change: None,
            shutting_down: false,
            wall_clock: None,
        };
        core.flushed_end = core.log.end_offset();
        let state = persisted.unwrap_or_else(QuorumStateData::empty);
        let me = core.config.node_id;
        let log_epoch = core.log.last_epoch();
        core.epoch = state.leader_epoch;
        if state.leader_epoch < log_epoch {
            warn!(
                node = me.0,
                persisted = state.leader_epoch.0,
                log = log_epoch.0,
                "log epoch is ahead of quorum-state"
            );
            core.become_unattached(now, log_epoch, None);
        } else if state.leader_id == Some(me) && core.config.is_voter() {
            // Restarted leader: never reuse (offset, epoch) pairs, win a new election first.
            let unacked = core.other_voters().collect();
            core.role = Role::Resigned {
                unacked,
                preferred: Vec::new(),
            };
            core.reset_election_timer(now);
            core.send_end_quorum_epochs(now);
        } else if state.voted_id == Some(me) && core.config.is_voter() {
            core.role = Role::Candidate {
                granted: BTreeSet::from([me]),
                rejected: BTreeSet::new(),
                retries: 1,
            };
            core.reset_election_timer(now);
            core.send_vote_requests(now);
        } else if let Some(voted) = state.voted_id {
            if voted == me {
                return Err(InitError::ForeignVote { voted, me });
            }
            core.role = Role::Unattached {
                voted: Some(voted),
                leader_hint: None,
            };
            core.reset_election_timer(now);
        } else if let Some(leader) = state.leader_id.filter(|l| *l != me) {
            core.become_follower(now, state.leader_epoch, leader);
        } else {
            core.role = Role::Unattached {
                voted: None,
                leader_hint: None,
            };
            core.reset_election_timer(now);
            core.maybe_send_discovery_fetch(now);
        }
        core.maybe_elect_sole_voter(now);
        Ok(core)
    }

    // -----------------------------------------------------------------------------------------
    // Public inputs
    // -----------------------------------------------------------------------------------------

    /// Handles a request from `from`; the answer (possibly later, for a parked Fetch) is a
    /// `SendResponse` with the same `id`.
    pub fn handle_request(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: RaftRequest,
    ) {
        trace!(
            node = self.config.node_id.0,
            from = from.0,
            ?request,
            "request"
        );
        match request {
            RaftRequest::Vote(r) => self.handle_vote_request(now, from, id, &r),
            RaftRequest::BeginQuorumEpoch(r) => self.handle_begin_quorum_epoch(now, from, id, &r),
            RaftRequest::EndQuorumEpoch(r) => self.handle_end_quorum_epoch(now, from, id, &r),
            RaftRequest::Fetch(r) => self.handle_fetch_request(now, from, id, &r),
            RaftRequest::DescribeQuorum(r) => self.handle_describe_quorum(now, from, id, &r),
            RaftRequest::FetchSnapshot(r) => self.handle_fetch_snapshot_request(now, from, id, &r),
        }
    }

    /// Handles the response to request `id`. Responses to unknown ids (answered already,
    /// timed out, or sent in an earlier role) are ignored.
    pub fn handle_response(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        response: RaftResponse,
    ) {
        let Some(inflight) = self.inflight.remove(&id) else {
            trace!(
                node = self.config.node_id.0,
                id = id.0,
                "response to unknown request ignored"
            );
            return;
        };
        if inflight.to != from {
            warn!(
                node = self.config.node_id.0,
                expected = inflight.to.0,
                from = from.0,
                "response from the wrong node"
            );
            return;
        }
        match (inflight.kind, response) {
            (RequestKind::Vote, RaftResponse::Vote(r)) => self.handle_vote_response(now, from, &r),
            (RequestKind::BeginQuorumEpoch, RaftResponse::BeginQuorumEpoch(r)) => {
                if let Some((_, Some(info))) = wire::parse_begin_quorum_epoch_response(&r) {
                    self.handle_common_response(now, info);
                }
            }
            (RequestKind::EndQuorumEpoch, RaftResponse::EndQuorumEpoch(r)) => {
                if let Some((top, info)) = wire::parse_end_quorum_epoch_response(&r) {
                    if let Some(info) = info {
                        if self.handle_common_response(now, info) == Handled::No
                            && info.error.is_none()
                            && let Role::Resigned { unacked, .. } = &mut self.role
                        {
                            unacked.remove(&from);
                        }
                    } else {
                        debug!(node = self.config.node_id.0, error = ?top, "EndQuorumEpoch failed");
                    }
                }
            }
            (RequestKind::FetchSnapshot, RaftResponse::FetchSnapshot(r)) => {
                self.handle_fetch_snapshot_response(now, from, id, &r);
            }
            (RequestKind::Fetch, RaftResponse::Fetch(r)) => {
                self.handle_fetch_response(now, from, id, &r)
            }
            (kind, other) => {
                warn!(node = self.config.node_id.0, ?kind, response = ?other, "response type does not match request");
            }
        }
    }

    /// Tells the core that the fsync requested by the oldest outstanding `Action::Flush` is
    /// done. Call it exactly once per `Flush`, in the order the flushes were requested, with
    /// that action's `end_offset`. (A truncation issued after the flush lowers what it covers.)
    pub fn handle_flushed(&mut self, now: Instant, end_offset: LogOffset) {
        let Some(covered) = self.pending_flushes.pop_front() else {
            warn!(
                node = self.config.node_id.0,
                end_offset = end_offset.0,
                "flush completion without a pending flush"
            );
            return;
        };
        let durable = covered.min(end_offset).min(self.log.end_offset());
        self.flushed_end = self.flushed_end.max(durable);
        match &self.role {
            Role::Leader(_) => self.update_leader_own_progress(now),
            Role::Follower(_) => self.maybe_send_fetch(now),
            _ => {}
        }
    }

    /// Fires every timer due at `now`, and times out requests past `request.timeout.ms`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for timer in self.timers.take_expired(now) {
            self.on_timer(now, timer);
        }
        self.expire_requests(now);
        self.expire_parked_fetches(now);
    }

    /// Appends client records on the leader for `epoch` (Kafka's `prepareAppend` +
    /// `schedulePreparedAppend`). Returns the offset of the last record; it is committed once
    /// an `Action::HighWatermarkAdvanced` passes it.
    ///
    /// # Errors
    /// [`AppendError`] if not the leader of `epoch`, or the records do not fit a batch or the buffer.
    pub fn append(
        &mut self,
        now: Instant,
        epoch: LeaderEpoch,
        records: Vec<Bytes>,
    ) -> Result<LogOffset, AppendError> {
        let current = self.epoch;
        let Role::Leader(leader) = &mut self.role else {
            return Err(AppendError::NotLeader {
                requested: epoch,
                current,
            });
        };
        if epoch < current {
            return Err(AppendError::NotLeader {
                requested: epoch,
                current,
            });
        }
        if epoch > current {
            return Err(AppendError::FutureEpoch {
                requested: epoch,
                current,
            });
        }
        let last = leader.accumulator.append(now, records)?;
        if self.config.append_linger_ms == 0 || leader.accumulator.has_full_batches() {
            let force = self.config.append_linger_ms == 0;
            self.drain_accumulator(now, force);
        }
        self.arm_linger_timer();
        Ok(last)
    }

    /// Leader: writes the records appended so far now, without waiting for
    /// `append.linger.ms` (a no-op on other roles or with nothing pending).
    pub fn flush_appends(&mut self, now: Instant) {
        if matches!(self.role, Role::Leader(_)) {
            self.drain_accumulator(now, true);
            self.arm_linger_timer();
        }
    }

    /// Leader: step down now (Kafka's `resign(epoch)`); ignored if `epoch` is not our current
    /// leader epoch.
    pub fn resign(&mut self, now: Instant, epoch: LeaderEpoch) {
        if epoch == self.epoch && matches!(self.role, Role::Leader(_)) {
            self.become_resigned(now);
        }
    }

    /// Graceful shutdown: a leader resigns and tells the voters (EndQuorumEpoch with its
    /// preferred successors); no node stands for election afterwards.
    pub fn begin_shutdown(&mut self, now: Instant) {
        self.shutting_down = true;
        if matches!(self.role, Role::Leader(_)) {
            self.become_resigned(now);
        }
        self.timers.stop(Timer::Election);
        self.timers.stop(Timer::ElectionBackoff);
    }

    /// The driver could not deliver request `id` or got no answer on its connection (refused,
    /// reset, closed). Kafka counts this as a failed request and retries after
    /// `retry.backoff.ms`; here the request's deadline moves to `now + retry.backoff.ms`, so the
    /// usual timeout handling resends it then instead of after the full request timeout.
    pub fn handle_send_failed(&mut self, now: Instant, id: RequestId) {
        let retry_at = now + Duration::from_millis(self.config.retry_backoff_ms);
        if let Some(inflight) = self.inflight.get_mut(&id) {
            inflight.deadline = inflight.deadline.min(retry_at);
        }
    }

    /// Gives the core the wall-clock time matching `now`, for DescribeQuorum timestamps and
    /// batch timestamps. Optional; without it both are relative to an arbitrary origin.
    pub fn set_wall_clock(&mut self, now: Instant, unix_ms: i64) {
        self.wall_clock = Some((now, unix_ms));
    }

    // -----------------------------------------------------------------------------------------
    // Public outputs and getters
    // -----------------------------------------------------------------------------------------

    /// When `handle_timeout` is next due. May change after any `handle_*` call.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let inflight = self.inflight.values().map(|f| f.deadline).min();
        let parked = match &self.role {
            Role::Leader(l) => l.parked.iter().map(|p| p.deadline).min(),
            _ => None,
        };
        [self.timers.next(), inflight, parked]
            .into_iter()
            .flatten()
            .min()
    }

    /// Next action, in order. A `PersistQuorumState` must be durable before any later action runs.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The current quorum epoch.
    #[must_use]
    pub fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }

    /// The current role.
    #[must_use]
    pub fn role(&self) -> RoleKind {
        match &self.role {
            Role::Unattached { voted: Some(_), .. } => RoleKind::Voted,
            Role::Unattached { .. } => RoleKind::Unattached,
            Role::Follower(_) if !self.config.is_voter() => RoleKind::Observer,
            Role::Follower(_) => RoleKind::Follower,
            Role::Candidate { .. } => RoleKind::Candidate,
            Role::Leader(_) => RoleKind::Leader,
            Role::Resigned { .. } => RoleKind::Resigned,
        }
    }

    /// The `raft-metrics` gauges.
    #[must_use]
    pub fn metrics(&self) -> RaftMetrics {
        let current_state = match self.role() {
            RoleKind::Leader => "leader",
            RoleKind::Candidate => "candidate",
            RoleKind::Voted => "voted",
            RoleKind::Follower => "follower",
            RoleKind::Observer => "observer",
            RoleKind::Unattached | RoleKind::Resigned => "unattached",
        };
        let end = self.log.end_offset_and_epoch();
        RaftMetrics {
            current_state,
            current_leader: self.leader().map_or(-1, |n| n.0),
            // Kafka 3.9 reports its own id while leading, as while a candidate.
            current_vote: match self.role() {
                RoleKind::Leader => self.config.node_id.0,
                _ => self.voted_for().map_or(-1, |n| n.0),
            },
            current_epoch: self.epoch.0,
            high_watermark: self.high_watermark.0,
            log_end_offset: end.offset.0,
            log_end_epoch: end.epoch.0,
        }
    }

    /// The leader this replica knows of in the current epoch.
    #[must_use]
    pub fn leader(&self) -> Option<NodeId> {
        match &self.role {
            Role::Leader(_) | Role::Resigned { .. } => Some(self.config.node_id),
            Role::Follower(f) => Some(f.leader),
            Role::Unattached { leader_hint, .. } => *leader_hint,
            Role::Candidate { .. } => None,
        }
    }

    /// The high watermark this replica knows (exclusive end of committed data).
    #[must_use]
    pub fn high_watermark(&self) -> LogOffset {
        self.high_watermark
    }

    /// Log end offset and the epoch of the last batch.
    #[must_use]
    pub fn log_end(&self) -> OffsetAndEpoch {
        self.log.end_offset_and_epoch()
    }

    /// Offset below which the log is fsynced.
    #[must_use]
    pub fn flushed_end(&self) -> LogOffset {
        self.flushed_end
    }

    /// The batches of the in-memory log mirror.
    #[must_use]
    pub fn log_batches(&self) -> &[RecordBatch] {
        self.log.batches()
    }

    /// The vote cast in the current epoch, if any (`current-vote` metric).
    #[must_use]
    pub fn voted_for(&self) -> Option<NodeId> {
        match &self.role {
            Role::Unattached { voted, .. } => *voted,
            Role::Candidate { .. } => Some(self.config.node_id),
            _ => None,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RaftConfig {
        &self.config
    }

    /// The persisted form of the current election (what the last `PersistQuorumState` held).
    #[must_use]
    pub fn quorum_state(&self) -> QuorumStateData {
        let (leader_id, voted_id) = match &self.role {
            Role::Unattached { voted, leader_hint } => (*leader_hint, *voted),
            Role::Follower(f) => (Some(f.leader), None),
            Role::Candidate { .. } => (None, Some(self.config.node_id)),
            Role::Leader(_) | Role::Resigned { .. } => (Some(self.config.node_id), None),
        };
        QuorumStateData {
            leader_epoch: self.epoch,
            leader_id,
            voted_id,
            voted_directory_id: uuid::Uuid::nil(),
            current_voters: Some(self.config.voters.clone()),
            data_version: 0,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Transitions
    // -----------------------------------------------------------------------------------------

    fn other_voters(&self) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.config.node_id;
        self.config.voters.iter().copied().filter(move |v| *v != me)
    }

    fn persist(&mut self) {
        let state = self.quorum_state();
        self.actions.push_back(Action::PersistQuorumState(state));
    }

    /// Tells the listener about a new (leader, epoch). A new leader announces itself only once
    /// everything committed before its epoch has been handed up (Kafka fires `handleLeaderChange`
    /// for the local leader after the listener reached the epoch start), so a state machine that
    /// sees "I lead" has already replayed the whole committed log.
    fn emit_leader_change(&mut self) {
        if let Role::Leader(leader) = &self.role
            && self.delivered_end <= leader.epoch_start_offset
        {
            return;
        }
        let current = (self.leader(), self.epoch);
        if self.last_leader_change != Some(current) {
            self.last_leader_change = Some(current);
            self.actions.push_back(Action::LeaderChange {
                leader: current.0,
                epoch: current.1,
            });
        }
    }

    /// Leaves the current role: parked fetches are answered, buffered appends dropped,
    /// outstanding requests forgotten, role timers stopped.
    fn leave_role(&mut self) {
        let old = std::mem::replace(
            &mut self.role,
            Role::Unattached {
                voted: None,
                leader_hint: None,
            },
        );
        if let Role::Leader(leader) = old {
            // Parked fetches learn that this replica no longer leads (`resign` completes the purgatory).
            let error = RequestError::NotLeader { leader: None };
            for parked in leader.parked {
                self.reject(parked.from, parked.id, Rpc::Fetch, &error);
            }
        }
        self.inflight.clear();
        self.timers.clear();
    }

    fn random_election_timeout(&mut self) -> Duration {
        let t = self.config.election_timeout_ms;
        let jitter = if t == 0 { 0 } else { self.rng.gen_range(0..t) };
        Duration::from_millis(t + jitter)
    }

    fn reset_election_timer(&mut self, now: Instant) {
        if self.config.is_voter() && !self.shutting_down {
            let timeout = self.random_election_timeout();
            self.timers.set(Timer::Election, now + timeout);
        }
    }

    fn become_unattached(&mut self, now: Instant, epoch: LeaderEpoch, leader_hint: Option<NodeId>) {
        assert!(
            epoch >= self.epoch,
            "epoch would go backwards: {} -> {}",
            self.epoch,
            epoch
        );
        // Keep the remaining election time when already waiting for an election.
        let keep = matches!(self.role, Role::Unattached { .. } | Role::Candidate { .. })
            .then(|| self.timers.get(Timer::Election))
            .flatten();
        info!(
            node = self.config.node_id.0,
            from = self.epoch.0,
            to = epoch.0,
            "becoming unattached"
        );
        self.leave_role();
        self.epoch = epoch;
        self.role = Role::Unattached {
            voted: None,
            leader_hint,
        };
        self.persist();
        match keep {
            Some(at) if self.config.is_voter() && !self.shutting_down => {
                self.timers.set(Timer::Election, at)
            }
            _ => self.reset_election_timer(now),
        }
        self.emit_leader_change();
        self.maybe_send_discovery_fetch(now);
    }

    fn become_voted(&mut self, now: Instant, candidate: NodeId) {
        let Role::Unattached { voted, .. } = &mut self.role else {
            unreachable!("only an unattached replica votes")
        };
        assert!(voted.is_none(), "one vote per epoch");
        *voted = Some(candidate);
        info!(
            node = self.config.node_id.0,
            epoch = self.epoch.0,
            candidate = candidate.0,
            "voting"
        );
        // fsync point: the vote must be durable before the granting response is sent. The
        // persist is queued before the response, and the driver runs actions in order.
        self.persist();
        self.reset_election_timer(now);
    }

    fn become_follower(&mut self, now: Instant, epoch: LeaderEpoch, leader: NodeId) {
        assert!(
            epoch >= self.epoch,
            "epoch would go backwards: {} -> {}",
            self.epoch,
            epoch
        );
        assert!(
            leader != self.config.node_id,
            "a replica never follows itself"
        );
        if epoch == self.epoch {
            assert!(
                !matches!(self.role, Role::Leader(_)),
                "a leader never follows in its own epoch"
            );
        }
        info!(
            node = self.config.node_id.0,
            epoch = epoch.0,
            leader = leader.0,
            "becoming follower"
        );
        self.leave_role();
        self.epoch = epoch;
        self.role = Role::Follower(FollowerState {
            leader,
            fetch_in_flight: None,
            download: None,
            halted: false,
        });
        self.persist();
        self.timers.set(
            Timer::FetchTimeout,
            now + Duration::from_millis(self.config.fetch_timeout_ms),
        );
        self.emit_leader_change();
        self.maybe_send_fetch(now);
    }

    fn become_candidate(&mut self, now: Instant) {
        assert!(self.config.is_voter(), "only voters stand for election");
        let retries = match &self.role {
            Role::Candidate { retries, .. } => retries + 1,
            _ => 1,
        };
        let epoch = self.epoch.next();
        info!(
            node = self.config.node_id.0,
            epoch = epoch.0,
            retries,
            "becoming candidate"
        );
        self.leave_role();
        self.epoch = epoch;
        self.role = Role::Candidate {
            granted: BTreeSet::from([self.config.node_id]),
            rejected: BTreeSet::new(),
            retries,
        };
        // fsync point: the self-vote is durable before any VoteRequest leaves.
        self.persist();
        self.reset_election_timer(now);
        self.emit_leader_change();
        self.send_vote_requests(now);
        self.maybe_become_leader(now);
    }

    fn maybe_become_leader(&mut self, now: Instant) {
        let Role::Candidate { granted, .. } = &self.role else {
            return;
        };
        if granted.len() < self.config.majority() {
            return;
        }
        let granting = granted.clone();
        assert!(
            granting.len() >= self.config.majority(),
            "leader without a majority"
        );
        let me = self.config.node_id;
        info!(node = me.0, epoch = self.epoch.0, "becoming leader");
        self.leave_role();
        let start = self.log.end_offset();
        let mut voters: BTreeMap<NodeId, ReplicaProgress> = self
            .config
            .voters
            .iter()
            .map(|v| (*v, ReplicaProgress::default()))
            .collect();
        if let Some(own) = voters.get_mut(&me) {
            own.end_offset = Some(self.flushed_end);
        }
        let accumulator = Accumulator::new(
            self.epoch,
            start,
            Duration::from_millis(self.config.append_linger_ms),
            self.config.max_batch_size_bytes,
        );
        self.role = Role::Leader(Box::new(LeaderState {
            epoch_start_offset: start,
            high_watermark: None,
            voters,
            observers: BTreeMap::new(),
            fetched_in_window: BTreeSet::new(),
            parked: Vec::new(),
            accumulator,
        }));
        // fsync point: the election is durable before the leader appends in its epoch.
        self.persist();
        self.emit_leader_change();
        self.append_leader_change_batch(now, &granting);
        if self.config.voters.len() > 1 {
            self.timers
                .set(Timer::CheckQuorum, now + self.config.check_quorum_timeout());
        }
        self.send_begin_quorum_epochs(now, true);
    }

    fn become_resigned(&mut self, now: Instant) {
        let preferred = match &self.role {
            Role::Leader(l) => l.preferred_successors(self.config.node_id),
            _ => self.other_voters().collect(),
        };
        info!(
            node = self.config.node_id.0,
            epoch = self.epoch.0,
            ?preferred,
            "resigning"
        );
        self.leave_role();
        let unacked = self.other_voters().collect();
        // Resigned is soft state: not persisted (a restart comes back Resigned anyway).
        self.role = Role::Resigned { unacked, preferred };
        self.reset_election_timer(now);
        self.send_end_quorum_epochs(now);
    }

    fn maybe_elect_sole_voter(&mut self, now: Instant) {
        let sole = self.config.voters == [self.config.node_id];
        if sole
            && !self.shutting_down
            && matches!(self.role, Role::Unattached { .. } | Role::Candidate { .. })
        {
            self.become_candidate(now);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Timers
    // -----------------------------------------------------------------------------------------

    fn on_timer(&mut self, now: Instant, timer: Timer) {
        trace!(node = self.config.node_id.0, ?timer, "timer");
        match timer {
            Timer::Election => match &self.role {
                Role::Candidate { retries, .. } => {
                    // Lost by timeout: back off, then stand again.
                    let backoff = self.election_backoff(*retries);
                    self.timers.set(Timer::ElectionBackoff, now + backoff);
                }
                Role::Unattached { .. } | Role::Resigned { .. }
                    if self.config.is_voter() && !self.shutting_down =>
                {
                    self.become_candidate(now);
                }
                _ => {}
            },
            Timer::ElectionBackoff => {
                if matches!(self.role, Role::Candidate { .. }) && !self.shutting_down {
                    self.become_candidate(now);
                }
            }
            Timer::FetchTimeout => {
                if let Role::Follower(_) = &self.role {
                    if self.config.is_voter() && !self.shutting_down {
                        self.become_candidate(now);
                    } else {
                        // Observer: the leader may be gone; ask a random voter.
                        if let Role::Follower(f) = &mut self.role {
                            f.fetch_in_flight = None;
                        }
                        self.inflight.retain(|_, r| r.kind != RequestKind::Fetch);
                        self.timers.set(
                            Timer::FetchTimeout,
                            now + Duration::from_millis(self.config.fetch_timeout_ms),
                        );
                        let target = self.random_voter();
                        self.send_fetch_to(now, target);
                    }
                } else if matches!(self.role, Role::Unattached { .. }) {
                    self.maybe_send_discovery_fetch(now);
                }
            }
            Timer::FetchRetry => self.maybe_send_fetch(now),
            Timer::CheckQuorum => {
                if matches!(self.role, Role::Leader(_)) {
                    warn!(
                        node = self.config.node_id.0,
                        epoch = self.epoch.0,
                        "majority stopped fetching; resigning"
                    );
                    self.become_resigned(now);
                }
            }
            Timer::BeginQuorumEpoch => self.send_begin_quorum_epochs(now, false),
            Timer::AppendLinger => {
                self.drain_accumulator(now, false);
                self.arm_linger_timer();
            }
        }
    }

    /// `min(100 ms × U[0, 2^(min(20, retries - 1) + 1)), election.backoff.max.ms)`.
    fn election_backoff(&mut self, retries: u32) -> Duration {
        let exponent = retries.saturating_sub(1).min(20) + 1;
        let slots: u64 = self.rng.gen_range(0..(1u64 << exponent));
        Duration::from_millis(
            (ELECTION_BACKOFF_BASE_MS * slots).min(self.config.election_backoff_max_ms),
        )
    }

    fn expire_requests(&mut self, now: Instant) {
        let expired: Vec<(RequestId, InFlight)> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(id, f)| (*id, *f))
            .collect();
        for (id, request) in expired {
            self.inflight.remove(&id);
            debug!(node = self.config.node_id.0, to = request.to.0, kind = ?request.kind, "request timed out");
            match request.kind {
                RequestKind::Vote => {
                    if let Role::Candidate {
                        granted, rejected, ..
                    } = &self.role
                        && !granted.contains(&request.to)
                        && !rejected.contains(&request.to)
                    {
                        self.send_vote_request(now, request.to);
                    }
                }
                RequestKind::Fetch | RequestKind::FetchSnapshot => {
                    if let Role::Follower(f) = &mut self.role
                        && f.fetch_in_flight == Some(id)
                    {
                        f.fetch_in_flight = None;
                    }
                    self.maybe_send_fetch(now);
                    if matches!(self.role, Role::Unattached { .. }) {
                        self.maybe_send_discovery_fetch(now);
                    }
                }
                RequestKind::EndQuorumEpoch => {
                    let resend = match &self.role {
                        Role::Resigned { unacked, .. } => unacked.contains(&request.to),
                        _ => false,
                    };
                    if resend {
                        self.send_end_quorum_epoch(now, request.to);
                    }
                }
                RequestKind::BeginQuorumEpoch => {}
            }
        }
    }

    fn expire_parked_fetches(&mut self, now: Instant) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let (due, keep): (Vec<ParkedFetch>, Vec<ParkedFetch>) =
            leader.parked.drain(..).partition(|p| p.deadline <= now);
        leader.parked = keep;
        for parked in due {
            self.answer_parked_fetch(parked);
        }
    }

    fn arm_linger_timer(&mut self) {
        match &self.role {
            Role::Leader(l) => match l.accumulator.linger_deadline() {
                Some(at) => self.timers.set(Timer::AppendLinger, at),
                None => self.timers.stop(Timer::AppendLinger),
            },
            _ => self.timers.stop(Timer::AppendLinger),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Sending
    // -----------------------------------------------------------------------------------------

    fn send_request(
        &mut self,
        now: Instant,
        to: NodeId,
        kind: RequestKind,
        request: RaftRequest,
    ) -> RequestId {
        let id = RequestId(self.next_request_id);
        self.next_request_id += 1;
        let deadline = now + Duration::from_millis(self.config.request_timeout_ms);
        self.inflight.insert(id, InFlight { to, kind, deadline });
        self.actions
            .push_back(Action::SendRequest { to, id, request });
        id
    }

    fn respond(&mut self, to: NodeId, id: RequestId, response: RaftResponse) {
        self.actions
            .push_back(Action::SendResponse { to, id, response });
    }

    fn send_vote_requests(&mut self, now: Instant) {
        let voters: Vec<NodeId> = self.other_voters().collect();
        for voter in voters {
            self.send_vote_request(now, voter);
        }
    }

    fn send_vote_request(&mut self, now: Instant, to: NodeId) {
        let request = wire::vote_request(
            &self.config.cluster_id,
            to,
            self.epoch,
            self.config.node_id,
            self.log.end_offset_and_epoch(),
        );
        self.send_request(now, to, RequestKind::Vote, RaftRequest::Vote(request));
    }

    /// BeginQuorumEpoch to every other voter (`all`), or to those that have not fetched within
    /// the last heartbeat period; then re-arms the heartbeat.
    fn send_begin_quorum_epochs(&mut self, now: Instant, all: bool) {
        let Role::Leader(leader) = &self.role else {
            return;
        };
        let period = self.config.begin_quorum_epoch_period();
        let me = self.config.node_id;
        let targets: Vec<NodeId> = leader
            .voters
            .iter()
            .filter(|(id, _)| **id != me)
            .filter(|(_, p)| {
                all || p
                    .last_fetch
                    .is_none_or(|at| now.saturating_duration_since(at) >= period)
            })
            .map(|(id, _)| *id)
            .collect();
        for to in targets {
            let request =
                wire::begin_quorum_epoch_request(&self.config.cluster_id, to, me, self.epoch);
            self.send_request(
                now,
                to,
                RequestKind::BeginQuorumEpoch,
                RaftRequest::BeginQuorumEpoch(request),
            );
        }
        if self.config.voters.len() > 1 {
            self.timers.set(Timer::BeginQuorumEpoch, now + period);
        }
    }

    fn send_end_quorum_epochs(&mut self, now: Instant) {
        let Role::Resigned { unacked, .. } = &self.role else {
            return;
        };
        let targets: Vec<NodeId> = unacked.iter().copied().collect();
        for to in targets {
            self.send_end_quorum_epoch(now, to);
        }
    }

    fn send_end_quorum_epoch(&mut self, now: Instant, to: NodeId) {
        let Role::Resigned { preferred, .. } = &self.role else {
            return;
        };
        let request = wire::end_quorum_epoch_request(
            &self.config.cluster_id,
            self.config.node_id,
            self.epoch,
            preferred,
        );
        self.send_request(
            now,
            to,
            RequestKind::EndQuorumEpoch,
            RaftRequest::EndQuorumEpoch(request),
        );
    }

    fn random_voter(&mut self) -> NodeId {
        let others: Vec<NodeId> = self.other_voters().collect();
        if others.is_empty() {
            return self.config.node_id;
        }
        others[self.rng.gen_range(0..others.len())]
    }

    /// Follower (voter or observer): one Fetch at a time, only once the log end is flushed.
    ///
    /// fsync point: the Fetch offset tells the leader "I durably hold everything below this",
    /// and the leader counts it toward the high watermark. Sending it before the driver reported
    /// the flush (`handle_flushed`) could commit data that a crash of this voter then loses.
    fn maybe_send_fetch(&mut self, now: Instant) {
        let Role::Follower(f) = &self.role else {
            return;
        };
        if f.fetch_in_flight.is_some()
            || f.halted
            || self.timers.get(Timer::FetchRetry).is_some()
            || self.flushed_end < self.log.end_offset()
        {
            return;
        }
        let leader = f.leader;
        if let Some((snapshot_id, position)) = f.download {
            let request = wire::fetch_snapshot_request(
                &self.config.cluster_id,
                self.config.node_id,
                self.epoch,
                snapshot_id,
                position,
                self.config.max_batch_size_bytes,
            );
            let id = self.send_request(
                now,
                leader,
                RequestKind::FetchSnapshot,
                RaftRequest::FetchSnapshot(request),
            );
            if let Role::Follower(f) = &mut self.role {
                f.fetch_in_flight = Some(id);
            }
            return;
        }
        self.send_fetch_to(now, leader);
    }

    fn send_fetch_to(&mut self, now: Instant, to: NodeId) {
        if to == self.config.node_id {
            return;
        }
        let request = wire::fetch_request(
            &self.config.cluster_id,
            self.config.node_id,
            self.epoch,
            self.log.end_offset_and_epoch(),
            self.config.fetch_max_wait_ms,
            self.config.max_batch_size_bytes,
        );
        // The long poll may park for max wait; give the request that much extra time.
        let id = self.send_request(now, to, RequestKind::Fetch, RaftRequest::Fetch(request));
        if let Some(f) = self.inflight.get_mut(&id) {
            f.deadline += Duration::from_millis(self.config.fetch_max_wait_ms);
        }
        if let Role::Follower(f) = &mut self.role {
            f.fetch_in_flight = Some(id);
        }
    }

    /// Observers (and voters with no leader, which is harmless) ask a random voter for the
    /// leader by sending it a Fetch; the answer names the leader.
    fn maybe_send_discovery_fetch(&mut self, now: Instant) {
        if self.config.is_voter() || !matches!(self.role, Role::Unattached { .. }) {
            return;
        }
        if self.inflight.values().any(|f| f.kind == RequestKind::Fetch) {
            return;
        }
        let target = self.random_voter();
        self.send_fetch_to(now, target);
        self.timers.set(
            Timer::FetchTimeout,
            now + Duration::from_millis(self.config.fetch_timeout_ms),
        );
    }

    // -----------------------------------------------------------------------------------------
    // Common response handling
    // -----------------------------------------------------------------------------------------

    /// Kafka's `maybeHandleCommonResponse`: returns `Handled::Yes` if the response's epoch
    /// information made us change state (or must be ignored), so the payload is not processed.
    fn handle_common_response(&mut self, now: Instant, info: LeaderInfo) -> Handled {
        if info.epoch < self.epoch {
            return Handled::Yes; // stale
        }
        if info.error == Some(ResponseError::UnknownLeaderEpoch) {
            return Handled::Yes;
        }
        let me = self.config.node_id;
        let bump = info.epoch > self.epoch;
        let leader_error = matches!(
            info.error,
            Some(ResponseError::FencedLeaderEpoch | ResponseError::NotLeaderOrFollower)
        );
        if bump || leader_error {
            self.transition_for_leader_info(now, info.epoch, info.leader_id.filter(|l| *l != me));
            return Handled::Yes;
        }
        // Same epoch, a leader we did not know: follow it and process the payload.
        if let Some(leader) = info.leader_id.filter(|l| *l != me)
            && matches!(self.role, Role::Unattached { .. } | Role::Candidate { .. })
        {
            self.become_follower(now, info.epoch, leader);
        }
        Handled::No
    }

    /// Moves to `epoch` (≥ ours) and follows `leader` if given.
    fn transition_for_leader_info(
        &mut self,
        now: Instant,
        epoch: LeaderEpoch,
        leader: Option<NodeId>,
    ) {
        match leader {
            Some(leader) => {
                let same_leader = matches!(&self.role, Role::Follower(f) if f.leader == leader)
                    && epoch == self.epoch;
                let own_epoch = epoch == self.epoch
                    && matches!(self.role, Role::Leader(_) | Role::Resigned { .. });
                if !same_leader && !own_epoch {
                    self.become_follower(now, epoch, leader);
                }
            }
            None if epoch > self.epoch && !self.observer_ignores_leaderless_epochs() => {
                self.become_unattached(now, epoch, None);
            }
            None => {}
        }
    }

    /// Whether a higher epoch without a known leader is ignored here. Observers never vote, so
    /// an epoch only matters to them with a leader attached. Adopting a leaderless epoch from a
    /// candidate that then loses (or dies) would strand an observer above the quorum's epoch,
    /// where every Fetch is refused with UNKNOWN_LEADER_EPOCH (found by the simulator). Kafka
    /// 3.9 adopts it; we depart here for liveness, and safety is unaffected (no vote is cast).
    fn observer_ignores_leaderless_epochs(&self) -> bool {
        !self.config.is_voter()
    }

    // -----------------------------------------------------------------------------------------
    // Request validation (Kafka 3.9 order) and refusals
    // -----------------------------------------------------------------------------------------

    /// Fetch and FetchSnapshot are only answered by the leader of the request's epoch: an older
    /// epoch is fenced, a newer one is unknown to us yet, and a non-leader names the leader it knows.
    fn check_addressed_to_leader(&self, request_epoch: LeaderEpoch) -> Result<(), RequestError> {
        if request_epoch < self.epoch {
            return Err(RequestError::FencedLeaderEpoch {
                request: request_epoch,
                current: self.epoch,
            });
        }
        if request_epoch > self.epoch {
            return Err(RequestError::UnknownLeaderEpoch {
                request: request_epoch,
                current: self.epoch,
            });
        }
        if !matches!(self.role, Role::Leader(_)) {
            return Err(RequestError::NotLeader {
                leader: self.leader(),
            });
        }
        Ok(())
    }

    fn check_cluster_id(
        &self,
        request: Option<&kafka_protocol::protocol::StrBytes>,
    ) -> Result<(), RequestError> {
        if wire::cluster_id_matches(request, &self.config.cluster_id) {
            Ok(())
        } else {
            Err(RequestError::InconsistentClusterId {
                found: request.map(|s| s.as_str().to_string()).unwrap_or_default(),
                expected: self.config.cluster_id.clone(),
            })
        }
    }

    /// A `VoterId` of -1 (v0, or unset) is not checked.
    fn check_voter_key(&self, voter_id: i32) -> Result<(), RequestError> {
        if voter_id >= 0 && voter_id != self.config.node_id.0 {
            return Err(RequestError::InvalidVoterKey {
                voter_id,
                me: self.config.node_id,
            });
        }
        Ok(())
    }

    /// §1.7: cluster id, shape, offsets and epochs, then the epoch fence.
    fn validate_vote(
        &self,
        request: &kafka_protocol::messages::VoteRequest,
    ) -> Result<wire::VoteArgs, RequestError> {
        self.check_cluster_id(request.cluster_id.as_ref())?;
        let args = wire::vote_args(request).ok_or(RequestError::NotMetadataPartition)?;
        if args.last_offset < 0 {
            return Err(RequestError::InvalidField {
                field: "LastOffset",
                value: args.last_offset,
            });
        }
        if args.last_offset_epoch < 0 || args.last_offset_epoch >= args.candidate_epoch {
            return Err(RequestError::InvalidField {
                field: "LastOffsetEpoch",
                value: i64::from(args.last_offset_epoch),
            });
        }
        let candidate_epoch = LeaderEpoch(args.candidate_epoch);
        if candidate_epoch < self.epoch {
            return Err(RequestError::FencedLeaderEpoch {
                request: candidate_epoch,
                current: self.epoch,
            });
        }
        if args.candidate_id < 0 {
            return Err(RequestError::InvalidField {
                field: "CandidateId",
                value: i64::from(args.candidate_id),
            });
        }
        Ok(args)
    }

    /// §1.3: cluster id, shape, field ranges, epoch fence, then leadership.
    fn validate_fetch(
        &self,
        request: &kafka_protocol::messages::FetchRequest,
    ) -> Result<wire::FetchArgs, RequestError> {
        self.check_cluster_id(request.cluster_id.as_ref())?;
        let args = wire::fetch_args(request).ok_or(RequestError::NotMetadataPartition)?;
        let invalid =
            |field: &'static str, value: i64| Err(RequestError::InvalidField { field, value });
        if args.max_wait_ms < 0 {
            return invalid("MaxWaitMs", i64::from(args.max_wait_ms));
        }
        if args.fetch_offset < 0 {
            return invalid("FetchOffset", args.fetch_offset);
        }
        if args.last_fetched_epoch < 0 || args.last_fetched_epoch > args.current_leader_epoch {
            return invalid("LastFetchedEpoch", i64::from(args.last_fetched_epoch));
        }
        self.check_addressed_to_leader(LeaderEpoch(args.current_leader_epoch))?;
        Ok(args)
    }

    /// Answers request `id` with `error`, at the top level or in the partition as Kafka does.
    fn reject(&mut self, to: NodeId, id: RequestId, rpc: Rpc, error: &RequestError) {
        debug!(node = self.config.node_id.0, from = to.0, ?rpc, %error, "refusing request");
        let code = error.response_error();
        let info = self.leader_info(Some(code));
        let response = match (rpc, error.is_top_level()) {
            (Rpc::Vote, true) => RaftResponse::Vote(wire::vote_response_top(code)),
            (Rpc::Vote, false) => RaftResponse::Vote(wire::vote_response(info, false)),
            (Rpc::BeginQuorumEpoch, true) => {
                RaftResponse::BeginQuorumEpoch(wire::begin_quorum_epoch_response_top(code))
            }
            (Rpc::BeginQuorumEpoch, false) => {
                RaftResponse::BeginQuorumEpoch(wire::begin_quorum_epoch_response(info))
            }
            (Rpc::EndQuorumEpoch, true) => {
                RaftResponse::EndQuorumEpoch(wire::end_quorum_epoch_response_top(code))
            }
            (Rpc::EndQuorumEpoch, false) => {
                RaftResponse::EndQuorumEpoch(wire::end_quorum_epoch_response(info))
            }
            (Rpc::Fetch, true) => RaftResponse::Fetch(wire::fetch_response_top(code)),
            (Rpc::Fetch, false) => RaftResponse::Fetch(wire::fetch_response(&FetchAnswer {
                info,
                high_watermark: None,
                diverging: None,
                snapshot_id: None,
                malformed_snapshot_id: false,
                records: Bytes::new(),
            })),
            (Rpc::DescribeQuorum, true) => {
                RaftResponse::DescribeQuorum(wire::describe_quorum_response_top(code))
            }
            (Rpc::DescribeQuorum, false) => {
                RaftResponse::DescribeQuorum(wire::describe_quorum_response(info, None, &[], &[]))
            }
            (Rpc::FetchSnapshot, true) => {
                RaftResponse::FetchSnapshot(wire::fetch_snapshot_response_top(code))
            }
            (Rpc::FetchSnapshot, false) => {
                RaftResponse::FetchSnapshot(wire::fetch_snapshot_response(&wire::SnapshotSlice {
                    info,
                    snapshot_id: OffsetAndEpoch::new(-1, -1),
                    size: -1,
                    position: -1,
                    bytes: Bytes::new(),
                }))
            }
        };
        self.respond(to, id, response);
    }

    // -----------------------------------------------------------------------------------------
    // Vote
    // -----------------------------------------------------------------------------------------

    fn leader_info(&self, error: Option<ResponseError>) -> LeaderInfo {
        LeaderInfo {
            error,
            leader_id: self.leader(),
            epoch: self.epoch,
        }
    }

    fn handle_vote_request(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::VoteRequest,
    ) {
        let args = match self.validate_vote(request) {
            Ok(args) => args,
            Err(error) => return self.reject(from, id, Rpc::Vote, &error),
        };
        let candidate_epoch = LeaderEpoch(args.candidate_epoch);
        if candidate_epoch > self.epoch && !self.observer_ignores_leaderless_epochs() {
            self.become_unattached(now, candidate_epoch, None);
        }
        if let Err(error) = self.check_voter_key(args.voter_id) {
            return self.reject(from, id, Rpc::Vote, &error);
        }
        let answer = |core: &Self, granted: bool| {
            RaftResponse::Vote(wire::vote_response(core.leader_info(None), granted))
        };
        let candidate = NodeId(args.candidate_id);
        let candidate_log = OffsetAndEpoch::new(args.last_offset, args.last_offset_epoch);
        let up_to_date = candidate_log >= self.log.end_offset_and_epoch();
        let is_candidate_voter = self.config.voters.contains(&candidate);
        let granted = match &self.role {
            Role::Unattached { voted: Some(v), .. } => *v == candidate,
            Role::Unattached {
                voted: None,
                leader_hint: None,
            } => {
                let grant = up_to_date
                    && self.config.is_voter()
                    && is_candidate_voter
                    && candidate != self.config.node_id;
                if grant {
                    self.become_voted(now, candidate);
                }
                grant
            }
            _ => false,
        };
        debug!(
            node = self.config.node_id.0,
            candidate = candidate.0,
            epoch = self.epoch.0,
            granted,
            up_to_date,
            "vote"
        );
        let response = answer(self, granted);
        self.respond(from, id, response);
    }

    fn handle_vote_response(
        &mut self,
        now: Instant,
        from: NodeId,
        response: &kafka_protocol::messages::VoteResponse,
    ) {
        let Some((top, partition)) = wire::parse_vote_response(response) else {
            warn!(
                node = self.config.node_id.0,
                from = from.0,
                "malformed VoteResponse"
            );
            return;
        };
        let Some((info, granted)) = partition else {
            debug!(node = self.config.node_id.0, from = from.0, error = ?top, "vote failed");
            return;
        };
        if self.handle_common_response(now, info) == Handled::Yes {
            return;
        }
        if info.error.is_some() {
            return;
        }
        let majority = self.config.majority();
        let voters = self.config.voters.len();
        if !self.config.voters.contains(&from) {
            return;
        }
        let Role::Candidate {
            granted: yes,
            rejected: no,
            retries,
        } = &mut self.role
        else {
            return;
        };
        if granted {
            yes.insert(from);
        } else {
            no.insert(from);
        }
        let lost = voters - no.len() < majority;
        let retries = *retries;
        if granted {
            self.maybe_become_leader(now);
        } else if lost && self.timers.get(Timer::ElectionBackoff).is_none() {
            // Cannot win any more: back off now rather than wait for the election timeout.
            let backoff = self.election_backoff(retries);
            self.timers.set(Timer::ElectionBackoff, now + backoff);
        }
    }

    // -----------------------------------------------------------------------------------------
    // BeginQuorumEpoch / EndQuorumEpoch
    // -----------------------------------------------------------------------------------------

    fn handle_begin_quorum_epoch(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::BeginQuorumEpochRequest,
    ) {
        let args = match self
            .check_cluster_id(request.cluster_id.as_ref())
            .and_then(|()| {
                wire::begin_quorum_epoch_args(request).ok_or(RequestError::NotMetadataPartition)
            }) {
            Ok(args) => args,
            Err(error) => return self.reject(from, id, Rpc::BeginQuorumEpoch, &error),
        };
        let result = self
            .apply_leader_announcement(now, &args, false)
            .and_then(|()| self.check_voter_key(request.voter_id.0));
        match result {
            Ok(()) => {
                let r = wire::begin_quorum_epoch_response(self.leader_info(None));
                self.respond(from, id, RaftResponse::BeginQuorumEpoch(r));
            }
            Err(error) => self.reject(from, id, Rpc::BeginQuorumEpoch, &error),
        }
    }

    /// Shared validation and transition of Begin/EndQuorumEpoch.
    fn apply_leader_announcement(
        &mut self,
        now: Instant,
        args: &wire::QuorumEpochArgs,
        resigning: bool,
    ) -> Result<(), RequestError> {
        let epoch = LeaderEpoch(args.leader_epoch);
        if epoch < self.epoch {
            return Err(RequestError::FencedLeaderEpoch {
                request: epoch,
                current: self.epoch,
            });
        }
        if args.leader_id < 0 {
            return Err(RequestError::InvalidField {
                field: "LeaderId",
                value: i64::from(args.leader_id),
            });
        }
        let leader = NodeId(args.leader_id);
        let me = self.config.node_id;
        if leader == me {
            // Our own epoch echoed back (or a forged one): nothing to do.
            return Ok(());
        }
        if epoch == self.epoch && matches!(self.role, Role::Leader(_) | Role::Resigned { .. }) {
            warn!(
                node = me.0,
                epoch = epoch.0,
                other = leader.0,
                "another leader claims our epoch"
            );
            return Err(RequestError::ConflictingLeader {
                epoch,
                claimant: leader,
            });
        }
        if resigning {
            // EndQuorumEpoch: the leader is going away; learn the epoch, then hurry the election.
            let position = args.preferred.iter().position(|p| *p == me);
            let n = args.preferred.len();
            let delay = self.end_quorum_backoff(position, n);
            if epoch > self.epoch {
                self.become_follower(now, epoch, leader);
            }
            match &self.role {
                Role::Follower(f) if f.leader == leader && self.config.is_voter() => {
                    self.timers.set(Timer::FetchTimeout, now + delay);
                }
                Role::Unattached { .. } if self.config.is_voter() && !self.shutting_down => {
                    self.timers.set(Timer::Election, now + delay);
                }
                _ => {}
            }
            return Ok(());
        }
        let follows = matches!(&self.role, Role::Follower(f) if f.leader == leader);
        if epoch > self.epoch || !follows {
            self.become_follower(now, epoch, leader);
        }
        Ok(())
    }

    /// Strict exponential backoff by position in the preferred list (§1.8).
    fn end_quorum_backoff(&self, position: Option<usize>, n: usize) -> Duration {
        let max = self.config.election_backoff_max_ms;
        let ms = match position {
            Some(0) => 0,
            Some(p) if p < n => {
                let shift_down = u32::try_from(n - 1).unwrap_or(u32::MAX).min(63);
                let shift_up = u32::try_from(p - 1).unwrap_or(u32::MAX).min(63);
                ((max >> shift_down) << shift_up).min(max)
            }
            _ => max,
        };
        Duration::from_millis(ms)
    }

    fn handle_end_quorum_epoch(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::EndQuorumEpochRequest,
    ) {
        let args = match self
            .check_cluster_id(request.cluster_id.as_ref())
            .and_then(|()| {
                wire::end_quorum_epoch_args(request).ok_or(RequestError::NotMetadataPartition)
            }) {
            Ok(args) => args,
            Err(error) => return self.reject(from, id, Rpc::EndQuorumEpoch, &error),
        };
        match self.apply_leader_announcement(now, &args, true) {
            Ok(()) => {
                let r = wire::end_quorum_epoch_response(self.leader_info(None));
                self.respond(from, id, RaftResponse::EndQuorumEpoch(r));
            }
            Err(error) => self.reject(from, id, Rpc::EndQuorumEpoch, &error),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Fetch (leader side)
    // -----------------------------------------------------------------------------------------

    fn handle_fetch_request(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::FetchRequest,
    ) {
        let args = match self.validate_fetch(request) {
            Ok(args) => args,
            Err(error) => return self.reject(from, id, Rpc::Fetch, &error),
        };
        let fetch_offset = LogOffset(args.fetch_offset);
        let last_fetched_epoch = LeaderEpoch(args.last_fetched_epoch);
        if let Some(snapshot_id) = self.snapshot_id_for_fetch(fetch_offset, last_fetched_epoch) {
            let answer = FetchAnswer {
                info: self.leader_info(None),
                high_watermark: self.leader_high_watermark(),
                diverging: None,
                snapshot_id: Some(snapshot_id),
                malformed_snapshot_id: false,
                records: Bytes::new(),
            };
            return self.respond(from, id, RaftResponse::Fetch(wire::fetch_response(&answer)));
        }
        let found = self.log.end_offset_for_epoch(last_fetched_epoch);
        if found.epoch != last_fetched_epoch || found.offset < fetch_offset {
            let answer = FetchAnswer {
                info: self.leader_info(None),
                high_watermark: self.leader_high_watermark(),
                diverging: Some(found),
                snapshot_id: None,
                malformed_snapshot_id: false,
                records: Bytes::new(),
            };
            return self.respond(from, id, RaftResponse::Fetch(wire::fetch_response(&answer)));
        }
        // Valid position: it proves the replica durably holds our log below `fetch_offset`.
        let replica = NodeId(args.replica_id);
        if args.replica_id >= 0 {
            let leader_end = self.log.end_offset();
            let me = self.config.node_id;
            if let Role::Leader(leader) = &mut self.role
                && !leader.update_replica(replica, fetch_offset, leader_end, now)
            {
                warn!(
                    node = me.0,
                    replica = replica.0,
                    offset = fetch_offset.0,
                    "non-monotonic fetch offset"
                );
            }
            self.maybe_close_check_quorum_window(now);
            self.maybe_advance_leader_high_watermark();
        }
        let records = self
            .log
            .read_from(fetch_offset, self.config.max_batch_size_bytes);
        let replica = (args.replica_id >= 0).then_some(replica);
        if records.is_empty() && args.max_wait_ms > 0 {
            let wait = Duration::from_millis(u64::try_from(args.max_wait_ms).unwrap_or(0));
            // A replica that has not been told the current high watermark gets it now: parking
            // would leave it (a broker's metadata, a follower's commit) behind until the next
            // append or the wait's end.
            if let Role::Leader(leader) = &mut self.role
                && !replica.is_some_and(|r| leader.replica_behind_high_watermark(r))
            {
                leader.parked.push(ParkedFetch {
                    from,
                    id,
                    replica,
                    fetch_offset,
                    deadline: now + wait,
                });
                return;
            }
        }
        self.answer_fetch(from, id, replica, records);
    }

    fn answer_fetch(&mut self, to: NodeId, id: RequestId, replica: Option<NodeId>, records: Bytes) {
        if let (Role::Leader(leader), Some(replica)) = (&mut self.role, replica) {
            leader.note_sent_high_watermark(replica);
        }
        let answer = FetchAnswer {
            info: self.leader_info(None),
            high_watermark: self.leader_high_watermark(),
            diverging: None,
            snapshot_id: None,
            malformed_snapshot_id: false,
            records,
        };
        self.respond(to, id, RaftResponse::Fetch(wire::fetch_response(&answer)));
    }

    fn answer_parked_fetch(&mut self, parked: ParkedFetch) {
        let records = self
            .log
            .read_from(parked.fetch_offset, self.config.max_batch_size_bytes);
        self.answer_fetch(parked.from, parked.id, parked.replica, records);
    }

    /// Completes every parked fetch (new data or a new HW).
    fn complete_parked_fetches(&mut self) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let parked = std::mem::take(&mut leader.parked);
        for p in parked {
            self.answer_parked_fetch(p);
        }
    }

    fn leader_high_watermark(&self) -> Option<LogOffset> {
        match &self.role {
            Role::Leader(l) => l.high_watermark,
            _ => None,
        }
    }

    /// §1.3 rules 1 and 2: when the fetcher must load a snapshot instead of reading the log.
    fn snapshot_id_for_fetch(
        &self,
        fetch_offset: LogOffset,
        last_fetched_epoch: LeaderEpoch,
    ) -> Option<OffsetAndEpoch> {
        let latest = self
            .log
            .latest_snapshot()
            .filter(|s| *s != OffsetAndEpoch::new(0, 0));
        if fetch_offset.0 == 0
            && let Some(latest) = latest
        {
            return Some(latest);
        }
        let earliest = self.log.earliest_snapshot()?;
        let start = self.log.start_offset();
        let below_start = fetch_offset < start
            || (fetch_offset == start && last_fetched_epoch != earliest.epoch)
            || last_fetched_epoch < earliest.epoch;
        if below_start {
            latest.or(Some(earliest))
        } else {
            None
        }
    }

    fn maybe_advance_leader_high_watermark(&mut self) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        if let Some(hw) = leader.maybe_advance_high_watermark() {
            self.advance_high_watermark(hw);
            self.complete_parked_fetches();
        }
    }

    fn update_leader_own_progress(&mut self, now: Instant) {
        let me = self.config.node_id;
        let flushed = self.flushed_end;
        let end = self.log.end_offset();
        if let Role::Leader(leader) = &mut self.role {
            leader.update_replica(me, flushed, end, now);
            leader.fetched_in_window.remove(&me);
        }
        self.maybe_advance_leader_high_watermark();
    }

    /// Check quorum: once a majority (counting the leader) fetched in this window, start a new one.
    fn maybe_close_check_quorum_window(&mut self, now: Instant) {
        let majority = self.config.majority();
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        if leader.fetched_in_window.len() + 1 >= majority {
            leader.fetched_in_window.clear();
            let check_quorum = self.config.check_quorum_timeout();
            self.timers.set(Timer::CheckQuorum, now + check_quorum);
        }
    }

    // -----------------------------------------------------------------------------------------
    // FetchSnapshot (KIP-630)
    // -----------------------------------------------------------------------------------------

    /// §1.3 FetchSnapshot, leader side: validate, credit check-quorum, ask the driver for bytes.
    fn handle_fetch_snapshot_request(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::FetchSnapshotRequest,
    ) {
        let args = match self.validate_fetch_snapshot(request) {
            Ok(args) => args,
            Err(error) => return self.reject(from, id, Rpc::FetchSnapshot, &error),
        };
        // A FetchSnapshot counts toward the leader's check-quorum like a Fetch.
        if let Role::Leader(leader) = &mut self.role
            && leader.voters.contains_key(&NodeId(args.replica_id))
            && args.replica_id != self.config.node_id.0
        {
            leader.fetched_in_window.insert(NodeId(args.replica_id));
        }
        self.maybe_close_check_quorum_window(now);
        let wanted = usize::try_from(args.max_bytes).unwrap_or(0);
        let max_bytes = if wanted == 0 {
            self.config.max_batch_size_bytes
        } else {
            wanted.min(self.config.max_batch_size_bytes)
        };
        self.actions.push_back(Action::ReadSnapshot {
            to: from,
            id,
            snapshot_id: args.snapshot_id,
            position: args.position,
            max_bytes,
        });
    }

    fn validate_fetch_snapshot(
        &self,
        request: &kafka_protocol::messages::FetchSnapshotRequest,
    ) -> Result<wire::FetchSnapshotArgs, RequestError> {
        self.check_cluster_id(request.cluster_id.as_ref())?;
        let args = wire::fetch_snapshot_args(request).ok_or(RequestError::NotMetadataPartition)?;
        self.check_addressed_to_leader(LeaderEpoch(args.current_leader_epoch))?;
        let snapshot = args.snapshot_id;
        // The bootstrap snapshot (0, 0) is never served (§4.4).
        if snapshot.offset.0 <= 0 || snapshot.epoch.0 < 0 {
            return Err(RequestError::SnapshotNotFound {
                snapshot_id: snapshot,
            });
        }
        if args.position < 0 {
            return Err(RequestError::PositionOutOfRange {
                position: args.position,
                size: None,
            });
        }
        Ok(args)
    }

    /// Completes an `Action::ReadSnapshot`: answers the FetchSnapshot request `id` from `to`.
    pub fn handle_snapshot_read(
        &mut self,
        now: Instant,
        to: NodeId,
        id: RequestId,
        snapshot_id: OffsetAndEpoch,
        position: i64,
        read: SnapshotRead,
    ) {
        let _ = now;
        if !matches!(self.role, Role::Leader(_)) {
            let error = RequestError::NotLeader {
                leader: self.leader(),
            };
            return self.reject(to, id, Rpc::FetchSnapshot, &error);
        }
        let (size, bytes) = match read {
            SnapshotRead::NotFound => {
                return self.reject(
                    to,
                    id,
                    Rpc::FetchSnapshot,
                    &RequestError::SnapshotNotFound { snapshot_id },
                );
            }
            SnapshotRead::Chunk { size, bytes } => (size, bytes),
        };
        if position >= size {
            let error = RequestError::PositionOutOfRange {
                position,
                size: Some(size),
            };
            return self.reject(to, id, Rpc::FetchSnapshot, &error);
        }
        let slice = wire::SnapshotSlice {
            info: self.leader_info(None),
            snapshot_id,
            size,
            position,
            bytes,
        };
        self.respond(
            to,
            id,
            RaftResponse::FetchSnapshot(wire::fetch_snapshot_response(&slice)),
        );
    }

    /// Follower side of the download loop (§1.3): check each slice continues the file, hand it
    /// to the driver, and install the snapshot once all `Size` bytes arrived.
    fn handle_fetch_snapshot_response(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        response: &kafka_protocol::messages::FetchSnapshotResponse,
    ) {
        if let Role::Follower(f) = &mut self.role
            && f.fetch_in_flight == Some(id)
        {
            f.fetch_in_flight = None;
        }
        let retry = Duration::from_millis(self.config.retry_backoff_ms);
        let Some((_, Some(slice))) = wire::parse_fetch_snapshot_response(response) else {
            debug!(
                node = self.config.node_id.0,
                from = from.0,
                "FetchSnapshot failed"
            );
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        };
        if self.handle_common_response(now, slice.info) == Handled::Yes {
            if matches!(&self.role, Role::Follower(f) if f.fetch_in_flight.is_none()) {
                self.timers.set(Timer::FetchRetry, now + retry);
            }
            return;
        }
        let Role::Follower(f) = &self.role else {
            return;
        };
        let Some((wanted, position)) = f.download else {
            return;
        };
        if f.leader != from {
            return;
        }
        match slice.info.error {
            None => {}
            Some(ResponseError::SnapshotNotFound | ResponseError::PositionOutOfRange) => {
                // The leader no longer has it (or we disagree on its size): fetch again, the
                // leader will name its current snapshot.
                warn!(node = self.config.node_id.0, snapshot = %wanted, error = ?slice.info.error, "abandoning snapshot download");
                self.abandon_download(wanted);
                self.maybe_send_fetch(now);
                return;
            }
            Some(_) => {
                self.timers.set(Timer::FetchRetry, now + retry);
                return;
            }
        }
        self.timers.set(
            Timer::FetchTimeout,
            now + Duration::from_millis(self.config.fetch_timeout_ms),
        );
        let len = i64::try_from(slice.bytes.len()).unwrap_or(i64::MAX);
        let fits = slice.snapshot_id == wanted
            && slice.position == position
            && slice.size > 0
            && (len > 0 || position == slice.size)
            && position
                .checked_add(len)
                .is_some_and(|end| end <= slice.size);
        if !fits {
            warn!(
                node = self.config.node_id.0,
                snapshot = %slice.snapshot_id,
                position = slice.position,
                size = slice.size,
                "snapshot slice does not continue the download"
            );
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        }
        let next = position + len;
        self.actions.push_back(Action::WriteSnapshotChunk {
            snapshot_id: wanted,
            position,
            bytes: slice.bytes,
        });
        if next < slice.size {
            if let Role::Follower(f) = &mut self.role {
                f.download = Some((wanted, next));
            }
        } else {
            self.install_snapshot(wanted);
        }
        self.maybe_send_fetch(now);
    }

    fn abandon_download(&mut self, snapshot_id: OffsetAndEpoch) {
        if let Role::Follower(f) = &mut self.role {
            f.download = None;
        }
        self.actions
            .push_back(Action::AbandonSnapshot { snapshot_id });
    }

    /// The downloaded snapshot replaces the whole log (Kafka's `truncateToLatestSnapshot`).
    fn install_snapshot(&mut self, snapshot_id: OffsetAndEpoch) {
        if snapshot_id.offset < self.high_watermark {
            // Would move committed data behind us; a correct leader never sends this.
            warn!(node = self.config.node_id.0, snapshot = %snapshot_id, hw = self.high_watermark.0, "snapshot older than our high watermark");
            self.abandon_download(snapshot_id);
            return;
        }
        info!(node = self.config.node_id.0, snapshot = %snapshot_id, "installing snapshot");
        if let Role::Follower(f) = &mut self.role {
            f.download = None;
        }
        self.log.reset_to_snapshot(snapshot_id);
        self.flushed_end = snapshot_id.offset;
        for pending in &mut self.pending_flushes {
            *pending = (*pending).min(snapshot_id.offset);
        }
        self.actions
            .push_back(Action::InstallSnapshot { snapshot_id });
        // Everything below the snapshot is committed and now delivered through the snapshot.
        self.delivered_end = snapshot_id.offset;
        if snapshot_id.offset > self.high_watermark {
            self.advance_high_watermark(snapshot_id.offset);
        }
    }

    /// Registers a snapshot this replica wrote itself (the state machine's `createSnapshot`),
    /// so the leader can name it in Fetch answers. It must cover committed data only.
    ///
    /// # Errors
    /// [`SnapshotIdError`] if the id lies beyond the high watermark or its epoch does not match
    /// the log at that offset.
    pub fn snapshot_created(&mut self, snapshot_id: OffsetAndEpoch) -> Result<(), SnapshotIdError> {
        self.check_snapshot_id(snapshot_id)?;
        // A snapshot older than the latest does not replace it as the one named to fetchers.
        if self
            .log
            .latest_snapshot()
            .is_none_or(|l| l.offset <= snapshot_id.offset)
        {
            self.log.set_latest_snapshot(snapshot_id);
        }
        Ok(())
    }

    /// The checks of [`RaftCore::snapshot_created`] without registering anything (Kafka's
    /// `createNewSnapshot` validation, run before the state machine writes the file).
    ///
    /// # Errors
    /// As [`RaftCore::snapshot_created`].
    pub fn check_snapshot_id(&self, snapshot_id: OffsetAndEpoch) -> Result<(), SnapshotIdError> {
        if snapshot_id.offset > self.high_watermark {
            return Err(SnapshotIdError::BeyondHighWatermark {
                snapshot_id,
                high_watermark: self.high_watermark,
            });
        }
        if !self.log.is_boundary_of_epoch(snapshot_id) {
            return Err(SnapshotIdError::EpochMismatch { snapshot_id });
        }
        Ok(())
    }

    /// Drops the log below the latest snapshot (Kafka's `KafkaMetadataLog.maybeClean` after
    /// retention): the log then starts at the snapshot's end offset, and replicas fetching
    /// below it are sent the snapshot id. Emits `Action::DeleteLogPrefix`.
    ///
    /// # Errors
    /// [`SnapshotIdError::NotLatestSnapshot`] unless `snapshot_id` is the latest registered
    /// snapshot (the invariant: whenever the log start is above 0, a snapshot ends exactly there).
    pub fn delete_log_prefix(
        &mut self,
        snapshot_id: OffsetAndEpoch,
    ) -> Result<(), SnapshotIdError> {
        if self.log.latest_snapshot() != Some(snapshot_id)
            || snapshot_id.offset > self.high_watermark
        {
            return Err(SnapshotIdError::NotLatestSnapshot { snapshot_id });
        }
        if snapshot_id.offset <= self.log.start_offset() {
            return Ok(());
        }
        self.log.trim_prefix(snapshot_id);
        self.actions.push_back(Action::DeleteLogPrefix {
            log_start_offset: snapshot_id.offset,
        });
        Ok(())
    }

    /// Kafka's `deleteBeforeSnapshot`, used by the driver's retention (`maybeClean`): moves the
    /// log start up to `snapshot_id`, a snapshot on disk at or below the latest registered one
    /// (the latest stays registered), and emits `Action::DeleteLogPrefix`. Returns `false` when
    /// the log already starts at or after it.
    ///
    /// # Errors
    /// [`SnapshotIdError::AfterLatestSnapshot`], [`SnapshotIdError::BeyondHighWatermark`], or
    /// [`SnapshotIdError::EpochMismatch`] if no batch of the snapshot's epoch ends at its offset.
    pub fn advance_log_start(
        &mut self,
        snapshot_id: OffsetAndEpoch,
    ) -> Result<bool, SnapshotIdError> {
        let latest = self.log.latest_snapshot();
        if latest.is_none_or(|l| snapshot_id.offset > l.offset) {
            return Err(SnapshotIdError::AfterLatestSnapshot {
                snapshot_id,
                latest,
            });
        }
        if snapshot_id.offset > self.high_watermark {
            return Err(SnapshotIdError::BeyondHighWatermark {
                snapshot_id,
                high_watermark: self.high_watermark,
            });
        }
        if snapshot_id.offset <= self.log.start_offset() {
            return Ok(false);
        }
        if !self.log.is_boundary_of_epoch(snapshot_id) {
            return Err(SnapshotIdError::EpochMismatch { snapshot_id });
        }
        self.log.trim_prefix(snapshot_id);
        self.actions.push_back(Action::DeleteLogPrefix {
            log_start_offset: snapshot_id.offset,
        });
        Ok(true)
    }

    /// First offset of the log (0, or the end offset of the snapshot it starts at).
    #[must_use]
    pub fn log_start_offset(&self) -> LogOffset {
        self.log.start_offset()
    }

    // -----------------------------------------------------------------------------------------
    // Fetch (follower side)
    // -----------------------------------------------------------------------------------------

    fn handle_fetch_response(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        response: &kafka_protocol::messages::FetchResponse,
    ) {
        if let Role::Follower(f) = &mut self.role
            && f.fetch_in_flight == Some(id)
        {
            f.fetch_in_flight = None;
        }
        let retry = Duration::from_millis(self.config.retry_backoff_ms);
        let Some((top, answer)) = wire::parse_fetch_response(response) else {
            warn!(
                node = self.config.node_id.0,
                from = from.0,
                "malformed FetchResponse"
            );
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        };
        let Some(answer) = answer else {
            debug!(node = self.config.node_id.0, from = from.0, error = ?top, "fetch failed");
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        };
        if self.handle_common_response(now, answer.info) == Handled::Yes {
            // Still following the same leader (e.g. it resigned and answers with an error):
            // back off instead of asking again at once. A new leader was already sent a Fetch.
            if matches!(&self.role, Role::Follower(f) if f.fetch_in_flight.is_none()) {
                self.timers.set(Timer::FetchRetry, now + retry);
            }
            return;
        }
        if answer.info.error.is_some() {
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        }
        let Role::Follower(f) = &self.role else {
            return;
        };
        if f.leader != from {
            return; // an answer from someone we no longer follow
        }
        // Every successful response (records, empty, diverging, snapshot) proves the leader alive.
        self.timers.set(
            Timer::FetchTimeout,
            now + Duration::from_millis(self.config.fetch_timeout_ms),
        );
        if answer.malformed_snapshot_id {
            warn!(
                node = self.config.node_id.0,
                "fetch response with half a snapshot id ignored"
            );
        } else if let Some(diverging) = answer.diverging {
            // Our log may still differ from the leader's below the truncation point (the next
            // Fetch finds out), so the leader's HW says nothing about our log yet: not applied.
            self.truncate_on_divergence(diverging);
        } else if let Some(snapshot_id) = answer.snapshot_id {
            info!(node = self.config.node_id.0, snapshot = %snapshot_id, "leader sent a snapshot id");
            if let Role::Follower(f) = &mut self.role {
                f.download = Some((snapshot_id, 0));
            }
        } else if answer.records.is_empty() || self.append_as_follower(answer.records) {
            // The leader accepted our fetch position, so our log matches its log up to the end
            // of what we now hold: its HW applies, capped at our log end.
            if let Some(hw) = answer.high_watermark {
                let hw = hw.min(self.log.end_offset());
                if hw > self.high_watermark {
                    self.advance_high_watermark(hw);
                }
            }
        } else {
            self.timers.set(Timer::FetchRetry, now + retry);
            return;
        }
        self.maybe_send_fetch(now);
    }

    /// Kafka's follower truncation rule (§1.3).
    fn truncate_on_divergence(&mut self, diverging: OffsetAndEpoch) {
        if diverging.offset < self.high_watermark {
            let fatal = FatalError::TruncateBelowHighWatermark {
                diverging_end: diverging.offset,
                high_watermark: self.high_watermark,
            };
            warn!(node = self.config.node_id.0, error = %fatal, "refusing to truncate");
            self.actions.push_back(Action::Fatal(fatal));
            if let Role::Follower(f) = &mut self.role {
                // Stop fetching; the driver stops this replica.
                f.halted = true;
            }
            return;
        }
        let leo = self.log.end_offset();
        let target = if diverging.epoch.0 == 0 {
            diverging.offset.min(leo)
        } else {
            let local = self.log.end_offset_for_epoch(diverging.epoch);
            if local.epoch == diverging.epoch {
                local.offset.min(diverging.offset)
            } else {
                local.offset
            }
        };
        let target = target.max(self.high_watermark);
        let end = self.log.truncate_to(target);
        warn!(node = self.config.node_id.0, diverging = %diverging, from = leo.0, to = end.0, "truncating diverged log");
        self.flushed_end = self.flushed_end.min(end);
        for pending in &mut self.pending_flushes {
            *pending = (*pending).min(end);
        }
        self.actions.push_back(Action::Truncate { end_offset: end });
    }

    /// Validates and appends fetched batches. Returns `false` (nothing appended) if the records
    /// are corrupt or do not continue our log.
    fn append_as_follower(&mut self, records: Bytes) -> bool {
        let (batches, stop) =
            BatchReader::new(records, self.config.max_batch_size_bytes).read_all();
        if let Some(stop) = stop {
            warn!(node = self.config.node_id.0, position = stop.position, error = %stop.error, "corrupt fetched records");
            return false;
        }
        let mut expected = self.log.end_offset().0;
        let mut previous_epoch = self.log.last_epoch();
        for batch in &batches {
            let epoch = LeaderEpoch(batch.partition_leader_epoch());
            if batch.base_offset() != expected || epoch < previous_epoch || epoch > self.epoch {
                warn!(
                    node = self.config.node_id.0,
                    base = batch.base_offset(),
                    expected,
                    epoch = epoch.0,
                    "fetched batch does not continue the log"
                );
                return false;
            }
            expected = batch.next_offset();
            previous_epoch = epoch;
        }
        for batch in &batches {
            self.log.push(batch.clone());
        }
        if !batches.is_empty() {
            let end = self.log.end_offset();
            self.actions.push_back(Action::Append { batches });
            self.request_flush(end);
        }
        true
    }

    fn request_flush(&mut self, end: LogOffset) {
        self.pending_flushes.push_back(end);
        self.actions.push_back(Action::Flush { end_offset: end });
    }

    fn advance_high_watermark(&mut self, hw: LogOffset) {
        assert!(
            hw >= self.high_watermark,
            "high watermark would go back: {} -> {}",
            self.high_watermark,
            hw
        );
        if hw == self.high_watermark {
            return;
        }
        self.high_watermark = hw;
        self.actions.push_back(Action::HighWatermarkAdvanced(hw));
        let batches = self.log.batches_between(self.delivered_end, hw);
        if let Some(last) = batches.last() {
            self.delivered_end = LogOffset(last.next_offset());
            self.actions.push_back(Action::Commit { batches });
        }
        // A deferred "I lead" announcement becomes due once the epoch's first batch is handed up.
        self.emit_leader_change();
    }

    // -----------------------------------------------------------------------------------------
    // Leader appends
    // -----------------------------------------------------------------------------------------

    fn wall_ms(&self, now: Instant) -> i64 {
        match self.wall_clock {
            Some((at, ms)) if now >= at => ms.saturating_add(
                i64::try_from(now.duration_since(at).as_millis()).unwrap_or(i64::MAX),
            ),
            Some((_, ms)) => ms,
            None => 0,
        }
    }

    fn append_as_leader(&mut self, now: Instant, batches: Vec<RecordBatch>) {
        if batches.is_empty() {
            return;
        }
        for batch in &batches {
            // Built by us at the log end in our epoch: the shape holds by construction.
            assert!(
                self.log.check_next(batch).is_ok(),
                "leader built a batch that does not continue its log"
            );
            self.log.push(batch.clone());
        }
        let end = self.log.end_offset();
        self.actions.push_back(Action::Append { batches });
        // Wake long-polling followers before our own fsync, so theirs and ours overlap instead of
        // running one after the other. Safe: the high watermark counts the leader's own log only
        // up to its flushed offset (`handle_flushed`), so nothing commits on unflushed leader data.
        self.complete_parked_fetches();
        self.request_flush(end);
        let _ = now;
    }

    /// The first batch of every epoch: a control batch with a `LeaderChangeMessage` (v0).
    fn append_leader_change_batch(&mut self, now: Instant, granting: &BTreeSet<NodeId>) {
        let me = self.config.node_id;
        let voter = |id: &NodeId| Voter::default().with_voter_id(id.0);
        let message = LeaderChangeMessage::default()
            .with_version(0)
            .with_leader_id(BrokerId(me.0))
            .with_voters(self.config.voters.iter().map(voter).collect())
            .with_granting_voters(granting.iter().map(voter).collect());
        let mut value = BytesMut::new();
        // Version 0 is within the generated message's supported range, so encoding cannot fail.
        message
            .encode(&mut value, 0)
            .expect("LeaderChangeMessage v0 always encodes");
        let mut key = BytesMut::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&LEADER_CHANGE_CONTROL_TYPE.to_be_bytes());
        let base = self.log.end_offset();
        let mut builder = RecordBatchBuilder::new(base.0)
            .partition_leader_epoch(self.epoch.0)
            .control(true)
            .base_timestamp(self.wall_ms(now));
        builder.append_kv(self.wall_ms(now), Some(key.freeze()), Some(value.freeze()));
        let batch = builder.build();
        self.append_as_leader(now, vec![batch]);
        let end = self.log.end_offset();
        if let Role::Leader(leader) = &mut self.role {
            leader.accumulator.skip_to(end);
        }
    }

    fn drain_accumulator(&mut self, now: Instant, force: bool) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let epoch = leader.accumulator.epoch();
        let pending = leader.accumulator.drain(now, force);
        let ts = self.wall_ms(now);
        let batches: Vec<RecordBatch> = pending
            .into_iter()
            .map(|p| {
                let mut builder = RecordBatchBuilder::new(p.base_offset.0)
                    .partition_leader_epoch(epoch.0)
                    .base_timestamp(ts);
                for record in p.records {
                    builder.append_kv(ts, None, Some(record));
                }
                builder.build()
            })
            .collect();
        self.append_as_leader(now, batches);
    }

    // -----------------------------------------------------------------------------------------
    // DescribeQuorum
    // -----------------------------------------------------------------------------------------

    fn handle_describe_quorum(
        &mut self,
        now: Instant,
        from: NodeId,
        id: RequestId,
        request: &kafka_protocol::messages::DescribeQuorumRequest,
    ) {
        if !wire::describe_quorum_is_valid(request) {
            // Kafka's `getPartitionLevelErrorResponse`: no top-level error, every partition
            // asked for UNKNOWN_TOPIC_OR_PARTITION (no partition asked for: an empty answer).
            let r = wire::describe_quorum_unknown_partitions(request);
            return self.respond(from, id, RaftResponse::DescribeQuorum(r));
        }
        let Role::Leader(leader) = &self.role else {
            let error = RequestError::NotLeader {
                leader: self.leader(),
            };
            return self.reject(from, id, Rpc::DescribeQuorum, &error);
        };
        let me = self.config.node_id;
        let leo = self.log.end_offset();
        let row = |id: &NodeId, p: &ReplicaProgress| ReplicaRow {
            replica_id: *id,
            log_end_offset: if *id == me { Some(leo) } else { p.end_offset },
            last_fetch_timestamp_ms: if *id == me {
                Some(self.wall_ms(now))
            } else {
                p.last_fetch.map(|t| self.wall_ms(t))
            },
            last_caught_up_timestamp_ms: if *id == me {
                Some(self.wall_ms(now))
            } else {
                p.last_caught_up.map(|t| self.wall_ms(t))
            },
        };
        let voters: Vec<ReplicaRow> = leader.voters.iter().map(|(id, p)| row(id, p)).collect();
        let session = Duration::from_millis(OBSERVER_SESSION_TIMEOUT_MS);
        let observers: Vec<ReplicaRow> = leader
            .observers
            .iter()
            .filter(|(_, p)| {
                p.last_fetch
                    .is_some_and(|at| now.saturating_duration_since(at) < session)
            })
            .map(|(id, p)| row(id, p))
            .collect();
        let hw = leader.high_watermark;
        let r = wire::describe_quorum_response(self.leader_info(None), hw, &voters, &observers);
        self.respond(from, id, RaftResponse::DescribeQuorum(r));
    }
}

/// Which RPC a refusal answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rpc {
    Vote,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Fetch,
    DescribeQuorum,
    FetchSnapshot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handled {
    Yes,
    No,
}
