//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 / RFC 7677) on the server side, as Kafka 3.9's
//! `ScramSaslServer`: client-first `n,[a=<authzid>],n=<name>,r=<nonce>[,<ext>]` (GS2 flag `n`
//! only; `=2C`/`=3D` escapes in the name), server-first `r=<client nonce><server nonce>,s=<salt>,
//! i=<iterations>`, client-final `c=…,r=…,p=<proof>` (the nonce must end with the server-first
//! nonce; the channel binding is not checked, as in Kafka), server-final `v=<signature>`.
//! Iterations under 4096 are refused. Every failure but a differing authorization id is the
//! generic one, so a client cannot tell an unknown user from a wrong password.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::{Digest, Sha256, Sha512};

use super::plain::constant_time_eq;
use super::{AuthenticationFailed, SaslMechanism, Step};

/// The fewest iterations Kafka accepts when authenticating.
pub const MIN_ITERATIONS: i32 = 4096;

/// The SCRAM hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256` (wire code 1).
    Sha256,
    /// `SCRAM-SHA-512` (wire code 2).
    Sha512,
}

impl ScramMechanism {
    /// Kafka's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The `Mechanism` int8 of `UserScramCredentialRecord`.
    #[must_use]
    pub fn from_wire(code: i8) -> Option<Self> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// `HMAC(key, message)` with the mechanism's hash.
    pub(crate) fn hmac(self, key: &[u8], message: &[u8]) -> Vec<u8> {
        // `new_from_slice` takes keys of any length for HMAC.
        match self {
            ScramMechanism::Sha256 => match Hmac::<Sha256>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(message);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
            ScramMechanism::Sha512 => match Hmac::<Sha512>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(message);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
        }
    }

    /// RFC 5802 `Hi(password, salt, i)`: PBKDF2 with the mechanism's HMAC, one block (the
    /// password's UTF-8 bytes, no SASLprep, as Kafka's `ScramFormatter`).
    pub(crate) fn salted_password(self, password: &str, salt: &[u8], iterations: i32) -> Vec<u8> {
        let rounds = u32::try_from(iterations.max(1)).unwrap_or(1);
        match self {
            ScramMechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, rounds, &mut out);
                out.to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, rounds, &mut out);
                out.to_vec()
            }
        }
    }

    /// `H(data)`.
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

/// A user's stored SCRAM credential (`UserScramCredentialRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: i32,
}

impl ScramCredential {
    /// The credential of `password` (what `kafka-configs --add-config 'SCRAM-SHA-512=[…]'` and
    /// `kafka-storage format --add-scram` store).
    #[must_use]
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: i32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password, salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, b"Server Key"),
            iterations,
        }
    }
}

/// Where a listener finds SCRAM credentials (the broker: its metadata image).
pub trait ScramCredentialStore: Send + Sync {
    /// The credential of `user` for `mechanism`, if any.
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
}

enum State {
    ClientFirst,
    ClientFinal {
        user: String,
        credential: ScramCredential,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Finished,
}

/// One SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    credentials: Option<Arc<dyn ScramCredentialStore>>,
    state: State,
}

/// A name or nonce made of Kafka's allowed characters.
fn printable(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// `saslname` → user name (`=2C` → `,`, `=3D` → `=`); `None` when malformed.
fn username(saslname: &str) -> Option<String> {
    if saslname.is_empty() || !saslname.is_ascii() || saslname.contains(',') {
        return None;
    }
    let mut out = String::new();
    let mut rest = saslname;
    while let Some(i) = rest.find('=') {
        out.push_str(rest.get(..i)?);
        let escape = rest.get(i..i + 3)?;
        out.push(match escape {
            "=2C" => ',',
            "=3D" => '=',
            _ => return None,
        });
        rest = rest.get(i + 3..)?;
    }
    out.push_str(rest);
    Some(out)
}

impl ScramServer {
    /// A new exchange.
    #[must_use]
    pub fn new(
        mechanism: ScramMechanism,
        credentials: Option<Arc<dyn ScramCredentialStore>>,
    ) -> ScramServer {
        ScramServer {
            mechanism,
            credentials,
            state: State::ClientFirst,
        }
    }

    fn generic(&self) -> AuthenticationFailed {
        AuthenticationFailed {
            message: format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                SaslMechanism::Scram(self.mechanism)
            ),
        }
    }

    /// Feeds one client message.
    ///
    /// # Errors
    ///
    /// [`AuthenticationFailed`] for a malformed message, an unknown user, too few
    /// iterations, a wrong nonce or proof, or a message after the end.
    pub fn step(&mut self, token: &[u8]) -> Result<Step, AuthenticationFailed> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        let text = std::str::from_utf8(token).map_err(|_| self.generic())?;
        match state {
            State::ClientFirst => self.client_first(text),
            State::ClientFinal {
                user,
                credential,
                client_first_bare,
                server_first,
                nonce,
            } => {
                let (channel, client_nonce, proof) =
                    parse_client_final(text).ok_or_else(|| self.generic())?;
                if !client_nonce.ends_with(&nonce) {
                    return Err(self.generic());
                }
                let without_proof = format!("c={channel},r={client_nonce}");
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let proof = BASE64.decode(proof).map_err(|_| self.generic())?;
                let signature = self
                    .mechanism
                    .hmac(&credential.stored_key, auth_message.as_bytes());
                if proof.len() != signature.len() {
                    return Err(self.generic());
                }
                let client_key: Vec<u8> =
                    signature.iter().zip(&proof).map(|(a, b)| a ^ b).collect();
                let computed = self.mechanism.hash(&client_key);
                if !constant_time_eq(&computed, &credential.stored_key) {
                    return Err(self.generic());
                }
                let server_signature = self
                    .mechanism
                    .hmac(&credential.server_key, auth_message.as_bytes());
                Ok(Step::Done {
                    token: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
                    user,
                })
            }
            State::Finished => Err(self.generic()),
        }
    }

    fn client_first(&mut self, text: &str) -> Result<Step, AuthenticationFailed> {
        let (authzid, saslname, client_nonce, extensions) =
            parse_client_first(text).ok_or_else(|| self.generic())?;
        let user = username(saslname).ok_or_else(|| self.generic())?;
        let credential = self
            .credentials
            .as_ref()
            .and_then(|c| c.credential(&user, self.mechanism))
            .ok_or_else(|| self.generic())?;
        if !authzid.is_empty() && authzid != user {
            return Err(AuthenticationFailed {
                message: "Authentication failed: Client requested an authorization id that is different from username".to_owned(),
            });
        }
        if credential.iterations < MIN_ITERATIONS {
            return Err(self.generic());
        }
        let server_nonce = random_nonce();
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let client_first_bare = format!("n={saslname},r={client_nonce}{extensions}");
        let token = server_first.clone().into_bytes();
        self.state = State::ClientFinal {
            user,
            credential,
            client_first_bare,
            server_first,
            nonce,
        };
        Ok(Step::Continue(token))
    }
}

/// Kafka's nonce (`ScramFormatter.secureRandomString`): a 130-bit secure random number in
/// base 36.
pub(crate) fn random_nonce() -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rngs::OsRng;
    (0..26)
        .map(|_| char::from(DIGITS[rng.gen_range(0..DIGITS.len())]))
        .collect()
}

/// `(authzid, saslname, nonce, extensions)` of a client-first message.
fn parse_client_first(text: &str) -> Option<(&str, &str, &str, &str)> {
    let rest = text.strip_prefix("n,")?;
    let (authzid, rest) = match rest.strip_prefix("a=") {
        Some(a) => {
            let (authzid, rest) = a.split_once(',')?;
            (authzid, rest)
        }
        None => ("", rest.strip_prefix(',')?),
    };
    let rest = match rest.strip_prefix("m=") {
        Some(m) => m.split_once(',')?.1,
        None => rest,
    };
    let rest = rest.strip_prefix("n=")?;
    let (saslname, rest) = rest.split_once(",r=")?;
    let (nonce, extensions) = match rest.find(',') {
        Some(i) => (rest.get(..i)?, rest.get(i..)?),
        None => (rest, ""),
    };
    if !printable(nonce) {
        return None;
    }
    for extension in extensions.split(',').skip(1) {
        let (key, _) = extension.split_once('=')?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return None;
        }
    }
    Some((authzid, saslname, nonce, extensions))
}

/// `(channel binding, nonce, proof)` of a client-final message.
fn parse_client_final(text: &str) -> Option<(&str, &str, &str)> {
    let rest = text.strip_prefix("c=")?;
    let (channel, rest) = rest.split_once(",r=")?;
    let (rest, proof) = rest.rsplit_once(",p=")?;
    let nonce = rest.split(',').next()?;
    if !printable(nonce) || proof.is_empty() {
        return None;
    }
    Some((channel, nonce, proof))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct One(String, ScramCredential);

    impl ScramCredentialStore for One {
        fn credential(&self, user: &str, _: ScramMechanism) -> Option<ScramCredential> {
            (user == self.0).then(|| self.1.clone())
        }
    }

    /// RFC 7677 section 3's example, with the server nonce swapped for ours.
    #[test]
    fn rfc7677_exchange_and_bad_proofs() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let store: Arc<dyn ScramCredentialStore> =
            Arc::new(One("user".to_owned(), credential.clone()));
        let mut server = ScramServer::new(ScramMechanism::Sha256, Some(store.clone()));
        let Ok(Step::Continue(first)) = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") else {
            panic!("server-first");
        };
        let first = String::from_utf8(first).expect("utf8");
        assert!(first.starts_with("r=rOprNGfwEbeRWgbNEkqO"), "{first}");
        assert!(
            first.ends_with(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
            "{first}"
        );
        let nonce = first
            .strip_prefix("r=")
            .and_then(|r| r.split(',').next())
            .expect("nonce");
        // The client's side, computed independently of the server code path.
        let mech = ScramMechanism::Sha256;
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"pencil", &salt, 4096, &mut salted);
        let client_key = mech.hmac(&salted, b"Client Key");
        let stored_key = mech.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("n=user,r=rOprNGfwEbeRWgbNEkqO,{first},{without_proof}");
        let signature = mech.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let final_message = format!("{without_proof},p={}", BASE64.encode(&proof));
        let Ok(Step::Done { token, user }) = server.step(final_message.as_bytes()) else {
            panic!("server-final");
        };
        assert_eq!(user, "user");
        let server_key = mech.hmac(&salted, b"Server Key");
        let expected = format!(
            "v={}",
            BASE64.encode(mech.hmac(&server_key, auth.as_bytes()))
        );
        assert_eq!(String::from_utf8(token).expect("utf8"), expected);

        // A bad proof, and a replayed final message on a new exchange (another server nonce).
        let generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        for tamper in [true, false] {
            let mut server = ScramServer::new(ScramMechanism::Sha256, Some(store.clone()));
            server
                .step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
                .expect("first");
            let message = if tamper {
                let mut bad = proof.clone();
                bad[0] ^= 1;
                format!("c=biws,r={nonce},p={}", BASE64.encode(&bad))
            } else {
                final_message.clone()
            };
            let err = server.step(message.as_bytes()).expect_err("refused");
            assert_eq!(err.message, generic);
        }
        // Unknown user, malformed messages, channel binding asked for.
        for first in [
            &b"n,,n=bob,r=abc"[..],
            b"p=x,,n=user,r=abc",
            b"n,,n=us=er,r=abc",
            b"junk",
            b"\xff",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha256, Some(store.clone()));
            assert_eq!(server.step(first).expect_err("refused").message, generic);
        }
    }

    #[test]
    fn names_unescape_and_few_iterations_are_refused() {
        assert_eq!(username("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(username("a=b"), None);
        let weak = ScramCredential::from_password(ScramMechanism::Sha512, "pw", b"salt", 1000);
        let store: Arc<dyn ScramCredentialStore> = Arc::new(One("u".to_owned(), weak));
        let mut server = ScramServer::new(ScramMechanism::Sha512, Some(store));
        assert!(server.step(b"n,,n=u,r=abc").is_err());
    }
}
