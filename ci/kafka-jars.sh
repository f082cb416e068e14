#!/usr/bin/env bash
# Resolve Apache Kafka's jars from Maven Central into a cache folder, once.
#   ci/kafka-jars.sh            -> prints the folder (TOPICVAULT_KAFKA_JARS or the default cache)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=4.4.0
DEST="${TOPICVAULT_KAFKA_JARS:-$HOME/.cache/topicvault/kafka-$VERSION/jars}"
POM="$ROOT/ci/maven/kafka.pom.xml"
STAMP="$DEST/.resolved-$(sha256sum "$POM" | cut -c1-16)"

if [ ! -f "$STAMP" ]; then
    if ! command -v mvn >/dev/null 2>&1; then
        echo "kafka-jars: installing maven" >&2
        if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
        else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; fi
    fi
    echo "kafka-jars: resolving Apache Kafka $VERSION into $DEST" >&2
    rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
    mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$DEST.tmp" >&2
    # Kafka's own slf4j-api 1.7 next to 2.0 would win on the classpath by name order: keep 2.x only.
    rm -f "$DEST.tmp"/slf4j-api-1.*.jar
    rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
    touch "$DEST/.resolved-$(sha256sum "$POM" | cut -c1-16)"
fi
echo "$DEST"
