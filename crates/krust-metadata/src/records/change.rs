//! Change records: `PartitionChangeRecord` (5, v0–2), `BrokerRegistrationChangeRecord` (17,
//! v0–2), and the pre-3.3-IV2 `FenceBrokerRecord` (7) / `UnfenceBrokerRecord` (8).
//!
//! In the change records every field but the ids is tagged and absent means "no change":
//! PartitionChangeRecord tags 0 `Isr`, 1 `Leader` (default -2), 2 `Replicas`, 3
//! `RemovingReplicas`, 4 `AddingReplicas`, 5 `LeaderRecoveryState` (default -1), 6
//! `EligibleLeaderReplicas` (v2+), 7 `LastKnownElr` (v2+), 8 `Directories` (v1+);
//! BrokerRegistrationChangeRecord tags 0 `Fenced: int8`, 1 `InControlledShutdown: int8` (v1+),
//! 2 `LogDirs: []uuid` (v2+).

use uuid::Uuid;

use super::registration::FieldNotInVersion;
use super::simple::UnknownTaggedFields;
use crate::codec::{
    ByteReader, DecodeError, decode_tagged, put_compact_array_len, put_compact_i32_array,
    put_compact_uuid_array, put_tagged_section,
};

/// `PartitionChangeRecord.Leader` when the leader does not change.
pub const NO_LEADER_CHANGE: i32 = -2;

/// A change to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChangeRecord {
    /// Partition index.
    pub partition_id: i32,
    /// Topic id.
    pub topic_id: Uuid,
    /// New ISR, if it changes.
    pub isr: Option<Vec<i32>>,
    /// New leader; -2 = unchanged, -1 = none.
    pub leader: i32,
    /// New replicas, if they change.
    pub replicas: Option<Vec<i32>>,
    /// New removing replicas, if they change.
    pub removing_replicas: Option<Vec<i32>>,
    /// New adding replicas, if they change.
    pub adding_replicas: Option<Vec<i32>>,
    /// New leader recovery state; -1 = unchanged.
    pub leader_recovery_state: i8,
    /// New directories, if they change (v1+).
    pub directories: Option<Vec<Uuid>>,
    /// New ELR (v2+).
    pub eligible_leader_replicas: Option<Vec<i32>>,
    /// New last known ELR (v2+).
    pub last_known_elr: Option<Vec<i32>>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

impl Default for PartitionChangeRecord {
    fn default() -> Self {
        Self {
            partition_id: -1,
            topic_id: Uuid::nil(),
            isr: None,
            leader: NO_LEADER_CHANGE,
            replicas: None,
            removing_replicas: None,
            adding_replicas: None,
            leader_recovery_state: -1,
            directories: None,
            eligible_leader_replicas: None,
            last_known_elr: None,
            unknown_tagged_fields: Vec::new(),
        }
    }
}

fn i32_array_tag(bytes: &[u8], field: &'static str) -> Result<Option<Vec<i32>>, DecodeError> {
    decode_tagged(bytes, field, |sub| sub.compact_nullable_i32_array(field))
}

fn encoded_i32_array(values: &[i32]) -> Vec<u8> {
    let mut bytes = Vec::new();
    put_compact_i32_array(&mut bytes, Some(values));
    bytes
}

impl PartitionChangeRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>, version: i16) -> Result<Self, DecodeError> {
        let mut record = Self {
            partition_id: r.i32("PartitionChangeRecord.PartitionId")?,
            topic_id: r.uuid("PartitionChangeRecord.TopicId")?,
            ..Self::default()
        };
        for (tag, bytes) in r.tagged_fields()? {
            match tag {
                0 => record.isr = i32_array_tag(&bytes, "PartitionChangeRecord.Isr")?,
                1 => {
                    record.leader = decode_tagged(&bytes, "PartitionChangeRecord.Leader", |s| {
                        s.i32("PartitionChangeRecord.Leader")
                    })?;
                }
                2 => record.replicas = i32_array_tag(&bytes, "PartitionChangeRecord.Replicas")?,
                3 => {
                    record.removing_replicas =
                        i32_array_tag(&bytes, "PartitionChangeRecord.RemovingReplicas")?;
                }
                4 => {
                    record.adding_replicas =
                        i32_array_tag(&bytes, "PartitionChangeRecord.AddingReplicas")?;
                }
                5 => {
                    record.leader_recovery_state =
                        decode_tagged(&bytes, "PartitionChangeRecord.LeaderRecoveryState", |s| {
                            s.i8("PartitionChangeRecord.LeaderRecoveryState")
                        })?;
                }
                6 if version >= 2 => {
                    record.eligible_leader_replicas =
                        i32_array_tag(&bytes, "PartitionChangeRecord.EligibleLeaderReplicas")?;
                }
                7 if version >= 2 => {
                    record.last_known_elr =
                        i32_array_tag(&bytes, "PartitionChangeRecord.LastKnownElr")?;
                }
                8 if version >= 1 => {
                    let field = "PartitionChangeRecord.Directories";
                    record.directories = decode_tagged(&bytes, field, |s| {
                        match s.compact_array_len(field, 16)? {
                            None => Ok(None),
                            Some(len) => (0..len)
                                .map(|_| s.uuid(field))
                                .collect::<Result<_, _>>()
                                .map(Some),
                        }
                    })?;
                }
                _ => record.unknown_tagged_fields.push((tag, bytes)),
            }
        }
        Ok(record)
    }

    pub(crate) fn encode(&self, version: i16, out: &mut Vec<u8>) -> Result<(), FieldNotInVersion> {
        if version < 1 && self.directories.is_some() {
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
        let mut known = Vec::new();
        if let Some(isr) = &self.isr {
            known.push((0, encoded_i32_array(isr)));
        }
        if self.leader != NO_LEADER_CHANGE {
            known.push((1, self.leader.to_be_bytes().to_vec()));
        }
        if let Some(replicas) = &self.replicas {
            known.push((2, encoded_i32_array(replicas)));
        }
        if let Some(removing) = &self.removing_replicas {
            known.push((3, encoded_i32_array(removing)));
        }
        if let Some(adding) = &self.adding_replicas {
            known.push((4, encoded_i32_array(adding)));
        }
        if self.leader_recovery_state != -1 {
            known.push((5, self.leader_recovery_state.to_be_bytes().to_vec()));
        }
        if let Some(elr) = &self.eligible_leader_replicas {
            known.push((6, encoded_i32_array(elr)));
        }
        if let Some(last) = &self.last_known_elr {
            known.push((7, encoded_i32_array(last)));
        }
        if let Some(directories) = &self.directories {
            let mut bytes = Vec::new();
            put_compact_uuid_array(&mut bytes, directories);
            known.push((8, bytes));
        }
        put_tagged_section(out, known, &self.unknown_tagged_fields);
        Ok(())
    }
}

/// A change to a broker's registration (fencing, controlled shutdown, online log dirs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerRegistrationChangeRecord {
    /// Broker id.
    pub broker_id: i32,
    /// Broker epoch.
    pub broker_epoch: i64,
    /// -1 unfenced, 0 no change, 1 fenced.
    pub fenced: i8,
    /// 0 no change, 1 entering controlled shutdown (v1+).
    pub in_controlled_shutdown: i8,
    /// Online log dirs, if they changed (v2+; empty = no change).
    pub log_dirs: Vec<Uuid>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

impl BrokerRegistrationChangeRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>, version: i16) -> Result<Self, DecodeError> {
        let mut record = Self {
            broker_id: r.i32("BrokerRegistrationChangeRecord.BrokerId")?,
            broker_epoch: r.i64("BrokerRegistrationChangeRecord.BrokerEpoch")?,
            ..Self::default()
        };
        for (tag, bytes) in r.tagged_fields()? {
            match tag {
                0 => {
                    record.fenced =
                        decode_tagged(&bytes, "BrokerRegistrationChangeRecord.Fenced", |s| {
                            s.i8("BrokerRegistrationChangeRecord.Fenced")
                        })?;
                }
                1 if version >= 1 => {
                    let field = "BrokerRegistrationChangeRecord.InControlledShutdown";
                    record.in_controlled_shutdown = decode_tagged(&bytes, field, |s| s.i8(field))?;
                }
                2 if version >= 2 => {
                    let field = "BrokerRegistrationChangeRecord.LogDirs";
                    record.log_dirs =
                        decode_tagged(&bytes, field, |s| s.compact_uuid_array(field))?;
                }
                _ => record.unknown_tagged_fields.push((tag, bytes)),
            }
        }
        Ok(record)
    }

    pub(crate) fn encode(&self, version: i16, out: &mut Vec<u8>) -> Result<(), FieldNotInVersion> {
        if version < 1 && self.in_controlled_shutdown != 0 {
            return Err(FieldNotInVersion {
                field: "InControlledShutdown",
            });
        }
        if version < 2 && !self.log_dirs.is_empty() {
            return Err(FieldNotInVersion { field: "LogDirs" });
        }
        out.extend_from_slice(&self.broker_id.to_be_bytes());
        out.extend_from_slice(&self.broker_epoch.to_be_bytes());
        let mut known = Vec::new();
        if self.fenced != 0 {
            known.push((0, self.fenced.to_be_bytes().to_vec()));
        }
        if self.in_controlled_shutdown != 0 {
            known.push((1, self.in_controlled_shutdown.to_be_bytes().to_vec()));
        }
        if !self.log_dirs.is_empty() {
            let mut bytes = Vec::new();
            put_compact_array_len(&mut bytes, Some(self.log_dirs.len()));
            for dir in &self.log_dirs {
                bytes.extend_from_slice(dir.as_bytes());
            }
            known.push((2, bytes));
        }
        put_tagged_section(out, known, &self.unknown_tagged_fields);
        Ok(())
    }
}

/// `FenceBrokerRecord` / `UnfenceBrokerRecord` (both `Id: int32`, `Epoch: int64`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerFencingRecord {
    /// Broker id.
    pub id: i32,
    /// Broker epoch.
    pub epoch: i64,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

impl BrokerFencingRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            id: r.i32("BrokerFencingRecord.Id")?,
            epoch: r.i64("BrokerFencingRecord.Epoch")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.epoch.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}
