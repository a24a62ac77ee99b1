//! `meta.properties`, the identity file in every log directory (facts §4.6; Kafka 3.9
//! `metadata/properties/MetaProperties*.java`). Parsing and formatting only: reading and the
//! atomic write are the caller's (the file is written tmp → fsync → rename).
//!
//! | key | v0 (ZooKeeper mode) | v1 (KRaft) |
//! |---|---|---|
//! | `version` | `0` or absent | `1` |
//! | `broker.id` | optional | — |
//! | `node.id` | — | required |
//! | `cluster.id` | optional | required |
//! | `directory.id` | optional | optional (written by format since 3.7) |

use std::collections::BTreeMap;

use thiserror::Error;
use uuid::Uuid;

use crate::kafka_uuid::{
    KafkaUuidError, is_reserved_directory_id, parse_kafka_uuid, to_kafka_string,
};
use crate::properties::{PropertiesError, format_properties, parse_properties};

/// The file name.
pub const META_PROPERTIES_NAME: &str = "meta.properties";

const VERSION_PROP: &str = "version";
const CLUSTER_ID_PROP: &str = "cluster.id";
const BROKER_ID_PROP: &str = "broker.id";
const NODE_ID_PROP: &str = "node.id";
const DIRECTORY_ID_PROP: &str = "directory.id";

/// The layout version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MetaPropertiesVersion {
    /// ZooKeeper mode (also kept by clusters migrated to KRaft): `broker.id`, no guarantees.
    V0,
    /// KRaft: `node.id` and `cluster.id` always present.
    V1,
}

impl MetaPropertiesVersion {
    /// 0 or 1.
    #[must_use]
    pub fn number(self) -> u8 {
        match self {
            Self::V0 => 0,
            Self::V1 => 1,
        }
    }
}

/// Why a `meta.properties` text is invalid. Messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetaPropertiesError {
    /// The text is not properties syntax.
    #[error("invalid properties syntax")]
    Syntax(#[from] PropertiesError),
    /// `version` is not an integer.
    #[error("Invalid meta.properties version string '{0}'")]
    InvalidVersionString(String),
    /// `version` is an integer other than 0 or 1.
    #[error("Unknown meta.properties version number {0}")]
    UnknownVersion(i64),
    /// A required integer key is missing (v1 `node.id`).
    #[error("Failed to find {0}")]
    MissingIntProperty(&'static str),
    /// An integer key does not parse.
    #[error("Unable to read {0} as a base-10 number.")]
    NotANumber(&'static str),
    /// `directory.id` is not a Kafka UUID.
    #[error("Unable to read directory.id as a Uuid: {0}")]
    InvalidDirectoryId(KafkaUuidError),
    /// A v1 file without `cluster.id`.
    #[error("cluster.id was not found.")]
    MissingClusterId,
}

/// The contents of one `meta.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// File layout version.
    pub version: MetaPropertiesVersion,
    /// Cluster id (Kafka's base64 UUID text; not validated, as in Kafka). Always set in v1.
    pub cluster_id: Option<String>,
    /// `node.id` (v1) or `broker.id` (v0). Always set in v1.
    pub node_id: Option<i32>,
    /// This directory's id, if any.
    pub directory_id: Option<Uuid>,
}

impl MetaProperties {
    /// A v1 (KRaft) file.
    #[must_use]
    pub fn v1(cluster_id: impl Into<String>, node_id: i32, directory_id: Option<Uuid>) -> Self {
        Self {
            version: MetaPropertiesVersion::V1,
            cluster_id: Some(cluster_id.into()),
            node_id: Some(node_id),
            directory_id,
        }
    }

    /// Parses the file text.
    ///
    /// # Errors
    /// [`MetaPropertiesError`] with Kafka's message.
    pub fn parse(text: &str) -> Result<Self, MetaPropertiesError> {
        let mut props = BTreeMap::new();
        for entry in parse_properties(text)? {
            props.insert(entry.key, entry.value);
        }
        Self::from_map(&props)
    }

    /// Builds from already-parsed properties (last value per key).
    ///
    /// # Errors
    /// [`MetaPropertiesError`] with Kafka's message.
    pub fn from_map(props: &BTreeMap<String, String>) -> Result<Self, MetaPropertiesError> {
        let version_text = props.get(VERSION_PROP).map_or("0", String::as_str);
        let number: i64 = version_text
            .trim()
            .parse::<i32>()
            .map_err(|_| MetaPropertiesError::InvalidVersionString(version_text.to_owned()))?
            .into();
        let version = match number {
            0 => MetaPropertiesVersion::V0,
            1 => MetaPropertiesVersion::V1,
            other => return Err(MetaPropertiesError::UnknownVersion(other)),
        };
        let node_id = match version {
            MetaPropertiesVersion::V0 => props
                .contains_key(BROKER_ID_PROP)
                .then(|| required_int(props, BROKER_ID_PROP))
                .transpose()?,
            MetaPropertiesVersion::V1 => Some(required_int(props, NODE_ID_PROP)?),
        };
        let cluster_id = props.get(CLUSTER_ID_PROP).cloned();
        let directory_id = props
            .get(DIRECTORY_ID_PROP)
            .map(|text| parse_kafka_uuid(text).map_err(MetaPropertiesError::InvalidDirectoryId))
            .transpose()?;
        if version == MetaPropertiesVersion::V1 && cluster_id.is_none() {
            return Err(MetaPropertiesError::MissingClusterId);
        }
        Ok(Self {
            version,
            cluster_id,
            node_id,
            directory_id,
        })
    }

    /// The key/value pairs Kafka's `toProperties` produces, in the order Kafka's `store` writes
    /// them for a v1 file (`node.id`, `directory.id`, `version`, `cluster.id`).
    #[must_use]
    pub fn to_properties(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(4);
        if let Some(node_id) = self.node_id {
            let key = match self.version {
                MetaPropertiesVersion::V0 => BROKER_ID_PROP,
                MetaPropertiesVersion::V1 => NODE_ID_PROP,
            };
            out.push((key, node_id.to_string()));
        }
        if let Some(directory_id) = &self.directory_id {
            out.push((DIRECTORY_ID_PROP, to_kafka_string(directory_id)));
        }
        out.push((VERSION_PROP, self.version.number().to_string()));
        if let Some(cluster_id) = &self.cluster_id {
            out.push((CLUSTER_ID_PROP, cluster_id.clone()));
        }
        out
    }

    /// The file text, with the `#` and `#<date>` header lines of `Properties.store`.
    #[must_use]
    pub fn to_file_text(&self, unix_time_secs: i64) -> String {
        let props = self.to_properties();
        let pairs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (*k, v.as_str())).collect();
        format_properties(&pairs, unix_time_secs)
    }

    /// `{cluster.id=…, directory.id=…, node.id=1, version=1}`: the sorted map `kafka-storage
    /// info` prints after "Found metadata: ".
    #[must_use]
    pub fn to_sorted_map_string(&self) -> String {
        let mut props = self.to_properties();
        props.sort_by(|a, b| a.0.cmp(b.0));
        let inner: Vec<String> = props.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{{{}}}", inner.join(", "))
    }
}

impl std::fmt::Display for MetaProperties {
    /// Kafka's `MetaProperties.toString`: `MetaProperties(version=1, clusterId=…, nodeId=1, directoryId=…)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetaProperties(version={}", self.version.number())?;
        if let Some(cluster_id) = &self.cluster_id {
            write!(f, ", clusterId={cluster_id}")?;
        }
        if let Some(node_id) = self.node_id {
            write!(f, ", nodeId={node_id}")?;
        }
        if let Some(directory_id) = &self.directory_id {
            write!(f, ", directoryId={}", to_kafka_string(directory_id))?;
        }
        f.write_str(")")
    }
}

fn required_int(
    props: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<i32, MetaPropertiesError> {
    props
        .get(key)
        .ok_or(MetaPropertiesError::MissingIntProperty(key))?
        .parse()
        .map_err(|_| MetaPropertiesError::NotANumber(key))
}

/// Why the `meta.properties` files of one node's directories do not agree (Kafka's
/// `MetaPropertiesEnsemble.verify`; messages are Kafka's).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnsembleError {
    /// Two directories (or a directory and the expected value) disagree on the cluster id.
    #[error("Invalid cluster.id in: {path}. Expected {expected}, but read {found}")]
    ClusterIdMismatch {
        /// The `meta.properties` path.
        path: String,
        /// Expected cluster id.
        expected: String,
        /// Cluster id in the file.
        found: String,
    },
    /// Two directories (or a directory and the configured node id) disagree on the node id.
    #[error(
        "Stored node id {found} doesn't match previous node id {expected} in {path}. If you moved your data, make sure your configured node id matches. If you intend to create a new node, you should remove all data in your data directories."
    )]
    NodeIdMismatch {
        /// The `meta.properties` path.
        path: String,
        /// Expected node id.
        expected: i32,
        /// Node id in the file.
        found: i32,
    },
    /// A directory id in the reserved range.
    #[error("Invalid resrved directory ID {directory_id} found in {log_dir}")]
    ReservedDirectoryId {
        /// The directory id (Kafka text).
        directory_id: String,
        /// The log directory.
        log_dir: String,
    },
    /// Two directories share a directory id.
    #[error(
        "Duplicate directory ID Optional[{directory_id}] found. It was the ID of {first}, but also of {second}"
    )]
    DuplicateDirectoryId {
        /// The directory id (Kafka text).
        directory_id: String,
        /// The first directory.
        first: String,
        /// The second directory.
        second: String,
    },
}

/// Checks that `dirs` (log directory path → its parsed file, in any order) agree with each other
/// and with the expected ids. Directories are visited in path order.
///
/// # Errors
/// The first [`EnsembleError`] found.
pub fn verify_ensemble<'a>(
    dirs: impl IntoIterator<Item = (&'a str, &'a MetaProperties)>,
    mut expected_cluster_id: Option<String>,
    mut expected_node_id: Option<i32>,
) -> Result<(), EnsembleError> {
    let mut dirs: Vec<_> = dirs.into_iter().collect();
    dirs.sort_by(|a, b| a.0.cmp(b.0));
    let mut seen: BTreeMap<Uuid, &str> = BTreeMap::new();
    for (log_dir, props) in dirs {
        let path = format!("{log_dir}/{META_PROPERTIES_NAME}");
        if let Some(found) = &props.cluster_id {
            match &expected_cluster_id {
                None => expected_cluster_id = Some(found.clone()),
                Some(expected) if expected != found => {
                    return Err(EnsembleError::ClusterIdMismatch {
                        path,
                        expected: expected.clone(),
                        found: found.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(found) = props.node_id {
            match expected_node_id {
                None => expected_node_id = Some(found),
                Some(expected) if expected != found => {
                    return Err(EnsembleError::NodeIdMismatch {
                        path,
                        expected,
                        found,
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(directory_id) = props.directory_id {
            if is_reserved_directory_id(&directory_id) {
                return Err(EnsembleError::ReservedDirectoryId {
                    directory_id: to_kafka_string(&directory_id),
                    log_dir: log_dir.to_owned(),
                });
            }
            if let Some(first) = seen.insert(directory_id, log_dir) {
                return Err(EnsembleError::DuplicateDirectoryId {
                    directory_id: to_kafka_string(&directory_id),
                    first: first.to_owned(),
                    second: log_dir.to_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Kafka 3.9's `kafka-storage format` wrote.
    const KAFKA_V1: &str = "#\n#Sun Nov 29 14:48:06 UTC 2026\nnode.id=1\ndirectory.id=RXmJz-cpSbqo1IMdXqyzRA\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n";

    #[test]
    fn kafka_v1_file_round_trips_byte_for_byte() {
        let props = MetaProperties::parse(KAFKA_V1).expect("Kafka's file");
        assert_eq!(props.version, MetaPropertiesVersion::V1);
        assert_eq!(props.node_id, Some(1));
        assert_eq!(props.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
        assert_eq!(props.to_file_text(1_795_963_686), KAFKA_V1);
        assert_eq!(
            props.to_sorted_map_string(),
            "{cluster.id=MkU3OEVBNTcwNTJENDM2Qk, directory.id=RXmJz-cpSbqo1IMdXqyzRA, node.id=1, version=1}"
        );
    }

    #[test]
    fn v0_files_from_zookeeper_mode() {
        let props = MetaProperties::parse("broker.id=3\ncluster.id=abc\n").expect("v0");
        assert_eq!(props.version, MetaPropertiesVersion::V0);
        assert_eq!(props.node_id, Some(3));
        assert_eq!(
            props.to_sorted_map_string(),
            "{broker.id=3, cluster.id=abc, version=0}"
        );
        let empty = MetaProperties::parse("version=0\n").expect("v0 has no required keys");
        assert_eq!(empty.node_id, None);
        assert_eq!(empty.to_string(), "MetaProperties(version=0)");
    }

    #[test]
    fn invalid_files_give_kafka_messages() {
        let cases = [
            ("version=x\n", "Invalid meta.properties version string 'x'"),
            ("version=2\n", "Unknown meta.properties version number 2"),
            ("version=1\ncluster.id=a\n", "Failed to find node.id"),
            (
                "version=1\nnode.id=one\ncluster.id=a\n",
                "Unable to read node.id as a base-10 number.",
            ),
            ("version=1\nnode.id=1\n", "cluster.id was not found."),
            (
                "broker.id=x\n",
                "Unable to read broker.id as a base-10 number.",
            ),
            (
                "version=1\nnode.id=1\ncluster.id=a\ndirectory.id=abc\n",
                "Unable to read directory.id as a Uuid: Input string `abc` decoded as 2 bytes, which is not equal to the expected 16 bytes of a base64-encoded UUID",
            ),
        ];
        for (text, message) in cases {
            let err = MetaProperties::parse(text).expect_err(text);
            assert_eq!(err.to_string(), message, "{text:?}");
        }
    }

    #[test]
    fn ensemble_rules() {
        let a = MetaProperties::v1("c1", 1, Some(Uuid::from_u64_pair(1, 1)));
        let b = MetaProperties::v1("c1", 1, Some(Uuid::from_u64_pair(1, 2)));
        assert_eq!(
            verify_ensemble([("/a", &a), ("/b", &b)], None, None),
            Ok(())
        );
        let other_cluster = MetaProperties::v1("c2", 1, None);
        assert!(matches!(
            verify_ensemble([("/a", &a), ("/b", &other_cluster)], None, None),
            Err(EnsembleError::ClusterIdMismatch { .. })
        ));
        assert!(matches!(
            verify_ensemble([("/a", &a)], Some("c1".into()), Some(2)),
            Err(EnsembleError::NodeIdMismatch {
                expected: 2,
                found: 1,
                ..
            })
        ));
        assert!(matches!(
            verify_ensemble([("/a", &a), ("/b", &a)], None, None),
            Err(EnsembleError::DuplicateDirectoryId { .. })
        ));
        let reserved = MetaProperties::v1("c1", 1, Some(Uuid::from_u64_pair(0, 2)));
        assert!(matches!(
            verify_ensemble([("/a", &reserved)], None, None),
            Err(EnsembleError::ReservedDirectoryId { .. })
        ));
    }
}
