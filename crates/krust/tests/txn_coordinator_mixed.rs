//! The krust transaction coordinator driving Apache Kafka 3.9 partition leaders: one krust
//! controller, one krust broker leading `__transaction_state` (created with an explicit replica
//! assignment before any client) and one Kafka 3.9 broker leading the data partitions and
//! `__consumer_offsets`. A real transactional client (confluent-kafka) commits, aborts, sends
//! offsets in a transaction and is fenced by a second producer with its transactional id; a
//! `read_committed` consumer then sees exactly the committed records (the markers the krust
//! coordinator sent with WriteTxnMarkers reached the Kafka leader, which also verified each
//! first write with the coordinator — AddPartitionsToTxn v4 `verify_only`). Kafka's
//! `kafka-transactions.sh list|describe` read the coordinator's state. `__transaction_state` has
//! a second partition led by the Kafka broker, so the same refusals (stale epochs with old and
//! new versions, unknown topics and ids, wrong states) are asked of both coordinators in one
//! cluster and must get the same codes. Last, a corrupt
//! `__transaction_state` record makes the restarted krust broker refuse to load that partition
//! with a clear error, and it keeps serving.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use kafka_protocol::protocol::StrBytes;

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

/// Transactional ids whose `__transaction_state` partition (of 2) is 0 (krust's) and 1
/// (Kafka's): Java's `abs(hashCode) % 2`.
const ON_KRUST: [&str; 2] = ["k-2", "unknown-1"];
const ON_KAFKA: [&str; 2] = ["k-1", "unknown-0"];

/// The same refusals asked of the krust coordinator and of Kafka's, in one cluster: every
/// answer must be Kafka's, and the one the test expects.
fn side_by_side(krust_addr: &str, kafka_addr: &str) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async {
        let found = find_coordinators(krust_addr, &[ON_KRUST[0], ON_KAFKA[0]]).await;
        assert_eq!(
            found,
            vec![(0, KRUST_ID), (0, KAFKA_ID)],
            "FindCoordinator TRANSACTION"
        );
        let krust = refusals(krust_addr, ON_KRUST).await;
        let kafka = refusals(kafka_addr, ON_KAFKA).await;
        assert_eq!(
            krust, kafka,
            "krust's answers (left) against Kafka's (right)"
        );
        let expected: Vec<(&str, i16)> = vec![
            ("init", 0),
            ("init timeout 0", 50),
            ("init pid without epoch", 42),
            ("add unknown topic", 3),
            ("add existing topic beside it", 55),
            ("add stale epoch v3", 90),
            ("add stale epoch v1", 47),
            ("end stale epoch v3", 90),
            ("end stale epoch v1", 47),
            ("end other producer id", 49),
            ("end unknown id", 49),
            ("end commit on Empty", 48),
            ("add", 0),
            ("end commit", 0),
            ("describe unknown id", 105),
        ];
        let got: Vec<(&str, i16)> = krust.iter().map(|(w, c)| (w.as_str(), *c)).collect();
        assert_eq!(got, expected);
    });
}

fn client(addr: &str) -> krust_net::Client {
    krust_net::Client::new(
        addr,
        krust_net::ClientConfig {
            request_timeout: Duration::from_secs(30),
            ..krust_net::ClientConfig::default()
        },
    )
}

async fn find_coordinators(addr: &str, ids: &[&str]) -> Vec<(i16, i32)> {
    use kafka_protocol::messages::{FindCoordinatorRequest, ResponseKind};
    let request = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(
            ids.iter()
                .map(|i| StrBytes::from_string((*i).into()))
                .collect(),
        );
    match client(addr)
        .send(request, 4)
        .await
        .expect("FindCoordinator")
    {
        ResponseKind::FindCoordinator(r) => r
            .coordinators
            .iter()
            .map(|c| (c.error_code, c.node_id.0))
            .collect(),
        other => panic!("not FindCoordinator: {other:?}"),
    }
}

/// Error codes of a fixed sequence of requests for `[txn, unknown]` sent to `addr`.
async fn refusals(addr: &str, [txn, unknown]: [&str; 2]) -> Vec<(String, i16)> {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
        InitProducerIdRequest, ProducerId, ResponseKind, TopicName, TransactionalId,
    };
    let c = client(addr);
    let id = |s: &str| TransactionalId(StrBytes::from_string(s.into()));
    let mut out = Vec::new();
    let init = |timeout: i32, pid: i64| {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(id(txn)))
            .with_transaction_timeout_ms(timeout)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(-1)
    };
    // COORDINATOR_LOAD_IN_PROGRESS is retriable (the partition loading, or the broker's first
    // producer-id block on its way from the controller): clients retry it, and so does this.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (pid, epoch) = loop {
        match c.send(init(60_000, -1), 4).await.expect("init") {
            ResponseKind::InitProducerId(r) if r.error_code == 14 => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{addr}: still loading"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            ResponseKind::InitProducerId(r) => {
                out.push(("init".to_owned(), r.error_code));
                break (r.producer_id.0, r.producer_epoch);
            }
            other => panic!("{other:?}"),
        }
    };
    for (what, request) in [
        ("init timeout 0", init(0, -1)),
        ("init pid without epoch", init(60_000, pid)),
    ] {
        match c.send(request, 4).await.expect("init") {
            ResponseKind::InitProducerId(r) => out.push((what.to_owned(), r.error_code)),
            other => panic!("{other:?}"),
        }
    }
    let add = |topics: &[(&str, i32)], epoch: i16| {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(id(txn))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(
                topics
                    .iter()
                    .map(|(t, p)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string((*t).into())))
                            .with_partitions(vec![*p])
                    })
                    .collect(),
            )
    };
    let add_codes = |response: ResponseKind| match response {
        ResponseKind::AddPartitionsToTxn(r) => r
            .results_by_topic_v3_and_below
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.results_by_partition[0].partition_error_code,
                )
            })
            .collect::<std::collections::BTreeMap<_, _>>(),
        other => panic!("{other:?}"),
    };
    let codes = add_codes(
        c.send(add(&[("nope", 0), ("txn-data", 0)], epoch), 3)
            .await
            .expect("add"),
    );
    out.push(("add unknown topic".to_owned(), codes["nope"]));
    out.push(("add existing topic beside it".to_owned(), codes["txn-data"]));
    for (what, version) in [("add stale epoch v3", 3), ("add stale epoch v1", 1)] {
        let codes = add_codes(
            c.send(add(&[("txn-data", 0)], epoch + 1), version)
                .await
                .expect("add"),
        );
        out.push((what.to_owned(), codes["txn-data"]));
    }
    let end = |txn: &str, pid: i64, epoch: i16| {
        EndTxnRequest::default()
            .with_transactional_id(id(txn))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(true)
    };
    for (what, request, version) in [
        ("end stale epoch v3", end(txn, pid, epoch + 1), 3),
        ("end stale epoch v1", end(txn, pid, epoch + 1), 1),
        ("end other producer id", end(txn, pid + 1000, epoch), 3),
        ("end unknown id", end(unknown, pid, epoch), 3),
        ("end commit on Empty", end(txn, pid, epoch), 3),
    ] {
        match c.send(request, version).await.expect("end") {
            ResponseKind::EndTxn(r) => out.push((what.to_owned(), r.error_code)),
            other => panic!("{other:?}"),
        }
    }
    let codes = add_codes(
        c.send(add(&[("txn-data", 0)], epoch), 3)
            .await
            .expect("add"),
    );
    out.push(("add".to_owned(), codes["txn-data"]));
    match c.send(end(txn, pid, epoch), 3).await.expect("end") {
        ResponseKind::EndTxn(r) => out.push(("end commit".to_owned(), r.error_code)),
        other => panic!("{other:?}"),
    }
    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![id(unknown)]);
    match c.send(describe, 0).await.expect("describe") {
        ResponseKind::DescribeTransactions(r) => out.push((
            "describe unknown id".to_owned(),
            r.transaction_states[0].error_code,
        )),
        other => panic!("{other:?}"),
    }
    out
}

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
                 offsets.topic.replication.factor=1\n\
                 transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
                 transaction.state.log.num.partitions=2\n";
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
        // Partition 0 on krust, 1 on Kafka: ids hashing to 1 are Kafka's, side by side.
        ("__transaction_state", "2,3", "cleanup.policy=compact"),
        ("__consumer_offsets", "3", "cleanup.policy=compact"),
        ("txn-data", "3", "min.insync.replicas=1"),
        ("txn-source", "3", "min.insync.replicas=1"),
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
                leader,
                "--config",
                extra,
            ],
        );
    }

    side_by_side(
        &format!("127.0.0.1:{}", ports[1]),
        &format!("127.0.0.1:{}", ports[2]),
    );

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
            fields.len() == 4
                && fields[0] == "tx-a"
                && fields[1] == KRUST_ID.to_string()
                && fields[3] == "CompleteCommit"
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
p.produce('__transaction_state', partition=0, key=b'\x00\x00\x00\x04tx-z',
          value=b'\x00\x09garbage')
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
