//! [`ClusterZnodes`]: the cluster-level znodes the tools look at, decoded.

use std::collections::{BTreeMap, BTreeSet};

use krust_zk::model::cluster::{
    BrokerRegistrationZNode, ControllerRegistration, FeatureZNode, MigrationZNode, cluster_id,
    controller_epoch,
};
use krust_zk::model::paths;
use krust_zk::model::topics::TopicZNode;
use krust_zk::tree::{ZkTree, join};

/// The subtrees [`ClusterZnodes::parse`] reads; read them with
/// [`krust_zk::backend::read_tree`].
pub const CLUSTER_READ_ROOTS: &[&str] = &[
    paths::CLUSTER_ID,
    paths::BROKER_IDS,
    paths::CONTROLLER,
    paths::CONTROLLER_EPOCH,
    paths::MIGRATION,
    paths::FEATURE,
    paths::REASSIGN_PARTITIONS,
    paths::DELETE_TOPICS,
    paths::TOPICS,
];

/// What ZooKeeper says about the cluster, decoded. A znode that does not decode is left out
/// and its error is in [`ClusterZnodes::errors`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterZnodes {
    /// `/cluster/id`.
    pub cluster_id: Option<String>,
    /// `/brokers/ids/<id>` registrations (ZooKeeper-mode brokers that are up).
    pub brokers: BTreeMap<i32, BrokerRegistrationZNode>,
    /// `/controller`.
    pub controller: Option<ControllerRegistration>,
    /// `/controller_epoch`.
    pub controller_epoch: Option<i32>,
    /// `/migration`.
    pub migration: Option<MigrationZNode>,
    /// `/feature`.
    pub feature: Option<FeatureZNode>,
    /// `/admin/reassign_partitions` exists (a ZooKeeper-era reassignment is pending).
    pub reassignment_pending: bool,
    /// `/admin/delete_topics/<t>`: topics pending deletion.
    pub pending_deletions: BTreeSet<String>,
    /// Every broker id in a topic's replica assignment (replicas, adding and removing).
    pub assignment_broker_ids: BTreeSet<i32>,
    /// Topics in `/brokers/topics`.
    pub topic_count: usize,
    /// Znodes that did not decode (`<path>: <why>`).
    pub errors: Vec<String>,
}

impl ClusterZnodes {
    /// Decodes the znodes of [`CLUSTER_READ_ROOTS`] found in `tree`.
    #[must_use]
    pub fn parse(tree: &ZkTree) -> Self {
        let mut out = Self::default();
        let get = |path: &str| tree.get(path).ok().map(|(data, _)| data);
        if let Some(data) = get(paths::CLUSTER_ID) {
            match cluster_id::decode(data) {
                Ok(id) => out.cluster_id = Some(id),
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        for name in tree.children(paths::BROKER_IDS).unwrap_or_default() {
            let path = join(paths::BROKER_IDS, &name);
            let Ok(id) = name.parse::<i32>() else {
                out.errors
                    .push(format!("{path}: not a broker id (expected an integer)"));
                continue;
            };
            let data = get(&path).unwrap_or_default();
            match BrokerRegistrationZNode::decode(id, data) {
                Ok(registration) => {
                    out.brokers.insert(id, registration);
                }
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        if let Some(data) = get(paths::CONTROLLER) {
            match ControllerRegistration::decode(data) {
                Ok(c) => out.controller = Some(c),
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        if let Some(data) = get(paths::CONTROLLER_EPOCH) {
            match controller_epoch::decode(data) {
                Ok(e) => out.controller_epoch = Some(e),
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        if let Some(data) = get(paths::MIGRATION) {
            match MigrationZNode::decode(data) {
                Ok(m) => out.migration = Some(m),
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        if let Some(data) = get(paths::FEATURE) {
            match FeatureZNode::decode(data) {
                Ok(f) => out.feature = Some(f),
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        out.reassignment_pending = tree.exists(paths::REASSIGN_PARTITIONS).is_some();
        out.pending_deletions = tree
            .children(paths::DELETE_TOPICS)
            .unwrap_or_default()
            .into_iter()
            .collect();
        for topic in tree.children(paths::TOPICS).unwrap_or_default() {
            out.topic_count += 1;
            let path = paths::topic(&topic);
            let data = get(&path).unwrap_or_default();
            match TopicZNode::decode(&topic, data) {
                Ok(znode) => {
                    for assignment in znode.partitions.values() {
                        out.assignment_broker_ids.extend(
                            assignment
                                .replicas
                                .iter()
                                .chain(&assignment.adding_replicas)
                                .chain(&assignment.removing_replicas),
                        );
                    }
                }
                Err(e) => out.errors.push(e.to_string()),
            }
        }
        out
    }

    /// The KRaft controller holding `/controller` (its node id and epoch), if one does.
    #[must_use]
    pub fn kraft_controller(&self) -> Option<(i32, i32)> {
        self.controller
            .as_ref()
            .and_then(|c| c.kraft_controller_epoch.map(|e| (c.broker_id, e)))
    }

    /// Whether `/migration` says the initial copy is done (`kraft_metadata_offset > 0`).
    #[must_use]
    pub fn initial_migration_done(&self) -> bool {
        self.migration.is_some_and(|m| m.initial_migration_done())
    }
}
