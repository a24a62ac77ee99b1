//! Kafka's textual form of a UUID (`org.apache.kafka.common.Uuid`): the 16 bytes in URL-safe
//! base64 without padding, 22 characters, e.g. `MkU3OEVBNTcwNTJENDM2Qk`. Used for cluster ids,
//! directory ids and topic ids.

use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use thiserror::Error;
use uuid::Uuid;

/// Encodes without padding; decodes with or without padding and ignores non-zero trailing bits,
/// as `java.util.Base64.getUrlDecoder()` does.
const KAFKA_BASE64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The all-zero UUID (`Uuid.ZERO_UUID`), reserved.
pub const ZERO_UUID: Uuid = Uuid::nil();
/// `Uuid.METADATA_TOPIC_ID` (msb 0, lsb 1), reserved. Also `DirectoryId.UNASSIGNED`.
pub const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);
/// `DirectoryId.MIGRATING` (all zero): a replica whose directory is not known yet.
pub const DIRECTORY_ID_MIGRATING: Uuid = Uuid::from_u64_pair(0, 0);
/// `DirectoryId.UNASSIGNED`.
pub const DIRECTORY_ID_UNASSIGNED: Uuid = Uuid::from_u64_pair(0, 1);
/// `DirectoryId.LOST`.
pub const DIRECTORY_ID_LOST: Uuid = Uuid::from_u64_pair(0, 2);

/// A string that is not a Kafka UUID. The first two messages are Kafka's own.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KafkaUuidError {
    /// Longer than 24 characters.
    #[error("Input string with prefix `{prefix}` is too long to be decoded as a base64 UUID")]
    TooLong {
        /// The first 24 characters.
        prefix: String,
    },
    /// Valid base64 that does not decode to 16 bytes.
    #[error(
        "Input string `{input}` decoded as {decoded_len} bytes, which is not equal to the expected 16 bytes of a base64-encoded UUID"
    )]
    WrongLength {
        /// The input.
        input: String,
        /// Decoded length.
        decoded_len: usize,
    },
    /// Not URL-safe base64 at all.
    #[error("Input string `{input}` is not URL-safe base64: {reason}")]
    NotBase64 {
        /// The input.
        input: String,
        /// What the decoder said.
        reason: String,
    },
}

/// Formats `uuid` the way Kafka prints it.
#[must_use]
pub fn to_kafka_string(uuid: &Uuid) -> String {
    KAFKA_BASE64.encode(uuid.as_bytes())
}

/// Parses Kafka's textual form.
///
/// # Errors
/// [`KafkaUuidError`] with Kafka's message where Kafka has one.
pub fn parse_kafka_uuid(input: &str) -> Result<Uuid, KafkaUuidError> {
    if input.chars().count() > 24 {
        return Err(KafkaUuidError::TooLong {
            prefix: input.chars().take(24).collect(),
        });
    }
    let bytes = KAFKA_BASE64
        .decode(input)
        .map_err(|e| KafkaUuidError::NotBase64 {
            input: input.to_owned(),
            reason: e.to_string(),
        })?;
    let array: [u8; 16] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| KafkaUuidError::WrongLength {
            input: input.to_owned(),
            decoded_len: bytes.len(),
        })?;
    Ok(Uuid::from_bytes(array))
}

/// A random (version 4) UUID as `Uuid.randomUuid()` makes it: never the zero UUID or the
/// metadata topic id, and never one whose text starts with `-`, so it cannot be mistaken for a
/// command-line flag. Randomness comes from `rng` so that callers can replay it.
#[must_use]
pub fn random_kafka_uuid(rng: &mut impl rand::Rng) -> Uuid {
    loop {
        let uuid = uuid::Builder::from_random_bytes(rng.r#gen()).into_uuid();
        if uuid != ZERO_UUID
            && uuid != METADATA_TOPIC_ID
            && !to_kafka_string(&uuid).starts_with('-')
        {
            return uuid;
        }
    }
}

/// `DirectoryId.reserved`: the first 100 UUIDs (msb 0, lsb < 100) are reserved.
#[must_use]
pub fn is_reserved_directory_id(uuid: &Uuid) -> bool {
    let (msb, lsb) = uuid.as_u64_pair();
    msb == 0 && lsb < 100
}

/// A random directory id: not reserved, not starting with `-`, and not in `taken`
/// (Kafka: `MetaPropertiesEnsemble.Copier.generateValidDirectoryId`).
#[must_use]
pub fn random_directory_id(rng: &mut impl rand::Rng, taken: &[Uuid]) -> Uuid {
    loop {
        let uuid = uuid::Builder::from_random_bytes(rng.r#gen()).into_uuid();
        if !is_reserved_directory_id(&uuid)
            && !to_kafka_string(&uuid).starts_with('-')
            && !taken.contains(&uuid)
        {
            return uuid;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_strings_round_trip() {
        let uuid = parse_kafka_uuid("RXmJz-cpSbqo1IMdXqyzRA").expect("a directory id Kafka wrote");
        assert_eq!(to_kafka_string(&uuid), "RXmJz-cpSbqo1IMdXqyzRA");
        // Kafka's quickstart id has non-zero trailing bits: Java accepts it, and so do we.
        let quickstart = parse_kafka_uuid("MkU3OEVBNTcwNTJENDM2Qk").expect("quickstart id");
        assert_eq!(to_kafka_string(&quickstart), "MkU3OEVBNTcwNTJENDM2Qg");
        assert_eq!(
            to_kafka_string(&DIRECTORY_ID_UNASSIGNED),
            "AAAAAAAAAAAAAAAAAAAAAQ"
        );
        assert_eq!(
            to_kafka_string(&DIRECTORY_ID_LOST),
            "AAAAAAAAAAAAAAAAAAAAAg"
        );
        assert_eq!(
            parse_kafka_uuid("AAAAAAAAAAAAAAAAAAAAAQ=="),
            Ok(DIRECTORY_ID_UNASSIGNED),
            "padding is accepted, as by Java's decoder"
        );
    }

    #[test]
    fn bad_strings_give_kafka_messages() {
        assert_eq!(
            parse_kafka_uuid("abc").map_err(|e| e.to_string()),
            Err("Input string `abc` decoded as 2 bytes, which is not equal to the expected 16 bytes of a base64-encoded UUID".to_owned())
        );
        assert_eq!(
            parse_kafka_uuid("kafka-pipeline-lab-cluster-001").map_err(|e| e.to_string()),
            Err("Input string with prefix `kafka-pipeline-lab-clust` is too long to be decoded as a base64 UUID".to_owned())
        );
        assert!(matches!(
            parse_kafka_uuid("!!!!"),
            Err(KafkaUuidError::NotBase64 { .. })
        ));
    }

    #[test]
    fn random_ids_are_valid() {
        use rand::SeedableRng as _;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let id = random_kafka_uuid(&mut rng);
            let text = to_kafka_string(&id);
            assert_eq!(text.len(), 22);
            assert!(!text.starts_with('-'));
            assert_eq!(parse_kafka_uuid(&text), Ok(id));
            assert!(!is_reserved_directory_id(&random_directory_id(
                &mut rng,
                &[]
            )));
        }
    }

    #[test]
    fn reserved_directory_ids() {
        assert!(is_reserved_directory_id(&DIRECTORY_ID_MIGRATING));
        assert!(is_reserved_directory_id(&Uuid::from_u64_pair(0, 99)));
        assert!(!is_reserved_directory_id(&Uuid::from_u64_pair(0, 100)));
        assert!(!is_reserved_directory_id(&Uuid::from_u64_pair(1, 0)));
    }
}
