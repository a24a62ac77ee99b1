//! krust-raft: see ARCHITECTURE.md.
pub mod snapshot;
