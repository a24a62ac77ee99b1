//! Exactly-once consume-transform-produce on an all-krust cluster, with the transaction
//! coordinator SIGKILLed in the middle (issue 13: TxnOffsetCommit, "offsets in transactions",
//! and a coordinator failover with real processes).
//!
//! A cluster of 3 controllers and 3 brokers (`krust server` processes; `__consumer_offsets`
//! and `__transaction_state` with RF=3). A confluent-kafka (librdkafka) copier consumes
//! numbered records from `eos-in` with `isolation.level=read_committed` and a group, and
//! writes one record per input record to `eos-out` inside transactions that also carry the
//! group's offsets (`send_offsets_to_transaction` → AddOffsetsToTxn + TxnOffsetCommit). Every
//! fourth transaction is aborted and the copier rewinds to the group's committed offsets.
//! Halfway through, the test asks Kafka 3.9's `kafka-transactions list` which broker
//! coordinates the copier's transactional id and SIGKILLs it; the copier goes on through the
//! broker that coordinates the transactional id next.
//!
//! The transactional id is chosen (by FindCoordinator, before the copier starts) so that its
//! coordinator is not the group's: librdkafka (2.16) caches the group coordinator for
//! `send_offsets_to_transaction`, and once that broker is fenced (Metadata stops listing it,
//! as Kafka's brokers do for fenced brokers) librdkafka decommissions its handle, which never
//! finishes terminating; the TxnOffsetCommit then waits for it forever, past the call's
//! timeout, and no request reaches any broker. Seen in 4 of 10 runs that killed a broker
//! coordinating both, also when the broker was restarted at once (it is fenced until it
//! caught up). Then a read_committed consumer must see every input record exactly once
//! in `eos-out` (no aborted copy, no duplicate), the group's committed offsets must be the
//! input's end offsets, and `kafka-transactions find-hanging` must report no hanging
//! transaction on the surviving brokers.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{FindCoordinatorRequest, ResponseKind};
use krust_net::{Client, ClientConfig};
use krust_testkit::{KafkaDist, PythonClients, free_ports, random_kafka_uuid};
use support::{Node, broker_properties, voters, write_controllers, write_node};

mod support;

/// The whole client scenario, including the broker fencing after the kill
/// (`broker.session.timeout.ms`, 9 s by default) and the coordinator's move.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);
const TOOL_TIMEOUT: Duration = Duration::from_secs(90);
const TRANSACTIONS_COMMAND: &str = "org.apache.kafka.tools.TransactionsCommand";
const GROUP: &str = "eos-group";

/// The client side. argv: bootstrap, handshake dir.
const SCRIPT: &str = r#"
import os, sys, time
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, hand, TXN_ID = sys.argv[1:4]
IN, OUT, GROUP = "eos-in", "eos-out", "eos-group"
PARTITIONS, N = 3, 600
DEADLINE_S = 200.0
start = time.time()

def fail(message):
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    sys.exit(1)

def log(message):
    print(f"{time.time() - start:6.1f}s {message}", flush=True)

admin = AdminClient({"bootstrap.servers": bootstrap})
for topic in (IN, OUT):
    deadline = time.time() + 60
    while True:
        # librdkafka may drop a bootstrap broker handle once it learned the brokers' ids,
        # failing a request in flight: retry (TOPIC_ALREADY_EXISTS then means done).
        try:
            admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=30)[topic].result(timeout=60)
            break
        except KafkaException as e:
            if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.time() > deadline:
                fail(f"create_topics {topic}: {e!r}")
            time.sleep(0.5)

plain = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
errors = []
for i in range(N):
    plain.produce(IN, value=str(i).encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and errors.append(err))
if plain.flush(60) or errors:
    fail(f"input records not delivered: {errors[:3]}")
log(f"{N} input records written")

consumer = Consumer({
    "bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
    "enable.auto.commit": False, "isolation.level": "read_committed",
    "session.timeout.ms": 60000, "max.poll.interval.ms": 300000,
})
consumer.subscribe([IN])
producer = Producer({
    "bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5,
    "transaction.timeout.ms": 60000,
    # Sparse connections could leave the producer asking one broker that cannot name the
    # coordinator while it moves.
    "enable.sparse.connections": False,
    # Transaction state changes on stderr, shown when the check fails.
    "debug": "eos",
})
producer.init_transactions(60)

def rewind():
    """Back to the group's committed offsets (the start of every partition if none)."""
    assignment = consumer.assignment()
    committed = consumer.committed(assignment, timeout=60)
    for tp in committed:
        consumer.seek(TopicPartition(IN, tp.partition, tp.offset if tp.offset >= 0 else 0))

def end_transaction(commit):
    """Commits or aborts; True if the transaction committed."""
    deadline = time.time() + 90
    while True:
        try:
            if commit:
                producer.commit_transaction(60)
                return True
            producer.abort_transaction(60)
            return False
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                fail(f"fatal transaction error: {e!r}")
            if commit and err.txn_requires_abort():
                log(f"commit needs an abort: {err}")
                commit = False
                continue
            if not err.retriable() or time.time() > deadline:
                fail(f"{'commit' if commit else 'abort'}_transaction: {e!r}")
            log(f"retrying {'commit' if commit else 'abort'}: {err}")
            time.sleep(0.2)

copied = 0
transactions = 0
aborted = 0
paused = False
while copied < N:
    if time.time() - start > DEADLINE_S:
        fail(f"only {copied} of {N} records copied")
    msgs = [m for m in consumer.consume(num_messages=40, timeout=1.0) if not m.error()]
    if not msgs:
        continue
    transactions += 1
    commit = transactions % 4 != 0
    producer.begin_transaction()
    next_offsets = {}
    for m in msgs:
        producer.produce(OUT, value=b"copy-" + m.value(), partition=m.partition())
        next_offsets[m.partition()] = m.offset() + 1
    offsets = [TopicPartition(IN, p, o) for p, o in sorted(next_offsets.items())]
    try:
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
    except KafkaException as e:
        err = e.args[0]
        if err.fatal() or not (err.txn_requires_abort() or err.retriable()):
            fail(f"send_offsets_to_transaction: {e!r}")
        log(f"send_offsets_to_transaction failed, aborting: {err}")
        commit = False
    if end_transaction(commit):
        copied += len(msgs)
    else:
        aborted += 1
        rewind()
    if copied >= N // 2 and not paused:
        paused = True
        log(f"halfway: {copied} copied in {transactions} transactions ({aborted} aborted)")
        open(os.path.join(hand, "half"), "w").close()
        deadline = time.time() + 90
        while not os.path.exists(os.path.join(hand, "killed")):
            if time.time() > deadline:
                fail("no kill within 90 s")
            time.sleep(0.1)
log(f"copied {copied} in {transactions} transactions ({aborted} aborted)")

committed = consumer.committed([TopicPartition(IN, p) for p in range(PARTITIONS)], timeout=60)
expected = {p: len(range(p, N, PARTITIONS)) for p in range(PARTITIONS)}
got = {tp.partition: tp.offset for tp in committed}
if got != expected:
    fail(f"committed offsets {got}, expected the input's end offsets {expected}")
consumer.close()
producer.flush(10)

reader = Consumer({
    "bootstrap.servers": bootstrap, "group.id": "eos-reader", "auto.offset.reset": "earliest",
    "enable.auto.commit": False, "isolation.level": "read_committed",
    "enable.partition.eof": True,
})
reader.assign([TopicPartition(OUT, p, 0) for p in range(PARTITIONS)])
seen = []
at_end = set()
deadline = time.time() + 60
while len(at_end) < PARTITIONS:
    if time.time() > deadline:
        fail(f"read_committed: no end of {sorted(set(range(PARTITIONS)) - at_end)}; read {len(seen)}")
    m = reader.poll(1.0)
    if m is None:
        continue
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            at_end.add(m.partition())
            continue
        fail(f"read_committed: {m.error()}")
    seen.append(m.value().decode())
reader.close()
dups = sorted({v for v in seen if seen.count(v) > 1})
missing = sorted(set(f"copy-{i}" for i in range(N)) - set(seen))
if dups or missing or len(seen) != N:
    fail(f"read_committed saw {len(seen)} records; duplicates {dups[:10]}, missing {missing[:10]}")
log(f"read_committed: each of the {N} input records exactly once in {OUT}")
"#;

fn all_logs(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("--- node {} ---\n{}", n.id, n.log_tail(30)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Panics with what the client script printed and the nodes' logs.
fn script_failed(
    script: std::thread::JoinHandle<krust_testkit::Result<krust_testkit::ToolOutput>>,
    nodes: &[Node],
    what: &str,
) -> ! {
    let out = script.join().expect("script thread");
    let (stdout, stderr) = out
        .as_ref()
        .map(|o| (o.stdout.clone(), tail(&o.stderr, 12000).to_owned()))
        .unwrap_or_else(|e| (String::new(), e.to_string()));
    panic!(
        "{what}\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        all_logs(nodes)
    );
}

fn tail(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The broker FindCoordinator (v3) names for `key` (`key_type` 0: a group, 1: a transactional
/// id), asking until the internal topic exists.
fn find_coordinator(address: &str, key: &str, key_type: i8) -> i32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = Client::new(
            address.to_string(),
            ClientConfig {
                client_id: "txn-eos".to_owned(),
                request_timeout: Duration::from_secs(30),
                ..ClientConfig::default()
            },
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let request = FindCoordinatorRequest::default()
                .with_key(key.to_string().into())
                .with_key_type(key_type);
            if let Ok(ResponseKind::FindCoordinator(r)) = client.send(request, 3).await
                && r.error_code == 0
            {
                return r.node_id.0;
            }
            assert!(
                Instant::now() < deadline,
                "FindCoordinator {key} (type {key_type}) answered within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The coordinator id `kafka-transactions list` gives `transactional_id` (columns:
/// TransactionalId Coordinator ProducerId TransactionState).
fn transaction_coordinator(
    dist: &KafkaDist,
    bootstrap: &str,
    transactional_id: &str,
) -> Option<i32> {
    let out = dist
        .run_tool(
            TRANSACTIONS_COMMAND,
            &["--bootstrap-server", bootstrap, "list"],
            TOOL_TIMEOUT,
        )
        .ok()?;
    out.stdout.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() == 4 && fields[0] == transactional_id)
            .then(|| fields[1].parse().ok())
            .flatten()
    })
}

#[test]
fn consume_transform_produce_is_exactly_once_across_a_transaction_coordinator_kill() {
    let Some(python) = PythonClients::locate().expect("python venv") else {
        return;
    };
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(6).expect("ports");
    let voters = voters(&ports);
    let mut nodes = write_controllers(root.path(), &ports, &cluster_id, "");
    for (id, port) in (4..=6).zip(&ports[3..]) {
        let dir = root.path().join(format!("node{id}"));
        let text = broker_properties(
            id,
            *port,
            &voters,
            &format!(
                "log.dirs={}\n\
                 offsets.topic.replication.factor=3\noffsets.topic.num.partitions=6\n\
                 transaction.state.log.replication.factor=3\n\
                 transaction.state.log.num.partitions=6\n\
                 group.initial.rebalance.delay.ms=0\nreplica.lag.time.max.ms=10000\n",
                dir.join("logs").display(),
            ),
        );
        nodes.push(write_node(root.path(), id, &text, &cluster_id));
    }
    for node in &mut nodes {
        node.start();
    }
    let address = |port: &u16| format!("127.0.0.1:{port}");
    let bootstrap = ports[3..].iter().map(address).collect::<Vec<_>>().join(",");
    // A transactional id coordinated by another broker than the group: see the module doc.
    let first = address(&ports[3]);
    let group_coordinator = find_coordinator(&first, GROUP, 0);
    let transactional_id = (0..)
        .map(|i| format!("eos-copier-{i}"))
        .find(|id| find_coordinator(&first, id, 1) != group_coordinator)
        .expect("a transactional id");
    let hand = root.path().join("handshake");
    std::fs::create_dir_all(&hand).expect("handshake dir");
    let script = {
        let python = python.clone();
        let bootstrap = bootstrap.clone();
        let hand = hand.display().to_string();
        let transactional_id = transactional_id.clone();
        std::thread::spawn(move || {
            python.run_script(
                SCRIPT,
                &[&bootstrap, &hand, &transactional_id],
                SCRIPT_TIMEOUT,
            )
        })
    };
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    while !hand.join("half").exists() {
        if script.is_finished() || Instant::now() > deadline {
            script_failed(script, &nodes, "the copier ended before halfway");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(coordinator) = transaction_coordinator(&dist, &bootstrap, &transactional_id) else {
        script_failed(
            script,
            &nodes,
            "kafka-transactions list does not name the copier's coordinator",
        );
    };
    assert!(
        (4..=6).contains(&coordinator),
        "coordinator {coordinator} is one of the brokers"
    );
    nodes
        .iter_mut()
        .find(|n| n.id == coordinator)
        .expect("coordinator node")
        .process()
        .kill()
        .expect("SIGKILL the transaction coordinator");
    eprintln!(
        "SIGKILLed broker {coordinator}, the transaction coordinator \
         (group coordinator: broker {group_coordinator})"
    );
    std::fs::write(hand.join("killed"), b"").expect("write killed");
    let out = script
        .join()
        .expect("script thread")
        .unwrap_or_else(|e| panic!("client script: {e}\n{}", all_logs(&nodes)));
    assert!(
        out.success(),
        "client script exited with {}\nstdout:\n{}\nstderr (tail):\n{}\n{}",
        out.status,
        out.stdout,
        tail(&out.stderr, 12000),
        all_logs(&nodes)
    );
    eprintln!("{}", out.stdout.trim());
    let now = transaction_coordinator(&dist, &bootstrap, &transactional_id);
    assert!(
        now.is_some_and(|id| (4..=6).contains(&id)),
        "kafka-transactions list names the copier's coordinator after the run: {now:?}"
    );
    for broker in (4..=6).filter(|id| *id != coordinator) {
        let hanging = dist
            .run_tool(
                TRANSACTIONS_COMMAND,
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "find-hanging",
                    "--broker-id",
                    &broker.to_string(),
                ],
                TOOL_TIMEOUT,
            )
            .expect("kafka-transactions find-hanging");
        assert!(
            hanging.success() && hanging.stdout.lines().count() <= 1,
            "kafka-transactions find-hanging --broker-id {broker} reports none: {hanging:?}"
        );
    }
}
