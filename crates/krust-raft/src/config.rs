//! `controller.quorum.*` configuration, with Kafka 3.9's names and defaults (`QuorumConfig`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::types::NodeId;

/// `controller.quorum.voters`.
pub const QUORUM_VOTERS_CONFIG: &str = "controller.quorum.voters";
/// `controller.quorum.election.timeout.ms`.
pub const ELECTION_TIMEOUT_MS_CONFIG: &str = "controller.quorum.election.timeout.ms";
/// `controller.quorum.fetch.timeout.ms`.
pub const FETCH_TIMEOUT_MS_CONFIG: &str = "controller.quorum.fetch.timeout.ms";
/// `controller.quorum.election.backoff.max.ms`.
pub const ELECTION_BACKOFF_MAX_MS_CONFIG: &str = "controller.quorum.election.backoff.max.ms";
/// `controller.quorum.append.linger.ms`.
pub const APPEND_LINGER_MS_CONFIG: &str = "controller.quorum.append.linger.ms";
/// `controller.quorum.request.timeout.ms`.
pub const REQUEST_TIMEOUT_MS_CONFIG: &str = "controller.quorum.request.timeout.ms";
/// `controller.quorum.retry.backoff.ms`.
pub const RETRY_BACKOFF_MS_CONFIG: &str = "controller.quorum.retry.backoff.ms";

/// Kafka's `MAX_FETCH_WAIT_MS`: how long a Raft Fetch may park on the leader.
pub const MAX_FETCH_WAIT_MS: u64 = 500;
/// Kafka's `MAX_BATCH_SIZE_BYTES` = `MAX_FETCH_SIZE_BYTES` (8 MiB).
pub const MAX_BATCH_SIZE_BYTES: usize = 8 * 1024 * 1024;
/// Batches the leader's accumulator may hold before appends fail with a buffer error.
pub const MAX_ACCUMULATED_BATCHES: usize = 10;
/// Base of the candidate's binary exponential backoff (`RETRY_BACKOFF_BASE_MS`).
pub const ELECTION_BACKOFF_BASE_MS: u64 = 100;
/// Observers that have not fetched for this long leave DescribeQuorum's observer list.
pub const OBSERVER_SESSION_TIMEOUT_MS: u64 = 300_000;

/// A static voter from `controller.quorum.voters` (`id@host:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoterAddress {
    /// The voter's `node.id`.
    pub id: NodeId,
    /// Host name or IP.
    pub host: String,
    /// Port of the controller listener.
    pub port: u16,
}

/// Settings of one replica. Times are plain durations; the core never reads a clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftConfig {
    /// `node.id` of this replica.
    pub node_id: NodeId,
    /// The cluster id from `meta.properties`; requests carrying another one are rejected.
    pub cluster_id: String,
    /// Static voter set (`controller.quorum.voters`, kraft.version 0), sorted by id.
    pub voters: Vec<NodeId>,
    /// `controller.quorum.election.timeout.ms` (default 1000).
    pub election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms` (default 2000).
    pub fetch_timeout_ms: u64,
    /// `controller.quorum.election.backoff.max.ms` (default 1000).
    pub election_backoff_max_ms: u64,
    /// `controller.quorum.append.linger.ms` (default 25).
    pub append_linger_ms: u64,
    /// `controller.quorum.request.timeout.ms` (default 2000).
    pub request_timeout_ms: u64,
    /// `controller.quorum.retry.backoff.ms` (default 20).
    pub retry_backoff_ms: u64,
    /// `MaxWaitMs` of the Fetch requests this replica sends (Kafka: fixed 500).
    pub fetch_max_wait_ms: u64,
    /// Largest batch the leader builds and largest Fetch answer it sends (8 MiB).
    pub max_batch_size_bytes: usize,
}

impl RaftConfig {
    /// Kafka's defaults for a replica `node_id` of `cluster_id` with the given static voters.
    #[must_use]
    pub fn new(
        node_id: NodeId,
        cluster_id: impl Into<String>,
        voters: impl IntoIterator<Item = NodeId>,
    ) -> Self {
        let mut voters: Vec<NodeId> = voters.into_iter().collect();
        voters.sort();
        voters.dedup();
        Self {
            node_id,
            cluster_id: cluster_id.into(),
            voters,
            election_timeout_ms: 1000,
            fetch_timeout_ms: 2000,
            election_backoff_max_ms: 1000,
            append_linger_ms: 25,
            request_timeout_ms: 2000,
            retry_backoff_ms: 20,
            fetch_max_wait_ms: MAX_FETCH_WAIT_MS,
            max_batch_size_bytes: MAX_BATCH_SIZE_BYTES,
        }
    }

    /// Reads the `controller.quorum.*` keys of a `server.properties` map; absent keys keep
    /// Kafka's defaults, unknown keys are ignored (they belong to other components).
    ///
    /// # Errors
    /// [`ConfigError`] when a value is not a valid number or voter list, or no voter is given.
    pub fn from_properties(
        node_id: NodeId,
        cluster_id: impl Into<String>,
        props: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let voters = match props.get(QUORUM_VOTERS_CONFIG) {
            Some(v) => parse_quorum_voters(v)?,
            None => Vec::new(),
        };
        if voters.is_empty() {
            return Err(ConfigError::NoVoters);
        }
        let mut config = Self::new(node_id, cluster_id, voters.iter().map(|v| v.id));
        let fields: [(&str, &mut u64); 6] = [
            (ELECTION_TIMEOUT_MS_CONFIG, &mut config.election_timeout_ms),
            (FETCH_TIMEOUT_MS_CONFIG, &mut config.fetch_timeout_ms),
            (
                ELECTION_BACKOFF_MAX_MS_CONFIG,
                &mut config.election_backoff_max_ms,
            ),
            (APPEND_LINGER_MS_CONFIG, &mut config.append_linger_ms),
            (REQUEST_TIMEOUT_MS_CONFIG, &mut config.request_timeout_ms),
            (RETRY_BACKOFF_MS_CONFIG, &mut config.retry_backoff_ms),
        ];
        for (key, slot) in fields {
            if let Some(raw) = props.get(key) {
                // Kafka declares these as `int` with no negative values allowed.
                let value: i32 = raw.trim().parse().map_err(|_| ConfigError::NotAnInteger {
                    key,
                    value: raw.clone(),
                })?;
                *slot = u64::try_from(value).map_err(|_| ConfigError::Negative { key, value })?;
            }
        }
        if config.fetch_timeout_ms == 0 {
            return Err(ConfigError::Zero {
                key: FETCH_TIMEOUT_MS_CONFIG,
            });
        }
        if config.request_timeout_ms == 0 {
            return Err(ConfigError::Zero {
                key: REQUEST_TIMEOUT_MS_CONFIG,
            });
        }
        Ok(config)
    }

    /// Whether this replica is in the voter set (otherwise it is an observer).
    #[must_use]
    pub fn is_voter(&self) -> bool {
        self.voters.binary_search(&self.node_id).is_ok()
    }

    /// Votes (or fetch acknowledgements) needed for a majority: `⌊n/2⌋ + 1`.
    #[must_use]
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// Leader check-quorum window: 1.5 × fetch timeout.
    #[must_use]
    pub fn check_quorum_timeout(&self) -> Duration {
        Duration::from_millis(self.fetch_timeout_ms.saturating_mul(3) / 2)
    }

    /// BeginQuorumEpoch heartbeat period: fetch timeout / 2.
    #[must_use]
    pub fn begin_quorum_epoch_period(&self) -> Duration {
        Duration::from_millis(self.fetch_timeout_ms / 2)
    }
}

/// Parses `controller.quorum.voters` (`id@host:port,id@host:port`).
///
/// # Errors
/// [`ConfigError::BadVoter`] for an entry that is not `id@host:port`, [`ConfigError::WildcardHost`]
/// for host `0.0.0.0` (Kafka rejects it), [`ConfigError::DuplicateVoter`] for a repeated id.
pub fn parse_quorum_voters(value: &str) -> Result<Vec<VoterAddress>, ConfigError> {
    let mut voters: Vec<VoterAddress> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || ConfigError::BadVoter {
            entry: entry.to_string(),
        };
        let (id, address) = entry.split_once('@').ok_or_else(bad)?;
        let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
        let id: i32 = id.trim().parse().map_err(|_| bad())?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if id < 0 || host.is_empty() {
            return Err(bad());
        }
        if host == "0.0.0.0" {
            return Err(ConfigError::WildcardHost {
                entry: entry.to_string(),
            });
        }
        if voters.iter().any(|v| v.id.0 == id) {
            return Err(ConfigError::DuplicateVoter { id });
        }
        voters.push(VoterAddress {
            id: NodeId(id),
            host: host.to_string(),
            port,
        });
    }
    Ok(voters)
}

/// A `controller.quorum.*` value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The value is not an `int`. Fix the value in `server.properties`.
    #[error("{key}: {value:?} is not an integer")]
    NotAnInteger {
        /// Config key.
        key: &'static str,
        /// Raw value.
        value: String,
    },
    /// Kafka does not allow negative values for this key.
    #[error("{key}: {value} must not be negative")]
    Negative {
        /// Config key.
        key: &'static str,
        /// Parsed value.
        value: i32,
    },
    /// A timeout of zero would spin; Kafka requires at least 1.
    #[error("{key} must be at least 1")]
    Zero {
        /// Config key.
        key: &'static str,
    },
    /// An entry of `controller.quorum.voters` is not `id@host:port`.
    #[error("controller.quorum.voters: entry {entry:?} is not id@host:port")]
    BadVoter {
        /// The offending entry.
        entry: String,
    },
    /// Voters must be reachable: `0.0.0.0` is not an address to connect to.
    #[error("controller.quorum.voters: entry {entry:?} uses the wildcard host 0.0.0.0")]
    WildcardHost {
        /// The offending entry.
        entry: String,
    },
    /// The same voter id appears twice.
    #[error("controller.quorum.voters: voter id {id} appears more than once")]
    DuplicateVoter {
        /// The repeated id.
        id: i32,
    },
    /// A static quorum needs at least one voter.
    #[error("controller.quorum.voters is empty")]
    NoVoters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let c = RaftConfig::new(NodeId(1), "c", [NodeId(1)]);
        assert_eq!(
            (
                c.election_timeout_ms,
                c.fetch_timeout_ms,
                c.election_backoff_max_ms,
                c.append_linger_ms
            ),
            (1000, 2000, 1000, 25)
        );
        assert_eq!(
            (
                c.request_timeout_ms,
                c.retry_backoff_ms,
                c.fetch_max_wait_ms
            ),
            (2000, 20, 500)
        );
        assert_eq!(c.check_quorum_timeout(), Duration::from_millis(3000));
        assert_eq!(c.begin_quorum_epoch_period(), Duration::from_millis(1000));
    }

    #[test]
    fn properties_are_read_with_kafka_names() {
        let mut p = BTreeMap::new();
        p.insert(
            QUORUM_VOTERS_CONFIG.to_string(),
            "1@localhost:9093, 2@h2:9093,3@[::1]:9093".to_string(),
        );
        p.insert(ELECTION_TIMEOUT_MS_CONFIG.to_string(), "1500".to_string());
        let c = RaftConfig::from_properties(NodeId(2), "c", &p).expect("valid");
        assert_eq!(c.voters, vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(c.election_timeout_ms, 1500);
        assert!(c.is_voter());
        assert_eq!(c.majority(), 2);
    }

    #[test]
    fn bad_properties_get_typed_errors() {
        let cases: &[(&str, &str, ConfigError)] = &[
            (
                QUORUM_VOTERS_CONFIG,
                "1@h",
                ConfigError::BadVoter {
                    entry: "1@h".into(),
                },
            ),
            (
                QUORUM_VOTERS_CONFIG,
                "x@h:1",
                ConfigError::BadVoter {
                    entry: "x@h:1".into(),
                },
            ),
            (
                QUORUM_VOTERS_CONFIG,
                "1@h:70000",
                ConfigError::BadVoter {
                    entry: "1@h:70000".into(),
                },
            ),
            (
                QUORUM_VOTERS_CONFIG,
                "1@0.0.0.0:1",
                ConfigError::WildcardHost {
                    entry: "1@0.0.0.0:1".into(),
                },
            ),
            (
                QUORUM_VOTERS_CONFIG,
                "1@a:1,1@b:1",
                ConfigError::DuplicateVoter { id: 1 },
            ),
            (QUORUM_VOTERS_CONFIG, "", ConfigError::NoVoters),
        ];
        for (key, value, want) in cases {
            let mut p = BTreeMap::new();
            p.insert((*key).to_string(), (*value).to_string());
            assert_eq!(
                RaftConfig::from_properties(NodeId(1), "c", &p)
                    .err()
                    .as_ref(),
                Some(want),
                "{value}"
            );
        }
        let mut p = BTreeMap::new();
        p.insert(QUORUM_VOTERS_CONFIG.to_string(), "1@a:1".to_string());
        p.insert(FETCH_TIMEOUT_MS_CONFIG.to_string(), "-5".to_string());
        assert_eq!(
            RaftConfig::from_properties(NodeId(1), "c", &p),
            Err(ConfigError::Negative {
                key: FETCH_TIMEOUT_MS_CONFIG,
                value: -5
            })
        );
        p.insert(FETCH_TIMEOUT_MS_CONFIG.to_string(), "abc".to_string());
        assert!(matches!(
            RaftConfig::from_properties(NodeId(1), "c", &p),
            Err(ConfigError::NotAnInteger { .. })
        ));
    }
}
