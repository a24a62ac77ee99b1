//! Server and client on 127.0.0.1: round trips of several APIs, pipelining, Kafka's reactions to
//! bad input, connection limits, idle timeout, reconnect and request timeouts.
//!
//! Every test is bounded by [`bounded`] (or runs on paused time); none asserts on wall time.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::TestHandler;
use kafka_protocol::messages::vote_request::{self, VoteRequest};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BeginQuorumEpochRequest, BrokerId, DescribeQuorumRequest,
    EndQuorumEpochRequest, FetchRequest, MetadataRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_net::{
    Client, ClientConfig, ClientError, Connection, NetworkClient, Server, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for any one test on real time.
const TEST_BOUND: Duration = Duration::from_secs(30);

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("test did not finish in time")
}

async fn start(handler: Arc<TestHandler>, config: ServerConfig) -> Server {
    let server = Server::bind("127.0.0.1:0", handler.clone(), config)
        .await
        .expect("bind");
    *handler.advertised_port.lock().expect("lock") = i32::from(server.local_addr().port());
    server
}

/// A listener that handles up to five requests of a connection at once.
fn concurrent() -> ServerConfig {
    ServerConfig {
        max_in_flight_requests_per_connection: 5,
        ..ServerConfig::default()
    }
}

fn client_config() -> ClientConfig {
    ClientConfig {
        client_id: "krust-net-test".to_owned(),
        request_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        ..ClientConfig::default()
    }
}

fn vote_request(candidate_epoch: i32, candidate_id: i32) -> VoteRequest {
    let partition = vote_request::PartitionData::default()
        .with_candidate_epoch(candidate_epoch)
        .with_candidate_id(BrokerId(candidate_id))
        .with_last_offset(42)
        .with_last_offset_epoch(3);
    let topic = vote_request::TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![partition]);
    VoteRequest::default()
        .with_cluster_id(Some(StrBytes::from_static_str("abc")))
        .with_topics(vec![topic])
}

fn fetch_request(session_id: i32, delay_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_session_id(session_id)
        .with_max_wait_ms(delay_ms)
}

/// A raw request frame, size prefix included.
fn raw_frame(api_key: ApiKey, version: i16, correlation_id: i32, body: RequestKind) -> Bytes {
    encode_request(api_key, version, correlation_id, "raw", &body).expect("encodes")
}

/// Reads one response frame (without its size prefix), or `None` at end of stream.
async fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let mut size = [0u8; 4];
    if stream.read_exact(&mut size).await.is_err() {
        return None;
    }
    let size = usize::try_from(i32::from_be_bytes(size)).expect("non-negative");
    let mut frame = vec![0u8; size];
    stream.read_exact(&mut frame).await.ok()?;
    Some(Bytes::from(frame))
}

/// True once the server has closed `stream` (reads end of stream or a reset).
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

async fn api_versions_works(addr: &str) {
    let connection = Connection::connect(addr, client_config())
        .await
        .expect("connect");
    let response = connection
        .send(ApiVersionsRequest::default(), 2)
        .await
        .expect("ApiVersions");
    assert!(matches!(response, ResponseKind::ApiVersions(r) if r.error_code == 0));
}

#[tokio::test]
async fn round_trip_of_several_apis() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler.clone(), ServerConfig::default()).await;
        let addr = server.local_addr().to_string();
        let connection = Connection::connect(&addr, client_config())
            .await
            .expect("connect");

        // ApiVersions v3 (flexible request, v0 response header).
        let mut request = ApiVersionsRequest::default();
        request.client_software_name = StrBytes::from_static_str("krust-net-test");
        request.client_software_version = StrBytes::from_static_str("1.0");
        let ResponseKind::ApiVersions(versions) =
            connection.send(request, 3).await.expect("ApiVersions")
        else {
            panic!("not an ApiVersions response");
        };
        assert_eq!(versions.error_code, 0);
        let fetch = versions
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::Fetch as i16)
            .expect("Fetch listed");
        assert_eq!((fetch.min_version, fetch.max_version), (4, 17));

        // Vote v0 and v1 (flexible).
        for version in [0, 1] {
            let ResponseKind::Vote(vote) = connection
                .send(vote_request(7, 3), version)
                .await
                .expect("Vote")
            else {
                panic!("not a Vote response");
            };
            let partition = &vote.topics[0].partitions[0];
            assert_eq!(partition.leader_epoch, 7, "Vote v{version}");
            assert_eq!(partition.leader_id, BrokerId(3), "Vote v{version}");
            assert_eq!(vote.topics[0].topic_name.0.as_str(), "__cluster_metadata");
        }

        // Fetch v4 (not flexible), v13 and v17 (flexible).
        for version in [4, 13, 17] {
            let ResponseKind::Fetch(fetch) = connection
                .send(fetch_request(1000 + i32::from(version), 0), version)
                .await
                .expect("Fetch")
            else {
                panic!("not a Fetch response");
            };
            let expected = if version >= 7 {
                1000 + i32::from(version)
            } else {
                0
            };
            assert_eq!(fetch.session_id, expected, "Fetch v{version}");
        }

        // Metadata v0, v1 (header v1) and v12 (header v2).
        for version in [0, 1, 12] {
            let ResponseKind::Metadata(metadata) = connection
                .send(MetadataRequest::default(), version)
                .await
                .expect("Metadata")
            else {
                panic!("not a Metadata response");
            };
            assert_eq!(metadata.brokers.len(), 1, "Metadata v{version}");
            assert_eq!(
                metadata.brokers[0].port,
                i32::from(server.local_addr().port())
            );
        }

        let contexts = handler.contexts.lock().expect("lock").clone();
        assert_eq!(contexts.len(), 9);
        for (i, ctx) in contexts.iter().enumerate() {
            assert_eq!(ctx.client_id, "krust-net-test");
            assert_eq!(&*ctx.listener_name, "PLAINTEXT");
            assert_eq!(ctx.correlation_id, i32::try_from(i).expect("small"));
            assert!(ctx.peer_addr.ip().is_loopback());
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn negotiation_at_connect_picks_the_highest_common_version() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, ServerConfig::default()).await;
        let config = ClientConfig {
            negotiate_api_versions: true,
            ..client_config()
        };
        let connection = Connection::connect(&server.local_addr().to_string(), config)
            .await
            .expect("connect");
        let table = connection.api_versions().expect("negotiated");
        assert_eq!(table.server_range(ApiKey::Fetch), Some((4, 17)));
        assert_eq!(
            connection.usable_version(ApiKey::Fetch, (0, 13)).ok(),
            Some(13)
        );
        assert_eq!(
            connection.usable_version(ApiKey::Vote, (0, 1)).ok(),
            Some(1)
        );
        assert!(matches!(
            connection.usable_version(ApiKey::Produce, (0, 11)),
            Err(ClientError::NoCommonVersion { .. })
        ));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn negotiation_falls_back_when_the_server_knows_fewer_api_versions() {
    bounded(async {
        // The server serves ApiVersions 0..=2 only: our v4 gets the v0 UNSUPPORTED_VERSION
        // answer, and the client retries at v2.
        let handler = TestHandler::with_api_versions(0, 2);
        let server = start(handler.clone(), ServerConfig::default()).await;
        let config = ClientConfig {
            negotiate_api_versions: true,
            ..client_config()
        };
        let connection = Connection::connect(&server.local_addr().to_string(), config)
            .await
            .expect("connect");
        let table = connection.api_versions().expect("negotiated");
        assert_eq!(table.server_range(ApiKey::ApiVersions), Some((0, 2)));
        let handled: Vec<i16> = handler
            .contexts
            .lock()
            .expect("lock")
            .iter()
            .map(|c| c.api_version)
            .collect();
        assert_eq!(handled, vec![2], "the v4 attempt never reaches the handler");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_when_handled_out_of_order() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler.clone(), concurrent()).await;
        let connection = Connection::connect(&server.local_addr().to_string(), client_config())
            .await
            .expect("connect");
        // Five requests in flight at once; each waits for the next one to finish, so the
        // handler completes them in reverse order.
        let chained = |session_id: i32| {
            let min_bytes = if session_id < 4 { 1 } else { 0 };
            connection.send(fetch_request(session_id, 0).with_min_bytes(min_bytes), 12)
        };
        let (a, b, c, d, e) =
            tokio::join!(chained(0), chained(1), chained(2), chained(3), chained(4));
        for (i, result) in [a, b, c, d, e].into_iter().enumerate() {
            let ResponseKind::Fetch(fetch) = result.expect("Fetch") else {
                panic!("not a Fetch response");
            };
            assert_eq!(fetch.session_id, i32::try_from(i).expect("small"));
        }
        let finished = handler.finished.lock().expect("lock").clone();
        assert_eq!(
            finished,
            vec![4, 3, 2, 1, 0],
            "handled concurrently, out of order"
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn by_default_a_connection_is_handled_one_request_at_a_time() {
    bounded(async {
        // Kafka's behaviour: the next request of a connection is read only after the previous
        // response went out, so handling follows request order even when later ones are faster.
        let handler = TestHandler::new();
        let server = start(handler.clone(), ServerConfig::default()).await;
        let connection = Connection::connect(&server.local_addr().to_string(), client_config())
            .await
            .expect("connect");
        let (a, b, c) = tokio::join!(
            connection.send(fetch_request(0, 100), 12),
            connection.send(fetch_request(1, 50), 12),
            connection.send(fetch_request(2, 0), 12),
        );
        for result in [a, b, c] {
            assert!(matches!(result, Ok(ResponseKind::Fetch(_))));
        }
        assert_eq!(*handler.finished.lock().expect("lock"), vec![0, 1, 2]);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_throttled_connection_reads_nothing_until_its_throttle_ends() {
    // Kafka's `SocketServer` quota mute: the response carrying `throttle_time_ms` goes out at
    // once, then the connection's next request is not read before the throttle ends; other
    // connections are not affected. Paused time: the server's sleeps run on virtual time.
    let handler = TestHandler::new();
    let server = start(handler.clone(), ServerConfig::default()).await;
    let mut stream = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    let throttled = FetchRequest::default()
        .with_replica_id(BrokerId(-7))
        .with_max_wait_ms(5_000);
    // Both requests in one write: the second is already buffered when the first is answered.
    let mut batch = BytesMut::new();
    batch.put(raw_frame(
        ApiKey::Fetch,
        12,
        1,
        RequestKind::Fetch(throttled),
    ));
    batch.put(raw_frame(
        ApiKey::Fetch,
        12,
        2,
        RequestKind::Fetch(fetch_request(2, 0)),
    ));
    let sent = tokio::time::Instant::now();
    stream.write_all(&batch).await.expect("write");
    let mut frame = read_frame(&mut stream).await.expect("first response");
    assert_eq!(
        decode_response_header(&mut frame, ApiKey::Fetch, 12).expect("header"),
        1
    );
    let ResponseKind::Fetch(first) = decode_response_body(frame, ApiKey::Fetch, 12).expect("body")
    else {
        panic!("not Fetch");
    };
    assert_eq!(first.throttle_time_ms, 5_000);
    // Another connection is served meanwhile.
    api_versions_works(&server.local_addr().to_string()).await;
    let mut frame = read_frame(&mut stream).await.expect("second response");
    assert_eq!(
        decode_response_header(&mut frame, ApiKey::Fetch, 12).expect("header"),
        2
    );
    let handled = handler.handled_at.lock().expect("lock").clone();
    assert_eq!(handled.len(), 3, "two fetches and one ApiVersions");
    let second = *handled.last().expect("second fetch");
    assert!(
        second >= sent + Duration::from_millis(5_000),
        "the second request was handled {:?} after sending, inside the 5 s throttle",
        second - sent
    );
    server.shutdown().await;
}

#[tokio::test]
async fn raw_pipeline_gets_responses_in_request_order() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, concurrent()).await;
        let mut stream = TcpStream::connect(server.local_addr())
            .await
            .expect("connect");
        // Three frames in one write: slow, slower-than-nothing, instant.
        let mut batch = BytesMut::new();
        for (correlation_id, delay) in [(10, 120), (11, 60), (12, 0)] {
            batch.put(raw_frame(
                ApiKey::Fetch,
                12,
                correlation_id,
                RequestKind::Fetch(fetch_request(correlation_id, delay)),
            ));
        }
        stream.write_all(&batch).await.expect("write");
        for expected in [10, 11, 12] {
            let mut frame = read_frame(&mut stream).await.expect("a response");
            let correlation_id =
                decode_response_header(&mut frame, ApiKey::Fetch, 12).expect("header");
            assert_eq!(correlation_id, expected);
            let ResponseKind::Fetch(fetch) =
                decode_response_body(frame, ApiKey::Fetch, 12).expect("body")
            else {
                panic!("not Fetch");
            };
            assert_eq!(fetch.session_id, expected);
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn oversized_frame_closes_only_that_connection() {
    bounded(async {
        let handler = TestHandler::new();
        let config = ServerConfig {
            socket_request_max_bytes: 1024,
            ..ServerConfig::default()
        };
        let server = start(handler, config).await;
        let addr = server.local_addr().to_string();
        let bystander = Connection::connect(&addr, client_config())
            .await
            .expect("connect");

        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream
            .write_all(&1025i32.to_be_bytes())
            .await
            .expect("write");
        assert!(closed_by_server(&mut stream).await);

        // The other connection, and new ones, still work.
        let response = bystander
            .send(MetadataRequest::default(), 12)
            .await
            .expect("Metadata on the bystander");
        assert!(matches!(response, ResponseKind::Metadata(_)));
        api_versions_works(&addr).await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn bad_input_closes_the_connection() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler.clone(), ServerConfig::default()).await;
        let addr = server.local_addr().to_string();
        let vote_v1 = raw_frame(ApiKey::Vote, 1, 1, RequestKind::Vote(vote_request(1, 1)));
        let mut cut_vote = BytesMut::new();
        cut_vote.put_i32(i32::try_from(vote_v1.len() - 4 - 5).expect("small"));
        cut_vote.put(&vote_v1[4..vote_v1.len() - 5]);
        let mut unknown_key = BytesMut::new();
        unknown_key.put_i32(10);
        unknown_key.put_slice(&[0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);

        let cases: Vec<(&str, Bytes)> = vec![
            (
                "HTTP on the Kafka port",
                Bytes::from_static(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            ),
            (
                "negative size prefix",
                Bytes::from_static(&[0xff, 0xff, 0xff, 0xfe, 1, 2]),
            ),
            (
                "a frame of garbage",
                Bytes::from_static(&[0, 0, 0, 6, 0xde, 0xad, 0xbe, 0xef, 0, 1]),
            ),
            ("unknown API key 999", unknown_key.freeze()),
            (
                "Produce, which this listener does not serve",
                raw_frame(
                    ApiKey::Produce,
                    9,
                    1,
                    RequestKind::Produce(Default::default()),
                ),
            ),
            ("Vote v2, past what the listener serves", {
                let mut frame = BytesMut::from(
                    &raw_frame(ApiKey::Vote, 1, 1, RequestKind::Vote(vote_request(1, 1)))[..],
                );
                frame[6..8].copy_from_slice(&2i16.to_be_bytes());
                frame.freeze()
            }),
            ("Vote v1 with its body cut short", cut_vote.freeze()),
            (
                "ApiVersions v3 (a served version) with an undecodable body",
                Bytes::from_static(&[0, 0, 0, 13, 0, 18, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0x7f, b'x']),
            ),
        ];
        for (reason, bytes) in cases {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            stream.write_all(&bytes).await.expect("write");
            assert!(closed_by_server(&mut stream).await, "case: {reason}");
        }
        assert!(
            handler.contexts.lock().expect("lock").is_empty(),
            "no bad request reached the handler"
        );
        api_versions_works(&addr).await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn unsupported_api_versions_version_gets_v0_error_and_the_connection_stays() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, ServerConfig::default()).await;
        let mut stream = TcpStream::connect(server.local_addr())
            .await
            .expect("connect");
        // ApiVersions v9 (a future client): header v2, and a body we cannot know.
        let mut frame = BytesMut::new();
        let header_and_body: &[u8] = &[0, 18, 0, 9, 0, 0, 0, 77, 0, 2, b'c', b'1', 0, 0xab, 0xcd];
        frame.put_i32(i32::try_from(header_and_body.len()).expect("small"));
        frame.put_slice(header_and_body);
        stream.write_all(&frame).await.expect("write");
        let response = read_frame(&mut stream).await.expect("a response");
        // Header v0 (correlation id 77), ApiVersionsResponse v0: error 35, [18: 0..=4].
        assert_eq!(
            &response[..],
            &[0, 0, 0, 77, 0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 4]
        );

        // The connection stays usable.
        stream
            .write_all(&raw_frame(
                ApiKey::ApiVersions,
                3,
                78,
                RequestKind::ApiVersions(ApiVersionsRequest::default()),
            ))
            .await
            .expect("write");
        let mut frame = read_frame(&mut stream).await.expect("a response");
        assert_eq!(
            decode_response_header(&mut frame, ApiKey::ApiVersions, 3).expect("header"),
            78
        );
        let ResponseKind::ApiVersions(ok) =
            decode_response_body(frame, ApiKey::ApiVersions, 3).expect("body")
        else {
            panic!("not ApiVersions");
        };
        // v3 with empty software name and version is invalid (KIP-511).
        assert_eq!(ok.error_code, 42);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn no_response_and_close_replies() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, ServerConfig::default()).await;
        let mut stream = TcpStream::connect(server.local_addr())
            .await
            .expect("connect");
        let mut batch = BytesMut::new();
        batch.put(raw_frame(
            ApiKey::DescribeQuorum,
            2,
            1,
            RequestKind::DescribeQuorum(DescribeQuorumRequest::default()),
        ));
        batch.put(raw_frame(
            ApiKey::Metadata,
            12,
            2,
            RequestKind::Metadata(MetadataRequest::default()),
        ));
        batch.put(raw_frame(
            ApiKey::EndQuorumEpoch,
            1,
            3,
            RequestKind::EndQuorumEpoch(EndQuorumEpochRequest::default()),
        ));
        batch.put(raw_frame(
            ApiKey::Metadata,
            12,
            4,
            RequestKind::Metadata(MetadataRequest::default()),
        ));
        stream.write_all(&batch).await.expect("write");
        // DescribeQuorum: no response; Metadata answered; EndQuorumEpoch: close, so the last
        // Metadata is never answered.
        let mut frame = read_frame(&mut stream).await.expect("Metadata response");
        assert_eq!(
            decode_response_header(&mut frame, ApiKey::Metadata, 12).expect("header"),
            2
        );
        assert!(
            read_frame(&mut stream).await.is_none(),
            "closed after Close"
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn idle_connection_is_closed_after_connections_max_idle_ms() {
    // Paused time: the runtime jumps to the next timer whenever it has nothing else to do.
    let handler = TestHandler::new();
    let server = start(handler, ServerConfig::default()).await;
    let started = tokio::time::Instant::now();
    let mut stream = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    assert!(closed_by_server(&mut stream).await);
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(600_000),
        "closed after {idle:?} of virtual time, before connections.max.idle.ms"
    );
    assert!(
        idle < Duration::from_millis(700_000),
        "closed after {idle:?}"
    );
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn traffic_keeps_a_connection_open_past_the_idle_timeout() {
    let handler = TestHandler::new();
    let config = ServerConfig {
        connections_max_idle: Duration::from_secs(10),
        ..ServerConfig::default()
    };
    let server = start(handler, config).await;
    let mut stream = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    // A request every 6 s of virtual time for 30 s: never 10 s without traffic.
    for correlation_id in 0..5 {
        tokio::time::sleep(Duration::from_secs(6)).await;
        stream
            .write_all(&raw_frame(
                ApiKey::Metadata,
                12,
                correlation_id,
                RequestKind::Metadata(MetadataRequest::default()),
            ))
            .await
            .expect("write");
        let mut frame = read_frame(&mut stream).await.expect("still open");
        assert_eq!(
            decode_response_header(&mut frame, ApiKey::Metadata, 12).expect("header"),
            correlation_id
        );
    }
    assert!(closed_by_server(&mut stream).await, "closed once idle");
    server.shutdown().await;
}

#[tokio::test]
async fn client_request_timeout_closes_the_connection_and_the_client_reconnects() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, ServerConfig::default()).await;
        let config = ClientConfig {
            request_timeout: Duration::from_millis(300),
            ..client_config()
        };
        let client = Client::new(server.local_addr().to_string(), config);
        let first = client
            .connection(tokio::time::Instant::now() + Duration::from_secs(5))
            .await
            .expect("connect");
        let err = client
            .send(BeginQuorumEpochRequest::default(), 1)
            .await
            .expect_err("never answered");
        assert!(
            matches!(
                err,
                ClientError::RequestTimeout {
                    api_key: ApiKey::BeginQuorumEpoch,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.response_error(),
            kafka_protocol::error::ResponseError::RequestTimedOut
        );
        assert!(first.is_closed());
        // The next request reconnects.
        let response = client
            .send(MetadataRequest::default(), 12)
            .await
            .expect("after reconnect");
        assert!(matches!(response, ResponseKind::Metadata(_)));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn client_reconnects_after_the_server_restarts() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler.clone(), ServerConfig::default()).await;
        let addr = server.local_addr().to_string();
        let config = ClientConfig {
            request_timeout: Duration::from_secs(10),
            reconnect_backoff: Duration::from_millis(20),
            reconnect_backoff_max: Duration::from_millis(200),
            ..client_config()
        };
        let client = Client::new(addr.clone(), config);
        client
            .send(MetadataRequest::default(), 12)
            .await
            .expect("first");
        server.shutdown().await;

        // Server down: the request fails with a retriable error.
        let err = client
            .send(MetadataRequest::default(), 12)
            .await
            .expect_err("server is down");
        assert!(err.is_retriable(), "{err}");

        let server = Server::bind(&addr, handler, ServerConfig::default())
            .await
            .expect("rebind the same port");
        let response = client
            .send(MetadataRequest::default(), 12)
            .await
            .expect("after the restart");
        assert!(matches!(response, ResponseKind::Metadata(_)));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn client_rejects_a_response_with_the_wrong_correlation_id() {
    bounded(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let fake = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let _request = read_frame(&mut stream).await.expect("request");
            // Header v0 with correlation id 5 instead of 0, then an ApiVersions v0 body.
            stream
                .write_all(&[0, 0, 0, 10, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0])
                .await
                .expect("write");
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
        let connection = Connection::connect(&addr, client_config())
            .await
            .expect("connect");
        let err = connection
            .send(ApiVersionsRequest::default(), 0)
            .await
            .expect_err("mismatch");
        assert!(
            matches!(
                err,
                ClientError::CorrelationMismatch {
                    expected: 0,
                    received: 5,
                    ..
                }
            ),
            "{err}"
        );
        tokio::time::timeout(Duration::from_secs(5), async {
            while !connection.is_closed() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("connection closes");
        fake.await.expect("fake server");
    })
    .await;
}

#[tokio::test]
async fn connection_limit_holds_back_extra_connections() {
    bounded(async {
        let handler = TestHandler::new();
        let config = ServerConfig {
            max_connections: 1,
            ..ServerConfig::default()
        };
        let server = start(handler, config).await;
        let addr = server.local_addr().to_string();
        let first = Connection::connect(&addr, client_config())
            .await
            .expect("first");
        first
            .send(MetadataRequest::default(), 12)
            .await
            .expect("served");

        // The kernel completes the second handshake, but the server does not serve it.
        let second = Connection::connect(&addr, client_config())
            .await
            .expect("second");
        let waiting = second.send_with_timeout(
            RequestKind::Metadata(MetadataRequest::default()),
            12,
            Duration::from_secs(10),
        );
        tokio::pin!(waiting);
        let early = tokio::time::timeout(Duration::from_millis(300), &mut waiting).await;
        assert!(
            early.is_err(),
            "second connection served while the first is open"
        );
        drop(first);
        let response = waiting.await.expect("served once the first closed");
        assert!(matches!(response, ResponseKind::Metadata(_)));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn shutdown_closes_connections_with_requests_in_flight() {
    bounded(async {
        let handler = TestHandler::new();
        let server = start(handler, ServerConfig::default()).await;
        let connection = Connection::connect(&server.local_addr().to_string(), client_config())
            .await
            .expect("connect");
        let in_flight = connection.send(BeginQuorumEpochRequest::default(), 1);
        tokio::pin!(in_flight);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut in_flight)
                .await
                .is_err()
        );
        server.shutdown().await;
        let err = in_flight.await.expect_err("connection closed");
        assert!(matches!(err, ClientError::Disconnected { .. }), "{err}");
    })
    .await;
}

#[tokio::test]
async fn network_client_sends_by_node_id() {
    bounded(async {
        let one = start(TestHandler::new(), ServerConfig::default()).await;
        let two = start(TestHandler::new(), ServerConfig::default()).await;
        let pool = NetworkClient::new(client_config());
        pool.set_node(1, one.local_addr().to_string());
        pool.set_node(2, two.local_addr().to_string());
        for node in [1, 2] {
            let ResponseKind::Vote(vote) = pool
                .send(node, vote_request(node, node), 1)
                .await
                .expect("Vote")
            else {
                panic!("not Vote");
            };
            assert_eq!(vote.topics[0].partitions[0].leader_epoch, node);
        }
        // With negotiation, the version is the highest both sides know.
        let negotiating = NetworkClient::new(ClientConfig {
            negotiate_api_versions: true,
            ..client_config()
        });
        negotiating.set_node(1, one.local_addr().to_string());
        let (version, response) = negotiating
            .send_latest(1, fetch_request(5, 0), (0, 13))
            .await
            .expect("Fetch");
        assert_eq!(version, 13);
        assert!(matches!(response, ResponseKind::Fetch(f) if f.session_id == 5));
        let err = negotiating
            .send_latest(
                1,
                kafka_protocol::messages::ProduceRequest::default(),
                (0, 11),
            )
            .await
            .expect_err("Produce is not served");
        assert!(matches!(err, ClientError::NoCommonVersion { .. }), "{err}");
        let err = pool
            .send(3, vote_request(1, 1), 1)
            .await
            .expect_err("unknown node");
        assert!(matches!(err, ClientError::UnknownNode { node_id: 3 }));
        assert_eq!(
            pool.nodes(),
            vec![
                (1, one.local_addr().to_string()),
                (2, two.local_addr().to_string())
            ]
        );
        one.shutdown().await;
        two.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn encode_errors_are_reported_without_touching_the_connection() {
    bounded(async {
        let server = start(TestHandler::new(), ServerConfig::default()).await;
        let connection = Connection::connect(&server.local_addr().to_string(), client_config())
            .await
            .expect("connect");
        // Vote v2 is not in Kafka 3.9.
        let err = connection
            .send(vote_request(1, 1), 2)
            .await
            .expect_err("no Vote v2");
        assert!(
            matches!(
                err,
                ClientError::Encode {
                    api_key: ApiKey::Vote,
                    api_version: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(!connection.is_closed());
        connection
            .send(MetadataRequest::default(), 12)
            .await
            .expect("still usable");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn zero_limits_are_configuration_errors() {
    let cases = [
        (
            "socket.request.max.bytes",
            ServerConfig {
                socket_request_max_bytes: 0,
                ..ServerConfig::default()
            },
        ),
        (
            "max.connections",
            ServerConfig {
                max_connections: 0,
                ..ServerConfig::default()
            },
        ),
        (
            "max.in.flight.requests.per.connection",
            ServerConfig {
                max_in_flight_requests_per_connection: 0,
                ..ServerConfig::default()
            },
        ),
    ];
    for (name, config) in cases {
        let err = Server::bind("127.0.0.1:0", TestHandler::new(), config)
            .await
            .expect_err(name);
        assert!(
            matches!(err, krust_net::ServerError::Config { name: got, .. } if got == name),
            "case {name}: {err}"
        );
    }
}

#[tokio::test]
async fn timeout_while_waiting_for_an_in_flight_slot_keeps_the_connection() {
    bounded(async {
        let server = start(TestHandler::new(), ServerConfig::default()).await;
        let config = ClientConfig {
            max_in_flight_requests_per_connection: 1,
            ..client_config()
        };
        let connection = Connection::connect(&server.local_addr().to_string(), config)
            .await
            .expect("connect");
        // Takes the only slot and is never answered.
        let stuck = connection.send(BeginQuorumEpochRequest::default(), 1);
        tokio::pin!(stuck);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut stuck)
                .await
                .is_err()
        );
        let err = connection
            .send_with_timeout(
                RequestKind::Metadata(MetadataRequest::default()),
                12,
                Duration::from_millis(100),
            )
            .await
            .expect_err("no slot");
        assert!(matches!(err, ClientError::RequestTimeout { .. }), "{err}");
        assert!(
            !connection.is_closed(),
            "never sent, so the connection stays"
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn handler_bugs_close_only_their_connection() {
    bounded(async {
        let server = start(TestHandler::new(), ServerConfig::default()).await;
        let addr = server.local_addr().to_string();
        let cases = [
            (
                "the handler panics",
                raw_frame(
                    ApiKey::AddRaftVoter,
                    0,
                    1,
                    RequestKind::AddRaftVoter(Default::default()),
                ),
            ),
            (
                "the handler answers with another API's response",
                raw_frame(
                    ApiKey::RemoveRaftVoter,
                    0,
                    1,
                    RequestKind::RemoveRaftVoter(Default::default()),
                ),
            ),
        ];
        for (reason, frame) in cases {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            stream.write_all(&frame).await.expect("write");
            assert!(read_frame(&mut stream).await.is_none(), "case: {reason}");
        }
        api_versions_works(&addr).await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn failed_connections_are_retried_with_exponential_backoff() {
    // A peer that accepts and hangs up at once: every attempt fails (in the ApiVersions
    // negotiation). Within 3 s of virtual time, backoff 50 ms doubling to 1 s (±20 %) allows
    // attempts near 0, 50, 150, 350, 750, 1550 and 2550 ms: about seven, not thousands.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = attempts.clone();
    let hang_up = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(stream);
        }
    });
    let config = ClientConfig {
        request_timeout: Duration::from_secs(3),
        negotiate_api_versions: true,
        ..client_config()
    };
    let client = Client::new(addr, config);
    let err = client
        .send(MetadataRequest::default(), 12)
        .await
        .expect_err("the peer always hangs up");
    assert!(err.is_retriable(), "{err}");
    let attempts = attempts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (4..=9).contains(&attempts),
        "{attempts} connection attempts"
    );
    hang_up.abort();
}
