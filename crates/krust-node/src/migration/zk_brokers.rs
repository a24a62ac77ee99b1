//! [`ZkBrokerChannels`]: the KRaft controller's connections to ZooKeeper-mode brokers during
//! the migration (Kafka's `ControllerChannelManager` as the `MigrationPropagator` uses it).
//!
//! One queue and one sender task per migrating ZooKeeper broker registered in the image, on
//! the broker's listener named by the controller's `inter.broker.listener.name`. Requests to
//! one broker go out one at a time, in the order given (LeaderAndIsr before the
//! UpdateMetadata that follows it, as Kafka's `RequestSendThread`); a request that cannot be
//! sent (connection refused, timeout) is retried after a backoff until it goes through or the
//! broker's registration changes. A new broker epoch or endpoint replaces the queue: requests
//! built for the old incarnation are dropped (they carry its broker epoch, which the new one
//! would refuse), and the caller sends the new incarnation a full resync.
//!
//! Each answered request is reported as a [`BrokerResponse`] on the channel given to
//! [`ZkBrokerChannels::new`] (top-level and per-partition error codes), for the caller's retry
//! policy, logs and status.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use krust_metadata::MetadataImage;
use krust_net::{Client, ClientConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Pause before resending a request that could not be sent (Kafka's `RequestSendThread`
/// waits `reconnect.backoff.ms`-ish before retrying; 3.9 uses 100 ms).
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// One request for one broker.
#[derive(Debug, Clone)]
pub struct BrokerRequest {
    /// The request.
    pub request: RequestKind,
    /// The API version to send it at (chosen from the cluster's inter-broker protocol).
    pub version: i16,
}

/// What a broker answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerResponse {
    /// The broker.
    pub broker_id: i32,
    /// Its broker epoch when the request was queued.
    pub broker_epoch: i64,
    /// LeaderAndIsr, UpdateMetadata or StopReplica.
    pub api_key: ApiKey,
    /// The top-level error code.
    pub error_code: i16,
    /// (topic name or id text, partition, error code) of every partition that failed.
    pub partition_errors: Vec<(String, i32, i16)>,
}

#[derive(Debug)]
struct BrokerQueue {
    epoch: i64,
    addr: String,
    requests: mpsc::UnboundedSender<BrokerRequest>,
    task: JoinHandle<()>,
}

/// Sender queues to the migrating ZooKeeper brokers.
#[derive(Debug)]
pub struct ZkBrokerChannels {
    listener_name: String,
    client_config: ClientConfig,
    queues: HashMap<i32, BrokerQueue>,
    responses: mpsc::UnboundedSender<BrokerResponse>,
}

impl ZkBrokerChannels {
    /// Channels that reach brokers on their `listener_name` listener and report answers on
    /// `responses`.
    #[must_use]
    pub fn new(
        listener_name: String,
        client_config: ClientConfig,
        responses: mpsc::UnboundedSender<BrokerResponse>,
    ) -> Self {
        Self {
            listener_name,
            client_config,
            queues: HashMap::new(),
            responses,
        }
    }

    /// Follows the image's registrations: a queue per migrating ZooKeeper broker, replaced
    /// when its epoch or endpoint changes, dropped when it is gone or no longer a ZooKeeper
    /// broker. Returns the brokers whose queue is new (they need a full resync).
    pub fn update_brokers(&mut self, image: &MetadataImage) -> Vec<i32> {
        let mut fresh = Vec::new();
        let mut wanted: HashMap<i32, (i64, String)> = HashMap::new();
        for (id, broker) in &image.cluster.brokers {
            if !broker.is_migrating_zk_broker {
                continue;
            }
            let Some(endpoint) = broker.listeners.get(&self.listener_name) else {
                warn!(
                    broker_id = id,
                    listener = %self.listener_name,
                    "a ZooKeeper broker has no listener named by inter.broker.listener.name; it cannot be reached"
                );
                continue;
            };
            wanted.insert(
                *id,
                (broker.epoch, format!("{}:{}", endpoint.host, endpoint.port)),
            );
        }
        self.queues.retain(|id, queue| {
            let keep = wanted
                .get(id)
                .is_some_and(|(epoch, addr)| *epoch == queue.epoch && *addr == queue.addr);
            if !keep {
                queue.task.abort();
            }
            keep
        });
        for (id, (epoch, addr)) in wanted {
            if self.queues.contains_key(&id) {
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let client = Client::new(addr.clone(), self.client_config.clone());
            let task = tokio::spawn(send_loop(id, epoch, client, rx, self.responses.clone()));
            self.queues.insert(
                id,
                BrokerQueue {
                    epoch,
                    addr,
                    requests: tx,
                    task,
                },
            );
            fresh.push(id);
        }
        fresh.sort_unstable();
        fresh
    }

    /// Queues `request` for `broker_id`; `false` when that broker has no queue (not a
    /// registered ZooKeeper broker, or not reachable).
    pub fn send(&self, broker_id: i32, request: BrokerRequest) -> bool {
        self.queues
            .get(&broker_id)
            .is_some_and(|q| q.requests.send(request).is_ok())
    }

    /// The brokers with a queue.
    #[must_use]
    pub fn brokers(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.queues.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

impl Drop for ZkBrokerChannels {
    fn drop(&mut self) {
        for queue in self.queues.values() {
            queue.task.abort();
        }
    }
}

async fn send_loop(
    broker_id: i32,
    broker_epoch: i64,
    client: Client,
    mut requests: mpsc::UnboundedReceiver<BrokerRequest>,
    responses: mpsc::UnboundedSender<BrokerResponse>,
) {
    while let Some(request) = requests.recv().await {
        loop {
            match client.send(request.request.clone(), request.version).await {
                Ok(response) => {
                    let Some(reported) = report(broker_id, broker_epoch, &response) else {
                        warn!(
                            broker_id,
                            "unexpected response kind from a ZooKeeper broker"
                        );
                        break;
                    };
                    debug!(
                        broker_id,
                        api = ?reported.api_key,
                        error_code = reported.error_code,
                        failed_partitions = reported.partition_errors.len(),
                        "ZooKeeper broker answered"
                    );
                    if responses.send(reported).is_err() {
                        return;
                    }
                    break;
                }
                Err(error) => {
                    debug!(broker_id, %error, "cannot reach ZooKeeper broker; retrying");
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }
}

fn report(broker_id: i32, broker_epoch: i64, response: &ResponseKind) -> Option<BrokerResponse> {
    let (api_key, error_code, partition_errors) = match response {
        ResponseKind::LeaderAndIsr(r) => {
            let mut failed = Vec::new();
            for p in &r.partition_errors {
                if p.error_code != 0 {
                    failed.push((p.topic_name.0.to_string(), p.partition_index, p.error_code));
                }
            }
            for t in &r.topics {
                for p in &t.partition_errors {
                    if p.error_code != 0 {
                        failed.push((t.topic_id.to_string(), p.partition_index, p.error_code));
                    }
                }
            }
            (ApiKey::LeaderAndIsr, r.error_code, failed)
        }
        ResponseKind::UpdateMetadata(r) => (ApiKey::UpdateMetadata, r.error_code, Vec::new()),
        ResponseKind::StopReplica(r) => {
            let failed = r
                .partition_errors
                .iter()
                .filter(|p| p.error_code != 0)
                .map(|p| (p.topic_name.0.to_string(), p.partition_index, p.error_code))
                .collect();
            (ApiKey::StopReplica, r.error_code, failed)
        }
        _ => return None,
    };
    Some(BrokerResponse {
        broker_id,
        broker_epoch,
        api_key,
        error_code,
        partition_errors,
    })
}
