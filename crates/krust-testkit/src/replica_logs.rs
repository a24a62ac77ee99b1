//! Reads replicas' partition logs straight from their log directories with Kafka 3.9's
//! `DumpLogSegments` (one JVM for all of them), and checks acknowledged records against them:
//! the "every acknowledged record is on every replica, exactly once, in order" half of the
//! crash tests. Works the same on a krust broker's and a Kafka broker's files (both are Kafka's
//! on-disk format; that Kafka's own tool reads krust's files is part of the point).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::acked_producer::AckedRecord;
use crate::dist::KafkaDist;
use crate::error::{HarnessError, Result};

/// One data record of a replica's log as Kafka's `DumpLogSegments` read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Its offset.
    pub offset: i64,
    /// Its value as UTF-8 (`None` for a null value).
    pub value: Option<String>,
}

/// A replica's partition log: every data record of every `.log` segment, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaLog {
    /// The partition directory (e.g. `<log dir>/events-0`).
    pub dir: PathBuf,
    /// Data records (control records left out), in order.
    pub records: Vec<LogRecord>,
    /// What is wrong with the files as Kafka read them: batches failing their CRC, invalid
    /// bytes at a segment's end, `DumpLogSegments` problems. Empty for a healthy log.
    pub problems: Vec<String>,
}

impl KafkaDist {
    /// Dumps every `.log` segment of each partition directory in `dirs` (`--deep-iteration
    /// --print-data-log`) in one `DumpLogSegments` run. Copy the directories first (or stop the
    /// broker) to read a consistent state; a live segment may end in a half-written batch, which
    /// shows up in [`ReplicaLog::problems`].
    ///
    /// # Errors
    /// `Io` if a directory cannot be listed; as [`KafkaDist::dump_log_segments`].
    pub fn read_replica_logs(&self, dirs: &[&Path], timeout: Duration) -> Result<Vec<ReplicaLog>> {
        let mut segments_per_dir = Vec::new();
        for dir in dirs {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| HarnessError::io(format!("listing {}", dir.display()), e))?;
            let mut segments: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            // Segment names are zero-padded base offsets: name order is offset order.
            segments.sort();
            segments_per_dir.push(segments);
        }
        let all: Vec<&Path> = segments_per_dir
            .iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect();
        let dump = if all.is_empty() {
            None
        } else {
            Some(self.dump_log_segments(
                &all,
                &["--deep-iteration", "--print-data-log"],
                timeout,
            )?)
        };
        let mut logs = Vec::new();
        for (dir, segments) in dirs.iter().zip(&segments_per_dir) {
            let mut log = ReplicaLog {
                dir: dir.to_path_buf(),
                ..ReplicaLog::default()
            };
            for segment in segments {
                let path = segment.display().to_string();
                let Some(file) = dump
                    .as_ref()
                    .and_then(|d| d.files.iter().find(|f| f.path == path))
                else {
                    log.problems
                        .push(format!("{path}: not in DumpLogSegments' output"));
                    continue;
                };
                if let Some(bytes) = file.invalid_trailing_bytes {
                    log.problems
                        .push(format!("{path}: {bytes} invalid bytes at the end"));
                }
                for batch in &file.batches {
                    if !batch.is_valid {
                        log.problems.push(format!(
                            "{path}: batch at offset {} fails its CRC",
                            batch.base_offset
                        ));
                    }
                    if batch.is_control {
                        continue;
                    }
                    log.records.extend(batch.records.iter().map(|r| LogRecord {
                        offset: r.offset,
                        value: r.payload.clone(),
                    }));
                }
            }
            if let Some(dump) = &dump {
                log.problems.extend(
                    dump.problems
                        .iter()
                        .filter(|p| p.contains(&dir.display().to_string()))
                        .cloned(),
                );
            }
            logs.push(log);
        }
        Ok(logs)
    }
}

/// Checks `acked` (one partition's acknowledged records, any order) against that partition's
/// `records` (a replica's log or what a consumer read, in offset order): each acknowledged value
/// is there exactly once, at the offset the leader acknowledged, and the acknowledged values
/// appear in increasing order (the producer sent them in that order and is idempotent, so the
/// log must keep it). Offsets must strictly increase. Returns every difference found.
pub fn check_acked_records(acked: &[&AckedRecord], records: &[LogRecord]) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(w) = records.windows(2).find(|w| w[1].offset <= w[0].offset) {
        problems.push(format!(
            "offsets do not increase: {} then {}",
            w[0].offset, w[1].offset
        ));
    }
    let by_value = offsets_by_value(records);
    let mut sorted: Vec<&AckedRecord> = acked.to_vec();
    sorted.sort_by_key(|r| r.offset);
    let mut last_value = None;
    for record in &sorted {
        let value = record.value.to_string();
        match by_value.get(value.as_str()).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!(
                "acknowledged value {value} (offset {}) is missing",
                record.offset
            )),
            Some([offset]) if *offset == record.offset => {}
            Some([offset]) => problems.push(format!(
                "acknowledged value {value} is at offset {offset}, acknowledged at {}",
                record.offset
            )),
            Some(offsets) => problems.push(format!(
                "acknowledged value {value} is there {} times, at offsets {offsets:?}",
                offsets.len()
            )),
        }
        if last_value.is_some_and(|last| last >= record.value) {
            problems.push(format!(
                "acknowledged values out of order: {} at a lower offset than {}",
                last_value.unwrap_or_default(),
                record.value
            ));
        }
        last_value = Some(record.value);
        if problems.len() > 20 {
            problems.push("… (more left out)".to_owned());
            break;
        }
    }
    problems
}

/// [`check_acked_records`]'s findings as counts, for a report table (issue 16's chaos report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckedTally {
    /// Acknowledged records checked.
    pub acknowledged: usize,
    /// Acknowledged records not in the log at all.
    pub lost: usize,
    /// Acknowledged records in the log more than once.
    pub duplicated: usize,
    /// Acknowledged records in the log once, but not at the offset the leader acknowledged.
    pub misplaced: usize,
    /// Acknowledged records at a lower offset than one acknowledged before them (by value).
    pub out_of_order: usize,
}

impl AckedTally {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.misplaced == 0 && self.out_of_order == 0
    }
}

/// The offsets at which each value is stored.
fn offsets_by_value(records: &[LogRecord]) -> std::collections::HashMap<&str, Vec<i64>> {
    let mut by_value: std::collections::HashMap<&str, Vec<i64>> = std::collections::HashMap::new();
    for record in records {
        if let Some(value) = &record.value {
            by_value
                .entry(value.as_str())
                .or_default()
                .push(record.offset);
        }
    }
    by_value
}

/// Counts what [`check_acked_records`] reports, without its cap of 20 messages.
pub fn tally_acked_records(acked: &[&AckedRecord], records: &[LogRecord]) -> AckedTally {
    let by_value = offsets_by_value(records);
    let mut sorted: Vec<&AckedRecord> = acked.to_vec();
    sorted.sort_by_key(|r| r.offset);
    let mut tally = AckedTally {
        acknowledged: sorted.len(),
        ..AckedTally::default()
    };
    let mut last_value = None;
    for record in &sorted {
        let value = record.value.to_string();
        match by_value.get(value.as_str()).map(Vec::as_slice) {
            None | Some([]) => tally.lost += 1,
            Some([offset]) if *offset == record.offset => {}
            Some([_]) => tally.misplaced += 1,
            Some(_) => tally.duplicated += 1,
        }
        if last_value.is_some_and(|last| last >= record.value) {
            tally.out_of_order += 1;
        }
        last_value = Some(record.value);
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(offset: i64, value: u64) -> AckedRecord {
        AckedRecord {
            topic: "t".into(),
            partition: 0,
            offset,
            value,
        }
    }

    fn record(offset: i64, value: &str) -> LogRecord {
        LogRecord {
            offset,
            value: Some(value.into()),
        }
    }

    #[test]
    fn a_complete_log_passes_and_an_unacknowledged_extra_record_is_fine() {
        let a = [acked(0, 0), acked(1, 2), acked(3, 4)];
        let refs: Vec<&AckedRecord> = a.iter().collect();
        let log = [
            record(0, "0"),
            record(1, "2"),
            record(2, "3"),
            record(3, "4"),
        ];
        assert!(check_acked_records(&refs, &log).is_empty());
        assert!(tally_acked_records(&refs, &log).is_clean());
    }

    #[test]
    fn missing_duplicated_moved_and_reordered_values_are_reported() {
        let a = [acked(0, 0), acked(1, 1), acked(2, 2)];
        let refs: Vec<&AckedRecord> = a.iter().collect();
        assert_eq!(
            check_acked_records(&refs, &[record(0, "0"), record(1, "1")]).len(),
            1
        );
        let duplicated = [
            record(0, "0"),
            record(1, "1"),
            record(2, "2"),
            record(3, "2"),
        ];
        assert_eq!(check_acked_records(&refs, &duplicated).len(), 1);
        let tally = tally_acked_records(&refs, &duplicated);
        assert_eq!(
            (tally.acknowledged, tally.duplicated, tally.lost),
            (3, 1, 0)
        );
        let lost = tally_acked_records(&refs, &[record(0, "0"), record(1, "1")]);
        assert_eq!((lost.lost, lost.misplaced), (1, 0));
        let moved = [record(0, "0"), record(1, "1"), record(5, "2")];
        assert_eq!(check_acked_records(&refs, &moved).len(), 1);
        let b = [acked(0, 1), acked(1, 0)];
        let refs: Vec<&AckedRecord> = b.iter().collect();
        assert_eq!(
            check_acked_records(&refs, &[record(0, "1"), record(1, "0")]).len(),
            1
        );
        assert_eq!(
            check_acked_records(&[], &[record(1, "1"), record(1, "0")]).len(),
            1
        );
    }
}
