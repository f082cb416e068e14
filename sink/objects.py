"""Turn one topic-partition's envelope batches (in offset order) into stored objects.

The fused backup task and the `topicvault` DataFrame writer both go through
`write_objects`, so the same records always become byte-identical objects under identical
keys, however the incoming batches happen to be cut: rotation is decided per record.

A committed object is never overwritten. Every key carries the writing run's id (see
keys.codec.RUN_ID_PATTERN), so two runs (racing backups, a leftover executor of a killed run,
a re-run after a crash) never share a key; and every object is written only if absent, so
even a late task attempt of the same run cannot replace an object: a retried attempt that
finds its own key already holding the same bytes (its earlier attempt's) goes on.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from concurrent.futures import Future
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ..core.archive.commits import ObjectEntry
from ..core.crypto import Keyring, ObjectBinding, is_sealed, seal, unseal
from ..core.envelope import record_sizes, timestamps_ms
from ..core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from ..core.local.faults import crash_after, crash_now
from ..core.rotation import Rotation, cut_points
from ..core.stores.store import ObjectStore
from ..formats import ObjectFormat
from ..formats.saved_registry import count_schema_ids
from ..keys import KeyCodec


def write_objects(
    batches: Iterable[pa.RecordBatch],
    store: ObjectStore,
    codec: KeyCodec,
    object_format: ObjectFormat,
    rotation: Rotation,
    *,
    run_id: str,
    keyring: Keyring | None = None,
) -> list[ObjectEntry]:
    """Write the batches of one topic-partition as rotated objects named for `run_id`; return
    their entries. Re-running with the same run id and records writes the same keys and bytes
    (with a `keyring`, objects are encrypted by its sealing key: same keys, fresh ciphertext)."""
    objects = PartitionObjects(store, codec, object_format, rotation, run_id=run_id, keyring=keyring)
    for batch in batches:
        objects.add(batch)
    return objects.finish()


# Runs one object's store elsewhere (e.g. on a thread), told the payload it holds meanwhile.
StoreElsewhere = Callable[[Callable[[], ObjectEntry], int], "Future[ObjectEntry]"]


class PartitionObjects:
    """The objects of one topic-partition being written: fed its batches in offset order, it
    stores each object as soon as rotation closes it, so only the open one is held in memory.

    A task that reads many partitions keeps one of these per partition (see sink.backup); it
    gives `store_elsewhere`, so that storing a closed object (an upload, fsyncs) does not hold
    up the read."""

    def __init__(self, store: ObjectStore, codec: KeyCodec, object_format: ObjectFormat, rotation: Rotation,
                 *, run_id: str, keyring: Keyring | None = None, store_elsewhere: StoreElsewhere | None = None) -> None:
        self.store, self.codec, self.object_format, self.rotation, self.run_id = (
            store, codec, object_format, rotation, run_id)
        self.keyring = keyring  # with a sealing key, every object is encrypted (core.crypto)
        self._store_elsewhere = store_elsewhere
        self._stored: list[ObjectEntry | Future[ObjectEntry]] = []  # in offset order
        self._stored_count = 0  # objects whose store completed (the crash hook counts them)
        self._count_lock = threading.Lock()
        self._crash_at = crash_after("backup.object")
        self._time_format = codec.time_format()
        self._building: _OpenObject | None = None
        self._open_bucket: str | None = None

    @property
    def open_payload(self) -> int:
        """Payload bytes of the object not yet stored (what this partition holds in memory)."""
        return self._building.payload if self._building else 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Append the partition's next records; store every object they complete."""
        if batch.num_rows == 0:
            return
        sizes = record_sizes(batch)
        buckets = pc.strftime(batch.column("timestamp"), format=self._time_format).to_pylist() if self._time_format else None
        building = self._building
        filled = (building.records, building.payload) if building else (0, 0)
        start = 0
        for cut in cut_points(sizes, *filled, self.rotation, buckets, self._open_bucket):
            if cut > start:
                building = building or _OpenObject(self.object_format)
                building.add(batch.slice(start, cut - start), sizes[start:cut])
            self._store(building)
            building, start = None, cut
        building = building or _OpenObject(self.object_format)
        building.add(batch.slice(start), sizes[start:])
        self._building = building
        self._open_bucket = buckets[-1] if buckets else None

    def close(self) -> None:
        """Store the open object, if any (elsewhere, when the writer was given where)."""
        if self._building:
            self._store(self._building)
            self._building = None

    def finish(self) -> list[ObjectEntry]:
        """Store the open object, if any; return the entries of every object stored, in offset order."""
        self.close()
        return self.stored_entries()

    def stored_entries(self) -> list[ObjectEntry]:
        """The entries of the objects stored, in offset order, once their stores completed (a
        store that failed raises here)."""
        return [item.result() if isinstance(item, Future) else item for item in self._stored]

    def _store(self, building: "_OpenObject") -> None:
        if self._store_elsewhere is None:
            self._stored.append(self._store_now(building))
        else:
            self._stored.append(self._store_elsewhere(lambda: self._store_now(building), building.payload))

    def _store_now(self, building: "_OpenObject") -> ObjectEntry:
        entry = building.store(self.store, self.codec, self.run_id, self.keyring)
        with self._count_lock:  # stores of one partition may run on several threads
            self._stored_count += 1
            stored = self._stored_count
        if stored == self._crash_at:  # test hook: once, though later stores may still complete
            crash_now()
        return entry


class _OpenObject:
    """One object being built: its records go to the format's writer as they arrive, and what
    its commit entry needs is gathered on the way."""

    def __init__(self, object_format: ObjectFormat) -> None:
        self.object_format = object_format
        self.writer = object_format.open_writer()
        self.records = 0
        self.payload = 0
        # Set by the first add: the first record names the object.
        self.topic = ""
        self.partition = 0
        self.first_offset = 0
        self.first_timestamp_ms = 0
        self.last_offset = 0
        self.min_timestamp_ms = 0
        self.max_timestamp_ms = 0
        self.schema_ids: Counter = Counter()  # schema id -> keys and values in the wire format

    def add(self, batch: pa.RecordBatch, sizes: list[int]) -> None:
        """Append records; `sizes` holds each one's payload bytes."""
        millis = timestamps_ms(batch)
        bounds = pc.min_max(millis)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if self.records == 0:
            self.topic, self.partition = batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py()
            self.first_offset, self.first_timestamp_ms = batch.column("offset")[0].as_py(), millis[0].as_py()
            self.min_timestamp_ms, self.max_timestamp_ms = low, high
        self.min_timestamp_ms = min(self.min_timestamp_ms, low)
        self.max_timestamp_ms = max(self.max_timestamp_ms, high)
        self.last_offset = batch.column("offset")[-1].as_py()
        self.records += batch.num_rows
        self.payload += sum(sizes)
        self.schema_ids.update(count_schema_ids(batch))
        self.writer.add(batch, sizes)

    def store(self, store: ObjectStore, codec: KeyCodec, run_id: str, keyring: Keyring | None) -> ObjectEntry:
        """Finish the object, encrypt it whole with a keyring, store it under its key (only if
        absent) and return its commit entry."""
        data = self.writer.finish()
        key = codec.render(self.topic, self.partition, self.first_offset, self.object_format.extension,
                           timestamp_ms=self.first_timestamp_ms, run=run_id)
        binding = ObjectBinding(self.topic, self.partition, self.first_offset, self.last_offset, self.records)
        if keyring is None:
            put_once(store, key, data)
        else:
            data = put_once(store, key, seal(data, key, keyring.sealing, binding),
                            _same_records(data, key, keyring, binding))
        return ObjectEntry(
            key=key,
            topic=self.topic,
            partition=self.partition,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            records=self.records,
            bytes=len(data),
            min_timestamp_ms=self.min_timestamp_ms,
            max_timestamp_ms=self.max_timestamp_ms,
            sha256=hashlib.sha256(data).hexdigest(),
            key_id=keyring.sealing.key_id if keyring is not None else None,
            schema_ids=tuple(sorted(self.schema_ids.items())),
        )


def _same_records(plain: bytes, key: str, keyring: Keyring, binding: ObjectBinding) -> Callable[[bytes], bool]:
    """Whether stored bytes are an encrypted object holding exactly `plain` (an earlier attempt's:
    each attempt encrypts under a fresh data key, so only the plaintext can be compared)."""

    def same(stored: bytes) -> bool:
        try:
            return is_sealed(stored) and unseal(stored, key, keyring, binding) == plain
        except TopicvaultError:
            return False

    return same


def put_once(store: ObjectStore, key: str, data: bytes, same_content: Callable[[bytes], bool] | None = None) -> bytes:
    """Store `data` under `key` only if the key is free or already holds the same content; return
    the bytes the key holds (the checksum is taken over them).

    The same content is an earlier attempt of this very task (a Spark retry, or a put retried
    after a timeout that had landed); `same_content` compares (default: byte equality). Other
    content under a key of this run means this run read its range differently twice; the
    object may already be named by a commit, so it is left alone and the task fails (a new run
    writes under new keys).
    """
    try:
        store.put(key, data, if_none_match=True)
        return data
    except PreconditionFailed:
        pass
    try:
        existing = store.get(key)
        if (same_content or data.__eq__)(existing):
            return existing
    except ObjectNotFound:
        pass
    raise TopicvaultError(
        f"object {key} already exists in {store.uri} with other content: objects are never overwritten; "
        "nothing of this run is committed, run the backup again"
    )
