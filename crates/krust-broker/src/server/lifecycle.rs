//! Broker lifecycle with the controller (Kafka's `BrokerLifecycleManager`):
//! BrokerRegistration (incarnation id, listeners, features, rack, log dirs), heartbeats every
//! `broker.heartbeat.interval.ms` carrying the current metadata offset, the
//! fenced/unfenced/shutting-down state the controller answers with, and controlled shutdown.
//!
//! CONTRACT (used by the `krust` binary): [`BrokerLifecycle::start`] registers and then
//! heartbeats in the background; [`BrokerLifecycle::set_metadata_offset`] is fed by the
//! metadata loader; [`BrokerLifecycle::state`] tells whether the broker is fenced;
//! [`BrokerLifecycle::controlled_shutdown`] resolves once the controller says
//! `shouldShutDown` (or the timeout passes).
//!
//! States (Kafka's `BrokerState`): [`BrokerState::Starting`] until the controller accepts the
//! registration, [`BrokerState::Recovery`] while the controller keeps the broker fenced (it
//! unfences once the broker's `CurrentMetadataOffset` reaches its registration record, facts
//! §2.2), [`BrokerState::Running`] once a heartbeat answers `IsFenced=false`,
//! [`BrokerState::PendingControlledShutdown`] after [`BrokerLifecycle::controlled_shutdown`]
//! asked (`WantShutDown`), and [`BrokerState::ShuttingDown`] once the controller answered
//! `ShouldShutDown` (no more heartbeats are sent).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{
    BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::Endpoint;
use super::controller_channel::ControllerChannel;

/// `broker.heartbeat.interval.ms` default (Kafka 3.9 `KRaftConfigs`).
pub const BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 2000;
/// `broker.session.timeout.ms` default: the registration retry backoff is capped at half of it,
/// as Kafka's `resendExponentialBackoff`.
pub const BROKER_SESSION_TIMEOUT_MS_DEFAULT: u64 = 9000;
/// First retry delay after a failed registration or heartbeat (Kafka: 100 ms, doubling).
const RETRY_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// `NOT_CONTROLLER` is retried at once (the channel looks for the new leader).
use krust_net::error_codes::NOT_CONTROLLER;

/// Where the broker is in its life (Kafka's `BrokerState`, without `NOT_RUNNING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerState {
    /// Not yet registered with the controller.
    Starting,
    /// Registered, fenced: catching up with the metadata log.
    Recovery,
    /// Unfenced: may lead partitions and serve clients.
    Running,
    /// Asked the controller for a controlled shutdown; leaderships are being moved away.
    PendingControlledShutdown,
    /// The controller agreed to the shutdown (or the broker stops without it).
    ShuttingDown,
}

impl BrokerState {
    /// Kafka's numeric `BrokerState` value (the `kafka.server:type=KafkaServer,name=BrokerState`
    /// gauge): STARTING 1, RECOVERY 2, RUNNING 3, PENDING_CONTROLLED_SHUTDOWN 6, SHUTTING_DOWN 7.
    #[must_use]
    pub fn value(self) -> i8 {
        match self {
            BrokerState::Starting => 1,
            BrokerState::Recovery => 2,
            BrokerState::Running => 3,
            BrokerState::PendingControlledShutdown => 6,
            BrokerState::ShuttingDown => 7,
        }
    }
}

/// What the broker tells the controller about itself.
#[derive(Debug, Clone)]
pub struct LifecycleConfig {
    /// `node.id`.
    pub node_id: i32,
    /// From `meta.properties`.
    pub cluster_id: String,
    /// Random per process start: lets the controller tell a restarted broker from a
    /// duplicate one.
    pub incarnation_id: uuid::Uuid,
    /// Advertised listeners.
    pub listeners: Vec<Endpoint>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// `directory.id` of each log dir's `meta.properties` (required from MV 3.7-IV2).
    pub log_dir_ids: Vec<uuid::Uuid>,
    /// The broker epoch of the last clean shutdown, `-1` if unknown (Kafka keeps it in
    /// memory only across a controlled shutdown; a fresh process sends `-1`).
    pub previous_broker_epoch: i64,
    /// `broker.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// Timeout of one registration or heartbeat through the channel.
    pub request_timeout: Duration,
}

impl LifecycleConfig {
    /// The BrokerRegistration request this broker sends.
    #[must_use]
    pub fn registration_request(&self) -> BrokerRegistrationRequest {
        let feature = |name: &str, min: i16, max: i16| {
            Feature::default()
                .with_name(StrBytes::from_string(name.to_owned()))
                .with_min_supported_version(min)
                .with_max_supported_version(max)
        };
        // Same supported ranges as our controllers advertise (Kafka's
        // `BrokerFeatures.defaultSupportedFeatures` without unstable versions).
        let features = krust_metadata::features::supported_feature_ranges()
            .into_iter()
            .map(|(name, min, max)| feature(name, min, max))
            .collect();
        let listeners = self
            .listeners
            .iter()
            .map(|e| {
                Listener::default()
                    .with_name(StrBytes::from_string(e.name.clone()))
                    .with_host(StrBytes::from_string(e.host.clone()))
                    .with_port(e.port)
                    .with_security_protocol(e.security_protocol)
            })
            .collect();
        BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_cluster_id(StrBytes::from_string(self.cluster_id.clone()))
            .with_incarnation_id(self.incarnation_id)
            .with_listeners(listeners)
            .with_features(features)
            .with_rack(self.rack.clone().map(StrBytes::from_string))
            .with_is_migrating_zk_broker(false)
            .with_log_dirs(self.log_dir_ids.clone())
            .with_previous_broker_epoch(self.previous_broker_epoch)
    }
}

/// State shared between the handle and the background task.
struct Shared {
    config: LifecycleConfig,
    channel: Arc<dyn ControllerChannel>,
    /// Highest metadata offset the broker has applied (`CurrentMetadataOffset`).
    metadata_offset: AtomicI64,
    /// The broker epoch the controller assigned, `-1` before registration.
    broker_epoch: AtomicI64,
    /// Whether the last heartbeat answer said the broker is fenced.
    fenced: AtomicBool,
    /// Set by [`BrokerLifecycle::controlled_shutdown`].
    want_shut_down: AtomicBool,
    /// Wakes the task before its next scheduled heartbeat.
    wake: Notify,
    state: watch::Sender<BrokerState>,
}

/// Registration and heartbeats of one broker incarnation (see the module doc).
pub struct BrokerLifecycle {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for BrokerLifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerLifecycle")
            .field("node_id", &self.shared.config.node_id)
            .field("state", &self.state())
            .field("broker_epoch", &self.broker_epoch())
            .finish_non_exhaustive()
    }
}

impl BrokerLifecycle {
    /// Starts registering (and then heartbeating) in the background on the current tokio
    /// runtime.
    #[must_use]
    pub fn start(config: LifecycleConfig, channel: Arc<dyn ControllerChannel>) -> Arc<Self> {
        let (state, _) = watch::channel(BrokerState::Starting);
        let shared = Arc::new(Shared {
            config,
            channel,
            metadata_offset: AtomicI64::new(-1),
            broker_epoch: AtomicI64::new(-1),
            fenced: AtomicBool::new(true),
            want_shut_down: AtomicBool::new(false),
            wake: Notify::new(),
            state,
        });
        let task = tokio::spawn(run(shared.clone()));
        Arc::new(BrokerLifecycle {
            shared,
            task: Mutex::new(Some(task)),
        })
    }

    /// The highest metadata log offset the broker has applied (from the metadata loader).
    ///
    /// A fenced broker whose applied offset just reached its own registration record (the
    /// broker epoch is that record's offset) heartbeats at once instead of at the next
    /// interval: that heartbeat is the one the controller unfences it on.
    pub fn set_metadata_offset(&self, offset: i64) {
        let previous = self
            .shared
            .metadata_offset
            .fetch_max(offset, Ordering::AcqRel);
        let epoch = self.shared.broker_epoch.load(Ordering::Acquire);
        if epoch >= 0
            && previous < epoch
            && offset >= epoch
            && self.state() == BrokerState::Recovery
        {
            self.shared.wake.notify_one();
        }
    }

    /// The offset last passed to [`Self::set_metadata_offset`] (`-1` before any).
    #[must_use]
    pub fn metadata_offset(&self) -> i64 {
        self.shared.metadata_offset.load(Ordering::Acquire)
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> BrokerState {
        *self.shared.state.borrow()
    }

    /// Watches state changes (e.g. to announce readiness once [`BrokerState::Running`]).
    #[must_use]
    pub fn watch_state(&self) -> watch::Receiver<BrokerState> {
        self.shared.state.subscribe()
    }

    /// Whether the controller last said this broker is fenced (true before registration).
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        self.shared.fenced.load(Ordering::Acquire)
    }

    /// The broker epoch the controller assigned at registration.
    #[must_use]
    pub fn broker_epoch(&self) -> Option<i64> {
        let epoch = self.shared.broker_epoch.load(Ordering::Acquire);
        (epoch >= 0).then_some(epoch)
    }

    /// Waits until the broker is unfenced ([`BrokerState::Running`]) or `timeout` passes;
    /// returns whether it is running.
    pub async fn wait_until_running(&self, timeout: Duration) -> bool {
        let mut states = self.watch_state();
        tokio::time::timeout(timeout, states.wait_for(|s| *s == BrokerState::Running))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Asks the controller for a controlled shutdown (`WantShutDown`) and waits until it
    /// answers `ShouldShutDown` (it has moved this broker's leaderships away) or `timeout`
    /// passes. Returns whether the controller agreed; either way the state is then
    /// [`BrokerState::ShuttingDown`] and no further heartbeats are sent. A broker that never
    /// registered shuts down at once (Kafka does the same from `STARTING`).
    pub async fn controlled_shutdown(&self, timeout: Duration) -> bool {
        let registered = self.broker_epoch().is_some();
        if !registered {
            self.stop();
            return false;
        }
        self.shared.want_shut_down.store(true, Ordering::Release);
        self.shared.state.send_modify(|s| {
            if *s != BrokerState::ShuttingDown {
                *s = BrokerState::PendingControlledShutdown;
            }
        });
        info!(
            node_id = self.shared.config.node_id,
            "requesting controlled shutdown"
        );
        self.shared.wake.notify_one();
        let mut states = self.watch_state();
        let agreed = tokio::time::timeout(
            timeout,
            states.wait_for(|s| *s == BrokerState::ShuttingDown),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        if !agreed {
            warn!(
                node_id = self.shared.config.node_id,
                timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                "the controller did not confirm the controlled shutdown in time; shutting down"
            );
        }
        self.stop();
        agreed
    }

    /// Stops heartbeating at once (state [`BrokerState::ShuttingDown`]); the controller fences
    /// the broker after `broker.session.timeout.ms`.
    pub fn stop(&self) {
        self.shared.state.send_replace(BrokerState::ShuttingDown);
        if let Ok(mut task) = self.task.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
    }
}

impl Drop for BrokerLifecycle {
    fn drop(&mut self) {
        if let Ok(mut task) = self.task.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
    }
}

/// What one round with the controller decided.
enum Next {
    /// Send the next request after this delay (or earlier when woken).
    After(Duration),
    /// The controller agreed to shut down: stop.
    Done,
}

async fn run(shared: Arc<Shared>) {
    let mut failures: u32 = 0;
    loop {
        let next = if shared.broker_epoch.load(Ordering::Acquire) < 0 {
            register(&shared, &mut failures).await
        } else {
            heartbeat(&shared, &mut failures).await
        };
        match next {
            Next::Done => return,
            Next::After(delay) if delay.is_zero() => {}
            Next::After(delay) => {
                // A controlled-shutdown request wakes the task early, so the controller hears
                // `WantShutDown` at once rather than at the next interval.
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shared.wake.notified() => {}
                }
            }
        }
    }
}

/// Kafka's exponential backoff: 100 ms doubling, capped at half the session timeout.
fn retry_backoff(failures: u32) -> Duration {
    let cap = Duration::from_millis(BROKER_SESSION_TIMEOUT_MS_DEFAULT / 2);
    RETRY_BACKOFF_INITIAL
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(cap)
}

async fn register(shared: &Shared, failures: &mut u32) -> Next {
    let config = &shared.config;
    let request = config.registration_request();
    let result = shared
        .channel
        .send(
            RequestKind::BrokerRegistration(request),
            None,
            config.request_timeout,
        )
        .await;
    match result {
        Ok(ResponseKind::BrokerRegistration(r)) if r.error_code == 0 => {
            *failures = 0;
            shared.broker_epoch.store(r.broker_epoch, Ordering::Release);
            shared.state.send_modify(|s| {
                if *s == BrokerState::Starting {
                    *s = BrokerState::Recovery;
                }
            });
            info!(
                node_id = config.node_id,
                broker_epoch = r.broker_epoch,
                incarnation_id = %config.incarnation_id,
                "successfully registered broker"
            );
            // Heartbeat at once: the first one may already unfence the broker.
            Next::After(Duration::ZERO)
        }
        Ok(ResponseKind::BrokerRegistration(r)) => {
            *failures = failures.saturating_add(1);
            // DUPLICATE_BROKER_REGISTRATION while the previous incarnation's session lasts,
            // NOT_CONTROLLER during an election, …: all retried.
            warn!(
                node_id = config.node_id,
                error_code = r.error_code,
                "broker registration refused; retrying"
            );
            Next::After(retry_backoff(*failures))
        }
        Ok(_) => {
            *failures = failures.saturating_add(1);
            warn!(
                node_id = config.node_id,
                "unexpected answer to BrokerRegistration"
            );
            Next::After(retry_backoff(*failures))
        }
        Err(e) => {
            *failures = failures.saturating_add(1);
            debug!(node_id = config.node_id, error = %e, "broker registration failed; retrying");
            Next::After(retry_backoff(*failures))
        }
    }
}

async fn heartbeat(shared: &Shared, failures: &mut u32) -> Next {
    let config = &shared.config;
    let want_shut_down = shared.want_shut_down.load(Ordering::Acquire);
    let request = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(config.node_id))
        .with_broker_epoch(shared.broker_epoch.load(Ordering::Acquire))
        .with_current_metadata_offset(shared.metadata_offset.load(Ordering::Acquire))
        // Registered brokers always want to be unfenced; the controller decides when (once the
        // metadata offset reaches the registration record).
        .with_want_fence(false)
        .with_want_shut_down(want_shut_down);
    let result = shared
        .channel
        .send(
            RequestKind::BrokerHeartbeat(request),
            None,
            config.request_timeout,
        )
        .await;
    let response = match result {
        Ok(ResponseKind::BrokerHeartbeat(r)) => r,
        Ok(_) => {
            *failures = failures.saturating_add(1);
            warn!(
                node_id = config.node_id,
                "unexpected answer to BrokerHeartbeat"
            );
            return Next::After(retry_backoff(*failures));
        }
        Err(e) => {
            *failures = failures.saturating_add(1);
            debug!(node_id = config.node_id, error = %e, "broker heartbeat failed; retrying");
            return Next::After(retry_backoff(*failures));
        }
    };
    if response.error_code == NOT_CONTROLLER {
        *failures = failures.saturating_add(1);
        return Next::After(RETRY_BACKOFF_INITIAL);
    }
    if response.error_code != 0 {
        *failures = failures.saturating_add(1);
        warn!(
            node_id = config.node_id,
            error_code = response.error_code,
            "broker heartbeat refused; retrying"
        );
        return Next::After(retry_backoff(*failures));
    }
    *failures = 0;
    shared.fenced.store(response.is_fenced, Ordering::Release);
    if want_shut_down && response.should_shut_down {
        info!(
            node_id = config.node_id,
            "the controller agreed to the controlled shutdown"
        );
        shared.state.send_replace(BrokerState::ShuttingDown);
        return Next::Done;
    }
    let mut changed = None;
    shared.state.send_if_modified(|s| {
        let next = match (*s, response.is_fenced) {
            (BrokerState::Recovery, false) => BrokerState::Running,
            // Fenced again (a missed session): back to catching up.
            (BrokerState::Running, true) => BrokerState::Recovery,
            (other, _) => other,
        };
        let moved = next != *s;
        if moved {
            changed = Some(next);
            *s = next;
        }
        moved
    });
    match changed {
        Some(BrokerState::Running) => info!(
            node_id = config.node_id,
            metadata_offset = shared.metadata_offset.load(Ordering::Acquire),
            "the broker has been unfenced"
        ),
        Some(BrokerState::Recovery) => warn!(node_id = config.node_id, "the broker was fenced"),
        _ => {}
    }
    Next::After(config.heartbeat_interval)
}

#[cfg(test)]
mod tests {
    //! The lifecycle against a fake controller: a [`ControllerChannel`] that runs Kafka's
    //! broker state rules (facts §2.2) on a shared script. Intervals are a few milliseconds;
    //! every wait is bounded and nothing asserts on elapsed time.
    use super::*;
    use crate::server::controller_channel::{BoxFuture, ControllerChannelError};
    use kafka_protocol::messages::{BrokerHeartbeatResponse, BrokerRegistrationResponse};
    use krust_metadata::MetadataVersion;

    const WAIT: Duration = Duration::from_secs(10);

    #[derive(Default)]
    struct FakeState {
        registrations: Vec<BrokerRegistrationRequest>,
        heartbeats: Vec<BrokerHeartbeatRequest>,
        /// Refuse this many registrations first (DUPLICATE_BROKER_REGISTRATION).
        refuse_registrations: usize,
        /// Fail this many requests first with a channel timeout.
        fail_requests: usize,
        /// The broker is unfenced once its metadata offset reaches this.
        unfence_at: i64,
        /// Refuse to confirm shutdown (leaderships never move).
        never_shut_down: bool,
    }

    struct FakeController(Mutex<FakeState>);

    impl FakeController {
        fn new(state: FakeState) -> Arc<Self> {
            Arc::new(FakeController(Mutex::new(state)))
        }
        fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
            let mut guard = self.0.lock().expect("fake controller lock");
            f(&mut guard)
        }
    }

    impl ControllerChannel for FakeController {
        fn send(
            &self,
            request: RequestKind,
            _api_version: Option<i16>,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
            let answer = self.with(|s| {
                if s.fail_requests > 0 {
                    s.fail_requests -= 1;
                    return Err(ControllerChannelError::Timeout(timeout));
                }
                Ok(match request {
                    RequestKind::BrokerRegistration(r) => {
                        s.registrations.push(r);
                        if s.refuse_registrations > 0 {
                            s.refuse_registrations -= 1;
                            ResponseKind::BrokerRegistration(
                                BrokerRegistrationResponse::default()
                                    .with_error_code(101)
                                    .with_broker_epoch(-1),
                            )
                        } else {
                            ResponseKind::BrokerRegistration(
                                BrokerRegistrationResponse::default().with_broker_epoch(42),
                            )
                        }
                    }
                    RequestKind::BrokerHeartbeat(r) => {
                        let caught_up = r.current_metadata_offset >= s.unfence_at;
                        let shut = r.want_shut_down && !s.never_shut_down;
                        s.heartbeats.push(r);
                        ResponseKind::BrokerHeartbeat(
                            BrokerHeartbeatResponse::default()
                                .with_is_caught_up(caught_up)
                                .with_is_fenced(!caught_up)
                                .with_should_shut_down(shut),
                        )
                    }
                    _ => return Err(ControllerChannelError::Unsupported("test".to_owned())),
                })
            });
            Box::pin(async move { answer })
        }
    }

    fn config() -> LifecycleConfig {
        LifecycleConfig {
            node_id: 4,
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".to_owned(),
            incarnation_id: uuid::Uuid::from_u128(7),
            listeners: vec![Endpoint {
                name: "PLAINTEXT".to_owned(),
                host: "127.0.0.1".to_owned(),
                port: 9092,
                security_protocol: 0,
            }],
            rack: Some("r1".to_owned()),
            log_dir_ids: vec![uuid::Uuid::from_u128(9)],
            previous_broker_epoch: -1,
            heartbeat_interval: Duration::from_millis(5),
            request_timeout: Duration::from_millis(50),
        }
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let waited = tokio::time::timeout(WAIT, async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "timed out waiting for {what}");
    }

    #[test]
    fn registration_carries_identity_listeners_features_and_log_dirs() {
        let request = config().registration_request();
        assert_eq!(request.broker_id.0, 4);
        assert_eq!(request.incarnation_id, uuid::Uuid::from_u128(7));
        assert_eq!(request.log_dirs, vec![uuid::Uuid::from_u128(9)]);
        assert_eq!(request.previous_broker_epoch, -1);
        assert_eq!(request.rack.as_deref(), Some("r1"));
        assert_eq!(request.listeners.len(), 1);
        assert_eq!(request.listeners[0].port, 9092);
        let mv = request
            .features
            .iter()
            .find(|f| f.name.as_str() == "metadata.version")
            .expect("metadata.version is advertised");
        assert_eq!(
            (mv.min_supported_version, mv.max_supported_version),
            (
                MetadataVersion::MINIMUM_KRAFT_VERSION.feature_level(),
                MetadataVersion::LATEST_PRODUCTION.feature_level()
            )
        );
    }

    #[tokio::test]
    async fn registers_then_unfences_once_caught_up_with_the_registration_record() {
        let fake = FakeController::new(FakeState {
            unfence_at: 10,
            ..FakeState::default()
        });
        let lifecycle = BrokerLifecycle::start(config(), fake.clone());
        wait_for("registration", || lifecycle.broker_epoch() == Some(42)).await;
        assert_eq!(lifecycle.state(), BrokerState::Recovery);
        // Not caught up: heartbeats go on, fenced, never asking to be fenced.
        wait_for("a few heartbeats", || {
            fake.with(|s| s.heartbeats.len() >= 3)
        })
        .await;
        assert_eq!(lifecycle.state(), BrokerState::Recovery);
        assert!(lifecycle.is_fenced());
        lifecycle.set_metadata_offset(10);
        assert!(lifecycle.wait_until_running(WAIT).await, "never unfenced");
        assert!(!lifecycle.is_fenced());
        fake.with(|s| {
            assert!(
                s.heartbeats
                    .iter()
                    .all(|h| !h.want_fence && h.broker_epoch == 42)
            );
            assert_eq!(
                s.heartbeats.last().map(|h| h.current_metadata_offset),
                Some(10)
            );
        });
        lifecycle.stop();
    }

    #[tokio::test]
    async fn reaching_the_registration_record_heartbeats_at_once() {
        let fake = FakeController::new(FakeState {
            unfence_at: 42,
            ..FakeState::default()
        });
        let mut config = config();
        // Without the early heartbeat the broker would stay fenced for an hour.
        config.heartbeat_interval = Duration::from_secs(3600);
        let lifecycle = BrokerLifecycle::start(config, fake.clone());
        wait_for("registration and a first heartbeat", || {
            lifecycle.broker_epoch() == Some(42) && fake.with(|s| !s.heartbeats.is_empty())
        })
        .await;
        assert_eq!(lifecycle.state(), BrokerState::Recovery);
        lifecycle.set_metadata_offset(42);
        assert!(lifecycle.wait_until_running(WAIT).await, "never unfenced");
        lifecycle.stop();
    }

    #[tokio::test]
    async fn refused_and_failed_registrations_are_retried() {
        let fake = FakeController::new(FakeState {
            refuse_registrations: 2,
            fail_requests: 1,
            ..FakeState::default()
        });
        let lifecycle = BrokerLifecycle::start(config(), fake.clone());
        lifecycle.set_metadata_offset(0);
        assert!(lifecycle.wait_until_running(WAIT).await, "never unfenced");
        // One timed out (not recorded), two refused, one accepted; same incarnation each time.
        fake.with(|s| {
            assert_eq!(s.registrations.len(), 3);
            assert!(
                s.registrations
                    .iter()
                    .all(|r| r.incarnation_id == uuid::Uuid::from_u128(7))
            );
        });
        lifecycle.stop();
    }

    #[tokio::test]
    async fn controlled_shutdown_resolves_when_the_controller_agrees() {
        let fake = FakeController::new(FakeState::default());
        let mut config = config();
        // A long interval: the shutdown request must wake the task, not wait for it.
        config.heartbeat_interval = Duration::from_secs(3600);
        let lifecycle = BrokerLifecycle::start(config, fake.clone());
        lifecycle.set_metadata_offset(5);
        assert!(lifecycle.wait_until_running(WAIT).await, "never unfenced");
        assert!(lifecycle.controlled_shutdown(WAIT).await);
        assert_eq!(lifecycle.state(), BrokerState::ShuttingDown);
        fake.with(|s| assert!(s.heartbeats.last().is_some_and(|h| h.want_shut_down)));
    }

    #[tokio::test]
    async fn controlled_shutdown_gives_up_after_its_timeout() {
        let fake = FakeController::new(FakeState {
            never_shut_down: true,
            ..FakeState::default()
        });
        let lifecycle = BrokerLifecycle::start(config(), fake.clone());
        lifecycle.set_metadata_offset(0);
        assert!(lifecycle.wait_until_running(WAIT).await, "never unfenced");
        assert!(
            !lifecycle
                .controlled_shutdown(Duration::from_millis(50))
                .await
        );
        assert_eq!(lifecycle.state(), BrokerState::ShuttingDown);
        let sent = fake.with(|s| s.heartbeats.len());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            fake.with(|s| s.heartbeats.len()),
            sent,
            "heartbeats after stop"
        );
    }

    #[tokio::test]
    async fn an_unregistered_broker_shuts_down_at_once() {
        let fake = FakeController::new(FakeState {
            fail_requests: usize::MAX,
            ..FakeState::default()
        });
        let lifecycle = BrokerLifecycle::start(config(), fake);
        assert!(!lifecycle.controlled_shutdown(WAIT).await);
        assert_eq!(lifecycle.state(), BrokerState::ShuttingDown);
    }

    #[test]
    fn retry_backoff_doubles_up_to_half_the_session_timeout() {
        assert_eq!(retry_backoff(1), Duration::from_millis(100));
        assert_eq!(retry_backoff(2), Duration::from_millis(200));
        assert_eq!(retry_backoff(40), Duration::from_millis(4500));
    }
}
