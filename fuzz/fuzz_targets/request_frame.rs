//! Kafka request frames as a krust listener reads them: the size-prefixed stream
//! (`FrameDecoder`), then the request header and body (`codec::decode_request`, what
//! `krust_net::server` calls for every frame), for every API key at every version the codec
//! knows — a superset of what the broker and controller listeners serve. The record sets of a
//! decoded Produce request then go through `parse_all` and record validation, as
//! `Partition::append_as_leader` does. Also
//! the response side a krust client reads (Fetch from a leader, Vote, ...): response header +
//! body.
//!
//! Input: a mode byte, then
//! * mode 0: one frame without its size prefix;
//! * mode 1: a byte stream of size-prefixed frames;
//! * mode 2: `api_key:int16, api_version:int16`, then one response frame.
#![no_main]

use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestKind};
use krust_log::batch::{MAX_BATCH_BYTES, parse_all};
use krust_net::SupportedApis;
use krust_net::codec::{
    IncomingRequest, decode_request, decode_response_body, decode_response_header,
};
use krust_net::frame::FrameDecoder;
use libfuzzer_sys::fuzz_target;

/// Frames above this are refused by the decoder; small so that the fuzzer explores refusals.
const MAX_FRAME_BYTES: usize = 1 << 20;

fn all_apis() -> &'static SupportedApis {
    static APIS: OnceLock<SupportedApis> = OnceLock::new();
    APIS.get_or_init(|| {
        let keys = (0..i16::from(u8::MAX)).filter_map(|k| ApiKey::try_from(k).ok());
        let ranges = keys.map(|k| {
            let v = k.valid_versions();
            (k, v.min, v.max)
        });
        match SupportedApis::new(ranges) {
            Ok(apis) => apis,
            Err(e) => panic!("the codec's own ranges are valid: {e}"),
        }
    })
}

fn request(frame: Bytes) {
    let Ok(IncomingRequest::Request { body, .. }) = decode_request(frame, all_apis()) else {
        return;
    };
    if let RequestKind::Produce(produce) = *body {
        for topic in &produce.topic_data {
            for partition in &topic.partition_data {
                let Some(records) = partition.records.clone() else {
                    continue;
                };
                let Ok(batches) = parse_all(records, MAX_BATCH_BYTES) else {
                    continue;
                };
                for batch in batches {
                    let _ = batch.validate_records();
                    let _ = batch.records();
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => request(Bytes::copy_from_slice(rest)),
        1 => {
            let decoder = FrameDecoder::new(MAX_FRAME_BYTES);
            let mut buf = BytesMut::from(rest);
            while let Ok(Some(frame)) = decoder.decode(&mut buf) {
                request(frame);
            }
        }
        _ => {
            let Some((&[k0, k1, v0, v1], body)) = rest.split_first_chunk::<4>() else {
                return;
            };
            let Ok(api_key) = ApiKey::try_from(i16::from_be_bytes([k0, k1])) else {
                return;
            };
            let version = i16::from_be_bytes([v0, v1]);
            let range = api_key.valid_versions();
            if !(range.min..=range.max).contains(&version) {
                return;
            }
            let mut frame = Bytes::copy_from_slice(body);
            if decode_response_header(&mut frame, api_key, version).is_ok() {
                let _ = decode_response_body(frame, api_key, version);
            }
        }
    }
});
