//! `krust migration preflight`: every documented precondition of a migration (facts §6.1,
//! docs/ops.html "ZooKeeper to KRaft Migration", Kafka 3.9's `KafkaConfig.validateValues`),
//! checked against the controller's and the brokers' configs and the live ZooKeeper.
//!
//! Each check is one [`Check`]: `OK|WARN|FAIL <check>: <what was found>`, and for a failure
//! (or a warning) what to change. The migration can start when no check fails ([`can_start`]).
//! Where Kafka has a message for the rule, the check quotes it.

use std::collections::BTreeSet;
use std::fmt;

use krust_metadata::MetadataVersion;

use super::zk_view::ClusterZnodes;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// The precondition holds.
    Ok,
    /// It holds, but something deserves a look (or the check could not be made).
    Warn,
    /// It does not hold: the migration cannot start (or would not finish).
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ok => "OK",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
        })
    }
}

/// One checked precondition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The outcome.
    pub level: Level,
    /// What was checked (`controller process.roles`, `broker 1 inter.broker.protocol.version`, …).
    pub name: String,
    /// What was found.
    pub found: String,
    /// What to change (for a failure or a warning).
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, found: impl Into<String>) -> Self {
        Self {
            level: Level::Ok,
            name: name.into(),
            found: found.into(),
            fix: None,
        }
    }

    fn warn(name: impl Into<String>, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            level: Level::Warn,
            name: name.into(),
            found: found.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(name: impl Into<String>, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            level: Level::Fail,
            name: name.into(),
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
}

impl fmt::Display for Check {
    /// `FAIL broker 1 zookeeper.metadata.migration.enable: false (server-1.properties) — fix: set …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.level, self.name, self.found)?;
        if let Some(fix) = &self.fix {
            write!(f, " — fix: {fix}")?;
        }
        Ok(())
    }
}

/// Whether the migration can start: no check failed.
#[must_use]
pub fn can_start(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.level != Level::Fail)
}

/// What the preflight needs from the KRaft controller's `server.properties` (and its storage).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerFacts {
    /// The file, for messages.
    pub file: String,
    /// `process.roles` as written.
    pub process_roles: Vec<String>,
    /// `node.id` (-1 when unset).
    pub node_id: i32,
    /// `zookeeper.metadata.migration.enable`.
    pub migration_enabled: bool,
    /// `zookeeper.connect`.
    pub zookeeper_connect: Option<String>,
    /// The listener names of `listeners`.
    pub listener_names: Vec<String>,
    /// `controller.listener.names`.
    pub controller_listener_names: Vec<String>,
    /// Ids in `controller.quorum.voters`.
    pub voter_ids: Vec<i32>,
    /// `controller.quorum.bootstrap.servers`.
    pub bootstrap_servers: Vec<String>,
    /// Kafka's messages for what the file fails of `KafkaConfig`'s validation (empty: valid).
    pub config_errors: Vec<String>,
    /// The metadata log directory (`metadata.log.dir`, else the first of `log.dirs`).
    pub metadata_log_dir: Option<String>,
    /// `cluster.id` of its `meta.properties` there; `None` when not formatted yet.
    pub formatted_cluster_id: Option<String>,
    /// The metadata.version of its `bootstrap.checkpoint` (`None`: not formatted, or no file).
    pub bootstrap_metadata_version: Option<MetadataVersion>,
    /// The listener the controller reaches ZooKeeper-mode brokers on:
    /// `inter.broker.listener.name`, else the name of `security.inter.broker.protocol`
    /// (default `PLAINTEXT`).
    pub inter_broker_listener: String,
}

/// What the preflight needs from one ZooKeeper-mode broker's `server.properties`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerFacts {
    /// The file, for messages.
    pub file: String,
    /// `process.roles` as written (empty for a ZooKeeper-mode broker).
    pub process_roles: Vec<String>,
    /// `broker.id` (or `node.id`); -1 when unset.
    pub broker_id: i32,
    /// `broker.id.generation.enable` (default true).
    pub broker_id_generation_enable: bool,
    /// `reserved.broker.max.id` (default 1000).
    pub reserved_broker_max_id: i32,
    /// `inter.broker.protocol.version` as written (`None`: Kafka's default, 3.9-IV0).
    pub inter_broker_protocol_version: Option<String>,
    /// Number of `log.dirs`.
    pub log_dir_count: usize,
    /// `zookeeper.metadata.migration.enable`.
    pub migration_enabled: bool,
    /// `zookeeper.connect`.
    pub zookeeper_connect: Option<String>,
    /// Ids in `controller.quorum.voters`.
    pub voter_ids: Vec<i32>,
    /// `controller.quorum.bootstrap.servers`.
    pub bootstrap_servers: Vec<String>,
    /// `controller.listener.names`.
    pub controller_listener_names: Vec<String>,
    /// Listener names of the effective `listener.security.protocol.map`.
    pub security_protocol_map_names: Vec<String>,
    /// Kafka's messages for what the file fails of `KafkaConfig`'s validation (empty: valid).
    pub config_errors: Vec<String>,
}

/// `host:port,…[/chroot]` normalized for comparison: sorted lower-case hosts, the chroot
/// without a trailing `/` (`/` alone is no chroot).
#[must_use]
pub fn normalize_zk_connect(connect: &str) -> (Vec<String>, String) {
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], &connect[i..]),
        None => (connect, ""),
    };
    let mut hosts: Vec<String> = hosts
        .split(',')
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    (hosts, chroot.trim_end_matches('/').to_owned())
}

fn same_zk(a: &str, b: &str) -> bool {
    normalize_zk_connect(a) == normalize_zk_connect(b)
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(empty)".to_owned()
    } else {
        items.join(",")
    }
}

/// Runs every check. `zookeeper` is the `--zookeeper` connect string the tool read `zk` from.
#[must_use]
pub fn preflight(
    zookeeper: &str,
    controller: &ControllerFacts,
    brokers: &[BrokerFacts],
    zk: &ClusterZnodes,
) -> Vec<Check> {
    let mut checks = controller_checks(zookeeper, controller, zk);
    for broker in brokers {
        checks.extend(broker_checks(zookeeper, broker));
        checks.extend(same_quorum(controller, broker));
    }
    checks.extend(zookeeper_checks(controller, brokers, zk));
    checks
}

fn controller_checks(zookeeper: &str, c: &ControllerFacts, zk: &ClusterZnodes) -> Vec<Check> {
    let mut out = Vec::new();
    let roles = list(&c.process_roles);
    let name = |what: &str| format!("controller {what}");
    out.push(match c.process_roles.as_slice() {
        [role] if role == "controller" => Check::ok(
            name("process.roles"),
            format!("controller ({}, node.id={})", c.file, c.node_id),
        ),
        [] => Check::fail(
            name("process.roles"),
            format!("not set in {}: a ZooKeeper-mode broker config", c.file),
            "give the KRaft controller its own file with process.roles=controller",
        ),
        _ => Check::fail(
            name("process.roles"),
            format!("{roles} in {}", c.file),
            "set process.roles=controller: the migration supports only a dedicated controller \
             quorum (combined mode is not supported for migration)",
        ),
    });
    for error in &c.config_errors {
        out.push(Check::fail(
            name("config"),
            format!("{}: {error}", c.file),
            "correct the file: a controller that fails this validation does not start",
        ));
    }
    out.push(if c.migration_enabled {
        Check::ok(name("zookeeper.metadata.migration.enable"), "true")
    } else {
        Check::fail(
            name("zookeeper.metadata.migration.enable"),
            format!("false in {}", c.file),
            "set zookeeper.metadata.migration.enable=true",
        )
    });
    out.push(match &c.zookeeper_connect {
        None => Check::fail(
            name("zookeeper.connect"),
            format!("not set in {}", c.file),
            format!(
                "set zookeeper.connect={zookeeper} (Kafka: \"If using \
                 `zookeeper.metadata.migration.enable` in KRaft mode, `zookeeper.connect` must \
                 also be set.\")"
            ),
        ),
        Some(connect) if same_zk(connect, zookeeper) => {
            Check::ok(name("zookeeper.connect"), connect.clone())
        }
        Some(connect) => Check::fail(
            name("zookeeper.connect"),
            format!("{connect} differs from --zookeeper {zookeeper} (hosts or chroot)"),
            format!("point the controller at the brokers' ensemble and chroot: zookeeper.connect={zookeeper}"),
        ),
    });
    let unknown: Vec<String> = c
        .controller_listener_names
        .iter()
        .filter(|n| !c.listener_names.iter().any(|l| l.eq_ignore_ascii_case(n)))
        .cloned()
        .collect();
    out.push(if c.controller_listener_names.is_empty() {
        Check::fail(
            name("controller.listener.names"),
            "empty",
            "set controller.listener.names to the listener of `listeners` the quorum uses",
        )
    } else if !unknown.is_empty() {
        Check::fail(
            name("controller.listener.names"),
            format!(
                "{} not in listeners {}",
                list(&unknown),
                list(&c.listener_names)
            ),
            "controller.listener.names must only contain values appearing in the 'listeners' \
             configuration when running the KRaft controller role",
        )
    } else {
        Check::ok(
            name("controller.listener.names"),
            format!(
                "{} (listeners {})",
                list(&c.controller_listener_names),
                list(&c.listener_names)
            ),
        )
    });
    out.push(
        if c.voter_ids.is_empty() && c.bootstrap_servers.is_empty() {
            Check::fail(
                name("controller.quorum.voters"),
                "neither controller.quorum.voters nor controller.quorum.bootstrap.servers is set",
                "set controller.quorum.voters (id@host:port,…) on the controllers and the brokers",
            )
        } else if !c.voter_ids.is_empty() && !c.voter_ids.contains(&c.node_id) {
            Check::fail(
                name("controller.quorum.voters"),
                format!(
                    "node.id {} is not among the voters {:?}",
                    c.node_id, c.voter_ids
                ),
                "add this controller to controller.quorum.voters or fix its node.id",
            )
        } else if c.voter_ids.is_empty() {
            Check::ok(
                name("controller.quorum.bootstrap.servers"),
                list(&c.bootstrap_servers),
            )
        } else {
            Check::ok(
                name("controller.quorum.voters"),
                format!("{:?}", c.voter_ids),
            )
        },
    );
    match (c.bootstrap_metadata_version, zk.initial_migration_done()) {
        (None, _) => {}
        (Some(mv), _) if !mv.is_migration_supported() => out.push(Check::fail(
            name("metadata.version"),
            format!("{} in bootstrap.checkpoint", mv.version()),
            "the migration needs metadata.version 3.4-IV0 or higher (3.6-IV1 to start one): \
             re-format the controllers with --release-version 3.9",
        )),
        (Some(mv), false) if !mv.is_metadata_transaction_supported() => out.push(Check::fail(
            name("metadata.version"),
            format!("{} in bootstrap.checkpoint", mv.version()),
            "a new migration needs metadata.version 3.6-IV1 or higher (metadata transactions): \
             re-format the controllers with --release-version 3.9",
        )),
        (Some(mv), _) => out.push(Check::ok(
            name("metadata.version"),
            format!("{} in bootstrap.checkpoint", mv.version()),
        )),
    }
    let dir = c
        .metadata_log_dir
        .as_deref()
        .unwrap_or("(no log directory)");
    out.push(match (&c.formatted_cluster_id, &zk.cluster_id) {
        (None, Some(id)) => Check::warn(
            name("cluster id"),
            format!("{dir} is not formatted yet"),
            format!(
                "format it with ZooKeeper's cluster id: krust storage format --config {} \
                 --cluster-id {id}",
                c.file
            ),
        ),
        (None, None) => Check::warn(
            name("cluster id"),
            format!("{dir} is not formatted yet and ZooKeeper has no /cluster/id"),
            "format the controller with the ZooKeeper cluster's id once it has one",
        ),
        (Some(formatted), Some(id)) if formatted == id => Check::ok(
            name("cluster id"),
            format!("{formatted} in {dir}/meta.properties equals /cluster/id"),
        ),
        (Some(formatted), Some(id)) => Check::fail(
            name("cluster id"),
            format!("{formatted} in {dir}/meta.properties but /cluster/id is {id}"),
            format!(
                "the quorum must be formatted with the ZooKeeper cluster's id: wipe the \
                 controllers' storage and run krust storage format --config {} --cluster-id {id}",
                c.file
            ),
        ),
        (Some(formatted), None) => Check::fail(
            name("cluster id"),
            format!("{formatted} in {dir}/meta.properties but ZooKeeper has no /cluster/id"),
            "check --zookeeper (hosts and chroot) points at the ZooKeeper-mode cluster",
        ),
    });
    out
}

fn broker_checks(zookeeper: &str, b: &BrokerFacts) -> Vec<Check> {
    let mut out = Vec::new();
    let who = if b.broker_id >= 0 {
        format!("broker {}", b.broker_id)
    } else {
        format!("broker {}", b.file)
    };
    let name = |what: &str| format!("{who} {what}");
    if !b.process_roles.is_empty() {
        out.push(Check::warn(
            name("process.roles"),
            format!(
                "{} in {}: already a KRaft node, its ZooKeeper-mode checks are skipped",
                list(&b.process_roles),
                b.file
            ),
            "give the ZooKeeper-mode broker's file (the preflight checks brokers before they \
             move to KRaft)",
        ));
        return out;
    }
    for error in &b.config_errors {
        out.push(Check::fail(
            name("config"),
            format!("{}: {error}", b.file),
            "correct the file: a broker that fails this validation does not start",
        ));
    }
    out.push(if b.broker_id < 0 {
        Check::fail(
            name("broker.id"),
            format!(
                "not set in {} (broker.id.generation.enable={})",
                b.file, b.broker_id_generation_enable
            ),
            "broker.id generation is incompatible with ZooKeeper migration. Please stop using \
             it before enabling migration (set broker.id to a value greater or equal to 0): set \
             broker.id to the id in the broker's meta.properties",
        )
    } else if b.broker_id_generation_enable && b.broker_id > b.reserved_broker_max_id {
        Check::fail(
            name("broker.id"),
            format!(
                "{} > reserved.broker.max.id={}",
                b.broker_id, b.reserved_broker_max_id
            ),
            "broker.id must be greater than or equal to -1 and not greater than \
             reserved.broker.max.id: set broker.id.generation.enable=false",
        )
    } else {
        Check::ok(name("broker.id"), b.broker_id.to_string())
    });
    let ibp_text = b
        .inter_broker_protocol_version
        .clone()
        .unwrap_or_else(|| "3.9 (default)".to_owned());
    let ibp = match &b.inter_broker_protocol_version {
        None => Some(MetadataVersion::IBP_3_9_IV0),
        Some(text) => MetadataVersion::from_version_string(text).ok(),
    };
    out.push(match ibp {
        None => Check::fail(
            name("inter.broker.protocol.version"),
            format!("{ibp_text} is not a version Kafka 3.9 knows"),
            "set inter.broker.protocol.version to 3.4 or higher",
        ),
        Some(v) if !v.is_migration_supported() => Check::fail(
            name("inter.broker.protocol.version"),
            ibp_text,
            "Cannot enable ZooKeeper migration without setting 'inter.broker.protocol.version' \
             to 3.4 or higher (roll the brokers with the higher version first)",
        ),
        Some(v) if b.log_dir_count > 1 && !v.is_directory_assignment_supported() => Check::fail(
            name("inter.broker.protocol.version"),
            format!("{ibp_text} with {} log directories", b.log_dir_count),
            "Cannot enable ZooKeeper migration with multiple log directories (aka JBOD) without \
             setting 'inter.broker.protocol.version' to 3.7-IV2 or higher",
        ),
        Some(_) => Check::ok(name("inter.broker.protocol.version"), ibp_text),
    });
    out.push(if b.migration_enabled {
        Check::ok(name("zookeeper.metadata.migration.enable"), "true")
    } else {
        Check::fail(
            name("zookeeper.metadata.migration.enable"),
            format!("false in {}", b.file),
            format!(
                "set zookeeper.metadata.migration.enable=true in {} (with \
                 controller.quorum.voters and controller.listener.names) and restart the broker",
                b.file
            ),
        )
    });
    out.push(
        if b.voter_ids.is_empty() && b.bootstrap_servers.is_empty() {
            Check::fail(
                name("controller.quorum.voters"),
                "neither controller.quorum.voters nor controller.quorum.bootstrap.servers is set",
                "If using zookeeper.metadata.migration.enable, either \
             controller.quorum.bootstrap.servers must contain the set of bootstrap controllers \
             or controller.quorum.voters must contain a parseable set of controllers.",
            )
        } else if b.voter_ids.is_empty() {
            Check::ok(
                name("controller.quorum.bootstrap.servers"),
                list(&b.bootstrap_servers),
            )
        } else {
            Check::ok(
                name("controller.quorum.voters"),
                format!("{:?}", b.voter_ids),
            )
        },
    );
    let unmapped: Vec<String> = b
        .controller_listener_names
        .iter()
        .filter(|n| {
            !b.security_protocol_map_names
                .iter()
                .any(|m| m.eq_ignore_ascii_case(n))
        })
        .cloned()
        .collect();
    out.push(if b.controller_listener_names.is_empty() {
        Check::fail(
            name("controller.listener.names"),
            "empty",
            "controller.listener.names must not be empty when running in ZooKeeper migration \
             mode: set it to the controllers' listener name (e.g. CONTROLLER)",
        )
    } else if !unmapped.is_empty() {
        Check::fail(
            name("controller.listener.names"),
            format!("{} not in listener.security.protocol.map", list(&unmapped)),
            format!(
                "add {} (or their security protocols) to listener.security.protocol.map",
                unmapped
                    .iter()
                    .map(|n| format!("{n}:PLAINTEXT"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        )
    } else {
        Check::ok(
            name("controller.listener.names"),
            list(&b.controller_listener_names),
        )
    });
    out.push(match &b.zookeeper_connect {
        None => Check::fail(
            name("zookeeper.connect"),
            format!("not set in {}", b.file),
            format!("set zookeeper.connect={zookeeper}"),
        ),
        Some(c) if same_zk(c, zookeeper) => Check::ok(name("zookeeper.connect"), c.clone()),
        Some(c) => Check::fail(
            name("zookeeper.connect"),
            format!("{c} differs from --zookeeper {zookeeper} (hosts or chroot)"),
            "check --zookeeper and the broker's zookeeper.connect name the same cluster",
        ),
    });
    out
}

/// A broker registers with the voters of its own file: they must be the controller's.
fn same_quorum(c: &ControllerFacts, b: &BrokerFacts) -> Option<Check> {
    if !b.process_roles.is_empty() || b.voter_ids.is_empty() || c.voter_ids.is_empty() {
        return None;
    }
    let ours: BTreeSet<i32> = c.voter_ids.iter().copied().collect();
    let theirs: BTreeSet<i32> = b.voter_ids.iter().copied().collect();
    (ours != theirs).then(|| {
        Check::fail(
            format!("broker {} quorum", b.broker_id),
            format!(
                "controller.quorum.voters of {} names {theirs:?}, the controller's names {ours:?}",
                b.file
            ),
            "give the brokers the controllers' controller.quorum.voters",
        )
    })
}

fn zookeeper_checks(
    c: &ControllerFacts,
    brokers: &[BrokerFacts],
    zk: &ClusterZnodes,
) -> Vec<Check> {
    let mut out = Vec::new();
    for error in &zk.errors {
        out.push(Check::fail(
            "zookeeper znode",
            error.clone(),
            "fix or remove the znode (it was not written by Kafka 3.x); the migration cannot read it",
        ));
    }
    out.push(match &zk.cluster_id {
        Some(id) => Check::ok("zookeeper /cluster/id", id.clone()),
        None => Check::fail(
            "zookeeper /cluster/id",
            "absent",
            "no ZooKeeper-mode cluster here: check the hosts and chroot of --zookeeper",
        ),
    });
    let registered: BTreeSet<i32> = zk.brokers.keys().copied().collect();
    out.push(if registered.is_empty() {
        Check::warn(
            "zookeeper /brokers/ids",
            "no broker registered",
            "start the ZooKeeper-mode brokers: the migration waits until every broker has \
             registered with the quorum",
        )
    } else {
        Check::ok("zookeeper /brokers/ids", format!("{registered:?}"))
    });
    let reserved_max = brokers
        .iter()
        .map(|b| b.reserved_broker_max_id)
        .max()
        .unwrap_or(1000);
    for id in &registered {
        let in_file = brokers.iter().any(|b| b.broker_id == *id);
        if *id > reserved_max && !in_file {
            out.push(Check::warn(
                format!("zookeeper broker {id}"),
                format!("id above reserved.broker.max.id={reserved_max}: looks generated"),
                format!(
                    "set broker.id={id} explicitly in that broker's server.properties (generated \
                     ids are incompatible with the migration) and pass it with --broker-config"
                ),
            ));
        }
    }
    let listener = &c.inter_broker_listener;
    let unreachable: Vec<String> = zk
        .brokers
        .values()
        .filter(|b| {
            !b.endpoints.iter().any(|e| {
                e.split_once("://")
                    .is_some_and(|(name, _)| name.eq_ignore_ascii_case(listener))
            })
        })
        .map(|b| format!("broker {} has {}", b.id, b.endpoints.join(",")))
        .collect();
    if !zk.brokers.is_empty() {
        out.push(if unreachable.is_empty() {
            Check::ok(
                "controller inter-broker listener",
                format!("every registered broker has a {listener} endpoint"),
            )
        } else {
            Check::fail(
                "controller inter-broker listener",
                format!(
                    "{listener} (inter.broker.listener.name or security.inter.broker.protocol) \
                     but {}",
                    unreachable.join("; ")
                ),
                "set inter.broker.listener.name in the controller's file to the listener the \
                 brokers use between themselves: the controller sends them LeaderAndIsr and \
                 UpdateMetadata on it",
            )
        });
    }
    let mut controller_ids: BTreeSet<i32> = c.voter_ids.iter().copied().collect();
    if c.node_id >= 0 {
        controller_ids.insert(c.node_id);
    }
    let broker_ids: BTreeSet<i32> = registered
        .iter()
        .copied()
        .chain(brokers.iter().map(|b| b.broker_id).filter(|id| *id >= 0))
        .chain(zk.assignment_broker_ids.iter().copied())
        .collect();
    let collisions: Vec<i32> = controller_ids.intersection(&broker_ids).copied().collect();
    out.push(if collisions.is_empty() {
        Check::ok(
            "node ids",
            format!("controllers {controller_ids:?} and brokers {broker_ids:?} are distinct"),
        )
    } else {
        Check::fail(
            "node ids",
            format!("{collisions:?} are both controller and broker ids"),
            "brokers and controllers share one id space: give the controllers node ids no broker uses",
        )
    });
    for b in brokers {
        if b.broker_id >= 0 && b.process_roles.is_empty() && !registered.contains(&b.broker_id) {
            out.push(Check::warn(
                format!("broker {} registration", b.broker_id),
                format!("not in /brokers/ids ({})", b.file),
                "start the broker: the migration waits for every broker to register",
            ));
        }
    }
    if !brokers.is_empty() {
        let checked: BTreeSet<i32> = brokers.iter().map(|b| b.broker_id).collect();
        let unchecked: Vec<i32> = registered.difference(&checked).copied().collect();
        if !unchecked.is_empty() {
            out.push(Check::warn(
                "broker configs",
                format!("registered brokers {unchecked:?} were not given with --broker-config"),
                "pass every broker's server.properties to check them all",
            ));
        }
    }
    let unregistered: Vec<i32> = zk
        .assignment_broker_ids
        .iter()
        .filter(|id| !registered.contains(id))
        .copied()
        .collect();
    if !unregistered.is_empty() {
        out.push(Check::warn(
            "zookeeper topic assignments",
            format!("brokers {unregistered:?} hold replicas but are not in /brokers/ids"),
            "start them (the migration waits for every broker of an assignment to register) or \
             reassign their replicas away before migrating",
        ));
    }
    out.push(if zk.reassignment_pending {
        Check::fail(
            "zookeeper /admin/reassign_partitions",
            "a partition reassignment is pending",
            "wait for it to complete (kafka-reassign-partitions.sh --verify) before migrating",
        )
    } else {
        Check::ok("zookeeper /admin/reassign_partitions", "absent")
    });
    out.push(if zk.pending_deletions.is_empty() {
        Check::ok(
            "zookeeper /admin/delete_topics",
            "no pending topic deletion",
        )
    } else {
        let topics: Vec<&str> = zk.pending_deletions.iter().map(String::as_str).collect();
        Check::fail(
            "zookeeper /admin/delete_topics",
            format!("topics pending deletion: {}", topics.join(",")),
            "wait for the deletions to complete (their replicas' brokers must be up); a topic \
             pending deletion is not migrated",
        )
    });
    out.push(match (zk.kraft_controller(), &zk.controller) {
        (Some((id, epoch)), _) if controller_ids.contains(&id) => Check::warn(
            "zookeeper /controller",
            format!(
                "KRaft controller {id} (epoch {epoch}) of this quorum: a migration is under way"
            ),
            "nothing to prepare: use krust migration status",
        ),
        (Some((id, epoch)), _) => Check::fail(
            "zookeeper /controller",
            format!(
                "owned by KRaft controller {id} (epoch {epoch}), not one of this quorum's \
                 controllers {controller_ids:?}"
            ),
            "another KRaft quorum is migrating this cluster: stop it, or fix --zookeeper",
        ),
        (None, Some(zk_controller)) => Check::ok(
            "zookeeper /controller",
            format!("ZooKeeper controller broker {}", zk_controller.broker_id),
        ),
        (None, None) => Check::warn(
            "zookeeper /controller",
            "absent: no controller elected",
            "start the ZooKeeper-mode brokers: one of them must be the controller",
        ),
    });
    out.push(match zk.migration {
        None => Check::ok("zookeeper /migration", "absent: no migration started"),
        Some(m) if m.initial_migration_done() => Check::warn(
            "zookeeper /migration",
            format!(
                "initial migration done: ZooKeeper holds KRaft offset {} (epoch {}) written by \
                 controller {}",
                m.kraft_metadata_offset, m.kraft_metadata_epoch, m.kraft_controller_id
            ),
            "a migration is under way: use krust migration status",
        ),
        Some(m) => Check::ok(
            "zookeeper /migration",
            format!(
                "present, no metadata copied yet (controller {})",
                m.kraft_controller_id
            ),
        ),
    });
    out.push(match &zk.feature {
        None => Check::ok("zookeeper /feature", "absent (no finalized features)"),
        Some(f) => {
            let features: Vec<String> = f
                .features
                .iter()
                .map(|(name, level)| format!("{name}={level}"))
                .collect();
            Check::ok(
                "zookeeper /feature",
                format!(
                    "{} ({})",
                    if f.enabled { "enabled" } else { "disabled" },
                    if features.is_empty() {
                        "no features".to_owned()
                    } else {
                        features.join(",")
                    }
                ),
            )
        }
    });
    let versions: BTreeSet<String> = brokers
        .iter()
        .filter(|b| b.process_roles.is_empty())
        .map(|b| {
            b.inter_broker_protocol_version
                .clone()
                .unwrap_or_else(|| "3.9".to_owned())
        })
        .collect();
    if versions.len() > 1 {
        out.push(Check::warn(
            "inter.broker.protocol.version",
            format!("the brokers differ: {versions:?}"),
            "finish the inter.broker.protocol.version upgrade roll before the migration",
        ));
    }
    out
}
