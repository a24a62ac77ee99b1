//! Errors, one enum per boundary: framing ([`FrameError`]), a request read by the server
//! ([`RequestError`]), the server's setup ([`ServerError`]), the list of APIs a handler serves
//! ([`SupportedApisError`]) and everything a client call can meet ([`ClientError`]).
//!
//! [`ClientError::response_error`] is the one place that maps a network failure to a Kafka error
//! code, for callers that answer their own requests with a code (the Raft driver, forwarding).

use std::io;

use kafka_protocol::error::ResponseError;

/// The codec's errors are `anyhow` values; we keep them as a boxed source so that the chain
/// ("Failed to decode VoteRequest v1 body" → "Not enough bytes remaining") stays printable.
pub type CodecError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A 4-byte size prefix that cannot start a frame. Kafka closes the connection in both cases
/// (`NetworkReceive` throws `InvalidReceiveException`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The peer announced a frame larger than `socket.request.max.bytes` (or, for a client, than
    /// its response limit). Nothing of it is buffered; the connection must be closed. Remedy: the
    /// peer speaks another protocol (e.g. TLS or HTTP on a plaintext port) or the limit is too low.
    #[error("frame of {size} bytes is larger than the limit of {max} bytes")]
    Oversized {
        /// The announced size.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// The size prefix is negative (`Invalid receive (size = -1)` in Kafka).
    #[error("frame size {size} is negative")]
    NegativeSize {
        /// The announced size.
        size: i32,
    },
}

/// Why a complete request frame could not become a typed request. The server closes the
/// connection for every variant, as Kafka 3.9 does (`SocketServer.processCompletedReceives`
/// closes the channel on any exception while parsing the header or body).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The frame is too short to hold the request header fields read so far.
    #[error(
        "request frame of {have} bytes is too short for a request header (need at least {need})"
    )]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes in the frame.
        have: usize,
    },
    /// The API key is not one Kafka 3.9 defines ("Unknown API key" in Kafka).
    #[error("unknown API key {api_key}")]
    UnknownApiKey {
        /// The key read from the header.
        api_key: i16,
    },
    /// The API exists but this listener does not serve it, or not at this version ("Received
    /// request api key X with version Y which is not enabled" in Kafka).
    #[error("API key {api_key} version {api_version} is not enabled on this listener")]
    NotEnabled {
        /// The key read from the header.
        api_key: i16,
        /// The version read from the header.
        api_version: i16,
    },
    /// The request header could not be decoded (bad client id string, bad tagged fields).
    #[error("undecodable request header (API key {api_key}, version {api_version})")]
    Header {
        /// The key read from the header.
        api_key: i16,
        /// The version read from the header.
        api_version: i16,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// The request body does not decode at the announced version ("Error getting request for
    /// apiKey" in Kafka).
    #[error("undecodable {api_key} v{api_version} request body (correlation id {correlation_id})")]
    Body {
        /// The key read from the header.
        api_key: i16,
        /// The version read from the header.
        api_version: i16,
        /// The correlation id read from the header.
        correlation_id: i32,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
}

/// A server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the listening socket failed (address in use, permission, bad address).
    #[error("binding {addr}")]
    Bind {
        /// The address given to [`crate::Server::bind`].
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid server configuration: {name} = {value} ({reason})")]
    Config {
        /// Kafka's config name.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
}

/// A handler's list of supported APIs is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupportedApisError {
    /// The API key is not one Kafka 3.9 defines.
    #[error("unknown API key {api_key}")]
    UnknownApiKey {
        /// The key given.
        api_key: i16,
    },
    /// The range is empty or outside what the codec (Kafka 3.9's schemas) can read and write.
    #[error(
        "API key {api_key}: versions {min}..={max} are not within the codec's {codec_min}..={codec_max}"
    )]
    VersionsOutOfRange {
        /// The key given.
        api_key: i16,
        /// Lowest version given.
        min: i16,
        /// Highest version given.
        max: i16,
        /// Lowest version the codec knows.
        codec_min: i16,
        /// Highest version the codec knows.
        codec_max: i16,
    },
    /// The same API key is listed twice.
    #[error("API key {api_key} is listed twice")]
    Duplicate {
        /// The key given.
        api_key: i16,
    },
}

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Resolving or connecting to the address failed. Retriable after backoff.
    #[error("connecting to {addr}")]
    Connect {
        /// The `host:port` given.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The last connection attempt failed and the reconnect backoff
    /// (`reconnect.backoff.ms` doubling to `reconnect.backoff.max.ms`) ends after the request's
    /// deadline, so no attempt was made. Retriable.
    #[error("{addr} is in reconnect backoff for another {retry_in_ms} ms")]
    InBackoff {
        /// The `host:port` given.
        addr: String,
        /// Time until the next attempt is allowed.
        retry_in_ms: u64,
    },
    /// The connection was not established within the connect timeout.
    #[error("connecting to {addr}: no connection after {timeout_ms} ms")]
    ConnectTimeout {
        /// The `host:port` given.
        addr: String,
        /// The timeout that passed.
        timeout_ms: u64,
    },
    /// No response within the request timeout. When the request had already been handed to
    /// the connection (not just waiting for an in-flight slot), the connection is closed, as
    /// Kafka's `NetworkClient` does: later responses on it can no longer be trusted to be
    /// timely.
    #[error("{api_key:?} request to {addr} timed out after {timeout_ms} ms")]
    RequestTimeout {
        /// The peer.
        addr: String,
        /// The request's API.
        api_key: kafka_protocol::messages::ApiKey,
        /// The timeout that passed.
        timeout_ms: u64,
    },
    /// The connection closed (by the peer, by an IO error, or after a protocol error on another
    /// request) before this request's response arrived. Retriable on a new connection.
    #[error("connection to {addr} closed before the response arrived")]
    Disconnected {
        /// The peer.
        addr: String,
    },
    /// Reading or writing the socket failed.
    #[error("IO on the connection to {addr}")]
    Io {
        /// The peer.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The peer sent a frame that cannot be read; the connection is closed.
    #[error("bad frame from {addr}")]
    Frame {
        /// The peer.
        addr: String,
        /// What was wrong.
        #[source]
        source: FrameError,
    },
    /// A response carried another correlation id than the oldest request in flight. Responses
    /// come in request order on a Kafka connection, so the stream is out of step; the connection
    /// is closed (Kafka's `NetworkClient.correlate` throws `IllegalStateException`).
    #[error("response from {addr} has correlation id {received}, expected {expected}")]
    CorrelationMismatch {
        /// The peer.
        addr: String,
        /// The id of the oldest request in flight.
        expected: i32,
        /// The id in the response header.
        received: i32,
    },
    /// A response arrived while no request was in flight; the connection is closed.
    #[error("unsolicited response from {addr}")]
    UnexpectedResponse {
        /// The peer.
        addr: String,
    },
    /// The request could not be encoded at this version (a field set that the version lacks, or
    /// a version outside the codec's range). Nothing was sent.
    #[error("encoding {api_key:?} v{api_version} request")]
    Encode {
        /// The request's API.
        api_key: kafka_protocol::messages::ApiKey,
        /// The version asked for.
        api_version: i16,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// The response did not decode; the connection is closed.
    #[error("undecodable {api_key:?} v{api_version} response from {addr}")]
    DecodeResponse {
        /// The peer.
        addr: String,
        /// The request's API.
        api_key: kafka_protocol::messages::ApiKey,
        /// The version of the request.
        api_version: i16,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// The request value is of a kind this crate does not know the API key of (the codec's
    /// request enum is non-exhaustive).
    #[error("request kind without a known API key")]
    UnknownRequestKind,
    /// ApiVersions negotiation: the server does not support any version of this API that we do.
    #[error("{addr} supports no common version of {api_key:?}")]
    NoCommonVersion {
        /// The peer.
        addr: String,
        /// The API.
        api_key: kafka_protocol::messages::ApiKey,
    },
    /// ApiVersions negotiation at connect returned an error code.
    #[error("ApiVersions to {addr} failed with error code {error_code}")]
    ApiVersionsFailed {
        /// The peer.
        addr: String,
        /// The Kafka error code in the response.
        error_code: i16,
    },
    /// The TLS handshake failed ([`crate::ClientConfig::security`] has TLS): an untrusted or
    /// expired server certificate, a host name the certificate does not carry (with
    /// `ssl.endpoint.identification.algorithm=https`), a client certificate the server refused,
    /// no common protocol, or a peer that does not speak TLS. Remedy: the truststore, keystore
    /// and listener's `ssl.*` settings on both sides. Not retriable (Kafka's
    /// `SslAuthenticationException`).
    #[error("connection to {addr} failed: SSL handshake failed: {reason}")]
    SslHandshake {
        /// The peer.
        addr: String,
        /// rustls's or the socket's reason.
        reason: String,
    },
    /// SASL authentication failed: the server refused the mechanism (its error code is
    /// `UNSUPPORTED_SASL_MECHANISM`), the credentials (`SASL_AUTHENTICATION_FAILED` with the
    /// server's message, e.g. "Authentication failed: Invalid username or password"), or our
    /// client found the server's tokens wrong (a SCRAM server signature that does not verify).
    /// Remedy: the JAAS `username`/`password` and the mechanism settings. Not retriable
    /// (Kafka's `SaslAuthenticationException`).
    #[error("connection to {addr} failed authentication due to: {message}")]
    AuthenticationFailed {
        /// The peer.
        addr: String,
        /// The Kafka error code (the server's, or `SASL_AUTHENTICATION_FAILED` for a failure
        /// found by the client).
        error_code: i16,
        /// The server's message, or Kafka's client-side message.
        message: String,
    },
    /// [`crate::NetworkClient`]: no address is known for this node id.
    #[error("no address known for node {node_id}")]
    UnknownNode {
        /// The node id asked for.
        node_id: i32,
    },
}

impl ClientError {
    /// The Kafka error code a caller reports for this failure when it must answer with a code
    /// (Kafka's `NetworkClient` turns a disconnect into `NETWORK_EXCEPTION` and a timeout into
    /// `REQUEST_TIMED_OUT`, both retriable).
    #[must_use]
    pub fn response_error(&self) -> ResponseError {
        match self {
            ClientError::RequestTimeout { .. } | ClientError::ConnectTimeout { .. } => {
                ResponseError::RequestTimedOut
            }
            ClientError::Connect { .. }
            | ClientError::InBackoff { .. }
            | ClientError::Disconnected { .. }
            | ClientError::Io { .. }
            | ClientError::Frame { .. }
            | ClientError::CorrelationMismatch { .. }
            | ClientError::UnexpectedResponse { .. }
            | ClientError::DecodeResponse { .. }
            | ClientError::UnknownNode { .. }
            // Kafka's protocol has no code for a failed TLS handshake.
            | ClientError::SslHandshake { .. } => ResponseError::NetworkException,
            ClientError::NoCommonVersion { .. } => ResponseError::UnsupportedVersion,
            ClientError::AuthenticationFailed { error_code, .. } => {
                ResponseError::try_from_code(*error_code)
                    .unwrap_or(ResponseError::SaslAuthenticationFailed)
            }
            ClientError::ApiVersionsFailed { error_code, .. } => {
                ResponseError::try_from_code(*error_code).unwrap_or(ResponseError::Unknown(0))
            }
            ClientError::Encode { .. } | ClientError::UnknownRequestKind => {
                ResponseError::UnknownServerError
            }
        }
    }

    /// Whether trying again (on a new connection, after backoff) can succeed. Failed
    /// authentication (TLS or SASL) is not retriable, as Kafka's `AuthenticationException`.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        !matches!(self, ClientError::SslHandshake { .. }) && self.response_error().is_retriable()
    }
}
