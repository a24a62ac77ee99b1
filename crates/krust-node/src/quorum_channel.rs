//! The broker's [`ControllerChannel`] (Kafka's `NodeToControllerChannelManager`): requests go
//! to the active controller's listener over a [`krust_net::Client`] per voter.
//!
//! The active controller is the Raft leader this node's replica last saw
//! ([`RaftHandle::watch_status`]: the observer learns it from its Fetch answers, a voter from
//! the election). Until the deadline, a request is retried when no leader is known, when the
//! connection fails, and when the answer's top-level error is `NOT_CONTROLLER` (a leader change
//! the replica has not seen yet), after [`RETRY_BACKOFF`] or as soon as the leader changes; a
//! request still in flight when the leader changes is abandoned and sent to the new one.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use krust_broker::server::controller_channel::{
    BoxFuture, ControllerChannel, ControllerChannelError,
};
use krust_net::{Client, ClientConfig, ClientError};
use krust_raft::config::VoterAddress;
use krust_raft::driver::{RaftHandle, RaftStatus};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

/// Pause before retrying after a failure or a `NOT_CONTROLLER` answer (unless the leader
/// changes first).
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
use krust_net::error_codes::NOT_CONTROLLER;

/// Requests to whichever controller is active (see the module doc).
pub struct QuorumChannel {
    /// Voter id → `host:port` of its controller listener.
    voters: BTreeMap<i32, String>,
    status: watch::Receiver<RaftStatus>,
    clients: Mutex<HashMap<i32, Arc<Client>>>,
    client_config: ClientConfig,
    closed: AtomicBool,
}

impl std::fmt::Debug for QuorumChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumChannel")
            .field("voters", &self.voters)
            .finish_non_exhaustive()
    }
}

impl QuorumChannel {
    /// A channel to `voters`, following the leader `raft` sees.
    #[must_use]
    pub fn new(voters: &[VoterAddress], raft: &RaftHandle, client_id: String) -> Self {
        QuorumChannel {
            voters: voters
                .iter()
                .map(|v| (v.id.0, format!("{}:{}", v.host, v.port)))
                .collect(),
            status: raft.watch_status(),
            clients: Mutex::new(HashMap::new()),
            client_config: ClientConfig {
                client_id,
                negotiate_api_versions: true,
                ..ClientConfig::default()
            },
            closed: AtomicBool::new(false),
        }
    }

    /// The channel with the controller listener's client-side security (TLS, SASL).
    #[must_use]
    pub fn with_security(mut self, security: krust_net::security::ClientSecurity) -> Self {
        self.client_config.security = security;
        self
    }

    /// Fails every request from now on with [`ControllerChannelError::Closed`].
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// The active controller's id, if known and one of the voters.
    fn leader(&self) -> Option<i32> {
        let leader = self.status.borrow().metrics.current_leader;
        self.voters.contains_key(&leader).then_some(leader)
    }

    fn client(&self, id: i32) -> Option<Arc<Client>> {
        let address = self.voters.get(&id)?;
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(
            clients
                .entry(id)
                .or_insert_with(|| {
                    Arc::new(Client::new(address.clone(), self.client_config.clone()))
                })
                .clone(),
        )
    }

    /// Sleeps [`RETRY_BACKOFF`] or until the known leader changes, whichever is first, but not
    /// past `deadline`.
    async fn backoff(&self, deadline: Instant) {
        let mut status = self.status.clone();
        let current = status.borrow_and_update().metrics.current_leader;
        let until = (Instant::now() + RETRY_BACKOFF).min(deadline);
        let _ = tokio::time::timeout_at(
            until,
            status.wait_for(|s| s.metrics.current_leader != current),
        )
        .await;
    }

    async fn send_inner(
        &self,
        request: RequestKind,
        api_version: Option<i16>,
        timeout: Duration,
    ) -> Result<ResponseKind, ControllerChannelError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(ControllerChannelError::Closed);
            }
            if Instant::now() >= deadline {
                return Err(ControllerChannelError::Timeout(timeout));
            }
            let Some((leader, client)) = self
                .leader()
                .and_then(|id| self.client(id).map(|client| (id, client)))
            else {
                self.backoff(deadline).await;
                continue;
            };
            let attempt = async {
                match api_version {
                    Some(version) => client.send(request.clone(), version).await,
                    None => client
                        .send_latest(request.clone(), (0, i16::MAX))
                        .await
                        .map(|(_, response)| response),
                }
            };
            // A request in flight to a controller that is no longer the leader (it may be dead,
            // its connection not yet known to be broken) is abandoned as soon as the replica
            // learns of the new leader, and sent again there.
            let mut status = self.status.clone();
            let leader_changed = async move {
                let _ = status
                    .wait_for(|s| s.metrics.current_leader != leader)
                    .await;
            };
            let outcome = tokio::select! {
                outcome = tokio::time::timeout_at(deadline, attempt) => Some(outcome),
                () = leader_changed => None,
            };
            // The attempt is dropped by now (it may have held the client's connection lock).
            let Some(outcome) = outcome else {
                debug!(
                    controller = client.addr(),
                    "the active controller changed; resending"
                );
                client.disconnect().await;
                continue;
            };
            match outcome {
                Err(_) => return Err(ControllerChannelError::Timeout(timeout)),
                Ok(Ok(response)) if top_level_not_controller(&response) => {
                    debug!(controller = client.addr(), "NOT_CONTROLLER; retrying");
                    self.backoff(deadline).await;
                }
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(ClientError::NoCommonVersion { api_key, .. })) => {
                    return Err(ControllerChannelError::Unsupported(format!("{api_key:?}")));
                }
                Ok(Err(e)) => {
                    debug!(controller = client.addr(), error = %e, "controller request failed; retrying");
                    self.backoff(deadline).await;
                }
            }
        }
    }
}

/// Whether the answer as a whole says "not the active controller" (a standby's answer).
fn top_level_not_controller(response: &ResponseKind) -> bool {
    match response {
        ResponseKind::Envelope(r) => r.error_code == NOT_CONTROLLER,
        ResponseKind::BrokerRegistration(r) => r.error_code == NOT_CONTROLLER,
        ResponseKind::BrokerHeartbeat(r) => r.error_code == NOT_CONTROLLER,
        ResponseKind::AlterPartition(r) => r.error_code == NOT_CONTROLLER,
        ResponseKind::AllocateProducerIds(r) => r.error_code == NOT_CONTROLLER,
        ResponseKind::UnregisterBroker(r) => r.error_code == NOT_CONTROLLER,
        // A standby answers every topic with NOT_CONTROLLER.
        ResponseKind::CreateTopics(r) => {
            !r.topics.is_empty() && r.topics.iter().all(|t| t.error_code == NOT_CONTROLLER)
        }
        _ => false,
    }
}

impl ControllerChannel for QuorumChannel {
    fn send(
        &self,
        request: RequestKind,
        api_version: Option<i16>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>> {
        Box::pin(self.send_inner(request, api_version, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::{
        BrokerHeartbeatResponse, CreateTopicsResponse, EnvelopeResponse,
    };

    #[test]
    fn only_whole_answer_not_controller_errors_are_retried() {
        let heartbeat = |code| {
            ResponseKind::BrokerHeartbeat(BrokerHeartbeatResponse::default().with_error_code(code))
        };
        assert!(top_level_not_controller(&heartbeat(NOT_CONTROLLER)));
        assert!(!top_level_not_controller(&heartbeat(0)));
        assert!(top_level_not_controller(&ResponseKind::Envelope(
            EnvelopeResponse::default().with_error_code(NOT_CONTROLLER)
        )));
        let topics = |codes: &[i16]| {
            ResponseKind::CreateTopics(
                CreateTopicsResponse::default().with_topics(
                    codes
                        .iter()
                        .map(|c| CreatableTopicResult::default().with_error_code(*c))
                        .collect(),
                ),
            )
        };
        assert!(top_level_not_controller(&topics(&[
            NOT_CONTROLLER,
            NOT_CONTROLLER
        ])));
        assert!(
            !top_level_not_controller(&topics(&[NOT_CONTROLLER, 36])),
            "a per-topic answer from the active controller is final"
        );
        assert!(!top_level_not_controller(&topics(&[])));
    }
}
