//! Deterministic whole-cluster simulation of [`RaftCore`]s.
//!
//! One seed decides everything: the fault options ([`SimConfig::swarm`]), message delays,
//! drops, duplicates and reordering, partitions, crashes and restarts, per-node clock rates,
//! the client's appends and every replica's own rng. Time is virtual (global microseconds;
//! each node sees `epoch + offset + global × rate`), so a run is a pure function of its seed
//! and a failing seed replays exactly.
//!
//! The simulated driver follows the core's contract the way a real one must: actions run in
//! order; `PersistQuorumState` is durable at once (tmp + fsync + rename); `Append` goes to a
//! volatile tail that only a completed `Flush` (reported a little later, in order) makes durable;
//! a crash — which may also strike in the middle of draining a node's actions — throws away
//! everything not yet flushed, and the restart rebuilds the core from the durable state alone.
//!
//! After every event the [`invariants`] are checked; a run has a chaos phase (faults on,
//! safety only) followed by a healed phase in which a leader must be elected and a fresh
//! append must commit on every voter within bounded simulated time (liveness).
//!
//! Seeds: tests iterate [`seeds`]. `KRUST_SIM_SEED=n` runs only seed `n`; `KRUST_SIM_SEEDS=N`
//! runs `N` seeds starting at the test's base seed.

pub mod invariants;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::RaftConfig;
use crate::core::{
    Action, RaftCore, RaftRequest, RaftResponse, RecoveredLog, RoleKind, SnapshotRead,
};
use crate::quorum_state::QuorumStateData;
use crate::types::{LeaderEpoch, LogOffset, NodeId, OffsetAndEpoch, RequestId};
use invariants::{ClusterView, Invariant, Violation, VoteGrant};

/// Fault and workload options of one run. Every field is chosen from the seed by [`SimConfig::swarm`].
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Number of voters (ids 1..=voters).
    pub voters: usize,
    /// Number of observers (ids after the voters).
    pub observers: usize,
    /// Probability that a message is lost during the chaos phase.
    pub drop_rate: f64,
    /// Probability that a message is delivered twice.
    pub duplicate_rate: f64,
    /// Smallest one-way delay (µs); delays are uniform in `[min, max]`, which reorders messages.
    pub min_delay_us: u64,
    /// Largest one-way delay (µs).
    pub max_delay_us: u64,
    /// Largest delay between a `Flush` and its completion (µs).
    pub max_flush_delay_us: u64,
    /// Clock-rate skew in permille: each node's clock runs at `1000 ± skew` / 1000 of real time.
    pub clock_skew_permille: u64,
    /// Mean time between fault injections during chaos (µs); 0 disables faults.
    pub fault_interval_us: u64,
    /// Probability that a node crashes in the middle of executing its actions (per drain).
    pub crash_mid_drain_rate: f64,
    /// Mean time between client appends (µs).
    pub append_interval_us: u64,
    /// Length of the chaos phase (µs of simulated time).
    pub chaos_us: u64,
    /// After healing, a leader must exist and a new append must be known committed on every node within this (µs).
    pub liveness_bound_us: u64,
    /// Hard cap on processed events (a run that hits it fails).
    pub max_events: u64,
    /// Voters kept down after healing (fewer than a majority): the rest must still make progress.
    pub voters_down_after_heal: usize,
    /// Mean time between snapshots (µs); 0 disables snapshots. Half of them also delete the
    /// log below them, so lagging or emptied replicas must download them (FetchSnapshot).
    pub snapshot_interval_us: u64,
}

impl SimConfig {
    /// Options drawn from `seed` ("swarm testing": each seed gets a different mix of faults).
    #[must_use]
    pub fn swarm(seed: u64, voters: usize, observers: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5157_4152_4d00_0000);
        let min_delay_us = rng.gen_range(100..2_000);
        Self {
            voters,
            observers,
            drop_rate: *pick(&mut rng, &[0.0, 0.01, 0.05, 0.15]),
            duplicate_rate: *pick(&mut rng, &[0.0, 0.02, 0.1]),
            min_delay_us,
            max_delay_us: min_delay_us + rng.gen_range(0..20_000),
            max_flush_delay_us: *pick(&mut rng, &[0, 500, 3_000]),
            clock_skew_permille: *pick(&mut rng, &[0, 20, 100]),
            fault_interval_us: *pick(&mut rng, &[0, 150_000, 400_000]),
            crash_mid_drain_rate: *pick(&mut rng, &[0.0, 0.002, 0.01]),
            append_interval_us: rng.gen_range(5_000..30_000),
            chaos_us: 6_000_000,
            liveness_bound_us: 20_000_000,
            max_events: 200_000,
            voters_down_after_heal: rng.gen_range(0..=voters.saturating_sub(1) / 2),
            snapshot_interval_us: *pick(&mut rng, &[0, 300_000, 1_000_000]),
        }
    }

    /// No faults at all (for the plain scenarios).
    #[must_use]
    pub fn calm(voters: usize, observers: usize) -> Self {
        Self {
            voters,
            observers,
            drop_rate: 0.0,
            duplicate_rate: 0.0,
            min_delay_us: 500,
            max_delay_us: 2_000,
            max_flush_delay_us: 200,
            clock_skew_permille: 0,
            fault_interval_us: 0,
            crash_mid_drain_rate: 0.0,
            append_interval_us: 10_000,
            chaos_us: 500_000,
            liveness_bound_us: 20_000_000,
            max_events: 100_000,
            voters_down_after_heal: 0,
            snapshot_interval_us: 0,
        }
    }
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.gen_range(0..items.len())]
}

/// The seeds a simulation test runs: `KRUST_SIM_SEED=n` → just `n`; otherwise
/// `KRUST_SIM_SEEDS` (default `default_count`) seeds starting at `base`.
#[must_use]
pub fn seeds(base: u64, default_count: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("KRUST_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("KRUST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default_count);
    (base..base.saturating_add(count)).collect()
}

/// Raft timing used in simulation: Kafka's shape, scaled down so elections are frequent.
fn sim_raft_config(id: NodeId, voters: &[NodeId]) -> RaftConfig {
    let mut c = RaftConfig::new(id, "sim-cluster", voters.iter().copied());
    c.election_timeout_ms = 300;
    c.fetch_timeout_ms = 600;
    c.election_backoff_max_ms = 100;
    c.request_timeout_ms = 300;
    c.retry_backoff_ms = 20;
    c.fetch_max_wait_ms = 150;
    c.append_linger_ms = 5;
    c
}

/// A message in flight.
#[derive(Clone, Debug)]
enum Message {
    Request {
        id: RequestId,
        request: RaftRequest,
    },
    Response {
        id: RequestId,
        response: RaftResponse,
    },
}

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    Wakeup {
        node: usize,
    },
    FlushDone {
        node: usize,
        incarnation: u64,
        end_offset: LogOffset,
    },
    ClientAppend,
    Fault,
    /// The end of a graceful shutdown: the process exits (unflushed data is lost as in a crash).
    Stop {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Heal {
        generation: u64,
    },
    EndChaos,
    /// Every running node snapshots its committed log, and may delete the log below it.
    Snapshot,
}

struct Scheduled {
    at_us: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_us, self.seq).cmp(&(other.at_us, other.seq))
    }
}

/// What a simulated node has on "disk".
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    /// The last persisted `quorum-state`, as JSON bytes (parsed back at restart).
    pub quorum_state: Option<Vec<u8>>,
    /// Batches written (volatile tail included).
    pub batches: Vec<RecordBatch>,
    /// Number of leading batches that are fsynced.
    pub durable_batches: usize,
    /// Pending flushes: `(requested end offset, lowest truncation since)`.
    pending_flushes: Vec<(LogOffset, LogOffset)>,
    /// Time the last flush completion is scheduled (flushes complete in order).
    last_flush_done_us: u64,
    /// The latest snapshot (durable when written): its id and content, the committed batches
    /// it covers concatenated (a stand-in for a real `.checkpoint` file).
    pub snapshot: Option<(OffsetAndEpoch, Bytes)>,
    /// First offset of the log (the end of a snapshot once the prefix was deleted).
    pub log_start: LogOffset,
    /// A snapshot download in progress (`.checkpoint.part`, lost in a crash).
    partial: Option<(OffsetAndEpoch, Vec<u8>)>,
}

impl SimDisk {
    fn crash(&mut self) {
        self.batches.truncate(self.durable_batches);
        self.pending_flushes.clear();
        self.partial = None;
    }
}

/// One simulated replica.
pub struct SimNode {
    /// Its id.
    pub id: NodeId,
    /// The running core, `None` while crashed.
    pub core: Option<RaftCore>,
    /// Its disk.
    pub disk: SimDisk,
    /// Bumped at every restart; flush completions of an older incarnation are void.
    pub incarnation: u64,
    clock_offset_us: u64,
    clock_rate_permille: u64,
    scheduled_wakeup_us: Option<u64>,
    /// Next offset the listener expects from `Action::Commit` in this incarnation.
    pub delivered_end: LogOffset,
    /// A graceful shutdown began; the process stops soon.
    shutting_down: bool,
}

impl SimNode {
    /// Whether the node's core is running.
    #[must_use]
    pub fn is_up(&self) -> bool {
        self.core.is_some()
    }
}

/// Why a run failed: an invariant broke, or the run did not converge.
#[derive(Debug)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// Simulated time of the failure.
    pub at_us: u64,
    /// Events processed so far.
    pub events: u64,
    /// What went wrong.
    pub violation: Violation,
    /// One line per node: role, epoch, high watermark, log end, flushed and durable ends.
    pub nodes: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed at t={}.{:06}s after {} events: {}",
            self.seed,
            self.at_us / 1_000_000,
            self.at_us % 1_000_000,
            self.events,
            self.violation
        )?;
        for line in &self.nodes {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

/// What a finished run measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events processed.
    pub events: u64,
    /// Simulated end time (µs).
    pub end_us: u64,
    /// Highest epoch reached.
    pub max_epoch: i32,
    /// Committed end offset.
    pub committed_end: i64,
    /// Crashes injected.
    pub crashes: u64,
    /// Messages dropped.
    pub dropped: u64,
    /// Time from healing to a committed probe on every voter (µs).
    pub recovery_us: u64,
    /// Snapshots followers downloaded and installed (FetchSnapshot).
    pub snapshots_installed: u64,
}

/// A cluster of simulated nodes plus the network, clock and checkers.
pub struct SimCluster {
    /// The seed of the run.
    pub seed: u64,
    /// The options.
    pub config: SimConfig,
    /// Nodes, voters first.
    pub nodes: Vec<SimNode>,
    rng: StdRng,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    now_us: u64,
    base: Instant,
    voters: Vec<NodeId>,
    /// Blocked links (unordered pairs) during chaos.
    blocked: BTreeSet<(NodeId, NodeId)>,
    partition_generation: u64,
    chaos: bool,
    next_value: u64,
    invariants: Vec<Box<dyn Invariant>>,
    grants: Vec<VoteGrant>,
    pending_violation: Option<Violation>,
    stats: SimStats,
    /// Set after healing: the probe append's offset and when healing happened.
    probe: Option<(LogOffset, u64)>,
    healed_at_us: Option<u64>,
}

impl SimCluster {
    /// Builds a cluster from `seed` and `config` with the default invariants.
    #[must_use]
    pub fn new(seed: u64, config: SimConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let voters: Vec<NodeId> = (1..=config.voters)
            .map(|i| NodeId(i32::try_from(i).unwrap_or(i32::MAX)))
            .collect();
        let total = config.voters + config.observers;
        let mut nodes = Vec::with_capacity(total);
        for i in 0..total {
            let id = NodeId(i32::try_from(i + 1).unwrap_or(i32::MAX));
            let skew = config.clock_skew_permille;
            let rate = if skew == 0 {
                1000
            } else {
                rng.gen_range(1000 - skew..=1000 + skew)
            };
            nodes.push(SimNode {
                id,
                core: None,
                disk: SimDisk::default(),
                incarnation: 0,
                clock_offset_us: rng.gen_range(0..1_000_000),
                clock_rate_permille: rate,
                scheduled_wakeup_us: None,
                delivered_end: LogOffset(0),
                shutting_down: false,
            });
        }
        let mut cluster = Self {
            seed,
            config,
            nodes,
            rng,
            queue: BinaryHeap::new(),
            seq: 0,
            now_us: 0,
            base: Instant::now(),
            voters,
            blocked: BTreeSet::new(),
            partition_generation: 0,
            chaos: true,
            next_value: 0,
            invariants: invariants::default_invariants(total),
            grants: Vec::new(),
            pending_violation: None,
            stats: SimStats::default(),
            probe: None,
            healed_at_us: None,
        };
        for node in 0..total {
            cluster.start_node(node);
        }
        let first_append = cluster.config.append_interval_us;
        cluster.schedule(first_append, Event::ClientAppend);
        if cluster.config.fault_interval_us > 0 {
            let at = cluster
                .rng
                .gen_range(0..cluster.config.fault_interval_us * 2);
            cluster.schedule(at, Event::Fault);
        }
        let chaos = cluster.config.chaos_us;
        cluster.schedule(chaos, Event::EndChaos);
        if cluster.config.snapshot_interval_us > 0 {
            let at = cluster.config.snapshot_interval_us;
            cluster.schedule(at, Event::Snapshot);
        }
        cluster
    }

    fn schedule(&mut self, at_us: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at_us,
            seq: self.seq,
            event,
        }));
    }

    /// The node's local clock at global time `us`.
    fn local(&self, node: usize, us: u64) -> Instant {
        let n = &self.nodes[node];
        self.base + Duration::from_micros(n.clock_offset_us + us * n.clock_rate_permille / 1000)
    }

    /// Global time at which the node's clock reads `at` (rounded up).
    fn global(&self, node: usize, at: Instant) -> u64 {
        let n = &self.nodes[node];
        let local_us =
            u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX);
        let since = local_us.saturating_sub(n.clock_offset_us);
        since.saturating_mul(1000).div_ceil(n.clock_rate_permille)
    }

    fn start_node(&mut self, node: usize) {
        let id = self.nodes[node].id;
        let config = sim_raft_config(id, &self.voters);
        let disk = &self.nodes[node].disk;
        let persisted = match &disk.quorum_state {
            None => None,
            Some(bytes) => match QuorumStateData::from_json(bytes) {
                Ok(state) => Some(state),
                Err(e) => {
                    self.pending_violation = Some(Violation::Restart {
                        node: id,
                        reason: format!("quorum-state unreadable: {e}"),
                    });
                    return;
                }
            },
        };
        let snapshot_id = disk.snapshot.as_ref().map(|(id, _)| *id);
        let recovered = RecoveredLog {
            log_start_offset: disk.log_start,
            latest_snapshot: snapshot_id,
            earliest_snapshot: snapshot_id,
            batches: disk.batches[..disk.durable_batches].to_vec(),
        };
        let log_start = disk.log_start;
        let rng = StdRng::seed_from_u64(self.rng.r#gen());
        let now = self.local(node, self.now_us);
        match RaftCore::new(config, persisted, recovered, rng, now) {
            Ok(core) => {
                let n = &mut self.nodes[node];
                n.core = Some(core);
                n.incarnation += 1;
                n.delivered_end = log_start;
                n.shutting_down = false;
                n.scheduled_wakeup_us = None;
                self.drain(node);
            }
            Err(e) => {
                self.pending_violation = Some(Violation::Restart {
                    node: id,
                    reason: e.to_string(),
                });
            }
        }
    }

    fn crash(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if n.core.take().is_some() {
            n.disk.crash();
            n.scheduled_wakeup_us = None;
            self.stats.crashes += 1;
        }
    }

    fn node_index(&self, id: NodeId) -> Option<usize> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|i| *i < self.nodes.len())
    }

    fn link_blocked(&self, a: NodeId, b: NodeId) -> bool {
        self.blocked.contains(&(a.min(b), a.max(b)))
    }

    fn send(&mut self, from: usize, to: NodeId, message: Message) {
        let from_id = self.nodes[from].id;
        if self.chaos
            && (self.link_blocked(from_id, to) || self.rng.gen_bool(self.config.drop_rate))
        {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.gen_bool(self.config.duplicate_rate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self
                .rng
                .gen_range(self.config.min_delay_us..=self.config.max_delay_us);
            let event = Event::Deliver {
                from: from_id,
                to,
                message: message.clone(),
            };
            self.schedule(self.now_us + delay, event);
        }
    }

    /// Executes the node's queued actions in order, like a real driver.
    fn drain(&mut self, node: usize) {
        loop {
            if self.config.crash_mid_drain_rate > 0.0
                && self.chaos
                && self.rng.gen_bool(self.config.crash_mid_drain_rate)
            {
                self.crash(node);
                self.schedule_restart(node);
                return;
            }
            let Some(core) = self.nodes[node].core.as_mut() else {
                return;
            };
            let Some(action) = core.poll_action() else {
                break;
            };
            self.execute(node, action);
        }
        self.reschedule_wakeup(node);
    }

    fn execute(&mut self, node: usize, action: Action) {
        let id = self.nodes[node].id;
        match action {
            Action::PersistQuorumState(state) => {
                // Synchronous: tmp file + fsync + rename before the next action.
                self.nodes[node].disk.quorum_state = Some(state.to_json().into_bytes());
            }
            Action::Append { batches } => {
                let disk = &mut self.nodes[node].disk;
                for b in batches {
                    let expected = disk
                        .batches
                        .last()
                        .map_or(disk.log_start.0, RecordBatch::next_offset);
                    if b.base_offset() != expected {
                        self.pending_violation = Some(Violation::DriverContract {
                            node: id,
                            reason: format!(
                                "append at {} but disk ends at {expected}",
                                b.base_offset()
                            ),
                        });
                        return;
                    }
                    disk.batches.push(b);
                }
            }
            Action::Truncate { end_offset } => {
                let disk = &mut self.nodes[node].disk;
                let keep = disk
                    .batches
                    .partition_point(|b| b.next_offset() <= end_offset.0);
                disk.batches.truncate(keep);
                disk.durable_batches = disk.durable_batches.min(keep);
                for pending in &mut disk.pending_flushes {
                    pending.1 = pending.1.min(end_offset);
                }
            }
            Action::Flush { end_offset } => {
                let delay = if self.config.max_flush_delay_us == 0 {
                    0
                } else {
                    self.rng.gen_range(0..=self.config.max_flush_delay_us)
                };
                let disk = &mut self.nodes[node].disk;
                disk.pending_flushes.push((end_offset, end_offset));
                let at = (self.now_us + delay).max(disk.last_flush_done_us);
                disk.last_flush_done_us = at;
                let incarnation = self.nodes[node].incarnation;
                self.schedule(
                    at,
                    Event::FlushDone {
                        node,
                        incarnation,
                        end_offset,
                    },
                );
            }
            Action::SendRequest {
                to,
                id: request_id,
                request,
            } => {
                self.send(
                    node,
                    to,
                    Message::Request {
                        id: request_id,
                        request,
                    },
                );
            }
            Action::SendResponse {
                to,
                id: request_id,
                response,
            } => {
                if let RaftResponse::Vote(vote) = &response {
                    for t in &vote.topics {
                        for p in &t.partitions {
                            if p.vote_granted {
                                self.grants.push(VoteGrant {
                                    voter: id,
                                    epoch: LeaderEpoch(p.leader_epoch),
                                    candidate: to,
                                });
                            }
                        }
                    }
                }
                // Request ids are unique per incarnation (seeded from the core's rng), so a
                // response reaching a restarted node names an unknown request and is ignored.
                self.send(
                    node,
                    to,
                    Message::Response {
                        id: request_id,
                        response,
                    },
                );
            }
            Action::HighWatermarkAdvanced(_) | Action::LeaderChange { .. } => {}
            Action::Commit { batches } => {
                let n = &mut self.nodes[node];
                for b in &batches {
                    if b.base_offset() != n.delivered_end.0 {
                        self.pending_violation = Some(Violation::CommitOrder {
                            node: id,
                            expected: n.delivered_end,
                            got: LogOffset(b.base_offset()),
                        });
                        return;
                    }
                    n.delivered_end = LogOffset(b.next_offset());
                }
            }
            Action::ReadSnapshot {
                to,
                id: request_id,
                snapshot_id,
                position,
                max_bytes,
            } => {
                let read = match &self.nodes[node].disk.snapshot {
                    Some((held, content)) if *held == snapshot_id => {
                        let size = content.len();
                        let from = usize::try_from(position).unwrap_or(usize::MAX).min(size);
                        let until = from.saturating_add(max_bytes).min(size);
                        SnapshotRead::Chunk {
                            size: i64::try_from(size).unwrap_or(i64::MAX),
                            bytes: content.slice(from..until),
                        }
                    }
                    _ => SnapshotRead::NotFound,
                };
                let now = self.local(node, self.now_us);
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handle_snapshot_read(now, to, request_id, snapshot_id, position, read);
                }
            }
            Action::WriteSnapshotChunk {
                snapshot_id,
                position,
                bytes,
            } => {
                let disk = &mut self.nodes[node].disk;
                match &mut disk.partial {
                    _ if position == 0 => disk.partial = Some((snapshot_id, bytes.to_vec())),
                    Some((held, content))
                        if *held == snapshot_id && content.len() as i64 == position =>
                    {
                        content.extend_from_slice(&bytes);
                    }
                    _ => {
                        self.pending_violation = Some(Violation::DriverContract {
                            node: id,
                            reason: format!(
                                "snapshot chunk for {snapshot_id} at {position} does not continue the partial file"
                            ),
                        });
                    }
                }
            }
            Action::InstallSnapshot { snapshot_id } => {
                let n = &mut self.nodes[node];
                match n.disk.partial.take() {
                    Some((held, content)) if held == snapshot_id => {
                        n.disk.snapshot = Some((snapshot_id, Bytes::from(content)));
                        n.disk.batches.clear();
                        n.disk.durable_batches = 0;
                        n.disk.log_start = snapshot_id.offset;
                        for pending in &mut n.disk.pending_flushes {
                            pending.1 = pending.1.min(snapshot_id.offset);
                        }
                        // The listener loads the snapshot; commits continue after it.
                        n.delivered_end = snapshot_id.offset;
                        self.stats.snapshots_installed += 1;
                    }
                    _ => {
                        self.pending_violation = Some(Violation::DriverContract {
                            node: id,
                            reason: format!("install of {snapshot_id} without a complete download"),
                        });
                    }
                }
            }
            Action::AbandonSnapshot { .. } => self.nodes[node].disk.partial = None,
            Action::DeleteLogPrefix { log_start_offset } => {
                let disk = &mut self.nodes[node].disk;
                let dropped = disk
                    .batches
                    .partition_point(|b| b.next_offset() <= log_start_offset.0);
                disk.batches.drain(..dropped);
                disk.durable_batches = disk.durable_batches.saturating_sub(dropped);
                disk.log_start = log_start_offset;
            }
            Action::Fatal(error) => {
                self.pending_violation = Some(Violation::Fatal { node: id, error });
            }
        }
    }

    /// The state machine snapshots everything committed (Kafka: every N bytes or T ms), and
    /// half the time retention deletes the log below the snapshot.
    fn take_snapshot(&mut self, node: usize) -> bool {
        let delete_prefix = self.rng.gen_bool(0.5);
        let n = &mut self.nodes[node];
        let Some(core) = n.core.as_mut() else {
            return false;
        };
        let hw = core.high_watermark();
        let (old_end, mut content) = match &n.disk.snapshot {
            Some((id, content)) => (id.offset, content.to_vec()),
            None => (LogOffset(0), Vec::new()),
        };
        if hw <= old_end {
            return false;
        }
        let batches: Vec<&RecordBatch> = core
            .log_batches()
            .iter()
            .filter(|b| b.base_offset() >= old_end.0 && b.next_offset() <= hw.0)
            .collect();
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return false;
        };
        if first.base_offset() != old_end.0 || last.next_offset() != hw.0 {
            return false; // the log does not hold the whole stretch (e.g. it starts later)
        }
        let snapshot_id = OffsetAndEpoch::new(hw.0, last.partition_leader_epoch());
        for b in &batches {
            content.extend_from_slice(b.as_bytes());
        }
        if core.snapshot_created(snapshot_id).is_err() {
            return false;
        }
        // A snapshot is frozen (fsync + rename) when created: durable at once.
        n.disk.snapshot = Some((snapshot_id, Bytes::from(content)));
        if delete_prefix && core.delete_log_prefix(snapshot_id).is_ok() {
            self.drain(node);
        }
        true
    }

    fn reschedule_wakeup(&mut self, node: usize) {
        let Some(core) = self.nodes[node].core.as_ref() else {
            return;
        };
        let Some(at) = core.poll_timeout() else {
            return;
        };
        let at_us = self.global(node, at).max(self.now_us);
        let n = &self.nodes[node];
        let needed = match n.scheduled_wakeup_us {
            Some(s) => s < self.now_us || at_us < s,
            None => true,
        };
        if needed {
            self.nodes[node].scheduled_wakeup_us = Some(at_us);
            self.schedule(at_us, Event::Wakeup { node });
        }
    }

    fn schedule_restart(&mut self, node: usize) {
        let delay = self.rng.gen_range(50_000..800_000);
        self.schedule(self.now_us + delay, Event::Restart { node });
    }

    fn inject_fault(&mut self) {
        let total = self.nodes.len();
        match self.rng.gen_range(0..5) {
            4 => {
                // Graceful shutdown of the leader: it resigns (EndQuorumEpoch with its preferred
                // successors), keeps running a little, then stops and restarts later.
                if let Some(leader) = self.current_leader() {
                    let now = self.local(leader, self.now_us);
                    if let Some(core) = self.nodes[leader].core.as_mut() {
                        core.begin_shutdown(now);
                        self.nodes[leader].shutting_down = true;
                    }
                    self.drain(leader);
                    let delay = self.rng.gen_range(20_000..300_000);
                    self.schedule(self.now_us + delay, Event::Stop { node: leader });
                }
            }
            0 | 1 => {
                // Crash a node (often the leader), restart it later.
                let leader = self.current_leader();
                let node = match leader {
                    Some(l) if self.rng.gen_bool(0.5) => l,
                    _ => self.rng.gen_range(0..total),
                };
                if self.nodes[node].is_up() {
                    self.crash(node);
                    self.schedule_restart(node);
                }
            }
            2 => {
                // Isolate one node.
                let node = self.nodes[self.rng.gen_range(0..total)].id;
                for other in &self.nodes {
                    if other.id != node {
                        self.blocked
                            .insert((node.min(other.id), node.max(other.id)));
                    }
                }
                self.schedule_heal();
            }
            _ => {
                // Split the cluster in two random groups.
                let side: Vec<bool> = (0..total).map(|_| self.rng.gen_bool(0.5)).collect();
                for a in 0..total {
                    for b in (a + 1)..total {
                        if side[a] != side[b] {
                            self.blocked.insert((self.nodes[a].id, self.nodes[b].id));
                        }
                    }
                }
                self.schedule_heal();
            }
        }
    }

    fn schedule_heal(&mut self) {
        self.partition_generation += 1;
        let delay = self.rng.gen_range(100_000..1_500_000);
        let generation = self.partition_generation;
        self.schedule(self.now_us + delay, Event::Heal { generation });
    }

    /// Index of the leader with the highest epoch, if any node is leader.
    fn current_leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                n.core
                    .as_ref()
                    .filter(|c| c.role() == RoleKind::Leader)
                    .map(|c| (c.epoch(), i))
            })
            .max()
            .map(|(_, i)| i)
    }

    fn client_append(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let local = self.local(leader, self.now_us);
        let value = self.next_value;
        let Some(core) = self.nodes[leader].core.as_mut() else {
            return;
        };
        let epoch = core.epoch();
        if let Ok(offset) = core.append(
            local,
            epoch,
            vec![Bytes::copy_from_slice(&value.to_be_bytes())],
        ) {
            self.next_value += 1;
            if self.healed_at_us.is_some() && self.probe.is_none() {
                self.probe = Some((offset, self.now_us));
            }
        }
        self.drain(leader);
    }

    fn heal_all(&mut self) {
        self.chaos = false;
        self.blocked.clear();
        self.healed_at_us = Some(self.now_us);
        // A minority of voters may stay down for good; the majority must carry on without them.
        let mut down = BTreeSet::new();
        while down.len() < self.config.voters_down_after_heal {
            down.insert(self.rng.gen_range(0..self.config.voters));
        }
        for node in 0..self.nodes.len() {
            if down.contains(&node) {
                self.crash(node);
            } else if !self.nodes[node].is_up() {
                self.start_node(node);
            } else if self.nodes[node].shutting_down {
                // The shutdown completes now, and the process comes back.
                self.crash(node);
                self.start_node(node);
            }
        }
    }

    /// Liveness goal: a probe appended after healing is known committed on every running node
    /// (voters and observers).
    fn converged(&self) -> bool {
        let Some((probe, _)) = self.probe else {
            return false;
        };
        // Voters kept down after healing are excused; every running node must know the commit.
        self.nodes
            .iter()
            .filter_map(|n| n.core.as_ref())
            .all(|c| c.high_watermark() > probe)
    }

    fn step(&mut self, scheduled: Scheduled) -> Vec<usize> {
        self.now_us = self.now_us.max(scheduled.at_us);
        let mut touched = Vec::new();
        match scheduled.event {
            Event::Deliver { from, to, message } => {
                let Some(node) = self.node_index(to) else {
                    return touched;
                };
                if !self.nodes[node].is_up() {
                    return touched;
                }
                let now = self.local(node, self.now_us);
                match message {
                    Message::Request { id, request } => {
                        if let Some(core) = self.nodes[node].core.as_mut() {
                            core.handle_request(now, from, id, request);
                        }
                    }
                    Message::Response { id, response } => {
                        if let Some(core) = self.nodes[node].core.as_mut() {
                            core.handle_response(now, from, id, response);
                        }
                    }
                }
                self.drain(node);
                touched.push(node);
            }
            Event::Wakeup { node } => {
                if self.nodes[node].scheduled_wakeup_us == Some(scheduled.at_us) {
                    self.nodes[node].scheduled_wakeup_us = None;
                }
                let now = self.local(node, self.now_us);
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handle_timeout(now);
                    self.drain(node);
                    touched.push(node);
                }
            }
            Event::FlushDone {
                node,
                incarnation,
                end_offset,
            } => {
                if self.nodes[node].incarnation != incarnation || !self.nodes[node].is_up() {
                    return touched;
                }
                let disk = &mut self.nodes[node].disk;
                if disk.pending_flushes.is_empty() {
                    return touched;
                }
                let (_, clamped) = disk.pending_flushes.remove(0);
                let durable = disk
                    .batches
                    .partition_point(|b| b.next_offset() <= clamped.0);
                disk.durable_batches = disk.durable_batches.max(durable);
                let now = self.local(node, self.now_us);
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handle_flushed(now, end_offset);
                }
                self.drain(node);
                touched.push(node);
            }
            Event::ClientAppend => {
                self.client_append();
                let interval = self.config.append_interval_us;
                let next = self.now_us + self.rng.gen_range(interval / 2..=interval * 3 / 2);
                self.schedule(next, Event::ClientAppend);
                touched.extend(self.current_leader());
            }
            Event::Fault => {
                if self.chaos {
                    self.inject_fault();
                    let next =
                        self.now_us + self.rng.gen_range(1..=self.config.fault_interval_us * 2);
                    self.schedule(next, Event::Fault);
                }
                touched.extend(0..self.nodes.len());
            }
            Event::Stop { node } => {
                if self.chaos && self.nodes[node].is_up() && self.nodes[node].shutting_down {
                    self.crash(node);
                    self.schedule_restart(node);
                }
            }
            Event::Restart { node } => {
                if self.chaos && !self.nodes[node].is_up() {
                    self.start_node(node);
                    touched.push(node);
                }
            }
            Event::Heal { generation } => {
                if generation == self.partition_generation {
                    self.blocked.clear();
                }
            }
            Event::Snapshot => {
                for node in 0..self.nodes.len() {
                    if self.take_snapshot(node) {
                        touched.push(node);
                    }
                }
                let interval = self.config.snapshot_interval_us;
                let next = self.now_us + self.rng.gen_range(interval / 2..=interval * 3 / 2);
                self.schedule(next, Event::Snapshot);
            }
            Event::EndChaos => {
                self.heal_all();
                touched.extend(0..self.nodes.len());
            }
        }
        touched
    }

    /// Runs the chaos phase, heals, and runs until the liveness goal holds.
    ///
    /// # Errors
    /// The first [`SimFailure`]: a broken invariant, or no convergence within the bound.
    pub fn run(&mut self) -> Result<SimStats, SimFailure> {
        while let Some(Reverse(next)) = self.queue.pop() {
            self.stats.events += 1;
            let touched = self.step(next);
            self.check(&touched)?;
            if self.converged() {
                return Ok(self.finish());
            }
            if let Some(healed) = self.healed_at_us
                && self.now_us > healed + self.config.liveness_bound_us
            {
                return Err(self.failure(Violation::Liveness {
                    healed_at_us: healed,
                    bound_us: self.config.liveness_bound_us,
                    leader: self.current_leader().map(|i| self.nodes[i].id),
                    high_watermarks: self.high_watermarks(),
                }));
            }
            if self.stats.events >= self.config.max_events {
                return Err(self.failure(Violation::EventBudget {
                    events: self.stats.events,
                }));
            }
        }
        Err(self.failure(Violation::EventBudget {
            events: self.stats.events,
        }))
    }

    fn high_watermarks(&self) -> Vec<(NodeId, Option<i64>)> {
        self.nodes
            .iter()
            .map(|n| (n.id, n.core.as_ref().map(|c| c.high_watermark().0)))
            .collect()
    }

    fn finish(&mut self) -> SimStats {
        let mut stats = self.stats.clone();
        stats.end_us = self.now_us;
        stats.max_epoch = self
            .nodes
            .iter()
            .filter_map(|n| n.core.as_ref())
            .map(|c| c.epoch().0)
            .max()
            .unwrap_or(0);
        stats.committed_end = self
            .nodes
            .iter()
            .filter_map(|n| n.core.as_ref())
            .map(|c| c.high_watermark().0)
            .max()
            .unwrap_or(0);
        stats.recovery_us = self.healed_at_us.map_or(0, |h| self.now_us - h);
        stats
    }

    fn failure(&self, violation: Violation) -> SimFailure {
        let nodes = self.nodes.iter().map(Self::describe).collect();
        SimFailure {
            seed: self.seed,
            at_us: self.now_us,
            events: self.stats.events,
            violation,
            nodes,
        }
    }

    fn describe(n: &SimNode) -> String {
        let durable_end = n
            .disk
            .durable_batches
            .checked_sub(1)
            .and_then(|i| n.disk.batches.get(i))
            .map_or(0, RecordBatch::next_offset);
        // The disk as runs of `e<epoch>@<first offset>`.
        let mut runs: Vec<String> = Vec::new();
        let mut last_epoch = None;
        for b in &n.disk.batches {
            if last_epoch != Some(b.partition_leader_epoch()) {
                last_epoch = Some(b.partition_leader_epoch());
                runs.push(format!(
                    "e{}@{}",
                    b.partition_leader_epoch(),
                    b.base_offset()
                ));
            }
        }
        let epochs = runs.join(" ");
        match &n.core {
            None => format!(
                "node {} down (incarnation {}), durable end {durable_end}, disk [{epochs}]",
                n.id, n.incarnation
            ),
            Some(c) => format!(
                "node {} {:?} epoch {} leader {:?} hw {} leo {} flushed {} durable end {durable_end}, disk [{epochs}]",
                n.id,
                c.role(),
                c.epoch(),
                c.leader(),
                c.high_watermark(),
                c.log_end(),
                c.flushed_end(),
            ),
        }
    }

    fn check(&mut self, touched: &[usize]) -> Result<(), SimFailure> {
        if let Some(v) = self.pending_violation.take() {
            return Err(self.failure(v));
        }
        let grants = std::mem::take(&mut self.grants);
        let view = ClusterView {
            nodes: &self.nodes,
            touched,
            grants: &grants,
            majority: self.config.voters / 2 + 1,
            voters: self.config.voters,
        };
        let mut result = Ok(());
        for invariant in &mut self.invariants {
            if let Err(v) = invariant.check(&view) {
                result = Err(v);
                break;
            }
        }
        result.map_err(|v| self.failure(v))
    }
}
