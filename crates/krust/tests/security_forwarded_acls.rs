//! Authorization of forwarded admin requests, side by side: the same requests as the same
//! SASL/PLAIN principals go to one Apache Kafka 3.9 broker (`process.roles=broker`, a
//! `SASL_PLAINTEXT` client listener with PLAIN users admin, alice, bob, carol and root, a
//! PLAINTEXT inter-broker listener, `StandardAuthorizer`,
//! `super.users=User:admin;User:root;User:ANONYMOUS`), which forwards them in Envelopes to
//!
//! 1. the oracle: an Apache Kafka 3.9 controller, and
//! 2. a `krust server` controller,
//!
//! both with `authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`,
//! `super.users=User:admin;User:ANONYMOUS` (the broker's CONTROLLER connection is unauthenticated,
//! so the Envelope's sender is `User:ANONYMOUS` and holds CLUSTER_ACTION) and
//! `allow.everyone.if.no.acl.found=false`. `admin` is a super user on both sides, which the setup
//! needs: its CreateTopics and CreateAcls are forwarded too and authorized by the controller as
//! `User:admin`. `root` is a super user on the broker only: its forwarded requests must be
//! refused by the controller, which authorizes the principal carried in the Envelope against its
//! own `super.users` and ACLs (`ControllerApis`), while what the broker handles itself (a
//! BROKER_LOGGER change) is allowed.
//!
//! As admin the test creates topics and ACLs (CreateAcls v3, through the broker): topic ACLs
//! LITERAL and PREFIXED, DENY inside a prefixed ALLOW ALL, CREATE without DESCRIBE_CONFIGS (the
//! created topic's configs are hidden), a topic DENY CREATE under a cluster CREATE (cluster
//! authorization wins), host-specific ACLs (`127.0.0.1` matches, `10.0.0.1` does not), a `User:*`
//! DESCRIBE, implied DESCRIBE (ALTER on the cluster lists reassignments) and cluster ACLs (CREATE,
//! ALTER, DESCRIBE, ALTER_CONFIGS); carol has none. Once the broker's DescribeAcls lists them and
//! a forwarded request of alice's is allowed, a table of cases — each one request as one
//! principal on a fresh authenticated connection — covers the forwarded APIs: CreateTopics
//! (validate_only, configs visibility, duplicates, `__cluster_metadata`, invalid settings),
//! CreatePartitions, IncrementalAlterConfigs (topic, broker, cluster-default and broker-logger
//! resources), AlterConfigs, CreateAcls, DeleteAcls, AlterClientQuotas,
//! AlterUserScramCredentials, ElectLeaders, AlterPartitionReassignments,
//! ListPartitionReassignments, UpdateFeatures and DeleteTopics by name and by id (duplicate
//! names, duplicate ids, a topic given by both name and id — which Kafka refuses as
//! INVALID_REQUEST before authorizing anything).
//!
//! Each answer is rendered as one line holding only what must be equal — error codes (by name)
//! per element with the element's name, sorted — never throttle times, messages, ids, ports or
//! timestamps. krust's lines must equal Kafka's; a failure prints every differing line side by
//! side. The Kafka run must hold at least 10 authorization failures and 10 clean successes.
//!
//! Every wait is bounded, only 127.0.0.1 is used, every process is killed on drop and only one
//! cluster runs at a time. Measured on the 2-core machine (debug build): about 12 s for the Kafka
//! half (two JVMs), 7 s for the krust half (one JVM), 20 s for the whole test.

#[path = "support/mod.rs"]
mod support;

mod security_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterPartitionReassignmentsRequest, AlterUserScramCredentialsRequest,
    ApiKey, ApiVersionsRequest, BrokerId, ListPartitionReassignmentsRequest, MetadataRequest,
    RequestKind, ResponseKind, UpdateFeaturesRequest, alter_client_quotas_request,
    alter_partition_reassignments_request, alter_user_scram_credentials_request, metadata_request,
    update_features_request,
};
use krust_net::codec::request_api_key;
use krust_net::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, free_ports, random_kafka_uuid};
use security_support::acl_client::{
    ALL, ALLOW, ALTER, ALTER_CONFIGS, Acl, CLUSTER, CONFIG_BROKER, CONFIG_BROKER_LOGGER,
    CONFIG_TOPIC, CREATE, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS, LITERAL, PREFIXED, READ, TOPIC,
    alter_configs, assert_same_lines, by_topic, call, create_acls, create_partitions,
    create_topics, create_topics_with, delete_acls, delete_topics, delete_topics_raw,
    describe_acls, elect_leaders, err, ids_once_led, incremental_alter_configs, joined, opt_name,
    poll, render_shared, sb, tn,
};
use uuid::Uuid;

const JAAS_PLAIN: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret" user_root="root-secret";"#;
const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// The broker's super users; `root` is not one of the controllers'.
const BROKER_SUPER_USERS: &str = "User:admin;User:root;User:ANONYMOUS";
const CONTROLLER_SUPER_USERS: &str = "User:admin;User:ANONYMOUS";
/// How long setup waits for leaders and ACLs.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// A JVM or krust node start on a loaded 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);

// SCRAM mechanisms.
const SCRAM_SHA_256: i8 = 1;
const SCRAM_SHA_512: i8 = 2;

#[rustfmt::skip]
const ACLS: &[Acl] = &[
    // alice: everything on `orders*` but deleting, altering or reconfiguring `orders-locked`;
    // CREATE (no DESCRIBE_CONFIGS) on `pay*`; DESCRIBE on `payments`; DELETE on `secret` and
    // ALTER on the cluster only from 10.0.0.1; DESCRIBE and ALTER_CONFIGS on the cluster.
    ("User:alice", TOPIC, "orders", PREFIXED, ALL, ALLOW, "*"),
    ("User:alice", TOPIC, "orders-locked", LITERAL, DELETE, DENY, "*"),
    ("User:alice", TOPIC, "orders-locked", LITERAL, ALTER, DENY, "*"),
    ("User:alice", TOPIC, "orders-locked", LITERAL, ALTER_CONFIGS, DENY, "*"),
    ("User:alice", TOPIC, "pay", PREFIXED, CREATE, ALLOW, "*"),
    ("User:alice", TOPIC, "payments", LITERAL, DESCRIBE, ALLOW, "*"),
    ("User:alice", TOPIC, "secret", LITERAL, DELETE, ALLOW, "10.0.0.1"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, DESCRIBE, ALLOW, "*"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, ALTER_CONFIGS, ALLOW, "127.0.0.1"),
    ("User:alice", CLUSTER, "kafka-cluster", LITERAL, ALTER, ALLOW, "10.0.0.1"),
    // bob: CREATE and ALTER on the cluster (a topic DENY CREATE does not stop a cluster
    // CREATE), DELETE and DESCRIBE_CONFIGS on `bob-*`, ALTER_CONFIGS on pub-1, ALTER on pub-2.
    ("User:bob", CLUSTER, "kafka-cluster", LITERAL, CREATE, ALLOW, "*"),
    ("User:bob", CLUSTER, "kafka-cluster", LITERAL, ALTER, ALLOW, "*"),
    ("User:bob", TOPIC, "bob-denied", LITERAL, CREATE, DENY, "*"),
    ("User:bob", TOPIC, "bob-", PREFIXED, DELETE, ALLOW, "*"),
    ("User:bob", TOPIC, "bob-", PREFIXED, DESCRIBE_CONFIGS, ALLOW, "*"),
    ("User:bob", TOPIC, "pub-1", LITERAL, ALTER_CONFIGS, ALLOW, "*"),
    ("User:bob", TOPIC, "pub-2", LITERAL, ALTER, ALLOW, "*"),
    // Everyone may describe `pub-*`.
    ("User:*", TOPIC, "pub-", PREFIXED, DESCRIBE, ALLOW, "*"),
];

const TOPICS: &[(&str, i32)] = &[
    ("orders", 2),
    ("orders-locked", 1),
    ("payments", 1),
    ("secret", 1),
    ("pub-1", 1),
    ("pub-2", 1),
    ("bob-old", 1),
    ("bob-dup", 1),
    ("victim", 1),
];

/// The version each API is sent at: the newest Kafka 3.9 serves.
fn version(key: ApiKey) -> i16 {
    match key {
        ApiKey::Metadata => 12,
        ApiKey::CreateTopics => 7,
        ApiKey::DeleteTopics => 6,
        ApiKey::DescribeAcls | ApiKey::CreateAcls | ApiKey::DeleteAcls => 3,
        ApiKey::AlterConfigs => 2,
        ApiKey::CreatePartitions => 3,
        ApiKey::ElectLeaders => 2,
        ApiKey::IncrementalAlterConfigs => 1,
        ApiKey::AlterClientQuotas => 1,
        ApiKey::UpdateFeatures => 1,
        ApiKey::ApiVersions => 3,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Request building.

/// AlterClientQuotas v1: `producer_byte_rate` of each `user` entity (`None`: the default user).
fn quotas(users: &[(Option<&str>, f64)], validate_only: bool) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default()
        .with_validate_only(validate_only)
        .with_entries(
            users
                .iter()
                .map(|(user, rate)| {
                    alter_client_quotas_request::EntryData::default()
                        .with_entity(vec![
                            alter_client_quotas_request::EntityData::default()
                                .with_entity_type(sb("user"))
                                .with_entity_name(user.map(sb)),
                        ])
                        .with_ops(vec![
                            alter_client_quotas_request::OpData::default()
                                .with_key(sb("producer_byte_rate"))
                                .with_value(*rate)
                                .with_remove(false),
                        ])
                })
                .collect(),
        )
}

/// AlterUserScramCredentials v0: `(user, mechanism)` deletions and upsertions.
fn scram(deletions: &[(&str, i8)], upsertions: &[(&str, i8)]) -> AlterUserScramCredentialsRequest {
    AlterUserScramCredentialsRequest::default()
        .with_deletions(
            deletions
                .iter()
                .map(|(user, mechanism)| {
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(sb(user))
                        .with_mechanism(*mechanism)
                })
                .collect(),
        )
        .with_upsertions(
            upsertions
                .iter()
                .map(|(user, mechanism)| {
                    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                        .with_name(sb(user))
                        .with_mechanism(*mechanism)
                        .with_iterations(4096)
                        .with_salt(Bytes::from(format!("salt-of-{user}")))
                        .with_salted_password(Bytes::from(format!("salted-password-of-{user}")))
                })
                .collect(),
        )
}

/// AlterPartitionReassignments v0: `(topic, partition, target replicas or None to cancel)`.
fn reassign(parts: &[(&str, i32, Option<&[i32]>)]) -> AlterPartitionReassignmentsRequest {
    let topics = by_topic(&parts.iter().map(|(t, p, _)| (*t, *p)).collect::<Vec<_>>());
    AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, ps)| {
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(tn(&topic))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    let replicas = parts
                                        .iter()
                                        .find(|(t, q, _)| *t == topic && *q == p)
                                        .and_then(|(_, _, r)| *r)
                                        .map(|r| r.iter().map(|b| BrokerId(*b)).collect());
                                    alter_partition_reassignments_request::ReassignablePartition::default()
                                        .with_partition_index(p)
                                        .with_replicas(replicas)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn list_reassignments() -> ListPartitionReassignmentsRequest {
    ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(None)
}

/// UpdateFeatures v1: `(feature, level, upgrade type)`; 1 = upgrade, 2 = safe downgrade.
fn update_features(updates: &[(&str, i16, i8)], validate_only: bool) -> UpdateFeaturesRequest {
    UpdateFeaturesRequest::default()
        .with_timeout_ms(15_000)
        .with_validate_only(validate_only)
        .with_feature_updates(
            updates
                .iter()
                .map(|(feature, level, upgrade_type)| {
                    update_features_request::FeatureUpdateKey::default()
                        .with_feature(sb(feature))
                        .with_max_version_level(*level)
                        .with_upgrade_type(*upgrade_type)
                })
                .collect(),
        )
}

fn metadata(topics: &[&str]) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(tn(t))))
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
}

// ---------------------------------------------------------------------------------------------
// Rendering: only what must be equal between Kafka and krust.

fn render(response: &ResponseKind) -> String {
    match response {
        ResponseKind::Metadata(r) => joined(
            r.topics
                .iter()
                .map(|t| format!("{}:{}", opt_name(t.name.as_ref()), err(t.error_code)))
                .collect(),
        ),
        ResponseKind::AlterClientQuotas(r) => joined(
            r.entries
                .iter()
                .map(|e| {
                    let entity: Vec<String> = e
                        .entity
                        .iter()
                        .map(|x| {
                            format!(
                                "{}={}",
                                x.entity_type,
                                x.entity_name.as_ref().map_or("<default>", |n| n.as_str())
                            )
                        })
                        .collect();
                    format!("{}:{}", entity.join(","), err(e.error_code))
                })
                .collect(),
        ),
        ResponseKind::AlterUserScramCredentials(r) => joined(
            r.results
                .iter()
                .map(|u| format!("{}:{}", u.user, err(u.error_code)))
                .collect(),
        ),
        ResponseKind::AlterPartitionReassignments(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(
                r.responses
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(move |p| {
                            format!("{}-{}:{}", t.name.0, p.partition_index, err(p.error_code))
                        })
                    })
                    .collect()
            )
        ),
        ResponseKind::UpdateFeatures(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(
                r.results
                    .iter()
                    .map(|f| format!("{}:{}", f.feature, err(f.error_code)))
                    .collect()
            )
        ),
        other => render_shared(other).unwrap_or_else(|| format!("unexpected {other:?}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The table.

struct Table {
    port: u16,
    lines: Vec<String>,
}

impl Table {
    /// Sends `request` as `user`, records the rendered line under `name` and returns the answer.
    fn case(
        &mut self,
        name: &str,
        user: &str,
        request: impl Into<RequestKind>,
    ) -> Option<ResponseKind> {
        let request = request.into();
        let key = request_api_key(&request).expect("a request");
        let version = version(key);
        let answer = call(self.port, user, version, request);
        let rendered = match &answer {
            Ok(response) => render(response),
            Err(e) => format!("FAILED: {e}"),
        };
        self.lines.push(format!(
            "{name:<34} {user:<5} {key:?} v{version}: {rendered}"
        ));
        answer.ok()
    }
}

/// What the cases need from the setup.
struct Setup {
    /// Topic ids by name.
    ids: BTreeMap<String, Uuid>,
    /// The finalized `metadata.version` level.
    metadata_version: i16,
}

/// Topics and ACLs as admin, through the broker. Returns the setup's own lines.
fn setup(port: u16, strict: bool) -> (Vec<String>, Setup) {
    let mut lines = Vec::new();
    let admin = |request: RequestKind| {
        let key = request_api_key(&request).expect("a request");
        call(port, "admin", version(key), request)
    };
    let check = |lines: &mut Vec<String>, what: &str, line: String, ok: bool| {
        assert!(ok || !strict, "Kafka setup step {what} failed: {line}");
        lines.push(format!("setup {what}: {line}"));
    };
    // Topics, with a leader each.
    let created = admin(create_topics(TOPICS, false).into());
    let line = created.as_ref().map_or_else(Clone::clone, render);
    check(
        &mut lines,
        "create topics",
        line.clone(),
        !line.contains('!') && created.is_ok(),
    );
    let names: Vec<&str> = TOPICS.iter().map(|(n, _)| *n).collect();
    let ids = poll(SETUP_TIMEOUT, || {
        ids_once_led(admin(metadata(&names).into()), names.len())
    });
    check(
        &mut lines,
        "leaders",
        format!("{}", ids.is_some()),
        ids.is_some(),
    );
    // The finalized metadata.version, for UpdateFeatures.
    let versions = ApiVersionsRequest::default()
        .with_client_software_name(sb("krust-test"))
        .with_client_software_version(sb("1.0"));
    let metadata_version = match admin(versions.into()) {
        Ok(ResponseKind::ApiVersions(r)) => r
            .finalized_features
            .iter()
            .find(|f| f.name.as_str() == "metadata.version")
            .map_or(-1, |f| f.max_version_level),
        _ => -1,
    };
    check(
        &mut lines,
        "metadata.version",
        format!("{}", metadata_version > 0),
        metadata_version > 0,
    );
    // The ACLs, then until the broker's DescribeAcls lists all of them.
    let created = admin(create_acls(ACLS).into());
    let line = created.as_ref().map_or_else(Clone::clone, render);
    check(
        &mut lines,
        "create acls",
        line.clone(),
        !line.contains('!') && created.is_ok(),
    );
    let listed = poll(SETUP_TIMEOUT, || match admin(describe_acls(None).into()) {
        Ok(ResponseKind::DescribeAcls(r))
            if r.error_code == 0
                && r.resources.iter().map(|res| res.acls.len()).sum::<usize>() == ACLS.len() =>
        {
            Some(())
        }
        _ => None,
    });
    check(
        &mut lines,
        "acls listed",
        format!("{}", listed.is_some()),
        listed.is_some(),
    );
    // And in effect on the controller: alice may (validate) create an `orders*` topic.
    let settled = poll(SETUP_TIMEOUT, || {
        match call(
            port,
            "alice",
            version(ApiKey::CreateTopics),
            create_topics(&[("orders-probe", 1)], true).into(),
        ) {
            Ok(ResponseKind::CreateTopics(r)) if r.topics.iter().all(|t| t.error_code == 0) => {
                Some(())
            }
            _ => None,
        }
    });
    check(
        &mut lines,
        "acls in effect",
        format!("{}", settled.is_some()),
        settled.is_some(),
    );
    (
        lines,
        Setup {
            ids: ids.unwrap_or_default(),
            metadata_version,
        },
    )
}

/// The table. Order matters where a request changes state (topic deletion last); both clusters
/// see the same sequence.
#[rustfmt::skip]
#[allow(clippy::too_many_lines)] // the table
fn cases(t: &mut Table, setup: &Setup) {
    let id = |name: &str| setup.ids.get(name).copied().unwrap_or_else(Uuid::nil);
    let level = setup.metadata_version;
    let retention: &[(&str, &str)] = &[("retention.ms", "100000")];
    let bad_retention: &[(&str, &str)] = &[("retention.ms", "not-a-number")];

    // --- CreateTopics: CREATE on the cluster or the topic; configs only with DESCRIBE_CONFIGS.
    t.case("create topics, no acl", "carol", create_topics(&[("carol-new", 1), ("orders", 1)], false));
    t.case("create topics, topic acls", "alice", create_topics_with(&[
        ("orders-new", 2, &[]), ("pay-new", 1, retention), ("x-alice", 1, &[]), ("orders", 1, &[]),
    ], false));
    t.case("create topics, validate", "alice",
        create_topics_with(&[("orders-validate", 3, retention), ("pay-validate", 1, &[]), ("y", 1, &[])], true));
    t.case("create topics, duplicates", "alice",
        create_topics(&[("orders-dup", 1), ("orders-dup", 1), ("__cluster_metadata", 1)], false));
    t.case("create topics, invalid", "alice", create_topics_with(&[
        ("orders-zero", 0, &[]), ("orders-badcfg", 1, bad_retention), ("orders.bad/name", 1, &[]),
    ], false));
    t.case("create topics, invalid", "carol", create_topics_with(&[
        ("carol-zero", 0, &[]), ("carol-badcfg", 1, bad_retention),
    ], true));
    t.case("create topics, cluster acl", "bob", create_topics_with(&[
        ("bob-new", 1, retention), ("other-bob", 1, &[]), ("bob-denied", 1, &[]),
    ], false));
    t.case("create topics, cluster acl validate", "bob", create_topics(&[("pub-1", 1), ("bob-v", 2)], true));
    t.case("create topics, broker-only super", "root", create_topics(&[("root-new", 1)], false));
    t.case("create topics, super user", "admin", create_topics(&[("admin-new", 1), ("orders", 1)], false));

    // --- CreatePartitions: ALTER on the topic.
    t.case("create partitions", "alice", create_partitions(&[("orders-new", 3)], false));
    t.case("create partitions, denied", "alice",
        create_partitions(&[("orders-locked", 2), ("payments", 2), ("orders-missing", 2)], false));
    t.case("create partitions", "carol", create_partitions(&[("pub-1", 2)], true));
    t.case("create partitions", "bob", create_partitions(&[("pub-2", 2), ("pub-1", 2)], true));
    t.case("create partitions, fewer", "bob", create_partitions(&[("pub-2", 1)], true));
    t.case("create partitions, duplicate", "alice", create_partitions(&[("orders", 3), ("orders", 4)], true));
    t.case("create partitions, broker-only super", "root", create_partitions(&[("secret", 2)], true));
    t.case("create partitions, super user", "admin", create_partitions(&[("secret", 2)], true));

    // --- IncrementalAlterConfigs: ALTER_CONFIGS on the topic or the cluster.
    let topic_retention = |topic| (CONFIG_TOPIC, topic, "retention.ms", "200000");
    let backoff = |broker| (CONFIG_BROKER, broker, "log.cleaner.backoff.ms", "20000");
    t.case("incremental alter configs", "bob",
        incremental_alter_configs(&[topic_retention("pub-1"), topic_retention("pub-2")], false));
    t.case("incremental alter configs", "alice", incremental_alter_configs(&[
        topic_retention("orders"), topic_retention("orders-locked"), topic_retention("pub-1"),
        topic_retention("orders-missing"), topic_retention("missing"),
    ], false));
    t.case("incremental alter configs, broker", "alice",
        incremental_alter_configs(&[backoff("1"), backoff("")], true));
    t.case("incremental alter configs, broker", "carol",
        incremental_alter_configs(&[backoff(""), topic_retention("pub-1")], true));
    t.case("incremental alter configs, broker", "bob", incremental_alter_configs(&[backoff("1")], true));
    t.case("incremental alter configs, invalid", "bob",
        incremental_alter_configs(&[(CONFIG_TOPIC, "pub-1", "retention.ms", "abc")], false));
    t.case("incremental alter configs, invalid", "carol",
        incremental_alter_configs(&[(CONFIG_TOPIC, "pub-1", "retention.ms", "abc")], false));
    t.case("incremental alter configs, logger", "root", incremental_alter_configs(&[
        (CONFIG_BROKER_LOGGER, "1", "kafka.server.ConfigAdminManager", "INFO"), backoff(""),
        topic_retention("pub-1"),
    ], true));
    t.case("incremental alter configs", "admin",
        incremental_alter_configs(&[topic_retention("secret"), backoff("")], true));

    // --- AlterConfigs (legacy): the same ACLs.
    t.case("alter configs", "bob",
        alter_configs(&[topic_retention("pub-1"), topic_retention("pub-2")], true));
    t.case("alter configs", "alice",
        alter_configs(&[backoff("1"), topic_retention("orders"), topic_retention("orders-locked")], true));
    t.case("alter configs", "carol", alter_configs(&[backoff("1"), topic_retention("pub-1")], true));
    t.case("alter configs, broker-only super", "root", alter_configs(&[backoff("1")], true));

    // --- CreateAcls / DeleteAcls: ALTER on the cluster.
    let dave: Acl = ("User:dave", TOPIC, "zzz", LITERAL, READ, ALLOW, "*");
    let bad: Acl = ("User:dave", CLUSTER, "not-the-cluster", LITERAL, ALTER, ALLOW, "*");
    t.case("create acls, host mismatch", "alice", create_acls(&[dave]));
    t.case("create acls", "carol", create_acls(&[dave]));
    t.case("create acls, broker-only super", "root", create_acls(&[dave]));
    t.case("create acls", "bob", create_acls(&[dave, bad]));
    // Bob's new ACL must be in the broker's image before anyone deletes it.
    let port = t.port;
    poll(Duration::from_secs(10), || match call(port, "admin", version(ApiKey::DescribeAcls), describe_acls(Some("User:dave")).into()) {
        Ok(ResponseKind::DescribeAcls(r)) if !r.resources.is_empty() => Some(()),
        _ => None,
    });
    t.case("delete acls", "carol", delete_acls("User:dave"));
    t.case("delete acls, host mismatch", "alice", delete_acls("User:dave"));
    t.case("delete acls, broker-only super", "root", delete_acls("User:dave"));
    t.case("delete acls", "bob", delete_acls("User:dave"));
    t.case("delete acls, nothing", "admin", delete_acls("User:nobody"));

    // --- AlterClientQuotas: ALTER_CONFIGS on the cluster.
    t.case("alter client quotas", "alice", quotas(&[(Some("alice"), 1024.0), (None, 2048.0)], false));
    t.case("alter client quotas", "carol", quotas(&[(Some("carol"), 1.0), (None, 1.0)], false));
    t.case("alter client quotas, cluster alter", "bob", quotas(&[(Some("bob"), 1.0)], true));
    t.case("alter client quotas, validate", "alice", quotas(&[(Some("x"), 5.0)], true));
    t.case("alter client quotas, broker-only super", "root", quotas(&[(Some("root"), 5.0)], true));

    // --- AlterUserScramCredentials: ALTER on the cluster.
    t.case("alter scram credentials", "bob", scram(&[], &[("dave", SCRAM_SHA_256), ("erin", SCRAM_SHA_512)]));
    t.case("alter scram credentials", "carol", scram(&[], &[("carol", SCRAM_SHA_256)]));
    t.case("alter scram credentials", "alice", scram(&[("dave", SCRAM_SHA_256)], &[]));
    t.case("alter scram credentials", "root", scram(&[("dave", SCRAM_SHA_256)], &[("root", SCRAM_SHA_256)]));
    t.case("alter scram credentials", "admin", scram(&[("dave", SCRAM_SHA_256), ("ghost", SCRAM_SHA_256)], &[]));

    // --- ElectLeaders: ALTER on the cluster.
    t.case("elect leaders", "bob", elect_leaders(&[("orders", 0), ("orders-missing", 0)]));
    t.case("elect leaders, host mismatch", "alice", elect_leaders(&[("orders", 0)]));
    t.case("elect leaders", "carol", elect_leaders(&[("pub-1", 0)]));
    t.case("elect leaders, broker-only super", "root", elect_leaders(&[("pub-1", 0)]));

    // --- Partition reassignments: ALTER (alter) and DESCRIBE (list) on the cluster.
    let to_broker_1: &[i32] = &[1];
    t.case("alter reassignments", "bob", reassign(&[
        ("orders", 0, Some(to_broker_1)), ("orders", 1, None), ("orders-missing", 0, Some(to_broker_1)),
    ]));
    t.case("alter reassignments", "carol", reassign(&[("orders", 0, Some(to_broker_1))]));
    t.case("alter reassignments, host mismatch", "alice", reassign(&[("pub-1", 0, None)]));
    t.case("alter reassignments, broker-only super", "root", reassign(&[("pub-1", 0, None)]));
    for user in ["alice", "bob", "carol", "root", "admin"] {
        t.case("list reassignments", user, list_reassignments());
    }

    // --- UpdateFeatures: ALTER on the cluster.
    t.case("update features, validate", "bob", update_features(&[("metadata.version", level, 1)], true));
    t.case("update features", "carol", update_features(&[("metadata.version", level, 1)], true));
    t.case("update features, host mismatch", "alice", update_features(&[("metadata.version", level, 1)], true));
    t.case("update features, broker-only super", "root", update_features(&[("metadata.version", level, 1)], true));
    t.case("update features, unknown", "admin", update_features(&[("no.such.feature", 1, 1)], true));

    // --- DeleteTopics, last: DELETE on the topic (DESCRIBE decides what a refusal reveals).
    t.case("delete topics by name", "carol", delete_topics(&["secret", "pub-1", "nope"], &[]));
    t.case("delete topics by name", "alice",
        delete_topics(&["orders-gone", "orders-locked", "payments", "secret"], &[]));
    t.case("delete topics by id", "alice", delete_topics(&[], &[
        id("secret"), id("payments"), id("orders-locked"), Uuid::from_u128(0x1234_5678),
    ]));
    t.case("delete topics, duplicates", "alice", delete_topics(&["orders-new", "orders-new"], &[]));
    t.case("delete topics, duplicate ids", "bob", delete_topics(&[], &[id("bob-dup"), id("bob-dup")]));
    // Kafka refuses a topic given by both name and id before authorizing anything.
    t.case("delete topics, name and id", "carol", delete_topics_raw(&[
        (Some("victim"), id("victim")), (Some("nope"), Uuid::from_u128(0x8765_4321)),
    ]));
    t.case("delete topics, broker-only super", "root", delete_topics(&["pub-2", "admin-new"], &[]));
    t.case("delete topics by name", "bob", delete_topics(&["bob-new", "bob-denied", "other-bob"], &[]));
    t.case("delete topics by id", "bob", delete_topics(&[], &[id("bob-old"), id("pub-2")]));
    t.case("delete topics", "alice", delete_topics(&["orders-new"], &[]));
    t.case("delete topics, super user", "admin", delete_topics(&["pay-new", "admin-new", "other-bob", "bob-dup", "victim"], &[id("secret")]));
}

// ---------------------------------------------------------------------------------------------
// The clusters.

/// One controller (Apache Kafka 3.9 or `krust server`) and one Apache Kafka 3.9 broker. Field
/// order: the broker is killed first, then the controller, then the folder goes.
struct Cluster {
    _broker: KafkaNode,
    _kafka_controller: Option<KafkaNode>,
    _krust_controller: Option<support::Node>,
    _dir: tempfile::TempDir,
    sasl_port: u16,
}

fn start_cluster(dist: &KafkaDist, krust: bool) -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = free_ports(3).expect("ports");
    let (controller_port, broker_port, sasl_port) = (ports[0], ports[1], ports[2]);
    let voters = format!("11@127.0.0.1:{controller_port}");
    let cluster_id = random_kafka_uuid();
    let (kafka_controller, krust_controller) = if krust {
        let text = support::controller_properties(
            dir.path(),
            11,
            controller_port,
            &voters,
            &format!(
                "authorizer.class.name={AUTHORIZER}\nsuper.users={CONTROLLER_SUPER_USERS}\n\
                 allow.everyone.if.no.acl.found=false\n"
            ),
        );
        let mut node = support::write_node(dir.path(), 11, &text, &cluster_id);
        node.start();
        (None, Some(node))
    } else {
        let node = KafkaNode::builder(dist)
            .role(KafkaRole::Controller)
            .node_id(11)
            .cluster_id(cluster_id.clone())
            .controller_port(controller_port)
            .quorum_voters(voters.clone())
            .prop("authorizer.class.name", AUTHORIZER)
            .prop("super.users", CONTROLLER_SUPER_USERS)
            .prop("allow.everyone.if.no.acl.found", "false")
            .start_timeout(START_TIMEOUT)
            .start()
            .expect("Kafka 3.9 controller");
        (Some(node), None)
    };
    let listeners =
        format!("PLAINTEXT://127.0.0.1:{broker_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}");
    let broker = KafkaNode::builder(dist)
        .role(KafkaRole::Broker)
        .node_id(1)
        .cluster_id(cluster_id)
        .broker_port(broker_port)
        .quorum_voters(voters)
        .prop("listeners", &listeners)
        .prop("advertised.listeners", &listeners)
        .prop(
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        )
        .prop("sasl.enabled.mechanisms", "PLAIN")
        .prop(
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            JAAS_PLAIN,
        )
        .prop("authorizer.class.name", AUTHORIZER)
        .prop("super.users", BROKER_SUPER_USERS)
        .prop("allow.everyone.if.no.acl.found", "false")
        .start_timeout(START_TIMEOUT)
        .start()
        .unwrap_or_else(|e| {
            let controller_log = krust_controller
                .as_ref()
                .map(|n| n.log_tail(40))
                .unwrap_or_default();
            panic!("Kafka 3.9 broker: {e}\n{controller_log}")
        });
    Cluster {
        _broker: broker,
        _kafka_controller: kafka_controller,
        _krust_controller: krust_controller,
        _dir: dir,
        sasl_port,
    }
}

/// The setup's and the table's lines against one cluster; `(lines, number of cases, seconds)`.
fn run(dist: &KafkaDist, krust: bool) -> (Vec<String>, usize, f64) {
    let kind = if krust { "krust" } else { "kafka" };
    let started = Instant::now();
    let cluster = start_cluster(dist, krust);
    let port = cluster.sasl_port;
    let (mut lines, ready) = setup(port, !krust);
    let mut table = Table {
        port,
        lines: Vec::new(),
    };
    cases(&mut table, &ready);
    let count = table.lines.len();
    lines.extend(table.lines);
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{kind} controller half: {count} cases in {seconds:.1} s");
    drop(cluster);
    (lines, count, seconds)
}

#[test]
fn forwarded_admin_requests_are_authorized_like_kafka() {
    let _one = ONE_CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let (kafka, count, kafka_seconds) = run(&dist, false);
    eprintln!("Kafka 3.9 ({kafka_seconds:.1} s):\n{}", kafka.join("\n"));
    assert!(count >= 40, "only {count} cases");
    let denied = kafka
        .iter()
        .filter(|l| {
            !l.starts_with("setup")
                && ["TopicAuthorizationFailed", "ClusterAuthorizationFailed"]
                    .iter()
                    .any(|e| l.contains(e))
        })
        .count();
    let clean = kafka
        .iter()
        .filter(|l| !l.starts_with("setup") && !l.contains('!') && !l.contains("FAILED"))
        .count();
    assert!(
        denied >= 10 && clean >= 10,
        "a trivial table: {denied} lines with an authorization failure, {clean} without any error"
    );
    let (krust, _, krust_seconds) = run(&dist, true);
    eprintln!("krust ({krust_seconds:.1} s):\n{}", krust.join("\n"));
    assert_same_lines(&kafka, &krust);
}

// ---------------------------------------------------------------------------------------------
// The controller listener's own checks (Kafka's `ControllerApis`): the Raft RPCs need
// CLUSTER_ACTION, DescribeQuorum DESCRIBE and DescribeCluster ALTER on the cluster.

/// One Kafka 3.9 or krust controller alone (node 11, no broker), with the StandardAuthorizer and
/// `allow.everyone.if.no.acl.found=true`, so that the test's unauthenticated connection
/// (`User:ANONYMOUS`) may create the first cluster ACLs directly on the controller listener.
fn start_controller(dist: &KafkaDist, krust: bool) -> (u16, Box<dyn std::any::Any>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports(1).expect("port")[0];
    let voters = format!("11@127.0.0.1:{port}");
    let cluster_id = random_kafka_uuid();
    let settings = [
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", "User:admin"),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    if krust {
        let extra: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let text = support::controller_properties(dir.path(), 11, port, &voters, &extra);
        let mut node = support::write_node(dir.path(), 11, &text, &cluster_id);
        node.start();
        (port, Box::new((node, dir)))
    } else {
        let mut builder = KafkaNode::builder(dist)
            .role(KafkaRole::Controller)
            .node_id(11)
            .cluster_id(cluster_id)
            .controller_port(port)
            .quorum_voters(voters)
            .start_timeout(START_TIMEOUT);
        for (k, v) in settings {
            builder = builder.prop(k, v);
        }
        let node = builder.start().expect("Kafka 3.9 controller");
        (port, Box::new((node, dir)))
    }
}

/// A plaintext connection to `127.0.0.1:port` from the loopback address `source`, so that
/// host-specific ACLs tell the test's callers apart.
fn connect_from(source: &str, port: u16) -> Result<std::net::TcpStream, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .expect("runtime");
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket
            .bind(format!("{source}:0").parse().expect("address"))
            .map_err(|e| format!("bind {source}: {e}"))?;
        let target = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        tokio::time::timeout(Duration::from_secs(10), socket.connect(target))
            .await
            .map_err(|_| "connect: timed out".to_owned())?
            .map_err(|e| format!("connect: {e}"))
    })?;
    let stream = stream.into_std().map_err(|e| e.to_string())?;
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    Ok(stream)
}

/// `request` at `version` from `source`, unauthenticated.
fn call_from(
    source: &str,
    port: u16,
    version: i16,
    request: &RequestKind,
) -> Result<ResponseKind, String> {
    let key = request_api_key(request).expect("a request");
    let mut stream = connect_from(source, port)?;
    security_support::acl_client::exchange(&mut stream, key, version, request)
}

/// The error code a response carries at its top level (the Raft RPCs, DescribeQuorum,
/// DescribeCluster, CreateAcls' first result).
fn top_level(response: &ResponseKind) -> (i16, Option<String>) {
    let message =
        |m: &Option<kafka_protocol::protocol::StrBytes>| m.as_ref().map(|m| m.to_string());
    match response {
        ResponseKind::Vote(r) => (r.error_code, None),
        ResponseKind::BeginQuorumEpoch(r) => (r.error_code, None),
        ResponseKind::EndQuorumEpoch(r) => (r.error_code, None),
        ResponseKind::Fetch(r) => (r.error_code, None),
        ResponseKind::FetchSnapshot(r) => (r.error_code, None),
        ResponseKind::DescribeQuorum(r) => (r.error_code, message(&r.error_message)),
        ResponseKind::DescribeCluster(r) => (r.error_code, message(&r.error_message)),
        ResponseKind::CreateAcls(r) => (r.results.first().map_or(-2, |x| x.error_code), None),
        other => panic!("unexpected response {other:?}"),
    }
}

/// The lines of one controller: each request from each source address, after ACLs give
/// `User:ANONYMOUS` ALL on the cluster from 127.0.0.1 and DESCRIBE from 127.0.0.3.
fn controller_listener_lines(port: u16) -> Vec<String> {
    use kafka_protocol::messages::{
        BeginQuorumEpochRequest, DescribeClusterRequest, DescribeQuorumRequest,
        EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest, VoteRequest,
        describe_quorum_request,
    };
    const ACLS: &[Acl] = &[
        (
            "User:ANONYMOUS",
            CLUSTER,
            "kafka-cluster",
            LITERAL,
            ALL,
            ALLOW,
            "127.0.0.1",
        ),
        (
            "User:ANONYMOUS",
            CLUSTER,
            "kafka-cluster",
            LITERAL,
            DESCRIBE,
            ALLOW,
            "127.0.0.3",
        ),
    ];
    let created = poll(SETUP_TIMEOUT, || {
        call_from(
            "127.0.0.1",
            port,
            3,
            &RequestKind::CreateAcls(create_acls(ACLS)),
        )
        .ok()
        .filter(|r| top_level(r).0 == 0)
    });
    assert!(
        created.is_some(),
        "CreateAcls on the controller listener never succeeded"
    );
    // Applied once 127.0.0.2 (no ACL of its own) is refused what everyone had before.
    // v0 cannot name an endpoint type (it means "broker"); v1 asks for the controller's.
    let describe_cluster = |version: i16, include: bool| {
        RequestKind::DescribeCluster(
            DescribeClusterRequest::default()
                .with_endpoint_type(if version >= 1 { 2 } else { 1 })
                .with_include_cluster_authorized_operations(include),
        )
    };
    let applied = poll(SETUP_TIMEOUT, || {
        call_from("127.0.0.2", port, 1, &describe_cluster(1, false))
            .ok()
            .filter(|r| top_level(r).0 == CLUSTER_AUTHORIZATION_FAILED)
    });
    assert!(applied.is_some(), "the cluster ACLs never applied");
    let raft: Vec<(&str, i16, RequestKind)> = vec![
        ("Vote", 0, RequestKind::Vote(VoteRequest::default())),
        ("Vote", 1, RequestKind::Vote(VoteRequest::default())),
        (
            "BeginQuorumEpoch",
            0,
            RequestKind::BeginQuorumEpoch(BeginQuorumEpochRequest::default()),
        ),
        (
            "EndQuorumEpoch",
            0,
            RequestKind::EndQuorumEpoch(EndQuorumEpochRequest::default()),
        ),
        (
            "Fetch",
            13,
            RequestKind::Fetch(
                FetchRequest::default()
                    .with_session_id(7)
                    .with_replica_id(BrokerId(5)),
            ),
        ),
        (
            "FetchSnapshot",
            0,
            RequestKind::FetchSnapshot(FetchSnapshotRequest::default()),
        ),
    ];
    let mut lines = Vec::new();
    for source in ["127.0.0.2", "127.0.0.3"] {
        for (name, version, request) in &raft {
            let response = call_from(source, port, *version, request).expect(name);
            let mut line = format!(
                "{source} {name} v{version}: {}",
                err(top_level(&response).0)
            );
            if let ResponseKind::Fetch(r) = &response {
                line.push_str(&format!(
                    " session {} partitions {}",
                    r.session_id,
                    r.responses.len()
                ));
            }
            lines.push(line);
        }
    }
    for source in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        // The quorum's own state differs by design (ids, ports, times): only errors compared,
        // for no partition and for a partition that is not the metadata partition.
        let orders = DescribeQuorumRequest::default().with_topics(vec![
            describe_quorum_request::TopicData::default()
                .with_topic_name(kafka_protocol::messages::TopicName(sb("orders")))
                .with_partitions(vec![
                    describe_quorum_request::PartitionData::default().with_partition_index(3),
                ]),
        ]);
        for (what, request) in [
            ("none", DescribeQuorumRequest::default()),
            ("orders-3", orders),
        ] {
            for version in [0, 2] {
                let request = RequestKind::DescribeQuorum(request.clone());
                let response = call_from(source, port, version, &request).expect("DescribeQuorum");
                let ResponseKind::DescribeQuorum(r) = &response else {
                    panic!("{response:?}")
                };
                let partitions: Vec<String> = r
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(move |p| {
                            format!(
                                "{}-{} {} {:?}",
                                t.topic_name.as_str(),
                                p.partition_index,
                                err(p.error_code),
                                p.error_message.as_ref().map(|m| m.to_string())
                            )
                        })
                    })
                    .collect();
                lines.push(format!(
                    "{source} DescribeQuorum({what}) v{version}: {} {:?} [{}]",
                    err(r.error_code),
                    r.error_message.as_ref().map(|m| m.to_string()),
                    partitions.join(", ")
                ));
            }
        }
        for (version, include) in [(0, false), (1, false), (1, true)] {
            let response = call_from(source, port, version, &describe_cluster(version, include))
                .expect("DescribeCluster");
            let ResponseKind::DescribeCluster(r) = &response else {
                panic!("{response:?}")
            };
            // Kafka's message prints its `RequestChannel.Request` (connection id, buffer):
            // compared by its frame only.
            let message = r.error_message.as_ref().map(|m| {
                assert!(
                    r.error_code != CLUSTER_AUTHORIZATION_FAILED
                        || (m.starts_with("Request ") && m.ends_with(" is not authorized.")),
                    "{m}"
                );
                if r.error_code == CLUSTER_AUTHORIZATION_FAILED {
                    "Request … is not authorized.".to_owned()
                } else {
                    m.to_string()
                }
            });
            lines.push(format!(
                "{source} DescribeCluster v{version} include={include}: {} {message:?} ops {}",
                err(r.error_code),
                r.cluster_authorized_operations
            ));
        }
    }
    lines
}

/// A lock so that the two tests of this file never run clusters at the same time.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn controller_listener_is_authorized_like_kafka() {
    let _one = ONE_CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let kafka = {
        let (port, _node) = start_controller(&dist, false);
        controller_listener_lines(port)
    };
    eprintln!("Kafka 3.9:\n{}", kafka.join("\n"));
    let refused = kafka
        .iter()
        .filter(|l| l.contains("ClusterAuthorizationFailed"))
        .count();
    assert!(refused >= 12, "only {refused} refusals from Kafka");
    let krust = {
        let (port, _node) = start_controller(&dist, true);
        controller_listener_lines(port)
    };
    eprintln!("krust:\n{}", krust.join("\n"));
    assert_same_lines(&kafka, &krust);
}
