#!/usr/bin/env bash
# Builds krust, formats ./krust-data on first use and runs a single-node KRaft controller quorum on
# 127.0.0.1:9093 (config/controller.properties). Until the broker lands this is the most useful
# thing krust runs; inspect it from another shell with:
#   target/release/krust metadata-quorum --bootstrap-controller 127.0.0.1:9093 describe --status
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p krust
krust=target/release/krust
config=${1:-config/controller.properties}
if [[ ! -f ./krust-data/cluster.id ]]; then
  mkdir -p ./krust-data
  "$krust" storage random-uuid > ./krust-data/cluster.id
fi
"$krust" storage format --ignore-formatted -t "$(cat ./krust-data/cluster.id)" -c "$config"
exec "$krust" server "$config"
