//! A listener's security settings from `server.properties`: Kafka 3.9's `ssl.*` keys, each
//! looked up as `listener.name.<listener lower-case>.<key>` first and `<key>` second
//! (`ChannelBuilders` / `ListenerName.configPrefix`), read into the typed
//! [`krust_net::security::TlsSettings`] (files read here, PEM decoded) and built into the
//! listener's [`TlsServer`].
//!
//! Key stores: `ssl.keystore.type=PEM` with `ssl.keystore.certificate.chain` +
//! `ssl.keystore.key` (inline PEM, KIP-651) or `ssl.keystore.location` (one PEM file holding
//! the key and the chain), the key encrypted (`ENCRYPTED PRIVATE KEY`) when
//! `ssl.key.password` is set; `ssl.keystore.type=PKCS12` with `ssl.keystore.location` and
//! `ssl.keystore.password`; `ssl.truststore.type=PEM` with `ssl.truststore.certificates` or
//! `ssl.truststore.location`, or `PKCS12` with `ssl.truststore.location` and
//! `ssl.truststore.password` (decoding in [`crate::server::key_stores`]). JKS stores are
//! refused with a message naming what krust takes.
//!
//! SASL (`SASL_PLAINTEXT`, `SASL_SSL`): [`listener_sasl`] (mechanisms, PLAIN users from the
//! listener's JAAS entry) and [`ImageScramCredentials`], the SCRAM credentials of the newest
//! image, kept current by [`ScramCredentialsPublisher`] on the node's loader.
//!
//! The node's own connections ([`client_security`]): to brokers on the inter-broker listener
//! (`sasl.mechanism.inter.broker.protocol`) and to controllers on the first of
//! `controller.listener.names` (`sasl.mechanism.controller.protocol`, [`controller_client`]),
//! as Kafka's `ChannelBuilders.clientChannelBuilder` with the listener's prefix: its trust store
//! checks the server, its key store (if any) is the client certificate, the
//! `username`/`password` of `listener.name.<l>.<mechanism>.sasl.jaas.config` authenticate
//! (Kafka's server JAAS context: an unprefixed `sasl.jaas.config` is ignored on a node).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context as _, bail};
use krust_metadata::image::scram::ScramImage;
use krust_metadata::image::{LoaderManifest, MetadataDelta, MetadataImage, MetadataPublisher};
use krust_net::security::sasl::SaslCredentials;
use krust_net::security::sasl::{
    CONNECTION_FAILED_AUTHENTICATION_DELAY_DEFAULT, SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT,
    SaslMechanism, SaslSettings, ScramCredential, ScramCredentialStore, ScramMechanism,
};
use krust_net::security::tls::certificates_from_pem;
use krust_net::security::{
    ClientSecurity, SslClientAuth, SslPrincipalMapper, TlsClient, TlsClientSettings, TlsProtocol,
    TlsServer, TlsSettings,
};

use crate::config::ServerConfig;
use crate::server::key_stores::{pem_private_key, pkcs12_key_store, pkcs12_trust_store};

/// Largest key or trust store file read (a bound on what a config can make us buffer).
const MAX_STORE_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where settings are read from: a node's `server.properties`, or a tool's `--command-config`
/// file.
pub trait Settings {
    /// The value of `key`, if set.
    fn setting(&self, key: &str) -> Option<&str>;
}

impl Settings for ServerConfig {
    fn setting(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl Settings for BTreeMap<String, String> {
    fn setting(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// One listener's view of the config: `listener.name.<l>.<key>` over `<key>` (a client's
/// settings have no listener: plain keys only).
pub struct ListenerConfig<'a> {
    config: &'a dyn Settings,
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

    /// A client's settings: plain keys.
    fn client(config: &'a dyn Settings) -> Self {
        ListenerConfig {
            config,
            prefix: String::new(),
        }
    }

    /// The listener-prefixed value if set, else the plain one.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'a str> {
        if !self.prefix.is_empty()
            && let Some(value) = self.config.setting(&format!("{}{key}", self.prefix))
        {
            return Some(value);
        }
        self.config.setting(key)
    }

    /// Whether the listener-prefixed key is set.
    #[must_use]
    pub fn has_prefixed(&self, key: &str) -> bool {
        !self.prefix.is_empty()
            && self
                .config
                .setting(&format!("{}{key}", self.prefix))
                .is_some()
    }
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
    let enabled_protocols = enabled_protocols(&l).with_context(|| format!("listener {name}"))?;
    let cipher_suites = l
        .get("ssl.cipher.suites")
        .map(crate::config::csv)
        .unwrap_or_default();
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

/// `ssl.enabled.protocols` of a listener (Kafka's default: both).
fn enabled_protocols(l: &ListenerConfig<'_>) -> anyhow::Result<Vec<TlsProtocol>> {
    let mut enabled_protocols = Vec::new();
    for p in crate::config::csv(l.get("ssl.enabled.protocols").unwrap_or("TLSv1.2,TLSv1.3")) {
        enabled_protocols.push(match p.as_str() {
            "TLSv1.2" => TlsProtocol::Tls12,
            "TLSv1.3" => TlsProtocol::Tls13,
            other => bail!(
                "ssl.enabled.protocols: {other} is not supported by krust (TLSv1.2 and TLSv1.3 are)"
            ),
        });
    }
    if enabled_protocols.is_empty() {
        bail!("ssl.enabled.protocols is empty");
    }
    Ok(enabled_protocols)
}

/// The client side of listener `name` whose security protocol is `protocol`, for this node's
/// own connections to it; `mechanism_key` names the SASL mechanism setting
/// (`sasl.mechanism.inter.broker.protocol` or `sasl.mechanism.controller.protocol`, Kafka's
/// default GSSAPI).
///
/// # Errors
/// No trust store for TLS (krust has no JVM default one), a key or trust store krust cannot
/// read, an `ssl.endpoint.identification.algorithm` other than `https` or empty, a mechanism
/// krust lacks, no JAAS entry or one without `username` and `password`.
pub fn client_security(
    config: &ServerConfig,
    name: &str,
    protocol: &str,
    mechanism_key: &str,
) -> anyhow::Result<ClientSecurity> {
    let l = ListenerConfig::new(config, name);
    let tls = client_tls(&l, Some(name), protocol)?;
    let sasl = match protocol {
        "SASL_PLAINTEXT" | "SASL_SSL" => {
            let mechanism_name = config.get(mechanism_key).map_or("GSSAPI", str::trim);
            let mechanism = supported_mechanism(mechanism_key, mechanism_name)?;
            let key = format!(
                "listener.name.{}.{}.sasl.jaas.config",
                name.to_lowercase(),
                mechanism_name.to_lowercase()
            );
            let Some(jaas) = config.get(&key) else {
                bail!(
                    "listener {name}: this node authenticates its own connections with {mechanism_name} ({mechanism_key}) and needs {key} with username=\"…\" password=\"…\"; krust reads no static JAAS file (and ignores an unprefixed sasl.jaas.config on a node, as Kafka does)"
                );
            };
            Some(jaas_login(mechanism, jaas, &key).with_context(|| {
                format!(
                    "this node authenticates with them on its own connections to listener {name}"
                )
            })?)
        }
        _ => None,
    };
    Ok(ClientSecurity { tls, sasl })
}

/// The mechanism `name` set by `key`, if krust has it.
fn supported_mechanism(key: &str, name: &str) -> anyhow::Result<SaslMechanism> {
    SaslMechanism::from_name(name).ok_or_else(|| {
        anyhow::anyhow!(
            "{key}={name} is not supported by krust (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are)"
        )
    })
}

/// The login of a client's JAAS entry `jaas` (setting `key`): its `username` and `password`.
fn jaas_login(
    mechanism: SaslMechanism,
    jaas: &str,
    key: &str,
) -> anyhow::Result<Arc<SaslCredentials>> {
    let (_module, mut options) = parse_jaas_config(jaas).with_context(|| key.to_owned())?;
    let (Some(username), Some(password)) = (options.remove("username"), options.remove("password"))
    else {
        bail!("{key}: no username and password options");
    };
    Ok(Arc::new(SaslCredentials {
        mechanism,
        username,
        password,
    }))
}

/// The TLS client of connections whose security protocol is `protocol` — to listener `name`
/// from this node, or (`None`) from an admin tool: `None` unless it is `SSL` or `SASL_SSL`.
fn client_tls(
    l: &ListenerConfig<'_>,
    name: Option<&str>,
    protocol: &str,
) -> anyhow::Result<Option<Arc<TlsClient>>> {
    Ok(match protocol {
        "SSL" | "SASL_SSL" => {
            let trusted_certificates = truststore(l)?;
            if trusted_certificates.is_empty() {
                match name {
                    Some(name) => bail!(
                        "listener {name}: this node's own {protocol} connections to it need a trust store for the server certificates (krust has no JVM default): set ssl.truststore.type=PEM with ssl.truststore.location or ssl.truststore.certificates, or PKCS12 with ssl.truststore.location and ssl.truststore.password (listener.name.{}.ssl.* or ssl.*)",
                        name.to_lowercase()
                    ),
                    None => bail!(
                        "security.protocol={protocol} needs a trust store for the server certificates (krust has no JVM default): set ssl.truststore.type=PEM with ssl.truststore.location or ssl.truststore.certificates, or PKCS12 with ssl.truststore.location and ssl.truststore.password"
                    ),
                }
            }
            let has_keystore = l.get("ssl.keystore.location").is_some()
                || l.get("ssl.keystore.key").is_some()
                || l.get("ssl.keystore.certificate.chain").is_some();
            let client_certificate = if has_keystore {
                Some(keystore(l)?)
            } else {
                None
            };
            let verify_hostname = match l
                .get("ssl.endpoint.identification.algorithm")
                .map_or("https", str::trim)
            {
                "" => false,
                a if a.eq_ignore_ascii_case("https") => true,
                other => bail!(
                    "ssl.endpoint.identification.algorithm: {other} is not supported by krust (https, or empty to skip the host name check)"
                ),
            };
            let client = TlsClient::new(TlsClientSettings {
                trusted_certificates,
                client_certificate,
                verify_hostname,
                enabled_protocols: enabled_protocols(l)?,
            })
            .with_context(|| match name {
                Some(name) => format!("TLS of this node's connections to listener {name}"),
                None => "TLS of the tool's connections".to_owned(),
            })?;
            Some(Arc::new(client))
        }
        _ => None,
    })
}

/// The security of an admin tool's connections, from its `--command-config` file as Kafka's
/// `AdminClientConfig` reads it: `security.protocol` (default PLAINTEXT), `sasl.mechanism`
/// (default GSSAPI) with `sasl.jaas.config`, `ssl.*` (PEM stores only).
///
/// # Errors
/// A `security.protocol` Kafka refuses (Kafka's message), a mechanism krust lacks, SASL without
/// a `sasl.jaas.config` holding `username` and `password` (krust reads no JAAS file), and what
/// [`client_security`] refuses for TLS.
pub fn admin_client_security(settings: &dyn Settings) -> anyhow::Result<ClientSecurity> {
    let l = ListenerConfig::client(settings);
    let protocol = settings
        .setting("security.protocol")
        .map_or("PLAINTEXT", |p| p.trim());
    let protocol = match protocol.to_uppercase().as_str() {
        "PLAINTEXT" => "PLAINTEXT",
        "SSL" => "SSL",
        "SASL_PLAINTEXT" => "SASL_PLAINTEXT",
        "SASL_SSL" => "SASL_SSL",
        // The order of Kafka's message (its validator holds the names in a hash set).
        _ => bail!(
            "Invalid value {protocol} for configuration security.protocol: String must be one of (case insensitive): SASL_SSL, PLAINTEXT, SSL, SASL_PLAINTEXT"
        ),
    };
    let tls = client_tls(&l, None, protocol)?;
    let sasl = match protocol {
        "SASL_PLAINTEXT" | "SASL_SSL" => {
            let mechanism_name = settings
                .setting("sasl.mechanism")
                .map_or("GSSAPI", |m| m.trim());
            if mechanism_name.is_empty() {
                // Kafka's `CommonClientConfigs.postValidateSaslMechanismConfig`.
                bail!(
                    "Invalid value null for configuration sasl.mechanism: When the security.protocol configuration enables SASL, mechanism must be non-null and non-empty string."
                );
            }
            let mechanism = supported_mechanism("sasl.mechanism", mechanism_name)?;
            let Some(jaas) = settings.setting("sasl.jaas.config") else {
                bail!(
                    "security.protocol={protocol} needs sasl.jaas.config with username=\"…\" password=\"…\" (krust reads no JAAS file)"
                );
            };
            Some(jaas_login(mechanism, jaas, "sasl.jaas.config")?)
        }
        _ => None,
    };
    Ok(ClientSecurity { tls, sasl })
}

/// The client side of the controller listener (the first of `controller.listener.names`, its
/// protocol from `listener.security.protocol.map`, `sasl.mechanism.controller.protocol`) and
/// that protocol's name.
///
/// # Errors
/// As [`client_security`]; a controller listener without a security protocol.
pub fn controller_client(config: &ServerConfig) -> anyhow::Result<(String, ClientSecurity)> {
    let Some(name) = config.controller_listener_names().into_iter().next() else {
        return Ok(("PLAINTEXT".to_owned(), ClientSecurity::default()));
    };
    let name = name.to_uppercase();
    let protocols = config.effective_listener_security_protocol_map()?;
    let Some(protocol) = protocols.get(&name) else {
        bail!("controller listener {name} has no entry in listener.security.protocol.map");
    };
    let security = client_security(
        config,
        &name,
        protocol,
        "sasl.mechanism.controller.protocol",
    )?;
    Ok((protocol.clone(), security))
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
        let password = l.get("ssl.keystore.password");
        let Some(location) = l.get("ssl.keystore.location") else {
            if password.is_some() {
                bail!("SSL key store is not specified, but key store password is specified.");
            }
            bail!(
                "SSL listener without a key store: set ssl.keystore.location (ssl.keystore.type PKCS12 or PEM), or ssl.keystore.type=PEM with ssl.keystore.certificate.chain and ssl.keystore.key"
            );
        };
        if !store_type.eq_ignore_ascii_case("PKCS12") {
            bail!(
                "ssl.keystore.type {store_type} is not supported by krust: use PKCS12 or PEM (convert a JKS store with keytool -importkeystore -deststoretype PKCS12)"
            );
        }
        let Some(password) = password else {
            bail!("SSL key store is specified, but key store password is not specified.");
        };
        let bytes = read_store(location, "ssl.keystore.location")?;
        return pkcs12_key_store(&bytes, password, l.get("ssl.key.password"), location);
    }
    if l.get("ssl.keystore.password").is_some() {
        bail!(
            "SSL key store password cannot be specified with PEM format, only key password may be specified."
        );
    }
    if inline_key.is_some() && l.get("ssl.keystore.location").is_some() {
        bail!("Both SSL key store location and separate private key are specified.");
    }
    let key_password = l.get("ssl.key.password");
    let (chain_pem, key_pem) = match (inline_chain, inline_key) {
        (Some(chain), Some(key)) => (chain, key),
        (None, None) => {
            let Some(location) = l.get("ssl.keystore.location") else {
                bail!(
                    "SSL listener without a key store: set ssl.keystore.location or ssl.keystore.certificate.chain and ssl.keystore.key"
                );
            };
            let bytes = read_store(location, "ssl.keystore.location")?;
            let chain = certificates_from_pem(&bytes, &format!("ssl.keystore.location {location}"))
                .with_context(|| format!("Failed to load PEM SSL keystore {location}"))?;
            let key = pem_private_key(
                &bytes,
                key_password,
                &format!("ssl.keystore.location {location}"),
            )
            .with_context(|| format!("Failed to load PEM SSL keystore {location}"))?;
            return Ok((chain, key));
        }
        (Some(_), None) => {
            bail!("SSL certificate chain is specified, but private key is not specified")
        }
        (None, Some(_)) => {
            bail!("SSL private key is specified, but certificate chain is not specified.")
        }
    };
    let chain = certificates_from_pem(chain_pem.as_bytes(), "ssl.keystore.certificate.chain")?;
    let key = pem_private_key(key_pem.as_bytes(), key_password, "ssl.keystore.key")?;
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
        let Some(location) = location else {
            bail!("ssl.truststore.location is not set"); // not reached: returned above
        };
        if !store_type.eq_ignore_ascii_case("PKCS12") {
            bail!(
                "ssl.truststore.type {store_type} is not supported by krust: use PKCS12 or PEM (convert a JKS store with keytool -importkeystore -deststoretype PKCS12)"
            );
        }
        let Some(password) = l.get("ssl.truststore.password") else {
            bail!(
                "ssl.truststore.location {location}: a PKCS12 trust store needs ssl.truststore.password in krust (Kafka reads one without it, skipping the integrity check; krust does not)"
            );
        };
        let bytes = read_store(location, "ssl.truststore.location")?;
        return pkcs12_trust_store(&bytes, password, location);
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

/// The options of a one-module JAAS configuration (`sasl.jaas.config`):
/// `<LoginModule> <flag> key="value" …;`. Values are double-quoted (with `\` escapes) or bare
/// words.
///
/// # Errors
/// Kafka's "Invalid JAAS config" family of messages for malformed text or more than one
/// login module.
pub fn parse_jaas_config(text: &str) -> anyhow::Result<(String, BTreeMap<String, String>)> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(escaped) => value.push(escaped),
                        None => bail!("Invalid JAAS config: unterminated quoted value"),
                    },
                    Some(other) => value.push(other),
                    None => bail!("Invalid JAAS config: unterminated quoted value"),
                }
            }
            tokens.push(JaasToken::Quoted(value));
        } else if c == '=' || c == ';' {
            chars.next();
            tokens.push(JaasToken::Punct(c));
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '=' || c == ';' || c == '"' {
                    break;
                }
                word.push(c);
                chars.next();
            }
            tokens.push(JaasToken::Word(word));
        }
    }
    let mut tokens = tokens.into_iter();
    let Some(JaasToken::Word(module)) = tokens.next() else {
        bail!("Invalid JAAS config: expected a login module name");
    };
    match tokens.next() {
        Some(JaasToken::Word(flag))
            if ["required", "requisite", "sufficient", "optional"]
                .contains(&flag.to_lowercase().as_str()) => {}
        _ => bail!(
            "Invalid JAAS config: Invalid control flag; login module {module} needs required, requisite, sufficient or optional"
        ),
    }
    let mut options = BTreeMap::new();
    loop {
        match tokens.next() {
            Some(JaasToken::Punct(';')) => break,
            Some(JaasToken::Word(key)) => {
                if !matches!(tokens.next(), Some(JaasToken::Punct('='))) {
                    bail!("Invalid JAAS config: expected = after option {key}");
                }
                let value = match tokens.next() {
                    Some(JaasToken::Quoted(v) | JaasToken::Word(v)) => v,
                    _ => bail!("Invalid JAAS config: option {key} has no value"),
                };
                options.insert(key, value);
            }
            _ => bail!("Invalid JAAS config: Expected ';' at the end of the login module {module}"),
        }
    }
    if tokens.next().is_some() {
        bail!("JAAS config property contains more than one login module: {text}");
    }
    Ok((module, options))
}

enum JaasToken {
    Word(String),
    Quoted(String),
    Punct(char),
}

/// The SCRAM credentials of the newest metadata image, for the SASL listeners: a
/// [`MetadataPublisher`] on the node's loader keeps them current.
#[derive(Debug, Default)]
pub struct ImageScramCredentials {
    current: RwLock<Arc<ScramImage>>,
}

impl ScramCredentialStore for ImageScramCredentials {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        let code = match mechanism {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        };
        let image = self
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        image
            .credentials
            .get(&(code, user.to_owned()))
            .map(|c| ScramCredential {
                salt: c.salt.clone(),
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
                iterations: c.iterations,
            })
    }
}

/// The loader side of [`ImageScramCredentials`].
pub struct ScramCredentialsPublisher(pub Arc<ImageScramCredentials>);

impl MetadataPublisher for ScramCredentialsPublisher {
    fn name(&self) -> &str {
        "ScramCredentialsPublisher"
    }

    fn on_metadata_update(
        &mut self,
        _delta: &MetadataDelta,
        image: &MetadataImage,
        _manifest: &LoaderManifest,
    ) {
        *self
            .0
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = image.scram.clone();
    }
}

/// The SASL of listener `name` (`SASL_PLAINTEXT` / `SASL_SSL`): `sasl.enabled.mechanisms`
/// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), PLAIN's users from
/// `listener.name.<l>.plain.sasl.jaas.config` (`user_<name>="<password>"`; Kafka ignores an
/// unprefixed `sasl.jaas.config` on brokers and krust has no static JAAS file), SCRAM from the
/// image, `sasl.server.max.receive.size`, `connection.failed.authentication.delay.ms`.
///
/// # Errors
/// A mechanism krust lacks (GSSAPI, OAUTHBEARER), PLAIN without its JAAS entry, bad JAAS.
pub fn listener_sasl(
    config: &ServerConfig,
    name: &str,
    scram: &Arc<ImageScramCredentials>,
) -> anyhow::Result<Arc<SaslSettings>> {
    let l = ListenerConfig::new(config, name);
    let mut enabled_mechanisms = Vec::new();
    for mechanism in crate::config::csv(l.get("sasl.enabled.mechanisms").unwrap_or("GSSAPI")) {
        let Some(m) = SaslMechanism::from_name(&mechanism) else {
            bail!(
                "listener {name}: SASL mechanism {mechanism} is not supported by krust (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are); set sasl.enabled.mechanisms"
            );
        };
        enabled_mechanisms.push(m);
    }
    if enabled_mechanisms.is_empty() {
        bail!("listener {name}: sasl.enabled.mechanisms is empty");
    }
    let mut plain_users = BTreeMap::new();
    if enabled_mechanisms.contains(&SaslMechanism::Plain) {
        let key = format!(
            "listener.name.{}.plain.sasl.jaas.config",
            name.to_lowercase()
        );
        let Some(jaas) = config.get(&key) else {
            bail!(
                "listener {name}: SASL mechanism PLAIN needs {key} (org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>=\"<password>\" …;); krust reads no static JAAS file"
            );
        };
        let (_module, options) = parse_jaas_config(jaas).with_context(|| key.clone())?;
        for (option, value) in options {
            if let Some(user) = option.strip_prefix("user_") {
                plain_users.insert(user.to_owned(), value);
            }
        }
    }
    let number = |key: &str, default: u64| -> anyhow::Result<u64> {
        match l.get(key) {
            Some(v) => v
                .trim()
                .parse::<u64>()
                .with_context(|| format!("Invalid value {v} for configuration {key}")),
            None => Ok(default),
        }
    };
    let max_receive_size = usize::try_from(number(
        "sasl.server.max.receive.size",
        SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT as u64,
    )?)
    .unwrap_or(usize::MAX);
    let delay = number(
        "connection.failed.authentication.delay.ms",
        u64::try_from(CONNECTION_FAILED_AUTHENTICATION_DELAY_DEFAULT.as_millis()).unwrap_or(100),
    )?;
    let scram_credentials: Arc<dyn ScramCredentialStore> = scram.clone();
    Ok(Arc::new(SaslSettings {
        enabled_mechanisms,
        plain_users,
        scram_credentials: Some(scram_credentials),
        max_receive_size,
        failed_authentication_delay: Duration::from_millis(delay),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ServerConfig {
        ServerConfig::parse(text, Path::new("server.properties")).expect("parses")
    }

    /// The node's own login to a SASL listener: the listener-and-mechanism JAAS entry's
    /// `username`/`password`; what is missing or unsupported is refused with the key to set.
    fn admin(text: &str) -> anyhow::Result<ClientSecurity> {
        admin_client_security(&config(text))
    }

    #[test]
    fn admin_client_security_reads_a_command_config_as_kafka_does() {
        let plain = admin("").expect("no settings: PLAINTEXT");
        assert_eq!(plain.protocol_name(), "PLAINTEXT");
        let sasl = admin(
            "security.protocol=sasl_plaintext\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";\n",
        )
        .expect("SASL_PLAINTEXT, any case");
        assert_eq!(sasl.protocol_name(), "SASL_PLAINTEXT");
        let refused = |text: &str| format!("{:#}", admin(text).expect_err(text));
        assert_eq!(
            refused("security.protocol=TLS\n"),
            "Invalid value TLS for configuration security.protocol: String must be one of (case insensitive): SASL_SSL, PLAINTEXT, SSL, SASL_PLAINTEXT"
        );
        assert_eq!(
            refused("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=\n"),
            "Invalid value null for configuration sasl.mechanism: When the security.protocol configuration enables SASL, mechanism must be non-null and non-empty string."
        );
        assert!(
            refused("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n")
                .contains("needs sasl.jaas.config")
        );
        assert!(refused("security.protocol=SSL\n").contains("needs a trust store"));
        assert!(
            refused("security.protocol=SASL_PLAINTEXT\n").contains("GSSAPI is not supported"),
            "Kafka's default mechanism, which krust lacks"
        );
    }

    #[test]
    fn client_security_reads_the_listener_jaas_entry_and_refuses_gaps() {
        let jaas = r#"listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";"#;
        let ok = config(&format!(
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n{jaas}\n"
        ));
        let security = client_security(
            &ok,
            "INTERNAL",
            "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol",
        )
        .expect("valid");
        assert!(security.tls.is_none());
        let sasl = security.sasl.expect("SASL");
        assert_eq!(
            (
                sasl.mechanism,
                sasl.username.as_str(),
                sasl.password.as_str()
            ),
            (SaslMechanism::Scram(ScramMechanism::Sha512), "broker", "pw")
        );
        assert_eq!(
            client_security(
                &ok,
                "INTERNAL",
                "PLAINTEXT",
                "sasl.mechanism.inter.broker.protocol"
            )
            .expect("plaintext"),
            ClientSecurity::default()
        );
        let cases = [
            (
                format!("{jaas}\n"),
                "SASL_PLAINTEXT",
                "sasl.mechanism.inter.broker.protocol=GSSAPI is not supported by krust",
                "Kafka's default mechanism, GSSAPI",
            ),
            (
                "sasl.mechanism.inter.broker.protocol=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b\";\n".to_owned(),
                "SASL_PLAINTEXT",
                "needs listener.name.internal.plain.sasl.jaas.config",
                "an unprefixed sasl.jaas.config, which Kafka ignores on a node",
            ),
            (
                "sasl.mechanism.inter.broker.protocol=PLAIN\nlistener.name.internal.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";\n".to_owned(),
                "SASL_PLAINTEXT",
                "no username and password options",
                "a JAAS entry with server users only",
            ),
            (
                format!("sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n{jaas}\n"),
                "SASL_SSL",
                "need a trust store for the server certificates",
                "TLS without a trust store",
            ),
        ];
        for (text, protocol, wanted, reason) in cases {
            let err = client_security(
                &config(&text),
                "INTERNAL",
                protocol,
                "sasl.mechanism.inter.broker.protocol",
            )
            .expect_err(reason);
            let message = format!("{err:#}");
            assert!(message.contains(wanted), "case {reason}: {message}");
        }
    }

    /// One test PKI for the store tests (openssl and keytool run once).
    fn pki() -> &'static krust_testkit::TestPki {
        static PKI: std::sync::OnceLock<(tempfile::TempDir, krust_testkit::TestPki)> =
            std::sync::OnceLock::new();
        &PKI.get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let pki = krust_testkit::TestPki::generate(dir.path().join("pki")).expect("test PKI");
            (dir, pki)
        })
        .1
    }

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn keystore_of(pairs: &[(&str, &str)]) -> anyhow::Result<Keystore> {
        keystore(&ListenerConfig::client(&settings(pairs)))
    }

    fn truststore_of(
        pairs: &[(&str, &str)],
    ) -> anyhow::Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
        truststore(&ListenerConfig::client(&settings(pairs)))
    }

    fn pem_der(path: &Path) -> Vec<u8> {
        let text = std::fs::read(path).expect("PEM file");
        certificates_from_pem(&text, "test").expect("certificate")[0].to_vec()
    }

    fn text(path: &Path) -> String {
        std::fs::read_to_string(path).expect("readable")
    }

    fn refused(result: anyhow::Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", result.expect_err("refused"))
    }

    const PW: &str = krust_testkit::TEST_STORE_PASSWORD;

    #[test]
    fn encrypted_pem_keys_are_read_with_the_key_password_as_kafka_does() {
        let pki = pki();
        let plain_key = krust_net::security::tls::private_key_from_pem(
            text(&pki.server_key).as_bytes(),
            "server.key",
        )
        .expect("plain key");
        let file = pki.server_keystore_encrypted.display().to_string();
        let (chain, key) = keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", &file),
            ("ssl.key.password", PW),
        ])
        .expect("encrypted PEM key store file");
        assert_eq!(chain.len(), 2);
        assert_eq!(chain[0].to_vec(), pem_der(&pki.server_cert));
        assert_eq!(key.secret_der(), plain_key.secret_der(), "decrypted key");
        let chain_pem = format!("{}{}", text(&pki.server_cert), text(&pki.ca_cert));
        let encrypted_key = text(&pki.server_key_encrypted);
        let (_, key) = keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &chain_pem),
            ("ssl.keystore.key", &encrypted_key),
            ("ssl.key.password", PW),
        ])
        .expect("inline encrypted key");
        assert_eq!(key.secret_der(), plain_key.secret_der());

        // Kafka's refusals: an encrypted key without the password, a plain key with one, a
        // wrong password; a file adds "Failed to load PEM SSL keystore <path>".
        let no_password = refused(keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", &file),
        ]));
        assert!(
            no_password.starts_with(&format!("Failed to load PEM SSL keystore {file}: Invalid PEM keystore configs: Private key could not be loaded")),
            "{no_password}"
        );
        let inline_no_password = refused(keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &chain_pem),
            ("ssl.keystore.key", &encrypted_key),
        ]));
        assert!(
            inline_no_password
                .starts_with("Invalid PEM keystore configs: Private key could not be loaded"),
            "{inline_no_password}"
        );
        let plain_file = pki.server_keystore.display().to_string();
        let plain_with_password = refused(keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", &plain_file),
            ("ssl.key.password", PW),
        ]));
        assert!(
            plain_with_password.starts_with(&format!(
                "Failed to load PEM SSL keystore {plain_file}: Invalid PEM keystore configs: ssl.key.password is set, but the PRIVATE KEY"
            )),
            "{plain_with_password}"
        );
        let wrong = refused(keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", &file),
            ("ssl.key.password", "not-the-password"),
        ]));
        assert!(
            wrong
                .contains("Invalid PEM keystore configs: the private key of ssl.keystore.location")
                && wrong.contains("could not be decrypted with ssl.key.password"),
            "{wrong}"
        );
        // PBES1 (what Kafka on JDK 17 reads): refused, naming what krust reads.
        let pbes1 = std::process::Command::new("openssl")
            .args(["pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in"])
            .arg(&pki.server_key)
            .args(["-passout", &format!("pass:{PW}")])
            .output()
            .expect("openssl runs");
        assert!(pbes1.status.success());
        let pbes1 = String::from_utf8(pbes1.stdout).expect("PEM");
        let message = refused(keystore_of(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &chain_pem),
            ("ssl.keystore.key", &pbes1),
            ("ssl.key.password", PW),
        ]));
        assert!(
            message.contains("uses an encryption krust cannot read (krust reads PBES2"),
            "{message}"
        );
        // Corrupt bytes are errors, never panics: a damaged body, a cut-off entry, two keys.
        let mut lines: Vec<String> = encrypted_key.lines().map(str::to_owned).collect();
        lines[2] = "A".repeat(lines[2].len());
        let damaged = lines.join("\n");
        let cut = encrypted_key[..encrypted_key.len() / 2].to_owned();
        let two = format!("{encrypted_key}{encrypted_key}");
        for (what, key) in [("damaged", damaged), ("cut", cut), ("two keys", two)] {
            let message = refused(keystore_of(&[
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.certificate.chain", &chain_pem),
                ("ssl.keystore.key", &key),
                ("ssl.key.password", PW),
            ]));
            assert!(
                message.starts_with("Invalid PEM keystore configs: "),
                "{what}: {message}"
            );
        }
    }

    #[test]
    fn pkcs12_key_and_trust_stores_from_openssl_and_keytool() {
        let pki = pki();
        let p12 = pki.server_keystore_p12.display().to_string();
        let (chain, key) = keystore_of(&[
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", &p12),
            ("ssl.keystore.password", PW),
        ])
        .expect("PKCS12 key store");
        assert_eq!(chain.len(), 2, "server certificate and CA");
        assert_eq!(chain[0].to_vec(), pem_der(&pki.server_cert));
        assert_eq!(chain[1].to_vec(), pem_der(&pki.ca_cert));
        // The key fits the certificate: rustls builds a server from them.
        krust_net::security::TlsServer::new(TlsSettings {
            certificate_chain: chain,
            private_key: key,
            trusted_certificates: Vec::new(),
            client_auth: SslClientAuth::None,
            enabled_protocols: vec![TlsProtocol::Tls13],
            cipher_suites: Vec::new(),
            principal_mapper: SslPrincipalMapper::new(None).expect("default rules"),
        })
        .expect("TLS server from the PKCS12 key");
        keystore_of(&[
            ("ssl.keystore.type", "pkcs12"),
            ("ssl.keystore.location", &p12),
            ("ssl.keystore.password", PW),
            ("ssl.key.password", PW),
        ])
        .expect("a key password equal to the store password");

        let trust = pki.truststore_p12.display().to_string();
        let trusted = truststore_of(&[
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", &trust),
            ("ssl.truststore.password", PW),
        ])
        .expect("keytool PKCS12 trust store");
        assert_eq!(
            trusted.iter().map(|c| c.to_vec()).collect::<Vec<_>>(),
            vec![pem_der(&pki.ca_cert)]
        );

        // Legacy files (RC2-40 certificates, 3DES key, SHA-1 MAC: openssl pkcs12 -legacy).
        let legacy = pki.dir.join("legacy.p12");
        let status = std::process::Command::new("openssl")
            .args(["pkcs12", "-export", "-legacy", "-inkey"])
            .arg(&pki.server_key)
            .arg("-in")
            .arg(&pki.server_cert)
            .args(["-passout", &format!("pass:{PW}"), "-out"])
            .arg(&legacy)
            .status()
            .expect("openssl runs");
        assert!(status.success());
        let (chain, _) = keystore_of(&[
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", &legacy.display().to_string()),
            ("ssl.keystore.password", PW),
        ])
        .expect("legacy PKCS12 key store");
        assert_eq!(chain[0].to_vec(), pem_der(&pki.server_cert));

        // Refusals: a wrong password (Java's words), no password (Kafka's), a key password
        // other than the store's, a corrupt file, openssl's untrusted trust entries, JKS.
        let wrong = refused(keystore_of(&[
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", &p12),
            ("ssl.keystore.password", "wrong"),
        ]));
        assert_eq!(
            wrong,
            format!(
                "Failed to load SSL keystore {p12} of type PKCS12: keystore password was incorrect"
            )
        );
        let wrong_trust = refused(truststore_of(&[
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", &trust),
            ("ssl.truststore.password", "wrong"),
        ]));
        assert_eq!(
            wrong_trust,
            format!(
                "Failed to load SSL keystore {trust} of type PKCS12: keystore password was incorrect"
            )
        );
        assert_eq!(
            refused(keystore_of(&[
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", &p12),
            ])),
            "SSL key store is specified, but key store password is not specified."
        );
        assert!(
            refused(keystore_of(&[
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", &p12),
                ("ssl.keystore.password", PW),
                ("ssl.key.password", "other"),
            ]))
            .contains("ssl.key.password differs from ssl.keystore.password")
        );
        let bytes = std::fs::read(&pki.server_keystore_p12).expect("p12");
        let corrupt_dir = tempfile::tempdir().expect("temp dir");
        let mut flipped = bytes.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0xff;
        for (what, content) in [
            ("truncated", bytes[..bytes.len() / 2].to_vec()),
            ("flipped", flipped),
            ("PEM", text(&pki.server_keystore).into_bytes()),
            ("empty", Vec::new()),
        ] {
            let path = corrupt_dir.path().join(what);
            std::fs::write(&path, content).expect("write");
            let path = path.display().to_string();
            let message = refused(keystore_of(&[
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", &path),
                ("ssl.keystore.password", PW),
            ]));
            assert!(
                message.starts_with(&format!(
                    "Failed to load SSL keystore {path} of type PKCS12: "
                )),
                "{what}: {message}"
            );
        }
        let openssl_trust = pki.dir.join("openssl-trust.p12");
        let status = std::process::Command::new("openssl")
            .args(["pkcs12", "-export", "-nokeys", "-in"])
            .arg(&pki.ca_cert)
            .args(["-passout", &format!("pass:{PW}"), "-out"])
            .arg(&openssl_trust)
            .status()
            .expect("openssl runs");
        assert!(status.success());
        assert!(
            refused(truststore_of(&[
                ("ssl.truststore.type", "PKCS12"),
                (
                    "ssl.truststore.location",
                    &openssl_trust.display().to_string()
                ),
                ("ssl.truststore.password", PW),
            ]))
            .contains("no trusted certificate entry")
        );
        assert!(
            refused(keystore_of(&[
                ("ssl.keystore.type", "JKS"),
                ("ssl.keystore.location", &p12),
                ("ssl.keystore.password", PW),
            ]))
            .starts_with("ssl.keystore.type JKS is not supported by krust: use PKCS12 or PEM")
        );
        assert!(
            refused(truststore_of(&[
                ("ssl.truststore.location", &trust),
                ("ssl.truststore.password", PW),
            ]))
            .starts_with("ssl.truststore.type JKS is not supported by krust"),
            "Kafka's default type, JKS"
        );
    }

    #[test]
    fn jaas_options_as_kafka_documents_them() {
        let (module, options) = parse_jaas_config(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="al\"ice";"#,
        )
        .expect("valid");
        assert_eq!(
            module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(
            options.get("user_alice").map(String::as_str),
            Some("al\"ice")
        );
        assert_eq!(options.len(), 4);
        for bad in [
            "",
            "Module",
            "Module maybe;",
            "Module required a=\"b\"",
            "Module required a;",
            "Module required a=\"b;",
            "M required; N required;",
        ] {
            assert!(parse_jaas_config(bad).is_err(), "{bad}");
        }
    }
}
