//! DescribeConfigs parity with Apache Kafka 3.9 (issue 5, "DescribeConfigs (with sources and
//! synonyms)"): one combined Kafka 3.9.1 node (the oracle) and one combined `krust server`
//! node, started from the same `server.properties` overrides, get the same topics, the same
//! topic overrides and the same dynamic broker configs (per broker and cluster default), then
//! the same DescribeConfigs requests — topics and broker, with and without synonyms and
//! documentation, a key subset, v0, unknown topic, wrong broker id — through
//! `krust_net::Client`. The responses are diffed field by field (value, `read_only`,
//! `config_source`, `is_sensitive`, `config_type`, synonyms, documentation, error code and
//! message); only values that name this node's ports or directories are masked.
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    DEFAULT_TOOL_TIMEOUT, KRUST_DEV_READY_TIMEOUT, KafkaDist, KafkaNode, KafkaRole, KrustProcess,
    free_ports, random_kafka_uuid, run_binary,
};

/// Static overrides both nodes start with: synonyms in hours and ms, a list, an int.
const STATIC_PROPS: &[(&str, &str)] = &[
    ("log.retention.hours", "100"),
    ("log.roll.ms", "3600000"),
    ("compression.type", "lz4"),
    ("message.max.bytes", "2000000"),
    // Spelled loosely: Kafka prints the parsed value ("0.6", "delete,compact", "true").
    ("log.cleaner.min.cleanable.ratio", "0.60"),
    ("log.cleanup.policy", "delete , compact"),
    ("log.preallocate", "TRUE"),
    ("log.flush.interval.messages", " 9000 "),
    // A password (sensitive: value null) and a key no ConfigDef knows (type UNKNOWN, so
    // also sensitive).
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
const PROPAGATION_TIMEOUT: Duration = Duration::from_secs(60);

/// A node under test: the Kafka node (or the krust node's `server.properties`) and the krust
/// process, if krust.
struct Node {
    kind: &'static str,
    _node: KafkaNode,
    _krust: Option<KrustProcess>,
    bootstrap: String,
}

fn builder(dist: &KafkaDist) -> (krust_testkit::KafkaNodeBuilder, u16) {
    let ports = free_ports(2).expect("ports");
    let mut b = KafkaNode::builder(dist)
        .node_id(1)
        .role(KafkaRole::Combined)
        .cluster_id(random_kafka_uuid())
        .broker_port(ports[0])
        .controller_port(ports[1])
        .quorum_voters(format!("1@127.0.0.1:{}", ports[1]));
    for (k, v) in STATIC_PROPS {
        b = b.prop(*k, *v);
    }
    (b, ports[0])
}

fn start_kafka(dist: &KafkaDist) -> Node {
    let (b, port) = builder(dist);
    let node = b.start().expect("Kafka 3.9 node");
    Node {
        kind: "kafka",
        _node: node,
        _krust: None,
        bootstrap: format!("127.0.0.1:{port}"),
    }
}

fn start_krust(dist: &KafkaDist) -> Node {
    let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_krust")).expect("krust binary");
    let (b, port) = builder(dist);
    let node = b.build_unformatted().expect("krust node config");
    let properties = node.properties_path().display().to_string();
    let cluster_id = random_kafka_uuid();
    run_binary(
        &binary,
        &["storage", "format", "-t", &cluster_id, "-c", &properties],
        None,
        DEFAULT_TOOL_TIMEOUT,
    )
    .expect("krust storage format")
    .ok()
    .expect("krust storage format exit");
    let mut process = KrustProcess::builder(&binary)
        .args(["server", &properties])
        .env("RUST_LOG", "info")
        .dir(node.dir().join("krust"))
        .name("krust-1")
        .start()
        .expect("krust server");
    process
        .wait_for_line("Kafka Server started", KRUST_DEV_READY_TIMEOUT)
        .expect("krust started");
    Node {
        kind: "krust",
        _node: node,
        _krust: Some(process),
        bootstrap: format!("127.0.0.1:{port}"),
    }
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

/// The DescribeConfigs requests both nodes get, by label: `(version, request)`.
fn requests() -> Vec<(&'static str, i16, DescribeConfigsRequest)> {
    let topics = || {
        vec![
            resource(2, "plain", None),
            resource(2, "overridden", None),
            resource(2, "no-such-topic", None),
        ]
    };
    let all = |synonyms: bool, docs: bool, resources| {
        DescribeConfigsRequest::default()
            .with_include_synonyms(synonyms)
            .with_include_documentation(docs)
            .with_resources(resources)
    };
    vec![
        ("topics, synonyms + docs", 4, all(true, true, topics())),
        ("topics, bare", 4, all(false, false, topics())),
        ("topics, v0", 0, all(false, false, topics())),
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
            "broker default and wrong id, synonyms",
            4,
            all(
                true,
                false,
                vec![resource(4, "", None), resource(4, "2", None)],
            ),
        ),
        (
            "bad names and types",
            4,
            all(
                true,
                false,
                vec![
                    resource(2, "bad/name", None),
                    resource(2, "", None),
                    resource(99, "x", None),
                ],
            ),
        ),
        (
            "key subsets",
            4,
            all(
                true,
                false,
                vec![
                    resource(
                        4,
                        "1",
                        Some(&["log.retention.ms", "log.retention.hours", "nope"]),
                    ),
                    resource(2, "overridden", Some(&["retention.ms", "segment.ms"])),
                    resource(2, "plain", Some(&[])),
                ],
            ),
        ),
    ]
}

async fn create_topics(client: &Client) {
    let topic = |name: &str, configs: &[(&str, &str)]| {
        CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )
    };
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            topic("plain", &[]),
            topic(
                "overridden",
                &[
                    ("retention.ms", "86400000"),
                    ("cleanup.policy", "compact,delete"),
                    ("max.message.bytes", "5000"),
                    ("min.cleanable.dirty.ratio", "0.7"),
                ],
            ),
        ]);
    let ResponseKind::CreateTopics(r) = client.send(request, 7).await.expect("CreateTopics") else {
        panic!("not CreateTopics");
    };
    for t in &r.topics {
        assert_eq!(
            t.error_code, 0,
            "CreateTopics {:?}: {:?}",
            t.name, t.error_message
        );
    }
}

async fn alter_broker_configs(client: &Client) {
    let set = |name: &str, value: &str| {
        AlterableConfig::default()
            .with_name(s(name))
            .with_config_operation(0)
            .with_value(Some(s(value)))
    };
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""))
            .with_configs(vec![
                set("log.retention.ms", "7200000"),
                set("log.cleaner.delete.retention.ms", "1000"),
                set("log.cleaner.io.max.bytes.per.second", "1e6"),
            ]),
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s("1"))
            .with_configs(vec![
                set("message.max.bytes", "3000000"),
                set("log.cleaner.delete.retention.ms", "2000"),
                set("log.roll.jitter.ms", "1000"),
                set("log.cleaner.threads", "2"),
            ]),
    ]);
    let ResponseKind::IncrementalAlterConfigs(r) = client
        .send(request, 1)
        .await
        .expect("IncrementalAlterConfigs")
    else {
        panic!("not IncrementalAlterConfigs");
    };
    for res in &r.responses {
        assert_eq!(
            res.error_code, 0,
            "IncrementalAlterConfigs {:?}: {:?}",
            res.resource_name, res.error_message
        );
    }
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

/// Waits until this node's broker sees the dynamic configs (they travel through the metadata
/// log) and both topics.
async fn wait_propagated(client: &Client) {
    let deadline = tokio::time::Instant::now() + PROPAGATION_TIMEOUT;
    loop {
        let r = describe(
            client,
            4,
            DescribeConfigsRequest::default().with_resources(vec![
                resource(4, "1", Some(&["message.max.bytes"])),
                resource(2, "plain", Some(&["retention.ms", "delete.retention.ms"])),
                resource(2, "overridden", Some(&["retention.ms"])),
            ]),
        )
        .await;
        let value = |i: usize, name: &str| {
            r.results.get(i).and_then(|res| {
                res.configs
                    .iter()
                    .find(|c| c.name.as_str() == name)
                    .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
            })
        };
        if value(0, "message.max.bytes").as_deref() == Some("3000000")
            && value(1, "retention.ms").as_deref() == Some("7200000")
            && value(1, "delete.retention.ms").as_deref() == Some("2000")
            && value(2, "retention.ms").as_deref() == Some("86400000")
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

/// Every request's flattened response from `node`.
async fn run(node: &Node) -> BTreeMap<String, BTreeMap<String, String>> {
    let client = Client::new(
        node.bootstrap.clone(),
        ClientConfig {
            client_id: "describe-configs-vs-kafka".to_owned(),
            request_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    create_topics(&client).await;
    alter_broker_configs(&client).await;
    wait_propagated(&client).await;
    let mut out = BTreeMap::new();
    for (label, version, request) in requests() {
        let r = describe(&client, version, request).await;
        out.insert(label.to_string(), flatten(&r));
    }
    out
}

fn collect(node: &Node) -> BTreeMap<String, BTreeMap<String, String>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        tokio::time::timeout(TEST_TIMEOUT, run(node))
            .await
            .unwrap_or_else(|_| panic!("{}: DescribeConfigs run timed out", node.kind))
    })
}

#[test]
fn describe_configs_matches_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One JVM or krust at a time: the machine has two cores.
    let kafka = {
        let node = start_kafka(&dist);
        collect(&node)
    };
    let krust = {
        let node = start_krust(&dist);
        collect(&node)
    };
    // The oracle answered something worth comparing: every KafkaConfig key (4 lines each).
    let broker_lines = kafka.get("broker 1, bare").map_or(0, BTreeMap::len);
    assert!(broker_lines > 4 * 300, "Kafka listed {broker_lines} lines");
    eprintln!(
        "compared {} requests; broker 1 has {broker_lines} lines",
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
