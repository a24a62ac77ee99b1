//! Start-up config validation parity with Apache Kafka 3.9 (issue 10): 30 `server.properties`
//! files, each a valid combined node with one malformed or out-of-range value, are given to
//! Kafka 3.9's own server (`kafka.Kafka`) and to `krust server`. Both must refuse to start, and
//! krust must print the message Kafka's `ConfigException` (or `requirement failed`) carries,
//! which names the key.
//!
//! Every process is bounded by a timeout, only 127.0.0.1.

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use krust_testkit::{KafkaDist, free_ports, run_binary};

const TIMEOUT: Duration = Duration::from_secs(90);

/// One bad line each (appended: the last value of a key wins, in Java and in krust).
const BAD_LINES: &[&str] = &[
    "log.retention.ms=abc",
    "log.cleaner.threads=-1",
    "message.max.bytes=x",
    "num.io.threads=0",
    "log.segment.bytes=10",
    "auto.create.topics.enable=maybe",
    "log.cleanup.policy=bogus",
    "compression.type=brotli",
    "log.cleaner.min.cleanable.ratio=2",
    "min.insync.replicas=0",
    "num.partitions=0",
    "default.replication.factor=x",
    "log.message.timestamp.type=Bogus",
    "process.roles=brokr",
    "node.id=x",
    "inter.broker.protocol.version=9.9",
    "socket.request.max.bytes=0",
    "replica.lag.time.max.ms=abc",
    "offsets.topic.replication.factor=0",
    "log.retention.bytes=1.5",
    "controller.quorum.election.timeout.ms=abc",
    "group.max.session.timeout.ms=x",
    "max.connections.per.ip=-1",
    "max.connections.per.ip=0",
    "max.connections.per.ip.overrides=hostA",
    "max.connections.per.ip.overrides=127.0.0.1:x",
    "max.connections.per.ip.overrides=a b:1, c/d:2",
    // SASL between brokers with a mechanism the listener does not enable (`{b}`/`{c}`: the
    // broker and controller ports).
    "listeners=SASL_PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{c}\n\
     listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT\n\
     security.inter.broker.protocol=SASL_PLAINTEXT\n\
     sasl.mechanism.inter.broker.protocol=PLAIN\nsasl.enabled.mechanisms=SCRAM-SHA-512",
    "inter.broker.listener.name=PLAINTEXT\nsecurity.inter.broker.protocol=PLAINTEXT",
    "inter.broker.listener.name=NOPE",
];

/// The exception message Kafka's output carries: the text after `ConfigException: `, the
/// message of an `IllegalArgumentException` (`requirement failed: …` and others) or of a
/// `NumberFormatException` (a `max.connections.per.ip.overrides` count).
fn kafka_message(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        [
            "ConfigException: ",
            "IllegalArgumentException: ",
            "NumberFormatException: ",
        ]
        .iter()
        .find_map(|marker| line.split_once(marker))
        .map(|(_, m)| m.trim().to_owned())
    })
}

#[test]
fn malformed_server_properties_stop_startup_with_kafkas_message() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = free_ports(2).expect("ports");
    let base = format!(
        "process.roles=broker,controller\nnode.id=1\n\
         controller.quorum.voters=1@127.0.0.1:{c}\n\
         listeners=PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{c}\n\
         controller.listener.names=CONTROLLER\n\
         log.dirs={}\n",
        dir.path().join("data").display(),
        b = ports[0],
        c = ports[1],
    );
    let mut failures = Vec::new();
    for (i, line) in BAD_LINES.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.properties"));
        let line = line
            .replace("{b}", &ports[0].to_string())
            .replace("{c}", &ports[1].to_string());
        std::fs::write(&path, format!("{base}{line}\n")).expect("write properties");
        let path_text = path.display().to_string();
        let kafka = dist
            .run_tool("kafka.Kafka", &[path_text.as_str()], TIMEOUT)
            .expect("run Kafka");
        let kafka_out = format!("{}{}", kafka.stdout, kafka.stderr);
        let Some(want) = kafka_message(&kafka_out) else {
            failures.push(format!(
                "{line}: Kafka printed no config error:\n{kafka_out}"
            ));
            continue;
        };
        assert!(!kafka.success(), "{line}: Kafka started");
        let krust = run_binary(
            support::KRUST,
            &["server", path_text.as_str()],
            None,
            TIMEOUT,
        )
        .expect("run krust server");
        let krust_out = format!("{}{}", krust.stdout, krust.stderr);
        if krust.success() || !krust_out.contains(&want) {
            failures.push(format!(
                "{line}: Kafka says {want:?}; krust (success={}) said:\n{krust_out}",
                krust.success()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
