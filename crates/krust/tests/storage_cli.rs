//! `krust storage` as a user runs it: the built binary on temp directories, checking Kafka 3.9's
//! output lines, messages and exit codes (facts §4.8, §7.1; Kafka's `StorageTool.scala` and
//! `Formatter.java`). No Java needed; `kafka_interop.rs` holds the checks against real Kafka.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use krust_metadata::BootstrapMetadata;
use krust_metadata::meta_properties::MetaProperties;
use krust_metadata::metadata_version::MetadataVersion;
use krust_raft::snapshot::read_snapshot;
use krust_testkit::{ToolOutput, run_binary};
use tempfile::TempDir;

const CLUSTER_ID: &str = "RXmJz-cpSbqo1IMdXqyzRA";

fn krust(args: &[&str]) -> ToolOutput {
    run_binary(
        env!("CARGO_BIN_EXE_krust"),
        args,
        None,
        Duration::from_secs(30),
    )
    .expect("krust runs within 30 s")
}

fn code(out: &ToolOutput) -> Option<i32> {
    out.status.code()
}

struct Node {
    dir: TempDir,
}

impl Node {
    /// A temp dir with `server.properties` = `props`, where `{dir}` is replaced by the temp dir.
    fn new(props: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = props.replace("{dir}", &dir.path().display().to_string());
        std::fs::write(dir.path().join("server.properties"), text).expect("write props");
        Self { dir }
    }

    fn config(&self) -> String {
        self.dir
            .path()
            .join("server.properties")
            .display()
            .to_string()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn shown(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    fn format(&self, extra: &[&str]) -> ToolOutput {
        let config = self.config();
        let mut args = vec!["storage", "format", "-t", CLUSTER_ID, "-c", &config];
        args.extend_from_slice(extra);
        krust(&args)
    }
}

fn controller_props(voters: bool) -> String {
    let mut props = String::from(
        "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19093\nlog.dirs={dir}/meta\n",
    );
    if voters {
        props.push_str("controller.quorum.voters=1@127.0.0.1:19093\n");
    } else {
        props.push_str("controller.quorum.bootstrap.servers=127.0.0.1:19093\n");
    }
    props
}

fn read_meta(dir: &Path) -> MetaProperties {
    let text = std::fs::read_to_string(dir.join("meta.properties")).expect("meta.properties");
    MetaProperties::parse(&text).expect("valid meta.properties")
}

#[test]
fn random_uuid_prints_a_kafka_uuid() {
    let out = krust(&["storage", "random-uuid"]);
    assert_eq!(code(&out), Some(0));
    let id = out.stdout.trim();
    assert_eq!(id.len(), 22, "{id}");
    assert!(!id.starts_with('-'));
    assert!(krust_metadata::kafka_uuid::parse_kafka_uuid(id).is_ok());
}

#[test]
fn bad_arguments_exit_1_with_usage() {
    for args in [
        vec!["storage"],
        vec!["storage", "format", "-c", "x.properties"],
        vec!["storage", "info"],
        vec![
            "storage",
            "format",
            "-t",
            CLUSTER_ID,
            "-c",
            "x",
            "--standalone",
            "-N",
        ],
        vec!["storage", "bogus"],
    ] {
        let out = krust(&args);
        assert_eq!(code(&out), Some(1), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.to_lowercase().contains("usage"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let help = krust(&["storage", "format", "--help"]);
    assert_eq!(code(&help), Some(0));
    assert!(help.stdout.contains("--initial-controllers"));
}

/// A ZooKeeper cluster's id (what a migration's controllers are formatted with) may begin with
/// '-'; `-t` takes it as a value.
#[test]
fn formats_with_a_cluster_id_beginning_with_a_hyphen() {
    const ZK_STYLE_ID: &str = "-_4sSd7oRyW0Ax4Ri7Zp1A";
    let node = Node::new(&controller_props(true));
    let config = node.config();
    let out = krust(&["storage", "format", "-t", ZK_STYLE_ID, "-c", &config]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    let meta = read_meta(&node.path("meta"));
    assert_eq!(meta.cluster_id.as_deref(), Some(ZK_STYLE_ID));
}

#[test]
fn formats_a_static_controller_then_refuses_to_format_again() {
    let node = Node::new(&controller_props(true));
    let out = node.format(&[]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "Formatting metadata directory {} with metadata.version 3.9-IV0.\n",
            node.shown("meta")
        )
    );
    let meta = read_meta(&node.path("meta"));
    assert_eq!(meta, MetaProperties::v1(CLUSTER_ID, 1, meta.directory_id));
    assert!(meta.directory_id.is_some());
    let bootstrap = std::fs::read(node.path("meta/bootstrap.checkpoint")).expect("bootstrap");
    let bootstrap = BootstrapMetadata::from_checkpoint_bytes(Bytes::from(bootstrap), "test")
        .expect("valid bootstrap.checkpoint");
    assert_eq!(bootstrap.metadata_version(), MetadataVersion::IBP_3_9_IV0);
    assert!(
        !node.path("meta/__cluster_metadata-0").exists(),
        "a static quorum gets no bootstrap snapshot"
    );

    let again = node.format(&[]);
    assert_eq!(code(&again), Some(1));
    assert_eq!(
        again.stderr.trim(),
        format!(
            "Log directory {} is already formatted. Use --ignore-formatted to ignore this directory and format the others.",
            node.shown("meta")
        )
    );
    let ignored = node.format(&["-g"]);
    assert_eq!(code(&ignored), Some(0), "{}", ignored.stderr);
    assert_eq!(
        ignored.stdout,
        "All of the log directories are already formatted.\n"
    );
    assert_eq!(
        read_meta(&node.path("meta")),
        meta,
        "-g leaves formatted dirs alone"
    );
}

#[test]
fn ignore_formatted_formats_only_the_new_directories() {
    let node = Node::new(
        "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs={dir}/a,{dir}/b\nmetadata.log.dir={dir}/m\n",
    );
    let first = node.format(&[]);
    assert_eq!(code(&first), Some(0), "{}", first.stderr);
    // Kafka prints the directories in java.util.HashMap order (by path hash), so compare sorted.
    let mut lines: Vec<&str> = first.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!(
                "Formatting data directory {} with metadata.version 3.9-IV0.",
                node.shown("a")
            ),
            format!(
                "Formatting data directory {} with metadata.version 3.9-IV0.",
                node.shown("b")
            ),
            format!(
                "Formatting metadata directory {} with metadata.version 3.9-IV0.",
                node.shown("m")
            ),
        ]
    );
    let ids: Vec<_> = ["a", "b", "m"]
        .iter()
        .map(|d| read_meta(&node.path(d)).directory_id)
        .collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );

    std::fs::remove_dir_all(node.path("b")).expect("rm b");
    let again = node.format(&["--ignore-formatted"]);
    assert_eq!(code(&again), Some(0), "{}", again.stderr);
    assert_eq!(
        again.stdout,
        format!(
            "Formatting data directory {} with metadata.version 3.9-IV0.\n",
            node.shown("b")
        )
    );
}

#[test]
fn standalone_writes_the_bootstrap_snapshot() {
    let node = Node::new(&controller_props(false));
    let out = node.format(&["--standalone"]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "Formatting dynamic metadata voter directory {} with metadata.version 3.9-IV0.\n",
            node.shown("meta")
        )
    );
    let snapshot =
        node.path("meta/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint");
    let contents = read_snapshot(
        Bytes::from(std::fs::read(snapshot).expect("snapshot")),
        Some(0),
    )
    .expect("valid snapshot");
    assert_eq!(contents.kraft_version, Some(1));
    let voters = contents.voters.expect("voters record");
    assert_eq!(voters.voters.len(), 1);
    let voter = &voters.voters[0];
    assert_eq!(voter.voter_id.0, 1);
    assert_eq!(
        Some(voter.voter_directory_id),
        read_meta(&node.path("meta")).directory_id
    );
    assert_eq!(voter.endpoints[0].name.as_str(), "CONTROLLER");
    assert_eq!(voter.endpoints[0].host.as_str(), "127.0.0.1");
    assert_eq!(voter.endpoints[0].port, 19093);
    assert!(contents.records.is_empty());
}

#[test]
fn initial_controllers_decide_the_directory_kind_and_id() {
    let voter_dir = "JEXY6aqzQY-32P5TStzaFg";
    let node = Node::new(&controller_props(false).replace("node.id=1", "node.id=2"));
    let voters = format!("1@127.0.0.1:19093:MvDxzVmcRsaTz33bUuRU6A,2@127.0.0.1:19094:{voter_dir}");
    let out = node.format(&["--initial-controllers", &voters]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("Formatting dynamic metadata voter directory"),
        "{}",
        out.stdout
    );
    assert_eq!(
        read_meta(&node.path("meta")).directory_id,
        krust_metadata::kafka_uuid::parse_kafka_uuid(voter_dir).ok()
    );

    let other = Node::new(&controller_props(false).replace("node.id=1", "node.id=3"));
    let out = other.format(&["-I", &voters]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("Formatting dynamic metadata directory"),
        "{}",
        out.stdout
    );
    assert!(
        other
            .path("meta/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint")
            .exists()
    );
}

#[test]
fn kafka_messages_for_bad_requests() {
    let dynamic = controller_props(false);
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (
            "zookeeper.connect=localhost:2181\nlog.dirs={dir}/d\n".into(),
            vec![],
            "The kafka configuration file appears to be for a legacy cluster. Formatting is only supported for clusters in KRaft mode.",
        ),
        (
            "log.dirs={dir}/d\n".into(),
            vec![],
            "Missing required configuration `zookeeper.connect` which has no default value.",
        ),
        (
            dynamic.clone(),
            vec![],
            "Because controller.quorum.voters is not set on this controller, you must specify one of the following: --standalone, --initial-controllers, or --no-initial-controllers.",
        ),
        (
            "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\nlog.dirs={dir}/d\n".into(),
            vec!["--standalone"],
            "You can only use --standalone on a controller.",
        ),
        (dynamic.clone(), vec!["-r", "banana", "-s"], "Version banana is not a valid version"),
        (
            dynamic.clone(),
            vec!["-r", "3.8", "-s"],
            "kraft.version could not be set to 1 because it depends on metadata.version level 21",
        ),
        (dynamic.clone(), vec!["-r", "4.0-IV0", "-N"], "metadata.version 4.0-IV0 is not yet stable."),
        (
            dynamic.clone(),
            vec!["-r", "3.2", "-N", "-f", "kraft.version=0"],
            "Cannot set kraft.version to 0 if KIP-853 configuration is present. Try removing the --feature flag for kraft.version.",
        ),
        (
            controller_props(true),
            vec!["-r", "3.2"],
            "Bootstrap metadata.version before 3.3-IV0 are not supported. Can't load metadata from format command",
        ),
        (
            controller_props(true),
            vec!["-f", "foo=1"],
            "Unsupported feature: foo. Supported features are: kraft.version, transaction.version",
        ),
        (
            controller_props(true),
            vec!["-f", "metadata.version"],
            "Can't parse feature=level string metadata.version: equals sign not found.",
        ),
        (
            controller_props(true),
            vec!["-r", "3.9", "-f", "metadata.version=21"],
            "Use --release-version instead of --feature metadata.version=X to avoid ambiguity.",
        ),
        (dynamic, vec!["-I", "1@localhost:9093"], "No colon following port could be found."),
    ];
    for (props, extra, message) in cases {
        let node = Node::new(&props);
        let out = node.format(&extra);
        assert_eq!(code(&out), Some(1), "{extra:?}: {}", out.stdout);
        assert!(
            out.stderr.contains(message),
            "{props:?} {extra:?}\nwant: {message}\ngot: {}",
            out.stderr
        );
        assert!(
            !node.path("meta/meta.properties").exists(),
            "nothing written on failure"
        );
    }
}

#[test]
fn config_syntax_errors_name_the_line() {
    let node = Node::new("process.roles=controller\nnode.id=1\nbad=\\u12x4\n");
    let out = node.format(&[]);
    assert_eq!(code(&out), Some(1));
    assert!(
        out.stderr.contains(&format!("{}:3:", node.config())),
        "{}",
        out.stderr
    );
    let missing = krust(&["storage", "info", "-c", "/nonexistent/server.properties"]);
    assert_eq!(code(&missing), Some(1));
    assert!(
        missing.stderr.contains("/nonexistent/server.properties"),
        "{}",
        missing.stderr
    );
}

#[test]
fn unknown_keys_are_warned_about_not_fatal() {
    let node = Node::new(&format!("{}my.custom.key=1\n", controller_props(true)));
    let out = node.format(&[]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("my.custom.key"), "{}", out.stderr);
}

#[test]
fn info_reports_formatted_and_unformatted_directories() {
    let node = Node::new(&controller_props(true));
    let out = krust(&["storage", "info", "-c", &node.config()]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        out.stdout,
        format!(
            "Found problem:\n  {} does not exist\n\n",
            node.shown("meta")
        )
    );
    assert_eq!(code(&node.format(&[])), Some(0));
    let out = krust(&["storage", "info", "-c", &node.config()]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    let meta = read_meta(&node.path("meta"));
    assert_eq!(
        out.stdout,
        format!(
            "Found log directory:\n  {}\n\nFound metadata: {}\n\n",
            node.shown("meta"),
            meta.to_sorted_map_string()
        )
    );
}

#[test]
fn info_on_a_zookeeper_config_with_v0_and_v1_files() {
    let node =
        Node::new("zookeeper.connect=localhost:2181\nbroker.id=0\nlog.dirs={dir}/a,{dir}/b\n");
    std::fs::create_dir_all(node.path("a")).expect("mkdir");
    std::fs::create_dir_all(node.path("b")).expect("mkdir");
    std::fs::write(
        node.path("a/meta.properties"),
        "#\nbroker.id=0\ncluster.id=c1\nversion=0\n",
    )
    .expect("write");
    std::fs::write(
        node.path("b/meta.properties"),
        "#\nbroker.id=0\ncluster.id=c2\nversion=0\n",
    )
    .expect("write");
    let out = krust(&["storage", "info", "-c", &node.config()]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        out.stdout,
        format!(
            "Found log directories:\n  {}\n  {}\n\nFound metadata: {{broker.id=0, cluster.id=c1, version=0}}\n\nFound problem:\n  Mismatched cluster IDs between storage directories.\n\n",
            node.shown("a"),
            node.shown("b")
        )
    );
}

#[test]
fn unreadable_directories_are_skipped_like_kafka() {
    let props = "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19093\ncontroller.quorum.voters=1@127.0.0.1:19093\n";
    // A log dir below a regular file cannot be read (ENOTDIR): Kafka ignores it with a message.
    let only_bad = Node::new(&format!("{props}log.dirs={{dir}}/file/sub\n"));
    std::fs::write(only_bad.path("file"), b"").expect("write file");
    let out = only_bad.format(&[]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        out.stdout,
        format!(
            "I/O error trying to read log directory {}. Ignoring...\n",
            only_bad.shown("file/sub")
        )
    );
    assert!(
        out.stderr
            .contains("No available log directories to format."),
        "{}",
        out.stderr
    );

    let mixed = Node::new(&format!(
        "{props}log.dirs={{dir}}/ok,{{dir}}/file/sub\nmetadata.log.dir={{dir}}/ok\n"
    ));
    std::fs::write(mixed.path("file"), b"").expect("write file");
    let out = mixed.format(&[]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "I/O error trying to read log directory {}. Ignoring...\nFormatting metadata directory {} with metadata.version 3.9-IV0.\n",
            mixed.shown("file/sub"),
            mixed.shown("ok")
        )
    );
}

#[test]
fn add_scram_puts_credentials_in_the_bootstrap() {
    use krust_metadata::records::MetadataRecord;
    let node = Node::new(&controller_props(true));
    let out = node.format(&["-S", "SCRAM-SHA-256=[name=alice,password=alice-secret]"]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    let bytes = std::fs::read(node.path("meta/bootstrap.checkpoint")).expect("bootstrap");
    let bootstrap =
        BootstrapMetadata::from_checkpoint_bytes(Bytes::from(bytes), "test").expect("valid");
    assert_eq!(bootstrap.records().len(), 2);
    match &bootstrap.records()[1].record {
        MetadataRecord::UserScramCredential(r) => {
            assert_eq!(
                (r.name.as_str(), r.mechanism, r.iterations),
                ("alice", 1, 4096)
            );
            assert!(
                r.salt.iter().all(|b| b.is_ascii_alphanumeric()),
                "base-36 text salt"
            );
            assert_eq!(r.stored_key.len(), 32);
            assert_eq!(r.server_key.len(), 32);
        }
        other => panic!("unexpected {other:?}"),
    }

    for (extra, message) in [
        (
            vec!["-r", "3.4", "-S", "SCRAM-SHA-256=[name=a,password=b]"],
            "SCRAM is only supported in metadata.version 3.5-IV2 or later.",
        ),
        (
            vec!["-S", "SCRAM-SHA-1=[name=a,password=b]"],
            "The add-scram mechanism SCRAM-SHA-1 is not supported.",
        ),
        (
            vec!["-S", "SCRAM-SHA-256=[name=a,password=b,iterations=20000]"],
            "The 'iterations' value must be <= 16384 for add-scram using SCRAM_SHA_256",
        ),
    ] {
        let node = Node::new(&controller_props(true));
        let out = node.format(&extra);
        assert_eq!(code(&out), Some(1), "{extra:?}");
        assert!(out.stderr.contains(message), "{extra:?}: {}", out.stderr);
    }
}

#[test]
fn long_option_prefixes_and_argument_files_work_like_argparse4j() {
    let node = Node::new(&controller_props(true));
    let config = node.config();
    let out = krust(&[
        "storage",
        "format",
        "--cluster",
        CLUSTER_ID,
        "--conf",
        &config,
    ]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    let args_file = node.path("args.txt");
    std::fs::write(
        &args_file,
        format!("format\n--cluster-id={CLUSTER_ID}\n-c\n{config}\n-g\n"),
    )
    .expect("write args");
    let at = format!("@{}", args_file.display());
    let out = krust(&["storage", &at]);
    assert_eq!(code(&out), Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "All of the log directories are already formatted.\n"
    );
    let missing = krust(&["storage", "@/nonexistent/args"]);
    assert_eq!(code(&missing), Some(1));
    assert!(
        missing.stderr.contains("/nonexistent/args"),
        "{}",
        missing.stderr
    );
}
