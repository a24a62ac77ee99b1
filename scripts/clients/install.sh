#!/usr/bin/env bash
# Installs the real Kafka clients the `clients_*` tests drive (issue 5/6 acceptance): kcat and
# librdkafka from Debian's packages, the build deps of librdkafka's own test runner, and the
# Python clients (confluent-kafka, kafka-python) in a venv under ~/.cache/krust/venv.
# Idempotent: each step is skipped when what it installs is already there.
set -euo pipefail

CACHE="${KRUST_CACHE:-$HOME/.cache/krust}"
VENV="${KRUST_VENV:-$CACHE/venv}"

# Debian/Ubuntu packages. kcat is called kafkacat on older releases.
apt_pkgs=()
command -v kcat >/dev/null || command -v kafkacat >/dev/null || apt_pkgs+=(kcat)
# rapidjson-dev: librdkafka's test runner checks statistics JSON with it, and tests such as 0098
# (transactions read by a consumer) skip themselves without it.
for pkg in librdkafka-dev build-essential pkg-config zlib1g-dev libssl-dev libzstd-dev liblz4-dev \
  libsasl2-dev rapidjson-dev python3-venv python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt_pkgs+=("$pkg")
done
if ((${#apt_pkgs[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "scripts/clients/install.sh: missing ${apt_pkgs[*]} and no apt-get: install them by hand" >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null; then
    # Ubuntu < 22.04 / Debian < 12 only know kcat as kafkacat.
    apt_pkgs=("${apt_pkgs[@]/#kcat/kafkacat}")
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
  fi
fi

# Python clients in a venv (never the system site-packages).
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# Pinned: the versions the clients_* tests were written and validated against.
want=(confluent-kafka==2.16.1 kafka-python==3.0.12)
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${want[@]}" 2>/dev/null; then
  # kafka-python releases before 2.0.3 do not import on Python >= 3.12 (vendored six); the
  # maintained fork kafka-python-ng is the fallback where the pinned release cannot install.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check confluent-kafka==2.16.1 kafka-python-ng
fi
"$VENV/bin/python" -c 'import confluent_kafka, kafka; print("python clients: confluent-kafka", confluent_kafka.version(), "librdkafka", confluent_kafka.libversion()[0], "kafka-python", kafka.__version__)'
