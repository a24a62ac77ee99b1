//! SASL listeners with real clients (issue 12, item 2), the same checks against Apache Kafka
//! 3.9 (the oracle) and a `krust server` node from the same keys: a `SASL_PLAINTEXT` and a
//! `SASL_SSL` listener with `sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512`, PLAIN users from
//! each listener's `plain.sasl.jaas.config`, SCRAM users from `storage format --add-scram`.
//! kcat produces and consumes with PLAIN and SCRAM-SHA-512 on both listeners and
//! confluent-kafka with SCRAM-SHA-512 over SASL_SSL; a wrong password fails with Kafka's message
//! for each mechanism. On the wire, side by side: a Produce before the handshake is closed
//! without an answer, an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled
//! list, a bad PLAIN token SASL_AUTHENTICATION_FAILED with the same message, a v0 handshake
//! takes a raw token, and SaslHandshake on a PLAINTEXT listener gets ILLEGAL_SASL_STATE.
//! A SCRAM user added while the node runs (`kafka-configs --alter --add-config
//! 'SCRAM-SHA-512=[…]' --entity-type users`, AlterUserScramCredentials through the broker to the
//! controller) can authenticate once the credential is in the broker's image.

mod security_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, RequestKind, ResponseKind, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::codec::{decode_response_body, decode_response_header, encode_request};
use krust_testkit::{KafkaDist, Kcat, PythonClients, TestPki, ToolOutput};
use security_support::{SecureNode, TOOL_TIMEOUT, broker_lock, kcat_round_trip, run_kcat};

const JAAS_PLAIN: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;
const JAAS_SCRAM: &str = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
const IO_TIMEOUT: Duration = Duration::from_secs(10);

fn start(dist: &KafkaDist, pki: &TestPki, krust: bool) -> SecureNode {
    let path = |p: &Path| p.display().to_string();
    let mut props = vec![
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512".to_owned()),
        ("ssl.keystore.type", "PEM".to_owned()),
        ("ssl.keystore.location", path(&pki.server_keystore)),
    ];
    for listener in ["sasl_plaintext", "sasl_ssl"] {
        props.push((
            if listener == "sasl_ssl" {
                "listener.name.sasl_ssl.plain.sasl.jaas.config"
            } else {
                "listener.name.sasl_plaintext.plain.sasl.jaas.config"
            },
            JAAS_PLAIN.to_owned(),
        ));
        props.push((
            if listener == "sasl_ssl" {
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"
            } else {
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"
            },
            JAAS_SCRAM.to_owned(),
        ));
    }
    SecureNode::start(
        dist,
        krust,
        &[
            ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
            ("SASL_SSL", "SASL_SSL"),
        ],
        &props,
        &[
            "--release-version",
            "3.9",
            "--add-scram",
            "SCRAM-SHA-512=[name=bob,password=bob-secret]",
        ],
    )
}

fn sasl_args(pki: &TestPki, tls: bool, mechanism: &str, user: &str, password: &str) -> Vec<String> {
    let mut args = vec![
        "-X".to_owned(),
        format!(
            "security.protocol={}",
            if tls { "sasl_ssl" } else { "sasl_plaintext" }
        ),
        "-X".to_owned(),
        format!("sasl.mechanisms={mechanism}"),
        "-X".to_owned(),
        format!("sasl.username={user}"),
        "-X".to_owned(),
        format!("sasl.password={password}"),
        "-m".to_owned(),
        "10".to_owned(),
    ];
    if tls {
        args.extend([
            "-X".to_owned(),
            format!("ssl.ca.location={}", pki.ca_cert.display()),
        ]);
    }
    args
}

fn produce_and_consume(tool: &Kcat, node: &SecureNode, port: u16, auth: &[String], topic: &str) {
    let context = |what: &str, out: &ToolOutput| {
        format!(
            "{what} {topic} against {} on port {port}: exit {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
            node.kind,
            out.status,
            out.stdout,
            out.stderr,
            node.log_tail()
        )
    };
    kcat_round_trip(tool, port, auth, topic, &["k1:v1", "k2:v2"], &context);
}

fn check_kcat(node: &SecureNode, pki: &TestPki, tool: &Kcat) {
    let (plaintext, ssl) = (node.ports[0], node.ports[1]);
    for (port, tls) in [(plaintext, false), (ssl, true)] {
        let suffix = if tls { "ssl" } else { "plaintext" };
        produce_and_consume(
            tool,
            node,
            port,
            &sasl_args(pki, tls, "PLAIN", "alice", "alice-secret"),
            &format!("plain-{suffix}"),
        );
        produce_and_consume(
            tool,
            node,
            port,
            &sasl_args(pki, tls, "SCRAM-SHA-512", "bob", "bob-secret"),
            &format!("scram-{suffix}"),
        );
        for (mechanism, user, message) in [
            (
                "PLAIN",
                "alice",
                "Authentication failed: Invalid username or password",
            ),
            (
                "SCRAM-SHA-512",
                "bob",
                "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            ),
            // A PLAIN user has no SCRAM credential.
            (
                "SCRAM-SHA-512",
                "alice",
                "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            ),
        ] {
            let password = if user == "alice" && mechanism == "SCRAM-SHA-512" {
                "alice-secret"
            } else {
                "wrong"
            };
            // A refused login is logged at once; kcat then waits out its metadata timeout,
            // so these runs wait 2 s, not the 10 s of the runs that must succeed.
            let mut args = sasl_args(pki, tls, mechanism, user, password);
            if let Some(at) = args.iter().position(|a| a == "-m") {
                args[at + 1] = "2".to_owned();
            }
            let out = run_kcat(tool, port, &args, &["-L"], None);
            assert!(
                !out.success() && !out.stdout.contains("brokers:") && out.stderr.contains(message),
                "{} {suffix} {mechanism} {user}/{password}: want a failure saying {message:?}\nstdout:\n{}\nstderr:\n{}",
                node.kind,
                out.stdout,
                out.stderr
            );
        }
    }
}

/// One request on a blocking socket; `None` when the broker closes instead of answering.
fn exchange(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: RequestKind,
) -> Option<ResponseKind> {
    let frame = encode_request(key, version, 7, "sasl-test", &request).expect("encode");
    stream.write_all(&frame).ok()?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(size)).ok()?];
    stream.read_exact(&mut body).ok()?;
    let mut body = Bytes::from(body);
    decode_response_header(&mut body, key, version).expect("header");
    Some(decode_response_body(body.copy_to_bytes(body.remaining()), key, version).expect("body"))
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    stream
}

fn handshake(mechanism: &str) -> RequestKind {
    RequestKind::SaslHandshake(
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.to_owned())),
    )
}

/// What the broker answers on the wire, as text to compare between Kafka and krust.
fn wire_answers(node: &SecureNode) -> Vec<String> {
    let plaintext_sasl = node.ports[0];
    let mut answers = Vec::new();
    // A Produce before the handshake: closed, no answer.
    let mut s = connect(plaintext_sasl);
    let produce = exchange(
        &mut s,
        ApiKey::Produce,
        9,
        RequestKind::Produce(ProduceRequest::default()),
    );
    answers.push(format!("produce before handshake: {produce:?}"));
    // An unknown mechanism.
    let mut s = connect(plaintext_sasl);
    match exchange(&mut s, ApiKey::SaslHandshake, 1, handshake("GSSAPI")) {
        Some(ResponseKind::SaslHandshake(r)) => answers.push(format!(
            "GSSAPI: error {} mechanisms {:?}",
            r.error_code,
            r.mechanisms
                .iter()
                .map(|m| m.as_str().to_owned())
                .collect::<Vec<_>>()
        )),
        other => answers.push(format!("GSSAPI: {other:?}")),
    }
    // A bad PLAIN token, then the connection.
    let mut s = connect(plaintext_sasl);
    let ok = exchange(&mut s, ApiKey::SaslHandshake, 1, handshake("PLAIN"));
    answers.push(format!(
        "PLAIN handshake: {:?}",
        ok.map(|r| match r {
            ResponseKind::SaslHandshake(r) => r.error_code,
            _ => -100,
        })
    ));
    for (token, what) in [
        (&b"\0alice\0wrong"[..], "wrong password"),
        (b"\0alice", "two tokens"),
    ] {
        let mut s = connect(plaintext_sasl);
        exchange(&mut s, ApiKey::SaslHandshake, 1, handshake("PLAIN")).expect("handshake");
        let request = RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
        );
        match exchange(&mut s, ApiKey::SaslAuthenticate, 2, request) {
            Some(ResponseKind::SaslAuthenticate(r)) => answers.push(format!(
                "{what}: error {} message {:?}",
                r.error_code,
                r.error_message.as_ref().map(|m| m.as_str().to_owned())
            )),
            other => answers.push(format!("{what}: {other:?}")),
        }
        let after = exchange(&mut s, ApiKey::SaslHandshake, 1, handshake("PLAIN"));
        answers.push(format!(
            "{what}, then: {}",
            if after.is_some() {
                "answered"
            } else {
                "closed"
            }
        ));
    }
    // v0 handshake, raw PLAIN token: an empty size-prefixed answer, then requests are served.
    let mut s = connect(plaintext_sasl);
    exchange(&mut s, ApiKey::SaslHandshake, 0, handshake("PLAIN")).expect("v0 handshake");
    let token = b"\0alice\0alice-secret";
    let mut frame = (token.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(token);
    s.write_all(&frame).expect("raw token");
    let mut answer = [0u8; 4];
    let raw = s.read_exact(&mut answer).map(|()| answer);
    answers.push(format!("v0 raw token answer: {raw:?}"));
    let again = exchange(&mut s, ApiKey::SaslHandshake, 1, handshake("PLAIN"));
    answers.push(format!(
        "handshake after authentication: {:?}",
        again.map(|r| match r {
            ResponseKind::SaslHandshake(r) => r.error_code,
            _ => -100,
        })
    ));
    answers
}

const CONFLUENT_SCRAM: &str = r#"
import sys
from confluent_kafka import Producer, Consumer, TopicPartition
bootstrap, ca, topic = sys.argv[1:4]
auth = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": "bob-secret"}
p = Producer(dict(auth, **{"acks": "all"}))
for i in range(5):
    p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
left = p.flush(30)
assert left == 0, "%d records not acknowledged" % left
c = Consumer(dict(auth, **{"group.id": "unused", "enable.auto.commit": False}))
c.assign([TopicPartition(topic, 0, 0)])
got = []
for _ in range(60):
    m = c.poll(1.0)
    if m is None:
        if len(got) == 5:
            break
        continue
    assert m.error() is None, m.error()
    got.append((m.offset(), m.key(), m.value()))
c.close()
assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)], got
print("ok", len(got))
"#;

fn check_confluent(node: &SecureNode, pki: &TestPki, python: &PythonClients) {
    let bootstrap = format!("127.0.0.1:{}", node.ports[1]);
    let out = python
        .run_script(
            CONFLUENT_SCRAM,
            &[
                &bootstrap,
                &pki.ca_cert.display().to_string(),
                "scram-confluent",
            ],
            TOOL_TIMEOUT,
        )
        .expect("python runs");
    assert!(
        out.success() && out.stdout.trim() == "ok 5",
        "confluent-kafka SCRAM-SHA-512 over SASL_SSL against {}: exit {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
        node.kind,
        out.status,
        out.stdout,
        out.stderr,
        node.log_tail()
    );
}

/// `kafka-configs` adds SCRAM-SHA-512 user `carol`; kcat then authenticates as carol (the
/// credential travels controller → metadata log → the broker's image, so it is retried for a
/// bounded time).
fn check_runtime_scram_user(dist: &KafkaDist, node: &SecureNode, pki: &TestPki, tool: &Kcat) {
    let bootstrap = format!(
        "127.0.0.1:{}",
        node.node.broker_port().expect("broker port")
    );
    let out = dist
        .tool("kafka.admin.ConfigCommand")
        .args([
            "--bootstrap-server",
            &bootstrap,
            "--alter",
            "--add-config",
            "SCRAM-SHA-512=[iterations=4096,password=carol-secret]",
            "--entity-type",
            "users",
            "--entity-name",
            "carol",
        ])
        .run()
        .expect("kafka-configs runs");
    assert!(
        out.success(),
        "kafka-configs --add-config SCRAM-SHA-512 against {}: {}\n{}",
        node.kind,
        out.stdout,
        out.stderr
    );
    let auth = sasl_args(pki, false, "SCRAM-SHA-512", "carol", "carol-secret");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = run_kcat(tool, node.ports[0], &auth, &["-L"], None);
        if out.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: carol cannot authenticate 30 s after kafka-configs added her:\n{}\nbroker log:\n{}",
            node.kind,
            out.stderr,
            node.log_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn run(krust: bool) -> Vec<String> {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = TestPki::generate(dir.path().join("pki")).expect("test PKI");
    let node = start(&dist, &pki, krust);
    if let Some(tool) = Kcat::locate().expect("kcat") {
        check_kcat(&node, &pki, &tool);
        check_runtime_scram_user(&dist, &node, &pki, &tool);
    }
    if let Some(python) = PythonClients::locate().expect("python venv") {
        check_confluent(&node, &pki, &python);
    }
    wire_answers(&node)
}

#[test]
fn sasl_listeners_like_kafka() {
    let _serial = broker_lock();
    let kafka = run(false);
    let krust = run(true);
    assert_eq!(krust, kafka, "krust's SASL answers differ from Kafka 3.9's");
    eprintln!("{kafka:#?}");
}
