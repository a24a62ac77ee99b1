//! ACL znodes: `/kafka-acl/<ResourceType>/<name>` (literal patterns) and
//! `/kafka-acl-extended/prefixed/<ResourceType>/<name>`, each holding
//! `{"acls":[{"principal":…,"permissionType":…,"host":…,"operation":…}],"version":1}`; the
//! names Kafka uses for resource types, operations and permissions; and the two ACL change
//! notifications.

use super::json::{Fields, JsonObject, parse_object};
use super::{ZNodeError, paths};

/// Kafka's `ResourceType` codes and the Pascal-case names its ZooKeeper store uses.
const RESOURCE_TYPES: [(i8, &str, &str); 6] = [
    (2, "Topic", "TOPIC"),
    (3, "Group", "GROUP"),
    (4, "Cluster", "CLUSTER"),
    (5, "TransactionalId", "TRANSACTIONAL_ID"),
    (6, "DelegationToken", "DELEGATION_TOKEN"),
    (7, "User", "USER"),
];

/// Kafka's `AclOperation` codes and Pascal-case names (`ALL` … `DESCRIBE_TOKENS`).
const OPERATIONS: [(i8, &str); 13] = [
    (2, "All"),
    (3, "Read"),
    (4, "Write"),
    (5, "Create"),
    (6, "Delete"),
    (7, "Alter"),
    (8, "Describe"),
    (9, "ClusterAction"),
    (10, "DescribeConfigs"),
    (11, "AlterConfigs"),
    (12, "IdempotentWrite"),
    (13, "CreateTokens"),
    (14, "DescribeTokens"),
];

/// Kafka's `AclPermissionType` codes and names.
const PERMISSIONS: [(i8, &str); 2] = [(2, "Deny"), (3, "Allow")];

/// `PatternType.LITERAL`.
pub const PATTERN_LITERAL: i8 = 3;
/// `PatternType.PREFIXED`.
pub const PATTERN_PREFIXED: i8 = 4;

/// Kafka's lookup: the exact Pascal name, else the upper-cased name without underscores
/// (`SecurityUtils.valueFromMap`).
fn lookup(name: &str, table: impl Iterator<Item = (i8, &'static str)>) -> Option<i8> {
    let folded: String = name
        .chars()
        .filter(|c| *c != '_')
        .collect::<String>()
        .to_uppercase();
    let mut fallback = None;
    for (code, pascal) in table {
        if pascal == name {
            return Some(code);
        }
        if pascal.to_uppercase() == folded {
            fallback = Some(code);
        }
    }
    fallback
}

/// The Pascal-case name of a resource type code (`Topic`, `TransactionalId`, …).
#[must_use]
pub fn resource_type_name(code: i8) -> Option<&'static str> {
    RESOURCE_TYPES.iter().find(|t| t.0 == code).map(|t| t.1)
}

/// The enum name of a resource type code (`TOPIC`, `TRANSACTIONAL_ID`, …), used by change
/// notifications.
#[must_use]
pub fn resource_type_enum_name(code: i8) -> Option<&'static str> {
    RESOURCE_TYPES.iter().find(|t| t.0 == code).map(|t| t.2)
}

/// The code of a resource type name (Pascal case, or any case without underscores, or the enum
/// name).
#[must_use]
pub fn resource_type_code(name: &str) -> Option<i8> {
    lookup(name, RESOURCE_TYPES.iter().map(|t| (t.0, t.1)))
}

/// The Pascal-case name of an operation code.
#[must_use]
pub fn operation_name(code: i8) -> Option<&'static str> {
    OPERATIONS.iter().find(|t| t.0 == code).map(|t| t.1)
}

/// The code of an operation name.
#[must_use]
pub fn operation_code(name: &str) -> Option<i8> {
    lookup(name, OPERATIONS.iter().copied())
}

/// The name of a permission type code (`Allow`, `Deny`).
#[must_use]
pub fn permission_type_name(code: i8) -> Option<&'static str> {
    PERMISSIONS.iter().find(|t| t.0 == code).map(|t| t.1)
}

/// The code of a permission type name.
#[must_use]
pub fn permission_type_code(name: &str) -> Option<i8> {
    lookup(name, PERMISSIONS.iter().copied())
}

/// The ACL store of a pattern type: `/kafka-acl` for literal, `/kafka-acl-extended/prefixed`
/// for prefixed; `None` for the others (match/any are filters, not stored).
#[must_use]
pub fn store_path(pattern_type: i8) -> Option<&'static str> {
    match pattern_type {
        PATTERN_LITERAL => Some(paths::LITERAL_ACLS),
        PATTERN_PREFIXED => Some(paths::PREFIXED_ACLS),
        _ => None,
    }
}

/// The znode of a resource pattern: `<store>/<ResourceType>/<name>` (the name as is).
#[must_use]
pub fn resource_path(resource_type: i8, name: &str, pattern_type: i8) -> Option<String> {
    Some(format!(
        "{}/{}/{name}",
        store_path(pattern_type)?,
        resource_type_name(resource_type)?
    ))
}

/// One access control entry of a resource znode.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclEntry {
    /// `User:alice` (type and name).
    pub principal: String,
    /// The host (`*` for any).
    pub host: String,
    /// The operation code.
    pub operation: i8,
    /// The permission type code.
    pub permission_type: i8,
}

/// The content of a resource znode (version 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclZNode {
    /// The entries (Kafka holds a set: the order is not meaningful).
    pub acls: Vec<AclEntry>,
}

impl AclZNode {
    /// Kafka's bytes: `{"acls":[…],"version":1}` with each entry
    /// `{"principal":…,"permissionType":…,"host":…,"operation":…}` (the orders of Java
    /// `HashMap`s of these keys); entries in the given order.
    ///
    /// # Errors
    /// `None` if an entry holds an operation or permission code without a name.
    #[must_use]
    pub fn encode(&self) -> Option<Vec<u8>> {
        let mut entries = Vec::with_capacity(self.acls.len());
        for acl in &self.acls {
            entries.push(
                JsonObject::new()
                    .str("principal", &acl.principal)
                    .str("permissionType", permission_type_name(acl.permission_type)?)
                    .str("host", &acl.host)
                    .str("operation", operation_name(acl.operation)?)
                    .finish(),
            );
        }
        Some(
            JsonObject::new()
                .raw("acls", &format!("[{}]", entries.join(",")))
                .int("version", 1)
                .finish()
                .into_bytes(),
        )
    }

    /// Decodes as Kafka's `AclEntry.fromBytes` (empty data: no ACLs; version must be 1; a
    /// principal must be `type:name`).
    ///
    /// # Errors
    /// Not JSON, another version, a missing field, an unknown operation or permission, or a
    /// principal without `:`.
    pub fn decode(path: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let version = f.version()?;
        if version != 1 {
            return Err(ZNodeError::version(path, version));
        }
        let items = f
            .required("acls", "an array")?
            .as_array()
            .ok_or_else(|| f.error("acls", "an array"))?;
        let mut acls = Vec::with_capacity(items.len());
        for item in items {
            let obj = item
                .as_object()
                .ok_or_else(|| f.error("acls", "an array of objects"))?;
            let e = Fields::new(path, obj);
            let principal = e.str("principal")?;
            if !principal.contains(':') {
                return Err(ZNodeError::invalid(path, "principal", principal));
            }
            let operation = e.str("operation")?;
            let permission = e.str("permissionType")?;
            acls.push(AclEntry {
                principal: principal.to_owned(),
                host: e.str("host")?.to_owned(),
                operation: operation_code(operation)
                    .ok_or_else(|| ZNodeError::invalid(path, "operation", operation))?,
                permission_type: permission_type_code(permission)
                    .ok_or_else(|| ZNodeError::invalid(path, "permission type", permission))?,
            });
        }
        Ok(Self { acls })
    }
}

/// A resource pattern named by an ACL change notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclChange {
    /// Resource type code.
    pub resource_type: i8,
    /// Resource name.
    pub name: String,
    /// Pattern type code.
    pub pattern_type: i8,
}

impl AclChange {
    /// The notification's path prefix (a sequential node) and bytes: literal →
    /// `/kafka-acl-changes/acl_changes_` + `TOPIC:foo`; prefixed →
    /// `/kafka-acl-extended-changes/acl_changes_` +
    /// `{"version":1,"resourceType":"TOPIC","name":"foo","patternType":"PREFIXED"}`.
    /// `None` for an unknown resource or pattern type.
    #[must_use]
    pub fn encode(&self) -> Option<(&'static str, Vec<u8>)> {
        let resource_type = resource_type_enum_name(self.resource_type)?;
        match self.pattern_type {
            PATTERN_LITERAL => Some((
                paths::LITERAL_ACL_CHANGE_PREFIX,
                format!("{resource_type}:{}", self.name).into_bytes(),
            )),
            PATTERN_PREFIXED => Some((
                paths::EXTENDED_ACL_CHANGE_PREFIX,
                JsonObject::new()
                    .int("version", 1)
                    .str("resourceType", resource_type)
                    .str("name", &self.name)
                    .str("patternType", "PREFIXED")
                    .finish()
                    .into_bytes(),
            )),
            _ => None,
        }
    }

    /// Decodes a literal change (`ResourceType:name`).
    ///
    /// # Errors
    /// No `:` or an unknown resource type.
    pub fn decode_literal(path: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let text = String::from_utf8_lossy(bytes);
        let (kind, name) = text
            .split_once(':')
            .ok_or_else(|| ZNodeError::invalid(path, "ACL change", text.as_ref()))?;
        Ok(Self {
            resource_type: resource_type_code(kind)
                .ok_or_else(|| ZNodeError::invalid(path, "resource type", kind))?,
            name: name.to_owned(),
            pattern_type: PATTERN_LITERAL,
        })
    }

    /// Decodes an extended change (version 1 JSON).
    ///
    /// # Errors
    /// Not JSON, a version above 1, or unknown types.
    pub fn decode_extended(path: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let version = f.version()?;
        if version > 1 {
            return Err(ZNodeError::version(path, version));
        }
        let kind = f.str("resourceType")?;
        let pattern = f.str("patternType")?;
        let pattern_type = match pattern.to_uppercase().as_str() {
            "LITERAL" => PATTERN_LITERAL,
            "PREFIXED" => PATTERN_PREFIXED,
            _ => return Err(ZNodeError::invalid(path, "pattern type", pattern)),
        };
        Ok(Self {
            resource_type: resource_type_code(kind)
                .ok_or_else(|| ZNodeError::invalid(path, "resource type", kind))?,
            name: f.str("name")?.to_owned(),
            pattern_type,
        })
    }
}
