//! What the driver asks its runtime to do ([`MigrationAction`]) and what the runtime reports
//! back ([`ZkReply`], [`ZkFailure`]): ZooKeeper requests as plain data, record batches to
//! append, RPCs to ZooKeeper-mode brokers.

use krust_metadata::ApiMessageAndVersion;
use krust_zk::ops::{Stat, ZkError, ZkOp, ZkOpResult};
use krust_zk::tree::ZkTree;

/// Identifies a request the driver is waiting on; completions carry it back.
pub type RequestId = u64;

/// One output of [`super::MigrationDriver::poll_action`].
#[derive(Debug)]
#[must_use]
pub enum MigrationAction<Rpcs> {
    /// Run `request` against ZooKeeper and report with
    /// [`super::MigrationDriver::handle_zk_result`]`(now, id, …)`. Retriable failures
    /// (connection loss, session expiry, timeouts) are reported, not retried by the runtime: the
    /// driver retries on its poll timer.
    Zk {
        /// Echoed in the completion.
        id: RequestId,
        /// The KRaft leader epoch the request was made in (`None` before any leadership: the
        /// start-up recovery).
        leader_epoch: Option<i32>,
        /// What to do.
        request: ZkRequest,
    },
    /// Append `records` to the metadata log as one migration batch through the active
    /// controller (Kafka's `ZkRecordConsumer.acceptBatch`; the first batch is the
    /// `BeginTransactionRecord`, the last `ZkMigrationStateRecord(MIGRATION)` +
    /// `EndTransactionRecord`). Report its commit with
    /// [`super::MigrationDriver::handle_append_committed`] or its failure with
    /// [`super::MigrationDriver::handle_append_failed`]. Must be dropped, never appended, if
    /// the node is no longer the leader in `leader_epoch`.
    AppendRecords {
        /// Echoed in the completion.
        id: RequestId,
        /// The KRaft leader epoch the batch belongs to.
        leader_epoch: i32,
        /// The records, in order.
        records: Vec<ApiMessageAndVersion>,
    },
    /// Send what the propagator built to the ZooKeeper-mode brokers (fire and forget, as
    /// Kafka's controller channel manager does: the driver does not wait for responses).
    SendRpcs {
        /// The KRaft leader epoch.
        leader_epoch: i32,
        /// The claimed ZooKeeper controller epoch (`controllerEpoch` of every request).
        zk_controller_epoch: i32,
        /// Full (from an image: entering dual-write, or a snapshot) or incremental (a delta).
        full: bool,
        /// The propagator's output.
        rpcs: Rpcs,
    },
    /// The initial copy failed after its metadata transaction began: the runtime must treat
    /// this as Kafka's fatal fault (resign the leadership; the next active controller aborts
    /// the open transaction and, since `/migration` still says no copy happened, redoes it).
    AbortMigration {
        /// The KRaft leader epoch of the failed copy.
        leader_epoch: i32,
        /// Why, for the log.
        reason: String,
    },
}

impl<Rpcs> MigrationAction<Rpcs> {
    /// The KRaft leader epoch the action was made in, if any.
    #[must_use]
    pub fn leader_epoch(&self) -> Option<i32> {
        match self {
            Self::Zk { leader_epoch, .. } => *leader_epoch,
            Self::AppendRecords { leader_epoch, .. }
            | Self::SendRpcs { leader_epoch, .. }
            | Self::AbortMigration { leader_epoch, .. } => Some(*leader_epoch),
        }
    }
}

/// A ZooKeeper request, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkRequest {
    /// Make sure each of `top_level_paths` exists (create it persistent and empty, with its
    /// parents, if missing; NODEEXISTS is success), then read `/migration`, creating it with
    /// `initial_data` first if it is missing (Kafka's `createTopLevelPaths` +
    /// `getOrCreateMigrationState`). Reply: [`ZkReply::Migration`].
    GetOrCreateMigration {
        /// Kafka's persistent top-level paths.
        top_level_paths: Vec<String>,
        /// The EMPTY state's JSON.
        initial_data: Vec<u8>,
    },
    /// Read each path's data and stat. Reply: [`ZkReply::Got`], `None` for a missing node.
    Get {
        /// Paths, answered in this order.
        paths: Vec<String>,
    },
    /// Read the subtrees under `roots` (a missing root is skipped), as
    /// [`krust_zk::backend::read_tree`] does. Reply: [`ZkReply::Trees`].
    ReadTrees {
        /// Subtree roots.
        roots: Vec<String>,
    },
    /// Run `steps` in order and stop at the first that fails. Reply: [`ZkReply::Wrote`], one
    /// result list per step; a failure is [`ZkFailure`] with the step's index (the steps
    /// before it were applied, the ones after it were not).
    Write {
        /// The steps.
        steps: Vec<ZkStep>,
    },
}

/// One step of a [`ZkRequest::Write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkStep {
    /// A multi-op: all or nothing.
    Multi(Vec<ZkOp>),
    /// One operation outside any fence (change notifications).
    Single(ZkOp),
}

impl ZkStep {
    /// The operations of the step.
    #[must_use]
    pub fn ops(&self) -> &[ZkOp] {
        match self {
            Self::Multi(ops) => ops,
            Self::Single(op) => std::slice::from_ref(op),
        }
    }
}

/// A successful reply to a [`ZkRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkReply {
    /// `/migration`'s data and stat.
    Migration {
        /// The JSON.
        data: Vec<u8>,
        /// Its stat (version, mtime).
        stat: Stat,
    },
    /// One entry per requested path.
    Got(Vec<Option<(Vec<u8>, Stat)>>),
    /// The subtrees read.
    Trees(ZkTree),
    /// One result list per step (a [`ZkStep::Single`] has one result).
    Wrote(Vec<Vec<ZkOpResult>>),
}

/// A failed [`ZkRequest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step}: {error}")]
pub struct ZkFailure {
    /// For [`ZkRequest::Write`], the index of the failed step (0 otherwise).
    pub step: usize,
    /// The failing operation's error and path (for a multi-op, the op that failed).
    pub error: ZkError,
}
