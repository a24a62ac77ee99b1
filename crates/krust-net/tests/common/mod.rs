//! A test listener: answers ApiVersions, Metadata, Vote and Fetch with values derived from the
//! request, so a round trip shows the request arrived intact, and has a few misbehaviours on
//! purpose (never answer, no response, close).

#![allow(dead_code)] // each test binary uses a different part

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseBroker};
use kafka_protocol::messages::vote_response::{self, VoteResponse};
use kafka_protocol::messages::{ApiKey, BrokerId, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use krust_net::{Handler, Reply, RequestContext, SupportedApis};
use tokio::sync::watch;

/// Node id the test listener claims in Metadata.
pub const NODE_ID: i32 = 1;

pub struct TestHandler {
    pub apis: SupportedApis,
    /// Port advertised in Metadata (the listener's own, set after bind).
    pub advertised_port: Mutex<i32>,
    /// Fetch session ids in the order their handling *finished*.
    pub finished: Mutex<Vec<i32>>,
    /// Every context seen, in arrival order.
    pub contexts: Mutex<Vec<RequestContext>>,
    /// When each request reached the handler (tokio's clock, virtual in paused tests).
    pub handled_at: Mutex<Vec<tokio::time::Instant>>,
    finished_tx: watch::Sender<Vec<i32>>,
    finished_rx: watch::Receiver<Vec<i32>>,
}

impl TestHandler {
    pub fn new() -> Arc<TestHandler> {
        TestHandler::with_api_versions(0, 4)
    }

    /// A handler whose ApiVersions range is `min..=max`.
    pub fn with_api_versions(min: i16, max: i16) -> Arc<TestHandler> {
        let apis = SupportedApis::new([
            (ApiKey::ApiVersions, min, max),
            (ApiKey::Metadata, 0, 12),
            (ApiKey::Vote, 0, 1),
            (ApiKey::Fetch, 4, 17),
            (ApiKey::BeginQuorumEpoch, 0, 1),
            (ApiKey::EndQuorumEpoch, 0, 1),
            (ApiKey::DescribeQuorum, 0, 2),
            (ApiKey::AddRaftVoter, 0, 0),
            (ApiKey::RemoveRaftVoter, 0, 0),
        ])
        .expect("valid API list");
        let (finished_tx, finished_rx) = watch::channel(Vec::new());
        Arc::new(TestHandler {
            apis,
            advertised_port: Mutex::new(0),
            finished: Mutex::new(Vec::new()),
            contexts: Mutex::new(Vec::new()),
            handled_at: Mutex::new(Vec::new()),
            finished_tx,
            finished_rx,
        })
    }
}

impl Handler for TestHandler {
    fn supported_apis(&self) -> &SupportedApis {
        &self.apis
    }

    async fn handle(&self, ctx: RequestContext, request: RequestKind) -> Reply {
        let version = ctx.api_version;
        self.handled_at
            .lock()
            .expect("lock")
            .push(tokio::time::Instant::now());
        let throttle = ctx.throttle.clone();
        self.contexts.lock().expect("lock").push(ctx);
        match request {
            // Replica id -7: a quota throttle of `max_wait_ms` on the connection, answered at
            // once with it in `throttle_time_ms` (as a broker's quota managers do).
            RequestKind::Fetch(r) if r.replica_id.0 == -7 => {
                throttle.throttle(Duration::from_millis(
                    u64::try_from(r.max_wait_ms).unwrap_or(0),
                ));
                ResponseKind::Fetch(
                    FetchResponse::default()
                        .with_session_id(r.session_id)
                        .with_throttle_time_ms(r.max_wait_ms),
                )
                .into()
            }
            RequestKind::ApiVersions(r) => {
                ResponseKind::ApiVersions(self.apis.respond_to(&r, version)).into()
            }
            RequestKind::Metadata(_) => {
                let port = *self.advertised_port.lock().expect("lock");
                let broker = MetadataResponseBroker::default()
                    .with_node_id(BrokerId(NODE_ID))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(port);
                let response = MetadataResponse::default()
                    .with_brokers(vec![broker])
                    .with_cluster_id(Some(StrBytes::from_static_str("krust-net-test")))
                    .with_controller_id(BrokerId(NODE_ID));
                ResponseKind::Metadata(response).into()
            }
            RequestKind::Vote(r) => {
                // Echo the candidate's epoch and id as leader epoch and id.
                let topics = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                vote_response::PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_leader_id(p.candidate_id)
                                    .with_leader_epoch(p.candidate_epoch)
                                    .with_vote_granted(true)
                            })
                            .collect();
                        vote_response::TopicData::default()
                            .with_topic_name(t.topic_name.clone())
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::Vote(VoteResponse::default().with_topics(topics)).into()
            }
            RequestKind::Fetch(r) => {
                // `max_wait_ms` is how long to take; with `min_bytes` 1 the request also waits
                // until session `session_id + 1` has finished (a deterministic reverse order).
                // The session id is echoed.
                let delay = u64::try_from(r.max_wait_ms).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if r.min_bytes == 1 {
                    let mut finished = self.finished_rx.clone();
                    let next = r.session_id + 1;
                    let _ = finished.wait_for(|done| done.contains(&next)).await;
                }
                self.finished.lock().expect("lock").push(r.session_id);
                self.finished_tx.send_modify(|done| done.push(r.session_id));
                ResponseKind::Fetch(FetchResponse::default().with_session_id(r.session_id)).into()
            }
            // Never answers: for client timeouts and shutdown with requests in flight.
            RequestKind::BeginQuorumEpoch(_) => std::future::pending().await,
            RequestKind::EndQuorumEpoch(_) => Reply::Close,
            RequestKind::DescribeQuorum(_) => Reply::NoResponse,
            // A handler bug: the server must close the connection, nothing else.
            RequestKind::AddRaftVoter(_) => panic!("test handler panics on purpose"),
            // A handler bug: another API's response.
            RequestKind::RemoveRaftVoter(_) => {
                ResponseKind::Metadata(MetadataResponse::default()).into()
            }
            _ => Reply::Close,
        }
    }
}
