//! `krust dev` end to end (issue 5, item 5): one command on an empty data dir formats storage,
//! starts a combined controller+broker and prints a `ready` line with the bootstrap address once
//! the broker is unfenced; then stock clients work against it — kcat `-L` (when kcat is
//! installed), Kafka 3.9's own `kafka-topics --create/--describe` (forwarded to the controller
//! in an Envelope) and `kafka-console-producer/consumer`; `/metrics` reports the broker as
//! running; SIGTERM shuts it down cleanly (exit 0) and a restart on the same data dir keeps the
//! topic and its records.
//!
//! Real processes only (the `krust` binary, Kafka's tool classes on a JVM), 127.0.0.1, every
//! wait bounded, everything killed on drop.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::time::Duration;

use krust_testkit::{KafkaDist, Kcat, KrustProcess, free_port};
use support::{KRUST, TOOL_TIMEOUT, consume_sorted, describe_topic};

mod support;

const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn start_dev(data_dir: &Path, port: u16) -> KrustProcess {
    let mut process = KrustProcess::builder(KRUST)
        .name("krust-dev")
        .args([
            "dev".as_ref(),
            "--data-dir".as_ref(),
            data_dir.as_os_str(),
            "--port".as_ref(),
            port.to_string().as_ref(),
        ])
        .env("RUST_LOG", "info,krust_net=warn")
        .start()
        .expect("start krust dev");
    let line = process
        .wait_for_line("krust dev ready", READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("krust dev never got ready: {e}\n{}", process.log_tail(40)));
    assert!(
        line.contains(&format!("bootstrap.servers=127.0.0.1:{port}")),
        "the ready line names the bootstrap address: {line}"
    );
    process
}

/// `GET /metrics` on the port `krust dev` keeps in its generated config.
fn scrape_metrics(data_dir: &Path) -> String {
    let config = std::fs::read_to_string(data_dir.join("server.properties")).expect("config");
    let port = config
        .lines()
        .find_map(|l| l.strip_prefix("metrics.port="))
        .expect("metrics.port is set")
        .trim()
        .to_owned();
    let mut stream =
        std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("response");
    body
}

#[test]
fn krust_dev_serves_kafka_tools_and_keeps_its_data_across_a_restart() {
    let root = tempfile::tempdir().expect("tempdir");
    let data_dir = root.path().join("krust-data");
    let port = free_port().expect("free port");
    let bootstrap = format!("127.0.0.1:{port}");
    let mut dev = start_dev(&data_dir, port);

    match Kcat::locate().expect("look for kcat") {
        Some(kcat) => {
            let out = kcat
                .run(&bootstrap, &["-L"], None, TOOL_TIMEOUT)
                .expect("run kcat -L");
            assert!(
                out.success() && out.stdout.contains(&format!("broker 1 at {bootstrap}")),
                "kcat -L:\n{}\n{}",
                out.stdout,
                out.stderr
            );
        }
        None => eprintln!("skipping kcat -L: kcat is not installed (scripts/clients/install.sh)"),
    }

    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let topic = "dev-topic";
    dist.create_topic(&bootstrap, topic, 3, 1, &[])
        .unwrap_or_else(|e| panic!("kafka-topics --create: {e}\n{}", dev.log_tail(40)));
    let described = describe_topic(&dist, &bootstrap, topic);
    assert!(
        described.contains("PartitionCount: 3") && described.contains("ReplicationFactor: 1"),
        "kafka-topics --describe:\n{described}"
    );

    dist.console_produce(&bootstrap, topic, "one\ntwo\nthree\n", &[], &[])
        .unwrap_or_else(|e| panic!("kafka-console-producer: {e}\n{}", dev.log_tail(40)));
    assert_eq!(
        consume_sorted(&dist, &bootstrap, topic, 3),
        vec!["one", "three", "two"]
    );

    let metrics = scrape_metrics(&data_dir);
    assert!(
        metrics.contains("kafka_server_kafkaserver_brokerstate 3"),
        "the broker reports RUNNING (3):\n{metrics}"
    );
    assert!(
        metrics.contains("kafka_server_raft_metrics_current_leader"),
        "the Raft metrics are there too"
    );
    let leaders = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kafka_server_replicamanager_leadercount "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("LeaderCount is exposed:\n{metrics}"));
    assert!(
        leaders >= 3.0,
        "the one broker leads the topic's 3 partitions: {leaders}"
    );
    assert!(
        metrics.contains("kafka_server_brokertopicmetrics_messagesinpersec"),
        "the client listener's metrics are there too:\n{metrics}"
    );

    // SIGTERM: controlled shutdown, clean exit.
    let status = dev.terminate(Duration::from_secs(60)).expect("terminate");
    assert!(
        status.success(),
        "krust dev exit status {status}\n{}",
        dev.log_tail(40)
    );

    // Restart on the same data dir: no re-format, same topic, same records.
    let mut dev = start_dev(&data_dir, port);
    let described = describe_topic(&dist, &bootstrap, topic);
    assert!(
        described.contains("PartitionCount: 3"),
        "the topic survives a restart:\n{described}"
    );
    assert_eq!(
        consume_sorted(&dist, &bootstrap, topic, 3),
        vec!["one", "three", "two"],
        "the records survive a restart"
    );
    let status = dev.terminate(Duration::from_secs(60)).expect("terminate");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn krust_dev_refuses_a_data_dir_it_cannot_create() {
    let root = tempfile::tempdir().expect("tempdir");
    let file = root.path().join("not-a-dir");
    std::fs::write(&file, "x").expect("write");
    let out = krust_testkit::run_binary(
        KRUST,
        &[
            "dev",
            "--data-dir",
            &file.join("sub").display().to_string(),
            "--port",
            "0",
        ],
        None,
        Duration::from_secs(30),
    )
    .expect("run krust dev");
    assert!(!out.success(), "must fail: {}", out.stdout);
    assert!(
        out.stderr.contains("creating"),
        "a clear error: {}",
        out.stderr
    );
}
