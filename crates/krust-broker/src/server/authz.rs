//! Authorization on the broker (Kafka's `StandardAuthorizer` as `KafkaApis` calls it through
//! `AuthHelper`): [`BrokerAuthorizer`] keeps the ACLs of the newest image, updated by
//! [`AclPublisher`]; [`Authz`] is one request's view (its principal and host) that the API
//! handlers ask. Without an authorizer (`authorizer.class.name` unset) every action is
//! allowed and `authorized_operations` reports every supported operation, as in Kafka.

use std::sync::{Arc, PoisonError, RwLock};

use krust_metadata::authorizer::{
    AclIndex, AclOperation, Authorizer, AuthorizerConfig, Requester, all_operations,
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

/// One request's authorization: who asks, from where, against which ACLs.
#[derive(Debug, Clone)]
pub struct Authz {
    authorizer: Option<Arc<Authorizer>>,
    principal: String,
    host: String,
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
        )
    }

    /// For `principal_type:name` at `host` against `authorizer` (none: everything allowed) —
    /// a controller's listener, or a request forwarded in an Envelope.
    #[must_use]
    pub fn with(
        authorizer: Option<&BrokerAuthorizer>,
        principal_type: &str,
        name: &str,
        host: std::net::IpAddr,
    ) -> Self {
        // Every request builds one: without an authorizer it allocates nothing.
        let Some(authorizer) = authorizer else {
            return Authz {
                authorizer: None,
                principal: String::new(),
                host: String::new(),
            };
        };
        Authz {
            authorizer: Some(authorizer.snapshot()),
            principal: format!("{principal_type}:{name}"),
            host: java_host_address(host),
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

    /// Whether the requester may do `operation` on `(resource_type, name)`.
    #[must_use]
    pub fn allows(&self, operation: AclOperation, resource_type: i8, name: &str) -> bool {
        let Some(authorizer) = &self.authorizer else {
            return true;
        };
        let allowed = authorizer.authorize(self.requester(), operation, resource_type, name);
        if !allowed {
            debug!(
                target: "kafka.authorizer.logger",
                principal = %self.principal,
                host = %self.host,
                ?operation,
                resource_type,
                name,
                "denied"
            );
        }
        allowed
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
