//! Three `krust server` controller processes on loopback: they elect a leader; krust's
//! `metadata-quorum` and Kafka 3.9's own `MetadataQuorumCommand` both describe the quorum
//! (`--bootstrap-controller`, `--status` and `--replication`); a SIGTERM of the leader hands
//! leadership over through EndQuorumEpoch faster than a SIGKILL does (both measured and printed,
//! only compared, never held to a wall-clock bound).

#[path = "quorum_support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, class, run_binary};
use support::{KRUST, Quorum, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(60);

fn caught_up(q: &krust::metadata_quorum::QuorumInfo) -> bool {
    let leader_end = q
        .voters
        .iter()
        .find(|v| v.replica_id.0 == q.leader_id)
        .map(|v| v.log_end_offset);
    q.voters.len() == 3
        && q.high_watermark > 0
        && q.voters
            .iter()
            .all(|v| Some(v.log_end_offset) == leader_end)
}

#[test]
fn three_controllers_elect_a_leader_and_krust_and_kafka_tools_describe_it() {
    let mut quorum = Quorum::new(3, &[]);
    quorum.start_all();
    let q = wait_for_quorum(&quorum.bootstrap(), WAIT, caught_up)
        .unwrap_or_else(|| panic!("no caught-up leader\n{}", quorum.log_tails()));
    assert!((1..=3).contains(&q.leader_id), "leader {}", q.leader_id);
    let bootstrap = quorum.nodes[0].address();

    // krust's own tool.
    let out = run_binary(
        KRUST,
        &[
            "metadata-quorum",
            "--bootstrap-controller",
            &bootstrap,
            "describe",
            "--status",
        ],
        None,
        WAIT,
    )
    .expect("run")
    .ok()
    .expect("krust metadata-quorum --status");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("ClusterId:              {}", quorum.cluster_id),
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with("LeaderId:               "),
        "{}",
        out.stdout
    );
    assert!(lines[6].starts_with("CurrentVoters:          [{\"id\": 1, \"directoryId\": null, \"endpoints\": [\"CONTROLLER://127.0.0.1:"), "{}", out.stdout);
    let out = run_binary(
        KRUST,
        &[
            "metadata-quorum",
            "--bootstrap-controller",
            &bootstrap,
            "describe",
            "--replication",
        ],
        None,
        WAIT,
    )
    .expect("run")
    .ok()
    .expect("krust metadata-quorum --replication");
    assert!(
        out.stdout.starts_with("NodeId\tDirectoryId"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.contains("Follower"))
            .count(),
        2,
        "{}",
        out.stdout
    );

    // Kafka 3.9's tool against krust controllers.
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let status = dist
        .run_tool(
            class::METADATA_QUORUM,
            &["--bootstrap-controller", &bootstrap, "describe", "--status"],
            Duration::from_secs(120),
        )
        .expect("run MetadataQuorumCommand")
        .ok()
        .expect("Kafka's describe --status");
    println!("Kafka's describe --status:\n{}", status.stdout);
    assert!(
        status
            .stdout
            .contains(&format!("ClusterId:              {}", quorum.cluster_id)),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("MaxFollowerLag:         0"),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("CurrentObservers:       []"),
        "{}",
        status.stdout
    );
    let replication = dist
        .run_tool(
            class::METADATA_QUORUM,
            &[
                "--bootstrap-controller",
                &bootstrap,
                "describe",
                "--replication",
            ],
            Duration::from_secs(120),
        )
        .expect("run MetadataQuorumCommand")
        .ok()
        .expect("Kafka's describe --replication");
    println!("Kafka's describe --replication:\n{}", replication.stdout);
    assert_eq!(
        replication
            .stdout
            .lines()
            .filter(|l| l.contains("Leader"))
            .count(),
        1,
        "{}",
        replication.stdout
    );
    assert_eq!(
        replication
            .stdout
            .lines()
            .filter(|l| l.contains("Follower"))
            .count(),
        2,
        "{}",
        replication.stdout
    );

    // Commit latency through the test hook: sequential single-record appends on the leader
    // (each waits for the commit: linger 25 ms + a follower fetch round). Printed, not asserted.
    let leader_socket = quorum.node(q.leader_id).socket();
    let mut latencies = Vec::new();
    let mut last_offset = -1;
    for i in 0..100 {
        let started = Instant::now();
        let offset = support::append_via(&leader_socket, &format!("latency-{i}"))
            .expect("append on the leader");
        latencies.push(started.elapsed());
        assert!(
            offset > last_offset,
            "offsets grow: {offset} after {last_offset}"
        );
        last_offset = offset;
    }
    latencies.sort();
    println!(
        "100 sequential commits on a 3-voter krust quorum (debug build): p50 {:?}, p90 {:?}, max {:?}",
        latencies[50], latencies[90], latencies[99]
    );
    quorum.stop_all();
}

/// Kills (or terminates) the current leader and returns how long until a survivor reports a
/// new leader in a higher epoch. Restarts the old leader and waits until all caught up.
fn handover(quorum: &mut Quorum, graceful: bool) -> Duration {
    let q = wait_for_quorum(&quorum.bootstrap(), WAIT, caught_up)
        .unwrap_or_else(|| panic!("no caught-up leader\n{}", quorum.log_tails()));
    let (old, epoch) = (q.leader_id, q.leader_epoch);
    let survivors = quorum.bootstrap_without(&[old]);
    let started = Instant::now();
    if graceful {
        let status = quorum.terminate(old);
        assert!(status.success(), "SIGTERM exit status {status:?}");
    } else {
        quorum.kill(old);
    }
    let q = wait_for_quorum(&survivors, WAIT, |q| {
        q.leader_id != old && q.leader_epoch > epoch
    })
    .unwrap_or_else(|| panic!("no new leader after {old} stopped\n{}", quorum.log_tails()));
    let took = started.elapsed();
    assert_ne!(q.leader_id, old);
    quorum.start(old);
    took
}

#[test]
fn graceful_resignation_hands_over_faster_than_a_crash() {
    // Kafka's default timeouts: a crash costs a fetch timeout (2 s) plus an election.
    let mut quorum = Quorum::new(3, &[]);
    quorum.start_all();
    let mut graceful = Vec::new();
    let mut crashed = Vec::new();
    for _ in 0..3 {
        graceful.push(handover(&mut quorum, true));
        crashed.push(handover(&mut quorum, false));
    }
    graceful.sort();
    crashed.sort();
    println!("leader handover after SIGTERM (EndQuorumEpoch): {graceful:?}");
    println!("leader handover after SIGKILL (fetch timeout):  {crashed:?}");
    println!(
        "median: SIGTERM {:?}, SIGKILL {:?}",
        graceful[1], crashed[1]
    );
    assert!(
        graceful[1] < crashed[1],
        "graceful handover (median {:?}) should beat a crash (median {:?})",
        graceful[1],
        crashed[1]
    );
    quorum.stop_all();
}
