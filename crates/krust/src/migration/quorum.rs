//! The quorum's committed metadata image, read the way a broker reads it: as an observer of
//! `__cluster_metadata-0` on the leader controller (Kafka protocol Fetch, topic id
//! `AAAAAAAAAAAAAAAAAAAAAQ`, `ReplicaState.ReplicaId = -1`: an observer that is not a replica,
//! so the leader tracks no progress for it), FetchSnapshot when the log starts at a snapshot,
//! the batches below the high watermark replayed with krust-metadata's `MetadataBatchLoader`.
//! krust's Raft layer answers a Fetch with replica id -1 like any observer's (it only skips
//! replica bookkeeping for negative ids), so no observer id is taken.

use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchSnapshotRequest, ResponseKind, TopicName, fetch_request,
    fetch_snapshot_request,
};
use kafka_protocol::protocol::StrBytes;
use krust_log::batch::RecordBatch;
use krust_metadata::image::MetadataBatchLoader;
use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_migration::tools::status::CopyCounter;
use krust_net::security::ClientSecurity;
use krust_net::{ClientConfig, Connection};
use uuid::Uuid;

use crate::metadata_quorum::{self, Bootstrap, QuorumInfo};

/// `__cluster_metadata`'s topic id (Kafka's `Uuid.METADATA_TOPIC_ID`).
const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The replica id of a fetcher that is not a replica.
const OBSERVER_ID: i32 = -1;
const MAX_BYTES: i32 = 8 * 1024 * 1024;
/// Largest batch accepted.
const MAX_BATCH_BYTES: usize = i32::MAX as usize;

/// What was read from the quorum.
#[derive(Debug, Clone)]
pub struct QuorumRead {
    /// The cluster id the controllers report.
    pub cluster_id: String,
    /// The quorum as DescribeQuorum describes it.
    pub quorum: QuorumInfo,
    /// The committed image.
    pub image: MetadataImage,
    /// The high watermark the image was read up to.
    pub high_watermark: i64,
    /// Records of the initial copy, if the replayed log held it.
    pub copied_records: Option<usize>,
    /// The leader's snapshot (end offset, epoch) the read started from, if any.
    pub snapshot: Option<(i64, i32)>,
    /// Problems met while replaying (records that did not replay).
    pub warnings: Vec<String>,
}

async fn connect(addr: &str, security: &ClientSecurity) -> anyhow::Result<Connection> {
    let config = ClientConfig {
        client_id: "krust-migration".to_owned(),
        request_timeout: Duration::from_secs(10),
        negotiate_api_versions: true,
        security: security.clone(),
        ..ClientConfig::default()
    };
    Connection::connect(addr, config)
        .await
        .with_context(|| format!("connecting to controller {addr}"))
}

fn leader_address(quorum: &QuorumInfo, bootstrap: &str) -> String {
    quorum
        .nodes
        .iter()
        .find(|n| n.node_id.0 == quorum.leader_id)
        .and_then(|n| n.listeners.first())
        .map(|l| format!("{}:{}", l.host.as_str(), l.port))
        .unwrap_or_else(|| {
            bootstrap
                .split(',')
                .next()
                .unwrap_or(bootstrap)
                .trim()
                .to_owned()
        })
}

/// Reads the quorum's committed image through `bootstrap` (`host:port,…` of controllers).
///
/// # Errors
/// No controller answered, the leader refused the fetch, or the log did not decode.
pub async fn read_image(
    bootstrap: &str,
    security: &ClientSecurity,
    timeout: Duration,
) -> anyhow::Result<QuorumRead> {
    let b = Bootstrap::Controller(bootstrap.to_owned());
    let describe_security = security.clone();
    let (cluster_id, quorum) = tokio::task::spawn_blocking(move || {
        metadata_quorum::describe_secured(&b, &describe_security, timeout)
    })
    .await
    .context("describing the quorum")??;
    let leader = leader_address(&quorum, bootstrap);
    let connection = connect(&leader, security).await?;
    let mut loader = MetadataBatchLoader::new(MetadataImage::empty());
    let mut counter = CopyCounter::default();
    let mut warnings = Vec::new();
    let mut offset = 0i64;
    let mut last_epoch = 0i32;
    let mut target_hw: Option<i64> = None;
    let mut stalls = 0u32;
    let mut snapshot_read = None;
    loop {
        let answer = fetch(
            &connection,
            &cluster_id,
            quorum.leader_epoch,
            offset,
            last_epoch,
        )
        .await?;
        let hw = *target_hw.get_or_insert(answer.high_watermark);
        let latest_hw = answer.high_watermark;
        if let Some((end_offset, epoch)) = answer.snapshot {
            let bytes = fetch_snapshot(
                &connection,
                &cluster_id,
                quorum.leader_epoch,
                end_offset,
                epoch,
            )
            .await?;
            let contents = krust_raft::snapshot::read_snapshot(bytes, Some(epoch))
                .context("reading the leader's snapshot")?;
            let mut records = Vec::with_capacity(contents.records.len());
            for (index, value) in contents.records.iter().enumerate() {
                let framed = ApiMessageAndVersion::decode(value)
                    .with_context(|| format!("snapshot {end_offset}-{epoch}: record {index}"))?;
                records.push(framed.record);
            }
            let provenance = MetadataProvenance::new(
                end_offset - 1,
                epoch,
                contents.header.last_contained_log_timestamp,
            );
            let (_, faults) = loader.load_snapshot(&records, provenance);
            warnings.extend(faults.iter().map(ToString::to_string));
            offset = end_offset;
            last_epoch = epoch;
            snapshot_read = Some((end_offset, epoch));
            continue;
        }
        if offset >= hw {
            break;
        }
        let mut rest = answer.records;
        let mut progressed = false;
        while !rest.is_empty() {
            let Ok((batch, tail)) = RecordBatch::parse(rest.clone(), MAX_BATCH_BYTES) else {
                // A partial batch at the end of the response: fetched again next round.
                break;
            };
            rest = tail;
            if batch.last_offset() >= hw {
                break;
            }
            if batch.last_offset() < offset {
                continue;
            }
            progressed = true;
            offset = batch.last_offset() + 1;
            last_epoch = batch.partition_leader_epoch();
            if batch.is_control() {
                continue;
            }
            let records = batch
                .records()
                .with_context(|| format!("batch at offset {}", batch.base_offset()))?;
            let mut decoded: Vec<MetadataRecord> = Vec::with_capacity(records.len());
            for record in &records {
                let Some(value) = record.value.as_deref() else {
                    bail!("record in batch {} has no value", batch.base_offset());
                };
                let framed = ApiMessageAndVersion::decode(value)
                    .with_context(|| format!("record in batch {}", batch.base_offset()))?;
                counter.observe(&framed.record);
                decoded.push(framed.record);
            }
            let outcome = loader.load_batch(
                batch.base_offset(),
                batch.partition_leader_epoch(),
                batch.max_timestamp(),
                &decoded,
            );
            warnings.extend(outcome.faults.iter().map(ToString::to_string));
        }
        if !progressed {
            // The batch at `offset` is not entirely committed yet: read up to the newer high
            // watermark (bounded by the caller's timeout and this count).
            stalls += 1;
            if stalls > 100 {
                bail!(
                    "the leader returned no committed batch at offset {offset} (high watermark \
                     {hw})"
                );
            }
            target_hw = Some(latest_hw.max(hw));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let image = match loader.maybe_flush() {
        Some(publication) => publication.image,
        None => loader.image().clone(),
    };
    Ok(QuorumRead {
        cluster_id,
        quorum,
        image,
        high_watermark: target_hw.unwrap_or(0),
        copied_records: counter.copied(),
        snapshot: snapshot_read,
        warnings,
    })
}

struct FetchAnswer {
    high_watermark: i64,
    snapshot: Option<(i64, i32)>,
    records: Bytes,
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(METADATA_TOPIC))
}

async fn fetch(
    connection: &Connection,
    cluster_id: &str,
    leader_epoch: i32,
    offset: i64,
    last_epoch: i32,
) -> anyhow::Result<FetchAnswer> {
    let version = connection.usable_version(ApiKey::Fetch, (12, 17))?;
    let partition = fetch_request::FetchPartition::default()
        .with_partition(0)
        .with_current_leader_epoch(leader_epoch)
        .with_fetch_offset(offset)
        .with_last_fetched_epoch(last_epoch)
        .with_partition_max_bytes(MAX_BYTES);
    let request = FetchRequest::default()
        .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_owned())))
        .with_replica_id(BrokerId(OBSERVER_ID))
        .with_replica_state(
            fetch_request::ReplicaState::default().with_replica_id(BrokerId(OBSERVER_ID)),
        )
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(MAX_BYTES)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(topic_name())
                .with_topic_id(METADATA_TOPIC_ID)
                .with_partitions(vec![partition]),
        ]);
    let ResponseKind::Fetch(response) = connection.send(request, version).await? else {
        bail!("the controller answered Fetch with another response type");
    };
    if response.error_code != 0 {
        bail!(
            "the leader refused the metadata Fetch: error code {}",
            response.error_code
        );
    }
    let Some(p) = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
    else {
        bail!("the Fetch response names no partition");
    };
    if p.error_code != 0 {
        bail!(
            "the leader refused the metadata Fetch: error code {} (leader now {} epoch {})",
            p.error_code,
            p.current_leader.leader_id.0,
            p.current_leader.leader_epoch
        );
    }
    if p.diverging_epoch.epoch >= 0 && p.diverging_epoch.end_offset >= 0 {
        bail!(
            "the leader's log diverges at epoch {} offset {} (it changed while being read): retry",
            p.diverging_epoch.epoch,
            p.diverging_epoch.end_offset
        );
    }
    let snapshot = (p.snapshot_id.end_offset >= 0 && p.snapshot_id.epoch >= 0)
        .then_some((p.snapshot_id.end_offset, p.snapshot_id.epoch));
    Ok(FetchAnswer {
        high_watermark: p.high_watermark,
        snapshot,
        records: p.records.clone().unwrap_or_default(),
    })
}

async fn fetch_snapshot(
    connection: &Connection,
    cluster_id: &str,
    leader_epoch: i32,
    end_offset: i64,
    epoch: i32,
) -> anyhow::Result<Bytes> {
    let version = connection.usable_version(ApiKey::FetchSnapshot, (0, 1))?;
    let mut bytes = Vec::new();
    loop {
        let position = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        let partition = fetch_snapshot_request::PartitionSnapshot::default()
            .with_partition(0)
            .with_current_leader_epoch(leader_epoch)
            .with_snapshot_id(
                fetch_snapshot_request::SnapshotId::default()
                    .with_end_offset(end_offset)
                    .with_epoch(epoch),
            )
            .with_position(position);
        let request = FetchSnapshotRequest::default()
            .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_owned())))
            .with_replica_id(BrokerId(OBSERVER_ID))
            .with_max_bytes(MAX_BYTES)
            .with_topics(vec![
                fetch_snapshot_request::TopicSnapshot::default()
                    .with_name(topic_name())
                    .with_partitions(vec![partition]),
            ]);
        let ResponseKind::FetchSnapshot(response) = connection.send(request, version).await? else {
            bail!("the controller answered FetchSnapshot with another response type");
        };
        if response.error_code != 0 {
            bail!(
                "FetchSnapshot failed with error code {}",
                response.error_code
            );
        }
        let Some(p) = response.topics.first().and_then(|t| t.partitions.first()) else {
            bail!("the FetchSnapshot response names no partition");
        };
        if p.error_code != 0 {
            bail!("FetchSnapshot failed with error code {}", p.error_code);
        }
        if p.unaligned_records.is_empty() && (bytes.len() as u64) < p.size.unsigned_abs() {
            bail!("FetchSnapshot returned no bytes at position {position}");
        }
        bytes.extend_from_slice(&p.unaligned_records);
        if bytes.len() as u64 >= p.size.unsigned_abs() {
            return Ok(Bytes::from(bytes));
        }
    }
}
