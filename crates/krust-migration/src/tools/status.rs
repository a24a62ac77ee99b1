//! `krust migration status`: where the migration stands, from the quorum's own image (its
//! `ZkMigrationState`, broker and controller registrations) and ZooKeeper (`/migration`,
//! `/controller`, `/brokers/ids`, the brokers of topic assignments) — and, while it waits,
//! *why* (the gates of facts §6.4: controllers migration-ready, every broker of `/brokers/ids`
//! and of every assignment registered with the quorum as a migrating ZooKeeper broker).

use std::collections::BTreeSet;
use std::fmt;

use krust_metadata::MetadataImage;
use krust_metadata::image::features::ZkMigrationState;
use krust_metadata::records::MetadataRecord;
use krust_zk::model::cluster::MigrationZNode;
use serde_json::{Value, json};

use super::zk_view::ClusterZnodes;
use crate::driver::status::zk_migration_state_name;

/// The operator's view of the migration (docs/ops.html phases, facts §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `ZkMigrationState` NONE: a cluster created in KRaft mode; no migration.
    NotMigrating,
    /// PRE_MIGRATION: the quorum waits for the brokers (nothing copied yet).
    PreMigration,
    /// MIGRATION with ZooKeeper-mode brokers left (hybrid, dual-write).
    MigrationHybrid,
    /// MIGRATION with every broker in KRaft mode: ready to finalize.
    MigrationAllKraft,
    /// POST_MIGRATION: finalized, ZooKeeper no longer written.
    PostMigration,
}

impl Phase {
    /// The phase from the image's state and its broker registrations.
    #[must_use]
    pub fn of(image: &MetadataImage) -> Self {
        match image.features.zk_migration_state {
            ZkMigrationState::None => Self::NotMigrating,
            ZkMigrationState::PreMigration => Self::PreMigration,
            ZkMigrationState::PostMigration => Self::PostMigration,
            ZkMigrationState::Migration => {
                if image
                    .cluster
                    .brokers
                    .values()
                    .any(|b| b.is_migrating_zk_broker)
                {
                    Self::MigrationHybrid
                } else {
                    Self::MigrationAllKraft
                }
            }
        }
    }

    /// A stable machine name (`--json`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::NotMigrating => "NONE",
            Self::PreMigration => "PRE_MIGRATION",
            Self::MigrationHybrid => "MIGRATION_HYBRID",
            Self::MigrationAllKraft => "MIGRATION_ALL_KRAFT",
            Self::PostMigration => "POST_MIGRATION",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotMigrating => "NONE (cluster created in KRaft mode: no migration)",
            Self::PreMigration => "PRE_MIGRATION (waiting for the brokers; nothing copied yet)",
            Self::MigrationHybrid => {
                "MIGRATION (hybrid: metadata copied, dual-writing, ZooKeeper-mode brokers left)"
            }
            Self::MigrationAllKraft => {
                "MIGRATION (every broker in KRaft mode, dual-writing: ready to finalize)"
            }
            Self::PostMigration => "POST_MIGRATION (finalized: ZooKeeper is no longer written)",
        })
    }
}

/// One broker as the quorum and ZooKeeper know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRow {
    /// The id.
    pub id: i32,
    /// Registered in `/brokers/ids` (a ZooKeeper-mode broker that is up).
    pub in_zk: bool,
    /// Appears in a topic's replica assignment in ZooKeeper.
    pub in_assignments: bool,
    /// Its registration with the quorum, if any.
    pub kraft: Option<KraftRegistration>,
}

/// A broker's registration in the quorum's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KraftRegistration {
    /// Registered as a migrating ZooKeeper-mode broker (`IsMigratingZkBroker`).
    pub zk_mode: bool,
    /// Fenced.
    pub fenced: bool,
    /// In controlled shutdown.
    pub in_controlled_shutdown: bool,
}

impl BrokerRow {
    fn describe(&self) -> String {
        let mut text = match self.kraft {
            None => "NOT registered with the quorum".to_owned(),
            Some(k) => format!(
                "registered as a {} broker, {}{}",
                if k.zk_mode { "ZooKeeper-mode" } else { "KRaft" },
                if k.fenced { "fenced" } else { "unfenced" },
                if k.in_controlled_shutdown {
                    ", in controlled shutdown"
                } else {
                    ""
                }
            ),
        };
        let mut where_seen = Vec::new();
        if self.in_zk {
            where_seen.push("/brokers/ids");
        }
        if self.in_assignments {
            where_seen.push("topic assignments");
        }
        if !where_seen.is_empty() {
            text.push_str(&format!("; in ZooKeeper {}", where_seen.join(" and ")));
        }
        text
    }
}

/// What the tool learned from the quorum.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumView {
    /// The committed image, replayed from the leader's log.
    pub image: MetadataImage,
    /// The leader.
    pub leader_id: i32,
    /// Its epoch.
    pub leader_epoch: i32,
    /// The high watermark (the last committed offset is one below).
    pub high_watermark: i64,
    /// Records of the initial copy, when the log holding it was replayed ([`CopyCounter`]).
    pub copied_records: Option<usize>,
    /// The leader's snapshot (end offset, epoch) the read started from, if any.
    pub snapshot: Option<(i64, i32)>,
    /// The quorum's voters (DescribeQuorum).
    pub voter_ids: Vec<i32>,
}

/// `krust migration status`'s report.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// The phase.
    pub phase: Phase,
    /// The image's `ZkMigrationState`.
    pub zk_migration_state: ZkMigrationState,
    /// `metadata.version`.
    pub metadata_version: String,
    /// The quorum leader and epoch.
    pub leader: (i32, i32),
    /// The last committed offset of the metadata log.
    pub last_committed_offset: i64,
    /// The leader's snapshot (end offset, epoch) the image was read from, if any.
    pub snapshot: Option<(i64, i32)>,
    /// `/migration`.
    pub migration: Option<MigrationZNode>,
    /// `ZkWriteBehindLag`: last committed offset − `/migration`'s `kraft_metadata_offset`
    /// (while the migration dual-writes).
    pub zk_write_behind_lag: Option<i64>,
    /// Records of the initial copy.
    pub copied_records: Option<usize>,
    /// The KRaft controller recorded in `/controller` (id, epoch).
    pub kraft_controller_in_zk: Option<(i32, i32)>,
    /// The ZooKeeper-mode controller in `/controller`, if a broker holds it.
    pub zk_controller: Option<i32>,
    /// Every broker known to either side.
    pub brokers: Vec<BrokerRow>,
    /// Quorum controllers' registrations: (id, `ZkMigrationReady`).
    pub controllers: Vec<(i32, bool)>,
    /// Why the migration does not move on, or what the operator does next.
    pub notes: Vec<String>,
    /// Whether ZooKeeper was read (`--zookeeper`); without it the ZooKeeper side of the report
    /// (`/migration`, `/controller`, `/brokers/ids`, the write-behind lag) is unknown.
    pub zookeeper_read: bool,
}

/// Derives the status from what the quorum and ZooKeeper hold (`zk`: `None` when ZooKeeper was
/// not read — after finalization it may be gone).
#[must_use]
pub fn derive_status(quorum: &QuorumView, zk: Option<&ClusterZnodes>) -> StatusReport {
    let unread = ClusterZnodes::default();
    let zookeeper_read = zk.is_some();
    let zk = zk.unwrap_or(&unread);
    let image = &quorum.image;
    let phase = Phase::of(image);
    let mut ids: BTreeSet<i32> = image.cluster.brokers.keys().copied().collect();
    ids.extend(zk.brokers.keys().copied());
    ids.extend(zk.assignment_broker_ids.iter().copied());
    let brokers: Vec<BrokerRow> = ids
        .iter()
        .map(|id| BrokerRow {
            id: *id,
            in_zk: zk.brokers.contains_key(id),
            in_assignments: zk.assignment_broker_ids.contains(id),
            kraft: image.cluster.broker(*id).map(|b| KraftRegistration {
                zk_mode: b.is_migrating_zk_broker,
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
            }),
        })
        .collect();
    let controllers: Vec<(i32, bool)> = image
        .cluster
        .controllers
        .values()
        .map(|c| (c.id, c.zk_migration_ready))
        .collect();
    let last_committed_offset = quorum.high_watermark - 1;
    let zk_write_behind_lag = match (phase, zk.migration) {
        (Phase::MigrationHybrid | Phase::MigrationAllKraft, Some(m))
            if m.initial_migration_done() =>
        {
            Some((last_committed_offset - m.kraft_metadata_offset).max(0))
        }
        _ => None,
    };
    let mut notes = notes(
        phase,
        image,
        zookeeper_read.then_some(zk),
        &brokers,
        &controllers,
        &quorum.voter_ids,
    );
    if !zookeeper_read && !matches!(phase, Phase::NotMigrating | Phase::PostMigration) {
        notes.push(
            "ZooKeeper was not read (no --zookeeper): /migration, /controller, /brokers/ids and \
             the write-behind lag are not shown"
                .to_owned(),
        );
    }
    StatusReport {
        phase,
        zk_migration_state: image.features.zk_migration_state,
        metadata_version: image.metadata_version().version(),
        leader: (quorum.leader_id, quorum.leader_epoch),
        last_committed_offset,
        snapshot: quorum.snapshot,
        migration: zk.migration,
        zk_write_behind_lag,
        copied_records: quorum.copied_records,
        kraft_controller_in_zk: zk.kraft_controller(),
        zk_controller: zk
            .controller
            .as_ref()
            .filter(|c| c.kraft_controller_epoch.is_none())
            .map(|c| c.broker_id),
        brokers,
        controllers,
        notes,
        zookeeper_read,
    }
}

fn ids_text(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn notes(
    phase: Phase,
    image: &MetadataImage,
    zk: Option<&ClusterZnodes>,
    brokers: &[BrokerRow],
    controllers: &[(i32, bool)],
    voter_ids: &[i32],
) -> Vec<String> {
    let mut notes = Vec::new();
    match phase {
        Phase::NotMigrating => notes.push(
            "this quorum was created in KRaft mode: it cannot migrate a ZooKeeper cluster (format \
             it with ZooKeeper's cluster id and zookeeper.metadata.migration.enable=true)"
                .to_owned(),
        ),
        Phase::PreMigration => {
            let mv = image.metadata_version();
            if !mv.is_migration_supported() {
                notes.push(format!(
                    "The metadata.version too low at {} (3.4-IV0 needed)",
                    mv.version()
                ));
            }
            if mv.is_controller_registration_supported() {
                for id in voter_ids {
                    if !controllers.iter().any(|(c, _)| c == id) {
                        notes.push(format!("No registration found for controller {id}"));
                    }
                }
                for (id, ready) in controllers {
                    if !ready {
                        notes.push(format!(
                            "Controller {id} has not enabled zookeeper.metadata.migration.enable"
                        ));
                    }
                }
            }
            if image.cluster.brokers.is_empty() {
                notes.push(
                    "No brokers are known to KRaft, waiting for brokers to register.".to_owned(),
                );
            }
            if zk.is_some_and(|zk| zk.brokers.is_empty()) {
                notes.push(
                    "No brokers are registered in ZK, waiting for brokers to register.".to_owned(),
                );
            }
            let missing = |pick: &dyn Fn(&BrokerRow) -> bool| -> Vec<i32> {
                brokers
                    .iter()
                    .filter(|b| pick(b) && !b.kraft.is_some_and(|k| k.zk_mode))
                    .map(|b| b.id)
                    .collect()
            };
            let zk_missing = missing(&|b| b.in_zk);
            if !zk_missing.is_empty() {
                notes.push(format!(
                    "waiting for ZooKeeper brokers {} (in /brokers/ids) to register with the \
                     quorum: restart them with zookeeper.metadata.migration.enable=true, \
                     controller.quorum.voters and controller.listener.names",
                    ids_text(&zk_missing)
                ));
            }
            let assignment_missing = missing(&|b| b.in_assignments && !b.in_zk);
            if !assignment_missing.is_empty() {
                notes.push(format!(
                    "waiting for brokers {} that hold replicas (topic assignments) but are not \
                     up: start them in migration mode, or reassign their replicas",
                    ids_text(&assignment_missing)
                ));
            }
            let collisions: Vec<i32> = brokers
                .iter()
                .filter(|b| (b.in_zk || b.in_assignments) && voter_ids.contains(&b.id))
                .map(|b| b.id)
                .collect();
            if !collisions.is_empty() {
                notes.push(format!(
                    "ZooKeeper brokers {} have the node ids of KRaft controllers: brokers and \
                     controllers share one id space, so the migration will not start; give the \
                     controllers node ids no broker uses",
                    ids_text(&collisions)
                ));
            }
            if notes.is_empty() {
                notes.push(
                    "every broker has registered: the active controller claims /controller and \
                     copies the metadata"
                        .to_owned(),
                );
            }
        }
        Phase::MigrationHybrid => {
            if zk.is_some_and(|zk| !zk.initial_migration_done()) {
                notes.push(
                    "the image says MIGRATION but /migration says no copy was made: the driver \
                     refuses to go on (was /migration removed by hand?)"
                        .to_owned(),
                );
            }
            let zk_mode: Vec<i32> = brokers
                .iter()
                .filter(|b| b.kraft.is_some_and(|k| k.zk_mode))
                .map(|b| b.id)
                .collect();
            // A ZooKeeper-mode broker up without the migration settings: the KRaft controller
            // only drives brokers registered with the quorum (facts §6.11), and `/controller`
            // is the KRaft controller's persistent claim, so it gets no metadata at all.
            let unregistered: Vec<i32> = brokers
                .iter()
                .filter(|b| b.in_zk && b.kraft.is_none())
                .map(|b| b.id)
                .collect();
            if !unregistered.is_empty() {
                notes.push(format!(
                    "ZooKeeper brokers {} are in /brokers/ids but not registered with the quorum: \
                     the KRaft controller sends them no metadata; restart them with \
                     zookeeper.metadata.migration.enable=true, controller.quorum.voters and \
                     controller.listener.names",
                    ids_text(&unregistered)
                ));
            }
            notes.push(format!(
                "next: roll brokers {} into KRaft mode (process.roles=broker, node.id, no \
                 zookeeper.connect)",
                ids_text(&zk_mode)
            ));
        }
        Phase::MigrationAllKraft => notes.push(
            "next: finalize by restarting each controller without \
             zookeeper.metadata.migration.enable (no rollback after that)"
                .to_owned(),
        ),
        Phase::PostMigration => {
            notes.push("finalized: ZooKeeper can be decommissioned".to_owned());
        }
    }
    let fenced: Vec<i32> = brokers
        .iter()
        .filter(|b| b.kraft.is_some_and(|k| k.fenced))
        .map(|b| b.id)
        .collect();
    if !fenced.is_empty() {
        notes.push(format!("fenced brokers: {}", ids_text(&fenced)));
    }
    notes
}

impl fmt::Display for StatusReport {
    /// The text form: `key: value` lines, then one line per broker and per note.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Phase: {}", self.phase)?;
        writeln!(
            f,
            "ZkMigrationState: {}",
            zk_migration_state_name(self.zk_migration_state)
        )?;
        writeln!(f, "MetadataVersion: {}", self.metadata_version)?;
        writeln!(
            f,
            "QuorumLeader: {} (epoch {})",
            self.leader.0, self.leader.1
        )?;
        match self.snapshot {
            Some((end, epoch)) => writeln!(
                f,
                "LastCommittedOffset: {} (read from snapshot {end:020}-{epoch:010} and the log after it)",
                self.last_committed_offset
            )?,
            None => writeln!(f, "LastCommittedOffset: {}", self.last_committed_offset)?,
        }
        match self.migration {
            None if !self.zookeeper_read => {
                writeln!(f, "ZkMigrationZnode: not read (no --zookeeper)")?;
            }
            None => writeln!(f, "ZkMigrationZnode: absent")?,
            Some(m) => writeln!(
                f,
                "ZkMigrationZnode: kraft_metadata_offset={} kraft_metadata_epoch={} \
                 kraft_controller_id={} kraft_controller_epoch={}",
                m.kraft_metadata_offset,
                m.kraft_metadata_epoch,
                m.kraft_controller_id,
                m.kraft_controller_epoch
            )?,
        }
        match self.zk_write_behind_lag {
            Some(lag) => writeln!(f, "ZkWriteBehindLag: {lag}")?,
            None if !self.zookeeper_read
                && matches!(
                    self.phase,
                    Phase::MigrationHybrid | Phase::MigrationAllKraft
                ) =>
            {
                writeln!(f, "ZkWriteBehindLag: unknown (no --zookeeper)")?;
            }
            None => writeln!(f, "ZkWriteBehindLag: n/a (not dual-writing)")?,
        }
        match self.copied_records {
            Some(n) => writeln!(f, "RecordsCopied: {n}")?,
            None => writeln!(
                f,
                "RecordsCopied: unknown (no copy, or the log now starts at a snapshot)"
            )?,
        }
        match (self.kraft_controller_in_zk, self.zk_controller) {
            (Some((id, epoch)), _) => {
                writeln!(f, "ZkController: KRaft controller {id} (epoch {epoch})")?;
            }
            (None, Some(id)) => writeln!(f, "ZkController: ZooKeeper-mode broker {id}")?,
            (None, None) if !self.zookeeper_read => {
                writeln!(f, "ZkController: not read (no --zookeeper)")?;
            }
            (None, None) => writeln!(f, "ZkController: none")?,
        }
        let controllers: Vec<String> = self
            .controllers
            .iter()
            .map(|(id, ready)| {
                format!("{id}{}", if *ready { "" } else { " (not migration-ready)" })
            })
            .collect();
        if controllers.is_empty() {
            writeln!(f, "Controllers: (none registered yet)")?;
        } else {
            writeln!(f, "Controllers: {}", controllers.join(", "))?;
        }
        for broker in &self.brokers {
            writeln!(f, "Broker {}: {}", broker.id, broker.describe())?;
        }
        for note in &self.notes {
            writeln!(f, "Note: {note}")?;
        }
        Ok(())
    }
}

impl StatusReport {
    /// The `--json` form.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "phase": self.phase.name(),
            "zkMigrationState": zk_migration_state_name(self.zk_migration_state),
            "metadataVersion": self.metadata_version,
            "leaderId": self.leader.0,
            "leaderEpoch": self.leader.1,
            "lastCommittedOffset": self.last_committed_offset,
            "readFromSnapshot": self.snapshot.map(|(end, epoch)| json!({
                "endOffset": end, "epoch": epoch,
            })),
            "migrationZnode": self.migration.map(|m| json!({
                "kraftMetadataOffset": m.kraft_metadata_offset,
                "kraftMetadataEpoch": m.kraft_metadata_epoch,
                "kraftControllerId": m.kraft_controller_id,
                "kraftControllerEpoch": m.kraft_controller_epoch,
            })),
            "zkWriteBehindLag": self.zk_write_behind_lag,
            "recordsCopied": self.copied_records,
            "zkController": match (self.kraft_controller_in_zk, self.zk_controller) {
                (Some((id, epoch)), _) => json!({"kraft": true, "id": id, "epoch": epoch}),
                (None, Some(id)) => json!({"kraft": false, "id": id}),
                (None, None) => Value::Null,
            },
            "controllers": self.controllers.iter().map(|(id, ready)| json!({
                "id": id, "zkMigrationReady": ready,
            })).collect::<Vec<_>>(),
            "brokers": self.brokers.iter().map(|b| json!({
                "id": b.id,
                "inZkBrokerIds": b.in_zk,
                "inTopicAssignments": b.in_assignments,
                "kraft": b.kraft.map(|k| json!({
                    "zkMode": k.zk_mode,
                    "fenced": k.fenced,
                    "inControlledShutdown": k.in_controlled_shutdown,
                })),
            })).collect::<Vec<_>>(),
            "notes": self.notes,
            "zookeeperRead": self.zookeeper_read,
        })
    }
}

/// Counts the records of the initial copy while the metadata log is replayed in order: the
/// metadata records (topics, partitions, configs, quotas, SCRAM, producer ids, ACLs, tokens) of
/// the transaction that ends with `ZkMigrationStateRecord(MIGRATION)` (facts §6.8). Unknown (`None`) without metadata transactions or when
/// the log starts at a snapshot taken after the copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyCounter {
    in_transaction: Option<usize>,
    copied: Option<usize>,
}

impl CopyCounter {
    /// Sees the next committed record.
    pub fn observe(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::BeginTransaction(_) => self.in_transaction = Some(0),
            MetadataRecord::EndTransaction(_) | MetadataRecord::AbortTransaction(_) => {
                self.in_transaction = None;
            }
            MetadataRecord::ZkMigrationState(r)
                if r.zk_migration_state == 1 && self.in_transaction.is_some() =>
            {
                self.copied = self.in_transaction;
            }
            // Only what the reader produces (facts §6.8): registrations and fencing that
            // commit while the copy's transaction is open are not part of the copy.
            MetadataRecord::Topic(_)
            | MetadataRecord::Partition(_)
            | MetadataRecord::Config(_)
            | MetadataRecord::ClientQuota(_)
            | MetadataRecord::UserScramCredential(_)
            | MetadataRecord::ProducerIds(_)
            | MetadataRecord::AccessControlEntry(_)
            | MetadataRecord::DelegationToken(_) => {
                if let Some(n) = &mut self.in_transaction {
                    *n += 1;
                }
            }
            _ => {}
        }
    }

    /// The records copied, once the copy's state record was seen.
    #[must_use]
    pub fn copied(&self) -> Option<usize> {
        self.copied
    }
}
