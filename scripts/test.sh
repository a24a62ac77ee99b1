#!/usr/bin/env bash
# The project's test command (README): installs what the tests need on a fresh machine, then runs
# formatting, lints and every test of the workspace. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Apache Kafka 3.9 from Maven Central (cached; never committed) for the interop tests.
./scripts/fetch-kafka.sh
# Real clients (kcat, confluent-kafka, kafka-python, librdkafka's test-runner) for the clients_*
# tests. Locally a missing client only skips those tests, so a failed install is not fatal here.
if [[ "${CI:-}" == "true" ]]; then
  ./scripts/clients/install.sh
  ./scripts/clients/build-librdkafka-tests.sh >/dev/null
else
  ./scripts/clients/install.sh || echo "scripts/clients/install.sh failed: clients_* tests will skip" >&2
  ./scripts/clients/build-librdkafka-tests.sh >/dev/null || echo "librdkafka test-runner build failed: clients_librdkafka will skip" >&2
fi

export RUST_BACKTRACE=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
