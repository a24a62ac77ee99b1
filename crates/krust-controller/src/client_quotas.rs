//! AlterClientQuotas (Kafka 3.9 `ClientQuotaControlManager.alterClientQuotas`): quota
//! changes per entity (`user`, `client-id`, `ip`; a null name is the default entity) in, one
//! `ClientQuotaRecord` per changed key out, one result per distinct entity.
//!
//! Per entity, in Kafka's order: a key given twice ("Ignoring duplicate entity …"), the same
//! entity twice in the request (the same), an empty entity, an unknown entity type, an empty
//! name, `ip` mixed with `user`/`client-id`, an `ip` name that is not an address, then each key
//! (known for the entity kind, value > 0, integral and in range for LONG/INT keys). A
//! refused entity writes nothing; removing an unset key, or setting the current value, writes
//! nothing. `validate_only` writes nothing. All errors are `INVALID_REQUEST`.
//!
//! Kafka resolves an `ip` name that is not a literal address through DNS; the sans-IO
//! controller does not, so only IPv4/IPv6 literals are accepted.
//!
//! Results, record entities and record keys come in the iteration order of the Java
//! `HashMap`s Kafka keeps them in.

use std::net::IpAddr;

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::client_quotas::ClientQuotaEntity;
use krust_metadata::records::{ClientQuotaRecord, MetadataRecord, QuotaEntity};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};
use krust_net::error_codes::INVALID_REQUEST;

use crate::api_error::{
    ApiError, java_hash_map_order, java_string_hash, java_string_map_order, java_table_size_for,
};

/// `ClientQuotaEntity.USER`.
pub const USER: &str = "user";
/// `ClientQuotaEntity.CLIENT_ID`.
pub const CLIENT_ID: &str = "client-id";
/// `ClientQuotaEntity.IP`.
pub const IP: &str = "ip";

/// The ConfigDef type of a quota key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuotaType {
    Long,
    Int,
    Double,
}

/// `QuotaConfigs.userAndClientQuotaConfigs()`.
const USER_AND_CLIENT_KEYS: [(&str, QuotaType); 4] = [
    ("producer_byte_rate", QuotaType::Long),
    ("consumer_byte_rate", QuotaType::Long),
    ("request_percentage", QuotaType::Double),
    ("controller_mutation_rate", QuotaType::Double),
];
/// `QuotaConfigs.ipConfigs()`.
const IP_KEYS: [(&str, QuotaType); 1] = [("connection_creation_rate", QuotaType::Int)];

/// One entity as Kafka's request parsing builds it: type → name, a repeated type keeping its
/// first position and its last name (a Java `HashMap`), in insertion order.
#[derive(Debug, Clone, PartialEq)]
struct Entity(Vec<(String, Option<String>)>);

impl Entity {
    fn from_request(
        entity: &[kafka_protocol::messages::alter_client_quotas_request::EntityData],
    ) -> Self {
        let mut entries: Vec<(String, Option<String>)> = Vec::new();
        for e in entity {
            let name = e.entity_name.as_ref().map(ToString::to_string);
            match entries
                .iter_mut()
                .find(|(t, _)| t.as_str() == e.entity_type.as_str())
            {
                Some(existing) => existing.1 = name,
                None => entries.push((e.entity_type.to_string(), name)),
            }
        }
        // Java iterates the map (created with the request's entity count) in bucket order.
        let keys: Vec<&str> = entries.iter().map(|(t, _)| t.as_str()).collect();
        let order = java_string_map_order(&keys, java_table_size_for(entity.len()), entries.len());
        Entity(order.into_iter().map(|i| entries[i].clone()).collect())
    }

    fn same(&self, other: &Entity) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|e| other.0.contains(e))
    }

    /// `ClientQuotaEntity.hashCode()`: `Objects.hash(entries)`.
    fn java_hash(&self) -> i32 {
        let sum = self.0.iter().fold(0i32, |sum, (t, n)| {
            sum.wrapping_add(java_string_hash(t) ^ n.as_deref().map_or(0, java_string_hash))
        });
        sum.wrapping_add(31)
    }

    /// `ClientQuotaEntity.toString()`.
    fn java_string(&self) -> String {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("null")))
            .collect();
        format!("ClientQuotaEntity(entries={{{}}})", entries.join(", "))
    }

    fn image_key(&self) -> ClientQuotaEntity {
        ClientQuotaEntity(self.0.iter().cloned().collect())
    }
}

/// The records and the response of one AlterClientQuotas.
#[must_use]
pub fn alter_client_quotas(
    image: &MetadataImage,
    request: &AlterClientQuotasRequest,
) -> (Vec<ApiMessageAndVersion>, AlterClientQuotasResponse) {
    // Results by entity, in first-insertion order (a Java HashMap keeps a key's position).
    let mut results: Vec<(Entity, ApiError)> = Vec::new();
    let mut records = Vec::new();
    let set =
        |results: &mut Vec<(Entity, ApiError)>, entity: &Entity, error: ApiError| match results
            .iter_mut()
            .find(|(e, _)| e.same(entity))
        {
            Some(slot) => slot.1 = error,
            None => results.push((entity.clone(), error)),
        };
    for entry in &request.entries {
        let entity = Entity::from_request(&entry.entity);
        // Key → value (None = remove), first value of a repeated key kept.
        let mut alterations: Vec<(String, Option<f64>)> = Vec::new();
        for op in &entry.ops {
            if alterations
                .iter()
                .any(|(k, _)| k.as_str() == op.key.as_str())
            {
                let message = format!(
                    "Duplicate quota key {} not updating quota for this entity {}",
                    op.key,
                    entity.java_string()
                );
                set(
                    &mut results,
                    &entity,
                    ApiError::new(INVALID_REQUEST, message),
                );
            } else {
                alterations.push((op.key.to_string(), (!op.remove).then_some(op.value)));
            }
        }
        if results.iter().any(|(e, _)| e.same(&entity)) {
            let message = format!("Ignoring duplicate entity {}", entity.java_string());
            set(
                &mut results,
                &entity,
                ApiError::new(INVALID_REQUEST, message),
            );
            continue;
        }
        // Kafka iterates the alterations map (created with the op count) in bucket order.
        let keys: Vec<&str> = alterations.iter().map(|(k, _)| k.as_str()).collect();
        let order = java_string_map_order(&keys, java_table_size_for(entry.ops.len()), keys.len());
        let alterations: Vec<(String, Option<f64>)> =
            order.into_iter().map(|i| alterations[i].clone()).collect();
        match alter_entity(image, &entity, &alterations) {
            Ok(entity_records) => {
                records.extend(entity_records);
                set(&mut results, &entity, ApiError::NONE);
            }
            Err(error) => set(&mut results, &entity, error),
        }
    }
    if request.validate_only {
        records.clear();
    }
    let hashes: Vec<i32> = results.iter().map(|(e, _)| e.java_hash()).collect();
    let order = java_hash_map_order(&hashes, 16, results.len());
    let entries = order
        .into_iter()
        .map(|i| {
            let (entity, error) = &results[i];
            EntryData::default()
                .with_error_code(error.code)
                .with_error_message(error.message_bytes())
                .with_entity(
                    entity
                        .0
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(StrBytes::from_string(t.clone()))
                                .with_entity_name(n.clone().map(StrBytes::from_string))
                        })
                        .collect(),
                )
        })
        .collect();
    (
        records,
        AlterClientQuotasResponse::default().with_entries(entries),
    )
}

/// Kafka's `alterClientQuotaEntity`: validation, then a record per changed key.
fn alter_entity(
    image: &MetadataImage,
    entity: &Entity,
    alterations: &[(String, Option<f64>)],
) -> Result<Vec<ApiMessageAndVersion>, ApiError> {
    let invalid = |message: String| ApiError::new(INVALID_REQUEST, message);
    // validateEntity
    if entity.0.is_empty() {
        return Err(invalid("Invalid empty client quota entity".to_owned()));
    }
    for (entity_type, name) in &entity.0 {
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Err(invalid(format!(
                "Unhandled client quota entity type: {entity_type}"
            )));
        }
        if name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {entity_type} not supported")));
        }
    }
    // configKeysForEntityType
    let has = |t: &str| entity.0.iter().any(|(et, _)| et == t);
    let keys: &[(&str, QuotaType)] = if has(IP) {
        if has(USER) || has(CLIENT_ID) {
            // Kafka's message has no space between "should" and "not".
            return Err(invalid(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
                    .to_owned(),
            ));
        }
        let ip = entity
            .0
            .iter()
            .find(|(t, _)| t == IP)
            .and_then(|(_, n)| n.as_deref());
        if let Some(ip) = ip
            && !is_ip_literal(ip)
        {
            return Err(invalid(format!(
                "{ip} is not a valid IP or resolvable host."
            )));
        }
        &IP_KEYS
    } else {
        &USER_AND_CLIENT_KEYS
    };
    // Record entities come from Kafka's validated map (a HashMap of 3): bucket order.
    let types: Vec<&str> = entity.0.iter().map(|(t, _)| t.as_str()).collect();
    let record_order = java_string_map_order(&types, java_table_size_for(3), types.len());
    let record_entity = || -> Vec<QuotaEntity> {
        record_order
            .iter()
            .map(|&i| QuotaEntity {
                entity_type: entity.0[i].0.clone(),
                entity_name: entity.0[i].1.clone(),
                ..QuotaEntity::default()
            })
            .collect()
    };
    let current = image.client_quotas.entities.get(&entity.image_key());
    let mut records = Vec::new();
    for (key, value) in alterations {
        let current_value = current.and_then(|q| q.get(key)).copied();
        match value {
            None => {
                if current_value.is_some() {
                    records.push(quota_record(record_entity(), key, 0.0, true));
                }
            }
            Some(value) => {
                validate_key_value(keys, key, *value)?;
                let unchanged = current_value.is_some_and(|c| java_double_equals(c, *value));
                if !unchanged {
                    records.push(quota_record(record_entity(), key, *value, false));
                }
            }
        }
    }
    Ok(records)
}

/// `Double.equals`: bit equality with NaNs collapsed (so 0.0 ≠ -0.0, NaN = NaN).
fn java_double_equals(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn is_ip_literal(name: &str) -> bool {
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    bare.parse::<IpAddr>().is_ok()
}

/// Kafka's `validateQuotaKeyValue`.
fn validate_key_value(keys: &[(&str, QuotaType)], key: &str, value: f64) -> Result<(), ApiError> {
    let invalid = |message: String| Err(ApiError::new(INVALID_REQUEST, message));
    let Some((_, kind)) = keys.iter().find(|(k, _)| *k == key) else {
        return invalid(format!("Invalid configuration key {key}"));
    };
    if value <= 0.0 {
        return invalid(format!("Quota {key} must be greater than 0"));
    }
    match kind {
        QuotaType::Double => return Ok(()),
        QuotaType::Int => {
            if value > f64::from(i32::MAX) {
                return invalid(format!("Proposed value for {key} is too large for an INT."));
            }
        }
        QuotaType::Long => {
            // Java compares with (double) Long.MAX_VALUE, which is 2^63.
            if value > 9_223_372_036_854_775_807_f64 {
                return invalid(format!("Proposed value for {key} is too large for a LONG."));
            }
        }
    }
    if (value % 1.0).abs() > 1e-6 {
        return invalid(format!("{key} cannot be a fractional value."));
    }
    Ok(())
}

fn quota_record(
    entity: Vec<QuotaEntity>,
    key: &str,
    value: f64,
    remove: bool,
) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity,
            key: key.to_owned(),
            value,
            remove,
            ..ClientQuotaRecord::default()
        }),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_keys_refuse_fractions_and_huge_values() {
        let keys = &USER_AND_CLIENT_KEYS;
        assert!(validate_key_value(keys, "producer_byte_rate", 1024.0).is_ok());
        let e = validate_key_value(keys, "producer_byte_rate", 1.5).expect_err("fraction");
        assert_eq!(
            e.message.as_deref(),
            Some("producer_byte_rate cannot be a fractional value.")
        );
        let e = validate_key_value(keys, "producer_byte_rate", 1e19).expect_err("huge");
        assert_eq!(
            e.message.as_deref(),
            Some("Proposed value for producer_byte_rate is too large for a LONG.")
        );
        assert!(validate_key_value(keys, "request_percentage", 12.5).is_ok());
        let e = validate_key_value(keys, "request_percentage", 0.0).expect_err("zero");
        assert_eq!(
            e.message.as_deref(),
            Some("Quota request_percentage must be greater than 0")
        );
        let e = validate_key_value(&IP_KEYS, "connection_creation_rate", 3e9).expect_err("int");
        assert_eq!(
            e.message.as_deref(),
            Some("Proposed value for connection_creation_rate is too large for an INT.")
        );
    }

    #[test]
    fn ip_literals() {
        assert!(is_ip_literal("10.1.2.3"));
        assert!(is_ip_literal("::1"));
        assert!(is_ip_literal("[::1]"));
        assert!(!is_ip_literal("not an ip"));
    }
}
