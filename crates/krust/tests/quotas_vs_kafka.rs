//! Client byte-rate quotas enforced as Kafka 3.9 enforces them (issue 12, item 5), side by
//! side: each test runs the same client against one Apache Kafka 3.9 node (the oracle: it
//! proves the test and its tolerances right), then against `krust dev`, one broker at a time,
//! and compares.
//!
//! * Producer (the acceptance): `producer_byte_rate` = 256 KiB/s is set for one client
//!   id with Kafka's `kafka-configs.sh` (AlterClientQuotas), then confluent-kafka offers **10×**
//!   that (`scripts/clients/quota_rate.py produce`). The achieved rate — the value bytes
//!   acknowledged, by delivery-callback time, from the client's start — must be within ±10% of
//!   the quota over 33 s, on both brokers, and both must answer with non-zero
//!   `throttle_time_ms` (librdkafka's `throttle_cb`) distributed alike.
//! * Consumer: `consumer_byte_rate` = 256 KiB/s on a consumer client id; a topic filled
//!   beforehand (by a client without quota) is consumed as fast as possible for 33 s; the rate
//!   must stay under the quota (+10%) and above half of it, throttled, on both brokers (the
//!   throttle values are printed, not compared: see the test).
//! * Connections (Kafka's `ConnectionQuotas`): with `max.connections.per.ip=2` a third
//!   connection from 127.0.0.1 is closed by the broker and logged with Kafka's line, on both;
//!   `max.connections.per.ip=0` without overrides stops both from starting, with Kafka's text;
//!   an IP `connection_creation_rate` quota (AlterClientQuotas on `ips`) lets through as many
//!   new connections as Kafka's arithmetic allows, then throttles and closes the next ones;
//!   `max.connection.creation.rate` delays connections instead (all served on both).
//! * Controller mutations (KIP-599) and request time: `controller_mutation_rate` = 2 on two
//!   client ids, then CreateTopics of 10 partitions: v7 (strict) is refused with
//!   THROTTLING_QUOTA_EXCEEDED (and Kafka's null message) once the token bucket is negative, v5
//!   (permissive) accepted and throttled; a Metadata request under `request_percentage` =
//!   1e-6 is throttled one quota window (1000 ms, Kafka's cap) on both.
//!
//! Why 33 s from the start: a client that always has data waiting is released by Kafka in one
//! burst per quota window. With nothing recorded yet, Kafka's `Rate` counts its window as at
//! least `quota.window.num − 1` = 10 s, so the first requests may take 10 s worth of quota at
//! once; that sample is forgotten `quota.window.num × quota.window.size.seconds` = 11 s after
//! its last recording, and the next burst goes through (measured on Kafka 3.9: ~10 × quota
//! every ~11.3 s for the producer, with ~60 ms throttles in between and ~1 s ones while
//! saturated; the consumer's fetch is capped at 10 s of quota, ~7.5 × quota every ~12 s).
//! Counting from the first request over three such windows (33 s, more than the 30 s)
//! covers whole bursts; an arbitrary 30 s slice would hold two or three bursts and read
//! 0.75–1.1 × the quota on Kafka itself. Rates are bytes over the client's own clock, so the
//! tolerance is the issue's ±10%; value bytes slightly undercount what the quota counts
//! (request / response sizes with headers, ~2% here) on both brokers alike. No other timing is
//! asserted. Without the venv of `scripts/clients/install.sh` the tests are skipped locally
//! and fail in CI. Real processes on 127.0.0.1, every step bounded, killed on drop.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use krust_testkit::{
    BrokerUnderTest, KafkaDist, KafkaNode, KafkaRole, KrustProcess, PythonClients, ToolOutput,
    free_ports, run_binary,
};

const SCRIPT: &str = include_str!("../../../scripts/clients/quota_rate.py");
/// The quota, bytes per second.
const QUOTA: u64 = 256 * 1024;
/// Measured from the client's start, over three quota windows (see the module doc).
const WARMUP_S: &str = "0";
const MEASURE_S: &str = "33";
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a quota may take to reach the broker's image.
const PROPAGATION_TIMEOUT: Duration = Duration::from_secs(30);

/// One broker at a time: the machine has two cores and rates are measured.
static BROKER: Mutex<()> = Mutex::new(());

#[derive(Debug)]
struct Measured {
    rate: f64,
    throttles: Vec<u64>,
}

/// `kafka-configs.sh --alter --add-config <key>=<value> --entity-type clients --entity-name
/// <client>`, then `--describe` until the broker serving clients shows it.
fn set_client_quota(dist: &KafkaDist, broker: &BrokerUnderTest, client: &str, key: &str) {
    let bootstrap = broker.bootstrap();
    let config = format!("{key}={QUOTA}");
    dist.tool("kafka.admin.ConfigCommand")
        .args([
            "--bootstrap-server",
            &bootstrap,
            "--alter",
            "--add-config",
            &config,
            "--entity-type",
            "clients",
            "--entity-name",
            client,
        ])
        .timeout(TOOL_TIMEOUT)
        .run()
        .and_then(|out| out.ok())
        .unwrap_or_else(|e| panic!("{}: kafka-configs --alter: {e}", broker.kind()));
    let deadline = Instant::now() + PROPAGATION_TIMEOUT;
    loop {
        let out = dist
            .tool("kafka.admin.ConfigCommand")
            .args([
                "--bootstrap-server",
                &bootstrap,
                "--describe",
                "--entity-type",
                "clients",
                "--entity-name",
                client,
            ])
            .timeout(TOOL_TIMEOUT)
            .run()
            .expect("kafka-configs --describe");
        if out.stdout.contains(&format!("{key}={QUOTA}")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: quota not visible: {}",
            broker.kind(),
            out.stdout
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn run_client(python: &PythonClients, broker: &BrokerUnderTest, args: &[&str]) -> String {
    let out = python
        .run_script(SCRIPT, args, CLIENT_TIMEOUT)
        .expect("run quota_rate.py");
    assert!(
        out.success(),
        "quota_rate.py {:?} against {} exited with {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
        args,
        broker.kind(),
        out.status,
        out.stdout,
        &out.stderr[out.stderr.len().saturating_sub(4000)..],
        broker.log_tail(40)
    );
    out.stdout
}

/// Parses the script's JSON line (`rate`, `throttles`) without a JSON crate: both are flat.
fn parse(kind: &str, stdout: &str) -> Measured {
    let line = stdout.lines().last().unwrap_or_default();
    let field = |name: &str| -> &str {
        let at = line
            .find(&format!("\"{name}\": "))
            .unwrap_or_else(|| panic!("{kind}: no {name} in {line}"));
        &line[at + name.len() + 4..]
    };
    let rate_text = field("rate");
    let rate_end = rate_text.find([',', '}']).unwrap_or(rate_text.len());
    let rate: f64 = rate_text[..rate_end].trim().parse().expect("rate");
    let list = field("throttles");
    let list = &list[1..list.find(']').expect("throttles list")];
    let throttles = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("throttle ms"))
        .collect();
    Measured { rate, throttles }
}

/// The rate must be within `(low, high)` × the quota, and the broker must have throttled.
fn check_rate(kind: &str, what: &str, m: &Measured, (low, high): (f64, f64)) {
    #[allow(clippy::cast_precision_loss)]
    let quota = QUOTA as f64;
    let mut sorted = m.throttles.clone();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    eprintln!(
        "{kind} {what}: {:.0} B/s = {:.3} × quota; {} throttled responses, throttle_time_ms median {median}, max {}",
        m.rate,
        m.rate / quota,
        m.throttles.len(),
        sorted.last().copied().unwrap_or(0)
    );
    assert!(
        m.rate >= low * quota && m.rate <= high * quota,
        "{kind} {what}: {:.0} B/s is not within {low}..{high} × the {QUOTA} B/s quota",
        m.rate
    );
    assert!(
        !m.throttles.is_empty(),
        "{kind} {what}: the broker never answered with a throttle_time_ms"
    );
}

fn producer_held_to_its_quota(
    python: &PythonClients,
    dist: &KafkaDist,
    broker: &BrokerUnderTest,
) -> Measured {
    let bootstrap = broker.bootstrap();
    dist.create_topic(&bootstrap, "quota-produce", 1, 1, &[])
        .unwrap_or_else(|e| panic!("{}: create topic: {e}", broker.kind()));
    set_client_quota(dist, broker, "quota-producer", "producer_byte_rate");
    let quota = QUOTA.to_string();
    let out = run_client(
        python,
        broker,
        &[
            "produce",
            &bootstrap,
            "quota-produce",
            "quota-producer",
            &quota,
            WARMUP_S,
            MEASURE_S,
        ],
    );
    let measured = parse(broker.kind(), &out);
    check_rate(broker.kind(), "producer", &measured, (0.90, 1.10));
    measured
}

fn consumer_held_to_its_quota(
    python: &PythonClients,
    dist: &KafkaDist,
    broker: &BrokerUnderTest,
) -> Measured {
    let bootstrap = broker.bootstrap();
    dist.create_topic(&bootstrap, "quota-consume", 1, 1, &[])
        .unwrap_or_else(|e| panic!("{}: create topic: {e}", broker.kind()));
    // More than the consumer can read at the quota in 12 + 30 s (11 MB), with room.
    let fill = (QUOTA * 64).to_string();
    run_client(
        python,
        broker,
        &["fill", &bootstrap, "quota-consume", &fill],
    );
    set_client_quota(dist, broker, "quota-consumer", "consumer_byte_rate");
    let quota = QUOTA.to_string();
    let out = run_client(
        python,
        broker,
        &[
            "consume",
            &bootstrap,
            "quota-consume",
            "quota-consumer",
            &quota,
            WARMUP_S,
            MEASURE_S,
        ],
    );
    let measured = parse(broker.kind(), &out);
    check_rate(broker.kind(), "consumer", &measured, (0.50, 1.10));
    measured
}

/// Kafka's throttle_time_ms and krust's must look alike: both brokers throttled (checked by
/// `check_rate`), with medians within a factor of two of each other. The values are computed
/// from rates the client's timing shapes, so two runs are compared loosely (measured for the
/// producer: ~60 ms on both); the maxima depend on where a run's bursts fall and are printed,
/// not compared. krust's arithmetic itself is pinned to Kafka's formula by
/// the unit tests (`krust_metrics::quota`, `krust_broker::server::quotas`).
fn check_throttles_alike(what: &str, kafka: &Measured, krust: &Measured) {
    let median = |m: &Measured| {
        let mut sorted = m.throttles.clone();
        sorted.sort_unstable();
        #[allow(clippy::cast_precision_loss)]
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0) as f64;
        median
    };
    let (k, r) = (median(kafka), median(krust));
    assert!(
        r >= k / 2.0 && r <= k * 2.0,
        "{what}: krust's median throttle_time_ms {r} is not within a factor of 2 of Kafka's {k}"
    );
}

fn with_python() -> Option<(PythonClients, KafkaDist)> {
    let python = PythonClients::locate().expect("python venv")?;
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    Some((python, dist))
}

#[test]
fn producer_at_ten_times_its_quota_held_as_kafka_holds_it() {
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let Some((python, dist)) = with_python() else {
        return;
    };
    let kafka = {
        let broker = BrokerUnderTest::kafka(&dist, &[]).expect("Kafka node");
        producer_held_to_its_quota(&python, &dist, &broker)
    };
    let krust = {
        let broker = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
        producer_held_to_its_quota(&python, &dist, &broker)
    };
    check_throttles_alike("producer", &kafka, &krust);
}

#[test]
fn consumer_held_under_its_quota_as_kafka_holds_it() {
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let Some((python, dist)) = with_python() else {
        return;
    };
    let kafka = {
        let broker = BrokerUnderTest::kafka(&dist, &[]).expect("Kafka node");
        consumer_held_to_its_quota(&python, &dist, &broker)
    };
    let krust = {
        let broker = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
        consumer_held_to_its_quota(&python, &dist, &broker)
    };
    // Both throttled (`check_rate`), but the values are not compared: a consumer's throttle is
    // `size of the fetches in the window / quota − window`, a small difference of two large
    // numbers, and the fetch sizes differ by design — Kafka answers a 1 MiB partition limit
    // with a 1 MiB byte slice of the log that may end inside a batch, krust with whole
    // batches (~1,000,000 bytes here). Measured: Kafka's median alternates between ~1000 and
    // ~2000 ms from one run to the next, krust's is ~1000 ms.
    eprintln!(
        "consumer throttles: kafka {:?}, krust {:?}",
        kafka.throttles, krust.throttles
    );
}

/// ApiVersions v0 (header v1, client id `q`) with correlation id `id`, size prefix included.
fn api_versions_frame(id: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // v0
    body.extend_from_slice(&id.to_be_bytes());
    body.extend_from_slice(&1i16.to_be_bytes());
    body.push(b'q');
    let mut frame = u32::try_from(body.len())
        .expect("small")
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Whether `stream` is served: an ApiVersions round trip answers with its correlation id.
fn served(stream: &mut std::net::TcpStream, id: i32) -> bool {
    use std::io::{Read, Write};
    if stream.write_all(&api_versions_frame(id)).is_err() {
        return false;
    }
    let mut head = [0u8; 8];
    if stream.read_exact(&mut head).is_err() {
        return false;
    }
    let size =
        usize::try_from(u32::from_be_bytes([head[0], head[1], head[2], head[3]])).expect("size");
    let mut rest = vec![0u8; size.saturating_sub(4)];
    stream.read_exact(&mut rest).is_ok() && head[4..8] == id.to_be_bytes()
}

/// Whether the broker closed `stream` without a word (end of stream or reset before the read
/// timeout).
fn closed_by_broker(stream: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(0))
        || matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

fn connect(port: u16) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
}

/// `max.connections.per.ip=2`: two connections from 127.0.0.1 are served, the third is closed
/// by the broker at once, and is logged as Kafka logs it; once one closes, a new one is
/// served again.
fn per_ip_limit(kind: &str, port: u16, log: &dyn Fn() -> String) {
    // The harness's readiness probes may still be counted until the broker notices they are
    // closed: retry the first two connections, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut first, second) = loop {
        let (mut first, mut second) = (connect(port), connect(port));
        if served(&mut first, 1) && served(&mut second, 2) {
            break (first, second);
        }
        assert!(
            Instant::now() < deadline,
            "{kind}: two connections are never served"
        );
        drop((first, second));
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut third = connect(port);
    assert!(
        closed_by_broker(&mut third),
        "{kind}: a third connection from 127.0.0.1 must be closed by the broker"
    );
    assert!(served(&mut first, 3), "{kind}: the first is still served");
    let line = "Rejected connection from /127.0.0.1, address already has the configured maximum of 2 connections.";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log().contains(line) {
        assert!(Instant::now() < deadline, "{kind}: no `{line}` in the log");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(second);
    // The broker notices the close on its own time: retry a few connections, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = connect(port);
        if served(&mut again, 4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{kind}: a slot freed by a close is never reused"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One combined `krust server` node with `props` (Kafka's harness writes its
/// `server.properties`), once it has printed `Kafka Server started`: the node folder (drop it
/// after the process), the process (killed on drop) and its broker port.
fn start_krust_server(dist: &KafkaDist, props: &[(&str, &str)]) -> (KafkaNode, KrustProcess, u16) {
    let ports = free_ports(2).expect("ports");
    let (broker, controller) = (ports[0], ports[1]);
    let mut builder = KafkaNode::builder(dist)
        .node_id(1)
        .role(KafkaRole::Combined)
        .broker_port(broker)
        .controller_port(controller)
        .quorum_voters(format!("1@127.0.0.1:{controller}"));
    for (key, value) in props {
        builder = builder.prop(*key, *value);
    }
    let node = builder.build_unformatted().expect("node folder");
    let binary = env!("CARGO_BIN_EXE_krust");
    let properties = node.properties_path().display().to_string();
    let cluster_id = krust_testkit::random_kafka_uuid();
    run_binary(
        binary,
        &["storage", "format", "-t", &cluster_id, "-c", &properties],
        None,
        TOOL_TIMEOUT,
    )
    .and_then(ToolOutput::ok)
    .expect("krust storage format");
    let mut krust = KrustProcess::builder(binary)
        .args(["server", &properties])
        .env("RUST_LOG", "info")
        .dir(node.dir().join("krust"))
        .name("krust-quotas")
        .start()
        .expect("krust server");
    krust
        .wait_for_line("Kafka Server started", Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("krust server: {e}\n{}", krust.log_tail(40)));
    (node, krust, broker)
}

#[test]
fn connections_over_max_connections_per_ip_are_refused_as_kafka_refuses_them() {
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let props = [("max.connections.per.ip", "2")];
    {
        let kafka = BrokerUnderTest::kafka(&dist, &props).expect("Kafka node");
        let BrokerUnderTest::Kafka(node) = &kafka else {
            unreachable!("a single Kafka node");
        };
        let port = node.broker_port().expect("broker port");
        let log_path = node.log_path();
        per_ip_limit("kafka", port, &|| {
            std::fs::read_to_string(&log_path).unwrap_or_default()
        });
    }
    let (node, krust, broker) = start_krust_server(&dist, &props);
    let log_path = krust.log_path().to_path_buf();
    per_ip_limit("krust", broker, &|| {
        std::fs::read_to_string(&log_path).unwrap_or_default()
    });
    drop(krust);
    drop(node);
}

#[test]
fn a_per_ip_limit_of_zero_needs_overrides_as_kafka_requires() {
    // Kafka's `KafkaConfig.validateValues`; both binaries refuse to start with the same text.
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let message = "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.";
    let ports = free_ports(2).expect("ports");
    let node = KafkaNode::builder(&dist)
        .node_id(1)
        .role(KafkaRole::Combined)
        .broker_port(ports[0])
        .controller_port(ports[1])
        .quorum_voters(format!("1@127.0.0.1:{}", ports[1]))
        .prop("max.connections.per.ip", "0")
        .build_unformatted()
        .expect("node folder");
    let properties = node.properties_path().display().to_string();
    let kafka = dist
        .tool("kafka.Kafka")
        .args([properties.as_str()])
        .timeout(TOOL_TIMEOUT)
        .run()
        .expect("kafka.Kafka runs");
    assert!(!kafka.success(), "Kafka must refuse to start");
    assert!(
        kafka.stderr.contains(message) || kafka.stdout.contains(message),
        "kafka: {}\n{}",
        kafka.stdout,
        kafka.stderr
    );
    let out = run_binary(
        env!("CARGO_BIN_EXE_krust"),
        &["server", &properties],
        None,
        TOOL_TIMEOUT,
    )
    .expect("krust server runs");
    assert!(!out.success(), "krust must refuse to start");
    assert!(
        out.stderr.contains(message) || out.stdout.contains(message),
        "krust: {}\n{}",
        out.stdout,
        out.stderr
    );
}

/// `connection_creation_rate=2` on the `ip` entity 127.0.0.1 (KIP-612), then connections opened
/// one after another: with nothing recorded, the rate's window counts as 10 s plus the time
/// since the first connection, so 2 × (10 + that time) are accepted and served (20, or 21 when
/// the opens take half a second — measured: 21 on both); the next ones are throttled — held,
/// then closed by the broker without an answer. Returns how many were served; the bounds
/// checked are Kafka's formula with the time the opens took, measured here.
fn ip_connection_rate(dist: &KafkaDist, broker: &BrokerUnderTest, port: u16) -> usize {
    let bootstrap = broker.bootstrap();
    let kind = broker.kind();
    let tool = |args: &[&str]| {
        dist.tool("kafka.admin.ConfigCommand")
            .args(args)
            .timeout(TOOL_TIMEOUT)
            .run()
            .unwrap_or_else(|e| panic!("{kind}: kafka-configs: {e}"))
    };
    let alter = tool(&[
        "--bootstrap-server",
        &bootstrap,
        "--alter",
        "--add-config",
        "connection_creation_rate=2",
        "--entity-type",
        "ips",
        "--entity-name",
        "127.0.0.1",
    ]);
    assert!(alter.success(), "{kind}: {}{}", alter.stdout, alter.stderr);
    let deadline = Instant::now() + PROPAGATION_TIMEOUT;
    loop {
        let out = tool(&[
            "--bootstrap-server",
            &bootstrap,
            "--describe",
            "--entity-type",
            "ips",
            "--entity-name",
            "127.0.0.1",
        ]);
        if out.stdout.contains("connection_creation_rate=2") {
            break;
        }
        assert!(Instant::now() < deadline, "{kind}: IP quota not visible");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The tool's own connections from 127.0.0.1 were counted: wait until the broker has
    // forgotten them (a sample goes 11 s after its last recording), so the count below starts
    // from an empty window on both brokers.
    std::thread::sleep(Duration::from_secs(12));
    let mut open = Vec::new();
    let mut refused = 0;
    let started = Instant::now();
    let mut elapsed_at_first_refusal = None;
    for id in 0..24 {
        let mut stream = connect(port);
        if served(&mut stream, id) {
            open.push(stream);
        } else {
            elapsed_at_first_refusal.get_or_insert(started.elapsed());
            refused += 1;
        }
    }
    eprintln!(
        "{kind}: {} connections served, {refused} throttled and closed (first refusal after {elapsed_at_first_refusal:?})",
        open.len()
    );
    assert!(refused > 0, "{kind}: no connection was throttled");
    let elapsed = elapsed_at_first_refusal.unwrap_or_default().as_secs_f64();
    // Kafka's `Rate`: n / (10 s + elapsed) ≤ 2 for every accepted n.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let most = (2.0 * (10.0 + elapsed.ceil())) as usize;
    assert!(
        (20..=most).contains(&open.len()),
        "{kind}: {} served, Kafka's arithmetic allows 20..={most}",
        open.len()
    );
    open.len()
}

#[test]
fn an_ip_connection_creation_rate_throttles_new_connections_as_kafka_does() {
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let kafka = {
        let broker = BrokerUnderTest::kafka(&dist, &[]).expect("Kafka node");
        let BrokerUnderTest::Kafka(node) = &broker else {
            unreachable!("a single Kafka node");
        };
        let port = node.broker_port().expect("broker port");
        ip_connection_rate(&dist, &broker, port)
    };
    let krust = {
        let broker = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
        let port: u16 = broker
            .bootstrap()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("krust dev port");
        ip_connection_rate(&dist, &broker, port)
    };
    eprintln!("served before throttling: kafka {kafka}, krust {krust}");
}

/// `max.connection.creation.rate=2` (KIP-612): the acceptor is delayed, not the connection
/// refused — 24 connections opened one after another are all served on both brokers (Kafka's
/// arithmetic lets about 20 through at once, then one per throttle of up to a second). That
/// krust did throttle is read from its `/metrics` (`connection-accept-throttle-time`, Kafka's
/// socket-server metric); the delays themselves are unit-tested on virtual time.
#[test]
fn a_connection_creation_rate_delays_connections_as_kafka_does() {
    use std::io::{Read, Write};
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let open_all = |kind: &str, port: u16| {
        let started = Instant::now();
        let mut open = Vec::new();
        for id in 0..24 {
            let mut stream = connect(port);
            assert!(
                served(&mut stream, id),
                "{kind}: connection {id} was refused"
            );
            open.push(stream);
        }
        eprintln!("{kind}: 24 connections served in {:?}", started.elapsed());
    };
    {
        let kafka = BrokerUnderTest::kafka(&dist, &[("max.connection.creation.rate", "2")])
            .expect("Kafka node");
        let BrokerUnderTest::Kafka(node) = &kafka else {
            unreachable!("a single Kafka node");
        };
        // The harness's readiness probes were counted: let them leave the 11 s window.
        std::thread::sleep(Duration::from_secs(12));
        open_all("kafka", node.broker_port().expect("broker port"));
    }
    let metrics_port = free_ports(1).expect("port")[0].to_string();
    let (node, krust, port) = start_krust_server(
        &dist,
        &[
            ("max.connection.creation.rate", "2"),
            ("metrics.port", metrics_port.as_str()),
        ],
    );
    std::thread::sleep(Duration::from_secs(12));
    open_all("krust", port);
    let mut http =
        std::net::TcpStream::connect(("127.0.0.1", metrics_port.parse::<u16>().expect("port")))
            .expect("metrics port");
    http.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    let _ = http.read_to_string(&mut body);
    let throttle: f64 = body
        .lines()
        .find(|l| l.starts_with("kafka_server_socket_server_metrics_connection_accept_throttle_time{listener=\"PLAINTEXT\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no connection-accept-throttle-time in /metrics:\n{body}"));
    assert!(
        throttle > 0.0,
        "krust never throttled an accept: {throttle}"
    );
    drop(krust);
    drop(node);
}

/// What a broker answered to one CreateTopics request of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mutation {
    error_code: i16,
    error_message: Option<String>,
    throttle_time_ms: i32,
}

/// AlterClientQuotas over the wire (no JVM tool: faster), then DescribeClientQuotas until the
/// broker shows all of them.
async fn set_client_quotas(conn: &krust_net::Connection, quotas: &[(&str, &str, f64)]) {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use kafka_protocol::messages::{
        AlterClientQuotasRequest, DescribeClientQuotasRequest, ResponseKind,
    };
    use kafka_protocol::protocol::StrBytes;
    let entries = quotas
        .iter()
        .map(|(client, key, value)| {
            EntryData::default()
                .with_entity(vec![
                    EntityData::default()
                        .with_entity_type(StrBytes::from_static_str("client-id"))
                        .with_entity_name(Some(StrBytes::from_string((*client).to_owned()))),
                ])
                .with_ops(vec![
                    OpData::default()
                        .with_key(StrBytes::from_string((*key).to_owned()))
                        .with_value(*value),
                ])
        })
        .collect();
    match conn
        .send(AlterClientQuotasRequest::default().with_entries(entries), 1)
        .await
        .expect("AlterClientQuotas answered")
    {
        ResponseKind::AlterClientQuotas(r) => {
            assert!(r.entries.iter().all(|e| e.error_code == 0), "{r:?}");
        }
        other => panic!("{other:?}"),
    }
    let deadline = Instant::now() + PROPAGATION_TIMEOUT;
    loop {
        let request = DescribeClientQuotasRequest::default().with_components(vec![
            ComponentData::default()
                .with_entity_type(StrBytes::from_static_str("client-id"))
                .with_match_type(2)
                .with_match(None),
        ]);
        let seen = match conn.send(request, 1).await.expect("DescribeClientQuotas") {
            ResponseKind::DescribeClientQuotas(r) => {
                assert_eq!(r.error_code, 0, "{r:?}");
                r.entries.unwrap_or_default()
            }
            other => panic!("{other:?}"),
        };
        let all = quotas.iter().all(|(client, key, value)| {
            seen.iter().any(|e| {
                e.entity
                    .iter()
                    .any(|n| n.entity_name.as_deref() == Some(*client))
                    && e.values
                        .iter()
                        .any(|v| v.key.as_str() == *key && v.value == *value)
            })
        });
        if all {
            return;
        }
        assert!(Instant::now() < deadline, "quotas not visible: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn connect_as(bootstrap: &str, client_id: &str) -> krust_net::Connection {
    let config = krust_net::ClientConfig {
        client_id: client_id.to_owned(),
        // Only the requests of the test count against the quotas.
        negotiate_api_versions: false,
        request_timeout: Duration::from_secs(30),
        ..krust_net::ClientConfig::default()
    };
    krust_net::Connection::connect(bootstrap, config)
        .await
        .expect("connect")
}

/// CreateTopics at `version` of one topic with 10 partitions.
async fn create_topic_v(conn: &krust_net::Connection, topic: &str, version: i16) -> Mutation {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, ResponseKind, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(10)
                .with_replication_factor(1),
        ]);
    match conn.send(request, version).await.expect("CreateTopics") {
        ResponseKind::CreateTopics(r) => Mutation {
            error_code: r.topics[0].error_code,
            error_message: r.topics[0].error_message.as_ref().map(ToString::to_string),
            throttle_time_ms: r.throttle_time_ms,
        },
        other => panic!("{other:?}"),
    }
}

/// The mutation and request quotas against one broker: (strict CreateTopics v7 answers,
/// permissive CreateTopics v5 answers, Metadata's throttle_time_ms under a tiny
/// request_percentage).
async fn mutation_and_request_quotas(bootstrap: &str) -> (Vec<Mutation>, Vec<Mutation>, i32) {
    let admin = connect_as(bootstrap, "quota-admin").await;
    set_client_quotas(
        &admin,
        &[
            ("mut-strict", "controller_mutation_rate", 2.0),
            ("mut-permissive", "controller_mutation_rate", 2.0),
            ("req-tiny", "request_percentage", 0.000_001),
        ],
    )
    .await;
    // A burst of 11 × 1 s × 2 = 22 partitions: 10 → 12 left, 10 → 2, 10 → −8 (strict only
    // refuses once the bucket is negative), then refused with ~8 / 2 s to wait.
    let strict = connect_as(bootstrap, "mut-strict").await;
    let mut strict_answers = Vec::new();
    for i in 0..4 {
        strict_answers.push(create_topic_v(&strict, &format!("mut-strict-{i}"), 7).await);
    }
    // Permissive (v5): all created, the third throttled.
    let permissive = connect_as(bootstrap, "mut-permissive").await;
    let mut permissive_answers = Vec::new();
    for i in 0..3 {
        permissive_answers.push(create_topic_v(&permissive, &format!("mut-perm-{i}"), 5).await);
    }
    // request_percentage 1e-6 % of a thread: any request is over it; Kafka caps the request
    // throttle at one quota window (1000 ms).
    let tiny = connect_as(bootstrap, "req-tiny").await;
    let metadata = match tiny
        .send(kafka_protocol::messages::MetadataRequest::default(), 12)
        .await
        .expect("Metadata")
    {
        kafka_protocol::messages::ResponseKind::Metadata(r) => r.throttle_time_ms,
        other => panic!("{other:?}"),
    };
    (strict_answers, permissive_answers, metadata)
}

/// `controller_mutation_rate` (KIP-599) and `request_percentage`, the same requests to Kafka
/// 3.9 and `krust dev`: strict CreateTopics v7 refused with THROTTLING_QUOTA_EXCEEDED once the
/// token bucket is negative (no message: Kafka's `ApiError` drops a message equal to the
/// error's default text), permissive v5 accepted and throttled, a
/// request under a tiny request_percentage throttled by one quota window. The error codes and
/// messages must be equal; the mutation throttles (the bucket's refill time, ~4000 ms less
/// the milliseconds between the requests) must be in (0, 4000] on both.
#[test]
fn mutation_and_request_quotas_throttle_as_kafka_does() {
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let run = |broker: &BrokerUnderTest| {
        let bootstrap = broker.bootstrap();
        runtime
            .block_on(async {
                tokio::time::timeout(CLIENT_TIMEOUT, mutation_and_request_quotas(&bootstrap)).await
            })
            .unwrap_or_else(|_| panic!("{}: quota requests timed out", broker.kind()))
    };
    let kafka = {
        let broker = BrokerUnderTest::kafka(&dist, &[]).expect("Kafka node");
        run(&broker)
    };
    let krust = {
        let broker = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
        run(&broker)
    };
    eprintln!("kafka: {kafka:?}\nkrust: {krust:?}");
    let shape = |answers: &[Mutation]| -> Vec<(i16, Option<String>, bool)> {
        answers
            .iter()
            .map(|m| {
                (
                    m.error_code,
                    m.error_message.clone(),
                    m.throttle_time_ms > 0,
                )
            })
            .collect()
    };
    for (what, k, r) in [
        ("strict v7", &kafka.0, &krust.0),
        ("permissive v5", &kafka.1, &krust.1),
    ] {
        assert_eq!(shape(k), shape(r), "{what}: kafka {k:?}, krust {r:?}");
        for m in k.iter().chain(r.iter()) {
            assert!(m.throttle_time_ms <= 4000, "{what}: {m:?}");
        }
    }
    assert_eq!(
        kafka.0[3].error_code, 89,
        "Kafka refuses the fourth: {kafka:?}"
    );
    assert!(kafka.0[3].throttle_time_ms > 0, "{kafka:?}");
    assert!(kafka.1.iter().all(|m| m.error_code == 0), "{kafka:?}");
    assert!(kafka.1[2].throttle_time_ms > 0, "{kafka:?}");
    assert_eq!(kafka.2, 1000, "Kafka's request throttle, one window");
    assert_eq!(krust.2, kafka.2, "request_percentage throttle");
}
