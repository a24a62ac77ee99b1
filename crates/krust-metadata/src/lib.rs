//! krust-metadata: see ARCHITECTURE.md.
