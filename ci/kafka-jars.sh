#!/usr/bin/env bash
# Resolve Apache Kafka's jars (tests, benchmarks, sandbox) from Maven Central into a cache folder, once.
#   ci/kafka-jars.sh            -> prints the folder (TOPICVAULT_KAFKA_JARS or the default cache)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${TOPICVAULT_KAFKA_JARS:-$HOME/.cache/topicvault/kafka-4.4.0/jars}"
bash "$ROOT/ci/maven-jars.sh" "$ROOT/ci/maven/kafka.pom.xml" "$DEST"
echo "$DEST"
