//! The migration task: one tokio task that owns the sans-IO [`MigrationDriver`] and carries
//! out its actions (Kafka's `KRaftMigrationDriver` event loop).
//!
//! - Published images and leader changes arrive from [`super::publisher::MigrationPublisher`]
//!   and go to the driver in the loader's order.
//! - ZooKeeper requests run against a [`ZkBackend`] (the real client, or
//!   [`krust_zk::backend::MemZk`] in tests), one at a time, as the driver asks; their results
//!   go back to the driver. Nothing is retried here: the driver retries on its poll timer.
//! - Migration batches go to the active controller as `MigrationRecords` (in the driver's
//!   leader epoch; the controller refuses another epoch's batch), each awaited until committed
//!   or [`METADATA_COMMIT_MAX_WAIT`].
//! - RPCs for ZooKeeper-mode brokers go out through [`ZkBrokerChannels`], whose queues follow
//!   the registrations of every published image.
//! - `AbortMigration` ends the task with [`MigrationTaskError::Aborted`]: the caller treats
//!   it as Kafka's fatal fault (the process stops; the next active controller aborts the open
//!   transaction and redoes the copy).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use krust_controller::{ControllerRequest, ControllerResponse};
use krust_migration::driver::{
    BrokerPropagator, METADATA_COMMIT_MAX_WAIT, MigrationAction, MigrationDriver, MigrationStatus,
    RequestId, ZkFailure, ZkMetadataReader, ZkMetadataWriter, ZkReply, ZkRequest, ZkStep,
};
use krust_migration::kafka_seams::KraftEpoch;
use krust_zk::backend::{ZkBackend, read_tree_with};
use krust_zk::model::topics::partition_states_of_topic;
use krust_zk::ops::{ZkError, ZkErrorCode, ZkOp};
use krust_zk::tree::parent_of;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::sleep_until;
use tracing::{error, info, warn};

use super::publisher::MetadataEvent;
use super::zk_brokers::{BrokerRequest, BrokerResponse, ZkBrokerChannels};
use crate::controller::ControllerChannel;

/// Why the migration task stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrationTaskError {
    /// The initial copy failed after its transaction began (Kafka's `abortMigration`: fatal).
    #[error("Aborting the ZK migration: {0}")]
    Aborted(String),
}

/// The propagator's output as requests per broker.
pub trait IntoBrokerRequests {
    /// `(broker id, request)` in sending order.
    fn into_broker_requests(self) -> Vec<(i32, BrokerRequest)>;
}

impl IntoBrokerRequests for Vec<krust_migration::propagator::OutgoingRequest> {
    fn into_broker_requests(self) -> Vec<(i32, BrokerRequest)> {
        use kafka_protocol::messages::RequestKind;
        use krust_migration::propagator::BrokerRequest as Built;
        self.into_iter()
            .map(|r| {
                let request = match r.request {
                    Built::UpdateMetadata(m) => RequestKind::UpdateMetadata(m),
                    Built::LeaderAndIsr(m) => RequestKind::LeaderAndIsr(m),
                    Built::StopReplica(m) => RequestKind::StopReplica(m),
                };
                (
                    r.broker_id,
                    BrokerRequest {
                        request,
                        version: r.version,
                    },
                )
            })
            .collect()
    }
}

/// What the task shares with observers (metrics, the status API): the driver's status after
/// every step.
#[derive(Debug, Clone, Default)]
pub struct MigrationStatusHandle(Arc<Mutex<Option<MigrationStatus>>>);

impl MigrationStatusHandle {
    /// The latest status, once the task ran a step.
    #[must_use]
    pub fn get(&self) -> Option<MigrationStatus> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, status: MigrationStatus) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status);
    }
}

/// The migration task's parts.
pub struct MigrationTask<R, W, P, B>
where
    R: ZkMetadataReader,
    W: ZkMetadataWriter,
    P: BrokerPropagator,
{
    driver: MigrationDriver<R, W, P>,
    zk: B,
    controller: ControllerChannel,
    brokers: ZkBrokerChannels,
    broker_responses: mpsc::UnboundedReceiver<BrokerResponse>,
    status: MigrationStatusHandle,
    kraft_epoch: Option<KraftEpoch>,
    metrics: Option<super::metrics::MigrationMetrics>,
    write_behind: Option<Arc<std::sync::atomic::AtomicI64>>,
}

impl<R, W, P, B> MigrationTask<R, W, P, B>
where
    R: ZkMetadataReader + Send + 'static,
    W: ZkMetadataWriter + Send + 'static,
    P: BrokerPropagator + Send + 'static,
    P::Rpcs: IntoBrokerRequests + Send,
    B: ZkBackend + 'static,
{
    /// A task for `driver` over ZooKeeper `zk`, appending through `controller`, reaching the
    /// ZooKeeper brokers on their `inter_broker_listener`.
    pub fn new(
        driver: MigrationDriver<R, W, P>,
        zk: B,
        controller: ControllerChannel,
        inter_broker_listener: String,
        client_config: krust_net::ClientConfig,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            driver,
            zk,
            controller,
            brokers: ZkBrokerChannels::new(inter_broker_listener, client_config, tx),
            broker_responses: rx,
            status: MigrationStatusHandle::default(),
            kraft_epoch: None,
            metrics: None,
            write_behind: None,
        }
    }

    /// Keeps `lag` at the driver's ZooKeeper write-behind lag (the controller task reads it to
    /// bound the lag).
    #[must_use]
    pub fn with_write_behind(mut self, lag: Arc<std::sync::atomic::AtomicI64>) -> Self {
        self.write_behind = Some(lag);
        self
    }

    /// Feeds `metrics` with the driver's write durations.
    #[must_use]
    pub fn with_metrics(mut self, metrics: super::metrics::MigrationMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Keeps `epoch` at the metadata log's leader epoch (the KRaft controller epoch the ZooKeeper
    /// writer stamps into partition states).
    #[must_use]
    pub fn with_kraft_epoch(mut self, epoch: KraftEpoch) -> Self {
        self.kraft_epoch = Some(epoch);
        self
    }

    /// Publishes the driver's status through `status` (instead of a fresh handle).
    #[must_use]
    pub fn with_status(mut self, status: MigrationStatusHandle) -> Self {
        self.status = status;
        self
    }

    /// The status observers read.
    #[must_use]
    pub fn status(&self) -> MigrationStatusHandle {
        self.status.clone()
    }

    /// Runs until `events` closes (the node stops) or the copy aborts. ZooKeeper requests and
    /// migration batches run as their own tasks, so published images, timers and the status
    /// (the write-behind lag the controller bounds) keep moving while ZooKeeper is slow or
    /// down.
    ///
    /// # Errors
    /// [`MigrationTaskError::Aborted`].
    pub async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<MetadataEvent>,
    ) -> Result<(), MigrationTaskError>
    where
        B: Clone,
    {
        let mut in_flight: JoinSet<Completion> = JoinSet::new();
        loop {
            self.start_actions(&mut in_flight)?;
            let status = self.driver.status();
            if let Some(lag) = &self.write_behind {
                lag.store(
                    status.zk_write_behind_lag,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            self.status.set(status);
            let timings = self.driver.take_write_timings();
            if let Some(metrics) = &self.metrics {
                metrics.observe(&timings);
            }
            let deadline = self
                .driver
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                event = events.recv() => match event {
                    None => {
                        in_flight.abort_all();
                        return Ok(());
                    }
                    Some(MetadataEvent::LeaderChange(leader)) => {
                        if let Some(epoch) = &self.kraft_epoch {
                            epoch.set(leader.leader_epoch);
                        }
                        self.driver.handle_leader_change(Instant::now(), leader);
                    }
                    Some(MetadataEvent::Update { delta, image, manifest }) => {
                        for broker in self.brokers.update_brokers(&image) {
                            info!(broker_id = broker, "reaching ZooKeeper broker");
                        }
                        self.driver.handle_metadata(Instant::now(), &delta, &image, &manifest);
                    }
                },
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let now = Instant::now();
                    match done {
                        Ok(Completion::Zk(id, result)) => self.driver.handle_zk_result(now, id, result),
                        Ok(Completion::Committed(id, offset, epoch)) => {
                            self.driver.handle_append_committed(now, id, offset, epoch);
                        }
                        Ok(Completion::AppendFailed(id, reason)) => {
                            self.driver.handle_append_failed(now, id, &reason);
                        }
                        Err(e) => {
                            return Err(MigrationTaskError::Aborted(format!(
                                "a migration request task failed: {e}"
                            )));
                        }
                    }
                }
                response = self.broker_responses.recv() => {
                    if let Some(r) = response
                        && (r.error_code != 0 || !r.partition_errors.is_empty())
                    {
                        warn!(
                            broker_id = r.broker_id,
                            api = ?r.api_key,
                            error_code = r.error_code,
                            partition_errors = ?r.partition_errors,
                            "a ZooKeeper broker refused a request"
                        );
                    }
                }
                () = async {
                    match deadline {
                        Some(at) => sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.driver.handle_timeout(Instant::now());
                }
            }
        }
    }

    /// Starts every action the driver asks for: ZooKeeper requests and batches as tasks whose
    /// completions come back through `in_flight`, RPCs queued to the brokers.
    fn start_actions(
        &mut self,
        in_flight: &mut JoinSet<Completion>,
    ) -> Result<(), MigrationTaskError>
    where
        B: Clone,
    {
        while let Some(action) = self.driver.poll_action() {
            match action {
                MigrationAction::Zk { id, request, .. } => {
                    let zk = self.zk.clone();
                    in_flight
                        .spawn(async move { Completion::Zk(id, execute(&zk, &request).await) });
                }
                MigrationAction::AppendRecords {
                    id,
                    leader_epoch,
                    records,
                } => {
                    let controller = self.controller.clone();
                    in_flight.spawn(async move {
                        let call = controller.call(ControllerRequest::MigrationRecords {
                            leader_epoch,
                            records,
                        });
                        match tokio::time::timeout(METADATA_COMMIT_MAX_WAIT, call).await {
                            Ok(Some(ControllerResponse::MigrationRecords(Ok(done)))) => {
                                Completion::Committed(id, done.last_offset, done.epoch)
                            }
                            Ok(Some(ControllerResponse::MigrationRecords(Err(e)))) => {
                                Completion::AppendFailed(id, e.to_string())
                            }
                            Ok(_) => {
                                Completion::AppendFailed(id, "the controller stopped".to_owned())
                            }
                            Err(_) => Completion::AppendFailed(
                                id,
                                "timed out waiting for the migration batch to commit".to_owned(),
                            ),
                        }
                    });
                }
                MigrationAction::SendRpcs { rpcs, .. } => {
                    for (broker_id, request) in rpcs.into_broker_requests() {
                        if !self.brokers.send(broker_id, request) {
                            warn!(broker_id, "no channel to this ZooKeeper broker");
                        }
                    }
                }
                MigrationAction::AbortMigration { reason, .. } => {
                    error!(%reason, "aborting the ZK migration");
                    return Err(MigrationTaskError::Aborted(reason));
                }
            }
        }
        Ok(())
    }
}

/// A finished ZooKeeper request or migration batch.
enum Completion {
    Zk(RequestId, Result<ZkReply, ZkFailure>),
    Committed(RequestId, i64, i32),
    AppendFailed(RequestId, String),
}

/// Runs one driver request against ZooKeeper.
///
/// # Errors
/// The failing step and its ZooKeeper error.
pub async fn execute<B: ZkBackend>(zk: &B, request: &ZkRequest) -> Result<ZkReply, ZkFailure> {
    let fail = |step: usize, error: ZkError| ZkFailure { step, error };
    match request {
        ZkRequest::GetOrCreateMigration {
            top_level_paths,
            initial_data,
        } => {
            for path in top_level_paths {
                create_with_parents(zk, path, Vec::new())
                    .await
                    .map_err(|e| fail(0, e))?;
            }
            let path = krust_migration::state::MIGRATION_PATH;
            match zk.get_data(path).await {
                Ok((data, stat)) => Ok(ZkReply::Migration { data, stat }),
                Err(e) if e.code == ZkErrorCode::NoNode => {
                    create_with_parents(zk, path, initial_data.clone())
                        .await
                        .map_err(|e| fail(0, e))?;
                    let (data, stat) = zk.get_data(path).await.map_err(|e| fail(0, e))?;
                    Ok(ZkReply::Migration { data, stat })
                }
                Err(e) => Err(fail(0, e)),
            }
        }
        ZkRequest::Get { paths } => {
            let mut out = Vec::with_capacity(paths.len());
            for path in paths {
                match zk.get_data(path).await {
                    Ok(found) => out.push(Some(found)),
                    Err(e) if e.code == ZkErrorCode::NoNode => out.push(None),
                    Err(e) => return Err(fail(0, e)),
                }
            }
            Ok(ZkReply::Got(out))
        }
        ZkRequest::ReadTrees { roots } => {
            let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
            // Partition states straight from each topic's assignment, as Kafka reads them.
            read_tree_with(zk, &roots, partition_states_of_topic)
                .await
                .map(ZkReply::Trees)
                .map_err(|e| fail(0, e))
        }
        ZkRequest::Write { steps } => {
            let mut results = Vec::with_capacity(steps.len());
            for (i, step) in steps.iter().enumerate() {
                match step {
                    ZkStep::Multi(ops) => {
                        results.push(zk.multi(ops).await.map_err(|e| fail(i, e.error))?);
                    }
                    ZkStep::Single(op) => {
                        results.push(vec![zk.apply(op).await.map_err(|e| fail(i, e))?]);
                    }
                }
            }
            Ok(ZkReply::Wrote(results))
        }
    }
}

/// Creates `path` (and missing parents, empty) holding `data`; an existing node is success.
async fn create_with_parents<B: ZkBackend>(
    zk: &B,
    path: &str,
    data: Vec<u8>,
) -> Result<(), ZkError> {
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(p) = current {
        if p == "/" || zk.exists(p).await?.is_some() {
            break;
        }
        missing.push(p.to_owned());
        current = parent_of(p);
    }
    for (i, p) in missing.iter().rev().enumerate() {
        let last = i + 1 == missing.len();
        let body = if last { data.clone() } else { Vec::new() };
        match zk.apply(&ZkOp::create(p.clone(), body)).await {
            Ok(_) => {}
            Err(e) if e.code == ZkErrorCode::NodeExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
