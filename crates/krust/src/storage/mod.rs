//! `krust storage`: Kafka 3.9's `kafka-storage.sh` (`kafka.tools.StorageTool` and
//! `org.apache.kafka.metadata.storage.Formatter`): `random-uuid`, `format`, `info`, with Kafka's
//! output lines, messages and exit codes (facts §4.8, §7.1).
//!
//! This is the IO shell: the rules live in `krust-metadata` (features, bootstrap records,
//! meta.properties, voters, SCRAM) and `krust-raft` (snapshot layout).
//!
//! # Same as Kafka, and where not
//!
//! Checked against Kafka 3.9.1 by `tests/kafka_interop.rs`: the printed lines (and their
//! order, which follows `java.util.HashMap` iteration), `bootstrap.checkpoint`, the bootstrap
//! snapshot (voter order, IPv6 host text), `meta.properties` and `info` output are identical
//! except for what Kafka takes from the clock or a random source:
//! * batch `baseTimestamp`/`maxTimestamp` (and so the CRC), and the bootstrap snapshot's
//!   `LastContainedLogTimestamp` — Kafka stamps each batch when it builds it, krust uses one
//!   timestamp per file;
//! * random directory ids, random SCRAM salts, the `#<date>` line of `meta.properties`.
//!
//! Failures print Kafka's message on stderr and exit 1. Where Kafka dies of an uncaught
//! exception (config validation, bad `--release-version`), it prints a Java stack trace; krust
//! prints the same message with the file name in front. krust also fsyncs the files it writes
//! (Kafka does not fsync `bootstrap.checkpoint`).

mod format;
mod info;

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;

pub use format::{FormatArgs, run_format};
pub use info::run_info;

/// Largest `meta.properties` krust reads (real ones are about 150 bytes); a bigger one counts as
/// unreadable.
pub const MAX_META_PROPERTIES_BYTES: u64 = 1024 * 1024;

/// Prints one random Kafka UUID (22 characters of URL-safe base64).
///
/// # Errors
/// Writing to `out` failed.
pub fn run_random_uuid(out: &mut dyn Write) -> anyhow::Result<i32> {
    let uuid = krust_metadata::kafka_uuid::random_kafka_uuid(&mut rand::thread_rng());
    writeln!(
        out,
        "{}",
        krust_metadata::kafka_uuid::to_kafka_string(&uuid)
    )?;
    Ok(0)
}

/// Loads and validates `server.properties` the way `new KafkaConfig(Utils.loadProps(path))`
/// does, warning about keys Kafka does not know.
pub(crate) fn load_config(path: &Path) -> anyhow::Result<crate::config::ServerConfig> {
    let config = crate::config::ServerConfig::load(path)?;
    for (key, line) in config.unknown_keys() {
        tracing::warn!(
            file = %path.display(),
            line,
            key,
            "The configuration '{key}' was supplied but isn't a known config."
        );
    }
    config
        .validate()
        .with_context(|| format!("invalid configuration in {}", path.display()))?;
    Ok(config)
}
