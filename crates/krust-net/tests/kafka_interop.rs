//! Interop with Apache Kafka 3.9 (jars from `scripts/fetch-kafka.sh`, run by `krust-testkit`):
//! * Kafka's own client (`kafka.admin.BrokerApiVersionsCommand`: ApiVersions, then Metadata,
//!   then ApiVersions to every broker found) talks to a krust-net server, including the
//!   KIP-511 fallback when the server knows fewer ApiVersions versions than the client;
//! * the krust-net client negotiates versions with a real Kafka 3.9 node and exchanges
//!   Metadata (broker listener) and DescribeQuorum and Vote (controller listener) with it.

mod common;

use std::time::Duration;

use common::{NODE_ID, TestHandler};
use kafka_protocol::messages::describe_quorum_request::{self, DescribeQuorumRequest};
use kafka_protocol::messages::vote_request::{self, VoteRequest};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use krust_net::{ClientConfig, Connection, Server, ServerConfig};
use krust_testkit::{KafkaDist, KafkaNode};

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh) and java")
}

/// Runs `BrokerApiVersionsCommand` against a krust-net server whose ApiVersions range is
/// `0..=api_versions_max`, and returns the tool's stdout and the ApiVersions versions the
/// handler was asked with.
async fn broker_api_versions(api_versions_max: i16) -> (String, Vec<i16>, u16) {
    let handler = TestHandler::with_api_versions(0, api_versions_max);
    let server = Server::bind("127.0.0.1:0", handler.clone(), ServerConfig::default())
        .await
        .expect("bind");
    let port = server.local_addr().port();
    *handler.advertised_port.lock().expect("lock") = i32::from(port);
    let dist = dist();
    let bootstrap = format!("127.0.0.1:{port}");
    let output = tokio::task::spawn_blocking(move || {
        dist.run_tool(
            "kafka.admin.BrokerApiVersionsCommand",
            &["--bootstrap-server", &bootstrap],
            TOOL_TIMEOUT,
        )
    })
    .await
    .expect("tool thread")
    .expect("tool ran")
    .ok()
    .expect("BrokerApiVersionsCommand succeeded");
    let versions = handler
        .contexts
        .lock()
        .expect("lock")
        .iter()
        .filter(|c| c.api_key == ApiKey::ApiVersions)
        .map(|c| c.api_version)
        .collect();
    server.shutdown().await;
    (output.stdout, versions, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_broker_api_versions_command_reads_our_server() {
    let (stdout, versions, port) = broker_api_versions(4).await;
    assert!(
        stdout.contains(&format!("127.0.0.1:{port} (id: {NODE_ID} rack: null) -> (")),
        "{stdout}"
    );
    for line in [
        "Fetch(1): 4 to 17 [usable: 17]",
        "Metadata(3): 0 to 12 [usable: 12]",
        "ApiVersions(18): 0 to 4 [usable: 4]",
        "Vote(52): 0 to 1 [usable: 1]",
        "DescribeQuorum(55): 0 to 2 [usable: 2]",
        "Produce(0): UNSUPPORTED",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        versions.iter().all(|v| *v == 4),
        "Kafka's client speaks ApiVersions v4: {versions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_client_falls_back_when_our_server_knows_fewer_api_versions() {
    // The v4 request gets our v0 UNSUPPORTED_VERSION answer listing ApiVersions 0..=2; Kafka's
    // client must retry at v2 (the v4 attempt never reaches the handler).
    let (stdout, versions, _port) = broker_api_versions(2).await;
    assert!(
        stdout.contains("ApiVersions(18): 0 to 2 [usable: 2]"),
        "{stdout}"
    );
    assert!(
        !versions.is_empty() && versions.iter().all(|v| *v == 2),
        "handled ApiVersions versions: {versions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_talks_to_a_kafka_node() {
    let dist = dist();
    let node = tokio::task::spawn_blocking(move || KafkaNode::start_combined(&dist))
        .await
        .expect("start thread")
        .expect("Kafka 3.9 node started");
    let broker = format!("127.0.0.1:{}", node.broker_port().expect("broker port"));
    let controller = node.bootstrap_controller();
    let config = ClientConfig {
        client_id: "krust-net-interop".to_owned(),
        request_timeout: Duration::from_secs(30),
        negotiate_api_versions: true,
        ..ClientConfig::default()
    };

    // Broker listener: versions negotiated at connect, then Metadata at the newest common one.
    let connection = Connection::connect(&broker, config.clone())
        .await
        .expect("connect to the broker listener");
    let table = connection.api_versions().expect("negotiated");
    assert_eq!(table.server_range(ApiKey::ApiVersions), Some((0, 4)));
    assert_eq!(table.server_range(ApiKey::Fetch).map(|r| r.1), Some(17));
    let version = connection
        .usable_version(ApiKey::Metadata, (0, 12))
        .expect("Metadata");
    assert_eq!(version, 12);
    let ResponseKind::Metadata(metadata) = connection
        .send(MetadataRequest::default(), version)
        .await
        .expect("Metadata")
    else {
        panic!("not Metadata");
    };
    assert_eq!(metadata.brokers.len(), 1);
    assert_eq!(metadata.brokers[0].node_id, BrokerId(node.node_id()));
    assert_eq!(
        metadata.cluster_id.as_ref().map(|c| c.to_string()),
        Some(node.cluster_id().to_owned())
    );

    // Controller listener: the Raft RPCs.
    let connection = Connection::connect(&controller, config)
        .await
        .expect("connect to the controller listener");
    let table = connection.api_versions().expect("negotiated");
    assert_eq!(table.server_range(ApiKey::Vote), Some((0, 1)));
    assert_eq!(table.server_range(ApiKey::FetchSnapshot), Some((0, 1)));

    let partition = describe_quorum_request::PartitionData::default().with_partition_index(0);
    let topic = describe_quorum_request::TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![partition]);
    let ResponseKind::DescribeQuorum(quorum) = connection
        .send(DescribeQuorumRequest::default().with_topics(vec![topic]), 2)
        .await
        .expect("DescribeQuorum")
    else {
        panic!("not DescribeQuorum");
    };
    assert_eq!(quorum.error_code, 0);
    let partition = &quorum.topics[0].partitions[0];
    assert_eq!(
        partition.leader_id,
        BrokerId(node.node_id()),
        "sole voter leads"
    );
    assert!(partition.leader_epoch >= 1);

    // A Vote from a stranger with another cluster id: Kafka answers INCONSISTENT_CLUSTER_ID (104).
    let vote_partition = vote_request::PartitionData::default()
        .with_candidate_epoch(partition.leader_epoch + 1)
        .with_candidate_id(BrokerId(99));
    let vote_topic = vote_request::TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![vote_partition]);
    let vote = VoteRequest::default()
        .with_cluster_id(Some(StrBytes::from_static_str("not-this-cluster")))
        .with_voter_id(BrokerId(node.node_id()))
        .with_topics(vec![vote_topic]);
    let ResponseKind::Vote(vote) = connection.send(vote, 1).await.expect("Vote") else {
        panic!("not Vote");
    };
    assert_eq!(vote.error_code, 104);
    drop(node); // SIGKILLed on drop; temp dir removed
}
