//! Authorization on the broker (Kafka's `StandardAuthorizer` as `KafkaApis` calls it through
//! `AuthHelper`): [`BrokerAuthorizer`] keeps the ACLs of the newest image, updated by
//! [`AclPublisher`]; [`Authz`] is one request's view (its principal and host) that the API
//! handlers ask. Without an authorizer (`authorizer.class.name` unset) every action is
//! allowed and `authorized_operations` reports every supported operation, as in Kafka.

use std::sync::{Arc, PoisonError, RwLock};

use kafka_protocol::messages::ApiKey;
use krust_metadata::authorizer::{
    AclIndex, AclOperation, Authorizer, AuthorizerConfig, DecidingRule, Requester, all_operations,
    names,
};
use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use krust_net::RequestContext;
use tracing::debug;

use super::Broker;

/// The authorizer of a broker built with one: its settings and the newest image's ACLs.
#[derive(Debug)]
pub struct BrokerAuthorizer {
    current: RwLock<Arc<Authorizer>>,
}

impl BrokerAuthorizer {
    /// An authorizer with no ACLs yet.
    #[must_use]
    pub fn new(config: AuthorizerConfig) -> Self {
        BrokerAuthorizer {
            current: RwLock::new(Arc::new(Authorizer {
                config,
                acls: AclIndex::default(),
            })),
        }
    }

    /// The authorizer as of the last publication.
    #[must_use]
    pub fn snapshot(&self) -> Arc<Authorizer> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Takes a publication's ACL changes (a snapshot: the image's ACLs, whole).
    pub fn publish(&self, delta: &MetadataDelta, image: &MetadataImage, manifest: &LoaderManifest) {
        let Some(changes) = delta.acls_delta() else {
            return;
        };
        let mut next = (*self.snapshot()).clone();
        if matches!(manifest, LoaderManifest::Snapshot { .. }) {
            next.acls = AclIndex::from_image(&image.acls);
        } else {
            next.acls.apply(changes.changes());
        }
        debug!(acls = next.acls.len(), "ACLs published");
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
    }
}

/// ACL changes to an authorizer (Kafka's `AclPublisher`); a broker registers it first, so a
/// request never sees an image newer than its ACLs; a controller registers one for its own
/// listener.
#[derive(Debug)]
pub struct AclPublisher {
    authorizer: Arc<BrokerAuthorizer>,
}

impl AclPublisher {
    /// For `authorizer`.
    #[must_use]
    pub fn new(authorizer: Arc<BrokerAuthorizer>) -> Self {
        AclPublisher { authorizer }
    }
}

impl MetadataPublisher for AclPublisher {
    fn name(&self) -> &str {
        "AclPublisher"
    }

    fn on_metadata_update(
        &mut self,
        delta: &MetadataDelta,
        image: &MetadataImage,
        manifest: &LoaderManifest,
    ) {
        self.authorizer.publish(delta, image, manifest);
    }
}

/// The audit log's target (Kafka's logger name; its `kafka-authorizer.log`).
pub const AUDIT_LOG: &str = "kafka.authorizer.logger";

/// One request's authorization: who asks, from where, in which request, against which ACLs.
#[derive(Debug, Clone)]
pub struct Authz {
    authorizer: Option<Arc<Authorizer>>,
    principal: String,
    host: String,
    request: ApiKey,
}

impl Authz {
    /// For the request `ctx` on `broker`.
    #[must_use]
    pub fn new(broker: &Broker, ctx: &RequestContext) -> Self {
        Self::with(
            broker.authorizer.as_deref(),
            &ctx.principal.principal_type,
            &ctx.principal.name,
            ctx.peer_addr.ip(),
            ctx.api_key,
        )
    }

    /// For `principal_type:name` at `host` sending a `request` against `authorizer` (none:
    /// everything allowed) — a controller's listener, or a request forwarded in an Envelope.
    #[must_use]
    pub fn with(
        authorizer: Option<&BrokerAuthorizer>,
        principal_type: &str,
        name: &str,
        host: std::net::IpAddr,
        request: ApiKey,
    ) -> Self {
        // Every request builds one: without an authorizer it allocates nothing.
        let Some(authorizer) = authorizer else {
            return Authz {
                authorizer: None,
                principal: String::new(),
                host: String::new(),
                request,
            };
        };
        Authz {
            authorizer: Some(authorizer.snapshot()),
            principal: format!("{principal_type}:{name}"),
            host: java_host_address(host),
            request,
        }
    }

    /// Whether an authorizer is configured.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.authorizer.is_some()
    }

    fn requester(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }

    /// Whether the requester may do `operation` on `(resource_type, name)`, a resource the
    /// request names: a denial is logged at INFO on [`AUDIT_LOG`] (Kafka's `logIfDenied`).
    #[must_use]
    pub fn allows(&self, operation: AclOperation, resource_type: i8, name: &str) -> bool {
        self.check(operation, resource_type, name, true)
    }

    /// As [`Self::allows`], for a check that only filters (the topics of an all-topics
    /// Metadata, the groups ListGroups lists) or chooses a path (cluster CREATE before
    /// per-topic CREATE): a denial is logged at TRACE only, as Kafka's `logIfDenied = false`.
    #[must_use]
    pub fn filter_allows(&self, operation: AclOperation, resource_type: i8, name: &str) -> bool {
        self.check(operation, resource_type, name, false)
    }

    /// `operation` on the cluster resource.
    #[must_use]
    pub fn allows_cluster(&self, operation: AclOperation) -> bool {
        self.allows(
            operation,
            krust_metadata::authorizer::resource_type::CLUSTER,
            krust_metadata::authorizer::CLUSTER_NAME,
        )
    }

    /// `operation` on the cluster resource, a denial logged at TRACE only
    /// ([`Self::filter_allows`]).
    #[must_use]
    pub fn filter_allows_cluster(&self, operation: AclOperation) -> bool {
        self.filter_allows(
            operation,
            krust_metadata::authorizer::resource_type::CLUSTER,
            krust_metadata::authorizer::CLUSTER_NAME,
        )
    }

    /// Kafka's `StandardAuthorizerData.logAuditMessage`: allowed at DEBUG, denied at INFO
    /// when `log_if_denied`, else TRACE; the message is built only when its level is on.
    fn check(
        &self,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
        log_if_denied: bool,
    ) -> bool {
        let Some(authorizer) = &self.authorizer else {
            return true;
        };
        let rule = authorizer.deciding_rule(self.requester(), operation, resource_type, name);
        let allowed = rule.allowed();
        let level = match (allowed, log_if_denied) {
            (true, _) => tracing::Level::DEBUG,
            (false, true) => tracing::Level::INFO,
            (false, false) => tracing::Level::TRACE,
        };
        let message = || self.audit_message(allowed, operation, resource_type, name, &rule);
        match level {
            tracing::Level::INFO => tracing::info!(target: AUDIT_LOG, "{}", message()),
            tracing::Level::DEBUG => {
                if tracing::enabled!(target: AUDIT_LOG, tracing::Level::DEBUG) {
                    tracing::debug!(target: AUDIT_LOG, "{}", message());
                }
            }
            _ => {
                if tracing::enabled!(target: AUDIT_LOG, tracing::Level::TRACE) {
                    tracing::trace!(target: AUDIT_LOG, "{}", message());
                }
            }
        }
        allowed
    }

    /// Kafka's `buildAuditMessage`, word for word (`resourceRefCount` is always 1 here).
    fn audit_message(
        &self,
        allowed: bool,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
        rule: &DecidingRule,
    ) -> String {
        format!(
            "Principal = {} is {} operation = {} from host = {} on resource = {}:LITERAL:{} for request = {:?} with resourceRefCount = 1 based on rule {}",
            self.principal,
            if allowed { "Allowed" } else { "Denied" },
            names::operation(operation.code()),
            self.host,
            names::resource_type_camel(resource_type),
            name,
            self.request,
            rule,
        )
    }

    /// Kafka's `authorizeByResourceType`: `operation` on some resource of the type.
    #[must_use]
    pub fn allows_any_of_type(&self, operation: AclOperation, resource_type: i8) -> bool {
        self.authorizer.as_ref().is_none_or(|a| {
            a.authorize_by_resource_type(self.requester(), operation, resource_type)
        })
    }

    /// The `authorized_operations` bitfield for `(resource_type, name)`.
    #[must_use]
    pub fn authorized_operations(&self, resource_type: i8, name: &str) -> i32 {
        match &self.authorizer {
            Some(a) => a.authorized_operations(self.requester(), resource_type, name),
            None => all_operations(resource_type),
        }
    }

    /// The ACLs, for DescribeAcls (`None` without an authorizer).
    #[must_use]
    pub fn acls(&self) -> Option<&AclIndex> {
        self.authorizer.as_ref().map(|a| &a.acls)
    }
}

/// An address as Java's `InetAddress.getHostAddress()` writes it, the form ACL hosts are
/// compared with: IPv4 dotted (an IPv4-mapped IPv6 address is IPv4 to Java), IPv6 as eight
/// lowercase hex groups without `::` compression.
#[must_use]
pub fn java_host_address(address: std::net::IpAddr) -> String {
    match address.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

#[cfg(test)]
mod tests {
    use super::java_host_address;

    #[test]
    fn hosts_are_written_as_java_writes_them() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("address");
        assert_eq!(java_host_address(ip("127.0.0.1")), "127.0.0.1");
        assert_eq!(java_host_address(ip("::1")), "0:0:0:0:0:0:0:1");
        assert_eq!(
            java_host_address(ip("fe80::1:abcd")),
            "fe80:0:0:0:0:0:1:abcd"
        );
        assert_eq!(java_host_address(ip("::ffff:10.0.0.1")), "10.0.0.1");
    }
}
