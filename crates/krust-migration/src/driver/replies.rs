//! [`super::MigrationDriver`]: ZooKeeper replies and failures: recovery, the claim of facts §6.6, the copy of §6.8, the reconciliation.

#[allow(clippy::wildcard_imports)]
use super::*;

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    pub(super) fn on_zk_failure(
        &mut self,
        now: Instant,
        in_flight: InFlight<P::Rpcs>,
        failure: &ZkFailure,
    ) {
        let code = failure.error.code;
        let resent = std::mem::take(&mut self.resent);
        if let Purpose::VerifyLostWrite { .. } = in_flight.purpose {
            self.reactivate(format!(
                "ZooKeeper write failed and reading /migration back failed too: {failure}"
            ));
            return;
        }
        if code.is_retriable() {
            self.zk_retries += 1;
            if self.consecutive_zk_failures == 0 {
                // Retry soon, then back off (the poll interval may have grown long while all
                // was well, e.g. in DUAL_WRITE).
                self.backoff.reset();
                self.next_poll_at = Some(now + self.backoff.next_interval());
            }
            self.consecutive_zk_failures = self.consecutive_zk_failures.saturating_add(1);
            debug!(node_id = self.config.node_id, error = %failure, "Encountered ZooKeeper error. Will retry.");
            self.waiting_for = Some(WaitReason::Zk {
                error: failure.error.to_string(),
            });
            if !in_flight.steps.is_empty() {
                // The steps before the failed one were applied and none of them bumped
                // /migration (only the last step does), so the rest still fences correctly.
                let steps = in_flight
                    .steps
                    .get(failure.step..)
                    .unwrap_or_default()
                    .to_vec();
                self.retry = Some(Retry {
                    purpose: in_flight.purpose,
                    steps,
                });
            }
            return;
        }
        // A re-sent dual-write refused as if it had been applied: its first send may have been
        // (the connection dropped before the reply came). `/migration` tells: the multi-op
        // that set it is all or nothing.
        let lost_reply = resent
            && matches!(
                code,
                ZkErrorCode::NodeExists | ZkErrorCode::BadVersion | ZkErrorCode::NoNode
            );
        let in_flight = match in_flight.purpose {
            Purpose::WriteDualWrite(prepared) if lost_reply => {
                if let Some((data, version)) = migration_set(&in_flight.steps) {
                    info!(node_id = self.config.node_id, error = %failure, "A re-sent ZooKeeper write was refused: reading /migration to tell whether the first send was applied");
                    self.issue(
                        now,
                        Purpose::VerifyLostWrite {
                            prepared,
                            data,
                            version,
                        },
                        ZkRequest::Get {
                            paths: vec![MIGRATION_PATH.to_owned()],
                        },
                        Vec::new(),
                    );
                    return;
                }
                InFlight {
                    purpose: Purpose::WriteDualWrite(prepared),
                    ..in_flight
                }
            }
            purpose => InFlight {
                purpose,
                ..in_flight
            },
        };
        if code == ZkErrorCode::AuthFailed || code == ZkErrorCode::NoAuth {
            error!(node_id = self.config.node_id, error = %failure, "Encountered ZooKeeper authentication error");
        }
        match in_flight.purpose {
            Purpose::Claim { .. }
                if matches!(
                    code,
                    ZkErrorCode::BadVersion | ZkErrorCode::NoNode | ZkErrorCode::NodeExists
                ) =>
            {
                info!(node_id = self.config.node_id, error = %failure, "Unable to claim leadership, will retry until we learn of a different KRaft leader");
                self.waiting_for = Some(WaitReason::ClaimRace);
            }
            Purpose::Recover
            | Purpose::LeaderReload
            | Purpose::ReadBrokers
            | Purpose::ReadControllerZnodes
            | Purpose::ReadForCopy
            | Purpose::ReadForSync
            | Purpose::Claim { .. } => {
                self.last_error = Some(format!("ZooKeeper error: {failure}"));
            }
            Purpose::ReadForSnapshotDualWrite { image } => {
                self.last_error = Some(format!("ZooKeeper error: {failure}"));
                self.dual_writes.push_front(DualWriteJob::Snapshot(image));
            }
            Purpose::AppendCopy(_) => {}
            Purpose::RewriteMigration
            | Purpose::PersistCopy { .. }
            | Purpose::WriteSync { .. }
            | Purpose::WriteDualWrite(_)
            | Purpose::VerifyLostWrite { .. } => {
                let fenced = code == ZkErrorCode::BadVersion
                    && (failure.error.path == MIGRATION_PATH
                        || failure.error.path == CONTROLLER_EPOCH_PATH);
                let reason = if fenced {
                    format!(
                        "Conditional update on {} failed ({failure}). This indicates that another KRaft controller is making writes to ZooKeeper.",
                        failure.error.path
                    )
                } else {
                    format!("ZooKeeper write failed: {failure}")
                };
                self.reactivate(reason);
            }
        }
    }

    pub(super) fn on_zk_reply(
        &mut self,
        now: Instant,
        in_flight: InFlight<P::Rpcs>,
        reply: ZkReply,
    ) {
        let expected_state = match &in_flight.purpose {
            Purpose::Recover => MigrationDriverState::Uninitialized,
            Purpose::LeaderReload => MigrationDriverState::Inactive,
            Purpose::ReadBrokers => MigrationDriverState::WaitForBrokers,
            Purpose::ReadControllerZnodes | Purpose::Claim { .. } | Purpose::RewriteMigration => {
                MigrationDriverState::BecomeController
            }
            Purpose::ReadForCopy | Purpose::AppendCopy(_) | Purpose::PersistCopy { .. } => {
                MigrationDriverState::ZkMigration
            }
            Purpose::ReadForSync | Purpose::WriteSync { .. } => MigrationDriverState::SyncKraftToZk,
            Purpose::ReadForSnapshotDualWrite { .. }
            | Purpose::WriteDualWrite(_)
            | Purpose::VerifyLostWrite { .. } => self.state,
        };
        if self.state != expected_state {
            debug!(node_id = self.config.node_id, state = %self.state, "ignoring a reply for another state");
            return;
        }
        self.consecutive_zk_failures = 0;
        if matches!(self.waiting_for, Some(WaitReason::Zk { .. })) {
            self.waiting_for = None;
        }
        match (in_flight.purpose, reply) {
            (Purpose::Recover, ZkReply::Migration { data, stat }) => {
                match ZkMigrationLeadershipState::from_migration_json(
                    &data,
                    stat.version,
                    stat.mtime,
                ) {
                    Ok(recovered) => {
                        self.leadership = recovered;
                        let done = if recovered.initial_migration_done() {
                            "done"
                        } else {
                            "not done"
                        };
                        info!(
                            node_id = self.config.node_id,
                            "Recovered migration state from ZK: {recovered}. Initial migration of ZK metadata is {done}."
                        );
                        self.transition(MigrationDriverState::Inactive);
                        self.apply_leader();
                    }
                    Err(e) => self.last_error = Some(e.to_string()),
                }
            }
            (Purpose::LeaderReload, ZkReply::Migration { data, stat }) => {
                match ZkMigrationLeadershipState::from_migration_json(
                    &data,
                    stat.version,
                    stat.mtime,
                ) {
                    Ok(recovered) => {
                        self.leadership = recovered
                            .with_new_kraft_controller(
                                self.config.node_id,
                                self.leader.leader_epoch,
                            )
                            .with_unknown_zk_controller();
                        self.reload_pending = false;
                        info!(
                            node_id = self.config.node_id,
                            "Became active migration driver: {}", self.leadership
                        );
                        self.transition(MigrationDriverState::WaitForControllerQuorum);
                    }
                    Err(e) => self.last_error = Some(e.to_string()),
                }
            }
            (Purpose::ReadBrokers, ZkReply::Trees(tree)) => match self.broker_wait(&tree) {
                Ok(wait)
                    if !wait.no_brokers_in_kraft
                        && !wait.no_brokers_in_zk
                        && wait.missing.is_empty()
                        && wait.controller_ids.is_empty() =>
                {
                    info!(
                        node_id = self.config.node_id,
                        "Zk brokers are registered and ready for migration"
                    );
                    self.transition(MigrationDriverState::BecomeController);
                }
                Ok(wait) => {
                    let collision = !wait.controller_ids.is_empty();
                    let reason = WaitReason::Brokers(wait);
                    if collision {
                        error!(node_id = self.config.node_id, "{reason}");
                    } else {
                        info!(node_id = self.config.node_id, "{reason}");
                    }
                    self.waiting_for = Some(reason);
                }
                Err(e) => self.last_error = Some(e),
            },
            (Purpose::ReadControllerZnodes, ZkReply::Got(entries)) => {
                self.on_controller_znodes(now, &entries);
            }
            (
                Purpose::Claim {
                    new_zk_controller_epoch,
                },
                ZkReply::Wrote(results),
            ) => {
                let version = results
                    .first()
                    .and_then(|r| r.first())
                    .and_then(|r| match r {
                        ZkOpResult::SetData { stat } => Some(stat.version),
                        _ => None,
                    });
                match version {
                    Some(version) => {
                        self.leadership = self
                            .leadership
                            .with_zk_controller(new_zk_controller_epoch, version);
                        info!(
                            node_id = self.config.node_id,
                            "Claimed ZK controller leadership with ZK controller epoch {new_zk_controller_epoch}"
                        );
                        self.issue_rewrite_migration(now);
                    }
                    None => {
                        self.last_error =
                            Some("claim multi-op reply without a setData result".to_owned());
                    }
                }
            }
            (Purpose::RewriteMigration, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                // The log's MIGRATION state also means the copy is done (see the quorum step).
                if self.leadership.initial_migration_done()
                    || self.image.features.zk_migration_state == ZkMigrationState::Migration
                {
                    self.transition(MigrationDriverState::SyncKraftToZk);
                } else {
                    self.transition(MigrationDriverState::ZkMigration);
                }
            }
            (Purpose::ReadForCopy, ZkReply::Trees(tree)) => {
                self.start_copy(now, in_flight.issued_at, &tree);
            }
            (Purpose::PersistCopy { position }, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.leadership = self
                    .leadership
                    .with_kraft_metadata_offset_and_epoch(position.offset, position.epoch);
                self.copy = None;
                info!(
                    node_id = self.config.node_id,
                    "Finished initial migration of ZK metadata to KRaft: {}", self.leadership
                );
                // Even after a copy, pass through SYNC_KRAFT_TO_ZK (Kafka does, to check
                // consistency and exercise the snapshot path).
                self.transition(MigrationDriverState::SyncKraftToZk);
            }
            (Purpose::ReadForSync, ZkReply::Trees(tree)) => {
                let started = in_flight.issued_at;
                match self.writer.snapshot_writes(
                    &self.image,
                    &tree,
                    self.leadership.zk_controller_epoch,
                ) {
                    Ok(batch)
                        if batch.is_empty()
                            && self.image_position() <= self.leadership.offset_and_epoch() =>
                    {
                        info!(
                            node_id = self.config.node_id,
                            "Did not make any ZK writes when reconciling with KRaft state."
                        );
                        self.record_snapshot_time(now, started);
                        self.transition(MigrationDriverState::KraftControllerToBrokerComm);
                    }
                    Ok(batch) => {
                        info!(node_id = self.config.node_id, counts = ?batch.counts, "Made the following ZK writes when reconciling with KRaft state");
                        // ZooKeeper now reflects the image: say so in /migration (Kafka keeps
                        // the older offset until the next delta, which shows as write-behind
                        // lag although nothing is behind).
                        let synced = self.image_position();
                        let new_state = self
                            .leadership
                            .with_kraft_metadata_offset_and_epoch(synced.offset, synced.epoch);
                        let steps = self.fenced_steps(&batch, &new_state);
                        self.issue_write(now, Purpose::WriteSync { started, synced }, steps);
                    }
                    Err(e) => {
                        self.last_error = Some(format!("reconciling KRaft with ZK: {e}"));
                    }
                }
            }
            (Purpose::WriteSync { started, synced }, ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.record_snapshot_time(now, started);
                if synced > self.leadership.offset_and_epoch() {
                    self.leadership = self
                        .leadership
                        .with_kraft_metadata_offset_and_epoch(synced.offset, synced.epoch);
                    self.dual_write_offset = Some(synced.offset);
                }
                if self.image_position() > synced {
                    // Images published while the reconciliation's writes were under way were
                    // ignored (not yet dual-writing): reconcile with the latest one first
                    // thing in dual-write. (Kafka's single event thread has no such window.)
                    self.dual_writes
                        .push_back(DualWriteJob::Snapshot(self.image.clone()));
                }
                self.transition(MigrationDriverState::KraftControllerToBrokerComm);
            }
            (Purpose::ReadForSnapshotDualWrite { image }, ZkReply::Trees(tree)) => {
                self.prepare_snapshot_dual_write(now, image, &tree, in_flight.issued_at);
            }
            (Purpose::WriteDualWrite(prepared), ZkReply::Wrote(results)) => {
                self.learn_migration_version(&in_flight.steps, &results);
                self.finish_dual_write(now, prepared);
            }
            (
                Purpose::VerifyLostWrite {
                    prepared,
                    data,
                    version,
                },
                ZkReply::Got(entries),
            ) => match entries.first() {
                Some(Some((found, stat)))
                    if *found == data && stat.version == version.saturating_add(1) =>
                {
                    info!(
                        node_id = self.config.node_id,
                        "The re-sent ZooKeeper write had been applied (its reply was lost): going on"
                    );
                    self.leadership = self
                        .leadership
                        .with_migration_zk_version(stat.version, stat.mtime);
                    self.finish_dual_write(now, prepared);
                }
                _ => self.reactivate(
                    "Conditional update on /migration failed: another KRaft controller is making writes to ZooKeeper.".to_owned(),
                ),
            },
            (purpose, reply) => {
                error!(node_id = self.config.node_id, purpose = ?purpose, reply = ?reply, "unexpected ZooKeeper reply");
                self.last_error = Some("unexpected ZooKeeper reply".to_owned());
            }
        }
    }

    /// The bookkeeping of a dual-write ZooKeeper applied.
    fn finish_dual_write(&mut self, now: Instant, prepared: PreparedWrite<P::Rpcs>) {
        self.leadership = self
            .leadership
            .with_kraft_metadata_offset_and_epoch(prepared.target.offset, prepared.target.epoch);
        self.dual_write_offset = Some(prepared.target.offset);
        if let Some(started) = prepared.started {
            if prepared.snapshot {
                self.record_snapshot_time(now, started);
            } else if prepared.wrote_something {
                let ms = millis(now, started);
                self.last_delta_write_ms = Some(ms);
                self.push_write_timing(WriteTiming::Delta(ms));
            }
        }
        for (full, rpcs) in prepared.rpcs {
            self.push_rpcs(full, rpcs);
        }
        self.drive_dual_writes(now);
    }

    pub(super) fn record_snapshot_time(&mut self, now: Instant, started: Instant) {
        let ms = millis(now, started);
        self.last_snapshot_write_ms = Some(ms);
        self.push_write_timing(WriteTiming::Snapshot(ms));
    }

    fn push_write_timing(&mut self, timing: WriteTiming) {
        if self.write_timings.len() >= MAX_WRITE_TIMINGS {
            self.write_timings.pop_front();
        }
        self.write_timings.push_back(timing);
    }
}

/// The data and expected version of the `/migration` update among `steps`.
fn migration_set(steps: &[ZkStep]) -> Option<(Vec<u8>, i32)> {
    steps.iter().flat_map(ZkStep::ops).find_map(|op| match op {
        ZkOp::SetData {
            path,
            data,
            version,
        } if path == MIGRATION_PATH => Some((data.clone(), *version)),
        _ => None,
    })
}

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    /// Updates `/migration`'s version from the results of a write whose steps set it.
    pub(super) fn learn_migration_version(
        &mut self,
        steps: &[ZkStep],
        results: &[Vec<ZkOpResult>],
    ) {
        for (step, step_results) in steps.iter().zip(results) {
            for (op, result) in step.ops().iter().zip(step_results) {
                if let (ZkOp::SetData { path, .. }, ZkOpResult::SetData { stat }) = (op, result)
                    && path == MIGRATION_PATH
                {
                    self.leadership = self
                        .leadership
                        .with_migration_zk_version(stat.version, stat.mtime);
                }
            }
        }
    }

    pub(super) fn on_controller_znodes(
        &mut self,
        now: Instant,
        entries: &[Option<(Vec<u8>, Stat)>],
    ) {
        let our_epoch = self.leadership.kraft_controller_epoch;
        let Some(Some((epoch_data, epoch_stat))) = entries.first() else {
            self.waiting_for = Some(WaitReason::NoControllerEpoch);
            warn!(
                node_id = self.config.node_id,
                "Cannot register KRaft controller as the active controller since there is no ZK controller epoch present."
            );
            return;
        };
        let current_epoch = match decode_controller_epoch(epoch_data) {
            Ok(epoch) => epoch,
            Err(e) => {
                self.last_error = Some(e.to_string());
                return;
            }
        };
        let controller = match entries.get(1) {
            Some(Some((data, stat))) => match ControllerZnode::from_json(data) {
                Ok(znode) => Some((znode, stat.version)),
                Err(e) => {
                    self.last_error = Some(e.to_string());
                    return;
                }
            },
            _ => None,
        };
        if let Some((znode, _)) = &controller
            && let Some(epoch_in_zk) = znode.kraft_controller_epoch
            && epoch_in_zk >= our_epoch
            // Our own registration from this very leadership (we were fenced, or a claim's
            // reply was lost): Raft has one leader per epoch, so nobody else wrote it, and
            // claiming again bumps /controller_epoch, fencing any other writer. Kafka refuses
            // here and stays stuck until the next leader change.
            && !(znode.broker_id == self.config.node_id && epoch_in_zk == our_epoch)
        {
            info!(
                node_id = self.config.node_id,
                "Cannot register KRaft controller {} with epoch {our_epoch} as the current controller register in ZK has the same or newer epoch {epoch_in_zk}.",
                self.config.node_id
            );
            self.waiting_for = Some(WaitReason::ControllerClaimLost {
                kraft_controller_epoch_in_zk: epoch_in_zk,
                our_kraft_controller_epoch: our_epoch,
            });
            return;
        }
        let new_epoch = current_epoch.saturating_add(1);
        let registration = ControllerZnode {
            broker_id: self.config.node_id,
            timestamp_ms: self.wall_clock_ms(now),
            kraft_controller_epoch: Some(our_epoch),
        };
        let mut ops = vec![ZkOp::set_data(
            CONTROLLER_EPOCH_PATH,
            encode_controller_epoch(new_epoch),
            epoch_stat.version,
        )];
        if let Some((_, version)) = controller {
            ops.push(ZkOp::delete(CONTROLLER_PATH, version));
        }
        // Persistent, not ephemeral: ZooKeeper brokers must not win an election while the
        // KRaft leadership moves (facts §6.6).
        ops.push(ZkOp::Create {
            path: CONTROLLER_PATH.to_owned(),
            data: registration.to_json(),
            mode: CreateMode::Persistent,
        });
        self.issue_write(
            now,
            Purpose::Claim {
                new_zk_controller_epoch: new_epoch,
            },
            vec![ZkStep::Multi(ops)],
        );
    }

    pub(super) fn wall_clock_ms(&self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.clock_origin).as_millis();
        self.wall_origin_ms
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
    }

    /// ZK_MIGRATION: the reader turns the tree into batches; they are appended one at a time
    /// inside a metadata transaction, buffered to `min_batch_size` records (Kafka's
    /// `BufferingBatchConsumer`). The copy's time counts from `read_at`, when ZooKeeper's read
    /// was issued (Kafka's manifest starts before its reads too).
    pub(super) fn start_copy(&mut self, now: Instant, read_at: Instant, tree: &ZkTree) {
        let copied = match self.reader.read_all_metadata(tree) {
            Ok(copied) => copied,
            Err(e) => {
                let epoch = self.current_epoch();
                self.last_error = Some(format!("reading ZooKeeper metadata: {e}"));
                if let Some(leader_epoch) = epoch {
                    self.actions.push_back(MigrationAction::AbortMigration {
                        leader_epoch,
                        reason: format!("reading ZooKeeper metadata: {e}"),
                    });
                }
                self.transition(MigrationDriverState::Inactive);
                return;
            }
        };
        let transactions = self
            .image
            .metadata_version()
            .is_metadata_transaction_supported();
        let mut appends = VecDeque::new();
        if transactions {
            appends.push_back((
                AppendKind::Begin,
                vec![record(MetadataRecord::BeginTransaction(
                    BeginTransactionRecord {
                        name: Some(MIGRATION_TRANSACTION_NAME.to_owned()),
                        ..BeginTransactionRecord::default()
                    },
                ))],
            ));
        } else {
            warn!(
                node_id = self.config.node_id,
                "Starting a ZK migration without metadata transactions: it is not fault-tolerant (metadata.version below 3.6-IV1)"
            );
        }
        let min_batch_size = self.config.min_batch_size.max(1);
        let mut buffer: Vec<ApiMessageAndVersion> = Vec::new();
        for batch in copied.batches {
            buffer.extend(batch);
            if buffer.len() >= min_batch_size {
                appends.push_back((AppendKind::Data, std::mem::take(&mut buffer)));
            }
        }
        if !buffer.is_empty() {
            appends.push_back((AppendKind::Data, buffer));
        }
        let mut complete = vec![record(MetadataRecord::ZkMigrationState(
            ZkMigrationStateRecord {
                zk_migration_state: ZkMigrationState::Migration.value(),
                ..ZkMigrationStateRecord::default()
            },
        ))];
        if transactions {
            complete.push(record(MetadataRecord::EndTransaction(
                EndTransactionRecord::default(),
            )));
        }
        appends.push_back((AppendKind::Complete, complete));
        self.copy = Some(CopyProgress {
            started: read_at,
            appends,
            committed_batches: 0,
            manifest: MigrationManifest::default(),
            broker_ids: copied.broker_ids,
        });
        self.issue_next_append(now);
    }
}
