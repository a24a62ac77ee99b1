//! Reverse interop: a krust controller as one voter of a quorum with two Kafka 3.9
//! controllers (static `controller.quorum.voters`, one cluster id; krust formatted by
//! `krust storage format`, Kafka by its StorageTool) and a Kafka 3.9 broker.
//!
//! 1. The krust node becomes the active controller (Kafka's election timeout is set longer,
//!    and a Kafka leader is SIGKILLed and restarted until krust leads); the broker registers
//!    with it; a topic and topic/cluster-default configs are created through the broker.
//! 2. SIGKILL of krust: a Kafka controller takes over (it replays what krust wrote, as
//!    standby and now as active controller) and a second topic and config are created.
//! 3. krust restarts and replays the Kafka-written records.
//! 4. Everything stops; on copies of the metadata directories, `krust metadata-shell
//!    --directory` and Kafka's `MetadataShell --snapshot <segment>` print the same image
//!    (topics, configs, features, cluster, producer ids) for the krust node's log and for a
//!    Kafka controller's log; no controller logged a replay fault.

#[path = "support/mod.rs"]
mod cluster;
#[path = "quorum_support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krust::metadata_quorum::Bootstrap;
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, class, free_ports, run_binary};
use support::{
    FAST_TIMEOUTS, KRUST, Node, STARTED_LINE, format, server_properties, wait_for_quorum,
};

const WAIT: Duration = Duration::from_secs(120);
const KRUST_ID: i32 = 1;
const KAFKA_IDS: [i32; 2] = [2, 3];
const BROKER_ID: i32 = 101;
const SHELL_TIMEOUT: Duration = Duration::from_secs(60);
/// `kafka-configs.sh`.
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";
/// The image parts compared between the shells (the provenance differs: each log ends with
/// its own NoOps).
const COMPARED: [&str; 5] = [
    "/image/topics",
    "/image/configs",
    "/image/features",
    "/image/cluster",
    "/image/producerIds",
];

struct Mixed {
    root: tempfile::TempDir,
    krust: Node,
    kafka: Vec<KafkaNode>,
    addresses: Vec<(i32, String)>,
}

impl Mixed {
    fn bootstrap_without(&self, skip: &[i32]) -> Bootstrap {
        Bootstrap::Controller(
            self.addresses
                .iter()
                .filter(|(id, _)| !skip.contains(id))
                .map(|(_, a)| a.clone())
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn kafka_controllers(&self) -> String {
        self.addresses
            .iter()
            .filter(|(id, _)| *id != KRUST_ID)
            .map(|(_, a)| a.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn kafka(&mut self, id: i32) -> &mut KafkaNode {
        self.kafka
            .iter_mut()
            .find(|k| k.node_id() == id)
            .expect("Kafka controller")
    }

    fn start_krust(&mut self) {
        let node = &mut self.krust;
        match &mut node.process {
            Some(p) => {
                let mark = p.log_mark();
                p.restart().expect("restart krust");
                p.wait_for_line_since(mark, STARTED_LINE, WAIT)
                    .expect("krust restarted");
            }
            None => {
                node.process = Some(cluster::start_server_within(&node.dir, KRUST_ID, WAIT));
            }
        }
    }

    fn logs(&self) -> String {
        let mut text = vec![format!(
            "--- krust {KRUST_ID} ---\n{}",
            self.krust
                .process
                .as_ref()
                .map(|p| p.log_tail(30))
                .unwrap_or_default()
        )];
        for k in &self.kafka {
            text.push(format!(
                "--- Kafka {} ---\n{}",
                k.node_id(),
                krust_testkit::log_tail(&k.log_path(), 30)
            ));
        }
        text.join("\n")
    }
}

/// Runs Kafka's `describe --replication` until every voter shows Lag 0.
fn all_caught_up(dist: &KafkaDist, controllers: &str) -> Result<String, String> {
    let deadline = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        let out = dist
            .run_tool(
                class::METADATA_QUORUM,
                &[
                    "--bootstrap-controller",
                    controllers,
                    "describe",
                    "--replication",
                ],
                Duration::from_secs(120),
            )
            .map_err(|e| e.to_string())?;
        last = format!("{}{}", out.stdout, out.stderr);
        let voters: Vec<Vec<&str>> = out
            .stdout
            .lines()
            .skip(1)
            .map(|l| l.split('\t').map(str::trim).collect())
            .filter(|cells: &Vec<&str>| cells.len() >= 7 && cells[6] != "Observer")
            .collect();
        if out.success() && voters.len() == 3 && voters.iter().all(|r| r[3] == "0") {
            return Ok(last);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(last)
}

/// Runs a Kafka tool until it succeeds and `accept` holds for its stdout.
fn tool_until(
    dist: &KafkaDist,
    class_name: &str,
    args: &[&str],
    accept: impl Fn(&str) -> bool,
) -> Result<String, String> {
    cluster::tool_until(dist, class_name, args, WAIT, accept)
}

/// Creates `topic` through the broker and sets a topic config, a cluster-default broker config,
/// and waits until `kafka-configs --describe` shows the topic config.
fn create_topic_and_configs(dist: &KafkaDist, bootstrap: &str, topic: &str, retention: &str) {
    tool_until(
        dist,
        class::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--if-not-exists",
            "--topic",
            topic,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ],
        |_| true,
    )
    .unwrap_or_else(|last| panic!("create {topic}:\n{last}"));
    let retention_config = format!("retention.ms={retention}");
    tool_until(
        dist,
        CONFIG_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            &retention_config,
        ],
        |_| true,
    )
    .unwrap_or_else(|last| panic!("alter {topic} config:\n{last}"));
    let default_config = format!("log.retention.ms={retention}");
    tool_until(
        dist,
        CONFIG_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            &default_config,
        ],
        |_| true,
    )
    .unwrap_or_else(|last| panic!("alter the cluster default:\n{last}"));
    tool_until(
        dist,
        CONFIG_COMMAND,
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ],
        |out| out.contains(&retention_config),
    )
    .unwrap_or_else(|last| panic!("{topic} config never shown:\n{last}"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("read metadata dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("file type").is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
        }
    }
}

/// `krust metadata-shell --directory <dir> tree <COMPARED…>`.
fn krust_tree(dir: &Path) -> String {
    let dir = dir.display().to_string();
    let mut args = vec!["metadata-shell", "--directory", &dir, "tree"];
    args.extend(COMPARED);
    let out = run_binary(KRUST, &args, None, SHELL_TIMEOUT).expect("krust metadata-shell runs");
    assert!(out.success(), "krust {args:?}: {}", out.stderr);
    out.stdout
}

/// Kafka's `MetadataShell --snapshot <segment> tree <COMPARED…>`, retried (its one-shot run can
/// race its loader) until it equals `expected`; the last output otherwise.
fn kafka_tree(dist: &KafkaDist, segment: &Path, expected: &str) -> String {
    let segment = segment.display().to_string();
    let mut args = vec!["--snapshot", &segment, "tree"];
    args.extend(COMPARED);
    let mut last = String::new();
    for _ in 0..4 {
        match dist.run_tool(class::METADATA_SHELL, &args, SHELL_TIMEOUT) {
            Ok(out) if out.success() && out.stdout == expected => return out.stdout,
            Ok(out) => last = format!("{}{}", out.stdout, out.stderr),
            Err(e) => last = e.to_string(),
        }
    }
    last
}

fn segment_of(dir: &Path) -> PathBuf {
    dir.join("00000000000000000000.log")
}

/// Lines of a controller log that report a metadata replay fault.
fn fault_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            // Kafka's fault handlers log "Encountered <name> fault: …"; krust's controller
            // task stops with "replaying the batch at offset …".
            (l.contains("Encountered ") && l.contains(" fault"))
                || l.contains("replaying the batch")
                || l.contains("does not parse")
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_krust_controller_and_kafka_controllers_replay_each_others_records() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = krust_testkit::random_kafka_uuid();
    let ports = free_ports(3).expect("ports");
    let ids = [KRUST_ID, KAFKA_IDS[0], KAFKA_IDS[1]];
    let voters = ids
        .iter()
        .zip(&ports)
        .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let dir = root.path().join(format!("node{KRUST_ID}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let krust = Node {
        id: KRUST_ID,
        port: ports[0],
        dir,
        process: None,
    };
    std::fs::write(
        krust.properties(),
        server_properties(
            KRUST_ID,
            ports[0],
            &voters,
            &krust.data_dir(),
            FAST_TIMEOUTS,
        ),
    )
    .expect("properties");
    format(&krust.properties(), &cluster_id);
    let kafka = KAFKA_IDS
        .iter()
        .zip(&ports[1..])
        .map(|(&id, &port)| {
            KafkaNode::builder(&dist)
                .node_id(id)
                .role(KafkaRole::Controller)
                .cluster_id(cluster_id.clone())
                .controller_port(port)
                .quorum_voters(voters.clone())
                // Longer than krust's 500 ms, so the krust node tends to win elections.
                .prop("controller.quorum.election.timeout.ms", 3000)
                .start_timeout(WAIT)
                .build()
                .expect("Kafka controller formatted by its StorageTool")
        })
        .collect();
    let addresses = ids
        .iter()
        .zip(&ports)
        .map(|(id, p)| (*id, format!("127.0.0.1:{p}")))
        .collect();
    let mut mixed = Mixed {
        root,
        krust,
        kafka,
        addresses,
    };
    mixed.start_krust();
    for k in &mut mixed.kafka {
        k.spawn().expect("spawn Kafka controller");
    }
    for k in &mut mixed.kafka {
        if let Err(e) = k.wait_ready(WAIT) {
            panic!("Kafka controller did not start: {e}");
        }
    }

    // 1. Make krust the active controller.
    let all = mixed.bootstrap_without(&[]);
    let mut krust_leads = false;
    for round in 0..6 {
        let q = wait_for_quorum(&all, WAIT, |q| q.leader_id > 0)
            .unwrap_or_else(|| panic!("round {round}: no leader\n{}", mixed.logs()));
        if q.leader_id == KRUST_ID {
            krust_leads = true;
            println!("krust leads in epoch {}", q.leader_epoch);
            break;
        }
        let (old, epoch) = (q.leader_id, q.leader_epoch);
        println!("Kafka controller {old} leads in epoch {epoch}: SIGKILL and restart it");
        mixed.kafka(old).kill().expect("SIGKILL Kafka controller");
        let others = mixed.bootstrap_without(&[old]);
        wait_for_quorum(&others, WAIT, |q| q.leader_id > 0 && q.leader_epoch > epoch)
            .unwrap_or_else(|| panic!("no leader after killing {old}\n{}", mixed.logs()));
        // Not `restart()`: that first asks the (already killed) JVM for a clean shutdown.
        if let Err(e) = mixed.kafka(old).start() {
            panic!("restarting Kafka controller {old}: {e}\n{}", mixed.logs());
        }
    }
    assert!(krust_leads, "krust never led\n{}", mixed.logs());

    let mut broker = KafkaNode::builder(&dist)
        .node_id(BROKER_ID)
        .role(KafkaRole::Broker)
        .cluster_id(cluster_id.clone())
        .quorum_voters(voters.clone())
        .start_timeout(WAIT)
        .build()
        .expect("broker formatted");
    if let Err(e) = broker.start() {
        panic!("broker did not start: {e}\n{}", mixed.logs());
    }
    let bootstrap = broker.bootstrap_servers();
    create_topic_and_configs(&dist, &bootstrap, "written-by-krust", "1000");
    let q = wait_for_quorum(&all, WAIT, |q| q.leader_id > 0).expect("a leader");
    println!(
        "after the krust phase: leader {} epoch {}",
        q.leader_id, q.leader_epoch
    );

    // 2. SIGKILL krust: a Kafka controller takes over and writes.
    let epoch = q.leader_epoch;
    if let Some(p) = &mut mixed.krust.process {
        p.kill().expect("SIGKILL krust");
    }
    let kafka_only = mixed.bootstrap_without(&[KRUST_ID]);
    let q = wait_for_quorum(&kafka_only, WAIT, |q| {
        KAFKA_IDS.contains(&q.leader_id) && q.leader_epoch > epoch
    })
    .unwrap_or_else(|| panic!("no Kafka leader after killing krust\n{}", mixed.logs()));
    println!(
        "Kafka controller {} leads in epoch {}",
        q.leader_id, q.leader_epoch
    );
    create_topic_and_configs(&dist, &bootstrap, "written-by-kafka", "2000");

    // 3. krust restarts and replays what the Kafka controller wrote.
    mixed.start_krust();
    let controllers = mixed.kafka_controllers();
    all_caught_up(&dist, &controllers)
        .unwrap_or_else(|last| panic!("krust never caught up:\n{last}\n{}", mixed.logs()));

    // 4. Stop everything (the broker first: its controlled shutdown is recorded), compare.
    broker
        .terminate(WAIT)
        .unwrap_or_else(|e| panic!("broker shutdown: {e}"));
    all_caught_up(&dist, &controllers)
        .unwrap_or_else(|last| panic!("not caught up after the broker left:\n{last}"));
    let krust_running = mixed
        .krust
        .process
        .as_mut()
        .is_some_and(|p| p.is_running().unwrap_or(false));
    assert!(krust_running, "krust stopped\n{}", mixed.logs());
    let krust_status = mixed
        .krust
        .process
        .as_mut()
        .expect("started")
        .terminate(Duration::from_secs(30))
        .expect("terminate krust");
    assert!(krust_status.success(), "krust exit: {krust_status}");
    for k in &mut mixed.kafka {
        k.terminate(WAIT).expect("Kafka controller clean shutdown");
    }
    let mut faults = Vec::new();
    let krust_log = mixed
        .krust
        .process
        .as_ref()
        .map(|p| std::fs::read_to_string(p.log_path()).unwrap_or_default())
        .unwrap_or_default();
    faults.extend(fault_lines(&krust_log));
    for k in &mixed.kafka {
        faults.extend(fault_lines(
            &std::fs::read_to_string(k.log_path()).unwrap_or_default(),
        ));
    }
    assert!(faults.is_empty(), "replay faults:\n{}", faults.join("\n"));

    let krust_copy = mixed.root.path().join("copy-krust/__cluster_metadata-0");
    copy_dir(
        &mixed.krust.data_dir().join("__cluster_metadata-0"),
        &krust_copy,
    );
    let kafka_copy = mixed.root.path().join("copy-kafka/__cluster_metadata-0");
    copy_dir(
        &mixed.kafka[0].log_dir().join("__cluster_metadata-0"),
        &kafka_copy,
    );
    let ours = krust_tree(&krust_copy);
    println!("krust metadata-shell --directory (krust's log):\n{ours}");
    for topic in ["written-by-krust", "written-by-kafka"] {
        assert!(ours.contains(topic), "{topic} missing from krust's image");
    }
    let theirs_of_kafka = kafka_tree(&dist, &segment_of(&kafka_copy), &ours);
    assert_eq!(
        theirs_of_kafka, ours,
        "Kafka's shell on Kafka controller {}'s log vs krust's shell on krust's log",
        KAFKA_IDS[0]
    );
    let theirs_of_krust = kafka_tree(&dist, &segment_of(&krust_copy), &ours);
    assert_eq!(
        theirs_of_krust, ours,
        "Kafka's shell on krust's log vs krust's shell on it"
    );
    let ours_of_kafka = krust_tree(&kafka_copy);
    assert_eq!(
        ours_of_kafka, ours,
        "krust's shell on the Kafka controller's log vs on krust's"
    );
}
