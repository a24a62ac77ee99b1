//! The client side: [`Connection`] (one TCP connection, pipelined requests matched to responses
//! by correlation id) and [`Client`] (one `host:port`, reconnecting with exponential backoff).
//!
//! A connection's task writes requests in the order callers hand them over, assigning
//! correlation ids 0, 1, 2, …; Kafka answers in the same order, so each response must carry the
//! id of the oldest request in flight — anything else closes the connection
//! ([`ClientError::CorrelationMismatch`]). A request that times out closes the connection too,
//! as Kafka's `NetworkClient` does; the next call on a [`Client`] reconnects.
//!
//! With [`ClientConfig::security`], [`Connection::connect`] first runs the TLS handshake
//! (rustls, [`crate::security::TlsClient`]) and SASL authentication (SaslHandshake v1, then
//! SaslAuthenticate carrying [`crate::security::sasl::SaslClient`]'s tokens), all within the
//! connect timeout; a failure is [`ClientError::SslHandshake`] or
//! [`ClientError::AuthenticationFailed`], not retriable, and [`Client`] logs it at ERROR as
//! Kafka's `NetworkClient` does. A session the server granted a lifetime (KIP-368) is not
//! re-authenticated in place: [`Client`] opens a fresh connection at 85–95 % of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestKind, ResponseKind, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, debug, debug_span, error, info, warn};

use crate::api_versions::ApiVersionsTable;
use crate::codec::{UNSUPPORTED_VERSION, decode_response_body, decode_response_header};
use crate::config::ClientConfig;
use crate::error::{ClientError, CodecError};
use crate::error_codes;
use crate::frame::{FrameBuilder, FrameDecoder};
use crate::security::TlsClient;
use crate::security::sasl::{SaslClient, SaslCredentials};

/// `client.software.name` sent in ApiVersions v3+.
pub const CLIENT_SOFTWARE_NAME: &str = "krust";

type ReplySender = oneshot::Sender<Result<ResponseKind, ClientError>>;

/// A request on its way to the connection task.
struct Outgoing {
    api_key: ApiKey,
    api_version: i16,
    /// The encoded body; the task puts the header with its correlation id in front.
    body: Bytes,
    reply: ReplySender,
    slot: OwnedSemaphorePermit,
}

/// A request written and not yet answered.
struct InFlight {
    correlation_id: i32,
    api_key: ApiKey,
    api_version: i16,
    reply: ReplySender,
    _slot: OwnedSemaphorePermit,
}

/// One TCP connection to a Kafka-protocol server. Cheap to share behind an `Arc`; any number of
/// tasks may call [`Connection::send`] at once (up to
/// [`ClientConfig::max_in_flight_requests_per_connection`] requests are in flight, the rest
/// wait). Dropping it closes the connection.
#[derive(Debug)]
pub struct Connection {
    addr: String,
    config: Arc<ClientConfig>,
    requests: mpsc::Sender<Outgoing>,
    slots: Arc<Semaphore>,
    task: JoinHandle<()>,
    /// Set by [`Connection::close`]; an aborted task may not have finished yet.
    closed: AtomicBool,
    api_versions: Option<ApiVersionsTable>,
    /// When a SASL session with a lifetime (KIP-368 `SessionLifetimeMs`) should be replaced.
    reauthenticate_at: Option<Instant>,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within [`ClientConfig::connect_timeout`] — the TCP
    /// connection, then the TLS handshake and SASL authentication when
    /// [`ClientConfig::security`] has them — and, when [`ClientConfig::negotiate_api_versions`]
    /// is set, asks for the server's API versions.
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] / [`ClientError::ConnectTimeout`],
    /// [`ClientError::SslHandshake`], [`ClientError::AuthenticationFailed`]; for the
    /// negotiation, any error of [`Connection::send`] and [`ClientError::ApiVersionsFailed`].
    pub async fn connect(addr: &str, config: ClientConfig) -> Result<Connection, ClientError> {
        let connect_timeout = config.connect_timeout;
        let transport = match tokio::time::timeout(connect_timeout, establish(addr, &config)).await
        {
            Ok(result) => result?,
            Err(_elapsed) => {
                return Err(ClientError::ConnectTimeout {
                    addr: addr.to_owned(),
                    timeout_ms: millis(connect_timeout),
                });
            }
        };
        let (transport, session_lifetime) = transport;
        let mut connection = Connection::from_transport(addr, transport, config);
        // KIP-368: Kafka's client re-authenticates at 85–95 % of the session lifetime the
        // server granted; krust replaces the connection instead (a new one authenticates
        // afresh), so no request meets a server that closes expired sessions.
        connection.reauthenticate_at = session_lifetime.map(|lifetime| {
            let share: f64 = rand::thread_rng().gen_range(0.85..0.95);
            Instant::now() + lifetime.mul_f64(share)
        });
        if connection.config.negotiate_api_versions {
            let table = connection.negotiate_api_versions().await?;
            connection.api_versions = Some(table);
        }
        Ok(connection)
    }

    fn from_transport(addr: &str, transport: Transport, config: ClientConfig) -> Connection {
        let max_in_flight = config.max_in_flight_requests_per_connection.max(1);
        let (requests, requests_rx) = mpsc::channel(max_in_flight);
        let config = Arc::new(config);
        let span = debug_span!("client_connection", peer = addr);
        let io = ConnectionIo {
            addr: addr.to_owned(),
            client_id: config.client_id.clone(),
            max_response_bytes: config.max_response_bytes,
        };
        let task = match transport {
            Transport::Plain(stream) => {
                let (read_half, write_half) = stream.into_split();
                tokio::spawn(io.run(read_half, write_half, requests_rx).instrument(span))
            }
            Transport::Tls(stream) => {
                let (read_half, write_half) = tokio::io::split(*stream);
                tokio::spawn(io.run(read_half, write_half, requests_rx).instrument(span))
            }
        };
        Connection {
            addr: addr.to_owned(),
            config,
            requests,
            slots: Arc::new(Semaphore::new(max_in_flight)),
            task,
            closed: AtomicBool::new(false),
            api_versions: None,
            reauthenticate_at: None,
        }
    }

    /// The peer's `host:port`.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection has closed (peer gone, IO or protocol error, timeout, or
    /// [`Connection::close`]). A closed connection fails every call with
    /// [`ClientError::Disconnected`].
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.task.is_finished()
    }

    /// Whether the SASL session's lifetime (KIP-368, granted by a server with
    /// `connections.max.reauth.ms`) is nearly over: [`Client`] then opens a new connection for
    /// later requests; requests already handed to this one finish on it.
    #[must_use]
    pub fn needs_reauthentication(&self) -> bool {
        self.reauthenticate_at
            .is_some_and(|at| Instant::now() >= at)
    }

    /// Closes the connection; requests in flight fail with [`ClientError::Disconnected`].
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.task.abort();
    }

    /// The server's answer to ApiVersions at connect, when negotiation was asked for.
    #[must_use]
    pub fn api_versions(&self) -> Option<&ApiVersionsTable> {
        self.api_versions.as_ref()
    }

    /// The highest version of `api_key` both the server (per the negotiation at connect) and the
    /// codec know, capped to `ours`; without negotiation, `ours.1` capped to the codec.
    ///
    /// # Errors
    ///
    /// [`ClientError::NoCommonVersion`] when there is none.
    pub fn usable_version(&self, api_key: ApiKey, ours: (i16, i16)) -> Result<i16, ClientError> {
        let version = match &self.api_versions {
            Some(table) => table.latest_usable_version(api_key, ours),
            None => {
                let codec = api_key.valid_versions();
                let max = ours.1.min(codec.max);
                (max >= ours.0.max(codec.min)).then_some(max)
            }
        };
        version.ok_or_else(|| ClientError::NoCommonVersion {
            addr: self.addr.clone(),
            api_key,
        })
    }

    /// Sends `request` at `api_version` and waits for its response, at most
    /// [`ClientConfig::request_timeout`].
    ///
    /// # Errors
    ///
    /// See [`ClientError`]; after a timeout or any connection-level error the connection is
    /// closed.
    pub async fn send(
        &self,
        request: impl Into<RequestKind>,
        api_version: i16,
    ) -> Result<ResponseKind, ClientError> {
        self.send_with_timeout(request.into(), api_version, self.config.request_timeout)
            .await
    }

    /// [`Connection::send`] with its own timeout.
    ///
    /// # Errors
    ///
    /// As [`Connection::send`].
    pub async fn send_with_timeout(
        &self,
        request: RequestKind,
        api_version: i16,
        timeout: Duration,
    ) -> Result<ResponseKind, ClientError> {
        let api_key =
            crate::codec::request_api_key(&request).ok_or(ClientError::UnknownRequestKind)?;
        let mut body = BytesMut::with_capacity(256);
        request
            .encode(&mut body, api_version)
            .map_err(|e| ClientError::Encode {
                api_key,
                api_version,
                source: CodecError::from(e),
            })?;
        let body = body.freeze();
        // Whether the request reached the connection task: a timeout before that (all
        // in-flight slots busy) says nothing about the connection, so it stays open.
        let handed_over = AtomicBool::new(false);
        let exchange = async {
            let disconnected = || ClientError::Disconnected {
                addr: self.addr.clone(),
            };
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| disconnected())?;
            let (reply, reply_rx) = oneshot::channel();
            let outgoing = Outgoing {
                api_key,
                api_version,
                body,
                reply,
                slot,
            };
            self.requests
                .send(outgoing)
                .await
                .map_err(|_| disconnected())?;
            handed_over.store(true, Ordering::Relaxed);
            reply_rx.await.map_err(|_| disconnected())?
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_elapsed) => {
                if handed_over.load(Ordering::Relaxed) {
                    warn!(peer = %self.addr, ?api_key, timeout_ms = millis(timeout), "request timed out; closing connection");
                    self.close();
                } else {
                    debug!(peer = %self.addr, ?api_key, timeout_ms = millis(timeout), "request timed out waiting for an in-flight slot");
                }
                Err(ClientError::RequestTimeout {
                    addr: self.addr.clone(),
                    api_key,
                    timeout_ms: millis(timeout),
                })
            }
        }
    }

    /// ApiVersions at the newest version the codec knows, falling back to the server's
    /// ApiVersions maximum when it answers `UNSUPPORTED_VERSION` (KIP-511).
    async fn negotiate_api_versions(&self) -> Result<ApiVersionsTable, ClientError> {
        let mut version = ApiKey::ApiVersions.valid_versions().max;
        // At most two rounds: the newest version, then the server's maximum.
        for _ in 0..2 {
            let mut request = ApiVersionsRequest::default();
            request.client_software_name = StrBytes::from_static_str(CLIENT_SOFTWARE_NAME);
            request.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
            let response = self.send(request, version).await?;
            let ResponseKind::ApiVersions(response) = response else {
                return Err(ClientError::UnexpectedResponse {
                    addr: self.addr.clone(),
                });
            };
            if response.error_code == 0 {
                return Ok(ApiVersionsTable::from_response(&response));
            }
            let server_max = ApiVersionsTable::from_response(&response)
                .server_range(ApiKey::ApiVersions)
                .map(|(_, max)| max);
            match server_max {
                Some(max) if response.error_code == UNSUPPORTED_VERSION && max < version => {
                    debug!(peer = %self.addr, from = version, to = max, "ApiVersions: retrying at the server's version");
                    version = max.max(0);
                }
                _ => break,
            }
        }
        Err(ClientError::ApiVersionsFailed {
            addr: self.addr.clone(),
            error_code: UNSUPPORTED_VERSION,
        })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The connection task's state.
struct ConnectionIo {
    addr: String,
    client_id: String,
    max_response_bytes: usize,
}

impl ConnectionIo {
    async fn run<R, W>(self, read_half: R, write_half: W, requests: mpsc::Receiver<Outgoing>)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        // Requests written and not yet answered, oldest first; shared by writer and reader
        // through a channel (the writer pushes before writing, so a response never finds it
        // empty unless the server sent something unasked).
        let (in_flight_tx, in_flight_rx) = mpsc::unbounded_channel::<InFlight>();
        let writer = self.write_requests(write_half, requests, in_flight_tx);
        let reader = self.read_responses(read_half, in_flight_rx);
        tokio::pin!(writer, reader);
        let failure = tokio::select! {
            failure = &mut writer => failure,
            failure = &mut reader => failure,
        };
        match failure {
            Some(e) => info!(peer = %self.addr, error = %e, "connection closed"),
            None => debug!(peer = %self.addr, "connection closed"),
        }
    }

    /// Writes requests in order; `Some(error)` when the socket failed, `None` when the
    /// [`Connection`] was dropped.
    async fn write_requests<W: AsyncWrite + Unpin>(
        &self,
        mut write_half: W,
        mut requests: mpsc::Receiver<Outgoing>,
        in_flight: mpsc::UnboundedSender<InFlight>,
    ) -> Option<ClientError> {
        let mut next_correlation_id: i32 = 0;
        while let Some(outgoing) = requests.recv().await {
            let correlation_id = next_correlation_id;
            next_correlation_id = next_correlation_id.checked_add(1).unwrap_or(0);
            let frame = match self.request_frame(&outgoing, correlation_id) {
                Ok(frame) => frame,
                Err(e) => {
                    let _ = outgoing.reply.send(Err(e));
                    continue;
                }
            };
            let entry = InFlight {
                correlation_id,
                api_key: outgoing.api_key,
                api_version: outgoing.api_version,
                reply: outgoing.reply,
                _slot: outgoing.slot,
            };
            if in_flight.send(entry).is_err() {
                return None; // the reader has ended; the select has already finished
            }
            if let Err(source) = write_half.write_all(&frame).await {
                return Some(ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                });
            }
        }
        None
    }

    fn request_frame(
        &self,
        outgoing: &Outgoing,
        correlation_id: i32,
    ) -> Result<Bytes, ClientError> {
        use kafka_protocol::messages::RequestHeader;
        use kafka_protocol::protocol::Encodable;
        let encode_error = |source: CodecError| ClientError::Encode {
            api_key: outgoing.api_key,
            api_version: outgoing.api_version,
            source,
        };
        let header_version = outgoing
            .api_key
            .request_header_version(outgoing.api_version);
        let mut header = RequestHeader::default();
        header.request_api_key = outgoing.api_key as i16;
        header.request_api_version = outgoing.api_version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_string(self.client_id.clone()));
        let mut frame = FrameBuilder::new(32 + outgoing.body.len());
        header
            .encode(frame.buf(), header_version)
            .map_err(|e| encode_error(CodecError::from(e)))?;
        frame.buf().extend_from_slice(&outgoing.body);
        frame
            .finish()
            .ok_or_else(|| encode_error(CodecError::from("request larger than 2 GiB")))
    }

    /// Reads responses and hands each to its caller; returns the error that ended the
    /// connection (`None` for a clean close by the peer with nothing in flight).
    async fn read_responses<R: AsyncRead + Unpin>(
        &self,
        mut read_half: R,
        mut in_flight: mpsc::UnboundedReceiver<InFlight>,
    ) -> Option<ClientError> {
        let decoder = FrameDecoder::new(self.max_response_bytes);
        let mut buf = BytesMut::new();
        loop {
            loop {
                let frame = match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(source) => {
                        return Some(ClientError::Frame {
                            addr: self.addr.clone(),
                            source,
                        });
                    }
                };
                let Ok(request) = in_flight.try_recv() else {
                    return Some(ClientError::UnexpectedResponse {
                        addr: self.addr.clone(),
                    });
                };
                if let Err(e) = self.deliver(frame, request) {
                    return Some(e);
                }
            }
            match read_half.read_buf(&mut buf).await {
                Ok(0) => {
                    return Some(ClientError::Disconnected {
                        addr: self.addr.clone(),
                    });
                }
                Ok(_) => {}
                Err(source) => {
                    return Some(ClientError::Io {
                        addr: self.addr.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// Matches one response frame to the oldest request in flight. An `Err` ends the
    /// connection; the request that met it has already been told.
    fn deliver(&self, mut frame: Bytes, request: InFlight) -> Result<(), ClientError> {
        let decode_error = |source: CodecError| ClientError::DecodeResponse {
            addr: self.addr.clone(),
            api_key: request.api_key,
            api_version: request.api_version,
            source,
        };
        let received =
            match decode_response_header(&mut frame, request.api_key, request.api_version) {
                Ok(id) => id,
                Err(source) => {
                    let _ = request.reply.send(Err(decode_error(source)));
                    return Err(ClientError::Disconnected {
                        addr: self.addr.clone(),
                    });
                }
            };
        if received != request.correlation_id {
            let mismatch = || ClientError::CorrelationMismatch {
                addr: self.addr.clone(),
                expected: request.correlation_id,
                received,
            };
            let _ = request.reply.send(Err(mismatch()));
            return Err(mismatch());
        }
        match decode_response_body(frame, request.api_key, request.api_version) {
            Ok(response) => {
                // The caller may have given up (timeout); that is its business.
                let _ = request.reply.send(Ok(response));
                Ok(())
            }
            Err(source) => {
                let _ = request.reply.send(Err(decode_error(source)));
                Err(ClientError::Disconnected {
                    addr: self.addr.clone(),
                })
            }
        }
    }
}

/// An established connection's byte stream.
enum Transport {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// TCP, then TLS and SASL as [`ClientConfig::security`] asks, with the SASL session's
/// lifetime if the server set one; the caller bounds the whole.
async fn establish(
    addr: &str,
    config: &ClientConfig,
) -> Result<(Transport, Option<Duration>), ClientError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_owned(),
            source,
        })?;
    if let Err(e) = stream.set_nodelay(true) {
        debug!(addr, error = %e, "TCP_NODELAY not set");
    }
    let security = &config.security;
    let Some(tls) = &security.tls else {
        let mut stream = stream;
        let lifetime = match &security.sasl {
            Some(credentials) => authenticate(&mut stream, addr, config, credentials).await?,
            None => None,
        };
        return Ok((Transport::Plain(stream), lifetime));
    };
    let handshake_failed = |reason: String| ClientError::SslHandshake {
        addr: addr.to_owned(),
        reason,
    };
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let server_name = TlsClient::server_name(host).map_err(handshake_failed)?;
    let mut stream = tls
        .connector()
        .connect(server_name, stream)
        .await
        .map_err(|e| handshake_failed(e.to_string()))?;
    let lifetime = match &security.sasl {
        Some(credentials) => authenticate(&mut stream, addr, config, credentials).await?,
        None => None,
    };
    Ok((Transport::Tls(Box::new(stream)), lifetime))
}

/// SaslAuthenticate version sent (Kafka 3.9 serves 0–2).
const SASL_AUTHENTICATE_VERSION: i16 = 2;
/// Rounds of SaslAuthenticate a mechanism may take (SCRAM takes two).
const MAX_SASL_ROUNDS: usize = 4;

/// Kafka's `SaslClientAuthenticator` on a new connection: SaslHandshake v1 naming the
/// mechanism, then the mechanism's tokens in SaslAuthenticate until it completes. A refused
/// mechanism or credential is [`ClientError::AuthenticationFailed`] with Kafka's (or the
/// server's) message. On success, the session lifetime the server granted (KIP-368: the last
/// SaslAuthenticate's `SessionLifetimeMs`, 0 = none).
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    addr: &str,
    config: &ClientConfig,
    credentials: &SaslCredentials,
) -> Result<Option<Duration>, ClientError> {
    let mut sasl = SaslClient::new(credentials.clone());
    let mechanism = sasl.mechanism().name();
    let mut io = SetupExchange {
        stream,
        addr,
        client_id: &config.client_id,
        decoder: FrameDecoder::new(config.max_response_bytes),
        buf: BytesMut::new(),
        correlation_id: 0,
    };
    let failed = |error_code: i16, message: String| ClientError::AuthenticationFailed {
        addr: addr.to_owned(),
        error_code,
        message,
    };
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let ResponseKind::SaslHandshake(response) = io
        .exchange(ApiKey::SaslHandshake, 1, handshake.into())
        .await?
    else {
        return Err(ClientError::UnexpectedResponse {
            addr: addr.to_owned(),
        });
    };
    if response.error_code != 0 {
        let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        let enabled = format!("[{}]", enabled.join(", "));
        let message = match response.error_code {
            error_codes::UNSUPPORTED_SASL_MECHANISM => format!(
                "Client SASL mechanism '{mechanism}' not enabled in the server, enabled mechanisms are {enabled}"
            ),
            error_codes::ILLEGAL_SASL_STATE => format!(
                "Unexpected handshake request with client mechanism {mechanism}, enabled mechanisms are {enabled}"
            ),
            code => format!(
                "SaslHandshake failed with error {}",
                error_codes::name(code).unwrap_or("UNKNOWN")
            ),
        };
        return Err(failed(response.error_code, message));
    }
    let mut token = sasl.initial_token();
    for _ in 0..MAX_SASL_ROUNDS {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let ResponseKind::SaslAuthenticate(response) = io
            .exchange(
                ApiKey::SaslAuthenticate,
                SASL_AUTHENTICATE_VERSION,
                request.into(),
            )
            .await?
        else {
            return Err(ClientError::UnexpectedResponse {
                addr: addr.to_owned(),
            });
        };
        if response.error_code != 0 {
            let message = match response.error_message {
                Some(message) => message.to_string(),
                None => format!(
                    "SaslAuthenticate failed with error {}",
                    error_codes::name(response.error_code).unwrap_or("UNKNOWN")
                ),
            };
            return Err(failed(response.error_code, message));
        }
        match sasl.step(&response.auth_bytes) {
            Ok(Some(next)) => token = next,
            Ok(None) => {
                let lifetime = u64::try_from(response.session_lifetime_ms)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis);
                debug!(peer = addr, mechanism, user = %credentials.username, session_lifetime_ms = response.session_lifetime_ms, "SASL authentication done");
                return Ok(lifetime);
            }
            Err(failure) => {
                return Err(failed(
                    error_codes::SASL_AUTHENTICATION_FAILED,
                    failure.message,
                ));
            }
        }
    }
    Err(failed(
        error_codes::SASL_AUTHENTICATION_FAILED,
        format!("{mechanism} did not complete within {MAX_SASL_ROUNDS} SaslAuthenticate rounds"),
    ))
}

/// One request, one response on a connection being set up (nothing else is in flight).
struct SetupExchange<'a, S> {
    stream: &'a mut S,
    addr: &'a str,
    client_id: &'a str,
    decoder: FrameDecoder,
    buf: BytesMut,
    correlation_id: i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> SetupExchange<'_, S> {
    async fn exchange(
        &mut self,
        api_key: ApiKey,
        api_version: i16,
        request: RequestKind,
    ) -> Result<ResponseKind, ClientError> {
        let correlation_id = self.correlation_id;
        self.correlation_id += 1;
        let frame = crate::codec::encode_request(
            api_key,
            api_version,
            correlation_id,
            self.client_id,
            &request,
        )
        .map_err(|source| ClientError::Encode {
            api_key,
            api_version,
            source,
        })?;
        let io_error = |source| ClientError::Io {
            addr: self.addr.to_owned(),
            source,
        };
        self.stream.write_all(&frame).await.map_err(io_error)?;
        self.stream.flush().await.map_err(io_error)?;
        let mut frame = loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(source) => {
                    return Err(ClientError::Frame {
                        addr: self.addr.to_owned(),
                        source,
                    });
                }
            }
            match self.stream.read_buf(&mut self.buf).await {
                // The server closes a connection it will not authenticate (Kafka: a request
                // other than ApiVersions/SaslHandshake before the handshake, a v0 exchange).
                Ok(0) => {
                    return Err(ClientError::Disconnected {
                        addr: self.addr.to_owned(),
                    });
                }
                Ok(_) => {}
                Err(source) => return Err(io_error(source)),
            }
        };
        let decode_error = |source| ClientError::DecodeResponse {
            addr: self.addr.to_owned(),
            api_key,
            api_version,
            source,
        };
        let received =
            decode_response_header(&mut frame, api_key, api_version).map_err(decode_error)?;
        if received != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                addr: self.addr.to_owned(),
                expected: correlation_id,
                received,
            });
        }
        decode_response_body(frame, api_key, api_version).map_err(decode_error)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Kafka's reconnect backoff (`ExponentialBackoff` with multiplier 2 and jitter 0.2):
/// `reconnect.backoff.ms × 2^(failures-1)`, times a random factor in `[0.8, 1.2]`, capped at
/// `reconnect.backoff.max.ms`.
#[must_use]
pub fn reconnect_backoff(config: &ClientConfig, failures: u32, rng: &mut impl Rng) -> Duration {
    let base = config.reconnect_backoff.max(Duration::from_millis(1));
    let cap = config.reconnect_backoff_max.max(base);
    let exponent = failures.saturating_sub(1).min(20);
    let term = base.saturating_mul(1 << exponent).min(cap);
    let factor: f64 = rng.gen_range(0.8..=1.2);
    term.mul_f64(factor).min(cap)
}

/// A client for one `host:port` that connects on first use and reconnects after failures with
/// exponential backoff. Safe to share (`Arc<Client>`).
#[derive(Debug)]
pub struct Client {
    addr: String,
    config: ClientConfig,
    state: Mutex<ClientState>,
}

#[derive(Debug, Default)]
struct ClientState {
    connection: Option<Arc<Connection>>,
    /// Failed attempts since the last success.
    failures: u32,
    /// No attempt before this.
    next_attempt: Option<Instant>,
}

impl Client {
    /// A client for `addr`; nothing happens until the first request.
    #[must_use]
    pub fn new(addr: impl Into<String>, config: ClientConfig) -> Client {
        Client {
            addr: addr.into(),
            config,
            state: Mutex::new(ClientState::default()),
        }
    }

    /// The peer's `host:port`.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The open connection, connecting first if there is none. Attempts are spaced by the
    /// reconnect backoff and stop at `deadline`.
    ///
    /// # Errors
    ///
    /// The last attempt's error, or [`ClientError::InBackoff`] when no attempt fits before the
    /// deadline.
    pub async fn connection(&self, deadline: Instant) -> Result<Arc<Connection>, ClientError> {
        let mut state = self.state.lock().await;
        loop {
            if let Some(connection) = &state.connection {
                if !connection.is_closed() && !connection.needs_reauthentication() {
                    return Ok(connection.clone());
                }
                debug!(peer = %self.addr, "connection closed or its SASL session expiring; reconnecting");
                state.connection = None;
            }
            let now = Instant::now();
            if let Some(at) = state.next_attempt {
                if at > deadline {
                    return Err(ClientError::InBackoff {
                        addr: self.addr.clone(),
                        retry_in_ms: millis(at.saturating_duration_since(now)),
                    });
                }
                tokio::time::sleep_until(at).await;
            }
            let mut config = self.config.clone();
            let left = deadline.saturating_duration_since(Instant::now());
            config.connect_timeout = config.connect_timeout.min(left);
            match Connection::connect(&self.addr, config).await {
                Ok(connection) => {
                    if state.failures > 0 {
                        info!(peer = %self.addr, failures = state.failures, "reconnected");
                    }
                    state.failures = 0;
                    state.next_attempt = None;
                    let connection = Arc::new(connection);
                    state.connection = Some(connection.clone());
                    return Ok(connection);
                }
                Err(e) => {
                    state.failures = state.failures.saturating_add(1);
                    let backoff =
                        reconnect_backoff(&self.config, state.failures, &mut rand::thread_rng());
                    state.next_attempt = Some(Instant::now() + backoff);
                    if matches!(
                        e,
                        ClientError::SslHandshake { .. } | ClientError::AuthenticationFailed { .. }
                    ) {
                        // Kafka's `NetworkClient` logs failed authentication at ERROR: the
                        // operator must fix credentials or certificates.
                        error!(peer = %self.addr, error = %e, failures = state.failures, backoff_ms = millis(backoff), "authentication failed");
                    } else {
                        debug!(peer = %self.addr, error = %e, failures = state.failures, backoff_ms = millis(backoff), "connection attempt failed");
                    }
                    if Instant::now() >= deadline || !e.is_retriable() {
                        return Err(e);
                    }
                    if state.next_attempt.is_some_and(|at| at > deadline) {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Sends `request` at `api_version`, connecting first if needed; the whole call (connecting
    /// included) is bounded by [`ClientConfig::request_timeout`].
    ///
    /// # Errors
    ///
    /// See [`ClientError`].
    pub async fn send(
        &self,
        request: impl Into<RequestKind>,
        api_version: i16,
    ) -> Result<ResponseKind, ClientError> {
        let request = request.into();
        let deadline = Instant::now() + self.config.request_timeout;
        let connection = self.connection(deadline).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        connection
            .send_with_timeout(request, api_version, left)
            .await
    }

    /// Sends `request` at the highest version within `ours` (the caller's `min..=max`) that
    /// the server supports, per the ApiVersions negotiation at connect (set
    /// [`ClientConfig::negotiate_api_versions`]; without it, `ours.1` capped to the codec).
    ///
    /// # Errors
    ///
    /// [`ClientError::NoCommonVersion`], or any error of [`Client::send`].
    pub async fn send_latest(
        &self,
        request: impl Into<RequestKind>,
        ours: (i16, i16),
    ) -> Result<(i16, ResponseKind), ClientError> {
        let request = request.into();
        let api_key =
            crate::codec::request_api_key(&request).ok_or(ClientError::UnknownRequestKind)?;
        let deadline = Instant::now() + self.config.request_timeout;
        let connection = self.connection(deadline).await?;
        let version = connection.usable_version(api_key, ours)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let response = connection.send_with_timeout(request, version, left).await?;
        Ok((version, response))
    }

    /// Closes the current connection, if any; the next request reconnects at once.
    pub async fn disconnect(&self) {
        let mut state = self.state.lock().await;
        if let Some(connection) = state.connection.take() {
            connection.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let config = ClientConfig::default(); // 50 ms, cap 1000 ms
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let cases = [
                (1, 40, 60, "first failure: 50 ms ±20%"),
                (2, 80, 120, "second: 100 ms ±20%"),
                (4, 320, 480, "fourth: 400 ms ±20%"),
                (5, 640, 960, "fifth: 800 ms ±20%"),
                (
                    6,
                    800,
                    1000,
                    "sixth: capped term 1000 ms, jitter below, never above the cap",
                ),
                (u32::MAX, 800, 1000, "many failures stay at the cap"),
            ];
            for (failures, lo, hi, reason) in cases {
                let ms = reconnect_backoff(&config, failures, &mut rng).as_millis();
                assert!(
                    (lo..=hi).contains(&ms),
                    "case {reason}: {ms} ms not in {lo}..={hi}"
                );
            }
        }
    }
}
