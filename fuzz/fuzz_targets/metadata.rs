//! Metadata as a node reads it: committed `__cluster_metadata` batches through
//! `MetadataLoader::handle_commit` (every record type framed as ApiMessageAndVersion, decoded
//! and replayed into the image), snapshot record values through `handle_load_snapshot`, a
//! snapshot file → image (`read_image_snapshot`), `bootstrap.checkpoint`, the `quorum-state`
//! file, `meta.properties` and `server.properties` (properties syntax, then Kafka's
//! `KafkaConfig` parsing and validation).
//!
//! Input: a mode byte, then
//! * mode 0: a metadata log buffer (record batches);
//! * mode 1: snapshot record values, each as `len:u16, bytes`;
//! * mode 2: a snapshot file (`<offset>-<epoch>.checkpoint`);
//! * mode 3: a `bootstrap.checkpoint` file;
//! * mode 4: a `quorum-state` file;
//! * mode 5: a `meta.properties` file;
//! * mode 6: a `server.properties` file.
#![no_main]

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use krust_log::batch::{BatchReader, MAX_BATCH_BYTES};
use krust_metadata::image::MetadataLoader;
use krust_metadata::properties::{decode_text, parse_properties};
use krust_metadata::{
    BootstrapMetadata, MetaProperties, MetadataProvenance, image::read_image_snapshot,
};
use krust_raft::quorum_state::QuorumStateData;
use krust_raft::snapshot::SnapshotId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 7 {
        0 => {
            let (batches, _stop) =
                BatchReader::new(Bytes::copy_from_slice(rest), MAX_BATCH_BYTES).read_all();
            let mut loader = MetadataLoader::new(Vec::new());
            let _ = loader.handle_commit(Instant::now(), &batches, i64::MAX);
        }
        1 => {
            let mut values = Vec::new();
            let mut rest = rest;
            while let Some((&[l0, l1], tail)) = rest.split_first_chunk::<2>() {
                let len = usize::from(u16::from_be_bytes([l0, l1])).min(tail.len());
                let (value, tail) = tail.split_at(len);
                values.push(Bytes::copy_from_slice(value));
                rest = tail;
            }
            let mut loader = MetadataLoader::new(Vec::new());
            let now = Instant::now();
            let provenance = MetadataProvenance::new(99, 1, 0);
            let _ = loader.handle_load_snapshot(now, now, &values, provenance, i64::MAX);
        }
        2 => {
            let id = SnapshotId {
                end_offset: 100,
                epoch: 1,
            };
            let _ = read_image_snapshot(Bytes::copy_from_slice(rest), id);
        }
        3 => {
            let _ = BootstrapMetadata::from_checkpoint_bytes(
                Bytes::copy_from_slice(rest),
                "bootstrap.checkpoint",
            );
        }
        4 => {
            let _ = QuorumStateData::from_json(rest);
        }
        5 => {
            let _ = MetaProperties::parse(&decode_text(rest));
        }
        _ => {
            // What `krust::config::ServerConfig::parse` does with the file's text.
            let Ok(entries) = parse_properties(&decode_text(rest)) else {
                return;
            };
            let props: BTreeMap<String, String> =
                entries.into_iter().map(|e| (e.key, e.value)).collect();
            let _ = krust_config::KafkaConfig::parse(&props);
        }
    }
});
