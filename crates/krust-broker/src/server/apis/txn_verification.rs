//! KIP-890 part 1 on the partition leader (Kafka 3.9 `ReplicaManager.handleProduceAppend` and
//! `AddPartitionsToTxnManager`, `transaction.partition.verification.enable`, default true):
//! before a producer's first transactional batch of an epoch is appended to a partition, the
//! leader asks the transaction coordinator — the leader of `__transaction_state` partition
//! `abs(javaStringHashCode(transactional.id)) % partitions` — with AddPartitionsToTxn v4
//! `verify_only=true` whether the partition is in the producer's ongoing transaction. A
//! partition that was not added (or whose transaction already ended) is refused, so a late or
//! stray transactional write cannot leave a transaction hanging open on the partition.
//!
//! Answers are mapped as Kafka maps them: per partition PRODUCER_FENCED → INVALID_PRODUCER_EPOCH,
//! TRANSACTION_ABORTABLE → INVALID_TXN_STATE for Produce v ≤ 10; a top-level
//! CLUSTER_AUTHORIZATION_FAILED → INVALID_TXN_STATE; no coordinator → COORDINATOR_NOT_AVAILABLE;
//! a failed round trip → NETWORK_EXCEPTION; a coordinator without AddPartitionsToTxn v4 → the
//! check is skipped. Then for the producer: INVALID_TXN_STATE with "Partition was not added
//! to the transaction", and CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION,
//! COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR as the retriable
//! NOT_ENOUGH_REPLICAS. Transactional records of more than one producer id in one request are
//! INVALID_PRODUCER_ID_MAPPING for every partition.
//!
//! While a producer's verification is in flight on a partition, the partition keeps the lowest
//! first sequence it was asked to verify (Kafka's `VerificationStateEntry`): a batch starting
//! above it is OUT_OF_ORDER_SEQUENCE_NUMBER, so a retried lower batch is not overtaken.
//!
//! Limits: one AddPartitionsToTxn per produce request (Kafka batches the verifications of all
//! requests per coordinator node, one request in flight per node).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ProduceRequest, ProducerId, ResponseKind, TransactionalId,
};
use krust_net::{Client, ClientConfig, ClientError};
use tracing::warn;

use crate::partition::VerificationGuard;
use crate::replicas::PartitionAccess;
use crate::server::Broker;

/// Kafka's `TRANSACTION_STATE_TOPIC_NAME`.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// `transaction.state.log.num.partitions` default.
const DEFAULT_TRANSACTION_STATE_PARTITIONS: i32 = 50;
/// `request.timeout.ms` default.
const DEFAULT_REQUEST_TIMEOUT_MS: i32 = 30_000;

/// Java's `String.hashCode` (`h = 31 * h + c` over UTF-16 code units, wrapping).
#[must_use]
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__transaction_state` partition of `transactional_id` (Kafka's
/// `TransactionStateManager.partitionFor`: `Utils.abs(hashCode) % partitions`, where
/// `abs(Integer.MIN_VALUE)` is 0).
#[must_use]
pub fn transaction_partition_for(transactional_id: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(transactional_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions.max(1)
}

/// What the verification decided for a produce request.
#[derive(Debug, Default)]
pub struct Verified {
    /// Partitions refused before any append: (error code, message). Codes, not
    /// `ResponseError`s: TRANSACTION_ABORTABLE (120) is beyond the codec's enum.
    pub errors: BTreeMap<(String, i32), (i16, Option<String>)>,
    /// Guards of the partitions the coordinator confirmed (or that skipped the check).
    pub guards: BTreeMap<(String, i32), VerificationGuard>,
}

/// Clients to transaction coordinators, by address, for the verification round trips.
#[derive(Default)]
pub struct TxnVerifier {
    clients: Mutex<BTreeMap<String, Arc<Client>>>,
    /// The inter-broker listener's security.
    security: krust_net::security::ClientSecurity,
}

impl std::fmt::Debug for TxnVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnVerifier").finish_non_exhaustive()
    }
}

impl TxnVerifier {
    /// Clients secured as the inter-broker listener is (`security`).
    #[must_use]
    pub fn new(security: krust_net::security::ClientSecurity) -> Self {
        TxnVerifier {
            clients: Mutex::new(BTreeMap::new()),
            security,
        }
    }

    fn client(&self, address: &str, node_id: i32, timeout: Duration) -> Arc<Client> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(clients.entry(address.to_string()).or_insert_with(|| {
            Arc::new(Client::new(
                address.to_string(),
                ClientConfig {
                    client_id: format!("broker-{node_id}-txn-verification"),
                    request_timeout: timeout,
                    negotiate_api_versions: true,
                    security: self.security.clone(),
                    ..ClientConfig::default()
                },
            ))
        }))
    }
}

/// A (topic, partition).
type Tp = (String, i32);
/// The one producer (id, epoch) of a request's transactional batches, and their partitions
/// with the first transactional batch's base sequence in each.
type TransactionalWrite = ((i64, i16), Vec<(Tp, i32)>);

/// Transactional partitions of `request` and their single producer, or `Err` with every
/// partition of the request when records of several producer ids are mixed.
fn transactional_partitions(
    request: &ProduceRequest,
) -> Result<Option<TransactionalWrite>, Vec<Tp>> {
    let mut producers = BTreeSet::new();
    let mut partitions = Vec::new();
    for topic in &request.topic_data {
        for data in &topic.partition_data {
            let Some(records) = &data.records else {
                continue;
            };
            let found = crate::partition::transactional_batches(records);
            if let Some(&(_, _, sequence)) = found.first() {
                producers.extend(found.iter().map(|&(pid, epoch, _)| (pid, epoch)));
                partitions.push(((topic.name.0.to_string(), data.index), sequence));
            }
        }
    }
    match producers.len() {
        0 => Ok(None),
        1 => Ok(producers.pop_first().map(|p| (p, partitions))),
        _ => Err(request
            .topic_data
            .iter()
            .flat_map(|t| {
                t.partition_data
                    .iter()
                    .map(move |p| (t.name.0.to_string(), p.index))
            })
            .collect()),
    }
}

/// Verifies the transactional partitions of a produce request of `version`; see the module
/// doc.
pub async fn verify(broker: &Arc<Broker>, request: &ProduceRequest, version: i16) -> Verified {
    let mut out = Verified::default();
    let config = &broker.config().static_config;
    if config
        .boolean("transaction.partition.verification.enable")
        .is_some_and(|enabled| !enabled)
    {
        return out;
    }
    let ((producer_id, producer_epoch), partitions) = match transactional_partitions(request) {
        Ok(Some(found)) => found,
        Ok(None) => return out,
        Err(all) => {
            for tp in all {
                out.errors
                    .insert(tp, (ResponseError::InvalidProducerIdMapping.code(), None));
            }
            return out;
        }
    };
    // Without a transactional id Kafka skips the round trip; the append then refuses the
    // unverified batch (INVALID_TXN_STATE).
    let Some(transactional_id) = request.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        return out;
    };
    let replicas = broker.replica_manager();
    let mut access = replicas.access();
    let mut pending = BTreeMap::new();
    for ((topic, index), sequence) in partitions {
        match access.with_partition(&topic, index, |p| {
            p.maybe_start_txn_verification(producer_id, producer_epoch, sequence)
        }) {
            Ok(None) => {}
            Ok(Some(guard)) => {
                pending.insert((topic, index), guard);
            }
            Err(e) => {
                out.errors
                    .insert((topic, index), (e.response_error().code(), None));
            }
        }
    }
    if pending.is_empty() {
        return out;
    }
    let unverified = ask_coordinator(
        broker,
        &transactional_id,
        producer_id,
        producer_epoch,
        pending.keys(),
        // Produce v11+ knows TRANSACTION_ABORTABLE.
        version > 10,
    )
    .await;
    for (tp, guard) in pending {
        match unverified.get(&tp) {
            None => {
                out.guards.insert(tp, guard);
            }
            Some(&error) => {
                out.errors.insert(tp, produce_error(error));
            }
        }
    }
    out
}

/// KIP-890 for a TxnOffsetCommit (Kafka 3.9 `GroupCoordinator.handleTxnCommitOffsets` →
/// `ReplicaManager.maybeStartTransactionVerificationForPartition`): the guard of
/// `__consumer_offsets-partition` for the producer once its transaction coordinator confirmed
/// the partition is in the transaction (added by AddOffsetsToTxn); `Ok(None)` when the
/// producer already has a transaction open there or verification is off. `Err` carries the
/// coordinator's (or the partition's) error code, before the group coordinator's mapping.
pub async fn verify_offsets_partition(
    broker: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partition: i32,
    txn_offset_commit_version: i16,
) -> Result<Option<VerificationGuard>, i16> {
    let config = &broker.config().static_config;
    if config
        .boolean("transaction.partition.verification.enable")
        .is_some_and(|enabled| !enabled)
    {
        return Ok(None);
    }
    let topic = crate::server::groups::GROUP_METADATA_TOPIC_NAME.to_string();
    let replicas = broker.replica_manager();
    let mut access = replicas.access();
    let guard = access
        .with_partition(&topic, partition, |p| {
            // Kafka passes `RecordBatch.NO_SEQUENCE` for a TxnOffsetCommit.
            p.maybe_start_txn_verification(producer_id, producer_epoch, -1)
        })
        .map_err(|e| e.response_error().code())?;
    let Some(guard) = guard else {
        return Ok(None);
    };
    let tp = (topic, partition);
    let unverified = ask_coordinator(
        broker,
        transactional_id,
        producer_id,
        producer_epoch,
        std::iter::once(&tp),
        // TxnOffsetCommit v4+ knows TRANSACTION_ABORTABLE (Kafka's `genericError`).
        txn_offset_commit_version >= 4,
    )
    .await;
    match unverified.get(&tp) {
        None => Ok(Some(guard)),
        Some(&code) => Err(code),
    }
}

/// Kafka's `handleProduceAppend` translation of a verification error for the producer.
fn produce_error(code: i16) -> (i16, Option<String>) {
    use krust_net::error_codes as codes;
    match code {
        codes::INVALID_TXN_STATE => (
            code,
            Some("Partition was not added to the transaction".to_string()),
        ),
        codes::CONCURRENT_TRANSACTIONS
        | codes::NETWORK_EXCEPTION
        | codes::COORDINATOR_LOAD_IN_PROGRESS
        | codes::COORDINATOR_NOT_AVAILABLE
        | codes::NOT_COORDINATOR => (
            codes::NOT_ENOUGH_REPLICAS,
            Some(format!(
                "Unable to verify the partition has been added to the transaction. Underlying error: {}",
                codes::name(code).unwrap_or("UNKNOWN_SERVER_ERROR")
            )),
        ),
        other => (other, None),
    }
}

/// AddPartitionsToTxn v4 `verify_only` to the coordinator of `transactional_id`; the
/// partitions it did not confirm, with Kafka's `AddPartitionsToTxnManager` error mapping.
async fn ask_coordinator<'a>(
    broker: &Broker,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: impl Iterator<Item = &'a (String, i32)> + Clone,
    abortable_supported: bool,
) -> BTreeMap<(String, i32), i16> {
    let all = |error: ResponseError| -> BTreeMap<(String, i32), i16> {
        partitions
            .clone()
            .map(|tp| (tp.clone(), error.code()))
            .collect()
    };
    let image = broker.replica_manager().image();
    let config = broker.config();
    let partition_count = image
        .topics
        .topic_by_name(TRANSACTION_STATE_TOPIC)
        .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
        .filter(|&n| n > 0)
        .or_else(|| {
            config
                .static_config
                .int("transaction.state.log.num.partitions")
        })
        .unwrap_or(DEFAULT_TRANSACTION_STATE_PARTITIONS);
    let partition = transaction_partition_for(transactional_id, partition_count);
    let address = image
        .topics
        .topic_by_name(TRANSACTION_STATE_TOPIC)
        .and_then(|t| t.partitions.get(&partition))
        .map(|p| p.leader)
        .filter(|&leader| leader >= 0)
        .and_then(|leader| image.cluster.broker(leader))
        .and_then(|b| b.listeners.get(&config.inter_broker_listener_name))
        .map(|e| format!("{}:{}", e.host, e.port));
    let Some(address) = address else {
        return all(ResponseError::CoordinatorNotAvailable);
    };
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, index) in partitions.clone() {
        topics.entry(topic.as_str()).or_default().push(*index);
    }
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(transactional_id.to_string().into()))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(true)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(crate::produce::topic_name(name))
                            .with_partitions(partitions)
                    })
                    .collect(),
            ),
    ]);
    let timeout_ms = config
        .static_config
        .int("request.timeout.ms")
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let client = broker
        .txn_verifier
        .client(&address, config.node_id, timeout);
    let response = match client.send(request, 4).await {
        Ok(ResponseKind::AddPartitionsToTxn(r)) => r,
        Err(ClientError::NoCommonVersion { .. }) => {
            // Kafka: a coordinator that cannot verify (too old) lets the append go on.
            warn!(%address, "the transaction coordinator cannot verify partitions; skipping the check");
            return BTreeMap::new();
        }
        Ok(_) | Err(_) => return all(ResponseError::NetworkException),
    };
    if response.error_code != 0 {
        let code = if response.error_code == ResponseError::ClusterAuthorizationFailed.code() {
            ResponseError::InvalidTxnState.code()
        } else {
            response.error_code
        };
        return partitions.map(|tp| (tp.clone(), code)).collect();
    }
    let mut out = BTreeMap::new();
    for result in response
        .results_by_transaction
        .iter()
        .filter(|r| r.transactional_id.0.as_str() == transactional_id)
    {
        for topic in &result.topic_results {
            for p in &topic.results_by_partition {
                let code = match p.partition_error_code {
                    0 => continue,
                    c if c == ResponseError::ProducerFenced.code() => {
                        ResponseError::InvalidProducerEpoch.code()
                    }
                    // Older clients do not know TRANSACTION_ABORTABLE.
                    krust_net::error_codes::TRANSACTION_ABORTABLE if !abortable_supported => {
                        ResponseError::InvalidTxnState.code()
                    }
                    other => other,
                };
                out.insert((topic.name.0.to_string(), p.partition_index), code);
            }
        }
    }
    // A partition the coordinator left out of its answer is not confirmed.
    for tp in partitions {
        if !response
            .results_by_transaction
            .iter()
            .flat_map(|r| &r.topic_results)
            .any(|t| {
                t.name.0.as_str() == tp.0
                    && t.results_by_partition
                        .iter()
                        .any(|p| p.partition_index == tp.1)
            })
        {
            out.entry(tp.clone())
                .or_insert(ResponseError::InvalidTxnState.code());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_javas_string_hash_code() {
        // Values of Java's "…".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("krust-txn-check"), {
            let mut h: i32 = 0;
            for c in "krust-txn-check".chars() {
                h = h.wrapping_mul(31).wrapping_add(c as i32);
            }
            h
        });
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(transaction_partition_for("polygenelubricants", 50), 0);
        // "Aa" and "BB" collide in Java.
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
        assert_eq!(java_string_hash("é"), 0xe9);
        assert_eq!(transaction_partition_for("a", 50), 97 % 50);
    }
}
