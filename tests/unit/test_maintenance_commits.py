"""Commits that remove objects (compact) or move a partition's start (expire): folding, old
readers, checkpoints and racing committers. Pure logic over a local directory store."""

from __future__ import annotations

import json

import pytest
from archivetools import T, backup, commit, entry, three_small_objects
from stores import FaultyStore
from topicvault.core.archive.checkpoints import CHECKPOINT_INTERVAL, load_state
from topicvault.core.archive.commit_log import append
from topicvault.core.archive.commits import (
    BackupState,
    CommitRecord,
    PartitionRange,
    PartitionStart,
    RemovedObject,
    commit_key,
    fold_commits,
)
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.local_store import LocalStore


def test_a_compact_commit_replaces_objects_and_remembers_them_as_retired(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = three_small_objects(store)
    merged = entry(0, 29, "r00000000000c")
    record = CommitRecord(4, 99_000, (), (merged,), kind="compact",
                          removed=tuple(RemovedObject(T, 0, o.key) for o in state.partitions[(T, 0)].objects))
    commit(store, state, record)
    folded = fold_commits(store)
    assert folded.partitions[(T, 0)].objects == [merged]
    assert (folded.partitions[(T, 0)].start, folded.partitions[(T, 0)].end) == (0, 30)
    assert folded.retired == {entry(f, f + 9).key: 99_000 for f in (0, 10, 20)}
    assert folded.last_stream == {"id": "s", "batch": 20}, "a compact must not hide the follower's last batch"
    assert load_state(store) == folded == state


def test_forgotten_retirees_leave_the_state(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = three_small_objects(store)
    commit(store, state, CommitRecord(4, 4, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                                      removed=(RemovedObject(T, 0, entry(0, 9).key), RemovedObject(T, 0, entry(10, 19).key))))
    commit(store, state, CommitRecord(5, 5, (), (), kind="compact", forgotten=(entry(0, 9).key,)))
    assert fold_commits(store).retired == {entry(10, 19).key: 4} == load_state(store).retired


def test_an_expire_commit_moves_the_start_and_clips_lost_ranges(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = BackupState()
    commit(store, state, CommitRecord(1, 1, (PartitionRange(T, 0, 0, 10),), (entry(5, 9),), {},
                                      lost=(PartitionRange(T, 0, 0, 5),)))
    commit(store, state, backup(state, [entry(10, 19)]))
    commit(store, state, CommitRecord(3, 3, (), (), kind="expire", removed=(RemovedObject(T, 0, entry(5, 9).key),),
                                      starts=(PartitionStart(T, 0, 10),)))
    folded = fold_commits(store)
    assert (folded.partitions[(T, 0)].start, folded.partitions[(T, 0)].end) == (10, 20)
    assert folded.partitions[(T, 0)].lost == [] and folded.partitions[(T, 0)].lost_notes() == []
    assert [o.key for o in folded.partitions[(T, 0)].objects] == [entry(10, 19).key]
    # A backup continues at the end, as before.
    commit(store, state, backup(state, [entry(20, 29)]))
    assert load_state(store).partitions[(T, 0)].end == 30


@pytest.mark.parametrize("bad", ["removes an object it does not hold", "starts past a kept object"])
def test_inconsistent_maintenance_commits_are_refused(tmp_path, bad):
    store = LocalStore(str(tmp_path / "loc"))
    three_small_objects(store)
    record = (CommitRecord(4, 4, (), (), kind="compact", removed=(RemovedObject(T, 0, entry(1, 9).key),))
              if bad.startswith("removes") else
              CommitRecord(4, 4, (), (), kind="expire", starts=(PartitionStart(T, 0, 15),)))
    store.put(commit_key(4), record.to_json())
    with pytest.raises(TopicvaultError, match="inconsistent"):
        fold_commits(store)


def test_old_readers_refuse_maintenance_commits_and_still_read_backups():
    plain = json.loads(backup(BackupState(), [entry(0, 9)]).to_json())
    maintenance = json.loads(CommitRecord(2, 2, (), (), kind="compact",
                                          removed=(RemovedObject(T, 0, entry(0, 9).key),)).to_json())
    # topicvault before maintenance commits accepted format_version == 1 only.
    assert plain["format_version"] == 1 and "kind" not in plain and "removed" not in plain
    assert maintenance["format_version"] == 2


def test_checkpoints_carry_removals_and_starts(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = BackupState()
    for _ in range(CHECKPOINT_INTERVAL - 2):
        commit(store, state, backup(state, [entry(state.end_offset(T, 0) or 0, (state.end_offset(T, 0) or 0) + 9)]))
    first_two = state.partitions[(T, 0)].objects[:2]
    commit(store, state, CommitRecord(state.last_sequence + 1, 7, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                                      removed=tuple(RemovedObject(T, 0, o.key) for o in first_two)))
    commit(store, state, CommitRecord(state.last_sequence + 1, 8, (), (), kind="expire",
                                      removed=(RemovedObject(T, 0, entry(0, 19, "r00000000000c").key),),
                                      starts=(PartitionStart(T, 0, 20),)))
    assert state.last_sequence == CHECKPOINT_INTERVAL
    assert store.head(f"_topicvault/checkpoints/{CHECKPOINT_INTERVAL:019d}.json") is not None
    truth = fold_commits(store)
    assert load_state(store) == truth
    assert truth.partitions[(T, 0)].start == 20 and truth.retired[entry(0, 19, "r00000000000c").key] == 8


def test_append_rebuilds_after_losing_the_race_and_keeps_the_winners_objects(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = three_small_objects(store)
    stale = load_state(store)
    commit(store, state, backup(state, [entry(30, 39)]))  # a follower's batch lands first
    built_on = []

    def build(current: BackupState) -> CommitRecord:
        built_on.append(current.last_sequence)
        return CommitRecord(current.last_sequence + 1, 5, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                            removed=(RemovedObject(T, 0, entry(0, 9).key), RemovedObject(T, 0, entry(10, 19).key)))

    store.put(entry(0, 19, "r00000000000c").key, b"merged")  # a commit names only objects that exist
    record = append(store, stale, build)
    assert built_on == [3, 4] and record.key == commit_key(5)
    assert [o.key for o in fold_commits(store).partitions[(T, 0)].objects] == [
        entry(0, 19, "r00000000000c").key, entry(20, 29).key, entry(30, 39).key]




def test_a_follower_batch_that_loses_its_commit_slot_to_a_compact_commits_after_it(tmp_path, monkeypatch):
    from topicvault.sink import stream
    from topicvault.sink.backup_datasource import ObjectsWritten

    local = LocalStore(str(tmp_path / "loc"))
    races = [CommitRecord(4, 4, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                          removed=(RemovedObject(T, 0, entry(0, 9).key), RemovedObject(T, 0, entry(10, 19).key)))]

    def compact_commits_first(key: str, data: bytes) -> None:  # right before the next commit record lands
        if key.startswith("_topicvault/commits/") and races:
            race = races.pop()
            local.put(commit_key(race.sequence), race.to_json(), if_none_match=True)

    store = FaultyStore(local, before_put=compact_commits_first)
    state = three_small_objects(local)
    monkeypatch.setattr(stream, "open_store", lambda uri, options=None: store)  # this very store
    writer = stream.ObjectStreamWriter({"path": store.uri, "streamId": "s2"})
    store.put(entry(30, 39).key, b"batch")  # a commit names only objects that exist
    writer.commit([ObjectsWritten([entry(30, 39)])], 7)
    folded = fold_commits(store)
    assert folded.last_sequence == 5 and folded.last_stream["batch"] == 7
    assert [o.key for o in folded.partitions[(T, 0)].objects] == [
        entry(0, 19, "r00000000000c").key, entry(20, 29).key, entry(30, 39).key]
    assert state.last_sequence == 3
