//! Delegation tokens (Kafka's `DelegationTokenImage` / `DelegationTokenDelta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::writer::{ImageWriteError, ImageWriterOptions, RecordSink, emit};
use crate::records::{DelegationTokenRecord, MetadataRecord, RemoveDelegationTokenRecord};

/// One token; the token id is the map key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DelegationTokenData {
    /// Owner principal.
    pub owner: String,
    /// Requester principal.
    pub requester: String,
    /// Principals allowed to renew it.
    pub renewers: Vec<String>,
    /// Issue time (ms).
    pub issue_timestamp_ms: i64,
    /// Latest possible expiry (ms).
    pub max_timestamp_ms: i64,
    /// Current expiry (ms).
    pub expiration_timestamp_ms: i64,
}

/// Tokens by id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DelegationTokensImage {
    /// Token id → token.
    pub tokens: OrdMap<String, Arc<DelegationTokenData>>,
}

impl DelegationTokensImage {
    /// Needs metadata.version ≥ 3.6-IV2; below, any token is a loss.
    pub(crate) fn write(
        &self,
        sink: &mut dyn RecordSink,
        options: &mut ImageWriterOptions<'_>,
    ) -> Result<(), ImageWriteError> {
        if !options.metadata_version.is_delegation_token_supported() {
            if !self.tokens.is_empty() {
                let ids: Vec<&str> = self.tokens.keys().map(String::as_str).collect();
                options.handle_loss(&format!("Delegation Tokens: {}", ids.join(", ")))?;
            }
            return Ok(());
        }
        for (token_id, token) in &self.tokens {
            emit(
                sink,
                MetadataRecord::DelegationToken(DelegationTokenRecord {
                    owner: token.owner.clone(),
                    requester: token.requester.clone(),
                    renewers: token.renewers.clone(),
                    issue_timestamp: token.issue_timestamp_ms,
                    max_timestamp: token.max_timestamp_ms,
                    expiration_timestamp: token.expiration_timestamp_ms,
                    token_id: token_id.clone(),
                    unknown_tagged_fields: Vec::new(),
                }),
                0,
            );
        }
        Ok(())
    }
}

/// Changes to tokens (`None` = removed).
#[derive(Debug, Clone)]
pub struct DelegationTokensDelta {
    image: Arc<DelegationTokensImage>,
    changes: BTreeMap<String, Option<Arc<DelegationTokenData>>>,
}

impl DelegationTokensDelta {
    pub(crate) fn new(image: Arc<DelegationTokensImage>) -> Self {
        Self {
            image,
            changes: BTreeMap::new(),
        }
    }

    /// Changed tokens (`None` = removed).
    #[must_use]
    pub fn changes(&self) -> &BTreeMap<String, Option<Arc<DelegationTokenData>>> {
        &self.changes
    }

    pub(crate) fn replay_add(&mut self, record: &DelegationTokenRecord) {
        let token = DelegationTokenData {
            owner: record.owner.clone(),
            requester: record.requester.clone(),
            renewers: record.renewers.clone(),
            issue_timestamp_ms: record.issue_timestamp,
            max_timestamp_ms: record.max_timestamp,
            expiration_timestamp_ms: record.expiration_timestamp,
        };
        self.changes
            .insert(record.token_id.clone(), Some(Arc::new(token)));
    }

    /// Removing a token that does not exist is not an error (Kafka's `DelegationTokenDelta`).
    pub(crate) fn replay_remove(&mut self, record: &RemoveDelegationTokenRecord) {
        self.changes.insert(record.token_id.clone(), None);
    }

    /// Ends a snapshot load: tokens the snapshot did not hold are removed.
    pub(crate) fn finish_snapshot(&mut self) {
        for id in self.image.tokens.keys() {
            self.changes.entry(id.clone()).or_insert(None);
        }
    }

    pub(crate) fn apply(&self) -> DelegationTokensImage {
        let mut tokens = self.image.tokens.clone();
        for (id, change) in &self.changes {
            match change {
                Some(token) => {
                    tokens.insert(id.clone(), Arc::clone(token));
                }
                None => {
                    tokens.remove(id);
                }
            }
        }
        DelegationTokensImage { tokens }
    }
}
