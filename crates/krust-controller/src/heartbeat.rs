//! Broker sessions and the broker lifecycle: fenced → unfenced → controlled shutdown →
//! shut down (Kafka 3.9 `BrokerHeartbeatManager` and the heartbeat half of
//! `ReplicationControlManager`, facts §2.2).
//!
//! [`BrokerHeartbeatManager`] is sans-IO: every input carries `now`, outputs are records and
//! replies. How the controller drives it:
//!
//! 1. [`BrokerHeartbeatManager::replay`] every committed (and, on the active controller,
//!    every locally written) metadata record with its offset, on every controller. That is how
//!    it learns registrations, broker epochs and fencing — never from a request.
//! 2. On becoming active, [`BrokerHeartbeatManager::activate`]: every broker gets a fresh
//!    session starting `now` (a standby never saw their heartbeats).
//! 3. Per BrokerHeartbeat request, [`BrokerHeartbeatManager::handle_heartbeat`]; append the
//!    returned records together with the partition changes its [`PartitionWork`] asks for, and
//!    when a controlled-shutdown batch is appended call
//!    [`BrokerHeartbeatManager::handle_controlled_shutdown_appended`] with its end offset.
//! 4. Sleep until [`BrokerHeartbeatManager::poll_timeout`], then
//!    [`BrokerHeartbeatManager::handle_timeout`], which fences brokers whose session expired.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerHeartbeatResponse};
use krust_metadata::records::{
    BrokerFencingRecord, BrokerRegistrationChangeRecord, MetadataRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::error::ControllerError;
use crate::placement::UsableBroker;

/// `broker.session.timeout.ms` default: a broker that has not heartbeated for this long is
/// fenced.
pub const BROKER_SESSION_TIMEOUT_MS_DEFAULT: u64 = 9_000;
/// `broker.heartbeat.interval.ms` default: how often brokers heartbeat.
pub const BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 2_000;

/// `BrokerRegistrationChangeRecord.Fenced`: fence.
const FENCE: i8 = 1;
/// `BrokerRegistrationChangeRecord.Fenced`: unfence.
const UNFENCE: i8 = -1;
/// `BrokerRegistrationChangeRecord.InControlledShutdown`: entering controlled shutdown.
const IN_CONTROLLED_SHUTDOWN: i8 = 1;

/// The broker-session settings (Kafka's names and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// `broker.session.timeout.ms`.
    pub broker_session_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms` (what brokers are told to use; the controller only
    /// checks it is below the session timeout).
    pub broker_heartbeat_interval_ms: u64,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            broker_session_timeout_ms: BROKER_SESSION_TIMEOUT_MS_DEFAULT,
            broker_heartbeat_interval_ms: BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT,
        }
    }
}

/// Where a broker is in its lifecycle, as the active controller sees it (Kafka's
/// `BrokerControlState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerControlState {
    /// Registered but may not lead or be in an ISR.
    Fenced,
    /// Serving.
    Unfenced,
    /// Asked to shut down; leaderships are being moved away.
    ControlledShutdown,
    /// May stop now.
    ShutdownNow,
}

impl BrokerControlState {
    /// Whether the broker is fenced in this state.
    #[must_use]
    pub fn fenced(self) -> bool {
        matches!(self, Self::Fenced | Self::ShutdownNow)
    }

    /// Whether the broker is in controlled shutdown.
    #[must_use]
    pub fn in_controlled_shutdown(self) -> bool {
        self == Self::ControlledShutdown
    }

    /// Whether the broker should stop now.
    #[must_use]
    pub fn should_shut_down(self) -> bool {
        self == Self::ShutdownNow
    }
}

/// What the controller must also do to partitions, with the records of a transition. The
/// partition records need the topics image, so the caller builds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionWork {
    /// Nothing.
    None,
    /// Remove the broker from every ISR and move its leaderships away; these
    /// `PartitionChangeRecord`s go *before* the returned records (fencing, as Kafka's
    /// `handleBrokerFenced`).
    RemoveBrokerBefore,
    /// The same, *after* the returned records (controlled shutdown, as Kafka's
    /// `handleBrokerInControlledShutdown`; the leader epoch bump keeps the broker out of ISRs).
    RemoveBrokerAfter,
    /// Elect the broker where partitions have no leader, after the returned records
    /// (unfencing, as Kafka's `handleBrokerUnfenced`).
    ElectLeaderlessAfter,
}

/// The heartbeat response fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The broker has replayed at least up to its own registration record.
    pub is_caught_up: bool,
    /// The broker is fenced.
    pub is_fenced: bool,
    /// The broker is in controlled shutdown (not a response field; for the caller).
    pub in_controlled_shutdown: bool,
    /// The broker may shut down now.
    pub should_shut_down: bool,
}

impl HeartbeatReply {
    /// The `BrokerHeartbeatResponse` carrying this reply (error code 0).
    #[must_use]
    pub fn to_response(self) -> BrokerHeartbeatResponse {
        BrokerHeartbeatResponse::default()
            .with_is_caught_up(self.is_caught_up)
            .with_is_fenced(self.is_fenced)
            .with_should_shut_down(self.should_shut_down)
    }
}

/// What one heartbeat produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    /// State before the heartbeat.
    pub from: BrokerControlState,
    /// State after it.
    pub to: BrokerControlState,
    /// Registration-change records to append (empty when nothing changed).
    pub records: Vec<ApiMessageAndVersion>,
    /// Partition changes the caller adds around `records`.
    pub partition_work: PartitionWork,
    /// Log directories the broker newly reported offline (MV ≥ 3.7-IV2): the caller moves
    /// leadership off the partitions in them (before the `LogDirs` change record, which is
    /// the last of `records`).
    pub offline_directories: Vec<Uuid>,
    /// The reply.
    pub reply: HeartbeatReply,
}

/// A broker whose session expired, fenced by [`BrokerHeartbeatManager::handle_timeout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionExpiry {
    /// Broker id.
    pub broker_id: i32,
    /// Its broker epoch.
    pub broker_epoch: i64,
    /// The fencing record; [`PartitionWork::RemoveBrokerBefore`] applies.
    pub records: Vec<ApiMessageAndVersion>,
}

/// One registered broker's session.
#[derive(Debug, Clone)]
struct BrokerSession {
    /// From the latest RegisterBrokerRecord.
    broker_epoch: i64,
    /// Offset of that RegisterBrokerRecord: the broker is caught up once it has replayed it.
    registration_offset: i64,
    /// The registration says InControlledShutdown (a record was written already).
    recorded_in_controlled_shutdown: bool,
    /// Online log directories, per the registration and later `LogDirs` changes.
    directories: Vec<Uuid>,
    /// Last heartbeat (or activation/registration).
    last_contact: Instant,
    /// Highest metadata offset the broker reported; -1 before its first heartbeat.
    metadata_offset: i64,
    fenced: bool,
    /// End offset of the controlled-shutdown batch, once appended.
    controlled_shutdown_offset: Option<i64>,
}

impl BrokerSession {
    fn state(&self) -> BrokerControlState {
        if self.controlled_shutdown_offset.is_some() {
            BrokerControlState::ControlledShutdown
        } else if self.fenced {
            BrokerControlState::Fenced
        } else {
            BrokerControlState::Unfenced
        }
    }

    /// Unfenced and not shutting down.
    fn active(&self) -> bool {
        !self.fenced && self.controlled_shutdown_offset.is_none()
    }
}

/// Broker sessions of the active controller; replays registrations on every controller.
#[derive(Debug)]
pub struct BrokerHeartbeatManager {
    session_timeout: Duration,
    brokers: BTreeMap<i32, BrokerSession>,
    /// Sessions are only timed on the active controller.
    active: bool,
    /// Kafka metric `TimedOutBrokerHeartbeatCount`.
    timed_out_broker_heartbeat_count: u64,
}

impl BrokerHeartbeatManager {
    /// A manager with no brokers, not active.
    ///
    /// # Panics
    /// If the heartbeat interval is not below the session timeout (a config error the caller
    /// validates first, as Kafka's `KafkaConfig` does).
    #[must_use]
    pub fn new(config: HeartbeatConfig) -> Self {
        assert!(
            config.broker_heartbeat_interval_ms < config.broker_session_timeout_ms,
            "broker.heartbeat.interval.ms must be below broker.session.timeout.ms"
        );
        Self {
            session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
            brokers: BTreeMap::new(),
            active: false,
            timed_out_broker_heartbeat_count: 0,
        }
    }

    /// Applies one metadata record at `offset` (registrations, unregistrations, fencing and
    /// controlled-shutdown changes; other records are ignored).
    pub fn replay(&mut self, now: Instant, record: &MetadataRecord, offset: i64) {
        match record {
            MetadataRecord::RegisterBroker(r) => {
                // A new registration (even of the same incarnation) starts a fresh session, as
                // Kafka's replay does (`remove` then `register`).
                self.brokers.insert(
                    r.broker_id,
                    BrokerSession {
                        broker_epoch: r.broker_epoch,
                        registration_offset: offset,
                        directories: r.log_dirs.clone(),
                        recorded_in_controlled_shutdown: r.in_controlled_shutdown,
                        last_contact: now,
                        metadata_offset: -1,
                        fenced: r.fenced,
                        controlled_shutdown_offset: None,
                    },
                );
            }
            MetadataRecord::UnregisterBroker(r) => {
                self.brokers.remove(&r.broker_id);
            }
            MetadataRecord::FenceBroker(r) => self.replay_fencing(now, r.id, true),
            MetadataRecord::UnfenceBroker(r) => self.replay_fencing(now, r.id, false),
            MetadataRecord::BrokerRegistrationChange(r) => {
                // An empty `LogDirs` means "unchanged".
                if !r.log_dirs.is_empty()
                    && let Some(session) = self.brokers.get_mut(&r.broker_id)
                {
                    session.directories.clone_from(&r.log_dirs);
                }
                match r.fenced {
                    FENCE => self.replay_fencing(now, r.broker_id, true),
                    UNFENCE => self.replay_fencing(now, r.broker_id, false),
                    _ => {}
                }
                if r.in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN
                    && let Some(session) = self.brokers.get_mut(&r.broker_id)
                {
                    session.recorded_in_controlled_shutdown = true;
                }
            }
            _ => {}
        }
    }

    /// A fencing change from the log. Only a change restarts the session: the active
    /// controller has already set the state when it wrote the record.
    fn replay_fencing(&mut self, now: Instant, broker_id: i32, fenced: bool) {
        if let Some(session) = self.brokers.get_mut(&broker_id)
            && session.fenced != fenced
        {
            session.fenced = fenced;
            session.last_contact = now;
            if fenced {
                session.controlled_shutdown_offset = None;
            }
        }
    }

    /// This controller became active: every broker's session starts `now`.
    pub fn activate(&mut self, now: Instant) {
        self.active = true;
        for session in self.brokers.values_mut() {
            session.last_contact = now;
            session.metadata_offset = -1;
            session.controlled_shutdown_offset = None;
        }
    }

    /// This controller is no longer active: sessions stop being timed.
    pub fn deactivate(&mut self) {
        self.active = false;
    }

    /// Whether `broker_id` is registered, unfenced and heard from within the session timeout.
    #[must_use]
    pub fn has_valid_session(&self, now: Instant, broker_id: i32) -> bool {
        self.brokers
            .get(&broker_id)
            .is_some_and(|s| !s.fenced && now < s.last_contact + self.session_timeout)
    }

    /// The current state of a registered broker.
    #[must_use]
    pub fn state(&self, broker_id: i32) -> Option<BrokerControlState> {
        self.brokers.get(&broker_id).map(BrokerSession::state)
    }

    /// The broker epoch of a registered broker.
    #[must_use]
    pub fn broker_epoch(&self, broker_id: i32) -> Option<i64> {
        self.brokers.get(&broker_id).map(|s| s.broker_epoch)
    }

    /// Brokers new replicas may go to (Kafka's `usableBrokers`): every registered broker not in
    /// controlled shutdown, fenced ones flagged, in id order. `rack_of` gives each broker's
    /// `broker.rack` (from its registration).
    #[must_use]
    pub fn usable_brokers(&self, rack_of: impl Fn(i32) -> Option<String>) -> Vec<UsableBroker> {
        self.brokers
            .iter()
            .filter(|(_, s)| s.controlled_shutdown_offset.is_none())
            .map(|(&id, s)| UsableBroker {
                id,
                rack: rack_of(id),
                fenced: s.fenced,
            })
            .collect()
    }

    /// Kafka's `TimedOutBrokerHeartbeatCount`.
    #[must_use]
    pub fn timed_out_broker_heartbeat_count(&self) -> u64 {
        self.timed_out_broker_heartbeat_count
    }

    /// The lowest metadata offset reported by an active (unfenced, not shutting down) broker;
    /// `i64::MAX` if there is none.
    #[must_use]
    pub fn lowest_active_offset(&self) -> i64 {
        self.brokers
            .values()
            .filter(|s| s.active())
            .map(|s| s.metadata_offset)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Checks `broker_epoch` against the broker's registration (Kafka's `checkBrokerEpoch`).
    ///
    /// # Errors
    /// `STALE_BROKER_EPOCH`: [`ControllerError::UnknownBrokerEpoch`] for an unregistered
    /// broker, [`ControllerError::StaleBrokerEpoch`] for another epoch.
    pub fn check_broker_epoch(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<(), ControllerError> {
        let session = self
            .brokers
            .get(&broker_id)
            .ok_or(ControllerError::UnknownBrokerEpoch { broker_id })?;
        if session.broker_epoch != broker_epoch {
            return Err(ControllerError::StaleBrokerEpoch {
                broker_id,
                expected: session.broker_epoch,
                got: broker_epoch,
            });
        }
        Ok(())
    }

    /// One BrokerHeartbeat (Kafka's `calculateNextBrokerState` + `processBrokerHeartbeat`).
    /// `has_leaderships` says whether the broker still leads a partition; it is asked only
    /// when shutting down.
    ///
    /// # Errors
    /// `STALE_BROKER_EPOCH` for an unknown broker or an old broker epoch; nothing changes.
    pub fn handle_heartbeat(
        &mut self,
        now: Instant,
        request: &BrokerHeartbeatRequest,
        metadata_version: MetadataVersion,
        has_leaderships: impl FnOnce() -> bool,
    ) -> Result<HeartbeatOutcome, ControllerError> {
        let broker_id = request.broker_id.0;
        self.check_broker_epoch(broker_id, request.broker_epoch)?;
        let lowest_active_offset = self.lowest_active_offset();
        let session = self
            .brokers
            .get_mut(&broker_id)
            .expect("check_broker_epoch found the session");
        let from = session.state();
        let to = next_state(
            from,
            session,
            request,
            lowest_active_offset,
            has_leaderships,
        );
        let mut records = Vec::new();
        let mut partition_work = PartitionWork::None;
        if from != to {
            info!(broker_id, ?from, ?to, "broker state change on heartbeat");
            match to {
                BrokerControlState::Fenced | BrokerControlState::ShutdownNow => {
                    // Also FENCED → SHUTDOWN_NOW: Kafka 3.9 writes the (redundant) fence
                    // record there too, and the log should read the same.
                    records.push(fence_record(
                        broker_id,
                        session.broker_epoch,
                        metadata_version,
                    ));
                    partition_work = PartitionWork::RemoveBrokerBefore;
                }
                BrokerControlState::Unfenced => {
                    records.push(unfence_record(
                        broker_id,
                        session.broker_epoch,
                        metadata_version,
                    ));
                    partition_work = PartitionWork::ElectLeaderlessAfter;
                }
                BrokerControlState::ControlledShutdown => {
                    if metadata_version.is_in_controlled_shutdown_state_supported()
                        && !session.recorded_in_controlled_shutdown
                    {
                        records.push(ApiMessageAndVersion::new(
                            MetadataRecord::BrokerRegistrationChange(
                                BrokerRegistrationChangeRecord {
                                    broker_id,
                                    broker_epoch: session.broker_epoch,
                                    in_controlled_shutdown: IN_CONTROLLED_SHUTDOWN,
                                    ..BrokerRegistrationChangeRecord::default()
                                },
                            ),
                            1,
                        ));
                    }
                    partition_work = PartitionWork::RemoveBrokerAfter;
                }
            }
        }
        // Kafka's `touch`: the session restarts and the state is taken optimistically (the
        // replay of the record just written then changes nothing).
        session.last_contact = now;
        session.metadata_offset = request.current_metadata_offset;
        if to.fenced() {
            session.fenced = true;
            session.controlled_shutdown_offset = None;
        } else {
            session.fenced = false;
        }
        let mut offline_directories = Vec::new();
        if metadata_version.is_directory_assignment_supported() {
            offline_directories = session
                .directories
                .iter()
                .filter(|d| request.offline_log_dirs.contains(d))
                .copied()
                .collect();
            if !offline_directories.is_empty() {
                warn!(
                    broker_id,
                    offline = offline_directories.len(),
                    "log directories offline"
                );
                let online: Vec<Uuid> = session
                    .directories
                    .iter()
                    .filter(|d| !offline_directories.contains(d))
                    .copied()
                    .collect();
                records.push(ApiMessageAndVersion::new(
                    MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                        broker_id,
                        broker_epoch: session.broker_epoch,
                        log_dirs: online,
                        ..BrokerRegistrationChangeRecord::default()
                    }),
                    2,
                ));
            }
        }
        let reply = HeartbeatReply {
            is_caught_up: request.current_metadata_offset >= session.registration_offset,
            is_fenced: to.fenced(),
            in_controlled_shutdown: to.in_controlled_shutdown(),
            should_shut_down: to.should_shut_down(),
        };
        Ok(HeartbeatOutcome {
            from,
            to,
            records,
            partition_work,
            offline_directories,
            reply,
        })
    }

    /// The batch holding a broker's controlled-shutdown records was appended and ends at
    /// `end_offset`: once every active broker has replayed past it, the broker may stop.
    /// Ignored for unknown or fenced brokers, and when the offset is already set.
    pub fn handle_controlled_shutdown_appended(&mut self, broker_id: i32, end_offset: i64) {
        match self.brokers.get_mut(&broker_id) {
            Some(session) if !session.fenced => {
                if session.controlled_shutdown_offset.is_none() {
                    debug!(broker_id, end_offset, "controlled shutdown offset set");
                    session.controlled_shutdown_offset = Some(end_offset);
                }
            }
            _ => warn!(
                broker_id,
                "controlled shutdown for a missing or fenced broker"
            ),
        }
    }

    /// When [`Self::handle_timeout`] is next due: the earliest session expiry of an unfenced
    /// broker. `None` when not active or nobody is unfenced.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.active {
            return None;
        }
        self.brokers
            .values()
            .filter(|s| !s.fenced)
            .map(|s| s.last_contact + self.session_timeout)
            .min()
    }

    /// Fences every unfenced broker whose session expired by `now` (a session is valid
    /// strictly before `last_contact + broker.session.timeout.ms`), oldest first.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        metadata_version: MetadataVersion,
    ) -> Vec<SessionExpiry> {
        if !self.active {
            return Vec::new();
        }
        let mut expired: Vec<(Instant, i32)> = self
            .brokers
            .iter()
            .filter(|(_, s)| !s.fenced && now >= s.last_contact + self.session_timeout)
            .map(|(&id, s)| (s.last_contact, id))
            .collect();
        expired.sort_unstable();
        let mut fenced = Vec::with_capacity(expired.len());
        for (last_contact, broker_id) in expired {
            let session = self
                .brokers
                .get_mut(&broker_id)
                .expect("ids come from the map just above");
            warn!(
                broker_id,
                broker_epoch = session.broker_epoch,
                silent_ms = now.duration_since(last_contact).as_millis(),
                "fencing broker: session timed out"
            );
            session.fenced = true;
            session.controlled_shutdown_offset = None;
            self.timed_out_broker_heartbeat_count += 1;
            fenced.push(SessionExpiry {
                broker_id,
                broker_epoch: session.broker_epoch,
                records: vec![fence_record(
                    broker_id,
                    session.broker_epoch,
                    metadata_version,
                )],
            });
        }
        fenced
    }
}

/// Kafka's `calculateNextBrokerState`.
fn next_state(
    from: BrokerControlState,
    session: &BrokerSession,
    request: &BrokerHeartbeatRequest,
    lowest_active_offset: i64,
    has_leaderships: impl FnOnce() -> bool,
) -> BrokerControlState {
    use BrokerControlState::{ControlledShutdown, Fenced, ShutdownNow, Unfenced};
    match from {
        Fenced if request.want_shut_down => ShutdownNow,
        Fenced
            if !request.want_fence
                && request.current_metadata_offset >= session.registration_offset =>
        {
            Unfenced
        }
        Fenced => Fenced,
        Unfenced if request.want_fence && request.want_shut_down => ShutdownNow,
        Unfenced if request.want_fence => Fenced,
        Unfenced if request.want_shut_down => {
            if has_leaderships() {
                ControlledShutdown
            } else {
                ShutdownNow
            }
        }
        Unfenced => Unfenced,
        ControlledShutdown => {
            let done = session
                .controlled_shutdown_offset
                .is_some_and(|offset| offset <= lowest_active_offset);
            if !has_leaderships() && done {
                ShutdownNow
            } else {
                ControlledShutdown
            }
        }
        ShutdownNow => ShutdownNow,
    }
}

/// `BrokerRegistrationChangeRecord{Fenced=1}` v0, or `FenceBrokerRecord` before 3.3-IV2.
fn fence_record(broker_id: i32, broker_epoch: i64, mv: MetadataVersion) -> ApiMessageAndVersion {
    fencing_record(broker_id, broker_epoch, mv, FENCE)
}

/// `BrokerRegistrationChangeRecord{Fenced=-1}` v0, or `UnfenceBrokerRecord` before 3.3-IV2.
fn unfence_record(broker_id: i32, broker_epoch: i64, mv: MetadataVersion) -> ApiMessageAndVersion {
    fencing_record(broker_id, broker_epoch, mv, UNFENCE)
}

fn fencing_record(
    broker_id: i32,
    broker_epoch: i64,
    mv: MetadataVersion,
    fenced: i8,
) -> ApiMessageAndVersion {
    if mv.is_broker_registration_change_record_supported() {
        ApiMessageAndVersion::new(
            MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id,
                broker_epoch,
                fenced,
                ..BrokerRegistrationChangeRecord::default()
            }),
            0,
        )
    } else {
        let record = BrokerFencingRecord {
            id: broker_id,
            epoch: broker_epoch,
            unknown_tagged_fields: Vec::new(),
        };
        let record = if fenced == FENCE {
            MetadataRecord::FenceBroker(record)
        } else {
            MetadataRecord::UnfenceBroker(record)
        };
        ApiMessageAndVersion::new(record, 0)
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::BrokerId;
    use krust_metadata::records::{RegisterBrokerRecord, UnregisterBrokerRecord};
    use uuid::Uuid;

    use super::*;

    const MV: MetadataVersion = MetadataVersion::IBP_3_9_IV0;

    fn register(broker_id: i32, broker_epoch: i64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(7, u64::try_from(broker_id).unwrap_or(0)),
            broker_epoch,
            end_points: Vec::new(),
            features: Vec::new(),
            rack: None,
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        })
    }

    fn heartbeat(broker_id: i32, broker_epoch: i64, offset: i64) -> BrokerHeartbeatRequest {
        BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_broker_epoch(broker_epoch)
            .with_current_metadata_offset(offset)
    }

    /// An active manager at `t0` with brokers registered by records at offsets 10, 20, ….
    fn manager(t0: Instant, brokers: &[i32]) -> BrokerHeartbeatManager {
        let mut m = BrokerHeartbeatManager::new(HeartbeatConfig::default());
        for (i, &id) in brokers.iter().enumerate() {
            let offset = 10 * (i64::try_from(i).unwrap_or(0) + 1);
            m.replay(t0, &register(id, offset), offset);
        }
        m.activate(t0);
        m
    }

    fn unfence(m: &mut BrokerHeartbeatManager, now: Instant, id: i32, epoch: i64) {
        let out = m
            .handle_heartbeat(now, &heartbeat(id, epoch, 1_000), MV, || false)
            .expect("valid heartbeat");
        assert_eq!(out.to, BrokerControlState::Unfenced);
    }

    fn brcr(record: &ApiMessageAndVersion) -> (&BrokerRegistrationChangeRecord, i16) {
        match &record.record {
            MetadataRecord::BrokerRegistrationChange(r) => (r, record.version),
            other => panic!("expected a BrokerRegistrationChangeRecord, got {other:?}"),
        }
    }

    #[test]
    fn a_new_broker_stays_fenced_until_it_has_replayed_its_registration() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        let out = m
            .handle_heartbeat(t0, &heartbeat(1, 10, 9), MV, || false)
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::Fenced);
        assert!(out.records.is_empty());
        assert!(!out.reply.is_caught_up && out.reply.is_fenced && !out.reply.should_shut_down);

        let out = m
            .handle_heartbeat(t0, &heartbeat(1, 10, 10), MV, || false)
            .expect("valid");
        assert_eq!(
            (out.from, out.to),
            (BrokerControlState::Fenced, BrokerControlState::Unfenced)
        );
        assert!(out.reply.is_caught_up && !out.reply.is_fenced);
        assert_eq!(out.partition_work, PartitionWork::ElectLeaderlessAfter);
        let (record, version) = brcr(&out.records[0]);
        assert_eq!(
            (
                record.broker_id,
                record.broker_epoch,
                record.fenced,
                version
            ),
            (1, 10, -1, 0)
        );
        let response = out.reply.to_response();
        assert!(response.is_caught_up && !response.is_fenced && !response.should_shut_down);
    }

    #[test]
    fn want_fence_keeps_a_caught_up_broker_fenced() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        let out = m
            .handle_heartbeat(t0, &heartbeat(1, 10, 50).with_want_fence(true), MV, || {
                false
            })
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::Fenced);
        assert!(
            out.reply.is_caught_up,
            "caught up, but asked to stay fenced"
        );
        assert!(out.records.is_empty());
    }

    #[test]
    fn before_3_3_iv2_fencing_uses_fence_and_unfence_records() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        let old = MetadataVersion::IBP_3_3_IV1;
        let out = m
            .handle_heartbeat(t0, &heartbeat(1, 10, 10), old, || false)
            .expect("valid");
        assert!(
            matches!(&out.records[0].record, MetadataRecord::UnfenceBroker(r) if r.id == 1 && r.epoch == 10)
        );
        let expired = m.handle_timeout(t0 + Duration::from_secs(9), old);
        assert!(
            matches!(&expired[0].records[0].record, MetadataRecord::FenceBroker(r) if r.id == 1 && r.epoch == 10)
        );
    }

    /// broker.session.timeout.ms 9000: heartbeats every 2000 ms keep the session for a minute
    /// of virtual time; silence fences at exactly 9000 ms, not before.
    #[test]
    fn a_silent_broker_is_fenced_after_the_session_timeout() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1, 2]);
        unfence(&mut m, t0, 1, 10);
        unfence(&mut m, t0, 2, 20);
        let interval = Duration::from_millis(BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT);
        let mut now = t0;
        for _ in 0..30 {
            now += interval;
            m.handle_heartbeat(now, &heartbeat(1, 10, 1_000), MV, || false)
                .expect("valid");
            if m.poll_timeout().is_some_and(|due| due <= now) {
                let expired = m.handle_timeout(now, MV);
                assert!(expired.iter().all(|e| e.broker_id == 2));
            }
        }
        assert!(m.has_valid_session(now, 1));
        assert_eq!(m.state(1), Some(BrokerControlState::Unfenced));
        assert_eq!(m.state(2), Some(BrokerControlState::Fenced));
        assert_eq!(m.timed_out_broker_heartbeat_count(), 1);

        // Broker 1 now goes silent.
        let deadline = now + Duration::from_millis(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
        assert_eq!(m.poll_timeout(), Some(deadline));
        assert!(
            m.handle_timeout(deadline - Duration::from_millis(1), MV)
                .is_empty()
        );
        let expired = m.handle_timeout(deadline, MV);
        assert_eq!(expired.len(), 1);
        assert_eq!((expired[0].broker_id, expired[0].broker_epoch), (1, 10));
        let (record, version) = brcr(&expired[0].records[0]);
        assert_eq!((record.fenced, version), (1, 0));
        assert!(!m.has_valid_session(deadline, 1));
        assert_eq!(m.poll_timeout(), None, "nobody unfenced");
    }

    #[test]
    fn several_silent_brokers_are_fenced_oldest_first() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[3, 1, 2]);
        unfence(&mut m, t0 + Duration::from_millis(300), 1, 20);
        unfence(&mut m, t0 + Duration::from_millis(100), 2, 30);
        unfence(&mut m, t0 + Duration::from_millis(200), 3, 10);
        let expired = m.handle_timeout(t0 + Duration::from_secs(20), MV);
        let ids: Vec<i32> = expired.iter().map(|e| e.broker_id).collect();
        assert_eq!(ids, vec![2, 3, 1]);
        assert_eq!(m.timed_out_broker_heartbeat_count(), 3);
    }

    #[test]
    fn a_standby_does_not_time_sessions_out() {
        let t0 = Instant::now();
        let mut m = BrokerHeartbeatManager::new(HeartbeatConfig::default());
        m.replay(t0, &register(1, 5), 5);
        let unfenced = MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id: 1,
            broker_epoch: 5,
            fenced: UNFENCE,
            ..BrokerRegistrationChangeRecord::default()
        });
        m.replay(t0, &unfenced, 6);
        assert_eq!(m.state(1), Some(BrokerControlState::Unfenced));
        assert_eq!(m.poll_timeout(), None);
        assert!(
            m.handle_timeout(t0 + Duration::from_secs(60), MV)
                .is_empty()
        );
        // Failover: the new active controller gives the broker a full session from now.
        let t1 = t0 + Duration::from_secs(60);
        m.activate(t1);
        assert!(m.has_valid_session(t1, 1));
        assert_eq!(m.poll_timeout(), Some(t1 + Duration::from_secs(9)));
    }

    /// Controlled shutdown (KIP-631): leaderships move first; SHUTDOWN_NOW only once it leads
    /// nothing and every active broker has replayed past the controlled-shutdown batch.
    #[test]
    fn controlled_shutdown_completes_once_leaderships_are_gone_and_brokers_caught_up() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1, 2]);
        unfence(&mut m, t0, 1, 10);
        let out = m
            .handle_heartbeat(t0, &heartbeat(2, 20, 100), MV, || false)
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::Unfenced);

        let shut = heartbeat(1, 10, 100).with_want_shut_down(true);
        let out = m.handle_heartbeat(t0, &shut, MV, || true).expect("valid");
        assert_eq!(
            (out.from, out.to),
            (
                BrokerControlState::Unfenced,
                BrokerControlState::ControlledShutdown
            )
        );
        assert_eq!(out.partition_work, PartitionWork::RemoveBrokerAfter);
        let (record, version) = brcr(&out.records[0]);
        assert_eq!(
            (record.in_controlled_shutdown, record.fenced, version),
            (1, 0, 1)
        );
        assert!(
            !out.reply.should_shut_down && !out.reply.is_fenced && out.reply.in_controlled_shutdown
        );
        m.replay(t0, &out.records[0].record, 101);
        m.handle_controlled_shutdown_appended(1, 120);
        assert_eq!(m.state(1), Some(BrokerControlState::ControlledShutdown));

        // Still leads something: wait.
        let out = m.handle_heartbeat(t0, &shut, MV, || true).expect("valid");
        assert_eq!(out.to, BrokerControlState::ControlledShutdown);
        assert!(out.records.is_empty());
        // Leads nothing, but broker 2 has only replayed up to 100 < 120: wait.
        let out = m.handle_heartbeat(t0, &shut, MV, || false).expect("valid");
        assert_eq!(out.to, BrokerControlState::ControlledShutdown);
        // Broker 2 catches up past the batch: broker 1 may go.
        m.handle_heartbeat(t0, &heartbeat(2, 20, 130), MV, || false)
            .expect("valid");
        let out = m.handle_heartbeat(t0, &shut, MV, || false).expect("valid");
        assert_eq!(out.to, BrokerControlState::ShutdownNow);
        assert!(out.reply.should_shut_down && out.reply.is_fenced);
        assert_eq!(out.partition_work, PartitionWork::RemoveBrokerBefore);
        assert_eq!(brcr(&out.records[0]).0.fenced, 1);
        assert_eq!(m.state(1), Some(BrokerControlState::Fenced));
    }

    #[test]
    fn want_shut_down_without_leaderships_shuts_down_at_once() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        unfence(&mut m, t0, 1, 10);
        let out = m
            .handle_heartbeat(
                t0,
                &heartbeat(1, 10, 100).with_want_shut_down(true),
                MV,
                || false,
            )
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::ShutdownNow);
        assert!(out.reply.should_shut_down);
        assert_eq!(out.records.len(), 1, "the broker is fenced");
    }

    #[test]
    fn a_fenced_broker_asking_to_shut_down_goes_at_once_with_kafkas_redundant_fence_record() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        let out = m
            .handle_heartbeat(
                t0,
                &heartbeat(1, 10, 0).with_want_shut_down(true),
                MV,
                || true,
            )
            .expect("valid");
        assert_eq!(
            (out.from, out.to),
            (BrokerControlState::Fenced, BrokerControlState::ShutdownNow)
        );
        assert!(out.reply.should_shut_down);
        assert_eq!(brcr(&out.records[0]).0.fenced, 1);
    }

    #[test]
    fn before_3_3_iv3_controlled_shutdown_writes_no_record() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        unfence(&mut m, t0, 1, 10);
        let out = m
            .handle_heartbeat(
                t0,
                &heartbeat(1, 10, 100).with_want_shut_down(true),
                MetadataVersion::IBP_3_3_IV2,
                || true,
            )
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::ControlledShutdown);
        assert!(out.records.is_empty());
        assert_eq!(out.partition_work, PartitionWork::RemoveBrokerAfter);
    }

    #[test]
    fn an_unfenced_broker_asking_to_be_fenced_is_fenced() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        unfence(&mut m, t0, 1, 10);
        let out = m
            .handle_heartbeat(t0, &heartbeat(1, 10, 100).with_want_fence(true), MV, || {
                true
            })
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::Fenced);
        assert_eq!(out.partition_work, PartitionWork::RemoveBrokerBefore);
        assert_eq!(brcr(&out.records[0]).0.fenced, 1);
    }

    /// JBOD (KIP-858): a directory reported offline is dropped from the registration with a
    /// BrokerRegistrationChangeRecord v2 listing the dirs still online; repeating the report
    /// changes nothing.
    #[test]
    fn offline_log_dirs_leave_the_registration() {
        let t0 = Instant::now();
        let (a, b) = (Uuid::from_u64_pair(1, 500), Uuid::from_u64_pair(1, 501));
        let mut m = BrokerHeartbeatManager::new(HeartbeatConfig::default());
        let MetadataRecord::RegisterBroker(mut record) = register(1, 10) else {
            unreachable!("register() builds a RegisterBrokerRecord")
        };
        record.log_dirs = vec![a, b];
        m.replay(t0, &MetadataRecord::RegisterBroker(record), 10);
        m.activate(t0);
        unfence(&mut m, t0, 1, 10);
        let beat = heartbeat(1, 10, 100).with_offline_log_dirs(vec![b, Uuid::from_u64_pair(9, 9)]);
        let out = m.handle_heartbeat(t0, &beat, MV, || true).expect("valid");
        assert_eq!(out.offline_directories, vec![b]);
        let (change, version) = brcr(out.records.last().expect("a LogDirs change"));
        assert_eq!(
            (change.log_dirs.clone(), change.fenced, version),
            (vec![a], 0, 2)
        );
        out.records[0].encode().expect("encodable");
        m.replay(t0, &out.records[0].record, 101);
        let again = m.handle_heartbeat(t0, &beat, MV, || true).expect("valid");
        assert!(again.records.is_empty() && again.offline_directories.is_empty());
        // Before 3.7-IV2 there are no directory assignments to change.
        let old = m
            .handle_heartbeat(
                t0,
                &heartbeat(1, 10, 100).with_offline_log_dirs(vec![a]),
                MetadataVersion::IBP_3_7_IV1,
                || true,
            )
            .expect("valid");
        assert!(old.records.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Step {
        Heartbeat {
            broker: i32,
            lag: i64,
            want_fence: bool,
            want_shut_down: bool,
            leads: bool,
        },
        Advance(u64),
        Timeout,
        ShutdownAppended(i32),
        Reregister(i32),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (1..4i32, 0..3i64, proptest::bool::weighted(0.1), proptest::bool::weighted(0.15), any::<bool>())
                .prop_map(|(broker, lag, want_fence, want_shut_down, leads)| Step::Heartbeat {
                    broker, lag, want_fence, want_shut_down, leads,
                }),
            2 => (0..6_000u64).prop_map(Step::Advance),
            1 => Just(Step::Timeout),
            1 => (1..4i32).prop_map(Step::ShutdownAppended),
            1 => (1..4i32).prop_map(Step::Reregister),
        ]
    }

    proptest::proptest! {
        /// Random heartbeats, clock jumps, timeouts, controlled-shutdown appends and
        /// re-registrations against 3 brokers, every produced record appended to a log and
        /// replayed. After every step: the fencing the log describes is the manager's (its
        /// optimistic state never runs ahead of a record), records carry the current broker
        /// epoch, `should_shut_down` implies fenced, and after a timeout check no unfenced
        /// broker has an expired session.
        #[test]
        fn the_log_always_describes_the_managers_fencing(
            steps in proptest::collection::vec(step(), 1..80),
            old_mv in proptest::bool::ANY,
        ) {
            let mv = if old_mv { MetadataVersion::IBP_3_3_IV1 } else { MV };
            let t0 = Instant::now();
            let mut now = t0;
            let mut m = BrokerHeartbeatManager::new(HeartbeatConfig::default());
            let mut log_end = 0i64;
            let mut fenced_in_log: BTreeMap<i32, bool> = BTreeMap::new();
            let mut epochs: BTreeMap<i32, i64> = BTreeMap::new();
            fn append(
                m: &mut BrokerHeartbeatManager,
                now: Instant,
                records: &[ApiMessageAndVersion],
                log_end: &mut i64,
                fenced_in_log: &mut BTreeMap<i32, bool>,
                epochs: &BTreeMap<i32, i64>,
            ) {
                for record in records {
                    match &record.record {
                        MetadataRecord::BrokerRegistrationChange(r) => {
                            assert_eq!(Some(&r.broker_epoch), epochs.get(&r.broker_id));
                            match r.fenced {
                                FENCE => { fenced_in_log.insert(r.broker_id, true); }
                                UNFENCE => { fenced_in_log.insert(r.broker_id, false); }
                                _ => {}
                            }
                        }
                        MetadataRecord::FenceBroker(r) => {
                            assert_eq!(Some(&r.epoch), epochs.get(&r.id));
                            fenced_in_log.insert(r.id, true);
                        }
                        MetadataRecord::UnfenceBroker(r) => {
                            assert_eq!(Some(&r.epoch), epochs.get(&r.id));
                            fenced_in_log.insert(r.id, false);
                        }
                        other => panic!("unexpected record {other:?}"),
                    }
                    *log_end += 1;
                    m.replay(now, &record.record, *log_end);
                }
            }
            for id in 1..4 {
                log_end += 1;
                m.replay(now, &register(id, log_end), log_end);
                fenced_in_log.insert(id, true);
                epochs.insert(id, log_end);
            }
            m.activate(now);
            for step in steps {
                match step {
                    Step::Heartbeat { broker, lag, want_fence, want_shut_down, leads } => {
                        let request = heartbeat(broker, epochs[&broker], log_end - lag)
                            .with_want_fence(want_fence)
                            .with_want_shut_down(want_shut_down);
                        let out = m.handle_heartbeat(now, &request, mv, || leads).expect("current epoch");
                        proptest::prop_assert!(!out.reply.should_shut_down || out.reply.is_fenced);
                        proptest::prop_assert_eq!(out.reply.is_fenced, out.to.fenced());
                        append(&mut m, now, &out.records, &mut log_end, &mut fenced_in_log, &epochs);
                    }
                    Step::Advance(ms) => now += Duration::from_millis(ms),
                    Step::Timeout => {
                        let expired = m.handle_timeout(now, mv);
                        for e in &expired {
                            append(&mut m, now, &e.records, &mut log_end, &mut fenced_in_log, &epochs);
                        }
                        for id in 1..4 {
                            let unfenced = m.state(id).is_some_and(|s| !s.fenced());
                            proptest::prop_assert!(!unfenced || m.has_valid_session(now, id));
                        }
                    }
                    Step::ShutdownAppended(broker) => {
                        if m.state(broker) == Some(BrokerControlState::Unfenced) {
                            m.handle_controlled_shutdown_appended(broker, log_end);
                        }
                    }
                    Step::Reregister(broker) => {
                        log_end += 1;
                        epochs.insert(broker, log_end);
                        m.replay(now, &register(broker, log_end), log_end);
                        fenced_in_log.insert(broker, true);
                    }
                }
                for id in 1..4 {
                    let state = m.state(id).expect("registered");
                    proptest::prop_assert_eq!(state.fenced(), fenced_in_log[&id], "broker {} in {:?}", id, state);
                    proptest::prop_assert_eq!(m.broker_epoch(id), Some(epochs[&id]));
                }
            }
        }
    }

    /// Port of Kafka's `BrokerHeartbeatManagerTest.testCalculateNextBrokerState`: six brokers
    /// (0 and 4 fenced at offset 100; 1 at 98, 2 and 3 at 100 unfenced; 5 in controlled
    /// shutdown with offset 99), then the next state for each kind of request.
    #[test]
    fn next_states_follow_kafkas_table() {
        use BrokerControlState::{ControlledShutdown, Fenced, ShutdownNow, Unfenced};
        let t0 = Instant::now();
        let mut m = BrokerHeartbeatManager::new(HeartbeatConfig::default());
        for id in 0..6 {
            let offset = 90 + i64::from(id);
            m.replay(t0, &register(id, offset), offset);
        }
        m.activate(t0);
        let beat =
            |m: &mut BrokerHeartbeatManager, id: i32, offset: i64, fence: bool, shut: bool| {
                let request = heartbeat(id, 90 + i64::from(id), offset)
                    .with_want_fence(fence)
                    .with_want_shut_down(shut);
                m.handle_heartbeat(t0, &request, MV, || true)
                    .expect("valid")
                    .to
            };
        assert_eq!(beat(&mut m, 0, 100, true, false), Fenced);
        assert_eq!(beat(&mut m, 1, 98, false, false), Unfenced);
        assert_eq!(beat(&mut m, 2, 100, false, false), Unfenced);
        assert_eq!(beat(&mut m, 3, 100, false, false), Unfenced);
        assert_eq!(beat(&mut m, 4, 100, true, false), Fenced);
        assert_eq!(beat(&mut m, 5, 99, false, false), Unfenced);
        assert_eq!(beat(&mut m, 5, 99, false, true), ControlledShutdown);
        m.handle_controlled_shutdown_appended(5, 99);
        assert_eq!(m.lowest_active_offset(), 98);

        let next =
            |m: &BrokerHeartbeatManager, id: i32, request: BrokerHeartbeatRequest, leads: bool| {
                let session = &m.brokers[&id];
                let from = session.state();
                (
                    from,
                    next_state(from, session, &request, m.lowest_active_offset(), || leads),
                )
            };
        let want = |offset: i64, fence: bool, shut: bool| {
            BrokerHeartbeatRequest::default()
                .with_current_metadata_offset(offset)
                .with_want_fence(fence)
                .with_want_shut_down(shut)
        };
        assert_eq!(
            next(&m, 0, want(0, false, true), false),
            (Fenced, ShutdownNow)
        );
        assert_eq!(
            next(&m, 0, want(100, false, false), false),
            (Fenced, Unfenced)
        );
        assert_eq!(next(&m, 0, want(50, false, false), false), (Fenced, Fenced));
        assert_eq!(next(&m, 0, want(100, true, false), false), (Fenced, Fenced));
        assert_eq!(
            next(&m, 1, want(0, false, true), true),
            (Unfenced, ControlledShutdown)
        );
        assert_eq!(
            next(&m, 1, want(0, false, true), false),
            (Unfenced, ShutdownNow)
        );
        assert_eq!(
            next(&m, 1, want(0, false, false), false),
            (Unfenced, Unfenced)
        );
        assert_eq!(
            next(&m, 5, want(0, false, true), true),
            (ControlledShutdown, ControlledShutdown)
        );
        // Broker 1 (offset 98) has not replayed the controlled-shutdown batch (99) yet.
        assert_eq!(
            next(&m, 5, want(0, false, true), false),
            (ControlledShutdown, ControlledShutdown)
        );
        assert_eq!(beat(&mut m, 1, 98, true, false), Fenced);
        assert_eq!(
            next(&m, 5, want(0, false, true), false),
            (ControlledShutdown, ShutdownNow)
        );
        assert_eq!(
            next(&m, 5, want(0, false, true), true),
            (ControlledShutdown, ControlledShutdown)
        );
    }

    /// Kafka's `testUsableBrokerIterator`: fenced brokers are usable (flagged), brokers in
    /// controlled shutdown are not.
    #[test]
    fn usable_brokers_leave_out_those_shutting_down() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1, 2, 3]);
        unfence(&mut m, t0, 1, 10);
        unfence(&mut m, t0, 2, 20);
        let out = m
            .handle_heartbeat(
                t0,
                &heartbeat(2, 20, 100).with_want_shut_down(true),
                MV,
                || true,
            )
            .expect("valid");
        assert_eq!(out.to, BrokerControlState::ControlledShutdown);
        m.handle_controlled_shutdown_appended(2, 101);
        let rack = |id: i32| Some(format!("rack{}", id % 2));
        let usable = m.usable_brokers(rack);
        assert_eq!(
            usable,
            vec![
                UsableBroker {
                    id: 1,
                    rack: Some("rack1".into()),
                    fenced: false
                },
                UsableBroker {
                    id: 3,
                    rack: Some("rack1".into()),
                    fenced: true
                },
            ]
        );
    }

    #[test]
    fn stale_or_unknown_epochs_are_refused_and_change_nothing() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        let err = m
            .handle_heartbeat(t0, &heartbeat(1, 9, 100), MV, || false)
            .expect_err("old epoch");
        assert_eq!(
            err,
            ControllerError::StaleBrokerEpoch {
                broker_id: 1,
                expected: 10,
                got: 9
            }
        );
        assert_eq!(err.code(), 77);
        let err = m
            .handle_heartbeat(t0, &heartbeat(5, 10, 100), MV, || false)
            .expect_err("never registered");
        assert_eq!(err.code(), 77);
        assert_eq!(m.state(1), Some(BrokerControlState::Fenced));
    }

    #[test]
    fn unregistration_and_re_registration_reset_the_session() {
        let t0 = Instant::now();
        let mut m = manager(t0, &[1]);
        unfence(&mut m, t0, 1, 10);
        m.replay(t0, &register(1, 50), 50);
        assert_eq!(m.state(1), Some(BrokerControlState::Fenced));
        assert_eq!(m.broker_epoch(1), Some(50));
        assert!(m.check_broker_epoch(1, 10).is_err());
        let unregister = MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
            broker_id: 1,
            broker_epoch: 50,
            unknown_tagged_fields: Vec::new(),
        });
        m.replay(t0, &unregister, 51);
        assert_eq!(m.state(1), None);
        assert!(!m.has_valid_session(t0, 1));
    }
}
