"""Broker fixture: Apache Kafka by default, an external cluster, or the embedded broker on request.

- default: a one-node Apache Kafka (KRaft JVM, `core.local.local_kafka`) per test worker, from the jars
  `ci/kafka-jars.sh` resolved;
- `TOPICVAULT_TEST_BOOTSTRAP=host:port`: a cluster of the user's own;
- `TOPICVAULT_TEST_BROKER=embedded`: tansu, in a container built locally from its binary
  (testcontainers through podman's Docker-compatible socket, DOCKER_HOST), else as a process.

`start_kafka_container` runs Apache Kafka in a container too (the image ci/kafka-image.sh builds),
for the test of the container path itself.
"""

from __future__ import annotations

import functools
import os
import uuid
import warnings
from pathlib import Path

import pytest
from kafkatools import create_topic
from topicvault.core.cluster.cluster_admin import broker_configs, lifted_timestamp_limits, retention_from_broker_configs
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.local.embedded_broker import EmbeddedBroker, free_port, wait_for_broker
from topicvault.core.local.local_kafka import KAFKA_VERSION, LocalKafka

# Both images are built locally by ci/broker-engine.sh (no registry is reachable): tansu from its
# binary, Apache Kafka by ci/kafka-image.sh from the host's Java runtime and the cached jars.
BROKER_IMAGE = "localhost/topicvault-broker:tansu"
KAFKA_IMAGE = os.environ.get("TOPICVAULT_KAFKA_IMAGE") or f"localhost/topicvault-kafka:{KAFKA_VERSION}"
_broker_kind = {"kind": "not started", "detail": ""}


def start_tansu_container(log_dir: Path | None = None):
    """The embedded broker (tansu) in a container: (container, bootstrap)."""
    return _start_broker_container(BROKER_IMAGE, lambda port: (
        f"/tansu broker --listener-url tcp://0.0.0.0:9092 --advertised-listener-url tcp://127.0.0.1:{port} "
        "--storage-engine memory://tansu/"), 60.0, log_dir)


def start_kafka_container(log_dir: Path | None = None):
    """A one-node Apache Kafka (KRaft) in a container: (container, bootstrap). Its log goes to
    `log_dir`/container.log when it is stopped with `stop_container`."""
    # A JVM formatting its storage and then starting, on two loaded cores: ~4 s idle, far more busy.
    return _start_broker_container(KAFKA_IMAGE, lambda port: f"/opt/kafka/start-kafka 127.0.0.1:{port}",
                                   90.0, log_dir)


def _start_broker_container(image: str, command, timeout_s: float, log_dir: Path | None):
    """Start `image` running `command(host_port)` with its port 9092 on a free loopback port, and
    wait until the broker in it answers; a broker that does not is stopped (its log kept)."""
    from testcontainers.core.container import DockerContainer

    port = free_port()
    # Kafka clients must be told the host-side port: the broker advertises it. The name finds a
    # container whose start failed half-way (created, never started) to remove it.
    # The prefix is the run's (ci/broker-engine.sh), so its stop removes only this run's leftovers.
    name = f"{os.environ.get('TOPICVAULT_CONTAINER_PREFIX', 'topicvault-test-')}{uuid.uuid4().hex[:12]}"
    container = DockerContainer(image).with_name(name).with_command(command(port)).with_bind_ports(9092, port)
    try:
        container.start()
    except BaseException:
        _remove_named(container, name)
        raise
    servers = f"127.0.0.1:{port}"
    try:
        wait_for_broker(servers, timeout_s, log_dir / "container.log" if log_dir else None)
    except BaseException:
        stop_container(container, log_dir)
        raise
    return container, servers


def _remove_named(container, name: str) -> None:
    try:
        container.get_docker_client().client.containers.get(name).remove(force=True, v=True)
    except Exception:  # never created: nothing to remove
        pass


def stop_container(container, log_dir: Path | None = None) -> None:
    """Stop and remove a broker container, its output saved to `log_dir`/container.log first (the
    container's log lives in podman's storage and goes with the container, never to our output)."""
    try:
        if log_dir is not None:
            stdout, stderr = container.get_logs()
            (log_dir / "container.log").write_bytes(stdout + stderr)
    except Exception:  # a log that cannot be read must not keep the container running
        pass
    finally:
        container.stop()


# The broker kinds that are not Apache Kafka (tests of Kafka-only behaviour xfail on them).
TANSU_KINDS = ("testcontainers", "embedded")


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory):
    """Bootstrap servers of the test broker."""
    external = os.environ.get("TOPICVAULT_TEST_BOOTSTRAP")
    if external:
        _broker_kind.update(kind="external", detail=external)
        # The test data is dated 2023: a cluster's time retention (7 days by default) would delete it
        # mid-test, also from the topics restores create, which end with the cluster's default.
        retention = retention_from_broker_configs(broker_configs(KafkaSettings.of(external)) or {})
        if retention is not None and retention >= 0:
            pytest.exit(f"TOPICVAULT_TEST_BOOTSTRAP={external}: the cluster deletes records older than "
                        f"{retention} ms, and the tests' are from 2023: set log.retention.ms=-1 on it", returncode=4)
        yield external
        return
    if os.environ.get("TOPICVAULT_TEST_BROKER", "apache-kafka") == "apache-kafka":
        with LocalKafka(nodes=1, folder=tmp_path_factory.mktemp("kafka")) as kafka:
            _broker_kind.update(kind="apache-kafka", detail=f"{kafka.bootstrap}, logs in {kafka.folder}")
            yield kafka.bootstrap
        return
    yield from _tansu()


def _tansu():
    """The embedded broker: in a container when podman answers, else as a process (said loudly)."""
    try:
        container, servers = start_tansu_container()
    except Exception as exc:  # no container engine here: fall back, loudly
        reason = f"{type(exc).__name__}: {str(exc)[:300]}"
        _broker_kind.update(kind="embedded", detail=f"container path skipped ({reason})")
        warnings.warn(f"NO CONTAINER ENGINE: testcontainers broker could not start ({reason}); "
                      "using the embedded tansu process instead", stacklevel=1)
        with EmbeddedBroker() as broker:
            yield broker.bootstrap
        return
    _broker_kind.update(kind="testcontainers", detail=BROKER_IMAGE)
    try:
        yield servers
    finally:
        stop_container(container)


@pytest.fixture(scope="session")
def broker_kind(bootstrap) -> str:
    """Which broker the suite runs on: apache-kafka, external, testcontainers or embedded."""
    return _broker_kind["kind"]


@pytest.fixture
def topic_factory(bootstrap):
    """Create uniquely named topics: topic_factory(partitions, prefix='t', config=None) -> name."""
    # On real Kafka the tests' topics take what tansu takes: records up to 8 MiB (Kafka's default
    # limit is 1 MiB) and any timestamp (Kafka 4.0 refuses those over an hour ahead by default;
    # the test data has records of 2100). tansu describes no broker configs and enforces neither.
    like_tansu = _like_tansu(bootstrap)

    def make(partitions: int, prefix: str = "t", config: dict | None = None) -> str:
        return create_topic(bootstrap, f"{prefix}-{uuid.uuid4().hex[:8]}", partitions, {**like_tansu, **(config or {})})

    return make


@functools.cache
def _like_tansu(bootstrap: str) -> dict[str, str]:
    """Topic configs that let a real Kafka cluster take the tests' records as tansu takes them
    (none for tansu, which describes no broker configs)."""
    on_real_kafka = broker_configs(KafkaSettings.of(bootstrap)) or {}
    return {**lifted_timestamp_limits(on_real_kafka), "max.message.bytes": str(8 * 2**20)} if on_real_kafka else {}


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand which broker it ran on to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["broker_kind"] = dict(_broker_kind)


def register_broker_kind_reporting(config) -> None:
    """Called from conftest's pytest_configure: under pytest-xdist, gather the workers' broker kinds."""
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerBrokerKinds(), "topicvault-broker-kinds")


class _WorkerBrokerKinds:
    """Under pytest-xdist the fixtures run in workers: gather what each says (controller side)."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        reported = getattr(node, "workeroutput", {}).get("broker_kind")
        if reported and reported["kind"] != "not started" and _broker_kind["kind"] in ("not started", reported["kind"]):
            _broker_kind.update(reported)
        elif reported and reported["kind"] != "not started":
            _broker_kind.update(kind="mixed", detail=f"{_broker_kind['kind']} and {reported['kind']}")


def pytest_terminal_summary(terminalreporter):
    """Say which broker the suite ran on."""
    kind, detail = _broker_kind["kind"], _broker_kind["detail"]
    terminalreporter.write_line(f"broker: {kind} ({detail})" if detail else f"broker: {kind}",
                                red=kind in ("embedded", "mixed"), bold=True)
