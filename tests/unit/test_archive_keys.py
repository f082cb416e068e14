"""Every key under `_topicvault/` is named in core.archive.archive_keys, and the real writers use those names."""

from __future__ import annotations

import ast
from pathlib import Path

from archivetools import HOUR, backdate_commits, run_compact, run_expire
from topicvault.core.archive import archive_keys
from topicvault.core.archive.archive_keys import KEY_KINDS, STATE_PREFIX, kind_of
from topicvault.core.archive.checkpoints import CHECKPOINT_INTERVAL, load_state
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.formats import resolve_format
from topicvault.keys import default_codec
from topicvault.sink.backup_datasource import commit_written
from topicvault.sink.objects import write_objects
from topicvault.source.maintenance.compact import CompactJob

PACKAGE_ROOT = Path(archive_keys.__file__).resolve().parents[2]  # core/archive/ -> the package
T0 = 1_700_000_000_000


class RecordingStore(LocalStore):
    """A directory store that remembers every key written; optionally ignoring If-None-Match and
    If-Match, as some S3-compatible stores do (committers then take commit turns)."""

    def __init__(self, uri: str, honours_conditions: bool = True) -> None:
        super().__init__(uri)
        self.honours_conditions = honours_conditions
        self.written: set[str] = set()

    def put(self, key, data, *, if_none_match=False, if_match=None):
        self.written.add(key)
        if not self.honours_conditions:
            return super().put(key, data)
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)


def compact_job(store: LocalStore) -> CompactJob:
    """A compact of this store object (so its writes are recorded), with no grace."""

    class CompactOf(CompactJob):
        def open_store(self) -> LocalStore:
            return store

    return CompactOf(store_uri=store.uri, grace_ms=0)


def back_up_small_objects(store: LocalStore, commits: int) -> None:
    """`commits` commits of one small object each (topic t, partition 0), as DataFrame writes commit."""
    for n in range(commits):
        state = load_state(store)
        start = state.end_offset("t", 0) or 0
        records = [Record("t", 0, start + i, b"k", b"v%d" % i, T0 + start + i) for i in range(2)]
        entries = write_objects([records_to_batch(records)], store, default_codec(), resolve_format("jsonl"),
                                Rotation(), run_id=f"r{n + 1:012x}")
        commit_written(store, entries, state=state)


def state_keys(written: set[str]) -> set[str]:
    return {key for key in written if key.startswith(STATE_PREFIX)}


def test_every_key_the_writers_put_under_topicvault_is_of_a_named_kind(tmp_path):
    store = RecordingStore(str(tmp_path / "archive"))
    back_up_small_objects(store, CHECKPOINT_INTERVAL)  # commits, a checkpoint and its pointer, the probe
    backdate_commits(tmp_path / "archive", T0 - HOUR)  # as if backed up an hour before its records' times
    assert run_expire(store, T0 + 50, grace_ms=0).commit_key is not None
    assert run_compact(compact_job(store)).commit_key is not None  # merged under a lease
    turns = RecordingStore(str(tmp_path / "turns"), honours_conditions=False)
    back_up_small_objects(turns, 2)  # the store ignores conditions: committers take turns

    written = state_keys(store.written) | state_keys(turns.written)
    assert {key for key in written if kind_of(key) is None} == set()
    # Every kind is written by today's writers, except the restores older versions kept in the archive.
    assert {kind_of(key) for key in written} == set(KEY_KINDS) - {"legacy restore"}


def test_the_named_keys_match_their_own_kinds():
    assert kind_of(archive_keys.commit_key(7)) == "commit"
    assert kind_of(archive_keys.checkpoint_key(50)) == "checkpoint"
    assert kind_of(archive_keys.LAST_CHECKPOINT_KEY) == "checkpoint pointer"
    assert kind_of(archive_keys.lease_key("r0123456789ab")) == "lease"
    assert kind_of(archive_keys.CONDITIONAL_WRITES_KEY) == "conditional writes"
    assert kind_of(archive_keys.probe_key("0123456789ab", "multipart")) == "probe"
    assert kind_of(archive_keys.commit_turn_key("0123456789ab")) == "commit turn"
    assert kind_of(archive_keys.legacy_restore_prefix("nightly") + "state.json") == "legacy restore"
    assert kind_of("topic=t/partition=0/0000000000000000000-r0123456789ab.parquet") is None
    assert kind_of(STATE_PREFIX + "commits/7.json") is None  # not 19 digits: no reader would find it


def test_no_module_but_archive_keys_spells_a_key_under_topicvault():
    """Key names come from core.archive.archive_keys: a string starting `_topicvault/` anywhere else in the
    package (messages and docs may still name the folder) is a key spelled twice."""
    spelled = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        if relative.parts[0] in ("tests", "benchmarks", ".venv") or relative == Path("core/archive/archive_keys.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(STATE_PREFIX):
                spelled.append(f"{relative}:{node.lineno}")
    assert spelled == []
