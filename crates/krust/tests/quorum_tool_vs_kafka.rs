//! `krust metadata-quorum` against a real Kafka 3.9 node (combined broker + controller) prints
//! what Kafka's own `MetadataQuorumCommand` prints, through `--bootstrap-controller` and
//! `--bootstrap-server`: the same `--status` lines (high watermark and lag times aside, which
//! move between the two runs) and the same `--replication` table shape and rows.

use std::time::Duration;

use krust_testkit::{KafkaDist, KafkaNode, class, run_binary};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");

/// Lines whose values do not move while nobody writes (Kafka's NoOps move the HW).
fn stable_status_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            [
                "ClusterId:",
                "LeaderId:",
                "LeaderEpoch:",
                "CurrentVoters:",
                "CurrentObservers:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

/// `(NodeId, DirectoryId, Status)` of each `--replication` row, plus the header cells.
fn replication_shape(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| {
            let cells: Vec<String> = l.split('\t').map(|c| c.trim().to_owned()).collect();
            if cells.first().is_some_and(|c| c == "NodeId") {
                cells
            } else {
                [0, 1, 6]
                    .iter()
                    .filter_map(|&i| cells.get(i).cloned())
                    .collect()
            }
        })
        .filter(|cells| !cells.is_empty() && !cells[0].is_empty())
        .collect()
}

#[test]
fn krust_metadata_quorum_prints_what_kafkas_tool_prints() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let mut node = KafkaNode::start_combined(&dist).expect("Kafka combined node");
    for bootstrap in [
        ("--bootstrap-controller", node.bootstrap_controller()),
        ("--bootstrap-server", node.bootstrap_servers()),
    ] {
        for what in ["--status", "--replication"] {
            let args = [bootstrap.0, bootstrap.1.as_str(), "describe", what];
            let kafka = dist
                .run_tool(class::METADATA_QUORUM, &args, Duration::from_secs(120))
                .expect("run Kafka's tool")
                .ok()
                .expect("Kafka's tool");
            let mut krust_args = vec!["metadata-quorum"];
            krust_args.extend(args);
            let krust = run_binary(KRUST, &krust_args, None, Duration::from_secs(60))
                .expect("run krust")
                .ok()
                .expect("krust metadata-quorum");
            println!(
                "{} {what}\nKafka:\n{}krust:\n{}",
                bootstrap.0, kafka.stdout, krust.stdout
            );
            if what == "--status" {
                assert_eq!(
                    stable_status_lines(&krust.stdout),
                    stable_status_lines(&kafka.stdout)
                );
                assert_eq!(krust.stdout.lines().count(), 8, "{}", krust.stdout);
            } else {
                assert_eq!(
                    replication_shape(&krust.stdout),
                    replication_shape(&kafka.stdout)
                );
                let header = |t: &str| t.lines().next().map(str::to_owned);
                assert_eq!(
                    header(&krust.stdout),
                    header(&kafka.stdout),
                    "identical header line"
                );
            }
        }
    }
    node.terminate(Duration::from_secs(60)).expect("stop Kafka");
}

/// Kafka's own tool against a krust cluster (three combined `krust server` nodes): through a
/// broker (`--bootstrap-server`: the broker forwards DescribeQuorum to the active controller, as
/// a Kafka 3.9 broker does) it prints what it prints through the controllers
/// (`--bootstrap-controller`).
#[test]
fn kafkas_tool_reads_a_krust_quorum_through_a_broker() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let cluster =
        krust_testkit::BrokerUnderTest::krust_cluster(&dist, KRUST, &[]).expect("krust cluster");
    let krust_testkit::BrokerUnderTest::KrustCluster(nodes) = &cluster else {
        unreachable!("krust_cluster starts a KrustCluster");
    };
    let controllers = nodes
        .iter()
        .map(|(node, _)| node.bootstrap_controller())
        .collect::<Vec<_>>()
        .join(",");
    // Through the last broker: in a fresh cluster it is seldom the active controller.
    let broker = cluster
        .bootstrap()
        .split(',')
        .next_back()
        .expect("a broker")
        .to_owned();
    for what in ["--status", "--replication"] {
        let run = |bootstrap: [&str; 2]| {
            let args = [bootstrap[0], bootstrap[1], "describe", what];
            dist.run_tool(class::METADATA_QUORUM, &args, Duration::from_secs(120))
                .expect("run Kafka's tool")
                .ok()
                .expect("Kafka's tool succeeds")
                .stdout
        };
        let via_controller = run(["--bootstrap-controller", &controllers]);
        let via_broker = run(["--bootstrap-server", &broker]);
        println!("{what}\nvia controllers:\n{via_controller}via a broker:\n{via_broker}");
        if what == "--status" {
            assert_eq!(
                stable_status_lines(&via_broker),
                stable_status_lines(&via_controller)
            );
            assert!(
                stable_status_lines(&via_broker)
                    .iter()
                    .any(|l| l.starts_with("CurrentVoters:") && l.contains("\"id\": 3")),
                "{via_broker}"
            );
        } else {
            assert_eq!(
                replication_shape(&via_broker),
                replication_shape(&via_controller)
            );
        }
    }
}

/// A `--command-config` Kafka's admin client refuses is refused by `krust metadata-quorum` with
/// Kafka's message, before either connects (the address is never used).
#[test]
fn command_config_refusals_carry_kafkas_messages() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars");
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "security.protocol=TLS\n",
            "Invalid value TLS for configuration security.protocol: String must be one of (case insensitive): SASL_SSL, PLAINTEXT, SSL, SASL_PLAINTEXT",
        ),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=\n",
            "Invalid value null for configuration sasl.mechanism: When the security.protocol configuration enables SASL, mechanism must be non-null and non-empty string.",
        ),
    ];
    for (i, (text, message)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("command-{i}.properties"));
        std::fs::write(&file, text).expect("write the command config");
        let file = file.display().to_string();
        let args = [
            "--bootstrap-controller",
            "127.0.0.1:1",
            "--command-config",
            file.as_str(),
            "describe",
            "--status",
        ];
        let kafka = dist
            .run_tool(class::METADATA_QUORUM, &args, Duration::from_secs(120))
            .expect("run Kafka's tool");
        let mut krust_args = vec!["metadata-quorum"];
        krust_args.extend(args);
        let krust =
            run_binary(KRUST, &krust_args, None, Duration::from_secs(60)).expect("run krust");
        println!(
            "{text:?}\nKafka (exit {}):\n{}\nkrust (exit {}):\n{}",
            kafka.status, kafka.stderr, krust.status, krust.stderr
        );
        assert!(
            !kafka.success() && kafka.stderr.contains(message),
            "Kafka: {message}"
        );
        assert!(
            !krust.success() && krust.stderr.contains(message),
            "krust: {message}"
        );
    }
}
