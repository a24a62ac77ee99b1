//! krust-log: Kafka's segmented on-disk log, byte-compatible with Apache Kafka 3.9.
//!
//! A [`Log`] is one partition directory: segments `<20-digit base offset>.log` holding v2
//! record batches, each with a sparse offset index (`.index`) and a time index
//! (`.timeindex`), plus `leader-epoch-checkpoint` and `partition.metadata`. The crate knows
//! nothing about Raft or topics beyond the names in Kafka's checkpoint file formats.
//!
//! # Durability
//!
//! Writes go to the OS page cache; nothing is fsynced behind the caller's back except where a
//! change must be atomic to be safe:
//! - [`Log::flush`] fsyncs the data of every segment with unflushed writes (one fsync in the
//!   common case; plus the directory after segment creation), writes pending index entries
//!   without fsyncing them (recovery checks the active segment's index against the data and
//!   rebuilds it), and moves the recovery point to the log end offset. The caller decides
//!   when: Raft before it acknowledges, a broker per `flush.messages`/`flush.ms`. The caller
//!   also persists [`Log::recovery_point`] (in `recovery-point-offset-checkpoint`, see
//!   [`checkpoint`]) and passes it back to [`Log::open`].
//! - A roll fsyncs nothing on the caller's path (Kafka 3.9 schedules the flush of a rolled
//!   segment on a background thread): it leaves a [`FlushJob`] ([`Log::take_roll_flush`]) that
//!   the caller runs without the log's lock, fsyncing the sealed segments (data and trimmed
//!   indexes) and the directory; [`Log::mark_flushed`] then moves the recovery point to the new
//!   segment's base — never before the fsyncs returned, and not at all if the log was truncated
//!   meanwhile. A crash before that only means recovery re-reads from the older recovery point.
//! - Truncation, recovery's tail cut and segment deletion are fsynced at once, so removed
//!   bytes never come back.
//! - Checkpoint files are replaced with [`fs::write_atomically`] (tmp → fsync → rename →
//!   fsync dir).
//! - The log cleaner ([`cleaner`]) fsyncs each cleaned segment before renaming it to `.swap`,
//!   and the directory after each rename and after deleting the segments it replaces.
//! - A failed fsync is returned, never retried: the log refuses further appends and flushes
//!   ([`LogError::FlushFailed`]) and the caller must take the log dir offline.
//!
//! After a crash, [`Log::open`] re-checks every batch from the recovery point on and cuts a
//! torn or corrupt tail (see [`recovery`]); reads CRC-check every batch they return.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use krust_log::{Log, LogConfig, RecordBatchBuilder};
//!
//! # fn main() -> Result<(), krust_log::LogError> {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let mut log = Log::open(&dir.path().join("orders-0"), LogConfig::default(), 0)?;
//! let mut batch = RecordBatchBuilder::new(0);
//! batch.append_kv(1_700_000_000_000, Some(Bytes::from("k")), Some(Bytes::from("v")));
//! // Leader path: offsets, leader epoch (and LogAppendTime) are assigned by the log.
//! let info = log.append_as_leader(vec![batch.build()], 5, 1_700_000_000_000)?;
//! assert_eq!((info.first_offset, log.log_end_offset()), (0, 1));
//! log.flush()?; // durable: the recovery point is now 1
//! let read = log.read(0, 1 << 20)?;
//! assert_eq!(read.batches[0].records().expect("uncompressed")[0].value, Some(Bytes::from("v")));
//! assert_eq!(log.end_offset_for_epoch(5).end_offset, 1);
//! let recovery_point = log.close()?;
//! let log = Log::open(&dir.path().join("orders-0"), LogConfig::default(), recovery_point)?;
//! assert_eq!(log.log_end_offset(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Limits
//!
//! - Compressed batches are stored and served as opaque bytes: the leader path checks their
//!   record count against their offset range only, and timestamp lookups answer with the
//!   batch's first offset.
//! - Only the active segment's index entries are kept in memory (8 + 12 bytes per
//!   `index.interval.bytes` of data, about 5 MiB per GiB at the default interval); sealed
//!   segments binary-search their index files with positional reads (page cache).
//! - Bytes below the recovery point are trusted as Kafka trusts them: a sealed segment's index
//!   is sanity-checked on open (and each entry when a lookup uses it), not re-derived.
//! - `file.delete.delay.ms` is not applied: segment files are deleted at once.
//! - Legacy message sets (magic 0/1, left by a ZooKeeper-mode Kafka with an old
//!   `message.format.version`; see [`legacy`]) are recovered, indexed and served as stored,
//!   but a read holding them has no parsed [`RecordBatch`] (so producer-state replay and the
//!   cleaner see nothing there; a cleaner pass over them fails), a timestamp lookup landing in
//!   a legacy wrapper answers with the first offset it can hold (it is not decompressed), and
//!   appends are v2 only.
//!
//! # Layout
//!
//! - [`batch`]: v2 record batch codec (CRC-32C, records, builder, [`BatchReader`]), Kafka error
//!   codes.
//! - [`varint`]: zig-zag varints used inside records.
//! - [`legacy`]: magic 0/1 message sets (CRC-32, wrappers with inner offsets).
//! - [`log`]: [`Log`] — append (leader/follower), read, timestamp lookup, truncation,
//!   `delete_records`, roll, flush.
//! - [`recovery`]: [`Log::open`] / [`Log::open_with`] and crash recovery.
//! - [`retention`]: [`Log::apply_retention`] (`retention.ms`, `retention.bytes`, log start).
//! - [`cleaner`]: log compaction (`cleanup.policy=compact`): cleanable range and dirty ratio
//!   ([`Log::log_to_clean`]), bounded offset map, segment rewriting with `.cleaned`/`.swap`
//!   files, `cleaner-offset-checkpoint`, I/O throttle.
//! - [`segment`]: one segment (`.log` + indexes); tail recovery.
//! - [`offset_index`], [`time_index`]: the two index files (pre-allocated, trimmed on roll).
//! - [`txn_index`]: the aborted-transaction index (`.txnindex`, Kafka's 34-byte entries) of
//!   each segment, [`Log::append_aborted_txn`], [`Log::collect_aborted_txns`]; corrupt files
//!   are deleted and reported for a rebuild from the log.
//! - [`txn_marker`]: COMMIT/ABORT control batches ([`txn_marker::EndTxnMarker`]).
//! - [`leader_epoch`]: [`LeaderEpochCache`] and `leader-epoch-checkpoint`.
//! - [`checkpoint`]: per-log-dir offset checkpoints (an empty file is empty, as Kafka creates
//!   them), `partition.metadata`.
//! - [`fs`]: [`fs::write_atomically`], segment file names.
//! - [`config`]: [`LogConfig`] with Kafka's names and defaults.
//! - [`error`]: [`LogError`] and its Kafka error codes.
pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod compression;
pub mod config;
pub mod error;
pub mod fs;
mod index_file;
pub mod leader_epoch;
pub mod legacy;
pub mod log;
pub mod offset_index;
pub mod recovery;
pub mod retention;
pub mod segment;
pub mod time_index;
pub mod txn_index;
pub mod txn_marker;
pub mod varint;

pub use batch::{
    BatchError, BatchReader, Compression, DecompressFailure, Header, Record, RecordBatch,
    RecordBatchBuilder, RecordSummary, TimestampType,
};
pub use checkpoint::{CheckpointError, PartitionMetadata, TopicPartition};
pub use cleaner::{Cleaner, CleanerConfig, CleanerError, LogToClean};
pub use config::{CleanupPolicy, LogConfig};
pub use error::LogError;
pub use leader_epoch::{EpochEndOffset, EpochEntry, LeaderEpochCache};
pub use log::{AppendInfo, FlushJob, FlushedUpTo, Log, LogReadResult, TimestampAndOffset};
pub use recovery::{LogOpenOptions, RecoveryReport};
pub use retention::RetentionOutcome;
