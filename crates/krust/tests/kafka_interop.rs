//! `krust storage` against real Apache Kafka 3.9 (jars from `scripts/fetch-kafka.sh`, run through
//! `krust-testkit`):
//!
//! * directories formatted by `krust storage format` (controller-only, broker-only, combined;
//!   static quorum, `--standalone`, `--initial-controllers`) are accepted by Kafka's
//!   `StorageTool info`, and a Kafka 3.9 node starts on them (`Kafka Server started` and its
//!   ports accept connections; then it is killed);
//! * `bootstrap.checkpoint`, the bootstrap snapshot and `meta.properties` equal what Kafka's own
//!   `StorageTool format` writes for the same inputs, except for what Kafka makes up at run time
//!   (batch timestamps and the CRCs covering them, `LastContainedLogTimestamp` of the bootstrap
//!   snapshot, random directory ids, the date comment of `meta.properties`);
//! * directories formatted by Kafka are read by `krust storage info`, which prints exactly what
//!   Kafka's `info` prints, with the same exit code (v1 and v0 `meta.properties`).
//!
//! Every process is killed on drop (krust-testkit), every wait has a timeout, only 127.0.0.1.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use krust_log::batch::RecordBatch;
use krust_metadata::BootstrapMetadata;
use krust_metadata::frame::ApiMessageAndVersion;
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::{MetadataRecord, MetadataRecordType};
use krust_raft::snapshot::{ControlRecordType, SnapshotFileKind, SnapshotFileName, read_snapshot};
use krust_testkit::{KafkaDist, KafkaNode, KafkaRole, ToolOutput, class, free_port, run_binary};
use tempfile::TempDir;

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// One Kafka JVM server at a time: the machine has two cores.
static KAFKA_SERVER: Mutex<()> = Mutex::new(());

/// Held by every test that starts a Kafka server, for the whole test.
fn kafka_server_lock() -> std::sync::MutexGuard<'static, ()> {
    KAFKA_SERVER.lock().unwrap_or_else(|e| e.into_inner())
}

fn dist() -> KafkaDist {
    KafkaDist::locate().expect("Apache Kafka 3.9 (scripts/fetch-kafka.sh) and java are required")
}

fn krust(args: &[&str]) -> ToolOutput {
    run_binary(env!("CARGO_BIN_EXE_krust"), args, None, TOOL_TIMEOUT).expect("krust runs")
}

fn kafka_storage(dist: &KafkaDist, args: &[&str]) -> ToolOutput {
    dist.run_tool(class::STORAGE_TOOL, args, TOOL_TIMEOUT)
        .expect("Kafka's StorageTool runs")
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// Formats `node`'s storage with krust, checks Kafka's `info` agrees, starts Kafka on it, runs
/// `check` against the running node, then kills it. Call it holding [`kafka_server_lock`].
fn krust_format_then_kafka_starts(
    mut node: KafkaNode,
    extra: &[&str],
    expect_line: &str,
    check: impl FnOnce(&mut KafkaNode),
) {
    let dist = node.dist().clone();
    let props = path_str(&node.properties_path());
    let cluster_id = node.cluster_id().to_owned();
    let mut args = vec!["storage", "format", "-t", &cluster_id, "-c", &props];
    args.extend_from_slice(extra);
    let out = krust(&args);
    assert!(
        out.success(),
        "krust format failed: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains(expect_line), "{}", out.stdout);

    let kafka_info = kafka_storage(&dist, &["info", "-c", &props]);
    assert!(
        kafka_info.success(),
        "Kafka's info rejected krust's format:\n{}\n{}",
        kafka_info.stdout,
        kafka_info.stderr
    );
    assert!(
        kafka_info
            .stdout
            .contains(&format!("cluster.id={cluster_id}"))
    );
    let krust_info = krust(&["storage", "info", "-c", &props]);
    assert_eq!(krust_info.stdout, kafka_info.stdout, "info output differs");

    node.start()
        .expect("Kafka 3.9 starts on storage formatted by krust");
    check(&mut node);
    node.kill().expect("kill Kafka");
}

#[test]
fn kafka_starts_on_a_static_controller_formatted_by_krust() {
    let _one_at_a_time = kafka_server_lock();
    let node = KafkaNode::builder(&dist())
        .role(KafkaRole::Controller)
        .start_timeout(START_TIMEOUT)
        .build_unformatted()
        .expect("node");
    krust_format_then_kafka_starts(
        node,
        &["--release-version", "3.7"],
        "Formatting metadata directory",
        |node| {
            // The controller took its metadata.version from krust's bootstrap.checkpoint.
            let features = run_against_controller(node, class::FEATURE_COMMAND, &["describe"]);
            assert!(
                features.contains("Feature: metadata.version")
                    && features.contains("FinalizedVersionLevel: 3.7-IV4"),
                "{features}"
            );
        },
    );
}

/// Runs a Kafka admin tool with `--bootstrap-controller` pointing at `node`.
fn run_against_controller(node: &KafkaNode, tool: &str, args: &[&str]) -> String {
    let address = node.bootstrap_controller();
    let mut full = vec!["--bootstrap-controller", address.as_str()];
    full.extend_from_slice(args);
    let out = node
        .dist()
        .run_tool(tool, &full, TOOL_TIMEOUT)
        .expect("tool runs");
    assert!(
        out.success(),
        "{tool} {args:?}: {}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn kafka_starts_on_a_standalone_controller_formatted_by_krust() {
    let _one_at_a_time = kafka_server_lock();
    let port = free_port().expect("port");
    let node = KafkaNode::builder(&dist())
        .role(KafkaRole::Controller)
        .controller_port(port)
        .quorum_voters("")
        .prop(
            "controller.quorum.bootstrap.servers",
            format!("127.0.0.1:{port}"),
        )
        .start_timeout(START_TIMEOUT)
        .build_unformatted()
        .expect("node");
    let meta_properties = node.log_dir().join("meta.properties");
    krust_format_then_kafka_starts(
        node,
        &["--standalone"],
        "Formatting dynamic metadata voter directory",
        |node| {
            // The quorum is the voter set of krust's bootstrap snapshot: node 1 with the
            // directory id krust wrote into meta.properties, and it leads.
            let text = std::fs::read_to_string(&meta_properties).expect("meta.properties");
            let directory_id = text
                .lines()
                .find_map(|l| l.strip_prefix("directory.id="))
                .expect("directory.id")
                .to_owned();
            let status =
                run_against_controller(node, class::METADATA_QUORUM, &["describe", "--status"]);
            let leader = status
                .lines()
                .find_map(|l| l.strip_prefix("LeaderId:"))
                .map(str::trim);
            assert_eq!(leader, Some("1"), "{status}");
            assert!(status.contains(&directory_id), "{status}");
        },
    );
}

#[test]
fn kafka_starts_on_a_standalone_combined_node_formatted_by_krust() {
    let _one_at_a_time = kafka_server_lock();
    let port = free_port().expect("port");
    let node = KafkaNode::builder(&dist())
        .role(KafkaRole::Combined)
        .controller_port(port)
        .quorum_voters("")
        .prop(
            "controller.quorum.bootstrap.servers",
            format!("127.0.0.1:{port}"),
        )
        .start_timeout(START_TIMEOUT)
        .build_unformatted()
        .expect("node");
    krust_format_then_kafka_starts(
        node,
        &["-s"],
        "Formatting dynamic metadata voter directory",
        |node| {
            let status =
                run_against_controller(node, class::METADATA_QUORUM, &["describe", "--status"]);
            let leader = status
                .lines()
                .find_map(|l| l.strip_prefix("LeaderId:"))
                .map(str::trim);
            assert_eq!(leader, Some("1"), "{status}");
        },
    );
}

#[test]
fn kafka_starts_on_a_combined_node_formatted_by_krust() {
    let _one_at_a_time = kafka_server_lock();
    let node = KafkaNode::builder(&dist())
        .role(KafkaRole::Combined)
        .start_timeout(START_TIMEOUT)
        .build_unformatted()
        .expect("node");
    krust_format_then_kafka_starts(node, &[], "Formatting metadata directory", |_| {});
}

#[test]
fn kafka_broker_starts_on_directories_formatted_by_krust() {
    let dist = dist();
    // The broker needs its controller: a Kafka controller formatted by Kafka itself.
    let mut controller = KafkaNode::builder(&dist)
        .role(KafkaRole::Controller)
        .start_timeout(START_TIMEOUT)
        .build()
        .expect("Kafka controller");
    let tmp = TempDir::new().expect("tmp");
    let broker = KafkaNode::builder(&dist)
        .role(KafkaRole::Broker)
        .node_id(2)
        .cluster_id(controller.cluster_id())
        .quorum_voters(controller.quorum_voters())
        .prop(
            "log.dirs",
            format!(
                "{},{}",
                path_str(&tmp.path().join("a")),
                path_str(&tmp.path().join("b"))
            ),
        )
        .prop("metadata.log.dir", path_str(&tmp.path().join("meta")))
        .start_timeout(START_TIMEOUT)
        .build_unformatted()
        .expect("broker");
    let _one_at_a_time = kafka_server_lock();
    controller.start().expect("Kafka controller starts");
    // Kafka's broker registers with the controller and reports `Kafka Server started` only
    // once it has caught up with the metadata log.
    krust_format_then_kafka_starts(broker, &[], "Formatting data directory", |_| {});
    controller.kill().expect("kill controller");
}

/// A node's `server.properties` in its own temp dir, for running both formatters on the same
/// inputs.
struct Twin {
    dir: TempDir,
}

impl Twin {
    fn new(props: &str) -> Self {
        let dir = TempDir::new().expect("tmp");
        let text = props.replace("{dir}", &path_str(dir.path()));
        std::fs::write(dir.path().join("server.properties"), text).expect("write");
        Self { dir }
    }

    fn config(&self) -> String {
        path_str(&self.dir.path().join("server.properties"))
    }

    fn file(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

/// A batch with everything Kafka takes from the clock removed: base/max timestamps, the CRC that
/// covers them, and the `LastContainedLogTimestamp` inside a `SnapshotHeader` record.
#[derive(Debug, PartialEq)]
struct TimelessBatch {
    base_offset: i64,
    partition_leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    producer: (i64, i16, i32),
    size_in_bytes: usize,
    records: Vec<(i32, i64, Option<Bytes>, Option<Bytes>)>,
}

fn timeless(bytes: &[u8]) -> Vec<TimelessBatch> {
    let mut rest = Bytes::copy_from_slice(bytes);
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (batch, tail) = RecordBatch::parse_default(rest).expect("valid batch");
        let records = batch
            .records()
            .expect("records")
            .into_iter()
            .map(|r| {
                let mut value = r.value.clone();
                let is_header = batch.is_control()
                    && r.key.as_deref() == Some(&ControlRecordType::SnapshotHeader.key()[..]);
                if is_header {
                    let mut v = value.as_deref().expect("header value").to_vec();
                    v[2..10].fill(0); // LastContainedLogTimestamp
                    value = Some(Bytes::from(v));
                }
                (r.offset_delta, r.timestamp_delta, r.key, value)
            })
            .collect();
        out.push(TimelessBatch {
            base_offset: batch.base_offset(),
            partition_leader_epoch: batch.partition_leader_epoch(),
            attributes: batch.attributes(),
            last_offset_delta: batch.last_offset_delta(),
            producer: (
                batch.producer_id(),
                batch.producer_epoch(),
                batch.base_sequence(),
            ),
            size_in_bytes: batch.size_in_bytes(),
            records,
        });
        rest = tail;
    }
    out
}

/// `meta.properties` without the `#<date>` comment line.
fn without_date(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !(l.starts_with('#') && l.len() > 1))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Formats the same `server.properties` (same paths) with Kafka and then with krust. Kafka's
/// output directories are moved under `kafka/` first, so `twin.file("kafka/<rel>")` is Kafka's
/// file and `twin.file("<rel>")` ours. The printed lines must be identical, in the same order.
fn format_both(dist: &KafkaDist, props: &str, args: &[&str]) -> Twin {
    let twin = Twin::new(props);
    let cluster_id = "RXmJz-cpSbqo1IMdXqyzRA";
    let config = twin.config();
    let mut kafka_args = vec!["format", "-t", cluster_id, "-c", &config];
    kafka_args.extend_from_slice(args);
    let kafka = kafka_storage(dist, &kafka_args);
    assert!(
        kafka.success(),
        "Kafka {args:?}: {}\n{}",
        kafka.stdout,
        kafka.stderr
    );
    let moved = twin.dir.path().join("kafka");
    std::fs::create_dir(&moved).expect("mkdir kafka");
    for entry in std::fs::read_dir(twin.dir.path()).expect("read twin dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if name != "server.properties" && name != "kafka" {
            std::fs::rename(entry.path(), moved.join(&name)).expect("move Kafka's output");
        }
    }
    let mut krust_args = vec!["storage"];
    krust_args.extend_from_slice(&kafka_args);
    let ours = krust(&krust_args);
    assert!(
        ours.success(),
        "krust {args:?}: {}\n{}",
        ours.stdout,
        ours.stderr
    );
    assert_eq!(
        ours.stdout, kafka.stdout,
        "format output differs for {args:?}"
    );
    twin
}

#[test]
fn bootstrap_files_match_what_kafka_writes() {
    let dist = dist();
    let static_controller = "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19093\ncontroller.quorum.voters=1@127.0.0.1:19093\nlog.dirs={dir}/meta\n";
    // SCRAM credentials with a given salt are deterministic, so Kafka's and our records must be
    // the same bytes (PBKDF2/HMAC keys included).
    let scram = [
        "-S",
        "SCRAM-SHA-256=[name=alice,salt=\"c2FsdA==\",password=alice-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=bob,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]",
    ];
    for args in [
        &scram[..],
        &[][..],
        &["-r", "3.7"][..],
        &["--release-version", "3.3-IV0"][..],
    ] {
        let twin = format_both(&dist, static_controller, args);
        let (a, b) = (
            twin.file("meta/bootstrap.checkpoint"),
            twin.file("kafka/meta/bootstrap.checkpoint"),
        );
        assert_eq!(a.len(), b.len(), "{args:?}");
        assert_eq!(
            timeless(&a),
            timeless(&b),
            "bootstrap.checkpoint for {args:?}"
        );
    }

    // Several directories: Kafka prints (and writes) them in java.util.HashMap order of their
    // paths, which krust reproduces; random temp paths exercise different orders on every run.
    let broker = "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs={dir}/a,{dir}/b,{dir}/c,{dir}/data-1,{dir}/data-2\nmetadata.log.dir={dir}/metadata\n";
    for _ in 0..2 {
        let twin = format_both(&dist, broker, &[]);
        assert_eq!(
            timeless(&twin.file("metadata/bootstrap.checkpoint")),
            timeless(&twin.file("kafka/metadata/bootstrap.checkpoint"))
        );
    }

    // A broker given --initial-controllers: its metadata directory is a (non-voter) dynamic
    // metadata directory and also gets the bootstrap snapshot.
    let twin = format_both(
        &dist,
        broker,
        &["-I", "1@127.0.0.1:19093:MvDxzVmcRsaTz33bUuRU6A"],
    );
    let snapshot = "metadata/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint";
    assert_eq!(
        timeless(&twin.file(snapshot)),
        timeless(&twin.file(&format!("kafka/{snapshot}")))
    );

    // A voter directory gets the directory id from --initial-controllers, so here even
    // meta.properties and the bootstrap snapshot's voter set must be identical.
    let dynamic_controller = "process.roles=controller\nnode.id=2\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19094\ncontroller.quorum.bootstrap.servers=127.0.0.1:19093\nlog.dirs={dir}/logs\nmetadata.log.dir={dir}/meta\n";
    let voters = "3@127.0.0.1:19095:07R5amHmR32VDA6jHkGbTA,1@127.0.0.1:19093:MvDxzVmcRsaTz33bUuRU6A,2@localhost:19094:JEXY6aqzQY-32P5TStzaFg,9@[::1]:19096:RXmJz-cpSbqo1IMdXqyzRA";
    let twin = format_both(
        &dist,
        dynamic_controller,
        &["--initial-controllers", voters],
    );
    let snapshot = "meta/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint";
    let (a, b) = (twin.file(snapshot), twin.file(&format!("kafka/{snapshot}")));
    assert_eq!(a.len(), b.len());
    assert_eq!(timeless(&a), timeless(&b), "bootstrap snapshot");
    // krust's snapshot reader accepts Kafka's file and sees the same voter set.
    let kafka_snapshot = read_snapshot(Bytes::from(b), Some(0)).expect("Kafka's snapshot reads");
    let our_snapshot = read_snapshot(Bytes::from(a), Some(0)).expect("our snapshot reads");
    assert_eq!(kafka_snapshot.voters, our_snapshot.voters);
    assert_eq!(kafka_snapshot.kraft_version, Some(1));
    let ids: Vec<i32> = kafka_snapshot
        .voters
        .iter()
        .flat_map(|v| v.voters.iter().map(|voter| voter.voter_id.0))
        .collect();
    assert_eq!(
        ids,
        [1, 9, 2, 3],
        "java.util.HashMap order, which krust reproduces"
    );
    let kafka_bootstrap = BootstrapMetadata::from_checkpoint_bytes(
        Bytes::from(twin.file("kafka/meta/bootstrap.checkpoint")),
        "Kafka's bootstrap.checkpoint",
    )
    .expect("Kafka's bootstrap.checkpoint reads");
    assert_eq!(
        kafka_bootstrap.metadata_version(),
        MetadataVersion::IBP_3_9_IV0
    );
    assert_eq!(
        timeless(&twin.file("meta/bootstrap.checkpoint")),
        timeless(&twin.file("kafka/meta/bootstrap.checkpoint"))
    );
    assert_eq!(
        without_date(&twin.file("meta/meta.properties")),
        without_date(&twin.file("kafka/meta/meta.properties")),
        "meta.properties of the voter directory"
    );
    // Data directories get random ids: same keys, different directory.id.
    let strip_id = |bytes: &[u8]| -> String {
        without_date(bytes)
            .lines()
            .filter(|l| !l.starts_with("directory.id="))
            .collect()
    };
    assert_eq!(
        strip_id(&twin.file("logs/meta.properties")),
        strip_id(&twin.file("kafka/logs/meta.properties"))
    );
}

/// Kafka formats; `krust storage info` must print what Kafka's `info` prints.
fn compare_info(dist: &KafkaDist, config: &str) {
    let kafka = kafka_storage(dist, &["info", "-c", config]);
    let ours = krust(&["storage", "info", "-c", config]);
    assert_eq!(ours.stdout, kafka.stdout, "info stdout for {config}");
    assert_eq!(
        ours.status.code(),
        kafka.status.code(),
        "info exit code for {config}"
    );
}

#[test]
fn krust_info_reads_directories_formatted_by_kafka() {
    let dist = dist();
    for role in [
        KafkaRole::Controller,
        KafkaRole::Broker,
        KafkaRole::Combined,
    ] {
        let mut builder = KafkaNode::builder(&dist).role(role);
        if role == KafkaRole::Broker {
            builder = builder.node_id(2).quorum_voters("1@127.0.0.1:19093");
        }
        let node = builder.build().expect("Kafka formats");
        let config = path_str(&node.properties_path());
        compare_info(&dist, &config);
        let out = krust(&["storage", "info", "-c", &config]);
        assert!(out.success(), "{role:?}: {}", out.stdout);
        assert!(
            out.stdout
                .contains(&format!("cluster.id={}", node.cluster_id()))
        );
    }

    // Standalone, several log dirs, one of them missing afterwards.
    let twin = Twin::new(
        "process.roles=broker,controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\ncontroller.quorum.bootstrap.servers=127.0.0.1:19093\nlog.dirs={dir}/a,{dir}/b\n",
    );
    let out = kafka_storage(
        &dist,
        &[
            "format",
            "-t",
            "RXmJz-cpSbqo1IMdXqyzRA",
            "-c",
            &twin.config(),
            "-s",
        ],
    );
    assert!(out.success(), "{}", out.stderr);
    compare_info(&dist, &twin.config());
    std::fs::remove_dir_all(twin.dir.path().join("b")).expect("rm");
    compare_info(&dist, &twin.config());

    // v0 files (ZooKeeper mode), read with a ZooKeeper config and with a KRaft config.
    let zk = Twin::new("zookeeper.connect=127.0.0.1:2181\nbroker.id=0\nlog.dirs={dir}/a\n");
    let kraft = Twin::new(
        "process.roles=broker\nnode.id=0\ncontroller.quorum.voters=1@127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\nlistener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs={dir}/a\n",
    );
    for twin in [&zk, &kraft] {
        let dir: PathBuf = twin.dir.path().join("a");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("meta.properties"),
            "#\n#Thu Jan 01 00:00:00 UTC 1970\nbroker.id=0\nversion=0\ncluster.id=RXmJz-cpSbqo1IMdXqyzRA\n",
        )
        .expect("write v0");
        compare_info(&dist, &twin.config());
    }
    // A v1 directory under a ZooKeeper config.
    std::fs::write(
        zk.dir.path().join("a/meta.properties"),
        "version=1\nnode.id=0\ncluster.id=RXmJz-cpSbqo1IMdXqyzRA\n",
    )
    .expect("write v1");
    compare_info(&dist, &zk.config());
}

/// A running Kafka 3.9 controller writes real metadata snapshots and log records; krust's snapshot
/// reader and record codecs must accept them (first snapshot record: the metadata.version
/// FeatureLevelRecord) and re-encode every record to the same bytes.
#[test]
fn krust_reads_snapshots_kafka_writes() {
    let mut node = KafkaNode::builder(&dist())
        .role(KafkaRole::Combined)
        .prop("metadata.log.max.snapshot.interval.ms", 1000)
        .start_timeout(START_TIMEOUT)
        .build()
        .expect("Kafka formats");
    let metadata_dir = node.log_dir().join("__cluster_metadata-0");
    let _one_at_a_time = kafka_server_lock();
    node.start().expect("Kafka starts");
    // A topic with a config, so the snapshot holds topic, partition and config records too.
    node.create_topic("krust-snapshot-topic", 2, &[("retention.ms", "123456")])
        .expect("create topic");
    let created = std::time::Instant::now();
    let deadline = created + Duration::from_secs(60);
    let snapshot = loop {
        let found = std::fs::read_dir(&metadata_dir)
            .expect("metadata dir")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                match SnapshotFileName::parse(&name) {
                    Ok(Some(parsed))
                        if parsed.kind == SnapshotFileKind::Frozen && parsed.id.end_offset > 0 =>
                    {
                        Some((parsed, e.path()))
                    }
                    _ => None,
                }
            })
            .max_by_key(|(parsed, _)| parsed.id);
        // Wait for a snapshot taken after the topic was created (snapshots come every second).
        if let Some(found) = found
            && created.elapsed() > Duration::from_secs(3)
        {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (name, path) = snapshot;
    let bytes = std::fs::read(&path).expect("read snapshot");
    node.kill().expect("kill Kafka");

    // The metadata log itself: every data record decodes and re-encodes to Kafka's bytes.
    let segment = std::fs::read(metadata_dir.join("00000000000000000000.log")).expect("segment");
    let (batches, _torn_tail) =
        krust_log::batch::BatchReader::new(Bytes::from(segment), usize::MAX).read_all();
    let mut log_types = std::collections::BTreeSet::new();
    for batch in batches.iter().filter(|b| !b.is_control()) {
        for record in batch.records().expect("records") {
            let value = record.value.expect("metadata records have values");
            let decoded = ApiMessageAndVersion::decode(&value).expect("log record decodes");
            assert_eq!(
                decoded.encode().expect("re-encodes").as_ref(),
                value.as_ref(),
                "{:?} in the log does not round-trip",
                decoded.record.record_type()
            );
            log_types.insert(decoded.record.record_type());
        }
    }
    for t in [
        MetadataRecordType::BeginTransaction,
        MetadataRecordType::EndTransaction,
        MetadataRecordType::BrokerRegistrationChange,
        MetadataRecordType::NoOp,
        MetadataRecordType::Topic,
    ] {
        assert!(
            log_types.contains(&t),
            "no {t} in Kafka's metadata log: {log_types:?}"
        );
    }
    let contents = read_snapshot(Bytes::from(bytes), Some(name.id.epoch))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!contents.records.is_empty());
    let records: Vec<ApiMessageAndVersion> = contents
        .records
        .iter()
        .map(|v| {
            let record = ApiMessageAndVersion::decode(v).expect("every record frame decodes");
            // Decoding then encoding gives Kafka's bytes back, for every record type krust
            // has a codec for (the others are carried opaquely, which is trivially exact).
            assert_eq!(
                record.encode().expect("re-encodes").as_ref(),
                v.as_ref(),
                "{:?} does not round-trip",
                record.record.record_type()
            );
            record
        })
        .collect();
    let has = |t: MetadataRecordType| records.iter().any(|r| r.record.record_type() == t);
    for t in [
        MetadataRecordType::FeatureLevel,
        MetadataRecordType::RegisterBroker,
        MetadataRecordType::RegisterController,
        MetadataRecordType::Topic,
        MetadataRecordType::Partition,
        MetadataRecordType::Config,
        MetadataRecordType::ZkMigrationState,
    ] {
        assert!(has(t), "no {t} in Kafka's snapshot");
    }
    assert!(records.iter().any(|r| matches!(
        &r.record,
        MetadataRecord::Topic(t) if t.name == "krust-snapshot-topic"
    )));
    match &records[0].record {
        MetadataRecord::FeatureLevel(f) => {
            assert_eq!(f.name, "metadata.version");
            assert_eq!(
                f.feature_level,
                MetadataVersion::LATEST_PRODUCTION.feature_level()
            );
        }
        other => panic!("first record is {:?}", other.record_type()),
    }
    assert!(
        records
            .iter()
            .any(|r| r.record.record_type() == MetadataRecordType::RegisterBroker),
        "the combined node's registration is in the snapshot"
    );
}

/// What Kafka's tool said went wrong: the message of the uncaught exception (`Exception in
/// thread "main" <class>: <message>`), or the last line it printed to stderr (its terse
/// failures), ignoring log lines.
fn kafka_failure_message(out: &ToolOutput) -> String {
    if let Some(line) = out
        .stderr
        .lines()
        .find(|l| l.starts_with("Exception in thread \"main\" "))
    {
        let rest = &line["Exception in thread \"main\" ".len()..];
        return rest.split_once(": ").map_or(rest, |(_, m)| m).to_owned();
    }
    out.stderr
        .lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with('[') && !l.starts_with('\t'))
        .unwrap_or_default()
        .to_owned()
}

/// Bad configurations and arguments fail in krust with the message Kafka 3.9 gives (krust adds
/// context in front of it, e.g. the file name).
#[test]
fn config_and_argument_errors_match_kafka() {
    let dist = dist();
    let controller = "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19093\nlog.dirs={dir}/d\n";
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("log.dirs={dir}/d\n".into(), vec![]),
        ("zookeeper.connect=127.0.0.1:2181\nlog.dirs={dir}/d\n".into(), vec![]),
        ("process.roles=brokers\nnode.id=1\nlog.dirs={dir}/d\n".into(), vec![]),
        ("process.roles=broker\nlog.dirs={dir}/d\n".into(), vec![]),
        ("process.roles=broker\nnode.id=1\nbroker.id=2\n".into(), vec![]),
        ("process.roles=broker\nnode.id=x\n".into(), vec![]),
        (controller.into(), vec![]),
        (format!("{controller}controller.quorum.voters=2@127.0.0.1:19093\n"), vec![]),
        (format!("{controller}controller.quorum.voters=1@127.0.0.1:19093\nlisteners=CONTROLLER://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19092\n"), vec![]),
        (format!("{controller}controller.quorum.voters=1@127.0.0.1:19093\nlistener.security.protocol.map=PLAINTEXT:PLAINTEXT\n"), vec![]),
        (format!("{controller}controller.quorum.voters=1@127.0.0.1:19093\nlistener.security.protocol.map=CONTROLLER:TLS\n"), vec![]),
        ("process.roles=broker\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\nlog.dirs={dir}/d\n".into(), vec![]),
        ("process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@127.0.0.1:19093\nlog.dirs={dir}/d\n".into(), vec![]),
        (format!("{controller}controller.quorum.bootstrap.servers=127.0.0.1:19093\n"), vec![]),
        (format!("{controller}controller.quorum.bootstrap.servers=127.0.0.1:19093\n"), vec!["-N", "-r", "3.1"]),
        (format!("{controller}controller.quorum.bootstrap.servers=127.0.0.1:19093\n"), vec!["-s", "-f", "transaction.version=2"]),
        (format!("{controller}controller.quorum.bootstrap.servers=127.0.0.1:19093\n"), vec!["-I", "1@127.0.0.1:19093:bad"]),
        (format!("{controller}controller.quorum.voters=1@127.0.0.1:19093\n"), vec!["-S", "SCRAM-SHA-256=[name=a,password=b,iterations=1]"]),
    ];
    for (props, extra) in cases {
        let twin = Twin::new(&props);
        let config = twin.config();
        let mut args = vec!["format", "-t", "RXmJz-cpSbqo1IMdXqyzRA", "-c", &config];
        args.extend_from_slice(&extra);
        let kafka = kafka_storage(&dist, &args);
        assert!(!kafka.success(), "Kafka accepted {props:?} {extra:?}");
        let message = kafka_failure_message(&kafka);
        assert!(
            !message.is_empty(),
            "no message from Kafka: {}",
            kafka.stderr
        );
        let mut ours_args = vec!["storage"];
        ours_args.extend_from_slice(&args);
        let ours = krust(&ours_args);
        assert_eq!(ours.status.code(), Some(1), "{props:?} {extra:?}");
        assert!(
            ours.stderr.contains(&message),
            "{props:?} {extra:?}\nKafka: {message}\nkrust: {}",
            ours.stderr
        );
    }
}
