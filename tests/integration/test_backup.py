"""Backup against the real broker: objects read back with plain pyarrow match an independent consumer."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from archivetools import read_parquet_objects
from clitools import run_cli
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LOCK_NAME


def committed_keys(root: Path) -> set[str]:
    keys = set()
    for commit in (root / "_topicvault" / "commits").glob("*.json"):
        keys.update(o["key"] for o in json.loads(commit.read_text())["objects"])
    return keys


def test_backup_three_topics_byte_identical_and_incremental(bootstrap, spark, topic_factory, tmp_path):
    topics = [topic_factory(4, prefix="orders.eu-west") for _ in range(3)]
    for topic in topics:
        produce_records(bootstrap, topic, nasty_records(topic, 4, 4_200))
    location = tmp_path / "backup"

    run_cli("backup", "-b", bootstrap, "--to", str(location), *sum((["--topic", t] for t in topics), []),
            "--max-records", "1500", "--records-per-task", "2500")

    expected = {(t, p): recs for t in topics for p, recs in consume_all(bootstrap, t).items()}
    assert sum(map(len, expected.values())) >= 50_000
    backed_up = read_parquet_objects(location)
    assert backed_up.keys() == expected.keys()
    for tp, records in expected.items():
        assert backed_up[tp] == records, f"{tp} differs"
    assert {str(p.relative_to(location)) for p in location.rglob("*.parquet")} == committed_keys(location)

    # Incremental: only the new records are added, in new objects.
    first_objects = set(committed_keys(location))
    produce_records(bootstrap, topics[0], nasty_records(topics[0], 4, 50, seed=2, big_values=0))
    run_cli("backup", "-b", bootstrap, "--to", str(location), *sum((["--topic", t] for t in topics), []))
    new_objects = committed_keys(location) - first_objects
    added = [r for key in new_objects for r in pq.read_table(location / key).to_pylist()]
    assert len(added) == 200
    after = read_parquet_objects(location)
    assert after[(topics[0], 0)] == consume_all(bootstrap, topics[0])[0]

    listing = run_cli("ls", str(location))
    total = sum(len(r) for r in after.values())
    assert f"{total:,} records" in listing
    assert listing.count(topics[0]) == 4


def test_backup_empty_topic_and_nothing_new(bootstrap, spark, topic_factory, tmp_path):
    empty = topic_factory(2, prefix="empty")
    location = tmp_path / "backup"
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", empty)
    assert "nothing new" in out
    # No object is written; one commit saves the topic's settings (partition count) for restore.
    assert sorted(p.name for p in location.rglob("*") if p.is_file() and p.name != LOCK_NAME) == [
        "0000000000000000001.json", "conditional-writes.json"]
    record = json.loads((location / "_topicvault" / "commits" / "0000000000000000001.json").read_text())
    assert record["objects"] == [] and record["ranges"] == [] and record["topics"][empty]["partitions"] == 2
    assert "nothing new" in run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", empty)
    assert len(list((location / "_topicvault" / "commits").glob("*.json"))) == 1

    topic = topic_factory(1, prefix="once")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 30, big_values=0))
    run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", topic)
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", topic)
    assert "nothing new" in out
    assert len(list((location / "_topicvault" / "commits").glob("*.json"))) == 2


def test_backup_dry_run_writes_nothing(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="dry")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 20, big_values=0))
    location = tmp_path / "backup"
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", topic, "--dry-run")
    assert f"{topic}[0]" in out and f"{topic}[1]" in out
    assert not location.exists() or not any(location.rglob("*"))


def test_backup_5_mib_record_and_s3(bootstrap, spark, topic_factory, s3_uri):
    topic = topic_factory(1, prefix="big.record-5mib")
    big = Record(topic, 0, 0, b"k", bytes(range(256)) * (5 * 4096), 1_700_000_000_000, 0, (("h", None),))
    produce_records(bootstrap, topic, [big, Record(topic, 0, 0, None, None, 1_700_000_000_001, 0, ())],
                    producer_config={"message.max.bytes": 8 * 1024 * 1024})
    run_cli("backup", "-b", bootstrap, "--to", s3_uri, "--topic", topic, "--max-bytes", "1000")
    listing = run_cli("ls", s3_uri)
    assert "2 records" in listing
    # max-bytes below one record still writes each record (one per object), never drops it.
    assert " 2 " in listing.splitlines()[1]


def test_unknown_topic_is_a_one_line_error(bootstrap, tmp_path):
    out = run_cli("backup", "-b", bootstrap, "--to", str(tmp_path), "--topic", "no-such-topic-xyz", expect_exit=1)
    assert "no-such-topic-xyz" in out and "Traceback" not in out
