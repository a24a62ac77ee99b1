//! One partition's next state as a `PartitionChangeRecord` (Kafka 3.9 `PartitionChangeBuilder`,
//! without reassignment and ELR): leader election from the target ISR, the unclean fallback,
//! the ISR change, the leader epoch bump rules, and replica directory assignments (KIP-858,
//! from metadata.version 3.7-IV2).
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
    /// Replicas whose log directory changes (AssignReplicasToDirs), last one wins.
    target_directories: Vec<(i32, Uuid)>,
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
            target_directories: Vec::new(),
        }
    }

    /// Assigns `replica` to log directory `directory` (Kafka's `setDirectory`). Written only
    /// at metadata.versions with directory assignment, and only if it changes something.
    #[must_use]
    pub fn with_directory(mut self, replica: i32, directory: Uuid) -> Self {
        self.target_directories.push((replica, directory));
        self
    }

    /// The directories after the change, one per replica, as Kafka's `setAssignmentChanges`
    /// builds them (replicas never change here, so none needs a default directory).
    fn target_directories(&self) -> Vec<Uuid> {
        self.partition
            .replicas
            .iter()
            .zip(&self.partition.directories)
            .map(|(replica, current)| {
                self.target_directories
                    .iter()
                    .rev()
                    .find(|(r, _)| r == replica)
                    .map_or(*current, |(_, d)| *d)
            })
            .collect()
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
        let replicas = &self.partition.replicas;
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
    pub fn build(self) -> Option<ApiMessageAndVersion> {
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
        let shrinks = self
            .partition
            .isr
            .iter()
            .any(|r| !self.target_isr.contains(r));
        if self
            .metadata_version
            .is_leader_epoch_bump_required_on_isr_shrink()
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
        if self.metadata_version.is_directory_assignment_supported() {
            let directories = self.target_directories();
            if directories != self.partition.directories {
                record.directories = Some(directories);
            }
        }
        if record.leader == NO_LEADER_CHANGE
            && record.isr.is_none()
            && record.leader_recovery_state == -1
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
