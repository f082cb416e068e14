"""issue 40.2: the embedded broker (tansu) reports a partition's end as the base offset of its
last batch + 1. A backup planned up to that report committed 3 of a user's 3,000 records, exit 0,
without a word. A backup must take every record there is."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from clitools import run_cli
from confluent_kafka import Producer
from kafkatools import create_topic
from topicvault.core.embedded_broker import EmbeddedBroker


@pytest.fixture
def embedded_bootstrap(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path)) as broker:
        yield broker.bootstrap


def test_backup_on_the_embedded_broker_takes_every_record(embedded_bootstrap, spark, tmp_path):
    topic = create_topic(embedded_bootstrap, "user-orders", 1)
    # A plain producer, as a user's: records go in batches of many.
    producer = Producer({"bootstrap.servers": embedded_bootstrap, "linger.ms": 50})
    now = int(time.time() * 1000)
    for i in range(3_000):
        producer.produce(topic, b"v%d" % i, b"k%d" % i, timestamp=now + i)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(30) == 0
    del producer  # no reconnect attempts (and their log lines) once the broker is stopped
    location = tmp_path / "backup"

    out = run_cli("backup", "-b", embedded_bootstrap, "-t", topic, "--to", str(location), "--quiet")

    values = [row["value"] for path in sorted(location.rglob("*.parquet")) if "_topicvault" not in path.parts
              for row in pq.read_table(path).to_pylist()]
    assert sorted(values) == sorted(b"v%d" % i for i in range(3_000)), out
    assert run_cli("backup", "-b", embedded_bootstrap, "-t", topic, "--to", str(location), "--quiet")
