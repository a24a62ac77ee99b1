//! Password-type broker configs in ZooKeeper: Kafka's `PasswordEncoder`
//! (`EncryptingPasswordEncoder`, server-common, Kafka 3.9).
//!
//! A ZooKeeper-mode broker stores dynamic password configs (`ssl.keystore.password`, …)
//! encrypted with `password.encoder.secret`: a key is derived with PBKDF2 (default
//! `PBKDF2WithHmacSHA512`, 4096 iterations, 128-bit key, 256-byte random salt) and the UTF-8
//! password encrypted (default `AES/CBC/PKCS5Padding`; `AES/GCM/NoPadding` is also read). The
//! stored value lists everything needed to decrypt it:
//! `initializationVector:<b64>,keyLength:128,salt:<b64>,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,iterations:4096,passwordLength:<n>,encryptedPassword:<b64>`
//! (that key order is the Java `HashMap`'s). The migration decrypts these when copying broker
//! configs into KRaft and encrypts them again when dual-writing.

use std::collections::BTreeMap;

use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
use aes_gcm::aead::{Aead, KeyInit};
use base64::Engine as _;

/// Whether `key` is a password-type dynamic broker config (Kafka's
/// `DynamicBrokerConfig.isPasswordConfig`: the name ends with a dynamic config of type
/// PASSWORD, so `listener.name.x.ssl.key.password` counts too).
#[must_use]
pub fn is_password_config(key: &str) -> bool {
    // The dynamic broker configs of type PASSWORD in Kafka 3.9.1 (checked against
    // `DynamicBrokerConfig.isPasswordConfig` over every `KafkaConfig` key).
    const PASSWORD_SUFFIXES: [&str; 7] = [
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "sasl.jaas.config",
    ];
    PASSWORD_SUFFIXES.iter().any(|s| key.ends_with(s))
}

/// `password.encoder.keyfactory.algorithm` when unset.
pub const DEFAULT_KEY_FACTORY_ALGORITHM: &str = "PBKDF2WithHmacSHA512";
/// `password.encoder.cipher.algorithm` default.
pub const DEFAULT_CIPHER_ALGORITHM: &str = "AES/CBC/PKCS5Padding";
/// `password.encoder.key.length` default (bits).
pub const DEFAULT_KEY_LENGTH: u32 = 128;
/// `password.encoder.iterations` default.
pub const DEFAULT_ITERATIONS: u32 = 4096;
const SALT_BYTES: usize = 256;

/// Why a password could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// The stored value lacks a field or has a malformed one.
    #[error("encoded password: field {field} is missing or malformed")]
    Malformed {
        /// The field.
        field: &'static str,
    },
    /// A key factory, cipher or key length krust does not implement (Kafka can use any the
    /// JVM provides; krust has PBKDF2 with HMAC-SHA512/256 and AES-128/192/256 in CBC with
    /// PKCS5 padding or GCM).
    #[error("unsupported password encoder algorithm {algorithm}")]
    Unsupported {
        /// The algorithm or key length.
        algorithm: String,
    },
    /// Decryption failed: the secret is wrong or the value was altered (Kafka: "Password
    /// could not be decoded").
    #[error("password could not be decoded (wrong password.encoder.secret?)")]
    Decrypt,
    /// The stored iteration count is above [`MAX_DECODE_ITERATIONS`]. Kafka has no bound and
    /// would spend minutes deriving the key; krust refuses such a value instead of hanging.
    #[error("encoded password: {iterations} PBKDF2 iterations is above the {max} krust accepts")]
    TooManyIterations {
        /// The stored count.
        iterations: u32,
        /// The bound.
        max: u32,
    },
}

/// The most PBKDF2 iterations a stored password may ask for: 244 times Kafka's default of 4096
/// (a fraction of a second); a znode naming more is refused with
/// [`PasswordError::TooManyIterations`] rather than tying up the reader for minutes.
pub const MAX_DECODE_ITERATIONS: u32 = 1_000_000;

/// Kafka's encrypting `PasswordEncoder` for one secret.
#[derive(Clone)]
pub struct PasswordEncoder {
    secret: String,
    key_factory_algorithm: String,
    cipher_algorithm: String,
    key_length_bits: u32,
    iterations: u32,
}

impl std::fmt::Debug for PasswordEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordEncoder")
            .field("secret", &"[hidden]")
            .field("key_factory_algorithm", &self.key_factory_algorithm)
            .field("cipher_algorithm", &self.cipher_algorithm)
            .field("key_length_bits", &self.key_length_bits)
            .field("iterations", &self.iterations)
            .finish()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl PasswordEncoder {
    /// An encoder for `password.encoder.secret` with Kafka's defaults.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self {
            secret: secret.into(),
            key_factory_algorithm: DEFAULT_KEY_FACTORY_ALGORITHM.to_owned(),
            cipher_algorithm: DEFAULT_CIPHER_ALGORITHM.to_owned(),
            key_length_bits: DEFAULT_KEY_LENGTH,
            iterations: DEFAULT_ITERATIONS,
        }
    }

    /// The same secret with other encoding parameters (`password.encoder.*`). Decoding always
    /// uses the parameters stored with the value.
    #[must_use]
    pub fn with_parameters(
        mut self,
        key_factory_algorithm: &str,
        cipher_algorithm: &str,
        key_length_bits: u32,
        iterations: u32,
    ) -> Self {
        key_factory_algorithm.clone_into(&mut self.key_factory_algorithm);
        cipher_algorithm.clone_into(&mut self.cipher_algorithm);
        self.key_length_bits = key_length_bits;
        self.iterations = iterations;
        self
    }

    fn derive_key(
        &self,
        key_factory: &str,
        salt: &[u8],
        iterations: u32,
        key_length_bits: u32,
    ) -> Result<Vec<u8>, PasswordError> {
        if !matches!(key_length_bits, 128 | 192 | 256) {
            return Err(PasswordError::Unsupported {
                algorithm: format!("key length {key_length_bits}"),
            });
        }
        let mut key = vec![0u8; (key_length_bits / 8) as usize];
        // Java's PBKDF2 key factories take the secret's chars as UTF-8.
        let secret = self.secret.as_bytes();
        match key_factory {
            "PBKDF2WithHmacSHA512" => {
                pbkdf2::pbkdf2_hmac::<sha2::Sha512>(secret, salt, iterations, &mut key);
            }
            "PBKDF2WithHmacSHA256" => {
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(secret, salt, iterations, &mut key);
            }
            other => {
                return Err(PasswordError::Unsupported {
                    algorithm: other.to_owned(),
                });
            }
        }
        Ok(key)
    }

    /// Encrypts `password` with a random salt and IV from `rng`.
    ///
    /// # Errors
    /// [`PasswordError::Unsupported`] for parameters krust does not implement.
    pub fn encode(
        &self,
        password: &str,
        rng: &mut impl rand::Rng,
    ) -> Result<String, PasswordError> {
        let mut salt = vec![0u8; SALT_BYTES];
        rng.fill_bytes(&mut salt);
        let gcm = self.cipher_algorithm.starts_with("AES/GCM/");
        let mut iv = vec![0u8; if gcm { 12 } else { 16 }];
        rng.fill_bytes(&mut iv);
        self.encode_with(password, &salt, &iv)
    }

    /// Encrypts `password` with the given salt and IV (deterministic; for tests).
    ///
    /// # Errors
    /// [`PasswordError::Unsupported`] for parameters krust does not implement, or an IV of the
    /// wrong length.
    pub fn encode_with(
        &self,
        password: &str,
        salt: &[u8],
        iv: &[u8],
    ) -> Result<String, PasswordError> {
        let key = self.derive_key(
            &self.key_factory_algorithm,
            salt,
            self.iterations,
            self.key_length_bits,
        )?;
        let encrypted = encrypt(&self.cipher_algorithm, &key, iv, password.as_bytes())?;
        let gcm = self.cipher_algorithm.starts_with("AES/GCM/");
        let mut fields = vec![
            ("initializationVector", b64().encode(iv)),
            ("keyLength", self.key_length_bits.to_string()),
            ("salt", b64().encode(salt)),
            ("keyFactoryAlgorithm", self.key_factory_algorithm.clone()),
            ("cipherAlgorithm", self.cipher_algorithm.clone()),
        ];
        if gcm {
            fields.push(("authenticationTagLength", "128".to_owned()));
        }
        fields.extend([
            ("iterations", self.iterations.to_string()),
            (
                "passwordLength",
                password.encode_utf16().count().to_string(),
            ),
            ("encryptedPassword", b64().encode(encrypted)),
        ]);
        Ok(fields
            .into_iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(","))
    }

    /// Decrypts a stored value, with the parameters stored in it.
    ///
    /// # Errors
    /// [`PasswordError::Malformed`], [`PasswordError::Unsupported`], or
    /// [`PasswordError::Decrypt`] (wrong secret, altered value, failed length check).
    pub fn decode(&self, encoded: &str) -> Result<String, PasswordError> {
        let params: BTreeMap<&str, &str> = encoded
            .split(',')
            .filter_map(|kv| kv.trim().split_once(':'))
            .collect();
        let field = |name: &'static str| -> Result<&str, PasswordError> {
            params
                .get(name)
                .copied()
                .ok_or(PasswordError::Malformed { field: name })
        };
        let number = |name: &'static str| -> Result<u32, PasswordError> {
            field(name)?
                .parse()
                .map_err(|_| PasswordError::Malformed { field: name })
        };
        let bytes = |name: &'static str| -> Result<Vec<u8>, PasswordError> {
            b64()
                .decode(field(name)?)
                .map_err(|_| PasswordError::Malformed { field: name })
        };
        let key_factory = params
            .get("keyFactoryAlgorithm")
            .copied()
            .unwrap_or(DEFAULT_KEY_FACTORY_ALGORITHM);
        let cipher = field("cipherAlgorithm")?;
        let iterations = number("iterations")?;
        if iterations > MAX_DECODE_ITERATIONS {
            return Err(PasswordError::TooManyIterations {
                iterations,
                max: MAX_DECODE_ITERATIONS,
            });
        }
        let key = self.derive_key(
            key_factory,
            &bytes("salt")?,
            iterations,
            number("keyLength")?,
        )?;
        let plain = decrypt(
            cipher,
            &key,
            &bytes("initializationVector")?,
            &bytes("encryptedPassword")?,
        )?;
        let password = String::from_utf8(plain).map_err(|_| PasswordError::Decrypt)?;
        let length = number("passwordLength")?;
        if password.encode_utf16().count() != length as usize {
            return Err(PasswordError::Decrypt);
        }
        Ok(password)
    }
}

fn unsupported(cipher: &str) -> PasswordError {
    PasswordError::Unsupported {
        algorithm: cipher.to_owned(),
    }
}

fn encrypt(cipher: &str, key: &[u8], iv: &[u8], plain: &[u8]) -> Result<Vec<u8>, PasswordError> {
    let bad_iv = || PasswordError::Malformed {
        field: "initializationVector",
    };
    match cipher {
        "AES/CBC/PKCS5Padding" => Ok(match key.len() {
            16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .encrypt_padded_vec_mut::<Pkcs7>(plain),
            24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .encrypt_padded_vec_mut::<Pkcs7>(plain),
            _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .encrypt_padded_vec_mut::<Pkcs7>(plain),
        }),
        "AES/GCM/NoPadding" => {
            if iv.len() != 12 {
                return Err(bad_iv());
            }
            let nonce = aes_gcm::Nonce::from_slice(iv);
            match key.len() {
                16 => aes_gcm::Aes128Gcm::new_from_slice(key)
                    .map_err(|_| unsupported(cipher))?
                    .encrypt(nonce, plain),
                32 => aes_gcm::Aes256Gcm::new_from_slice(key)
                    .map_err(|_| unsupported(cipher))?
                    .encrypt(nonce, plain),
                _ => return Err(unsupported("AES/GCM with a 192-bit key")),
            }
            .map_err(|_| PasswordError::Decrypt)
        }
        other => Err(unsupported(other)),
    }
}

fn decrypt(
    cipher: &str,
    key: &[u8],
    iv: &[u8],
    encrypted: &[u8],
) -> Result<Vec<u8>, PasswordError> {
    let bad_iv = || PasswordError::Malformed {
        field: "initializationVector",
    };
    match cipher {
        "AES/CBC/PKCS5Padding" => match key.len() {
            16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .decrypt_padded_vec_mut::<Pkcs7>(encrypted),
            24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .decrypt_padded_vec_mut::<Pkcs7>(encrypted),
            _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
                .map_err(|_| bad_iv())?
                .decrypt_padded_vec_mut::<Pkcs7>(encrypted),
        }
        .map_err(|_| PasswordError::Decrypt),
        "AES/GCM/NoPadding" => {
            if iv.len() != 12 {
                return Err(bad_iv());
            }
            let nonce = aes_gcm::Nonce::from_slice(iv);
            match key.len() {
                16 => aes_gcm::Aes128Gcm::new_from_slice(key)
                    .map_err(|_| unsupported(cipher))?
                    .decrypt(nonce, encrypted),
                32 => aes_gcm::Aes256Gcm::new_from_slice(key)
                    .map_err(|_| unsupported(cipher))?
                    .decrypt(nonce, encrypted),
                _ => return Err(unsupported("AES/GCM with a 192-bit key")),
            }
            .map_err(|_| PasswordError::Decrypt)
        }
        other => Err(unsupported(other)),
    }
}
