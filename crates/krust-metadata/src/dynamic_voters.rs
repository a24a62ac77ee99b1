//! KIP-853 initial controllers as given to `kafka-storage format --initial-controllers`
//! (`id@host:port:directoryId,…`) and their `VotersRecord` (Kafka 3.9 `raft/DynamicVoter(s).java`).

use std::collections::BTreeMap;

use kafka_protocol::messages::VotersRecord;
use kafka_protocol::messages::voters_record::{Endpoint, KRaftVersionFeature, Voter};
use kafka_protocol::protocol::StrBytes;
use thiserror::Error;
use uuid::Uuid;

use crate::kafka_uuid::{parse_kafka_uuid, to_kafka_string};

/// One initial controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicVoter {
    /// Node id (≥ 0).
    pub node_id: i32,
    /// Host name or address (without IPv6 brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The voter's metadata directory id.
    pub directory_id: Uuid,
}

/// Why an `--initial-controllers` value does not parse. Messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DynamicVotersError {
    /// Kafka's `IllegalArgumentException` text.
    #[error("{0}")]
    Invalid(&'static str),
    /// `Invalid negative node id N in dynamic voter string.`
    #[error("Invalid negative node id {0} in dynamic voter string.")]
    NegativeNodeId(i64),
    /// `Invalid port N in dynamic voter string.`
    #[error("Invalid port {0} in dynamic voter string.")]
    InvalidPort(i64),
    /// The same node id twice.
    #[error("Node id {0} was specified more than once.")]
    DuplicateNodeId(i32),
}

impl DynamicVoter {
    /// Parses `id@host:port:directoryId` (IPv6 hosts in brackets).
    ///
    /// # Errors
    /// [`DynamicVotersError`] with Kafka's message.
    pub fn parse(input: &str) -> Result<Self, DynamicVotersError> {
        use DynamicVotersError::Invalid;
        let input = input.trim();
        let at = input
            .find('@')
            .ok_or(Invalid("No @ found in dynamic voter string."))?;
        if at == 0 {
            return Err(Invalid("Invalid @ at beginning of dynamic voter string."));
        }
        let node_id: i64 = java_parse_int(&input[..at])
            .ok_or(Invalid("Failed to parse node id in dynamic voter string."))?;
        if node_id < 0 {
            return Err(DynamicVotersError::NegativeNodeId(node_id));
        }
        let mut rest = &input[at + 1..];
        if rest.is_empty() {
            return Err(Invalid("No hostname found after node id."));
        }
        let host;
        if let Some(bracketed) = rest.strip_prefix('[') {
            let end = bracketed.find(']').ok_or(Invalid(
                "Hostname began with left bracket, but no right bracket was found.",
            ))?;
            host = &bracketed[..end];
            rest = &bracketed[end + 1..];
        } else {
            let colon = rest
                .find(':')
                .ok_or(Invalid("No colon following hostname could be found."))?;
            host = &rest[..colon];
            rest = &rest[colon..];
        }
        let rest = rest
            .strip_prefix(':')
            .ok_or(Invalid("Port section must start with a colon."))?;
        let colon = rest
            .find(':')
            .ok_or(Invalid("No colon following port could be found."))?;
        let port: i64 = java_parse_int(&rest[..colon])
            .ok_or(Invalid("Failed to parse port in dynamic voter string."))?;
        let port = u16::try_from(port).map_err(|_| DynamicVotersError::InvalidPort(port))?;
        let directory_id = parse_kafka_uuid(&rest[colon + 1..])
            .map_err(|_| Invalid("Failed to parse directory ID in dynamic voter string."))?;
        Ok(Self {
            node_id: i32::try_from(node_id)
                .map_err(|_| Invalid("Failed to parse node id in dynamic voter string."))?,
            host: host.to_owned(),
            port,
            directory_id,
        })
    }
}

/// `Integer.parseInt`: optional sign, ASCII digits, must fit an i32.
fn java_parse_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i32>().ok().map(i64::from)
}

impl std::fmt::Display for DynamicVoter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = to_kafka_string(&self.directory_id);
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}:{dir}", self.node_id, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}:{dir}", self.node_id, self.host, self.port)
        }
    }
}

/// The initial voter set, by node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicVoters {
    voters: BTreeMap<i32, DynamicVoter>,
}

impl DynamicVoters {
    /// Parses a comma-separated list (empty entries are skipped).
    ///
    /// # Errors
    /// [`DynamicVotersError`]; "No voters given." for an empty list.
    pub fn parse(input: &str) -> Result<Self, DynamicVotersError> {
        let voters = input
            .trim()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(DynamicVoter::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(voters)
    }

    /// Builds a voter set.
    ///
    /// # Errors
    /// "No voters given." or a duplicate node id.
    pub fn new(voters: Vec<DynamicVoter>) -> Result<Self, DynamicVotersError> {
        if voters.is_empty() {
            return Err(DynamicVotersError::Invalid("No voters given."));
        }
        let mut map = BTreeMap::new();
        for voter in voters {
            let id = voter.node_id;
            if map.insert(id, voter).is_some() {
                return Err(DynamicVotersError::DuplicateNodeId(id));
            }
        }
        Ok(Self { voters: map })
    }

    /// The voters by node id.
    #[must_use]
    pub fn voters(&self) -> &BTreeMap<i32, DynamicVoter> {
        &self.voters
    }

    /// The `VotersRecord` the formatter writes: one endpoint per voter named after the first
    /// controller listener (upper-cased, as Kafka's `ListenerName.normalised`), supported
    /// kraft.version 0–1. Voters are listed in the iteration order of the `java.util.HashMap`
    /// Kafka builds the record from, so the bytes match Kafka's.
    #[must_use]
    pub fn to_voters_record(&self, controller_listener_name: &str) -> VotersRecord {
        let listener = controller_listener_name.to_uppercase();
        let ids: Vec<i32> = self.voters.keys().copied().collect();
        let voters = java_hash_map_order(&ids)
            .into_iter()
            .filter_map(|id| self.voters.get(&id))
            .map(|v| {
                Voter::default()
                    .with_voter_id(v.node_id.into())
                    .with_voter_directory_id(v.directory_id)
                    .with_endpoints(vec![
                        Endpoint::default()
                            .with_name(StrBytes::from_string(listener.clone()))
                            .with_host(StrBytes::from_string(java_host_string(&v.host)))
                            .with_port(v.port),
                    ])
                    .with_k_raft_version_feature(
                        KRaftVersionFeature::default()
                            .with_min_supported_version(0)
                            .with_max_supported_version(1),
                    )
            })
            .collect();
        VotersRecord::default().with_version(0).with_voters(voters)
    }
}

impl std::fmt::Display for DynamicVoters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.voters.values().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// What `new InetSocketAddress(host, port).getHostString()` gives in Kafka: IP literals come back
/// in Java's `getHostAddress` form (IPv6 as eight uncompressed lower-case hex groups, IPv4-mapped
/// IPv6 as IPv4), names as given.
fn java_host_string(host: &str) -> String {
    if let Ok(v6) = host.parse::<std::net::Ipv6Addr>() {
        if let Some(v4) = v6.to_ipv4_mapped() {
            return v4.to_string();
        }
        let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
        return groups.join(":");
    }
    host.to_owned()
}

/// Iteration order of `new HashMap<>(source)` where `source` is a default `HashMap` filled with
/// `ids` in ascending order (Kafka's `DynamicVoters.toVoterSet` → `VoterSet.fromMap`): by bucket
/// of the final table, then by bucket of the source table, then by insertion (ascending id).
fn java_hash_map_order(ids: &[i32]) -> Vec<i32> {
    fn spread(id: i32) -> u32 {
        let h = id as u32;
        h ^ (h >> 16)
    }
    let n = ids.len();
    // A default HashMap starts at 16 buckets and doubles when size exceeds 3/4 of them.
    let mut source_cap = 16usize;
    while n > source_cap * 3 / 4 {
        source_cap *= 2;
    }
    // `new HashMap<>(map)` sizes its table to the power of two ≥ (int)(n / 0.75 + 1).
    let wanted = (n as f32 / 0.75 + 1.0) as usize;
    let final_cap = wanted.max(1).next_power_of_two();
    let mut sorted: Vec<i32> = ids.to_vec();
    sorted.sort_by_key(|&id| {
        let h = spread(id) as usize;
        (h & (final_cap - 1), h & (source_cap - 1), id)
    });
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_examples() {
        let voters = DynamicVoters::parse(
            "0@example.com:8082:JEXY6aqzQY-32P5TStzaFg,1@example.com:8083:MvDxzVmcRsaTz33bUuRU6A,2@[::1]:8084:07R5amHmR32VDA6jHkGbTA",
        )
        .expect("Kafka's help example");
        assert_eq!(voters.voters().len(), 3);
        assert_eq!(voters.voters()[&2].host, "::1");
        assert_eq!(
            voters.to_string(),
            "0@example.com:8082:JEXY6aqzQY-32P5TStzaFg,1@example.com:8083:MvDxzVmcRsaTz33bUuRU6A,2@[::1]:8084:07R5amHmR32VDA6jHkGbTA"
        );
    }

    #[test]
    fn errors_match_kafka() {
        let dir = "JEXY6aqzQY-32P5TStzaFg";
        let cases = [
            (
                "localhost:9093".to_owned(),
                "No @ found in dynamic voter string.",
            ),
            (
                format!("@h:1:{dir}"),
                "Invalid @ at beginning of dynamic voter string.",
            ),
            (
                format!("x@h:1:{dir}"),
                "Failed to parse node id in dynamic voter string.",
            ),
            (
                format!("-1@h:1:{dir}"),
                "Invalid negative node id -1 in dynamic voter string.",
            ),
            ("1@".to_owned(), "No hostname found after node id."),
            (
                "1@[::1:9093".to_owned(),
                "Hostname began with left bracket, but no right bracket was found.",
            ),
            (
                "1@host".to_owned(),
                "No colon following hostname could be found.",
            ),
            (
                "1@[::1]9093".to_owned(),
                "Port section must start with a colon.",
            ),
            (
                "1@h:9093".to_owned(),
                "No colon following port could be found.",
            ),
            (
                format!("1@h:p:{dir}"),
                "Failed to parse port in dynamic voter string.",
            ),
            (
                format!("1@h:70000:{dir}"),
                "Invalid port 70000 in dynamic voter string.",
            ),
            (
                "1@h:1:xyz".to_owned(),
                "Failed to parse directory ID in dynamic voter string.",
            ),
            (
                format!("1@h:1:{dir},1@h:2:{dir}"),
                "Node id 1 was specified more than once.",
            ),
            (",".to_owned(), "No voters given."),
        ];
        for (input, message) in cases {
            let err = DynamicVoters::parse(&input).expect_err(&input);
            assert_eq!(err.to_string(), message, "{input}");
        }
    }

    #[test]
    fn ip_literals_are_written_as_java_prints_them() {
        assert_eq!(java_host_string("::1"), "0:0:0:0:0:0:0:1");
        assert_eq!(java_host_string("fe80::AB:1"), "fe80:0:0:0:0:0:ab:1");
        assert_eq!(java_host_string("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(java_host_string("127.0.0.1"), "127.0.0.1");
        assert_eq!(java_host_string("localhost"), "localhost");
    }

    #[test]
    fn record_order_follows_java_hash_map() {
        assert_eq!(java_hash_map_order(&[0, 1, 2]), vec![0, 1, 2]);
        // 3 entries → table of 8 buckets: 9 and 1 share bucket 1; 9 sits in source bucket 9.
        assert_eq!(java_hash_map_order(&[1, 2, 9]), vec![1, 9, 2]);
        assert_eq!(java_hash_map_order(&[9, 17, 30]), vec![17, 9, 30]);
        let voters =
            DynamicVoters::parse("3@h:1:JEXY6aqzQY-32P5TStzaFg,1@h:2:MvDxzVmcRsaTz33bUuRU6A")
                .expect("valid");
        let record = voters.to_voters_record("controller");
        let ids: Vec<i32> = record.voters.iter().map(|v| v.voter_id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(record.voters[0].endpoints[0].name.as_str(), "CONTROLLER");
    }
}
