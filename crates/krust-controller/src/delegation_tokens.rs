//! CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken (Kafka 3.9
//! `ControllerApis` token handlers and `DelegationTokenControlManager`): a token is a
//! `DelegationTokenRecord` (renew and expire rewrite it with a new expiry; an expiry with a
//! negative period writes a `RemoveDelegationTokenRecord`). Its HMAC — HmacSHA512 keyed with
//! the UTF-8 bytes of `delegation.token.secret.key` over the UTF-8 token id — is not stored: the
//! client presents it, and the token is found by recomputing it.
//!
//! Gates in Kafka's order: a token-authenticated caller, or a request sent straight to the
//! controller's PLAINTEXT listener, is `DELEGATION_TOKEN_REQUEST_NOT_ALLOWED` (Kafka allows
//! PLAINTEXT only for forwarded requests); no secret → `DELEGATION_TOKEN_AUTH_DISABLED`;
//! metadata.version below 3.6-IV2 → `UNSUPPORTED_VERSION`. Creating a token for another owner
//! needs CREATE_TOKENS on that user, which a controller without an authorizer (krust's)
//! grants.
//!
//! Time is the caller's wall clock in milliseconds ([`TokenContext::now_ms`]). Kafka's
//! controller also sweeps expired tokens every `delegation.token.expiry.check.interval.ms`;
//! krust does not yet (an expired token stays in the image but cannot be renewed).

use base64::Engine;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse, RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::delegation_tokens::DelegationTokenData;
use krust_metadata::kafka_uuid::{random_kafka_uuid, to_kafka_string};
use krust_metadata::records::{DelegationTokenRecord, MetadataRecord, RemoveDelegationTokenRecord};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};
use krust_net::error_codes::{
    DELEGATION_TOKEN_AUTH_DISABLED, DELEGATION_TOKEN_EXPIRED, DELEGATION_TOKEN_NOT_FOUND,
    DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, INVALID_PRINCIPAL_TYPE,
    UNSUPPORTED_VERSION,
};
use rand::Rng;
use sha2::Sha512;

/// `delegation.token.max.lifetime.ms` default (7 days).
pub const DELEGATION_TOKEN_MAX_LIFETIME_MS_DEFAULT: i64 = 604_800_000;
/// `delegation.token.expiry.time.ms` default (1 day).
pub const DELEGATION_TOKEN_EXPIRY_TIME_MS_DEFAULT: i64 = 86_400_000;
/// `KafkaPrincipal.USER_TYPE`.
pub const USER_TYPE: &str = "User";
/// `DelegationTokenManager.ErrorTimestamp`: the expiry of a request refused before the
/// controller saw it.
const ERROR_TIMESTAMP: i64 = -1;

/// The token settings of the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationTokenConfig {
    /// `delegation.token.secret.key` (or the deprecated `delegation.token.master.key`);
    /// `None` disables tokens.
    pub secret_key: Option<String>,
    /// `delegation.token.max.lifetime.ms`.
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms`.
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms`: how often the active controller removes
    /// expired tokens.
    pub expiry_check_interval_ms: u64,
}

/// `delegation.token.expiry.check.interval.ms` default (1 hour).
pub const DELEGATION_TOKEN_EXPIRY_CHECK_INTERVAL_MS_DEFAULT: u64 = 3_600_000;

impl Default for DelegationTokenConfig {
    fn default() -> Self {
        Self {
            secret_key: None,
            max_lifetime_ms: DELEGATION_TOKEN_MAX_LIFETIME_MS_DEFAULT,
            expiry_time_ms: DELEGATION_TOKEN_EXPIRY_TIME_MS_DEFAULT,
            expiry_check_interval_ms: DELEGATION_TOKEN_EXPIRY_CHECK_INTERVAL_MS_DEFAULT,
        }
    }
}

/// A Kafka principal (`KafkaPrincipal`: type and name; equality ignores the token flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// e.g. `User`.
    pub principal_type: String,
    /// e.g. `alice`.
    pub name: String,
}

impl Principal {
    /// `User:ANONYMOUS`, the principal of a PLAINTEXT connection.
    #[must_use]
    pub fn anonymous() -> Self {
        Self {
            principal_type: USER_TYPE.to_owned(),
            name: "ANONYMOUS".to_owned(),
        }
    }

    /// `Type:name`, as records store principals.
    #[must_use]
    pub fn to_kafka_string(&self) -> String {
        format!("{}:{}", self.principal_type, self.name)
    }

    /// A stored `Type:name` (split at the first colon, as `SecurityUtils.parseKafkaPrincipal`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let (principal_type, name) = text.split_once(':')?;
        Some(Self {
            principal_type: principal_type.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Who asks, how, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenContext {
    /// The caller (the forwarding broker's client for a forwarded request).
    pub principal: Principal,
    /// The caller authenticated with a delegation token.
    pub token_authenticated: bool,
    /// The request came in an Envelope from a broker.
    pub forwarded: bool,
    /// Wall-clock time in milliseconds since the epoch.
    pub now_ms: i64,
    /// The request's API version (CreateDelegationToken names the requester from v3 on).
    pub api_version: i16,
}

impl TokenContext {
    /// Kafka's `ControllerApis.allowTokenRequests` for krust's PLAINTEXT controller listener.
    fn allowed(&self) -> bool {
        !self.token_authenticated && self.forwarded
    }
}

/// HmacSHA512(secret, token id).
#[must_use]
pub fn token_hmac(secret: &str, token_id: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(token_id.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// The token whose HMAC is `hmac` (Kafka's `tokenCache.tokenForHmac`).
fn find<'a>(
    image: &'a MetadataImage,
    secret: &str,
    hmac: &[u8],
) -> Option<(&'a String, &'a DelegationTokenData)> {
    // The cache is keyed by the Base64 of the HMAC; equal bytes are equal keys.
    let wanted = base64::engine::general_purpose::STANDARD.encode(hmac);
    image
        .delegation_tokens
        .tokens
        .iter()
        .find(|(id, _)| {
            base64::engine::general_purpose::STANDARD.encode(token_hmac(secret, id)) == wanted
        })
        .map(|(id, token)| (id, token.as_ref()))
}

fn allowed_to_renew(token: &DelegationTokenData, caller: &Principal) -> bool {
    let caller = caller.to_kafka_string();
    token.owner == caller || token.renewers.contains(&caller)
}

fn token_record(id: &str, token: &DelegationTokenData, expiry: i64) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::DelegationToken(DelegationTokenRecord {
            owner: token.owner.clone(),
            requester: token.requester.clone(),
            renewers: token.renewers.clone(),
            issue_timestamp: token.issue_timestamp_ms,
            max_timestamp: token.max_timestamp_ms,
            expiration_timestamp: expiry,
            token_id: id.to_owned(),
            ..DelegationTokenRecord::default()
        }),
        0,
    )
}

/// The records and the response of one CreateDelegationToken.
#[must_use]
pub fn create_delegation_token(
    image: &MetadataImage,
    config: &DelegationTokenConfig,
    context: &TokenContext,
    request: &CreateDelegationTokenRequest,
    rng: &mut impl Rng,
) -> (Vec<ApiMessageAndVersion>, CreateDelegationTokenResponse) {
    let owner = match &request.owner_principal_name {
        Some(name) if !name.is_empty() => Principal {
            principal_type: request
                .owner_principal_type
                .as_deref()
                .unwrap_or_default()
                .to_owned(),
            name: name.to_string(),
        },
        _ => context.principal.clone(),
    };
    let mut response = CreateDelegationTokenResponse::default()
        .with_principal_type(StrBytes::from_string(owner.principal_type.clone()))
        .with_principal_name(StrBytes::from_string(owner.name.clone()));
    // Kafka's `prepareResponse` names the requester only for versions above 2.
    if context.api_version > 2 {
        response = response
            .with_token_requester_principal_type(StrBytes::from_string(
                context.principal.principal_type.clone(),
            ))
            .with_token_requester_principal_name(StrBytes::from_string(
                context.principal.name.clone(),
            ));
    }
    if !context.allowed() {
        // Refused by ControllerApis before the controller: Kafka's error timestamps.
        return (
            Vec::new(),
            response
                .with_error_code(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
                .with_issue_timestamp_ms(ERROR_TIMESTAMP)
                .with_expiry_timestamp_ms(ERROR_TIMESTAMP)
                .with_max_timestamp_ms(ERROR_TIMESTAMP),
        );
    }
    let Some(secret) = &config.secret_key else {
        return (
            Vec::new(),
            response.with_error_code(DELEGATION_TOKEN_AUTH_DISABLED),
        );
    };
    if !image.metadata_version().is_delegation_token_supported() {
        return (Vec::new(), response.with_error_code(UNSUPPORTED_VERSION));
    }
    let now = context.now_ms;
    let mut max_lifetime = config.max_lifetime_ms;
    if request.max_lifetime_ms > 0 {
        max_lifetime = max_lifetime.min(request.max_lifetime_ms);
    }
    let max_timestamp = now.saturating_add(max_lifetime);
    let expiry = max_timestamp.min(now.saturating_add(config.expiry_time_ms));
    let token_id = to_kafka_string(&random_kafka_uuid(rng));
    let mut renewers = Vec::with_capacity(request.renewers.len());
    for renewer in &request.renewers {
        if renewer.principal_type.as_str() != USER_TYPE {
            return (Vec::new(), response.with_error_code(INVALID_PRINCIPAL_TYPE));
        }
        renewers.push(format!("{USER_TYPE}:{}", renewer.principal_name.as_str()));
    }
    let hmac = token_hmac(secret, &token_id);
    let token = DelegationTokenData {
        owner: owner.to_kafka_string(),
        requester: context.principal.to_kafka_string(),
        renewers,
        issue_timestamp_ms: now,
        max_timestamp_ms: max_timestamp,
        expiration_timestamp_ms: expiry,
    };
    let record = token_record(&token_id, &token, expiry);
    (
        vec![record],
        response
            .with_issue_timestamp_ms(now)
            .with_expiry_timestamp_ms(expiry)
            .with_max_timestamp_ms(max_timestamp)
            .with_token_id(StrBytes::from_string(token_id))
            .with_hmac(hmac.into()),
    )
}

/// The records and the response of one RenewDelegationToken.
#[must_use]
pub fn renew_delegation_token(
    image: &MetadataImage,
    config: &DelegationTokenConfig,
    context: &TokenContext,
    request: &RenewDelegationTokenRequest,
) -> (Vec<ApiMessageAndVersion>, RenewDelegationTokenResponse) {
    let refused = |code: i16| RenewDelegationTokenResponse::default().with_error_code(code);
    if !context.allowed() {
        return (
            Vec::new(),
            refused(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).with_expiry_timestamp_ms(ERROR_TIMESTAMP),
        );
    }
    let Some(secret) = &config.secret_key else {
        return (Vec::new(), refused(DELEGATION_TOKEN_AUTH_DISABLED));
    };
    if !image.metadata_version().is_delegation_token_supported() {
        return (Vec::new(), refused(UNSUPPORTED_VERSION));
    }
    let Some((id, token)) = find(image, secret, &request.hmac) else {
        return (Vec::new(), refused(DELEGATION_TOKEN_NOT_FOUND));
    };
    let now = context.now_ms;
    if token.max_timestamp_ms < now || token.expiration_timestamp_ms < now {
        return (Vec::new(), refused(DELEGATION_TOKEN_EXPIRED));
    }
    if !allowed_to_renew(token, &context.principal) {
        return (Vec::new(), refused(DELEGATION_TOKEN_OWNER_MISMATCH));
    }
    let mut renew_lifetime = config.expiry_time_ms;
    if request.renew_period_ms > 0 {
        renew_lifetime = renew_lifetime.min(request.renew_period_ms);
    }
    let expiry = token
        .max_timestamp_ms
        .min(now.saturating_add(renew_lifetime));
    (
        vec![token_record(id, token, expiry)],
        RenewDelegationTokenResponse::default().with_expiry_timestamp_ms(expiry),
    )
}

/// Kafka's periodic `sweepExpiredDelegationTokens`: a `RemoveDelegationTokenRecord` for every
/// token whose expiry or maximum lifetime is past at `now_ms` (wall clock).
#[must_use]
pub fn sweep_expired_delegation_tokens(
    image: &MetadataImage,
    now_ms: i64,
) -> Vec<ApiMessageAndVersion> {
    image
        .delegation_tokens
        .tokens
        .iter()
        .filter(|(_, t)| t.max_timestamp_ms < now_ms || t.expiration_timestamp_ms < now_ms)
        .map(|(id, t)| {
            tracing::info!(
                "Delegation token expired for token: {id} for owner: {}",
                t.owner
            );
            ApiMessageAndVersion::new(
                MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
                    token_id: id.clone(),
                    ..RemoveDelegationTokenRecord::default()
                }),
                0,
            )
        })
        .collect()
}

/// The records and the response of one ExpireDelegationToken.
#[must_use]
pub fn expire_delegation_token(
    image: &MetadataImage,
    config: &DelegationTokenConfig,
    context: &TokenContext,
    request: &ExpireDelegationTokenRequest,
) -> (Vec<ApiMessageAndVersion>, ExpireDelegationTokenResponse) {
    let refused = |code: i16| ExpireDelegationTokenResponse::default().with_error_code(code);
    if !context.allowed() {
        return (
            Vec::new(),
            refused(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).with_expiry_timestamp_ms(ERROR_TIMESTAMP),
        );
    }
    let Some(secret) = &config.secret_key else {
        return (Vec::new(), refused(DELEGATION_TOKEN_AUTH_DISABLED));
    };
    if !image.metadata_version().is_delegation_token_supported() {
        return (Vec::new(), refused(UNSUPPORTED_VERSION));
    }
    let Some((id, token)) = find(image, secret, &request.hmac) else {
        return (Vec::new(), refused(DELEGATION_TOKEN_NOT_FOUND));
    };
    if !allowed_to_renew(token, &context.principal) {
        return (Vec::new(), refused(DELEGATION_TOKEN_OWNER_MISMATCH));
    }
    let now = context.now_ms;
    if request.expiry_time_period_ms < 0 {
        let record = ApiMessageAndVersion::new(
            MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
                token_id: id.clone(),
                ..RemoveDelegationTokenRecord::default()
            }),
            0,
        );
        return (
            vec![record],
            ExpireDelegationTokenResponse::default().with_expiry_timestamp_ms(now),
        );
    }
    if token.max_timestamp_ms < now || token.expiration_timestamp_ms < now {
        return (Vec::new(), refused(DELEGATION_TOKEN_EXPIRED));
    }
    let expiry = token
        .max_timestamp_ms
        .min(now.saturating_add(request.expiry_time_period_ms));
    (
        vec![token_record(id, token, expiry)],
        ExpireDelegationTokenResponse::default().with_expiry_timestamp_ms(expiry),
    )
}
