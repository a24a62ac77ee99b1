//! `krust storage format` (Kafka 3.9 `StorageTool.runFormatCommand` + `Formatter.run`).

use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use krust_metadata::bootstrap::{BOOTSTRAP_FILE_NAME, BootstrapError, BootstrapMetadata};
use krust_metadata::dynamic_voters::{DynamicVoter, DynamicVoters};
use krust_metadata::features::{self, KRAFT_VERSION};
use krust_metadata::frame::ApiMessageAndVersion;
use krust_metadata::kafka_uuid::{random_directory_id, random_kafka_uuid};
use krust_metadata::meta_properties::{META_PROPERTIES_NAME, MetaProperties, verify_ensemble};
use krust_metadata::metadata_version::MetadataVersion;
use krust_metadata::records::MetadataRecord;
use krust_metadata::scram::{ScramArgument, ScramError, random_salt_from};
use krust_raft::snapshot::{SnapshotId, SnapshotWriterOptions, write_snapshot};
use uuid::Uuid;

use krust_log::fs::write_atomically;

use super::load_config;
use crate::config::ProcessRole;

/// The directory of the metadata log partition inside the metadata log directory.
pub const CLUSTER_METADATA_DIR: &str = "__cluster_metadata-0";

/// What `krust storage format` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct FormatArgs {
    /// `--config/-c`.
    pub config: PathBuf,
    /// `--cluster-id/-t`.
    pub cluster_id: String,
    /// `--release-version/-r`.
    pub release_version: Option<String>,
    /// `--feature/-f name=level`, in order.
    pub features: Vec<String>,
    /// `--ignore-formatted/-g`.
    pub ignore_formatted: bool,
    /// `--standalone/-s`.
    pub standalone: bool,
    /// `--initial-controllers/-I`.
    pub initial_controllers: Option<String>,
    /// `--no-initial-controllers/-N`.
    pub no_initial_controllers: bool,
    /// `--add-scram/-S`, in order.
    pub add_scram: Vec<String>,
}

/// The kind of a directory being formatted; its description is what Kafka prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirectoryType {
    Log,
    StaticMetadata,
    DynamicMetadataNonVoter,
    DynamicMetadataVoter,
}

impl DirectoryType {
    fn description(self) -> &'static str {
        match self {
            Self::Log => "data directory",
            Self::StaticMetadata => "metadata directory",
            Self::DynamicMetadataNonVoter => "dynamic metadata directory",
            Self::DynamicMetadataVoter => "dynamic metadata voter directory",
        }
    }

    fn is_dynamic_metadata(self) -> bool {
        matches!(
            self,
            Self::DynamicMetadataNonVoter | Self::DynamicMetadataVoter
        )
    }
}

/// `name=level` as Kafka's `StorageTool.parseNameAndLevel` reads it.
fn parse_name_and_level(input: &str) -> anyhow::Result<(String, i16)> {
    let (name, level) = input.split_once('=').ok_or_else(|| {
        anyhow!("Can't parse feature=level string {input}: equals sign not found.")
    })?;
    let level = level.trim();
    let parsed = level.parse::<i16>().map_err(|_| {
        anyhow!("Can't parse feature=level string {input}: unable to parse {level} as a short.")
    })?;
    Ok((name.trim().to_owned(), parsed))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs `format`, printing Kafka's lines to `out`. Returns the exit code (0); failures are errors
/// whose message is Kafka's.
///
/// # Errors
/// Any reason Kafka's formatter would fail for, or an IO error while writing.
pub fn run_format(args: &FormatArgs, out: &mut dyn Write) -> anyhow::Result<i32> {
    let config = load_config(&args.config)?;
    let roles = config.process_roles()?;
    if roles.is_empty() {
        bail!(
            "The kafka configuration file appears to be for a legacy cluster. Formatting is only supported for clusters in KRaft mode."
        );
    }
    let node_id = config.node_id()?;
    let controller_listener_name = config
        .controller_listener_names()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("You must specify the name of the initial controller listener."))?;
    let metadata_log_dir = config
        .metadata_log_dir()
        .ok_or_else(|| anyhow!("You must specify the metadata log directory."))?;
    let unstable = config.unstable_feature_versions_enable()?;

    let release_version = match args
        .release_version
        .as_deref()
        .or(config.inter_broker_protocol_version())
    {
        Some(text) => Some(MetadataVersion::from_version_string(text)?),
        None => None,
    };
    // Kafka collects --feature values into a map: the last value of a name wins.
    let mut requested = BTreeMap::new();
    for feature in &args.features {
        let (name, level) = parse_name_and_level(feature)?;
        requested.insert(name, level);
    }
    let mut initial_controllers = match &args.initial_controllers {
        Some(text) => Some(DynamicVoters::parse(text)?),
        None => None,
    };
    if args.standalone {
        if !roles.contains(&ProcessRole::Controller) {
            bail!("You can only use --standalone on a controller.");
        }
        let listener = config
            .effective_advertised_controller_listeners()?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("No controller listeners found."))?;
        initial_controllers = Some(DynamicVoters::new(vec![DynamicVoter {
            node_id,
            host: listener.host.unwrap_or_else(|| "localhost".to_owned()),
            port: listener.port,
            directory_id: random_kafka_uuid(&mut rand::thread_rng()),
        }])?);
    }
    if !args.no_initial_controllers
        && roles.contains(&ProcessRole::Controller)
        && config.quorum_voter_ids()?.is_empty()
        && initial_controllers.is_none()
    {
        bail!(
            "Because controller.quorum.voters is not set on this controller, you must specify one of the following: --standalone, --initial-controllers, or --no-initial-controllers."
        );
    }
    let has_dynamic_quorum = initial_controllers.is_some() || args.no_initial_controllers;

    // Formatter.run
    let directories = config.storage_directories();
    if directories.is_empty() {
        bail!("You must specify at least one directory to format");
    }
    let release_version =
        features::effective_release_version(release_version, &requested, unstable)?;
    let feature_levels = features::effective_feature_levels(
        release_version,
        &requested,
        unstable,
        has_dynamic_quorum,
    )?;
    // Kafka's order: the version check, then SCRAM support, then the SCRAM arguments.
    let bootstrap =
        BootstrapMetadata::from_versions(release_version, &feature_levels, "format command")?;
    if !args.add_scram.is_empty() && !release_version.is_scram_supported() {
        bail!(BootstrapError::ScramNotSupported);
    }
    let scram_records = args
        .add_scram
        .iter()
        .map(|argument| {
            let record = ScramArgument::parse(argument)?.to_record(|| {
                let bits: [u8; 17] = rand::random();
                let mut low = [0u8; 16];
                low.copy_from_slice(&bits[..16]);
                random_salt_from(u128::from_be_bytes(low), bits[16])
            })?;
            Ok(ApiMessageAndVersion::new(
                MetadataRecord::UserScramCredential(record),
                0,
            ))
        })
        .collect::<Result<Vec<_>, ScramError>>()?;
    let bootstrap = bootstrap.with_records(scram_records)?;
    let kraft_version = feature_levels.get(KRAFT_VERSION).copied().unwrap_or(0);

    // Load what is already there (MetaPropertiesEnsemble.Loader).
    let mut empty_dirs = Vec::new();
    let mut error_dirs = Vec::new();
    let mut formatted: BTreeMap<String, MetaProperties> = BTreeMap::new();
    for dir in &directories {
        let path = Path::new(dir).join(META_PROPERTIES_NAME);
        match crate::config::read_bounded(&path, super::MAX_META_PROPERTIES_BYTES) {
            Ok(bytes) => {
                let text = krust_metadata::properties::decode_text(&bytes);
                match MetaProperties::parse(&text) {
                    Ok(props) => {
                        formatted.insert(dir.clone(), props);
                    }
                    Err(e) => {
                        tracing::error!(file = %path.display(), error = %e, "Error while reading meta.properties file");
                        error_dirs.push(dir.clone());
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => empty_dirs.push(dir.clone()),
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "Error while reading meta.properties file");
                error_dirs.push(dir.clone());
            }
        }
    }
    verify_ensemble(
        formatted.iter().map(|(d, p)| (d.as_str(), p)),
        Some(args.cluster_id.clone()),
        Some(node_id),
    )?;
    if !args.ignore_formatted
        && let Some(first) = formatted.keys().next()
    {
        bail!(
            "Log directory {first} is already formatted. Use --ignore-formatted to ignore this directory and format the others."
        );
    }

    if !error_dirs.is_empty() {
        for dir in &error_dirs {
            writeln!(
                out,
                "I/O error trying to read log directory {dir}. Ignoring..."
            )?;
        }
        if empty_dirs.is_empty() && formatted.is_empty() {
            bail!("No available log directories to format.");
        }
    }
    if empty_dirs.is_empty() {
        writeln!(out, "All of the log directories are already formatted.")?;
        return Ok(0);
    }

    let mut taken: Vec<Uuid> = formatted.values().filter_map(|p| p.directory_id).collect();
    let bootstrap_bytes = bootstrap.to_checkpoint_bytes(now_ms())?;
    for dir in &java_hash_set_order(&empty_dirs) {
        let directory_type = if *dir != metadata_log_dir {
            DirectoryType::Log
        } else {
            match &initial_controllers {
                None => DirectoryType::StaticMetadata,
                Some(voters) if voters.voters().contains_key(&node_id) => {
                    DirectoryType::DynamicMetadataVoter
                }
                Some(_) => DirectoryType::DynamicMetadataNonVoter,
            }
        };
        let directory_id = match (&initial_controllers, directory_type) {
            (Some(voters), DirectoryType::DynamicMetadataVoter) => {
                voters.voters()[&node_id].directory_id
            }
            _ => random_directory_id(&mut rand::thread_rng(), &taken),
        };
        taken.push(directory_id);
        writeln!(
            out,
            "Formatting {} {dir} with metadata.version {release_version}.",
            directory_type.description()
        )?;
        // Kafka reports any failure here as a failure to write this directory's meta.properties.
        write_directory(
            Path::new(dir),
            &bootstrap_bytes,
            initial_controllers
                .as_ref()
                .filter(|_| directory_type.is_dynamic_metadata()),
            kraft_version,
            &controller_listener_name,
            &MetaProperties::v1(args.cluster_id.clone(), node_id, Some(directory_id)),
        )
        .map_err(|e| anyhow!("Error while writing meta.properties file {dir}: {e:#}"))?;
    }
    Ok(0)
}

/// Writes one new directory: `bootstrap.checkpoint`, the bootstrap snapshot for a dynamic
/// metadata directory, then `meta.properties` last, so a directory only counts as formatted once
/// everything else is durable.
fn write_directory(
    dir: &Path,
    bootstrap_bytes: &[u8],
    dynamic_voters: Option<&DynamicVoters>,
    kraft_version: i16,
    controller_listener_name: &str,
    props: &MetaProperties,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).context("Unable to create storage directory")?;
    write_atomically(&dir.join(BOOTSTRAP_FILE_NAME), bootstrap_bytes)
        .with_context(|| format!("writing {BOOTSTRAP_FILE_NAME}"))?;
    if let Some(voters) = dynamic_voters {
        write_dynamic_quorum_snapshot(dir, voters, kraft_version, controller_listener_name)?;
    }
    write_atomically(
        &dir.join(META_PROPERTIES_NAME),
        props.to_file_text(now_ms() / 1000).as_bytes(),
    )
    .with_context(|| format!("writing {META_PROPERTIES_NAME}"))?;
    Ok(())
}

/// Kafka formats (and prints) the new directories in the iteration order of a
/// `java.util.HashMap<String, _>`: by hash bucket of the path, ties in sorted order. Matching it
/// keeps our output line for line identical to Kafka's.
fn java_hash_set_order(dirs: &[String]) -> Vec<String> {
    fn java_string_hash(s: &str) -> i32 {
        s.encode_utf16().fold(0i32, |h, unit| {
            h.wrapping_mul(31).wrapping_add(i32::from(unit))
        })
    }
    let mut capacity = 16usize;
    while dirs.len() > capacity * 3 / 4 {
        capacity *= 2;
    }
    let mut sorted: Vec<String> = dirs.to_vec();
    sorted.sort_by_key(|dir| {
        let h = java_string_hash(dir) as u32;
        (((h ^ (h >> 16)) as usize) & (capacity - 1), dir.clone())
    });
    sorted
}

/// Writes `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` holding the initial
/// voter set (Kafka's `Formatter.writeDynamicQuorumSnapshot`): via a `.checkpoint.part` file that
/// is fsynced and then renamed, so a crash never leaves a partial snapshot under the real name.
fn write_dynamic_quorum_snapshot(
    dir: &Path,
    voters: &DynamicVoters,
    kraft_version: i16,
    controller_listener_name: &str,
) -> anyhow::Result<()> {
    let metadata_dir = dir.join(CLUSTER_METADATA_DIR);
    std::fs::create_dir_all(&metadata_dir)
        .with_context(|| format!("creating {}", metadata_dir.display()))?;
    let mut options = SnapshotWriterOptions::new(SnapshotId::BOOTSTRAP);
    let now = now_ms();
    options.last_contained_log_timestamp_ms = now;
    options.append_timestamp_ms = now;
    options.kraft_version = kraft_version;
    options.voters = Some(voters.to_voters_record(controller_listener_name));
    let bytes = write_snapshot(options, std::iter::empty::<Bytes>())?;
    let unique =
        krust_metadata::kafka_uuid::to_kafka_string(&random_kafka_uuid(&mut rand::thread_rng()));
    let partial = metadata_dir.join(SnapshotId::BOOTSTRAP.partial_file_name(&unique));
    let frozen = metadata_dir.join(SnapshotId::BOOTSTRAP.file_name());
    {
        let mut file = std::fs::File::create(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        file.write_all(&bytes)?;
        // Durable before it is renamed to its frozen name.
        file.sync_all()?;
    }
    std::fs::rename(&partial, &frozen)
        .with_context(|| format!("renaming {} to {}", partial.display(), frozen.display()))?;
    std::fs::File::open(&metadata_dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_come_in_java_hash_map_order() {
        // "/a".hashCode() = 1554 → bucket 2; "/b" = 1555 → bucket 3; "/q" = 1570 → bucket 2.
        let dirs = ["/b".to_owned(), "/q".to_owned(), "/a".to_owned()];
        assert_eq!(java_hash_set_order(&dirs), ["/a", "/q", "/b"]);
    }

    #[test]
    fn feature_arguments_parse_like_kafka() {
        assert_eq!(
            parse_name_and_level(" kraft.version = 1 ").map_err(|e| e.to_string()),
            Ok(("kraft.version".to_owned(), 1))
        );
        assert_eq!(
            parse_name_and_level("kraft.version").map_err(|e| e.to_string()),
            Err(
                "Can't parse feature=level string kraft.version: equals sign not found.".to_owned()
            )
        );
        assert_eq!(
            parse_name_and_level("a=99999").map_err(|e| e.to_string()),
            Err(
                "Can't parse feature=level string a=99999: unable to parse 99999 as a short."
                    .to_owned()
            )
        );
    }
}
