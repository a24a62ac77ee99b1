//! The broker's line to the active controller (Kafka's `NodeToControllerChannelManager`).
//!
//! `krust-node` implements [`ControllerChannel`] (`krust_node::quorum_channel`: it knows the
//! controller listener addresses from `controller.quorum.voters` and the current leader from
//! the Raft observer). Everything in this crate that talks to the
//! controller — lifecycle heartbeats, AlterPartition, AllocateProducerIds, Envelope forwarding —
//! goes through it, so tests can put an in-process fake behind it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use thiserror::Error;

/// A boxed future, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a request did not get an answer from the active controller.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ControllerChannelError {
    /// No active controller answered before the timeout (unknown leader, disconnected,
    /// or it kept answering `NOT_CONTROLLER`).
    #[error("no active controller answered within {0:?}")]
    Timeout(Duration),
    /// The channel is shut down.
    #[error("the controller channel is closed")]
    Closed,
    /// The request cannot be sent at any version both sides support.
    #[error("the controller does not support this request: {0}")]
    Unsupported(String),
}

/// Sends requests to whichever controller is active.
pub trait ControllerChannel: Send + Sync + 'static {
    /// Sends `request` to the active controller at the highest version both sides support
    /// (or `api_version` when given), retrying on disconnects, leader changes and a
    /// top-level `NOT_CONTROLLER` answer until `timeout`. The response is returned as the
    /// controller sent it (per-item errors are the caller's business).
    fn send(
        &self,
        request: RequestKind,
        api_version: Option<i16>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ResponseKind, ControllerChannelError>>;
}
