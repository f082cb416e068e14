"""Fault tests: a three-node Apache Kafka cluster (replication factor 3, min.insync.replicas=2,
unclean leader election off) per test worker, with fixtures to kill, pause and restart a node.

These run in their own pytest invocation, one test at a time (`ci/test.sh`): their timings
(leader failover, replica lag) must not compete with the rest of the suite for two cores.
"""

from __future__ import annotations

import uuid

import harness_broker
import pytest
from kafkatools import create_topic
from topicvault.core.cluster.cluster_admin import broker_configs, lifted_timestamp_limits
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.local.local_kafka import LocalKafka


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """The three-node cluster; tests get it through `cluster`, which heals it afterwards."""
    with LocalKafka(nodes=3, folder=tmp_path_factory.mktemp("kafka3"),
                    config={"unclean.leader.election.enable": "false"}) as kafka:
        harness_broker._broker_kind.update(kind="apache-kafka", detail=f"3 nodes, logs in {kafka.folder}")
        yield kafka


@pytest.fixture
def cluster(kafka_cluster):
    """The three-node cluster; every node a test stopped, paused or killed runs again afterwards."""
    yield kafka_cluster
    for node in kafka_cluster.members:
        kafka_cluster.resume(node.node_id)
        if node.process is None or node.process.poll() is not None:
            kafka_cluster.restart(node.node_id)
    kafka_cluster.wait_ready()


@pytest.fixture(scope="session")
def bootstrap(kafka_cluster):
    """Here every broker-facing fixture and test talks to the three-node cluster."""
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def broker_kind(bootstrap) -> str:
    return "apache-kafka"


@pytest.fixture
def topic_factory(bootstrap):
    """Create replicated topics (replication factor 3): topic_factory(partitions, prefix='t', config=None)."""
    on_kafka = broker_configs(KafkaSettings.of(bootstrap)) or {}
    like_tansu = {**lifted_timestamp_limits(on_kafka), "max.message.bytes": str(8 * 2**20)}

    def make(partitions: int, prefix: str = "t", config: dict | None = None) -> str:
        return create_topic(bootstrap, f"{prefix}-{uuid.uuid4().hex[:8]}", partitions,
                            {**like_tansu, **(config or {})}, replication_factor=3)

    return make
