//! TLS on a listener with rustls: Kafka 3.9's `ssl.*` settings of one listener
//! ([`TlsSettings`], typed; the binary reads the keys, `listener.name.<l>.ssl.*` over
//! `ssl.*`) built into a [`TlsServer`].
//!
//! What maps to what: `ssl.keystore.*` → the certificate chain and PKCS#8 key the server
//! presents; `ssl.truststore.*` → the roots client certificates must chain to;
//! `ssl.client.auth` → no client certificate asked (`none`), asked but optional
//! (`requested`), or required — a client without a trusted certificate fails the handshake;
//! `ssl.enabled.protocols` → TLS 1.2 / 1.3; `ssl.cipher.suites` → rustls suites by their IANA
//! (= JSSE) names, e.g. `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` or `TLS_AES_128_GCM_SHA256`;
//! `ssl.principal.mapping.rules` → [`SslPrincipalMapper`]. rustls has no CBC, RSA key
//! exchange or TLS < 1.2: naming one of those is refused when the listener is built, with the
//! list of what is available.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

use super::dn::subject_rfc2253;
use super::{KafkaPrincipal, SslPrincipalMapper};

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslClientAuth {
    /// `none`: no client certificate is asked for.
    #[default]
    None,
    /// `requested`: asked for; a client may send none (then it is `User:ANONYMOUS`).
    Requested,
    /// `required`: the handshake fails without a trusted client certificate.
    Required,
}

/// A protocol of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProtocol {
    /// `TLSv1.2`.
    Tls12,
    /// `TLSv1.3`.
    Tls13,
}

/// One listener's TLS settings, with the stores already decoded to DER.
#[derive(Debug)]
pub struct TlsSettings {
    /// The server's certificate chain, leaf first (`ssl.keystore.*`).
    pub certificate_chain: Vec<CertificateDer<'static>>,
    /// The server's private key (`ssl.keystore.key` / the keystore's key).
    pub private_key: PrivateKeyDer<'static>,
    /// Trusted roots for client certificates (`ssl.truststore.*`); may be empty when
    /// `client_auth` is `None`.
    pub trusted_certificates: Vec<CertificateDer<'static>>,
    /// `ssl.client.auth`.
    pub client_auth: SslClientAuth,
    /// `ssl.enabled.protocols` (Kafka's default: both).
    pub enabled_protocols: Vec<TlsProtocol>,
    /// `ssl.cipher.suites`: IANA/JSSE names; empty means every suite rustls offers.
    pub cipher_suites: Vec<String>,
    /// `ssl.principal.mapping.rules`.
    pub principal_mapper: SslPrincipalMapper,
}

/// Why TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// No PEM block of the wanted kind.
    #[error("{what}: no PEM {kind} found")]
    NoPem {
        /// The config the bytes came from.
        what: String,
        /// `CERTIFICATE` or `PRIVATE KEY`.
        kind: &'static str,
    },
    /// PEM that does not decode.
    #[error("{what}: invalid PEM: {reason}")]
    BadPem {
        /// The config the bytes came from.
        what: String,
        /// The decoder's message.
        reason: String,
    },
    /// An encrypted private key: the crates krust uses cannot decrypt PKCS#8.
    #[error(
        "{what}: encrypted private keys (ENCRYPTED PRIVATE KEY with ssl.key.password) are not supported by krust; give an unencrypted PKCS#8 key (BEGIN PRIVATE KEY)"
    )]
    EncryptedKey {
        /// The config the bytes came from.
        what: String,
    },
    /// A cipher suite rustls does not implement.
    #[error(
        "ssl.cipher.suites: unsupported cipher suite {name}; krust (rustls) supports {supported}"
    )]
    UnknownCipherSuite {
        /// The name given.
        name: String,
        /// What may be named, comma-separated.
        supported: String,
    },
    /// The chosen suites and protocols leave nothing to negotiate.
    #[error("ssl.cipher.suites {suites} has no suite for ssl.enabled.protocols {protocols}")]
    NoSuiteForProtocols {
        /// The suites.
        suites: String,
        /// The protocols.
        protocols: String,
    },
    /// `ssl.client.auth` asks for certificates but there is nothing to check them against.
    #[error(
        "ssl.client.auth={client_auth} needs trusted certificates: set ssl.truststore.certificates or ssl.truststore.location"
    )]
    NoTruststore {
        /// `requested` or `required`.
        client_auth: &'static str,
    },
    /// A node's own TLS connections need trusted certificates to check the server's chain.
    #[error(
        "TLS client: no trusted certificates: set ssl.truststore.certificates or ssl.truststore.location (ssl.truststore.type=PEM)"
    )]
    NoClientTruststore,
    /// rustls refused the configuration (key not matching the certificate, …).
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// Every certificate in PEM bytes (text outside the markers is ignored).
///
/// # Errors
///
/// [`TlsConfigError`] for bad PEM or none at all; `what` names the config in the message.
pub fn certificates_from_pem(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::BadPem {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoPem {
            what: what.to_owned(),
            kind: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The PKCS#8 private key in PEM bytes (Kafka's PEM stores take PKCS#8 only).
///
/// # Errors
///
/// [`TlsConfigError`] for bad PEM, no key, or an encrypted key.
pub fn private_key_from_pem(
    pem: &[u8],
    what: &str,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    if String::from_utf8_lossy(pem).contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return Err(TlsConfigError::EncryptedKey {
            what: what.to_owned(),
        });
    }
    match PrivatePkcs8KeyDer::from_pem_slice(pem) {
        Ok(key) => Ok(PrivateKeyDer::Pkcs8(key)),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => Err(TlsConfigError::NoPem {
            what: what.to_owned(),
            kind: "PRIVATE KEY",
        }),
        Err(e) => Err(TlsConfigError::BadPem {
            what: what.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// The JSSE/IANA name of a rustls suite (rustls writes TLS 1.3 suites `TLS13_…`).
fn jsse_name(suite: &SupportedCipherSuite) -> String {
    let name = suite.suite().as_str().unwrap_or("unknown");
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name.to_owned(),
    }
}

/// A listener's TLS: the rustls acceptor and how a client certificate becomes a principal.
pub struct TlsServer {
    acceptor: TlsAcceptor,
    principal_mapper: SslPrincipalMapper,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("principal_mapper", &self.principal_mapper)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Builds the listener's TLS from its settings.
    ///
    /// # Errors
    ///
    /// [`TlsConfigError`] for suites rustls lacks, a `requested`/`required` client auth
    /// without trusted certificates, or a key that does not fit the certificate.
    pub fn new(settings: TlsSettings) -> Result<TlsServer, TlsConfigError> {
        let base = rustls::crypto::ring::default_provider();
        let suites = if settings.cipher_suites.is_empty() {
            base.cipher_suites.clone()
        } else {
            let mut chosen = Vec::new();
            for name in &settings.cipher_suites {
                let Some(suite) = base.cipher_suites.iter().find(|s| jsse_name(s) == *name) else {
                    return Err(TlsConfigError::UnknownCipherSuite {
                        name: name.clone(),
                        supported: base
                            .cipher_suites
                            .iter()
                            .map(jsse_name)
                            .collect::<Vec<_>>()
                            .join(","),
                    });
                };
                chosen.push(*suite);
            }
            chosen
        };
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
        if settings.enabled_protocols.contains(&TlsProtocol::Tls13) {
            versions.push(&rustls::version::TLS13);
        }
        if settings.enabled_protocols.contains(&TlsProtocol::Tls12) {
            versions.push(&rustls::version::TLS12);
        }
        let usable = suites.iter().any(|s| match s {
            SupportedCipherSuite::Tls13(_) => {
                settings.enabled_protocols.contains(&TlsProtocol::Tls13)
            }
            SupportedCipherSuite::Tls12(_) => {
                settings.enabled_protocols.contains(&TlsProtocol::Tls12)
            }
        });
        if !usable {
            return Err(TlsConfigError::NoSuiteForProtocols {
                suites: settings.cipher_suites.join(","),
                protocols: settings
                    .enabled_protocols
                    .iter()
                    .map(|p| match p {
                        TlsProtocol::Tls12 => "TLSv1.2",
                        TlsProtocol::Tls13 => "TLSv1.3",
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            });
        }
        let provider = Arc::new(CryptoProvider {
            cipher_suites: suites,
            ..base
        });
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| TlsConfigError::Rustls(e.to_string()))?;
        let builder = match settings.client_auth {
            SslClientAuth::None => builder.with_no_client_auth(),
            auth @ (SslClientAuth::Requested | SslClientAuth::Required) => {
                if settings.trusted_certificates.is_empty() {
                    return Err(TlsConfigError::NoTruststore {
                        client_auth: if auth == SslClientAuth::Required {
                            "required"
                        } else {
                            "requested"
                        },
                    });
                }
                let mut roots = RootCertStore::empty();
                for cert in settings.trusted_certificates {
                    roots
                        .add(cert)
                        .map_err(|e| TlsConfigError::Rustls(format!("truststore: {e}")))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == SslClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsConfigError::Rustls(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(settings.certificate_chain, settings.private_key)
            .map_err(|e| TlsConfigError::Rustls(format!("keystore: {e}")))?;
        Ok(TlsServer {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            principal_mapper: settings.principal_mapper,
        })
    }

    /// The acceptor for incoming connections.
    #[must_use]
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// The principal of a TLS connection: `User:<mapped subject DN>` of the verified client
    /// certificate, `User:ANONYMOUS` without one.
    ///
    /// # Errors
    ///
    /// A message when the certificate's subject cannot be read or matches no mapping rule
    /// (the connection's authentication fails).
    pub fn principal(
        &self,
        peer_certificates: Option<&[CertificateDer<'_>]>,
    ) -> Result<KafkaPrincipal, String> {
        let Some(leaf) = peer_certificates.and_then(|c| c.first()) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let dn = subject_rfc2253(leaf).map_err(|e| e.to_string())?;
        let name = self.principal_mapper.name(&dn).map_err(|e| e.to_string())?;
        Ok(KafkaPrincipal::user(name))
    }
}
