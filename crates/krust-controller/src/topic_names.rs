//! Topic name rules (Kafka 3.9 `org.apache.kafka.common.internals.Topic`): legal characters,
//! length, `.`/`..`, the `.`/`_` collision, and names no client may create.

use crate::error::ControllerError;

/// Longest legal topic name (Kafka's `Topic.MAX_NAME_LENGTH`).
pub const MAX_NAME_LENGTH: usize = 249;
/// The metadata log's own topic; never created through CreateTopics.
pub const CLUSTER_METADATA_TOPIC_NAME: &str = "__cluster_metadata";

/// Checks a topic name's syntax (Kafka's `Topic.validate`, with its messages).
///
/// # Errors
/// `INVALID_TOPIC_EXCEPTION` ([`ControllerError::InvalidTopicName`]).
pub fn validate(name: &str) -> Result<(), ControllerError> {
    let invalid = |reason: String| Err(ControllerError::InvalidTopicName { reason });
    if name.is_empty() {
        return invalid("Topic name is illegal, it can't be empty".to_owned());
    }
    if name == "." || name == ".." {
        return invalid("Topic name cannot be \".\" or \"..\"".to_owned());
    }
    if name.len() > MAX_NAME_LENGTH {
        return invalid(format!(
            "Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return invalid(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// The name with `.` replaced by `_`: two topics whose names map to the same string collide
/// in metric names (Kafka's `Topic.unifyCollisionChars`).
#[must_use]
pub fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn illegal_names_are_refused_with_kafkas_reason() {
        let long = "a".repeat(MAX_NAME_LENGTH + 1);
        let cases = [
            ("", "empty"),
            (".", "dot"),
            ("..", "dot dot"),
            (long.as_str(), "250 characters"),
            ("a b", "space"),
            ("ü", "non-ASCII"),
            ("a/b", "slash"),
        ];
        for (name, why) in cases {
            let error = validate(name).expect_err(why);
            assert_eq!(error.code(), 17, "{why}: INVALID_TOPIC_EXCEPTION");
        }
        for name in ["a", "A-b_c.d", &"x".repeat(MAX_NAME_LENGTH)] {
            assert_eq!(validate(name), Ok(()), "{name}");
        }
        assert_eq!(unify_collision_chars("a.b_c"), "a_b_c");
    }
}
