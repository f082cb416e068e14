#!/usr/bin/env bash
# Resolve a POM's runtime jars from Maven Central into a cache folder, once per POM content.
#   ci/maven-jars.sh POM DEST   (installs maven when missing; prints nothing)
set -euo pipefail
POM="$1"
DEST="$2"
STAMP="$DEST/.resolved-$(sha256sum "$POM" | cut -c1-16)"
[ -f "$STAMP" ] && exit 0
if ! command -v mvn >/dev/null 2>&1; then
    echo "maven-jars: installing maven" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
    else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; fi
fi
echo "maven-jars: resolving $(basename "$POM") into $DEST" >&2
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$DEST.tmp" >&2
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
touch "$STAMP"
