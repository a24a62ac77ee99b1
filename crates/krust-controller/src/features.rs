//! UpdateFeatures: which finalized feature levels may change, and the `FeatureLevelRecord`s
//! that change them (Kafka 3.9 `FeatureControlManager.updateFeatures` and `QuorumFeatures`,
//! facts §5).
//!
//! Per feature, in Kafka's order: a known upgrade type; a level ≥ 0; a level this controller,
//! every registered broker and (from metadata.version 3.7-IV0) every registered controller
//! supports; no downgrade unless asked for, and no "downgrade" to a higher level; then for `metadata.version`: not during a ZooKeeper
//! migration, not below 3.3-IV0, and a downgrade only when no version crossed changed the
//! metadata format (an "unsafe" downgrade is refused, as in Kafka 3.9). Every refusal is
//! `INVALID_UPDATE_VERSION`. Features are decided independently: the records of the accepted
//! ones are written together, as one atomic batch.

use std::collections::BTreeMap;

use kafka_protocol::messages::UpdateFeaturesRequest;
use krust_metadata::features::Feature;
use krust_metadata::image::cluster::{ClusterImage, VersionRange};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::metadata_version::FEATURE_NAME as METADATA_VERSION;
use krust_metadata::records::{FeatureLevelRecord, MetadataRecord};
use krust_metadata::{ApiMessageAndVersion, MetadataVersion};
use tracing::warn;

use crate::error::ControllerError;

/// `FeatureUpdate.UpgradeType` (UpdateFeatures v1 `UpgradeType`; v0's `AllowDowngrade`
/// means [`UpgradeType::SafeDowngrade`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeType {
    /// 1: only upgrades.
    Upgrade,
    /// 2: downgrades that lose no metadata.
    SafeDowngrade,
    /// 3: any downgrade (refused for metadata.version in Kafka 3.9).
    UnsafeDowngrade,
    /// Any other code.
    Unknown(i8),
}

impl UpgradeType {
    /// The type a request entry asks for, by request version.
    #[must_use]
    pub fn from_request(request_version: i16, allow_downgrade: bool, upgrade_type: i8) -> Self {
        if request_version == 0 {
            return if allow_downgrade {
                Self::SafeDowngrade
            } else {
                Self::Upgrade
            };
        }
        match upgrade_type {
            1 => Self::Upgrade,
            2 => Self::SafeDowngrade,
            3 => Self::UnsafeDowngrade,
            other => Self::Unknown(other),
        }
    }
}

/// The feature ranges a node registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFeatures {
    /// Node id.
    pub node_id: i32,
    /// Supported ranges by feature name (absent = not supported, i.e. 0–0).
    pub supported: BTreeMap<String, VersionRange>,
}

impl NodeFeatures {
    /// Every registered broker's ranges, from the cluster image.
    #[must_use]
    pub fn brokers_of(cluster: &ClusterImage) -> Vec<Self> {
        cluster
            .brokers
            .values()
            .map(|b| Self {
                node_id: b.id,
                supported: b.supported_features.clone(),
            })
            .collect()
    }

    /// Every registered controller's ranges, from the cluster image.
    #[must_use]
    pub fn controllers_of(cluster: &ClusterImage) -> Vec<Self> {
        cluster
            .controllers
            .values()
            .map(|c| Self {
                node_id: c.id,
                supported: c.supported_features.clone(),
            })
            .collect()
    }
}

/// What feature updates are checked against.
#[derive(Debug, Clone)]
pub struct FeatureContext<'a> {
    /// The finalized metadata.version.
    pub metadata_version: MetadataVersion,
    /// Finalized levels of the other features (absent = 0).
    pub finalized: &'a BTreeMap<String, i16>,
    /// The cluster-wide ZooKeeper migration state.
    pub zk_migration_state: ZkMigrationState,
    /// This controller's node id.
    pub local_controller_id: i32,
    /// `unstable.feature.versions.enable` on this controller.
    pub unstable_feature_versions_enable: bool,
    /// Every registered broker.
    pub brokers: &'a [NodeFeatures],
    /// Every registered controller (consulted from metadata.version 3.7-IV0).
    pub controllers: &'a [NodeFeatures],
}

/// The outcome of one UpdateFeatures request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUpdateOutcome {
    /// Per feature: accepted, or why not.
    pub results: BTreeMap<String, Result<(), ControllerError>>,
    /// `FeatureLevelRecord`s of the accepted features (none when `validate_only`); one
    /// atomic batch.
    pub records: Vec<ApiMessageAndVersion>,
}

/// Validates every update of `request` (UpdateFeatures version `request_version`).
#[must_use]
pub fn update_features(
    context: &FeatureContext<'_>,
    request: &UpdateFeaturesRequest,
    request_version: i16,
) -> FeatureUpdateOutcome {
    // A later entry for the same feature replaces an earlier one, as Kafka's map does.
    let mut updates: BTreeMap<String, (i16, UpgradeType)> = BTreeMap::new();
    for update in &request.feature_updates {
        updates.insert(
            update.feature.to_string(),
            (
                update.max_version_level,
                UpgradeType::from_request(
                    request_version,
                    update.allow_downgrade,
                    update.upgrade_type,
                ),
            ),
        );
    }
    let mut results = BTreeMap::new();
    let mut records = Vec::new();
    for (name, (level, upgrade_type)) in updates {
        let result = update_feature(context, &name, level, upgrade_type);
        match &result {
            Ok(()) => records.push(ApiMessageAndVersion::new(
                MetadataRecord::FeatureLevel(FeatureLevelRecord::new(name.clone(), level)),
                // FeatureLevelRecord stays at version 0 forever (read before the MV is known).
                0,
            )),
            Err(error) => warn!(feature = %name, level, %error, "feature update refused"),
        }
        results.insert(name, result);
    }
    if request.validate_only {
        records.clear();
    }
    FeatureUpdateOutcome { results, records }
}

fn update_feature(
    context: &FeatureContext<'_>,
    name: &str,
    level: i16,
    upgrade_type: UpgradeType,
) -> Result<(), ControllerError> {
    let invalid = |reason: &str| {
        Err(ControllerError::InvalidUpdateVersion {
            feature: name.to_owned(),
            level,
            reason: reason.to_owned(),
        })
    };
    if let UpgradeType::Unknown(_) = upgrade_type {
        return invalid("The controller does not support the given upgrade type.");
    }
    let current = if name == METADATA_VERSION {
        context.metadata_version.feature_level()
    } else {
        context.finalized.get(name).copied().unwrap_or(0)
    };
    if level < 0 {
        return invalid("A feature version cannot be less than 0.");
    }
    if let Some(reason) = reason_not_supported(context, name, level) {
        return invalid(&reason);
    }
    if level < current && upgrade_type == UpgradeType::Upgrade {
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.",
        );
    }
    if level > current && upgrade_type != UpgradeType::Upgrade {
        return invalid("Can't downgrade to a newer version.");
    }
    if name == METADATA_VERSION {
        return update_metadata_version(context, level, upgrade_type);
    }
    match Feature::from_name(name) {
        Some(Feature::TransactionVersion) => Ok(()),
        // Kafka 3.9 never stores kraft.version in a FeatureLevelRecord: the KRaft layer owns
        // it (KIP-853), and 3.9 has no way to change it after format.
        Some(Feature::KRaftVersion) if level == current => Ok(()),
        Some(Feature::KRaftVersion) => invalid(
            "kraft.version is managed by the KRaft layer and cannot be changed by UpdateFeatures.",
        ),
        // Unknown to this controller: only level 0 got past the support checks, and a level-0
        // record is a no-op removal, which Kafka writes too.
        None => Ok(()),
    }
}

/// Kafka's `QuorumFeatures.reasonNotSupported`: this controller, then every broker, then (from
/// 3.7-IV0) every other registered controller.
fn reason_not_supported(context: &FeatureContext<'_>, name: &str, level: i16) -> Option<String> {
    let local = local_supported_range(name, context.unstable_feature_versions_enable);
    if let Some(reason) = range_reason(
        &format!("Local controller {}", context.local_controller_id),
        local,
        level,
    ) {
        return Some(reason);
    }
    let disabled = VersionRange { min: 0, max: 0 };
    for broker in context.brokers {
        let range = broker.supported.get(name).copied().unwrap_or(disabled);
        if let Some(reason) = range_reason(&format!("Broker {}", broker.node_id), range, level) {
            return Some(reason);
        }
    }
    if context
        .metadata_version
        .is_controller_registration_supported()
    {
        for controller in context
            .controllers
            .iter()
            .filter(|c| c.node_id != context.local_controller_id)
        {
            let range = controller.supported.get(name).copied().unwrap_or(disabled);
            let who = format!("Controller {}", controller.node_id);
            if let Some(reason) = range_reason(&who, range, level) {
                return Some(reason);
            }
        }
    }
    None
}

fn range_reason(who: &str, range: VersionRange, level: i16) -> Option<String> {
    if (range.min..=range.max).contains(&level) {
        None
    } else if range.max == 0 {
        Some(format!("{who} does not support this feature."))
    } else {
        Some(format!(
            "{who} only supports versions {}-{}",
            range.min, range.max
        ))
    }
}

/// What this controller build supports: metadata.version from 3.0-IV1 to the latest
/// production (or testing, with `unstable.feature.versions.enable`) version; the other known
/// features from 0 to their latest level; unknown features not at all.
fn local_supported_range(name: &str, unstable: bool) -> VersionRange {
    if name == METADATA_VERSION {
        let latest = if unstable {
            MetadataVersion::LATEST_TESTING
        } else {
            MetadataVersion::LATEST_PRODUCTION
        };
        return VersionRange {
            min: MetadataVersion::MINIMUM_KRAFT_VERSION.feature_level(),
            max: latest.feature_level(),
        };
    }
    match Feature::from_name(name) {
        Some(feature) => VersionRange {
            min: 0,
            max: if unstable {
                feature.default_level(MetadataVersion::LATEST_TESTING)
            } else {
                feature.latest_production()
            },
        },
        None => VersionRange { min: 0, max: 0 },
    }
}

/// Kafka's `updateMetadataVersion`.
fn update_metadata_version(
    context: &FeatureContext<'_>,
    level: i16,
    upgrade_type: UpgradeType,
) -> Result<(), ControllerError> {
    let invalid = |reason: String| Err(ControllerError::InvalidMetadataVersion { level, reason });
    if context.zk_migration_state.in_progress() {
        return invalid(
            "Unable to modify metadata.version while a ZK migration is in progress.".to_owned(),
        );
    }
    let current = context.metadata_version;
    let Ok(target) = MetadataVersion::from_feature_level(level) else {
        return invalid(format!(
            "Valid versions are from {} to {}.",
            MetadataVersion::MINIMUM_BOOTSTRAP_VERSION.feature_level(),
            MetadataVersion::LATEST_TESTING.feature_level()
        ));
    };
    if target < MetadataVersion::MINIMUM_BOOTSTRAP_VERSION {
        return invalid(format!(
            "Unable to set a metadata.version less than {}",
            MetadataVersion::MINIMUM_BOOTSTRAP_VERSION.version()
        ));
    }
    if target < current {
        if !metadata_changed_between(target, current) {
            warn!(from = %current.version(), to = %target.version(), "downgrading metadata.version");
        } else if upgrade_type == UpgradeType::UnsafeDowngrade {
            return invalid(
                "Unsafe metadata downgrade is not supported in this version.".to_owned(),
            );
        } else {
            return invalid(
                "Refusing to perform the requested downgrade because it might delete metadata information."
                    .to_owned(),
            );
        }
    } else {
        warn!(from = %current.version(), to = %target.version(), "upgrading metadata.version");
    }
    Ok(())
}

/// Kafka's `MetadataVersion.checkIfMetadataChanged` for `low < high`: whether any version in
/// `(low, high]` changed the metadata format.
fn metadata_changed_between(low: MetadataVersion, high: MetadataVersion) -> bool {
    MetadataVersion::all()
        .filter(|v| *v > low && *v <= high)
        .any(MetadataVersion::did_metadata_change)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn node(node_id: i32, ranges: &[(&str, i16, i16)]) -> NodeFeatures {
        NodeFeatures {
            node_id,
            supported: ranges
                .iter()
                .map(|&(name, min, max)| (name.to_owned(), VersionRange { min, max }))
                .collect(),
        }
    }

    fn update(name: &'static str, level: i16, upgrade_type: i8) -> FeatureUpdateKey {
        FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str(name))
            .with_max_version_level(level)
            .with_upgrade_type(upgrade_type)
    }

    fn request(updates: Vec<FeatureUpdateKey>) -> UpdateFeaturesRequest {
        UpdateFeaturesRequest::default().with_feature_updates(updates)
    }

    struct Cluster {
        mv: MetadataVersion,
        finalized: BTreeMap<String, i16>,
        zk: ZkMigrationState,
        brokers: Vec<NodeFeatures>,
        controllers: Vec<NodeFeatures>,
    }

    impl Cluster {
        fn at(mv: MetadataVersion) -> Self {
            let all = [("metadata.version", 1, 21), ("transaction.version", 0, 2)];
            Self {
                mv,
                finalized: BTreeMap::new(),
                zk: ZkMigrationState::None,
                brokers: vec![node(1, &all), node(2, &all)],
                controllers: vec![node(3000, &all), node(3001, &all)],
            }
        }

        fn run(&self, request: &UpdateFeaturesRequest) -> FeatureUpdateOutcome {
            let context = FeatureContext {
                metadata_version: self.mv,
                finalized: &self.finalized,
                zk_migration_state: self.zk,
                local_controller_id: 3000,
                unstable_feature_versions_enable: false,
                brokers: &self.brokers,
                controllers: &self.controllers,
            };
            update_features(&context, request, 1)
        }

        fn one(
            &self,
            name: &'static str,
            level: i16,
            upgrade_type: i8,
        ) -> Result<(), ControllerError> {
            let outcome = self.run(&request(vec![update(name, level, upgrade_type)]));
            outcome.results[name].clone()
        }
    }

    fn levels(outcome: &FeatureUpdateOutcome) -> Vec<(String, i16, i16)> {
        outcome
            .records
            .iter()
            .map(|r| match &r.record {
                MetadataRecord::FeatureLevel(f) => (f.name.clone(), f.feature_level, r.version),
                other => panic!("expected FeatureLevelRecord, got {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_metadata_version_upgrade_writes_one_feature_level_record() {
        let cluster = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        let outcome = cluster.run(&request(vec![update("metadata.version", 21, 1)]));
        assert_eq!(outcome.results["metadata.version"], Ok(()));
        assert_eq!(
            levels(&outcome),
            vec![("metadata.version".to_owned(), 21, 0)]
        );
        outcome.records[0].encode().expect("encodable");
    }

    #[test]
    fn validate_only_checks_but_writes_nothing() {
        let cluster = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        let outcome =
            cluster.run(&request(vec![update("metadata.version", 21, 1)]).with_validate_only(true));
        assert_eq!(outcome.results["metadata.version"], Ok(()));
        assert!(outcome.records.is_empty());
    }

    /// Table of refusals: each case says why, and all are INVALID_UPDATE_VERSION.
    #[test]
    fn refused_updates_are_invalid_update_version() {
        let base = Cluster::at(MetadataVersion::IBP_3_9_IV0);
        let mut old_broker = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        old_broker.brokers[1] = node(2, &[("metadata.version", 1, 19)]);
        let mut old_controller = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        old_controller.controllers[1] = node(3001, &[("metadata.version", 1, 19)]);
        let mut migrating = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        migrating.zk = ZkMigrationState::Migration;
        let cases: [(&str, &Cluster, &'static str, i16, i8, &str); 13] = [
            (
                "safe downgrade to a newer version",
                &old_broker,
                "metadata.version",
                19,
                2,
                "Can't downgrade to a newer version.",
            ),
            (
                "unsafe downgrade to a newer version",
                &old_broker,
                "metadata.version",
                19,
                3,
                "Can't downgrade to a newer version.",
            ),
            (
                "unknown upgrade type",
                &base,
                "metadata.version",
                21,
                9,
                "The controller does not support the given upgrade type.",
            ),
            (
                "negative level",
                &base,
                "transaction.version",
                -1,
                1,
                "A feature version cannot be less than 0.",
            ),
            (
                "unknown feature",
                &base,
                "no.such.feature",
                1,
                1,
                "Local controller 3000 does not support this feature.",
            ),
            (
                "unstable metadata.version",
                &base,
                "metadata.version",
                22,
                1,
                "Local controller 3000 only supports versions 1-21",
            ),
            (
                "a broker too old",
                &old_broker,
                "metadata.version",
                21,
                1,
                "Broker 2 only supports versions 1-19",
            ),
            (
                "a controller too old",
                &old_controller,
                "metadata.version",
                21,
                1,
                "Controller 3001 only supports versions 1-19",
            ),
            (
                "downgrade asked as upgrade",
                &base,
                "metadata.version",
                20,
                1,
                "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.",
            ),
            (
                "lossy safe downgrade",
                &base,
                "metadata.version",
                14,
                2,
                "Refusing to perform the requested downgrade because it might delete metadata information.",
            ),
            (
                "unsafe downgrade",
                &base,
                "metadata.version",
                14,
                3,
                "Unsafe metadata downgrade is not supported in this version.",
            ),
            (
                "below 3.3-IV0",
                &base,
                "metadata.version",
                3,
                2,
                "Unable to set a metadata.version less than 3.3-IV0",
            ),
            (
                "during a ZK migration",
                &migrating,
                "metadata.version",
                21,
                1,
                "Unable to modify metadata.version while a ZK migration is in progress.",
            ),
        ];
        for (why, cluster, name, level, upgrade_type, reason) in cases {
            let err = cluster.one(name, level, upgrade_type).expect_err(why);
            assert_eq!(err.code(), 95, "{why}");
            assert!(err.to_string().ends_with(reason), "{why}: {err}");
        }
    }

    #[test]
    fn a_downgrade_that_loses_no_metadata_is_allowed_when_asked_for() {
        // 3.9-IV0 (21) → 3.7-IV2 (17): 18–21 did not change the metadata format.
        let cluster = Cluster::at(MetadataVersion::IBP_3_9_IV0);
        assert_eq!(cluster.one("metadata.version", 17, 2), Ok(()));
        // v0 requests say "allow downgrade" instead.
        let v0 = request(vec![
            FeatureUpdateKey::default()
                .with_feature(StrBytes::from_static_str("metadata.version"))
                .with_max_version_level(17)
                .with_allow_downgrade(true),
        ]);
        let context = FeatureContext {
            metadata_version: cluster.mv,
            finalized: &cluster.finalized,
            zk_migration_state: cluster.zk,
            local_controller_id: 3000,
            unstable_feature_versions_enable: false,
            brokers: &cluster.brokers,
            controllers: &cluster.controllers,
        };
        let outcome = update_features(&context, &v0, 0);
        assert_eq!(
            levels(&outcome),
            vec![("metadata.version".to_owned(), 17, 0)]
        );
        // 3.7-IV2 (17) itself changed the format: going to 16 is lossy.
        assert!(cluster.one("metadata.version", 16, 2).is_err());
    }

    #[test]
    fn controllers_are_not_consulted_before_3_7_iv0() {
        let mut cluster = Cluster::at(MetadataVersion::IBP_3_6_IV2);
        cluster.controllers[1] = node(3001, &[("metadata.version", 1, 14)]);
        assert_eq!(cluster.one("metadata.version", 15, 1), Ok(()));
    }

    #[test]
    fn other_features_follow_their_supported_ranges() {
        let mut cluster = Cluster::at(MetadataVersion::IBP_3_9_IV0);
        // transaction.version 1 needs an unstable MV in 3.9: not locally supported.
        let err = cluster
            .one("transaction.version", 1, 1)
            .expect_err("unstable");
        assert!(
            err.to_string().contains("does not support this feature"),
            "{err}"
        );
        // Level 0 (disable) is always in range; it writes a level-0 record.
        let outcome = cluster.run(&request(vec![update("transaction.version", 0, 1)]));
        assert_eq!(
            levels(&outcome),
            vec![("transaction.version".to_owned(), 0, 0)]
        );
        // kraft.version is not changed through UpdateFeatures.
        cluster.brokers = vec![node(1, &[("kraft.version", 0, 1)])];
        cluster.controllers = vec![];
        let err = cluster
            .one("kraft.version", 1, 1)
            .expect_err("kraft.version");
        assert_eq!(err.code(), 95);
    }

    #[test]
    fn an_unknown_feature_may_only_be_set_to_zero() {
        let cluster = Cluster::at(MetadataVersion::IBP_3_9_IV0);
        assert!(cluster.one("no.such.feature", 1, 1).is_err());
        let outcome = cluster.run(&request(vec![update("no.such.feature", 0, 1)]));
        assert_eq!(levels(&outcome), vec![("no.such.feature".to_owned(), 0, 0)]);
    }

    #[test]
    fn each_feature_is_decided_on_its_own() {
        let cluster = Cluster::at(MetadataVersion::IBP_3_7_IV0);
        let outcome = cluster.run(&request(vec![
            update("metadata.version", 21, 1),
            update("no.such.feature", 1, 1),
        ]));
        assert_eq!(outcome.results["metadata.version"], Ok(()));
        assert!(outcome.results["no.such.feature"].is_err());
        assert_eq!(
            levels(&outcome),
            vec![("metadata.version".to_owned(), 21, 0)]
        );
    }

    #[test]
    fn node_features_come_from_the_cluster_image() {
        use krust_metadata::records::{RegisterBrokerRecord, RegistrationFeature};
        use krust_metadata::{MetadataDelta, MetadataImage, MetadataProvenance};

        let image = MetadataImage::empty();
        let mut delta = MetadataDelta::new(&image);
        let record = MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 4,
            is_migrating_zk_broker: false,
            incarnation_id: uuid::Uuid::from_u64_pair(1, 1),
            broker_epoch: 10,
            end_points: Vec::new(),
            features: vec![RegistrationFeature {
                name: "metadata.version".to_owned(),
                min_supported_version: 1,
                max_supported_version: 21,
                unknown_tagged_fields: Vec::new(),
            }],
            rack: None,
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        });
        delta.replay(&record).expect("replays");
        let image = delta.apply(MetadataProvenance::new(10, 1, 0));
        let brokers = NodeFeatures::brokers_of(&image.cluster);
        assert_eq!(brokers, vec![node(4, &[("metadata.version", 1, 21)])]);
        assert!(NodeFeatures::controllers_of(&image.cluster).is_empty());
    }

    #[test]
    fn metadata_changes_are_found_between_any_two_versions() {
        let v = MetadataVersion::from_feature_level;
        let ok = |l| v(l).expect("known level");
        assert!(!metadata_changed_between(ok(17), ok(21)));
        assert!(metadata_changed_between(ok(16), ok(17)));
        assert!(!metadata_changed_between(ok(12), ok(12)));
        assert!(metadata_changed_between(ok(4), ok(21)));
    }
}
