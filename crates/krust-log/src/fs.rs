//! File-system helpers: crash-safe whole-file replacement and Kafka's segment file names.
//!
//! Durability rule: a file replaced with [`write_atomically`] is either the old or the new
//! content after a crash, never a mix, and the new content is durable when the call returns.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Suffix of segment data files.
pub const LOG_FILE_SUFFIX: &str = ".log";
/// Suffix of offset index files.
pub const INDEX_FILE_SUFFIX: &str = ".index";
/// Suffix of time index files.
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of transaction index files (krust never writes them; deleted with their segment).
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
/// Suffix of producer-state snapshots (krust never writes them; deleted with their segment).
pub const PRODUCER_SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
/// Suffix Kafka gives files scheduled for deletion.
pub const DELETED_FILE_SUFFIX: &str = ".deleted";
/// Suffix Kafka's cleaner gives files it is writing.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Suffix Kafka's cleaner gives finished replacement files.
pub const SWAP_FILE_SUFFIX: &str = ".swap";
/// Suffix of temporary files written by [`write_atomically`].
pub const TMP_FILE_SUFFIX: &str = ".tmp";

/// `<base offset zero-padded to 20 digits>` (Kafka's `LogFileUtils.filenamePrefixFromOffset`).
#[must_use]
pub fn offset_file_prefix(offset: i64) -> String {
    format!("{offset:020}")
}

/// `dir/<20-digit offset><suffix>`.
#[must_use]
pub fn offset_file_path(dir: &Path, offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{}{suffix}", offset_file_prefix(offset)))
}

/// Parses a `<20 digits><suffix>` file name; `None` if the name has another shape.
#[must_use]
pub fn parse_offset_file_name(name: &str, suffix: &str) -> Option<i64> {
    let prefix = name.strip_suffix(suffix)?;
    if prefix.len() != 20 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    prefix.parse().ok()
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
///
/// # Errors
/// The `io::Error` from opening or syncing the directory.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `path` with `contents` crash-safely: write `<path>.tmp`, fsync it, rename it over
/// `path`, fsync the directory. Readers see the old or the new file, never a partial one.
///
/// # Errors
/// Any `io::Error` from the steps; the temporary file may be left behind (it is overwritten by
/// the next call).
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(TMP_FILE_SUFFIX);
    let tmp = PathBuf::from(tmp_name);
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all(contents)?;
        // The content must be on disk before the rename makes it visible under `path`.
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    // The rename itself must survive a crash.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fsync_dir(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_twenty_digits() {
        assert_eq!(offset_file_prefix(0), "00000000000000000000");
        assert_eq!(
            offset_file_path(Path::new("/x"), 123, LOG_FILE_SUFFIX),
            PathBuf::from("/x/00000000000000000123.log")
        );
        assert_eq!(
            parse_offset_file_name("00000000000000000123.index", INDEX_FILE_SUFFIX),
            Some(123)
        );
        assert_eq!(parse_offset_file_name("123.index", INDEX_FILE_SUFFIX), None);
        assert_eq!(
            parse_offset_file_name("0000000000000000012a.log", LOG_FILE_SUFFIX),
            None
        );
        assert_eq!(
            parse_offset_file_name("99999999999999999999.log", LOG_FILE_SUFFIX),
            None,
            "does not fit an i64"
        );
    }

    #[test]
    fn write_atomically_replaces_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.properties");
        write_atomically(&path, b"one").expect("write");
        write_atomically(&path, b"two").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert!(!dir.path().join("meta.properties.tmp").exists());
    }
}
