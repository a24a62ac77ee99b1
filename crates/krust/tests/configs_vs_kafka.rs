//! Config validation parity with Apache Kafka 3.9 (issue 10): the same list of config changes —
//! invalid and valid, for topics and brokers (per broker and the cluster default), through
//! CreateTopics, IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and legacy
//! AlterConfigs, some with `validate_only` — goes, in the same order, to three clusters:
//!
//! 1. the oracle: one combined Apache Kafka 3.9 node;
//! 2. `krust dev` (a combined krust node, started as a user would);
//! 3. three krust controllers under one Apache Kafka 3.9 broker (the Kafka broker checks
//!    broker configs itself and forwards; the krust controllers validate the rest).
//!
//! For every change the error code and message of every resource must equal the oracle's, and
//! every refused or `validate_only` change must leave the metadata log's high watermark where
//! it was (`metadata.max.idle.interval.ms=0`, so nothing else writes). Afterwards the three
//! give the same DescribeConfigs for every topic, the cluster default and the broker's changed
//! keys. The oracle must refuse at least 60 changes and accept at least 20, so the list keeps
//! covering both.
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource as LegacyResource, AlterableConfig as LegacyConfig,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, CreateTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust::metadata_quorum::{Bootstrap, describe};
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    KRUST_DEV_READY_TIMEOUT, KafkaDist, KafkaNode, KafkaRole, KrustProcess, free_ports,
    random_kafka_uuid,
};

/// Every change's node (all three clusters use broker id 1 for the node clients talk to).
const BROKER_ID: &str = "1";
/// Static configs every cluster's broker runs with: what `krust dev` writes for one broker,
/// and no periodic no-op records, so the metadata log moves only for accepted changes.
const STATIC: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "true"),
    ("num.partitions", "1"),
    ("default.replication.factor", "1"),
    ("min.insync.replicas", "1"),
    ("offsets.topic.replication.factor", "1"),
    ("transaction.state.log.replication.factor", "1"),
    ("transaction.state.log.min.isr", "1"),
    ("group.initial.rebalance.delay.ms", "0"),
    ("metadata.max.idle.interval.ms", "0"),
    // Kafka's defaults, over the test harness's light thread counts: the dynamic thread-pool
    // checks compare against the current value.
    ("num.io.threads", "8"),
    ("num.network.threads", "3"),
    ("background.threads", "10"),
];
const WAIT: Duration = Duration::from_secs(120);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// An IncrementalAlterConfigs resource: type, name, `(operation, key, value)`s.
type IncrementalResource = (i8, String, Vec<(i8, String, Option<String>)>);
/// A legacy AlterConfigs resource: type, name, `(key, value)`s.
type LegacyResourceSpec = (i8, String, Vec<(String, Option<String>)>);
/// How a cluster under test is started.
type Start = fn(&KafkaDist) -> Cluster;

/// One config change, sent as the request it names.
#[derive(Debug, Clone)]
enum Change {
    Create {
        topic: String,
        configs: Vec<(String, Option<String>)>,
        validate_only: bool,
    },
    Incremental {
        resources: Vec<IncrementalResource>,
        validate_only: bool,
    },
    Legacy {
        resources: Vec<LegacyResourceSpec>,
        validate_only: bool,
    },
}

impl Change {
    fn validate_only(&self) -> bool {
        match self {
            Self::Create { validate_only, .. }
            | Self::Incremental { validate_only, .. }
            | Self::Legacy { validate_only, .. } => *validate_only,
        }
    }
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned())))
        .collect()
}

fn create(topic: &str, configs: &[(&str, &str)], validate_only: bool) -> Change {
    Change::Create {
        topic: topic.to_owned(),
        configs: owned(configs),
        validate_only,
    }
}

fn incremental(resource_type: i8, name: &str, ops: &[(i8, &str, Option<&str>)]) -> Change {
    Change::Incremental {
        resources: vec![(
            resource_type,
            name.to_owned(),
            ops.iter()
                .map(|(op, k, v)| (*op, (*k).to_owned(), v.map(str::to_owned)))
                .collect(),
        )],
        validate_only: false,
    }
}

fn set(resource_type: i8, name: &str, key: &str, value: &str) -> Change {
    incremental(resource_type, name, &[(SET, key, Some(value))])
}

fn legacy(resource_type: i8, name: &str, configs: &[(&str, &str)]) -> Change {
    Change::Legacy {
        resources: vec![(resource_type, name.to_owned(), owned(configs))],
        validate_only: false,
    }
}

fn validate_only(change: Change) -> Change {
    match change {
        Change::Create { topic, configs, .. } => Change::Create {
            topic,
            configs,
            validate_only: true,
        },
        Change::Incremental { resources, .. } => Change::Incremental {
            resources,
            validate_only: true,
        },
        Change::Legacy { resources, .. } => Change::Legacy {
            resources,
            validate_only: true,
        },
    }
}

/// Topic config values Kafka refuses, one class each.
const BAD_TOPIC_VALUES: &[(&str, &str)] = &[
    ("retention.ms", "not-a-number"),
    ("retention.ms", "-5"),
    ("cleanup.policy", "bogus"),
    ("cleanup.policy", "compact,bogus"),
    ("segment.bytes", "10"),
    ("segment.bytes", "99999999999"),
    ("max.message.bytes", "abc"),
    ("compression.type", "brotli"),
    ("min.insync.replicas", "0"),
    ("no.such.config", "1"),
    ("min.cleanable.dirty.ratio", "1.5"),
    ("min.cleanable.dirty.ratio", "abc"),
    ("unclean.leader.election.enable", "maybe"),
    ("message.timestamp.type", "Bogus"),
    ("segment.ms", "0"),
    ("index.interval.bytes", "-1"),
    ("delete.retention.ms", "-1"),
    ("compression.gzip.level", "10"),
    ("compression.zstd.level", "100"),
    ("compression.lz4.level", "0"),
    ("message.format.version", "0.7"),
    ("leader.replication.throttled.replicas", "abc"),
    ("preallocate", "yes"),
    ("segment.index.bytes", "2"),
    ("flush.messages", "0"),
    ("max.compaction.lag.ms", "0"),
    ("retention.bytes", "1.5"),
    ("remote.storage.enable", "true"),
];

/// The changes, in order, each with a label that names it in a failure.
fn changes() -> Vec<(String, Change)> {
    let mut out: Vec<(String, Change)> = Vec::new();
    let mut add = |label: String, change: Change| out.push((label, change));
    add(
        "create t1".into(),
        create("t1", &[("retention.ms", "86400000")], false),
    );
    for (i, (k, v)) in BAD_TOPIC_VALUES.iter().enumerate() {
        add(
            format!("CreateTopics {k}={v}"),
            create(&format!("bad-{i}"), &[(k, v)], false),
        );
        add(
            format!("IncrementalAlterConfigs {k}={v}"),
            set(TOPIC, "t1", k, v),
        );
        add(
            format!("AlterConfigs {k}={v}"),
            legacy(TOPIC, "t1", &[(k, v)]),
        );
    }
    for (k, v) in &BAD_TOPIC_VALUES[..4] {
        add(
            format!("CreateTopics validate_only {k}={v}"),
            validate_only(create("bad-vo", &[(k, v)], false)),
        );
        add(
            format!("IncrementalAlterConfigs validate_only {k}={v}"),
            validate_only(set(TOPIC, "t1", k, v)),
        );
    }
    // Topic refusals of other kinds.
    add(
        "compaction lags in conflict".into(),
        create(
            "bad-lags",
            &[
                ("min.compaction.lag.ms", "10"),
                ("max.compaction.lag.ms", "5"),
            ],
            false,
        ),
    );
    add(
        "CreateTopics null value".into(),
        Change::Create {
            topic: "bad-null".into(),
            configs: vec![("retention.ms".into(), None)],
            validate_only: false,
        },
    );
    add(
        "APPEND to a LONG".into(),
        incremental(TOPIC, "t1", &[(APPEND, "retention.ms", Some("5"))]),
    );
    add(
        "APPEND a bad policy".into(),
        incremental(TOPIC, "t1", &[(APPEND, "cleanup.policy", Some("bogus"))]),
    );
    add(
        "SET without a value".into(),
        incremental(TOPIC, "t1", &[(SET, "retention.ms", None)]),
    );
    add(
        "repeated config key".into(),
        incremental(
            TOPIC,
            "t1",
            &[
                (SET, "retention.ms", Some("1")),
                (SET, "retention.ms", Some("2")),
            ],
        ),
    );
    add(
        "unknown topic".into(),
        set(TOPIC, "nope", "retention.ms", "1000"),
    );
    add(
        "unknown topic, bad value".into(),
        set(TOPIC, "nope", "retention.ms", "x"),
    );
    add(
        "default topic resource".into(),
        set(TOPIC, "", "retention.ms", "1"),
    );
    add(
        "resource named twice".into(),
        Change::Incremental {
            resources: vec![
                (
                    TOPIC,
                    "t1".into(),
                    vec![(SET, "retention.ms".into(), Some("1".into()))],
                ),
                (
                    TOPIC,
                    "t1".into(),
                    vec![(SET, "retention.ms".into(), Some("2".into()))],
                ),
            ],
            validate_only: false,
        },
    );
    // Broker refusals: per broker ("1") and the cluster default ("").
    for (name, k, v) in [
        (BROKER_ID, "log.retention.ms", "abc"),
        ("", "log.cleaner.threads", "-1"),
        (BROKER_ID, "message.max.bytes", "x"),
        ("", "message.max.bytes", "x"),
        (BROKER_ID, "broker.id", "5"),
        ("", "log.dirs", "/tmp/x"),
        (BROKER_ID, "num.io.threads", "100"),
        (BROKER_ID, "num.io.threads", "0"),
        (
            "",
            "listener.name.plaintext.ssl.keystore.location",
            "/tmp/ks",
        ),
        (BROKER_ID, "ssl.keystore.location", "/tmp/ks"),
        ("", "log.cleaner.threads", "10"),
        (BROKER_ID, "background.threads", "abc"),
        (BROKER_ID, "log.message.timestamp.type", "Bogus"),
        ("", "compression.type", "brotli"),
        ("", "log.cleaner.min.cleanable.ratio", "2"),
        (BROKER_ID, "max.connections", "-1"),
        ("2", "log.retention.ms", "1000"),
        ("abc", "log.retention.ms", "1000"),
    ] {
        add(format!("broker {name:?} {k}={v}"), set(BROKER, name, k, v));
    }
    add(
        "broker SET without a value".into(),
        incremental(BROKER, BROKER_ID, &[(SET, "log.retention.ms", None)]),
    );
    add(
        "broker APPEND to a LONG".into(),
        incremental(
            BROKER,
            BROKER_ID,
            &[(APPEND, "log.retention.ms", Some("5"))],
        ),
    );
    add(
        "broker legacy bad value".into(),
        legacy(BROKER, BROKER_ID, &[("log.retention.bytes", "x")]),
    );
    add(
        "broker legacy read-only key".into(),
        legacy(BROKER, "", &[("zookeeper.connect", "x")]),
    );
    add(
        "broker validate_only bad value".into(),
        validate_only(set(BROKER, BROKER_ID, "log.retention.ms", "abc")),
    );
    add(
        "unknown resource type".into(),
        set(99, "x", "retention.ms", "1"),
    );
    // Accepted changes.
    add(
        "create good-1".into(),
        create(
            "good-1",
            &[
                ("retention.ms", "1000"),
                ("cleanup.policy", "compact"),
                ("compression.type", "zstd"),
                ("segment.bytes", "1048576"),
                ("min.cleanable.dirty.ratio", "0.3"),
            ],
            false,
        ),
    );
    add(
        "create good-2".into(),
        create(
            "good-2",
            &[
                ("unclean.leader.election.enable", "TRUE"),
                ("message.timestamp.type", "LogAppendTime"),
                ("max.message.bytes", " 2000000 "),
                ("cleanup.policy", "delete , compact"),
            ],
            false,
        ),
    );
    add(
        "create good-vo validate_only".into(),
        validate_only(create("good-vo", &[("retention.ms", "-1")], false)),
    );
    add(
        "SET retention.ms=-1".into(),
        set(TOPIC, "t1", "retention.ms", "-1"),
    );
    add(
        "APPEND compact to the default policy".into(),
        incremental(TOPIC, "t1", &[(APPEND, "cleanup.policy", Some("compact"))]),
    );
    add(
        "SUBTRACT delete".into(),
        incremental(TOPIC, "t1", &[(SUBTRACT, "cleanup.policy", Some("delete"))]),
    );
    add(
        "DELETE retention.ms".into(),
        incremental(TOPIC, "t1", &[(DELETE, "retention.ms", None)]),
    );
    add(
        "SET segment.ms".into(),
        set(TOPIC, "t1", "segment.ms", "100000"),
    );
    add(
        "SET validate_only".into(),
        validate_only(set(TOPIC, "t1", "segment.ms", "200000")),
    );
    add(
        "legacy replaces the set".into(),
        legacy(
            TOPIC,
            "t1",
            &[("retention.ms", "5000"), ("cleanup.policy", "delete")],
        ),
    );
    add(
        "legacy validate_only".into(),
        Change::Legacy {
            resources: vec![(TOPIC, "t1".into(), owned(&[("retention.ms", "6000")]))],
            validate_only: true,
        },
    );
    add(
        "compaction lags in order".into(),
        incremental(
            TOPIC,
            "good-1",
            &[
                (SET, "min.compaction.lag.ms", Some("10")),
                (SET, "max.compaction.lag.ms", Some("20")),
            ],
        ),
    );
    add(
        "broker per-broker value".into(),
        set(BROKER, BROKER_ID, "log.retention.ms", "3600000"),
    );
    add(
        "broker default threads".into(),
        set(BROKER, "", "log.cleaner.threads", "2"),
    );
    add(
        "broker default value".into(),
        set(BROKER, "", "message.max.bytes", "2000000"),
    );
    add(
        "broker thread pool doubled".into(),
        set(BROKER, BROKER_ID, "num.io.threads", "16"),
    );
    add(
        "broker DELETE".into(),
        incremental(BROKER, BROKER_ID, &[(DELETE, "message.max.bytes", None)]),
    );
    add(
        "broker double".into(),
        set(BROKER, "", "log.cleaner.io.max.bytes.per.second", "1e6"),
    );
    add(
        "broker custom key".into(),
        set(BROKER, BROKER_ID, "no.such.config", "1"),
    );
    add(
        "broker legacy".into(),
        legacy(
            BROKER,
            BROKER_ID,
            &[("log.retention.ms", "7200000"), ("num.io.threads", "16")],
        ),
    );
    add(
        "broker validate_only".into(),
        validate_only(set(BROKER, "", "log.retention.ms", "1000")),
    );
    out
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// `(code, message)` of each resource (or topic) of the change's response, in order.
type Outcome = Vec<(i16, Option<String>)>;

async fn send(client: &Client, change: &Change) -> Outcome {
    let response = match change {
        Change::Create {
            topic,
            configs,
            validate_only,
        } => {
            let topic = CreatableTopic::default()
                .with_name(TopicName(s(topic)))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(s(k))
                                .with_value(v.as_deref().map(s))
                        })
                        .collect(),
                );
            let request = CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_validate_only(*validate_only)
                .with_topics(vec![topic]);
            client.send(request, 7).await
        }
        Change::Incremental {
            resources,
            validate_only,
        } => {
            let request = IncrementalAlterConfigsRequest::default()
                .with_validate_only(*validate_only)
                .with_resources(
                    resources
                        .iter()
                        .map(|(t, n, ops)| {
                            AlterConfigsResource::default()
                                .with_resource_type(*t)
                                .with_resource_name(s(n))
                                .with_configs(
                                    ops.iter()
                                        .map(|(op, k, v)| {
                                            AlterableConfig::default()
                                                .with_name(s(k))
                                                .with_config_operation(*op)
                                                .with_value(v.as_deref().map(s))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            client.send(request, 1).await
        }
        Change::Legacy {
            resources,
            validate_only,
        } => {
            let request = AlterConfigsRequest::default()
                .with_validate_only(*validate_only)
                .with_resources(
                    resources
                        .iter()
                        .map(|(t, n, configs)| {
                            LegacyResource::default()
                                .with_resource_type(*t)
                                .with_resource_name(s(n))
                                .with_configs(
                                    configs
                                        .iter()
                                        .map(|(k, v)| {
                                            LegacyConfig::default()
                                                .with_name(s(k))
                                                .with_value(v.as_deref().map(s))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            client.send(request, 2).await
        }
    };
    let text = |m: &Option<StrBytes>| m.as_ref().map(|m| m.to_string());
    match response.expect("request answered") {
        ResponseKind::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| (t.error_code, text(&t.error_message)))
            .collect(),
        ResponseKind::IncrementalAlterConfigs(r) => r
            .responses
            .iter()
            .map(|x| (x.error_code, text(&x.error_message)))
            .collect(),
        ResponseKind::AlterConfigs(r) => r
            .responses
            .iter()
            .map(|x| (x.error_code, text(&x.error_message)))
            .collect(),
        other => panic!("unexpected response {other:?}"),
    }
}

/// A cluster under test: where clients and the controllers are, and what keeps it alive.
struct Cluster {
    kind: &'static str,
    bootstrap: String,
    controllers: String,
    _kafka: Vec<KafkaNode>,
    _krust: Vec<KrustProcess>,
    _dirs: Vec<tempfile::TempDir>,
}

fn kafka_builder(dist: &KafkaDist, role: KafkaRole) -> krust_testkit::KafkaNodeBuilder {
    let mut b = KafkaNode::builder(dist)
        .node_id(1)
        .role(role)
        .start_timeout(WAIT);
    for (k, v) in STATIC {
        b = b.prop(*k, *v);
    }
    b
}

fn start_oracle(dist: &KafkaDist) -> Cluster {
    let ports = free_ports(2).expect("ports");
    let node = kafka_builder(dist, KafkaRole::Combined)
        .cluster_id(random_kafka_uuid())
        .broker_port(ports[0])
        .controller_port(ports[1])
        .quorum_voters(format!("1@127.0.0.1:{}", ports[1]))
        .start()
        .expect("Kafka 3.9 node");
    Cluster {
        kind: "kafka",
        bootstrap: format!("127.0.0.1:{}", ports[0]),
        controllers: format!("127.0.0.1:{}", ports[1]),
        _kafka: vec![node],
        _krust: Vec::new(),
        _dirs: Vec::new(),
    }
}

fn start_krust_dev() -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports(1).expect("port")[0];
    let data_dir = dir.path().join("data");
    let mut args: Vec<String> = vec![
        "dev".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--port".into(),
        port.to_string(),
    ];
    // `krust dev` writes the one-broker settings itself; the same static values as the other
    // clusters (so DescribeConfigs sources agree) come in as `--override`s.
    for (k, v) in STATIC {
        args.push("--override".into());
        args.push(format!("{k}={v}"));
    }
    let mut process = KrustProcess::builder(support::KRUST)
        .name("krust-dev")
        .args(&args)
        .env("RUST_LOG", "info,krust_net=warn")
        .dir(dir.path().to_path_buf())
        .start()
        .expect("start krust dev");
    process
        .wait_for_line("krust dev ready", KRUST_DEV_READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("krust dev: {e}\n{}", process.log_tail(40)));
    let props = std::fs::read_to_string(data_dir.join("server.properties")).expect("dev config");
    let voters = props
        .lines()
        .find_map(|l| l.strip_prefix("controller.quorum.voters="))
        .expect("voters");
    let controller = voters.split_once('@').expect("id@host:port").1.to_owned();
    Cluster {
        kind: "krust dev",
        bootstrap: format!("127.0.0.1:{port}"),
        controllers: controller,
        _kafka: Vec::new(),
        _krust: vec![process],
        _dirs: vec![dir],
    }
}

fn start_krust_quorum_with_kafka_broker(dist: &KafkaDist) -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_id = random_kafka_uuid();
    let ids = [11, 12, 13];
    let ports = free_ports(3).expect("ports");
    let voters = ids
        .iter()
        .zip(&ports)
        .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let extra: String = STATIC.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let mut nodes: Vec<support::Node> = ids
        .iter()
        .zip(&ports)
        .map(|(&id, &port)| {
            let text = support::controller_properties(dir.path(), id, port, &voters, &extra);
            support::write_node(dir.path(), id, &text, &cluster_id)
        })
        .collect();
    for node in &mut nodes {
        node.process = Some(support::spawn_server(&node.dir, node.id));
    }
    let mut processes = Vec::new();
    for node in &mut nodes {
        let p = node.process.as_mut().expect("spawned");
        p.wait_for_line(support::STARTED_LINE, WAIT)
            .unwrap_or_else(|e| panic!("controller {}: {e}\n{}", node.id, p.log_tail(40)));
        processes.push(node.process.take().expect("spawned"));
    }
    let port = free_ports(1).expect("port")[0];
    let broker = kafka_builder(dist, KafkaRole::Broker)
        .cluster_id(cluster_id)
        .broker_port(port)
        .quorum_voters(voters)
        .start()
        .unwrap_or_else(|e| panic!("Kafka broker on krust controllers: {e}"));
    Cluster {
        kind: "krust controllers + Kafka broker",
        bootstrap: format!("127.0.0.1:{port}"),
        controllers: ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(","),
        _kafka: vec![broker],
        _krust: processes,
        _dirs: vec![dir],
    }
}

/// The committed end of the metadata log, as the active controller reports it.
fn high_watermark(cluster: &Cluster) -> i64 {
    let deadline = Instant::now() + WAIT;
    loop {
        match describe(
            &Bootstrap::Controller(cluster.controllers.clone()),
            Duration::from_secs(10),
        ) {
            Ok((_, q)) if q.leader_id >= 0 => return q.high_watermark,
            other => assert!(
                Instant::now() < deadline,
                "{}: DescribeQuorum: {other:?}",
                cluster.kind
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Topics, the cluster default and the broker's keys every change touched, flattened to
/// `resource key: value source`.
async fn describe_after(client: &Client) -> BTreeMap<String, String> {
    let mut broker_keys: Vec<String> = Vec::new();
    for (_, change) in changes() {
        if let Change::Incremental { resources, .. } = &change {
            for (t, _, ops) in resources {
                if *t == BROKER {
                    broker_keys.extend(ops.iter().map(|(_, k, _)| k.clone()));
                }
            }
        }
        if let Change::Legacy { resources, .. } = &change {
            for (t, _, configs) in resources {
                if *t == BROKER {
                    broker_keys.extend(configs.iter().map(|(k, _)| k.clone()));
                }
            }
        }
    }
    broker_keys.sort();
    broker_keys.dedup();
    let resource = |t: i8, n: &str, keys: Option<Vec<StrBytes>>| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configuration_keys(keys)
    };
    let request = DescribeConfigsRequest::default().with_resources(vec![
        resource(TOPIC, "t1", None),
        resource(TOPIC, "good-1", None),
        resource(TOPIC, "good-2", None),
        resource(BROKER, "", None),
        resource(
            BROKER,
            BROKER_ID,
            Some(broker_keys.iter().map(|k| s(k)).collect()),
        ),
    ]);
    let Ok(ResponseKind::DescribeConfigs(r)) = client.send(request, 4).await else {
        panic!("DescribeConfigs");
    };
    let mut out = BTreeMap::new();
    for res in &r.results {
        let rname = format!("{}:{:?}", res.resource_type, res.resource_name.as_str());
        out.insert(
            format!("{rname} error"),
            format!("{} {:?}", res.error_code, res.error_message.as_deref()),
        );
        for c in &res.configs {
            // Paths differ between clusters.
            let value = if c.name.as_str() == "log.dirs" {
                Some("<masked>")
            } else {
                c.value.as_deref()
            };
            out.insert(
                format!("{rname} {}", c.name.as_str()),
                format!(
                    "{:?} source={} read_only={} sensitive={}",
                    value, c.config_source, c.read_only, c.is_sensitive
                ),
            );
        }
    }
    out
}

/// Each change's outcome, and the labels of refused or validate-only changes that moved the
/// metadata log.
struct Run {
    outcomes: Vec<(String, Outcome)>,
    wrote_when_it_should_not: Vec<String>,
    described: BTreeMap<String, String>,
}

fn run(cluster: &Cluster) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = Client::new(
        cluster.bootstrap.clone(),
        ClientConfig {
            client_id: "configs-vs-kafka".to_owned(),
            request_timeout: REQUEST_TIMEOUT,
            ..ClientConfig::default()
        },
    );
    let mut outcomes = Vec::new();
    let mut wrote = Vec::new();
    for (label, change) in changes() {
        let before = high_watermark(cluster);
        let outcome = runtime.block_on(async {
            tokio::time::timeout(REQUEST_TIMEOUT * 2, send(&client, &change))
                .await
                .unwrap_or_else(|_| panic!("{}: {label}: no answer", cluster.kind))
        });
        let refused = outcome.iter().all(|(code, _)| *code != 0);
        if refused || change.validate_only() {
            let after = high_watermark(cluster);
            if after != before {
                wrote.push(format!("{label}: high watermark {before} -> {after}"));
            }
        }
        outcomes.push((label, outcome));
    }
    // Changes reach the broker through the metadata log: wait until it describes what the
    // last accepted change set.
    let described = runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let d = describe_after(&client).await;
            // The last accepted broker change ("broker legacy") replaced broker 1's set.
            let key = format!("{BROKER}:{BROKER_ID:?} log.retention.ms");
            if d.get(&key)
                .is_some_and(|v| v.starts_with("Some(\"7200000\")"))
                || tokio::time::Instant::now() > deadline
            {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Run {
        outcomes,
        wrote_when_it_should_not: wrote,
        described,
    }
}

#[test]
fn config_changes_are_validated_as_kafka_does() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One cluster at a time: the machine has two cores.
    let oracle = {
        let cluster = start_oracle(&dist);
        run(&cluster)
    };
    let refused = oracle
        .outcomes
        .iter()
        .filter(|(_, o)| o.iter().all(|(c, _)| *c != 0))
        .count();
    let accepted = oracle
        .outcomes
        .iter()
        .filter(|(_, o)| o.iter().all(|(c, _)| *c == 0))
        .count();
    eprintln!(
        "Kafka 3.9 refused {refused} and accepted {accepted} of {} changes",
        oracle.outcomes.len()
    );
    assert!(
        refused >= 60 && accepted >= 20,
        "{refused} refused, {accepted} accepted"
    );
    assert!(
        oracle.wrote_when_it_should_not.is_empty(),
        "the oracle itself wrote for refused changes (is metadata.max.idle.interval.ms=0 honoured?): {:?}",
        oracle.wrote_when_it_should_not
    );
    let mut failures = Vec::new();
    let targets: [(&str, Start); 2] = [
        ("krust dev", |_| start_krust_dev()),
        (
            "krust controllers + Kafka broker",
            start_krust_quorum_with_kafka_broker,
        ),
    ];
    for (kind, start) in targets {
        let got = {
            let cluster = start(&dist);
            run(&cluster)
        };
        for ((label, want), (_, have)) in oracle.outcomes.iter().zip(&got.outcomes) {
            if want != have {
                failures.push(format!("[{kind}] {label}: kafka {want:?} | krust {have:?}"));
            }
        }
        for w in &got.wrote_when_it_should_not {
            failures.push(format!("[{kind}] wrote: {w}"));
        }
        for (k, v) in &oracle.described {
            match got.described.get(k) {
                Some(g) if g == v => {}
                g => failures.push(format!("[{kind}] describe {k}: kafka {v} | krust {g:?}")),
            }
        }
        for k in got.described.keys() {
            if !oracle.described.contains_key(k) {
                failures.push(format!("[{kind}] describe {k}: only krust has it"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences from Kafka 3.9:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
