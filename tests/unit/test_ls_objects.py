"""`ls` shows objects per partition and the median object size (issue #18 item 7), in the
table and in --json. Commits are written with the library into a local directory: no services."""

from __future__ import annotations

import json

from clitools import run_cli
from topicvault.core.archive.commit_log import commit_with_checkpoint
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.stores.local_store import LocalStore

# Stored bytes of each partition's objects: p0 odd count, p1 even count, p2 one object.
SIZES = {0: [300, 100, 5_000], 1: [10, 40, 20, 1_000_000], 2: [7]}


def commit_objects(location: str, topic: str) -> None:
    store, state = LocalStore(location), BackupState()
    for sequence, (partition, sizes) in enumerate(sorted(SIZES.items()), start=1):
        objects = tuple(ObjectEntry(f"topic={topic}/partition={partition}/{n * 10:019d}.parquet", topic, partition,
                                    n * 10, n * 10 + 9, 10, size, 0, 0, "00") for n, size in enumerate(sizes))
        record = CommitRecord(sequence, sequence, (PartitionRange(topic, partition, 0, 10 * len(sizes)),), objects, {})
        commit_with_checkpoint(store, state, record)
        state.apply(record, "k")


def test_ls_shows_objects_and_median_object_size_per_partition(tmp_path):
    location = str(tmp_path / "loc")
    commit_objects(location, "orders")
    listing = json.loads(run_cli("ls", location, "--json"))
    rows = {p["partition"]: p for p in listing["partitions"]}
    assert {p: (r["objects"], r["median_object_bytes"]) for p, r in rows.items()} == {
        0: (3, 300), 1: (4, 30), 2: (1, 7)}
    # Over the whole location: 8 objects, sizes 7 10 20 40 | 100 300 5000 1000000.
    assert (listing["objects"], listing["median_object_bytes"]) == (8, 70)
    table = run_cli("ls", location)
    header, *lines = table.splitlines()
    columns = header.split()
    assert "objects" in columns and "median_object_bytes" in columns
    for line in lines[:3]:
        cells = dict(zip(columns, line.split()))
        partition = int(cells["partition"])
        assert cells["objects"] == str(rows[partition]["objects"])
        assert cells["median_object_bytes"] == f"{rows[partition]['median_object_bytes']:,}"
    assert "8 objects (median 70 bytes)" in table
