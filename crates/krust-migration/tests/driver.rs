//! The migration driver against a simulated runtime (`driver_harness`): an in-memory
//! ZooKeeper, an in-memory metadata log feeding images back, fake reader/writer/propagator,
//! virtual time. Each test plays one scenario of facts §6.4–§6.8 and checks ZooKeeper, the log
//! and the driver's status; the harness checks its invariants after every event (only the
//! leader writes ZooKeeper, every write is fenced, `/migration`'s offset never goes back,
//! dual-write never starts before the copy's transaction committed).

mod driver_harness;

use std::time::Duration;

use driver_harness::{SimOptions, ready_cluster};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::MetadataRecord;
use krust_migration::driver::{MissingBroker, QuorumNotReady, WaitReason, ZkRequest, ZkStep};
use krust_migration::state::{IllegalTransition, MIGRATION_PATH, MigrationDriverState as S};
use krust_zk::ops::ZkOp;

const LEADER: i32 = 3000;

#[test]
fn happy_path_goes_through_all_nine_states_copies_then_dual_writes() {
    let mut sim = ready_cluster(SimOptions::default(), 150);
    sim.run_for(Duration::from_millis(10));
    assert_eq!(sim.state(LEADER), S::Inactive, "recovered, not yet leader");
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        -1,
        "/migration created EMPTY"
    );

    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(5));

    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(
        sim.visited[&LEADER],
        vec![
            S::Uninitialized,
            S::Inactive,
            S::WaitForControllerQuorum,
            S::WaitForBrokers,
            S::BecomeController,
            S::ZkMigration,
            S::SyncKraftToZk,
            S::KraftControllerToBrokerComm,
            S::DualWrite
        ]
    );
    // The claim (facts §6.6): /controller_epoch bumped, /controller persistent with our epoch.
    assert_eq!(sim.zk_controller_epoch(), 6);
    let controller = sim.zk_controller();
    assert_eq!(controller.broker_id, LEADER);
    assert_eq!(controller.kraft_controller_epoch, Some(1));
    assert_eq!(
        sim.zk.get("/controller").expect("exists").1.ephemeral_owner,
        0
    );
    let leadership = *sim.driver(LEADER).leadership();
    assert_eq!(leadership.zk_controller_epoch, 6);

    // The copy: Begin, 200 + 100 records (min batch 200), MIGRATION + End, in one transaction.
    let batches: Vec<Vec<&str>> = sim
        .appends
        .iter()
        .map(|(_, _, records)| {
            let mut names: Vec<&str> = records
                .iter()
                .map(|r| r.record.record_type().name())
                .collect();
            names.dedup();
            names
        })
        .collect();
    assert_eq!(batches.len(), 4, "{batches:?}");
    assert_eq!(batches[0], vec!["BEGIN_TRANSACTION_RECORD"]);
    assert_eq!(sim.appends[1].2.len(), 200);
    assert_eq!(sim.appends[2].2.len(), 100);
    assert_eq!(
        batches[3],
        vec!["ZK_MIGRATION_STATE_RECORD", "END_TRANSACTION_RECORD"]
    );
    match &sim.appends[0].2[0].record {
        MetadataRecord::BeginTransaction(b) => assert_eq!(b.name.as_deref(), Some("ZK Migration")),
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.image.topics.by_name.len(), 150);
    assert_eq!(
        sim.image.features.zk_migration_state,
        ZkMigrationState::Migration
    );

    // /migration holds the copy's last offset (then stays, the sync wrote nothing).
    let migration = sim.zk_migration();
    assert!(migration.initial_migration_done());
    assert_eq!(migration.kraft_controller_id, LEADER);
    assert_eq!(migration.kraft_controller_epoch, 1);
    assert_eq!(
        migration.kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );

    let status = sim.driver(LEADER).status();
    let manifest = status.copy.expect("manifest");
    assert_eq!(manifest.total_records, 300);
    assert_eq!(manifest.total_batches, 2);
    assert_eq!(manifest.record_type_counts.values().sum::<usize>(), 300);
    let line = sim.driver(LEADER).completion_message().expect("logged");
    assert!(
        line.starts_with(
            "Completed migration of metadata from ZooKeeper to KRaft. 300 records were generated in "
        ),
        "{line}"
    );
    assert!(line.contains("across 2 batches"), "{line}");
    assert!(
        line.contains("The record types were {TOPIC_RECORD=150, PARTITION_RECORD=150}"),
        "{line}"
    );
    assert!(
        line.contains("Saw 2 brokers in the migrated metadata {0, 1}."),
        "{line}"
    );
    assert_eq!(status.migrating_zk_broker_count, 3);
    assert_eq!(status.zk_write_behind_lag, 0);
    assert!(status.last_snapshot_write_ms.is_some());

    // Entering dual-write sent full RPCs, once.
    assert_eq!(sim.rpcs.len(), 1);
    assert!(sim.rpcs[0].2.full);

    // Dual-write: a new topic lands in ZooKeeper, /migration follows, incremental RPCs go out.
    sim.create_topic("new-topic", &[1, 2]);
    sim.run_for(Duration::from_millis(1));
    assert!(sim.zk_topics().contains("new-topic"));
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );
    let last = sim.rpcs.last().expect("rpcs");
    assert!(!last.2.full);
    assert_eq!(last.2.offset, sim.image.provenance.last_contained_offset);
    assert!(
        sim.zk
            .exists("/config/changes/config_change_0000000000")
            .is_some()
    );

    sim.delete_topic("t000");
    sim.run_for(Duration::from_millis(1));
    assert!(!sim.zk_topics().contains("t000"));
    let status = sim.driver(LEADER).status();
    assert_eq!(
        status.dual_write_offset,
        Some(sim.image.provenance.last_contained_offset)
    );
    assert_eq!(status.zk_write_behind_lag, 0);
    assert!(status.last_delta_write_ms.is_some());
    assert_eq!(status.last_error, None);
    let shown = status.to_string();
    assert!(shown.contains("DriverState: DUAL_WRITE (8)"), "{shown}");
    assert!(shown.contains("ZkMigrationState: MIGRATION (1)"), "{shown}");
    assert!(shown.contains("ZkWriteBehindLag: 0"), "{shown}");

    // The standbys never left INACTIVE and never wrote.
    for standby in [3001, 3002] {
        assert_eq!(sim.visited[&standby], vec![S::Uninitialized, S::Inactive]);
    }
    assert!(sim.zk_writes.iter().all(|w| w.node == LEADER));
}

#[test]
fn waits_for_a_zk_registered_broker_and_for_one_only_in_an_assignment() {
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    // Broker 2 is registered in ZooKeeper only; broker 7 appears only in an assignment.
    sim.zk_cluster(&[0, 1, 2], &[("a", vec![0, 1]), ("b", vec![1, 7])]);
    sim.bootstrap(Some(ZkMigrationState::PreMigration), &[0, 1]);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(2));

    assert_eq!(sim.state(LEADER), S::WaitForBrokers);
    let status = sim.driver(LEADER).status();
    let Some(WaitReason::Brokers(wait)) = status.waiting_for.clone() else {
        panic!("not waiting for brokers: {status:?}");
    };
    assert_eq!(wait.missing.get(&2), Some(&MissingBroker::ZkRegistered));
    assert_eq!(wait.missing.get(&7), Some(&MissingBroker::AssignmentOnly));
    assert_eq!(wait.missing.len(), 2);
    let shown = status.waiting_for.expect("reason").to_string();
    assert!(shown.contains("{2}") && shown.contains("{7}"), "{shown}");
    assert!(
        sim.zk
            .get("/controller")
            .expect("zk controller")
            .0
            .starts_with(b"{\"version\":1")
    );

    sim.register_broker(2);
    sim.run_for(Duration::from_secs(2));
    let Some(WaitReason::Brokers(wait)) = sim.driver(LEADER).status().waiting_for else {
        panic!("still waiting for broker 7");
    };
    assert_eq!(wait.missing.keys().copied().collect::<Vec<_>>(), vec![7]);

    sim.register_broker(7);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(sim.driver(LEADER).status().migrating_zk_broker_count, 4);
}

/// A ZooKeeper broker whose `broker.id` is a controller's node id (brokers and controllers
/// share one id space, KIP-866). Kafka 3.9 migrates anyway and the broker then takes itself for
/// the controller named in `/controller`; krust's driver stays in WAIT_FOR_BROKERS, names the
/// ids, and leaves ZooKeeper untouched — even once that broker registered as migrating.
#[test]
fn a_zookeeper_broker_with_a_controller_node_id_stops_the_migration_before_zookeeper_is_touched() {
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    sim.zk_cluster(&[0, 3001], &[("a", vec![0, 3001])]);
    sim.bootstrap(Some(ZkMigrationState::PreMigration), &[0, 3001]);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(5));

    assert_eq!(sim.state(LEADER), S::WaitForBrokers);
    let status = sim.driver(LEADER).status();
    let Some(WaitReason::Brokers(wait)) = status.waiting_for.clone() else {
        panic!("not waiting for brokers: {status:?}");
    };
    assert!(wait.missing.is_empty(), "both brokers registered: {wait:?}");
    assert_eq!(
        wait.controller_ids.iter().copied().collect::<Vec<_>>(),
        vec![3001]
    );
    let shown = status.waiting_for.expect("reason").to_string();
    assert!(
        shown.contains("ZooKeeper brokers {3001} have the node ids of KRaft controllers"),
        "{shown}"
    );
    assert!(
        sim.zk
            .get("/controller")
            .expect("zk controller")
            .0
            .starts_with(b"{\"version\":1"),
        "the ZooKeeper controller was left alone"
    );
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        -1,
        "nothing copied"
    );
}

#[test]
fn waits_for_every_quorum_controller_to_register_migration_ready() {
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    sim.zk_cluster(&[0], &[("a", vec![0])]);
    // Only the FeatureLevel + state: no controller registrations, no brokers.
    sim.commit(vec![
        MetadataRecord::FeatureLevel(krust_metadata::records::FeatureLevelRecord::new(
            "metadata.version",
            krust_metadata::MetadataVersion::IBP_3_9_IV0.feature_level(),
        )),
        MetadataRecord::ZkMigrationState(krust_metadata::records::ZkMigrationStateRecord {
            zk_migration_state: ZkMigrationState::PreMigration.value(),
            ..Default::default()
        }),
    ]);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.state(LEADER), S::WaitForControllerQuorum);
    assert_eq!(
        sim.driver(LEADER).status().waiting_for,
        Some(WaitReason::ControllerQuorum(QuorumNotReady::NotRegistered(
            3000
        )))
    );
}

#[test]
fn a_leader_change_mid_copy_drops_the_old_leaders_work_and_the_next_leader_redoes_the_copy() {
    let options = SimOptions {
        commit_delay: Duration::from_millis(50),
        ..SimOptions::default()
    };
    let mut sim = ready_cluster(options, 150);
    sim.set_leader(Some(LEADER), 1);
    // Run until the copy's transaction is open and its first data batch appended.
    for _ in 0..1_000 {
        sim.run_for(Duration::from_millis(5));
        if sim.appends.len() >= 2 {
            break;
        }
    }
    assert_eq!(sim.state(LEADER), S::ZkMigration);
    assert_eq!(sim.appends.len(), 2, "Begin and one data batch appended");
    let writes_before = sim.zk_writes.len();

    sim.set_leader(Some(3001), 2);
    assert_eq!(sim.state(LEADER), S::Inactive);
    assert!(sim.driver(LEADER).poll_timeout().is_some());
    sim.run_for(Duration::from_secs(10));

    // The old leader's pending commit arrived and was ignored; it wrote nothing more.
    assert!(
        sim.zk_writes[writes_before..]
            .iter()
            .all(|w| w.node == 3001)
    );
    assert!(sim.appends.iter().filter(|a| a.0 == LEADER).count() == 2);
    assert!(sim.aborts.is_empty());
    assert_eq!(sim.state(LEADER), S::Inactive);

    // The new leader redid the whole copy in its own transaction.
    assert_eq!(sim.state(3001), S::DualWrite);
    assert_eq!(
        sim.image.topics.by_name.len(),
        150,
        "the aborted half copy left no trace"
    );
    let migration = sim.zk_migration();
    assert_eq!(migration.kraft_controller_id, 3001);
    assert_eq!(migration.kraft_controller_epoch, 2);
    assert!(migration.initial_migration_done());
    assert_eq!(sim.zk_controller().kraft_controller_epoch, Some(2));
    assert_eq!(sim.zk_controller_epoch(), 7, "claimed twice");
    assert_eq!(
        sim.driver(3001)
            .status()
            .copy
            .expect("copied")
            .total_records,
        300
    );
}

#[test]
fn a_newer_kraft_epoch_in_controller_znode_blocks_the_claim_until_a_newer_leadership() {
    let mut sim = ready_cluster(SimOptions::default(), 3);
    sim.zk
        .apply(
            &ZkOp::set_data(
                "/controller",
                br#"{"version":2,"brokerid":3002,"timestamp":"5","kraftControllerEpoch":9}"#
                    .to_vec(),
                -1,
            ),
            1,
            0,
        )
        .expect("set");
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));

    assert_eq!(sim.state(LEADER), S::BecomeController);
    assert_eq!(
        sim.driver(LEADER).status().waiting_for,
        Some(WaitReason::ControllerClaimLost {
            kraft_controller_epoch_in_zk: 9,
            our_kraft_controller_epoch: 1
        })
    );
    assert_eq!(sim.zk_controller_epoch(), 5, "/controller_epoch untouched");
    assert!(sim.zk_writes.is_empty(), "nothing written");
    // It keeps retrying, with a growing interval.
    let reads: Vec<_> = sim
        .zk_requests
        .iter()
        .filter(|(_, _, r)| matches!(r, ZkRequest::Get { .. }))
        .map(|(t, _, _)| *t)
        .collect();
    assert!(reads.len() >= 4, "{}", reads.len());
    let gaps: Vec<Duration> = reads.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] > g[0]),
        "backoff grows: {gaps:?}"
    );

    sim.set_leader(Some(LEADER), 10);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(sim.zk_controller().kraft_controller_epoch, Some(10));
    assert_eq!(sim.zk_controller_epoch(), 6);
}

#[test]
fn a_concurrent_writer_bumping_migration_fences_the_dual_write() {
    let options = SimOptions {
        zk_delay: Duration::from_millis(10),
        ..SimOptions::default()
    };
    let mut sim = ready_cluster(options, 3);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    let before = sim.zk_migration();

    // Someone else writes /migration (as another KRaft controller would).
    sim.zk
        .apply(
            &ZkOp::set_data(MIGRATION_PATH, before.to_migration_json(), -1),
            1,
            0,
        )
        .expect("bump");
    sim.create_topic("fenced", &[0]);
    sim.run_for(Duration::from_millis(1));

    // The guarded create failed at the /migration check: nothing landed.
    let (_, error) = sim.failed_zk_writes.last().expect("a fenced write");
    assert_eq!(error.path, MIGRATION_PATH);
    assert!(!sim.zk_topics().contains("fenced"));
    sim.run_for(Duration::from_millis(10));
    assert!(
        sim.driver(LEADER)
            .status()
            .last_error
            .expect("logged")
            .contains("another KRaft controller")
    );

    // Still the leader: it re-reads /migration, reclaims (its own registration), reconciles.
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert!(
        sim.zk_topics().contains("fenced"),
        "the reconciliation repaired the missed write"
    );
    assert_eq!(sim.zk_controller_epoch(), 7);
    assert!(sim.visited[&LEADER].ends_with(&[
        S::DualWrite,
        S::Inactive,
        S::WaitForControllerQuorum,
        S::BecomeController,
        S::SyncKraftToZk,
        S::KraftControllerToBrokerComm,
        S::DualWrite
    ]));
}

#[test]
fn zookeeper_down_is_retried_with_backoff_then_drains() {
    let mut sim = ready_cluster(SimOptions::default(), 3);
    sim.zk_down = true;
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.state(LEADER), S::Uninitialized);
    let attempts: Vec<_> = sim
        .zk_requests
        .iter()
        .filter(|(_, n, _)| *n == LEADER)
        .map(|(t, _, _)| (*t - sim.start).as_millis())
        .collect();
    // 0, then ~100, ~300, ~700, ~1500, … (100 ms doubling, ±2 %).
    assert!(attempts.len() >= 8 && attempts.len() <= 10, "{attempts:?}");
    assert!((98..=102).contains(&attempts[1]), "{attempts:?}");
    assert!((294..=306).contains(&attempts[2]), "{attempts:?}");
    assert!(sim.driver(LEADER).status().zk_retries >= 8);

    sim.zk_down = false;
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(60));
    assert_eq!(sim.state(LEADER), S::DualWrite);

    // Down while dual-writing: deltas queue behind the write in flight, coalesced into one
    // batch, then drain in order once ZooKeeper is back.
    sim.zk_down = true;
    for i in 0..5 {
        sim.create_topic(&format!("late-{i}"), &[0]);
        sim.run_for(Duration::from_millis(300));
    }
    let status = sim.driver(LEADER).status();
    assert_eq!(status.pending_dual_writes, 1, "{status:?}");
    assert!(status.zk_write_behind_lag > 0);
    assert!(matches!(status.waiting_for, Some(WaitReason::Zk { .. })));
    sim.zk_down = false;
    sim.run_for(Duration::from_secs(70));
    let status = sim.driver(LEADER).status();
    assert_eq!(status.pending_dual_writes, 0);
    assert_eq!(status.zk_write_behind_lag, 0);
    for i in 0..5 {
        assert!(sim.zk_topics().contains(&format!("late-{i}")));
    }
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );
}

#[test]
fn a_write_cut_by_connection_loss_resumes_from_the_failed_step() {
    let mut sim = ready_cluster(SimOptions::default(), 3);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    // A delta with two creates, packed into one multi-op: the step after it (the
    // `/migration` bump) fails with CONNECTIONLOSS.
    let before = sim.zk_migration().kraft_metadata_offset;
    sim.zk_fail_write_after_steps = Some(1);
    sim.commit(vec![
        MetadataRecord::Topic(krust_metadata::records::TopicRecord {
            name: "x".to_owned(),
            topic_id: uuid::Uuid::from_u128(0xF1),
            ..Default::default()
        }),
        MetadataRecord::Topic(krust_metadata::records::TopicRecord {
            name: "y".to_owned(),
            topic_id: uuid::Uuid::from_u128(0xF2),
            ..Default::default()
        }),
    ]);
    sim.run_for(Duration::from_millis(1));
    assert!(sim.zk_topics().contains("x") && sim.zk_topics().contains("y"));
    assert_eq!(sim.zk_migration().kraft_metadata_offset, before);
    sim.run_for(Duration::from_secs(1));
    assert!(sim.zk_topics().contains("x") && sim.zk_topics().contains("y"));
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(sim.driver(LEADER).status().last_error, None);
}

/// ZooKeeper applied a dual-write but the connection dropped before its reply came: the re-sent
/// multi-op is refused (its topic node exists, `/migration` moved on). The driver reads
/// `/migration` back, finds its own update, and goes on dual-writing — no new claim of
/// `/controller`, no error.
#[test]
fn a_dual_write_applied_with_its_reply_lost_is_recognised_not_taken_for_fencing() {
    let mut sim = ready_cluster(SimOptions::default(), 3);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    let controller = sim.zk_controller();
    let controller_epoch = sim.zk_controller_epoch();
    sim.zk_lose_next_write_reply = true;
    sim.commit(vec![MetadataRecord::Topic(
        krust_metadata::records::TopicRecord {
            name: "lost-reply".to_owned(),
            topic_id: uuid::Uuid::from_u128(0xF3),
            ..Default::default()
        },
    )]);
    sim.run_for(Duration::from_secs(2));
    assert!(sim.zk_topics().contains("lost-reply"));
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(sim.zk_controller(), controller, "no new claim");
    assert_eq!(sim.zk_controller_epoch(), controller_epoch);
    assert_eq!(sim.driver(LEADER).status().last_error, None);
    // And the next change is written with the version learnt from the read-back.
    sim.commit(vec![MetadataRecord::Topic(
        krust_metadata::records::TopicRecord {
            name: "after".to_owned(),
            topic_id: uuid::Uuid::from_u128(0xF4),
            ..Default::default()
        },
    )]);
    sim.run_for(Duration::from_secs(2));
    assert!(sim.zk_topics().contains("after"));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert_eq!(sim.driver(LEADER).status().last_error, None);
}

#[test]
fn none_and_post_migration_images_never_migrate() {
    for state in [
        None,
        Some(ZkMigrationState::None),
        Some(ZkMigrationState::PostMigration),
    ] {
        let mut sim = driver_harness::Sim::new(SimOptions::default());
        sim.zk_cluster(&[0, 1], &[("a", vec![0, 1])]);
        sim.bootstrap(state, &[0, 1]);
        sim.set_leader(Some(LEADER), 1);
        sim.run_for(Duration::from_secs(30));
        assert_eq!(sim.state(LEADER), S::Inactive, "{state:?}");
        let expected = state.unwrap_or(ZkMigrationState::None);
        assert_eq!(
            sim.driver(LEADER).status().waiting_for,
            Some(WaitReason::MigrationNotAllowed {
                zk_migration_state: expected
            }),
            "{state:?}"
        );
        assert!(sim.zk_writes.is_empty(), "{state:?}: no ZooKeeper write");
        assert!(sim.appends.is_empty(), "{state:?}: no record appended");
        assert_eq!(
            sim.zk_controller().broker_id,
            0,
            "{state:?}: /controller untouched"
        );
    }
}

/// The log holds MIGRATION (the copy's transaction committed) but `/migration` does not record
/// the copy: the previous leader failed between the two. Kafka 3.9 stays INACTIVE for good;
/// krust continues from the log and records the synced offset in `/migration`.
#[test]
fn a_committed_copy_missing_from_zk_is_continued_from_the_log() {
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    sim.zk_cluster(&[0], &[]);
    sim.bootstrap(Some(ZkMigrationState::Migration), &[0]);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(5));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    assert!(
        sim.zk_migration().kraft_metadata_offset > 0,
        "/migration records the synced offset"
    );
}

#[test]
fn illegal_transitions_are_errors_naming_both_states() {
    let error = S::DualWrite
        .transition_to(S::SyncKraftToZk)
        .expect_err("DUAL_WRITE only goes INACTIVE");
    assert_eq!(
        error,
        IllegalTransition {
            from: S::DualWrite,
            to: S::SyncKraftToZk
        }
    );
    assert_eq!(
        error.to_string(),
        "Invalid transition in migration driver from DUAL_WRITE to SYNC_KRAFT_TO_ZK"
    );
    assert!(S::Inactive.transition_to(S::Uninitialized).is_err());
    assert!(S::WaitForBrokers.transition_to(S::ZkMigration).is_err());
}

#[test]
fn every_dual_write_step_is_fenced_by_controller_epoch_and_migration_versions() {
    let mut sim = ready_cluster(SimOptions::default(), 2);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    let controller_epoch_version = sim.zk.get("/controller_epoch").expect("exists").1.version;
    let migration_version = sim.zk.get(MIGRATION_PATH).expect("exists").1.version;
    let before = sim.zk_requests.len();
    sim.create_topic("fenced-check", &[0]);
    sim.run_for(Duration::from_millis(1));
    let writes: Vec<&ZkRequest> = sim.zk_requests[before..]
        .iter()
        .map(|(_, _, r)| r)
        .collect();
    let [ZkRequest::Write { steps }] = writes.as_slice() else {
        panic!("one write: {writes:?}");
    };
    let ZkStep::Multi(first) = &steps[0] else {
        panic!("{steps:?}");
    };
    assert_eq!(
        first[0],
        ZkOp::check("/controller_epoch", controller_epoch_version)
    );
    assert_eq!(first[1], ZkOp::check(MIGRATION_PATH, migration_version));
    assert!(
        matches!(&first[2], ZkOp::Create { path, .. } if path == "/brokers/topics/fenced-check")
    );
    let ZkStep::Multi(last) = steps.last().expect("steps") else {
        panic!("{steps:?}");
    };
    assert_eq!(
        last[0],
        ZkOp::check("/controller_epoch", controller_epoch_version)
    );
    assert!(
        matches!(&last[1], ZkOp::SetData { path, version, .. } if path == MIGRATION_PATH && *version == migration_version)
    );
}

#[test]
fn a_change_published_while_the_reconciliation_writes_is_not_lost() {
    let options = SimOptions {
        zk_delay: Duration::from_millis(10),
        ..SimOptions::default()
    };
    let mut sim = ready_cluster(options, 3);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    // A stranger removes a topic znode: the next reconciliation has something to write.
    sim.zk
        .apply(&ZkOp::delete("/brokers/topics/t000", -1), 1, 0)
        .expect("delete");
    sim.set_leader(Some(3001), 2);
    // Step until 3001's reconciliation write is under way, then change the metadata.
    let mut published = false;
    for _ in 0..10_000 {
        sim.run_for(Duration::from_millis(1));
        let writing = sim.state(3001) == S::SyncKraftToZk
            && matches!(
                sim.zk_requests.last(),
                Some((_, 3001, ZkRequest::Write { .. }))
            );
        if writing {
            sim.create_topic("during-sync", &[0]);
            published = true;
            break;
        }
    }
    assert!(published, "never saw the reconciliation write");
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(3001), S::DualWrite);
    assert!(
        sim.zk_topics().contains("t000"),
        "repaired by the reconciliation"
    );
    assert!(
        sim.zk_topics().contains("during-sync"),
        "published during the write"
    );
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset
    );
}

#[test]
fn a_migration_write_after_the_new_leaders_read_is_learned_by_the_rewrite_kafka_16667() {
    let options = SimOptions {
        zk_delay: Duration::from_millis(10),
        ..SimOptions::default()
    };
    let mut sim = ready_cluster(options, 3);
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);

    sim.set_leader(Some(3001), 2);
    // Wait until 3001 has read /migration and is reading /controller to claim it.
    let mut bumped = false;
    for _ in 0..10_000 {
        sim.run_for(Duration::from_millis(1));
        if matches!(
            sim.zk_requests.last(),
            Some((_, 3001, ZkRequest::Get { .. }))
        ) {
            // The previous controller's last write lands now: 3001's /migration version is stale.
            let (data, _) = sim.zk.get(MIGRATION_PATH).expect("exists");
            let data = data.to_vec();
            sim.zk
                .apply(&ZkOp::set_data(MIGRATION_PATH, data, -1), 1, 0)
                .expect("late write");
            bumped = true;
            break;
        }
    }
    assert!(bumped);
    sim.run_for(Duration::from_secs(3));
    sim.create_topic("after-failover", &[0]);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.state(3001), S::DualWrite);
    assert!(sim.zk_topics().contains("after-failover"));
    assert!(
        sim.failed_zk_writes.is_empty(),
        "no fenced write failed: {:?}",
        sim.failed_zk_writes
    );
    assert_eq!(
        sim.driver(3001).leadership().migration_zk_version,
        sim.zk.get(MIGRATION_PATH).expect("exists").1.version
    );
}

#[test]
fn before_metadata_transactions_the_copy_has_no_transaction_markers() {
    use krust_metadata::MetadataVersion;
    // 3.5-IV2: migration supported, no controller registrations (the quorum gate passes), no
    // metadata transactions (the copy is appended without Begin/End).
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    sim.zk_cluster(&[0, 1], &[("a", vec![0, 1])]);
    sim.bootstrap_at(
        MetadataVersion::IBP_3_5_IV2,
        Some(ZkMigrationState::PreMigration),
        &[0, 1],
    );
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::DualWrite);
    let types: Vec<&str> = sim
        .appends
        .iter()
        .flat_map(|(_, _, records)| records.iter().map(|r| r.record.record_type().name()))
        .collect();
    assert_eq!(
        types,
        vec![
            "TOPIC_RECORD",
            "PARTITION_RECORD",
            "ZK_MIGRATION_STATE_RECORD"
        ]
    );

    // Below 3.4-IV0 the quorum is never ready.
    let mut sim = driver_harness::Sim::new(SimOptions::default());
    sim.zk_cluster(&[0], &[("a", vec![0])]);
    sim.bootstrap_at(
        MetadataVersion::IBP_3_3_IV3,
        Some(ZkMigrationState::PreMigration),
        &[0],
    );
    sim.set_leader(Some(LEADER), 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.state(LEADER), S::WaitForControllerQuorum);
    assert_eq!(
        sim.driver(LEADER).status().waiting_for,
        Some(WaitReason::ControllerQuorum(
            QuorumNotReady::MetadataVersionTooLow(MetadataVersion::IBP_3_3_IV3)
        ))
    );
}
