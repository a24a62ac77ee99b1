#!/usr/bin/env bash
# Builds librdkafka and its own test suite's `tests/test-runner` from the librdkafka source that
# ships inside the `rdkafka-sys` crate (crates.io), cached under ~/.cache/krust/librdkafka-<ver>.
# Prints the path of the built `tests` folder (where `test-runner` and `run-test.sh` live).
#
# How: a throwaway cargo project depending on rdkafka-sys, `cargo fetch` (downloads the crate
# source only, nothing is compiled), then a copy of its `librdkafka/` folder is configured
# without optional downloads (`--install-deps` is never used) and built with make.
# Idempotent: a `.complete` marker skips everything on a second run.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KRUST_CACHE:-$HOME/.cache/krust}"
# Pinned, so CI always builds the same test suite that tests/librdkafka/broker-tests.txt names.
RDKAFKA_SYS_VERSION="${RDKAFKA_SYS_VERSION:-=4.10.0}"
probe="$CACHE/rdkafka-sys-probe"
mkdir -p "$probe/src" "$CACHE"
exec 9>"$CACHE/librdkafka-build.lock"
command -v flock >/dev/null && flock 9

cat >"$probe/Cargo.toml" <<TOML
[package]
name = "rdkafka-sys-probe"
version = "0.0.0"
edition = "2021"
publish = false
[workspace]
[dependencies]
rdkafka-sys = { version = "$RDKAFKA_SYS_VERSION", default-features = false }
TOML
[ -f "$probe/src/lib.rs" ] || : >"$probe/src/lib.rs"
# cargo fetch downloads the crate into ~/.cargo/registry/src (unpacking happens on metadata).
(cd "$probe" && cargo fetch -q && cargo metadata -q --format-version 1 >"$probe/metadata.json")
src_dir="$(python3 - "$probe/metadata.json" <<'PY'
import json, os, sys
meta = json.load(open(sys.argv[1]))
for pkg in meta["packages"]:
    if pkg["name"] == "rdkafka-sys":
        print(os.path.join(os.path.dirname(pkg["manifest_path"]), "librdkafka"))
        break
PY
)"
if [ ! -f "$src_dir/configure" ]; then
  echo "build-librdkafka-tests: no librdkafka source at $src_dir" >&2
  exit 1
fi
version="$(sed -n 's/^#define RD_KAFKA_VERSION *0x\(..\)\(..\)\(..\).*/\1 \2 \3/p' "$src_dir/src/rdkafka.h" \
  | { read -r a b c; printf '%d.%d.%d' "0x$a" "0x$b" "0x$c"; })"
home="$CACHE/librdkafka-$version"
# A runner built before rapidjson-dev was installed lacks the tests that need it: build again.
if [ -f "$home/.complete" ] && [ -f /usr/include/rapidjson/schema.h ] \
  && grep -q '^WITH_RAPIDJSON=[[:space:]]*n' "$home/Makefile.config" 2>/dev/null; then
  rm -f "$home/.complete"
fi
if [ ! -f "$home/.complete" ]; then
  rm -rf "$home"
  cp -r "$src_dir" "$home"
  chmod -R u+w "$home"
  cd "$home"
  # No optional downloads (this machine reaches package registries only); the system's zlib,
  # zstd, lz4, openssl and sasl (scripts/clients/install.sh) are used.
  ./configure --disable-debug-symbols --enable-zstd --enable-lz4-ext --enable-ssl --enable-gssapi \
    --disable-curl >"$home/build-configure.log" 2>&1 || { tail -30 "$home/build-configure.log" >&2; exit 1; }
  jobs="$(nproc 2>/dev/null || echo 2)"
  make -j"$jobs" -C src >"$home/make-src.log" 2>&1 || { tail -30 "$home/make-src.log" >&2; exit 1; }
  make -j"$jobs" -C src-cpp >"$home/make-src-cpp.log" 2>&1 || { tail -30 "$home/make-src-cpp.log" >&2; exit 1; }
  make -j"$jobs" -C tests build >"$home/make-tests.log" 2>&1 || { tail -30 "$home/make-tests.log" >&2; exit 1; }
  touch "$home/.complete"
fi
# The Java helpers some tests run through tests/java/run-class.sh (0098's
# TransactionProducerCli), compiled against Kafka's client jar (scripts/fetch-kafka.sh) with the
# JDK's javac; the runner's own `make java` then has nothing left to do.
if command -v javac >/dev/null && [ ! -f "$home/tests/java/TransactionProducerCli.class" ]; then
  kafka_home="$("$here/../fetch-kafka.sh")"
  make -s -C "$home/tests/java" KAFKA_PATH="$kafka_home" >"$home/make-java.log" 2>&1 \
    || { tail -30 "$home/make-java.log" >&2; exit 1; }
fi
echo "$home/tests"
