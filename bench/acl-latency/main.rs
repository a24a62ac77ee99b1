//! `acl-latency`: what authorization costs on the produce and fetch paths. The issue: "Authorization
//! decisions must not show up in produce/fetch latency (lookups O(log n) in the number of ACLs;
//! measure with 100,000 ACLs)".
//!
//! For each system — krust (`krust server`, one combined node) and Apache Kafka 3.9 (one
//! combined node, its JVM started with `kafka-server-start.sh`'s settings) — two nodes from the
//! same `server.properties`, written by Kafka's harness: `noauth` without an authorizer, and
//! `acls` with `authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`,
//! `super.users=User:ANONYMOUS`, `allow.everyone.if.no.acl.found=false` and `--acls` (100,000)
//! ACLs. Each node has three listeners: `PLAINTEXT` (inter-broker, and the bench's setup
//! connection: unauthenticated, so `User:ANONYMOUS`, a super user), `CONTROLLER`, and
//! `SASL_PLAINTEXT` with PLAIN user `alice`, the measured client. `alice` is not a super user, so
//! every Produce and Fetch she sends goes through the ACL lookup (WRITE / READ on the topic);
//! the bench checks that by producing as `alice` to a topic she has no ACL for
//! (TOPIC_AUTHORIZATION_FAILED on `acls`, UNKNOWN_TOPIC_OR_PARTITION on `noauth`).
//!
//! The ACLs (see [`plan_acls`]) are created as `User:ANONYMOUS` through the broker with
//! CreateAcls v3 in batches of `--acl-batch` (the controller caps one operation at 10,000
//! records), and the bench waits until DescribeAcls (served by the broker from its metadata
//! image) lists every one of them before measuring. They spread over 20,000 topic names (LITERAL
//! and PREFIXED, some DENY, some host-specific), groups, transactional ids and `User:*` ACLs,
//! with PREFIXED ACLs on each prefix of the measured topic's name (lengths 1–12), so a lookup
//! has to visit every prefix length.
//!
//! The load is closed-loop, as `produce-roll`'s: one connection, one request in flight, Produce
//! v9 (acks=1) of one uncompressed batch of `--records-per-request` × `--record-bytes` to
//! partition 0 of a 1-partition topic, then Fetch v12 (max wait 0) of the last batch produced.
//! Each round measures `--requests` of each after `--warmup` unmeasured ones, on one node of
//! the system and then on the other; `--rounds` (4) rounds alternate which goes first
//! (noauth/acls, acls/noauth, …). One system after the other: krust's two nodes, then Kafka's.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/acl-latency [--acls 100000 --requests 3000 --warmup 500 --rounds 4] [--skip-kafka | --skip-krust]
//! ```
//! Goal: krust's produce p99 with 100,000 ACLs ≤ 1.1 × its p99 without an authorizer; Kafka's
//! ratio is printed beside it. Every wait is bounded, only 127.0.0.1 is used, every process is
//! SIGKILLed when the benchmark ends (also on error) and its data removed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use clap::Parser;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateTopicsRequest, DescribeAclsRequest, FetchRequest, ProduceRequest,
    ResponseKind, SaslAuthenticateRequest, SaslHandshakeRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_bench::kafka_jvm::{KAFKA_SERVER_HEAP_OPTS, server_jvm_flags, start_kafka_server};
use krust_bench::{cores, cpu_model, default_krust_binary, load_average, ms, percentile};
use krust_log::RecordBatchBuilder;
use krust_net::{ClientConfig, Connection};
use krust_testkit::{
    KAFKA_STARTED_LINE, KafkaDist, KafkaNode, KafkaRole, KrustProcess, ManagedProcess, free_ports,
    run_binary,
};

/// Produce v9 (flexible, what Kafka 3.x clients send).
const PRODUCE_VERSION: i16 = 9;
/// Fetch v12: the newest that names topics (v13+ use topic ids).
const FETCH_VERSION: i16 = 12;
/// The ACL APIs at v3 (flexible; what Kafka 3.9's admin client sends).
const ACL_VERSION: i16 = 3;
/// The controller's cap on the records of one operation (`MAX_RECORDS_PER_USER_OP`).
const MAX_ACLS_PER_REQUEST: usize = 10_000;
/// How long a node may take to start.
const START_WAIT: Duration = Duration::from_secs(120);
/// The measured principal (PLAIN over `SASL_PLAINTEXT`).
const USER: &str = "alice";
const PASSWORD: &str = "alice-secret";
/// PLAIN users of the `SASL_PLAINTEXT` listener (Kafka's JAAS syntax; krust reads the same key).
const JAAS_PLAIN: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;
/// A topic `alice` has no ACL for (never created): the authorizer check.
const UNLISTED_TOPIC: &str = "no-acl-topic";

// Kafka's wire codes (security facts C.1).
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const TRANSACTIONAL_ID: i8 = 5;
const ANY: i8 = 1;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const DESCRIBE_CONFIGS: i8 = 10;
const ALTER_CONFIGS: i8 = 11;
const TOPIC_OPERATIONS: [i8; 5] = [WRITE, READ, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS];
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// Produce and fetch latency without an authorizer vs with 100,000 ACLs, krust and Kafka 3.9.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// ACLs on the `acls` node, in all (2 of them are the measured principal's).
    #[arg(long, default_value_t = 100_000)]
    acls: usize,
    /// ACLs per CreateAcls request (at most 10,000, the controller's cap).
    #[arg(long, default_value_t = 5_000)]
    acl_batch: usize,
    /// Records per Produce request (one batch).
    #[arg(long, default_value_t = 1)]
    records_per_request: usize,
    /// Value bytes per record.
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// Measured Produce requests (and as many Fetch requests) per node per round.
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// Unmeasured requests of each kind before each round's measurement.
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Rounds; each measures both nodes, alternating which goes first.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Produce only (no Fetch measurement).
    #[arg(long)]
    no_fetch: bool,
    /// Seconds to wait until DescribeAcls lists every ACL.
    #[arg(long, default_value_t = 300)]
    acl_wait_secs: u64,
    /// Only measure krust.
    #[arg(long, conflicts_with = "skip_krust")]
    skip_kafka: bool,
    /// Only measure Kafka.
    #[arg(long)]
    skip_krust: bool,
    /// Parent of the temporary data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Krust,
    Kafka,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Krust => "krust",
            System::Kafka => "kafka",
        }
    }
}

/// One ACL binding, as CreateAcls carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Acl {
    resource_type: i8,
    name: String,
    pattern: i8,
    principal: String,
    host: String,
    operation: i8,
    permission: i8,
}

/// The ACLs of the `acls` node and the topic measured.
struct AclPlan {
    acls: Vec<Acl>,
    topic: String,
    description: String,
    /// ACLs whose pattern covers the measured topic (what every check has to look at).
    applicable: usize,
}

fn topic_of(k: usize) -> String {
    format!("topic-{k:06}")
}

/// `total` distinct ACLs: ~60% LITERAL topic ACLs over `total / 5` names `topic-NNNNNN` (~3 per
/// name, other users, 1 in 37 DENY, 1 in 10 for a specific host), ~20% PREFIXED topic ACLs
/// (two on each prefix of the measured topic's name, lengths 1–12; the rest on whole names and
/// on `topic-NNNNNN-`), 10% LITERAL group ACLs, 5% PREFIXED transactional-id ACLs, ~5% `User:*`
/// DESCRIBE on other topics, and the measured principal's two: ALLOW WRITE and READ on the
/// LITERAL measured topic, which is in the middle of the names.
fn plan_acls(total: usize) -> Result<AclPlan> {
    if total < 100 {
        bail!("--acls must be at least 100");
    }
    let generated = total - 2;
    let names = (total / 5).max(1);
    let measured = names / 2;
    let topic = topic_of(measured);
    let n_prefixed = generated / 5;
    let n_group = generated / 10;
    let n_txn = generated / 20;
    let n_star = generated / 20;
    let n_literal = generated - n_prefixed - n_group - n_txn - n_star;
    let mut acls = Vec::with_capacity(total);
    let acl =
        |resource_type, name: String, pattern, principal: String, operation, permission| Acl {
            resource_type,
            name,
            pattern,
            principal,
            host: "*".to_owned(),
            operation,
            permission,
        };
    for j in 0..n_literal {
        let k = j % names;
        let round = j / names;
        let mut a = acl(
            TOPIC,
            topic_of(k),
            LITERAL,
            format!("User:user-{}", round * 1000 + k % 1000),
            TOPIC_OPERATIONS[(j / 7) % TOPIC_OPERATIONS.len()],
            if j % 37 == 0 { DENY } else { ALLOW },
        );
        if j % 10 == 7 {
            a.host = format!("10.0.{}.{}", (j / 250) % 250, j % 250 + 1);
        }
        acls.push(a);
    }
    // Two on each prefix of the measured name (other users: they never apply to alice).
    let mut near = 0;
    for len in 1..=topic.len() {
        for (n, operation) in [WRITE, READ].into_iter().enumerate() {
            if near < n_prefixed {
                acls.push(acl(
                    TOPIC,
                    topic[..len].to_owned(),
                    PREFIXED,
                    format!("User:near-{len}-{n}"),
                    operation,
                    if len % 4 == 0 { DENY } else { ALLOW },
                ));
                near += 1;
            }
        }
    }
    for j in 0..n_prefixed - near {
        let k = j % names;
        let name = if j % 2 == 0 {
            topic_of(k)
        } else {
            format!("{}-", topic_of(k))
        };
        acls.push(acl(
            TOPIC,
            name,
            PREFIXED,
            format!("User:svc-{j}"),
            TOPIC_OPERATIONS[j % TOPIC_OPERATIONS.len()],
            ALLOW,
        ));
    }
    for j in 0..n_group {
        acls.push(acl(
            GROUP,
            format!("group-{j}"),
            LITERAL,
            format!("User:user-{}", j % 3000),
            READ,
            ALLOW,
        ));
    }
    for j in 0..n_txn {
        acls.push(acl(
            TRANSACTIONAL_ID,
            format!("txn-{j}-"),
            PREFIXED,
            format!("User:svc-{j}"),
            if j % 2 == 0 { WRITE } else { DESCRIBE },
            ALLOW,
        ));
    }
    for j in 0..n_star {
        acls.push(acl(
            TOPIC,
            format!("public-{j}"),
            LITERAL,
            "User:*".to_owned(),
            DESCRIBE,
            ALLOW,
        ));
    }
    for operation in [WRITE, READ] {
        acls.push(acl(
            TOPIC,
            topic.clone(),
            LITERAL,
            format!("User:{USER}"),
            operation,
            ALLOW,
        ));
    }
    let distinct: HashSet<&Acl> = acls.iter().collect();
    if distinct.len() != total || acls.len() != total {
        bail!(
            "ACL plan: {} ACLs, {} distinct, {total} wanted",
            acls.len(),
            distinct.len()
        );
    }
    let applicable = acls
        .iter()
        .filter(|a| {
            a.resource_type == TOPIC
                && match a.pattern {
                    LITERAL => a.name == topic || a.name == "*",
                    _ => topic.starts_with(&a.name),
                }
        })
        .count();
    let description = format!(
        "{total} ACLs: {n_literal} LITERAL topic ACLs over {names} names (~{} per name, 1/37 DENY, \
         1/10 host-specific), {n_prefixed} PREFIXED topic ACLs ({near} on the prefixes of the \
         measured topic's name, the rest on whole names and on `name-`), {n_group} LITERAL group, \
         {n_txn} PREFIXED transactional-id, {n_star} User:* topic DESCRIBE, 2 User:{USER} (ALLOW \
         WRITE and READ on LITERAL {topic})",
        n_literal.div_ceil(names),
    );
    Ok(AclPlan {
        acls,
        topic,
        description,
        applicable,
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.rounds == 0 || args.requests == 0 || args.records_per_request == 0 {
        bail!("--rounds, --requests and --records-per-request must be positive");
    }
    if args.acl_batch == 0 || args.acl_batch > MAX_ACLS_PER_REQUEST {
        bail!("--acl-batch must be 1..={MAX_ACLS_PER_REQUEST}");
    }
    let plan = plan_acls(args.acls)?;
    let dist = KafkaDist::locate().context("Kafka 3.9 jars (scripts/fetch-kafka.sh)")?;
    let binary = args.krust.clone().unwrap_or_else(default_krust_binary);
    if !args.skip_krust && !binary.is_file() {
        bail!(
            "{} does not exist (cargo build --release -p krust)",
            binary.display()
        );
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let data = tempfile::Builder::new()
        .prefix("acl-latency-")
        .tempdir_in(&parent)
        .context("temp dir")?;
    let batch = batch_bytes(args.records_per_request, args.record_bytes);

    println!(
        "acl-latency: produce/fetch latency without an authorizer vs StandardAuthorizer with ACLs, krust vs Apache Kafka 3.9.1"
    );
    println!(
        "machine: {} ({} cores), load {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: one combined node per configuration, 1 topic x 1 partition, client User:{USER} \
         (SASL_PLAINTEXT, PLAIN; not a super user), acks=1, 1 request in flight, {} records x {} B \
         per Produce ({} B batch), Fetch v12 of the last batch (max wait 0){}; {} warm-up + {} \
         measured requests of each kind per node per round, {} rounds alternating which node goes \
         first; CreateAcls v3 batches of {}",
        args.records_per_request,
        args.record_bytes,
        batch.len(),
        if args.no_fetch { " (off)" } else { "" },
        args.warmup,
        args.requests,
        args.rounds,
        args.acl_batch
    );
    println!(
        "authorizer node: authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer, \
         super.users=User:ANONYMOUS (the PLAINTEXT and CONTROLLER listeners), \
         allow.everyone.if.no.acl.found=false"
    );
    println!(
        "ACLs: {}; {} of them cover {} (LITERAL of that name, PREFIXED of a prefix of it): what a check looks at",
        plan.description, plan.applicable, plan.topic
    );
    println!(
        "Kafka server JVM: {}",
        server_jvm_flags(KAFKA_SERVER_HEAP_OPTS)
    );
    if !args.skip_krust {
        println!("krust binary: {}", binary.display());
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let mut systems = Vec::new();
    if !args.skip_krust {
        systems.push(System::Krust);
    }
    if !args.skip_kafka {
        systems.push(System::Kafka);
    }
    let mut results: Vec<(System, Result<SystemResult>)> = Vec::new();
    for system in systems {
        let dir = data.path().join(system.name());
        let result = measure_system(&runtime, &dist, system, &binary, &dir, &args, &plan, &batch);
        if let Err(e) = &result {
            println!("{}: failed: {e:#}", system.name());
        }
        results.push((system, result));
    }
    print_summary(&results, &args);
    Ok(())
}

/// A node of one configuration; its process is SIGKILLed on drop.
struct Node {
    label: String,
    /// `PLAINTEXT`: `User:ANONYMOUS`, a super user on the authorizer node.
    plain_port: u16,
    /// `SASL_PLAINTEXT`: the measured client.
    sasl_port: u16,
    pid: Option<u32>,
    // Field order: the processes are dropped (SIGKILLed) before the node.
    krust: Option<KrustProcess>,
    kafka: Option<ManagedProcess>,
    _node: KafkaNode,
}

/// Writes the node's `server.properties` (Kafka's harness, Kafka's default thread counts),
/// formats it and starts it, without waiting.
fn spawn_node(
    dist: &KafkaDist,
    system: System,
    binary: &Path,
    dir: &Path,
    authorizer: bool,
) -> Result<Node> {
    let label = format!(
        "{}-{}",
        system.name(),
        if authorizer { "acls" } else { "noauth" }
    );
    let ports = free_ports(3).context("ports")?;
    let (plain, controller, sasl) = (ports[0], ports[1], ports[2]);
    let mut builder = KafkaNode::builder(dist)
        .node_id(1)
        .role(KafkaRole::Combined)
        .broker_port(plain)
        .controller_port(controller)
        .quorum_voters(format!("1@127.0.0.1:{controller}"))
        .dir(dir.join(&label))
        .prop(
            "listeners",
            format!(
                "PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{controller},SASL_PLAINTEXT://127.0.0.1:{sasl}"
            ),
        )
        .prop(
            "advertised.listeners",
            format!("PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"),
        )
        .prop(
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        )
        .prop("sasl.enabled.mechanisms", "PLAIN")
        .prop("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS_PLAIN)
        // The harness shrinks the thread pools; Kafka's defaults.
        .prop("num.network.threads", "3")
        .prop("num.io.threads", "8");
    if authorizer {
        builder = builder
            .prop(
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            )
            .prop("super.users", "User:ANONYMOUS")
            .prop("allow.everyone.if.no.acl.found", "false");
    }
    match system {
        System::Kafka => {
            let node = builder.build().context("Kafka's StorageTool format")?;
            let process = start_kafka_server(
                dist,
                &label,
                &node.properties_path(),
                &node.dir().join("server.log"),
            )
            .context("starting a Kafka 3.9 node")?;
            Ok(Node {
                label,
                plain_port: plain,
                sasl_port: sasl,
                pid: process.pid(),
                krust: None,
                kafka: Some(process),
                _node: node,
            })
        }
        System::Krust => {
            let binary = std::fs::canonicalize(binary)
                .with_context(|| format!("resolving {}", binary.display()))?;
            let node = builder
                .build_unformatted()
                .context("writing server.properties")?;
            let properties = node.properties_path().display().to_string();
            let cluster_id = node.cluster_id().to_owned();
            run_binary(
                &binary,
                &["storage", "format", "-t", &cluster_id, "-c", &properties],
                None,
                START_WAIT,
            )?
            .ok()
            .context("krust storage format")?;
            let process = KrustProcess::builder(&binary)
                .args(["server", &properties])
                .env("RUST_LOG", "warn")
                .dir(node.dir().join("krust"))
                .name(label.clone())
                .start()
                .context("starting krust server")?;
            Ok(Node {
                label,
                plain_port: plain,
                sasl_port: sasl,
                pid: process.pid(),
                krust: Some(process),
                kafka: None,
                _node: node,
            })
        }
    }
}

impl Node {
    /// Waits until the node says `Kafka Server started` (registered and unfenced) and its
    /// client listeners accept connections.
    fn wait_ready(&mut self) -> Result<()> {
        let label = self.label.clone();
        if let Some(process) = &mut self.krust {
            process
                .wait_for_line(KAFKA_STARTED_LINE, START_WAIT)
                .with_context(|| format!("{label} started"))?;
            for port in [self.plain_port, self.sasl_port] {
                process
                    .wait_for_port(port, START_WAIT)
                    .with_context(|| format!("{label} listening on {port}"))?;
            }
        }
        if let Some(process) = &mut self.kafka {
            process
                .wait_for_log(KAFKA_STARTED_LINE, START_WAIT)
                .with_context(|| format!("{label} started"))?;
            for port in [self.plain_port, self.sasl_port] {
                process
                    .wait_for_port(port, START_WAIT)
                    .with_context(|| format!("{label} listening on {port}"))?;
            }
        }
        Ok(())
    }

    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
        let kib: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }
}

/// Latency samples of one configuration of one system, pooled over rounds.
#[derive(Default)]
struct Samples {
    produce: Vec<Duration>,
    fetch: Vec<Duration>,
    produce_p99s: Vec<Duration>,
    fetch_p99s: Vec<Duration>,
}

struct SystemResult {
    noauth: Samples,
    acls: Samples,
}

#[allow(clippy::too_many_arguments)]
fn measure_system(
    runtime: &tokio::runtime::Runtime,
    dist: &KafkaDist,
    system: System,
    binary: &Path,
    dir: &Path,
    args: &Args,
    plan: &AclPlan,
    batch: &Bytes,
) -> Result<SystemResult> {
    let name = system.name();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let started = Instant::now();
    let mut noauth = spawn_node(dist, system, binary, dir, false)?;
    let mut acls = spawn_node(dist, system, binary, dir, true)?;
    noauth.wait_ready()?;
    acls.wait_ready()?;
    println!(
        "[{name}] both nodes started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    runtime.block_on(async {
        let noauth_client = prepare(&noauth, &plan.topic, batch, None, args).await?;
        let acls_client = prepare(&acls, &plan.topic, batch, Some(plan), args).await?;
        let rss = |node: &Node| {
            node.rss_mib()
                .map_or_else(|| "?".to_owned(), |m| format!("{m:.0} MiB"))
        };
        println!(
            "[{name}] RSS after setup: noauth {}, acls {}",
            rss(&noauth),
            rss(&acls)
        );
        let mut result = SystemResult {
            noauth: Samples::default(),
            acls: Samples::default(),
        };
        for round in 0..args.rounds {
            let order: [(&str, &Connection, bool); 2] = if round % 2 == 0 {
                [("noauth", &noauth_client, false), ("acls", &acls_client, true)]
            } else {
                [("acls", &acls_client, true), ("noauth", &noauth_client, false)]
            };
            for (config, client, is_acls) in order {
                let (mut produce, mut fetch) =
                    measure_round(client, &plan.topic, batch, args)
                        .await
                        .with_context(|| format!("{name} {config} round {round}"))?;
                produce.sort_unstable();
                fetch.sort_unstable();
                let fetch_text = if fetch.is_empty() {
                    String::new()
                } else {
                    format!(
                        "  fetch p50 {:>6.3} p99 {:>7.3} ms",
                        ms(percentile(&fetch, 0.5)),
                        ms(percentile(&fetch, 0.99))
                    )
                };
                println!(
                    "  [{name}] round {round} {config:<6} produce p50 {:>6.3} p99 {:>7.3} max {:>8.3} ms{fetch_text}  (load {})",
                    ms(percentile(&produce, 0.5)),
                    ms(percentile(&produce, 0.99)),
                    ms(produce.last().copied().unwrap_or_default()),
                    load_average()
                );
                let samples = if is_acls {
                    &mut result.acls
                } else {
                    &mut result.noauth
                };
                samples.produce_p99s.push(percentile(&produce, 0.99));
                samples.produce.extend(produce);
                if !fetch.is_empty() {
                    samples.fetch_p99s.push(percentile(&fetch, 0.99));
                    samples.fetch.extend(fetch);
                }
            }
        }
        result.noauth.produce.sort_unstable();
        result.noauth.fetch.sort_unstable();
        result.acls.produce.sort_unstable();
        result.acls.fetch.sort_unstable();
        Ok(result)
    })
}

fn client_config(id: &str) -> ClientConfig {
    ClientConfig {
        client_id: id.to_owned(),
        request_timeout: Duration::from_secs(60),
        max_in_flight_requests_per_connection: 1,
        ..ClientConfig::default()
    }
}

/// Creates the topic (and, with `plan`, the ACLs, waiting until DescribeAcls lists them),
/// checks the authorizer is (or is not) in the path, and returns `alice`'s connection.
async fn prepare(
    node: &Node,
    topic: &str,
    batch: &Bytes,
    plan: Option<&AclPlan>,
    args: &Args,
) -> Result<Connection> {
    let label = &node.label;
    let admin = Connection::connect(
        &format!("127.0.0.1:{}", node.plain_port),
        client_config("acl-latency-admin"),
    )
    .await
    .with_context(|| format!("{label}: connecting to PLAINTEXT"))?;
    create_topic(&admin, topic)
        .await
        .with_context(|| format!("{label}: creating {topic}"))?;
    if let Some(plan) = plan {
        let started = Instant::now();
        for (i, chunk) in plan.acls.chunks(args.acl_batch).enumerate() {
            create_acls(&admin, chunk)
                .await
                .with_context(|| format!("{label}: CreateAcls batch {i}"))?;
        }
        let created = started.elapsed();
        let deadline = Instant::now() + Duration::from_secs(args.acl_wait_secs);
        let mut listed = 0;
        while listed != plan.acls.len() {
            if Instant::now() > deadline {
                bail!(
                    "{label}: DescribeAcls lists {listed} of {} ACLs after {} s",
                    plan.acls.len(),
                    args.acl_wait_secs
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            listed = count_acls(&admin)
                .await
                .with_context(|| format!("{label}: DescribeAcls"))?;
        }
        println!(
            "[{label}] {} ACLs created in {} CreateAcls requests in {:.1} s; DescribeAcls listed them all {:.1} s later",
            plan.acls.len(),
            plan.acls.len().div_ceil(args.acl_batch),
            created.as_secs_f64(),
            (started.elapsed() - created).as_secs_f64()
        );
    }
    admin.close();
    let client = login(node.sasl_port)
        .await
        .with_context(|| format!("{label}: SASL/PLAIN login as {USER}"))?;
    // The authorizer is in the path iff a topic without ACLs is refused before existence.
    let (code, _) = produce_once(&client, UNLISTED_TOPIC, batch).await?;
    let expected_refusal = plan.is_some();
    if (code == TOPIC_AUTHORIZATION_FAILED) != expected_refusal {
        bail!("{label}: Produce as {USER} to {UNLISTED_TOPIC} answered error {code}");
    }
    println!(
        "[{label}] check: Produce as User:{USER} to {UNLISTED_TOPIC} (no ACL, no topic) -> error {code}{}",
        if expected_refusal {
            " (TOPIC_AUTHORIZATION_FAILED: the authorizer is in the path)"
        } else {
            " (no authorizer)"
        }
    );
    Ok(client)
}

/// A connection to the `SASL_PLAINTEXT` listener authenticated as `alice` (SaslHandshake v1,
/// then SaslAuthenticate v2 with the PLAIN token, as Kafka's clients do).
async fn login(port: u16) -> Result<Connection> {
    let conn = Connection::connect(&format!("127.0.0.1:{port}"), client_config("acl-latency"))
        .await
        .context("connect")?;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    match conn.send(handshake, 1).await.context("SaslHandshake")? {
        ResponseKind::SaslHandshake(r) if r.error_code == 0 => {}
        other => bail!("SaslHandshake answered {other:?}"),
    }
    let token = format!("\0{USER}\0{PASSWORD}");
    let authenticate = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
    match conn
        .send(authenticate, 2)
        .await
        .context("SaslAuthenticate")?
    {
        ResponseKind::SaslAuthenticate(r) if r.error_code == 0 => Ok(conn),
        other => bail!("SaslAuthenticate answered {other:?}"),
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

async fn create_topic(conn: &Connection, topic: &str) -> Result<()> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic_name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
    match conn.send(request, 7).await.context("CreateTopics")? {
        ResponseKind::CreateTopics(r) => {
            let code = r.topics.first().map_or(-1, |t| t.error_code);
            if code != 0 {
                bail!("CreateTopics error {code}: {r:?}");
            }
            Ok(())
        }
        other => bail!("CreateTopics answered {other:?}"),
    }
}

async fn create_acls(conn: &Connection, acls: &[Acl]) -> Result<()> {
    let creations = acls
        .iter()
        .map(|a| {
            AclCreation::default()
                .with_resource_type(a.resource_type)
                .with_resource_name(StrBytes::from_string(a.name.clone()))
                .with_resource_pattern_type(a.pattern)
                .with_principal(StrBytes::from_string(a.principal.clone()))
                .with_host(StrBytes::from_string(a.host.clone()))
                .with_operation(a.operation)
                .with_permission_type(a.permission)
        })
        .collect();
    let request = CreateAclsRequest::default().with_creations(creations);
    match conn.send(request, ACL_VERSION).await? {
        ResponseKind::CreateAcls(r) => {
            if r.results.len() != acls.len() {
                bail!("{} results for {} creations", r.results.len(), acls.len());
            }
            if let Some((i, bad)) = r
                .results
                .iter()
                .enumerate()
                .find(|(_, res)| res.error_code != 0)
            {
                bail!(
                    "creation {i} ({:?}): error {} {:?}",
                    acls[i],
                    bad.error_code,
                    bad.error_message
                );
            }
            Ok(())
        }
        other => bail!("CreateAcls answered {other:?}"),
    }
}

/// How many ACLs DescribeAcls (filter: everything) lists.
async fn count_acls(conn: &Connection) -> Result<usize> {
    let request = DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    match conn.send(request, ACL_VERSION).await? {
        ResponseKind::DescribeAcls(r) if r.error_code == 0 => {
            Ok(r.resources.iter().map(|res| res.acls.len()).sum())
        }
        other => bail!("DescribeAcls answered {other:?}"),
    }
}

/// `--warmup` unmeasured then `--requests` measured Produce round trips, then the same of Fetch
/// (of the last batch produced). A retriable error (the partition's leader not ready yet) is
/// retried during the warm-up only, for up to 60 s.
async fn measure_round(
    conn: &Connection,
    topic: &str,
    batch: &Bytes,
    args: &Args,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut warm = 0;
    let mut last_offset = 0;
    while warm < args.warmup.max(1) {
        match produce_once(conn, topic, batch).await? {
            (0, offset) => {
                warm += 1;
                last_offset = offset;
            }
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (code, _) => bail!("{topic}: produce error {code} during warm-up"),
        }
    }
    let mut produce = Vec::with_capacity(args.requests);
    for _ in 0..args.requests {
        let start = Instant::now();
        let (code, offset) = produce_once(conn, topic, batch).await?;
        let elapsed = start.elapsed();
        if code != 0 {
            bail!("{topic}: produce error {code}");
        }
        last_offset = offset;
        produce.push(elapsed);
    }
    let mut fetch = Vec::new();
    if args.no_fetch {
        return Ok((produce, fetch));
    }
    let max_bytes = i32::try_from(batch.len()).unwrap_or(i32::MAX);
    for i in 0..args.warmup + args.requests {
        let start = Instant::now();
        let answer = fetch_once(conn, topic, last_offset, max_bytes).await?;
        let elapsed = start.elapsed();
        if answer.error_code != 0 || answer.bytes == 0 {
            bail!(
                "{topic}: fetch at {last_offset}: error {}, {} bytes, high watermark {}, log start {}",
                answer.error_code,
                answer.bytes,
                answer.high_watermark,
                answer.log_start_offset
            );
        }
        if i >= args.warmup {
            fetch.push(elapsed);
        }
    }
    Ok((produce, fetch))
}

/// One acks=1 Produce v9 of `batch` to partition 0: (error code, base offset).
async fn produce_once(conn: &Connection, topic: &str, batch: &Bytes) -> Result<(i16, i64)> {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    match conn
        .send(request, PRODUCE_VERSION)
        .await
        .context("Produce")?
    {
        ResponseKind::Produce(r) => Ok(r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .map_or((-1, -1), |p| (p.error_code, p.base_offset))),
        other => bail!("Produce answered {other:?}"),
    }
}

/// A Fetch answer for partition 0.
struct FetchAnswer {
    error_code: i16,
    /// Record bytes returned.
    bytes: usize,
    high_watermark: i64,
    log_start_offset: i64,
}

/// One consumer Fetch v12 (sessionless, max wait 0) of partition 0 from `offset`.
async fn fetch_once(
    conn: &Connection,
    topic: &str,
    offset: i64,
    max_bytes: i32,
) -> Result<FetchAnswer> {
    let request = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(max_bytes),
                ]),
        ]);
    match conn.send(request, FETCH_VERSION).await.context("Fetch")? {
        ResponseKind::Fetch(r) => {
            let partition = r.responses.first().and_then(|t| t.partitions.first());
            Ok(FetchAnswer {
                error_code: if r.error_code != 0 {
                    r.error_code
                } else {
                    partition.map_or(-1, |p| p.error_code)
                },
                bytes: partition
                    .and_then(|p| p.records.as_ref())
                    .map_or(0, Bytes::len),
                high_watermark: partition.map_or(-1, |p| p.high_watermark),
                log_start_offset: partition.map_or(-1, |p| p.log_start_offset),
            })
        }
        other => bail!("Fetch answered {other:?}"),
    }
}

/// One uncompressed batch of `records` records with `record_bytes`-byte values (offsets are
/// assigned by the leader, so the same bytes serve every request). The timestamps are now's: a
/// batch older than `retention.ms` (7 days) would let the broker's retention check (30 s after
/// start, then every 5 minutes) delete the whole log, active segment included, in mid-run.
fn batch_bytes(records: usize, record_bytes: usize) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut builder = RecordBatchBuilder::new(0);
    for i in 0..records {
        builder.append_kv(
            now + i as i64,
            Some(Bytes::from(format!("key-{i}"))),
            Some(Bytes::from(vec![b'x'; record_bytes])),
        );
    }
    builder.build().as_bytes().clone()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    ms(a) / ms(b).max(f64::MIN_POSITIVE)
}

fn print_summary(results: &[(System, Result<SystemResult>)], args: &Args) {
    println!();
    println!(
        "| system | configuration | produce p50 ms | p99 ms | p99.9 ms | fetch p50 ms | p99 ms | p99.9 ms | produce p99 per round (ms) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (system, result) in results {
        let Ok(result) = result else { continue };
        for (config, s) in [
            ("no authorizer", &result.noauth),
            (&*format!("{} ACLs", args.acls), &result.acls),
        ] {
            let rounds: Vec<String> = s
                .produce_p99s
                .iter()
                .map(|d| format!("{:.3}", ms(*d)))
                .collect();
            let fetch = |p| {
                if s.fetch.is_empty() {
                    "-".to_owned()
                } else {
                    format!("{:.3}", ms(percentile(&s.fetch, p)))
                }
            };
            println!(
                "| {} | {config} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} |",
                system.name(),
                ms(percentile(&s.produce, 0.5)),
                ms(percentile(&s.produce, 0.99)),
                ms(percentile(&s.produce, 0.999)),
                fetch(0.5),
                fetch(0.99),
                fetch(0.999),
                rounds.join(", ")
            );
        }
    }
    println!();
    let mut overheads = Vec::new();
    for (system, result) in results {
        let Ok(result) = result else { continue };
        let (n, a) = (&result.noauth, &result.acls);
        let p99 = ratio(percentile(&a.produce, 0.99), percentile(&n.produce, 0.99));
        let p50 = ratio(percentile(&a.produce, 0.5), percentile(&n.produce, 0.5));
        let fetch = if n.fetch.is_empty() {
            String::new()
        } else {
            format!(
                "; fetch p50 {:.2}, p99 {:.2}",
                ratio(percentile(&a.fetch, 0.5), percentile(&n.fetch, 0.5)),
                ratio(percentile(&a.fetch, 0.99), percentile(&n.fetch, 0.99))
            )
        };
        let goal = if *system == System::Krust {
            " (goal <= 1.1)"
        } else {
            ""
        };
        println!(
            "{}: with {} ACLs / without an authorizer: produce p99 {p99:.2}{goal}, p50 {p50:.2}{fetch}",
            system.name(),
            args.acls
        );
        overheads.push((*system, p99));
    }
    if let (Some((_, krust)), Some((_, kafka))) = (
        overheads.iter().find(|(s, _)| *s == System::Krust),
        overheads.iter().find(|(s, _)| *s == System::Kafka),
    ) {
        println!(
            "produce p99 overhead of the authorizer: krust {krust:.2}x, kafka {kafka:.2}x (krust's / Kafka's = {:.2})",
            krust / kafka.max(f64::MIN_POSITIVE)
        );
    }
    println!("load average at the end: {}", load_average());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_the_asked_number_of_distinct_acls() {
        let plan = plan_acls(100_000).expect("plan");
        assert_eq!(plan.acls.len(), 100_000);
        assert_eq!(plan.topic, "topic-010000");
        // Two per prefix of the name, ~3 LITERAL, one PREFIXED on the whole name, alice's two.
        assert!(plan.applicable >= 24 + 3 + 2, "{}", plan.applicable);
        assert!(plan.applicable < 50, "{}", plan.applicable);
        let small = plan_acls(100).expect("small plan");
        assert_eq!(small.acls.len(), 100);
    }
}
