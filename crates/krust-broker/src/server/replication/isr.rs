//! The leader's side of replication: ISR shrink and expansion proposed to the controller
//! (Kafka 3.9 `Partition.maybeShrinkIsr`/`maybeExpandIsr`, the KRaft
//! `DefaultAlterPartitionManager`).
//!
//! - **Shrink**: every `replica.lag.time.max.ms / 2` (Kafka's `isr-expiration` task) each
//!   partition led here proposes its ISR minus the followers that are not caught up.
//! - **Expand**: after a follower's fetch, a follower outside the ISR that reached the HW and
//!   this epoch's start is proposed — if the image shows its broker registered, unfenced and
//!   not in controlled shutdown, and the fetch carried that registration's broker epoch
//!   (Kafka's `isReplicaIsrEligible`, KIP-903).
//! - One proposal per partition in flight: `Partition::begin_isr_change` records it and the
//!   HW counts the maximal ISR meanwhile. Proposals are sent in batches, one AlterPartition
//!   request at a time (v3: topic ids, `new_isr_with_epochs` with the image's broker epochs;
//!   v2 if the controller lacks v3).
//! - Answers: success → `Partition::update_isr` with the controller's ISR (and its partition
//!   epoch is remembered for the next proposal, ahead of the image); `INELIGIBLE_REPLICA`,
//!   `OPERATION_NOT_ATTEMPTED`, `UNKNOWN_TOPIC_OR_PARTITION`/`_ID` → back to the committed
//!   ISR; `FENCED_LEADER_EPOCH`, `INVALID_UPDATE_VERSION`, `NEW_LEADER_ELECTED`,
//!   `NOT_LEADER_OR_FOLLOWER` → wait for the metadata (the publisher's `make_leader` resets
//!   the partition); anything else, and request-level failures, are retried.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, BrokerId, RequestKind, ResponseKind};
use krust_metadata::image::MetadataImage;
use krust_metadata::image::topics::TopicPartition;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::super::controller_channel::ControllerChannelError;
use super::{Context, now_ms};
use crate::Partition;

/// KIP-903's codes (newer than the vendored codec's error list).
use krust_net::error_codes::{INELIGIBLE_REPLICA, NEW_LEADER_ELECTED};

/// One ISR proposal (Kafka's `AlterPartitionItem`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct AlterItem {
    tp: TopicPartition,
    topic_id: Uuid,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr: Vec<i32>,
    /// Size of the committed ISR when proposed (a shrink or an expansion, for the metrics).
    old_isr_len: usize,
}

impl AlterItem {
    /// Marks `new_isr` in flight on `p` (the maximal ISR) and returns the proposal; `None` if
    /// a change is already in flight or `p` no longer leads.
    fn begin(
        p: &mut Partition,
        tp: &TopicPartition,
        topic_id: Uuid,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    ) -> Option<Self> {
        if !p.begin_isr_change(&new_isr) {
            return None;
        }
        Some(AlterItem {
            tp: tp.clone(),
            topic_id,
            leader_epoch,
            partition_epoch,
            new_isr,
            old_isr_len: p.isr().len(),
        })
    }
}

/// ISR proposals of this broker.
pub(super) struct IsrManager {
    ctx: Arc<Context>,
    queue: mpsc::UnboundedSender<AlterItem>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<AlterItem>>>,
    /// Partition epochs the controller answered with, per partition: `(leader epoch,
    /// partition epoch)`. The image may not have caught up yet when the next proposal goes.
    partition_epochs: Mutex<HashMap<TopicPartition, (i32, i32)>>,
}

impl IsrManager {
    pub(super) fn new(ctx: Arc<Context>) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        IsrManager {
            ctx,
            queue,
            receiver: Mutex::new(Some(receiver)),
            partition_epochs: Mutex::new(HashMap::new()),
        }
    }

    /// Spawns the ISR expiration ticker and the AlterPartition sender.
    pub(super) fn start(self: Arc<Self>, runtime: &tokio::runtime::Handle) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        let period = Duration::from_millis((self.ctx.config.replica_lag_time_max_ms / 2).max(1));
        let ticker = self.clone();
        tasks.push(runtime.spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                ticker.maybe_shrink_isrs();
            }
        }));
        let receiver = self
            .receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(receiver) = receiver {
            tasks.push(runtime.spawn(self.run_sender(receiver)));
        }
        tasks
    }

    /// Partitions hosted here that this broker leads (the ones to check).
    fn led_partitions(&self) -> Vec<(TopicPartition, Uuid, Arc<Mutex<Partition>>)> {
        self.ctx
            .replicas
            .all_hosted()
            .into_iter()
            .filter(|(_, hosted)| {
                hosted
                    .partition
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_leader()
            })
            .map(|(tp, hosted)| (tp, hosted.topic_id, hosted.partition))
            .collect()
    }

    /// The partition epoch to propose against: the controller's last answer in this leader
    /// epoch, or the image's, whichever is newer. `None` while the image is of another leader
    /// epoch than the partition: the publisher moves the replicas to new metadata before it
    /// publishes the image, and a proposal made in between would carry the previous partition
    /// epoch, be refused with INVALID_UPDATE_VERSION and wait for metadata that has already
    /// been applied (the next fetch or shrink check proposes again).
    fn partition_epoch(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
        topic_id: Uuid,
        leader_epoch: i32,
    ) -> Option<i32> {
        let registration = image.topics.partition(topic_id, tp.partition)?;
        if registration.leader_epoch != leader_epoch {
            return None;
        }
        let from_image = registration.partition_epoch;
        let answered = self
            .partition_epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tp)
            .filter(|(e, _)| *e == leader_epoch)
            .map(|(_, p)| *p);
        Some(answered.map_or(from_image, |a| a.max(from_image)))
    }

    /// Kafka's `maybeShrinkIsr` over every partition led here.
    pub(super) fn maybe_shrink_isrs(&self) {
        let image = self.ctx.replicas.image();
        let now = now_ms();
        for (tp, topic_id, partition) in self.led_partitions() {
            let item = {
                let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                if !p.is_leader() || p.pending_isr().is_some() {
                    continue;
                }
                let out_of_sync = p.out_of_sync_replicas(now);
                if out_of_sync.is_empty() {
                    continue;
                }
                let new_isr: Vec<i32> = p
                    .isr()
                    .iter()
                    .copied()
                    .filter(|id| !out_of_sync.contains(id))
                    .collect();
                let leader_epoch = p.leader_epoch();
                let Some(partition_epoch) =
                    self.partition_epoch(&image, &tp, topic_id, leader_epoch)
                else {
                    continue;
                };
                info!(
                    ?tp,
                    ?out_of_sync,
                    isr = ?p.isr(),
                    ?new_isr,
                    leader_epoch,
                    partition_epoch,
                    "shrinking ISR"
                );
                let Some(item) = AlterItem::begin(
                    &mut p,
                    &tp,
                    topic_id,
                    leader_epoch,
                    partition_epoch,
                    new_isr,
                ) else {
                    continue;
                };
                item
            };
            self.submit(item);
        }
    }

    /// Kafka's `isReplicaIsrEligible`: registered, unfenced, not shutting down, and (KIP-903)
    /// fetching with the broker epoch of its current registration (`-1`: a fetch version
    /// without `ReplicaState`, not checked).
    fn is_eligible(image: &MetadataImage, replica_id: i32, fetch_broker_epoch: i64) -> bool {
        image.cluster.broker(replica_id).is_some_and(|b| {
            !b.fenced
                && !b.in_controlled_shutdown
                && (fetch_broker_epoch == -1 || fetch_broker_epoch == b.epoch)
        })
    }

    /// Kafka's `maybeExpandIsr` after `replica_id` fetched with `fetch_broker_epoch`.
    pub(super) fn maybe_expand_isr(
        &self,
        tp: &TopicPartition,
        replica_id: i32,
        fetch_broker_epoch: i64,
    ) {
        let Some(partition) = self.ctx.replicas.partition(tp) else {
            return;
        };
        let image = self.ctx.replicas.image();
        let Some(topic_id) = image.topics.topic_by_name(&tp.topic).map(|t| t.id) else {
            return;
        };
        let item = {
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            if !p.is_leader()
                || p.pending_isr().is_some()
                || !p.isr_expansion_candidates().contains(&replica_id)
            {
                return;
            }
            if !Self::is_eligible(&image, replica_id, fetch_broker_epoch) {
                debug!(
                    ?tp,
                    replica_id,
                    fetch_broker_epoch,
                    "caught-up follower is not ISR-eligible (fenced, shutting down, unknown or \
                     a stale broker epoch)"
                );
                return;
            }
            let leader_epoch = p.leader_epoch();
            let Some(partition_epoch) = self.partition_epoch(&image, tp, topic_id, leader_epoch)
            else {
                return;
            };
            let mut new_isr: BTreeSet<i32> = p.isr().clone();
            new_isr.insert(replica_id);
            let new_isr: Vec<i32> = new_isr.into_iter().collect();
            info!(?tp, replica_id, isr = ?p.isr(), ?new_isr, leader_epoch, partition_epoch, "expanding ISR");
            let Some(item) =
                AlterItem::begin(&mut p, tp, topic_id, leader_epoch, partition_epoch, new_isr)
            else {
                return;
            };
            item
        };
        // The maximal ISR may let the HW move.
        self.ctx.replicas.partition_changed(tp);
        self.submit(item);
    }

    fn submit(&self, item: AlterItem) {
        if self.queue.send(item).is_err() {
            warn!("AlterPartition sender is gone");
        }
    }

    /// Under-replicated and under-min-ISR partitions led here.
    pub(super) fn under_replicated_counts(&self) -> (u64, u64) {
        let mut under_replicated = 0;
        let mut under_min_isr = 0;
        for (_, _, partition) in self.led_partitions() {
            let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            if !p.is_leader() {
                continue;
            }
            if p.isr().len() < p.replicas().len() {
                under_replicated += 1;
            }
            if p.is_under_min_isr() {
                under_min_isr += 1;
            }
        }
        (under_replicated, under_min_isr)
    }

    /// Whether `item` is still the proposal the partition waits on (else it is dropped).
    fn still_pending(&self, item: &AlterItem) -> bool {
        self.ctx
            .replicas
            .partition(&item.tp)
            .is_some_and(|partition| {
                let p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                p.is_leader()
                    && p.leader_epoch() == item.leader_epoch
                    && p.pending_isr().is_some_and(|pending| {
                        pending.iter().copied().eq(item.new_isr.iter().copied())
                    })
            })
    }

    async fn run_sender(self: Arc<Self>, mut receiver: mpsc::UnboundedReceiver<AlterItem>) {
        let mut version: i16 = 3;
        let backoff = Duration::from_millis(self.ctx.config.alter_partition_retry_backoff_ms);
        let mut retry: Vec<AlterItem> = Vec::new();
        loop {
            let mut batch: BTreeMap<TopicPartition, AlterItem> = BTreeMap::new();
            for item in retry.drain(..) {
                batch.insert(item.tp.clone(), item);
            }
            if batch.is_empty() {
                match receiver.recv().await {
                    Some(item) => {
                        batch.insert(item.tp.clone(), item);
                    }
                    None => return,
                }
            }
            while let Ok(item) = receiver.try_recv() {
                // A newer proposal for the same partition replaces an older one.
                batch.insert(item.tp.clone(), item);
            }
            let items: Vec<AlterItem> = batch
                .into_values()
                .filter(|item| self.still_pending(item))
                .collect();
            if items.is_empty() {
                continue;
            }
            let request = self.build_request(&items, version);
            let timeout = Duration::from_millis(self.ctx.config.alter_partition_timeout_ms);
            match self
                .ctx
                .channel
                .send(RequestKind::AlterPartition(request), Some(version), timeout)
                .await
            {
                Ok(ResponseKind::AlterPartition(response)) => {
                    retry = self.handle_response(items, &response);
                }
                Ok(other) => {
                    warn!(?other, "unexpected answer to AlterPartition");
                    retry = items;
                }
                Err(ControllerChannelError::Unsupported(reason)) if version == 3 => {
                    info!(%reason, "controller lacks AlterPartition v3; using v2");
                    version = 2;
                    retry = items;
                    continue;
                }
                Err(ControllerChannelError::Closed) => return,
                Err(e) => {
                    warn!(error = %e, "AlterPartition failed; retrying");
                    retry = items;
                }
            }
            if !retry.is_empty() {
                tokio::time::sleep(backoff).await;
            }
        }
    }

    fn build_request(&self, items: &[AlterItem], version: i16) -> AlterPartitionRequest {
        let image = self.ctx.replicas.image();
        let broker_epoch = |id: i32| image.cluster.broker(id).map_or(-1, |b| b.epoch);
        let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
        for item in items {
            let mut data = PartitionData::default()
                .with_partition_index(item.tp.partition)
                .with_leader_epoch(item.leader_epoch)
                .with_partition_epoch(item.partition_epoch);
            if version >= 3 {
                data.new_isr_with_epochs = item
                    .new_isr
                    .iter()
                    .map(|&id| {
                        BrokerState::default()
                            .with_broker_id(BrokerId(id))
                            .with_broker_epoch(broker_epoch(id))
                    })
                    .collect();
            } else {
                data.new_isr = item.new_isr.iter().map(|&id| BrokerId(id)).collect();
            }
            topics.entry(item.topic_id).or_default().push(data);
        }
        AlterPartitionRequest::default()
            .with_broker_id(BrokerId(self.ctx.node_id))
            .with_broker_epoch(broker_epoch(self.ctx.node_id))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(id, partitions)| {
                        TopicData::default()
                            .with_topic_id(id)
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
    }

    /// Applies the controller's answer; returns the items to retry.
    fn handle_response(
        &self,
        items: Vec<AlterItem>,
        response: &kafka_protocol::messages::AlterPartitionResponse,
    ) -> Vec<AlterItem> {
        if response.error_code != 0 {
            warn!(
                error = ?ResponseError::try_from_code(response.error_code),
                error_code = response.error_code,
                "AlterPartition refused; retrying"
            );
            return items;
        }
        let mut answers = HashMap::new();
        for topic in &response.topics {
            for p in &topic.partitions {
                answers.insert((topic.topic_id, p.partition_index), p);
            }
        }
        let mut retry = Vec::new();
        for item in items {
            let Some(answer) = answers.get(&(item.topic_id, item.tp.partition)) else {
                warn!(tp = ?item.tp, "AlterPartition answer lacks the partition; retrying");
                retry.push(item);
                continue;
            };
            if answer.error_code == 0 {
                self.apply_committed(&item, answer);
                continue;
            }
            Context::count(&self.ctx.failed_isr_updates);
            let code = answer.error_code;
            let error = ResponseError::try_from_code(code);
            if [
                ResponseError::OperationNotAttempted.code(),
                INELIGIBLE_REPLICA,
                ResponseError::UnknownTopicOrPartition.code(),
                ResponseError::UnknownTopicId.code(),
            ]
            .contains(&code)
            {
                info!(tp = ?item.tp, ?error, code, "ISR change refused; back to the committed ISR");
                if let Some(partition) = self.ctx.replicas.partition(&item.tp) {
                    let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
                    if p.leader_epoch() == item.leader_epoch {
                        p.abort_isr_change();
                    }
                }
                continue;
            }
            if [
                ResponseError::FencedLeaderEpoch.code(),
                ResponseError::InvalidUpdateVersion.code(),
                NEW_LEADER_ELECTED,
                ResponseError::NotLeaderOrFollower.code(),
                ResponseError::InvalidRequest.code(),
            ]
            .contains(&code)
            {
                info!(tp = ?item.tp, ?error, code, "ISR change refused; waiting for new metadata");
                if code == ResponseError::InvalidUpdateVersion.code() {
                    self.partition_epochs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&item.tp);
                    self.abort_if_metadata_moved_on(&item);
                }
                continue;
            }
            warn!(tp = ?item.tp, ?error, code, "ISR change failed; retrying");
            retry.push(item);
        }
        retry
    }

    /// After INVALID_UPDATE_VERSION: if the metadata of this leader epoch already carries a
    /// newer partition epoch than the proposal's, the update the refusal waits for has been
    /// applied (it cleared no proposal, as none was in flight yet, or this one came after it):
    /// back to the committed ISR, so the next fetch or shrink check proposes again.
    fn abort_if_metadata_moved_on(&self, item: &AlterItem) {
        let moved_on = self
            .ctx
            .replicas
            .image()
            .topics
            .partition(item.topic_id, item.tp.partition)
            .is_some_and(|r| {
                r.leader_epoch == item.leader_epoch && r.partition_epoch > item.partition_epoch
            });
        if !moved_on {
            return;
        }
        if let Some(partition) = self.ctx.replicas.partition(&item.tp) {
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            if p.leader_epoch() == item.leader_epoch {
                info!(tp = ?item.tp, "the metadata already moved past the refused ISR change; back to the committed ISR");
                p.abort_isr_change();
            }
        }
    }

    fn apply_committed(
        &self,
        item: &AlterItem,
        answer: &kafka_protocol::messages::alter_partition_response::PartitionData,
    ) {
        let Some(partition) = self.ctx.replicas.partition(&item.tp) else {
            return;
        };
        let isr: Vec<i32> = answer.isr.iter().map(|b| b.0).collect();
        let image_epoch = self
            .ctx
            .replicas
            .image()
            .topics
            .partition(item.topic_id, item.tp.partition)
            .map_or(-1, |r| r.partition_epoch);
        // The controller committed the change (whether or not the metadata got here first).
        if isr.len() < item.old_isr_len {
            Context::count(&self.ctx.isr_shrinks);
        } else if isr.len() > item.old_isr_len {
            Context::count(&self.ctx.isr_expands);
        }
        let applied = {
            let mut p = partition.lock().unwrap_or_else(PoisonError::into_inner);
            // Kafka ignores an answer for another leader epoch or older than what the
            // metadata already says.
            if !p.is_leader()
                || p.leader_epoch() != answer.leader_epoch
                || answer.partition_epoch < image_epoch
            {
                debug!(tp = ?item.tp, "stale AlterPartition answer ignored");
                false
            } else {
                p.update_isr(&isr, now_ms());
                true
            }
        };
        if applied {
            info!(tp = ?item.tp, ?isr, partition_epoch = answer.partition_epoch, "ISR updated");
            self.partition_epochs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(
                    item.tp.clone(),
                    (answer.leader_epoch, answer.partition_epoch),
                );
            self.ctx.replicas.partition_changed(&item.tp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU64, Ordering};

    use kafka_protocol::messages::alter_partition_response::{
        PartitionData as ResultData, TopicData as ResultTopic,
    };
    use kafka_protocol::messages::{AlterPartitionResponse, BrokerId};
    use krust_log::{Log, LogConfig};
    use krust_metadata::image::MetadataProvenance;
    use krust_metadata::records::{
        MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord,
    };

    use super::*;
    use crate::partition::PartitionConfig;
    use crate::server::controller_channel::{BoxFuture, ControllerChannel};
    use crate::server::replica_manager::{HostedPartition, ReplicaManager};
    use crate::server::replication::ReplicationConfig;

    type Answer = Result<ResponseKind, ControllerChannelError>;

    /// Answers AlterPartition from a script and records what was sent, at which version.
    #[derive(Default)]
    struct ScriptedChannel {
        answers: Mutex<VecDeque<Answer>>,
        sent: Mutex<Vec<(i16, AlterPartitionRequest)>>,
    }

    impl ControllerChannel for ScriptedChannel {
        fn send(
            &self,
            request: RequestKind,
            api_version: Option<i16>,
            timeout: Duration,
        ) -> BoxFuture<'_, Answer> {
            Box::pin(async move {
                if let RequestKind::AlterPartition(r) = request {
                    self.sent
                        .lock()
                        .expect("lock")
                        .push((api_version.unwrap_or(-1), r));
                }
                self.answers
                    .lock()
                    .expect("lock")
                    .pop_front()
                    .unwrap_or(Err(ControllerChannelError::Timeout(timeout)))
            })
        }
    }

    fn topic_id() -> Uuid {
        Uuid::from_u64_pair(1, 2)
    }

    fn tp() -> TopicPartition {
        TopicPartition {
            topic: "t".into(),
            partition: 0,
        }
    }

    fn broker(id: i32, epoch: i64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: id,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(9, 9),
            broker_epoch: epoch,
            end_points: Vec::new(),
            features: Vec::new(),
            rack: None,
            fenced: false,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        })
    }

    /// Broker 1 leads `t-0` (replicas 1, 2; ISR both) with a zero lag limit, so broker 2
    /// falls out of sync as soon as the clock moves.
    fn setup(channel: Arc<ScriptedChannel>, dir: &std::path::Path) -> Arc<IsrManager> {
        setup_with_isr(channel, dir, &[1, 2])
    }

    fn setup_with_isr(
        channel: Arc<ScriptedChannel>,
        dir: &std::path::Path,
        isr: &[i32],
    ) -> Arc<IsrManager> {
        let image = image_at(0, 0, isr);
        let replicas = Arc::new(ReplicaManager::new(1));
        replicas.set_image(image);
        let log = Log::open(dir, LogConfig::default(), 0).expect("log");
        let config = PartitionConfig {
            replica_lag_time_max_ms: 0,
            ..PartitionConfig::default()
        };
        let mut partition = Partition::open(1, log, config, 0, now_ms()).expect("partition");
        partition
            .make_leader(0, &[1, 2], isr, now_ms() - 1000)
            .expect("leader");
        replicas.insert(
            tp(),
            HostedPartition {
                partition: Arc::new(Mutex::new(partition)),
                topic_id: topic_id(),
                log_dir: dir.to_path_buf(),
            },
        );
        let ctx = Arc::new(Context {
            node_id: 1,
            config: ReplicationConfig {
                alter_partition_retry_backoff_ms: 1,
                ..ReplicationConfig::default()
            },
            replicas,
            channel,
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            failed_isr_updates: AtomicU64::new(0),
        });
        Arc::new(IsrManager::new(ctx))
    }

    fn committed(isr: &[i32], partition_epoch: i32) -> Answer {
        Ok(ResponseKind::AlterPartition(
            AlterPartitionResponse::default().with_topics(vec![
                ResultTopic::default()
                    .with_topic_id(topic_id())
                    .with_partitions(vec![
                        ResultData::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(1))
                            .with_leader_epoch(0)
                            .with_isr(isr.iter().map(|&b| BrokerId(b)).collect())
                            .with_partition_epoch(partition_epoch),
                    ]),
            ]),
        ))
    }

    fn partition_isr(manager: &IsrManager) -> Vec<i32> {
        let partition = manager.ctx.replicas.partition(&tp()).expect("hosted");
        let p = partition.lock().expect("lock");
        p.isr().iter().copied().collect()
    }

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !check() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    #[tokio::test]
    async fn shrink_falls_back_to_v2_and_retries_failed_requests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let channel = Arc::new(ScriptedChannel::default());
        channel.answers.lock().expect("lock").extend([
            Err(ControllerChannelError::Unsupported("v3".into())),
            Err(ControllerChannelError::Timeout(Duration::from_millis(1))),
            committed(&[1], 1),
        ]);
        let manager = setup(channel.clone(), dir.path());
        let tasks = manager.clone().start(&tokio::runtime::Handle::current());
        manager.maybe_shrink_isrs();
        until("the shrink commits", || partition_isr(&manager) == vec![1]).await;
        let sent = channel.sent.lock().expect("lock").clone();
        assert_eq!(sent.len(), 3);
        let (v3, first) = &sent[0];
        assert_eq!(*v3, 3);
        let p = &first.topics[0].partitions[0];
        assert_eq!(first.broker_epoch, 10);
        assert_eq!(first.topics[0].topic_id, topic_id());
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
        assert_eq!(p.new_isr_with_epochs.len(), 1);
        assert_eq!(p.new_isr_with_epochs[0].broker_id.0, 1);
        assert_eq!(p.new_isr_with_epochs[0].broker_epoch, 10);
        for (version, request) in &sent[1..] {
            assert_eq!(*version, 2);
            let p = &request.topics[0].partitions[0];
            assert_eq!(p.new_isr, vec![BrokerId(1)]);
            assert!(p.new_isr_with_epochs.is_empty());
        }
        assert_eq!(manager.ctx.isr_shrinks.load(Ordering::Relaxed), 1);
        // The next proposal goes against the answered partition epoch, ahead of the image.
        let epoch = manager.partition_epoch(&manager.ctx.replicas.image(), &tp(), topic_id(), 0);
        assert_eq!(epoch, Some(1));
        for task in tasks {
            task.abort();
        }
    }

    /// The image for `t-0` (replicas 1, 2) led by broker 1 at `leader_epoch` with
    /// `partition_epoch` and `isr`.
    fn image_at(leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> MetadataImage {
        let records = [
            broker(1, 10),
            broker(2, 20),
            MetadataRecord::Topic(TopicRecord {
                name: "t".into(),
                topic_id: topic_id(),
                unknown_tagged_fields: Default::default(),
            }),
            MetadataRecord::Partition(PartitionRecord {
                partition_id: 0,
                topic_id: topic_id(),
                replicas: vec![1, 2],
                isr: isr.to_vec(),
                removing_replicas: Vec::new(),
                adding_replicas: Vec::new(),
                leader: 1,
                leader_recovery_state: 0,
                leader_epoch,
                partition_epoch,
                directories: Vec::new(),
                eligible_leader_replicas: None,
                last_known_elr: None,
                unknown_tagged_fields: Default::default(),
            }),
        ];
        MetadataImage::from_records(&records, MetadataProvenance::new(1, 1, 0)).expect("image")
    }

    /// The publisher moves the replicas to new metadata before it publishes the image: no
    /// proposal goes out with the previous image's partition epoch, and one refused with
    /// INVALID_UPDATE_VERSION after the image moved on goes back to the committed ISR (it
    /// used to wait forever for metadata already applied, the ISR never changing again).
    #[tokio::test]
    async fn proposals_follow_the_image_of_the_partitions_leader_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let channel = Arc::new(ScriptedChannel::default());
        channel
            .answers
            .lock()
            .expect("lock")
            .push_back(committed(&[1], 3));
        let manager = setup(channel.clone(), dir.path());
        let tasks = manager.clone().start(&tokio::runtime::Handle::current());
        let partition = manager.ctx.replicas.partition(&tp()).expect("hosted");
        // Leader epoch 1 applied to the replica, the image still at epoch 0: nothing proposed.
        partition
            .lock()
            .expect("lock")
            .make_leader(1, &[1, 2], &[1, 2], now_ms() - 1000)
            .expect("epoch 1");
        manager.maybe_shrink_isrs();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(channel.sent.lock().expect("lock").is_empty());
        assert!(partition.lock().expect("lock").pending_isr().is_none());

        // A proposal against partition epoch 1 refused with INVALID_UPDATE_VERSION: while the
        // image says 1 it waits for new metadata; once the image of the same leader epoch says
        // 2 (applied while the request was out), it goes back to the committed ISR.
        manager.ctx.replicas.set_image(image_at(1, 1, &[1, 2]));
        let item = {
            let mut p = partition.lock().expect("lock");
            AlterItem::begin(&mut p, &tp(), topic_id(), 1, 1, vec![1]).expect("proposal")
        };
        manager.abort_if_metadata_moved_on(&item);
        assert!(partition.lock().expect("lock").pending_isr().is_some());
        manager.ctx.replicas.set_image(image_at(1, 2, &[1, 2]));
        manager.abort_if_metadata_moved_on(&item);
        assert!(partition.lock().expect("lock").pending_isr().is_none());
        // The next check proposes again, against partition epoch 2.
        manager.maybe_shrink_isrs();
        until("the shrink is proposed", || {
            !channel.sent.lock().expect("lock").is_empty()
        })
        .await;
        {
            let sent = channel.sent.lock().expect("lock");
            let p = &sent[0].1.topics[0].partitions[0];
            assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        }
        for task in tasks {
            task.abort();
        }
    }

    #[tokio::test]
    async fn one_proposal_in_flight_and_fenced_answers_wait_for_metadata() {
        let dir = tempfile::tempdir().expect("tempdir");
        let channel = Arc::new(ScriptedChannel::default());
        let fenced = AlterPartitionResponse::default().with_topics(vec![
            ResultTopic::default()
                .with_topic_id(topic_id())
                .with_partitions(vec![
                    ResultData::default()
                        .with_partition_index(0)
                        .with_error_code(ResponseError::FencedLeaderEpoch.code()),
                ]),
        ]);
        channel
            .answers
            .lock()
            .expect("lock")
            .push_back(Ok(ResponseKind::AlterPartition(fenced)));
        let manager = setup(channel.clone(), dir.path());
        let tasks = manager.clone().start(&tokio::runtime::Handle::current());
        manager.maybe_shrink_isrs();
        // A second check while the first is in flight proposes nothing.
        manager.maybe_shrink_isrs();
        until("the fenced answer arrives", || {
            manager.ctx.failed_isr_updates.load(Ordering::Relaxed) == 1
        })
        .await;
        assert_eq!(channel.sent.lock().expect("lock").len(), 1);
        // FENCED_LEADER_EPOCH: still pending (the HW counts the maximal ISR) until the
        // metadata moves the partition on; no new proposal meanwhile.
        manager.maybe_shrink_isrs();
        {
            let partition = manager.ctx.replicas.partition(&tp()).expect("hosted");
            let p = partition.lock().expect("lock");
            assert!(p.pending_isr().is_some());
            assert_eq!(p.maximal_isr().len(), 2);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(channel.sent.lock().expect("lock").len(), 1);
        for task in tasks {
            task.abort();
        }
    }

    #[tokio::test]
    async fn expansion_needs_the_followers_current_broker_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let channel = Arc::new(ScriptedChannel::default());
        channel
            .answers
            .lock()
            .expect("lock")
            .push_back(committed(&[1, 2], 1));
        let manager = setup_with_isr(channel.clone(), dir.path(), &[1]);
        let tasks = manager.clone().start(&tokio::runtime::Handle::current());
        let partition = manager.ctx.replicas.partition(&tp()).expect("hosted");
        // Broker 2 fetches at the log end: caught up, a candidate.
        partition
            .lock()
            .expect("lock")
            .read(
                0,
                1024,
                crate::partition::Fetcher::Follower { replica_id: 2 },
                Some(0),
                None,
                true,
                now_ms(),
            )
            .expect("follower read");
        // A fetch from an older incarnation of broker 2 (epoch 19, registered 20): no.
        manager.maybe_expand_isr(&tp(), 2, 19);
        assert!(partition.lock().expect("lock").pending_isr().is_none());
        // Its current epoch: proposed, with that epoch in new_isr_with_epochs.
        manager.maybe_expand_isr(&tp(), 2, 20);
        until("the expansion commits", || {
            partition_isr(&manager) == vec![1, 2]
        })
        .await;
        let sent = channel.sent.lock().expect("lock").clone();
        assert_eq!(sent.len(), 1);
        let states = &sent[0].1.topics[0].partitions[0].new_isr_with_epochs;
        let epochs: Vec<(i32, i64)> = states
            .iter()
            .map(|b| (b.broker_id.0, b.broker_epoch))
            .collect();
        assert_eq!(epochs, vec![(1, 10), (2, 20)]);
        assert_eq!(manager.ctx.isr_expands.load(Ordering::Relaxed), 1);
        for task in tasks {
            task.abort();
        }
    }
}
