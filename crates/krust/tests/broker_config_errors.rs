//! `krust server` with a broker role refuses configurations Kafka 3.9 refuses, with a clear
//! message and exit code 1, never a panic or a hang: a broker-only node listed among the
//! voters, a controller not listed, a controller listener as the only listener of a broker, an SSL listener without a key store
//! or with a JKS one (krust reads PEM stores only), a SASL listener with GSSAPI, an
//! `inter.broker.listener.name` that names no listener, unformatted storage.

use std::path::Path;
use std::time::Duration;

use krust_testkit::{free_ports, random_kafka_uuid, run_binary};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");
const TIMEOUT: Duration = Duration::from_secs(30);

fn format(props: &Path, cluster_id: &str) {
    let props = props.display().to_string();
    run_binary(
        KRUST,
        &["storage", "format", "-t", cluster_id, "-c", &props],
        None,
        TIMEOUT,
    )
    .expect("run krust storage format")
    .ok()
    .expect("krust storage format");
}

/// Runs `krust server` on `text` (formatted first when `formatted`); returns stderr.
fn refused(root: &Path, name: &str, text: &str, formatted: bool) -> String {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let props = dir.join("server.properties");
    std::fs::write(
        &props,
        format!("{text}log.dirs={}\n", dir.join("data").display()),
    )
    .expect("write");
    if formatted {
        format(&props, &random_kafka_uuid());
    }
    let out = run_binary(
        KRUST,
        &["server", &props.display().to_string()],
        None,
        TIMEOUT,
    )
    .expect("run krust server");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{name}: exit 1 expected\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{name}: {}", out.stderr);
    out.stderr
}

#[test]
fn bad_broker_configurations_are_refused_with_kafkas_reasons() {
    let root = tempfile::tempdir().expect("tempdir");
    let ports = free_ports(2).expect("ports");
    let (controller, broker) = (ports[0], ports[1]);
    let common = format!(
        "controller.listener.names=CONTROLLER\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
    );
    let cases = [
        (
            "broker among the voters",
            format!(
                "process.roles=broker\nnode.id=1\n{common}listeners=PLAINTEXT://127.0.0.1:{broker}\n"
            ),
            // `kafka-storage format` refuses it too (KafkaConfig's check).
            false,
            "must not be included in the set of voters",
        ),
        (
            "controller not among the voters",
            format!(
                "process.roles=broker,controller\nnode.id=2\n{common}listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
            ),
            false,
            "must be included in the set of voters",
        ),
        (
            "no broker listener",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=CONTROLLER://127.0.0.1:{broker}\n"
            ),
            false,
            "must not contain a value appearing in the 'listeners'",
        ),
        (
            "SSL listener without a key store",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=SSL://127.0.0.1:{broker}\nlistener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT\ninter.broker.listener.name=SSL\n"
            ),
            true,
            "SSL listener without a key store",
        ),
        (
            "SSL listener with a JKS key store",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=SSL://127.0.0.1:{broker}\nlistener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT\ninter.broker.listener.name=SSL\nssl.keystore.location=/nonexistent/server.jks\nssl.keystore.password=secret\n"
            ),
            true,
            "ssl.keystore.type JKS is not supported by krust",
        ),
        (
            "SASL listener with GSSAPI",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=SASL_PLAINTEXT://127.0.0.1:{broker}\nlistener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT\ninter.broker.listener.name=SASL_PLAINTEXT\n"
            ),
            true,
            "SASL mechanism GSSAPI is not supported by krust",
        ),
        (
            "unknown inter-broker listener",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=PLAINTEXT://127.0.0.1:{broker}\ninter.broker.listener.name=REPLICATION\n"
            ),
            // Kafka's `StorageTool` refuses to format it too (its `KafkaConfig` validation).
            false,
            "Listener with name REPLICATION defined in inter.broker.listener.name not found in listener.security.protocol.map.",
        ),
        (
            "unformatted storage",
            format!(
                "process.roles=broker\nnode.id=4\n{common}listeners=PLAINTEXT://127.0.0.1:{broker}\n"
            ),
            false,
            "meta.properties",
        ),
    ];
    for (name, text, formatted, reason) in cases {
        let stderr = refused(root.path(), &name.replace(' ', "-"), &text, formatted);
        assert!(
            stderr.contains(reason),
            "{name}: expected {reason:?} in:\n{stderr}"
        );
    }
}
