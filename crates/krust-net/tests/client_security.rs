//! The client side of TLS and SASL (issue 12: a node's own connections) against krust-net's
//! listener over loopback, with `krust_net::Connection` and a `ClientSecurity`: SASL_SSL with
//! SCRAM-SHA-512 and SASL_PLAINTEXT with PLAIN reach the handler as `User:<name>`, mutual TLS
//! as the certificate's subject; a wrong password, a mechanism the listener does not enable, a
//! server certificate of an untrusted CA and a certificate without the connected host's name
//! (`ssl.endpoint.identification.algorithm=https`) fail with clear errors within the connect
//! timeout; with the check off the same certificate is accepted. Certificates come from
//! `openssl` (krust-testkit's `TestPki`). Every wait is bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use krust_net::security::sasl::{
    SaslCredentials, SaslMechanism, SaslSettings, ScramCredential, ScramCredentialStore,
    ScramMechanism,
};
use krust_net::security::tls::{certificates_from_pem, private_key_from_pem};
use krust_net::security::{
    ClientSecurity, SslClientAuth, SslPrincipalMapper, TlsClient, TlsClientSettings, TlsProtocol,
    TlsServer, TlsSettings,
};
use krust_net::{
    ClientConfig, ClientError, Connection, Handler, ListenerSecurity, Reply, RequestContext,
    Server, ServerConfig, SupportedApis,
};
use krust_testkit::{TEST_CLIENT_DN, TestPki};

/// Bound of one test step; the client's own connect timeout is shorter.
const STEP: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

struct Recorder {
    apis: SupportedApis,
    principals: Mutex<Vec<String>>,
}

impl Handler for Recorder {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        self.principals
            .lock()
            .expect("lock")
            .push(ctx.principal.to_string());
        match request {
            RequestKind::ApiVersions(r) => {
                ResponseKind::ApiVersions(self.apis.respond_to(&r, ctx.api_version)).into()
            }
            _ => Reply::Close,
        }
    }
}

struct Users;

impl ScramCredentialStore for Users {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        (user == "broker" && mechanism == ScramMechanism::Sha512)
            .then(|| ScramCredential::from_password(mechanism, "broker-secret", b"some-salt", 4096))
    }
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("PEM file")
}

fn pki() -> (tempfile::TempDir, TestPki) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = TestPki::generate(dir.path().join("pki")).expect("openssl makes the test PKI");
    (dir, pki)
}

fn server_tls(pki: &TestPki, client_auth: SslClientAuth) -> Arc<TlsServer> {
    let keystore = read(&pki.server_keystore);
    Arc::new(
        TlsServer::new(TlsSettings {
            certificate_chain: certificates_from_pem(&keystore, "keystore").expect("chain"),
            private_key: private_key_from_pem(&keystore, "keystore").expect("key"),
            trusted_certificates: certificates_from_pem(&read(&pki.ca_cert), "ca").expect("ca"),
            client_auth,
            enabled_protocols: vec![TlsProtocol::Tls12, TlsProtocol::Tls13],
            cipher_suites: Vec::new(),
            principal_mapper: SslPrincipalMapper::new(None).expect("rules"),
        })
        .expect("server TLS"),
    )
}

fn sasl() -> Arc<SaslSettings> {
    Arc::new(SaslSettings {
        enabled_mechanisms: vec![
            SaslMechanism::Plain,
            SaslMechanism::Scram(ScramMechanism::Sha512),
        ],
        plain_users: BTreeMap::from([("admin".to_owned(), "admin-secret".to_owned())]),
        scram_credentials: Some(Arc::new(Users)),
        max_receive_size: 524_288,
        failed_authentication_delay: Duration::from_millis(10),
    })
}

async fn server(bind: &str, security: ListenerSecurity) -> (Server, Arc<Recorder>) {
    let handler = Arc::new(Recorder {
        apis: SupportedApis::new([
            (ApiKey::ApiVersions, 0, 4),
            (ApiKey::SaslHandshake, 0, 1),
            (ApiKey::SaslAuthenticate, 0, 2),
        ])
        .expect("apis"),
        principals: Mutex::new(Vec::new()),
    });
    let config = ServerConfig {
        listener_name: "SECURE".to_owned(),
        security,
        ..ServerConfig::default()
    };
    let server = Server::bind(bind, handler.clone(), config)
        .await
        .expect("bind");
    (server, handler)
}

/// The client half: trust `ca` (PEM file), present `identity` if given.
fn client_tls(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
    verify_hostname: bool,
) -> Arc<TlsClient> {
    Arc::new(
        TlsClient::new(TlsClientSettings {
            trusted_certificates: certificates_from_pem(&read(ca), "truststore").expect("ca"),
            client_certificate: identity.map(|(cert, key)| {
                (
                    certificates_from_pem(&read(cert), "cert").expect("cert"),
                    private_key_from_pem(&read(key), "key").expect("key"),
                )
            }),
            verify_hostname,
            enabled_protocols: vec![TlsProtocol::Tls12, TlsProtocol::Tls13],
        })
        .expect("client TLS"),
    )
}

fn credentials(mechanism: SaslMechanism, username: &str, password: &str) -> Arc<SaslCredentials> {
    Arc::new(SaslCredentials {
        mechanism,
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

/// Connects with `security` and sends ApiVersions; the principal the server saw.
async fn connect(
    addr: &str,
    security: ClientSecurity,
    handler: &Recorder,
) -> Result<String, ClientError> {
    let config = ClientConfig {
        client_id: "client-security-test".to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        security,
        ..ClientConfig::default()
    };
    let run = async {
        let connection = Connection::connect(addr, config).await?;
        let response = connection
            .send(ApiVersionsRequest::default(), 3)
            .await
            .map(|r| matches!(r, ResponseKind::ApiVersions(_)))?;
        assert!(response, "an ApiVersions answer");
        Ok(handler
            .principals
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .unwrap_or_default())
    };
    tokio::time::timeout(STEP, run)
        .await
        .expect("bounded by the connect and request timeouts")
}

#[tokio::test]
async fn sasl_ssl_scram_and_sasl_plaintext_plain_authenticate_as_the_user() {
    let (_dir, pki) = pki();
    let (tls_server, handler) = server(
        "127.0.0.1:0",
        ListenerSecurity {
            tls: Some(server_tls(&pki, SslClientAuth::None)),
            sasl: Some(sasl()),
        },
    )
    .await;
    let addr = tls_server.local_addr().to_string();
    let scram = ClientSecurity {
        tls: Some(client_tls(&pki.ca_cert, None, true)),
        sasl: Some(credentials(
            SaslMechanism::Scram(ScramMechanism::Sha512),
            "broker",
            "broker-secret",
        )),
    };
    assert_eq!(scram.protocol_name(), "SASL_SSL");
    assert_eq!(
        connect(&addr, scram, &handler).await.expect("SCRAM"),
        "User:broker"
    );
    // localhost is in the certificate too.
    let port = tls_server.local_addr().port();
    let by_name = ClientSecurity {
        tls: Some(client_tls(&pki.ca_cert, None, true)),
        sasl: Some(credentials(SaslMechanism::Plain, "admin", "admin-secret")),
    };
    assert_eq!(
        connect(&format!("localhost:{port}"), by_name, &handler)
            .await
            .expect("PLAIN over TLS to localhost"),
        "User:admin"
    );

    let (plain_server, handler) = server(
        "127.0.0.1:0",
        ListenerSecurity {
            tls: None,
            sasl: Some(sasl()),
        },
    )
    .await;
    let addr = plain_server.local_addr().to_string();
    let plain = ClientSecurity {
        tls: None,
        sasl: Some(credentials(SaslMechanism::Plain, "admin", "admin-secret")),
    };
    assert_eq!(
        connect(&addr, plain, &handler).await.expect("PLAIN"),
        "User:admin"
    );
}

#[tokio::test]
async fn wrong_credentials_and_mechanisms_fail_with_the_servers_message() {
    let (_server_handle, handler, addr) = {
        let (server, handler) = server(
            "127.0.0.1:0",
            ListenerSecurity {
                tls: None,
                sasl: Some(sasl()),
            },
        )
        .await;
        let addr = server.local_addr().to_string();
        (server, handler, addr)
    };
    let cases = [
        (
            credentials(SaslMechanism::Plain, "admin", "wrong"),
            "Authentication failed: Invalid username or password",
            "a wrong PLAIN password",
        ),
        (
            credentials(
                SaslMechanism::Scram(ScramMechanism::Sha512),
                "broker",
                "wrong",
            ),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            "a wrong SCRAM password",
        ),
        (
            credentials(
                SaslMechanism::Scram(ScramMechanism::Sha256),
                "broker",
                "broker-secret",
            ),
            "Client SASL mechanism 'SCRAM-SHA-256' not enabled in the server, enabled mechanisms are [PLAIN, SCRAM-SHA-512]",
            "a mechanism the listener does not enable",
        ),
    ];
    for (credentials, message, reason) in cases {
        let security = ClientSecurity {
            tls: None,
            sasl: Some(credentials),
        };
        match connect(&addr, security, &handler).await {
            Err(e @ ClientError::AuthenticationFailed { .. }) => {
                assert!(!e.is_retriable(), "case {reason}: not retriable");
                assert_eq!(
                    e.to_string(),
                    format!("connection to {addr} failed authentication due to: {message}"),
                    "case {reason}"
                );
            }
            other => panic!("case {reason}: {other:?}"),
        }
    }
    assert!(
        handler.principals.lock().expect("lock").is_empty(),
        "nothing reached the handler"
    );
}

#[tokio::test]
async fn untrusted_or_misnamed_server_certificates_fail_the_handshake() {
    let (_dir, pki) = pki();
    // 127.0.0.2 is loopback too, but the certificate names only localhost and 127.0.0.1.
    let (tls_server, handler) = server(
        "127.0.0.2:0",
        ListenerSecurity {
            tls: Some(server_tls(&pki, SslClientAuth::None)),
            sasl: None,
        },
    )
    .await;
    let addr = tls_server.local_addr().to_string();
    let rogue_ca = pki.dir.join("rogue-ca.crt");
    for (security, reason, wanted) in [
        (
            ClientSecurity {
                tls: Some(client_tls(&rogue_ca, None, false)),
                sasl: None,
            },
            "a server certificate of a CA we do not trust",
            "invalid peer certificate: UnknownIssuer",
        ),
        (
            ClientSecurity {
                tls: Some(client_tls(&pki.ca_cert, None, true)),
                sasl: None,
            },
            "a certificate without the host's name, with endpoint identification",
            "invalid peer certificate: certificate not valid for name",
        ),
    ] {
        match connect(&addr, security, &handler).await {
            Err(e @ ClientError::SslHandshake { .. }) => {
                assert!(!e.is_retriable(), "case {reason}");
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!(
                        "connection to {addr} failed: SSL handshake failed: "
                    )) && text.contains(wanted),
                    "case {reason}: {text}"
                );
            }
            other => panic!("case {reason}: {other:?}"),
        }
    }
    // ssl.endpoint.identification.algorithm= (empty): the chain is still checked, the name not.
    let unchecked = ClientSecurity {
        tls: Some(client_tls(&pki.ca_cert, None, false)),
        sasl: None,
    };
    assert_eq!(
        connect(&addr, unchecked, &handler)
            .await
            .expect("no host name check"),
        "User:ANONYMOUS"
    );
}

#[tokio::test]
async fn mutual_tls_presents_the_keystore_certificate() {
    let (_dir, pki) = pki();
    let (tls_server, handler) = server(
        "127.0.0.1:0",
        ListenerSecurity {
            tls: Some(server_tls(&pki, SslClientAuth::Required)),
            sasl: None,
        },
    )
    .await;
    let addr = tls_server.local_addr().to_string();
    let with_identity = ClientSecurity {
        tls: Some(client_tls(
            &pki.ca_cert,
            Some((&pki.client_cert, &pki.client_key)),
            true,
        )),
        sasl: None,
    };
    assert_eq!(
        connect(&addr, with_identity, &handler).await.expect("mTLS"),
        format!("User:{TEST_CLIENT_DN}")
    );
    // Without a certificate the server refuses the handshake (TLS 1.3 reports it on the first
    // read, so the failure may come from the first request rather than from the handshake).
    let without = ClientSecurity {
        tls: Some(client_tls(&pki.ca_cert, None, true)),
        sasl: None,
    };
    assert!(connect(&addr, without, &handler).await.is_err());
}

/// A server that grants SASL sessions a lifetime (KIP-368, Kafka's `connections.max.reauth.ms`)
/// and, as Kafka, closes a connection whose session has expired at its next request without
/// answering: SaslHandshake, SaslAuthenticate (PLAIN, any password, `SessionLifetimeMs` =
/// `lifetime`) and ApiVersions. Counts the connections it accepted.
async fn reauth_server(
    lifetime: Duration,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
    use krust_net::codec::{IncomingRequest, decode_request, encode_response};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let apis = SupportedApis::new([
            (ApiKey::ApiVersions, 0, 4),
            (ApiKey::SaslHandshake, 0, 1),
            (ApiKey::SaslAuthenticate, 0, 2),
        ])
        .expect("apis");
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let apis = apis.clone();
            tokio::spawn(async move {
                let mut expires = None;
                loop {
                    let Ok(size) = stream.read_i32().await else {
                        return;
                    };
                    let mut frame = vec![0u8; usize::try_from(size).unwrap_or(0)];
                    if stream.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let Ok(IncomingRequest::Request { header, body }) =
                        decode_request(frame.into(), &apis)
                    else {
                        return;
                    };
                    if expires.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        return; // Kafka: an expired session is closed, the request unanswered.
                    }
                    let response = match *body {
                        RequestKind::SaslHandshake(_) => {
                            ResponseKind::SaslHandshake(SaslHandshakeResponse::default())
                        }
                        RequestKind::SaslAuthenticate(_) => {
                            expires = Some(tokio::time::Instant::now() + lifetime);
                            ResponseKind::SaslAuthenticate(
                                SaslAuthenticateResponse::default().with_session_lifetime_ms(
                                    i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX),
                                ),
                            )
                        }
                        RequestKind::ApiVersions(r) => {
                            ResponseKind::ApiVersions(apis.respond_to(&r, header.api_version))
                        }
                        _ => return,
                    };
                    let Ok(bytes) = encode_response(
                        header.correlation_id,
                        header.api_key,
                        header.api_version,
                        &response,
                    ) else {
                        return;
                    };
                    if stream.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// KIP-368: a session the server granted a lifetime is replaced by a fresh connection before
/// it expires (Kafka's client re-authenticates at 85–95 % of it), so a request after the
/// lifetime is answered instead of meeting a closed connection.
#[tokio::test]
async fn a_sasl_session_with_a_lifetime_is_replaced_before_it_expires() {
    let lifetime = Duration::from_millis(300);
    let (addr, accepted) = reauth_server(lifetime).await;
    let client = krust_net::Client::new(
        addr.to_string(),
        ClientConfig {
            client_id: "reauth-test".to_owned(),
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: STEP,
            security: ClientSecurity {
                tls: None,
                sasl: Some(credentials(SaslMechanism::Plain, "admin", "admin-secret")),
            },
            ..ClientConfig::default()
        },
    );
    let ask = || async {
        match client.send(ApiVersionsRequest::default(), 2).await {
            Ok(ResponseKind::ApiVersions(r)) => assert_eq!(r.error_code, 0),
            other => panic!("ApiVersions: {other:?}"),
        }
    };
    ask().await;
    ask().await;
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one connection within the session"
    );
    // Past the lifetime: the server would close the old session's connection unanswered.
    tokio::time::sleep(lifetime * 2).await;
    ask().await;
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "a fresh, re-authenticated connection"
    );
}
