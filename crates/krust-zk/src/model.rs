//! Kafka's znode model (owned by the model work; see the crate doc).
