//! Group coordinator failover with real processes (issue 6 acceptance, "Coordinator failover"):
//! a krust cluster of 3 controllers and 3 brokers (`krust server` processes,
//! `offsets.topic.replication.factor=3`, `offsets.topic.num.partitions=6`), a topic with 6
//! partitions and RF=3 holding numbered records, and a confluent-kafka (librdkafka) group of two
//! consumers with `enable.auto.commit=false` that commit what they processed after every poll.
//!
//! Once the first 100 records of every partition are processed and committed (more are written
//! only after the kill), the test asks the AdminClient for the
//! group's coordinator (`describe_consumer_groups` → FindCoordinator) and SIGKILLs that broker.
//! Then: `committed()` returns exactly the offsets committed before the kill (the new coordinator loaded them from its replica of
//! `__consumer_offsets`), the consumers continue (one of them leaves, so the other takes its
//! partitions over from their committed offsets through the new coordinator), the first record
//! each partition processes after the kill is at its committed offset, no record is processed
//! twice and every record is processed; Kafka 3.9's `kafka-consumer-groups --describe --state`
//! names another broker as the coordinator and `--describe` shows the final committed offsets.
//! (The new coordinator is not asked through librdkafka's AdminClient: its
//! `describe_consumer_groups` aborts the process on an assertion,
//! `rd_kafka_enq_once_del_source_return`, when retried while the old coordinator is down.)
//!
//! The Python side and this test meet through files in a temp dir (the script writes
//! `coordinator`, waits for `killed`). Real processes only, 127.0.0.1, every wait bounded,
//! everything killed on drop.

use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, PythonClients, free_ports, random_kafka_uuid};
use support::{Node, broker_properties, voters, write_controllers, write_node};

mod support;

/// The whole client scenario, including the broker fencing after the kill
/// (`broker.session.timeout.ms`, 9 s by default) and the leader elections.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(150);
/// `kafka-consumer-groups.sh`.
const CONSUMER_GROUP_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
const TOPIC: &str = "failover";
const GROUP: &str = "failover-group";
const PARTITIONS: usize = 6;
/// Records per partition before the kill, and again after it.
const PER_PHASE: usize = 100;

/// The client side. argv: bootstrap, topic, group, handshake dir.
const SCRIPT: &str = r#"
import json, os, sys, time
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic, group, hand = sys.argv[1:5]
PARTITIONS, PER_PHASE = 6, 100
DEADLINE_S = 90.0

def fail(message):
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    sys.exit(1)

def log(message):
    print(message, flush=True)

admin = AdminClient({"bootstrap.servers": bootstrap})
deadline = time.time() + DEADLINE_S
while True:
    # librdkafka may drop a bootstrap broker handle once it learned the brokers' ids, failing a
    # request in flight with _DESTROY_BROKER: retry (TOPIC_ALREADY_EXISTS then means done).
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=30)[topic].result(timeout=60)
        break
    except KafkaException as e:
        if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            break
        if time.time() > deadline:
            fail(f"create_topics: {e!r}")
        time.sleep(0.5)

def produce(first, count):
    """Records `first`..`first + count` of every partition; record n of partition p, at offset n,
    holds `p<p>-<n>`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    def report(err, msg):
        if err is not None:
            errors.append(err)
    for p in range(PARTITIONS):
        for n in range(first, first + count):
            producer.produce(topic, value=f"p{p}-{n}".encode(), partition=p, on_delivery=report)
    left = producer.flush(DEADLINE_S)
    if left or errors:
        fail(f"records {first}+{count}: {left} unflushed, delivery errors {errors[:3]}")

def consumer():
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "partition.assignment.strategy": "range",
        "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
    })
    c.subscribe([topic])
    return c

processed = {}  # (partition, offset) -> phase processed in ("before"/"after" the kill)
first_after = {}  # partition -> first offset processed after the kill

def commit(c, offsets):
    deadline = time.time() + DEADLINE_S
    while True:
        try:
            c.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as e:
            # A commit racing the failover may see NOT_COORDINATOR / coordinator loading; the
            # client retries such errors by itself only for async commits, so retry here.
            if time.time() > deadline or not e.args[0].retriable():
                fail(f"commit {offsets}: {e!r}")
            time.sleep(0.2)

def poll_process(consumers, when, seconds):
    end = time.time() + seconds
    while time.time() < end:
        for c in consumers:
            msgs = c.consume(num_messages=50, timeout=0.05)
            last = {}
            for m in msgs:
                if m.error():
                    continue
                key = (m.partition(), m.offset())
                if m.value() != f"p{m.partition()}-{m.offset()}".encode():
                    fail(f"partition {m.partition()} offset {m.offset()} holds {m.value()!r}")
                if key in processed:
                    fail(f"record {key} processed twice ({processed[key]}, then {when})")
                processed[key] = when
                if when == "after":
                    first_after.setdefault(m.partition(), m.offset())
                last[m.partition()] = m.offset()
            if last:
                commit(c, [TopicPartition(topic, p, o + 1) for p, o in last.items()])

def committed(c):
    tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
    return {tp.partition: tp.offset for tp in tps}

produce(0, PER_PHASE)
a, b = consumer(), consumer()
deadline = time.time() + DEADLINE_S
while True:
    poll_process([a, b], "before", 0.5)
    assignments = [sorted(tp.partition for tp in c.assignment()) for c in (a, b)]
    if len(processed) >= PARTITIONS * PER_PHASE and all(assignments):
        break
    if time.time() > deadline:
        fail(f"processed {len(processed)} records before the kill, assignments {assignments}")
log(f"before the kill: assignments {assignments}, processed {len(processed)}")

before = committed(a)
expected = {p: max([o for (q, o) in processed if q == p], default=-1) + 1 for p in range(PARTITIONS)}
expected = {p: (o if o > 0 else -1001) for p, o in expected.items()}  # -1001: OFFSET_INVALID
if before != expected:
    fail(f"committed before the kill {before} != processed {expected}")

desc = admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE_S)
old = desc.coordinator.id
log(f"coordinator before the kill: broker {old}")
with open(os.path.join(hand, "coordinator.tmp"), "w") as f:
    f.write(str(old))
os.rename(os.path.join(hand, "coordinator.tmp"), os.path.join(hand, "coordinator"))
deadline = time.time() + DEADLINE_S
while not os.path.exists(os.path.join(hand, "killed")):
    if time.time() > deadline:
        fail("the test never killed the coordinator")
    time.sleep(0.1)
killed_at = time.time()

# The consumers find the new coordinator by themselves (FindCoordinator, retried until the
# controller fenced the dead broker and moved the __consumer_offsets leadership).
after = committed(a)
log(f"committed() answered {time.time() - killed_at:.1f} s after the kill")
if after != before:
    fail(f"committed after the kill {after} != before {before}")
log(f"committed offsets intact: {after}")

# Both consumers continue with the first half of the new records.
half = PER_PHASE // 2
produce(PER_PHASE, half)
deadline = time.time() + DEADLINE_S
while len(processed) < PARTITIONS * (PER_PHASE + half):
    poll_process([a, b], "after", 0.5)
    if time.time() > deadline:
        fail(f"processed {len(processed)} of {PARTITIONS * (PER_PHASE + half)} after the kill")
# b leaves (it committed what it processed): the new coordinator rebalances, and a takes b's
# partitions over from the offsets b committed through the new coordinator.
b.close()
while len(a.assignment()) != PARTITIONS:
    poll_process([a], "after", 0.5)
    if time.time() > deadline:
        fail(f"a never got every partition after b left: {a.assignment()}")
log(f"b left; a's assignment {sorted(tp.partition for tp in a.assignment())}")
produce(PER_PHASE + half, PER_PHASE - half)
total = 2 * PARTITIONS * PER_PHASE
while len(processed) < total:
    poll_process([a], "after", 0.5)
    if time.time() > deadline:
        fail(f"processed {len(processed)} of {total} after the kill")

for p in range(PARTITIONS):
    start = before[p] if before[p] >= 0 else 0
    if first_after.get(p) != start:
        fail(f"partition {p}: first record processed after the kill is at {first_after.get(p)}, committed was {before[p]}")
final = committed(a)
if final != {p: 2 * PER_PHASE for p in range(PARTITIONS)}:
    fail(f"final committed offsets {final}")
a.close()
print("RESULT " + json.dumps({"before": before, "final": final, "old": old}))
"#;

/// The CURRENT-OFFSET column of `--describe` rows for `topic`, by partition.
fn described_offsets(describe: &str, topic: &str) -> Vec<(usize, String)> {
    let mut rows: Vec<(usize, String)> = describe
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
            if cells.len() >= 4 && cells[1] == topic {
                Some((cells[2].parse().ok()?, cells[3].to_owned()))
            } else {
                None
            }
        })
        .collect();
    rows.sort();
    rows
}

fn all_logs(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("--- node {} ---\n{}", n.id, n.log_tail(25)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn killing_the_group_coordinator_moves_the_group_and_keeps_committed_offsets() {
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
             group.initial.rebalance.delay.ms=0\nreplica.lag.time.max.ms=10000\n",
                dir.join("logs").display(),
            ),
        );
        nodes.push(write_node(root.path(), id, &text, &cluster_id));
    }
    // Controllers first; "Kafka Server started" on a broker means registered and unfenced.
    for node in &mut nodes {
        node.start();
    }
    let bootstrap = ports[3..]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let hand = root.path().join("handshake");
    std::fs::create_dir_all(&hand).expect("handshake dir");

    let script = {
        let python = python.clone();
        let bootstrap = bootstrap.clone();
        let hand = hand.display().to_string();
        std::thread::spawn(move || {
            python.run_script(SCRIPT, &[&bootstrap, TOPIC, GROUP, &hand], SCRIPT_TIMEOUT)
        })
    };

    // Wait for the coordinator's id, then SIGKILL that broker.
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let coordinator: i32 = loop {
        if let Ok(text) = std::fs::read_to_string(hand.join("coordinator")) {
            break text.trim().parse().expect("coordinator id");
        }
        if script.is_finished() || Instant::now() > deadline {
            let out = script.join().expect("script thread");
            let (stdout, stderr) = out
                .as_ref()
                .map(|o| (o.stdout.clone(), tail(&o.stderr, 4000).to_owned()))
                .unwrap_or_else(|e| (String::new(), e.to_string()));
            panic!(
                "the script ended before naming the coordinator\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
                all_logs(&nodes)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        (4..=6).contains(&coordinator),
        "coordinator {coordinator} is one of the brokers"
    );
    let victim = nodes
        .iter_mut()
        .find(|n| n.id == coordinator)
        .expect("coordinator node");
    victim
        .process
        .as_mut()
        .expect("started")
        .kill()
        .expect("SIGKILL the coordinator");
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
        tail(&out.stderr, 4000),
        all_logs(&nodes)
    );
    eprintln!("{}", out.stdout.trim());

    // Kafka's own tool, through the surviving brokers, shows the final committed offsets.
    let survivors = ports[3..]
        .iter()
        .zip(4..=6)
        .filter(|(_, id)| *id != coordinator)
        .map(|(p, _)| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let describe = dist
        .tool(CONSUMER_GROUP_COMMAND)
        .args([
            "--bootstrap-server",
            &survivors,
            "--describe",
            "--group",
            GROUP,
        ])
        .run()
        .expect("kafka-consumer-groups --describe");
    assert!(
        describe.success(),
        "kafka-consumer-groups --describe: {describe:?}"
    );
    // The group moved: Kafka's tool (its AdminClient's FindCoordinator) names another broker.
    let state = dist
        .tool(CONSUMER_GROUP_COMMAND)
        .args([
            "--bootstrap-server",
            &survivors,
            "--describe",
            "--group",
            GROUP,
            "--state",
        ])
        .run()
        .expect("kafka-consumer-groups --describe --state");
    // GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS, the id in parentheses.
    let new_coordinator: Option<i32> = state
        .stdout
        .lines()
        .find(|l| l.starts_with(GROUP))
        .and_then(|l| l.split_once('(')?.1.split_once(')')?.0.trim().parse().ok());
    assert!(
        state.success()
            && new_coordinator.is_some_and(|id| id != coordinator && (4..=6).contains(&id)),
        "the group is coordinated by another broker than {coordinator}: {state:?}"
    );
    eprintln!("coordinator after the kill: broker {new_coordinator:?}");
    let per_partition = (2 * PER_PHASE).to_string();
    assert_eq!(
        described_offsets(&describe.stdout, TOPIC),
        (0..PARTITIONS)
            .map(|p| (p, per_partition.clone()))
            .collect::<Vec<_>>(),
        "kafka-consumer-groups --describe:\n{}",
        describe.stdout
    );
}

fn tail(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
