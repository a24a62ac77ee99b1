//! DescribeConfigs on the controller listener, side by side with Apache Kafka 3.9 (Kafka's
//! `ControllerApis.handleDescribeConfigsRequest`, which answers with the broker's
//! `ConfigHelper` over the controller's own `KafkaConfig` and metadata cache).
//!
//! One Kafka 3.9.1 KRaft controller (the oracle) and one `krust server` controller, both
//! `process.roles=controller` from the same `server.properties` overrides, get:
//!
//! 1. the same dynamic broker configs through `kafka-configs.sh --bootstrap-controller
//!    --alter` (cluster default and this node's id: IncrementalAlterConfigs to the controller);
//! 2. the same `kafka-configs.sh --bootstrap-controller --describe` of this node's broker
//!    configs (`--all`) and of the cluster default — compared line for line;
//! 3. the same DescribeConfigs requests through `krust_net::Client` — broker `1` with and
//!    without synonyms and documentation, v0, a key subset, the default `""`, a wrong broker
//!    id, an unknown topic, an illegal topic name, an unknown resource type — diffed field by
//!    field (value, `read_only`, `config_source`, `is_sensitive`, `config_type`, synonyms,
//!    documentation, error code and message).
//!
//! Only values naming this node's ports or directories are masked. Every process is killed
//! on drop, every wait is bounded, only 127.0.0.1.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    DEFAULT_TOOL_TIMEOUT, KafkaDist, KafkaNode, KafkaRole, KrustProcess, free_ports,
    random_kafka_uuid, run_binary,
};

/// `kafka-configs.sh` (still Scala in 3.9).
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";

/// Static overrides both controllers start with: synonyms in hours and ms, a list, a double,
/// a password (sensitive: value null) and a key no ConfigDef knows (type UNKNOWN, sensitive).
const STATIC_PROPS: &[(&str, &str)] = &[
    ("log.retention.hours", "100"),
    ("compression.type", "lz4"),
    ("log.cleaner.min.cleanable.ratio", "0.60"),
    ("log.cleanup.policy", "delete , compact"),
    ("ssl.truststore.password", "secret"),
    ("custom.unknown.key", "x"),
];

/// Keys whose values name this node's ports or directories.
const MASKED: &[&str] = &[
    "listeners",
    "advertised.listeners",
    "controller.quorum.voters",
    "log.dirs",
];

const TEST_TIMEOUT: Duration = Duration::from_secs(240);
const START_TIMEOUT: Duration = Duration::from_secs(120);
const PROPAGATION_TIMEOUT: Duration = Duration::from_secs(60);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// A controller under test: the Kafka node (for krust: its `server.properties` and dirs) and
/// the krust process, if krust.
struct Controller {
    kind: &'static str,
    node: KafkaNode,
    _krust: Option<KrustProcess>,
    port: u16,
}

impl Controller {
    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `text` with this node's port and directory replaced by placeholders.
    fn mask(&self, text: &str) -> String {
        text.replace(&self.node.dir().display().to_string(), "<dir>")
            .replace(&format!(":{}", self.port), ":<port>")
    }
}

fn builder(dist: &KafkaDist) -> (krust_testkit::KafkaNodeBuilder, u16) {
    let port = free_ports(1).expect("port")[0];
    let mut b = KafkaNode::builder(dist)
        .node_id(1)
        .role(KafkaRole::Controller)
        .cluster_id(random_kafka_uuid())
        .controller_port(port)
        .quorum_voters(format!("1@127.0.0.1:{port}"))
        .start_timeout(START_TIMEOUT);
    for (k, v) in STATIC_PROPS {
        b = b.prop(*k, *v);
    }
    (b, port)
}

fn start_kafka(dist: &KafkaDist) -> Controller {
    let (b, port) = builder(dist);
    let node = b.start().expect("Kafka 3.9 controller");
    Controller {
        kind: "kafka",
        node,
        _krust: None,
        port,
    }
}

fn start_krust(dist: &KafkaDist) -> Controller {
    let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_krust")).expect("krust binary");
    let (b, port) = builder(dist);
    let node = b.build_unformatted().expect("krust node config");
    let properties = node.properties_path().display().to_string();
    run_binary(
        &binary,
        &[
            "storage",
            "format",
            "-t",
            &random_kafka_uuid(),
            "-c",
            &properties,
        ],
        None,
        DEFAULT_TOOL_TIMEOUT,
    )
    .expect("krust storage format")
    .ok()
    .expect("krust storage format exit");
    let mut process = KrustProcess::builder(&binary)
        .args(["server", &properties])
        .env("RUST_LOG", "info,krust_net=warn")
        .dir(node.dir().join("krust"))
        .name("krust-controller-1")
        .start()
        .expect("krust server");
    process
        .wait_for_line("Kafka Server started", START_TIMEOUT)
        .unwrap_or_else(|e| panic!("krust controller start: {e}\n{}", process.log_tail(40)));
    Controller {
        kind: "krust",
        node,
        _krust: Some(process),
        port,
    }
}

/// `kafka-configs.sh --bootstrap-controller <controller> <args>`; must succeed.
fn kafka_configs(dist: &KafkaDist, controller: &Controller, args: &[&str]) -> String {
    let address = controller.address();
    let mut all = vec!["--bootstrap-controller", address.as_str()];
    all.extend_from_slice(args);
    let output = dist
        .run_tool(CONFIG_COMMAND, &all, TOOL_TIMEOUT)
        .unwrap_or_else(|e| panic!("{}: kafka-configs {args:?}: {e}", controller.kind));
    assert!(
        output.status.success(),
        "{}: kafka-configs {args:?} failed:\n{}\n{}",
        controller.kind,
        output.stdout,
        output.stderr
    );
    output.stdout
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn resource(kind: i8, name: &str, keys: Option<&[&str]>) -> DescribeConfigsResource {
    DescribeConfigsResource::default()
        .with_resource_type(kind)
        .with_resource_name(s(name))
        .with_configuration_keys(keys.map(|k| k.iter().map(|k| s(k)).collect()))
}

/// The DescribeConfigs requests both controllers get, by label: `(version, request)`.
fn requests() -> Vec<(&'static str, i16, DescribeConfigsRequest)> {
    let all = |synonyms: bool, docs: bool, resources| {
        DescribeConfigsRequest::default()
            .with_include_synonyms(synonyms)
            .with_include_documentation(docs)
            .with_resources(resources)
    };
    vec![
        (
            "broker 1, synonyms + docs",
            4,
            all(true, true, vec![resource(4, "1", None)]),
        ),
        (
            "broker 1, bare",
            4,
            all(false, false, vec![resource(4, "1", None)]),
        ),
        (
            "broker 1, v0",
            0,
            all(false, false, vec![resource(4, "1", None)]),
        ),
        (
            "broker default and wrong id, synonyms",
            4,
            all(
                true,
                false,
                vec![resource(4, "", None), resource(4, "2", None)],
            ),
        ),
        (
            "key subset",
            4,
            all(
                true,
                false,
                vec![resource(
                    4,
                    "1",
                    Some(&["log.retention.ms", "message.max.bytes", "nope"]),
                )],
            ),
        ),
        (
            "topics: unknown and illegal",
            4,
            all(
                true,
                false,
                vec![
                    resource(2, "no-such-topic", None),
                    resource(2, "bad/name", None),
                ],
            ),
        ),
        (
            "unknown resource type",
            4,
            all(false, false, vec![resource(99, "x", None)]),
        ),
    ]
}

async fn describe(
    client: &Client,
    version: i16,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let ResponseKind::DescribeConfigs(r) = client
        .send(request, version)
        .await
        .expect("DescribeConfigs")
    else {
        panic!("not DescribeConfigs");
    };
    r
}

/// Waits until the controller describes the dynamic configs the CLI set (they travel through
/// the metadata log to the published image).
async fn wait_propagated(client: &Client) {
    let deadline = tokio::time::Instant::now() + PROPAGATION_TIMEOUT;
    loop {
        let r = describe(
            client,
            4,
            DescribeConfigsRequest::default().with_resources(vec![resource(
                4,
                "1",
                Some(&["message.max.bytes", "log.retention.ms"]),
            )]),
        )
        .await;
        let value = |name: &str| {
            r.results.first().and_then(|res| {
                res.configs
                    .iter()
                    .find(|c| c.name.as_str() == name)
                    .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
            })
        };
        if value("message.max.bytes").as_deref() == Some("3000000")
            && value("log.retention.ms").as_deref() == Some("7200000")
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "dynamic configs never showed: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One response as comparable lines, `resource / key: field = value`, in a stable order.
fn flatten(r: &DescribeConfigsResponse) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for res in &r.results {
        let rname = format!("{}:{:?}", res.resource_type, res.resource_name.as_str());
        out.insert(format!("{rname} error_code"), res.error_code.to_string());
        out.insert(
            format!("{rname} error_message"),
            format!("{:?}", res.error_message.as_deref()),
        );
        for c in &res.configs {
            let name = c.name.as_str();
            let key = format!("{rname} {name}");
            let masked = MASKED.contains(&name);
            let value = |v: &Option<StrBytes>| {
                if masked && v.is_some() {
                    "<masked>".to_string()
                } else {
                    format!("{:?}", v.as_deref())
                }
            };
            out.insert(format!("{key} value"), value(&c.value));
            out.insert(
                format!("{key} flags"),
                format!(
                    "read_only={} is_default={} source={} sensitive={} type={}",
                    c.read_only, c.is_default, c.config_source, c.is_sensitive, c.config_type
                ),
            );
            let synonyms: Vec<String> = c
                .synonyms
                .iter()
                .map(|sy| format!("{}={}@{}", sy.name.as_str(), value(&sy.value), sy.source))
                .collect();
            out.insert(format!("{key} synonyms"), synonyms.join(", "));
            out.insert(
                format!("{key} documentation"),
                format!("{:?}", c.documentation.as_deref()),
            );
        }
    }
    out
}

/// Everything one controller answers: the CLI outputs and every request's flattened
/// response, by label.
fn collect(
    dist: &KafkaDist,
    controller: &Controller,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    // `--alter` through the controller: IncrementalAlterConfigs on the controller listener.
    for args in [
        vec![
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.retention.ms=7200000,log.cleaner.delete.retention.ms=1000",
        ],
        vec![
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--add-config",
            "message.max.bytes=3000000,log.cleaner.delete.retention.ms=2000",
        ],
    ] {
        kafka_configs(dist, controller, &args);
    }
    let client = Client::new(
        controller.address(),
        ClientConfig {
            client_id: "controller-describe-configs-vs-kafka".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let responses = runtime.block_on(async {
        tokio::time::timeout(TEST_TIMEOUT, async {
            wait_propagated(&client).await;
            let mut out = Vec::new();
            for (label, version, request) in requests() {
                out.push((label, flatten(&describe(&client, version, request).await)));
            }
            out
        })
        .await
        .unwrap_or_else(|_| panic!("{}: DescribeConfigs run timed out", controller.kind))
    });
    for (label, lines) in responses {
        out.insert(label.to_string(), lines);
    }
    for (label, args) in [
        (
            "kafka-configs --describe broker 1 --all",
            vec![
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "1",
                "--all",
            ],
        ),
        (
            "kafka-configs --describe broker 1",
            vec![
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "1",
            ],
        ),
        (
            "kafka-configs --describe broker default",
            vec!["--describe", "--entity-type", "brokers", "--entity-default"],
        ),
    ] {
        let stdout = controller.mask(&kafka_configs(dist, controller, &args));
        let lines = stdout
            .lines()
            .enumerate()
            .map(|(i, line)| (format!("line {i:04}"), line.to_string()))
            .collect();
        out.insert(label.to_string(), lines);
    }
    out
}

#[test]
fn controller_describe_configs_matches_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One JVM or krust at a time: the machine has two cores.
    let kafka = {
        let controller = start_kafka(&dist);
        collect(&dist, &controller)
    };
    let krust = {
        let controller = start_krust(&dist);
        collect(&dist, &controller)
    };
    // The oracle answered something worth comparing: every KafkaConfig key (4 lines each),
    // and the CLI printed this node's configs.
    let broker_lines = kafka.get("broker 1, bare").map_or(0, BTreeMap::len);
    assert!(broker_lines > 4 * 300, "Kafka listed {broker_lines} lines");
    let cli_lines = kafka
        .get("kafka-configs --describe broker 1 --all")
        .map_or(0, BTreeMap::len);
    assert!(cli_lines > 300, "kafka-configs printed {cli_lines} lines");
    eprintln!(
        "compared {} answers; broker 1 has {broker_lines} lines, the CLI {cli_lines}",
        kafka.len()
    );
    let mut diffs = Vec::new();
    for (label, want) in &kafka {
        let got = krust.get(label).cloned().unwrap_or_default();
        for (k, v) in want {
            match got.get(k) {
                Some(g) if g == v => {}
                Some(g) => diffs.push(format!("[{label}] {k}: kafka {v} | krust {g}")),
                None => diffs.push(format!("[{label}] {k}: kafka {v} | krust <missing>")),
            }
        }
        for (k, g) in &got {
            if !want.contains_key(k) {
                diffs.push(format!("[{label}] {k}: kafka <missing> | krust {g}"));
            }
        }
    }
    let total = diffs.len();
    diffs.truncate(200);
    assert!(
        total == 0,
        "{total} differences from Kafka 3.9 (first {}):\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
