//! `server.properties`: Java properties syntax (see [`krust_metadata::properties`]), every key
//! kept, unknown keys warned about, and typed access to the keys krust uses, with Kafka 3.9's
//! defaults and the `KafkaConfig` validation rules (and messages) that apply to them.

mod known_keys;
pub mod listeners;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use krust_metadata::properties::{PropertiesError, decode_text, parse_properties};
use thiserror::Error;

pub use listeners::Endpoint;

/// `process.roles` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessRole {
    /// `broker`.
    Broker,
    /// `controller`.
    Controller,
}

/// A configuration that cannot be used. `Invalid` and `Requirement` carry Kafka's messages.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not properties syntax.
    #[error("{path}:{line}: {source}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        source: PropertiesError,
    },
    /// Kafka's `ConfigException`: a value of the wrong type or a missing/contradictory setting.
    #[error("{0}")]
    Invalid(String),
    /// Kafka's `require(...)` failures (`IllegalArgumentException: requirement failed: …`).
    #[error("requirement failed: {0}")]
    Requirement(String),
}

/// One value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValue {
    /// The (unescaped) value.
    pub value: String,
    /// 1-based line of the entry in the file (0 when set in code).
    pub line: usize,
}

/// Kafka's `KafkaConfig` over `values`.
fn typed(
    values: &BTreeMap<String, ConfigValue>,
) -> Result<krust_config::KafkaConfig, krust_config::ConfigException> {
    let props: BTreeMap<String, String> = values
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    krust_config::KafkaConfig::parse(&props)
}

/// A parsed `server.properties`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    path: PathBuf,
    values: BTreeMap<String, ConfigValue>,
    /// The values parsed and validated once (Kafka's `KafkaConfig`), or Kafka's message for
    /// the first bad one; rebuilt when overrides change the values.
    kafka: Result<krust_config::KafkaConfig, krust_config::ConfigException>,
}

impl ServerConfig {
    /// Reads and parses `path`.
    ///
    /// # Errors
    /// [`ConfigError::Io`] or [`ConfigError::Syntax`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let bytes =
            read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(|source| ConfigError::Io {
                path: path.to_owned(),
                source,
            })?;
        Self::parse(&decode_text(&bytes), path)
    }

    /// Parses properties text; `path` is used in messages.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] with the line number.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let entries = parse_properties(text).map_err(|source| ConfigError::Syntax {
            path: path.to_owned(),
            line: source.line(),
            source,
        })?;
        let mut values = BTreeMap::new();
        for entry in entries {
            // As in java.util.Properties, a later line overrides an earlier one.
            values.insert(
                entry.key,
                ConfigValue {
                    value: entry.value,
                    line: entry.line,
                },
            );
        }
        let kafka = typed(&values);
        Ok(Self {
            path: path.to_owned(),
            values,
            kafka,
        })
    }

    /// `self` with `overrides` set over the file's values, as `kafka-server-start.sh
    /// --override key=value` does (line 0: not from the file).
    #[must_use]
    pub fn with_overrides(mut self, overrides: &[(String, String)]) -> Self {
        for (key, value) in overrides {
            self.values.insert(
                key.clone(),
                ConfigValue {
                    value: value.clone(),
                    line: 0,
                },
            );
        }
        self.kafka = typed(&self.values);
        self
    }

    /// The file this came from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw value of `key`, if set.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|v| v.value.as_str())
    }

    /// All keys and values as given.
    #[must_use]
    pub fn values(&self) -> &BTreeMap<String, ConfigValue> {
        &self.values
    }

    /// Kafka's `ConfigDef.parse` over the file: every key `KafkaConfig` defines must parse as its
    /// type and pass its validator; the first failure in Kafka's definition order is reported
    /// with Kafka's message ("Invalid value abc for configuration log.retention.ms: Not a
    /// number of type LONG").
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key.
    pub fn validate_values(&self) -> Result<(), ConfigError> {
        self.kafka_config().map(|_| ())
    }

    /// The file as a validated, typed [`krust_config::KafkaConfig`] (what libraries receive).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with Kafka's message naming the first bad key.
    pub fn kafka_config(&self) -> Result<krust_config::KafkaConfig, ConfigError> {
        self.kafka
            .clone()
            .map_err(|e| ConfigError::Invalid(e.message))
    }

    /// The typed value of `KafkaConfig` key `key`: as set (validated), else Kafka's default,
    /// else `default` (Kafka's default is null or does not fit `T`).
    ///
    /// # Errors
    /// The file is invalid, or a set value is valid for Kafka but does not fit `T`.
    ///
    /// # Panics
    /// If `key` is not a `KafkaConfig` key (a bug in krust).
    pub fn typed<T: krust_config::FromConfigValue>(
        &self,
        key: &str,
        default: T,
    ) -> Result<T, ConfigError> {
        let kafka = self
            .kafka
            .as_ref()
            .map_err(|e| ConfigError::Invalid(e.message.clone()))?;
        match (kafka.get::<T>(key), self.get(key)) {
            (Some(v), _) => Ok(v),
            (None, Some(raw)) => Err(ConfigError::Invalid(format!(
                "Invalid value {raw} for configuration {key}: out of the range krust supports"
            ))),
            (None, None) => Ok(default),
        }
    }

    /// Keys neither Kafka 3.9 nor krust's own additions define (they are kept; Kafka logs
    /// "supplied but isn't a known config" for them), with their lines.
    #[must_use]
    pub fn unknown_keys(&self) -> Vec<(&str, usize)> {
        self.values
            .iter()
            .filter(|(k, _)| {
                krust_config::broker_def(k).is_none()
                    && !known_keys::KRUST_KEYS.contains(&k.as_str())
                    && !known_keys::KNOWN_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .map(|(k, v)| (k.as_str(), v.line))
            .collect()
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key).map(str::trim) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(ConfigError::Invalid(format!(
                "Invalid value {v} for configuration {key}: Expected value to be either true or false"
            ))),
        }
    }

    /// A Kafka LIST value: comma separated, trimmed, empty items dropped.
    fn list(&self, key: &str) -> Vec<String> {
        self.get(key).map(csv).unwrap_or_default()
    }

    /// `process.roles`; empty means ZooKeeper mode.
    ///
    /// # Errors
    /// Kafka's message for an unknown or repeated role.
    pub fn process_roles(&self) -> Result<BTreeSet<ProcessRole>, ConfigError> {
        let names = self.list("process.roles");
        let mut roles = BTreeSet::new();
        for name in &names {
            let role = match name.as_str() {
                "broker" => ProcessRole::Broker,
                "controller" => ProcessRole::Controller,
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "Invalid value {other} for configuration process.roles: String must be one of: broker, controller"
                    )));
                }
            };
            roles.insert(role);
        }
        if roles.len() != names.len() {
            return Err(ConfigError::Invalid(format!(
                "Duplicate role names found in `process.roles`: Buffer({})",
                names.join(", ")
            )));
        }
        Ok(roles)
    }

    /// `node.id`, with `broker.id` as a synonym; -1 when neither is set.
    ///
    /// # Errors
    /// Not an integer, or `node.id` ≠ `broker.id`.
    pub fn node_id(&self) -> Result<i32, ConfigError> {
        // Kafka copies each of the two into the other when only one is set, then parses
        // `broker.id` first (so a bad lone `node.id` is reported as `broker.id`).
        let parse = |key: &str, raw: Option<&str>| {
            raw.map(|raw| {
                raw.trim().parse::<i32>().map_err(|_| {
                    ConfigError::Invalid(format!(
                        "Invalid value {raw} for configuration {key}: Not a number of type INT"
                    ))
                })
            })
            .transpose()
        };
        let broker_id = parse("broker.id", self.get("broker.id").or(self.get("node.id")))?;
        let node_id = parse("node.id", self.get("node.id").or(self.get("broker.id")))?;
        match (node_id, broker_id) {
            (Some(n), Some(b)) if n != b => Err(ConfigError::Invalid(
                "You must set `node.id` to the same value as `broker.id`.".into(),
            )),
            (Some(n), _) | (None, Some(n)) => Ok(n),
            (None, None) => Ok(-1),
        }
    }

    /// `log.dirs`, else `log.dir` (default `/tmp/kafka-logs`).
    #[must_use]
    pub fn log_dirs(&self) -> Vec<String> {
        match self.get("log.dirs") {
            Some(v) => csv(v),
            None => csv(self.get("log.dir").unwrap_or("/tmp/kafka-logs")),
        }
    }

    /// `metadata.log.dir`, else the first log directory.
    #[must_use]
    pub fn metadata_log_dir(&self) -> Option<String> {
        self.get("metadata.log.dir")
            .map(str::to_owned)
            .or_else(|| self.log_dirs().into_iter().next())
    }

    /// Every directory `kafka-storage` formats or inspects: the log directories and the metadata
    /// directory, sorted and without duplicates.
    #[must_use]
    pub fn storage_directories(&self) -> Vec<String> {
        let mut dirs: BTreeSet<String> = self.log_dirs().into_iter().collect();
        dirs.extend(self.metadata_log_dir());
        dirs.into_iter().collect()
    }

    /// `controller.listener.names`, split on commas as Kafka does (no trimming).
    #[must_use]
    pub fn controller_listener_names(&self) -> Vec<String> {
        match self.get("controller.listener.names") {
            None | Some("") => Vec::new(),
            Some(v) => v.split(',').map(str::to_owned).collect(),
        }
    }

    /// `listeners` (default `PLAINTEXT://:9092`); every listener name needs a security protocol.
    ///
    /// # Errors
    /// A malformed entry, or a name missing from the effective security protocol map.
    pub fn listeners(&self) -> Result<Vec<Endpoint>, ConfigError> {
        let value = self.get("listeners").unwrap_or("PLAINTEXT://:9092");
        let endpoints = listeners::parse_listeners(value).map_err(ConfigError::Invalid)?;
        let protocols = self.effective_listener_security_protocol_map()?;
        if let Some(missing) = endpoints
            .iter()
            .find(|e| !protocols.contains_key(&e.listener_name))
        {
            return Err(ConfigError::Invalid(format!(
                "Error creating broker listeners from '{value}': No security protocol defined for listener {}",
                missing.listener_name
            )));
        }
        Ok(endpoints)
    }

    /// Kafka's `effectiveListenerSecurityProtocolMap`: `listener.security.protocol.map` (listener
    /// name → `PLAINTEXT` | `SSL` | `SASL_PLAINTEXT` | `SASL_SSL`); in KRaft mode, when the map
    /// is not set and nothing uses SSL or SASL, controller listeners default to `PLAINTEXT`.
    ///
    /// # Errors
    /// A malformed entry or an unknown protocol.
    pub fn effective_listener_security_protocol_map(
        &self,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        const PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
        let explicit = self.get("listener.security.protocol.map");
        let text = explicit.unwrap_or(
            "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        );
        let mut map = BTreeMap::new();
        for entry in csv(text) {
            let (name, protocol) = entry.split_once(':').ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "Invalid value {text} for configuration listener.security.protocol.map: Map entry '{entry}' is improperly formatted"
                ))
            })?;
            let protocol = protocol.trim().to_uppercase();
            if !PROTOCOLS.contains(&protocol.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "Invalid security protocol `{protocol}` defined in listener.security.protocol.map"
                )));
            }
            map.insert(name.trim().to_uppercase(), protocol);
        }
        let kraft = !self.process_roles()?.is_empty();
        if kraft && explicit.is_none() {
            let secure = |name: &str| ["SSL", "SASL_SSL", "SASL_PLAINTEXT"].contains(&name);
            let listener_names: Vec<String> =
                csv(self.get("listeners").unwrap_or("PLAINTEXT://:9092"))
                    .iter()
                    .filter_map(|l| l.split_once("://").map(|(n, _)| n.to_owned()))
                    .collect();
            let names = self.controller_listener_names();
            if !names.iter().any(|n| secure(n)) && !listener_names.iter().any(|n| secure(n)) {
                for name in names {
                    map.entry(name.to_uppercase())
                        .or_insert_with(|| "PLAINTEXT".to_owned());
                }
            }
        }
        Ok(map)
    }

    /// Listeners named in `controller.listener.names`.
    ///
    /// # Errors
    /// A malformed `listeners` entry.
    pub fn controller_listeners(&self) -> Result<Vec<Endpoint>, ConfigError> {
        let names = self.controller_listener_names();
        Ok(self
            .listeners()?
            .into_iter()
            .filter(|l| names.iter().any(|n| n.to_uppercase() == l.listener_name))
            .collect())
    }

    /// Kafka's `effectiveAdvertisedControllerListeners`: per controller listener name, the
    /// `advertised.listeners` entry if any, else the `listeners` entry (host `0.0.0.0` → none).
    ///
    /// # Errors
    /// A malformed listener entry.
    pub fn effective_advertised_controller_listeners(&self) -> Result<Vec<Endpoint>, ConfigError> {
        let advertised = match self.get("advertised.listeners") {
            Some(v) => listeners::parse_listeners(v).map_err(ConfigError::Invalid)?,
            None => Vec::new(),
        };
        let listeners = self.controller_listeners()?;
        Ok(self
            .controller_listener_names()
            .iter()
            .filter_map(|name| {
                let name = name.to_uppercase();
                advertised
                    .iter()
                    .find(|e| e.listener_name == name)
                    .cloned()
                    .or_else(|| {
                        listeners.iter().find(|e| e.listener_name == name).map(|e| {
                            let mut e = e.clone();
                            if e.host.as_deref() == Some("0.0.0.0") {
                                e.host = None;
                            }
                            e
                        })
                    })
            })
            .collect())
    }

    /// Node ids in `controller.quorum.voters` (`id@host:port,…`).
    ///
    /// # Errors
    /// Kafka's message for a malformed entry.
    pub fn quorum_voter_ids(&self) -> Result<Vec<i32>, ConfigError> {
        self.list("controller.quorum.voters")
            .iter()
            .map(|entry| {
                let invalid = || {
                    ConfigError::Invalid(format!(
                        "Invalid value [{}] for configuration controller.quorum.voters: Invalid format of voter: {entry}",
                        self.list("controller.quorum.voters").join(", ")
                    ))
                };
                let (id, address) = entry.split_once('@').ok_or_else(invalid)?;
                let (_host, port) = address.rsplit_once(':').ok_or_else(invalid)?;
                port.parse::<u16>().map_err(|_| invalid())?;
                id.parse::<i32>().map_err(|_| invalid())
            })
            .collect()
    }

    /// `controller.quorum.bootstrap.servers`.
    #[must_use]
    pub fn quorum_bootstrap_servers(&self) -> Vec<String> {
        self.list("controller.quorum.bootstrap.servers")
    }

    /// `inter.broker.protocol.version` when set in the file (its default does not count).
    #[must_use]
    pub fn inter_broker_protocol_version(&self) -> Option<&str> {
        self.get("inter.broker.protocol.version")
    }

    /// `unstable.feature.versions.enable` (default false).
    ///
    /// # Errors
    /// Not a boolean.
    pub fn unstable_feature_versions_enable(&self) -> Result<bool, ConfigError> {
        self.boolean("unstable.feature.versions.enable", false)
    }

    /// Checks what Kafka 3.9's `KafkaConfig` checks about the keys above, in Kafka's order, with
    /// Kafka's messages. Other keys are not validated.
    ///
    /// # Errors
    /// The first violated rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_roles_and_listeners()?;
        self.validate_inter_broker_sasl()
    }

    /// Kafka's `KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol` and
    /// `validateValues`: `inter.broker.listener.name` or `security.inter.broker.protocol`, not
    /// both; a named listener must have a security protocol; with SASL between brokers,
    /// `sasl.mechanism.inter.broker.protocol` (default GSSAPI) must be one of the inter-broker
    /// listener's `sasl.enabled.mechanisms` (default GSSAPI).
    fn validate_inter_broker_sasl(&self) -> Result<(), ConfigError> {
        let protocols = self.effective_listener_security_protocol_map()?;
        let (name, protocol) = match self.get("inter.broker.listener.name") {
            Some(_) if self.get("security.inter.broker.protocol").is_some() => {
                return Err(ConfigError::Invalid(
                    "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
                        .into(),
                ));
            }
            Some(name) => {
                let name = name.trim().to_uppercase();
                let Some(protocol) = protocols.get(&name).cloned() else {
                    return Err(ConfigError::Invalid(format!(
                        "Listener with name {name} defined in inter.broker.listener.name not found in listener.security.protocol.map."
                    )));
                };
                (name, protocol)
            }
            None => {
                let name = self
                    .get("security.inter.broker.protocol")
                    .unwrap_or("PLAINTEXT")
                    .trim()
                    .to_uppercase();
                (name.clone(), name)
            }
        };
        if protocol != "SASL_PLAINTEXT" && protocol != "SASL_SSL" {
            return Ok(());
        }
        let mechanism = self
            .get("sasl.mechanism.inter.broker.protocol")
            .map_or("GSSAPI", str::trim);
        let enabled = self
            .get(&format!(
                "listener.name.{}.sasl.enabled.mechanisms",
                name.to_lowercase()
            ))
            .or_else(|| self.get("sasl.enabled.mechanisms"))
            .unwrap_or("GSSAPI");
        if !csv(enabled).iter().any(|m| m == mechanism) {
            return Err(ConfigError::Requirement(
                "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used for inter-broker communication"
                    .into(),
            ));
        }
        Ok(())
    }

    fn validate_roles_and_listeners(&self) -> Result<(), ConfigError> {
        self.validate_values()?;
        // Parsed when `KafkaConfig` is built, before its `validateValues`.
        let overrides = self.max_connections_per_ip_overrides()?;
        self.validate_roles()?;
        // `validateValues`, after the KRaft checks.
        let per_ip = self.typed("max.connections.per.ip", i32::MAX)?;
        if per_ip == 0 && overrides.is_empty() {
            return Err(ConfigError::Requirement(
                "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
                    .into(),
            ));
        }
        // Kafka's `Utils.validHostPattern`: `[0-9a-zA-Z\-%._:]*`.
        let invalid: Vec<&str> = overrides
            .iter()
            .map(|(host, _)| host.as_str())
            .filter(|host| {
                !host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-%._:".contains(c))
            })
            .collect();
        if !invalid.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "max.connections.per.ip.overrides contains invalid addresses : {}",
                invalid.join(",")
            )));
        }
        Ok(())
    }

    /// `max.connections.per.ip.overrides` as Kafka's `KafkaConfig` reads it (`Csv.parseCsvMap`,
    /// then each count as an `Int`), in the order written.
    ///
    /// # Errors
    /// Kafka's messages: an entry without `:` ("Error parsing configuration property
    /// 'max.connections.per.ip.overrides': begin 0, end -1, length <n>", Java's substring
    /// failure) or a count that is not an `Int` ("For input string: \"<count>\"").
    pub fn max_connections_per_ip_overrides(&self) -> Result<Vec<(String, i32)>, ConfigError> {
        let text = self.get("max.connections.per.ip.overrides").unwrap_or("");
        let mut out: Vec<(String, i32)> = Vec::new();
        if text.is_empty() {
            return Ok(out);
        }
        // Java's `split("\\s*,\\s*")`: trailing empty entries dropped.
        let mut entries: Vec<&str> = text.split(',').collect();
        let last = entries.len() - 1;
        for (i, entry) in entries.iter_mut().enumerate() {
            *entry = match (i == 0, i == last) {
                (true, true) => entry,
                (true, false) => entry.trim_end(),
                (false, true) => entry.trim_start(),
                (false, false) => entry.trim(),
            };
        }
        while entries.len() > 1 && entries.last().is_some_and(|e| e.is_empty()) {
            entries.pop();
        }
        for entry in entries {
            let Some(at) = entry.rfind(':') else {
                return Err(ConfigError::Invalid(format!(
                    "Error parsing configuration property 'max.connections.per.ip.overrides': begin 0, end -1, length {}",
                    entry.encode_utf16().count()
                )));
            };
            let (host, count) = (entry[..at].trim(), entry[at + 1..].trim());
            let count: i32 = count
                .parse()
                .map_err(|_| ConfigError::Invalid(format!("For input string: \"{count}\"")))?;
            // A host written twice keeps its last count (Java's `HashMap.put`).
            out.retain(|(h, _)| h != host);
            out.push((host.to_owned(), count));
        }
        Ok(out)
    }

    /// The KRaft role checks of Kafka's `KafkaConfig.validateValues`.
    fn validate_roles(&self) -> Result<(), ConfigError> {
        let roles = self.process_roles()?;
        let node_id = self.node_id()?;
        let migration = self.boolean("zookeeper.metadata.migration.enable", false)?;
        self.unstable_feature_versions_enable()?;
        let zk_connect = self.get("zookeeper.connect");
        if roles.is_empty() {
            if zk_connect.is_none() {
                return Err(ConfigError::Invalid(
                    "Missing required configuration `zookeeper.connect` which has no default value."
                        .into(),
                ));
            }
        } else {
            if node_id < 0 {
                return Err(ConfigError::Invalid(
                    "Missing configuration `node.id` which is required when `process.roles` is defined (i.e. when running in KRaft mode)."
                        .into(),
                ));
            }
            if migration && zk_connect.is_none() {
                return Err(ConfigError::Invalid(
                    "If using `zookeeper.metadata.migration.enable` in KRaft mode, `zookeeper.connect` must also be set."
                        .into(),
                ));
            }
        }
        if self.log_dirs().is_empty() {
            return Err(ConfigError::Requirement(
                "At least one log directory must be defined via log.dirs or log.dir.".into(),
            ));
        }
        let voter_ids = self.quorum_voter_ids()?;
        let voters_text = || {
            let set: BTreeSet<i32> = voter_ids.iter().copied().collect();
            let items: Vec<String> = set.iter().map(ToString::to_string).collect();
            format!("Set({})", items.join(", "))
        };
        let require_quorum = || {
            if voter_ids.is_empty() && self.quorum_bootstrap_servers().is_empty() {
                Err(ConfigError::Invalid(
                    "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers."
                        .into(),
                ))
            } else {
                Ok(())
            }
        };
        let names = self.controller_listener_names();
        let listeners = self.listeners()?;
        let is_controller = roles.contains(&ProcessRole::Controller);
        if roles.is_empty() {
            if !migration && !names.is_empty() {
                return Err(ConfigError::Requirement(format!(
                    "controller.listener.names must be empty when not running in KRaft mode: [{}]",
                    names.join(", ")
                )));
            }
            return Ok(());
        }
        require_quorum()?;
        if self.get("control.plane.listener.name").is_some() {
            return Err(ConfigError::Requirement(
                "control.plane.listener.name is not supported in KRaft mode.".into(),
            ));
        }
        if !is_controller {
            if voter_ids.contains(&node_id) {
                return Err(ConfigError::Requirement(format!(
                    "If process.roles contains just the 'broker' role, the node id {node_id} must not be included in the set of voters controller.quorum.voters={}",
                    voters_text()
                )));
            }
            if names.is_empty() {
                return Err(ConfigError::Requirement(
                    "controller.listener.names must contain at least one value when running KRaft with just the broker role"
                        .into(),
                ));
            }
            if !self.controller_listeners()?.is_empty() {
                return Err(ConfigError::Requirement(
                    "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running KRaft with just the broker role"
                        .into(),
                ));
            }
            let protocols = self.effective_listener_security_protocol_map()?;
            if let Some(name) = names
                .iter()
                .find(|n| !protocols.contains_key(&n.to_uppercase()))
            {
                return Err(ConfigError::Invalid(format!(
                    "Controller listener with name {} defined in controller.listener.names not found in listener.security.protocol.map  (an explicit security mapping for each controller listener is required if listener.security.protocol.map is non-empty, or if there are security protocols other than PLAINTEXT in use)",
                    name.to_uppercase()
                )));
            }
            return Ok(());
        }
        let advertised_controllers = self.effective_advertised_controller_listeners()?;
        if !roles.contains(&ProcessRole::Broker) && advertised_controllers.len() != listeners.len()
        {
            return Err(ConfigError::Requirement(
                "The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller"
                    .into(),
            ));
        }
        if !voter_ids.is_empty() && !voter_ids.contains(&node_id) {
            return Err(ConfigError::Requirement(format!(
                "If process.roles contains the 'controller' role, the node id {node_id} must be included in the set of voters controller.quorum.voters={}",
                voters_text()
            )));
        }
        if advertised_controllers.is_empty() {
            return Err(ConfigError::Requirement(
                "controller.listener.names must contain at least one value appearing in the 'listeners' configuration when running the KRaft controller role"
                    .into(),
            ));
        }
        if !names.iter().all(|n| {
            listeners
                .iter()
                .any(|l| l.listener_name == n.to_uppercase())
        }) {
            return Err(ConfigError::Requirement(
                "controller.listener.names must only contain values appearing in the 'listeners' configuration when running the KRaft controller role"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for ProcessRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Broker => "broker",
            Self::Controller => "controller",
        })
    }
}

/// Largest `server.properties` krust reads (real ones are a few KiB).
pub const MAX_CONFIG_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a whole file, refusing files larger than `max_bytes` (`InvalidData`) rather than
/// buffering whatever is there.
///
/// # Errors
/// Any `io::Error` from opening or reading, or `InvalidData` for an oversized file.
pub fn read_bounded(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("file is larger than {max_bytes} bytes"),
        ));
    }
    Ok(bytes)
}

/// A Kafka list value: comma-separated, trimmed, empty entries dropped.
pub(crate) fn csv(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ServerConfig {
        ServerConfig::parse(text, Path::new("server.properties")).expect("parses")
    }

    const CONTROLLER: &str = "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:9093\ncontroller.quorum.voters=1@127.0.0.1:9093\nlog.dirs=/tmp/a\n";

    #[test]
    fn typed_access_and_defaults() {
        let c = config(
            "process.roles = broker, controller\nbroker.id=3\nlog.dirs=/b, /a ,\\\n  /c\nmetadata.log.dir=/m\n",
        );
        assert_eq!(
            c.process_roles().expect("roles"),
            [ProcessRole::Broker, ProcessRole::Controller].into()
        );
        assert_eq!(c.node_id().expect("synonym"), 3);
        assert_eq!(c.log_dirs(), ["/b", "/a", "/c"]);
        assert_eq!(c.storage_directories(), ["/a", "/b", "/c", "/m"]);
        let d = config("log.dir=/x\n");
        assert_eq!(d.metadata_log_dir().as_deref(), Some("/x"));
        assert_eq!(config("").log_dirs(), ["/tmp/kafka-logs"]);
        assert_eq!(config("").node_id().expect("unset"), -1);
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let err = ServerConfig::parse(
            "a=1\n# c\nb=\\uzzzz\n",
            Path::new("/etc/kafka/server.properties"),
        )
        .expect_err("bad escape");
        assert_eq!(
            err.to_string(),
            "/etc/kafka/server.properties:3: line 3: malformed \\uxxxx encoding"
        );
    }

    #[test]
    fn unknown_keys_are_kept_and_listed() {
        let c = config("node.id=1\nfoo.bar=baz\nlistener.name.x.ssl.key=1\n");
        assert_eq!(c.get("foo.bar"), Some("baz"));
        assert_eq!(c.unknown_keys(), vec![("foo.bar", 2)]);
    }

    #[test]
    fn connection_limits_are_validated_with_kafkas_messages() {
        // Kafka 3.9's `KafkaConfig`: the overrides map parsed by `Csv.parseCsvMap` and each
        // count by `Integer.parseInt` when the config is built, then `validateValues`.
        for (extra, message) in [
            (
                "max.connections.per.ip=0\n",
                "requirement failed: max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.",
            ),
            (
                "max.connections.per.ip.overrides=hostA\n",
                "Error parsing configuration property 'max.connections.per.ip.overrides': begin 0, end -1, length 5",
            ),
            (
                "max.connections.per.ip.overrides=127.0.0.1:x\n",
                "For input string: \"x\"",
            ),
            (
                "max.connections.per.ip.overrides=a b:1, c/d:2\n",
                "max.connections.per.ip.overrides contains invalid addresses : a b,c/d",
            ),
            (
                "max.connections.per.ip=-1\n",
                "Invalid value -1 for configuration max.connections.per.ip: Value must be at least 0",
            ),
        ] {
            let err = config(&format!("{CONTROLLER}{extra}"))
                .validate()
                .expect_err(extra);
            assert_eq!(err.to_string(), message, "{extra}");
        }
        let c = config(&format!(
            "{CONTROLLER}max.connections.per.ip=0\nmax.connections.per.ip.overrides=127.0.0.1:5 , localhost : 7,127.0.0.1:6,\n"
        ));
        assert!(c.validate().is_ok());
        assert_eq!(
            c.max_connections_per_ip_overrides().expect("parsed"),
            vec![("localhost".to_owned(), 7), ("127.0.0.1".to_owned(), 6)],
            "spaces around commas and `:` trimmed, the last count of a host kept"
        );
    }

    #[test]
    fn krust_extension_keys_are_not_unknown() {
        let c = config("node.id=1\nmetrics.port=9404\n");
        assert!(c.unknown_keys().is_empty());
    }

    #[test]
    fn validation_messages_match_kafka() {
        assert!(config(CONTROLLER).validate().is_ok());
        let cases = [
            (
                "log.dirs=/a\n",
                "Missing required configuration `zookeeper.connect` which has no default value.",
            ),
            (
                "process.roles=broker\nlog.dirs=/a\n",
                "Missing configuration `node.id` which is required when `process.roles` is defined (i.e. when running in KRaft mode).",
            ),
            (
                "process.roles=brokr\n",
                "Invalid value brokr for configuration process.roles: String must be one of: broker, controller",
            ),
            (
                "node.id=1\nbroker.id=2\n",
                "You must set `node.id` to the same value as `broker.id`.",
            ),
            (
                "node.id=x\n",
                "Invalid value x for configuration broker.id: Not a number of type INT",
            ),
            (
                "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://:9093\n",
                "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.",
            ),
            (
                "process.roles=broker\nnode.id=1\ncontroller.quorum.voters=1@h:9093\ncontroller.listener.names=C\n",
                "requirement failed: If process.roles contains just the 'broker' role, the node id 1 must not be included in the set of voters controller.quorum.voters=Set(1)",
            ),
            (
                "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@h:9093\n",
                "requirement failed: controller.listener.names must contain at least one value when running KRaft with just the broker role",
            ),
            (
                "process.roles=controller\nnode.id=2\ncontroller.quorum.voters=1@h:9093\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://:9093\n",
                "requirement failed: If process.roles contains the 'controller' role, the node id 2 must be included in the set of voters controller.quorum.voters=Set(1)",
            ),
            (
                "process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@h:9093\ncontroller.listener.names=CONTROLLER\n",
                "requirement failed: The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller",
            ),
            (
                "log.dirs=\nlog.dir=\nzookeeper.connect=z\n",
                "requirement failed: At least one log directory must be defined via log.dirs or log.dir.",
            ),
            (
                "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@h:9093\ncontroller.listener.names=CONTROLLER\nlistener.security.protocol.map=CONTROLLER:SASL_SSL,INTERNAL:SASL_SSL\nlisteners=INTERNAL://:9092\ninter.broker.listener.name=INTERNAL\nsasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\nlistener.name.internal.sasl.enabled.mechanisms=PLAIN\nsasl.enabled.mechanisms=SCRAM-SHA-512\nlog.dirs=/a\n",
                "requirement failed: sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used for inter-broker communication",
            ),
            (
                "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@h:9093\ncontroller.listener.names=CONTROLLER\nlistener.security.protocol.map=CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL\nlisteners=SASL_SSL://:9092\nsecurity.inter.broker.protocol=SASL_SSL\nsasl.enabled.mechanisms=PLAIN\nlog.dirs=/a\n",
                "requirement failed: sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used for inter-broker communication",
            ),
        ];
        for (text, message) in cases {
            let err = config(text).validate().expect_err(text);
            assert_eq!(err.to_string(), message, "{text:?}");
        }
    }
}
