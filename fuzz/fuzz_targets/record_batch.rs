//! Record sets as the log and the Raft layer read them.
//!
//! Input: a mode byte, then the bytes of
//! * mode 0: a log buffer (a segment's contents, a fetched partition): `BatchReader` (v2 batches
//!   and v0/v1 message sets, stopping at the first bad one, as recovery does), then every
//!   batch's records decompressed (none, gzip, snappy, lz4, zstd) and validated;
//! * mode 1: v0/v1 message sets entry by entry (`LegacyEntry`): the record, its key and value,
//!   and a wrapper's inner records;
//! * mode 2: a KRaft snapshot (`read_snapshot`): batches, then the control records
//!   (SnapshotHeader, SnapshotFooter, LeaderChange, KRaftVersion, KRaftVoters) decoded.
#![no_main]

use bytes::Bytes;
use krust_log::batch::{BatchReader, MAX_BATCH_BYTES};
use krust_log::legacy::LegacyEntry;
use krust_raft::snapshot::read_snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let buf = Bytes::copy_from_slice(rest);
    match mode % 3 {
        0 => {
            for batch in BatchReader::new(buf, MAX_BATCH_BYTES) {
                let _ = batch.is_crc_valid();
                let _ = batch.validate_records();
                let _ = batch.records();
            }
        }
        1 => {
            let mut rest = buf;
            while !rest.is_empty() {
                let Ok((entry, tail)) = LegacyEntry::parse(rest, MAX_BATCH_BYTES) else {
                    break;
                };
                let _ = entry.timestamp_type();
                let _ = entry.record();
                if let Ok((_, Some(value))) = entry.key_value() {
                    let _ = entry.inner_records(value);
                }
                rest = tail;
            }
        }
        _ => {
            let _ = read_snapshot(buf.clone(), None);
            let _ = read_snapshot(buf, Some(1));
        }
    }
});
