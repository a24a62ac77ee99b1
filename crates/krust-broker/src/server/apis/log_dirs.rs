//! DescribeLogDirs (35): each log dir with the sizes of the partitions it holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeLogDirsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::server::Broker;
use crate::server::replica_manager::lock;

/// `total_bytes`/`usable_bytes` when unknown (Kafka's `UNKNOWN_VOLUME_BYTES`).
pub const UNKNOWN_VOLUME_BYTES: i64 = -1;

/// Handles a DescribeLogDirs request (`topics` null = every partition).
#[must_use]
pub fn describe_log_dirs(broker: &Arc<Broker>, request: &DescribeLogDirsRequest) -> ResponseKind {
    let wanted = |topic: &str, partition: i32| match &request.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&partition)),
    };
    let hosted = broker.replica_manager().all_hosted();
    let mut response = DescribeLogDirsResponse::default();
    for dir in &broker.config().log_dirs {
        let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for (tp, h) in hosted.iter().filter(|(_, h)| &h.log_dir == dir) {
            if !wanted(&tp.topic, tp.partition) {
                continue;
            }
            let p = lock(&h.partition);
            let size = i64::try_from(p.log().size_in_bytes()).unwrap_or(i64::MAX);
            // Kafka's offset lag of a current log: how far its end is behind the HW.
            let lag = (p.high_watermark() - p.log_end_offset()).max(0);
            topics.entry(tp.topic.clone()).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(size)
                    .with_offset_lag(lag)
                    .with_is_future_key(false),
            );
        }
        response.results.push(
            DescribeLogDirsResult::default()
                .with_log_dir(StrBytes::from_string(dir.display().to_string()))
                .with_total_bytes(UNKNOWN_VOLUME_BYTES)
                .with_usable_bytes(UNKNOWN_VOLUME_BYTES)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            DescribeLogDirsTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
        );
    }
    ResponseKind::DescribeLogDirs(response)
}
