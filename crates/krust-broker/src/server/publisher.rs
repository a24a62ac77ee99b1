//! What the broker's replica manager and config publishers do with a new image (Kafka's
//! `ReplicaManager.applyDelta` and the topic part of `DynamicConfigPublisher`); the
//! [`super::metadata_publishers`] call [`Publisher::apply`] and [`Publisher::apply_configs`].
//!
//! For this broker's replicas (`delta.local_changes(node_id)`): deletes first (the partition
//! stops, its directory is renamed `<topic>-<n>.<uuid>-delete` and then removed, as Kafka
//! does), then leaders (log opened if needed with the topic's configs, `make_leader` with the
//! leader epoch, replicas and ISR), then followers (`make_follower`, handed to replication).
//! Topic config changes update the hosted partitions of that topic.
//!
//! On the first publication whose image has this broker's registration, partition
//! directories in the log dirs that the image does not place on this broker (topics deleted
//! while it was down) are removed: Kafka's stray-log clean-up.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use krust_log::Log;
use krust_log::checkpoint::{PartitionMetadata, TopicPartition as LogTopicPartition};
use krust_log::recovery::LogOpenOptions;
use krust_metadata::image::configs::{ConfigResource, ConfigResourceType};
use krust_metadata::image::topics::{LocalPartitionInfo, TopicPartition};
use krust_metadata::image::{MetadataDelta, MetadataImage};
use tracing::{info, warn};
use uuid::Uuid;

use super::BrokerConfig;
use super::replica_manager::{HostedPartition, ReplicaManager, lock, now_ms};
use super::replication::FollowedPartition;
use crate::error::PartitionError;
use crate::partition::Partition;
use crate::topic_config::{ConfigLayers, LogConfigLayers};

/// The name of the group coordinator's topic.
pub const GROUP_METADATA_TOPIC_NAME: &str = "__consumer_offsets";

/// Offsets read from the log dir checkpoints at start-up, used when a partition is first
/// opened.
#[derive(Debug, Default, Clone)]
pub struct StartupCheckpoints {
    /// `recovery-point-offset-checkpoint`.
    pub recovery_points: BTreeMap<LogTopicPartition, i64>,
    /// `replication-offset-checkpoint` (high watermarks).
    pub high_watermarks: BTreeMap<LogTopicPartition, i64>,
    /// `log-start-offset-checkpoint`.
    pub log_start_offsets: BTreeMap<LogTopicPartition, i64>,
}

/// What [`Publisher::apply`] did, for replication.
#[derive(Debug, Default)]
pub struct Applied {
    /// Partitions to fetch from their leaders.
    pub followers: Vec<FollowedPartition>,
    /// Partitions no longer followed (now led, or gone).
    pub stop_following: Vec<TopicPartition>,
}

/// The configs of a topic as the layers resolve them.
#[must_use]
pub fn topic_layers_maps(
    image: &MetadataImage,
    topic: &str,
    node_id: i32,
) -> [BTreeMap<String, String>; 3] {
    let get = |resource: ConfigResource| -> BTreeMap<String, String> {
        image
            .configs
            .configs(&resource)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    [
        get(ConfigResource::topic(topic)),
        get(ConfigResource {
            resource_type: ConfigResourceType::BROKER,
            name: node_id.to_string(),
        }),
        get(ConfigResource {
            resource_type: ConfigResourceType::BROKER,
            name: String::new(),
        }),
    ]
}

/// Applies new images to one broker's replicas.
#[derive(Debug)]
pub struct Publisher {
    config: Arc<BrokerConfig>,
    checkpoints: Mutex<StartupCheckpoints>,
    first: Mutex<bool>,
    /// Fenced or shutting-down brokers of the last image pushed to the partitions.
    ineligible: Mutex<BTreeSet<i32>>,
}

impl Publisher {
    /// The start-up checkpoint entries (kept for partitions not opened yet, so that a
    /// checkpoint written before the first publication does not lose them).
    #[must_use]
    pub fn startup_checkpoints(&self) -> StartupCheckpoints {
        self.checkpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// For `config`, with the checkpoints read at start-up.
    #[must_use]
    pub fn new(config: Arc<BrokerConfig>, checkpoints: StartupCheckpoints) -> Self {
        Publisher {
            config,
            checkpoints: Mutex::new(checkpoints),
            first: Mutex::new(true),
            ineligible: Mutex::new(BTreeSet::new()),
        }
    }

    fn layers_for<'a>(&'a self, maps: &'a [BTreeMap<String, String>; 3]) -> ConfigLayers<'a> {
        ConfigLayers {
            topic: &maps[0],
            broker_dynamic: &maps[1],
            broker_default: &maps[2],
            static_props: self.config.properties(),
        }
    }

    /// Applies the config changes of `delta` (new image `image`) to the hosted partitions:
    /// those of a changed topic, or all when this broker's or the default broker configs
    /// changed.
    pub fn apply_configs(
        &self,
        replicas: &ReplicaManager,
        delta: &MetadataDelta,
        image: &MetadataImage,
    ) {
        let node_id = self.config.node_id;
        let now = now_ms();
        if let Some(configs) = delta.configs_delta() {
            let broker_wide = configs.changes().keys().any(|r| {
                r.resource_type == ConfigResourceType::BROKER
                    && (r.name.is_empty() || r.name == node_id.to_string())
            });
            for (tp, hosted) in replicas.all_hosted() {
                let topic_changed = configs
                    .changes()
                    .contains_key(&ConfigResource::topic(tp.topic.clone()));
                if topic_changed || broker_wide {
                    let maps = topic_layers_maps(image, &tp.topic, node_id);
                    let layers = self.layers_for(&maps);
                    let mut p = lock(&hosted.partition);
                    p.set_config(layers.partition_config(), now);
                    if let Err(error) = p.set_log_config(layers.log_config()) {
                        warn!(%error, topic = %tp.topic, partition = tp.partition, "topic config refused by the log");
                    }
                    drop(p);
                    replicas.partition_changed(&tp);
                }
            }
        }
    }

    /// Applies this broker's replica changes of `delta` (new image `image`) to `replicas`,
    /// then makes the image visible to Metadata requests.
    pub fn apply(
        &self,
        replicas: &ReplicaManager,
        delta: &MetadataDelta,
        image: &MetadataImage,
    ) -> Applied {
        let node_id = self.config.node_id;
        let changes = delta.local_changes(node_id);
        let mut applied = Applied::default();
        let now = now_ms();

        for tp in &changes.deletes {
            applied.stop_following.push(tp.clone());
            if let Some(hosted) = replicas.remove(tp) {
                lock(&hosted.partition).stop();
                delete_partition_dir(&hosted.log_dir, tp, hosted.topic_id);
            }
        }

        for (tp, info) in &changes.leaders {
            let Some(partition) = self.get_or_open(replicas, image, tp, info, now) else {
                continue;
            };
            let reg = &info.partition;
            if let Err(error) =
                lock(&partition).make_leader(reg.leader_epoch, &reg.replicas, &reg.isr, now)
            {
                warn!(%error, topic = %tp.topic, partition = tp.partition, "make_leader failed");
            }
            replicas.partition_changed(tp);
            applied.stop_following.push(tp.clone());
        }

        for (tp, info) in &changes.followers {
            let Some(partition) = self.get_or_open(replicas, image, tp, info, now) else {
                continue;
            };
            let reg = &info.partition;
            let leader = (reg.leader >= 0).then_some(reg.leader);
            lock(&partition).make_follower(reg.leader_epoch, leader, &reg.replicas, &reg.isr);
            replicas.partition_changed(tp);
            if reg.leader >= 0 {
                applied.followers.push(FollowedPartition {
                    tp: tp.clone(),
                    topic_id: info.topic_id,
                    leader_id: reg.leader,
                    leader_epoch: reg.leader_epoch,
                });
            } else {
                applied.stop_following.push(tp.clone());
            }
        }

        // Brokers that cannot join an ISR: a caught-up follower on one of them must not hold
        // a leader's high watermark back (Kafka's `isReplicaIsrEligible`).
        let ineligible: BTreeSet<i32> = image
            .cluster
            .brokers
            .iter()
            .filter(|(_, b)| b.fenced || b.in_controlled_shutdown)
            .map(|(id, _)| *id)
            .collect();
        let ineligible_changed = {
            let mut last = self
                .ineligible
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::replace(&mut *last, ineligible.clone()) != ineligible
        };
        let newly_led: Vec<TopicPartition> = changes.leaders.keys().cloned().collect();
        let targets: Vec<(TopicPartition, Arc<Mutex<Partition>>)> = if ineligible_changed {
            replicas
                .all_hosted()
                .into_iter()
                .map(|(tp, hosted)| (tp, hosted.partition))
                .collect()
        } else {
            newly_led
                .iter()
                .filter_map(|tp| replicas.partition(tp).map(|p| (tp.clone(), p)))
                .collect()
        };
        for (tp, partition) in targets {
            if lock(&partition).set_ineligible_replicas(&ineligible, now) {
                replicas.partition_changed(&tp);
            }
        }

        // The image becomes visible to Metadata requests only now, after the local replicas
        // follow it (Kafka sets its metadata cache first): a client told "this broker leads"
        // must not then get NOT_LEADER_OR_FOLLOWER from it while the log is being opened —
        // a non-idempotent producer retrying that batch behind later ones reorders records.
        replicas.set_image(image.clone());

        // Stray logs are judged against an image that knows this broker: an empty or
        // half-loaded image would make every directory look stray.
        let ready = !image.is_empty() && image.cluster.broker(node_id).is_some();
        let first = ready && {
            let mut first = self
                .first
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::replace(&mut *first, false)
        };
        if first {
            self.remove_stray_logs(replicas, image);
        }
        applied
    }

    /// The hosted partition, opening its log the first time.
    fn get_or_open(
        &self,
        replicas: &ReplicaManager,
        image: &MetadataImage,
        tp: &TopicPartition,
        info: &LocalPartitionInfo,
        now: i64,
    ) -> Option<Arc<Mutex<Partition>>> {
        if let Some(hosted) = replicas.hosted(tp) {
            if hosted.topic_id == info.topic_id {
                return Some(hosted.partition);
            }
            // Same name, new topic: the old one was deleted and re-created in one delta.
            if let Some(old) = replicas.remove(tp) {
                lock(&old.partition).stop();
                delete_partition_dir(&old.log_dir, tp, old.topic_id);
            }
        }
        match self.open_partition(image, tp, info.topic_id, now) {
            Ok((partition, log_dir)) => {
                let partition = Arc::new(Mutex::new(partition));
                replicas.insert(
                    tp.clone(),
                    HostedPartition {
                        partition: Arc::clone(&partition),
                        topic_id: info.topic_id,
                        log_dir,
                    },
                );
                Some(partition)
            }
            Err(error) => {
                warn!(%error, topic = %tp.topic, partition = tp.partition, "cannot open partition");
                None
            }
        }
    }

    fn open_partition(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
        topic_id: Uuid,
        now: i64,
    ) -> Result<(Partition, PathBuf), PartitionError> {
        let log_dir = self.pick_log_dir(tp);
        let dir = ReplicaManager::partition_dir(&log_dir, tp);
        let maps = topic_layers_maps(image, &tp.topic, self.config.node_id);
        let layers = self.layers_for(&maps);
        let log_tp = LogTopicPartition::new(tp.topic.clone(), tp.partition);
        let (recovery_point, high_watermark, log_start) = {
            let cp = self
                .checkpoints
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (
                cp.recovery_points.get(&log_tp).copied().unwrap_or(0),
                cp.high_watermarks.get(&log_tp).copied().unwrap_or(0),
                cp.log_start_offsets.get(&log_tp).copied().unwrap_or(0),
            )
        };
        // A directory of an older incarnation of this topic name is not ours to reuse.
        let stored_topic_id = PartitionMetadata::read(&dir)
            .ok()
            .flatten()
            .map(|m| m.topic_id);
        if let Some(stored) = stored_topic_id
            && stored != *topic_id.as_bytes()
        {
            warn!(dir = %dir.display(), "partition directory of another topic id: deleting");
            delete_partition_dir(&log_dir, tp, Uuid::from_bytes(stored));
        }
        let (log, report) = Log::open_with(
            &dir,
            layers.log_config(),
            LogOpenOptions {
                recovery_point,
                log_start_offset: log_start,
                now_ms: now,
            },
        )?;
        if !report.recovered_segments.is_empty() || !report.deleted_segments.is_empty() {
            info!(dir = %dir.display(), truncated = report.truncated_bytes(), "recovered log");
        }
        // Written once per directory (Kafka's PartitionMetadataFile writes only when the
        // topic id is new): rewriting it on every open costs two fsyncs per partition, which
        // made a restart with many partitions (e.g. 50 of __consumer_offsets) take seconds.
        if stored_topic_id != Some(*topic_id.as_bytes())
            && let Err(error) = (PartitionMetadata {
                topic_id: *topic_id.as_bytes(),
            })
            .write(&dir)
        {
            warn!(%error, dir = %dir.display(), "cannot write partition.metadata");
        }
        let partition = Partition::open(
            self.config.node_id,
            log,
            layers.partition_config(),
            high_watermark,
            now,
        )?;
        Ok((partition, log_dir))
    }

    /// The log dir already holding `tp`, else the one with the fewest partitions (Kafka
    /// picks the least loaded dir).
    fn pick_log_dir(&self, tp: &TopicPartition) -> PathBuf {
        let dirs = &self.config.log_dirs;
        if let Some(existing) = dirs
            .iter()
            .find(|d| ReplicaManager::partition_dir(d, tp).is_dir())
        {
            return existing.clone();
        }
        dirs.iter()
            .min_by_key(|d| {
                std::fs::read_dir(d).map_or(usize::MAX, |entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.path().is_dir())
                        .count()
                })
            })
            .cloned()
            .unwrap_or_default()
    }

    /// Removes partition directories the image does not place on this broker.
    fn remove_stray_logs(&self, replicas: &ReplicaManager, image: &MetadataImage) {
        let node_id = self.config.node_id;
        for log_dir in &self.config.log_dirs {
            let Ok(entries) = std::fs::read_dir(log_dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if !path.is_dir() {
                    continue;
                }
                if name.ends_with("-delete") {
                    remove_dir_logged(&path);
                    continue;
                }
                let Some(tp) = parse_partition_dir_name(name) else {
                    continue;
                };
                if tp.topic == "__cluster_metadata" || replicas.hosted(&tp).is_some() {
                    continue;
                }
                let placed_here = image.topics.topic_by_name(&tp.topic).is_some_and(|t| {
                    t.partitions
                        .get(&tp.partition)
                        .is_some_and(|p| p.replicas.contains(&node_id))
                });
                if !placed_here {
                    info!(dir = %path.display(), "removing stray partition directory");
                    let topic_id = PartitionMetadata::read(&path)
                        .ok()
                        .flatten()
                        .map_or(Uuid::nil(), |m| Uuid::from_bytes(m.topic_id));
                    delete_partition_dir(log_dir, &tp, topic_id);
                }
            }
        }
    }
}

/// `<topic>-<n>` → the partition (topic names may contain `-`; the index is after the last).
#[must_use]
pub fn parse_partition_dir_name(name: &str) -> Option<TopicPartition> {
    let (topic, index) = name.rsplit_once('-')?;
    if topic.is_empty() {
        return None;
    }
    let partition = index.parse::<i32>().ok().filter(|&p| p >= 0)?;
    Some(TopicPartition {
        topic: topic.to_string(),
        partition,
    })
}

/// Kafka's delete: rename to `<topic>-<n>.<uuid>-delete`, then remove. A failure is logged;
/// the `-delete` leftover is removed at the next start.
fn delete_partition_dir(log_dir: &Path, tp: &TopicPartition, topic_id: Uuid) {
    let dir = ReplicaManager::partition_dir(log_dir, tp);
    if !dir.exists() {
        return;
    }
    let tomb = log_dir.join(format!(
        "{}-{}.{}-delete",
        tp.topic,
        tp.partition,
        topic_id.simple()
    ));
    let target = match std::fs::rename(&dir, &tomb) {
        Ok(()) => {
            if let Err(error) = krust_log::fs::fsync_dir(log_dir) {
                warn!(%error, "fsync of log dir after rename failed");
            }
            tomb
        }
        Err(error) => {
            warn!(%error, dir = %dir.display(), "cannot rename partition dir for deletion");
            dir
        }
    };
    remove_dir_logged(&target);
}

fn remove_dir_logged(path: &Path) {
    if let Err(error) = std::fs::remove_dir_all(path) {
        warn!(%error, dir = %path.display(), "cannot remove directory");
    }
}
