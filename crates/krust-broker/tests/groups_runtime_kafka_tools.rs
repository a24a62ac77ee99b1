//! Kafka's own tools read what the group coordinator runtime writes: a group formed and its
//! offsets committed through `GroupCoordinator` over a real `ReplicaManager`/`Log` on disk,
//! then Kafka 3.9's `DumpLogSegments --offsets-decoder` (the cached 3.9.1 jars,
//! `scripts/fetch-kafka.sh`) decodes every `__consumer_offsets` record of the segment: the
//! OffsetCommit key/value and the GroupMetadata key/value with the member, generation,
//! protocol and assignment krust stored.
//!
//! Bounded by timeouts (the tool run too); the JVM is started by `krust-testkit`, killed on
//! timeout.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use krust_broker::group::GroupConfig;
use krust_broker::server::groups::{GroupCoordinator, GroupCoordinatorSettings};
use krust_broker::server::replica_manager::ReplicaManager;
use krust_metadata::image::topics::TopicPartition;
use krust_testkit::KafkaDist;
use uuid::Uuid;

mod groups_common;

use groups_common::{call_as, elected_coordinator, host_compacted_leader, sb};

async fn call(
    gc: &GroupCoordinator,
    api_key: ApiKey,
    version: i16,
    r: RequestKind,
) -> ResponseKind {
    call_as(gc, ("tools-client", 50_002), api_key, version, r).await
}

#[tokio::test]
async fn kafka_dump_log_segments_decodes_the_consumer_offsets_records_krust_wrote() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().expect("tempdir");
        let replicas = Arc::new(ReplicaManager::new(1));
        let tp = TopicPartition {
            topic: "__consumer_offsets".to_owned(),
            partition: 0,
        };
        let partition_dir = ReplicaManager::partition_dir(dir.path(), &tp);
        host_compacted_leader(&replicas, dir.path(), &tp, None, Uuid::from_u128(0xc0));
        let settings = GroupCoordinatorSettings {
            group: GroupConfig {
                offsets_topic_num_partitions: 1,
                group_initial_rebalance_delay_ms: 0,
                ..GroupConfig::default()
            },
            ..GroupCoordinatorSettings::default()
        };
        let gc = elected_coordinator(settings, &replicas, 1).await;

        // One member (JoinGroup v3: no KIP-394 round trip) → leader of generation 1.
        let join = JoinGroupRequest::default()
            .with_group_id(GroupId(sb("tools-group")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(sb("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(sb("range"))
                    .with_metadata(Bytes::from_static(b"\x00\x01\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff")),
            ]);
        let ResponseKind::JoinGroup(joined) =
            call(&gc, ApiKey::JoinGroup, 3, RequestKind::JoinGroup(join)).await
        else {
            panic!()
        };
        assert_eq!(joined.error_code, 0);
        let member = joined.member_id.to_string();
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(sb("tools-group")))
            .with_generation_id(joined.generation_id)
            .with_member_id(sb(&member))
            .with_assignments(vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(sb(&member))
                    .with_assignment(Bytes::from_static(b"\x00\x01\x00\x00\x00\x01\x00\x06orders\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff")),
            ]);
        let ResponseKind::SyncGroup(synced) =
            call(&gc, ApiKey::SyncGroup, 3, RequestKind::SyncGroup(sync)).await
        else {
            panic!()
        };
        assert_eq!(synced.error_code, 0);
        let commit = OffsetCommitRequest::default()
            .with_group_id(GroupId(sb("tools-group")))
            .with_member_id(sb(&member))
            .with_generation_id_or_member_epoch(joined.generation_id)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(42)
                            .with_committed_leader_epoch(3)
                            .with_committed_metadata(Some(sb("krust-meta"))),
                    ]),
            ]);
        let ResponseKind::OffsetCommit(committed) =
            call(&gc, ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(commit)).await
        else {
            panic!()
        };
        assert_eq!(committed.topics[0].partitions[0].error_code, 0);
        gc.shutdown().await;

        let segment = partition_dir.join("00000000000000000000.log");
        let out = tokio::task::spawn_blocking(move || {
            dist.run_tool(
                "kafka.tools.DumpLogSegments",
                &[
                    "--files",
                    segment.to_str().expect("utf-8 path"),
                    "--offsets-decoder",
                ],
                Duration::from_secs(60),
            )
        })
        .await
        .expect("tool task")
        .expect("DumpLogSegments runs");
        assert!(out.status.success(), "{out:?}");
        let records: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.contains(" key: "))
            .collect();
        let offset_commits: Vec<&&str> = records
            .iter()
            .filter(|l| l.contains(r#"key: {"type":"1""#))
            .collect();
        assert_eq!(offset_commits.len(), 1, "{}", out.stdout);
        let oc = offset_commits[0];
        for expected in [
            r#""group":"tools-group""#,
            r#""partition":0"#,
            r#""offset":42"#,
            r#""leaderEpoch":3"#,
            r#""metadata":"krust-meta""#,
        ] {
            assert!(oc.contains(expected), "{expected} in {oc}");
        }
        let group_metadata: Vec<&&str> = records
            .iter()
            .filter(|l| l.contains(r#"key: {"type":"2""#))
            .collect();
        assert!(!group_metadata.is_empty(), "{}", out.stdout);
        let gm = group_metadata.last().expect("one");
        for expected in [
            r#""group":"tools-group""#.to_owned(),
            r#""protocol":"range""#.to_owned(),
            format!(r#""leader":"{member}""#),
            format!(r#""memberId":"{member}""#),
            r#""clientId":"tools-client""#.to_owned(),
            r#""clientHost":"/127.0.0.1""#.to_owned(),
            format!(r#""generation":{}"#, joined.generation_id),
            r#""protocolType":"consumer""#.to_owned(),
            r#""assignedPartitions":[{"topic":"orders","partitions":[0]}]"#.to_owned(),
        ] {
            assert!(gm.contains(&expected), "{expected} in {gm}");
        }
        let unknown: BTreeMap<usize, &str> = out
            .stdout
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("Unknown") || l.contains("Exception"))
            .collect();
        assert!(unknown.is_empty(), "{unknown:?}");
    })
    .await
    .expect("test timed out");
}
