"""Turn one topic-partition's envelope batches (in offset order) into stored objects.

The fused backup task and the `topicvault` DataFrame writer both go through
`write_objects`, so the same records always become byte-identical objects under identical
keys, however the incoming batches happen to be cut: rotation is decided per record.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.commits import ObjectEntry
from ..core.envelope import record_sizes, timestamps_ms
from ..core.errors import TopicvaultError
from ..core.faults import crash_after, crash_now
from ..core.store import ObjectStore
from ..formats import ObjectFormat
from ..keys import KeyCodec

DEFAULT_MAX_RECORDS = 500_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Rotation:
    """When an object is closed: at max_records records or before passing max_bytes of payload."""

    max_records: int = DEFAULT_MAX_RECORDS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_records < 1 or self.max_bytes < 1:
            raise TopicvaultError("--max-records and --max-bytes must be positive")


def cut_points(
    sizes: list[int],
    filled_records: int,
    filled_bytes: int,
    rotation: Rotation,
    buckets: list[str] | None = None,
    open_bucket: str | None = None,
) -> Iterator[int]:
    """Indices in `sizes` before which a new object starts, given what the open object holds.

    With `buckets` (each record's time bucket, see KeyCodec.time_format), an object also ends
    where the bucket changes, so a time-partitioned key names the folder of all its records.
    """
    records, payload, current = filled_records, filled_bytes, open_bucket
    for index, size in enumerate(sizes):
        bucket = buckets[index] if buckets is not None else None
        if records and (records >= rotation.max_records or payload + size > rotation.max_bytes or bucket != current):
            yield index
            records, payload = 0, 0
        records += 1
        payload += size
        current = bucket


def write_objects(
    batches: Iterable[pa.RecordBatch],
    store: ObjectStore,
    codec: KeyCodec,
    object_format: ObjectFormat,
    rotation: Rotation,
) -> list[ObjectEntry]:
    """Write the batches of one topic-partition as rotated objects; return their entries."""
    pending: list[pa.RecordBatch] = []
    pending_records = 0
    pending_bytes = 0
    entries: list[ObjectEntry] = []
    crash_at = crash_after("backup.object")
    time_format = codec.time_format()
    open_bucket: str | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        sizes = record_sizes(batch)
        buckets = pc.strftime(batch.column("timestamp"), format=time_format).to_pylist() if time_format else None
        start = 0
        for cut in cut_points(sizes, pending_records, pending_bytes, rotation, buckets, open_bucket):
            if cut > start:
                pending.append(batch.slice(start, cut - start))
            entries.append(_store_object(pending, store, codec, object_format))
            _maybe_crash(crash_at, len(entries))
            pending, pending_records, pending_bytes, start = [], 0, 0, cut
        pending.append(batch.slice(start))
        pending_records += batch.num_rows - start
        pending_bytes += sum(sizes[start:])
        open_bucket = buckets[-1] if buckets else None
    if pending_records:
        entries.append(_store_object(pending, store, codec, object_format))
        _maybe_crash(crash_at, len(entries))
    return entries


def _maybe_crash(crash_at: int | None, objects_stored: int) -> None:
    if crash_at is not None and objects_stored >= crash_at:
        crash_now()


def _store_object(
    batches: list[pa.RecordBatch], store: ObjectStore, codec: KeyCodec, object_format: ObjectFormat
) -> ObjectEntry:
    table = pa.Table.from_batches(batches)
    offsets = table.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    topic, partition = table.column("topic")[0].as_py(), table.column("partition")[0].as_py()
    millis = timestamps_ms(table)
    bounds = pc.min_max(millis)
    data = object_format.write(table)
    key = codec.render(topic, partition, first, object_format.extension, timestamp_ms=millis[0].as_py())
    store.put(key, data)
    return ObjectEntry(
        key=key,
        topic=topic,
        partition=partition,
        first_offset=first,
        last_offset=last,
        records=table.num_rows,
        bytes=len(data),
        min_timestamp_ms=bounds["min"].as_py(),
        max_timestamp_ms=bounds["max"].as_py(),
        sha256=hashlib.sha256(data).hexdigest(),
    )
