//! The broker role's settings (Kafka's `BrokerServer` configuration): `server.properties` →
//! [`BrokerServerConfig`] for the broker server of `krust-node`
//! (`krust_node::broker::BrokerServer`): the broker listeners (`listeners` minus
//! `controller.listener.names`; a `0` port is resolved to a free one first, so it can be
//! advertised), `advertised.listeners`, `inter.broker.listener.name`, the formatted log dirs
//! and their `directory.id`s, the lifecycle's timing and the listeners' limits.
//!
//! Log dirs are checked and completed as Kafka 3.9's `KafkaRaftServer.initializeLogDirs`
//! does, which is also how a krust broker takes over the log dirs of a ZooKeeper-mode broker
//! at the end of a KIP-866 migration (`node.id` = its `broker.id`): their v0 `meta.properties`
//! are accepted as they are and only gain a `directory.id` (see `initialize_log_dirs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use krust_broker::server::lifecycle::{BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT, LifecycleConfig};
use krust_broker::server::{BrokerConfig, Endpoint};
use krust_node::broker::{BrokerListener, BrokerServerConfig};

use krust_log::fs::write_atomically;
use krust_metadata::authorizer::AuthorizerConfig;
use krust_metadata::kafka_uuid::random_directory_id;
use krust_metadata::meta_properties::{META_PROPERTIES_NAME, verify_ensemble};

use super::security::ImageScramCredentials;
use crate::config::ServerConfig;

/// The metadata partition's directory, which may only be in the metadata log dir.
const METADATA_PARTITION_DIR: &str = "__cluster_metadata-0";

/// `request.timeout.ms` default: bound of one registration/heartbeat through the channel.
const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Kafka's security protocol id of PLAINTEXT.
const PLAINTEXT: i16 = 0;

/// A broker listener's name, bind address and security protocol.
#[derive(Debug)]
struct ListenerBind {
    name: String,
    bind: String,
    protocol: String,
}

/// A free loopback-or-given-host port: bind port 0, read it, release it. Racy in theory; the
/// listener binds it again at once.
fn free_port(host: &str) -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind((host, 0))
        .with_context(|| format!("finding a free port on {host}"))?;
    Ok(listener.local_addr()?.port())
}

/// Kafka's security protocol ids.
pub(crate) fn security_protocol_id(name: &str) -> Option<i16> {
    match name {
        "PLAINTEXT" => Some(PLAINTEXT),
        "SSL" => Some(1),
        "SASL_PLAINTEXT" => Some(2),
        "SASL_SSL" => Some(3),
        _ => None,
    }
}

/// The broker's listeners (bind addresses) and advertised endpoints, client-facing first.
fn broker_listeners(config: &ServerConfig) -> anyhow::Result<(Vec<ListenerBind>, Vec<Endpoint>)> {
    let controller_names: Vec<String> = config
        .controller_listener_names()
        .iter()
        .map(|n| n.to_uppercase())
        .collect();
    let protocols = config.effective_listener_security_protocol_map()?;
    let advertised = match config.get("advertised.listeners") {
        Some(v) => crate::config::listeners::parse_listeners(v)
            .map_err(crate::config::ConfigError::Invalid)?,
        None => Vec::new(),
    };
    let mut binds = Vec::new();
    let mut endpoints = Vec::new();
    for listener in config.listeners()? {
        if controller_names.contains(&listener.listener_name) {
            continue;
        }
        let protocol = protocols
            .get(&listener.listener_name)
            .map_or("PLAINTEXT", String::as_str);
        if security_protocol_id(protocol).is_none() {
            bail!(
                "listener {}: unknown security protocol {protocol}",
                listener.listener_name
            );
        }
        let bind_host = listener
            .host
            .clone()
            .unwrap_or_else(|| "0.0.0.0".to_owned());
        let port = if listener.port == 0 {
            free_port(&bind_host)?
        } else {
            listener.port
        };
        let advertised_entry = advertised
            .iter()
            .find(|e| e.listener_name == listener.listener_name);
        let (host, advertised_port) = match advertised_entry {
            Some(e) => (e.host.clone(), if e.port == 0 { port } else { e.port }),
            None => (listener.host.clone(), port),
        };
        // Kafka advertises the canonical host name for an empty or wildcard host; krust uses
        // `localhost`, which every client on this machine can reach.
        let host = match host.as_deref() {
            None | Some("0.0.0.0" | "::" | "[::]") => "localhost".to_owned(),
            Some(h) => h.to_owned(),
        };
        binds.push(ListenerBind {
            name: listener.listener_name.clone(),
            bind: format!("{bind_host}:{port}"),
            protocol: protocol.to_owned(),
        });
        endpoints.push(Endpoint {
            name: listener.listener_name.clone(),
            host,
            port: advertised_port,
            security_protocol: security_protocol_id(protocol).unwrap_or(PLAINTEXT),
        });
    }
    if binds.is_empty() {
        bail!(
            "process.roles contains broker, but listeners has no listener outside controller.listener.names"
        );
    }
    Ok((binds, endpoints))
}

/// `inter.broker.listener.name`, else the listener of `security.inter.broker.protocol`
/// (default PLAINTEXT), as Kafka 3.9 `KafkaConfig.interBrokerListenerName`.
fn inter_broker_listener_name(
    config: &ServerConfig,
    endpoints: &[Endpoint],
) -> anyhow::Result<String> {
    let name = match config.get("inter.broker.listener.name") {
        Some(name) => name.trim().to_uppercase(),
        None => config
            .get("security.inter.broker.protocol")
            .unwrap_or("PLAINTEXT")
            .trim()
            .to_uppercase(),
    };
    if !endpoints.iter().any(|e| e.name == name) {
        bail!(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based on currently configured listeners are {}",
            endpoints
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(name)
}

/// Loads and checks the `meta.properties` of every log dir and gives each a `directory.id`,
/// as Kafka 3.9's `KafkaRaftServer.initializeLogDirs` does; returns the directory ids in
/// `log_dirs` order.
///
/// The files (of the log dirs and of `metadata_dir`) must agree with each other, with `node_id`
/// and with `cluster_id` — the metadata dir's, which the Raft client presents to the quorum,
/// so a dir of another cluster fails here and a quorum of another cluster answers
/// `INCONSISTENT_CLUSTER_ID` (`MetaPropertiesEnsemble.verify`; messages are Kafka's) — each
/// must have a node id and a cluster id, and `__cluster_metadata-0` may only live in
/// `metadata_dir`.
///
/// A ZooKeeper-mode broker's log dir taken over by this broker (KIP-866: same `node.id` as its
/// `broker.id`) holds a **v0** file (`broker.id`, `cluster.id`, and `directory.id` only if the
/// ZK broker ran with `zookeeper.metadata.migration.enable`). It is accepted as it is: v0's
/// `broker.id` is the node id. A file without `directory.id` gets a fresh one (not reserved,
/// not starting with `-`, not used by another dir) and is rewritten *keeping its version*:
/// Kafka 3.9 never turns a v0 file into v1 — not at start-up and not when the metadata
/// reaches `ZkMigrationState.POST_MIGRATION` (only `kafka-storage format` writes v1).
/// The rewrite replaces the file atomically (tmp → fsync → rename → fsync dir) before any log
/// is opened, so the id registered with the controller is the one on disk.
fn initialize_log_dirs(
    log_dirs: &[PathBuf],
    metadata_dir: &Path,
    node_id: i32,
    cluster_id: &str,
) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut all: Vec<&Path> = log_dirs.iter().map(PathBuf::as_path).collect();
    if !all.contains(&metadata_dir) {
        all.push(metadata_dir);
    }
    let mut loaded = Vec::with_capacity(all.len());
    for dir in &all {
        loaded.push((dir.display().to_string(), super::read_meta_properties(dir)?));
    }
    verify_ensemble(
        loaded.iter().map(|(dir, meta)| (dir.as_str(), meta)),
        Some(cluster_id.to_owned()),
        Some(node_id),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    for dir in log_dirs {
        let metadata_partition = dir.join(METADATA_PARTITION_DIR);
        if dir != metadata_dir && metadata_partition.exists() {
            bail!(
                "Found unexpected metadata location in data directory `{}` (the configured metadata directory is {}).",
                metadata_partition.display(),
                metadata_dir.display()
            );
        }
    }
    let mut taken: Vec<uuid::Uuid> = loaded.iter().filter_map(|(_, m)| m.directory_id).collect();
    let mut ids = Vec::with_capacity(loaded.len());
    for (dir, meta) in &mut loaded {
        if meta.node_id.is_none() {
            bail!("Error: node ID not found in {dir}");
        }
        if meta.cluster_id.is_none() {
            bail!("Error: cluster ID not found in {dir}");
        }
        let id = match meta.directory_id {
            Some(id) => id,
            None => {
                let id = random_directory_id(&mut rand::thread_rng(), &taken);
                taken.push(id);
                meta.directory_id = Some(id);
                tracing::info!("Rewriting {dir}/{META_PROPERTIES_NAME}");
                let now_secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                let path = Path::new(dir.as_str()).join(META_PROPERTIES_NAME);
                write_atomically(&path, meta.to_file_text(now_secs).as_bytes())
                    .with_context(|| format!("Error while writing {}", path.display()))?;
                id
            }
        };
        ids.push(id);
    }
    // Only the log dirs are registered with the controller (Kafka's `LogManager.directoryIds`).
    ids.truncate(log_dirs.len());
    Ok(ids)
}

/// A client listener's limits from Kafka's keys (`socket.request.max.bytes`,
/// `max.connections`, `connections.max.idle.ms`; Kafka's defaults when unset) and its
/// security (`protocol`: TLS from the listener's `ssl.*` keys for `SSL`/`SASL_SSL`, SASL from
/// its `sasl.*` keys and `scram` for `SASL_PLAINTEXT`/`SASL_SSL`).
pub(crate) fn listener_config(
    config: &ServerConfig,
    name: &str,
    protocol: &str,
    scram: &Arc<ImageScramCredentials>,
) -> anyhow::Result<krust_net::ServerConfig> {
    let defaults = krust_net::ServerConfig::default();
    let number = |key: &str, default: usize| -> anyhow::Result<usize> {
        match config.get(key) {
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => bail!("Invalid value {v} for configuration {key}: Value must be at least 1"),
            },
            None => Ok(default),
        }
    };
    Ok(krust_net::ServerConfig {
        listener_name: name.to_owned(),
        socket_request_max_bytes: number(
            "socket.request.max.bytes",
            defaults.socket_request_max_bytes,
        )?,
        // Kafka's `ListenerConnectionQuota`: `listener.name.<l>.max.connections`, else the
        // broker-wide value.
        max_connections: number(
            &format!("listener.name.{}.max.connections", name.to_lowercase()),
            number("max.connections", defaults.max_connections)?,
        )?,
        connections_max_idle: parse_ms(
            config,
            "connections.max.idle.ms",
            u64::try_from(defaults.connections_max_idle.as_millis()).unwrap_or(u64::MAX),
        )?,
        security: krust_net::ListenerSecurity {
            tls: match protocol {
                "SSL" | "SASL_SSL" => Some(super::security::listener_tls(config, name, protocol)?),
                _ => None,
            },
            sasl: match protocol {
                "SASL_PLAINTEXT" | "SASL_SSL" => {
                    Some(super::security::listener_sasl(config, name, scram)?)
                }
                _ => None,
            },
        },
        ..defaults
    })
}

/// The broker's `ConnectionQuotas` (shared by its client listeners): `max.connections`
/// (broker-wide), `max.connection.creation.rate` (broker-wide and per listener),
/// `max.connections.per.ip`, `max.connections.per.ip.overrides` (host names resolved, as
/// Kafka's `InetAddress.getByName`), the quota window for the connection rates, and the
/// inter-broker listener Kafka protects. The values were validated by
/// `ServerConfig::validate`.
fn connection_quota_settings(
    config: &ServerConfig,
    inter_broker: &str,
    listeners: &[&str],
) -> anyhow::Result<krust_net::ConnectionQuotaSettings> {
    let count = |v: i32| usize::try_from(v).unwrap_or(0);
    let mut overrides = std::collections::HashMap::new();
    for (host, max) in config.max_connections_per_ip_overrides()? {
        use std::net::ToSocketAddrs;
        let ip = (host.as_str(), 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(|addr| addr.ip())
            .with_context(|| format!("max.connections.per.ip.overrides: {host}: unknown host"))?;
        overrides.insert(ip, count(max));
    }
    // `listener.name.<l>.max.connection.creation.rate`, parsed as Kafka's
    // `valuesWithPrefixOverride` parses it (the unprefixed key's type and validator).
    let mut listener_rates = std::collections::HashMap::new();
    for name in listeners {
        let key = format!(
            "listener.name.{}.max.connection.creation.rate",
            name.to_lowercase()
        );
        if let Some(raw) = config.get(&key) {
            let rate: i32 = raw.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "Invalid value {raw} for configuration max.connection.creation.rate: Not a number of type INT"
                )
            })?;
            if rate < 0 {
                bail!(
                    "Invalid value {rate} for configuration max.connection.creation.rate: Value must be at least 0"
                );
            }
            listener_rates.insert((*name).to_owned(), f64::from(rate));
        }
    }
    let window_seconds = config.typed("quota.window.size.seconds", 1i32)?;
    let samples = config.typed("quota.window.num", 11i32)?;
    Ok(krust_net::ConnectionQuotaSettings {
        max_connections_per_ip: count(config.typed("max.connections.per.ip", i32::MAX)?),
        max_connections_per_ip_overrides: overrides,
        max_connections: count(config.typed("max.connections", i32::MAX)?),
        max_connection_creation_rate: f64::from(
            config.typed("max.connection.creation.rate", i32::MAX)?,
        ),
        listener_max_connection_creation_rates: listener_rates,
        inter_broker_listener: Some(inter_broker.to_owned()),
        quota_window: krust_metrics::SampleConfig::new(
            Duration::from_secs(u64::try_from(window_seconds).unwrap_or(1)),
            count(samples),
        ),
    })
}

fn parse_ms(config: &ServerConfig, key: &str, default: u64) -> anyhow::Result<Duration> {
    Ok(Duration::from_millis(config.typed(key, default)?))
}

/// The broker server's config from `server.properties`, for node `node_id` of `cluster_id`:
/// every log dir must be formatted for this cluster.
///
/// # Errors
/// Bad listener settings, an unformatted log dir or one of another cluster, an unparseable
/// value.
pub fn broker_server_config(
    config: &ServerConfig,
    node_id: i32,
    cluster_id: &str,
    scram: &Arc<ImageScramCredentials>,
) -> anyhow::Result<BrokerServerConfig> {
    let (binds, endpoints) = broker_listeners(config)?;
    let inter_broker = inter_broker_listener_name(config, &endpoints)?;
    let inter_broker_protocol = binds
        .iter()
        .find(|b| b.name == inter_broker)
        .map_or_else(|| "PLAINTEXT".to_owned(), |b| b.protocol.clone());
    let log_dirs: Vec<PathBuf> = config.log_dirs().into_iter().map(PathBuf::from).collect();
    let metadata_dir = config
        .metadata_log_dir()
        .map(PathBuf::from)
        .or_else(|| log_dirs.first().cloned())
        .context("neither metadata.log.dir nor log.dirs is set")?;
    let directory_ids = initialize_log_dirs(&log_dirs, &metadata_dir, node_id, cluster_id)?;
    let static_config = std::sync::Arc::new(config.kafka_config()?);
    let rack = config.get("broker.rack").map(str::to_owned);
    let request_timeout = parse_ms(config, "request.timeout.ms", REQUEST_TIMEOUT_MS_DEFAULT)?;
    let lifecycle = LifecycleConfig {
        node_id,
        cluster_id: cluster_id.to_owned(),
        incarnation_id: uuid::Uuid::new_v4(),
        listeners: endpoints.clone(),
        rack: rack.clone(),
        log_dir_ids: directory_ids,
        previous_broker_epoch: -1,
        heartbeat_interval: parse_ms(
            config,
            "broker.heartbeat.interval.ms",
            BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT,
        )?,
        request_timeout,
    };
    let listener_names: Vec<&str> = binds.iter().map(|l| l.name.as_str()).collect();
    let connection_quotas = krust_net::ConnectionQuotas::new(connection_quota_settings(
        config,
        &inter_broker,
        &listener_names,
    )?);
    let listeners = binds
        .into_iter()
        .map(|listener| {
            let mut net = listener_config(config, &listener.name, &listener.protocol, scram)?;
            net.connection_quotas = Some(Arc::clone(&connection_quotas));
            Ok(BrokerListener {
                config: net,
                name: listener.name,
                bind: listener.bind,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Kafka's inter-broker channel: the listener's security protocol, its `ssl.*`, and
    // `sasl.mechanism.inter.broker.protocol` with the listener's JAAS entry (after the
    // listeners' own settings, whose errors come first).
    let inter_broker_security = super::security::client_security(
        config,
        &inter_broker,
        &inter_broker_protocol,
        "sasl.mechanism.inter.broker.protocol",
    )?;
    let (_, controller_security) = super::security::controller_client(config)?;
    Ok(BrokerServerConfig {
        broker: BrokerConfig {
            node_id,
            cluster_id: cluster_id.to_owned(),
            log_dirs,
            static_config,
            advertised_listeners: endpoints,
            inter_broker_listener_name: inter_broker,
            inter_broker_security,
            rack,
        },
        lifecycle,
        listeners,
        forward_timeout: request_timeout,
        authorizer: authorizer_config(config)?,
        controller_security,
    })
}

/// Kafka's KRaft authorizer class, the one `authorizer.class.name` may name.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// ZooKeeper mode's authorizer, which Kafka's migration guide replaces with
/// [`STANDARD_AUTHORIZER`] when a broker moves to KRaft.
pub const ZOOKEEPER_AUTHORIZER: &str = "kafka.security.authorizer.AclAuthorizer";

/// `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found` as Kafka's
/// `StandardAuthorizer.configure` reads them; `None` without an authorizer.
///
/// # Errors
/// Another authorizer class, or a super user that is not `type:name`.
pub fn authorizer_config(config: &ServerConfig) -> anyhow::Result<Option<AuthorizerConfig>> {
    let class = config.get("authorizer.class.name").map_or("", str::trim);
    if class.is_empty() {
        return Ok(None);
    }
    if class == ZOOKEEPER_AUTHORIZER {
        anyhow::bail!(
            "Invalid value {class} for configuration authorizer.class.name: it is ZooKeeper \
             mode's authorizer; a KRaft broker uses {STANDARD_AUTHORIZER} (the migration \
             copies the ACLs into the metadata log)"
        );
    }
    if class != STANDARD_AUTHORIZER {
        anyhow::bail!(
            "Invalid value {class} for configuration authorizer.class.name: krust provides \
             {STANDARD_AUTHORIZER} only"
        );
    }
    let super_users = AuthorizerConfig::parse_super_users(config.get("super.users").unwrap_or(""))
        .map_err(|bad| {
            anyhow::anyhow!(
                "super.users: expected a string in format principalType:principalName but got {bad}"
            )
        })?;
    let allow_everyone_if_no_acl_found = config
        .get("allow.everyone.if.no.acl.found")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    Ok(Some(AuthorizerConfig {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// Whether `dir` holds `meta.properties` (used by `krust dev` to decide whether to format).
#[must_use]
pub fn is_formatted(dir: &Path) -> bool {
    dir.join("meta.properties").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ServerConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("server.properties");
        std::fs::write(&path, text).expect("write");
        ServerConfig::load(&path).expect("load")
    }

    const BASE: &str = "process.roles=broker\nnode.id=4\ncontroller.listener.names=CONTROLLER\n\
                        controller.quorum.voters=1@127.0.0.1:9093\n";

    #[test]
    fn authorizer_settings_as_standard_authorizer_reads_them() {
        assert_eq!(
            authorizer_config(&config(BASE)).expect("no authorizer"),
            None
        );
        let on = config(&format!(
            "{BASE}authorizer.class.name={STANDARD_AUTHORIZER}\n\
             super.users= User:admin ; ;User:CN=broker,OU=kafka\n\
             allow.everyone.if.no.acl.found= TRUE\n"
        ));
        let settings = authorizer_config(&on)
            .expect("valid")
            .expect("an authorizer");
        assert_eq!(
            settings.super_users.into_iter().collect::<Vec<_>>(),
            ["User:CN=broker,OU=kafka", "User:admin"]
        );
        assert!(settings.allow_everyone_if_no_acl_found);
        let other = config(&format!("{BASE}authorizer.class.name=com.example.Mine\n"));
        let error = authorizer_config(&other)
            .expect_err("unknown class")
            .to_string();
        assert!(error.contains("com.example.Mine"), "{error}");
        let bad = config(&format!(
            "{BASE}authorizer.class.name={STANDARD_AUTHORIZER}\nsuper.users=admin\n"
        ));
        let error = authorizer_config(&bad)
            .expect_err("bad principal")
            .to_string();
        assert!(
            error.contains("expected a string in format principalType:principalName but got admin"),
            "{error}"
        );
    }

    #[test]
    fn broker_listeners_skip_the_controller_listener_and_follow_advertised_listeners() {
        let c = config(&format!(
            "{BASE}listeners=PLAINTEXT://:19092,CONTROLLER://127.0.0.1:9093\n\
             advertised.listeners=PLAINTEXT://broker4.example:29092\n"
        ));
        let (binds, endpoints) = broker_listeners(&c).expect("listeners");
        assert_eq!(binds.len(), 1);
        assert_eq!(binds[0].bind, "0.0.0.0:19092");
        assert_eq!(
            endpoints,
            vec![Endpoint {
                name: "PLAINTEXT".to_owned(),
                host: "broker4.example".to_owned(),
                port: 29092,
                security_protocol: PLAINTEXT,
            }]
        );
        assert_eq!(
            inter_broker_listener_name(&c, &endpoints).expect("inter-broker"),
            "PLAINTEXT"
        );
    }

    #[test]
    fn connection_quota_settings_come_from_kafkas_keys() {
        let c = config(&format!(
            "{BASE}max.connections=7\nmax.connections.per.ip=3\nmax.connections.per.ip.overrides=127.0.0.1:5\nmax.connection.creation.rate=20\nlistener.name.plaintext.max.connection.creation.rate=4\nquota.window.num=5\n"
        ));
        let q = connection_quota_settings(&c, "PLAINTEXT", &["PLAINTEXT", "OTHER"]).expect("valid");
        assert_eq!(q.max_connections, 7);
        assert_eq!(q.max_connections_per_ip, 3);
        assert_eq!(
            q.max_connections_per_ip_overrides,
            [("127.0.0.1".parse().expect("ip"), 5)].into()
        );
        assert_eq!(q.max_connection_creation_rate, 20.0);
        assert_eq!(
            q.listener_max_connection_creation_rates,
            [("PLAINTEXT".to_owned(), 4.0)].into(),
            "OTHER falls back to the broker-wide rate"
        );
        assert_eq!(q.quota_window.samples, 5);
        let bad = config(&format!(
            "{BASE}listener.name.plaintext.max.connection.creation.rate=x\n"
        ));
        let err = connection_quota_settings(&bad, "PLAINTEXT", &["PLAINTEXT"]).expect_err("bad");
        assert_eq!(
            err.to_string(),
            "Invalid value x for configuration max.connection.creation.rate: Not a number of type INT"
        );
    }

    #[test]
    fn listener_limits_come_from_kafkas_keys() {
        let c = config(&format!(
            "{BASE}socket.request.max.bytes=1048576\nmax.connections=10\nconnections.max.idle.ms=5000\n"
        ));
        let net = listener_config(&c, "PLAINTEXT", "PLAINTEXT", &scram()).expect("limits");
        assert_eq!(net.socket_request_max_bytes, 1_048_576);
        assert_eq!(net.max_connections, 10);
        assert_eq!(net.connections_max_idle, Duration::from_secs(5));
        let defaults =
            listener_config(&config(BASE), "PLAINTEXT", "PLAINTEXT", &scram()).expect("defaults");
        assert_eq!(
            defaults.socket_request_max_bytes,
            krust_net::SOCKET_REQUEST_MAX_BYTES_DEFAULT
        );
        let bad = config(&format!("{BASE}max.connections=0\n"));
        let err = listener_config(&bad, "PLAINTEXT", "PLAINTEXT", &scram()).expect_err("zero");
        assert!(err.to_string().contains("max.connections"), "{err}");
    }

    #[test]
    fn a_zero_port_is_advertised_as_the_port_actually_used() {
        let c = config(&format!("{BASE}listeners=PLAINTEXT://127.0.0.1:0\n"));
        let (binds, endpoints) = broker_listeners(&c).expect("listeners");
        assert_ne!(endpoints[0].port, 0);
        assert_eq!(binds[0].bind, format!("127.0.0.1:{}", endpoints[0].port));
        assert_eq!(endpoints[0].host, "127.0.0.1");
    }

    fn scram() -> Arc<ImageScramCredentials> {
        Arc::new(ImageScramCredentials::default())
    }

    #[test]
    fn bad_broker_listener_settings_are_clear_errors() {
        let only_controller = config(&format!("{BASE}listeners=CONTROLLER://127.0.0.1:9093\n"));
        let err = broker_listeners(&only_controller).expect_err("no broker listener");
        assert!(err.to_string().contains("no listener outside"), "{err}");
        let sasl = config(&format!(
            "{BASE}listeners=SASL_PLAINTEXT://127.0.0.1:9094\nlistener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        ));
        let err = listener_config(&sasl, "SASL_PLAINTEXT", "SASL_PLAINTEXT", &scram())
            .expect_err("GSSAPI, the default mechanism, is refused");
        assert!(
            err.to_string().contains("GSSAPI is not supported by krust"),
            "{err}"
        );
        let plain = config(&format!("{BASE}sasl.enabled.mechanisms=PLAIN\n"));
        let err = listener_config(&plain, "SASL_PLAINTEXT", "SASL_PLAINTEXT", &scram())
            .expect_err("PLAIN without JAAS");
        assert!(
            err.to_string()
                .contains("listener.name.sasl_plaintext.plain.sasl.jaas.config"),
            "{err}"
        );
        let ssl = config(&format!(
            "{BASE}listeners=SSL://127.0.0.1:9094\nlistener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT\n"
        ));
        let (binds, endpoints) = broker_listeners(&ssl).expect("SSL listener");
        assert_eq!(binds[0].protocol, "SSL");
        assert_eq!(endpoints[0].security_protocol, 1);
        let err = listener_config(&ssl, "SSL", "SSL", &scram()).expect_err("no key store");
        assert!(err.to_string().contains("ssl.keystore.location"), "{err}");
        let jks = config(&format!(
            "{BASE}listener.name.ssl.ssl.keystore.location=/nonexistent.jks\n"
        ));
        let err = listener_config(&jks, "SSL", "SSL", &scram()).expect_err("JKS");
        assert!(
            err.to_string()
                .contains("ssl.keystore.type JKS is not supported by krust"),
            "{err}"
        );
        let c = config(&format!(
            "{BASE}listeners=PLAINTEXT://127.0.0.1:9092\ninter.broker.listener.name=INTERNAL\n"
        ));
        let (_, endpoints) = broker_listeners(&c).expect("listeners");
        let err = inter_broker_listener_name(&c, &endpoints).expect_err("unknown listener");
        assert!(
            err.to_string().contains("inter.broker.listener.name"),
            "{err}"
        );
    }

    /// What a Kafka 3.9 ZooKeeper-mode broker (`broker.id=4`, no migration flag) wrote.
    const ZK_BROKER_V0: &str = "#\n#Tue Dec 01 19:10:00 UTC 2026\nbroker.id=4\nversion=0\ncluster.id=mYfQ8bLnRVGMy8aEtdJk8Q\n";

    fn dir_with(root: &Path, name: &str, meta: &str) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(META_PROPERTIES_NAME), meta).expect("meta.properties");
        dir
    }

    fn read_meta(dir: &Path) -> krust_metadata::MetaProperties {
        let text = std::fs::read_to_string(dir.join(META_PROPERTIES_NAME)).expect("read");
        krust_metadata::MetaProperties::parse(&text).expect("parse")
    }

    #[test]
    fn a_zookeeper_brokers_v0_dir_is_taken_over_and_given_a_directory_id_staying_v0() {
        let root = tempfile::tempdir().expect("tempdir");
        let a = dir_with(root.path(), "a", ZK_BROKER_V0);
        let b = dir_with(root.path(), "b", ZK_BROKER_V0);
        let ids = initialize_log_dirs(&[a.clone(), b.clone()], &a, 4, "mYfQ8bLnRVGMy8aEtdJk8Q")
            .expect("v0 dirs of broker.id 4 are node 4's");
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        for (dir, id) in [(&a, ids[0]), (&b, ids[1])] {
            let meta = read_meta(dir);
            assert_eq!(meta.version, krust_metadata::MetaPropertiesVersion::V0);
            assert_eq!(meta.node_id, Some(4));
            assert_eq!(meta.cluster_id.as_deref(), Some("mYfQ8bLnRVGMy8aEtdJk8Q"));
            assert_eq!(meta.directory_id, Some(id));
            let text = std::fs::read_to_string(dir.join(META_PROPERTIES_NAME)).expect("read");
            let keys: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once('=').map(|(k, _)| k))
                .collect();
            // `Properties.store` order of Kafka's v0 rewrite.
            assert_eq!(keys, ["broker.id", "directory.id", "version", "cluster.id"]);
        }
        // A second start finds the ids and rewrites nothing.
        let before = std::fs::read(a.join(META_PROPERTIES_NAME)).expect("read");
        let again =
            initialize_log_dirs(&[a.clone(), b], &a, 4, "mYfQ8bLnRVGMy8aEtdJk8Q").expect("again");
        assert_eq!(again, ids);
        assert_eq!(
            std::fs::read(a.join(META_PROPERTIES_NAME)).expect("read"),
            before
        );
    }

    #[test]
    fn a_v0_dir_that_does_not_match_is_refused_with_kafkas_messages() {
        let root = tempfile::tempdir().expect("tempdir");
        let v0 = dir_with(root.path(), "v0", ZK_BROKER_V0);
        let err = initialize_log_dirs(std::slice::from_ref(&v0), &v0, 5, "mYfQ8bLnRVGMy8aEtdJk8Q")
            .expect_err("broker.id 4 is not node 5");
        assert_eq!(
            err.to_string(),
            format!(
                "Stored node id 4 doesn't match previous node id 5 in {}/meta.properties. If you moved your data, make sure your configured node id matches. If you intend to create a new node, you should remove all data in your data directories.",
                v0.display()
            )
        );
        let err = initialize_log_dirs(std::slice::from_ref(&v0), &v0, 4, "otherClusterAAAAAAAAAA")
            .expect_err("another cluster");
        assert_eq!(
            err.to_string(),
            format!(
                "Invalid cluster.id in: {}/meta.properties. Expected otherClusterAAAAAAAAAA, but read mYfQ8bLnRVGMy8aEtdJk8Q",
                v0.display()
            )
        );
        let no_cluster = dir_with(root.path(), "nc", "version=0\nbroker.id=4\n");
        let err = initialize_log_dirs(std::slice::from_ref(&no_cluster), &no_cluster, 4, "c")
            .expect_err("no cluster.id");
        assert_eq!(
            err.to_string(),
            format!("Error: cluster ID not found in {}", no_cluster.display())
        );
        let no_broker = dir_with(root.path(), "nb", "version=0\ncluster.id=c\n");
        let err = initialize_log_dirs(std::slice::from_ref(&no_broker), &no_broker, 4, "c")
            .expect_err("no broker.id");
        assert_eq!(
            err.to_string(),
            format!("Error: node ID not found in {}", no_broker.display())
        );
        // Nothing was rewritten by a refused start.
        assert_eq!(
            std::fs::read_to_string(v0.join(META_PROPERTIES_NAME)).expect("read"),
            ZK_BROKER_V0
        );
    }

    #[test]
    fn a_v0_dir_next_to_a_formatted_metadata_dir_and_a_stray_metadata_partition() {
        let root = tempfile::tempdir().expect("tempdir");
        let id = uuid::Uuid::from_u64_pair(7, 7);
        let meta_dir = dir_with(
            root.path(),
            "meta",
            &krust_metadata::MetaProperties::v1("mYfQ8bLnRVGMy8aEtdJk8Q", 4, Some(id))
                .to_file_text(0),
        );
        let v0 = dir_with(root.path(), "v0", ZK_BROKER_V0);
        let ids = initialize_log_dirs(
            std::slice::from_ref(&v0),
            &meta_dir,
            4,
            "mYfQ8bLnRVGMy8aEtdJk8Q",
        )
        .expect("a v1 metadata dir and a v0 log dir of the same node agree");
        assert_eq!(ids.len(), 1, "only log dirs are registered");
        assert_ne!(ids[0], id);
        assert_eq!(read_meta(&meta_dir).directory_id, Some(id));
        std::fs::create_dir_all(v0.join(METADATA_PARTITION_DIR)).expect("mkdir");
        let err = initialize_log_dirs(
            std::slice::from_ref(&v0),
            &meta_dir,
            4,
            "mYfQ8bLnRVGMy8aEtdJk8Q",
        )
        .expect_err("metadata partition outside the metadata dir");
        assert_eq!(
            err.to_string(),
            format!(
                "Found unexpected metadata location in data directory `{}/__cluster_metadata-0` (the configured metadata directory is {}).",
                v0.display(),
                meta_dir.display()
            )
        );
    }
}
