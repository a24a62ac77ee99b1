//! Finalized features: `metadata.version`, the other feature levels, and the ZooKeeper
//! migration state (Kafka's `FeaturesImage` / `FeaturesDelta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::ReplayError;
use super::writer::{ImageWriteError, ImageWriterOptions, RecordSink, emit};
use crate::metadata_version::MetadataVersion;
use crate::records::{FeatureLevelRecord, MetadataRecord, ZkMigrationStateRecord};

/// The feature name of `metadata.version`.
pub const METADATA_VERSION_FEATURE: &str = "metadata.version";

/// The cluster-wide ZooKeeper migration state (facts §6.3, App. A). `ZK` (4) exists only as a
/// metric value and is never persisted, so it is not a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ZkMigrationState {
    /// 0: created in KRaft mode (the default for an empty log).
    #[default]
    None,
    /// 1: ZooKeeper data copied; the controller dual-writes.
    Migration,
    /// 2: a controller booted with migration enabled; no ZooKeeper data copied yet.
    PreMigration,
    /// 3: migration finalized; terminal.
    PostMigration,
}

impl ZkMigrationState {
    /// The value persisted in `ZkMigrationStateRecord`.
    #[must_use]
    pub const fn value(self) -> i8 {
        match self {
            Self::None => 0,
            Self::Migration => 1,
            Self::PreMigration => 2,
            Self::PostMigration => 3,
        }
    }

    /// Looks a persisted value up; `None` for anything but 0–3.
    #[must_use]
    pub const fn from_value(value: i8) -> Option<Self> {
        match value {
            0 => Some(Self::None),
            1 => Some(Self::Migration),
            2 => Some(Self::PreMigration),
            3 => Some(Self::PostMigration),
            _ => None,
        }
    }

    /// PRE_MIGRATION or MIGRATION.
    #[must_use]
    pub const fn in_progress(self) -> bool {
        matches!(self, Self::PreMigration | Self::Migration)
    }
}

/// The finalized features.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeaturesImage {
    /// `metadata.version`; 3.0-IV1 until a FeatureLevelRecord says otherwise (facts §5: "a log
    /// with no FeatureLevelRecord is treated as 3.0-IV1").
    pub metadata_version: MetadataVersion,
    /// Every other finalized feature with a non-zero level, by name.
    pub finalized_levels: OrdMap<String, i16>,
    /// The ZooKeeper migration state.
    pub zk_migration_state: ZkMigrationState,
}

impl Default for FeaturesImage {
    fn default() -> Self {
        Self {
            metadata_version: MetadataVersion::MINIMUM_KRAFT_VERSION,
            finalized_levels: OrdMap::new(),
            zk_migration_state: ZkMigrationState::None,
        }
    }
}

impl FeaturesImage {
    /// The finalized level of `name` (`metadata.version` included), if any.
    #[must_use]
    pub fn level(&self, name: &str) -> Option<i16> {
        if name == METADATA_VERSION_FEATURE {
            Some(self.metadata_version.feature_level())
        } else {
            self.finalized_levels.get(name).copied()
        }
    }

    /// Writes `metadata.version` first (readers need it to decode what follows), then the other
    /// levels, then `ZkMigrationStateRecord` when the version has migration support.
    pub(crate) fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        let mv = options.metadata_version;
        if mv < MetadataVersion::MINIMUM_BOOTSTRAP_VERSION {
            if !self.finalized_levels.is_empty() {
                let names: Vec<&str> = self.finalized_levels.keys().map(String::as_str).collect();
                options.handle_loss(&format!("feature flag(s): {}", names.join(", ")))?;
            }
        } else {
            emit(
                sink,
                MetadataRecord::FeatureLevel(FeatureLevelRecord::new(
                    METADATA_VERSION_FEATURE,
                    mv.feature_level(),
                )),
                0,
            );
            for (name, level) in &self.finalized_levels {
                emit(
                    sink,
                    MetadataRecord::FeatureLevel(FeatureLevelRecord::new(name.clone(), *level)),
                    0,
                );
            }
        }
        if mv.is_migration_supported() {
            emit(
                sink,
                MetadataRecord::ZkMigrationState(ZkMigrationStateRecord {
                    zk_migration_state: self.zk_migration_state.value(),
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
        } else if self.zk_migration_state != ZkMigrationState::None {
            options.handle_loss(&format!(
                "the ZK Migration state which was {:?}",
                self.zk_migration_state
            ))?;
        }
        Ok(())
    }
}

/// Changes to the finalized features.
#[derive(Debug, Clone)]
pub struct FeaturesDelta {
    image: Arc<FeaturesImage>,
    metadata_version_change: Option<MetadataVersion>,
    /// `None` = the feature was removed (level 0).
    changes: BTreeMap<String, Option<i16>>,
    zk_migration_state_change: Option<ZkMigrationState>,
}

impl FeaturesDelta {
    pub(crate) fn new(image: Arc<FeaturesImage>) -> Self {
        Self {
            image,
            metadata_version_change: None,
            changes: BTreeMap::new(),
            zk_migration_state_change: None,
        }
    }

    /// The new `metadata.version`, if a record set one.
    #[must_use]
    pub fn metadata_version_change(&self) -> Option<MetadataVersion> {
        self.metadata_version_change
    }

    /// Feature level changes other than `metadata.version` (`None` = removed).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<String, Option<i16>> {
        &self.changes
    }

    /// The new ZooKeeper migration state, if a record set one.
    #[must_use]
    pub fn zk_migration_state_change(&self) -> Option<ZkMigrationState> {
        self.zk_migration_state_change
    }

    pub(crate) fn replay_feature_level(
        &mut self,
        record: &FeatureLevelRecord,
    ) -> Result<(), ReplayError> {
        if record.name == METADATA_VERSION_FEATURE {
            let version =
                MetadataVersion::from_feature_level(record.feature_level).map_err(|_| {
                    ReplayError::UnknownMetadataVersion {
                        feature_level: record.feature_level,
                    }
                })?;
            self.metadata_version_change = Some(version);
        } else if record.feature_level == 0 {
            self.changes.insert(record.name.clone(), None);
        } else {
            self.changes
                .insert(record.name.clone(), Some(record.feature_level));
        }
        Ok(())
    }

    pub(crate) fn replay_zk_migration_state(
        &mut self,
        record: &ZkMigrationStateRecord,
    ) -> Result<(), ReplayError> {
        let state = ZkMigrationState::from_value(record.zk_migration_state).ok_or(
            ReplayError::UnknownZkMigrationState {
                value: record.zk_migration_state,
            },
        )?;
        self.zk_migration_state_change = Some(state);
        Ok(())
    }

    /// Ends a snapshot load: feature levels the snapshot did not hold are removed, and the
    /// migration state is the snapshot's (NONE if it had none).
    pub(crate) fn finish_snapshot(&mut self) {
        for name in self.image.finalized_levels.keys() {
            self.changes.entry(name.clone()).or_insert(None);
        }
        self.zk_migration_state_change
            .get_or_insert(ZkMigrationState::None);
    }

    pub(crate) fn apply(&self) -> FeaturesImage {
        let mut finalized_levels = self.image.finalized_levels.clone();
        for (name, level) in &self.changes {
            match level {
                Some(level) => {
                    finalized_levels.insert(name.clone(), *level);
                }
                None => {
                    finalized_levels.remove(name);
                }
            }
        }
        FeaturesImage {
            metadata_version: self
                .metadata_version_change
                .unwrap_or(self.image.metadata_version),
            finalized_levels,
            zk_migration_state: self
                .zk_migration_state_change
                .unwrap_or(self.image.zk_migration_state),
        }
    }
}
