//! Kafka's `PasswordEncoder` for password-type broker configs (not yet implemented: see the
//! crate report). Password configs are recognised by name so callers can refuse to copy them
//! in clear.

/// Whether `key` is a password-type dynamic broker config (Kafka's
/// `DynamicBrokerConfig.isPasswordConfig`: the name ends with one of the dynamic password
/// config names, e.g. `ssl.keystore.password`, `listener.name.x.ssl.key.password`).
#[must_use]
pub fn is_password_config(key: &str) -> bool {
    // The dynamic broker configs of type PASSWORD in Kafka 3.9.1 (checked against
    // `DynamicBrokerConfig.isPasswordConfig` over every `KafkaConfig` key).
    const PASSWORD_SUFFIXES: [&str; 7] = [
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "sasl.jaas.config",
    ];
    PASSWORD_SUFFIXES.iter().any(|s| key.ends_with(s))
}
