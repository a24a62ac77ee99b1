//! Security and quota records, all version 0: `AccessControlEntryRecord` (18),
//! `RemoveAccessControlEntryRecord` (19), `ClientQuotaRecord` (14), `DelegationTokenRecord` (10),
//! `RemoveDelegationTokenRecord` (26), `RemoveUserScramCredentialRecord` (22).

use uuid::Uuid;

use super::simple::UnknownTaggedFields;
use crate::codec::{
    ByteReader, DecodeError, put_compact_array_len, put_compact_nullable_string,
    put_compact_string, put_tagged_section,
};

/// An ACL binding (codes in facts Appendix A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessControlEntryRecord {
    /// ACL id.
    pub id: Uuid,
    /// Resource type code.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// Pattern type code.
    pub pattern_type: i8,
    /// Principal, e.g. `User:alice`.
    pub principal: String,
    /// Host.
    pub host: String,
    /// Operation code.
    pub operation: i8,
    /// Permission type code.
    pub permission_type: i8,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Removal of an ACL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveAccessControlEntryRecord {
    /// ACL id.
    pub id: Uuid,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// One part of a quota entity (`user`, `client-id` or `ip`; name `None` = default entity).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaEntity {
    /// Entity type.
    pub entity_type: String,
    /// Entity name, or `None` for the default.
    pub entity_name: Option<String>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A client quota set or removed.
#[derive(Debug, Clone, Default)]
pub struct ClientQuotaRecord {
    /// The entity.
    pub entity: Vec<QuotaEntity>,
    /// Quota key, e.g. `producer_byte_rate`.
    pub key: String,
    /// Quota value.
    pub value: f64,
    /// Whether the quota is removed.
    pub remove: bool,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Records compare bit for bit (so that equality is an equivalence even for a NaN value, and a
/// decoded record equals the one that was encoded).
impl PartialEq for ClientQuotaRecord {
    fn eq(&self, other: &Self) -> bool {
        self.entity == other.entity
            && self.key == other.key
            && self.value.to_bits() == other.value.to_bits()
            && self.remove == other.remove
            && self.unknown_tagged_fields == other.unknown_tagged_fields
    }
}

impl Eq for ClientQuotaRecord {}

/// A delegation token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DelegationTokenRecord {
    /// Owner principal.
    pub owner: String,
    /// Requester principal.
    pub requester: String,
    /// Renewer principals.
    pub renewers: Vec<String>,
    /// Issue time (ms).
    pub issue_timestamp: i64,
    /// Maximum lifetime end (ms).
    pub max_timestamp: i64,
    /// Expiration (ms).
    pub expiration_timestamp: i64,
    /// Token id.
    pub token_id: String,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Removal of a delegation token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveDelegationTokenRecord {
    /// Token id.
    pub token_id: String,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// Removal of a user's SCRAM credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveUserScramCredentialRecord {
    /// User name.
    pub name: String,
    /// 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.
    pub mechanism: i8,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

impl AccessControlEntryRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            id: r.uuid("AccessControlEntryRecord.Id")?,
            resource_type: r.i8("AccessControlEntryRecord.ResourceType")?,
            resource_name: r.compact_string("AccessControlEntryRecord.ResourceName")?,
            pattern_type: r.i8("AccessControlEntryRecord.PatternType")?,
            principal: r.compact_string("AccessControlEntryRecord.Principal")?,
            host: r.compact_string("AccessControlEntryRecord.Host")?,
            operation: r.i8("AccessControlEntryRecord.Operation")?,
            permission_type: r.i8("AccessControlEntryRecord.PermissionType")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(&self.resource_type.to_be_bytes());
        put_compact_string(out, &self.resource_name);
        out.extend_from_slice(&self.pattern_type.to_be_bytes());
        put_compact_string(out, &self.principal);
        put_compact_string(out, &self.host);
        out.extend_from_slice(&self.operation.to_be_bytes());
        out.extend_from_slice(&self.permission_type.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl RemoveAccessControlEntryRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            id: r.uuid("RemoveAccessControlEntryRecord.Id")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.id.as_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl ClientQuotaRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        let len = r.compact_array_len("ClientQuotaRecord.Entity", 3)?.ok_or(
            DecodeError::UnexpectedNull {
                field: "ClientQuotaRecord.Entity",
            },
        )?;
        let entity = (0..len)
            .map(|_| {
                Ok(QuotaEntity {
                    entity_type: r.compact_string("ClientQuotaRecord.Entity.EntityType")?,
                    entity_name: r
                        .compact_nullable_string("ClientQuotaRecord.Entity.EntityName")?,
                    unknown_tagged_fields: r.tagged_fields()?,
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(Self {
            entity,
            key: r.compact_string("ClientQuotaRecord.Key")?,
            value: f64::from_bits(r.i64("ClientQuotaRecord.Value")? as u64),
            remove: r.bool("ClientQuotaRecord.Remove")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_compact_array_len(out, Some(self.entity.len()));
        for e in &self.entity {
            put_compact_string(out, &e.entity_type);
            put_compact_nullable_string(out, e.entity_name.as_deref());
            put_tagged_section(out, Vec::new(), &e.unknown_tagged_fields);
        }
        put_compact_string(out, &self.key);
        out.extend_from_slice(&self.value.to_bits().to_be_bytes());
        out.push(u8::from(self.remove));
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl DelegationTokenRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        let owner = r.compact_string("DelegationTokenRecord.Owner")?;
        let requester = r.compact_string("DelegationTokenRecord.Requester")?;
        let len = r
            .compact_array_len("DelegationTokenRecord.Renewers", 1)?
            .ok_or(DecodeError::UnexpectedNull {
                field: "DelegationTokenRecord.Renewers",
            })?;
        let renewers = (0..len)
            .map(|_| r.compact_string("DelegationTokenRecord.Renewers"))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            owner,
            requester,
            renewers,
            issue_timestamp: r.i64("DelegationTokenRecord.IssueTimestamp")?,
            max_timestamp: r.i64("DelegationTokenRecord.MaxTimestamp")?,
            expiration_timestamp: r.i64("DelegationTokenRecord.ExpirationTimestamp")?,
            token_id: r.compact_string("DelegationTokenRecord.TokenId")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_compact_string(out, &self.owner);
        put_compact_string(out, &self.requester);
        put_compact_array_len(out, Some(self.renewers.len()));
        for renewer in &self.renewers {
            put_compact_string(out, renewer);
        }
        out.extend_from_slice(&self.issue_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.expiration_timestamp.to_be_bytes());
        put_compact_string(out, &self.token_id);
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl RemoveDelegationTokenRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            token_id: r.compact_string("RemoveDelegationTokenRecord.TokenId")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_compact_string(out, &self.token_id);
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}

impl RemoveUserScramCredentialRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            name: r.compact_string("RemoveUserScramCredentialRecord.Name")?,
            mechanism: r.i8("RemoveUserScramCredentialRecord.Mechanism")?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_compact_string(out, &self.name);
        out.extend_from_slice(&self.mechanism.to_be_bytes());
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}
