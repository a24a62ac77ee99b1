//! Kafka 3.9's `StandardAuthorizer` over the image's ACLs (facts: security C.1–C.6).
//!
//! [`AclIndex`] holds the ACLs of an [`AclsImage`] by (resource type, pattern type, name), as
//! persistent maps: a copy is O(1) and an ACL change O(log n), so a publisher derives the next
//! index from the last one and readers keep a consistent snapshot. [`Authorizer::authorize`]
//! is Kafka's `StandardAuthorizerData.authorize`: super users first, then the ACLs that apply
//! to a literal resource name — LITERAL ones of that name, LITERAL `*`, PREFIXED ones whose name
//! is a prefix of it — with DENY before ALLOW, ALLOW READ/WRITE/DELETE/ALTER implying DESCRIBE
//! and ALLOW ALTER_CONFIGS implying DESCRIBE_CONFIGS, and `allow.everyone.if.no.acl.found` when
//! no ACL applies to the resource at all. A lookup is one hash probe per length at which some
//! PREFIXED ACL of the type exists, plus two: it does not grow with the number of ACLs.
//!
//! [`AclBindingFilter`] is Kafka's `AclBindingFilter.matches` (DescribeAcls, DeleteAcls).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use imbl::{HashMap, OrdMap};
use uuid::Uuid;

use crate::image::acls::{AclsImage, StandardAcl};

/// `ResourceType` codes (facts C.1).
pub mod resource_type {
    /// Filters only.
    pub const ANY: i8 = 1;
    /// A topic.
    pub const TOPIC: i8 = 2;
    /// A consumer group.
    pub const GROUP: i8 = 3;
    /// The cluster (named [`super::CLUSTER_NAME`]).
    pub const CLUSTER: i8 = 4;
    /// A transactional id.
    pub const TRANSACTIONAL_ID: i8 = 5;
    /// A delegation token.
    pub const DELEGATION_TOKEN: i8 = 6;
    /// A user (delegation tokens for others).
    pub const USER: i8 = 7;
}

/// `PatternType` codes.
pub mod pattern_type {
    /// Filters only: any pattern, exact name.
    pub const ANY: i8 = 1;
    /// Filters only: the ACLs that would apply to a resource of the name.
    pub const MATCH: i8 = 2;
    /// The name itself (or `*`, any name).
    pub const LITERAL: i8 = 3;
    /// Every name that starts with it.
    pub const PREFIXED: i8 = 4;
}

/// `AclPermissionType` codes.
pub mod permission {
    /// Filters only.
    pub const ANY: i8 = 1;
    /// Deny.
    pub const DENY: i8 = 2;
    /// Allow.
    pub const ALLOW: i8 = 3;
}

/// The one CLUSTER resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A LITERAL ACL of this name applies to every resource of its type.
pub const WILDCARD: &str = "*";
/// An ACL for this principal applies to everyone.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// `AclOperation`, the operations an action asks for (codes of facts C.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum AclOperation {
    /// In ACLs: every operation.
    All = 2,
    /// Read.
    Read = 3,
    /// Write.
    Write = 4,
    /// Create.
    Create = 5,
    /// Delete.
    Delete = 6,
    /// Alter.
    Alter = 7,
    /// Describe.
    Describe = 8,
    /// Inter-broker and controller traffic.
    ClusterAction = 9,
    /// Describe configs.
    DescribeConfigs = 10,
    /// Alter configs.
    AlterConfigs = 11,
    /// Idempotent produce.
    IdempotentWrite = 12,
    /// Create delegation tokens.
    CreateTokens = 13,
    /// Describe delegation tokens.
    DescribeTokens = 14,
}

impl AclOperation {
    /// The wire code.
    #[must_use]
    pub fn code(self) -> i8 {
        self as i8
    }

    /// The operations `authorized_operations` reports for a resource type (facts C.6),
    /// empty for an unknown type.
    #[must_use]
    pub fn supported_by(resource_type: i8) -> &'static [AclOperation] {
        use AclOperation::{
            Alter, AlterConfigs, ClusterAction, Create, CreateTokens, Delete, Describe,
            DescribeConfigs, DescribeTokens, IdempotentWrite, Read, Write,
        };
        match resource_type {
            resource_type::TOPIC => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            resource_type::GROUP => &[Read, Describe, Delete],
            resource_type::CLUSTER => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            resource_type::TRANSACTIONAL_ID => &[Describe, Write],
            resource_type::DELEGATION_TOKEN => &[Describe],
            resource_type::USER => &[CreateTokens, DescribeTokens],
            _ => &[],
        }
    }

    /// Whether an ALLOW ACL for `acl_op` grants `self` (an ACL for ALL grants everything).
    fn granted_by_allow(self, acl_op: i8) -> bool {
        use AclOperation::{Alter, AlterConfigs, Delete, Describe, DescribeConfigs, Read, Write};
        acl_op == AclOperation::All.code()
            || match self {
                Describe => [Describe, Read, Write, Delete, Alter]
                    .iter()
                    .any(|op| op.code() == acl_op),
                DescribeConfigs => {
                    acl_op == DescribeConfigs.code() || acl_op == AlterConfigs.code()
                }
                op => op.code() == acl_op,
            }
    }
}

/// `super.users` and `allow.everyone.if.no.acl.found`, typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals (`User:admin`, type included, exact) allowed everything.
    pub super_users: BTreeSet<String>,
    /// Allow an action on a resource no ACL applies to.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses `super.users` (`;`-separated `type:name` principals, blanks ignored) the way
    /// Kafka does; the principal that is not `type:name` is the error.
    ///
    /// # Errors
    /// The offending entry.
    pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, String> {
        value
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                if p.split_once(':').is_some() {
                    Ok(p.to_owned())
                } else {
                    Err(p.to_owned())
                }
            })
            .collect()
    }
}

/// Who asks: the session principal as `type:name` and the client's IP address as text.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// e.g. `User:alice`.
    pub principal: &'a str,
    /// e.g. `127.0.0.1` (Java's `getHostAddress()`).
    pub host: &'a str,
}

type Section = HashMap<String, OrdMap<Uuid, Arc<StandardAcl>>>;

/// The image's ACLs, indexed for [`Authorizer::authorize`] (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct AclIndex {
    by_id: HashMap<Uuid, Arc<StandardAcl>>,
    /// (resource type, pattern type) → name → ACLs.
    sections: BTreeMap<(i8, i8), Section>,
    /// Resource type → byte length of PREFIXED names → how many names of that length.
    prefix_lengths: BTreeMap<i8, BTreeMap<usize, usize>>,
}

impl AclIndex {
    /// The index of an image's ACLs.
    #[must_use]
    pub fn from_image(image: &AclsImage) -> Self {
        let mut index = Self::default();
        for (id, acl) in &image.acls {
            index.insert(*id, Arc::clone(acl));
        }
        index
    }

    /// How many ACLs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// No ACLs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Applies an `AclsDelta`'s changes (id → new ACL, `None` = removed).
    pub fn apply<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a Uuid, &'a Option<Arc<StandardAcl>>)>,
    ) {
        for (id, change) in changes {
            self.remove(*id);
            if let Some(acl) = change {
                self.insert(*id, Arc::clone(acl));
            }
        }
    }

    fn insert(&mut self, id: Uuid, acl: Arc<StandardAcl>) {
        let section = self
            .sections
            .entry((acl.resource_type, acl.pattern_type))
            .or_default();
        let mut acls = section.get(&acl.resource_name).cloned().unwrap_or_default();
        if acls.is_empty() && acl.pattern_type == pattern_type::PREFIXED {
            *self
                .prefix_lengths
                .entry(acl.resource_type)
                .or_default()
                .entry(acl.resource_name.len())
                .or_default() += 1;
        }
        acls.insert(id, Arc::clone(&acl));
        section.insert(acl.resource_name.clone(), acls);
        self.by_id.insert(id, acl);
    }

    fn remove(&mut self, id: Uuid) {
        let Some(acl) = self.by_id.remove(&id) else {
            return;
        };
        let key = (acl.resource_type, acl.pattern_type);
        let Some(section) = self.sections.get_mut(&key) else {
            return;
        };
        let Some(mut acls) = section.get(&acl.resource_name).cloned() else {
            return;
        };
        acls.remove(&id);
        if !acls.is_empty() {
            section.insert(acl.resource_name.clone(), acls);
            return;
        }
        section.remove(&acl.resource_name);
        if section.is_empty() {
            self.sections.remove(&key);
        }
        if acl.pattern_type == pattern_type::PREFIXED
            && let Some(lengths) = self.prefix_lengths.get_mut(&acl.resource_type)
            && let Some(count) = lengths.get_mut(&acl.resource_name.len())
        {
            *count -= 1;
            if *count == 0 {
                lengths.remove(&acl.resource_name.len());
            }
        }
    }

    /// Every ACL, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<StandardAcl>> {
        self.by_id.values()
    }

    fn section(
        &self,
        resource_type: i8,
        pattern: i8,
        name: &str,
    ) -> Option<&OrdMap<Uuid, Arc<StandardAcl>>> {
        self.sections.get(&(resource_type, pattern))?.get(name)
    }

    /// The ACLs that apply to the literal resource `name`: LITERAL `name`, LITERAL `*`, and
    /// PREFIXED ones whose name is a prefix of `name`.
    fn applicable<'a>(
        &'a self,
        resource_type: i8,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Arc<StandardAcl>> + 'a {
        let literal = self.section(resource_type, pattern_type::LITERAL, name);
        let wildcard = if name == WILDCARD {
            None
        } else {
            self.section(resource_type, pattern_type::LITERAL, WILDCARD)
        };
        let prefixed = self
            .prefix_lengths
            .get(&resource_type)
            .into_iter()
            .flat_map(move |lengths| lengths.range(1..=name.len()).map(|(len, _)| *len))
            .filter_map(move |len| name.get(..len))
            .filter_map(move |prefix| self.section(resource_type, pattern_type::PREFIXED, prefix));
        literal
            .into_iter()
            .chain(wildcard)
            .chain(prefixed)
            .flat_map(OrdMap::values)
    }
}

/// The rule an authorization was decided by, named in Kafka's audit log (`based on rule …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidingRule {
    /// The principal is in `super.users`.
    SuperUser,
    /// No ACL applies to the resource and `allow.everyone.if.no.acl.found=true`.
    DefaultAllow,
    /// No ACL allowed it.
    DefaultDeny,
    /// This ACL (ALLOW or DENY) decided it.
    Acl(Arc<StandardAcl>),
}

impl DecidingRule {
    /// Whether the rule allows.
    #[must_use]
    pub fn allowed(&self) -> bool {
        match self {
            DecidingRule::SuperUser | DecidingRule::DefaultAllow => true,
            DecidingRule::DefaultDeny => false,
            DecidingRule::Acl(acl) => acl.permission_type == permission::ALLOW,
        }
    }
}

impl std::fmt::Display for DecidingRule {
    /// As Kafka's rules print themselves: `SuperUser`, `DefaultAllow`, `DefaultDeny`,
    /// `MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=…, patternType=LITERAL,
    /// principal=User:…, host=*, operation=WRITE, permissionType=ALLOW))`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecidingRule::SuperUser => f.write_str("SuperUser"),
            DecidingRule::DefaultAllow => f.write_str("DefaultAllow"),
            DecidingRule::DefaultDeny => f.write_str("DefaultDeny"),
            DecidingRule::Acl(acl) => write!(
                f,
                "MatchingAcl(acl=StandardAcl(resourceType={}, resourceName={}, patternType={}, principal={}, host={}, operation={}, permissionType={}))",
                names::resource_type(acl.resource_type),
                acl.resource_name,
                names::pattern_type(acl.pattern_type),
                acl.principal,
                acl.host,
                names::operation(acl.operation),
                names::permission(acl.permission_type),
            ),
        }
    }
}

/// Java enum names of the ACL codes, as Kafka prints them (`UNKNOWN` for codes it lacks).
pub mod names {
    /// `ResourceType` (`TOPIC`, `TRANSACTIONAL_ID`, …).
    #[must_use]
    pub fn resource_type(code: i8) -> &'static str {
        match code {
            1 => "ANY",
            2 => "TOPIC",
            3 => "GROUP",
            4 => "CLUSTER",
            5 => "TRANSACTIONAL_ID",
            6 => "DELEGATION_TOKEN",
            7 => "USER",
            _ => "UNKNOWN",
        }
    }

    /// `SecurityUtils.resourceTypeName`: the `ResourceType` in camel case (`Topic`,
    /// `TransactionalId`, …), as the audit log writes a resource.
    #[must_use]
    pub fn resource_type_camel(code: i8) -> &'static str {
        match code {
            1 => "Any",
            2 => "Topic",
            3 => "Group",
            4 => "Cluster",
            5 => "TransactionalId",
            6 => "DelegationToken",
            7 => "User",
            _ => "Unknown",
        }
    }

    /// `PatternType`.
    #[must_use]
    pub fn pattern_type(code: i8) -> &'static str {
        match code {
            1 => "ANY",
            2 => "MATCH",
            3 => "LITERAL",
            4 => "PREFIXED",
            _ => "UNKNOWN",
        }
    }

    /// `AclOperation`.
    #[must_use]
    pub fn operation(code: i8) -> &'static str {
        match code {
            1 => "ANY",
            2 => "ALL",
            3 => "READ",
            4 => "WRITE",
            5 => "CREATE",
            6 => "DELETE",
            7 => "ALTER",
            8 => "DESCRIBE",
            9 => "CLUSTER_ACTION",
            10 => "DESCRIBE_CONFIGS",
            11 => "ALTER_CONFIGS",
            12 => "IDEMPOTENT_WRITE",
            13 => "CREATE_TOKENS",
            14 => "DESCRIBE_TOKENS",
            _ => "UNKNOWN",
        }
    }

    /// `AclPermissionType`.
    #[must_use]
    pub fn permission(code: i8) -> &'static str {
        match code {
            1 => "ANY",
            2 => "DENY",
            3 => "ALLOW",
            _ => "UNKNOWN",
        }
    }
}

/// An authorizer: its settings and the ACLs of the newest image.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    /// `super.users`, `allow.everyone.if.no.acl.found`.
    pub config: AuthorizerConfig,
    /// The ACLs.
    pub acls: AclIndex,
}

impl Authorizer {
    /// Whether `who` may do `operation` on the resource `(resource_type, name)`.
    #[must_use]
    pub fn authorize(
        &self,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
    ) -> bool {
        self.deciding_rule(who, operation, resource_type, name)
            .allowed()
    }

    /// The rule that decides whether `who` may do `operation` on `(resource_type, name)`, as
    /// Kafka's `StandardAuthorizerData.findAclRule` finds it: a super user; else a DENY ACL
    /// that applies; else an ALLOW ACL that applies (the last one met, where several do);
    /// else DENY when ACLs exist for the resource, and `allow.everyone.if.no.acl.found` when
    /// none does.
    #[must_use]
    pub fn deciding_rule(
        &self,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
    ) -> DecidingRule {
        if self.config.super_users.contains(who.principal) {
            return DecidingRule::SuperUser;
        }
        let mut any_acl = false;
        let mut allow = None;
        for acl in self.acls.applicable(resource_type, name) {
            any_acl = true;
            match applies(acl, who, operation) {
                Some(false) => return DecidingRule::Acl(Arc::clone(acl)),
                Some(true) => allow = Some(acl),
                None => {}
            }
        }
        match allow {
            Some(acl) => DecidingRule::Acl(Arc::clone(acl)),
            None if !any_acl && self.config.allow_everyone_if_no_acl_found => {
                DecidingRule::DefaultAllow
            }
            None => DecidingRule::DefaultDeny,
        }
    }

    /// Kafka's default `Authorizer.authorizeByResourceType` (KIP-679: InitProducerId without a
    /// transactional id): whether `who` may do `operation` on some resource of the type.
    #[must_use]
    pub fn authorize_by_resource_type(
        &self,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: i8,
    ) -> bool {
        // Super users and allow-everyone-without-ACLs, on a resource no ACL names.
        if self.authorize(who, operation, resource_type, "hardcode") {
            return true;
        }
        let mut deny_literal: BTreeSet<&str> = BTreeSet::new();
        let mut deny_prefixed: BTreeSet<&str> = BTreeSet::new();
        let mut allow_literal: BTreeSet<&str> = BTreeSet::new();
        let mut allow_prefixed: BTreeSet<&str> = BTreeSet::new();
        for acl in self
            .acls
            .iter()
            .filter(|acl| acl.resource_type == resource_type)
        {
            if !principal_and_host_match(acl, who)
                || (acl.operation != operation.code() && acl.operation != AclOperation::All.code())
            {
                continue;
            }
            let deny = acl.permission_type == permission::DENY;
            let set = match (acl.pattern_type, deny) {
                (pattern_type::LITERAL, true) => &mut deny_literal,
                (pattern_type::PREFIXED, true) => &mut deny_prefixed,
                (pattern_type::LITERAL, false) => &mut allow_literal,
                (pattern_type::PREFIXED, false) => &mut allow_prefixed,
                _ => continue,
            };
            set.insert(acl.resource_name.as_str());
        }
        if deny_literal.contains(WILDCARD) {
            return false;
        }
        if allow_literal.contains(WILDCARD) {
            return true;
        }
        let denied_prefix = |name: &str| deny_prefixed.iter().any(|p| name.starts_with(p));
        allow_prefixed.iter().any(|name| !denied_prefix(name))
            || allow_literal
                .iter()
                .any(|name| !deny_literal.contains(name) && !denied_prefix(name))
    }

    /// `authorized_operations`: bit `1 << code` for each supported operation allowed.
    #[must_use]
    pub fn authorized_operations(&self, who: Requester<'_>, resource_type: i8, name: &str) -> i32 {
        AclOperation::supported_by(resource_type)
            .iter()
            .filter(|op| self.authorize(who, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

/// `authorized_operations` without an authorizer: every supported operation.
#[must_use]
pub fn all_operations(resource_type: i8) -> i32 {
    AclOperation::supported_by(resource_type)
        .iter()
        .fold(0, |bits, op| bits | (1 << op.code()))
}

fn principal_and_host_match(acl: &StandardAcl, who: Requester<'_>) -> bool {
    (acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL)
        && (acl.host == WILDCARD || acl.host == who.host)
}

/// Kafka's `findResult`: `Some(true)` ALLOW, `Some(false)` DENY, `None` not this request's.
fn applies(acl: &StandardAcl, who: Requester<'_>, operation: AclOperation) -> Option<bool> {
    if !principal_and_host_match(acl, who) {
        return None;
    }
    let allow = acl.permission_type == permission::ALLOW;
    let matches = if allow {
        operation.granted_by_allow(acl.operation)
    } else {
        acl.operation == AclOperation::All.code() || acl.operation == operation.code()
    };
    matches.then_some(allow)
}

/// Kafka's `AclBindingFilter`: which ACLs a DescribeAcls or DeleteAcls filter selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    /// Resource type code (ANY = all).
    pub resource_type: i8,
    /// Resource name (`None` = all).
    pub resource_name: Option<String>,
    /// Pattern type code (ANY, MATCH, LITERAL, PREFIXED).
    pub pattern_type: i8,
    /// Principal (`None` = all).
    pub principal: Option<String>,
    /// Host (`None` = all).
    pub host: Option<String>,
    /// Operation code (ANY = all).
    pub operation: i8,
    /// Permission code (ANY = all).
    pub permission_type: i8,
}

impl AclBindingFilter {
    /// `AclBindingFilter.matches`: `ResourcePatternFilter.matches` and
    /// `AccessControlEntryFilter.matches` (equality, no implication, no wildcard expansion).
    #[must_use]
    pub fn matches(&self, acl: &StandardAcl) -> bool {
        self.pattern_matches(acl)
            && self.principal.as_deref().is_none_or(|p| p == acl.principal)
            && self.host.as_deref().is_none_or(|h| h == acl.host)
            && (self.operation == 1 || self.operation == acl.operation)
            && (self.permission_type == permission::ANY
                || self.permission_type == acl.permission_type)
    }

    fn pattern_matches(&self, acl: &StandardAcl) -> bool {
        if self.resource_type != resource_type::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        if self.pattern_type != pattern_type::ANY
            && self.pattern_type != pattern_type::MATCH
            && self.pattern_type != acl.pattern_type
        {
            return false;
        }
        let Some(name) = self.resource_name.as_deref() else {
            return true;
        };
        if self.pattern_type == pattern_type::ANY || self.pattern_type == acl.pattern_type {
            return name == acl.resource_name;
        }
        // MATCH: the ACLs that would apply to a resource of this name.
        match acl.pattern_type {
            pattern_type::LITERAL => name == acl.resource_name || acl.resource_name == WILDCARD,
            pattern_type::PREFIXED => name.starts_with(&acl.resource_name),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation::{
        Alter, AlterConfigs, Describe, DescribeConfigs, IdempotentWrite, Read, Write,
    };
    use resource_type::{CLUSTER, GROUP, TOPIC};

    fn acl(
        resource_type: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        op: AclOperation,
        permission_type: i8,
    ) -> StandardAcl {
        StandardAcl {
            resource_type,
            resource_name: name.to_owned(),
            pattern_type: pattern,
            principal: principal.to_owned(),
            host: WILDCARD.to_owned(),
            operation: op.code(),
            permission_type,
        }
    }

    fn authorizer(acls: Vec<StandardAcl>) -> Authorizer {
        let mut index = AclIndex::default();
        let changes: Vec<(Uuid, Option<Arc<StandardAcl>>)> = acls
            .into_iter()
            .map(|a| (Uuid::new_v4(), Some(Arc::new(a))))
            .collect();
        index.apply(changes.iter().map(|(id, a)| (id, a)));
        Authorizer {
            config: AuthorizerConfig::default(),
            acls: index,
        }
    }

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "127.0.0.1",
    };
    const BOB: Requester<'static> = Requester {
        principal: "User:bob",
        host: "127.0.0.1",
    };

    #[test]
    fn the_deciding_rule_is_named_as_kafka_names_it() {
        let mut a = authorizer(vec![
            acl(
                TOPIC,
                "t",
                pattern_type::LITERAL,
                "User:alice",
                Write,
                permission::DENY,
            ),
            acl(
                TOPIC,
                "t",
                pattern_type::PREFIXED,
                "User:alice",
                Read,
                permission::ALLOW,
            ),
        ]);
        let rule =
            |a: &Authorizer, who, op, name| a.deciding_rule(who, op, TOPIC, name).to_string();
        assert_eq!(
            rule(&a, ALICE, Write, "t"),
            "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=t, patternType=LITERAL, principal=User:alice, host=*, operation=WRITE, permissionType=DENY))"
        );
        assert_eq!(
            rule(&a, ALICE, Read, "tx"),
            "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=t, patternType=PREFIXED, principal=User:alice, host=*, operation=READ, permissionType=ALLOW))"
        );
        // ACLs exist for the resource, none for bob: the default deny.
        assert_eq!(rule(&a, BOB, Read, "t"), "DefaultDeny");
        a.config.allow_everyone_if_no_acl_found = true;
        assert_eq!(rule(&a, BOB, Read, "other"), "DefaultAllow");
        assert_eq!(rule(&a, BOB, Read, "t"), "DefaultDeny");
        a.config.super_users.insert("User:bob".to_owned());
        assert_eq!(rule(&a, BOB, Write, "t"), "SuperUser");
        assert_eq!(
            names::resource_type_camel(resource_type::TRANSACTIONAL_ID),
            "TransactionalId"
        );
    }

    #[test]
    fn literal_prefixed_and_wildcard_acls_apply_and_deny_wins() {
        use pattern_type::{LITERAL, PREFIXED};
        use permission::{ALLOW, DENY};
        let a = authorizer(vec![
            acl(
                TOPIC,
                "orders",
                PREFIXED,
                "User:alice",
                AclOperation::All,
                ALLOW,
            ),
            acl(TOPIC, "orders-eu", LITERAL, "User:alice", Write, DENY),
            acl(TOPIC, "*", LITERAL, "User:*", Read, ALLOW),
            acl(TOPIC, "*x", PREFIXED, "User:bob", Write, ALLOW),
        ]);
        assert!(a.authorize(ALICE, Write, TOPIC, "orders"));
        assert!(a.authorize(ALICE, Write, TOPIC, "orders-us"));
        assert!(!a.authorize(ALICE, Write, TOPIC, "orders-eu"));
        // DENY WRITE does not deny what the prefix ALL allows otherwise.
        assert!(a.authorize(ALICE, Describe, TOPIC, "orders-eu"));
        assert!(!a.authorize(ALICE, Write, TOPIC, "order"));
        // The wildcard LITERAL applies to every name, to everyone.
        assert!(a.authorize(BOB, Read, TOPIC, "anything"));
        assert!(
            a.authorize(BOB, Describe, TOPIC, "anything"),
            "READ implies DESCRIBE"
        );
        assert!(!a.authorize(BOB, Write, TOPIC, "anything"));
        // A PREFIXED `*` is a prefix like any other.
        assert!(a.authorize(BOB, Write, TOPIC, "*xyz"));
        assert!(!a.authorize(BOB, Write, TOPIC, "xyz"));
        // Other resource types are untouched.
        assert!(!a.authorize(ALICE, Read, GROUP, "orders"));
    }

    #[test]
    fn implications_only_for_allow() {
        use pattern_type::LITERAL;
        use permission::{ALLOW, DENY};
        let a = authorizer(vec![
            acl(TOPIC, "t", LITERAL, "User:alice", AlterConfigs, ALLOW),
            acl(TOPIC, "t", LITERAL, "User:bob", Read, DENY),
            acl(TOPIC, "t", LITERAL, "User:bob", Describe, ALLOW),
        ]);
        assert!(a.authorize(ALICE, DescribeConfigs, TOPIC, "t"));
        assert!(
            !a.authorize(ALICE, Describe, TOPIC, "t"),
            "ALTER_CONFIGS does not imply DESCRIBE"
        );
        assert!(
            a.authorize(BOB, Describe, TOPIC, "t"),
            "DENY READ does not deny DESCRIBE"
        );
        assert!(!a.authorize(BOB, Read, TOPIC, "t"));
    }

    #[test]
    fn super_users_hosts_and_no_acl_rule() {
        use pattern_type::LITERAL;
        use permission::ALLOW;
        let mut host_acl = acl(TOPIC, "t", LITERAL, "User:alice", Read, ALLOW);
        host_acl.host = "10.0.0.1".to_owned();
        let mut a = authorizer(vec![host_acl]);
        assert!(!a.authorize(ALICE, Read, TOPIC, "t"), "another host's ACL");
        assert!(!a.authorize(ALICE, Read, TOPIC, "free"));
        a.config.allow_everyone_if_no_acl_found = true;
        assert!(a.authorize(ALICE, Read, TOPIC, "free"));
        assert!(
            !a.authorize(ALICE, Read, TOPIC, "t"),
            "an ACL exists for t: no fallback"
        );
        a.config.super_users.insert("User:bob".to_owned());
        assert!(a.authorize(BOB, Alter, CLUSTER, CLUSTER_NAME));
    }

    #[test]
    fn removal_and_authorized_operations() {
        use pattern_type::PREFIXED;
        use permission::ALLOW;
        let mut a = authorizer(vec![acl(TOPIC, "p", PREFIXED, "User:alice", Read, ALLOW)]);
        let ops = a.authorized_operations(ALICE, TOPIC, "p1");
        assert_eq!(ops, (1 << Read.code()) | (1 << Describe.code()));
        let id = *a.acls.by_id.keys().next().expect("one acl");
        a.acls.apply([(&id, &None)]);
        assert!(a.acls.is_empty());
        assert!(
            a.acls
                .prefix_lengths
                .get(&TOPIC)
                .is_none_or(BTreeMap::is_empty)
        );
        assert_eq!(a.authorized_operations(ALICE, TOPIC, "p1"), 0);
        assert_eq!(all_operations(GROUP), (1 << 3) | (1 << 6) | (1 << 8));
    }

    #[test]
    fn by_resource_type_follows_kip_679() {
        use pattern_type::{LITERAL, PREFIXED};
        use permission::{ALLOW, DENY};
        let a = authorizer(vec![
            acl(TOPIC, "t", LITERAL, "User:alice", Write, ALLOW),
            acl(TOPIC, "p", PREFIXED, "User:bob", Write, ALLOW),
            acl(TOPIC, "p", PREFIXED, "User:bob", Write, DENY),
        ]);
        assert!(a.authorize_by_resource_type(ALICE, Write, TOPIC));
        assert!(
            !a.authorize_by_resource_type(BOB, Write, TOPIC),
            "denied by its own prefix"
        );
        assert!(!a.authorize_by_resource_type(ALICE, IdempotentWrite, CLUSTER));
    }

    #[test]
    fn many_acls_lookup_is_by_prefix_length() {
        use pattern_type::{LITERAL, PREFIXED};
        use permission::ALLOW;
        let acls = (0..100_000)
            .map(|i| {
                let pattern = if i % 2 == 0 { LITERAL } else { PREFIXED };
                acl(
                    TOPIC,
                    &format!("topic-{i}"),
                    pattern,
                    "User:alice",
                    Read,
                    ALLOW,
                )
            })
            .collect();
        let a = authorizer(acls);
        assert_eq!(a.acls.len(), 100_000);
        assert!(a.authorize(ALICE, Read, TOPIC, "topic-2"));
        assert!(a.authorize(ALICE, Read, TOPIC, "topic-1-anything"));
        assert!(!a.authorize(BOB, Read, TOPIC, "topic-2"));
        assert!(!a.authorize(ALICE, Read, TOPIC, "other"));
    }

    #[test]
    fn filters_match_like_kafka() {
        use pattern_type::{LITERAL, PREFIXED};
        use permission::ALLOW;
        let literal = acl(TOPIC, "orders", LITERAL, "User:alice", Read, ALLOW);
        let wildcard = acl(TOPIC, "*", LITERAL, "User:alice", Read, ALLOW);
        let prefixed = acl(TOPIC, "ord", PREFIXED, "User:alice", Read, ALLOW);
        let filter = |pattern: i8, name: Option<&str>| AclBindingFilter {
            resource_type: TOPIC,
            resource_name: name.map(str::to_owned),
            pattern_type: pattern,
            principal: None,
            host: None,
            operation: 1,
            permission_type: permission::ANY,
        };
        let m = filter(pattern_type::MATCH, Some("orders"));
        assert!(m.matches(&literal) && m.matches(&wildcard) && m.matches(&prefixed));
        let any = filter(pattern_type::ANY, Some("orders"));
        assert!(any.matches(&literal) && !any.matches(&wildcard) && !any.matches(&prefixed));
        let all = filter(pattern_type::ANY, None);
        assert!(all.matches(&literal) && all.matches(&prefixed));
        assert!(!filter(PREFIXED, Some("orders")).matches(&literal));
        let other = acl(TOPIC, "payments", LITERAL, "User:alice", Read, ALLOW);
        assert!(!m.matches(&other));
        let mut any_type = filter(pattern_type::ANY, None);
        any_type.resource_type = resource_type::ANY;
        assert!(any_type.matches(&other));
        let mut groups = filter(pattern_type::ANY, None);
        groups.resource_type = GROUP;
        assert!(!groups.matches(&other));
    }
}
