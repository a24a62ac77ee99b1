//! krust-net: the Kafka protocol over TCP — framing, a server that hands typed requests to a
//! [`Handler`], and clients that send typed requests and match the responses.
//!
//! Messages are the `kafka-protocol` crate's (Kafka 3.9 schemas): a request is a
//! [`RequestKind`](kafka_protocol::messages::RequestKind), a response a
//! [`ResponseKind`](kafka_protocol::messages::ResponseKind). This crate knows nothing of Raft,
//! topics or brokers; it moves those values and enforces Kafka 3.9's connection rules
//! (`socket.request.max.bytes`, header versions, ApiVersions fallback, `max.connections`,
//! connection quotas, quota throttling, `connections.max.idle.ms`, in-order responses,
//! correlation ids, request timeouts, reconnect backoff).
//!
//! # Layout
//!
//! - `frame.rs`: [`FrameDecoder`], sans-IO size-prefixed frames, the size checked before
//!   buffering.
//! - `codec.rs`: request header v0/v1/v2 and body decoding for a server
//!   ([`codec::decode_request`]), response encoding with the right header version (always v0 for
//!   ApiVersions), the client's side of both, and the API key of a typed message.
//! - `api_versions.rs`: [`SupportedApis`] (what a listener serves, and its ApiVersionsResponse),
//!   [`ApiVersionsTable`] (the negotiated versions on a client connection).
//! - `server.rs`: [`Server`], [`Handler`], [`RequestContext`], [`Reply`],
//!   [`ConnectionThrottle`] (a handler's quota throttle mutes the connection: no further
//!   request is read until it ends, Kafka's `SocketServer` mute).
//! - `connection_quotas.rs`: [`ConnectionQuotas`], Kafka's `ConnectionQuotas` shared by a
//!   broker's listeners (broker-wide `max.connections`, `max.connections.per.ip` and its
//!   overrides, the IP `connection_creation_rate` quota).
//! - `client.rs`: [`Connection`] (one pipelined connection), [`Client`] (one address,
//!   reconnecting with backoff).
//! - `pool.rs`: [`NetworkClient`] (clients by node id).
//! - `config.rs`: [`ServerConfig`], [`ClientConfig`] with Kafka's defaults.
//! - `security/`: TLS on listeners (rustls; Kafka's `ssl.*` settings typed), the connection's
//!   [`KafkaPrincipal`], `ssl.principal.mapping.rules`, SASL on listeners; the client side
//!   ([`security::ClientSecurity`] on [`ClientConfig`]: TLS and SASL for a node's own
//!   connections, run by [`Connection::connect`]).
//! - `error.rs`: one error enum per boundary.
//!
//! # Using it
//!
//! * A listener: implement [`Handler`] (its [`SupportedApis`] decides what is served; answer
//!   ApiVersions with [`SupportedApis::respond_to`]), then [`Server::bind`] with a
//!   [`ServerConfig`] (`listener_name` e.g. `CONTROLLER`). The default of one request at a time
//!   per connection is Kafka's; raise `max_in_flight_requests_per_connection` for listeners
//!   whose requests are independent.
//! * Sending to nodes by id (the Raft driver): one [`NetworkClient`] with
//!   `request_timeout = controller.quorum.request.timeout.ms` (2000) and
//!   `reconnect_backoff = controller.quorum.retry.backoff.ms` (20); [`NetworkClient::set_node`]
//!   for every voter endpoint, then [`NetworkClient::send`]. Every error is typed
//!   ([`ClientError`]); [`ClientError::response_error`] gives the Kafka code to act on
//!   (`REQUEST_TIMED_OUT`, `NETWORK_EXCEPTION`, …).
//! * Bytes without sockets (simulators, tests): [`codec`] and [`FrameDecoder`].
//!
//! Decoding relies on the workspace's patched `kafka-protocol` (`vendor/kafka-protocol`): with
//! the crates.io 0.15.1 build, an array count of `i32::MAX` in a 14-byte request aborts the
//! process.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
//! use krust_net::{Client, ClientConfig, Handler, Reply, RequestContext, Server, ServerConfig,
//!                 SupportedApis};
//!
//! struct Versions(SupportedApis);
//!
//! impl Handler for Versions {
//!     fn supported_apis(&self) -> &SupportedApis { &self.0 }
//!     async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
//!         match request {
//!             RequestKind::ApiVersions(r) => {
//!                 ResponseKind::ApiVersions(self.0.respond_to(&r, ctx.api_version)).into()
//!             }
//!             _ => Reply::Close,
//!         }
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let handler = Arc::new(Versions(SupportedApis::new([(ApiKey::ApiVersions, 0, 4)])?));
//! let server = Server::bind("127.0.0.1:0", handler, ServerConfig::default()).await?;
//! let client = Client::new(server.local_addr().to_string(), ClientConfig::default());
//! let response = client.send(ApiVersionsRequest::default(), 3).await?;
//! assert!(matches!(response, ResponseKind::ApiVersions(_)));
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

pub mod api_versions;
pub mod client;
pub mod codec;
pub mod config;
pub mod connection_quotas;
pub mod error;
pub mod error_codes;
pub mod frame;
pub mod pool;
pub mod response_throttle;
pub mod security;
pub mod server;

pub use api_versions::{ApiVersionRange, ApiVersionsTable, SupportedApis};
pub use client::{Client, Connection};
pub use config::{ClientConfig, ServerConfig};
pub use connection_quotas::{ConnectionQuotaSettings, ConnectionQuotas, ConnectionSlot, Refusal};
pub use error::{ClientError, FrameError, RequestError, ServerError, SupportedApisError};
pub use frame::{FrameDecoder, SOCKET_REQUEST_MAX_BYTES_DEFAULT};
pub use pool::NetworkClient;
pub use security::{KafkaPrincipal, ListenerSecurity};
pub use server::{ConnectionThrottle, Handler, Reply, RequestContext, Server};
