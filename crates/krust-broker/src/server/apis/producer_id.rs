//! InitProducerId (22) for idempotent producers (no `transactional.id`; Kafka's
//! `TransactionCoordinator.handleInitProducerId` without a transactional id): a fresh
//! producer id with epoch 0 every time, taken from blocks the controller hands out through
//! AllocateProducerIds (Kafka's `RPCProducerIdManager`). Transactional producers go to the
//! transaction coordinator ([`crate::server::txn`]; `COORDINATOR_NOT_AVAILABLE` on a broker
//! without one), an empty transactional id gets `INVALID_REQUEST` as in Kafka.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, BrokerId, InitProducerIdRequest, InitProducerIdResponse,
    ProducerId, RequestKind, ResponseKind,
};
use tokio::sync::Mutex;
use tracing::warn;

use crate::server::Broker;

/// How long to wait for the controller's block.
const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(5);

/// The current block of producer ids: `[next, end)`.
#[derive(Debug, Default)]
pub struct ProducerIdManager {
    block: Mutex<(i64, i64)>,
}

impl ProducerIdManager {
    /// The next producer id, fetching a new block from the controller when this one is used
    /// up.
    ///
    /// # Errors
    /// `COORDINATOR_LOAD_IN_PROGRESS` while no block can be had (as Kafka's
    /// `RPCProducerIdManager`): clients retry it, where any other code would be fatal to
    /// their producer.
    pub async fn next_id(&self, broker: &Broker) -> Result<i64, ResponseError> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            let image = broker.replica_manager().image();
            let node_id = broker.config().node_id;
            let broker_epoch = image.cluster.broker(node_id).map_or(-1, |b| b.epoch);
            let request = AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(node_id))
                .with_broker_epoch(broker_epoch);
            let response = broker
                .channel()
                .send(
                    RequestKind::AllocateProducerIds(request),
                    None,
                    ALLOCATE_TIMEOUT,
                )
                .await
                .map_err(|error| {
                    warn!(%error, "AllocateProducerIds failed");
                    ResponseError::CoordinatorLoadInProgress
                })?;
            let ResponseKind::AllocateProducerIds(r) = response else {
                return Err(ResponseError::CoordinatorLoadInProgress);
            };
            if r.error_code != 0 || r.producer_id_len <= 0 || r.producer_id_start.0 < 0 {
                warn!(
                    code = r.error_code,
                    start = r.producer_id_start.0,
                    len = r.producer_id_len,
                    "AllocateProducerIds refused"
                );
                return Err(ResponseError::CoordinatorLoadInProgress);
            }
            *block = (
                r.producer_id_start.0,
                r.producer_id_start
                    .0
                    .saturating_add(i64::from(r.producer_id_len)),
            );
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}

/// Handles an InitProducerId request.
pub async fn handle(
    broker: &Arc<Broker>,
    request: &InitProducerIdRequest,
    version: i16,
) -> ResponseKind {
    let mut response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    match request.transactional_id.as_ref().map(|t| t.0.is_empty()) {
        None => {}
        // Kafka's TransactionCoordinator refuses an empty transactional id.
        Some(true) => {
            response.error_code = ResponseError::InvalidRequest.code();
            return ResponseKind::InitProducerId(response);
        }
        Some(false) => {
            let Some(txn) = broker.txn() else {
                response.error_code = ResponseError::CoordinatorNotAvailable.code();
                return ResponseKind::InitProducerId(response);
            };
            // The shard needs a fresh id only for a new transactional id or an exhausted
            // epoch; without one it answers COORDINATOR_LOAD_IN_PROGRESS in those cases.
            let txn_id = request
                .transactional_id
                .as_ref()
                .map_or("", |t| t.0.as_str());
            let new_producer_id = if txn.needs_new_producer_id(txn_id).await {
                broker.producer_ids.next_id(broker).await.ok()
            } else {
                None
            };
            return ResponseKind::InitProducerId(
                txn.init_producer_id(version, request, new_producer_id)
                    .await,
            );
        }
    }
    match broker.producer_ids.next_id(broker).await {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::InitProducerId(response)
}
