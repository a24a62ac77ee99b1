//! `krust dump-log --cluster-metadata-decoder` and `krust metadata-shell` against Kafka 3.9's own
//! tools on files a real Kafka 3.9 node wrote.
//!
//! One combined Kafka node (snapshots every second) creates a topic with a config, alters a
//! broker default config, sets a client quota and is stopped cleanly. Then Kafka's
//! `DumpLogSegments --cluster-metadata-decoder` and krust's `dump-log` read the same segment and
//! the same snapshot and must print the same lines; Kafka's `MetadataShell` and krust's
//! `metadata-shell` must answer `ls`/`cat`/`find` on that snapshot alike.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krust_testkit::{KafkaDist, KafkaNode, ToolOutput, class, run_binary};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// One Kafka `MetadataShell` run (normally 2-3 s); see [`assert_same_as_kafka_shell`].
const SHELL_TIMEOUT: Duration = Duration::from_secs(45);

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("metadata dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)))
        .collect();
    files.sort();
    files
}

fn krust(args: &[&str]) -> ToolOutput {
    run_binary(KRUST, args, None, TOOL_TIMEOUT).expect("krust runs")
}

/// Compares two tool outputs line by line and names the first line that differs.
fn assert_same_lines(what: &str, kafka: &str, ours: &str) {
    let kafka_lines: Vec<&str> = kafka.lines().collect();
    let our_lines: Vec<&str> = ours.lines().collect();
    for (i, (k, o)) in kafka_lines.iter().zip(&our_lines).enumerate() {
        assert_eq!(k, o, "{what}: line {} differs", i + 1);
    }
    assert_eq!(
        kafka_lines.len(),
        our_lines.len(),
        "{what}: line counts differ\nkafka:\n{kafka}\nkrust:\n{ours}"
    );
}

/// A Kafka-written `__cluster_metadata-0` with at least one snapshot that holds a topic.
struct Written {
    _node: KafkaNode,
    metadata_dir: PathBuf,
}

fn kafka_written_metadata(dist: &KafkaDist) -> Written {
    let mut node = KafkaNode::builder(dist)
        .prop("metadata.log.max.snapshot.interval.ms", 1000)
        .prop(
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        )
        .prop("super.users", "User:ANONYMOUS")
        .start()
        .expect("Kafka node");
    node.create_topic("golden", 2, &[("cleanup.policy", "compact")])
        .expect("create topic");
    // An idempotent producer makes the controller allocate producer ids (ProducerIdsRecord).
    node.console_produce("golden", "a\nb\n", &[], &[])
        .expect("produce");
    dist.run_tool(
        "kafka.admin.AclCommand",
        &[
            "--bootstrap-server",
            &node.bootstrap_servers(),
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "golden",
        ],
        TOOL_TIMEOUT,
    )
    .expect("acl command")
    .ok()
    .expect("add ACL");
    dist.run_tool(
        "kafka.admin.ConfigCommand",
        &[
            "--bootstrap-server",
            &node.bootstrap_servers(),
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.cleaner.threads=2",
        ],
        TOOL_TIMEOUT,
    )
    .expect("config command")
    .ok()
    .expect("alter broker default");
    dist.run_tool(
        "kafka.admin.ConfigCommand",
        &[
            "--bootstrap-server",
            &node.bootstrap_servers(),
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            "producer_byte_rate=1024",
        ],
        TOOL_TIMEOUT,
    )
    .expect("config command")
    .ok()
    .expect("alter quota");
    // Wait for a snapshot taken after the last change (snapshots every second while records,
    // NoOps included, keep arriving).
    let changed = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let metadata_dir = node.log_dir().join("__cluster_metadata-0");
    let deadline = changed + Duration::from_secs(60);
    while files_with_suffix(&metadata_dir, ".checkpoint").is_empty() {
        assert!(Instant::now() < deadline, "no snapshot in {metadata_dir:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    node.terminate(Duration::from_secs(60)).expect("stop Kafka");
    Written {
        _node: node,
        metadata_dir,
    }
}

#[test]
fn dump_log_and_metadata_shell_print_what_kafka_prints() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let written = kafka_written_metadata(&dist);
    let dir = &written.metadata_dir;
    let segment = files_with_suffix(dir, ".log")
        .into_iter()
        .next()
        .expect("a segment");
    let snapshot = files_with_suffix(dir, ".checkpoint")
        .into_iter()
        .next_back()
        .expect("a snapshot");
    if let Ok(keep) = std::env::var("KRUST_TOOLS_GOLDEN_OUT") {
        let out = Path::new(&keep);
        std::fs::create_dir_all(out).expect("golden dir");
        for file in files_with_suffix(dir, "") {
            if let Some(name) = file.file_name() {
                std::fs::copy(&file, out.join(name)).expect("copy");
            }
        }
    }

    // dump-log: the segment, the snapshot, and both in one run; once without record metadata.
    let both = format!("{},{}", segment.display(), snapshot.display());
    for (files, extra) in [
        (segment.display().to_string(), None),
        (snapshot.display().to_string(), None),
        (both.clone(), None),
        (both, Some("--skip-record-metadata")),
    ] {
        let mut args = vec!["--cluster-metadata-decoder", "--files", files.as_str()];
        args.extend(extra);
        let kafka = dist
            .run_tool(class::DUMP_LOG_SEGMENTS, &args, TOOL_TIMEOUT)
            .expect("Kafka DumpLogSegments")
            .ok()
            .expect("Kafka DumpLogSegments succeeds");
        let mut our_args = vec!["dump-log"];
        our_args.extend(&args);
        let ours = krust(&our_args);
        assert!(ours.success(), "krust dump-log failed: {}", ours.stderr);
        assert_same_lines(&format!("dump-log {args:?}"), &kafka.stdout, &ours.stdout);
    }

    // A damaged copy of the segment: the topic name's first letter flipped to upper case (only
    // the batch CRC notices: `isvalid: false`, and the dump goes on) and a torn batch appended
    // (`Found 20 invalid bytes at the end of …`).
    let damaged_dir = tempfile::tempdir().expect("tempdir");
    let damaged = damaged_dir.path().join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).expect("read segment");
    let at = bytes
        .windows(6)
        .position(|w| w == b"golden")
        .expect("topic name in the segment");
    bytes[at] = b'G';
    let torn: Vec<u8> = bytes[..20].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&damaged, &bytes).expect("write damaged copy");
    let damaged_arg = damaged.display().to_string();
    let args = [
        "--cluster-metadata-decoder",
        "--files",
        damaged_arg.as_str(),
    ];
    let kafka = dist
        .run_tool(class::DUMP_LOG_SEGMENTS, &args, TOOL_TIMEOUT)
        .expect("Kafka DumpLogSegments")
        .ok()
        .expect("Kafka DumpLogSegments succeeds");
    assert!(kafka.stdout.contains("isvalid: false"), "{}", kafka.stdout);
    let ours = krust(&["dump-log", args[0], args[1], args[2]]);
    assert!(ours.success(), "krust dump-log failed: {}", ours.stderr);
    assert_same_lines("dump-log (damaged)", &kafka.stdout, &ours.stdout);

    // metadata-shell, one-shot commands on the snapshot. `/local` is left out: it names the
    // shell's own version (Kafka's 3.9.1 and commit id, krust's version).
    let snapshot_arg = snapshot.display().to_string();
    for command in [
        vec!["ls", "/"],
        vec!["ls", "/image"],
        vec!["ls", "/image/topics/byName"],
        vec![
            "ls",
            "/image/topics/byName/golden",
            "/image/provenance",
            "/nope",
        ],
        vec!["cat", "/image/topics/byName/golden/0", "/image/topics"],
        vec![
            "cat",
            "/image/features/metadataVersion",
            "/image/provenance",
        ],
        vec!["cat", "/image/clientQuotas/user(alice)/producer_byte_rate"],
        vec![
            "cat",
            "/image/acls/byId/*",
            "/image/producerIds/nextProducerId",
        ],
        vec!["find", "/image"],
        vec![
            "find",
            "/image/topics/by*/*/{0,name}",
            "/image/topics/byName/gol?en/[01]",
        ],
        vec!["tree", "/image"],
        vec!["pwd"],
    ] {
        let ours = krust_shell(&["--snapshot", &snapshot_arg], &command);
        assert_same_as_kafka_shell(&dist, &snapshot_arg, &command, &ours);
    }

    // The interactive shell, commands on stdin: prompts, cd/pwd, relative paths, errors, and
    // `help`/`man`/`history`, and nothing after `exit`.
    let script: &[u8] = b"pwd\ncd /image/topics\npwd\nls\ncd byName\nls golden\ncat golden/0\n\
        cd /nope\nfind ../byId\ntree /image/features\nhelp\n\
        man ls\nhistory 3\nexit\nls\n";
    let ours = run_binary(
        KRUST,
        &["metadata-shell", "--snapshot", &snapshot_arg],
        Some(script),
        TOOL_TIMEOUT,
    )
    .expect("krust runs");
    assert!(
        ours.success(),
        "krust interactive shell failed: {}",
        ours.stderr
    );
    let mut same = false;
    let mut last = None;
    for _ in 0..4 {
        match dist.run_tool_with_stdin(
            class::METADATA_SHELL,
            &["--snapshot", &snapshot_arg],
            script,
            SHELL_TIMEOUT,
        ) {
            Ok(kafka) if kafka.stdout == ours.stdout => {
                same = true;
                break;
            }
            Ok(kafka) => last = Some(kafka.stdout),
            Err(e) => eprintln!("Kafka MetadataShell (interactive): {e}"),
        }
    }
    if !same {
        let last = last.expect("Kafka MetadataShell never finished");
        assert_same_lines("interactive metadata-shell", &last, &ours.stdout);
    }

    // metadata-shell --directory (latest snapshot + the log after it) sees what Kafka's shell
    // sees reading the whole log segment from offset 0: the same image, provenance included.
    let dir_arg = dir.display().to_string();
    let segment_arg = segment.display().to_string();
    for command in [vec!["find", "/image"], vec!["tree", "/image"]] {
        let ours = krust_shell(&["--directory", &dir_arg], &command);
        assert_same_as_kafka_shell(&dist, &segment_arg, &command, &ours);
    }
}

fn krust_shell(source: &[&str], command: &[&str]) -> String {
    let mut args = vec!["metadata-shell"];
    args.extend(source);
    args.extend(command);
    let ours = krust(&args);
    assert!(ours.success(), "krust {args:?} failed: {}", ours.stderr);
    ours.stdout
}

/// Kafka 3.9's one-shot shell can run its command before its loader has published the whole
/// file (seen here: `metadataVersion` 3.0-IV1 and an empty `clientQuotas` on some runs), so a
/// mismatch is retried with a fresh Kafka run; krust must equal one of at most four runs.
fn assert_same_as_kafka_shell(dist: &KafkaDist, file: &str, command: &[&str], ours: &str) {
    let mut args = vec!["--snapshot", file];
    args.extend(command);
    let mut last = None;
    for _ in 0..4 {
        // A run that hangs (the same race can leave the one-shot shell waiting) is retried too.
        match dist.run_tool(class::METADATA_SHELL, &args, SHELL_TIMEOUT) {
            Ok(kafka) if kafka.stdout == ours => return,
            Ok(kafka) => last = Some(kafka.stdout),
            Err(e) => eprintln!("Kafka MetadataShell {args:?}: {e}"),
        }
    }
    let last = last.expect("Kafka MetadataShell never finished");
    assert_same_lines(&format!("metadata-shell {args:?}"), &last, ours);
}

/// A KIP-853 standalone quorum (kraft.version 1: `KRaftVersion` and `KRaftVoters` control
/// records in the log and in the bootstrap snapshot `00000000000000000000-0000000000.checkpoint`)
/// formatted with a SCRAM credential: `dump-log` on the segment, that snapshot and
/// `bootstrap.checkpoint`, and the shell's `/image/scram` and whole tree, against Kafka's.
#[test]
fn control_records_bootstrap_files_and_scram_print_what_kafka_prints() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let mut node = KafkaNode::builder(&dist)
        .standalone()
        .format_arg("--add-scram")
        .format_arg("SCRAM-SHA-256=[name=alice,password=alice-secret]")
        .start()
        .expect("Kafka node");
    node.create_topic("scrammed", 1, &[]).expect("create topic");
    node.terminate(Duration::from_secs(60)).expect("stop Kafka");
    let dir = node.log_dir().join("__cluster_metadata-0");
    let segment = dir.join("00000000000000000000.log");
    let bootstrap_snapshot = dir.join("00000000000000000000-0000000000.checkpoint");
    let bootstrap = node.log_dir().join("bootstrap.checkpoint");
    for file in [&segment, &bootstrap_snapshot, &bootstrap] {
        assert!(file.exists(), "{file:?} missing");
        let arg = file.display().to_string();
        let args = ["--cluster-metadata-decoder", "--files", arg.as_str()];
        let kafka = dist
            .run_tool(class::DUMP_LOG_SEGMENTS, &args, TOOL_TIMEOUT)
            .expect("Kafka DumpLogSegments")
            .ok()
            .expect("Kafka DumpLogSegments succeeds");
        let ours = krust(&["dump-log", args[0], args[1], args[2]]);
        assert!(ours.success(), "krust dump-log failed: {}", ours.stderr);
        assert_same_lines(&format!("dump-log {arg}"), &kafka.stdout, &ours.stdout);
    }
    let segment_arg = segment.display().to_string();
    for command in [vec!["tree", "/image/scram"], vec!["find", "/image"]] {
        let ours = krust_shell(&["--snapshot", &segment_arg], &command);
        assert_same_as_kafka_shell(&dist, &segment_arg, &command, &ours);
    }
    let dir_arg = dir.display().to_string();
    let ours = krust_shell(&["--directory", &dir_arg], &["tree", "/image"]);
    assert_same_as_kafka_shell(&dist, &segment_arg, &["tree", "/image"], &ours);
}
