"""Issue #51.2, the restore direction: the native record loop (sink/_kafka_arrow_writer.c) and the
Python one (confluent-kafka) produce the same records, against a real Apache Kafka.

The data: the nasty records (null and empty keys and values, tombstones, duplicate and null
headers, non-ASCII header names, non-monotonic timestamps), records of 1 MiB and of almost 8 MiB,
and timestamps <= 0 (which Kafka cannot carry: both paths send the producer's time and count them).
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import pytest
import topicvault.sink.native_reader as native_reader
from clitools import run_cli
from kafkatools import consume_all, create_topic, produce_records
from nasty import nasty_records
from nativetools import with_huge_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.errors import TopicvaultError
from topicvault.sink.native_reader import NATIVE_ENV, native_module
from topicvault.source.restore.kafka_writer import produce_partition, restore_producer
from topicvault.source.restore.native_writer import NativeProducer
from topicvault.source.restore.throttle import RateLimit

PARTITIONS = 2
NOT_CARRIED = (0, -1, -5)  # timestamps Kafka's producers cannot send (librdkafka: 0 is "now")


def _archive_records(topic: str) -> list[Record]:
    """What an archive may hold for two partitions: the nasty records, huge ones, timestamps <= 0."""
    records = with_huge_records(nasty_records(topic, PARTITIONS, 1_500), topic, PARTITIONS)
    for partition in range(PARTITIONS):
        for i, stamp in enumerate(NOT_CARRIED):
            records.insert(100 + 50 * i, Record(topic, partition, 0, b"old-%d" % i, b"v", stamp, 0,
                                                (("h", None), ("h", b""))))
    return records


def _batches(records: list[Record], partition: int) -> list:
    """The partition's records as a restore reads them: batches, some of them slices (offset > 0)."""
    batch = records_to_batch([r for r in records if r.partition == partition])
    return [batch.slice(0, 700), batch.slice(700, 1), batch.slice(701)]


def _produce(settings: KafkaSettings, records: list[Record], target: str, native: bool, monkeypatch) -> list:
    """Both partitions' records to `target` through one path (partition 1 throttled: in pieces)."""
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    return [produce_partition(settings, target, partition, _batches(records, partition),
                              rate=RateLimit(records_per_s=20_000) if partition else RateLimit())
            for partition in range(PARTITIONS)]


def _as_sent(record: Record) -> tuple:
    """A record as compared: no topic; a timestamp <= 0 only as replaced (any time after 2020)."""
    stamp = record.timestamp_ms if record.timestamp_ms > 0 else None
    return (record.partition, record.offset, record.key, record.value, stamp, record.timestamp_type, record.headers)


def _restored(bootstrap: str, topic: str) -> list[tuple]:
    restored = [record for records in consume_all(bootstrap, topic).values() for record in records]
    replaced = [r for r in restored if (r.key or b"").startswith(b"old-")]
    assert len(replaced) == PARTITIONS * len(NOT_CARRIED) and all(r.timestamp_ms > 1_600_000_000_000 for r in replaced)
    return [_as_sent(replace(r, timestamp_ms=0) if (r.key or b"").startswith(b"old-") else r) for r in restored]


@pytest.fixture
def needs_native():
    assert native_module() is not None, "the native module is not built: run `make setup` (ci/native.sh)"


def test_the_native_path_is_the_one_a_restore_takes(bootstrap, monkeypatch, needs_native):
    monkeypatch.setenv(NATIVE_ENV, "1")
    assert isinstance(restore_producer(KafkaSettings.of(bootstrap), lambda error, message: None), NativeProducer)
    monkeypatch.setenv(NATIVE_ENV, "0")
    assert not isinstance(restore_producer(KafkaSettings.of(bootstrap), lambda error, message: None), NativeProducer)


def test_native_and_python_paths_produce_identical_records(bootstrap, topic_factory, monkeypatch, needs_native):
    source = topic_factory(PARTITIONS, prefix="native-w")
    records = _archive_records(source)
    settings = KafkaSettings.of(bootstrap)
    native, python = topic_factory(PARTITIONS, prefix="native-w-c"), topic_factory(PARTITIONS, prefix="native-w-py")

    native_results = _produce(settings, records, native, True, monkeypatch)
    python_results = _produce(settings, records, python, False, monkeypatch)

    assert native_results == python_results
    assert [r.timestamps_replaced for r in native_results] == [len(NOT_CARRIED)] * PARTITIONS
    restored = _restored(bootstrap, native)
    assert restored == _restored(bootstrap, python)
    # Both are right, not merely alike: every record as the archive holds it, in order, offsets from 0.
    expected = [(r.partition, i, r.key, r.value, r.timestamp_ms if r.timestamp_ms > 0 else None, 0, r.headers)
                for partition in range(PARTITIONS)
                for i, r in enumerate(r for r in records if r.partition == partition)]
    assert restored == expected


def test_a_restore_through_spark_agrees_with_the_python_path(bootstrap, spark, topic_factory, tmp_path, monkeypatch,
                                                             needs_native):
    """A backup and two restores through the CLI: Spark's workers (native: nothing turns it off
    there) and this process with TOPICVAULT_NATIVE=0."""
    source = topic_factory(PARTITIONS, prefix="native-e2e")
    produce_records(bootstrap, source, with_huge_records(nasty_records(source, PARTITIONS, 500), source, PARTITIONS))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", source)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{source}={source}-c", "--executor", "spark")
    monkeypatch.setenv(NATIVE_ENV, "0")
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{source}={source}-py", "--executor", "local")

    original = consume_all(bootstrap, source)
    for target in (f"{source}-c", f"{source}-py"):
        restored = consume_all(bootstrap, target)
        assert {p: [replace(r, topic=source) for r in rs] for p, rs in restored.items()} == original, target


def test_a_refused_delivery_fails_both_paths_with_the_same_line(bootstrap, monkeypatch, caplog, needs_native):
    # A record sent after the refused one may be in flight when the gap-less guarantee stops the
    # producer; it never completes, and the restore waits out the outage limit (on both paths):
    # 5 s here instead of 300.
    settings = KafkaSettings.of(bootstrap, {"message.timeout.ms": "5000"})
    records = [Record("t", 0, 0, b"k%d" % i, bytes(2_000 if i == 5 else 10), 1_700_000_000_000, 0, ())
               for i in range(10)]
    errors, logged = {}, {}
    for native in (True, False):
        caplog.clear()
        monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
        target = create_topic(bootstrap, f"small-{'c' if native else 'py'}-{id(errors)}", 1,
                              {"max.message.bytes": "1000"})
        with pytest.raises(TopicvaultError) as failed:
            produce_partition(settings, target, 0, [records_to_batch(records)])
        # The producer id differs (the broker gives each producer its own).
        errors[native] = re.sub(r"PID\{Id:\d+,", "PID{Id:N,", str(failed.value).replace(target, "TARGET"))
        # librdkafka's own lines reach the producer's logger (stderr, by logging's last resort) on both.
        logged[native] = [r.levelname for r in caplog.records
                          if r.name == "topicvault.producer" and "Message size too large" in r.getMessage()]
    assert errors[True] == errors[False]
    assert errors[True].startswith("producing to TARGET[0] failed: ") and "Broker: Message size too large" in errors[True]
    assert "\n" not in errors[True]
    assert logged[True] == logged[False] and logged[True], logged


def test_a_module_that_cannot_load_is_said_once_and_the_restore_is_exact(bootstrap, topic_factory, tmp_path,
                                                                        monkeypatch):
    source = topic_factory(1, prefix="fallback")
    produce_records(bootstrap, source, nasty_records(source, 1, 300))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", source, "--executor", "local")
    monkeypatch.setattr(native_reader, "_module", None)
    monkeypatch.setattr(native_reader, "_unavailable", None)
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "topicvault.sink._kafka_arrow", None)  # as where the build failed

    output = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{source}={source}-r",
                     "--executor", "local")

    notes = [line for line in output.splitlines() if "native" in line.lower()]
    assert len(notes) == 1 and notes[0].startswith("note: native Kafka module not loaded"), output
    assert "Traceback" not in output
    restored = consume_all(bootstrap, f"{source}-r")[0]
    assert [replace(r, topic=source) for r in restored] == consume_all(bootstrap, source)[0]
