//! "Same metadata as Kafka" (issue 11): one ZooKeeper cluster migrated (KIP-866) once by a
//! krust controller and once by an Apache Kafka 3.9 controller, and the results compared.
//!
//! Sequencing: the ZooKeeper cluster is built once, in ZooKeeper mode, with Kafka's own tools
//! (`kafka-topics`, `kafka-configs`, `kafka-acls`, the console producer) against a Kafka 3.9
//! ZooKeeper-mode broker running `AclAuthorizer`; the broker is stopped and ZooKeeper's whole
//! persistent tree read. That cluster is then cloned twice — the persistent znodes recreated in
//! a fresh ZooKeeper, the broker's log dir copied — and each clone migrated by one controller
//! with the same steps: the controller started, the broker started in migration mode, the copy,
//! the same dual-write changes through the broker. Both controllers thus start from the same
//! znodes with the same versions (a rollback between the runs would leave the first run's
//! dual-writes and partition-state rewrites in the second run's copy). What differs by
//! construction: topic ids of topics created in the dual-write phase and the salts/keys of SCRAM
//! users created then (random), ACL record ids (random), controller ids and registrations.
//! krust runs first, and every dual-write change must be accepted by both controllers — topic,
//! config, quota, SCRAM and ACL changes, forwarded by the broker. Both controllers run
//! `StandardAuthorizer` (Kafka's controller refuses ACL changes without an authorizer:
//! `SecurityDisabledException: No Authorizer is configured`).
//!
//! Compared: (1) the images after the copy — the controller's metadata log replayed up to the
//! end of the migration transaction: topics (names, ids, partitions, replicas, ISR, leader,
//! epochs, directories), configs, client quotas, SCRAM credentials, ACLs (without their ids),
//! producer ids, the migration state; (2) the same after the dual-write phase, new topic ids and
//! new SCRAM users' random parts normalized; (3) the znodes under `/brokers/topics`, `/config`,
//! `/kafka-acl*`, `/latest_producer_id_block`, `/admin/delete_topics` after the dual-write
//! phase: JSON compared with keys sorted, ACL lists sorted, the partition-state znode versions
//! (= partition epochs) included, the same normalizations, and change notifications created in
//! the run compared as a multiset of their contents (their sequence names are ignored). Two
//! normalizations more: the broker's log dir id in partition directories (the broker picks it
//! at its first start in migration mode; reserved ids are kept), and config change
//! notifications Kafka writes for client quota / SCRAM entities whose znode is the same in
//! both runs — Kafka's reconciliation rewrites every such entity after the copy, krust's only
//! those that differ (the deliberate deviation documented in `krust_migration::writer`).

#[path = "support/mod.rs"]
mod cluster;
#[path = "support/migration.rs"]
mod migration;
#[path = "quorum_support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataImage, MetadataProvenance};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ZooKeeperServer};
use krust_zk::backend::{ZkBackend as _, read_tree};
use krust_zk::client::{ZkClient, ZkClientConfig};
use krust_zk::ops::ZkOp;
use krust_zk::tree::ZkTree;
use migration::{MIGRATION_COMPLETED, Step, Tool, WAIT, run_step, step};
use support::{FAST_TIMEOUTS, Quorum, read_metadata_log};

const BROKER_ID: i32 = 101;
/// The ZooKeeper broker's authorizer: ACLs in ZooKeeper, and the tools (ANONYMOUS on
/// PLAINTEXT) still allowed everything.
const AUTHORIZER: &[(&str, &str)] = &[
    (
        "authorizer.class.name",
        "kafka.security.authorizer.AclAuthorizer",
    ),
    ("super.users", "User:ANONYMOUS"),
    ("allow.everyone.if.no.acl.found", "true"),
];
/// Both controllers' authorizer (Kafka's controller refuses ACL changes without one:
/// `SecurityDisabledException: No Authorizer is configured`); the broker forwards as ANONYMOUS.
const CONTROLLER_AUTHORIZER: &[(&str, &str)] = &[
    (
        "authorizer.class.name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ),
    ("super.users", "User:ANONYMOUS"),
];
/// The admin client settings of every tool run: a refused request fails in seconds, not after
/// the default minute of retries.
const COMMAND_CONFIG: &str = "default.api.timeout.ms=20000\nrequest.timeout.ms=10000\n";
/// The ZooKeeper subtrees compared after the dual-write phase.
const ZK_ROOTS: &[&str] = &[
    "/brokers/topics",
    "/config",
    "/kafka-acl",
    "/kafka-acl-extended",
    "/kafka-acl-changes",
    "/kafka-acl-extended-changes",
    "/latest_producer_id_block",
    "/admin/delete_topics",
];
/// Parents of persistent-sequential change notifications.
const NOTIFICATION_PARENTS: &[&str] = &[
    "/config/changes",
    "/kafka-acl-changes",
    "/kafka-acl-extended-changes",
];

/// The ZooKeeper cluster, built in ZooKeeper mode.
const SEED: &[Step] = &[
    step(
        "topic t-plain",
        Tool::Topics,
        &[
            "--create",
            "--topic",
            "t-plain",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ],
    ),
    step(
        "compacted topic",
        Tool::Topics,
        &[
            "--create",
            "--topic",
            "t-compact",
            "--partitions",
            "2",
            "--replication-factor",
            "1",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "min.cleanable.dirty.ratio=0.2",
        ],
    ),
    step(
        "topic with configs",
        Tool::Topics,
        &[
            "--create",
            "--topic",
            "t-config",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=3600000",
            "--config",
            "max.message.bytes=200000",
        ],
    ),
    step(
        "per-broker config",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "101",
            "--add-config",
            "message.max.bytes=1500000",
        ],
    ),
    step(
        "default broker config",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.retention.ms=604800001",
        ],
    ),
    step(
        "user quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            "producer_byte_rate=1024,consumer_byte_rate=2048",
        ],
    ),
    step(
        "default user quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--add-config",
            "producer_byte_rate=4096",
        ],
    ),
    step(
        "client-id quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "app-1",
            "--add-config",
            "request_percentage=50",
        ],
    ),
    step(
        "default client-id quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-default",
            "--add-config",
            "consumer_byte_rate=8192",
        ],
    ),
    step(
        "user+client-id quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--entity-type",
            "clients",
            "--entity-name",
            "app-1",
            "--add-config",
            "producer_byte_rate=512",
        ],
    ),
    step(
        "default user + default client-id quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--entity-type",
            "clients",
            "--entity-default",
            "--add-config",
            "producer_byte_rate=256",
        ],
    ),
    step(
        "ip quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "ips",
            "--entity-name",
            "127.0.0.1",
            "--add-config",
            "connection_creation_rate=10",
        ],
    ),
    step(
        "default ip quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "ips",
            "--entity-default",
            "--add-config",
            "connection_creation_rate=20",
        ],
    ),
    step(
        "SCRAM user bob (256 and 512)",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "SCRAM-SHA-256=[iterations=4096,password=bob-secret],SCRAM-SHA-512=[password=bob-secret]",
        ],
    ),
    step(
        "SCRAM for the quota user alice",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
        ],
    ),
    step(
        "literal ACLs",
        Tool::Acls,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "t-plain",
            "--group",
            "g-1",
        ],
    ),
    step(
        "prefixed ACL",
        Tool::Acls,
        &[
            "--add",
            "--deny-principal",
            "User:mallory",
            "--deny-host",
            "10.0.0.1",
            "--operation",
            "Write",
            "--topic",
            "t-",
            "--resource-pattern-type",
            "prefixed",
        ],
    ),
    step("a producer id block", Tool::Produce, &["t-plain"]),
];

/// The changes made through the broker after the copy, in each run.
const DUAL_WRITE: &[Step] = &[
    step(
        "create a topic",
        Tool::Topics,
        &[
            "--create",
            "--topic",
            "dw-new",
            "--partitions",
            "2",
            "--replication-factor",
            "1",
            "--config",
            "segment.ms=600000",
        ],
    ),
    step(
        "add partitions",
        Tool::Topics,
        &["--alter", "--topic", "t-plain", "--partitions", "5"],
    ),
    step(
        "change a topic config",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "t-config",
            "--add-config",
            "retention.ms=7200000",
            "--delete-config",
            "max.message.bytes",
        ],
    ),
    step(
        "change a broker config",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "101",
            "--add-config",
            "message.max.bytes=1600000",
        ],
    ),
    step(
        "delete the last default broker config",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--delete-config",
            "log.retention.ms",
        ],
    ),
    step(
        "add a quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "app-2",
            "--add-config",
            "producer_byte_rate=100",
        ],
    ),
    step(
        "remove a quota",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--delete-config",
            "consumer_byte_rate",
        ],
    ),
    step(
        "add a SCRAM user",
        Tool::Configs,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "carol",
            "--add-config",
            "SCRAM-SHA-256=[iterations=4096,password=carol-secret]",
        ],
    ),
    step(
        "add an ACL",
        Tool::Acls,
        &[
            "--add",
            "--allow-principal",
            "User:carol",
            "--operation",
            "Describe",
            "--topic",
            "dw-new",
        ],
    ),
    step(
        "remove an ACL",
        Tool::Acls,
        &[
            "--remove",
            "--force",
            "--deny-principal",
            "User:mallory",
            "--deny-host",
            "10.0.0.1",
            "--operation",
            "Write",
            "--topic",
            "t-",
            "--resource-pattern-type",
            "prefixed",
        ],
    ),
    step("allocate producer ids", Tool::Produce, &["dw-new"]),
];

/// A tokio runtime for the ZooKeeper client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The subtrees `roots` of the ZooKeeper at `connect`.
fn read_zk(connect: &str, roots: &[&str]) -> ZkTree {
    runtime().block_on(async {
        let client = ZkClient::connect(ZkClientConfig::new(connect))
            .await
            .expect("connect to ZooKeeper");
        read_tree(&client, roots).await.expect("read ZooKeeper")
    })
}

/// Recreates the persistent znodes of `tree` (ZooKeeper's own excepted) in the empty
/// ZooKeeper at `connect`, parents first.
fn clone_into(tree: &ZkTree, connect: &str) {
    let mut paths: Vec<&str> = tree
        .paths()
        .filter(|p| *p != "/" && *p != "/zookeeper" && !p.starts_with("/zookeeper/"))
        .collect();
    paths.sort_unstable();
    runtime().block_on(async {
        let client = ZkClient::connect(ZkClientConfig::new(connect))
            .await
            .expect("connect to ZooKeeper");
        for path in paths {
            let (data, stat) = tree.get(path).expect("a read znode");
            if stat.ephemeral_owner != 0 {
                continue;
            }
            client
                .apply(&ZkOp::create(path, data.to_vec()))
                .await
                .unwrap_or_else(|e| panic!("create {path}: {e}"));
        }
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    Krust,
    Kafka,
}

/// What one migration produced.
struct Run {
    /// The image right after the copy, as comparable lines.
    copy: Vec<String>,
    /// The image at the end of the run, as comparable lines.
    end: Vec<String>,
    /// ZooKeeper after the dual-write phase, normalized.
    zk: BTreeMap<String, String>,
    /// Each dual-write step and its outcome.
    outcomes: Vec<(&'static str, Result<(), String>)>,
    /// The controller's completion line.
    completed: String,
}

/// The seed cluster: ZooKeeper's persistent tree and the broker's log dir.
struct Seed {
    tree: ZkTree,
    log_dir: PathBuf,
    cluster_id: String,
}

fn zk_broker(dist: &KafkaDist, zk: &ZooKeeperServer) -> krust_testkit::KafkaNodeBuilder {
    let mut builder = KafkaNode::builder(dist)
        .role(KafkaRole::ZkBroker)
        .node_id(BROKER_ID)
        .zookeeper(zk.connect_string())
        .start_timeout(WAIT);
    for (k, v) in AUTHORIZER {
        builder = builder.prop(*k, *v);
    }
    builder
}

/// Migrates a clone of `seed` with `controller`, applying `steps` in the dual-write phase.
fn migrate(
    dist: &KafkaDist,
    seed: &Seed,
    work: &Path,
    controller: Controller,
    steps: &[&Step],
) -> Run {
    let zk = ZooKeeperServer::start(dist).expect("zookeeper starts");
    clone_into(&seed.tree, &zk.connect_string());
    let broker_dir = work.join(format!("{controller:?}-broker"));
    copy_dir(&seed.log_dir, &broker_dir.join("data"));
    let command_config = work.join("command.properties");
    std::fs::write(&command_config, COMMAND_CONFIG).expect("command config");

    // The controller, in PRE_MIGRATION.
    let connect = zk.connect_string();
    let mut extra: Vec<(&str, &str)> = FAST_TIMEOUTS.to_vec();
    extra.push(("zookeeper.metadata.migration.enable", "true"));
    extra.push(("zookeeper.connect", &connect));
    extra.extend_from_slice(CONTROLLER_AUTHORIZER);
    let (mut quorum, mut kafka_controller) = match controller {
        Controller::Krust => {
            let mut quorum = Quorum::in_cluster(1, &extra, &seed.cluster_id);
            let node = quorum.node(1);
            node.process = Some(cluster::start_server_within(&node.dir, 1, WAIT));
            (Some(quorum), None)
        }
        Controller::Kafka => {
            let mut builder = KafkaNode::builder(dist)
                .role(KafkaRole::Controller)
                .node_id(3000)
                .cluster_id(seed.cluster_id.clone())
                .zookeeper(zk.connect_string())
                .migration()
                .start_timeout(WAIT);
            for (k, v) in CONTROLLER_AUTHORIZER {
                builder = builder.prop(*k, *v);
            }
            let node = builder
                .start()
                .expect("Kafka's migrating controller starts");
            (None, Some(node))
        }
    };
    let voters = match (&quorum, &kafka_controller) {
        (Some(q), _) => q.voters.clone(),
        (_, Some(c)) => c.quorum_voters().to_owned(),
        _ => unreachable!(),
    };
    let tails =
        |quorum: &Option<Quorum>| quorum.as_ref().map(Quorum::log_tails).unwrap_or_default();

    // The broker, in migration mode: it registers, the controller copies.
    let mut broker = zk_broker(dist, &zk)
        .quorum_voters(voters)
        .migration()
        .dir(broker_dir)
        .start()
        .unwrap_or_else(|e| {
            panic!(
                "{controller:?}: the broker starts in migration mode: {e}\n{}",
                tails(&quorum)
            )
        });
    let completed = match (&mut quorum, &mut kafka_controller) {
        (Some(q), _) => q
            .node(1)
            .process
            .as_mut()
            .expect("started")
            .wait_for_line(MIGRATION_COMPLETED, WAIT),
        (_, Some(c)) => c.wait_for_log(MIGRATION_COMPLETED, WAIT),
        _ => unreachable!(),
    }
    .unwrap_or_else(|e| panic!("{controller:?}: no copy: {e}\n{}", tails(&quorum)));

    // Dual-write.
    let bootstrap = broker.bootstrap_servers();
    let outcomes: Vec<(&'static str, Result<(), String>)> = steps
        .iter()
        .map(|s| (s.name, run_step(dist, &bootstrap, &command_config, s)))
        .collect();
    // ZooKeeper once it stops changing.
    let deadline = Instant::now() + WAIT;
    let mut last = read_zk(&connect, ZK_ROOTS);
    let tree = loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = read_zk(&connect, ZK_ROOTS);
        if same_data(&now, &last) || Instant::now() > deadline {
            break now;
        }
        last = now;
    };
    let zk_view = normalize_zk(&tree, &seed.tree);

    // Stop: the broker first (SIGKILL: no controlled shutdown moves leaders), then the
    // controller, and read its log.
    broker.kill().expect("broker killed");
    let records = match (&mut quorum, &mut kafka_controller) {
        (Some(q), _) => {
            q.stop_all();
            metadata_records(&q.node(1).data_dir())
        }
        (_, Some(c)) => {
            c.terminate(Duration::from_secs(60))
                .expect("Kafka's controller stops");
            metadata_records(&c.log_dir())
        }
        _ => unreachable!(),
    };
    let copy_end = copy_end(&records).unwrap_or_else(|| {
        panic!("{controller:?}: no ZkMigrationStateRecord(MIGRATION) in {records:#?}")
    });
    let copy_image = image(&records[..copy_end]);
    let end_image = image(&records);
    let copied_topics: BTreeSet<String> = copy_image.topics.by_name.keys().cloned().collect();
    let copied_users: BTreeSet<String> = copy_image
        .scram
        .credentials
        .keys()
        .map(|(_, u)| u.clone())
        .collect();
    Run {
        copy: image_lines(&copy_image, None),
        end: image_lines(&end_image, Some((&copied_topics, &copied_users))),
        zk: zk_view,
        outcomes,
        completed,
    }
}

/// The decoded records of a stopped controller's metadata log (krust's or Kafka's: the
/// format is the same).
fn metadata_records(data_dir: &Path) -> Vec<MetadataRecord> {
    read_metadata_log(data_dir)
        .into_iter()
        .filter(|r| !r.control)
        .filter_map(|r| r.value)
        .map(|v| {
            ApiMessageAndVersion::decode(&v)
                .expect("a metadata record")
                .record
        })
        .collect()
}

/// The number of records up to the end of the copy: the `ZkMigrationStateRecord(MIGRATION)`
/// and the `EndTransactionRecord` right after it.
fn copy_end(records: &[MetadataRecord]) -> Option<usize> {
    let at = records.iter().position(
        |r| matches!(r, MetadataRecord::ZkMigrationState(s) if s.zk_migration_state == 1),
    )?;
    Some(match records.get(at + 1) {
        Some(MetadataRecord::EndTransaction(_)) => at + 2,
        _ => at + 1,
    })
}

fn image(records: &[MetadataRecord]) -> MetadataImage {
    MetadataImage::from_records(records.iter(), MetadataProvenance::new(0, 0, 0))
        .expect("the log replays")
}

/// The cluster-wide metadata of `image` as sorted lines (registrations and features other
/// than the migration state left out). With `created` (the topics and SCRAM users of the
/// copy), topics and SCRAM users created later have their random parts normalized.
fn image_lines(
    image: &MetadataImage,
    created: Option<(&BTreeSet<String>, &BTreeSet<String>)>,
) -> Vec<String> {
    let mut lines = vec![format!(
        "zk_migration_state {:?}",
        image.features.zk_migration_state
    )];
    for (name, topic) in &image.topics.by_name {
        let id = match created {
            Some((topics, _)) if !topics.contains(name) => "<new>".to_owned(),
            _ => topic.id.to_string(),
        };
        lines.push(format!(
            "topic {name} id={id} partitions={}",
            topic.partitions.len()
        ));
        for (p, r) in &topic.partitions {
            // A broker's log dir id is chosen by the broker at its first start in migration
            // mode (random, so different in each run); the reserved ids are kept.
            let directories: Vec<String> = r
                .directories
                .iter()
                .map(|d| match d.as_u64_pair() {
                    (0, n) if n < 100 => d.to_string(),
                    _ => "<broker log dir>".to_owned(),
                })
                .collect();
            lines.push(format!(
                "partition {name}-{p} replicas={:?} directories={:?} isr={:?} leader={} \
                 leader_epoch={} partition_epoch={} adding={:?} removing={:?} elr={:?} \
                 last_known_elr={:?} recovery={:?}",
                r.replicas,
                directories,
                r.isr,
                r.leader,
                r.leader_epoch,
                r.partition_epoch,
                r.adding_replicas,
                r.removing_replicas,
                r.elr,
                r.last_known_elr,
                r.leader_recovery_state
            ));
        }
    }
    for (resource, configs) in &image.configs.resources {
        for (k, v) in configs {
            lines.push(format!(
                "config {} {:?} {k}={v}",
                resource.resource_type.0, resource.name
            ));
        }
    }
    for (entity, quotas) in &image.client_quotas.entities {
        for (k, v) in quotas {
            lines.push(format!("quota {:?} {k}={v}", entity.0));
        }
    }
    for ((mechanism, user), c) in &image.scram.credentials {
        let random = match created {
            // A user created in the run: the client (Kafka's ConfigCommand) drew the salt at
            // random, and its length too (`ScramFormatter.secureRandomBytes`: 130 random bits
            // in base 36, 25 or 26 characters), so only the key lengths are comparable.
            Some((_, users)) if !users.contains(user) => format!(
                "salt=<random> stored_key=<{} bytes> server_key=<{} bytes>",
                c.stored_key.len(),
                c.server_key.len()
            ),
            _ => format!(
                "salt={:02x?} stored_key={:02x?} server_key={:02x?}",
                c.salt, c.stored_key, c.server_key
            ),
        };
        lines.push(format!(
            "scram {mechanism} {user} iterations={} {random}",
            c.iterations
        ));
    }
    for acl in image.acls.acls.values() {
        lines.push(format!("acl {acl:?}"));
    }
    lines.push(format!(
        "producer_ids next={}",
        image.producer_ids.next_producer_id
    ));
    lines.sort();
    lines
}

fn same_data(a: &ZkTree, b: &ZkTree) -> bool {
    let paths = |t: &ZkTree| t.paths().map(str::to_owned).collect::<BTreeSet<_>>();
    paths(a) == paths(b)
        && a.paths().all(|p| {
            let (da, sa) = a.get(p).expect("listed");
            b.get(p)
                .is_ok_and(|(db, sb)| da == db && sa.version == sb.version)
        })
}

/// JSON with object keys sorted, recursively.
fn canonical(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{k:?}:{}", canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        serde_json::Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

/// A znode's data as compared: JSON canonical (ACL lists sorted; the topic id of a topic the
/// seed did not have and the random parts of SCRAM credentials of a user it did not have
/// replaced), anything else as text.
fn znode_text(path: &str, data: &[u8], seed: &ZkTree) -> String {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return String::from_utf8_lossy(data).into_owned();
    };
    let new_in_run = seed.exists(path).is_none();
    if let Some(obj) = value.as_object_mut() {
        if let Some(serde_json::Value::Array(acls)) = obj.get_mut("acls") {
            acls.sort_by_key(canonical);
        }
        let is_topic = path.starts_with("/brokers/topics/") && path.matches('/').count() == 3;
        if is_topic && new_in_run && obj.contains_key("topic_id") {
            obj.insert("topic_id".to_owned(), "<new>".into());
        }
        if path.starts_with("/config/users/")
            && new_in_run
            && let Some(serde_json::Value::Object(config)) = obj.get_mut("config")
        {
            for (key, v) in config.iter_mut() {
                if let (true, Some(s)) = (key.starts_with("SCRAM-SHA-"), v.as_str()) {
                    let kept: Vec<String> = s
                        .split(',')
                        .map(|part| match part.split_once('=') {
                            Some((k, _)) if k != "iterations" => format!("{k}=<random>"),
                            _ => part.to_owned(),
                        })
                        .collect();
                    *v = kept.join(",").into();
                }
            }
        }
    }
    canonical(&value)
}

/// ZooKeeper after a run as path → compared text (see the module docs).
fn normalize_zk(tree: &ZkTree, seed: &ZkTree) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut notifications: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for path in tree.paths() {
        let (data, stat) = tree.get(path).expect("listed");
        if let Some(parent) = NOTIFICATION_PARENTS.iter().find(|p| {
            path.strip_prefix(**p)
                .is_some_and(|rest| rest.starts_with('/'))
        }) {
            if seed.exists(path).is_none() {
                notifications
                    .entry(parent)
                    .or_default()
                    .push(znode_text(path, data, seed));
            }
            continue;
        }
        let mut text = znode_text(path, data, seed);
        if path.ends_with("/state") {
            text.push_str(&format!(" @version {}", stat.version));
        }
        out.insert(path.to_owned(), text);
    }
    for (parent, mut texts) in notifications {
        texts.sort();
        out.insert(format!("{parent}/<new notifications>"), texts.join("\n"));
    }
    out
}

/// Lines only krust has and lines only Kafka has.
fn diff_lines(krust: &[String], kafka: &[String]) -> String {
    let a: BTreeSet<&String> = krust.iter().collect();
    let b: BTreeSet<&String> = kafka.iter().collect();
    let mut out = String::new();
    for line in a.difference(&b) {
        out.push_str(&format!("  krust only: {line}\n"));
    }
    for line in b.difference(&a) {
        out.push_str(&format!("  Kafka only: {line}\n"));
    }
    out
}

/// The config change notifications Kafka writes and krust does not, by design: Kafka's
/// reconciliation rewrites every client quota and SCRAM entity (with a notification), krust's
/// only those that differ (`krust_migration::writer`'s documented deviation). Allowed when the
/// entity's znode is the same in both runs.
fn allowed_extra_notification(
    entity_path: &str,
    krust: &BTreeMap<String, String>,
    kafka: &BTreeMap<String, String>,
) -> bool {
    let is_quota_entity = ["users/", "clients/", "ips/"]
        .iter()
        .any(|p| entity_path.starts_with(p));
    let znode = format!("/config/{entity_path}");
    is_quota_entity && krust.get(&znode).is_some() && krust.get(&znode) == kafka.get(&znode)
}

/// The entity path of a config change notification as compared.
fn notification_entity(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value.get("entity_path")?.as_str().map(str::to_owned)
}

fn diff_zk(krust: &BTreeMap<String, String>, kafka: &BTreeMap<String, String>) -> String {
    let keys: BTreeSet<&String> = krust.keys().chain(kafka.keys()).collect();
    let mut out = String::new();
    for key in keys {
        let (a, b) = (krust.get(key), kafka.get(key));
        if key == "/config/changes/<new notifications>" {
            let lines = |t: Option<&String>| -> Vec<String> {
                t.map(|t| t.lines().map(str::to_owned).collect())
                    .unwrap_or_default()
            };
            let (mut ka, mut kf) = (lines(a), lines(b));
            kf.retain(|line| match ka.iter().position(|l| l == line) {
                Some(i) => {
                    ka.remove(i);
                    false
                }
                None => !notification_entity(line)
                    .is_some_and(|e| allowed_extra_notification(&e, krust, kafka)),
            });
            if !ka.is_empty() || !kf.is_empty() {
                out.push_str(&format!(
                    "  {key}\n    krust only: {ka:?}\n    Kafka only: {kf:?}\n"
                ));
            }
            continue;
        }
        if a != b {
            out.push_str(&format!(
                "  {key}\n    krust: {}\n    Kafka: {}\n",
                a.map_or("<missing>", String::as_str),
                b.map_or("<missing>", String::as_str)
            ));
        }
    }
    out
}

/// Builds the ZooKeeper cluster in ZooKeeper mode with Kafka's tools, then stops its broker.
fn seed_cluster(dist: &KafkaDist, work: &Path) -> (Seed, KafkaNode, ZooKeeperServer) {
    let zk = ZooKeeperServer::start(dist).expect("zookeeper starts");
    let mut broker = zk_broker(dist, &zk)
        .start()
        .expect("ZooKeeper-mode broker starts");
    let command_config = work.join("command.properties");
    std::fs::write(&command_config, COMMAND_CONFIG).expect("command config");
    for s in SEED {
        run_step(dist, &broker.bootstrap_servers(), &command_config, s)
            .unwrap_or_else(|e| panic!("seed step {}: {e}", s.name));
    }
    broker
        .terminate(Duration::from_secs(60))
        .expect("the seed broker stops");
    let tree = read_zk(&zk.connect_string(), &["/"]);
    let seed = Seed {
        tree,
        log_dir: broker.log_dir(),
        cluster_id: broker.cluster_id().to_owned(),
    };
    (seed, broker, zk)
}

/// The test (see the module docs). Takes about two minutes on a 2-core machine (about thirty
/// Kafka tool runs, three ZooKeeper/broker pairs, two controllers).
#[test]
fn krust_and_kafka_controllers_migrate_the_same_zookeeper_cluster_into_the_same_metadata() {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    let work = tempfile::tempdir().expect("tempdir");
    let (seed, seed_broker, seed_zk) = seed_cluster(&dist, work.path());
    drop(seed_zk);
    assert!(
        seed.tree.exists("/latest_producer_id_block").is_some()
            && seed
                .tree
                .exists("/kafka-acl-extended/prefixed/Topic/t-")
                .is_some()
            && seed
                .tree
                .exists("/config/users/<default>/clients/<default>")
                .is_some(),
        "the seed cluster has its producer id block, ACLs and quotas"
    );

    let all: Vec<&Step> = DUAL_WRITE.iter().collect();
    let krust = migrate(&dist, &seed, work.path(), Controller::Krust, &all);
    let accepted: Vec<&Step> = DUAL_WRITE
        .iter()
        .zip(&krust.outcomes)
        .filter(|(_, (_, outcome))| outcome.is_ok())
        .map(|(s, _)| s)
        .collect();
    let kafka = migrate(&dist, &seed, work.path(), Controller::Kafka, &accepted);
    drop(seed_broker);

    println!("krust: {}\nKafka: {}", krust.completed, kafka.completed);
    for (name, outcome) in &krust.outcomes {
        match outcome {
            Ok(()) => println!("dual-write {name}: done by both"),
            Err(e) => println!(
                "dual-write {name}: refused through krust's controller (not applied in Kafka's run): {}",
                e.lines().find(|l| l.contains("Exception:")).unwrap_or(e)
            ),
        }
    }
    for (name, outcome) in &kafka.outcomes {
        assert!(outcome.is_ok(), "Kafka's run refused {name}: {outcome:?}");
    }
    for (name, outcome) in &krust.outcomes {
        assert!(
            outcome.is_ok(),
            "krust's controller refused {name}: {outcome:?}"
        );
    }

    println!(
        "compared: {} lines of the copy image, {} of the end image, {} znodes",
        krust.copy.len(),
        krust.end.len(),
        krust.zk.len()
    );
    for znode in [
        "/brokers/topics/dw-new",
        "/brokers/topics/t-plain/partitions/4/state",
        "/config/topics/t-config",
        "/config/brokers/101",
        "/config/users/alice",
        "/kafka-acl/Topic/t-plain",
        "/latest_producer_id_block",
    ] {
        assert!(
            krust.zk.contains_key(znode),
            "{znode} read: {:#?}",
            krust.zk
        );
    }
    let copy = diff_lines(&krust.copy, &kafka.copy);
    let end = diff_lines(&krust.end, &kafka.end);
    let zk = diff_zk(&krust.zk, &kafka.zk);
    assert!(
        copy.is_empty() && end.is_empty() && zk.is_empty(),
        "the copy:\n{copy}\nafter the dual-write phase:\n{end}\nZooKeeper after the dual-write phase:\n{zk}"
    );
    assert!(
        krust.copy.iter().any(|l| l.starts_with("acl "))
            && krust.copy.iter().any(|l| l.starts_with("scram "))
            && krust.copy.iter().any(|l| l.starts_with("quota ")),
        "{:#?}",
        krust.copy
    );
}
