//! [`NetworkClient`]: one [`Client`] per node id, for senders that address nodes rather than
//! sockets (the Raft driver sends to "node 2", the controller answers brokers by id).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::client::Client;
use crate::config::ClientConfig;
use crate::error::ClientError;

/// Clients keyed by node id. Changing a node's address drops its old client (and connection).
#[derive(Debug)]
pub struct NetworkClient {
    config: ClientConfig,
    nodes: RwLock<HashMap<i32, Arc<Client>>>,
}

impl NetworkClient {
    /// An empty pool whose clients all use `config`.
    #[must_use]
    pub fn new(config: ClientConfig) -> NetworkClient {
        NetworkClient {
            config,
            nodes: RwLock::new(HashMap::new()),
        }
    }

    /// Sets (or changes) the `host:port` of `node_id`. Keeps the existing client when the
    /// address is unchanged.
    pub fn set_node(&self, node_id: i32, addr: impl Into<String>) {
        let addr = addr.into();
        let mut nodes = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        if nodes.get(&node_id).is_some_and(|c| c.addr() == addr) {
            return;
        }
        nodes.insert(node_id, Arc::new(Client::new(addr, self.config.clone())));
    }

    /// Forgets `node_id`; its connection closes once requests in flight on it are done.
    pub fn remove_node(&self, node_id: i32) {
        self.nodes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&node_id);
    }

    /// The client of `node_id`, if its address is known.
    #[must_use]
    pub fn client(&self, node_id: i32) -> Option<Arc<Client>> {
        self.nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node_id)
            .cloned()
    }

    /// The known node ids and addresses, sorted by id.
    #[must_use]
    pub fn nodes(&self) -> Vec<(i32, String)> {
        let nodes = self.nodes.read().unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<_> = nodes
            .iter()
            .map(|(id, client)| (*id, client.addr().to_owned()))
            .collect();
        list.sort_unstable();
        list
    }

    /// Sends `request` at `api_version` to `node_id` (see [`Client::send`]).
    ///
    /// # Errors
    ///
    /// [`ClientError::UnknownNode`], or any error of [`Client::send`].
    pub async fn send(
        &self,
        node_id: i32,
        request: impl Into<RequestKind>,
        api_version: i16,
    ) -> Result<ResponseKind, ClientError> {
        let client = self
            .client(node_id)
            .ok_or(ClientError::UnknownNode { node_id })?;
        client.send(request, api_version).await
    }

    /// Sends `request` to `node_id` at the highest version within `ours` that the node
    /// supports (see [`Client::send_latest`]); returns the version used with the response.
    ///
    /// # Errors
    ///
    /// [`ClientError::UnknownNode`], or any error of [`Client::send_latest`].
    pub async fn send_latest(
        &self,
        node_id: i32,
        request: impl Into<RequestKind>,
        ours: (i16, i16),
    ) -> Result<(i16, ResponseKind), ClientError> {
        let client = self
            .client(node_id)
            .ok_or(ClientError::UnknownNode { node_id })?;
        client.send_latest(request, ours).await
    }
}
