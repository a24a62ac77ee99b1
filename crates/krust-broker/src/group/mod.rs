//! The classic group coordinator (Kafka 3.9's classic protocol, KIP-394, KIP-345), one
//! sans-IO shard per `__consumer_offsets` partition.
//!
//! # Layout
//!
//! - [`shard`]: [`GroupCoordinatorShard`] — requests in with explicit `now_ms`, actions out
//!   (records to append, responses released once the appends before them are committed),
//!   timers (`poll_timeout` / `handle_timeout`), loading by `replay`.
//! - [`classic`]: [`ClassicGroup`] — members, generation, protocol selection, leader and the
//!   Empty / PreparingRebalance / CompletingRebalance / Stable / Dead state machine.
//! - [`records`]: OffsetCommit and GroupMetadata keys/values in Kafka's byte format.
//! - [`config`]: [`GroupConfig`] (Kafka's `group.*` / `offsets.*` defaults) and
//!   [`partition_for_group`] (`abs(groupId.hashCode()) % offsets.topic.num.partitions`).
//! - [`error`]: [`GroupError`] and its one mapping to Kafka error codes.
//!
//! # Driving a shard
//!
//! ```text
//! shard.replay(now, key, value)?            // loading: every record of the partition, in order
//! shard.handle_request(now, id, &ctx, req)  // ctx: api_version, client_id, client_host
//! shard.handle_timeout(now)                 // when poll_timeout() is due
//! while let Some(a) = shard.poll_action() {
//!     Append { append_id, records, txn } => append record.encode() bytes (txn: as one
//!                                      transactional batch of that producer); later
//!                                      shard.handle_append_committed(append_id), or
//!                                      handle_append_rejected(append_id, e) if the
//!                                      partition refused a txn batch for its producer
//!     Respond { request_id, response } => send
//! }
//! ```
//!
//! # Limits
//!
//! - Classic groups only: no KIP-848 consumer groups.
//! - TxnOffsetCommit offsets (and those of transactional batches loaded from the log) are held
//!   per producer until its COMMIT/ABORT marker is replayed or reported
//!   (`handle_txn_marker`); OffsetFetch `require_stable` answers UNSTABLE_OFFSET_COMMIT for
//!   them meanwhile. A TxnOffsetCommit's append carries its producer ([`shard::TxnAppend`])
//!   and goes alone; a refusal for the producer's sake (`handle_append_rejected`) undoes only
//!   its pending offsets.
//! - A failed append does not roll back memory (Kafka reverts a timeline snapshot): the shard
//!   answers NOT_COORDINATOR from then on and must be reloaded from the log.
//! - ListGroups answers for this shard's groups; the broker merges the shards.
//! - New members never take a group above `group.max.size` (Kafka may briefly exceed it
//!   during a rebalance); protocol vote ties are broken by name (Kafka: hash map order).
//! - A loaded GroupMetadataValue v0/v1 (no state timestamp) counts as entering its state at
//!   load time for offset expiry (Kafka falls back to each offset's commit timestamp).
pub mod classic;
pub mod config;
pub mod error;
pub mod records;
pub mod shard;

pub use classic::{ClassicGroup, ClassicMember, GroupState};
pub use config::{GroupConfig, java_string_hash, partition_for_group};
pub use error::GroupError;
pub use records::{
    CoordinatorRecord, GroupMetadataValue, MemberMetadata, OffsetCommitValue, RecordDecodeError,
};
pub use shard::{
    Action, AppendId, CommittedOffset, GroupCoordinatorShard, GroupRequest, GroupResponse,
    RequestContext, RequestId, TxnAppend, txn_offset_commit_error,
};
