//! `bootstrap.checkpoint`: the records chosen at format time that the first active controller
//! writes into an empty metadata log (facts §4.7; Kafka 3.9 `metadata/bootstrap/`).
//!
//! The file has the snapshot layout of [`krust_raft::snapshot`] with snapshot id (0, 0),
//! `LastContainedLogTimestamp` 0 and kraft.version 0: a header control batch, the records, a
//! footer control batch. Records: the `metadata.version` FeatureLevelRecord first, then one per
//! other feature with a level above 0, by name (never `kraft.version`).

use std::collections::BTreeMap;

use bytes::Bytes;
use krust_raft::snapshot::{
    SnapshotId, SnapshotReadError, SnapshotWriteError, SnapshotWriterOptions, read_snapshot,
    write_snapshot,
};
use thiserror::Error;

use crate::features::KRAFT_VERSION;
use crate::frame::{ApiMessageAndVersion, FrameError};
use crate::metadata_version::{self, MetadataVersion, MetadataVersionError};
use crate::records::{FeatureLevelRecord, MetadataRecord};

/// The file name, in every formatted log directory (only the metadata directory's is read).
pub const BOOTSTRAP_FILE_NAME: &str = "bootstrap.checkpoint";

/// Why bootstrap metadata is unusable. Messages follow Kafka's.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// No `metadata.version` FeatureLevelRecord among the records.
    #[error(
        "No FeatureLevelRecord for metadata.version was found in the bootstrap metadata from {source_name}"
    )]
    NoMetadataVersion {
        /// Where the records came from.
        source_name: String,
    },
    /// The metadata.version is below 3.3-IV0.
    #[error(
        "Bootstrap metadata.version before 3.3-IV0 are not supported. Can't load metadata from {source_name}"
    )]
    TooOld {
        /// Where the records came from.
        source_name: String,
    },
    /// The metadata.version record holds an unknown level.
    #[error(transparent)]
    UnknownMetadataVersion(#[from] MetadataVersionError),
    /// `--add-scram` below metadata.version 3.5-IV2.
    #[error("SCRAM is only supported in metadata.version 3.5-IV2 or later.")]
    ScramNotSupported,
    /// The file is not a valid snapshot.
    #[error("invalid bootstrap file from {source_name}")]
    Snapshot {
        /// Where the bytes came from.
        source_name: String,
        /// What the snapshot reader found.
        #[source]
        source: SnapshotReadError,
    },
    /// A record in the file is not a valid metadata record.
    #[error("invalid record {index} in bootstrap file from {source_name}")]
    Record {
        /// Where the bytes came from.
        source_name: String,
        /// Index among the data records.
        index: usize,
        /// What the frame decoder found.
        #[source]
        source: FrameError,
    },
    /// Encoding failed (a caller bug, e.g. a record at a version it does not have).
    #[error("encoding bootstrap records")]
    Encode(#[from] FrameError),
    /// Writing the snapshot layout failed.
    #[error("writing the bootstrap snapshot")]
    Write(#[from] SnapshotWriteError),
}

/// The records a cluster is bootstrapped with, and the metadata.version among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapMetadata {
    records: Vec<ApiMessageAndVersion>,
    metadata_version: MetadataVersion,
    source: String,
}

impl BootstrapMetadata {
    /// Records for `metadata_version` and `feature_levels` (name → level; `metadata.version` and
    /// `kraft.version` entries are ignored, levels ≤ 0 write nothing).
    ///
    /// # Errors
    /// [`BootstrapError::TooOld`] below 3.3-IV0.
    pub fn from_versions(
        metadata_version: MetadataVersion,
        feature_levels: &BTreeMap<String, i16>,
        source: &str,
    ) -> Result<Self, BootstrapError> {
        let mut records = vec![feature_level(
            metadata_version::FEATURE_NAME,
            metadata_version.feature_level(),
        )];
        // BTreeMap iterates by name, which is the order Kafka writes.
        for (name, level) in feature_levels {
            if name != metadata_version::FEATURE_NAME && name != KRAFT_VERSION && *level > 0 {
                records.push(feature_level(name, *level));
            }
        }
        Self::new(records, metadata_version, source)
    }

    /// Takes the metadata.version from the last `metadata.version` FeatureLevelRecord.
    ///
    /// # Errors
    /// [`BootstrapError::NoMetadataVersion`], [`BootstrapError::UnknownMetadataVersion`] or
    /// [`BootstrapError::TooOld`].
    pub fn from_records(
        records: Vec<ApiMessageAndVersion>,
        source: &str,
    ) -> Result<Self, BootstrapError> {
        let mut level = None;
        for record in &records {
            if let MetadataRecord::FeatureLevel(r) = &record.record
                && r.name == metadata_version::FEATURE_NAME
            {
                level = Some(r.feature_level);
            }
        }
        let level = level.ok_or_else(|| BootstrapError::NoMetadataVersion {
            source_name: source.to_owned(),
        })?;
        let metadata_version = MetadataVersion::from_feature_level(level)?;
        Self::new(records, metadata_version, source)
    }

    fn new(
        records: Vec<ApiMessageAndVersion>,
        metadata_version: MetadataVersion,
        source: &str,
    ) -> Result<Self, BootstrapError> {
        if metadata_version < MetadataVersion::MINIMUM_BOOTSTRAP_VERSION {
            return Err(BootstrapError::TooOld {
                source_name: source.to_owned(),
            });
        }
        Ok(Self {
            records,
            metadata_version,
            source: source.to_owned(),
        })
    }

    /// Appends records after the feature levels (e.g. `UserScramCredentialRecord`s from
    /// `--add-scram`).
    ///
    /// # Errors
    /// [`BootstrapError::ScramNotSupported`] for SCRAM records below 3.5-IV2.
    pub fn with_records(
        mut self,
        records: Vec<ApiMessageAndVersion>,
    ) -> Result<Self, BootstrapError> {
        let has_scram = records
            .iter()
            .any(|r| matches!(r.record, MetadataRecord::UserScramCredential(_)));
        if has_scram && !self.metadata_version.is_scram_supported() {
            return Err(BootstrapError::ScramNotSupported);
        }
        self.records.extend(records);
        Ok(self)
    }

    /// The records, in write order.
    #[must_use]
    pub fn records(&self) -> &[ApiMessageAndVersion] {
        &self.records
    }

    /// The bootstrapped metadata.version.
    #[must_use]
    pub fn metadata_version(&self) -> MetadataVersion {
        self.metadata_version
    }

    /// Where these records came from (for messages).
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The `bootstrap.checkpoint` bytes. `append_timestamp_ms` becomes every batch timestamp
    /// (Kafka uses the wall clock, so two formats never give identical bytes).
    ///
    /// # Errors
    /// [`BootstrapError::Encode`] or [`BootstrapError::Write`].
    pub fn to_checkpoint_bytes(&self, append_timestamp_ms: i64) -> Result<Vec<u8>, BootstrapError> {
        let mut options = SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP);
        options.append_timestamp_ms = append_timestamp_ms;
        let values = self
            .records
            .iter()
            .map(ApiMessageAndVersion::encode)
            .collect::<Result<Vec<Bytes>, FrameError>>()?;
        Ok(write_snapshot(options, values)?)
    }

    /// Reads `bootstrap.checkpoint` bytes; `source` names the file in messages.
    ///
    /// # Errors
    /// [`BootstrapError::Snapshot`], [`BootstrapError::Record`] or the `from_records` errors.
    pub fn from_checkpoint_bytes(bytes: Bytes, source: &str) -> Result<Self, BootstrapError> {
        let source_name = format!("the binary bootstrap metadata file: {source}");
        let contents = read_snapshot(bytes, None).map_err(|e| BootstrapError::Snapshot {
            source_name: source_name.clone(),
            source: e,
        })?;
        let records = contents
            .records
            .iter()
            .enumerate()
            .map(|(index, value)| {
                ApiMessageAndVersion::decode(value).map_err(|e| BootstrapError::Record {
                    source_name: source_name.clone(),
                    index,
                    source: e,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_records(records, &source_name)
    }

    /// The bootstrap used when `bootstrap.checkpoint` is missing (Kafka's
    /// `BootstrapDirectory.readFromConfiguration`): `inter.broker.protocol.version` raised to at
    /// least 3.3-IV0, else the latest production version.
    ///
    /// # Errors
    /// [`BootstrapError::UnknownMetadataVersion`] for an unparseable version string.
    pub fn from_configuration(
        inter_broker_protocol_version: Option<&str>,
    ) -> Result<Self, BootstrapError> {
        let Some(text) = inter_broker_protocol_version else {
            return Self::from_versions(
                MetadataVersion::LATEST_PRODUCTION,
                &BTreeMap::new(),
                "the default bootstrap",
            );
        };
        let version = MetadataVersion::from_version_string(text)?;
        if version < MetadataVersion::MINIMUM_BOOTSTRAP_VERSION {
            let floor = MetadataVersion::MINIMUM_BOOTSTRAP_VERSION;
            return Self::from_versions(
                floor,
                &BTreeMap::new(),
                &format!("the minimum version bootstrap with metadata.version {floor}"),
            );
        }
        Self::from_versions(
            version,
            &BTreeMap::new(),
            &format!("the configured bootstrap with metadata.version {version}"),
        )
    }
}

fn feature_level(name: &str, level: i16) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new(name, level)),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bootstrap.checkpoint` as written by Kafka 3.9.1's `kafka-storage format` (release 3.9).
    const KAFKA_BOOTSTRAP: &str = "\
        00000000000000000000004700000000029ab7deb3002000000000000001a227c70e20000001a227c70e20ff\
        ffffffffffffffffffffffffff000000012a0000000800000003160000000000000000000000000000000000\
        0000010000004f0000000002ec229c1f000000000000000001a227c70e3a000001a227c70e3affffffffffff\
        ffffffffffffffff000000013a000000012e010c00116d657461646174612e76657273696f6e001500000000\
        0000000000020000003f000000000299496a9f002000000000000001a227c70e3b000001a227c70e3bffffff\
        ffffffffffffffffffffff000000011a00000008000000040600000000";

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| {
                let s = std::str::from_utf8(pair).expect("ascii");
                u8::from_str_radix(s, 16).expect("hex")
            })
            .collect()
    }

    #[test]
    fn reads_the_file_kafka_wrote() {
        let bootstrap =
            BootstrapMetadata::from_checkpoint_bytes(Bytes::from(hex(KAFKA_BOOTSTRAP)), "kafka")
                .expect("Kafka's file is valid");
        assert_eq!(bootstrap.metadata_version(), MetadataVersion::IBP_3_9_IV0);
        assert_eq!(bootstrap.records().len(), 1);
    }

    #[test]
    fn writes_what_kafka_writes_up_to_timestamps() {
        let ours = BootstrapMetadata::from_versions(
            MetadataVersion::IBP_3_9_IV0,
            &BTreeMap::new(),
            "test",
        )
        .expect("3.9 is bootstrappable")
        .to_checkpoint_bytes(0x01a2_27c7_0e20)
        .expect("encodes");
        let kafka = hex(KAFKA_BOOTSTRAP);
        assert_eq!(ours.len(), kafka.len());
        // Kafka stamps each batch with the wall clock at the time it was built; with a single
        // timestamp, only the first batch is identical. The rest differ only in the two
        // timestamps and the CRC that covers them.
        assert_eq!(ours[..0x47 + 12], kafka[..0x47 + 12]);
    }

    #[test]
    fn round_trip_with_features() {
        let levels: BTreeMap<String, i16> = [
            ("kraft.version".to_owned(), 1),
            ("metadata.version".to_owned(), 22),
            ("transaction.version".to_owned(), 2),
            ("zz.version".to_owned(), 0),
        ]
        .into_iter()
        .collect();
        let bootstrap =
            BootstrapMetadata::from_versions(MetadataVersion::IBP_4_0_IV0, &levels, "test")
                .expect("valid");
        let names: Vec<_> = bootstrap
            .records()
            .iter()
            .map(|r| match &r.record {
                MetadataRecord::FeatureLevel(f) => (f.name.clone(), f.feature_level),
                _ => (String::new(), -1),
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("metadata.version".to_owned(), 22),
                ("transaction.version".to_owned(), 2)
            ]
        );
        let bytes = bootstrap.to_checkpoint_bytes(7).expect("encodes");
        let back =
            BootstrapMetadata::from_checkpoint_bytes(Bytes::from(bytes), "x").expect("decodes");
        assert_eq!(back.records(), bootstrap.records());
    }

    #[test]
    fn rejects_too_old_and_missing_versions() {
        let err = BootstrapMetadata::from_versions(
            MetadataVersion::IBP_3_2_IV0,
            &BTreeMap::new(),
            "format command",
        )
        .expect_err("3.2 is too old");
        assert_eq!(
            err.to_string(),
            "Bootstrap metadata.version before 3.3-IV0 are not supported. Can't load metadata from format command"
        );
        let err = BootstrapMetadata::from_records(Vec::new(), "x").expect_err("empty");
        assert!(matches!(err, BootstrapError::NoMetadataVersion { .. }));
        let corrupt = {
            let mut b = hex(KAFKA_BOOTSTRAP);
            let last = b.len() - 1;
            b[last] ^= 1;
            b
        };
        assert!(matches!(
            BootstrapMetadata::from_checkpoint_bytes(Bytes::from(corrupt), "x"),
            Err(BootstrapError::Snapshot { .. })
        ));
    }

    #[test]
    fn configuration_fallback() {
        let default = BootstrapMetadata::from_configuration(None).expect("default");
        assert_eq!(
            default.metadata_version(),
            MetadataVersion::LATEST_PRODUCTION
        );
        let old = BootstrapMetadata::from_configuration(Some("3.0")).expect("raised");
        assert_eq!(old.metadata_version(), MetadataVersion::IBP_3_3_IV0);
        let set = BootstrapMetadata::from_configuration(Some("3.7-IV2")).expect("configured");
        assert_eq!(set.metadata_version(), MetadataVersion::IBP_3_7_IV2);
    }
}
