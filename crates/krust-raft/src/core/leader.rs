//! Leader-only state (Kafka's `LeaderState`): replica progress, high-watermark maths,
//! check-quorum window and the fetch purgatory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::core::accumulator::Accumulator;
use crate::types::{LogOffset, NodeId, RequestId};

/// What the leader knows about one replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplicaProgress {
    /// Offset of the replica's last valid Fetch (its durable log end), or the leader's own flushed end.
    pub end_offset: Option<LogOffset>,
    pub last_fetch: Option<Instant>,
    pub last_caught_up: Option<Instant>,
    /// The high watermark in the last Fetch answer sent to this replica: a Fetch from a replica
    /// that has not seen the current one is answered at once instead of parked.
    pub sent_high_watermark: Option<LogOffset>,
}

/// A Fetch with nothing to return yet, parked until data arrives, the HW moves or `deadline`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParkedFetch {
    pub from: NodeId,
    pub id: RequestId,
    /// The fetching replica (`None` for replica id -1).
    pub replica: Option<NodeId>,
    pub fetch_offset: LogOffset,
    pub deadline: Instant,
}

#[derive(Clone, Debug)]
pub(crate) struct LeaderState {
    /// LEO when this node became leader; the HW only becomes known once it passes this.
    pub epoch_start_offset: LogOffset,
    /// HW of this epoch; `None` until a record of the epoch commits.
    pub high_watermark: Option<LogOffset>,
    pub voters: BTreeMap<NodeId, ReplicaProgress>,
    pub observers: BTreeMap<NodeId, ReplicaProgress>,
    /// Voters (other than self) that fetched in the current check-quorum window.
    pub fetched_in_window: BTreeSet<NodeId>,
    pub parked: Vec<ParkedFetch>,
    pub accumulator: Accumulator,
}

impl LeaderState {
    /// Records a valid Fetch from `replica`. Returns `false` if `replica` is a voter whose
    /// offset went backwards (logged by the caller; Kafka accepts it too).
    pub(crate) fn update_replica(
        &mut self,
        replica: NodeId,
        offset: LogOffset,
        leader_end: LogOffset,
        now: Instant,
    ) -> bool {
        let is_voter = self.voters.contains_key(&replica);
        let progress = if is_voter {
            self.voters.get_mut(&replica)
        } else {
            Some(self.observers.entry(replica).or_default())
        };
        let Some(progress) = progress else {
            return true;
        };
        let monotonic = progress.end_offset.is_none_or(|old| old <= offset);
        progress.end_offset = Some(offset);
        progress.last_fetch = Some(now);
        if offset >= leader_end {
            progress.last_caught_up = Some(now);
        }
        if is_voter {
            self.fetched_in_window.insert(replica);
        }
        monotonic
    }

    fn progress_mut(&mut self, replica: NodeId) -> Option<&mut ReplicaProgress> {
        match self.voters.get_mut(&replica) {
            Some(p) => Some(p),
            None => self.observers.get_mut(&replica),
        }
    }

    /// Whether `replica` was last told a high watermark below the current one.
    pub(crate) fn replica_behind_high_watermark(&self, replica: NodeId) -> bool {
        let Some(hw) = self.high_watermark else {
            return false;
        };
        self.voters
            .get(&replica)
            .or_else(|| self.observers.get(&replica))
            .is_some_and(|p| p.sent_high_watermark.is_none_or(|sent| sent < hw))
    }

    /// Notes the high watermark of a Fetch answer sent to `replica`.
    pub(crate) fn note_sent_high_watermark(&mut self, replica: NodeId) {
        let hw = self.high_watermark;
        if let Some(p) = self.progress_mut(replica) {
            p.sent_high_watermark = hw;
        }
    }

    /// The offset a majority of voters have durably: the `⌊n/2⌋`-th largest voter end offset.
    pub(crate) fn majority_offset(&self) -> Option<LogOffset> {
        let mut offsets: Vec<Option<LogOffset>> =
            self.voters.values().map(|p| p.end_offset).collect();
        // Descending, unknown last.
        offsets.sort_by(|a, b| b.cmp(a));
        offsets.get(self.voters.len() / 2).copied().flatten()
    }

    /// Recomputes the HW. Returns the new value when it advanced.
    ///
    /// Raft §5.4.2 / KIP-595: the HW only becomes known once a record of this epoch is on a
    /// majority (candidate > epoch start offset), and it never moves back.
    pub(crate) fn maybe_advance_high_watermark(&mut self) -> Option<LogOffset> {
        let candidate = self.majority_offset()?;
        if candidate <= self.epoch_start_offset {
            return None;
        }
        match self.high_watermark {
            Some(current) if candidate <= current => None,
            _ => {
                self.high_watermark = Some(candidate);
                Some(candidate)
            }
        }
    }

    /// Other voters ordered by descending end offset (EndQuorumEpoch's preferred candidates).
    pub(crate) fn preferred_successors(&self, me: NodeId) -> Vec<NodeId> {
        let mut others: Vec<(NodeId, Option<LogOffset>)> = self
            .voters
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(id, p)| (*id, p.end_offset))
            .collect();
        others.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        others.into_iter().map(|(id, _)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderEpoch;
    use std::time::Duration;

    fn leader(voters: &[i32], epoch_start: i64) -> LeaderState {
        LeaderState {
            epoch_start_offset: LogOffset(epoch_start),
            high_watermark: None,
            voters: voters
                .iter()
                .map(|v| (NodeId(*v), ReplicaProgress::default()))
                .collect(),
            observers: BTreeMap::new(),
            fetched_in_window: BTreeSet::new(),
            parked: Vec::new(),
            accumulator: Accumulator::new(
                LeaderEpoch(1),
                LogOffset(epoch_start),
                Duration::ZERO,
                1 << 20,
            ),
        }
    }

    #[test]
    fn high_watermark_is_the_majority_offset_past_the_epoch_start() {
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3], 10);
        l.update_replica(NodeId(1), LogOffset(15), LogOffset(15), now);
        assert_eq!(
            l.maybe_advance_high_watermark(),
            None,
            "only the leader has it"
        );
        l.update_replica(NodeId(2), LogOffset(10), LogOffset(15), now);
        assert_eq!(
            l.maybe_advance_high_watermark(),
            None,
            "majority offset is the epoch start: not yet"
        );
        l.update_replica(NodeId(3), LogOffset(12), LogOffset(15), now);
        assert_eq!(l.maybe_advance_high_watermark(), Some(LogOffset(12)));
        l.update_replica(NodeId(3), LogOffset(11), LogOffset(15), now);
        assert_eq!(l.maybe_advance_high_watermark(), None, "never moves back");
        assert_eq!(l.high_watermark, Some(LogOffset(12)));
        l.update_replica(NodeId(7), LogOffset(15), LogOffset(15), now);
        assert_eq!(
            l.maybe_advance_high_watermark(),
            None,
            "observers do not count"
        );
    }

    #[test]
    fn single_voter_and_even_quorums() {
        let now = Instant::now();
        let mut one = leader(&[1], 0);
        one.update_replica(NodeId(1), LogOffset(1), LogOffset(1), now);
        assert_eq!(one.maybe_advance_high_watermark(), Some(LogOffset(1)));
        let mut four = leader(&[1, 2, 3, 4], 0);
        four.update_replica(NodeId(1), LogOffset(5), LogOffset(5), now);
        four.update_replica(NodeId(2), LogOffset(5), LogOffset(5), now);
        assert_eq!(
            four.maybe_advance_high_watermark(),
            None,
            "2 of 4 is not a majority"
        );
        four.update_replica(NodeId(3), LogOffset(3), LogOffset(5), now);
        assert_eq!(four.maybe_advance_high_watermark(), Some(LogOffset(3)));
    }

    #[test]
    fn successors_are_ordered_by_fetch_offset() {
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3, 4], 0);
        l.update_replica(NodeId(2), LogOffset(3), LogOffset(9), now);
        l.update_replica(NodeId(4), LogOffset(8), LogOffset(9), now);
        assert_eq!(
            l.preferred_successors(NodeId(1)),
            vec![NodeId(4), NodeId(2), NodeId(3)]
        );
    }
}
