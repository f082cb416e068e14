"""The harness itself: the broker, the stores and Spark are real and behave."""

from __future__ import annotations

import os

from kafkatools import consume_all, produce_records
from topicvault.core.embedded_broker import EmbeddedBroker
from topicvault.core.envelope import Record
from topicvault.core.locations import open_store


def test_broker_round_trips_awkward_records(bootstrap, topic_factory):
    topic = topic_factory(2, prefix="smoke")
    records = [
        Record(topic, 0, 0, None, b"null key", 1_700_000_000_000, 0, (("a", b"1"), ("a", b"2"), ("n", None))),
        Record(topic, 0, 0, b"", None, 1_700_000_000_001, 0, ()),
        Record(topic, 1, 0, b"\xff\x00", b"", 1_700_000_000_002, 0, (("ü", b""),)),
    ]
    produce_records(bootstrap, topic, records)
    found = consume_all(bootstrap, topic)
    strip = lambda r: (r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type)  # noqa: E731
    assert [strip(r) for r in found[0]] == [strip(r) for r in records[:2]]
    assert [strip(r) for r in found[1]] == [strip(records[2])]


def test_suite_runs_on_the_container_broker_here(broker_kind):
    # A silently broken podman path must fail here, not fall back unnoticed.
    if os.environ.get("TOPICVAULT_TEST_BOOTSTRAP"):
        assert broker_kind == "external"
    elif os.environ.get("TOPICVAULT_ALLOW_EMBEDDED") != "1":
        assert broker_kind == "testcontainers"


def test_both_stores_write_and_read(store_uri):
    store = open_store(store_uri)
    store.put("a/b.bin", b"\x00payload")
    assert store.get("a/b.bin") == b"\x00payload"
    assert [o.key for o in store.list("a/")] == ["a/b.bin"]


def test_spark_session(spark):
    assert spark.range(10).count() == 10


def test_embedded_broker_starts_and_stops():
    with EmbeddedBroker() as broker:
        pid = broker.process.pid
        assert broker.bootstrap.startswith("127.0.0.1:")
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
