//! SASL on a listener (`SASL_PLAINTEXT`, `SASL_SSL`), as Kafka 3.9's `SaslServerAuthenticator`
//! runs it: before authentication only ApiVersions and SaslHandshake (v0–1) are served; after
//! a v1 handshake every frame must be a SaslAuthenticate (v0–2) carrying the mechanism's
//! tokens, after a v0 handshake the tokens come as raw size-prefixed frames. Mechanisms:
//! PLAIN (`plain.rs`, users from the JAAS `user_<name>="<password>"` options) and
//! SCRAM-SHA-256/512 (`scram.rs`, credentials from a [`ScramCredentialStore`]).
//!
//! Failures, as Kafka: a mechanism not in `sasl.enabled.mechanisms` → SaslHandshake
//! `UNSUPPORTED_SASL_MECHANISM` with the enabled list, then close; a bad credential →
//! SaslAuthenticate `SASL_AUTHENTICATION_FAILED` with PLAIN's own message ("Authentication
//! failed: Invalid username or password") or, for SCRAM, the deliberately vague
//! "Authentication failed during authentication due to invalid credentials with SASL mechanism
//! <M>", then close after `connection.failed.authentication.delay.ms`; any other request before
//! the handshake → closed without an answer. A token over `sasl.server.max.receive.size`
//! closes the connection.
//!
//! `client.rs`: the client side ([`client::SaslClient`]) for a node's own connections.

pub mod client;
pub mod plain;
pub mod scram;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use client::{SaslClient, SaslClientFailure, SaslCredentials};
pub use scram::{ScramCredential, ScramCredentialStore, ScramMechanism};

/// `sasl.server.max.receive.size` default.
pub const SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT: usize = 524_288;
/// `connection.failed.authentication.delay.ms` default.
pub const CONNECTION_FAILED_AUTHENTICATION_DELAY_DEFAULT: Duration = Duration::from_millis(100);

/// A SASL mechanism krust serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616).
    Plain,
    /// `SCRAM-SHA-256` / `SCRAM-SHA-512`.
    Scram(ScramMechanism),
}

impl SaslMechanism {
    /// Kafka's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }

    /// The mechanism of a Kafka name, `None` for one krust does not implement.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Some(SaslMechanism::Scram(ScramMechanism::Sha256)),
            "SCRAM-SHA-512" => Some(SaslMechanism::Scram(ScramMechanism::Sha512)),
            _ => None,
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One listener's SASL settings.
#[derive(Clone)]
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order given (the SaslHandshake response lists them).
    pub enabled_mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users and passwords (`user_<name>="<password>"` of the listener's PLAIN JAAS
    /// entry).
    pub plain_users: BTreeMap<String, String>,
    /// Where SCRAM credentials come from (the metadata image's `UserScramCredentialRecord`s).
    pub scram_credentials: Option<Arc<dyn ScramCredentialStore>>,
    /// `sasl.server.max.receive.size`.
    pub max_receive_size: usize,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay: Duration,
}

impl fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslSettings")
            .field("enabled_mechanisms", &self.enabled_mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("scram_credentials", &self.scram_credentials.is_some())
            .field("max_receive_size", &self.max_receive_size)
            .finish_non_exhaustive()
    }
}

/// A failed SASL exchange: Kafka's message for the SaslAuthenticate response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticationFailed {
    /// The error message sent to the client.
    pub message: String,
}

/// The server side of one mechanism's exchange.
pub enum Exchange {
    /// PLAIN: one client token.
    Plain,
    /// SCRAM: client-first, then client-final.
    Scram(scram::ScramServer),
}

/// What a step of an exchange produced.
#[derive(Debug)]
pub enum Step {
    /// Send this token and wait for the next client token.
    Continue(Vec<u8>),
    /// Send this token (possibly empty); the client is `User:<name>`.
    Done { token: Vec<u8>, user: String },
}

impl Exchange {
    /// The exchange of `mechanism` on a listener with `settings`.
    #[must_use]
    pub fn new(mechanism: SaslMechanism, settings: &SaslSettings) -> Exchange {
        match mechanism {
            SaslMechanism::Plain => Exchange::Plain,
            SaslMechanism::Scram(m) => Exchange::Scram(scram::ScramServer::new(
                m,
                settings.scram_credentials.clone(),
            )),
        }
    }

    /// Feeds one client token.
    ///
    /// # Errors
    ///
    /// [`AuthenticationFailed`] with the message Kafka sends.
    pub fn step(
        &mut self,
        token: &[u8],
        settings: &SaslSettings,
    ) -> Result<Step, AuthenticationFailed> {
        match self {
            Exchange::Plain => {
                let user = plain::authenticate(token, &settings.plain_users)
                    .map_err(|message| AuthenticationFailed { message })?;
                Ok(Step::Done {
                    token: Vec::new(),
                    user,
                })
            }
            Exchange::Scram(server) => server.step(token),
        }
    }
}
