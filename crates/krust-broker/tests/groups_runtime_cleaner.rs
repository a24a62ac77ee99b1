//! The broker's log cleaner (`server/cleaner.rs`) on a compacted `__consumer_offsets`
//! partition written by the group coordinator runtime: after many commits of the same keys a
//! cleaner pass shrinks the log, records `cleaner-offset-checkpoint`, keeps the latest value of
//! every key, and a shard reloaded from the compacted log serves the latest offsets.
//!
//! Real `ReplicaManager`, `Partition` and `Log` on a temp dir; the first test calls the cleaner
//! iteration directly (no backoff timer), the second runs the cleaner thread with a short
//! backoff and waits for its checkpoint. Bounded by timeouts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::*;
use krust_broker::group::{CoordinatorRecord, GroupConfig};
use krust_broker::server::cleaner::{
    LogCleaner, LogCleanerSettings, LogCleanerState, clean_filthiest,
};
use krust_broker::server::groups::{CoordinatorLog, GroupCoordinator, GroupCoordinatorSettings};
use krust_broker::server::replica_manager::ReplicaManager;
use krust_metadata::image::topics::TopicPartition;
use uuid::Uuid;

mod groups_common;

use groups_common::{call_as, elected_coordinator, host_compacted_leader, sb, wait_elected};

async fn call(
    gc: &GroupCoordinator,
    api_key: ApiKey,
    version: i16,
    r: RequestKind,
) -> ResponseKind {
    call_as(gc, ("cleaner-test", 50_001), api_key, version, r).await
}

/// A simple-consumer commit (no generation, no member): 3 partitions of `orders`.
async fn commit(gc: &GroupCoordinator, round: i64) {
    let partitions = (0..3)
        .map(|p| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(round * 10 + i64::from(p))
                .with_committed_metadata(Some(sb("padding-padding-padding-padding")))
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(sb("compacted-group")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb("orders")))
                .with_partitions(partitions),
        ]);
    let ResponseKind::OffsetCommit(r) = call(
        gc,
        ApiKey::OffsetCommit,
        8,
        RequestKind::OffsetCommit(request),
    )
    .await
    else {
        panic!()
    };
    for p in &r.topics[0].partitions {
        assert_eq!(p.error_code, 0, "commit round {round}");
    }
}

async fn fetch(gc: &GroupCoordinator) -> Vec<i64> {
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(sb("compacted-group")))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0, 1, 2]),
            ])),
    ]);
    let ResponseKind::OffsetFetch(r) = call(
        gc,
        ApiKey::OffsetFetch,
        8,
        RequestKind::OffsetFetch(request),
    )
    .await
    else {
        panic!()
    };
    assert_eq!(r.groups[0].error_code, 0);
    r.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect()
}

/// Every (key, value) in the partition, in offset order.
fn all_records(replicas: &ReplicaManager) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = CoordinatorLog::read(replicas, 0, offset, 1 << 20).expect("read");
        if chunk.records.is_empty() || offset >= chunk.log_end_offset {
            return out;
        }
        let (batches, _) = krust_log::batch::BatchReader::new(chunk.records, 1 << 20).read_all();
        for b in batches {
            offset = b.next_offset();
            for r in b.records().expect("records") {
                out.push((r.key.expect("key").to_vec(), r.value.map(|v| v.to_vec())));
            }
        }
    }
}

#[tokio::test]
async fn cleaner_compacts_consumer_offsets_and_the_reloaded_shard_sees_the_latest_offsets() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().expect("tempdir");
        let replicas = Arc::new(ReplicaManager::new(1));
        let tp = TopicPartition {
            topic: "__consumer_offsets".to_owned(),
            partition: 0,
        };
        let partition = host_compacted_leader(
            &replicas,
            dir.path(),
            &tp,
            Some(4096),
            Uuid::from_u128(0xc0),
        );
        let settings = GroupCoordinatorSettings {
            group: GroupConfig {
                offsets_topic_num_partitions: 1,
                ..GroupConfig::default()
            },
            ..GroupCoordinatorSettings::default()
        };
        let gc = elected_coordinator(settings.clone(), &replicas, 1).await;
        for round in 0..150 {
            commit(&gc, round).await;
        }
        assert_eq!(fetch(&gc).await, vec![1490, 1491, 1492]);
        let before = all_records(&replicas);
        let size_before = partition.lock().expect("lock").log().size_in_bytes();
        let segments_before = partition.lock().expect("lock").log().segment_count();
        assert!(segments_before > 3, "{segments_before} segments");

        // One cleaner iteration, as the cleaner thread runs it.
        let mut state = LogCleanerState::new(LogCleanerSettings::default().cleaner);
        assert!(
            clean_filthiest(&replicas, &mut state, 1_000),
            "the dirty log is cleaned"
        );
        let size_after = partition.lock().expect("lock").log().size_in_bytes();
        assert!(
            size_after * 2 < size_before,
            "{size_before} → {size_after} bytes"
        );
        let checkpoint =
            krust_log::cleaner::read_cleaner_checkpoint(dir.path()).expect("checkpoint");
        let key = krust_log::checkpoint::TopicPartition {
            topic: "__consumer_offsets".to_owned(),
            partition: 0,
        };
        assert!(
            checkpoint.get(&key).is_some_and(|&o| o > 0),
            "{checkpoint:?}"
        );

        // Compaction kept the latest value of every key, in offset order.
        let after = all_records(&replicas);
        assert!(after.len() < before.len() / 2);
        let latest = |records: &[(Vec<u8>, Option<Vec<u8>>)]| {
            let mut m = BTreeMap::new();
            for (k, v) in records {
                m.insert(k.clone(), v.clone());
            }
            m
        };
        assert_eq!(latest(&before), latest(&after));
        for (k, v) in &after {
            CoordinatorRecord::decode(k, v.as_deref()).expect("Kafka's record format");
        }

        // Moved away and back: the shard reloads from the compacted log.
        gc.on_resigned(0, None);
        partition
            .lock()
            .expect("lock")
            .make_leader(2, &[1], &[1], 0)
            .expect("leader");
        wait_elected(&gc, 2).await;
        assert_eq!(fetch(&gc).await, vec![1490, 1491, 1492]);
        commit(&gc, 150).await;
        assert_eq!(fetch(&gc).await, vec![1500, 1501, 1502]);
        gc.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// The cleaner thread itself: started over a replica manager with a short backoff, it finds
/// the dirty compacted log on its own, cleans it and writes the checkpoint; shutdown stops it.
#[tokio::test]
async fn the_cleaner_thread_cleans_dirty_compacted_logs_on_its_own() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().expect("tempdir");
        let replicas = Arc::new(ReplicaManager::new(1));
        let tp = TopicPartition {
            topic: "compacted".to_owned(),
            partition: 0,
        };
        let partition = host_compacted_leader(
            &replicas,
            dir.path(),
            &tp,
            Some(2048),
            Uuid::from_u128(0xc1),
        );
        for round in 0..100 {
            let mut b = krust_log::RecordBatchBuilder::new(0);
            for key in 0..4 {
                b.append_kv(
                    1_700_000_000_000,
                    Some(bytes::Bytes::from(format!("key-{key}"))),
                    Some(bytes::Bytes::from(format!("value-{round}-padding-padding"))),
                );
            }
            replicas
                .append_records(&tp, b.build().into_bytes(), -1, Duration::from_secs(5))
                .await
                .expect("append");
        }
        let size_before = partition.lock().expect("lock").log().size_in_bytes();
        let settings = LogCleanerSettings {
            backoff_ms: 20,
            ..LogCleanerSettings::default()
        };
        let cleaner = LogCleaner::spawn(
            &tokio::runtime::Handle::current(),
            Arc::clone(&replicas),
            settings,
        )
        .expect("enabled");
        let key = krust_log::checkpoint::TopicPartition {
            topic: "compacted".to_owned(),
            partition: 0,
        };
        loop {
            let checkpoint =
                krust_log::cleaner::read_cleaner_checkpoint(dir.path()).expect("checkpoint");
            if checkpoint.contains_key(&key) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let size_after = partition.lock().expect("lock").log().size_in_bytes();
        assert!(size_after < size_before, "{size_before} → {size_after}");
        cleaner.shutdown().await;
        assert!(
            LogCleaner::spawn(
                &tokio::runtime::Handle::current(),
                replicas,
                LogCleanerSettings {
                    enable: false,
                    ..LogCleanerSettings::default()
                },
            )
            .is_none(),
            "log.cleaner.enable=false starts nothing"
        );
    })
    .await
    .expect("test timed out");
}

#[test]
fn cleaner_settings_come_from_server_properties() {
    let d = LogCleanerSettings::from_config(
        &krust_config::KafkaConfig::parse(&BTreeMap::new()).expect("empty is valid"),
    );
    assert_eq!(d, LogCleanerSettings::default());
    assert!(d.enable);
    assert_eq!(d.backoff_ms, 15_000);
    assert_eq!(d.cleaner.dedupe_buffer_size, 128 * 1024 * 1024);
    let props: BTreeMap<String, String> = [
        ("log.cleaner.enable", "false"),
        ("log.cleaner.backoff.ms", "100"),
        ("log.cleaner.dedupe.buffer.size", "1048576"),
        ("log.cleaner.io.max.bytes.per.second", "1000000.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let s =
        LogCleanerSettings::from_config(&krust_config::KafkaConfig::parse(&props).expect("valid"));
    assert!(!s.enable);
    assert_eq!(s.backoff_ms, 100);
    assert_eq!(s.cleaner.dedupe_buffer_size, 1_048_576);
    assert!((s.cleaner.io_max_bytes_per_second - 1e6).abs() < 1.0);
}
