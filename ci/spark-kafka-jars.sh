#!/usr/bin/env bash
# Resolve Spark's own Kafka source and sink (spark-sql-kafka-0-10) from Maven Central into a cache
# folder, once, for benchmarks/run.py's side-by-side runs (see ci/maven/spark-kafka.pom.xml).
#   ci/spark-kafka-jars.sh      -> prints the folder (TOPICVAULT_SPARK_KAFKA_JARS or the default cache)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${TOPICVAULT_SPARK_KAFKA_JARS:-$HOME/.cache/topicvault/spark-sql-kafka-4.2.0/jars}"
bash "$ROOT/ci/maven-jars.sh" "$ROOT/ci/maven/spark-kafka.pom.xml" "$DEST"
echo "$DEST"
