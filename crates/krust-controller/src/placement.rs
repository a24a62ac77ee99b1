//! Striped, rack-aware replica placement (Kafka 3.9 `StripedReplicaPlacer`).
//!
//! The goals, in Kafka's order: spread replicas evenly over racks, then over the brokers of
//! each rack; never make a fenced broker the leader (the first replica), and only use fenced
//! brokers when there are not enough unfenced ones; vary the placement from one partition to
//! the next so leaders spread too.
//!
//! How: racks are listed in sorted order (no rack sorts first) and brokers of each rack in id
//! order, each list starting at a random offset. Partition `p` takes its leader from the next
//! rack (round robin) that has an unfenced broker left in this round, then walks the racks from
//! that point taking one broker per rack (unfenced before fenced) until it has enough. After as
//! many partitions as there are unfenced brokers, the rack order and every broker list are
//! shuffled, so the same assignment does not repeat. One deliberate difference from Kafka:
//! that shuffle puts the least-used racks/brokers first (random among equals), so replica
//! counts within a rack, and leader counts between racks, stay within one of each other;
//! Kafka's plain shuffle lets them drift apart.
//!
//! Randomness comes from the caller's seeded [`StdRng`]: the same seed and cluster give the
//! same placement. (Kafka's `java.util.Random` draws differ, so the exact assignment differs
//! from Kafka's; the properties above do not.)

use std::collections::BTreeMap;

use rand::Rng;
use rand::rngs::StdRng;

use crate::error::ControllerError;

/// A broker that may receive replicas: registered and not in controlled shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    /// Broker id.
    pub id: i32,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
    /// Fenced brokers never lead a new partition and follow only when needed.
    pub fenced: bool,
}

/// The striped placer. Keeps only its rng between calls; every call sees the cluster afresh.
#[derive(Debug)]
pub struct StripedReplicaPlacer {
    rng: StdRng,
}

impl StripedReplicaPlacer {
    /// A placer drawing from `rng` (seeded by the caller so runs can be replayed).
    #[must_use]
    pub fn new(rng: StdRng) -> Self {
        Self { rng }
    }

    /// Replica lists for `num_partitions` partitions of `replication_factor` replicas each;
    /// the first replica of each list is the preferred leader.
    ///
    /// # Errors
    /// `INVALID_REPLICATION_FACTOR`: [`ControllerError::NonPositiveReplicationFactor`] when
    /// `replication_factor <= 0`, [`ControllerError::AllBrokersFenced`] when no usable broker is
    /// unfenced, [`ControllerError::TooFewBrokers`] when `replication_factor` exceeds the usable
    /// brokers (checked in that order, as Kafka does).
    pub fn place(
        &mut self,
        num_partitions: usize,
        replication_factor: i32,
        brokers: &[UsableBroker],
    ) -> Result<Vec<Vec<i32>>, ControllerError> {
        let mut racks = RackList::new(&mut self.rng, brokers);
        if replication_factor <= 0 {
            return Err(ControllerError::NonPositiveReplicationFactor { replication_factor });
        }
        if racks.num_unfenced == 0 {
            return Err(ControllerError::AllBrokersFenced);
        }
        let replicas = usize::try_from(replication_factor).unwrap_or(usize::MAX);
        if replicas > racks.num_total {
            return Err(ControllerError::TooFewBrokers {
                replication_factor,
                registered: racks.num_total,
            });
        }
        let placements: Vec<Vec<i32>> = (0..num_partitions)
            .map(|_| racks.place(&mut self.rng, replicas))
            .collect();
        for replicas_of_partition in &placements {
            check_placement(replicas_of_partition, replicas, brokers);
        }
        Ok(placements)
    }
}

/// The invariants of every placement (a bug if broken, whatever the input).
fn check_placement(placed: &[i32], replication_factor: usize, brokers: &[UsableBroker]) {
    assert_eq!(placed.len(), replication_factor, "wrong replica count");
    let mut seen = placed.to_vec();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen.len(),
        placed.len(),
        "a broker placed twice: {placed:?}"
    );
    let leader = brokers.iter().find(|b| b.id == placed[0]);
    assert!(
        leader.is_some_and(|b| !b.fenced),
        "leader {} is not an unfenced usable broker",
        placed[0]
    );
}

/// Brokers of one kind (fenced or unfenced) in one rack, iterated from an offset that moves
/// by one every round.
#[derive(Debug, Default)]
struct BrokerList {
    brokers: Vec<i32>,
    /// How many were handed out in the current round.
    index: usize,
    /// Added (mod len) to `index` to pick the broker.
    offset: usize,
    /// The round `index` counts for.
    round: u64,
}

impl BrokerList {
    fn initialize(&mut self, rng: &mut StdRng) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = rng.gen_range(0..self.brokers.len());
        }
    }

    /// The next broker of `round`, or `None` once every broker was handed out in it.
    fn next(&mut self, round: u64) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.round != round {
            self.round = round;
            self.index = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.index >= self.brokers.len() {
            return None;
        }
        let broker = self.brokers[(self.index + self.offset) % self.brokers.len()];
        self.index += 1;
        Some(broker)
    }
}

#[derive(Debug, Default)]
struct Rack {
    fenced: BrokerList,
    unfenced: BrokerList,
}

impl Rack {
    /// Unfenced brokers first, then fenced ones.
    fn next(&mut self, round: u64) -> Option<i32> {
        self.unfenced
            .next(round)
            .or_else(|| self.fenced.next(round))
    }
}

#[derive(Debug)]
struct RackList {
    /// Rack names in iteration order (sorted, no-rack first; reshuffled every full round).
    names: Vec<Option<String>>,
    racks: BTreeMap<Option<String>, Rack>,
    num_total: usize,
    num_unfenced: usize,
    /// Placement round. Kafka resets its counter to 0 on each shuffle; a round number that
    /// only grows means every broker list starts afresh each partition, which Kafka's reset
    /// can miss for a list untouched since round 0.
    round: u64,
    /// Partitions placed since the last shuffle.
    placed_since_shuffle: usize,
    /// Which rack the next partition starts from.
    offset: usize,
    /// Partitions led from each rack so far (this call).
    leaders_per_rack: BTreeMap<Option<String>, usize>,
    /// Replicas placed on each broker so far (this call).
    replicas_per_broker: BTreeMap<i32, usize>,
    /// Partitions led by each broker so far (this call).
    leaders_per_broker: BTreeMap<i32, usize>,
}

impl RackList {
    fn new(rng: &mut StdRng, brokers: &[UsableBroker]) -> Self {
        let mut racks: BTreeMap<Option<String>, Rack> = BTreeMap::new();
        let mut num_unfenced = 0;
        for broker in brokers {
            let rack = racks.entry(broker.rack.clone()).or_default();
            if broker.fenced {
                rack.fenced.brokers.push(broker.id);
            } else {
                num_unfenced += 1;
                rack.unfenced.brokers.push(broker.id);
            }
        }
        for rack in racks.values_mut() {
            rack.fenced.initialize(rng);
            rack.unfenced.initialize(rng);
        }
        // BTreeMap keys are already sorted with `None` first, like Kafka's comparator.
        let names: Vec<Option<String>> = racks.keys().cloned().collect();
        let offset = if names.is_empty() {
            0
        } else {
            rng.gen_range(0..names.len())
        };
        Self {
            names,
            racks,
            num_total: brokers.len(),
            num_unfenced,
            round: 0,
            placed_since_shuffle: 0,
            offset,
            leaders_per_rack: BTreeMap::new(),
            replicas_per_broker: BTreeMap::new(),
            leaders_per_broker: BTreeMap::new(),
        }
    }

    fn rack_at(&mut self, index: usize) -> &mut Rack {
        let name = &self.names[index];
        self.racks
            .get_mut(name)
            .expect("every name in `names` is a key of `racks` (built together)")
    }

    /// One partition's replicas. The caller has checked `1 <= replication_factor <= num_total`
    /// and `num_unfenced >= 1`, which bounds both loops.
    fn place(&mut self, rng: &mut StdRng, replication_factor: usize) -> Vec<i32> {
        assert!(replication_factor >= 1 && replication_factor <= self.num_total);
        assert!(self.num_unfenced >= 1);
        // After as many partitions as unfenced brokers, shuffle so the pattern does not repeat
        // (not with a single unfenced broker: there is nothing to vary).
        if self.placed_since_shuffle == self.num_unfenced && self.num_unfenced > 1 {
            self.shuffle(rng);
        }
        let round = self.round;
        let rack_count = self.names.len();
        if self.offset >= rack_count {
            self.offset = 0;
        }
        let mut placed = Vec::with_capacity(replication_factor);
        // The leader: the first rack from `offset` with an unfenced broker left this round.
        // Every list starts afresh in a new round, so one pass over the racks finds one.
        let mut first_rack = self.offset;
        let mut visited = 0;
        loop {
            assert!(
                visited < rack_count,
                "no unfenced broker found in a fresh round"
            );
            if let Some(leader) = self.rack_at(first_rack).unfenced.next(round) {
                placed.push(leader);
                break;
            }
            visited += 1;
            first_rack = (first_rack + 1) % rack_count;
        }
        // Followers: one per rack from `offset`, skipping the leader's rack on the first pass
        // (its leader was that rack's pick). Each rack hands out all its brokers once per
        // round, and there are at least `replication_factor` brokers, so this ends within
        // `num_total + 1` passes over the racks.
        let mut skip_rack = Some(first_rack);
        let mut rack_index = self.offset;
        let mut steps = 0;
        while placed.len() < replication_factor {
            assert!(
                steps <= (self.num_total + 1) * rack_count,
                "follower search did not end"
            );
            steps += 1;
            let current = rack_index;
            rack_index = (rack_index + 1) % rack_count;
            if skip_rack == Some(current) {
                skip_rack = None;
                continue;
            }
            if let Some(follower) = self.rack_at(current).next(round) {
                placed.push(follower);
            }
        }
        self.round += 1;
        self.placed_since_shuffle += 1;
        self.offset += 1;
        let leader_rack = self.names[first_rack].clone();
        *self.leaders_per_rack.entry(leader_rack).or_default() += 1;
        *self.leaders_per_broker.entry(placed[0]).or_default() += 1;
        for &broker in &placed {
            *self.replicas_per_broker.entry(broker).or_default() += 1;
        }
        placed
    }

    /// Kafka shuffles the rack order and every broker list at random here. A plain shuffle
    /// lets counts drift apart like a random walk (±10 replicas per 100 partitions on uneven
    /// racks), so krust shuffles with a balance-preserving key: least-used first, random among
    /// equals. Striping then continues round robin from the least used, which keeps replica
    /// counts within a rack, and leader counts between racks, within one of each other while
    /// still varying which brokers end up together.
    fn shuffle(&mut self, rng: &mut StdRng) {
        let mut keyed: Vec<(usize, u64, Option<String>)> = self
            .names
            .drain(..)
            .map(|name| {
                let led = self.leaders_per_rack.get(&name).copied().unwrap_or(0);
                (led, rng.r#gen(), name)
            })
            .collect();
        keyed.sort();
        self.names = keyed.into_iter().map(|(_, _, name)| name).collect();
        self.offset = 0;
        for rack in self.racks.values_mut() {
            for list in [&mut rack.unfenced, &mut rack.fenced] {
                let mut keyed: Vec<(usize, usize, u64, i32)> = list
                    .brokers
                    .iter()
                    .map(|&b| {
                        let used = self.replicas_per_broker.get(&b).copied().unwrap_or(0);
                        let led = self.leaders_per_broker.get(&b).copied().unwrap_or(0);
                        (used, led, rng.r#gen(), b)
                    })
                    .collect();
                keyed.sort_unstable();
                list.brokers = keyed.into_iter().map(|(_, _, _, b)| b).collect();
                // The next round adds one to the offset: start it at the least used.
                list.offset = list.brokers.len().saturating_sub(1);
            }
        }
        self.placed_since_shuffle = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;
    use rand::SeedableRng;

    use super::*;

    fn broker(id: i32, rack: Option<&str>, fenced: bool) -> UsableBroker {
        UsableBroker {
            id,
            rack: rack.map(str::to_owned),
            fenced,
        }
    }

    fn placer(seed: u64) -> StripedReplicaPlacer {
        StripedReplicaPlacer::new(StdRng::seed_from_u64(seed))
    }

    fn rack_of(brokers: &[UsableBroker], id: i32) -> Option<String> {
        brokers
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.rack.clone())
    }

    /// 5 brokers in 3 racks (a: 0,1; b: 2,3; c: 4), RF 3, 100 partitions, 50 seeds. With
    /// uneven racks, one replica per rack means broker 4 holds a replica of every partition,
    /// so "counts differ by at most one" holds within each rack, not cluster-wide. Leaders:
    /// racks lead within one of each other; inside a rack the leader share follows the
    /// striping (it shares the rotation with follower picks), so it is only bounded (each of
    /// the ~33 partitions a rack leads goes at least 12 to each of its brokers).
    #[test]
    fn spreads_replicas_and_leaders_over_racks_and_brokers() {
        let brokers = vec![
            broker(0, Some("a"), false),
            broker(1, Some("a"), false),
            broker(2, Some("b"), false),
            broker(3, Some("b"), false),
            broker(4, Some("c"), false),
        ];
        for seed in 0..50 {
            let placements = placer(seed)
                .place(100, 3, &brokers)
                .expect("enough unfenced brokers");
            assert_eq!(placements.len(), 100);
            let mut replicas: BTreeMap<i32, usize> = BTreeMap::new();
            let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
            let mut rack_leaders: BTreeMap<Option<String>, usize> = BTreeMap::new();
            for partition in &placements {
                let racks: BTreeSet<_> = partition.iter().map(|&b| rack_of(&brokers, b)).collect();
                assert_eq!(
                    racks.len(),
                    3,
                    "seed {seed}: two replicas share a rack: {partition:?}"
                );
                for &b in partition {
                    *replicas.entry(b).or_default() += 1;
                }
                *leaders.entry(partition[0]).or_default() += 1;
                *rack_leaders
                    .entry(rack_of(&brokers, partition[0]))
                    .or_default() += 1;
            }
            assert_eq!(replicas[&4], 100, "seed {seed}: rack c's only broker");
            for pair in [(0, 1), (2, 3)] {
                let (x, y) = (replicas[&pair.0], replicas[&pair.1]);
                assert!(x.abs_diff(y) <= 1, "seed {seed}: replicas {replicas:?}");
            }
            let rack_counts: Vec<usize> = rack_leaders.values().copied().collect();
            let (min, max) = (
                rack_counts.iter().min().copied().unwrap_or(0),
                rack_counts.iter().max().copied().unwrap_or(0),
            );
            assert!(
                max - min <= 1,
                "seed {seed}: leaders per rack {rack_leaders:?}"
            );
            for pair in [(0, 1), (2, 3)] {
                let (x, y) = (
                    leaders.get(&pair.0).copied().unwrap_or(0),
                    leaders.get(&pair.1).copied().unwrap_or(0),
                );
                assert!(x.abs_diff(y) <= 8, "seed {seed}: leaders {leaders:?}");
                assert!(x.min(y) >= 12, "seed {seed}: leaders {leaders:?}");
            }
        }
    }

    /// Without racks every broker is in one "rack": replicas and leaders spread evenly.
    #[test]
    fn without_racks_every_broker_gets_the_same_share() {
        let brokers: Vec<_> = (0..5).map(|id| broker(id, None, false)).collect();
        for seed in 0..50 {
            let placements = placer(seed).place(100, 3, &brokers).expect("placed");
            let mut replicas = [0usize; 5];
            let mut leaders = [0usize; 5];
            for partition in &placements {
                leaders[partition[0] as usize] += 1;
                for &b in partition {
                    replicas[b as usize] += 1;
                }
            }
            let spread = |c: &[usize]| c.iter().max().unwrap_or(&0) - c.iter().min().unwrap_or(&0);
            assert!(spread(&replicas) <= 1, "seed {seed}: {replicas:?}");
            assert!(spread(&leaders) <= 1, "seed {seed}: {leaders:?}");
        }
    }

    #[test]
    fn same_seed_same_placement() {
        let brokers: Vec<_> = (0..6)
            .map(|id| broker(id, Some(["x", "y"][id as usize % 2]), id == 5))
            .collect();
        let a = placer(7).place(20, 3, &brokers).expect("placed");
        let b = placer(7).place(20, 3, &brokers).expect("placed");
        assert_eq!(a, b);
    }

    #[test]
    fn fenced_brokers_fill_in_but_never_lead() {
        let brokers = vec![
            broker(0, None, false),
            broker(1, None, true),
            broker(2, None, true),
        ];
        let placements = placer(1).place(10, 3, &brokers).expect("placed");
        for partition in placements {
            assert_eq!(partition[0], 0, "only the unfenced broker may lead");
        }
        let placements = placer(1).place(10, 1, &brokers).expect("placed");
        assert!(
            placements.iter().all(|p| p == &vec![0]),
            "RF 1 needs no fenced broker"
        );
    }

    #[test]
    fn refuses_bad_replication_factors_with_kafkas_errors() {
        let two = vec![broker(0, None, false), broker(1, None, true)];
        let cases: [(&str, i32, &[UsableBroker], ControllerError); 5] = [
            (
                "zero replicas",
                0,
                &two,
                ControllerError::NonPositiveReplicationFactor {
                    replication_factor: 0,
                },
            ),
            (
                "negative",
                -1,
                &two,
                ControllerError::NonPositiveReplicationFactor {
                    replication_factor: -1,
                },
            ),
            (
                "more replicas than brokers",
                3,
                &two,
                ControllerError::TooFewBrokers {
                    replication_factor: 3,
                    registered: 2,
                },
            ),
            (
                "all fenced",
                1,
                &[UsableBroker {
                    id: 0,
                    rack: None,
                    fenced: true,
                }],
                ControllerError::AllBrokersFenced,
            ),
            (
                "no brokers at all",
                1,
                &[],
                ControllerError::AllBrokersFenced,
            ),
        ];
        for (why, rf, brokers, expected) in cases {
            let got = placer(0).place(1, rf, brokers).expect_err(why);
            assert_eq!(got, expected, "{why}");
            assert_eq!(got.code(), 38, "{why}: INVALID_REPLICATION_FACTOR");
        }
    }

    #[test]
    fn zero_partitions_place_nothing() {
        let brokers = vec![broker(0, None, false)];
        assert_eq!(placer(0).place(0, 1, &brokers), Ok(Vec::new()));
    }

    #[test]
    fn single_unfenced_broker_keeps_placing() {
        let brokers = vec![broker(9, Some("r"), false)];
        let placements = placer(3).place(50, 1, &brokers).expect("placed");
        assert!(placements.iter().all(|p| p == &vec![9]));
    }

    fn cluster() -> impl Strategy<Value = Vec<UsableBroker>> {
        prop::collection::vec((0..4usize, any::<bool>()), 1..10).prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (rack, fenced))| UsableBroker {
                    id: i32::try_from(i).unwrap_or(0) * 3 + 1,
                    rack: [None, Some("r1"), Some("r2"), Some("r3")][rack].map(str::to_owned),
                    fenced,
                })
                .collect()
        })
    }

    proptest! {
        /// Any cluster, RF and seed: either Kafka's error, or every partition has RF distinct
        /// usable brokers, an unfenced leader, distinct racks while there are enough racks,
        /// and a fenced broker only once every unfenced broker of its rack is in.
        #[test]
        fn every_placement_is_valid(
            brokers in cluster(),
            rf in -1i32..12,
            partitions in 0usize..40,
            seed in any::<u64>(),
        ) {
            let unfenced = brokers.iter().filter(|b| !b.fenced).count();
            let result = placer(seed).place(partitions, rf, &brokers);
            let rf_usize = usize::try_from(rf).unwrap_or(0);
            if rf <= 0 || unfenced == 0 || rf_usize > brokers.len() {
                prop_assert!(result.is_err());
                return Ok(());
            }
            let placements = result.expect("valid request");
            prop_assert_eq!(placements.len(), partitions);
            let rack_count = brokers.iter().map(|b| b.rack.clone()).collect::<BTreeSet<_>>().len();
            for partition in placements {
                prop_assert_eq!(partition.len(), rf_usize);
                let distinct: BTreeSet<_> = partition.iter().collect();
                prop_assert_eq!(distinct.len(), rf_usize);
                let find = |id: i32| brokers.iter().find(|b| b.id == id).expect("usable broker");
                prop_assert!(!find(partition[0]).fenced);
                let racks: BTreeSet<_> = partition.iter().map(|&b| find(b).rack.clone()).collect();
                prop_assert_eq!(racks.len(), rf_usize.min(rack_count));
                for &b in &partition {
                    let placed = find(b);
                    if placed.fenced {
                        let all_unfenced_in = brokers
                            .iter()
                            .filter(|o| o.rack == placed.rack && !o.fenced)
                            .all(|o| partition.contains(&o.id));
                        prop_assert!(all_unfenced_in, "fenced {} used too early: {:?}", b, partition);
                    }
                }
            }
        }
    }
}
