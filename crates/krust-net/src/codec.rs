//! Request and response frames ↔ typed messages of the `kafka-protocol` crate, sans IO.
//!
//! The rules (Kafka 3.9 `RequestHeader.parse`, `RequestContext.parseRequest`, `ApiKeys`):
//! * a request starts with `api_key:int16, api_version:int16`; the request header version
//!   follows from them (v2 with tagged fields for flexible versions, v1 otherwise, v0 for
//!   ControlledShutdown v0 only). The response header is v1 for flexible versions, v0 otherwise,
//!   and **always v0 for ApiVersions** so that a client that does not yet know the server's
//!   versions can read it;
//! * a null `client.id` is read as the empty string;
//! * ApiVersions is accepted at *any* version: a version the server does not serve is not
//!   parsed at all but answered with an ApiVersionsResponse **v0** carrying
//!   `UNSUPPORTED_VERSION` (35) and the server's ApiVersions range (KIP-511), so the client can
//!   retry with a version both sides know;
//! * every other failure (unknown API key, an API or version the listener does not serve, an
//!   undecodable header or body) is an error the server answers by closing the connection;
//! * bytes after the body are ignored, as Kafka does for requests.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader,
    ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::api_versions::SupportedApis;
use crate::error::{CodecError, RequestError};
use crate::frame::FrameBuilder;

pub use crate::error_codes::UNSUPPORTED_VERSION;

macro_rules! all_apis {
    ($m:ident) => {
        $m! {
            Produce, Fetch, ListOffsets, Metadata, LeaderAndIsr, StopReplica, UpdateMetadata,
            ControlledShutdown, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat,
            LeaveGroup, SyncGroup, DescribeGroups, ListGroups, SaslHandshake, ApiVersions,
            CreateTopics, DeleteTopics, DeleteRecords, InitProducerId, OffsetForLeaderEpoch,
            AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit,
            DescribeAcls, CreateAcls, DeleteAcls, DescribeConfigs, AlterConfigs,
            AlterReplicaLogDirs, DescribeLogDirs, SaslAuthenticate, CreatePartitions,
            CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
            DescribeDelegationToken, DeleteGroups, ElectLeaders, IncrementalAlterConfigs,
            AlterPartitionReassignments, ListPartitionReassignments, OffsetDelete,
            DescribeClientQuotas, AlterClientQuotas, DescribeUserScramCredentials,
            AlterUserScramCredentials, Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum,
            AlterPartition, UpdateFeatures, Envelope, FetchSnapshot, DescribeCluster,
            DescribeProducers, BrokerRegistration, BrokerHeartbeat, UnregisterBroker,
            DescribeTransactions, ListTransactions, AllocateProducerIds, ConsumerGroupHeartbeat,
            ConsumerGroupDescribe, ControllerRegistration, GetTelemetrySubscriptions,
            PushTelemetry, AssignReplicasToDirs, ListClientMetricsResources,
            DescribeTopicPartitions, AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter,
        }
    };
}

macro_rules! kind_to_key {
    ($($name:ident),* $(,)?) => {
        /// The API key of a typed request, `None` only for a kind added to the codec after this
        /// crate was written (the codec's enum is non-exhaustive).
        #[must_use]
        pub fn request_api_key(request: &RequestKind) -> Option<ApiKey> {
            match request {
                $(RequestKind::$name(_) => Some(ApiKey::$name),)*
                _ => None,
            }
        }

        /// The API key of a typed response (see [`request_api_key`]).
        #[must_use]
        pub fn response_api_key(response: &ResponseKind) -> Option<ApiKey> {
            match response {
                $(ResponseKind::$name(_) => Some(ApiKey::$name),)*
                _ => None,
            }
        }
    };
}

all_apis!(kind_to_key);

/// A decoded request header with the two facts every consumer needs already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedHeader {
    /// The API.
    pub api_key: ApiKey,
    /// The API version the client used.
    pub api_version: i16,
    /// Echoed in the response header.
    pub correlation_id: i32,
    /// `client.id`; a null id is read as `""` (Kafka 3.9 `RequestHeader.parse`).
    pub client_id: String,
    /// The request header version the bytes were read with (0, 1 or 2).
    pub header_version: i16,
}

/// One request frame, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum IncomingRequest {
    /// A request for an API and version the listener serves.
    Request {
        /// Its header.
        header: DecodedHeader,
        /// Its body (boxed: request kinds are large and this enum is moved around).
        body: Box<RequestKind>,
    },
    /// ApiVersions at a version the listener does not serve; the body was not parsed. Answer
    /// with [`unsupported_api_versions_response`].
    UnsupportedApiVersions {
        /// Its header.
        header: DecodedHeader,
    },
}

impl IncomingRequest {
    /// The header of either kind.
    #[must_use]
    pub fn header(&self) -> &DecodedHeader {
        match self {
            IncomingRequest::Request { header, .. }
            | IncomingRequest::UnsupportedApiVersions { header } => header,
        }
    }
}

/// Decodes one request frame (size prefix already removed) for a listener that serves
/// `supported`.
///
/// # Errors
///
/// A [`RequestError`] for every frame Kafka 3.9 would close the connection on.
pub fn decode_request(
    mut frame: Bytes,
    supported: &SupportedApis,
) -> Result<IncomingRequest, RequestError> {
    const KEY_AND_VERSION_BYTES: usize = 4;
    let Some(&[key_hi, key_lo, version_hi, version_lo]) = frame.get(..KEY_AND_VERSION_BYTES) else {
        return Err(RequestError::Truncated {
            need: KEY_AND_VERSION_BYTES,
            have: frame.len(),
        });
    };
    let raw_key = i16::from_be_bytes([key_hi, key_lo]);
    let api_version = i16::from_be_bytes([version_hi, version_lo]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|()| RequestError::UnknownApiKey { api_key: raw_key })?;

    // ApiVersions is enabled at every version (Kafka `ApiKeys.isVersionEnabled`): the client
    // sends its newest and falls back to what the v0 error response tells it.
    let served = supported.contains(api_key, api_version);
    let header_version = if api_key == ApiKey::ApiVersions {
        ApiVersionsRequest::header_version(api_version)
    } else if served {
        api_key.request_header_version(api_version)
    } else {
        return Err(RequestError::NotEnabled {
            api_key: raw_key,
            api_version,
        });
    };

    let header =
        RequestHeader::decode(&mut frame, header_version).map_err(|e| RequestError::Header {
            api_key: raw_key,
            api_version,
            source: CodecError::from(e),
        })?;
    let header = DecodedHeader {
        api_key,
        api_version,
        correlation_id: header.correlation_id,
        client_id: header.client_id.map(|s| s.to_string()).unwrap_or_default(),
        header_version,
    };
    if !served {
        return Ok(IncomingRequest::UnsupportedApiVersions { header });
    }
    let body =
        RequestKind::decode(api_key, &mut frame, api_version).map_err(|e| RequestError::Body {
            api_key: raw_key,
            api_version,
            correlation_id: header.correlation_id,
            source: CodecError::from(e),
        })?;
    if frame.has_remaining() {
        tracing::trace!(
            api_key = ?api_key,
            api_version,
            trailing_bytes = frame.remaining(),
            "ignoring bytes after the request body"
        );
    }
    Ok(IncomingRequest::Request {
        header,
        body: Box::new(body),
    })
}

/// The answer to an ApiVersions request at a version the listener does not serve: v0 body,
/// `UNSUPPORTED_VERSION`, and only the ApiVersions range (Kafka 3.9
/// `ApiVersionsRequest.getErrorResponse`).
#[must_use]
pub fn unsupported_api_versions_response(supported: &SupportedApis) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = UNSUPPORTED_VERSION;
    if let Some(range) = supported.range(ApiKey::ApiVersions) {
        response.api_keys.push(range.to_api_version());
    }
    response
}

/// Encodes a response frame (size prefix included).
///
/// `api_version` is the version the body is written at (0 for the unsupported-ApiVersions
/// answer, else the request's).
///
/// # Errors
///
/// The codec's error when the response cannot be written at that version (a field set that the
/// version does not have, or a version outside the codec's range).
pub fn encode_response(
    correlation_id: i32,
    api_key: ApiKey,
    api_version: i16,
    response: &ResponseKind,
) -> Result<Bytes, CodecError> {
    let header_version = api_key.response_header_version(api_version);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let mut frame = FrameBuilder::new(256);
    header.encode(frame.buf(), header_version)?;
    response.encode(frame.buf(), api_version)?;
    frame
        .finish()
        .ok_or_else(|| CodecError::from("response larger than 2 GiB"))
}

/// Encodes a request frame (size prefix included).
///
/// # Errors
///
/// The codec's error when the request cannot be written at that version.
pub fn encode_request(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    client_id: &str,
    request: &RequestKind,
) -> Result<Bytes, CodecError> {
    let header_version = api_key.request_header_version(api_version);
    let mut header = RequestHeader::default();
    header.request_api_key = api_key as i16;
    header.request_api_version = api_version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_string(client_id.to_owned()));
    let mut frame = FrameBuilder::new(256);
    header.encode(frame.buf(), header_version)?;
    request.encode(frame.buf(), api_version)?;
    frame
        .finish()
        .ok_or_else(|| CodecError::from("request larger than 2 GiB"))
}

/// Reads the correlation id of a response frame (size prefix removed), leaving `frame` at the
/// start of the body.
///
/// # Errors
///
/// The codec's error when the frame is too short for the header.
pub fn decode_response_header(
    frame: &mut Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<i32, CodecError> {
    let header_version = api_key.response_header_version(api_version);
    Ok(ResponseHeader::decode(frame, header_version)?.correlation_id)
}

/// Decodes a response body read by [`decode_response_header`].
///
/// An ApiVersions response that does not decode at the request's version is read again as v0:
/// a server that does not know our version answers with a v0 body (Kafka 3.9
/// `ApiVersionsResponse.parse` does the same fallback).
///
/// # Errors
///
/// The codec's error when the body does not decode.
pub fn decode_response_body(
    body: Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<ResponseKind, CodecError> {
    let mut first_try = body.clone();
    match ResponseKind::decode(api_key, &mut first_try, api_version) {
        Ok(response) => Ok(response),
        Err(e) if api_key == ApiKey::ApiVersions && api_version != 0 => {
            let mut again = body;
            ResponseKind::decode(api_key, &mut again, 0).map_err(|_| CodecError::from(e))
        }
        Err(e) => Err(CodecError::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use bytes::BytesMut;
    use kafka_protocol::messages::{MetadataRequest, VoteRequest};

    fn supported() -> SupportedApis {
        SupportedApis::new([
            (ApiKey::ApiVersions, 0, 4),
            (ApiKey::Metadata, 0, 12),
            (ApiKey::Vote, 0, 1),
        ])
        .expect("valid list")
    }

    /// A request frame without its size prefix, built by our encoder.
    fn request_frame(api_key: ApiKey, version: i16, body: &RequestKind) -> Bytes {
        let mut frame = encode_request(api_key, version, 7, "client-1", body).expect("encodes");
        frame.advance(4);
        frame
    }

    fn raw(parts: &[&[u8]]) -> Bytes {
        let mut buf = BytesMut::new();
        for p in parts {
            buf.put_slice(p);
        }
        buf.freeze()
    }

    #[test]
    fn round_trips_through_every_header_version() {
        let cases: [(&str, ApiKey, i16, RequestKind, i16); 4] = [
            (
                "Metadata v0: header v1",
                ApiKey::Metadata,
                0,
                RequestKind::Metadata(MetadataRequest::default()),
                1,
            ),
            (
                "Metadata v9 (flexible): header v2",
                ApiKey::Metadata,
                9,
                RequestKind::Metadata(MetadataRequest::default()),
                2,
            ),
            (
                "Vote v0 (flexible from 0): header v2",
                ApiKey::Vote,
                0,
                RequestKind::Vote(VoteRequest::default()),
                2,
            ),
            (
                "ApiVersions v2: header v1",
                ApiKey::ApiVersions,
                2,
                RequestKind::ApiVersions(ApiVersionsRequest::default()),
                1,
            ),
        ];
        for (reason, key, version, body, header_version) in cases {
            let frame = request_frame(key, version, &body);
            let decoded = decode_request(frame, &supported())
                .unwrap_or_else(|e| panic!("case {reason}: {e}"));
            let IncomingRequest::Request { header, body: got } = decoded else {
                panic!("case {reason}: not a request");
            };
            assert_eq!(header.api_key, key, "case {reason}");
            assert_eq!(header.api_version, version, "case {reason}");
            assert_eq!(header.correlation_id, 7, "case {reason}");
            assert_eq!(header.client_id, "client-1", "case {reason}");
            assert_eq!(header.header_version, header_version, "case {reason}");
            assert_eq!(*got, body, "case {reason}");
        }
    }

    #[test]
    fn bad_frames_table() {
        let vote_v0 = request_frame(ApiKey::Vote, 0, &RequestKind::Vote(VoteRequest::default()));
        let cases: Vec<(&str, Bytes, &str)> = vec![
            ("empty frame", Bytes::new(), "Truncated"),
            ("api key without version", raw(&[&[0, 3]]), "Truncated"),
            (
                "api key 99 is not in Kafka 3.9",
                raw(&[&99i16.to_be_bytes(), &[0, 0, 0, 0, 0, 1, 0, 0]]),
                "UnknownApiKey",
            ),
            (
                "api key -1",
                raw(&[&(-1i16).to_be_bytes(), &[0, 0, 0, 0, 0, 1, 0, 0]]),
                "UnknownApiKey",
            ),
            (
                "Produce is a Kafka API this listener does not serve",
                raw(&[&[0, 0, 0, 9, 0, 0, 0, 1, 0, 0]]),
                "NotEnabled",
            ),
            (
                "Metadata v13 is past what the listener serves",
                raw(&[&[0, 3, 0, 13, 0, 0, 0, 1, 0, 0]]),
                "NotEnabled",
            ),
            (
                "Vote v-1",
                raw(&[&[0, 52, 0xff, 0xff, 0, 0, 0, 1, 0, 0]]),
                "NotEnabled",
            ),
            (
                "header cut inside the correlation id",
                raw(&[&[0, 3, 0, 1, 0, 0]]),
                "Header",
            ),
            (
                "client id length past the end of the frame",
                raw(&[&[0, 3, 0, 1, 0, 0, 0, 1, 0, 50, b'a']]),
                "Header",
            ),
            (
                "client id that is not UTF-8",
                raw(&[&[0, 3, 0, 1, 0, 0, 0, 1, 0, 2, 0xff, 0xfe]]),
                "Header",
            ),
            (
                "Metadata v1 body cut short (topics count only)",
                raw(&[&[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff], &[0, 0, 0, 5]]),
                "Body",
            ),
            (
                "Vote v0 with the body cut off",
                vote_v0.slice(..vote_v0.len() - 3),
                "Body",
            ),
        ];
        for (reason, frame, want) in cases {
            let got = decode_request(frame, &supported());
            let variant = match &got {
                Ok(_) => "Ok",
                Err(RequestError::Truncated { .. }) => "Truncated",
                Err(RequestError::UnknownApiKey { .. }) => "UnknownApiKey",
                Err(RequestError::NotEnabled { .. }) => "NotEnabled",
                Err(RequestError::Header { .. }) => "Header",
                Err(RequestError::Body { .. }) => "Body",
            };
            assert_eq!(variant, want, "case: {reason}: {got:?}");
        }
    }

    #[test]
    fn null_client_id_reads_as_empty() {
        // Metadata v1, correlation 5, client id null (-1), topics null (-1).
        let frame = raw(&[&[0, 3, 0, 1, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]]);
        let decoded = decode_request(frame, &supported()).expect("decodes");
        assert_eq!(decoded.header().client_id, "");
        assert_eq!(decoded.header().correlation_id, 5);
    }

    #[test]
    fn unsupported_api_versions_is_not_parsed_and_answered_with_v0() {
        let cases: [(&str, i16, Bytes); 3] = [
            (
                "v5 (newer client), header v2, garbage body",
                5,
                raw(&[&[0, 18, 0, 5, 0, 0, 0, 9, 0, 1, b'c', 0], b"\xde\xad"]),
            ),
            (
                "v127, header v2, no body",
                127,
                raw(&[&[0, 18, 0, 127, 0, 0, 0, 9, 0, 1, b'c', 0]]),
            ),
            (
                "v-1, header v1",
                -1,
                raw(&[&[0, 18, 0xff, 0xff, 0, 0, 0, 9, 0, 1, b'c']]),
            ),
        ];
        for (reason, version, frame) in cases {
            let decoded = decode_request(frame, &supported())
                .unwrap_or_else(|e| panic!("case {reason}: {e}"));
            let IncomingRequest::UnsupportedApiVersions { header } = decoded else {
                panic!("case {reason}: {decoded:?}");
            };
            assert_eq!(header.api_version, version, "case {reason}");
            assert_eq!(header.correlation_id, 9, "case {reason}");
            assert_eq!(header.client_id, "c", "case {reason}");
        }

        let response = ResponseKind::ApiVersions(unsupported_api_versions_response(&supported()));
        let frame = encode_response(9, ApiKey::ApiVersions, 0, &response).expect("encodes");
        // size, correlation id (header v0: no tagged fields), error 35, one key: 18 0..4.
        let expected: &[u8] = &[
            0, 0, 0, 16, 0, 0, 0, 9, 0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 4,
        ];
        assert_eq!(&frame[..], expected);
    }

    #[test]
    fn api_versions_response_header_is_always_v0() {
        let response = ResponseKind::ApiVersions(ApiVersionsResponse::default());
        let frame = encode_response(1, ApiKey::ApiVersions, 3, &response).expect("encodes");
        let mut body = frame.slice(4..);
        assert_eq!(
            decode_response_header(&mut body, ApiKey::ApiVersions, 3).expect("header"),
            1
        );
        // Header v0 is the 4-byte correlation id alone: the body starts with the error code.
        assert_eq!(&frame[8..10], &[0, 0]);
        let decoded = decode_response_body(body, ApiKey::ApiVersions, 3).expect("body");
        assert_eq!(decoded, response);
    }

    #[test]
    fn client_reads_a_v0_api_versions_answer_to_a_v3_request() {
        let response = ResponseKind::ApiVersions(unsupported_api_versions_response(&supported()));
        let frame = encode_response(2, ApiKey::ApiVersions, 0, &response).expect("encodes");
        let mut body = frame.slice(4..);
        decode_response_header(&mut body, ApiKey::ApiVersions, 3).expect("header");
        let decoded = decode_response_body(body, ApiKey::ApiVersions, 3).expect("fallback to v0");
        assert_eq!(decoded, response);
    }

    #[test]
    fn flexible_response_header_has_tagged_fields() {
        let response = ResponseKind::Vote(Default::default());
        let frame = encode_response(3, ApiKey::Vote, 0, &response).expect("encodes");
        // correlation id, then the empty tagged-field count of header v1.
        assert_eq!(&frame[4..9], &[0, 0, 0, 3, 0]);
    }

    #[test]
    fn huge_array_counts_are_errors_not_aborts() {
        // Without the check in the (patched) codec, each of these few-byte frames asks for a
        // multi-gigabyte `Vec::with_capacity` and the allocation failure aborts the process.
        let apis = SupportedApis::new([
            (ApiKey::Metadata, 0, 12),
            (ApiKey::Fetch, 4, 17),
            (ApiKey::Vote, 0, 1),
        ])
        .expect("valid list");
        let cases: [(&str, Bytes); 4] = [
            (
                "Metadata v1: topics count i32::MAX",
                raw(&[&[0, 3, 0, 1, 0, 0, 0, 1, 0, 0], &[0x7f, 0xff, 0xff, 0xff]]),
            ),
            (
                "Metadata v9 (compact): topics count u32::MAX - 1",
                raw(&[
                    &[0, 3, 0, 9, 0, 0, 0, 1, 0, 0, 0],
                    &[0xff, 0xff, 0xff, 0xff, 0x0f],
                ]),
            ),
            (
                "Vote v0 (compact): cluster id null, topics count 2^28",
                raw(&[
                    &[0, 52, 0, 0, 0, 0, 0, 1, 0, 0, 0],
                    &[0],
                    &[0x81, 0x80, 0x80, 0x80, 0x01],
                ]),
            ),
            (
                "Fetch v4: one topic, then partitions count i32::MAX",
                raw(&[
                    &[0, 1, 0, 4, 0, 0, 0, 1, 0, 0],
                    &[
                        0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0xf4, 0, 0, 0, 1, 0, 0, 0, 0, 0,
                    ],
                    &[0, 0, 0, 1, 0, 1, b't'],
                    &[0x7f, 0xff, 0xff, 0xff],
                ]),
            ),
        ];
        for (reason, frame) in cases {
            let got = decode_request(frame, &apis);
            assert!(
                matches!(got, Err(RequestError::Body { .. })),
                "case {reason}: {got:?}"
            );
        }
    }
}
