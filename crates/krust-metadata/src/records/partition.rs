//! `PartitionRecord` (api key 3, versions 0–2). Wire order: `PartitionId: int32`,
//! `TopicId: uuid`, `Replicas`, `Isr`, `RemovingReplicas`, `AddingReplicas` (`[]int32`),
//! `Leader: int32`, `LeaderEpoch: int32`, `PartitionEpoch: int32`, `Directories: []uuid` (v1+);
//! tagged: `LeaderRecoveryState: int8` (tag 0, when ≠ 0), `EligibleLeaderReplicas` (tag 1, v2+,
//! when not null), `LastKnownElr` (tag 2, v2+, when not null).

use uuid::Uuid;

use super::registration::FieldNotInVersion;
use super::simple::UnknownTaggedFields;
use crate::codec::{
    ByteReader, DecodeError, decode_tagged, put_compact_i32_array, put_compact_uuid_array,
    put_tagged_section,
};

/// A partition's full state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionRecord {
    /// Partition index.
    pub partition_id: i32,
    /// Topic id.
    pub topic_id: Uuid,
    /// Replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<i32>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<i32>,
    /// Leader (-1 = none).
    pub leader: i32,
    /// 0 recovered, 1 recovering after an unclean election.
    pub leader_recovery_state: i8,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch.
    pub partition_epoch: i32,
    /// Directory of each replica, in `replicas` order (v1+).
    pub directories: Vec<Uuid>,
    /// Eligible leader replicas (v2+).
    pub eligible_leader_replicas: Option<Vec<i32>>,
    /// Last known ELR (v2+).
    pub last_known_elr: Option<Vec<i32>>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

impl PartitionRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>, version: i16) -> Result<Self, DecodeError> {
        let partition_id = r.i32("PartitionRecord.PartitionId")?;
        let topic_id = r.uuid("PartitionRecord.TopicId")?;
        let replicas = r.compact_i32_array("PartitionRecord.Replicas")?;
        let isr = r.compact_i32_array("PartitionRecord.Isr")?;
        let removing_replicas = r.compact_i32_array("PartitionRecord.RemovingReplicas")?;
        let adding_replicas = r.compact_i32_array("PartitionRecord.AddingReplicas")?;
        let leader = r.i32("PartitionRecord.Leader")?;
        let leader_epoch = r.i32("PartitionRecord.LeaderEpoch")?;
        let partition_epoch = r.i32("PartitionRecord.PartitionEpoch")?;
        let directories = if version >= 1 {
            r.compact_uuid_array("PartitionRecord.Directories")?
        } else {
            Vec::new()
        };
        let mut record = Self {
            partition_id,
            topic_id,
            replicas,
            isr,
            removing_replicas,
            adding_replicas,
            leader,
            leader_recovery_state: 0,
            leader_epoch,
            partition_epoch,
            directories,
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        };
        for (tag, bytes) in r.tagged_fields()? {
            match tag {
                0 => {
                    record.leader_recovery_state =
                        decode_tagged(&bytes, "PartitionRecord.LeaderRecoveryState", |sub| {
                            sub.i8("PartitionRecord.LeaderRecoveryState")
                        })?;
                }
                1 if version >= 2 => {
                    record.eligible_leader_replicas =
                        decode_tagged(&bytes, "PartitionRecord.EligibleLeaderReplicas", |sub| {
                            sub.compact_nullable_i32_array("PartitionRecord.EligibleLeaderReplicas")
                        })?;
                }
                2 if version >= 2 => {
                    record.last_known_elr =
                        decode_tagged(&bytes, "PartitionRecord.LastKnownElr", |sub| {
                            sub.compact_nullable_i32_array("PartitionRecord.LastKnownElr")
                        })?;
                }
                _ => record.unknown_tagged_fields.push((tag, bytes)),
            }
        }
        Ok(record)
    }

    pub(crate) fn encode(&self, version: i16, out: &mut Vec<u8>) -> Result<(), FieldNotInVersion> {
        if version < 1 && !self.directories.is_empty() {
            return Err(FieldNotInVersion {
                field: "Directories",
            });
        }
        if version < 2 && self.eligible_leader_replicas.is_some() {
            return Err(FieldNotInVersion {
                field: "EligibleLeaderReplicas",
            });
        }
        if version < 2 && self.last_known_elr.is_some() {
            return Err(FieldNotInVersion {
                field: "LastKnownElr",
            });
        }
        out.extend_from_slice(&self.partition_id.to_be_bytes());
        out.extend_from_slice(self.topic_id.as_bytes());
        put_compact_i32_array(out, Some(&self.replicas));
        put_compact_i32_array(out, Some(&self.isr));
        put_compact_i32_array(out, Some(&self.removing_replicas));
        put_compact_i32_array(out, Some(&self.adding_replicas));
        out.extend_from_slice(&self.leader.to_be_bytes());
        out.extend_from_slice(&self.leader_epoch.to_be_bytes());
        out.extend_from_slice(&self.partition_epoch.to_be_bytes());
        if version >= 1 {
            put_compact_uuid_array(out, &self.directories);
        }
        let mut known = Vec::new();
        if self.leader_recovery_state != 0 {
            known.push((0, self.leader_recovery_state.to_be_bytes().to_vec()));
        }
        if let Some(elr) = &self.eligible_leader_replicas {
            let mut bytes = Vec::new();
            put_compact_i32_array(&mut bytes, Some(elr));
            known.push((1, bytes));
        }
        if let Some(last) = &self.last_known_elr {
            let mut bytes = Vec::new();
            put_compact_i32_array(&mut bytes, Some(last));
            known.push((2, bytes));
        }
        put_tagged_section(out, known, &self.unknown_tagged_fields);
        Ok(())
    }
}
