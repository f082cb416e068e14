#!/usr/bin/env bash
# Build the Apache Kafka test image with no registry: a root filesystem holding the host's Java
# runtime and exactly the shared libraries it loads, /bin/sh, the Kafka jars ci/kafka-jars.sh
# resolved and ci/kafka-image/ (config, start script), imported by podman. Cached: rebuilt only
# when one of those inputs changed (their digest is the image's label).
#   ci/kafka-image.sh   -> prints the image name (build output on stderr)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${TOPICVAULT_KAFKA_IMAGE:-localhost/topicvault-kafka:4.4.0}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/ci/containers.conf}"
JARS="$(bash "$ROOT/ci/kafka-jars.sh")"
JAVA_DIR="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
LABEL=topicvault.inputs

inputs="$( { "$JAVA_DIR/bin/java" -version 2>&1; ls "$JARS"; cat "${BASH_SOURCE[0]}" "$ROOT"/ci/kafka-image/*; } \
    | sha256sum | cut -c1-16)"
built="$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true)"
old_id="$(podman image inspect --format "{{.Id}}" "$IMAGE" 2>/dev/null || true)"
if [ "$built" = "$inputs" ]; then
    echo "$IMAGE"
    exit 0
fi

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
root="$staging/root"
mkdir -p "$root"/{bin,etc,root,tmp,opt/java,opt/kafka/libs,var/lib/kafka}
chmod 1777 "$root/tmp"

# The runtime, its links into /etc/java-17-openjdk resolved; left out: sources, the desktop's
# libraries (X11, fonts, sound, images: they would pull in half a desktop) and the trust store
# (the broker speaks PLAINTEXT).
tar -C "$JAVA_DIR" -chf - \
    --exclude=lib/src.zip --exclude=lib/ct.sym --exclude=lib/classes_nocoops.jsa --exclude=lib/security/cacerts \
    --exclude='libatk-wrapper.so' --exclude='libawt*.so' --exclude='libjawt.so' --exclude='libsplashscreen.so' \
    --exclude='libfontmanager.so' --exclude='libjsound.so' --exclude='liblcms.so' --exclude='libjavajpeg.so' \
    --exclude='libmlib_image.so' --exclude='libj2pcsc.so' --exclude='libsaproc.so' \
    bin/java lib conf release | tar -C "$root/opt/java" -xf -
cp /bin/sh "$root/bin/sh"

# The jars' own native libraries (zstd, snappy, lz4), which the broker loads to (de)compress.
python3 - "$JARS" "$staging/native" <<'PY'
import pathlib, sys, zipfile
jars, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for jar in jars.glob("*.jar"):
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if name.endswith(".so") and "linux" in name.lower():
                archive.extract(name, out / jar.stem)
PY
# Exactly the shared libraries all those load (ldd), at the paths the loader looks for them.
find "$root/opt/java" "$root/bin" "$staging/native" -type f \( -name '*.so' -o -path '*/bin/*' \) | while read -r file; do
    ldd "$file" 2>/dev/null || true  # another architecture's library: not ours to load
done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u | while read -r lib; do
    case "$lib" in "$root"/*|"$JAVA_DIR"/*) continue ;; esac
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done

printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
cp "$JARS"/*.jar "$root/opt/kafka/libs/"
cp "$ROOT"/ci/kafka-image/* "$root/opt/kafka/"

tar -C "$root" -cf - . | podman import --change "LABEL $LABEL=$inputs" - "$IMAGE" >&2
# The image this one replaces (untagged now), unless a container still uses it.
[ -n "$old_id" ] && podman rmi "$old_id" >/dev/null 2>&1 || true
echo "$IMAGE"
