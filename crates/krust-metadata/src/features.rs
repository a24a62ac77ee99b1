//! The finalized features a cluster is formatted with (Kafka 3.9 `server-common/.../Features.java`,
//! `KRaftVersion.java`, `TransactionVersion.java` and the feature part of
//! `metadata/storage/Formatter.java`). `metadata.version` is handled by
//! [`crate::metadata_version`]; the other production features of 3.9 are `kraft.version` and
//! `transaction.version`.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::metadata_version::{self, MetadataVersion, MetadataVersionError};

/// `kraft.version`: 1 enables KIP-853 dynamic quorums. Never stored as a FeatureLevelRecord.
pub const KRAFT_VERSION: &str = "kraft.version";
/// `transaction.version`: KIP-890 transaction protocol versions.
pub const TRANSACTION_VERSION: &str = "transaction.version";

/// A feature other than `metadata.version` that Kafka 3.9 formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `kraft.version`, levels 0–1.
    KRaftVersion,
    /// `transaction.version`, levels 0–2.
    TransactionVersion,
}

struct FeatureLevel {
    level: i16,
    /// The metadata.version from which this level is the default.
    bootstrap: MetadataVersion,
    /// `(feature, minimum level)` this level needs.
    depends_on: Option<(&'static str, i16)>,
}

const KRAFT_LEVELS: [FeatureLevel; 2] = [
    FeatureLevel {
        level: 0,
        bootstrap: MetadataVersion::MINIMUM_KRAFT_VERSION,
        depends_on: None,
    },
    FeatureLevel {
        level: 1,
        bootstrap: MetadataVersion::IBP_3_9_IV0,
        depends_on: Some((metadata_version::FEATURE_NAME, 21)),
    },
];

const TRANSACTION_LEVELS: [FeatureLevel; 3] = [
    FeatureLevel {
        level: 0,
        bootstrap: MetadataVersion::MINIMUM_KRAFT_VERSION,
        depends_on: None,
    },
    FeatureLevel {
        level: 1,
        bootstrap: MetadataVersion::IBP_4_0_IV0,
        depends_on: None,
    },
    FeatureLevel {
        level: 2,
        bootstrap: MetadataVersion::IBP_4_0_IV0,
        depends_on: None,
    },
];

/// The feature ranges a krust node supports and advertises (ApiVersions, BrokerRegistration,
/// ControllerRegistration), as Kafka's `BrokerFeatures.defaultSupportedFeatures` without
/// unstable versions: `(name, min, max)` — metadata.version from the oldest KRaft version to
/// the latest production one, every other feature from 0 to its latest production level.
#[must_use]
pub fn supported_feature_ranges() -> Vec<(&'static str, i16, i16)> {
    std::iter::once((
        crate::metadata_version::FEATURE_NAME,
        MetadataVersion::MINIMUM_KRAFT_VERSION.feature_level(),
        MetadataVersion::LATEST_PRODUCTION.feature_level(),
    ))
    .chain(
        Feature::ALL
            .into_iter()
            .map(|f| (f.name(), 0, f.latest_production())),
    )
    .collect()
}

impl Feature {
    /// Production features, by name order.
    pub const ALL: [Self; 2] = [Self::KRaftVersion, Self::TransactionVersion];

    /// The feature name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::KRaftVersion => KRAFT_VERSION,
            Self::TransactionVersion => TRANSACTION_VERSION,
        }
    }

    /// Looks a feature up by name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    fn levels(self) -> &'static [FeatureLevel] {
        match self {
            Self::KRaftVersion => &KRAFT_LEVELS,
            Self::TransactionVersion => &TRANSACTION_LEVELS,
        }
    }

    /// The level a cluster formatted at `metadata_version` gets by default.
    #[must_use]
    pub fn default_level(self, metadata_version: MetadataVersion) -> i16 {
        let mut level = 0;
        for candidate in self.levels() {
            if candidate.bootstrap <= metadata_version {
                level = candidate.level;
            } else {
                break;
            }
        }
        level
    }

    /// The highest stable level: the default for [`MetadataVersion::LATEST_PRODUCTION`].
    #[must_use]
    pub fn latest_production(self) -> i16 {
        self.default_level(MetadataVersion::LATEST_PRODUCTION)
    }

    fn level(
        self,
        level: i16,
        allow_unstable: bool,
    ) -> Result<&'static FeatureLevel, FeatureError> {
        self.levels()
            .iter()
            .find(|l| l.level == level && (allow_unstable || level <= self.latest_production()))
            .ok_or(FeatureError::UnknownLevel {
                feature: self.name(),
                level,
            })
    }
}

/// Why a combination of release version and features cannot be formatted. Messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FeatureError {
    /// `--feature metadata.version=X` together with `--release-version`.
    #[error("Use --release-version instead of --feature metadata.version=X to avoid ambiguity.")]
    AmbiguousMetadataVersion,
    /// A metadata.version below 3.0-IV1.
    #[error("metadata.version {0} is too old to be supported.")]
    TooOld(MetadataVersion),
    /// An unstable metadata.version without `unstable.feature.versions.enable`.
    #[error("metadata.version {0} is not yet stable.")]
    NotStable(MetadataVersion),
    /// `--feature metadata.version=N` with an unknown level.
    #[error(transparent)]
    MetadataVersion(#[from] MetadataVersionError),
    /// A feature name Kafka 3.9 does not know.
    #[error("Unsupported feature: {name}. Supported features are: {supported}")]
    UnsupportedFeature {
        /// The name given.
        name: String,
        /// The supported names, comma separated.
        supported: String,
    },
    /// A level the feature does not have (or an unstable one without the flag).
    #[error("No feature:{feature} with feature level {level}")]
    UnknownLevel {
        /// The feature.
        feature: &'static str,
        /// The level given.
        level: i16,
    },
    /// `kraft.version=0` with a dynamic quorum, or ≥ 1 without one.
    #[error(
        "Cannot set kraft.version to {level} {condition} KIP-853 configuration is present. Try removing the --feature flag for kraft.version."
    )]
    KRaftVersionConflict {
        /// The level given.
        level: i16,
        /// `if` (level 0) or `unless` (level ≥ 1).
        condition: &'static str,
    },
    /// Any level ≥ 1 needs metadata.version ≥ 3.3-IV0.
    #[error(
        "{feature} could not be set to {level} because it depends on metadata.version=4 (3.3-IV0)"
    )]
    NeedsFeatureRecords {
        /// The feature.
        feature: &'static str,
        /// The level.
        level: i16,
    },
    /// A level that depends on another feature's level.
    #[error(
        "{feature} could not be set to {level} because it depends on {dependency} level {dependency_level}"
    )]
    MissingDependency {
        /// The feature.
        feature: &'static str,
        /// The level.
        level: i16,
        /// The feature depended on.
        dependency: &'static str,
        /// The level needed.
        dependency_level: i16,
    },
}

/// The metadata.version to format with (Kafka's `Formatter.calculateEffectiveReleaseVersion`):
/// `--feature metadata.version=N`, else `--release-version`, else the latest (testing version
/// when unstable versions are enabled, else production).
///
/// # Errors
/// [`FeatureError::AmbiguousMetadataVersion`], [`FeatureError::TooOld`],
/// [`FeatureError::NotStable`] or an unknown level.
pub fn effective_release_version(
    release_version: Option<MetadataVersion>,
    requested: &BTreeMap<String, i16>,
    unstable_enabled: bool,
) -> Result<MetadataVersion, FeatureError> {
    let verify = |version: MetadataVersion| {
        if !version.is_kraft_supported() {
            Err(FeatureError::TooOld(version))
        } else if !unstable_enabled && !version.is_production() {
            Err(FeatureError::NotStable(version))
        } else {
            Ok(version)
        }
    };
    if let Some(level) = requested.get(metadata_version::FEATURE_NAME) {
        if release_version.is_some() {
            return Err(FeatureError::AmbiguousMetadataVersion);
        }
        return verify(MetadataVersion::from_feature_level(*level)?);
    }
    match release_version {
        Some(version) => verify(version),
        None if unstable_enabled => Ok(MetadataVersion::LATEST_TESTING),
        None => Ok(MetadataVersion::LATEST_PRODUCTION),
    }
}

/// Every feature's level (metadata.version included), by name (Kafka's
/// `Formatter.calculateEffectiveFeatureLevels`). `kraft.version` defaults to 1 with a dynamic
/// quorum (`--standalone`, `--initial-controllers`, `--no-initial-controllers`) and 0 without;
/// other features default from the release version.
///
/// # Errors
/// Any [`FeatureError`] about names, levels, kraft.version or dependencies.
pub fn effective_feature_levels(
    release_version: MetadataVersion,
    requested: &BTreeMap<String, i16>,
    unstable_enabled: bool,
    has_dynamic_quorum: bool,
) -> Result<BTreeMap<String, i16>, FeatureError> {
    let mut levels = BTreeMap::new();
    for (name, level) in requested {
        if name != metadata_version::FEATURE_NAME && Feature::from_name(name).is_none() {
            return Err(FeatureError::UnsupportedFeature {
                name: name.clone(),
                supported: Feature::ALL.map(Feature::name).join(", "),
            });
        }
        levels.insert(name.clone(), *level);
    }
    levels.insert(
        metadata_version::FEATURE_NAME.to_owned(),
        release_version.feature_level(),
    );
    for feature in Feature::ALL {
        let level = match feature {
            Feature::KRaftVersion => match levels.get(KRAFT_VERSION).copied() {
                Some(0) if has_dynamic_quorum => {
                    return Err(FeatureError::KRaftVersionConflict {
                        level: 0,
                        condition: "if",
                    });
                }
                Some(level) if level != 0 && !has_dynamic_quorum => {
                    return Err(FeatureError::KRaftVersionConflict {
                        level,
                        condition: "unless",
                    });
                }
                Some(level) => level,
                None => i16::from(has_dynamic_quorum),
            },
            _ => match levels.get(feature.name()) {
                Some(level) => *level,
                None => feature.default_level(release_version),
            },
        };
        levels.insert(feature.name().to_owned(), level);
    }
    // Validate every feature level against the full map (features may depend on each other).
    for (name, level) in &levels {
        let Some(feature) = Feature::from_name(name) else {
            continue;
        };
        let spec = feature.level(*level, unstable_enabled)?;
        let mv_level = levels
            .get(metadata_version::FEATURE_NAME)
            .copied()
            .unwrap_or(0);
        if spec.level >= 1 && mv_level < MetadataVersion::IBP_3_3_IV0.feature_level() {
            return Err(FeatureError::NeedsFeatureRecords {
                feature: feature.name(),
                level: spec.level,
            });
        }
        if let Some((dependency, dependency_level)) = spec.depends_on
            && levels.get(dependency).is_none_or(|l| *l < dependency_level)
        {
            return Err(FeatureError::MissingDependency {
                feature: feature.name(),
                level: spec.level,
                dependency,
                dependency_level,
            });
        }
    }
    Ok(levels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, i16)]) -> BTreeMap<String, i16> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn defaults_for_3_9() {
        let levels = effective_feature_levels(
            MetadataVersion::LATEST_PRODUCTION,
            &BTreeMap::new(),
            false,
            false,
        )
        .expect("defaults are valid");
        assert_eq!(
            levels,
            req(&[
                ("kraft.version", 0),
                ("metadata.version", 21),
                ("transaction.version", 0)
            ])
        );
        let dynamic = effective_feature_levels(
            MetadataVersion::LATEST_PRODUCTION,
            &BTreeMap::new(),
            false,
            true,
        )
        .expect("dynamic quorum");
        assert_eq!(dynamic.get("kraft.version"), Some(&1));
    }

    #[test]
    fn release_version_rules() {
        assert_eq!(
            effective_release_version(None, &BTreeMap::new(), false),
            Ok(MetadataVersion::IBP_3_9_IV0)
        );
        assert_eq!(
            effective_release_version(None, &BTreeMap::new(), true),
            Ok(MetadataVersion::IBP_4_0_IV1)
        );
        assert_eq!(
            effective_release_version(None, &req(&[("metadata.version", 17)]), false),
            Ok(MetadataVersion::IBP_3_7_IV2)
        );
        let cases = [
            (
                Some(MetadataVersion::IBP_3_9_IV0),
                req(&[("metadata.version", 21)]),
                "Use --release-version instead of --feature metadata.version=X to avoid ambiguity.",
            ),
            (
                Some(MetadataVersion::IBP_4_0_IV0),
                BTreeMap::new(),
                "metadata.version 4.0-IV0 is not yet stable.",
            ),
            (
                MetadataVersion::from_version_string("2.8").ok(),
                BTreeMap::new(),
                "metadata.version 2.8-IV1 is too old to be supported.",
            ),
            (
                None,
                req(&[("metadata.version", 99)]),
                "No MetadataVersion with feature level 99",
            ),
        ];
        for (release, requested, message) in cases {
            let err = effective_release_version(release, &requested, false).expect_err(message);
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn feature_level_errors_match_kafka() {
        let mv = MetadataVersion::LATEST_PRODUCTION;
        let cases = [
            (
                req(&[("foo.version", 1)]),
                false,
                "Unsupported feature: foo.version. Supported features are: kraft.version, transaction.version",
            ),
            (
                req(&[("kraft.version", 0)]),
                true,
                "Cannot set kraft.version to 0 if KIP-853 configuration is present. Try removing the --feature flag for kraft.version.",
            ),
            (
                req(&[("kraft.version", 1)]),
                false,
                "Cannot set kraft.version to 1 unless KIP-853 configuration is present. Try removing the --feature flag for kraft.version.",
            ),
            (
                req(&[("transaction.version", 1)]),
                false,
                "No feature:transaction.version with feature level 1",
            ),
            (
                req(&[("kraft.version", 2)]),
                true,
                "No feature:kraft.version with feature level 2",
            ),
        ];
        for (requested, dynamic, message) in cases {
            let err = effective_feature_levels(mv, &requested, false, dynamic).expect_err(message);
            assert_eq!(err.to_string(), message);
        }
        let err =
            effective_feature_levels(MetadataVersion::IBP_3_8_IV0, &BTreeMap::new(), false, true)
                .expect_err("kraft.version 1 needs 3.9-IV0");
        assert_eq!(
            err.to_string(),
            "kraft.version could not be set to 1 because it depends on metadata.version level 21"
        );
    }

    #[test]
    fn unstable_release_gets_new_transaction_version() {
        let levels =
            effective_feature_levels(MetadataVersion::IBP_4_0_IV0, &BTreeMap::new(), true, false)
                .expect("unstable allowed");
        assert_eq!(levels.get("transaction.version"), Some(&2));
    }
}
