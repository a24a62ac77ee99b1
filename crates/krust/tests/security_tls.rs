//! TLS listeners with real clients (issue 12, item 1), the same checks against Apache Kafka 3.9
//! (the oracle) and a `krust server` node started from the same `server.properties` keys:
//! an `SSL` listener with server-only TLS (the unprefixed `ssl.*` keys) and an `MTLS` listener
//! (security protocol SSL) whose `listener.name.mtls.ssl.client.auth=required` overrides them.
//! kcat lists, produces and consumes over both; confluent-kafka produces and consumes with a
//! client certificate; a client without a certificate, with one of an untrusted CA, or speaking
//! plaintext to a TLS port gets nothing. PEM key and trust stores from `openssl`
//! (`krust_testkit::TestPki`). One broker at a time, every run bounded, only 127.0.0.1.
//!
//! The other stores Kafka reads (issue 12), the same keys given to both: a `P12` listener with a
//! PKCS12 key store and a PKCS12 trust store for required client certificates, where kcat
//! produces and consumes, and a wrong `ssl.keystore.password` stops the node at startup (Java's
//! "keystore password was incorrect" in both logs); an `ENC` listener whose PEM key is
//! encrypted with PBES2 (`ssl.key.password`), served by krust — Kafka 3.9 on JDK 17 refuses
//! that key at startup ("PBES2 SecretKeyFactory not available"), which is checked too.

mod security_support;

use std::path::Path;

use krust_testkit::{KafkaDist, Kcat, PythonClients, TEST_STORE_PASSWORD, TestPki, ToolOutput};
use security_support::{SecureNode, TOOL_TIMEOUT, broker_lock, kcat_round_trip, run_kcat};

/// The node with an SSL listener (port 0) and an MTLS one (port 1).
struct SecureBroker {
    kind: &'static str,
    ssl_port: u16,
    mtls_port: u16,
    node: SecureNode,
}

impl SecureBroker {
    fn start(dist: &KafkaDist, pki: &TestPki, krust: bool) -> SecureBroker {
        let path = |p: &Path| p.display().to_string();
        let node = SecureNode::start(
            dist,
            krust,
            &[("SSL", "SSL"), ("MTLS", "SSL")],
            &[
                ("ssl.keystore.type", "PEM".to_owned()),
                ("ssl.keystore.location", path(&pki.server_keystore)),
                ("ssl.truststore.type", "PEM".to_owned()),
                ("ssl.truststore.location", path(&pki.ca_cert)),
                ("listener.name.mtls.ssl.client.auth", "required".to_owned()),
            ],
            &[],
        );
        SecureBroker {
            kind: node.kind,
            ssl_port: node.ports[0],
            mtls_port: node.ports[1],
            node,
        }
    }

    fn log_tail(&self) -> String {
        self.node.log_tail()
    }
}

fn tls_args<'a>(pki: &'a TestPki, identity: Option<(&'a Path, &'a Path)>) -> Vec<String> {
    let mut args = vec![
        "-X".to_owned(),
        "security.protocol=ssl".to_owned(),
        "-X".to_owned(),
        format!("ssl.ca.location={}", pki.ca_cert.display()),
        "-m".to_owned(),
        "10".to_owned(),
    ];
    if let Some((cert, key)) = identity {
        args.extend([
            "-X".to_owned(),
            format!("ssl.certificate.location={}", cert.display()),
            "-X".to_owned(),
            format!("ssl.key.location={}", key.display()),
        ]);
    }
    args
}

fn produce_and_consume(tool: &Kcat, broker: &SecureBroker, port: u16, tls: &[String], topic: &str) {
    let context = |what: &str, out: &ToolOutput| {
        format!(
            "{what} against {} on port {port}: exit {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
            broker.kind,
            out.status,
            out.stdout,
            out.stderr,
            broker.log_tail()
        )
    };
    let listing = run_kcat(tool, port, tls, &["-L"], None);
    assert!(
        listing.success() && listing.stdout.contains(&format!("at 127.0.0.1:{port}")),
        "{}",
        context("kcat -L", &listing)
    );
    kcat_round_trip(
        tool,
        port,
        tls,
        topic,
        &["k1:v1", "k2:v2", "k3:v3"],
        &context,
    );
}

fn check_tls(broker: &SecureBroker, pki: &TestPki, tool: &Kcat) {
    // Server-only TLS.
    produce_and_consume(
        tool,
        broker,
        broker.ssl_port,
        &tls_args(pki, None),
        "tls-server-auth",
    );
    // Mutual TLS.
    let identity = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    produce_and_consume(
        tool,
        broker,
        broker.mtls_port,
        &tls_args(pki, identity),
        "tls-mutual",
    );
    // Refused: no client certificate, an untrusted one.
    let untrusted = Some((pki.untrusted_cert.as_path(), pki.untrusted_key.as_path()));
    for (what, identity) in [
        ("no client certificate", None),
        ("an untrusted certificate", untrusted),
    ] {
        let out = run_kcat(
            tool,
            broker.mtls_port,
            &tls_args(pki, identity),
            &["-L"],
            None,
        );
        assert!(
            !out.success() && !out.stdout.contains("brokers:"),
            "{}: kcat -L with {what} on the required-client-auth listener was served:\n{}\n{}",
            broker.kind,
            out.stdout,
            out.stderr
        );
    }
    // Plaintext to a TLS port.
    let out = run_kcat(
        tool,
        broker.ssl_port,
        &["-m".to_owned(), "5".to_owned()],
        &["-L"],
        None,
    );
    assert!(
        !out.success() && !out.stdout.contains("brokers:"),
        "{}: a plaintext kcat was served on the SSL port:\n{}",
        broker.kind,
        out.stdout
    );
}

const CONFLUENT_MTLS: &str = r#"
import sys
from confluent_kafka import Producer, Consumer, TopicPartition
bootstrap, ca, cert, key, topic = sys.argv[1:6]
tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca,
       "ssl.certificate.location": cert, "ssl.key.location": key}
p = Producer(dict(tls, **{"acks": "all"}))
for i in range(5):
    p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
left = p.flush(30)
assert left == 0, "%d records not acknowledged" % left
c = Consumer(dict(tls, **{"group.id": "unused", "enable.auto.commit": False}))
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
want = [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
assert got == want, got
print("ok", len(got))
"#;

fn check_confluent(broker: &SecureBroker, pki: &TestPki, python: &PythonClients) {
    let bootstrap = format!("127.0.0.1:{}", broker.mtls_port);
    let out = python
        .run_script(
            CONFLUENT_MTLS,
            &[
                &bootstrap,
                &pki.ca_cert.display().to_string(),
                &pki.client_cert.display().to_string(),
                &pki.client_key.display().to_string(),
                "tls-confluent",
            ],
            TOOL_TIMEOUT,
        )
        .expect("python runs");
    assert!(
        out.success() && out.stdout.trim() == "ok 5",
        "confluent-kafka over mTLS against {}: exit {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
        broker.kind,
        out.status,
        out.stdout,
        out.stderr,
        broker.log_tail()
    );
}

fn run(krust: bool) {
    let Some(tool) = Kcat::locate().expect("kcat") else {
        return;
    };
    let _serial = broker_lock();
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = TestPki::generate(dir.path().join("pki")).expect("test PKI");
    let broker = SecureBroker::start(&dist, &pki, krust);
    check_tls(&broker, &pki, &tool);
    if let Some(python) = PythonClients::locate().expect("python venv") {
        check_confluent(&broker, &pki, &python);
    }
}

#[test]
fn ssl_listeners_serve_real_clients_on_kafka() {
    run(false);
}

#[test]
fn ssl_listeners_serve_real_clients_on_krust() {
    run(true);
}

/// The `ENC` (encrypted PEM key) and `P12` (PKCS12 key and trust stores, client certificates
/// required) listeners' keys; `keystore_password` is the PKCS12 store's.
fn store_props(pki: &TestPki, keystore_password: &str) -> Vec<(&'static str, String)> {
    let mut props = enc_props(pki);
    props.extend(p12_props(pki, keystore_password));
    props
}

fn enc_props(pki: &TestPki) -> Vec<(&'static str, String)> {
    let path = |p: &Path| p.display().to_string();
    vec![
        ("listener.name.enc.ssl.keystore.type", "PEM".to_owned()),
        (
            "listener.name.enc.ssl.keystore.location",
            path(&pki.server_keystore_encrypted),
        ),
        (
            "listener.name.enc.ssl.key.password",
            TEST_STORE_PASSWORD.to_owned(),
        ),
    ]
}

fn p12_props(pki: &TestPki, keystore_password: &str) -> Vec<(&'static str, String)> {
    let path = |p: &Path| p.display().to_string();
    vec![
        ("listener.name.p12.ssl.keystore.type", "PKCS12".to_owned()),
        (
            "listener.name.p12.ssl.keystore.location",
            path(&pki.server_keystore_p12),
        ),
        (
            "listener.name.p12.ssl.keystore.password",
            keystore_password.to_owned(),
        ),
        ("listener.name.p12.ssl.truststore.type", "PKCS12".to_owned()),
        (
            "listener.name.p12.ssl.truststore.location",
            path(&pki.truststore_p12),
        ),
        (
            "listener.name.p12.ssl.truststore.password",
            TEST_STORE_PASSWORD.to_owned(),
        ),
        ("listener.name.p12.ssl.client.auth", "required".to_owned()),
    ]
}

fn run_stores(krust: bool) {
    let Some(tool) = Kcat::locate().expect("kcat") else {
        return;
    };
    let _serial = broker_lock();
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = TestPki::generate(dir.path().join("pki")).expect("test PKI");
    let listeners = [("ENC", "SSL"), ("P12", "SSL")];
    if !krust {
        // Kafka 3.9 on the JDK here (17) cannot read a PBES2 key (what `openssl pkcs8 -topk8
        // -v2 aes-256-cbc` writes and krust reads): its `PemStore` asks the JDK for a
        // `SecretKeyFactory` named by `EncryptedPrivateKeyInfo.getAlgName()`, "PBES2".
        let Err(failure) =
            SecureNode::try_start(&dist, krust, &listeners[..1], &enc_props(&pki), &[])
        else {
            panic!("kafka started with a PBES2-encrypted PEM key");
        };
        assert!(
            failure.contains("Invalid PEM keystore configs")
                && failure.contains("PBES2 SecretKeyFactory not available"),
            "{failure}"
        );
    }
    let (listeners, props) = if krust {
        (&listeners[..], store_props(&pki, TEST_STORE_PASSWORD))
    } else {
        (&listeners[1..], p12_props(&pki, TEST_STORE_PASSWORD))
    };
    let node = SecureNode::start(&dist, krust, listeners, &props, &[]);
    let p12_port = node.ports[listeners.len() - 1];
    let broker = SecureBroker {
        kind: node.kind,
        ssl_port: node.ports[0],
        mtls_port: p12_port,
        node,
    };
    if krust {
        produce_and_consume(
            &tool,
            &broker,
            broker.ssl_port,
            &tls_args(&pki, None),
            "tls-encrypted-pem",
        );
    }
    let identity = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    produce_and_consume(
        &tool,
        &broker,
        broker.mtls_port,
        &tls_args(&pki, identity),
        "tls-pkcs12",
    );
    // The PKCS12 trust store decides: a certificate of another CA is refused.
    let untrusted = Some((pki.untrusted_cert.as_path(), pki.untrusted_key.as_path()));
    let out = run_kcat(
        &tool,
        broker.mtls_port,
        &tls_args(&pki, untrusted),
        &["-L"],
        None,
    );
    assert!(
        !out.success() && !out.stdout.contains("brokers:"),
        "{}: an untrusted client certificate was served on the PKCS12 listener:\n{}",
        broker.kind,
        out.stdout
    );
    drop(broker);

    // A wrong key store password: the node does not start.
    let wrong = if krust {
        store_props(&pki, "not-the-password")
    } else {
        p12_props(&pki, "not-the-password")
    };
    let Err(failure) = SecureNode::try_start(&dist, krust, listeners, &wrong, &[]) else {
        panic!(
            "{} started with a wrong ssl.keystore.password",
            if krust { "krust" } else { "kafka" }
        );
    };
    let p12 = pki.server_keystore_p12.display().to_string();
    assert!(
        failure.contains(&format!("Failed to load SSL keystore {p12} of type PKCS12"))
            && failure.contains("keystore password was incorrect"),
        "{failure}"
    );
}

#[test]
fn encrypted_pem_and_pkcs12_stores_on_kafka() {
    run_stores(false);
}

#[test]
fn encrypted_pem_and_pkcs12_stores_on_krust() {
    run_stores(true);
}
