//! krust-log: Kafka's segmented on-disk log, byte-compatible with Apache Kafka 3.9.
//!
//! # Layout
//!
//! - [`batch`]: the v2 record batch codec (CRC-32C, records, builder, reader over a buffer).
//! - [`varint`]: zig-zag varints used inside records.
pub mod batch;
pub mod varint;

pub use batch::{
    BatchError, BatchReader, Compression, Header, Record, RecordBatch, RecordBatchBuilder,
    TimestampType,
};
