"""kafka-python's transactional producer (issue 13 acceptance), against krust and Kafka alike.

Usage: kafka_python_txn.py <bootstrap> <input topic> <output topic>

Both topics are created first (3 partitions, replication factor 1: a single broker).

1. A transactional producer writes four transactions to partitions 0 and 1 of <output topic> —
   commit (3 records per partition), abort (2), commit (2), abort (1).
2. Consume-transform-produce: a plain producer writes 10 records to <input topic>; a group
   consumer (group "kp-copier") reads them and a second transactional producer copies them to
   <output topic> partition 2 in two transactions with send_offsets_to_transaction — the first
   aborted, the second committed after seeking back — so the group's committed offset is 10.
3. A read_committed consumer must read exactly the committed records of partitions 0–2, and a
   read_uncommitted one every record written.
Exits non-zero with the reason otherwise; prints "ok" with the counts on success.
"""

import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import NewTopic

TRANSACTIONS = [("c1", 3, True), ("a1", 2, False), ("c2", 2, True), ("a2", 1, False)]
TIMEOUT_MS = 60000


def fail(reason):
    sys.exit(f"kafka_python_txn: {reason}")


def transactional(bootstrap, txn_id):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=txn_id,
        linger_ms=0,
        request_timeout_ms=30000,
    )
    producer.init_transactions()
    return producer


def write_transactions(bootstrap, topic):
    producer = transactional(bootstrap, "kp-txn-check")
    for tag, count, commit in TRANSACTIONS:
        producer.begin_transaction()
        for partition in (0, 1):
            for i in range(count):
                producer.send(topic, value=f"{tag}-{i}".encode(), partition=partition)
        producer.flush(timeout=TIMEOUT_MS / 1000)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()


def copy_in_transactions(bootstrap, input_topic, output_topic):
    plain = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(10):
        plain.send(input_topic, value=f"in-{i}".encode(), partition=0)
    plain.flush(timeout=TIMEOUT_MS / 1000)
    plain.close()

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="kp-copier",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    source = TopicPartition(input_topic, 0)
    consumer.assign([source])
    records = []
    for _ in range(100):
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
        if len(records) >= 10:
            break
    if len(records) < 10:
        fail(f"the copier read {len(records)} input records, not 10")
    producer = transactional(bootstrap, "kp-copier-txn")
    for commit in (False, True):
        producer.begin_transaction()
        for r in records[:10]:
            producer.send(output_topic, value=b"copy-" + r.value, partition=2)
        producer.send_offsets_to_transaction(
            {source: OffsetAndMetadata(records[9].offset + 1, "", -1)}, "kp-copier"
        )
        producer.flush(timeout=TIMEOUT_MS / 1000)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    committed = consumer.committed(source)
    consumer.close()
    if committed != 10:
        fail(f"the group's committed offset is {committed}, not 10")


def read(bootstrap, topic, isolation, expected):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        consumer_timeout_ms=10000,
    )
    parts = [TopicPartition(topic, p) for p in (0, 1, 2)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    got = {p: [] for p in (0, 1, 2)}
    total = sum(len(v) for v in expected.values())
    for record in consumer:
        got[record.partition].append(record.value.decode())
        if sum(len(v) for v in got.values()) >= total:
            # Anything beyond the expected records would be a wrong extra: look a moment more.
            extra = consumer.poll(timeout_ms=2000)
            for batch in extra.values():
                for r in batch:
                    got[r.partition].append(r.value.decode())
            break
    consumer.close()
    if got != expected:
        fail(f"{isolation} read {got}, expected {expected}")
    return total


def main():
    bootstrap, input_topic, output_topic = sys.argv[1:4]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics(
        [NewTopic(t, num_partitions=3, replication_factor=1) for t in (input_topic, output_topic)]
    )
    admin.close()
    write_transactions(bootstrap, output_topic)
    copy_in_transactions(bootstrap, input_topic, output_topic)
    committed = [f"{tag}-{i}" for tag, count, commit in TRANSACTIONS if commit for i in range(count)]
    everything = [f"{tag}-{i}" for tag, count, _ in TRANSACTIONS for i in range(count)]
    copies = [f"copy-in-{i}" for i in range(10)]
    n_committed = read(
        bootstrap, output_topic, "read_committed", {0: committed, 1: committed, 2: copies}
    )
    n_all = read(
        bootstrap,
        output_topic,
        "read_uncommitted",
        {0: everything, 1: everything, 2: copies + copies},
    )
    print(f"ok: {n_committed} committed records read_committed, {n_all} read_uncommitted")


if __name__ == "__main__":
    main()
