//! A krust cluster of 3 controllers and 2 brokers, each a `krust server` process (issue 5,
//! items 1 and 5): the brokers observe the metadata quorum, register and are unfenced (they
//! print "Kafka Server started" only then); Kafka 3.9's `kafka-topics` creates an RF=2 topic
//! through a broker (forwarded to the active controller in an Envelope); Kafka's console
//! producer writes to it with acks=all and the console consumer reads it back through the other
//! broker. SIGTERM on a broker is a controlled shutdown the controller agrees to (exit 0), the
//! records stay readable through the remaining broker, and the restarted broker registers
//! again, keeps its data and serves it.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use krust_testkit::{KafkaDist, free_ports, random_kafka_uuid};
use support::{
    Node, broker_properties, consume_sorted, describe_topic, terminate_cleanly, voters,
    write_controllers, write_node,
};

mod support;

/// `GET /metrics` on 127.0.0.1:`port`.
fn scrape_metrics(port: u16) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ =
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// The value of an unlabelled sample.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn brokers_register_unfence_serve_an_rf2_topic_and_shut_down_in_a_controlled_way() {
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(6).expect("ports");
    let metrics_port = ports[5];
    let voters = voters(&ports);
    let mut controllers = write_controllers(root.path(), &ports, &cluster_id, "");
    let mut brokers: Vec<Node> = (4..=5)
        .zip(&ports[3..])
        .map(|(id, port)| {
            let dir = root.path().join(format!("node{id}"));
            // Broker 4 keeps its metadata log apart; broker 5 keeps it in its log dir (Kafka's
            // default), which the Raft driver and the broker then share, and snapshots its
            // metadata image often.
            let metadata_dir = if id == 4 {
                format!(
                    "metadata.log.dir={}\nmetrics.port={metrics_port}\n",
                    dir.join("metadata").display()
                )
            } else {
                "metadata.log.max.record.bytes.between.snapshots=1000\n".to_owned()
            };
            let text = broker_properties(
                id,
                *port,
                &voters,
                &format!(
                    "log.dirs={}\n{metadata_dir}\
                 offsets.topic.replication.factor=2\nreplica.lag.time.max.ms=10000\n",
                    dir.join("logs").display(),
                ),
            );
            write_node(root.path(), id, &text, &cluster_id)
        })
        .collect();
    for node in &mut controllers {
        node.start();
    }
    // "Kafka Server started" on a broker means registered and unfenced.
    for node in &mut brokers {
        node.start();
    }
    let bootstrap4 = format!("127.0.0.1:{}", ports[3]);
    let bootstrap5 = format!("127.0.0.1:{}", ports[4]);

    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let topic = "rf2";
    dist.create_topic(&bootstrap4, topic, 2, 2, &[])
        .unwrap_or_else(|e| {
            panic!(
                "kafka-topics --create: {e}\n{}",
                brokers[0].process().log_tail(40)
            )
        });
    let described = describe_topic(&dist, &bootstrap5, topic);
    assert!(
        described.contains("PartitionCount: 2") && described.contains("ReplicationFactor: 2"),
        "kafka-topics --describe:\n{described}"
    );
    for replicas in ["Replicas: 4,5", "Replicas: 5,4"] {
        assert!(
            described.contains(replicas),
            "both brokers host replicas:\n{described}"
        );
    }

    let input: String = (0..10).map(|i| format!("record-{i}\n")).collect();
    let mut expected: Vec<String> = (0..10).map(|i| format!("record-{i}")).collect();
    expected.sort();
    dist.console_produce(&bootstrap4, topic, &input, &[], &[])
        .unwrap_or_else(|e| {
            panic!(
                "kafka-console-producer: {e}\n{}",
                brokers[0].process().log_tail(40)
            )
        });
    assert_eq!(consume_sorted(&dist, &bootstrap5, topic, 10), expected);

    // Broker 5 wrote metadata snapshots of its own (a broker-only node's snapshot generator).
    let metadata_log = brokers[1].dir.join("logs").join("__cluster_metadata-0");
    let has_snapshot = || {
        std::fs::read_dir(&metadata_log)
            .map(|entries| {
                entries.flatten().any(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.ends_with(".checkpoint"))
                })
            })
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !has_snapshot() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        has_snapshot(),
        "broker 5 snapshots its metadata log:\n{}",
        brokers[1].process().log_tail(40)
    );

    // SIGTERM broker 5: the controller moves its leaderships away, then lets it go.
    let status = brokers[1]
        .process()
        .terminate(Duration::from_secs(60))
        .expect("terminate broker 5");
    let log = brokers[1].process().output();
    assert!(status.success(), "broker 5 exit status {status}\n{log}");
    assert!(
        log.contains("the controller agreed to the controlled shutdown"),
        "a controlled shutdown:\n{}",
        brokers[1].process().log_tail(40)
    );
    assert_eq!(
        consume_sorted(&dist, &bootstrap4, topic, 10),
        expected,
        "every record is readable through the remaining broker"
    );
    // Broker 4 now leads both partitions with broker 5 out of their ISRs.
    let mut metrics = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        metrics = scrape_metrics(metrics_port);
        if gauge(
            &metrics,
            "kafka_server_replicamanager_underreplicatedpartitions",
        ) >= Some(2.0)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        gauge(
            &metrics,
            "kafka_server_replicamanager_underreplicatedpartitions"
        ) >= Some(2.0)
            && gauge(&metrics, "kafka_server_kafkaserver_brokerstate") == Some(3.0),
        "broker 4 reports its under-replicated partitions:\n{metrics}"
    );

    // Restart broker 5: it registers again (a new incarnation), is unfenced and serves.
    brokers[1].start();
    assert!(
        brokers[1].dir.join("logs").join("rf2-0").is_dir()
            && brokers[1].dir.join("logs").join("rf2-1").is_dir(),
        "broker 5 keeps its partition directories"
    );
    assert_eq!(
        consume_sorted(&dist, &bootstrap5, topic, 10),
        expected,
        "the restarted broker serves the topic"
    );

    terminate_cleanly(brokers.iter_mut().chain(controllers.iter_mut()));
}
