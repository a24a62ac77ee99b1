//! `UserScramCredentialRecord` (api key 11, version 0; metadata.version ≥ 3.5-IV2):
//! `Name: string`, `Mechanism: int8`, `Salt: bytes`, `StoredKey: bytes`, `ServerKey: bytes`,
//! `Iterations: int32`, tagged fields.

use crate::codec::{
    ByteReader, DecodeError, put_compact_bytes, put_compact_string, put_tagged_fields,
};

/// One user's SCRAM credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserScramCredentialRecord {
    /// The user name.
    pub name: String,
    /// 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.
    pub mechanism: i8,
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// PBKDF2 iteration count.
    pub iterations: i32,
    /// Tagged fields this schema version does not define, kept to re-encode unchanged.
    pub unknown_tagged_fields: Vec<(u32, Vec<u8>)>,
}

impl UserScramCredentialRecord {
    pub(crate) fn decode(reader: &mut ByteReader<'_>, _version: i16) -> Result<Self, DecodeError> {
        Ok(Self {
            name: reader.compact_string("UserScramCredentialRecord.Name")?,
            mechanism: i8::from_be_bytes([reader.u8("UserScramCredentialRecord.Mechanism")?]),
            salt: reader.compact_bytes("UserScramCredentialRecord.Salt")?,
            stored_key: reader.compact_bytes("UserScramCredentialRecord.StoredKey")?,
            server_key: reader.compact_bytes("UserScramCredentialRecord.ServerKey")?,
            iterations: reader.i32("UserScramCredentialRecord.Iterations")?,
            unknown_tagged_fields: reader.tagged_fields()?,
        })
    }

    pub(crate) fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        put_compact_string(out, &self.name);
        out.extend_from_slice(&self.mechanism.to_be_bytes());
        put_compact_bytes(out, &self.salt);
        put_compact_bytes(out, &self.stored_key);
        put_compact_bytes(out, &self.server_key);
        out.extend_from_slice(&self.iterations.to_be_bytes());
        put_tagged_fields(out, &self.unknown_tagged_fields);
    }
}
