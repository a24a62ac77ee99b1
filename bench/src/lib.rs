//! Shared helpers for the benchmarks in `src/bin/`.
