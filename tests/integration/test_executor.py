"""The in-process executor (`--executor local`) against Spark's: the same task functions, so the
same archive bytes and the same restores; and `auto` running a small plan without a JVM."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from clitools import CLI, run_cli
from kafkatools import consume_all, produce_committed_transactions, produce_records
from nasty import nasty_records
from topicvault.core.envelope import Record

EIGHT_MIB = 8 * 1024 * 1024
# What differs between two backups by design: each run's id (in object keys and the lease), the
# time a commit record or the conditional-write probe was written, and the location the probe names.
RUN_ID = re.compile(r"-r[0-9a-f]{12}")
WRITTEN_AT = ("created_ms", "probed_ms", "checked_ms")


def nasty_topic(bootstrap: str, topic_factory) -> str:
    """A topic of tests/nasty.py's records on 3 partitions, an 8 MiB record, and committed
    transactions (their markers leave offset gaps) on partition 0."""
    topic = topic_factory(3, prefix="executor")
    records = nasty_records(topic, 3, 300)
    records.append(Record(topic, 1, 0, b"eight", os.urandom(EIGHT_MIB - 1024), 1_700_000_000_002, 0,
                          (("size", b"8MiB"), ("size", None))))
    produce_records(bootstrap, topic, records)
    produce_committed_transactions(bootstrap, topic, 3)
    return topic


def archive_contents(root: Path) -> dict[str, object]:
    """Every file of an archive by its key with run ids taken out: object bytes as they are, JSON
    records (commits, the probe) parsed with their written-at times, run ids and location taken out."""
    contents: dict[str, object] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        key = RUN_ID.sub("-r<run>", str(path.relative_to(root)))
        if path.suffix == ".json":
            text = RUN_ID.sub("-r<run>", path.read_text()).replace(str(root), "<location>")
            contents[key] = _without_times(json.loads(text))
        else:
            contents[key] = path.read_bytes()
    return contents


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in WRITTEN_AT}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_local_and_spark_executors_write_identical_archives_and_restores(bootstrap, spark, topic_factory,
                                                                         tmp_path):
    topic = nasty_topic(bootstrap, topic_factory)
    source = consume_all(bootstrap, topic)
    archives = {}
    for executor in ("spark", "local"):
        archives[executor] = tmp_path / executor
        out = run_cli("backup", "-b", bootstrap, "--to", str(archives[executor]), "-t", topic, "--max-records", "250",
                      "--executor", executor)
        assert ("in this process" in out) == (executor == "local"), out
    spark_archive, local_archive = (archive_contents(archives[e]) for e in ("spark", "local"))
    assert sorted(spark_archive) == sorted(local_archive)
    assert sum(key.endswith(".parquet") for key in spark_archive) >= 6  # several objects per partition
    for key, content in spark_archive.items():
        assert local_archive[key] == content, f"{key} differs"

    restored = {}
    for executor in ("spark", "local"):
        target = f"{topic}.{executor}"
        out = run_cli("restore", "-b", bootstrap, "--from", str(archives["spark"]), "-t", topic,
                      "--rename", f"{topic}={target}", "--executor", executor)
        assert ("in this process" in out) == (executor == "local"), out
        restored[executor] = consume_all(bootstrap, target)
    # nasty records, their 1 MiB ones, the 8 MiB one, 3 transactions of 3 and the single record after them
    assert sum(map(len, source.values())) == 3 * 300 + 3 + 1 + 3 * 3 + 1
    for executor, partitions in restored.items():
        assert partitions.keys() == source.keys()
        for partition, records in partitions.items():
            assert [_content(r) for r in records] == [_content(r) for r in source[partition]], \
                f"{executor} restore of partition {partition} differs"


def _content(record: Record) -> tuple:
    """A record as a restore must carry it (its offset in the target may differ: gaps close)."""
    return record.partition, record.key, record.value, record.timestamp_ms, record.timestamp_type, record.headers


def test_auto_runs_a_small_plan_without_spark_and_a_master_with_it(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="auto")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 5, big_values=0))
    environment = {k: v for k, v in os.environ.items() if k != "TOPICVAULT_EXECUTOR"}  # the suite's is spark
    environment["PYSPARK_SUBMIT_ARGS"] = "--this-would-fail-a-spark-start pyspark-shell"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *args], env=environment, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)

    # No JVM: a Spark start would fail on PYSPARK_SUBMIT_ARGS' bad option.
    backup = cli("backup", "-b", bootstrap, "--to", str(tmp_path / "auto"), "-t", topic)
    assert backup.returncode == 0, backup.stderr
    assert "tasks run in this process (no Spark): a small plan (10 records at most)" in backup.stderr
    restore = cli("restore", "-b", bootstrap, "--from", str(tmp_path / "auto"), "-t", topic,
                  "--rename", f"{topic}={topic}.auto")
    assert restore.returncode == 0, restore.stderr
    assert "tasks run in this process (no Spark): a small plan (10 records at most)" in restore.stderr
    assert sum(map(len, consume_all(bootstrap, f"{topic}.auto").values())) == 10

    # A master given: Spark, which here fails to start, as it was told to.
    on_spark = cli("backup", "-b", bootstrap, "--to", str(tmp_path / "master"), "-t", topic, "--master", "local[1]")
    assert "tasks run on Spark: --master local[1]" in on_spark.stderr
    assert on_spark.returncode != 0
