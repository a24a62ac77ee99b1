//! krust-raft: see ARCHITECTURE.md.
