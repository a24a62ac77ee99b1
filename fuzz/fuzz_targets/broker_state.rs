//! A broker's own state files and records: `__consumer_offsets` records (group metadata and
//! committed offsets, every key and value version) replayed into a group coordinator shard as
//! it loads a partition (`GroupCoordinatorShard::replay` → `CoordinatorRecord::decode`), and
//! producer-state snapshot files (`<offset>.snapshot`, `decode_snapshot`).
//!
//! Input: a mode byte, then
//! * mode 0: records, each `key_len:u16, key, value_len:u16, value`, a value length of
//!   `0xffff` standing for a null value (a tombstone);
//! * mode 1: a producer-state snapshot file.
#![no_main]

use krust_broker::group::{GroupConfig, GroupCoordinatorShard};
use krust_broker::producer_state::decode_snapshot;
use libfuzzer_sys::fuzz_target;

const NULL_VALUE: u16 = u16::MAX;

fn take(rest: &mut &[u8], len: usize) -> Option<Vec<u8>> {
    let len = len.min(rest.len());
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Some(head.to_vec())
}

fn len(rest: &mut &[u8]) -> Option<u16> {
    let (&[a, b], tail) = rest.split_first_chunk::<2>()?;
    *rest = tail;
    Some(u16::from_be_bytes([a, b]))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 1 {
        let _ = decode_snapshot(rest);
        return;
    }
    let mut shard = GroupCoordinatorShard::new(GroupConfig::default(), 0, 0);
    let mut rest = rest;
    while let Some(key_len) = len(&mut rest) {
        let Some(key) = take(&mut rest, usize::from(key_len)) else {
            break;
        };
        let value = match len(&mut rest) {
            None | Some(NULL_VALUE) => None,
            Some(value_len) => take(&mut rest, usize::from(value_len)),
        };
        let _ = shard.replay(0, &key, value.as_deref());
    }
});
