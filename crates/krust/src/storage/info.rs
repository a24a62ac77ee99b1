//! `krust storage info` (Kafka 3.9 `StorageTool.infoCommand`).

use std::io::Write;
use std::path::{Path, PathBuf};

use krust_metadata::meta_properties::{
    META_PROPERTIES_NAME, MetaProperties, MetaPropertiesVersion,
};
use krust_metadata::properties::decode_text;

use super::{MAX_META_PROPERTIES_BYTES, load_config};

/// Prints what the node's directories hold; exit code 1 when a problem was found.
///
/// # Errors
/// The configuration is unusable, or writing to `out` failed.
pub fn run_info(config_path: &Path, out: &mut dyn Write) -> anyhow::Result<i32> {
    let config = load_config(config_path)?;
    let kraft_mode = !config.process_roles()?.is_empty();
    let directories = config.storage_directories();
    info(out, kraft_mode, &directories)
}

fn info(out: &mut dyn Write, kraft_mode: bool, directories: &[String]) -> anyhow::Result<i32> {
    let mut problems: Vec<String> = Vec::new();
    let mut found_directories: Vec<String> = Vec::new();
    let mut first: Option<MetaProperties> = None;
    let mut sorted: Vec<&String> = directories.iter().collect();
    sorted.sort();
    for directory in sorted {
        // As `Paths.get(directory).toString()`: no trailing or doubled slashes.
        let path: PathBuf = Path::new(directory).components().collect();
        let shown = path.display().to_string();
        if !path.is_dir() {
            if path.exists() {
                problems.push(format!("{shown} is not a directory"));
            } else {
                problems.push(format!("{shown} does not exist"));
            }
            continue;
        }
        found_directories.push(shown.clone());
        let meta_path = path.join(META_PROPERTIES_NAME);
        if !meta_path.exists() {
            problems.push(format!("{shown} is not formatted."));
            continue;
        }
        let loaded = crate::config::read_bounded(&meta_path, MAX_META_PROPERTIES_BYTES)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                MetaProperties::parse(&decode_text(&bytes)).map_err(|e| e.to_string())
            });
        match loaded {
            Ok(current) => match &first {
                None => first = Some(current),
                Some(previous) => {
                    if previous.cluster_id != current.cluster_id {
                        problems.push("Mismatched cluster IDs between storage directories.".into());
                    } else if previous.node_id != current.node_id {
                        problems.push("Mismatched node IDs between storage directories.".into());
                    }
                }
            },
            Err(message) => {
                problems.push(format!("Error loading {}: {message}", meta_path.display()));
            }
        }
    }
    if let Some(previous) = &first {
        if kraft_mode {
            if previous.version == MetaPropertiesVersion::V0 {
                problems.push("The kafka configuration file appears to be for a cluster in KRaft mode, but the directories are formatted for legacy mode.".into());
            }
        } else if previous.version == MetaPropertiesVersion::V1 {
            problems.push("The kafka configuration file appears to be for a legacy cluster, but the directories are formatted for a cluster in KRaft mode.".into());
        }
    }
    if directories.is_empty() {
        writeln!(out, "No directories specified.")?;
        return Ok(0);
    }
    if !found_directories.is_empty() {
        if found_directories.len() == 1 {
            writeln!(out, "Found log directory:")?;
        } else {
            writeln!(out, "Found log directories:")?;
        }
        for directory in &found_directories {
            writeln!(out, "  {directory}")?;
        }
        writeln!(out)?;
    }
    if let Some(previous) = &first {
        writeln!(out, "Found metadata: {}", previous.to_sorted_map_string())?;
        writeln!(out)?;
    }
    if problems.is_empty() {
        return Ok(0);
    }
    if problems.len() == 1 {
        writeln!(out, "Found problem:")?;
    } else {
        writeln!(out, "Found problems:")?;
    }
    for problem in &problems {
        writeln!(out, "  {problem}")?;
    }
    writeln!(out)?;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kraft: bool, dirs: &[String]) -> (i32, String) {
        let mut out = Vec::new();
        let code = info(&mut out, kraft, dirs).expect("writes to a Vec");
        (code, String::from_utf8(out).expect("utf-8"))
    }

    #[test]
    fn reports_missing_and_unformatted_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let present = tmp.path().join("a").display().to_string();
        std::fs::create_dir(&present).expect("mkdir");
        let missing = tmp.path().join("b").display().to_string();
        let (code, text) = run(true, &[present.clone(), missing.clone()]);
        assert_eq!(code, 1);
        assert_eq!(
            text,
            format!(
                "Found log directory:\n  {present}\n\nFound problems:\n  {present} is not formatted.\n  {missing} does not exist\n\n"
            )
        );
        assert_eq!(
            run(true, &[]),
            (0, "No directories specified.\n".to_owned())
        );
    }

    #[test]
    fn v0_and_v1_files_against_the_mode() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().display().to_string();
        std::fs::write(
            tmp.path().join(META_PROPERTIES_NAME),
            "broker.id=3\ncluster.id=c\n",
        )
        .expect("write");
        let (code, text) = run(false, std::slice::from_ref(&dir));
        assert_eq!(code, 0);
        assert_eq!(
            text,
            format!(
                "Found log directory:\n  {dir}\n\nFound metadata: {{broker.id=3, cluster.id=c, version=0}}\n\n"
            )
        );
        let (code, text) = run(true, std::slice::from_ref(&dir));
        assert_eq!(code, 1);
        assert!(text.ends_with("Found problem:\n  The kafka configuration file appears to be for a cluster in KRaft mode, but the directories are formatted for legacy mode.\n\n"), "{text}");
    }

    #[test]
    fn directories_are_shown_like_java_paths() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().display().to_string();
        let (_, text) = run(true, &[format!("{dir}//")]);
        assert!(
            text.starts_with(&format!("Found log directory:\n  {dir}\n")),
            "{text}"
        );
    }

    #[test]
    fn broken_meta_properties_is_a_problem_not_a_crash() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().display().to_string();
        std::fs::write(
            tmp.path().join(META_PROPERTIES_NAME),
            "version=1\nnode.id=x\n",
        )
        .expect("write");
        let (code, text) = run(true, std::slice::from_ref(&dir));
        assert_eq!(code, 1);
        assert!(
            text.contains("meta.properties: Unable to read node.id as a base-10 number."),
            "{text}"
        );
    }
}
