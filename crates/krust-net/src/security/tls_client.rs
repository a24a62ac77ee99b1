//! TLS on a node's own connections (inter-broker, broker → controller, controller ↔
//! controller) with rustls: the client half of Kafka 3.9's `SslFactory` in client mode, from
//! the same listener `ssl.*` settings the server side reads ([`TlsClientSettings`], typed).
//!
//! What maps to what: `ssl.truststore.*` → the roots the server's chain must lead to (the
//! connection fails without them); `ssl.keystore.*` → the certificate presented when the server
//! asks for one (`ssl.client.auth=required|requested`), so the node's principal on an `SSL`
//! listener is its certificate's mapped subject; `ssl.endpoint.identification.algorithm` →
//! `https` (Kafka's default) checks the server certificate's names against the host connected
//! to, empty does not (the chain is always checked); `ssl.enabled.protocols` → TLS 1.2 / 1.3.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::TlsConnector;

use super::TlsProtocol;
use super::tls::TlsConfigError;

/// The client side of one listener's TLS, with the stores already decoded to DER.
#[derive(Debug)]
pub struct TlsClientSettings {
    /// Trusted roots for the server's certificate (`ssl.truststore.*`); must not be empty.
    pub trusted_certificates: Vec<CertificateDer<'static>>,
    /// The certificate chain and key presented when the server asks (`ssl.keystore.*`), if
    /// any.
    pub client_certificate: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    /// `ssl.endpoint.identification.algorithm=https` (the default): the server certificate
    /// must name the host connected to. `false` for an empty value.
    pub verify_hostname: bool,
    /// `ssl.enabled.protocols`.
    pub enabled_protocols: Vec<TlsProtocol>,
}

/// A client's TLS: the rustls connector built from [`TlsClientSettings`].
pub struct TlsClient {
    connector: TlsConnector,
    verify_hostname: bool,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("verify_hostname", &self.verify_hostname)
            .finish_non_exhaustive()
    }
}

impl TlsClient {
    /// Builds the connector.
    ///
    /// # Errors
    ///
    /// [`TlsConfigError::NoClientTruststore`] without trusted certificates, or what rustls
    /// refuses (a key not matching its certificate, no usable protocol).
    pub fn new(settings: TlsClientSettings) -> Result<TlsClient, TlsConfigError> {
        if settings.trusted_certificates.is_empty() {
            return Err(TlsConfigError::NoClientTruststore);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in settings.trusted_certificates {
            roots
                .add(cert)
                .map_err(|e| TlsConfigError::Rustls(format!("truststore: {e}")))?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsConfigError::Rustls(format!("truststore: {e}")))?;
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
        if settings.enabled_protocols.contains(&TlsProtocol::Tls13) {
            versions.push(&rustls::version::TLS13);
        }
        if settings.enabled_protocols.contains(&TlsProtocol::Tls12) {
            versions.push(&rustls::version::TLS12);
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| TlsConfigError::Rustls(e.to_string()))?;
        let builder = if settings.verify_hostname {
            builder.with_webpki_verifier(webpki)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnlyVerifier(webpki)))
        };
        let config = match settings.client_certificate {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsConfigError::Rustls(format!("keystore: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            verify_hostname: settings.verify_hostname,
        })
    }

    /// The connector for outgoing connections.
    #[must_use]
    pub fn connector(&self) -> &TlsConnector {
        &self.connector
    }

    /// The name the handshake checks for `host` (a DNS name or an IP address).
    ///
    /// # Errors
    ///
    /// A message for a host that is neither.
    pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).map_err(|e| format!("invalid host {host}: {e}"))
    }
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain is verified as usual, only a
/// name mismatch is let through (webpki checks the chain before the names, so reaching the
/// name error means the chain was good).
#[derive(Debug)]
struct ChainOnlyVerifier(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
