//! Metadata records with flat, fixed layouts (Kafka 3.9 `common/metadata/*.json`), all at
//! version 0, flexible encoding: `NoOpRecord` (20), `ZkMigrationStateRecord` (21),
//! `TopicRecord` (2), `RemoveTopicRecord` (9), `UnregisterBrokerRecord` (1), `ConfigRecord` (4),
//! `ProducerIdsRecord` (15), `BeginTransactionRecord` (23), `EndTransactionRecord` (24),
//! `AbortTransactionRecord` (25).

use uuid::Uuid;

use crate::codec::{
    ByteReader, DecodeError, decode_tagged, put_compact_nullable_string, put_compact_string,
    put_tagged_section,
};

/// Tagged fields a record keeps to re-encode unchanged.
pub type UnknownTaggedFields = Vec<(u32, Vec<u8>)>;

/// Written by the leader when idle so followers see the high watermark move. No fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NoOpRecord {
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// The cluster's ZooKeeper-migration state: 0 NONE, 1 MIGRATION, 2 PRE_MIGRATION, 3 POST_MIGRATION.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZkMigrationStateRecord {
    /// The state code.
    pub zk_migration_state: i8,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A topic's creation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicRecord {
    /// The topic name.
    pub name: String,
    /// The topic id.
    pub topic_id: Uuid,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A topic's deletion (with all its partitions).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveTopicRecord {
    /// The topic id.
    pub topic_id: Uuid,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A broker's registration ends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnregisterBrokerRecord {
    /// The broker id.
    pub broker_id: i32,
    /// The broker epoch of the registration that ends.
    pub broker_epoch: i64,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A dynamic configuration change (`value: None` deletes the key).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigRecord {
    /// `ConfigResource.Type`: 2 TOPIC, 4 BROKER, 8 BROKER_LOGGER, 16 CLIENT_METRICS.
    pub resource_type: i8,
    /// The resource (empty = cluster default for BROKER).
    pub resource_name: String,
    /// The configuration key.
    pub name: String,
    /// The value, or `None` to delete.
    pub value: Option<String>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A block of producer ids handed to a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerIdsRecord {
    /// The requesting broker.
    pub broker_id: i32,
    /// Its broker epoch (default -1).
    pub broker_epoch: i64,
    /// First producer id of the *next* block.
    pub next_producer_id: i64,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Start of a KIP-868 metadata transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BeginTransactionRecord {
    /// Optional name (tag 0).
    pub name: Option<String>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// End of a metadata transaction. No fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndTransactionRecord {
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Abort of a metadata transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AbortTransactionRecord {
    /// Optional reason (tag 0).
    pub reason: Option<String>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Splits a tagged section into the one optional-string field at tag 0 and the rest.
fn optional_string_tag0(
    reader: &mut ByteReader<'_>,
    field: &'static str,
) -> Result<(Option<String>, UnknownTaggedFields), DecodeError> {
    let mut value = None;
    let mut unknown = Vec::new();
    for (tag, bytes) in reader.tagged_fields()? {
        if tag == 0 {
            value = decode_tagged(&bytes, field, |sub| sub.compact_nullable_string(field))?;
        } else {
            unknown.push((tag, bytes));
        }
    }
    Ok((value, unknown))
}

fn tag0_string(value: Option<&str>) -> Vec<(u32, Vec<u8>)> {
    // Written only when not the default (null).
    value
        .map(|v| {
            let mut bytes = Vec::new();
            put_compact_nullable_string(&mut bytes, Some(v));
            (0, bytes)
        })
        .into_iter()
        .collect()
}

impl NoOpRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl ZkMigrationStateRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            zk_migration_state: r.i8("ZkMigrationStateRecord.ZkMigrationState")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.zk_migration_state.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl TopicRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            name: r.compact_string("TopicRecord.Name")?,
            topic_id: r.uuid("TopicRecord.TopicId")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_compact_string(out, &self.name);
        out.extend_from_slice(self.topic_id.as_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl RemoveTopicRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            topic_id: r.uuid("RemoveTopicRecord.TopicId")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.topic_id.as_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl UnregisterBrokerRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            broker_id: r.i32("UnregisterBrokerRecord.BrokerId")?,
            broker_epoch: r.i64("UnregisterBrokerRecord.BrokerEpoch")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.broker_id.to_be_bytes());
        out.extend_from_slice(&self.broker_epoch.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl ConfigRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            resource_type: r.i8("ConfigRecord.ResourceType")?,
            resource_name: r.compact_string("ConfigRecord.ResourceName")?,
            name: r.compact_string("ConfigRecord.Name")?,
            value: r.compact_nullable_string("ConfigRecord.Value")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.resource_type.to_be_bytes());
        put_compact_string(out, &self.resource_name);
        put_compact_string(out, &self.name);
        put_compact_nullable_string(out, self.value.as_deref());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl ProducerIdsRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            broker_id: r.i32("ProducerIdsRecord.BrokerId")?,
            broker_epoch: r.i64("ProducerIdsRecord.BrokerEpoch")?,
            next_producer_id: r.i64("ProducerIdsRecord.NextProducerId")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.broker_id.to_be_bytes());
        out.extend_from_slice(&self.broker_epoch.to_be_bytes());
        out.extend_from_slice(&self.next_producer_id.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl BeginTransactionRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        let (name, unknown_tagged_fields) = optional_string_tag0(r, "BeginTransactionRecord.Name")?;
        Ok(Self {
            name,
            unknown_tagged_fields,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_tagged_section(
            out,
            tag0_string(self.name.as_deref()),
            &self.unknown_tagged_fields,
        );
    }
}

impl EndTransactionRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl AbortTransactionRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        let (reason, unknown_tagged_fields) =
            optional_string_tag0(r, "AbortTransactionRecord.Reason")?;
        Ok(Self {
            reason,
            unknown_tagged_fields,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_tagged_section(
            out,
            tag0_string(self.reason.as_deref()),
            &self.unknown_tagged_fields,
        );
    }
}
