//! Loading the image the shell browses.
//!
//! `--snapshot <file>` reads the file as a run of batches, like Kafka 3.9's shell
//! (`SnapshotFileReader`): a `.checkpoint` or a `.log` segment alike, data batches replayed
//! through the KIP-868 batch loader with their in-file offsets, control batches skipped, so the
//! provenance is the last data batch's (last offset, leader epoch, append time).
//! `--directory <dir>` loads the latest frozen snapshot of a `__cluster_metadata-0` directory
//! and then every segment batch after the snapshot's end offset.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_metadata::image::MetadataBatchLoader;
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_raft::snapshot::{SnapshotFileKind, SnapshotFileName};

/// Largest batch accepted (a Raft batch is at most 8 MiB; Kafka's reader takes any size).
const MAX_BATCH_BYTES: usize = i32::MAX as usize;

fn read(path: &Path) -> anyhow::Result<Bytes> {
    Ok(Bytes::from(
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    ))
}

/// Replays the data batches of `bytes` (a segment or snapshot file) whose last offset is at or
/// above `from_offset`. Problems (a torn tail, an undecodable record, a record that does not
/// fit the image) go to `warnings` and the load goes on, as Kafka's shell logs them.
fn load_batches(
    loader: &mut MetadataBatchLoader,
    bytes: Bytes,
    from_offset: i64,
    name: &str,
    warnings: &mut impl Write,
) -> anyhow::Result<()> {
    let mut rest = bytes;
    let mut position = 0usize;
    while !rest.is_empty() {
        let (batch, tail) = match RecordBatch::parse(rest.clone(), MAX_BATCH_BYTES) {
            Ok(parsed) => parsed,
            Err(e) => {
                writeln!(
                    warnings,
                    "{name}: stopped reading at position {position}: {e}"
                )?;
                break;
            }
        };
        position += batch.size_in_bytes();
        rest = tail;
        if batch.is_control() || batch.last_offset() < from_offset {
            continue;
        }
        let records = match batch.records() {
            Ok(records) => records,
            Err(e) => {
                writeln!(
                    warnings,
                    "{name}: batch at offset {}: {e}",
                    batch.base_offset()
                )?;
                continue;
            }
        };
        let mut decoded: Vec<MetadataRecord> = Vec::with_capacity(records.len());
        for record in &records {
            let offset = batch.base_offset() + i64::from(record.offset_delta);
            match record.value.as_deref().map(ApiMessageAndVersion::decode) {
                Some(Ok(framed)) => decoded.push(framed.record),
                Some(Err(e)) => writeln!(warnings, "{name}: record at offset {offset}: {e}")?,
                None => writeln!(warnings, "{name}: record at offset {offset} has no value")?,
            }
        }
        let outcome = loader.load_batch(
            batch.base_offset(),
            batch.partition_leader_epoch(),
            batch.max_timestamp(),
            &decoded,
        );
        for fault in outcome.faults {
            writeln!(warnings, "{name}: {fault}")?;
        }
    }
    Ok(())
}

fn finish(mut loader: MetadataBatchLoader) -> MetadataImage {
    match loader.maybe_flush() {
        Some(publication) => publication.image,
        None => loader.image().clone(),
    }
}

/// The image of one snapshot or segment file, read as a log.
///
/// # Errors
/// The file cannot be read.
pub fn load_file(path: &Path, warnings: &mut impl Write) -> anyhow::Result<MetadataImage> {
    let bytes = read(path)?;
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    let name = path.display().to_string();
    load_batches(&mut loader, bytes, 0, &name, warnings)?;
    Ok(finish(loader))
}

/// The image of a metadata log directory: the latest `.checkpoint`, then the segments' batches
/// after it.
///
/// # Errors
/// The directory or one of its files cannot be read, or the latest snapshot is invalid.
pub fn load_directory(dir: &Path, warnings: &mut impl Write) -> anyhow::Result<MetadataImage> {
    let mut snapshots = Vec::new();
    let mut segments: Vec<(i64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Ok(Some(parsed)) = SnapshotFileName::parse(&name)
            && parsed.kind == SnapshotFileKind::Frozen
        {
            snapshots.push((parsed.id, entry.path()));
        } else if let Some(base) = name
            .strip_suffix(".log")
            .and_then(|s| s.parse::<i64>().ok())
        {
            segments.push((base, entry.path()));
        }
    }
    snapshots.sort();
    segments.sort();
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    let mut from_offset = 0;
    if let Some((id, path)) = snapshots.last() {
        let contents = krust_raft::snapshot::read_snapshot(read(path)?, Some(id.epoch))
            .with_context(|| format!("reading snapshot {}", path.display()))?;
        let mut records = Vec::with_capacity(contents.records.len());
        for (index, value) in contents.records.iter().enumerate() {
            let framed = ApiMessageAndVersion::decode(value)
                .with_context(|| format!("{}: data record {index}", path.display()))?;
            records.push(framed.record);
        }
        let provenance = MetadataProvenance::new(
            id.end_offset - 1,
            id.epoch,
            contents.header.last_contained_log_timestamp,
        );
        let (_, faults) = loader.load_snapshot(&records, provenance);
        for fault in faults {
            writeln!(warnings, "{}: {fault}", path.display())?;
        }
        from_offset = id.end_offset;
    }
    for (_, path) in &segments {
        let name = path.display().to_string();
        load_batches(&mut loader, read(path)?, from_offset, &name, warnings)?;
    }
    Ok(finish(loader))
}
