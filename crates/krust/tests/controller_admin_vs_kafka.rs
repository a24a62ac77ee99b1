//! The controller's security admin APIs side by side with Apache Kafka 3.9: the same list of
//! CreateAcls, DeleteAcls, AlterClientQuotas and AlterUserScramCredentials requests — valid
//! and invalid, in the same order — goes to the controller listener (as
//! `--bootstrap-controller` admin clients send them) of
//!
//! 1. the oracle: one Apache Kafka 3.9 KRaft controller with `StandardAuthorizer`
//!    (`super.users=User:ANONYMOUS`, so the PLAINTEXT test client may do everything);
//! 2. one `krust server` controller;
//! 3. one `krust server` controller under an Apache Kafka 3.9 broker, which forwards the
//!    requests in Envelopes (as the ZooKeeper migration's brokers do);
//! 4. `krust dev` (a krust broker forwarding to its krust controller).
//!
//! Afterwards a Kafka 3.9 broker replaying krust's records (3.) and the krust broker (4.) must
//! describe the same ACLs, quotas and SCRAM credentials as the oracle's own broker (the oracle
//! is a combined node).
//!
//! Every response must equal the oracle's — codes, messages, and the order of results (Kafka
//! lists quota and SCRAM results in `HashMap` order; only DeleteAcls' matching ACLs, listed in
//! the order of Kafka's internal hash table, are compared as sets) — and every request must
//! move the metadata log's high watermark by as many records as the oracle's did
//! (`metadata.max.idle.interval.ms=0`, so nothing else writes).
//!
//! Every process is killed on drop, every wait is bounded, only 127.0.0.1.

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterUserScramCredentialsRequest, CreateAclsRequest,
    CreateDelegationTokenRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeClientQuotasRequest, DescribeUserScramCredentialsRequest, ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use krust::metadata_quorum::{Bootstrap, describe};
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    KRUST_DEV_READY_TIMEOUT, KafkaDist, KafkaNode, KafkaRole, KrustProcess, free_ports,
    random_kafka_uuid,
};

const WAIT: Duration = Duration::from_secs(120);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const ANY: i8 = 1;
const MATCH: i8 = 2;
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ALTER: i8 = 7;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// One request of the list.
#[derive(Debug, Clone)]
enum Request {
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    Quotas(AlterClientQuotasRequest),
    Scram(AlterUserScramCredentialsRequest),
}

fn acl(
    resource_type: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    operation: i8,
    permission: i8,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

fn create(acls: Vec<AclCreation>) -> Request {
    Request::CreateAcls(CreateAclsRequest::default().with_creations(acls))
}

fn any_filter() -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

fn delete(filters: Vec<DeleteAclsFilter>) -> Request {
    Request::DeleteAcls(DeleteAclsRequest::default().with_filters(filters))
}

fn entry(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> EntryData {
    EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| {
                    EntityData::default()
                        .with_entity_type(s(t))
                        .with_entity_name(n.map(s))
                })
                .collect(),
        )
        .with_ops(
            ops.iter()
                .map(|(k, v)| {
                    OpData::default()
                        .with_key(s(k))
                        .with_value(v.unwrap_or(0.0))
                        .with_remove(v.is_none())
                })
                .collect(),
        )
}

fn quotas(entries: Vec<EntryData>) -> Request {
    Request::Quotas(AlterClientQuotasRequest::default().with_entries(entries))
}

fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(s(name))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(bytes::Bytes::from(format!("salt-of-{name}")))
        .with_salted_password(bytes::Bytes::from(format!("salted-password-of-{name}")))
}

fn remove(name: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion::default()
        .with_name(s(name))
        .with_mechanism(mechanism)
}

fn scram(
    deletions: Vec<ScramCredentialDeletion>,
    upsertions: Vec<ScramCredentialUpsertion>,
) -> Request {
    Request::Scram(
        AlterUserScramCredentialsRequest::default()
            .with_deletions(deletions)
            .with_upsertions(upsertions),
    )
}

/// The requests, in order, each with a label that names it in a failure.
fn requests() -> Vec<(&'static str, Request)> {
    let orders = acl(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW);
    vec![
        (
            "acls: create five, one twice",
            create(vec![
                orders.clone(),
                acl(TOPIC, "ord", PREFIXED, "User:alice", WRITE, ALLOW),
                acl(GROUP, "*", LITERAL, "User:bob", READ, ALLOW),
                acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", ALTER, DENY),
                acl(TOPIC, "*", LITERAL, "User:bob", READ, DENY),
                orders.clone(),
            ]),
        ),
        ("acls: create an existing one", create(vec![orders.clone()])),
        (
            "acls: bad CLUSTER name, empty name, one valid",
            create(vec![
                acl(CLUSTER, "my-cluster", LITERAL, "User:alice", ALTER, ALLOW),
                acl(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "payments", LITERAL, "User:carol", WRITE, ALLOW),
            ]),
        ),
        (
            "acls: MATCH pattern fails the request",
            create(vec![
                acl(TOPIC, "x", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "x", MATCH, "User:alice", READ, ALLOW),
            ]),
        ),
        (
            "acls: ANY operation fails the request",
            create(vec![acl(TOPIC, "x", LITERAL, "User:alice", ANY, ALLOW)]),
        ),
        (
            "acls: delete what applies to topic orders, and bob's",
            delete(vec![
                any_filter()
                    .with_resource_type_filter(TOPIC)
                    .with_resource_name_filter(Some(s("orders")))
                    .with_pattern_type_filter(MATCH),
                any_filter().with_principal_filter(Some(s("User:bob"))),
            ]),
        ),
        (
            "acls: delete nothing",
            delete(vec![
                any_filter().with_principal_filter(Some(s("User:nobody"))),
            ]),
        ),
        (
            "acls: delete by exact pattern",
            delete(vec![
                any_filter()
                    .with_resource_type_filter(CLUSTER)
                    .with_resource_name_filter(Some(s("kafka-cluster")))
                    .with_pattern_type_filter(LITERAL)
                    .with_operation(ALTER)
                    .with_permission_type(DENY),
            ]),
        ),
        (
            "quotas: user alice",
            quotas(vec![entry(
                &[("user", Some("alice"))],
                &[
                    ("producer_byte_rate", Some(1024.0)),
                    ("request_percentage", Some(12.5)),
                ],
            )]),
        ),
        (
            "quotas: several entities at once",
            quotas(vec![
                entry(
                    &[("user", Some("alice")), ("client-id", None)],
                    &[("consumer_byte_rate", Some(2048.0))],
                ),
                entry(&[("user", None)], &[("producer_byte_rate", Some(1000.0))]),
                entry(
                    &[("client-id", Some("app"))],
                    &[("controller_mutation_rate", Some(10.0))],
                ),
                entry(
                    &[("user", Some("bob")), ("client-id", Some("app"))],
                    &[("consumer_byte_rate", Some(1.0))],
                ),
                entry(
                    &[("ip", Some("10.0.0.1"))],
                    &[("connection_creation_rate", Some(100.0))],
                ),
                entry(&[("ip", None)], &[("connection_creation_rate", Some(50.0))]),
            ]),
        ),
        (
            "quotas: the same values again",
            quotas(vec![entry(
                &[("user", Some("alice"))],
                &[
                    ("producer_byte_rate", Some(1024.0)),
                    ("request_percentage", Some(12.5)),
                ],
            )]),
        ),
        (
            "quotas: remove one set and one unset key",
            quotas(vec![entry(
                &[("user", Some("alice"))],
                &[("producer_byte_rate", None), ("consumer_byte_rate", None)],
            )]),
        ),
        (
            "quotas: refusals",
            quotas(vec![
                entry(&[], &[("producer_byte_rate", Some(1.0))]),
                entry(
                    &[("group", Some("g"))],
                    &[("producer_byte_rate", Some(1.0))],
                ),
                entry(
                    &[("client-id", Some(""))],
                    &[("producer_byte_rate", Some(1.0))],
                ),
                entry(
                    &[("ip", Some("10.0.0.2")), ("user", Some("x"))],
                    &[("connection_creation_rate", Some(1.0))],
                ),
                entry(
                    &[("ip", Some("10.0.0.3"))],
                    &[("producer_byte_rate", Some(1.0))],
                ),
                entry(
                    &[("ip", Some("10.0.0.4"))],
                    &[("connection_creation_rate", Some(1.5))],
                ),
                entry(
                    &[("ip", Some("10.0.0.5"))],
                    &[("connection_creation_rate", Some(3e9))],
                ),
                entry(
                    &[("user", Some("c"))],
                    &[("producer_byte_rate", Some(10.5))],
                ),
                entry(&[("user", Some("d"))], &[("request_percentage", Some(0.0))]),
                entry(&[("user", Some("e"))], &[("bogus_rate", Some(1.0))]),
                entry(
                    &[("user", Some("f"))],
                    &[
                        ("producer_byte_rate", Some(1.0)),
                        ("producer_byte_rate", Some(2.0)),
                    ],
                ),
                entry(
                    &[("user", Some("g"))],
                    &[("producer_byte_rate", Some(1e19))],
                ),
            ]),
        ),
        (
            "quotas: the same entity twice",
            quotas(vec![
                entry(&[("user", Some("h"))], &[("producer_byte_rate", Some(1.0))]),
                entry(&[("user", Some("h"))], &[("consumer_byte_rate", Some(1.0))]),
            ]),
        ),
        (
            "quotas: validate only",
            Request::Quotas(
                AlterClientQuotasRequest::default()
                    .with_entries(vec![entry(
                        &[("user", Some("i"))],
                        &[("producer_byte_rate", Some(1.0))],
                    )])
                    .with_validate_only(true),
            ),
        ),
        (
            "scram: two users",
            scram(
                Vec::new(),
                vec![upsert("alice", 1, 4096), upsert("bob", 2, 8192)],
            ),
        ),
        (
            "scram: refusals",
            scram(
                vec![remove("ghost", 1), remove("twice", 1)],
                vec![
                    upsert("few", 1, 100),
                    upsert("many", 2, 20_000),
                    upsert("", 1, 4096),
                    upsert("mech", 3, 4096),
                    upsert("twice", 1, 4096),
                    upsert("carol", 2, 4096),
                    upsert("dave", 1, 4096),
                    upsert("dave", 2, 4096),
                ],
            ),
        ),
        (
            "scram: delete one, replace one",
            scram(vec![remove("alice", 1)], vec![upsert("bob", 2, 16384)]),
        ),
        (
            "scram: delete the other mechanism",
            scram(vec![remove("bob", 1)], Vec::new()),
        ),
    ]
}

/// A response flattened for comparison.
type Outcome = Vec<String>;

async fn send(client: &Client, request: &Request) -> Outcome {
    let text = |m: &Option<StrBytes>| format!("{:?}", m.as_ref().map(ToString::to_string));
    match request {
        Request::CreateAcls(r) => match client.send(r.clone(), 3).await {
            Ok(ResponseKind::CreateAcls(r)) => r
                .results
                .iter()
                .map(|x| format!("{} {}", x.error_code, text(&x.error_message)))
                .collect(),
            other => panic!("CreateAcls: {other:?}"),
        },
        Request::DeleteAcls(r) => match client.send(r.clone(), 3).await {
            Ok(ResponseKind::DeleteAcls(r)) => r
                .filter_results
                .iter()
                .map(|f| {
                    let mut matching: Vec<String> = f
                        .matching_acls
                        .iter()
                        .map(|m| {
                            format!(
                                "{} {} {}:{} {} {} {} {}",
                                m.error_code,
                                text(&m.error_message),
                                m.resource_type,
                                m.resource_name.as_str(),
                                m.pattern_type,
                                m.principal.as_str(),
                                m.operation,
                                m.permission_type
                            )
                        })
                        .collect();
                    matching.sort();
                    format!("{} {} {matching:?}", f.error_code, text(&f.error_message))
                })
                .collect(),
            other => panic!("DeleteAcls: {other:?}"),
        },
        Request::Quotas(r) => match client.send(r.clone(), 1).await {
            Ok(ResponseKind::AlterClientQuotas(r)) => r
                .entries
                .iter()
                .map(|e| {
                    let entity: Vec<String> = e
                        .entity
                        .iter()
                        .map(|d| {
                            format!("{}={:?}", d.entity_type.as_str(), d.entity_name.as_deref())
                        })
                        .collect();
                    format!("{entity:?} {} {}", e.error_code, text(&e.error_message))
                })
                .collect(),
            other => panic!("AlterClientQuotas: {other:?}"),
        },
        Request::Scram(r) => match client.send(r.clone(), 0).await {
            Ok(ResponseKind::AlterUserScramCredentials(r)) => r
                .results
                .iter()
                .map(|x| {
                    format!(
                        "{:?} {} {}",
                        x.user.as_str(),
                        x.error_code,
                        text(&x.error_message)
                    )
                })
                .collect(),
            other => panic!("AlterUserScramCredentials: {other:?}"),
        },
    }
}

/// What a broker serves from its metadata image afterwards: every ACL (DescribeAcls), every
/// quota (DescribeClientQuotas), every SCRAM credential (DescribeUserScramCredentials),
/// flattened and sorted.
async fn describe_state(client: &Client) -> Vec<String> {
    let mut state = Vec::new();
    let acls = DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    match client.send(acls, 3).await {
        Ok(ResponseKind::DescribeAcls(r)) => {
            state.push(format!("acls error {}", r.error_code));
            for res in &r.resources {
                for a in &res.acls {
                    state.push(format!(
                        "acl {}:{}:{} {} {} {} {}",
                        res.resource_type,
                        res.resource_name.as_str(),
                        res.pattern_type,
                        a.principal.as_str(),
                        a.host.as_str(),
                        a.operation,
                        a.permission_type
                    ));
                }
            }
        }
        other => panic!("DescribeAcls: {other:?}"),
    }
    match client
        .send(
            DescribeClientQuotasRequest::default().with_components(Vec::new()),
            1,
        )
        .await
    {
        Ok(ResponseKind::DescribeClientQuotas(r)) => {
            state.push(format!("quotas error {}", r.error_code));
            for e in r.entries.iter().flatten() {
                let mut entity: Vec<String> = e
                    .entity
                    .iter()
                    .map(|d| format!("{}={:?}", d.entity_type.as_str(), d.entity_name.as_deref()))
                    .collect();
                entity.sort();
                for v in &e.values {
                    state.push(format!("quota {entity:?} {}={}", v.key.as_str(), v.value));
                }
            }
        }
        other => panic!("DescribeClientQuotas: {other:?}"),
    }
    match client
        .send(
            DescribeUserScramCredentialsRequest::default().with_users(None),
            0,
        )
        .await
    {
        Ok(ResponseKind::DescribeUserScramCredentials(r)) => {
            state.push(format!("scram error {}", r.error_code));
            for u in &r.results {
                for c in &u.credential_infos {
                    state.push(format!(
                        "scram {} {} {} {}",
                        u.user.as_str(),
                        u.error_code,
                        c.mechanism,
                        c.iterations
                    ));
                }
            }
        }
        other => panic!("DescribeUserScramCredentials: {other:?}"),
    }
    state.sort();
    state
}

/// [`describe_state`] of the broker at `broker`, once it equals `want` (the broker follows the
/// metadata log) or the wait ends.
fn state_of(broker: &str, want: Option<&[String]>) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = Client::new(
        broker.to_owned(),
        ClientConfig {
            client_id: "controller-admin-vs-kafka".to_owned(),
            request_timeout: REQUEST_TIMEOUT,
            ..ClientConfig::default()
        },
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = runtime.block_on(describe_state(&client));
        if want.is_none_or(|w| w == state.as_slice()) || Instant::now() > deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// CreateDelegationToken, RenewDelegationToken and ExpireDelegationToken with no
/// `delegation.token.secret.key` anywhere, flattened: straight to a controller they are not
/// allowed (PLAINTEXT), forwarded by a broker they reach the controller and find tokens
/// disabled — with the forwarded principal as owner and requester.
fn token_outcomes(target: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = Client::new(
        target.to_owned(),
        ClientConfig {
            client_id: "controller-admin-vs-kafka".to_owned(),
            request_timeout: REQUEST_TIMEOUT,
            ..ClientConfig::default()
        },
    );
    runtime.block_on(async {
        let mut out = Vec::new();
        for version in [1, 3] {
            let create = CreateDelegationTokenRequest::default().with_max_lifetime_ms(1000);
            match client.send(create, version).await {
                Ok(ResponseKind::CreateDelegationToken(r)) => out.push(format!(
                    "create v{version}: {} {}:{} {}:{} {} {} {} {:?} {}",
                    r.error_code,
                    r.principal_type.as_str(),
                    r.principal_name.as_str(),
                    r.token_requester_principal_type.as_str(),
                    r.token_requester_principal_name.as_str(),
                    r.issue_timestamp_ms,
                    r.expiry_timestamp_ms,
                    r.max_timestamp_ms,
                    r.token_id.as_str(),
                    r.hmac.len()
                )),
                other => panic!("CreateDelegationToken: {other:?}"),
            }
        }
        let renew = RenewDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::from_static(b"no-such-token"))
            .with_renew_period_ms(1000);
        match client.send(renew, 2).await {
            Ok(ResponseKind::RenewDelegationToken(r)) => {
                out.push(format!("renew: {} {}", r.error_code, r.expiry_timestamp_ms));
            }
            other => panic!("RenewDelegationToken: {other:?}"),
        }
        let expire = ExpireDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::from_static(b"no-such-token"))
            .with_expiry_time_period_ms(-1);
        match client.send(expire, 2).await {
            Ok(ResponseKind::ExpireDelegationToken(r)) => {
                out.push(format!(
                    "expire: {} {}",
                    r.error_code, r.expiry_timestamp_ms
                ));
            }
            other => panic!("ExpireDelegationToken: {other:?}"),
        }
        out
    })
}

/// The committed end of the metadata log, as the active controller reports it.
fn high_watermark(controller: &str) -> i64 {
    let deadline = Instant::now() + WAIT;
    loop {
        match describe(
            &Bootstrap::Controller(controller.to_owned()),
            Duration::from_secs(10),
        ) {
            Ok((_, q)) if q.leader_id >= 0 => return q.high_watermark,
            other => assert!(Instant::now() < deadline, "DescribeQuorum: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Each request's outcome and how many records it wrote, sent to `target` (the controller
/// itself, or a broker that forwards to it).
fn run(target: &str, controller: &str) -> Vec<(String, Outcome, i64)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = Client::new(
        target.to_owned(),
        ClientConfig {
            client_id: "controller-admin-vs-kafka".to_owned(),
            request_timeout: REQUEST_TIMEOUT,
            ..ClientConfig::default()
        },
    );
    // Startup writes (bootstrap, registration) settle first.
    let mut last = high_watermark(controller);
    let deadline = Instant::now() + WAIT;
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = high_watermark(controller);
        if now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the metadata log does not settle"
        );
        last = now;
    }
    let mut out = Vec::new();
    for (label, request) in requests() {
        let before = high_watermark(controller);
        let outcome = runtime.block_on(async {
            tokio::time::timeout(REQUEST_TIMEOUT * 2, send(&client, &request))
                .await
                .unwrap_or_else(|_| panic!("{label}: no answer"))
        });
        // The answer comes once the records are committed, so the high watermark holds them
        // already; nothing else writes (`metadata.max.idle.interval.ms=0`), so it must then
        // stay still (500 ms of unchanged readings).
        let deadline = Instant::now() + WAIT;
        let mut after = high_watermark(controller);
        let mut still_since = Instant::now();
        while still_since.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(100));
            let now = high_watermark(controller);
            if now != after {
                after = now;
                still_since = Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "{label}: the metadata log does not settle"
            );
        }
        out.push((label.to_owned(), outcome, after - before));
    }
    out
}

#[test]
fn security_admin_requests_are_answered_and_recorded_as_kafka_does() {
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    // One at a time: the machine has two cores.
    // Token outcomes: the oracle's first, then krust's in the same order.
    let mut tokens: Vec<(&str, Vec<String>)> = Vec::new();
    let (oracle, oracle_state) = {
        let ports = free_ports(2).expect("ports");
        let port = ports[0];
        let _kafka = KafkaNode::builder(&dist)
            .role(KafkaRole::Combined)
            .node_id(1)
            .cluster_id(random_kafka_uuid())
            .controller_port(port)
            .broker_port(ports[1])
            .quorum_voters(format!("1@127.0.0.1:{port}"))
            .prop("metadata.max.idle.interval.ms", "0")
            .prop(
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            )
            .prop("super.users", "User:ANONYMOUS")
            .start_timeout(WAIT)
            .start()
            .expect("Kafka 3.9 controller");
        let controller = format!("127.0.0.1:{port}");
        let outcomes = run(&controller, &controller);
        let broker = format!("127.0.0.1:{}", ports[1]);
        tokens.push(("direct", token_outcomes(&controller)));
        tokens.push(("through a Kafka broker", token_outcomes(&broker)));
        (outcomes, state_of(&broker, None))
    };
    assert!(
        oracle_state.len() >= 12,
        "the oracle's broker describes little: {oracle_state:#?}"
    );
    let written: i64 = oracle.iter().map(|(_, _, n)| n).sum();
    assert!(written >= 20, "the oracle wrote only {written} records");
    let got = {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_ports(1).expect("port")[0];
        let text = support::controller_properties(
            dir.path(),
            1,
            port,
            &format!("1@127.0.0.1:{port}"),
            "metadata.max.idle.interval.ms=0\n\
             authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             super.users=User:ANONYMOUS\n",
        );
        let mut node = support::write_node(dir.path(), 1, &text, &random_kafka_uuid());
        node.start();
        let controller = format!("127.0.0.1:{port}");
        let result = run(&controller, &controller);
        tokens.push(("direct", token_outcomes(&controller)));
        drop(node);
        result
    };
    // The same requests through an Apache Kafka 3.9 broker, which forwards them to a krust
    // controller in Envelopes (the path of the ZooKeeper migration's hybrid phase).
    let (forwarded, forwarded_state) = {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(2).expect("ports");
        let voters = format!("11@127.0.0.1:{}", ports[0]);
        let cluster_id = random_kafka_uuid();
        let text = support::controller_properties(
            dir.path(),
            11,
            ports[0],
            &voters,
            "metadata.max.idle.interval.ms=0\n\
             authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             super.users=User:ANONYMOUS\n",
        );
        let mut node = support::write_node(dir.path(), 11, &text, &cluster_id);
        node.start();
        let broker = KafkaNode::builder(&dist)
            .role(KafkaRole::Broker)
            .node_id(1)
            .cluster_id(cluster_id)
            .broker_port(ports[1])
            .quorum_voters(voters)
            .prop("metadata.max.idle.interval.ms", "0")
            .prop(
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            )
            .prop("super.users", "User:ANONYMOUS")
            .start_timeout(WAIT)
            .start()
            .unwrap_or_else(|e| panic!("Kafka broker on a krust controller: {e}"));
        let broker_address = format!("127.0.0.1:{}", ports[1]);
        let result = run(&broker_address, &format!("127.0.0.1:{}", ports[0]));
        let state = state_of(&broker_address, Some(&oracle_state));
        tokens.push(("through a Kafka broker", token_outcomes(&broker_address)));
        drop(broker);
        drop(node);
        (result, state)
    };
    // And through a krust broker (`krust dev`: a combined krust node), which forwards them too.
    let through_krust = {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_ports(1).expect("port")[0];
        let data_dir = dir.path().join("data");
        let args: Vec<String> = vec![
            "dev".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--port".into(),
            port.to_string(),
            "--override".into(),
            "metadata.max.idle.interval.ms=0".into(),
            "--override".into(),
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            "--override".into(),
            "super.users=User:ANONYMOUS".into(),
        ];
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
        let props =
            std::fs::read_to_string(data_dir.join("server.properties")).expect("dev config");
        let voters = props
            .lines()
            .find_map(|l| l.strip_prefix("controller.quorum.voters="))
            .expect("voters");
        let controller = voters.split_once('@').expect("id@host:port").1.to_owned();
        let broker = format!("127.0.0.1:{port}");
        let result = run(&broker, &controller);
        let state = state_of(&broker, Some(&oracle_state));
        drop(process);
        (result, state)
    };
    let (through_krust, krust_state) = through_krust;
    let mut failures = Vec::new();
    for (kind, got) in [
        ("direct", &got),
        ("through a Kafka broker", &forwarded),
        ("through a krust broker", &through_krust),
    ] {
        for ((label, want, want_records), (_, have, have_records)) in oracle.iter().zip(got) {
            if want != have {
                failures.push(format!(
                    "[{kind}] {label}:\n  kafka {want:#?}\n  krust {have:#?}"
                ));
            }
            if want_records != have_records {
                failures.push(format!(
                    "[{kind}] {label}: kafka wrote {want_records} records, krust {have_records}"
                ));
            }
        }
    }
    // Kafka's direct and forwarded token answers, then krust's.
    let (kafka_tokens, krust_tokens) = tokens.split_at(2);
    for ((kind, want), (_, have)) in kafka_tokens.iter().zip(krust_tokens) {
        if want != have {
            failures.push(format!(
                "[{kind}] delegation tokens:\n  kafka {want:#?}\n  krust {have:#?}"
            ));
        }
    }
    // What a Kafka broker replaying krust's records serves equals what the oracle's serves,
    // and so does what a krust broker serves (DescribeAcls, DescribeClientQuotas and
    // DescribeUserScramCredentials from its own image).
    for (kind, state) in [
        ("a Kafka broker", &forwarded_state),
        ("a krust broker", &krust_state),
    ] {
        if *state != oracle_state {
            failures.push(format!(
                "state described by {kind}:\n  kafka {oracle_state:#?}\n  krust {state:#?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences from Kafka 3.9:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
