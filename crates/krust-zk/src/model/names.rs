//! Znode names: Kafka's `Sanitizer` (URL encoding, so user and client ids can be znode names)
//! and the `<default>` entity name.

/// The znode name of a default entity (`/config/users/<default>`), Kafka's
/// `ZooKeeperInternals.DEFAULT_STRING`. KRaft names the same entity `null` (quotas) or `""`
/// (broker configs).
pub const DEFAULT_ENTITY: &str = "<default>";

/// Kafka's `Sanitizer.sanitize`: `java.net.URLEncoder` over UTF-8 (letters, digits, `.`, `-`,
/// `_` kept; everything else `%XX` in upper case) with `*` → `%2A` and space → `%20`.
#[must_use]
pub fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => {
                out.push(char::from(byte));
            }
            _ => {
                out.push('%');
                out.push_str(&format!("{byte:02X}"));
            }
        }
    }
    out
}

/// Why a znode name does not desanitize.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a URL-encoded name")]
pub struct DesanitizeError {
    /// The name.
    pub name: String,
}

/// Kafka's `Sanitizer.desanitize`: `java.net.URLDecoder` over UTF-8 (`+` → space, `%XX` → byte).
///
/// # Errors
/// A `%` not followed by two hex digits, or bytes that are not UTF-8 (`URLDecoder` throws on
/// the first).
pub fn desanitize(name: &str) -> Result<String, DesanitizeError> {
    let err = || DesanitizeError {
        name: name.to_owned(),
    };
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(err)?;
                let hex = std::str::from_utf8(hex).map_err(|_| err())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| err())?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| err())
}

/// The znode name of a client-quota entity component: `<default>` for the default entity
/// (`None`), the sanitized name otherwise (Kafka's `getSanitizedClientQuotaZNodeName`).
#[must_use]
pub fn quota_entity_znode_name(name: Option<&str>) -> String {
    name.map_or_else(|| DEFAULT_ENTITY.to_owned(), sanitize)
}

/// The entity a quota znode name stands for: `None` for `<default>`, the desanitized name
/// otherwise.
///
/// # Errors
/// A name that does not desanitize.
pub fn quota_entity_from_znode_name(znode_name: &str) -> Result<Option<String>, DesanitizeError> {
    if znode_name == DEFAULT_ENTITY {
        Ok(None)
    } else {
        desanitize(znode_name).map(Some)
    }
}

/// The znode name of a broker or topic config resource: `<default>` for the cluster-wide
/// broker default (resource name `""` in KRaft), the name itself otherwise (not sanitized).
#[must_use]
pub fn config_resource_znode_name(resource_name: &str) -> &str {
    if resource_name.is_empty() {
        DEFAULT_ENTITY
    } else {
        resource_name
    }
}

/// The KRaft resource name of a broker or topic config znode name (`<default>` → `""`).
#[must_use]
pub fn config_resource_from_znode_name(znode_name: &str) -> &str {
    if znode_name == DEFAULT_ENTITY {
        ""
    } else {
        znode_name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_matches_kafka() {
        // Kafka 3.9.1: Sanitizer.sanitize("User:al ice*+/é~!'()@").
        assert_eq!(
            sanitize("User:al ice*+/é~!'()@"),
            "User%3Aal%20ice%2A%2B%2F%C3%A9%7E%21%27%28%29%40"
        );
        assert_eq!(
            desanitize("User%3Aal%20ice%2A%2B%2F%C3%A9%7E%21%27%28%29%40").expect("decodes"),
            "User:al ice*+/é~!'()@"
        );
        assert_eq!(desanitize("a+b").expect("decodes"), "a b");
        assert!(desanitize("a%2").is_err());
        assert!(desanitize("a%zz").is_err());
        assert_eq!(quota_entity_znode_name(None), "<default>");
        assert_eq!(quota_entity_from_znode_name("<default>").expect("ok"), None);
    }
}
