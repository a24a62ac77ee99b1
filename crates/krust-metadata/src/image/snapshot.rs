//! An image to and from the bytes of a KIP-630 snapshot (`<offset>-<epoch>.checkpoint`).
//! No IO: the caller reads and writes files.

use bytes::Bytes;
use krust_raft::snapshot::{
    SnapshotId, SnapshotReadError, SnapshotWriteError, SnapshotWriterOptions, read_snapshot,
    write_snapshot,
};
use thiserror::Error;

use super::{ImageWriteError, MetadataDelta, MetadataImage, MetadataProvenance, ReplayError};
use crate::frame::{ApiMessageAndVersion, FrameError};
use crate::metadata_version::MetadataVersion;

/// Why an image could not be written to or read from snapshot bytes.
#[derive(Debug, Error)]
pub enum ImageSnapshotError {
    /// The image cannot be written at the requested metadata.version.
    #[error(transparent)]
    Write(#[from] ImageWriteError),
    /// A record could not be framed (a record version the writer chose cannot carry a field).
    #[error("encoding snapshot record {index}")]
    Encode {
        /// Index among the data records.
        index: usize,
        /// The cause.
        #[source]
        source: FrameError,
    },
    /// The snapshot writer refused the records.
    #[error("writing the snapshot")]
    SnapshotWrite(#[from] SnapshotWriteError),
    /// The bytes are not a valid snapshot (batches, CRC, header/footer).
    #[error("reading snapshot {snapshot_id:?}")]
    SnapshotRead {
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// The cause.
        #[source]
        source: SnapshotReadError,
    },
    /// A data record is not a valid metadata record.
    #[error("snapshot {snapshot_id:?}: record {index} is not a valid metadata record")]
    Decode {
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Index among the data records.
        index: usize,
        /// The cause.
        #[source]
        source: FrameError,
    },
    /// A record does not fit the image built so far.
    #[error("snapshot {snapshot_id:?}: replaying record {index}")]
    Replay {
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Index among the data records.
        index: usize,
        /// The cause.
        #[source]
        source: ReplayError,
    },
}

/// The snapshot bytes of `image` written at `metadata_version` (loss refused). The snapshot
/// id and header timestamp come from `options`; set them from
/// [`MetadataProvenance::snapshot_id`] and `last_contained_log_time_ms`.
///
/// # Errors
/// [`ImageSnapshotError::Write`], [`ImageSnapshotError::Encode`] or
/// [`ImageSnapshotError::SnapshotWrite`].
pub fn write_image_snapshot(
    image: &MetadataImage,
    metadata_version: MetadataVersion,
    options: SnapshotWriterOptions,
) -> Result<Vec<u8>, ImageSnapshotError> {
    let records = image.to_records(metadata_version)?;
    let values = records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            record
                .encode()
                .map_err(|source| ImageSnapshotError::Encode { index, source })
        })
        .collect::<Result<Vec<Bytes>, _>>()?;
    Ok(write_snapshot(options, values)?)
}

/// Loads the snapshot `snapshot_id` from its bytes: every data record replayed on the empty
/// image. The provenance is (end offset - 1, epoch, the header's last contained log time).
///
/// # Errors
/// [`ImageSnapshotError::SnapshotRead`], [`ImageSnapshotError::Decode`] or
/// [`ImageSnapshotError::Replay`].
pub fn read_image_snapshot(
    bytes: Bytes,
    snapshot_id: SnapshotId,
) -> Result<MetadataImage, ImageSnapshotError> {
    let contents = read_snapshot(bytes, Some(snapshot_id.epoch)).map_err(|source| {
        ImageSnapshotError::SnapshotRead {
            snapshot_id,
            source,
        }
    })?;
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for (index, value) in contents.records.iter().enumerate() {
        let framed =
            ApiMessageAndVersion::decode(value).map_err(|source| ImageSnapshotError::Decode {
                snapshot_id,
                index,
                source,
            })?;
        delta
            .replay(&framed.record)
            .map_err(|source| ImageSnapshotError::Replay {
                snapshot_id,
                index,
                source,
            })?;
    }
    Ok(delta.apply(MetadataProvenance::new(
        snapshot_id.end_offset - 1,
        snapshot_id.epoch,
        contents.header.last_contained_log_timestamp,
    )))
}
