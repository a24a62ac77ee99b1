//! Kafka's small text files next to the segments, in Kafka 3.9's exact formats:
//!
//! - per log dir: `recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
//!   `log-start-offset-checkpoint` — line `0`, line `<count>`, then `<topic> <partition> <offset>`
//!   lines ([`read_offset_checkpoint`], [`write_offset_checkpoint`]);
//! - per partition: `leader-epoch-checkpoint` — line `0`, count, `<epoch> <startOffset>` lines
//!   (see [`crate::leader_epoch`]); `partition.metadata` — `version: 0` and
//!   `topic_id: <base64 uuid>` ([`PartitionMetadata`]).
//!
//! All are written with [`crate::fs::write_atomically`] (tmp → fsync → rename → fsync dir).
//! Parse errors carry the file and the 1-based line number.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;

use crate::fs::write_atomically;

/// File name of the per-log-dir recovery point checkpoint.
pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// File name of the per-log-dir high watermark checkpoint.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// File name of the per-log-dir log start offset checkpoint.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
/// File name of the per-partition leader epoch checkpoint.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// File name of the per-partition topic id file.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

const CHECKPOINT_VERSION: i32 = 0;
/// Upper bound on entries we accept from a checkpoint's count line, so a corrupt count cannot
/// make us allocate without limit.
const MAX_CHECKPOINT_ENTRIES: usize = 10_000_000;

/// What is wrong on a line of a checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointDefect {
    /// The file ended before the version line, the count line or a declared entry.
    MissingLine,
    /// The version line is not `0`.
    UnsupportedVersion(String),
    /// The count line is not a non-negative integer (or is absurdly large).
    InvalidCount(String),
    /// An entry line does not have the expected fields.
    MalformedEntry(String),
    /// More lines than the count line declared.
    ExtraLine(String),
    /// `partition.metadata`: a key other than the expected one.
    UnexpectedKey(String),
    /// `partition.metadata`: the topic id is not 22 characters of URL-safe base64.
    InvalidTopicId(String),
}

impl fmt::Display for CheckpointDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointDefect::MissingLine => write!(f, "file ends early"),
            CheckpointDefect::UnsupportedVersion(s) => write!(f, "unrecognized version {s:?}"),
            CheckpointDefect::InvalidCount(s) => write!(f, "invalid entry count {s:?}"),
            CheckpointDefect::MalformedEntry(s) => write!(f, "malformed entry {s:?}"),
            CheckpointDefect::ExtraLine(s) => write!(f, "more entries than declared: {s:?}"),
            CheckpointDefect::UnexpectedKey(s) => write!(f, "unexpected key {s:?}"),
            CheckpointDefect::InvalidTopicId(s) => write!(f, "invalid topic id {s:?}"),
        }
    }
}

/// A checkpoint file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The contents are malformed. Kafka fails the log dir in this case; so should the caller.
    #[error("{path}:{line}: {defect}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        defect: CheckpointDefect,
    },
    /// The disk failed.
    #[error("I/O error on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// A partition as named in the per-log-dir checkpoint files.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name (never contains whitespace).
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `TopicPartition { topic, partition }`.
    #[must_use]
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// Reads a file of the shape `0` / `<count>` / `<count>` entry lines, parsing each entry with
/// `parse_entry`. A missing file reads as no entries (Kafka creates it empty).
pub(crate) fn read_versioned_entries<T>(
    path: &Path,
    parse_entry: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, CheckpointError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let parse_err = |line: usize, defect: CheckpointDefect| CheckpointError::Parse {
        path: path.to_path_buf(),
        line,
        defect,
    };
    let text = String::from_utf8_lossy(&text);
    let mut lines = text.lines();
    // Kafka's `CheckpointFile` creates the file empty when it opens it (a ZooKeeper-mode
    // broker leaves an empty `cleaner-offset-checkpoint`, a replica that never had a leader an
    // empty `leader-epoch-checkpoint`) and reads an empty file as no entries.
    let Some(version) = lines.next() else {
        return Ok(Vec::new());
    };
    if version.trim().parse::<i32>() != Ok(CHECKPOINT_VERSION) {
        return Err(parse_err(
            1,
            CheckpointDefect::UnsupportedVersion(version.to_string()),
        ));
    }
    let count_line = lines
        .next()
        .ok_or_else(|| parse_err(2, CheckpointDefect::MissingLine))?;
    let count = count_line
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n <= MAX_CHECKPOINT_ENTRIES)
        .ok_or_else(|| parse_err(2, CheckpointDefect::InvalidCount(count_line.to_string())))?;
    let mut entries = Vec::with_capacity(count.min(1024));
    for i in 0..count {
        let line_no = i + 3;
        let line = lines
            .next()
            .ok_or_else(|| parse_err(line_no, CheckpointDefect::MissingLine))?;
        let entry = parse_entry(line).ok_or_else(|| {
            parse_err(line_no, CheckpointDefect::MalformedEntry(line.to_string()))
        })?;
        entries.push(entry);
    }
    if let Some(extra) = lines.next() {
        return Err(parse_err(
            count + 3,
            CheckpointDefect::ExtraLine(extra.to_string()),
        ));
    }
    Ok(entries)
}

/// Renders `0` / count / entries, each line ending in `\n` (Kafka's `CheckpointFile` writer).
pub(crate) fn render_versioned_entries(entries: impl ExactSizeIterator<Item = String>) -> String {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        out.push_str(&e);
        out.push('\n');
    }
    out
}

fn parse_offset_entry(line: &str) -> Option<(TopicPartition, i64)> {
    let mut fields = line.split_whitespace();
    let topic = fields.next()?;
    let partition = fields.next()?.parse().ok()?;
    let offset = fields.next()?.parse().ok()?;
    if fields.next().is_some() {
        return None;
    }
    Some((TopicPartition::new(topic, partition), offset))
}

/// Reads an offset checkpoint (`recovery-point-offset-checkpoint`, …). A missing file is empty.
///
/// # Errors
/// [`CheckpointError::Parse`] with the line, or [`CheckpointError::Io`].
pub fn read_offset_checkpoint(
    path: &Path,
) -> Result<BTreeMap<TopicPartition, i64>, CheckpointError> {
    Ok(read_versioned_entries(path, parse_offset_entry)?
        .into_iter()
        .collect())
}

/// Writes an offset checkpoint atomically and durably.
///
/// # Errors
/// [`CheckpointError::Io`].
pub fn write_offset_checkpoint(
    path: &Path,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<(), CheckpointError> {
    let text = render_versioned_entries(
        offsets
            .iter()
            .map(|(tp, offset)| format!("{} {} {offset}", tp.topic, tp.partition)),
    );
    write_atomically(path, text.as_bytes()).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Contents of `partition.metadata`: the partition's topic id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The 16 bytes of the topic's UUID (big-endian most/least significant halves).
    pub topic_id: [u8; 16],
}

impl PartitionMetadata {
    /// The topic id as Kafka prints it: URL-safe base64 without padding (22 characters).
    #[must_use]
    pub fn topic_id_base64(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.topic_id)
    }

    /// `version: 0\ntopic_id: <id>\n`.
    #[must_use]
    pub fn render(&self) -> String {
        format!("version: 0\ntopic_id: {}\n", self.topic_id_base64())
    }

    /// Reads `dir/partition.metadata`; `Ok(None)` if it does not exist.
    ///
    /// # Errors
    /// [`CheckpointError::Parse`] with the line, or [`CheckpointError::Io`].
    pub fn read(dir: &Path) -> Result<Option<PartitionMetadata>, CheckpointError> {
        let path = dir.join(PARTITION_METADATA_FILE);
        let text = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Io { path, source }),
        };
        let err = |line: usize, defect: CheckpointDefect| CheckpointError::Parse {
            path: path.clone(),
            line,
            defect,
        };
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.lines();
        let version = lines
            .next()
            .ok_or_else(|| err(1, CheckpointDefect::MissingLine))?;
        let value = key_value(version, "version")
            .ok_or_else(|| err(1, CheckpointDefect::UnexpectedKey(version.to_string())))?;
        if value != "0" {
            return Err(err(
                1,
                CheckpointDefect::UnsupportedVersion(value.to_string()),
            ));
        }
        let id_line = lines
            .next()
            .ok_or_else(|| err(2, CheckpointDefect::MissingLine))?;
        let id = key_value(id_line, "topic_id")
            .ok_or_else(|| err(2, CheckpointDefect::UnexpectedKey(id_line.to_string())))?;
        let topic_id = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(id)
            .ok()
            .and_then(|v| <[u8; 16]>::try_from(v).ok())
            .ok_or_else(|| err(2, CheckpointDefect::InvalidTopicId(id.to_string())))?;
        Ok(Some(PartitionMetadata { topic_id }))
    }

    /// Writes `dir/partition.metadata` atomically and durably.
    ///
    /// # Errors
    /// [`CheckpointError::Io`].
    pub fn write(&self, dir: &Path) -> Result<(), CheckpointError> {
        let path = dir.join(PARTITION_METADATA_FILE);
        write_atomically(&path, self.render().as_bytes())
            .map_err(|source| CheckpointError::Io { path, source })
    }
}

fn key_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = line.split_once(':')?;
    (k.trim() == key).then(|| v.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_checkpoint_round_trips_in_kafka_text_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(RECOVERY_POINT_CHECKPOINT_FILE);
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("__cluster_metadata", 0), 42);
        offsets.insert(TopicPartition::new("orders", 3), 7);
        write_offset_checkpoint(&path, &offsets).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "0\n2\n__cluster_metadata 0 42\norders 3 7\n"
        );
        assert_eq!(read_offset_checkpoint(&path).expect("parse"), offsets);
        assert!(
            read_offset_checkpoint(&dir.path().join("absent"))
                .expect("missing is empty")
                .is_empty()
        );
    }

    #[test]
    fn offset_checkpoint_parse_errors_name_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cp");
        let cases = [
            ("1\n0\n", 1, "unsupported version"),
            ("0\nx\n", 2, "bad count"),
            ("0\n2\nt 0 1\n", 4, "too few entries"),
            ("0\n1\nt 0\n", 3, "missing offset"),
            ("0\n1\nt zero 1\n", 3, "partition not a number"),
            ("0\n1\nt 0 1\nt 1 2\n", 4, "too many entries"),
            ("\n", 1, "an empty version line"),
        ];
        for (text, line, why) in cases {
            std::fs::write(&path, text).expect("write");
            match read_offset_checkpoint(&path) {
                Err(CheckpointError::Parse { line: got, .. }) => assert_eq!(got, line, "{why}"),
                other => panic!("{why}: expected a parse error, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_empty_file_has_no_entries_as_in_kafka() {
        // Kafka's `CheckpointFile` creates its file empty; a ZooKeeper-mode broker leaves an
        // empty `cleaner-offset-checkpoint` when nothing was cleaned.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cleaner-offset-checkpoint");
        std::fs::write(&path, "").expect("write");
        assert!(read_offset_checkpoint(&path).expect("empty").is_empty());
        std::fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE), "").expect("write");
        let cache = crate::LeaderEpochCache::load(dir.path()).expect("empty epoch checkpoint");
        assert!(cache.entries().is_empty());
    }

    #[test]
    fn partition_metadata_matches_kafka_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut topic_id = [0u8; 16];
        topic_id[15] = 1;
        let meta = PartitionMetadata { topic_id };
        meta.write(dir.path()).expect("write");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(PARTITION_METADATA_FILE)).expect("read"),
            "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
        );
        assert_eq!(
            PartitionMetadata::read(dir.path()).expect("read"),
            Some(meta)
        );
        std::fs::write(
            dir.path().join(PARTITION_METADATA_FILE),
            "version: 0\ntopic_id: nope\n",
        )
        .expect("write");
        assert!(matches!(
            PartitionMetadata::read(dir.path()),
            Err(CheckpointError::Parse { line: 2, .. })
        ));
    }
}
