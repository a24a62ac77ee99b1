//! `FeatureLevelRecord` (api key 12, version 0 only — it must stay readable before the
//! metadata.version is known): `Name: string`, `FeatureLevel: int16`, tagged fields.

use crate::codec::{ByteReader, DecodeError, put_compact_string, put_tagged_fields};

/// The finalized level of one feature (e.g. `metadata.version` = 21). Level 0 means disabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureLevelRecord {
    /// Feature name, e.g. `metadata.version`.
    pub name: String,
    /// Finalized level.
    pub feature_level: i16,
    /// Tagged fields this schema version does not define, kept to re-encode unchanged.
    pub unknown_tagged_fields: Vec<(u32, Vec<u8>)>,
}

impl FeatureLevelRecord {
    /// A record with no unknown tagged fields.
    #[must_use]
    pub fn new(name: impl Into<String>, feature_level: i16) -> Self {
        Self {
            name: name.into(),
            feature_level,
            unknown_tagged_fields: Vec::new(),
        }
    }

    pub(crate) fn decode(reader: &mut ByteReader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let name = reader.compact_string("FeatureLevelRecord.Name")?;
        let feature_level = reader.i16("FeatureLevelRecord.FeatureLevel")?;
        let unknown_tagged_fields = reader.tagged_fields()?;
        Ok(Self {
            name,
            feature_level,
            unknown_tagged_fields,
        })
    }

    pub(crate) fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        put_compact_string(out, &self.name);
        out.extend_from_slice(&self.feature_level.to_be_bytes());
        put_tagged_fields(out, &self.unknown_tagged_fields);
    }
}
