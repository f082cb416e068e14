"""`topicvault verify`: passes on a good backup, names the object when one is altered or deleted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clitools import assert_one_line_error, run_cli
from damagetools import PLACES, flipped
from kafkatools import produce_records
from nasty import nasty_records

COMMIT = Path("_topicvault") / "commits" / "0000000000000000001.json"


@pytest.fixture
def backed_up(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="verify")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 60, seed=5, big_values=0))
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "25")
    keys = [o["key"] for o in json.loads((location / COMMIT).read_text())["objects"]]
    assert len(keys) >= 6
    return topic, location, keys


def test_verify_passes_on_a_good_backup(bootstrap, backed_up):
    topic, location, keys = backed_up
    out = run_cli("verify", str(location))
    assert f"ok: {len(keys)} objects, 120 records in 2 partitions" in out
    out = run_cli("verify", str(location), "-b", bootstrap)
    assert "2 partitions match the live topics" in out


def test_verify_names_an_altered_object(backed_up):
    _, location, keys = backed_up
    path = location / keys[3]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    out = run_cli("verify", str(location), expect_exit=1)
    assert keys[3] in out and "checksum" in out
    assert all(key not in out for key in keys if key != keys[3])


def test_verify_names_a_deleted_object(backed_up):
    _, location, keys = backed_up
    (location / keys[1]).unlink()
    out = run_cli("verify", str(location), expect_exit=1)
    assert keys[1] in out


def test_verify_finds_a_backup_that_differs_from_the_live_topic(bootstrap, backed_up):
    # A record altered AND its commit entry updated to match: the objects are consistent, so
    # only the comparison with the live topic can tell.
    topic, location, keys = backed_up
    path = location / keys[0]
    table = pq.read_table(path)
    values = table.column("value").to_pylist()
    values[2] = b"tampered"
    table = table.set_column(table.schema.get_field_index("value"), "value", [values])
    pq.write_table(table, path)
    commit = json.loads((location / COMMIT).read_text())
    entry = next(o for o in commit["objects"] if o["key"] == keys[0])
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (location / COMMIT).write_text(json.dumps(commit))

    assert "ok:" in run_cli("verify", str(location))
    out = run_cli("verify", str(location), "-b", bootstrap, expect_exit=1)
    assert f"{topic}[{entry['partition']}]: offsets" in out and "differ from the live topic" in out


# --- damaged files under _topicvault/ that readers work around (issue 38) -----------------------

def _plant_checkpoint(location: Path) -> tuple[Path, Path]:
    """A checkpoint after commit 1 and its pointer, as a committer writes them at commit 50."""
    from topicvault.core.archive.checkpoints import LAST_CHECKPOINT_KEY, checkpoint_json, checkpoint_key
    from topicvault.core.archive.commits import fold_commits
    from topicvault.core.stores.local_store import LocalStore

    store = LocalStore(str(location))
    sha = hashlib.sha256((location / COMMIT).read_bytes()).hexdigest()
    store.put(checkpoint_key(1), checkpoint_json(fold_commits(store), sha))
    store.put(LAST_CHECKPOINT_KEY, json.dumps({"sequence": 1}).encode())
    return location / checkpoint_key(1), location / LAST_CHECKPOINT_KEY


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["checkpoint", "pointer", "restore state", "legacy restore state"])
def test_verify_names_each_damaged_file_and_strict_fails(bootstrap, backed_up, tmp_path, damage):
    topic, location, keys = backed_up
    checkpoint, pointer = _plant_checkpoint(location)
    state = tmp_path / "restore-state"
    assert "warning" not in run_cli("verify", str(location), "--state", str(state), "--strict")
    if damage == "checkpoint":
        _flip_a_byte(checkpoint)
        named = str(checkpoint.relative_to(location))
    elif damage == "pointer":
        pointer.write_bytes(b'{"sequence": 1')  # cut short, as by an interrupted upload
        named = str(pointer.relative_to(location))
    elif damage == "restore state":
        run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
                "--restore-id", "r1", "--state", str(state))
        [saved] = [p for p in state.rglob("state.json") if p.parent.name == "r1"]
        saved.write_bytes(flipped(saved.read_bytes(), "number"))  # still JSON: only its check can tell
        named = "restore 'r1'"
    else:
        legacy = location / "_topicvault" / "restores" / "old" / "state.json"
        legacy.parent.mkdir(parents=True)
        legacy.write_bytes(b'{"restore_id": "old", "target_bootstrap": ')
        named = "restore 'old'"
    out = run_cli("verify", str(location), "--state", str(state))
    warnings = [line for line in out.splitlines() if line.startswith("warning: damaged:")]
    assert len(warnings) == 1 and named in warnings[0], out
    assert f"ok: {len(keys)} objects, 120 records in 2 partitions" in out  # the data is whole: exit 0
    out = run_cli("verify", str(location), "--state", str(state), "--strict", expect_exit=1)
    assert named in out and "verify --strict failed: 1 damaged files" in out
    report = json.loads(run_cli("verify", str(location), "--state", str(state), "--json"))
    assert report["ok"] and not report["ok_strict"] and len(report["damaged"]) == 1
    assert named in report["damaged"][0]


def test_verify_names_each_restore_record_damaged_at_each_fixed_place_and_a_resume_refuses_it(bootstrap, backed_up,
                                                                                           tmp_path):
    topic, location, keys = backed_up
    state = tmp_path / "restore-state"
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
            "--restore-id", "r1", "--state", str(state)]
    run_cli(*args)
    saved = {p.name: p for p in state.rglob("*.json") if p.parent.name == "r1"}
    assert sorted(saved) == ["offset-map.json", "state.json"]
    for name, path in sorted(saved.items()):
        intact = path.read_bytes()
        for where in PLACES:
            path.write_bytes(flipped(intact, where))
            report = json.loads(run_cli("verify", str(location), "--state", str(state), "--json"))
            assert report["ok"] and len(report["damaged"]) == 1, (name, where, report)
            assert "restore 'r1'" in report["damaged"][0] and name in report["damaged"][0], (name, where, report)
            if name == "state.json" and where in ("number", "string"):  # valid JSON: only the check tells
                out = run_cli(*args, expect_exit=1)
                assert_one_line_error(out, "restore 'r1'", "damaged", "new --restore-id")
        path.write_bytes(intact)
    assert json.loads(run_cli("verify", str(location), "--state", str(state), "--json"))["damaged"] == []
