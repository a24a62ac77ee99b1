//! Broker and controller registration, and broker unregistration (Kafka 3.9
//! `ClusterControlManager.registerBroker` / `registerController` and
//! `ReplicationControlManager.unregisterBroker`, facts §2.2).
//!
//! Each function validates a request against a [`ClusterView`] — what the cluster looks like
//! now, which the `QuorumController` answers from its `MetadataImage` — and returns the records
//! to append. Nothing here changes state: the records do, when replayed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_protocol::messages::{
    BrokerRegistrationRequest, ControllerRegistrationRequest, UnregisterBrokerRequest,
};
use krust_metadata::features::KRAFT_VERSION;
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::kafka_uuid::is_reserved_directory_id;
use krust_metadata::metadata_version::FEATURE_NAME as METADATA_VERSION;
use krust_metadata::records::{
    MetadataRecord, RegisterBrokerRecord, RegisterControllerRecord, RegistrationEndpoint,
    RegistrationFeature, UnregisterBrokerRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataVersion};
use tracing::{info, warn};
use uuid::Uuid;

use crate::error::ControllerError;
use crate::heartbeat::{BrokerHeartbeatManager, PartitionWork};

/// A broker as currently registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredBroker {
    /// Its broker epoch.
    pub broker_epoch: i64,
    /// The incarnation (process start) that registered it.
    pub incarnation_id: Uuid,
}

/// What registration needs to know about the cluster.
pub trait ClusterView {
    /// This cluster's id (`meta.properties`).
    fn cluster_id(&self) -> &str;
    /// The finalized `metadata.version`.
    fn metadata_version(&self) -> MetadataVersion;
    /// Finalized levels of the features other than `metadata.version` (levels > 0),
    /// `kraft.version` included.
    fn finalized_features(&self) -> BTreeMap<String, i16>;
    /// The cluster-wide ZooKeeper migration state.
    fn zk_migration_state(&self) -> ZkMigrationState;
    /// `zookeeper.metadata.migration.enable` on this controller.
    fn zk_migration_enabled(&self) -> bool;
    /// The current registration of `broker_id`.
    fn broker(&self, broker_id: i32) -> Option<RegisteredBroker>;
    /// The broker that registered `directory`, if any.
    fn directory_owner(&self, directory: Uuid) -> Option<i32>;
}

/// A [`ClusterView`] over a [`MetadataImage`] plus what the image does not hold.
#[derive(Debug, Clone, Copy)]
pub struct ImageClusterView<'a> {
    /// The image.
    pub image: &'a MetadataImage,
    /// `kraft.version` as the Raft layer has it (never in the image, yet a finalized feature
    /// brokers must support).
    pub kraft_version: i16,
    /// This cluster's id.
    pub cluster_id: &'a str,
    /// `zookeeper.metadata.migration.enable`.
    pub zk_migration_enabled: bool,
}

impl ClusterView for ImageClusterView<'_> {
    fn cluster_id(&self) -> &str {
        self.cluster_id
    }

    fn metadata_version(&self) -> MetadataVersion {
        self.image.features.metadata_version
    }

    fn finalized_features(&self) -> BTreeMap<String, i16> {
        let mut levels: BTreeMap<String, i16> = self
            .image
            .features
            .finalized_levels
            .iter()
            .map(|(name, level)| (name.clone(), *level))
            .collect();
        if self.kraft_version > 0 {
            levels.insert(KRAFT_VERSION.to_owned(), self.kraft_version);
        }
        levels
    }

    fn zk_migration_state(&self) -> ZkMigrationState {
        self.image.features.zk_migration_state
    }

    fn zk_migration_enabled(&self) -> bool {
        self.zk_migration_enabled
    }

    fn broker(&self, broker_id: i32) -> Option<RegisteredBroker> {
        self.image
            .cluster
            .broker(broker_id)
            .map(|b| RegisteredBroker {
                broker_epoch: b.epoch,
                incarnation_id: b.incarnation_id,
            })
    }

    fn directory_owner(&self, directory: Uuid) -> Option<i32> {
        self.image
            .cluster
            .brokers
            .values()
            .find(|b| b.directories.contains(&directory))
            .map(|b| b.id)
    }
}

/// A registration the controller accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationOutcome {
    /// The new broker epoch (the response's `BrokerEpoch`).
    pub broker_epoch: i64,
    /// The records: the `RegisterBrokerRecord`, last.
    pub records: Vec<ApiMessageAndVersion>,
    /// [`PartitionWork::RemoveBrokerBefore`] when a new incarnation replaces an old one and
    /// ELR is on (Kafka's unclean-shutdown cleanup, before the registration record).
    pub partition_work: PartitionWork,
}

/// Validates a BrokerRegistration and builds its
/// `RegisterBrokerRecord` with broker epoch `new_broker_epoch` (the offset it will be written
/// at, which the caller knows). The broker starts fenced.
///
/// # Errors
/// In Kafka's order: `INCONSISTENT_CLUSTER_ID`; `DUPLICATE_BROKER_REGISTRATION` when another
/// incarnation holds the id with a live session; `BROKER_ID_NOT_REGISTERED` for a ZooKeeper
/// broker without migration support, or a KRaft broker during PRE_MIGRATION;
/// `INVALID_REGISTRATION` for bad log directories (MV ≥ 3.7-IV2); `UNSUPPORTED_VERSION` when
/// the broker cannot run a finalized feature level.
pub fn register_broker(
    view: &impl ClusterView,
    sessions: &BrokerHeartbeatManager,
    now: Instant,
    request: &BrokerRegistrationRequest,
    new_broker_epoch: i64,
) -> Result<BrokerRegistrationOutcome, ControllerError> {
    let broker_id = request.broker_id.0;
    if view.cluster_id() != request.cluster_id.as_str() {
        return Err(ControllerError::InconsistentClusterId {
            expected: view.cluster_id().to_owned(),
            got: request.cluster_id.to_string(),
        });
    }
    let existing = view.broker(broker_id);
    if let Some(existing) = &existing
        && existing.incarnation_id != request.incarnation_id
        && sessions.has_valid_session(now, broker_id)
    {
        return Err(ControllerError::DuplicateBrokerRegistration {
            broker_id,
            registered_incarnation_id: existing.incarnation_id,
        });
    }
    let mv = view.metadata_version();
    if request.is_migrating_zk_broker
        && !(view.zk_migration_enabled() && mv.is_migration_supported())
    {
        return Err(ControllerError::BrokerIdNotRegistered {
            reason: "Controller does not support registering ZK brokers.".to_owned(),
        });
    }
    if !request.is_migrating_zk_broker
        && view.zk_migration_state() == ZkMigrationState::PreMigration
    {
        return Err(ControllerError::BrokerIdNotRegistered {
            reason: "Controller is in pre-migration mode and cannot register KRaft brokers until the metadata migration is complete.".to_owned(),
        });
    }
    let log_dirs = if mv.is_directory_assignment_supported() {
        check_log_dirs(view, broker_id, &request.log_dirs)?;
        request.log_dirs.clone()
    } else {
        Vec::new()
    };
    let features = check_features(view, mv, request)?;
    let mut records = Vec::new();
    let new_incarnation = existing
        .as_ref()
        .is_none_or(|e| e.incarnation_id != request.incarnation_id);
    let partition_work = if new_incarnation && existing.is_some() && mv.is_elr_supported() {
        PartitionWork::RemoveBrokerBefore
    } else {
        PartitionWork::None
    };
    let record = RegisterBrokerRecord {
        broker_id,
        is_migrating_zk_broker: request.is_migrating_zk_broker,
        incarnation_id: request.incarnation_id,
        broker_epoch: new_broker_epoch,
        end_points: request
            .listeners
            .iter()
            .map(|l| RegistrationEndpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
                unknown_tagged_fields: Vec::new(),
            })
            .collect(),
        features,
        rack: request.rack.as_ref().map(ToString::to_string),
        fenced: true,
        in_controlled_shutdown: false,
        log_dirs,
        unknown_tagged_fields: Vec::new(),
    };
    info!(
        broker_id,
        broker_epoch = new_broker_epoch,
        incarnation_id = %request.incarnation_id,
        replaces_epoch = existing.as_ref().map(|e| e.broker_epoch),
        "registering broker"
    );
    records.push(ApiMessageAndVersion::new(
        MetadataRecord::RegisterBroker(record),
        mv.register_broker_record_version(),
    ));
    Ok(BrokerRegistrationOutcome {
        broker_epoch: new_broker_epoch,
        records,
        partition_work,
    })
}

/// JBOD (KIP-858) checks: at least one directory, none reserved, no duplicates, none owned by
/// another broker.
fn check_log_dirs(
    view: &impl ClusterView,
    broker_id: i32,
    log_dirs: &[Uuid],
) -> Result<(), ControllerError> {
    let invalid = |reason: String| Err(ControllerError::InvalidRegistration { reason });
    if log_dirs.is_empty() {
        return invalid("No directories specified in request".to_owned());
    }
    if log_dirs.iter().any(is_reserved_directory_id) {
        return invalid("Reserved directory ID in request".to_owned());
    }
    if log_dirs.iter().collect::<BTreeSet<_>>().len() != log_dirs.len() {
        return invalid("Duplicate directory ID in request".to_owned());
    }
    for &directory in log_dirs {
        if let Some(owner) = view.directory_owner(directory)
            && owner != broker_id
        {
            return invalid(format!(
                "Broker {owner} is already registered with directory {}",
                krust_metadata::kafka_uuid::to_kafka_string(&directory)
            ));
        }
    }
    Ok(())
}

/// Every finalized level must be inside the broker's supported range. A broker that does not
/// list `metadata.version` is taken to support only 3.0-IV1, and an unlisted finalized
/// feature means range 0–0 (Kafka 3.9 brokers send BrokerRegistration v4, which lists features
/// whose minimum is 0 too; KAFKA-17011).
fn check_features(
    view: &impl ClusterView,
    mv: MetadataVersion,
    request: &BrokerRegistrationRequest,
) -> Result<Vec<RegistrationFeature>, ControllerError> {
    let finalized = view.finalized_features();
    let finalized_level = |name: &str| -> i16 {
        if name == METADATA_VERSION {
            mv.feature_level()
        } else {
            finalized.get(name).copied().unwrap_or(0)
        }
    };
    let check = |name: &str, min: i16, max: i16| -> Result<(), ControllerError> {
        let level = finalized_level(name);
        if (min..=max).contains(&level) {
            Ok(())
        } else {
            Err(ControllerError::UnsupportedFinalizedFeature {
                feature: name.to_owned(),
                finalized: level,
                min,
                max,
            })
        }
    };
    let mut features = Vec::with_capacity(request.features.len());
    for feature in &request.features {
        let name = feature.name.as_str();
        check(
            name,
            feature.min_supported_version,
            feature.max_supported_version,
        )?;
        if name != METADATA_VERSION && !finalized.contains_key(name) {
            warn!(
                feature = name,
                "broker supports a feature that is not finalized"
            );
        }
        features.push(RegistrationFeature {
            name: name.to_owned(),
            min_supported_version: feature.min_supported_version,
            max_supported_version: feature.max_supported_version,
            unknown_tagged_fields: Vec::new(),
        });
    }
    let listed = |name: &str| request.features.iter().any(|f| f.name.as_str() == name);
    if !listed(METADATA_VERSION) {
        let oldest = MetadataVersion::MINIMUM_KRAFT_VERSION.feature_level();
        check(METADATA_VERSION, oldest, oldest)?;
    }
    for name in finalized.keys().filter(|name| !listed(name)) {
        check(name, 0, 0)?;
    }
    Ok(features)
}

/// Builds the `RegisterControllerRecord` of a ControllerRegistration (KIP-919).
///
/// # Errors
/// `UNSUPPORTED_VERSION` ([`ControllerError::ControllerRegistrationNotSupported`]) before
/// metadata.version 3.7-IV0.
pub fn register_controller(
    metadata_version: MetadataVersion,
    request: &ControllerRegistrationRequest,
) -> Result<Vec<ApiMessageAndVersion>, ControllerError> {
    if !metadata_version.is_controller_registration_supported() {
        return Err(ControllerError::ControllerRegistrationNotSupported);
    }
    let record = RegisterControllerRecord {
        controller_id: request.controller_id,
        incarnation_id: request.incarnation_id,
        zk_migration_ready: request.zk_migration_ready,
        end_points: request
            .listeners
            .iter()
            .map(|l| RegistrationEndpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
                unknown_tagged_fields: Vec::new(),
            })
            .collect(),
        features: request
            .features
            .iter()
            .map(|f| RegistrationFeature {
                name: f.name.to_string(),
                min_supported_version: f.min_supported_version,
                max_supported_version: f.max_supported_version,
                unknown_tagged_fields: Vec::new(),
            })
            .collect(),
        unknown_tagged_fields: Vec::new(),
    };
    Ok(vec![ApiMessageAndVersion::new(
        MetadataRecord::RegisterController(record),
        0,
    )])
}

/// The `UnregisterBrokerRecord` of an UnregisterBroker request. The caller also applies
/// [`PartitionWork::RemoveBrokerBefore`] (Kafka's `handleBrokerUnregistered` takes the broker
/// out of every ISR first).
///
/// # Errors
/// `BROKER_ID_NOT_REGISTERED` when the broker is not registered.
pub fn unregister_broker(
    view: &impl ClusterView,
    request: &UnregisterBrokerRequest,
) -> Result<(Vec<ApiMessageAndVersion>, PartitionWork), ControllerError> {
    let broker_id = request.broker_id.0;
    let registered =
        view.broker(broker_id)
            .ok_or_else(|| ControllerError::BrokerIdNotRegistered {
                reason: format!("Broker ID {broker_id} is not currently registered"),
            })?;
    let record = UnregisterBrokerRecord {
        broker_id,
        broker_epoch: registered.broker_epoch,
        unknown_tagged_fields: Vec::new(),
    };
    Ok((
        vec![ApiMessageAndVersion::new(
            MetadataRecord::UnregisterBroker(record),
            0,
        )],
        PartitionWork::RemoveBrokerBefore,
    ))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
    use kafka_protocol::messages::{BrokerId, controller_registration_request};
    use kafka_protocol::protocol::StrBytes;
    use krust_metadata::records::BrokerRegistrationChangeRecord;

    use super::*;
    use crate::heartbeat::HeartbeatConfig;

    const CLUSTER: &str = "MkU3OEVBNTcwNTJENDM2Qk";

    struct TestCluster {
        mv: MetadataVersion,
        finalized: BTreeMap<String, i16>,
        zk_state: ZkMigrationState,
        zk_enabled: bool,
        brokers: BTreeMap<i32, (RegisteredBroker, Vec<Uuid>)>,
    }

    impl TestCluster {
        fn new(mv: MetadataVersion) -> Self {
            Self {
                mv,
                finalized: BTreeMap::new(),
                zk_state: ZkMigrationState::None,
                zk_enabled: false,
                brokers: BTreeMap::new(),
            }
        }
    }

    impl ClusterView for TestCluster {
        fn cluster_id(&self) -> &str {
            CLUSTER
        }
        fn metadata_version(&self) -> MetadataVersion {
            self.mv
        }
        fn finalized_features(&self) -> BTreeMap<String, i16> {
            self.finalized.clone()
        }
        fn zk_migration_state(&self) -> ZkMigrationState {
            self.zk_state
        }
        fn zk_migration_enabled(&self) -> bool {
            self.zk_enabled
        }
        fn broker(&self, broker_id: i32) -> Option<RegisteredBroker> {
            self.brokers.get(&broker_id).map(|(b, _)| b.clone())
        }
        fn directory_owner(&self, directory: Uuid) -> Option<i32> {
            self.brokers
                .iter()
                .find(|(_, (_, dirs))| dirs.contains(&directory))
                .map(|(&id, _)| id)
        }
    }

    fn dir(n: u64) -> Uuid {
        Uuid::from_u64_pair(0xABCD, n)
    }

    fn request(broker_id: i32, incarnation: u64) -> BrokerRegistrationRequest {
        BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_cluster_id(StrBytes::from_static_str(CLUSTER))
            .with_incarnation_id(Uuid::from_u64_pair(1, incarnation))
            .with_listeners(vec![
                Listener::default()
                    .with_name(StrBytes::from_static_str("PLAINTEXT"))
                    .with_host(StrBytes::from_static_str("localhost"))
                    .with_port(9092)
                    .with_security_protocol(0),
            ])
            .with_features(vec![
                Feature::default()
                    .with_name(StrBytes::from_static_str("metadata.version"))
                    .with_min_supported_version(1)
                    .with_max_supported_version(21),
            ])
            .with_rack(Some(StrBytes::from_static_str("rack-a")))
            .with_log_dirs(vec![dir(u64::try_from(broker_id).unwrap_or(0) + 100)])
    }

    fn sessions() -> BrokerHeartbeatManager {
        BrokerHeartbeatManager::new(HeartbeatConfig::default())
    }

    fn register_record(outcome: &BrokerRegistrationOutcome) -> (&RegisterBrokerRecord, i16) {
        match &outcome.records.last().expect("a record").record {
            MetadataRecord::RegisterBroker(r) => (r, outcome.records[0].version),
            other => panic!("expected RegisterBrokerRecord, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_registration_becomes_a_fenced_register_broker_record() {
        let cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        let now = Instant::now();
        let outcome =
            register_broker(&cluster, &sessions(), now, &request(1, 1), 42).expect("valid");
        assert_eq!(outcome.broker_epoch, 42);
        assert_eq!(outcome.partition_work, PartitionWork::None);
        let (record, version) = register_record(&outcome);
        assert_eq!(version, 3, "RegisterBrokerRecord v3 from 3.7-IV2");
        assert_eq!((record.broker_id, record.broker_epoch), (1, 42));
        assert!(record.fenced && !record.in_controlled_shutdown);
        assert_eq!(record.rack.as_deref(), Some("rack-a"));
        assert_eq!(record.end_points[0].name, "PLAINTEXT");
        assert_eq!(record.end_points[0].port, 9092);
        assert_eq!(record.features[0].max_supported_version, 21);
        assert_eq!(record.log_dirs, vec![dir(101)]);
        outcome.records[0]
            .encode()
            .expect("encodable at its version");
    }

    #[test]
    fn record_versions_follow_the_metadata_version() {
        let cases = [
            (
                MetadataVersion::IBP_3_3_IV2,
                0,
                "before InControlledShutdown",
            ),
            (MetadataVersion::IBP_3_3_IV3, 1, "InControlledShutdown"),
            (MetadataVersion::IBP_3_4_IV0, 2, "IsMigratingZkBroker"),
            (
                MetadataVersion::IBP_3_7_IV1,
                2,
                "no JBOD yet: log dirs dropped",
            ),
            (MetadataVersion::IBP_3_7_IV2, 3, "LogDirs"),
        ];
        for (mv, expected, why) in cases {
            let cluster = TestCluster::new(mv);
            let outcome = register_broker(&cluster, &sessions(), Instant::now(), &request(1, 1), 7)
                .expect(why);
            let (record, version) = register_record(&outcome);
            assert_eq!(version, expected, "{why}");
            assert_eq!(record.log_dirs.is_empty(), expected < 3, "{why}");
            outcome.records[0].encode().expect(why);
        }
    }

    #[test]
    fn another_cluster_id_is_refused() {
        let cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        let bad = request(1, 1).with_cluster_id(StrBytes::from_static_str("other"));
        let err = register_broker(&cluster, &sessions(), Instant::now(), &bad, 1).expect_err("id");
        assert_eq!(err.code(), 104);
        assert_eq!(
            err.to_string(),
            format!("Expected cluster ID {CLUSTER}, but got cluster ID other")
        );
    }

    /// Another incarnation may take over an id only once the old one's session is gone.
    #[test]
    fn a_live_broker_id_is_not_taken_by_another_incarnation() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        cluster.brokers.insert(
            1,
            (
                RegisteredBroker {
                    broker_epoch: 10,
                    incarnation_id: Uuid::from_u64_pair(1, 1),
                },
                vec![dir(101)],
            ),
        );
        let t0 = Instant::now();
        let mut live = sessions();
        let first = register_broker(
            &TestCluster::new(MetadataVersion::IBP_3_9_IV0),
            &live,
            t0,
            &request(1, 1),
            10,
        )
        .expect("first registration");
        let records = first.records;
        live.replay(t0, &records[0].record, 10);
        live.replay(
            t0,
            &MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id: 1,
                broker_epoch: 10,
                fenced: -1,
                ..BrokerRegistrationChangeRecord::default()
            }),
            11,
        );
        live.activate(t0);

        let err = register_broker(&cluster, &live, t0, &request(1, 2), 20).expect_err("dup");
        assert_eq!(err.code(), 101);
        // The same incarnation re-registering (e.g. after a controller failover) is fine.
        register_broker(&cluster, &live, t0, &request(1, 1), 20).expect("same incarnation");
        // Once the session has expired, the new incarnation wins.
        let later = t0 + std::time::Duration::from_secs(9);
        register_broker(&cluster, &live, later, &request(1, 2), 30).expect("session expired");
        // A fenced broker has no session to protect.
        register_broker(&cluster, &sessions(), t0, &request(1, 2), 30).expect("no session");
    }

    #[test]
    fn a_new_incarnation_with_elr_cleans_up_partitions_first() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_4_0_IV0);
        cluster.brokers.insert(
            1,
            (
                RegisteredBroker {
                    broker_epoch: 10,
                    incarnation_id: Uuid::from_u64_pair(1, 1),
                },
                vec![dir(101)],
            ),
        );
        let with_mv22 = request(1, 2).with_features(vec![
            Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(1)
                .with_max_supported_version(23),
        ]);
        let outcome =
            register_broker(&cluster, &sessions(), Instant::now(), &with_mv22, 30).expect("ok");
        assert_eq!(outcome.partition_work, PartitionWork::RemoveBrokerBefore);
    }

    #[test]
    fn finalized_levels_outside_the_brokers_range_are_refused() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        let too_old = request(1, 1).with_features(vec![
            Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(1)
                .with_max_supported_version(20),
        ]);
        let err = register_broker(&cluster, &sessions(), Instant::now(), &too_old, 1)
            .expect_err("MV 21 > 20");
        assert_eq!(err.code(), 35);
        assert_eq!(
            err.to_string(),
            "Unable to register because the broker does not support finalized version 21 of metadata.version. The broker wants a version between 1 and 20, inclusive."
        );

        let silent = request(1, 1).with_features(Vec::new());
        let err = register_broker(&cluster, &sessions(), Instant::now(), &silent, 1)
            .expect_err("no metadata.version listed: 3.0-IV1 only");
        assert_eq!(err.code(), 35);
        register_broker(
            &TestCluster::new(MetadataVersion::IBP_3_0_IV1),
            &sessions(),
            Instant::now(),
            &silent,
            1,
        )
        .expect("3.0-IV1 cluster");

        cluster.finalized.insert("kraft.version".into(), 1);
        let err = register_broker(&cluster, &sessions(), Instant::now(), &request(1, 1), 1)
            .expect_err("unlisted kraft.version means 0-0");
        assert_eq!(err.code(), 35);
        let listing = request(1, 1).with_features(vec![
            Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(1)
                .with_max_supported_version(21),
            Feature::default()
                .with_name(StrBytes::from_static_str("kraft.version"))
                .with_min_supported_version(0)
                .with_max_supported_version(1),
        ]);
        register_broker(&cluster, &sessions(), Instant::now(), &listing, 1).expect("in range");
    }

    #[test]
    fn bad_log_dirs_are_invalid_registrations() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        cluster.brokers.insert(
            2,
            (
                RegisteredBroker {
                    broker_epoch: 5,
                    incarnation_id: Uuid::from_u64_pair(9, 9),
                },
                vec![dir(7)],
            ),
        );
        let cases: [(&str, Vec<Uuid>, &str); 4] = [
            ("none", vec![], "No directories specified in request"),
            (
                "reserved",
                vec![Uuid::from_u64_pair(0, 2)],
                "Reserved directory ID in request",
            ),
            (
                "twice",
                vec![dir(1), dir(1)],
                "Duplicate directory ID in request",
            ),
            (
                "taken",
                vec![dir(7)],
                "Broker 2 is already registered with directory",
            ),
        ];
        for (why, dirs, message) in cases {
            let err = register_broker(
                &cluster,
                &sessions(),
                Instant::now(),
                &request(1, 1).with_log_dirs(dirs),
                1,
            )
            .expect_err(why);
            assert_eq!(err.code(), 119, "{why}");
            assert!(err.to_string().starts_with(message), "{why}: {err}");
        }
        // Its own directory again (a restart) is fine.
        let own = request(2, 9).with_log_dirs(vec![dir(7)]);
        register_broker(&cluster, &sessions(), Instant::now(), &own, 1).expect("own dir");
    }

    #[test]
    fn zk_migration_rules_gate_who_may_register() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        let zk = request(1, 1).with_is_migrating_zk_broker(true);
        let err = register_broker(&cluster, &sessions(), Instant::now(), &zk, 1)
            .expect_err("no migration");
        assert_eq!(err.code(), 102);
        cluster.zk_enabled = true;
        cluster.zk_state = ZkMigrationState::PreMigration;
        let outcome =
            register_broker(&cluster, &sessions(), Instant::now(), &zk, 1).expect("zk broker");
        assert!(register_record(&outcome).0.is_migrating_zk_broker);
        let err = register_broker(&cluster, &sessions(), Instant::now(), &request(2, 1), 1)
            .expect_err("KRaft broker in pre-migration");
        assert_eq!(err.code(), 102);
    }

    #[test]
    fn controller_registration_needs_3_7_iv0() {
        let request = ControllerRegistrationRequest::default()
            .with_controller_id(3000)
            .with_incarnation_id(Uuid::from_u64_pair(5, 5))
            .with_zk_migration_ready(true)
            .with_listeners(vec![
                controller_registration_request::Listener::default()
                    .with_name(StrBytes::from_static_str("CONTROLLER"))
                    .with_host(StrBytes::from_static_str("localhost"))
                    .with_port(9093),
            ])
            .with_features(vec![
                controller_registration_request::Feature::default()
                    .with_name(StrBytes::from_static_str("metadata.version"))
                    .with_min_supported_version(1)
                    .with_max_supported_version(21),
            ]);
        let err = register_controller(MetadataVersion::IBP_3_6_IV2, &request).expect_err("old MV");
        assert_eq!(err.code(), 35);
        let records = register_controller(MetadataVersion::IBP_3_7_IV0, &request).expect("ok");
        match &records[0].record {
            MetadataRecord::RegisterController(r) => {
                assert_eq!((r.controller_id, r.zk_migration_ready), (3000, true));
                assert_eq!(r.end_points[0].name, "CONTROLLER");
                assert_eq!(r.features[0].max_supported_version, 21);
            }
            other => panic!("unexpected {other:?}"),
        }
        records[0].encode().expect("encodable");
    }

    #[test]
    fn unregistering_writes_the_current_epoch_or_refuses_unknown_ids() {
        let mut cluster = TestCluster::new(MetadataVersion::IBP_3_9_IV0);
        let request = UnregisterBrokerRequest::default().with_broker_id(BrokerId(4));
        let err = unregister_broker(&cluster, &request).expect_err("unknown");
        assert_eq!(err.code(), 102);
        assert_eq!(err.to_string(), "Broker ID 4 is not currently registered");
        cluster.brokers.insert(
            4,
            (
                RegisteredBroker {
                    broker_epoch: 77,
                    incarnation_id: Uuid::nil(),
                },
                vec![],
            ),
        );
        let (records, work) = unregister_broker(&cluster, &request).expect("registered");
        assert_eq!(work, PartitionWork::RemoveBrokerBefore);
        assert!(
            matches!(&records[0].record, MetadataRecord::UnregisterBroker(r) if r.broker_id == 4 && r.broker_epoch == 77)
        );
    }

    #[test]
    fn the_image_view_answers_from_a_metadata_image() {
        let image = MetadataImage::empty();
        let view = ImageClusterView {
            image: &image,
            cluster_id: CLUSTER,
            kraft_version: 0,
            zk_migration_enabled: false,
        };
        assert_eq!(view.metadata_version(), MetadataVersion::IBP_3_0_IV1);
        assert!(view.broker(1).is_none());
        let outcome = register_broker(&view, &sessions(), Instant::now(), &request(1, 1), 3)
            .expect("3.0-IV1 cluster, broker supports 1-21");
        assert_eq!(register_record(&outcome).1, 0);
    }
}
