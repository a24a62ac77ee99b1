//! Interop: two `krust server` controllers and one real Kafka 3.9 controller form one KRaft
//! quorum (same `controller.quorum.voters`, same cluster id; krust nodes formatted by
//! `krust storage format`, the Kafka node by Kafka's StorageTool). They elect a leader of
//! either kind; Kafka's `MetadataQuorumCommand describe --replication` shows all three voters
//! caught up; SIGKILLing the leader again and again — whichever implementation it is — elects
//! a new one every time, and the killed node rejoins.
//!
//! When the Kafka node leads, its QuorumController writes its bootstrap records (and NoOps);
//! krust replicates them as opaque batches. When krust leads, only control records are written.

#[path = "quorum_support/mod.rs"]
mod support;

use std::time::Duration;

use krust::metadata_quorum::Bootstrap;
use krust_testkit::KrustProcess;
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, class, free_ports};
use support::{
    KRUST, Node, STARTED_LINE, format, read_metadata_log, server_properties, wait_for_quorum,
};

const WAIT: Duration = Duration::from_secs(90);
const KAFKA_ID: i32 = 3;
const ROUNDS: usize = 4;

struct Mixed {
    _root: tempfile::TempDir,
    krust: Vec<Node>,
    kafka: KafkaNode,
    addresses: Vec<(i32, String)>,
}

impl Mixed {
    fn bootstrap_without(&self, skip: i32) -> Bootstrap {
        Bootstrap::Controller(
            self.addresses
                .iter()
                .filter(|(id, _)| *id != skip)
                .map(|(_, a)| a.clone())
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn start_krust(&mut self, id: i32) {
        let node = self
            .krust
            .iter_mut()
            .find(|n| n.id == id)
            .expect("krust node");
        match &mut node.process {
            Some(p) => {
                let mark = p.log_mark();
                p.restart().expect("restart");
                p.wait_for_line_since(mark, STARTED_LINE, WAIT)
                    .expect("restarted");
            }
            None => {
                let mut p = KrustProcess::builder(KRUST)
                    .args(["server".as_ref(), node.properties().as_os_str()])
                    .env("RUST_LOG", "info,krust_net=warn")
                    .dir(node.dir.clone())
                    .name(format!("krust-{id}"))
                    .start()
                    .expect("start krust");
                p.wait_for_line(STARTED_LINE, WAIT).expect("started");
                node.process = Some(p);
            }
        }
    }

    fn kill(&mut self, id: i32) {
        if id == KAFKA_ID {
            self.kafka.kill().expect("kill Kafka");
        } else if let Some(p) = &mut self
            .krust
            .iter_mut()
            .find(|n| n.id == id)
            .and_then(|n| n.process.as_mut())
        {
            p.kill().expect("kill krust");
        }
    }

    fn restart(&mut self, id: i32) {
        if id == KAFKA_ID {
            // Not `restart()`: that first asks the (already killed) JVM for a clean shutdown.
            if let Err(e) = self.kafka.start() {
                panic!("restarting Kafka: {e}\n{}", self.logs());
            }
        } else {
            self.start_krust(id);
        }
    }

    fn logs(&self) -> String {
        let mut text: Vec<String> = self
            .krust
            .iter()
            .filter_map(|n| {
                n.process
                    .as_ref()
                    .map(|p| format!("--- krust {} ---\n{}", n.id, p.log_tail(20)))
            })
            .collect();
        text.push(format!(
            "--- Kafka {KAFKA_ID} ---\n{}",
            krust_testkit::log_tail(&self.kafka.log_path(), 30)
        ));
        text.join("\n")
    }
}

fn kind(id: i32) -> &'static str {
    if id == KAFKA_ID { "kafka" } else { "krust" }
}

#[test]
fn two_krust_voters_and_a_kafka_controller_share_one_quorum() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let root = tempfile::tempdir().expect("tempdir");
    let cluster_id = krust_testkit::random_kafka_uuid();
    let ports = free_ports(3).expect("ports");
    let voters = (1..=3)
        .zip(&ports)
        .map(|(id, p)| format!("{id}@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut krust = Vec::new();
    for (id, port) in [(1, ports[0]), (2, ports[1])] {
        let dir = root.path().join(format!("node{id}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let node = Node {
            id,
            port,
            dir,
            process: None,
        };
        std::fs::write(
            node.properties(),
            server_properties(id, port, &voters, &node.data_dir(), &[]),
        )
        .expect("properties");
        format(&node.properties(), &cluster_id);
        krust.push(node);
    }
    let kafka = KafkaNode::builder(&dist)
        .node_id(KAFKA_ID)
        .role(KafkaRole::Controller)
        .cluster_id(cluster_id.clone())
        .controller_port(ports[2])
        .quorum_voters(voters.clone())
        .build()
        .expect("Kafka controller formatted by its StorageTool");
    let addresses = (1..=3)
        .zip(&ports)
        .map(|(id, p)| (id, format!("127.0.0.1:{p}")))
        .collect();
    let mut mixed = Mixed {
        _root: root,
        krust,
        kafka,
        addresses,
    };
    mixed.kafka.spawn().expect("spawn Kafka");
    mixed.start_krust(1);
    mixed.start_krust(2);
    mixed
        .kafka
        .wait_ready(WAIT)
        .unwrap_or_else(|e| panic!("Kafka did not start: {e}"));

    let all = mixed.bootstrap_without(-1);
    let q = wait_for_quorum(&all, WAIT, |q| q.leader_id > 0 && q.voters.len() == 3)
        .unwrap_or_else(|| panic!("no leader in the mixed quorum\n{}", mixed.logs()));
    println!(
        "first leader: node {} ({}), epoch {}",
        q.leader_id,
        kind(q.leader_id),
        q.leader_epoch
    );

    // The tool bootstraps from the krust controllers: a Kafka controller refuses
    // direct-to-controller admin calls until it has replayed a metadata.version record, which
    // only a Kafka leader writes (krust has no controller state machine yet).
    let controller = format!("{},{}", mixed.addresses[0].1, mixed.addresses[1].1);
    let (caught_up, shown) = kafka_shows_all_caught_up(&dist, &controller);
    println!("Kafka's describe --replication on the mixed quorum:\n{shown}");
    assert!(
        caught_up,
        "Kafka's tool never showed all three voters caught up:\n{shown}\n{}",
        mixed.logs()
    );

    // Kill whoever leads, over and over.
    let mut leaders = vec![(q.leader_id, q.leader_epoch)];
    for round in 0..ROUNDS {
        let q = wait_for_quorum(&all, WAIT, |q| q.leader_id > 0)
            .unwrap_or_else(|| panic!("round {round}: no leader\n{}", mixed.logs()));
        let (old, epoch) = (q.leader_id, q.leader_epoch);
        mixed.kill(old);
        let survivors = mixed.bootstrap_without(old);
        let next = wait_for_quorum(&survivors, WAIT, |q| {
            q.leader_id > 0 && q.leader_id != old && q.leader_epoch > epoch
        })
        .unwrap_or_else(|| {
            panic!(
                "round {round}: no new leader after killing {old} ({})\n{}",
                kind(old),
                mixed.logs()
            )
        });
        println!(
            "round {round}: killed leader {old} ({}) of epoch {epoch}; new leader {} ({}) in epoch {}",
            kind(old),
            next.leader_id,
            kind(next.leader_id),
            next.leader_epoch
        );
        leaders.push((next.leader_id, next.leader_epoch));
        mixed.restart(old);
    }
    let q = wait_for_quorum(&all, WAIT, |q| {
        let end = q.voters.iter().map(|v| v.log_end_offset).max();
        q.voters.len() == 3 && q.voters.iter().all(|v| v.log_end_offset > 0) && end.is_some()
    })
    .unwrap_or_else(|| panic!("quorum did not recover\n{}", mixed.logs()));
    println!(
        "leaders (id, epoch): {leaders:?}; high watermark {}",
        q.high_watermark
    );
    assert!(
        leaders.windows(2).all(|w| w[1].1 > w[0].1),
        "epochs must grow: {leaders:?}"
    );
    let (caught_up, shown) = kafka_shows_all_caught_up(&dist, &controller);
    println!("Kafka's describe --replication after {ROUNDS} leader kills:\n{shown}");
    assert!(
        caught_up,
        "not all caught up after the kills:\n{shown}\n{}",
        mixed.logs()
    );

    // Same committed bytes everywhere: read all three metadata logs (Kafka's too) with krust-log.
    let q = wait_for_quorum(&all, WAIT, |q| q.voters.len() == 3)
        .unwrap_or_else(|| panic!("no quorum at the end\n{}", mixed.logs()));
    let committed_end = q.high_watermark;
    mixed
        .kafka
        .terminate(Duration::from_secs(60))
        .expect("stop Kafka");
    for node in &mut mixed.krust {
        if let Some(p) = &mut node.process {
            p.terminate(Duration::from_secs(30)).expect("stop krust");
        }
    }
    let kafka_log: Vec<_> = read_metadata_log(&mixed.kafka.log_dir())
        .into_iter()
        .filter(|r| r.offset < committed_end)
        .collect();
    assert_eq!(
        kafka_log.len() as i64,
        committed_end,
        "Kafka's log holds every committed offset"
    );
    assert!(
        kafka_log.iter().any(|r| !r.control),
        "a Kafka leader wrote metadata records"
    );
    for node in &mixed.krust {
        let log: Vec<_> = read_metadata_log(&node.data_dir())
            .into_iter()
            .filter(|r| r.offset < committed_end)
            .collect();
        assert_eq!(
            log, kafka_log,
            "krust node {} and Kafka differ below offset {committed_end}",
            node.id
        );
    }
    println!("{committed_end} committed records identical on krust 1, krust 2 and Kafka 3");
}

/// Runs Kafka's `describe --replication` (a few times: a Kafka leader writes a NoOp every
/// 500 ms, so one snapshot may catch a follower mid-fetch) until every voter shows Lag 0.
fn kafka_shows_all_caught_up(dist: &KafkaDist, controller: &str) -> (bool, String) {
    let mut last = String::new();
    for _ in 0..10 {
        let out = dist
            .run_tool(
                class::METADATA_QUORUM,
                &[
                    "--bootstrap-controller",
                    controller,
                    "describe",
                    "--replication",
                ],
                Duration::from_secs(120),
            )
            .expect("run MetadataQuorumCommand");
        last = format!("{}{}", out.stdout, out.stderr);
        let rows: Vec<Vec<&str>> = out
            .stdout
            .lines()
            .skip(1)
            .map(|l| l.split('\t').map(str::trim).collect())
            .filter(|cells: &Vec<&str>| cells.len() >= 7)
            .collect();
        if out.success() && rows.len() == 3 && rows.iter().all(|r| r[3] == "0") {
            return (true, last);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    (false, last)
}
