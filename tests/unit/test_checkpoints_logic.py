"""The pure-logic half of tests/integration/test_checkpoints.py (its docstring covers both halves):
Checkpoints of the folded state: reads that do not grow with history, and correctness first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from archivetools import TOPICS, make_commits
from observetools import audited
from stores import CountingStore, FaultyStore
from topicvault.core.archive.checkpoints import (
    CHECKPOINT_INTERVAL,
    LAST_CHECKPOINT_KEY,
    checkpoint_json,
    checkpoint_key,
    checkpoint_problems,
    load_state,
    read_forward,
    state_fingerprint,
)
from topicvault.core.archive.commits import (
    BackupState,
    CommitRecord,
    ObjectEntry,
    commit_key,
    fold_commits,
)
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.local_store import LocalStore
from topicvault.sink.backup_datasource import ObjectsWritten
from topicvault.sink.stream import ObjectStreamWriter


def test_state_from_checkpoints_equals_the_fold_of_every_commit(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    make_commits(store, 2 * CHECKPOINT_INTERVAL + 7)
    assert store.head(checkpoint_key(CHECKPOINT_INTERVAL)) is not None
    assert store.head(checkpoint_key(2 * CHECKPOINT_INTERVAL)) is not None
    assert json.loads(store.get(LAST_CHECKPOINT_KEY)) == {"sequence": 2 * CHECKPOINT_INTERVAL}
    truth = fold_commits(store)
    assert truth.last_sequence == 2 * CHECKPOINT_INTERVAL + 7
    assert load_state(store) == truth
    # Exactly at a checkpoint, nothing after it.
    exact = LocalStore(str(tmp_path / "exact"))
    make_commits(exact, CHECKPOINT_INTERVAL)
    assert load_state(exact) == fold_commits(exact)


def test_a_micro_batch_commit_that_makes_commit_50_writes_the_checkpoint(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    state = make_commits(store, CHECKPOINT_INTERVAL - 1)
    start = state.end_offset(TOPICS[0], 0)
    entry = ObjectEntry(f"topic={TOPICS[0]}/partition=0/{start:019d}.parquet", TOPICS[0], 0, start, start, 1, 10,
                        0, 0, "00")
    store.put(entry.key, b"object")  # a commit names only objects that exist
    ObjectStreamWriter({"path": store.uri, "streamId": "s2"}).commit([ObjectsWritten([entry])], 0)
    assert store.head(checkpoint_key(CHECKPOINT_INTERVAL)) is not None
    assert load_state(store) == fold_commits(store)
    assert load_state(store).last_stream["id"] == "s2"


def test_reader_reads_the_newest_checkpoint_and_only_later_commits(tmp_path):
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    make_commits(store, 3 * CHECKPOINT_INTERVAL + 4)
    store.calls["get"].clear()
    state = load_state(store)
    assert store.calls["get"] == [LAST_CHECKPOINT_KEY, checkpoint_key(3 * CHECKPOINT_INTERVAL)] + [
        commit_key(3 * CHECKPOINT_INTERVAL + n) for n in range(0, 5)]
    assert state == fold_commits(store)


def test_lagging_or_missing_pointer_still_finds_the_newest_checkpoint(tmp_path):
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    make_commits(store, 2 * CHECKPOINT_INTERVAL + 1)
    store.put(LAST_CHECKPOINT_KEY, json.dumps({"sequence": CHECKPOINT_INTERVAL}).encode())  # a lost pointer update
    store.calls["get"].clear()
    state = load_state(store)
    assert checkpoint_key(2 * CHECKPOINT_INTERVAL) in store.calls["get"]
    assert checkpoint_key(CHECKPOINT_INTERVAL) not in store.calls["get"]
    assert state == fold_commits(store)
    store.delete(LAST_CHECKPOINT_KEY)
    store.calls["get"].clear()
    state = load_state(store)
    assert commit_key(1) not in store.calls["get"]
    assert state == fold_commits(store)


@pytest.mark.parametrize("damage", ["truncated", "digit changed", "garbage pointer", "other history", "deleted"])
def test_damaged_checkpoint_falls_back_to_the_commits(tmp_path, damage):
    store = LocalStore(str(tmp_path / "loc"))
    make_commits(store, CHECKPOINT_INTERVAL + 3)
    key = checkpoint_key(CHECKPOINT_INTERVAL)
    data = store.get(key)
    if damage == "truncated":
        store.put(key, data[: len(data) // 2])
    elif damage == "digit changed":  # valid JSON, wrong state: the checksum catches it
        store.put(key, data.replace(b'"end":', b'"end":1', 1))
    elif damage == "garbage pointer":
        store.put(LAST_CHECKPOINT_KEY, b"\x00not json")
    elif damage == "other history":  # commit 50 replaced by one of the same size: e.g. a reused location
        commit = store.get(commit_key(CHECKPOINT_INTERVAL))
        checksum = f'"sha256": "{CHECKPOINT_INTERVAL:064x}"'.encode()
        assert checksum in commit
        store.put(commit_key(CHECKPOINT_INTERVAL), commit.replace(checksum, checksum.replace(b"0", b"f", 1)))
    else:
        store.delete(key)
    assert load_state(store) == fold_commits(store)
    assert load_state(store).last_sequence == CHECKPOINT_INTERVAL + 3


def test_damaged_commit_after_a_checkpoint_is_still_an_error(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    make_commits(store, CHECKPOINT_INTERVAL + 2)
    store.put(commit_key(CHECKPOINT_INTERVAL + 1), b"{not json")
    with pytest.raises(TopicvaultError, match=r"commit record .*0051\.json is unreadable"):
        load_state(store)


def refuse_checkpoints(key: str, data: bytes) -> None:
    """Writes to _topicvault/checkpoints/ and the pointer fail, as on a bucket policy that denies them."""
    if key.startswith("_topicvault/checkpoints/") or key == LAST_CHECKPOINT_KEY:
        raise TopicvaultError(f"access denied writing {key}")


def test_a_failed_checkpoint_write_never_fails_the_commit(tmp_path):
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), before_put=refuse_checkpoints)
    make_commits(store, CHECKPOINT_INTERVAL + 1)
    assert store.head(commit_key(CHECKPOINT_INTERVAL + 1)) is not None
    assert store.head(checkpoint_key(CHECKPOINT_INTERVAL)) is None
    assert load_state(store) == fold_commits(store)


def test_read_forward_folds_only_new_commits(tmp_path):
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    state = make_commits(store, 3)
    held = load_state(store)
    make_commits(store, 2, state)
    store.calls["get"].clear()
    held = read_forward(store, held)
    assert store.calls["get"] == [commit_key(4), commit_key(5)]
    assert held == fold_commits(store)


def test_every_state_field_is_carried_and_a_new_field_invalidates_old_checkpoints():
    state_fingerprint()  # raises for a field type the checkpoint codec cannot carry

    @dataclasses.dataclass
    class WiderState(BackupState):
        lost: dict[tuple[str, int], list[tuple[int, int]]] = dataclasses.field(default_factory=dict)

    assert state_fingerprint(WiderState) != state_fingerprint(BackupState)


def test_an_intact_but_wrong_checkpoint_is_a_problem_verify_reports(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    make_commits(store, CHECKPOINT_INTERVAL + 2)
    truth = fold_commits(store)
    assert checkpoint_problems(store, truth) == []
    wrong = _fold_up_to(store, CHECKPOINT_INTERVAL)
    objects = wrong.partitions[("orders", 0)].objects  # e.g. a buggy committer lost a checksum
    objects[0] = dataclasses.replace(objects[0], sha256="0" * 64)
    commit = store.get(commit_key(CHECKPOINT_INTERVAL))
    store.put(checkpoint_key(CHECKPOINT_INTERVAL), checkpoint_json(wrong, hashlib.sha256(commit).hexdigest()))
    problems = checkpoint_problems(store, truth)
    assert len(problems) == 1 and "disagrees with the commit records: delete _topicvault/checkpoints/" in problems[0]


def _fold_up_to(store, sequence: int) -> BackupState:
    state = BackupState()
    for n in range(1, sequence + 1):
        state.apply(CommitRecord.from_json(store.get(commit_key(n)), commit_key(n)), commit_key(n))
    for partition in state.partitions.values():
        partition.objects.sort(key=lambda o: o.first_offset)
    return state


def test_local_listing_does_not_read_the_objects(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    store.put("topic=t/partition=0/0000000000000000000.parquet", b"x")
    big = store.root / "topic=t" / "partition=0" / "0000000000000000001.parquet"
    with open(big, "wb") as handle:  # 1 GiB, sparse: hashing it would read 1 GiB of zeros
        handle.truncate(1 << 30)
    with audited("open") as opened:
        listed = list(store.list("topic=t/"))
    assert [i.size for i in listed] == [1, 1 << 30]
    # The sizes come from the directory entries: neither file was opened (hashing them reads them).
    assert not [args for args in opened if "partition=0" in str(args[0])], opened


def test_layout_auto_does_not_list_the_whole_location_when_commits_exist(tmp_path):
    from topicvault.source.peer_layout import resolve_layout

    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    for n in range(200):
        store.put(f"topic=t/partition=0/{n:019d}.parquet", b"x")
    make_commits(store, 3)
    assert resolve_layout(store, "auto", None).name == "topicvault"
    assert store.listed == [commit_key(1)]


@pytest.mark.parametrize("damage", ["unreadable", "of another history"])
def test_a_failing_newest_checkpoint_falls_back_to_the_one_before_not_to_every_commit(tmp_path, damage):
    """#50.16: the newest checkpoint fails its check; the reader uses the one before it and the
    commits after that, and reads no commit the older checkpoint covers."""
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    make_commits(store, 3 * CHECKPOINT_INTERVAL + 4)
    newest = checkpoint_key(3 * CHECKPOINT_INTERVAL)
    if damage == "unreadable":
        store.put(newest, b"{not json")
    else:  # intact, but the commit it names holds other bytes (its history was rewritten)
        body = json.loads(store.get(newest))
        body["commit_sha256"] = "0" * 64
        store.put(newest, json.dumps(body).encode())
    store.calls["get"].clear()
    state = load_state(store)
    older = 2 * CHECKPOINT_INTERVAL
    assert checkpoint_key(older) in store.calls["get"]
    checked = [commit_key(3 * CHECKPOINT_INTERVAL)] if damage == "of another history" else []
    assert [k for k in store.calls["get"] if k.startswith("_topicvault/commits/")] == checked + [
        commit_key(n) for n in range(older, 3 * CHECKPOINT_INTERVAL + 5)]
    assert state == fold_commits(store)
