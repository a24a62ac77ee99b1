//! `krust`: the command-line entry point of krust, Apache Kafka's KRaft architecture in Rust.
//! Argument parsing only; the commands live in the `krust` library (`krust::storage`, …).
//!
//! Exit codes follow Kafka's tools: 0 on success, 1 on any failure (including bad arguments).

use krust::{dev, dump_log, metadata_quorum, metadata_shell, migration, server, storage};

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// krust: Apache Kafka's KRaft architecture, in Rust.
#[derive(Debug, Parser)]
#[command(name = "krust", version, infer_long_args = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A one-node cluster for development: formats storage on first start, no config needed.
    Dev(DevCli),
    /// Run a KRaft node (`kafka-server-start.sh`): controller, broker or both.
    Server(ServerCli),
    /// Describe the KRaft quorum (`kafka-metadata-quorum.sh`).
    MetadataQuorum(MetadataQuorumCli),
    /// Dump metadata log segments and snapshots (`kafka-dump-log.sh`).
    DumpLog(DumpLogCli),
    /// Browse a metadata snapshot or log directory (`kafka-metadata-shell.sh`).
    MetadataShell(MetadataShellCli),
    /// The Kafka storage tool (`kafka-storage.sh`).
    Storage {
        #[command(subcommand)]
        command: StorageCommand,
    },
    /// Operator tools of the ZooKeeper to KRaft migration (krust's addition; Kafka has none).
    #[command(long_about = MIGRATION_HELP)]
    Migration {
        #[command(subcommand)]
        command: MigrationCommand,
    },
}

const MIGRATION_HELP: &str = "Operator tools of the ZooKeeper to KRaft migration (KIP-866). \
krust's addition: Kafka 3.9 has no equivalent. They only read ZooKeeper and the quorum.

  preflight      every documented precondition, one `OK|WARN|FAIL <check>: <found>` line each
                 (with the fix); exit 0 only when the migration can start
  status         phase, per-broker registration and why the migration waits, records copied,
                 ZooKeeper write-behind lag, the controller in /controller (--json)
  verify         ZooKeeper diffed with the quorum's metadata: no output and exit 0 when they
                 agree, one line per difference and exit 1 otherwise
  rollback-plan  the documented revert steps for this cluster and its current phase

Example:
  krust migration preflight --zookeeper zk:2181/kafka --config controller.properties \\
      --broker-config server-1.properties --broker-config server-2.properties
  krust migration status --bootstrap-controller ctrl:9093 --zookeeper zk:2181/kafka";

#[derive(Debug, Subcommand)]
enum MigrationCommand {
    /// Check every precondition of the migration against ZooKeeper and the config files.
    Preflight {
        /// ZooKeeper connect string of the cluster: host:port[,host:port…][/chroot].
        #[arg(long)]
        zookeeper: String,
        /// The KRaft controller's server.properties.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// A ZooKeeper-mode broker's server.properties (repeatable).
        #[arg(long = "broker-config")]
        broker_config: Vec<PathBuf>,
    },
    /// Where the migration stands and why it waits.
    Status {
        /// A comma-separated list of host:port pairs of controllers to connect to.
        #[arg(long = "bootstrap-controller")]
        bootstrap_controller: String,
        /// ZooKeeper connect string: host:port[,host:port…][/chroot]. Without it the
        /// ZooKeeper side (/migration, /controller, /brokers/ids, the write-behind lag) is not
        /// shown.
        #[arg(long)]
        zookeeper: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Property file with the settings of the connections to the controllers (as
        /// kafka-metadata-quorum's --command-config).
        #[arg(long = "command-config")]
        command_config: Option<PathBuf>,
    },
    /// Diff ZooKeeper's metadata with the quorum's (exit 1 on any difference).
    Verify {
        /// ZooKeeper connect string: host:port[,host:port…][/chroot].
        #[arg(long)]
        zookeeper: String,
        /// A comma-separated list of host:port pairs of controllers to connect to.
        #[arg(long = "bootstrap-controller")]
        bootstrap_controller: String,
        /// The controller's server.properties, for password.encoder.secret (password configs
        /// are compared by presence only without it).
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// Property file with the settings of the connections to the controllers.
        #[arg(long = "command-config")]
        command_config: Option<PathBuf>,
    },
    /// The documented steps to revert to ZooKeeper mode, for this cluster and phase.
    RollbackPlan {
        /// ZooKeeper connect string: host:port[,host:port…][/chroot].
        #[arg(long)]
        zookeeper: String,
        /// Controllers (host:port,…): the phase is then exact (finalization included).
        #[arg(long = "bootstrap-controller")]
        bootstrap_controller: Option<String>,
        /// Property file with the settings of the connections to the controllers.
        #[arg(long = "command-config")]
        command_config: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct DumpLogCli {
    /// The comma separated list of data and index log files to be dumped.
    #[arg(long, required = true, value_delimiter = ',')]
    files: Vec<PathBuf>,
    /// Parse log data as cluster metadata records.
    #[arg(long = "cluster-metadata-decoder")]
    cluster_metadata_decoder: bool,
    /// Print the messages content (implied by the decoder).
    #[arg(long = "print-data-log")]
    print_data_log: bool,
    /// Print every record, not only batches (implied by --print-data-log).
    #[arg(long = "deep-iteration")]
    deep_iteration: bool,
    /// Skip printing metadata for each record.
    #[arg(long = "skip-record-metadata")]
    skip_record_metadata: bool,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).multiple(false))]
struct MetadataShellCli {
    /// The metadata snapshot (or log segment) file to read.
    #[arg(long, short = 's', group = "source")]
    snapshot: Option<PathBuf>,
    /// A metadata log directory (`__cluster_metadata-0`): latest snapshot plus the log after it.
    #[arg(long, short = 'd', group = "source")]
    directory: Option<PathBuf>,
    /// A command to run instead of the interactive shell.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// `key=value` of `--override` (Kafka's `parseKeyValueArgs`: split at the first `=`).
fn parse_override(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!(
            "Invalid command line properties: {arg} (expected key=value)"
        )),
    }
}

#[derive(Debug, Args)]
struct DevCli {
    /// Where data, logs and the generated server.properties live.
    #[arg(long = "data-dir", default_value = "./krust-data")]
    data_dir: PathBuf,
    /// The Kafka listener's port on 127.0.0.1.
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Optional property that overrides the one in the generated server.properties, for this
    /// run only (`key=value`; repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE", value_parser = parse_override)]
    overrides: Vec<(String, String)>,
}

#[derive(Debug, Args)]
struct ServerCli {
    /// The `server.properties` file.
    config: PathBuf,
    /// Optional property that overrides the one in the file (`key=value`; repeatable), as
    /// `kafka-server-start.sh --override`.
    #[arg(long = "override", value_name = "KEY=VALUE", value_parser = parse_override)]
    overrides: Vec<(String, String)>,
    /// Test hook: serve appends to the metadata log on this Unix socket (one line = one
    /// record, answered `OK <offset>` once committed). Never use in production.
    #[arg(long = "test-append-socket", hide = true)]
    test_append_socket: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("bootstrap").required(true).multiple(false))]
struct MetadataQuorumCli {
    /// A comma-separated list of host:port pairs of brokers to connect to.
    #[arg(long = "bootstrap-server", group = "bootstrap")]
    bootstrap_server: Option<String>,
    /// A comma-separated list of host:port pairs of controllers to connect to.
    #[arg(long = "bootstrap-controller", group = "bootstrap")]
    bootstrap_controller: Option<String>,
    /// Property file with admin client settings: security.protocol, sasl.mechanism,
    /// sasl.jaas.config, ssl.* (PEM stores).
    #[arg(long = "command-config")]
    command_config: Option<PathBuf>,
    #[command(subcommand)]
    command: MetadataQuorumCommand,
}

#[derive(Debug, Subcommand)]
enum MetadataQuorumCommand {
    /// Describe the metadata quorum info.
    Describe {
        /// A summary of the metadata quorum status.
        #[arg(long, group = "what", required_unless_present = "replication")]
        status: bool,
        /// The replication state of the metadata quorum.
        #[arg(long, group = "what")]
        replication: bool,
        /// Relative timestamps (with --replication).
        #[arg(long = "human-readable", requires = "replication")]
        human_readable: bool,
    },
}

#[derive(Debug, Subcommand)]
#[command(infer_long_args = true)]
enum StorageCommand {
    /// Get information about the Kafka log directories on this node.
    Info {
        /// The Kafka configuration file to use.
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Format the Kafka log directories on this node.
    Format(FormatCli),
    /// Print a random UUID.
    RandomUuid,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("quorum").multiple(false), infer_long_args = true)]
struct FormatCli {
    /// The Kafka configuration file to use.
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// The cluster ID to use. A ZooKeeper-mode cluster's id (needed to migrate it) may begin
    /// with '-' (ZooKeeper-era ids are unfiltered base64): accepted after `-t` too, where
    /// Kafka's tool needs `--cluster-id=<id>`.
    #[arg(long = "cluster-id", short = 't', allow_hyphen_values = true)]
    cluster_id: String,
    /// A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g.
    /// 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
    /// 'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]'
    #[arg(long = "add-scram", short = 'S')]
    add_scram: Vec<String>,
    /// Ignore directories that are already formatted and format the others.
    #[arg(long = "ignore-formatted", short = 'g')]
    ignore_formatted: bool,
    /// The release version to use for the initial feature settings. The minimum is 3.0-IV0; the
    /// default is 3.9-IV0.
    #[arg(long = "release-version", short = 'r')]
    release_version: Option<String>,
    /// The setting to use for a specific feature, in feature=level format. For example:
    /// `kraft.version=1`.
    #[arg(long = "feature", short = 'f')]
    feature: Vec<String>,
    /// Used to initialize a controller as a single-node dynamic quorum.
    #[arg(long, short = 's', group = "quorum")]
    standalone: bool,
    /// Used to initialize a server without a dynamic quorum topology.
    #[arg(long = "no-initial-controllers", short = 'N', group = "quorum")]
    no_initial_controllers: bool,
    /// Used to initialize a server with a specific dynamic quorum topology: a comma-separated
    /// list of id@hostname:port:directory. The same values must be used to format all nodes.
    #[arg(long = "initial-controllers", short = 'I', group = "quorum")]
    initial_controllers: Option<String>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                // A server logs its lifecycle like Kafka's INFO log; tools stay quiet.
                let server = std::env::args_os()
                    .nth(1)
                    .is_some_and(|a| a == "server" || a == "dev");
                tracing_subscriber::EnvFilter::new(if server { "info" } else { "warn" })
            }),
        )
        .init();
    // Like kafka-storage (argparse4j with `fromFilePrefix "@"`), `@file` arguments after
    // `storage` stand for the lines of that file.
    let args = match expand_argument_files(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(1);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors exit 1 like Kafka's tools.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // The server prints from its runtime's threads: it must not run under a held stdout lock.
    let command = match cli.command {
        Command::Server(args) => {
            let result = server::run_server(&server::ServerArgs {
                config: args.config,
                overrides: args.overrides,
                test_append_socket: args.test_append_socket,
                ready_banner: None,
            });
            return exit_code(result);
        }
        Command::Dev(args) => {
            let result = dev::run_dev(&dev::DevArgs {
                data_dir: args.data_dir,
                port: args.port,
                overrides: args.overrides,
            });
            return exit_code(result);
        }
        other => other,
    };
    let mut stdout = std::io::stdout().lock();
    let result = match command {
        // Handled above.
        Command::Server(_) | Command::Dev(_) => Ok(1),
        Command::MetadataQuorum(args) => {
            let security = command_security(args.command_config.as_deref());
            let bootstrap = match (args.bootstrap_controller, args.bootstrap_server) {
                (Some(c), _) => Ok(metadata_quorum::Bootstrap::Controller(c)),
                (None, Some(s)) => Ok(metadata_quorum::Bootstrap::Server(s)),
                (None, None) => Err(anyhow::anyhow!(
                    "one of --bootstrap-server or --bootstrap-controller must be specified"
                )),
            };
            let MetadataQuorumCommand::Describe {
                status,
                human_readable,
                ..
            } = args.command;
            let what = if status {
                metadata_quorum::Describe::Status
            } else {
                metadata_quorum::Describe::Replication { human_readable }
            };
            security.and_then(|security| {
                bootstrap
                    .and_then(|b| metadata_quorum::run_describe(&b, &security, what, &mut stdout))
            })
        }
        Command::DumpLog(args) => dump_log::run_dump_log(
            &dump_log::DumpOptions {
                files: args.files,
                cluster_metadata_decoder: args.cluster_metadata_decoder,
                print_data_log: args.print_data_log,
                deep_iteration: args.deep_iteration,
                skip_record_metadata: args.skip_record_metadata,
            },
            &mut stdout,
            &mut std::io::stderr(),
        ),
        Command::MetadataShell(args) => match (args.snapshot, args.directory) {
            (Some(file), _) => Ok(metadata_shell::Source::Snapshot(file)),
            (None, Some(dir)) => Ok(metadata_shell::Source::Directory(dir)),
            (None, None) => Err(anyhow::anyhow!(
                "one of --snapshot or --directory must be specified"
            )),
        }
        .and_then(|source| metadata_shell::run_metadata_shell(&source, &args.command, &mut stdout)),
        Command::Migration { command } => match command {
            MigrationCommand::Preflight {
                zookeeper,
                config,
                broker_config,
            } => migration::run_preflight(
                &migration::PreflightArgs {
                    zookeeper,
                    config,
                    broker_configs: broker_config,
                },
                &mut stdout,
            ),
            MigrationCommand::Status {
                bootstrap_controller,
                zookeeper,
                json,
                command_config,
            } => command_security(command_config.as_deref()).and_then(|security| {
                migration::run_status(
                    &bootstrap_controller,
                    &security,
                    zookeeper.as_deref(),
                    json,
                    &mut stdout,
                )
            }),
            MigrationCommand::Verify {
                zookeeper,
                bootstrap_controller,
                config,
                command_config,
            } => command_security(command_config.as_deref()).and_then(|security| {
                migration::run_verify(
                    &zookeeper,
                    &bootstrap_controller,
                    &security,
                    config.as_ref(),
                    &mut stdout,
                )
            }),
            MigrationCommand::RollbackPlan {
                zookeeper,
                bootstrap_controller,
                command_config,
            } => command_security(command_config.as_deref()).and_then(|security| {
                migration::run_rollback_plan(
                    &zookeeper,
                    bootstrap_controller.as_deref(),
                    &security,
                    &mut stdout,
                )
            }),
        },
        Command::Storage { command } => match command {
            StorageCommand::RandomUuid => storage::run_random_uuid(&mut stdout),
            StorageCommand::Info { config } => storage::run_info(&config, &mut stdout),
            StorageCommand::Format(args) => storage::run_format(
                &storage::FormatArgs {
                    config: args.config,
                    cluster_id: args.cluster_id,
                    release_version: args.release_version,
                    features: args.feature,
                    ignore_formatted: args.ignore_formatted,
                    standalone: args.standalone,
                    initial_controllers: args.initial_controllers,
                    no_initial_controllers: args.no_initial_controllers,
                    add_scram: args.add_scram,
                },
                &mut stdout,
            ),
        },
    };
    let _ = stdout.flush();
    drop(stdout);
    exit_code(result)
}

/// Exit status of a command: its code, or 1 with the error chain on stderr.
/// The security of a tool's connections from its `--command-config` file (PLAINTEXT without
/// one).
fn command_security(
    path: Option<&std::path::Path>,
) -> anyhow::Result<krust_net::security::ClientSecurity> {
    use anyhow::Context as _;
    let Some(path) = path else {
        return Ok(krust_net::security::ClientSecurity::default());
    };
    let settings = krust::config::ServerConfig::load(path)
        .with_context(|| format!("reading --command-config {}", path.display()))?;
    krust::server::security::admin_client_security(&settings)
        .with_context(|| format!("--command-config {}", path.display()))
}

fn exit_code(result: anyhow::Result<i32>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::from(1)
        }
    }
}

/// Largest `@file` read, and how deeply `@file`s may refer to further `@file`s.
const MAX_ARGUMENT_FILE_BYTES: u64 = 1024 * 1024;
const MAX_ARGUMENT_FILE_DEPTH: usize = 8;

/// Replaces each `@path` argument after `storage` with the lines of `path` (recursively).
fn expand_argument_files(args: Vec<std::ffi::OsString>) -> anyhow::Result<Vec<std::ffi::OsString>> {
    let storage_at = args.iter().position(|a| a == "storage");
    let Some(start) = storage_at.map(|i| i + 1) else {
        return Ok(args);
    };
    let mut out: Vec<std::ffi::OsString> = args[..start].to_vec();
    for arg in &args[start..] {
        expand_one(arg.clone(), 0, &mut out)?;
    }
    Ok(out)
}

fn expand_one(
    arg: std::ffi::OsString,
    depth: usize,
    out: &mut Vec<std::ffi::OsString>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let Some(path) = arg.to_str().and_then(|a| a.strip_prefix('@')) else {
        out.push(arg);
        return Ok(());
    };
    anyhow::ensure!(
        depth < MAX_ARGUMENT_FILE_DEPTH,
        "argument files nested more than {MAX_ARGUMENT_FILE_DEPTH} deep at @{path}"
    );
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(MAX_ARGUMENT_FILE_BYTES + 1)
                .read_to_string(&mut text)
        })
        .with_context(|| format!("reading argument file {path}"))?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_ARGUMENT_FILE_BYTES,
        "argument file {path} is larger than {MAX_ARGUMENT_FILE_BYTES} bytes"
    );
    for line in text.lines() {
        expand_one(line.into(), depth + 1, out)?;
    }
    Ok(())
}
