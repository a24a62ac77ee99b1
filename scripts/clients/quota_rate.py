"""Client byte-rate quotas seen from a real client (confluent-kafka), for
crates/krust/tests/quotas_vs_kafka.rs.

    quota_rate.py produce <bootstrap> <topic> <client-id> <quota B/s> <warmup s> <measure s>
    quota_rate.py fill    <bootstrap> <topic> <bytes>
    quota_rate.py consume <bootstrap> <topic> <client-id> <quota B/s> <warmup s> <measure s>

`produce` offers 10x the quota (1000-byte values, paced) for warmup + measure seconds; the
broker's `producer_byte_rate` throttle is what holds it back. Measured: the value bytes
acknowledged (delivery callbacks) with a timestamp inside [warmup, warmup + measure), divided by
measure. `consume` reads a topic filled beforehand by `fill` (no quota on that client id) as fast
as it can; measured: the value bytes returned by poll() inside the same window. Either prints one
JSON line: the rate, the bytes counted, and every throttle_time_ms the broker returned
(librdkafka's throttle_cb, one event per non-zero throttle in a response).
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer

VALUE_BYTES = 1000


def produce(bootstrap, topic, client_id, quota, warmup, measure):
    throttles = []
    acked = []
    errors = []

    def on_throttle(event):
        throttles.append(round(event.throttle_time * 1000))

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((time.monotonic(), len(msg.value())))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "throttle_cb": on_throttle,
            "acks": 1,
            # Java's default batch size: requests of ~16 KB, so a 30 s count is not made of a
            # handful of 1 MB requests.
            "batch.size": 16384,
            "linger.ms": 5,
            "enable.idempotence": False,
        }
    )
    value = b"q" * VALUE_BYTES
    offered = 10 * quota
    start = time.monotonic()
    end = start + warmup + measure
    sent = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        # Pace the offer at 10x the quota (librdkafka queues what the broker does not take).
        while sent < offered * (now - start):
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                sent += VALUE_BYTES
            except BufferError:
                producer.poll(0.01)
                break
        producer.poll(0.001)
    # Deliveries after `end` are outside the window: no need to flush the backlog.
    producer.poll(0.5)
    if errors:
        sys.exit(f"delivery errors: {errors[:5]}")
    lo, hi = start + warmup, start + warmup + measure
    counted = sum(n for (t, n) in acked if lo <= t < hi)
    per_second = [0] * int(warmup + measure + 1)
    for t, n in acked:
        if start <= t < end:
            per_second[int(t - start)] += n
    print(
        json.dumps(
            {
                "rate": counted / measure,
                "bytes": counted,
                "offered": sent,
                "per_second": per_second,
                "throttles": throttles,
            }
        )
    )


def fill(bootstrap, topic, total):
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "quota-fill", "linger.ms": 20, "acks": 1}
    )
    value = b"f" * VALUE_BYTES
    for _ in range(total // VALUE_BYTES):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        sys.exit(f"{left} records not delivered")
    print(json.dumps({"filled": total}))


def consume(bootstrap, topic, client_id, quota, warmup, measure):
    throttles = []

    def on_throttle(event):
        throttles.append(round(event.throttle_time * 1000))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"{client_id}-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": on_throttle,
        }
    )
    consumer.subscribe([topic])
    start = time.monotonic()
    lo, hi = start + warmup, start + warmup + measure
    counted = 0
    total = 0
    per_second = [0] * int(warmup + measure + 1)
    while time.monotonic() < hi:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            # End-of-partition events are off by default; anything else is a failure.
            sys.exit(f"consumer error: {msg.error()}")
        now = time.monotonic()
        total += len(msg.value())
        per_second[int(now - start)] += len(msg.value())
        if lo <= now < hi:
            counted += len(msg.value())
    consumer.close()
    print(
        json.dumps(
            {
                "rate": counted / measure,
                "bytes": counted,
                "total": total,
                "per_second": per_second,
                "throttles": throttles,
            }
        )
    )


def main():
    mode = sys.argv[1]
    if mode == "produce":
        b, t, c, q, w, m = sys.argv[2:8]
        produce(b, t, c, int(q), float(w), float(m))
    elif mode == "fill":
        b, t, n = sys.argv[2:5]
        fill(b, t, int(n))
    elif mode == "consume":
        b, t, c, q, w, m = sys.argv[2:8]
        consume(b, t, c, int(q), float(w), float(m))
    else:
        sys.exit(f"unknown mode {mode}")


main()
