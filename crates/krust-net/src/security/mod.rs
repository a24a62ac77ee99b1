//! Listener security: who is on the other end of a connection, and how that was established.
//!
//! - `tls.rs`: [`TlsSettings`] (Kafka's `ssl.*` settings of one listener, typed) built into a
//!   [`TlsServer`] (a rustls acceptor plus the principal mapping).
//! - `dn.rs`: a certificate's subject as Java's `X500Principal.getName(RFC2253)` writes it.
//! - `tls_client.rs`: [`TlsClientSettings`] → [`TlsClient`], the client half for a node's own
//!   connections; with `sasl::client`'s [`sasl::SaslCredentials`] they make a
//!   [`ClientSecurity`] (on [`crate::ClientConfig`]).
//! - `principal_mapper.rs`: [`SslPrincipalMapper`] (`ssl.principal.mapping.rules`, KIP-371).
//!
//! The principal of a connection ([`KafkaPrincipal`]) is in every
//! [`crate::RequestContext`]: `User:ANONYMOUS` on PLAINTEXT and on SSL without a client
//! certificate, `User:<mapped DN>` with one (Kafka 3.9 `DefaultKafkaPrincipalBuilder`).

pub mod dn;
pub mod principal_mapper;
pub mod sasl;
pub mod tls;
pub mod tls_client;

use std::fmt;
use std::sync::Arc;

pub use principal_mapper::SslPrincipalMapper;
pub use tls::{SslClientAuth, TlsProtocol, TlsServer, TlsSettings};
pub use tls_client::{TlsClient, TlsClientSettings};

/// Kafka's `KafkaPrincipal`: a type (always `User` for the built-in authenticators) and a
/// name. Written `User:<name>`, as in ACLs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    /// `User`.
    pub principal_type: String,
    /// The user name (`ANONYMOUS` for an unauthenticated connection).
    pub name: String,
}

impl KafkaPrincipal {
    /// `User:<name>`.
    #[must_use]
    pub fn user(name: impl Into<String>) -> Self {
        KafkaPrincipal {
            principal_type: "User".to_owned(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`, Kafka's principal of unauthenticated connections.
    #[must_use]
    pub fn anonymous() -> Self {
        Self::user("ANONYMOUS")
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// How a listener secures its connections (the listener's security protocol).
#[derive(Debug, Clone, Default)]
pub struct ListenerSecurity {
    /// TLS (`SSL`, `SASL_SSL`); `None` for `PLAINTEXT`, `SASL_PLAINTEXT`.
    pub tls: Option<Arc<TlsServer>>,
    /// SASL (`SASL_PLAINTEXT`, `SASL_SSL`): clients authenticate before any other request.
    pub sasl: Option<Arc<sasl::SaslSettings>>,
}

impl PartialEq for ListenerSecurity {
    fn eq(&self, other: &Self) -> bool {
        let tls = match (&self.tls, &other.tls) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let sasl = match (&self.sasl, &other.sasl) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        tls && sasl
    }
}

impl Eq for ListenerSecurity {}

/// How a node's own connection to a listener is secured: the client side of the listener's
/// security protocol (`PLAINTEXT`: neither, `SSL`: TLS, `SASL_PLAINTEXT`: SASL,
/// `SASL_SSL`: both, TLS first).
#[derive(Debug, Clone, Default)]
pub struct ClientSecurity {
    /// TLS (`SSL`, `SASL_SSL`).
    pub tls: Option<Arc<TlsClient>>,
    /// SASL (`SASL_PLAINTEXT`, `SASL_SSL`): authenticate right after connecting (and after the
    /// TLS handshake), before any other request.
    pub sasl: Option<Arc<sasl::SaslCredentials>>,
}

impl ClientSecurity {
    /// Kafka's name of the security protocol this amounts to.
    #[must_use]
    pub fn protocol_name(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

impl PartialEq for ClientSecurity {
    fn eq(&self, other: &Self) -> bool {
        let tls = match (&self.tls, &other.tls) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        tls && self.sasl == other.sasl
    }
}

impl Eq for ClientSecurity {}
