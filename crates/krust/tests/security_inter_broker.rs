//! A secured krust cluster (issue 12: inter-broker and controller security). Three combined
//! `krust server` nodes (broker + controller each) whose every listener is `SASL_SSL`:
//!
//! - `CONTROLLER` (the Raft RPCs, registrations, heartbeats, forwarded requests): PLAIN, the
//!   nodes authenticate as `controller` (`sasl.mechanism.controller.protocol=PLAIN`, the
//!   `username`/`password` of `listener.name.controller.plain.sasl.jaas.config`);
//! - `INTERNAL` (inter-broker and clients): SCRAM-SHA-512 with credentials from
//!   `krust storage format --add-scram`, the nodes authenticate as `broker`
//!   (`sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512`).
//!
//! Both ends of every connection check certificates against the test CA (PEM trust store,
//! host name verified). The StandardAuthorizer is on with `super.users=User:broker;
//! User:controller` and `allow.everyone.if.no.acl.found=false`, so replication (replica Fetch
//! needs CLUSTER_ACTION) and the controller APIs work only because the nodes' principals are
//! what Kafka computes (`User:<username>`).
//!
//! As `broker` the test creates a topic with replication factor 3 and ACLs for `alice`; kcat
//! (librdkafka) produces as alice over SASL_SSL/SCRAM-SHA-512 with `acks=all` — acknowledged
//! only once both followers fetched over the secured listener: the ISR is still whole
//! afterwards (followers that could not fetch would have been dropped from it after
//! `replica.lag.time.max.ms` before any acknowledgement) — and reads the records back;
//! alice is refused on a topic she has no ACL for, and on the controller listener (a PLAIN user
//! there) her Vote and DescribeQuorum get CLUSTER_AUTHORIZATION_FAILED as in Kafka's
//! `ControllerApis`. Then bad client-side settings: a fourth node
//! with a wrong controller password and a fifth whose trust store is another CA's never
//! register, log Kafka's authentication error / a TLS error, and keep running (no panic); a
//! sixth with a wrong inter-broker password registers but, as a follower, logs Kafka's SCRAM
//! failure and is dropped from the ISR.
//! Finally the partition leader is SIGKILLed: a survivor becomes leader, every acknowledged
//! record is still there, and more records are acknowledged by the two remaining replicas.
//!
//! The mixed cluster: the same three krust nodes and an Apache Kafka 3.9 broker
//! (`process.roles=broker`, formatted by Kafka's StorageTool with the cluster's id) with the same
//! keys, registered with the krust controllers over SASL_SSL/PLAIN. `on-kafka` (replicas 6, 2, 3)
//! is led by Kafka and followed by krust, `on-krust` (replicas 1, 6) led by krust and followed by
//! Kafka; kcat writes to both with `acks=all` as alice. The same requests as alice — Metadata of
//! topics with and without ACLs, ListOffsets of partitions neither broker leads (with and
//! without DESCRIBE), DescribeAcls without cluster DESCRIBE, CreateTopics without CREATE — get
//! the same error codes from the Kafka broker and a krust broker (and the codes expected of
//! Kafka), and kcat's Produce without WRITE is refused by both. Then krust node 1 is
//! SIGKILLed: Kafka leads `on-krust` with every record; then the Kafka broker: krust leads
//! `on-kafka` with every record.
//!
//! Mutual TLS: a combined node with `SSL` listeners requiring client certificates is its key
//! store certificate's subject mapped by `ssl.principal.mapping.rules`; as a super user it
//! registers and forwards, as anyone else its registration is refused.
//!
//! Real processes only, 127.0.0.1, every wait bounded, every process killed on drop, one
//! cluster at a time.

mod security_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DescribeQuorumRequest, ListOffsetsRequest, MetadataRequest,
    RequestKind, ResponseKind, VoteRequest, create_topics_request, describe_quorum_request,
    list_offsets_request, metadata_request,
};
use krust_net::security::sasl::{SaslCredentials, SaslMechanism, ScramMechanism};
use krust_net::security::tls::{certificates_from_pem, private_key_from_pem};
use krust_net::security::{ClientSecurity, TlsClient, TlsClientSettings, TlsProtocol};
use krust_net::{ClientConfig, Connection};
use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, Kcat, KrustProcess, TestPki, ToolOutput, free_ports,
    random_kafka_uuid,
};
use security_support::acl_client::{
    ALLOW, DESCRIBE, LITERAL, PREFIXED, READ, TOPIC, WRITE, assert_same_lines, create_acls,
    create_topics as acl_create_topics, describe_acls, err, joined, opt_name, tn,
};
use support::{KRUST, STARTED_LINE, spawn_server};

const START_TIMEOUT: Duration = Duration::from_secs(120);
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC_NAME: &str = "secure-orders";
const JAAS_PLAIN: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="controller-secret" user_controller="controller-secret" user_alice="alice-secret";"#;

/// The security keys every node has (krust and Kafka alike), as in the module doc;
/// `controller_password` is what the node authenticates to controllers with, `truststore`
/// what it trusts.
fn security_props(
    pki: &TestPki,
    controller_password: &str,
    truststore: &Path,
) -> Vec<(&'static str, String)> {
    // The node's own entry for the controller listener: server users and its client login.
    let controller_jaas = JAAS_PLAIN.replace(
        r#"password="controller-secret" user_"#,
        &format!(r#"password="{controller_password}" user_"#),
    );
    vec![
        ("controller.listener.names", "CONTROLLER".to_owned()),
        ("inter.broker.listener.name", "INTERNAL".to_owned()),
        (
            "listener.security.protocol.map",
            "INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL".to_owned(),
        ),
        ("ssl.keystore.type", "PEM".to_owned()),
        (
            "ssl.keystore.location",
            pki.server_keystore.display().to_string(),
        ),
        ("ssl.truststore.type", "PEM".to_owned()),
        ("ssl.truststore.location", truststore.display().to_string()),
        ("sasl.mechanism.controller.protocol", "PLAIN".to_owned()),
        (
            "sasl.mechanism.inter.broker.protocol",
            "SCRAM-SHA-512".to_owned(),
        ),
        (
            "listener.name.controller.sasl.enabled.mechanisms",
            "PLAIN".to_owned(),
        ),
        ("listener.name.controller.plain.sasl.jaas.config", controller_jaas),
        (
            "listener.name.internal.sasl.enabled.mechanisms",
            "SCRAM-SHA-512".to_owned(),
        ),
        (
            "listener.name.internal.scram-sha-512.sasl.jaas.config",
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";"#.to_owned(),
        ),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        ),
        ("super.users", "User:broker;User:controller".to_owned()),
        ("allow.everyone.if.no.acl.found", "false".to_owned()),
        ("broker.heartbeat.interval.ms", "500".to_owned()),
        ("broker.session.timeout.ms", "3000".to_owned()),
        ("replica.lag.time.max.ms", "10000".to_owned()),
        ("offsets.topic.replication.factor", "3".to_owned()),
        ("offsets.topic.num.partitions", "1".to_owned()),
    ]
}

/// `server.properties` of krust node `id`: combined roles unless `broker_only`, the listeners
/// `INTERNAL` (and `CONTROLLER`) on `ports`, and [`security_props`].
fn properties(
    id: i32,
    dir: &Path,
    ports: (u16, u16),
    voters: &str,
    security: &[(&'static str, String)],
    broker_only: bool,
) -> String {
    let (internal, controller) = ports;
    let (roles, listeners) = if broker_only {
        ("broker", format!("INTERNAL://127.0.0.1:{internal}"))
    } else {
        (
            "broker,controller",
            format!("INTERNAL://127.0.0.1:{internal},CONTROLLER://127.0.0.1:{controller}"),
        )
    };
    let mut text = format!(
        "process.roles={roles}\nnode.id={id}\ncontroller.quorum.voters={voters}\n\
         listeners={listeners}\nadvertised.listeners=INTERNAL://127.0.0.1:{internal}\n\
         log.dirs={logs}\nmetadata.log.dir={metadata}\n\
         controller.quorum.election.timeout.ms=1000\ncontroller.quorum.fetch.timeout.ms=2000\n",
        logs = dir.join("logs").display(),
        metadata = dir.join("metadata").display(),
    );
    for (key, value) in security {
        text.push_str(&format!("{key}={value}\n"));
    }
    text
}

/// Writes node `id`'s properties and formats it with the SCRAM users `broker` and `alice`.
fn write_node(root: &Path, id: i32, text: &str, cluster_id: &str) -> std::path::PathBuf {
    let dir = root.join(format!("node{id}"));
    std::fs::create_dir_all(&dir).expect("node dir");
    let props = dir.join("server.properties");
    std::fs::write(&props, text).expect("write properties");
    let props = props.display().to_string();
    krust_testkit::run_binary(
        KRUST,
        &[
            "storage",
            "format",
            "-t",
            cluster_id,
            "-c",
            &props,
            "--release-version",
            "3.9",
            "--add-scram",
            "SCRAM-SHA-512=[name=broker,password=broker-secret]",
            "--add-scram",
            "SCRAM-SHA-512=[name=alice,password=alice-secret]",
        ],
        None,
        TOOL_TIMEOUT,
    )
    .expect("run krust storage format")
    .ok()
    .expect("krust storage format");
    dir
}

/// The test's own Kafka-protocol client: SASL_SSL SCRAM-SHA-512 (as `broker`, a super user,
/// for setup; as `alice` for the authorization cases).
struct Admin {
    runtime: tokio::runtime::Runtime,
    security: ClientSecurity,
}

impl Admin {
    /// Authenticating as `user` (password `<user>-secret`) with SCRAM-SHA-512.
    fn new(pki: &TestPki, user: &str) -> Admin {
        Admin::sasl(pki, SaslMechanism::Scram(ScramMechanism::Sha512), user)
    }

    /// Authenticating as `user` (password `<user>-secret`) with `mechanism`.
    fn sasl(pki: &TestPki, mechanism: SaslMechanism, user: &str) -> Admin {
        let ca = std::fs::read(&pki.ca_cert).expect("CA");
        let tls = TlsClient::new(TlsClientSettings {
            trusted_certificates: certificates_from_pem(&ca, "ca").expect("CA PEM"),
            client_certificate: None,
            verify_hostname: true,
            enabled_protocols: vec![TlsProtocol::Tls12, TlsProtocol::Tls13],
        })
        .expect("client TLS");
        Admin {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            security: ClientSecurity {
                tls: Some(std::sync::Arc::new(tls)),
                sasl: Some(std::sync::Arc::new(SaslCredentials {
                    mechanism,
                    username: user.to_owned(),
                    password: format!("{user}-secret"),
                })),
            },
        }
    }

    /// Presenting `cert`/`key` over TLS (mutual TLS, no SASL).
    fn with_certificate(pki: &TestPki, cert: &Path, key: &Path) -> Admin {
        let ca = std::fs::read(&pki.ca_cert).expect("CA");
        let tls = TlsClient::new(TlsClientSettings {
            trusted_certificates: certificates_from_pem(&ca, "ca").expect("CA PEM"),
            client_certificate: Some((
                certificates_from_pem(&std::fs::read(cert).expect("cert"), "cert").expect("PEM"),
                private_key_from_pem(&std::fs::read(key).expect("key"), "key").expect("PEM"),
            )),
            verify_hostname: true,
            enabled_protocols: vec![TlsProtocol::Tls12, TlsProtocol::Tls13],
        })
        .expect("client TLS");
        Admin {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            security: ClientSecurity {
                tls: Some(std::sync::Arc::new(tls)),
                sasl: None,
            },
        }
    }

    /// One request on a fresh authenticated connection to `127.0.0.1:port`.
    fn call(&self, port: u16, version: i16, request: RequestKind) -> Result<ResponseKind, String> {
        let config = ClientConfig {
            client_id: "secure-admin".to_owned(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(20),
            security: self.security.clone(),
            ..ClientConfig::default()
        };
        self.runtime.block_on(async {
            let connection = Connection::connect(&format!("127.0.0.1:{port}"), config)
                .await
                .map_err(|e| e.to_string())?;
            connection
                .send(request, version)
                .await
                .map_err(|e| e.to_string())
        })
    }

    /// Metadata of `topic` from the node on `port`: (registered broker ids, leader, ISR).
    fn partition(&self, port: u16, topic: &str) -> Option<(Vec<i32>, i32, Vec<i32>)> {
        let request = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(tn(topic))),
        ]));
        let Ok(ResponseKind::Metadata(r)) = self.call(port, 12, RequestKind::Metadata(request))
        else {
            return None;
        };
        let mut brokers: Vec<i32> = r.brokers.iter().map(|b| b.node_id.0).collect();
        brokers.sort_unstable();
        let partition = r.topics.first()?.partitions.first()?;
        let isr = partition.isr_nodes.iter().map(|b| b.0).collect();
        Some((brokers, partition.leader_id.0, isr))
    }

    /// Waits until `check` holds for `topic`'s partition as the node on `port` sees it.
    fn wait_partition(
        &self,
        port: u16,
        topic: &str,
        why: &str,
        check: impl Fn(&(Vec<i32>, i32, Vec<i32>)) -> bool,
    ) -> (Vec<i32>, i32, Vec<i32>) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let mut last = None;
        loop {
            if let Some(state) = self.partition(port, topic) {
                if check(&state) {
                    return state;
                }
                last = Some(state);
            }
            assert!(
                Instant::now() < deadline,
                "{why}: last seen (brokers, leader, isr) = {last:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn kcat_auth(pki: &TestPki) -> Vec<String> {
    [
        "security.protocol=sasl_ssl",
        "sasl.mechanisms=SCRAM-SHA-512",
        "sasl.username=alice",
        "sasl.password=alice-secret",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([format!("ssl.ca.location={}", pki.ca_cert.display())])
    .flat_map(|x| ["-X".to_owned(), x])
    .collect()
}

fn kcat(tool: &Kcat, port: u16, auth: &[String], args: &[&str], stdin: Option<&str>) -> ToolOutput {
    let mut all: Vec<&str> = auth.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    tool.run(
        &format!("127.0.0.1:{port}"),
        &all,
        stdin.map(str::as_bytes),
        TOOL_TIMEOUT,
    )
    .expect("kcat runs")
}

fn produce(tool: &Kcat, port: u16, auth: &[String], topic: &str, records: &[String]) -> ToolOutput {
    let input: String = records.iter().map(|r| format!("{r}\n")).collect();
    kcat(
        tool,
        port,
        auth,
        &[
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K",
            ":",
            "-X",
            "topic.request.required.acks=-1",
            "-m",
            "30",
        ],
        Some(&input),
    )
}

fn consume(tool: &Kcat, port: u16, auth: &[String], topic: &str) -> ToolOutput {
    kcat(
        tool,
        port,
        auth,
        &[
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k:%s\n",
            "-m",
            "30",
        ],
        None,
    )
}

/// The three combined krust nodes of both tests, and their ports.
struct Cluster {
    root: tempfile::TempDir,
    pki: TestPki,
    cluster_id: String,
    /// INTERNAL ports of nodes 1..=6 (4, 5, 6: the bad brokers), then CONTROLLER ports of 1..=3.
    ports: Vec<u16>,
    voters: String,
    nodes: Vec<(i32, Option<KrustProcess>)>,
}

impl Cluster {
    /// Writes, formats and starts nodes 1, 2, 3 together (a quorum needs two of them).
    fn start() -> Cluster {
        let root = tempfile::tempdir().expect("tempdir");
        let pki = TestPki::generate(root.path().join("pki")).expect("openssl makes the test PKI");
        let cluster_id = random_kafka_uuid();
        let ports = free_ports(9).expect("ports");
        let voters = (1..=3)
            .map(|id| format!("{id}@127.0.0.1:{}", ports[5 + id]))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            root,
            pki,
            cluster_id,
            ports,
            voters,
            nodes: Vec::new(),
        };
        for id in 1..=3 {
            let security = security_props(&cluster.pki, "controller-secret", &cluster.pki.ca_cert);
            let dir = cluster.write(id, &security, false);
            cluster.nodes.push((id, Some(spawn_server(&dir, id))));
        }
        for (id, process) in &mut cluster.nodes {
            let process = process.as_mut().expect("started");
            process
                .wait_for_line(STARTED_LINE, START_TIMEOUT)
                .unwrap_or_else(|e| panic!("node {id} start: {e}\n{}", process.log_tail(60)));
        }
        cluster
    }

    /// The INTERNAL port of node `id` (1..=6).
    fn port(&self, id: i32) -> u16 {
        self.ports[usize::try_from(id - 1).expect("node id")]
    }

    /// Writes and formats krust node `id` with `security`; its folder.
    fn write(&self, id: i32, security: &[(&'static str, String)], broker_only: bool) -> PathBuf {
        let dir = self.root.path().join(format!("node{id}"));
        let controller_port = if broker_only {
            0
        } else {
            self.ports[usize::try_from(5 + id).expect("node id")]
        };
        let text = properties(
            id,
            &dir,
            (self.port(id), controller_port),
            &self.voters,
            security,
            broker_only,
        );
        write_node(self.root.path(), id, &text, &self.cluster_id)
    }

    fn process(&mut self, id: i32) -> &mut KrustProcess {
        self.nodes
            .iter_mut()
            .find(|(n, _)| *n == id)
            .and_then(|(_, p)| p.as_mut())
            .expect("a started node")
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|(id, p)| {
                p.as_ref()
                    .map(|p| format!("--- node {id}\n{}", p.log_tail(30)))
            })
            .collect()
    }
}

/// Creates `topics` as the super user through node `via`: `(name, replicas)`, one partition.
fn create_topics(admin: &Admin, port: u16, topics: &[(&str, &[i32])], cluster: &Cluster) {
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            topics
                .iter()
                .map(|(name, replicas)| {
                    create_topics_request::CreatableTopic::default()
                        .with_name(tn(name))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_assignments(vec![
                            create_topics_request::CreatableReplicaAssignment::default()
                                .with_partition_index(0)
                                .with_broker_ids(replicas.iter().map(|b| BrokerId(*b)).collect()),
                        ])
                })
                .collect(),
        );
    match admin.call(port, 5, RequestKind::CreateTopics(create)) {
        Ok(ResponseKind::CreateTopics(r))
            if r.topics.iter().all(|t| t.error_code == 0) && r.topics.len() == topics.len() => {}
        other => panic!("CreateTopics: {other:?}\n{}", cluster.logs()),
    }
}

/// Waits until kcat as alice gets `records` acknowledged (acks=all) on `topic` through `port`
/// (a node may not have the ACLs in its image yet: retried until [`CLUSTER_TIMEOUT`]).
fn produce_acked(
    tool: &Kcat,
    port: u16,
    auth: &[String],
    topic: &str,
    records: &[String],
    cluster: &Cluster,
) {
    let deadline = Instant::now() + CLUSTER_TIMEOUT;
    loop {
        let out = produce(tool, port, auth, topic, records);
        if out.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kcat -P {topic} as alice: exit {}\n{}\n{}\n{}",
            out.status,
            out.stdout,
            out.stderr,
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// kcat's `%o %k:%s` lines of `records` from offset 0.
fn expected(records: &[String]) -> String {
    records
        .iter()
        .enumerate()
        .map(|(offset, r)| format!("{offset} {r}\n"))
        .collect()
}

/// Every record of `topic` read back through `port` is `records`, in order.
fn assert_consumed(
    tool: &Kcat,
    port: u16,
    auth: &[String],
    topic: &str,
    records: &[String],
    why: &str,
) {
    let out = consume(tool, port, auth, topic);
    assert!(
        out.success() && out.stdout == expected(records),
        "{why}: kcat -C {topic} via port {port}: exit {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
}

#[test]
fn sasl_ssl_between_brokers_and_to_controllers_replicates_and_authorizes() {
    let _one_cluster = security_support::broker_lock();
    let Some(tool) = Kcat::locate().expect("kcat") else {
        eprintln!("kcat not installed: skipped");
        return;
    };
    let mut cluster = Cluster::start();
    let pki = cluster.pki.clone();
    let rogue_ca = pki.dir.join("rogue-ca.crt");
    let admin = Admin::new(&pki, "broker");
    let ports = cluster.ports.clone();
    let port_of = |id: i32| ports[usize::try_from(id - 1).expect("node id")];
    // RF 3 through node 1 (forwarded to the active controller as User:broker).
    create_topics(
        &admin,
        port_of(1),
        &[(TOPIC_NAME, &[1, 2, 3]), ("public", &[2, 3, 1])],
        &cluster,
    );
    let acls = [
        ("User:alice", TOPIC, "secure-", PREFIXED, WRITE, ALLOW, "*"),
        ("User:alice", TOPIC, "secure-", PREFIXED, READ, ALLOW, "*"),
        (
            "User:alice",
            TOPIC,
            "secure-",
            PREFIXED,
            DESCRIBE,
            ALLOW,
            "*",
        ),
        ("User:alice", TOPIC, "public", LITERAL, DESCRIBE, ALLOW, "*"),
    ];
    match admin.call(port_of(2), 3, RequestKind::CreateAcls(create_acls(&acls))) {
        Ok(ResponseKind::CreateAcls(r)) if r.results.iter().all(|x| x.error_code == 0) => {}
        other => panic!("CreateAcls: {other:?}\n{}", cluster.logs()),
    }
    let (_, leader, _) = admin.wait_partition(
        port_of(1),
        TOPIC_NAME,
        "a leader and all three replicas in sync",
        |(brokers, leader, isr)| brokers.len() == 3 && *leader > 0 && isr.len() == 3,
    );

    // acks=all as alice: acknowledged once both followers fetched over SASL_SSL.
    let auth = kcat_auth(&pki);
    let first: Vec<String> = (0..20).map(|i| format!("k{i}:v{i}")).collect();
    produce_acked(&tool, port_of(leader), &auth, TOPIC_NAME, &first, &cluster);
    let (_, _, isr) = admin.partition(port_of(1), TOPIC_NAME).expect("metadata");
    assert_eq!(
        isr.len(),
        3,
        "both followers kept up over SASL_SSL: ISR {isr:?}"
    );
    for id in 1..=3 {
        assert_consumed(
            &tool,
            port_of(id),
            &auth,
            TOPIC_NAME,
            &first,
            "after acks=all",
        );
    }
    // No ACL for alice on `public` beyond DESCRIBE: the write is refused.
    let mut bounded = auth.clone();
    bounded.extend(["-X".to_owned(), "message.timeout.ms=10000".to_owned()]);
    let denied = produce(&tool, port_of(1), &bounded, "public", &["x:y".to_owned()]);
    assert!(
        !denied.success() && denied.stderr.contains("authorization failed"),
        "alice writing to public: exit {}\nstdout:\n{}\nstderr:\n{}",
        denied.status,
        denied.stdout,
        denied.stderr
    );

    // The controller listener authorizes the Raft RPCs as Kafka's `ControllerApis`: alice (a
    // PLAIN user there, no ACLs) gets CLUSTER_AUTHORIZATION_FAILED for Vote (CLUSTER_ACTION)
    // and DescribeQuorum (DESCRIBE); the controllers' own user is answered.
    let controller_port = cluster.ports[6];
    let describe_quorum = || {
        RequestKind::DescribeQuorum(DescribeQuorumRequest::default().with_topics(vec![
            describe_quorum_request::TopicData::default()
                .with_topic_name(tn("__cluster_metadata"))
                .with_partitions(vec![
                    describe_quorum_request::PartitionData::default().with_partition_index(0),
                ]),
        ]))
    };
    let as_alice = Admin::sasl(&pki, SaslMechanism::Plain, "alice");
    match as_alice.call(
        controller_port,
        0,
        RequestKind::Vote(VoteRequest::default()),
    ) {
        Ok(ResponseKind::Vote(r)) => assert_eq!(r.error_code, 31, "Vote as alice: {r:?}"),
        other => panic!("Vote as alice: {other:?}"),
    }
    match as_alice.call(controller_port, 1, describe_quorum()) {
        Ok(ResponseKind::DescribeQuorum(r)) => {
            assert_eq!(r.error_code, 31, "DescribeQuorum as alice: {r:?}");
        }
        other => panic!("DescribeQuorum as alice: {other:?}"),
    }
    let as_controller = Admin::sasl(&pki, SaslMechanism::Plain, "controller");
    match as_controller.call(controller_port, 1, describe_quorum()) {
        Ok(ResponseKind::DescribeQuorum(r)) => assert!(
            r.error_code == 0
                && r.topics
                    .iter()
                    .all(|t| t.partitions.iter().all(|p| p.leader_id.0 > 0)),
            "DescribeQuorum as the controllers' user: {r:?}"
        ),
        other => panic!("DescribeQuorum as the controllers' user: {other:?}"),
    }
    metadata_quorum_tools_over_sasl_ssl(&pki, controller_port, &cluster);

    // Bad client-side settings: a wrong controller password, an untrusted controller
    // certificate. Neither node registers; each says why; neither dies.
    for (id, password, truststore, wanted) in [
        (
            4,
            "wrong-password",
            pki.ca_cert.as_path(),
            "failed authentication due to: Authentication failed: Invalid username or password",
        ),
        (
            5,
            "controller-secret",
            rogue_ca.as_path(),
            "SSL handshake failed: invalid peer certificate: UnknownIssuer",
        ),
    ] {
        let dir = cluster.write(id, &security_props(&pki, password, truststore), true);
        let mut process = spawn_server(&dir, id);
        process
            .wait_for_line(wanted, START_TIMEOUT)
            .unwrap_or_else(|e| panic!("node {id}: {e}\n{}", process.log_tail(60)));
        assert!(
            process.is_running().expect("status"),
            "node {id} keeps running after failing to authenticate\n{}",
            process.log_tail(40)
        );
        for unwanted in [STARTED_LINE, "panicked"] {
            assert!(
                !process.output().contains(unwanted),
                "node {id} must not log {unwanted:?}\n{}",
                process.log_tail(40)
            );
        }
        cluster.nodes.push((id, Some(process)));
    }
    let (brokers, _, _) = admin
        .partition(port_of(1), TOPIC_NAME)
        .expect("metadata from node 1");
    assert_eq!(brokers, vec![1, 2, 3], "nodes 4 and 5 never registered");

    // A wrong inter-broker password: node 6 registers (its controller login is right) but,
    // as a follower, cannot fetch from its leader: Kafka's SCRAM message in its log, and the
    // leader drops it from the ISR.
    let mut security = security_props(&pki, "controller-secret", &pki.ca_cert);
    for (key, value) in &mut security {
        if *key == "listener.name.internal.scram-sha-512.sasl.jaas.config" {
            *value = value.replace(r#"password="broker-secret""#, r#"password="wrong""#);
        }
    }
    let dir = cluster.write(6, &security, true);
    let mut process = spawn_server(&dir, 6);
    process
        .wait_for_line(STARTED_LINE, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("node 6 start: {e}\n{}", process.log_tail(60)));
    create_topics(&admin, port_of(1), &[("secure-follow", &[1, 6])], &cluster);
    process
        .wait_for_line(
            "failed authentication due to: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            START_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("node 6 fetching: {e}\n{}", process.log_tail(60)));
    admin.wait_partition(
        port_of(1),
        "secure-follow",
        "the follower that cannot authenticate leaves the ISR",
        |(_, leader, isr)| *leader == 1 && isr == &[1],
    );
    assert!(
        process.is_running().expect("status") && !process.output().contains("panicked"),
        "node 6 keeps running\n{}",
        process.log_tail(40)
    );
    cluster.nodes.push((6, Some(process)));

    // SIGKILL the leader: a survivor takes over with every acknowledged record, and the two
    // remaining replicas acknowledge more.
    cluster.process(leader).kill().expect("SIGKILL the leader");
    let survivor = (1..=3).find(|id| *id != leader).expect("a survivor");
    let (_, new_leader, _) = admin.wait_partition(
        port_of(survivor),
        TOPIC_NAME,
        "a new leader among the survivors",
        |(_, l, isr)| *l > 0 && *l != leader && !isr.contains(&leader),
    );
    assert_consumed(
        &tool,
        port_of(new_leader),
        &auth,
        TOPIC_NAME,
        &first,
        "after the leader's death",
    );
    let second: Vec<String> = (20..30).map(|i| format!("k{i}:v{i}")).collect();
    produce_acked(
        &tool,
        port_of(new_leader),
        &auth,
        TOPIC_NAME,
        &second,
        &cluster,
    );
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let other = (1..=3)
        .find(|id| *id != leader && *id != new_leader)
        .expect("the other survivor");
    assert_consumed(
        &tool,
        port_of(other),
        &auth,
        TOPIC_NAME,
        &all,
        "after more acks=all",
    );
}

/// `krust metadata-quorum` and Kafka's `kafka-metadata-quorum` with the same `--command-config`
/// (SASL_SSL, PLAIN, the PEM CA) against the controller listener: as the controllers' user both
/// describe the same quorum; as alice (no DESCRIBE on the cluster) both fail. Kafka's admin
/// client retries a refused DescribeCluster until `default.api.timeout.ms` (5 s here, with
/// `request.timeout.ms`, which may not exceed it; 60 s by
/// default); krust's tool stops at the first CLUSTER_AUTHORIZATION_FAILED.
fn metadata_quorum_tools_over_sasl_ssl(pki: &TestPki, controller_port: u16, cluster: &Cluster) {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let bootstrap = format!("127.0.0.1:{controller_port}");
    let stable = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| {
                ["ClusterId:", "LeaderId:", "CurrentVoters:"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(str::to_owned)
            .collect()
    };
    for (user, allowed) in [("controller", true), ("alice", false)] {
        let file = pki.dir.join(format!("{user}-command.properties"));
        std::fs::write(
            &file,
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"{user}\" password=\"{user}-secret\";\nssl.truststore.type=PEM\nssl.truststore.location={}\nrequest.timeout.ms=5000\ndefault.api.timeout.ms=5000\n",
                pki.ca_cert.display()
            ),
        )
        .expect("write the command config");
        let file = file.display().to_string();
        let args = [
            "--bootstrap-controller",
            bootstrap.as_str(),
            "--command-config",
            file.as_str(),
            "describe",
            "--status",
        ];
        let kafka = dist
            .run_tool(krust_testkit::class::METADATA_QUORUM, &args, TOOL_TIMEOUT)
            .expect("run Kafka's kafka-metadata-quorum");
        let mut krust_args = vec!["metadata-quorum"];
        krust_args.extend(args);
        let krust = krust_testkit::run_binary(KRUST, &krust_args, None, TOOL_TIMEOUT)
            .expect("run krust metadata-quorum");
        println!(
            "{user}: Kafka (exit {}):\n{}{}\nkrust (exit {}):\n{}{}",
            kafka.status, kafka.stdout, kafka.stderr, krust.status, krust.stdout, krust.stderr
        );
        assert_eq!(kafka.success(), allowed, "Kafka's tool as {user}");
        assert_eq!(
            krust.success(),
            allowed,
            "krust's tool as {user}\n{}",
            cluster.logs()
        );
        if allowed {
            let lines = stable(&krust.stdout);
            assert_eq!(lines.len(), 3, "{}", krust.stdout);
            assert_eq!(lines, stable(&kafka.stdout));
        } else {
            assert!(
                krust.stderr.contains("CLUSTER_AUTHORIZATION_FAILED"),
                "{}",
                krust.stderr
            );
        }
    }
}

/// The Kafka broker's node id in the mixed cluster.
const KAFKA_ID: i32 = 6;
const ON_KAFKA: &str = "on-kafka";
const ON_KRUST: &str = "on-krust";

/// One line per request of alice's authorization cases: the error codes (by name) of each
/// element, sorted — what must be equal between Kafka and krust.
fn authorization_lines(alice: &Admin, port: u16) -> Vec<String> {
    let metadata = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(
            [ON_KAFKA, "public", "secret", "missing"]
                .iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(tn(t))))
                .collect(),
        ));
    let list_offsets = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(
            // Led by neither broker asked: authorized → NOT_LEADER_OR_FOLLOWER, else refused.
            [ON_KRUST, "secret"]
                .iter()
                .map(|t| {
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(tn(t))
                        .with_partitions(vec![
                            list_offsets_request::ListOffsetsPartition::default()
                                .with_partition_index(0)
                                .with_timestamp(-1),
                        ])
                })
                .collect(),
        );
    let cases: [(&str, i16, RequestKind); 4] = [
        ("Metadata", 12, RequestKind::Metadata(metadata)),
        ("ListOffsets", 7, RequestKind::ListOffsets(list_offsets)),
        (
            "DescribeAcls",
            3,
            RequestKind::DescribeAcls(describe_acls(None)),
        ),
        (
            "CreateTopics",
            5,
            RequestKind::CreateTopics(acl_create_topics(&[("on-new", 1)], false)),
        ),
    ];
    cases
        .into_iter()
        .map(|(name, version, request)| {
            let answer = match alice.call(port, version, request) {
                Ok(ResponseKind::Metadata(r)) => joined(
                    r.topics
                        .iter()
                        .map(|t| format!("{}={}", opt_name(t.name.as_ref()), err(t.error_code)))
                        .collect(),
                ),
                Ok(ResponseKind::ListOffsets(r)) => joined(
                    r.topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions.iter().map(move |p| {
                                format!(
                                    "{}-{}={}",
                                    t.name.as_str(),
                                    p.partition_index,
                                    err(p.error_code)
                                )
                            })
                        })
                        .collect(),
                ),
                Ok(ResponseKind::DescribeAcls(r)) => err(r.error_code),
                Ok(ResponseKind::CreateTopics(r)) => joined(
                    r.topics
                        .iter()
                        .map(|t| format!("{}={}", t.name.as_str(), err(t.error_code)))
                        .collect(),
                ),
                other => format!("unexpected {other:?}"),
            };
            format!("{name}: {answer}")
        })
        .collect()
}

#[test]
fn a_kafka_broker_and_krust_brokers_replicate_and_authorize_alike_over_sasl_ssl() {
    let _one_cluster = security_support::broker_lock();
    let Some(tool) = Kcat::locate().expect("kcat") else {
        eprintln!("kcat not installed: skipped");
        return;
    };
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    let mut cluster = Cluster::start();
    let pki = cluster.pki.clone();
    // Kafka's broker with the same security keys, formatted by Kafka's StorageTool with the
    // cluster's id, registering with the krust controllers over SASL_SSL/PLAIN.
    let kafka_port = free_ports(1).expect("port")[0];
    let listener = format!("INTERNAL://127.0.0.1:{kafka_port}");
    let mut builder = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Broker)
        .cluster_id(cluster.cluster_id.clone())
        .quorum_voters(cluster.voters.clone())
        .broker_port(kafka_port)
        .dir(cluster.root.path().join(format!("node{KAFKA_ID}")))
        .start_timeout(START_TIMEOUT)
        .prop("listeners", &listener)
        .prop("advertised.listeners", &listener);
    for (key, value) in security_props(&pki, "controller-secret", &pki.ca_cert) {
        builder = builder.prop(key, value);
    }
    let mut kafka = builder
        .build()
        .expect("Kafka broker configured and formatted");
    kafka.spawn().expect("spawn the Kafka broker");
    if let Err(e) = kafka.wait_ready(START_TIMEOUT) {
        panic!(
            "the Kafka broker registers with the krust controllers over SASL_SSL: {e}\n{}\n{}",
            krust_testkit::log_tail(&kafka.log_path(), 60),
            cluster.logs()
        );
    }

    let admin = Admin::new(&pki, "broker");
    create_topics(
        &admin,
        kafka_port,
        &[
            (ON_KAFKA, &[KAFKA_ID, 2, 3]),
            (ON_KRUST, &[1, KAFKA_ID]),
            ("public", &[2, KAFKA_ID, 3]),
            ("secret", &[3, 2, KAFKA_ID]),
        ],
        &cluster,
    );
    let acls = [
        ("User:alice", TOPIC, "on-", PREFIXED, WRITE, ALLOW, "*"),
        ("User:alice", TOPIC, "on-", PREFIXED, READ, ALLOW, "*"),
        ("User:alice", TOPIC, "on-", PREFIXED, DESCRIBE, ALLOW, "*"),
        ("User:alice", TOPIC, "public", LITERAL, DESCRIBE, ALLOW, "*"),
    ];
    match admin.call(
        cluster.port(2),
        3,
        RequestKind::CreateAcls(create_acls(&acls)),
    ) {
        Ok(ResponseKind::CreateAcls(r)) if r.results.iter().all(|x| x.error_code == 0) => {}
        other => panic!("CreateAcls: {other:?}\n{}", cluster.logs()),
    }
    for (topic, leader, replicas) in [(ON_KAFKA, KAFKA_ID, 3), (ON_KRUST, 1, 2)] {
        admin.wait_partition(
            cluster.port(2),
            topic,
            &format!("{topic}: its preferred leader and every replica in sync"),
            |(brokers, l, isr)| brokers.len() == 4 && *l == leader && isr.len() == replicas,
        );
    }

    // acks=all as alice through each topic's leader: Kafka's followers fetch from krust and
    // krust's from Kafka, over SASL_SSL/SCRAM-SHA-512 as User:broker.
    let auth = kcat_auth(&pki);
    let records: Vec<String> = (0..20).map(|i| format!("k{i}:v{i}")).collect();
    produce_acked(&tool, kafka_port, &auth, ON_KAFKA, &records, &cluster);
    produce_acked(&tool, cluster.port(1), &auth, ON_KRUST, &records, &cluster);
    for (topic, replicas) in [(ON_KAFKA, 3), (ON_KRUST, 2)] {
        let (_, _, isr) = admin.partition(cluster.port(2), topic).expect("metadata");
        assert_eq!(
            isr.len(),
            replicas,
            "{topic}: every follower kept up: ISR {isr:?}"
        );
    }
    for port in [kafka_port, cluster.port(2)] {
        for topic in [ON_KAFKA, ON_KRUST] {
            assert_consumed(&tool, port, &auth, topic, &records, "mixed cluster");
        }
    }

    // The same authorization answers from the Kafka broker and a krust broker.
    let alice = Admin::new(&pki, "alice");
    let deadline = Instant::now() + CLUSTER_TIMEOUT;
    let (kafka_lines, krust_lines) = loop {
        let kafka_lines = authorization_lines(&alice, kafka_port);
        let krust_lines = authorization_lines(&alice, cluster.port(2));
        if kafka_lines == krust_lines || Instant::now() >= deadline {
            break (kafka_lines, krust_lines);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_same_lines(&kafka_lines, &krust_lines);
    for wanted in [
        "Metadata: [missing=!TopicAuthorizationFailed on-kafka=ok public=ok secret=!TopicAuthorizationFailed]",
        "ListOffsets: [on-krust-0=!NotLeaderOrFollower secret-0=!TopicAuthorizationFailed]",
        "DescribeAcls: !ClusterAuthorizationFailed",
        "CreateTopics: [on-new=!TopicAuthorizationFailed]",
    ] {
        assert!(
            kafka_lines.iter().any(|l| l == wanted),
            "Kafka's answers {kafka_lines:#?} lack {wanted:?}"
        );
    }
    let mut bounded = auth.clone();
    bounded.extend(["-X".to_owned(), "message.timeout.ms=10000".to_owned()]);
    for port in [kafka_port, cluster.port(2)] {
        let denied = produce(&tool, port, &bounded, "public", &["x:y".to_owned()]);
        assert!(
            !denied.success() && denied.stderr.contains("authorization failed"),
            "alice writing to public via port {port}: exit {}\nstdout:\n{}\nstderr:\n{}",
            denied.status,
            denied.stdout,
            denied.stderr
        );
    }

    // krust → Kafka replication: without krust node 1, Kafka leads on-krust with every record.
    cluster.process(1).kill().expect("SIGKILL krust node 1");
    admin.wait_partition(
        cluster.port(2),
        ON_KRUST,
        "Kafka leads on-krust",
        |(_, l, _)| *l == KAFKA_ID,
    );
    assert_consumed(
        &tool,
        kafka_port,
        &auth,
        ON_KRUST,
        &records,
        "Kafka's copy of on-krust",
    );
    // Kafka → krust replication: without the Kafka broker, krust leads on-kafka with every record.
    kafka.kill().expect("SIGKILL the Kafka broker");
    let (_, leader, _) = admin.wait_partition(
        cluster.port(2),
        ON_KAFKA,
        "a krust broker leads on-kafka",
        |(_, l, _)| *l == 2 || *l == 3,
    );
    assert_consumed(
        &tool,
        cluster.port(leader),
        &auth,
        ON_KAFKA,
        &records,
        "krust's copy of on-kafka",
    );
}

/// Mutual TLS between the nodes: `SSL` listeners with `ssl.client.auth=required` (the
/// controller's through its `listener.name.controller.` prefix), the key store's certificate
/// (`CN=localhost`) presented by the node's own connections and mapped by
/// `ssl.principal.mapping.rules` to `User:node-localhost`. With that principal in
/// `super.users` the combined node registers its broker with its controller (CLUSTER_ACTION)
/// and forwards a CreateTopics in an Envelope (CLUSTER_ACTION of the sender); with another
/// super user the registration is refused with CLUSTER_AUTHORIZATION_FAILED, again and again.
#[test]
fn mutual_tls_nodes_are_their_mapped_certificate_subject() {
    let _one_cluster = security_support::broker_lock();
    let root = tempfile::tempdir().expect("tempdir");
    let pki = TestPki::generate(root.path().join("pki")).expect("openssl makes the test PKI");
    let start = |id: i32, super_users: &str| -> (KrustProcess, u16) {
        let ports = free_ports(2).expect("ports");
        let (internal, controller) = (ports[0], ports[1]);
        let dir = root.path().join(format!("node{id}"));
        let security: Vec<(&'static str, String)> = vec![
            ("controller.listener.names", "CONTROLLER".to_owned()),
            ("inter.broker.listener.name", "INTERNAL".to_owned()),
            (
                "listener.security.protocol.map",
                "INTERNAL:SSL,CONTROLLER:SSL".to_owned(),
            ),
            ("ssl.keystore.type", "PEM".to_owned()),
            (
                "ssl.keystore.location",
                pki.server_keystore.display().to_string(),
            ),
            ("ssl.truststore.type", "PEM".to_owned()),
            ("ssl.truststore.location", pki.ca_cert.display().to_string()),
            ("ssl.client.auth", "required".to_owned()),
            (
                "listener.name.controller.ssl.client.auth",
                "required".to_owned(),
            ),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=([a-z]+)$/node-$1/,DEFAULT".to_owned(),
            ),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
            ),
            ("super.users", super_users.to_owned()),
            ("allow.everyone.if.no.acl.found", "false".to_owned()),
        ];
        let text = properties(
            id,
            &dir,
            (internal, controller),
            &format!("{id}@127.0.0.1:{controller}"),
            &security,
            false,
        );
        let dir = write_node(root.path(), id, &text, &random_kafka_uuid());
        (spawn_server(&dir, id), internal)
    };

    let (mut node, port) = start(1, "User:node-localhost");
    node.wait_for_line(STARTED_LINE, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("mTLS node start: {e}\n{}", node.log_tail(60)));
    let admin = Admin::with_certificate(&pki, &pki.server_cert, &pki.server_key);
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(tn("mtls"))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
    match admin.call(port, 5, RequestKind::CreateTopics(create)) {
        Ok(ResponseKind::CreateTopics(r)) if r.topics.iter().all(|t| t.error_code == 0) => {}
        other => panic!("CreateTopics over mTLS: {other:?}\n{}", node.log_tail(40)),
    }
    drop(node);

    // The same node whose certificate principal is not a super user: refused (31 =
    // CLUSTER_AUTHORIZATION_FAILED), not started, still running.
    let (mut refused, _) = start(2, "User:node-someone-else");
    let line = refused
        .wait_for_line("broker registration refused", START_TIMEOUT)
        .unwrap_or_else(|e| panic!("refused registration: {e}\n{}", refused.log_tail(60)));
    assert!(line.contains("error_code=31"), "{line}");
    assert!(
        refused.is_running().expect("status") && !refused.output().contains(STARTED_LINE),
        "a broker whose principal lacks CLUSTER_ACTION must not start\n{}",
        refused.log_tail(40)
    );
}
