//! Writing an image out as records (a snapshot's contents), Kafka's `image/writer/`.
//!
//! Every sub-image writes itself in the order of facts §4.4 with record versions chosen by the
//! target `metadata.version`. Whatever that version cannot carry (e.g. SCRAM credentials below
//! 3.5-IV2) is *metadata loss*: by default an error (Kafka's `UnwritableMetadataException`), or
//! reported to a callback when the caller accepts loss (a downgrade with `--unsafe`).

use thiserror::Error;

use crate::frame::ApiMessageAndVersion;
use crate::metadata_version::MetadataVersion;
use crate::records::MetadataRecord;

/// Where written records go.
pub trait RecordSink {
    /// Takes the next record, in snapshot order.
    fn write(&mut self, record: ApiMessageAndVersion);
}

impl RecordSink for Vec<ApiMessageAndVersion> {
    fn write(&mut self, record: ApiMessageAndVersion) {
        self.push(record);
    }
}

/// Why an image could not be written at a metadata.version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImageWriteError {
    /// The image holds something the target metadata.version cannot represent. Remedy: write
    /// at a newer metadata.version, or accept the loss with [`ImageWriterOptions::lossy`].
    #[error(
        "Metadata has been lost because the following could not be represented in metadata.version {metadata_version}: {what}"
    )]
    MetadataLoss {
        /// The target version.
        metadata_version: MetadataVersion,
        /// What would be lost (Kafka's wording).
        what: String,
    },
}

/// How an image is written: the target metadata.version and what to do about loss.
pub struct ImageWriterOptions<'a> {
    /// Record versions and gated records follow this version; it is also the
    /// `metadata.version` FeatureLevelRecord written first.
    pub metadata_version: MetadataVersion,
    on_loss: Option<&'a mut dyn FnMut(&str)>,
}

impl std::fmt::Debug for ImageWriterOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageWriterOptions")
            .field("metadata_version", &self.metadata_version)
            .field("lossy", &self.on_loss.is_some())
            .finish()
    }
}

impl<'a> ImageWriterOptions<'a> {
    /// Writes at `metadata_version`; any loss is an [`ImageWriteError::MetadataLoss`].
    #[must_use]
    pub fn new(metadata_version: MetadataVersion) -> Self {
        Self {
            metadata_version,
            on_loss: None,
        }
    }

    /// Writes at `metadata_version`, telling `on_loss` what could not be represented and
    /// carrying on without it.
    #[must_use]
    pub fn lossy(metadata_version: MetadataVersion, on_loss: &'a mut dyn FnMut(&str)) -> Self {
        Self {
            metadata_version,
            on_loss: Some(on_loss),
        }
    }

    /// Reports that `what` cannot be written.
    pub(crate) fn handle_loss(&mut self, what: &str) -> Result<(), ImageWriteError> {
        match &mut self.on_loss {
            Some(on_loss) => {
                on_loss(what);
                Ok(())
            }
            None => Err(ImageWriteError::MetadataLoss {
                metadata_version: self.metadata_version,
                what: what.to_owned(),
            }),
        }
    }
}

/// Writes `record` at `version` into `sink`.
pub(crate) fn emit(sink: &mut dyn RecordSink, record: MetadataRecord, version: i16) {
    sink.write(ApiMessageAndVersion::new(record, version));
}
