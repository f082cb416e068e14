#!/usr/bin/env bash
# Resolve Apicurio Registry (Apache 2.0, a Confluent-compatible schema registry) from Maven Central
# into the cache folder and unpack it once, for the schema-registry tests (issue #52).
#   ci/apicurio.sh   -> prints the unpacked folder (holds quarkus-run.jar)
set -euo pipefail
VERSION=3.3.3
DEST="${TOPICVAULT_APICURIO:-$HOME/.cache/topicvault/apicurio-registry-$VERSION}"
if [ ! -f "$DEST/.unpacked" ]; then
    if ! command -v mvn >/dev/null 2>&1; then
        echo "apicurio: installing maven" >&2
        if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
        else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; fi
    fi
    echo "apicurio: resolving apicurio-registry-app $VERSION into $DEST" >&2
    rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
    mvn -q -B -Dstyle.color=never dependency:copy \
        -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" \
        -DoutputDirectory="$DEST.tmp" >&2
    tar -xzf "$DEST.tmp"/apicurio-registry-app-*.tar.gz -C "$DEST.tmp"
    rm -f "$DEST.tmp"/apicurio-registry-app-*.tar.gz
    # The tarball holds one top folder (or the files directly): keep the folder with quarkus-run.jar.
    RUN_JAR="$(find "$DEST.tmp" -name quarkus-run.jar -print -quit)"
    [ -n "$RUN_JAR" ] || { echo "apicurio: no quarkus-run.jar in the tarball" >&2; exit 1; }
    rm -rf "$DEST" && mv "$(dirname "$RUN_JAR")" "$DEST" && rm -rf "$DEST.tmp"
    touch "$DEST/.unpacked"
fi
echo "$DEST"
