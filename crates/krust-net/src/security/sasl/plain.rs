//! SASL/PLAIN (RFC 4616) as Kafka 3.9's `PlainSaslServer`: `authzid NUL authcid NUL passwd`,
//! exactly three tokens, the password compared in constant time with the JAAS
//! `user_<name>` option; Kafka's messages.

use std::collections::BTreeMap;

/// Checks one PLAIN token; the user name on success, Kafka's message otherwise.
///
/// # Errors
///
/// The `SaslAuthenticationException` message Kafka sends for the same token.
pub fn authenticate(token: &[u8], users: &BTreeMap<String, String>) -> Result<String, String> {
    let text = String::from_utf8_lossy(token);
    let tokens: Vec<&str> = text.split('\u{0}').collect();
    if tokens.len() != 3 {
        return Err(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            tokens.len()
        ));
    }
    let (authzid, username, password) = (tokens[0], tokens[1], tokens[2]);
    if username.is_empty() {
        return Err("Authentication failed: username not specified".to_owned());
    }
    if password.is_empty() {
        return Err("Authentication failed: password not specified".to_owned());
    }
    let matches = users
        .get(username)
        .is_some_and(|expected| constant_time_eq(expected.as_bytes(), password.as_bytes()));
    if !matches {
        return Err("Authentication failed: Invalid username or password".to_owned());
    }
    if !authzid.is_empty() && authzid != username {
        return Err(
            "Authentication failed: Client requested an authorization id that is different from username"
                .to_owned(),
        );
    }
    Ok(username.to_owned())
}

/// Equality whose time depends only on the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> BTreeMap<String, String> {
        BTreeMap::from([("alice".to_owned(), "alice-secret".to_owned())])
    }

    #[test]
    fn kafkas_answers() {
        assert_eq!(
            authenticate(b"\0alice\0alice-secret", &users()),
            Ok("alice".to_owned())
        );
        assert_eq!(
            authenticate(b"alice\0alice\0alice-secret", &users()),
            Ok("alice".to_owned())
        );
        let invalid = Err("Authentication failed: Invalid username or password".to_owned());
        assert_eq!(authenticate(b"\0alice\0wrong", &users()), invalid);
        assert_eq!(authenticate(b"\0bob\0alice-secret", &users()), invalid);
        assert_eq!(
            authenticate(b"\0alice", &users()),
            Err("Invalid SASL/PLAIN response: expected 3 tokens, got 2".to_owned())
        );
        assert_eq!(
            authenticate(b"\0\0x", &users()),
            Err("Authentication failed: username not specified".to_owned())
        );
        assert_eq!(
            authenticate(b"bob\0alice\0alice-secret", &users()),
            Err("Authentication failed: Client requested an authorization id that is different from username".to_owned())
        );
    }
}
