//! AlterUserScramCredentials (Kafka 3.9 `ScramControlManager.alterCredentials`): deletions
//! and upsertions per user in, `RemoveUserScramCredentialRecord`s and
//! `UserScramCredentialRecord`s (StoredKey and ServerKey derived from the client's
//! SaltedPassword) out, in one atomic batch, with one result per user.
//!
//! A user may appear once in a request (deletions and upsertions together), else
//! `DUPLICATE_RESOURCE`; then the metadata.version (≥ 3.5-IV2, else `UNSUPPORTED_VERSION`),
//! the name (`UNACCEPTABLE_CREDENTIAL`), the mechanism (`UNSUPPORTED_SASL_MECHANISM`), a
//! deletion's credential existing (`RESOURCE_NOT_FOUND`), an upsertion's iterations
//! (4096..=16384, `UNACCEPTABLE_CREDENTIAL`). Results list successful deletions, successful
//! upsertions, then errors, each group in the order of Kafka's `HashMap` by user name.

use hmac::{Hmac, Mac};
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::records::{
    MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};
use krust_net::error_codes::{
    DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
};
use sha2::{Digest, Sha256, Sha512};

use crate::api_error::{ApiError, java_string_map_order};

/// `ScramMechanism.SCRAM_SHA_256`.
pub const SCRAM_SHA_256: i8 = 1;
/// `ScramMechanism.SCRAM_SHA_512`.
pub const SCRAM_SHA_512: i8 = 2;
/// Fewest iterations either mechanism accepts.
pub const MIN_ITERATIONS: i32 = 4096;
/// Most iterations the admin API accepts (`ScramControlManager.MAX_ITERATIONS`).
pub const MAX_ITERATIONS: i32 = 16384;

/// A map from user name that remembers Java `HashMap` insertion positions: re-inserting a
/// removed key moves it to the end, as in Java.
#[derive(Debug)]
struct JavaMap<V> {
    entries: Vec<(String, V)>,
    max_size: usize,
}

impl<V> JavaMap<V> {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            max_size: 0,
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    fn put(&mut self, key: &str, value: V) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key.to_owned(), value)),
        }
        self.max_size = self.max_size.max(self.entries.len());
    }

    /// Entries in the Java map's iteration order.
    fn into_java_order(self) -> Vec<(String, V)> {
        let keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
        let order = java_string_map_order(&keys, 16, self.max_size);
        let mut slots: Vec<Option<(String, V)>> = self.entries.into_iter().map(Some).collect();
        order.into_iter().filter_map(|i| slots[i].take()).collect()
    }
}

/// The records and the response of one AlterUserScramCredentials.
#[must_use]
pub fn alter_user_scram_credentials(
    image: &MetadataImage,
    request: &AlterUserScramCredentialsRequest,
) -> (Vec<ApiMessageAndVersion>, AlterUserScramCredentialsResponse) {
    let supported = image.metadata_version().is_scram_supported();
    let duplicate = || {
        ApiError::new(
            DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    };
    let unsupported = || {
        ApiError::new(
            UNSUPPORTED_VERSION,
            "The current metadata.version does not support SCRAM",
        )
    };
    let mut deletions: JavaMap<i8> = JavaMap::new();
    let mut upsertions: JavaMap<&ScramCredentialUpsertion> = JavaMap::new();
    let mut errors: JavaMap<ApiError> = JavaMap::new();
    for deletion in &request.deletions {
        let name = deletion.name.as_str();
        if errors.contains(name) {
            continue;
        }
        if deletions.remove(name).is_some() {
            errors.put(name, duplicate());
        } else if !supported {
            errors.put(name, unsupported());
        } else {
            match validate_name_and_mechanism(name, deletion.mechanism).and_then(|()| {
                let exists = image
                    .scram
                    .credentials
                    .contains_key(&(deletion.mechanism, name.to_owned()));
                if exists {
                    Ok(())
                } else {
                    Err(ApiError::new(
                        RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    ))
                }
            }) {
                Ok(()) => deletions.put(name, deletion.mechanism),
                Err(error) => errors.put(name, error),
            }
        }
    }
    for upsertion in &request.upsertions {
        let name = upsertion.name.as_str();
        if errors.contains(name) {
            continue;
        }
        if deletions.remove(name).is_some() || upsertions.remove(name).is_some() {
            errors.put(name, duplicate());
        } else if !supported {
            errors.put(name, unsupported());
        } else {
            match validate_upsertion(name, upsertion.mechanism, upsertion.iterations) {
                Ok(()) => upsertions.put(name, upsertion),
                Err(error) => errors.put(name, error),
            }
        }
    }
    let mut records = Vec::new();
    let mut results = Vec::new();
    let ok = |user: &str| {
        AlterUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.to_owned()))
            .with_error_message(None)
    };
    for (name, mechanism) in deletions.into_java_order() {
        results.push(ok(&name));
        records.push(ApiMessageAndVersion::new(
            MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                name,
                mechanism,
                ..RemoveUserScramCredentialRecord::default()
            }),
            0,
        ));
    }
    for (name, upsertion) in upsertions.into_java_order() {
        results.push(ok(&name));
        let (stored_key, server_key) = derive_keys(upsertion.mechanism, &upsertion.salted_password);
        records.push(ApiMessageAndVersion::new(
            MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                name,
                mechanism: upsertion.mechanism,
                salt: upsertion.salt.to_vec(),
                stored_key,
                server_key,
                iterations: upsertion.iterations,
                unknown_tagged_fields: Vec::new(),
            }),
            0,
        ));
    }
    for (name, error) in errors.into_java_order() {
        results.push(
            AlterUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(name))
                .with_error_code(error.code)
                .with_error_message(error.message_bytes()),
        );
    }
    (
        records,
        AlterUserScramCredentialsResponse::default().with_results(results),
    )
}

fn validate_name_and_mechanism(name: &str, mechanism: i8) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::new(
            UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty",
        ));
    }
    if mechanism != SCRAM_SHA_256 && mechanism != SCRAM_SHA_512 {
        return Err(ApiError::new(
            UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism",
        ));
    }
    Ok(())
}

fn validate_upsertion(name: &str, mechanism: i8, iterations: i32) -> Result<(), ApiError> {
    validate_name_and_mechanism(name, mechanism)?;
    if iterations < MIN_ITERATIONS {
        return Err(ApiError::new(UNACCEPTABLE_CREDENTIAL, "Too few iterations"));
    }
    if iterations > MAX_ITERATIONS {
        return Err(ApiError::new(
            UNACCEPTABLE_CREDENTIAL,
            "Too many iterations",
        ));
    }
    Ok(())
}

/// `ScramFormatter`: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
/// HMAC(SaltedPassword, "Server Key"). `mechanism` is a valid one.
#[must_use]
pub fn derive_keys(mechanism: i8, salted_password: &[u8]) -> (Vec<u8>, Vec<u8>) {
    fn keys<M: Mac + hmac::digest::KeyInit, D: Digest>(
        salted_password: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        let hmac = |message: &[u8]| {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(salted_password)
                .expect("HMAC takes keys of any length");
            mac.update(message);
            mac.finalize().into_bytes().to_vec()
        };
        let client_key = hmac(b"Client Key");
        let stored_key = D::digest(&client_key).to_vec();
        (stored_key, hmac(b"Server Key"))
    }
    if mechanism == SCRAM_SHA_512 {
        keys::<Hmac<Sha512>, Sha512>(salted_password)
    } else {
        keys::<Hmac<Sha256>, Sha256>(salted_password)
    }
}
