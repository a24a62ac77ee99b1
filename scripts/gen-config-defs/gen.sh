#!/usr/bin/env bash
# Regenerates crates/krust-config/src/defs.rs from Kafka 3.9.1's jars
# (scripts/fetch-kafka.sh caches them). Needs a JDK 11+ (single-file source launch).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
libs="${KAFKA_LIBS:-$HOME/.cache/krust/kafka-3.9.1/libs}"
out="$root/crates/krust-config/src/defs.rs"
java -cp "$libs/*" "$here/GenConfigDefs.java" > "$out.tmp"
mv "$out.tmp" "$out"
rustfmt --edition 2024 "$out" 2>/dev/null || true
echo "wrote $out"
