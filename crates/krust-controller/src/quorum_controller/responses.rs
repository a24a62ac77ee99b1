//! Whole-request refusals and the conversion of a prepared response into an error.

use super::*;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as QuotaEntityData, EntryData as QuotaEntryData,
};
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;

/// The response refusing `request` as a whole with `error`.
pub(super) fn refusal(request: &ControllerRequest, error: &ControllerError) -> ControllerResponse {
    let (code, message) = error_fields(error);
    match request {
        ControllerRequest::MigrationRecords { .. } => {
            ControllerResponse::MigrationRecords(Err(error.clone()))
        }
        ControllerRequest::BrokerRegistration(_) => ControllerResponse::BrokerRegistration(
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        ControllerRequest::BrokerHeartbeat(_) => ControllerResponse::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        ControllerRequest::UnregisterBroker(_) => ControllerResponse::UnregisterBroker(
            UnregisterBrokerResponse::default()
                .with_error_code(code)
                .with_error_message(message),
        ),
        ControllerRequest::ControllerRegistration(_) => ControllerResponse::ControllerRegistration(
            ControllerRegistrationResponse::default()
                .with_error_code(code)
                .with_error_message(message),
        ),
        ControllerRequest::CreateTopics(r) => ControllerResponse::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
            ),
        ),
        ControllerRequest::DeleteTopics(r) => {
            let mut responses: Vec<DeletableTopicResult> = r
                .topic_names
                .iter()
                .map(|n| {
                    DeletableTopicResult::default()
                        .with_name(Some(n.clone()))
                        .with_error_code(code)
                })
                .collect();
            responses.extend(r.topics.iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_error_code(code)
            }));
            ControllerResponse::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(responses),
            )
        }
        ControllerRequest::AlterPartition(_) => ControllerResponse::AlterPartition(
            AlterPartitionResponse::default().with_error_code(code),
        ),
        // Kafka's `AssignReplicasToDirsRequest.getErrorResponse`: the code, no directories.
        ControllerRequest::AssignReplicasToDirs(_) => ControllerResponse::AssignReplicasToDirs(
            AssignReplicasToDirsResponse::default().with_error_code(code),
        ),
        ControllerRequest::CreatePartitions(r) => ControllerResponse::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
            ),
        ),
        // Kafka's `AlterPartitionReassignmentsRequest.getErrorResponse`: the error at the top
        // and on every partition.
        ControllerRequest::AlterPartitionReassignments(r) => {
            ControllerResponse::AlterPartitionReassignments(
                AlterPartitionReassignmentsResponse::default()
                    .with_error_code(code)
                    .with_error_message(message.clone())
                    .with_responses(
                        r.topics
                            .iter()
                            .map(|t| {
                                ReassignableTopicResponse::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                ReassignablePartitionResponse::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_error_code(code)
                                                    .with_error_message(message.clone())
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            )
        }
        ControllerRequest::ListPartitionReassignments(_) => {
            ControllerResponse::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default()
                    .with_error_code(code)
                    .with_error_message(message),
            )
        }
        ControllerRequest::ElectLeaders(_) => {
            ControllerResponse::ElectLeaders(ElectLeadersResponse::default().with_error_code(code))
        }
        ControllerRequest::AllocateProducerIds(_) => ControllerResponse::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        ControllerRequest::UpdateFeatures { .. } => ControllerResponse::UpdateFeatures(
            UpdateFeaturesResponse::default()
                .with_error_code(code)
                .with_error_message(message.clone()),
        ),
        ControllerRequest::AlterConfigs(r) => ControllerResponse::AlterConfigs(
            AlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|c| {
                        LegacyAlterConfigsResourceResponse::default()
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
            ),
        ),
        ControllerRequest::CreateAcls(r) => {
            ControllerResponse::CreateAcls(CreateAclsResponse::default().with_results(vec![
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(message.clone());
                r.creations.len()
            ]))
        }
        ControllerRequest::DeleteAcls(r) => {
            ControllerResponse::DeleteAcls(DeleteAclsResponse::default().with_filter_results(vec![
                DeleteAclsFilterResult::default()
                    .with_error_code(code)
                    .with_error_message(message.clone());
                r.filters.len()
            ]))
        }
        ControllerRequest::AlterClientQuotas(r) => ControllerResponse::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(
                r.entries
                    .iter()
                    .map(|e| {
                        QuotaEntryData::default()
                            .with_error_code(code)
                            .with_error_message(message.clone())
                            .with_entity(
                                e.entity
                                    .iter()
                                    .map(|d| {
                                        QuotaEntityData::default()
                                            .with_entity_type(d.entity_type.clone())
                                            .with_entity_name(d.entity_name.clone())
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        ControllerRequest::AlterUserScramCredentials(r) => {
            let users: BTreeSet<&StrBytes> = r
                .deletions
                .iter()
                .map(|d| &d.name)
                .chain(r.upsertions.iter().map(|u| &u.name))
                .collect();
            ControllerResponse::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|user| {
                            AlterUserScramCredentialsResult::default()
                                .with_user(user.clone())
                                .with_error_code(code)
                                .with_error_message(message.clone())
                        })
                        .collect(),
                ),
            )
        }
        ControllerRequest::CreateDelegationToken { context, .. } => {
            let mut response = CreateDelegationTokenResponse::default().with_error_code(code);
            if context.api_version > 2 {
                response = response
                    .with_token_requester_principal_type(StrBytes::from_string(
                        context.principal.principal_type.clone(),
                    ))
                    .with_token_requester_principal_name(StrBytes::from_string(
                        context.principal.name.clone(),
                    ));
            }
            ControllerResponse::CreateDelegationToken(Box::new(response))
        }
        ControllerRequest::RenewDelegationToken { .. } => ControllerResponse::RenewDelegationToken(
            RenewDelegationTokenResponse::default().with_error_code(code),
        ),
        ControllerRequest::ExpireDelegationToken { .. } => {
            ControllerResponse::ExpireDelegationToken(
                ExpireDelegationTokenResponse::default().with_error_code(code),
            )
        }
        ControllerRequest::IncrementalAlterConfigs(r) => {
            ControllerResponse::IncrementalAlterConfigs(
                IncrementalAlterConfigsResponse::default().with_responses(
                    r.resources
                        .iter()
                        .map(|c| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(c.resource_type)
                                .with_resource_name(c.resource_name.clone())
                                .with_error_code(code)
                                .with_error_message(message.clone())
                        })
                        .collect(),
                ),
            )
        }
    }
}

/// A prepared response turned into a refusal with `error` (lost leadership before commit).
pub(super) fn error_response(
    response: &ControllerResponse,
    error: &ControllerError,
) -> ControllerResponse {
    let code = error.code();
    match response {
        ControllerResponse::MigrationRecords(_) => {
            ControllerResponse::MigrationRecords(Err(error.clone()))
        }
        ControllerResponse::BrokerRegistration(_) => ControllerResponse::BrokerRegistration(
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        ControllerResponse::BrokerHeartbeat(_) => ControllerResponse::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        ControllerResponse::UnregisterBroker(_) => ControllerResponse::UnregisterBroker(
            UnregisterBrokerResponse::default().with_error_code(code),
        ),
        ControllerResponse::ControllerRegistration(_) => {
            ControllerResponse::ControllerRegistration(
                ControllerRegistrationResponse::default().with_error_code(code),
            )
        }
        ControllerResponse::CreateTopics(r) => {
            let mut r = r.clone();
            for t in &mut r.topics {
                t.error_code = code;
                t.error_message = None;
            }
            ControllerResponse::CreateTopics(r)
        }
        ControllerResponse::DeleteTopics(r) => {
            let mut r = r.clone();
            for t in &mut r.responses {
                t.error_code = code;
            }
            ControllerResponse::DeleteTopics(r)
        }
        ControllerResponse::AlterPartition(_) => ControllerResponse::AlterPartition(
            AlterPartitionResponse::default().with_error_code(code),
        ),
        ControllerResponse::AssignReplicasToDirs(_) => ControllerResponse::AssignReplicasToDirs(
            AssignReplicasToDirsResponse::default().with_error_code(code),
        ),
        ControllerResponse::CreatePartitions(r) => {
            let mut r = r.clone();
            for t in &mut r.results {
                t.error_code = code;
                t.error_message = None;
            }
            ControllerResponse::CreatePartitions(r)
        }
        ControllerResponse::ElectLeaders(_) => {
            ControllerResponse::ElectLeaders(ElectLeadersResponse::default().with_error_code(code))
        }
        ControllerResponse::AllocateProducerIds(_) => ControllerResponse::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        ControllerResponse::UpdateFeatures(_) => ControllerResponse::UpdateFeatures(
            UpdateFeaturesResponse::default().with_error_code(code),
        ),
        ControllerResponse::AlterConfigs(r) => {
            let mut r = r.clone();
            for c in &mut r.responses {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::AlterConfigs(r)
        }
        ControllerResponse::IncrementalAlterConfigs(r) => {
            let mut r = r.clone();
            for c in &mut r.responses {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::IncrementalAlterConfigs(r)
        }
        ControllerResponse::CreateAcls(r) => {
            let mut r = r.clone();
            for c in &mut r.results {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::CreateAcls(r)
        }
        ControllerResponse::DeleteAcls(r) => {
            let mut r = r.clone();
            for c in &mut r.filter_results {
                c.error_code = code;
                c.error_message = None;
                c.matching_acls.clear();
            }
            ControllerResponse::DeleteAcls(r)
        }
        ControllerResponse::AlterClientQuotas(r) => {
            let mut r = r.clone();
            for c in &mut r.entries {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::AlterClientQuotas(r)
        }
        ControllerResponse::AlterUserScramCredentials(r) => {
            let mut r = r.clone();
            for c in &mut r.results {
                c.error_code = code;
                c.error_message = None;
            }
            ControllerResponse::AlterUserScramCredentials(r)
        }
        ControllerResponse::CreateDelegationToken(r) => {
            ControllerResponse::CreateDelegationToken(Box::new(
                CreateDelegationTokenResponse::default()
                    .with_error_code(code)
                    .with_principal_type(r.principal_type.clone())
                    .with_principal_name(r.principal_name.clone())
                    .with_token_requester_principal_type(r.token_requester_principal_type.clone())
                    .with_token_requester_principal_name(r.token_requester_principal_name.clone()),
            ))
        }
        ControllerResponse::RenewDelegationToken(_) => ControllerResponse::RenewDelegationToken(
            RenewDelegationTokenResponse::default().with_error_code(code),
        ),
        ControllerResponse::ExpireDelegationToken(_) => ControllerResponse::ExpireDelegationToken(
            ExpireDelegationTokenResponse::default().with_error_code(code),
        ),
        ControllerResponse::AlterPartitionReassignments(r) => {
            let mut r = r.clone();
            let message = Some(StrBytes::from_string(error.to_string()));
            r.error_code = code;
            r.error_message.clone_from(&message);
            for p in r.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = code;
                p.error_message.clone_from(&message);
            }
            ControllerResponse::AlterPartitionReassignments(r)
        }
        ControllerResponse::ListPartitionReassignments(_) => {
            ControllerResponse::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(error.to_string()))),
            )
        }
    }
}

/// The Kafka error of a response as a [`ResponseError`], for callers and tests.
#[must_use]
pub fn top_level_error(response: &ControllerResponse) -> Option<ResponseError> {
    use kafka_protocol::error::ParseResponseErrorCode;
    let code = match response {
        ControllerResponse::BrokerRegistration(r) => r.error_code,
        ControllerResponse::BrokerHeartbeat(r) => r.error_code,
        ControllerResponse::UnregisterBroker(r) => r.error_code,
        ControllerResponse::ControllerRegistration(r) => r.error_code,
        ControllerResponse::AlterPartition(r) => r.error_code,
        ControllerResponse::AssignReplicasToDirs(r) => r.error_code,
        ControllerResponse::ElectLeaders(r) => r.error_code,
        ControllerResponse::AllocateProducerIds(r) => r.error_code,
        ControllerResponse::UpdateFeatures(r) => r.error_code,
        ControllerResponse::MigrationRecords(r) => {
            r.as_ref().err().map_or(0, ControllerError::code)
        }
        ControllerResponse::CreateDelegationToken(r) => r.error_code,
        ControllerResponse::RenewDelegationToken(r) => r.error_code,
        ControllerResponse::ExpireDelegationToken(r) => r.error_code,
        ControllerResponse::AlterPartitionReassignments(r) => r.error_code,
        ControllerResponse::ListPartitionReassignments(r) => r.error_code,
        ControllerResponse::CreateTopics(_)
        | ControllerResponse::DeleteTopics(_)
        | ControllerResponse::CreatePartitions(_)
        | ControllerResponse::IncrementalAlterConfigs(_)
        | ControllerResponse::AlterConfigs(_)
        | ControllerResponse::CreateAcls(_)
        | ControllerResponse::DeleteAcls(_)
        | ControllerResponse::AlterClientQuotas(_)
        | ControllerResponse::AlterUserScramCredentials(_) => 0,
    };
    code.err()
}
