"""The pure-logic half of tests/integration/test_expire.py (its docstring covers both halves):
`topicvault expire --before TIME`: whole old objects dropped in a commit that moves each partition's start; ls, verify and restore agree; never a record at or after TIME.
"""

from __future__ import annotations

from archivetools import HOUR, T0, backdate_commits, run_expire
from clitools import assert_one_line_error, run_cli
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionState
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.maintenance.expire import ExpireFacts, plan_expire


def expiries(state: BackupState, before_ms: int) -> list:
    """What plan_expire drops of `state` at `before_ms`, per partition."""
    return list(plan_expire(ExpireFacts(state), before_ms).expiries)


def object_at(first: int, last: int, min_ts: int, max_ts: int) -> ObjectEntry:
    return ObjectEntry(f"topic=t/partition=0/{first:019d}-r000000000001.parquet", "t", 0, first, last,
                       last - first + 1, 10, min_ts, max_ts, "00")


def test_expire_drops_the_longest_prefix_of_objects_wholly_older_than_time():
    objects = [object_at(0, 9, 0, 99), object_at(10, 19, 100, 199), object_at(22, 29, 50, 300),  # one young record
               object_at(30, 39, 10, 20)]  # old, but after a young one: kept
    state = BackupState(partitions={("t", 0): PartitionState("t", 0, 0, 40, objects, commit_times=[(40, 0, 0)])})
    assert expiries(state, 100) == [type(expiries(state, 100)[0])("t", 0, tuple(objects[:1]), 10)]
    (expiry,) = expiries(state, 200)
    assert expiry.dropped == tuple(objects[:2]) and expiry.new_start == 20
    assert expiries(state, 300) == expiries(state, 200), "an object holding a record at TIME stays"
    assert expiries(state, 0) == []
    assert expiries(state, 301)[0].new_start == 40


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
    from topicvault.sink.backup_datasource import commit_written

    store = LocalStore(str(tmp_path / "loc"))
    objects = [ObjectEntry(f"topic=t/partition=0/{first:019d}-r000000000001.parquet", "t", 0, first, first + 9,
                           10, 3, T0 + first, T0 + first + 9, "00") for first in (0, 10, 20)]
    for entry in objects:
        store.put(entry.key, b"obj")
    commit_written(store, objects)
    backdate_commits(tmp_path / "loc", T0 - HOUR)
    real_time = time.time
    monkeypatch.setattr(commit_log, "time", types.SimpleNamespace(time=lambda: real_time() + 1.0))
    dry = run_expire(store, T0 + 20, grace_ms=0, dry_run=True)
    assert dry.collected.retired == [objects[0].key, objects[1].key], "the dry run says what the run deletes"
    assert all(store.head(e.key) is not None for e in objects)
    result = run_expire(store, T0 + 20, grace_ms=0)
    assert result.collected.retired == [objects[0].key, objects[1].key]
    assert [store.head(e.key) is None for e in objects] == [True, True, False]


def test_expire_keeps_an_object_holding_offsets_committed_after_time_even_if_compacted_with_older_ones():
    old = [object_at(0, 9, 0, 99), object_at(10, 19, 100, 199), object_at(20, 29, 100, 199)]
    partition = PartitionState("t", 0, 0, 30, old)
    for end, committed_ms in ((10, 1_000), (20, 2_000), (30, 250_000)):
        partition.add_commit_time(end, committed_ms)
    state = BackupState(partitions={("t", 0): partition})
    assert [e.dropped for e in expiries(state, 5_000)] == [tuple(old[:2])]  # committed at 250 s: kept
    assert [e.dropped for e in expiries(state, 250_001)] == [tuple(old)]
    # Merged by a compact, offsets 0..29 in one object: it holds offsets committed at 250 s.
    partition.objects = [object_at(0, 29, 0, 199)]
    assert expiries(state, 5_000) == [] and expiries(state, 250_001)[0].new_start == 30
    # Commits within a minute of the first of a run share its entry, with the later time.
    partition.add_commit_time(40, 260_000)
    assert partition.commit_times == [(20, 1_000, 2_000), (40, 250_000, 260_000)]
    assert partition.committed_ms(0, 9) == 2_000 and partition.committed_ms(25, 25) == 260_000
