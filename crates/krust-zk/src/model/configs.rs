//! `/config/<type>/<name>` contents (`ConfigEntityZNode`), config-change notifications
//! (`/config/changes/config_change_<seq>`), the SCRAM credential strings stored in user
//! configs, and the number formats of quota values.

use std::collections::BTreeMap;

use base64::Engine as _;

use super::json::{Fields, JsonObject, parse_object, string};
use super::order::java_properties_order;
use super::{ZNodeError, paths};

/// The content of a config znode: `{"version":1,"config":{"k":"v",…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigEntityZNode {
    /// The properties, as stored (password configs encrypted, SCRAM credentials as strings).
    pub config: BTreeMap<String, String>,
}

impl ConfigEntityZNode {
    /// Kafka's bytes: the keys in a `java.util.Properties`' order.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut items: Vec<(String, &String)> =
            self.config.iter().map(|(k, v)| (k.clone(), v)).collect();
        java_properties_order(&mut items);
        let inner: Vec<String> = items
            .iter()
            .map(|(k, v)| format!("{}:{}", string(k), string(v)))
            .collect();
        JsonObject::new()
            .int("version", 1)
            .raw("config", &format!("{{{}}}", inner.join(",")))
            .finish()
            .into_bytes()
    }

    /// Decodes as Kafka's `ConfigEntityZNode.decode`: empty data or a missing `config` object
    /// is an empty config; the version is not checked.
    ///
    /// # Errors
    /// Not JSON, or a config value that is not a string.
    pub fn decode(path: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let mut config = BTreeMap::new();
        if bytes.is_empty() {
            return Ok(Self { config });
        }
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        if let Some(m) = f.get("config").and_then(serde_json::Value::as_object) {
            for (k, v) in m {
                let v = v
                    .as_str()
                    .ok_or_else(|| f.error(&format!("config.{k}"), "a string"))?;
                config.insert(k.clone(), v.to_owned());
            }
        }
        Ok(Self { config })
    }
}

/// A config-change notification, version 2: `{"version":2,"entity_path":"<type>/<name>"}`, the
/// name sanitized (`users/alice/clients/app`, `brokers/<default>`).
pub mod change_notification {
    use super::{Fields, JsonObject, ZNodeError, parse_object};

    /// The notification's bytes for `entity_path` (already sanitized).
    #[must_use]
    pub fn encode(entity_path: &str) -> Vec<u8> {
        JsonObject::new()
            .int("version", 2)
            .str("entity_path", entity_path)
            .finish()
            .into_bytes()
    }

    /// The entity path of a version-2 notification.
    ///
    /// # Errors
    /// Not JSON, another version, or no `entity_path`.
    pub fn decode(path: &str, bytes: &[u8]) -> Result<String, ZNodeError> {
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let version = f.version()?;
        if version != 2 {
            return Err(ZNodeError::version(path, version));
        }
        Ok(f.str("entity_path")?.to_owned())
    }
}

/// The config key of a SCRAM mechanism in `/config/users/<u>`, by KRaft mechanism type
/// (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512).
#[must_use]
pub fn scram_mechanism_name(mechanism: i8) -> Option<&'static str> {
    match mechanism {
        1 => Some("SCRAM-SHA-256"),
        2 => Some("SCRAM-SHA-512"),
        _ => None,
    }
}

/// The SCRAM mechanisms in Kafka's `ScramMechanism.values()` order: (type, config key).
pub const SCRAM_MECHANISMS: [(i8, &str); 2] = [(1, "SCRAM-SHA-256"), (2, "SCRAM-SHA-512")];

/// A SCRAM credential as a user config stores it (Kafka's `ScramCredentialUtils`):
/// `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>` (standard base64 with padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialString {
    /// The salt.
    pub salt: Vec<u8>,
    /// `StoredKey`.
    pub stored_key: Vec<u8>,
    /// `ServerKey`.
    pub server_key: Vec<u8>,
    /// The iteration count.
    pub iterations: i32,
}

/// Why a SCRAM credential string does not parse (Kafka: "Credentials not valid").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SCRAM credential is not valid: {reason}")]
pub struct ScramCredentialError {
    /// What is wrong.
    pub reason: &'static str,
}

impl ScramCredentialString {
    /// `credentialToString`.
    #[must_use]
    pub fn encode(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        format!(
            "salt={},stored_key={},server_key={},iterations={}",
            b64.encode(&self.salt),
            b64.encode(&self.stored_key),
            b64.encode(&self.server_key),
            self.iterations
        )
    }

    /// `credentialFromString`: exactly the four keys, any order.
    ///
    /// # Errors
    /// A token without `=`, a missing or extra key, bad base64 or a bad integer.
    pub fn decode(text: &str) -> Result<Self, ScramCredentialError> {
        let err = |reason| ScramCredentialError { reason };
        let mut props = BTreeMap::new();
        for token in text.split(',') {
            match token.find('=') {
                Some(i) if i > 0 => {
                    props.insert(&token[..i], &token[i + 1..]);
                }
                _ => return Err(err("a property without a name")),
            }
        }
        if props.len() != 4 {
            return Err(err("expected salt, stored_key, server_key and iterations"));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let bytes = |key: &str| -> Result<Vec<u8>, ScramCredentialError> {
            let v = props.get(key).ok_or(err("a missing key"))?;
            b64.decode(v).map_err(|_| err("bad base64"))
        };
        Ok(Self {
            salt: bytes("salt")?,
            stored_key: bytes("stored_key")?,
            server_key: bytes("server_key")?,
            iterations: props
                .get("iterations")
                .ok_or(err("a missing key"))?
                .parse()
                .map_err(|_| err("iterations is not an integer"))?,
        })
    }
}

/// Java's `Double.toString` for the values quotas hold: `1024.0`, `12.5`, `1.0E7`, `1.0E-4`.
#[must_use]
pub fn java_double_to_string(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let abs = value.abs();
    if (1e-3..1e7).contains(&abs) {
        let s = format!("{value}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        // Shortest round-trip digits in scientific form, then Java's spelling: `d.dddE±n`.
        let s = format!("{value:e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((s.as_str(), "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_owned()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exponent}")
    }
}

/// The quota keys Kafka stores as integers (`LONG`/`INT` in `DynamicConfig`); the others
/// (`request_percentage`, `controller_mutation_rate`) are doubles.
#[must_use]
pub fn quota_is_integer(key: &str) -> bool {
    matches!(
        key,
        "producer_byte_rate" | "consumer_byte_rate" | "connection_creation_rate"
    )
}

/// A quota value as Kafka's `writeClientQuotas` stores it: an integer key as an integer
/// (`(value + 1e-6)` truncated), a double as `Double.toString`.
#[must_use]
pub fn quota_value_to_string(key: &str, value: f64) -> String {
    if quota_is_integer(key) {
        // Saturating float→int conversion, as the writer's values come from validated quotas.
        #[allow(clippy::cast_possible_truncation)]
        let n = (value + 1e-6) as i64;
        n.to_string()
    } else {
        java_double_to_string(value)
    }
}

/// The entity path of a config change for `entity_type` and a znode name
/// (`topics/foo`, `users/alice/clients/app`).
#[must_use]
pub fn entity_path(entity_type: &str, znode_name: &str) -> String {
    format!("{entity_type}/{znode_name}")
}

/// The config znode path an entity path points to.
#[must_use]
pub fn entity_znode_path(entity_path: &str) -> String {
    format!("{}/{entity_path}", paths::CONFIG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java() {
        // Java 17: Double.toString(1024.0) + " " + 12.5, 1e7, 1e-4, 123456789.0
        assert_eq!(java_double_to_string(1024.0), "1024.0");
        assert_eq!(java_double_to_string(12.5), "12.5");
        assert_eq!(java_double_to_string(1e7), "1.0E7");
        assert_eq!(java_double_to_string(1e-4), "1.0E-4");
        assert_eq!(java_double_to_string(123_456_789.0), "1.23456789E8");
        assert_eq!(quota_value_to_string("producer_byte_rate", 1024.0), "1024");
    }
}
