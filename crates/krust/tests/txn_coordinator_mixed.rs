//! The krust transaction coordinator driving Apache Kafka 3.9 partition leaders: one krust
//! controller, one krust broker leading `__transaction_state` (created with an explicit replica
//! assignment before any client) and one Kafka 3.9 broker leading the data partitions and
//! `__consumer_offsets`. A real transactional client (confluent-kafka) commits, aborts, sends
//! offsets in a transaction and is fenced by a second producer with its transactional id; a
//! `read_committed` consumer then sees exactly the committed records (the markers the krust
//! coordinator sent with WriteTxnMarkers reached the Kafka leader, which also verified each
//! first write with the coordinator — AddPartitionsToTxn v4 `verify_only`). Kafka's
//! `kafka-transactions.sh list|describe` read the coordinator's state. Last, a corrupt
//! `__transaction_state` record makes the restarted krust broker refuse to load that partition
//! with a clear error, and it keeps serving.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, PythonClients, class, free_ports, random_kafka_uuid,
};
use support::{Node, broker_properties, controller_properties, write_node};

mod support;

const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(120);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);
const KRUST_ID: i32 = 2;
const KAFKA_ID: i32 = 3;
const TRANSACTIONS_COMMAND: &str = "org.apache.kafka.tools.TransactionsCommand";

/// The client side: transactions through the krust coordinator, read back read_committed.
const SCRIPT: &str = r#"
import json, sys, time
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

bootstrap, topic, source = sys.argv[1:4]
def producer(tid):
    return Producer({'bootstrap.servers': bootstrap, 'transactional.id': tid,
                     'transaction.timeout.ms': 30000})
out = {}
p = producer('tx-a')
p.init_transactions(60)
p.begin_transaction()
for i in range(3):
    p.produce(topic, value=f'committed-{i}')
p.commit_transaction(60)
p.begin_transaction()
for i in range(2):
    p.produce(topic, value=f'aborted-{i}')
p.flush(30)
p.abort_transaction(60)
group = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'txn-group',
                  'enable.auto.commit': False})
p.begin_transaction()
p.produce(topic, value='with-offsets')
p.send_offsets_to_transaction([TopicPartition(source, 0, 7)], group.consumer_group_metadata(), 60)
p.commit_transaction(60)
# A second producer with the same id fences the first and aborts its open transaction.
p.begin_transaction()
p.produce(topic, value='fenced')
p.flush(30)
p2 = producer('tx-a')
p2.init_transactions(60)
try:
    p.commit_transaction(30)
    out['fenced'] = 'commit succeeded'
except KafkaException as e:
    out['fenced'] = 'fatal' if e.args[0].fatal() else f'not fatal: {e}'
p2.begin_transaction()
p2.produce(topic, value='after-fence')
p2.commit_transaction(60)

reader = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'reader',
                   'isolation.level': 'read_committed', 'enable.auto.commit': False})
reader.assign([TopicPartition(topic, 0, 0)])
values = []
deadline = time.time() + 60
while time.time() < deadline and 'after-fence' not in values:
    m = reader.poll(0.5)
    if m is not None and m.error() is None:
        values.append(m.value().decode())
out['values'] = values
committed = group.committed([TopicPartition(source, 0)], timeout=30)
out['committed'] = committed[0].offset
print(json.dumps(out))
"#;

fn run_tool(dist: &KafkaDist, class: &str, args: &[&str]) -> String {
    let out = dist
        .run_tool(class, args, TOOL_TIMEOUT)
        .unwrap_or_else(|e| panic!("{class} {args:?}: {e}"));
    assert!(
        out.success(),
        "{class} {args:?}:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn krust_transaction_coordinator_drives_kafka_partition_leaders() {
    let Some(python) = PythonClients::locate().expect("python clients") else {
        eprintln!("skipped: confluent-kafka not installed (scripts/clients/install.sh)");
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(3).expect("ports");
    let voters = format!("1@127.0.0.1:{}", ports[0]);
    let controller_text = controller_properties(root.path(), 1, ports[0], &voters, "");
    let mut controller = write_node(root.path(), 1, &controller_text, &cluster_id);
    // Both kinds must agree on partitionFor: one partition of each internal topic.
    let props = "broker.heartbeat.interval.ms=500\noffsets.topic.num.partitions=1\n\
                 offsets.topic.replication.factor=1\ntransaction.state.log.num.partitions=1\n\
                 transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n";
    let dir = root.path().join(format!("node{KRUST_ID}"));
    let text = broker_properties(
        KRUST_ID,
        ports[1],
        &voters,
        &format!(
            "log.dirs={}\nmetadata.log.dir={}\n{props}",
            dir.join("logs").display(),
            dir.join("metadata").display()
        ),
    );
    let mut krust: Node = write_node(root.path(), KRUST_ID, &text, &cluster_id);
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let mut builder = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Broker)
        .cluster_id(cluster_id.clone())
        .quorum_voters(voters.clone())
        .broker_port(ports[2])
        .dir(root.path().join(format!("node{KAFKA_ID}")))
        .start_timeout(KAFKA_START_TIMEOUT);
    for line in props.lines() {
        let (key, value) = line.split_once('=').expect("key=value");
        builder = builder.prop(key, value);
    }
    let mut kafka = builder
        .build()
        .expect("Kafka broker configured and formatted");
    controller.start();
    kafka.spawn().expect("spawn the Kafka broker");
    krust.start();
    kafka
        .wait_ready(KAFKA_START_TIMEOUT)
        .expect("the Kafka broker registers with the krust controller");
    let bootstrap = format!("127.0.0.1:{},127.0.0.1:{}", ports[1], ports[2]);
    for (topic, leader, extra) in [
        ("__transaction_state", KRUST_ID, "cleanup.policy=compact"),
        ("__consumer_offsets", KAFKA_ID, "cleanup.policy=compact"),
        ("txn-data", KAFKA_ID, "min.insync.replicas=1"),
        ("txn-source", KAFKA_ID, "min.insync.replicas=1"),
    ] {
        run_tool(
            &dist,
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--create",
                "--topic",
                topic,
                "--replica-assignment",
                &leader.to_string(),
                "--config",
                extra,
            ],
        );
    }

    let out = python
        .run_script(
            SCRIPT,
            &[&bootstrap, "txn-data", "txn-source"],
            SCRIPT_TIMEOUT,
        )
        .expect("run the transactional client");
    assert!(
        out.success(),
        "client failed:\n{}\n{}\nkrust:\n{}",
        out.stdout,
        out.stderr,
        krust.log_tail(60)
    );
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.trim().lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("client output {:?}: {e}", out.stdout));
    assert_eq!(
        report["values"],
        serde_json::json!([
            "committed-0",
            "committed-1",
            "committed-2",
            "with-offsets",
            "after-fence"
        ]),
        "read_committed sees the committed records only\nkrust:\n{}",
        krust.log_tail(60)
    );
    assert_eq!(report["committed"], 7, "offsets sent in the transaction");
    assert_eq!(
        report["fenced"], "fatal",
        "the fenced producer cannot commit"
    );

    let listed = run_tool(
        &dist,
        TRANSACTIONS_COMMAND,
        &["--bootstrap-server", &bootstrap, "list"],
    );
    assert!(
        listed.lines().any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields == ["tx-a", &KRUST_ID.to_string(), "0", "CompleteCommit"]
        }),
        "kafka-transactions list names tx-a on the krust coordinator:\n{listed}"
    );
    let described = run_tool(
        &dist,
        TRANSACTIONS_COMMAND,
        &[
            "--bootstrap-server",
            &bootstrap,
            "describe",
            "--transactional-id",
            "tx-a",
        ],
    );
    assert!(
        described.contains("CompleteCommit") && described.contains("tx-a"),
        "kafka-transactions describe:\n{described}"
    );

    // A record Kafka would never write (through the admin client id, the only one allowed to
    // write internal topics): the restarted broker refuses to load the partition,
    // says why, and keeps running.
    let corrupt = r#"
import sys
from confluent_kafka import Producer
p = Producer({'bootstrap.servers': sys.argv[1], 'client.id': '__admin_client'})
p.produce('__transaction_state', key=b'\x00\x00\x00\x04tx-z', value=b'\x00\x09garbage')
assert p.flush(30) == 0
"#;
    let out = python
        .run_script(
            corrupt,
            &[&format!("127.0.0.1:{}", ports[1])],
            SCRIPT_TIMEOUT,
        )
        .expect("run the corrupting producer");
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let mark = krust.process().log_mark();
    krust.process().kill().expect("SIGKILL the krust broker");
    krust.process().restart().expect("restart the krust broker");
    krust
        .process()
        .wait_for_line_since(
            mark,
            "cannot load __transaction_state partition",
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("load error reported: {e}\n{}", krust.log_tail(40)));
    krust
        .process()
        .wait_for_line_since(mark, support::STARTED_LINE, support::START_TIMEOUT)
        .unwrap_or_else(|e| panic!("krust broker serves on: {e}\n{}", krust.log_tail(40)));
    assert!(
        krust.log_tail(200).contains("unknown value version 9"),
        "the error names the bad record:\n{}",
        krust.log_tail(40)
    );
}
