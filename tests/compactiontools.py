"""A topic the log cleaner compacts while a test watches: a node whose cleaner looks for work every
100 ms, keyed waves of records with tombstones, and the wait until every key is left once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafkatools import consume_all
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.core.local.local_kafka import LocalKafka, kafka_jars


@pytest.fixture(scope="module")
def cleaning_kafka(tmp_path_factory):
    """A node of its own whose log cleaner looks for work every 100 ms (default 15 s); Apache
    Kafka whatever broker the rest of the suite runs on."""
    try:
        kafka_jars()
    except TopicvaultError as exc:
        pytest.skip(str(exc))
    with LocalKafka(nodes=1, folder=tmp_path_factory.mktemp("cleaning"),
                    config={"log.cleaner.backoff.ms": "100"}) as kafka:
        yield kafka.bootstrap


COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
             "min.compaction.lag.ms": "0"}


def view(bootstrap: str, topic: str) -> dict[tuple[str, int], list[Record]]:
    """What a read_committed consumer sees of the topic now, keyed as `archived` is."""
    return {(topic, p): records for p, records in consume_all(bootstrap, topic).items()}


def write_keyed_wave(bootstrap: str, topic: str, wave: int, records: int = 400, keys: int = 30) -> None:
    """Records over `keys` keys in multi-record batches, every 7th a tombstone; then, past
    segment.ms, one more record so that the wave's last segment rolls and can be cleaned."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(records):
        value = None if i % 7 == 3 else b"w%d-v%d" % (wave, i)
        producer.produce(topic, value, b"key-%d" % (i % keys), partition=i % 2,
                         headers=[("w", b"%d" % wave), ("w", None)] if i % 5 else None)
        if i % 50 == 49:
            producer.flush(30)
    producer.flush(30)
    time.sleep(0.3)
    for partition in (0, 1):
        producer.produce(topic, b"roll", b"roll-%d" % wave, partition=partition)
    assert producer.flush(30) == 0


def wait_until_compacted(bootstrap: str, topic: str, timeout_s: float = 60) -> dict[tuple[str, int], list[Record]]:
    """The view once the cleaner has left every key once per partition (tombstones stay:
    delete.retention.ms is a day)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = view(bootstrap, topic)
        if all(len({r.key for r in rs}) == len(rs) for rs in seen.values()):
            return seen
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"the cleaner left duplicate keys in {topic} after {timeout_s} s")
        time.sleep(0.5)
