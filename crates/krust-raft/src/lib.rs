//! krust-raft: KIP-595 consensus for the `__cluster_metadata` log, as in Apache Kafka 3.9.
//!
//! The heart is a **sans-IO core**: [`RaftCore`] is a plain struct fed events with explicit time
//! (`handle_request`, `handle_response`, `handle_timeout`, `handle_flushed`, `append`) that
//! queues [`Action`]s (`PersistQuorumState`, `Append`, `Truncate`, `Flush`, `SendRequest`,
//! `SendResponse`, `HighWatermarkAdvanced`, `Commit`, …) for a driver to execute in order. It
//! reads no clock, opens no socket and touches no file; randomness comes from a seeded rng.
//! That makes it testable deterministically: the [`sim`] module runs whole clusters of cores
//! over a simulated network, disk and clock from one seed and checks invariants after every event.
//!
//! Messages are the `kafka-protocol` crate's Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch/
//! FetchSnapshot/DescribeQuorum types; log entries are Kafka v2 record batches from `krust_log::batch`.
//!
//! # Layout
//!
//! * [`types`] — newtypes: [`NodeId`], [`LeaderEpoch`], [`LogOffset`], [`OffsetAndEpoch`], [`RequestId`].
//! * [`config`] — [`RaftConfig`]: `controller.quorum.*` with Kafka's names and defaults.
//! * [`quorum_state`] — the `quorum-state` file (JSON, data_version 0/1): encode, strict decode.
//! * `core/` — the replica:
//!   * `core/mod.rs` — [`RaftCore`], [`Action`], roles and transitions, Vote / BeginQuorumEpoch /
//!     EndQuorumEpoch / Fetch / FetchSnapshot / DescribeQuorum handling, commit delivery;
//!   * `core/error.rs` — [`RequestError`]: every refusal, mapped to its Kafka error code in one place;
//!   * `core/log.rs` — in-memory log mirror and leader-epoch cache (divergence checks);
//!   * `core/leader.rs` — replica progress, high watermark, check-quorum window, fetch purgatory;
//!   * `core/accumulator.rs` — leader append batching (`append.linger.ms`, 8 MiB batches);
//!   * `core/timer.rs` — the closed set of [`Timer`]s;
//!   * `core/wire.rs` — extracting/building the single-partition Raft RPCs;
//!   * `core/tests.rs` — scenario tests ported from Kafka's `KafkaRaftClientTest` and
//!     `KafkaRaftClientSnapshotTest`, plus a hostile-input property test.
//! * [`driver`] — the tokio driver: owns a core, the `__cluster_metadata-0` log, `quorum-state`
//!   and snapshot files, and the peer connections; a [`driver::RaftHandle`] for callers;
//!   `driver/metrics.rs` measures Kafka's `raft-metrics` (rendered by `krust-metrics`).
//! * [`snapshot`] — KIP-630 snapshot files (`SnapshotId`, names, header/data/footer batches).
//! * [`sim`] (tests or feature `sim`) — deterministic cluster simulator and invariant checkers.
//!
//! # Simulation seeds
//!
//! `cargo test -p krust-raft sim::` runs the simulation tests over fixed seed ranges (about
//! 1,350 seeds in all, well under a minute in debug builds). `KRUST_SIM_SEED=n` reruns exactly
//! seed `n` (in every simulation test); `KRUST_SIM_SEEDS=N` runs `N` seeds per test instead of
//! the default. A failing seed prints the invariant it broke with its numbers, each node's
//! state, the options the seed chose, and the command that replays it exactly:
//!
//! ```text
//! KRUST_SIM_SEED=1184 cargo test -p krust-raft three_voters_stay_safe_and_recover_under_faults
//! ```

pub mod config;
pub mod core;
pub mod driver;
pub mod quorum_state;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod snapshot;
pub mod types;

pub use crate::config::RaftConfig;
pub use crate::core::{
    Action, AppendError, FatalError, InitError, RaftCore, RaftMetrics, RaftRequest, RaftResponse,
    RecoveredLog, RequestError, RoleKind, SnapshotIdError, SnapshotRead, Timer,
};
pub use crate::quorum_state::{QuorumStateData, QuorumStateError};
pub use crate::types::{LeaderEpoch, LogOffset, NodeId, OffsetAndEpoch, RequestId};
