//! The propagator against Kafka 3.9's `MigrationPropagator` rules (facts §6.11;
//! `MigrationPropagator.scala`, `ControllerChannelManager.scala`): images are built by
//! replaying records, and each test checks which broker gets which request, in which order,
//! at which version, with which fields. Every request produced by any test also goes through
//! `encode at its version → decode → equal`.
//!
//! The cluster of most tests: ZK brokers 1, 2, 3 (unfenced) and 5 (fenced), KRaft broker 4;
//! topic `foo` (p0 on 1,2,3 led by 1; p1 on 2,3,4 led by 4) and `bar` (p0 on 3,5,6 led by 3;
//! broker 6 is not registered). The image's last record has leader epoch 7; the KRaft
//! controller is node 3000 and claimed ZooKeeper controller epoch 12.

use kafka_protocol::messages::leader_and_isr_request::{
    LeaderAndIsrLiveLeader, LeaderAndIsrPartitionState, LeaderAndIsrTopicState,
};
use kafka_protocol::messages::stop_replica_request::{
    StopReplicaPartitionState, StopReplicaTopicState,
};
use kafka_protocol::messages::update_metadata_request::{
    UpdateMetadataBroker, UpdateMetadataEndpoint, UpdateMetadataPartitionState,
    UpdateMetadataTopicState,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, LeaderAndIsrRequest, StopReplicaRequest, TopicName, UpdateMetadataRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use krust_metadata::image::{MetadataDelta, MetadataImage, MetadataProvenance};
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::*;
use krust_migration::propagator::{
    BrokerRequest, OutgoingRequest, PropagatorContext, PropagatorError, RequestVersions,
    request_versions, requests_for_delta, requests_for_image,
};
use uuid::Uuid;

const IMAGE_EPOCH: i32 = 7;

fn ctx() -> PropagatorContext {
    PropagatorContext {
        controller_id: 3000,
        zk_controller_epoch: 12,
        inter_broker_listener_name: "PLAINTEXT".into(),
    }
}

fn topic_id(n: u64) -> Uuid {
    Uuid::from_u64_pair(0xaaaa, n)
}

fn broker_epoch(id: i32) -> i64 {
    100 + i64::from(id)
}

fn metadata_version(mv: MetadataVersion) -> MetadataRecord {
    MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
        "metadata.version",
        mv.feature_level(),
    ))
}

fn broker(id: i32, zk: bool, fenced: bool) -> MetadataRecord {
    let port = u16::try_from(9000 + id).expect("port");
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: zk,
        incarnation_id: Uuid::from_u64_pair(0xbbbb, u64::try_from(id).expect("id")),
        broker_epoch: broker_epoch(id),
        end_points: vec![
            RegistrationEndpoint {
                name: "PLAINTEXT".into(),
                host: format!("b{id}"),
                port,
                security_protocol: 0,
                unknown_tagged_fields: Vec::new(),
            },
            RegistrationEndpoint {
                name: "EXTERNAL".into(),
                host: format!("ext{id}"),
                port: port + 100,
                security_protocol: 1,
                unknown_tagged_fields: Vec::new(),
            },
        ],
        features: Vec::new(),
        rack: (id % 2 == 1).then(|| format!("rack{id}")),
        fenced,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
        unknown_tagged_fields: Vec::new(),
    })
}

fn topic(name: &str, n: u64) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: topic_id(n),
        ..Default::default()
    })
}

fn partition(n: u64, partition_id: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        partition_id,
        topic_id: topic_id(n),
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader,
        leader_recovery_state: 0,
        leader_epoch: 3,
        partition_epoch: 5,
        directories: Vec::new(),
        eligible_leader_replicas: None,
        last_known_elr: None,
        unknown_tagged_fields: Vec::new(),
    })
}

fn cluster_records(mv: MetadataVersion) -> Vec<MetadataRecord> {
    vec![
        metadata_version(mv),
        broker(1, true, false),
        broker(2, true, false),
        broker(3, true, false),
        broker(4, false, false),
        broker(5, true, true),
        topic("foo", 1),
        partition(1, 0, &[1, 2, 3], 1),
        partition(1, 1, &[2, 3, 4], 4),
        topic("bar", 2),
        partition(2, 0, &[3, 5, 6], 3),
    ]
}

fn image_of(records: &[MetadataRecord]) -> MetadataImage {
    MetadataImage::from_records(records, MetadataProvenance::new(50, IMAGE_EPOCH, 1000))
        .expect("valid records")
}

fn cluster() -> MetadataImage {
    image_of(&cluster_records(MetadataVersion::IBP_3_9_IV0))
}

/// `records` replayed on `base`: the delta and the image after it.
fn delta_of(base: &MetadataImage, records: &[MetadataRecord]) -> (MetadataDelta, MetadataImage) {
    let mut delta = MetadataDelta::new(base);
    for record in records {
        delta.replay(record).expect("valid record");
    }
    let next = delta.apply(MetadataProvenance::new(60, IMAGE_EPOCH, 2000));
    (delta, next)
}

/// Every request encodes at its version and decodes back to itself, consuming every byte.
fn assert_round_trips(requests: &[OutgoingRequest]) {
    for request in requests {
        let bytes = request.encode_body().expect("encodes at its version");
        let mut buf: &[u8] = &bytes;
        let decoded = match &request.request {
            BrokerRequest::UpdateMetadata(_) => BrokerRequest::UpdateMetadata(
                UpdateMetadataRequest::decode(&mut buf, request.version).expect("decodes"),
            ),
            BrokerRequest::LeaderAndIsr(_) => BrokerRequest::LeaderAndIsr(
                LeaderAndIsrRequest::decode(&mut buf, request.version).expect("decodes"),
            ),
            BrokerRequest::StopReplica(_) => BrokerRequest::StopReplica(
                StopReplicaRequest::decode(&mut buf, request.version).expect("decodes"),
            ),
        };
        assert!(buf.is_empty(), "{} bytes left over", buf.len());
        assert_eq!(
            decoded, request.request,
            "round trip to broker {}",
            request.broker_id
        );
    }
}

/// (broker, API key, version) of each request, in order.
fn shape(requests: &[OutgoingRequest]) -> Vec<(i32, ApiKey, i16)> {
    requests
        .iter()
        .map(|r| (r.broker_id, r.request.api_key(), r.version))
        .collect()
}

fn lisr(request: &OutgoingRequest) -> &LeaderAndIsrRequest {
    match &request.request {
        BrokerRequest::LeaderAndIsr(r) => r,
        other => panic!("expected LeaderAndIsr, got {other:?}"),
    }
}

fn umr(request: &OutgoingRequest) -> &UpdateMetadataRequest {
    match &request.request {
        BrokerRequest::UpdateMetadata(r) => r,
        other => panic!("expected UpdateMetadata, got {other:?}"),
    }
}

fn stop(request: &OutgoingRequest) -> &StopReplicaRequest {
    match &request.request {
        BrokerRequest::StopReplica(r) => r,
        other => panic!("expected StopReplica, got {other:?}"),
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

/// (topic, partitions) of an UpdateMetadata, for compact checks.
fn umr_partitions(request: &UpdateMetadataRequest) -> Vec<(String, Vec<i32>)> {
    request
        .topic_states
        .iter()
        .map(|t| {
            (
                t.topic_name.0.to_string(),
                t.partition_states
                    .iter()
                    .map(|p| p.partition_index)
                    .collect(),
            )
        })
        .collect()
}

fn live_broker(id: i32) -> UpdateMetadataBroker {
    let port = 9000 + id;
    UpdateMetadataBroker::default()
        .with_id(BrokerId(id))
        .with_endpoints(vec![
            // Listeners sorted by name.
            UpdateMetadataEndpoint::default()
                .with_port(port + 100)
                .with_host(s(&format!("ext{id}")))
                .with_listener(s("EXTERNAL"))
                .with_security_protocol(1),
            UpdateMetadataEndpoint::default()
                .with_port(port)
                .with_host(s(&format!("b{id}")))
                .with_listener(s("PLAINTEXT"))
                .with_security_protocol(0),
        ])
        .with_rack((id % 2 == 1).then(|| s(&format!("rack{id}"))))
}

fn umr_state(
    partition: i32,
    leader: i32,
    replicas: &[i32],
    offline: &[i32],
) -> UpdateMetadataPartitionState {
    UpdateMetadataPartitionState::default()
        .with_partition_index(partition)
        .with_controller_epoch(IMAGE_EPOCH)
        .with_leader(BrokerId(leader))
        .with_leader_epoch(3)
        .with_isr(ids(replicas))
        .with_zk_version(5)
        .with_replicas(ids(replicas))
        .with_offline_replicas(ids(offline))
}

fn lisr_state(partition: i32, leader: i32, replicas: &[i32]) -> LeaderAndIsrPartitionState {
    LeaderAndIsrPartitionState::default()
        .with_partition_index(partition)
        .with_controller_epoch(IMAGE_EPOCH)
        .with_leader(BrokerId(leader))
        .with_leader_epoch(3)
        .with_isr(ids(replicas))
        .with_partition_epoch(5)
        .with_replicas(ids(replicas))
        .with_is_new(true)
        .with_leader_recovery_state(0)
}

fn live_leader(id: i32) -> LeaderAndIsrLiveLeader {
    LeaderAndIsrLiveLeader::default()
        .with_broker_id(BrokerId(id))
        .with_host_name(s(&format!("b{id}")))
        .with_port(9000 + id)
}

#[test]
fn request_versions_follow_the_metadata_version_as_kafka_picks_them() {
    let cases = [
        (
            MetadataVersion::IBP_3_0_IV1,
            (5, 7, 3),
            "KRaft minimum: past 2.8-IV1",
        ),
        (MetadataVersion::IBP_3_1_IV0, (5, 7, 3), "before 3.2-IV0"),
        (
            MetadataVersion::IBP_3_2_IV0,
            (6, 7, 3),
            "LeaderRecoveryState",
        ),
        (
            MetadataVersion::IBP_3_3_IV3,
            (6, 7, 3),
            "last before 3.4-IV0",
        ),
        (MetadataVersion::IBP_3_4_IV0, (7, 8, 4), "isKRaftController"),
        (MetadataVersion::IBP_3_9_IV0, (7, 8, 4), "3.9"),
    ];
    for (mv, (leader_and_isr, update_metadata, stop_replica), why) in cases {
        assert_eq!(
            request_versions(mv),
            RequestVersions {
                leader_and_isr,
                update_metadata,
                stop_replica
            },
            "{why}"
        );
    }
}

#[test]
fn an_image_sends_metadata_first_then_full_leader_and_isr_to_unfenced_zk_brokers() {
    let image = cluster();
    let requests = requests_for_image(&image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    use ApiKey::{LeaderAndIsr as L, UpdateMetadata as U};
    // Broker 4 (KRaft), 5 (fenced) and 6 (unregistered) get nothing.
    assert_eq!(
        shape(&requests),
        vec![
            (1, U, 8),
            (2, U, 8),
            (3, U, 8),
            (1, L, 7),
            (2, L, 7),
            (3, L, 7),
            (1, U, 8),
            (2, U, 8),
            (3, U, 8),
        ]
    );

    // Batch 1: every partition, type UNKNOWN, every registered broker as live.
    let all = vec![("bar".to_owned(), vec![0]), ("foo".to_owned(), vec![0, 1])];
    let expected_umr = UpdateMetadataRequest::default()
        .with_controller_id(BrokerId(3000))
        .with_is_k_raft_controller(true)
        .with_type(0)
        .with_controller_epoch(12)
        .with_broker_epoch(broker_epoch(1))
        .with_topic_states(vec![
            UpdateMetadataTopicState::default()
                .with_topic_name(TopicName(s("bar")))
                .with_topic_id(topic_id(2))
                // Broker 6 is not registered: offline. Fenced broker 5 is registered.
                .with_partition_states(vec![umr_state(0, 3, &[3, 5, 6], &[6])]),
            UpdateMetadataTopicState::default()
                .with_topic_name(TopicName(s("foo")))
                .with_topic_id(topic_id(1))
                .with_partition_states(vec![
                    umr_state(0, 1, &[1, 2, 3], &[]),
                    umr_state(1, 4, &[2, 3, 4], &[]),
                ]),
        ])
        .with_live_brokers((1..=5).map(live_broker).collect());
    assert_eq!(umr(&requests[0]), &expected_umr);
    for r in &requests[..3] {
        assert_eq!(umr_partitions(umr(r)), all);
        assert_eq!(umr(r).broker_epoch, broker_epoch(r.broker_id));
    }

    // Batch 2: FULL LeaderAndIsr for the partitions each broker hosts.
    let expected_lisr = LeaderAndIsrRequest::default()
        .with_controller_id(BrokerId(3000))
        .with_is_k_raft_controller(true)
        .with_controller_epoch(12)
        .with_broker_epoch(broker_epoch(2))
        .with_type(2)
        .with_topic_states(vec![
            LeaderAndIsrTopicState::default()
                .with_topic_name(TopicName(s("foo")))
                .with_topic_id(topic_id(1))
                .with_partition_states(vec![
                    lisr_state(0, 1, &[1, 2, 3]),
                    lisr_state(1, 4, &[2, 3, 4]),
                ]),
        ])
        // The leaders of its partitions, on the inter-broker listener.
        .with_live_leaders(vec![live_leader(1), live_leader(4)]);
    assert_eq!(lisr(&requests[4]), &expected_lisr);
    let hosted = |r: &OutgoingRequest| -> Vec<(String, Vec<i32>)> {
        lisr(r)
            .topic_states
            .iter()
            .map(|t| {
                let parts = t.partition_states.iter().map(|p| p.partition_index);
                (t.topic_name.0.to_string(), parts.collect())
            })
            .collect()
    };
    assert_eq!(hosted(&requests[3]), vec![("foo".to_owned(), vec![0])]);
    assert_eq!(
        hosted(&requests[5]),
        vec![("bar".to_owned(), vec![0]), ("foo".to_owned(), vec![0, 1])]
    );
    assert_eq!(
        lisr(&requests[5]).live_leaders,
        vec![live_leader(1), live_leader(3), live_leader(4)]
    );
    // The UpdateMetadata the LeaderAndIsr queued: FULL, every partition.
    for r in &requests[6..] {
        assert_eq!(umr(r)._type, 2);
        assert_eq!(umr_partitions(umr(r)), all);
    }
}

#[test]
fn older_metadata_versions_use_older_request_versions_without_kraft_fields() {
    for mv in [MetadataVersion::IBP_3_0_IV1, MetadataVersion::IBP_3_3_IV3] {
        let image = image_of(&cluster_records(mv));
        let requests = requests_for_image(&image, &ctx()).expect("requests");
        assert_round_trips(&requests);
        let versions = request_versions(mv);
        for r in &requests {
            match &r.request {
                BrokerRequest::LeaderAndIsr(l) => {
                    assert_eq!(r.version, versions.leader_and_isr);
                    assert!(
                        !l.is_k_raft_controller,
                        "{mv:?}: no isKRaftController below v7"
                    );
                    assert_eq!(l._type, 2, "Type exists from v5");
                }
                BrokerRequest::UpdateMetadata(u) => {
                    assert_eq!(r.version, 7);
                    assert!(!u.is_k_raft_controller);
                    assert_eq!(u._type, 0, "Type exists from v8 only");
                }
                BrokerRequest::StopReplica(_) => panic!("an image sends no StopReplica"),
            }
        }
    }
}

#[test]
fn a_newly_unfenced_zk_broker_gets_everything_and_the_others_get_metadata() {
    let base = cluster();
    let (delta, image) = delta_of(
        &base,
        &[MetadataRecord::BrokerRegistrationChange(
            BrokerRegistrationChangeRecord {
                broker_id: 5,
                broker_epoch: broker_epoch(5),
                fenced: -1,
                ..Default::default()
            },
        )],
    );
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    use ApiKey::{LeaderAndIsr as L, UpdateMetadata as U};
    assert_eq!(
        shape(&requests),
        vec![
            // Batch 1: one UpdateMetadata per ZK broker, all partitions (the batch's
            // partitions go to every broker of the batch).
            (1, U, 8),
            (2, U, 8),
            (3, U, 8),
            (5, U, 8),
            // Batch 2: broker 5's partition, and its metadata to every broker.
            (5, L, 7),
            (1, U, 8),
            (2, U, 8),
            (3, U, 8),
            (5, U, 8),
        ]
    );
    for r in &requests[..4] {
        assert_eq!(umr(r)._type, 0);
        assert_eq!(umr_partitions(umr(r)).len(), 2);
    }
    let to_five = lisr(&requests[4]);
    assert_eq!(to_five._type, 1, "INCREMENTAL");
    assert_eq!(to_five.broker_epoch, broker_epoch(5));
    assert_eq!(to_five.topic_states.len(), 1);
    assert_eq!(
        to_five.topic_states[0].partition_states,
        vec![lisr_state(0, 3, &[3, 5, 6])]
    );
    for r in &requests[5..] {
        assert_eq!(umr(r)._type, 1);
        assert_eq!(umr_partitions(umr(r)), vec![("bar".to_owned(), vec![0])]);
    }
}

#[test]
fn a_registration_change_sends_metadata_without_partitions_to_the_other_zk_brokers() {
    let base = cluster();
    // The KRaft broker goes away: no ZK broker is new, but the live brokers changed.
    let (delta, image) = delta_of(
        &base,
        &[MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
            broker_id: 4,
            broker_epoch: broker_epoch(4),
            ..Default::default()
        })],
    );
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    assert_eq!(
        shape(&requests),
        vec![
            (1, ApiKey::UpdateMetadata, 8),
            (2, ApiKey::UpdateMetadata, 8),
            (3, ApiKey::UpdateMetadata, 8),
        ]
    );
    for r in &requests {
        let u = umr(r);
        assert!(u.topic_states.is_empty());
        let live: Vec<i32> = u.live_brokers.iter().map(|b| b.id.0).collect();
        assert_eq!(live, vec![1, 2, 3, 5]);
    }
}

#[test]
fn a_deleted_topic_gets_stop_replica_and_the_deletion_marker() {
    let base = cluster();
    let (delta, image) = delta_of(
        &base,
        &[MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: topic_id(2),
            ..Default::default()
        })],
    );
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    use ApiKey::{StopReplica as S, UpdateMetadata as U};
    // bar's replicas are 3, 5 (fenced) and 6 (unregistered): only 3 is reachable.
    assert_eq!(
        shape(&requests),
        vec![(1, U, 8), (2, U, 8), (3, U, 8), (3, S, 4)]
    );
    let marker = UpdateMetadataRequest::default()
        .with_controller_id(BrokerId(3000))
        .with_is_k_raft_controller(true)
        .with_type(1)
        .with_controller_epoch(12)
        .with_broker_epoch(broker_epoch(1))
        .with_topic_states(vec![
            UpdateMetadataTopicState::default()
                .with_topic_name(TopicName(s("bar")))
                // The topic is gone from the image: no id.
                .with_topic_id(Uuid::nil())
                .with_partition_states(vec![
                    UpdateMetadataPartitionState::default()
                        .with_partition_index(0)
                        // The request-level (ZooKeeper) controller epoch, not the image's.
                        .with_controller_epoch(12)
                        .with_leader(BrokerId(-2))
                        .with_leader_epoch(0)
                        .with_isr(ids(&[3, 5, 6]))
                        .with_zk_version(0)
                        .with_replicas(ids(&[3, 5, 6]))
                        // Kafka's quirk: the replicas whose broker is registered.
                        .with_offline_replicas(ids(&[3, 5])),
                ]),
        ])
        .with_live_brokers((1..=5).map(live_broker).collect());
    assert_eq!(umr(&requests[0]), &marker);
    let expected_stop = StopReplicaRequest::default()
        .with_controller_id(BrokerId(3000))
        .with_is_k_raft_controller(true)
        .with_controller_epoch(12)
        .with_broker_epoch(broker_epoch(3))
        .with_topic_states(vec![
            StopReplicaTopicState::default()
                .with_topic_name(TopicName(s("bar")))
                .with_partition_states(vec![
                    StopReplicaPartitionState::default()
                        .with_partition_index(0)
                        .with_leader_epoch(-2)
                        .with_delete_partition(true),
                ]),
        ]);
    assert_eq!(stop(&requests[3]), &expected_stop);
}

#[test]
fn a_reassignment_sends_incremental_leader_and_isr_and_stops_removed_replicas() {
    let base = cluster();
    let (delta, image) = delta_of(
        &base,
        &[MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: 0,
            topic_id: topic_id(1),
            replicas: Some(vec![1, 2]),
            isr: Some(vec![1, 2]),
            ..Default::default()
        })],
    );
    let after = image
        .topics
        .partition(topic_id(1), 0)
        .expect("foo-0")
        .clone();
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    use ApiKey::{LeaderAndIsr as L, StopReplica as S, UpdateMetadata as U};
    assert_eq!(
        shape(&requests),
        vec![
            (1, L, 7),
            (2, L, 7),
            (1, U, 8),
            (2, U, 8),
            (3, U, 8),
            (3, S, 4)
        ]
    );
    for r in &requests[..2] {
        let l = lisr(r);
        assert_eq!(l._type, 1);
        let state = &l.topic_states[0].partition_states[0];
        assert_eq!(state.replicas, ids(&[1, 2]));
        assert_eq!(state.partition_epoch, after.partition_epoch);
        assert!(state.is_new, "the migration always sends isNew");
    }
    for r in &requests[2..5] {
        assert_eq!(umr_partitions(umr(r)), vec![("foo".to_owned(), vec![0])]);
    }
    let s3 = stop(&requests[5]);
    assert_eq!(s3.topic_states[0].topic_name.0.to_string(), "foo");
    let state = &s3.topic_states[0].partition_states[0];
    assert_eq!(state.partition_index, 0);
    assert_eq!(
        state.leader_epoch, after.leader_epoch,
        "the partition's current epoch"
    );
    assert!(state.delete_partition);
}

#[test]
fn a_delta_without_broker_or_topic_changes_sends_nothing() {
    let base = cluster();
    let (delta, image) = delta_of(
        &base,
        &[MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: "foo".into(),
            name: "retention.ms".into(),
            value: Some("1".into()),
            ..Default::default()
        })],
    );
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert!(requests.is_empty(), "{requests:?}");
}

#[test]
fn a_new_topic_goes_to_its_replicas_and_metadata_to_every_zk_broker() {
    let base = cluster();
    let (delta, image) = delta_of(&base, &[topic("baz", 3), partition(3, 0, &[2, 4], 2)]);
    let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
    assert_round_trips(&requests);
    use ApiKey::{LeaderAndIsr as L, UpdateMetadata as U};
    assert_eq!(
        shape(&requests),
        vec![(2, L, 7), (1, U, 8), (2, U, 8), (3, U, 8)]
    );
    let l = lisr(&requests[0]);
    assert_eq!(l.topic_states[0].topic_id, topic_id(3));
    assert_eq!(l.live_leaders, vec![live_leader(2)]);
    assert_eq!(
        umr_partitions(umr(&requests[1])),
        vec![("baz".to_owned(), vec![0])]
    );
}

#[test]
fn a_leader_without_the_inter_broker_listener_is_an_error() {
    let image = cluster();
    let ctx = PropagatorContext {
        inter_broker_listener_name: "REPLICATION".into(),
        ..ctx()
    };
    let e = requests_for_image(&image, &ctx).expect_err("no such listener");
    assert_eq!(
        e,
        PropagatorError::LeaderWithoutListener {
            broker_id: 1,
            listener: "REPLICATION".into()
        }
    );
}

/// Properties over random clusters and deltas (replayed records; a record that does not fit
/// the image is skipped, which replay guarantees leaves the delta as it was).
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// One broker slot: unregistered, or (ZK broker?, fenced?).
    type Slot = Option<(bool, bool)>;

    fn base_records(slots: &[Slot], topics: &[Vec<Vec<i32>>]) -> Vec<MetadataRecord> {
        let mut records = vec![metadata_version(MetadataVersion::IBP_3_9_IV0)];
        for (i, slot) in slots.iter().enumerate() {
            if let Some((zk, fenced)) = slot {
                let id = i32::try_from(i).expect("small") + 1;
                records.push(broker(id, *zk, *fenced));
            }
        }
        for (t, partitions) in topics.iter().enumerate() {
            let n = u64::try_from(t).expect("small") + 1;
            records.push(topic(&format!("t{t}"), n));
            for (p, replicas) in partitions.iter().enumerate() {
                let leader = replicas.first().copied().unwrap_or(-1);
                let p = i32::try_from(p).expect("small");
                records.push(partition(n, p, replicas, leader));
            }
        }
        records
    }

    fn replicas() -> impl Strategy<Value = Vec<i32>> {
        proptest::sample::subsequence((1..=7).collect::<Vec<i32>>(), 1..=3)
    }

    fn cluster_strategy() -> impl Strategy<Value = (Vec<Slot>, Vec<Vec<Vec<i32>>>)> {
        (
            proptest::collection::vec(proptest::option::of((any::<bool>(), any::<bool>())), 6),
            proptest::collection::vec(proptest::collection::vec(replicas(), 1..=3), 0..=3),
        )
    }

    /// A delta record from a random choice.
    fn delta_record(kind: u8, a: i32, b: i32, replicas: &[i32]) -> MetadataRecord {
        let broker_id = a.rem_euclid(6) + 1;
        let topic_n = u64::try_from(b.rem_euclid(4)).expect("small") + 1;
        match kind % 7 {
            0 => MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id,
                broker_epoch: broker_epoch(broker_id),
                fenced: 1,
                ..Default::default()
            }),
            1 => MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id,
                broker_epoch: broker_epoch(broker_id),
                fenced: -1,
                ..Default::default()
            }),
            2 => MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                broker_id,
                broker_epoch: broker_epoch(broker_id),
                ..Default::default()
            }),
            3 => broker(broker_id, b % 2 == 0, b % 3 == 0),
            4 => MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: topic_id(topic_n),
                ..Default::default()
            }),
            5 => MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: topic_id(topic_n),
                replicas: Some(replicas.to_vec()),
                isr: Some(replicas.to_vec()),
                leader: replicas.first().copied().unwrap_or(-1),
                ..Default::default()
            }),
            _ => partition(
                topic_n,
                7,
                replicas,
                replicas.first().copied().unwrap_or(-1),
            ),
        }
    }

    /// What holds for every request, whatever produced it.
    fn check_common(image: &MetadataImage, requests: &[OutgoingRequest]) {
        assert_round_trips(requests);
        let registered: Vec<i32> = image.cluster.brokers.keys().copied().collect();
        for r in requests {
            let b = image
                .cluster
                .broker(r.broker_id)
                .expect("only registered brokers receive");
            assert!(
                b.is_migrating_zk_broker && !b.fenced,
                "broker {} is not in the channel",
                b.id
            );
            let (controller_id, controller_epoch, epoch, kraft) = match &r.request {
                BrokerRequest::LeaderAndIsr(l) => {
                    for t in &l.topic_states {
                        let topic = image
                            .topics
                            .topic_by_name(&t.topic_name.0)
                            .expect("LeaderAndIsr names topics of the image");
                        assert_eq!(t.topic_id, topic.id);
                        for p in &t.partition_states {
                            let current = topic
                                .partitions
                                .get(&p.partition_index)
                                .expect("partition of the image");
                            assert!(current.replicas.contains(&r.broker_id), "only to replicas");
                            assert_eq!(p.leader.0, current.leader);
                            assert!(p.is_new);
                        }
                    }
                    (
                        l.controller_id,
                        l.controller_epoch,
                        l.broker_epoch,
                        l.is_k_raft_controller,
                    )
                }
                BrokerRequest::UpdateMetadata(u) => {
                    let live: Vec<i32> = u.live_brokers.iter().map(|b| b.id.0).collect();
                    assert_eq!(live, registered, "every registered broker is live");
                    (
                        u.controller_id,
                        u.controller_epoch,
                        u.broker_epoch,
                        u.is_k_raft_controller,
                    )
                }
                BrokerRequest::StopReplica(s) => {
                    for t in &s.topic_states {
                        let gone = image.topics.topic_by_name(&t.topic_name.0).is_none();
                        for p in &t.partition_states {
                            assert!(p.delete_partition);
                            if gone {
                                assert_eq!(p.leader_epoch, -2);
                            }
                        }
                    }
                    (
                        s.controller_id,
                        s.controller_epoch,
                        s.broker_epoch,
                        s.is_k_raft_controller,
                    )
                }
            };
            assert_eq!(controller_id, BrokerId(3000));
            assert_eq!(controller_epoch, 12);
            assert_eq!(epoch, b.epoch);
            assert!(kraft);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn image_requests_reach_only_the_channel_and_cover_every_partition(
            (slots, topics) in cluster_strategy()
        ) {
            let image = image_of(&base_records(&slots, &topics));
            let requests = requests_for_image(&image, &ctx()).expect("requests");
            check_common(&image, &requests);
            // Each channel broker gets exactly two UpdateMetadata: batch 1 with every
            // partition, and the FULL one (if it received a LeaderAndIsr batch at all, that
            // one carries every partition too, as every partition is queued).
            let partitions: usize = image.topics.by_id.values().map(|t| t.partitions.len()).sum();
            for b in image.cluster.brokers.values().filter(|b| b.is_migrating_zk_broker && !b.fenced) {
                let umrs: Vec<&UpdateMetadataRequest> = requests
                    .iter()
                    .filter(|r| r.broker_id == b.id)
                    .filter_map(|r| match &r.request {
                        BrokerRequest::UpdateMetadata(u) => Some(u),
                        _ => None,
                    })
                    .collect();
                let expected = if partitions == 0 { 1 } else { 2 };
                prop_assert_eq!(umrs.len(), expected, "broker {}", b.id);
                let first: usize = umrs[0].topic_states.iter().map(|t| t.partition_states.len()).sum();
                prop_assert_eq!(first, partitions);
            }
        }

        #[test]
        fn delta_requests_reach_only_the_channel_and_round_trip(
            (slots, topics) in cluster_strategy(),
            changes in proptest::collection::vec((any::<u8>(), any::<i32>(), any::<i32>(), replicas()), 1..6),
        ) {
            let base = image_of(&base_records(&slots, &topics));
            let mut delta = MetadataDelta::new(&base);
            for (kind, a, b, replicas) in &changes {
                let _ = delta.replay(&delta_record(*kind, *a, *b, replicas));
            }
            let image = delta.apply(MetadataProvenance::new(60, IMAGE_EPOCH, 2000));
            let requests = requests_for_delta(&delta, &image, &ctx()).expect("requests");
            check_common(&image, &requests);
        }
    }
}
