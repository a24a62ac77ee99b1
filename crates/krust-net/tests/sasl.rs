//! The SASL phase of a krust-net listener over loopback (issue 12, item 2): the principal of
//! a PLAIN exchange reaches the handler's `RequestContext`, nothing reaches the handler before
//! authentication, an oversized token (`sasl.server.max.receive.size`) closes the connection,
//! and a second ApiVersions before the handshake is refused as Kafka does. (Real clients and
//! the side-by-side with Kafka are in `crates/krust/tests/security_sasl.rs`.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, MetadataResponse, RequestKind, ResponseKind,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_net::security::sasl::{SaslMechanism, SaslSettings};
use krust_net::{
    Handler, ListenerSecurity, Reply, RequestContext, Server, ServerConfig, SupportedApis,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const STEP: Duration = Duration::from_secs(10);

struct Recorder {
    apis: SupportedApis,
    seen: Mutex<Vec<(ApiKey, String)>>,
}

impl Handler for Recorder {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        self.seen
            .lock()
            .expect("lock")
            .push((ctx.api_key, ctx.principal.to_string()));
        match request {
            RequestKind::ApiVersions(r) => {
                ResponseKind::ApiVersions(self.apis.respond_to(&r, ctx.api_version)).into()
            }
            RequestKind::Metadata(_) => ResponseKind::Metadata(MetadataResponse::default()).into(),
            _ => Reply::Close,
        }
    }
}

async fn server() -> (Server, Arc<Recorder>) {
    let handler = Arc::new(Recorder {
        apis: SupportedApis::new([
            (ApiKey::ApiVersions, 0, 4),
            (ApiKey::Metadata, 0, 12),
            (ApiKey::SaslHandshake, 0, 1),
            (ApiKey::SaslAuthenticate, 0, 2),
        ])
        .expect("apis"),
        seen: Mutex::new(Vec::new()),
    });
    let sasl = SaslSettings {
        enabled_mechanisms: vec![SaslMechanism::Plain],
        plain_users: BTreeMap::from([("alice".to_owned(), "alice-secret".to_owned())]),
        scram_credentials: None,
        max_receive_size: 1024,
        failed_authentication_delay: Duration::from_millis(10),
    };
    let config = ServerConfig {
        listener_name: "SASL_PLAINTEXT".to_owned(),
        security: ListenerSecurity {
            tls: None,
            sasl: Some(Arc::new(sasl)),
        },
        ..ServerConfig::default()
    };
    let server = Server::bind("127.0.0.1:0", handler.clone(), config)
        .await
        .expect("bind");
    (server, handler)
}

/// One request; `None` when the server closes instead of answering.
async fn exchange(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: RequestKind,
) -> Option<ResponseKind> {
    let frame = encode_request(key, version, 3, "sasl-test", &request).expect("encode");
    let io = async {
        stream.write_all(&frame).await.ok()?;
        let size = stream.read_i32().await.ok()?;
        let mut body = vec![0u8; usize::try_from(size).ok()?];
        stream.read_exact(&mut body).await.ok()?;
        Some(body)
    };
    let body = tokio::time::timeout(STEP, io).await.expect("bounded")?;
    let mut body = Bytes::from(body);
    decode_response_header(&mut body, key, version).expect("header");
    Some(decode_response_body(body.copy_to_bytes(body.remaining()), key, version).expect("body"))
}

fn handshake() -> RequestKind {
    RequestKind::SaslHandshake(
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
}

fn authenticate(token: &[u8]) -> RequestKind {
    RequestKind::SaslAuthenticate(
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
    )
}

#[tokio::test]
async fn the_authenticated_principal_reaches_the_handler() {
    let (server, handler) = server().await;
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
    assert!(
        exchange(&mut s, ApiKey::ApiVersions, 3, versions)
            .await
            .is_some()
    );
    assert!(
        exchange(&mut s, ApiKey::SaslHandshake, 1, handshake())
            .await
            .is_some()
    );
    let Some(ResponseKind::SaslAuthenticate(r)) = exchange(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        authenticate(b"\0alice\0alice-secret"),
    )
    .await
    else {
        panic!("no SaslAuthenticate answer");
    };
    assert_eq!(r.error_code, 0);
    let metadata = RequestKind::Metadata(MetadataRequest::default());
    assert!(
        exchange(&mut s, ApiKey::Metadata, 12, metadata)
            .await
            .is_some()
    );
    assert_eq!(
        *handler.seen.lock().expect("lock"),
        vec![
            (ApiKey::ApiVersions, "User:ANONYMOUS".to_owned()),
            (ApiKey::Metadata, "User:alice".to_owned()),
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn nothing_is_served_before_authentication() {
    let (server, handler) = server().await;
    // Metadata before the handshake: closed without an answer.
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    let metadata = RequestKind::Metadata(MetadataRequest::default());
    assert!(
        exchange(&mut s, ApiKey::Metadata, 12, metadata.clone())
            .await
            .is_none()
    );
    // Metadata after the handshake, instead of SaslAuthenticate: closed too.
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    assert!(
        exchange(&mut s, ApiKey::SaslHandshake, 1, handshake())
            .await
            .is_some()
    );
    assert!(
        exchange(&mut s, ApiKey::Metadata, 12, metadata)
            .await
            .is_none()
    );
    // A second ApiVersions before the handshake (Kafka allows one).
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
    assert!(
        exchange(&mut s, ApiKey::ApiVersions, 3, versions.clone())
            .await
            .is_some()
    );
    assert!(
        exchange(&mut s, ApiKey::ApiVersions, 3, versions)
            .await
            .is_none()
    );
    // A token over sasl.server.max.receive.size (1024 here).
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    assert!(
        exchange(&mut s, ApiKey::SaslHandshake, 1, handshake())
            .await
            .is_some()
    );
    let big = vec![b'a'; 4096];
    assert!(
        exchange(&mut s, ApiKey::SaslAuthenticate, 2, authenticate(&big))
            .await
            .is_none()
    );
    // Garbage instead of a request header.
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    s.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff])
        .await
        .expect("write");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(STEP, s.read(&mut byte))
        .await
        .expect("bounded");
    assert!(matches!(read, Ok(0) | Err(_)), "garbage answered: {read:?}");
    let seen = handler.seen.lock().expect("lock").clone();
    assert!(
        seen.iter().all(|(key, _)| *key == ApiKey::ApiVersions),
        "the handler saw {seen:?}"
    );
    server.shutdown().await;
}
