//! `/brokers/topics/<t>` (replica assignment), `/brokers/topics/<t>/partitions/<p>/state`
//! (leader and ISR) and `/latest_producer_id_block`.

use std::collections::BTreeMap;

use base64::Engine as _;
use uuid::Uuid;

use super::json::{Fields, JsonObject, int_array, parse_object, string};
use super::order::scala_mutable_hash_map_order;
use super::{ZNodeError, paths};

/// One partition's replicas in a topic znode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaAssignment {
    /// All replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<i32>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<i32>,
}

/// `/brokers/topics/<topic>` (`TopicZNode`, versions 1–3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicZNode {
    /// The topic id (v3; absent in topics created before Kafka 2.8 until a controller adds it).
    pub topic_id: Option<Uuid>,
    /// Partition id → replicas.
    pub partitions: BTreeMap<i32, ReplicaAssignment>,
}

/// Kafka's text form of a UUID: URL-safe base64 without padding (22 characters).
#[must_use]
pub fn uuid_to_kafka_string(id: &Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// Parses Kafka's text form of a UUID.
///
/// # Errors
/// `None` if it is not 22 base64url characters encoding 16 bytes.
#[must_use]
pub fn uuid_from_kafka_string(text: &str) -> Option<Uuid> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    Uuid::from_slice(&bytes).ok()
}

impl TopicZNode {
    /// Kafka's v3 bytes: `{"partitions":…,"topic_id":…,"adding_replicas":…,"removing_replicas":…,"version":3}`
    /// (the order of a Scala `mutable.HashMap` of these keys; `topic_id` only when known), each
    /// map in its own `mutable.HashMap` order; adding/removing list only partitions that have
    /// some.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let map_json = |select: &dyn Fn(&ReplicaAssignment) -> Option<&Vec<i32>>| {
            let mut items: Vec<(String, &Vec<i32>)> = self
                .partitions
                .iter()
                .filter_map(|(p, a)| select(a).map(|r| (p.to_string(), r)))
                .collect();
            scala_mutable_hash_map_order(&mut items);
            let inner: Vec<String> = items
                .iter()
                .map(|(p, r)| format!("{}:{}", string(p), int_array(r)))
                .collect();
            format!("{{{}}}", inner.join(","))
        };
        let partitions = map_json(&|a| Some(&a.replicas));
        let adding = map_json(&|a| (!a.adding_replicas.is_empty()).then_some(&a.adding_replicas));
        let removing =
            map_json(&|a| (!a.removing_replicas.is_empty()).then_some(&a.removing_replicas));
        let mut json = JsonObject::new();
        json.raw("partitions", &partitions);
        if let Some(id) = &self.topic_id {
            json.str("topic_id", &uuid_to_kafka_string(id));
        }
        json.raw("adding_replicas", &adding)
            .raw("removing_replicas", &removing)
            .int("version", 3)
            .finish()
            .into_bytes()
    }

    /// Decodes any version (Kafka ignores `version` here): `partitions`, and the optional
    /// `topic_id`, `adding_replicas`, `removing_replicas`.
    ///
    /// # Errors
    /// Not JSON, a partition id that is not an integer, a replica list that is not integers,
    /// or a bad topic id.
    pub fn decode(topic: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::topic(topic);
        let map = parse_object(&path, bytes)?;
        let f = Fields::new(&path, &map);
        let topic_id = match f.opt_str("topic_id")? {
            None => None,
            Some(text) => Some(
                uuid_from_kafka_string(text)
                    .ok_or_else(|| ZNodeError::invalid(&path, "topic id", text))?,
            ),
        };
        let read_map = |field: &str| -> Result<BTreeMap<i32, Vec<i32>>, ZNodeError> {
            let mut out = BTreeMap::new();
            if let Some(m) = f.object(field)? {
                for (p, replicas) in m {
                    let id: i32 = p
                        .parse()
                        .map_err(|_| ZNodeError::invalid(&path, "partition id", p.clone()))?;
                    out.insert(id, f.int_list(field, replicas)?);
                }
            }
            Ok(out)
        };
        let replicas = read_map("partitions")?;
        let mut adding = read_map("adding_replicas")?;
        let mut removing = read_map("removing_replicas")?;
        let partitions = replicas
            .into_iter()
            .map(|(p, replicas)| {
                (
                    p,
                    ReplicaAssignment {
                        replicas,
                        adding_replicas: adding.remove(&p).unwrap_or_default(),
                        removing_replicas: removing.remove(&p).unwrap_or_default(),
                    },
                )
            })
            .collect();
        Ok(Self {
            topic_id,
            partitions,
        })
    }
}

/// `/brokers/topics/<t>/partitions/<p>/state` (`TopicPartitionStateZNode`, version 1). The
/// znode's ZooKeeper version is the partition epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStateZNode {
    /// The leader (-1: none).
    pub leader: i32,
    /// The leader epoch.
    pub leader_epoch: i32,
    /// The controller epoch of the writer.
    pub controller_epoch: i32,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
    /// 0 recovered, 1 recovering (KIP-704); written only when not 0.
    pub leader_recovery_state: i8,
}

impl PartitionStateZNode {
    /// Kafka's bytes: `{"controller_epoch":…,"leader":…,"version":1,["leader_recovery_state":1,]"leader_epoch":…,"isr":[…]}`
    /// (a Scala immutable `HashMap`'s order).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut json = JsonObject::new();
        json.int("controller_epoch", i64::from(self.controller_epoch))
            .int("leader", i64::from(self.leader))
            .int("version", 1);
        if self.leader_recovery_state != 0 {
            json.int(
                "leader_recovery_state",
                i64::from(self.leader_recovery_state),
            );
        }
        json.int("leader_epoch", i64::from(self.leader_epoch))
            .ints("isr", &self.isr)
            .finish()
            .into_bytes()
    }

    /// Decodes as Kafka does (the version is not checked).
    ///
    /// # Errors
    /// Not JSON, a missing field, or a leader recovery state other than 0/1.
    pub fn decode(path: &str, bytes: &[u8]) -> Result<Self, ZNodeError> {
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        let isr = f.int_list("isr", f.required("isr", "an array of integers")?)?;
        let leader_recovery_state = match f.opt_i32("leader_recovery_state")? {
            None | Some(0) => 0,
            Some(1) => 1,
            Some(other) => {
                return Err(ZNodeError::invalid(
                    path,
                    "leader recovery state",
                    other.to_string(),
                ));
            }
        };
        Ok(Self {
            leader: f.i32("leader")?,
            leader_epoch: f.i32("leader_epoch")?,
            controller_epoch: f.i32("controller_epoch")?,
            isr,
            leader_recovery_state,
        })
    }
}

/// `/latest_producer_id_block` (`ProducerIdBlockZNode`, version 1): the last block of producer
/// ids handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlockZNode {
    /// The broker the block went to (-1 when a KRaft controller wrote it).
    pub broker: i32,
    /// First id of the block.
    pub block_start: i64,
    /// Last id of the block (inclusive).
    pub block_end: i64,
}

/// Producer ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

impl ProducerIdBlockZNode {
    /// The block a KRaft controller writes for `next_producer_id` (Kafka's
    /// `writeProducerId`: broker -1, `[next, next + 999]`).
    #[must_use]
    pub fn for_next_producer_id(next_producer_id: i64) -> Self {
        Self {
            broker: -1,
            block_start: next_producer_id,
            block_end: next_producer_id.saturating_add(PRODUCER_ID_BLOCK_SIZE - 1),
        }
    }

    /// The first id of the next block (`block_end + 1`).
    #[must_use]
    pub fn next_block_first_id(&self) -> i64 {
        self.block_end.saturating_add(1)
    }

    /// `{"version":1,"broker":…,"block_start":"…","block_end":"…"}`.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        JsonObject::new()
            .int("version", 1)
            .int("broker", i64::from(self.broker))
            .str("block_start", &self.block_start.to_string())
            .str("block_end", &self.block_end.to_string())
            .finish()
            .into_bytes()
    }

    /// Decodes (the longs are strings; numbers are accepted too).
    ///
    /// # Errors
    /// Not JSON or a missing/mistyped field.
    pub fn decode(bytes: &[u8]) -> Result<Self, ZNodeError> {
        let path = paths::PRODUCER_ID_BLOCK;
        let map = parse_object(path, bytes)?;
        let f = Fields::new(path, &map);
        Ok(Self {
            broker: f.i32("broker")?,
            block_start: f.long_or_string("block_start")?,
            block_end: f.long_or_string("block_end")?,
        })
    }
}

/// For [`crate::backend::read_tree_with`]: a topic znode (`/brokers/topics/<name>`) names its
/// partitions in its assignment, so the readers go straight to each partition's `state`
/// znode, as Kafka's migration reads them, instead of listing `partitions` and each
/// `partitions/<p>` (three requests per partition instead of one). `None` (list the children)
/// for any other node, and for an assignment that does not decode, which the reader then
/// reports.
#[must_use]
pub fn partition_states_of_topic(path: &str, data: &[u8]) -> Option<Vec<String>> {
    let name = path.strip_prefix(paths::TOPICS)?.strip_prefix('/')?;
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let znode = TopicZNode::decode(name, data).ok()?;
    Some(
        znode
            .partitions
            .keys()
            .map(|p| paths::partition_state(name, *p))
            .collect(),
    )
}
