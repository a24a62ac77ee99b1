//! Metadata and KRaft control records as JSON, the way Kafka 3.9's generated `*JsonConverter`
//! classes write them: field names lower-camel as in the schema JSON, schema field order, fields
//! absent from the record's version left out, tagged fields only when they differ from their
//! default, uuids in Kafka's base64 text, bytes in standard base64, no whitespace.

use std::fmt::Write as _;

use base64::Engine as _;
use krust_metadata::kafka_uuid::to_kafka_string;
use krust_metadata::records::{
    MetadataRecord, QuotaEntity, RegistrationEndpoint, RegistrationFeature,
};
use uuid::Uuid;

/// A JSON object under construction: `{"a":1,"b":"x"}`.
pub struct JsonObject {
    out: String,
    empty: bool,
}

impl Default for JsonObject {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonObject {
    /// `{`.
    #[must_use]
    pub fn new() -> Self {
        JsonObject {
            out: String::from("{"),
            empty: true,
        }
    }

    fn key(&mut self, name: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        push_string(&mut self.out, name);
        self.out.push(':');
    }

    /// A field whose value is already JSON text.
    pub fn raw(&mut self, name: &str, json: &str) -> &mut Self {
        self.key(name);
        self.out.push_str(json);
        self
    }

    /// An integer or boolean field.
    pub fn num(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        self.key(name);
        let _ = write!(self.out, "{value}");
        self
    }

    /// A string field.
    pub fn str(&mut self, name: &str, value: &str) -> &mut Self {
        self.key(name);
        push_string(&mut self.out, value);
        self
    }

    /// A nullable string field.
    pub fn opt_str(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.str(name, v),
            None => self.raw(name, "null"),
        }
    }

    /// A uuid field in Kafka's text form.
    pub fn uuid(&mut self, name: &str, value: &Uuid) -> &mut Self {
        self.str(name, &to_kafka_string(value))
    }

    /// `}`: the finished text.
    #[must_use]
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// Appends `value` as a JSON string, escaped as Jackson escapes it.
pub fn push_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON string literal.
#[must_use]
pub fn string(value: &str) -> String {
    let mut out = String::new();
    push_string(&mut out, value);
    out
}

fn array<T>(items: &[T], render: impl Fn(&T) -> String) -> String {
    let parts: Vec<String> = items.iter().map(render).collect();
    format!("[{}]", parts.join(","))
}

fn ints(items: &[i32]) -> String {
    array(items, ToString::to_string)
}

fn uuids(items: &[Uuid]) -> String {
    array(items, |u| string(&to_kafka_string(u)))
}

fn bytes(value: &[u8]) -> String {
    string(&base64::engine::general_purpose::STANDARD.encode(value))
}

/// Java's `Double.toString`: shortest digits that round-trip, plain notation for
/// 10^-3 ≤ |v| < 10^7 (always with a fraction digit), `d.dddE±n` otherwise.
#[must_use]
pub fn java_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let magnitude = value.abs();
    if (1e-3..1e7).contains(&magnitude) {
        let text = format!("{value}");
        if text.contains('.') {
            text
        } else {
            format!("{text}.0")
        }
    } else {
        // Rust writes `1.5e-7` / `1e7`; Java writes `1.5E-7` / `1.0E7`.
        let text = format!("{value:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((text.as_str(), "0"));
        if mantissa.contains('.') {
            format!("{mantissa}E{exponent}")
        } else {
            format!("{mantissa}.0E{exponent}")
        }
    }
}

fn endpoints(items: &[RegistrationEndpoint]) -> String {
    array(items, |e| {
        let mut o = JsonObject::new();
        o.str("name", &e.name)
            .str("host", &e.host)
            .num("port", e.port)
            .num("securityProtocol", e.security_protocol);
        o.finish()
    })
}

fn features(items: &[RegistrationFeature]) -> String {
    array(items, |f| {
        let mut o = JsonObject::new();
        o.str("name", &f.name)
            .num("minSupportedVersion", f.min_supported_version)
            .num("maxSupportedVersion", f.max_supported_version);
        o.finish()
    })
}

fn quota_entities(items: &[QuotaEntity]) -> String {
    array(items, |e| {
        let mut o = JsonObject::new();
        o.str("entityType", &e.entity_type)
            .opt_str("entityName", e.entity_name.as_deref());
        o.finish()
    })
}

/// `record` at `version` as Kafka's `MetadataJsonConverters.writeJson` renders it.
#[must_use]
#[allow(clippy::too_many_lines)] // one arm per record type, each a flat field list
pub fn metadata_record(record: &MetadataRecord, version: i16) -> String {
    let mut o = JsonObject::new();
    match record {
        MetadataRecord::RegisterBroker(r) => {
            o.num("brokerId", r.broker_id);
            if version >= 2 {
                o.num("isMigratingZkBroker", r.is_migrating_zk_broker);
            }
            o.uuid("incarnationId", &r.incarnation_id)
                .num("brokerEpoch", r.broker_epoch)
                .raw("endPoints", &endpoints(&r.end_points))
                .raw("features", &features(&r.features))
                .opt_str("rack", r.rack.as_deref())
                .num("fenced", r.fenced);
            if version >= 1 {
                o.num("inControlledShutdown", r.in_controlled_shutdown);
            }
            if version >= 3 && !r.log_dirs.is_empty() {
                o.raw("logDirs", &uuids(&r.log_dirs));
            }
        }
        MetadataRecord::UnregisterBroker(r) => {
            o.num("brokerId", r.broker_id)
                .num("brokerEpoch", r.broker_epoch);
        }
        MetadataRecord::Topic(r) => {
            o.str("name", &r.name).uuid("topicId", &r.topic_id);
        }
        MetadataRecord::Partition(r) => {
            o.num("partitionId", r.partition_id)
                .uuid("topicId", &r.topic_id)
                .raw("replicas", &ints(&r.replicas))
                .raw("isr", &ints(&r.isr))
                .raw("removingReplicas", &ints(&r.removing_replicas))
                .raw("addingReplicas", &ints(&r.adding_replicas))
                .num("leader", r.leader);
            if r.leader_recovery_state != 0 {
                o.num("leaderRecoveryState", r.leader_recovery_state);
            }
            o.num("leaderEpoch", r.leader_epoch)
                .num("partitionEpoch", r.partition_epoch);
            if version >= 1 {
                o.raw("directories", &uuids(&r.directories));
            }
            if version >= 2 {
                if let Some(elr) = &r.eligible_leader_replicas {
                    o.raw("eligibleLeaderReplicas", &ints(elr));
                }
                if let Some(elr) = &r.last_known_elr {
                    o.raw("lastKnownElr", &ints(elr));
                }
            }
        }
        MetadataRecord::Config(r) => {
            o.num("resourceType", r.resource_type)
                .str("resourceName", &r.resource_name)
                .str("name", &r.name)
                .opt_str("value", r.value.as_deref());
        }
        MetadataRecord::PartitionChange(r) => {
            o.num("partitionId", r.partition_id)
                .uuid("topicId", &r.topic_id);
            if let Some(v) = &r.isr {
                o.raw("isr", &ints(v));
            }
            if r.leader != krust_metadata::records::NO_LEADER_CHANGE {
                o.num("leader", r.leader);
            }
            if let Some(v) = &r.replicas {
                o.raw("replicas", &ints(v));
            }
            if let Some(v) = &r.removing_replicas {
                o.raw("removingReplicas", &ints(v));
            }
            if let Some(v) = &r.adding_replicas {
                o.raw("addingReplicas", &ints(v));
            }
            if r.leader_recovery_state != -1 {
                o.num("leaderRecoveryState", r.leader_recovery_state);
            }
            if version >= 1
                && let Some(v) = &r.directories
            {
                o.raw("directories", &uuids(v));
            }
            if version >= 2 {
                if let Some(v) = &r.eligible_leader_replicas {
                    o.raw("eligibleLeaderReplicas", &ints(v));
                }
                if let Some(v) = &r.last_known_elr {
                    o.raw("lastKnownElr", &ints(v));
                }
            }
        }
        MetadataRecord::FenceBroker(r) | MetadataRecord::UnfenceBroker(r) => {
            o.num("id", r.id).num("epoch", r.epoch);
        }
        MetadataRecord::RemoveTopic(r) => {
            o.uuid("topicId", &r.topic_id);
        }
        MetadataRecord::DelegationToken(r) => {
            o.str("owner", &r.owner)
                .str("requester", &r.requester)
                .raw("renewers", &array(&r.renewers, |s| string(s)))
                .num("issueTimestamp", r.issue_timestamp)
                .num("maxTimestamp", r.max_timestamp)
                .num("expirationTimestamp", r.expiration_timestamp)
                .str("tokenId", &r.token_id);
        }
        MetadataRecord::UserScramCredential(r) => {
            o.str("name", &r.name)
                .num("mechanism", r.mechanism)
                .raw("salt", &bytes(&r.salt))
                .raw("storedKey", &bytes(&r.stored_key))
                .raw("serverKey", &bytes(&r.server_key))
                .num("iterations", r.iterations);
        }
        MetadataRecord::FeatureLevel(r) => {
            o.str("name", &r.name).num("featureLevel", r.feature_level);
        }
        MetadataRecord::ClientQuota(r) => {
            o.raw("entity", &quota_entities(&r.entity))
                .str("key", &r.key)
                .raw("value", &java_double(r.value))
                .num("remove", r.remove);
        }
        MetadataRecord::ProducerIds(r) => {
            o.num("brokerId", r.broker_id)
                .num("brokerEpoch", r.broker_epoch)
                .num("nextProducerId", r.next_producer_id);
        }
        MetadataRecord::BrokerRegistrationChange(r) => {
            o.num("brokerId", r.broker_id)
                .num("brokerEpoch", r.broker_epoch);
            if r.fenced != 0 {
                o.num("fenced", r.fenced);
            }
            if version >= 1 && r.in_controlled_shutdown != 0 {
                o.num("inControlledShutdown", r.in_controlled_shutdown);
            }
            if version >= 2 && !r.log_dirs.is_empty() {
                o.raw("logDirs", &uuids(&r.log_dirs));
            }
        }
        MetadataRecord::AccessControlEntry(r) => {
            o.uuid("id", &r.id)
                .num("resourceType", r.resource_type)
                .str("resourceName", &r.resource_name)
                .num("patternType", r.pattern_type)
                .str("principal", &r.principal)
                .str("host", &r.host)
                .num("operation", r.operation)
                .num("permissionType", r.permission_type);
        }
        MetadataRecord::RemoveAccessControlEntry(r) => {
            o.uuid("id", &r.id);
        }
        MetadataRecord::NoOp(_) | MetadataRecord::EndTransaction(_) => {}
        MetadataRecord::ZkMigrationState(r) => {
            o.num("zkMigrationState", r.zk_migration_state);
        }
        MetadataRecord::RemoveUserScramCredential(r) => {
            o.str("name", &r.name).num("mechanism", r.mechanism);
        }
        MetadataRecord::BeginTransaction(r) => {
            if let Some(name) = &r.name {
                o.str("name", name);
            }
        }
        MetadataRecord::AbortTransaction(r) => {
            if let Some(reason) = &r.reason {
                o.str("reason", reason);
            }
        }
        MetadataRecord::RemoveDelegationToken(r) => {
            o.str("tokenId", &r.token_id);
        }
        MetadataRecord::RegisterController(r) => {
            o.num("controllerId", r.controller_id)
                .uuid("incarnationId", &r.incarnation_id)
                .num("zkMigrationReady", r.zk_migration_ready)
                .raw("endPoints", &endpoints(&r.end_points))
                .raw("features", &features(&r.features));
        }
    }
    o.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_double_matches_double_to_string() {
        for (value, java) in [
            (1024.0, "1024.0"),
            (0.5, "0.5"),
            (1e7, "1.0E7"),
            (12_345_678.9, "1.23456789E7"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (-2.5, "-2.5"),
            (0.0, "0.0"),
        ] {
            assert_eq!(java_double(value), java, "{value}");
        }
    }

    #[test]
    fn strings_are_escaped_like_jackson() {
        assert_eq!(string("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
