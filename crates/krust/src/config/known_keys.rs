//! The `server.properties` keys krust knows beyond Kafka 3.9's `KafkaConfig` (whose keys are in
//! `krust_config`), so that krust warns only about keys neither would know.

/// krust's additive keys, beyond Kafka's (ARCHITECTURE.md lists what each does).
pub const KRUST_KEYS: &[&str] = &[
    // Port of the Prometheus `GET /metrics` endpoint (off when absent).
    "metrics.port",
    // While dual-writing to ZooKeeper in a migration, how many metadata records ZooKeeper may
    // lag behind the log before the controller refuses admin writes (-1: no bound).
    "zookeeper.metadata.migration.write.behind.max.records",
];

/// Prefixes under which Kafka accepts free-form keys (per-listener overrides, plugin configs).
pub const KNOWN_PREFIXES: [&str; 5] = [
    "listener.name.",
    "rlmm.config.",
    "rsm.config.",
    "remote.log.metadata.",
    "client.quota.callback.",
];
