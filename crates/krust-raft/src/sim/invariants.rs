//! Safety invariants checked after every simulated event (Appendix C of our Kafka facts, and
//! the invariants of Kafka's `RaftEventSimulationTest`). Each is a named type keeping the
//! history it needs; a violation carries the numbers that show it.

use std::collections::BTreeMap;
use std::fmt;

use krust_log::batch::RecordBatch;

use super::SimNode;
use crate::core::{FatalError, RoleKind};
use crate::types::{LeaderEpoch, LogOffset, NodeId};

/// A granted vote seen leaving a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoteGrant {
    /// Who voted.
    pub voter: NodeId,
    /// In which epoch.
    pub epoch: LeaderEpoch,
    /// For whom.
    pub candidate: NodeId,
}

/// What the checkers see after one event.
pub struct ClusterView<'a> {
    /// All nodes.
    pub nodes: &'a [SimNode],
    /// Indexes of the nodes the event touched (only those can have changed).
    pub touched: &'a [usize],
    /// Votes granted during the event.
    pub grants: &'a [VoteGrant],
    /// Voters needed for a majority.
    pub majority: usize,
    /// Number of voters (the first nodes).
    pub voters: usize,
}

/// A broken invariant, or a run that did not finish.
#[derive(Debug)]
pub enum Violation {
    /// Two leaders in one epoch.
    SingleLeaderPerEpoch {
        /// The epoch.
        epoch: LeaderEpoch,
        /// The first leader seen.
        first: NodeId,
        /// The second.
        second: NodeId,
    },
    /// A node's epoch went down (including across a restart).
    MonotonicEpoch {
        /// The node.
        node: NodeId,
        /// Previous epoch.
        from: LeaderEpoch,
        /// New epoch.
        to: LeaderEpoch,
    },
    /// A node granted votes to two candidates in one epoch.
    OneVotePerEpoch {
        /// The voter.
        node: NodeId,
        /// The epoch.
        epoch: LeaderEpoch,
        /// First candidate.
        first: NodeId,
        /// Second candidate.
        second: NodeId,
    },
    /// A node's high watermark went down within one incarnation.
    MonotonicHighWatermark {
        /// The node.
        node: NodeId,
        /// Previous value.
        from: LogOffset,
        /// New value.
        to: LogOffset,
    },
    /// Two batches with the same base offset and epoch differ.
    LogMatching {
        /// The node holding the second version.
        node: NodeId,
        /// Base offset.
        base_offset: i64,
        /// Epoch.
        epoch: i32,
        /// Description of both.
        detail: String,
    },
    /// A batch below a node's high watermark differs from the committed one at that offset.
    CommittedEntryChanged {
        /// The node.
        node: NodeId,
        /// Base offset.
        base_offset: i64,
        /// Description of both.
        detail: String,
    },
    /// A snapshot's content is not the committed log up to its end offset.
    SnapshotContent {
        /// The node.
        node: NodeId,
        /// The snapshot's end offset.
        snapshot_end: i64,
        /// What differs.
        detail: String,
    },
    /// Fewer than a majority of voters durably hold the committed log.
    CommittedEntryLost {
        /// Committed end offset.
        committed_end: i64,
        /// Voters holding it all.
        holders: Vec<NodeId>,
        /// Needed.
        majority: usize,
    },
    /// `Action::Commit` delivered out of order.
    CommitOrder {
        /// The node.
        node: NodeId,
        /// Expected base offset.
        expected: LogOffset,
        /// Delivered base offset.
        got: LogOffset,
    },
    /// The core asked the driver to stop.
    Fatal {
        /// The node.
        node: NodeId,
        /// The core's reason.
        error: FatalError,
    },
    /// A core broke the driver contract (e.g. appended at the wrong offset).
    DriverContract {
        /// The node.
        node: NodeId,
        /// What happened.
        reason: String,
    },
    /// A node could not restart from its durable state.
    Restart {
        /// The node.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// After healing, no append was known committed on every running node in time.
    Liveness {
        /// When the cluster was healed (µs).
        healed_at_us: u64,
        /// The bound (µs).
        bound_us: u64,
        /// The leader at the end, if any.
        leader: Option<NodeId>,
        /// Each node's high watermark (`None` = down).
        high_watermarks: Vec<(NodeId, Option<i64>)>,
    },
    /// The run hit its event cap.
    EventBudget {
        /// Events processed.
        events: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SingleLeaderPerEpoch {
                epoch,
                first,
                second,
            } => {
                write!(
                    f,
                    "SingleLeaderPerEpoch: epoch {epoch} has leaders {first} and {second}"
                )
            }
            Self::MonotonicEpoch { node, from, to } => {
                write!(
                    f,
                    "MonotonicEpoch: node {node} went from epoch {from} to {to}"
                )
            }
            Self::OneVotePerEpoch {
                node,
                epoch,
                first,
                second,
            } => {
                write!(
                    f,
                    "OneVotePerEpoch: node {node} voted for {first} and {second} in epoch {epoch}"
                )
            }
            Self::MonotonicHighWatermark { node, from, to } => {
                write!(
                    f,
                    "MonotonicHighWatermark: node {node} high watermark {from} -> {to}"
                )
            }
            Self::LogMatching {
                node,
                base_offset,
                epoch,
                detail,
            } => {
                write!(
                    f,
                    "LogMatching: node {node} batch at offset {base_offset} epoch {epoch} differs: {detail}"
                )
            }
            Self::CommittedEntryChanged {
                node,
                base_offset,
                detail,
            } => {
                write!(
                    f,
                    "CommittedEntryChanged: node {node} committed batch at offset {base_offset} differs: {detail}"
                )
            }
            Self::SnapshotContent {
                node,
                snapshot_end,
                detail,
            } => {
                write!(
                    f,
                    "SnapshotContent: node {node} snapshot ending at {snapshot_end}: {detail}"
                )
            }
            Self::CommittedEntryLost {
                committed_end,
                holders,
                majority,
            } => write!(
                f,
                "CommittedEntryLost: only {} voters ({holders:?}) durably hold the log up to committed offset {committed_end}, majority is {majority}",
                holders.len()
            ),
            Self::CommitOrder {
                node,
                expected,
                got,
            } => {
                write!(
                    f,
                    "CommitOrder: node {node} expected a commit at offset {expected}, got {got}"
                )
            }
            Self::Fatal { node, error } => write!(f, "Fatal: node {node}: {error}"),
            Self::DriverContract { node, reason } => {
                write!(f, "DriverContract: node {node}: {reason}")
            }
            Self::Restart { node, reason } => write!(f, "Restart: node {node}: {reason}"),
            Self::Liveness {
                healed_at_us,
                bound_us,
                leader,
                high_watermarks,
            } => write!(
                f,
                "Liveness: healed at {healed_at_us} µs, no commit known on every running node within {bound_us} µs (leader {leader:?}, high watermarks {high_watermarks:?})"
            ),
            Self::EventBudget { events } => write!(f, "EventBudget: gave up after {events} events"),
        }
    }
}

/// One checker. `check` runs after every event.
pub trait Invariant {
    /// # Errors
    /// The violation, if the invariant no longer holds.
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation>;
}

/// The checkers every simulation runs.
#[must_use]
pub fn default_invariants(nodes: usize) -> Vec<Box<dyn Invariant>> {
    vec![
        Box::new(SingleLeaderPerEpoch::default()),
        Box::new(MonotonicEpoch {
            last: vec![LeaderEpoch(0); nodes],
        }),
        Box::new(OneVotePerEpoch::default()),
        Box::new(MonotonicHighWatermark {
            last: vec![(0, LogOffset(0)); nodes],
        }),
        Box::new(LogMatching::new(nodes)),
        Box::new(MajorityHoldsCommitted::default()),
    ]
}

/// At most one leader per epoch, ever.
#[derive(Default)]
pub struct SingleLeaderPerEpoch {
    leaders: BTreeMap<LeaderEpoch, NodeId>,
}

impl Invariant for SingleLeaderPerEpoch {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for &i in view.touched {
            let node = &view.nodes[i];
            let Some(core) = &node.core else { continue };
            if core.role() != RoleKind::Leader {
                continue;
            }
            let first = *self.leaders.entry(core.epoch()).or_insert(node.id);
            if first != node.id {
                return Err(Violation::SingleLeaderPerEpoch {
                    epoch: core.epoch(),
                    first,
                    second: node.id,
                });
            }
        }
        Ok(())
    }
}

/// A node's epoch never decreases, across restarts too (the epoch is persisted before use).
pub struct MonotonicEpoch {
    last: Vec<LeaderEpoch>,
}

impl Invariant for MonotonicEpoch {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for &i in view.touched {
            let node = &view.nodes[i];
            let Some(core) = &node.core else { continue };
            if core.epoch() < self.last[i] {
                return Err(Violation::MonotonicEpoch {
                    node: node.id,
                    from: self.last[i],
                    to: core.epoch(),
                });
            }
            self.last[i] = core.epoch();
        }
        Ok(())
    }
}

/// A voter grants at most one candidate per epoch, across restarts too (votes are durable).
#[derive(Default)]
pub struct OneVotePerEpoch {
    votes: BTreeMap<(NodeId, LeaderEpoch), NodeId>,
}

impl Invariant for OneVotePerEpoch {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for g in view.grants {
            let first = *self.votes.entry((g.voter, g.epoch)).or_insert(g.candidate);
            if first != g.candidate {
                return Err(Violation::OneVotePerEpoch {
                    node: g.voter,
                    epoch: g.epoch,
                    first,
                    second: g.candidate,
                });
            }
        }
        Ok(())
    }
}

/// A node's high watermark never decreases while it runs (a restart starts over from the log start).
pub struct MonotonicHighWatermark {
    last: Vec<(u64, LogOffset)>,
}

impl Invariant for MonotonicHighWatermark {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for &i in view.touched {
            let node = &view.nodes[i];
            let Some(core) = &node.core else { continue };
            let (incarnation, previous) = self.last[i];
            let hw = core.high_watermark();
            if incarnation == node.incarnation && hw < previous {
                return Err(Violation::MonotonicHighWatermark {
                    node: node.id,
                    from: previous,
                    to: hw,
                });
            }
            self.last[i] = (node.incarnation, hw);
        }
        Ok(())
    }
}

/// Identity of a batch: offsets, epoch, CRC and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BatchId {
    base: i64,
    next: i64,
    epoch: i32,
    crc: u32,
    size: usize,
}

impl BatchId {
    fn of(b: &RecordBatch) -> Self {
        Self {
            base: b.base_offset(),
            next: b.next_offset(),
            epoch: b.partition_leader_epoch(),
            crc: b.crc(),
            size: b.size_in_bytes(),
        }
    }
}

/// Log matching and committed-prefix agreement:
/// * two batches with the same base offset and epoch are identical, on every node, forever;
/// * every batch below a node's high watermark equals the committed batch at that offset, so
///   committed data is never changed and sits at the same offset everywhere.
pub struct LogMatching {
    by_position: BTreeMap<(i64, i32), BatchId>,
    committed: BTreeMap<i64, BatchId>,
    /// Per node: how many leading batches were checked, and the last one checked.
    checked: Vec<(usize, Option<BatchId>)>,
    /// Per node: how many leading batches were checked against the committed log.
    committed_checked: Vec<(usize, Option<BatchId>)>,
    /// Per node: the snapshot whose content was last checked against the committed log.
    snapshot_checked: Vec<Option<crate::types::OffsetAndEpoch>>,
}

impl LogMatching {
    fn new(nodes: usize) -> Self {
        Self {
            by_position: BTreeMap::new(),
            committed: BTreeMap::new(),
            checked: vec![(0, None); nodes],
            committed_checked: vec![(0, None); nodes],
            snapshot_checked: vec![None; nodes],
        }
    }
}

/// Index from which `batches` still has to be checked, given what was checked before.
fn resume_from(batches: &[RecordBatch], checked: (usize, Option<BatchId>)) -> usize {
    let (count, last) = checked;
    match count.checked_sub(1).and_then(|i| batches.get(i)) {
        Some(b) if Some(BatchId::of(b)) == last => count,
        _ => 0,
    }
}

impl Invariant for LogMatching {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for &i in view.touched {
            let node = &view.nodes[i];
            // Snapshots hold committed data only: their content must be the committed log.
            if let Some((snapshot_id, content)) = &node.disk.snapshot
                && self.snapshot_checked[i] != Some(*snapshot_id)
            {
                self.snapshot_checked[i] = Some(*snapshot_id);
                let (batches, stop) =
                    krust_log::batch::BatchReader::new(content.clone(), usize::MAX).read_all();
                let end = batches.last().map_or(0, RecordBatch::next_offset);
                if stop.is_some() || end != snapshot_id.offset.0 {
                    return Err(Violation::SnapshotContent {
                        node: node.id,
                        snapshot_end: snapshot_id.offset.0,
                        detail: format!("content ends at {end}, unreadable tail: {stop:?}"),
                    });
                }
                for b in &batches {
                    let id = BatchId::of(b);
                    let known = *self.committed.entry(id.base).or_insert(id);
                    if known != id {
                        return Err(Violation::SnapshotContent {
                            node: node.id,
                            snapshot_end: snapshot_id.offset.0,
                            detail: format!("committed {known:?}, snapshot has {id:?}"),
                        });
                    }
                }
            }
            let Some(core) = &node.core else { continue };
            let batches = core.log_batches();
            let start = resume_from(batches, self.checked[i]);
            for b in &batches[start..] {
                let id = BatchId::of(b);
                let known = *self.by_position.entry((id.base, id.epoch)).or_insert(id);
                if known != id {
                    return Err(Violation::LogMatching {
                        node: node.id,
                        base_offset: id.base,
                        epoch: id.epoch,
                        detail: format!("{known:?} vs {id:?}"),
                    });
                }
            }
            self.checked[i] = (batches.len(), batches.last().map(BatchId::of));

            let hw = core.high_watermark().0;
            let start = resume_from(batches, self.committed_checked[i]);
            let mut count = start;
            for b in batches[start..]
                .iter()
                .take_while(|b| b.next_offset() <= hw)
            {
                let id = BatchId::of(b);
                let known = *self.committed.entry(id.base).or_insert(id);
                if known != id {
                    return Err(Violation::CommittedEntryChanged {
                        node: node.id,
                        base_offset: id.base,
                        detail: format!("committed {known:?}, node has {id:?}"),
                    });
                }
                count += 1;
            }
            self.committed_checked[i] = (
                count,
                count
                    .checked_sub(1)
                    .and_then(|j| batches.get(j))
                    .map(BatchId::of),
            );
        }
        Ok(())
    }
}

/// Committed data is never lost: a majority of voters hold all of it *durably* (what survives
/// if every node crashed now). Checked every 32 events; it scans the voters' disks.
#[derive(Default)]
pub struct MajorityHoldsCommitted {
    calls: u64,
    /// The committed log, batch by batch, as learned from nodes' high watermarks.
    committed: Vec<BatchId>,
}

impl MajorityHoldsCommitted {
    fn committed_end(&self) -> i64 {
        self.committed.last().map_or(0, |b| b.next)
    }
}

impl Invariant for MajorityHoldsCommitted {
    fn check(&mut self, view: &ClusterView<'_>) -> Result<(), Violation> {
        for &i in view.touched {
            let Some(core) = &view.nodes[i].core else {
                continue;
            };
            let hw = core.high_watermark().0;
            if hw <= self.committed_end() {
                continue;
            }
            // Extend the committed log with this node's batches (LogMatching checks they agree).
            let end = self.committed_end();
            let batches = core.log_batches();
            let from = batches.partition_point(|b| b.next_offset() <= end);
            if batches.get(from).is_none_or(|b| b.base_offset() != end) {
                continue; // this node's log does not continue the committed log we know (snapshot)
            }
            self.committed.extend(
                batches[from..]
                    .iter()
                    .take_while(|b| b.next_offset() <= hw)
                    .map(BatchId::of),
            );
        }
        self.calls += 1;
        if !self.calls.is_multiple_of(32) || self.committed.is_empty() {
            return Ok(());
        }
        let mut holders = Vec::new();
        for n in view.nodes.iter().take(view.voters) {
            // What survives a crash: the snapshot (checked by LogMatching) and the durable batches.
            let snapshot_end = n.disk.snapshot.as_ref().map_or(0, |(id, _)| id.offset.0);
            let durable = &n.disk.batches[..n.disk.durable_batches.min(n.disk.batches.len())];
            let first = durable.first().map_or(i64::MAX, RecordBatch::base_offset);
            let needed: Vec<&BatchId> = self
                .committed
                .iter()
                .filter(|c| c.next > snapshot_end)
                .collect();
            let holds = match needed.first() {
                None => true,
                Some(c) if c.base < first => false,
                Some(c) => {
                    let skip = durable.partition_point(|b| b.base_offset() < c.base);
                    durable.len() >= skip + needed.len()
                        && durable[skip..]
                            .iter()
                            .zip(&needed)
                            .all(|(b, r)| BatchId::of(b) == **r)
                }
            };
            if holds {
                holders.push(n.id);
            }
        }
        if holders.len() < view.majority {
            return Err(Violation::CommittedEntryLost {
                committed_end: self.committed_end(),
                holders,
                majority: view.majority,
            });
        }
        Ok(())
    }
}
