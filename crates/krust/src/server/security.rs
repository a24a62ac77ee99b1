//! A listener's security settings from `server.properties`: Kafka 3.9's `ssl.*` keys, each
//! looked up as `listener.name.<listener lower-case>.<key>` first and `<key>` second
//! (`ChannelBuilders` / `ListenerName.configPrefix`), read into the typed
//! [`krust_net::security::TlsSettings`] (files read here, PEM decoded) and built into the
//! listener's [`TlsServer`].
//!
//! Key stores: `ssl.keystore.type=PEM` with `ssl.keystore.certificate.chain` +
//! `ssl.keystore.key` (inline PEM, KIP-651) or `ssl.keystore.location` (one PEM file holding
//! the key and the chain); `ssl.truststore.type=PEM` with `ssl.truststore.certificates` or
//! `ssl.truststore.location`. JKS and PKCS12 stores and encrypted keys are refused with a
//! message naming what krust takes.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use krust_net::security::tls::{certificates_from_pem, private_key_from_pem};
use krust_net::security::{SslClientAuth, SslPrincipalMapper, TlsProtocol, TlsServer, TlsSettings};

use crate::config::ServerConfig;

/// Largest key or trust store file read (a bound on what a config can make us buffer).
const MAX_STORE_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One listener's view of the config: `listener.name.<l>.<key>` over `<key>`.
pub struct ListenerConfig<'a> {
    config: &'a ServerConfig,
    prefix: String,
}

impl<'a> ListenerConfig<'a> {
    /// The settings of listener `name` (any case).
    #[must_use]
    pub fn new(config: &'a ServerConfig, name: &str) -> Self {
        ListenerConfig {
            config,
            prefix: format!("listener.name.{}.", name.to_lowercase()),
        }
    }

    /// The listener-prefixed value if set, else the plain one.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.config
            .get(&format!("{}{key}", self.prefix))
            .or_else(|| self.config.get(key))
    }

    /// Whether the listener-prefixed key is set.
    #[must_use]
    pub fn has_prefixed(&self, key: &str) -> bool {
        self.config.get(&format!("{}{key}", self.prefix)).is_some()
    }
}

/// A Kafka list value: comma-separated, trimmed, empty entries dropped.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn read_store(path: &str, key: &str) -> anyhow::Result<Vec<u8>> {
    let path = Path::new(path);
    let len = std::fs::metadata(path)
        .with_context(|| format!("{key}: reading {}", path.display()))?
        .len();
    if len > MAX_STORE_FILE_BYTES {
        bail!(
            "{key}: {} is {len} bytes, more than a key store may be ({MAX_STORE_FILE_BYTES})",
            path.display()
        );
    }
    std::fs::read(path).with_context(|| format!("{key}: reading {}", path.display()))
}

/// The TLS of listener `name` whose security protocol is `protocol` (`SSL` or `SASL_SSL`).
///
/// # Errors
/// A missing or unreadable key store, a store type or cipher suite krust does not support,
/// an invalid value (Kafka's message where Kafka has one).
pub fn listener_tls(
    config: &ServerConfig,
    name: &str,
    protocol: &str,
) -> anyhow::Result<Arc<TlsServer>> {
    let l = ListenerConfig::new(config, name);
    let (certificate_chain, private_key) = keystore(&l)?;
    let trusted_certificates = truststore(&l)?;
    // Kafka applies the broker-wide `ssl.client.auth` to SSL listeners only; a SASL_SSL
    // listener asks for certificates only when its prefixed key says so.
    let client_auth = if protocol == "SSL" || l.has_prefixed("ssl.client.auth") {
        l.get("ssl.client.auth").unwrap_or("none")
    } else {
        "none"
    };
    let client_auth = match client_auth.trim().to_lowercase().as_str() {
        "none" => SslClientAuth::None,
        "requested" => SslClientAuth::Requested,
        "required" => SslClientAuth::Required,
        other => bail!(
            "Invalid value {other} for configuration ssl.client.auth: String must be one of: required, requested, none"
        ),
    };
    let mut enabled_protocols = Vec::new();
    for p in list(l.get("ssl.enabled.protocols").unwrap_or("TLSv1.2,TLSv1.3")) {
        enabled_protocols.push(match p.as_str() {
            "TLSv1.2" => TlsProtocol::Tls12,
            "TLSv1.3" => TlsProtocol::Tls13,
            other => bail!(
                "ssl.enabled.protocols: {other} is not supported by krust (TLSv1.2 and TLSv1.3 are)"
            ),
        });
    }
    if enabled_protocols.is_empty() {
        bail!("ssl.enabled.protocols of listener {name} is empty");
    }
    let cipher_suites = l.get("ssl.cipher.suites").map(list).unwrap_or_default();
    let principal_mapper = SslPrincipalMapper::new(l.get("ssl.principal.mapping.rules"))
        .context("ssl.principal.mapping.rules")?;
    let tls = TlsServer::new(TlsSettings {
        certificate_chain,
        private_key,
        trusted_certificates,
        client_auth,
        enabled_protocols,
        cipher_suites,
        principal_mapper,
    })
    .with_context(|| format!("TLS of listener {name}"))?;
    Ok(Arc::new(tls))
}

type Keystore = (
    Vec<rustls_pki_types::CertificateDer<'static>>,
    rustls_pki_types::PrivateKeyDer<'static>,
);

fn keystore(l: &ListenerConfig<'_>) -> anyhow::Result<Keystore> {
    let store_type = l.get("ssl.keystore.type").unwrap_or("JKS").trim();
    let inline_key = l.get("ssl.keystore.key");
    let inline_chain = l.get("ssl.keystore.certificate.chain");
    if !store_type.eq_ignore_ascii_case("PEM") {
        if inline_key.is_some() || inline_chain.is_some() {
            bail!(
                "SSL private key can be specified only for PEM, but key store type is {store_type}."
            );
        }
        if l.get("ssl.keystore.location").is_none() {
            bail!(
                "SSL listener without a key store: set ssl.keystore.type=PEM and ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key)"
            );
        }
        bail!(
            "ssl.keystore.type {store_type} is not supported by krust: use PEM (ssl.keystore.location, or ssl.keystore.certificate.chain with ssl.keystore.key)"
        );
    }
    if l.get("ssl.keystore.password").is_some() {
        bail!(
            "SSL key store password cannot be specified with PEM format, only key password may be specified."
        );
    }
    if inline_key.is_some() && l.get("ssl.keystore.location").is_some() {
        bail!("Both SSL key store location and separate private key are specified.");
    }
    if l.get("ssl.key.password").is_some() {
        bail!(
            "ssl.key.password: encrypted private keys are not supported by krust; give an unencrypted PKCS#8 key (BEGIN PRIVATE KEY)"
        );
    }
    let (chain_pem, key_pem, chain_what, key_what) = match (inline_chain, inline_key) {
        (Some(chain), Some(key)) => (
            chain.as_bytes().to_vec(),
            key.as_bytes().to_vec(),
            "ssl.keystore.certificate.chain".to_owned(),
            "ssl.keystore.key".to_owned(),
        ),
        (None, None) => {
            let Some(location) = l.get("ssl.keystore.location") else {
                bail!(
                    "SSL listener without a key store: set ssl.keystore.location or ssl.keystore.certificate.chain and ssl.keystore.key"
                );
            };
            let bytes = read_store(location, "ssl.keystore.location")?;
            let what = format!("ssl.keystore.location {location}");
            (bytes.clone(), bytes, what.clone(), what)
        }
        (Some(_), None) => {
            bail!("SSL certificate chain is specified, but private key is not specified")
        }
        (None, Some(_)) => {
            bail!("SSL private key is specified, but certificate chain is not specified.")
        }
    };
    let chain = certificates_from_pem(&chain_pem, &chain_what)?;
    let key = private_key_from_pem(&key_pem, &key_what)?;
    Ok((chain, key))
}

fn truststore(
    l: &ListenerConfig<'_>,
) -> anyhow::Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
    let inline = l.get("ssl.truststore.certificates");
    let location = l.get("ssl.truststore.location");
    if inline.is_none() && location.is_none() {
        return Ok(Vec::new());
    }
    let store_type = l.get("ssl.truststore.type").unwrap_or("JKS").trim();
    if !store_type.eq_ignore_ascii_case("PEM") {
        if inline.is_some() {
            bail!(
                "SSL trust store certs can be specified only for PEM, but trust store type is {store_type}."
            );
        }
        bail!(
            "ssl.truststore.type {store_type} is not supported by krust: use PEM (ssl.truststore.location or ssl.truststore.certificates)"
        );
    }
    if l.get("ssl.truststore.password").is_some() {
        bail!("SSL trust store password cannot be specified for PEM format.");
    }
    if inline.is_some() && location.is_some() {
        bail!("Both SSL trust store location and separate trust certificates are specified.");
    }
    Ok(match (inline, location) {
        (Some(pem), _) => certificates_from_pem(pem.as_bytes(), "ssl.truststore.certificates")?,
        (None, Some(location)) => {
            let bytes = read_store(location, "ssl.truststore.location")?;
            certificates_from_pem(&bytes, &format!("ssl.truststore.location {location}"))?
        }
        (None, None) => Vec::new(),
    })
}
