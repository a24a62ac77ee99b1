//! A single combined node — Apache Kafka 3.9 or `krust server` — started from the same
//! `server.properties` keys, for the listener-security tests (`security_tls.rs`,
//! `security_sasl.rs`): the harness's PLAINTEXT and CONTROLLER listeners plus the test's own.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Mutex;
use std::time::Duration;

use krust_testkit::{
    KafkaDist, KafkaNode, KafkaRole, KrustProcess, ToolOutput, free_ports, run_binary,
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
            let node = builder.start().expect("Kafka node");
            return SecureNode {
                kind: "kafka",
                ports: extra_ports,
                krust: None,
                node,
            };
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
            .unwrap_or_else(|e| panic!("krust server: {e}\n{}", process.log_tail(40)));
        SecureNode {
            kind: "krust",
            ports: extra_ports,
            krust: Some(process),
            node,
        }
    }

    pub fn log_tail(&self) -> String {
        match &self.krust {
            Some(process) => process.log_tail(40),
            None => krust_testkit::log_tail(&self.node.log_path(), 40),
        }
    }
}
