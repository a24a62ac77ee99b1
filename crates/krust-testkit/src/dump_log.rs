//! Runs Kafka 3.9's `kafka.tools.DumpLogSegments` (`kafka-dump-log.sh`) and parses what it
//! prints, so tests can assert on Kafka's own reading of files that krust wrote.
//!
//! Output layout (3.9, `--deep-iteration --print-data-log`), one block per file:
//!
//! ```text
//! Dumping /path/00000000000000000000.log
//! Log starting offset: 0
//! baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000001 size: 77 magic: 2 compresscodec: none crc: 136592920 isvalid: true
//! | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [h1,h2] key: k payload: a
//! Found 5 invalid bytes at the end of 00000000000000000000.log
//! Dumping /path/00000000000000000000.index
//! offset: 0 position: 0            (or "<file> is empty." / "<file> passed sanity check.")
//! Dumping /path/00000000000000000000.timeindex
//! timestamp: 1700000000001 offset: 1
//! ```
//!
//! Index problems go to **stderr** after all files: `Mismatches in :<file>` (an offset-index
//! entry whose batch's last offset differs), `Found timestamp mismatch in :<file>`,
//! `Found out of order timestamp in :<file>`, `The following indexed offsets are not found in the
//! log.`, `Non-consecutive offsets in <file>`. [`DumpLog::problems`] collects them.

use std::path::Path;
use std::time::Duration;

use crate::dist::{KafkaDist, class};
use crate::error::Result;

/// One batch line of the dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpedBatch {
    /// `baseOffset`.
    pub base_offset: i64,
    /// `lastOffset`.
    pub last_offset: i64,
    /// `count` (Kafka prints `null` for legacy batches; `None` then).
    pub count: Option<i64>,
    /// `baseSequence`.
    pub base_sequence: i64,
    /// `lastSequence`.
    pub last_sequence: i64,
    /// `producerId`.
    pub producer_id: i64,
    /// `producerEpoch`.
    pub producer_epoch: i64,
    /// `partitionLeaderEpoch`.
    pub partition_leader_epoch: i64,
    /// `isTransactional`.
    pub is_transactional: bool,
    /// `isControl`.
    pub is_control: bool,
    /// `deleteHorizonMs` as printed (`OptionalLong.empty` or `OptionalLong[<ms>]`).
    pub delete_horizon_ms: String,
    /// `position`: byte position of the batch in the file.
    pub position: u64,
    /// `CreateTime` or `LogAppendTime` (the label of the max timestamp).
    pub timestamp_type: String,
    /// The batch's max timestamp.
    pub max_timestamp: i64,
    /// `size` in bytes (whole batch including the 12-byte log overhead).
    pub size: u64,
    /// `magic`.
    pub magic: i64,
    /// `compresscodec`: `none`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub compression: String,
    /// `crc` (unsigned).
    pub crc: u64,
    /// `isvalid`: whether Kafka's CRC-32C check passed.
    pub is_valid: bool,
    /// The record lines below it (only with `--deep-iteration`).
    pub records: Vec<DumpedRecord>,
}

/// One record line (`| offset: …`) of the dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpedRecord {
    /// Absolute offset.
    pub offset: i64,
    /// `CreateTime` or `LogAppendTime`.
    pub timestamp_type: String,
    /// The record's timestamp.
    pub timestamp: i64,
    /// `keySize` (-1 = null key).
    pub key_size: i64,
    /// `valueSize` (-1 = null value).
    pub value_size: i64,
    /// `sequence`.
    pub sequence: i64,
    /// `headerKeys` (values are not printed by Kafka).
    pub header_keys: Vec<String>,
    /// What Kafka printed for a control record (e.g. `endTxnMarker: COMMIT coordinatorEpoch: 0`
    /// or `controlType: LEADER_CHANGE(2)`).
    pub control: Option<String>,
    /// `key:` decoded as UTF-8 (absent for a null key or a control record).
    pub key: Option<String>,
    /// `payload:` decoded as UTF-8 (absent for a null value or a control record).
    pub payload: Option<String>,
}

/// The dump of one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpedFile {
    /// The path after `Dumping `.
    pub path: String,
    /// `Log starting offset:` (for `.log` files).
    pub log_start_offset: Option<i64>,
    /// `Snapshot end offset: <offset>, epoch: <epoch>` (for `<offset>-<epoch>.checkpoint`).
    pub snapshot_id: Option<(i64, i32)>,
    /// `KRaft bootstrap snapshot` was printed (for `bootstrap.checkpoint`).
    pub bootstrap_snapshot: bool,
    /// Batches of a `.log` (or snapshot) file.
    pub batches: Vec<DumpedBatch>,
    /// `(offset, position)` entries of a `.index` file.
    pub index_entries: Vec<(i64, i64)>,
    /// `(timestamp, offset)` entries of a `.timeindex` file.
    pub time_index_entries: Vec<(i64, i64)>,
    /// `<file> is empty.` was printed (an index without entries).
    pub empty: bool,
    /// `<file> passed sanity check.` was printed (`--index-sanity-check`).
    pub passed_sanity_check: bool,
    /// `Found <n> invalid bytes at the end of <file>`.
    pub invalid_trailing_bytes: Option<u64>,
    /// Lines the parser did not recognise.
    pub other_lines: Vec<String>,
}

/// A parsed `DumpLogSegments` run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpLog {
    /// One entry per `Dumping <file>` block, in order.
    pub files: Vec<DumpedFile>,
    /// Problem lines Kafka printed on stderr (index mismatches, non-consecutive offsets,
    /// exceptions); log4j warnings are left out.
    pub problems: Vec<String>,
}

impl DumpLog {
    /// The block for the file whose path ends with `suffix` (e.g. `00000000000000000000.log`).
    pub fn file(&self, suffix: &str) -> Option<&DumpedFile> {
        self.files.iter().find(|f| f.path.ends_with(suffix))
    }

    /// Every batch of every `.log` block, in order.
    pub fn batches(&self) -> impl Iterator<Item = &DumpedBatch> {
        self.files.iter().flat_map(|f| f.batches.iter())
    }
}

/// Why a dump could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum DumpParseError {
    /// A batch or record line lacks a field or has one that is not a number/boolean.
    #[error("line {line_number}: field {field:?}: {problem} in {line:?}")]
    BadField {
        /// 1-based line number in stdout.
        line_number: usize,
        /// The field.
        field: String,
        /// What is wrong.
        problem: &'static str,
        /// The line.
        line: String,
    },
    /// A batch, record or index line came before any `Dumping <file>` line.
    #[error("line {line_number}: {line:?} before any \"Dumping <file>\" line")]
    OutsideFile {
        /// 1-based line number.
        line_number: usize,
        /// The line.
        line: String,
    },
    /// A record line came before any batch line.
    #[error("line {line_number}: record line before any batch line: {line:?}")]
    RecordOutsideBatch {
        /// 1-based line number.
        line_number: usize,
        /// The line.
        line: String,
    },
}

/// Parses `DumpLogSegments`' stdout and (for [`DumpLog::problems`]) stderr.
///
/// # Errors
/// [`DumpParseError`] for a batch, record or index line that does not have Kafka's 3.9 shape.
pub fn parse_dump_log(stdout: &str, stderr: &str) -> Result<DumpLog, DumpParseError> {
    let mut dump = DumpLog::default();
    for (index, line) in stdout.lines().enumerate() {
        let line_number = index + 1;
        if let Some(path) = line.strip_prefix("Dumping ") {
            dump.files.push(DumpedFile {
                path: path.to_owned(),
                ..DumpedFile::default()
            });
            continue;
        }
        let Some(file) = dump.files.last_mut() else {
            if line.trim().is_empty() {
                continue;
            }
            return Err(DumpParseError::OutsideFile {
                line_number,
                line: line.to_owned(),
            });
        };
        let fields = Fields { line, line_number };
        if let Some(rest) = line.strip_prefix("Log starting offset: ") {
            file.log_start_offset = Some(fields.number("Log starting offset", rest)?);
        } else if let Some(rest) = line.strip_prefix("Snapshot end offset: ") {
            let (offset, epoch) = rest
                .split_once(", epoch: ")
                .ok_or_else(|| fields.bad("Snapshot end offset", "missing epoch"))?;
            file.snapshot_id = Some((
                fields.number("Snapshot end offset", offset)?,
                fields.number("epoch", epoch)?,
            ));
        } else if line == "KRaft bootstrap snapshot" {
            file.bootstrap_snapshot = true;
        } else if line.starts_with("baseOffset: ") {
            file.batches.push(fields.batch()?);
        } else if let Some(rest) = line.strip_prefix("| ") {
            let record = Fields {
                line: rest,
                line_number,
            }
            .record()?;
            let batch =
                file.batches
                    .last_mut()
                    .ok_or_else(|| DumpParseError::RecordOutsideBatch {
                        line_number,
                        line: line.to_owned(),
                    })?;
            batch.records.push(record);
        } else if line.starts_with("offset: ") && line.contains(" position: ") {
            let map = fields.pairs();
            file.index_entries
                .push((fields.get(&map, "offset")?, fields.get(&map, "position")?));
        } else if line.starts_with("timestamp: ") && line.contains(" offset: ") {
            let map = fields.pairs();
            file.time_index_entries
                .push((fields.get(&map, "timestamp")?, fields.get(&map, "offset")?));
        } else if line.ends_with(" is empty.") {
            file.empty = true;
        } else if line.ends_with(" passed sanity check.") {
            file.passed_sanity_check = true;
        } else if let Some(rest) = line.strip_prefix("Found ") {
            match rest.split_once(" invalid bytes at the end of ") {
                Some((n, _)) => {
                    file.invalid_trailing_bytes = Some(fields.number("invalid bytes", n)?)
                }
                None => file.other_lines.push(line.to_owned()),
            }
        } else if !line.trim().is_empty() {
            file.other_lines.push(line.to_owned());
        }
    }
    dump.problems = stderr
        .lines()
        .filter(|line| !is_log4j_line(line) && !line.trim().is_empty())
        .map(str::to_owned)
        .collect();
    Ok(dump)
}

/// log4j lines of the tools' config look like `[2024-…] WARN … (logger)`.
fn is_log4j_line(line: &str) -> bool {
    line.starts_with('[')
        && (line.contains("] WARN ") || line.contains("] INFO ") || line.contains("] DEBUG "))
}

struct Fields<'a> {
    line: &'a str,
    line_number: usize,
}

impl Fields<'_> {
    fn bad(&self, field: &str, problem: &'static str) -> DumpParseError {
        DumpParseError::BadField {
            line_number: self.line_number,
            field: field.to_owned(),
            problem,
            line: self.line.to_owned(),
        }
    }

    fn number<T: std::str::FromStr>(&self, field: &str, text: &str) -> Result<T, DumpParseError> {
        text.trim()
            .parse()
            .map_err(|_| self.bad(field, "not a number"))
    }

    /// `name: value` pairs separated by single spaces (values without spaces).
    fn pairs(&self) -> Vec<(&str, &str)> {
        let tokens: Vec<&str> = self.line.split_whitespace().collect();
        let mut pairs = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            if let Some(name) = tokens[i].strip_suffix(':')
                && let Some(value) = tokens.get(i + 1)
            {
                pairs.push((name, *value));
                i += 2;
                continue;
            }
            i += 1;
        }
        pairs
    }

    fn raw<'m>(&self, map: &'m [(&str, &str)], field: &str) -> Result<&'m str, DumpParseError> {
        map.iter()
            .find(|(name, _)| *name == field)
            .map(|(_, value)| *value)
            .ok_or_else(|| self.bad(field, "missing"))
    }

    fn get<T: std::str::FromStr>(
        &self,
        map: &[(&str, &str)],
        field: &str,
    ) -> Result<T, DumpParseError> {
        let raw = self.raw(map, field)?;
        self.number(field, raw)
    }

    fn flag(&self, map: &[(&str, &str)], field: &str) -> Result<bool, DumpParseError> {
        match self.raw(map, field)? {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.bad(field, "not a boolean")),
        }
    }

    fn timestamp(&self, map: &[(&str, &str)]) -> Result<(String, i64), DumpParseError> {
        for label in ["CreateTime", "LogAppendTime", "NoTimestampType"] {
            if let Ok(raw) = self.raw(map, label) {
                return Ok((label.to_owned(), self.number(label, raw)?));
            }
        }
        Err(self.bad("CreateTime|LogAppendTime", "missing"))
    }

    fn batch(&self) -> Result<DumpedBatch, DumpParseError> {
        let map = self.pairs();
        let (timestamp_type, max_timestamp) = self.timestamp(&map)?;
        let count = match self.raw(&map, "count")? {
            "null" => None,
            raw => Some(self.number("count", raw)?),
        };
        Ok(DumpedBatch {
            base_offset: self.get(&map, "baseOffset")?,
            last_offset: self.get(&map, "lastOffset")?,
            count,
            base_sequence: self.get(&map, "baseSequence")?,
            last_sequence: self.get(&map, "lastSequence")?,
            producer_id: self.get(&map, "producerId")?,
            producer_epoch: self.get(&map, "producerEpoch")?,
            partition_leader_epoch: self.get(&map, "partitionLeaderEpoch")?,
            is_transactional: self.flag(&map, "isTransactional")?,
            is_control: self.flag(&map, "isControl")?,
            delete_horizon_ms: self.raw(&map, "deleteHorizonMs")?.to_owned(),
            position: self.get(&map, "position")?,
            timestamp_type,
            max_timestamp,
            size: self.get(&map, "size")?,
            magic: self.get(&map, "magic")?,
            compression: self.raw(&map, "compresscodec")?.to_owned(),
            crc: self.get(&map, "crc")?,
            is_valid: self.flag(&map, "isvalid")?,
            records: Vec::new(),
        })
    }

    /// `offset: 0 CreateTime: 1 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [a,b]` then
    /// optionally a control description, ` key: <k>`, ` payload: <v>` (key and payload may hold
    /// spaces; the payload is last).
    fn record(&self) -> Result<DumpedRecord, DumpParseError> {
        let (meta, rest) = match self.line.find(" headerKeys: [") {
            Some(at) => {
                let after = &self.line[at + " headerKeys: [".len()..];
                let close = after
                    .find(']')
                    .ok_or_else(|| self.bad("headerKeys", "unterminated"))?;
                let keys = &after[..close];
                (
                    (&self.line[..at], Some(keys)),
                    after[close + 1..]
                        .strip_prefix(' ')
                        .unwrap_or(&after[close + 1..]),
                )
            }
            None => ((self.line, None), ""),
        };
        let fields = Fields {
            line: meta.0,
            line_number: self.line_number,
        };
        let map = fields.pairs();
        let (timestamp_type, timestamp) = fields.timestamp(&map)?;
        let header_keys = match meta.1 {
            Some("") | None => Vec::new(),
            Some(keys) => keys.split(',').map(str::to_owned).collect(),
        };
        let (control, key, payload) = split_record_tail(rest);
        Ok(DumpedRecord {
            offset: fields.get(&map, "offset")?,
            timestamp_type,
            timestamp,
            key_size: fields.get(&map, "keySize")?,
            value_size: fields.get(&map, "valueSize")?,
            sequence: fields.get(&map, "sequence").unwrap_or(-1),
            header_keys,
            control,
            key,
            payload,
        })
    }
}

type RecordTail = (Option<String>, Option<String>, Option<String>);

fn split_record_tail(rest: &str) -> RecordTail {
    if rest.is_empty() {
        return (None, None, None);
    }
    if let Some(after_key) = rest.strip_prefix("key: ") {
        return match after_key.split_once(" payload: ") {
            Some((key, payload)) => (None, Some(key.to_owned()), Some(payload.to_owned())),
            None => (None, Some(after_key.to_owned()), None),
        };
    }
    if let Some(payload) = rest.strip_prefix("payload: ") {
        return (None, None, Some(payload.to_owned()));
    }
    (Some(rest.to_owned()), None, None)
}

impl KafkaDist {
    /// `kafka-dump-log.sh --files <files> <extra_args>` and the parsed result; e.g. with
    /// `["--deep-iteration", "--print-data-log"]` for `.log` files, or
    /// `["--index-sanity-check"]` / `["--verify-index-only"]` for `.index`/`.timeindex`.
    ///
    /// # Errors
    /// `ToolFailed` if the tool exits non-zero (e.g. a `CorruptIndexException`), `ToolTimeout`,
    /// or `Invalid` if the output cannot be parsed.
    pub fn dump_log_segments(
        &self,
        files: &[&Path],
        extra_args: &[&str],
        timeout: Duration,
    ) -> Result<DumpLog> {
        let list = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let output = self
            .tool(class::DUMP_LOG_SEGMENTS)
            .args(extra_args)
            .arg("--files")
            .arg(list)
            .timeout(timeout)
            .run()?
            .ok()?;
        parse_dump_log(&output.stdout, &output.stderr).map_err(|e| {
            crate::HarnessError::Invalid(format!(
                "parsing DumpLogSegments output: {e}\n{}",
                output.stdout
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Dumping /tmp/t-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 0 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795963922890 size: 77 magic: 2 compresscodec: none crc: 136592920 isvalid: true
| offset: 0 CreateTime: 1795963922871 keySize: -1 valueSize: 1 sequence: 0 headerKeys: [] payload: a
| offset: 1 CreateTime: 1795963922890 keySize: 3 valueSize: 11 sequence: 1 headerKeys: [h1,h2] key: k 1 payload: hello world
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 3 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 77 CreateTime: 5 size: 78 magic: 2 compresscodec: gzip crc: 4294967295 isvalid: false
| offset: 2 CreateTime: 5 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 0
| offset: 3 CreateTime: 5 keySize: -1 valueSize: -1 sequence: -1 headerKeys: []
Found 3 invalid bytes at the end of 00000000000000000000.log
Dumping /tmp/t-0/00000000000000000000.index
offset: 0 position: 0
Dumping /tmp/t-0/00000000000000000000.timeindex
timestamp: 1795963922890 offset: 1
Dumping /tmp/t-0/00000000000000000005.index
/tmp/t-0/00000000000000000005.index is empty.
Dumping /tmp/m/__cluster_metadata-0/00000000000000000100-0000000001.checkpoint
Snapshot end offset: 100, epoch: 1
Dumping /tmp/m/bootstrap.checkpoint
KRaft bootstrap snapshot
";

    #[test]
    fn parses_batches_records_and_index_entries_of_a_3_9_dump() {
        let dump = parse_dump_log(
            SAMPLE,
            "[2024-01-01 00:00:00,000] WARN something (x)\nMismatches in :/tmp/t-0/00000000000000000000.index\n  Index offset: 0, log offset: 1\n",
        )
        .expect("parse");
        assert_eq!(dump.files.len(), 6);
        assert_eq!(
            dump.file(".checkpoint").and_then(|f| f.snapshot_id),
            Some((100, 1))
        );
        assert!(
            dump.file("bootstrap.checkpoint")
                .is_some_and(|f| f.bootstrap_snapshot)
        );
        let log = dump.file("00000000000000000000.log").expect("log block");
        assert_eq!(log.log_start_offset, Some(0));
        assert_eq!(log.invalid_trailing_bytes, Some(3));
        assert_eq!(log.batches.len(), 2);
        let first = &log.batches[0];
        assert_eq!(
            (first.base_offset, first.last_offset, first.count),
            (0, 1, Some(2))
        );
        assert_eq!(
            (first.crc, first.is_valid, first.size, first.position),
            (136_592_920, true, 77, 0)
        );
        assert_eq!(first.timestamp_type, "CreateTime");
        assert_eq!(first.records.len(), 2);
        assert_eq!(first.records[0].key, None);
        assert_eq!(first.records[0].payload.as_deref(), Some("a"));
        assert_eq!(first.records[1].key.as_deref(), Some("k 1"));
        assert_eq!(first.records[1].payload.as_deref(), Some("hello world"));
        assert_eq!(first.records[1].header_keys, vec!["h1", "h2"]);
        let second = &log.batches[1];
        assert!(second.is_control && second.is_transactional && !second.is_valid);
        assert_eq!(second.crc, 4_294_967_295);
        assert_eq!(second.compression, "gzip");
        assert_eq!(
            second.records[0].control.as_deref(),
            Some("endTxnMarker: COMMIT coordinatorEpoch: 0")
        );
        assert_eq!(
            second.records[1],
            DumpedRecord {
                offset: 3,
                timestamp_type: "CreateTime".into(),
                timestamp: 5,
                key_size: -1,
                value_size: -1,
                sequence: -1,
                ..DumpedRecord::default()
            }
        );
        assert_eq!(
            dump.file(".index").map(|f| f.index_entries.clone()),
            Some(vec![(0, 0)])
        );
        assert_eq!(
            dump.file(".timeindex")
                .map(|f| f.time_index_entries.clone()),
            Some(vec![(1_795_963_922_890, 1)])
        );
        assert!(
            dump.file("00000000000000000005.index")
                .is_some_and(|f| f.empty)
        );
        assert_eq!(
            dump.problems,
            vec![
                "Mismatches in :/tmp/t-0/00000000000000000000.index".to_owned(),
                "  Index offset: 0, log offset: 1".to_owned()
            ]
        );
    }

    #[test]
    fn a_malformed_batch_line_is_a_typed_error() {
        let err =
            parse_dump_log("Dumping x.log\nbaseOffset: zero lastOffset: 1\n", "").expect_err("bad");
        assert!(
            matches!(err, DumpParseError::BadField { line_number: 2, .. }),
            "{err}"
        );
        let err = parse_dump_log("| offset: 0\n", "").expect_err("bad");
        assert!(
            matches!(err, DumpParseError::OutsideFile { line_number: 1, .. }),
            "{err}"
        );
    }
}
