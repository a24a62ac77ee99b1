//! Bad bytes never panic or abort: seeded random and mutated frames for every API and version
//! Kafka 3.9 defines go through the server's request decoder and the client's response decoder,
//! which must return `Ok` or a typed error. Rerun one seed with `KRUST_NET_SEED=n`.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestKind};
use krust_net::SupportedApis;
use krust_net::codec::{
    IncomingRequest, decode_request, decode_response_body, decode_response_header, encode_response,
    request_api_key,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Frames per API version and seed.
const FRAMES_PER_VERSION: usize = 12;

fn seeds() -> Vec<u64> {
    match std::env::var("KRUST_NET_SEED") {
        Ok(seed) => vec![seed.parse().expect("KRUST_NET_SEED is a number")],
        Err(_) => (0..4).collect(),
    }
}

fn every_api() -> SupportedApis {
    SupportedApis::new(ApiKey::iter().map(|key| {
        let range = key.valid_versions();
        (key, range.min, range.max)
    }))
    .expect("the codec's own ranges")
}

fn random_bytes(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let len = rng.gen_range(0..=max_len);
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    // Bias towards "large count" and "-1" prefixes, which are where decoders go wrong.
    if len >= 4 && rng.gen_bool(0.3) {
        bytes[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    }
    bytes
}

/// The body of a valid default request, cut or with flipped bytes.
fn mutated_default(rng: &mut StdRng, key: ApiKey, version: i16) -> Vec<u8> {
    let Some(request) = default_request(key) else {
        return random_bytes(rng, 32);
    };
    let mut body = BytesMut::new();
    if request.encode(&mut body, version).is_err() {
        return random_bytes(rng, 32);
    }
    let mut body = body.to_vec();
    if !body.is_empty() {
        match rng.gen_range(0..3) {
            0 => body.truncate(rng.gen_range(0..body.len())),
            1 => {
                for _ in 0..rng.gen_range(1..=3) {
                    let i = rng.gen_range(0..body.len());
                    body[i] = rng.r#gen();
                }
            }
            _ => {
                let i = rng.gen_range(0..body.len());
                body[i] = 0xff;
            }
        }
    }
    body
}

fn default_request(key: ApiKey) -> Option<RequestKind> {
    use kafka_protocol::messages::*;
    Some(match key {
        ApiKey::Fetch => RequestKind::Fetch(FetchRequest::default()),
        ApiKey::Metadata => RequestKind::Metadata(MetadataRequest::default()),
        ApiKey::Vote => RequestKind::Vote(VoteRequest::default()),
        ApiKey::BeginQuorumEpoch => {
            RequestKind::BeginQuorumEpoch(BeginQuorumEpochRequest::default())
        }
        ApiKey::EndQuorumEpoch => RequestKind::EndQuorumEpoch(EndQuorumEpochRequest::default()),
        ApiKey::DescribeQuorum => RequestKind::DescribeQuorum(DescribeQuorumRequest::default()),
        ApiKey::FetchSnapshot => RequestKind::FetchSnapshot(FetchSnapshotRequest::default()),
        ApiKey::ApiVersions => RequestKind::ApiVersions(ApiVersionsRequest::default()),
        ApiKey::BrokerRegistration => {
            RequestKind::BrokerRegistration(BrokerRegistrationRequest::default())
        }
        ApiKey::BrokerHeartbeat => RequestKind::BrokerHeartbeat(BrokerHeartbeatRequest::default()),
        ApiKey::Produce => RequestKind::Produce(ProduceRequest::default()),
        ApiKey::CreateTopics => RequestKind::CreateTopics(CreateTopicsRequest::default()),
        _ => return None,
    })
}

fn request_frame(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut frame = BytesMut::new();
    frame.put_i16(key as i16);
    frame.put_i16(version);
    frame.put_i32(1);
    frame.put_i16(3);
    frame.put_slice(b"fuz");
    if key.request_header_version(version) >= 2 {
        frame.put_u8(0); // no tagged fields
    }
    frame.put_slice(body);
    frame.freeze()
}

#[test]
fn random_and_mutated_requests_never_panic() {
    let apis = every_api();
    let mut decoded = 0usize;
    let mut rejected = 0usize;
    let mut decoded_keys = std::collections::BTreeSet::new();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        for key in ApiKey::iter() {
            let range = key.valid_versions();
            for version in range.min..=range.max {
                for i in 0..FRAMES_PER_VERSION {
                    let body = if i % 2 == 0 {
                        random_bytes(&mut rng, 48)
                    } else {
                        mutated_default(&mut rng, key, version)
                    };
                    let frame = request_frame(key, version, &body);
                    let result = std::panic::catch_unwind(|| decode_request(frame.clone(), &apis));
                    match result {
                        Ok(Ok(IncomingRequest::Request { header, body })) => {
                            assert_eq!(
                                request_api_key(&body),
                                Some(header.api_key),
                                "the typed request is of the header's API"
                            );
                            decoded_keys.insert(key as i16);
                            decoded += 1;
                        }
                        Ok(Ok(IncomingRequest::UnsupportedApiVersions { .. })) => {
                            panic!("every ApiVersions version is served here")
                        }
                        Ok(Err(_)) => rejected += 1,
                        Err(_) => panic!(
                            "decode_request panicked: {key:?} v{version}, frame {frame:02x?}\nrerun: KRUST_NET_SEED={seed} cargo test -p krust-net --test decode_robustness"
                        ),
                    }
                }
            }
        }
    }
    assert!(
        decoded > 0 && rejected > 0,
        "decoded {decoded}, rejected {rejected}"
    );
}

#[test]
fn every_api_decodes_into_its_own_request_kind() {
    // All-zero bodies are valid for most non-flexible versions (zero counts, empty strings),
    // all-one bodies for flexible ones (compact length 1 = empty, one tagged field of one
    // byte), so each key's mapping is checked at least once.
    let apis = every_api();
    let mut unmatched = Vec::new();
    for key in ApiKey::iter() {
        let range = key.valid_versions();
        let mut found = false;
        for (version, fill) in (range.min..=range.max).flat_map(|v| [(v, 0u8), (v, 1u8)]) {
            let frame = request_frame(key, version, &[fill; 256]);
            if let Ok(IncomingRequest::Request { header, body }) = decode_request(frame, &apis) {
                assert_eq!(
                    request_api_key(&body),
                    Some(header.api_key),
                    "{key:?} v{version}"
                );
                found = true;
            }
        }
        if !found {
            unmatched.push(key);
        }
    }
    assert!(
        unmatched.is_empty(),
        "no version decoded from zeros: {unmatched:?}"
    );
}

#[test]
fn random_responses_never_panic() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        for key in ApiKey::iter() {
            let range = key.valid_versions();
            for version in range.min..=range.max {
                for _ in 0..FRAMES_PER_VERSION {
                    let frame = Bytes::from(random_bytes(&mut rng, 48));
                    let result = std::panic::catch_unwind(|| {
                        let mut frame = frame.clone();
                        if decode_response_header(&mut frame, key, version).is_ok() {
                            let _ = decode_response_body(frame, key, version);
                        }
                    });
                    assert!(
                        result.is_ok(),
                        "response decoding panicked: {key:?} v{version}, frame {frame:02x?}\nrerun: KRUST_NET_SEED={seed} cargo test -p krust-net --test decode_robustness"
                    );
                }
            }
        }
    }
}

#[test]
fn default_responses_round_trip_at_every_version() {
    // Every response kind the server can send encodes at every version and reads back equal.
    use kafka_protocol::messages::*;
    let responses = [
        ResponseKind::ApiVersions(ApiVersionsResponse::default()),
        ResponseKind::Metadata(MetadataResponse::default()),
        ResponseKind::Fetch(FetchResponse::default()),
        ResponseKind::Vote(VoteResponse::default()),
        ResponseKind::BeginQuorumEpoch(BeginQuorumEpochResponse::default()),
        ResponseKind::EndQuorumEpoch(EndQuorumEpochResponse::default()),
        ResponseKind::DescribeQuorum(DescribeQuorumResponse::default()),
        ResponseKind::FetchSnapshot(FetchSnapshotResponse::default()),
    ];
    for response in responses {
        let key = krust_net::codec::response_api_key(&response).expect("known kind");
        let range = key.valid_versions();
        for version in range.min..=range.max {
            let frame = encode_response(9, key, version, &response)
                .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            let mut body = frame.slice(4..);
            assert_eq!(
                decode_response_header(&mut body, key, version).ok(),
                Some(9)
            );
            let back = decode_response_body(body, key, version)
                .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            assert_eq!(back, response, "{key:?} v{version}");
        }
    }
}
