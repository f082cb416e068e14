"""Read a topic-partition's committed objects back as envelope batches, in offset order."""

from __future__ import annotations

import hashlib
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.commits import ObjectEntry
from ..core.errors import CorruptObject
from ..core.store import ObjectStore
from ..formats import extension_of, format_for_extension


def read_object(store: ObjectStore, entry: ObjectEntry) -> pa.Table:
    """Read one committed object and check it against its commit entry (checksum, count, offsets)."""
    data = store.get(entry.key)
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise CorruptObject(
            f"object {entry.key} does not match the checksum its commit recorded: it was changed or damaged; "
            "restore stops before producing anything of it"
        )
    table = format_for_extension(extension_of(entry.key)).read(data, entry.key)
    offsets = table.column("offset")
    if (
        table.num_rows != entry.records
        or offsets[0].as_py() != entry.first_offset
        or offsets[-1].as_py() != entry.last_offset
    ):
        raise CorruptObject(
            f"object {entry.key} holds {table.num_rows} records (offsets {offsets[0]}..{offsets[-1]}) but its commit "
            f"says {entry.records} ({entry.first_offset}..{entry.last_offset})"
        )
    return table


def read_partition(store: ObjectStore, entries: list[ObjectEntry]) -> Iterator[pa.RecordBatch]:
    """Yield a topic-partition's records in offset order, one object at a time.

    Each object is fully read and verified before any of its records is yielded, so a
    corrupt object stops the restore before producing past the corruption. Objects are read
    lazily: a consumer that stops early never reads the rest.
    """
    previous_last = -1
    for entry in sorted(entries, key=lambda e: e.first_offset):
        if entry.first_offset <= previous_last:
            raise CorruptObject(f"object {entry.key} overlaps the previous object (offset {entry.first_offset})")
        previous_last = entry.last_offset
        table = read_object(store, entry)
        offsets = table.column("offset")
        if table.num_rows > 1 and not pc.all(pc.greater(offsets.slice(1), offsets.slice(0, table.num_rows - 1))).as_py():
            raise CorruptObject(f"object {entry.key} holds records out of offset order")
        yield from table.to_batches(max_chunksize=50_000)
