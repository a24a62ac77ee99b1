//! The tokio driver with real disks and real sockets (127.0.0.1), in one process:
//! a single voter elects itself, commits appends and finds them again after a restart; three
//! drivers behind `krust-net` listeners replicate, deliver every commit to their listeners and
//! fail over when the leader resigns; a damaged `quorum-state` is a typed start-up error;
//! messages fitted to every Raft RPC version encode.
//!
//! Every wait is bounded by `WAIT`; nothing asserts on elapsed time.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeQuorumResponse, EndQuorumEpochRequest, RequestKind, ResponseKind,
    VoteRequest, describe_quorum_response, end_quorum_epoch_request,
};
use kafka_protocol::protocol::Encodable;
use krust_log::LogConfig;
use krust_net::{Handler, Reply, RequestContext, Server, ServerConfig, SupportedApis};
use krust_raft::config::{RaftConfig, VoterAddress};
use krust_raft::driver::wire_versions::{
    self, RoutedRequest, fit_request, fit_response, raft_request, response_kind, sender_of,
};
use krust_raft::driver::{
    DriverAppendError, DriverConfig, DriverStartError, RaftDriver, RaftEvent, RaftHandle,
    StorageError,
};
use krust_raft::{
    AppendError, LeaderEpoch, LogOffset, NodeId, RaftRequest, RaftResponse, RoleKind,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(30);

fn config(node: i32, voters: &[VoterAddress], dir: &Path) -> DriverConfig {
    let mut raft = RaftConfig::new(
        NodeId(node),
        "test-cluster-id-AAAAAA",
        voters.iter().map(|v| v.id),
    );
    raft.election_timeout_ms = 300;
    raft.fetch_timeout_ms = 600;
    raft.request_timeout_ms = 600;
    raft.append_linger_ms = 5;
    DriverConfig {
        raft,
        voters: voters.to_vec(),
        partition_dir: dir.join("__cluster_metadata-0"),
        log_config: LogConfig::default(),
        rng_seed: Some(u64::try_from(node).unwrap_or(0)),
        metadata_log: krust_raft::driver::MetadataLogConfig::default(),
        client_security: Default::default(),
    }
}

async fn wait_for_role(handle: &RaftHandle, role: RoleKind) {
    let mut status = handle.watch_status();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.role == role))
        .await
        .expect("role within WAIT")
        .expect("driver alive");
}

/// Data records (not control) of committed batches, in order.
async fn drain_values(events: &mut mpsc::Receiver<RaftEvent>, want: usize) -> Vec<Bytes> {
    let mut values = Vec::new();
    while values.len() < want {
        let event = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("commit within WAIT")
            .expect("events open");
        if let RaftEvent::Commit(batches) = event {
            for batch in batches.iter().filter(|b| !b.is_control()) {
                for record in batch.records().expect("records") {
                    values.push(record.value.unwrap_or_default());
                }
            }
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_voter_commits_appends_and_recovers_them_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let voters = [VoterAddress {
        id: NodeId(1),
        host: "127.0.0.1".into(),
        port: 1,
    }];
    let (tx, mut events) = mpsc::channel(64);
    let driver = RaftDriver::start(config(1, &voters, dir.path()), Some(tx)).expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let first_epoch = handle.status().metrics.current_epoch;
    let mut offsets = Vec::new();
    for i in 0..5 {
        let offset = handle
            .append(vec![Bytes::from(format!("v{i}"))])
            .await
            .expect("committed");
        offsets.push(offset);
    }
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "offsets grow: {offsets:?}"
    );
    assert_eq!(
        drain_values(&mut events, 5).await,
        (0..5)
            .map(|i| Bytes::from(format!("v{i}")))
            .collect::<Vec<_>>()
    );
    handle.shutdown().await;
    assert!(matches!(
        driver.join().await,
        krust_raft::driver::DriverExit::Shutdown
    ));
    let state = std::fs::read_to_string(dir.path().join("__cluster_metadata-0/quorum-state"))
        .expect("quorum-state");
    assert!(
        state.contains(&format!("\"leaderEpoch\":{first_epoch}")),
        "{state}"
    );
    let partition_metadata =
        std::fs::read_to_string(dir.path().join("__cluster_metadata-0/partition.metadata"))
            .expect("partition.metadata");
    assert_eq!(
        partition_metadata,
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    );

    // Restart: the log is recovered and redelivered; a new epoch is needed to write again.
    let (tx, mut events) = mpsc::channel(64);
    let driver = RaftDriver::start(config(1, &voters, dir.path()), Some(tx)).expect("restart");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    assert!(
        handle.status().metrics.current_epoch > first_epoch,
        "a restarted leader wins a new epoch"
    );
    let again = handle
        .append(vec![Bytes::from_static(b"after")])
        .await
        .expect("committed");
    assert!(again > offsets[4], "{again:?} after {:?}", offsets[4]);
    let values = drain_values(&mut events, 6).await;
    assert_eq!(values.last(), Some(&Bytes::from_static(b"after")));
    assert_eq!(
        values[..5],
        (0..5)
            .map(|i| Bytes::from(format!("v{i}")))
            .collect::<Vec<_>>()[..]
    );

    // Appends name their epoch; another epoch is refused. Resigning starts a new election,
    // which the sole voter wins in a later epoch.
    let epoch = LeaderEpoch(handle.status().metrics.current_epoch);
    handle
        .append_in_epoch(epoch, vec![Bytes::from_static(b"in-epoch")])
        .await
        .expect("committed");
    assert!(matches!(
        handle
            .append_in_epoch(LeaderEpoch(epoch.0 + 1), vec![Bytes::from_static(b"x")])
            .await,
        Err(DriverAppendError::Rejected(AppendError::FutureEpoch { .. }))
    ));
    handle.resign(epoch).await;
    let mut status = handle.watch_status();
    tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.role == RoleKind::Leader && s.metrics.current_epoch > epoch.0),
    )
    .await
    .expect("re-elected within WAIT")
    .expect("driver alive");
    assert!(matches!(
        handle
            .append_in_epoch(epoch, vec![Bytes::from_static(b"x")])
            .await,
        Err(DriverAppendError::Rejected(AppendError::NotLeader { .. }))
    ));
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_quorum_state_file_is_a_typed_start_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let partition = dir.path().join("__cluster_metadata-0");
    std::fs::create_dir_all(&partition).expect("dir");
    std::fs::write(partition.join("quorum-state"), b"{\"leaderEpoch\": \"x\"").expect("write");
    let voters = [VoterAddress {
        id: NodeId(1),
        host: "127.0.0.1".into(),
        port: 1,
    }];
    match RaftDriver::start(config(1, &voters, dir.path()), None) {
        Err(DriverStartError::Storage(StorageError::QuorumState { .. })) => {}
        other => panic!("expected a quorum-state error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_directory_of_another_topic_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let partition = dir.path().join("__cluster_metadata-0");
    std::fs::create_dir_all(&partition).expect("dir");
    std::fs::write(
        partition.join("partition.metadata"),
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAg\n",
    )
    .expect("write");
    let voters = [VoterAddress {
        id: NodeId(1),
        host: "127.0.0.1".into(),
        port: 1,
    }];
    match RaftDriver::start(config(1, &voters, dir.path()), None) {
        Err(DriverStartError::Storage(StorageError::ForeignTopicId { found, .. })) => {
            assert_eq!(found, "AAAAAAAAAAAAAAAAAAAAAg");
        }
        other => panic!("expected a foreign topic id error, got {other:?}"),
    }
}

/// A minimal controller listener for the test: Raft RPCs to the driver.
struct RaftListener {
    apis: SupportedApis,
    raft: Arc<OnceLock<RaftHandle>>,
}

impl Handler for RaftListener {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let Some(raft) = self.raft.get() else {
            return Reply::Close;
        };
        let request = match request {
            RequestKind::ApiVersions(r) => {
                return ResponseKind::ApiVersions(self.apis.respond_to(&r, ctx.api_version)).into();
            }
            other => match raft_request(other) {
                RoutedRequest::Raft(request) => request,
                RoutedRequest::Other(_) => return Reply::Close,
            },
        };
        let from = sender_of(&request);
        let Some(mut response) = raft.handle_request(from, request).await else {
            return Reply::Close;
        };
        fit_response(&mut response, ctx.api_version);
        response_kind(response).into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_drivers_replicate_over_loopback_and_fail_over_on_resignation() {
    let apis = SupportedApis::new([
        (ApiKey::ApiVersions, 0, 4),
        (
            ApiKey::Fetch,
            wire_versions::FETCH_VERSIONS.0,
            wire_versions::FETCH_VERSIONS.1,
        ),
        (ApiKey::Vote, 0, 1),
        (ApiKey::BeginQuorumEpoch, 0, 1),
        (ApiKey::EndQuorumEpoch, 0, 1),
    ])
    .expect("apis");
    let mut slots = Vec::new();
    let mut servers = Vec::new();
    let mut voters = Vec::new();
    for id in 1..=3 {
        let slot = Arc::new(OnceLock::new());
        let handler = Arc::new(RaftListener {
            apis: apis.clone(),
            raft: slot.clone(),
        });
        let config = ServerConfig {
            max_in_flight_requests_per_connection: 8,
            ..ServerConfig::default()
        };
        let server = Server::bind("127.0.0.1:0", handler, config)
            .await
            .expect("bind");
        voters.push(VoterAddress {
            id: NodeId(id),
            host: "127.0.0.1".into(),
            port: server.local_addr().port(),
        });
        slots.push(slot);
        servers.push(server);
    }
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let mut handles = Vec::new();
    let mut listeners = Vec::new();
    for (i, id) in (1..=3).enumerate() {
        let (tx, rx) = mpsc::channel(256);
        let driver =
            RaftDriver::start(config(id, &voters, dirs[i].path()), Some(tx)).expect("start");
        let _ = slots[i].set(driver.handle());
        handles.push(driver.handle());
        listeners.push(rx);
    }
    let leader = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(h) = handles.iter().find(|h| h.status().role == RoleKind::Leader) {
                return h.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader within WAIT");
    for i in 0..3 {
        leader
            .append(vec![Bytes::from(format!("a{i}"))])
            .await
            .expect("committed");
    }
    // A follower refuses appends with the core's NotLeader error.
    let follower = handles
        .iter()
        .find(|h| h.node_id() != leader.node_id())
        .expect("follower");
    assert!(matches!(
        follower.append(vec![Bytes::from_static(b"x")]).await,
        Err(DriverAppendError::Rejected(AppendError::NotLeader { .. }))
    ));
    for rx in &mut listeners {
        assert_eq!(
            drain_values(rx, 3).await,
            ["a0", "a1", "a2"]
                .map(|s| Bytes::from_static(s.as_bytes()))
                .to_vec()
        );
    }

    // Graceful resignation: the others elect a new leader, which commits new appends.
    let old = leader.node_id();
    let old_epoch = leader.status().metrics.current_epoch;
    leader.shutdown().await;
    let next = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(h) = handles.iter().find(|h| {
                h.node_id() != old
                    && h.status().role == RoleKind::Leader
                    && h.status().metrics.current_epoch > old_epoch
            }) {
                return h.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a new leader within WAIT");
    let offset: LogOffset = next
        .append(vec![Bytes::from_static(b"b")])
        .await
        .expect("committed");
    assert!(offset.0 >= 3, "{offset:?}");
    for handle in &handles {
        handle.shutdown().await;
    }
    for server in servers {
        server.shutdown().await;
    }
}

fn encodes(request: &RequestKind, version: i16) -> bool {
    let mut buf = BytesMut::new();
    match request {
        RequestKind::Vote(r) => r.encode(&mut buf, version).is_ok(),
        RequestKind::EndQuorumEpoch(r) => r.encode(&mut buf, version).is_ok(),
        _ => false,
    }
}

#[test]
fn newest_layout_messages_fit_every_older_version() {
    let end = EndQuorumEpochRequest::default().with_topics(vec![
        end_quorum_epoch_request::TopicData::default().with_partitions(vec![
            end_quorum_epoch_request::PartitionData::default()
                .with_preferred_successors(vec![2, 3])
                .with_preferred_candidates(vec![
                    end_quorum_epoch_request::ReplicaInfo::default().with_candidate_id(BrokerId(2)),
                ]),
        ]),
    ]);
    let vote = VoteRequest::default().with_voter_id(BrokerId(2));
    for version in 0..=1 {
        let mut request = RaftRequest::EndQuorumEpoch(end.clone());
        fit_request(&mut request, version);
        let RaftRequest::EndQuorumEpoch(fitted) = request else {
            unreachable!("same kind")
        };
        assert!(
            encodes(&RequestKind::EndQuorumEpoch(fitted), version),
            "EndQuorumEpoch v{version}"
        );
        let mut request = RaftRequest::Vote(vote.clone());
        fit_request(&mut request, version);
        let RaftRequest::Vote(fitted) = request else {
            unreachable!("same kind")
        };
        assert!(
            encodes(&RequestKind::Vote(fitted), version),
            "Vote v{version}"
        );
    }
    let describe = DescribeQuorumResponse::default()
        .with_nodes(vec![
            describe_quorum_response::Node::default().with_node_id(BrokerId(1)),
        ])
        .with_topics(vec![
            describe_quorum_response::TopicData::default().with_partitions(vec![
                describe_quorum_response::PartitionData::default().with_current_voters(vec![
                    describe_quorum_response::ReplicaState::default()
                        .with_replica_id(BrokerId(1))
                        .with_last_fetch_timestamp(5)
                        .with_last_caught_up_timestamp(5),
                ]),
            ]),
        ]);
    for version in 0..=2 {
        let mut response = RaftResponse::DescribeQuorum(describe.clone());
        fit_response(&mut response, version);
        let RaftResponse::DescribeQuorum(fitted) = response else {
            unreachable!("same kind")
        };
        let mut buf = BytesMut::new();
        assert!(
            fitted.encode(&mut buf, version).is_ok(),
            "DescribeQuorum v{version}"
        );
    }
}
