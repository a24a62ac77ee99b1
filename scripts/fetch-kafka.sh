#!/usr/bin/env bash
# Resolves Apache Kafka 3.9 (broker, tools and their dependencies) from Maven Central into a cache
# folder, reused across runs: ${KRUST_KAFKA_HOME:-$HOME/.cache/krust/kafka-<version>}/libs.
# Prints the folder. Nothing here is committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka/pom.xml")"
home="${KRUST_KAFKA_HOME:-$HOME/.cache/krust/kafka-$version}"
if [[ ! -f "$home/.complete" ]]; then
  # One fetch at a time per cache folder (several test runs may start on a fresh machine).
  mkdir -p "$(dirname "$home")"
  exec 9>"$home.lock"
  command -v flock >/dev/null && flock 9
fi
if [[ ! -f "$home/.complete" ]]; then
  command -v java >/dev/null || { echo "fetch-kafka: java is required (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
  command -v mvn >/dev/null || { echo "fetch-kafka: mvn is required (apt-get install maven)" >&2; exit 1; }
  rm -rf "$home/libs.tmp"
  mkdir -p "$home"
  mvn -q -B -f "$here/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$home/libs.tmp" -DincludeScope=runtime >&2
  cp "$here/kafka/log4j.properties" "$home/log4j.properties"
  rm -rf "$home/libs" && mv "$home/libs.tmp" "$home/libs"
  touch "$home/.complete"
fi
echo "$home"
