"""Read a topic-partition's committed objects back as envelope batches, in offset order."""

from __future__ import annotations

import hashlib
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.commits import ObjectEntry
from ..core.envelope import ARROW_SCHEMA
from ..core.errors import CorruptObject
from ..core.store import ObjectStore
from ..formats import extension_of, format_for_extension

READ_BATCH_RECORDS = 50_000


def read_object(store: ObjectStore, entry: ObjectEntry) -> pa.Table:
    """Read one committed object and check it against its commit entry (checksum, count, offsets)."""
    return pa.Table.from_batches(list(read_object_batches(store, entry)), schema=ARROW_SCHEMA)


def read_object_batches(store: ObjectStore, entry: ObjectEntry) -> Iterator[pa.RecordBatch]:
    """One committed object's records as batches, checked against its commit entry first.

    The checksum, the record count and the offsets (first, last, ascending) are all checked
    before the first record is yielded, so a damaged object stops a restore before any of
    its records is produced; the records themselves are decoded a batch at a time.
    """
    data = store.get(entry.key)
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise CorruptObject(
            f"object {entry.key} does not match the checksum its commit recorded: it was changed or damaged; "
            "restore stops before producing anything of it"
        )
    offsets, batches = format_for_extension(extension_of(entry.key)).read_stream(data, entry.key, READ_BATCH_RECORDS)
    del data  # the reader keeps what it still needs
    count = len(offsets)
    first, last = (offsets[0].as_py(), offsets[-1].as_py()) if count else (None, None)
    if (count, first, last) != (entry.records, entry.first_offset, entry.last_offset):
        raise CorruptObject(
            f"object {entry.key} holds {count} records (offsets {first}..{last}) but its commit "
            f"says {entry.records} ({entry.first_offset}..{entry.last_offset})"
        )
    if count > 1 and not pc.all(pc.greater(offsets.slice(1), offsets.slice(0, count - 1))).as_py():
        raise CorruptObject(f"object {entry.key} holds records out of offset order")
    del offsets
    yield from batches


def read_partition(store: ObjectStore, entries: list[ObjectEntry]) -> Iterator[pa.RecordBatch]:
    """Yield a topic-partition's records in offset order, one object at a time.

    Each object is checked before any of its records is yielded (see read_object_batches), so
    a corrupt object stops the restore before producing past the corruption. Objects are read
    lazily: a consumer that stops early never reads the rest.
    """
    previous_last = -1
    for entry in sorted(entries, key=lambda e: e.first_offset):
        if entry.first_offset <= previous_last:
            raise CorruptObject(f"object {entry.key} overlaps the previous object (offset {entry.first_offset})")
        previous_last = entry.last_offset
        yield from read_object_batches(store, entry)
