"""The pure-logic half of tests/integration/test_conditional_writes.py (its docstring covers both halves):
Stores that ignore conditional writes never lose a commit (issue #34 items 1 and 7).
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest
from archivetools import T, backup, commit, entry, three_small_objects
from clocktools import SteppedClock
from stores import FaultyStore, PutsRefused
from topicvault.core.archive import conditional_writes as cw
from topicvault.core.archive.archive_keys import CONDITIONAL_WRITES_KEY, commit_key
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commit_log import append
from topicvault.core.archive.commits import BackupState, CommitRecord, RemovedObject, fold_commits
from topicvault.core.errors import PreconditionFailed, TopicvaultError
from topicvault.core.stores.local_store import LocalStore


def condition_dropping_store(uri: str) -> FaultyStore:
    """A directory store that ignores If-None-Match and If-Match, as some S3-compatible stores do:
    every put simply replaces the object (`.puts`: the keys put)."""
    return FaultyStore(LocalStore(uri), drop_conditions=True)


def compact_of_the_first_two(current: BackupState) -> CommitRecord:
    return CommitRecord(current.last_sequence + 1, 5, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                        removed=(RemovedObject(T, 0, entry(0, 9).key), RemovedObject(T, 0, entry(10, 19).key)))


def test_a_directory_store_honours_the_condition_and_the_answer_is_remembered(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    found = cw.conditional_writes(store)
    assert found.holds and found.put and found.multipart is None
    assert json.loads(store.get(CONDITIONAL_WRITES_KEY))["put"] is True
    # Probe objects are removed: only the remembered answer stays under _topicvault/.
    assert [i.key for i in store.list("_topicvault/")] == [CONDITIONAL_WRITES_KEY]


def test_a_store_that_ignores_the_condition_is_found_out_once(tmp_path):
    store = condition_dropping_store(str(tmp_path / "loc"))
    found = cw.conditional_writes(store)
    assert not found.holds and not found.put
    assert "If-None-Match" in found.behaviour()
    puts = len(store.puts)
    assert cw.conditional_writes(store) == found  # read back, not probed again
    assert len(store.puts) == puts


def test_a_store_that_ignores_the_condition_only_on_multipart_uploads_is_found_out(tmp_path):
    found = cw.conditional_writes(FaultyStore(LocalStore(str(tmp_path / "loc")), drop_conditions="multipart"))
    assert found.put and found.multipart is False and not found.holds
    assert "multipart" in found.behaviour()


def test_a_compact_on_a_stale_state_never_replaces_a_followers_commit(tmp_path):
    """The reproduction of item 1: without turns the compact's commit 4 replaced the follower's."""
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    stale = load_state(store)  # the compact reads the state ...
    commit(store, state, backup(state, [entry(30, 39)], stream={"id": "f", "batch": 3}))  # ... a batch lands ...
    store.put(entry(0, 19, "r00000000000c").key, b"merged")
    record = append(store, stale, compact_of_the_first_two)
    key = record.key  # ... and the compact commits
    assert key == commit_key(5) and record.sequence == 5
    folded = fold_commits(store)
    assert [o.key for o in folded.partitions[(T, 0)].objects] == [
        entry(0, 19, "r00000000000c").key, entry(20, 29).key, entry(30, 39).key]
    assert (folded.partitions[(T, 0)].start, folded.partitions[(T, 0)].end) == (0, 40)
    assert not list(store.list(cw.COMMIT_TURNS_PREFIX))  # the turn is given back


@contextmanager
def turn_held(store) -> Iterator[threading.Event]:
    """Another committer holds the commit turn (on a thread) until the event yielded is set, or the
    block ends."""
    took_turn, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cw.CommitTurn(store):
            took_turn.set()
            release.wait(120)  # a hang detector: the test sets it

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        if not took_turn.wait(120):
            raise TimeoutError("the holder never took the turn in 120 s")
        yield release
    finally:
        release.set()
        holder.join()


def test_committers_take_turns_and_wait_for_the_one_committing(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    three_small_objects(store)
    store.put(entry(30, 39).key, b"batch")
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.05)
    committer = threading.current_thread()
    tries, committed_after_release, put = [], [], store.put

    def put_in_turn(key: str, data: bytes, **conditions) -> None:
        if threading.current_thread() is committer and key.startswith(cw.COMMIT_TURNS_PREFIX):
            tries.append(key)
            if len(tries) == 2:  # it found the turn taken and tried again: now the holder finishes
                release.set()
        if key == commit_key(4):
            committed_after_release.append(release.is_set())
        put(key, data, **conditions)

    monkeypatch.setattr(store, "put", put_in_turn)
    with turn_held(store) as release:
        key = append(store, load_state(store), lambda s: backup(s, [entry(30, 39)])).key
    assert key == commit_key(4)
    assert committed_after_release == [True], "it committed while another committer held the turn"
    assert len(tries) >= 2  # it waited for the holder: tried, gave the turn back, tried again


def test_a_turn_held_for_too_long_is_a_one_line_refusal_naming_the_store_behaviour(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    monkeypatch.setattr(cw, "TURN_WAIT_S", 0.5)
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.05)
    with turn_held(store), pytest.raises(TopicvaultError) as failed:
        append(store, state, lambda s: backup(s, [entry(30, 39)]))
    message = str(failed.value)
    assert "\n" not in message and "If-None-Match" in message and "nothing was committed" in message
    assert fold_commits(store).last_sequence == 3


def test_a_killed_committers_turn_expires_once_seen_unchanged_for_its_ttl(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    store.put(entry(30, 39).key, b"batch")
    killed = cw.COMMIT_TURNS_PREFIX + "c0123456789ab"
    store.put(killed, b'{"renewed_ms": 1}')  # a killed run's
    # The real TTL and renewal period: the clock moves only by the committer's own waits.
    clock = SteppedClock()
    monkeypatch.setattr(cw, "time", clock)
    first_seen, removed_at, delete = clock.now, [], store.delete

    def delete_and_note(key: str) -> None:
        if key == killed:
            removed_at.append(clock.now)
        delete(key)

    monkeypatch.setattr(store, "delete", delete_and_note)
    key = append(store, state, lambda s: backup(s, [entry(30, 39)])).key
    assert key == commit_key(4)
    # It waited for the killed run's turn to expire: removed once seen unchanged for the TTL.
    assert len(removed_at) == 1 and removed_at[0] - first_seen >= cw.TURN_TTL_S, (removed_at, first_seen)
    assert not list(store.list(cw.COMMIT_TURNS_PREFIX))


def test_where_the_condition_holds_no_turn_is_taken(tmp_path):
    store = condition_dropping_store(str(tmp_path / "loc"))
    store.put(CONDITIONAL_WRITES_KEY, json.dumps({"put": True, "multipart": None, "probed_ms": 1,
                                                  "store": store.identity()}).encode())
    state = three_small_objects(store)
    store.puts.clear()
    store.put(entry(30, 39).key, b"batch")
    append(store, state, lambda s: backup(s, [entry(30, 39)]))
    assert not any(k.startswith(cw.COMMIT_TURNS_PREFIX) for k in store.puts)


def test_a_batch_whose_rows_start_past_the_committed_end_fails_whatever_allow_offset_gaps_says(tmp_path, monkeypatch):
    """The follower's next batch after its lost commit: rows from 40 onto a committed end of 30."""
    from topicvault.sink import stream
    from topicvault.sink.backup_datasource import ObjectsWritten

    store = LocalStore(str(tmp_path / "loc"))
    three_small_objects(store)
    monkeypatch.setattr(stream, "open_store", lambda uri, options=None: store)
    writer = stream.ObjectStreamWriter({"path": store.uri, "streamId": "f", "allowOffsetGaps": "true"})
    store.put(entry(40, 49).key, b"batch")
    with pytest.raises(TopicvaultError) as failed:
        writer.commit([ObjectsWritten([entry(40, 49)])], 4)
    message = str(failed.value)
    assert "\n" not in message and "30..39" in message and "nothing was committed" in message
    assert fold_commits(store).last_sequence == 3


def reply_lost(key: str, data: bytes) -> None:
    """The commit record lands, but its reply is lost: the retried put finds the object there
    (PreconditionFailed)..."""
    if key.startswith("_topicvault/commits/"):
        raise PreconditionFailed(f"conditional write of {key} failed (PreconditionFailed)")


def confirming_read_fails(key: str) -> None:
    """...and the read that would confirm it is ours fails too."""
    if key.startswith("_topicvault/commits/"):
        raise TopicvaultError(f"S3 endpoint timed out on {key}: raise store option read_timeout")


def test_a_commit_whose_reply_and_confirming_read_were_lost_says_the_outcome_is_unknown(tmp_path):
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), after_put=reply_lost, before_get=confirming_read_fails)
    store.put(entry(0, 9).key, b"objects")
    with pytest.raises(TopicvaultError) as failed:
        append(store, BackupState(), lambda s: backup(s, [entry(0, 9)]))
    message = str(failed.value)
    assert "\n" not in message and "nothing" not in message
    assert "unknown" in message and "safe" in message
    assert LocalStore(store.uri).head(commit_key(1)) is not None  # it was committed


def test_an_answer_copied_with_the_location_to_a_store_that_ignores_the_condition_is_probed_again(tmp_path):
    # #50.8: conditional-writes.json copied (a mirror, aws s3 sync) kept saying "honoured" on a
    # store that ignores If-None-Match, so no turns were taken there.
    import shutil

    from clitools import run_cli
    from topicvault.core.archive.commits import ObjectEntry, PartitionRange, write_commit

    original = LocalStore(str(tmp_path / "honours"))
    write_commit(original, CommitRecord(1, 0, (PartitionRange("t", 0, 0, 1),),
                                        (ObjectEntry("topic=t/partition=0/0.jsonl", "t", 0, 0, 0, 1, 1, 0, 0, "00"),)))
    assert cw.conditional_writes(original).holds
    shutil.copytree(tmp_path / "honours", tmp_path / "copy")
    copy = condition_dropping_store(str(tmp_path / "copy"))
    assert "probed on another store" in run_cli("ls", str(tmp_path / "copy"))  # ls says so, and writes nothing
    found = cw.conditional_writes(copy)
    assert not found.holds  # probed again: turns are taken there
    assert found.store == copy.identity() != original.identity()
    puts = len(copy.puts)
    assert cw.conditional_writes(copy) == found and len(copy.puts) == puts  # probed once
    assert "ignores If-None-Match" in run_cli("ls", str(tmp_path / "copy"))
    assert "honours If-None-Match (probed on this store" in run_cli("ls", str(tmp_path / "honours"))


def test_a_turn_renewal_that_fails_is_reported_once_and_its_recovery_too_as_a_leases(tmp_path, caplog, monkeypatch):
    # Issue #49.4: a commit turn is renewed and given back by the run lease's mechanism (RenewedObject).
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.02)
    refused = PutsRefused()
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), before_put=refused)
    with caplog.at_level("WARNING", logger="topicvault.core.archive.conditional_writes"):
        with cw.CommitTurn(store) as turn:
            deadline = time.monotonic() + 30  # hang detectors, not speed checks
            while refused.puts < 6 and time.monotonic() < deadline:
                time.sleep(0.02)
            refused.healed = True
            while not any("renewed again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.02)
    failed = [r.getMessage() for r in caplog.records if "not renewed" in r.getMessage()]
    assert refused.puts >= 6 and len(failed) == 1, failed  # one line for the whole streak
    assert "AccessDenied" in failed[0] and turn.key in failed[0]
    assert any("renewed again" in r.getMessage() for r in caplog.records)
    assert store.head(turn.key) is None  # given back
