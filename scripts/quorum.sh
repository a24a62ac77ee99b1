#!/usr/bin/env bash
# Builds krust and runs a local cluster on 127.0.0.1: 3 controllers (9093-9095) and 2 brokers
# (9092, 9192), each a `krust server` with its own server.properties under ./krust-cluster/nodeN.
# Storage is formatted on first use; Ctrl-C stops every node (brokers first, controlled shutdown).
# For a one-node cluster use `krust dev` instead. Inspect it from another shell with:
#   target/release/krust metadata-quorum --bootstrap-controller 127.0.0.1:9093 describe --replication
#   kcat -b 127.0.0.1:9092 -L
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p krust
krust=$PWD/target/release/krust
root=./krust-cluster
voters=1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095
mkdir -p "$root"
if [[ ! -f $root/cluster.id ]]; then
  "$krust" storage random-uuid > "$root/cluster.id"
fi
write_controller() { # id port
  mkdir -p "$root/node$1"
  cat > "$root/node$1/server.properties" <<PROPS
process.roles=controller
node.id=$1
controller.quorum.voters=$voters
listeners=CONTROLLER://127.0.0.1:$2
controller.listener.names=CONTROLLER
log.dirs=$root/node$1/data
PROPS
}
write_broker() { # id port
  mkdir -p "$root/node$1"
  cat > "$root/node$1/server.properties" <<PROPS
process.roles=broker
node.id=$1
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$2
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$root/node$1/logs
default.replication.factor=2
offsets.topic.replication.factor=2
PROPS
}
write_controller 1 9093
write_controller 2 9094
write_controller 3 9095
write_broker 4 9092
write_broker 5 9192
pids=()
stop() {
  # Brokers first (controlled shutdown needs the controllers), then the controllers.
  for i in 4 3; do
    [[ ${pids[$i]:-} ]] && kill -TERM "${pids[$i]}" 2>/dev/null || true
  done
  wait "${pids[4]:-}" "${pids[3]:-}" 2>/dev/null || true
  for i in 2 1 0; do
    [[ ${pids[$i]:-} ]] && kill -TERM "${pids[$i]}" 2>/dev/null || true
  done
  wait
}
trap stop EXIT INT TERM
for id in 1 2 3 4 5; do
  props=$root/node$id/server.properties
  "$krust" storage format --ignore-formatted -t "$(cat "$root/cluster.id")" -c "$props" > /dev/null
  # setsid: Ctrl-C reaches only this script, which then stops the nodes in order.
  setsid "$krust" server "$props" > "$root/node$id/server.log" 2>&1 &
  pids+=($!)
done
echo "krust cluster: controllers 127.0.0.1:9093-9095, brokers 127.0.0.1:9092,127.0.0.1:9192; logs in $root/node*/server.log; Ctrl-C stops it"
wait
