"""The ObjectFormat interface and the physical record shape every format shares.

Physical shape (all formats): key (bytes|null), value (bytes|null), headers (ordered list of
{key: string, value: bytes|null}), metadata {topic, partition, offset, timestamp (int64 Kafka
milliseconds), timestampType}.
"""

from __future__ import annotations

import gzip
import json
import zlib
from abc import ABC, abstractmethod
from typing import Iterator, Sequence

import pyarrow as pa

from ..core.errors import CorruptObject

METADATA_TYPE = pa.struct(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("timestampType", pa.int32()),
    ]
)


class ObjectWriter(ABC):
    """Builds one object from envelope batches added in record order; the bytes equal the
    format's `write` of the same records, however they were batched."""

    @abstractmethod
    def add(self, batch: pa.RecordBatch, sizes: Sequence[int]) -> None:
        """Append the next records; `sizes` holds each one's payload bytes (core.envelope.record_sizes)."""

    @abstractmethod
    def finish(self) -> bytes:
        """The complete object."""


class BufferedWriter(ObjectWriter):
    """Keeps the batches and encodes them at `finish` (formats that cannot encode as records
    arrive; Parquet can, by row group, so an object's records are not held twice)."""

    def __init__(self, object_format: "ObjectFormat") -> None:
        self._format = object_format
        self._batches: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch, sizes: Sequence[int]) -> None:
        self._batches.append(batch)

    def finish(self) -> bytes:
        from ..core.envelope import ARROW_SCHEMA

        table = pa.Table.from_batches(self._batches) if self._batches else ARROW_SCHEMA.empty_table()
        data = self._format.write(table)
        self._batches = []
        return data


class ObjectFormat(ABC):
    """Turns envelope tables into object bytes and back."""

    name: str
    extension: str
    # read_stream takes a memoryview as well as bytes and copies what its batches hold, so the
    # memory may be reused once the batches are taken (core.stores.store.ReadBuffer).
    reads_views: bool = False

    @abstractmethod
    def write(self, table: pa.Table) -> bytes:
        """Envelope table (ARROW_SCHEMA) -> complete, deterministic object bytes."""

    def open_writer(self) -> ObjectWriter:
        """A writer that builds one object from batches (see ObjectWriter)."""
        return BufferedWriter(self)

    @abstractmethod
    def read(self, data: bytes, object_key: str) -> pa.Table:
        """Object bytes -> envelope table (ARROW_SCHEMA), rows in file order; CorruptObject if damaged."""

    def read_stream(self, data: bytes, object_key: str, batch_records: int,
                    batch_bytes: int | None = None) -> tuple[pa.Array, Iterator[pa.RecordBatch]]:
        """The object's offsets (int64, file order), and its records as envelope batches of about
        `batch_records` (and about `batch_bytes` decoded, if given; Parquet's may hold up to half
        as many again, so that a row group is read in even batches), decoded as they are taken
        where the format allows (Parquet)."""
        table = self.read(data, object_key)
        size = records_per_batch(batch_records, batch_bytes, table.nbytes, table.num_rows)
        return table.column("offset").combine_chunks(), iter(table.to_batches(max_chunksize=size))

    def corrupt(self, object_key: str, reason: object) -> CorruptObject:
        """The error for bytes that cannot be read back completely."""
        return corrupt_object(object_key, self.name, reason)


def records_per_batch(batch_records: int, batch_bytes: int | None, total_bytes: int, total_records: int) -> int:
    """At most `batch_records`, and about `batch_bytes` of records whose decoded size averages
    total_bytes / total_records (at least one record)."""
    if batch_bytes is None or total_records == 0:
        return batch_records
    return max(1, min(batch_records, int(batch_bytes * total_records / max(total_bytes, 1))))


def corrupt_object(object_key: str, kind: str, reason: object) -> CorruptObject:
    """The error for an object that is not a complete `kind` file."""
    return CorruptObject(
        f"object {object_key} is not a complete {kind} file ({reason}): it is truncated or damaged; "
        "restore it from another copy or exclude it"
    )


# The most any one decompression may inflate to (a .gz/.zst/.snappy object, an Avro block, a
# Parquet row group): far above what topicvault writes (objects rotate at --max-bytes, 64 MiB
# of payload by default; Parquet row groups at 8 MiB, Avro blocks at 16 KB, plus one record),
# low enough that a decompression bomb (1000:1 and more) cannot exhaust a worker's memory.
# Where the compressed data states its inflated size (Parquet metadata, a zstd frame header, a
# raw snappy block's preamble) it is checked before anything is inflated; elsewhere the
# inflating stops one byte past the cap.
MAX_INFLATED_BYTES = 1 << 30
# The largest record (key, value and headers) a decoded block may hold: Kafka brokers refuse
# records above message.max.bytes (1 MiB by default; topicvault's restore producer takes 16 MiB
# unless -X message.max.bytes says more), so a block inflating past this and its neighbours'
# few KB is no record Kafka held. Avro blocks (a sync interval of records, 16-64 KB, plus one)
# are bounded by it, so a bomb in one is refused after at most this much was inflated.
MAX_RECORD_BYTES = 128 * 1024 * 1024
MAX_BLOCK_BYTES = MAX_RECORD_BYTES + 16 * 1024 * 1024
# Inflating goes in steps of this much, each counted: never a whole bomb in one call.
INFLATE_STEP_BYTES = 16 * 1024 * 1024


class InflatesTooMuch(CorruptObject):
    """Compressed data that inflates (or says it does) beyond MAX_INFLATED_BYTES."""


def inflate_limit_error(object_key: str, limit: int = MAX_INFLATED_BYTES) -> InflatesTooMuch:
    """The one-line error for an object (or part of one) that inflates beyond `limit`."""
    return InflatesTooMuch(
        f"object {object_key} inflates to more than {limit:,} bytes (a decompression bomb, or far larger than "
        "topicvault writes): it is not read; check where it came from, or exclude it"
    )


def check_inflated_size(size: int, object_key: str, limit: int = MAX_INFLATED_BYTES) -> None:
    """Refuse data that inflates (or states it inflates) to more than `limit` bytes."""
    if size > limit:
        raise inflate_limit_error(object_key, limit)


def snappy_stated_size(block: bytes | memoryview) -> int:
    """The inflated size a raw snappy block states in its preamble (a little-endian varint)."""
    size = shift = 0
    for at in range(min(len(block), 5)):
        size |= (block[at] & 0x7F) << shift
        if not block[at] & 0x80:
            return size
        shift += 7
    raise ValueError("a snappy block's length preamble is damaged")


def inflate_bounded(inflater, data: bytes, object_key: str, limit: int) -> bytearray:
    """What a zlib-style `inflater` (decompress(data, max_length), unconsumed_tail) makes of `data`,
    in steps of INFLATE_STEP_BYTES, refused (InflatesTooMuch) once it passes `limit`."""
    out = bytearray()
    while True:
        chunk = inflater.decompress(data, INFLATE_STEP_BYTES)
        out += chunk
        check_inflated_size(len(out), object_key, limit)
        data = inflater.unconsumed_tail
        if not data and len(chunk) < INFLATE_STEP_BYTES:
            return out


def parse_json(text: str | bytes, object_key: str):
    """json.loads, with JSON nested too deeply for the parser a one-line CorruptObject (not a
    RecursionError); other errors (ValueError) are the caller's, as json.loads raises them."""
    try:
        return json.loads(text)
    except RecursionError:
        raise CorruptObject(f"object {object_key} holds JSON nested too deeply to parse: it is not read; "
                            "check where it came from, or exclude it") from None


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no file name, mtime 0)."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def gunzip_bytes(data: bytes, object_key: str, kind: str, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """Decompress every gzip member of `data`, at most `limit` bytes in all; CorruptObject on
    truncation or CRC errors, InflatesTooMuch for an object that would inflate beyond `limit`."""
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)  # gzip framing; checks each member's CRC and length
        try:
            out += inflate_bounded(inflater, data, object_key, limit - len(out))
        except zlib.error as exc:
            raise corrupt_object(object_key, kind, exc) from None
        except InflatesTooMuch:
            raise inflate_limit_error(object_key, limit) from None
        if not inflater.eof:
            raise corrupt_object(object_key, kind, "the gzip stream is cut off")
        data = inflater.unused_data
        if not data.strip(b"\0"):
            break  # zero padding after the last member, as gzip.decompress accepts
    return bytes(out)


def to_rows(table: pa.Table) -> list[dict]:
    """Envelope table -> physical-shape dicts (timestamp as int64 ms)."""
    from ..core.envelope import timestamps_ms

    columns = {name: table.column(name).to_pylist() for name in ("key", "value", "topic", "partition", "offset",
                                                                  "timestampType", "headers")}
    millis = timestamps_ms(table).to_pylist()
    return [
        {
            "key": columns["key"][i],
            "value": columns["value"][i],
            "headers": columns["headers"][i] or [],
            "metadata": {
                "topic": columns["topic"][i],
                "partition": columns["partition"][i],
                "offset": columns["offset"][i],
                "timestamp": millis[i],
                "timestampType": columns["timestampType"][i],
            },
        }
        for i in range(table.num_rows)
    ]


def from_rows(rows: list[dict]) -> pa.Table:
    """Physical-shape dicts -> envelope table."""
    from ..core.envelope import batch_from_columns

    batch = batch_from_columns(
        keys=[r["key"] for r in rows],
        values=[r["value"] for r in rows],
        topics=[r["metadata"]["topic"] for r in rows],
        partitions=[r["metadata"]["partition"] for r in rows],
        offsets=[r["metadata"]["offset"] for r in rows],
        timestamps_ms=[r["metadata"]["timestamp"] for r in rows],
        timestamp_types=[r["metadata"]["timestampType"] for r in rows],
        headers=[[(h["key"], h["value"]) for h in r["headers"]] for r in rows],
    )
    return pa.Table.from_batches([batch])
