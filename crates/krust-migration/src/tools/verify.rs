//! `krust migration verify`: does ZooKeeper hold what the quorum holds? ZooKeeper is turned
//! into records by the migration's own reader ([`crate::reader::read_all_metadata`], the initial
//! copy) and replayed into an image ([`zk_image`]); [`diff_images`] compares that image with the
//! quorum's, field by field. While the migration dual-writes the two agree except for writes in
//! flight (`ZkWriteBehindLag`).
//!
//! Compared: topics (names, ids), partitions (replicas, adding/removing replicas, leader, ISR,
//! leader epoch, leader recovery state), topic and broker configs, client quotas, SCRAM
//! credentials, ACLs (by content: their ids are random on both sides), the producer-id block,
//! delegation tokens. Not compared: the partition epoch (ZooKeeper's is the state znode's
//! version, which counts ZooKeeper writes, not KRaft changes — the writer's reconciliation skips
//! it too), ELR and directories (ZooKeeper has neither), broker and controller registrations and
//! features (not in ZooKeeper's metadata), topics pending deletion in ZooKeeper (not migrated).
//! Without the password encoder's secret, password configs are compared by presence only
//! (ZooKeeper holds them encrypted).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use krust_metadata::image::configs::ConfigResourceType;
use krust_metadata::image::topics::PartitionRegistration;
use krust_metadata::{MetadataDelta, MetadataImage, MetadataProvenance, MetadataVersion};
use krust_zk::model::password::{PasswordEncoder, is_password_config};
use krust_zk::model::topics::PRODUCER_ID_BLOCK_SIZE;
use krust_zk::tree::ZkTree;
use rand::SeedableRng as _;

use crate::reader::{ReadError, read_all_metadata};

/// Why ZooKeeper could not be turned into an image.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The reader refused a znode (or the metadata.version).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A record the reader produced did not replay (ZooKeeper holds contradictory metadata).
    #[error("replaying ZooKeeper's records: {0}")]
    Replay(String),
}

/// ZooKeeper's metadata as an image: the migration's reader over `tree` (the subtrees of
/// [`crate::reader::MIGRATION_READ_ROOTS`]) at `mv`, replayed on the empty image.
///
/// # Errors
/// [`VerifyError`].
pub fn zk_image(
    tree: &ZkTree,
    mv: MetadataVersion,
    password_encoder: Option<&PasswordEncoder>,
) -> Result<MetadataImage, VerifyError> {
    // ACL ids are random in the copy; they are not compared.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let batches = read_all_metadata(tree, mv, password_encoder, &mut rng)?;
    let mut delta = MetadataDelta::new(&MetadataImage::empty());
    for record in batches.batches.iter().flatten() {
        delta
            .replay(&record.record)
            .map_err(|e| VerifyError::Replay(e.to_string()))?;
    }
    Ok(delta.apply(MetadataProvenance::EMPTY))
}

/// One disagreement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// What differs (`topic foo partition 0 isr`).
    pub what: String,
    /// ZooKeeper's value (`absent` when it has none).
    pub zookeeper: String,
    /// The quorum's value.
    pub kraft: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: zookeeper={} kraft={}",
            self.what, self.zookeeper, self.kraft
        )
    }
}

const ABSENT: &str = "absent";

struct Diffs(Vec<Difference>);

impl Diffs {
    fn push(
        &mut self,
        what: impl Into<String>,
        zookeeper: impl Into<String>,
        kraft: impl Into<String>,
    ) {
        self.0.push(Difference {
            what: what.into(),
            zookeeper: zookeeper.into(),
            kraft: kraft.into(),
        });
    }

    fn field<T: PartialEq + fmt::Debug>(&mut self, what: &str, zk: &T, kraft: &T) {
        if zk != kraft {
            self.push(what, format!("{zk:?}"), format!("{kraft:?}"));
        }
    }

    /// Keys on one side only, and differing values of common keys (`show` renders a value).
    fn maps<K: Ord + fmt::Debug, V: PartialEq>(
        &mut self,
        what: &dyn Fn(&K) -> String,
        zk: &BTreeMap<K, V>,
        kraft: &BTreeMap<K, V>,
        show: &dyn Fn(&K, &V) -> String,
        same: &dyn Fn(&K, &V, &V) -> bool,
    ) {
        for (key, z) in zk {
            match kraft.get(key) {
                None => self.push(what(key), show(key, z), ABSENT),
                Some(k) if !same(key, z, k) => self.push(what(key), show(key, z), show(key, k)),
                Some(_) => {}
            }
        }
        for (key, k) in kraft {
            if !zk.contains_key(key) {
                self.push(what(key), ABSENT, show(key, k));
            }
        }
    }
}

/// The differences between ZooKeeper's image (from [`zk_image`]) and the quorum's, in a stable
/// order; empty when they agree. `compare_passwords`: the ZooKeeper image was read with the
/// password encoder, so password config values are comparable.
#[must_use]
pub fn diff_images(
    zk: &MetadataImage,
    kraft: &MetadataImage,
    compare_passwords: bool,
) -> Vec<Difference> {
    let mut d = Diffs(Vec::new());
    diff_topics(&mut d, zk, kraft);
    diff_configs(&mut d, zk, kraft, compare_passwords);
    let quotas = |image: &MetadataImage| -> BTreeMap<String, BTreeMap<String, String>> {
        image
            .client_quotas
            .entities
            .iter()
            .map(|(entity, quotas)| {
                let name = entity
                    .0
                    .iter()
                    .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
                    .collect::<Vec<_>>()
                    .join(",");
                let values = quotas
                    .iter()
                    .map(|(k, v)| (k.clone(), format!("{v}")))
                    .collect();
                (name, values)
            })
            .collect()
    };
    let (zq, kq) = (quotas(zk), quotas(kraft));
    d.maps(
        &|entity| format!("client quota {entity}"),
        &zq,
        &kq,
        &|_, v| format!("{v:?}"),
        &|_, a, b| a == b,
    );
    let scram = |image: &MetadataImage| -> BTreeMap<(i8, String), String> {
        image
            .scram
            .credentials
            .iter()
            .map(|((mechanism, user), c)| {
                (
                    (*mechanism, user.clone()),
                    format!(
                        "iterations={} salt={} stored_key={} server_key={}",
                        c.iterations,
                        hex(&c.salt),
                        hex(&c.stored_key),
                        hex(&c.server_key)
                    ),
                )
            })
            .collect()
    };
    d.maps(
        &|(mechanism, user)| {
            let name = match mechanism {
                1 => "SCRAM-SHA-256",
                2 => "SCRAM-SHA-512",
                _ => "SCRAM-?",
            };
            format!("scram credential {name} user {user}")
        },
        &scram(zk),
        &scram(kraft),
        &|_, v| v.clone(),
        &|_, a, b| a == b,
    );
    let acls = |image: &MetadataImage| -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for acl in image.acls.acls.values() {
            let text = format!(
                "resource_type={} name={:?} pattern_type={} principal={:?} host={:?} \
                 operation={} permission={}",
                acl.resource_type,
                acl.resource_name,
                acl.pattern_type,
                acl.principal,
                acl.host,
                acl.operation,
                acl.permission_type
            );
            *out.entry(text).or_insert(0) += 1;
        }
        out
    };
    d.maps(
        &|acl| format!("acl {acl}"),
        &acls(zk),
        &acls(kraft),
        &|_, n| format!("present x{n}"),
        &|_, a, b| a == b,
    );
    // ZooKeeper holds the last block handed out; the copy takes the id after it as the next
    // one. Dual-write (Kafka's `writeProducerId`) stores the block *starting* at the quorum's
    // next id, so ZooKeeper's next id is then one block ahead. Both states agree: neither side
    // can hand out an id the other already did.
    let zk_next = zk.producer_ids.next_producer_id;
    let kraft_next = kraft.producer_ids.next_producer_id;
    if zk_next != kraft_next && zk_next != kraft_next.saturating_add(PRODUCER_ID_BLOCK_SIZE) {
        d.push(
            "producer ids next block",
            format!("{zk_next:?}"),
            format!("{kraft_next:?}"),
        );
    }
    let tokens = |image: &MetadataImage| -> BTreeMap<String, String> {
        image
            .delegation_tokens
            .tokens
            .iter()
            .map(|(id, t)| (id.clone(), format!("{t:?}")))
            .collect()
    };
    d.maps(
        &|id| format!("delegation token {id}"),
        &tokens(zk),
        &tokens(kraft),
        &|_, v| v.clone(),
        &|_, a, b| a == b,
    );
    d.0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn diff_topics(d: &mut Diffs, zk: &MetadataImage, kraft: &MetadataImage) {
    let names: BTreeSet<&String> = zk
        .topics
        .by_name
        .keys()
        .chain(kraft.topics.by_name.keys())
        .collect();
    for name in names {
        let (z, k) = match (
            zk.topics.topic_by_name(name),
            kraft.topics.topic_by_name(name),
        ) {
            (Some(z), Some(k)) => (z, k),
            (Some(z), None) => {
                d.push(format!("topic {name}"), format!("id {}", z.id), ABSENT);
                continue;
            }
            (None, Some(k)) => {
                d.push(format!("topic {name}"), ABSENT, format!("id {}", k.id));
                continue;
            }
            (None, None) => continue,
        };
        if z.id != k.id {
            d.push(
                format!("topic {name} id"),
                z.id.to_string(),
                k.id.to_string(),
            );
            continue;
        }
        let ids: BTreeSet<i32> = z
            .partitions
            .keys()
            .chain(k.partitions.keys())
            .copied()
            .collect();
        for id in ids {
            let what = |field: &str| format!("topic {name} partition {id} {field}");
            match (z.partitions.get(&id), k.partitions.get(&id)) {
                (Some(zp), Some(kp)) => diff_partition(d, &what, zp, kp),
                (Some(zp), None) => d.push(
                    what("").trim_end(),
                    format!("replicas {:?}", zp.replicas),
                    ABSENT,
                ),
                (None, Some(kp)) => d.push(
                    what("").trim_end(),
                    ABSENT,
                    format!("replicas {:?}", kp.replicas),
                ),
                (None, None) => {}
            }
        }
    }
}

fn diff_partition(
    d: &mut Diffs,
    what: &dyn Fn(&str) -> String,
    z: &PartitionRegistration,
    k: &PartitionRegistration,
) {
    d.field(&what("replicas"), &z.replicas, &k.replicas);
    d.field(
        &what("adding_replicas"),
        &z.adding_replicas,
        &k.adding_replicas,
    );
    d.field(
        &what("removing_replicas"),
        &z.removing_replicas,
        &k.removing_replicas,
    );
    d.field(&what("leader"), &z.leader, &k.leader);
    d.field(&what("isr"), &z.isr, &k.isr);
    d.field(&what("leader_epoch"), &z.leader_epoch, &k.leader_epoch);
    d.field(
        &what("leader_recovery_state"),
        &z.leader_recovery_state,
        &k.leader_recovery_state,
    );
}

fn diff_configs(d: &mut Diffs, zk: &MetadataImage, kraft: &MetadataImage, compare_passwords: bool) {
    let configs = |image: &MetadataImage| -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        for (resource, values) in &image.configs.resources {
            let kind = if resource.resource_type == ConfigResourceType::TOPIC {
                "topic"
            } else if resource.resource_type == ConfigResourceType::BROKER {
                "broker"
            } else {
                // ZooKeeper holds no other config resources.
                continue;
            };
            let name = if resource.name.is_empty() {
                format!("{kind} <default>")
            } else {
                format!("{kind} {}", resource.name)
            };
            for (key, value) in values {
                out.insert((name.clone(), key.clone()), value.clone());
            }
        }
        out
    };
    let show = move |(_, key): &(String, String), value: &String| {
        if is_password_config(key) {
            "(password)".to_owned()
        } else {
            format!("{value:?}")
        }
    };
    d.maps(
        &|(resource, key)| format!("config {resource} {key}"),
        &configs(zk),
        &configs(kraft),
        &show,
        &|(_, key), a, b| (!compare_passwords && is_password_config(key)) || a == b,
    );
}
