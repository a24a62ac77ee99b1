//! Transactions on krust partition leaders, side by side with a Kafka 3.9 leader in one
//! cluster: 3 krust controllers, krust broker 4 and Kafka 3.9 broker 5. `__transaction_state`
//! (one partition) is created on the Kafka broker first, so Kafka's transaction coordinator
//! answers the client and sends the COMMIT/ABORT markers (WriteTxnMarkers) to both leaders of
//! the two-partition topic `txn-data`: partition 0 led by krust, partition 1 by Kafka.
//!
//! confluent-kafka (`scripts/clients/txn_checks.py`) commits and aborts transactions writing the
//! same records to both partitions; read_committed consumers must see only the committed ones
//! and read_uncommitted ones everything. Then the two leaders must answer the same
//! read-committed Fetch (v12, from several offsets) with the same high watermark, last stable
//! offset and `aborted_transactions`; a late transactional Produce for the ended transaction
//! must be refused by both alike (KIP-890 part 1: the krust leader asks Kafka's coordinator
//! with AddPartitionsToTxn `verify_only`); Kafka's `DumpLogSegments` must print krust's
//! `.txnindex` as it prints Kafka's, and krust's reader must read Kafka's `.txnindex` as its own.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ProduceRequest, ResponseKind, TopicName, TransactionalId,
};
use krust_log::RecordBatchBuilder;
use krust_log::txn_index::TransactionIndex;
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, PythonClients, class, free_ports, random_kafka_uuid,
};
use support::{Node, broker_properties, voters, write_controllers, write_node};

mod support;

const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(120);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const CHECK_TIMEOUT: Duration = Duration::from_secs(240);
const KRUST_ID: i32 = 4;
const KAFKA_ID: i32 = 5;
const TOPIC: &str = "txn-data";
const CHECKS: &str = include_str!("../../../scripts/clients/txn_checks.py");

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

/// (high watermark, last stable offset, aborted (producer id, first offset)) of a
/// read-committed Fetch v12 of `partition` from `offset`.
type Answer = (i64, i64, Option<Vec<(i64, i64)>>);

async fn fetch_committed(address: &str, partition: i32, offset: i64) -> Answer {
    let client = Client::new(
        address.to_string(),
        ClientConfig {
            client_id: "txn-mixed-cluster".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_session_epoch(-1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(TOPIC.to_string().into()))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_current_leader_epoch(-1)
                        .with_last_fetched_epoch(-1)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let ResponseKind::Fetch(r) = client.send(request, 12).await.expect("Fetch") else {
        panic!("not a Fetch response");
    };
    let p = &r.responses[0].partitions[0];
    assert_eq!(
        p.error_code, 0,
        "fetch of partition {partition} from {address}"
    );
    (
        p.high_watermark,
        p.last_stable_offset,
        p.aborted_transactions.as_ref().map(|list| {
            list.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        }),
    )
}

/// A transactional Produce v9 of one record by `producer_id` epoch 0 to `partition`, for
/// transaction `krust-txn-check` whose transactions all ended: (error code, error message).
async fn late_produce(address: &str, partition: i32, producer_id: i64) -> (i16, Option<String>) {
    let client = Client::new(
        address.to_string(),
        ClientConfig {
            client_id: "txn-mixed-cluster".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let mut batch = RecordBatchBuilder::new(0)
        .producer(producer_id, 0, 100)
        .transactional(true);
    batch.append_kv(0, None, Some(Bytes::from_static(b"late")));
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId("krust-txn-check".to_string().into())))
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(TOPIC.to_string().into()))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.build().into_bytes())),
                ]),
        ]);
    let ResponseKind::Produce(r) = client.send(request, 9).await.expect("Produce") else {
        panic!("not a Produce response");
    };
    let p = &r.responses[0].partition_responses[0];
    (
        p.error_code,
        p.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// `GET /metrics` on 127.0.0.1:`port`.
fn scrape_metrics(port: u16) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ =
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// DumpLogSegments' lines for a `.txnindex`, without its `Dumping <file>` header.
fn dump_txn_index(dist: &KafkaDist, file: &std::path::Path) -> Vec<String> {
    run_tool(
        dist,
        class::DUMP_LOG_SEGMENTS,
        &["--files", &file.display().to_string()],
    )
    .lines()
    .filter(|l| !l.starts_with("Dumping"))
    .map(str::to_owned)
    .collect()
}

#[test]
fn transactions_commit_and_abort_on_krust_and_kafka_leaders_alike() {
    let Some(python) = PythonClients::locate().expect("python venv") else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ports = free_ports(6).expect("ports");
    let metrics_port = ports[5];
    let voters = voters(&ports);
    let mut controllers = write_controllers(root.path(), &ports, &cluster_id, "");
    let broker_props = "broker.heartbeat.interval.ms=500\noffsets.topic.replication.factor=1\n\
                        offsets.topic.num.partitions=1\ntransaction.state.log.replication.factor=1\n\
                        transaction.state.log.min.isr=1\ntransaction.state.log.num.partitions=1\n";
    let krust_dir = root.path().join(format!("node{KRUST_ID}"));
    let mut krust: Node = write_node(
        root.path(),
        KRUST_ID,
        &broker_properties(
            KRUST_ID,
            ports[3],
            &voters,
            &format!(
                "log.dirs={}\nmetadata.log.dir={}\nmetrics.port={metrics_port}\n{broker_props}",
                krust_dir.join("logs").display(),
                krust_dir.join("metadata").display(),
            ),
        ),
        &cluster_id,
    );
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let mut builder = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Broker)
        .cluster_id(cluster_id.clone())
        .quorum_voters(voters.clone())
        .broker_port(ports[4])
        .dir(root.path().join(format!("node{KAFKA_ID}")))
        .start_timeout(KAFKA_START_TIMEOUT);
    for line in broker_props.lines() {
        let (key, value) = line.split_once('=').expect("key=value");
        builder = builder.prop(key, value);
    }
    let mut kafka = builder.build().expect("Kafka broker configured");
    for node in &mut controllers {
        node.start();
    }
    kafka.spawn().expect("spawn the Kafka broker");
    krust.start();
    kafka
        .wait_ready(KAFKA_START_TIMEOUT)
        .expect("the Kafka broker registers with the krust controllers");
    let krust_address = format!("127.0.0.1:{}", ports[3]);
    let kafka_address = format!("127.0.0.1:{}", ports[4]);
    let bootstrap = format!("{krust_address},{kafka_address}");

    // The transaction coordinator's log on the Kafka broker, before any client asks for it.
    for (topic, assignment, config) in [
        ("__transaction_state", "5", "cleanup.policy=compact"),
        (TOPIC, "4,5", "min.insync.replicas=1"),
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
                assignment,
                "--config",
                config,
            ],
        );
    }

    let out = python
        .run_script(CHECKS, &[&bootstrap, TOPIC], CHECK_TIMEOUT)
        .expect("run txn_checks.py");
    assert!(
        out.success(),
        "txn_checks.py: {}\n{}\nkrust broker log:\n{}",
        out.stdout,
        out.stderr,
        krust.log_tail(40)
    );

    // The same transactions, record counts and markers on both partitions: both leaders must
    // give the same read-committed answer. Offsets: c1 0-2 + marker 3, a1 4-5 + 6, c2 7-8 + 9,
    // a2 10 + 11.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for offset in [0, 4, 7, 11, 12] {
        let ours = runtime.block_on(fetch_committed(&krust_address, 0, offset));
        let theirs = runtime.block_on(fetch_committed(&kafka_address, 1, offset));
        assert_eq!(ours, theirs, "read-committed fetch from offset {offset}");
        if offset == 0 {
            let aborted = ours.2.as_ref().expect("a list for read_committed");
            assert_eq!(
                aborted.iter().map(|a| a.1).collect::<Vec<_>>(),
                vec![4, 10],
                "both aborted transactions"
            );
            assert_eq!((ours.0, ours.1), (12, 12));
        }
    }

    // KIP-890 part 1: a late transactional write for the ended transaction is refused by
    // both leaders alike (the coordinator says the partition is not in a transaction), and
    // nothing is left open.
    let producer_id = runtime
        .block_on(fetch_committed(&krust_address, 0, 0))
        .2
        .expect("list")[0]
        .0;
    let ours = runtime.block_on(late_produce(&krust_address, 0, producer_id));
    let theirs = runtime.block_on(late_produce(&kafka_address, 1, producer_id));
    assert_eq!(ours, theirs, "late transactional produce");
    assert_eq!(ours.0, 48, "INVALID_TXN_STATE: {ours:?}");
    assert_eq!(
        runtime.block_on(fetch_committed(&krust_address, 0, 0)),
        runtime.block_on(fetch_committed(&kafka_address, 1, 0)),
        "after the late produce"
    );

    // Kafka's partition gauge: nothing open, no lag.
    let metrics = scrape_metrics(metrics_port);
    assert!(
        metrics.lines().any(
            |l| l.starts_with("kafka_cluster_partition_laststableoffsetlag{")
                && l.contains("topic=\"txn-data\"")
                && l.ends_with(" 0")
        ),
        "LastStableOffsetLag of txn-data-0 in:\n{metrics}"
    );
    // The transaction coordinator's gauges (Kafka's names): every marker found its leader.
    assert!(
        metrics.lines().any(|l| l
            == "kafka_coordinator_transaction_transactionmarkerchannelmanager_unknowndestinationqueuesize 0"),
        "UnknownDestinationQueueSize 0 in:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            == "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize 0"),
        "LogAppendRetryQueueSize 0 in:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            .starts_with("kafka_server_transaction_coordinator_metrics_partition_load_time_max ")),
        "partition-load-time-max in:\n{metrics}"
    );

    // Kafka's tool reads krust's index as it reads its own; krust reads Kafka's.
    let index = "00000000000000000000.txnindex";
    let ours = krust_dir
        .join("logs")
        .join(format!("{TOPIC}-0"))
        .join(index);
    let theirs = kafka.log_dir().join(format!("{TOPIC}-1")).join(index);
    let dumped = dump_txn_index(&dist, &ours);
    assert_eq!(dumped.len(), 2, "two aborted transactions: {dumped:?}");
    assert_eq!(dumped, dump_txn_index(&dist, &theirs));
    let (kafka_index, corrupt) =
        TransactionIndex::load(theirs.parent().expect("dir"), 0, i64::MAX).expect("read");
    assert!(corrupt.is_none(), "Kafka's .txnindex: {corrupt:?}");
    let (krust_index, _) =
        TransactionIndex::load(ours.parent().expect("dir"), 0, i64::MAX).expect("read");
    assert_eq!(kafka_index.entries(), krust_index.entries());
}
