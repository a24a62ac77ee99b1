//! Filled in by its owner (see `server/mod.rs`).
