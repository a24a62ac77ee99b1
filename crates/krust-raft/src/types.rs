//! Newtypes for the numbers KRaft juggles. A bare "epoch" or "offset" could mean several things
//! in Kafka, so each gets its own type and they never mix silently.

use std::fmt;

/// A replica's `node.id` (Kafka's `ReplicaId` / `VoterId` / `LeaderId` on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub i32);

/// The quorum epoch (`LeaderEpoch` / `CandidateEpoch` on the wire; `partitionLeaderEpoch` in a batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LeaderEpoch(pub i32);

/// An offset in the `__cluster_metadata-0` log. End offsets are exclusive (next offset to write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogOffset(pub i64);

/// Identifies one outstanding RPC. The driver maps it to the Kafka correlation id of the
/// request it sends (outbound) or received (inbound, echoed back on the response).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// `(end offset, epoch)` pair: the position of a log end or a snapshot (`OffsetAndEpoch` in Kafka).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct OffsetAndEpoch {
    /// Exclusive end offset.
    pub offset: LogOffset,
    /// Epoch of the last record before `offset`.
    pub epoch: LeaderEpoch,
}

impl OffsetAndEpoch {
    /// Builds the pair from raw numbers.
    #[must_use]
    pub const fn new(offset: i64, epoch: i32) -> Self {
        Self {
            offset: LogOffset(offset),
            epoch: LeaderEpoch(epoch),
        }
    }
}

/// Raft's "is at least as up to date" order (KIP-595 §Vote): epoch first, then offset.
impl PartialOrd for OffsetAndEpoch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OffsetAndEpoch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.epoch, self.offset).cmp(&(other.epoch, other.offset))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for LogOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for OffsetAndEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(offset {}, epoch {})", self.offset.0, self.epoch.0)
    }
}

impl LeaderEpoch {
    /// The next epoch (a candidate's bump).
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl LogOffset {
    /// `self + n`.
    #[must_use]
    pub const fn plus(self, n: i64) -> Self {
        Self(self.0 + n)
    }
}
