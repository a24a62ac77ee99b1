//! Decoding the key stores Kafka 3.9's `DefaultSslEngineFactory` reads, beyond an unencrypted
//! PEM key: a PEM private key encrypted with `ssl.key.password` (PKCS#8
//! `EncryptedPrivateKeyInfo`, PBES2 — what `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes).
//!
//! Kafka's rules (`PemStore.privateKey`): the single `… PRIVATE KEY` entry of the PEM text is
//! read as `EncryptedPrivateKeyInfo` when `ssl.key.password` is set and as a plain PKCS#8 key
//! otherwise; so an unencrypted key with a password and an encrypted key without one are both
//! refused, with "Invalid PEM keystore configs" (and "Failed to load PEM SSL keystore <path>"
//! for a key store file) as Kafka says it.

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use pkcs8::EncryptedPrivateKeyInfoRef;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Kafka's outer message for a bad PEM key store (`PemStore.createKeyStoreFromPem`).
pub const INVALID_PEM_KEYSTORE: &str = "Invalid PEM keystore configs";

/// The DER of every PEM entry whose label names a private key (`PRIVATE KEY`, `ENCRYPTED
/// PRIVATE KEY`, `RSA PRIVATE KEY`, … — Kafka's `PemParser("PRIVATE KEY")`), with its label.
/// Text outside the BEGIN/END markers is ignored; headers (`Proc-Type: …`) are skipped.
fn private_key_entries(pem: &str) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut entries = Vec::new();
    let mut lines = pem.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        if !label.contains("PRIVATE KEY") {
            continue;
        }
        let end = format!("-----END {label}-----");
        let mut base64 = String::new();
        let mut ended = false;
        for line in lines.by_ref() {
            let line = line.trim();
            if line == end {
                ended = true;
                break;
            }
            if line.contains(':') {
                continue; // an encapsulated header
            }
            base64.push_str(line);
        }
        if !ended {
            bail!("the {label} entry has no {end} line");
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(base64.as_bytes())
            .with_context(|| format!("the {label} entry is not valid base64"))?;
        entries.push((label.to_owned(), der));
    }
    Ok(entries)
}

/// The private key of PEM text `pem` from `what` (a config key, or a key store path),
/// decrypted with `password` (`ssl.key.password`) when one is given — as Kafka's `PemStore`.
///
/// # Errors
/// No key or more than one, an encrypted key without a password, an unencrypted key with one,
/// a wrong password or an encryption scheme krust lacks, bad PEM or DER (Kafka's outer message,
/// then what was wrong).
pub fn pem_private_key(
    pem: &[u8],
    password: Option<&str>,
    what: &str,
) -> anyhow::Result<PrivateKeyDer<'static>> {
    let Some(password) = password else {
        if String::from_utf8_lossy(pem).contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            bail!(
                "{INVALID_PEM_KEYSTORE}: Private key could not be loaded: {what} holds an ENCRYPTED PRIVATE KEY and ssl.key.password is not set"
            );
        }
        return krust_net::security::tls::private_key_from_pem(pem, what)
            .map_err(anyhow::Error::from);
    };
    let text = std::str::from_utf8(pem)
        .map_err(|_| anyhow!("{INVALID_PEM_KEYSTORE}: {what} is not PEM text"))?;
    let mut entries =
        private_key_entries(text).map_err(|e| anyhow!("{INVALID_PEM_KEYSTORE}: {what}: {e:#}"))?;
    if entries.is_empty() {
        bail!("{INVALID_PEM_KEYSTORE}: No matching PRIVATE KEY entries in PEM file {what}");
    }
    if entries.len() != 1 {
        bail!(
            "{INVALID_PEM_KEYSTORE}: Expected one private key, but found {} in {what}",
            entries.len()
        );
    }
    let (label, der) = entries.remove(0);
    let encrypted = EncryptedPrivateKeyInfoRef::try_from(der.as_slice()).map_err(|e| {
        if label == "ENCRYPTED PRIVATE KEY" {
            // PBES1 schemes (PKCS#12 `PBE-SHA1-3DES`, `openssl pkcs8 -topk8 -v1 …`) land here.
            anyhow!(
                "{INVALID_PEM_KEYSTORE}: the ENCRYPTED PRIVATE KEY of {what} uses an encryption krust cannot read (krust reads PBES2: openssl pkcs8 -topk8 -v2 aes-256-cbc): {e}"
            )
        } else {
            anyhow!(
                "{INVALID_PEM_KEYSTORE}: ssl.key.password is set, but the {label} of {what} is not an encrypted PKCS#8 key (ENCRYPTED PRIVATE KEY): {e}"
            )
        }
    })?;
    let document = encrypted.decrypt(password.as_bytes()).map_err(|e| {
        anyhow!(
            "{INVALID_PEM_KEYSTORE}: the private key of {what} could not be decrypted with ssl.key.password (a wrong password, or an encryption krust lacks): {e}"
        )
    })?;
    // The decrypted bytes must be a PrivateKeyInfo: a wrong password that happens to leave
    // valid padding yields garbage, caught here rather than by rustls.
    pkcs8::PrivateKeyInfoRef::try_from(document.as_bytes()).map_err(|e| {
        anyhow!(
            "{INVALID_PEM_KEYSTORE}: the private key of {what} could not be decrypted with ssl.key.password (a wrong password?): {e}"
        )
    })?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        document.as_bytes().to_vec(),
    )))
}

/// Kafka's message for a key or trust store file the JDK could not load
/// (`FileBasedStore.load`).
fn failed_to_load(path: &str, store_type: &str) -> String {
    format!("Failed to load SSL keystore {path} of type {store_type}")
}

/// A PKCS12 file decoded with `password` — Java's `KeyStore.load`: the MAC checked, the bags
/// decrypted (PBES2 AES, and the legacy PBES1 RC2/3DES of older `openssl pkcs12` files).
/// `trusted_only` keeps, as Java does, only certificates marked trusted (keytool's trust
/// entries) besides key entries.
fn load_pkcs12(bytes: &[u8], password: &str, path: &str) -> anyhow::Result<p12_keystore::KeyStore> {
    p12_keystore::KeyStore::from_pkcs12(bytes, password, p12_keystore::Pkcs12ImportPolicy::Strict)
        .map_err(|e| {
            let reason = match e {
                // Java's words for a MAC that does not verify.
                p12_keystore::error::Error::MacError(_) => {
                    "keystore password was incorrect".to_owned()
                }
                other => format!("not a PKCS12 store krust can read: {other}"),
            };
            anyhow!("{}: {reason}", failed_to_load(path, "PKCS12"))
        })
}

/// The certificate chain and private key of the PKCS12 key store `bytes` read from `path`
/// (`ssl.keystore.type=PKCS12`): the store's one key entry, opened with
/// `ssl.keystore.password`. `ssl.key.password`, when set, must be the store password: the
/// PKCS12 files of `keytool` and `openssl pkcs12 -export` protect the key with it, and the JDK
/// refuses another one too.
///
/// # Errors
/// A wrong password (Java's "keystore password was incorrect"), a file that is not PKCS12, no
/// key entry or more than one, a key password other than the store password.
pub fn pkcs12_key_store(
    bytes: &[u8],
    store_password: &str,
    key_password: Option<&str>,
    path: &str,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    if let Some(key_password) = key_password
        && key_password != store_password
    {
        bail!(
            "{}: ssl.key.password differs from ssl.keystore.password; krust reads PKCS12 key stores whose key is protected by the store password (as keytool and openssl pkcs12 -export write them)",
            failed_to_load(path, "PKCS12")
        );
    }
    let store = load_pkcs12(bytes, store_password, path)?;
    let chains: Vec<_> = store
        .entries()
        .filter_map(|(alias, entry)| match entry {
            p12_keystore::KeyStoreEntry::PrivateKeyChain(chain) => Some((alias, chain)),
            _ => None,
        })
        .collect();
    let (alias, chain) = match chains.as_slice() {
        [one] => *one,
        [] => bail!(
            "{}: no private key entry with its certificate",
            failed_to_load(path, "PKCS12")
        ),
        many => bail!(
            "{}: {} private key entries; krust takes a key store with one",
            failed_to_load(path, "PKCS12"),
            many.len()
        ),
    };
    if chain.certs().is_empty() {
        bail!(
            "{}: key entry {alias} has no certificate",
            failed_to_load(path, "PKCS12")
        );
    }
    let certs = chain
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec()));
    Ok((certs, key))
}

/// The trusted certificates of the PKCS12 trust store `bytes` read from `path`
/// (`ssl.truststore.type=PKCS12`, `ssl.truststore.password`): the entries marked trusted for
/// Java (what `keytool -importcert` writes; OpenSSL 3.2+'s `pkcs12 -jdktrust`).
///
/// # Errors
/// A wrong password, a file that is not PKCS12, no trusted certificate (an `openssl pkcs12
/// -export -nokeys` file without `-jdktrust`, which the JDK does not trust either).
pub fn pkcs12_trust_store(
    bytes: &[u8],
    password: &str,
    path: &str,
) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let store = load_pkcs12(bytes, password, path)?;
    let certs: Vec<_> = store
        .entries()
        .filter_map(|(_, entry)| match entry {
            p12_keystore::KeyStoreEntry::Certificate(cert) => {
                Some(CertificateDer::from(cert.as_der().to_vec()))
            }
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        bail!(
            "{}: no trusted certificate entry (make trust stores with keytool -importcert, or openssl pkcs12 -export -jdktrust anyExtendedKeyUsage)",
            failed_to_load(path, "PKCS12")
        );
    }
    Ok(certs)
}
