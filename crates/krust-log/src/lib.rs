//! krust-log: see ARCHITECTURE.md.
