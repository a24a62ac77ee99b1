//! Kafka 3.9's `MigrationDriverState` (the driver's 9 states and their legal transitions) and
//! `ZkMigrationLeadershipState` (the `/migration` znode's content plus the ZooKeeper versions
//! the driver fences its writes with), with the small znode codecs the driver needs:
//! `/migration`, `/controller` and `/controller_epoch` (facts §6.4–§6.6).
//!
//! The codecs here are deliberately minimal and private to the driver's needs; Kafka's full
//! znode model lives in `krust_zk::model`.

use std::fmt;

use krust_zk::model::cluster::{ControllerRegistration, MigrationZNode, controller_epoch};

/// The ZooKeeper path of the migration state znode.
pub const MIGRATION_PATH: &str = "/migration";
/// The ZooKeeper path of the controller registration znode.
pub const CONTROLLER_PATH: &str = "/controller";
/// The ZooKeeper path of the controller epoch znode.
pub const CONTROLLER_EPOCH_PATH: &str = "/controller_epoch";

/// "Unknown" for a ZooKeeper version (Kafka's `UNKNOWN_ZK_VERSION`): -2, so that it is never
/// sent as ZooKeeper's -1 "any version" by mistake.
pub const UNKNOWN_ZK_VERSION: i32 = -2;

/// The driver's state (Kafka's `MigrationDriverState`; facts §6.4). The discriminant is Kafka's
/// ordinal, which logs and the status tool show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MigrationDriverState {
    /// 0: nothing recovered from ZooKeeper yet.
    Uninitialized = 0,
    /// 1: not the active controller (or waiting to learn that it is).
    Inactive = 1,
    /// 2: active; checking that every quorum controller is ready to migrate.
    WaitForControllerQuorum = 2,
    /// 3: waiting for every ZooKeeper broker to register with KRaft.
    WaitForBrokers = 3,
    /// 4: claiming `/controller` and bumping `/controller_epoch`.
    BecomeController = 4,
    /// 5: copying ZooKeeper's metadata into the KRaft log.
    ZkMigration = 5,
    /// 6: reconciling ZooKeeper with the whole KRaft image.
    SyncKraftToZk = 6,
    /// 7: sending full UpdateMetadata / LeaderAndIsr to the ZooKeeper brokers.
    KraftControllerToBrokerComm = 7,
    /// 8: mirroring every committed KRaft change to ZooKeeper.
    DualWrite = 8,
}

/// A transition Kafka's table does not allow (a driver bug, never silently ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Invalid transition in migration driver from {from} to {to}")]
pub struct IllegalTransition {
    /// The current state.
    pub from: MigrationDriverState,
    /// The refused target.
    pub to: MigrationDriverState,
}

impl MigrationDriverState {
    /// Every state, in Kafka's order.
    pub const ALL: [Self; 9] = [
        Self::Uninitialized,
        Self::Inactive,
        Self::WaitForControllerQuorum,
        Self::WaitForBrokers,
        Self::BecomeController,
        Self::ZkMigration,
        Self::SyncKraftToZk,
        Self::KraftControllerToBrokerComm,
        Self::DualWrite,
    ];

    /// Kafka's name (`DUAL_WRITE`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Uninitialized => "UNINITIALIZED",
            Self::Inactive => "INACTIVE",
            Self::WaitForControllerQuorum => "WAIT_FOR_CONTROLLER_QUORUM",
            Self::WaitForBrokers => "WAIT_FOR_BROKERS",
            Self::BecomeController => "BECOME_CONTROLLER",
            Self::ZkMigration => "ZK_MIGRATION",
            Self::SyncKraftToZk => "SYNC_KRAFT_TO_ZK",
            Self::KraftControllerToBrokerComm => "KRAFT_CONTROLLER_TO_BROKER_COMM",
            Self::DualWrite => "DUAL_WRITE",
        }
    }

    /// Kafka's ordinal (0 = UNINITIALIZED … 8 = DUAL_WRITE).
    #[must_use]
    pub const fn value(self) -> i32 {
        self as i32
    }

    /// The state with Kafka's ordinal `value`.
    #[must_use]
    pub fn from_value(value: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.value() == value)
    }

    /// Whether metadata changes are mirrored to ZooKeeper in this state (Kafka's
    /// `allowDualWrite`): KRAFT_CONTROLLER_TO_BROKER_COMM and DUAL_WRITE.
    #[must_use]
    pub const fn allows_dual_write(self) -> bool {
        matches!(self, Self::KraftControllerToBrokerComm | Self::DualWrite)
    }

    /// Kafka's legal-transition table (facts §6.4): staying put is always allowed, nothing
    /// goes back to UNINITIALIZED.
    #[must_use]
    pub const fn can_transition_to(self, to: Self) -> bool {
        use MigrationDriverState as S;
        if self as i32 == to as i32 {
            return true;
        }
        match (self, to) {
            (_, S::Uninitialized) => false,
            (S::Uninitialized | S::DualWrite, S::Inactive) => true,
            (S::Inactive, S::WaitForControllerQuorum) => true,
            (S::WaitForControllerQuorum, S::Inactive | S::BecomeController | S::WaitForBrokers) => {
                true
            }
            (S::WaitForBrokers, S::Inactive | S::BecomeController) => true,
            (S::BecomeController, S::Inactive | S::ZkMigration | S::SyncKraftToZk) => true,
            (S::ZkMigration, S::Inactive | S::SyncKraftToZk) => true,
            (S::SyncKraftToZk, S::Inactive | S::KraftControllerToBrokerComm) => true,
            (S::KraftControllerToBrokerComm, S::Inactive | S::DualWrite) => true,
            _ => false,
        }
    }

    /// `to` if the table allows it.
    ///
    /// # Errors
    /// [`IllegalTransition`] otherwise.
    pub const fn transition_to(self, to: Self) -> Result<Self, IllegalTransition> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }
}

impl fmt::Display for MigrationDriverState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A KRaft log position, ordered as Kafka's `OffsetAndEpoch`: by epoch first, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetAndEpoch {
    /// The offset.
    pub offset: i64,
    /// The leader epoch of that offset.
    pub epoch: i32,
}

impl OffsetAndEpoch {
    /// A position.
    #[must_use]
    pub const fn new(offset: i64, epoch: i32) -> Self {
        Self { offset, epoch }
    }
}

impl PartialOrd for OffsetAndEpoch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OffsetAndEpoch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then(self.offset.cmp(&other.offset))
    }
}

impl fmt::Display for OffsetAndEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "OffsetAndEpoch(offset={}, epoch={})",
            self.offset, self.epoch
        )
    }
}

/// What the driver knows about the migration's leadership in ZooKeeper (Kafka's
/// `ZkMigrationLeadershipState`; facts §6.5): the `/migration` znode's content and version,
/// and the ZooKeeper controller epoch this KRaft controller claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZkMigrationLeadershipState {
    /// The KRaft controller that last wrote `/migration` (or the current KRaft leader).
    pub kraft_controller_id: i32,
    /// Its KRaft leader epoch.
    pub kraft_controller_epoch: i32,
    /// The highest KRaft offset already reflected in ZooKeeper; > 0 once the initial copy is done.
    pub kraft_metadata_offset: i64,
    /// The epoch of that offset.
    pub kraft_metadata_epoch: i32,
    /// `/migration`'s mtime (ms).
    pub last_updated_time_ms: i64,
    /// `/migration`'s version, which every fenced write checks ([`UNKNOWN_ZK_VERSION`] if unknown).
    pub migration_zk_version: i32,
    /// The ZooKeeper controller epoch this controller claimed (-1 if none).
    pub zk_controller_epoch: i32,
    /// `/controller_epoch`'s version after the claim ([`UNKNOWN_ZK_VERSION`] if unclaimed).
    pub zk_controller_epoch_zk_version: i32,
}

impl ZkMigrationLeadershipState {
    /// Nothing known: ids, epochs, offsets -1; versions [`UNKNOWN_ZK_VERSION`].
    pub const EMPTY: Self = Self {
        kraft_controller_id: -1,
        kraft_controller_epoch: -1,
        kraft_metadata_offset: -1,
        kraft_metadata_epoch: -1,
        last_updated_time_ms: -1,
        migration_zk_version: UNKNOWN_ZK_VERSION,
        zk_controller_epoch: -1,
        zk_controller_epoch_zk_version: UNKNOWN_ZK_VERSION,
    };

    /// Whether the initial ZooKeeper → KRaft copy has completed (offset > 0).
    #[must_use]
    pub const fn initial_migration_done(&self) -> bool {
        self.kraft_metadata_offset > 0
    }

    /// Whether this controller holds a ZooKeeper controller claim.
    #[must_use]
    pub const fn has_zk_controller(&self) -> bool {
        self.zk_controller_epoch_zk_version != UNKNOWN_ZK_VERSION
    }

    /// The KRaft position reflected in ZooKeeper.
    #[must_use]
    pub const fn offset_and_epoch(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.kraft_metadata_offset, self.kraft_metadata_epoch)
    }

    /// With a new KRaft controller.
    #[must_use]
    pub const fn with_new_kraft_controller(self, id: i32, epoch: i32) -> Self {
        Self {
            kraft_controller_id: id,
            kraft_controller_epoch: epoch,
            ..self
        }
    }

    /// With a new reflected KRaft position.
    #[must_use]
    pub const fn with_kraft_metadata_offset_and_epoch(self, offset: i64, epoch: i32) -> Self {
        Self {
            kraft_metadata_offset: offset,
            kraft_metadata_epoch: epoch,
            ..self
        }
    }

    /// With `/migration`'s version.
    #[must_use]
    pub const fn with_migration_zk_version(self, version: i32, mtime_ms: i64) -> Self {
        Self {
            migration_zk_version: version,
            last_updated_time_ms: mtime_ms,
            ..self
        }
    }

    /// With a claimed ZooKeeper controller epoch and `/controller_epoch`'s version.
    #[must_use]
    pub const fn with_zk_controller(self, epoch: i32, zk_version: i32) -> Self {
        Self {
            zk_controller_epoch: epoch,
            zk_controller_epoch_zk_version: zk_version,
            ..self
        }
    }

    /// Without a ZooKeeper controller claim.
    #[must_use]
    pub const fn with_unknown_zk_controller(self) -> Self {
        self.with_zk_controller(-1, UNKNOWN_ZK_VERSION)
    }

    /// The `/migration` JSON (version 0) for this state, Kafka's bytes
    /// ([`krust_zk::model::cluster::MigrationZNode`]).
    #[must_use]
    pub fn to_migration_json(&self) -> Vec<u8> {
        MigrationZNode {
            kraft_controller_id: self.kraft_controller_id,
            kraft_controller_epoch: self.kraft_controller_epoch,
            kraft_metadata_offset: self.kraft_metadata_offset,
            kraft_metadata_epoch: self.kraft_metadata_epoch,
        }
        .encode()
    }

    /// The state `/migration` holds (`data` read at `version` with `mtime_ms`); no ZooKeeper
    /// controller claim.
    ///
    /// # Errors
    /// [`ZnodeError`] naming `/migration` when the JSON is not Kafka's version 0.
    pub fn from_migration_json(
        data: &[u8],
        version: i32,
        mtime_ms: i64,
    ) -> Result<Self, ZnodeError> {
        let znode = MigrationZNode::decode(data)?;
        Ok(Self {
            kraft_controller_id: znode.kraft_controller_id,
            kraft_controller_epoch: znode.kraft_controller_epoch,
            kraft_metadata_offset: znode.kraft_metadata_offset,
            kraft_metadata_epoch: znode.kraft_metadata_epoch,
            last_updated_time_ms: mtime_ms,
            migration_zk_version: version,
            ..Self::EMPTY
        })
    }
}

impl Default for ZkMigrationLeadershipState {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Display for ZkMigrationLeadershipState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ZkMigrationLeadershipState{{kraftControllerId={}, kraftControllerEpoch={}, \
             kraftMetadataOffset={}, kraftMetadataEpoch={}, lastUpdatedTimeMs={}, \
             migrationZkVersion={}, controllerZkEpoch={}, controllerZkVersion={}}}",
            self.kraft_controller_id,
            self.kraft_controller_epoch,
            self.kraft_metadata_offset,
            self.kraft_metadata_epoch,
            self.last_updated_time_ms,
            self.migration_zk_version,
            self.zk_controller_epoch,
            self.zk_controller_epoch_zk_version
        )
    }
}

/// The `/controller` znode (facts §6.6), version 2 as written by a KRaft controller; a ZooKeeper
/// controller's (version 1, no `kraftControllerEpoch`) reads with `kraft_controller_epoch: None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerZnode {
    /// The controller's id (a ZooKeeper broker id or a KRaft node id).
    pub broker_id: i32,
    /// When it registered (ms).
    pub timestamp_ms: i64,
    /// The KRaft leader epoch of a KRaft controller; `None` (or -1 in the JSON) for a
    /// ZooKeeper controller.
    pub kraft_controller_epoch: Option<i32>,
}

impl ControllerZnode {
    /// Kafka's version-2 JSON: `{"version":2,"brokerid":…,"timestamp":"<ms>","kraftControllerEpoch":…}`.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        ControllerRegistration {
            broker_id: self.broker_id,
            timestamp_ms: self.timestamp_ms,
            kraft_controller_epoch: self.kraft_controller_epoch,
        }
        .encode()
    }

    /// Parses `/controller` (version 1 or 2).
    ///
    /// # Errors
    /// [`ZnodeError`] naming `/controller`.
    pub fn from_json(data: &[u8]) -> Result<Self, ZnodeError> {
        let znode = ControllerRegistration::decode(data)?;
        Ok(Self {
            broker_id: znode.broker_id,
            timestamp_ms: znode.timestamp_ms,
            kraft_controller_epoch: znode.kraft_controller_epoch,
        })
    }
}

/// `/controller_epoch`'s content: the epoch as UTF-8 decimal text.
#[must_use]
pub fn encode_controller_epoch(epoch: i32) -> Vec<u8> {
    controller_epoch::encode(epoch)
}

/// Parses `/controller_epoch`.
///
/// # Errors
/// [`ZnodeError`] naming `/controller_epoch`.
pub fn decode_controller_epoch(data: &[u8]) -> Result<i32, ZnodeError> {
    controller_epoch::decode(data)
}

/// A znode whose content is not what Kafka writes: krust-zk's model error, which names the
/// znode.
pub use krust_zk::model::ZNodeError as ZnodeError;

#[cfg(test)]
mod tests {
    use super::MigrationDriverState as S;
    use super::*;

    #[test]
    fn transition_table_is_kafkas() {
        let legal: &[(S, &[S])] = &[
            (S::Uninitialized, &[S::Inactive]),
            (S::Inactive, &[S::WaitForControllerQuorum]),
            (
                S::WaitForControllerQuorum,
                &[S::Inactive, S::BecomeController, S::WaitForBrokers],
            ),
            (S::WaitForBrokers, &[S::Inactive, S::BecomeController]),
            (
                S::BecomeController,
                &[S::Inactive, S::ZkMigration, S::SyncKraftToZk],
            ),
            (S::ZkMigration, &[S::Inactive, S::SyncKraftToZk]),
            (
                S::SyncKraftToZk,
                &[S::Inactive, S::KraftControllerToBrokerComm],
            ),
            (S::KraftControllerToBrokerComm, &[S::Inactive, S::DualWrite]),
            (S::DualWrite, &[S::Inactive]),
        ];
        for (from, tos) in legal {
            for to in S::ALL {
                let expected = to == *from || tos.contains(&to);
                assert_eq!(
                    from.can_transition_to(to),
                    expected,
                    "{from} -> {to} should be {}",
                    if expected { "legal" } else { "illegal" }
                );
                assert_eq!(from.transition_to(to).is_ok(), expected);
            }
        }
        assert_eq!(
            S::DualWrite.transition_to(S::SyncKraftToZk),
            Err(IllegalTransition {
                from: S::DualWrite,
                to: S::SyncKraftToZk
            })
        );
    }

    #[test]
    fn names_values_and_dual_write() {
        for (i, s) in S::ALL.into_iter().enumerate() {
            assert_eq!(s.value(), i32::try_from(i).expect("small"));
            assert_eq!(S::from_value(s.value()), Some(s));
            assert_eq!(
                s.allows_dual_write(),
                matches!(s, S::KraftControllerToBrokerComm | S::DualWrite)
            );
        }
        assert_eq!(
            S::KraftControllerToBrokerComm.name(),
            "KRAFT_CONTROLLER_TO_BROKER_COMM"
        );
        assert_eq!(S::from_value(9), None);
    }

    #[test]
    fn offset_and_epoch_orders_by_epoch_first() {
        assert!(OffsetAndEpoch::new(100, 1) < OffsetAndEpoch::new(5, 2));
        assert!(OffsetAndEpoch::new(5, 2) < OffsetAndEpoch::new(6, 2));
    }

    #[test]
    fn migration_json_round_trips() {
        let state = ZkMigrationLeadershipState::EMPTY
            .with_new_kraft_controller(3000, 7)
            .with_kraft_metadata_offset_and_epoch(1234, 7);
        let json = state.to_migration_json();
        assert_eq!(
            std::str::from_utf8(&json).expect("utf8"),
            // Kafka's bytes: the key order of its Scala `HashMap` (krust-zk's golden tests).
            r#"{"version":0,"kraft_metadata_offset":1234,"kraft_controller_id":3000,"kraft_metadata_epoch":7,"kraft_controller_epoch":7}"#
        );
        let back = ZkMigrationLeadershipState::from_migration_json(&json, 4, 99).expect("decodes");
        assert_eq!(back, state.with_migration_zk_version(4, 99));
        assert!(back.initial_migration_done());
        assert!(!ZkMigrationLeadershipState::EMPTY.initial_migration_done());
    }

    #[test]
    fn bad_znodes_are_typed_errors_naming_the_znode() {
        let cases: &[&[u8]] = &[
            b"",
            b"[1]",
            br#"{"version":1}"#,
            br#"{"version":0,"kraft_controller_id":1,"kraft_controller_epoch":1,"kraft_metadata_epoch":1}"#,
            br#"{"version":0,"kraft_controller_id":"x","kraft_controller_epoch":1,"kraft_metadata_offset":1,"kraft_metadata_epoch":1}"#,
        ];
        for data in cases {
            let error = ZkMigrationLeadershipState::from_migration_json(data, 0, 0)
                .expect_err(&String::from_utf8_lossy(data));
            assert_eq!(error.path(), MIGRATION_PATH, "{error}");
        }
        let version = ZkMigrationLeadershipState::from_migration_json(br#"{"version":1}"#, 0, 0)
            .expect_err("version 1");
        assert!(version.to_string().contains('1'), "{version}");
        let error = decode_controller_epoch(b"x1").expect_err("not a number");
        assert_eq!(error.path(), CONTROLLER_EPOCH_PATH);
        let error = ControllerZnode::from_json(b"{}").expect_err("no brokerid");
        assert_eq!(error.path(), CONTROLLER_PATH);
    }

    #[test]
    fn controller_znode_codec() {
        let kraft = ControllerZnode {
            broker_id: 3000,
            timestamp_ms: 17,
            kraft_controller_epoch: Some(5),
        };
        assert_eq!(ControllerZnode::from_json(&kraft.to_json()), Ok(kraft));
        let zk = ControllerZnode::from_json(br#"{"version":1,"brokerid":2,"timestamp":"1700"}"#)
            .expect("zk controller");
        assert_eq!(zk.kraft_controller_epoch, None);
        assert_eq!(zk.timestamp_ms, 1700);
        assert_eq!(decode_controller_epoch(b"17"), Ok(17));
        assert_eq!(encode_controller_epoch(18), b"18".to_vec());
    }
}
