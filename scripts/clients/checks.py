"""Real-client checks run by crates/krust/tests/clients_python.rs (issue 5/6 acceptance).

Usage: python checks.py <check> <bootstrap> [topic-prefix] [replication-factor]

Each check drives a stock Python client (confluent-kafka = librdkafka, kafka-python = pure Python)
against one broker and exits non-zero with the reason on stderr when the broker answers wrongly.
Every wait is bounded. Checks need no consumer group unless their name starts with `group_`.
"""

import sys
import time

DEADLINE_S = 60.0
# Replication factor of the topics the checks create (argv[4]; 3 on a 3-node cluster).
RF = 1


def fail(message):
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def retry(call, what):
    """`call()` until it stops raising "unknown topic" (on a cluster, a broker may learn of a
    topic a moment after the controller created it: metadata reaches brokers asynchronously in
    Kafka too) or DEADLINE_S passes."""
    deadline = time.time() + DEADLINE_S
    while True:
        try:
            return call()
        except Exception as e:  # noqa: BLE001
            if "UNKNOWN_TOPIC" not in repr(e) or time.time() > deadline:
                fail(f"{what}: {e!r}")
            time.sleep(0.2)


def create_topics_once(admin, new_topics, what):
    """CreateTopics, retried (at most 3 times) only on librdkafka's client-local _DESTROY_BROKER
    / _TRANSPORT errors: librdkafka >= 2.10 drops its bootstrap-broker handles once it has
    learned the brokers from Metadata, failing a request in flight on one of them (seen once on
    a fresh 3-node cluster: the request never reached the controller). A retry that finds the
    topic already there counts as created."""
    for attempt in range(3):
        futures = admin.create_topics(new_topics, operation_timeout=30)
        transient = False
        for key, future in futures.items():
            try:
                future.result(timeout=DEADLINE_S)
            except Exception as e:  # noqa: BLE001
                text = repr(e)
                if attempt > 0 and "TOPIC_ALREADY_EXISTS" in text:
                    continue
                if ("_DESTROY_BROKER" in text or "_TRANSPORT" in text) and attempt < 2:
                    print(f"{what} {key}: {text}, retrying", file=sys.stderr)
                    transient = True
                    continue
                fail(f"{what} {key}: {e!r}")
        if not transient:
            return
        time.sleep(1)


def wait_futures(futures, what):
    for key, future in futures.items():
        try:
            future.result(timeout=DEADLINE_S)
        except Exception as e:  # noqa: BLE001 - any client error is the check's failure
            fail(f"{what} {key}: {e!r}")


def confluent_admin(bootstrap, prefix):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"{prefix}-admin"
    create_topics_once(
        admin,
        [NewTopic(topic, num_partitions=3, replication_factor=RF,
                  config={"retention.ms": "3600000"})],
        "create_topics",
    )
    # Creating it again: TOPIC_ALREADY_EXISTS (36), Kafka's error, not a crash.
    try:
        admin.create_topics([NewTopic(topic, 1, RF)])[topic].result(timeout=DEADLINE_S)
        fail("a second create_topics of the same name succeeded")
    except Exception as e:  # noqa: BLE001
        if "TOPIC_ALREADY_EXISTS" not in repr(e) and "already exists" not in repr(e):
            fail(f"second create_topics: expected TOPIC_ALREADY_EXISTS, got {e!r}")

    deadline = time.time() + DEADLINE_S
    while True:
        metadata = admin.list_topics(timeout=DEADLINE_S)
        t = metadata.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == 3 and all(
            p.leader >= 0 for p in t.partitions.values()
        ):
            break
        if time.time() > deadline:
            fail(f"topic {topic} never showed 3 led partitions: {t!r}")
        time.sleep(0.2)

    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = retry(lambda: admin.describe_configs([resource])[resource].result(timeout=DEADLINE_S),
                    "describe_configs")
    entry = configs.get("retention.ms")
    if entry is None or entry.value != "3600000":
        fail(f"describe_configs retention.ms: {entry!r}")
    if configs["cleanup.policy"].value != "delete":
        fail(f"describe_configs cleanup.policy default: {configs['cleanup.policy']!r}")

    alter = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000",
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "200000",
                        incremental_operation=AlterConfigOpType.SET),
        ],
    )
    retry(lambda: admin.incremental_alter_configs([alter])[alter].result(timeout=DEADLINE_S),
          "incremental_alter_configs")
    deadline = time.time() + DEADLINE_S
    while True:
        configs = retry(
            lambda: admin.describe_configs([resource])[resource].result(timeout=DEADLINE_S),
            "describe_configs")
        if configs["retention.ms"].value == "7200000" and configs["max.message.bytes"].value == "200000":
            break
        if time.time() > deadline:
            fail(f"altered configs not visible: {configs['retention.ms']!r} {configs['max.message.bytes']!r}")
        time.sleep(0.2)

    wait_futures(admin.create_partitions([NewPartitions(topic, 5)]), "create_partitions")
    deadline = time.time() + DEADLINE_S
    while len(admin.list_topics(topic, timeout=DEADLINE_S).topics[topic].partitions) != 5:
        if time.time() > deadline:
            fail("create_partitions to 5 not visible in metadata")
        time.sleep(0.2)

    wait_futures(admin.delete_topics([topic], operation_timeout=30), "delete_topics")
    deadline = time.time() + DEADLINE_S
    while topic in admin.list_topics(timeout=DEADLINE_S).topics:
        if time.time() > deadline:
            fail(f"deleted topic {topic} still listed")
        time.sleep(0.2)
    print("confluent admin: create/describe/alter/create_partitions/delete ok")


def consume_assigned(bootstrap, topic, partition, offset, count, extra=None):
    """Reads `count` records from topic/partition starting at `offset` with assign() (no group)."""
    from confluent_kafka import Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # confluent-kafka insists on a group.id, but an assign()-only consumer that never
        # commits never joins the group: no JoinGroup/OffsetCommit reaches the broker.
        "group.id": f"assign-only-{topic}",
    }
    conf.update(extra or {})
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, partition, offset)])
    records = []
    deadline = time.time() + DEADLINE_S
    while len(records) < count:
        if time.time() > deadline:
            fail(f"consumed {len(records)} of {count} from {topic}[{partition}]@{offset}")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            fail(f"consumer error on {topic}: {msg.error()}")
        records.append(msg)
    consumer.close()
    return records


def produce(bootstrap, topic, values, conf, partition=None):
    from confluent_kafka import Producer

    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for i, value in enumerate(values):
        kwargs = {"key": f"k{i}".encode(), "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    remaining = producer.flush(DEADLINE_S)
    if remaining:
        fail(f"{remaining} records to {topic} not delivered within {DEADLINE_S}s")
    if errors:
        fail(f"delivery errors to {topic}: {errors[:5]}")


def create_topic(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topics_once(admin, [NewTopic(topic, partitions, RF)], "create_topics")
    deadline = time.time() + DEADLINE_S
    while True:
        t = admin.list_topics(topic, timeout=DEADLINE_S).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        if time.time() > deadline:
            fail(f"topic {topic} not ready")
        time.sleep(0.2)


def confluent_codecs(bootstrap, prefix):
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        topic = f"{prefix}-codec-{codec}"
        create_topic(bootstrap, topic, 1)
        # Compressible values, several batches (linger 5 ms, 16 KiB batches).
        values = [(f"value-{i:05d}-" + "x" * 200).encode() for i in range(500)]
        produce(bootstrap, topic, values,
                {"compression.type": codec, "linger.ms": 5, "batch.size": 16384}, partition=0)
        records = consume_assigned(bootstrap, topic, 0, 0, len(values))
        got = [m.value() for m in records]
        if got != values:
            fail(f"codec {codec}: consumed values differ (first {got[:1]!r})")
        offsets = [m.offset() for m in records]
        if offsets != list(range(len(values))):
            fail(f"codec {codec}: offsets not 0..{len(values)}: {offsets[:10]}")
        print(f"confluent producer compression.type={codec}: {len(values)} records ok")


def confluent_idempotent(bootstrap, prefix):
    topic = f"{prefix}-idempotent"
    create_topic(bootstrap, topic, 3)
    values = [f"{i}".encode() for i in range(3000)]
    from confluent_kafka import Producer

    errors = []
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "max.in.flight.requests.per.connection": 5,
    })
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % 3,
                                 on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(DEADLINE_S):
        fail("idempotent producer: records not delivered")
    if errors:
        fail(f"idempotent producer delivery errors: {errors[:5]}")
    for p in range(3):
        expected = [v for i, v in enumerate(values) if i % 3 == p]
        got = [m.value() for m in consume_assigned(bootstrap, topic, p, 0, len(expected))]
        if got != expected:
            fail(f"idempotent partition {p}: not exactly once in order")
    print("confluent idempotent producer: 3000 records exactly once, in order")


def confluent_assign_seek(bootstrap, prefix):
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    topic = f"{prefix}-seek"
    create_topic(bootstrap, topic, 2)
    values = [f"v{i}".encode() for i in range(20)]
    produce(bootstrap, topic, values, {}, partition=1)
    # Start at offset 5.
    got = [m.offset() for m in consume_assigned(bootstrap, topic, 1, 5, 15)]
    if got != list(range(5, 20)):
        fail(f"assign at offset 5: offsets {got}")
    # Seek backwards, then to the end.
    consumer = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                         "group.id": f"assign-only-{topic}"})
    consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
    first = None
    deadline = time.time() + DEADLINE_S
    while first is None:
        if time.time() > deadline:
            fail("no record from OFFSET_BEGINNING")
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            first = msg
    if first.offset() != 0:
        fail(f"OFFSET_BEGINNING gave offset {first.offset()}")
    consumer.seek(TopicPartition(topic, 1, 12))
    deadline = time.time() + DEADLINE_S
    while True:
        if time.time() > deadline:
            fail("no record after seek to 12")
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            if msg.offset() != 12:
                fail(f"seek to 12 delivered offset {msg.offset()}")
            break
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=DEADLINE_S)
    if (low, high) != (0, 20):
        fail(f"watermarks of {topic}[1]: {(low, high)} != (0, 20)")
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
    if (low, high) != (0, 0):
        fail(f"watermarks of empty {topic}[0]: {(low, high)}")
    # offsets_for_times: timestamp 0 -> the first offset.
    found = consumer.offsets_for_times([TopicPartition(topic, 1, 0)], timeout=DEADLINE_S)
    if found[0].offset != 0:
        fail(f"offsets_for_times(0): {found[0]}")
    consumer.seek(TopicPartition(topic, 1, OFFSET_END))
    consumer.close()
    print("confluent consumer assign/seek/watermarks/offsets_for_times ok")


def kafka_python(bootstrap, prefix):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"{prefix}-kafka-python"
    create_topic(bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             request_timeout_ms=30000)
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
               for i in range(200)]
    producer.flush(timeout=DEADLINE_S)
    for f in futures:
        meta = f.get(timeout=DEADLINE_S)
        if meta.topic != topic:
            fail(f"kafka-python send: {meta}")
    producer.close(timeout=DEADLINE_S)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=int(DEADLINE_S * 1000))
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    got = {0: [], 1: []}
    deadline = time.time() + DEADLINE_S
    while len(got[0]) + len(got[1]) < 200:
        if time.time() > deadline:
            fail(f"kafka-python consumed {len(got[0]) + len(got[1])} of 200")
        for tp, records in consumer.poll(timeout_ms=500).items():
            got[tp.partition].extend(r.value.decode() for r in records)
    for p in (0, 1):
        expected = [f"v{i}" for i in range(200) if i % 2 == p]
        if got[p] != expected:
            fail(f"kafka-python partition {p}: {got[p][:5]}...")
    ends = consumer.end_offsets(partitions)
    if ends != {partitions[0]: 100, partitions[1]: 100}:
        fail(f"kafka-python end_offsets: {ends}")
    consumer.seek(partitions[1], 90)
    records = consumer.poll(timeout_ms=int(DEADLINE_S * 1000), max_records=1)
    first = next(iter(records.values()), [None])[0]
    if first is None or first.offset != 90:
        fail(f"kafka-python seek to 90 gave {first}")
    consumer.close()
    print("kafka-python producer/consumer (assign, seek, end_offsets) ok")


def _poll_all(consumers, seconds):
    """Serves every consumer's callbacks for `seconds` (librdkafka joins in its own threads)."""
    records = []
    end = time.time() + seconds
    while time.time() < end:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and not msg.error():
                records.append(msg)
    return records


def _wait_split(consumers, partitions, what):
    """Waits until the consumers' assignments are disjoint, non-empty and cover `partitions`."""
    deadline = time.time() + DEADLINE_S
    while True:
        _poll_all(consumers, 0.5)
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for a in assignments for p in a)
        if flat == list(range(partitions)) and all(assignments):
            print(f"{what}: {assignments}")
            return assignments
        if time.time() > deadline:
            fail(f"{what}: assignments never split {partitions} partitions: {assignments}")


def _group_consumer(bootstrap, group, topic, strategy, extra=None):
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra or {})
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    return consumer


def _group_rebalance(bootstrap, prefix, strategy):
    topic = f"{prefix}-{strategy}"
    group = f"{prefix}-{strategy}-group"
    create_topic(bootstrap, topic, 6)
    a = _group_consumer(bootstrap, group, topic, strategy)
    b = _group_consumer(bootstrap, group, topic, strategy)
    _wait_split([a, b], 6, f"{strategy}: two members")
    c = _group_consumer(bootstrap, group, topic, strategy)
    three = _wait_split([a, b, c], 6, f"{strategy}: a third joins")
    if sorted(len(x) for x in three) != [2, 2, 2]:
        fail(f"{strategy}: three members should get 2 partitions each: {three}")
    c.close()
    _wait_split([a, b], 6, f"{strategy}: the third leaves")
    a.close()
    b.close()


def group_eager(bootstrap, prefix):
    _group_rebalance(bootstrap, prefix, "range")


def group_cooperative(bootstrap, prefix):
    _group_rebalance(bootstrap, prefix, "cooperative-sticky")


def group_commit_restart(bootstrap, prefix):
    from confluent_kafka import TopicPartition

    topic = f"{prefix}-commits"
    group = f"{prefix}-commits-group"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(20)], {}, partition=0)
    first = _group_consumer(bootstrap, group, topic, "range")
    got = []
    deadline = time.time() + DEADLINE_S
    while len(got) < 10:
        if time.time() > deadline:
            fail(f"first consumer got {len(got)} of 10 records")
        msg = first.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    last = got[9]
    first.commit(offsets=[TopicPartition(topic, 0, last.offset() + 1)], asynchronous=False)
    first.close()
    second = _group_consumer(bootstrap, group, topic, "range")
    deadline = time.time() + DEADLINE_S
    while True:
        if time.time() > deadline:
            fail("restarted consumer got no record")
        msg = second.poll(0.5)
        if msg is not None and not msg.error():
            if msg.offset() != 10:
                fail(f"restarted consumer resumed at {msg.offset()}, committed was 10")
            break
    committed = second.committed([TopicPartition(topic, 0)], timeout=DEADLINE_S)
    if committed[0].offset != 10:
        fail(f"committed offset {committed[0].offset} != 10")
    second.close()
    print("group commit survives a consumer restart: resumed at offset 10")


def group_kafka_python(bootstrap, prefix):
    from kafka import KafkaConsumer, TopicPartition

    topic = f"{prefix}-kp-group"
    group = f"{prefix}-kp-group"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(20)], {})
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=int(DEADLINE_S * 1000))
    got = 0
    deadline = time.time() + DEADLINE_S
    while got < 20:
        if time.time() > deadline:
            fail(f"kafka-python group consumer got {got} of 20")
        for records in consumer.poll(timeout_ms=500).values():
            got += len(records)
    consumer.commit()
    committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in (0, 1))
    if committed != 20:
        fail(f"kafka-python committed offsets sum to {committed}, not 20")
    consumer.close()
    print("kafka-python group consumer: consumed and committed 20")


def group_split_keep(bootstrap, prefix):
    """Two members of one group on a 4-partition topic; prints the group name for the caller's
    kafka-consumer-groups checks and leaves committed offsets (2 per partition) behind."""
    from confluent_kafka import TopicPartition

    topic = f"{prefix}-tools"
    group = f"{prefix}-tools-group"
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(4 * 5)], {})
    a = _group_consumer(bootstrap, group, topic, "range")
    b = _group_consumer(bootstrap, group, topic, "range")
    _wait_split([a, b], 4, "tools group")
    for c in (a, b):
        c.commit(offsets=[TopicPartition(topic, tp.partition, 2) for tp in c.assignment()],
                 asynchronous=False)
    a.close()
    b.close()
    print(f"group {group} topic {topic}")


CHECKS = {
    "confluent_admin": confluent_admin,
    "confluent_codecs": confluent_codecs,
    "confluent_idempotent": confluent_idempotent,
    "confluent_assign_seek": confluent_assign_seek,
    "kafka_python": kafka_python,
    "group_eager": group_eager,
    "group_cooperative": group_cooperative,
    "group_commit_restart": group_commit_restart,
    "group_kafka_python": group_kafka_python,
    "group_split_keep": group_split_keep,
}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in CHECKS:
        fail(f"usage: checks.py <{'|'.join(CHECKS)}> <bootstrap> [topic-prefix]")
    if len(sys.argv) > 4:
        RF = int(sys.argv[4])
    CHECKS[sys.argv[1]](sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "py")
