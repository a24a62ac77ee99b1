//! Server and client settings, named after (and defaulting to) Kafka 3.9's configs.

use std::time::Duration;

use std::sync::Arc;

use crate::connection_quotas::ConnectionQuotas;
use crate::frame::SOCKET_REQUEST_MAX_BYTES_DEFAULT;
use crate::security::{ClientSecurity, ListenerSecurity};

/// Settings of one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Listener name put in every [`crate::RequestContext`] (`PLAINTEXT`, `CONTROLLER`, …).
    pub listener_name: String,
    /// `socket.request.max.bytes`: larger requests close the connection before any of their
    /// bytes are buffered.
    pub socket_request_max_bytes: usize,
    /// The listener's `max.connections` (`listener.name.<l>.max.connections`, else the
    /// broker-wide value): connections beyond this wait in the accept backlog (Kafka stops
    /// accepting at the limit, too).
    pub max_connections: usize,
    /// The broker's connection quotas shared by its listeners (broker-wide `max.connections`,
    /// `max.connections.per.ip` and overrides, IP `connection_creation_rate`); `None` = none.
    pub connection_quotas: Option<Arc<ConnectionQuotas>>,
    /// `connections.max.idle.ms`: a connection with no bytes read or written and no request in
    /// flight for this long is closed.
    pub connections_max_idle: Duration,
    /// Requests of one connection that may be handled at the same time. Responses always go
    /// out in request order; once this many are in flight the server stops reading the
    /// connection. The default, `1`, is Kafka's behaviour (a connection is muted while its
    /// request is processed), which keeps e.g. pipelined Produce requests applied in order;
    /// listeners whose requests are independent (Raft RPCs) may raise it.
    pub max_in_flight_requests_per_connection: usize,
    /// TLS of the listener (its security protocol); the default is plaintext.
    pub security: ListenerSecurity,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listener_name: "PLAINTEXT".to_owned(),
            socket_request_max_bytes: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
            max_connections: 2_147_483_647,
            connection_quotas: None,
            connections_max_idle: Duration::from_millis(600_000),
            max_in_flight_requests_per_connection: 1,
            security: ListenerSecurity::default(),
        }
    }
}

/// Settings of a client connection ([`crate::Connection`], [`crate::Client`],
/// [`crate::NetworkClient`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `client.id` sent in every request header.
    pub client_id: String,
    /// Per-request timeout (`request.timeout.ms`; the Raft driver passes
    /// `controller.quorum.request.timeout.ms`, 2000).
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms` (10000 in Kafka's clients).
    pub connect_timeout: Duration,
    /// `reconnect.backoff.ms`: first wait after a failed connection attempt.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`: the doubling backoff's cap.
    pub reconnect_backoff_max: Duration,
    /// `max.in.flight.requests.per.connection`: requests sent and not yet answered; more wait.
    pub max_in_flight_requests_per_connection: usize,
    /// Largest response frame accepted (a bound on what a peer can make us buffer).
    pub max_response_bytes: usize,
    /// Send ApiVersions right after connecting and keep the answer, so requests can be sent at
    /// the highest version both sides know ([`crate::Connection::api_versions`]).
    pub negotiate_api_versions: bool,
    /// TLS and SASL of the connection (the client side of the peer listener's security
    /// protocol); the default is plaintext. Both run within
    /// [`ClientConfig::connect_timeout`], before any request.
    pub security: ClientSecurity,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: String::new(),
            request_timeout: Duration::from_millis(30_000),
            connect_timeout: Duration::from_millis(10_000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1_000),
            max_in_flight_requests_per_connection: 5,
            max_response_bytes: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
            negotiate_api_versions: false,
            security: ClientSecurity::default(),
        }
    }
}
