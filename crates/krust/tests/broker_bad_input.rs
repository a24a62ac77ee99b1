//! Bad input on a krust broker's client listener (issue 5, "Bad input"), against a real
//! `krust dev` process: garbage bytes, a size prefix over `socket.request.max.bytes`, an unknown
//! API key, an unsupported API version, a batch with a bad CRC, a fetch beyond the log end and a
//! produce to an unknown topic each get Kafka 3.9's answer (an error code, or the connection
//! closed where Kafka closes it). Meanwhile and afterwards the broker serves other connections,
//! and the partition holds exactly the records that were accepted — nothing of the refused
//! input got in. (Produce to a follower → NOT_LEADER_OR_FOLLOWER needs two brokers; it is
//! checked in krust-broker's `server_broker` tests.)

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsRequest, CreateTopicsRequest, FetchRequest, MetadataRequest, ProduceRequest,
    ResponseKind, TopicName, metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::StrBytes;
use krust_log::RecordBatchBuilder;
use krust_net::{ClientConfig, Connection};
use krust_testkit::{KrustProcess, free_port};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(180);
const TOPIC: &str = "bad-input";

// Kafka error codes.
const OFFSET_OUT_OF_RANGE: i16 = 1;
const CORRUPT_MESSAGE: i16 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNSUPPORTED_VERSION: i16 = 35;

fn start_dev(data_dir: &Path, port: u16) -> KrustProcess {
    let mut process = KrustProcess::builder(KRUST)
        .name("krust-dev")
        .args([
            "dev".as_ref(),
            "--data-dir".as_ref(),
            data_dir.as_os_str(),
            "--port".as_ref(),
            port.to_string().as_ref(),
        ])
        .env("RUST_LOG", "info,krust_net=warn")
        .start()
        .expect("start krust dev");
    if let Err(e) = process.wait_for_line("krust dev ready", READY_TIMEOUT) {
        panic!("krust dev never got ready: {e}\n{}", process.log_tail(40));
    }
    process
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn batch(values: &[&str]) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for (i, v) in values.iter().enumerate() {
        b.append_kv(
            1_700_000_000_000 + i as i64,
            None,
            Some(Bytes::from(v.to_string())),
        );
    }
    b.build().into_bytes()
}

fn produce(topic: &str, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ])
}

/// Produce v9 to partition 0: (error code, base offset).
async fn send_produce(conn: &Connection, topic: &str, records: Bytes) -> (i16, i64) {
    match conn
        .send(produce(topic, records), 9)
        .await
        .expect("produce answered")
    {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

/// Fetch v12 of partition 0 from `offset`: (error code, record bytes).
async fn send_fetch(conn: &Connection, offset: i64) -> (i16, Bytes) {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(name(TOPIC))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    match conn.send(request, 12).await.expect("fetch answered") {
        ResponseKind::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            (p.error_code, p.records.clone().unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

/// The values of every record in a fetched record set.
fn values(records: Bytes) -> Vec<String> {
    let batches = krust_log::batch::parse_all(records, krust_log::batch::MAX_BATCH_BYTES)
        .expect("fetched batches parse");
    batches
        .iter()
        .flat_map(|b| b.records().expect("uncompressed records"))
        .map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned())
        .collect()
}

/// Writes `bytes` on a fresh connection and tells whether the broker closed it (EOF or reset)
/// within a few seconds, returning whatever it answered before.
fn raw_exchange(addr: &str, bytes: &[u8]) -> (bool, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    // The broker may close before reading everything; a failed write is part of the answer.
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (true, answer),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return (false, answer),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return (false, answer),
            Err(_) => return (true, answer),
        }
    }
}

/// A request frame with a v1 header (api key, version, correlation id, client id) and `body`
/// (which starts with the header's tagged fields when the API version takes a v2 header).
fn frame(api_key: i16, api_version: i16, body: &[u8]) -> Vec<u8> {
    let client_id = b"bad-input";
    let mut payload = Vec::new();
    payload.extend_from_slice(&api_key.to_be_bytes());
    payload.extend_from_slice(&api_version.to_be_bytes());
    payload.extend_from_slice(&7i32.to_be_bytes());
    payload.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    payload.extend_from_slice(client_id);
    payload.extend_from_slice(body);
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

async fn wait_for_leader(conn: &Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name(TOPIC))),
            ]))
            .with_allow_auto_topic_creation(false);
        if let ResponseKind::Metadata(r) = conn.send(request, 12).await.expect("metadata") {
            let ready = r.topics.first().is_some_and(|t| {
                t.error_code == 0 && t.partitions.first().is_some_and(|p| p.leader_id.0 >= 0)
            });
            if ready {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{TOPIC} never got a leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_kafkas_answers_and_the_broker_keeps_serving() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port().expect("free port");
        let mut dev = start_dev(&dir.path().join("data"), port);
        let addr = format!("127.0.0.1:{port}");
        let conn = Connection::connect(&addr, ClientConfig::default())
            .await
            .expect("connect");

        let create = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(name(TOPIC))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ]);
        match conn.send(create, 7).await.expect("create answered") {
            ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
            other => panic!("{other:?}"),
        }
        wait_for_leader(&conn).await;
        assert_eq!(send_produce(&conn, TOPIC, batch(&["a", "b"])).await, (0, 0));

        // A batch whose CRC does not match its contents: CORRUPT_MESSAGE, nothing appended.
        let mut corrupt = batch(&["evil"]).to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let (code, _) = send_produce(&conn, TOPIC, Bytes::from(corrupt)).await;
        assert_eq!(code, CORRUPT_MESSAGE);
        // A topic that does not exist (Produce never creates topics).
        let (code, _) = send_produce(&conn, "no-such-topic", batch(&["x"])).await;
        assert_eq!(code, UNKNOWN_TOPIC_OR_PARTITION);
        // A fetch beyond the log end.
        let (code, _) = send_fetch(&conn, 1_000).await;
        assert_eq!(code, OFFSET_OUT_OF_RANGE);

        // Raw frames on connections of their own; the first connection stays open throughout.
        let (closed, answer) = raw_exchange(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(closed && answer.is_empty(), "garbage: {answer:?}");
        let (closed, answer) = raw_exchange(&addr, &(200 * 1024 * 1024i32).to_be_bytes());
        assert!(
            closed && answer.is_empty(),
            "size over socket.request.max.bytes"
        );
        let (closed, answer) = raw_exchange(&addr, &(-5i32).to_be_bytes());
        assert!(closed && answer.is_empty(), "negative size");
        let (closed, answer) = raw_exchange(&addr, &frame(9_999, 0, &[]));
        assert!(closed && answer.is_empty(), "unknown API key");
        let (closed, answer) = raw_exchange(&addr, &frame(0, 99, &[0; 16]));
        assert!(closed && answer.is_empty(), "Produce v99");
        let (closed, answer) = raw_exchange(&addr, &frame(0, 9, &[0xff; 3]));
        assert!(closed && answer.is_empty(), "a Produce body cut short");
        // ApiVersions at a version the broker does not know: Kafka answers v0 with
        // UNSUPPORTED_VERSION (and its own version range) instead of closing.
        // (ApiVersions v3+ takes the flexible v2 header: an empty tagged-field section.)
        let (_, answer) = raw_exchange(&addr, &frame(18, 99, &[0]));
        assert!(answer.len() >= 10, "ApiVersions v99 answered: {answer:?}");
        let error_code = i16::from_be_bytes([answer[8], answer[9]]);
        assert_eq!(error_code, UNSUPPORTED_VERSION);

        // Still serving: the old connection, a new one, and the log holds only "a", "b", "c".
        match conn
            .send(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("krust-test"))
                    .with_client_software_version(StrBytes::from_static_str("1.0")),
                3,
            )
            .await
            .expect("api versions")
        {
            ResponseKind::ApiVersions(r) => assert_eq!(r.error_code, 0),
            other => panic!("{other:?}"),
        }
        let fresh = Connection::connect(&addr, ClientConfig::default())
            .await
            .expect("a new connection");
        assert_eq!(send_produce(&fresh, TOPIC, batch(&["c"])).await, (0, 2));
        let (code, records) = send_fetch(&fresh, 0).await;
        assert_eq!(code, 0);
        assert_eq!(values(records), ["a", "b", "c"]);
        assert!(
            dev.is_running().expect("process state"),
            "the broker is still up\n{}",
            dev.log_tail(40)
        );
        let status = dev.terminate(Duration::from_secs(30)).expect("clean stop");
        assert!(status.success(), "exit status {status}");
    })
    .await
    .expect("the test finished within its timeout");
}
