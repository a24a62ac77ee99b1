//! Runs a [`ZkWriteBatch`] against ZooKeeper through any [`ZkBackend`], every write fenced
//! (facts §6.7, Kafka 3.9's `KafkaZkClient.retryMigrationRequestsUntilConnected`).
//!
//! Each write is its own multi-op, led by two guards:
//! `check(/controller_epoch, fence.controller_epoch_zk_version)` — no ZooKeeper-mode controller
//! was elected since this KRaft controller claimed ZooKeeper — and
//! `check(/migration, fence.migration_zk_version)` — no other KRaft controller wrote since. The
//! last write of the batch replaces the second guard with
//! `setData(/migration, <state>, fence.migration_zk_version)`, which records the KRaft offset
//! now reflected in ZooKeeper; [`Fence::migration_zk_version`] then takes the new version. An
//! empty batch still writes `/migration` (the driver persists its offset that way).
//!
//! A guard failing is [`ExecError::Fenced`]: another controller owns ZooKeeper, this one must
//! stop writing. A connection problem is [`ExecError::Retriable`]: the caller runs the same
//! batch again later with the same fence — every write is safe to re-apply (see
//! [`crate::writer`]), and the fence only moves once the last write is in. Notifications go out
//! after all guarded writes, unguarded, as Kafka does.

use std::collections::BTreeMap;

use krust_zk::backend::ZkBackend;
use krust_zk::model::paths;
use krust_zk::ops::{ANY_VERSION, MultiError, ZkError, ZkErrorCode, ZkOp, ZkOpResult};
use krust_zk::tree::{join, parent_of};

use crate::writer::{ZkWrite, ZkWriteBatch};

/// The ZooKeeper versions that prove this controller still owns ZooKeeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The version of `/controller_epoch` after this controller's claim.
    pub controller_epoch_zk_version: i32,
    /// The version of `/migration` last written by this controller.
    pub migration_zk_version: i32,
}

/// What a batch wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteCounts {
    /// Writes applied (or found already done) per Kafka operation name.
    pub by_operation: BTreeMap<&'static str, usize>,
    /// Multi-ops sent (guards included).
    pub multi_ops: usize,
    /// Notifications created.
    pub notifications: usize,
}

/// Why a batch stopped. Writes before the failing one are in ZooKeeper; re-running the batch
/// is safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// A guard failed: `/controller_epoch` or `/migration` moved (another controller writes to
    /// ZooKeeper) or vanished. Remedy: this controller is no longer the migration leader; stop
    /// dual-writing and wait for the next leadership event.
    #[error("fenced: {path} is no longer at the version this controller wrote ({code})")]
    Fenced {
        /// The guard znode.
        path: String,
        /// BADVERSION or NONODE.
        code: ZkErrorCode,
    },
    /// ZooKeeper could not be reached (connection loss, session expiry, timeout). Remedy: run
    /// the same batch again later with the same fence.
    #[error("ZooKeeper unavailable during {operation}")]
    Retriable {
        /// The operation being written.
        operation: &'static str,
        /// The error.
        #[source]
        source: ZkError,
    },
    /// ZooKeeper refused a write for a reason retrying will not fix (e.g. a topic znode that
    /// should exist is missing, or an authorization failure).
    #[error("ZooKeeper refused {operation}")]
    Refused {
        /// The operation being written.
        operation: &'static str,
        /// The error.
        #[source]
        source: ZkError,
    },
    /// The fence holds a negative version, which ZooKeeper would read as "any version" and so
    /// would guard nothing (Kafka refuses an unknown controller-epoch version too). Remedy:
    /// claim `/controller` (and read `/migration`) first.
    #[error("refusing to write without a known {path} version")]
    NoFence {
        /// The guard with no version.
        path: &'static str,
    },
}

/// Attempts at a write whose view of the tree went stale between reading and writing (a
/// missing parent appeared, a child vanished): bounded, each attempt re-reads.
const MAX_WRITE_ATTEMPTS: usize = 3;

/// How one guarded multi-op ended.
enum Outcome {
    Done,
    /// The write's own operation `index` (0 = first after the guards) failed with `error`.
    OpFailed {
        index: usize,
        error: ZkError,
    },
}

struct Runner<'a, B> {
    zk: &'a B,
    fence: &'a mut Fence,
    migration_state_json: &'a [u8],
    counts: WriteCounts,
}

impl<B: ZkBackend> Runner<'_, B> {
    fn guards(&self, last: bool) -> [ZkOp; 2] {
        let migration = if last {
            ZkOp::set_data(
                paths::MIGRATION,
                self.migration_state_json.to_vec(),
                self.fence.migration_zk_version,
            )
        } else {
            ZkOp::check(paths::MIGRATION, self.fence.migration_zk_version)
        };
        [
            ZkOp::check(
                paths::CONTROLLER_EPOCH,
                self.fence.controller_epoch_zk_version,
            ),
            migration,
        ]
    }

    async fn guarded(
        &mut self,
        operation: &'static str,
        ops: &[ZkOp],
        last: bool,
    ) -> Result<Outcome, ExecError> {
        let mut all = self.guards(last).to_vec();
        all.extend_from_slice(ops);
        self.counts.multi_ops += 1;
        match self.zk.multi(&all).await {
            Ok(results) => {
                if last && let Some(ZkOpResult::SetData { stat }) = results.get(1) {
                    self.fence.migration_zk_version = stat.version;
                }
                Ok(Outcome::Done)
            }
            Err(MultiError { index, error }) => {
                if error.code.is_retriable() {
                    return Err(ExecError::Retriable {
                        operation,
                        source: error,
                    });
                }
                if index < 2 {
                    return match error.code {
                        ZkErrorCode::BadVersion | ZkErrorCode::NoNode => Err(ExecError::Fenced {
                            path: all[index].path().to_owned(),
                            code: error.code,
                        }),
                        _ => Err(ExecError::Refused {
                            operation,
                            source: error,
                        }),
                    };
                }
                Ok(Outcome::OpFailed {
                    index: index - 2,
                    error,
                })
            }
        }
    }

    /// A write that turned out to have nothing to do: the last one still moves `/migration`.
    async fn nothing_to_do(
        &mut self,
        operation: &'static str,
        last: bool,
    ) -> Result<(), ExecError> {
        if last {
            match self.guarded(operation, &[], true).await? {
                Outcome::Done => {}
                Outcome::OpFailed { error, .. } => {
                    return Err(ExecError::Refused {
                        operation,
                        source: error,
                    });
                }
            }
        }
        Ok(())
    }

    async fn exists(&self, operation: &'static str, path: &str) -> Result<bool, ExecError> {
        self.zk
            .exists(path)
            .await
            .map(|s| s.is_some())
            .map_err(|e| classify(operation, e))
    }

    async fn write(
        &mut self,
        operation: &'static str,
        write: &ZkWrite,
        last: bool,
    ) -> Result<(), ExecError> {
        match write {
            ZkWrite::Ops {
                ops,
                if_exists_done,
            } => match self.guarded(operation, ops, last).await? {
                Outcome::Done => Ok(()),
                Outcome::OpFailed { index: 0, error }
                    if *if_exists_done && error.code == ZkErrorCode::NodeExists =>
                {
                    self.nothing_to_do(operation, last).await
                }
                Outcome::OpFailed { error, .. } => Err(ExecError::Refused {
                    operation,
                    source: error,
                }),
            },
            ZkWrite::Upsert { path, data } => {
                for _ in 0..MAX_WRITE_ATTEMPTS {
                    let set = [ZkOp::set_data(path.clone(), data.clone(), ANY_VERSION)];
                    match self.guarded(operation, &set, last).await? {
                        Outcome::Done => return Ok(()),
                        Outcome::OpFailed { error, .. } if error.code == ZkErrorCode::NoNode => {}
                        Outcome::OpFailed { error, .. } => {
                            return Err(ExecError::Refused {
                                operation,
                                source: error,
                            });
                        }
                    }
                    // Absent: create it and whatever parents are missing, in one guarded op.
                    let mut missing = vec![path.clone()];
                    let mut current = parent_of(path);
                    while let Some(parent) = current {
                        if parent == "/" || self.exists(operation, parent).await? {
                            break;
                        }
                        missing.push(parent.to_owned());
                        current = parent_of(parent);
                    }
                    let creates: Vec<ZkOp> = missing
                        .iter()
                        .rev()
                        .map(|p| {
                            ZkOp::create(
                                p.clone(),
                                if p == path { data.clone() } else { Vec::new() },
                            )
                        })
                        .collect();
                    match self.guarded(operation, &creates, last).await? {
                        Outcome::Done => return Ok(()),
                        // Someone created a node meanwhile: set it on the next attempt.
                        Outcome::OpFailed { error, .. }
                            if matches!(
                                error.code,
                                ZkErrorCode::NodeExists | ZkErrorCode::NoNode
                            ) => {}
                        Outcome::OpFailed { error, .. } => {
                            return Err(ExecError::Refused {
                                operation,
                                source: error,
                            });
                        }
                    }
                }
                Err(ExecError::Refused {
                    operation,
                    source: ZkError::new(ZkErrorCode::RuntimeInconsistency, path.clone()),
                })
            }
            ZkWrite::Delete { path, recursive } => {
                for _ in 0..MAX_WRITE_ATTEMPTS {
                    let targets = if *recursive {
                        self.subtree_bottom_up(operation, path).await?
                    } else {
                        vec![path.clone()]
                    };
                    if targets.is_empty() {
                        return self.nothing_to_do(operation, last).await;
                    }
                    let deletes: Vec<ZkOp> = targets
                        .iter()
                        .map(|p| ZkOp::delete(p.clone(), ANY_VERSION))
                        .collect();
                    match self.guarded(operation, &deletes, last).await? {
                        Outcome::Done => return Ok(()),
                        Outcome::OpFailed { error, .. }
                            if error.code == ZkErrorCode::NoNode && !*recursive =>
                        {
                            return self.nothing_to_do(operation, last).await;
                        }
                        // The subtree changed between listing and deleting: list again.
                        Outcome::OpFailed { error, .. }
                            if matches!(
                                error.code,
                                ZkErrorCode::NoNode | ZkErrorCode::NotEmpty
                            ) => {}
                        Outcome::OpFailed { error, .. } => {
                            return Err(ExecError::Refused {
                                operation,
                                source: error,
                            });
                        }
                    }
                }
                Err(ExecError::Refused {
                    operation,
                    source: ZkError::new(ZkErrorCode::NotEmpty, path.clone()),
                })
            }
        }
    }

    /// `path` and everything under it, children before parents; empty if `path` is absent.
    async fn subtree_bottom_up(
        &self,
        operation: &'static str,
        path: &str,
    ) -> Result<Vec<String>, ExecError> {
        let mut order = Vec::new();
        let mut stack = vec![path.to_owned()];
        while let Some(node) = stack.pop() {
            match self.zk.get_children(&node).await {
                Ok(children) => {
                    for child in children {
                        stack.push(join(&node, &child));
                    }
                    order.push(node);
                }
                Err(e) if e.code == ZkErrorCode::NoNode => {}
                Err(e) => return Err(classify(operation, e)),
            }
        }
        // Pre-order reversed: every node after all of its descendants.
        order.reverse();
        Ok(order)
    }
}

fn classify(operation: &'static str, error: ZkError) -> ExecError {
    if error.code.is_retriable() {
        ExecError::Retriable {
            operation,
            source: error,
        }
    } else {
        ExecError::Refused {
            operation,
            source: error,
        }
    }
}

/// Runs `batch`: every write in order, each in its own guarded multi-op, the last one also
/// writing `migration_state_json` to `/migration` (alone if the batch has no writes); then the
/// notifications. On success `fence.migration_zk_version` is the new version of `/migration`.
///
/// # Errors
/// [`ExecError::Fenced`] (stop writing), [`ExecError::Retriable`] (run the batch again later),
/// [`ExecError::Refused`], [`ExecError::NoFence`]. After an error the fence is unchanged unless
/// the last write was already in.
pub async fn apply_batch<B: ZkBackend>(
    zk: &B,
    fence: &mut Fence,
    batch: &ZkWriteBatch,
    migration_state_json: &[u8],
) -> Result<WriteCounts, ExecError> {
    if fence.controller_epoch_zk_version < 0 {
        return Err(ExecError::NoFence {
            path: paths::CONTROLLER_EPOCH,
        });
    }
    if fence.migration_zk_version < 0 {
        return Err(ExecError::NoFence {
            path: paths::MIGRATION,
        });
    }
    let mut runner = Runner {
        zk,
        fence,
        migration_state_json,
        counts: WriteCounts::default(),
    };
    if batch.writes.is_empty() {
        runner.nothing_to_do("UpdateMigrationState", true).await?;
    }
    let n = batch.writes.len();
    for (i, (operation, write)) in batch.writes.iter().enumerate() {
        runner.write(operation, write, i + 1 == n).await?;
        *runner.counts.by_operation.entry(*operation).or_insert(0) += 1;
    }
    for notification in &batch.notifications {
        // A notification's parent (`/config/changes`, `/kafka-acl-changes`, …) may be missing on
        // a fresh ensemble: Kafka makes sure the persistent path exists first.
        if let Some(parent) = parent_of(notification.path()) {
            ensure_path(zk, parent).await?;
        }
        zk.apply(notification)
            .await
            .map_err(|e| classify("Notification", e))?;
        runner.counts.notifications += 1;
    }
    Ok(runner.counts)
}

/// Creates `path` and its missing ancestors with empty data (Kafka's
/// `makeSurePersistentPathExists`), unfenced.
async fn ensure_path<B: ZkBackend>(zk: &B, path: &str) -> Result<(), ExecError> {
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(p) = current {
        if p == "/"
            || zk
                .exists(p)
                .await
                .map_err(|e| classify("Notification", e))?
                .is_some()
        {
            break;
        }
        missing.push(p.to_owned());
        current = parent_of(p);
    }
    for p in missing.into_iter().rev() {
        match zk.apply(&ZkOp::create(p, Vec::new())).await {
            Ok(_) => {}
            Err(e) if e.code == ZkErrorCode::NodeExists => {}
            Err(e) => return Err(classify("Notification", e)),
        }
    }
    Ok(())
}
