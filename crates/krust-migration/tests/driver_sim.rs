//! A seeded random walk over the migration: random KRaft leader changes (and leaderless gaps),
//! ZooKeeper outages, delayed ZooKeeper replies (requests executed on arrival, so a deposed
//! leader's writes still reach ZooKeeper), delayed commits, late broker registrations, topic
//! creations and deletions, and a stranger bumping `/migration`. The harness checks after every
//! event that only the controller registered in `/controller` lands ZooKeeper writes, that
//! every write is fenced by `/controller_epoch` and `/migration`, that `/migration`'s offset
//! never goes back, and that no driver dual-writes before the copy's transaction committed.
//! Then the faults heal and the run must converge: the leader dual-writing and ZooKeeper
//! holding exactly the image's topics at the image's offset.
//!
//! `KRUST_SIM_SEED=n` reruns one seed; `KRUST_SIM_SEEDS=n` runs n seeds (default 40).

mod driver_harness;

use std::time::Duration;

use driver_harness::{Sim, SimOptions, VOTERS};
use krust_metadata::image::features::ZkMigrationState;
use krust_migration::driver::WaitReason;
use krust_migration::state::{MIGRATION_PATH, MigrationDriverState as S};
use krust_zk::ops::ZkOp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const STEPS: usize = 300;

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("KRUST_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("KRUST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    (0..n).collect()
}

/// How one seed ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Converged,
    /// Kafka's own hole: the copy's transaction committed but the leader changed before it
    /// wrote the copy's offset to `/migration`; the next leader refuses to continue (facts
    /// §6.4, MIGRATION without a completed copy in ZooKeeper).
    StuckMigrationWithoutZkOffset,
}

fn run(seed: u64) -> Outcome {
    let mut rng = StdRng::seed_from_u64(seed);
    let options = SimOptions {
        zk_delay: Duration::from_millis(rng.gen_range(0..40)),
        commit_delay: Duration::from_millis(rng.gen_range(0..150)),
        zk_execute_on_delivery: true,
        ..SimOptions::default()
    };
    eprintln!("seed {seed}: {options:?}");
    let mut sim = Sim::new(options);
    let topics: Vec<(String, Vec<i32>)> = (0..rng.gen_range(1..60))
        .map(|i| (format!("t{i}"), vec![i % 4, (i + 1) % 4]))
        .collect();
    let refs: Vec<(&str, Vec<i32>)> = topics
        .iter()
        .map(|(n, r)| (n.as_str(), r.clone()))
        .collect();
    sim.zk_cluster(&[0, 1, 2, 3], &refs);
    // Brokers 2 and 3 register later.
    sim.bootstrap(Some(ZkMigrationState::PreMigration), &[0, 1]);
    let mut epoch = 0;
    let mut unregistered = vec![2, 3];
    let mut created = 0;

    for _ in 0..STEPS {
        match rng.gen_range(0..100) {
            0..=9 => {
                epoch += 1;
                let leader = if rng.gen_bool(0.15) {
                    None
                } else {
                    Some(VOTERS[rng.gen_range(0..VOTERS.len())])
                };
                sim.set_leader(leader, epoch);
            }
            10..=14 => sim.zk_down = !sim.zk_down,
            15..=19 => {
                if let Some(b) = unregistered.pop() {
                    sim.register_broker(b);
                }
            }
            20..=34 => {
                if sim.leader.leader_id.is_some()
                    && sim.image.features.zk_migration_state == ZkMigrationState::Migration
                {
                    created += 1;
                    sim.create_topic(&format!("new{created}"), &[0, 1]);
                }
            }
            35..=39 => {
                let name = sim.image.topics.by_name.keys().next().cloned();
                if let Some(name) = name
                    && sim.leader.leader_id.is_some()
                    && sim.image.features.zk_migration_state == ZkMigrationState::Migration
                {
                    sim.delete_topic(&name);
                }
            }
            40..=41 => {
                if !sim.zk_down
                    && let Ok((data, _)) = sim.zk.get(MIGRATION_PATH)
                {
                    let data = data.to_vec();
                    sim.zk
                        .apply(&ZkOp::set_data(MIGRATION_PATH, data, -1), 9, 0)
                        .expect("bump");
                }
            }
            _ => {
                let ms = rng.gen_range(1..3_000);
                sim.run_for(Duration::from_millis(ms));
            }
        }
        sim.run_for(Duration::ZERO);
    }

    // ZooKeeper back, same leader: dual-write alone (no new reconciliation) must catch up.
    sim.zk_down = false;
    sim.run_for(Duration::from_secs(120));
    if let Some(leader) = sim.leader.leader_id
        && sim.state(leader) == S::DualWrite
    {
        let image_topics: std::collections::BTreeSet<String> =
            sim.image.topics.by_name.keys().cloned().collect();
        assert_eq!(
            sim.zk_topics(),
            image_topics,
            "seed {seed}: dual-write caught up"
        );
        assert_eq!(
            sim.zk_migration().kraft_metadata_offset,
            sim.image.provenance.last_contained_offset,
            "seed {seed}: /migration caught up: {:#?}\n{}",
            sim.driver(leader).status(),
            sim.log.join("\n")
        );
    }

    // Heal: every broker registered, one new stable leader.
    for b in unregistered {
        sim.register_broker(b);
    }
    epoch += 1;
    let leader = VOTERS[rng.gen_range(0..VOTERS.len())];
    sim.set_leader(Some(leader), epoch);
    sim.run_for(Duration::from_secs(600));

    assert!(
        sim.aborts.is_empty(),
        "seed {seed}: aborted copies {:?}",
        sim.aborts
    );
    let status = sim.driver(leader).status();
    if status.state == S::Inactive
        && status.waiting_for
            == Some(WaitReason::MigrationNotAllowed {
                zk_migration_state: ZkMigrationState::Migration,
            })
    {
        return Outcome::StuckMigrationWithoutZkOffset;
    }
    assert_eq!(
        status.state,
        S::DualWrite,
        "seed {seed}: did not converge: {status:#?}\n{}",
        sim.log.join("\n")
    );
    // One more change after healing reaches ZooKeeper too.
    sim.create_topic("final", &[0]);
    sim.run_for(Duration::from_secs(5));
    let image_topics: std::collections::BTreeSet<String> =
        sim.image.topics.by_name.keys().cloned().collect();
    assert_eq!(
        sim.zk_topics(),
        image_topics,
        "seed {seed}: ZooKeeper matches the image"
    );
    assert_eq!(
        sim.zk_migration().kraft_metadata_offset,
        sim.image.provenance.last_contained_offset,
        "seed {seed}"
    );
    assert_eq!(sim.zk_controller().broker_id, leader, "seed {seed}");
    assert_eq!(
        sim.zk_controller().kraft_controller_epoch,
        Some(epoch),
        "seed {seed}"
    );
    // Every ZooKeeper topic came from the copy or a later KRaft change, exactly once.
    assert_eq!(
        sim.image.topics.by_name.len(),
        sim.image.topics.by_id.len(),
        "seed {seed}"
    );
    Outcome::Converged
}

#[test]
fn random_leader_changes_outages_and_delays_keep_zookeeper_fenced_and_converge() {
    let mut stuck = Vec::new();
    for seed in seeds() {
        let outcome = std::panic::catch_unwind(|| run(seed)).unwrap_or_else(|e| {
            eprintln!(
                "rerun: KRUST_SIM_SEED={seed} cargo test -p krust-migration --test driver_sim"
            );
            std::panic::resume_unwind(e)
        });
        if outcome == Outcome::StuckMigrationWithoutZkOffset {
            stuck.push(seed);
        }
    }
    // Kafka 3.9 stays INACTIVE for good when the log holds MIGRATION but `/migration` does not
    // record the copy; krust continues from the log, so no seed may end there.
    assert!(
        stuck.is_empty(),
        "seeds stuck with MIGRATION in the log but no copy in /migration: {stuck:?}"
    );
}
