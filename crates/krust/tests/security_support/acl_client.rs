//! What the authorization tests (`security_acls.rs`, `security_forwarded_acls.rs`) share: the ACL
//! wire codes, a blocking client that authenticates with SASL/PLAIN, the request builders both
//! send and the rendering of the answers both compare (only what must be equal between Kafka
//! and krust).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteAclsRequest, DeleteTopicsRequest, DescribeAclsRequest, ElectLeadersRequest,
    IncrementalAlterConfigsRequest, RequestKind, ResponseKind, SaslAuthenticateRequest,
    SaslHandshakeRequest, TopicName, alter_configs_request, create_acls_request,
    create_partitions_request, create_topics_request, delete_acls_request, delete_topics_request,
    elect_leaders_request, incremental_alter_configs_request,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::codec::{
    decode_response_body, decode_response_header, encode_request, request_api_key,
};
use uuid::Uuid;

// ACL wire codes (reference C.1): resource types, pattern types, operations, permissions.
pub const TOPIC: i8 = 2;
pub const GROUP: i8 = 3;
pub const CLUSTER: i8 = 4;
pub const TXN_ID: i8 = 5;
pub const LITERAL: i8 = 3;
pub const PREFIXED: i8 = 4;
pub const ANY: i8 = 1;
pub const ALL: i8 = 2;
pub const READ: i8 = 3;
pub const WRITE: i8 = 4;
pub const CREATE: i8 = 5;
pub const DELETE: i8 = 6;
pub const ALTER: i8 = 7;
pub const DESCRIBE: i8 = 8;
pub const DESCRIBE_CONFIGS: i8 = 10;
pub const ALTER_CONFIGS: i8 = 11;
pub const IDEMPOTENT_WRITE: i8 = 12;
pub const DENY: i8 = 2;
pub const ALLOW: i8 = 3;
// DescribeConfigs / AlterConfigs resource types.
pub const CONFIG_TOPIC: i8 = 2;
pub const CONFIG_BROKER: i8 = 4;
pub const CONFIG_BROKER_LOGGER: i8 = 8;

/// Per socket read/write; admin requests carry a 15 s server-side timeout.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// (principal, resource type, name, pattern, operation, permission, host).
pub type Acl = (&'static str, i8, &'static str, i8, i8, i8, &'static str);

// ---------------------------------------------------------------------------------------------
// The wire: a blocking client that authenticates with SASL/PLAIN.

pub fn exchange(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: &RequestKind,
) -> Result<ResponseKind, String> {
    let frame = encode_request(key, version, 7, "acl-test", request)
        .unwrap_or_else(|e| panic!("encoding {key:?} v{version}: {e}"));
    stream
        .write_all(&frame)
        .map_err(|e| format!("write: {}", e.kind()))?;
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .map_err(|e| format!("no answer ({:?})", e.kind()))?;
    let len = usize::try_from(i32::from_be_bytes(size)).map_err(|_| "negative size".to_owned())?;
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|e| format!("truncated answer ({:?})", e.kind()))?;
    let mut body = Bytes::from(body);
    decode_response_header(&mut body, key, version).map_err(|e| format!("bad header: {e}"))?;
    decode_response_body(body.copy_to_bytes(body.remaining()), key, version)
        .map_err(|e| format!("undecodable answer: {e}"))
}

/// A fresh connection authenticated as `user` (password `<user>-secret`).
pub fn login(port: u16, user: &str) -> Result<TcpStream, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    stream.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let handshake =
        RequestKind::SaslHandshake(SaslHandshakeRequest::default().with_mechanism(sb("PLAIN")));
    match exchange(&mut stream, ApiKey::SaslHandshake, 1, &handshake)? {
        ResponseKind::SaslHandshake(r) if r.error_code == 0 => {}
        other => return Err(format!("handshake: {other:?}")),
    }
    let token = format!("\0{user}\0{user}-secret");
    let authenticate = RequestKind::SaslAuthenticate(
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
    );
    match exchange(&mut stream, ApiKey::SaslAuthenticate, 2, &authenticate)? {
        ResponseKind::SaslAuthenticate(r) if r.error_code == 0 => Ok(stream),
        ResponseKind::SaslAuthenticate(r) => {
            Err(format!("authentication failed: {}", r.error_code))
        }
        other => Err(format!("authenticate: {other:?}")),
    }
}

/// One request at `version` as `user` on a fresh connection.
pub fn call(
    port: u16,
    user: &str,
    version: i16,
    request: RequestKind,
) -> Result<ResponseKind, String> {
    let key = request_api_key(&request).expect("a request");
    let mut stream = login(port, user)?;
    exchange(&mut stream, key, version, &request)
}

/// Repeats `attempt` until it returns `Some`, for at most `limit`.
pub fn poll<T>(limit: Duration, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = attempt() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The topic ids by name once a Metadata `answer` lists `count` topics, each without an error
/// and with a leader for every partition; `None` before.
pub fn ids_once_led(
    answer: Result<ResponseKind, String>,
    count: usize,
) -> Option<BTreeMap<String, Uuid>> {
    match answer {
        Ok(ResponseKind::Metadata(r))
            if r.topics.len() == count
                && r.topics.iter().all(|t| {
                    t.error_code == 0
                        && !t.partitions.is_empty()
                        && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
                }) =>
        {
            Some(
                r.topics
                    .iter()
                    .map(|t| (opt_name(t.name.as_ref()), t.topic_id))
                    .collect(),
            )
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Request building.

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

pub fn tn(s: &str) -> TopicName {
    TopicName(sb(s))
}

/// `(topic, partition)` pairs grouped by topic, in first-seen order.
pub fn by_topic(parts: &[(&str, i32)]) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, partition) in parts {
        match out.iter_mut().find(|(t, _)| t == topic) {
            Some((_, ps)) => ps.push(*partition),
            None => out.push(((*topic).to_owned(), vec![*partition])),
        }
    }
    out
}

/// A topic to create: `(name, partitions, configs)`.
pub type NewTopic<'a> = (&'a str, i32, &'a [(&'a str, &'a str)]);

/// CreateTopics, replication factor 1.
pub fn create_topics_with(topics: &[NewTopic<'_>], validate_only: bool) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(15_000)
        .with_validate_only(validate_only)
        .with_topics(
            topics
                .iter()
                .map(|(name, partitions, configs)| {
                    create_topics_request::CreatableTopic::default()
                        .with_name(tn(name))
                        .with_num_partitions(*partitions)
                        .with_replication_factor(1)
                        .with_configs(
                            configs
                                .iter()
                                .map(|(key, value)| {
                                    create_topics_request::CreatableTopicConfig::default()
                                        .with_name(sb(key))
                                        .with_value(Some(sb(value)))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// CreateTopics of `(name, partitions)` without configs.
pub fn create_topics(topics: &[(&str, i32)], validate_only: bool) -> CreateTopicsRequest {
    let topics: Vec<NewTopic<'_>> = topics.iter().map(|(n, p)| (*n, *p, &[][..])).collect();
    create_topics_with(&topics, validate_only)
}

/// CreatePartitions: `(topic, new total count)`.
pub fn create_partitions(topics: &[(&str, i32)], validate_only: bool) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_timeout_ms(15_000)
        .with_validate_only(validate_only)
        .with_topics(
            topics
                .iter()
                .map(|(name, count)| {
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(tn(name))
                        .with_count(*count)
                        .with_assignments(None)
                })
                .collect(),
        )
}

/// DeleteTopics v6: each topic by name or by id.
pub fn delete_topics(names: &[&str], ids: &[Uuid]) -> DeleteTopicsRequest {
    let by_name = names.iter().map(|n| (Some(*n), Uuid::nil()));
    let by_id = ids.iter().map(|id| (None, *id));
    delete_topics_raw(&by_name.chain(by_id).collect::<Vec<_>>())
}

/// DeleteTopics v6 with each topic's `(name, id)` as given.
pub fn delete_topics_raw(topics: &[(Option<&str>, Uuid)]) -> DeleteTopicsRequest {
    DeleteTopicsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(
            topics
                .iter()
                .map(|(name, id)| {
                    delete_topics_request::DeleteTopicState::default()
                        .with_name(name.map(tn))
                        .with_topic_id(*id)
                })
                .collect(),
        )
}

/// `(resource type, resource name, config key, value)`.
pub type ConfigChange<'a> = (i8, &'a str, &'a str, &'a str);

pub fn alter_configs(resources: &[ConfigChange<'_>], validate_only: bool) -> AlterConfigsRequest {
    AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(
            resources
                .iter()
                .map(|(kind, name, key, value)| {
                    alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(*kind)
                        .with_resource_name(sb(name))
                        .with_configs(vec![
                            alter_configs_request::AlterableConfig::default()
                                .with_name(sb(key))
                                .with_value(Some(sb(value))),
                        ])
                })
                .collect(),
        )
}

/// IncrementalAlterConfigs, each change a SET.
pub fn incremental_alter_configs(
    resources: &[ConfigChange<'_>],
    validate_only: bool,
) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(
            resources
                .iter()
                .map(|(kind, name, key, value)| {
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(*kind)
                        .with_resource_name(sb(name))
                        .with_configs(vec![
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(sb(key))
                                .with_config_operation(0)
                                .with_value(Some(sb(value))),
                        ])
                })
                .collect(),
        )
}

pub fn elect_leaders(parts: &[(&str, i32)]) -> ElectLeadersRequest {
    ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(15_000)
        .with_topic_partitions(Some(
            by_topic(parts)
                .into_iter()
                .map(|(topic, ps)| {
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(tn(&topic))
                        .with_partitions(ps)
                })
                .collect(),
        ))
}

pub fn acl_creation(acl: &Acl) -> create_acls_request::AclCreation {
    let (principal, kind, name, pattern, operation, permission, host) = *acl;
    create_acls_request::AclCreation::default()
        .with_resource_type(kind)
        .with_resource_name(sb(name))
        .with_resource_pattern_type(pattern)
        .with_principal(sb(principal))
        .with_host(sb(host))
        .with_operation(operation)
        .with_permission_type(permission)
}

pub fn create_acls(acls: &[Acl]) -> CreateAclsRequest {
    CreateAclsRequest::default().with_creations(acls.iter().map(acl_creation).collect())
}

/// DescribeAcls of every binding, or of `principal`'s.
pub fn describe_acls(principal: Option<&str>) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(principal.map(sb))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

/// DeleteAcls of every binding of `principal`.
pub fn delete_acls(principal: &str) -> DeleteAclsRequest {
    DeleteAclsRequest::default().with_filters(vec![
        delete_acls_request::DeleteAclsFilter::default()
            .with_resource_type_filter(ANY)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(ANY)
            .with_principal_filter(Some(sb(principal)))
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY),
    ])
}

// ---------------------------------------------------------------------------------------------
// Rendering: only what must be equal between Kafka and krust.

/// `ok` or `!ErrorName`.
pub fn err(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "ok".to_owned(),
        Some(ResponseError::Unknown(code)) => format!("!E{code}"),
        Some(e) => format!("!{e:?}"),
    }
}

/// `items` sorted, in brackets.
pub fn joined(mut items: Vec<String>) -> String {
    items.sort();
    format!("[{}]", items.join(" "))
}

pub fn opt_name(name: Option<&TopicName>) -> String {
    name.map_or_else(|| "null".to_owned(), |n| n.0.to_string())
}

/// `type/name:error` for every resource of a configs answer, sorted.
macro_rules! per_resource {
    ($results:expr) => {
        joined(
            $results
                .iter()
                .map(|c| {
                    format!(
                        "{}/{}:{}",
                        c.resource_type,
                        c.resource_name,
                        err(c.error_code)
                    )
                })
                .collect(),
        )
    };
}

/// The line of an answer both tests render alike (the configs, ACL and topic-administration
/// APIs); `None` for any other API.
pub fn render_shared(response: &ResponseKind) -> Option<String> {
    Some(match response {
        ResponseKind::DescribeConfigs(r) => per_resource!(r.results),
        ResponseKind::AlterConfigs(r) => per_resource!(r.responses),
        ResponseKind::IncrementalAlterConfigs(r) => per_resource!(r.responses),
        ResponseKind::DescribeAcls(r) => format!(
            "{} bindings={}",
            err(r.error_code),
            r.resources.iter().map(|res| res.acls.len()).sum::<usize>()
        ),
        ResponseKind::CreateAcls(r) => format!(
            "{:?}",
            r.results
                .iter()
                .map(|c| err(c.error_code))
                .collect::<Vec<_>>()
        ),
        ResponseKind::DeleteAcls(r) => format!(
            "{:?}",
            r.filter_results
                .iter()
                .map(|f| format!(
                    "{} matching={}",
                    err(f.error_code),
                    joined(f.matching_acls.iter().map(|m| err(m.error_code)).collect())
                ))
                .collect::<Vec<_>>()
        ),
        ResponseKind::CreateTopics(r) => joined(
            r.topics
                .iter()
                .map(|t| {
                    format!(
                        "{}:{}:cfg={}:configs={}:parts={}:rf={}",
                        t.name.0,
                        err(t.error_code),
                        err(t.topic_config_error_code),
                        // Every effective config with its value, source and flags.
                        t.configs
                            .as_ref()
                            .map_or("null".to_owned(), |c| if c.is_empty() {
                                "none".to_owned()
                            } else {
                                c.iter()
                                    .map(|e| {
                                        format!(
                                            "{}={}/{}/{}/{}",
                                            e.name.as_str(),
                                            e.value.as_ref().map_or("null", |v| v.as_str()),
                                            e.config_source,
                                            e.read_only,
                                            e.is_sensitive
                                        )
                                    })
                                    .collect::<Vec<_>>()
                                    .join(",")
                            }),
                        t.num_partitions,
                        t.replication_factor
                    )
                })
                .collect(),
        ),
        ResponseKind::CreatePartitions(r) => joined(
            r.results
                .iter()
                .map(|t| format!("{}:{}", t.name.0, err(t.error_code)))
                .collect(),
        ),
        ResponseKind::DeleteTopics(r) => joined(
            r.responses
                .iter()
                .map(|t| format!("{}:{}", opt_name(t.name.as_ref()), err(t.error_code)))
                .collect(),
        ),
        ResponseKind::ElectLeaders(r) => format!(
            "{} {}",
            err(r.error_code),
            joined(
                r.replica_election_results
                    .iter()
                    .flat_map(|t| {
                        t.partition_result.iter().map(move |p| {
                            format!("{}-{}:{}", t.topic.0, p.partition_id, err(p.error_code))
                        })
                    })
                    .collect()
            )
        ),
        ResponseKind::ListPartitionReassignments(r) => {
            format!("{} topics={}", err(r.error_code), r.topics.len())
        }
        _ => return None,
    })
}

/// krust's lines equal Kafka's; else a panic showing every differing line side by side.
#[track_caller]
pub fn assert_same_lines(kafka: &[String], krust: &[String]) {
    let differing: Vec<String> = kafka
        .iter()
        .zip(krust)
        .filter(|(k, r)| k != r)
        .map(|(k, r)| format!("kafka: {k}\nkrust: {r}\n"))
        .collect();
    assert!(
        differing.is_empty() && kafka.len() == krust.len(),
        "{} of {} lines differ from Kafka 3.9's (Kafka {} lines, krust {}):\n{}",
        differing.len(),
        kafka.len(),
        kafka.len(),
        krust.len(),
        differing.join("\n")
    );
}
