//! `/cluster/id`, `/controller`, `/controller_epoch`, `/migration`, `/brokers/ids/<id>` and
//! `/feature`.

use std::collections::BTreeMap;

use super::json::{Fields, JsonObject, parse_object};
use super::{ZNodeError, paths};

/// `/cluster/id`: `{"version":"1","id":"<id>"}` (the version is a JSON string).
pub mod cluster_id {
    use super::{Fields, JsonObject, ZNodeError, parse_object, paths};

    /// The znode's bytes.
    #[must_use]
    pub fn encode(cluster_id: &str) -> Vec<u8> {
        JsonObject::new()
            .str("version", "1")
            .str("id", cluster_id)
            .finish()
            .into_bytes()
    }

    /// The cluster id (Kafka reads only `id`).
    ///
    /// # Errors
    /// Not JSON, or no string `id`.
    pub fn decode(bytes: &[u8]) -> Result<String, ZNodeError> {
        let map = parse_object(paths::CLUSTER_ID, bytes)?;
        Ok(Fields::new(paths::CLUSTER_ID, &map).str("id")?.to_owned())
    }
}

/// `/controller` (`ControllerZNode`): who is the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRegistration {
    /// The controller's broker id (a KRaft controller writes its node id).
    pub broker_id: i32,
    /// Registration time (ms), written as a string; 0 when absent.
    pub timestamp_ms: i64,
    /// The KRaft controller epoch, for a KRaft controller; `None` (absent or -1 in v1/v2 written
    /// by a ZooKeeper controller) otherwise.
    pub kraft_controller_epoch: Option<i32>,
}

impl ControllerRegistration {
    /// `{"version":2,"brokerid":<id>,"timestamp":"<ms>","kraftControllerEpoch":<epoch or -1>}`,
    /// Kafka's order.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        JsonObject::new()
            .int("version", 2)
            .int("brokerid", i64::from(self.broker_id))
            .str("timestamp", &self.timestamp_ms.to_string())
            .int(
                "kraftControllerEpoch",
                i64::from(self.kraft_controller_epoch.unwrap_or(-1)),
            )
            .finish()
            .into_bytes()
    }

    /// Decodes v1 (no `kraftControllerEpoch`) or v2. Like Kafka, `kraftControllerEpoch: -1`
    /// reads as a ZooKeeper controller.
    ///
    /// # Errors
    /// Not JSON, no `brokerid`, or a mistyped field.
    pub fn decode(bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::CONTROLLER;
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let timestamp_ms = match f.get("timestamp") {
            None => 0,
            Some(_) => f.long_or_string("timestamp")?,
        };
        Ok(Self {
            broker_id: f.i32("brokerid")?,
            timestamp_ms,
            kraft_controller_epoch: f.opt_i32("kraftControllerEpoch")?.filter(|e| *e >= 0),
        })
    }
}

/// `/controller_epoch`: the epoch as decimal text.
pub mod controller_epoch {
    use super::{ZNodeError, paths};

    /// The znode's bytes.
    #[must_use]
    pub fn encode(epoch: i32) -> Vec<u8> {
        epoch.to_string().into_bytes()
    }

    /// The epoch.
    ///
    /// # Errors
    /// Not an integer.
    pub fn decode(bytes: &[u8]) -> Result<i32, ZNodeError> {
        let text = String::from_utf8_lossy(bytes);
        text.parse()
            .map_err(|_| ZNodeError::invalid(paths::CONTROLLER_EPOCH, "controller epoch", text))
    }
}

/// `/migration` (`MigrationZNode`, version 0): the highest KRaft offset reflected in ZooKeeper
/// and which KRaft controller wrote it (facts §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationZNode {
    /// The KRaft controller's node id.
    pub kraft_controller_id: i32,
    /// Its KRaft leader epoch.
    pub kraft_controller_epoch: i32,
    /// The last KRaft metadata offset written to ZooKeeper; > 0 once the initial migration
    /// is done.
    pub kraft_metadata_offset: i64,
    /// The epoch of that offset.
    pub kraft_metadata_epoch: i32,
}

impl MigrationZNode {
    /// The content before any KRaft controller wrote (Kafka's `ZkMigrationLeadershipState.EMPTY`).
    pub const EMPTY: Self = Self {
        kraft_controller_id: -1,
        kraft_controller_epoch: -1,
        kraft_metadata_offset: -1,
        kraft_metadata_epoch: -1,
    };

    /// Whether the initial ZooKeeper → KRaft copy has completed (`kraft_metadata_offset > 0`).
    #[must_use]
    pub fn initial_migration_done(&self) -> bool {
        self.kraft_metadata_offset > 0
    }

    /// Kafka's bytes. Its key order is that of a Scala immutable `HashMap` of these five keys.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        JsonObject::new()
            .int("version", 0)
            .int("kraft_metadata_offset", self.kraft_metadata_offset)
            .int("kraft_controller_id", i64::from(self.kraft_controller_id))
            .int("kraft_metadata_epoch", i64::from(self.kraft_metadata_epoch))
            .int(
                "kraft_controller_epoch",
                i64::from(self.kraft_controller_epoch),
            )
            .finish()
            .into_bytes()
    }

    /// Decodes version 0 (the only one).
    ///
    /// # Errors
    /// Not JSON, another version, or a missing field.
    pub fn decode(bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::MIGRATION;
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let version = f.version()?;
        if version != 0 {
            return Err(ZNodeError::version(path, version));
        }
        Ok(Self {
            kraft_controller_id: f.i32("kraft_controller_id")?,
            kraft_controller_epoch: f.i32("kraft_controller_epoch")?,
            kraft_metadata_offset: f.i64("kraft_metadata_offset")?,
            kraft_metadata_epoch: f.i32("kraft_metadata_epoch")?,
        })
    }
}

/// One finalized or supported feature range in a broker or `/feature` znode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureRange {
    /// `min_version` (or `min_version_level`), 1 when absent.
    pub min: i16,
    /// `max_version` (or `max_version_level`).
    pub max: i16,
}

/// `/brokers/ids/<id>` (`BrokerIdZNode`, versions 1–5), decode only: a ZooKeeper-mode broker's
/// registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationZNode {
    /// The broker id (from the path).
    pub id: i32,
    /// The JSON version.
    pub version: i32,
    /// The endpoints, `LISTENER://host:port` (v1 only has `host`/`port`, rendered `PLAINTEXT://host:port`).
    pub endpoints: Vec<String>,
    /// `listener_security_protocol_map` (v4+).
    pub listener_security_protocol_map: BTreeMap<String, String>,
    /// `rack` (v3+), if any.
    pub rack: Option<String>,
    /// `jmx_port`, -1 when absent.
    pub jmx_port: i32,
    /// `timestamp` (ms), 0 when absent.
    pub timestamp_ms: i64,
    /// `features` (v5): name → supported range.
    pub features: BTreeMap<String, FeatureRange>,
}

impl BrokerRegistrationZNode {
    /// Decodes any version Kafka 3.9 reads (1–5).
    ///
    /// # Errors
    /// Not JSON, a version outside 1–5, or a mistyped field.
    pub fn decode(id: i32, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::broker(id);
        let map = parse_object(&path, bytes)?;
        let f = Fields::new(&path, &map);
        let version = f.version()?;
        if !(1..=5).contains(&version) {
            return Err(ZNodeError::version(&path, version));
        }
        let mut endpoints = Vec::new();
        if version == 1 {
            let host = f.str("host")?;
            let port = f.i32("port")?;
            endpoints.push(format!("PLAINTEXT://{host}:{port}"));
        } else {
            let list = f.required("endpoints", "an array of strings")?;
            for e in list
                .as_array()
                .ok_or_else(|| f.error("endpoints", "an array of strings"))?
            {
                endpoints.push(
                    e.as_str()
                        .ok_or_else(|| f.error("endpoints", "an array of strings"))?
                        .to_owned(),
                );
            }
        }
        let mut listener_security_protocol_map = BTreeMap::new();
        if let Some(m) = f.object("listener_security_protocol_map")? {
            for (k, v) in m {
                let v = v
                    .as_str()
                    .ok_or_else(|| f.error("listener_security_protocol_map", "a string map"))?;
                listener_security_protocol_map.insert(k.clone(), v.to_owned());
            }
        }
        let timestamp_ms = match f.get("timestamp") {
            None => 0,
            Some(_) => f.long_or_string("timestamp")?,
        };
        Ok(Self {
            id,
            version: i32::try_from(version).unwrap_or(0),
            endpoints,
            listener_security_protocol_map,
            rack: f.opt_str("rack")?.map(str::to_owned),
            jmx_port: f.opt_i32("jmx_port")?.unwrap_or(-1),
            timestamp_ms,
            features: decode_features(&f, "features", "min_version", "max_version", false)?,
        })
    }
}

fn decode_features(
    f: &Fields<'_>,
    field: &str,
    min_key: &str,
    max_key: &str,
    min_required: bool,
) -> Result<BTreeMap<String, FeatureRange>, ZNodeError> {
    let mut out = BTreeMap::new();
    let Some(features) = f.object(field)? else {
        return Ok(out);
    };
    for (name, range) in features {
        let range = range
            .as_object()
            .ok_or_else(|| f.error(field, "an object of version ranges"))?;
        let level = |key: &str| -> Result<Option<i16>, ZNodeError> {
            match range.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_i64()
                    .and_then(|n| i16::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| f.error(field, "an object of version ranges")),
            }
        };
        let max = level(max_key)?.ok_or_else(|| f.error(field, "ranges with a max level"))?;
        let min = match level(min_key)? {
            Some(min) => min,
            None if min_required => return Err(f.error(field, "ranges with a min level")),
            None => 1,
        };
        out.insert(name.clone(), FeatureRange { min, max });
    }
    Ok(out)
}

/// `/feature` (`FeatureZNode`, v1 or v2), decode only: ZooKeeper mode's finalized features.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureZNode {
    /// 1 (with `min_version_level`) or 2.
    pub version: i32,
    /// Whether the status is `1` (enabled); `0` is disabled.
    pub enabled: bool,
    /// Feature name → finalized max version level.
    pub features: BTreeMap<String, i16>,
}

impl FeatureZNode {
    /// Decodes as Kafka's `FeatureZNode.decode` does.
    ///
    /// # Errors
    /// Not JSON, a version outside 1–2, a status other than 0/1, a missing `features` map, or
    /// a level below 1.
    pub fn decode(bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::FEATURE;
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let version = f.version()?;
        if !(1..=2).contains(&version) {
            return Err(ZNodeError::version(path, version));
        }
        let enabled = match f.i64("status")? {
            0 => false,
            1 => true,
            other => return Err(ZNodeError::invalid(path, "status", other.to_string())),
        };
        f.required("features", "an object")?;
        let ranges = decode_features(
            &f,
            "features",
            "min_version_level",
            "max_version_level",
            version == 1,
        )?;
        let mut features = BTreeMap::new();
        for (name, range) in ranges {
            if range.max < 1 || range.min < 1 || range.max < range.min {
                return Err(ZNodeError::invalid(path, "feature level", name));
            }
            features.insert(name, range.max);
        }
        Ok(Self {
            version: i32::try_from(version).unwrap_or(0),
            enabled,
            features,
        })
    }
}
