//! `krust metadata-quorum`: Kafka's `kafka-metadata-quorum.sh` (`MetadataQuorumCommand`),
//! `describe --status` and `describe --replication [--human-readable]`, with Kafka 3.9's output
//! layout (facts §7.2).
//!
//! Like Kafka's admin client with `--bootstrap-controller` (KIP-919), it asks a bootstrap
//! controller DescribeCluster (endpoint type CONTROLLER) for the cluster id and the active
//! controller, then sends DescribeQuorum to that controller. With `--bootstrap-server` the
//! DescribeQuorum goes to the bootstrap broker (which forwards it).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use kafka_protocol::messages::describe_quorum_response::{Node, ReplicaState};
use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeQuorumRequest, DescribeQuorumResponse, ResponseKind,
    TopicName, describe_quorum_request,
};
use kafka_protocol::protocol::StrBytes;
use krust_net::security::ClientSecurity;
use krust_net::{ClientConfig, Connection};
use uuid::Uuid;

/// What to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Describe {
    /// `describe --status`.
    Status,
    /// `describe --replication`, timestamps relative with `--human-readable`.
    Replication {
        /// `--human-readable`.
        human_readable: bool,
    },
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// `--bootstrap-controller host:port[,host:port…]`.
    Controller(String),
    /// `--bootstrap-server host:port[,host:port…]`.
    Server(String),
}

/// Overall time budget of one command (Kafka's admin `default.api.timeout.ms` is 60 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between attempts while no leader is known.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// Runs `metadata-quorum … describe`; returns the exit code.
///
/// # Errors
/// No bootstrap address answered, or the quorum has no leader within the time budget.
pub fn run_describe(
    bootstrap: &Bootstrap,
    security: &ClientSecurity,
    what: Describe,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (cluster_id, quorum) = describe_secured(bootstrap, security, COMMAND_TIMEOUT)?;
    match what {
        Describe::Status => print_status(&cluster_id, &quorum, out)?,
        Describe::Replication { human_readable } => {
            print_replication(&quorum, human_readable, unix_ms(), out)?;
        }
    }
    Ok(0)
}

/// The cluster id and the quorum as the active controller describes it, retrying (every
/// 200 ms) while no leader is known, for at most `timeout`, over PLAINTEXT connections.
///
/// # Errors
/// Nothing answered with a leader within `timeout`; a non-retriable error code.
pub fn describe(bootstrap: &Bootstrap, timeout: Duration) -> anyhow::Result<(String, QuorumInfo)> {
    describe_secured(bootstrap, &ClientSecurity::default(), timeout)
}

/// As [`describe`], over connections secured as `security` says (the tool's
/// `--command-config`).
///
/// # Errors
/// As [`describe`]; a connection that fails authentication, an authorization refusal.
pub fn describe_secured(
    bootstrap: &Bootstrap,
    security: &ClientSecurity,
    timeout: Duration,
) -> anyhow::Result<(String, QuorumInfo)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        tokio::time::timeout(timeout, fetch(bootstrap, security))
            .await
            .map_err(|_| anyhow::anyhow!("timed out after {timeout:?} waiting for the quorum"))?
    })
}

/// The parts of DescribeQuorum the tool prints.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumInfo {
    /// Leader id.
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// High watermark.
    pub high_watermark: i64,
    /// Voters.
    pub voters: Vec<ReplicaState>,
    /// Observers.
    pub observers: Vec<ReplicaState>,
    /// Endpoints by node (v2).
    pub nodes: Vec<Node>,
}

fn split_addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn connect(addr: &str, security: &ClientSecurity) -> anyhow::Result<Connection> {
    let config = ClientConfig {
        client_id: "krust-metadata-quorum".to_owned(),
        request_timeout: Duration::from_secs(10),
        negotiate_api_versions: true,
        security: security.clone(),
        ..ClientConfig::default()
    };
    Connection::connect(addr, config)
        .await
        .with_context(|| format!("connecting to {addr}"))
}

async fn fetch(
    bootstrap: &Bootstrap,
    security: &ClientSecurity,
) -> anyhow::Result<(String, QuorumInfo)> {
    let (list, controller) = match bootstrap {
        Bootstrap::Controller(l) => (l, true),
        Bootstrap::Server(l) => (l, false),
    };
    let addresses = split_addresses(list);
    if addresses.is_empty() {
        bail!("no bootstrap address given");
    }
    let mut last_error = anyhow::anyhow!("no bootstrap address answered");
    loop {
        for addr in &addresses {
            match describe_once(addr, controller, security).await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(e) if not_retriable(&e) => return Err(e),
                Err(e) => last_error = e,
            }
        }
        tracing::debug!(error = %last_error, "retrying");
        // Bounded by the caller's COMMAND_TIMEOUT.
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}

/// CLUSTER_AUTHORIZATION_FAILED: the principal may not do this; asking again cannot help.
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// An answer that asking again cannot change (an authorization refusal): the command stops at
/// once, as Kafka's admin client does on a non-retriable error.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Whether `e` ends the command at once: an authorization refusal, or a connection that failed
/// authentication (TLS or SASL).
fn not_retriable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<Refused>()
            || cause
                .downcast_ref::<krust_net::ClientError>()
                .is_some_and(|c| !c.is_retriable())
    })
}

/// One attempt through `addr`; `Ok(None)` while the quorum has no leader yet.
async fn describe_once(
    addr: &str,
    controller: bool,
    security: &ClientSecurity,
) -> anyhow::Result<Option<(String, QuorumInfo)>> {
    let connection = connect(addr, security).await?;
    let version = connection.usable_version(ApiKey::DescribeCluster, (0, 1))?;
    let mut request = DescribeClusterRequest::default();
    if version >= 1 {
        request.endpoint_type = if controller { 2 } else { 1 };
    }
    let ResponseKind::DescribeCluster(cluster) = connection.send(request, version).await? else {
        bail!("{addr} answered DescribeCluster with another response type");
    };
    if cluster.error_code == CLUSTER_AUTHORIZATION_FAILED {
        return Err(Refused(format!(
            "{addr}: DescribeCluster failed with error code {} (CLUSTER_AUTHORIZATION_FAILED): {}",
            cluster.error_code,
            cluster.error_message.as_ref().map_or("", |m| m.as_str())
        ))
        .into());
    }
    if cluster.error_code != 0 {
        bail!(
            "{addr}: DescribeCluster failed with error code {}: {}",
            cluster.error_code,
            cluster.error_message.as_ref().map_or("", |m| m.as_str())
        );
    }
    let cluster_id = cluster.cluster_id.to_string();
    let target = if controller {
        if cluster.controller_id.0 < 0 {
            return Ok(None);
        }
        let Some(active) = cluster
            .brokers
            .iter()
            .find(|b| b.broker_id == cluster.controller_id)
        else {
            return Ok(None);
        };
        Some(format!("{}:{}", active.host.as_str(), active.port))
    } else {
        None
    };
    let quorum_connection = match &target {
        Some(t) if t != addr => connect(t, security).await?,
        _ => connection,
    };
    let version = quorum_connection.usable_version(ApiKey::DescribeQuorum, (0, 2))?;
    let request = DescribeQuorumRequest::default().with_topics(vec![
        describe_quorum_request::TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![
                describe_quorum_request::PartitionData::default().with_partition_index(0),
            ]),
    ]);
    let ResponseKind::DescribeQuorum(response) = quorum_connection.send(request, version).await?
    else {
        bail!("DescribeQuorum answered with another response type");
    };
    Ok(quorum_info(&response)?.map(|q| (cluster_id, q)))
}

/// The quorum of a DescribeQuorum response; `Ok(None)` for a retriable "no leader" answer.
///
/// # Errors
/// A non-retriable error code or a malformed response.
pub fn quorum_info(response: &DescribeQuorumResponse) -> anyhow::Result<Option<QuorumInfo>> {
    // NOT_LEADER_OR_FOLLOWER (6) and BROKER_NOT_AVAILABLE (8): the leader moved; ask again.
    let retriable = |code: i16| code == 6 || code == 8;
    if retriable(response.error_code) {
        return Ok(None);
    }
    let refused = |code: i16| -> anyhow::Error {
        Refused(format!(
            "DescribeQuorum failed with error code {code} (CLUSTER_AUTHORIZATION_FAILED)"
        ))
        .into()
    };
    if response.error_code == CLUSTER_AUTHORIZATION_FAILED {
        return Err(refused(response.error_code));
    }
    if response.error_code != 0 {
        bail!(
            "DescribeQuorum failed with error code {}",
            response.error_code
        );
    }
    let Some(partition) = response.topics.first().and_then(|t| t.partitions.first()) else {
        bail!("DescribeQuorum response names no partition");
    };
    if retriable(partition.error_code) {
        return Ok(None);
    }
    if partition.error_code == CLUSTER_AUTHORIZATION_FAILED {
        return Err(refused(partition.error_code));
    }
    if partition.error_code != 0 {
        bail!(
            "DescribeQuorum failed with error code {}",
            partition.error_code
        );
    }
    if partition.leader_id.0 < 0 {
        return Ok(None);
    }
    Ok(Some(QuorumInfo {
        leader_id: partition.leader_id.0,
        leader_epoch: partition.leader_epoch,
        high_watermark: partition.high_watermark,
        voters: partition.current_voters.clone(),
        observers: partition.observers.clone(),
        nodes: response.nodes.clone(),
    }))
}

fn leader_state(quorum: &QuorumInfo) -> anyhow::Result<&ReplicaState> {
    quorum
        .voters
        .iter()
        .find(|v| v.replica_id.0 == quorum.leader_id)
        .with_context(|| format!("leader {} is not among the voters", quorum.leader_id))
}

fn kafka_uuid(uuid: &Uuid) -> String {
    krust_metadata::kafka_uuid::to_kafka_string(uuid)
}

/// `{"id": 1, "directoryId": null, "endpoints": ["CONTROLLER://host:9093"]}` as Kafka 3.9 prints it.
fn replica_json(replica: &ReplicaState, nodes: &[Node], voter: bool) -> String {
    let mut text = format!("{{\"id\": {}", replica.replica_id.0);
    if replica.replica_directory_id.is_nil() {
        text.push_str(", \"directoryId\": null");
    } else {
        text.push_str(&format!(
            ", \"directoryId\": \"{}\"",
            kafka_uuid(&replica.replica_directory_id)
        ));
    }
    let endpoints: Vec<String> = nodes
        .iter()
        .filter(|_| voter)
        .filter(|n| n.node_id == replica.replica_id)
        .flat_map(|n| n.listeners.iter())
        .map(|l| {
            let host = l.host.as_str();
            if host.contains(':') {
                format!("\"{}://[{host}]:{}\"", l.name.as_str(), l.port)
            } else {
                format!("\"{}://{host}:{}\"", l.name.as_str(), l.port)
            }
        })
        .collect();
    if !endpoints.is_empty() {
        text.push_str(&format!(", \"endpoints\": [{}]", endpoints.join(", ")));
    }
    text.push('}');
    text
}

/// Prints `describe --status`.
///
/// # Errors
/// The leader is not among the voters; write errors.
pub fn print_status(
    cluster_id: &str,
    quorum: &QuorumInfo,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let leader = leader_state(quorum)?;
    let Some(lagging) = quorum.voters.iter().min_by_key(|v| v.log_end_offset) else {
        bail!("the quorum has no voters");
    };
    let max_lag = leader.log_end_offset - lagging.log_end_offset;
    let max_lag_time_ms = if lagging.replica_id == leader.replica_id {
        0
    } else if leader.last_caught_up_timestamp >= 0 && lagging.last_caught_up_timestamp >= 0 {
        leader.last_caught_up_timestamp - lagging.last_caught_up_timestamp
    } else {
        -1
    };
    let list = |replicas: &[ReplicaState], voter: bool| {
        let items: Vec<String> = replicas
            .iter()
            .map(|r| replica_json(r, &quorum.nodes, voter))
            .collect();
        format!("[{}]", items.join(", "))
    };
    let rows = [
        ("ClusterId:", cluster_id.to_owned()),
        ("LeaderId:", quorum.leader_id.to_string()),
        ("LeaderEpoch:", quorum.leader_epoch.to_string()),
        ("HighWatermark:", quorum.high_watermark.to_string()),
        ("MaxFollowerLag:", max_lag.to_string()),
        ("MaxFollowerLagTimeMs:", max_lag_time_ms.to_string()),
        ("CurrentVoters:", list(&quorum.voters, true)),
        ("CurrentObservers:", list(&quorum.observers, false)),
    ];
    for (label, value) in rows {
        writeln!(out, "{label:<24}{value}")?;
    }
    Ok(())
}

/// Prints `describe --replication`: Kafka's `prettyPrintTable` (each cell left-aligned to the
/// column's widest cell, then a TAB).
///
/// # Errors
/// The leader is not among the voters; write errors.
pub fn print_replication(
    quorum: &QuorumInfo,
    human_readable: bool,
    now_ms: i64,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let leader = leader_state(quorum)?;
    let stamp = |ms: i64| {
        if ms < 0 {
            "-1".to_owned()
        } else if human_readable {
            format!("{} ms ago", (now_ms - ms).max(0))
        } else {
            ms.to_string()
        }
    };
    let row = |r: &ReplicaState, status: &str| {
        vec![
            r.replica_id.0.to_string(),
            kafka_uuid(&r.replica_directory_id),
            r.log_end_offset.to_string(),
            (leader.log_end_offset - r.log_end_offset).to_string(),
            stamp(r.last_fetch_timestamp),
            stamp(r.last_caught_up_timestamp),
            status.to_owned(),
        ]
    };
    let mut rows = vec![row(leader, "Leader")];
    rows.extend(
        quorum
            .voters
            .iter()
            .filter(|v| v.replica_id != leader.replica_id)
            .map(|v| row(v, "Follower")),
    );
    rows.extend(quorum.observers.iter().map(|o| row(o, "Observer")));
    let header: Vec<String> = [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    for r in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (cell, width) in r.iter().zip(&widths) {
            line.push_str(&format!("{cell:<width$}\t"));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::describe_quorum_response::Listener;

    fn replica(id: i32, leo: i64, caught_up: i64) -> ReplicaState {
        ReplicaState::default()
            .with_replica_id(BrokerId(id))
            .with_log_end_offset(leo)
            .with_last_fetch_timestamp(caught_up)
            .with_last_caught_up_timestamp(caught_up)
    }

    fn quorum() -> QuorumInfo {
        QuorumInfo {
            leader_id: 2,
            leader_epoch: 5,
            high_watermark: 10,
            voters: vec![
                replica(1, 10, 1000),
                replica(2, 12, 1500),
                replica(3, 12, 1500),
            ],
            observers: vec![],
            nodes: vec![
                Node::default()
                    .with_node_id(BrokerId(1))
                    .with_listeners(vec![
                        Listener::default()
                            .with_name(StrBytes::from_static_str("CONTROLLER"))
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(9093),
                    ]),
            ],
        }
    }

    #[test]
    fn status_has_kafkas_labels_padding_and_lag() {
        let mut out = Vec::new();
        print_status("abc", &quorum(), &mut out).expect("print");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ClusterId:              abc");
        assert_eq!(lines[1], "LeaderId:               2");
        assert_eq!(
            lines[4], "MaxFollowerLag:         2",
            "leader LEO 12 - min voter LEO 10"
        );
        assert_eq!(lines[5], "MaxFollowerLagTimeMs:   500", "1500 - 1000");
        assert_eq!(
            lines[6],
            "CurrentVoters:          [{\"id\": 1, \"directoryId\": null, \"endpoints\": [\"CONTROLLER://127.0.0.1:9093\"]}, {\"id\": 2, \"directoryId\": null}, {\"id\": 3, \"directoryId\": null}]"
        );
        assert_eq!(lines[7], "CurrentObservers:       []");
    }

    #[test]
    fn replication_table_lists_leader_first_then_followers_tab_separated() {
        let mut out = Vec::new();
        print_replication(&quorum(), false, 2000, &mut out).expect("print");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("NodeId\tDirectoryId           \tLogEndOffset\tLag\t"));
        let cells: Vec<&str> = lines[1].split('\t').map(str::trim).collect();
        assert_eq!(
            cells[..7],
            [
                "2",
                "AAAAAAAAAAAAAAAAAAAAAA",
                "12",
                "0",
                "1500",
                "1500",
                "Leader"
            ]
        );
        let cells: Vec<&str> = lines[2].split('\t').map(str::trim).collect();
        assert_eq!(
            cells[..7],
            [
                "1",
                "AAAAAAAAAAAAAAAAAAAAAA",
                "10",
                "2",
                "1000",
                "1000",
                "Follower"
            ]
        );
    }

    #[test]
    fn human_readable_timestamps_are_relative() {
        let mut out = Vec::new();
        print_replication(&quorum(), true, 2000, &mut out).expect("print");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("500 ms ago"), "{text}");
    }

    #[test]
    fn not_leader_answer_is_retried_not_fatal() {
        let response = DescribeQuorumResponse::default().with_error_code(6);
        assert_eq!(quorum_info(&response).expect("retriable"), None);
        let response = DescribeQuorumResponse::default().with_error_code(42);
        assert!(quorum_info(&response).is_err());
    }
}
