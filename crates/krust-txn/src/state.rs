//! Kafka 3.9's `TransactionState`: the int8 ids stored in `TransactionLogValue`, the names
//! DescribeTransactions/ListTransactions use, and the legal transitions
//! (`TransactionMetadata.scala`, `validPreviousStates`).

/// The state of one transactional id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    /// 0: no transaction in progress (after InitProducerId). Expirable.
    Empty,
    /// 1: partitions or offsets were added; the transaction is open.
    Ongoing,
    /// 2: the client asked to commit; markers are being written.
    PrepareCommit,
    /// 3: the client (or the coordinator) asked to abort; markers are being written.
    PrepareAbort,
    /// 4: every COMMIT marker is written. Expirable.
    CompleteCommit,
    /// 5: every ABORT marker is written. Expirable.
    CompleteAbort,
    /// 6: the id is being expired (a tombstone is written, never this state).
    Dead,
    /// 7: in memory only, before the coordinator aborts a fenced or timed-out transaction.
    PrepareEpochFence,
}

impl TxnState {
    /// The id written in `TransactionLogValue.TransactionStatus`.
    #[must_use]
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    /// The state of a stored id, `None` for an id Kafka 3.9 does not know.
    #[must_use]
    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's `TransactionState.name` (DescribeTransactions, ListTransactions and their
    /// state filters).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state named `name` (case-sensitive, as Kafka's `TransactionState.fromName`).
    #[must_use]
    pub fn from_name(name: &str) -> Option<TxnState> {
        ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Whether `self` may follow `previous` (Kafka's `validPreviousStates`).
    #[must_use]
    pub fn may_follow(self, previous: TxnState) -> bool {
        use TxnState::*;
        match self {
            Empty => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(previous, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit => previous == Ongoing,
            PrepareAbort => matches!(previous, Ongoing | PrepareEpochFence),
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
            Dead => matches!(previous, Empty | CompleteAbort | CompleteCommit),
            PrepareEpochFence => previous == Ongoing,
        }
    }

    /// Whether an idle id in this state may expire (`transactional.id.expiration.ms`).
    #[must_use]
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// Every state, in id order.
pub const ALL: [TxnState; 8] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
    TxnState::PrepareEpochFence,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for s in ALL {
            assert_eq!(TxnState::from_id(s.id()), Some(s));
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_id(-1), None);
        assert_eq!(TxnState::from_name("ongoing"), None);
    }

    #[test]
    fn transitions_follow_kafka() {
        assert!(TxnState::PrepareAbort.may_follow(TxnState::PrepareEpochFence));
        assert!(!TxnState::PrepareCommit.may_follow(TxnState::PrepareEpochFence));
        assert!(!TxnState::CompleteCommit.may_follow(TxnState::PrepareAbort));
        assert!(!TxnState::Empty.may_follow(TxnState::Ongoing));
        assert!(TxnState::Ongoing.may_follow(TxnState::CompleteAbort));
    }
}
