//! Whole-cluster simulations. Each test opens with what it checks; every seed is independent.
//!
//! Rerun one seed: `KRUST_SIM_SEED=n cargo test -p krust-raft <test name>`.
//! Run more seeds: `KRUST_SIM_SEEDS=N cargo test -p krust-raft sim::` (N per test).

use super::*;

/// Runs `count` seeds from `base` with swarm options; panics with the rerun line on failure.
fn run_swarm(test: &str, base: u64, count: u64, voters: usize, observers: usize) -> Vec<SimStats> {
    let mut all: Vec<SimStats> = Vec::new();
    for seed in seeds(base, count) {
        let config = SimConfig::swarm(seed, voters, observers);
        println!("seed {seed}: {config:?}");
        let mut cluster = SimCluster::new(seed, config.clone());
        match cluster.run() {
            Ok(stats) => all.push(stats),
            Err(failure) => {
                panic!(
                    "{failure}\noptions: {config:?}\nrerun: KRUST_SIM_SEED={seed} cargo test -p krust-raft {test}"
                )
            }
        }
    }
    let max = |f: fn(&SimStats) -> u64| all.iter().map(f).max().unwrap_or(0);
    let sum = |f: fn(&SimStats) -> u64| all.iter().map(f).sum::<u64>();
    println!(
        "{test}: {} seeds, {} events, {} crashes, {} messages dropped, {} snapshots installed by download, max epoch {}, longest recovery after healing {} ms",
        all.len(),
        sum(|s| s.events),
        sum(|s| s.crashes),
        sum(|s| s.dropped),
        sum(|s| s.snapshots_installed),
        max(|s| u64::try_from(s.max_epoch).unwrap_or(0)),
        max(|s| s.recovery_us) / 1000,
    );
    all
}

/// Three voters, two observers; drops, duplicates, reordering, partitions, crashes (also in the
/// middle of a node's action drain), flush delays and clock skew, then healing.
#[test]
fn three_voters_stay_safe_and_recover_under_faults() {
    let stats = run_swarm(
        "three_voters_stay_safe_and_recover_under_faults",
        0,
        700,
        3,
        2,
    );
    assert!(stats.iter().all(|s| s.committed_end > 0));
}

/// Five voters, one observer, same fault mix.
#[test]
fn five_voters_stay_safe_and_recover_under_faults() {
    let stats = run_swarm(
        "five_voters_stay_safe_and_recover_under_faults",
        1_000_000,
        500,
        5,
        1,
    );
    assert!(stats.iter().all(|s| s.committed_end > 0));
}

/// A lone voter elects itself at once and commits on its own flushes; an observer follows.
#[test]
fn single_voter_commits_alone() {
    for seed in seeds(2_000_000, 50) {
        let config = SimConfig::swarm(seed, 1, 1);
        let mut cluster = SimCluster::new(seed, config.clone());
        if let Err(failure) = cluster.run() {
            panic!(
                "{failure}\noptions: {config:?}\nrerun: KRUST_SIM_SEED={seed} cargo test -p krust-raft single_voter_commits_alone"
            );
        }
    }
}

/// Without faults the first election produces one leader that keeps its epoch, and every
/// node (observers too) reaches the same high watermark.
#[test]
fn calm_cluster_elects_once_and_replicates_everywhere() {
    for seed in seeds(3_000_000, 100) {
        let mut cluster = SimCluster::new(seed, SimConfig::calm(3, 2));
        let stats = cluster.run().unwrap_or_else(|f| {
            panic!("{f}\nrerun: KRUST_SIM_SEED={seed} cargo test -p krust-raft calm_cluster")
        });
        assert!(
            stats.max_epoch <= 3,
            "seed {seed}: {stats:?}: calm clusters should not churn epochs"
        );
        assert_eq!(stats.crashes, 0);
    }
}

/// The same seed replays to the same result (determinism is what makes failures debuggable).
#[test]
fn a_seed_replays_exactly() {
    for seed in [7, 8, 9] {
        let config = SimConfig::swarm(seed, 3, 1);
        let a = SimCluster::new(seed, config.clone())
            .run()
            .map_err(|f| f.to_string());
        let b = SimCluster::new(seed, config)
            .run()
            .map_err(|f| f.to_string());
        assert_eq!(a, b, "seed {seed} is not deterministic");
    }
}

#[test]
#[ignore = "diagnostic: prints per-seed statistics"]
fn print_stats() {
    for seed in seeds(0, 10) {
        let config = SimConfig::swarm(seed, 3, 2);
        let r = SimCluster::new(seed, config.clone()).run();
        println!("seed {seed}: {r:?}");
    }
}
