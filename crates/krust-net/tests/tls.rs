//! TLS listeners (issue 12, item 1) with a real rustls client over loopback: server-only
//! TLS, mutual TLS with the client's principal mapped by `ssl.principal.mapping.rules`,
//! `ssl.client.auth=required` refusing an untrusted certificate and a client without one, a
//! plaintext client on a TLS port, and cipher-suite/protocol restrictions. Certificates come
//! from `openssl` (krust-testkit's `TestPki`). Every wait is bounded.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use common::TestHandler;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_net::security::tls::{certificates_from_pem, private_key_from_pem};
use krust_net::security::{SslClientAuth, SslPrincipalMapper, TlsProtocol, TlsServer, TlsSettings};
use krust_net::{ListenerSecurity, Server, ServerConfig};
use krust_testkit::{TEST_CLIENT_DN, TestPki};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const STEP: Duration = Duration::from_secs(10);

fn pki() -> (tempfile::TempDir, TestPki) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = TestPki::generate(dir.path().join("pki")).expect("openssl makes the test PKI");
    (dir, pki)
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("PEM file")
}

fn settings(pki: &TestPki, client_auth: SslClientAuth, rules: Option<&str>) -> TlsSettings {
    let keystore = read(&pki.server_keystore);
    TlsSettings {
        certificate_chain: certificates_from_pem(&keystore, "keystore").expect("chain"),
        private_key: private_key_from_pem(&keystore, "keystore").expect("key"),
        trusted_certificates: certificates_from_pem(&read(&pki.ca_cert), "truststore").expect("ca"),
        client_auth,
        enabled_protocols: vec![TlsProtocol::Tls12, TlsProtocol::Tls13],
        cipher_suites: Vec::new(),
        principal_mapper: SslPrincipalMapper::new(rules).expect("rules"),
    }
}

async fn tls_server(settings: TlsSettings) -> (Server, Arc<TestHandler>) {
    let handler = TestHandler::new();
    let config = ServerConfig {
        listener_name: "SSL".to_owned(),
        security: ListenerSecurity {
            tls: Some(Arc::new(TlsServer::new(settings).expect("TLS config"))),
            sasl: None,
        },
        ..ServerConfig::default()
    };
    let server = Server::bind("127.0.0.1:0", handler.clone(), config)
        .await
        .expect("bind");
    (server, handler)
}

/// A rustls client trusting the test CA, presenting `identity` (cert, key) if given.
fn client_config(
    pki: &TestPki,
    identity: Option<(&std::path::Path, &std::path::Path)>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates_from_pem(&read(&pki.ca_cert), "ca").expect("ca") {
        roots.add(cert).expect("root");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions")
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                certificates_from_pem(&read(cert), "client cert").expect("cert"),
                private_key_from_pem(&read(key), "client key").expect("key"),
            )
            .expect("client identity"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Sends ApiVersions v3 and reads the answer.
async fn api_versions<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
) -> std::io::Result<ResponseKind> {
    let request = RequestKind::ApiVersions(ApiVersionsRequest::default());
    let frame = encode_request(ApiKey::ApiVersions, 3, 1, "tls-test", &request).expect("encode");
    stream.write_all(&frame).await?;
    stream.flush().await?;
    let size = stream.read_i32().await?;
    let mut body = vec![0u8; usize::try_from(size).expect("size")];
    stream.read_exact(&mut body).await?;
    let mut body = Bytes::from(body);
    let correlation = decode_response_header(&mut body, ApiKey::ApiVersions, 3).expect("header");
    assert_eq!(correlation, 1);
    Ok(
        decode_response_body(body.copy_to_bytes(body.remaining()), ApiKey::ApiVersions, 3)
            .expect("body"),
    )
}

/// Connects with TLS and asks ApiVersions; `Err` when the handshake or the exchange fails.
async fn exchange(server: &Server, config: Arc<rustls::ClientConfig>) -> std::io::Result<()> {
    let tcp = TcpStream::connect(server.local_addr()).await?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = ServerName::try_from("localhost").expect("name");
    let mut tls = connector.connect(name, tcp).await?;
    let response = api_versions(&mut tls).await?;
    assert!(matches!(response, ResponseKind::ApiVersions(_)));
    Ok(())
}

fn last_principal(handler: &TestHandler) -> String {
    handler
        .contexts
        .lock()
        .expect("lock")
        .last()
        .map(|c| c.principal.to_string())
        .unwrap_or_default()
}

const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

#[tokio::test]
async fn server_tls_serves_requests_as_anonymous() {
    let (_dir, pki) = pki();
    let (server, handler) = tls_server(settings(&pki, SslClientAuth::None, None)).await;
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        tokio::time::timeout(STEP, exchange(&server, client_config(&pki, None, versions)))
            .await
            .expect("bounded")
            .expect("ApiVersions over TLS");
        assert_eq!(last_principal(&handler), "User:ANONYMOUS");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn mutual_tls_principal_is_the_mapped_subject() {
    let (_dir, pki) = pki();
    let identity = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    // DEFAULT: the RFC 2253 DN as it is.
    let (server, handler) = tls_server(settings(&pki, SslClientAuth::Required, None)).await;
    tokio::time::timeout(STEP, exchange(&server, client_config(&pki, identity, BOTH)))
        .await
        .expect("bounded")
        .expect("mTLS exchange");
    assert_eq!(last_principal(&handler), format!("User:{TEST_CLIENT_DN}"));
    server.shutdown().await;
    // A mapping rule.
    let rules = Some("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT");
    let (server, handler) = tls_server(settings(&pki, SslClientAuth::Requested, rules)).await;
    tokio::time::timeout(STEP, exchange(&server, client_config(&pki, identity, BOTH)))
        .await
        .expect("bounded")
        .expect("mTLS exchange");
    assert_eq!(last_principal(&handler), "User:alice@eng");
    // Requested: a client without a certificate is served as ANONYMOUS.
    tokio::time::timeout(STEP, exchange(&server, client_config(&pki, None, BOTH)))
        .await
        .expect("bounded")
        .expect("no certificate is fine when requested");
    assert_eq!(last_principal(&handler), "User:ANONYMOUS");
    server.shutdown().await;
}

#[tokio::test]
async fn required_client_auth_refuses_untrusted_and_missing_certificates() {
    let (_dir, pki) = pki();
    let (server, handler) = tls_server(settings(&pki, SslClientAuth::Required, None)).await;
    let untrusted = Some((pki.untrusted_cert.as_path(), pki.untrusted_key.as_path()));
    for identity in [untrusted, None] {
        let result =
            tokio::time::timeout(STEP, exchange(&server, client_config(&pki, identity, BOTH)))
                .await
                .expect("bounded: the server closes, it does not hang");
        assert!(result.is_err(), "served a client with {identity:?}");
    }
    // No mapping rule for the DN: authentication fails, nothing is served.
    let (server2, handler2) = tls_server(settings(
        &pki,
        SslClientAuth::Required,
        Some("RULE:^CN=bob,.*$/bob/"),
    ))
    .await;
    let identity = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    let result = tokio::time::timeout(
        STEP,
        exchange(&server2, client_config(&pki, identity, BOTH)),
    )
    .await
    .expect("bounded");
    assert!(result.is_err(), "served a certificate no rule maps");
    assert!(handler.contexts.lock().expect("lock").is_empty());
    assert!(handler2.contexts.lock().expect("lock").is_empty());
    server.shutdown().await;
    server2.shutdown().await;
}

#[tokio::test]
async fn a_plaintext_client_on_a_tls_port_is_closed_without_an_answer() {
    let (_dir, pki) = pki();
    let (server, handler) = tls_server(settings(&pki, SslClientAuth::None, None)).await;
    let mut tcp = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    let result = tokio::time::timeout(STEP, api_versions(&mut tcp))
        .await
        .expect("bounded");
    assert!(result.is_err(), "a plaintext request was answered");
    assert!(handler.contexts.lock().expect("lock").is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn cipher_suites_and_protocols_restrict_the_handshake() {
    let (_dir, pki) = pki();
    let mut only_12 = settings(&pki, SslClientAuth::None, None);
    only_12.enabled_protocols = vec![TlsProtocol::Tls12];
    only_12.cipher_suites = vec!["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".to_owned()];
    let (server, _handler) = tls_server(only_12).await;
    let tls13_only = client_config(&pki, None, &[&rustls::version::TLS13]);
    let refused = tokio::time::timeout(STEP, exchange(&server, tls13_only))
        .await
        .expect("bounded");
    assert!(
        refused.is_err(),
        "a TLS 1.3 client got through a TLSv1.2-only listener"
    );
    tokio::time::timeout(STEP, exchange(&server, client_config(&pki, None, BOTH)))
        .await
        .expect("bounded")
        .expect("TLS 1.2 with the named suite");
    server.shutdown().await;

    let mut unknown = settings(&pki, SslClientAuth::None, None);
    unknown.cipher_suites = vec!["TLS_RSA_WITH_AES_128_CBC_SHA".to_owned()];
    let err = TlsServer::new(unknown).expect_err("a suite rustls lacks");
    assert!(
        err.to_string()
            .starts_with("ssl.cipher.suites: unsupported cipher suite TLS_RSA_WITH_AES_128_CBC_SHA; krust (rustls) supports TLS_AES_256_GCM_SHA384,"),
        "{err}"
    );
    let mut no_truststore = settings(&pki, SslClientAuth::Required, None);
    no_truststore.trusted_certificates.clear();
    let err = TlsServer::new(no_truststore).expect_err("required without trust");
    assert!(
        err.to_string().contains("needs trusted certificates"),
        "{err}"
    );
}
