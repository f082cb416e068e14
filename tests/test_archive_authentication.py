"""An encrypted archive authenticates what it holds (issue #39 item 4): whoever can write the
bucket but holds no key must not be able to swap objects between topics, put plaintext in, or
edit commit records, checkpoints or restore state unnoticed. No broker: the archive is written
by the same writer a backup uses (sink.objects) and committed the way a backup commits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import assert_one_line_error, run_cli
from topicvault.core.commits import COMMITS_PREFIX, BackupState, PartitionRange, next_commit
from topicvault.core.checkpoints import commit_with_checkpoint
from topicvault.core.crypto import Keyring, keyring_of, write_key_file
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.local_store import LocalStore
from topicvault.core.rotation import Rotation
from topicvault.formats import resolve_format
from topicvault.keys import default_codec
from topicvault.sink.objects import write_objects


def key_spec(tmp_path: Path, name: str = "key") -> str:
    write_key_file(str(tmp_path / name))
    return f"file://{tmp_path / name}"


def backed_up(tmp_path: Path, spec: str | None, topics: dict[str, list[bytes]]) -> Path:
    """A location holding one commit of `topics` (partition 0 each: key i, the given values)."""
    location = tmp_path / "archive"
    store = LocalStore(str(location))
    keyring = keyring_of((spec,)) if spec else None
    entries, ranges = [], []
    for topic, values in topics.items():
        records = [Record(topic, 0, i, b"k%d" % i, value, 1_700_000_000_000 + i) for i, value in enumerate(values)]
        entries += write_objects([records_to_batch(records)], store, default_codec(), resolve_format("parquet"),
                                 Rotation(), run_id="r000000000001", keyring=keyring)
        ranges.append(PartitionRange(topic, 0, 0, len(values)))
    state = BackupState()
    commit_with_checkpoint(store, state, next_commit(state, ranges, entries, topics={}))
    return location


def commit_path(location: Path, sequence: int = 1) -> Path:
    return location / COMMITS_PREFIX / f"{sequence:019d}.json"


def swap_public_for_salaries(location: Path) -> None:
    """The attack of the issue: public[0] is made of the salaries object (same key, checksum)."""
    path = commit_path(location)
    body = json.loads(path.read_bytes())
    salaries = next(o for o in body["objects"] if o["topic"] == "salaries")
    body["objects"] = [o for o in body["objects"] if o["topic"] != "public"] + [dict(salaries, topic="public")]
    path.write_text(json.dumps(body, sort_keys=True, indent=1))


TOPICS = {"public": [b"hello", b"world"], "salaries": [b"alice: 250000", b"bob: 240000"]}


def test_an_object_swapped_between_topics_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    assert "hello" in run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec)
    swap_public_for_salaries(location)
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert "alice" not in out and "salaries[0]" not in out
    assert_one_line_error(out)
    out = run_cli("verify", str(location), "--encryption-key", spec, expect_exit=1)
    assert "alice" not in out and "ok" not in out.lower().split()


def test_an_unencrypted_archive_finds_records_of_another_topic(tmp_path):
    location = backed_up(tmp_path, None, TOPICS)
    swap_public_for_salaries(location)
    out = run_cli("inspect", str(location), "--topic", "public", expect_exit=1)
    assert_one_line_error(out, "holds records of salaries[0]", "names it as public[0]")
    assert "alice" not in out


def test_a_plaintext_object_is_refused_when_keys_are_given(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, None, {"public": [b"forged"]})  # written by someone without the key
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert_one_line_error(out, "is not encrypted", "--encryption-key")
    assert "forged" not in out
    assert "forged" in run_cli("inspect", str(location), "--topic", "public")  # without keys: as before
