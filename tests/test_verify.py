"""`topicvault verify`: passes on a good backup, names the object when one is altered or deleted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clitools import run_cli
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
