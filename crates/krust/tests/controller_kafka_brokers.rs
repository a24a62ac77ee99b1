//! Interop: three `krust server` controllers (formatted with `krust storage format`, running
//! the quorum controller) and three real Kafka 3.9 brokers (`process.roles=broker`, same
//! cluster id, `controller.quorum.voters` naming the krust controllers).
//!
//! Checks, in order: every broker registers with the active krust controller and is unfenced
//! (Kafka logs `Kafka Server started` only after its initial unfence), and Kafka's
//! `MetadataQuorumCommand describe --replication` lists the brokers as observers; Kafka's
//! `FeatureCommand --bootstrap-controller describe` shows the finalized metadata.version and
//! `upgrade --metadata 3.9` through a broker (UpdateFeatures in an Envelope) succeeds;
//! `kafka-topics --create --replication-factor 3` through a broker (forwarded to the
//! controller in an Envelope) and `--describe` shows three in-sync replicas; Kafka's console
//! producer and consumer move records through that topic; SIGKILL of the active krust
//! controller elects a standby, which takes over and still creates a topic; `kafka-topics
//! --alter --partitions` and `kafka-configs --alter` go through; `--delete` removes a topic.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, class};
use support::{FAST_TIMEOUTS, Quorum, wait_for_quorum};

const WAIT: Duration = Duration::from_secs(120);
const BROKER_IDS: [i32; 3] = [101, 102, 103];
/// `kafka-configs.sh`.
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";

fn start_controller(quorum: &mut Quorum, id: i32) {
    let node = quorum.node(id);
    node.process = Some(cluster::start_server_within(&node.dir, id, WAIT));
}

fn logs(quorum: &Quorum, brokers: &[KafkaNode]) -> String {
    cluster::with_kafka_logs(quorum.log_tails(), brokers)
}

/// Runs `kafka-topics` with `args` until it succeeds and `accept` holds for its stdout.
fn topics_until(
    dist: &KafkaDist,
    args: &[&str],
    accept: impl Fn(&str) -> bool,
) -> Result<String, String> {
    cluster::tool_until(dist, class::TOPIC_COMMAND, args, WAIT, accept)
}

/// Lines of `kafka-topics --describe` output for the partitions of `topic` whose ISR has
/// `n` brokers.
fn partitions_with_isr(describe: &str, topic: &str, n: usize) -> usize {
    describe
        .lines()
        .filter(|l| l.contains(&format!("Topic: {topic}")) && l.contains("Partition:"))
        .filter(|l| {
            l.split("Isr:")
                .nth(1)
                .map(|rest| rest.split_whitespace().next().unwrap_or(""))
                .is_some_and(|isr| isr.split(',').filter(|s| !s.is_empty()).count() == n)
        })
        .count()
}

#[test]
fn kafka_brokers_run_on_a_krust_controller_quorum() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 distribution");
    let mut quorum = Quorum::new(3, FAST_TIMEOUTS);
    for id in 1..=3 {
        start_controller(&mut quorum, id);
    }
    let first = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    println!(
        "active krust controller: {} in epoch {}",
        first.leader_id, first.leader_epoch
    );

    // Three Kafka brokers registering with the krust quorum.
    let mut brokers: Vec<KafkaNode> = BROKER_IDS
        .iter()
        .map(|&id| {
            KafkaNode::builder(&dist)
                .node_id(id)
                .role(KafkaRole::Broker)
                .cluster_id(quorum.cluster_id.clone())
                .quorum_voters(quorum.voters.clone())
                .start_timeout(WAIT)
                .build()
                .expect("broker built and formatted")
        })
        .collect();
    let failed = cluster::start_kafka_brokers(&mut brokers, WAIT);
    assert!(
        failed.is_empty(),
        "brokers did not start: {failed:?}\n{}",
        logs(&quorum, &brokers)
    );
    let bootstrap = brokers
        .iter()
        .map(KafkaNode::bootstrap_servers)
        .collect::<Vec<_>>()
        .join(",");

    // Kafka's tool sees the brokers as observers of the metadata log.
    let controllers = quorum
        .nodes
        .iter()
        .map(support::Node::address)
        .collect::<Vec<_>>()
        .join(",");
    let replication = dist
        .run_tool(
            class::METADATA_QUORUM,
            &[
                "--bootstrap-controller",
                &controllers,
                "describe",
                "--replication",
            ],
            Duration::from_secs(120),
        )
        .expect("run MetadataQuorumCommand");
    println!("describe --replication:\n{}", replication.stdout);
    for id in BROKER_IDS {
        assert!(
            replication
                .stdout
                .lines()
                .any(|l| l.starts_with(&id.to_string()) && l.contains("Observer")),
            "broker {id} is not an observer:\n{}{}",
            replication.stdout,
            replication.stderr
        );
    }

    // Kafka's feature tool reads the finalized features from a krust controller's ApiVersions.
    let features = dist
        .run_tool(
            class::FEATURE_COMMAND,
            &["--bootstrap-controller", &controllers, "describe"],
            Duration::from_secs(120),
        )
        .expect("run FeatureCommand");
    println!("kafka-features describe:\n{}", features.stdout);
    assert!(
        features
            .stdout
            .lines()
            .any(|l| l.contains("Feature: metadata.version")
                && l.contains("FinalizedVersionLevel: 3.9-IV0")),
        "kafka-features describe:\n{}{}",
        features.stdout,
        features.stderr
    );

    // UpdateFeatures forwarded by a broker (Envelope): re-finalizing the current level.
    let upgrade = dist
        .run_tool(
            class::FEATURE_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "upgrade",
                "--metadata",
                "3.9",
            ],
            Duration::from_secs(120),
        )
        .expect("run FeatureCommand upgrade");
    println!(
        "kafka-features upgrade:\n{}{}",
        upgrade.stdout, upgrade.stderr
    );
    assert!(
        upgrade.success(),
        "kafka-features upgrade --metadata 3.9:\n{}{}",
        upgrade.stdout,
        upgrade.stderr
    );

    // Create (forwarded in an Envelope), describe, produce, consume.
    if let Err(e) = dist.create_topic(&bootstrap, "krust-events", 3, 3, &[]) {
        panic!("create topic: {e}\n{}", logs(&quorum, &brokers));
    }
    let describe = topics_until(
        &dist,
        &[
            "--bootstrap-server",
            &bootstrap,
            "--describe",
            "--topic",
            "krust-events",
        ],
        |out| partitions_with_isr(out, "krust-events", 3) == 3,
    )
    .unwrap_or_else(|last| panic!("describe never showed 3 ISRs:\n{last}"));
    println!("{describe}");
    let records: Vec<String> = (0..20).map(|i| format!("record-{i}")).collect();
    let input = records.join("\n") + "\n";
    if let Err(e) = dist.console_produce(&bootstrap, "krust-events", &input, &[], &[]) {
        panic!("produce: {e}\n{}", logs(&quorum, &brokers));
    }
    let consumed = dist
        .console_consume(
            &bootstrap,
            "krust-events",
            records.len(),
            &[],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("consume: {e}\n{}", logs(&quorum, &brokers)));
    let mut got: Vec<&str> = consumed.stdout.lines().collect();
    got.sort_unstable();
    let mut want: Vec<&str> = records.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(got, want, "consumed records");

    // SIGKILL the active controller: a standby takes over and still creates topics.
    let q = wait_for_quorum(&quorum.bootstrap(), WAIT, |q| q.leader_id > 0)
        .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    let (old, epoch) = (q.leader_id, q.leader_epoch);
    quorum.kill(old);
    let survivors = quorum.bootstrap_without(&[old]);
    let next = wait_for_quorum(&survivors, WAIT, |q| {
        q.leader_id > 0 && q.leader_id != old && q.leader_epoch > epoch
    })
    .unwrap_or_else(|| panic!("no new leader after killing {old}\n{}", quorum.log_tails()));
    println!(
        "killed controller {old} (epoch {epoch}); new active controller {} in epoch {}",
        next.leader_id, next.leader_epoch
    );
    topics_until(
        &dist,
        &[
            "--bootstrap-server",
            &bootstrap,
            "--create",
            "--if-not-exists",
            "--topic",
            "after-failover",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
        ],
        |_| true,
    )
    .unwrap_or_else(|last| {
        panic!(
            "create after failover failed:\n{last}\n{}",
            logs(&quorum, &brokers)
        )
    });
    topics_until(
        &dist,
        &[
            "--bootstrap-server",
            &bootstrap,
            "--describe",
            "--topic",
            "after-failover",
        ],
        |out| partitions_with_isr(out, "after-failover", 3) == 2,
    )
    .unwrap_or_else(|last| panic!("after-failover never showed 3 ISRs:\n{last}"));

    // CreatePartitions and IncrementalAlterConfigs, forwarded by a broker.
    topics_until(
        &dist,
        &[
            "--bootstrap-server",
            &bootstrap,
            "--alter",
            "--topic",
            "after-failover",
            "--partitions",
            "4",
        ],
        |_| true,
    )
    .unwrap_or_else(|last| panic!("alter --partitions failed:\n{last}"));
    topics_until(
        &dist,
        &[
            "--bootstrap-server",
            &bootstrap,
            "--describe",
            "--topic",
            "after-failover",
        ],
        |out| partitions_with_isr(out, "after-failover", 3) == 4,
    )
    .unwrap_or_else(|last| panic!("after-failover never showed 4 partitions:\n{last}"));
    let alter = dist
        .run_tool(
            CONFIG_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                "after-failover",
                "--add-config",
                "retention.ms=86400000",
            ],
            Duration::from_secs(120),
        )
        .expect("run kafka-configs --alter");
    assert!(
        alter.success(),
        "kafka-configs --alter:\n{}{}",
        alter.stdout,
        alter.stderr
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let shown = dist
            .run_tool(
                CONFIG_COMMAND,
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--describe",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    "after-failover",
                ],
                Duration::from_secs(120),
            )
            .expect("run kafka-configs --describe");
        if shown.stdout.contains("retention.ms=86400000") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention.ms never shown:\n{}{}",
            shown.stdout,
            shown.stderr
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Delete, then the topic is gone from the listing.
    let deleted = dist
        .run_tool(
            class::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--delete",
                "--topic",
                "krust-events",
            ],
            Duration::from_secs(120),
        )
        .expect("run kafka-topics --delete");
    assert!(
        deleted.success(),
        "delete failed:\n{}{}\n{}",
        deleted.stdout,
        deleted.stderr,
        logs(&quorum, &brokers)
    );
    topics_until(
        &dist,
        &["--bootstrap-server", &bootstrap, "--list"],
        |out| {
            !out.lines().any(|l| l.trim() == "krust-events")
                && out.lines().any(|l| l.trim() == "after-failover")
        },
    )
    .unwrap_or_else(|last| panic!("krust-events still listed:\n{last}"));

    for broker in &mut brokers {
        let _ = broker.kill();
    }
}
