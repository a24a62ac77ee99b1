//! The validators Kafka writes as classes of their own (`Validator::Custom`), keyed by class.

use crate::error::ConfigException;
use crate::value::ConfigValue;

/// `ensureValid` of a custom validator. Classes krust does not check here are validated
/// elsewhere (the quorum voters and bootstrap servers, by the binary at start-up).
pub(crate) fn ensure_valid(
    name: &str,
    class: &str,
    description: &str,
    value: &ConfigValue,
) -> Result<(), ConfigException> {
    match class {
        // `CompressionType.GZIP.levelValidator()`: "[1,...,9] or -1".
        "org.apache.kafka.common.record.CompressionType$1$1" => {
            let (min, max, default) = gzip_levels(description);
            match value.as_i64() {
                Some(level) if level > max || (level < min && level != default) => {
                    Err(ConfigException::invalid(
                        name,
                        &value.java_string(),
                        Some(&format!(
                            "Value must be between {min} and {max} or equal to {default}"
                        )),
                    ))
                }
                _ => Ok(()),
            }
        }
        "org.apache.kafka.server.common.MetadataVersionValidator" => match value.as_str() {
            Some(version) if !metadata_version_known(description, version) => {
                Err(ConfigException::invalid(
                    name,
                    version,
                    Some(&format!("Version {version} is not a valid version")),
                ))
            }
            _ => Ok(()),
        },
        "org.apache.kafka.storage.internals.log.ThrottledReplicaListValidator" => {
            let Some(items) = value.as_list() else {
                return Ok(());
            };
            let replica = |s: &str| {
                s.is_empty()
                    || s.split_once(':').is_some_and(|(p, b)| {
                        !p.is_empty()
                            && !b.is_empty()
                            && p.bytes().all(|c| c.is_ascii_digit())
                            && b.bytes().all(|c| c.is_ascii_digit())
                    })
            };
            let trimmed: Vec<&str> = items.iter().map(|s| s.trim()).collect();
            if trimmed.iter().all(|s| replica(s)) || trimmed.concat() == "*" {
                Ok(())
            } else {
                Err(ConfigException::invalid(
                    name,
                    &value.java_string(),
                    Some(&format!(
                        "{name} must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                    )),
                ))
            }
        }
        // RemoteLogManagerConfig's thread pool sizes.
        "org.apache.kafka.server.log.remote.storage.RemoteLogManagerConfig$$Lambda" => {
            match value.as_i64() {
                Some(v) if v < -1 || v == 0 => Err(ConfigException::invalid(
                    name,
                    &value.java_string(),
                    Some("Value can be -1 or greater than 0"),
                )),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// `(MIN_LEVEL, MAX_LEVEL, DEFAULT_LEVEL)` from the validator's `toString()`
/// (`"[1,...,9] or -1"`).
fn gzip_levels(description: &str) -> (i64, i64, i64) {
    let numbers: Vec<i64> = description
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter_map(|s| s.parse().ok())
        .collect();
    match numbers.as_slice() {
        [min, max, default] => (*min, *max, *default),
        _ => (1, 9, -1),
    }
}

/// `MetadataVersion.fromVersionString` succeeds: the validator's `toString()` lists every
/// version; production ones (up to `3.9-IV0`) are also known by their release (`3.9`).
fn metadata_version_known(description: &str, version: &str) -> bool {
    let segments: Vec<&str> = version.split('.').collect();
    let wanted = if version.starts_with("0.") { 3 } else { 2 };
    let key = if wanted >= segments.len() {
        version.to_owned()
    } else {
        segments[..wanted].join(".")
    };
    let versions = description
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(", ");
    let mut production = true;
    for v in versions {
        if v == key {
            return true;
        }
        let release = v.split_once("-IV").map_or(v, |(r, _)| r);
        if production && release == key {
            return true;
        }
        if v == LATEST_PRODUCTION {
            production = false;
        }
    }
    false
}

/// `MetadataVersion.LATEST_PRODUCTION` in Kafka 3.9.
const LATEST_PRODUCTION: &str = "3.9-IV0";

#[cfg(test)]
mod tests {
    use super::*;

    const VERSIONS: &str = "[0.8.0, 0.10.0-IV0, 0.10.0-IV1, 3.8-IV0, 3.9-IV0, 4.0-IV0]";

    #[test]
    fn metadata_versions_are_known_by_ibp_and_production_release() {
        for v in [
            "0.8.0",
            "0.10.0",
            "0.10.0-IV1",
            "3.9",
            "3.9-IV0",
            "3.9-IV0.1",
            "4.0-IV0",
        ] {
            assert!(metadata_version_known(VERSIONS, v), "{v}");
        }
        for v in ["4.0", "3.10", "abc", "", "0.8"] {
            assert!(!metadata_version_known(VERSIONS, v), "{v}");
        }
    }

    #[test]
    fn gzip_levels_come_from_the_description() {
        assert_eq!(gzip_levels("[1,...,9] or -1"), (1, 9, -1));
    }
}
