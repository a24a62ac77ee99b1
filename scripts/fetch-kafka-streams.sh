#!/usr/bin/env bash
# Resolves Kafka Streams 3.9 (kafka-streams and its dependencies) from Maven Central into a cache
# folder and compiles scripts/kafka-streams/StreamsEosApp.java against it (needs a JDK's javac):
# ${KRUST_KAFKA_STREAMS_HOME:-$HOME/.cache/krust/kafka-streams-<version>}/{libs,classes-<source sha>}.
# Prints the folder. Nothing here is committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka-streams/pom.xml")"
home="${KRUST_KAFKA_STREAMS_HOME:-$HOME/.cache/krust/kafka-streams-$version}"
source="$here/kafka-streams/StreamsEosApp.java"
sha="$(sha256sum "$source" | cut -c1-16)"
mkdir -p "$home"
# One fetch at a time per cache folder (several test runs may start on a fresh machine).
exec 9>"$home.lock"
command -v flock >/dev/null && flock 9
if [[ ! -f "$home/.complete" ]]; then
  command -v mvn >/dev/null || { echo "fetch-kafka-streams: mvn is required (apt-get install maven)" >&2; exit 1; }
  rm -rf "$home/libs.tmp"
  mvn -q -B -f "$here/kafka-streams/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$home/libs.tmp" -DincludeScope=runtime -Dstyle.color=never >&2
  rm -rf "$home/libs" && mv "$home/libs.tmp" "$home/libs"
  touch "$home/.complete"
fi
if [[ ! -f "$home/classes-$sha/StreamsEosApp.class" ]]; then
  command -v javac >/dev/null || { echo "fetch-kafka-streams: javac is required (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
  rm -rf "$home/classes.tmp"
  mkdir -p "$home/classes.tmp"
  javac -nowarn -d "$home/classes.tmp" -cp "$home/libs/*" "$source" >&2
  rm -rf "$home/classes-$sha" && mv "$home/classes.tmp" "$home/classes-$sha"
fi
echo "$home/classes-$sha"
