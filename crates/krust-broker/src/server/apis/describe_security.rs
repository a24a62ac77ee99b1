//! DescribeClientQuotas (48) and DescribeUserScramCredentials (50), served from the broker's
//! metadata image as Kafka 3.9's `ClientQuotasImage.describe` and `ScramImage.describe` do.
//! Kafka lists entries in its hash maps' order; krust lists them sorted (entity, then key;
//! user, then mechanism), which clients do not depend on.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::image::MetadataImage;
use krust_net::error_codes::{
    DUPLICATE_RESOURCE, INVALID_REQUEST, RESOURCE_NOT_FOUND, UNSUPPORTED_VERSION,
};

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// A DescribeClientQuotas filter: entity types matched by name (`None`: the default entity),
/// and entity types that must only be present.
type QuotaFilter = (BTreeMap<String, Option<String>>, BTreeSet<String>);

/// The request's filter, or why it is refused: the code and Kafka's message.
fn quota_filter(request: &DescribeClientQuotasRequest) -> Result<QuotaFilter, (i16, String)> {
    let mut exact: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut typed: BTreeSet<String> = BTreeSet::new();
    let invalid = |m: String| Err((INVALID_REQUEST, m));
    for component in &request.components {
        let entity_type = component.entity_type.to_string();
        if entity_type.is_empty() {
            return invalid("Invalid empty entity type.".to_owned());
        }
        if exact.contains_key(&entity_type) || typed.contains(&entity_type) {
            return invalid(format!(
                "Entity type {entity_type} cannot appear more than once in the filter."
            ));
        }
        if ![IP, USER, CLIENT_ID].contains(&entity_type.as_str()) {
            return Err((
                UNSUPPORTED_VERSION,
                format!("Unsupported entity type {entity_type}"),
            ));
        }
        let matched = component._match.as_ref().map(ToString::to_string);
        match component.match_type {
            0 => match matched {
                Some(m) => {
                    exact.insert(entity_type, Some(m));
                }
                None => {
                    return invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                            .to_owned(),
                    );
                }
            },
            1 if matched.is_some() => {
                return invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .to_owned(),
                );
            }
            1 => {
                exact.insert(entity_type, None);
            }
            2 if matched.is_some() => {
                return invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .to_owned(),
                );
            }
            2 => {
                typed.insert(entity_type);
            }
            other => return invalid(format!("Unknown match type {other}")),
        }
    }
    let has = |t: &str| exact.contains_key(t) || typed.contains(t);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .to_owned(),
        );
    }
    Ok((exact, typed))
}

/// DescribeClientQuotas from `image`.
#[must_use]
pub fn describe_client_quotas(
    image: &MetadataImage,
    request: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let (exact, typed) = match quota_filter(request) {
        Ok(filter) => filter,
        Err((code, message)) => return quotas_error(code, Some(message)),
    };
    let entries = image
        .client_quotas
        .entities
        .iter()
        .filter(|(entity, _)| {
            let entries = &entity.0;
            (!request.strict || entries.len() == exact.len() + typed.len())
                && exact.iter().all(|(t, name)| entries.get(t) == Some(name))
                && typed.iter().all(|t| entries.contains_key(t))
        })
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .0
                        .iter()
                        .map(|(t, name)| {
                            EntityData::default()
                                .with_entity_type(StrBytes::from_string(t.clone()))
                                .with_entity_name(name.clone().map(StrBytes::from_string))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(key, value)| {
                            ValueData::default()
                                .with_key(StrBytes::from_string(key.clone()))
                                .with_value(*value)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// Kafka's `DescribeClientQuotasRequest.getErrorResponse`: no entries; `message` is `None`
/// for an exception carrying its error's default message (`ApiError.fromThrowable` drops it).
#[must_use]
pub fn quotas_error(code: i16, message: Option<String>) -> DescribeClientQuotasResponse {
    DescribeClientQuotasResponse::default()
        .with_error_code(code)
        .with_error_message(message.map(StrBytes::from_string))
        .with_entries(None)
}

/// DescribeUserScramCredentials from `image`: every user with a credential when none is
/// named; a user named twice DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND.
#[must_use]
pub fn describe_user_scram_credentials(
    image: &MetadataImage,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let credentials = &image.scram.credentials;
    // User → named more than once.
    let mut users: BTreeMap<String, bool> = BTreeMap::new();
    match request.users.as_deref() {
        None | Some([]) => {
            for (_, user) in credentials.keys() {
                users.insert(user.clone(), false);
            }
        }
        Some(named) => {
            for user in named {
                let name = user.name.to_string();
                let twice = users.contains_key(&name);
                users.insert(name, twice);
            }
        }
    }
    let results = users
        .into_iter()
        .map(|(user, twice)| {
            let result = DescribeUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(user.clone()));
            if twice {
                return result
                    .with_error_code(DUPLICATE_RESOURCE)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single \
                         request: {user}"
                    ))));
            }
            let infos: Vec<CredentialInfo> = credentials
                .iter()
                .filter(|((_, u), _)| *u == user)
                .map(|((mechanism, _), credential)| {
                    CredentialInfo::default()
                        .with_mechanism(*mechanism)
                        .with_iterations(credential.iterations)
                })
                .collect();
            if infos.is_empty() {
                result
                    .with_error_code(RESOURCE_NOT_FOUND)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "Attempt to describe a user credential that does not exist: {user}"
                    ))))
            } else {
                result.with_credential_infos(infos)
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// Kafka's `DescribeUserScramCredentialsRequest.getErrorResponse`: the error at the top and
/// once per named user (without the user's name). `message` is `None` for an exception
/// carrying its error's default message (`ApiError.fromThrowable` drops it).
#[must_use]
pub fn scram_error(
    request: &DescribeUserScramCredentialsRequest,
    code: i16,
    message: Option<&str>,
) -> DescribeUserScramCredentialsResponse {
    let message = message.map(|m| StrBytes::from_string(m.to_owned()));
    let result = DescribeUserScramCredentialsResult::default()
        .with_error_code(code)
        .with_error_message(message.clone());
    DescribeUserScramCredentialsResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(vec![result; request.users.as_ref().map_or(0, Vec::len)])
}
