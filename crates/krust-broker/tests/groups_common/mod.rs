//! Shared setup of the `groups_runtime_*` tests that drive a `GroupCoordinator` directly (no
//! listener): a controller channel that never answers, a compacted partition led by broker 1
//! on a temp dir, a coordinator elected for `__consumer_offsets-0`, and requests handed to
//! the coordinator as a client on loopback would send them.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_broker::partition::{Partition, PartitionConfig};
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_broker::server::groups::{CoordinatorLog, GroupCoordinator, GroupCoordinatorSettings};
use krust_broker::server::replica_manager::{HostedPartition, ReplicaManager};
use krust_log::{CleanupPolicy, Log, LogConfig};
use krust_metadata::image::topics::TopicPartition;
use krust_metadata::image::{MetadataImage, MetadataProvenance};
use krust_metadata::records::{MetadataRecord, PartitionRecord, TopicRecord};
use krust_net::{Reply, RequestContext};
use uuid::Uuid;

/// A controller channel whose every request times out: these tests need no controller.
pub struct NoController;

impl ControllerChannel for NoController {
    fn send(
        &self,
        _request: RequestKind,
        _api_version: Option<i16>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
        Box::pin(async move { Err(ControllerChannelError::Timeout(timeout)) })
    }
}

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Hands `r` to `gc` as client `client_id` from `127.0.0.1:port` would send it; the answer
/// must be a response.
pub async fn call_as(
    gc: &GroupCoordinator,
    (client_id, port): (&str, u16),
    api_key: ApiKey,
    version: i16,
    r: RequestKind,
) -> ResponseKind {
    let ctx = RequestContext {
        api_key,
        api_version: version,
        correlation_id: 1,
        client_id: client_id.to_owned(),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], port)),
        listener_name: Arc::from("PLAINTEXT"),
        connection_id: 1,
        principal: Arc::new(krust_net::KafkaPrincipal::anonymous()),
        request_size: 0,
        throttle: krust_net::ConnectionThrottle::default(),
    };
    match gc.handle(&ctx, r).await {
        Reply::Send(r) => *r,
        other => panic!("{other:?}"),
    }
}

/// Opens `tp` under `dir` as a compacted log (`segment_bytes` if given), makes broker 1 its
/// only replica and leader, and hosts it in `replicas` with `topic_id`.
pub fn host_compacted_leader(
    replicas: &ReplicaManager,
    dir: &Path,
    tp: &TopicPartition,
    segment_bytes: Option<u32>,
    topic_id: Uuid,
) -> Arc<Mutex<Partition>> {
    let defaults = LogConfig::default();
    let log_config = LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: segment_bytes.unwrap_or(defaults.segment_bytes),
        ..defaults
    };
    let log = Log::open(&ReplicaManager::partition_dir(dir, tp), log_config, 0).expect("log");
    let mut partition =
        Partition::open(1, log, PartitionConfig::default(), 0, 0).expect("partition");
    partition.make_leader(1, &[1], &[1], 0).expect("leader");
    let partition = Arc::new(Mutex::new(partition));
    replicas.insert(
        tp.clone(),
        HostedPartition {
            partition: Arc::clone(&partition),
            topic_id,
            log_dir: dir.to_path_buf(),
        },
    );
    partition
}

/// An image with the topic `orders` (3 partitions led by broker 1): the tests commit offsets
/// of it, and a commit for a topic the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION.
pub fn image_with_orders() -> MetadataImage {
    let topic_id = Uuid::from_u128(0x0de5);
    let mut records = vec![MetadataRecord::Topic(TopicRecord {
        name: "orders".into(),
        topic_id,
        ..Default::default()
    })];
    records.extend((0..3).map(|partition_id| {
        MetadataRecord::Partition(PartitionRecord {
            partition_id,
            topic_id,
            replicas: vec![1],
            isr: vec![1],
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader: 1,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        })
    }));
    MetadataImage::from_records(&records, MetadataProvenance::new(10, 1, 1000)).expect("image")
}

/// A coordinator over `replicas`' log (whose image gets the `orders` topic), elected for
/// `__consumer_offsets-0` in `epoch`, once its shard is active.
pub async fn elected_coordinator(
    settings: GroupCoordinatorSettings,
    replicas: &Arc<ReplicaManager>,
    epoch: i32,
) -> GroupCoordinator {
    replicas.set_image(image_with_orders());
    let gc = GroupCoordinator::with_log(
        settings,
        Arc::clone(replicas) as Arc<dyn CoordinatorLog>,
        Arc::new(NoController),
    );
    wait_elected(&gc, epoch).await;
    gc
}

/// Elects `gc` for `__consumer_offsets-0` in `epoch` and waits until its shard is active.
pub async fn wait_elected(gc: &GroupCoordinator, epoch: i32) {
    gc.on_elected(0, epoch);
    while gc.active_partitions().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
