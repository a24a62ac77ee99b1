//! Broker and controller registrations (Kafka's `ClusterImage` / `ClusterDelta`,
//! `BrokerRegistration`, `ControllerRegistration`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;
use uuid::Uuid;

use super::ReplayError;
use super::writer::{ImageWriteError, ImageWriterOptions, RecordSink, emit};
use crate::records::{
    BrokerFencingRecord, BrokerRegistrationChangeRecord, MetadataRecord, RegisterBrokerRecord,
    RegisterControllerRecord, RegistrationEndpoint, RegistrationFeature, UnregisterBrokerRecord,
};

/// One listener of a registration; the listener name is the map key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Security protocol code (App. A: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL).
    pub security_protocol: i16,
}

/// A supported feature range of a registration; the feature name is the map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    /// Lowest supported level.
    pub min: i16,
    /// Highest supported level.
    pub max: i16,
}

fn listeners_from(endpoints: &[RegistrationEndpoint]) -> BTreeMap<String, Endpoint> {
    endpoints
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                Endpoint {
                    host: e.host.clone(),
                    port: e.port,
                    security_protocol: e.security_protocol,
                },
            )
        })
        .collect()
}

fn features_from(features: &[RegistrationFeature]) -> BTreeMap<String, VersionRange> {
    features
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                VersionRange {
                    min: f.min_supported_version,
                    max: f.max_supported_version,
                },
            )
        })
        .collect()
}

fn endpoints_of(listeners: &BTreeMap<String, Endpoint>) -> Vec<RegistrationEndpoint> {
    listeners
        .iter()
        .map(|(name, e)| RegistrationEndpoint {
            name: name.clone(),
            host: e.host.clone(),
            port: e.port,
            security_protocol: e.security_protocol,
            unknown_tagged_fields: Vec::new(),
        })
        .collect()
}

fn features_of(features: &BTreeMap<String, VersionRange>) -> Vec<RegistrationFeature> {
    features
        .iter()
        .map(|(name, range)| RegistrationFeature {
            name: name.clone(),
            min_supported_version: range.min,
            max_supported_version: range.max,
            unknown_tagged_fields: Vec::new(),
        })
        .collect()
}

/// Kafka orders `Uuid`s by their two halves as *signed* longs; directories are kept sorted
/// that way so that equal sets compare equal and are written as Kafka writes them.
pub(crate) fn sort_uuids_like_kafka(ids: &mut [Uuid]) {
    ids.sort_by_key(|id| {
        let (msb, lsb) = id.as_u64_pair();
        // Reinterpreting the bits is the point: Java's longs are signed.
        (msb as i64, lsb as i64)
    });
}

/// A broker as registered with the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// `node.id`.
    pub id: i32,
    /// Broker epoch: the offset of the registration record.
    pub epoch: i64,
    /// Changes on every process start.
    pub incarnation_id: Uuid,
    /// Listeners by name.
    pub listeners: BTreeMap<String, Endpoint>,
    /// Supported feature ranges by name.
    pub supported_features: BTreeMap<String, VersionRange>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// Fenced brokers lead nothing and are not in any ISR.
    pub fenced: bool,
    /// In controlled shutdown (KIP-841).
    pub in_controlled_shutdown: bool,
    /// A ZooKeeper-mode broker taking part in a migration.
    pub is_migrating_zk_broker: bool,
    /// Online log directory ids, sorted as Kafka sorts them.
    pub directories: Vec<Uuid>,
}

impl BrokerRegistration {
    fn from_record(record: &RegisterBrokerRecord) -> Self {
        let mut directories = record.log_dirs.clone();
        sort_uuids_like_kafka(&mut directories);
        Self {
            id: record.broker_id,
            epoch: record.broker_epoch,
            incarnation_id: record.incarnation_id,
            listeners: listeners_from(&record.end_points),
            supported_features: features_from(&record.features),
            rack: record.rack.clone(),
            fenced: record.fenced,
            in_controlled_shutdown: record.in_controlled_shutdown,
            is_migrating_zk_broker: record.is_migrating_zk_broker,
            directories,
        }
    }

    fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        let mv = options.metadata_version;
        let mut record = RegisterBrokerRecord {
            broker_id: self.id,
            is_migrating_zk_broker: false,
            incarnation_id: self.incarnation_id,
            broker_epoch: self.epoch,
            end_points: endpoints_of(&self.listeners),
            features: features_of(&self.supported_features),
            rack: self.rack.clone(),
            fenced: self.fenced,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            unknown_tagged_fields: Vec::new(),
        };
        if self.in_controlled_shutdown {
            if mv.is_in_controlled_shutdown_state_supported() {
                record.in_controlled_shutdown = true;
            } else {
                options.handle_loss("the inControlledShutdown state of one or more brokers")?;
            }
        }
        if self.is_migrating_zk_broker {
            if mv.is_migration_supported() {
                record.is_migrating_zk_broker = true;
            } else {
                options.handle_loss("the isMigratingZkBroker state of one or more brokers")?;
            }
        }
        if !self.directories.is_empty() {
            if mv.is_directory_assignment_supported() {
                record.log_dirs.clone_from(&self.directories);
            } else {
                options.handle_loss("the online log directories of one or more brokers")?;
            }
        }
        emit(
            sink,
            MetadataRecord::RegisterBroker(record),
            mv.register_broker_record_version(),
        );
        Ok(())
    }
}

/// A controller as registered in the quorum (KIP-919, metadata.version ≥ 3.7-IV0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRegistration {
    /// `node.id`.
    pub id: i32,
    /// Changes on every process start.
    pub incarnation_id: Uuid,
    /// Ready to take part in a ZooKeeper migration.
    pub zk_migration_ready: bool,
    /// Listeners by name.
    pub listeners: BTreeMap<String, Endpoint>,
    /// Supported feature ranges by name.
    pub supported_features: BTreeMap<String, VersionRange>,
}

impl ControllerRegistration {
    fn from_record(record: &RegisterControllerRecord) -> Self {
        Self {
            id: record.controller_id,
            incarnation_id: record.incarnation_id,
            zk_migration_ready: record.zk_migration_ready,
            listeners: listeners_from(&record.end_points),
            supported_features: features_from(&record.features),
        }
    }

    fn to_record(&self) -> RegisterControllerRecord {
        RegisterControllerRecord {
            controller_id: self.id,
            incarnation_id: self.incarnation_id,
            zk_migration_ready: self.zk_migration_ready,
            end_points: endpoints_of(&self.listeners),
            features: features_of(&self.supported_features),
            unknown_tagged_fields: Vec::new(),
        }
    }
}

/// Broker and controller registrations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterImage {
    /// Brokers by id.
    pub brokers: OrdMap<i32, Arc<BrokerRegistration>>,
    /// Controllers by id.
    pub controllers: OrdMap<i32, Arc<ControllerRegistration>>,
}

impl ClusterImage {
    /// The broker `id`, if registered.
    #[must_use]
    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id).map(Arc::as_ref)
    }

    pub(crate) fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        for broker in self.brokers.values() {
            broker.write(sink, options)?;
        }
        if !self.controllers.is_empty() {
            if options
                .metadata_version
                .is_controller_registration_supported()
            {
                for controller in self.controllers.values() {
                    emit(
                        sink,
                        MetadataRecord::RegisterController(controller.to_record()),
                        0,
                    );
                }
            } else {
                options.handle_loss("controller registration data")?;
            }
        }
        Ok(())
    }
}

/// Changes to the registrations. `None` = unregistered.
#[derive(Debug, Clone)]
pub struct ClusterDelta {
    image: Arc<ClusterImage>,
    changed_brokers: BTreeMap<i32, Option<Arc<BrokerRegistration>>>,
    changed_controllers: BTreeMap<i32, Option<Arc<ControllerRegistration>>>,
}

impl ClusterDelta {
    pub(crate) fn new(image: Arc<ClusterImage>) -> Self {
        Self {
            image,
            changed_brokers: BTreeMap::new(),
            changed_controllers: BTreeMap::new(),
        }
    }

    /// Brokers registered, changed (`Some`) or unregistered (`None`) in this delta.
    #[must_use]
    pub fn changed_brokers(&self) -> &BTreeMap<i32, Option<Arc<BrokerRegistration>>> {
        &self.changed_brokers
    }

    /// Controllers registered in this delta.
    #[must_use]
    pub fn changed_controllers(&self) -> &BTreeMap<i32, Option<Arc<ControllerRegistration>>> {
        &self.changed_controllers
    }

    /// The broker as of this delta.
    #[must_use]
    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        match self.changed_brokers.get(&id) {
            Some(changed) => changed.as_deref(),
            None => self.image.broker(id),
        }
    }

    fn broker_or_error(
        &self,
        broker_id: i32,
        epoch: i64,
        action: &'static str,
    ) -> Result<&BrokerRegistration, ReplayError> {
        let broker = self
            .broker(broker_id)
            .ok_or(ReplayError::UnknownBroker { broker_id, action })?;
        if broker.epoch != epoch {
            return Err(ReplayError::BrokerEpochMismatch {
                broker_id,
                action,
                record_epoch: epoch,
                current_epoch: broker.epoch,
            });
        }
        Ok(broker)
    }

    pub(crate) fn replay_register_broker(&mut self, record: &RegisterBrokerRecord) {
        let broker = BrokerRegistration::from_record(record);
        self.changed_brokers
            .insert(broker.id, Some(Arc::new(broker)));
    }

    /// Kafka's image accepts any UnregisterBrokerRecord; its controller (ClusterControlManager)
    /// rejects one for an unknown broker or another epoch. We check here, as that controller does.
    pub(crate) fn replay_unregister_broker(
        &mut self,
        record: &UnregisterBrokerRecord,
    ) -> Result<(), ReplayError> {
        self.broker_or_error(record.broker_id, record.broker_epoch, "unregister")?;
        self.changed_brokers.insert(record.broker_id, None);
        Ok(())
    }

    pub(crate) fn replay_register_controller(&mut self, record: &RegisterControllerRecord) {
        let controller = ControllerRegistration::from_record(record);
        self.changed_controllers
            .insert(controller.id, Some(Arc::new(controller)));
    }

    fn change_broker(
        &mut self,
        broker_id: i32,
        epoch: i64,
        action: &'static str,
        fenced: Option<bool>,
        in_controlled_shutdown: Option<bool>,
        directories: Option<Vec<Uuid>>,
    ) -> Result<(), ReplayError> {
        let current = self.broker_or_error(broker_id, epoch, action)?;
        let mut next = current.clone();
        if let Some(fenced) = fenced {
            next.fenced = fenced;
        }
        if let Some(in_controlled_shutdown) = in_controlled_shutdown {
            next.in_controlled_shutdown = in_controlled_shutdown;
        }
        if let Some(mut directories) = directories {
            sort_uuids_like_kafka(&mut directories);
            next.directories = directories;
        }
        if &next != current {
            self.changed_brokers.insert(broker_id, Some(Arc::new(next)));
        }
        Ok(())
    }

    /// `FenceBrokerRecord` (api key 7, before 3.3-IV2).
    pub(crate) fn replay_fence(&mut self, record: &BrokerFencingRecord) -> Result<(), ReplayError> {
        self.change_broker(record.id, record.epoch, "fence", Some(true), None, None)
    }

    /// `UnfenceBrokerRecord` (api key 8, before 3.3-IV2).
    pub(crate) fn replay_unfence(
        &mut self,
        record: &BrokerFencingRecord,
    ) -> Result<(), ReplayError> {
        self.change_broker(record.id, record.epoch, "unfence", Some(false), None, None)
    }

    pub(crate) fn replay_registration_change(
        &mut self,
        record: &BrokerRegistrationChangeRecord,
    ) -> Result<(), ReplayError> {
        let broker_id = record.broker_id;
        let fenced = match record.fenced {
            -1 => Some(false),
            0 => None,
            1 => Some(true),
            value => return Err(ReplayError::InvalidFencingChange { broker_id, value }),
        };
        let in_controlled_shutdown = match record.in_controlled_shutdown {
            0 => None,
            1 => Some(true),
            value => {
                return Err(ReplayError::InvalidControlledShutdownChange { broker_id, value });
            }
        };
        let directories = (!record.log_dirs.is_empty()).then(|| record.log_dirs.clone());
        self.change_broker(
            broker_id,
            record.broker_epoch,
            "change",
            fenced,
            in_controlled_shutdown,
            directories,
        )
    }

    /// Ends a snapshot load: registrations the snapshot did not hold are removed.
    pub(crate) fn finish_snapshot(&mut self) {
        for id in self.image.brokers.keys() {
            self.changed_brokers.entry(*id).or_insert(None);
        }
        for id in self.image.controllers.keys() {
            self.changed_controllers.entry(*id).or_insert(None);
        }
    }

    pub(crate) fn apply(&self) -> ClusterImage {
        let mut brokers = self.image.brokers.clone();
        for (id, change) in &self.changed_brokers {
            match change {
                Some(broker) => {
                    brokers.insert(*id, Arc::clone(broker));
                }
                None => {
                    brokers.remove(id);
                }
            }
        }
        let mut controllers = self.image.controllers.clone();
        for (id, change) in &self.changed_controllers {
            match change {
                Some(controller) => {
                    controllers.insert(*id, Arc::clone(controller));
                }
                None => {
                    controllers.remove(id);
                }
            }
        }
        ClusterImage {
            brokers,
            controllers,
        }
    }
}
