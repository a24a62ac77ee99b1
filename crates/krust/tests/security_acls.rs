//! Authorization decisions side by side: the same requests as the same principals
//! against one Apache Kafka 3.9 combined node (the oracle) and one `krust server` combined node,
//! both with `authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`,
//! `super.users=User:admin;User:ANONYMOUS` (the harness's PLAINTEXT inter-broker and CONTROLLER
//! listeners are unauthenticated), `allow.everyone.if.no.acl.found=false` and a `SASL_PLAINTEXT`
//! listener with PLAIN users admin, alice, bob and carol.
//!
//! As `admin` the test creates topics `orders` (2 partitions), `orders-eu`, `payments`, `secret`,
//! `pub-1`, `pub-2`, commits a few group offsets and creates ACLs (CreateAcls v3): LITERAL and
//! PREFIXED topic ACLs, a DENY WRITE overriding a prefixed ALLOW ALL, host-specific ACLs
//! (`127.0.0.1` matches, `10.0.0.1` does not), `User:*` ACLs, a LITERAL `*` group ACL with a
//! DENY on one group, implied operations (READ/WRITE/ALTER → DESCRIBE, ALTER_CONFIGS →
//! DESCRIBE_CONFIGS, DENY READ not denying DESCRIBE), transactional-id and cluster ACLs
//! (IDEMPOTENT_WRITE, DESCRIBE, DESCRIBE_CONFIGS, ALTER, CREATE); carol has none of her own. Once
//! DescribeAcls lists them all, a table of 174 cases — one request as one principal,
//! each on a fresh authenticated connection, at a fixed version both sides support — covers every
//! client API of the reference's API → ACL table (Metadata with topic and cluster authorized
//! operations, Produce including a transactional batch without a transactional id, Fetch
//! consumer and follower, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, the group APIs, the
//! transaction APIs, configs, log dirs, DescribeCluster, DescribeTopicPartitions, the ACL APIs,
//! quotas, SCRAM credentials, topic admin APIs, ElectLeaders, ListPartitionReassignments).
//! Each answer is rendered as one line holding only what must be equal — error codes per element
//! with the element's name, sorted lists, authorized-operation sets — never throttle times,
//! node ids, ports, cluster ids, topic ids, member ids, producer ids or timestamps. The krust
//! lines must equal Kafka's; a failure prints every differing line side by side.
//!
//! Then, over the same node's PLAINTEXT listener (a super user), Kafka's own `kafka-acls`
//! (`--add` including `--producer`, `--list` all / by principal / `match` / cluster, `--remove`)
//! and `kafka-configs` (`--alter` of SCRAM credentials and user, default-user, client,
//! user+client and IP quotas, three refused alters, `--describe` of each entity type) must print
//! the same: stdout blocks and the entries inside them sorted (Kafka prints ACLs and quota
//! entities in its hash maps' order), the first stderr line and the exception's. What
//! `kafka-acls --add/--remove` lists after its change is left out: the broker may not have
//! applied the change yet, on Kafka too; the `--list` runs wait (DescribeAcls) until it has.
//!
//! Every wait is bounded, only 127.0.0.1 is used, each node is killed when its half ends.
//! Measured on the 2-core machine (debug build), the table about 10 s for the Kafka half (JVM
//! start included) and 2 s for krust's; with the 19 tool runs per half (one JVM each) the
//! whole test took 268 s while a CI run and two builds shared the machine.

mod security_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, DeleteGroupsRequest,
    DeleteRecordsRequest, DescribeClientQuotasRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, DescribeLogDirsRequest,
    DescribeProducersRequest, DescribeTopicPartitionsRequest, DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest, EndTxnRequest, FetchRequest, FindCoordinatorRequest,
    GroupId, HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, ListPartitionReassignmentsRequest,
    ListTransactionsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestKind, ResponseKind,
    SyncGroupRequest, TransactionalId, TxnOffsetCommitRequest, add_partitions_to_txn_request,
    delete_records_request, describe_configs_request, describe_producers_request,
    describe_topic_partitions_request, describe_user_scram_credentials_request, fetch_request,
    join_group_request, leave_group_request, list_offsets_request, metadata_request,
    offset_commit_request, offset_delete_request, offset_fetch_request,
    offset_for_leader_epoch_request, produce_request, sync_group_request,
    txn_offset_commit_request,
};
use krust_log::RecordBatchBuilder;
use krust_net::codec::request_api_key;
use krust_testkit::KafkaDist;
use security_support::acl_client::{
    ALL, ALLOW, ALTER, ALTER_CONFIGS, Acl, CLUSTER, CONFIG_BROKER, CONFIG_BROKER_LOGGER,
    CONFIG_TOPIC, CREATE, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS, GROUP, IDEMPOTENT_WRITE,
    LITERAL, PREFIXED, READ, TOPIC, TXN_ID, WRITE, alter_configs, assert_same_lines, by_topic,
    call, create_acls, create_partitions, create_topics, delete_acls, delete_topics, describe_acls,
    elect_leaders, err, ids_once_led, incremental_alter_configs, joined, opt_name, poll,
    render_shared, sb, tn,
};
use security_support::{SecureNode, broker_lock};
use uuid::Uuid;

const JAAS_PLAIN: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";"#;
/// How long setup waits for leaders, coordinators and ACLs.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

#[rustfmt::skip]
const ACLS: &[Acl] = &[
    // Topics: a prefixed ALLOW ALL with a literal DENY WRITE inside it, host-specific ACLs
    // (only 127.0.0.1 matches this test's connections), DENY READ next to ALLOW ALL, User:*.
    ("User:alice", TOPIC, "orders", PREFIXED, ALL, ALLOW, "*"),
    ("User:alice", TOPIC, "orders-eu", LITERAL, WRITE, DENY, "*"),
    ("User:alice", TOPIC, "payments", LITERAL, READ, ALLOW, "127.0.0.1"),
    ("User:alice", TOPIC, "payments", LITERAL, WRITE, ALLOW, "10.0.0.1"),
    ("User:bob", TOPIC, "orders", LITERAL, READ, ALLOW, "*"),
    ("User:bob", TOPIC, "payments", LITERAL, ALL, ALLOW, "*"),
    ("User:bob", TOPIC, "payments", LITERAL, READ, DENY, "*"),
    ("User:*", TOPIC, "pub-", PREFIXED, READ, ALLOW, "*"),
    ("User:bob", TOPIC, "pub-2", LITERAL, WRITE, ALLOW, "*"),
    ("User:bob", TOPIC, "pub-1", LITERAL, ALTER_CONFIGS, ALLOW, "*"),
    // Groups: a LITERAL `*` ALLOW with a DENY on one group, a prefixed User:* DESCRIBE.
    ("User:alice", GROUP, "g-alice", LITERAL, READ, ALLOW, "*"),
    ("User:bob", GROUP, "*", LITERAL, READ, ALLOW, "*"),
    ("User:bob", GROUP, "g-alice", LITERAL, READ, DENY, "*"),
    ("User:*", GROUP, "g-pub", PREFIXED, DESCRIBE, ALLOW, "*"),
    ("User:alice", GROUP, "g-alice-old", PREFIXED, DELETE, ALLOW, "*"),
    // Transactional ids.
    ("User:alice", TXN_ID, "tx-alice", PREFIXED, WRITE, ALLOW, "*"),
    ("User:alice", TXN_ID, "tx-alice-denied", LITERAL, WRITE, DENY, "*"),
    ("User:bob", TXN_ID, "tx-", PREFIXED, DESCRIBE, ALLOW, "*"),
    // The cluster.
    ("User:bob", CLUSTER, "kafka-cluster", LITERAL, IDEMPOTENT_WRITE, ALLOW, "*"),
    ("User:bob", CLUSTER, "kafka-cluster", LITERAL, ALTER, ALLOW, "*"),
    ("User:bob", CLUSTER, "kafka-cluster", LITERAL, CREATE, ALLOW, "*"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, DESCRIBE, ALLOW, "*"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, DESCRIBE_CONFIGS, ALLOW, "*"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, ALTER_CONFIGS, ALLOW, "10.0.0.1"),
];

/// The version each API is sent at: the newest both Kafka 3.9 and krust serve (Fetch v12 to
/// address topics by name, AddPartitionsToTxn v3 as clients send it).
fn version(key: ApiKey) -> i16 {
    match key {
        ApiKey::Produce => 9,
        ApiKey::Fetch => 12,
        ApiKey::ListOffsets => 9,
        ApiKey::Metadata => 12,
        ApiKey::OffsetCommit => 9,
        ApiKey::OffsetFetch => 9,
        ApiKey::FindCoordinator => 5,
        ApiKey::JoinGroup => 9,
        ApiKey::Heartbeat => 4,
        ApiKey::LeaveGroup => 5,
        ApiKey::SyncGroup => 5,
        ApiKey::DescribeGroups => 5,
        ApiKey::ListGroups => 5,
        ApiKey::CreateTopics => 7,
        ApiKey::DeleteTopics => 6,
        ApiKey::DeleteRecords => 2,
        ApiKey::InitProducerId => 5,
        ApiKey::OffsetForLeaderEpoch => 4,
        ApiKey::AddPartitionsToTxn => 3,
        ApiKey::AddOffsetsToTxn => 4,
        ApiKey::EndTxn => 4,
        ApiKey::TxnOffsetCommit => 4,
        ApiKey::DescribeAcls | ApiKey::CreateAcls | ApiKey::DeleteAcls => 3,
        ApiKey::DescribeConfigs => 4,
        ApiKey::AlterConfigs => 2,
        ApiKey::DescribeLogDirs => 4,
        ApiKey::CreatePartitions => 3,
        ApiKey::DeleteGroups => 2,
        ApiKey::ElectLeaders => 2,
        ApiKey::IncrementalAlterConfigs => 1,
        ApiKey::DescribeClientQuotas => 1,
        ApiKey::DescribeCluster => 1,
        ApiKey::ListTransactions => 1,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Request building.

fn gid(s: &str) -> GroupId {
    GroupId(sb(s))
}

fn txid(s: &str) -> TransactionalId {
    TransactionalId(sb(s))
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .expect("ms")
}

/// One record batch of two records; `producer` = (id, epoch, base sequence, transactional).
fn records(producer: Option<(i64, i16, i32, bool)>) -> Bytes {
    let mut builder = RecordBatchBuilder::new(0);
    if let Some((id, epoch, sequence, transactional)) = producer {
        builder = builder
            .producer(id, epoch, sequence)
            .transactional(transactional);
    }
    let now = now_ms();
    builder.append_kv(
        now,
        Some(Bytes::from_static(b"k1")),
        Some(Bytes::from_static(b"v1")),
    );
    builder.append_kv(
        now,
        Some(Bytes::from_static(b"k2")),
        Some(Bytes::from_static(b"v2")),
    );
    builder.build().into_bytes()
}

fn produce(txn: Option<&str>, parts: &[(&str, i32)], batch: &Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(txn.map(txid))
        .with_acks(-1)
        .with_timeout_ms(15_000)
        .with_topic_data(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    produce_request::TopicProduceData::default()
                        .with_name(tn(&topic))
                        .with_partition_data(
                            ps.into_iter()
                                .map(|p| {
                                    produce_request::PartitionProduceData::default()
                                        .with_index(p)
                                        .with_records(Some(batch.clone()))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn fetch(replica_id: i32, parts: &[(&str, i32)]) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(replica_id.into())
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    fetch_request::FetchTopic::default()
                        .with_topic(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    fetch_request::FetchPartition::default()
                                        .with_partition(p)
                                        .with_fetch_offset(0)
                                        .with_partition_max_bytes(1 << 16)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn list_offsets(parts: &[(&str, i32)]) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    list_offsets_request::ListOffsetsPartition::default()
                                        .with_partition_index(p)
                                        .with_timestamp(-1)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn offset_for_leader_epoch(parts: &[(&str, i32)]) -> OffsetForLeaderEpochRequest {
    OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                                        .with_partition(p)
                                        .with_current_leader_epoch(-1)
                                        .with_leader_epoch(0)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn delete_records(parts: &[(&str, i32, i64)]) -> DeleteRecordsRequest {
    let topics = by_topic(&parts.iter().map(|(t, p, _)| (*t, *p)).collect::<Vec<_>>());
    DeleteRecordsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, ps)| {
                    delete_records_request::DeleteRecordsTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    let offset = parts
                                        .iter()
                                        .find(|(t, q, _)| *t == topic && *q == p)
                                        .map_or(-1, |(_, _, o)| *o);
                                    delete_records_request::DeleteRecordsPartition::default()
                                        .with_partition_index(p)
                                        .with_offset(offset)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn offset_commit(group: &str, parts: &[(&str, i32)], offset: i64) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(sb(""))
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    offset_commit_request::OffsetCommitRequestPartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(offset)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// OffsetFetch (v8+ groups form): `None` partitions = all committed offsets of the group.
/// `(topic, partition)` pairs.
type Partitions<'a> = &'a [(&'a str, i32)];

fn offset_fetch(groups: &[(&str, Option<Partitions<'_>>)]) -> OffsetFetchRequest {
    OffsetFetchRequest::default().with_groups(
        groups
            .iter()
            .map(|(group, parts)| {
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(gid(group))
                    .with_member_epoch(-1)
                    .with_topics(parts.map(|parts| {
                        by_topic(parts)
                            .into_iter()
                            .map(|(topic, ps)| {
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(tn(&topic))
                                    .with_partition_indexes(ps)
                            })
                            .collect()
                    }))
            })
            .collect(),
    )
}

fn find_coordinator(key_type: i8, keys: &[&str]) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(keys.iter().map(|k| sb(k)).collect())
}

fn join_group(group: &str, member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(120_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(sb(member_id))
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(sb("range"))
                .with_metadata(Bytes::from_static(
                    b"\0\x01\0\0\0\x01\0\x06orders\xff\xff\xff\xff",
                )),
        ])
}

fn sync_group(group: &str, generation: i32, member_id: &str) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(sb(member_id))
        .with_protocol_type(Some(sb("consumer")))
        .with_protocol_name(Some(sb("range")))
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(sb(member_id))
                .with_assignment(Bytes::new()),
        ])
}

fn heartbeat(group: &str, generation: i32, member_id: &str) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(sb(member_id))
}

fn leave_group(group: &str, member_id: &str) -> LeaveGroupRequest {
    LeaveGroupRequest::default()
        .with_group_id(gid(group))
        .with_members(vec![
            leave_group_request::MemberIdentity::default().with_member_id(sb(member_id)),
        ])
}

fn describe_groups(groups: &[&str]) -> DescribeGroupsRequest {
    DescribeGroupsRequest::default()
        .with_groups(groups.iter().map(|g| gid(g)).collect())
        .with_include_authorized_operations(true)
}

fn offset_delete(group: &str, parts: &[(&str, i32)]) -> OffsetDeleteRequest {
    OffsetDeleteRequest::default()
        .with_group_id(gid(group))
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    offset_delete_request::OffsetDeleteRequestPartition::default()
                                        .with_partition_index(p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn delete_groups(groups: &[&str]) -> DeleteGroupsRequest {
    DeleteGroupsRequest::default().with_groups_names(groups.iter().map(|g| gid(g)).collect())
}

fn init_producer_id(txn: Option<&str>) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(txn.map(txid))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1)
}

fn add_partitions(
    txn: &str,
    producer: (i64, i16),
    parts: &[(&str, i32)],
) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txid(txn))
        .with_v3_and_below_producer_id(producer.0.into())
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

fn add_offsets(txn: &str, producer: (i64, i16), group: &str) -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest::default()
        .with_transactional_id(txid(txn))
        .with_producer_id(producer.0.into())
        .with_producer_epoch(producer.1)
        .with_group_id(gid(group))
}

fn txn_offset_commit(
    txn: &str,
    producer: (i64, i16),
    group: &str,
    parts: &[(&str, i32)],
) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest::default()
        .with_transactional_id(txid(txn))
        .with_group_id(gid(group))
        .with_producer_id(producer.0.into())
        .with_producer_epoch(producer.1)
        .with_generation_id(-1)
        .with_member_id(sb(""))
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(2)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn end_txn(txn: &str, producer: (i64, i16)) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(txid(txn))
        .with_producer_id(producer.0.into())
        .with_producer_epoch(producer.1)
        .with_committed(true)
}

fn describe_producers(parts: &[(&str, i32)]) -> DescribeProducersRequest {
    DescribeProducersRequest::default().with_topics(
        by_topic(parts)
            .into_iter()
            .map(|(topic, ps)| {
                describe_producers_request::TopicRequest::default()
                    .with_name(tn(&topic))
                    .with_partition_indexes(ps)
            })
            .collect(),
    )
}

fn describe_transactions(ids: &[&str]) -> DescribeTransactionsRequest {
    DescribeTransactionsRequest::default()
        .with_transactional_ids(ids.iter().map(|i| txid(i)).collect())
}

fn describe_scram(users: &[&str]) -> DescribeUserScramCredentialsRequest {
    DescribeUserScramCredentialsRequest::default().with_users(Some(
        users
            .iter()
            .map(|u| describe_user_scram_credentials_request::UserName::default().with_name(sb(u)))
            .collect(),
    ))
}

fn describe_configs(resources: &[(i8, &str)]) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default().with_resources(
        resources
            .iter()
            .map(|(kind, name)| {
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(*kind)
                    .with_resource_name(sb(name))
                    .with_configuration_keys(None)
            })
            .collect(),
    )
}

fn metadata(topics: Option<&[&str]>, auto_create: bool) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(tn(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create)
        .with_include_topic_authorized_operations(true)
}

fn metadata_by_id(ids: &[Uuid]) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(
            ids.iter()
                .map(|id| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_topic_id(*id)
                        .with_name(None)
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
        .with_include_topic_authorized_operations(true)
}

fn describe_topic_partitions(topics: &[&str]) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest::default()
        .with_response_partition_limit(2000)
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    describe_topic_partitions_request::TopicRequest::default().with_name(tn(t))
                })
                .collect(),
        )
}

// ---------------------------------------------------------------------------------------------
// Rendering: only what must be equal between Kafka and krust.

/// An authorized-operations bitfield as operation names.
fn ops(bits: i32) -> String {
    if bits == i32::MIN {
        return "ops=unset".to_owned();
    }
    const NAMES: [(u32, &str); 13] = [
        (0, "UNKNOWN"),
        (1, "ANY"),
        (2, "ALL"),
        (3, "READ"),
        (4, "WRITE"),
        (5, "CREATE"),
        (6, "DELETE"),
        (7, "ALTER"),
        (8, "DESCRIBE"),
        (9, "CLUSTER_ACTION"),
        (10, "DESCRIBE_CONFIGS"),
        (11, "ALTER_CONFIGS"),
        (12, "IDEMPOTENT_WRITE"),
    ];
    let names: Vec<String> = (0..32u32)
        .filter(|bit| bits & (1 << bit) != 0)
        .map(|bit| {
            NAMES
                .iter()
                .find(|(b, _)| *b == bit)
                .map_or_else(|| format!("bit{bit}"), |(_, n)| (*n).to_owned())
        })
        .collect();
    format!("ops=[{}]", names.join(","))
}

/// `topic-partition:error` for every partition of a per-topic answer, sorted.
macro_rules! per_partition {
    ($topics:expr, $name:ident, $partitions:ident, $index:ident, $code:ident) => {
        joined(
            $topics
                .iter()
                .flat_map(|t| {
                    t.$partitions
                        .iter()
                        .map(move |p| format!("{}-{}:{}", t.$name.0, p.$index, err(p.$code)))
                })
                .collect(),
        )
    };
}

fn render(response: &ResponseKind) -> String {
    match response {
        ResponseKind::Metadata(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let bad_partitions: Vec<String> = t
                        .partitions
                        .iter()
                        .filter(|p| p.error_code != 0)
                        .map(|p| format!("p{}{}", p.partition_index, err(p.error_code)))
                        .collect();
                    format!(
                        "{}:{}:id={}:parts={}{}:{}",
                        opt_name(t.name.as_ref()),
                        err(t.error_code),
                        if t.topic_id.is_nil() { "zero" } else { "set" },
                        t.partitions.len(),
                        if bad_partitions.is_empty() {
                            String::new()
                        } else {
                            format!("({})", bad_partitions.join(","))
                        },
                        ops(t.topic_authorized_operations)
                    )
                })
                .collect();
            format!(
                "topics={} cluster_{}",
                joined(topics),
                ops(r.cluster_authorized_operations)
            )
        }
        ResponseKind::Produce(r) => {
            per_partition!(r.responses, name, partition_responses, index, error_code)
        }
        ResponseKind::Fetch(r) => format!(
            "{} {}",
            err(r.error_code),
            per_partition!(r.responses, topic, partitions, partition_index, error_code)
        ),
        ResponseKind::ListOffsets(r) => {
            per_partition!(r.topics, name, partitions, partition_index, error_code)
        }
        ResponseKind::OffsetForLeaderEpoch(r) => {
            per_partition!(r.topics, topic, partitions, partition, error_code)
        }
        ResponseKind::DeleteRecords(r) => {
            per_partition!(r.topics, name, partitions, partition_index, error_code)
        }
        ResponseKind::OffsetCommit(r) => {
            per_partition!(r.topics, name, partitions, partition_index, error_code)
        }
        ResponseKind::OffsetFetch(r) => joined(
            r.groups
                .iter()
                .map(|g| {
                    format!(
                        "{}:{}{}",
                        g.group_id.0,
                        err(g.error_code),
                        joined(
                            g.topics
                                .iter()
                                .flat_map(|t| {
                                    t.partitions.iter().map(move |p| {
                                        format!(
                                            "{}-{}@{}:{}",
                                            t.name.0,
                                            p.partition_index,
                                            p.committed_offset,
                                            err(p.error_code)
                                        )
                                    })
                                })
                                .collect()
                        )
                    )
                })
                .collect(),
        ),
        ResponseKind::FindCoordinator(r) => joined(
            r.coordinators
                .iter()
                .map(|c| format!("{}:{}", c.key, err(c.error_code)))
                .collect(),
        ),
        ResponseKind::JoinGroup(r) => err(r.error_code),
        ResponseKind::SyncGroup(r) => err(r.error_code),
        ResponseKind::Heartbeat(r) => err(r.error_code),
        ResponseKind::LeaveGroup(r) => format!(
            "{} members={}",
            err(r.error_code),
            joined(r.members.iter().map(|m| err(m.error_code)).collect())
        ),
        ResponseKind::DescribeGroups(r) => joined(
            r.groups
                .iter()
                .map(|g| {
                    format!(
                        "{}:{}:state={}:type={}:members={}:{}",
                        g.group_id.0,
                        err(g.error_code),
                        g.group_state,
                        g.protocol_type,
                        g.members.len(),
                        ops(g.authorized_operations)
                    )
                })
                .collect(),
        ),
        ResponseKind::ListGroups(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(r.groups.iter().map(|g| g.group_id.0.to_string()).collect())
        ),
        ResponseKind::DeleteGroups(r) => joined(
            r.results
                .iter()
                .map(|g| format!("{}:{}", g.group_id.0, err(g.error_code)))
                .collect(),
        ),
        ResponseKind::OffsetDelete(r) => format!(
            "{} {}",
            err(r.error_code),
            per_partition!(r.topics, name, partitions, partition_index, error_code)
        ),
        ResponseKind::InitProducerId(r) => err(r.error_code),
        ResponseKind::AddPartitionsToTxn(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| {
                        t.results_by_partition.iter().map(move |p| {
                            format!(
                                "{}-{}:{}",
                                t.name.0,
                                p.partition_index,
                                err(p.partition_error_code)
                            )
                        })
                    })
                    .collect()
            )
        ),
        ResponseKind::AddOffsetsToTxn(r) => err(r.error_code),
        ResponseKind::EndTxn(r) => err(r.error_code),
        ResponseKind::TxnOffsetCommit(r) => {
            per_partition!(r.topics, name, partitions, partition_index, error_code)
        }
        ResponseKind::DescribeProducers(r) => joined(
            r.topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(move |p| {
                        // The message of an illegal name (Kafka's `Topic.validate`).
                        let message = match &p.error_message {
                            Some(m) if p.error_code == 17 => format!(":{m}"),
                            _ => String::new(),
                        };
                        format!(
                            "{}-{}:{}:producers={}{message}",
                            t.name.0,
                            p.partition_index,
                            err(p.error_code),
                            p.active_producers.len()
                        )
                    })
                })
                .collect(),
        ),
        ResponseKind::DescribeTransactions(r) => joined(
            r.transaction_states
                .iter()
                .map(|s| {
                    format!(
                        "{}:{}:state={}:topics={}",
                        s.transactional_id.0,
                        err(s.error_code),
                        s.transaction_state,
                        joined(
                            s.topics
                                .iter()
                                .map(|t| {
                                    let mut ps = t.partitions.clone();
                                    ps.sort_unstable();
                                    format!("{}{:?}", t.topic.0, ps)
                                })
                                .collect()
                        )
                    )
                })
                .collect(),
        ),
        ResponseKind::ListTransactions(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(
                r.transaction_states
                    .iter()
                    .map(|s| format!("{}:{}", s.transactional_id.0, s.transaction_state))
                    .collect()
            )
        ),
        ResponseKind::DescribeLogDirs(r) => format!(
            "{} dirs={}",
            err(r.error_code),
            joined(r.results.iter().map(|d| err(d.error_code)).collect())
        ),
        ResponseKind::DescribeCluster(r) => format!(
            "{} endpoint_type={} cluster_{}",
            err(r.error_code),
            r.endpoint_type,
            ops(r.cluster_authorized_operations)
        ),
        ResponseKind::DescribeTopicPartitions(r) => joined(
            r.topics
                .iter()
                .map(|t| {
                    format!(
                        "{}:{}:id={}:parts={}:{}",
                        opt_name(t.name.as_ref()),
                        err(t.error_code),
                        if t.topic_id.is_nil() { "zero" } else { "set" },
                        t.partitions.len(),
                        ops(t.topic_authorized_operations)
                    )
                })
                .collect(),
        ),
        ResponseKind::DescribeClientQuotas(r) => format!(
            "{} {:?} entries={}",
            err(r.error_code),
            r.error_message.as_ref().map(|m| m.to_string()),
            r.entries
                .as_ref()
                .map_or(-1, |e| i64::try_from(e.len()).unwrap_or(-1))
        ),
        ResponseKind::DescribeUserScramCredentials(r) => format!(
            "{} {:?} {}",
            err(r.error_code),
            r.error_message.as_ref().map(|m| m.to_string()),
            joined(
                r.results
                    .iter()
                    .map(|u| {
                        format!(
                            "{}:{}:{:?}",
                            u.user,
                            err(u.error_code),
                            u.error_message.as_ref().map(|m| m.to_string())
                        )
                    })
                    .collect()
            )
        ),
        other => render_shared(other).unwrap_or_else(|| format!("unexpected {other:?}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The table.

struct Table {
    port: u16,
    lines: Vec<String>,
}

impl Table {
    /// Sends `request` as `user` at the API's version (or `version_override`), records the
    /// rendered line under `name` and returns the answer.
    fn case_at(
        &mut self,
        name: &str,
        user: &str,
        version_override: Option<i16>,
        request: impl Into<RequestKind>,
    ) -> Option<ResponseKind> {
        let request = request.into();
        let key = request_api_key(&request).expect("a request");
        let version = version_override.unwrap_or_else(|| version(key));
        let answer = call(self.port, user, version, request);
        let rendered = match &answer {
            Ok(response) => render(response),
            Err(e) => format!("FAILED: {e}"),
        };
        self.lines.push(format!(
            "{name:<30} {user:<5} {key:?} v{version}: {rendered}"
        ));
        answer.ok()
    }

    fn case(
        &mut self,
        name: &str,
        user: &str,
        request: impl Into<RequestKind>,
    ) -> Option<ResponseKind> {
        self.case_at(name, user, None, request)
    }
}

fn producer_of(answer: Option<ResponseKind>) -> (i64, i16) {
    match answer {
        Some(ResponseKind::InitProducerId(r)) if r.error_code == 0 => {
            (r.producer_id.0, r.producer_epoch)
        }
        _ => (-1, -1),
    }
}

const TOPICS: &[(&str, i32)] = &[
    ("orders", 2),
    ("orders-eu", 1),
    ("payments", 1),
    ("secret", 1),
    ("pub-1", 1),
    ("pub-2", 1),
];

/// Topics, data, group offsets and ACLs as admin. Returns the setup's own lines and the topic
/// ids by name.
fn setup(port: u16, strict: bool) -> (Vec<String>, BTreeMap<String, Uuid>) {
    let mut lines = Vec::new();
    let admin = |request: RequestKind| {
        let key = request_api_key(&request).expect("a request");
        call(port, "admin", version(key), request)
    };
    let check = |lines: &mut Vec<String>, what: &str, line: String, ok: bool| {
        assert!(ok || !strict, "Kafka setup step {what} failed: {line}");
        lines.push(format!("setup {what}: {line}"));
    };
    // Topics, with a leader each.
    let created = admin(create_topics(TOPICS, false).into());
    let line = created.as_ref().map_or_else(Clone::clone, render);
    check(
        &mut lines,
        "create topics",
        line.clone(),
        !line.contains('!') && created.is_ok(),
    );
    let names: Vec<&str> = TOPICS.iter().map(|(n, _)| *n).collect();
    let ids = poll(SETUP_TIMEOUT, || {
        ids_once_led(admin(metadata(Some(&names), false).into()), names.len())
    });
    check(
        &mut lines,
        "leaders",
        format!("{}", ids.is_some()),
        ids.is_some(),
    );
    let ids = ids.unwrap_or_default();
    // The group and transaction coordinators (their internal topics are created on first use).
    for (key_type, key) in [(0, "g-setup"), (1, "tx-setup")] {
        let found = poll(SETUP_TIMEOUT, || {
            match admin(find_coordinator(key_type, &[key]).into()) {
                Ok(ResponseKind::FindCoordinator(r))
                    if r.coordinators.iter().all(|c| c.error_code == 0) =>
                {
                    Some(())
                }
                _ => None,
            }
        });
        check(
            &mut lines,
            &format!("coordinator {key}"),
            format!("{}", found.is_some()),
            found.is_some(),
        );
    }
    // Producer ids: the first InitProducerId of each kind answers COORDINATOR_LOAD_IN_PROGRESS
    // while the node loads `__transaction_state` or fetches its first producer id block.
    for txn in [None, Some("setup-txn")] {
        let ready = poll(SETUP_TIMEOUT, || {
            match admin(init_producer_id(txn).into()) {
                Ok(ResponseKind::InitProducerId(r)) if r.error_code == 0 => Some(()),
                _ => None,
            }
        });
        check(
            &mut lines,
            &format!("producer id {txn:?}"),
            format!("{}", ready.is_some()),
            ready.is_some(),
        );
    }
    // A batch in every partition.
    let every: Vec<(&str, i32)> = TOPICS
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| (*t, p)))
        .collect();
    let produced = admin(produce(None, &every, &records(None)).into());
    let line = produced.as_ref().map_or_else(Clone::clone, render);
    check(
        &mut lines,
        "produce",
        line.clone(),
        !line.contains('!') && produced.is_ok(),
    );
    // Offsets: one only admin may see, and groups alice may delete.
    for (group, parts) in [
        ("g-alice", &[("secret", 0)][..]),
        ("g-alice-old", &[("orders", 0)][..]),
        ("g-alice-old2", &[("orders", 0)][..]),
        ("g-pub-1", &[("pub-1", 0)][..]),
    ] {
        let committed = admin(offset_commit(group, parts, 1).into());
        let line = committed.as_ref().map_or_else(Clone::clone, render);
        check(
            &mut lines,
            &format!("commit {group}"),
            line.clone(),
            !line.contains('!') && committed.is_ok(),
        );
    }
    // The ACLs, then until DescribeAcls lists all of them.
    let created = admin(create_acls(ACLS).into());
    let line = created.as_ref().map_or_else(Clone::clone, render);
    check(
        &mut lines,
        "create acls",
        line.clone(),
        !line.contains('!') && created.is_ok(),
    );
    let listed = poll(Duration::from_secs(30), || {
        match admin(describe_acls(None).into()) {
            Ok(ResponseKind::DescribeAcls(r))
                if r.error_code == 0
                    && r.resources.iter().map(|res| res.acls.len()).sum::<usize>()
                        == ACLS.len() =>
            {
                Some(())
            }
            _ => None,
        }
    });
    check(
        &mut lines,
        "acls listed",
        format!("{}", listed.is_some()),
        listed.is_some(),
    );
    // Settled when an ACL-granted request is allowed: alice may describe `orders`.
    let settled = poll(Duration::from_secs(10), || {
        match call(port, "alice", 12, metadata(Some(&["orders"]), false).into()) {
            Ok(ResponseKind::Metadata(r)) if r.topics.iter().all(|t| t.error_code == 0) => Some(()),
            _ => None,
        }
    });
    check(
        &mut lines,
        "acls in effect",
        format!("{}", settled.is_some()),
        settled.is_some(),
    );
    (lines, ids)
}

/// The table. Order matters where a request changes state (the transaction, group membership,
/// topic administration last); both nodes see the same sequence.
#[rustfmt::skip]
#[allow(clippy::too_many_lines)] // the table
fn cases(t: &mut Table, ids: &BTreeMap<String, Uuid>) {
    let id = |name: &str| ids.get(name).copied().unwrap_or_else(Uuid::nil);
    let plain = records(None);
    let everyone = ["admin", "alice", "bob", "carol"];

    // --- Metadata: v12 with topic authorized operations, v10 for the cluster's.
    for user in everyone {
        t.case("metadata all topics", user, metadata(None, false));
    }
    t.case("metadata by name", "alice",
        metadata(Some(&["orders", "orders-eu", "secret", "orders-missing", "nope"]), false));
    t.case("metadata by name", "carol", metadata(Some(&["orders", "pub-1", "payments"]), false));
    t.case("metadata by name", "bob", metadata(Some(&["payments", "pub-1", "pub-2"]), false));
    t.case("metadata by id", "alice", metadata_by_id(&[id("secret"), id("orders")]));
    t.case("metadata by id", "carol", metadata_by_id(&[id("pub-2"), id("payments")]));
    for user in everyone {
        let request = metadata(Some(&[]), false).with_include_cluster_authorized_operations(true);
        t.case_at("metadata cluster ops", user, Some(10), request);
    }

    // --- Produce (v9, acks=all), Fetch (v12, by name), ListOffsets, OffsetForLeaderEpoch.
    t.case("produce", "alice", produce(None, &[
        ("orders", 0), ("orders", 1), ("orders-eu", 0), ("payments", 0), ("pub-1", 0),
        ("secret", 0), ("orders-missing", 0),
    ], &plain));
    t.case("produce", "bob", produce(None, &[("orders", 0), ("payments", 0), ("pub-2", 0)], &plain));
    t.case("produce", "carol", produce(None, &[("pub-1", 0), ("nope", 0)], &plain));
    t.case("produce", "admin", produce(None, &[("secret", 0)], &plain));
    t.case("fetch", "alice", fetch(-1, &[
        ("orders", 0), ("orders-eu", 0), ("payments", 0), ("pub-2", 0), ("secret", 0),
        ("orders-missing", 0),
    ]));
    t.case("fetch", "bob", fetch(-1, &[("orders", 0), ("payments", 0), ("pub-1", 0)]));
    t.case("fetch", "carol", fetch(-1, &[("pub-1", 0), ("orders", 0), ("nope", 0)]));
    t.case("fetch", "admin", fetch(-1, &[("secret", 0)]));
    t.case("fetch as follower", "alice", fetch(1, &[("orders", 0)]));
    t.case("list offsets", "alice",
        list_offsets(&[("orders", 0), ("secret", 0), ("pub-1", 0), ("orders-missing", 0)]));
    t.case("list offsets", "bob", list_offsets(&[("payments", 0), ("orders-eu", 0)]));
    t.case("list offsets", "carol", list_offsets(&[("payments", 0), ("pub-2", 0)]));
    t.case("offset for leader epoch", "alice", offset_for_leader_epoch(&[("orders", 0), ("secret", 0)]));
    t.case("offset for leader epoch", "carol", offset_for_leader_epoch(&[("pub-1", 0), ("orders", 0)]));

    // --- DeleteRecords.
    t.case("delete records", "alice", delete_records(&[("orders", 1, 1), ("orders-missing", 0, 0)]));
    t.case("delete records", "bob", delete_records(&[("orders", 0, 1), ("payments", 0, 1)]));
    t.case("delete records", "carol", delete_records(&[("pub-1", 0, 0)]));

    // --- Group offsets (setup committed g-alice secret-0 as admin).
    t.case("offset commit", "alice", offset_commit("g-alice", &[
        ("orders", 0), ("orders", 1), ("payments", 0), ("secret", 0), ("orders-missing", 0),
    ], 1));
    t.case("offset commit", "carol", offset_commit("g-alice", &[("pub-1", 0)], 1));
    t.case("offset commit, denied group", "bob", offset_commit("g-alice", &[("orders", 0)], 1));
    t.case("offset commit, group *", "bob", offset_commit("g-bob", &[("orders", 0), ("payments", 0)], 1));
    t.case("offset commit, describe only", "carol", offset_commit("g-pub-1", &[("pub-1", 0)], 1));
    t.case("offset fetch listed", "alice",
        offset_fetch(&[("g-alice", Some(&[("orders", 0), ("orders", 1), ("secret", 0)]))]));
    t.case("offset fetch all", "alice", offset_fetch(&[("g-alice", None)]));
    t.case("offset fetch all", "admin", offset_fetch(&[("g-alice", None)]));
    t.case("offset fetch all", "bob", offset_fetch(&[("g-alice", None), ("g-bob", None)]));
    t.case("offset fetch all", "carol", offset_fetch(&[("g-alice", None), ("g-pub-1", None)]));
    t.case("offset fetch listed", "carol",
        offset_fetch(&[("g-pub-1", Some(&[("pub-1", 0), ("payments", 0)]))]));

    // --- FindCoordinator (batched keys).
    t.case("find group coordinator", "alice", find_coordinator(0, &["g-alice", "g-bob", "g-pub-x"]));
    t.case("find group coordinator", "bob", find_coordinator(0, &["g-alice", "g-any"]));
    t.case("find group coordinator", "carol", find_coordinator(0, &["g-alice", "g-pub-1"]));
    t.case("find txn coordinator", "alice",
        find_coordinator(1, &["tx-alice", "tx-alice-denied", "tx-bob"]));
    t.case("find txn coordinator", "bob", find_coordinator(1, &["tx-alice", "tx-x", "other"]));
    t.case("find txn coordinator", "carol", find_coordinator(1, &["tx-alice"]));

    // --- InitProducerId: transactional, and idempotent (KIP-679: IDEMPOTENT_WRITE on the
    // cluster or WRITE on any topic).
    let alice_txn = producer_of(t.case("init txn producer", "alice", init_producer_id(Some("tx-alice"))));
    let admin_txn = producer_of(t.case("init txn producer", "admin", init_producer_id(Some("tx-admin"))));
    t.case("init txn producer, denied", "alice", init_producer_id(Some("tx-alice-denied")));
    t.case("init txn producer", "bob", init_producer_id(Some("tx-bob")));
    t.case("init txn producer", "carol", init_producer_id(Some("tx-carol")));
    let bob_idem = producer_of(t.case("init idempotent, cluster acl", "bob", init_producer_id(None)));
    let alice_idem = producer_of(t.case("init idempotent, topic acl", "alice", init_producer_id(None)));
    t.case("init idempotent, no acl", "carol", init_producer_id(None));
    // Produce checks no IDEMPOTENT_WRITE.
    let (pid, epoch) = alice_idem;
    t.case("produce idempotent", "alice", produce(None, &[("orders", 1)], &records(Some((pid, epoch, 0, false)))));
    let (pid, epoch) = bob_idem;
    t.case("produce idempotent", "bob", produce(None, &[("pub-2", 0)], &records(Some((pid, epoch, 0, false)))));

    // --- One transaction of alice's, with refused steps around it.
    t.case("add partitions to txn", "alice",
        add_partitions("tx-alice", alice_txn, &[("orders", 0), ("payments", 0)]));
    t.case("add partitions to txn", "alice",
        add_partitions("tx-alice", alice_txn, &[("orders", 0), ("orders-missing", 0)]));
    t.case("add partitions, internal", "admin",
        add_partitions("tx-admin", admin_txn, &[("__consumer_offsets", 0)]));
    t.case("add partitions to txn", "bob", add_partitions("tx-alice", alice_txn, &[("orders", 0)]));
    t.case("add partitions to txn", "carol", add_partitions("tx-alice", alice_txn, &[("pub-1", 0)]));
    t.case("add partitions to txn, ok", "alice", add_partitions("tx-alice", alice_txn, &[("orders", 0)]));
    let (pid, epoch) = alice_txn;
    let txn_batch = records(Some((pid, epoch, 0, true)));
    t.case("produce txn batch, null id", "alice", produce(None, &[("orders", 0)], &txn_batch));
    t.case("produce txn batch", "carol", produce(Some("tx-alice"), &[("pub-1", 0)], &txn_batch));
    t.case("produce txn batch", "bob", produce(Some("tx-bob"), &[("pub-2", 0)], &txn_batch));
    t.case("produce txn batch", "alice", produce(Some("tx-alice"), &[("orders", 0)], &txn_batch));
    // The transactional id is checked only when a batch is transactional.
    t.case("produce plain batch, txn id", "bob", produce(Some("tx-bob"), &[("pub-2", 0)], &plain));
    t.case("add offsets to txn", "alice", add_offsets("tx-alice", alice_txn, "g-bob"));
    t.case("add offsets to txn", "bob", add_offsets("tx-alice", alice_txn, "g-bob"));
    t.case("add offsets to txn, ok", "alice", add_offsets("tx-alice", alice_txn, "g-alice"));
    t.case("txn offset commit", "alice", txn_offset_commit("tx-alice", alice_txn, "g-alice", &[
        ("orders", 0), ("payments", 0), ("secret", 0), ("orders-missing", 0),
    ]));
    t.case("txn offset commit", "carol", txn_offset_commit("tx-alice", alice_txn, "g-alice", &[("pub-1", 0)]));
    t.case("txn offset commit, group", "alice", txn_offset_commit("tx-alice", alice_txn, "g-bob", &[("orders", 0)]));
    t.case("describe transactions", "alice", describe_transactions(&["tx-alice", "tx-alice-nope", "tx-bob-x"]));
    for user in ["admin", "bob", "carol"] {
        t.case("describe transactions", user, describe_transactions(&["tx-alice"]));
    }
    for user in everyone {
        t.case("list transactions", user, ListTransactionsRequest::default().with_duration_filter(-1));
    }
    t.case("end txn", "bob", end_txn("tx-alice", alice_txn));
    t.case("end txn", "carol", end_txn("tx-alice", alice_txn));
    t.case("end txn, commit", "alice", end_txn("tx-alice", alice_txn));
    t.case("describe producers", "alice",
        describe_producers(&[("orders", 0), ("orders", 1), ("secret", 0), ("orders-missing", 0)]));
    t.case("describe producers", "bob", describe_producers(&[("payments", 0), ("pub-2", 0)]));
    t.case("describe producers", "carol", describe_producers(&[("pub-1", 0), ("orders", 0)]));
    // An illegal name: INVALID_TOPIC_EXCEPTION before READ is checked, with or without it.
    t.case("describe producers", "carol", describe_producers(&[("bad name", 0), ("orders", 0)]));
    t.case("describe producers", "admin", describe_producers(&[("bad name", 0), ("..", 1)]));

    // --- Group membership, then listings and deletions.
    t.case("join group", "carol", join_group("g-alice", ""));
    t.case("join group, denied group", "bob", join_group("g-alice", ""));
    t.case("join group, describe only", "carol", join_group("g-pub-1", ""));
    let member = match t.case("join group, no member id", "alice", join_group("g-alice", "")) {
        Some(ResponseKind::JoinGroup(r)) => r.member_id.to_string(),
        _ => String::new(),
    };
    let generation = match t.case("join group", "alice", join_group("g-alice", &member)) {
        Some(ResponseKind::JoinGroup(r)) => r.generation_id,
        _ => -1,
    };
    t.case("sync group", "carol", sync_group("g-alice", generation, &member));
    t.case("sync group, denied group", "bob", sync_group("g-alice", generation, &member));
    t.case("sync group", "alice", sync_group("g-alice", generation, &member));
    t.case("heartbeat", "alice", heartbeat("g-alice", generation, &member));
    t.case("heartbeat, denied group", "bob", heartbeat("g-alice", generation, &member));
    t.case("heartbeat", "carol", heartbeat("g-alice", generation, &member));
    t.case("describe groups", "alice", describe_groups(&["g-alice", "g-bob", "g-pub-1"]));
    t.case("describe groups", "bob", describe_groups(&["g-alice", "g-bob", "g-none"]));
    t.case("describe groups", "carol", describe_groups(&["g-alice", "g-pub-1", "g-pub-none"]));
    for user in everyone {
        t.case("list groups", user, ListGroupsRequest::default());
    }
    t.case("leave group", "carol", leave_group("g-alice", &member));
    t.case("leave group, denied group", "bob", leave_group("g-alice", &member));
    t.case("leave group", "alice", leave_group("g-alice", &member));
    t.case("offset delete", "alice", offset_delete("g-alice-old", &[("orders", 0), ("secret", 0)]));
    t.case("offset delete", "alice", offset_delete("g-alice", &[("orders", 0)]));
    t.case("offset delete", "bob", offset_delete("g-bob", &[("orders", 0)]));
    t.case("offset delete", "carol", offset_delete("g-pub-1", &[("pub-1", 0)]));
    t.case("delete groups", "alice", delete_groups(&["g-alice-old2", "g-alice", "g-alice-old9"]));
    t.case("delete groups", "bob", delete_groups(&["g-bob"]));
    t.case("delete groups", "carol", delete_groups(&["g-pub-1"]));

    // --- Configs.
    t.case("describe configs", "alice", describe_configs(&[
        (CONFIG_TOPIC, "orders"), (CONFIG_TOPIC, "secret"), (CONFIG_TOPIC, "orders-missing"),
        (CONFIG_BROKER, "1"),
    ]));
    t.case("describe configs", "bob",
        describe_configs(&[(CONFIG_TOPIC, "pub-1"), (CONFIG_TOPIC, "pub-2"), (CONFIG_BROKER, "1")]));
    t.case("describe configs", "carol",
        describe_configs(&[(CONFIG_TOPIC, "pub-1"), (CONFIG_BROKER, "1"), (CONFIG_BROKER_LOGGER, "1")]));
    let retention = |topic| (CONFIG_TOPIC, topic, "retention.ms", "200000");
    let backoff = |broker| (CONFIG_BROKER, broker, "log.cleaner.backoff.ms", "20000");
    t.case("alter configs, validate", "bob", alter_configs(&[retention("pub-1")], true));
    t.case("alter configs, validate", "carol", alter_configs(&[retention("pub-1")], true));
    t.case("alter configs, validate", "alice", alter_configs(&[retention("orders"), backoff("1")], true));
    t.case("incremental alter configs", "bob", incremental_alter_configs(&[retention("pub-1")], false));
    t.case("incremental alter configs", "alice",
        incremental_alter_configs(&[retention("pub-1"), retention("orders-eu")], false));
    t.case("incremental alter configs", "alice", incremental_alter_configs(&[backoff("1")], true));
    t.case("incremental alter configs", "carol", incremental_alter_configs(&[backoff("")], true));

    // --- Cluster-level requests.
    for user in ["alice", "carol"] {
        t.case("describe log dirs", user, DescribeLogDirsRequest::default().with_topics(None));
    }
    for user in everyone {
        let request = DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        t.case("describe cluster", user, request);
    }
    t.case("describe cluster, no ops", "carol", DescribeClusterRequest::default());
    t.case("describe topic partitions", "alice",
        describe_topic_partitions(&["orders", "secret", "orders-missing"]));
    t.case("describe topic partitions", "carol", describe_topic_partitions(&["pub-1", "payments"]));
    t.case("describe topic partitions", "bob", describe_topic_partitions(&["payments", "pub-2"]));
    for user in ["alice", "bob", "carol"] {
        t.case("describe client quotas", user, DescribeClientQuotasRequest::default());
    }
    // Filters Kafka refuses (`ClientQuotasImage.describe`), and two it takes.
    let component = |entity: &str, match_type: i8, matched: Option<&str>| {
        kafka_protocol::messages::describe_client_quotas_request::ComponentData::default()
            .with_entity_type(sb(entity))
            .with_match_type(match_type)
            .with_match(matched.map(sb))
    };
    for (what, components) in [
        ("empty type", vec![component("", 2, None)]),
        ("type twice", vec![component("user", 2, None), component("user", 1, None)]),
        ("unknown type", vec![component("group", 2, None)]),
        ("exact without a name", vec![component("user", 0, None)]),
        ("default with a name", vec![component("user", 1, Some("alice"))]),
        ("specified with a name", vec![component("client-id", 2, Some("x"))]),
        ("bad match type", vec![component("user", 7, None)]),
        ("ip with user", vec![component("ip", 2, None), component("user", 2, None)]),
        ("users", vec![component("user", 2, None)]),
        ("default client", vec![component("client-id", 1, None)]),
    ] {
        t.case(
            &format!("describe client quotas, {what}"),
            "admin",
            DescribeClientQuotasRequest::default().with_components(components),
        );
    }
    // An empty user list (all users): with a null list Kafka 3.9 never answers an unauthorized
    // caller (`getErrorResponse` iterates the null list).
    for user in ["alice", "bob", "carol"] {
        t.case("describe scram credentials", user, describe_scram(&[]));
    }
    t.case("describe scram credentials", "alice", describe_scram(&["alice"]));
    for user in ["alice", "bob", "carol"] {
        let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(15_000).with_topics(None);
        t.case("list partition reassignments", user, request);
    }
    t.case("elect leaders", "bob", elect_leaders(&[("orders", 0)]));
    t.case("elect leaders", "alice", elect_leaders(&[("orders", 0)]));
    t.case("elect leaders", "carol", elect_leaders(&[("pub-1", 0)]));

    // --- The ACL APIs.
    t.case("describe acls", "alice", describe_acls(None));
    t.case("describe acls", "bob", describe_acls(Some("User:bob")));
    t.case("describe acls", "carol", describe_acls(None));
    let dave: Acl = ("User:dave", TOPIC, "zzz", LITERAL, READ, ALLOW, "*");
    let bad: Acl = ("User:dave", CLUSTER, "not-the-cluster", LITERAL, ALTER, ALLOW, "*");
    t.case("create acls", "alice", create_acls(&[dave]));
    t.case("create acls", "carol", create_acls(&[dave]));
    t.case("create acls", "bob", create_acls(&[dave, bad]));
    t.case("delete acls", "carol", delete_acls("User:dave"));
    t.case("delete acls", "alice", delete_acls("User:dave"));
    // Bob's new ACL must be in the broker's image before he deletes it.
    let port = t.port;
    poll(Duration::from_secs(10), || match call(port, "admin", 3, describe_acls(Some("User:dave")).into()) {
        Ok(ResponseKind::DescribeAcls(r)) if !r.resources.is_empty() => Some(()),
        _ => None,
    });
    t.case("delete acls", "bob", delete_acls("User:dave"));

    // --- Topic administration, last: it changes what the listings above show.
    t.case("create topics", "carol", create_topics(&[("carol-new", 1), ("orders", 1)], false));
    t.case("create topics", "alice",
        create_topics(&[("orders-new", 2), ("x-alice", 1), ("orders", 1)], false));
    t.case("create topics, validate", "alice", create_topics(&[("orders-validate", 1)], true));
    t.case("create topics, cluster acl", "bob", create_topics(&[("bob-new", 1)], false));
    t.case("create partitions", "alice", create_partitions(&[("orders-new", 3)], false));
    t.case("create partitions", "carol", create_partitions(&[("pub-1", 2)], true));
    t.case("create partitions", "bob", create_partitions(&[("pub-1", 2)], true));
    t.case("create partitions, validate", "bob", create_partitions(&[("payments", 2)], true));
    t.case("delete topics by name", "carol", delete_topics(&["secret", "pub-1", "nope"], &[]));
    t.case("delete topics by name", "alice", delete_topics(&["orders-gone"], &[]));
    t.case("delete topics by name", "bob", delete_topics(&["bob-new"], &[]));
    t.case("delete topics by id", "alice",
        delete_topics(&[], &[id("secret"), id("pub-2"), Uuid::from_u128(0x1234_5678)]));
    t.case("delete topics", "alice", delete_topics(&["orders-new"], &[]));
    t.case("metadata auto-create", "carol", metadata(Some(&["carol-auto"]), true));
    t.case("metadata auto-create", "bob", metadata(Some(&["bob-auto"]), true));
    t.case("metadata auto-create", "alice", metadata(Some(&["orders-auto"]), true));
}

fn start(dist: &KafkaDist, krust: bool) -> SecureNode {
    SecureNode::start(
        dist,
        krust,
        &[("SASL_PLAINTEXT", "SASL_PLAINTEXT")],
        &[
            ("sasl.enabled.mechanisms", "PLAIN".to_owned()),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                JAAS_PLAIN.to_owned(),
            ),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
            ),
            ("super.users", "User:admin;User:ANONYMOUS".to_owned()),
            ("allow.everyone.if.no.acl.found", "false".to_owned()),
        ],
        &["--release-version", "3.9"],
    )
}

/// The setup and the table's lines against one node; `(lines, number of cases, seconds, the
/// audit log's denials)`.
fn run(krust: bool) -> (Vec<String>, usize, f64, Vec<String>) {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let started = Instant::now();
    let node = start(&dist, krust);
    let port = node.ports[0];
    let (mut lines, ids) = setup(port, !krust);
    let mut table = Table {
        port,
        lines: Vec::new(),
    };
    cases(&mut table, &ids);
    let count = table.lines.len();
    lines.extend(table.lines);
    lines.extend(cli_lines(&dist, &node));
    // What the authorizer's audit log says at INFO: Kafka's words for every denial of a
    // resource a request names (denials that only filter are at TRACE).
    let audit = node.audit_denials();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{} half: {count} cases in {seconds:.1} s", node.kind);
    drop(node);
    (lines, count, seconds, audit)
}

#[test]
fn acl_decisions_like_kafka() {
    let _serial = broker_lock();
    let (kafka, count, kafka_seconds, kafka_audit) = run(false);
    eprintln!("Kafka 3.9 ({kafka_seconds:.1} s):\n{}", kafka.join("\n"));
    assert!(count >= 90, "only {count} cases");
    let denied = kafka
        .iter()
        .filter(|l| {
            [
                "TopicAuthorizationFailed",
                "GroupAuthorizationFailed",
                "ClusterAuthorizationFailed",
                "TransactionalIdAuthorizationFailed",
            ]
            .iter()
            .any(|e| l.contains(e))
        })
        .count();
    let clean = kafka
        .iter()
        .filter(|l| !l.starts_with("setup") && !l.contains('!') && !l.contains("FAILED"))
        .count();
    assert!(
        denied >= 25 && clean >= 25,
        "a trivial table: {denied} lines with an authorization failure, {clean} without any error"
    );
    let (krust, _, krust_seconds, krust_audit) = run(true);
    eprintln!("krust: {krust_seconds:.1} s");
    assert_same_lines(&kafka, &krust);
    assert!(
        kafka_audit.len() >= 25,
        "Kafka audited only {} denials",
        kafka_audit.len()
    );
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|l| !b.contains(l)).cloned().collect()
    };
    let (kafka_only, krust_only) = (
        only(&kafka_audit, &krust_audit),
        only(&krust_audit, &kafka_audit),
    );
    assert!(
        kafka_only.is_empty() && krust_only.is_empty(),
        "audit log denials at INFO differ ({} in Kafka's log, {} in krust's):\nonly Kafka's:\n{}\nonly krust's:\n{}",
        kafka_audit.len(),
        krust_audit.len(),
        kafka_only.join("\n"),
        krust_only.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Kafka's own tools over the same node: `kafka-acls` and `kafka-configs` print the same.

/// `kafka-acls.sh` and `kafka-configs.sh` (both still Scala in 3.9).
const ACL_COMMAND: &str = "kafka.admin.AclCommand";
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";

/// One tool run as a super user (the PLAINTEXT listener is `User:ANONYMOUS`): its exit status,
/// standard output and the first line of standard error, with the bootstrap address replaced.
/// Output blocks (separated by blank lines) are kept whole but sorted, and the entries inside a
/// block sorted: Kafka lists ACLs and quota entities in its hash maps' order, krust sorted.
fn tool_lines(dist: &KafkaDist, bootstrap: &str, class: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    let out = dist
        .tool(class)
        .args(&all)
        .run()
        .unwrap_or_else(|e| panic!("{class} {all:?}: {e}"));
    let short = class.rsplit('.').next().unwrap_or(class);
    let command = format!("{short} {}", args.join(" "));
    // A block starts at each line that is not an ACL entry (`(principal=…)`).
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    for line in out.stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match blocks.last_mut() {
            Some(block) if line.starts_with('(') => block.push(line),
            _ => blocks.push(vec![line]),
        }
    }
    let mut blocks: Vec<String> = blocks
        .into_iter()
        .map(|mut entries| {
            entries[1..].sort_unstable();
            entries.join(" | ")
        })
        .collect();
    blocks.sort();
    let mut lines = vec![format!(
        "cli {command}: {}",
        if out.success() { "ok" } else { "FAILED" }
    )];
    lines.extend(blocks.into_iter().map(|b| format!("cli {command}:   {b}")));
    // The error's first line and the exception it names (its stack trace left out).
    let mut stderr = out.stderr.lines().filter(|l| !l.trim().is_empty());
    if let Some(first) = stderr.next() {
        lines.push(format!(
            "cli {command}: stderr {}",
            first.replace(bootstrap, "<bootstrap>")
        ));
    }
    if let Some(exception) = stderr.find(|l| l.contains("Exception: ")) {
        lines.push(format!("cli {command}: stderr {}", exception.trim()));
    }
    lines
}

/// Only the blocks `kafka-acls --add/--remove` print about what they send: the ACLs they list
/// afterwards come from a broker that may not have applied the change yet, on Kafka too.
fn sent_blocks(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| !l.contains("Current ACLs for resource"))
        .collect()
}

/// Waits (bounded) until the broker at `port` answers `request` as `done` says: a change made
/// through the controller shows on the broker once it has replayed it.
fn until_broker_shows(port: u16, request: RequestKind, done: impl Fn(&ResponseKind) -> bool) {
    let key = request_api_key(&request).expect("a request");
    let last = std::cell::RefCell::new(None);
    let shown = poll(SETUP_TIMEOUT, || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(SETUP_TIMEOUT)).ok()?;
        let response =
            security_support::acl_client::exchange(&mut stream, key, version(key), &request).ok();
        let shown = response.as_ref().is_some_and(&done);
        *last.borrow_mut() = response;
        shown.then_some(())
    });
    assert!(
        shown.is_some(),
        "the broker never showed the change ({key:?}); last answer {:?}",
        last.borrow()
    );
}

fn cli_lines(dist: &KafkaDist, node: &SecureNode) -> Vec<String> {
    let bootstrap = node.node.bootstrap_servers();
    let port = node.node.broker_port().expect("PLAINTEXT port");
    let acls = |args: &[&str]| tool_lines(dist, &bootstrap, ACL_COMMAND, args);
    let configs = |args: &[&str]| tool_lines(dist, &bootstrap, CONFIG_COMMAND, args);
    let mut lines = Vec::new();
    let dave_acls = |n: usize| {
        move |r: &ResponseKind| {
            matches!(r, ResponseKind::DescribeAcls(r)
                if r.resources.iter().map(|x| x.acls.len()).sum::<usize>() == n)
        }
    };
    for add in [
        &[
            "--add",
            "--allow-principal",
            "User:dave",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "orders",
        ][..],
        &[
            "--add",
            "--allow-principal",
            "User:dave",
            "--allow-host",
            "127.0.0.1",
            "--operation",
            "Write",
            "--topic",
            "dave-",
            "--resource-pattern-type",
            "prefixed",
        ],
        &[
            "--add",
            "--deny-principal",
            "User:dave",
            "--deny-host",
            "10.0.0.1",
            "--operation",
            "All",
            "--group",
            "*",
        ],
        &[
            "--add",
            "--producer",
            "--allow-principal",
            "User:dave",
            "--topic",
            "sink",
            "--transactional-id",
            "dave-tx",
        ],
        &[
            "--add",
            "--allow-principal",
            "User:dave",
            "--operation",
            "AlterConfigs",
            "--cluster",
        ],
    ] {
        lines.extend(sent_blocks(acls(add)));
    }
    // Read+Describe, Write, All, the producer's Write+Describe+Create on sink and Write+Describe
    // on dave-tx, AlterConfigs.
    until_broker_shows(port, describe_acls(Some("User:dave")).into(), dave_acls(10));
    lines.extend(acls(&["--list"]));
    lines.extend(acls(&["--list", "--principal", "User:dave"]));
    lines.extend(acls(&[
        "--list",
        "--topic",
        "orders-eu",
        "--resource-pattern-type",
        "match",
    ]));
    lines.extend(acls(&["--list", "--cluster"]));
    lines.extend(sent_blocks(acls(&[
        "--remove",
        "--force",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--topic",
        "orders",
    ])));
    until_broker_shows(port, describe_acls(Some("User:dave")).into(), dave_acls(9));
    lines.extend(acls(&["--list", "--principal", "User:dave"]));

    for alter in [
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=dave-secret],producer_byte_rate=1024",
        ][..],
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "erin",
            "--add-config",
            "SCRAM-SHA-512=[password=erin-secret]",
        ],
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "erin",
            "--add-config",
            "producer_byte_rate=1024",
        ],
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--add-config",
            "consumer_byte_rate=4096",
        ],
        &[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "c1",
            "--add-config",
            "request_percentage=50",
        ],
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--entity-type",
            "clients",
            "--entity-name",
            "c1",
            "--add-config",
            "producer_byte_rate=2048,consumer_byte_rate=512",
        ],
        &[
            "--alter",
            "--entity-type",
            "ips",
            "--entity-name",
            "127.0.0.5",
            "--add-config",
            "connection_creation_rate=10",
        ],
        // Refused: a negative rate, an unknown key, a quota key for IPs.
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "producer_byte_rate=-5",
        ],
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "no_such_rate=5",
        ],
        &[
            "--alter",
            "--entity-type",
            "ips",
            "--entity-name",
            "127.0.0.5",
            "--add-config",
            "producer_byte_rate=5",
        ],
    ] {
        lines.extend(configs(alter));
    }
    until_broker_shows(
        port,
        DescribeClientQuotasRequest::default().into(),
        |r| matches!(r, ResponseKind::DescribeClientQuotas(r) if r.entries.as_ref().is_some_and(|e| e.len() >= 5)),
    );
    until_broker_shows(port, describe_scram(&["erin"]).into(), |r| {
        matches!(r, ResponseKind::DescribeUserScramCredentials(r)
            if r.results.iter().any(|u| u.error_code == 0 && !u.credential_infos.is_empty()))
    });
    for describe in [
        &["--describe", "--entity-type", "users"][..],
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
        ],
        &["--describe", "--entity-type", "clients"],
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--entity-type",
            "clients",
        ],
        &["--describe", "--entity-type", "ips"],
    ] {
        lines.extend(configs(describe));
    }
    lines
}
