//! `krust migration rollback-plan`: the documented way back to ZooKeeper mode (facts §6.14,
//! docs/ops.html "Reverting to ZooKeeper mode During the Migration") written out for this
//! cluster — its connect string, its broker ids, the `zookeeper-shell.sh` commands, which
//! configs to change on which brokers — for the last completed step, found from the quorum's
//! image when given (else guessed from ZooKeeper alone, and said so).

use std::collections::BTreeSet;
use std::fmt;

use krust_metadata::MetadataImage;

use super::status::Phase;
use super::zk_view::ClusterZnodes;

/// The last completed migration step (the rows of Kafka's revert table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Nothing left ZooKeeper mode yet.
    Preparing,
    /// A KRaft quorum with the migration flag exists; no broker was restarted for it.
    QuorumProvisioned,
    /// The brokers run in migration mode (ZooKeeper-mode brokers registered with the quorum).
    BrokersInMigrationMode,
    /// Some or all brokers run in KRaft mode.
    BrokersMigratedToKraft,
    /// Finalized (POST_MIGRATION): no way back.
    Finalized,
    /// A cluster created in KRaft mode: there is no ZooKeeper mode to go back to.
    NotAMigration,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Preparing => "Preparing for migration",
            Self::QuorumProvisioned => "Provisioning the KRaft controller quorum",
            Self::BrokersInMigrationMode => "Enter Migration Mode on the brokers",
            Self::BrokersMigratedToKraft => "Migrating brokers to KRaft",
            Self::Finalized => "Finalizing the migration",
            Self::NotAMigration => "none (cluster created in KRaft mode)",
        })
    }
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPlan {
    /// The last completed step.
    pub stage: Stage,
    /// How the stage was found.
    pub basis: String,
    /// Whether a revert is possible.
    pub can_revert: bool,
    /// The numbered steps.
    pub steps: Vec<String>,
    /// Caveats.
    pub notes: Vec<String>,
}

impl fmt::Display for RollbackPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Last completed step: {} ({})", self.stage, self.basis)?;
        if !self.can_revert {
            writeln!(f, "cannot revert: finalized")?;
        }
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "{}. {step}", i + 1)?;
        }
        for note in &self.notes {
            writeln!(f, "Note: {note}")?;
        }
        Ok(())
    }
}

fn ids(set: &BTreeSet<i32>) -> String {
    if set.is_empty() {
        return "(none known)".to_owned();
    }
    set.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The stage from the quorum's image (exact) or from ZooKeeper alone (a guess: finalization and
/// a quorum that never touched ZooKeeper are invisible there).
#[must_use]
pub fn stage(zk: &ClusterZnodes, image: Option<&MetadataImage>) -> (Stage, String) {
    if let Some(image) = image {
        let kraft_brokers = image
            .cluster
            .brokers
            .values()
            .any(|b| !b.is_migrating_zk_broker);
        let zk_brokers = image
            .cluster
            .brokers
            .values()
            .any(|b| b.is_migrating_zk_broker);
        let basis = "from the quorum's metadata".to_owned();
        let stage = match Phase::of(image) {
            Phase::NotMigrating => Stage::NotAMigration,
            Phase::PostMigration => Stage::Finalized,
            Phase::PreMigration if zk_brokers => Stage::BrokersInMigrationMode,
            Phase::PreMigration => Stage::QuorumProvisioned,
            Phase::MigrationHybrid if kraft_brokers => Stage::BrokersMigratedToKraft,
            Phase::MigrationHybrid => Stage::BrokersInMigrationMode,
            Phase::MigrationAllKraft => Stage::BrokersMigratedToKraft,
        };
        return (stage, basis);
    }
    let kraft_owned = zk.kraft_controller().is_some();
    let registered: BTreeSet<i32> = zk.brokers.keys().copied().collect();
    let absent: BTreeSet<i32> = zk
        .assignment_broker_ids
        .difference(&registered)
        .copied()
        .collect();
    if kraft_owned || zk.initial_migration_done() {
        if absent.is_empty() {
            (
                Stage::BrokersInMigrationMode,
                "from ZooKeeper only: a KRaft controller owns /controller or /migration holds a \
                 copy, every broker of the assignments is in /brokers/ids"
                    .to_owned(),
            )
        } else {
            (
                Stage::BrokersMigratedToKraft,
                format!(
                    "from ZooKeeper only: a KRaft controller owns /controller or /migration \
                     holds a copy, and brokers {} of the assignments are not in /brokers/ids \
                     (KRaft-mode brokers do not register there — or they are down)",
                    ids(&absent)
                ),
            )
        }
    } else if zk.migration.is_some() {
        (
            Stage::QuorumProvisioned,
            "from ZooKeeper only: /migration exists but nothing was copied".to_owned(),
        )
    } else {
        (
            Stage::Preparing,
            "from ZooKeeper only: no /migration, /controller held by a ZooKeeper-mode broker \
             (a quorum provisioned but never started would not show)"
                .to_owned(),
        )
    }
}

/// The revert steps for this cluster. `zookeeper` is its connect string (with chroot).
#[must_use]
pub fn rollback_plan(
    zookeeper: &str,
    zk: &ClusterZnodes,
    image: Option<&MetadataImage>,
) -> RollbackPlan {
    let (stage, basis) = stage(zk, image);
    let mut brokers: BTreeSet<i32> = zk.brokers.keys().copied().collect();
    brokers.extend(zk.assignment_broker_ids.iter().copied());
    if let Some(image) = image {
        brokers.extend(image.cluster.brokers.keys().copied());
    }
    let kraft_brokers: BTreeSet<i32> = image
        .map(|i| {
            i.cluster
                .brokers
                .values()
                .filter(|b| !b.is_migrating_zk_broker)
                .map(|b| b.id)
                .collect()
        })
        .unwrap_or_default();
    let shell = |command: &str| format!("bin/zookeeper-shell.sh {zookeeper} {command}");
    let deprovision = "Deprovision the KRaft controller quorum: stop every controller (krust \
                       server / kafka-server-start.sh with process.roles=controller) and remove \
                       its storage."
        .to_owned();
    let remove_controller = format!(
        "Quickly (the cluster has no controller until then): {} so that one of the brokers \
         becomes the ZooKeeper-mode controller again.",
        shell("rmr /controller")
    );
    let clear_migration = format!(
        "{} and keep its output (useful for debugging), then {} to clear the migration state \
         (this allows a later new attempt).",
        shell("get /migration"),
        shell("rmr /migration")
    );
    let mut notes = Vec::new();
    let mut can_revert = true;
    let steps = match stage {
        Stage::Preparing => {
            vec!["Nothing to do: the cluster never left ZooKeeper mode.".to_owned()]
        }
        Stage::QuorumProvisioned => vec![deprovision, "Then you are done.".to_owned()],
        Stage::BrokersInMigrationMode => {
            notes.push(
                "until /controller is deleted, ignore broker log errors about failing to connect \
                 to the KRaft controller; they stop after the roll"
                    .to_owned(),
            );
            vec![
                deprovision,
                remove_controller,
                clear_migration,
                format!(
                    "On each broker ({}): remove zookeeper.metadata.migration.enable, \
                     controller.listener.names, controller.quorum.voters and \
                     controller.quorum.bootstrap.servers; replace node.id with broker.id.",
                    ids(&brokers)
                ),
                "Perform a rolling restart of all brokers. Then you are done.".to_owned(),
            ]
        }
        Stage::BrokersMigratedToKraft => {
            notes.push(
                "on the first roll zookeeper.metadata.migration.enable must remain true; do not \
                 set it to false until the second roll"
                    .to_owned(),
            );
            notes.push(
                "until /controller is deleted, ignore broker log errors about failing to connect \
                 to the KRaft controller"
                    .to_owned(),
            );
            let kraft_text = if image.is_some() {
                format!("the brokers now in KRaft mode ({})", ids(&kraft_brokers))
            } else {
                "each broker now in KRaft mode".to_owned()
            };
            vec![
                format!(
                    "On {kraft_text}: remove process.roles, replace node.id with broker.id, \
                     restore zookeeper.connect={zookeeper} and any other ZooKeeper configs \
                     (zookeeper.ssl.*, …); keep zookeeper.metadata.migration.enable=true."
                ),
                format!(
                    "Perform a rolling restart of all brokers ({}).",
                    ids(&brokers)
                ),
                deprovision,
                remove_controller,
                clear_migration,
                format!(
                    "On each broker ({}): remove zookeeper.metadata.migration.enable, \
                     controller.listener.names, controller.quorum.voters and \
                     controller.quorum.bootstrap.servers.",
                    ids(&brokers)
                ),
                "Perform a second rolling restart of all brokers. Then you are done.".to_owned(),
            ]
        }
        Stage::Finalized | Stage::NotAMigration => {
            can_revert = false;
            Vec::new()
        }
    };
    if stage == Stage::NotAMigration {
        notes.push(
            "this quorum was created in KRaft mode; it never had a ZooKeeper mode".to_owned(),
        );
    }
    if image.is_none() && can_revert {
        notes.push(
            "a finalized migration cannot be seen in ZooKeeper: give --bootstrap-controller to \
             be sure it was not finalized (then no revert is possible)"
                .to_owned(),
        );
    }
    notes.push(
        "krust's addition: Kafka prints no such plan; the steps are docs/ops.html's, filled in \
         for this cluster. `rmr` is zookeeper-shell's (deprecated) recursive delete; `deleteall` \
         is the same in ZooKeeper 3.5+"
            .to_owned(),
    );
    RollbackPlan {
        stage,
        basis,
        can_revert,
        steps,
        notes,
    }
}
