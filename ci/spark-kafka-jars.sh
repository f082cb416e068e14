#!/usr/bin/env bash
# Resolve Spark's own Kafka source and sink (spark-sql-kafka-0-10) from Maven Central into a cache
# folder, once, for benchmarks/run.py's side-by-side runs (see ci/maven/spark-kafka.pom.xml).
#   ci/spark-kafka-jars.sh      -> prints the folder (TOPICVAULT_SPARK_KAFKA_JARS or the default cache)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=4.2.0
DEST="${TOPICVAULT_SPARK_KAFKA_JARS:-$HOME/.cache/topicvault/spark-sql-kafka-$VERSION/jars}"
POM="$ROOT/ci/maven/spark-kafka.pom.xml"
STAMP="$DEST/.resolved-$(sha256sum "$POM" | cut -c1-16)"

if [ ! -f "$STAMP" ]; then
    if ! command -v mvn >/dev/null 2>&1; then
        echo "spark-kafka-jars: installing maven" >&2
        if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
        else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; fi
    fi
    echo "spark-kafka-jars: resolving spark-sql-kafka-0-10 $VERSION into $DEST" >&2
    rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
    mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$DEST.tmp" >&2
    rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
    touch "$STAMP"
fi
echo "$DEST"
