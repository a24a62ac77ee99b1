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
        // A first send (a re-send sets it again right after).
        self.resent = false;
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

    /// Facts §6.7: the writes in multi-ops that each check `/controller_epoch` and
    /// `/migration` first; notifications after, unfenced; then `/migration` set to `new_state`
    /// at its known version (the bump that tells any other writer it lost).
    ///
    /// Kafka sends one multi-op per write. krust packs consecutive writes into one multi-op
    /// (up to [`MAX_OPS_PER_MULTI`] operations and [`MAX_MULTI_BYTES`]) and the notifications
    /// likewise: the fence is the same for every write of a batch, a multi-op is all or nothing,
    /// and a batch that fails part-way is redone whole either way, so packing changes the
    /// number of round trips to ZooKeeper, not what ends up in it.
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
        let mut steps: Vec<ZkStep> = multi_op_chunks(&batch.ops)
            .map(|chunk| {
                let mut ops = Vec::with_capacity(chunk.len() + 2);
                ops.push(self.controller_epoch_check());
                ops.push(ZkOp::check(MIGRATION_PATH, migration_version));
                ops.extend_from_slice(chunk);
                ZkStep::Multi(ops)
            })
            .collect();
        steps.extend(
            multi_op_chunks(&batch.notifications).map(|chunk| match chunk {
                [one] => ZkStep::Single(one.clone()),
                many => ZkStep::Multi(many.to_vec()),
            }),
        );
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

/// Bytes an operation adds to a multi-op request (path and data; the framing is small).
fn op_bytes(op: &ZkOp) -> usize {
    let data = match op {
        ZkOp::Create { data, .. } | ZkOp::SetData { data, .. } => data.len(),
        ZkOp::Delete { .. } | ZkOp::Check { .. } => 0,
    };
    op.path().len() + data + 16
}

/// Splits `ops` into runs for one multi-op each: at most [`MAX_OPS_PER_MULTI`] operations and
/// [`MAX_MULTI_BYTES`] (an operation larger than that goes alone), in order.
fn multi_op_chunks(ops: &[ZkOp]) -> impl Iterator<Item = &[ZkOp]> {
    let mut rest = ops;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut n = 0;
        let mut bytes = 0;
        while n < rest.len() && n < MAX_OPS_PER_MULTI {
            let b = op_bytes(&rest[n]);
            if n > 0 && bytes + b > MAX_MULTI_BYTES {
                break;
            }
            bytes += b;
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(path: &str, len: usize) -> ZkOp {
        ZkOp::set_data(path, vec![0; len], ANY_VERSION)
    }

    #[test]
    fn multi_op_chunks_keep_order_and_bound_count_and_bytes() {
        let ops: Vec<ZkOp> = (0..2_500).map(|i| set(&format!("/a/{i}"), 10)).collect();
        let chunks: Vec<&[ZkOp]> = multi_op_chunks(&ops).collect();
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [1_000, 1_000, 500]
        );
        assert_eq!(chunks.concat(), ops);

        // Big operations: split by bytes; one over the bound goes alone.
        let big = vec![
            set("/b/0", 100_000),
            set("/b/1", 100_000),
            set("/b/2", 100_000),
            set("/b/3", 600_000),
            set("/b/4", 10),
        ];
        let sizes: Vec<usize> = multi_op_chunks(&big).map(<[ZkOp]>::len).collect();
        assert_eq!(sizes, [2, 1, 1, 1]);
        assert_eq!(multi_op_chunks(&[]).count(), 0);
    }
}
