//! CreateAcls and DeleteAcls (Kafka 3.9 `AclApis` on the controller, the
//! `ClusterMetadataAuthorizer` and `AclControlManager`): ACL bindings in, an
//! `AccessControlEntryRecord` per new ACL (fresh random id) or a
//! `RemoveAccessControlEntryRecord` per matched one out, with per-item results.
//!
//! Validation happens in Kafka's order, each step with its own reach:
//! 1. request parsing: a creation or filter with an UNKNOWN code (0 or a code Kafka does not
//!    know) makes the request unparseable (Kafka closes the connection; krust answers every
//!    item `INVALID_REQUEST`);
//! 2. building the bindings: ANY resource type, MATCH/ANY pattern type, ANY operation or ANY
//!    permission in a creation fails the whole request (`UNKNOWN_SERVER_ERROR`, null message,
//!    for every item);
//! 3. per creation: the CLUSTER resource named other than `kafka-cluster`, an empty name
//!    (`INVALID_REQUEST`);
//! 4. an ACL equal to an existing one (or to an earlier one of the request) succeeds without a
//!    record.
//!
//! A controller without an authorizer (`authorizer.class.name` unset) answers every item
//! `SECURITY_DISABLED` "No Authorizer is configured.". The principal is stored verbatim (Kafka
//! does not parse it here).

use std::collections::{BTreeSet, HashSet};

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_metadata::authorizer::AclBindingFilter;
use krust_metadata::image::acls::StandardAcl;
use krust_metadata::kafka_uuid::random_kafka_uuid;
use krust_metadata::records::{
    AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord,
};
use krust_metadata::{ApiMessageAndVersion, MetadataImage};
use krust_net::error_codes::{INVALID_REQUEST, SECURITY_DISABLED, UNKNOWN_SERVER_ERROR};
use rand::Rng;
use uuid::Uuid;

use crate::api_error::ApiError;

/// Most records one ACL operation writes (Kafka's `MAX_RECORDS_PER_USER_OP`).
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;
/// The only name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// `ResourceType.ANY`.
const RESOURCE_TYPE_ANY: i8 = 1;
/// `ResourceType.CLUSTER`.
const RESOURCE_TYPE_CLUSTER: i8 = 4;
/// Highest known `ResourceType` code (USER).
const RESOURCE_TYPE_MAX: i8 = 7;
/// `PatternType.ANY`.
const PATTERN_ANY: i8 = 1;
/// `PatternType.MATCH`.
const PATTERN_MATCH: i8 = 2;
/// `PatternType.PREFIXED`.
const PATTERN_PREFIXED: i8 = 4;
/// `AclOperation.ANY`.
const OPERATION_ANY: i8 = 1;
/// Highest known `AclOperation` code (DESCRIBE_TOKENS).
const OPERATION_MAX: i8 = 14;
/// `AclPermissionType.ANY`.
const PERMISSION_ANY: i8 = 1;
/// Highest known `AclPermissionType` code (ALLOW).
const PERMISSION_MAX: i8 = 3;

/// Whether a code is Kafka's UNKNOWN for its enum (`fromCode` maps anything it does not know
/// to UNKNOWN, code 0).
fn is_unknown(code: i8, max: i8) -> bool {
    !(1..=max).contains(&code)
}

/// The records and the response of one CreateAcls. `authorizer` is whether the controller
/// has one (`authorizer.class.name`); ids come from `rng`.
#[must_use]
pub fn create_acls(
    image: &MetadataImage,
    request: &CreateAclsRequest,
    authorizer: bool,
    rng: &mut impl Rng,
) -> (Vec<ApiMessageAndVersion>, CreateAclsResponse) {
    let all = |error: &ApiError| {
        let result = AclCreationResult::default()
            .with_error_code(error.code)
            .with_error_message(error.message_bytes());
        CreateAclsResponse::default().with_results(vec![result; request.creations.len()])
    };
    if !authorizer {
        return (
            Vec::new(),
            all(&ApiError::new(
                SECURITY_DISABLED,
                "No Authorizer is configured.",
            )),
        );
    }
    let unknown = request.creations.iter().any(|c| {
        is_unknown(c.resource_pattern_type, PATTERN_PREFIXED)
            || is_unknown(c.resource_type, RESOURCE_TYPE_MAX)
            || is_unknown(c.permission_type, PERMISSION_MAX)
            || is_unknown(c.operation, OPERATION_MAX)
    });
    if unknown {
        return (
            Vec::new(),
            all(&ApiError::new(
                INVALID_REQUEST,
                "CreatableAcls contain unknown elements",
            )),
        );
    }
    // `new ResourcePattern` / `new AccessControlEntry` throw IllegalArgumentException, which
    // fails the request as a whole (UNKNOWN_SERVER_ERROR carries no message).
    let not_a_binding = request.creations.iter().any(|c| {
        c.resource_type == RESOURCE_TYPE_ANY
            || c.resource_pattern_type == PATTERN_MATCH
            || c.resource_pattern_type == PATTERN_ANY
            || c.operation == OPERATION_ANY
            || c.permission_type == PERMISSION_ANY
    });
    if not_a_binding {
        return (
            Vec::new(),
            all(&ApiError {
                code: UNKNOWN_SERVER_ERROR,
                message: None,
            }),
        );
    }
    let mut existing: HashSet<StandardAcl> = image
        .acls
        .acls
        .values()
        .map(|acl| acl.as_ref().clone())
        .collect();
    let mut taken: BTreeSet<Uuid> = image.acls.acls.keys().copied().collect();
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(request.creations.len());
    for creation in &request.creations {
        let result = match validate_creation(creation) {
            Err(error) => error,
            Ok(acl) => {
                if existing.insert(acl.clone()) {
                    let id = loop {
                        let id = random_kafka_uuid(rng);
                        if taken.insert(id) {
                            break id;
                        }
                    };
                    records.push(acl_record(id, &acl));
                }
                ApiError::NONE
            }
        };
        results.push(result);
    }
    if records.len() > MAX_RECORDS_PER_USER_OP {
        // The controller's bounded record list throws: every binding that reached it fails.
        let error = ApiError {
            code: UNKNOWN_SERVER_ERROR,
            message: None,
        };
        for result in &mut results {
            if !result.is_failure() {
                *result = error.clone();
            }
        }
        records.clear();
    }
    // Kafka sets the message only for a failure: a success keeps the schema's default ("").
    let results = results
        .into_iter()
        .map(|r| {
            let result = AclCreationResult::default();
            if r.is_failure() {
                result
                    .with_error_code(r.code)
                    .with_error_message(r.message_bytes())
            } else {
                result
            }
        })
        .collect();
    (records, CreateAclsResponse::default().with_results(results))
}

/// `AclApis.handleCreateAcls`' per-binding checks, then `AclControlManager.validateNewAcl`.
fn validate_creation(creation: &AclCreation) -> Result<StandardAcl, ApiError> {
    let name = creation.resource_name.as_str();
    if creation.resource_type == RESOURCE_TYPE_CLUSTER && name != CLUSTER_NAME {
        return Err(ApiError::new(
            INVALID_REQUEST,
            format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"),
        ));
    }
    if name.is_empty() {
        return Err(ApiError::new(
            INVALID_REQUEST,
            "Invalid empty resource name",
        ));
    }
    // validateNewAcl's other checks (UNKNOWN/ANY resource type and operation, pattern not
    // LITERAL/PREFIXED, permission not ALLOW/DENY) cannot fail after the request-wide ones.
    Ok(StandardAcl {
        resource_type: creation.resource_type,
        resource_name: name.to_owned(),
        pattern_type: creation.resource_pattern_type,
        principal: creation.principal.to_string(),
        host: creation.host.to_string(),
        operation: creation.operation,
        permission_type: creation.permission_type,
    })
}

fn acl_record(id: Uuid, acl: &StandardAcl) -> ApiMessageAndVersion {
    ApiMessageAndVersion::new(
        MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
            id,
            resource_type: acl.resource_type,
            resource_name: acl.resource_name.clone(),
            pattern_type: acl.pattern_type,
            principal: acl.principal.clone(),
            host: acl.host.clone(),
            operation: acl.operation,
            permission_type: acl.permission_type,
            ..AccessControlEntryRecord::default()
        }),
        0,
    )
}

/// The records and the response of one DeleteAcls: every filter's matches are removed in one
/// atomic batch (an ACL two filters match is removed once and listed by both).
#[must_use]
pub fn delete_acls(
    image: &MetadataImage,
    request: &DeleteAclsRequest,
    authorizer: bool,
) -> (Vec<ApiMessageAndVersion>, DeleteAclsResponse) {
    let all = |error: &ApiError| {
        let result = DeleteAclsFilterResult::default()
            .with_error_code(error.code)
            .with_error_message(error.message_bytes());
        DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()])
    };
    if !authorizer {
        return (
            Vec::new(),
            all(&ApiError::new(
                SECURITY_DISABLED,
                "No Authorizer is configured.",
            )),
        );
    }
    let unknown = request.filters.iter().any(|f| {
        is_unknown(f.pattern_type_filter, PATTERN_PREFIXED)
            || is_unknown(f.resource_type_filter, RESOURCE_TYPE_MAX)
            || is_unknown(f.operation, OPERATION_MAX)
            || is_unknown(f.permission_type, PERMISSION_MAX)
    });
    if unknown {
        return (
            Vec::new(),
            all(&ApiError::new(
                INVALID_REQUEST,
                "Filters contain UNKNOWN elements",
            )),
        );
    }
    let mut removed: BTreeSet<Uuid> = BTreeSet::new();
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(request.filters.len());
    for filter in &request.filters {
        let mut matching = Vec::new();
        let mut too_many = false;
        let binding = binding_filter(filter);
        for (id, acl) in &image.acls.acls {
            if !binding.matches(acl) {
                continue;
            }
            matching.push(matching_acl(acl));
            if removed.insert(*id) {
                records.push(ApiMessageAndVersion::new(
                    MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
                        id: *id,
                        ..RemoveAccessControlEntryRecord::default()
                    }),
                    0,
                ));
            }
            if removed.len() > MAX_RECORDS_PER_USER_OP {
                too_many = true;
                break;
            }
        }
        // Kafka sets every message explicitly: null on success.
        results.push(if too_many {
            // Kafka's BoundedListTooLongException is not an ApiException: UNKNOWN_SERVER_ERROR
            // with no message (the removals gathered so far stay in the batch, as in Kafka).
            DeleteAclsFilterResult::default()
                .with_error_code(UNKNOWN_SERVER_ERROR)
                .with_error_message(None)
        } else {
            DeleteAclsFilterResult::default()
                .with_error_message(None)
                .with_matching_acls(matching)
        });
    }
    (
        records,
        DeleteAclsResponse::default().with_filter_results(results),
    )
}

fn matching_acl(acl: &StandardAcl) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_error_message(None)
        .with_resource_type(acl.resource_type)
        .with_resource_name(StrBytes::from_string(acl.resource_name.clone()))
        .with_pattern_type(acl.pattern_type)
        .with_principal(StrBytes::from_string(acl.principal.clone()))
        .with_host(StrBytes::from_string(acl.host.clone()))
        .with_operation(acl.operation)
        .with_permission_type(acl.permission_type)
}

/// The request's filter as Kafka's `AclBindingFilter`.
fn binding_filter(filter: &DeleteAclsFilter) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: filter.resource_type_filter,
        resource_name: filter.resource_name_filter.as_deref().map(str::to_owned),
        pattern_type: filter.pattern_type_filter,
        principal: filter.principal_filter.as_deref().map(str::to_owned),
        host: filter.host_filter.as_deref().map(str::to_owned),
        operation: filter.operation,
        permission_type: filter.permission_type,
    }
}
