//! The core's timers: a closed set, each armed with an absolute deadline.

use std::time::Instant;

/// Everything the core may wait for. `handle_timeout(now)` fires every timer whose deadline is ≤ `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// Voter in Unattached, Candidate or Resigned: no leader appeared in time, stand for election
    /// (random in `[T, 2T)`, `T = election.timeout.ms`).
    Election,
    /// Candidate that lost or timed out: the exponential backoff is over, stand again with epoch + 1.
    ElectionBackoff,
    /// Follower: no successful Fetch response for `fetch.timeout.ms`; a voter stands for election,
    /// an observer looks for the leader at a random voter.
    FetchTimeout,
    /// Follower or observer: send the next Fetch (after `retry.backoff.ms` following an error).
    FetchRetry,
    /// Leader: a majority of voters did not fetch within 1.5 × `fetch.timeout.ms`; resign.
    CheckQuorum,
    /// Leader: re-send BeginQuorumEpoch to voters that have not fetched (`fetch.timeout.ms / 2`).
    BeginQuorumEpoch,
    /// Leader: `append.linger.ms` passed since the first buffered record; build the batch.
    AppendLinger,
}

const TIMER_COUNT: usize = 7;

impl Timer {
    const ALL: [Timer; TIMER_COUNT] = [
        Timer::Election,
        Timer::ElectionBackoff,
        Timer::FetchTimeout,
        Timer::FetchRetry,
        Timer::CheckQuorum,
        Timer::BeginQuorumEpoch,
        Timer::AppendLinger,
    ];
}

/// Deadlines of the armed timers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timers {
    deadlines: [Option<Instant>; TIMER_COUNT],
}

impl Timers {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer as usize] = Some(at);
    }

    pub(crate) fn stop(&mut self, timer: Timer) {
        self.deadlines[timer as usize] = None;
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer as usize]
    }

    pub(crate) fn clear(&mut self) {
        self.deadlines = [None; TIMER_COUNT];
    }

    /// Earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// Disarms and returns the timers that are due at `now`, in declaration order.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<Timer> {
        let mut due = Vec::new();
        for timer in Timer::ALL {
            if self.deadlines[timer as usize].is_some_and(|at| at <= now) {
                self.deadlines[timer as usize] = None;
                due.push(timer);
            }
        }
        due
    }
}
