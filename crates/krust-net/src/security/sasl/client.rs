//! The client side of SASL, as Kafka 3.9's `SaslClientAuthenticator` and its mechanisms'
//! `SaslClient`s run it for a broker's or controller's own connections: sans-IO state
//! machines fed the server's tokens ([`SaslClient`]); `crate::client` carries the tokens in
//! SaslHandshake v1 + SaslAuthenticate.
//!
//! - PLAIN (RFC 4616, `PlainSaslClient`): one token `NUL username NUL password` (no authzid);
//!   the server answers an empty token.
//! - SCRAM-SHA-256/512 (RFC 5802 / RFC 7677, `ScramSaslClient`): client-first
//!   `n,,n=<saslname>,r=<nonce>` (`,` → `=2C`, `=` → `=3D` in the name; a 130-bit base-36
//!   nonce), the server-first's nonce must extend ours and its iterations be at least 4096,
//!   client-final `c=biws,r=<nonce>,p=<proof>`, and the server-final's signature is checked
//!   (an `e=` error is reported with Kafka's message).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::SaslMechanism;
use super::plain::constant_time_eq;
use super::scram::{MIN_ITERATIONS, ScramMechanism, random_nonce};

/// What a broker or controller authenticates with on its own connections: the mechanism
/// (`sasl.mechanism.inter.broker.protocol` / `sasl.mechanism.controller.protocol`) and the
/// `username`/`password` options of the listener's JAAS entry for it.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The JAAS `username`.
    pub username: String,
    /// The JAAS `password`.
    pub password: String,
}

impl fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A client-side protocol failure: the server's token does not fit the exchange. The message
/// is Kafka's `SaslException` text where Kafka has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslClientFailure {
    /// What went wrong.
    pub message: String,
}

impl SaslClientFailure {
    fn new(message: impl Into<String>) -> Self {
        SaslClientFailure {
            message: message.into(),
        }
    }
}

enum ScramState {
    /// Waiting for server-first.
    ServerFirst {
        client_nonce: String,
    },
    /// Waiting for server-final.
    ServerFinal {
        server_signature: Vec<u8>,
    },
    Complete,
}

/// One client exchange of a mechanism.
pub struct SaslClient {
    credentials: SaslCredentials,
    /// SCRAM's state; `None` for PLAIN.
    scram: Option<ScramState>,
    complete: bool,
}

impl fmt::Debug for SaslClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslClient")
            .field("credentials", &self.credentials)
            .field("complete", &self.complete)
            .finish_non_exhaustive()
    }
}

/// RFC 5802 `saslname`: `=` → `=3D`, `,` → `=2C` (Kafka's `ScramFormatter.saslName`).
fn sasl_name(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

impl SaslClient {
    /// A new exchange with a fresh random SCRAM nonce.
    #[must_use]
    pub fn new(credentials: SaslCredentials) -> SaslClient {
        Self::with_nonce(credentials, random_nonce())
    }

    /// A new exchange with the given SCRAM client nonce (tests replay RFC 7677's).
    #[must_use]
    pub fn with_nonce(credentials: SaslCredentials, client_nonce: String) -> SaslClient {
        let scram = match credentials.mechanism {
            SaslMechanism::Plain => None,
            SaslMechanism::Scram(_) => Some(ScramState::ServerFirst { client_nonce }),
        };
        SaslClient {
            credentials,
            scram,
            complete: false,
        }
    }

    /// The mechanism's name for SaslHandshake.
    #[must_use]
    pub fn mechanism(&self) -> SaslMechanism {
        self.credentials.mechanism
    }

    /// Whether the exchange has completed (the server's last token was checked).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The first token the client sends.
    #[must_use]
    pub fn initial_token(&self) -> Vec<u8> {
        match &self.scram {
            None => format!(
                "\u{0}{}\u{0}{}",
                self.credentials.username, self.credentials.password
            )
            .into_bytes(),
            Some(ScramState::ServerFirst { client_nonce }) => format!(
                "n,,n={},r={client_nonce}",
                sasl_name(&self.credentials.username)
            )
            .into_bytes(),
            Some(_) => Vec::new(),
        }
    }

    /// Feeds the server's answer to our last token: `Some(token)` to send next, `None` when
    /// the exchange is complete.
    ///
    /// # Errors
    ///
    /// [`SaslClientFailure`] for a server token that does not fit (bad nonce, too few
    /// iterations, an `e=` error, a server signature that does not verify, anything after the
    /// end).
    pub fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, SaslClientFailure> {
        let SaslMechanism::Scram(mechanism) = self.credentials.mechanism else {
            if self.complete {
                return Err(SaslClientFailure::new(
                    "Unexpected challenge in Sasl client state COMPLETE",
                ));
            }
            // PLAIN: the server's (empty) answer ends the exchange.
            self.complete = true;
            return Ok(None);
        };
        let text = std::str::from_utf8(server_token)
            .map_err(|_| SaslClientFailure::new("Invalid SCRAM server message: not UTF-8"))?;
        match self.scram.take() {
            Some(ScramState::ServerFirst { client_nonce }) => {
                let (token, server_signature) =
                    self.client_final(mechanism, &client_nonce, text)?;
                self.scram = Some(ScramState::ServerFinal { server_signature });
                Ok(Some(token))
            }
            Some(ScramState::ServerFinal { server_signature }) => {
                self.scram = Some(ScramState::Complete);
                let signature = parse_server_final(mechanism, text)?;
                if !constant_time_eq(&signature, &server_signature) {
                    return Err(SaslClientFailure::new(
                        "Sasl server signature verification failed",
                    ));
                }
                self.complete = true;
                Ok(None)
            }
            Some(ScramState::Complete) | None => {
                self.scram = Some(ScramState::Complete);
                Err(SaslClientFailure::new(
                    "Unexpected challenge in Sasl client state COMPLETE",
                ))
            }
        }
    }

    /// Client-final for `server_first`, and the server signature server-final must carry.
    fn client_final(
        &self,
        mechanism: ScramMechanism,
        client_nonce: &str,
        server_first: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), SaslClientFailure> {
        let invalid = || {
            SaslClientFailure::new(format!(
                "Invalid SCRAM server first message format: {server_first}"
            ))
        };
        let rest = match server_first.strip_prefix("m=") {
            Some(m) => m.split_once(',').ok_or_else(invalid)?.1,
            None => server_first,
        };
        let rest = rest.strip_prefix("r=").ok_or_else(invalid)?;
        let (nonce, rest) = rest.split_once(",s=").ok_or_else(invalid)?;
        let (salt, rest) = rest.split_once(",i=").ok_or_else(invalid)?;
        let iterations = rest.split(',').next().ok_or_else(invalid)?;
        if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(invalid());
        }
        let salt = BASE64.decode(salt).map_err(|_| invalid())?;
        let iterations: i32 = iterations.parse().map_err(|_| invalid())?;
        if !nonce.starts_with(client_nonce) {
            return Err(SaslClientFailure::new(
                "Invalid server nonce: does not start with client nonce",
            ));
        }
        if iterations < MIN_ITERATIONS {
            return Err(SaslClientFailure::new(format!(
                "Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS} for {}",
                mechanism.name()
            )));
        }
        let salted = mechanism.salted_password(&self.credentials.password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let server_key = mechanism.hmac(&salted, b"Server Key");
        // The GS2 header "n,," in base64.
        let without_proof = format!("c=biws,r={nonce}");
        let client_first_bare = format!(
            "n={},r={client_nonce}",
            sasl_name(&self.credentials.username)
        );
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_signature = mechanism.hmac(&server_key, auth_message.as_bytes());
        Ok((
            format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
            server_signature,
        ))
    }
}

/// The signature of server-final `v=<base64>`, or Kafka's failure for `e=<error>`.
fn parse_server_final(mechanism: ScramMechanism, text: &str) -> Result<Vec<u8>, SaslClientFailure> {
    if let Some(error) = text.strip_prefix("e=") {
        return Err(SaslClientFailure::new(format!(
            "Sasl authentication using {} failed with error: {}",
            mechanism.name(),
            error.split(',').next().unwrap_or(error)
        )));
    }
    text.strip_prefix("v=")
        .and_then(|v| BASE64.decode(v.split(',').next().unwrap_or(v)).ok())
        .ok_or_else(|| {
            SaslClientFailure::new(format!("Invalid SCRAM server final message format: {text}"))
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::scram::{ScramCredential, ScramCredentialStore, ScramServer};
    use super::super::{SaslMechanism, Step};
    use super::*;

    fn credentials(mechanism: SaslMechanism, username: &str, password: &str) -> SaslCredentials {
        SaslCredentials {
            mechanism,
            username: username.to_owned(),
            password: password.to_owned(),
        }
    }

    /// RFC 7677 section 3: the client's messages for user `user`, password `pencil`, client
    /// nonce `rOprNGfwEbeRWgbNEkqO` and the RFC's server-first, byte for byte, and the RFC's
    /// server-final accepted.
    #[test]
    fn scram_sha_256_client_matches_rfc7677() {
        let mut client = SaslClient::with_nonce(
            credentials(
                SaslMechanism::Scram(ScramMechanism::Sha256),
                "user",
                "pencil",
            ),
            "rOprNGfwEbeRWgbNEkqO".to_owned(),
        );
        assert_eq!(client.initial_token(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = client
            .step(server_first)
            .expect("server-first")
            .expect("token");
        assert_eq!(
            String::from_utf8(client_final).expect("utf8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert!(!client.is_complete());
        let done = client
            .step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect("server-final");
        assert_eq!(done, None);
        assert!(client.is_complete());
        assert!(client.step(b"v=x").is_err(), "nothing after the end");
    }

    #[test]
    fn scram_client_refuses_what_kafkas_refuses() {
        let new = || {
            SaslClient::with_nonce(
                credentials(
                    SaslMechanism::Scram(ScramMechanism::Sha256),
                    "user",
                    "pencil",
                ),
                "abc".to_owned(),
            )
        };
        let cases: [(&[u8], &str, &str); 4] = [
            (
                b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "Invalid server nonce: does not start with client nonce",
                "a nonce that does not extend ours",
            ),
            (
                b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095",
                "Requested iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256",
                "too few iterations",
            ),
            (
                b"r=abc123,s=!!,i=4096",
                "Invalid SCRAM server first message format: r=abc123,s=!!,i=4096",
                "a salt that is not base64",
            ),
            (
                b"junk",
                "Invalid SCRAM server first message format: junk",
                "junk",
            ),
        ];
        for (server_first, message, reason) in cases {
            let err = new().step(server_first).expect_err(reason);
            assert_eq!(err.message, message, "case {reason}");
        }
        let mut client = new();
        client
            .step(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .expect("server-first");
        assert_eq!(
            client.step(b"e=invalid-proof").expect_err("e=").message,
            "Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof"
        );
        let mut client = new();
        client
            .step(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .expect("server-first");
        assert_eq!(
            client
                .step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .expect_err("another exchange's signature")
                .message,
            "Sasl server signature verification failed"
        );
    }

    struct One(String, ScramCredential);

    impl ScramCredentialStore for One {
        fn credential(&self, user: &str, _: ScramMechanism) -> Option<ScramCredential> {
            (user == self.0).then(|| self.1.clone())
        }
    }

    /// Our client against our server (SCRAM-SHA-512, a name with `,` and `=`): the server
    /// authenticates the user, the client verifies the server; a wrong password fails on the
    /// server with Kafka's generic message.
    #[test]
    fn scram_sha_512_client_and_server_agree() {
        let user = "bro,ker=1";
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha512, "secret", b"salty", 4096);
        let store: Arc<dyn ScramCredentialStore> = Arc::new(One(user.to_owned(), credential));
        for (password, ok) in [("secret", true), ("wrong", false)] {
            let mut server = ScramServer::new(ScramMechanism::Sha512, Some(store.clone()));
            let mut client = SaslClient::new(credentials(
                SaslMechanism::Scram(ScramMechanism::Sha512),
                user,
                password,
            ));
            let Ok(Step::Continue(server_first)) = server.step(&client.initial_token()) else {
                panic!("server-first");
            };
            let client_final = client
                .step(&server_first)
                .expect("client-final")
                .expect("token");
            match server.step(&client_final) {
                Ok(Step::Done { token, user: who }) => {
                    assert!(ok, "a wrong password was accepted");
                    assert_eq!(who, user);
                    assert_eq!(client.step(&token).expect("server-final"), None);
                    assert!(client.is_complete());
                }
                Ok(Step::Continue(_)) => panic!("SCRAM ends after client-final"),
                Err(e) => {
                    assert!(!ok, "refused: {}", e.message);
                    assert_eq!(
                        e.message,
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
                    );
                }
            }
        }
    }

    #[test]
    fn plain_sends_one_token_and_ends_on_the_answer() {
        let mut client = SaslClient::new(credentials(SaslMechanism::Plain, "admin", "pw"));
        assert_eq!(client.initial_token(), b"\0admin\0pw");
        let users = std::collections::BTreeMap::from([("admin".to_owned(), "pw".to_owned())]);
        assert_eq!(
            super::super::plain::authenticate(&client.initial_token(), &users),
            Ok("admin".to_owned())
        );
        assert_eq!(client.step(b""), Ok(None));
        assert!(client.is_complete());
        assert!(client.step(b"").is_err());
        let debug = format!("{:?}", credentials(SaslMechanism::Plain, "admin", "pw"));
        assert!(
            !debug.contains("pw\""),
            "the password stays out of logs: {debug}"
        );
    }
}
