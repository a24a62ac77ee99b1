//! `krust dump-log` and `krust metadata-shell` on files that are not what they claim to be:
//! truncated, corrupted, empty or missing. Each must end with a clear message and exit code,
//! never a panic. The files are built with krust-log's batch builder in a temp dir.

use std::time::Duration;

use bytes::Bytes;
use krust_log::batch::RecordBatchBuilder;
use krust_metadata::ApiMessageAndVersion;
use krust_metadata::records::{FeatureLevelRecord, MetadataRecord};
use krust_testkit::{ToolOutput, run_binary};

const KRUST: &str = env!("CARGO_BIN_EXE_krust");

fn krust(args: &[&str]) -> ToolOutput {
    run_binary(KRUST, args, None, Duration::from_secs(30)).expect("krust runs")
}

fn no_panic(out: &ToolOutput) {
    assert!(!out.stderr.contains("panicked"), "panic: {}", out.stderr);
}

/// One data batch holding a `metadata.version` FeatureLevelRecord at offset 0.
fn feature_batch() -> Vec<u8> {
    let value = ApiMessageAndVersion::new(
        MetadataRecord::FeatureLevel(FeatureLevelRecord::new("metadata.version", 21)),
        0,
    )
    .encode()
    .expect("encode");
    let mut builder = RecordBatchBuilder::new(0)
        .partition_leader_epoch(1)
        .base_timestamp(1_000);
    builder.append_kv(1_000, None, Some(value));
    builder.build().as_bytes().to_vec()
}

#[test]
fn dump_log_reports_a_torn_tail_and_a_bad_payload_without_panicking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = dir.path().join("00000000000000000000.log");
    let mut bytes = feature_batch();
    bytes.extend_from_slice(&feature_batch()[..20]); // a torn second batch
    std::fs::write(&segment, &bytes).expect("write");
    let out = krust(&[
        "dump-log",
        "--cluster-metadata-decoder",
        "--files",
        &segment.display().to_string(),
    ]);
    no_panic(&out);
    assert!(out.success(), "{}", out.stderr);
    assert!(out.stdout.contains(r#"payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":21}}"#), "{}", out.stdout);
    assert!(
        out.stdout
            .ends_with("Found 20 invalid bytes at the end of 00000000000000000000.log\n"),
        "{}",
        out.stdout
    );

    // A record value that is not a metadata frame prints Kafka's "Error at" line.
    let mut builder = RecordBatchBuilder::new(0);
    builder.append_kv(0, None, Some(Bytes::from_static(&[7, 7, 7])));
    std::fs::write(&segment, builder.build().as_bytes()).expect("write");
    let out = krust(&[
        "dump-log",
        "--cluster-metadata-decoder",
        "--files",
        &segment.display().to_string(),
    ]);
    no_panic(&out);
    assert!(
        out.stdout.contains("payload: Error at 0, skipping."),
        "{}",
        out.stdout
    );

    // Missing file, misnamed snapshot: exit 1 with the path in the message.
    let missing = dir.path().join("00000000000000000005.log");
    let out = krust(&[
        "dump-log",
        "--cluster-metadata-decoder",
        "--files",
        &missing.display().to_string(),
    ]);
    no_panic(&out);
    assert!(!out.success());
    assert!(
        out.stderr.contains("00000000000000000005.log"),
        "{}",
        out.stderr
    );
    let misnamed = dir.path().join("snapshot.checkpoint");
    std::fs::write(&misnamed, feature_batch()).expect("write");
    let out = krust(&[
        "dump-log",
        "--cluster-metadata-decoder",
        "--files",
        &misnamed.display().to_string(),
    ]);
    no_panic(&out);
    assert!(!out.success());
    assert!(
        out.stderr.contains("is not a snapshot file name"),
        "{}",
        out.stderr
    );
}

#[test]
fn metadata_shell_loads_what_it_can_and_never_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir
        .path()
        .join("00000000000000000001-0000000001.checkpoint");
    let mut bytes = feature_batch();
    bytes.extend_from_slice(b"garbage after the batch");
    std::fs::write(&file, &bytes).expect("write");
    let out = krust(&[
        "metadata-shell",
        "--snapshot",
        &file.display().to_string(),
        "cat",
        "/image/features/metadataVersion",
    ]);
    no_panic(&out);
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "3.9-IV0\n");
    assert!(
        out.stderr.contains("stopped reading at position"),
        "{}",
        out.stderr
    );

    // Random bytes: an empty image, still browsable.
    std::fs::write(&file, [0xffu8; 64]).expect("write");
    let out = krust(&[
        "metadata-shell",
        "--snapshot",
        &file.display().to_string(),
        "cat",
        "/image/provenance",
    ]);
    no_panic(&out);
    assert_eq!(
        out.stdout,
        "offset -1, epoch -1, time 1969-12-31T23:59:59.999Z[UTC]\n"
    );

    // --directory with a corrupt latest snapshot: exit 1, the snapshot named.
    let out = krust(&[
        "metadata-shell",
        "--directory",
        &dir.path().display().to_string(),
        "ls",
        "/",
    ]);
    no_panic(&out);
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("00000000000000000001-0000000001.checkpoint"),
        "{}",
        out.stderr
    );

    // Missing directory.
    let out = krust(&[
        "metadata-shell",
        "--directory",
        "/nonexistent/krust-dir",
        "ls",
    ]);
    no_panic(&out);
    assert!(!out.success());
    assert!(
        out.stderr.contains("/nonexistent/krust-dir"),
        "{}",
        out.stderr
    );
}

#[test]
fn metadata_shell_reads_commands_from_stdin_when_none_are_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir
        .path()
        .join("00000000000000000001-0000000001.checkpoint");
    std::fs::write(&file, feature_batch()).expect("write");
    let out = run_binary(
        KRUST,
        &["metadata-shell", "--snapshot", &file.display().to_string()],
        Some(b"cd /image/features\npwd\nls\ncat metadataVersion\nexit\nls /\n"),
        Duration::from_secs(30),
    )
    .expect("krust runs");
    no_panic(&out);
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "Loading...\nStarting...\n[ Kafka Metadata Shell ]\n>> >> /image/features\n>> \
         metadataVersion\nzkMigrationState\n>> 3.9-IV0\n>> "
    );
}
