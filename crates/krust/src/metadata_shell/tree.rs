//! The shell's tree: Kafka 3.9's image nodes (`org.apache.kafka.image.node`) plus the shell's
//! `/local`, built once from a [`MetadataImage`]. Leaves hold the text Kafka's node printers
//! print (`PartitionRegistration(…)`, `BrokerRegistration(…)`, …); redaction is off, as in
//! Kafka's shell.

use std::collections::BTreeMap;

use krust_metadata::MetadataImage;
use krust_metadata::image::cluster::{Endpoint, VersionRange};
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::image::topics::{LeaderRecoveryState, PartitionRegistration, TopicImage};
use krust_metadata::kafka_uuid::to_kafka_string;
use uuid::Uuid;

use crate::dump_log::json::java_double;

/// A node: a directory of named children, or a file holding one line of text.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Children by name (listed in Java `String` order, which is byte order here).
    Dir(BTreeMap<String, Node>),
    /// The text `cat` prints.
    File(String),
}

impl Node {
    /// Whether this is a directory.
    #[must_use]
    pub fn is_dir(&self) -> bool {
        matches!(self, Node::Dir(_))
    }

    /// The child called `name`, if this is a directory that has one.
    #[must_use]
    pub fn child(&self, name: &str) -> Option<&Node> {
        match self {
            Node::Dir(children) => children.get(name),
            Node::File(_) => None,
        }
    }

    /// The children's names, sorted (empty for a file).
    #[must_use]
    pub fn child_names(&self) -> Vec<&str> {
        match self {
            Node::Dir(children) => children.keys().map(String::as_str).collect(),
            Node::File(_) => Vec::new(),
        }
    }

    /// Kafka's `MetadataNode.print` through a `ShellNodePrinter`: directories as `name:` lines
    /// with their children indented by two spaces, files as their text.
    pub fn print(&self, indent: usize, out: &mut String) {
        match self {
            Node::File(text) => {
                out.push_str(&"  ".repeat(indent));
                out.push_str(text);
                out.push('\n');
            }
            Node::Dir(children) => {
                for (name, child) in children {
                    out.push_str(&"  ".repeat(indent));
                    out.push_str(name);
                    out.push_str(":\n");
                    child.print(indent + 1, out);
                }
            }
        }
    }
}

fn dir(children: impl IntoIterator<Item = (String, Node)>) -> Node {
    Node::Dir(children.into_iter().collect())
}

fn file(text: impl Into<String>) -> Node {
    Node::File(text.into())
}

/// `/`: `image` and `local`.
#[must_use]
pub fn root(image: &MetadataImage) -> Node {
    dir([
        ("image".to_owned(), image_node(image)),
        (
            "local".to_owned(),
            dir([
                ("version".to_owned(), file(env!("CARGO_PKG_VERSION"))),
                ("commitId".to_owned(), file("unknown")),
            ]),
        ),
    ])
}

fn image_node(image: &MetadataImage) -> Node {
    dir([
        ("provenance".to_owned(), file(provenance(image))),
        ("features".to_owned(), features(image)),
        ("cluster".to_owned(), cluster(image)),
        ("topics".to_owned(), topics(image)),
        ("configs".to_owned(), configs(image)),
        ("clientQuotas".to_owned(), client_quotas(image)),
        (
            "producerIds".to_owned(),
            dir([(
                "nextProducerId".to_owned(),
                file(image.producer_ids.next_producer_id.to_string()),
            )]),
        ),
        ("acls".to_owned(), dir([("byId".to_owned(), acls(image))])),
        ("scram".to_owned(), scram(image)),
        ("delegationToken".to_owned(), delegation_tokens(image)),
    ])
}

/// `offset N, epoch E, time <ISO_ZONED_DATE_TIME in UTC>`.
fn provenance(image: &MetadataImage) -> String {
    let p = &image.provenance;
    format!(
        "offset {}, epoch {}, time {}",
        p.last_contained_offset,
        p.last_contained_epoch,
        iso_zoned_utc(p.last_contained_log_time_ms)
    )
}

/// Java's `DateTimeFormatter.ISO_ZONED_DATE_TIME` of an epoch-millisecond instant in zone UTC:
/// `2024-01-02T03:04:05.678Z[UTC]` (seconds always, the fraction without trailing zeros and
/// only when non-zero).
#[must_use]
pub fn iso_zoned_utc(epoch_ms: i64) -> String {
    let days = epoch_ms.div_euclid(86_400_000);
    let ms_of_day = epoch_ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, millis) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    let mut fraction = String::new();
    if millis != 0 {
        fraction = format!(".{millis:03}");
        while fraction.ends_with('0') {
            fraction.pop();
        }
    }
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}Z[UTC]")
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn features(image: &MetadataImage) -> Node {
    let f = &image.features;
    let mut children = vec![
        (
            "metadataVersion".to_owned(),
            file(f.metadata_version.to_string()),
        ),
        (
            "zkMigrationState".to_owned(),
            file(match f.zk_migration_state {
                ZkMigrationState::None => "NONE",
                ZkMigrationState::Migration => "MIGRATION",
                ZkMigrationState::PreMigration => "PRE_MIGRATION",
                ZkMigrationState::PostMigration => "POST_MIGRATION",
            }),
        ),
    ];
    for (name, level) in &f.finalized_levels {
        if name != "metadata.version" {
            children.push((format!("finalized_{name}"), file(level.to_string())));
        }
    }
    dir(children)
}

fn security_protocol_name(id: i16) -> String {
    match id {
        0 => "PLAINTEXT".to_owned(),
        1 => "SSL".to_owned(),
        2 => "SASL_PLAINTEXT".to_owned(),
        3 => "SASL_SSL".to_owned(),
        other => other.to_string(),
    }
}

/// `[Endpoint(listenerName='L', securityProtocol=P, host='h', port=n), …]` sorted by name.
fn listeners(listeners: &BTreeMap<String, Endpoint>) -> String {
    let parts: Vec<String> = listeners
        .iter()
        .map(|(name, e)| {
            format!(
                "Endpoint(listenerName='{name}', securityProtocol={}, host='{}', port={})",
                security_protocol_name(e.security_protocol),
                e.host,
                e.port
            )
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// `{name: min-max, …}` sorted by name (`min` alone when min = max).
fn supported_features(features: &BTreeMap<String, VersionRange>) -> String {
    let parts: Vec<String> = features
        .iter()
        .map(|(name, range)| {
            if range.min == range.max {
                format!("{name}: {}", range.min)
            } else {
                format!("{name}: {}-{}", range.min, range.max)
            }
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Java's `List.toString` of ids: `[a, b]`.
fn uuid_list(ids: &[Uuid]) -> String {
    let parts: Vec<String> = ids.iter().map(to_kafka_string).collect();
    format!("[{}]", parts.join(", "))
}

fn int_list(values: &[i32]) -> String {
    let parts: Vec<String> = values.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn cluster(image: &MetadataImage) -> Node {
    let brokers = image.cluster.brokers.iter().map(|(id, b)| {
        let rack = b
            .rack
            .as_ref()
            .map_or_else(|| "Optional.empty".to_owned(), |r| format!("Optional[{r}]"));
        let text = format!(
            "BrokerRegistration(id={}, epoch={}, incarnationId={}, listeners={}, \
             supportedFeatures={}, rack={rack}, fenced={}, inControlledShutdown={}, \
             isMigratingZkBroker={}, directories={})",
            b.id,
            b.epoch,
            to_kafka_string(&b.incarnation_id),
            listeners(&b.listeners),
            supported_features(&b.supported_features),
            b.fenced,
            b.in_controlled_shutdown,
            b.is_migrating_zk_broker,
            uuid_list(&b.directories),
        );
        (id.to_string(), file(text))
    });
    let controllers = image.cluster.controllers.iter().map(|(id, c)| {
        let text = format!(
            "ControllerRegistration(id={}, incarnationId={}, zkMigrationReady={}, listeners={}, \
             supportedFeatures={})",
            c.id,
            to_kafka_string(&c.incarnation_id),
            c.zk_migration_ready,
            listeners(&c.listeners),
            supported_features(&c.supported_features),
        );
        (id.to_string(), file(text))
    });
    dir([
        ("brokers".to_owned(), dir(brokers)),
        ("controllers".to_owned(), dir(controllers)),
    ])
}

fn partition(p: &PartitionRegistration) -> String {
    format!(
        "PartitionRegistration(replicas={}, directories={}, isr={}, removingReplicas={}, \
         addingReplicas={}, elr={}, lastKnownElr={}, leader={}, leaderRecoveryState={}, \
         leaderEpoch={}, partitionEpoch={})",
        int_list(&p.replicas),
        uuid_list(&p.directories),
        int_list(&p.isr),
        int_list(&p.removing_replicas),
        int_list(&p.adding_replicas),
        int_list(&p.elr),
        int_list(&p.last_known_elr),
        p.leader,
        match p.leader_recovery_state {
            LeaderRecoveryState::Recovered => "RECOVERED",
            LeaderRecoveryState::Recovering => "RECOVERING",
        },
        p.leader_epoch,
        p.partition_epoch,
    )
}

fn topic(t: &TopicImage) -> Node {
    let mut children = vec![
        ("name".to_owned(), file(t.name.clone())),
        ("id".to_owned(), file(to_kafka_string(&t.id))),
    ];
    for (id, p) in &t.partitions {
        children.push((id.to_string(), file(partition(p))));
    }
    dir(children)
}

fn topics(image: &MetadataImage) -> Node {
    let by_name = image
        .topics
        .by_name
        .iter()
        .map(|(name, t)| (name.clone(), topic(t)));
    let by_id = image
        .topics
        .by_id
        .iter()
        .map(|(id, t)| (to_kafka_string(id), topic(t)));
    dir([
        ("byName".to_owned(), dir(by_name)),
        ("byId".to_owned(), dir(by_id)),
    ])
}

/// `ConfigResource.Type` names.
fn config_type_name(code: i8) -> String {
    match code {
        0 => "UNKNOWN".to_owned(),
        2 => "TOPIC".to_owned(),
        4 => "BROKER".to_owned(),
        8 => "BROKER_LOGGER".to_owned(),
        16 => "CLIENT_METRICS".to_owned(),
        other => other.to_string(),
    }
}

fn configs(image: &MetadataImage) -> Node {
    dir(image.configs.resources.iter().map(|(resource, data)| {
        let type_name = config_type_name(resource.resource_type.0);
        let name = if resource.name.is_empty() {
            type_name
        } else {
            format!("{type_name}:{}", resource.name)
        };
        let values = data.iter().map(|(k, v)| (k.clone(), file(v.clone())));
        (name, dir(values))
    }))
}

/// Kafka's `ClientQuotasImageNode` escaping: `\`, `(` and `)` get a backslash.
fn escape_quota_name(name: &str) -> String {
    name.replace('\\', "\\\\")
        .replace('(', "\\(")
        .replace(')', "\\)")
}

fn client_quotas(image: &MetadataImage) -> Node {
    dir(image.client_quotas.entities.iter().map(|(entity, quotas)| {
        // clientId(…), then ip(…), then user(…), joined by `_`.
        let mut parts = Vec::new();
        for (entity_type, label) in [("client-id", "clientId"), ("ip", "ip"), ("user", "user")] {
            if let Some(name) = entity.0.get(entity_type) {
                let name = name.as_deref().unwrap_or_default();
                parts.push(format!("{label}({})", escape_quota_name(name)));
            }
        }
        let values = quotas
            .iter()
            .map(|(key, value)| (key.clone(), file(java_double(*value))));
        (parts.join("_"), dir(values))
    }))
}

fn acl_name(kind: &str, code: i8) -> String {
    let names: &[&str] = match kind {
        "resource" => &[
            "UNKNOWN",
            "ANY",
            "TOPIC",
            "GROUP",
            "CLUSTER",
            "TRANSACTIONAL_ID",
            "DELEGATION_TOKEN",
            "USER",
        ],
        "pattern" => &["UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"],
        "operation" => &[
            "UNKNOWN",
            "ANY",
            "ALL",
            "READ",
            "WRITE",
            "CREATE",
            "DELETE",
            "ALTER",
            "DESCRIBE",
            "CLUSTER_ACTION",
            "DESCRIBE_CONFIGS",
            "ALTER_CONFIGS",
            "IDEMPOTENT_WRITE",
            "CREATE_TOKENS",
            "DESCRIBE_TOKENS",
        ],
        _ => &["UNKNOWN", "ANY", "DENY", "ALLOW"],
    };
    usize::try_from(code)
        .ok()
        .and_then(|i| names.get(i))
        .map_or_else(|| "UNKNOWN".to_owned(), |n| (*n).to_owned())
}

fn acls(image: &MetadataImage) -> Node {
    dir(image.acls.acls.iter().map(|(id, acl)| {
        let text = format!(
            "StandardAcl(resourceType={}, resourceName={}, patternType={}, principal={}, \
             host={}, operation={}, permissionType={})",
            acl_name("resource", acl.resource_type),
            acl.resource_name,
            acl_name("pattern", acl.pattern_type),
            acl.principal,
            acl.host,
            acl_name("operation", acl.operation),
            acl_name("permission", acl.permission_type),
        );
        (to_kafka_string(id), file(text))
    }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn scram(image: &MetadataImage) -> Node {
    let mechanism = |code: i8| {
        dir(image
            .scram
            .credentials
            .iter()
            .filter(|((m, _), _)| *m == code)
            .map(|((_, user), c)| {
                let text = format!(
                    "ScramCredentialData(salt={}, storedKey={}, serverKey={}, iterations={})",
                    hex(&c.salt),
                    hex(&c.stored_key),
                    hex(&c.server_key),
                    c.iterations
                );
                (user.clone(), file(text))
            }))
    };
    dir([
        ("SCRAM-SHA-256".to_owned(), mechanism(1)),
        ("SCRAM-SHA-512".to_owned(), mechanism(2)),
    ])
}

fn delegation_tokens(image: &MetadataImage) -> Node {
    dir(image.delegation_tokens.tokens.iter().map(|(id, t)| {
        let text = format!(
            "DelegationTokenDatatokenId={id}(owner={}(tokenRequester={}(renewers={}, \
             issueTimestamp={}, maxTimestamp={}), expiryTimestamp={}",
            t.owner,
            t.requester,
            t.renewers.join(" "),
            t.issue_timestamp_ms,
            t.max_timestamp_ms,
            t.expiration_timestamp_ms,
        );
        (id.clone(), file(text))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_print_like_iso_zoned_date_time() {
        assert_eq!(
            iso_zoned_utc(1_795_969_359_023),
            "2026-11-29T16:22:39.023Z[UTC]"
        );
        assert_eq!(iso_zoned_utc(0), "1970-01-01T00:00:00Z[UTC]");
        assert_eq!(iso_zoned_utc(-1), "1969-12-31T23:59:59.999Z[UTC]");
        assert_eq!(iso_zoned_utc(1_500), "1970-01-01T00:00:01.5Z[UTC]");
    }

    #[test]
    fn the_empty_image_has_kafkas_top_level_layout() {
        let root = root(&MetadataImage::empty());
        let image = root.child("image").expect("image");
        assert_eq!(
            image.child_names(),
            [
                "acls",
                "clientQuotas",
                "cluster",
                "configs",
                "delegationToken",
                "features",
                "producerIds",
                "provenance",
                "scram",
                "topics"
            ]
        );
    }
}
