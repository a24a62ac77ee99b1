//! ACLs by id (Kafka's `AclsImage` / `AclsDelta`, `StandardAcl`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;
use uuid::Uuid;

use super::ReplayError;
use super::writer::{RecordSink, emit};
use crate::records::{AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord};

/// One ACL binding; the codes are App. A's (kept raw so unknown codes survive a round trip).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StandardAcl {
    /// ResourceType code.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// PatternType code.
    pub pattern_type: i8,
    /// e.g. `User:alice`.
    pub principal: String,
    /// Host, `*` for any.
    pub host: String,
    /// AclOperation code.
    pub operation: i8,
    /// AclPermissionType code.
    pub permission_type: i8,
}

impl StandardAcl {
    fn from_record(record: &AccessControlEntryRecord) -> Self {
        Self {
            resource_type: record.resource_type,
            resource_name: record.resource_name.clone(),
            pattern_type: record.pattern_type,
            principal: record.principal.clone(),
            host: record.host.clone(),
            operation: record.operation,
            permission_type: record.permission_type,
        }
    }
}

/// ACLs by id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclsImage {
    /// Id → ACL.
    pub acls: OrdMap<Uuid, Arc<StandardAcl>>,
}

impl AclsImage {
    pub(crate) fn write(&self, sink: &mut dyn RecordSink) {
        for (id, acl) in &self.acls {
            emit(
                sink,
                MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
                    id: *id,
                    resource_type: acl.resource_type,
                    resource_name: acl.resource_name.clone(),
                    pattern_type: acl.pattern_type,
                    principal: acl.principal.clone(),
                    host: acl.host.clone(),
                    operation: acl.operation,
                    permission_type: acl.permission_type,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
        }
    }
}

/// Changes to ACLs: id → new ACL (`None` = removed).
#[derive(Debug, Clone)]
pub struct AclsDelta {
    image: Arc<AclsImage>,
    changes: BTreeMap<Uuid, Option<Arc<StandardAcl>>>,
}

impl AclsDelta {
    pub(crate) fn new(image: Arc<AclsImage>) -> Self {
        Self {
            image,
            changes: BTreeMap::new(),
        }
    }

    /// Changed ACLs (`None` = removed).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<Uuid, Option<Arc<StandardAcl>>> {
        &self.changes
    }

    pub(crate) fn replay_add(&mut self, record: &AccessControlEntryRecord) {
        self.changes
            .insert(record.id, Some(Arc::new(StandardAcl::from_record(record))));
    }

    /// An ACL created and removed within the delta leaves no trace; removing one that does not
    /// exist is an error (as in Kafka's `AclsDelta`).
    pub(crate) fn replay_remove(
        &mut self,
        record: &RemoveAccessControlEntryRecord,
    ) -> Result<(), ReplayError> {
        let in_image = self.image.acls.contains_key(&record.id);
        match self.changes.get(&record.id) {
            Some(Some(_)) if !in_image => {
                self.changes.remove(&record.id);
            }
            Some(Some(_)) => {
                self.changes.insert(record.id, None);
            }
            None if in_image => {
                self.changes.insert(record.id, None);
            }
            Some(None) | None => return Err(ReplayError::UnknownAcl { id: record.id }),
        }
        Ok(())
    }

    /// Ends a snapshot load: ACLs the snapshot did not hold are removed.
    pub(crate) fn finish_snapshot(&mut self) {
        for id in self.image.acls.keys() {
            self.changes.entry(*id).or_insert(None);
        }
    }

    pub(crate) fn apply(&self) -> AclsImage {
        let mut acls = self.image.acls.clone();
        for (id, change) in &self.changes {
            match change {
                Some(acl) => {
                    acls.insert(*id, Arc::clone(acl));
                }
                None => {
                    acls.remove(id);
                }
            }
        }
        AclsImage { acls }
    }
}
