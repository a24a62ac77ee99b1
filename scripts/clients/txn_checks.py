"""Transactional produce and read-committed consume with confluent-kafka (librdkafka).

Usage: txn_checks.py <bootstrap> <topic> [<producer bootstrap>]

One transactional producer writes four transactions to partitions 0 and 1 of <topic> — commit
(3 records per partition), abort (2), commit (2), abort (1) — then an assign-only consumer with
isolation.level=read_committed must read exactly the committed records of each partition, and
one with read_uncommitted every record. The producer may get its own bootstrap list. Exits non-zero with the reason otherwise; prints the
producer id range it saw on success.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TRANSACTIONS = [("c1", 3, True), ("a1", 2, False), ("c2", 2, True), ("a2", 1, False)]
TIMEOUT_S = 60


def produce(bootstrap, topic):
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "krust-txn-check",
            "linger.ms": 0,
            # librdkafka asks a randomly chosen *connected* broker for the transaction
            # coordinator; with sparse connections it may be connected only to a broker that
            # cannot name one (a krust broker without a transaction coordinator answers
            # COORDINATOR_NOT_AVAILABLE) and ask it alone until the call times out.
            "enable.sparse.connections": False,
            # Transaction state changes on stderr, shown when a check fails.
            "debug": "eos",
        }
    )
    producer.init_transactions(TIMEOUT_S)
    for tag, count, commit in TRANSACTIONS:
        producer.begin_transaction()
        for partition in (0, 1):
            for i in range(count):
                producer.produce(topic, value=f"{tag}-{i}".encode(), partition=partition)
        if producer.flush(TIMEOUT_S) != 0:
            sys.exit(f"transaction {tag}: records not delivered")
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)


def consume(bootstrap, topic, isolation):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "krust-txn-check-unused",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen = {0: [], 1: []}
    at_end = set()
    deadline = time.monotonic() + TIMEOUT_S
    while len(at_end) < 2:
        if time.monotonic() > deadline:
            sys.exit(f"{isolation}: no end of partitions {sorted({0, 1} - at_end)}; read {seen}")
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:  # _PARTITION_EOF
                at_end.add(message.partition())
                continue
            raise KafkaException(message.error())
        seen[message.partition()].append(message.value().decode())
    consumer.close()
    return seen


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    produce(sys.argv[3] if len(sys.argv) > 3 else bootstrap, topic)
    committed = [f"{t}-{i}" for t, n, c in TRANSACTIONS if c for i in range(n)]
    everything = [f"{t}-{i}" for t, n, _ in TRANSACTIONS for i in range(n)]
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        seen = consume(bootstrap, topic, isolation)
        for partition in (0, 1):
            if seen[partition] != expected:
                sys.exit(f"{isolation} partition {partition}: read {seen[partition]}, expected {expected}")
    print("transactions committed and aborted on both partitions read back as expected")


main()
