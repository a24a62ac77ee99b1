//! `RegisterBrokerRecord` (api key 0, versions 0–3) and `RegisterControllerRecord` (27, v0).
//!
//! RegisterBrokerRecord fields, in wire order: `BrokerId: int32`, `IsMigratingZkBroker: bool`
//! (v2+), `IncarnationId: uuid`, `BrokerEpoch: int64`, `EndPoints[]`, `Features[]`,
//! `Rack: string?`, `Fenced: bool`, `InControlledShutdown: bool` (v1+), `LogDirs: []uuid`
//! (v3+, tag 0, written when non-empty).

use uuid::Uuid;

use super::simple::UnknownTaggedFields;
use crate::codec::{
    ByteReader, DecodeError, decode_tagged, put_compact_array_len, put_compact_nullable_string,
    put_compact_string, put_compact_uuid_array, put_tagged_section,
};

/// A listener a broker or controller can be reached on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistrationEndpoint {
    /// Listener name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `SecurityProtocol` id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL).
    pub security_protocol: i16,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A feature range a node supports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistrationFeature {
    /// Feature name.
    pub name: String,
    /// Lowest supported level.
    pub min_supported_version: i16,
    /// Highest supported level.
    pub max_supported_version: i16,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A broker's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBrokerRecord {
    /// Broker id.
    pub broker_id: i32,
    /// A ZooKeeper-mode broker registering during a migration (v2+).
    pub is_migrating_zk_broker: bool,
    /// Random id of this broker process.
    pub incarnation_id: Uuid,
    /// The broker epoch (offset of this record).
    pub broker_epoch: i64,
    /// Listeners.
    pub end_points: Vec<RegistrationEndpoint>,
    /// Supported features.
    pub features: Vec<RegistrationFeature>,
    /// Rack, if any.
    pub rack: Option<String>,
    /// Whether the broker starts fenced (default true).
    pub fenced: bool,
    /// Whether it is in controlled shutdown (v1+).
    pub in_controlled_shutdown: bool,
    /// Online log directory ids (v3+, tagged).
    pub log_dirs: Vec<Uuid>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

/// A controller's registration (KIP-919).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterControllerRecord {
    /// Controller id.
    pub controller_id: i32,
    /// Random id of this controller process.
    pub incarnation_id: Uuid,
    /// Whether the ZooKeeper-migration configs are present.
    pub zk_migration_ready: bool,
    /// Listeners.
    pub end_points: Vec<RegistrationEndpoint>,
    /// Supported features.
    pub features: Vec<RegistrationFeature>,
    /// Tagged fields krust does not know.
    pub unknown_tagged_fields: UnknownTaggedFields,
}

fn read_endpoints(r: &mut ByteReader<'_>) -> Result<Vec<RegistrationEndpoint>, DecodeError> {
    let len = r
        .compact_array_len("EndPoints", 7)?
        .ok_or(DecodeError::UnexpectedNull { field: "EndPoints" })?;
    (0..len)
        .map(|_| {
            Ok(RegistrationEndpoint {
                name: r.compact_string("EndPoints.Name")?,
                host: r.compact_string("EndPoints.Host")?,
                port: r.u16("EndPoints.Port")?,
                security_protocol: r.i16("EndPoints.SecurityProtocol")?,
                unknown_tagged_fields: r.tagged_fields()?,
            })
        })
        .collect()
}

fn write_endpoints(out: &mut Vec<u8>, endpoints: &[RegistrationEndpoint]) {
    put_compact_array_len(out, Some(endpoints.len()));
    for e in endpoints {
        put_compact_string(out, &e.name);
        put_compact_string(out, &e.host);
        out.extend_from_slice(&e.port.to_be_bytes());
        out.extend_from_slice(&e.security_protocol.to_be_bytes());
        put_tagged_section(out, Vec::new(), &e.unknown_tagged_fields);
    }
}

fn read_features(r: &mut ByteReader<'_>) -> Result<Vec<RegistrationFeature>, DecodeError> {
    let len = r
        .compact_array_len("Features", 6)?
        .ok_or(DecodeError::UnexpectedNull { field: "Features" })?;
    (0..len)
        .map(|_| {
            Ok(RegistrationFeature {
                name: r.compact_string("Features.Name")?,
                min_supported_version: r.i16("Features.MinSupportedVersion")?,
                max_supported_version: r.i16("Features.MaxSupportedVersion")?,
                unknown_tagged_fields: r.tagged_fields()?,
            })
        })
        .collect()
}

fn write_features(out: &mut Vec<u8>, features: &[RegistrationFeature]) {
    put_compact_array_len(out, Some(features.len()));
    for f in features {
        put_compact_string(out, &f.name);
        out.extend_from_slice(&f.min_supported_version.to_be_bytes());
        out.extend_from_slice(&f.max_supported_version.to_be_bytes());
        put_tagged_section(out, Vec::new(), &f.unknown_tagged_fields);
    }
}

/// A field that has a non-default value at a version that cannot carry it (Kafka throws
/// `UnsupportedVersionException` when asked to write such a record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldNotInVersion {
    /// The field.
    pub field: &'static str,
}

impl RegisterBrokerRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>, version: i16) -> Result<Self, DecodeError> {
        let broker_id = r.i32("RegisterBrokerRecord.BrokerId")?;
        let is_migrating_zk_broker = if version >= 2 {
            r.bool("RegisterBrokerRecord.IsMigratingZkBroker")?
        } else {
            false
        };
        let incarnation_id = r.uuid("RegisterBrokerRecord.IncarnationId")?;
        let broker_epoch = r.i64("RegisterBrokerRecord.BrokerEpoch")?;
        let end_points = read_endpoints(r)?;
        let features = read_features(r)?;
        let rack = r.compact_nullable_string("RegisterBrokerRecord.Rack")?;
        let fenced = r.bool("RegisterBrokerRecord.Fenced")?;
        let in_controlled_shutdown = if version >= 1 {
            r.bool("RegisterBrokerRecord.InControlledShutdown")?
        } else {
            false
        };
        let mut log_dirs = Vec::new();
        let mut unknown_tagged_fields = Vec::new();
        for (tag, bytes) in r.tagged_fields()? {
            if tag == 0 && version >= 3 {
                log_dirs = decode_tagged(&bytes, "RegisterBrokerRecord.LogDirs", |sub| {
                    sub.compact_uuid_array("RegisterBrokerRecord.LogDirs")
                })?;
            } else {
                unknown_tagged_fields.push((tag, bytes));
            }
        }
        Ok(Self {
            broker_id,
            is_migrating_zk_broker,
            incarnation_id,
            broker_epoch,
            end_points,
            features,
            rack,
            fenced,
            in_controlled_shutdown,
            log_dirs,
            unknown_tagged_fields,
        })
    }

    pub(crate) fn encode(&self, version: i16, out: &mut Vec<u8>) -> Result<(), FieldNotInVersion> {
        if version < 2 && self.is_migrating_zk_broker {
            return Err(FieldNotInVersion {
                field: "IsMigratingZkBroker",
            });
        }
        if version < 1 && self.in_controlled_shutdown {
            return Err(FieldNotInVersion {
                field: "InControlledShutdown",
            });
        }
        if version < 3 && !self.log_dirs.is_empty() {
            return Err(FieldNotInVersion { field: "LogDirs" });
        }
        out.extend_from_slice(&self.broker_id.to_be_bytes());
        if version >= 2 {
            out.push(u8::from(self.is_migrating_zk_broker));
        }
        out.extend_from_slice(self.incarnation_id.as_bytes());
        out.extend_from_slice(&self.broker_epoch.to_be_bytes());
        write_endpoints(out, &self.end_points);
        write_features(out, &self.features);
        put_compact_nullable_string(out, self.rack.as_deref());
        out.push(u8::from(self.fenced));
        if version >= 1 {
            out.push(u8::from(self.in_controlled_shutdown));
        }
        let mut known = Vec::new();
        if !self.log_dirs.is_empty() {
            let mut bytes = Vec::new();
            put_compact_uuid_array(&mut bytes, &self.log_dirs);
            known.push((0, bytes));
        }
        put_tagged_section(out, known, &self.unknown_tagged_fields);
        Ok(())
    }
}

impl RegisterControllerRecord {
    pub(crate) fn decode(r: &mut ByteReader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            controller_id: r.i32("RegisterControllerRecord.ControllerId")?,
            incarnation_id: r.uuid("RegisterControllerRecord.IncarnationId")?,
            zk_migration_ready: r.bool("RegisterControllerRecord.ZkMigrationReady")?,
            end_points: read_endpoints(r)?,
            features: read_features(r)?,
            unknown_tagged_fields: r.tagged_fields()?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.controller_id.to_be_bytes());
        out.extend_from_slice(self.incarnation_id.as_bytes());
        out.push(u8::from(self.zk_migration_ready));
        write_endpoints(out, &self.end_points);
        write_features(out, &self.features);
        put_tagged_section(out, Vec::new(), &self.unknown_tagged_fields);
    }
}
