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
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
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
use crate::error::ServerError;
use crate::frame::FrameDecoder;
use crate::security::KafkaPrincipal;

/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

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
        connections.spawn(connection.run(stream, permit).instrument(span));
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
            let principal = Arc::new(KafkaPrincipal::anonymous());
            self.serve(read_half, write_half, principal).await;
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
        self.serve(read_half, write_half, Arc::new(principal)).await;
    }

    async fn serve<R, W>(&self, read_half: R, write_half: W, principal: Arc<KafkaPrincipal>)
    where
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
        let reader = self.read_requests(read_half, pending_tx, activity, in_flight, &principal);
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
    ) {
        let decoder = FrameDecoder::new(self.config.socket_request_max_bytes);
        let max_in_flight = self.config.max_in_flight_requests_per_connection;
        let idle = self.config.connections_max_idle;
        let mut shutdown = self.shutdown.clone();
        let mut buf = BytesMut::new();
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
                let Some(pending) = self.dispatch(frame, slot, principal) else {
                    return;
                };
                if pending_tx.send(pending).await.is_err() {
                    return; // the writer is gone
                }
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
    ) -> Option<Pending> {
        let supported = self.handler.supported_apis();
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
                let ctx = RequestContext {
                    api_key: header.api_key,
                    api_version: header.api_version,
                    correlation_id: header.correlation_id,
                    client_id: header.client_id.clone(),
                    peer_addr: self.peer_addr,
                    listener_name: self.listener_name.clone(),
                    connection_id: self.connection_id,
                    principal: principal.clone(),
                };
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
