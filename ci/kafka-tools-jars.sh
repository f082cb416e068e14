#!/usr/bin/env bash
# Resolve Kafka's performance clients (kafka-tools 4.4.0: ConsumerPerformance, ProducerPerformance)
# for benchmarks/run.py from Maven Central into a cache folder, once.
#   ci/kafka-tools-jars.sh      -> prints the folder (TOPICVAULT_KAFKA_TOOLS_JARS or the default cache)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${TOPICVAULT_KAFKA_TOOLS_JARS:-$HOME/.cache/topicvault/kafka-tools-4.4.0/jars}"
bash "$ROOT/ci/maven-jars.sh" "$ROOT/ci/maven/kafka-tools.pom.xml" "$DEST"
echo "$DEST"
