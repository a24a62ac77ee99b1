//! `kafka-storage format --add-scram` (Kafka 3.9 `metadata/storage/ScramParser.java` and the
//! client's `ScramFormatter`): parse `SCRAM-SHA-256=[name=alice,password=alice-secret]` and
//! compute the `UserScramCredentialRecord` (RFC 5802 keys).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use thiserror::Error;

use crate::records::UserScramCredentialRecord;

/// `java.util.Base64.getDecoder()`: standard alphabet, padding optional, lenient trailing bits.
const JAVA_BASE64: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Default iteration count when `iterations` is not given.
pub const DEFAULT_ITERATIONS: i32 = 4096;

/// The SCRAM mechanisms Kafka supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256`, type 1.
    Sha256,
    /// `SCRAM-SHA-512`, type 2.
    Sha512,
}

impl ScramMechanism {
    /// Looks a mechanism up by its SASL name (`SCRAM-SHA-256`).
    #[must_use]
    pub fn from_mechanism_name(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(Self::Sha256),
            "SCRAM-SHA-512" => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The `Mechanism` value of the record.
    #[must_use]
    pub fn record_type(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// Kafka's enum name, used in its messages (`SCRAM_SHA_256`).
    #[must_use]
    pub fn enum_name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM_SHA_256",
            Self::Sha512 => "SCRAM_SHA_512",
        }
    }

    /// Smallest iteration count accepted.
    #[must_use]
    pub fn min_iterations(self) -> i32 {
        4096
    }

    /// Largest iteration count accepted.
    #[must_use]
    pub fn max_iterations(self) -> i32 {
        16384
    }

    fn hmac(self, key: &[u8], data: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[&[u8]]) -> Vec<u8> {
            // HMAC accepts keys of any length, so `new_from_slice` cannot fail.
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC takes keys of any length");
            for part in data {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Self::Sha256 => run::<Hmac<Sha256>>(key, data),
            Self::Sha512 => run::<Hmac<Sha512>>(key, data),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, iterations)` of RFC 5802 (PBKDF2 with one block).
    #[must_use]
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: i32) -> Vec<u8> {
        let mut previous = self.hmac(password, &[salt, &[0, 0, 0, 1]]);
        let mut result = previous.clone();
        for _ in 2..=iterations {
            previous = self.hmac(password, &[&previous]);
            for (r, p) in result.iter_mut().zip(&previous) {
                *r ^= p;
            }
        }
        result
    }
}

/// A bad `--add-scram` argument. Messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScramError {
    /// Kafka's `FormatterException` text.
    #[error("{0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> ScramError {
    ScramError::Invalid(message.into())
}

/// What the user gave to derive the keys from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Secret {
    /// `password=…`: salted with PBKDF2.
    Password(String),
    /// `saltedpassword=…` (base64): used as given.
    SaltedPassword(Vec<u8>),
}

/// One parsed `--add-scram` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramArgument {
    mechanism: ScramMechanism,
    name: String,
    salt: Option<Vec<u8>>,
    iterations: Option<i32>,
    secret: Secret,
}

impl ScramArgument {
    /// Parses `MECHANISM=[key=value,…]` with keys `name`, `password` | `saltedpassword` (+
    /// `salt`), `salt`, `iterations`; values may be double-quoted.
    ///
    /// # Errors
    /// [`ScramError`] with Kafka's message.
    pub fn parse(input: &str) -> Result<Self, ScramError> {
        let input = input.trim();
        let (mechanism_name, config) = input.split_once('=').ok_or_else(|| {
            invalid(format!(
                "Failed to find equals sign in SCRAM argument '{input}'"
            ))
        })?;
        let mechanism = ScramMechanism::from_mechanism_name(mechanism_name).ok_or_else(|| {
            invalid(format!(
                "The add-scram mechanism {mechanism_name} is not supported."
            ))
        })?;
        let config = config
            .strip_prefix('[')
            .ok_or_else(|| invalid("Expected configuration string to start with ["))?;
        let config = config
            .strip_suffix(']')
            .ok_or_else(|| invalid("Expected configuration string to end with ]"))?;
        let mut components = BTreeMap::new();
        // `String.split(",")`: trailing empty parts are dropped (but "" stays one empty part).
        let mut parts: Vec<&str> = config.split(',').collect();
        if !config.is_empty() {
            while parts.last() == Some(&"") {
                parts.pop();
            }
        }
        for component in parts {
            let (key, value) = component.split_once('=').ok_or_else(|| {
                invalid(format!(
                    "No equals sign found in SCRAM component: {component}"
                ))
            })?;
            let value = if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
                &value[1..value.len() - 1]
            } else {
                value
            };
            components.insert(key.to_owned(), value.to_owned());
        }
        let name = components
            .remove("name")
            .ok_or_else(|| invalid("You must supply 'name' to add-scram"))?;
        let salt = components
            .remove("salt")
            .map(|text| {
                JAVA_BASE64
                    .decode(&text)
                    .map_err(|_| invalid(format!("Failed to decode given salt: {text}")))
            })
            .transpose()?;
        let iterations = components
            .remove("iterations")
            .map(|text| {
                text.parse::<i32>()
                    .map_err(|_| invalid(format!("Failed to parse iterations count: {text}")))
            })
            .transpose()?;
        let password = components.remove("password");
        let salted_password_text = components.remove("saltedpassword");
        let secret = match (password, salted_password_text) {
            (Some(password), _) => Secret::Password(password),
            (None, None) => {
                return Err(invalid(
                    "You must supply one of 'password' or 'saltedpassword' to add-scram",
                ));
            }
            (None, Some(_)) if salt.is_none() => {
                return Err(invalid(
                    "You must supply 'salt' with 'saltedpassword' to add-scram",
                ));
            }
            (None, Some(text)) => {
                Secret::SaltedPassword(JAVA_BASE64.decode(&text).map_err(|_| {
                    invalid(format!("Failed to decode given saltedPassword: {text}"))
                })?)
            }
        };
        if !components.is_empty() {
            let keys: Vec<&str> = components.keys().map(String::as_str).collect();
            return Err(invalid(format!(
                "Unknown SCRAM configurations: {}",
                keys.join(", ")
            )));
        }
        Ok(Self {
            mechanism,
            name,
            salt,
            iterations,
            secret,
        })
    }

    /// The record. `random_salt` supplies a salt when none was given (Kafka: the ASCII text of a
    /// random 130-bit number in base 36, see [`random_salt_from`]).
    ///
    /// # Errors
    /// Iterations outside 4096..=16384 (Kafka's message).
    pub fn to_record(
        &self,
        random_salt: impl FnOnce() -> Vec<u8>,
    ) -> Result<UserScramCredentialRecord, ScramError> {
        let mechanism = self.mechanism;
        let salt = self.salt.clone().unwrap_or_else(random_salt);
        let iterations = self.iterations.unwrap_or(DEFAULT_ITERATIONS);
        if iterations < mechanism.min_iterations() {
            return Err(invalid(format!(
                "The 'iterations' value must be >= {} for add-scram using {}",
                mechanism.min_iterations(),
                mechanism.enum_name()
            )));
        }
        if iterations > mechanism.max_iterations() {
            return Err(invalid(format!(
                "The 'iterations' value must be <= {} for add-scram using {}",
                mechanism.max_iterations(),
                mechanism.enum_name()
            )));
        }
        let salted_password = match &self.secret {
            Secret::SaltedPassword(given) => given.clone(),
            Secret::Password(password) => {
                mechanism.salted_password(password.as_bytes(), &salt, iterations)
            }
        };
        let client_key = mechanism.hmac(&salted_password, &[b"Client Key"]);
        Ok(UserScramCredentialRecord {
            name: self.name.clone(),
            mechanism: mechanism.record_type(),
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted_password, &[b"Server Key"]),
            iterations,
            unknown_tagged_fields: Vec::new(),
        })
    }
}

/// Kafka's default salt: the ASCII digits of a 130-bit number in base 36, made from 130 random
/// bits the caller supplies (`high` keeps only its two lowest bits).
#[must_use]
pub fn random_salt_from(low: u128, high: u8) -> Vec<u8> {
    // 130 bits = 2 bits of `high` above the 128 bits of `low`; base-36 digits, most significant
    // first, without leading zeros (BigInteger.toString(36)).
    let mut digits = Vec::new();
    let mut hi = u128::from(high & 0b11);
    let mut lo = low;
    loop {
        // Divide the 130-bit value (hi:lo) by 36.
        let hi_q = hi / 36;
        let hi_r = hi % 36;
        // (hi_r * 2^128 + lo) / 36, done in two 64-bit halves to avoid overflow.
        let upper = (hi_r << 64) | (lo >> 64);
        let upper_q = upper / 36;
        let upper_r = upper % 36;
        let lower = (upper_r << 64) | (lo & u128::from(u64::MAX));
        let lower_q = lower / 36;
        let digit = (lower % 36) as u8;
        hi = hi_q;
        lo = (upper_q << 64) | lower_q;
        digits.push(if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        });
        if hi == 0 && lo == 0 {
            break;
        }
    }
    digits.reverse();
    digits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc7677_sha256_test_vector() {
        // RFC 7677 §3: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 rounds.
        let salt = JAVA_BASE64
            .decode("W22ZaJ0SNY7soEsUEjb6gQ==")
            .expect("salt");
        let argument = ScramArgument::parse(
            "SCRAM-SHA-256=[name=user,password=pencil,salt=\"W22ZaJ0SNY7soEsUEjb6gQ==\",iterations=4096]",
        )
        .expect("valid");
        let record = argument.to_record(|| unreachable!()).expect("record");
        assert_eq!(record.salt, salt);
        assert_eq!(record.mechanism, 1);
        // From the RFC's exchange: ServerKey = base64 of the server signature key.
        let salted = ScramMechanism::Sha256.salted_password(b"pencil", &salt, 4096);
        assert_eq!(
            hex(&salted),
            "c4a49510323ab4f952cac1fa99441939e78ea74d6be81ddf7096e87513dc615d"
        );
        // Python's hashlib/hmac give the same StoredKey and ServerKey.
        assert_eq!(
            JAVA_BASE64.encode(&record.stored_key),
            "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        );
        assert_eq!(
            JAVA_BASE64.encode(&record.server_key),
            "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
    }

    #[test]
    fn bad_arguments_give_kafka_messages() {
        let cases = [
            (
                "SCRAM-SHA-256",
                "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'",
            ),
            (
                "SCRAM-MD5=[name=a]",
                "The add-scram mechanism SCRAM-MD5 is not supported.",
            ),
            (
                "SCRAM-SHA-256=name=a]",
                "Expected configuration string to start with [",
            ),
            (
                "SCRAM-SHA-256=[name=a",
                "Expected configuration string to end with ]",
            ),
            (
                "SCRAM-SHA-256=[name]",
                "No equals sign found in SCRAM component: name",
            ),
            (
                "SCRAM-SHA-256=[password=x]",
                "You must supply 'name' to add-scram",
            ),
            (
                "SCRAM-SHA-256=[name=a]",
                "You must supply one of 'password' or 'saltedpassword' to add-scram",
            ),
            (
                "SCRAM-SHA-256=[name=a,saltedpassword=YCE=]",
                "You must supply 'salt' with 'saltedpassword' to add-scram",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=x]",
                "Failed to parse iterations count: x",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,salt=!!]",
                "Failed to decode given salt: !!",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,color=red]",
                "Unknown SCRAM configurations: color",
            ),
        ];
        for (input, message) in cases {
            let err = ScramArgument::parse(input).expect_err(input);
            assert_eq!(err.to_string(), message, "{input}");
        }
        let low = ScramArgument::parse("SCRAM-SHA-512=[name=a,password=b,iterations=100]")
            .expect("parses")
            .to_record(|| b"salt".to_vec())
            .expect_err("too few iterations");
        assert_eq!(
            low.to_string(),
            "The 'iterations' value must be >= 4096 for add-scram using SCRAM_SHA_512"
        );
    }

    #[test]
    fn salted_password_argument_is_used_as_given() {
        let record = ScramArgument::parse(
            "SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]",
        )
        .expect("Kafka's help example")
        .to_record(|| unreachable!())
        .expect("record");
        assert_eq!(record.salt, b"7q");
        assert_eq!(record.iterations, 8192);
        assert_eq!(record.mechanism, 2);
        assert_eq!(
            record.server_key,
            ScramMechanism::Sha512.hmac(&[0x60, 0x21], &[b"Server Key"])
        );
    }

    #[test]
    fn random_salt_is_base36_text() {
        assert_eq!(random_salt_from(0, 0), b"0");
        assert_eq!(random_salt_from(35, 0), b"z");
        assert_eq!(random_salt_from(36, 0), b"10");
        // 2^130 - 1 in base 36.
        let max = random_salt_from(u128::MAX, 3);
        assert_eq!(
            max,
            b"1omfro7zwmumr3umxudzyj6scf".to_vec(),
            "{}",
            String::from_utf8_lossy(&max)
        );
    }
}
