"""Broker fixture: Apache Kafka by default, an external cluster, or the embedded broker on request.

- default: a one-node Apache Kafka (KRaft JVM, `core.local_kafka`) per test worker, from the jars
  `ci/kafka-jars.sh` resolved;
- `TOPICVAULT_TEST_BOOTSTRAP=host:port`: a cluster of the user's own;
- `TOPICVAULT_TEST_BROKER=embedded`: tansu, in a container built locally from its binary
  (testcontainers through podman's Docker-compatible socket, DOCKER_HOST), else as a process.
"""

from __future__ import annotations

import functools
import os
import uuid
import warnings

import pytest
from kafkatools import create_topic
from topicvault.core.cluster import broker_configs, lifted_timestamp_limits, retention_from_broker_configs
from topicvault.core.embedded_broker import EmbeddedBroker, free_port, wait_for_broker
from topicvault.core.kafka import KafkaSettings
from topicvault.core.local_kafka import LocalKafka

BROKER_IMAGE = "localhost/topicvault-broker:tansu"
_broker_kind = {"kind": "not started", "detail": ""}


def _start_container():
    from testcontainers.core.container import DockerContainer

    port = free_port()
    container = (
        DockerContainer(BROKER_IMAGE)
        .with_command(f"/tansu broker --listener-url tcp://0.0.0.0:9092 "
                      f"--advertised-listener-url tcp://127.0.0.1:{port} --storage-engine memory://tansu/")
        .with_bind_ports(9092, port)
    )
    container.start()
    try:
        wait_for_broker(f"127.0.0.1:{port}", 60.0)
    except BaseException:
        container.stop()
        raise
    return container, f"127.0.0.1:{port}"


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
        container, servers = _start_container()
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
        container.stop()


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
