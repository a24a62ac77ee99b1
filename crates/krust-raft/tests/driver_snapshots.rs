//! The driver's KIP-630 snapshot lifecycle with real disks and sockets (127.0.0.1): a state
//! machine's snapshot is written as Kafka names and frames it and refused for ids Kafka
//! refuses; retention by `metadata.max.retention.bytes` / `.ms` deletes old snapshots and the
//! log below the next one, always keeping the latest snapshot and a snapshot at the log start;
//! a restart hands the listener the latest snapshot and then the log tail; a follower left
//! behind the leader's log start downloads the snapshot; `.lock` keeps a second driver out.
//!
//! Every wait is bounded by `WAIT`; nothing asserts on elapsed time.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use krust_log::LogConfig;
use krust_net::{Handler, Reply, RequestContext, Server, ServerConfig, SupportedApis};
use krust_raft::SnapshotIdError;
use krust_raft::config::{RaftConfig, VoterAddress};
use krust_raft::driver::wire_versions::{
    self, RoutedRequest, fit_response, raft_request, response_kind, sender_of,
};
use krust_raft::driver::{
    CreateSnapshotError, DriverConfig, DriverExit, DriverStartError, MetadataLogConfig,
    MetadataStore, RaftDriver, RaftEvent, RaftHandle, StorageError,
};
use krust_raft::snapshot::{SnapshotId, read_snapshot};
use krust_raft::{NodeId, OffsetAndEpoch, RoleKind};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(30);

/// Small segments (about one batch each) so retention visibly deletes whole segments.
fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 128,
        segment_index_bytes: 1024,
        ..LogConfig::default()
    }
}

fn config(
    node: i32,
    voters: &[VoterAddress],
    dir: &Path,
    retention: MetadataLogConfig,
) -> DriverConfig {
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
        log_config: small_segments(),
        rng_seed: Some(u64::try_from(node).unwrap_or(0)),
        metadata_log: retention,
        client_security: Default::default(),
    }
}

fn sole_voter() -> [VoterAddress; 1] {
    [VoterAddress {
        id: NodeId(1),
        host: "127.0.0.1".into(),
        port: 1,
    }]
}

/// No retention at all: only the test's own settings delete anything.
fn no_retention() -> MetadataLogConfig {
    MetadataLogConfig {
        max_retention_bytes: -1,
        max_retention_ms: -1,
        ..MetadataLogConfig::default()
    }
}

async fn wait_for_role(handle: &RaftHandle, role: RoleKind) {
    let mut status = handle.watch_status();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.role == role))
        .await
        .expect("role within WAIT")
        .expect("driver alive");
}

/// Appends `values` one by one and returns the snapshot id that ends right after the last
/// (the leader's epoch; every batch since the election has it).
async fn append_all(handle: &RaftHandle, values: &[&str]) -> OffsetAndEpoch {
    let mut last = None;
    for v in values {
        last = Some(
            handle
                .append(vec![Bytes::from(v.to_string())])
                .await
                .expect("committed"),
        );
    }
    let last = last.expect("at least one value");
    // The HW may already be beyond `last` (it advanced past later batches): wait until the
    // status shows it, then end the snapshot at `last + 1`, a batch boundary.
    let mut status = handle.watch_status();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.metrics.high_watermark > last.0))
        .await
        .expect("HW within WAIT")
        .expect("driver alive");
    OffsetAndEpoch::new(last.0 + 1, handle.status().metrics.current_epoch)
}

fn state(values: &[&str]) -> Vec<Bytes> {
    values.iter().map(|v| Bytes::from(v.to_string())).collect()
}

fn snapshot_path(dir: &Path, id: OffsetAndEpoch) -> std::path::PathBuf {
    dir.join("__cluster_metadata-0").join(
        SnapshotId {
            end_offset: id.offset.0,
            epoch: id.epoch.0,
        }
        .file_name(),
    )
}

async fn stop(driver: RaftDriver) {
    driver.handle().shutdown().await;
    assert!(matches!(driver.join().await, DriverExit::Shutdown));
}

/// What is on disk after a clean stop: (snapshot ids oldest first, log start offset).
fn on_disk(dir: &Path) -> (Vec<OffsetAndEpoch>, i64) {
    let store = MetadataStore::open(&dir.join("__cluster_metadata-0"), small_segments())
        .expect("reopen the store");
    let ids = store.snapshots().keys().copied().collect();
    (ids, store.log().log_start_offset())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_written_as_kafka_names_and_frames_it_and_bad_ids_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None)
        .expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let id = append_all(&handle, &["a", "b", "c"]).await;

    // Beyond the high watermark (Kafka: "greater than the high-watermark").
    let beyond = OffsetAndEpoch::new(id.offset.0 + 10, id.epoch.0);
    assert!(matches!(
        handle.create_snapshot(beyond, 0, state(&["x"])).await,
        Err(CreateSnapshotError::InvalidId(
            SnapshotIdError::BeyondHighWatermark { .. }
        ))
    ));
    // The record before the end offset is not of that epoch.
    let wrong_epoch = OffsetAndEpoch::new(id.offset.0, id.epoch.0 + 1);
    assert!(matches!(
        handle.create_snapshot(wrong_epoch, 0, state(&["x"])).await,
        Err(CreateSnapshotError::InvalidId(
            SnapshotIdError::EpochMismatch { .. }
        ))
    ));
    // An empty record is refused by the writer and leaves no file behind.
    assert!(matches!(
        handle.create_snapshot(id, 0, vec![Bytes::new()]).await,
        Err(CreateSnapshotError::Write { .. })
    ));

    handle
        .create_snapshot(id, 1_700_000_000_000, state(&["a", "b", "c"]))
        .await
        .expect("snapshot at the HW");
    assert!(matches!(
        handle.create_snapshot(id, 0, state(&["a"])).await,
        Err(CreateSnapshotError::Exists { .. })
    ));

    let path = snapshot_path(dir.path(), id);
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(format!("{:020}-{:010}.checkpoint", id.offset.0, id.epoch.0).as_str())
    );
    let contents = read_snapshot(
        Bytes::from(std::fs::read(&path).expect("snapshot file")),
        Some(id.epoch.0),
    )
    .expect("a valid snapshot");
    assert_eq!(contents.records, state(&["a", "b", "c"]));
    assert_eq!(
        contents.header.last_contained_log_timestamp,
        1_700_000_000_000
    );
    let names: Vec<String> = std::fs::read_dir(dir.path().join("__cluster_metadata-0"))
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".checkpoint"))
        .collect();
    assert_eq!(names.len(), 1, "no partial files left: {names:?}");
    stop(driver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_bytes_keeps_the_latest_snapshot_and_a_snapshot_at_the_log_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Anything on disk exceeds one byte: only the latest snapshot may survive.
    let retention = MetadataLogConfig {
        max_retention_bytes: 1,
        max_retention_ms: -1,
        ..MetadataLogConfig::default()
    };
    let driver =
        RaftDriver::start(config(1, &sole_voter(), dir.path(), retention), None).expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let s1 = append_all(&handle, &["a", "b"]).await;
    handle
        .create_snapshot(s1, 0, state(&["a", "b"]))
        .await
        .expect("s1");
    assert!(
        snapshot_path(dir.path(), s1).exists(),
        "a lone snapshot is the latest: kept"
    );
    let s2 = append_all(&handle, &["c", "d"]).await;
    handle
        .create_snapshot(s2, 0, state(&["a", "b", "c", "d"]))
        .await
        .expect("s2");
    assert!(!snapshot_path(dir.path(), s1).exists(), "s1 deleted");
    let s3 = append_all(&handle, &["e"]).await;
    handle
        .create_snapshot(s3, 0, state(&["a", "b", "c", "d", "e"]))
        .await
        .expect("s3");
    let tail = append_all(&handle, &["f"]).await;
    stop(driver).await;

    let (snapshots, log_start) = on_disk(dir.path());
    assert_eq!(snapshots, vec![s3], "only the latest snapshot survives");
    assert_eq!(
        log_start, s3.offset.0,
        "the log starts where the snapshot ends"
    );
    let store = MetadataStore::open(&dir.path().join("__cluster_metadata-0"), small_segments())
        .expect("reopen");
    assert!(
        store.log().log_end_offset() >= tail.offset.0,
        "the tail after the snapshot stays"
    );
    assert!(
        store
            .log()
            .segments()
            .next()
            .is_some_and(|s| s.base_offset() >= s2.offset.0),
        "segments below the older snapshots are gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_time_deletes_snapshots_older_than_the_limit_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let retention = MetadataLogConfig {
        max_retention_bytes: -1,
        max_retention_ms: 60 * 60 * 1000,
        ..MetadataLogConfig::default()
    };
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits");
    let driver =
        RaftDriver::start(config(1, &sole_voter(), dir.path(), retention), None).expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    // s1 and s2 describe records from two days ago, s3 and s4 from now.
    let two_days_ago = now_ms - 2 * 24 * 60 * 60 * 1000;
    let mut ids = Vec::new();
    for (i, ts) in [two_days_ago, two_days_ago, now_ms, now_ms]
        .into_iter()
        .enumerate()
    {
        let v = format!("v{i}");
        let id = append_all(&handle, &[v.as_str()]).await;
        handle
            .create_snapshot(id, ts, state(&[v.as_str()]))
            .await
            .expect("snapshot");
        ids.push(id);
    }
    stop(driver).await;
    let (snapshots, log_start) = on_disk(dir.path());
    assert_eq!(
        snapshots,
        ids[2..].to_vec(),
        "both expired snapshots deleted"
    );
    assert_eq!(
        log_start, ids[2].offset.0,
        "log start at the oldest kept snapshot"
    );

    // All expired: the latest is still kept.
    let driver = RaftDriver::start(
        config(
            1,
            &sole_voter(),
            dir.path(),
            MetadataLogConfig {
                max_retention_ms: 1,
                ..retention
            },
        ),
        None,
    )
    .expect("restart");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let id = append_all(&handle, &["w"]).await;
    handle
        .create_snapshot(id, two_days_ago, state(&["w"]))
        .await
        .expect("snapshot");
    stop(driver).await;
    let (snapshots, log_start) = on_disk(dir.path());
    assert_eq!(snapshots, vec![id], "the latest snapshot is never deleted");
    assert_eq!(log_start, id.offset.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_driver_hands_over_the_latest_snapshot_and_then_the_log_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let retention = MetadataLogConfig {
        max_retention_bytes: 1,
        max_retention_ms: -1,
        ..MetadataLogConfig::default()
    };
    let driver =
        RaftDriver::start(config(1, &sole_voter(), dir.path(), retention), None).expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let s1 = append_all(&handle, &["a", "b"]).await;
    handle
        .create_snapshot(s1, 0, state(&["a", "b"]))
        .await
        .expect("s1");
    let s2 = append_all(&handle, &["c"]).await;
    handle
        .create_snapshot(s2, 0, state(&["a", "b", "c"]))
        .await
        .expect("s2");
    append_all(&handle, &["t0", "t1"]).await;
    stop(driver).await;

    let (tx, mut events) = mpsc::channel(64);
    let driver = RaftDriver::start(config(1, &sole_voter(), dir.path(), retention), Some(tx))
        .expect("restart");
    let first = tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("event within WAIT")
        .expect("events open");
    assert_eq!(
        first,
        RaftEvent::SnapshotInstalled(s2),
        "the latest snapshot comes first"
    );
    let mut values = Vec::new();
    while values.len() < 2 {
        let event = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("commit within WAIT")
            .expect("events open");
        if let RaftEvent::Commit(batches) = event {
            for batch in batches {
                assert!(
                    batch.base_offset() >= s2.offset.0,
                    "nothing the snapshot holds"
                );
                if !batch.is_control() {
                    for record in batch.records().expect("records") {
                        values.push(record.value.unwrap_or_default());
                    }
                }
            }
        }
    }
    assert_eq!(values, state(&["t0", "t1"]));
    stop(driver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_driver_on_the_same_directory_fails_with_kafkas_lock_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None)
        .expect("start");
    match RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None) {
        Err(DriverStartError::Storage(e @ StorageError::Locked { .. })) => {
            assert_eq!(
                e.to_string(),
                format!(
                    "Failed to acquire lock on file .lock in {}. A Kafka instance in another process or thread is using this directory.",
                    dir.path().display()
                )
            );
        }
        other => panic!("expected the lock error, got {other:?}"),
    }
    stop(first).await;
    let again = RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None)
        .expect("the lock is released at shutdown");
    stop(again).await;
}

/// Raft RPCs, FetchSnapshot included, to whichever driver currently runs in the slot.
struct RaftListener {
    apis: SupportedApis,
    raft: Arc<RwLock<Option<RaftHandle>>>,
}

impl Handler for RaftListener {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let raft = self.raft.read().ok().and_then(|slot| slot.clone());
        let Some(raft) = raft else {
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
async fn a_follower_behind_the_leaders_log_start_downloads_the_latest_snapshot() {
    let apis = SupportedApis::new([
        (ApiKey::ApiVersions, 0, 4),
        (
            ApiKey::Fetch,
            wire_versions::FETCH_VERSIONS.0,
            wire_versions::FETCH_VERSIONS.1,
        ),
        (ApiKey::FetchSnapshot, 0, 1),
        (ApiKey::Vote, 0, 1),
        (ApiKey::BeginQuorumEpoch, 0, 1),
        (ApiKey::EndQuorumEpoch, 0, 1),
    ])
    .expect("apis");
    let mut slots = Vec::new();
    let mut servers = Vec::new();
    let mut voters = Vec::new();
    for id in 1..=3 {
        let slot = Arc::new(RwLock::new(None));
        let handler = Arc::new(RaftListener {
            apis: apis.clone(),
            raft: slot.clone(),
        });
        let server = Server::bind(
            "127.0.0.1:0",
            handler,
            ServerConfig {
                max_in_flight_requests_per_connection: 8,
                ..ServerConfig::default()
            },
        )
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
    let retention = MetadataLogConfig {
        max_retention_bytes: 1,
        max_retention_ms: -1,
        ..MetadataLogConfig::default()
    };
    let start = |i: usize, events: Option<mpsc::Sender<RaftEvent>>| {
        let id = i32::try_from(i).expect("small") + 1;
        let driver = RaftDriver::start(config(id, &voters, dirs[i].path(), retention), events)
            .expect("start");
        *slots[i].write().expect("slot") = Some(driver.handle());
        driver
    };
    let mut drivers: Vec<Option<RaftDriver>> = (0..3).map(|i| Some(start(i, None))).collect();
    let leader = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(h) = drivers
                .iter()
                .flatten()
                .map(RaftDriver::handle)
                .find(|h| h.status().role == RoleKind::Leader)
            {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader within WAIT");
    append_all(&leader, &["a"]).await;

    // One follower stops; the other two keep committing, snapshot twice and clean.
    let lagging = (0..3)
        .find(|i| i32::try_from(*i).expect("small") + 1 != leader.node_id().0)
        .expect("a follower");
    *slots[lagging].write().expect("slot") = None;
    stop(drivers[lagging].take().expect("running")).await;
    let s1 = append_all(&leader, &["b", "c"]).await;
    leader
        .create_snapshot(s1, 0, state(&["a", "b", "c"]))
        .await
        .expect("s1");
    let s2 = append_all(&leader, &["d"]).await;
    leader
        .create_snapshot(s2, 0, state(&["a", "b", "c", "d"]))
        .await
        .expect("s2");
    let leader_dir = dirs[usize::try_from(leader.node_id().0 - 1).expect("id")].path();
    assert!(
        !snapshot_path(leader_dir, s1).exists(),
        "the leader cleaned s1"
    );

    // The follower comes back with a log that ends below the leader's log start.
    let (tx, mut events) = mpsc::channel(64);
    drivers[lagging] = Some(start(lagging, Some(tx)));
    let installed = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await.expect("events open") {
                RaftEvent::SnapshotInstalled(id) => return id,
                RaftEvent::Commit(_) | RaftEvent::LeaderChange { .. } => {}
            }
        }
    })
    .await
    .expect("a snapshot within WAIT");
    assert_eq!(
        installed, s2,
        "the follower loads the leader's latest snapshot"
    );
    let bytes = std::fs::read(snapshot_path(dirs[lagging].path(), s2)).expect("downloaded file");
    let contents = read_snapshot(Bytes::from(bytes), Some(s2.epoch.0)).expect("valid");
    assert_eq!(contents.records, state(&["a", "b", "c", "d"]));

    // Replication goes on from the snapshot's end.
    leader
        .append(vec![Bytes::from_static(b"e")])
        .await
        .expect("committed");
    let values = tokio::time::timeout(WAIT, async {
        loop {
            if let RaftEvent::Commit(batches) = events.recv().await.expect("events open") {
                let values: Vec<Bytes> = batches
                    .iter()
                    .filter(|b| !b.is_control())
                    .flat_map(|b| b.records().expect("records"))
                    .filter_map(|r| r.value)
                    .collect();
                if !values.is_empty() {
                    return values;
                }
            }
        }
    })
    .await
    .expect("a commit within WAIT");
    assert_eq!(values, state(&["e"]));

    for driver in drivers.into_iter().flatten() {
        stop(driver).await;
    }
    for server in servers {
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_clean_shutdown_leaves_a_recovery_point_for_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = dir.path().join("recovery-point-offset-checkpoint");
    // Another log of the same directory keeps its entry throughout.
    std::fs::write(&checkpoint, "0\n1\nfoo 3 42\n").expect("seed checkpoint");
    let entry = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("__cluster_metadata 0 "))
            .map(|o| o.parse::<i64>().expect("offset"))
    };
    let driver = RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None)
        .expect("start");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let end = append_all(&handle, &["a", "b"]).await;
    stop(driver).await;
    let text = std::fs::read_to_string(&checkpoint).expect("checkpoint");
    let recovery_point = entry(&text).expect("an entry after a clean shutdown");
    assert!(recovery_point >= end.offset.0, "{text}");
    assert!(text.contains("foo 3 42"), "{text}");

    // While a driver runs, a crash must rescan: the entry is gone until the next clean stop.
    let driver = RaftDriver::start(config(1, &sole_voter(), dir.path(), no_retention()), None)
        .expect("restart");
    let text = std::fs::read_to_string(&checkpoint).expect("checkpoint");
    assert_eq!(entry(&text), None, "{text}");
    assert!(text.contains("foo 3 42"), "{text}");
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let end = append_all(&handle, &["c"]).await;
    stop(driver).await;
    let text = std::fs::read_to_string(&checkpoint).expect("checkpoint");
    assert!(entry(&text).expect("entry") >= end.offset.0, "{text}");
}

/// Kafka's `recoverSnapshots` and `truncateToLatestSnapshot` at start-up: leftovers of both
/// deletion phases and of interrupted writes are removed; a snapshot ahead of the log (a
/// follower crashed between freezing a download and emptying its log) becomes the log start
/// and is handed to the listener; a log whose start no snapshot covers is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_removes_leftovers_and_puts_the_log_start_on_a_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let partition = dir.path().join("__cluster_metadata-0");
    std::fs::create_dir_all(&partition).expect("dir");
    let ahead = OffsetAndEpoch::new(10, 3);
    krust_raft::driver::write_snapshot_file(&partition, ahead, 0, 0, state(&["s"]))
        .expect("snapshot");
    let leftovers = [
        "00000000000000000004-0000000001-0123456789abcdef.checkpoint.part",
        "00000000000000000002-0000000001.checkpoint.deleted",
    ];
    for name in leftovers {
        std::fs::write(partition.join(name), b"x").expect("leftover");
    }
    let (tx, mut events) = mpsc::channel(64);
    let driver = RaftDriver::start(
        config(1, &sole_voter(), dir.path(), no_retention()),
        Some(tx),
    )
    .expect("start");
    for name in leftovers {
        assert!(!partition.join(name).exists(), "{name} removed");
    }
    let first = tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("event within WAIT")
        .expect("events open");
    assert_eq!(first, RaftEvent::SnapshotInstalled(ahead));
    let handle = driver.handle();
    wait_for_role(&handle, RoleKind::Leader).await;
    let offset = handle
        .append(vec![Bytes::from_static(b"after")])
        .await
        .expect("committed");
    assert!(
        offset.0 > ahead.offset.0,
        "the log goes on after the snapshot: {offset:?}"
    );
    stop(driver).await;

    // A log that starts above 0 with no snapshot at or after its start.
    let bare = tempfile::tempdir().expect("tempdir");
    let bare_partition = bare.path().join("__cluster_metadata-0");
    let mut log = krust_log::Log::open(&bare_partition, small_segments(), 0).expect("log");
    log.truncate_fully_and_start_at(50).expect("start at 50");
    log.close().expect("close");
    match RaftDriver::start(config(1, &sole_voter(), bare.path(), no_retention()), None) {
        Err(DriverStartError::Storage(StorageError::MissingStartSnapshot {
            log_start_offset: 50,
            latest: None,
            ..
        })) => {}
        other => panic!("expected the inconsistent snapshot state error, got {other:?}"),
    }
}
