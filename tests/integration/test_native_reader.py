"""Issue #51.2: the native record loop (sink/_kafka_arrow.c) and the Python one (confluent-kafka)
back up the same records into byte-identical objects, against a real Apache Kafka.

The data: the nasty records (null and empty keys and values, tombstones, duplicate and null
headers, non-ASCII header names, non-monotonic timestamps), records of almost 8 MiB, committed and
aborted transactions (offset gaps of markers and aborted records), a topic the log cleaner
compacted (offset gaps inside the log), and a topic of log-append timestamps.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from archivetools import read_parquet_objects
from compactiontools import COMPACTED, cleaning_kafka, wait_until_compacted, write_keyed_wave  # noqa: F401
from harness_broker import _like_tansu
from kafkatools import consume_all, create_topic, end_offsets, produce_records, transactional_producer
from nasty import nasty_records
from nativetools import with_huge_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.rotation import Rotation
from topicvault.sink.backup import BackupJob, backup_group
from topicvault.sink.kafka_reader import OffsetRange, last_records_before
from topicvault.sink.native_reader import NATIVE_ENV, native_module


def _transactions(bootstrap: str, topic: str) -> None:
    """Committed, aborted and committed transactions on partition 0 (markers and aborted records
    leave offsets no read_committed reader sees)."""
    producer = transactional_producer(bootstrap)
    for outcome in ("commit", "abort", "commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, f"{outcome}-{i}".encode(), b"tx" if i % 3 else None, partition=0,
                             timestamp=1_700_000_000_000 - i, headers=[("tx", outcome.encode()), ("tx", None)])
        getattr(producer, f"{outcome}_transaction")(30)


@pytest.fixture(scope="module")
def nasty_topics(cleaning_kafka):  # noqa: F811 - the module-scoped broker of compactiontools
    """(bootstrap, {topic: partitions}) of the topics above, written once."""
    bootstrap = cleaning_kafka
    roomy = _like_tansu(bootstrap)
    nasty = create_topic(bootstrap, f"nasty-{uuid.uuid4().hex[:6]}", 3, roomy)
    produce_records(bootstrap, nasty, with_huge_records(nasty_records(nasty, 3, 3_000), nasty, 3))
    _transactions(bootstrap, nasty)
    produce_records(bootstrap, nasty, nasty_records(nasty, 1, 50, seed=2, big_values=0))
    appended = create_topic(bootstrap, f"appended-{uuid.uuid4().hex[:6]}", 1,
                            {**roomy, "message.timestamp.type": "LogAppendTime"})
    produce_records(bootstrap, appended, nasty_records(appended, 1, 500, big_values=0))
    compacted = create_topic(bootstrap, f"compacted-{uuid.uuid4().hex[:6]}", 2, COMPACTED)
    write_keyed_wave(bootstrap, compacted, 0)
    write_keyed_wave(bootstrap, compacted, 1)
    wait_until_compacted(bootstrap, compacted)
    return bootstrap, {nasty: 3, appended: 1, compacted: 2}


def _ranges(bootstrap: str, topics: dict[str, int]) -> list[OffsetRange]:
    """Each partition's whole range, read_committed: [log start, last stable offset)."""
    return [OffsetRange(topic, partition, low, high)
            for topic, partitions in topics.items()
            for partition, (low, high) in end_offsets(bootstrap, topic, list(range(partitions))).items()]


def _backup(bootstrap: str, ranges: list[OffsetRange], location: Path, native: bool, monkeypatch,
            budget: int | None = None) -> list:
    """backup_group of `ranges` into `location` through one path; its task results."""
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    job = BackupJob(KafkaSettings.of(bootstrap), str(location), rotation=Rotation(max_records=1_000),
                    run_id="r0123456789ab", **({"open_objects_budget": budget} if budget else {}))
    return backup_group(job, ranges)


def _objects(location: Path) -> dict[str, bytes]:
    return {str(path.relative_to(location)): path.read_bytes() for path in sorted(location.rglob("*")) if path.is_file()}


def test_native_and_python_paths_write_byte_identical_objects(nasty_topics, tmp_path, monkeypatch):
    assert native_module() is not None, "the native reader is not built: run `make setup` (ci/native.sh)"
    bootstrap, topics = nasty_topics
    ranges = _ranges(bootstrap, topics)

    python_results = _backup(bootstrap, ranges, tmp_path / "python", False, monkeypatch)
    native_results = _backup(bootstrap, ranges, tmp_path / "native", True, monkeypatch)

    python_objects, native_objects = _objects(tmp_path / "python"), _objects(tmp_path / "native")
    assert len(python_objects) > len(ranges)
    assert native_objects.keys() == python_objects.keys()
    for key, data in python_objects.items():
        assert native_objects[key] == data, f"{key} differs"
    assert [(r.end, r.last_record, r.objects) for r in native_results] == \
           [(r.end, r.last_record, r.objects) for r in python_results]
    assert all(r.last_record is not None for r in native_results)
    # Both are right, not merely alike: every record Kafka gives a read_committed reader, exactly.
    backed_up = read_parquet_objects(tmp_path / "native")
    for topic in topics:
        for partition, records in consume_all(bootstrap, topic).items():
            assert backed_up[(topic, partition)] == records, f"{topic}[{partition}]"


def test_checked_ranges_read_one_at_a_time_agree_between_paths(nasty_topics, tmp_path, monkeypatch):
    """Ranges after a first backup carry the archive's last record (OffsetRange.check), met again
    and skipped; an open-objects budget of one byte reads them one after another."""
    assert native_module() is not None, "the native reader is not built: run `make setup` (ci/native.sh)"
    bootstrap, topics = nasty_topics
    whole = _ranges(bootstrap, topics)
    middles = {(r.topic, r.partition): (r.start, (r.start + r.end) // 2) for r in whole}
    checks = last_records_before(KafkaSettings.of(bootstrap), middles)
    assert len(checks) == len(whole)
    seconds = [OffsetRange(r.topic, r.partition, middles[(r.topic, r.partition)][1], r.end,
                           check=checks[(r.topic, r.partition)]) for r in whole]

    python_results = _backup(bootstrap, seconds, tmp_path / "python", False, monkeypatch, budget=1)
    native_results = _backup(bootstrap, seconds, tmp_path / "native", True, monkeypatch, budget=1)

    assert _objects(tmp_path / "native") == _objects(tmp_path / "python")
    assert [(r.end, r.last_record, r.objects) for r in native_results] == \
           [(r.end, r.last_record, r.objects) for r in python_results]
    backed_up = read_parquet_objects(tmp_path / "native")
    assert sum(map(len, backed_up.values())) == sum(
        1 for topic in topics for records in consume_all(bootstrap, topic).values() for record in records
        if record.offset >= middles[(topic, record.partition)][1])
