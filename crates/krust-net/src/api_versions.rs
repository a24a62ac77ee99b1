//! Which API versions a listener serves ([`SupportedApis`]), the ApiVersionsResponse built from
//! them, and the client's side of the negotiation ([`ApiVersionsTable`]: highest version both
//! sides know, per API).

use std::collections::BTreeMap;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use crate::error::SupportedApisError;

pub use crate::error_codes::INVALID_REQUEST;

/// Kafka 3.9's version ranges of the admin and controller APIs a controller listener serves
/// (and a broker forwards to it), the one place krust writes them down.
pub const KAFKA_CONTROLLER_API_VERSIONS: [(ApiKey, i16, i16); 26] = [
    (ApiKey::CreateTopics, 0, 7),
    (ApiKey::DeleteTopics, 0, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::AlterPartition, 0, 3),
    (ApiKey::UpdateFeatures, 0, 1),
    (ApiKey::Envelope, 0, 0),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::ControllerRegistration, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::CreateAcls, 0, 3),
    (ApiKey::DeleteAcls, 0, 3),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateDelegationToken, 0, 3),
    (ApiKey::RenewDelegationToken, 0, 2),
    (ApiKey::ExpireDelegationToken, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AssignReplicasToDirs, 0, 0),
    (ApiKey::DescribeConfigs, 0, 4),
];

/// Kafka 3.9's version range of `api_key` among [`KAFKA_CONTROLLER_API_VERSIONS`].
///
/// # Panics
/// If `api_key` is not one of them (a bug in the caller's fixed table).
#[must_use]
pub fn kafka_controller_api_versions(api_key: ApiKey) -> (ApiKey, i16, i16) {
    KAFKA_CONTROLLER_API_VERSIONS
        .into_iter()
        .find(|(k, _, _)| *k == api_key)
        .unwrap_or_else(|| panic!("{api_key:?} is not a controller API"))
}

/// An inclusive version range of one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// The API.
    pub api_key: ApiKey,
    /// Lowest version.
    pub min: i16,
    /// Highest version.
    pub max: i16,
}

impl ApiVersionRange {
    /// Whether `version` is in the range.
    #[must_use]
    pub fn contains(&self, version: i16) -> bool {
        (self.min..=self.max).contains(&version)
    }

    /// The entry of an ApiVersionsResponse.
    #[must_use]
    pub fn to_api_version(&self) -> ApiVersion {
        let mut entry = ApiVersion::default();
        entry.api_key = self.api_key as i16;
        entry.min_version = self.min;
        entry.max_version = self.max;
        entry
    }
}

/// The APIs (and versions) a listener serves. The server closes connections that send anything
/// else, except ApiVersions, which it answers at any version.
///
/// ApiVersions is always served: if the list lacks it, every version the codec knows is added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedApis {
    ranges: BTreeMap<i16, ApiVersionRange>,
}

impl SupportedApis {
    /// A list of `(api key, min version, max version)`.
    ///
    /// # Errors
    ///
    /// An empty range, a range outside what the codec (Kafka 3.9's schemas) can read and write,
    /// or a key listed twice.
    pub fn new(
        apis: impl IntoIterator<Item = (ApiKey, i16, i16)>,
    ) -> Result<SupportedApis, SupportedApisError> {
        let mut ranges = BTreeMap::new();
        for (api_key, min, max) in apis {
            let codec = api_key.valid_versions();
            if min > max || min < codec.min || max > codec.max {
                return Err(SupportedApisError::VersionsOutOfRange {
                    api_key: api_key as i16,
                    min,
                    max,
                    codec_min: codec.min,
                    codec_max: codec.max,
                });
            }
            let range = ApiVersionRange { api_key, min, max };
            if ranges.insert(api_key as i16, range).is_some() {
                return Err(SupportedApisError::Duplicate {
                    api_key: api_key as i16,
                });
            }
        }
        ranges.entry(ApiKey::ApiVersions as i16).or_insert_with(|| {
            let codec = ApiKey::ApiVersions.valid_versions();
            ApiVersionRange {
                api_key: ApiKey::ApiVersions,
                min: codec.min,
                max: codec.max,
            }
        });
        Ok(SupportedApis { ranges })
    }

    /// Like [`SupportedApis::new`] for raw keys, e.g. from a config.
    ///
    /// # Errors
    ///
    /// As [`SupportedApis::new`], plus [`SupportedApisError::UnknownApiKey`].
    pub fn from_raw(
        apis: impl IntoIterator<Item = (i16, i16, i16)>,
    ) -> Result<SupportedApis, SupportedApisError> {
        let mut typed = Vec::new();
        for (key, min, max) in apis {
            let api_key = ApiKey::try_from(key)
                .map_err(|()| SupportedApisError::UnknownApiKey { api_key: key })?;
            typed.push((api_key, min, max));
        }
        SupportedApis::new(typed)
    }

    /// The range served for `api_key`, if any.
    #[must_use]
    pub fn range(&self, api_key: ApiKey) -> Option<ApiVersionRange> {
        self.ranges.get(&(api_key as i16)).copied()
    }

    /// Whether `api_key` is served at `version`.
    #[must_use]
    pub fn contains(&self, api_key: ApiKey, version: i16) -> bool {
        self.range(api_key).is_some_and(|r| r.contains(version))
    }

    /// All ranges, by API key.
    pub fn iter(&self) -> impl Iterator<Item = ApiVersionRange> + '_ {
        self.ranges.values().copied()
    }

    /// The ApiVersionsResponse a handler sends for a *valid* ApiVersions request: error 0 and
    /// every served range. Callers add features (`supported_features`, `finalized_features`,
    /// `zk_migration_ready`) as their role requires.
    #[must_use]
    pub fn api_versions_response(&self) -> ApiVersionsResponse {
        let mut response = ApiVersionsResponse::default();
        response.api_keys = self.iter().map(|r| r.to_api_version()).collect();
        response
    }

    /// The answer to an ApiVersions request the server layer has already accepted: the full
    /// list, or `INVALID_REQUEST` (42) with no keys when a v3+ request carries a client software
    /// name or version that does not match `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`
    /// (Kafka 3.9 `ApiVersionsRequest.isValid`, `ControllerApis.handleApiVersionsRequest`).
    #[must_use]
    pub fn respond_to(
        &self,
        request: &ApiVersionsRequest,
        api_version: i16,
    ) -> ApiVersionsResponse {
        if api_version >= 3
            && !(is_valid_software_text(&request.client_software_name)
                && is_valid_software_text(&request.client_software_version))
        {
            let mut response = ApiVersionsResponse::default();
            response.error_code = INVALID_REQUEST;
            return response;
        }
        self.api_versions_response()
    }
}

/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`, the rule for KIP-511 client software names
/// and versions.
#[must_use]
pub fn is_valid_software_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
}

/// The server's ApiVersions answer as seen by a client, for picking request versions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsTable {
    ranges: BTreeMap<i16, (i16, i16)>,
}

impl ApiVersionsTable {
    /// The table of a (successful) ApiVersionsResponse.
    #[must_use]
    pub fn from_response(response: &ApiVersionsResponse) -> ApiVersionsTable {
        let ranges = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        ApiVersionsTable { ranges }
    }

    /// The server's range for `api_key`, if it listed it.
    #[must_use]
    pub fn server_range(&self, api_key: ApiKey) -> Option<(i16, i16)> {
        self.ranges.get(&(api_key as i16)).copied()
    }

    /// The highest version of `api_key` that both the server and the codec know, further capped
    /// to `ours` (the caller's own `min..=max`); `None` when the ranges do not meet (Kafka's
    /// `NodeApiVersions.latestUsableVersion`).
    #[must_use]
    pub fn latest_usable_version(&self, api_key: ApiKey, ours: (i16, i16)) -> Option<i16> {
        let (server_min, server_max) = self.server_range(api_key)?;
        let codec = api_key.valid_versions();
        let min = server_min.max(codec.min).max(ours.0);
        let max = server_max.min(codec.max).min(ours.1);
        (min <= max).then_some(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_is_always_served() {
        let apis = SupportedApis::new([(ApiKey::Vote, 0, 1)]).expect("valid");
        assert_eq!(
            apis.range(ApiKey::ApiVersions),
            Some(ApiVersionRange {
                api_key: ApiKey::ApiVersions,
                min: 0,
                max: 4
            })
        );
        let narrowed = SupportedApis::new([(ApiKey::ApiVersions, 0, 2)]).expect("valid");
        assert!(!narrowed.contains(ApiKey::ApiVersions, 3));
    }

    #[test]
    fn invalid_lists_table() {
        type Case = (&'static str, Vec<(i16, i16, i16)>, SupportedApisError);
        let cases: [Case; 4] = [
            (
                "Vote v2 is past Kafka 3.9",
                vec![(52, 0, 2)],
                SupportedApisError::VersionsOutOfRange {
                    api_key: 52,
                    min: 0,
                    max: 2,
                    codec_min: 0,
                    codec_max: 1,
                },
            ),
            (
                "empty range",
                vec![(1, 5, 4)],
                SupportedApisError::VersionsOutOfRange {
                    api_key: 1,
                    min: 5,
                    max: 4,
                    codec_min: 0,
                    codec_max: 17,
                },
            ),
            (
                "duplicate key",
                vec![(3, 0, 1), (3, 2, 3)],
                SupportedApisError::Duplicate { api_key: 3 },
            ),
            (
                "unknown key",
                vec![(1000, 0, 0)],
                SupportedApisError::UnknownApiKey { api_key: 1000 },
            ),
        ];
        for (reason, list, want) in cases {
            assert_eq!(SupportedApis::from_raw(list), Err(want), "case: {reason}");
        }
    }

    #[test]
    fn software_text_table() {
        let cases = [
            ("apache-kafka-java", true, "Java client name"),
            ("3.9.1", true, "version"),
            ("a", true, "one character"),
            ("", false, "empty"),
            ("-a", false, "starts with a dash"),
            ("a.", false, "ends with a dot"),
            ("a b", false, "space"),
            ("krust_net", false, "underscore"),
            ("ünï", false, "non-ASCII"),
        ];
        for (text, valid, reason) in cases {
            assert_eq!(is_valid_software_text(text), valid, "case: {reason}");
        }
    }

    #[test]
    fn invalid_software_name_gets_invalid_request_from_v3() {
        let apis = SupportedApis::new([]).expect("valid");
        let mut request = ApiVersionsRequest::default();
        request.client_software_name = "bad name".into();
        request.client_software_version = "1.0".into();
        assert_eq!(apis.respond_to(&request, 3).error_code, INVALID_REQUEST);
        assert_eq!(
            apis.respond_to(&request, 2).error_code,
            0,
            "v2 has no names"
        );
    }

    #[test]
    fn negotiation_picks_highest_common_version() {
        let server = SupportedApis::new([(ApiKey::Fetch, 4, 13), (ApiKey::Vote, 0, 1)])
            .expect("valid")
            .api_versions_response();
        let table = ApiVersionsTable::from_response(&server);
        assert_eq!(
            table.latest_usable_version(ApiKey::Fetch, (0, 17)),
            Some(13)
        );
        assert_eq!(
            table.latest_usable_version(ApiKey::Fetch, (0, 12)),
            Some(12)
        );
        assert_eq!(table.latest_usable_version(ApiKey::Fetch, (0, 3)), None);
        assert_eq!(table.latest_usable_version(ApiKey::Metadata, (0, 12)), None);
        assert_eq!(table.latest_usable_version(ApiKey::Vote, (0, 1)), Some(1));
    }
}
