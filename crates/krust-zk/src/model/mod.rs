//! Kafka 3.9's znode model (facts §6.5–§6.9): every path the migration reads or writes, and a
//! typed codec for each znode's content, byte-compatible with what Kafka 3.9 writes (same
//! fields, same key order — see [`order`] — same number formats) and accepting everything
//! Kafka's decoders accept (any key order, every version Kafka reads).
//!
//! Decoders take the znode's path only to name it in a [`ZNodeError`]: bad bytes are an error,
//! never a panic.
//!
//! # Layout
//!
//! - [`paths`]: path builders (`/brokers/topics/<t>/partitions/<p>/state`, `/config/<type>/<name>`,
//!   ACL and change-notification paths, …) and the persistent paths Kafka creates at start-up.
//! - [`names`]: Kafka's `Sanitizer` (URL-encoded znode names) and the `<default>` entity.
//! - [`cluster`]: `/cluster/id`, `/controller`, `/controller_epoch`, `/migration`,
//!   `/brokers/ids/<id>`, `/feature`.
//! - [`topics`]: `/brokers/topics/<t>`, partition state, `/latest_producer_id_block`.
//! - [`configs`]: `/config/<type>/<name>` contents, config-change notifications, SCRAM
//!   credential strings.
//! - [`acls`]: `/kafka-acl*` contents, resource/operation/permission names, ACL change
//!   notifications.
//! - [`tokens`]: delegation token znodes (`/delegation_token/tokens/<id>`).
//! - [`password`]: Kafka's `PasswordEncoder` for password-type broker configs.
//! - [`order`]: the key orders of Kafka's JSON writer.

pub mod acls;
pub mod cluster;
pub mod configs;
mod json;
pub mod names;
pub mod order;
pub mod password;
pub mod paths;
pub mod tokens;
pub mod topics;

/// Why a znode's content could not be decoded. Every variant names the znode: the remedy is
/// to look at that znode (`zookeeper-shell get <path>`); it was written by something other than
/// Kafka 3.x, or by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZNodeError {
    /// The bytes are not JSON.
    #[error("{path}: not valid JSON: {message}")]
    Json {
        /// The znode.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// The JSON is not an object.
    #[error("{path}: expected a JSON object")]
    NotAnObject {
        /// The znode.
        path: String,
    },
    /// A field is missing or has the wrong type.
    #[error("{path}: field {field:?} must be {expected}")]
    Field {
        /// The znode.
        path: String,
        /// The field.
        field: String,
        /// What Kafka expects there.
        expected: &'static str,
    },
    /// The `version` is one Kafka 3.9 does not read.
    #[error("{path}: unsupported version {version}")]
    UnsupportedVersion {
        /// The znode.
        path: String,
        /// The version found.
        version: i64,
    },
    /// The content is well-formed but its value is not (a bad name, a bad number, …).
    #[error("{path}: invalid {what}: {value:?}")]
    Invalid {
        /// The znode.
        path: String,
        /// What is invalid.
        what: &'static str,
        /// The offending text.
        value: String,
    },
}

impl ZNodeError {
    pub(crate) fn invalid(path: &str, what: &'static str, value: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.to_owned(),
            what,
            value: value.into(),
        }
    }

    pub(crate) fn version(path: &str, version: i64) -> Self {
        Self::UnsupportedVersion {
            path: path.to_owned(),
            version,
        }
    }

    /// The znode the error is about.
    #[must_use]
    pub fn path(&self) -> &str {
        match self {
            Self::Json { path, .. }
            | Self::NotAnObject { path }
            | Self::Field { path, .. }
            | Self::UnsupportedVersion { path, .. }
            | Self::Invalid { path, .. } => path,
        }
    }
}
