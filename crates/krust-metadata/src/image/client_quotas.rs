//! Client quotas by entity (Kafka's `ClientQuotasImage` / `ClientQuotasDelta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::writer::{RecordSink, emit};
use crate::records::{ClientQuotaRecord, MetadataRecord, QuotaEntity};

/// A quota entity: entity type (`user`, `client-id`, `ip`) → name (`None` = the default
/// entity of that type).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClientQuotaEntity(pub BTreeMap<String, Option<String>>);

impl ClientQuotaEntity {
    fn from_record(entity: &[QuotaEntity]) -> Self {
        Self(
            entity
                .iter()
                .map(|e| (e.entity_type.clone(), e.entity_name.clone()))
                .collect(),
        )
    }

    fn to_record(&self) -> Vec<QuotaEntity> {
        self.0
            .iter()
            .map(|(entity_type, entity_name)| QuotaEntity {
                entity_type: entity_type.clone(),
                entity_name: entity_name.clone(),
                unknown_tagged_fields: Vec::new(),
            })
            .collect()
    }
}

/// Quotas by entity; an entity without quotas is absent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClientQuotasImage {
    /// Entity → quota key (e.g. `producer_byte_rate`) → value.
    pub entities: OrdMap<ClientQuotaEntity, OrdMap<String, f64>>,
}

impl ClientQuotasImage {
    pub(crate) fn write(&self, sink: &mut dyn RecordSink) {
        for (entity, quotas) in &self.entities {
            for (key, value) in quotas {
                emit(
                    sink,
                    MetadataRecord::ClientQuota(ClientQuotaRecord {
                        entity: entity.to_record(),
                        key: key.clone(),
                        value: *value,
                        remove: false,
                        unknown_tagged_fields: Vec::new(),
                    }),
                    0,
                );
            }
        }
    }
}

/// Changes to quotas: entity → key → new value (`None` = removed).
#[derive(Debug, Clone)]
pub struct ClientQuotasDelta {
    image: Arc<ClientQuotasImage>,
    changes: BTreeMap<ClientQuotaEntity, BTreeMap<String, Option<f64>>>,
}

impl ClientQuotasDelta {
    pub(crate) fn new(image: Arc<ClientQuotasImage>) -> Self {
        Self {
            image,
            changes: BTreeMap::new(),
        }
    }

    /// Changed quotas by entity (`None` = removed).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<ClientQuotaEntity, BTreeMap<String, Option<f64>>> {
        &self.changes
    }

    pub(crate) fn replay(&mut self, record: &ClientQuotaRecord) {
        let value = (!record.remove).then_some(record.value);
        self.changes
            .entry(ClientQuotaEntity::from_record(&record.entity))
            .or_default()
            .insert(record.key.clone(), value);
    }

    /// Ends a snapshot load: quotas the snapshot did not hold are removed.
    pub(crate) fn finish_snapshot(&mut self) {
        for (entity, quotas) in &self.image.entities {
            let changes = self.changes.entry(entity.clone()).or_default();
            for key in quotas.keys() {
                changes.entry(key.clone()).or_insert(None);
            }
        }
    }

    pub(crate) fn apply(&self) -> ClientQuotasImage {
        let mut entities = self.image.entities.clone();
        for (entity, changes) in &self.changes {
            let mut quotas = entities.get(entity).cloned().unwrap_or_default();
            for (key, value) in changes {
                match value {
                    Some(value) => {
                        quotas.insert(key.clone(), *value);
                    }
                    None => {
                        quotas.remove(key);
                    }
                }
            }
            if quotas.is_empty() {
                entities.remove(entity);
            } else {
                entities.insert(entity.clone(), quotas);
            }
        }
        ClientQuotasImage { entities }
    }
}
