//! When a forwarded request's answer must go back as an envelope-level NOT_CONTROLLER (Kafka
//! 3.9's `RequestChannel.Request.buildResponseSend`): whenever the inner response counts a
//! NOT_CONTROLLER error anywhere — or, for DescribeQuorum, NOT_LEADER_OR_FOLLOWER — the
//! forwarding broker gets an `EnvelopeResponse` with NOT_CONTROLLER and no payload, so that its
//! controller channel (Kafka's `NodeToControllerRequestThread`) forgets this node, finds the
//! active controller and sends the request again. Handing the inner answer back instead leaves a
//! Kafka broker's channel on a standby for good, and every forwarded admin request of its
//! clients fails with NOT_CONTROLLER.

use kafka_protocol::messages::ResponseKind;
use krust_net::error_codes::{NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER};

/// Whether `response`, the answer to a forwarded request, must become an envelope-level
/// NOT_CONTROLLER.
#[must_use]
pub fn redirects_forwarder(response: &ResponseKind) -> bool {
    match response {
        ResponseKind::DescribeQuorum(r) => {
            r.error_code == NOT_LEADER_OR_FOLLOWER
                || r.topics.iter().any(|t| {
                    t.partitions
                        .iter()
                        .any(|p| p.error_code == NOT_LEADER_OR_FOLLOWER)
                })
        }
        other => error_codes(other).contains(&NOT_CONTROLLER),
    }
}

/// Every error code a response carries (Kafka's `AbstractResponse.errorCounts` keys) for the
/// responses of the APIs a broker forwards; empty for any other.
fn error_codes(response: &ResponseKind) -> Vec<i16> {
    match response {
        ResponseKind::CreateTopics(r) => r.topics.iter().map(|t| t.error_code).collect(),
        ResponseKind::DeleteTopics(r) => r.responses.iter().map(|t| t.error_code).collect(),
        ResponseKind::CreatePartitions(r) => r.results.iter().map(|t| t.error_code).collect(),
        ResponseKind::ElectLeaders(r) => std::iter::once(r.error_code)
            .chain(
                r.replica_election_results
                    .iter()
                    .flat_map(|t| t.partition_result.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().map(|c| c.error_code).collect()
        }
        ResponseKind::AlterConfigs(r) => r.responses.iter().map(|c| c.error_code).collect(),
        ResponseKind::UpdateFeatures(r) => std::iter::once(r.error_code)
            .chain(r.results.iter().map(|f| f.error_code))
            .collect(),
        ResponseKind::CreateAcls(r) => r.results.iter().map(|a| a.error_code).collect(),
        ResponseKind::DeleteAcls(r) => r
            .filter_results
            .iter()
            .flat_map(|f| {
                std::iter::once(f.error_code).chain(f.matching_acls.iter().map(|m| m.error_code))
            })
            .collect(),
        ResponseKind::AlterClientQuotas(r) => r.entries.iter().map(|e| e.error_code).collect(),
        ResponseKind::AlterUserScramCredentials(r) => {
            r.results.iter().map(|u| u.error_code).collect()
        }
        ResponseKind::CreateDelegationToken(r) => vec![r.error_code],
        ResponseKind::RenewDelegationToken(r) => vec![r.error_code],
        ResponseKind::ExpireDelegationToken(r) => vec![r.error_code],
        ResponseKind::AlterPartitionReassignments(r) => std::iter::once(r.error_code)
            .chain(
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ListPartitionReassignments(r) => vec![r.error_code],
        ResponseKind::UnregisterBroker(r) => vec![r.error_code],
        ResponseKind::AllocateProducerIds(r) => vec![r.error_code],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::delete_acls_response::{
        DeleteAclsFilterResult, DeleteAclsMatchingAcl,
    };
    use kafka_protocol::messages::describe_quorum_response::{PartitionData, TopicData};
    use kafka_protocol::messages::{
        CreateTopicsResponse, DeleteAclsResponse, DescribeQuorumResponse, ElectLeadersResponse,
    };

    use super::*;

    fn create_topics(codes: &[i16]) -> ResponseKind {
        ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                codes
                    .iter()
                    .map(|&c| CreatableTopicResult::default().with_error_code(c))
                    .collect(),
            ),
        )
    }

    #[test]
    fn any_not_controller_in_the_answer_redirects_the_forwarder() {
        assert!(redirects_forwarder(&create_topics(&[0, NOT_CONTROLLER])));
        assert!(
            !redirects_forwarder(&create_topics(&[0, 36])),
            "TOPIC_ALREADY_EXISTS"
        );
        assert!(!redirects_forwarder(&create_topics(&[])));
        assert!(redirects_forwarder(&ResponseKind::ElectLeaders(
            ElectLeadersResponse::default().with_error_code(NOT_CONTROLLER)
        )));
        // Nested: a matching ACL's error counts too.
        let nested = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![
                DeleteAclsMatchingAcl::default().with_error_code(NOT_CONTROLLER),
            ]),
        ]);
        assert!(redirects_forwarder(&ResponseKind::DeleteAcls(nested)));
    }

    #[test]
    fn describe_quorum_from_a_non_leader_redirects_the_forwarder() {
        let partition_error = DescribeQuorumResponse::default().with_topics(vec![
            TopicData::default().with_partitions(vec![
                PartitionData::default().with_error_code(NOT_LEADER_OR_FOLLOWER),
            ]),
        ]);
        assert!(redirects_forwarder(&ResponseKind::DescribeQuorum(
            partition_error
        )));
        assert!(!redirects_forwarder(&ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
        )));
        // NOT_CONTROLLER is not the DescribeQuorum rule (Kafka checks NOT_LEADER_OR_FOLLOWER).
        assert!(!redirects_forwarder(&ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default().with_error_code(NOT_CONTROLLER)
        )));
    }
}
