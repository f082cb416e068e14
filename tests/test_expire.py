"""`topicvault expire --before TIME`: whole old objects dropped in a commit that moves each
partition's start; ls, verify and restore agree; never a record at or after TIME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import assert_one_line_error, run_cli
from kafkatools import consume_all, produce_records
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionState, fold_commits
from topicvault.core.envelope import Record
from topicvault.core.local_store import LocalStore
from topicvault.maintenance.expire import plan_expire

CLI = str(Path(sys.executable).with_name("topicvault"))
T0 = 1_700_000_000_000
HOUR = 3_600_000


def backdate_commits(location: Path, to_ms: int) -> None:
    """Stamp the location's commits made after `to_ms` as made right after it, in order (to_ms + 1,
    + 2, ...): as if its backups ran then (expire never drops what was committed less than the age
    asked for ago). Checkpoints, derived from the commits, are dropped."""
    stamp = to_ms
    for path in sorted((location / "_topicvault" / "commits").glob("*.json")):
        record = json.loads(path.read_text())
        if record["created_ms"] <= to_ms:
            continue
        stamp += 1
        record["created_ms"] = stamp
        path.with_suffix(".tmp").write_text(json.dumps(record))  # replaced whole: a backup beside may read it
        os.replace(path.with_suffix(".tmp"), path)
    for path in (location / "_topicvault").glob("*checkpoint*"):
        path.unlink() if path.is_file() else [p.unlink() for p in path.iterdir()]


def object_at(first: int, last: int, min_ts: int, max_ts: int) -> ObjectEntry:
    return ObjectEntry(f"topic=t/partition=0/{first:019d}-r000000000001.parquet", "t", 0, first, last,
                       last - first + 1, 10, min_ts, max_ts, "00")


def test_expire_drops_the_longest_prefix_of_objects_wholly_older_than_time():
    objects = [object_at(0, 9, 0, 99), object_at(10, 19, 100, 199), object_at(22, 29, 50, 300),  # one young record
               object_at(30, 39, 10, 20)]  # old, but after a young one: kept
    state = BackupState(partitions={("t", 0): PartitionState("t", 0, 0, 40, objects, commit_times=[(40, 0, 0)])})
    assert plan_expire(state, 100) == [type(plan_expire(state, 100)[0])("t", 0, tuple(objects[:1]), 10)]
    (expiry,) = plan_expire(state, 200)
    assert expiry.dropped == tuple(objects[:2]) and expiry.new_start == 20
    assert plan_expire(state, 300) == plan_expire(state, 200), "an object holding a record at TIME stays"
    assert plan_expire(state, 0) == []
    assert plan_expire(state, 301)[0].new_start == 40


def produce_eras(bootstrap, topic: str) -> None:
    """Per partition 40 records an hour apart in blocks of 10; partition 1's third block holds one
    young record among old ones (out-of-order timestamps)."""
    records = []
    for partition in (0, 1):
        for i in range(40):
            ts = T0 + (i // 10) * HOUR + i
            if partition == 1 and i == 25:
                ts = T0 + 10 * HOUR
            records.append(Record(topic, partition, 0, b"k%d" % i, b"v%d" % i, ts, 0, (("h", b"%d" % i), ("h", None))))
    produce_records(bootstrap, topic, records)


def test_expire_then_ls_verify_and_restore_agree(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="expire")
    produce_eras(bootstrap, topic)
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "10")
    backdate_commits(Path(location), T0 - HOUR)  # backed up before the records' times asked for below
    before = T0 + 2 * HOUR + 5  # inside the third block of each partition
    files = sorted(p for p in Path(location).rglob("*.parquet"))

    dry = json.loads(run_cli("expire", location, "--before", str(before), "--dry-run", "--json"))
    assert {(p["partition"], p["new_start"], p["records"]) for p in dry["partitions"]} == {(0, 20, 20), (1, 20, 20)}
    assert sorted(Path(location).rglob("*.parquet")) == files and dry["commit"] is None

    out = run_cli("expire", location, "--before", "2023-11-15T00:13:20.005Z", "--grace", "0s")  # = before
    assert "expired 40 records" in out, out
    listing = json.loads(run_cli("ls", location, "--json"))
    assert {(p["partition"], p["start"], p["records"]) for p in listing["partitions"]} == {(0, 20, 20), (1, 20, 20)}
    assert "ok:" in run_cli("verify", location, "-b", bootstrap)
    assert len(list(Path(location).rglob("*.parquet"))) == len(files) - 4, "dropped objects not deleted"

    target = f"{topic}-r"
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}")
    source, restored = consume_all(bootstrap, topic), consume_all(bootstrap, target)
    for partition in (0, 1):
        kept = [(r.key, r.value, r.headers, r.timestamp_ms) for r in source[partition] if r.offset >= 20]
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored[partition]] == kept
        assert all(r.offset >= 20 for r in source[partition] if r.timestamp_ms >= before), "a young record went"
    assert "nothing that old" in run_cli("expire", location, "--before", str(T0))
    # Partition 1's young record (offset 25) keeps its whole object and everything after it.
    run_cli("expire", location, "--before", str(T0 + 4 * HOUR), "--grace", "0s")
    starts = {p["partition"]: p["start"] for p in json.loads(run_cli("ls", location, "--json"))["partitions"]}
    assert starts == {0: 40, 1: 20}
    # A backup continues at the end.
    produce_records(bootstrap, topic, [Record(topic, p, 0, b"n", b"n", T0 + 20 * HOUR, 0, ()) for p in (0, 1)])
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    assert "ok:" in run_cli("verify", location, "-b", bootstrap)


@pytest.mark.parametrize("point", ["expire.commit:0", "retire.delete:1"])
def test_expire_killed_before_or_after_its_commit_then_rerun(bootstrap, spark, topic_factory, tmp_path, point):
    topic = topic_factory(2, prefix="expire-crash")
    produce_eras(bootstrap, topic)
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "10")
    backdate_commits(location, T0 - HOUR)
    args = [CLI, "expire", str(location), "--before", str(T0 + 2 * HOUR), "--grace", "0s"]
    log = tmp_path / "expire.log"
    with open(log, "ab") as out:
        crashed = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=300,
                                 env={**os.environ, "TOPICVAULT_CRASH_AT": point}, start_new_session=True)
    assert crashed.returncode == -9, log.read_text()
    assert "ok:" in run_cli("verify", str(location))
    with open(log, "ab") as out:
        assert subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=300).returncode == 0
    state = fold_commits(LocalStore(str(location)))
    assert {p: ps.start for (_, p), ps in state.partitions.items()} == {0: 20, 1: 20}
    live = {o.key for ps in state.partitions.values() for o in ps.objects}
    assert {i.key for i in LocalStore(str(location)).list() if i.key.endswith(".parquet")} == live
    assert "ok:" in run_cli("verify", str(location), "-b", bootstrap)


def test_expire_bad_input_is_one_line(tmp_path):
    assert_one_line_error(run_cli("expire", str(tmp_path), "--before", "30d", expect_exit=1), "no backup at")
    assert_one_line_error(run_cli("expire", str(tmp_path), "--before", "last week", expect_exit=1), "bad --before")
    assert_one_line_error(run_cli("expire", str(tmp_path), "--before", "30d", "--grace", "x", expect_exit=1),
                          "bad --grace")


def test_expire_with_no_grace_deletes_the_objects_it_retires_in_the_same_run(tmp_path, monkeypatch):
    # Expire read the clock before committing, and its commit stamps the objects it retires a
    # little later: with --grace 0 they were deleted only when both fell in one millisecond,
    # and waited for the next run otherwise (test_expire_killed_before_or_after_its_commit_then_rerun
    # failed once that way). Here the commit is stamped a second later, as a slow commit would be.
    import time
    import types

    from topicvault.core.archive import commit_log
    from topicvault.maintenance.expire import expire
    from topicvault.sink.datasource import commit_written

    store = LocalStore(str(tmp_path / "loc"))
    objects = [ObjectEntry(f"topic=t/partition=0/{first:019d}-r000000000001.parquet", "t", 0, first, first + 9,
                           10, 3, T0 + first, T0 + first + 9, "00") for first in (0, 10, 20)]
    for entry in objects:
        store.put(entry.key, b"obj")
    commit_written(store, objects)
    backdate_commits(tmp_path / "loc", T0 - HOUR)
    real_time = time.time
    monkeypatch.setattr(commit_log, "time", types.SimpleNamespace(time=lambda: real_time() + 1.0))
    dry = expire(store, T0 + 20, grace_ms=0, dry_run=True)
    assert dry.collected.retired == [objects[0].key, objects[1].key], "the dry run says what the run deletes"
    assert all(store.head(e.key) is not None for e in objects)
    result = expire(store, T0 + 20, grace_ms=0)
    assert result.collected.retired == [objects[0].key, objects[1].key]
    assert [store.head(e.key) is None for e in objects] == [True, True, False]


def test_expire_never_drops_what_was_backed_up_less_than_the_age_asked_for_whatever_its_timestamps(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="expire-young")
    # A producer whose clock is a year behind, then one that leaves timestamps near zero (1970).
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, ts, 0, ())
                                       for i, ts in enumerate([T0 - 365 * 24 * HOUR] * 5 + [1] * 5)])
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "5")
    out = run_cli("expire", str(location), "--before", "1h", "--grace", "0s")
    assert "nothing that old" in out and "10 records in 2 objects are older than" in out, out
    assert json.loads(run_cli("expire", str(location), "--before", "1h", "--dry-run", "--json"))["held"][0][
        "records"] == 10
    listing = json.loads(run_cli("ls", str(location), "--json"))
    assert [(p["start"], p["records"]) for p in listing["partitions"]] == [(0, 10)]
    assert_one_line_error(run_cli("expire", str(location), "--before", "0s", expect_exit=1),
                          "--before must lie in the past")
    assert len(list(location.rglob("*.parquet"))) == 2
    # Backed up two hours ago, the same objects go with --before 1h.
    backdate_commits(location, int(time.time() * 1000) - 2 * HOUR)
    assert "expired 10 records" in run_cli("expire", str(location), "--before", "1h", "--grace", "0s")


def test_expire_keeps_an_object_holding_offsets_committed_after_time_even_if_compacted_with_older_ones():
    old = [object_at(0, 9, 0, 99), object_at(10, 19, 100, 199), object_at(20, 29, 100, 199)]
    partition = PartitionState("t", 0, 0, 30, old)
    for end, committed_ms in ((10, 1_000), (20, 2_000), (30, 250_000)):
        partition.add_commit_time(end, committed_ms)
    state = BackupState(partitions={("t", 0): partition})
    assert [e.dropped for e in plan_expire(state, 5_000)] == [tuple(old[:2])]  # committed at 250 s: kept
    assert [e.dropped for e in plan_expire(state, 250_001)] == [tuple(old)]
    # Merged by a compact, offsets 0..29 in one object: it holds offsets committed at 250 s.
    partition.objects = [object_at(0, 29, 0, 199)]
    assert plan_expire(state, 5_000) == [] and plan_expire(state, 250_001)[0].new_start == 30
    # Commits within a minute of the first of a run share its entry, with the later time.
    partition.add_commit_time(40, 260_000)
    assert partition.commit_times == [(20, 1_000, 2_000), (40, 250_000, 260_000)]
    assert partition.committed_ms(0, 9) == 2_000 and partition.committed_ms(25, 25) == 260_000
