//! Measures request/response round trips over 127.0.0.1 with krust-net on both ends: a
//! Metadata request answered by a trivial handler, sent by `PIPELINE` concurrent callers on one
//! connection. Prints numbers; asserts nothing.
//!
//! `cargo run --release -p krust-net --example loopback_rate [requests] [pipeline]`

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::{ApiKey, MetadataRequest, RequestKind, ResponseKind};
use krust_net::{
    ClientConfig, Connection, Handler, Reply, RequestContext, Server, ServerConfig, SupportedApis,
};

struct Answer(SupportedApis);

impl Handler for Answer {
    fn supported_apis(&self) -> &SupportedApis {
        &self.0
    }
    async fn handle(&self, _ctx: RequestContext, _request: RequestKind) -> Reply {
        ResponseKind::Metadata(MetadataResponse::default()).into()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(Ok(50_000), |a| a.parse())?;
    let pipeline: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let handler = Arc::new(Answer(SupportedApis::new([(ApiKey::Metadata, 0, 12)])?));
    let server_config = ServerConfig {
        max_in_flight_requests_per_connection: pipeline,
        ..ServerConfig::default()
    };
    let server = Server::bind("127.0.0.1:0", handler, server_config).await?;
    let client_config = ClientConfig {
        max_in_flight_requests_per_connection: pipeline,
        ..ClientConfig::default()
    };
    let connection =
        Arc::new(Connection::connect(&server.local_addr().to_string(), client_config).await?);
    let started = Instant::now();
    let mut callers = Vec::new();
    for caller in 0..pipeline {
        let connection = connection.clone();
        let share = requests / pipeline + usize::from(caller < requests % pipeline);
        callers.push(tokio::spawn(async move {
            for _ in 0..share {
                connection.send(MetadataRequest::default(), 12).await?;
            }
            Ok::<(), krust_net::ClientError>(())
        }));
    }
    for caller in callers {
        caller.await??;
    }
    let elapsed = started.elapsed();
    println!(
        "{requests} Metadata v12 round trips, {pipeline} in flight: {:.0} requests/s, {:.1} µs each",
        requests as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / requests as f64
    );
    server.shutdown().await;
    Ok(())
}
