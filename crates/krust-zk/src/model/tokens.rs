//! `/delegation_token/tokens/<token id>` (`DelegationTokenInfoZNode`, versions 1–3).

use super::json::{Fields, JsonObject, parse_object, string};
use super::names::{desanitize, sanitize};
use super::{ZNodeError, paths};

/// A delegation token's information (not its HMAC, which Kafka does not store in ZooKeeper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationTokenZNode {
    /// The token id (also the znode name).
    pub token_id: String,
    /// The owner principal, `User:alice`.
    pub owner: String,
    /// The principal that requested the token (v3; the owner in v1/v2).
    pub token_requester: String,
    /// Principals that may renew it.
    pub renewers: Vec<String>,
    /// Issue time (ms).
    pub issue_timestamp_ms: i64,
    /// Latest possible expiry (ms).
    pub max_timestamp_ms: i64,
    /// Current expiry (ms).
    pub expiry_timestamp_ms: i64,
}

impl DelegationTokenZNode {
    /// Kafka's v3 bytes (principals sanitized), in the order of a Scala immutable `HashMap` of
    /// the eight keys.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let renewers: Vec<String> = self.renewers.iter().map(|r| string(&sanitize(r))).collect();
        JsonObject::new()
            .int("issueTimestamp", self.issue_timestamp_ms)
            .raw("renewers", &format!("[{}]", renewers.join(",")))
            .str("tokenRequester", &sanitize(&self.token_requester))
            .str("tokenId", &self.token_id)
            .str("owner", &sanitize(&self.owner))
            .int("expiryTimestamp", self.expiry_timestamp_ms)
            .int("maxTimestamp", self.max_timestamp_ms)
            .int("version", 3)
            .finish()
            .into_bytes()
    }

    /// Decodes versions 1–3 (`tokenRequester` from v3; before it, the owner).
    ///
    /// # Errors
    /// Not JSON, a version outside 1–3, a missing field, or a principal that does not
    /// desanitize to `type:name`.
    pub fn decode(token_id: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::delegation_token(token_id);
        let map = parse_object(&path, bytes)?;
        let f = Fields::new(&path, &map);
        let version = f.version()?;
        if !(1..=3).contains(&version) {
            return Err(ZNodeError::version(&path, version));
        }
        let principal = |text: &str| -> Result<String, ZNodeError> {
            let p = desanitize(text).map_err(|_| ZNodeError::invalid(&path, "principal", text))?;
            if p.contains(':') {
                Ok(p)
            } else {
                Err(ZNodeError::invalid(&path, "principal", p))
            }
        };
        let owner = principal(f.str("owner")?)?;
        let token_requester = if version >= 3 {
            principal(f.str("tokenRequester")?)?
        } else {
            owner.clone()
        };
        let mut renewers = Vec::new();
        for r in f
            .required("renewers", "an array of strings")?
            .as_array()
            .ok_or_else(|| f.error("renewers", "an array of strings"))?
        {
            let r = r
                .as_str()
                .ok_or_else(|| f.error("renewers", "an array of strings"))?;
            renewers.push(principal(r)?);
        }
        Ok(Self {
            token_id: f.str("tokenId")?.to_owned(),
            owner,
            token_requester,
            renewers,
            issue_timestamp_ms: f.i64("issueTimestamp")?,
            max_timestamp_ms: f.i64("maxTimestamp")?,
            expiry_timestamp_ms: f.i64("expiryTimestamp")?,
        })
    }
}
