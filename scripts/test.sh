#!/usr/bin/env bash
# The project's test command (README): installs what the tests need on a fresh machine, then runs
# formatting, lints and every test of the workspace. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Java 17 (a JDK: the Kafka Streams test compiles its application) and Maven (to fetch and run
# Apache Kafka 3.9) from the distribution's packages when missing, so that a fresh machine with
# only Rust needs nothing else.
if ! command -v java >/dev/null || ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  if command -v apt-get >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
  else
    echo "scripts/test.sh: install a Java 17 JDK and Maven (no apt-get here to do it)" >&2
    exit 1
  fi
fi
# iproute2's `ip` for the chaos tests' network namespaces (crates/krust/tests/chaos.rs, run as root).
if ! command -v ip >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# Apache Kafka 3.9 from Maven Central (cached; never committed) for the interop tests, and Kafka
# Streams 3.9 with the Streams test's application compiled against it.
./scripts/fetch-kafka.sh
./scripts/fetch-kafka-streams.sh >/dev/null
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
# Every test binary and the doc-tests, two at a time (most tests wait on JVMs, sessions and
# timeouts more than they use a core); scripts/run-tests.py says how.
./scripts/run-tests.py

# Coverage-guided fuzzing (fuzz/README.md): every target for 30 s, two at a time (long runs on
# demand, fuzz/README.md). Needs nightly and cargo-fuzz;
# in CI a failed install is fatal, locally it only skips this step.
install_fuzzing() {
  rustup toolchain install nightly --profile minimal >/dev/null 2>&1 &&
    { command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked; }
}
if rustup run nightly rustc --version >/dev/null 2>&1 && command -v cargo-fuzz >/dev/null; then
  ./scripts/fuzz.sh --jobs 2 30
elif install_fuzzing; then
  ./scripts/fuzz.sh --jobs 2 30
elif [[ "${CI:-}" == "true" ]]; then
  echo "scripts/test.sh: installing nightly + cargo-fuzz failed" >&2
  exit 1
else
  echo "nightly or cargo-fuzz missing and not installable: fuzzing skipped" >&2
fi
