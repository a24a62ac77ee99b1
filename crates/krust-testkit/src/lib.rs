//! krust-testkit: see ARCHITECTURE.md.
