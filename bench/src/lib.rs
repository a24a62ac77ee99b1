//! Shared helpers for the benchmarks in `src/bin/`: the machine description every benchmark
//! prints, size parsing, throughput formatting, latency percentiles, and (for the Raft
//! benchmarks) a quorum of `krust server` controllers with the `--test-append-socket` hook
//! ([`KrustQuorum`], [`HookConnection`]) and a DescribeQuorum poller ([`QuorumPoller`]);
//! [`kafka_jvm`]: Kafka server JVMs with `kafka-server-start.sh`'s settings; [`cluster`]: three-node
//! krust and Kafka clusters for the broker benchmarks.

use std::path::Path;

pub mod cluster;
pub mod kafka_jvm;
mod raft;
pub use raft::{
    FsyncProbe, HookConnection, KrustQuorum, QuorumPoller, START_TIMEOUT, STARTED_LINE,
    default_krust_binary,
};

/// CPU model from `/proc/cpuinfo` (or "unknown").
#[must_use]
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Logical CPUs available to this process.
#[must_use]
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// `(mount point, fs type, device)` of the mount holding `dir`, from `/proc/mounts`.
#[must_use]
pub fn filesystem_of(dir: &Path) -> (String, String, String) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(String, String, String)> = None;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 {
            continue;
        }
        let (device, mount, fstype) = (fields[0], fields[1], fields[2]);
        if dir.starts_with(mount) && best.as_ref().is_none_or(|b| mount.len() > b.0.len()) {
            best = Some((mount.to_string(), fstype.to_string(), device.to_string()));
        }
    }
    best.unwrap_or_else(|| ("?".into(), "?".into(), "?".into()))
}

/// Parses `512M`, `2G`, `16K`, `1048576` (binary units).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size {text:?}"))?;
    let mult: u64 = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("invalid size unit in {text:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {text:?} too large"))
}

/// CPU seconds (user + system) this thread has used so far, from `/proc/thread-self/stat`
/// (0 where unavailable). Resolution is the kernel tick (usually 10 ms).
#[must_use]
pub fn thread_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may contain spaces).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the full line: 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0
}

/// Bytes per second as MB/s (10^6).
#[must_use]
pub fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds.max(1e-9) / 1e6
}

/// `/proc/loadavg`'s first three fields (1, 5, 15 minutes), or "?".
#[must_use]
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "?".to_string())
}

/// The `p`-quantile (`0.0..=1.0`, nearest rank) of `sorted`; zero for an empty slice.
#[must_use]
pub fn percentile(sorted: &[std::time::Duration], p: f64) -> std::time::Duration {
    if sorted.is_empty() {
        return std::time::Duration::ZERO;
    }
    let rank = (p.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Milliseconds with three decimals, for printing.
#[must_use]
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("16k"), Ok(16 << 10));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        use std::time::Duration;
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&v, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&v[..1], 0.5), Duration::from_millis(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
