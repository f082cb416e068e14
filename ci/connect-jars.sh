#!/usr/bin/env bash
# Resolve Kafka Connect's jars and the Aiven S3 sink's plugin folder (Maven Central), once, and
# build the plugin's harness classes (tests/connect/aiven) against them.
#   ci/connect-jars.sh      -> prints the Connect jars folder, then the plugin.path folder
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TOPICVAULT_CONNECT_CACHE:-$HOME/.cache/topicvault}"
JARS="$CACHE/connect-4.4.0/jars"
PLUGINS="$CACHE/connect-plugins"
AIVEN="$PLUGINS/aiven-s3-sink-2.15.0"
bash "$ROOT/ci/maven-jars.sh" "$ROOT/ci/maven/connect.pom.xml" "$JARS"
bash "$ROOT/ci/maven-jars.sh" "$ROOT/ci/maven/aiven-sink.pom.xml" "$AIVEN"

SOURCES="$ROOT/tests/connect/aiven"
BUILT="$AIVEN/.built-$(cd "$SOURCES" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)"
if [ ! -f "$BUILT" ]; then
    if ! command -v javac >/dev/null 2>&1; then
        echo "connect-jars: installing a JDK (javac builds the Aiven harness classes)" >&2
        if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >&2
        else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >&2; fi
    fi
    BUILD="$(mktemp -d)"
    trap 'rm -rf "$BUILD"' EXIT
    javac --release 17 -nowarn -d "$BUILD" -cp "$JARS/*:$AIVEN/*" "$SOURCES"/topicvault/harness/*.java >&2
    cp -r "$SOURCES/META-INF" "$BUILD/"
    (cd "$BUILD" && jar cf "$AIVEN/topicvault-aiven-harness.jar" .)
    rm -f "$AIVEN"/.built-* && touch "$BUILT"
fi
echo "$JARS"
echo "$PLUGINS"
