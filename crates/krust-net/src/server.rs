//! A Kafka-protocol listener: accept loop, one task per connection, requests handed to a
//! [`Handler`], responses written in request order.
//!
//! Per connection, a reader decodes frames and spawns one handler task per request (at most
//! `max_in_flight_requests_per_connection` at a time; then it stops reading, which pushes back
//! on the client), and a writer awaits those tasks **in request order** and writes their
//! responses, so a client that pipelines sees responses in the order it sent requests even when
//! the handler finishes them out of order.
//!
//! What closes a connection (Kafka 3.9 `SocketServer` behaviour): a size prefix over
//! `socket.request.max.bytes` or negative; an unknown API key; an API or version the handler
//! does not serve (except ApiVersions, answered at any version); an undecodable header or body;
//! `connections.max.idle.ms` without traffic; a [`Reply::Close`]; a handler that panics or
//! answers with another API's response or one that cannot be encoded at the request's version.
//! Earlier requests on the connection still get their responses first.
//!
//! A listener with TLS ([`ServerConfig::security`]) runs the TLS handshake first, bounded by
//! `connections.max.idle.ms`; a failed handshake (an untrusted or missing client certificate
//! under `ssl.client.auth=required`, a client speaking plaintext, …) or a client certificate
//! whose DN no `ssl.principal.mapping.rules` rule maps closes the connection before any request
//! is read. The connection's principal is in every [`RequestContext`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{Instrument, debug, debug_span, error, info, info_span, trace, warn};

use crate::api_versions::SupportedApis;
use crate::codec::{
    DecodedHeader, IncomingRequest, decode_request, encode_response, response_api_key,
    unsupported_api_versions_response,
};
use crate::config::ServerConfig;
use crate::connection_quotas::Refusal;
use crate::error::ServerError;
use crate::error_codes;
use crate::frame::FrameDecoder;
use crate::security::KafkaPrincipal;
use crate::security::sasl::{Exchange, SaslMechanism, SaslSettings, Step};

/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// A connection's mute for quota throttling (Kafka's `SocketServer` channel mute states
/// `MUTED_AND_THROTTLED…`): a handler that throttles a client calls
/// [`ConnectionThrottle::throttle`], and the server reads no further request of the
/// connection until the throttle has ended **and** the response was written. Clones share the
/// connection's mute; two are equal when they are the same connection's.
#[derive(Debug, Clone, Default)]
pub struct ConnectionThrottle(Arc<std::sync::Mutex<Option<Instant>>>);

impl ConnectionThrottle {
    /// Mutes the connection for `duration` from now (a later end already set is kept).
    pub fn throttle(&self, duration: Duration) {
        let until = Instant::now() + duration;
        let mut end = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if end.is_none_or(|e| e < until) {
            *end = Some(until);
        }
    }

    /// When the current throttle ends, if one was set.
    #[must_use]
    pub fn until(&self) -> Option<Instant> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PartialEq for ConnectionThrottle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ConnectionThrottle {}

/// What the server knows about a request besides its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    /// The API.
    pub api_key: ApiKey,
    /// The version the client used; the response is written at the same version.
    pub api_version: i16,
    /// Echoed in the response header.
    pub correlation_id: i32,
    /// `client.id` from the request header (`""` when the client sent null).
    pub client_id: String,
    /// The client's address.
    pub peer_addr: SocketAddr,
    /// The listener's name ([`ServerConfig::listener_name`]).
    pub listener_name: Arc<str>,
    /// Unique per server, for logs.
    pub connection_id: u64,
    /// Who the client is: `User:ANONYMOUS`, or the mapped DN of its TLS certificate.
    pub principal: Arc<KafkaPrincipal>,
    /// The request's size in bytes, header and body (the frame without its size prefix:
    /// Kafka's `RequestChannel.Request.sizeInBytes`, what `producer_byte_rate` counts).
    pub request_size: usize,
    /// The connection's mute, for quota throttling.
    pub throttle: ConnectionThrottle,
}

/// What a handler returns for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Send this response (it must be of the request's API). Boxed: response kinds are large.
    Send(Box<ResponseKind>),
    /// Send nothing and go on with the next request (Produce with `acks=0`).
    NoResponse,
    /// Close the connection after the responses to earlier requests.
    Close,
}

impl From<ResponseKind> for Reply {
    fn from(response: ResponseKind) -> Self {
        Reply::Send(Box::new(response))
    }
}

/// The code behind a listener. One value serves every connection; `handle` may be called for
/// several requests at once (see [`ServerConfig::max_in_flight_requests_per_connection`]).
pub trait Handler: Send + Sync + 'static {
    /// The APIs this listener serves. Requests for anything else close the connection, except
    /// ApiVersions, which the server answers itself with `UNSUPPORTED_VERSION` when the version
    /// is not listed.
    fn supported_apis(&self) -> &SupportedApis;

    /// Handles one request of an API and version in [`Handler::supported_apis`]. ApiVersions
    /// requests at a supported version come here too; [`SupportedApis::respond_to`] builds the
    /// usual answer.
    fn handle(
        &self,
        ctx: RequestContext,
        request: RequestKind,
    ) -> impl Future<Output = Reply> + Send;
}

/// A running listener. Dropping it stops accepting and tells connections to close without
/// waiting; [`Server::shutdown`] also waits for them.
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept_task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and starts accepting connections in the background.
    ///
    /// # Errors
    ///
    /// [`ServerError::Bind`] when the address cannot be bound, [`ServerError::Config`] for a
    /// limit of zero.
    pub async fn bind<H: Handler>(
        addr: &str,
        handler: Arc<H>,
        config: ServerConfig,
    ) -> Result<Server, ServerError> {
        check_positive("socket.request.max.bytes", config.socket_request_max_bytes)?;
        check_positive("max.connections", config.max_connections)?;
        check_positive(
            "max.in.flight.requests.per.connection",
            config.max_in_flight_requests_per_connection,
        )?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind {
                addr: addr.to_owned(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: addr.to_owned(),
            source,
        })?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let span = info_span!("listener", name = %config.listener_name, addr = %local_addr);
        info!(parent: &span, "listening");
        let accept_task = tokio::spawn(
            accept_loop(listener, handler, Arc::new(config), shutdown_rx).instrument(span),
        );
        Ok(Server {
            local_addr,
            shutdown,
            accept_task: Some(accept_task),
        })
    }

    /// The bound address (with the port the OS picked for port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection (requests in flight are abandoned, their
    /// handler tasks aborted) and waits until all connection tasks have ended.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.accept_task.take()
            && let Err(e) = task.await
        {
            error!(error = %e, "accept loop ended abnormally");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

fn check_positive(name: &'static str, value: usize) -> Result<(), ServerError> {
    if value == 0 {
        return Err(ServerError::Config {
            name,
            value: value.to_string(),
            reason: "must be at least 1",
        });
    }
    Ok(())
}

async fn accept_loop<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    config: Arc<ServerConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connection_limit = Arc::new(Semaphore::new(
        config.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let listener_name: Arc<str> = Arc::from(config.listener_name.as_str());
    if let Some(quotas) = &config.connection_quotas {
        quotas.add_listener(&listener_name);
    }
    let mut connections = JoinSet::new();
    let mut next_connection_id: u64 = 0;
    loop {
        // A connection holds its permit for its whole life (`max.connections`).
        let permit = tokio::select! {
            permit = connection_limit.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_closed) => break, // never closed: we own the only handle
            },
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (stream, peer_addr) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let quota_slot = match &config.connection_quotas {
            None => None,
            Some(quotas) => {
                let acquired = tokio::select! {
                    acquired = quotas.acquire(&listener_name, peer_addr.ip()) => acquired,
                    _ = shutdown.wait_for(|stop| *stop) => break,
                };
                match acquired {
                    Ok(slot) => Some(slot),
                    Err(Refusal::TooManyConnections { ip, max }) => {
                        info!(
                            "Rejected connection from /{ip}, address already has the configured maximum of {max} connections."
                        );
                        drop(stream);
                        continue;
                    }
                    Err(Refusal::Throttled { ip, throttle }) => {
                        // Kafka holds the socket for the throttle, then closes it.
                        debug!(
                            "Delaying closing of connection from /{ip} for {} ms",
                            throttle.as_millis()
                        );
                        connections.spawn(async move {
                            tokio::time::sleep(throttle).await;
                            drop(stream);
                        });
                        continue;
                    }
                }
            }
        };
        let connection_id = next_connection_id;
        next_connection_id += 1;
        let span = info_span!("connection", peer = %peer_addr, connection_id);
        let connection = ConnectionTask {
            handler: handler.clone(),
            config: config.clone(),
            listener_name: listener_name.clone(),
            peer_addr,
            connection_id,
            shutdown: shutdown.clone(),
        };
        connections.spawn(
            async move {
                let _counted = quota_slot;
                connection.run(stream, permit).await;
            }
            .instrument(span),
        );
    }
    drop(listener);
    debug!(
        connections = connections.len(),
        "stopped accepting; waiting for connections"
    );
    while let Some(done) = connections.join_next().await {
        if let Err(e) = done {
            error!(error = %e, "connection task ended abnormally");
        }
    }
    info!("listener closed");
}

/// A handler task that is aborted if the connection goes away before its response is written.
struct AbortOnDrop(JoinHandle<Reply>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A request whose response is owed, in request order.
enum Pending {
    /// Being handled.
    Handler {
        header: DecodedHeader,
        task: AbortOnDrop,
        _slot: OwnedSemaphorePermit,
    },
    /// Answered by the server itself (ApiVersions at an unsupported version).
    Ready {
        frame: Bytes,
        _slot: OwnedSemaphorePermit,
    },
}

/// Last time bytes moved on the connection, as milliseconds since it opened.
struct Activity {
    opened: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

struct ConnectionTask<H> {
    handler: Arc<H>,
    config: Arc<ServerConfig>,
    listener_name: Arc<str>,
    peer_addr: SocketAddr,
    connection_id: u64,
    shutdown: watch::Receiver<bool>,
}

impl<H: Handler> ConnectionTask<H> {
    async fn run(self, stream: TcpStream, _connection_slot: OwnedSemaphorePermit) {
        debug!("connection opened");
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "TCP_NODELAY not set");
        }
        let Some(tls) = self.config.security.tls.clone() else {
            let (read_half, write_half) = stream.into_split();
            self.secure(read_half, write_half, KafkaPrincipal::anonymous())
                .await;
            return;
        };
        let mut shutdown = self.shutdown.clone();
        let handshake = tokio::select! {
            done = tokio::time::timeout(self.config.connections_max_idle, tls.acceptor().accept(stream)) => done,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                info!(error = %e, "closing connection: TLS handshake failed");
                return;
            }
            Err(_elapsed) => {
                info!("closing connection: TLS handshake not done within connections.max.idle.ms");
                return;
            }
        };
        let principal = match tls.principal(stream.get_ref().1.peer_certificates()) {
            Ok(principal) => principal,
            Err(reason) => {
                info!(%reason, "closing connection: SSL authentication failed");
                return;
            }
        };
        debug!(%principal, "TLS handshake done");
        let (read_half, write_half) = tokio::io::split(stream);
        self.secure(read_half, write_half, principal).await;
    }

    /// Runs SASL authentication when the listener has it, then serves requests.
    async fn secure<R, W>(&self, mut read_half: R, mut write_half: W, principal: KafkaPrincipal)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let Some(sasl) = self.config.security.sasl.clone() else {
            self.serve(read_half, write_half, Arc::new(principal), BytesMut::new())
                .await;
            return;
        };
        let Some((principal, buffered)) = self
            .authenticate(&sasl, &mut read_half, &mut write_half)
            .await
        else {
            return;
        };
        info!(%principal, "SASL authentication done");
        self.serve(read_half, write_half, Arc::new(principal), buffered)
            .await;
    }

    /// The next frame of the SASL phase, `None` at end of stream, bad size, idle or shutdown.
    async fn sasl_frame<R: AsyncRead + Unpin>(
        &self,
        read_half: &mut R,
        decoder: &FrameDecoder,
        buf: &mut BytesMut,
    ) -> Option<Bytes> {
        let mut shutdown = self.shutdown.clone();
        loop {
            match decoder.decode(buf) {
                Ok(Some(frame)) => return Some(frame),
                Ok(None) => {}
                Err(e) => {
                    info!(error = %e, "closing connection: SASL frame over sasl.server.max.receive.size or bad size");
                    return None;
                }
            }
            let read = tokio::select! {
                read = tokio::time::timeout(self.config.connections_max_idle, read_half.read_buf(buf)) => read,
                _ = shutdown.wait_for(|stop| *stop) => return None,
            };
            match read {
                Ok(Ok(n)) if n > 0 => {}
                Ok(Ok(_)) => return None,
                Ok(Err(e)) => {
                    debug!(error = %e, "read failed during SASL authentication");
                    return None;
                }
                Err(_elapsed) => {
                    info!("closing connection: idle during SASL authentication");
                    return None;
                }
            }
        }
    }

    /// Writes one frame (size prefix included); `false` when the connection is gone.
    async fn sasl_write<W: AsyncWrite + Unpin>(&self, write_half: &mut W, frame: &[u8]) -> bool {
        let mut shutdown = self.shutdown.clone();
        let written = tokio::select! {
            written = async {
                write_half.write_all(frame).await?;
                write_half.flush().await
            } => written,
            _ = shutdown.wait_for(|stop| *stop) => return false,
        };
        written.is_ok()
    }

    /// Kafka's `SaslServerAuthenticator`: ApiVersions and SaslHandshake, then the mechanism's
    /// tokens (in SaslAuthenticate after a v1 handshake, raw after v0). The principal and any
    /// bytes read past the last token, or `None` when the connection must close.
    async fn authenticate<R, W>(
        &self,
        sasl: &SaslSettings,
        read_half: &mut R,
        write_half: &mut W,
    ) -> Option<(KafkaPrincipal, BytesMut)>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        enum Stage {
            Handshake { api_versions_seen: bool },
            Authenticate(Exchange, SaslMechanism),
            RawTokens(Exchange),
        }
        let decoder = FrameDecoder::new(sasl.max_receive_size);
        let mut buf = BytesMut::new();
        let mut stage = Stage::Handshake {
            api_versions_seen: false,
        };
        let anonymous = Arc::new(KafkaPrincipal::anonymous());
        let enabled: Vec<StrBytes> = sasl
            .enabled_mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        loop {
            let frame = self.sasl_frame(read_half, &decoder, &mut buf).await?;
            if let Stage::RawTokens(exchange) = &mut stage {
                return match exchange.step(&frame, sasl) {
                    Ok(Step::Continue(token)) => {
                        if !self.sasl_write(write_half, &size_prefixed(&token)).await {
                            return None;
                        }
                        continue;
                    }
                    Ok(Step::Done { token, user }) => {
                        if !self.sasl_write(write_half, &size_prefixed(&token)).await {
                            return None;
                        }
                        Some((KafkaPrincipal::user(user), buf))
                    }
                    Err(failed) => {
                        info!(reason = %failed.message, "closing connection: SASL authentication failed");
                        tokio::time::sleep(sasl.failed_authentication_delay).await;
                        None
                    }
                };
            }
            let incoming = match decode_request(frame, self.handler.supported_apis()) {
                Ok(incoming) => incoming,
                Err(e) => {
                    info!(error = %e, "closing connection: bad request during SASL authentication");
                    return None;
                }
            };
            let (header, body) = match incoming {
                IncomingRequest::UnsupportedApiVersions { header } => {
                    let response = ResponseKind::ApiVersions(unsupported_api_versions_response(
                        self.handler.supported_apis(),
                    ));
                    let frame =
                        encode_response(header.correlation_id, ApiKey::ApiVersions, 0, &response)
                            .ok()?;
                    if !self.sasl_write(write_half, &frame).await {
                        return None;
                    }
                    continue;
                }
                IncomingRequest::Request { header, body } => (header, *body),
            };
            match (&mut stage, body) {
                (
                    Stage::Handshake {
                        api_versions_seen: seen @ false,
                    },
                    RequestKind::ApiVersions(request),
                ) => {
                    *seen = true;
                    let ctx = self.context(&header, &anonymous, 0, &ConnectionThrottle::default());
                    let reply = self
                        .handler
                        .handle(ctx, RequestKind::ApiVersions(request))
                        .await;
                    let Reply::Send(response) = reply else {
                        return None;
                    };
                    let frame = response_frame(&header, &response)?;
                    if !self.sasl_write(write_half, &frame).await {
                        return None;
                    }
                }
                (Stage::Handshake { .. }, RequestKind::SaslHandshake(request)) => {
                    let wanted = SaslMechanism::from_name(request.mechanism.as_str())
                        .filter(|m| sasl.enabled_mechanisms.contains(m));
                    let error_code = if wanted.is_some() {
                        error_codes::NONE
                    } else {
                        error_codes::UNSUPPORTED_SASL_MECHANISM
                    };
                    let response = ResponseKind::SaslHandshake(
                        SaslHandshakeResponse::default()
                            .with_error_code(error_code)
                            .with_mechanisms(enabled.clone()),
                    );
                    let frame = response_frame(&header, &response)?;
                    if !self.sasl_write(write_half, &frame).await {
                        return None;
                    }
                    let Some(mechanism) = wanted else {
                        info!(mechanism = %request.mechanism.as_str(), "closing connection: unsupported SASL mechanism");
                        tokio::time::sleep(sasl.failed_authentication_delay).await;
                        return None;
                    };
                    let exchange = Exchange::new(mechanism, sasl);
                    stage = if header.api_version == 0 {
                        Stage::RawTokens(exchange)
                    } else {
                        Stage::Authenticate(exchange, mechanism)
                    };
                }
                (
                    Stage::Authenticate(exchange, mechanism),
                    RequestKind::SaslAuthenticate(request),
                ) => {
                    let (response, done) = match exchange.step(&request.auth_bytes, sasl) {
                        Ok(Step::Continue(token)) => (
                            SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token)),
                            Ok(None),
                        ),
                        Ok(Step::Done { token, user }) => (
                            SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token)),
                            Ok(Some(user)),
                        ),
                        Err(failed) => (
                            SaslAuthenticateResponse::default()
                                .with_error_code(error_codes::SASL_AUTHENTICATION_FAILED)
                                .with_error_message(Some(StrBytes::from_string(
                                    failed.message.clone(),
                                ))),
                            Err(failed),
                        ),
                    };
                    let frame = response_frame(&header, &ResponseKind::SaslAuthenticate(response))?;
                    if !self.sasl_write(write_half, &frame).await {
                        return None;
                    }
                    match done {
                        Ok(None) => {}
                        Ok(Some(user)) => {
                            debug!(%mechanism, %user, "SASL exchange complete");
                            return Some((KafkaPrincipal::user(user), buf));
                        }
                        Err(failed) => {
                            info!(%mechanism, reason = %failed.message, "closing connection: SASL authentication failed");
                            tokio::time::sleep(sasl.failed_authentication_delay).await;
                            return None;
                        }
                    }
                }
                (Stage::Handshake { .. }, _) => {
                    info!(api_key = ?header.api_key, "closing connection: Unexpected Kafka request of type {:?} during SASL handshake.", header.api_key);
                    return None;
                }
                (_, _) => {
                    info!(api_key = ?header.api_key, "closing connection: Unexpected Kafka request of type {:?} during SASL authentication.", header.api_key);
                    return None;
                }
            }
        }
    }

    fn context(
        &self,
        header: &DecodedHeader,
        principal: &Arc<KafkaPrincipal>,
        request_size: usize,
        throttle: &ConnectionThrottle,
    ) -> RequestContext {
        RequestContext {
            api_key: header.api_key,
            api_version: header.api_version,
            correlation_id: header.correlation_id,
            client_id: header.client_id.clone(),
            peer_addr: self.peer_addr,
            listener_name: self.listener_name.clone(),
            connection_id: self.connection_id,
            principal: principal.clone(),
            request_size,
            throttle: throttle.clone(),
        }
    }

    async fn serve<R, W>(
        &self,
        read_half: R,
        write_half: W,
        principal: Arc<KafkaPrincipal>,
        buffered: BytesMut,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let max_in_flight = self.config.max_in_flight_requests_per_connection;
        let (pending_tx, pending_rx) = mpsc::channel(max_in_flight);
        let activity = Arc::new(Activity::new());
        let in_flight = Arc::new(Semaphore::new(max_in_flight));

        let writer = write_responses(
            write_half,
            pending_rx,
            activity.clone(),
            self.shutdown.clone(),
        );
        let reader = self.read_requests(
            read_half, pending_tx, activity, in_flight, &principal, buffered,
        );
        tokio::pin!(reader, writer);
        tokio::select! {
            () = &mut writer => {}
            () = &mut reader => {
                // The reader stopped (end of stream, bad input, idle, shutdown): answer what was
                // read before, then close. The writer stops at once on shutdown.
                writer.await;
            }
        }
        debug!("connection closed");
    }

    async fn read_requests<R: AsyncRead + Unpin>(
        &self,
        mut read_half: R,
        pending_tx: mpsc::Sender<Pending>,
        activity: Arc<Activity>,
        in_flight: Arc<Semaphore>,
        principal: &Arc<KafkaPrincipal>,
        buffered: BytesMut,
    ) {
        let decoder = FrameDecoder::new(self.config.socket_request_max_bytes);
        let max_in_flight = self.config.max_in_flight_requests_per_connection;
        let idle = self.config.connections_max_idle;
        let mut shutdown = self.shutdown.clone();
        let mut buf = buffered;
        let throttle = ConnectionThrottle::default();
        loop {
            loop {
                let frame = match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => {
                        warn!(error = %e, "closing connection: bad size prefix");
                        return;
                    }
                };
                activity.touch();
                // Wait for a free in-flight slot; not reading meanwhile pushes back on the peer.
                let slot = tokio::select! {
                    slot = in_flight.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_closed) => return, // never closed
                    },
                    _ = shutdown.wait_for(|stop| *stop) => return,
                };
                // A throttled connection stays muted until its throttle ends (the previous
                // request's response is written: its slot was released).
                if let Some(until) = throttle.until()
                    && until > Instant::now()
                {
                    trace!("muted: throttled");
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        _ = shutdown.wait_for(|stop| *stop) => return,
                    }
                    activity.touch();
                }
                let Some(pending) = self.dispatch(frame, slot, principal, &throttle) else {
                    return;
                };
                if pending_tx.send(pending).await.is_err() {
                    return; // the writer is gone
                }
            }
            // Muted while throttled: nothing more is read (Kafka stops reading the channel).
            if let Some(until) = throttle.until()
                && until > Instant::now()
            {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
                activity.touch();
            }
            let deadline = activity.last() + idle;
            tokio::select! {
                read = read_half.read_buf(&mut buf) => match read {
                    Ok(0) => {
                        debug!("peer closed the connection");
                        return;
                    }
                    Ok(n) => {
                        trace!(bytes = n, "read");
                        activity.touch();
                    }
                    Err(e) => {
                        debug!(error = %e, "read failed");
                        return;
                    }
                },
                () = tokio::time::sleep_until(deadline) => {
                    let idle_now = in_flight.available_permits() == max_in_flight
                        && activity.last() + idle <= Instant::now();
                    if idle_now {
                        info!(idle_ms = idle.as_millis(), "closing idle connection (connections.max.idle.ms)");
                        return;
                    }
                    // Busy, or traffic moved the deadline: wait for the new one.
                    if in_flight.available_permits() != max_in_flight {
                        activity.touch();
                    }
                }
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// Turns one frame into the response it owes, or `None` when the connection must close.
    fn dispatch(
        &self,
        frame: Bytes,
        slot: OwnedSemaphorePermit,
        principal: &Arc<KafkaPrincipal>,
        throttle: &ConnectionThrottle,
    ) -> Option<Pending> {
        let supported = self.handler.supported_apis();
        let request_size = frame.len();
        let incoming = match decode_request(frame, supported) {
            Ok(incoming) => incoming,
            Err(e) => {
                warn!(error = %e, source = ?std::error::Error::source(&e), "closing connection: bad request");
                return None;
            }
        };
        match incoming {
            IncomingRequest::UnsupportedApiVersions { header } => {
                debug!(
                    api_version = header.api_version,
                    "ApiVersions at an unsupported version: answering v0 UNSUPPORTED_VERSION"
                );
                let response =
                    ResponseKind::ApiVersions(unsupported_api_versions_response(supported));
                match encode_response(header.correlation_id, ApiKey::ApiVersions, 0, &response) {
                    Ok(frame) => Some(Pending::Ready { frame, _slot: slot }),
                    Err(e) => {
                        error!(error = %e, "encoding the ApiVersions v0 error response");
                        None
                    }
                }
            }
            IncomingRequest::Request { header, body } => {
                if let Some(response) = illegal_sasl_state(header.api_key) {
                    debug!(api_key = ?header.api_key, "SASL request outside authentication: ILLEGAL_SASL_STATE");
                    let frame = response_frame(&header, &response)?;
                    return Some(Pending::Ready { frame, _slot: slot });
                }
                let ctx = self.context(&header, principal, request_size, throttle);
                let span = debug_span!(
                    "request",
                    api_key = ?header.api_key,
                    api_version = header.api_version,
                    correlation_id = header.correlation_id,
                    client_id = %header.client_id,
                );
                trace!(parent: &span, "handling");
                let handler = self.handler.clone();
                let task =
                    tokio::spawn(async move { handler.handle(ctx, *body).await }.instrument(span));
                Some(Pending::Handler {
                    header,
                    task: AbortOnDrop(task),
                    _slot: slot,
                })
            }
        }
    }
}

async fn write_responses<W: AsyncWrite + Unpin>(
    mut write_half: W,
    mut pending_rx: mpsc::Receiver<Pending>,
    activity: Arc<Activity>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let pending = tokio::select! {
            pending = pending_rx.recv() => match pending {
                Some(pending) => pending,
                None => return,
            },
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let frame = match pending {
            Pending::Ready { frame, _slot } => frame,
            Pending::Handler {
                header,
                mut task,
                _slot,
            } => {
                let joined = tokio::select! {
                    joined = &mut task.0 => joined,
                    _ = shutdown.wait_for(|stop| *stop) => return,
                };
                let reply = match joined {
                    Ok(reply) => reply,
                    Err(e) => {
                        error!(api_key = ?header.api_key, correlation_id = header.correlation_id, error = %e, "handler failed; closing connection");
                        return;
                    }
                };
                let response = match reply {
                    Reply::Send(response) => response,
                    Reply::NoResponse => continue,
                    Reply::Close => {
                        debug!(
                            correlation_id = header.correlation_id,
                            "handler asked to close the connection"
                        );
                        return;
                    }
                };
                let Some(frame) = response_frame(&header, &response) else {
                    return;
                };
                frame
            }
        };
        // A peer that stops reading must not hold up shutdown.
        let written = tokio::select! {
            written = async {
                write_half.write_all(&frame).await?;
                // TLS buffers records until flushed; a plain socket's flush does nothing.
                write_half.flush().await
            } => written,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        if let Err(e) = written {
            debug!(error = %e, "write failed");
            return;
        }
        activity.touch();
    }
}

/// A size-prefixed raw SASL token (the framing after a v0 SaslHandshake).
fn size_prefixed(token: &[u8]) -> Vec<u8> {
    let len = u32::try_from(token.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(token.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(token);
    frame
}

/// Kafka's `KafkaApis` answer to SaslHandshake / SaslAuthenticate on a connection that is not
/// authenticating (a PLAINTEXT/SSL listener, or after authentication): `ILLEGAL_SASL_STATE`.
fn illegal_sasl_state(api_key: ApiKey) -> Option<ResponseKind> {
    match api_key {
        ApiKey::SaslHandshake => Some(ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_error_code(error_codes::ILLEGAL_SASL_STATE),
        )),
        ApiKey::SaslAuthenticate => Some(ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(error_codes::ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate request received after successful authentication",
                ))),
        )),
        _ => None,
    }
}

/// The encoded response, or `None` (logged) when the handler's answer is unusable.
fn response_frame(header: &DecodedHeader, response: &ResponseKind) -> Option<Bytes> {
    let response_key = response_api_key(response);
    if response_key != Some(header.api_key) {
        error!(
            request = ?header.api_key,
            response = ?response_key,
            "handler answered with another API's response; closing connection"
        );
        return None;
    }
    match encode_response(
        header.correlation_id,
        header.api_key,
        header.api_version,
        response,
    ) {
        Ok(frame) => Some(frame),
        Err(e) => {
            error!(
                api_key = ?header.api_key,
                api_version = header.api_version,
                error = %e,
                "response cannot be encoded at the request's version; closing connection"
            );
            None
        }
    }
}
