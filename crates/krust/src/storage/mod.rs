//! `krust storage`: Kafka 3.9's `kafka-storage.sh` (`kafka.tools.StorageTool` and
//! `org.apache.kafka.metadata.storage.Formatter`): `random-uuid`, `format`, `info`, with Kafka's
//! output lines, messages and exit codes (facts §4.8, §7.1).
//!
//! This is the IO shell: the rules live in `krust-metadata` (features, bootstrap records,
//! meta.properties, voters) and `krust-raft` (snapshot layout).

mod format;
mod info;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

pub use format::{FormatArgs, run_format};
pub use info::run_info;

/// Prints one random Kafka UUID (22 characters of URL-safe base64).
///
/// # Errors
/// Writing to `out` failed.
pub fn run_random_uuid(out: &mut dyn Write) -> anyhow::Result<i32> {
    let uuid = krust_metadata::kafka_uuid::random_kafka_uuid();
    writeln!(
        out,
        "{}",
        krust_metadata::kafka_uuid::to_kafka_string(&uuid)
    )?;
    Ok(0)
}

/// Replaces `path` with `contents` crash-safely: `<path>.tmp` → fsync → rename → fsync the
/// directory (as Kafka writes `meta.properties` and `bootstrap.checkpoint`).
///
/// Same contract as `krust_log::fs::write_atomically`, which is not exported by krust-log yet.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(contents)?;
        // The bytes must be durable before the rename makes them visible under `path`.
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    // The rename itself must survive a crash.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)?.sync_all()
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
