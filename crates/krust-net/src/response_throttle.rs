//! The `throttle_time_ms` field every quota-aware response carries (KIP-219), read and
//! raised for any [`ResponseKind`] — Kafka's `AbstractResponse.throttleTimeMs` /
//! `maybeSetThrottleTimeMs`. The list is every Kafka 3.9 response with the field.

use kafka_protocol::messages::ResponseKind;

macro_rules! with_throttle_field {
    ($response:expr, |$r:ident| $body:expr, $otherwise:expr) => {
        match $response {
            ResponseKind::AddOffsetsToTxn($r) => $body,
            ResponseKind::AddPartitionsToTxn($r) => $body,
            ResponseKind::AddRaftVoter($r) => $body,
            ResponseKind::AllocateProducerIds($r) => $body,
            ResponseKind::AlterClientQuotas($r) => $body,
            ResponseKind::AlterConfigs($r) => $body,
            ResponseKind::AlterPartitionReassignments($r) => $body,
            ResponseKind::AlterPartition($r) => $body,
            ResponseKind::AlterReplicaLogDirs($r) => $body,
            ResponseKind::AlterUserScramCredentials($r) => $body,
            ResponseKind::ApiVersions($r) => $body,
            ResponseKind::AssignReplicasToDirs($r) => $body,
            ResponseKind::BrokerHeartbeat($r) => $body,
            ResponseKind::BrokerRegistration($r) => $body,
            ResponseKind::ConsumerGroupDescribe($r) => $body,
            ResponseKind::ConsumerGroupHeartbeat($r) => $body,
            ResponseKind::ControllerRegistration($r) => $body,
            ResponseKind::CreateAcls($r) => $body,
            ResponseKind::CreateDelegationToken($r) => $body,
            ResponseKind::CreatePartitions($r) => $body,
            ResponseKind::CreateTopics($r) => $body,
            ResponseKind::DeleteAcls($r) => $body,
            ResponseKind::DeleteGroups($r) => $body,
            ResponseKind::DeleteRecords($r) => $body,
            ResponseKind::DeleteTopics($r) => $body,
            ResponseKind::DescribeAcls($r) => $body,
            ResponseKind::DescribeClientQuotas($r) => $body,
            ResponseKind::DescribeCluster($r) => $body,
            ResponseKind::DescribeConfigs($r) => $body,
            ResponseKind::DescribeDelegationToken($r) => $body,
            ResponseKind::DescribeGroups($r) => $body,
            ResponseKind::DescribeLogDirs($r) => $body,
            ResponseKind::DescribeProducers($r) => $body,
            ResponseKind::DescribeTopicPartitions($r) => $body,
            ResponseKind::DescribeTransactions($r) => $body,
            ResponseKind::DescribeUserScramCredentials($r) => $body,
            ResponseKind::ElectLeaders($r) => $body,
            ResponseKind::EndTxn($r) => $body,
            ResponseKind::ExpireDelegationToken($r) => $body,
            ResponseKind::Fetch($r) => $body,
            ResponseKind::FetchSnapshot($r) => $body,
            ResponseKind::FindCoordinator($r) => $body,
            ResponseKind::GetTelemetrySubscriptions($r) => $body,
            ResponseKind::Heartbeat($r) => $body,
            ResponseKind::IncrementalAlterConfigs($r) => $body,
            ResponseKind::InitProducerId($r) => $body,
            ResponseKind::JoinGroup($r) => $body,
            ResponseKind::LeaveGroup($r) => $body,
            ResponseKind::ListClientMetricsResources($r) => $body,
            ResponseKind::ListGroups($r) => $body,
            ResponseKind::ListOffsets($r) => $body,
            ResponseKind::ListPartitionReassignments($r) => $body,
            ResponseKind::ListTransactions($r) => $body,
            ResponseKind::Metadata($r) => $body,
            ResponseKind::OffsetCommit($r) => $body,
            ResponseKind::OffsetDelete($r) => $body,
            ResponseKind::OffsetFetch($r) => $body,
            ResponseKind::OffsetForLeaderEpoch($r) => $body,
            ResponseKind::Produce($r) => $body,
            ResponseKind::PushTelemetry($r) => $body,
            ResponseKind::RemoveRaftVoter($r) => $body,
            ResponseKind::RenewDelegationToken($r) => $body,
            ResponseKind::SyncGroup($r) => $body,
            ResponseKind::TxnOffsetCommit($r) => $body,
            ResponseKind::UnregisterBroker($r) => $body,
            ResponseKind::UpdateFeatures($r) => $body,
            ResponseKind::UpdateRaftVoter($r) => $body,
            _ => $otherwise,
        }
    };
}

/// The response's `throttle_time_ms`; `None` for a response without the field.
#[must_use]
pub fn throttle_time_ms(response: &ResponseKind) -> Option<i32> {
    with_throttle_field!(response, |r| Some(r.throttle_time_ms), None)
}

/// Raises the response's `throttle_time_ms` to `ms` (the larger of the two is kept, as a
/// response throttled by two quotas carries the longer throttle); no-op without the field.
pub fn raise_throttle_time_ms(response: &mut ResponseKind, ms: i32) {
    with_throttle_field!(
        response,
        |r| r.throttle_time_ms = r.throttle_time_ms.max(ms),
        ()
    );
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{CreateTopicsResponse, MetadataResponse, ResponseKind};

    use super::*;

    #[test]
    fn the_longer_throttle_is_kept() {
        let mut r =
            ResponseKind::CreateTopics(CreateTopicsResponse::default().with_throttle_time_ms(300));
        raise_throttle_time_ms(&mut r, 100);
        assert_eq!(throttle_time_ms(&r), Some(300));
        raise_throttle_time_ms(&mut r, 900);
        assert_eq!(throttle_time_ms(&r), Some(900));
        let mut m = ResponseKind::Metadata(MetadataResponse::default());
        raise_throttle_time_ms(&mut m, 5);
        assert_eq!(throttle_time_ms(&m), Some(5));
    }
}
