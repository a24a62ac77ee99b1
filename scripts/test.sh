#!/usr/bin/env bash
# The project's test command (README): installs what the tests need on a fresh machine, then runs
# formatting, lints and every test of the workspace. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Apache Kafka 3.9 from Maven Central (cached; never committed) for the interop tests.
./scripts/fetch-kafka.sh

export RUST_BACKTRACE=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
