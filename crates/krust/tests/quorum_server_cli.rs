//! `krust server` refuses to start on storage or configuration it cannot use — with Kafka's
//! message where Kafka has one, exit code 1, and no panic: unformatted storage, a node id that
//! does not match `meta.properties`, a broker role (not supported yet), a missing file.

#[path = "quorum_support/mod.rs"]
mod support;

use std::time::Duration;

use krust_testkit::{free_ports, run_binary};
use support::{KRUST, format, server_properties};

fn server(props: &std::path::Path) -> krust_testkit::ToolOutput {
    let props = props.display().to_string();
    run_binary(KRUST, &["server", &props], None, Duration::from_secs(30)).expect("run krust server")
}

#[test]
fn server_start_failures_are_reported_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports(1).expect("port")[0];
    let voters = format!("1@127.0.0.1:{port}");
    let props = dir.path().join("server.properties");
    let data = dir.path().join("data");

    std::fs::write(&props, server_properties(1, port, &voters, &data, &[])).expect("write");
    let out = server(&props);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("No `meta.properties` found in"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    // Formatted as node 1, configured as node 2.
    format(&props, &krust_testkit::random_kafka_uuid());
    std::fs::write(
        &props,
        server_properties(2, port, &format!("2@127.0.0.1:{port}"), &data, &[]),
    )
    .expect("write");
    let out = server(&props);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("Stored node id 1 doesn't match previous node id 2"),
        "{}",
        out.stderr
    );

    let broker = server_properties(1, port, &voters, &data, &[])
        .replace("process.roles=controller", "process.roles=broker")
        .replace("listeners=CONTROLLER://", "listeners=PLAINTEXT://");
    std::fs::write(&props, broker).expect("write");
    let out = server(&props);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    let out = server(&dir.path().join("missing.properties"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("missing.properties"), "{}", out.stderr);
}
