#!/usr/bin/env bash
# Create .venv and install topicvault with its test extras; install Java when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@"
}

if ! command -v java >/dev/null 2>&1; then
    echo "setup: no java on PATH; installing openjdk-17-jre-headless"
    apt_install openjdk-17-jre-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
    echo "setup: no mvn on PATH; installing maven (Apache Kafka's jars come from Maven Central)"
    apt_install maven
fi

if [ ! -x .venv/bin/python ]; then
    python=$(command -v python3.11 || command -v python3)
    echo "setup: creating .venv with $python"
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,dev]'
# The native record loop (issue #51.2): librdkafka's header from Debian, one C file; seconds.
bash ci/native.sh .venv/bin/python
# Apache Kafka's jars for the tests, benchmarks and sandbox (Maven Central, cached).
bash ci/kafka-jars.sh >/dev/null
# Spark's own Kafka source and sink, which benchmarks/run.py compares topicvault with (cached).
bash ci/spark-kafka-jars.sh >/dev/null
# Kafka Connect and the Aiven S3 sink's plugin folder, for the real-peer tests (cached).
bash ci/connect-jars.sh >/dev/null
# Apicurio Registry, the real schema registry of the schema-registry tests (Maven Central, cached).
# It needs Java 21 or newer: the machines ship a Temurin JDK 25 beside the default Java 17.
bash ci/apicurio.sh >/dev/null
if ! ls -d /usr/lib/jvm/*2[1-9]* /usr/lib/jvm/*[3-9][0-9]* >/dev/null 2>&1 && [ -z "${TOPICVAULT_JAVA21_HOME:-}" ]; then
    echo "setup: warning: no Java 21 or newer under /usr/lib/jvm: the schema-registry tests need one" \
         "(set TOPICVAULT_JAVA21_HOME)" >&2
fi
echo "setup: .venv ready ($(.venv/bin/python --version))"
