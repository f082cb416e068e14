"""The pure-logic half of tests/integration/test_gc_beside_runs.py (its docstring covers both halves):
Garbage collection beside a running backup or compact.
"""

from __future__ import annotations

import os
import time

import pytest
from archivetools import GONE, gc_now, run_collection
from stores import CountingStore, FaultyStore, PutsRefused
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commit_log import append
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.archive.leases import LEASE_TTL_MS, LEASES_PREFIX, RunLease, lease_key
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.local_store import LocalStore
from topicvault.core.stores.store import missing_objects
from topicvault.sink.backup_datasource import commit_written

T = "orders"




def entry(first: int, last: int, partition: int = 0, run: str = "r0000000000a1") -> ObjectEntry:
    return ObjectEntry(f"topic={T}/partition={partition}/{first:019d}-{run}.parquet", T, partition, first, last,
                       last - first + 1, 3, 1_000 + first, 1_000 + last, "00")


def stored(store, *entries: ObjectEntry) -> list[ObjectEntry]:
    for e in entries:
        store.put(e.key, b"obj")
    return list(entries)




def test_a_micro_batch_whose_object_gc_deleted_commits_nothing(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    commit_written(store, stored(store, entry(0, 9)))  # a committed history, so GC knows the topic
    batch = stored(store, entry(10, 19), entry(10, 19, partition=1))
    gc_now(store)  # the batch's objects are older than the grace and named by no commit
    assert store.head(batch[0].key) is None
    with pytest.raises(TopicvaultError, match=GONE) as failed:
        commit_written(store, batch)
    assert "\n" not in str(failed.value) and batch[0].key in str(failed.value)
    assert load_state(store).last_sequence == 1  # nothing committed
    # Written again (the rerun), the batch commits.
    assert commit_written(store, stored(store, *batch))
    assert load_state(store).end_offset(T, 0) == 20


def test_append_checks_the_objects_of_every_attempt(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = BackupState()
    ghost = entry(0, 9)  # never written

    def build(current: BackupState) -> CommitRecord:
        return CommitRecord(current.last_sequence + 1, 1, (PartitionRange(T, 0, 0, 10),), (ghost,))

    with pytest.raises(TopicvaultError, match=GONE):
        append(store, state, build)
    assert load_state(store).last_sequence == 0


def test_objects_are_checked_with_one_listing_per_folder(tmp_path):
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    # 8 partitions x 5 objects, beside older objects and other runs' orphans in the same folders.
    mine = [entry(first, first + 9, p) for p in range(8) for first in range(100, 150, 10)]
    stored(store, *mine, *[entry(first, first + 9, p, "r0000000000b2") for p in range(8) for first in (0, 100, 200)])
    store.calls.clear()
    assert missing_objects(store, [e.key for e in mine]) == []
    assert (len(store.calls["list"]), len(store.calls["head"])) == (8, 0)
    store.delete(mine[7].key)
    store.delete(mine[-1].key)
    assert missing_objects(store, [e.key for e in mine]) == sorted([mine[7].key, mine[-1].key])
    assert missing_objects(store, []) == []


def test_a_folder_crowded_between_the_runs_keys_is_checked_by_head_past_a_bound(tmp_path):
    # A template with every partition in one folder: the listing between the first and last
    # key of this run would walk every partition's history; past a bound it stops, HEADs the rest.
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    mine = [f"{T}/{p}-{0:019d}-r0000000000a1.parquet" for p in (0, 9)]
    stored_keys = mine + [f"{T}/{p}-{n:019d}-r0000000000b2.parquet" for p in range(1, 9) for n in range(400)]
    for key in stored_keys:
        store.put(key, b"x")
    store.calls.clear()
    assert missing_objects(store, mine) == []
    assert len(store.calls["head"]) <= 1  # the first key was listed; the second was past the bound
    store.delete(mine[1])
    assert missing_objects(store, mine) == [mine[1]]


def test_a_live_lease_spares_its_runs_orphans_and_an_expired_one_is_deleted_after_the_grace(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    commit_written(store, stored(store, entry(0, 9)))  # a committed history, so GC knows the topic
    running, killed = entry(10, 19, run="r00000000000b"), entry(10, 19, partition=1, run="r00000000000c")
    leases = store.root / "_topicvault" / "leases"
    now = int(time.time() * 1000) + 60_000
    with RunLease(store, "r00000000000b"):
        store.put(lease_key("r00000000000c"), b"{}")  # a run killed later: its lease stays, not renewed
        stored(store, running, killed)
        kept = run_collection(store, load_state(store), grace_ms=0, now_ms=now)
        assert kept.orphans == [] and kept.waiting == 2  # both runs' leases are live
        # Ten minutes on (c's lease aged; b's renewed meanwhile): c's object is an orphan now.
        os.utime(leases / "r00000000000c", (time.time() - LEASE_TTL_MS / 1000,) * 2)
        gone = run_collection(store, load_state(store), grace_ms=0, now_ms=now)
        assert gone.orphans == [killed.key] and store.head(running.key) is not None
        assert sorted(p.name for p in leases.iterdir()) == ["r00000000000b"]  # and its expired lease (grace 0)
        # With a grace, an expired lease stays until it has been expired that long.
        os.utime(leases / "r00000000000b", (time.time() - LEASE_TTL_MS / 1000,) * 2)
        run_collection(store, load_state(store), grace_ms=3_600_000, now_ms=now)
        assert sorted(p.name for p in leases.iterdir()) == ["r00000000000b"]
    assert not list(store.list(LEASES_PREFIX))  # the run ended: its lease is deleted


def test_a_lease_is_renewed_while_its_run_goes_on(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    lease = store.root / "_topicvault" / "leases" / "r00000000000d"
    with RunLease(store, "r00000000000d", renew_every_s=0.05):
        stale_ns = time.time_ns() - LEASE_TTL_MS * 1_000_000
        os.utime(lease, ns=(stale_ns, stale_ns))  # as if it had not been renewed for long
        deadline = time.monotonic() + 30
        while lease.stat().st_mtime_ns == stale_ns:  # until the lease object is written again
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError("the lease was not renewed within 30 s")
            time.sleep(0.05)
        assert lease.stat().st_mtime_ns > stale_ns, "the lease was not renewed"
    assert not lease.exists()


def test_a_lease_renewal_that_fails_is_reported_once_and_its_recovery_too(tmp_path, caplog):
    refused = PutsRefused()
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), before_put=refused)
    with caplog.at_level("WARNING", logger="topicvault.core.archive.leases"):
        with RunLease(store, "r00000000000e", renew_every_s=0.02):
            deadline = time.monotonic() + 30
            while refused.puts < 6 and time.monotonic() < deadline:
                time.sleep(0.02)
            refused.healed = True
            while not any("renewed again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.02)
    failed = [r.getMessage() for r in caplog.records if "not renewed" in r.getMessage()]
    # One line for the whole streak of failures, naming the error and what it risks.
    assert len(failed) == 1, failed
    assert "AccessDenied" in failed[0] and "--grace" in failed[0] and "r00000000000e" in failed[0]
    assert any("renewed again" in r.getMessage() for r in caplog.records)


def test_a_gc_reads_the_state_again_while_it_deletes_and_spares_what_was_committed_meanwhile(tmp_path):
    from topicvault.source.maintenance.garbage import DELETES_PER_STATE_READ

    plain = LocalStore(str(tmp_path / "loc"))
    commit_written(plain, stored(plain, entry(0, 9)))
    orphans = stored(plain, *[entry(first, first, run="r0000000000b2") for first in range(1000, 1000 + DELETES_PER_STATE_READ)])
    racing = stored(plain, entry(0, 9, partition=1))[0]  # lists after partition 0's orphans
    pending = [racing]

    def commit_racing_run(key: str) -> None:  # the run commits its object at the GC's first delete
        if pending:
            commit_written(LocalStore(plain.uri), [pending.pop()])

    store = FaultyStore(LocalStore(plain.uri), before_delete=commit_racing_run)
    collected = run_collection(store, load_state(store), grace_ms=0, now_ms=int(time.time() * 1000) + 60_000)
    assert load_state(plain).end_offset(T, 1) == 10  # the racing run committed
    assert missing_objects(plain, [racing.key]) == [], "a committed object was deleted"
    assert collected.orphans == [o.key for o in orphans]
    assert missing_objects(plain, [o.key for o in orphans]) == [o.key for o in orphans]


def test_missing_objects_are_sorted_across_nested_folders(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    keys = ["a/a", "a/b/x", "a/c", "a/b/y"]
    assert missing_objects(store, keys) == sorted(keys)
    store.put("a/b/x", b"x")
    assert missing_objects(store, keys) == ["a/a", "a/b/y", "a/c"]


def test_a_directory_answers_which_objects_are_missing_like_a_listing_does(tmp_path):
    # A commit checks that its objects still exist; a directory does it with a stat per key
    # (listing 256 partition folders took 80 ms of a wide backup's commit).
    store = LocalStore(str(tmp_path / "loc"))
    keys = ["a/a", "a/b/x", "a/c", "a/b/y", "a/b", "z", "a/c"]
    for key in ("a/b/x", "a/c", "z"):
        store.put(key, key.encode())
    expected = ["a/a", "a/b", "a/b/y"]  # "a/b" is a folder here, not an object
    assert store.missing(keys) == missing_objects(store, keys) == expected
    assert store.missing([]) == []


def test_a_dry_run_counts_what_its_run_would_retire_as_retired_now(tmp_path):
    # A dry compact or expire has not written the commit that would retire its objects: they
    # count as retired at `now`, so with no grace they are deleted, as the real run deletes them.
    store = LocalStore(str(tmp_path / "loc"))
    commit_written(store, stored(store, entry(0, 9), entry(10, 19)))
    now = int(time.time() * 1000)
    dry = run_collection(store, load_state(store), 0, now, dry_run=True, would_retire=[entry(0, 9).key])
    assert (dry.retired, dry.orphans, dry.waiting) == ([entry(0, 9).key], [], 0)
    later = run_collection(store, load_state(store), 60_000, now, dry_run=True, would_retire=[entry(0, 9).key])
    assert (later.retired, later.waiting) == ([], 1)
    with pytest.raises(ValueError):
        run_collection(store, load_state(store), 0, now, would_retire=[entry(0, 9).key])
    assert store.head(entry(0, 9).key) is not None
