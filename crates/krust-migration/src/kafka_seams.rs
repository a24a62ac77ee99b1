//! The driver's seams ([`crate::driver::seams`]) implemented with Kafka's reader and writer
//! ([`crate::reader`], [`crate::writer`]): what a controller node plugs into the
//! [`crate::driver::MigrationDriver`].
//!
//! The writer speaks in whole writes (`Upsert`, recursive `Delete`, grouped creates that may
//! already be done); the driver fences one ZooKeeper operation at a time (facts §6.7, as
//! Kafka wraps every create/setData/delete in its own multi-op). [`KafkaZkWriter`] turns the
//! former into the latter against its picture of which znodes exist: the tree read for the
//! last full reconciliation, moved forward by every operation it hands out. A picture that is
//! wrong (another writer, a failed write) makes an operation fail with NONODE/NODEEXISTS; the
//! driver then reactivates and reconciles against a fresh read, which repairs ZooKeeper and
//! the picture together.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use krust_metadata::{MetadataDelta, MetadataImage, MetadataVersion};
use krust_zk::model::password::PasswordEncoder;
use krust_zk::ops::{ANY_VERSION, ZkOp};
use krust_zk::tree::{ZkTree, parent_of};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tracing::error;

use crate::driver::seams::{
    BrokerPropagator, SeamError, ZkMetadataCopy, ZkMetadataReader, ZkMetadataWriter,
    ZkWriteBatch as DriverWriteBatch,
};
use crate::propagator::{
    OutgoingRequest, PropagatorContext, requests_for_delta, requests_for_image,
};
use crate::reader::{MIGRATION_READ_ROOTS, ZkMetadata, read_all_metadata};
use crate::writer::{WriterContext, ZkWrite, ZkWriteBatch, reconcile, write_delta};

/// The KRaft controller epoch the writer stamps into partition state znodes (Kafka 3.9's
/// `ZkTopicMigrationClient` writes `kraftControllerEpoch`), kept current by the runtime on
/// every leader change.
#[derive(Debug, Clone, Default)]
pub struct KraftEpoch(Arc<AtomicI32>);

impl KraftEpoch {
    /// Sets the epoch.
    pub fn set(&self, epoch: i32) {
        self.0.store(epoch, Ordering::Relaxed);
    }

    /// The epoch.
    #[must_use]
    pub fn get(&self) -> i32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// [`ZkMetadataReader`] over [`crate::reader`].
#[derive(Debug)]
pub struct KafkaZkReader {
    metadata_version: MetadataVersion,
    password_encoder: Option<PasswordEncoder>,
    rng: StdRng,
}

impl KafkaZkReader {
    /// A reader producing records for `metadata_version`, decrypting password configs with
    /// `password_encoder`; ACL ids drawn from `seed`.
    #[must_use]
    pub fn new(
        metadata_version: MetadataVersion,
        password_encoder: Option<PasswordEncoder>,
        seed: u64,
    ) -> Self {
        Self {
            metadata_version,
            password_encoder,
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

impl ZkMetadataReader for KafkaZkReader {
    fn metadata_roots(&self) -> Vec<String> {
        MIGRATION_READ_ROOTS
            .iter()
            .map(|r| (*r).to_owned())
            .collect()
    }

    fn read_all_metadata(&mut self, zk: &ZkTree) -> Result<ZkMetadataCopy, SeamError> {
        let copy = read_all_metadata(
            zk,
            self.metadata_version,
            self.password_encoder.as_ref(),
            &mut self.rng,
        )?;
        Ok(ZkMetadataCopy {
            batches: copy.batches,
            broker_ids: copy.broker_ids,
        })
    }

    fn assignment_broker_ids(&self, zk: &ZkTree) -> Result<BTreeSet<i32>, SeamError> {
        let metadata = ZkMetadata::parse(zk, None)?;
        Ok(metadata
            .topics
            .iter()
            .flat_map(|t| t.partitions.values())
            .flat_map(|p| p.replicas.iter().chain(&p.adding_replicas).copied())
            .collect())
    }
}

/// [`ZkMetadataWriter`] over [`crate::writer`].
#[derive(Debug)]
pub struct KafkaZkWriter {
    kraft_epoch: KraftEpoch,
    password_encoder: Option<PasswordEncoder>,
    rng: StdRng,
    /// The znodes believed to exist (see the module doc).
    known: BTreeSet<String>,
}

impl KafkaZkWriter {
    /// A writer stamping `kraft_epoch` into partition states and encrypting password configs
    /// with `password_encoder`.
    #[must_use]
    pub fn new(
        kraft_epoch: KraftEpoch,
        password_encoder: Option<PasswordEncoder>,
        seed: u64,
    ) -> Self {
        Self {
            kraft_epoch,
            password_encoder,
            rng: StdRng::seed_from_u64(seed),
            known: BTreeSet::new(),
        }
    }

    fn context(&self) -> WriterContext {
        WriterContext {
            kraft_controller_epoch: self.kraft_epoch.get(),
            password_encoder: self.password_encoder.clone(),
        }
    }

    /// The writer's batch as single operations, against (and updating) `known`.
    fn single_ops(&mut self, batch: ZkWriteBatch) -> DriverWriteBatch {
        let counts: BTreeMap<String, usize> = batch
            .counts()
            .into_iter()
            .map(|(name, n)| (name.to_owned(), n))
            .collect();
        let mut ops = Vec::new();
        for (_, write) in batch.writes {
            match write {
                ZkWrite::Ops {
                    ops: group,
                    if_exists_done,
                } => {
                    let done = if_exists_done
                        && group.first().is_some_and(|op| {
                            matches!(op, ZkOp::Create { .. }) && self.known.contains(op.path())
                        });
                    if done {
                        continue;
                    }
                    for op in group {
                        self.track(&op);
                        ops.push(op);
                    }
                }
                ZkWrite::Upsert { path, data } => {
                    if self.known.contains(&path) {
                        ops.push(ZkOp::set_data(path, data, ANY_VERSION));
                    } else {
                        let mut missing = Vec::new();
                        let mut parent = parent_of(&path);
                        while let Some(p) = parent {
                            if p == "/" || self.known.contains(p) {
                                break;
                            }
                            missing.push(p.to_owned());
                            parent = parent_of(p);
                        }
                        for p in missing.into_iter().rev() {
                            let op = ZkOp::create(p, Vec::new());
                            self.track(&op);
                            ops.push(op);
                        }
                        let op = ZkOp::create(path, data);
                        self.track(&op);
                        ops.push(op);
                    }
                }
                ZkWrite::Delete { path, recursive } => {
                    let mut doomed: Vec<String> = if recursive {
                        let prefix = format!("{path}/");
                        self.known
                            .range(prefix.clone()..)
                            .take_while(|p| p.starts_with(&prefix))
                            .cloned()
                            .collect()
                    } else {
                        Vec::new()
                    };
                    // Deepest first, so every node is empty when deleted.
                    doomed.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
                    if self.known.contains(&path) {
                        doomed.push(path);
                    }
                    for p in doomed {
                        let op = ZkOp::delete(p, ANY_VERSION);
                        self.track(&op);
                        ops.push(op);
                    }
                }
            }
        }
        DriverWriteBatch {
            ops,
            notifications: batch.notifications,
            counts,
        }
    }

    fn track(&mut self, op: &ZkOp) {
        match op {
            ZkOp::Create { path, mode, .. } if !mode.is_sequential() => {
                self.known.insert(path.clone());
            }
            ZkOp::Delete { path, .. } => {
                self.known.remove(path);
            }
            _ => {}
        }
    }
}

impl ZkMetadataWriter for KafkaZkWriter {
    fn snapshot_roots(&self) -> Vec<String> {
        MIGRATION_READ_ROOTS
            .iter()
            .map(|r| (*r).to_owned())
            .collect()
    }

    fn snapshot_writes(
        &mut self,
        image: &MetadataImage,
        zk: &ZkTree,
        _zk_controller_epoch: i32,
    ) -> Result<DriverWriteBatch, SeamError> {
        self.known = zk.paths().map(str::to_owned).collect();
        let ctx = self.context();
        let batch = reconcile(image, zk, &ctx, &mut self.rng)?;
        Ok(self.single_ops(batch))
    }

    fn delta_writes(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        _zk_controller_epoch: i32,
    ) -> Result<DriverWriteBatch, SeamError> {
        let ctx = self.context();
        let batch = write_delta(delta, delta.image(), image, &ctx, &mut self.rng);
        Ok(self.single_ops(batch))
    }
}

/// [`BrokerPropagator`] over [`crate::propagator`].
#[derive(Debug, Clone)]
pub struct KafkaPropagator {
    controller_id: i32,
    inter_broker_listener_name: String,
}

impl KafkaPropagator {
    /// Requests from KRaft controller `controller_id`, addressed to the brokers' leaders on
    /// `inter_broker_listener_name`.
    #[must_use]
    pub fn new(controller_id: i32, inter_broker_listener_name: String) -> Self {
        Self {
            controller_id,
            inter_broker_listener_name,
        }
    }

    fn context(&self, zk_controller_epoch: i32) -> PropagatorContext {
        PropagatorContext {
            controller_id: self.controller_id,
            zk_controller_epoch,
            inter_broker_listener_name: self.inter_broker_listener_name.clone(),
        }
    }
}

impl BrokerPropagator for KafkaPropagator {
    type Rpcs = Vec<OutgoingRequest>;

    fn rpcs_for_image(&mut self, image: &MetadataImage, zk_controller_epoch: i32) -> Self::Rpcs {
        requests_for_image(image, &self.context(zk_controller_epoch)).unwrap_or_else(|e| {
            // Kafka fails the whole batch the same way; the next image retries.
            error!(error = %e, "cannot build the requests for the ZooKeeper brokers");
            Vec::new()
        })
    }

    fn rpcs_for_delta(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        zk_controller_epoch: i32,
    ) -> Option<Self::Rpcs> {
        match requests_for_delta(delta, image, &self.context(zk_controller_epoch)) {
            Ok(requests) if requests.is_empty() => None,
            Ok(requests) => Some(requests),
            Err(e) => {
                error!(error = %e, "cannot build the requests for the ZooKeeper brokers");
                None
            }
        }
    }
}
