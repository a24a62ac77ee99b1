//! The `__consumer_offsets` records of classic groups, byte-compatible with Kafka 3.9's
//! schemas (`group-coordinator/src/main/resources/common/message/`):
//!
//! | key version | key              | value                                  |
//! |-------------|------------------|----------------------------------------|
//! | 0, 1        | OffsetCommitKey  | OffsetCommitValue v0–v4 (v4 flexible)  |
//! | 2           | GroupMetadataKey | GroupMetadataValue v0–v4 (v4 flexible) |
//!
//! Each key and value starts with its int16 schema version. A null value is a tombstone.
//! Kafka 3.9 writes OffsetCommitKey v1, OffsetCommitValue v3 (v1 when the commit carries an
//! expire timestamp), GroupMetadataKey v2 and GroupMetadataValue v3; krust writes the same.
//! All versions are read. Key versions 3+ (KIP-848 consumer-group records) are refused with
//! [`RecordDecodeError::UnsupportedKeyVersion`].

use bytes::{BufMut, Bytes, BytesMut};

/// Why a `__consumer_offsets` record could not be decoded. Bytes come from disk: every length
/// is checked before it is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordDecodeError {
    /// The bytes end before the field does: a torn or corrupt record.
    #[error("{what}: need {need} more bytes, have {have}")]
    Truncated {
        /// Record part being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A length prefix is negative where null is not allowed, or a string is not UTF-8.
    #[error("{what}: invalid field")]
    InvalidField {
        /// Record part being read.
        what: &'static str,
    },
    /// Bytes follow the last field.
    #[error("{what}: {extra} trailing bytes")]
    TrailingBytes {
        /// Record part being read.
        what: &'static str,
        /// How many.
        extra: usize,
    },
    /// A key version this coordinator does not handle (3+ are KIP-848 consumer groups).
    #[error("unsupported record key version {0}")]
    UnsupportedKeyVersion(i16),
    /// A value version outside the schema's valid versions.
    #[error("unsupported {what} version {version}")]
    UnsupportedValueVersion {
        /// Value schema.
        what: &'static str,
        /// Its version.
        version: i16,
    },
}

/// OffsetCommitValue: one committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    /// Committed offset.
    pub offset: i64,
    /// Leader epoch of the committed offset, -1 if unknown (v3+).
    pub leader_epoch: i32,
    /// Client metadata string.
    pub metadata: String,
    /// When the coordinator accepted the commit.
    pub commit_timestamp_ms: i64,
    /// Explicit expiry (OffsetCommit v2–v4 `retention_time_ms`); written as value v1.
    pub expire_timestamp_ms: Option<i64>,
}

/// One member in a GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    /// Member id.
    pub member_id: String,
    /// Static membership id (v3+).
    pub group_instance_id: Option<String>,
    /// Client id from the JoinGroup request header.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// Rebalance timeout (v1+).
    pub rebalance_timeout_ms: i32,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Protocol metadata of the group's selected protocol.
    pub subscription: Bytes,
    /// Assignment from the leader's SyncGroup.
    pub assignment: Bytes,
}

/// GroupMetadataValue: a classic group after a generation completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// Protocol type (`consumer`, `connect`, …; empty for a simple group).
    pub protocol_type: String,
    /// Generation id.
    pub generation: i32,
    /// Selected protocol, none when the group is empty.
    pub protocol: Option<String>,
    /// Leader member id, none when the group is empty.
    pub leader: Option<String>,
    /// When the group entered its current state (v2+; -1 unknown).
    pub current_state_timestamp_ms: i64,
    /// Members.
    pub members: Vec<MemberMetadata>,
}

/// A record of the coordinator's partition. `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorRecord {
    /// OffsetCommitKey → OffsetCommitValue.
    OffsetCommit {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The offset, or a tombstone.
        value: Option<OffsetCommitValue>,
    },
    /// GroupMetadataKey → GroupMetadataValue.
    GroupMetadata {
        /// Group id.
        group: String,
        /// The group, or a tombstone.
        value: Option<GroupMetadataValue>,
    },
}

/// Key version Kafka 3.9 writes for offsets.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// Key version of group metadata.
pub const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// Value version of group metadata Kafka 3.9 writes.
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;

impl CoordinatorRecord {
    /// Key and value bytes as Kafka 3.9 writes them.
    #[must_use]
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            CoordinatorRecord::OffsetCommit {
                group,
                topic,
                partition,
                value,
            } => {
                let mut key = BytesMut::new();
                key.put_i16(OFFSET_COMMIT_KEY_VERSION);
                put_string(&mut key, group);
                put_string(&mut key, topic);
                key.put_i32(*partition);
                (key.freeze(), value.as_ref().map(encode_offset_commit_value))
            }
            CoordinatorRecord::GroupMetadata { group, value } => {
                let mut key = BytesMut::new();
                key.put_i16(GROUP_METADATA_KEY_VERSION);
                put_string(&mut key, group);
                (
                    key.freeze(),
                    value.as_ref().map(encode_group_metadata_value),
                )
            }
        }
    }

    /// Decodes a record read back from the partition.
    ///
    /// # Errors
    /// Any malformed or unsupported bytes, as a [`RecordDecodeError`].
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordDecodeError> {
        let mut k = Reader::new(key, "record key", false);
        let version = k.i16()?;
        match version {
            0 | 1 => {
                let group = k.string()?;
                let topic = k.string()?;
                let partition = k.i32()?;
                k.finish()?;
                let value = value.map(decode_offset_commit_value).transpose()?;
                Ok(CoordinatorRecord::OffsetCommit {
                    group,
                    topic,
                    partition,
                    value,
                })
            }
            2 => {
                let group = k.string()?;
                k.finish()?;
                let value = value.map(decode_group_metadata_value).transpose()?;
                Ok(CoordinatorRecord::GroupMetadata { group, value })
            }
            other => Err(RecordDecodeError::UnsupportedKeyVersion(other)),
        }
    }
}

fn encode_offset_commit_value(v: &OffsetCommitValue) -> Bytes {
    let mut b = BytesMut::new();
    match v.expire_timestamp_ms {
        // v1: offset, metadata, commitTimestamp, expireTimestamp (no leader epoch).
        Some(expire) => {
            b.put_i16(1);
            b.put_i64(v.offset);
            put_string(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp_ms);
            b.put_i64(expire);
        }
        // v3: offset, leaderEpoch, metadata, commitTimestamp.
        None => {
            b.put_i16(3);
            b.put_i64(v.offset);
            b.put_i32(v.leader_epoch);
            put_string(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp_ms);
        }
    }
    b.freeze()
}

fn decode_offset_commit_value(bytes: &[u8]) -> Result<OffsetCommitValue, RecordDecodeError> {
    const WHAT: &str = "OffsetCommitValue";
    let mut r = Reader::new(bytes, WHAT, false);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(RecordDecodeError::UnsupportedValueVersion {
            what: WHAT,
            version,
        });
    }
    r.flexible = version >= 4;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp_ms = r.i64()?;
    let expire_timestamp_ms = if version == 1 {
        Some(r.i64()?).filter(|t| *t != -1)
    } else {
        None
    };
    r.tagged_fields()?;
    r.finish()?;
    Ok(OffsetCommitValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
        expire_timestamp_ms,
    })
}

fn encode_group_metadata_value(v: &GroupMetadataValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(GROUP_METADATA_VALUE_VERSION);
    put_string(&mut b, &v.protocol_type);
    b.put_i32(v.generation);
    put_nullable_string(&mut b, v.protocol.as_deref());
    put_nullable_string(&mut b, v.leader.as_deref());
    b.put_i64(v.current_state_timestamp_ms);
    let count = i32::try_from(v.members.len()).expect("members are bounded by group.max.size");
    b.put_i32(count);
    for m in &v.members {
        put_string(&mut b, &m.member_id);
        put_nullable_string(&mut b, m.group_instance_id.as_deref());
        put_string(&mut b, &m.client_id);
        put_string(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

fn decode_group_metadata_value(bytes: &[u8]) -> Result<GroupMetadataValue, RecordDecodeError> {
    const WHAT: &str = "GroupMetadataValue";
    let mut r = Reader::new(bytes, WHAT, false);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(RecordDecodeError::UnsupportedValueVersion {
            what: WHAT,
            version,
        });
    }
    r.flexible = version >= 4;
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
    let count = r.array_len()?;
    let mut members = Vec::new();
    for _ in 0..count {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout_ms = r.i32()?;
        let subscription = r.bytes()?;
        let assignment = r.bytes()?;
        r.tagged_fields()?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if rebalance_timeout_ms < 0 {
                session_timeout_ms
            } else {
                rebalance_timeout_ms
            },
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    r.tagged_fields()?;
    r.finish()?;
    Ok(GroupMetadataValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

fn put_string(b: &mut BytesMut, s: &str) {
    // Group ids, topics, member ids and metadata are bounded far below i16::MAX by the
    // request checks (offset.metadata.max.bytes, request decoding); saturate defensively.
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    b.put_i16(len);
    b.put_slice(&s.as_bytes()[..len as usize]);
}

fn put_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, bytes: &[u8]) {
    let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
    b.put_i32(len);
    b.put_slice(&bytes[..len as usize]);
}

/// A bounds-checked reader over Kafka's classic (and, with `flexible`, compact) encodings.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
    pub(crate) flexible: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str, flexible: bool) -> Self {
        Reader {
            buf,
            what,
            flexible,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordDecodeError> {
        if self.buf.len() < n {
            return Err(RecordDecodeError::Truncated {
                what: self.what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, RecordDecodeError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, RecordDecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, RecordDecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn unsigned_varint(&mut self) -> Result<u32, RecordDecodeError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordDecodeError::InvalidField { what: self.what })
    }

    /// Length of a string/bytes/array: -1 (None) for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, RecordDecodeError> {
        let len: i64 = if self.flexible {
            i64::from(self.unsigned_varint()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        if len < -1 {
            return Err(RecordDecodeError::InvalidField { what: self.what });
        }
        Ok(usize::try_from(len).ok())
    }

    pub(crate) fn nullable_string(&mut self) -> Result<Option<String>, RecordDecodeError> {
        match self.length(false)? {
            None => Ok(None),
            Some(n) => {
                let raw = self.take(n)?;
                String::from_utf8(raw.to_vec())
                    .map(Some)
                    .map_err(|_| RecordDecodeError::InvalidField { what: self.what })
            }
        }
    }

    pub(crate) fn string(&mut self) -> Result<String, RecordDecodeError> {
        self.nullable_string()?
            .ok_or(RecordDecodeError::InvalidField { what: self.what })
    }

    pub(crate) fn nullable_bytes(&mut self) -> Result<Option<Bytes>, RecordDecodeError> {
        match self.length(true)? {
            None => Ok(None),
            Some(n) => Ok(Some(Bytes::copy_from_slice(self.take(n)?))),
        }
    }

    fn bytes(&mut self) -> Result<Bytes, RecordDecodeError> {
        self.nullable_bytes()?
            .ok_or(RecordDecodeError::InvalidField { what: self.what })
    }

    /// An array count, checked against the bytes left (each element takes at least one byte).
    pub(crate) fn array_len(&mut self) -> Result<usize, RecordDecodeError> {
        let n = self.length(true)?.unwrap_or(0);
        if n > self.buf.len() {
            return Err(RecordDecodeError::Truncated {
                what: self.what,
                need: n,
                have: self.buf.len(),
            });
        }
        Ok(n)
    }

    fn tagged_fields(&mut self) -> Result<(), RecordDecodeError> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.unsigned_varint()?;
        for _ in 0..count {
            let _tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }

    pub(crate) fn finish(&self) -> Result<(), RecordDecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(RecordDecodeError::TrailingBytes {
                what: self.what,
                extra: self.buf.len(),
            })
        }
    }
}

/// Topics of a `consumer` protocol subscription (ConsumerProtocolSubscription v0–v3: int16
/// version, then an array of topic names). `None` when the bytes do not parse: Kafka then
/// treats the member as subscribed to every topic.
#[must_use]
pub fn consumer_subscription_topics(bytes: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader::new(bytes, "ConsumerProtocolSubscription", false);
    let version = r.i16().ok()?;
    if version < 0 {
        return None;
    }
    let n = r.array_len().ok()?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        topics.push(r.string().ok()?);
    }
    Some(topics)
}
