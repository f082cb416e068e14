"""Crash safety: SIGKILL of the whole CLI (driver, JVM, workers) at many points, then run again.

Each crash run gets TOPICVAULT_CRASH_AT=<point>:<count> (see topicvault.core.local.faults); the
process group dies at once, like a machine failure. Afterwards an independent consumer (and a
plain pyarrow reader for backups) checks that every record is there exactly once, in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from clitools import run_cli, run_cli_process
from kafkatools import consume_all, produce_records, strip
from nasty import nasty_records

# Killed runs alternate between tasks on Spark (the CLI, its JVM and every Python worker die at
# once) and tasks in the CLI's own process: a crash point means the same on both, and a run in
# process costs a fifth of the CPU of one that starts Spark.
EXECUTORS = ("local", "spark")


def test_restore_killed_at_each_stage_ends_exactly_once(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="crash-restore")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 3_000, big_values=0))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "700")
    source = consume_all(bootstrap, topic)
    target = f"{topic}-restored"
    args = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "crash-test"]
    log = tmp_path / "cli.log"

    # Before the first record, after one, around an object boundary (--max-records 700), and late
    # (one record before the end of what a partition still lacks: how much the killed runs had
    # delivered depends on timing); each run resumes from where the previous one was killed.
    restored = {p: [] for p in source}
    for stage, count in enumerate((0, 1, 699, 700, 701, "late")):
        if count == "late":
            count = min(len(source[p]) - len(restored.get(p, [])) for p in source) - 1
        status = run_cli_process(args, log, f"restore.produce:{count}", executor=EXECUTORS[stage % 2])
        assert status == -9, f"run crashing at {count} ended with {status}; see {log}"
        restored = consume_all(bootstrap, target)
        for partition, records in restored.items():
            # Invariant after any crash: the target holds a prefix of the source, no more.
            assert strip(records) == strip(source[partition][: len(records)]), f"crash at {count}: not a prefix"

    assert run_cli_process(args, log) == 0, log.read_text()[-2000:]
    restored = consume_all(bootstrap, target)
    assert {p: strip(r) for p, r in restored.items()} == {p: strip(r) for p, r in source.items()}


def backed_up_records(root: Path) -> dict[int, list[tuple]]:
    """Records of the committed objects only, read with plain pyarrow."""
    found: dict[int, list[tuple]] = {}
    for commit in sorted((root / "_topicvault" / "commits").glob("*.json")):
        for entry in json.loads(commit.read_text())["objects"]:
            for row in pq.read_table(root / entry["key"]).to_pylist():
                meta = row["metadata"]
                headers = tuple((h["key"], h["value"]) for h in row["headers"])
                found.setdefault(meta["partition"], []).append((meta["offset"], row["key"], row["value"], headers))
    return {p: sorted(rows) for p, rows in found.items()}


def test_backup_killed_at_each_stage_ends_exactly_once(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="crash-backup")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_500, big_values=0))
    root = tmp_path / "b"
    args = ["backup", "-b", bootstrap, "--to", str(root), "-t", topic, "--max-records", "400",
            "--records-per-task", "1000"]
    log = tmp_path / "cli.log"
    assert run_cli_process(args, log) == 0, log.read_text()[-2000:]  # a first, complete backup
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_500, seed=9, big_values=0))

    # Reading (first record, an object boundary of --max-records 400, the end of a task of
    # --records-per-task 1000), writing objects (the first, a later one) and just before the commit.
    for stage, point in enumerate(("backup.consume:1", "backup.consume:400", "backup.consume:999", "backup.object:1",
                                   "backup.object:3", "backup.commit:0")):
        status = run_cli_process(args, log, point, executor=EXECUTORS[stage % 2])
        assert status == -9, f"run crashing at {point} ended with {status}; see {log}"
        commits = list((root / "_topicvault" / "commits").glob("*.json"))
        assert len(commits) == 1, f"crash at {point} left a commit"

    assert run_cli_process(args, log) == 0, log.read_text()[-2000:]
    expected = {p: [(r.offset, r.key, r.value, r.headers) for r in rs] for p, rs in consume_all(bootstrap, topic).items()}
    assert backed_up_records(root) == expected
    assert "6,000 records" in run_cli("ls", str(root)) or "6,002 records" in run_cli("ls", str(root))


def test_spark_task_retries_inside_one_job_end_exactly_once(bootstrap, spark, topic_factory, tmp_path):
    # local[2,4]: Spark retries a failed task up to 4 times; every first attempt fails midway.
    topic = topic_factory(2, prefix="retry")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 2_000, big_values=0))
    root, log = tmp_path / "b", tmp_path / "cli.log"
    backup = ["backup", "-b", bootstrap, "--to", str(root), "-t", topic, "--max-records", "300"]
    assert run_cli_process(backup, log, fail_first_attempt_at="backup.object:2", master="local[2,4]") == 0, \
        log.read_text()[-3000:]
    assert len(log.with_suffix(".faults").read_text().splitlines()) == 2, "every first attempt must have failed"
    expected = {p: [(r.offset, r.key, r.value, r.headers) for r in rs] for p, rs in consume_all(bootstrap, topic).items()}
    assert backed_up_records(root) == expected

    restore = ["restore", "--from", str(root), "-b", bootstrap, "--rename", f"{topic}={topic}-r"]
    assert run_cli_process(restore, log, fail_first_attempt_at="restore.produce:777", master="local[2,4]") == 0, \
        log.read_text()[-3000:]
    assert len(log.with_suffix(".faults").read_text().splitlines()) == 4
    assert {p: strip(r) for p, r in consume_all(bootstrap, f"{topic}-r").items()} == \
        {p: strip(r) for p, r in consume_all(bootstrap, topic).items()}
