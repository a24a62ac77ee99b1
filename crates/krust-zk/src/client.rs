//! [`ZkClient`]: the async client for a real ZooKeeper ensemble, a [`ZkBackend`] that can stand
//! in for [`crate::backend::MemZk`] anywhere (same results, same error codes, same failing index
//! of a multi-op).
//!
//! Built on the `zookeeper-client` crate (pure Rust, wire protocol 3.5+). That crate is runtime
//! agnostic: it spawns its session task through `spawns`, which finds the tokio runtime of the
//! calling thread (its `tokio` feature). [`ZkClient::connect`] must therefore run inside a tokio
//! runtime (it checks, instead of letting the crate panic with "no spawner"), and that runtime
//! needs its time driver (`enable_time`/`enable_all`) for the call deadlines. The socket and the
//! crate's own timers run on `async-io`'s reactor thread.
//!
//! # What Kafka does, and what this client does
//!
//! Kafka 3.9's `KafkaZkClient.createZkClient` (used by the migrating KRaft controller,
//! `ControllerServer`) opens one session with `zookeeper.session.timeout.ms` (18000), waits up to
//! `zookeeper.connection.timeout.ms` (default: the session timeout) for it, and creates the
//! connect string's chroot if it is missing (`createChrootIfNecessary = true`). Its
//! `ZooKeeperClient` reinitializes a new session as soon as the old one expires; the requests
//! caught in the expiry fail with `SESSIONEXPIRED`.
//!
//! This client does the same with these rules:
//! - **Waiting for a connection.** A call first waits until the session is connected, for at
//!   most the connection timeout (Kafka's `waitUntilConnected`), and fails with
//!   `CONNECTIONLOSS` without sending anything if it is not. A call in flight when the
//!   connection drops fails with `CONNECTIONLOSS` (it may or may not have been applied, as with
//!   any ZooKeeper client). Every call is also bounded as a whole by connection timeout +
//!   session timeout, so no call hangs.
//! - **Session expiry is reported once, then a new session is opened.** A state watcher on the
//!   session tells when it expired (or failed authentication). The calls in flight at that
//!   moment fail with `SESSIONEXPIRED` (`AUTHFAILED`); if there were none, the next call fails
//!   so, without being sent. Either way the caller learns that the session's ephemeral nodes
//!   are gone (for the migration: the `/controller` claim). The call after that opens a new
//!   session transparently and runs on it ([`ZkClient::session_id`] changes). `SESSIONEXPIRED`
//!   is retriable ([`ZkErrorCode::is_retriable`]), `AUTHFAILED` is not.
//! - **Closing.** Dropping the last clone of a [`ZkClient`] closes the session (ephemeral nodes
//!   go at once); the close is sent by the background task, not awaited.
//!
//! Nodes are created with the open ACL (`world:anyone` all rights, Kafka's default without
//! `zookeeper.set.acl`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::ops::{CreateMode, MultiError, Stat, ZkError, ZkErrorCode, ZkOp, ZkOpResult};
use crate::tree::is_valid_path;

/// Kafka's `zookeeper.session.timeout.ms` default (18000).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(18_000);

/// ZooKeeper's `BADARGUMENTS` (-8): a malformed path, connect string or configuration.
const BAD_ARGUMENTS: ZkErrorCode = ZkErrorCode::Other(-8);
/// ZooKeeper's `SYSTEMERROR` (-1): what the client could not classify.
const SYSTEM_ERROR: ZkErrorCode = ZkErrorCode::Other(-1);

/// How to reach and hold a session with an ensemble (Kafka's `zookeeper.*` client configs, as
/// typed values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkClientConfig {
    /// `zookeeper.connect`: `host:port[,host:port…][/chroot]`, e.g. `zk1:2181,zk2:2181/kafka`.
    /// All paths the client is given are relative to the chroot.
    pub connect: String,
    /// `zookeeper.session.timeout.ms` (default 18 s). The server may negotiate it into its
    /// `[2, 20] × tickTime` range.
    pub session_timeout: Duration,
    /// `zookeeper.connection.timeout.ms`: how long a call (and [`ZkClient::connect`]) waits for
    /// a connected session. `None` (Kafka's default) means the session timeout.
    pub connection_timeout: Option<Duration>,
    /// Create the chroot (and its parents) when it is missing, as Kafka's
    /// `createChrootIfNecessary` does for brokers and the migrating controller (default true).
    pub create_chroot: bool,
}

impl ZkClientConfig {
    /// Kafka's defaults for the ensemble at `connect`.
    #[must_use]
    pub fn new(connect: impl Into<String>) -> Self {
        Self {
            connect: connect.into(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connection_timeout: None,
            create_chroot: true,
        }
    }

    /// The same with `zookeeper.session.timeout.ms`.
    #[must_use]
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// The same with `zookeeper.connection.timeout.ms`.
    #[must_use]
    pub fn with_connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = Some(timeout);
        self
    }

    /// The connection timeout in force (the session timeout when unset).
    #[must_use]
    pub fn effective_connection_timeout(&self) -> Duration {
        self.connection_timeout.unwrap_or(self.session_timeout)
    }

    /// The hosts part and the chroot (`None` without one) of the connect string. The chroot
    /// starts at the first `/` (as Kafka cuts it).
    ///
    /// # Errors
    /// `BADARGUMENTS` (-8) for an empty host list or a chroot ZooKeeper would refuse.
    pub fn split_connect(&self) -> Result<(&str, Option<&str>), ZkError> {
        let (hosts, chroot) = match self.connect.find('/') {
            Some(i) => (&self.connect[..i], Some(&self.connect[i..])),
            None => (self.connect.as_str(), None),
        };
        if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
            return Err(ZkError::new(BAD_ARGUMENTS, self.connect.clone()));
        }
        match chroot {
            Some(chroot) if !is_valid_path(chroot) => {
                Err(ZkError::new(BAD_ARGUMENTS, self.connect.clone()))
            }
            // A chroot of `/` is no chroot.
            Some("/") | None => Ok((hosts, None)),
            Some(chroot) => Ok((hosts, Some(chroot))),
        }
    }

    fn validate(&self) -> Result<(), ZkError> {
        let fits = |d: Duration| !d.is_zero() && i32::try_from(d.as_millis()).is_ok();
        if !fits(self.session_timeout) || !fits(self.effective_connection_timeout()) {
            return Err(ZkError::new(BAD_ARGUMENTS, self.connect.clone()));
        }
        self.split_connect().map(|_| ())
    }
}

/// The state of the client's current session, as its state watcher last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkSessionState {
    /// Connected to a server.
    Connected,
    /// Connected to a read-only server (never asked for: writes fail).
    ConnectedReadOnly,
    /// Connection lost; the session lives on and the client reconnects.
    Disconnected,
    /// The session expired: its ephemeral nodes are gone. The next call reports it (once).
    Expired,
    /// The server refused the client's credentials.
    AuthFailed,
    /// The session was closed.
    Closed,
}

impl From<zk::SessionState> for ZkSessionState {
    fn from(state: zk::SessionState) -> Self {
        match state {
            zk::SessionState::SyncConnected => Self::Connected,
            zk::SessionState::ConnectedReadOnly => Self::ConnectedReadOnly,
            zk::SessionState::Disconnected => Self::Disconnected,
            zk::SessionState::Expired => Self::Expired,
            zk::SessionState::AuthFailed => Self::AuthFailed,
            zk::SessionState::Closed => Self::Closed,
        }
    }
}

/// The code of a session that can serve no more calls.
fn terminal_code(state: zk::SessionState) -> Option<ZkErrorCode> {
    match state {
        zk::SessionState::Expired => Some(ZkErrorCode::SessionExpired),
        zk::SessionState::AuthFailed => Some(ZkErrorCode::AuthFailed),
        zk::SessionState::Closed => Some(ZkErrorCode::Closed),
        zk::SessionState::SyncConnected
        | zk::SessionState::ConnectedReadOnly
        | zk::SessionState::Disconnected => None,
    }
}

/// Maps the crate's error onto ZooKeeper's code (`KeeperException.Code`).
fn code_of(error: &zk::Error) -> ZkErrorCode {
    match error {
        zk::Error::NoNode => ZkErrorCode::NoNode,
        zk::Error::NodeExists => ZkErrorCode::NodeExists,
        zk::Error::BadVersion => ZkErrorCode::BadVersion,
        zk::Error::NotEmpty => ZkErrorCode::NotEmpty,
        zk::Error::NoChildrenForEphemerals => ZkErrorCode::NoChildrenForEphemerals,
        // No server reachable is a connection problem: retry later.
        zk::Error::ConnectionLoss | zk::Error::NoHosts => ZkErrorCode::ConnectionLoss,
        zk::Error::SessionExpired => ZkErrorCode::SessionExpired,
        zk::Error::AuthFailed => ZkErrorCode::AuthFailed,
        zk::Error::NoAuth => ZkErrorCode::NoAuth,
        // The crate's own timeout: no session established in time.
        zk::Error::Timeout => ZkErrorCode::OperationTimeout,
        zk::Error::RuntimeInconsistent => ZkErrorCode::RuntimeInconsistency,
        zk::Error::ClientClosed => ZkErrorCode::Closed,
        zk::Error::BadArguments(_) => BAD_ARGUMENTS,
        zk::Error::MarshallingError | zk::Error::UnmarshalError { .. } => ZkErrorCode::Other(-5),
        zk::Error::Unimplemented => ZkErrorCode::Other(-6),
        zk::Error::InvalidAcl => ZkErrorCode::Other(-114),
        zk::Error::SessionMoved => ZkErrorCode::Other(-118),
        zk::Error::NotReadOnly => ZkErrorCode::Other(-119),
        zk::Error::NoWatcher => ZkErrorCode::Other(-121),
        zk::Error::ReconfigDisabled => ZkErrorCode::Other(-123),
        zk::Error::QuotaExceeded => ZkErrorCode::Other(-125),
        zk::Error::Throttled => ZkErrorCode::Other(-127),
        zk::Error::UnexpectedErrorCode(code) => ZkErrorCode::from_code(*code),
        _ => SYSTEM_ERROR,
    }
}

fn create_mode(mode: CreateMode) -> zk::CreateMode {
    match mode {
        CreateMode::Persistent => zk::CreateMode::Persistent,
        CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
        CreateMode::PersistentSequential => zk::CreateMode::PersistentSequential,
        CreateMode::EphemeralSequential => zk::CreateMode::EphemeralSequential,
    }
}

fn stat_of(stat: &zk::Stat) -> Stat {
    Stat {
        czxid: stat.czxid,
        mzxid: stat.mzxid,
        ctime: stat.ctime,
        mtime: stat.mtime,
        version: stat.version,
        cversion: stat.cversion,
        ephemeral_owner: stat.ephemeral_owner,
        data_length: stat.data_length,
        num_children: stat.num_children,
    }
}

/// One ZooKeeper session (the crate's client, rooted at the chroot) and what its state watcher
/// says.
#[derive(Debug)]
struct Session {
    client: zk::Client,
    /// Set once the session's death (expiry, auth failure, close) was reported to a caller; the
    /// next call then opens a new session.
    death_reported: AtomicBool,
}

impl Session {
    /// Marks the death reported; true if this caller is the first to report it.
    fn report_death(&self) -> bool {
        !self.death_reported.swap(true, Ordering::SeqCst)
    }
}

#[derive(Debug)]
struct Shared {
    config: ZkClientConfig,
    current: Mutex<Arc<Session>>,
    /// Held while a new session is being opened, so concurrent calls open one, not many.
    reopening: tokio::sync::Mutex<()>,
}

/// An async client of a real ZooKeeper ensemble. Cheap to clone: clones share the session.
///
/// See the module doc for how calls wait, time out and survive session expiry.
#[derive(Debug, Clone)]
pub struct ZkClient {
    shared: Arc<Shared>,
}

impl ZkClient {
    /// Opens a session with the ensemble of `config` and waits until it is connected, for at
    /// most the connection timeout. Creates the chroot if `config.create_chroot` and it is
    /// missing.
    ///
    /// # Errors
    /// `BADARGUMENTS` (-8) for a bad connect string or timeout, or when not called inside a
    /// tokio runtime; `CONNECTIONLOSS` if no session is established within the connection
    /// timeout; `AUTHFAILED`; the error of creating the chroot.
    pub async fn connect(config: ZkClientConfig) -> Result<Self, ZkError> {
        config.validate()?;
        let session = open_session(&config).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                current: Mutex::new(Arc::new(session)),
                reopening: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The configuration the client was opened with.
    #[must_use]
    pub fn config(&self) -> &ZkClientConfig {
        &self.shared.config
    }

    fn current(&self) -> Arc<Session> {
        Arc::clone(
            &self
                .shared
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The current session's id (the `ephemeralOwner` of the nodes it creates). Changes when a
    /// new session replaces an expired one.
    #[must_use]
    pub fn session_id(&self) -> i64 {
        self.current().client.session_id().0
    }

    /// The current session's timeout as negotiated with the server.
    #[must_use]
    pub fn negotiated_session_timeout(&self) -> Duration {
        self.current().client.session_timeout()
    }

    /// The current session's state as its state watcher last saw it.
    #[must_use]
    pub fn session_state(&self) -> ZkSessionState {
        self.current().client.state().into()
    }

    /// Waits (at most `timeout`) until the current session's state watcher reports a state
    /// `wanted` accepts, and returns that state.
    ///
    /// # Errors
    /// `OPERATIONTIMEOUT` (-7) if it does not come in time.
    pub async fn wait_for_session_state(
        &self,
        timeout: Duration,
        wanted: impl Fn(ZkSessionState) -> bool,
    ) -> Result<ZkSessionState, ZkError> {
        let session = self.current();
        let mut watcher = session.client.state_watcher();
        let deadline = Instant::now() + timeout;
        let mut state = ZkSessionState::from(session.client.state());
        loop {
            if wanted(state) {
                return Ok(state);
            }
            match tokio::time::timeout_at(deadline, watcher.changed()).await {
                Ok(next) => state = next.into(),
                Err(_) => return Err(ZkError::new(ZkErrorCode::OperationTimeout, "")),
            }
        }
    }

    /// A connected session to run one call on, and the deadline of that call.
    async fn session_for(&self, path: &str) -> Result<(Arc<Session>, Instant), ZkError> {
        let config = &self.shared.config;
        let connection_timeout = config.effective_connection_timeout();
        let started = Instant::now();
        let wait_deadline = started + connection_timeout;
        let call_deadline = wait_deadline + config.session_timeout;
        let mut session = self.current();
        if let Some(code) = terminal_code(session.client.state()) {
            if session.report_death() {
                tracing::warn!(session = session.client.session_id().0, %code, "ZooKeeper session ended");
                return Err(ZkError::new(code, path));
            }
            session = self.reopen(&session, wait_deadline, path).await?;
        }
        let mut watcher = session.client.state_watcher();
        let mut state = session.client.state();
        loop {
            match state {
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    return Ok((session, call_deadline));
                }
                zk::SessionState::Disconnected => {}
                terminal => {
                    // It died while we waited: report it now (or, if another call already
                    // did, fail this one as a lost connection; its retry opens a new session).
                    let code = terminal_code(terminal).unwrap_or(ZkErrorCode::Closed);
                    let code = if session.report_death() {
                        code
                    } else {
                        ZkErrorCode::ConnectionLoss
                    };
                    return Err(ZkError::new(code, path));
                }
            }
            match tokio::time::timeout_at(wait_deadline, watcher.changed()).await {
                Ok(next) => state = next,
                Err(_) => return Err(ZkError::new(ZkErrorCode::ConnectionLoss, path)),
            }
        }
    }

    /// Replaces the dead `old` session with a new one (unless another call already did).
    async fn reopen(
        &self,
        old: &Arc<Session>,
        deadline: Instant,
        path: &str,
    ) -> Result<Arc<Session>, ZkError> {
        let _reopening = tokio::time::timeout_at(deadline, self.shared.reopening.lock())
            .await
            .map_err(|_| ZkError::new(ZkErrorCode::ConnectionLoss, path))?;
        let current = self.current();
        if !Arc::ptr_eq(&current, old) {
            return Ok(current);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let config = ZkClientConfig {
            connection_timeout: Some(remaining.max(Duration::from_millis(1))),
            ..self.shared.config.clone()
        };
        let session = Arc::new(open_session(&config).await.map_err(|e| ZkError {
            path: path.to_owned(),
            ..e
        })?);
        tracing::info!(
            old_session = old.client.session_id().0,
            session = session.client.session_id().0,
            "new ZooKeeper session replaces the ended one"
        );
        *self
            .shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::clone(&session);
        Ok(session)
    }

    /// Runs `call` on a connected session within the call's deadline, mapping errors to codes.
    async fn run<T, F, Fut>(&self, path: &str, call: F) -> Result<T, ZkError>
    where
        F: FnOnce(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, ZkError>>,
    {
        let (session, deadline) = self.session_for(path).await?;
        let outcome = tokio::time::timeout_at(deadline, call(Arc::clone(&session))).await;
        match outcome {
            Err(_) => Err(ZkError::new(ZkErrorCode::ConnectionLoss, path)),
            Ok(Err(e)) => {
                note_death(&session, e.code);
                Err(e)
            }
            Ok(Ok(value)) => Ok(value),
        }
    }
}

/// A call that failed with the session's death reported it.
fn note_death(session: &Session, code: ZkErrorCode) {
    if matches!(
        code,
        ZkErrorCode::SessionExpired | ZkErrorCode::AuthFailed | ZkErrorCode::Closed
    ) {
        session.report_death();
    }
}

/// Connects to the hosts of `config`, creates the chroot if asked, and roots the client there.
async fn open_session(config: &ZkClientConfig) -> Result<Session, ZkError> {
    let (hosts, chroot) = config.split_connect()?;
    if tokio::runtime::Handle::try_current().is_err() {
        // The crate would panic ("no spawner") spawning its session task.
        tracing::error!("ZkClient::connect called outside a tokio runtime");
        return Err(ZkError::new(BAD_ARGUMENTS, hosts));
    }
    let connect = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .connect(hosts);
    let client = tokio::time::timeout(config.effective_connection_timeout(), connect)
        .await
        .map_err(|_| ZkError::new(ZkErrorCode::ConnectionLoss, hosts))?
        .map_err(|e| ZkError::new(code_of(&e), hosts))?;
    tracing::info!(
        session = client.session_id().0,
        timeout_ms = u64::try_from(client.session_timeout().as_millis()).unwrap_or(u64::MAX),
        hosts,
        "ZooKeeper session established"
    );
    let client = match chroot {
        None => client,
        Some(chroot) => {
            if config.create_chroot {
                create_parents_and(&client, chroot).await?;
            }
            client
                .chroot(chroot)
                .map_err(|_| ZkError::new(BAD_ARGUMENTS, chroot))?
        }
    };
    Ok(Session {
        client,
        death_reported: AtomicBool::new(false),
    })
}

/// `mkdir -p path` with persistent, open-ACL nodes (Kafka's `makeSurePersistentPathExists`).
async fn create_parents_and(client: &zk::Client, path: &str) -> Result<(), ZkError> {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .find('/')
            .map_or(path.len(), |i| end + 1 + i);
        let prefix = &path[..end];
        match client.create(prefix, &[], &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(ZkError::new(code_of(&e), prefix)),
        }
    }
    Ok(())
}

/// One operation alone. ZooKeeper has no stand-alone check: a check is a multi-op of one.
async fn apply_one(session: &Session, op: &ZkOp) -> Result<ZkOpResult, ZkError> {
    let client = &session.client;
    let err = |e: zk::Error| ZkError::new(code_of(&e), op.path());
    match op {
        ZkOp::Create { path, data, mode } => {
            let options = create_mode(*mode).with_acls(zk::Acls::anyone_all());
            let (_, sequence) = client.create(path, data, &options).await.map_err(err)?;
            let created = if mode.is_sequential() {
                format!("{path}{sequence}")
            } else {
                path.clone()
            };
            Ok(ZkOpResult::Created { path: created })
        }
        ZkOp::SetData {
            path,
            data,
            version,
        } => {
            let stat = client
                .set_data(path, data, Some(*version))
                .await
                .map_err(err)?;
            Ok(ZkOpResult::SetData {
                stat: stat_of(&stat),
            })
        }
        ZkOp::Delete { path, version } => {
            client.delete(path, Some(*version)).await.map_err(err)?;
            Ok(ZkOpResult::Deleted)
        }
        ZkOp::Check { .. } => {
            let mut results = multi_ops(session, std::slice::from_ref(op))
                .await
                .map_err(|e| e.error)?;
            results
                .pop()
                .ok_or_else(|| ZkError::new(SYSTEM_ERROR, op.path()))
        }
    }
}

/// A multi-op: all or nothing; a failure names the first failing operation.
async fn multi_ops(session: &Session, ops: &[ZkOp]) -> Result<Vec<ZkOpResult>, MultiError> {
    let mut writer = session.client.new_multi_writer();
    for (index, op) in ops.iter().enumerate() {
        let added = match op {
            ZkOp::Create { path, data, mode } => {
                let options = create_mode(*mode).with_acls(zk::Acls::anyone_all());
                writer.add_create(path, data, &options)
            }
            ZkOp::SetData {
                path,
                data,
                version,
            } => writer.add_set_data(path, data, Some(*version)),
            ZkOp::Delete { path, version } => writer.add_delete(path, Some(*version)),
            ZkOp::Check { path, version } => writer.add_check_version(path, *version),
        };
        // Refused before sending (a malformed path): the server would fail it at this index.
        added.map_err(|e| MultiError {
            index,
            error: ZkError::new(code_of(&e), op.path()),
        })?;
    }
    let first_path = ops.first().map_or("", ZkOp::path);
    let results = match writer.commit().await {
        Ok(results) => results,
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            let path = ops.get(index).map_or(first_path, ZkOp::path);
            return Err(MultiError {
                index,
                error: ZkError::new(code_of(&source), path),
            });
        }
        Err(zk::MultiWriteError::RequestFailed { source }) => {
            return Err(MultiError {
                index: 0,
                error: ZkError::new(code_of(&source), first_path),
            });
        }
    };
    if results.len() != ops.len() {
        return Err(MultiError {
            index: 0,
            error: ZkError::new(SYSTEM_ERROR, first_path),
        });
    }
    results
        .into_iter()
        .zip(ops)
        .enumerate()
        .map(|(index, (result, op))| match result {
            zk::MultiWriteResult::Check => Ok(ZkOpResult::Checked),
            zk::MultiWriteResult::Delete => Ok(ZkOpResult::Deleted),
            zk::MultiWriteResult::Create { path, .. } => Ok(ZkOpResult::Created { path }),
            zk::MultiWriteResult::SetData { stat } => Ok(ZkOpResult::SetData {
                stat: stat_of(&stat),
            }),
            _ => Err(MultiError {
                index,
                error: ZkError::new(SYSTEM_ERROR, op.path()),
            }),
        })
        .collect()
}

impl ZkBackend for ZkClient {
    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        self.run(path, |session| async move {
            let (data, stat) = session
                .client
                .get_data(path)
                .await
                .map_err(|e| ZkError::new(code_of(&e), path))?;
            Ok((data, stat_of(&stat)))
        })
        .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        self.run(path, |session| async move {
            let stat = session
                .client
                .check_stat(path)
                .await
                .map_err(|e| ZkError::new(code_of(&e), path))?;
            Ok(stat.as_ref().map(stat_of))
        })
        .await
    }

    async fn get_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        self.run(path, |session| async move {
            session
                .client
                .list_children(path)
                .await
                .map_err(|e| ZkError::new(code_of(&e), path))
        })
        .await
    }

    async fn apply(&self, op: &ZkOp) -> Result<ZkOpResult, ZkError> {
        self.run(
            op.path(),
            |session| async move { apply_one(&session, op).await },
        )
        .await
    }

    async fn multi(&self, ops: &[ZkOp]) -> Result<Vec<ZkOpResult>, MultiError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let first = ops.first().map_or("", ZkOp::path);
        let mut failed_at = 0;
        let outcome = self
            .run(first, |session| {
                let failed_at = &mut failed_at;
                async move {
                    multi_ops(&session, ops).await.map_err(|e| {
                        *failed_at = e.index;
                        e.error
                    })
                }
            })
            .await;
        outcome.map_err(|error| MultiError {
            index: failed_at,
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_string_splits_at_the_first_slash() {
        let config = ZkClientConfig::new("a:1,b:2/kafka/x");
        assert_eq!(
            config.split_connect().expect("valid"),
            ("a:1,b:2", Some("/kafka/x"))
        );
        let config = ZkClientConfig::new("a:1/");
        assert_eq!(config.split_connect().expect("valid"), ("a:1", None));
        for bad in ["", "/kafka", "a:1,,b:2", "a:1/kafka/", "a:1/ka//fka"] {
            let e = ZkClientConfig::new(bad)
                .split_connect()
                .expect_err("refused");
            assert_eq!(e.code, BAD_ARGUMENTS, "{bad:?}");
        }
    }

    #[test]
    fn connection_timeout_defaults_to_the_session_timeout() {
        let config = ZkClientConfig::new("a:1").with_session_timeout(Duration::from_secs(6));
        assert_eq!(
            config.effective_connection_timeout(),
            Duration::from_secs(6)
        );
        let config = config.with_connection_timeout(Duration::from_secs(2));
        assert_eq!(
            config.effective_connection_timeout(),
            Duration::from_secs(2)
        );
        let zero = ZkClientConfig::new("a:1").with_session_timeout(Duration::ZERO);
        assert!(zero.validate().is_err());
    }

    #[test]
    fn crate_errors_map_to_zookeeper_codes() {
        assert_eq!(code_of(&zk::Error::NoNode).code(), -101);
        assert_eq!(code_of(&zk::Error::NodeExists).code(), -110);
        assert_eq!(code_of(&zk::Error::BadVersion).code(), -103);
        assert_eq!(code_of(&zk::Error::NotEmpty).code(), -111);
        assert_eq!(code_of(&zk::Error::NoChildrenForEphemerals).code(), -108);
        assert_eq!(code_of(&zk::Error::ConnectionLoss).code(), -4);
        assert_eq!(code_of(&zk::Error::SessionExpired).code(), -112);
        assert_eq!(code_of(&zk::Error::AuthFailed).code(), -115);
        assert_eq!(code_of(&zk::Error::NoAuth).code(), -102);
        assert_eq!(code_of(&zk::Error::BadArguments(&"x")).code(), -8);
        assert_eq!(code_of(&zk::Error::UnexpectedErrorCode(-13)).code(), -13);
        assert!(code_of(&zk::Error::NoHosts).is_retriable());
        assert!(code_of(&zk::Error::Timeout).is_retriable());
    }

    #[test]
    fn connect_outside_a_tokio_runtime_is_an_error_not_a_panic() {
        let config = ZkClientConfig::new("127.0.0.1:1");
        let outcome = futures_lite_block_on(ZkClient::connect(config));
        let e = outcome.expect_err("no runtime");
        assert_eq!(e.code, BAD_ARGUMENTS);
    }

    /// A minimal executor (no tokio runtime around it).
    fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
        use std::pin::pin;
        use std::task::{Context, Poll, Wake, Waker};
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park();
        }
    }
}
