//! [`super::MigrationDriver`]: issuing ZooKeeper requests and migration batches, and the fence of facts §6.7.

#[allow(clippy::wildcard_imports)]
use super::*;

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    pub(super) fn next_id(&mut self) -> RequestId {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    pub(super) fn current_epoch(&self) -> Option<i32> {
        self.is_leader().then_some(self.leader.leader_epoch)
    }

    pub(super) fn issue(
        &mut self,
        now: Instant,
        purpose: Purpose<P::Rpcs>,
        request: ZkRequest,
        steps: Vec<ZkStep>,
    ) {
        debug_assert!(self.in_flight.is_none(), "one request at a time");
        let id = self.next_id();
        self.in_flight = Some(InFlight {
            id,
            issued_at: now,
            purpose,
            steps,
        });
        self.actions.push_back(MigrationAction::Zk {
            id,
            leader_epoch: self.current_epoch(),
            request,
        });
    }

    pub(super) fn issue_write(
        &mut self,
        now: Instant,
        purpose: Purpose<P::Rpcs>,
        steps: Vec<ZkStep>,
    ) {
        let request = ZkRequest::Write {
            steps: steps.clone(),
        };
        self.issue(now, purpose, request, steps);
    }

    pub(super) fn issue_get_or_create(&mut self, now: Instant, purpose: Purpose<P::Rpcs>) {
        let request = ZkRequest::GetOrCreateMigration {
            top_level_paths: TOP_LEVEL_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            initial_data: ZkMigrationLeadershipState::EMPTY.to_migration_json(),
        };
        self.issue(now, purpose, request, Vec::new());
    }

    pub(super) fn issue_rewrite_migration(&mut self, now: Instant) {
        // KAFKA-16171 / KAFKA-16667: ZooKeeper does not order our earlier read of /migration
        // after the previous controller's last write to it; a write unconditional on
        // /migration tells us its latest version before any fenced write. Unlike Kafka's, it
        // is still fenced by our claim of /controller_epoch, so a deposed leader's late
        // rewrite cannot land.
        let steps = vec![ZkStep::Multi(vec![
            self.controller_epoch_check(),
            ZkOp::set_data(
                MIGRATION_PATH,
                self.leadership.to_migration_json(),
                ANY_VERSION,
            ),
        ])];
        self.issue_write(now, Purpose::RewriteMigration, steps);
    }

    pub(super) fn issue_next_append(&mut self, now: Instant) {
        let Some(epoch) = self.current_epoch() else {
            return;
        };
        let Some(copy) = self.copy.as_mut() else {
            return;
        };
        let Some((kind, records)) = copy.appends.pop_front() else {
            return;
        };
        self.waiting_for = Some(WaitReason::CopyCommit {
            committed_batches: copy.committed_batches,
            remaining_batches: copy.appends.len() + 1,
        });
        let append = CopyAppend {
            kind,
            records: records.len(),
            counts: records.iter().map(|r| r.record.record_type()).collect(),
        };
        info!(
            node_id = self.config.node_id,
            "Waiting for {}",
            append.wait_action()
        );
        let id = self.next_id();
        self.in_flight = Some(InFlight {
            id,
            issued_at: now,
            purpose: Purpose::AppendCopy(append),
            steps: Vec::new(),
        });
        self.actions.push_back(MigrationAction::AppendRecords {
            id,
            leader_epoch: epoch,
            records,
        });
    }

    pub(super) fn take_in_flight(&mut self, id: RequestId) -> Option<InFlight<P::Rpcs>> {
        if self.in_flight.as_ref().is_some_and(|f| f.id == id) {
            self.in_flight.take()
        } else {
            None
        }
    }

    pub(super) fn controller_epoch_check(&self) -> ZkOp {
        ZkOp::check(
            CONTROLLER_EPOCH_PATH,
            self.leadership.zk_controller_epoch_zk_version,
        )
    }

    /// Facts §6.7: each write in its own multi-op checking `/controller_epoch` and
    /// `/migration`; notifications after, unfenced; then `/migration` set to `new_state` at
    /// its known version (the bump that tells any other writer it lost).
    pub(super) fn fenced_steps(
        &self,
        batch: &ZkWriteBatch,
        new_state: &ZkMigrationLeadershipState,
    ) -> Vec<ZkStep> {
        assert!(
            self.leadership.has_zk_controller(),
            "fenced writes need a ZooKeeper controller claim"
        );
        let migration_version = self.leadership.migration_zk_version;
        let mut steps: Vec<ZkStep> = batch
            .ops
            .iter()
            .map(|op| {
                ZkStep::Multi(vec![
                    self.controller_epoch_check(),
                    ZkOp::check(MIGRATION_PATH, migration_version),
                    op.clone(),
                ])
            })
            .collect();
        steps.extend(batch.notifications.iter().cloned().map(ZkStep::Single));
        steps.push(ZkStep::Multi(vec![
            self.controller_epoch_check(),
            ZkOp::set_data(
                MIGRATION_PATH,
                new_state.to_migration_json(),
                migration_version,
            ),
        ]));
        steps
    }

    pub(super) fn push_rpcs(&mut self, full: bool, rpcs: P::Rpcs) {
        if let Some(leader_epoch) = self.current_epoch() {
            self.actions.push_back(MigrationAction::SendRpcs {
                leader_epoch,
                zk_controller_epoch: self.leadership.zk_controller_epoch,
                full,
                rpcs,
            });
        }
    }

    pub(super) fn abort_copy(&mut self, reason: String) {
        let manifest = self.copy.take().map(|c| c.manifest).unwrap_or_default();
        error!(
            node_id = self.config.node_id,
            "Aborting the metadata migration from ZooKeeper to KRaft. {manifest}. {reason}"
        );
        self.last_error = Some(reason.clone());
        if let Some(leader_epoch) = self.current_epoch() {
            self.actions.push_back(MigrationAction::AbortMigration {
                leader_epoch,
                reason,
            });
        }
        self.in_flight = None;
        self.retry = None;
        self.reload_pending = false;
        self.transition(MigrationDriverState::Inactive);
    }
}
