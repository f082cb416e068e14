#!/usr/bin/env bash
# Build the native record loops (sink/_kafka_arrow*.c, issue #51.2) in place, for the given Python
# (default .venv/bin/python). It needs a C compiler and librdkafka's header (Debian's
# librdkafka-dev, pinned); it links against no librdkafka: at run time it uses the one
# confluent-kafka ships (see sink/native_reader.py). Skipped when the module is newer than its
# source. A failed build is one line: topicvault then reads through confluent-kafka.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
LIBRDKAFKA_DEV=librdkafka-dev=2.0.2-1

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
target=sink/_kafka_arrow$suffix
sources=(sink/_kafka_arrow.c sink/_kafka_arrow_writer.c)
fresh=1
for file in "${sources[@]}" sink/_kafka_arrow.h ci/native.sh; do
    [ -f "$target" ] && [ "$target" -nt "$file" ] || fresh=0
done
if [ "$fresh" = 1 ]; then
    exit 0
fi
if ! command -v cc >/dev/null 2>&1; then
    echo "setup: no C compiler; installing gcc"
    apt_install gcc libc6-dev
fi
if [ ! -f /usr/include/librdkafka/rdkafka.h ]; then
    echo "setup: no librdkafka header; installing $LIBRDKAFKA_DEV"
    apt_install "$LIBRDKAFKA_DEV" || apt_install librdkafka-dev || true
fi
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
start=$(date +%s%N)
if cc -O2 -Wall -shared -fPIC -I"$include" "${sources[@]}" -o "$target.tmp" 2>/tmp/topicvault-native-build.log; then
    mv "$target.tmp" "$target"
    echo "setup: built $target in $(( ($(date +%s%N) - start) / 1000000 )) ms"
else
    rm -f "$target.tmp"
    echo "setup: native Kafka module not built (see /tmp/topicvault-native-build.log): records go through confluent-kafka"
fi
