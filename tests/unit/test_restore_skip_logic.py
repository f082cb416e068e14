"""The pure-logic half of tests/integration/test_restore_skip.py (its docstring covers both halves):
Issue #19 item 2: `restore --on-error skip` leaves out objects it cannot read, names them, restores the rest.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pytest
from archivetools import store_object
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.envelope import batch_to_records
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.source.object_reader import check_on_error, read_partition
from topicvault.source.restore.offset_map import OffsetMap, without_holes


def test_skip_leaves_out_whole_unreadable_objects_and_reads_on(tmp_path):
    store = open_store(str(tmp_path))
    first, first_records = store_object(store, "a.parquet", list(range(0, 10)))
    damaged, _ = store_object(store, "b.parquet", list(range(10, 20)))
    missing, _ = store_object(store, "c.parquet", list(range(20, 30)))
    undecodable = ObjectEntry("d.parquet", "t", 0, 30, 39, 10, 4, 0, 0, hashlib.sha256(b"junk").hexdigest())
    store.put("d.parquet", b"junk")  # its checksum matches: only decoding finds it out
    last, last_records = store_object(store, "e.parquet", list(range(40, 50)))
    data = bytearray(store.get("b.parquet"))
    data[len(data) // 2] ^= 0xFF
    store.put("b.parquet", bytes(data))
    store.delete("c.parquet")
    entries = [first, damaged, missing, undecodable, last]

    with pytest.raises(TopicvaultError, match="b.parquet does not match the checksum"):
        list(read_partition(store, entries))  # stop: the default
    skipped: list[tuple[str, str]] = []
    batches = list(read_partition(store, entries, lambda entry, reason: skipped.append((entry.key, reason))))
    assert [r for b in batches for r in batch_to_records(b)] == first_records + last_records
    assert [key for key, _ in skipped] == ["b.parquet", "c.parquet", "d.parquet"]
    assert "checksum" in skipped[0][1] and "not found" in skipped[1][1] and "not a complete parquet" in skipped[2][1]


def test_offset_map_marks_holes_and_translation_treats_them_as_gaps():
    offset_map = OffsetMap("s", 0, "t", 100)
    offset_map.add_offsets(pa.array(range(0, 10), pa.int64()))
    offset_map.add_hole(10, 19)
    offset_map.add_offsets(pa.array(range(20, 30), pa.int64()))
    assert [offset_map.translate(o) for o in (9, 10, 15, 19, 20, 30)] == [109, 110, 110, 110, 110, 120]
    stored = OffsetMap.from_json(json.loads(json.dumps(offset_map.to_json())))
    assert stored.holes == [(10, 19)] and stored.ranges == offset_map.ranges
    assert offset_map.landed_at(list(range(100, 120))).holes == [(10, 19)]


def test_records_inside_holes_of_an_earlier_run_stay_out_and_holes_keep_offset_order():
    batch = pa.RecordBatch.from_pydict({"offset": pa.array(range(0, 30), pa.int64())})
    kept = [o for b in without_holes([batch.slice(0, 15), batch.slice(15)], [(10, 19), (25, 25)])
            for o in b.column("offset").to_pylist()]
    assert kept == [*range(0, 10), *range(20, 25), *range(26, 30)]
    assert [b.num_rows for b in without_holes([batch.slice(10, 10)], [(10, 19)])] == []  # no empty batches
    offset_map = OffsetMap("s", 0, "t", 0)
    offset_map.add_hole(30, 39)
    offset_map.add_hole(10, 19)  # an earlier run's hole, added when a resumed run meets a later one first
    assert offset_map.holes == [(10, 19), (30, 39)]


def test_on_error_takes_stop_or_skip():
    assert check_on_error("skip") == "skip"
    with pytest.raises(TopicvaultError, match="bad --on-error 'ignore': use stop .* or skip"):
        check_on_error("ignore")
