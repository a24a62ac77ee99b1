//! Kafka's `ConfigException`: the message a client or an operator sees for a config that
//! cannot be used.

use thiserror::Error;

/// A config value or set that Kafka refuses, with Kafka's message
/// (`org.apache.kafka.common.config.ConfigException`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ConfigException {
    /// The whole message, as Kafka builds it.
    pub message: String,
}

impl ConfigException {
    /// `new ConfigException(name, value, message)`: "Invalid value {value} for configuration
    /// {name}" and ": {message}" when there is one.
    #[must_use]
    pub fn invalid(name: &str, value: &str, message: Option<&str>) -> Self {
        let mut text = format!("Invalid value {value} for configuration {name}");
        if let Some(m) = message {
            text.push_str(": ");
            text.push_str(m);
        }
        Self { message: text }
    }

    /// `new ConfigException(message)`.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
