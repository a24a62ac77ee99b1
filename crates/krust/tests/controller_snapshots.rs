//! Three `krust server` controllers with a tiny snapshot trigger
//! (`metadata.log.max.record.bytes.between.snapshots=200`, so the NoOp records alone trigger
//! one every few seconds) and `metadata.max.retention.bytes=1` (the log start follows the
//! latest snapshot).
//!
//! Checks: every controller writes `<offset>-<epoch>.checkpoint` snapshots of its committed
//! image, and a snapshot read back holds a KIP-919 registration of every controller (each
//! sends ControllerRegistration to the active one) with its controller listener; a SIGKILLed
//! standby whose log was emptied catches up by FetchSnapshot, its controller loads that
//! snapshot ("controller loaded a snapshot"), and it registers again under a new incarnation
//! id.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use krust_metadata::MetadataImage;
use krust_metadata::image::read_image_snapshot;
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName, SnapshotId};
use support::{FAST_TIMEOUTS, Quorum, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(60);

fn start_controller(quorum: &mut Quorum, id: i32) {
    let node = quorum.node(id);
    node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
}

/// The image in the newest frozen snapshot of a node (skipping the (0, 0) bootstrap one), if
/// any can be read (a file may be replaced by retention while we look).
fn latest_snapshot_image(data: &Path) -> Option<(SnapshotId, MetadataImage)> {
    let dir = data.join("__cluster_metadata-0");
    let mut ids: Vec<SnapshotId> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| SnapshotFileName::parse(&e.file_name().to_string_lossy()).ok()?)
        .filter(|n| n.kind == SnapshotFileKind::Frozen && n.id.end_offset > 0)
        .map(|n| n.id)
        .collect();
    ids.sort();
    let id = *ids.last()?;
    let bytes = std::fs::read(dir.join(id.file_name())).ok()?;
    let image =
        read_image_snapshot(Bytes::from(bytes), id).expect("a snapshot krust wrote reads back");
    Some((id, image))
}

/// Polls node `id`'s snapshots until one satisfies `accept`.
fn wait_for_snapshot(
    quorum: &Quorum,
    id: i32,
    accept: impl Fn(&MetadataImage) -> bool,
) -> (SnapshotId, MetadataImage) {
    let data = quorum
        .nodes
        .iter()
        .find(|n| n.id == id)
        .expect("node")
        .data_dir();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some((sid, image)) = latest_snapshot_image(&data)
            && accept(&image)
        {
            return (sid, image);
        }
        assert!(
            Instant::now() < deadline,
            "node {id}: no accepted snapshot\n{}",
            quorum.log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn controllers_snapshot_their_image_register_themselves_and_restart_from_a_snapshot() {
    let mut extra = FAST_TIMEOUTS.to_vec();
    extra.push(("metadata.log.max.record.bytes.between.snapshots", "200"));
    // Retention then moves the log start up to the latest snapshot, so a restart begins there.
    extra.push(("metadata.max.retention.bytes", "1"));
    let mut quorum = Quorum::new(3, &extra);
    for id in 1..=3 {
        start_controller(&mut quorum, id);
    }
    let leader = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()))
        .leader_id;

    let all_registered =
        |image: &MetadataImage| (1..=3).all(|c| image.cluster.controllers.contains_key(&c));
    let mut incarnations = Vec::new();
    for id in 1..=3 {
        let (sid, image) = wait_for_snapshot(&quorum, id, all_registered);
        println!(
            "node {id}: snapshot {} holds all three controller registrations",
            sid.file_name()
        );
        for c in 1..=3 {
            let registration = &image.cluster.controllers[&c];
            let endpoint = registration
                .listeners
                .get("CONTROLLER")
                .unwrap_or_else(|| panic!("controller {c} has no CONTROLLER listener"));
            let port = quorum.nodes.iter().find(|n| n.id == c).expect("node").port;
            assert_eq!((endpoint.host.as_str(), endpoint.port), ("127.0.0.1", port));
        }
        if id == 1 {
            incarnations = (1..=3)
                .map(|c| image.cluster.controllers[&c].incarnation_id)
                .collect();
        }
    }

    // Empty a standby's log (keeping its election record): on restart the leader, whose log
    // now starts at its latest snapshot, sends it that snapshot, which its controller loads.
    let standby = (1..=3).find(|id| *id != leader).expect("a standby");
    quorum.kill(standby);
    let partition = quorum.node(standby).data_dir().join("__cluster_metadata-0");
    for entry in std::fs::read_dir(&partition).expect("list") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n != "quorum-state") {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    let process = quorum.node(standby).process.as_mut().expect("started");
    let mark = process.log_mark();
    process.restart().expect("restart");
    if let Err(e) = process.wait_for_line_since(mark, "controller loaded a snapshot", WAIT) {
        panic!(
            "restarted node loaded no snapshot: {e}\n{}",
            quorum.log_tails()
        );
    }
    let old = incarnations[usize::try_from(standby - 1).expect("index")];
    let (sid, _) = wait_for_snapshot(&quorum, leader, |image| {
        image
            .cluster
            .controllers
            .get(&standby)
            .is_some_and(|r| r.incarnation_id != old)
    });
    println!(
        "node {standby} re-registered after its restart (seen in {} of node {leader})",
        sid.file_name()
    );
}

/// With the whole log kept (default retention, so the log still begins at 0), a restarted
/// controller starts from its latest snapshot rather than replaying the log from offset 0,
/// then follows the log after it: its own re-registration shows up in its next snapshot.
#[test]
fn a_restarted_controller_starts_from_its_latest_snapshot() {
    let mut extra = FAST_TIMEOUTS.to_vec();
    extra.push(("metadata.log.max.record.bytes.between.snapshots", "200"));
    let mut quorum = Quorum::new(3, &extra);
    for id in 1..=3 {
        start_controller(&mut quorum, id);
    }
    let leader = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()))
        .leader_id;
    let standby = (1..=3).find(|id| *id != leader).expect("a standby");
    let all_registered =
        |image: &MetadataImage| (1..=3).all(|c| image.cluster.controllers.contains_key(&c));
    let (before, image) = wait_for_snapshot(&quorum, standby, all_registered);
    let old = image.cluster.controllers[&standby].incarnation_id;
    let first_segment = quorum
        .node(standby)
        .data_dir()
        .join("__cluster_metadata-0/00000000000000000000.log");
    assert!(first_segment.exists(), "the log still begins at offset 0");

    let status = quorum.terminate(standby);
    assert!(status.success(), "clean stop: {status}");
    let process = quorum.node(standby).process.as_mut().expect("started");
    let mark = process.log_mark();
    process.restart().expect("restart");
    let line = process
        .wait_for_line_since(mark, "controller started from its latest snapshot", WAIT)
        .unwrap_or_else(|e| panic!("no start from a snapshot: {e}\n{}", quorum.log_tails()));
    println!("{line}");
    let (after, _) = wait_for_snapshot(&quorum, standby, |image| {
        image
            .cluster
            .controllers
            .get(&standby)
            .is_some_and(|r| r.incarnation_id != old)
    });
    assert!(after > before, "a newer snapshot after the restart");
    println!(
        "node {standby}: started from a snapshot at or after {}, then wrote {}",
        before.file_name(),
        after.file_name()
    );
}
