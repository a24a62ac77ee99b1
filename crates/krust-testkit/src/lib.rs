//! krust-testkit: placeholder docs, rewritten below.
mod dist;
mod dump_log;
mod error;
mod kafka;
mod krust;
mod ports;
mod process;

pub use dist::{
    DEFAULT_TOOL_TIMEOUT, JVM_MAX_HEAP, KAFKA_VERSION, KafkaDist, ToolCommand, ToolOutput, class,
    random_kafka_uuid, workspace_root,
};
pub use dump_log::{
    DumpLog, DumpParseError, DumpedBatch, DumpedFile, DumpedRecord, parse_dump_log,
};
pub use error::{HarnessError, Result};
pub use kafka::{
    BROKER_LISTENER, CONTROLLER_LISTENER, DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT,
    KAFKA_STARTED_LINE, KafkaCluster, KafkaClusterBuilder, KafkaNode, KafkaNodeBuilder, KafkaRole,
};
pub use krust::{KrustProcess, KrustProcessBuilder, krust_binary};
pub use ports::{free_port, free_ports, port_accepts, wait_for_port};
pub use process::{LOG_TAIL_LINES, LogMark, ManagedProcess, ProcessSpec, log_tail};
