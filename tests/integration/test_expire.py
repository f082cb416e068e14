"""`topicvault expire --before TIME`: whole old objects dropped in a commit that moves each
partition's start; ls, verify and restore agree; never a record at or after TIME."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from archivetools import HOUR, T0, backdate_commits
from clitools import CLI, assert_one_line_error, run_cli
from kafkatools import consume_all, produce_records
from topicvault.core.archive.commits import fold_commits
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LocalStore


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
