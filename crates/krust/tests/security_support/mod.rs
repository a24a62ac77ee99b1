//! A single combined node — Apache Kafka 3.9 or `krust server` — started from the same
//! `server.properties` keys, for the listener-security tests (`security_tls.rs`,
//! `security_sasl.rs`, `security_acls.rs`): the harness's PLAINTEXT and CONTROLLER listeners plus
//! the test's own. [`acl_client`]: what the authorization tests (`security_acls.rs`,
//! `security_forwarded_acls.rs`) share.

#![allow(dead_code)] // each test binary uses a different part

pub mod acl_client;

use std::sync::Mutex;
use std::time::Duration;

use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, Kcat, KrustProcess, ToolOutput, free_ports, run_binary,
};

pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
const READY_TIMEOUT: Duration = Duration::from_secs(90);

static BROKER: Mutex<()> = Mutex::new(());

/// One broker (a JVM or krust) at a time: the machine has two cores.
pub fn broker_lock() -> std::sync::MutexGuard<'static, ()> {
    BROKER.lock().unwrap_or_else(|e| e.into_inner())
}

/// A started node. Extra listener ports are in `ports`, in the order asked for.
pub struct SecureNode {
    pub kind: &'static str,
    pub ports: Vec<u16>,
    // Field order: the krust process is killed before the node's folder goes.
    pub krust: Option<KrustProcess>,
    pub node: KafkaNode,
}

impl SecureNode {
    /// Starts a node with `extra` listeners (`NAME` → `NAME://127.0.0.1:<port>`, advertised,
    /// mapped to `protocol`), `props` (may use `{port:N}` for the N-th extra port) and
    /// `format_args` for the storage format (`--add-scram …`).
    pub fn start(
        dist: &KafkaDist,
        krust: bool,
        extra: &[(&str, &str)],
        props: &[(&str, String)],
        format_args: &[&str],
    ) -> SecureNode {
        Self::try_start(dist, krust, extra, props, format_args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`SecureNode::start`], but a node that exits (or never gets ready) within the bounded
    /// wait is an `Err` with what the harness saw and the log's last lines.
    pub fn try_start(
        dist: &KafkaDist,
        krust: bool,
        extra: &[(&str, &str)],
        props: &[(&str, String)],
        format_args: &[&str],
    ) -> Result<SecureNode, String> {
        let ports = free_ports(2 + extra.len()).expect("ports");
        let (broker, controller) = (ports[0], ports[1]);
        let extra_ports: Vec<u16> = ports[2..].to_vec();
        let listeners: Vec<String> = extra
            .iter()
            .zip(&extra_ports)
            .map(|((name, _), port)| format!("{name}://127.0.0.1:{port}"))
            .collect();
        let protocols: Vec<String> = extra
            .iter()
            .map(|(name, protocol)| format!("{name}:{protocol}"))
            .collect();
        let mut builder = KafkaNode::builder(dist)
            .node_id(1)
            .role(KafkaRole::Combined)
            .broker_port(broker)
            .controller_port(controller)
            .quorum_voters(format!("1@127.0.0.1:{controller}"))
            .prop(
                "listeners",
                format!(
                    "PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},{}",
                    listeners.join(",")
                ),
            )
            .prop(
                "advertised.listeners",
                format!("PLAINTEXT://127.0.0.1:{broker},{}", listeners.join(",")),
            )
            .prop(
                "listener.security.protocol.map",
                format!(
                    "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{}",
                    protocols.join(",")
                ),
            )
            .prop("auto.create.topics.enable", "true");
        for (key, value) in props {
            builder = builder.prop(*key, value);
        }
        if !krust {
            for arg in format_args {
                builder = builder.format_arg(*arg);
            }
            let mut node = builder.build().map_err(|e| format!("Kafka node: {e}"))?;
            if let Err(e) = node.start() {
                let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
                return Err(format!("Kafka node: {e}\nwhole log:\n{log}"));
            }
            return Ok(SecureNode {
                kind: "kafka",
                ports: extra_ports,
                krust: None,
                node,
            });
        }
        let node = builder.build_unformatted().expect("node folder");
        let binary = env!("CARGO_BIN_EXE_krust");
        let properties = node.properties_path().display().to_string();
        let cluster_id = krust_testkit::random_kafka_uuid();
        let mut args = vec!["storage", "format", "-t", &cluster_id, "-c", &properties];
        args.extend_from_slice(format_args);
        run_binary(binary, &args, None, TOOL_TIMEOUT)
            .and_then(ToolOutput::ok)
            .expect("krust storage format");
        let mut process = KrustProcess::builder(binary)
            .args(["server", &properties])
            .env("RUST_LOG", "info")
            .dir(node.dir().join("krust"))
            .name("krust-secure")
            .start()
            .expect("krust server");
        process
            .wait_for_line("Kafka Server started", READY_TIMEOUT)
            .map_err(|e| {
                let log = std::fs::read_to_string(process.log_path()).unwrap_or_default();
                format!("krust server: {e}\nwhole log:\n{log}")
            })?;
        Ok(SecureNode {
            kind: "krust",
            ports: extra_ports,
            krust: Some(process),
            node,
        })
    }

    /// The broker's whole log (krust's process log, or Kafka's at INFO).
    pub fn log(&self) -> String {
        let path = match &self.krust {
            Some(process) => process.log_path().to_path_buf(),
            None => self.node.log_path(),
        };
        String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned()
    }

    /// The authorizer's audit lines logged at INFO (`kafka.authorizer.logger`: denials of
    /// resources a request names), from `Principal = ` on, each once, sorted.
    pub fn audit_denials(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .log()
            .lines()
            .filter(|l| l.contains(" INFO ") && l.contains(" is Denied operation = "))
            .filter_map(|l| l.find("Principal = ").map(|at| &l[at..]))
            .map(|l| {
                l.trim_end()
                    .trim_end_matches(" (kafka.authorizer.logger)")
                    .to_owned()
            })
            .collect();
        lines.sort();
        lines.dedup();
        lines
    }

    pub fn log_tail(&self) -> String {
        match &self.krust {
            Some(process) => process.log_tail(40),
            None => krust_testkit::log_tail(&self.node.log_path(), 40),
        }
    }
}

/// kcat against `127.0.0.1:port` with the listener's `auth` settings (`-X` pairs) before `args`.
pub fn run_kcat(
    tool: &Kcat,
    port: u16,
    auth: &[String],
    args: &[&str],
    stdin: Option<&str>,
) -> ToolOutput {
    let mut all: Vec<&str> = auth.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    tool.run(
        &format!("127.0.0.1:{port}"),
        &all,
        stdin.map(str::as_bytes),
        TOOL_TIMEOUT,
    )
    .expect("kcat runs")
}

/// Produces `records` (`key:value` each) to partition 0 of `topic` with acks=all, then consumes
/// the partition from the beginning: every record comes back at its offset. `context` describes
/// a failed step (its name and kcat's output).
pub fn kcat_round_trip(
    tool: &Kcat,
    port: u16,
    auth: &[String],
    topic: &str,
    records: &[&str],
    context: &dyn Fn(&str, &ToolOutput) -> String,
) {
    let input: String = records.iter().map(|r| format!("{r}\n")).collect();
    let produced = run_kcat(
        tool,
        port,
        auth,
        &[
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K",
            ":",
            "-X",
            "topic.request.required.acks=-1",
        ],
        Some(&input),
    );
    assert!(produced.success(), "{}", context("kcat -P", &produced));
    let consumed = run_kcat(
        tool,
        port,
        auth,
        &[
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k:%s\n",
        ],
        None,
    );
    let expected: String = records
        .iter()
        .enumerate()
        .map(|(offset, r)| format!("{offset} {r}\n"))
        .collect();
    assert!(
        consumed.success() && consumed.stdout == expected,
        "{}",
        context("kcat -C", &consumed)
    );
}
