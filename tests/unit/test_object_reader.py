"""Reading committed objects back: every check happens before the first record is handed on.

Restore produces what read_partition yields, so a record yielded from a bad object would be
a record produced. The objects here have a checksum that matches their commit entry, so
only the count and offset checks stand between them and the producer.
"""

from __future__ import annotations

import hashlib
import re

import pyarrow as pa
import pytest
from archivetools import store_object
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.envelope import Record, batch_to_records, records_to_batch
from topicvault.core.errors import CorruptObject
from topicvault.core.stores.locations import open_store
from topicvault.formats import FORMAT_NAMES, resolve_format
from topicvault.source.object_reader import read_partition


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_partition_reads_back_every_record_in_order_across_row_groups(tmp_path, name):
    store = open_store(str(tmp_path))
    count = 70_000 if name == "parquet" else 3_000  # Parquet: more than one row group
    first, first_records = store_object(store, f"a.{name}", list(range(count)), name)
    second, second_records = store_object(store, f"b.{name}", [count, count + 5, count + 6], name)
    batches = list(read_partition(store, [second, first]))
    assert [r for b in batches for r in batch_to_records(b)] == first_records + second_records


@pytest.mark.parametrize(
    "lie, message",
    [
        ({"records": 4}, "holds 3 records"),
        ({"first_offset": 9}, "holds 3 records (offsets 10..12)"),
        ({"last_offset": 13}, "but its commit says 3 (10..13)"),
    ],
)
def test_object_that_disagrees_with_its_commit_yields_nothing(tmp_path, lie, message):
    store = open_store(str(tmp_path))
    entry, _ = store_object(store, "x.parquet", [10, 11, 12])
    fields = {**entry.__dict__, **lie}
    reader = read_partition(store, [ObjectEntry(**fields)])
    with pytest.raises(CorruptObject, match=re.escape(message)):
        next(reader)


def test_object_with_descending_offsets_yields_nothing(tmp_path):
    store = open_store(str(tmp_path))
    entry, _ = store_object(store, "x.parquet", [10, 12, 11, 13])
    with pytest.raises(CorruptObject, match="out of offset order"):
        next(read_partition(store, [entry]))


def test_changed_object_yields_nothing(tmp_path):
    store = open_store(str(tmp_path))
    entry, _ = store_object(store, "x.parquet", [10, 11, 12])
    store_object(store, "y.parquet", [10, 11, 12, 13])
    store.put("x.parquet", store.get("y.parquet"))
    with pytest.raises(CorruptObject, match="checksum"):
        next(read_partition(store, [entry]))


def test_large_records_are_decoded_a_few_mib_at_a_time(tmp_path):
    # A restore worker turns each decoded batch into Python bytes for the producer: 50,000
    # records of 2 KB at once held hundreds of MiB (issue #20 item 4).
    store = open_store(str(tmp_path))
    records = [Record("t", 0, o, b"k", bytes([o % 251]) * 2048, 1_000 + o, 0, ()) for o in range(12_000)]
    data = resolve_format("parquet").write(pa.Table.from_batches([records_to_batch(records)]))
    store.put("big.parquet", data)
    entry = ObjectEntry("big.parquet", "t", 0, 0, 11_999, 12_000, len(data), 1_000, 12_999, hashlib.sha256(data).hexdigest())
    batches = list(read_partition(store, [entry]))
    assert [r for b in batches for r in batch_to_records(b)] == records
    assert max(b.nbytes for b in batches) <= 16 * 2**20, [b.nbytes for b in batches]
