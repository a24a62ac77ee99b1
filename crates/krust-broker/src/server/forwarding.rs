//! Admin requests a broker forwards to the active controller in an `Envelope` (KIP-590):
//! CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, AlterConfigs,
//! ElectLeaders, UpdateFeatures, … with the original request header and principal.
//!
//! CONTRACT (used by [`super::apis`]): [`Forwarder::forwarded_apis`] lists the APIs and
//! versions forwarded; [`Forwarder::forward`] answers one of them.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind};
use krust_net::{Reply, RequestContext};

use super::controller_channel::ControllerChannel;

/// Forwards admin requests to the controller.
pub struct Forwarder {
    _channel: Arc<dyn ControllerChannel>,
}

impl Forwarder {
    /// Over `channel`.
    #[must_use]
    pub fn new(channel: Arc<dyn ControllerChannel>) -> Self {
        Forwarder { _channel: channel }
    }

    /// The forwarded APIs with the version range the broker advertises for each.
    #[must_use]
    pub fn forwarded_apis() -> Vec<(ApiKey, i16, i16)> {
        todo!("forwarding")
    }

    /// Forwards one request and turns the controller's answer into the client's response.
    pub async fn forward(&self, _ctx: &RequestContext, _request: RequestKind) -> Reply {
        todo!("forwarding")
    }
}
