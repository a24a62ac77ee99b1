//! `metadata.version` (Kafka 3.9 `server-common/.../MetadataVersion.java`, facts §5).
//!
//! Every inter-broker protocol version Kafka 3.9 knows, in release order. Versions before
//! `3.0-IV1` have feature level -1 and exist only so that old `inter.broker.protocol.version`
//! values parse (and are then refused for KRaft). Levels above [`MetadataVersion::LATEST_PRODUCTION`]
//! are unstable: usable only with `unstable.feature.versions.enable=true` and never to be
//! persisted by a production cluster (trunk renumbered them).

use thiserror::Error;

/// The feature name under which the level is stored in a `FeatureLevelRecord`.
pub const FEATURE_NAME: &str = "metadata.version";

struct Entry {
    level: i16,
    release: &'static str,
    sub_version: &'static str,
    did_metadata_change: bool,
}

/// Kafka 3.9's `MetadataVersion` enum, in declaration order (index = ordinal).
const TABLE: [Entry; 57] = [
    Entry {
        level: -1,
        release: "0.8.0",
        sub_version: "",
        did_metadata_change: true,
    }, // 0 IBP_0_8_0
    Entry {
        level: -1,
        release: "0.8.1",
        sub_version: "",
        did_metadata_change: true,
    }, // 1 IBP_0_8_1
    Entry {
        level: -1,
        release: "0.8.2",
        sub_version: "",
        did_metadata_change: true,
    }, // 2 IBP_0_8_2
    Entry {
        level: -1,
        release: "0.9.0",
        sub_version: "",
        did_metadata_change: true,
    }, // 3 IBP_0_9_0
    Entry {
        level: -1,
        release: "0.10.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 4 IBP_0_10_0_IV0
    Entry {
        level: -1,
        release: "0.10.0",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 5 IBP_0_10_0_IV1
    Entry {
        level: -1,
        release: "0.10.1",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 6 IBP_0_10_1_IV0
    Entry {
        level: -1,
        release: "0.10.1",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 7 IBP_0_10_1_IV1
    Entry {
        level: -1,
        release: "0.10.1",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 8 IBP_0_10_1_IV2
    Entry {
        level: -1,
        release: "0.10.2",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 9 IBP_0_10_2_IV0
    Entry {
        level: -1,
        release: "0.11.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 10 IBP_0_11_0_IV0
    Entry {
        level: -1,
        release: "0.11.0",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 11 IBP_0_11_0_IV1
    Entry {
        level: -1,
        release: "0.11.0",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 12 IBP_0_11_0_IV2
    Entry {
        level: -1,
        release: "1.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 13 IBP_1_0_IV0
    Entry {
        level: -1,
        release: "1.1",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 14 IBP_1_1_IV0
    Entry {
        level: -1,
        release: "2.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 15 IBP_2_0_IV0
    Entry {
        level: -1,
        release: "2.0",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 16 IBP_2_0_IV1
    Entry {
        level: -1,
        release: "2.1",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 17 IBP_2_1_IV0
    Entry {
        level: -1,
        release: "2.1",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 18 IBP_2_1_IV1
    Entry {
        level: -1,
        release: "2.1",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 19 IBP_2_1_IV2
    Entry {
        level: -1,
        release: "2.2",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 20 IBP_2_2_IV0
    Entry {
        level: -1,
        release: "2.2",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 21 IBP_2_2_IV1
    Entry {
        level: -1,
        release: "2.3",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 22 IBP_2_3_IV0
    Entry {
        level: -1,
        release: "2.3",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 23 IBP_2_3_IV1
    Entry {
        level: -1,
        release: "2.4",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 24 IBP_2_4_IV0
    Entry {
        level: -1,
        release: "2.4",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 25 IBP_2_4_IV1
    Entry {
        level: -1,
        release: "2.5",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 26 IBP_2_5_IV0
    Entry {
        level: -1,
        release: "2.6",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 27 IBP_2_6_IV0
    Entry {
        level: -1,
        release: "2.7",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 28 IBP_2_7_IV0
    Entry {
        level: -1,
        release: "2.7",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 29 IBP_2_7_IV1
    Entry {
        level: -1,
        release: "2.7",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 30 IBP_2_7_IV2
    Entry {
        level: -1,
        release: "2.8",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 31 IBP_2_8_IV0
    Entry {
        level: -1,
        release: "2.8",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 32 IBP_2_8_IV1
    Entry {
        level: -1,
        release: "3.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 33 IBP_3_0_IV0
    Entry {
        level: 1,
        release: "3.0",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 34 IBP_3_0_IV1
    Entry {
        level: 2,
        release: "3.1",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 35 IBP_3_1_IV0
    Entry {
        level: 3,
        release: "3.2",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 36 IBP_3_2_IV0
    Entry {
        level: 4,
        release: "3.3",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 37 IBP_3_3_IV0
    Entry {
        level: 5,
        release: "3.3",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 38 IBP_3_3_IV1
    Entry {
        level: 6,
        release: "3.3",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 39 IBP_3_3_IV2
    Entry {
        level: 7,
        release: "3.3",
        sub_version: "IV3",
        did_metadata_change: true,
    }, // 40 IBP_3_3_IV3
    Entry {
        level: 8,
        release: "3.4",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 41 IBP_3_4_IV0
    Entry {
        level: 9,
        release: "3.5",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 42 IBP_3_5_IV0
    Entry {
        level: 10,
        release: "3.5",
        sub_version: "IV1",
        did_metadata_change: false,
    }, // 43 IBP_3_5_IV1
    Entry {
        level: 11,
        release: "3.5",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 44 IBP_3_5_IV2
    Entry {
        level: 12,
        release: "3.6",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 45 IBP_3_6_IV0
    Entry {
        level: 13,
        release: "3.6",
        sub_version: "IV1",
        did_metadata_change: true,
    }, // 46 IBP_3_6_IV1
    Entry {
        level: 14,
        release: "3.6",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 47 IBP_3_6_IV2
    Entry {
        level: 15,
        release: "3.7",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 48 IBP_3_7_IV0
    Entry {
        level: 16,
        release: "3.7",
        sub_version: "IV1",
        did_metadata_change: false,
    }, // 49 IBP_3_7_IV1
    Entry {
        level: 17,
        release: "3.7",
        sub_version: "IV2",
        did_metadata_change: true,
    }, // 50 IBP_3_7_IV2
    Entry {
        level: 18,
        release: "3.7",
        sub_version: "IV3",
        did_metadata_change: false,
    }, // 51 IBP_3_7_IV3
    Entry {
        level: 19,
        release: "3.7",
        sub_version: "IV4",
        did_metadata_change: false,
    }, // 52 IBP_3_7_IV4
    Entry {
        level: 20,
        release: "3.8",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 53 IBP_3_8_IV0
    Entry {
        level: 21,
        release: "3.9",
        sub_version: "IV0",
        did_metadata_change: false,
    }, // 54 IBP_3_9_IV0
    Entry {
        level: 22,
        release: "4.0",
        sub_version: "IV0",
        did_metadata_change: true,
    }, // 55 IBP_4_0_IV0
    Entry {
        level: 23,
        release: "4.0",
        sub_version: "IV1",
        did_metadata_change: false,
    }, // 56 IBP_4_0_IV1
];

/// Index in [`TABLE`] of the first version with feature level 1 (`3.0-IV1`).
const FIRST_KRAFT_INDEX: u8 = 34;

/// One `metadata.version` / inter-broker protocol version of Kafka 3.9. Ordered by release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetadataVersion(u8);

/// Why a version string or level does not name a [`MetadataVersion`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetadataVersionError {
    /// Kafka: "Version X is not a valid version".
    #[error("Version {0} is not a valid version")]
    UnknownVersionString(String),
    /// Kafka: "No MetadataVersion with feature level N".
    #[error("No MetadataVersion with feature level {0}")]
    UnknownFeatureLevel(i16),
}

impl MetadataVersion {
    /// `3.0-IV1`, level 1: the minimum KRaft version.
    pub const IBP_3_0_IV1: Self = Self::kraft(1);
    /// `3.1-IV0`, level 2.
    pub const IBP_3_1_IV0: Self = Self::kraft(2);
    /// `3.2-IV0`, level 3.
    pub const IBP_3_2_IV0: Self = Self::kraft(3);
    /// `3.3-IV0`, level 4: first version stored in the log; minimum bootstrap version.
    pub const IBP_3_3_IV0: Self = Self::kraft(4);
    /// `3.3-IV1`, level 5: `NoOpRecord`.
    pub const IBP_3_3_IV1: Self = Self::kraft(5);
    /// `3.3-IV2`, level 6: `BrokerRegistrationChangeRecord`.
    pub const IBP_3_3_IV2: Self = Self::kraft(6);
    /// `3.3-IV3`, level 7: `InControlledShutdown`.
    pub const IBP_3_3_IV3: Self = Self::kraft(7);
    /// `3.4-IV0`, level 8: ZooKeeper migration.
    pub const IBP_3_4_IV0: Self = Self::kraft(8);
    /// `3.5-IV0`, level 9.
    pub const IBP_3_5_IV0: Self = Self::kraft(9);
    /// `3.5-IV1`, level 10.
    pub const IBP_3_5_IV1: Self = Self::kraft(10);
    /// `3.5-IV2`, level 11: SCRAM in KRaft.
    pub const IBP_3_5_IV2: Self = Self::kraft(11);
    /// `3.6-IV0`, level 12.
    pub const IBP_3_6_IV0: Self = Self::kraft(12);
    /// `3.6-IV1`, level 13: metadata transactions.
    pub const IBP_3_6_IV1: Self = Self::kraft(13);
    /// `3.6-IV2`, level 14: delegation tokens.
    pub const IBP_3_6_IV2: Self = Self::kraft(14);
    /// `3.7-IV0`, level 15: controller registration.
    pub const IBP_3_7_IV0: Self = Self::kraft(15);
    /// `3.7-IV1`, level 16.
    pub const IBP_3_7_IV1: Self = Self::kraft(16);
    /// `3.7-IV2`, level 17: JBOD in KRaft.
    pub const IBP_3_7_IV2: Self = Self::kraft(17);
    /// `3.7-IV3`, level 18.
    pub const IBP_3_7_IV3: Self = Self::kraft(18);
    /// `3.7-IV4`, level 19.
    pub const IBP_3_7_IV4: Self = Self::kraft(19);
    /// `3.8-IV0`, level 20.
    pub const IBP_3_8_IV0: Self = Self::kraft(20);
    /// `3.9-IV0`, level 21: required by `kraft.version=1`.
    pub const IBP_3_9_IV0: Self = Self::kraft(21);
    /// `4.0-IV0`, level 22 (unstable in 3.9): ELR.
    pub const IBP_4_0_IV0: Self = Self::kraft(22);
    /// `4.0-IV1`, level 23 (unstable in 3.9).
    pub const IBP_4_0_IV1: Self = Self::kraft(23);

    /// The lowest version a KRaft cluster can run.
    pub const MINIMUM_KRAFT_VERSION: Self = Self::IBP_3_0_IV1;
    /// The lowest version that can be bootstrapped (format, UpdateFeatures).
    pub const MINIMUM_BOOTSTRAP_VERSION: Self = Self::IBP_3_3_IV0;
    /// The highest stable version of Kafka 3.9.
    pub const LATEST_PRODUCTION: Self = Self::IBP_3_9_IV0;
    /// The highest version Kafka 3.9 knows (unstable).
    pub const LATEST_TESTING: Self = Self::IBP_4_0_IV1;

    const fn kraft(level: u8) -> Self {
        Self(FIRST_KRAFT_INDEX + level - 1)
    }

    fn entry(self) -> &'static Entry {
        &TABLE[self.0 as usize]
    }

    /// Every version, oldest first.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..TABLE.len() as u8).map(Self)
    }

    /// Feature level; -1 for pre-KRaft versions.
    #[must_use]
    pub fn feature_level(self) -> i16 {
        self.entry().level
    }

    /// The release, e.g. `3.9`.
    #[must_use]
    pub fn release(self) -> &'static str {
        self.entry().release
    }

    /// The full version string, e.g. `3.9-IV0` (or `0.8.0` for old versions without a suffix).
    #[must_use]
    pub fn version(self) -> String {
        let entry = self.entry();
        if entry.sub_version.is_empty() {
            entry.release.to_owned()
        } else {
            format!("{}-{}", entry.release, entry.sub_version)
        }
    }

    /// Whether downgrading across this version loses metadata.
    #[must_use]
    pub fn did_metadata_change(self) -> bool {
        self.entry().did_metadata_change
    }

    /// Whether this version can be used by a KRaft cluster (feature level > 0).
    #[must_use]
    pub fn is_kraft_supported(self) -> bool {
        self.feature_level() > 0
    }

    /// Whether this version is stable in Kafka 3.9 (≤ [`Self::LATEST_PRODUCTION`]).
    #[must_use]
    pub fn is_production(self) -> bool {
        self <= Self::LATEST_PRODUCTION
    }

    /// Looks a version up by feature level (1..=23).
    ///
    /// # Errors
    /// [`MetadataVersionError::UnknownFeatureLevel`].
    pub fn from_feature_level(level: i16) -> Result<Self, MetadataVersionError> {
        match u8::try_from(level) {
            Ok(l @ 1..=23) => Ok(Self::kraft(l)),
            _ => Err(MetadataVersionError::UnknownFeatureLevel(level)),
        }
    }

    /// Parses a version string the way Kafka does: a full name (`3.9-IV0`), a release (`3.9`,
    /// meaning its latest *production* sub-version), and anything with more segments is cut to
    /// the release (`3.9.1` → `3.9`; three segments for `0.x` releases).
    ///
    /// # Errors
    /// [`MetadataVersionError::UnknownVersionString`].
    pub fn from_version_string(input: &str) -> Result<Self, MetadataVersionError> {
        let segments: Vec<&str> = input.split('.').collect();
        let wanted = if input.starts_with("0.") { 3 } else { 2 };
        let key = if wanted >= segments.len() {
            input.to_owned()
        } else {
            segments[..wanted].join(".")
        };
        // A release (`3.9`) means its latest production sub-version; otherwise a full name.
        Self::all()
            .filter(|v| v.is_production() && v.release() == key)
            .max()
            .or_else(|| Self::all().find(|v| v.version() == key))
            .ok_or(MetadataVersionError::UnknownVersionString(input.to_owned()))
    }

    /// `LeaderRecoveryState` in partition records and RPCs (KIP-704).
    #[must_use]
    pub fn is_leader_recovery_supported(self) -> bool {
        self >= Self::IBP_3_2_IV0
    }
    /// `BrokerRegistrationChangeRecord` replaces Fence/UnfenceBrokerRecord.
    #[must_use]
    pub fn is_broker_registration_change_record_supported(self) -> bool {
        self >= Self::IBP_3_3_IV2
    }
    /// `InControlledShutdown` in broker registration records (KIP-841).
    #[must_use]
    pub fn is_in_controlled_shutdown_state_supported(self) -> bool {
        self >= Self::IBP_3_3_IV3
    }
    /// Delegation tokens in the metadata log.
    #[must_use]
    pub fn is_delegation_token_supported(self) -> bool {
        self >= Self::IBP_3_6_IV2
    }
    /// Below 3.6-IV0 the controller bumps the leader epoch when it shrinks an ISR.
    #[must_use]
    pub fn is_leader_epoch_bump_required_on_isr_shrink(self) -> bool {
        self < Self::IBP_3_6_IV0
    }

    /// Version of `RegisterBrokerRecord` to write.
    #[must_use]
    pub fn register_broker_record_version(self) -> i16 {
        if self.is_directory_assignment_supported() {
            3
        } else if self.is_migration_supported() {
            2
        } else if self.is_in_controlled_shutdown_state_supported() {
            1
        } else {
            0
        }
    }

    /// Version of `PartitionRecord` to write (and of `PartitionChangeRecord`).
    #[must_use]
    pub fn partition_record_version(self) -> i16 {
        if self.is_elr_supported() {
            2
        } else if self.is_directory_assignment_supported() {
            1
        } else {
            0
        }
    }

    /// Version of `PartitionChangeRecord` to write.
    #[must_use]
    pub fn partition_change_record_version(self) -> i16 {
        self.partition_record_version()
    }

    /// Fetch request version a broker uses for replication (KRaft versions only; every KRaft
    /// version is at least 2.7-IV1, which used version 12).
    #[must_use]
    pub fn fetch_request_version(self) -> i16 {
        if self >= Self::IBP_3_9_IV0 {
            17
        } else if self >= Self::IBP_3_7_IV4 {
            16
        } else if self >= Self::IBP_3_5_IV1 {
            15
        } else if self >= Self::IBP_3_5_IV0 {
            14
        } else if self >= Self::IBP_3_1_IV0 {
            13
        } else {
            12
        }
    }

    /// ListOffsets request version a broker uses (KRaft versions only).
    #[must_use]
    pub fn list_offset_request_version(self) -> i16 {
        if self >= Self::IBP_3_9_IV0 {
            9
        } else if self >= Self::IBP_3_5_IV0 {
            8
        } else {
            7
        }
    }

    /// `NoOpRecord` may be written.
    #[must_use]
    pub fn is_noop_record_supported(self) -> bool {
        self >= Self::IBP_3_3_IV1
    }
    /// ZooKeeper migration and its records are available.
    #[must_use]
    pub fn is_migration_supported(self) -> bool {
        self >= Self::IBP_3_4_IV0
    }
    /// SCRAM credentials live in the metadata log.
    #[must_use]
    pub fn is_scram_supported(self) -> bool {
        self >= Self::IBP_3_5_IV2
    }
    /// Begin/End/AbortTransactionRecord may be written.
    #[must_use]
    pub fn is_metadata_transaction_supported(self) -> bool {
        self >= Self::IBP_3_6_IV1
    }
    /// Controllers register with `RegisterControllerRecord`.
    #[must_use]
    pub fn is_controller_registration_supported(self) -> bool {
        self >= Self::IBP_3_7_IV0
    }
    /// JBOD: directory assignment in partition records.
    #[must_use]
    pub fn is_directory_assignment_supported(self) -> bool {
        self >= Self::IBP_3_7_IV2
    }
    /// Eligible leader replicas (KIP-966).
    #[must_use]
    pub fn is_elr_supported(self) -> bool {
        self >= Self::IBP_4_0_IV0
    }
}

impl std::fmt::Display for MetadataVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kraft_levels_are_one_to_twenty_three_in_order() {
        let kraft: Vec<_> = MetadataVersion::all()
            .filter(|v| v.is_kraft_supported())
            .collect();
        assert_eq!(kraft.len(), 23);
        for (i, v) in kraft.iter().enumerate() {
            assert_eq!(i64::from(v.feature_level()), i as i64 + 1, "{v}");
            assert_eq!(
                MetadataVersion::from_feature_level(v.feature_level()),
                Ok(*v)
            );
        }
        assert!(
            MetadataVersion::all()
                .filter(|v| !v.is_kraft_supported())
                .all(|v| v.feature_level() == -1)
        );
    }

    #[test]
    fn names_and_constants_agree_with_kafka() {
        assert_eq!(MetadataVersion::IBP_3_0_IV1.version(), "3.0-IV1");
        assert_eq!(MetadataVersion::IBP_3_3_IV0.version(), "3.3-IV0");
        assert_eq!(MetadataVersion::IBP_3_4_IV0.feature_level(), 8);
        assert_eq!(MetadataVersion::IBP_3_9_IV0.version(), "3.9-IV0");
        assert_eq!(MetadataVersion::LATEST_PRODUCTION.feature_level(), 21);
        assert_eq!(MetadataVersion::IBP_4_0_IV1.feature_level(), 23);
        assert!(MetadataVersion::IBP_3_9_IV0.is_production());
        assert!(!MetadataVersion::IBP_4_0_IV0.is_production());
        assert!(MetadataVersion::IBP_4_0_IV0.did_metadata_change());
        assert!(!MetadataVersion::IBP_3_9_IV0.did_metadata_change());
    }

    #[test]
    fn version_strings_parse_like_kafka() {
        let cases = [
            (
                "3.9",
                "3.9-IV0",
                "a release means its latest production sub-version",
            ),
            ("3.9-IV0", "3.9-IV0", "full name"),
            ("3.9.1", "3.9-IV0", "patch releases are cut to the release"),
            ("3.7", "3.7-IV4", "3.7 has five sub-versions"),
            ("3.3", "3.3-IV3", "3.3 has four sub-versions"),
            ("3.0", "3.0-IV1", "3.0-IV1 is the latest 3.0"),
            ("4.0-IV1", "4.0-IV1", "unstable versions parse by full name"),
            ("2.8", "2.8-IV1", "pre-KRaft versions parse"),
            ("0.10.0", "0.10.0-IV1", "0.x releases have three segments"),
            ("0.8.2", "0.8.2", "versions without a sub-version"),
        ];
        for (input, want, why) in cases {
            let got = MetadataVersion::from_version_string(input).map(|v| v.version());
            assert_eq!(got.as_deref(), Ok(want), "{input}: {why}");
        }
        for bad in ["4.0", "3.10", "", "3.9-IV9", "banana"] {
            assert_eq!(
                MetadataVersion::from_version_string(bad),
                Err(MetadataVersionError::UnknownVersionString(bad.into())),
                "{bad:?}: 4.0 has no production sub-version in 3.9"
            );
        }
    }

    #[test]
    fn record_and_request_versions_follow_the_gates() {
        let cases = [
            (MetadataVersion::IBP_3_0_IV1, 0, 0, 12, 7),
            (MetadataVersion::IBP_3_3_IV3, 1, 0, 13, 7),
            (MetadataVersion::IBP_3_4_IV0, 2, 0, 13, 7),
            (MetadataVersion::IBP_3_5_IV1, 2, 0, 15, 8),
            (MetadataVersion::IBP_3_7_IV2, 3, 1, 15, 8),
            (MetadataVersion::IBP_3_7_IV4, 3, 1, 16, 8),
            (MetadataVersion::IBP_3_9_IV0, 3, 1, 17, 9),
            (MetadataVersion::IBP_4_0_IV0, 3, 2, 17, 9),
        ];
        for (v, register_broker, partition, fetch, list_offsets) in cases {
            assert_eq!(v.register_broker_record_version(), register_broker, "{v}");
            assert_eq!(v.partition_record_version(), partition, "{v}");
            assert_eq!(v.partition_change_record_version(), partition, "{v}");
            assert_eq!(v.fetch_request_version(), fetch, "{v}");
            assert_eq!(v.list_offset_request_version(), list_offsets, "{v}");
        }
        assert!(MetadataVersion::IBP_3_5_IV2.is_leader_epoch_bump_required_on_isr_shrink());
        assert!(!MetadataVersion::IBP_3_6_IV0.is_leader_epoch_bump_required_on_isr_shrink());
    }

    #[test]
    fn unknown_feature_levels_are_rejected() {
        for level in [-1, 0, 24, i16::MAX] {
            assert_eq!(
                MetadataVersion::from_feature_level(level),
                Err(MetadataVersionError::UnknownFeatureLevel(level))
            );
        }
    }
}
