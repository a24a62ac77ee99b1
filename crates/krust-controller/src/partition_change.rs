//! One partition's next state as a `PartitionChangeRecord` (Kafka 3.9 `PartitionChangeBuilder`,
//! without ELR): leader election from the target ISR, the unclean fallback, the ISR change,
//! partition reassignment (KIP-455: target replicas with adding/removing replicas, completed
//! once the ISR holds every target replica), the leader epoch bump rules, and replica directory
//! assignments (KIP-858, from metadata.version 3.7-IV2).
//!
//! Epochs are not written here: replaying a `PartitionChangeRecord` bumps the partition epoch,
//! and bumps the leader epoch whenever the record's `Leader` field is set (facts §3.3). So a
//! record sets `Leader` when the leader changes, and — below metadata.version 3.6-IV0
//! (`isLeaderEpochBumpRequiredOnIsrShrink`) — to the same leader when the ISR shrinks.

use krust_metadata::image::topics::{LeaderRecoveryState, PartitionRegistration};
use krust_metadata::records::{MetadataRecord, NO_LEADER_CHANGE, PartitionChangeRecord};
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use uuid::Uuid;

/// No leader (`LeaderId` -1).
pub const NO_LEADER: i32 = -1;

/// How a leader may be chosen (Kafka's `PartitionChangeBuilder.Election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// The first replica if it is a valid leader, else the current leader, else any ISR member.
    Preferred,
    /// Keep a valid current leader, else any valid ISR member (the default).
    Online,
    /// As `Online`, then any acceptable replica even outside the ISR (may lose data).
    Unclean,
}

/// Builds the change of one partition.
pub struct PartitionChangeBuilder<'a> {
    partition: &'a PartitionRegistration,
    topic_id: Uuid,
    partition_id: i32,
    is_acceptable_leader: &'a dyn Fn(i32) -> bool,
    metadata_version: MetadataVersion,
    election: Election,
    target_isr: Vec<i32>,
    target_leader_recovery_state: LeaderRecoveryState,
    target_replicas: Vec<i32>,
    target_removing: Vec<i32>,
    target_adding: Vec<i32>,
    /// Replicas whose log directory changes (AssignReplicasToDirs), last one wins.
    target_directories: Vec<(i32, Uuid)>,
    /// The log directory of a replica new to the partition.
    default_dir: &'a dyn Fn(i32) -> Uuid,
    /// A ZooKeeper migration may run (Kafka's `zkMigrationEnabled`): every ISR shrink bumps
    /// the leader epoch, as ZooKeeper-mode brokers expect.
    zk_migration: bool,
}

/// A new replica's directory when the caller gives no rule: not known yet.
fn unassigned(_replica: i32) -> Uuid {
    krust_metadata::kafka_uuid::DIRECTORY_ID_UNASSIGNED
}

impl<'a> PartitionChangeBuilder<'a> {
    /// A builder that keeps everything as it is until told otherwise. `is_acceptable_leader`
    /// says whether a broker may lead (unfenced and not shutting down, Kafka's `isActive`).
    #[must_use]
    pub fn new(
        partition: &'a PartitionRegistration,
        topic_id: Uuid,
        partition_id: i32,
        is_acceptable_leader: &'a dyn Fn(i32) -> bool,
        metadata_version: MetadataVersion,
    ) -> Self {
        Self {
            partition,
            topic_id,
            partition_id,
            is_acceptable_leader,
            metadata_version,
            election: Election::Online,
            target_isr: partition.isr.clone(),
            target_leader_recovery_state: partition.leader_recovery_state,
            target_replicas: partition.replicas.clone(),
            target_removing: partition.removing_replicas.clone(),
            target_adding: partition.adding_replicas.clone(),
            target_directories: Vec::new(),
            default_dir: &unassigned,
            zk_migration: false,
        }
    }

    /// Whether ZooKeeper-mode brokers may be registered (Kafka's `zkRegistrationAllowed`):
    /// then every ISR shrink bumps the leader epoch, whatever the metadata.version.
    #[must_use]
    pub fn with_zk_migration(mut self, enabled: bool) -> Self {
        self.zk_migration = enabled;
        self
    }

    /// Assigns `replica` to log directory `directory` (Kafka's `setDirectory`). Written only
    /// at metadata.versions with directory assignment, and only if it changes something.
    #[must_use]
    pub fn with_directory(mut self, replica: i32, directory: Uuid) -> Self {
        self.target_directories.push((replica, directory));
        self
    }

    /// The replica list to move to (a reassignment's full list: target plus removing).
    #[must_use]
    pub fn with_target_replicas(mut self, replicas: Vec<i32>) -> Self {
        self.target_replicas = replicas;
        self
    }

    /// The replicas a reassignment removes.
    #[must_use]
    pub fn with_target_removing(mut self, removing: Vec<i32>) -> Self {
        self.target_removing = removing;
        self
    }

    /// The replicas a reassignment adds.
    #[must_use]
    pub fn with_target_adding(mut self, adding: Vec<i32>) -> Self {
        self.target_adding = adding;
        self
    }

    /// The log directory of a replica new to the partition (Kafka's `DefaultDirProvider`).
    #[must_use]
    pub fn with_default_dir(mut self, default_dir: &'a dyn Fn(i32) -> Uuid) -> Self {
        self.default_dir = default_dir;
        self
    }

    /// Kafka's `completeReassignmentIfNeeded`: once the target ISR holds every replica that
    /// stays (and at least one), the removing replicas leave the replica list and the ISR,
    /// and adding/removing are cleared.
    fn complete_reassignment_if_needed(&mut self) {
        if self.target_removing.is_empty() && self.target_adding.is_empty() {
            return;
        }
        let removing = &self.target_removing;
        let isr: Vec<i32> = self
            .target_isr
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect();
        let replicas: Vec<i32> = self
            .target_replicas
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect();
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_removing.clear();
        self.target_adding.clear();
    }

    /// The directory of `replica` after the change: the one assigned by [`Self::with_directory`],
    /// else its current one, else the default for a replica new to the partition.
    fn directory_of(&self, replica: i32) -> Uuid {
        if let Some((_, assigned)) = self
            .target_directories
            .iter()
            .rev()
            .find(|(r, _)| *r == replica)
        {
            return *assigned;
        }
        self.partition
            .replicas
            .iter()
            .position(|&r| r == replica)
            .and_then(|i| self.partition.directories.get(i).copied())
            .unwrap_or_else(|| (self.default_dir)(replica))
    }

    /// The election kind.
    #[must_use]
    pub fn with_election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    /// The ISR to move to.
    #[must_use]
    pub fn with_target_isr(mut self, isr: Vec<i32>) -> Self {
        self.target_isr = isr;
        self
    }

    /// The leader recovery state to move to (AlterPartition).
    #[must_use]
    pub fn with_target_leader_recovery_state(mut self, state: LeaderRecoveryState) -> Self {
        self.target_leader_recovery_state = state;
        self
    }

    fn is_valid_new_leader(&self, replica: i32) -> bool {
        self.target_isr.contains(&replica) && (self.is_acceptable_leader)(replica)
    }

    /// `(leader, unclean)`.
    fn elect_leader(&self) -> (i32, bool) {
        let replicas = &self.target_replicas;
        let current = self.partition.leader;
        if self.election == Election::Preferred {
            if let Some(&preferred) = replicas.first()
                && self.is_valid_new_leader(preferred)
            {
                return (preferred, false);
            }
            if self.is_valid_new_leader(current) {
                return (current, false);
            }
            return replicas
                .iter()
                .skip(1)
                .find(|&&r| self.is_valid_new_leader(r))
                .map_or((NO_LEADER, false), |&r| (r, false));
        }
        if self.is_valid_new_leader(current) {
            return (current, false);
        }
        if let Some(&r) = replicas.iter().find(|&&r| self.is_valid_new_leader(r)) {
            return (r, false);
        }
        if self.election == Election::Unclean
            && let Some(&r) = replicas.iter().find(|&&r| (self.is_acceptable_leader)(r))
        {
            return (r, true);
        }
        (NO_LEADER, false)
    }

    /// The record, or `None` when nothing would change.
    #[must_use]
    pub fn build(mut self) -> Option<ApiMessageAndVersion> {
        self.complete_reassignment_if_needed();
        let mut record = PartitionChangeRecord {
            topic_id: self.topic_id,
            partition_id: self.partition_id,
            ..PartitionChangeRecord::default()
        };
        let (leader, unclean) = self.elect_leader();
        if leader != self.partition.leader {
            record.leader = leader;
            if unclean {
                // Only the new leader is known to hold what it holds.
                record.isr = Some(vec![leader]);
                if self.partition.leader_recovery_state != LeaderRecoveryState::Recovering
                    && self.metadata_version.is_leader_recovery_supported()
                {
                    record.leader_recovery_state = LeaderRecoveryState::Recovering.value();
                }
            }
        }
        // A replica leaving the partition must be fenced: a new leader epoch.
        if record.leader == NO_LEADER_CHANGE
            && !self
                .partition
                .replicas
                .iter()
                .all(|r| self.target_replicas.contains(r))
        {
            record.leader = self.partition.leader;
        }
        let shrinks = self
            .partition
            .isr
            .iter()
            .any(|r| !self.target_isr.contains(r));
        if (self
            .metadata_version
            .is_leader_epoch_bump_required_on_isr_shrink()
            || self.zk_migration)
            && record.leader == NO_LEADER_CHANGE
            && shrinks
        {
            record.leader = self.partition.leader;
        }
        // Without ELR the last ISR member stays: an empty ISR is never written.
        if record.isr.is_none()
            && !self.target_isr.is_empty()
            && self.target_isr != self.partition.isr
        {
            record.isr = Some(self.target_isr.clone());
        }
        if record.leader_recovery_state == -1
            && self.target_leader_recovery_state != self.partition.leader_recovery_state
        {
            record.leader_recovery_state = self.target_leader_recovery_state.value();
        }
        if !self.target_replicas.is_empty() {
            if self.metadata_version.is_directory_assignment_supported() {
                let directories: Vec<Uuid> = self
                    .target_replicas
                    .iter()
                    .map(|&r| self.directory_of(r))
                    .collect();
                if directories != self.partition.directories {
                    record.directories = Some(directories);
                }
            }
            if self.target_replicas != self.partition.replicas {
                record.replicas = Some(self.target_replicas.clone());
            }
        }
        if self.target_removing != self.partition.removing_replicas {
            record.removing_replicas = Some(self.target_removing.clone());
        }
        if self.target_adding != self.partition.adding_replicas {
            record.adding_replicas = Some(self.target_adding.clone());
        }
        if record.leader == NO_LEADER_CHANGE
            && record.isr.is_none()
            && record.leader_recovery_state == -1
            && record.replicas.is_none()
            && record.removing_replicas.is_none()
            && record.adding_replicas.is_none()
            && record.directories.is_none()
        {
            return None;
        }
        if record.leader >= 0 {
            let isr = record.isr.as_ref().unwrap_or(&self.partition.isr);
            assert!(
                isr.contains(&record.leader),
                "new leader {} outside the ISR {isr:?}",
                record.leader
            );
        }
        Some(ApiMessageAndVersion::new(
            MetadataRecord::PartitionChange(record),
            self.metadata_version.partition_change_record_version(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            directories: vec![Uuid::nil(); replicas.len()],
            isr: isr.to_vec(),
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            leader,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            leader_epoch: 3,
            partition_epoch: 7,
        }
    }

    fn change(record: Option<ApiMessageAndVersion>) -> Option<PartitionChangeRecord> {
        record.map(|r| match r.record {
            MetadataRecord::PartitionChange(c) => c,
            other => panic!("not a partition change: {other:?}"),
        })
    }

    const MV: MetadataVersion = MetadataVersion::IBP_3_9_IV0;

    #[test]
    fn fencing_the_leader_moves_leadership_within_the_isr() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], 1);
        let acceptable = |r: i32| r != 1;
        let c = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_target_isr(vec![2, 3])
                .build(),
        )
        .expect("a change");
        assert_eq!(c.leader, 2);
        assert_eq!(c.isr, Some(vec![2, 3]));
    }

    #[test]
    fn the_last_isr_member_stays_and_the_partition_goes_leaderless() {
        let p = partition(&[1, 2], &[1], 1);
        let acceptable = |r: i32| r != 1;
        let c = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_target_isr(vec![])
                .build(),
        )
        .expect("a change");
        assert_eq!(c.leader, NO_LEADER);
        assert_eq!(c.isr, None, "ISR never becomes empty without ELR");
    }

    #[test]
    fn unclean_election_takes_any_acceptable_replica_and_marks_recovering() {
        let p = partition(&[1, 2], &[1], NO_LEADER);
        let acceptable = |r: i32| r == 2;
        let clean = PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV).build();
        assert_eq!(clean, None, "no clean leader: nothing changes");
        let c = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_election(Election::Unclean)
                .build(),
        )
        .expect("a change");
        assert_eq!(c.leader, 2);
        assert_eq!(c.isr, Some(vec![2]));
        assert_eq!(c.leader_recovery_state, 1);
    }

    #[test]
    fn isr_shrink_bumps_the_leader_epoch_only_before_3_6() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], 1);
        let acceptable = |_| true;
        let new = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_target_isr(vec![1, 2])
                .build(),
        )
        .expect("a change");
        assert_eq!(new.leader, NO_LEADER_CHANGE);
        let old = change(
            PartitionChangeBuilder::new(
                &p,
                Uuid::nil(),
                0,
                &acceptable,
                MetadataVersion::IBP_3_5_IV2,
            )
            .with_target_isr(vec![1, 2])
            .build(),
        )
        .expect("a change");
        assert_eq!(old.leader, 1, "same leader, epoch bumped");
        let migrating = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_zk_migration(true)
                .with_target_isr(vec![1, 2])
                .build(),
        )
        .expect("a change");
        assert_eq!(
            migrating.leader, 1,
            "during a ZooKeeper migration every shrink bumps the epoch"
        );
        let grows = change(
            PartitionChangeBuilder::new(
                &partition(&[1, 2, 3], &[1, 2], 1),
                Uuid::nil(),
                0,
                &acceptable,
                MV,
            )
            .with_zk_migration(true)
            .with_target_isr(vec![1, 2, 3])
            .build(),
        )
        .expect("a change");
        assert_eq!(grows.leader, NO_LEADER_CHANGE, "an expansion never does");
    }

    #[test]
    fn a_directory_assignment_changes_only_that_replicas_directory() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], 1);
        let acceptable = |_| true;
        let dir = Uuid::from_u64_pair(7, 9);
        let c = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_directory(2, dir)
                .build(),
        )
        .expect("a change");
        assert_eq!(c.directories, Some(vec![Uuid::nil(), dir, Uuid::nil()]));
        assert_eq!(c.leader, NO_LEADER_CHANGE);
        assert_eq!(c.isr, None);
        let same = PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
            .with_directory(2, Uuid::nil())
            .build();
        assert_eq!(same, None, "the same directory again changes nothing");
        let old = PartitionChangeBuilder::new(
            &p,
            Uuid::nil(),
            0,
            &acceptable,
            MetadataVersion::IBP_3_7_IV1,
        )
        .with_directory(2, dir)
        .build();
        assert_eq!(old, None, "no directories before 3.7-IV2");
    }

    #[test]
    fn preferred_election_returns_leadership_to_the_first_replica() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], 2);
        let acceptable = |_| true;
        let c = change(
            PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV)
                .with_election(Election::Preferred)
                .build(),
        )
        .expect("a change");
        assert_eq!(c.leader, 1);
        let online = PartitionChangeBuilder::new(&p, Uuid::nil(), 0, &acceptable, MV).build();
        assert_eq!(online, None, "online election keeps a valid leader");
    }
}
