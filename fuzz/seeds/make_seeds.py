#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from real Kafka 3.9 bytes.

Starts one Apache Kafka 3.9 combined node (KRaft) on loopback with a recording proxy in front of
its client listener, drives real clients through it (confluent-kafka/librdkafka: admin,
idempotent and transactional producers with every compression codec, a consumer group;
kafka-python: v0/v1 message-set producers), stops the node cleanly, then takes:
  * request_frame: every distinct (api key, version) request frame a client sent, a stream of
    the first frames, and the responses (prefixed with their api key and version);
  * record_batch / log_dir / metadata / broker_state: the node's segment, index, checkpoint,
    snapshot, quorum-state, meta.properties, bootstrap.checkpoint and producer-snapshot files,
    the message sets the old clients sent, the snapshot's record values and the
    __consumer_offsets records.
Every seed starts with the target's mode byte (see each target's doc). Seeds are cut to a few
KiB. Usage: make_seeds.py <kafka-3.9 dir with libs/> <corpus dir> [<Kafka 3.9 source tree>];
run with the clients' venv (~/.cache/krust/venv/bin/python).
"""

import base64
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

MAX_SEED = 4096


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder:
    """A loopback proxy that records the request and response frames it forwards."""

    def __init__(self, listen_port, target_port):
        self.requests = []  # (api_key, version, frame)
        self.responses = []  # (api_key, version, frame)
        self.lock = threading.Lock()
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", listen_port))
        self.server.listen(16)
        self.target_port = target_port
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            inflight = {}
            threading.Thread(target=self.pump, args=(client, upstream, inflight, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, inflight, False), daemon=True).start()

    def pump(self, src, dst, inflight, is_request):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + size:
                        break
                    frame, buf = buf[4 : 4 + size], buf[4 + size :]
                    self.record(frame, inflight, is_request)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def record(self, frame, inflight, is_request):
        with self.lock:
            if is_request:
                key, version, correlation = struct.unpack(">hhi", frame[:8])
                inflight[correlation] = (key, version)
                self.requests.append((key, version, frame))
            else:
                (correlation,) = struct.unpack(">i", frame[:4])
                if correlation in inflight:
                    key, version = inflight.pop(correlation)
                    self.responses.append((key, version, frame))


def varint(buf, pos):
    """Zig-zag varint at pos -> (value, next pos)."""
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos


def batches(log):
    """(start, end, magic, attributes, records payload) of each batch or message-set entry."""
    pos = 0
    while pos + 17 <= len(log):
        (length,) = struct.unpack(">i", log[pos + 8 : pos + 12])
        end = pos + 12 + length
        if length <= 0 or end > len(log):
            return
        magic = log[pos + 16]
        attributes = struct.unpack(">h", log[pos + 21 : pos + 23])[0] if magic == 2 else 0
        yield pos, end, magic, attributes, log[pos + 61 : end] if magic == 2 else b""
        pos = end


def records(payload):
    """(key, value) of each record of an uncompressed v2 batch payload."""
    pos = 0
    while pos < len(payload):
        length, pos = varint(payload, pos)
        end = pos + length
        p = pos + 1  # attributes
        _, p = varint(payload, p)  # timestamp delta
        _, p = varint(payload, p)  # offset delta
        klen, p = varint(payload, p)
        key = None if klen < 0 else payload[p : p + klen]
        p += max(klen, 0)
        vlen, p = varint(payload, p)
        value = None if vlen < 0 else payload[p : p + vlen]
        yield key, value
        pos = end


def whole_batches(log, limit=MAX_SEED):
    """The longest prefix of whole batches within limit (at least the first batch)."""
    cut = 0
    for _, end, _, _, _ in batches(log):
        if end > limit and cut:
            break
        cut = end
    return log[:cut] if cut else log[:limit]


class Corpus:
    def __init__(self, root):
        self.root = root

    def add(self, target, name, mode, data):
        d = os.path.join(self.root, target)
        os.makedirs(d, exist_ok=True)
        prefix = bytes([mode]) if isinstance(mode, int) else mode
        with open(os.path.join(d, name), "wb") as f:
            f.write(prefix + data)


def main():
    kafka_home, corpus_dir = sys.argv[1], sys.argv[2]
    corpus = Corpus(corpus_dir)
    work = tempfile.mkdtemp(prefix="krust-fuzz-seeds-")
    broker_port, controller_port, proxy_port = free_port(), free_port(), free_port()
    data = os.path.join(work, "data")
    props = f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
metadata.log.max.record.bytes.between.snapshots=1
metadata.log.max.snapshot.interval.ms=1000
"""
    config = os.path.join(work, "server.properties")
    with open(config, "w") as f:
        f.write(props)
    corpus.add("metadata", "server-properties-combined", 6, props.replace(work, "/tmp/kafka").encode())
    cp = os.path.join(kafka_home, "libs", "*")
    log4j = "-Dlog4j.configuration=file:" + os.path.join(kafka_home, "log4j.properties")
    java = ["java", "-Xmx512m", log4j, "-cp", cp]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", config],
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    recorder = Recorder(proxy_port, broker_port)
    out = open(os.path.join(work, "kafka.out"), "w")
    node = subprocess.Popen(java + ["kafka.Kafka", config], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(broker_port, node)
        drive_clients(proxy_port)
        time.sleep(3)  # a metadata snapshot (interval 1 s)
    finally:
        node.send_signal(signal.SIGTERM)  # clean shutdown: producer snapshots, trimmed indexes
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    harvest(corpus, data, recorder)
    znode_seeds(corpus)
    if len(sys.argv) > 3:  # Kafka's source tree: its config/kraft/server.properties
        with open(os.path.join(sys.argv[3], "config", "kraft", "server.properties"), "rb") as f:
            corpus.add("metadata", "kafka-config-kraft-server-properties", 6, f.read())
    shutil.rmtree(work)


# The znode data a Kafka 3.9 ZooKeeper-mode cluster writes (kafka.zk.ZkData: ClusterIdZNode,
# ControllerZNode v2, ControllerEpochZNode, MigrationZNode, BrokerIdZNode v5, FeatureZNode v2,
# ConfigEntityZNode, ConfigEntityChangeNotificationSequenceZNode v2, ScramCredentialUtils,
# PasswordEncoder, AclZNode / the ACL change znodes, DelegationTokenInfoZNode v3, TopicZNode v3,
# TopicPartitionStateZNode, ProducerIdBlockZNode, Sanitizer), keyed by the target's selector.
ZNODES = [
    (0, 0, b'{"version":"1","id":"7DYWEHTfSrm7Gzv9BSMfSg"}'),
    (1, 0, b'{"version":2,"brokerid":3000,"timestamp":"1700000000000","kraftControllerEpoch":7}'),
    (1, 1, b'{"version":1,"brokerid":1,"timestamp":"1700000000000"}'),
    (2, 0, b"7"),
    (3, 0, b'{"version":0,"kraft_metadata_offset":100,"kraft_controller_id":3000,'
           b'"kraft_metadata_epoch":6,"kraft_controller_epoch":7}'),
    (4, 1, b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
           b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"jmx_port":-1,"port":9092,'
           b'"host":"127.0.0.1","version":5,"timestamp":"1700000000000","rack":"r1"}'),
    (5, 0, b'{"features":{"metadata.version":{"max_version_level":21,"min_version_level":1}},'
           b'"version":2,"status":1}'),
    (6, 0, b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}'),
    (6, 2, b'{"version":1,"config":{"SCRAM-SHA-256":"salt=c2FsdA==,stored_key=c3RvcmVk,'
           b'server_key=c2VydmVy,iterations=4096","producer_byte_rate":"2048"}}'),
    (7, 0, b'{"version":2,"entity_path":"users/alice/clients/app"}'),
    (8, 0, b"salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"),
    (9, 0, b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
           b'"host":"*","operation":"Read"}]}'),
    (9, 2, b'{"version":1,"acls":[{"principal":"User:*","permissionType":"Deny",'
           b'"host":"10.0.0.1","operation":"Describe"}]}'),
    (10, 0, b"Topic:t"),
    (11, 0, b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx*","patternType":"PREFIXED"}'),
    (12, 0, b'{"issueTimestamp":1000,"renewers":["User%3Abob"],"tokenRequester":"User%3Aalice",'
            b'"tokenId":"token-1","owner":"User%3Aalice","expiryTimestamp":2000,'
            b'"maxTimestamp":3000,"version":3}'),
    (13, 0, b'{"partitions":{"0":[1,2,3],"1":[2,3,4]},"topic_id":"7DYWEHTfSrm7Gzv9BSMfSg",'
            b'"adding_replicas":{"1":[4]},"removing_replicas":{"1":[1]},"version":3}'),
    (14, 0, b'{"controller_epoch":9,"leader":1,"version":1,"leader_recovery_state":0,'
            b'"leader_epoch":5,"isr":[1,2]}'),
    (15, 0, b'{"version":1,"broker":-1,"block_start":"2000","block_end":"2999"}'),
    (16, 0, b"keyLength:128,cipherAlgorithm:AES/CBC/PKCS5Padding,initializationVector:"
            b"AAAAAAAAAAAAAAAAAAAAAA==,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,"
            b"encryptedPassword:AAAAAAAAAAAAAAAAAAAAAA==,salt:AAAAAAAAAAAAAAAAAAAAAA==,"
            b"passwordLength:8,iterations:4096"),
    (17, 0, b"User%3Aal%20ice%2A"),
]


def znode_seeds(corpus):
    for i, (selector, path, data) in enumerate(ZNODES):
        corpus.add("znode_json", f"znode-{selector}-{i}", bytes([selector, path]), data)


def wait_for_port(port, node, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if node.poll() is not None:
            raise RuntimeError("Kafka exited during startup")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("Kafka did not start listening")


def drive_clients(port):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("plain", 1, 1), NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})]
    topics += [NewTopic(c, 1, 1) for c in ("gzip", "snappy", "lz4", "zstd", "txn", "legacy0", "legacy1")]
    for f in admin.create_topics(topics, operation_timeout=30).values():
        f.result(timeout=60)
    for f in admin.describe_configs([ConfigResource("topic", "plain")]).values():
        f.result(timeout=30)
    for f in admin.create_partitions([NewPartitions("plain", 2)]).values():
        f.result(timeout=30)
    admin.list_topics(timeout=30)
    admin.describe_cluster().result(timeout=30)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "compression.type": codec, "linger.ms": 5})
        topic = "plain" if codec == "none" else codec
        for i in range(20):
            p.produce(topic, key=f"k{i % 4}".encode(), value=f"value-{i}".encode() * 3,
                      headers=[("h", b"v")], partition=0)
        p.flush(30)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        p.produce("compacted", key=f"k{i % 3}".encode(), value=None if i == 9 else b"v%d" % i, partition=0)
    p.flush(30)
    t = Producer({"bootstrap.servers": bootstrap, "transactional.id": "seed-txn"})
    t.init_transactions(30)
    for commit in (True, False):
        t.begin_transaction()
        t.produce("txn", key=b"k", value=b"committed" if commit else b"aborted", partition=0)
        t.commit_transaction(30) if commit else t.abort_transaction(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-group", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition("plain", 0, 0), TopicPartition("txn", 0, 0)])
    deadline = time.time() + 20
    seen = 0
    while time.time() < deadline and seen < 20:
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen += 1
    c.commit(asynchronous=False)
    c.close()
    g = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-subscriber", "auto.offset.reset": "earliest"})
    g.subscribe(["gzip"])
    deadline = time.time() + 20
    while time.time() < deadline:
        m = g.poll(1.0)
        if m is not None and not m.error():
            break
    g.commit(asynchronous=False)
    g.close()
    from kafka import KafkaProducer

    for topic, version in (("legacy0", (0, 9)), ("legacy1", (0, 10, 0))):
        for codec in (None, "gzip"):
            kp = KafkaProducer(bootstrap_servers=bootstrap, api_version=version, compression_type=codec)
            for i in range(5):
                kp.send(topic, key=b"k%d" % i, value=b"legacy value %d" % i, partition=0)
            kp.flush(30)
            kp.close(10)


def legacy_message_sets(frame):
    """The record sets of a Produce v0-v2 request frame (header v1)."""
    pos = 8
    (client_len,) = struct.unpack(">h", frame[pos : pos + 2])
    pos += 2 + max(client_len, 0) + 6  # client id, acks, timeout
    (topics,) = struct.unpack(">i", frame[pos : pos + 4])
    pos += 4
    for _ in range(topics):
        (tlen,) = struct.unpack(">h", frame[pos : pos + 2])
        pos += 2 + tlen
        (parts,) = struct.unpack(">i", frame[pos : pos + 4])
        pos += 4
        for _ in range(parts):
            (size,) = struct.unpack(">i", frame[pos + 4 : pos + 8])
            yield frame[pos + 8 : pos + 8 + size]
            pos += 8 + size


def read(path):
    with open(path, "rb") as f:
        return f.read()


# Partitions whose files seed log_dir and broker_state (one of each kind is enough).
LOG_DIR_PARTITIONS = {"plain-0", "gzip-0", "txn-0", "legacy0-0", "__consumer_offsets-0", "__cluster_metadata-0"}
PRODUCER_SNAPSHOT_PARTITIONS = {"plain-0", "txn-0", "__consumer_offsets-0"}


def harvest(corpus, data, recorder):
    produce = 0
    seen = set()
    stream = b""
    for key, version, frame in recorder.requests:
        if len(stream) < MAX_SEED:
            stream += struct.pack(">i", len(frame)) + frame
        if key == produce and version <= 2:
            for i, message_set in enumerate(legacy_message_sets(frame)):
                corpus.add("record_batch", f"produce-v{version}-message-set-{len(seen)}-{i}", 1, message_set[:MAX_SEED])
        if (key, version) in seen or len(frame) > MAX_SEED:
            continue
        seen.add((key, version))
        corpus.add("request_frame", f"request-{key}-v{version}", 0, frame)
    corpus.add("request_frame", "stream-first-frames", 1, stream)
    seen = set()
    for key, version, frame in recorder.responses:
        if (key, version) in seen or len(frame) > MAX_SEED:
            continue
        seen.add((key, version))
        corpus.add("request_frame", f"response-{key}-v{version}", 2, struct.pack(">hh", key, version) + frame)

    for name in sorted(os.listdir(data)):
        path = os.path.join(data, name)
        if os.path.isfile(path):
            text = read(path)
            if name == "meta.properties":
                corpus.add("metadata", "meta-properties", 5, text)
            elif name == "bootstrap.checkpoint":
                corpus.add("metadata", "bootstrap-checkpoint", 3, text)
            elif name.endswith("checkpoint"):
                corpus.add("log_dir", name, 3, text)
            continue
        for file in sorted(os.listdir(path)):
            fpath = os.path.join(path, file)
            contents = read(fpath)
            if name not in LOG_DIR_PARTITIONS and file in ("leader-epoch-checkpoint", "partition.metadata"):
                continue
            if file == "leader-epoch-checkpoint":
                corpus.add("log_dir", f"{name}-{file}", 2, contents)
            elif file == "partition.metadata":
                corpus.add("log_dir", f"{name}-{file}", 4, contents)
            elif file == "quorum-state":
                corpus.add("metadata", "quorum-state", 4, contents)
            elif file.endswith(".snapshot") and name in PRODUCER_SNAPSHOT_PARTITIONS:
                corpus.add("broker_state", f"{name}-producer-snapshot", 1, contents)
            elif file.endswith(".checkpoint"):
                corpus.add("metadata", "snapshot-checkpoint", 2, contents[: 4 * MAX_SEED])
                corpus.add("record_batch", "snapshot-checkpoint", 2, contents[: 4 * MAX_SEED])
                values = b""
                for _, _, _, attributes, payload in batches(contents):
                    if attributes & 0x20 or attributes & 0x7:
                        continue  # control batch or compressed
                    for _, value in records(payload):
                        if value is not None and len(values) < MAX_SEED:
                            values += struct.pack(">H", len(value)) + value
                corpus.add("metadata", "snapshot-record-values", 1, values)
            elif file.endswith(".log") and contents:
                log = whole_batches(contents)
                corpus.add("record_batch", f"{name}-log", 0, log)
                if name == "__cluster_metadata-0":
                    corpus.add("metadata", "cluster-metadata-log", 0, log)
                    continue
                if name not in LOG_DIR_PARTITIONS:
                    continue
                corpus.add("log_dir", f"{name}-log", 0, log)
                index = read(fpath[: -len(".log")] + ".index")
                time_index = read(fpath[: -len(".log")] + ".timeindex")
                corpus.add("log_dir", f"{name}-log-and-indexes", 1,
                           struct.pack(">HH", len(log), len(index)) + log + index + time_index)
                if name.startswith("__consumer_offsets"):
                    recs = b""
                    for _, _, _, attributes, payload in batches(contents):
                        if attributes & 0x20 or attributes & 0x7:
                            continue
                        for key, value in records(payload):
                            if key is None:
                                continue
                            v = struct.pack(">H", 0xFFFF) if value is None else struct.pack(">H", len(value)) + value
                            recs += struct.pack(">H", len(key)) + key + v
                    corpus.add("broker_state", f"{name}-records", 0, recs[:MAX_SEED])


if __name__ == "__main__":
    main()
