//! [`super::MigrationDriver`]: dual-write: one job per published image, fenced writes, the `/migration` bump, then RPCs.

#[allow(clippy::wildcard_imports)]
use super::*;

impl<R, W, P> MigrationDriver<R, W, P>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    pub(super) fn enqueue_dual_write(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        is_snapshot: bool,
    ) {
        let kind = if is_snapshot { "snapshot" } else { "delta" };
        if !self.leadership.initial_migration_done() {
            info!(
                node_id = self.config.node_id,
                "Ignoring {kind} since the migration has not finished."
            );
            return;
        }
        let target = OffsetAndEpoch::new(
            image.provenance.last_contained_offset,
            image.provenance.last_contained_epoch,
        );
        if target < self.leadership.offset_and_epoch() {
            info!(
                node_id = self.config.node_id,
                "Ignoring {kind} {target} which contains metadata that has already been written to ZK."
            );
            return;
        }
        let job = if is_snapshot {
            DualWriteJob::Snapshot(image.clone())
        } else {
            let zk_epoch = self.leadership.zk_controller_epoch;
            match self.writer.delta_writes(delta, image, zk_epoch) {
                Ok(writes) => {
                    let rpcs = if delta.topics_delta().is_some() || delta.cluster_delta().is_some()
                    {
                        self.propagator.rpcs_for_delta(delta, image, zk_epoch)
                    } else {
                        None
                    };
                    if let Some(DualWriteJob::Delta {
                        target: queued_target,
                        writes: queued,
                        rpcs: queued_rpcs,
                    }) = self.dual_writes.back_mut()
                        && queued.ops.len() + writes.ops.len() <= MAX_COALESCED_OPS
                    {
                        // Not yet started: this delta's writes follow the queued ones in the
                        // same batch, and one `/migration` bump covers both.
                        *queued_target = target;
                        queued.ops.extend(writes.ops);
                        queued.notifications.extend(writes.notifications);
                        for (name, n) in writes.counts {
                            *queued.counts.entry(name).or_insert(0) += n;
                        }
                        queued_rpcs.extend(rpcs);
                        self.wake = true;
                        return;
                    }
                    DualWriteJob::Delta {
                        target,
                        writes,
                        rpcs: rpcs.into_iter().collect(),
                    }
                }
                Err(e) => {
                    // A full reconciliation against this image repairs whatever the delta
                    // path could not express.
                    self.last_error = Some(format!("dual-write of a delta: {e}"));
                    DualWriteJob::Snapshot(image.clone())
                }
            }
        };
        self.dual_writes.push_back(job);
        if self.dual_writes.len() > MAX_PENDING_DUAL_WRITES {
            warn!(
                node_id = self.config.node_id,
                pending = self.dual_writes.len(),
                "too many pending dual-writes; folding them into one full reconciliation"
            );
            self.dual_writes.clear();
            self.dual_writes
                .push_back(DualWriteJob::Snapshot(image.clone()));
        }
        self.wake = true;
    }

    pub(super) fn drive_dual_writes(&mut self, now: Instant) {
        if !self.state.allows_dual_write() || self.in_flight.is_some() || self.retry.is_some() {
            return;
        }
        let Some(job) = self.dual_writes.pop_front() else {
            return;
        };
        match job {
            DualWriteJob::Snapshot(image) => {
                let roots = self.writer.snapshot_roots();
                self.issue(
                    now,
                    Purpose::ReadForSnapshotDualWrite { image },
                    ZkRequest::ReadTrees { roots },
                    Vec::new(),
                );
            }
            DualWriteJob::Delta {
                target,
                writes,
                rpcs,
            } => {
                if target < self.leadership.offset_and_epoch() {
                    self.drive_dual_writes(now);
                    return;
                }
                trace!(node_id = self.config.node_id, counts = ?writes.counts, "dual-writing a delta");
                let new_state = self
                    .leadership
                    .with_kraft_metadata_offset_and_epoch(target.offset, target.epoch);
                let steps = self.fenced_steps(&writes, &new_state);
                let prepared = PreparedWrite {
                    target,
                    wrote_something: !writes.is_empty(),
                    snapshot: false,
                    rpcs: rpcs.into_iter().map(|r| (false, r)).collect(),
                    started: Some(now),
                };
                self.issue_write(now, Purpose::WriteDualWrite(prepared), steps);
            }
        }
    }

    pub(super) fn prepare_snapshot_dual_write(
        &mut self,
        now: Instant,
        image: MetadataImage,
        tree: &ZkTree,
        started: Instant,
    ) {
        let zk_epoch = self.leadership.zk_controller_epoch;
        let writes = match self.writer.snapshot_writes(&image, tree, zk_epoch) {
            Ok(writes) => writes,
            Err(e) => {
                self.last_error = Some(format!("reconciling a snapshot with ZK: {e}"));
                self.dual_writes.push_front(DualWriteJob::Snapshot(image));
                return;
            }
        };
        let target = OffsetAndEpoch::new(
            image.provenance.last_contained_offset,
            image.provenance.last_contained_epoch,
        );
        let new_state = self
            .leadership
            .with_kraft_metadata_offset_and_epoch(target.offset, target.epoch);
        let steps = self.fenced_steps(&writes, &new_state);
        let rpcs = self.propagator.rpcs_for_image(&image, zk_epoch);
        let prepared = PreparedWrite {
            target,
            wrote_something: !writes.is_empty(),
            snapshot: true,
            rpcs: vec![(true, rpcs)],
            started: Some(started),
        };
        self.issue_write(now, Purpose::WriteDualWrite(prepared), steps);
    }
}
