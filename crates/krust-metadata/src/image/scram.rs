//! SCRAM credentials (Kafka's `ScramImage` / `ScramDelta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::writer::{ImageWriteError, ImageWriterOptions, RecordSink, emit};
use crate::records::{MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord};

/// A user's credential for one mechanism; the key is (mechanism code, user name), mechanism
/// 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512 (App. A).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScramCredential {
    /// Salt.
    pub salt: Vec<u8>,
    /// StoredKey.
    pub stored_key: Vec<u8>,
    /// ServerKey.
    pub server_key: Vec<u8>,
    /// Iterations.
    pub iterations: i32,
}

/// (mechanism code, user name).
pub type ScramCredentialKey = (i8, String);

/// SCRAM credentials by mechanism and user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScramImage {
    /// (mechanism, user) → credential.
    pub credentials: OrdMap<ScramCredentialKey, Arc<ScramCredential>>,
}

impl ScramImage {
    /// Needs metadata.version ≥ 3.5-IV2; below, any credential is a loss.
    pub(crate) fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        if !options.metadata_version.is_scram_supported() {
            if !self.credentials.is_empty() {
                let users: Vec<String> = self
                    .credentials
                    .keys()
                    .map(|(mechanism, user)| format!("{user} (mechanism {mechanism})"))
                    .collect();
                options.handle_loss(&format!("SCRAM credentials for {}", users.join(", ")))?;
            }
            return Ok(());
        }
        for ((mechanism, name), credential) in &self.credentials {
            emit(
                sink,
                MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                    name: name.clone(),
                    mechanism: *mechanism,
                    salt: credential.salt.clone(),
                    stored_key: credential.stored_key.clone(),
                    server_key: credential.server_key.clone(),
                    iterations: credential.iterations,
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
        }
        Ok(())
    }
}

/// Changes to credentials (`None` = removed).
#[derive(Debug, Clone)]
pub struct ScramDelta {
    image: Arc<ScramImage>,
    changes: BTreeMap<ScramCredentialKey, Option<Arc<ScramCredential>>>,
}

impl ScramDelta {
    pub(crate) fn new(image: Arc<ScramImage>) -> Self {
        Self {
            image,
            changes: BTreeMap::new(),
        }
    }

    /// Changed credentials (`None` = removed).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<ScramCredentialKey, Option<Arc<ScramCredential>>> {
        &self.changes
    }

    pub(crate) fn replay_add(&mut self, record: &UserScramCredentialRecord) {
        let credential = ScramCredential {
            salt: record.salt.clone(),
            stored_key: record.stored_key.clone(),
            server_key: record.server_key.clone(),
            iterations: record.iterations,
        };
        self.changes.insert(
            (record.mechanism, record.name.clone()),
            Some(Arc::new(credential)),
        );
    }

    /// Removing a credential that does not exist is not an error (Kafka's `ScramDelta`).
    pub(crate) fn replay_remove(&mut self, record: &RemoveUserScramCredentialRecord) {
        self.changes
            .insert((record.mechanism, record.name.clone()), None);
    }

    /// Ends a snapshot load: credentials the snapshot did not hold are removed.
    pub(crate) fn finish_snapshot(&mut self) {
        for key in self.image.credentials.keys() {
            self.changes.entry(key.clone()).or_insert(None);
        }
    }

    pub(crate) fn apply(&self) -> ScramImage {
        let mut credentials = self.image.credentials.clone();
        for (key, change) in &self.changes {
            match change {
                Some(credential) => {
                    credentials.insert(key.clone(), Arc::clone(credential));
                }
                None => {
                    credentials.remove(key);
                }
            }
        }
        ScramImage { credentials }
    }
}
