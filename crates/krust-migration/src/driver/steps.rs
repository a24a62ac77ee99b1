//! [`super::MigrationDriver`]: the state steps run on each poll (Kafka's per-state events) and the gates of facts §6.4.

#[allow(clippy::wildcard_imports)]
use super::*;

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    pub(super) fn run_state_step(&mut self, now: Instant) {
        if let Some(retry) = self.retry.take() {
            self.issue_write(now, retry.purpose, retry.steps);
            self.resent = true;
            return;
        }
        match self.state {
            MigrationDriverState::Uninitialized => {
                self.issue_get_or_create(now, Purpose::Recover);
            }
            MigrationDriverState::Inactive => {
                if self.reload_pending && self.is_leader() {
                    self.issue_get_or_create(now, Purpose::LeaderReload);
                }
            }
            MigrationDriverState::WaitForControllerQuorum => self.check_controller_quorum(),
            MigrationDriverState::WaitForBrokers => {
                if self.first_publish {
                    let roots = vec![BROKER_IDS_PATH.to_owned(), BROKER_TOPICS_PATH.to_owned()];
                    self.issue(
                        now,
                        Purpose::ReadBrokers,
                        ZkRequest::ReadTrees { roots },
                        Vec::new(),
                    );
                } else {
                    self.waiting_for = Some(WaitReason::FirstImage);
                }
            }
            MigrationDriverState::BecomeController => {
                if self.leadership.has_zk_controller() {
                    self.issue_rewrite_migration(now);
                } else {
                    let paths = vec![CONTROLLER_EPOCH_PATH.to_owned(), CONTROLLER_PATH.to_owned()];
                    self.issue(
                        now,
                        Purpose::ReadControllerZnodes,
                        ZkRequest::Get { paths },
                        Vec::new(),
                    );
                }
            }
            MigrationDriverState::ZkMigration => {
                if self.copy.is_some() {
                    self.issue_next_append(now);
                } else {
                    // Kafka logs this before reading ZooKeeper, and its copy time (the
                    // manifest's) includes the reads: so does krust's.
                    info!(node_id = self.config.node_id, "Starting ZK migration");
                    let roots = self.reader.metadata_roots();
                    self.issue(
                        now,
                        Purpose::ReadForCopy,
                        ZkRequest::ReadTrees { roots },
                        Vec::new(),
                    );
                }
            }
            MigrationDriverState::SyncKraftToZk => {
                if self.image_behind_zk() {
                    return;
                }
                let roots = self.writer.snapshot_roots();
                self.issue(
                    now,
                    Purpose::ReadForSync,
                    ZkRequest::ReadTrees { roots },
                    Vec::new(),
                );
            }
            MigrationDriverState::KraftControllerToBrokerComm => {
                if self.image_behind_zk() {
                    return;
                }
                info!(
                    node_id = self.config.node_id,
                    "Sending RPCs to broker before moving to dual-write mode using at offset and epoch {}",
                    self.image_position()
                );
                let rpcs = self
                    .propagator
                    .rpcs_for_image(&self.image, self.leadership.zk_controller_epoch);
                self.push_rpcs(true, rpcs);
                self.transition(MigrationDriverState::DualWrite);
            }
            MigrationDriverState::DualWrite => self.drive_dual_writes(now),
        }
    }

    pub(super) fn image_position(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(
            self.image.provenance.last_contained_offset,
            self.image.provenance.last_contained_epoch,
        )
    }

    /// Whether the image lacks what `/migration` says ZooKeeper holds (then waits).
    pub(super) fn image_behind_zk(&mut self) -> bool {
        let image = self.image_position();
        let migration = self.leadership.offset_and_epoch();
        if image < migration {
            self.waiting_for = Some(WaitReason::ImageBehindZk { image, migration });
            true
        } else {
            false
        }
    }

    pub(super) fn check_controller_quorum(&mut self) {
        if !self.first_publish {
            self.waiting_for = Some(WaitReason::FirstImage);
            return;
        }
        let zk_migration_state = self.image.features.zk_migration_state;
        match zk_migration_state {
            ZkMigrationState::None => {
                error!(
                    node_id = self.config.node_id,
                    "The controller's ZkMigrationState is NONE which means this cluster should not be migrated from ZooKeeper. This controller should not be configured with 'zookeeper.metadata.migration.enable' set to true. Will not proceed with a migration."
                );
                self.transition(MigrationDriverState::Inactive);
                self.waiting_for = Some(WaitReason::MigrationNotAllowed { zk_migration_state });
            }
            ZkMigrationState::PreMigration => match self.controller_quorum_not_ready() {
                Some(reason) => {
                    warn!(node_id = self.config.node_id, reason = ?reason, "Still waiting for all controller nodes ready to begin the migration.");
                    self.waiting_for = Some(WaitReason::ControllerQuorum(reason));
                }
                None => {
                    info!(
                        node_id = self.config.node_id,
                        "Controller Quorum is ready for Zk to KRaft migration. Now waiting for ZK brokers."
                    );
                    self.transition(MigrationDriverState::WaitForBrokers);
                }
            },
            ZkMigrationState::Migration => {
                if self.leadership.initial_migration_done() {
                    info!(
                        node_id = self.config.node_id,
                        "Migration is in already progress, not waiting on ZK brokers."
                    );
                    self.transition(MigrationDriverState::BecomeController);
                } else {
                    // The log holds the copy's committed transaction (the loader publishes
                    // MIGRATION only after its EndTransactionRecord), but `/migration` does not
                    // record it: the previous leader failed between the commit and that write.
                    // Kafka 3.9 stops here for good; the log is the truth, so carry on — the
                    // reconciliation after the claim records the synced offset in `/migration`.
                    warn!(
                        node_id = self.config.node_id,
                        "KRaft controller indicates an active migration, but the ZK state does not. The copy is committed in the metadata log; continuing from the log."
                    );
                    self.transition(MigrationDriverState::BecomeController);
                }
            }
            ZkMigrationState::PostMigration => {
                error!(
                    node_id = self.config.node_id,
                    "KRaft controller indicates a completed migration, but the migration driver is somehow active."
                );
                self.transition(MigrationDriverState::Inactive);
                self.waiting_for = Some(WaitReason::MigrationNotAllowed { zk_migration_state });
            }
        }
    }

    /// Kafka's `reasonAllControllersZkMigrationNotReady`.
    pub(super) fn controller_quorum_not_ready(&self) -> Option<QuorumNotReady> {
        let mv = self.image.metadata_version();
        if !mv.is_migration_supported() {
            return Some(QuorumNotReady::MetadataVersionTooLow(mv));
        }
        if !mv.is_controller_registration_supported() {
            return None;
        }
        for id in &self.config.quorum_voter_ids {
            match self.image.cluster.controllers.get(id) {
                None => return Some(QuorumNotReady::NotRegistered(*id)),
                Some(c) if !c.zk_migration_ready => {
                    return Some(QuorumNotReady::NotMigrationReady(*id));
                }
                Some(_) => {}
            }
        }
        None
    }

    /// WAIT_FOR_BROKERS's gate over `/brokers/ids` + `/brokers/topics` and the image.
    pub(super) fn broker_wait(&mut self, tree: &ZkTree) -> Result<BrokerWait, String> {
        let zk_ids: BTreeSet<i32> = tree
            .children(BROKER_IDS_PATH)
            .unwrap_or_default()
            .iter()
            .filter_map(|name| name.parse::<i32>().ok())
            .collect();
        let assignment_ids = self
            .reader
            .assignment_broker_ids(tree)
            .map_err(|e| format!("reading topic assignments: {e}"))?;
        let migrating: BTreeSet<i32> = self
            .image
            .cluster
            .brokers
            .values()
            .filter(|b| b.is_migrating_zk_broker)
            .map(|b| b.id)
            .collect();
        let mut wait = BrokerWait {
            no_brokers_in_kraft: self.image.cluster.brokers.is_empty(),
            no_brokers_in_zk: zk_ids.is_empty(),
            ..BrokerWait::default()
        };
        let controller_ids: BTreeSet<i32> = self
            .config
            .quorum_voter_ids
            .iter()
            .copied()
            .chain(self.image.cluster.controllers.keys().copied())
            .collect();
        wait.controller_ids = zk_ids
            .union(&assignment_ids)
            .filter(|id| controller_ids.contains(id))
            .copied()
            .collect();
        for id in zk_ids.difference(&migrating) {
            wait.missing.insert(*id, MissingBroker::ZkRegistered);
        }
        for id in assignment_ids.difference(&migrating) {
            wait.missing
                .entry(*id)
                .or_insert(MissingBroker::AssignmentOnly);
        }
        Ok(wait)
    }
}
